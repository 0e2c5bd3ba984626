"""A learned ranker over pipelines: which of a large pool of pass pipelines to try first on a module.

The pool (:func:`ranker_pool`) is the generic pipelines, the library's coreset, -Oz followed by each catalog pass
(with and without a second -Oz), every library program's best pipeline, and random edits of the coreset. Training
data (:func:`measure_pool_rows`) are the objective's value after every pool pipeline on many train modules: a
matrix of gains ``log(value_Oz / value)``, one row per module, one column per pipeline.

:class:`PipelineRanker` predicts a module's row from a representation of the module (the encoder's embedding, the
raw spectrum, Autophase, or nothing: a global ranking) with one ridge regression per column (the penalty chosen by
grouped cross-validation, groups being the programs' projects), so its last layer is a learned embedding of each
pipeline. To spend a budget it does not take the top-k predictions (near-copies of one another would fill it): it
draws scenarios of the module's gains as the prediction plus the out-of-fold errors of the train modules, and
greedily picks the pipeline that most raises the expected best gain over the scenarios (a coverage function, so
the choice is diverse by construction). With no module input the prediction is the column means and this is the
coreset of the train modules.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import (
    WEIGHTS_LIMIT,
    atomic_path,
    check_encoder,
    check_files,
    check_replaceable,
    check_shapes,
    confined,
    encoder_identity,
    file_checksums,
    read_bounded,
    read_sealed_config,
    safetensors_header,
    seal,
    versions,
)
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.catalog import MEANING_CHANGING, PASSES
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.core.target import Target
from behavioral_pq.embedding.encoder import shipped
from behavioral_pq.errors import BPQError, RankerError
from behavioral_pq.tasks.guidance.coreset import measure_pool, oz_suffixes
from behavioral_pq.tasks.guidance.library import (
    GENERIC,
    OZ,
    ProgramLibrary,
    Steps,
    decode_steps,
    encode_steps,
    mutate_steps,
)
from behavioral_pq.tasks.guidance.trials import OBJECTIVES, check_objective, measure_built_pool

logger = logging.getLogger(__name__)

FORMAT = "behavioral_pq.ranker"
FORMAT_VERSION = 1
DATA_FORMAT = "behavioral_pq.ranker-data"
#: Module representations a ranker reads: the encoder's embedding (D,), the raw spectrum of the encoder's probe set
#: with the module's own log1p Autophase row, flattened ((P + 1) * 56,), log1p Autophase (56,), or none (a global
#: ranking of the pool).
REPRESENTATIONS = ("embedding", "spectrum", "autophase", "none")
#: Gains below this (a pipeline worse than -Oz, or one that failed) count as this: -Oz is always measured, so how
#: much worse a candidate is does not matter, only that it is not chosen.
GAIN_FLOOR = -0.05
RIDGE_GRID = (0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0)
#: The penalty is chosen by the best gain among this many pipelines predicted best (about what a budget of 50
#: gives the ranker's picks before the local search).
CV_TOP = 30
#: Scenarios drawn for the greedy choice (out-of-fold error rows of the train modules).
SCENARIOS = 512
#: Outcome-conditioned choice (:func:`outcome_weights`): kernel bandwidth on the mean squared gain difference, and
#: the share of uniform weight kept; chosen on the valid modules (BENCHMARKS, "A sequential choice").
OUTCOME_BANDWIDTH = 0.005
OUTCOME_FLOOR = 0.3
#: Every library program's best pipeline kept in the pool, at most.
LIBRARY_BEST = 200
#: Random edits of each coreset pipeline added to the pool.
MUTATIONS_PER_CORESET = 2


def ranker_pool(library: Optional[ProgramLibrary] = None, *, library_best: int = LIBRARY_BEST,
                mutations: int = MUTATIONS_PER_CORESET, seed: int = 0) -> List[Steps]:
    """The candidate pipelines a ranker scores, first seen first: the generic pipelines, ``library``'s coreset,
    -Oz followed by each catalog pass (and by it and -Oz again), up to ``library_best`` of the library programs'
    best pipelines that beat -Oz (largest gain first), and ``mutations`` random edits of each coreset pipeline."""
    pool: Dict[Steps, None] = dict.fromkeys(GENERIC)
    coreset = list(library.coreset) if library is not None else []
    pool.update(dict.fromkeys(coreset))
    pool.update(dict.fromkeys(oz_suffixes()))
    if library is not None:
        best = []
        for program in library.programs:
            steps, count = program.best()
            if steps != (OZ,) and count < program.oz_count:
                best.append((math.log(max(program.oz_count, 1) / max(count, 1)), steps))
        best.sort(key=lambda gs: -gs[0])
        added = 0
        for _, steps in best:
            if added >= library_best:
                break
            if steps not in pool:
                pool[steps] = None
                added += 1
    rng = random.Random(seed)
    for steps in coreset:
        for _ in range(mutations):
            pool.setdefault(mutate_steps(steps, rng))
    pool.pop((OZ,), None)
    return list(pool)


#: The whole-pipeline steps a text-size pool starts from: -Oz, -Os, and -Oz with LLVM's IR outliner.
SIZE_HEADS = ("-Oz", "-Os", "-Oz-outline")
#: The instruction-count ranker's first choices (without module input) that join a text-size pool.
SIZE_POOL_RANKED = 150


def text_size_pool(ranker: Optional["PipelineRanker"] = None, *, ranked: int = SIZE_POOL_RANKED) -> List[Steps]:
    """The candidate pipelines of a text-size ranker: the generic pipelines, -Os, -Oz-outline, each of
    :data:`SIZE_HEADS` followed by one catalog pass, and the first ``ranked`` choices of ``ranker`` (an
    instruction-count ranker; default the shipped one) without module input: what shrinks IR often shrinks code,
    and what the size levels leave undone is one pass away from them."""
    pool: Dict[Steps, None] = dict.fromkeys(GENERIC)
    pool.update(dict.fromkeys((head,) for head in SIZE_HEADS))
    for head in SIZE_HEADS:
        pool.update(dict.fromkeys((head, p.flag) for p in PASSES))
    ranker = ranker if ranker is not None else default_ranker("ir-count")
    pool.update(dict.fromkeys(ranker.choose(None, ranked)))
    pool.pop((OZ,), None)
    return list(pool)


def gains_matrix(oz: np.ndarray, values: np.ndarray) -> np.ndarray:
    """float32 (N, K) gains ``log(oz / value)`` from -Oz's values int (N,) and the pool's float (N, K) (NaN where
    a pipeline failed), floored at :data:`GAIN_FLOOR` (failures too)."""
    oz = np.maximum(np.asarray(oz, np.float64), 1.0)[:, None]
    values = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        gains = np.log(oz / np.maximum(values, 1.0))
    gains[~np.isfinite(gains)] = GAIN_FLOOR
    return np.maximum(gains, GAIN_FLOOR).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------- data

@dataclass
class RankerData:
    """Pool pipelines measured on modules: ``values`` float64 (N, K) of the objective after each of ``pool``'s K
    pipelines (NaN where one failed), ``oz`` int64 (N,) after -Oz, for the modules ``shas`` (N,). ``left_out``:
    the passes the measurements left out of every pipeline (:data:`~behavioral_pq.core.catalog.MEANING_CHANGING`,
    as searches run them; empty for folders written before that, whose cells for pipelines holding those passes
    are stale: see :meth:`stale_columns`). ``target``: where the rows were built and counted (None: measure mode
    for ``ir-count``, the default target of a text-size search for ``text-size``)."""

    pool: List[Steps]
    objective: str
    shas: List[str]
    oz: np.ndarray
    values: np.ndarray
    seconds: np.ndarray
    names: Optional[List[str]] = None
    left_out: Tuple[str, ...] = ()
    target: Optional[Target] = None

    def stale_columns(self) -> List[int]:
        """Columns measured with a pass that searches now leave out: on a module the pass changes (exceptions,
        atomics) they credit the pipeline with what the pass did, so they are measured again before use."""
        return [j for j, steps in enumerate(self.pool)
                if any(step in MEANING_CHANGING and step not in self.left_out for step in steps)]

    @property
    def gains(self) -> np.ndarray:
        return gains_matrix(self.oz, self.values)

    def subset(self, keep: Sequence[str]) -> "RankerData":
        index = {s: i for i, s in enumerate(self.shas)}
        rows = [index[s] for s in keep if s in index]
        return RankerData(self.pool, self.objective, [self.shas[i] for i in rows], self.oz[rows],
                          self.values[rows], self.seconds[rows],
                          [self.names[i] for i in rows] if self.names is not None else None, self.left_out,
                          self.target)


def _data_config(folder: Path) -> Path:
    return folder / "pool.json"


#: What the rows of a new data folder leave out of every pipeline (recorded in its pool.json as ``left_out``).
LEFT_OUT = tuple(sorted(MEANING_CHANGING))


def _left_out(data: dict) -> Tuple[str, ...]:
    return tuple(str(flag) for flag in data.get("left_out") or ())


def open_ranker_data(folder: Union[str, os.PathLike], pool: Optional[Sequence[Steps]] = None,
                     objective: Optional[str] = "ir-count", target: Optional[Target] = None) -> List[Steps]:
    """Create ``folder`` for the rows of ``pool`` built for ``target`` (or check that it holds rows of that pool
    and ``objective``; None: whichever it holds) and return the pool it holds (:func:`data_target` tells the
    target of a folder's rows). With ``pool=None`` the folder must exist. A new folder
    records that its rows leave :data:`LEFT_OUT` out of every pipeline (:func:`measure_pool_rows` adds no rows to a
    folder written before, whose rows hold them: it measures them into a new folder, given the old as ``known``)."""
    folder = Path(folder)
    config = _data_config(folder)
    if config.exists():
        data = _read_data_config(folder)
        held = [decode_steps(s) for s in data["pool"]]
        if pool is not None and [tuple(s) for s in pool] != held:
            raise RankerError(f"{folder}: holds rows of another pool ({len(held)} pipelines); use a new folder")
        if objective is not None and data.get("objective") != objective:
            raise RankerError(f"{folder}: holds {data.get('objective')} rows, not {objective}")
        return held
    if pool is None:
        raise RankerError(f"{folder}: no ranker training data (pool.json missing)")
    check_objective(objective or "")
    folder.mkdir(parents=True, exist_ok=True)
    body = {"format": DATA_FORMAT, "format_version": FORMAT_VERSION, "objective": objective,
            "target": None if target is None else target.to_dict(),
            "pool": [encode_steps(s) for s in pool], "left_out": list(LEFT_OUT), "versions": versions()}
    with atomic_path(config) as tmp:
        tmp.write_text(json.dumps(seal(body), separators=(",", ":")) + "\n")
    return list(pool)


def _read_data_config(folder: Path) -> dict:
    return read_sealed_config(_data_config(Path(folder)), format=DATA_FORMAT, version=FORMAT_VERSION,
                              error=RankerError, what="ranker training data")


def data_objective(folder: Union[str, os.PathLike]) -> str:
    """The objective whose rows ``folder`` holds."""
    return check_objective(str(_read_data_config(Path(folder)).get("objective")))


def data_target(folder: Union[str, os.PathLike]) -> Optional[Target]:
    """The target ``folder``'s rows were built for (None: measure mode, or for text-size rows the text-size
    search's default target; folders written before rows recorded a target hold such rows)."""
    held = _read_data_config(Path(folder)).get("target")
    if held is None:
        return None
    if not isinstance(held, dict) or not all(isinstance(held.get(k, ""), str) for k in ("triple", "cpu",
                                                                                          "features", "size")):
        raise RankerError(f"{folder}: its target is not a triple, CPU, features and size: {held!r}")
    try:
        return Target(held.get("triple", ""), held.get("cpu", "generic"), held.get("features", ""),
                      held.get("size", ""))
    except ValueError as exc:
        raise RankerError(f"{folder}: {exc}") from exc


def load_ranker_data(folder: Union[str, os.PathLike], objective: Optional[str] = "ir-count") -> RankerData:
    """Every row written to ``folder`` by :func:`measure_pool_rows` (chunks ``rows-*.npz``); ``objective``: the
    one the rows must be of (None: whichever they are of)."""
    folder = Path(folder)
    pool = open_ranker_data(folder, None, objective)
    config = _read_data_config(folder)
    objective = objective or check_objective(str(config.get("objective")))
    left_out = _left_out(config)
    target = data_target(folder)
    shas: List[str] = []
    names: List[str] = []
    oz, values, seconds = [], [], []
    for chunk in sorted(folder.glob("rows-*.npz")):
        if not chunk.is_file() or chunk.is_symlink():
            raise RankerError(f"{chunk}: not a regular file")
        with np.load(chunk, allow_pickle=False) as data:
            v = np.asarray(data["values"], np.float64)
            if v.ndim != 2 or v.shape[1] != len(pool):
                raise RankerError(f"{chunk}: rows of {v.shape[-1]} pipelines, the pool has {len(pool)}")
            shas += [str(s) for s in data["shas"]]
            names += [str(s) for s in data["names"]] if "names" in data.files else [""] * len(v)
            oz.append(np.asarray(data["oz"], np.int64))
            values.append(v)
            seconds.append(np.asarray(data["seconds"], np.float64))
    if not shas:
        return RankerData(pool, objective, [], np.zeros(0, np.int64), np.zeros((0, len(pool))), np.zeros(0),
                          left_out=left_out, target=target)
    return RankerData(pool, objective, shas, np.concatenate(oz), np.concatenate(values), np.concatenate(seconds),
                      names, left_out, target)


def _where(target: Optional[Target]) -> str:
    return "in measure mode (or for text size's default target)" if target is None else f"for {target}"


def measure_pool_rows(modules: Iterable, folder: Union[str, os.PathLike], pool: Sequence[Steps], *, engine=None,
                      objective: str = "ir-count", target: Optional[Target] = None, chunk: int = 16,
                      progress: bool = False, total: Optional[int] = None, known: Optional[RankerData] = None
                      ) -> Tuple[int, List[dict]]:
    """Measure every pipeline of ``pool`` on each module and append the rows to ``folder`` in chunks of ``chunk``
    modules; modules already there are skipped, so a killed run resumes. ``objective``: ``ir-count`` (IR
    instructions: in measure mode, or with ``target`` each pipeline built for it as a search for that target
    builds its candidates) or ``text-size`` (.text bytes, each pipeline compiled for ``target`` as a text-size
    search compiles it; default target: the host's triple with each function's own CPU); see
    :func:`~behavioral_pq.tasks.guidance.trials.measure_built_pool`. A folder keeps the rows of one target
    (RankerError for another). ``known``: rows measured before (of another pool, or of the
    same one): their values are copied, and only the pipelines of ``pool`` they lack, or hold stale
    (:meth:`RankerData.stale_columns`: measured before searches left :data:`LEFT_OUT` out), are measured on their
    modules. A folder of stale rows takes no more rows (RankerError): give it as ``known`` to a new folder.

    Returns (rows written, failures): a module whose -Oz fails is a failure (``{"program", "error"}``), a pipeline
    that fails is NaN in its row.
    """
    from tqdm import tqdm

    check_objective(objective)
    engine = engine or default_engine()
    folder = Path(folder)
    pool = open_ranker_data(folder, pool, objective, target)
    held = load_ranker_data(folder, objective)
    if held.target != target:
        raise RankerError(f"{folder}: holds rows built {_where(held.target)}, not {_where(target)}; use a new folder")
    if objective == "text-size" and target is None:
        target = Target.module_cpus()
    if held.stale_columns():
        raise RankerError(f"{folder}: its rows were measured with {' and '.join(LEFT_OUT)} in "
                          f"{len(held.stale_columns())} pipelines, which searches now leave out; measure into a new "
                          f"folder from this one (bpq ranker measure STORE --from {folder} --out NEW)")
    done = set(held.shas)
    written, failures = 0, []
    rows: Dict[str, list] = {"shas": [], "names": [], "oz": [], "values": [], "seconds": []}
    known_rows = {sha: i for i, sha in enumerate(known.shas)} if known is not None else {}
    stale = set(known.stale_columns()) if known is not None else set()
    known_columns = {steps: j for j, steps in enumerate(known.pool) if j not in stale} if known is not None else {}
    missing = [steps for steps in pool if steps not in known_columns]

    def flush():
        nonlocal written
        if not rows["shas"]:
            return
        name = folder / f"rows-{time.time_ns():x}-{os.getpid()}.npz"
        with atomic_path(name) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, shas=np.array(rows["shas"]), names=np.array(rows["names"], dtype=str),
                         oz=np.array(rows["oz"], np.int64),
                         values=np.array(rows["values"], np.float64), seconds=np.array(rows["seconds"]))
        written += len(rows["shas"])
        for v in rows.values():
            v.clear()

    for module in tqdm(modules, disable=not progress, total=total, desc="pool", unit="module"):
        if module.sha256 in done:
            continue
        started = time.perf_counter()
        row = known_rows.get(module.sha256)
        try:
            wanted = pool if row is None else missing
            oz, counts = (measure_pool(module, wanted, engine) if target is None
                          else measure_built_pool(module, wanted, engine, target, objective))
        except BPQError as exc:
            failures.append({"program": module.sha256, "error": f"{type(exc).__name__}: {exc}"})
            continue
        values = [np.nan if c is None else float(c) for c in counts]
        seconds = time.perf_counter() - started
        if row is not None:
            new = dict(zip(missing, values))
            values = [known.values[row, known_columns[s]] if s in known_columns else new[s] for s in pool]
            seconds += float(known.seconds[row])
        rows["shas"].append(module.sha256)
        rows["names"].append(str(module.name))
        rows["oz"].append(int(oz))
        rows["values"].append(values)
        rows["seconds"].append(seconds)
        done.add(module.sha256)
        if len(rows["shas"]) >= chunk:
            flush()
    flush()
    return written, failures


# ------------------------------------------------------------------------------------------------ representation

def representation_rows(representation: str, *, spectra: Optional[np.ndarray] = None,
                        autophase: Optional[np.ndarray] = None, embeddings: Optional[np.ndarray] = None
                        ) -> np.ndarray:
    """The ranker's input rows float32 (N, D) for ``representation``: ``embeddings`` (N, D); ``spectra``
    log-relative (N, P, 56) with the modules' own ``autophase`` (N, 56) as one more row, flattened; log1p
    ``autophase``; or (N, 0) for ``none`` (N from whichever array is given)."""
    if representation not in REPRESENTATIONS:
        raise ValueError(f"representation must be one of {', '.join(REPRESENTATIONS)}, got {representation!r}")
    if representation == "embedding":
        if embeddings is None:
            raise ValueError("the embedding representation needs embeddings")
        return np.asarray(embeddings, np.float32)
    if representation in ("spectrum", "autophase") and autophase is None:
        raise ValueError(f"the {representation} representation needs the modules' Autophase rows")
    if autophase is not None:
        base = np.log1p(np.maximum(np.asarray(autophase, np.float64), 0.0)).astype(np.float32)
        if base.ndim != 2 or base.shape[1] != len(AUTOPHASE_FEATURES):
            raise ValueError(f"Autophase rows must be (N, {len(AUTOPHASE_FEATURES)}), got {base.shape}")
    if representation == "autophase":
        return base
    if representation == "spectrum":
        if spectra is None:
            raise ValueError("the spectrum representation needs spectra")
        spectra = np.asarray(spectra, np.float32)
        if spectra.ndim != 3 or spectra.shape[0] != len(base) or spectra.shape[2] != len(AUTOPHASE_FEATURES):
            raise ValueError(f"spectra must be (N, P, 56) for N = {len(base)}, got {spectra.shape}")
        return np.concatenate([spectra.reshape(len(spectra), -1), base], axis=1)
    n = next(len(a) for a in (spectra, autophase, embeddings) if a is not None) if any(
        a is not None for a in (spectra, autophase, embeddings)) else 0
    return np.zeros((n, 0), np.float32)


def ranker_identity(representation: str, encoder) -> dict:
    """What a ranker's input rows depend on: the encoder (embedding), its probe set (spectrum), or nothing."""
    if representation == "embedding":
        return encoder_identity(encoder)
    if representation == "spectrum":
        return {"probe_set_hash": encoder.probe_set.hash}
    return {}


def check_ranker(ranker, encoder) -> None:
    """Refuse a ranker whose inputs ``encoder`` does not make: fitted on another encoder's embeddings, or on the
    spectra of another probe set.

    Raises:
        RankerError: the mismatch, naming what the ranker was fitted on.
    """
    where = ranker.path or "the ranker"
    if ranker.representation == "embedding":
        check_encoder(where, ranker.identity, encoder, RankerError, "give the encoder it was fitted on, or fit it "
                      "again", verb="fitted")
    elif ranker.representation == "spectrum":
        wanted = ranker.identity.get("probe_set_hash")
        if wanted != encoder.probe_set.hash:
            raise RankerError(f"{where}: fitted on the spectra of probe set {str(wanted)[:12]}, the encoder measures "
                              f"probe set {encoder.probe_set.hash[:12]}; give an encoder on that probe set, or fit it "
                              "again")


# --------------------------------------------------------------------------------------------------------- model

def outcome_weights(scenarios: np.ndarray, outcomes: np.ndarray, *, bandwidth: float = OUTCOME_BANDWIDTH,
                    floor: float = OUTCOME_FLOOR) -> np.ndarray:
    """Weights float64 (S,) of scenarios float (S, m) given a module's measured gains ``outcomes`` float (m,) on
    the same m pipelines: a Gaussian kernel of ``bandwidth`` on the mean squared difference (scenarios that
    reacted to those pipelines as the module did weigh most), mixed with ``floor`` of uniform weight so that no
    scenario is ever ruled out. No outcomes (m = 0): uniform weights."""
    scenarios = np.asarray(scenarios, np.float64)
    outcomes = np.asarray(outcomes, np.float64).reshape(-1)
    if scenarios.ndim != 2 or scenarios.shape[1] != len(outcomes):
        raise ValueError(f"scenarios {scenarios.shape} and outcomes {outcomes.shape} disagree")
    if not bandwidth > 0 or not 0.0 <= floor <= 1.0:
        raise ValueError(f"need bandwidth > 0 and floor in [0, 1], got {bandwidth} and {floor}")
    uniform = np.full(len(scenarios), 1.0 / max(len(scenarios), 1))
    if len(outcomes) == 0 or len(scenarios) == 0:
        return uniform
    distance = ((scenarios - outcomes[None, :]) ** 2).mean(axis=1)
    kernel = np.exp(-(distance - distance.min()) / (2.0 * bandwidth * bandwidth))
    return (1.0 - floor) * kernel / kernel.sum() + floor * uniform


def coverage_choice(predicted: np.ndarray, residuals: np.ndarray, count: int, *, taken: Optional[np.ndarray] = None,
                    found: Optional[np.ndarray] = None, weights: Optional[np.ndarray] = None) -> List[int]:
    """``count`` column indices chosen from predicted gains float (K,): each the one that most raises the expected
    best gain (floored at 0, -Oz) over the scenarios ``predicted + residuals`` (residuals float (S, K), errors on
    modules the predictor did not train on); once none raises it, the rest by predicted gain. ``taken`` bool (K,):
    columns not to choose; ``found`` bool (K,): columns measured already, whose gains count as found; ``weights``
    float (S,): the scenarios' weights in the expectation and in the order of the rest (their weighted mean gain
    instead of ``predicted``; default: equal weights; see :func:`outcome_weights`)."""
    predicted = np.asarray(predicted, np.float32)
    scenarios = predicted[None, :] + np.asarray(residuals, np.float32)                 # (S, K)
    best = np.zeros(len(scenarios), np.float32)
    taken = np.zeros(len(predicted), bool) if taken is None else np.array(taken, bool)
    if weights is not None:
        weights = np.asarray(weights, np.float64).reshape(-1)
        if weights.shape != (len(scenarios),) or not np.isfinite(weights).all() or weights.sum() <= 0:
            raise ValueError(f"weights must be {len(scenarios)} finite values with a positive sum")
        weights = (weights / weights.sum()).astype(np.float32)
    if found is not None and np.any(found):
        best = np.maximum(best, scenarios[:, np.asarray(found, bool)].max(axis=1))
    chosen: List[int] = []
    while len(chosen) < count and not taken.all():
        excess = np.maximum(scenarios - best[:, None], 0.0)
        raise_by = excess.mean(axis=0) if weights is None else weights @ excess
        raise_by[taken] = -1.0
        i = int(raise_by.argmax())
        if raise_by[i] <= 0.0:
            break
        chosen.append(i)
        taken[i] = True
        best = np.maximum(best, scenarios[:, i])
    if len(chosen) < count:
        order = predicted if weights is None else weights @ scenarios
        chosen += [int(i) for i in np.argsort(-order, kind="stable") if not taken[i]][:count - len(chosen)]
    return chosen


class PipelineRanker:
    """Predicted gains of a pool of pipelines on a module, and a diverse choice of the ones to try.

    Attributes:
        pool: the K pipelines scored.
        representation: what it reads of a module (:data:`REPRESENTATIONS`).
        objective: what its gains are of (``ir-count``: IR instructions; ``text-size``: .text bytes; see
            :data:`~behavioral_pq.tasks.guidance.trials.OBJECTIVES`).
        mean, scale: float32 (D,) standardization of the input rows.
        weights: float32 (D, K); bias float32 (K,): predicted gains = standardized row @ weights + bias.
        residuals: float32 (S, K): out-of-fold errors of train modules (the scenarios of :meth:`choose`).
        alpha: the ridge penalty chosen.
        identity: what the input rows depend on (the encoder's identity for embeddings, the probe-set hash for
            spectra), checked by the caller.
    """

    def __init__(self, pool: Sequence[Steps], representation: str, mean: np.ndarray, scale: np.ndarray,
                 weights: np.ndarray, bias: np.ndarray, residuals: np.ndarray, *, alpha: float = 0.0,
                 identity: Optional[dict] = None, training: Optional[dict] = None, objective: str = "ir-count"):
        if representation not in REPRESENTATIONS:
            raise RankerError(f"unknown representation {representation!r}")
        if objective not in OBJECTIVES:
            raise RankerError(f"unknown objective {objective!r}")
        self.objective = objective
        k = len(pool)
        d = len(mean)
        if weights.shape != (d, k) or bias.shape != (k,) or scale.shape != (d,) or residuals.ndim != 2 \
                or residuals.shape[1] != k:
            raise RankerError(f"ranker arrays do not fit a pool of {k} and inputs of {d}: weights {weights.shape}, "
                              f"bias {bias.shape}, residuals {residuals.shape}")
        self.pool = [tuple(s) for s in pool]
        self.representation = representation
        self.mean, self.scale = mean.astype(np.float32), scale.astype(np.float32)
        self.weights, self.bias = weights.astype(np.float32), bias.astype(np.float32)
        self.residuals = residuals.astype(np.float32)
        self.alpha = float(alpha)
        self.identity = identity or {}
        self.training = training or {}
        self.path: Optional[Path] = None

    @property
    def dim(self) -> int:
        return len(self.mean)

    @classmethod
    def fit(cls, rows: np.ndarray, gains: np.ndarray, pool: Sequence[Steps], representation: str, *,
            groups: Optional[Sequence] = None, folds: int = 3, grid: Sequence[float] = RIDGE_GRID,
            identity: Optional[dict] = None, seed: int = 0, objective: str = "ir-count") -> "PipelineRanker":
        """Fit on input rows float (N, D) and gains float (N, K) (:func:`gains_matrix`), choosing the ridge
        penalty by ``folds``-fold cross-validation over ``groups`` (default: one group per row), the score being
        the mean over held-out rows of the best gain (at least 0: -Oz) among the :data:`CV_TOP` pipelines
        predicted best."""
        from sklearn.linear_model import Ridge
        from sklearn.model_selection import GroupKFold

        x = np.asarray(rows, np.float64)
        y = np.asarray(gains, np.float64)
        if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or y.shape[1] != len(pool):
            raise RankerError(f"need rows (N, D) and gains (N, {len(pool)}), got {x.shape} and {y.shape}")
        if len(x) < 2:
            raise RankerError(f"need at least 2 measured modules to fit a ranker, got {len(x)}")
        groups = np.arange(len(x)) if groups is None else np.asarray(groups)
        folds = max(2, min(folds, len(set(groups.tolist()))))
        mean = x.mean(axis=0) if x.shape[1] else np.zeros(0)
        scale = x.std(axis=0) if x.shape[1] else np.zeros(0)
        scale = np.where(scale > 1e-8, scale, 1.0)
        z = (x - mean) / scale
        splits = list(GroupKFold(n_splits=folds).split(z, groups=groups))

        def predict_oof(alpha: float) -> np.ndarray:
            out = np.zeros_like(y)
            for train, held in splits:
                if z.shape[1]:
                    model = Ridge(alpha=alpha).fit(z[train], y[train])
                    out[held] = model.predict(z[held])
                else:
                    out[held] = y[train].mean(axis=0)
            return out

        best_alpha, best_score, best_oof = 0.0, -np.inf, None
        for alpha in (grid if z.shape[1] else (0.0,)):
            oof = predict_oof(alpha)
            top = np.argsort(-oof, axis=1)[:, :CV_TOP]
            score = float(np.mean(np.maximum(np.take_along_axis(y, top, axis=1).max(axis=1), 0.0)))
            if score > best_score + 1e-12:
                best_alpha, best_score, best_oof = alpha, score, oof
        if z.shape[1]:
            model = Ridge(alpha=best_alpha).fit(z, y)
            weights, bias = model.coef_.T, model.intercept_
        else:
            weights, bias = np.zeros((0, y.shape[1])), y.mean(axis=0)
        residuals = y - best_oof
        rng = np.random.default_rng(seed)
        if len(residuals) > SCENARIOS:
            residuals = residuals[np.sort(rng.choice(len(residuals), SCENARIOS, replace=False))]
        training = {"modules": int(len(x)), "folds": folds, "alpha": best_alpha,
                    "cv_gain": best_score, "cv_top": CV_TOP, "seed": seed}
        return cls(pool, representation, mean.astype(np.float32), scale.astype(np.float32),
                   np.asarray(weights, np.float32), np.asarray(bias, np.float32), residuals.astype(np.float32),
                   alpha=best_alpha, identity=identity, training=training, objective=objective)

    def scores(self, row: Optional[np.ndarray]) -> np.ndarray:
        """Predicted gains float32 (K,) for one input row float (D,) (None: the column means, as with no module
        input)."""
        if row is None or self.dim == 0:
            return self.bias.copy()
        row = np.asarray(row, np.float32).reshape(-1)
        if row.shape != (self.dim,):
            raise ValueError(f"this ranker reads rows of {self.dim} values ({self.representation}), got {row.shape}")
        if not np.isfinite(row).all():
            raise ValueError("the module's row holds non-finite values")
        scores = ((row - self.mean) / self.scale) @ self.weights + self.bias
        if not np.isfinite(scores).all():
            raise ValueError("the ranker's scores for this module's row are not finite (a row far outside what it was "
                             "fitted on)")
        return scores

    def choose(self, row: Optional[np.ndarray], count: int, *, exclude: Iterable[Steps] = (),
               measured: Iterable[Steps] = (), outcomes: Optional[Mapping[Steps, float]] = None) -> List[Steps]:
        """``count`` pool pipelines to try on the module of ``row``, in order: each the one that most raises the
        expected best gain (floored at 0, -Oz being always measured) over scenarios ``scores + residuals``.
        Pipelines in ``exclude`` are not chosen; those in ``measured`` (tried on the module already, such as a
        text-size search's -Os and Oz-outline) are not chosen either, and what they gain counts as found, so the
        choice complements them. Once no pipeline raises the expectation, the rest follow by predicted gain.

        ``outcomes``: the module's measured gains (log of -Oz's value over the pipeline's) of pool pipelines tried
        already. They count as measured, and they weigh the scenarios (:func:`outcome_weights`): the choice leans
        to what helped the modules that reacted to those pipelines as this one did. Called after each round of
        measurements, this makes the search sequential (see ``recommend_pipeline``)."""
        predicted = self.scores(row)
        excluded = {tuple(s) for s in exclude}
        done = {tuple(s) for s in measured}
        weights = None
        if outcomes:
            column = {s: j for j, s in enumerate(self.pool)}
            known = [(column[tuple(s)], float(g)) for s, g in outcomes.items()
                     if tuple(s) in column and g is not None and np.isfinite(g)]
            done |= {self.pool[j] for j, _ in known}
            if known:
                cols = np.array([j for j, _ in known])
                scenarios = predicted[None, cols] + self.residuals[:, cols]
                weights = outcome_weights(scenarios, np.array([g for _, g in known]))
        chosen = coverage_choice(predicted, self.residuals, count,
                                 taken=np.array([s in excluded or s in done for s in self.pool], bool),
                                 found=np.array([s in done for s in self.pool], bool), weights=weights)
        return [self.pool[i] for i in chosen]

    # ------------------------------------------------------------------------------------------------- storage

    def save(self, path: Union[str, os.PathLike], *, overwrite: bool = False) -> Path:
        """Write ``ranker.json`` and ``ranker.safetensors`` into the folder ``path``, replacing it once complete."""
        from safetensors.numpy import save_file

        check_replaceable(path, config="ranker.json", format=FORMAT, overwrite=overwrite, error=RankerError,
                          what="a pipeline ranker")
        path = Path(path)
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(),
                  "representation": self.representation, "objective": self.objective, "alpha": self.alpha,
                  "identity": self.identity,
                  "training": self.training, "pool": [encode_steps(s) for s in self.pool],
                  "dim": self.dim, "scenarios": int(len(self.residuals))}
        with atomic_path(path) as tmp:
            tmp.mkdir()
            save_file({"mean": self.mean, "scale": self.scale, "weights": self.weights, "bias": self.bias,
                       "residuals": self.residuals}, str(tmp / "ranker.safetensors"))
            config["files"] = file_checksums(tmp, ["ranker.safetensors"])
            (tmp / "ranker.json").write_text(json.dumps(seal(config), separators=(",", ":")) + "\n")
        self.path = path
        return path


#: The smallest input scale a ranker may hold (:meth:`PipelineRanker.fit` sets a constant input's scale to 1 and
#: keeps others from 1e-8, which float32 may round just below it) and the largest weight, bias or residual: gains
#: are logarithms of size ratios, a few units at most, so a ridge fit's coefficients stay far below it.
MIN_SCALE = 5e-9
MAX_COEFFICIENT = 1e12


def load_ranker(path: Union[str, os.PathLike]) -> PipelineRanker:
    """Read a ranker folder written by :meth:`PipelineRanker.save`, checking its seal, checksums and shapes."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as load_tensors

    path = Path(path)
    if not path.is_dir():
        raise RankerError(f"{path}: no such ranker folder")
    config = read_sealed_config(path / "ranker.json", format=FORMAT, version=FORMAT_VERSION, error=RankerError,
                                what="a pipeline ranker")
    check_files(path, config, RankerError)
    try:
        pool = [decode_steps(s) for s in config["pool"]]
        dim, scenarios = int(config["dim"]), int(config["scenarios"])
        representation = str(config["representation"])
        objective = str(config.get("objective", "ir-count"))      # rankers written before text size counted IR
    except (KeyError, TypeError, ValueError) as exc:
        raise RankerError(f"{path}: ranker.json lacks or mangles a field ({exc})") from None
    weights = confined(path, "ranker.safetensors", RankerError)
    data = read_bounded(weights, limit=WEIGHTS_LIMIT, what="ranker weights", error=RankerError)
    header = safetensors_header(data, origin=weights, error=RankerError)
    k = len(pool)
    check_shapes({"mean": (dim,), "scale": (dim,), "weights": (dim, k), "bias": (k,), "residuals": (scenarios, k)},
                 header, origin=weights, error=RankerError)
    try:
        tensors = load_tensors(data)
    except SafetensorError as exc:
        raise RankerError(f"{weights}: not readable ({exc})") from None
    if not all(np.isfinite(v).all() for v in tensors.values()):
        raise RankerError(f"{weights}: non-finite values")
    if tensors["scale"].size and tensors["scale"].min() < MIN_SCALE:
        raise RankerError(f"{weights}: scale holds {tensors['scale'].min():g}, below the {MIN_SCALE:g} fitting gives "
                          "(inputs would be divided by zero or blown up)")
    for name in ("weights", "bias", "residuals"):
        if tensors[name].size and np.abs(tensors[name]).max() > MAX_COEFFICIENT:
            raise RankerError(f"{weights}: {name} holds {np.abs(tensors[name]).max():g}, beyond the "
                              f"{MAX_COEFFICIENT:g} a ranker's gains can need (scores would overflow)")
    alpha = config.get("alpha", 0.0)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not np.isfinite(alpha) or alpha < 0:
        raise RankerError(f"{path}: ranker.json's alpha must be a finite number >= 0, got {alpha!r}")
    ranker = PipelineRanker(pool, representation, tensors["mean"], tensors["scale"], tensors["weights"],
                            tensors["bias"], tensors["residuals"], alpha=float(alpha),
                            identity=config.get("identity"), training=config.get("training"), objective=objective)
    ranker.path = path
    return ranker


#: From this many IR instructions a module counts as large: the instruction-count search takes the large
#: modules' ranker (:data:`DEFAULT_RANKERS`). The lower bound of the 5k-50k size bucket the reports use.
LARGE_MODULE = 5000
#: The shipped rankers (``checkpoints/``), by objective: ``(bound, name)`` pairs, a module of ``n`` IR instructions
#: taking the last whose ``bound <= n``. Instruction count: no module input, fitted on the real train projects'
#: modules' rows after :func:`~behavioral_pq.tasks.guidance.build.deepen_pool`; from :data:`LARGE_MODULE` on, the
#: pool deepened once more by deep searches on train modules of 3,000-10,000 instructions (their winners raise
#: large valid modules and cost smaller ones: BENCHMARKS, "Deep searches on large train modules"). Text size:
#: Autophase, its whole programs' rows (built as ``bpq compile --whole-program`` builds them). See
#: ``checkpoints/README.md``.
DEFAULT_RANKERS = {"ir-count": ((0, "ranker-none-real-s0"), (LARGE_MODULE, "ranker-none-large-s0")),
                   "text-size": ((0, "ranker-size-autophase-deep-s0"),)}
_ranker_cache: Dict[str, PipelineRanker] = {}


def default_ranker_name(objective: str = "ir-count", instructions: Optional[int] = None) -> str:
    """The name of the shipped ranker for ``objective`` and a module of ``instructions`` IR instructions (None:
    the smallest modules' ranker)."""
    choices = DEFAULT_RANKERS[check_objective(objective)]
    if instructions is None:
        return choices[0][1]
    return [name for bound, name in choices if instructions >= bound][-1]


def default_ranker(objective: str = "ir-count", instructions: Optional[int] = None) -> Optional[PipelineRanker]:
    """The shipped ranker for ``objective`` and a module of ``instructions`` IR instructions (None: the smallest
    modules' one; see :data:`DEFAULT_RANKERS`), loaded once per process (None where none is shipped)."""
    name = default_ranker_name(objective, instructions)
    if name not in _ranker_cache:
        path = shipped(name)
        if not path.is_dir():
            return None
        _ranker_cache[name] = load_ranker(path)
    return _ranker_cache[name]
