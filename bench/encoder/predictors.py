"""Saved predictors scored on a store's held-out split, by program kind and size bucket, next to the prior.

    python bench/encoder/predictors.py STORE [--split test] [--best-pass NAME=DIR ...] [--oz NAME=DIR ...]
                                       [--out DIR]

``NAME=DIR`` names a predictor folder (``bpq train``); ``shipped`` alone is the shipped one. A predictor sits on
the shipped encoder unless ``--encoder NAME=CHECKPOINT`` says which one it was trained on (to compare predictors
of two encoders, e.g. an old checkpoint and a new one); every encoder's probe set needs spectra in the store, and
all rows are scored on the split's labelled modules as built that have spectra for every probe set involved:

- best-pass: Top-1 of the best *next* pass (125 classes, what the predictor is trained for) and Top-1 of the
  paper's task (best pass of the module as built among the 124 passes: the predictor's top pass that is one).
- oz-benefit: mean absolute error in points of ``(IC0 - IC_Oz) / IC0``.
- with ``--states DIR`` (``bpq corpus states``), best-pass predictors are also scored on the split's intermediate
  states (best next pass, Top-1), by program kind; only those whose encoder has the states' probe set.
- prior: the train split's most frequent class, and its mean -Oz benefit (the constant baselines). With
  ``--prior hindsight`` the scored split's own most frequent class and mean instead: the best constant in
  hindsight, at least as good as any constant a train split could give (for a store of held-out projects only).

Writes ``predictors-SPLIT.json`` in --out (default bench/encoder/results) and prints Markdown tables.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


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
    parser.add_argument("--encoder", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="the encoder the predictors named NAME sit on (default: the shipped one)")
    parser.add_argument("--states", metavar="DIR", help="state folder: also score best next pass on its states")
    parser.add_argument("--prior", choices=("train", "hindsight"), default="train",
                        help="the constant baselines from the train split, or from the scored split itself")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import slices
    from behavioral_pq.corpus.states import NUM_CLASSES, states_settings
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.datasets import embeddings, module_items, state_items
    from behavioral_pq.tasks.estimators import class_frequencies
    from behavioral_pq.tasks.predictors import load_predictor

    shipped = load_encoder()
    encoders = {name: load_encoder(path) for name, path in named(args.encoder).items()}
    probe_sets = {e.probe_set.hash: e.probe_set for e in [shipped, *encoders.values()]}
    per_set = {h: module_items(args.store, ps, splits=["train", args.split]) for h, ps in probe_sets.items()}
    shared = set.intersection(*(set(i.ids) for i in per_set.values()))
    for h, items in per_set.items():      # the same modules, in the same order, for every probe set
        order = {sha: k for k, sha in enumerate(items.ids)}
        per_set[h] = items.subset([order[sha] for sha in sorted(shared)])
    items = per_set[shipped.probe_set.hash]
    train, test = items.split("train"), items.split(args.split)
    if not len(test):
        print(f"{args.store}: no labelled {args.split} modules with spectra for "
              f"{', '.join(ps.name for ps in probe_sets.values())}", file=sys.stderr)
        return 2
    cache = {}

    def embedded(encoder, what="modules"):    # once per encoder (a fine-tuned predictor embeds with its own weights)
        key = (what, id(encoder) if encoder.fine_tuned else (str(encoder.path), encoder.pooling))
        if key not in cache:
            items = states if what == "states" else per_set[encoder.probe_set.hash].split(args.split)
            cache[key] = embeddings(items, encoder)
        return cache[key]

    states = state_items(args.states).split(args.split) if args.states else None
    next_sets, task1_sets = test.next_pass_sets(), test.best_pass_sets()
    oz = test.oz_benefit()
    kind_of = Corpus(args.store).program_kinds()
    masks = slices([kind_of.get(g, "small") for g in test.groups], test.instruction_count)

    constants = train if args.prior == "train" else test
    if not len(constants):
        print(f"{args.store}: no labelled train modules for the prior (--prior hindsight takes the constants from "
              f"the {args.split} split itself)", file=sys.stderr)
        return 2
    prior_next = class_frequencies(constants.next_pass_sets(), NUM_CLASSES)
    prior_task1 = class_frequencies(constants.best_pass_sets(), 124)
    rows = {"prior": {"next": np.tile(prior_next, (len(test), 1)), "task1": np.tile(prior_task1, (len(test), 1)),
                      "oz": np.full(len(test), float(constants.oz_benefit().mean()))}}

    def load(name, path, kind):
        return load_predictor(path, kind=kind, encoder=encoders.get(name, shipped))

    best_pass = {name: load(name, path, "best-pass") for name, path in named(args.best_pass).items()}
    for name, predictor in best_pass.items():
        proba = predictor.predict_embeddings(embedded(predictor.encoder))
        rows.setdefault(name, {}).update(next=proba, task1=proba[:, :124])
    for name, path in named(args.oz).items():
        predictor = load(name, path, "oz-benefit")
        rows.setdefault(name, {})["oz"] = predictor.predict_embeddings(embedded(predictor.encoder))

    result = {"store": str(Path(args.store).resolve()), "split": args.split, "train_items": len(train),
              "prior": args.prior,
              "probe_sets": [ps.name for ps in probe_sets.values()],
              "encoders": {name: str(e.path) for name, e in encoders.items()}, "slices": {}}
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
    if args.states:
        result["states"] = score_states(states, states_settings(args.states)["probe_set"]["hash"], best_pass,
                                        lambda encoder: embedded(encoder, "states"), kind_of, prior_next)
    common.write_json(args.out / f"predictors-{args.split}.json", result)

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
    if args.states:
        shown = [n for n in result["states"]["all"] if n != "items"]
        print(f"\nbest next pass from states, Top-1 % ({args.split} split)\n\n| slice | items | " + " | ".join(shown)
              + " |\n|---|---:|" + "---:|" * len(shown))
        for slice_name, entry in result["states"].items():
            print(f"| {slice_name} | {entry['items']} | " + " | ".join(
                "-" if entry[n] is None else f"{entry[n] * 100:.1f}" for n in shown) + " |")
    return 0


def score_states(states, probe_hash, predictors, embedded, kind_of, prior_next) -> dict:
    """Top-1 of the best next pass on ``states``, by program kind, for the best-pass predictors whose encoder has
    the states' probe set (``probe_hash``); the others get None. ``embedded(encoder)``: the states' embeddings."""
    sets = states.next_pass_sets()
    kinds = [kind_of.get(g, "small") for g in states.groups]
    masks = {"all": np.ones(len(states), bool), **{k: np.array([x == k for x in kinds]) for k in ("small", "real")}}
    scores = {"prior": np.tile(prior_next, (len(states), 1))}
    for name, predictor in predictors.items():
        fits = predictor.encoder.probe_set.hash == probe_hash
        scores[name] = predictor.predict_embeddings(embedded(predictor.encoder)) if fits else None
    return {slice_name: {"items": int(mask.sum()), **{
                name: None if row is None or not mask.any() else top1(row[mask], [sets[i] for i in np.flatnonzero(mask)])
                for name, row in scores.items()}} for slice_name, mask in masks.items()}

if __name__ == "__main__":
    sys.exit(main())
