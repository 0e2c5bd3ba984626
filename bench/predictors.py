"""Saved predictors scored on a store's held-out split, by program kind and size bucket, next to the prior.

    python bench/predictors.py STORE [--split test] [--best-pass NAME=DIR ...] [--oz NAME=DIR ...]
                               [--out bench/results]

``NAME=DIR`` names a predictor folder (``bpq train``); ``shipped`` alone is the shipped one. Every predictor must
sit on the shipped encoder (the store needs spectra for its probe set). Scores, on the split's labelled modules
as built (the ones with spectra):

- best-pass: Top-1 of the best *next* pass (125 classes, what the predictor is trained for) and Top-1 of the
  paper's task (best pass of the module as built among the 124 passes: the predictor's top pass that is one).
- oz-benefit: mean absolute error in points of ``(IC0 - IC_Oz) / IC0``.
- prior: the train split's most frequent class, and its mean -Oz benefit (the constant baselines).

Writes ``predictors-SPLIT.json`` and prints Markdown tables.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def top1(scores: np.ndarray, label_sets) -> float:
    predicted = np.argmax(scores, axis=1)
    return float(np.mean([p in s for p, s in zip(predicted, label_sets)])) if len(label_sets) else float("nan")


def named(items):
    out = {}
    for item in items:
        name, _, path = item.partition("=")
        out[name] = path or None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--split", default="test")
    parser.add_argument("--best-pass", action="append", default=[], metavar="NAME[=DIR]")
    parser.add_argument("--oz", action="append", default=[], metavar="NAME[=DIR]")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import slices
    from behavioral_pq.corpus.states import NUM_CLASSES
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.datasets import embeddings, module_items
    from behavioral_pq.tasks.estimators import class_frequencies
    from behavioral_pq.tasks.predictors import load_predictor

    encoder = load_encoder()
    items = module_items(args.store, encoder.probe_set, splits=["train", args.split])
    train, test = items.split("train"), items.split(args.split)
    if not len(test):
        print(f"{args.store}: no labelled {args.split} modules with spectra for {encoder.probe_set.name}",
              file=sys.stderr)
        return 2
    X = embeddings(test, encoder)
    next_sets, task1_sets = test.next_pass_sets(), test.best_pass_sets()
    oz = test.oz_benefit()
    kind_of = Corpus(args.store).program_kinds()
    masks = slices([kind_of.get(g, "small") for g in test.groups], test.instruction_count)

    prior_next = class_frequencies(train.next_pass_sets(), NUM_CLASSES)
    prior_task1 = class_frequencies(train.best_pass_sets(), 124)
    rows = {"prior": {"next": np.tile(prior_next, (len(test), 1)), "task1": np.tile(prior_task1, (len(test), 1)),
                      "oz": np.full(len(test), float(train.oz_benefit().mean()))}}
    def predict(path, kind):            # a fine-tuned predictor embeds with its own weights
        predictor = load_predictor(path, kind=kind, encoder=encoder)
        return predictor.predict_embeddings(embeddings(test, predictor.encoder) if predictor.encoder.fine_tuned else X)

    for name, path in named(args.best_pass).items():
        proba = predict(path, "best-pass")
        rows.setdefault(name, {}).update(next=proba, task1=proba[:, :124])
    for name, path in named(args.oz).items():
        rows.setdefault(name, {})["oz"] = predict(path, "oz-benefit")

    result = {"store": str(Path(args.store).resolve()), "split": args.split, "train_items": len(train),
              "probe_set": encoder.probe_set.name, "slices": {}}
    for slice_name, mask in masks.items():
        entry = {"items": int(mask.sum())}
        for name, row in rows.items():
            pick = np.flatnonzero(mask)
            scores = {}
            if "next" in row:
                scores["next_top1"] = top1(row["next"][pick], [next_sets[i] for i in pick])
                scores["task1_top1"] = top1(row["task1"][pick], [task1_sets[i] for i in pick])
            if "oz" in row:
                scores["oz_mae"] = float(np.abs(row["oz"][pick] - oz[pick]).mean() * 100) if len(pick) else None
            entry[name] = scores
        result["slices"][slice_name] = entry
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"predictors-{args.split}.json").write_text(json.dumps(result, indent=1))

    names = list(rows)
    for metric, title in (("task1_top1", "best pass as built, Top-1 %"), ("next_top1", "best next pass, Top-1 %"),
                          ("oz_mae", "-Oz benefit MAE (points)")):
        shown = [n for n in names if metric in result["slices"]["all"][n]]
        print(f"\n{title} ({args.split} split)\n\n| slice | items | " + " | ".join(shown) + " |")
        print("|---|---:|" + "---:|" * len(shown))
        for slice_name, entry in result["slices"].items():
            if not entry["items"]:
                continue
            scale = 1.0 if metric == "oz_mae" else 100.0
            print(f"| {slice_name} | {entry['items']} | " + " | ".join(
                f"{entry[n][metric] * scale:.2f}" if metric == "oz_mae" else f"{entry[n][metric] * scale:.1f}"
                for n in shown) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
