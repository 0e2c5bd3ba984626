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
- **rlimits**: CPU seconds, address space, file size, open files; and a **process limit**: a cgroup with
  ``pids.max`` where one can be made (as root, where RLIMIT_NPROC does not apply: see :class:`PidsCgroup`), else
  RLIMIT_NPROC.
- **a wall-clock deadline**: the whole process group is killed when it passes.
- **bounded output**: stdout and stderr go to files under the file-size limit and are read back cut, with the
  size and sha256 of the whole stream, so what lies past the cut is still compared.

Where bubblewrap cannot run, model code is refused (:class:`~behavioral_pq.errors.SandboxError`) unless the user
opts in to running it unprotected (``unsafe=True``, ``bpq ... --unsafe-run`` or ``BPQ_UNSAFE_RUN=1``).

What it does not protect against: bugs in the kernel or in bubblewrap, CPU time spent within the limits, and what
the program prints (it is compared with the expected output, and a mismatch is fed back to the endpoint after
:func:`scrub`; files outside ``/usr``, the work folder and its binds are not visible to it). :func:`screen_assembly`
refuses directives that read files (``.include``, ``.incbin``) before anything runs.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import logging
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

log = logging.getLogger(__name__)

#: Directives that make the assembler read a file (their errors would quote it back to the endpoint; llvm-mca, run
#: outside the sandbox, reads any file), and those that could spell one (``.macro`` / ``.irp`` / ``.irpc`` bodies
#: substitute arguments into directive names: ``.\d "FILE"`` with ``d`` = ``include``). Matched anywhere a token
#: can start, not only at line starts: ``;`` separates statements, a label may precede, and the assembler takes a
#: quoted name (``".incbin"``) as the directive too. Comments and strings are not told apart (a directive's name
#: in them is refused as well): telling them apart as the assembler does would need its whole lexer.
FILE_DIRECTIVES = re.compile(r"(?<![\w$.?@])\.(include|incbin|macro|irpc|irp)\b", re.IGNORECASE | re.ASCII)
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
class Stream:
    """The whole of what a command wrote on stdout or stderr: its ``size`` in bytes and ``digest`` (sha256), of
    which :class:`Result` keeps only the first ``Limits.output_bytes``."""

    size: int = 0
    digest: str = hashlib.sha256(b"").hexdigest()


@dataclasses.dataclass(frozen=True)
class Result:
    """What a sandboxed command did. ``signal`` is set when it was killed by one (``returncode`` is then None).
    ``stdout`` and ``stderr`` are cut at ``Limits.output_bytes``; ``stdout_stream`` and ``stderr_stream`` describe
    the whole streams."""

    returncode: Optional[int]
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    signal: Optional[int] = None
    seconds: float = 0.0
    stdout_stream: Stream = Stream()
    stderr_stream: Stream = Stream()


class PidsCgroup:
    """A cgroup of its own with ``pids.max`` for one sandboxed command (cgroup v2, or v1's ``pids`` hierarchy),
    or nothing where none can be made (:attr:`path` is None: not root, no pids controller, a read-only cgroup
    file system).

    RLIMIT_NPROC does not hold a command started by root: the kernel exempts root's processes, and the sandbox's
    user namespace maps its user to root outside. A cgroup's ``pids.max`` holds everyone. The command joins it
    between fork and exec (:meth:`join`); :meth:`close` kills what is left in it and removes it."""

    def __init__(self, limit: int):
        self.path: Optional[Path] = None
        base = _pids_hierarchy()
        if base is None:
            return
        _remove_leaving()
        path = base / f"bpq-sandbox-{os.getpid()}-{next(_CGROUP_COUNTER)}"
        try:
            path.mkdir()
        except OSError:
            return
        try:
            (path / "pids.max").write_text(str(int(limit)))
        except OSError:
            _remove_cgroup(path)
            return
        self.path = path
        self._procs = os.fsencode(path / "cgroup.procs")

    def join(self) -> None:   # runs in the child between fork and exec
        if self.path is not None:
            fd = os.open(self._procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def close(self) -> None:
        """Kill what is left in the cgroup and remove it; where its processes are still leaving (a PID
        namespace's teardown takes milliseconds), it is removed later, by the next :class:`PidsCgroup` or at
        exit, instead of waiting here."""
        if self.path is not None:
            if not _remove_cgroup(self.path, seconds=0.0):
                _LEAVING.append(self.path)
            self.path = None


_CGROUP_COUNTER = iter(range(1 << 62))
#: cgroups whose processes were killed and are still leaving
_LEAVING: List[Path] = []


def _remove_leaving(seconds: float = 0.0) -> None:
    for path in list(_LEAVING):
        if _remove_cgroup(path, seconds=seconds):
            _LEAVING.remove(path)


atexit.register(_remove_leaving, 10.0)


@functools.lru_cache(maxsize=1)
def _pids_hierarchy() -> Optional[Path]:
    """The folder of this process's cgroup in a hierarchy with the pids controller, where children can be made
    and given a ``pids.max``; None where there is none (or it is not writable)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path("/sys/fs/cgroup")
    candidates = []
    for line in lines:
        _, controllers, where = line.split(":", 2)
        if "pids" in controllers.split(","):   # v1
            candidates += [root / "pids" / where.lstrip("/"), root / controllers / where.lstrip("/")]
        elif controllers == "" and (root / "cgroup.controllers").exists():   # v2, unified at the root
            candidates.append(root / where.lstrip("/"))
    for folder in candidates:
        if (folder / "cgroup.procs").exists() and os.access(folder, os.W_OK):
            probe = folder / f"bpq-probe-{os.getpid()}"
            try:
                probe.mkdir()
                ok = (probe / "pids.max").exists()
            except OSError:
                continue
            _remove_cgroup(probe)
            if ok:
                return folder
    return None


def _remove_cgroup(path: Path, seconds: float = 10.0) -> bool:
    """Kill what is left in a cgroup and remove it (a cgroup is removed once it holds no process), trying for up
    to ``seconds``; whether it is gone."""
    deadline, pause = time.monotonic() + seconds, 0.0005
    while True:
        try:
            pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                if seconds > 0:
                    log.warning("%s: could not remove the sandbox's cgroup", path)
                return False
            time.sleep(pause)   # the killed processes leave the cgroup within a millisecond or two
            pause = min(2 * pause, 0.05)


def remove_tree(path: os.PathLike) -> None:
    """Remove a folder whatever a program left in it: trees deeper than Python's recursion allows or than a
    path may be long (``rm -rf`` works through them), folders without permissions. Never follows links."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
        return
    except (OSError, RecursionError):
        pass
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=False)


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

    def _limit(self, cgroup: PidsCgroup) -> None:   # runs in the child between fork and exec
        os.setsid()
        cgroup.join()
        lim = self.limits
        for name, value in ((resource.RLIMIT_CPU, lim.cpu_seconds), (resource.RLIMIT_AS, lim.address_space_bytes),
                            (resource.RLIMIT_FSIZE, lim.file_size_bytes), (resource.RLIMIT_NOFILE, lim.open_files),
                            (resource.RLIMIT_NPROC, lim.processes), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(name, (value, value))

    @property
    def process_limit(self) -> str:
        """How :attr:`Limits.processes` is held here: ``"cgroup"``, ``"rlimit"`` (not root: RLIMIT_NPROC
        applies) or ``"none"`` (root without a pids cgroup)."""
        if _pids_hierarchy() is not None:
            return "cgroup"
        return "rlimit" if os.geteuid() != 0 else "none"

    def run(self, argv: Sequence[str], *, timeout: float, stdin: Union[bytes, IO[bytes], None] = None,
            cwd: Optional[os.PathLike] = None, binds: Sequence[Bind] = ()) -> Result:
        """Run ``argv`` in the sandbox within ``timeout`` seconds of wall time (in ``cwd`` with ``binds``: see
        :meth:`command`). ``stdin``: bytes, an open file (the command reads it directly, and its offset shows
        how much was read), or None for an empty stdin."""
        command = self.command(argv, cwd, binds)
        data = stdin if isinstance(stdin, bytes) else None
        out_path, err_path = self.workdir / ".sandbox-stdout", self.workdir / ".sandbox-stderr"
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        cgroup = PidsCgroup(self.limits.processes)
        if cgroup.path is None and os.geteuid() == 0:
            _warn_no_process_limit()
        start = time.monotonic()
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                source = subprocess.PIPE if data is not None else subprocess.DEVNULL if stdin is None else stdin
                proc = subprocess.Popen(command, stdin=source, stdout=out, stderr=err, cwd=self._folder(cwd),
                                        env=env, preexec_fn=functools.partial(self._limit, cgroup), close_fds=True)
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
        finally:
            cgroup.close()
        seconds = time.monotonic() - start
        (stdout, out_stream), (stderr, err_stream) = (_read_cut(out_path, self.limits.output_bytes),
                                                      _read_cut(err_path, self.limits.output_bytes))
        code = proc.returncode
        killed = -code if code is not None and code < 0 else None
        if bubblewrap() is not None and code is not None and code > 128 and not timed_out:
            killed = code - 128   # bwrap reports a child killed by a signal as 128 + signal
        return Result(None if killed else code, stdout, stderr, timed_out, killed, seconds, out_stream, err_stream)


@functools.lru_cache(maxsize=1)
def _warn_no_process_limit() -> None:
    log.warning("no pids cgroup can be made here and RLIMIT_NPROC does not hold root's processes: sandboxed "
                "commands run without a process limit")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _read_cut(path: Path, limit: int) -> Tuple[bytes, Stream]:
    """The first ``limit`` bytes of a command's output file (marked when cut) and the whole stream's size and
    digest; the file is removed."""
    digest, size, head = hashlib.sha256(), 0, b""
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
                if size <= limit:
                    head += chunk[:limit + 1 - size]
                size += len(chunk)
    except OSError:
        return b"", Stream()
    finally:
        path.unlink(missing_ok=True)
    cut = head if len(head) <= limit else head[:limit] + b"\n[output cut]\n"
    return cut, Stream(size, digest.hexdigest())


def screen_assembly(assembly: str, *, max_bytes: Optional[int] = MAX_ASSEMBLY_BYTES) -> Optional[str]:
    """Why ``assembly`` must not be assembled (a directive that reads a file, or larger than ``max_bytes`` unless
    that is None), or None."""
    size = len(assembly.encode(errors="replace"))
    if max_bytes is not None and size > max_bytes:
        return f"the assembly is {size:,} bytes, more than the {max_bytes:,} allowed"
    found = FILE_DIRECTIVES.search(assembly)
    if found:
        directive = found.group(1).lower()
        if directive in ("include", "incbin"):
            return f"the .{directive} directive reads files and is not allowed"
        return f"the .{directive} directive (macros, which can spell .include and .incbin) is not allowed"
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
    why = " (it wrote more than a run may write to one file or stream)" if result.signal == signal.SIGXFSZ else ""
    return "crash", f"killed by signal {result.signal} ({name}){why}; stderr: {stderr!r}"
