"""Which edits should the local search of a search for the host try?

`recommend_pipeline` spends 60% of its budget on the ranker's picks, then a local search: random edits of the best
pipeline so far, each edit's pass drawn half the time from the passes of the picks and half the time uniformly from
the catalog (`library.mutate_steps`). For the host, the pool holds almost nothing beyond the ranker's picks
(BENCHMARKS, "A ranker fitted on outcomes built for the host"), so what a search finds beyond them is the local
search's. This bench compares, in compiled searches for the host with the shipped ranker's picks:

- ``uniform (before)``: the local search as it was before the edit prior;
- ``gaining vocabulary``: the vocabulary half drawn only from the passes of the picks that beat -Oz on this module
  (all picks' passes when none did): the module's own outcomes choose the edits;
- ``pass prior``: the catalog half drawn in proportion to how often ``(-Oz, pass)`` beat -Oz on train modules, built
  for the host (a floor keeps every pass possible);
- ``both (shipped)``: what a search for a target does since 2026-12-02 (`recommend_pipeline` as it is).

Scores: geomean IC_Oz / IC written for the host by size bucket, and the per-module difference to ``uniform
(before)`` with a 95% bootstrap interval.

    python bench/guidance/local_search_edits.py STORE --train-host ROWS --split valid --searches 40
"""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

from behavioral_pq.core.catalog import PASSES  # noqa: E402
from behavioral_pq.core.engine import Engine  # noqa: E402
from behavioral_pq.core.target import Target  # noqa: E402
from behavioral_pq.corpus.buckets import size_bucket  # noqa: E402
from behavioral_pq.corpus.reader import Corpus  # noqa: E402
from behavioral_pq.tasks.guidance import recommend as recommend_module  # noqa: E402
from behavioral_pq.tasks.guidance import recommend_pipeline  # noqa: E402
from behavioral_pq.tasks.guidance.behavior import bootstrap_interval  # noqa: E402
from behavioral_pq.tasks.guidance.edits import edit_weights  # noqa: E402
from behavioral_pq.tasks.guidance.ranker import load_ranker_data  # noqa: E402

BUCKETS = ("<200", "200-1k", "1k-5k", "5k-50k", ">50k")
SIDES = ("uniform (before)", "gaining vocabulary", "pass prior", "both (shipped)")
BEFORE = SIDES[0]
@contextmanager
def local_search(gaining: bool, weights):
    """The search's ``_try_then_search_locally`` replaced by one with the side's vocabulary and edit weights."""
    original = recommend_module._try_then_search_locally

    def replaced(trials, candidates, origin, seed, end, notes, **_):
        original(trials, candidates, origin, seed, end, notes, gaining=gaining, weights=weights)

    recommend_module._try_then_search_locally = replaced
    try:
        yield
    finally:
        recommend_module._try_then_search_locally = original


def summarize(rows: list, budgets) -> dict:
    """By budget and size bucket: each side's geomean IC_Oz / IC, and its per-module difference to the side before."""
    out = {}
    for budget in budgets:
        at = [r for r in rows if r["budget"] == budget]
        entry = {}
        for group in ("all",) + BUCKETS:
            here = [r for r in at if group == "all" or r["bucket"] == group]
            if not here:
                continue
            gain = {n: np.array([math.log(r["oz"] / max(r["written"][n], 1)) for r in here]) for n in SIDES}
            entry[group] = {"modules": len(here), **{n: float(np.exp(g.mean())) for n, g in gain.items()}}
            for n in SIDES[1:]:
                d = gain[n] - gain[BEFORE]
                entry[group][f"{n} - before"] = {"difference": float(d.mean()), "interval": bootstrap_interval(d),
                                                 "ahead": int((d > 1e-12).sum()), "behind": int((d < -1e-12).sum())}
        out[str(budget)] = entry
    return out


def markdown(report: dict) -> str:
    lines = [f"# Local-search edits for the host ({report['machine']}; {report['target']})", "",
             f"{report['modules']} modules of split {report['split']}; pass prior from "
             f"{report.get('train_modules', 180)} train modules.", ""]
    for budget, entry in report["by_budget"].items():
        body = []
        for group, here in entry.items():
            cells = [group, here["modules"]] + [f"{here[n]:.4f}" for n in SIDES]
            for n in SIDES[1:]:
                d = here[f"{n} - before"]
                lo, hi = d["interval"]
                cells.append(f"{d['difference']:+.4f} [{lo:+.4f}, {hi:+.4f}] {d['ahead']}/{d['behind']}")
            body.append(cells)
        lines += [f"## budget {budget}", "", common.markdown_table(
            ["group", "n", *SIDES, *(f"{n} - before" for n in SIDES[1:])], body), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--train-host", required=True, help="pool rows built for the host of train modules")
    parser.add_argument("--eval", help="pool rows of held-out modules: search only these (default: the split's)")
    parser.add_argument("--split", required=True, help="search the modules of this split")
    parser.add_argument("--searches", type=int, default=40)
    parser.add_argument("--search-max", type=int, default=12_000)
    parser.add_argument("--budgets", default="10,50")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__) / "local-search-edits.json")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    corpus = Corpus(args.store)
    sizes = common.instruction_counts(corpus)
    splits = corpus.store.splits()
    train = load_ranker_data(args.train_host)
    weights = [edit_weights(train)[p.flag] for p in PASSES]      # what `bpq ranker prior` writes
    held = load_ranker_data(args.eval).shas if args.eval else corpus.split(args.split)
    pick = sorted(s for s in held if sizes[s] <= args.search_max and splits.get(s) == args.split)
    chosen = common.even_by_bucket(pick, sizes, args.searches)
    sides = {BEFORE: (False, None), "gaining vocabulary": (True, None), "pass prior": (False, weights),
             "both (shipped)": None}
    target = Target.host()
    rows = []
    with Engine(workers=args.workers, timeout=120) as engine:
        modules = {m.sha256: m for m in corpus.iter_modules(only=set(chosen))}
        for i, sha in enumerate(chosen):
            module = modules[sha]
            for budget in budgets:
                row = {"sha256": sha, "bucket": size_bucket(sizes[sha]), "budget": budget, "written": {}}
                for name, how in sides.items():
                    if how is None:
                        found = recommend_pipeline(module, budget, engine=engine, target=target)
                    else:
                        with local_search(*how):
                            found = recommend_pipeline(module, budget, engine=engine, target=target)
                    row["written"][name], row["oz"] = found.instruction_count, found.oz_count
                rows.append(row)
            print(f"{i + 1}/{len(chosen)} {sha[:12]}: " + ", ".join(
                f"{n} {rows[-1]['oz'] / max(c, 1):.4f}" for n, c in rows[-1]["written"].items()), file=sys.stderr)
    report = {"machine": common.machine(), "target": str(target), "split": args.split, "modules": len(chosen),
              "train_modules": len(train.shas),
              "prior_top": sorted(((w, p.flag) for w, p in zip(weights, PASSES)), reverse=True)[:15],
              "by_budget": summarize(rows, budgets)}
    report["rows"] = rows
    common.write_json(args.out, report)
    common.write_text(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
