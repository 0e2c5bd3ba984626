"""The text-size search's builds of the shipped lowering tasks, checked by running them.

    python bench/size/size_checked.py [--tasks all|functions|kernels] [--budget 50] [--out DIR]

Each task's module goes through ``recommend_and_optimize(objective="text-size")`` (the module's own CPU, as
``bpq compile`` builds for size), is lowered with ``llc -O2`` and run by the task's harness against its
reference. Prints how many pass, the .text ratio against target-mode -Oz, and writes ``size_checked.json`` in --out
(default bench/size/results).
A size that comes from a miscompile would show here as a failed task.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="all")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from tqdm import tqdm

    from behavioral_pq.core.target import Target
    from behavioral_pq.lowering.backends import LlcBackend
    from behavioral_pq.lowering.harness import TaskHarness
    from behavioral_pq.lowering.tasks import load_tasks
    from behavioral_pq.tasks.guidance import recommend_and_optimize
    from behavioral_pq.tasks.guidance.trials import candidate_target

    target = Target.module_cpus()
    rows = []
    for task in tqdm(load_tasks(args.tasks), desc="tasks", unit="task"):
        row = {"task": task.name}
        try:
            found, module = recommend_and_optimize(task.module(), args.budget, objective="text-size", target=target)
            row.update(text_size=found.text_size, oz_text_size=found.oz_text_size, method=found.method,
                       marked=candidate_target(target, found.steps).size == "Oz")
            with TaskHarness(task) as harness:
                row["stage"] = LlcBackend().lower(module, harness).verdict.stage
        except Exception as exc:  # noqa: BLE001 - one task's failure is recorded, the run goes on
            row["stage"] = f"error: {type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    passed = [r for r in rows if r["stage"] == "ok"]
    ratios = [r["text_size"] / r["oz_text_size"] for r in rows if r.get("text_size")]
    summary = {"tasks": len(rows), "passed": len(passed),
               "geomean_text_size_vs_target_oz": common.geomean(ratios),
               "failed": {r["task"]: r["stage"] for r in rows if r["stage"] != "ok"}}
    common.write_json(args.out / "size_checked.json", {"summary": summary, "rows": rows})
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
