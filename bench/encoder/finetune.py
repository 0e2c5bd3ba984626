"""Frozen embeddings against an encoder fine-tuned end to end, on the -Oz benefit of a store's held-out split.

    python bench/encoder/finetune.py STORE [--checkpoint DIR] [--seeds 0,1,2] [--split test] [--max-epochs 30]
                                     [--out DIR]

Both sides see the same items (the store's labelled modules with spectra for the encoder's probe set; train to
fit, valid for early stopping, the held-out split to score) and the same head (the shipped -Oz estimator's MLP:
D -> 256 -> 128 -> 64 -> 1, MAE loss):

- ``frozen``: the head on the encoder's embeddings (``OzBenefitRegressor``, what ``bpq train oz`` ships);
- ``fine-tuned``: the head and PQ-BERT trained together from the checkpoint's weights on the modules' codes
  (the quantizer stays fixed: codes are the input), the encoder at a tenth of the head's learning rate: what
  ``bpq train oz --fine-tune`` ships (:func:`behavioral_pq.tasks.finetune.fine_tune`, its default settings);
- ``prior``: the train split's mean benefit.

Mean absolute error in points of ``(IC0 - IC_Oz) / IC0``, per slice (kind x size bucket), mean and standard
deviation over head seeds. Writes ``finetune-SPLIT.json`` in --out (default bench/encoder/results) and prints a
Markdown table.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import slices
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.datasets import embeddings, module_items
    from behavioral_pq.tasks.estimators import OzBenefitRegressor, TrainSettings
    from behavioral_pq.tasks.finetune import FineTuneSettings, fine_tune

    encoder = load_encoder(args.checkpoint)
    items = module_items(args.store, encoder.probe_set, splits=["train", "valid", args.split])
    splits = np.array(items.splits)
    train, valid, test = splits == "train", splits == "valid", splits == args.split
    kinds = Corpus(args.store).program_kinds()
    y = np.asarray(items.oz_benefit(), np.float64)
    codes = encoder.model_inputs(items.spectra, items.autophase)
    rows = encoder.reaction_rows(items.spectra, items.autophase)
    extra = encoder.readout(rows)                   # what the pooling appends (the count tail), not tuned
    X = embeddings(items, encoder)
    masks = slices([kinds.get(h, "small") for h in np.array(items.ids)[test]], items.instruction_count[test])
    seeds = [int(s) for s in args.seeds.split(",")]
    scores = {"prior": [], "frozen": [], "fine-tuned": []}
    log = []
    for seed in seeds:
        start = time.perf_counter()
        frozen = OzBenefitRegressor(TrainSettings(seed=seed)).fit(X[train], y[train], X[valid], y[valid])
        predictions = {"prior": np.full(test.sum(), y[train].mean()), "frozen": frozen.predict(X[test])}
        frozen_seconds = time.perf_counter() - start
        start = time.perf_counter()
        head, model = fine_tune(OzBenefitRegressor(TrainSettings(seed=seed)), encoder, codes[train], y[train],
                                codes[valid], y[valid], FineTuneSettings(max_epochs=args.max_epochs),
                                extra=extra[train], valid_extra=extra[valid])
        tuned = encoder.with_model(model)
        predictions["fine-tuned"] = head.predict(tuned.embed_inputs(codes[test], 256, rows=rows[test]))
        log.append({"seed": seed, "frozen_seconds": frozen_seconds, "fine_tune_seconds": time.perf_counter() - start,
                    "fine_tune_epochs": len(head.history_), "fine_tune_best_epoch": head.best_epoch_,
                    "frozen_best_epoch": frozen.best_epoch_})
        for name, p in predictions.items():
            error = np.abs(p - y[test]) * 100.0
            scores[name].append({s: float(error[m].mean()) for s, m in masks.items()})
        print(f"seed {seed}: " + ", ".join(f"{n} {scores[n][-1]['all']:.2f}" for n in scores), flush=True)

    table = {name: {s: (float(np.mean([r[s] for r in runs])), float(np.std([r[s] for r in runs])))
                    for s in masks} for name, runs in scores.items()}
    result = {"config": {"store": str(Path(args.store).resolve()), "checkpoint": str(encoder.path),
                         "split": args.split, "seeds": seeds, "max_epochs": args.max_epochs,
                         "items": {"train": int(train.sum()), "valid": int(valid.sum()), "test": int(test.sum())},
                         "command": " ".join(sys.argv)},
              "runs": log, "mae_points": table, "slice_items": {s: int(m.sum()) for s, m in masks.items()}}
    path = common.write_json(args.out / f"finetune-{args.split}.json", result)
    print(f"\n-Oz benefit MAE (points), {args.split} split, mean ± std over seeds {seeds}\n")
    print("| slice | items | " + " | ".join(scores) + " |")
    print("|---|---:|" + "---:|" * len(scores))
    for s, m in masks.items():
        print(f"| {s} | {int(m.sum())} | " + " | ".join(f"{table[n][s][0]:.2f} ± {table[n][s][1]:.2f}"
                                                        for n in scores) + " |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
