"""``bpq lower``, ``bpq compile``, ``bpq evaluate-lowering`` and ``bpq refine-prompt``: IR to x86-64 assembly
with llc or an LLM (verify-and-repair), and the end-to-end compile."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import textwrap
import time
from pathlib import Path

from behavioral_pq.cli.common import (
    add_overwrite_argument,
    add_program_arguments,
    add_target_arguments,
    check_output,
    check_output_folder,
    cli_target,
    load_program,
    parse_passes,
    program_link_flags,
    size_target,
)
from behavioral_pq.cli.guidance import SearchBar
from behavioral_pq.cli.ranker import load_checked_ranker
from behavioral_pq.core.toolchain import CODEGEN_FLAGS, check_codegen_flags

LLM_HELP = """\
LLM endpoint (any OpenAI-compatible chat-completions server: vLLM, llama.cpp server, Ollama, hosted services):
  BPQ_LLM_BASE_URL (e.g. http://127.0.0.1:8000/v1), BPQ_LLM_MODEL, BPQ_LLM_API_KEY, BPQ_LLM_TIMEOUT,
  BPQ_LLM_RETRIES, or --llm-config FILE with an [llm] table (base_url, model, api_key, timeout, retries, ...).
Nothing is sent anywhere unless an endpoint is configured.
"""

LOWER_EPILOG = """\
examples:
  bpq lower prog.c -o prog.s                       # -Oz, then llc-19 -O2
  bpq lower prog.ll --passes O3 --backend llm -o prog.s --repairs 3
  bpq lower --task gcd -o gcd.s --backend llm      # a task from the shipped task sets, checked by its tests

Verification: a task's tests; else, for a module with main, the program's output against llc's build (run with
--run-args, --stdin, --run-dir as bpq compile --help describes under 'Checked runs'); else the assembly must
assemble and define the module's symbols. LLM output is always verified; llc's with --verify.

""" + LLM_HELP

COMPILE_EPILOG = """\
examples:
  bpq compile prog.c -o prog                                # --objective size: -Oz for this machine, llc -O2
  bpq compile prog.c --objective speed -o prog              # a few builds timed; -O3 unless one is faster
  bpq compile prog.c --auto-passes --budget 10 -o prog      # embed, recommend, optimize, lower, verify, link

Objectives. size (default): -Oz passes (or --passes / --auto-passes) in target mode for the CPU the module was
compiled for (--cpu to choose one), llc -O2; it minimizes code size (IR instructions, then .text bytes).
speed: target-mode -O3 for the host CPU and for the CPU the module was compiled for, with and without FMA
contraction, and -O2; each build that passes the check is timed (a program: its own run with --run-args, not the
sandbox's start-up; --runs runs each, interleaved) and its median and interquartile range (IQR) printed. The -O3
build (module CPU, fp-contract=on) is kept unless another's median is at least 1% lower and its runs are faster
by a one-sided Mann-Whitney test at p < 0.01 (5 runs or more); a run under 5 ms is too short to rank and keeps
-O3. --auto-passes searches for the pass list that minimizes the .text bytes of the compiled object (each
candidate is compiled for the target and measured; with --target measure, IR instructions: the ir-count objective
of the program library). --target measure compiles with no target machine (as labels and spectra are measured).

A module with main becomes an executable whose output is checked against the unoptimized module's; any other
module becomes an object file (-o prog.o).

Checked runs. A program is checked by running it: the build must print what the unoptimized module built by
llc -O0 (the reference) prints on stdout (on stderr too with --compare-stderr), exit with the same status and
leave the same files (names and contents) in its working folder. Each run happens in a sandbox that shows only
/usr, a new empty working folder and what you name for the run: arguments of --run-args that name existing files
or folders (a whole word, or the PATH of --flag=PATH; an absolute path at the same path; a path relative to the
current folder at the same relative path inside the working folder, so the program opens it as typed; give a
path with .. as an absolute one), the --run-dir folders, all read-only, and the --stdin file as standard input.
Other paths are not visible in the sandbox (its /tmp is private). The program may write only in its working
folder and in the one --writable-dir folder, of which each run gets a copy of its own (the folder itself is never
changed; the files a run creates, changes or deletes there are compared). The reference run must succeed, and
runs first, before any search: an exit status other than 0 (or than --expect-exit N), a crash, a run longer than
--run-timeout (10 s), or a --stdin file it does not read stops the command with that status and the head of its
stderr; a file or folder named for it that it never opens, or a run that prints
nothing and writes nothing, is noted. Without --run-args, --stdin or --run-dir the check runs the program with no
arguments and empty stdin, and says so. A build that fails its check is not written (exit 1, the first
difference shown) unless --keep-unverified. With --objective speed, a build whose timed runs fail is never ranked.

Whole programs: give every file of a program (bpq compile a.c b.c util.c -o prog) and add --whole-program to make
every definition but main internal before optimizing, as clang -flto does when it links an executable: code no
one calls is removed and functions called once are inlined. On the corpus's multi-file programs this is where
most of the size goes (BENCHMARKS.md, Objectives). Do not use it when something outside the files calls into
the program (dlsym, assembly files, a library's callbacks by name).

""" + LLM_HELP

#: evaluate-lowering's default --pipelines (kept equal to behavioral_pq.reports.lowering.DEFAULT_PIPELINES, which
#: the CLI does not import before it runs; tests/test_lowering.py checks the two agree).
DEFAULT_PIPELINES = "O3,Oz,opt:O3,target:O3,speed"

EVALUATE_EPILOG = """\
example (the project's report):
  bpq evaluate-lowering --out downstream        # writes downstream/lowering.md

Runs llc on the task sets (IR optimized by -O3 and -Oz in measure mode, by opt-19 -O3, by -O3 in target mode
for the host, and by the speed objective), compares with clang-19 -O3 and -O2 (llvm-mca cycles, runtime), and
drives the LLM path through scripted scenarios on a loopback server. With --llm, a configured
model endpoint is evaluated on the same tasks (ACC, ACC+Perf).

""" + LLM_HELP


def parse_codegen_flags(text: str):
    """``--codegen-flags``: ``"auto"``, or the names it gives as a tuple (``none``: empty); ValueError for an
    unknown name."""
    text = text.strip()
    if text in ("auto", "none", ""):
        return "auto" if text == "auto" else ()
    return check_codegen_flags([name.strip() for name in text.split(",")])


def _llm_backend(args, **extra):
    from behavioral_pq.lowering.backends import LLMBackend
    from behavioral_pq.lowering.llm import load_llm_settings
    from behavioral_pq.lowering.prompts import load_prompt

    settings = load_llm_settings(args.llm_config)
    return LLMBackend(settings, prompt=load_prompt(args.prompt), repairs=args.repairs,
                      optimize_rounds=getattr(args, "optimize_rounds", 0), **extra)


def _backend(args, target=None):
    from behavioral_pq.lowering.backends import LlcBackend

    if args.backend == "llc":
        return LlcBackend(opt_level=args.opt_level, cpu=target.cpu if target else None)
    return _llm_backend(args)


def _print_lowering(lowering) -> None:
    for i, attempt in enumerate(lowering.attempts, 1):
        detail = attempt.note or (attempt.message.strip().splitlines() or [""])[0][:150]
        print(f"  answer {i} ({attempt.phase}): {attempt.stage}{': ' + detail if detail else ''}")
    if lowering.verdict is None:
        print("  verification: not run (llc is trusted; --verify to check)")
    elif lowering.verdict.tested and lowering.verdict.ok:
        print(f"  verification: {lowering.verdict.stage}")
    else:
        print(f"  verification: {lowering.verdict.stage} ({lowering.verdict.message})")
    for note in lowering.notes:
        print(f"  note: {note}")


def refuse_unverified(lowering, name: str, output, keep: bool) -> None:
    """Stop before anything is written when the build failed its check (VerificationError), unless ``keep``
    (``--keep-unverified``), which writes it with a warning."""
    from behavioral_pq.errors import VerificationError

    verdict = lowering.verdict
    if verdict is None or verdict.ok:
        return
    first = (verdict.message.strip().splitlines() or [""])[0]
    first = first if len(first) <= 300 else first[:300] + " ..."
    if keep:
        print(f"warning: {name}: the build failed its check ({verdict.stage}: {first}); written anyway "
              "(--keep-unverified)", file=sys.stderr)
        return
    where = f"nothing written at {output}" if output else "nothing written"
    raise VerificationError(f"{name}: the build failed its check ({verdict.stage}: {first}); {where} "
                            "(--keep-unverified writes it anyway)", verdict)


def refuse_input_as_output(outputs, inputs) -> None:
    """An output path that is one of the input files (``bpq compile prog.c -o prog.c`` would replace the source)
    is refused before any work."""
    for output in outputs:
        for source in inputs:
            try:
                same = os.path.samefile(output, source)
            except OSError:
                same = os.path.abspath(output) == os.path.abspath(source)
            if same:
                raise ValueError(f"{output}: the output would replace the input {source}; name another output")


def _lowering_json(lowering) -> dict:
    return {"backend": lowering.backend, "verified": lowering.verified,
            "verdict": None if lowering.verdict is None else {"stage": lowering.verdict.stage,
                                                             "message": lowering.verdict.message,
                                                             "tested": lowering.verdict.tested},
            "notes": list(lowering.notes),
            "answers": [{"phase": a.phase, "stage": a.stage, "message": a.message[:500], "kept": a.kept}
                        for a in lowering.attempts], "seconds": round(lowering.seconds, 3)}


def run_arguments(args) -> list:
    """The program's arguments from ``--run-args``: each value already split (``type=shlex.split``), joined."""
    return [word for value in args.run_args for word in value]


def run_input(args):
    """The checked run's :class:`~behavioral_pq.lowering.runs.RunInput` from the options of ``_add_run_options``
    (made before any work, so a missing file is reported at once)."""
    from behavioral_pq.lowering.runs import RunInput

    words = run_arguments(args)
    for k, word in enumerate(words):
        if word in ("<", ">", ">>", "|", "2>") or (word[:1] in "<>|" and len(word) > 1):
            target = word.lstrip("<>|2") or (words[k + 1] if k + 1 < len(words) else "FILE")
            hint = f"give --stdin {target}" if word.startswith("<") else "compare outputs through --writable-dir"
            raise ValueError(f"--run-args: {word!r}: no shell runs the program, so a redirection is passed to it as "
                             f"an argument; {hint}")
    timeout = getattr(args, "run_timeout", 10.0)
    if not (0 < timeout < float("inf")):
        raise ValueError(f"--run-timeout must be a positive number of seconds, got {timeout:g}")
    return RunInput(args=tuple(words), stdin=args.stdin, folders=tuple(args.run_dir),
                    writable=args.writable_dir, expect_exit=args.expect_exit, compare_stderr=args.compare_stderr,
                    link_flags=tuple(program_link_flags(args)))


def cmd_lower(args) -> int:
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.errors import ToolError
    from behavioral_pq.lowering.backends import lower
    from behavioral_pq.lowering.harness import static_cost
    from behavioral_pq.lowering.tasks import load_tasks

    if bool(args.files or args.compile_commands) == bool(args.task):
        raise ValueError("give a FILE or --task NAME (see bpq lower --help)")
    output = check_output(args.output, args.overwrite)
    refuse_input_as_output([output] if output else [], list(args.files or []))
    run = run_input(args)
    task = load_tasks(args.task_set, names=[args.task])[0] if args.task else None
    module = task.module() if task else load_program(args)
    run = run_input(args)   # again: with the link flags the compile database records for a --program
    target = cli_target(args)
    optimized = (optimize(module, parse_passes(args.passes), target=target) if args.passes.lower() != "none"
                 else module)
    lowering = lower(optimized, _backend(args, target), task=task, verify=True if args.verify else None,
                     reference=module, run=run)
    try:
        cost = static_cost(lowering.assembly)
    except ToolError:  # nothing mca can measure, e.g. a module that only declares or holds data
        cost = None
    if not args.json:
        print(f"{module.name}: {module.instruction_count} -> {optimized.instruction_count} IR instructions "
              f"({args.passes}); lowered by {lowering.backend} in {lowering.seconds:.2f} s")
        _print_lowering(lowering)
    refuse_unverified(lowering, module.name, args.output, args.keep_unverified)
    if output:
        lowering.save(output)
    if args.json:
        print(json.dumps({"module": module.name, "passes": args.passes, **_lowering_json(lowering),
                          "mca_cycles": cost.cycles if cost else None, "output": args.output}, indent=1))
        return 0
    print(f"  llvm-mca: {cost.cycles} cycles for 100 iterations ({cost.instructions // 100} instructions)" if cost
          else "  llvm-mca: no instructions to measure")
    print(f"wrote {args.output}" if args.output else "(no -o given: nothing written)")
    return 0


def cmd_compile(args) -> int:
    from behavioral_pq.core.module import load_module
    from behavioral_pq.core.toolchain import internalize_bitcode
    from behavioral_pq.lowering.harness import defines_main, harness_for

    if args.auto_passes and args.passes:
        raise ValueError("give --auto-passes or --passes, not both")
    if args.ranker and not args.auto_passes:
        raise ValueError("--ranker chooses the --auto-passes search's candidates: give --auto-passes")
    if args.objective == "speed" and (args.auto_passes or args.passes or args.backend != "llc"):
        raise ValueError("--objective speed chooses its own passes and llc builds: drop --passes, --auto-passes "
                         "and --backend")
    if args.outline == "on" and (args.objective == "speed" or args.backend != "llc"):
        raise ValueError("--outline on is an llc option of size builds: drop it with --objective speed or "
                         "--backend llm")
    if args.block_placement == "off" and (args.objective == "speed" or args.backend != "llc"):
        raise ValueError("--block-placement off is an llc option of size builds: drop it with --objective speed or "
                         "--backend llm")
    codegen_flags = parse_codegen_flags(args.codegen_flags)
    if codegen_flags not in ("auto", ()) and (args.objective == "speed" or args.backend != "llc"):
        raise ValueError("--codegen-flags names llc options of size builds: drop it with --objective speed or "
                         "--backend llm")
    stem = (Path(args.files[0]).stem if args.files else Path(args.program).stem if getattr(args, "program", None)
            else "program")
    names = [Path(args.output)] if args.output else [Path(stem), Path(stem + ".o")]   # without -o: main decides
    if args.keep_assembly:
        if args.output and Path(args.output).suffix == ".s":
            raise ValueError(f"{args.output}: --keep-assembly writes the assembly beside the output, with the suffix "
                             ".s, which is this output's own name: name the output otherwise")
        names += [name.with_suffix(".s") for name in names]
    outputs = {name: check_output(name, args.overwrite) for name in names}   # each name it may write, checked now
    refuse_input_as_output(list(outputs), list(args.files or []))
    run = run_input(args)
    target = cli_target(args)
    if args.objective == "size":
        target = size_target(args, target)
    ranker = encoder = None
    if args.ranker:
        # what --auto-passes searches for: .text bytes in target mode, IR instructions in measure mode
        wanted = "text-size" if target is not None else "ir-count"
        ranker, encoder = load_checked_ranker(args.ranker, objective=wanted, why=(
            "give a text-size ranker, or --target measure" if target is not None else "give an ir-count ranker"))
    start = time.monotonic()
    module = original = load_program(args)
    run = run_input(args)   # again: with the link flags the compile database records for a --program
    where = f"target mode for {target.cpu or 'the module CPU'} ({target.triple})" if target else "measure mode"
    print(f"1. load       {module.name}: {module.instruction_count} IR instructions; {where}")
    if args.whole_program:
        if not defines_main(module):
            raise ValueError(f"{module.name}: --whole-program needs a program that defines main (give all its files)")
        module = load_module(internalize_bitcode(module.bitcode), name=module.name)
        print("   whole program: every definition but main made internal (as LTO does for an executable)")
    check = None
    if args.objective != "speed" and not args.no_verify:
        # the reference build and run first: a missing input, a program that does not link or a run that fails
        # is said now, not after the search
        bound = {"max_assembly_bytes": None} if args.backend == "llc" else {}
        check = harness_for(module, reference=original, run=run, run_timeout=args.run_timeout, **bound)
        if defines_main(module):
            print(f"   check:     the -O0 reference runs with {run.describe()}: exit status "
                  f"{check.expected_status}, {check.expected_streams[0].size:,} bytes on stdout, "
                  f"{len(check.expected_files)} files written")
    try:
        return _compile(args, module, original, target, check, run, ranker, encoder, codegen_flags, outputs, stem,
                        start)
    finally:
        if check is not None:
            check.close()


def _compile(args, module, original, target, check, run, ranker, encoder, codegen_flags, outputs, stem,
             start) -> int:
    """The rest of :func:`cmd_compile` once the program is loaded and its check (``check``, a harness, or None
    without one) is made: search, optimize, lower, write."""
    from behavioral_pq.artifacts import write_text_atomic
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.core.catalog import steps_pipeline
    from behavioral_pq.core.engine import default_engine
    from behavioral_pq.core.toolchain import assemble, needs_cxx_runtime, smaller_codegen
    from behavioral_pq.lowering.backends import LlcBackend, lower
    from behavioral_pq.lowering.harness import defines_main, harness_for
    from behavioral_pq.lowering.speed import SpeedBackend
    from behavioral_pq.tasks.guidance import Trials, describe_steps, recommend_pipeline
    from behavioral_pq.tasks.guidance.trials import candidate_target
    from behavioral_pq.tasks.guidance.recommend import SIZE_SEEDS

    if args.objective == "speed":
        from tqdm import tqdm

        backend = SpeedBackend(runs=args.runs)
        # progress on stderr when it is a terminal: each build, its check, each timed run
        with tqdm(total=1, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False, dynamic_ncols=True,
                  bar_format="{desc}: {n}/{total} steps [{elapsed}]") as bar:
            def show(step):
                bar.total, bar.n = step.total, step.done
                bar.set_description_str(step.phase)

            if args.no_verify:
                lowering = backend.lower(module, None, progress=show)
            else:
                with harness_for(module, run=run, max_assembly_bytes=None, run_timeout=args.run_timeout) as harness:
                    lowering = backend.lower(module, harness, progress=show)
        choice = backend.last
        order = {c.label: k for k, c in enumerate(backend.candidates)}
        for label, median, stage in sorted(choice.tried, key=lambda t: order.get(t[0], len(order))):
            name = label + (" (-O3)" if label == choice.baseline.label else "")
            timing = choice.timings.get(label)
            if timing is None:
                print(f"2. build      {name}: {stage}")
                continue
            spread = timing.spread_ns
            print(f"2. build      {name}, median of {len(timing.samples)} runs (IQR {spread / 1e6:.2f} ms, "
                  f"{100 * spread / max(median, 1.0):.1f}%): {median / 1e6:.2f} ms")
        print(f"3. choose     {choice.chosen.label}: {choice.reason}")
        for note in choice.notes:
            print(f"   note: {note}")
        optimized = module
    else:
        built_for = target
        if args.auto_passes:
            # for size in target mode each candidate is compiled and its .text measured; in measure mode, the
            # library's own objective (IR instructions) is all there is
            objective = "text-size" if target is not None else "ir-count"
            with SearchBar(args.budget, sys.stderr.isatty()) as bar:
                found = recommend_pipeline(module, args.budget, objective=objective, target=target, progress=bar,
                                           ranker=ranker, encoder=encoder)
            pipeline = found.pipeline
            built_for = candidate_target(target, found.steps)    # as the search compiled it
            result = (f".text: -Oz gives {found.oz_text_size} bytes, this {found.text_size}" if target is not None
                      else f"-Oz gives {found.oz_count} instructions, this {found.instruction_count}")
            print(f"2. recommend  {len(found.steps)} steps by {found.method} in {found.compilations}/{found.budget} "
                  f"compilations ({result})")
            print("   pipeline:  " + textwrap.shorten(describe_steps(found.steps), 300, placeholder=" ..."))
        elif args.passes or target is None:
            pipeline = parse_passes(args.passes or "Oz")
            print(f"2. passes     {args.passes or 'Oz'}")
        else:  # size by default: -Oz, or -Os where its .text is smaller (the text-size search's first step)
            trials = Trials(module, default_engine(), 1, objective="text-size", target=target)
            trials.run([SIZE_SEEDS], "-Os")
            steps, _ = trials.best()
            pipeline = steps_pipeline(steps)
            print(f"2. passes     {steps[0].lstrip('-')} (.text: -Oz {trials.oz_count} bytes, "
                  f"-Os {trials.counts[SIZE_SEEDS] or 'failed'})")
        optimized = optimize(module, pipeline, target=built_for).verify()
        print(f"3. optimize   {module.instruction_count} -> {optimized.instruction_count} IR instructions (verified)")
        outline, placement = args.outline == "on", args.block_placement != "off"
        flags = codegen_flags if codegen_flags != "auto" else ()
        if "auto" in (args.outline, args.block_placement, codegen_flags) and args.backend == "llc" \
                and target is not None:
            choice = smaller_codegen(optimized.bitcode, opt_level=args.opt_level, cpu=target.cpu or None,
                                     relocation_model=args.relocation_model,
                                     outline=(False, True) if args.outline == "auto" else (outline,),
                                     block_placement=(True, False) if args.block_placement == "auto" else (placement,),
                                     flags=tuple(CODEGEN_FLAGS) if codegen_flags == "auto" else (), keep=flags)
            outline, placement, flags = choice.outline, choice.block_placement, choice.flags
            print(f"   codegen:   machine outliner {'on' if outline else 'off'}, block placement "
                  f"{'on' if placement else 'off'}, llc flags {', '.join(flags) or 'none'} (.text {choice.text} "
                  f"bytes, {choice.plain} with llc's defaults; {choice.builds} builds measured)")
        backend = (LlcBackend(opt_level=args.opt_level, cpu=target.cpu if target else None,
                              relocation_model=args.relocation_model, outline=outline, block_placement=placement,
                              flags=flags)
                   if args.backend == "llc" else _llm_backend(args))
        lowering = lower(optimized, backend, verify=not args.no_verify, reference=original, run=run, harness=check)
    print(f"4. lower      {lowering.backend}, {len(lowering.assembly.splitlines())} lines of assembly "
          f"({lowering.seconds:.2f} s)")
    _print_lowering(lowering)
    program = defines_main(module)
    output = Path(args.output or (stem + ("" if program else ".o")))
    refuse_unverified(lowering, module.name, output, args.keep_unverified)
    source = output.with_suffix(".s") if args.keep_assembly else None
    if source is not None:
        write_text_atomic(outputs[source], lowering.assembly)
    assemble(lowering.assembly, outputs[output], executable=program, cxx=program and needs_cxx_runtime(module.text()),
             link_flags=run.link_flags)
    kind = "executable" if program else "object file"
    print(f"5. {'link' if program else 'assemble':<11}wrote {output} ({kind}"
          + (f", assembly in {source}" if source else "") + f"); {time.monotonic() - start:.1f} s in all")
    return 0


def cmd_evaluate_lowering(args) -> int:
    from behavioral_pq.reports.lowering import evaluate_lowering

    check_output_folder(args.out)
    report, path = evaluate_lowering(Path(args.out), tasks=args.tasks,
                                     pipelines=[p.strip() for p in args.pipelines.split(",")],
                                     timing_runs=args.timing_runs, margin=args.margin, repairs=args.repairs,
                                     llm=_llm_backend(args) if args.llm else None, scripted=not args.no_scripted,
                                     command=_evaluate_command(args), progress=True)
    print(json.dumps(report, indent=1) if args.json else path.read_text())
    return 0


def _evaluate_command(args) -> str:
    """The command line that reproduces the report (options left at their defaults are not repeated)."""
    parts = [f"bpq evaluate-lowering --out {args.out}"]
    for flag, value, default in (("--tasks", args.tasks, "all"), ("--pipelines", args.pipelines, DEFAULT_PIPELINES),
                                 ("--timing-runs", args.timing_runs, 5), ("--margin", args.margin, 0.05),
                                 ("--repairs", args.repairs, 3)):
        if value != default:
            parts.append(f"{flag} {value}")
    parts += [flag for flag, on in (("--llm", args.llm), ("--no-scripted", args.no_scripted)) if on]
    return " ".join(parts)


def cmd_refine_prompt(args) -> int:
    import statistics

    from behavioral_pq.lowering.backends import LLMBackend
    from behavioral_pq.lowering.prompts import refine_prompt
    from behavioral_pq.lowering.tasks import load_tasks, split_tasks
    from behavioral_pq.reports.lowering import run_tasks

    check_output_folder(args.out)
    backend = _llm_backend(args)
    train, held_out = split_tasks(load_tasks(args.tasks), held_out=args.held_out, seed=args.seed)

    def run(tasks, prompt):
        return run_tasks(tasks, LLMBackend(client=backend.client, prompt=prompt, repairs=args.repairs),
                         pipeline=args.pipeline, progress=True)

    base = backend.prompt
    refinement = refine_prompt(base, run(train, base), backend.client)
    print(f"{refinement.traces_used} repaired traces on {len(train)} train tasks; {len(refinement.proposed)} "
          f"lessons proposed, {len(refinement.kept)} kept")
    for lesson, why in refinement.rejected:
        print(f"  rejected ({why}): {lesson}")
    for prompt in (base, refinement.prompt):
        results = run(held_out, prompt)
        accuracy = sum(r.ok for r in results) / max(1, len(results))
        rounds = statistics.mean(r.rounds for r in results) if results else 0.0
        print(f"held-out ({len(held_out)} tasks), prompt v{prompt.version}: ACC {accuracy:.3f}, "
              f"mean answers {rounds:.2f}")
    if refinement.prompt is not base:
        print(f"wrote {refinement.prompt.save(args.out)}")
    return 0


def _add_llm_options(p, *, optimize: bool = True) -> None:
    g = p.add_argument_group("LLM back end")
    g.add_argument("--unsafe-run", action="store_true",
                   help="where bubblewrap cannot run, still run model-written code, unprotected (also: "
                        "BPQ_UNSAFE_RUN=1); by default it is refused")
    g.add_argument("--llm-config", metavar="FILE", help="TOML settings with an [llm] table (default: environment)")
    g.add_argument("--prompt", metavar="FILE|DIR", help="prompt file or folder (default: built-in version 1)")
    g.add_argument("--repairs", type=int, default=3, metavar="R", help="failed answers fed back at most R times "
                                                                      "(default 3)")
    if optimize:
        g.add_argument("--optimize-rounds", type=int, default=0, metavar="K",
                       help="after a correct answer, ask K times for faster code (kept only if correct and faster)")


def _add_run_options(p) -> None:
    g = p.add_argument_group("checked runs (a program with main; see 'Checked runs' below)")
    g.add_argument("--run-args", nargs="*", action="extend", default=[], metavar="ARG", type=shlex.split,
                   help="arguments the program is checked (and, for --objective speed, timed) with; each value is "
                        "split as a shell would (no shell runs), so flags go in one quoted value: "
                        "--run-args '-l /usr/include' (repeatable); those naming existing files or folders are "
                        "shown to the run read-only")
    g.add_argument("--stdin", metavar="FILE", help="file the checked runs read as standard input (default: empty)")
    g.add_argument("--run-dir", action="append", default=[], metavar="DIR",
                   help="a folder the program reads without naming it in --run-args, shown read-only (repeatable)")
    g.add_argument("--writable-dir", metavar="DIR",
                   help="the one folder the program may write to besides its working folder, shown read-write; the "
                        "files a run creates or changes there are compared")
    g.add_argument("--expect-exit", type=int, metavar="N",
                   help="the exit status the reference run should end with (default 0: another stops the command)")
    g.add_argument("--run-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="seconds each checked (or timed) run may take (default 10); a reference run that takes "
                        "longer stops the command")
    g.add_argument("--compare-stderr", action="store_true", help="compare standard error too (default: stdout, "
                                                                 "exit status and written files)")


def add_parsers(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("lower", help="lower a module to x86-64 assembly with llc or an LLM (verified)",
                       epilog=LOWER_EPILOG, formatter_class=fmt)
    add_program_arguments(p, links=True)
    p.add_argument("--task", metavar="NAME", help="a task from --task-set instead of FILE (checked by its tests)")
    p.add_argument("--task-set", default="all", help="functions, kernels, all (default) or a task-set .json")
    p.add_argument("--passes", default="Oz", help="passes to run before lowering (default Oz; 'none' for none)")
    p.add_argument("--backend", choices=("llc", "llm"), default="llc")
    p.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3), help="llc -O level (default 2)")
    p.add_argument("--verify", action="store_true", help="verify llc's output too (the LLM's always is)")
    p.add_argument("--keep-unverified", action="store_true",
                   help="write the assembly even when it fails its check (by default a failed check writes nothing "
                        "and exits 1)")
    _add_run_options(p)
    add_target_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT.s", help="write the assembly")
    add_overwrite_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_llm_options(p)
    p.set_defaults(func=cmd_lower)

    p = sub.add_parser("compile", help="embed, recommend passes, optimize, lower, verify and link",
                       epilog=COMPILE_EPILOG, formatter_class=fmt)
    add_program_arguments(p, links=True)
    p.add_argument("--objective", choices=("size", "speed"), default="size",
                   help="what to minimize: code size (default) or run time (see below)")
    p.add_argument("--auto-passes", action="store_true",
                   help="search for the passes that give the smallest .text (IR instructions with --target "
                        "measure), starting from the embedding's nearest library programs (the search's progress "
                        "on stderr when it is a terminal)")
    p.add_argument("--budget", type=int, default=10, help="with --auto-passes: compilations to try (default 10)")
    p.add_argument("--ranker", metavar="DIR", help="with --auto-passes and --target measure: a pipeline ranker (bpq "
                                                   "ranker fit) chooses the candidates instead of the library")
    p.add_argument("--passes", help="passes to run instead (default Oz)")
    p.add_argument("--backend", choices=("llc", "llm"), default="llc")
    p.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3), help="llc -O level (default 2)")
    p.add_argument("--no-verify", action="store_true", help="skip running the program against the unoptimized one")
    p.add_argument("--keep-unverified", action="store_true",
                   help="write the build even when it fails its check (by default a failed check writes nothing "
                        "and exits 1)")
    _add_run_options(p)
    p.add_argument("--runs", type=int, default=5,
                   help="with --objective speed: timed runs per build (default 5; fewer cannot show a build faster "
                        "than -O3, which is then kept)")
    p.add_argument("--relocation-model", choices=("pic", "static", "dynamic-no-pic"), default="pic",
                   help="llc relocation model (default pic: the distribution's clang links PIE)")
    p.add_argument("--outline", choices=("auto", "on", "off"), default="auto",
                   help="llc's machine outliner (repeated instruction sequences become calls; size builds only): "
                        "auto (default) keeps it where the .text is smaller in target mode, on, or off")
    p.add_argument("--block-placement", choices=("auto", "on", "off"), default="auto",
                   help="llc's block placement (blocks laid out for branch prediction; off keeps the IR's order, "
                        "often smaller; size builds only): auto (default) turns it off where the .text is smaller "
                        "in target mode, on, or off")
    p.add_argument("--codegen-flags", default="auto", metavar="auto|none|NAME,...",
                   help="more llc options for size builds: auto (default) tries each in turn and keeps it where the "
                        ".text is smaller in target mode (one llc build each); none; or these names, always given, "
                        "comma-separated: "
                        + ", ".join(CODEGEN_FLAGS))
    p.add_argument("--whole-program", action="store_true",
                   help="FILEs are the whole program: make every definition but main internal first, as LTO does "
                        "(unused code goes, single callers inline; often far smaller, see BENCHMARKS.md)")
    add_target_arguments(p)
    p.add_argument("--keep-assembly", action="store_true", help="also write the assembly next to the output")
    p.add_argument("-o", "--output", metavar="BIN", help="executable (or object file for a module without main)")
    add_overwrite_argument(p)
    _add_llm_options(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("evaluate-lowering", help="llc and LLM lowering on the task sets; writes lowering.md",
                       epilog=EVALUATE_EPILOG, formatter_class=fmt)
    p.add_argument("--out", required=True, metavar="DIR", help="report folder")
    p.add_argument("--tasks", default="all", help="functions, kernels, all (default) or a task-set .json")
    p.add_argument("--pipelines", default=DEFAULT_PIPELINES,
                   help="IR pipelines before llc: bpq passes (measure mode), target:LEVEL (target mode on the host), "
                        f"opt:LEVEL for opt-19, speed (the speed objective) (default {DEFAULT_PIPELINES})")
    p.add_argument("--timing-runs", type=int, default=5, help="process runs per timing (default 5)")
    p.add_argument("--margin", type=float, default=0.05, help="speedup margin before 'faster' (default 0.05)")
    p.add_argument("--llm", action="store_true", help="also evaluate the configured LLM endpoint")
    p.add_argument("--no-scripted", action="store_true", help="skip the scripted-server scenarios")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_llm_options(p, optimize=True)
    p.set_defaults(func=cmd_evaluate_lowering)

    p = sub.add_parser("refine-prompt", help="learn prompt lessons from repair traces on a configured LLM",
                       epilog=LLM_HELP, formatter_class=fmt)
    p.add_argument("--out", required=True, metavar="DIR", help="prompt folder (prompt-v<N>.json)")
    p.add_argument("--tasks", default="all", help="task set to split into train and held-out (default all)")
    p.add_argument("--held-out", type=float, default=0.5, help="held-out share (default 0.5)")
    p.add_argument("--pipeline", default="O3", help="IR pipeline before lowering (default O3)")
    p.add_argument("--seed", type=int, default=0)
    _add_llm_options(p, optimize=False)
    p.set_defaults(func=cmd_refine_prompt)
