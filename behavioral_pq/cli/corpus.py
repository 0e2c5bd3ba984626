"""``bpq corpus ...``: build, generate, label, spectra, split and info (see behavioral_pq.corpus)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from typing import Optional

from behavioral_pq.cli.common import check_output_folder

CORPUS_EPILOG = """\
examples:
  bpq corpus build ~/src/jotai/anghaLeaves --out store --origin jotai --group-regex 'extr_(.*?\\.c)_'
  bpq corpus build --compile-commands ~/proj/build/compile_commands.json --project proj --out store
  bpq corpus generate --csmith 1000 --seed 0 --out csmith-src
  bpq corpus build csmith-src --out store --origin csmith --include /usr/include/csmith
  bpq corpus split store --seed 0 && bpq corpus info store

A killed build resumes when run again with the same arguments; two builds may write to one store at once.
Scale-out: --dask tcp://scheduler:8786 runs the tasks on a Dask cluster (sources must be at the same paths on
every worker).
"""


@contextlib.contextmanager
def _executor(args):
    """None (local processes), or an executor on the Dask scheduler of ``--dask``, closed afterwards."""
    if not getattr(args, "dask", None):
        yield None
        return
    from behavioral_pq.corpus import dask_executor

    executor = dask_executor(args.dask)
    try:
        yield executor
    finally:
        executor.shutdown(wait=True)
        executor._client.close()


def _print_summary(title: str, summary, as_json: bool, job: str = "build") -> None:
    data = summary.to_dict()
    if as_json:
        print(json.dumps(data, indent=1))
        return
    failed = sum(data["failures"].values())
    if job == "build":
        done = (f"{data['done']} inputs done, {data['skipped']} already in the store, {data['new_modules']} new "
                f"modules, {data['duplicates']} duplicates, {data['labelled']} labelled")
    elif job == "labels":
        done = f"{data['done']} modules labelled, {data['skipped']} already labelled"
    else:
        done = f"{data['done'] - failed} modules measured, {data['skipped']} already measured"
    print(f"{title}: {done}, {failed} failed, {data['seconds']:.1f} s"
          + (f" (bpq corpus info {title.split('-> ')[-1]} --failures lists them)" if failed else ""))
    for kind, n in data["failures"].items():
        print(f"  failed {kind}: {n}")


def cmd_build(args) -> int:
    from behavioral_pq.core._native_loader import LLVM_VERSION
    from behavioral_pq.corpus import build_corpus, discover, from_compile_commands

    check_output_folder(args.out)
    flags = shlex.split(args.cflags or "")
    if args.compile_commands:
        def items():
            yield from from_compile_commands(args.compile_commands, origin=args.origin, group_regex=args.group_regex,
                                             project=args.project, allow_plugins=args.allow_plugins)
    else:
        if not args.sources:
            raise ValueError("give SOURCES (files or directories) or --compile-commands")

        def items():
            yield from discover(args.sources, per=args.per, language=args.language, flags=flags,
                                include=args.include or (), origin=args.origin, group_regex=args.group_regex)
    if next(iter(items()), None) is None:
        where = args.compile_commands or ", ".join(str(s) for s in args.sources)
        raise ValueError(f"{where}: no C/C++ source, .ll or .bc file found (nothing to build; no store written)")
    total = sum(1 for _ in items()) if not args.no_count else None
    description = {"command": "corpus build", "sources": [str(s) for s in args.sources or []],
                   "compile_commands": args.compile_commands, "project": args.project, "origin": args.origin,
                   "per": args.per,
                   "language": args.language, "cflags": flags, "include": args.include or [],
                   "group_regex": args.group_regex, "labels": not args.no_labels, "llvm": LLVM_VERSION}
    with _executor(args) as executor:
        summary = build_corpus(items(), args.out, labels=not args.no_labels, executor=executor,
                               workers=args.workers, chunk_size=args.chunk_size, timeout=args.timeout,
                               progress=not args.quiet, description=description, total=total,
                               flush_seconds=args.flush_seconds)
    _print_summary(f"corpus build -> {args.out}", summary, args.json)
    return 0


def cmd_link(args) -> int:
    from behavioral_pq.corpus import build_corpus
    from behavioral_pq.corpus.programs import program_items

    totals = {"projects": {}, "programs": 0}
    for project in args.project:
        items, programs = program_items(args.store, project, args.units_dir, max_instructions=args.max_instructions)
        sizes = [len(p.units) for p in programs]
        totals["projects"][project] = {"programs": len(programs), "units": sizes,
                                       "names": [p.name for p in programs]}
        totals["programs"] += len(programs)
        if not args.quiet and not args.json:
            print(f"{project}: {len(programs)} programs of 2 or more units"
                  + (f" and at most {args.max_instructions} instructions" if args.max_instructions else "")
                  + (f" ({', '.join(f'{p.name}: {len(p.units)}' for p in programs[:8])}"
                     f"{', ...' if len(programs) > 8 else ''})" if programs else ""), file=sys.stderr)
        if not items:
            continue
        with _executor(args) as executor:
            summary = build_corpus(items, args.store, labels=not args.no_labels, executor=executor,
                                   workers=args.workers, chunk_size=1, timeout=args.timeout,
                                   progress=not args.quiet, flush_seconds=args.flush_seconds, total=len(items),
                                   description={"command": "corpus link", "project": project,
                                                "programs": totals["projects"][project]["names"]})
        totals["projects"][project]["build"] = summary.to_dict()
        if not args.json:
            _print_summary(f"corpus link {project} -> {args.store}", summary, False)
    if args.json:
        print(json.dumps(totals, indent=1))
    return 0


def cmd_generate(args) -> int:
    from behavioral_pq.corpus.csmith import generate_csmith

    check_output_folder(args.out)
    record = generate_csmith(args.csmith, args.out, seed=args.seed, progress=not args.quiet)
    if args.json:
        print(json.dumps({k: v for k, v in record.items() if k != "programs"} | {"written": len(record["programs"])},
                         indent=1))
    else:
        print(f"{len(record['programs'])} Csmith programs in {args.out} ({record['version']}), "
              f"{len(record['failures'])} failed; record: {args.out}/csmith.json")
        print(f"next: bpq corpus build {args.out} --out STORE --origin csmith --include {record['include']}")
    return 0


def _narrowed(args) -> Optional[set]:
    """The module hashes that --split, --kind, --max-instructions and --sample choose (None: every module)."""
    from behavioral_pq.corpus import Corpus

    if not (args.split or args.kind or args.max_instructions is not None or args.sample is not None):
        return None                                    # no flag: the job reads the store itself, once
    corpus = Corpus(args.store)
    only = set(corpus.split(args.split)) if args.split else None
    if args.kind or args.max_instructions is not None or args.sample is not None:
        pool = sorted(only if only is not None else corpus.store.keys("modules"))
        only = corpus.narrow(pool, kind=args.kind, max_instructions=args.max_instructions)
        if args.sample is not None and args.sample < len(only):
            import random

            only = random.Random(args.sample_seed).sample(only, args.sample)
        only = set(only)
    return only


def cmd_label(args) -> int:
    from behavioral_pq.corpus import label_corpus

    with _executor(args) as executor:
        summary = label_corpus(args.store, executor=executor, workers=args.workers, timeout=args.timeout,
                               progress=not args.quiet, flush_seconds=args.flush_seconds, only=_narrowed(args))
    _print_summary(f"labels -> {args.store}", summary, args.json, job="labels")
    return 0


def cmd_spectra(args) -> int:
    from behavioral_pq.corpus import compute_spectra

    only = _narrowed(args)
    with _executor(args) as executor:
        summary = compute_spectra(args.store, args.probes, executor=executor, workers=args.workers,
                                  timeout=args.timeout, progress=not args.quiet, only=only,
                                  flush_seconds=args.flush_seconds)
    _print_summary(f"spectra -> {args.store}", summary, args.json, job="spectra")
    return 0


def cmd_states(args) -> int:
    from behavioral_pq.corpus.states import build_states, choose_programs

    check_output_folder(args.out)
    counts = {}
    for part in args.programs.split(","):
        name, _, number = part.partition("=")
        if not number.isdigit():
            raise ValueError(f"--programs takes SPLIT=N[,SPLIT=N...], not {args.programs!r}")
        counts[name] = int(number)
    programs = choose_programs(args.store, counts, max_instructions=args.max_instructions, seed=args.select_seed)
    summary = build_states(args.store, args.out, programs, probes=args.probes, random_states=args.random,
                           oz_states=args.oz_like, seed=args.seed, workers=args.workers, timeout=args.timeout,
                           progress=not args.quiet)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"states -> {args.out}: {summary['programs']} new programs, {summary['ok']} states measured, "
              f"{summary['failed']} failed, {summary['seconds']:.0f} s")
    return 0


def cmd_split(args) -> int:
    from behavioral_pq.corpus import split_corpus

    try:
        fractions = [float(x) for x in args.fractions.split(",")]
    except ValueError:
        raise ValueError(f"--fractions takes comma-separated numbers, not {args.fractions!r}") from None
    names = args.names.split(",")
    counts = split_corpus(args.store, fractions=fractions, names=names, seed=args.seed)
    if args.json:
        print(json.dumps(counts))
    else:
        print("  ".join(f"{name}: {n}" for name, n in counts.items()))
    return 0


def cmd_info(args) -> int:
    from behavioral_pq.corpus import Corpus

    corpus = Corpus(args.store)
    if args.failures:
        failures = corpus.failures()
        if args.json:
            print(json.dumps(failures, indent=1))
            return 0
        for f in failures:
            print(f"{f['table']}\t{f['stage'] or '-'}\t{f['error_kind']}\t{' '.join(f['sources']) or f['sha256']}\t"
                  + (f["error"] or "").replace("\n", " ")[:1000])
        print(f"{len(failures)} failures", file=sys.stderr)
        return 0
    if args.projects:
        projects = corpus.projects()
        if args.json:
            print(json.dumps(projects, indent=1))
            return 0
        print("| project | inputs | failed | modules | linked programs | split | instructions median / max |")
        print("|---|---:|---:|---:|---:|---|---|")
        for name, row in projects.items():
            print(f"| {name} | {row['inputs']:,} | {row['failed']:,} | {row['modules']:,} | {row['linked_programs']} | "
                  f"{', '.join(row['splits']) or '-'} | {row['instructions_median']:,.0f} / {row['instructions_max']:,} |")
        total = {k: sum(r[k] for r in projects.values()) for k in ("inputs", "failed", "modules", "linked_programs")}
        print(f"| **{len(projects)} projects** | {total['inputs']:,} | {total['failed']:,} | {total['modules']:,} | "
              f"{total['linked_programs']} | | |")
        return 0
    info = corpus.info(verify=args.verify)
    if args.json:
        print(json.dumps(info, indent=1, default=float))
        return 0
    inputs, sizes, labels = info["inputs"], info["instruction_count"], info["labels"]
    print(f"{info['path']}  (LLVM {info['llvm_version']}, {info['shards']} shards, {info['bytes'] / 1e6:.1f} MB)")
    print(f"inputs: {inputs['total']} ({inputs['ok']} ok, {inputs['failed']} failed); by origin: "
          + ", ".join(f"{k} {v}" for k, v in inputs["by_origin"].items()))
    print(f"modules: {info['modules']} distinct ({info['duplicates']} duplicate inputs; "
          f"{info['linked_modules']} linked from several units: --per directory, bpq corpus link)")
    if sizes["count"]:
        print("instructions: " + ", ".join(f"{k} {sizes[k]:g}" for k in ("min", "p10", "median", "p90", "max")))
        buckets = list(info["by_size"])
        print(f"  {'modules by size':16s}" + "".join(f"{b:>9s}" for b in buckets))
        for kind, row in info["by_kind"].items():
            print(f"  {kind + ' programs':16s}" + "".join(f"{row[b]:9d}" for b in buckets))
    for kind, n in info["failures"].items():
        print(f"  failed {kind}: {n}")
    print(f"labels: {labels['labelled']} ok, {labels['failed']} failed")
    if labels.get("labelled"):
        print(f"  tie rate {labels['tie_rate']:.3f}, mean best-set size {labels['mean_best_set_size']:.2f}")
        print("  best pass (in the set): " + ", ".join(f"{k} {v:.1%}" for k, v in labels["best_pass_in_set"].items()))
        ob = labels["oz_benefit"]
        print(f"  -Oz benefit: mean {ob['mean']:.3f}, median {ob['median']:.3f}, p10 {ob['p10']:.3f}, "
              f"p90 {ob['p90']:.3f}")
    for probe_hash, n in info["spectra"].items():
        outcomes = info.get("spectra_outcomes", {}).get(probe_hash, {})
        detail = "; ".join(f"{kind}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
                           for kind, c in sorted(outcomes.items()))
        print(f"spectra for probe set {probe_hash}: {n}" + (f" ({detail})" if detail else ""))
    if info["splits"]:
        print("splits (seed {seed}): ".format(**info["splits"])
              + ", ".join(f"{k} {v}" for k, v in info["splits"]["counts"].items()))
    if args.verify:
        print("verify: " + ("all shards match the manifest" if not info["problems"] else
                            f"{len(info['problems'])} problems"))
        for problem in info["problems"]:
            print(f"  {problem}")
        return 0 if not info["problems"] else 1
    return 0


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _narrowing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", metavar="NAME", help="only the modules of this split")
    p.add_argument("--kind", choices=("small", "real"), help="only small programs or only real ones (projects)")
    p.add_argument("--max-instructions", type=int, metavar="N", help="only modules of at most N instructions")
    p.add_argument("--sample", type=int, metavar="N",
                   help="only N of the chosen modules, drawn with --sample-seed (the same store and arguments "
                        "give the same draw, so a killed job resumes)")
    p.add_argument("--sample-seed", type=int, default=0, metavar="S", help="seed of --sample (default 0)")


def _jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes (default: the CPUs)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a Dask scheduler, e.g. tcp://host:8786")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per pipeline per module (default 60)")
    p.add_argument("--flush-seconds", type=_positive, default=60.0, metavar="S",
                   help="write finished rows to the store at least this often; a killed job loses at most "
                   "this much work (default 60)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def add_parsers(sub) -> None:
    corpus = sub.add_parser("corpus", help="build, label, split and inspect corpora of modules",
                            epilog=CORPUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = corpus.add_subparsers(dest="corpus_command", metavar="SUBCOMMAND")
    csub.required = True

    p = csub.add_parser("build", help="compile sources into a corpus store with features and labels",
                        epilog=CORPUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="*", metavar="SOURCES", help="files or directories of C, C++, .ll, .bc")
    p.add_argument("--out", required=True, metavar="STORE", help="corpus store directory (created or resumed)")
    p.add_argument("--origin", help="corpus label recorded with every input (default: the source's name)")
    p.add_argument("--language", choices=("c", "c++"), help="compile every source as this language")
    p.add_argument("--cflags", metavar="FLAGS", help="extra clang flags, e.g. --cflags='-DNDEBUG -std=c11'")
    p.add_argument("-I", "--include", action="append", metavar="DIR", help="include directory (repeatable)")
    p.add_argument("--per", choices=("file", "directory"), default="file",
                   help="one module per file, or the files of each directory linked with llvm-link-19")
    p.add_argument("--compile-commands", metavar="JSON", help="build each unit of a compile_commands.json")
    p.add_argument("--allow-plugins", action="store_true",
                   help="with --compile-commands: take every flag it gives, not only those known to be safe (by "
                        "default a flag that could load code into clang, run other programs, read flags from a "
                        "file or write files, such as -fplugin=, -Xclang, @FILE, -ftime-trace=, or any unknown "
                        "flag, refuses the file)")
    p.add_argument("--project", metavar="NAME",
                   help="with --compile-commands: the units are one real program (origin project:NAME, one split "
                        "group, reported as real programs)")
    p.add_argument("--group-regex", metavar="REGEX",
                   help="program group from the relative path (first capture group), for splits")
    p.add_argument("--no-labels", action="store_true", help="skip the 124-pass, -Oz and -O3 labels")
    p.add_argument("--chunk-size", type=int, default=8, metavar="N", help="items per task (default 8)")
    p.add_argument("--no-count", action="store_true", help="do not count the inputs first (no total in the bar)")
    _jobs(p)
    p.set_defaults(func=cmd_build)

    p = csub.add_parser("link", help="whole programs of a stored project: each unit defining main, linked with "
                        "the units it needs", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="For each unit of PROJECT that defines main, find the units it needs the way a "
                        "static linker takes members of an archive (the first unit by source path that defines a "
                        "symbol the program uses; units defining another main are other programs; symbols no unit "
                        "defines are the libraries'), link them with llvm-link-19 and add the program to the "
                        "store with labels, in the project's split group. Programs of one unit are that unit, "
                        "already stored. Resumable.",
                        epilog="example:\n  bpq corpus build --compile-commands lua/compile_commands.json --project lua "
                        "--out store\n  bpq corpus link store --project lua")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--project", action="append", required=True, metavar="NAME",
                   help="a project built into STORE with --project NAME (repeatable)")
    p.add_argument("--units-dir", metavar="DIR", help="where the units' bitcode is written for linking "
                   "(default STORE/programs)")
    p.add_argument("--max-instructions", type=int, metavar="N",
                   help="leave out programs whose units hold more than N IR instructions in all")
    p.add_argument("--no-labels", action="store_true", help="skip the 124-pass, -Oz and -O3 labels")
    _jobs(p)
    p.set_defaults(func=cmd_link)

    p = csub.add_parser("generate", help="write random C programs with Csmith")
    p.add_argument("--csmith", type=int, required=True, metavar="N", help="number of programs")
    p.add_argument("--seed", type=int, default=0, help="seed of the program seeds and options (default 0)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_generate)

    p = csub.add_parser("label", help="compute labels for stored modules that have none")
    p.add_argument("store", metavar="STORE")
    _narrowing(p)
    _jobs(p)
    p.set_defaults(func=cmd_label)

    p = csub.add_parser("spectra", help="measure and store spectra for a probe set")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--probes", metavar="F", help="probe-set JSON (default: the package's)")
    _narrowing(p)
    _jobs(p)
    p.set_defaults(func=cmd_spectra)

    p = csub.add_parser("states", help="intermediate states (module after a pass prefix) with spectra and labels",
                        description="Measure states for the best-next-pass task: for each chosen program, "
                        "RANDOM random prefixes of 1-30 catalog passes and OZ_LIKE prefixes of the -Oz order, each "
                        "with its Autophase, InstCount, per-pass counts, -Oz count and spectrum. Resumable.")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--out", required=True, metavar="DIR", help="state folder (created or resumed)")
    p.add_argument("--programs", default="train=800,valid=150,test=300", metavar="SPLIT=N,...",
                   help="labelled programs to draw per split (default: train=800,valid=150,test=300)")
    p.add_argument("--max-instructions", type=int, default=1000, metavar="N", help="largest program drawn")
    p.add_argument("--select-seed", type=int, default=2, metavar="S", help="seed of the program draw")
    p.add_argument("--random", type=int, default=2, metavar="N", help="random-prefix states per program")
    p.add_argument("--oz-like", type=int, default=2, metavar="N", help="-Oz-order prefix states per program")
    p.add_argument("--seed", type=int, default=0, help="seed of the prefixes")
    p.add_argument("--probes", metavar="F", help="probe-set JSON (default: the package's)")
    p.add_argument("--workers", type=int, metavar="N", help="engine worker processes")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S", help="seconds per engine task")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_states)

    p = csub.add_parser("split", help="assign modules to train/valid/test by source group")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fractions", default="0.8,0.1,0.1", help="comma-separated (default 0.8,0.1,0.1)")
    p.add_argument("--names", default="train,valid,test", help="comma-separated split names")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_split)

    p = csub.add_parser("info", help="counts, sizes, labels, failures, splits of a store")
    p.add_argument("store", metavar="STORE")
    p.add_argument("--verify", action="store_true", help="check every shard's checksum (exit 1 on a problem)")
    p.add_argument("--projects", action="store_true", help="a Markdown table per real-program project: inputs, "
                   "failures, modules, linked programs, split, sizes")
    p.add_argument("--failures", action="store_true", help="list every failed input, label and spectrum with its "
                                                          "error")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

