"""The size objective against clang-19 -Oz, in one run: .text bytes of each program built three ways.

    python bench/size/size_objective.py [--tasks all] [--sources 'DIR/*.c' ...] [--cflags '...'] [--budget 50]
                                        [--store STORE --split valid --split test --max-instructions N --programs N]
                                        [--out DIR] [--name FILE.json]

For each program (the shipped lowering tasks, and any C files given with --sources, e.g. the translation units
of a real project):
- ``clang -Oz``: ``clang-19 -Oz -c`` of the C source, .text bytes of the object (the baseline);
- ``target -Oz``: the package's -Oz in target mode for the CPU the module was compiled for, ``llc-19 -O2``
  (what ``bpq compile`` builds by default);
- ``text-size@B``: :func:`recommend_pipeline` with ``objective="text-size"`` and budget B (candidates from the
  program library, each compiled and measured; never worse than target -Oz).
With ``--store``, the whole programs of the store's real projects in the given splits (each unit that defines
``main`` with the units it needs, as ``bpq corpus link`` finds them; at most ``--max-instructions`` IR instructions)
form one more group. A whole program has no single C source, so its baseline is separate compilation: each unit
built with target -Oz (which the rows above show equal to ``clang-19 -Oz`` within 0.2%) and ``llc-19 -O2``, the
objects joined by ``ld -r`` (which keeps one copy of each C++ inline function, as the program's link does), .text
bytes of the result; ``target -Oz`` and ``text-size@B`` are the linked module's, as ``bpq compile`` builds a whole
program (so the ratio includes what optimizing the program as one module gains: inlining across units). Whole
programs are also measured as ``bpq compile --whole-program`` builds them (every definition but ``main`` made
internal first, as LTO does for an executable): ``whole -Oz`` (the LTO-like baseline) and ``whole text-size@B``.
Each of these is also measured with llc's machine outliner where it makes the .text smaller (``outlined``), and
with the outliner and block placement each where they do (``codegen``), and with those and llc's other size options
(:data:`~behavioral_pq.core.toolchain.CODEGEN_FLAGS`) each where it does (``codegen_flags``: what
:func:`~behavioral_pq.core.toolchain.smaller_codegen` and ``bpq compile`` choose by default), so the gain of the
codegen choice is seen apart from the pipeline's, and against the LTO-like baseline given the same choice.
Ratios are ours over the baseline's (below 1: smaller); geometric means per group. With ``--library NAME=DIR``
(repeatable) each library's search is measured in the same run on the same embedding (default: the shipped
library for text size, named ``shipped``); ``--ranker NAME=DIR`` (repeatable) adds the search of a text-size pipeline
ranker (``bpq ranker fit`` on ``bpq ranker measure --objective text-size`` rows; ``shipped`` for the shipped one),
and ``--no-library`` leaves the library out; ``--skip-linked`` searches whole programs only as ``--whole-program``
builds them. Writes ``size_objective.json`` (or ``--name``) in --out (default bench/size/results) and prints a
markdown table.
"""

import argparse
import glob
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

#: the codegen choices each build is measured with: the outliner where smaller; that and block placement; those
#: and llc's CODEGEN_FLAGS (each row's "outlined", "codegen" and "codegen_flags")
CODEGEN_KINDS = ("outlined", "codegen", "codegen_flags")


def clang_oz_text(source: Path, flags) -> int:
    from behavioral_pq.core.toolchain import find_tool, object_text_size

    with tempfile.TemporaryDirectory(prefix="bpq-size-") as tmp:
        obj = Path(tmp, "o.o")
        subprocess.run([find_tool("clang"), "-Oz", "-fPIC", "-c", *flags, str(source), "-o", str(obj)], check=True,
                       capture_output=True)
        return object_text_size(obj)


def geomean(values):
    """:func:`common.geomean` of the values that were measured (a missing or zero size is left out)."""
    return common.geomean(v for v in values if v)


def separate_oz_text(units, target) -> int:
    """.text bytes of a program built unit by unit with target -Oz and llc -O2, the objects joined with ld -r."""
    import shutil

    import behavioral_pq as bpq
    from behavioral_pq.core.toolchain import find_tool, object_text_size, run_tool

    with tempfile.TemporaryDirectory(prefix="bpq-size-") as tmp:
        objects = []
        for i, unit in enumerate(units):
            optimized = bpq.optimize(bpq.load_module(unit), "Oz", target=target).bitcode
            objects.append(str(Path(tmp, f"u{i}.o")))
            run_tool([find_tool("llc"), "-O2", "-filetype=obj", "--relocation-model=pic", "-o", objects[-1], "-"],
                     input=optimized)
        joined = Path(tmp, "program.o")
        run_tool([shutil.which("ld") or "ld", "-r", "-o", str(joined), *objects])
        return object_text_size(joined)


def store_programs(store, splits, max_instructions, per_project=None, names=None):
    """(group, "project/program", [unit bitcode, ...], None) for the whole programs (two or more units) of the
    store's real projects in ``splits``, by project, then size; ``per_project`` of each spread over its sizes;
    ``names``: only these ("project/program")."""
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.programs import project_units, whole_programs

    corpus = Corpus(store)
    group = f"whole programs of {'/'.join(splits)}-split projects"
    found = []
    for project, row in sorted(corpus.projects().items()):
        if not set(row["splits"]) & set(splits):
            continue
        units, bitcode, _ = project_units(store, project)
        programs = sorted((p for p in whole_programs(units)
                           if len(p.units) > 1 and p.instruction_count <= max_instructions),
                          key=lambda p: (p.instruction_count, p.name))
        if names:
            programs = [p for p in programs if f"{project}/{p.name}" in names]
        if per_project is not None and len(programs) > per_project:
            step = (len(programs) - 1) / max(per_project - 1, 1)
            programs = [programs[round(i * step)] for i in range(per_project)]
        found += [(group, f"{project}/{p.name}", [bitcode[u.sha256] for u in p.units], None) for p in programs]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="all", help="shipped task set: functions, kernels, all, or none")
    parser.add_argument("--sources", action="append", default=[], metavar="GLOB",
                        help="C files to add (group: their folder's name); repeatable")
    parser.add_argument("--cflags", default="", help="clang flags for --sources (both builds)")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--store", help="corpus store whose real projects' whole programs to add")
    parser.add_argument("--split", action="append", default=[], help="splits of --store (default: test)")
    parser.add_argument("--max-instructions", type=int, default=20000, metavar="N",
                        help="whole programs of at most N IR instructions (default 20000)")
    parser.add_argument("--program", action="append", default=[], metavar="PROJECT/NAME",
                        help="only these whole programs of --store (repeatable; e.g. to measure again the ones a "
                             "run lost)")
    parser.add_argument("--per-project", type=int, default=None, metavar="N",
                        help="at most N whole programs of each project, spread evenly over its sizes (default: all)")
    parser.add_argument("--library", action="append", default=[], metavar="NAME=DIR",
                        help="program library to search with, repeatable (default: shipped=the shipped one)")
    parser.add_argument("--ranker", action="append", default=[], metavar="NAME=DIR",
                        help="text-size pipeline ranker to search with as well, repeatable (bpq ranker fit on "
                             "text-size rows); 'shipped' names the shipped one")
    parser.add_argument("--no-library", action="store_true",
                        help="search with the --ranker rankers only (no library search, no embedding)")
    parser.add_argument("--skip-linked", action="store_true",
                        help="whole programs: search only the --whole-program build (its baseline: whole -Oz)")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    parser.add_argument("--name", default="size_objective.json", help="result file name in --out")
    args = parser.parse_args()

    from tqdm import tqdm

    import behavioral_pq as bpq
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import (CODEGEN_FLAGS, internalize_bitcode, link_bitcode, smaller_codegen,
                                              text_size)
    from behavioral_pq.artifacts import with_pooling_of
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.lowering.tasks import load_tasks
    from behavioral_pq.tasks.guidance import default_library, load_library, recommend_pipeline
    from behavioral_pq.tasks.guidance.ranker import default_ranker, load_ranker
    from behavioral_pq.tasks.guidance.trials import candidate_target

    flags = shlex.split(args.cflags)
    programs = [] if args.tasks == "none" else [("shipped tasks", t.name, t.source, []) for t in load_tasks(args.tasks)]
    for pattern in args.sources:
        for path in sorted(glob.glob(pattern)):
            programs.append((Path(path).parent.name, Path(path).stem, Path(path), flags))
    target = Target.module_cpus()
    if args.store:
        found = store_programs(args.store, args.split or ["test"], args.max_instructions, args.per_project,
                               set(args.program))
        missing = set(args.program) - {name for _, name, _, _ in found}
        if missing:
            raise SystemExit(f"--program: no whole program {', '.join(sorted(missing))} in the --split splits of "
                             f"--store (at most --max-instructions {args.max_instructions})")
        programs += found
    encoder = load_encoder()
    libraries = {}
    for item in args.library:
        name, _, path = item.partition("=")
        libraries[name] = load_library(path, encoder=encoder)
    if not args.no_library:
        libraries = libraries or {"shipped": default_library(encoder, "text-size")}
    elif libraries:
        raise SystemExit("--no-library with --library: choose one")
    rankers = {}
    for item in args.ranker:
        name, _, path = item.partition("=")
        rankers[name] = default_ranker("text-size") if path == "shipped" else load_ranker(path)
        if rankers[name] is None or rankers[name].objective != "text-size":
            raise SystemExit(f"--ranker {item}: not a text-size ranker")
    if not libraries and not rankers:
        raise SystemExit("nothing to search with: give --ranker, or leave out --no-library")
    searches = {**{label: {"library": lib} for label, lib in libraries.items()},
                **{label: {"ranker": r} for label, r in rankers.items()}}
    # each library is searched on embeddings of its own pooling (the shipped library's is not the encoder's default)
    poolings = {lib.encoder.get("pooling", "mean") for lib in libraries.values()}
    if len(poolings) > 1:
        raise SystemExit("--library: the libraries were embedded under different poolings; compare them in two runs")
    if libraries:
        encoder = with_pooling_of(encoder, next(iter(libraries.values())).encoder)
    def outlined(bitcode):
        """.text with the smaller codegen: (the machine outliner where smaller, that or block placement off too,
        those and llc's CODEGEN_FLAGS each where smaller: what bpq compile chooses by default)."""
        sizes = {(o, b): text_size(bitcode, outline=o, block_placement=b, cpu=target.cpu or None)
                 for o in (False, True) for b in (True, False)}
        flags = smaller_codegen(bitcode, cpu=target.cpu or None, flags=tuple(CODEGEN_FLAGS))
        assert flags.plain == sizes[False, True] and flags.text <= min(sizes.values())
        return min(sizes[False, True], sizes[True, True]), min(sizes.values()), flags.text

    def search_all(module):
        """label -> (recommendation, seconds with the probes of a library search, .text with the smaller codegen)
        of every search at the budget."""
        start = time.perf_counter()
        embedding = encoder.embed(module) if libraries else None
        embed_seconds = time.perf_counter() - start
        done = {}
        for label, how in searches.items():
            start = time.perf_counter()
            found = recommend_pipeline(module, args.budget, embedding=embedding, objective="text-size",
                                       target=target, **how)
            seconds = (embed_seconds if "library" in how else 0.0) + time.perf_counter() - start
            built = bpq.optimize(module, found.pipeline, target=candidate_target(target, found.steps)).bitcode
            done[label] = (found, seconds, outlined(built))
        return done

    rows = []
    for group, name, source, extra in tqdm(programs, desc="programs", unit="program"):
        row = {"group": group, "name": name}
        try:
            if isinstance(source, Path):
                row["clang_oz"] = clang_oz_text(source, extra)
                module = bpq.load_module(source, flags=extra)
            else:   # a whole program: its units' bitcode
                row["units"] = len(source)
                row["clang_oz"] = separate_oz_text(source, target)
                module = bpq.load_module(link_bitcode(source, what=name), name=name)
            row["instructions"] = module.instruction_count
            oz = bpq.optimize(module, "Oz", target=target).bitcode
            row["target_oz"] = text_size(oz)
            whole_program = not isinstance(source, Path)
            row.update(searched={}, method={}, search_seconds={}, whole_searched={},
                       **{kind: {"searched": {}, "whole_searched": {}} for kind in CODEGEN_KINDS})
            row["outlined"]["target_oz"], row["codegen"]["target_oz"], row["codegen_flags"]["target_oz"] = \
                outlined(oz)
            if not (whole_program and args.skip_linked):
                for label, (found, seconds, smallest) in search_all(module).items():
                    row["search_seconds"][label] = seconds
                    row["searched"][label] = found.text_size
                    row["method"][label] = found.method
                    (row["outlined"]["searched"][label], row["codegen"]["searched"][label],
                     row["codegen_flags"]["searched"][label]) = smallest
                    assert found.oz_text_size == row["target_oz"], (found.oz_text_size, row["target_oz"])
            if whole_program:
                whole = bpq.load_module(internalize_bitcode(module.bitcode), name=name)
                row["whole_instructions"] = whole.instruction_count
                whole_oz = bpq.optimize(whole, "Oz", target=target).bitcode
                row["whole_oz"] = text_size(whole_oz)
                row["outlined"]["whole_oz"], row["codegen"]["whole_oz"], row["codegen_flags"]["whole_oz"] = \
                    outlined(whole_oz)
                row["whole_seconds"] = {}
                for label, (found, seconds, smallest) in search_all(whole).items():
                    row["whole_seconds"][label] = seconds
                    row["whole_searched"][label] = found.text_size
                    (row["outlined"]["whole_searched"][label], row["codegen"]["whole_searched"][label],
                     row["codegen_flags"]["whole_searched"][label]) = smallest
        except Exception as exc:  # noqa: BLE001 - one program's failure is recorded, the run goes on
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)

    groups = {}
    for row in rows:
        if "error" in row or not row["clang_oz"]:
            continue
        g = groups.setdefault(row["group"], {"programs": 0, "target_oz": [], "whole_oz": [], "seconds": {},
                                             "searched": {}, "whole_searched": {}, "whole_vs_lto": {},
                                             **{kind: {} for kind in CODEGEN_KINDS}})
        g["programs"] += 1
        g["target_oz"].append(row["target_oz"] / row["clang_oz"])
        for kind in CODEGEN_KINDS:
            o = row.get(kind)
            if o is None:
                continue
            ratios = {"target_oz_vs_clang_oz": o["target_oz"] / row["clang_oz"]}
            for label, value in o["searched"].items():
                ratios[f"{label}_text_size_vs_clang_oz"] = value / row["clang_oz"]
            if "whole_oz" in o:
                ratios["whole_oz_vs_clang_oz"] = o["whole_oz"] / row["clang_oz"]
                ratios["whole_oz_vs_whole_oz"] = o["whole_oz"] / row["whole_oz"]
                for label, value in o["whole_searched"].items():
                    ratios[f"{label}_whole_text_size_vs_clang_oz"] = value / row["clang_oz"]
                    ratios[f"{label}_whole_text_size_vs_whole_oz"] = value / row["whole_oz"]
                    ratios[f"{label}_whole_text_size_vs_whole_oz_outlined"] = value / o["whole_oz"]
            for key, ratio in ratios.items():
                g[kind].setdefault(key, []).append(ratio)
        for label, value in row["searched"].items():
            g["searched"].setdefault(label, []).append(value / row["clang_oz"])
            g["seconds"].setdefault(label, []).append(row["search_seconds"][label])
        if "whole_oz" in row:
            g["whole_oz"].append(row["whole_oz"] / row["clang_oz"])
            for label, value in row["whole_searched"].items():
                g["whole_searched"].setdefault(label, []).append(value / row["clang_oz"])
                g["whole_vs_lto"].setdefault(label, []).append(value / row["whole_oz"])
    b = args.budget
    summary = {}
    for name, g in groups.items():
        s = summary[name] = {"programs": g["programs"], "geomean_target_oz_vs_clang_oz": geomean(g["target_oz"]),
                             "outliner": {k: geomean(v) for k, v in g["outlined"].items()},
                             "codegen": {k: geomean(v) for k, v in g["codegen"].items()},
                             "codegen_flags": {k: geomean(v) for k, v in g["codegen_flags"].items()}}
        for label, ratios in g["searched"].items():
            s[label] = {f"geomean_text_size_at_{b}_vs_clang_oz": geomean(ratios),
                        "smaller_than_clang_oz": sum(r < 1 for r in ratios),
                        "larger_than_clang_oz": sum(r > 1 for r in ratios),
                        "median_search_seconds": sorted(g["seconds"][label])[len(ratios) // 2]}
        if g["whole_oz"]:
            s["geomean_whole_oz_vs_clang_oz"] = geomean(g["whole_oz"])
            for label in g["whole_searched"]:
                s.setdefault(label, {}).update({
                    f"geomean_whole_text_size_at_{b}_vs_clang_oz": geomean(g["whole_searched"][label]),
                    f"geomean_whole_text_size_at_{b}_vs_whole_oz": geomean(g["whole_vs_lto"][label]),
                    "whole_smaller_than_whole_oz": sum(r < 1 for r in g["whole_vs_lto"][label])})
    result = {"config": {"budget": b, "tasks": args.tasks, "sources": args.sources, "cflags": args.cflags,
                         "libraries": {label: str(lib.path) for label, lib in libraries.items()},
                         "rankers": {label: str(r.path) for label, r in rankers.items()},
                         "target": target.to_dict(), "host": platform.processor() or platform.machine(),
                         "command": " ".join(shlex.quote(a) for a in sys.argv)},
              "summary": summary, "rows": rows}
    path = common.write_json(args.out / args.name, result)
    print(f"| group | library | programs | target -Oz / clang -Oz | text-size@{b} / clang -Oz | smaller | larger "
          f"| median search s | whole -Oz / clang -Oz | whole text-size@{b} / whole -Oz |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        for label in searches:
            r = s.get(label, {})
            linked = (f"{r[f'geomean_text_size_at_{b}_vs_clang_oz']:.3f} | {r['smaller_than_clang_oz']} | "
                      f"{r['larger_than_clang_oz']} | {r['median_search_seconds']:.1f}"
                      if f"geomean_text_size_at_{b}_vs_clang_oz" in r else "- | - | - | -")
            whole = (f"{s['geomean_whole_oz_vs_clang_oz']:.3f} | {r[f'geomean_whole_text_size_at_{b}_vs_whole_oz']:.3f}"
                     if f"geomean_whole_text_size_at_{b}_vs_whole_oz" in r else "- | -")
            print(f"| {name} | {label} | {s['programs']} | {s['geomean_target_oz_vs_clang_oz']:.3f} | {linked} | "
                  f"{whole} |")
    print("\nWith the machine outliner where it makes the .text smaller (geomeans):")
    for name, s in summary.items():
        print(f"- {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in s["outliner"].items()))
    print("\nWith the machine outliner and block placement each where they make the .text smaller (geomeans; "
          "'_outlined' ratios: against -Oz given the same choice):")
    for name, s in summary.items():
        print(f"- {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in s["codegen"].items()))
    print("\nThose and llc's CODEGEN_FLAGS each where it makes the .text smaller (bpq compile's default; geomeans):")
    for name, s in summary.items():
        print(f"- {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in s["codegen_flags"].items()))
    failed = [r for r in rows if "error" in r]
    if failed:
        print(f"{len(failed)} programs failed: " + "; ".join(f"{r['name']}: {r['error'][:80]}" for r in failed[:5]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
