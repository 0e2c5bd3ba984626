"""The program library: training programs' embeddings in a FAISS index and, per program, the instruction
counts of good pipelines found for it offline; saved as a versioned, sealed folder.

A library saved back to the folder it was loaded from (``bpq optimize --auto --learn --library DIR``, ``bpq library
coreset``) is merged, not overwritten: under an exclusive ``flock`` on ``.NAME.lock`` beside the folder (the
folder itself is replaced whole, so a lock inside it would not hold), the folder is read again and merged with
what this copy holds. Two runs learning at once keep both programs.
"""


from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import random
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import (
    LISTING_LIMIT,
    WEIGHTS_LIMIT,
    atomic_path,
    check_encoder,
    check_files,
    check_replaceable,
    file_checksums,
    read_sealed_config,
    seal,
    versions,
    with_pooling_of,
)
from behavioral_pq.config import read_bounded
from behavioral_pq.core.catalog import BASELINES, OZ_LIKE_ORDER, PASSES, get_pass
from behavioral_pq.embedding.encoder import COUNT_NAMES, load_encoder, shipped
from behavioral_pq.errors import BPQError, LibraryError

logger = logging.getLogger(__name__)

FORMAT = "behavioral_pq.library"
FORMAT_VERSION = 1
DEFAULT_NAME = "pqbert-small-m14-s0-library"
#: The shipped library searched for ``.text`` bytes (``objective="text-size"``), when present.
TEXT_SIZE_NAME = "pqbert-small-m14-s0-library-text-size"
OZ = "-Oz"

Steps = Tuple[str, ...]

#: Pipelines measured on every library program: -Oz twice, LLVM's -Oz order written in catalog passes (once and
#: twice), and -Oz followed by that order. On 40 validation modules, best-of(-Oz, each) gave a geomean
#: IC_Oz / IC of 1.006, 1.044, 1.051 and 1.051.
GENERIC: Tuple[Steps, ...] = ((OZ, OZ), OZ_LIKE_ORDER, OZ_LIKE_ORDER * 2, (OZ,) + OZ_LIKE_ORDER)



def mutate_steps(steps: Steps, rng: random.Random, vocabulary: Sequence[str] = (),
                 weights: Optional[Sequence[float]] = None) -> Steps:
    """One random edit: append, insert or replace a pass (from ``vocabulary`` half the time when one is given,
    else a catalog pass: uniformly, or by ``weights``, one per pass of :data:`PASSES`, such as
    :func:`~behavioral_pq.tasks.guidance.edits.load_edit_prior` gives), or delete one. Whole-pipeline steps (-Oz,
    -Os) are never removed or replaced."""
    if vocabulary and rng.random() < 0.5:
        flag = rng.choice(vocabulary)
    else:
        flag = (rng.choice(PASSES) if weights is None else rng.choices(PASSES, weights=weights)[0]).flag
    op = rng.choice(("append", "insert", "replace", "delete"))
    s = list(steps)
    movable = [i for i, x in enumerate(s) if x.lstrip("-") not in BASELINES]
    if op == "append" or not movable:
        s.append(flag)
    elif op == "insert":
        s.insert(rng.randrange(len(s) + 1), flag)
    elif op == "replace":
        s[rng.choice(movable)] = flag
    elif len(s) > 1:
        del s[rng.choice(movable)]
    return tuple(s)


def describe_steps(steps: Steps) -> str:
    """A pipeline for people: flags joined by spaces, each run of LLVM's -Oz order written in catalog passes
    (:data:`~behavioral_pq.core.catalog.OZ_LIKE_ORDER`, about 90 flags) shown as ``[-Oz order]``."""
    out: List[str] = []
    i, n = 0, len(OZ_LIKE_ORDER)
    while i < len(steps):
        if tuple(steps[i:i + n]) == OZ_LIKE_ORDER:
            out.append(f"[-Oz order: {n} passes]")
            i += n
        else:
            out.append(steps[i])
            i += 1
    return " ".join(out)


def encode_steps(steps: Steps) -> List[Union[int, str]]:
    """Compact JSON form: catalog indices, and the name of a whole-pipeline step ("Oz", "Os", ...)."""
    return [s.lstrip("-") if s.lstrip("-") in BASELINES else get_pass(s).index for s in steps]


def decode_steps(items: Sequence[Union[int, str]]) -> Steps:
    return tuple(f"-{s}" if isinstance(s, str) and s in BASELINES else get_pass(int(s)).flag for s in items)


@dataclass
class LibraryProgram:
    """One library program: its hash, name, instruction count as built, and the library's objective after -Oz
    (``oz_count``) and after each pipeline measured on it (``results``): IR instructions, or ``.text`` bytes in
    a library searched for the text-size objective."""

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
        """log(IC_Oz / IC) of a pipeline on this program (bytes for a text-size library), or None when it was not
        measured here."""
        count = self.results.get(steps)
        if count is None:
            return None
        return math.log(max(self.oz_count, 1) / max(count, 1))


class ProgramLibrary:
    """Programs with good pipelines, indexed by embedding (FAISS, L2 on standardized embeddings).

    Attributes:
        programs: list of :class:`LibraryProgram`.
        embeddings: float32 (N, D), row i for programs[i].
        coreset: pipelines that do well on many programs at once, best first (see
            :mod:`~behavioral_pq.tasks.guidance.coreset`; empty until ``bpq library coreset`` fits one).
        encoder: identity of the encoder the embeddings come from (weights sha256, probe-set hash).
        revision: bumped whenever the library learns something (see :meth:`learn`).
        objective: what its results count (``settings["objective"]``): ``"ir-count"`` (IR instructions in measure
            mode; libraries made before objectives existed) or ``"text-size"`` (.text bytes in target mode).
    """

    def __init__(self, programs: List[LibraryProgram], embeddings: np.ndarray, encoder: dict, *,
                 settings: Optional[dict] = None, revision: int = 0, mean: Optional[np.ndarray] = None,
                 scale: Optional[np.ndarray] = None, coreset: Sequence[Steps] = ()):
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
        self.coreset: List[Steps] = [tuple(c) for c in coreset]
        self.mean = embeddings.mean(0) if mean is None else np.asarray(mean, np.float32)
        self.scale = (embeddings.std(0) + 1e-6) if scale is None else np.asarray(scale, np.float32)
        self._by_program = {p.program: i for i, p in enumerate(programs)}
        self._index = None
        self.path: Optional[Path] = None  # the folder it was loaded from or saved to
        self._mark_saved()

    def _mark_saved(self) -> None:
        """Remember the state as loaded or saved: saving back to the folder merges what changed since."""
        self._learned: set = set()          # programs learn() took in since
        self._saved_revision = self.revision
        self._saved_coreset: List[Steps] = list(self.coreset)
        self._saved_settings = json.loads(json.dumps(self.settings))

    def __len__(self) -> int:
        return len(self.programs)

    def __repr__(self) -> str:
        return f"ProgramLibrary({len(self)} programs, D={self.dim}, revision {self.revision})"

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    @property
    def objective(self) -> str:
        return self.settings.get("objective", "ir-count")

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
        """The ``k`` nearest programs of one embedding float32 (D,): (indices int64 (k,), squared distances).

        A library embedded under pooling "mean" also takes an embedding of its encoder under a count pooling
        ("mean+counts", "mean+changes": what :func:`embed` gives with the shipped encoder): those begin with the
        same mean of the encoder's states, followed by the count tail (8 values per row), and the library
        compares the mean part."""
        embedding = np.asarray(embedding, np.float32).reshape(1, -1)
        embedding = self._own_part(embedding)
        if embedding.shape[1] != self.dim:
            raise LibraryError(f"embedding has {embedding.shape[1]} dimensions, the library {self.dim} (its "
                               f"programs were embedded by {self.encoder.get('name')!r} under pooling "
                               f"{self.encoder.get('pooling', 'mean')!r}: embed with load_encoder(pooling=...) "
                               "set to it)")
        distances, indices = self.index.search(self._standardized(embedding), min(k, len(self)))
        keep = indices[0] >= 0
        return indices[0][keep].astype(np.int64), distances[0][keep]

    def _own_part(self, embedding: np.ndarray) -> np.ndarray:
        """The part of embedding float32 (1, D') that this library compares: the mean, when the library's pooling
        is "mean" and D' = dim + 8 R (a count pooling's tail of R rows); otherwise the embedding as given."""
        extra = embedding.shape[1] - self.dim
        if self.encoder.get("pooling", "mean") == "mean" and extra > 0 and extra % len(COUNT_NAMES) == 0:
            return np.ascontiguousarray(embedding[:, :self.dim])
        return embedding

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
        self._learned.add(program)
        i = self._by_program.get(program)
        if i is None:
            entry = LibraryProgram(program, name, int(instruction_count), int(oz_count), {})
            merge_results(entry, results, keep, self.coreset)
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
        merge_results(entry, results, keep, self.coreset)
        improved = entry.best()[1] < before
        if improved:
            self.revision += 1
        return improved

    # -- storage -------------------------------------------------------------------------------------------------

    def save(self, path: Union[str, os.PathLike], *, overwrite: bool = False) -> Path:
        """Write the library folder (``library.json`` + ``index.faiss``), replacing ``path`` once complete (a
        folder that holds something else than a program library is refused unless ``overwrite``).

        Saved back to the folder it was loaded from or last saved to, the library is merged, not overwritten: under
        an exclusive lock (``.NAME.lock`` beside the folder), the library there now is read again and merged with
        this copy (every program of either, the lower count of each pipeline; see :meth:`_merge_saved`), and that
        is written; this copy then holds it too. So concurrent learners lose nothing.

        Raises:
            LibraryError: ``path`` holds something else than a library (without ``overwrite``), or, saving back,
                it now holds a library of another encoder or objective.
        """
        check_replaceable(path, config="library.json", format=FORMAT, overwrite=overwrite, error=LibraryError,
                          what="a program library")
        path = Path(path)
        with _library_lock(path):
            if self.path is not None and os.path.realpath(self.path) == os.path.realpath(path):
                self._merge_saved(path)
            self._write(path)
        self.path = path
        self._mark_saved()
        return path

    def _merge_saved(self, path: Path) -> None:
        """Take in the library saved at ``path`` now (another process may have saved what it learned since this
        copy was loaded) merged with this one: every program of either (a new one with its embedding), for each
        pipeline of a program the lower count of the two; the revision counts the learning of both; this copy's
        coreset and settings where they changed since it was loaded, the saved ones otherwise."""
        if not (path / "library.json").exists():
            return
        try:
            config = read_sealed_config(path / "library.json", format=FORMAT, version=FORMAT_VERSION,
                                        error=LibraryError, what="a program library", limit=LISTING_LIMIT)
            check_files(path, config, LibraryError)
            saved = _read_library(path, config)
        except LibraryError as exc:
            logger.warning("%s: the library there cannot be read to merge with (%s); writing this one", path, exc)
            return
        for key in ("model_sha256", "probe_set_hash", "pooling"):
            if saved.encoder.get(key) != self.encoder.get(key):
                raise LibraryError(f"{path}: now holds a library of another encoder ({key} differs) than the one "
                                   "loaded from it; refusing to merge (save to another folder)")
        if saved.objective != self.objective or saved.dim != self.dim:
            raise LibraryError(f"{path}: now holds a library of another objective or dimension than the one loaded "
                               "from it; refusing to merge (save to another folder)")
        rows = [saved.embeddings]
        for program, row in zip(self.programs, self.embeddings):
            i = saved._by_program.get(program.program)
            if i is None:
                saved._by_program[program.program] = len(saved.programs)
                saved.programs.append(LibraryProgram(program.program, program.name, program.instruction_count,
                                                     program.oz_count, dict(program.results)))
                rows.append(row[None])
                continue
            entry = saved.programs[i]
            for steps, count in program.results.items():
                entry.results[steps] = min(count, entry.results.get(steps, count))
            if program.program in self._learned:
                entry.oz_count = program.oz_count
        self.programs, self.embeddings = saved.programs, np.concatenate(rows).astype(np.float32)
        self.revision = saved.revision + max(self.revision - self._saved_revision, 0)
        if self.coreset == self._saved_coreset:
            self.coreset = saved.coreset
        changed = {k: v for k, v in self.settings.items() if self._saved_settings.get(k, ...) != v}
        self.settings = {**saved.settings, **changed}
        self.mean, self.scale = saved.mean, saved.scale
        self._by_program, self._index = saved._by_program, None

    def _write(self, path: Path) -> None:
        """Write the folder at ``path``, replacing it whole."""
        import faiss

        pipelines: Dict[Steps, int] = {}
        programs = []
        coreset = [pipelines.setdefault(s, len(pipelines)) for s in self.coreset]
        for p in self.programs:
            results = [[pipelines.setdefault(s, len(pipelines)), int(c)] for s, c in p.results.items()]
            programs.append({"program": p.program, "name": p.name, "instruction_count": p.instruction_count,
                             "oz_count": p.oz_count, "results": results})
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "revision": self.revision,
                  "versions": versions(), "encoder": self.encoder, "settings": self.settings,
                  "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                  "pipelines": [encode_steps(s) for s in pipelines], "coreset": coreset, "programs": programs}
        with atomic_path(path) as tmp:
            tmp.mkdir()
            faiss.write_index(self._raw_index(), str(tmp / "index.faiss"))
            config["files"] = file_checksums(tmp, ["index.faiss"])
            (tmp / "library.json").write_text(json.dumps(seal(config), separators=(",", ":")) + "\n")

    def _raw_index(self):
        """An index of the raw embeddings (what is saved; standardization is in library.json)."""
        import faiss

        index = faiss.IndexFlatL2(self.dim)
        index.add(np.ascontiguousarray(self.embeddings))
        return index


@contextlib.contextmanager
def _library_lock(path: Path):
    """An exclusive ``flock`` held while the library folder ``path`` is read and replaced: on ``.NAME.lock``
    beside it, since the folder itself is swapped whole (a lock file inside would be swapped with it). The lock file
    is opened without following a link and must be a regular file (a FIFO there never blocks the save)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.parent / f".{path.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LibraryError(f"{path}: cannot open its lock file {lock} ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LibraryError(f"{path}: its lock file {lock} is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # releases the lock


def merge_libraries(libraries: Sequence[ProgramLibrary]) -> ProgramLibrary:
    """One library holding the programs of several built on the same encoder (for example one of small programs
    and one of real programs). A program present in several keeps its first entry with the others' results merged
    in. Standardization (mean, scale) is recomputed over all embeddings.

    Raises:
        LibraryError: no libraries, or libraries of different encoders or objectives.
    """
    if not libraries:
        raise LibraryError("nothing to merge")
    first = libraries[0]
    for other in libraries[1:]:
        if other.encoder != first.encoder:
            raise LibraryError(f"cannot merge libraries of different encoders ({first.encoder} and {other.encoder})")
        if other.objective != first.objective:
            raise LibraryError(f"cannot merge libraries of different objectives ({first.objective} and "
                               f"{other.objective}): their results count different things")
    programs: List[LibraryProgram] = []
    rows: List[np.ndarray] = []
    seen: Dict[str, int] = {}
    for library in libraries:
        for program, row in zip(library.programs, library.embeddings):
            if program.program in seen:
                entry = programs[seen[program.program]]
                entry.results.update({s: min(c, entry.results.get(s, c)) for s, c in program.results.items()})
                continue
            seen[program.program] = len(programs)
            programs.append(LibraryProgram(program.program, program.name, program.instruction_count,
                                           program.oz_count, dict(program.results)))
            rows.append(row)
    settings = {"objective": first.objective, "merged": [dict(lib.settings, programs=len(lib)) for lib in libraries]}
    coreset = list(dict.fromkeys(steps for library in libraries for steps in library.coreset))
    return ProgramLibrary(programs, np.stack(rows), first.encoder, settings=settings, coreset=coreset)


def merge_results(entry: LibraryProgram, results: Dict[Steps, int], keep: int, coreset: Sequence[Steps] = ()) -> None:
    """Fold measured ``results`` into ``entry``: -Oz's count, the generic and ``coreset`` pipelines, and the
    ``keep`` best others (fewest instructions, then shortest)."""
    for steps, count in results.items():
        count = int(count)
        if steps == (OZ,):
            entry.oz_count = count
        else:
            entry.results[steps] = min(count, entry.results.get(steps, count))
    protected = set(GENERIC) | set(coreset)
    generic = {s: c for s, c in entry.results.items() if s in protected}
    others = sorted(((s, c) for s, c in entry.results.items() if s not in protected),
                    key=lambda kv: (kv[1], len(kv[0])))
    entry.results = {**generic, **dict(others[:keep])}


def load_library(path: Union[str, os.PathLike, None] = None, *, encoder=None) -> ProgramLibrary:
    """Load a library folder (default: the shipped one), checking that it belongs to ``encoder`` (default: the
    shipped encoder).

    Raises:
        LibraryError: missing or unreadable folder, another format, or an encoder mismatch.
    """
    path = Path(shipped(DEFAULT_NAME) if path is None else path)
    config = read_sealed_config(path / "library.json", format=FORMAT, version=FORMAT_VERSION,
                                error=LibraryError, what="a program library", limit=LISTING_LIMIT)
    check_files(path, config, LibraryError)
    wanted = config.get("encoder", {})
    encoder = with_pooling_of(encoder or load_encoder(), wanted)
    check_encoder(path, wanted, encoder, LibraryError,
                  "rebuild it (bpq library build) or pass the encoder it was built on")
    library = _read_library(path, config)
    if library.dim != encoder.dim:
        raise LibraryError(f"{path}: embeddings have {library.dim} dimensions, the encoder gives {encoder.dim}")
    library.path = path
    return library


#: The head of a flat FAISS index as ``faiss.write_index`` writes it: fourcc, dimension, vectors, two unused
#: int64, is_trained, metric (0 inner product, 1 L2), then the count of floats that follow (dimension x vectors).
_FLAT_HEADER = struct.Struct("<4siqqqBiQ")


def _read_index(file: Path):
    """The flat FAISS index of ``file``, its header checked against the file's size before faiss reads it: a few
    bytes claiming 2^28 floats are refused, not allocated. LibraryError naming the file otherwise."""
    import faiss

    data = read_bounded(file, limit=WEIGHTS_LIMIT, what="FAISS index", error=LibraryError)
    if len(data) < _FLAT_HEADER.size:
        raise LibraryError(f"{file}: not a flat FAISS index ({len(data)} bytes)")
    fourcc, dim, count, _, _, _, metric, floats = _FLAT_HEADER.unpack_from(data)
    if fourcc not in (b"IxF2", b"IxFI") or metric not in (0, 1):
        raise LibraryError(f"{file}: not a flat FAISS index (it starts with {fourcc!r})")
    if dim <= 0 or count < 0 or floats != dim * count or len(data) != _FLAT_HEADER.size + 4 * floats:
        raise LibraryError(f"{file}: its header claims {count} vectors of {dim} floats ({floats} floats), the "
                           f"file holds {len(data)} bytes")
    return faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))


def _read_library(path: Path, config: dict) -> ProgramLibrary:
    """The library of the folder ``path`` whose checked ``library.json`` is ``config`` (its other files
    and the encoder are not). LibraryError naming ``path`` for anything corrupt."""
    try:
        pipelines = [decode_steps(s) for s in config["pipelines"]]
        programs = [LibraryProgram(p["program"], p["name"], int(p["instruction_count"]), int(p["oz_count"]),
                                   {pipelines[i]: int(c) for i, c in p["results"]}) for p in config["programs"]]
        index = _read_index(path / "index.faiss")
        embeddings = index.reconstruct_n(0, index.ntotal)
        return ProgramLibrary(programs, embeddings, config.get("encoder", {}), settings=config.get("settings"),
                              revision=int(config.get("revision", 0)), mean=np.array(config["mean"]),
                              scale=np.array(config["scale"]),
                              coreset=[pipelines[i] for i in config.get("coreset", [])])
    except LibraryError as exc:
        raise LibraryError(f"{path}: {exc}") from None
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, BPQError) as exc:
        raise LibraryError(f"{path}: corrupt library ({type(exc).__name__}: {exc})") from None


_library_cache: Dict[str, ProgramLibrary] = {}


def default_library(encoder=None, objective: str = "ir-count") -> ProgramLibrary:
    """The shipped library (loaded once per process) for ``encoder`` (default: the shipped encoder) and
    ``objective``: the one searched for text size when it is shipped, else the instruction-count one (whose
    pipelines are then only candidates, each measured in bytes by the search)."""
    name = TEXT_SIZE_NAME if objective == "text-size" and shipped(TEXT_SIZE_NAME).is_dir() else DEFAULT_NAME
    key = f"{name}:" + ("default" if encoder is None else str(getattr(encoder, "path", id(encoder))))
    if key not in _library_cache:
        _library_cache[key] = load_library(shipped(name), encoder=encoder)
    return _library_cache[key]


