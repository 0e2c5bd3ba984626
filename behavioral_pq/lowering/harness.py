"""Verification of x86-64 assembly: assemble, link with a test driver, run with a timeout, compare outputs.

Every candidate, from ``llc`` or an LLM, goes through a :class:`Harness`, which answers a :class:`Verdict` naming
the stage that failed (``assemble``, ``link``, ``crash``, ``timeout``, ``wrong-output``) with the tool's or the
program's own words. Three harnesses cover three kinds of input:

* :class:`TaskHarness`: a task from a task set; the driver calls the function on its cases (or the kernel at its
  test size) and the output must match a reference build of the C source (``clang-19 -O0``);
* :class:`ProgramHarness`: a module that defines ``main``; the program alone must print what the module lowered
  by ``llc-19 -O0`` prints, with the same exit status;
* :class:`SymbolHarness`: any other module; the assembly must assemble and define the module's external symbols.
  Nothing runs, and the verdict says so (``tested`` is False).

Also here: static cost by ``llvm-mca-19`` (:func:`static_cost`) and runtime (:meth:`Harness.timing`, kernels only),
with :func:`is_faster` deciding "faster" only past a margin.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import statistics
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import excerpt, find_tool, linker, llc_assembly, needs_cxx_runtime, run_tool
from behavioral_pq.errors import LoweringError, ToolError
from behavioral_pq.lowering.sandbox import MAX_ASSEMBLY_BYTES, Limits, Sandbox, describe, screen_assembly, scrub
from behavioral_pq.lowering.tasks import Task

#: Failure stages, in the order a candidate meets them.
STAGES = ("assemble", "link", "crash", "timeout", "wrong-output")
FLOAT_RELATIVE_TOLERANCE = 1e-6
FLOAT_ABSOLUTE_TOLERANCE = 1e-9
#: seconds a timing run (benchmark size, all repetitions) may take
TIMING_TIMEOUT = 60.0
#: llvm-mca's scheduling model; fixed so costs compare across machines.
MCA_CPU = "skylake"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The outcome of checking one assembly text. ``stage`` is ``"ok"`` or one of :data:`STAGES`; ``message``
    holds the assembler/linker stderr, the signal, or the first differing output; ``tested`` is False when
    nothing was run (a :class:`SymbolHarness`)."""

    stage: str
    message: str = ""
    tested: bool = True

    @property
    def ok(self) -> bool:
        return self.stage == "ok"

    def feedback(self) -> str:
        """The verdict as the repair loop tells it to a model."""
        return {"assemble": "The assembler rejected the code:",
                "link": "Linking with the test driver failed:",
                "crash": "The program crashed:",
                "timeout": "The program did not finish in time (an infinite loop?):",
                "wrong-output": "The program ran but printed wrong results:",
                }.get(self.stage, "Result:") + "\n" + self.message


@dataclasses.dataclass(frozen=True)
class Timing:
    """Runtime of one build: ``samples`` (ns, one per process run, each the fastest of the driver's repetitions)
    and their median, the robust statistic used for comparisons."""

    samples: Tuple[float, ...]

    @property
    def median_ns(self) -> float:
        return float(statistics.median(self.samples))


@dataclasses.dataclass(frozen=True)
class StaticCost:
    """llvm-mca's estimate for the whole assembly text run ``iterations`` times on :data:`MCA_CPU`."""

    cycles: int
    instructions: int
    uops: int
    block_rthroughput: float


def is_faster(candidate: Timing, baseline: Timing, margin: float = 0.05) -> bool:
    """True when the candidate's median beats the baseline's by more than ``margin`` (5%: below that, noise)."""
    return candidate.median_ns < baseline.median_ns * (1.0 - margin)


def compare_outputs(expected: str, actual: str) -> Optional[str]:
    """None when the outputs agree, else a description of the first difference. Tokens that parse as integers
    must be equal; floats must agree within :data:`FLOAT_RELATIVE_TOLERANCE` (or the absolute tolerance)."""
    want, got = expected.strip().splitlines(), actual.strip().splitlines()
    for number, (w, g) in enumerate(zip(want, got), 1):
        if not _same_line(w, g):
            return f"line {number}: expected {w!r}, got {g!r}"
    if len(want) != len(got):
        return f"expected {len(want)} lines of output, got {len(got)}" + (
            f"; first extra line: {got[len(want)]!r}" if len(got) > len(want) else "")
    return None


def _same_line(want: str, got: str) -> bool:
    a, b = want.split(), got.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if re.fullmatch(r"-?\d+", x) or re.fullmatch(r"-?\d+", y):
            return False
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if math.isnan(fx) and math.isnan(fy):
            continue
        if not math.isclose(fx, fy, rel_tol=FLOAT_RELATIVE_TOLERANCE, abs_tol=FLOAT_ABSOLUTE_TOLERANCE):
            return False
    return True


def static_cost(assembly: str, *, iterations: int = 100, cpu: str = MCA_CPU, timeout: float = 60.0) -> StaticCost:
    """llvm-mca-19's cost of the assembly (all its functions as one block). Raises ToolError when mca cannot
    read it, or when it holds a directive that reads files."""
    refused = screen_assembly(assembly)
    if refused:
        raise ToolError(f"llvm-mca not run: {refused}")
    proc = run_tool([find_tool("llvm-mca"), f"-mcpu={cpu}", f"-iterations={iterations}", "-"],
                    input=assembly.encode(), timeout=timeout)
    text = proc.stdout.decode(errors="replace")
    fields = {}
    for key in ("Iterations", "Instructions", "Total Cycles", "Total uOps", "Block RThroughput"):
        match = re.search(rf"^{key}:\s+([\d.]+)", text, re.M)
        if not match:
            raise ToolError(f"llvm-mca printed no {key!r}: {text[:300]}")
        fields[key] = float(match.group(1))
    return StaticCost(int(fields["Total Cycles"]), int(fields["Instructions"]), int(fields["Total uOps"]),
                      fields["Block RThroughput"])


class Harness:
    """Checks assembly for one module. Subclasses set the driver and the expected output; use as a context
    manager, or call :meth:`close`, to remove the scratch folder."""

    #: whether :meth:`timing` is available (kernels with a timing driver)
    timed = False
    #: whether candidates are run, or only assembled
    runs = True

    def __init__(self, *, run_timeout: float = 10.0, tool_timeout: float = 60.0, unsafe_run: Optional[bool] = None,
                 limits: Limits = Limits(), max_assembly_bytes: Optional[int] = MAX_ASSEMBLY_BYTES):
        """``max_assembly_bytes``: the largest assembly text checked (None: no bound, for llc's own output; a model's
        answers keep the bound). The harness's own reference builds are never bounded."""
        self.run_timeout = run_timeout
        self.tool_timeout = tool_timeout
        self.max_assembly_bytes = max_assembly_bytes
        self.workdir = Path(tempfile.mkdtemp(prefix="bpq-lower-"))
        self.sandbox = Sandbox(self.workdir, limits, unsafe=unsafe_run)
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.workdir), True)
        self._counter = 0
        self._lock = threading.Lock()

    # -- public ----------------------------------------------------------------------------------------------

    def check(self, assembly: str) -> Verdict:
        """Assemble, link, run and compare; the first failing stage decides the verdict."""
        try:
            binary = self._build(assembly)
        except _StageError as exc:
            return Verdict(exc.stage, exc.message)
        return self._check_binary(binary)

    def timing(self, assembly: str, runs: int = 5) -> Timing:
        """Runtime of the assembly's build at the benchmark size (``runs`` process runs)."""
        return self.timings([assembly], runs)[0]

    def timings(self, assemblies: Sequence[str], runs: int = 5) -> List[Timing]:
        """Runtimes of several builds, each built once and timed interleaved: every round runs each build once,
        so a machine that speeds up or slows down during the measurement moves them all alike."""
        return self._interleave([self._timing_binary(a) for a in assemblies], runs)

    def _interleave(self, binaries: Sequence[Path], runs: int) -> List[Timing]:
        samples: List[List[float]] = [[] for _ in binaries]
        for _ in range(runs):
            for k, binary in enumerate(binaries):
                samples[k].append(self._sample(binary))
        return [Timing(tuple(s)) for s in samples]

    def _timing_binary(self, assembly: str) -> Path:
        """The assembly's build, ready to time (a subclass with a timing driver says how)."""
        raise NotImplementedError(f"{type(self).__name__} has no timing driver")

    def _sample(self, binary: Path) -> float:
        """One timed run of a built binary, in ns."""
        raise NotImplementedError(f"{type(self).__name__} has no timing driver")

    def close(self) -> None:
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- building blocks -------------------------------------------------------------------------------------

    def _scratch(self, suffix: str) -> Path:
        with self._lock:
            self._counter += 1
            return self.workdir / f"c{self._counter}{suffix}"

    def _clean(self, text: str) -> str:
        """Tool output as it may go back to an endpoint: work-folder paths relative, other paths and
        environment values hidden, bounded (see :func:`~behavioral_pq.lowering.sandbox.scrub`)."""
        return scrub(text, workdir=self.workdir)

    def _tool(self, stage: str, argv: Sequence[str]) -> None:
        """Run a tool on untrusted input in the sandbox; a failure is a ``stage`` verdict."""
        result = self.sandbox.run(argv, timeout=self.tool_timeout)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).decode(errors="replace").strip()
            why = describe(result)[1] if result.returncode is None else f"exited with {result.returncode}"
            raise _StageError(stage, self._clean(f"{Path(argv[0]).name} {why}: {excerpt(detail)}"))

    def _assemble(self, assembly: str, *, own: bool = False) -> Path:
        """An object of ``assembly``; ``own``: the harness's own llc build (a reference), never size-bounded."""
        refused = screen_assembly(assembly, max_bytes=None if own else self.max_assembly_bytes)
        if refused:
            raise _StageError("assemble", f"refused before assembling: {refused}")
        source, obj = self._scratch(".s"), self._scratch(".o")
        source.write_text(assembly if assembly.endswith("\n") else assembly + "\n")
        self._tool("assemble", [find_tool("clang"), "-c", "-x", "assembler", str(source), "-o", str(obj)])
        return obj

    def _link(self, objects: Sequence[Path], cxx: bool = False) -> Path:
        binary = self._scratch("")
        head, *libraries = linker(cxx)
        self._tool("link", [head, *map(str, objects), "-o", str(binary), *libraries])
        return binary

    def _compile_c(self, source: Path, flags: Sequence[str]) -> Path:
        obj = self._scratch(".o")
        run_tool([find_tool("clang"), *flags, "-c", str(source), "-o", str(obj)], timeout=self.tool_timeout)
        return obj

    def _execute(self, binary: Path, args: Sequence[str] = (), timeout: Optional[float] = None) -> Tuple[int, str]:
        """Run a built program: (exit status, stdout); raises _StageError for a signal or a timeout.

        Every run starts in a new empty folder, so the reference and a candidate see the same working folder (not
        the builds beside them) and nothing one run leaves behind changes the next."""
        timeout = timeout or self.run_timeout
        folder = self.workdir / "run"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        result = self.sandbox.run([str(binary), *args], timeout=timeout, cwd=folder)
        if result.returncode is None:
            stage, message = describe(result)
            raise _StageError(stage, self._clean(message))
        return result.returncode, result.stdout.decode(errors="replace")

    def _build(self, assembly: str) -> Path:
        raise NotImplementedError

    def _check_binary(self, binary: Path) -> Verdict:
        raise NotImplementedError


class _StageError(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage
        self.message = message


_REFERENCE_OUTPUTS: Dict[str, str] = {}


class TaskHarness(Harness):
    """Checks a task's assembly against its C source built by ``clang-19 -O0``, through the generated driver."""

    def __init__(self, task: Task, **kwargs):
        super().__init__(**kwargs)
        self.task = task
        self.timed = task.timed
        driver = self.workdir / "driver.c"
        driver.write_text(task.driver_source())
        self.driver = self._compile_c(driver, ["-O1", "-std=gnu11"])
        self._baselines: Dict[str, Timing] = {}

    @property
    def expected(self) -> str:
        """The reference build's output (cached per task)."""
        key = self.task.digest
        if key not in _REFERENCE_OUTPUTS:
            reference = self._link([self.driver, self._compile_c(self.task.source, ["-O0"])])
            status, out = self._execute(reference)
            if status != 0:
                raise RuntimeError(f"task {self.task.name}: the reference build exited with {status}")
            _REFERENCE_OUTPUTS[key] = out
        return _REFERENCE_OUTPUTS[key]

    def _build(self, assembly: str) -> Path:
        return self._link([self.driver, self._assemble(assembly)])

    def _check_binary(self, binary: Path) -> Verdict:
        try:
            status, out = self._execute(binary)
        except _StageError as exc:
            return Verdict(exc.stage, exc.message)
        if status != 0:
            return Verdict("crash", f"exited with status {status}")
        difference = compare_outputs(self.expected, out)
        if difference:
            return Verdict("wrong-output", difference)
        return Verdict("ok")

    def _timing_binary(self, assembly: str) -> Path:
        if not self.timed:
            raise NotImplementedError(f"task {self.task.name} is a {self.task.kind}, not timed")
        try:
            return self._build(assembly)
        except _StageError as exc:
            raise ToolError(f"{self.task.name}: cannot time assembly that fails to build: {exc.message}") from None

    def _baseline_binary(self, level: str) -> Path:
        return self._link([self.driver, self._compile_c(self.task.source, [f"-{level}"])])

    def baseline_timing(self, runs: int = 5, level: str = "O3") -> Timing:
        """Runtime of the C source built by ``clang-19 -<level>`` with the same driver (cached per level)."""
        found = self._baselines.get(level)
        if found is None or len(found.samples) != runs:
            found = self._baselines[level] = self._interleave([self._baseline_binary(level)], runs)[0]
        return found

    def compare_timings(self, assembly: str, runs: int = 5, levels: Sequence[str] = ("O3", "O2")
                        ) -> Tuple[Timing, Dict[str, Timing]]:
        """Runtime of the assembly's build and of ``clang-19 -<level>`` of the C source for each of ``levels``,
        timed interleaved (see :meth:`timings`), so their ratio survives a machine that changes speed midway.
        Returns (the assembly's, {level: baseline's})."""
        binaries = [self._timing_binary(assembly), *(self._baseline_binary(level) for level in levels)]
        mine, *baselines = self._interleave(binaries, runs)
        return mine, dict(zip(levels, baselines))

    def baseline_assembly(self) -> str:
        """``clang-19 -O3 -S`` of the task's C source: what llvm-mca costs the baseline on."""
        return run_tool([find_tool("clang"), "-O3", "-S", "-o", "-", str(self.task.source)],
                        timeout=self.tool_timeout).stdout.decode()

    def _sample(self, binary: Path) -> float:
        """The driver's own measurement: the fastest of its repetitions at the benchmark size, in ns."""
        try:
            status, out = self._execute(binary, [str(self.task.bench_n), str(self.task.reps)],
                                        timeout=max(self.run_timeout, TIMING_TIMEOUT))
        except _StageError as exc:
            raise ToolError(f"{self.task.name}: timing run failed ({exc.stage}): {exc.message}") from None
        match = re.search(r"time_ns (\d+)", out)
        if status != 0 or not match:
            raise ToolError(f"{self.task.name}: timing run exited with {status}, printed {out[:200]!r}")
        return float(match.group(1))


class ProgramHarness(Harness):
    """Checks a whole program (a module with ``main``) against ``reference`` (default: the same module)
    built as ``clang-19 -O0`` builds it (the always-inliner, then ``llc-19 -O0``), linked as C++ where it uses the
    C++ runtime. Pass the unoptimized module as ``reference`` to check the passes too."""

    def __init__(self, module, *, reference=None, args: Sequence[str] = (), **kwargs):
        super().__init__(**kwargs)
        self.module = module
        self.args = [str(a) for a in args]
        self.cxx = needs_cxx_runtime(module.text())
        # clang -O0's pipeline: the always-inliner only. C++ headers mark members always_inline that the C++
        # runtime does not export (libstdc++'s basic_string::_M_use_local_data), so llc alone cannot link them
        unoptimized = optimize(reference or module, "O0")
        try:
            reference = self._link([self._assemble(llc_assembly(unoptimized.bitcode, opt_level=0), own=True)],
                                   self.cxx)
            self.expected_status, self.expected = self._execute(reference, self.args)
        except _StageError as exc:
            self.close()
            hint = ("the program does not link: a unit or library it needs is missing" if exc.stage == "link" else
                    "a program that crashes, waits for input or runs long needs arguments that make it finish "
                    "(--run-args), or no check (--no-verify)")
            raise LoweringError(f"{module.name}: its -O0 reference build cannot serve as the check; {hint} "
                                f"({exc.stage}: {exc.message})") from None

    timed = True

    def _build(self, assembly: str) -> Path:
        return self._link([self._assemble(assembly)], self.cxx)

    def _timing_binary(self, assembly: str) -> Path:
        """The build of an assembly that passes its check (timing is wall time of the program with its ``args``)."""
        verdict = self.check(assembly)
        if not verdict.ok:
            raise ToolError(f"cannot time a build that fails its check ({verdict.stage}): {verdict.message[:200]}")
        return self._build(assembly)

    def _sample(self, binary: Path) -> float:
        start = time.perf_counter_ns()
        self._execute(binary, self.args)
        return float(time.perf_counter_ns() - start)

    def _check_binary(self, binary: Path) -> Verdict:
        try:
            status, out = self._execute(binary, self.args)
        except _StageError as exc:
            return Verdict(exc.stage, exc.message)
        difference = compare_outputs(self.expected, out)
        if difference:
            return Verdict("wrong-output", difference)
        if status != self.expected_status:
            return Verdict("crash" if status > 128 else "wrong-output",
                           f"exit status {status}, expected {self.expected_status}")
        return Verdict("ok")


class SymbolHarness(Harness):
    """For a module without ``main`` or tests: the assembly must assemble and define the module's external
    symbols (the ones ``llc-19`` defines). Nothing is run."""

    runs = False

    def __init__(self, module, **kwargs):
        super().__init__(**kwargs)
        self.module = module
        self.symbols = self._defined(self._assemble(llc_assembly(module.bitcode, opt_level=0), own=True))

    def _defined(self, obj: Path) -> List[str]:
        out = run_tool([find_tool("llvm-nm"), "--defined-only", "--extern-only", "--format=just-symbols", str(obj)],
                       timeout=self.tool_timeout).stdout.decode()
        return sorted(set(out.split()))

    def check(self, assembly: str) -> Verdict:
        try:
            obj = self._assemble(assembly)
        except _StageError as exc:
            return Verdict(exc.stage, exc.message, tested=False)
        missing = sorted(set(self.symbols) - set(self._defined(obj)))
        if missing:
            return Verdict("link", f"undefined symbols the module defines: {', '.join(missing)}", tested=False)
        return Verdict("ok", "assembled and defines the module's symbols; not run (no main, no tests)",
                       tested=False)


def defines_main(module) -> bool:
    return re.search(r"^define [^@]*@main\(", module.text(), re.M) is not None


def harness_for(module, task: Optional[Task] = None, *, reference=None, args: Sequence[str] = (),
                **kwargs) -> Harness:
    """The strongest harness available: the task's, else a program's (the module defines ``main``; run with
    ``args``, its output must match ``reference``'s, default the module's own), else symbols."""
    if task is not None:
        return TaskHarness(task, **kwargs)
    if defines_main(module):
        return ProgramHarness(module, reference=reference, args=args, **kwargs)
    return SymbolHarness(module, **kwargs)

