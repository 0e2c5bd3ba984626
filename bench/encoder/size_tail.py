"""Which reactions the embedding should carry next to its pooled states: the choice of the count poolings
``mean+counts`` and ``mean+changes``.

    python bench/encoder/size_tail.py STORE --states DIR [--score-split valid|test] [--seeds 0,1,2] [--max-epochs 60]
                                      [--only NAME,...] [--ir2vec] [--oz-only] [--out DIR]

On the shipped encoder's rows (its probe set and reaction), the same MLP heads as ``bpq evaluate`` (train on
train, early stopping on valid, scored on test; with ``--score-split valid``: stopped on a hashed eighth of the
train programs, scored on valid, test unread) and the linear probe (ridge / logistic, one penalty chosen by grouped
inner cross-validation) on:

- ``raw``: the rows the encoder reads, flattened: float32 (N, P' x 56);
- ``mean``: the mean of the final states (the embedding under pooling ``mean``, N x H);
- ``tail-ti``: the rows' log-relative instruction count alone (N, P');
- ``mean+ti``, ``mean+ti+blocks``, ``mean+ti+mem``, ``mean+size4``, ``mean+counts`` (pooling ``mean+counts``):
  the mean followed by the rows' reactions in TotalInsts; and TotalBlocks; and TotalMemInst; in the four size
  counts (TotalInsts, TotalBlocks, TotalFuncs, TotalMemInst); in those and NumAllocaInst, NumLoadInst,
  NumStoreInst, NumPHIInst (``encoder.COUNT_NAMES``);
- ``mean+changes`` (pooling ``mean+changes``): ``mean+counts`` with the probe rows' reactions as relative
  changes, ``expm1`` of the log-relative ones: the unit of the -Oz benefit;
- ``mean+raw``: the mean followed by the whole rows;
- ``autophase``, ``instcount``, ``raw-spectrum``: the field's baselines as ``bpq evaluate`` forms them (log1p of
  the module's counts; the probes' log-relative rows without the module row, flattened).

``--only`` keeps the named representations (the others are not fitted). ``--ir2vec`` adds ``ir2vec``: IR2Vec
program vectors (the optional extra behavioral-pq[ir2vec]; the states are replayed to read their IR, which takes
most of the run).

Scores: -Oz benefit MAE (points) on the split's modules, also by size bucket (over all modules and over the real
ones), and best next pass Top-1 on its states. Writes
``size-tail-<split>.json`` in --out (default bench/encoder/results) and prints a Markdown table.
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

TAILS = {"ti": ("TotalInsts",), "ti+blocks": ("TotalInsts", "TotalBlocks"), "ti+mem": ("TotalInsts", "TotalMemInst"),
         "size4": ("TotalInsts", "TotalBlocks", "TotalFuncs", "TotalMemInst"),
         "counts": ("TotalInsts", "TotalBlocks", "TotalFuncs", "TotalMemInst", "NumAllocaInst", "NumLoadInst",
                    "NumStoreInst", "NumPHIInst")}


def representations(items, encoder) -> dict:
    from behavioral_pq.core.features import AUTOPHASE_FEATURES
    from behavioral_pq.reports.downstream import baseline_representations

    rows = encoder.reaction_rows(items.spectra, items.autophase)                            # (N, P', 56)
    mean = encoder.with_pooling("mean").embed_spectra(items.spectra, items.autophase, 256)  # (N, H)
    tail = {name: rows[:, :, [AUTOPHASE_FEATURES.index(f) for f in features]].reshape(len(rows), -1)
            for name, features in TAILS.items()}
    reps = {"raw": rows.reshape(len(rows), -1), "mean": mean, "tail-ti": tail["ti"]}
    for name, values in tail.items():
        reps[f"mean+{name}"] = np.hstack([mean, values])
    reps["mean+changes"] = np.hstack([mean, encoder.with_pooling("mean+changes").readout(rows)])
    reps["mean+raw"] = np.hstack([mean, reps["raw"]])
    baselines = baseline_representations(items)          # the field's baselines, as bpq evaluate forms them
    reps.update({name: baselines[name] for name in ("autophase", "instcount", "raw-spectrum")})
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in reps.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--states", metavar="DIR", required=True)
    parser.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-epochs", type=int, default=60)
    parser.add_argument("--score-split", choices=("test", "valid"), default="valid")
    parser.add_argument("--only", metavar="NAME,...", help="fit only these representations")
    parser.add_argument("--ir2vec", action="store_true", help="add IR2Vec program vectors (representation ir2vec)")
    parser.add_argument("--oz-only", action="store_true", help="score -Oz benefit only (no states)")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_buckets
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.reports.downstream import _fit_rows, head_parts, ir2vec_of_items
    from behavioral_pq.tasks.datasets import module_items, state_items
    from behavioral_pq.tasks.estimators import (BestPassClassifier, LinearBestPassProbe, LinearOzProbe,
                                                OzBenefitRegressor, TrainSettings, top_k_accuracy)

    encoder = load_encoder(args.checkpoint)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = TrainSettings(max_epochs=args.max_epochs)
    kind_of = Corpus(args.store).program_kinds()
    result = {"store": str(Path(args.store).resolve()), "states": str(Path(args.states).resolve()),
              "encoder": str(encoder.path), "seeds": seeds, "score_split": args.score_split,
              "oz": {}, "states_top1": {}}

    def chosen(reps: dict, part, states=None) -> dict:
        if args.ir2vec:
            reps["ir2vec"], failed = ir2vec_of_items(args.store, part, states)
            result.setdefault("ir2vec_failed", []).append(failed)
        return {k: v for k, v in reps.items() if not args.only or k in args.only.split(",")}

    parts = head_parts(module_items(args.store, encoder.probe_set), kind_of, score_split=args.score_split)
    X = {split: chosen(representations(part, encoder), part) for split, part in parts.items()}
    y = {split: part.oz_benefit() for split, part in parts.items()}
    groups = {split: list(part.groups) for split, part in parts.items()}
    scored = parts["test"]
    slices = {"all": np.ones(len(scored), bool)}          # by size bucket, over every module and the real ones
    buckets = np.array(size_buckets(scored.instruction_count))
    real = np.array([kind_of.get(g) == "real" for g in scored.groups])
    for bucket in BUCKET_NAMES:
        slices[bucket] = buckets == bucket
        slices[f"real {bucket}"] = (buckets == bucket) & real
    slices = {k: v for k, v in slices.items() if v.any()}

    def by_slice(predictions: np.ndarray) -> dict:
        errors = np.abs(predictions - np.asarray(y["test"], np.float64)) * 100.0
        return {k: {"n": int(v.sum()), "mae": float(errors[v].mean())} for k, v in slices.items()}

    for name in X["test"]:
        x = {split: X[split][name] for split in X}
        models = [OzBenefitRegressor(replace(settings, seed=seed)).fit(x["train"], y["train"], x["valid"], y["valid"])
                  for seed in seeds]
        mlp = [model.score(x["test"], y["test"]) for model in models]
        probe = LinearOzProbe().fit(*_fit_rows(x, y, groups))
        linear = probe.score(x["test"], y["test"])
        result["oz"][name] = {"dims": int(x["test"].shape[1]), "mlp": mlp, "linear": linear,
                              "mlp_by_slice": [by_slice(model.predict(x["test"])) for model in models],
                              "linear_by_slice": by_slice(probe.predict(x["test"]))}
        print(f"oz {name}: MLP {np.mean(mlp):.2f} ± {np.std(mlp):.2f}, linear {linear:.2f}", file=sys.stderr)

    if not args.oz_only:
        sparts = head_parts(state_items(args.states), kind_of, score_split=args.score_split)
        X = {split: chosen(representations(part, encoder), part, args.states) for split, part in sparts.items()}
        y = {split: part.next_pass_sets() for split, part in sparts.items()}
        groups = {split: list(part.groups) for split, part in sparts.items()}
        for name in X["test"]:
            x = {split: X[split][name] for split in X}
            mlp = []
            for seed in seeds:
                model = BestPassClassifier(replace(settings, seed=seed), num_classes=125)
                model.fit(x["train"], y["train"], x["valid"], y["valid"])
                mlp.append(top_k_accuracy(model.predict_proba(x["test"]), y["test"], 1) * 100)
            linear = LinearBestPassProbe(125).fit(*_fit_rows(x, y, groups)).score(x["test"], y["test"]) * 100
            result["states_top1"][name] = {"mlp": mlp, "linear": linear}
            print(f"states {name}: MLP {np.mean(mlp):.1f} ± {np.std(mlp):.1f}, linear {linear:.1f}", file=sys.stderr)

    file_name = (f"size-tail-{args.score_split}{'-' + args.only.replace(',', '-') if args.only else ''}"
                 f"{'-oz' if args.oz_only else ''}.json")
    path = common.write_json(args.out / file_name, result)
    print("\n| representation | dims | -Oz MAE, MLP | -Oz MAE, linear | states Top-1, MLP | states Top-1, linear |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, oz in result["oz"].items():
        st = result["states_top1"].get(name, {"mlp": [np.nan], "linear": np.nan})
        print(f"| {name} | {oz['dims']} | {np.mean(oz['mlp']):.2f} ± {np.std(oz['mlp']):.2f} | {oz['linear']:.2f} | "
              f"{np.mean(st['mlp']):.1f} ± {np.std(st['mlp']):.1f} | {st['linear']:.1f} |")
    print("\n-Oz MAE by slice of the scored split (MLP: mean over seeds / linear)\n\n| representation | "
          + " | ".join(f"{k} ({v.sum()})" for k, v in slices.items()) + " |\n|---|" + "---:|" * len(slices))
    for name, oz in result["oz"].items():
        cells = [f"{np.mean([run[k]['mae'] for run in oz['mlp_by_slice']]):.2f} / {oz['linear_by_slice'][k]['mae']:.2f}"
                 for k in slices]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
