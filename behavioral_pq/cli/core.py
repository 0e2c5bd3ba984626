"""``bpq passes``, ``features``, ``spectrum``, ``optimize`` and ``demo``: one module at a time."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from behavioral_pq.cli.common import (
    PASSES_EPILOG,
    PROGRAM_EPILOG,
    add_overwrite_argument,
    add_program_arguments,
    add_target_arguments,
    check_output,
    check_output_folder,
    cli_target,
    load_program,
    parse_passes,
    print_json,
    save_array,
    size_target,
)
from behavioral_pq.cli.guidance import run_auto


def cmd_passes(args) -> int:
    from behavioral_pq.core.catalog import CATALOG_VERSION, PASSES

    if args.json:
        print_json({"catalog": CATALOG_VERSION, "passes": [
            {"index": p.index, "flag": p.flag, "level": p.level, "pipeline": p.pipeline, "kind": p.kind}
            for p in PASSES]})
        return 0
    print(f"{len(PASSES)} passes (catalog {CATALOG_VERSION}); index, CompilerGym flag, LLVM 19 pipeline element")
    for p in PASSES:
        mark = "" if p.kind == "same" else f"  [{p.kind}]"
        print(f"{p.index:4d}  {p.flag:36s} {p.pipeline}{mark}")
    return 0


def cmd_features(args) -> int:
    kind = args.kind or ("instcount" if args.instcount else "autophase")
    if args.instcount and kind != "instcount":
        raise ValueError(f"--instcount and --kind {kind} disagree: give one of them")
    if kind == "programl":
        return _print_programl(args)
    from behavioral_pq.core.features import AUTOPHASE_FEATURES, INSTCOUNT_FEATURES, autophase, instcount

    module = load_program(args)
    names, values = (INSTCOUNT_FEATURES, instcount(module)) if kind == "instcount" else \
        (AUTOPHASE_FEATURES, autophase(module))
    if args.json:
        print_json({"module": module.name, "sha256": module.sha256, "kind": kind,
                     "features": dict(zip(names, values.tolist()))})
        return 0
    print(f"{module.name}: {module.instruction_count} instructions, "
          f"{'InstCount' if kind == 'instcount' else 'Autophase'} ({len(names)} features)")
    width = max(len(n) for n in names)
    rows = [f"{n:>{width}} {v:8d}" for n, v in zip(names, values.tolist())]
    for i in range(0, len(rows), 3):
        print("   ".join(rows[i:i + 3]))
    return 0


def _print_programl(args) -> int:
    from behavioral_pq.core.programl import programl_counts, programl_json

    module = load_program(args)
    graph = programl_json(module)
    if args.json:
        print_json(graph)
        return 0
    counts = programl_counts(graph)
    print(f"{module.name}: {module.instruction_count} instructions, ProGraML graph of {len(graph['nodes'])} nodes "
          f"and {len(graph['links'])} edges ({len(graph['graph']['function'])} functions)")
    for what, by_kind in counts.items():
        print(f"{what:>6}: " + ", ".join(f"{name} {count}" for name, count in by_kind.items()))
    return 0


def cmd_spectrum(args) -> int:
    from behavioral_pq.core.features import AUTOPHASE_FEATURES
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.embedding.spectrum import spectra
    from behavioral_pq.reports.plotting import plot_spectrum

    output, plot = check_output(args.output, args.overwrite), check_output(args.plot, args.overwrite)
    probes = load_probes(args.probes)
    module = load_program(args)
    batch = spectra([module], probes, progress=sys.stderr.isatty(), sample_above=args.sample_above)
    batch.raise_first()
    values = batch.spectra[0]
    if batch.sampled[0] is not None:
        print(f"bpq: note: measured on a function sample holding {batch.sampled[0]:.0%} of the module's "
              "instructions (large-module mode)", file=sys.stderr)
    if output:
        save_array(output, values)
    if plot:
        plot_spectrum(values, plot, title=f"{module.name}: spectrum over {probes.name}")
    if args.json:
        print_json({"module": module.name, "probe_set": probes.name, "probe_set_hash": probes.hash,
                     "shape": list(values.shape), "features": list(AUTOPHASE_FEATURES),
                     "spectrum": values.round(6).tolist()})
        return 0
    total = AUTOPHASE_FEATURES.index("TotalInsts")
    ic0 = int(batch.autophase[0, 0, total])
    after = batch.autophase[0, 1:, total]
    print(f"{module.name}: spectrum {values.shape[0]} probes x {values.shape[1]} features "
          f"(probe set {probes.name}, {probes.hash[:12]})")
    print(f"instructions: {ic0} as given; after probes min {after.min()}, median {int(np.median(after))}, "
          f"max {after.max()}")
    reactive = np.argsort(-np.abs(values).mean(axis=0))[:8]
    print("most reactive features (mean |d|): " +
          ", ".join(f"{AUTOPHASE_FEATURES[j]} {np.abs(values[:, j]).mean():.2f}" for j in reactive))
    if args.output:
        print(f"wrote {args.output}")
    if args.plot:
        print(f"wrote {args.plot}")
    return 0


def cmd_optimize(args) -> int:
    started = time.monotonic()    # --seconds counts from here, imports included
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.tasks.guidance import describe_steps
    from behavioral_pq.tasks.guidance.trials import candidate_target

    if bool(args.passes) == bool(args.auto):
        raise ValueError("give either --passes or --auto (see bpq optimize --help)")
    if args.budget < 0:
        raise ValueError(f"--budget must be >= 0, got {args.budget}")
    if args.seconds is not None and args.seconds <= 0:
        raise ValueError(f"--seconds must be positive, got {args.seconds:g}")
    output = check_output(args.output, args.overwrite)
    module = load_program(args)
    found = None
    target = cli_target(args)
    if args.objective != "ir-count" and not args.auto:
        raise ValueError("--objective chooses what --auto minimizes: give --auto")
    if args.seconds is not None and not args.auto:
        raise ValueError("--seconds limits the --auto search: give --auto")
    if args.ranker and not args.auto:
        raise ValueError("--ranker chooses the --auto search's candidates: give --auto")
    if args.size_marks:
        if target is None:
            raise ValueError("--size-marks marks functions for the code generator, which needs target mode: drop "
                             "--target measure")
        if args.auto:
            raise ValueError("--size-marks is for --passes: --auto --objective text-size marks its candidates itself")
        target = replace(target, size=args.size_marks)
    if args.auto:
        if args.objective == "text-size":
            target = size_target(args, target)
        found, result = run_auto(args, module, target, started)
        target = candidate_target(target, found.steps)   # what the written module was compiled for (its size marks)
        pipeline = found.pipeline
    else:
        pipeline = parse_passes(args.passes)
        if pipeline == "default<O0>" and args.target is None and args.cpu is None and not args.size_marks:
            target = None   # O0 only joins a program's files: no target machine's attributes are written
        result = optimize(module, pipeline, target=target)
    result.verify()
    if output:
        result.save(output)
    before, after = module.instruction_count, result.instruction_count
    where = (f"target mode, {target.cpu or 'the module CPU'}"
             + (f", functions marked as clang -{target.size} marks them" if target.size else "")
             if target else "measure mode")
    if args.json:
        record = {"module": module.name, "pipeline": pipeline, "instructions_before": before,
                  "instructions_after": after, "output": str(args.output) if args.output else None,
                  "mode": "target" if target else "measure", "target": target.to_dict() if target else None}
        if found is not None:
            record.update(found.as_dict())
        print_json(record)
        return 0
    change = 100.0 * (after - before) / before if before else 0.0
    # a search's figure line below names the mode; the first line names it only when there is none
    print(f"{module.name}: {before} -> {after} instructions ({change:+.1f}%"
          + (")" if found is not None else f"; {where})"))
    if found is not None:
        how = (f"found by {found.method} in {found.compilations} of {found.budget} compilations "
               f"({found.seconds:.2f} s)")
        if found.objective == "text-size":
            print(f"  {where}: .text: -Oz gives {found.oz_text_size} bytes; the recommended pipeline "
                  f"{found.text_size} (-Oz / ours = {found.improvement:.3f}), {how}")
        else:
            print(f"  {where}: -Oz gives {found.oz_count}; the recommended pipeline {found.instruction_count} "
                  f"(IC_Oz / IC = {found.improvement:.3f}), {how}")
        for note in found.notes:
            print(f"  note: {note}")
        print(f"  pipeline: {describe_steps(found.steps)}")
    if args.output:
        print(f"wrote {args.output}")
    else:
        print("(no -o given: nothing written)")
    return 0


def cmd_demo(args) -> int:
    from importlib import resources

    from behavioral_pq.core.features import AUTOPHASE_FEATURES, autophase
    from behavioral_pq.core.module import load_module
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.embedding.spectrum import spectra
    from behavioral_pq.reports.plotting import plot_spectrum

    check_output_folder(args.out)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    examples = resources.files("behavioral_pq").joinpath("data/examples")
    sources = sorted(p for p in examples.iterdir() if p.name.endswith(".c"))
    probes = load_probes()
    print(f"behavioral_pq demo: {len(sources)} example programs, probe set {probes.name} "
          f"(P={probes.num_probes}, L={probes.length})")
    modules = [load_module(Path(str(s))) for s in sources]
    batch = spectra(modules, probes, progress=sys.stderr.isatty())
    batch.raise_first()
    total = AUTOPHASE_FEATURES.index("TotalInsts")
    for i, module in enumerate(modules):
        oz = optimize(module, "Oz").instruction_count
        best = int(batch.autophase[i, 1:, total].min())
        print(f"  {module.name:18s} {module.instruction_count:5d} instructions; -Oz {oz:5d}; "
              f"best probe {best:5d}; {int((autophase(module) > 0).sum())} non-zero features")
        plot_spectrum(batch.spectra[i], out / f"{Path(module.name).stem}_spectrum.png",
                      title=f"{module.name}: spectrum")
    save_array(out / "spectra.npy", batch.spectra)
    print(f"wrote {out}/spectra.npy {batch.spectra.shape} and one spectrum heatmap per program in {out}/")

    encoder = load_encoder()
    if encoder.probe_set.hash != probes.hash:  # the encoder reads spectra of the probe set it was pretrained on
        batch = spectra(modules, encoder.probe_set, progress=sys.stderr.isatty())
        batch.raise_first()
    vectors = encoder.embed_spectra(batch.spectra, batch.autophase[:, 0])   # (N, D); row 0: the module as given
    save_array(out / "embeddings.npy", vectors)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    names = [Path(m.name).stem[:12] for m in modules]
    print(f"embeddings ({encoder.path.name}, D={encoder.dim}), cosine similarity:")
    print("  " + " " * 13 + " ".join(f"{n:>12s}" for n in names))
    for name, row in zip(names, unit @ unit.T):
        print(f"  {name:12s} " + " ".join(f"{x:12.3f}" for x in row))
    print(f"wrote {out}/embeddings.npy {vectors.shape}")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("passes", help="list the 124-pass catalog")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_passes)

    p = sub.add_parser("features", help="Autophase, InstCount or ProGraML features of a module",
                       description="The 56 Autophase features (CompilerGym's definition) of a program, its "
                                   "per-opcode InstCount (integer counts of the module as built), or its ProGraML "
                                   "program graph (CompilerGym's ProgramlJson).",
                       epilog=PROGRAM_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p)
    p.add_argument("--kind", choices=("autophase", "instcount", "programl"),
                   help="what to compute (default autophase); programl: the program graph, printed as node "
                        "and edge counts, or with --json as node-link JSON (CompilerGym's ProgramlJson)")
    p.add_argument("--instcount", action="store_true", help="the same as --kind instcount")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_features)

    p = sub.add_parser("spectrum", help="the P x 56 behavioral spectrum of a module",
                       description="How a program's 56 Autophase features react to each of the probe set's P pass "
                                   "sequences: log1p(after) - log1p(before), float32 (P, 56). Measured once per "
                                   "module and probe set (the spectrum cache), then read back.",
                       epilog=PROGRAM_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p)
    p.add_argument("--probes", metavar="F", help="probe-set JSON (default: the package's)")
    p.add_argument("--json", action="store_true", help="print the spectrum as JSON")
    p.add_argument("-o", "--output", metavar="OUT.npy", help="save float32 (P, 56) with numpy (to exactly OUT.npy)")
    p.add_argument("--plot", metavar="PNG", help="save a heatmap of probes x features")
    add_overwrite_argument(p)
    p.add_argument("--sample-above", type=int, metavar="N", help="large-module mode: measure a module of more than "
                   "N IR instructions on a deterministic sample of its functions (default: always whole)")
    p.set_defaults(func=cmd_spectrum)

    p = sub.add_parser("optimize", help="apply passes to a module", epilog=PASSES_EPILOG + PROGRAM_EPILOG,
                       description="Run catalog passes, -Oz/-O3 or a raw pipeline on a program, or let the "
                                   "embedding choose the pipeline (--auto: fewest IR instructions).",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p)
    p.add_argument("--passes", metavar="PASSES", help="what to run (see below)")
    p.add_argument("--auto", action="store_true",
                   help="let the embedding choose the pipeline (program library + search; each candidate counted "
                        "as it will be written, in target mode unless --target measure, so never worse than -Oz "
                        "there; progress on stderr when it is a terminal and there is no --json)")
    p.add_argument("--budget", type=int, default=10, metavar="N",
                   help="with --auto: candidate compilations to try besides -Oz (default 10)")
    p.add_argument("--seconds", type=float, metavar="S",
                   help="with --auto: bound the command's wall time to S seconds, from its start: loading, probes, "
                        "library candidates, local search and the final build; compilations still "
                        "running at the bound are stopped. -Oz is always built, first: on a module where -Oz "
                        "alone takes longer, the command ends that much later (and says so)")
    p.add_argument("--objective", choices=("ir-count", "text-size"), default="ir-count",
                   help="with --auto: what to minimize: IR instructions (default; CompilerGym's IrInstructionCount) "
                        "or .text bytes of llc -O2's object in target mode (ObjectTextSizeBytes; each candidate "
                        "compiled, so slower)")
    p.add_argument("--library", metavar="DIR",
                   help="with --auto: try this program library's nearest programs' pipelines and coreset instead of "
                        "the shipped ranker's picks")
    p.add_argument("--learn", action="store_true",
                   help="with --auto and --target measure: keep what the search found in the library (saved back "
                        "to --library; an instruction-count library holds counts in measure mode)")
    p.add_argument("--ranker", metavar="DIR",
                   help="with --auto: a pipeline ranker (bpq ranker fit) chooses the candidates instead of the "
                        "library: its picks first, then a local search around the best (a ranker of the "
                        "--objective's rows)")
    p.add_argument("--checkpoint", metavar="DIR", help="with --auto: encoder checkpoint (default: the shipped one)")
    add_target_arguments(p)
    p.add_argument("--size-marks", choices=("Oz", "Os"),
                   help="with --passes in target mode: mark every function definition minsize/optsize (Oz) or "
                        "optsize (Os) before the passes, as clang -Oz / -Os marks them, whatever the passes are; "
                        "what --auto --objective text-size compiles its candidates with (its --json names the "
                        "marks in target.size)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the result (.bc: bitcode, else text IR)")
    add_overwrite_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_optimize)

    p = sub.add_parser("demo", help="features, -Oz and spectra of the shipped example programs, with plots")
    p.add_argument("--out", default="bpq-demo", help="output folder (default: bpq-demo)")
    p.set_defaults(func=cmd_demo)
