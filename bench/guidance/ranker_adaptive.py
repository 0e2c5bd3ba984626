"""Would a ranker that reads what the module showed choose better than one ranking? Simulated on measured rows.

    python bench/guidance/ranker_adaptive.py STORE --data TRAIN_ROWS [--picks 10,20,30] [--first 5,10]
        [--tau 1e-4,1e-3,1e-2] [--folds 3] [--seed 0] [--out FILE.json]

TRAIN_ROWS is a folder of pool rows (``bpq ranker measure``; clean rows: see ``measure --from``). The modules are
split into folds by project (the store's split groups). For each held-out module:

- ``fixed``: the greedy coverage order over the other folds' rows, one list for every module (as ``ranker-none``
  chooses, with the rows themselves as its scenarios instead of its prediction plus out-of-fold errors);
- ``adaptive-F-T``: the first F picks of that order, then one pick at a time for the other folds' rows reweighted by
  how close their gains on the picks so far are to the module's own (weights ``exp(-(d2 - min d2) / T)``, ``d2`` the
  mean squared difference): a choice that conditions on the module's measured behavior, at no extra compilation.

Score: the mean over modules of the best gain among the first K picks (log IC_Oz / IC of the pool's rows, at least 0:
-Oz is always measured), by size bucket; ``oracle`` is the pool's best per module. No local search: this compares
the choices from the pool alone. With ``--out`` the table is written there as JSON (bench/guidance/results/
ranker-adaptive.json holds a run).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def coverage_order(rows: np.ndarray, count: int) -> list:
    """Greedy: the column that most raises the mean over ``rows`` (S, K) of the best gain so far, ``count`` times."""
    best = np.zeros(len(rows))
    taken = np.zeros(rows.shape[1], bool)
    order = []
    for _ in range(count):
        raise_by = np.maximum(rows - best[:, None], 0).mean(0)
        raise_by[taken] = -1
        j = int(raise_by.argmax())
        order.append(j)
        taken[j] = True
        best = np.maximum(best, rows[:, j])
    return order


def adaptive_order(rows: np.ndarray, module: np.ndarray, count: int, first: int, tau: float) -> list:
    """The first ``first`` picks of :func:`coverage_order`, then each next pick for ``rows`` reweighted by their
    closeness to ``module``'s gains on the picks so far."""
    order = coverage_order(rows, first)
    taken = np.zeros(rows.shape[1], bool)
    taken[order] = True
    while len(order) < count:
        d2 = ((rows[:, order] - module[order]) ** 2).mean(1)
        weights = np.exp(-(d2 - d2.min()) / tau)
        weights /= weights.sum()
        best = np.maximum(rows[:, order].max(1), 0)
        raise_by = (weights[:, None] * np.maximum(rows - best[:, None], 0)).sum(0)
        raise_by[taken] = -1
        j = int(raise_by.argmax())
        order.append(j)
        taken[j] = True
    return order


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--data", required=True, help="pool rows of train modules (bpq ranker measure)")
    parser.add_argument("--picks", default="10,20,30")
    parser.add_argument("--first", default="5,10")
    parser.add_argument("--tau", default="1e-4,1e-3,1e-2")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the table as JSON here")
    args = parser.parse_args()

    from behavioral_pq.corpus.buckets import size_bucket
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.tasks.guidance.ranker import load_ranker_data

    data = load_ranker_data(args.data, None)
    gains = data.gains.astype(np.float64)
    corpus = Corpus(args.store)
    groups = corpus.split_groups()
    sizes = common.instruction_counts(corpus)
    group = [groups.get(s, s) for s in data.shas]
    projects = sorted(set(group))
    fold_of = {p: i % args.folds for i, p in enumerate(np.random.default_rng(args.seed).permutation(projects))}
    fold = np.array([fold_of[g] for g in group])
    picks = sorted(int(k) for k in args.picks.split(","))
    variants = [("fixed", 0, 0.0)] + [(f"adaptive-{f}-{t}", int(f), float(t)) for f in args.first.split(",")
                                       for t in args.tau.split(",")]
    scores = {name: {k: [] for k in picks} for name, _, _ in variants}
    oracle, buckets = [], []
    for f in range(args.folds):
        train, held = gains[fold != f], np.where(fold == f)[0]
        fixed = coverage_order(train, max(picks))
        for i in held:
            module = gains[i]
            for name, first, tau in variants:
                order = fixed if name == "fixed" else adaptive_order(train, module, max(picks), first, tau)
                for k in picks:
                    scores[name][k].append(max(0.0, module[order[:k]].max()))
            oracle.append(max(0.0, module.max()))
            buckets.append(size_bucket(sizes.get(data.shas[i], 0)))
    buckets = np.array(buckets)
    table = {"data": str(args.data), "modules": len(oracle), "pool": len(data.pool), "oracle": float(np.mean(oracle)),
             "by_bucket": {}, "mean_best_gain": {}}
    for name, _, _ in variants:
        for k in picks:
            v = np.array(scores[name][k])
            table["mean_best_gain"][f"{name}@{k}"] = float(v.mean())
            table["by_bucket"][f"{name}@{k}"] = {b: float(v[buckets == b].mean()) for b in sorted(set(buckets))}
    print(f"{len(oracle)} modules, {len(data.pool)} pipelines; the pool's best per module: {table['oracle']:.5f}")
    for key, value in table["mean_best_gain"].items():
        print(f"  {key:>26}: {value:.5f}  " + "  ".join(f"{b} {x:.5f}" for b, x in table["by_bucket"][key].items()))
    if args.out:
        common.write_json(args.out, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
