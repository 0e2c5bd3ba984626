"""The engine: runs LLVM work in worker processes so that a pass that aborts or hangs costs one module, never
the caller.

Each worker is ``python -m behavioral_pq.core._worker``, talking length-prefixed pickles over pipes (an environment's
step, a fixed binary request, is sent and answered by native code: src/native/steps.h). The native code
in a worker writes, per thread, which (module, pipeline) it is running into a small shared file mapping; the
parent reads it to enforce a per-pipeline timeout and to name the culprit when a worker dies. A failed batch task
is retried without the culprit (or split module by module when the culprit is unclear), so every other module's
result survives.

``Engine(workers=0)`` runs everything in the calling process: fastest, but with no protection at all.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import mmap
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.config import env_number
from behavioral_pq.core._native_loader import native
from behavioral_pq.core.catalog import (
    QUOTED_PIPELINE_CHARS,
    check_pipeline_elements,
    check_pipeline_shape,
    quote_pipeline,
)
from behavioral_pq.core._worker import HEADER, STEP_APPLY, STEP_OBSERVE, Sessions
from behavioral_pq.errors import (
    BPQError,
    DeadlineError,
    EngineError,
    InvalidIRError,
    PassCrashError,
    PassTimeoutError,
    PipelineError,
)

logger = logging.getLogger(__name__)

NUM_AUTOPHASE = 56
DEFAULT_TIMEOUT = 60.0
_SLOT = 24  # bytes per thread slot: int64 module, int64 pipeline, int64 sequence number
_SLOT_VALUES = struct.Struct("<qqq")
#: Bytes asked for per read of a reply: a pipe holds 64 KiB, and a larger request costs an allocation of that size
#: (a 1 MiB read took ~20 us, more than a whole small reply's round trip).
_READ_SIZE = 1 << 16
#: Seconds a session request's reply is waited for at a time, between checks of its worker's progress.
_SESSION_WAIT = 0.05


def default_workers() -> int:
    """Worker processes used when none are given: ``$BPQ_WORKERS`` or the CPUs this process may use."""
    try:
        available = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        available = os.cpu_count() or 1
    return env_number("BPQ_WORKERS", available, kind=int, minimum=0)


_valid_pipelines: Dict[str, str] = {}


BITCODE_MAGIC = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")  # raw bitcode, and the bitcode wrapper header


def _check_encoding(data: bytes, name: str) -> None:
    """Refuse binary data that is neither bitcode nor UTF-8 text before LLVM sees it (its diagnostic would quote
    the raw bytes, and the message could not even be shown)."""
    if bytes(data[:4]) in BITCODE_MAGIC:
        return
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidIRError(f"{name}: neither LLVM bitcode nor IR text (byte {exc.start} is binary data, and the "
                             "file does not start with the bitcode magic)") from None


def _without_source_lines(message: str) -> str:
    """An IR parse error's message without the line of input LLVM quotes under it (and its caret): the input may
    be any file a user or a benchmark named (``/etc/shadow``), and a refusal must not echo its content. The
    location (``name:line:column``) and LLVM's reason stay."""
    head, _, rest = message.partition("\n")
    if "invalid LLVM IR: " not in head or not rest:
        return message
    return head


def check_pipeline(pipeline: str) -> str:
    """Return ``pipeline`` if LLVM parses it and it names only passes a raw pipeline may run; raise PipelineError
    otherwise: LLVM's message for one it cannot parse, ours for one too long or deeply nested to hand to LLVM's
    (recursive) parser or naming a pass that is not allowed (see :func:`~behavioral_pq.core.catalog.
    check_pipeline_elements`: no pass that writes or reads files)."""
    if not isinstance(pipeline, str) or pipeline not in _valid_pipelines:
        check_pipeline_shape(pipeline)
        problem = native.check_pipeline(pipeline)
        if problem:
            raise PipelineError(_bounded_message(problem, pipeline))
        check_pipeline_elements(pipeline)
        _valid_pipelines[pipeline] = pipeline
    return pipeline


_MAX_PIPELINE_MESSAGE = 1000


def _bounded_message(message: str, pipeline: str) -> str:
    """LLVM's message about ``pipeline`` on one line, quoting at most a part of the pipeline (LLVM quotes it
    whole, and an element of it again)."""
    if len(pipeline) > QUOTED_PIPELINE_CHARS:
        message = message.replace(f"'{pipeline}'", quote_pipeline(pipeline)).replace(pipeline, "<the pipeline>")
    message = message.replace("\n", "\\n")
    if len(message) > _MAX_PIPELINE_MESSAGE:
        message = f"{message[:_MAX_PIPELINE_MESSAGE]}... ({len(message):,} characters)"
    return message


@dataclass
class _Task:
    request: tuple
    modules: List[int] = field(default_factory=list)  # batch indices ("after") or root indices ("tree")
    first_pipeline: int = 0  # pipelines[first_pipeline : first_pipeline + count] of the batch
    pipeline_count: int = 0
    nodes: List[int] = field(default_factory=list)  # batch node indices, for "tree"


_ADDR_NO_RANDOMIZE = 0x0040000

#: The variables a worker inherits (everything else, the caller's included, is left out; see Engine workers).
WORKER_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR")


def _fixed_address_layout() -> None:
    """Runs in a new worker before exec: turn address-space randomization off for it (``setarch -R``).

    Some LLVM 19 passes iterate containers keyed by pointers, so whether they crash, and in rare cases what they
    produce, can depend on where the heap lands; with a fixed layout a module's result is the same in every run
    and every build (a module that crashed in 7 of 8 fresh processes now does so in all of them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        current = libc.personality(0xFFFFFFFF)
        if current != -1:
            libc.personality(current | _ADDR_NO_RANDOMIZE)
    except (OSError, AttributeError):   # not Linux: leave the layout as it is
        pass


class _WorkerDied(Exception):
    pass


class _Worker:
    """One worker process, its pipes, its progress mapping and its stderr file."""

    def __init__(self, threads: int):
        self.threads = threads
        directory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._progress_file = tempfile.NamedTemporaryFile(prefix="bpq-progress-", dir=directory)
        self._progress_file.write(b"\xff" * (_SLOT * threads))  # module = -1: idle
        self._progress_file.flush()
        self.progress = mmap.mmap(self._progress_file.fileno(), _SLOT * threads)
        self.stderr = tempfile.TemporaryFile(prefix="bpq-worker-stderr-")
        # A canonical environment and working folder: with the fixed address layout, what a worker allocates
        # (and so where LLVM's pointer-keyed containers land) must not depend on the caller's folder or variables.
        env = {k: os.environ[k] for k in WORKER_ENVIRONMENT if k in os.environ}
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "behavioral_pq.core._worker", self._progress_file.name, str(threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, close_fds=True,
            cwd="/", preexec_fn=_fixed_address_layout)
        self.fd = self.proc.stdout.fileno()
        self._request_fd = self.proc.stdin.fileno()   # written with os.write: no buffering to flush
        self._stderr_fd = self.stderr.fileno()
        self.steps = native.StepChannel(self._request_fd, self.fd, self._stderr_fd)   # session steps, natively
        self.task: Optional[_Task] = None
        self._buffer = bytearray()
        self._stderr_offset = 0
        self._started = 0.0
        self._seen: List[Tuple[int, float]] = []

    # -- task lifecycle ------------------------------------------------------------------------------------
    def start(self, task: _Task) -> None:
        self.task = task
        self.send(pickle.dumps(task.request, protocol=pickle.HIGHEST_PROTOCOL))

    def send(self, payload: bytes) -> None:
        """Send one pickled request and start its clock."""
        self._buffer.clear()
        self._stderr_offset = os.lseek(self._stderr_fd, 0, os.SEEK_END)
        now = time.monotonic()
        self._started = now
        self._seen = [(self.slot(i)[2], now) for i in range(self.threads)]
        data = memoryview(HEADER.pack(len(payload)) + payload)
        try:
            while data:
                data = data[os.write(self._request_fd, data):]
        except OSError as exc:   # BrokenPipeError: the worker is gone
            raise _WorkerDied() from exc

    def read(self):
        """The unpickled reply if it is complete, None if more bytes are due; raises _WorkerDied on EOF."""
        payload = self.receive()
        if payload is None:
            return None
        self.task = None
        return pickle.loads(payload)

    def receive(self) -> Optional[bytes]:
        """The reply's bytes if they are complete, None if more are due; raises _WorkerDied on EOF."""
        chunk = os.read(self.fd, _READ_SIZE)
        if not chunk:
            raise _WorkerDied()
        if not self._buffer and len(chunk) >= HEADER.size and \
                len(chunk) == HEADER.size + HEADER.unpack_from(chunk)[0]:
            return chunk[HEADER.size:]   # the whole reply in one read: no buffering
        self._buffer += chunk
        if len(self._buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buffer)
        if len(self._buffer) < HEADER.size + size:
            return None
        payload = bytes(self._buffer[HEADER.size:HEADER.size + size])
        self._buffer.clear()
        return payload

    def request(self, payload: bytes, seconds: float) -> Optional[bytes]:
        """Send a pickled request and wait up to ``seconds`` for its reply, as :meth:`wait_reply`."""
        self.send(payload)
        return self.wait_reply(seconds)

    def wait_reply(self, seconds: float) -> Optional[bytes]:
        """The reply to the pickled request sent last, waiting up to ``seconds`` for it; None while it runs."""
        readable, _, _ = select.select([self.fd], [], [], seconds)
        return self.receive() if readable else None

    def step(self, op: int, sid: int, wants: Tuple[bool, bool], pipeline: str, seconds: float) -> Optional[tuple]:
        """Send a session step (binary, through :attr:`steps`) and wait up to ``seconds`` for its reply:
        (changed, instruction count, Autophase or None, InstCount or None), or None while it runs (then
        :meth:`wait_step`). native.InputError with the worker's message for a step it could not run."""
        try:
            reply = self.steps.step(op, sid, wants[0], wants[1], pipeline, seconds)
        except EOFError:
            self._stderr_offset = self.steps.stderr_offset
            raise _WorkerDied() from None
        if reply is None:   # a long step: watched from now on as any request, its clock started at the send
            self._stderr_offset, self._started = self.steps.stderr_offset, self.steps.sent_at
            self._seen = [(self.slot(i)[2], self._started) for i in range(self.threads)]
        return reply

    def wait_step(self, seconds: float) -> Optional[tuple]:
        """The reply to the step sent last, as :meth:`step` gives it."""
        try:
            return self.steps.wait(seconds)
        except EOFError:
            raise _WorkerDied() from None

    def slot(self, i: int) -> Tuple[int, int, int]:
        return _SLOT_VALUES.unpack_from(self.progress, _SLOT * i)

    def active(self) -> List[Tuple[int, int]]:
        """(module, pipeline) pairs being worked on, by task-local indices; pipeline -1 = parsing/features."""
        return [(m, p) for m, p, _ in (self.slot(i) for i in range(self.threads)) if m >= 0]

    def stuck(self, timeout: float, now: float) -> Optional[Tuple[int, int]]:
        """The (module, pipeline) that has run past ``timeout``, if any."""
        for i in range(self.threads):
            module, pipeline, seq = self.slot(i)
            last_seq, since = self._seen[i]
            if seq != last_seq:
                self._seen[i] = (seq, now)
            elif module >= 0 and now - since > timeout:
                return module, pipeline
        return None

    def elapsed(self, now: float) -> float:
        return now - self._started

    def stderr_tail(self, limit: int = 1500) -> str:
        self.stderr.seek(self._stderr_offset)
        text = self.stderr.read().decode(errors="replace").strip()
        self.stderr.seek(0, os.SEEK_END)
        return text if len(text) <= limit else "..." + text[-limit:]

    def exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        try:
            try:
                self.proc.stdin.close()  # EOF: a live worker exits on its own
            except OSError:
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.kill()
        finally:
            for f in (self.proc.stdout, self.stderr):
                f.close()
            self.progress.close()
            self._progress_file.close()


class Engine:
    """Runs pass pipelines and feature extraction on prepared bitcode, protected by worker processes.

    Args:
        workers: worker processes (default: the CPUs available, or ``$BPQ_WORKERS``). ``0`` runs in-process
            with no crash or timeout protection.
        threads: native threads per worker, each with its own LLVMContext (default 1).
        timeout: seconds one pipeline may run on one module before its worker is killed
            (``$BPQ_TIMEOUT``, default 60).

    Workers start on first use and stay up until :meth:`close` (or interpreter exit). An Engine may be used
    from several threads; calls are serialized.
    """

    def __init__(self, workers: Optional[int] = None, *, threads: int = 1, timeout: Optional[float] = None):
        self.workers = default_workers() if workers is None else int(workers)
        if self.workers < 0 or threads < 1:
            raise ValueError("workers must be >= 0 and threads >= 1")
        self.threads = int(threads)
        if timeout is None:
            self.timeout = env_number("BPQ_TIMEOUT", DEFAULT_TIMEOUT, minimum=0, allow_minimum=False)
        else:
            self.timeout = float(timeout)
            if not self.timeout > 0:   # nan too
                raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._pool: List[_Worker] = []
        self._lock = threading.Lock()
        self.restarts = 0  # workers replaced after a crash or timeout, for diagnostics
        # Live sessions (see LiveSession) sit in one worker of their own, apart from the pool; its generation
        # counts replacements, so a session can tell that its module is gone and must be replayed.
        self._session_worker: Optional[_Worker] = None
        self._session_generation = 0
        self._session_lock = threading.RLock()
        self._in_process_sessions: Optional[Sessions] = None
        self._closed_sessions: List[Tuple[int, int]] = []  # (generation, id) of sessions dropped by their owner

    def __repr__(self) -> str:
        return f"Engine(workers={self.workers}, threads={self.threads}, timeout={self.timeout:g})"

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        with self._lock:
            for worker in self._pool:
                worker.close()
            self._pool.clear()
        with self._session_lock:
            if self._session_worker is not None:
                self._session_worker.close()
                self._session_worker = None
            self._in_process_sessions = None
            self._session_generation += 1

    # -- single-module operations --------------------------------------------------------------------------
    def prepare(self, data: bytes, name: str = "module") -> bytes:
        """Parse ``.ll`` text or bitcode, verify, strip debug info and named metadata, clear the source file name;
        return bitcode."""
        _check_encoding(data, name)
        try:
            if self.workers == 0:
                return self._in_process(lambda: native.prepare(data, name), InvalidIRError)
            return self._single(("prepare", bytes(data), name), name, pipeline=None, invalid=InvalidIRError)
        except InvalidIRError as exc:
            raise InvalidIRError(_without_source_lines(str(exc))) from None

    def run_pipeline(self, bitcode: bytes, pipeline: str, name: str = "module", target=None, *,
                     deadline: Optional[float] = None) -> bytes:
        """Apply a new-PM pipeline to a fresh copy of ``bitcode``; return the result as bitcode.

        ``target``: None for measure mode (no TargetMachine), or a :class:`~behavioral_pq.core.target.Target`
        for target mode (see :mod:`behavioral_pq.core.target`). ``deadline``: a ``time.monotonic()`` value past
        which the run is stopped and DeadlineError raised (checked only before it starts with ``workers=0``)."""
        check_pipeline(pipeline)
        spec = (target.triple, target.cpu, target.features, target.size) if target is not None else ("",) * 4
        if self.workers == 0:
            _check_deadline(deadline, name)
            return self._in_process(lambda: native.run_pipeline(bitcode, pipeline, None, *spec), InvalidIRError)
        return self._single(("run", bytes(bitcode), pipeline, *spec), name, pipeline=pipeline,
                            invalid=InvalidIRError, deadline=deadline)

    def run_pipelines(self, bitcodes: Sequence[bytes], pipelines: Sequence[str], *,
                      names: Optional[Sequence[str]] = None, targets: Optional[Sequence] = None,
                      deadline: Optional[float] = None) -> Tuple[List[Optional[bytes]], List[Optional[BPQError]]]:
        """:meth:`run_pipeline` of ``pipelines[i]`` on ``bitcodes[i]`` for every i, in target mode for
        ``targets[i]`` (None, or no ``targets``: measure mode), spread over the engine's workers in one call
        (concurrent :meth:`run_pipeline` calls take turns on the engine).

        Returns (results, errors), N entries each: the bitcode after the pipeline, or None and the item's error
        (InvalidIRError, PassCrashError, PassTimeoutError; a crash or a timeout costs that item alone). Past
        ``deadline`` (a ``time.monotonic()`` value) the items not finished get DeadlineError."""
        pipelines = [check_pipeline(p) for p in pipelines]
        n = len(bitcodes)
        if len(pipelines) != n or (targets is not None and len(targets) != n):
            raise ValueError(f"run_pipelines needs one pipeline and one target per module: {n} modules, "
                             f"{len(pipelines)} pipelines, {n if targets is None else len(targets)} targets")
        names = list(names) if names is not None else [f"module[{i}]" for i in range(n)]
        targets = list(targets) if targets is not None else [None] * n
        specs = [(t.triple, t.cpu, t.features, t.size) if t is not None else ("",) * 4 for t in targets]
        results: List[Optional[bytes]] = [None] * n
        errors: List[Optional[BPQError]] = [None] * n
        if self.workers == 0:
            for i in range(n):
                try:
                    _check_deadline(deadline, names[i])
                    results[i] = self._in_process(
                        lambda i=i: native.run_pipeline(bitcodes[i], pipelines[i], None, *specs[i]), InvalidIRError)
                except BPQError as exc:
                    errors[i] = exc
            return results, errors

        def on_reply(task: _Task, reply) -> None:
            status, value = reply
            i = task.modules[0]
            if status == "ok":
                results[i] = value
            else:
                errors[i] = InvalidIRError(f"{names[i]}: {value}")

        def on_failure(task: _Task, worker: _Worker, culprit, timed_out: bool) -> List[_Task]:
            i = task.modules[0]
            errors[i] = self._engine_error(worker, timed_out, names[i], pipelines[i], None)
            return []

        def on_deadline(task: _Task) -> None:
            i = task.modules[0]
            errors[i] = DeadlineError(f"{names[i]}: the deadline passed before the pass pipeline finished")

        tasks = [_Task(("run", bytes(bitcodes[i]), pipelines[i], *specs[i]), modules=[i]) for i in range(n)]
        self._execute(tasks, on_reply, on_failure, deadline=deadline, on_deadline=on_deadline)
        return results, errors

    def open_session(self, bitcode: bytes, name: str = "module") -> "LiveSession":
        """A module kept live in this engine's session worker, to apply passes to one at a time (an environment's
        episode): see :class:`LiveSession`."""
        return LiveSession(self, bytes(bitcode), name)

    # -- batches -------------------------------------------------------------------------------------------
    def autophase_after(self, bitcodes: Sequence[bytes], pipelines: Sequence[str], *,
                        names: Optional[Sequence[str]] = None,
                        progress: Optional[Callable[[int], None]] = None,
                        ) -> Tuple[np.ndarray, List[Optional[BPQError]]]:
        """Autophase of each module as given and after each pipeline (each on a fresh copy).

        Returns:
            features: int64 (N, P + 1, 56); row 0 is the module as given, row i + 1 after ``pipelines[i]``.
                Rows of a failed module are zero.
            errors: N entries, None or the module's error (InvalidIRError, PassCrashError, PassTimeoutError).
        ``progress``, if given, is called with the number of (module, pipeline) runs finished.
        """
        pipelines = [check_pipeline(p) for p in pipelines]
        n, rows = len(bitcodes), len(pipelines) + 1
        names = list(names) if names is not None else [f"module[{i}]" for i in range(n)]
        features = np.zeros((n, rows, NUM_AUTOPHASE), dtype=np.int64)
        errors: List[Optional[BPQError]] = [None] * n
        if n == 0:
            return features, errors
        if self.workers == 0:
            out, messages = native.autophase_after(list(bitcodes), pipelines, self.threads)
            features[:] = out
            for i, message in enumerate(messages):
                if message:
                    errors[i] = InvalidIRError(f"{names[i]}: {message}")
            if progress:
                progress(n * len(pipelines))
            return features, errors

        def on_reply(task: _Task, reply) -> None:
            status, value = reply
            if status != "ok":
                for m in task.modules:
                    errors[m] = errors[m] or InvalidIRError(f"{names[m]}: {value}")
                return
            out, messages = value
            lo = 1 + task.first_pipeline
            for k, m in enumerate(task.modules):
                if messages[k]:
                    errors[m] = errors[m] or InvalidIRError(f"{names[m]}: {messages[k]}")
                features[m, 0] = out[k, 0]
                features[m, lo:lo + task.pipeline_count] = out[k, 1:]
            if progress:
                progress(len(task.modules) * task.pipeline_count)

        def on_failure(task: _Task, worker: _Worker, culprit: Optional[Tuple[int, int]], timed_out: bool
                       ) -> List[_Task]:
            if culprit is None:  # several threads were busy: isolate module by module, then thread by thread
                if len(task.modules) > 1:
                    return [self._after_task(bitcodes, pipelines, [m], task.first_pipeline, task.pipeline_count)
                            for m in task.modules]
                if task.request[3] > 1:
                    return [self._after_task(bitcodes, pipelines, task.modules, task.first_pipeline,
                                             task.pipeline_count, threads=1)]
            local_module, local_pipeline = culprit if culprit is not None else (0, -1)
            m = task.modules[local_module]
            index = task.first_pipeline + local_pipeline if local_pipeline >= 0 else None
            errors[m] = errors[m] or self._engine_error(
                worker, timed_out, names[m], pipelines[index] if index is not None else None, index)
            rest = [x for x in task.modules if x != m and errors[x] is None]
            if progress:
                progress(task.pipeline_count)
            if not rest:
                return []
            return [self._after_task(bitcodes, pipelines, rest, task.first_pipeline, task.pipeline_count)]

        tasks = self._plan(bitcodes, pipelines)
        self._execute(tasks, on_reply, on_failure,
                      revise=lambda t: None if all(errors[m] is not None for m in t.modules) else t)
        for m, error in enumerate(errors):
            if error is not None:
                features[m] = 0
        return features, errors

    def autophase_tree(self, roots: Sequence[bytes], parents: Sequence[int], edges: Sequence[str], *,
                       wanted: Optional[Sequence[bool]] = None, keep: Optional[Sequence[bool]] = None,
                       names: Optional[Sequence[str]] = None, progress: Optional[Callable[[int], None]] = None,
                       timeout_fails_root: bool = False, deadline: Optional[float] = None,
                       ) -> Tuple[np.ndarray, Dict[int, bytes], List[Optional[BPQError]]]:
        """Evaluate pass sequences that share prefixes as a tree (the probe search's hot loop).

        Node k applies pipeline ``edges[k]`` to the state of its parent: node ``parents[k]`` if >= 0, else
        ``roots[-parents[k] - 1]`` (bitcode). Parents come before children. A sequence evaluated this way
        gives the same module as the sequence applied from scratch, while shared prefixes run once.

        Args:
            wanted: nodes whose Autophase vector is wanted (default: all).
            keep: nodes whose bitcode is returned (default: none).
            names: one name per root, for error messages.
            progress: called with the number of nodes each finished task evaluated.
            timeout_fails_root: a timeout fails every node of its root, and the root's nodes not yet run are
                skipped (for callers that need all of a root's nodes, as a spectrum does: a module that
                ran past the limit once then costs one timeout, not one per subtree).
            deadline: a ``time.monotonic()`` value: work still running or queued then is dropped (its workers
                are replaced) and its nodes get a :class:`DeadlineError` (between tasks only with ``workers=0``).

        Returns:
            features: int64 (K, 56), zero where not wanted or failed.
            kept: {node: bitcode} for kept nodes that succeeded.
            errors: K entries, None or the error of the node (a failed node fails its subtree; a crash or
                timeout is charged to the node that was running and the rest of its tree is retried, but
                see ``timeout_fails_root``).
        """
        k = len(parents)
        if len(edges) != k:
            raise ValueError("autophase_tree: need one edge per node")
        wanted = [True] * k if wanted is None else [bool(x) for x in wanted]
        keep = [False] * k if keep is None else [bool(x) for x in keep]
        if len(wanted) != k or len(keep) != k:
            raise ValueError("autophase_tree: wanted and keep need one entry per node")
        edges = [check_pipeline(p) for p in edges]
        parents = [int(p) for p in parents]
        for i, p in enumerate(parents):
            if not -len(roots) <= p < i:
                raise ValueError(f"autophase_tree: node {i} has parent {p}; parents must come first")
        names = list(names) if names is not None else [f"module[{r}]" for r in range(len(roots))]
        features = np.zeros((k, NUM_AUTOPHASE), dtype=np.int64)
        kept: Dict[int, bytes] = {}
        errors: List[Optional[BPQError]] = [None] * k
        if k == 0:
            return features, kept, errors
        children: List[List[int]] = [[] for _ in range(k)]
        root_of = [0] * k
        for i, p in enumerate(parents):
            if p >= 0:
                children[p].append(i)
                root_of[i] = root_of[p]
            else:
                root_of[i] = -p - 1

        def task_for(nodes: List[int], threads: Optional[int] = None) -> _Task:
            task_roots = list(dict.fromkeys(root_of[i] for i in nodes))
            local_root = {r: j for j, r in enumerate(task_roots)}
            local = {n: j for j, n in enumerate(nodes)}
            request = ("tree", [bytes(roots[r]) for r in task_roots],
                       [local[parents[i]] if parents[i] >= 0 else -local_root[root_of[i]] - 1 for i in nodes],
                       [edges[i] for i in nodes], [wanted[i] for i in nodes], [keep[i] for i in nodes],
                       threads or self.threads)
            return _Task(request, modules=task_roots, nodes=nodes)

        def fail(node: int, error: BPQError) -> None:
            stack = [node]
            while stack:
                n = stack.pop()
                errors[n] = errors[n] or error
                stack += children[n]

        def on_reply(task: _Task, reply) -> None:
            status, value = reply
            if status != "ok":
                for n in task.nodes:
                    errors[n] = errors[n] or InvalidIRError(f"{names[root_of[n]]}: {value}")
                return
            out, task_kept, messages = value
            for j, n in enumerate(task.nodes):
                if messages[j]:
                    errors[n] = errors[n] or InvalidIRError(f"{names[root_of[n]]}: {messages[j]}")
                else:
                    features[n] = out[j]
            for j, bitcode in task_kept.items():
                kept[task.nodes[j]] = bitcode
            if progress:
                progress(len(task.nodes))

        def on_failure(task: _Task, worker: _Worker, culprit: Optional[Tuple[int, int]], timed_out: bool
                       ) -> List[_Task]:
            if culprit is None or culprit[1] < 0:
                if len(task.modules) > 1 or task.request[-1] > 1:  # isolate root by root, one thread each
                    return [task_for([n for n in task.nodes if root_of[n] == r], threads=1) for r in task.modules]
                culprit = (0, 0)
            node = task.nodes[culprit[1]]
            error = self._engine_error(worker, timed_out, names[root_of[node]], edges[node], node)
            fail(node, error)
            if timed_out and timeout_fails_root:
                for n in range(k):
                    if root_of[n] == root_of[node]:
                        errors[n] = errors[n] or error
            rest = [n for n in task.nodes if errors[n] is None]
            return [task_for(rest)] if rest else []

        def without_failed(task: _Task) -> Optional[_Task]:
            # a queued task's nodes fail only through timeout_fails_root, a whole root at a time
            live = [n for n in task.nodes if errors[n] is None]
            if len(live) == len(task.nodes):
                return task
            return task_for(live, threads=task.request[-1]) if live else None

        # Units of work are the subtrees under each root's first nodes; they go into tasks of similar cost
        # (root bitcode size x pipeline text below), so a large module's tree spreads over the workers.
        units: Dict[int, List[int]] = {}
        top_of = [0] * k
        for i, p in enumerate(parents):
            top_of[i] = i if p < 0 else top_of[p]
            units.setdefault(top_of[i], []).append(i)
        cost = {u: float(len(roots[root_of[u]])) * sum(len(edges[i]) for i in nodes) for u, nodes in units.items()}
        target = sum(cost.values()) / (max(1, self.workers) * 8)
        tasks: List[_Task] = []
        group: List[int] = []
        group_cost = 0.0
        for u in sorted(units, key=lambda u: -cost[u]):  # largest first
            group += units[u]
            group_cost += cost[u]
            if group_cost >= target:
                tasks.append(task_for(sorted(group)))
                group, group_cost = [], 0.0
        if group:
            tasks.append(task_for(sorted(group)))

        def on_deadline(task: _Task) -> None:
            error = DeadlineError(f"{', '.join(names[r] for r in task.modules)}: the deadline passed before these "
                                  "passes ran")
            for n in task.nodes:
                errors[n] = errors[n] or error

        if self.workers == 0:
            for task in tasks:
                if deadline is not None and time.monotonic() >= deadline:
                    on_deadline(task)
                else:
                    on_reply(task, ("ok", native.autophase_tree(*task.request[1:])))
        else:
            self._execute(tasks, on_reply, on_failure, revise=without_failed, deadline=deadline,
                          on_deadline=on_deadline)
        for i, error in enumerate(errors):
            if error is not None:
                features[i] = 0
                kept.pop(i, None)
        return features, kept, errors

    # -- live sessions -------------------------------------------------------------------------------------
    def _session_call(self, request: tuple, name: str, pipeline: Optional[str] = None):
        """Send a session request to the session worker (in-process with ``workers=0``); returns (generation,
        value). A crash or a pipeline past the timeout kills the worker (every live module in it is lost; their
        sessions replay on next use) and raises PassCrashError / PassTimeoutError; bad input raises
        InvalidIRError."""
        with self._session_lock:
            garbage: List[int] = []
            if self._closed_sessions:
                closed, self._closed_sessions = self._closed_sessions, []   # __del__ may append at any time
                garbage = [sid for generation, sid in closed if generation == self._session_generation]
            if self.workers == 0:
                if self._in_process_sessions is None:
                    self._in_process_sessions = Sessions(native)
                sessions = self._in_process_sessions
                sessions.handle(("close", garbage), None)
                return self._session_generation, self._in_process(lambda: sessions.handle(request, None),
                                                                  InvalidIRError)
            if garbage:
                self._session_exchange(("close", garbage), name, None)
            return self._session_generation, self._session_exchange(request, name, pipeline)

    def _session_exchange(self, request: tuple, name: str, pipeline: Optional[str]):
        """One request to the session worker and its reply: a step (``apply``, ``observe``) in the binary form
        that src/native/steps.h states (sent and answered natively), anything else pickled."""
        op = request[0]
        if op in ("apply", "observe"):
            sid, step_pipeline, wants = (request[1], request[2], request[3]) if op == "apply" else \
                (request[1], "", request[2])
            code = STEP_APPLY if op == "apply" else STEP_OBSERVE
            try:
                reply = self._session_request(lambda w: w.step(code, sid, wants, step_pipeline, _SESSION_WAIT),
                                              lambda w: w.wait_step(_SESSION_WAIT), name, pipeline)
            except native.InputError as exc:
                raise InvalidIRError(f"{name}: {exc}") from None
            return reply if op == "apply" else reply[1:]
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        status, value = pickle.loads(self._session_request(
            lambda w: w.request(payload, _SESSION_WAIT), lambda w: w.wait_reply(_SESSION_WAIT), name, pipeline,
            patient=op == "open"))
        if status != "ok":
            raise InvalidIRError(f"{name}: {value}")
        return value

    def _session_request(self, send, wait, name: str, pipeline: Optional[str], patient: bool = False):
        """One request to the session worker (started if need be): ``send(worker)`` sends it and waits a first
        while for the reply, ``wait(worker)`` waits another; each returns the reply or None. A crash, or a pipeline
        past the timeout (a request past it by 5 s more, unless ``patient``: an ``open`` replays many), kills the
        worker and raises PassCrashError / PassTimeoutError."""
        if self._session_worker is None:
            self._session_worker = _Worker(1)
        worker = self._session_worker
        timed_out = False
        try:
            reply = send(worker)
            while reply is None:
                now = time.monotonic()
                if worker.stuck(self.timeout, now) is not None or (
                        not patient and worker.elapsed(now) > self.timeout + 5):
                    timed_out = True
                    worker.kill()
                    raise _WorkerDied()
                reply = wait(worker)
            return reply
        except _WorkerDied:
            error = self._engine_error(worker, timed_out, name, pipeline, None)
            worker.kill()
            worker.close()
            self._session_worker = None
            self._session_generation += 1
            self.restarts += 1
            raise error from None
        except native.InputError:   # a step the worker refused: it lives on
            raise
        except BaseException:   # interrupted mid-request: the reply would come unread, so start afresh
            worker.kill()
            worker.close()
            self._session_worker = None
            self._session_generation += 1
            raise

    def _drop_session(self, generation: int, sid: int) -> None:
        self._closed_sessions.append((generation, sid))   # closed with the next request (never from __del__)

    # -- internals -----------------------------------------------------------------------------------------
    def _after_task(self, bitcodes, pipelines, modules, first, count, threads=None) -> _Task:
        request = ("after", [bitcodes[m] for m in modules], list(pipelines[first:first + count]),
                   threads or self.threads)
        return _Task(request, list(modules), first, count)

    def _plan(self, bitcodes: Sequence[bytes], pipelines: Sequence[str]) -> List[_Task]:
        """Split a batch into tasks of similar cost (bitcode size x pipelines): large modules have their
        pipelines spread over several tasks, small ones are grouped so process hops stay rare."""
        p = len(pipelines)
        sizes = [max(len(b), 1) for b in bitcodes]
        slots = max(1, self.workers)
        target = max(sum(sizes) * max(p, 1) / (slots * 8), 200_000 * max(p, 1) / 8)
        tasks: List[_Task] = []
        group: List[int] = []
        group_cost = 0.0
        for m, size in enumerate(sizes):
            cost = size * max(p, 1)
            if cost > target and p > 1:
                chunks = min(p, int(np.ceil(cost / target)))
                bounds = np.linspace(0, p, chunks + 1).round().astype(int)
                tasks += [self._after_task(bitcodes, pipelines, [m], int(a), int(b - a))
                          for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
                continue
            group.append(m)
            group_cost += cost
            if group_cost >= target or len(group) >= 64:
                tasks.append(self._after_task(bitcodes, pipelines, group, 0, p))
                group, group_cost = [], 0.0
        if group:
            tasks.append(self._after_task(bitcodes, pipelines, group, 0, p))
        # Longest first, so a big module does not start last and leave other workers idle.
        tasks.sort(key=lambda t: -sum(sizes[m] for m in t.modules) * t.pipeline_count)
        return tasks

    def _engine_error(self, worker: _Worker, timed_out: bool, name: str, pipeline: Optional[str],
                      index: Optional[int]) -> EngineError:
        where = f" (pipeline {index})" if index is not None else ""
        if timed_out:
            return PassTimeoutError(f"{name}: pass pipeline{where} ran past {self.timeout:g} s and was killed",
                                    module=name, pipeline=pipeline, pipeline_index=index)
        stderr = worker.stderr_tail()
        detail = f"; stderr: {stderr}" if stderr else ""
        return PassCrashError(f"{name}: LLVM crashed{where}, worker {worker.exit_description()}{detail}",
                              module=name, pipeline=pipeline, pipeline_index=index, detail=stderr)

    def _in_process(self, call, invalid):
        try:
            return call()
        except native.InputError as exc:
            raise invalid(str(exc)) from None

    def _single(self, request: tuple, name: str, pipeline: Optional[str], invalid,
                deadline: Optional[float] = None) -> bytes:
        result: List = []
        failure: List[BPQError] = []

        def on_reply(task, reply):
            status, value = reply
            if status == "ok":
                result.append(value)
            else:
                failure.append(invalid(f"{name}: {value}"))

        def on_failure(task, worker, culprit, timed_out):
            failure.append(self._engine_error(worker, timed_out, name, pipeline, None))
            return []

        def on_deadline(task):
            failure.append(DeadlineError(f"{name}: the deadline passed before the pass pipeline finished"))

        self._execute([_Task(request)], on_reply, on_failure, deadline=deadline, on_deadline=on_deadline)
        if failure:
            raise failure[0]
        return result[0]

    def _execute(self, tasks: List[_Task], on_reply, on_failure, revise=lambda task: task,
                 deadline: Optional[float] = None, on_deadline=None) -> None:
        """Run tasks on the pool until all have a reply or a failure; failures may return tasks to retry.
        ``revise`` sees each task as it is about to start and returns it, a smaller task, or None to skip it. Past
        ``deadline`` (``time.monotonic()``) every task still queued or running goes to ``on_deadline`` and the
        workers running one are replaced."""
        with self._lock:
            queue: Deque[_Task] = deque(tasks)
            busy: Dict[int, _Worker] = {}
            try:
                while queue or busy:
                    if deadline is not None and time.monotonic() >= deadline:
                        for task in [worker.task for worker in busy.values()] + list(queue):
                            on_deadline(task)
                        break  # the running workers are replaced below
                    while queue:
                        task = revise(queue.popleft())
                        if task is None:
                            continue
                        worker = self._idle_worker(busy)
                        if worker is None:
                            queue.appendleft(task)
                            break
                        try:
                            worker.start(task)
                            busy[worker.fd] = worker
                        except _WorkerDied:
                            queue.extend(self._fail(worker, task, on_failure, timed_out=False))
                    wait = 0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic()))
                    readable, _, _ = select.select(list(busy), [], [], wait)
                    for fd in readable:
                        worker = busy[fd]
                        task = worker.task
                        try:
                            reply = worker.read()
                        except _WorkerDied:
                            del busy[fd]
                            queue.extend(self._fail(worker, task, on_failure, timed_out=False))
                            continue
                        if reply is not None:
                            del busy[fd]
                            on_reply(task, reply)
                    now = time.monotonic()
                    for fd, worker in list(busy.items()):
                        stuck = worker.stuck(self.timeout, now)
                        overdue = worker.task.request[0] == "prepare" and worker.elapsed(now) > self.timeout
                        if stuck is not None or overdue:
                            del busy[fd]
                            task = worker.task
                            worker.kill()
                            queue.extend(self._fail(worker, task, on_failure, timed_out=True, culprit=stuck))
            finally:
                for worker in busy.values():  # interrupted: do not leave work running
                    self._replace(worker)

    def _fail(self, worker: _Worker, task: _Task, on_failure, timed_out: bool, culprit=None) -> List[_Task]:
        if culprit is None and not timed_out:
            active = worker.active()
            culprit = active[0] if len(active) == 1 else None
        retry = on_failure(task, worker, culprit, timed_out)  # may wait for the exit status first
        self._replace(worker)
        return retry

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        worker.close()
        self._pool.remove(worker)
        self.restarts += 1

    def _idle_worker(self, busy: Dict[int, _Worker]) -> Optional[_Worker]:
        for worker in self._pool:
            if worker.fd not in busy:
                return worker
        if len(self._pool) < self.workers:
            worker = _Worker(self.threads)
            self._pool.append(worker)
            return worker
        return None


@dataclass
class StepResult:
    """What one pass application reports: whether the passes reported a change (left some analysis not preserved:
    CompilerGym's "action had an effect"), the instruction count, and Autophase
    (int64 (56,)) / InstCount (int64 (len(INSTCOUNT_FEATURES),)) when they were asked for, else None."""

    changed: bool
    instruction_count: int
    autophase: Optional[np.ndarray] = None
    instcount: Optional[np.ndarray] = None


class LiveSession:
    """A module kept in memory in the engine's session worker between pass applications: a pass runs in place and
    the features are read in place, so one step sends a pipeline and gets numbers back; bitcode crosses the pipe
    only when :meth:`bitcode` is asked for. A fork re-parses the module in the worker from its bitcode
    (use-list order preserved), so it continues exactly as its parent would.

    The results are those of the same pipelines applied one after the other to a module parsed once (each with
    freshly cleared analyses, as :meth:`Engine.autophase_tree` applies a chain of edges). A pass that crashes LLVM
    or runs past the engine's timeout raises PassCrashError / PassTimeoutError and kills the session worker; the
    session stays in the state before that pass, and every session of the engine that lost its module replays
    its pipelines from its initial bitcode on next use (results are reproducible: the worker's address layout is
    fixed).
    """

    def __init__(self, engine: Engine, bitcode: bytes, name: str = "module",
                 pipelines: Sequence[str] = (), *, _sid: Optional[Tuple[int, int]] = None):
        self.engine = engine
        self.name = name
        self._initial = bitcode
        self.pipelines: List[str] = list(pipelines)   # applied since the initial bitcode, in order
        self._generation, self._sid = _sid if _sid is not None else (None, None)   # opened on first use

    def _open(self) -> None:
        self._generation, self._sid = self.engine._session_call(("open", self._initial, list(self.pipelines)),
                                                                self.name)

    def _call(self, op: str, *args, pipeline: Optional[str] = None):
        if self._sid is None or self._generation != self.engine._session_generation:
            self._open()   # first use, or the worker that held the module died: replay
        generation, value = self.engine._session_call((op, self._sid) + args, self.name, pipeline)
        return value

    def apply(self, pipeline: str, *, autophase: bool = False, instcount: bool = False) -> StepResult:
        """Run ``pipeline`` on the module in place; raises PassCrashError / PassTimeoutError (the module stays as
        it was), PipelineError for a pipeline LLVM does not parse."""
        check_pipeline(pipeline)
        changed, count, features, counts = self._call("apply", pipeline, (autophase, instcount), pipeline=pipeline)
        self.pipelines.append(pipeline)
        return StepResult(bool(changed), int(count), features, counts)

    def observe(self, *, autophase: bool = False, instcount: bool = False) -> StepResult:
        """The module's instruction count, and Autophase / InstCount when asked (``changed`` is False)."""
        count, features, counts = self._call("observe", (autophase, instcount))
        return StepResult(False, int(count), features, counts)

    def bitcode(self) -> bytes:
        """The module's bitcode, as :meth:`Engine.run_pipeline` writes it."""
        return self._call("bitcode")

    def fork(self) -> "LiveSession":
        """An independent session in this one's state."""
        sid = self._call("fork")
        return LiveSession(self.engine, self._initial, self.name, self.pipelines, _sid=(self._generation, sid))

    def close(self) -> None:
        """Free the module in the worker (also done when the session is garbage-collected); a later call opens
        it again."""
        if self._sid is not None:
            self.engine._drop_session(self._generation, self._sid)
            self._sid = None
            self._generation = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _check_deadline(deadline: Optional[float], name: str) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineError(f"{name}: the deadline passed before the pass pipeline ran")


_default_engine: Optional[Engine] = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The shared engine used when a function gets no ``engine=`` (created on first use)."""
    global _default_engine
    with _default_lock:
        if _default_engine is None:
            _default_engine = Engine()
            atexit.register(_default_engine.close)
        return _default_engine
