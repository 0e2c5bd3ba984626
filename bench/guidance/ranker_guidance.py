"""The learned pipeline ranker against today's retrieval, greedy and random search, by budget and size bucket.

    python bench/guidance/ranker_guidance.py STORE --data TRAIN_ROWS [--split test] [--kind real]
        [--min-instructions 0] [--max-instructions 50000] [--programs 120] [--budgets 10,50,200]
        [--reference-budget 500]
        [--representations embedding,spectrum,autophase,none] [--ranked-share 0.6] [--seed 0] [--sample-seed S]
        --out FILE.json

TRAIN_ROWS is a folder of pool rows measured on train modules (``bpq ranker measure``). One ranker per
representation is fitted on them here (ridge, penalty by grouped 3-fold CV over projects), then each method
searches every sampled module of ``--split`` live, with -Oz measured besides (IR instructions, measure mode):

- ``ranker-REP``: ``recommend_pipeline(ranker=...)``; its row comes from the store (spectra for the shipped
  encoder's probe set), and the probes' wall time is measured on the module (cache off) and added to its
  seconds for ``embedding`` and ``spectrum``;
- ``library``: today's ``recommend_pipeline`` (shipped library, coreset, local search), its embedding from the
  store, the probes' time added likewise; also at ``--reference-budget`` (today's budget 500, the target's
  reference);
- ``greedy`` and ``random``: one run each at the reference budget, read at every smaller budget, and read at the
  wall time ``ranker-spectrum`` took at 50 (``ranker-none`` without a spectrum ranker; equal wall time,
  compilations prorated by time).

Score: geometric mean of IC_Oz / IC over the modules, overall and by size bucket; gain = geomean - 1. Writes
FILE.json, and FILE.md and FILE.png beside it (the runs kept are bench/guidance/results/ranker-valid-*.json).
"""

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--data", required=True, help="pool rows of train modules (bpq ranker measure)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--kind", choices=("all", "small", "real"), default="real")
    parser.add_argument("--train-min-instructions", type=int, default=0, metavar="N",
                        help="fit the rankers on the rows of train modules of at least N instructions only (a "
                             "ranking for large modules)")
    parser.add_argument("--train-max-instructions", type=int, default=None, metavar="N",
                        help="fit the rankers on the rows of train modules of at most N instructions only (a "
                             "ranking for the smaller modules over a pool deepened on all sizes)")
    parser.add_argument("--min-instructions", type=int, default=0,
                        help="leave out modules smaller than this (e.g. 5000 for the 5k-50k bucket alone)")
    parser.add_argument("--max-instructions", type=int, default=50000)
    parser.add_argument("--programs", type=int, default=120)
    parser.add_argument("--budgets", default="10,50,200")
    parser.add_argument("--reference-budget", type=int, default=500)
    parser.add_argument("--representations", default="embedding,spectrum,autophase,none")
    parser.add_argument("--ranked-share", type=float, default=None)
    parser.add_argument("--largest-budget-for", default=None, metavar="REPS",
                        help="representations that also run at the largest of --budgets (default: all of them)")
    parser.add_argument("--seed", type=int, default=0, help="the rankers' fit, the searches and the sample")
    parser.add_argument("--sample-seed", type=int, default=None,
                        help="which modules are drawn (default: --seed); fixed, it compares search seeds on one sample")
    parser.add_argument("--no-baselines", action="store_true", help="leave out greedy and random search")
    parser.add_argument("--no-library", action="store_true", help="leave out today's retrieval (library)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import numpy as np
    from tqdm import tqdm

    from behavioral_pq.artifacts import with_pooling_of
    from behavioral_pq.core.engine import default_engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_bucket
    from behavioral_pq.embedding.encoder import SAMPLE_ABOVE, load_encoder
    from behavioral_pq.embedding.spectrum import spectra
    from behavioral_pq.tasks.guidance import default_library, greedy_search, random_search, recommend_pipeline
    from behavioral_pq.tasks.guidance.build import stored_embeddings
    from behavioral_pq.tasks.guidance.ranker import PipelineRanker, load_ranker_data, representation_rows
    from behavioral_pq.tasks.guidance.recommend import RANKED_SHARE

    ranked_share = args.ranked_share or RANKED_SHARE
    encoder, engine, library = load_encoder(), default_engine(), default_library()
    corpus = Corpus(args.store)
    origin = {}
    table = corpus.inputs(["sha256", "origin", "status"]).to_pydict()
    for sha, o, status in zip(table["sha256"], table["origin"], table["status"]):
        if status == "ok":
            origin.setdefault(sha, o)
    modules = corpus.modules(["sha256", "autophase", "instruction_count"]).to_pydict()
    autophase = dict(zip(modules["sha256"], modules["autophase"]))
    sizes = dict(zip(modules["sha256"], modules["instruction_count"]))

    def rows_for(shas, representation):
        """(kept hashes, rows) from the store."""
        if representation in ("spectrum", "embedding"):
            found, values = corpus.spectra(encoder.probe_set, shas=shas)
            ap = np.array([autophase[s] for s in found], np.int64)
            if representation == "spectrum":
                return found, representation_rows("spectrum", spectra=values, autophase=ap)
            return found, encoder.embed_spectra(values, ap, batch_size=128)
        ap = np.array([autophase[s] for s in shas], np.int64).reshape(len(shas), -1)
        return list(shas), representation_rows(representation, autophase=ap)

    data = load_ranker_data(args.data)
    if args.train_min_instructions:
        data = data.subset([s for s in data.shas if sizes.get(s, 0) >= args.train_min_instructions])
    if args.train_max_instructions:
        data = data.subset([s for s in data.shas if sizes.get(s, math.inf) <= args.train_max_instructions])
    gains = data.gains
    index = {s: i for i, s in enumerate(data.shas)}
    rankers, fit_info = {}, {}
    for rep in args.representations.split(","):
        t0 = time.perf_counter()
        found, x = rows_for(data.shas, rep)
        y = gains[[index[s] for s in found]]
        groups = [origin.get(s, s) for s in found]
        rankers[rep] = PipelineRanker.fit(x, y, data.pool, rep, groups=groups, seed=args.seed)
        fit_info[rep] = dict(rankers[rep].training, fit_seconds=time.perf_counter() - t0)
        print(rep, fit_info[rep], file=sys.stderr)

    shas = corpus.narrow(corpus.split(args.split), kind=None if args.kind == "all" else args.kind,
                         max_instructions=args.max_instructions)
    shas = [s for s in shas if sizes.get(s, 0) >= args.min_instructions]
    rng = np.random.default_rng(args.seed if args.sample_seed is None else args.sample_seed)
    chosen = sorted(rng.choice(shas, min(args.programs, len(shas)), replace=False).tolist())
    stored = {rep: dict(zip(*rows_for(chosen, rep))) for rep in rankers}
    embeddings = stored_embeddings(corpus, with_pooling_of(encoder, library.encoder), chosen)  # its pooling
    budgets = sorted(int(b) for b in args.budgets.split(","))
    top = max(budgets)          # greedy and random search run once at the largest budget, read at the smaller
    at_largest = set(args.largest_budget_for.split(",")) if args.largest_budget_for else set(rankers)
    per_module, failed = [], []
    for module in tqdm(list(corpus.iter_modules(only=set(chosen))), desc="ranker guidance", unit="module"):
        sha = module.sha256
        try:
            t0 = time.perf_counter()
            spectra([module], encoder.probe_set, engine=engine, cache=False, sample_above=SAMPLE_ABOVE).raise_first()
            probe_seconds = time.perf_counter() - t0
            row = {"program": sha, "instruction_count": sizes[sha], "origin": origin.get(sha),
                   "probe_seconds": probe_seconds, "counts": defaultdict(dict), "seconds": defaultdict(dict)}
            for rep, ranker in rankers.items():
                x = stored[rep].get(sha)
                if x is None and rep != "none":
                    continue
                for budget in [b for b in budgets if b < top or rep in at_largest]:
                    found = recommend_pipeline(module, budget, engine=engine, seed=args.seed,
                                               ranked_share=ranked_share, ranker=_given_row(ranker, x))
                    row["oz_count"] = found.oz_count
                    row["counts"][f"ranker-{rep}"][budget] = found.instruction_count
                    extra = probe_seconds if rep in ("spectrum", "embedding") else 0.0
                    row["seconds"][f"ranker-{rep}"][budget] = found.seconds + extra
            embedding = embeddings.get(sha)
            for budget in ([] if args.no_library else sorted(set(budgets + [args.reference_budget]))):
                found = recommend_pipeline(module, budget, library=library, engine=engine, embedding=embedding,
                                           seed=args.seed)
                row["oz_count"] = found.oz_count
                row["counts"]["library"][budget] = found.instruction_count
                row["seconds"]["library"][budget] = found.seconds + probe_seconds
            if not args.no_baselines:
                for name, search in (("random", random_search), ("greedy", greedy_search)):
                    t0 = time.perf_counter()
                    found = search(module, top, engine=engine, seed=args.seed)
                    seconds = time.perf_counter() - t0
                    history = [c for _, c in found.tried]
                    best = found.oz_count
                    running = []
                    for c in history:
                        best = min(best, c) if c is not None else best
                        running.append(best)
                    per = seconds / max(len(running), 1)
                    for budget in budgets:
                        row["counts"][name][budget] = min([found.oz_count] + running[:budget])
                        row["seconds"][name][budget] = per * min(budget, len(running))
                    row.setdefault("per_compilation", {})[name] = per
                    row.setdefault("history", {})[name] = running
            per_module.append(row)
        except Exception as exc:  # noqa: BLE001 - one module's failure is recorded, the rest go on
            failed.append({"program": sha, "error": f"{type(exc).__name__}: {exc}"})
    report = summarize(per_module, failed, budgets, args, fit_info, BUCKET_NAMES, size_bucket, common.geomean)
    timed = "ranker-spectrum" if "spectrum" in rankers else "ranker-none"
    report["equal_time"] = equal_time(per_module, timed, 50, common.geomean)
    common.write_text(args.out, json.dumps({"report": report, "modules": per_module, "failed": failed},
                                           indent=1, default=str) + "\n")
    print(json.dumps(report["overall"], indent=1))
    plot(report, Path(args.out).with_suffix(".png"))
    common.write_text(Path(args.out).with_suffix(".md"), markdown(report))
    return 0


def markdown(report) -> str:
    """The report as Markdown: geomean IC_Oz / IC by method and budget, overall and by size bucket, with the
    mean wall time per module."""
    keys = list(report["overall"])
    methods = sorted({k.rsplit("@", 1)[0] for k in keys})
    budgets = sorted({int(k.rsplit("@", 1)[1]) for k in keys})
    smallest = f"{report['min_instructions']} to " if report.get("min_instructions") else "at most "
    lines = [f"# Pipeline ranker against retrieval and search ({report['programs']} {report['kind']} "
             f"{report['split']} modules of {smallest}{report['max_instructions']} instructions)", "",
             "Geometric mean of IC_Oz / IC (higher is better; -Oz is measured besides every budget), and the mean "
             "wall time per module in seconds (probes included for embedding and spectrum rankers and for the "
             "library).", "",
             "| method | " + " | ".join(f"budget {b}" for b in budgets) + " | seconds at " + " / ".join(
                 str(b) for b in budgets) + " |",
             "|---|" + "---:|" * (len(budgets) + 1)]
    for m in methods:
        cells = [f"{report['overall'][f'{m}@{b}']:.4f}" if f"{m}@{b}" in report["overall"] else "" for b in budgets]
        secs = [f"{report['seconds'][f'{m}@{b}']:.2f}" if f"{m}@{b}" in report["seconds"] else "-" for b in budgets]
        lines.append(f"| {m} | " + " | ".join(cells) + " | " + " / ".join(secs) + " |")
    lines += ["", "By size bucket (instructions):", "",
              "| method@budget | " + " | ".join(f"{b} ({v['modules']})" for b, v in report["by_bucket"].items())
              + " |", "|---|" + "---:|" * len(report["by_bucket"])]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{v[k]:.4f}" if k in v else "" for v in report["by_bucket"].values())
                     + " |")
    eq = report.get("equal_time", {})
    if eq:
        timed = next((k for k in eq if k.startswith("ranker-")), "the ranker")
        lines += ["", f"At equal wall time (greedy and random search read at the time {timed} took at budget 50 "
                  "on each module): " + ", ".join(f"{k} {v:.4f}" for k, v in eq.items()
                                                  if k != "modules" and v is not None), ""]
    lines += ["", "Ranker fits (ridge per pipeline, penalty by grouped 3-fold CV over projects): " + "; ".join(
        f"{rep}: alpha {f['alpha']:g}, {f['modules']} modules" for rep, f in report["fit"].items()), ""]
    return "\n".join(lines) + "\n"


def equal_time(rows, method, budget, geomean):
    """Greedy and random search read at the wall time ``method`` took at ``budget`` on each module (their
    compilations prorated by time), next to ``method`` itself."""
    out = {}
    for name in ("random", "greedy"):
        vals = []
        for r in rows:
            if name not in r.get("history", {}) or budget not in r["seconds"].get(method, {}):
                continue
            allowed = int(r["seconds"][method][budget] / max(r["per_compilation"][name], 1e-9))
            hist = r["history"][name][:allowed]
            vals.append(r["oz_count"] / max(min([r["oz_count"]] + hist), 1))
        out[name] = geomean(vals)
    out[method] = geomean([r["oz_count"] / max(r["counts"][method][budget], 1) for r in rows
                           if budget in r["counts"].get(method, {})])
    out["modules"] = len(rows)
    return out


def plot(report, path):
    """Budget against gain (geomean - 1, percent) for every method."""
    from behavioral_pq.reports.plotting import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curves = {}
    for key, value in report["overall"].items():
        method, budget = key.rsplit("@", 1)
        curves.setdefault(method, []).append((int(budget), 100 * (value - 1)))
    for method, points in sorted(curves.items()):
        points.sort()
        ax.plot([b for b, _ in points], [g for _, g in points], marker="o", label=method)
    ax.set_xscale("log")
    ax.set_xlabel("candidate compilations (budget)")
    ax.set_ylabel("gain over -Oz, % (geomean IC_Oz / IC - 1)")
    ax.set_title(f"{report['programs']} {report['kind']} {report['split']} modules")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def _given_row(ranker, x):
    """Hand the stored row to recommend_pipeline by fixing the ranker's input (the probes are timed apart)."""
    if ranker.representation == "none" or x is None:
        return ranker
    return _Fixed(ranker, x)


class _Fixed:
    """A ranker whose choice uses a given row (the stored one) whatever row the search computed."""

    def __init__(self, ranker, row):
        self._ranker, self._row = ranker, row
        self.representation = "none"      # the search computes nothing
        self.pool = ranker.pool
        self.objective = ranker.objective

    def choose(self, row, count, **kw):
        return self._ranker.choose(self._row, count, **kw)


def summarize(rows, failed, budgets, args, fit_info, bucket_names, size_bucket, geomean):
    methods = sorted({m for r in rows for m in r["counts"]})
    out = {"store": args.store, "split": args.split, "kind": args.kind, "programs": len(rows),
           "failed": len(failed), "seed": args.seed, "sample_seed": args.sample_seed,
           "min_instructions": args.min_instructions, "train_min_instructions": args.train_min_instructions,
           "train_max_instructions": args.train_max_instructions,
           "max_instructions": args.max_instructions, "budgets": budgets,
           "reference_budget": args.reference_budget, "fit": fit_info, "overall": {}, "by_bucket": {},
           "seconds": {}}
    for m in methods:
        for b in sorted({b for r in rows for b in r["counts"].get(m, {})}):
            vals = [r["oz_count"] / max(r["counts"][m][b], 1) for r in rows if b in r["counts"].get(m, {})]
            secs = [r["seconds"][m][b] for r in rows if b in r["seconds"].get(m, {})]
            out["overall"][f"{m}@{b}"] = geomean([max(v, 1e-9) for v in vals])
            out["seconds"][f"{m}@{b}"] = sum(secs) / max(len(secs), 1)
            for bucket in bucket_names:
                sub = [r["oz_count"] / max(r["counts"][m][b], 1) for r in rows
                       if b in r["counts"].get(m, {}) and size_bucket(r["instruction_count"]) == bucket]
                if sub:
                    out["by_bucket"].setdefault(bucket, {"modules": len(sub)})[f"{m}@{b}"] = geomean(sub)
    return out


if __name__ == "__main__":
    sys.exit(main())
