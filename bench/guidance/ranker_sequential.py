"""Does choosing the ranker's picks in rounds, each knowing the module's outcomes so far, beat one ranking?

    python bench/guidance/ranker_sequential.py STORE --data ROWS [--budgets 5,10,50] [--round 2]
        [--searches 100] [--seed 0] [--out FILE.json]

ROWS is a folder of pool rows (``bpq ranker measure``) on modules of STORE's train, valid and test splits. A ranker
without module input (``ranker-none``: the global ranking) is fitted on the train rows; then, for the valid and the
test modules:

- ``in pool`` (simulated on the measured rows): the best gain (log IC_Oz / IC, at least 0) among the first B
  pipelines of one ranking (``global``), against the same ranker choosing in rounds of ``--round``, each told the
  module's measured gains of the earlier rounds (``sequential``: ``PipelineRanker.choose(outcomes=)``);
- ``searches`` (compiled, ``--searches`` test modules): ``recommend_pipeline`` with that ranker at each budget, its
  picks measured in one batch (the shape before rounds) or in rounds, then the same local search.

The curves of budget against gain (1 to the largest budget, in the pool) go to the ``--out`` file's name with
``.png``. Each line gives the per-module difference to the one-ranking choice with a 95% bootstrap interval, overall and by
size bucket. Valid is where a setting is chosen; test is read once.
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def in_pool(ranker, gains: np.ndarray, budgets, round_size: int) -> dict:
    """Best gain found per module float (N,) for each choice and budget, from the measured ``gains`` (N, K).

    Each module's sequence is chosen once, for the largest budget: a round's picks are greedy one at a time for
    the same weights, so a smaller budget's choice is its prefix."""
    col = {tuple(p): j for j, p in enumerate(ranker.pool)}
    top = max(budgets)
    fixed = np.array([col[p] for p in ranker.choose(None, top)])
    sequences = []
    for row in gains:
        chosen = []
        while len(chosen) < top:
            outcomes = {p: float(row[col[p]]) for p in chosen} or None
            batch = ranker.choose(None, min(round_size, top - len(chosen)), outcomes=outcomes, exclude=chosen)
            if not batch:
                break
            chosen += batch
        sequences.append([col[p] for p in chosen])
    sequences = np.array(sequences)                                             # (N, top)
    out = {}
    for budget in budgets:
        out[budget] = {"global": np.maximum(gains[:, fixed[:budget]].max(axis=1), 0.0),
                       "sequential": np.maximum(np.take_along_axis(gains, sequences[:, :budget], 1).max(axis=1),
                                                0.0)}
    return out


def plot_curves(curves: dict, path) -> None:
    """Budget against geomean IC_Oz / IC per split: one ranking, rounds, and the pool's best per module."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.8), sharey=True)
    for ax, (name, c) in zip(np.atleast_1d(axes), curves.items()):
        ax.plot(c["budgets"], c["global"], label="one ranking (global)")
        ax.plot(c["budgets"], c["sequential"], label="rounds of 2, told the module's outcomes")
        ax.axhline(c["pool_best"], color="gray", linestyle="--", label="pool's best per module")
        ax.set_title(f"{name} modules ({c['modules']})")
        ax.set_xlabel("pool pipelines tried (budget)")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("geomean IC_Oz / IC of the best found")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summary(found: dict, buckets: np.ndarray, seed: int) -> dict:
    from behavioral_pq.tasks.guidance.behavior import bootstrap_interval

    table = {}
    for budget, by in found.items():
        base, new = by["global"], by["sequential"]
        diff = new - base
        lo, hi = bootstrap_interval(diff, seed=seed)
        table[str(budget)] = {
            "global": math.exp(base.mean()), "sequential": math.exp(new.mean()),
            "diff": float(diff.mean()), "interval": [lo, hi],
            "by_bucket": {b: {"n": int((buckets == b).sum()), "diff": float(diff[buckets == b].mean())}
                          for b in sorted(set(buckets.tolist()))}}
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--data", required=True, help="pool rows (bpq ranker measure) of the store's modules")
    ap.add_argument("--budgets", default="5,10,50")
    ap.add_argument("--round", type=int, default=2, help="picks per round of the sequential choice")
    ap.add_argument("--searches", type=int, default=100, help="compiled searches on this many test modules")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(common.results_dir(__file__) / "ranker-sequential.json"))
    args = ap.parse_args()

    import behavioral_pq.tasks.guidance.recommend as recommend
    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.corpus.buckets import size_buckets
    from behavioral_pq.tasks.guidance.ranker import PipelineRanker, load_ranker_data

    budgets = [int(b) for b in args.budgets.split(",")]
    corpus = Corpus(args.store)
    data = load_ranker_data(args.data)
    gains = data.gains.astype(np.float64)
    index = {s: i for i, s in enumerate(data.shas)}
    split = {n: np.array([index[s] for s in corpus.split(n) if s in index], np.int64)
             for n in ("train", "valid", "test")}
    sizes = corpus.modules(["sha256", "instruction_count"]).to_pydict()
    count_of = dict(zip(sizes["sha256"], sizes["instruction_count"]))
    ranker = PipelineRanker.fit(np.zeros((len(split["train"]), 0)), gains[split["train"]], data.pool, "none",
                                seed=args.seed)
    report = {"store": args.store, "data": args.data, "pool": len(data.pool), "round": args.round,
              "modules": {n: int(len(r)) for n, r in split.items()}, "in_pool": {}, "machine": common.machine()}
    report["curves"] = {}
    for name in ("valid", "test"):
        rows = split[name]
        buckets = np.array(size_buckets([count_of[data.shas[i]] for i in rows]))
        steps = sorted(set(range(1, max(budgets) + 1)))
        found = in_pool(ranker, gains[rows], steps, args.round)
        report["curves"][name] = {"budgets": steps, "modules": int(len(rows)),
                                  "global": [math.exp(found[b]["global"].mean()) for b in steps],
                                  "sequential": [math.exp(found[b]["sequential"].mean()) for b in steps],
                                  "pool_best": math.exp(np.maximum(gains[rows].max(axis=1), 0.0).mean())}
        report["in_pool"][name] = summary({b: found[b] for b in budgets}, buckets, args.seed)
        for b, entry in report["in_pool"][name].items():
            print(f"in pool, {name}, budget {b}: global {entry['global']:.4f}, sequential {entry['sequential']:.4f}, "
                  f"{entry['diff']:+.4f} [{entry['interval'][0]:+.4f}, {entry['interval'][1]:+.4f}]", flush=True)
    if args.searches > 0:
        test = split["test"]
        keep = test[np.sort(np.random.default_rng(args.seed).permutation(len(test))[:args.searches])]
        wanted = {data.shas[i] for i in keep}
        modules = list(corpus.iter_modules(only=wanted))
        buckets = np.array(size_buckets([m.instruction_count for m in modules]))
        found = {b: {"global": [], "sequential": []} for b in budgets}
        started = time.perf_counter()
        with Engine(workers=2, timeout=60) as engine:
            for budget in budgets:
                for shape, size in (("global", 10 ** 6), ("sequential", args.round)):
                    recommend.RANKED_ROUND = size
                    for m in modules:
                        r = recommend.recommend_pipeline(m, budget, ranker=ranker, engine=engine, seed=args.seed)
                        found[budget][shape].append(math.log(max(r.oz_count, 1) / max(r.instruction_count, 1)))
                print(f"searches, budget {budget}: {time.perf_counter() - started:.0f} s", flush=True)
        found = {b: {k: np.array(v) for k, v in d.items()} for b, d in found.items()}
        report["searches"] = {"modules": len(modules), **summary(found, buckets, args.seed)}
        for b in budgets:
            entry = report["searches"][str(b)]
            print(f"searches, budget {b}: batch {entry['global']:.4f}, rounds {entry['sequential']:.4f}, "
                  f"{entry['diff']:+.4f} [{entry['interval'][0]:+.4f}, {entry['interval'][1]:+.4f}]")
    common.write_json(args.out, report)
    figure = Path(args.out).with_suffix(".png")
    plot_curves(report["curves"], figure)
    print("wrote", args.out, "and", figure)


if __name__ == "__main__":
    main()
