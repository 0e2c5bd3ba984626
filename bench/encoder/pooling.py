"""Where the embedding loses what the raw spectrum has: quantization, pooling, or the Transformer.

    python bench/encoder/pooling.py STORE [--states DIR] [--checkpoint DIR] [--seeds 0,1,2] [--max-epochs 60]
                                    [--score-split test|valid] [--slots 8,16,32] [--out DIR]

The same MLP heads as ``bpq evaluate`` (train on train, early stopping on valid, scored on test; with
``--score-split valid`` as ``bpq evaluate --score-split valid``: stopped on a hashed eighth of the train programs,
scored on valid, test unread) on representations that differ in one step each, from the raw spectrum to the
shipped embedding:

- ``raw``: the spectrum rows the encoder reads (P log-relative rows, and the module row for a
  ``log-relative+module`` encoder), flattened: float32 (N, P' x 56).
- ``quantized``: the same rows after the quantizer (each replaced by its centroids), flattened: what is left after
  quantization alone.
- ``raw-mean``: the raw rows mean-pooled over positions (N, 56): what mean pooling alone keeps of the raw rows.
- ``sub-embeddings``: the encoder's sub-embeddings of the codes, flattened over positions (N, P' x H).
- ``states``: PQ-BERT's final states, flattened over positions (N, P' x H): the Transformer without pooling.
- ``pqbert``: the embedding (mean of the final states, N x H).
- ``slots-K`` (``--slots K``): one slot per position instead of the mean, each final state reduced to K numbers by
  one principal-component map shared by the positions (fit on the heads' train items): (N, P' x K).

Scores: -Oz benefit MAE (points) on the store's test modules, by program kind, and with ``--states`` the best next
pass Top-1 on the split's states (heads trained on train states). Writes ``pooling-<encoder>.json``
(``pooling-<encoder>-valid.json`` with ``--score-split valid``) in --out (default bench/encoder/results).
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def representations(items, encoder) -> dict:
    import torch

    from behavioral_pq.embedding.spectrum import as_reaction

    rows = items.spectra
    if encoder.reaction != "log-relative":
        rows = as_reaction(items.autophase[:, None, :], rows, encoder.reaction)           # (N, P', 56)
    n, positions = rows.shape[:2]
    codes = encoder.codes(rows)                                                              # (N, P', M)
    quantized = encoder.quantizer.decode(codes.reshape(n * positions, -1)).reshape(n, positions, 56)
    model = encoder.model
    subs, states, pooled = [], [], []
    reads_rows = encoder.reads_spectrum          # a spectrum-input model reads the rows, and has no code tables
    with torch.inference_mode():
        for start in range(0, n, 256):
            if reads_rows:
                x = torch.from_numpy(np.ascontiguousarray(rows[start:start + 256], dtype=np.float32))
            else:
                x = torch.from_numpy(codes[start:start + 256].astype(np.int64))
                subs.append(torch.cat([t(x[..., m]) for m, t in enumerate(model.sub_embeddings)], -1)
                            .flatten(1).numpy())
            h = model.hidden_states(x)[:, 1:]                                               # (b, P', H)
            states.append(h.flatten(1).numpy())
            pooled.append(h.mean(dim=1).numpy())
    reps = {"raw": rows.reshape(n, -1), "quantized": quantized.reshape(n, -1).astype(np.float32),
            "raw-mean": rows.mean(axis=1), "states": np.concatenate(states), "pqbert": np.concatenate(pooled)}
    if subs:
        reps["sub-embeddings"] = np.concatenate(subs)
    return reps


def add_slots(reps: dict, sizes) -> None:
    """Add ``slots-K`` to every part's representations: each position's final state projected on the first K
    principal components of the train part's states (all positions pooled), float32 (N, P' x K)."""
    states = reps["train"]["states"]
    width = reps["train"]["pqbert"].shape[1]
    rows = states.reshape(-1, width)
    rows = rows[np.random.default_rng(0).permutation(len(rows))[:50_000]]
    center = rows.mean(axis=0)
    _, _, vt = np.linalg.svd(rows - center, full_matrices=False)
    for part in reps.values():
        positions = part["states"].reshape(len(part["states"]), -1, width) - center                # (N, P', H)
        for k in sizes:
            part[f"slots-{k}"] = (positions @ vt[:k].T).reshape(len(positions), -1).astype(np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--states", metavar="DIR")
    parser.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-epochs", type=int, default=60)
    parser.add_argument("--score-split", choices=("test", "valid"), default="test")
    parser.add_argument("--slots", default="", help="comma-separated K: add slots-K representations")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.reports.downstream import head_parts
    from behavioral_pq.tasks.datasets import module_items, state_items
    from behavioral_pq.tasks.estimators import BestPassClassifier, OzBenefitRegressor, TrainSettings, top_k_accuracy

    encoder = load_encoder(args.checkpoint)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = TrainSettings(max_epochs=args.max_epochs)
    kind_of = Corpus(args.store).program_kinds()
    slots = [int(k) for k in args.slots.split(",") if k]
    parts = head_parts(module_items(args.store, encoder.probe_set), kind_of, score_split=args.score_split)
    reps = {split: representations(part, encoder) for split, part in parts.items()}
    add_slots(reps, slots)
    y = {split: part.oz_benefit() for split, part in parts.items()}
    real = np.array([kind_of.get(g) == "real" for g in parts["test"].groups])
    result = {"store": str(Path(args.store).resolve()), "encoder": str(encoder.path), "seeds": seeds,
              "score_split": args.score_split,
              "items": {s: len(p) for s, p in parts.items()}, "oz": {}, "states": {}}
    for name in reps["test"]:
        runs = []
        for seed in seeds:
            model = OzBenefitRegressor(replace(settings, seed=seed)).fit(reps["train"][name], y["train"],
                                                                       reps["valid"][name], y["valid"])
            err = np.abs(model.predict(reps["test"][name]) - y["test"]) * 100
            runs.append({"all": float(err.mean()), "small": float(err[~real].mean()), "real": float(err[real].mean())})
        result["oz"][name] = {k: [r[k] for r in runs] for k in runs[0]}
        print(f"oz {name}: " + ", ".join(f"{k} {np.mean(v):.2f} ± {np.std(v):.2f}"
                                         for k, v in result["oz"][name].items()), file=sys.stderr)
    if args.states:
        sparts = head_parts(state_items(args.states), kind_of, score_split=args.score_split)
        sreps = {split: representations(part, encoder) for split, part in sparts.items()}
        add_slots(sreps, slots)
        sy = {split: part.next_pass_sets() for split, part in sparts.items()}
        sreal = np.array([kind_of.get(g) == "real" for g in sparts["test"].groups])
        result["items"]["states"] = {s: len(p) for s, p in sparts.items()}
        for name in sreps["test"]:
            runs = []
            for seed in seeds:
                model = BestPassClassifier(replace(settings, seed=seed), num_classes=125)
                model.fit(sreps["train"][name], sy["train"], sreps["valid"][name], sy["valid"])
                proba = model.predict_proba(sreps["test"][name])
                pick = lambda mask: top_k_accuracy(proba[mask], [sy["test"][i] for i in np.flatnonzero(mask)], 1)  # noqa: E731
                runs.append({"all": pick(np.ones(len(sreal), bool)) * 100, "small": pick(~sreal) * 100,
                             "real": pick(sreal) * 100})
            result["states"][name] = {k: [r[k] for r in runs] for k in runs[0]}
            print(f"states {name}: " + ", ".join(f"{k} {np.mean(v):.1f} ± {np.std(v):.1f}"
                                                 for k, v in result["states"][name].items()), file=sys.stderr)
    file_name = f"pooling-{encoder.path.name}{'-valid' if args.score_split == 'valid' else ''}.json"
    path = common.write_json(args.out / file_name, result)
    for task, title in (("oz", "-Oz benefit MAE (points)"), ("states", "best next pass from states, Top-1 %")):
        if not result[task]:
            continue
        print(f"\n{title}\n\n| representation | dims | all | small | real |\n|---|---:|---:|---:|---:|")
        for name, scores in result[task].items():
            dims = reps["test"][name].shape[1]
            print(f"| {name} | {dims} | " + " | ".join(f"{np.mean(scores[k]):.2f} ± {np.std(scores[k]):.2f}"
                                                    for k in ("all", "small", "real")) + " |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
