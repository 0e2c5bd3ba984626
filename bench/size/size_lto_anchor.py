"""How strong is the text-size objective's LTO-like anchor? Against the pipelines an LTO link runs.

    python bench/size/size_lto_anchor.py STORE [--split valid] [--max-instructions 50000] [--every 1] [--out FILE.json]

The anchor of the text-size reports ("whole -Oz") is each whole program linked, every definition but ``main``
made internal, then -Oz in target mode (size marks as clang -Oz sets them) and ``llc-19 -O2``'s .text. A
``clang -flto -Oz`` build runs ``lto-pre-link<Oz>`` on each unit and, at the link, ``lto<O2>`` (lld's default
LTO level) on the whole. Here: the same internalized module, marked for size, through ``opt-19
-passes=lto-pre-link<Oz>`` then ``-passes=lto<O2>``, and the same llc. The ratio lto / whole -Oz below 1 means a
real LTO link is the stronger anchor. Prints the rows; with ``--out`` writes them there too (the runs kept:
bench/size/results/size_lto_anchor-{valid,test}.json).
"""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--max-instructions", type=int, default=50000)
    parser.add_argument("--every", type=int, default=1, help="every Nth whole program (default all)")
    parser.add_argument("--out")
    args = parser.parse_args()

    from behavioral_pq.core.engine import Engine
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import find_tool, run_tool, text_size
    from behavioral_pq.corpus.programs import split_whole_programs

    target = Target.module_cpus()
    rows = []
    with Engine(workers=1) as engine:
        programs = split_whole_programs(args.store, args.split, max_instructions=args.max_instructions)
        for i, program in enumerate(programs):
            if i % args.every:
                continue
            module = program.module
            oz = engine.run_pipeline(module.bitcode, "default<Oz>", program.name, target=target)
            marked = engine.run_pipeline(module.bitcode, "verify", program.name, target=replace(target, size="Oz"))
            lto = marked
            for passes in ("lto-pre-link<Oz>", "lto<O2>"):
                lto = run_tool([find_tool("opt"), f"-passes={passes}", "-o", "-", "-"], input=lto, timeout=600).stdout
            row = {"name": program.name, "instructions": program.instruction_count, "whole_oz": text_size(oz),
                   "lto": text_size(lto)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {"programs": len(rows), "lto_vs_whole_oz": common.geomean(r["lto"] / r["whole_oz"] for r in rows),
               "lto_smaller": sum(r["lto"] < r["whole_oz"] for r in rows),
               "lto_larger": sum(r["lto"] > r["whole_oz"] for r in rows)}
    print(json.dumps(summary))
    if args.out:
        common.write_json(args.out, {"config": vars(args), "summary": summary, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
