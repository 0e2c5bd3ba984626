"""Custom benchmarks, CompilerGym 0.2.5's way: :func:`make_benchmark` from C/C++ sources, ``.ll`` / ``.bc`` files
and :class:`ClangInvocation` jobs (compiled by clang-19 and linked into one module),
:func:`make_benchmark_from_command_line`, :func:`get_system_library_flags` (the host compiler's ``-isystem``
directories), and the commands of a benchmark's ``dynamic_config`` (:func:`build_benchmark`,
:func:`benchmark_runtimes`).

A failing compilation job raises :class:`~behavioral_pq.errors.BenchmarkInitError`, an OSError as CompilerGym's
is, with CompilerGym's text (``Compilation job failed with returncode 1``, the command, clang's stderr); a
returncode is named as a signal only when it is one (CompilerGym 0.2.5 names exit code 1 ``SIGHUP``)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import secrets
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.toolchain import find_tool, link_bitcode, run_tool
from behavioral_pq.corpus.inputs import recorded_flags
from behavioral_pq.env.compiler_gym.datasets import SOURCE_SUFFIXES, Benchmark, BenchmarkDynamicConfig, Command
from behavioral_pq.errors import (
    BenchmarkInitError,
    HostCompilerFailure,
    ToolError,
    ToolNotFoundError,
    ToolTimeoutError,
    UnableToParseHostCompilerOutput,
)

logger = logging.getLogger(__name__)

#: Seconds a benchmark's command may run when its ``timeout_seconds`` is 0 (unset).
COMMAND_TIMEOUT = 300

#: clang 16 made three C89 idioms errors that CompilerGym's clang 10 only warned about (implicit function
#: declarations, implicit int, int/pointer conversions); its benchmarks and users' programs rely on them.
LEGACY_C_FLAGS = ("-Wno-error=implicit-function-declaration", "-Wno-error=implicit-int", "-Wno-error=int-conversion")


@functools.lru_cache(maxsize=32)
def _system_library_flags(compiler: str) -> tuple:
    try:
        stderr = run_tool([compiler, "-xc++", "-v", "-", "-o", os.devnull, "-c"], input=b"int main(){return 0;}",
                          timeout=30).stderr.decode(errors="replace")
    except (ToolError, ToolNotFoundError) as exc:
        raise HostCompilerFailure(f"Failed to invoke '{compiler}'. Is there a working system compiler?\n"
                                  f"Error: {exc}") from None
    lines = stderr.splitlines()
    if "#include <...> search starts here:" not in lines:
        raise UnableToParseHostCompilerOutput(f"Failed to parse '#include <...>' search paths from '{compiler}':\n"
                                  f"{stderr.strip()}")
    flags: List[str] = []
    for line in lines[lines.index("#include <...> search starts here:") + 1:]:
        if line.startswith("End of search list"):
            break
        path = Path(line.strip())
        flags += ["-isystem", str(path)]
        if (path / "machine").is_dir():
            flags += ["-isystem", str(path / "machine")]
    return tuple(flags)


def _run(argv: Sequence[str], timeout: float, cwd: Optional[os.PathLike] = None,
         env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run a benchmark's job or command (no shell, stdin empty); ToolTimeoutError past ``timeout``,
    ToolNotFoundError when its program is missing. The exit status is the caller's to judge."""
    argv = [str(a) for a in argv]
    logger.debug("running %s", argv)
    try:
        return subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout, cwd=cwd,
                              env=None if env is None else {**os.environ, **env}, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolTimeoutError(f"Command '{' '.join(argv)}' failed to complete within {timeout:g} seconds") \
            from exc
    except FileNotFoundError as exc:
        raise ToolNotFoundError(f"{argv[0]} not found") from exc


def _returncode(code: int) -> str:
    """``-9 (SIGKILL)`` for a signal, else the number."""
    try:
        return f"{code} ({signal.Signals(-code).name})" if code < 0 else str(code)
    except ValueError:
        return str(code)


def get_system_library_flags(compiler: Optional[str] = None) -> List[str]:
    """``-isystem DIR`` flags for the host C++ compiler's include search list (``$CXX``, else ``c++``);
    HostCompilerFailure when it cannot be run or read."""
    return list(_system_library_flags(compiler or os.environ.get("CXX") or "c++"))


class ClangInvocation:
    """A clang-19 job that makes one bitcode unit: ``clang -c -emit-llvm [system includes] ARGS``."""

    def __init__(self, args: Sequence[str], system_includes: bool = True, timeout: int = 600):
        self.args = [str(a) for a in args]
        self.system_includes = system_includes
        self.timeout = timeout

    def command(self, outpath: Path) -> List[str]:
        command = [find_tool("clang"), "-c", "-emit-llvm", "-o", str(outpath)]
        if self.system_includes:
            command += get_system_library_flags()
        return command + self.args

    @classmethod
    def from_c_file(cls, path: Path, copt: Optional[Sequence[str]] = None, system_includes: bool = True,
                    timeout: int = 600) -> "ClangInvocation":
        """The job CompilerGym runs for a C/C++ file: ``-O1`` front end with LLVM passes off, then ``copt``."""
        return cls(["-O1", "-Xclang", "-disable-llvm-passes", "-Xclang", "-disable-llvm-optzns", *LEGACY_C_FLAGS,
                    *(copt or []), str(path)], system_includes=system_includes, timeout=timeout)

    def run(self) -> bytes:
        """The bitcode of the job; BenchmarkInitError (an OSError) with the command and clang's stderr when it
        fails or writes no bitcode."""
        with tempfile.TemporaryDirectory(prefix="bpq-clang-") as tmp:
            out = Path(tmp) / "out.bc"
            command = self.command(out)
            proc = _run(command, timeout=self.timeout)
            if proc.returncode:
                raise BenchmarkInitError(f"Compilation job failed with returncode {_returncode(proc.returncode)}\n"
                                         f"Command: {' '.join(command)}\n"
                                         f"Stderr: {proc.stderr.decode(errors='replace').strip()}")
            if not out.is_file():
                raise BenchmarkInitError(f"clang failed: {' '.join(command)}")
            return out.read_bytes()


BenchmarkInput = Union[str, Path, ClangInvocation]


def make_benchmark(inputs: Union[BenchmarkInput, Sequence[BenchmarkInput]], copt: Optional[List[str]] = None,
                   system_includes: bool = True, timeout: int = 600, engine=None) -> Benchmark:
    """A benchmark from C/C++ sources, ``.ll`` / ``.bc`` files and :class:`ClangInvocation` jobs, linked into one
    module: ``benchmark://file-v0/PATH`` for one IR file (its bytes are ``proto.program.contents``), else
    ``benchmark://user-v0/TIME-RANDOM-SHA`` (two benchmarks made from one program are two benchmarks, as in
    CompilerGym). FileNotFoundError for a missing input, ValueError for an unknown suffix, TypeError for an input
    of another type, BenchmarkInitError (an OSError) for a job that fails or units that do not link,
    InvalidIRError for IR that does not parse."""
    inputs = [inputs] if isinstance(inputs, (str, Path, ClangInvocation)) else list(inputs)
    if not inputs:
        raise ValueError("no inputs")
    units: List[bytes] = []
    for item in inputs:
        if isinstance(item, ClangInvocation):
            units.append(item.run())
            continue
        if not isinstance(item, (str, Path)):
            raise TypeError(f"Invalid input type: {type(item).__name__}")
        path = Path(item)
        if not path.is_file():
            raise FileNotFoundError(f"file not found: {path}")
        if path.suffix not in SOURCE_SUFFIXES:
            raise ValueError(f"Unrecognized file type: {path.name}")
        if path.suffix in (".bc", ".ll"):
            units.append(path.read_bytes())
        else:
            units.append(ClangInvocation.from_c_file(path, copt=copt, system_includes=system_includes,
                                                     timeout=timeout).run())
    single = len(inputs) == 1 and not isinstance(inputs[0], ClangInvocation)
    name = "benchmark" if isinstance(inputs[0], ClangInvocation) else Path(inputs[0]).stem
    module = load_module(_link(units, timeout), name=name, engine=engine)
    if single and Path(inputs[0]).suffix in (".bc", ".ll"):
        benchmark = Benchmark.from_file(f"benchmark://file-v0{Path(inputs[0]).resolve()}", inputs[0])
        benchmark._module = module
        return benchmark
    return Benchmark(f"benchmark://user-v0/{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}-"
                     f"{module.sha256[:8]}", module)


def _link(units: List[bytes], timeout: float) -> bytes:
    try:
        return link_bitcode(units, timeout=timeout)
    except ToolError as exc:
        raise BenchmarkInitError(f"Failed to link LLVM bitcodes with error: {exc}") from None


class BenchmarkFromCommandLine(Benchmark):
    """The module of a compiler command line's sources: ``benchmark://clang-v0/QUOTED-COMMAND``. Its
    ``dynamic_config.build_cmd`` is the command with the module in place of the sources (object files and
    libraries kept; the output an absolute path), so it is buildable: ``reset()`` builds the command's output,
    as CompilerGym's does, and :meth:`compile` builds it again from the current module."""

    def __init__(self, argv: Sequence[str], sources: Sequence[str], module, timeout: int):
        super().__init__(f"benchmark://clang-v0/{urllib.parse.quote_plus(shlex.join(argv))}", module)
        self._module = module
        self.command_line = list(argv)
        command, output, skip = [], "a.out", False
        for i, arg in enumerate(argv):
            if skip:
                skip = False
            elif arg == "-o" and i + 1 < len(argv):
                output, skip = argv[i + 1], True
            elif arg not in sources and arg not in ("-c", "-S"):
                command.append(os.path.abspath(arg) if arg.endswith(".o") else arg)
        self.output_path = Path(os.path.abspath(output))
        self.dynamic_config.build_cmd = Command(argument=[*command, "-xir", "$IN", "-o", str(self.output_path)],
                                                outfile=[str(self.output_path)], timeout_seconds=int(timeout))
        self.timeout = timeout

    def compile(self, env, timeout: int = 60) -> None:
        """Build the command's output from ``env``'s current module (in the current folder, as CompilerGym);
        BenchmarkInitError with the compiler's stderr when the build fails."""
        with tempfile.TemporaryDirectory(prefix="bpq-lower-") as tmp:
            bitcode = env.write_bitcode(Path(tmp) / "in.bc")
            command = dataclasses.replace(self.dynamic_config.build_cmd, timeout_seconds=int(timeout))
            run_benchmark_command(command, cwd=Path.cwd(), bitcode=bitcode)


#: An output redirection word of a command: ``>out``, ``>>out``, ``2>err`` (or the operator alone, the file next).
_REDIRECTION = re.compile(r"^(2?>>?)(.*)$")


def _split_redirections(argv: Sequence[str]):
    """``argv`` without the output redirections that a shell would apply (CompilerGym runs a command's words
    through ``/bin/sh``: cBench's ``echo 1 >_finfo_dataset``), and those as ``(operator, file)`` pairs."""
    words, redirections, i = [], [], 0
    while i < len(argv):
        match = _REDIRECTION.match(argv[i])
        if match and (match.group(2) or i + 1 < len(argv)):
            redirections.append((match.group(1), match.group(2) or argv[i + 1]))
            i += 1 if match.group(2) else 2
            continue
        words.append(argv[i])
        i += 1
    return words, redirections


def run_benchmark_command(command: Command, cwd: Path, bitcode: Path) -> float:
    """Run one command of a benchmark's ``dynamic_config`` in ``cwd`` (no shell: ``$CC``, ``$IN`` and the
    command's ``env`` variables are put into its arguments, and set in its environment; its output redirections,
    ``>out``, ``>>out`` and ``2>err``, write the output it printed to those files in ``cwd``); the wall seconds
    it took. BenchmarkInitError (an OSError) with CompilerGym's text when an ``infile`` is missing before, it
    exits non-zero, or an ``outfile`` is missing after; ToolTimeoutError past ``timeout_seconds``."""
    variables = {"CC": find_tool("clang"), "IN": str(bitcode), **command.env}
    argv = [re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), arg)
            for arg in command.argument]
    line = " ".join(argv)
    for name in command.infile:
        if not (cwd / name).exists():
            raise BenchmarkInitError(f"Command '{line}' missing required file: {name}")
    argv, redirections = _split_redirections(argv)
    start = time.perf_counter()
    proc = _run(argv, timeout=command.timeout_seconds or COMMAND_TIMEOUT, cwd=cwd, env=variables)
    seconds = time.perf_counter() - start
    for operator, name in redirections:
        target = (Path(cwd) / name).resolve()
        if not target.is_relative_to(Path(cwd).resolve()):
            raise BenchmarkInitError(f"Command '{line}' redirects its output outside its working folder: {name}")
        with open(target, "ab" if operator.endswith(">>") else "wb") as f:
            f.write(proc.stderr if operator.startswith("2") else proc.stdout)
    if proc.returncode:
        stderr = proc.stderr.decode(errors="replace").strip()
        raise BenchmarkInitError(f"Command '{line}' failed with exit code {proc.returncode}" +
                                 (f": {stderr}" if stderr else ""))
    for name in command.outfile:
        if not (cwd / name).exists():
            raise BenchmarkInitError(f"Command '{line}' did not produce expected file: {name}")
    return seconds


def build_benchmark(module: Module, config: BenchmarkDynamicConfig, folder: Path) -> float:
    """Build ``module`` with ``config.build_cmd`` in ``folder`` (its bitcode written there as ``out.bc``, the
    ``$IN``); the seconds the build took. Errors as :func:`run_benchmark_command`."""
    bitcode = folder / "out.bc"
    bitcode.write_bytes(module.bitcode)
    return run_benchmark_command(config.build_cmd, cwd=folder, bitcode=bitcode)


def benchmark_runtimes(module: Module, config: BenchmarkDynamicConfig, runs: int, warmup: int = 0) -> np.ndarray:
    """float64 (runs,): wall seconds of each timed run of ``config.run_cmd``, after a build and the
    ``pre_run_cmd`` commands and ``warmup`` untimed runs, before the ``post_run_cmd`` commands, all in one
    scratch folder (CompilerGym's order). Errors as :func:`run_benchmark_command`."""
    with tempfile.TemporaryDirectory(prefix="bpq-benchmark-") as tmp:
        folder = Path(tmp)
        build_benchmark(module, config, folder)
        bitcode = folder / "out.bc"
        for command in config.pre_run_cmd:
            run_benchmark_command(command, cwd=folder, bitcode=bitcode)
        for _ in range(warmup):
            run_benchmark_command(config.run_cmd, cwd=folder, bitcode=bitcode)
        times = [run_benchmark_command(config.run_cmd, cwd=folder, bitcode=bitcode) for _ in range(runs)]
        for command in config.post_run_cmd:
            run_benchmark_command(command, cwd=folder, bitcode=bitcode)
    return np.array(times, dtype=np.float64)


_SOURCE_TYPES = (".c", ".cc", ".cpp", ".cxx", ".C")


def make_benchmark_from_command_line(cmd: Union[str, Sequence[str]], replace_driver: bool = True,
                                     system_includes: bool = True, timeout: int = 600,
                                     engine=None, *, allow_plugins: bool = False) -> BenchmarkFromCommandLine:
    """A benchmark from a compiler command line (``gcc -DNDEBUG a.c b.c -o foo -lm``): each source compiled to
    bitcode with the command's own flags (clang-19 replaces the driver unless ``replace_driver`` is False),
    linked into one module; ``.o`` inputs are kept for :meth:`BenchmarkFromCommandLine.compile`.

    The command's flags are screened as a compile database's are
    (:func:`~behavioral_pq.corpus.inputs.recorded_flags`): one that could load code into clang (``-fplugin=``,
    ``-Xclang -load``), run other programs, read flags from a file or write files, or any flag not known to be
    safe, refuses the command before anything is compiled; ``allow_plugins=True`` takes every flag, for a command
    you trust.

    Raises:
        ValueError: an empty or too short command, one that reads stdin, has no source, or has a refused flag.
        BenchmarkInitError: a source does not compile (clang's stderr in the message) or the units do not link.
    """
    if not cmd:
        raise ValueError("Input command line is empty")
    argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
    if len(argv) < 2:
        raise ValueError(f"Input command line '{shlex.join(argv)}' is too short")
    if "-" in argv[1:]:
        raise ValueError(f"Input command line reads from stdin, which is not supported: '{shlex.join(argv)}'")
    if replace_driver:
        argv[0] = find_tool("clang")
    flags, sources, skip = [], [], False
    for i, arg in enumerate(argv[1:], start=1):
        if skip:
            skip = False
        elif arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif Path(arg).suffix in _SOURCE_TYPES and not arg.startswith("-"):
            sources.append(arg)
        elif arg.endswith(".o") or arg in ("-c", "-S") or arg.startswith(("-l", "-L", "-Wl,")):
            continue
        elif arg in ("-I", "-D", "-U", "-include", "-isystem", "-x") and i + 1 < len(argv):
            flags += [arg, argv[i + 1]]
            skip = True
        else:
            flags.append(arg)
    if not sources:
        raise ValueError(f"Input command line has no source file inputs: '{shlex.join(argv)}'")
    if not allow_plugins:
        refused = dict(pair for source in sources for pair in recorded_flags(argv, source).refused)
        if refused:
            named = "; ".join(f"{flag!r}: it {reason}" for flag, reason in list(refused.items())[:4])
            more = f"; and {len(refused) - 4} more" if len(refused) > 4 else ""
            raise ValueError(f"Input command line has a refused flag {named}{more}. Nothing was compiled: only "
                             "flags known to be safe are taken from a command line (allow_plugins=True takes them "
                             "all, for a command you trust)")
    units = [ClangInvocation([*LEGACY_C_FLAGS, "-O1", "-Xclang", "-disable-llvm-passes", *flags, source],
                             system_includes=system_includes, timeout=timeout).run() for source in sources]
    module = load_module(_link(units, timeout), name=Path(sources[0]).stem, engine=engine)
    return BenchmarkFromCommandLine(argv, sources, module, timeout)


__all__ = ["BenchmarkFromCommandLine", "BenchmarkInitError", "COMMAND_TIMEOUT", "ClangInvocation",
           "HostCompilerFailure", "LEGACY_C_FLAGS", "UnableToParseHostCompilerOutput", "benchmark_runtimes",
           "build_benchmark", "get_system_library_flags", "make_benchmark", "make_benchmark_from_command_line",
           "run_benchmark_command"]
