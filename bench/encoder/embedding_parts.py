"""Which parts the default embedding should hold: each candidate under the two simple heads that judge a fixed
representation, a ridge and a k-NN.

    python bench/encoder/embedding_parts.py STORE [--score-split cv|valid|test] [--checkpoint DIR]
                                            [--pca 4,8,16,32] [--out DIR]

On the shipped encoder's rows (its probe set and reaction), for the labelled modules of STORE with spectra:

- ``raw spectrum``, ``autophase``: the field's baselines as ``bpq evaluate`` forms them;
- ``count tail``: what pooling ``mean+changes`` appends to the encoder mean (N, 8 P');
- ``encoder mean``: the Transformer's part (N, H);
- ``shipped``: the embedding under the encoder's own pooling (``mean+changes``: the two above, N x (H + 8 P'));
- ``tail+pca<k>``: the count tail followed by the encoder mean's first k principal components (fitted on the rows
  the heads learn from; each head standardizes every value, so the encoder part weighs in k values instead of H).

Heads (``behavioral_pq.tasks.guidance.behavior.probe_representations``): a ridge regression with its penalty
chosen by inner cross-validation, and a k-NN regression (k=5, standardized, Euclidean), of the -Oz benefit
(MAE in points); and for the best pass of the module (its set of best single passes), the k-NN vote's Top-1
(``estimators.knn_top1``). Where the heads learn and are scored (``--score-split``): ``cv`` (the default, to
choose on) scores each train and valid project with heads fitted on the other train and valid projects, test
unread; ``valid`` fits on train and scores valid; ``test`` fits on train and valid and scores test (read once,
after choosing). MAE and Top-1 over all the scored modules, and by size bucket as well. ``--mlp-seeds`` adds,
on test, the MLP head the shipped -Oz predictor has (``bpq train oz``: fitted on train, stopped early on valid).
Writes ``embedding-parts-<split>.json`` in --out (default bench/encoder/results) and prints Markdown tables.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def fixed_parts(items, encoder) -> dict:
    """The candidates that need no fitting: name -> float64 (N, D)."""
    from behavioral_pq.reports.downstream import baseline_representations
    from behavioral_pq.tasks.guidance.behavior import count_tail

    shipped = encoder.embed_spectra(items.spectra, items.autophase, 256)                      # (N, D)
    hidden = encoder.model.config.hidden_size
    mean = (shipped[:, :hidden] if encoder.model_pooling == "mean"                             # (N, H)
            else encoder.with_pooling("mean").embed_spectra(items.spectra, items.autophase, 256))
    baselines = baseline_representations(items)
    reps = {"raw spectrum": baselines["raw-spectrum"], "autophase": baselines["autophase"],
            "count tail": count_tail(encoder, items.spectra, items.autophase), "encoder mean": mean,
            f"shipped ({encoder.pooling})": shipped}
    return {name: np.asarray(v, np.float64) for name, v in reps.items()}


def with_components(parts: dict, fit: np.ndarray, sizes) -> dict:
    """``parts`` and, for each k of ``sizes``, ``tail+pca<k>``: the count tail followed by the encoder mean's first
    k principal components, fitted on the rows ``fit`` bool (N,) alone."""
    from sklearn.decomposition import PCA

    out = dict(parts)
    for k in sizes:
        pca = PCA(n_components=k, random_state=0).fit(parts["encoder mean"][fit])
        out[f"tail+pca{k}"] = np.hstack([parts["count tail"], pca.transform(parts["encoder mean"])])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    parser.add_argument("--score-split", choices=("cv", "valid", "test"), default="cv")
    parser.add_argument("--pca", default="4,8,16,32", help="principal components of the encoder mean to try")
    parser.add_argument("--mlp-seeds", default="", metavar="S,...",
                        help="with --score-split test: also the MLP head of bpq train oz (early stopping on valid), "
                             "one run per seed")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_buckets
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.datasets import module_items
    from behavioral_pq.tasks.estimators import knn_top1
    from behavioral_pq.tasks.guidance.behavior import probe_representations

    encoder = load_encoder(args.checkpoint)
    group_of = Corpus(args.store).split_groups()      # a project's units and programs are one group
    splits = {"valid": ("train", "valid"), "test": ("train", "valid", "test"), "cv": ("train", "valid")}
    items = module_items(args.store, encoder.probe_set, splits=splits[args.score_split])
    split_of = np.array(items.splits)
    project = np.array([group_of[s].rsplit(":", 1)[-1] for s in items.ids])
    if args.score_split == "cv":      # each train or valid project scored by heads fitted on the others
        folds = [(project != name, project == name) for name in sorted(set(project))]
    else:
        folds = [(np.isin(split_of, splits[args.score_split][:-1]), split_of == args.score_split)]
    pca_sizes = [int(k) for k in args.pca.split(",") if k]
    parts = fixed_parts(items, encoder)
    benefit = np.asarray(items.oz_benefit(), np.float64)
    buckets = np.array(size_buckets(items.instruction_count))
    sets = items.best_pass_sets()
    scored_all = np.any([scored for _, scored in folds], axis=0)
    result = {"store": str(Path(args.store).resolve()), "encoder": str(encoder.path), "score_split": args.score_split,
              "modules": {"scored": int(scored_all.sum()),
                          "scored_by_bucket": {b: int((buckets[scored_all] == b).sum()) for b in BUCKET_NAMES}},
              "projects": {"fit": sorted(set(project[folds[0][0]])) if len(folds) == 1 else "the other projects",
                           "scored": sorted(set(project[scored_all]))},
              "oz": {}, "best_pass_knn_top1": {}}
    sums, hits = {}, {}               # per representation: summed errors (overall, by bucket), summed Top-1 hits
    for fit, scored in folds:
        reps = with_components(parts, fit, pca_sizes)
        fold = probe_representations(reps, benefit, np.flatnonzero(fit), np.flatnonzero(scored), buckets[scored])
        for name, r in fold.items():
            total = sums.setdefault(name, {"dim": r["dim"], "ridge": {}, "knn": {}})
            for head in ("ridge", "knn"):
                total[head]["all"] = total[head].get("all", 0.0) + r[head] * scored.sum()
                for b, mae in r[f"{head}_by_bucket"].items():
                    total[head][b] = total[head].get(b, 0.0) + mae * (buckets[scored] == b).sum()
            hits[name] = hits.get(name, 0.0) + scored.sum() * knn_top1(
                reps[name][fit], [sets[i] for i in np.flatnonzero(fit)], reps[name][scored],
                [sets[i] for i in np.flatnonzero(scored)], num_classes=124, k=5)
    if args.mlp_seeds:
        if args.score_split != "test":
            raise SystemExit("--mlp-seeds needs --score-split test (the MLP stops early on valid)")
        from behavioral_pq.tasks.estimators import OzBenefitRegressor, TrainSettings

        train, valid, test = (split_of == name for name in ("train", "valid", "test"))
        reps = with_components(parts, train | valid, pca_sizes)
        result["oz_mlp"] = {name: [OzBenefitRegressor(TrainSettings(seed=int(seed))).fit(
            x[train], benefit[train], x[valid], benefit[valid]).score(x[test], benefit[test])
            for seed in args.mlp_seeds.split(",")] for name, x in reps.items()}
    counts = result["modules"]["scored_by_bucket"]
    for name, total in sums.items():
        result["oz"][name] = {"dim": total["dim"], **{
            key: value for head in ("ridge", "knn") for key, value in (
                (head, total[head]["all"] / scored_all.sum()),
                (f"{head}_by_bucket", {b: total[head][b] / counts[b] for b in BUCKET_NAMES if counts[b]}))}}
        result["best_pass_knn_top1"][name] = 100 * hits[name] / scored_all.sum()
    path = common.write_json(args.out / f"embedding-parts-{args.score_split}.json", result)

    present = [b for b in BUCKET_NAMES if result["modules"]["scored_by_bucket"][b]]
    print(f"{result['modules']['scored']} {args.score_split} modules ({', '.join(result['projects']['scored'])})\n")
    print("| representation | dims | -Oz MAE ridge | -Oz MAE 5-NN | best pass 5-NN Top-1 | "
          + " | ".join(f"ridge / 5-NN {b} ({result['modules']['scored_by_bucket'][b]})" for b in present)
          + " |\n|---|---:|---:|---:|---:|" + "---:|" * len(present))
    for name, r in result["oz"].items():
        cells = [f"{r['ridge_by_bucket'][b]:.2f} / {r['knn_by_bucket'][b]:.2f}" for b in present]
        print(f"| {name} | {r['dim']} | {r['ridge']:.2f} | {r['knn']:.2f} | "
              f"{result['best_pass_knn_top1'][name]:.1f} | " + " | ".join(cells) + " |")
    for name, maes in result.get("oz_mlp", {}).items():
        print(f"MLP {name}: -Oz MAE {np.mean(maes):.2f} ± {np.std(maes):.2f}")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
