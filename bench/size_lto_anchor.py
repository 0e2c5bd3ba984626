"""How strong is the text-size objective's LTO-like anchor? Against the pipelines an LTO link runs.

    python bench/size_lto_anchor.py STORE [--split valid] [--max-instructions 50000] [--every 1] [--out FILE.json]

The anchor of the text-size reports ("whole -Oz") is each whole program linked, every definition but ``main``
made internal, then -Oz in target mode (size marks as clang -Oz sets them) and ``llc-19 -O2``'s .text. A
``clang -flto -Oz`` build runs ``lto-pre-link<Oz>`` on each unit and, at the link, ``lto<O2>`` (lld's default
LTO level) on the whole. Here: the same internalized module, marked for size, through ``opt-19
-passes=lto-pre-link<Oz>`` then ``-passes=lto<O2>``, and the same llc. The ratio lto / whole -Oz below 1 means a
real LTO link is the stronger anchor.
"""

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path


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
    logs = [math.log(r["lto"] / r["whole_oz"]) for r in rows]
    summary = {"programs": len(rows), "lto_vs_whole_oz": math.exp(sum(logs) / len(logs)),
               "lto_smaller": sum(r["lto"] < r["whole_oz"] for r in rows),
               "lto_larger": sum(r["lto"] > r["whole_oz"] for r in rows)}
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({"config": vars(args), "summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
