"""What llc's CODEGEN_FLAGS add to a size build's codegen choice, and what they cost, in one run.

    python bench/size/codegen_flags.py STORE [--split valid] [--per-project 4] [--max-instructions 50000]
                                       [--out FILE.json]

For whole programs of the store's real projects in the split (each linked and internalized as ``bpq compile
--whole-program`` builds it, then -Oz in target mode), :func:`~behavioral_pq.core.toolchain.smaller_codegen` is
run twice on the same bitcode: with the outliner and block placement only (the baseline, 4 llc builds) and with
:data:`~behavioral_pq.core.toolchain.CODEGEN_FLAGS` too (``bpq compile``'s default, 4 + 9 builds). Rows: .text
bytes of llc's defaults and of each choice, the flags chosen, seconds of each; the summary gives geomean .text
ratios, the seconds ratio, and how often each flag was kept. Writes --out (default
bench/size/results/codegen_flags-SPLIT.json).
"""

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--per-project", type=int, default=4, metavar="N",
                        help="at most N programs of each project, spread over its sizes (default 4)")
    parser.add_argument("--max-instructions", type=int, default=50000, metavar="N")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON file (default bench/size/results/codegen_flags-SPLIT.json)")
    args = parser.parse_args()

    import behavioral_pq as bpq
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import CODEGEN_FLAGS, smaller_codegen
    from behavioral_pq.corpus.programs import split_whole_programs

    target = Target.module_cpus()
    by_project = {}
    for program in split_whole_programs(args.store, args.split, max_instructions=args.max_instructions):
        by_project.setdefault(program.project, []).append(program)
    chosen = []
    for programs in by_project.values():     # already by size within a project
        step = max((len(programs) - 1) / max(args.per_project - 1, 1), 1)
        chosen += [programs[round(i * step)] for i in range(min(args.per_project, len(programs)))]
    rows = []
    for program in chosen:
        bitcode = bpq.optimize(program.module, "Oz", target=target).bitcode
        start = time.perf_counter()
        base = smaller_codegen(bitcode, cpu=target.cpu or None)
        base_seconds = time.perf_counter() - start
        start = time.perf_counter()
        flags = smaller_codegen(bitcode, cpu=target.cpu or None, flags=tuple(CODEGEN_FLAGS))
        flags_seconds = time.perf_counter() - start
        assert flags.plain == base.plain and flags.text <= base.text
        rows.append({"program": program.name, "instructions": program.module.instruction_count,
                     "plain": base.plain, "codegen": base.text, "codegen_flags": flags.text,
                     "flags": list(flags.flags), "builds": [base.builds, flags.builds],
                     "seconds": [round(base_seconds, 3), round(flags_seconds, 3)]})
        print(json.dumps(rows[-1]), flush=True)
    if not rows:
        raise SystemExit(f"no whole programs in split {args.split!r} of {args.store}")
    summary = {
        "programs": len(rows),
        "codegen_vs_plain": common.geomean(r["codegen"] / r["plain"] for r in rows),
        "codegen_flags_vs_plain": common.geomean(r["codegen_flags"] / r["plain"] for r in rows),
        "codegen_flags_vs_codegen": common.geomean(r["codegen_flags"] / r["codegen"] for r in rows),
        "seconds_ratio": sum(r["seconds"][1] for r in rows) / sum(r["seconds"][0] for r in rows),
        "median_seconds": [sorted(r["seconds"][i] for r in rows)[len(rows) // 2] for i in (0, 1)],
        "flags_kept": dict(Counter(f for r in rows for f in r["flags"]).most_common()),
    }
    out = args.out or common.results_dir(__file__) / f"codegen_flags-{args.split}.json"
    common.write_json(out, {"config": {**vars(args), "out": str(out)}, "summary": summary, "rows": rows})
    print(json.dumps(summary, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
