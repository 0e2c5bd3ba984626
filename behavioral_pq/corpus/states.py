"""Intermediate states: modules after a prefix of passes, each with its own spectrum and next-pass labels.

The paper's best-pass task looks at a module as built, where ``-sroa``/``-mem2reg`` win almost always. Guidance
needs the best *next* pass from wherever a pipeline has got to, so a program gives several states (DESIGN.md
section 9):

- ``random``: a prefix of 1..30 catalog passes drawn uniformly;
- ``oz-like``: a prefix of :data:`~behavioral_pq.core.catalog.OZ_LIKE_ORDER` (LLVM's -Oz order in catalog passes).

Each state records its prefix (catalog indices), so ``replay(program, prefix)`` re-creates it bit for bit, and
carries what a module as built carries: Autophase, InstCount, the instruction count after each of the 124 passes,
the -Oz count and the spectrum for a probe set. Its label is :func:`next_pass_labels`: the passes with the largest
reduction, or :data:`NO_PASS` alone when no pass reduces the count.

A state set is a folder: ``states.json`` (settings) and ``part-*.parquet`` (one per chunk of programs, written
atomically), so an interrupted build resumes where it stopped. Prefixes depend only on (seed, program hash).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from behavioral_pq.artifacts import atomic_path, read_json_bounded, write_text_atomic
from behavioral_pq.core._native_loader import LLVM_MAJOR
from behavioral_pq.core.catalog import OZ_LIKE_ORDER, PASSES, get_pass, sequence_pipeline
from behavioral_pq.core.engine import Engine
from behavioral_pq.core.features import instcount
from behavioral_pq.core.module import Module
from behavioral_pq.core.passes import optimize
from behavioral_pq.corpus.labels import LABEL_PIPELINES, NUM_PASSES, TOTAL_INSTS
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.spectrum import log_relative
from behavioral_pq.errors import BPQError

FORMAT = "behavioral_pq.corpus.states"
FORMAT_VERSION = 1
SETTINGS = "states.json"
KINDS = ("random", "oz-like")

#: Class index of "no pass reduces the instruction count" in next-pass labels (after the 124 catalog passes).
NO_PASS = NUM_PASSES
NUM_CLASSES = NUM_PASSES + 1

OZ_LIKE_INDICES = tuple(get_pass(flag).index for flag in OZ_LIKE_ORDER)

SCHEMA = pa.schema([
    ("program", pa.string()), ("split", pa.string()), ("state", pa.int16()), ("kind", pa.string()),
    ("prefix", pa.list_(pa.int16())), ("sha256", pa.string()), ("status", pa.string()),
    ("error_kind", pa.string()), ("error", pa.string()), ("instruction_count", pa.int64()),
    ("autophase", pa.list_(pa.int64())), ("instcount", pa.list_(pa.int64())),
    ("pass_counts", pa.list_(pa.int64())), ("oz_count", pa.int64()), ("spectrum", pa.binary()),
])


def next_pass_labels(instruction_count: int, pass_counts: Sequence[int]) -> List[int]:
    """Set-valued label of a state: every pass reaching the smallest count when it is below ``instruction_count``,
    else ``[NO_PASS]`` ("no pass helps" is a class of its own, not a tie of 124 useless passes)."""
    counts = np.asarray(pass_counts)
    best = counts.min()
    if best >= instruction_count:
        return [NO_PASS]
    return np.flatnonzero(counts == best).tolist()


def draw_prefixes(program: str, *, random_states: int = 2, oz_states: int = 2, seed: int = 0,
                  max_random_length: int = 30) -> List[Tuple[str, Tuple[int, ...]]]:
    """The (kind, prefix of catalog indices) of a program's states; depends only on the arguments.

    Args:
        program: the program's module hash (hex); seeds the draw together with ``seed``.
    """
    rng = np.random.default_rng([seed, int(program[:15], 16)])
    plans: List[Tuple[str, Tuple[int, ...]]] = []
    for _ in range(random_states):
        length = int(rng.integers(1, max_random_length + 1))
        plans.append(("random", tuple(int(i) for i in rng.integers(0, NUM_PASSES, length))))
    for _ in range(oz_states):
        length = int(rng.integers(1, len(OZ_LIKE_INDICES) + 1))
        plans.append(("oz-like", OZ_LIKE_INDICES[:length]))
    return plans


def replay(module, prefix: Sequence[int], *, engine=None):
    """The state a prefix leads to: ``module`` after the catalog passes ``prefix`` (a Module)."""

    return optimize(module, [PASSES[i] for i in prefix], engine=engine)


def _failed(base: dict, exc: BaseException) -> dict:
    return {**base, "status": "failed", "error_kind": type(exc).__name__, "error": str(exc)}


def measure_states(programs: Sequence[Tuple[str, bytes]], plans: Sequence[Sequence[Tuple[str, Tuple[int, ...]]]],
                   probe_set, engine, splits: Optional[Dict[str, str]] = None) -> List[dict]:
    """Rows (see ``SCHEMA``) for the states of ``programs`` [(hash, bitcode)], one plan list per program.

    A state whose prefix or measurement fails becomes a ``failed`` row with its error; the others complete.
    """

    rows: List[dict] = []
    pending: List[Tuple[int, bytes]] = []
    for (program, bitcode), program_plans in zip(programs, plans):
        for number, (kind, prefix) in enumerate(program_plans):
            base = {"program": program, "split": (splits or {}).get(program), "state": number, "kind": kind,
                    "prefix": list(prefix)}
            try:
                state = engine.run_pipeline(bitcode, sequence_pipeline(list(prefix)), name=program[:12])
            except BPQError as exc:
                rows.append(_failed(base, exc))
                continue
            rows.append(base)
            pending.append((len(rows) - 1, state))
    if not pending:
        return rows
    pipelines = LABEL_PIPELINES + probe_set.pipelines()
    features, errors = engine.autophase_after([bc for _, bc in pending], pipelines,
                                              names=[rows[i]["program"][:12] for i, _ in pending])
    first_probe = 1 + len(LABEL_PIPELINES)
    for (i, bitcode), values, error in zip(pending, features, errors):
        if error is not None:
            rows[i] = _failed(rows[i], error)
            continue
        module = Module(bitcode)
        spectrum = log_relative(values[:1], values[first_probe:])
        rows[i].update(sha256=module.sha256, status="ok", instruction_count=int(values[0, TOTAL_INSTS]),
                       autophase=values[0].tolist(), instcount=instcount(module).tolist(),
                       pass_counts=values[1:1 + NUM_PASSES, TOTAL_INSTS].tolist(),
                       oz_count=int(values[1 + NUM_PASSES, TOTAL_INSTS]), spectrum=spectrum.tobytes())
    return rows


def _settings(probe_set, random_states: int, oz_states: int, seed: int, max_random_length: int) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "llvm_major": LLVM_MAJOR,
            "probe_set": {"name": probe_set.name, "hash": probe_set.hash, "num_probes": probe_set.num_probes},
            "random_states": random_states, "oz_states": oz_states, "seed": seed,
            "max_random_length": max_random_length, "oz_like_order": list(OZ_LIKE_ORDER)}


def build_states(store: Union[str, os.PathLike], out: Union[str, os.PathLike], programs: Iterable[str], *,
                 probes=None, random_states: int = 2, oz_states: int = 2, seed: int = 0,
                 max_random_length: int = 30, workers: Optional[int] = None, timeout: float = 20.0,
                 chunk: int = 16, progress: bool = False) -> dict:
    """Measure the states of ``programs`` (module hashes of the corpus ``store``) into the folder ``out``.

    Resumable: programs already in ``out`` are skipped. Settings must match the folder's (else ValueError).
    Returns counts: programs done now, states ok and failed, seconds.
    """

    probe_set = load_probes(probes)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(probe_set, random_states, oz_states, seed, max_random_length)
    saved = out / SETTINGS
    if saved.is_file():
        if read_json_bounded(saved, what="state settings", error=ValueError) != settings:
            raise ValueError(f"{out} holds states made with other settings ({saved}); use another folder")
    else:
        write_text_atomic(saved, json.dumps(settings, indent=2) + "\n")
    done = set(read_states(out, columns=["program"]).column("program").to_pylist())
    wanted = [p for p in dict.fromkeys(programs) if p not in done]
    corpus = Corpus(store)
    splits = corpus.store.splits()
    bitcodes = {m.sha256: m.bitcode for m in corpus.iter_modules(only=set(wanted))}
    missing = [p for p in wanted if p not in bitcodes]
    if missing:
        raise ValueError(f"{len(missing)} programs are not modules of {store} (first: {missing[0]})")
    start = time.perf_counter()
    counts = {"programs": 0, "ok": 0, "failed": 0}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(wanted), unit="program", desc="states")
    with Engine(workers, timeout=timeout) as engine:
        for i in range(0, len(wanted), chunk):
            part = wanted[i:i + chunk]
            plans = [draw_prefixes(p, random_states=random_states, oz_states=oz_states, seed=seed,
                                   max_random_length=max_random_length) for p in part]
            rows = measure_states([(p, bitcodes[p]) for p in part], plans, probe_set, engine, splits)
            _write_part(out, rows)
            counts["programs"] += len(part)
            for row in rows:
                counts[row["status"]] += 1
            if bar:
                bar.update(len(part))
    if bar:
        bar.close()
    counts["seconds"] = round(time.perf_counter() - start, 1)
    return counts


def _write_part(out: Path, rows: List[dict]) -> None:
    table = pa.Table.from_pylist([{name: row.get(name) for name in SCHEMA.names} for row in rows], schema=SCHEMA)
    name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}.parquet"
    with atomic_path(out / name) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def read_states(path: Union[str, os.PathLike], columns: Optional[Sequence[str]] = None, *,
                status: Optional[str] = None) -> pa.Table:
    """All states of a folder as one table (``status="ok"`` keeps the measured ones)."""
    path = Path(path)
    parts = sorted(path.glob("part-*.parquet"))
    wanted = list(columns) if columns else SCHEMA.names
    if status and "status" not in wanted:
        wanted = wanted + ["status"]
    if not parts:
        return SCHEMA.empty_table().select(wanted)
    table = pa.concat_tables([pq.read_table(p, columns=wanted, schema=SCHEMA) for p in parts])
    if status:
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table.column("status"), status))
    return table


def states_settings(path: Union[str, os.PathLike]) -> dict:
    """The ``states.json`` of a state folder (ValueError when it is not one)."""
    saved = Path(path) / SETTINGS
    if not saved.is_file():
        raise ValueError(f"{path}: not a state folder (no {SETTINGS}; make one with: bpq corpus states)")
    return read_json_bounded(saved, what="state settings", error=ValueError)


def state_spectra(table: pa.Table, num_probes: int) -> np.ndarray:
    """The ``spectrum`` column as float32 (N, P, 56)."""
    return np.stack([np.frombuffer(b, np.float32).reshape(num_probes, 56) for b in
                     table.column("spectrum").to_pylist()]) if table.num_rows else np.zeros((0, num_probes, 56),
                                                                                             np.float32)


__all__ = ["NO_PASS", "NUM_CLASSES", "next_pass_labels", "draw_prefixes", "replay",
           "measure_states", "build_states", "read_states", "states_settings", "state_spectra", "choose_programs"]


def choose_programs(store: Union[str, os.PathLike], counts: Dict[str, int], *, max_instructions: int = 1000,
                    seed: int = 0) -> List[str]:
    """A seeded random choice of labelled programs: ``counts[split]`` per split among those with at most
    ``max_instructions`` instructions, all splits shuffled together (so a partial build covers every split)."""
    import random

    corpus = Corpus(store)
    table = corpus.modules(["sha256", "instruction_count"])
    sizes = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist()))
    labelled = set(corpus.labels().column("sha256").to_pylist())
    rng = random.Random(seed)
    chosen: List[str] = []
    for split, count in counts.items():
        pool = sorted(s for s in corpus.split(split) if s in labelled and sizes[s] <= max_instructions)
        if count > len(pool):
            raise ValueError(f"{store}: split {split!r} has {len(pool)} labelled programs of <= "
                             f"{max_instructions} instructions, {count} asked")
        chosen += rng.sample(pool, count)
    rng.shuffle(chosen)
    return chosen
