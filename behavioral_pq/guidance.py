"""Guiding the pass pipeline (DESIGN.md section 10): a program library and :func:`recommend_pipeline`.

A *pipeline* here is a tuple of steps, each a catalog flag (``"-gvn"``) or ``"-Oz"`` (all of LLVM 19's
``default<Oz>``); :func:`behavioral_pq.catalog.steps_pipeline` turns it into a new-PM string.

- :class:`ProgramLibrary`: training programs' embeddings in a FAISS index and, per program, the instruction counts
  of good pipelines found for it offline (:func:`build_library`: a few generic pipelines, and genetic searches
  from the module as built and from its -Oz output). Saved as a versioned folder; the shipped default is
  ``checkpoints/pqbert-small-s0-library``.
- :func:`recommend_pipeline`: embed a module, rank the pipelines of its nearest library programs by a
  distance-weighted vote of their measured gains over -Oz, try the best within a budget of compilations, spend
  the rest of the budget on a local search around the best found, and return the best. -Oz is the reference: it
  is always compiled (outside the budget), so the answer is never worse than -Oz. With ``learn=True`` the
  result goes back into the library (self-improvement: a better pipeline replaces a program's old target).

The budget counts candidate compilations (one pipeline run on the module); the embedding's probe runs are a
fixed cost reported separately (``Recommendation.probe_compilations``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.catalog import OZ_LIKE_ORDER, PASSES, get_pass, steps_pipeline
from behavioral_pq.errors import BPQError

logger = logging.getLogger(__name__)

FORMAT = "behavioral_pq.library"
FORMAT_VERSION = 1
DEFAULT_NAME = "pqbert-small-s0-library"
OZ = "-Oz"

Steps = Tuple[str, ...]

#: Pipelines measured on every library program: -Oz twice, LLVM's -Oz order written in catalog passes (once and
#: twice), and -Oz followed by that order. On 40 validation modules, best-of(-Oz, each) gave a geomean
#: IC_Oz / IC of 1.006, 1.044, 1.051 and 1.051.
GENERIC: Tuple[Steps, ...] = ((OZ, OZ), OZ_LIKE_ORDER, OZ_LIKE_ORDER * 2, (OZ,) + OZ_LIKE_ORDER)


class LibraryError(BPQError, ValueError):
    """A program library that cannot be used: missing, corrupt, another format, or tied to another encoder."""


def encode_steps(steps: Steps) -> List[Union[int, str]]:
    """Compact JSON form: catalog indices, and "Oz" for the baseline."""
    return ["Oz" if s == OZ else get_pass(s).index for s in steps]


def decode_steps(items: Sequence[Union[int, str]]) -> Steps:
    return tuple(OZ if s == "Oz" else get_pass(int(s)).flag for s in items)


@dataclass
class LibraryProgram:
    """One library program: its hash, name, instruction counts as built and after -Oz, and ``results``: the
    instruction count after each pipeline measured on it."""

    program: str
    name: str
    instruction_count: int
    oz_count: int
    results: Dict[Steps, int] = field(default_factory=dict)

    def best(self) -> Tuple[Steps, int]:
        """The program's target: its best known pipeline (-Oz when nothing beats it)."""
        steps, count = min(self.results.items(), key=lambda kv: (kv[1], len(kv[0])), default=((OZ,), self.oz_count))
        return ((OZ,), self.oz_count) if count >= self.oz_count else (steps, count)

    def gain(self, steps: Steps) -> Optional[float]:
        """log(IC_Oz / IC) of a pipeline on this program, or None when it was not measured here."""
        count = self.results.get(steps)
        if count is None:
            return None
        return math.log(max(self.oz_count, 1) / max(count, 1))


class ProgramLibrary:
    """Programs with good pipelines, indexed by embedding (FAISS, L2 on standardized embeddings).

    Attributes:
        programs: list of :class:`LibraryProgram`.
        embeddings: float32 (N, D), row i for programs[i].
        encoder: identity of the encoder the embeddings come from (weights sha256, probe-set hash).
        revision: bumped whenever the library learns something (see :meth:`learn`).
    """

    def __init__(self, programs: List[LibraryProgram], embeddings: np.ndarray, encoder: dict, *,
                 settings: Optional[dict] = None, revision: int = 0, mean: Optional[np.ndarray] = None,
                 scale: Optional[np.ndarray] = None):
        embeddings = np.asarray(embeddings, np.float32)
        if embeddings.ndim != 2 or len(embeddings) != len(programs):
            raise LibraryError(f"need one embedding row per program: {embeddings.shape} for {len(programs)}")
        if not programs:
            raise LibraryError("a program library needs at least one program")
        self.programs = programs
        self.embeddings = embeddings
        self.encoder = dict(encoder)
        self.settings = dict(settings or {})
        self.revision = revision
        self.mean = embeddings.mean(0) if mean is None else np.asarray(mean, np.float32)
        self.scale = (embeddings.std(0) + 1e-6) if scale is None else np.asarray(scale, np.float32)
        self._by_program = {p.program: i for i, p in enumerate(programs)}
        self._index = None
        self.path: Optional[Path] = None  # the folder it was loaded from or saved to

    def __len__(self) -> int:
        return len(self.programs)

    def __repr__(self) -> str:
        return f"ProgramLibrary({len(self)} programs, D={self.dim}, revision {self.revision})"

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    def _standardized(self, X: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray((np.asarray(X, np.float32) - self.mean) / self.scale, dtype=np.float32)

    @property
    def index(self):
        """The FAISS index over the standardized embeddings (built on first use)."""
        if self._index is None:
            import faiss

            self._index = faiss.IndexFlatL2(self.dim)
            self._index.add(self._standardized(self.embeddings))
        return self._index

    def neighbors(self, embedding: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest programs of one embedding float32 (D,): (indices int64 (k,), squared distances)."""
        embedding = np.asarray(embedding, np.float32).reshape(1, -1)
        if embedding.shape[1] != self.dim:
            raise LibraryError(f"embedding has {embedding.shape[1]} dimensions, the library {self.dim}")
        distances, indices = self.index.search(self._standardized(embedding), min(k, len(self)))
        keep = indices[0] >= 0
        return indices[0][keep].astype(np.int64), distances[0][keep]

    def candidates(self, neighbors: Sequence[int]) -> List[Tuple[Steps, float]]:
        """Pipelines of the given programs (nearest first), ranked by a rank-weighted vote of their gains.

        A pipeline's score is ``sum_j w_j * gain_j`` over the neighbors j it was measured on, with
        ``w_j = 1 / (rank_j + 1)`` and ``gain_j = log(IC_Oz / IC)`` on j. -Oz alone is left out (it is the
        reference). Returns (pipeline, score), best first; ties keep the order of first appearance.
        """
        scores: Dict[Steps, float] = {}
        for rank, j in enumerate(neighbors):
            program = self.programs[int(j)]
            for steps in program.results:
                if steps == (OZ,):
                    continue
                scores[steps] = scores.get(steps, 0.0) + program.gain(steps) / (rank + 1)
        return sorted(scores.items(), key=lambda kv: -kv[1])

    def learn(self, program: str, embedding: np.ndarray, results: Dict[Steps, int], *, name: str = "module",
              instruction_count: int = 0, oz_count: int = 0, keep: int = 8) -> bool:
        """Take in what a search measured on a program (self-improvement).

        A known program merges the results; an unknown one is added with its embedding. The generic pipelines
        and the ``keep`` best others are kept. Returns True when the program's target (best pipeline) improved
        or the program is new; the revision then goes up.
        """
        i = self._by_program.get(program)
        if i is None:
            entry = LibraryProgram(program, name, int(instruction_count), int(oz_count), {})
            _merge(entry, results, keep)
            self.programs.append(entry)
            self._by_program[program] = len(self.programs) - 1
            row = np.asarray(embedding, np.float32).reshape(1, -1)
            self.embeddings = np.concatenate([self.embeddings, row])
            if self._index is not None:
                self._index.add(self._standardized(row))
            self.revision += 1
            return True
        entry = self.programs[i]
        before = entry.best()[1]
        _merge(entry, results, keep)
        improved = entry.best()[1] < before
        if improved:
            self.revision += 1
        return improved

    # -- storage -------------------------------------------------------------------------------------------------

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write the library folder (``library.json`` + ``index.faiss``), replacing ``path`` once complete."""
        import faiss

        from behavioral_pq.checkpoint import seal, versions
        from behavioral_pq.predictors import file_checksums

        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        pipelines: Dict[Steps, int] = {}
        programs = []
        for p in self.programs:
            results = [[pipelines.setdefault(s, len(pipelines)), int(c)] for s, c in p.results.items()]
            programs.append({"program": p.program, "name": p.name, "instruction_count": p.instruction_count,
                             "oz_count": p.oz_count, "results": results})
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "revision": self.revision,
                  "versions": versions(), "encoder": self.encoder, "settings": self.settings,
                  "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                  "pipelines": [encode_steps(s) for s in pipelines], "programs": programs}
        faiss.write_index(self._raw_index(), str(tmp / "index.faiss"))
        config["files"] = file_checksums(tmp, ["index.faiss"])
        (tmp / "library.json").write_text(json.dumps(seal(config), separators=(",", ":")) + "\n")
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        self.path = path
        return path

    def _raw_index(self):
        """An index of the raw embeddings (what is saved; standardization is in library.json)."""
        import faiss

        index = faiss.IndexFlatL2(self.dim)
        index.add(np.ascontiguousarray(self.embeddings))
        return index


def _merge(entry: LibraryProgram, results: Dict[Steps, int], keep: int) -> None:
    for steps, count in results.items():
        count = int(count)
        if steps == (OZ,):
            entry.oz_count = count
        else:
            entry.results[steps] = min(count, entry.results.get(steps, count))
    generic = {s: c for s, c in entry.results.items() if s in GENERIC}
    others = sorted(((s, c) for s, c in entry.results.items() if s not in GENERIC), key=lambda kv: (kv[1], len(kv[0])))
    entry.results = {**generic, **dict(others[:keep])}


def load_library(path: Union[str, os.PathLike, None] = None, *, encoder=None) -> ProgramLibrary:
    """Load a library folder (default: the shipped one), checking that it belongs to ``encoder`` (default: the
    shipped encoder).

    Raises:
        LibraryError: missing or unreadable folder, another format, or an encoder mismatch.
    """
    import faiss

    from behavioral_pq.encoder import load_encoder, shipped
    from behavioral_pq.predictors import check_encoder, check_files, read_config

    path = Path(shipped(DEFAULT_NAME) if path is None else path)
    config = read_config(path / "library.json", FORMAT, FORMAT_VERSION, LibraryError, "a program library")
    check_files(path, config, LibraryError)
    encoder = encoder or load_encoder()
    wanted = config.get("encoder", {})
    check_encoder(path, wanted, encoder, LibraryError,
                  "rebuild it (bpq library build) or pass the encoder it was built on")
    try:
        pipelines = [decode_steps(s) for s in config["pipelines"]]
        programs = [LibraryProgram(p["program"], p["name"], int(p["instruction_count"]), int(p["oz_count"]),
                                   {pipelines[i]: int(c) for i, c in p["results"]}) for p in config["programs"]]
        index = faiss.read_index(str(path / "index.faiss"))
        embeddings = index.reconstruct_n(0, index.ntotal)
        library = ProgramLibrary(programs, embeddings, wanted, settings=config.get("settings"),
                                 revision=int(config.get("revision", 0)), mean=np.array(config["mean"]),
                                 scale=np.array(config["scale"]))
    except LibraryError as exc:
        raise LibraryError(f"{path}: {exc}") from None
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, BPQError) as exc:
        raise LibraryError(f"{path}: corrupt library ({type(exc).__name__}: {exc})") from None
    if library.dim != encoder.dim:
        raise LibraryError(f"{path}: embeddings have {library.dim} dimensions, the encoder gives {encoder.dim}")
    library.path = path
    return library


# -- measuring candidates within a budget --------------------------------------------------------------------------

class Trials:
    """Candidate pipelines measured on one module, counted against a budget.

    The -Oz reference is measured first and is not counted. Each new candidate costs one compilation; a
    candidate measured before costs nothing; a candidate that fails (crash, timeout, invalid result) costs one
    and scores as unusable. ``history[i]`` is the best instruction count after i + 1 compilations.
    """

    def __init__(self, module, engine, budget: int):
        self.module = module
        self.engine = engine
        self.budget = int(budget)
        self.counts: Dict[Steps, Optional[int]] = {}
        self.origin: Dict[Steps, str] = {}
        self.compilations = 0
        self.history: List[int] = []
        (self.oz_count,), (error,) = self._measure([(OZ,)])
        if error is not None:
            raise error
        self.counts[(OZ,)] = self.oz_count
        self.origin[(OZ,)] = "-Oz"

    @property
    def left(self) -> int:
        return self.budget - self.compilations

    def _measure(self, candidates: List[Steps]) -> Tuple[List[Optional[int]], list]:
        """Instruction counts after each candidate (None where it failed), and the errors."""
        from behavioral_pq.features import AUTOPHASE_FEATURES

        features, _, errors = self.engine.autophase_tree(
            [self.module.bitcode], [-1] * len(candidates), [steps_pipeline(s) for s in candidates],
            names=[self.module.name])
        total = AUTOPHASE_FEATURES.index("TotalInsts")
        return [None if e is not None else int(features[i, total]) for i, e in enumerate(errors)], errors

    def run(self, candidates: Iterable[Steps], origin: str) -> None:
        """Measure the candidates not measured yet, as far as the budget goes (one batched engine call)."""
        new = [s for s in dict.fromkeys(tuple(c) for c in candidates) if s not in self.counts][:max(self.left, 0)]
        if not new:
            return
        for steps, count in zip(new, self._measure(new)[0]):
            self.counts[steps] = count
            self.origin[steps] = origin
            self.compilations += 1
            self.history.append(min(self.best()[1], count if count is not None else self.oz_count))

    def best(self) -> Tuple[Steps, int]:
        """The best measured pipeline (shortest among equals; -Oz unless something is strictly better)."""
        best, count = (OZ,), self.oz_count
        for steps, c in self.counts.items():
            if c is not None and (c < count or c == count and best != (OZ,) and len(steps) < len(best)):
                best, count = steps, c
        return best, count

    def best_at(self, budget: int) -> int:
        """The best instruction count after ``budget`` compilations (-Oz at 0)."""
        return min([self.oz_count] + self.history[:budget])

    def measured(self) -> Dict[Steps, int]:
        return {s: c for s, c in self.counts.items() if c is not None}


@dataclass
class Recommendation:
    """What :func:`recommend_pipeline` (or a baseline search) found for a module.

    Attributes:
        steps: the pipeline, e.g. ``("-Oz", "-instcombine")``; ``pipeline`` its new-PM string.
        instruction_count: measured after the pipeline; ``oz_count`` after -Oz; ``original_count`` as built.
        compilations: candidate compilations spent (the budget counts these; -Oz is compiled besides).
        method: how the pipeline was found ("library", "local search", "random", "greedy" or "-Oz").
        neighbors: names of the library programs consulted (nearest first).
        tried: every candidate measured, in order, with its count (None: it failed).
        first_count: the count of the first candidate (the pure prediction of budget 1), or None.
        seconds: wall time, embedding included.
    """

    steps: Steps
    pipeline: str
    instruction_count: int
    oz_count: int
    original_count: int
    compilations: int
    budget: int
    method: str
    neighbors: List[str] = field(default_factory=list)
    tried: List[Tuple[Steps, Optional[int]]] = field(default_factory=list)
    first_count: Optional[int] = None
    probe_compilations: int = 0
    seconds: float = 0.0

    @property
    def improvement(self) -> float:
        """IC_Oz / IC of the recommended pipeline (>= 1.0; 1.05 means 5% fewer instructions than -Oz)."""
        return max(self.oz_count, 1) / max(self.instruction_count, 1)

    def as_dict(self) -> dict:
        return {"pipeline": self.pipeline, "steps": list(self.steps), "instruction_count": self.instruction_count,
                "oz_count": self.oz_count, "original_count": self.original_count,
                "improvement_over_oz": self.improvement, "method": self.method, "budget": self.budget,
                "compilations": self.compilations, "probe_compilations": self.probe_compilations,
                "neighbors": self.neighbors, "seconds": self.seconds}


def _result(trials: Trials, kind: Optional[str] = None, **extra) -> Recommendation:
    steps, count = trials.best()
    method = "-Oz" if steps == (OZ,) else (kind or trials.origin[steps])
    tried = [(s, c) for s, c in trials.counts.items() if s != (OZ,)]
    return Recommendation(steps, steps_pipeline(steps), count, trials.oz_count, trials.module.instruction_count,
                          trials.compilations, trials.budget, method, tried=tried,
                          first_count=tried[0][1] if tried else None, **extra)


def _mutate(steps: Steps, rng: random.Random, vocabulary: Sequence[str]) -> Steps:
    """One random edit: append, insert or replace a pass (from ``vocabulary`` half the time, else any), or delete one.
    -Oz steps are never removed or replaced."""
    flag = rng.choice(vocabulary) if vocabulary and rng.random() < 0.5 else rng.choice(PASSES).flag
    op = rng.choice(("append", "insert", "replace", "delete"))
    s = list(steps)
    movable = [i for i, x in enumerate(s) if x != OZ]
    if op == "append" or not movable:
        s.append(flag)
    elif op == "insert":
        s.insert(rng.randrange(len(s) + 1), flag)
    elif op == "replace":
        s[rng.choice(movable)] = flag
    elif len(s) > 1:
        del s[rng.choice(movable)]
    return tuple(s)


def _local_search(trials: Trials, start: Steps, rng: random.Random, vocabulary: Sequence[str],
                  batch: int = 4) -> None:
    """Spend what is left of the budget on random edits of the best pipeline so far (``start`` while -Oz leads)."""
    stalls = 0
    while trials.left > 0 and stalls < 50:
        best = trials.best()[0]
        base = start if best == (OZ,) else best
        before = trials.compilations
        trials.run([_mutate(base, rng, vocabulary) for _ in range(min(trials.left, batch))], "local search")
        stalls = stalls + 1 if trials.compilations == before else 0


_library_cache: Dict[str, ProgramLibrary] = {}


def default_library(encoder=None) -> ProgramLibrary:
    """The shipped library (loaded once per process) for ``encoder`` (default: the shipped encoder)."""
    key = "default" if encoder is None else str(getattr(encoder, "path", id(encoder)))
    if key not in _library_cache:
        _library_cache[key] = load_library(encoder=encoder)
    return _library_cache[key]


def recommend_pipeline(module, budget: int = 10, *, library: Optional[ProgramLibrary] = None, encoder=None,
                       engine=None, embedding: Optional[np.ndarray] = None, neighbors: int = 8,
                       retrieval_share: float = 0.5, seed: int = 0, learn: bool = False,
                       neighbor_indices: Optional[Sequence[int]] = None) -> Recommendation:
    """Choose a pass pipeline for ``module`` within ``budget`` candidate compilations.

    Embeds the module, takes the pipelines of its ``neighbors`` nearest library programs ranked by
    :meth:`ProgramLibrary.candidates`, measures the first ``max(1, round(budget * retrieval_share))`` of them
    (all of the budget when it is 1 or 2), and spends the rest on a local search around the best found.
    -Oz is always measured as the reference (not counted), so the result is never worse than -Oz.

    Args:
        module: a Module, or what :func:`load_module` takes (.c/.ll/.bc path or bytes).
        budget: candidate compilations allowed (0: -Oz).
        library: a :class:`ProgramLibrary` (default: the shipped one).
        embedding: the module's embedding float32 (D,), when already known (skips the probes).
        learn: put what was measured into ``library`` (self-improvement; save it with ``library.save``).
        neighbor_indices: consult these library programs instead of the nearest (an ablation).

    Returns:
        a :class:`Recommendation`; ``recommendation.pipeline`` can be given to :func:`optimize`.
    """
    from behavioral_pq.engine import default_engine
    from behavioral_pq.module import load_module

    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    start = time.perf_counter()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    if library is None:
        library = default_library(encoder)
    probe_compilations = 0
    if embedding is None and neighbor_indices is None:
        from behavioral_pq.encoder import load_encoder

        encoder = encoder or load_encoder()
        embedding = encoder.embed(module)
        probe_compilations = encoder.probe_set.num_probes
    if neighbor_indices is None:
        neighbor_indices, _ = library.neighbors(embedding, neighbors)
    ranked = library.candidates(neighbor_indices)
    trials = Trials(module, engine, budget)
    retrieve = budget if budget <= 2 else max(1, int(round(budget * retrieval_share)))
    trials.run([s for s, _ in ranked[:retrieve]], "library")
    vocabulary = sorted({x for s, _ in ranked[:retrieve] for x in s if x != OZ})
    rng = random.Random(f"{seed}:{module.sha256}")
    _local_search(trials, ranked[0][0] if ranked else (OZ,), rng, vocabulary)
    result = _result(trials, neighbors=[library.programs[int(j)].name for j in neighbor_indices],
                     probe_compilations=probe_compilations)
    if learn and embedding is not None:
        library.learn(module.sha256, embedding, trials.measured(), name=module.name,
                      instruction_count=module.instruction_count, oz_count=trials.oz_count)
    result.seconds = time.perf_counter() - start
    return result


def random_search(module, budget: int, *, engine=None, seed: int = 0, max_length: int = 40) -> Recommendation:
    """Baseline: ``budget`` random catalog sequences (lengths uniform in 1..max_length), best of them and -Oz."""
    from behavioral_pq.engine import default_engine
    from behavioral_pq.module import load_module

    start = time.perf_counter()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    rng = random.Random(f"{seed}:{module.sha256}")
    trials = Trials(module, engine, budget)
    while trials.left > 0:
        batch = [tuple(rng.choice(PASSES).flag for _ in range(rng.randint(1, max_length)))
                 for _ in range(min(trials.left, 8))]
        trials.run(batch, "random")
    result = _result(trials)
    result.seconds = time.perf_counter() - start
    return result


def greedy_search(module, budget: int, *, engine=None, seed: int = 0) -> Recommendation:
    """Baseline: first-improvement hill climbing after -Oz. Tries -Oz followed by the current passes and one more
    catalog pass (in a random order), keeps the first that lowers the count, and starts over from there."""
    from behavioral_pq.engine import default_engine
    from behavioral_pq.module import load_module

    start = time.perf_counter()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    rng = random.Random(f"{seed}:{module.sha256}")
    trials = Trials(module, engine, budget)
    current, count = (OZ,), trials.oz_count
    order = [p.flag for p in PASSES]
    rng.shuffle(order)
    while trials.left > 0 and order:  # an empty order: no single pass improves the current pipeline
        candidate = current + (order.pop(),)
        trials.run([candidate], "greedy")
        value = trials.counts.get(candidate)
        if value is not None and value < count:
            current, count = candidate, value
            order = [p.flag for p in PASSES]
            rng.shuffle(order)
    result = _result(trials)
    result.seconds = time.perf_counter() - start
    return result


# -- building a library ------------------------------------------------------------------------------------------

#: The per-program genetic search of :func:`build_library` (two runs: from the module and after -Oz).
LIBRARY_GA = dict(length=30, population=16, generations=8)


def search_program(module, engine, *, ga: Optional[dict] = None, keep: int = 4, seed: int = 0) -> Dict[Steps, int]:
    """Good pipelines for one module: the :data:`GENERIC` ones and -Oz, and the ``keep`` best of two genetic
    searches (catalog sequences from the module as built, and after -Oz). Returns {pipeline: instruction count}."""
    from behavioral_pq.module import Module
    from behavioral_pq.search import FitnessCache, GAConfig, genetic_search

    config = GAConfig(seed=seed, **(ga or LIBRARY_GA))
    trials = Trials(module, engine, len(GENERIC))
    trials.run(GENERIC, "generic")
    results = {(OZ,): trials.oz_count, **trials.measured()}
    after_oz = Module(engine.run_pipeline(module.bitcode, steps_pipeline((OZ,)), name=module.name), name=module.name)
    for prefix, start in (((), module), ((OZ,), after_oz)):
        cache = FitnessCache([start], engine)
        found = genetic_search(cache, config).ranked[:keep]
        counts = cache.counts([seq for seq, _ in found])[:, 0]
        for (seq, _), count in zip(found, counts):
            results[prefix + tuple(PASSES[i].flag for i in seq)] = int(count)
    return results


def build_library(store: Union[str, os.PathLike], out: Union[str, os.PathLike], programs: Sequence[str], *,
                  encoder=None, engine=None, ga: Optional[dict] = None, keep: int = 4, seed: int = 0,
                  progress: bool = False) -> ProgramLibrary:
    """Search good pipelines for the store's ``programs`` (module hashes) and save a library to ``out``.

    Resumable: each program's results go to ``OUT.search.jsonl`` as soon as it is done, and a rerun with the same
    settings skips them. A program that fails is logged there with its error and left out. Embeddings come from
    the store's spectra for the encoder's probe set, or are measured for programs without them.
    """
    from tqdm import tqdm

    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.encoder import load_encoder
    from behavioral_pq.engine import default_engine
    from behavioral_pq.errors import CorpusError
    from behavioral_pq.predictors import encoder_identity

    encoder = encoder or load_encoder()
    engine = engine or default_engine()
    corpus = Corpus(store)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = Path(str(out) + ".search.jsonl")
    settings = {"ga": dict(ga or LIBRARY_GA), "keep": keep, "seed": seed, "generic": len(GENERIC),
                "store": str(Path(store).resolve()), "programs": len(programs)}
    done: Dict[str, dict] = {}
    if log.exists():
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if lines and lines[0].get("settings", {}) | {"programs": 0} != settings | {"programs": 0}:
            raise LibraryError(f"{log}: made with other settings ({lines[0].get('settings')}); remove it to restart")
        done = {row["program"]: row for row in lines[1:]}
    else:
        log.write_text(json.dumps({"settings": settings}) + "\n")
    todo = set(programs) - set(done)
    with log.open("a") as sink, tqdm(total=len(todo), disable=not progress, desc="library", unit="program") as bar:
        for module in corpus.iter_modules(only=todo):
            try:
                results = search_program(module, engine, ga=ga, keep=keep, seed=seed)
                row = {"program": module.sha256, "name": module.name, "instruction_count": module.instruction_count,
                       "results": [[encode_steps(s), c] for s, c in results.items()]}
            except BPQError as exc:
                row = {"program": module.sha256, "name": module.name, "error": f"{type(exc).__name__}: {exc}"}
                logger.warning("library: %s failed: %s", module.name, exc)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done[module.sha256] = row
            bar.update()
    rows = [done[p] for p in programs if p in done and "error" not in done[p]]
    if not rows:
        raise LibraryError(f"{store}: no program could be searched")
    shas = [r["program"] for r in rows]
    try:
        found, values = corpus.spectra(encoder.probe_set, shas=shas)
    except CorpusError:
        found, values = [], np.zeros((0, encoder.probe_set.num_probes, 56), np.float32)
    embeddings = dict(zip(found, encoder.embed_spectra(values, batch_size=128))) if found else {}
    missing = [s for s in shas if s not in embeddings]
    if missing:
        modules = {m.sha256: m for m in corpus.iter_modules(only=set(missing))}
        vectors = encoder.embed_many([modules[s] for s in missing], progress=progress)
        embeddings.update({s: v for s, v in zip(missing, vectors) if np.isfinite(v).all()})
    entries, matrix = [], []
    for row in rows:
        if row["program"] not in embeddings:
            continue
        results = {decode_steps(s): int(c) for s, c in row["results"]}
        entry = LibraryProgram(row["program"], row["name"], int(row["instruction_count"]), results.pop((OZ,)))
        _merge(entry, results, keep * 2)
        entries.append(entry)
        matrix.append(embeddings[row["program"]])
    library = ProgramLibrary(entries, np.stack(matrix), encoder_identity(encoder), settings=settings)
    library.save(out)
    return library
