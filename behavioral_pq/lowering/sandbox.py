"""Running what a model wrote: assembling, linking and executing untrusted assembly inside bubblewrap.

Assembly from an LLM endpoint is untrusted code. :class:`Sandbox` runs every command of its verification (the
assembler, the linker and the program) with:

- **bubblewrap** (``bwrap``): only ``/usr`` (read-only: compilers, libraries), the verification's own work
  folder (read-write) and what a run is given (:class:`Bind`: the files and folders a user names for a checked
  program, read-only unless one is named writable) are visible; a private ``/tmp``, ``/dev`` and ``/proc``;
  new user, PID, IPC, UTS, cgroup and network namespaces (no network at all); ``--die-with-parent`` and a new
  session, so nothing outlives the check: a background process forked by the program dies with the sandbox's PID
  namespace.
- **an empty environment** but ``PATH`` and ``LANG`` (no API keys, no home folder).
- **rlimits**: CPU seconds, address space, file size, open files, processes.
- **a wall-clock deadline**: the whole process group is killed when it passes.
- **bounded output**: stdout and stderr go to files under the file-size limit and are read back cut.

Where bubblewrap cannot run, model code is refused (:class:`~behavioral_pq.errors.SandboxError`) unless the user
opts in to running it unprotected (``unsafe=True``, ``bpq ... --unsafe-run`` or ``BPQ_UNSAFE_RUN=1``).

What it does not protect against: bugs in the kernel or in bubblewrap, CPU time spent within the limits, and what
the program prints (it is compared with the expected output, and a mismatch is fed back to the endpoint after
:func:`scrub`; files outside ``/usr``, the work folder and its binds are not visible to it). :func:`screen_assembly`
refuses directives that read files (``.include``, ``.incbin``) before anything runs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, List, Optional, Sequence, Tuple, Union

from behavioral_pq.errors import SandboxError

#: Directives that make the assembler read a file (their errors would quote it back to the endpoint).
FILE_DIRECTIVES = re.compile(r"^\s*(?:[A-Za-z_.$][\w.$]*:\s*)*\.(include|incbin)\b", re.IGNORECASE | re.MULTILINE)
MAX_ASSEMBLY_BYTES = 2 << 20
MAX_FEEDBACK_CHARS = 4000


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed command."""

    cpu_seconds: int = 60
    address_space_bytes: int = 4 << 30
    file_size_bytes: int = 64 << 20
    open_files: int = 256
    processes: int = 256
    output_bytes: int = 1 << 20


def unsafe_from_environment() -> bool:
    return os.environ.get("BPQ_UNSAFE_RUN", "") not in ("", "0")


@functools.lru_cache(maxsize=1)
def bubblewrap() -> Optional[str]:
    """The path of a ``bwrap`` that works on this machine (namespaces allowed), or None."""
    path = shutil.which("bwrap")
    if path is None:
        return None
    try:
        probe = subprocess.run([path, *_mounts(Path("/")), "--unshare-all", "--die-with-parent", "--", "/bin/true"],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if probe.returncode == 0 else None


@dataclasses.dataclass(frozen=True)
class Bind:
    """A host file or folder shown to a sandboxed command: ``source`` (absolute) at ``target``, an absolute path
    or one relative to the command's working folder; read-only unless ``writable``."""

    source: Path
    target: Path
    writable: bool = False


def _bind_arguments(binds: Sequence[Bind], folder: Path, inside: bool) -> List[str]:
    """bwrap's arguments for the binds whose target is inside the work folder (``inside``) or outside it, parents
    before what they hold (so a read-only file stays read-only in a writable folder, and the reverse)."""
    args: List[str] = []
    placed = [(folder / b.target, b) for b in binds]
    for target, bind in sorted(placed, key=lambda tb: len(tb[0].parts)):
        if (not bind.target.is_absolute()) == inside:
            args += ["--bind" if bind.writable else "--ro-bind", str(bind.source), str(target)]
    return args


def _mounts(workdir: Path, binds: Sequence[Bind] = (), folder: Optional[Path] = None) -> List[str]:
    args = ["--ro-bind", "/usr", "/usr", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        link = Path("/") / name
        if link.is_symlink():
            args += ["--symlink", os.readlink(link), f"/{name}"]
        elif link.is_dir():
            args += ["--ro-bind", str(link), f"/{name}"]
    if Path("/etc/ld.so.cache").exists():
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    args += _bind_arguments(binds, folder or workdir, inside=False)
    if workdir != Path("/"):
        args += ["--bind", str(workdir), str(workdir)]
    return args + _bind_arguments(binds, folder or workdir, inside=True)


@dataclasses.dataclass(frozen=True)
class Result:
    """What a sandboxed command did. ``signal`` is set when it was killed by one (``returncode`` is then None)."""

    returncode: Optional[int]
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    signal: Optional[int] = None
    seconds: float = 0.0


class Sandbox:
    """Runs commands for one verification folder (see the module docstring).

    Args:
        workdir: the only writable folder the commands see (their working directory).
        limits: rlimits and output bounds.
        unsafe: run without bubblewrap when it is not available here (the environment is still emptied and
            the rlimits and deadline still apply). Default: ``BPQ_UNSAFE_RUN``.
    """

    def __init__(self, workdir: os.PathLike, limits: Limits = Limits(), *, unsafe: Optional[bool] = None):
        self.workdir = Path(workdir).resolve()
        self.limits = limits
        self.unsafe = unsafe_from_environment() if unsafe is None else bool(unsafe)

    @property
    def isolated(self) -> bool:
        return bubblewrap() is not None

    def _folder(self, cwd: Optional[os.PathLike]) -> Path:
        folder = self.workdir if cwd is None else Path(cwd).resolve()
        if folder != self.workdir and self.workdir not in folder.parents:
            raise ValueError(f"{folder}: a sandboxed command runs inside {self.workdir}")
        return folder

    def command(self, argv: Sequence[str], cwd: Optional[os.PathLike] = None, binds: Sequence[Bind] = ()
                ) -> List[str]:
        """The command line that runs ``argv`` in the sandbox (in ``cwd``, a folder inside the work folder;
        default the work folder itself), with ``binds`` visible (relative targets are inside ``cwd``).

        Without bubblewrap (``unsafe``) everything is visible and nothing is read-only; a bind with a relative
        target becomes a symbolic link there, so the command still finds it where it looks."""
        bwrap = bubblewrap()
        if bwrap is None:
            if not self.unsafe:
                raise SandboxError(
                    "bubblewrap (bwrap) cannot run here, so code from a model endpoint is not run: install "
                    "bubblewrap (apt-get install bubblewrap) and allow user namespaces, or opt in to running it "
                    "unprotected with --unsafe-run / BPQ_UNSAFE_RUN=1")
            for bind in binds:
                link = self._folder(cwd) / bind.target
                if not bind.target.is_absolute() and not os.path.lexists(link):
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to(bind.source)
            return [str(a) for a in argv]
        return [bwrap, *_mounts(self.workdir, binds, self._folder(cwd)), "--unshare-all", "--die-with-parent",
                "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
                "--chdir", str(self._folder(cwd)), "--", *map(str, argv)]

    def _limit(self) -> None:   # runs in the child between fork and exec
        os.setsid()
        lim = self.limits
        for name, value in ((resource.RLIMIT_CPU, lim.cpu_seconds), (resource.RLIMIT_AS, lim.address_space_bytes),
                            (resource.RLIMIT_FSIZE, lim.file_size_bytes), (resource.RLIMIT_NOFILE, lim.open_files),
                            (resource.RLIMIT_NPROC, lim.processes), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(name, (value, value))

    def run(self, argv: Sequence[str], *, timeout: float, stdin: Union[bytes, IO[bytes], None] = None,
            cwd: Optional[os.PathLike] = None, binds: Sequence[Bind] = ()) -> Result:
        """Run ``argv`` in the sandbox within ``timeout`` seconds of wall time (in ``cwd`` with ``binds``: see
        :meth:`command`). ``stdin``: bytes, an open file (the command reads it directly, and its offset shows
        how much was read), or None for an empty stdin."""
        command = self.command(argv, cwd, binds)
        data = stdin if isinstance(stdin, bytes) else None
        out_path, err_path = self.workdir / ".sandbox-stdout", self.workdir / ".sandbox-stderr"
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            source = subprocess.PIPE if data is not None else subprocess.DEVNULL if stdin is None else stdin
            proc = subprocess.Popen(command, stdin=source,
                                    stdout=out, stderr=err, cwd=self._folder(cwd), env=env, preexec_fn=self._limit,
                                    close_fds=True)
            timed_out = False
            try:
                if data is not None:
                    proc.communicate(data, timeout=timeout)
                else:
                    proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
        seconds = time.monotonic() - start
        stdout, stderr = _read_cut(out_path, self.limits.output_bytes), _read_cut(err_path, self.limits.output_bytes)
        code = proc.returncode
        killed = -code if code is not None and code < 0 else None
        if bubblewrap() is not None and code is not None and code > 128 and not timed_out:
            killed = code - 128   # bwrap reports a child killed by a signal as 128 + signal
        return Result(None if killed else code, stdout, stderr, timed_out, killed, seconds)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _read_cut(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return b""
    finally:
        path.unlink(missing_ok=True)
    return data if len(data) <= limit else data[:limit] + b"\n[output cut]\n"


def screen_assembly(assembly: str, *, max_bytes: Optional[int] = MAX_ASSEMBLY_BYTES) -> Optional[str]:
    """Why ``assembly`` must not be assembled (a directive that reads a file, or larger than ``max_bytes`` unless
    that is None), or None."""
    size = len(assembly.encode(errors="replace"))
    if max_bytes is not None and size > max_bytes:
        return f"the assembly is {size:,} bytes, more than the {max_bytes:,} allowed"
    found = FILE_DIRECTIVES.search(assembly)
    if found:
        return f"the .{found.group(1).lower()} directive reads files and is not allowed"
    return None


_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)*[\w.+-]+")


def scrub(text: str, *, workdir: Optional[os.PathLike] = None, limit: int = MAX_FEEDBACK_CHARS,
          secrets: Sequence[str] = ()) -> str:
    """Text that may go back to a model endpoint: paths inside ``workdir`` made relative, other absolute paths
    replaced by ``<path>``, values of the environment (and ``secrets``) that are 8 characters or longer replaced
    by ``<redacted>``, and at most ``limit`` characters."""
    if workdir is not None:
        text = text.replace(str(Path(workdir)) + "/", "").replace(str(Path(workdir)), ".")
    values = sorted({v for v in list(os.environ.values()) + list(secrets) if len(v) >= 8}, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, "<redacted>")
    text = _PATH.sub("<path>", text)
    return text if len(text) <= limit else text[:limit] + " [cut]"


def describe(result: Result) -> Tuple[str, str]:
    """(stage, message) of a failed sandboxed run: ``timeout`` or ``crash``."""
    if result.timed_out:
        return "timeout", f"killed after {result.seconds:.1f} s"
    name = signal.Signals(result.signal).name if result.signal in signal.valid_signals() else "?"
    stderr = result.stderr[-500:].decode(errors="replace")
    return "crash", f"killed by signal {result.signal} ({name}); stderr: {stderr!r}"
