"""Corpus jobs: build (compile, prepare, features, labels), label, and spectra, run on any Executor.

A job streams its work units in chunks to a ``concurrent.futures.Executor`` (default: local processes sized to
the machine; a Dask ``distributed`` client's ``get_executor()`` runs the same job across machines), keeps a
bounded number of chunks in flight, and writes results to the store in shards as they arrive. Every unit ends as
a row: a module that does not compile, crashes a pass or times out is a ``failed`` row with its error.

Resuming: a build skips the input items whose key is already in the store, so a killed build restarted with the
same arguments computes only what is missing. Modules and labels shards are flushed before the inputs shard that
refers to them, so a kill between the two only repeats work, never loses it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import pyarrow as pa

from behavioral_pq.core._native_loader import native
from behavioral_pq.core.engine import Engine, default_workers
from behavioral_pq.core.module import Module
from behavioral_pq.corpus.buckets import PROJECT_PREFIX
from behavioral_pq.corpus.inputs import InputItem, load_bitcode
from behavioral_pq.corpus.labels import LABEL_PIPELINES, label_row
from behavioral_pq.corpus.programs import DATA_UNITS, NO_CODE, write_data_unit
from behavioral_pq.corpus.store import SCHEMAS, CorpusStore
from behavioral_pq.embedding.probes import ProbeSet, load_probes
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.errors import BPQError, InvalidIRError

logger = logging.getLogger(__name__)

DEFAULT_CHUNK = 8            # input items per task
DEFAULT_SHARD_ROWS = 2000    # rows buffered before a shard is written
DEFAULT_FLUSH_SECONDS = 60.0 # ... or after this long, so a kill loses at most a minute of work


# -- executors ---------------------------------------------------------------------------------------------------

def local_executor(workers: Optional[int] = None) -> ProcessPoolExecutor:
    """The default executor: ``workers`` (default: the CPUs available) spawned local processes."""
    import multiprocessing

    return ProcessPoolExecutor(max_workers=max(1, workers or default_workers()),
                               mp_context=multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))


UNGUARDED_SCRIPT_HINT = (
    "the corpus job's worker processes died while starting. Called from a script? Put the call under "
    "`if __name__ == \"__main__\":` -- each worker process imports the script again (Python's spawn start method), "
    "and an unguarded call starts the job again inside it")


def _ready() -> bool:
    return True


def _started(executor: ProcessPoolExecutor) -> ProcessPoolExecutor:
    """``executor`` once one of its processes has started; a pool that dies at start-up (most often a script
    without a ``__main__`` guard) raises a RuntimeError that says so, instead of failing every unit."""
    try:
        executor.submit(_ready).result()
    except BrokenProcessPool:
        executor.shutdown(wait=False, cancel_futures=True)
        raise RuntimeError(UNGUARDED_SCRIPT_HINT) from None
    return executor


def _exit_with_parent(parent: int) -> None:
    """Pool workers outlive a driver killed with SIGKILL (they wait on a queue nobody writes to); this watchdog
    ends them, and with them their engine workers, when the driver is gone."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        closing = threading.Thread(target=_close_task_engine, daemon=True)   # its worker's /dev/shm file too
        closing.start()
        closing.join(timeout=5.0)
        os._exit(1)

    threading.Thread(target=watch, name="bpq-exit-with-parent", daemon=True).start()


def dask_executor(address: str):
    """An Executor on a Dask ``distributed`` scheduler (``tcp://host:8786``). Every worker needs behavioral_pq
    installed and the sources visible at the same paths (a shared file system)."""
    try:
        from distributed import Client
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("Dask scale-out needs the 'distributed' package: pip install 'behavioral-pq[dask]'") from exc
    return Client(address).get_executor(pure=False)


# -- the task side: runs in executor processes -------------------------------------------------------------------

@dataclass(frozen=True)
class JobOptions:
    """Options shipped with every task.

    Attributes:
        labels: compute the per-pass labels while building.
        timeout: seconds one pipeline may run on one module.
        compile_timeout: seconds one clang or llvm-link run may take.
    """

    labels: bool = True
    timeout: float = 60.0
    compile_timeout: float = 120.0


_task_state: Dict[str, object] = {}


def _task_engine(timeout: float):
    """The engine of this executor process: one protected worker, created on first use."""

    engine = _task_state.get("engine")
    if engine is None or engine.timeout != timeout:
        _close_task_engine()
        if not _task_state.get("close_at_exit"):
            atexit.register(_close_task_engine)
            _task_state["close_at_exit"] = True
        engine = Engine(workers=1, threads=1, timeout=timeout)
        _task_state["engine"] = engine
    return engine


def _close_task_engine() -> None:
    """Stop this executor process's engine, at its exit or before another replaces it: its worker's progress
    file in /dev/shm (``bpq-progress-*``) is removed only by a close, and would outlive the process otherwise."""
    engine = _task_state.pop("engine", None)
    if engine is not None:
        engine.close()


def _known(store_path: str, table: str) -> Set[str]:
    """Keys of ``table`` in the store, cached per process and extended with shards added since the last call."""
    cache = _task_state.setdefault(("known", store_path, table), {"shards": set(), "keys": set()})
    store = CorpusStore(store_path)
    for entry in store.shards(table):
        if entry["path"] not in cache["shards"]:
            cache["keys"].update(store.read_shard(entry, ["sha256"]).column(0).to_pylist())
            cache["shards"].add(entry["path"])
    return cache["keys"]


def _error_fields(exc: BaseException) -> dict:
    return {"error_kind": type(exc).__name__, "error": str(exc)[:4000]}


def _input_row(item: InputItem, **fields) -> dict:
    """An ``inputs`` row for ``item``: ok by default, ``fields`` override (status, stage, error, sha256...)."""
    row = {"key": item.key, "origin": item.origin, "group": item.group, "sources": list(item.sources),
           "language": item.language, "flags": list(item.flags), "status": "ok", "stage": None,
           "error_kind": None, "error": None, "sha256": None, "seconds": 0.0}
    row.update(fields)
    return row


def build_task(items: Sequence[InputItem], store_path: str, options: JobOptions) -> dict:
    """Compile, prepare, featurize and (optionally) label a chunk of input items. Returns rows per table."""

    engine = _task_engine(options.timeout)
    known_modules = _known(store_path, "modules")
    known_labels = _known(store_path, "labels") if options.labels else set()
    inputs, modules, fresh, data_units = [], [], [], []
    for item in items:
        row = _input_row(item)
        start = time.perf_counter()
        stage = "compile"
        try:
            raw = load_bitcode(item, timeout=options.compile_timeout)
            stage = "prepare"
            bitcode = engine.prepare(raw, os.path.basename(item.sources[0]))
            if native.instruction_count(bitcode) == 0:
                if item.origin.startswith(PROJECT_PREFIX):   # a table of data: no module, but programs link with it
                    row["sha256"] = hashlib.sha256(bitcode).hexdigest()
                    data_units.append({"sha256": row["sha256"], "bitcode": bitcode})
                raise InvalidIRError(f"{os.path.basename(item.sources[0])}: {NO_CODE}")
        except (BPQError, OSError) as exc:
            row.update(status="failed", stage=stage, **_error_fields(exc))
        else:
            sha = hashlib.sha256(bitcode).hexdigest()
            row["sha256"] = sha
            if sha not in known_modules:
                known_modules.add(sha)
                modules.append({"sha256": sha, "instruction_count": int(native.instruction_count(bitcode)),
                                "autophase": native.autophase(bitcode).tolist(),
                                "instcount": native.instcount(bitcode).tolist(), "bitcode": bitcode})
            if options.labels and sha not in known_labels:
                known_labels.add(sha)
                fresh.append((sha, bitcode, os.path.basename(item.sources[0])))
        row["seconds"] = time.perf_counter() - start
        inputs.append(row)
    labels = _label_rows(engine, fresh) if fresh else []
    return {"inputs": inputs, "modules": modules, "labels": labels, DATA_UNITS: data_units}


def _label_rows(engine, modules: Sequence[Tuple[str, bytes, str]]) -> List[dict]:
    features, errors = engine.autophase_after([m[1] for m in modules], LABEL_PIPELINES,
                                              names=[m[2] for m in modules])
    return [label_row(sha, features[i], errors[i]) for i, (sha, _, _) in enumerate(modules)]


def label_task(modules: Sequence[Tuple[str, bytes]], store_path: str, options: JobOptions) -> dict:
    """Labels of already-stored modules: a chunk of (sha256, bitcode)."""
    engine = _task_engine(options.timeout)
    return {"labels": _label_rows(engine, [(sha, bc, sha[:12]) for sha, bc in modules])}


def spectra_task(modules: Sequence[Tuple[str, bytes]], probe_set: ProbeSet, options: JobOptions) -> dict:
    """Autophase after every probe for a chunk of (sha256, bitcode); rows for the spectra table.

    A probe that crashes LLVM on a module is measured without the crashing pass (as :func:`spectra` does): the
    row is ``ok`` with ``error_kind="degraded"`` and ``error`` listing what was left out as JSON."""
    engine = _task_engine(options.timeout)
    batch = spectra([Module(bc, name=sha[:12]) for sha, bc in modules], probe_set, engine=engine, cache=False)
    rows = []
    for i, (sha, _) in enumerate(modules):
        if batch.errors[i] is not None:
            rows.append({"sha256": sha, "status": "failed", **_error_fields(batch.errors[i]),
                         "autophase_after": None})
            continue
        degraded = [asdict(d) for d in batch.degraded[i]]
        rows.append({"sha256": sha, "status": "ok", "error_kind": "degraded" if degraded else None,
                     "error": json.dumps(degraded) if degraded else None,
                     "autophase_after": batch.autophase[i, 1:].astype("<i4").tobytes()})
    return {"spectra": rows}


# -- the driver side ---------------------------------------------------------------------------------------------

class _Writer:
    """Buffers rows per table and writes them as shards: modules and labels first, inputs last."""

    ORDER = ("modules", "labels", "spectra", "inputs")

    def __init__(self, store: CorpusStore, shard_rows: int, flush_seconds: float, probe_set: Optional[str] = None):
        self.store, self.shard_rows, self.flush_seconds, self.probe_set = store, shard_rows, flush_seconds, probe_set
        self.buffers: Dict[str, List[dict]] = {t: [] for t in self.ORDER}
        self.seen: Dict[str, Set[str]] = {t: set() for t in self.ORDER}
        self.last_flush = time.monotonic()
        self.shards_written = 0

    def add(self, rows: Dict[str, List[dict]]) -> None:
        for table, table_rows in rows.items():
            key = "key" if table == "inputs" else "sha256"
            for row in table_rows:
                if row[key] in self.seen[table]:
                    continue  # computed twice by two in-flight chunks: keep the first
                self.seen[table].add(row[key])
                self.buffers[table].append(row)
        if (max(len(b) for b in self.buffers.values()) >= self.shard_rows
                or time.monotonic() - self.last_flush >= self.flush_seconds):
            self.flush()

    def flush(self) -> None:
        for table in self.ORDER:
            rows = self.buffers[table]
            if rows:
                self.store.append(table, pa.Table.from_pylist(rows, schema=SCHEMAS[table]),
                                  probe_set=self.probe_set if table == "spectra" else None)
                self.shards_written += 1
                rows.clear()
        self.last_flush = time.monotonic()


def _chunks(iterable: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for x in iterable:
        chunk.append(x)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _open_for_writing(store: os.PathLike, *, create: bool = False) -> CorpusStore:
    corpus = CorpusStore(store, create=create)
    corpus.check_writable()
    corpus.clean_temporary()
    return corpus


def _run_job(executor: Optional[Executor], workers: Optional[int], task: Callable, chunks: Iterable[list],
             args: tuple, on_result: Callable[[dict], int], on_lost: Callable[[list, BaseException], dict],
             bar, writer: "_Writer") -> None:
    """Submit ``task(chunk, *args)`` for every chunk with a bounded number in flight; ``on_result`` gets each
    result and returns how many units it covered. A chunk whose task dies is retried unit by unit; a unit that
    still fails is passed to ``on_lost`` (which turns it into failure rows)."""
    own = executor is None
    executor = executor or _started(local_executor(workers))
    capacity = 2 * max(1, workers or getattr(executor, "_max_workers", None) or os.cpu_count() or 1)
    pending: Dict[object, Tuple[list, bool]] = {}

    def submit(chunk: list, retry: bool) -> None:
        nonlocal executor
        try:
            pending[executor.submit(task, chunk, *args)] = (chunk, retry)
        except (BrokenProcessPool, RuntimeError):
            if not own:
                raise
            executor.shutdown(wait=False, cancel_futures=True)
            executor = local_executor(workers)
            pending[executor.submit(task, chunk, *args)] = (chunk, retry)

    def collect(block: bool) -> None:
        nonlocal executor
        if not pending:
            return
        done, _ = wait(list(pending), timeout=None if block else 0, return_when=FIRST_COMPLETED)
        for future in done:
            if future not in pending:  # resubmitted already, after an earlier future of the same dead pool
                continue
            chunk, retried = pending.pop(future)
            try:
                result = future.result()
            except Exception as exc:  # a task that died (worker killed, out of memory): never drop its units
                logger.warning("task of %d units failed (%s: %s)", len(chunk), type(exc).__name__, exc)
                if own and isinstance(exc, BrokenProcessPool):
                    executor.shutdown(wait=False, cancel_futures=False)
                    executor = local_executor(workers)
                    for other in list(pending):  # futures of the dead pool: resubmit their chunks
                        again, was_retry = pending.pop(other)
                        submit(again, was_retry)
                if retried:
                    bar.update(on_result(on_lost(chunk, exc)))
                elif len(chunk) == 1:
                    submit(chunk, True)
                else:
                    for unit in chunk:
                        submit([unit], True)
                continue
            bar.update(on_result(result))

    try:
        for chunk in chunks:
            while len(pending) >= capacity:
                collect(block=True)
            submit(chunk, False)
            collect(block=False)
        while pending:
            collect(block=True)
    finally:
        if own:
            executor.shutdown(wait=True, cancel_futures=True)
        writer.flush()  # whatever arrived is kept, also when interrupted
        bar.close()


def _bar(total: Optional[int], desc: str, progress: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="module", disable=not progress, dynamic_ncols=True)


@dataclass
class JobSummary:
    """What a job did. ``failures`` counts failed units by (stage, error kind)."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    new_modules: int = 0
    duplicates: int = 0
    labelled: int = 0
    failures: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["failures"] = {f"{stage}:{kind}": n for (stage, kind), n in sorted(self.failures.items())}
        return data


def build_corpus(items: Iterable[InputItem], store: os.PathLike, *, labels: bool = True,
                 executor: Optional[Executor] = None, workers: Optional[int] = None, chunk_size: int = DEFAULT_CHUNK,
                 timeout: float = 60.0, compile_timeout: float = 120.0, progress: bool = False,
                 shard_rows: int = DEFAULT_SHARD_ROWS, flush_seconds: float = DEFAULT_FLUSH_SECONDS,
                 description: Optional[dict] = None, total: Optional[int] = None) -> JobSummary:
    """Build (or resume building) a corpus store from input items.

    Args:
        items: from :func:`~behavioral_pq.corpus.inputs.discover` or ``from_compile_commands``.
        store: the store directory (created if needed).
        labels: also compute the labels (124 single passes, -Oz, -O3) of every new module.
        executor: where tasks run (default: ``workers`` local processes). A Dask client's ``get_executor()``
            runs the job on a cluster.
        chunk_size: input items per task. timeout: seconds per pipeline. compile_timeout: per clang run.
        progress: show a progress bar. description: recorded in the manifest's ``sources``.
        total: number of items, for the progress bar, when ``items`` is a generator.

    Returns:
        a JobSummary; nothing is dropped silently: every item is in the store as ``ok`` or ``failed``.
    """
    start = time.perf_counter()
    corpus = _open_for_writing(store, create=True)
    done_keys = corpus.keys("inputs")
    summary = JobSummary()
    writer = _Writer(corpus, shard_rows, flush_seconds)
    options = JobOptions(labels=labels, timeout=timeout, compile_timeout=compile_timeout)

    def todo() -> Iterator[InputItem]:
        for item in items:
            summary.total += 1
            if item.key in done_keys:
                summary.skipped += 1
                bar.update(1)
                continue
            done_keys.add(item.key)  # the same item listed twice is built once
            yield item

    def on_result(result: dict) -> int:
        for unit in result.pop(DATA_UNITS, ()):
            write_data_unit(corpus.path, unit["sha256"], unit["bitcode"])
        fresh = {sha for sha in (r["sha256"] for r in result["modules"]) if sha not in writer.seen["modules"]}
        summary.new_modules += len(fresh)
        ok = 0
        for row in result["inputs"]:
            summary.done += 1
            if row["status"] != "ok":
                summary.failures[(row["stage"], row["error_kind"])] += 1
            else:
                ok += 1
        summary.duplicates += ok - len(fresh)
        for row in result["labels"]:
            if row["sha256"] in writer.seen["labels"]:
                continue
            if row["status"] == "ok":
                summary.labelled += 1
            else:
                summary.failures[("labels", row["error_kind"])] += 1
        writer.add(result)
        bar.set_postfix(failed=sum(summary.failures.values()), refresh=False)
        return len(result["inputs"])

    def on_lost(chunk: List[InputItem], exc: BaseException) -> dict:
        rows = [_input_row(it, status="failed", stage="worker", **_error_fields(exc)) for it in chunk]
        return {"inputs": rows, "modules": [], "labels": []}

    bar = _bar(total, "corpus build", progress)
    _run_job(executor, workers, build_task, _chunks(todo(), chunk_size), (str(corpus.path), options),
             on_result, on_lost, bar, writer)
    summary.seconds = time.perf_counter() - start
    if description is not None:
        corpus.record_source(dict(description, summary=summary.to_dict(),
                                  finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
    return summary


def _stored_modules(corpus: CorpusStore, skip: Set[str], only: Optional[Set[str]] = None
                    ) -> Iterator[Tuple[str, bytes]]:
    for batch in corpus.iter_batches("modules", ["sha256", "bitcode"], batch_size=256):
        for sha, bitcode in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            if sha not in skip and (only is None or sha in only):
                yield sha, bitcode


def label_corpus(store: os.PathLike, *, executor: Optional[Executor] = None, workers: Optional[int] = None,
                 chunk_size: int = DEFAULT_CHUNK, timeout: float = 60.0, progress: bool = False,
                 shard_rows: int = DEFAULT_SHARD_ROWS, flush_seconds: float = DEFAULT_FLUSH_SECONDS,
                 only: Optional[Set[str]] = None) -> JobSummary:
    """Compute labels for every stored module that has none yet (resumable like a build).

    Args:
        only: restrict to these module hashes (e.g. one split, or the modules under a size limit).
    """
    start = time.perf_counter()
    corpus = _open_for_writing(store)
    have = corpus.keys("labels")
    wanted = corpus.keys("modules") if only is None else corpus.keys("modules") & set(only)
    todo_count = len(wanted - have)
    summary = JobSummary(total=todo_count)
    writer = _Writer(corpus, shard_rows, flush_seconds)

    def on_result(result: dict) -> int:
        for row in result["labels"]:
            summary.done += 1
            if row["status"] == "ok":
                summary.labelled += 1
            else:
                summary.failures[("labels", row["error_kind"])] += 1
        writer.add(result)
        return len(result["labels"])

    def on_lost(chunk, exc) -> dict:
        return {"labels": [label_row(sha, None, exc if isinstance(exc, BPQError) else BPQError(str(exc)))
                           for sha, _ in chunk]}

    bar = _bar(todo_count, "labels", progress)
    _run_job(executor, workers, label_task, _chunks(_stored_modules(corpus, have, wanted), chunk_size),
             (str(corpus.path), JobOptions(timeout=timeout)), on_result, on_lost, bar, writer)
    summary.seconds = time.perf_counter() - start
    return summary


def compute_spectra(store: os.PathLike, probes=None, *, executor: Optional[Executor] = None,
                    workers: Optional[int] = None, chunk_size: int = DEFAULT_CHUNK, timeout: float = 60.0,
                    progress: bool = False, only: Optional[Set[str]] = None,
                    shard_rows: int = DEFAULT_SHARD_ROWS, flush_seconds: float = DEFAULT_FLUSH_SECONDS
                    ) -> JobSummary:
    """Measure and store the spectra of stored modules for a probe set (keyed by its hash); resumable.

    Args:
        probes: a ProbeSet, a path, or None for the package default.
        only: restrict to these module hashes (e.g. one split).
    """

    start = time.perf_counter()
    probe_set = load_probes(probes)
    corpus = _open_for_writing(store)
    have = corpus.keys("spectra", probe_set=probe_set.hash)
    wanted = corpus.keys("modules") if only is None else corpus.keys("modules") & set(only)
    todo_count = len(wanted - have)
    summary = JobSummary(total=todo_count)
    writer = _Writer(corpus, shard_rows, flush_seconds, probe_set=probe_set.hash)

    def on_result(result: dict) -> int:
        for row in result["spectra"]:
            summary.done += 1
            if row["status"] != "ok":
                summary.failures[("spectra", row["error_kind"])] += 1
        writer.add(result)
        return len(result["spectra"])

    def on_lost(chunk, exc) -> dict:
        return {"spectra": [{"sha256": sha, "status": "failed", **_error_fields(exc), "autophase_after": None}
                            for sha, _ in chunk]}

    bar = _bar(todo_count, "spectra", progress)
    _run_job(executor, workers, spectra_task, _chunks(_stored_modules(corpus, have, wanted), chunk_size),
             (probe_set, JobOptions(timeout=timeout)), on_result, on_lost, bar, writer)
    summary.seconds = time.perf_counter() - start
    return summary
