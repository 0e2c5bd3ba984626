"""What `bpq optimize --auto` writes for a target, searched in the mode it writes or in measure mode.

For each module of a store (a deterministic sample per size bucket) and each budget, two searches with the shipped
defaults (the shipped ranker, then local search) and the module written for the host:

- ``target-mode search`` (what `bpq optimize --auto` does): every candidate counted as it is built for the host,
  its functions marked ``minsize``/``optsize`` before its passes as -Oz marks them (``candidate_target``), the
  best written as it was measured;
- ``target-mode search, unmarked``: the same with each candidate built for the host as it is (its search runs
  with ``candidate_target`` replaced by one that leaves the target alone);
- ``measure-mode search + finalists`` (the anchor, what it did before): the candidates counted in measure mode,
  then the search's 4 best distinct candidates built for the host and the smallest written (-Oz for the host
  when none is smaller); ``measure-mode best as built`` is the first finalist alone.

Scores: the geometric mean of IC_Oz / IC written (-Oz and IC both for the host; above 1 is smaller than -Oz), by
size bucket, with a 95% bootstrap interval of the per-module difference to the anchor; how often budget 50
writes a larger module than budget 10; and for the anchor, how far the change it showed while searching
(measure mode, against measure-mode -Oz) is from the change written.

    python bench/guidance/written_as_searched.py STORE --per-bucket 12 --budgets 10,50 \
        --out bench/guidance/results/written-as-searched.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

from behavioral_pq.core.catalog import steps_pipeline  # noqa: E402
from behavioral_pq.core.engine import Engine  # noqa: E402
from behavioral_pq.core.module import Module  # noqa: E402
from behavioral_pq.core.target import resolve_target  # noqa: E402
from behavioral_pq.corpus.buckets import size_bucket  # noqa: E402
from behavioral_pq.corpus.reader import Corpus  # noqa: E402
from behavioral_pq.tasks.guidance import OZ, recommend_pipeline  # noqa: E402
from behavioral_pq.tasks.guidance import trials as trials_module  # noqa: E402
from behavioral_pq.tasks.guidance.behavior import bootstrap_interval  # noqa: E402

BUCKETS = ("<200", "200-1k", "1k-5k", "5k-50k", ">50k")
FINALISTS = 4
SIDES = ("target-mode search", "measure-mode search + finalists", "measure-mode best as built",
         "target-mode search, unmarked")


def finalists(found, count: int = FINALISTS) -> list:
    """The searched best, then the next best distinct candidates that beat -Oz in the search's mode: what
    `bpq optimize --auto` built for the host before its search counted there (the anchor, kept here alone)."""
    chosen = [tuple(found.steps)]
    ranked = sorted((value, i, tuple(steps)) for i, (steps, value) in enumerate(found.tried)
                    if value is not None and value < found.oz_count and tuple(steps) != (OZ,))
    for _, _, steps in ranked:
        if len(chosen) >= count:
            break
        if steps not in chosen:
            chosen.append(steps)
    return chosen


@contextmanager
def unmarked_candidates():
    """Within it, a search in target mode builds each candidate for the target as it is, without size marks."""
    original = trials_module.candidate_target
    trials_module.candidate_target = lambda target, steps: target
    try:
        yield
    finally:
        trials_module.candidate_target = original


def built_count(engine, module: Module, steps, target) -> int:
    bitcode = engine.run_pipeline(module.bitcode, steps_pipeline(steps), module.name, target=target)
    return Module(bitcode, name=module.name).instruction_count


def one_module(engine, module: Module, budget: int, target) -> dict:
    began = time.monotonic()
    ours = recommend_pipeline(module, budget, engine=engine, target=target)
    ours_seconds = time.monotonic() - began

    began = time.monotonic()
    with unmarked_candidates():
        unmarked = recommend_pipeline(module, budget, engine=engine, target=target)
    unmarked_seconds = time.monotonic() - began

    began = time.monotonic()
    searched = recommend_pipeline(module, budget, engine=engine)        # measure mode
    oz_target = built_count(engine, module, (OZ,), target)
    if tuple(searched.steps) == (OZ,):
        built = [oz_target]
    else:
        built = [built_count(engine, module, steps, target) for steps in finalists(searched)]
    anchor_seconds = time.monotonic() - began
    if ours.oz_count != oz_target:
        raise RuntimeError(f"{module.name}: -Oz for the target counted {ours.oz_count} and {oz_target}")
    return {"oz_target": oz_target, "oz_measure": searched.oz_count,
            "written": {SIDES[0]: ours.instruction_count, SIDES[1]: min([oz_target] + built),
                        SIDES[2]: min(oz_target, built[0]), SIDES[3]: unmarked.instruction_count},
            "shown_measure": searched.instruction_count,
            "seconds": {SIDES[0]: ours_seconds, SIDES[1]: anchor_seconds, SIDES[3]: unmarked_seconds},
            "compilations": {SIDES[0]: ours.compilations, SIDES[1]: searched.compilations + len(built)}}


def sample(corpus: Corpus, per_bucket: int, max_instructions: int, min_instructions: int = 0):
    """Up to ``per_bucket`` modules of each size bucket, in hash order (deterministic), of ``min_instructions`` to
    ``max_instructions`` instructions."""
    table = corpus.modules(["sha256", "instruction_count"]).to_pydict()
    chosen = {b: [] for b in BUCKETS}
    for sha, count in sorted(zip(table["sha256"], table["instruction_count"])):
        if count is None or not min_instructions <= count <= max_instructions:
            continue
        bucket = size_bucket(int(count))
        if len(chosen[bucket]) < per_bucket:
            chosen[bucket].append(sha)
    return [s for b in BUCKETS for s in chosen[b]]


def summarize(rows: list, budgets) -> dict:
    out = {}
    for budget in budgets:
        at = [r for r in rows if r["budget"] == budget]
        entry = {}
        for bucket in ("all",) + BUCKETS:
            here = [r for r in at if bucket == "all" or r["bucket"] == bucket]
            if not here:
                continue
            gain = {side: np.array([math.log(r["oz_target"] / max(r["written"][side], 1)) for r in here])
                    for side in SIDES}
            entry[bucket] = {"modules": len(here), **{side: float(np.exp(g.mean())) for side, g in gain.items()}}
            for name, other in (("vs anchor", SIDES[1]), ("vs unmarked", SIDES[3])):
                diff = gain[SIDES[0]] - gain[other]
                entry[bucket][name] = {"difference": float(diff.mean()), "interval": bootstrap_interval(diff),
                                       "ahead": int((diff > 0).sum()), "behind": int((diff < 0).sum())}
        shown = np.array([math.log(r["oz_measure"] / max(r["shown_measure"], 1)) for r in at])
        written = np.array([math.log(r["oz_target"] / max(r["written"][SIDES[1]], 1)) for r in at])
        entry["anchor shown vs written"] = {"mean_abs_gap": float(np.abs(shown - written).mean()),
                                            "shown_better": int((shown > written + 1e-12).sum())}
        entry["seconds"] = {side: float(sum(r["seconds"][side] for r in at)) for side in at[0]["seconds"]}
        out[str(budget)] = entry
    if len(budgets) >= 2:
        low, high = str(min(budgets)), str(max(budgets))
        by_module = {}
        for r in rows:
            by_module.setdefault(r["module"], {})[str(r["budget"])] = r
        out["larger budget writes more"] = {
            side: sum(1 for m in by_module.values() if low in m and high in m
                      and m[high]["written"][side] > m[low]["written"][side]) for side in SIDES}
    return out


def markdown(report: dict, budgets) -> str:
    lines = []
    for budget in budgets:
        entry = report["summary"][str(budget)]
        rows = []
        for bucket in ("all",) + BUCKETS:
            if bucket not in entry:
                continue
            e = entry[bucket]
            cells = []
            for name in ("vs anchor", "vs unmarked"):
                d = e[name]
                low, high = d["interval"]
                cells.append(f"{d['difference']:+.4f} [{low:+.4f}, {high:+.4f}] ({d['ahead']} / {d['behind']})")
            rows.append([bucket, e["modules"], *(f"{e[side]:.4f}" for side in SIDES), *cells])
        lines.append(f"Budget {budget}: IC_Oz / IC written for the host (geomean)\n")
        lines.append(common.markdown_table(
            ["bucket", "modules", *SIDES, "target-mode search minus anchor (log, 95%; ahead / behind)",
             "minus unmarked"], rows, "lrrrrrrr"))
        gap = entry["anchor shown vs written"]
        lines.append(f"\nAnchor: shown while searching vs written, mean |log gap| {gap['mean_abs_gap']:.4f}; "
                     f"shown better than written on {gap['shown_better']} modules. Seconds: "
                     + ", ".join(f"{k} {v:.0f}" for k, v in entry["seconds"].items()) + "\n")
    if "larger budget writes more" in report["summary"]:
        more = report["summary"]["larger budget writes more"]
        lines.append(f"Budget {max(budgets)} writes a larger module than budget {min(budgets)}: "
                     + ", ".join(f"{k} {v}" for k, v in more.items()) + "\n")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store")
    parser.add_argument("--per-bucket", type=int, default=12)
    parser.add_argument("--min-instructions", type=int, default=0)
    parser.add_argument("--max-instructions", type=int, default=60_000)
    parser.add_argument("--budgets", default="10,50")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__) / "written-as-searched.json")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    corpus = Corpus(args.store)
    shas = sample(corpus, args.per_bucket, args.max_instructions, args.min_instructions)
    target = resolve_target("host", None)
    rows, failed = [], []
    with Engine(workers=args.workers) as engine:
        for k, module in enumerate(corpus.iter_modules(only=set(shas))):
            bucket = size_bucket(module.instruction_count)
            for budget in budgets:
                try:
                    row = one_module(engine, module, budget, target)
                except Exception as exc:                          # one failed module does not stop the run
                    failed.append({"module": module.name, "budget": budget, "error": f"{type(exc).__name__}: {exc}"})
                    continue
                rows.append({"module": module.name, "sha256": module.sha256, "bucket": bucket, "budget": budget,
                             "instructions": module.instruction_count, **row})
                print(f"[{k + 1}/{len(shas)}] {module.name} ({module.instruction_count}) budget {budget}: -Oz "
                      f"{row['oz_target']}, " + ", ".join(f"{s} {v}" for s, v in row["written"].items()),
                      flush=True)
    report = {"config": {"store": str(args.store), "per_bucket": args.per_bucket, "budgets": budgets,
                         "min_instructions": args.min_instructions, "max_instructions": args.max_instructions,
                         "target": target.to_dict(),
                         "machine": common.machine()},
              "summary": summarize(rows, budgets), "failed": failed, "rows": rows}
    common.write_json(args.out, report)
    common.write_text(args.out.with_suffix(".md"), markdown(report, budgets))
    print(markdown(report, budgets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
