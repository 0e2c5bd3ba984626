"""Every program of one or more projects built by ``bpq compile`` and checked by running it.

    python bench/size/compile_programs.py build/compile_commands.json [...] [--whole-program] [--outline auto]
                                          [--no-codegen-flags]
                                          [--max-instructions N] [--out DIR] [--name compile_programs.json]

For each compile database, the programs are found as ``bpq corpus link`` finds them (each unit that defines
``main`` with the units it needs; :func:`~behavioral_pq.corpus.programs.whole_programs`). Each is built the way
``bpq compile --compile-commands DB --program NAME`` builds it for size (target mode for the module's CPU, -Oz or
-Os by .text, the machine outliner and llc's other size options where they make the .text smaller (unless
``--no-codegen-flags``), ``llc -O2``) and run, without arguments,
against its ``-O0`` reference build (the program's own harness: exit status and stdout must match; a run past
10 s is a timeout). Rows: project, program, units, IR instructions, the verdict, .text bytes with and without the
outliner, seconds. A program that prints times or addresses differs from its reference on its own; the result
says how often the outliner was on among the programs that passed. Writes --name in --out (default
bench/size/results).
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
    parser.add_argument("databases", nargs="+", metavar="JSON", help="compile_commands.json files")
    parser.add_argument("--whole-program", action="store_true", help="internalize all but main first (as LTO)")
    parser.add_argument("--outline", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--no-codegen-flags", action="store_true",
                        help="with --outline auto: leave llc's CODEGEN_FLAGS out (bpq compile --codegen-flags none)")
    parser.add_argument("--max-instructions", type=int, default=150000, metavar="N")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    parser.add_argument("--name", default="compile_programs.json")
    args = parser.parse_args()

    from tqdm import tqdm

    from behavioral_pq.core.catalog import steps_pipeline
    from behavioral_pq.core.engine import default_engine
    from behavioral_pq.core.module import load_module
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import (CODEGEN_FLAGS, internalize_bitcode, link_bitcode,
                                              smaller_codegen, text_size)
    from behavioral_pq.corpus.programs import compile_units, whole_programs
    from behavioral_pq.errors import BPQError
    from behavioral_pq.lowering.backends import LlcBackend, lower
    from behavioral_pq.tasks.guidance import Trials
    from behavioral_pq.tasks.guidance.recommend import SIZE_SEEDS

    target = Target.module_cpus()
    engine = default_engine()
    work = []
    for database in args.databases:
        units, bitcode = compile_units(database)
        project = Path(database).resolve().parent.name
        seen = set()
        for program in whole_programs(units):
            key = tuple(sorted(u.sha256 for u in program.units))
            if key not in seen:
                seen.add(key)
                work.append((project, program, [bitcode[u.sha256] for u in program.units]))
    rows = []
    for project, program, parts in tqdm(work, desc="programs", unit="program"):
        row = {"project": project, "program": program.name, "units": len(parts)}
        start = time.perf_counter()
        try:
            module = load_module(link_bitcode(parts, what=program.name), name=program.name)
            row["instructions"] = module.instruction_count
            if module.instruction_count > args.max_instructions:
                row["skipped"] = f"more than {args.max_instructions} instructions"
                rows.append(row)
                continue
            built = load_module(internalize_bitcode(module.bitcode), name=program.name) if args.whole_program \
                else module
            trials = Trials(built, engine, 1, objective="text-size", target=target)   # as bpq compile does
            trials.run([SIZE_SEEDS], "-Os")
            optimized = optimize(built, steps_pipeline(trials.best()[0]), target=trials.target_for(trials.best()[0]))
            outline, placement, flags = args.outline == "on", True, ()
            if args.outline == "auto":
                choice = smaller_codegen(optimized.bitcode, flags=() if args.no_codegen_flags else tuple(CODEGEN_FLAGS))
                outline, placement, flags = choice.outline, choice.block_placement, choice.flags
                row["text"], row["text_plain"] = choice.text, choice.plain
            else:
                row["text"] = row["text_plain"] = text_size(optimized.bitcode, outline=outline)
            row["outline"], row["block_placement"], row["flags"] = outline, placement, list(flags)
            lowering = lower(optimized.verify(), LlcBackend(outline=outline, block_placement=placement, flags=flags),
                             verify=True, reference=module)
            row["verdict"] = lowering.verdict.stage if lowering.verdict is not None else "unchecked"
        except BPQError as exc:
            row["verdict"] = "error"
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["seconds"] = round(time.perf_counter() - start, 2)
        rows.append(row)
    checked = [r for r in rows if "verdict" in r]
    verdicts = Counter(r["verdict"] for r in checked)
    passed = [r for r in checked if r["verdict"] == "ok"]
    plain = sum(r["text_plain"] for r in passed)
    summary = {"programs": len(rows), "checked": len(checked), "verdicts": dict(verdicts), "passed": len(passed),
               "passed_with_outliner": sum(r["outline"] for r in passed),
               "text_over_text_without_outliner": sum(r["text"] for r in passed) / max(plain, 1)}
    config = {k: v for k, v in vars(args).items() if k not in ("out", "name")}
    path = common.write_json(args.out / args.name, {"config": config, "summary": summary, "rows": rows})
    print(json.dumps(summary, indent=1))
    for row in checked:
        if row["verdict"] != "ok":
            print(f"  {row['project']}/{row['program']}: {row['verdict']} {row.get('error', '')[:120]}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
