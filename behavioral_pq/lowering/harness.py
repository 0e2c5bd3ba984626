"""Verification of x86-64 assembly: assemble, link with a test driver, run with a timeout, compare outputs.

Every candidate, from ``llc`` or an LLM, goes through a :class:`Harness`, which answers a :class:`Verdict` naming
the stage that failed (``assemble``, ``link``, ``crash``, ``timeout``, ``wrong-output``) with the tool's or the
program's own words. Three harnesses cover three kinds of input:

* :class:`TaskHarness`: a task from a task set; the driver calls the function on its cases (or the kernel at its
  test size) and the output must match a reference build of the C source (``clang-19 -O0``);
* :class:`ProgramHarness`: a module that defines ``main``; the program, run with a
  :class:`~behavioral_pq.lowering.runs.RunInput`, must print what the module lowered by ``llc-19 -O0`` prints,
  exit with the same status and leave the same files; that reference run must itself succeed;
* :class:`SymbolHarness`: any other module; the assembly must assemble and define the module's external symbols.
  Nothing runs, and the verdict says so (``tested`` is False).

Also here: static cost by ``llvm-mca-19`` (:func:`static_cost`) and runtime (:meth:`Harness.timing`: kernels and
programs; a build whose timed runs fail is never ranked), with :func:`is_faster` deciding "faster" only past a
margin.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import shutil
import statistics
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import excerpt, find_tool, linker, llc_assembly, needs_cxx_runtime, run_tool
from behavioral_pq.errors import LoweringError, ReferenceRunError, ToolError
from behavioral_pq.lowering.runs import (
    DELETED,
    MAX_WRITABLE_BYTES,
    Opened,
    RunInput,
    WrittenFile,
    stamps,
    writable_size,
    written,
)
from behavioral_pq.lowering.sandbox import (
    MAX_ASSEMBLY_BYTES,
    Bind,
    Limits,
    Result,
    Sandbox,
    Stream,
    describe,
    remove_tree,
    screen_assembly,
    scrub,
)
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
    """Runtime of one build: ``samples`` (ns, one per process run: for a task the fastest of its driver's
    repetitions, for a program its own run, measured inside the sandbox) and their median, the robust statistic
    used for comparisons, with their spread."""

    samples: Tuple[float, ...]

    @property
    def median_ns(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def quartiles_ns(self) -> Tuple[float, float]:
        """(lower, upper) quartile of the samples, inclusive method (of 5 samples: the 2nd and 4th smallest); the
        sample twice where there is one."""
        if len(self.samples) < 2:
            return float(self.samples[0]), float(self.samples[0])
        lower, _, upper = statistics.quantiles(self.samples, n=4, method="inclusive")
        return float(lower), float(upper)

    @property
    def spread_ns(self) -> float:
        """The interquartile range: upper quartile minus lower quartile."""
        lower, upper = self.quartiles_ns
        return upper - lower


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


def compare_streams(name: str, expected: str, expected_stream: Stream, actual: str, actual_stream: Stream,
                    limit: int) -> Optional[str]:
    """None when two runs wrote the same on one stream (``name``: ``stdout`` or ``stderr``), else the first
    difference. ``expected`` and ``actual`` are the streams' first ``limit`` bytes as text and the ``*_stream``
    describe them whole: within the limit text is compared as :func:`compare_outputs` does (floats within
    tolerance); past it the whole streams must be equal byte for byte."""
    if expected_stream.digest == actual_stream.digest:
        return None
    if expected_stream.size <= limit and actual_stream.size <= limit:
        return compare_outputs(expected, actual)
    difference = compare_outputs(expected, actual)
    if difference:
        return difference
    return (f"{name} differs after its first {limit:,} bytes ({actual_stream.size:,} bytes, expected "
            f"{expected_stream.size:,}; output past the first {limit:,} bytes is compared byte for byte)")


def compare_files(expected: Dict[str, WrittenFile], actual: Dict[str, WrittenFile]) -> Optional[str]:
    """None when two runs left the same files (names, and contents: equal bytes, or text that
    :func:`compare_outputs` finds equal; a file deleted from the writable folder by both), else the first
    difference."""
    def gone(files: Dict[str, WrittenFile], name: str) -> bool:
        return name in files and files[name].digest == DELETED

    deleted = sorted(n for n in actual if gone(actual, n) and not gone(expected, n))
    kept = sorted(n for n in expected if gone(expected, n) and not gone(actual, n))
    if deleted or kept:
        return "; ".join(part for part in (
            f"deleted {', '.join(deleted[:5])}, which the reference did not" if deleted else "",
            f"did not delete {', '.join(kept[:5])}, as the reference did" if kept else "") if part)
    missing, extra = sorted(set(expected) - set(actual)), sorted(set(actual) - set(expected))
    if missing or extra:
        return "; ".join(part for part in (
            f"did not write {', '.join(missing[:5])}" if missing else "",
            f"wrote {', '.join(extra[:5])}, which the reference did not" if extra else "") if part)
    for name in sorted(expected):
        want, got = expected[name], actual[name]
        if want.digest == got.digest:
            continue
        difference = (compare_outputs(want.text, got.text) if want.text is not None and got.text is not None
                      else f"{got.size} bytes, expected {want.size} bytes of other contents")
        if difference:
            return f"file {name}: {difference}"
    return None


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
    #: what :meth:`_link` adds to every link (a program's :attr:`RunInput.link_flags`) and the ``-L`` folders it
    #: shows to it (:attr:`RunInput.link_binds`)
    link_flags: Tuple[str, ...] = ()
    link_binds: Tuple[Bind, ...] = ()

    def __init__(self, *, run_timeout: float = 10.0, tool_timeout: float = 60.0, unsafe_run: Optional[bool] = None,
                 limits: Limits = Limits(), max_assembly_bytes: Optional[int] = MAX_ASSEMBLY_BYTES):
        """``max_assembly_bytes``: the largest assembly text checked (None: no bound, for llc's own output; a model's
        answers keep the bound). The harness's own reference builds are never bounded."""
        self.run_timeout = run_timeout
        self.tool_timeout = tool_timeout
        self.max_assembly_bytes = max_assembly_bytes
        self.workdir = Path(tempfile.mkdtemp(prefix="bpq-lower-"))
        self.sandbox = Sandbox(self.workdir, limits, unsafe=unsafe_run)
        self._finalizer = weakref.finalize(self, remove_tree, str(self.workdir))
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

    @property
    def notes(self) -> Tuple[str, ...]:
        """What a reader of the verdicts should know about the check itself (e.g. that it ran the program bare)."""
        return ()

    def timing(self, assembly: str, runs: int = 5) -> Timing:
        """Runtime of the assembly's build at the benchmark size (``runs`` process runs)."""
        return self.timings([assembly], runs)[0]

    def timings(self, assemblies: Sequence[str], runs: int = 5,
                progress: Optional[Callable[[int, int], None]] = None) -> List[Timing]:
        """Runtimes of several builds, each built once and timed interleaved: every round runs each build once,
        so a machine that speeds up or slows down during the measurement moves them all alike. Raises ToolError
        when a build fails its check or one of its timed runs fails. ``progress(done, total)`` is called after
        each timed run."""
        return self._interleave([self._timing_binary(a) for a in assemblies], runs, keep_going=False,
                                progress=progress)

    def try_timings(self, assemblies: Sequence[str], runs: int = 5,
                    progress: Optional[Callable[[int, int], None]] = None) -> List[Union[Timing, str]]:
        """As :meth:`timings`, but a build that cannot be timed (it fails its check, or a timed run crashes, times
        out or exits with another status than the reference) gets the reason instead of a Timing, and is not run
        again; the others are still timed. A failed run is never ranked."""
        binaries: List[Union[Path, str]] = []
        for assembly in assemblies:
            try:
                binaries.append(self._timing_binary(assembly))
            except ToolError as exc:
                binaries.append(str(exc))
        return self._interleave(binaries, runs, keep_going=True, progress=progress)

    def _interleave(self, binaries: Sequence[Union[Path, str]], runs: int, keep_going: bool,
                    progress: Optional[Callable[[int, int], None]] = None) -> List[Union[Timing, str]]:
        samples: List[List[float]] = [[] for _ in binaries]
        failed: Dict[int, str] = {k: b for k, b in enumerate(binaries) if isinstance(b, str)}
        for _ in range(runs):
            for k, binary in enumerate(binaries):
                if k in failed:
                    continue
                try:
                    samples[k].append(self._sample(binary))
                except ToolError as exc:
                    if not keep_going:
                        raise
                    failed[k] = str(exc)
                if progress is not None:   # a failed build's runs left are no longer planned
                    progress(sum(map(len, samples)),
                             sum(len(s) if k in failed else runs for k, s in enumerate(samples)))
        return [failed[k] if k in failed else Timing(tuple(s)) for k, s in enumerate(samples)]

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

    def _tool(self, stage: str, argv: Sequence[str], binds: Sequence[Bind] = ()) -> None:
        """Run a tool on untrusted input in the sandbox (``binds`` shown to it); a failure is a ``stage``
        verdict."""
        result = self.sandbox.run(argv, timeout=self.tool_timeout, binds=binds)
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
        head, *libraries = linker(cxx, self.link_flags)
        self._tool("link", [head, *map(str, objects), "-o", str(binary), *libraries], binds=self.link_binds)
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
        remove_tree(folder)
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
            found = self._baselines[level] = self._interleave([self._baseline_binary(level)], runs, False)[0]
        return found

    def compare_timings(self, assembly: str, runs: int = 5, levels: Sequence[str] = ("O3", "O2")
                        ) -> Tuple[Timing, Dict[str, Timing]]:
        """Runtime of the assembly's build and of ``clang-19 -<level>`` of the C source for each of ``levels``,
        timed interleaved (see :meth:`timings`), so their ratio survives a machine that changes speed midway.
        Returns (the assembly's, {level: baseline's})."""
        binaries = [self._timing_binary(assembly), *(self._baseline_binary(level) for level in levels)]
        mine, *baselines = self._interleave(binaries, runs, keep_going=False)
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


@dataclasses.dataclass(frozen=True)
class Observed:
    """One run of a program: the sandbox's ``result``, the ``files`` it left (see
    :func:`~behavioral_pq.lowering.runs.written`; empty when not collected), how many bytes of its stdin file it
    read (``stdin_read``, None without one) and the read-only files and folders named for it that it never
    opened (``unopened``, None when not watched)."""

    result: Result
    files: Dict[str, WrittenFile]
    stdin_read: Optional[int] = None
    unopened: Optional[List[Path]] = None


#: The timer of a program's timed runs, run inside the sandbox: ``timer OUT PROGRAM ARGS...`` runs PROGRAM with
#: ARGS (its argv[0] is PROGRAM, as in a checked run), writes its wall time in ns (CLOCK_MONOTONIC, fork to exit)
#: to OUT, and ends as it ended: its exit status, or the signal that killed it. The sandbox's own start-up
#: (bubblewrap, namespaces: tens of ms) is outside that interval.
TIMER_SOURCE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct timespec start, end;
  int status;
  if (argc < 3) { fputs("usage: timer OUT PROGRAM [ARGS...]\n", stderr); return 125; }
  clock_gettime(CLOCK_MONOTONIC, &start);
  pid_t child = fork();
  if (child < 0) { perror("timer: fork"); return 125; }
  if (child == 0) { execv(argv[2], argv + 2); perror("timer: exec"); _exit(127); }
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) { perror("timer: waitpid"); return 125; }
  clock_gettime(CLOCK_MONOTONIC, &end);
  long long ns = (long long)(end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
  FILE *out = fopen(argv[1], "w");
  if (!out || fprintf(out, "%lld\n", ns) < 0 || fclose(out) != 0) { perror("timer: write"); return 125; }
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  return WEXITSTATUS(status);
}
"""


class ProgramHarness(Harness):
    """Checks a whole program (a module with ``main``) against ``reference`` (default: the same module)
    built as ``clang-19 -O0`` builds it (the always-inliner, then ``llc-19 -O0``), linked as C++ where it uses the
    C++ runtime. Pass the unoptimized module as ``reference`` to check the passes too.

    Both are linked with ``run.link_flags`` and run with ``run`` (a :class:`~behavioral_pq.lowering.runs.RunInput`:
    arguments, stdin, the files and folders shown to them; default: ``args`` and nothing else), each in a new empty
    working folder, as the same path (so ``argv[0]`` is the same). A build passes when it prints what the
    reference prints (stdout; stderr too with ``run.compare_stderr``), exits with the same status and leaves the
    same files.

    The reference run must itself succeed, or the check would compare failures: an exit status other than
    ``run.expect_exit`` (default 0), a signal or a timeout stop it (reliable signs). Its time is not judged: start-up
    in the sandbox alone takes tens of ms and fast runs are legitimate (a tool that reads a file's header), so a
    "too fast for its input" threshold would cry wolf. Two observations need no threshold instead: a ``--stdin``
    file it did not read at all (the file's offset is still 0 after the run) stops the check, and read-only files
    or folders named for it that it never opened (inotify) are reported in :attr:`notes`, not stopped on, since a
    word of the arguments may name a file by coincidence. So is a run that printed nothing on stdout and wrote
    nothing (only its exit status is compared), and a run given nothing at all.

    Raises:
        ReferenceRunError: the reference run cannot serve as the check: it exited with another status than
            ``run.expect_exit`` (default 0), was killed by a signal, ran past ``run_timeout``, or did not read
            the stdin file it was given. A check of a failed run proves nothing.
        LoweringError: the reference does not build or link.
    """

    timed = True

    def __init__(self, module, *, reference=None, args: Sequence[str] = (), run: Optional[RunInput] = None,
                 **kwargs):
        if run is not None and args:
            raise ValueError("give the program's arguments in run (a RunInput) or as args, not both")
        self.run = run if run is not None else RunInput(args=tuple(args))
        self.link_flags, self.link_binds = self.run.link_flags, self.run.link_binds
        self.room = self.run.writable and Path(os.path.realpath(self.run.base / self.run.writable))
        if self.room:
            size = writable_size(self.room)
            if size > MAX_WRITABLE_BYTES:
                raise ValueError(f"{self.run.writable}: the writable folder holds {size:,} bytes; every checked run "
                                 f"works on a copy of its own, so it may hold at most {MAX_WRITABLE_BYTES:,}")
        super().__init__(**kwargs)
        self.module = module
        self.args = list(self.run.args)
        self._passed: Dict[str, Path] = {}   # sha256 of an assembly that passed its check -> its build
        self.cxx = needs_cxx_runtime(module.text())
        self.program = self.workdir / "program" / (re.sub(r"[^\w.+-]", "_", module.name)[:64] or "program")
        self.program.parent.mkdir()
        # clang -O0's pipeline: the always-inliner only. C++ headers mark members always_inline that the C++
        # runtime does not export (libstdc++'s basic_string::_M_use_local_data), so llc alone cannot link them
        unoptimized = optimize(reference or module, "O0")
        try:
            built = self._link([self._assemble(llc_assembly(unoptimized.bitcode, opt_level=0), own=True)], self.cxx)
        except _StageError as exc:
            self.close()
            hint = ("the program does not link: a unit or library it needs is missing (a library: --ldflags "
                    "'-lNAME', with -L DIR where it is not under /usr)" if exc.stage == "link" else
                    "its assembly does not build")
            raise LoweringError(f"{module.name}: its -O0 reference build cannot serve as the check; {hint} "
                                f"({exc.stage}: {exc.message})") from None
        seen = self._observe(built, watch=True)
        failure = self._reference_failure(seen)
        if failure is not None:
            self.close()
            raise failure
        self.expected_status = seen.result.returncode
        self.expected = seen.result.stdout.decode(errors="replace")
        self.expected_stderr = seen.result.stderr.decode(errors="replace")
        self.expected_streams = (seen.result.stdout_stream, seen.result.stderr_stream)
        self.expected_files = seen.files
        self._notes = []
        if not self.run.given:
            self._notes.append("the check ran the program with no arguments and empty stdin")
        if seen.unopened:
            self._notes.append(f"the reference run never opened {', '.join(map(str, seen.unopened))}, named for "
                               f"it: if it should read them, its arguments are not what it expects")
        if not self.expected.strip() and not seen.files and not (self.run.compare_stderr and
                                                                  self.expected_stderr.strip()):
            self._notes.append(
                f"the reference run printed nothing on stdout and wrote no files: the check compares only its exit "
                f"status ({self.expected_status})" + ("; --compare-stderr would compare its stderr too"
                                                      if self.expected_stderr.strip() else ""))

    @property
    def notes(self) -> Tuple[str, ...]:
        return tuple(self._notes)

    def _reference_failure(self, seen: Observed) -> Optional[ReferenceRunError]:
        """Why the reference run cannot serve as the check (see the class docstring), or None."""
        result, run = seen.result, self.run
        expected = run.expect_exit if run.expect_exit is not None else 0
        head = " | ".join(result.stderr.decode(errors="replace").strip().splitlines())
        head = (head[:300] + " ...") if len(head) > 300 else head
        inputs = ("give it the inputs that make it {} (--run-args, --stdin, --run-dir: files outside /usr are "
                  "visible to it only when named there, and writable only in --writable-dir)")
        if result.timed_out:
            what = f"did not finish in {result.seconds:.0f} s"
            hint = (f"{inputs.format('finish')}, or let it run longer (--run-timeout SECONDS; now "
                    f"{self.run_timeout:g} s)")
        elif result.returncode is None:
            what = describe(result)[1].split(";")[0]
            hint = "a check of a crash proves nothing: " + inputs.format("run")
        elif result.returncode != expected:
            what = f"exited with status {result.returncode}" + (
                f", not the {expected} of --expect-exit" if run.expect_exit is not None else "")
            hint = (f"a check of a failed run proves nothing: {inputs.format('succeed')}, pass --expect-exit "
                    f"{result.returncode} if that status is what it should end with")
        elif run.stdin is not None and seen.stdin_read == 0 and run.stdin.stat().st_size > 0:
            what = f"did not read its stdin ({run.stdin}, {run.stdin.stat().st_size} bytes)"
            hint = "drop --stdin if the program does not read it"
        else:
            return None
        message = (f"{self.module.name}: its -O0 reference build cannot serve as the check: its run with "
                   f"{run.describe()} {what} (stderr: {head!r}); {hint}, or skip the check (compile --no-verify, "
                   f"lower without --verify)")
        return ReferenceRunError(message, result.returncode, head)

    def _observe(self, binary: Path, *, timeout: Optional[float] = None, files: bool = True,
                 watch: bool = False, prefix: Sequence[str] = ()) -> Observed:
        """Run a build with :attr:`run` as :attr:`program` in a new empty folder (and a new copy of the writable
        folder, in place of the user's): what it printed, its status, (``files``) what it left and (``watch``)
        which read-only paths named for it it never opened. ``prefix``: a command that runs the program (the
        timer of :meth:`_sample`). Never raises for what the program does."""
        folder = self.workdir / "run"
        remove_tree(folder)
        folder.mkdir()
        staged = self.program.with_name(self.program.name + ".new")
        staged.unlink(missing_ok=True)
        os.link(binary, staged)
        os.replace(staged, self.program)
        binds, room = self.run.binds, None
        if self.room:
            room = self.workdir / "writable"
            remove_tree(room)
            try:
                shutil.copytree(self.room, room, symlinks=True)
            except (OSError, shutil.Error, RecursionError) as exc:
                raise LoweringError(f"{self.run.writable}: cannot copy the writable folder for a checked run "
                                    f"({exc})") from None
            binds = tuple(dataclasses.replace(b, source=room) if b.writable else b for b in binds)
        before = stamps(room)
        stdin = open(self.run.stdin, "rb") if self.run.stdin is not None else None
        named = [b.source for b in self.run.binds if not b.writable] if watch else []
        try:
            with Opened(named) as opened:
                result = self.sandbox.run([*prefix, str(self.program), *self.args],
                                          timeout=timeout or self.run_timeout, stdin=stdin, cwd=folder, binds=binds)
            read = os.lseek(stdin.fileno(), 0, os.SEEK_CUR) if stdin is not None else None
        finally:
            if stdin is not None:
                stdin.close()
        left = {}
        if files:
            left = written(folder, [b.target for b in self.run.binds if not b.target.is_absolute()], room, before)
        return Observed(result, left, read, opened.unopened)

    def _build(self, assembly: str) -> Path:
        return self._link([self._assemble(assembly)], self.cxx)

    def check(self, assembly: str) -> Verdict:
        """As :meth:`Harness.check`; the build of an assembly that passes is kept for :meth:`_timing_binary`, so a
        build checked before it is timed is neither built nor run again."""
        try:
            binary = self._build(assembly)
        except _StageError as exc:
            return Verdict(exc.stage, exc.message)
        verdict = self._check_binary(binary)
        if verdict.ok:
            self._passed[hashlib.sha256(assembly.encode()).hexdigest()] = binary
        return verdict

    def _timing_binary(self, assembly: str) -> Path:
        """The build of an assembly that passes its check (timing is the program's own wall time with its run):
        the one its check kept, or checked now."""
        key = hashlib.sha256(assembly.encode()).hexdigest()
        if key not in self._passed:
            verdict = self.check(assembly)
            if not verdict.ok:
                raise ToolError(f"cannot time a build that fails its check ({verdict.stage}): "
                                f"{verdict.message[:200]}")
        return self._passed[key]

    def _timer(self) -> Path:
        """The :data:`TIMER_SOURCE` build in the work folder (built once, by clang-19 outside the sandbox: it is
        the harness's own code)."""
        timer = self.workdir / "timer"
        if not timer.exists():
            source = self.workdir / "timer.c"
            source.write_text(TIMER_SOURCE)
            staged = self._scratch("")
            run_tool([find_tool("clang"), "-O2", str(source), "-o", str(staged)], timeout=self.tool_timeout)
            os.replace(staged, timer)
        return timer

    def start_up_timing(self, runs: int = 5) -> Optional[Timing]:
        """The floor under any program's time here: ``/usr/bin/true`` timed ``runs`` times as :meth:`_sample` times
        a build (process creation, dynamic loading, exit; in the same sandbox); None where it cannot be run."""
        trivial, clock = Path("/usr/bin/true"), self.workdir / "timed-ns"
        if not trivial.exists():
            return None
        samples = []
        for _ in range(runs):
            clock.unlink(missing_ok=True)
            result = self.sandbox.run([str(self._timer()), str(clock), str(trivial)], timeout=self.run_timeout)
            try:
                samples.append(float(int(clock.read_text())))
            except (OSError, ValueError):
                return None
            if result.returncode != 0:
                return None
        return Timing(tuple(samples))

    def _sample(self, binary: Path) -> float:
        """The program's own wall time in one run, in ns, measured inside the sandbox by :meth:`_timer` (from its
        fork to its exit: the sandbox's start-up, tens of ms, is not counted); ToolError when the run fails (a
        crash, a timeout, or an exit status other than the reference's): a failed run is not a time."""
        clock = self.workdir / "timed-ns"
        clock.unlink(missing_ok=True)
        result = self._observe(binary, files=False, prefix=(str(self._timer()), str(clock))).result
        if result.returncode is None:
            raise ToolError(f"a timed run failed: {self._clean(describe(result)[1])}")
        if result.returncode != self.expected_status:
            raise ToolError(f"a timed run exited with status {result.returncode}, expected {self.expected_status}")
        try:
            return float(int(clock.read_text()))
        except (OSError, ValueError):
            stderr = result.stderr.decode(errors="replace").strip()
            raise ToolError(f"the timer wrote no time for a timed run ({self._clean(excerpt(stderr))})") from None

    def _check_binary(self, binary: Path) -> Verdict:
        seen = self._observe(binary)
        result = seen.result
        if result.returncode is None:
            stage, message = describe(result)
            return Verdict(stage, self._clean(message))
        limit = self.sandbox.limits.output_bytes
        difference = compare_streams("stdout", self.expected, self.expected_streams[0],
                                     result.stdout.decode(errors="replace"), result.stdout_stream, limit)
        if difference:
            return Verdict("wrong-output", "stdout: " + difference)
        if self.run.compare_stderr:
            difference = compare_streams("stderr", self.expected_stderr, self.expected_streams[1],
                                         result.stderr.decode(errors="replace"), result.stderr_stream, limit)
            if difference:
                return Verdict("wrong-output", "stderr: " + self._clean(difference))
        if result.returncode != self.expected_status:
            return Verdict("crash" if result.returncode > 128 else "wrong-output",
                           f"exit status {result.returncode}, expected {self.expected_status}")
        difference = compare_files(self.expected_files, seen.files)
        if difference:
            return Verdict("wrong-output", self._clean(difference))
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
                run: Optional[RunInput] = None, **kwargs) -> Harness:
    """The strongest harness available: the task's, else a program's (the module defines ``main``; run with
    ``run``, or ``args`` alone, its output must match ``reference``'s, default the module's own), else symbols."""
    if task is not None:
        return TaskHarness(task, **kwargs)
    if defines_main(module):
        return ProgramHarness(module, reference=reference, args=args, run=run, **kwargs)
    return SymbolHarness(module, **kwargs)

