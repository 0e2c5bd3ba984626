"""``embed``: module -> spectrum (native core) -> codes (quantizer) -> PQ-BERT -> embedding.

A checkpoint whose model reads the spectrum itself (``PQBertConfig.input_kind = "spectrum"``) skips the quantizer
on the way in: module -> spectrum -> reaction rows -> PQ-BERT -> embedding (its quantizer is the vocabulary the
model was pretrained to predict, kept with it).

    >>> import behavioral_pq as bpq
    >>> encoder = bpq.load_encoder()                 # the shipped checkpoint (cached)
    >>> encoder.embed(module).shape                  # float32 (D,)
    >>> bpq.embed_many(modules, workers=2).shape     # float32 (N, D); NaN rows for modules that failed
    >>> encoder.embed_batch(modules).errors          # per module: None, or why it could not be embedded

Embeddings are deterministic: the encoder runs in eval mode, in float32 on the CPU, one module per forward pass, so
``embed_many(ms)`` equals ``np.stack([embed(m) for m in ms])`` bit for bit and does not depend on batch sizes.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.core.module import load_module
from behavioral_pq.embedding.checkpoint import load_checkpoint
from behavioral_pq.embedding.sampling import LARGE_MODULE_INSTRUCTIONS
from behavioral_pq.embedding.spectrum import as_reaction, spectra
from behavioral_pq.errors import BPQError

logger = logging.getLogger(__name__)

POOLINGS = ("mean", "cls", "mean+counts", "mean+changes")
#: What the count poolings append to the mean of the final states, each in turn for every reaction row the model
#: reads: the row's reaction in these Autophase counts: the size of the module in instructions, blocks, functions
#: and memory instructions, and the counts the memory and SSA passes move. ``mean+counts`` appends the log-relative
#: reactions as the rows hold them; ``mean+changes`` (the shipped default) the same reactions as relative changes,
#: ``expm1(log-relative) = (after + 1) / (before + 1) - 1``, the unit of the -Oz benefit itself, so that a linear head
#: reads a probe's reduction as it reads the target. Both append log1p of the module's own counts for the module
#: row of a "log-relative+module" encoder. Chosen on the valid projects among tails of 1, 2, 4 and 8 counts and the
#: whole rows, then between the two units (downstream/README.md, "The embedding keeps its input, measured";
#: bench/encoder/size_tail.py).
COUNT_POOLINGS = ("mean+counts", "mean+changes")
COUNT_NAMES = ("TotalInsts", "TotalBlocks", "TotalFuncs", "TotalMemInst", "NumAllocaInst", "NumLoadInst",
               "NumStoreInst", "NumPHIInst")
COUNT_FEATURES = tuple(AUTOPHASE_FEATURES.index(name) for name in COUNT_NAMES)
#: Large-module mode is on by default: above this many IR instructions a module's spectrum is measured on a
#: function sample (behavioral_pq.embedding.sampling); pass ``sample_above=None`` for the exact spectrum.
SAMPLE_ABOVE = LARGE_MODULE_INSTRUCTIONS


def _check_pooling(pooling: str, reaction: str) -> None:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    if pooling == "mean+changes" and reaction == "absolute":
        raise ValueError("pooling 'mean+changes' reads log-relative reaction rows; this encoder's rows are absolute "
                         "differences (use 'mean+counts')")


def shipped(name: str) -> Path:
    """A shipped model folder: installed inside the package, or ``checkpoints/`` of a source checkout."""
    package = Path(__file__).resolve().parents[1]
    inside = package / "data" / "checkpoints" / name
    if inside.is_dir():
        return inside
    return package.parent / "checkpoints" / name


def default_checkpoint() -> Path:
    """The shipped encoder."""
    return shipped("pqbert-small-m14-s0")


@dataclass(frozen=True)
class EmbeddingBatch:
    """What :meth:`Encoder.embed_batch` returns.

    Attributes:
        embeddings: float32 (N, D); row i is NaN where ``errors[i]`` is not None.
        errors: one entry per module: None, or the exception that kept it from being embedded.
        degraded: one entry per module: the probes measured without a pass that crashed LLVM on it
            (:class:`~behavioral_pq.embedding.spectrum.Degradation`; empty when nothing was left out).
        sampled: one entry per module: None when measured whole, else the share of its instructions in the
            function sample its spectrum was measured on (large-module mode).
    """

    embeddings: np.ndarray
    errors: Tuple[Optional[BaseException], ...]
    degraded: Tuple[tuple, ...] = ()
    sampled: Tuple[Optional[float], ...] = ()

    @property
    def ok(self) -> np.ndarray:
        """bool (N,): which modules were embedded."""
        return np.array([e is None for e in self.errors], dtype=bool)


class Encoder:
    """A loaded checkpoint that embeds modules.

    Attributes:
        model: PQ-BERT (eval mode, float32, CPU).
        quantizer: the checkpoint's Quantizer.
        probe_set: the probe set its spectra are measured with.
        config: the checkpoint's config.json.
        pooling: "mean" (mean of the P probe states, and of the module token's for "log-relative+module"), "cls"
            (the [CLS] state), "mean+counts" (the mean, followed by the P' rows' log-relative reactions in 8
            Autophase counts, :data:`COUNT_NAMES`, so D = H + 8 P') or "mean+changes" (the same with the probe rows'
            reactions as relative changes, see :data:`POOLINGS`). The checkpoint's config names its default.
        reaction: how the checkpoint's quantizer reads reaction rows: "log-relative" (the method), "absolute"
            (an ablation) or "log-relative+module" (one more token: the module's own log1p Autophase). The last
            two need the modules' original Autophase, see :meth:`embed_spectra`.
    """

    def __init__(self, checkpoint, pooling: Optional[str] = None):
        self.model, self.quantizer, self.probe_set = checkpoint.model, checkpoint.quantizer, checkpoint.probe_set
        self.config, self.path = checkpoint.config, checkpoint.path
        self.pooling = pooling or checkpoint.config.get("pooling", "mean")
        self.reaction = checkpoint.config.get("reaction", "log-relative")
        _check_pooling(self.pooling, self.reaction)
        self.fine_tuned = False     # True for the copy a fine-tuned predictor carries (see with_model)

    @property
    def dim(self) -> int:
        """D, the embedding size: the model's hidden size H, plus 8 P' for a count pooling ("mean+counts",
        "mean+changes")."""
        return self.model.config.hidden_size + (len(COUNT_FEATURES) * self.model.config.num_probes
                                                 if self.reads_counts else 0)

    @property
    def reads_counts(self) -> bool:
        """Whether the embedding ends with the rows' count reactions (pooling "mean+counts" or "mean+changes")."""
        return self.pooling in COUNT_POOLINGS

    @property
    def model_pooling(self) -> str:
        """How the model's final states are pooled: "mean" or "cls" (the part of ``pooling`` PQ-BERT computes)."""
        return "mean" if self.reads_counts else self.pooling

    def readout(self, rows: np.ndarray) -> np.ndarray:
        """What the pooling appends to the pooled states, from the reaction rows the model reads float32
        (N, P', 56): for a count pooling, float32 (N, 8 P'), each row's :data:`COUNT_FEATURES` in turn (row 0's
        8 counts, then row 1's ...), as relative changes for "mean+changes" (the module row, if any, stays
        log1p counts); else (N, 0)."""
        rows = np.asarray(rows, dtype=np.float32)
        p = self.model.config.num_probes
        if rows.ndim != 3 or rows.shape[1:] != (p, 56):
            raise ValueError(f"reaction rows must have shape (N, {p}, 56), got {rows.shape}")
        if not self.reads_counts:
            return np.zeros((len(rows), 0), np.float32)
        tail = rows[:, :, list(COUNT_FEATURES)]                                      # (N, P', 8)
        if self.pooling == "mean+changes":
            probes = p - 1 if self.reaction == "log-relative+module" else p           # the module row stays log1p
            tail = np.concatenate([np.expm1(tail[:, :probes], dtype=np.float32), tail[:, probes:]], axis=1)
        return np.ascontiguousarray(tail.reshape(len(rows), -1), dtype=np.float32)

    def __repr__(self) -> str:
        return (f"Encoder({self.path}{', fine-tuned' if self.fine_tuned else ''}, D={self.dim}, "
                f"probes={self.probe_set.name} [{self.probe_set.hash[:12]}], pooling={self.pooling})")

    # -- from measurements ---------------------------------------------------------------------------------------

    def codes(self, spectra: np.ndarray) -> np.ndarray:
        """Codes of reaction rows, as the checkpoint's reaction expresses them: float32 (N, P', 56) -> uint8
        (N, P', M), with P' the model's positions (P, or P + 1 for "log-relative+module"; see spectra_codes)."""
        spectra = np.asarray(spectra, dtype=np.float32)
        p = self.model.config.num_probes
        if spectra.ndim != 3 or spectra.shape[1:] != (p, 56):
            raise ValueError(f"spectra must have shape (N, {p}, 56), got {spectra.shape}")
        n = len(spectra)
        return self.quantizer.encode(spectra.reshape(n * p, 56)).reshape(n, p, -1)

    @property
    def reads_spectrum(self) -> bool:
        """Whether the model reads reaction rows (``input_kind="spectrum"``) rather than codes."""
        return self.model.config.input_kind == "spectrum"

    def embed_codes(self, codes: np.ndarray, batch_size: int = 1) -> np.ndarray:
        """Embeddings of codes: uint8 (N, P, M) -> float32 (N, D) (a model of input_kind "codes").

        ``batch_size=1`` (the default) runs one module per forward pass, so a module's embedding never depends on
        what it is batched with. Larger batches are several times faster on a loaded CPU; they may differ from
        it in the last bits (used for bulk evaluation data, see ``datasets.embeddings``).
        """
        if self.reads_spectrum:
            raise ValueError(f"{self.path}: this encoder reads reaction rows, not codes (use embed_spectra)")
        return self.embed_inputs(codes, batch_size)

    def embed_inputs(self, inputs: np.ndarray, batch_size: int = 1, rows: Optional[np.ndarray] = None
                     ) -> np.ndarray:
        """Embeddings of what the model reads (:meth:`model_inputs`): codes uint8 (N, P, M) or reaction rows
        float32 (N, P, 56) -> float32 (N, D); ``batch_size`` as in :meth:`embed_codes`. A count pooling also
        needs the reaction rows the codes were made from (``rows``, float32 (N, P, 56); a model that reads rows
        uses its inputs)."""
        import torch

        inputs = np.asarray(inputs)
        if self.reads_counts:
            rows = inputs if self.reads_spectrum else rows
            if rows is None:
                raise ValueError(f"{self.path}: pooling {self.pooling!r} appends the reaction rows' count reactions; "
                                 "give the rows the codes were made from (rows=, or use embed_spectra)")
            if len(rows) != len(inputs):
                raise ValueError(f"{len(rows)} modules of reaction rows for {len(inputs)} of inputs")
        hidden = self.model.config.hidden_size
        out = np.zeros((len(inputs), self.dim), np.float32)
        dtype = np.float32 if self.reads_spectrum else np.int64
        with torch.inference_mode():
            for start in range(0, len(inputs), batch_size):
                x = torch.from_numpy(inputs[start:start + batch_size].astype(dtype))  # (b, P, M) or (b, P, 56)
                out[start:start + len(x), :hidden] = self.model.embed(x, self.model_pooling).numpy()
        if self.reads_counts:
            out[:, hidden:] = self.readout(rows)                                      # (N, 8 P')
        return out

    def embed_spectra(self, spectra: np.ndarray, original: Optional[np.ndarray] = None, batch_size: int = 1
                      ) -> np.ndarray:
        """Embeddings of log-relative spectra: float32 (N, P, 56) -> float32 (N, D).

        Args:
            original: int (N, 56), the modules' Autophase before the probes; needed only by an encoder whose
                ``reaction`` is not "log-relative".
            batch_size: modules per forward pass (see :meth:`embed_codes`).
        """

        rows = self.reaction_rows(spectra, original)
        return self.embed_inputs(rows if self.reads_spectrum else self.codes(rows), batch_size, rows=rows)

    def model_inputs(self, spectra: np.ndarray, original: Optional[np.ndarray] = None) -> np.ndarray:
        """What the model reads for log-relative spectra float32 (N, P, 56): their codes uint8 (N, P', M)
        (:meth:`spectra_codes`), or, for a model of input_kind "spectrum", the reaction rows float32 (N, P', 56)
        (:meth:`reaction_rows`)."""
        if self.reads_spectrum:
            return self.reaction_rows(spectra, original)
        return self.spectra_codes(spectra, original)

    def reaction_rows(self, spectra: np.ndarray, original: Optional[np.ndarray] = None) -> np.ndarray:
        """Log-relative spectra float32 (N, P, 56) expressed as the checkpoint's reaction: float32 (N, P', 56),
        P' = P + 1 for "log-relative+module" (``original``: int (N, 56), needed unless it is "log-relative")."""
        spectra = np.asarray(spectra, dtype=np.float32)
        if self.reaction != "log-relative":
            if original is None:
                raise ValueError(f"{self.path}: this encoder reads {self.reaction} reactions; pass the modules' "
                                 "original Autophase as `original`")
            spectra = as_reaction(np.asarray(original)[:, None, :], spectra, self.reaction)
        p = self.model.config.num_probes
        if spectra.ndim != 3 or spectra.shape[1:] != (p, 56):
            raise ValueError(f"spectra must have shape (N, {p}, 56) as the model reads them, got {spectra.shape}")
        return spectra

    def spectra_codes(self, spectra: np.ndarray, original: Optional[np.ndarray] = None) -> np.ndarray:
        """The codes of log-relative spectra: float32 (N, P, 56) -> uint8 (N, P', M), after the checkpoint's
        reaction (``original``: int (N, 56), needed unless it is "log-relative"); P + 1 rows of codes for a
        "log-relative+module" encoder."""
        return self.codes(self.reaction_rows(spectra, original))

    def with_pooling(self, pooling: str) -> "Encoder":
        """This encoder (same weights, quantizer and probe set, nothing reloaded) under another pooling."""
        _check_pooling(pooling, self.reaction)
        other = copy.copy(self)
        other.pooling = pooling
        return other

    def with_model(self, model, *, fine_tuned: bool = True) -> "Encoder":
        """This encoder (same checkpoint identity, quantizer and probe set) with other PQ-BERT weights: the encoder
        a fine-tuned predictor embeds with. ``model`` is put in eval mode."""
        other = copy.copy(self)
        other.model = model.eval()
        other.fine_tuned = fine_tuned
        return other

    # -- from modules --------------------------------------------------------------------------------------------

    def embed(self, module, *, progress: Union[bool, Callable[[int, int], None]] = False,
              sample_above: Optional[int] = SAMPLE_ABOVE, engine: Optional[Engine] = None,
              deadline: Optional[float] = None) -> np.ndarray:
        """Embedding of one module (a Module, or a path / bytes that ``load_module`` takes): float32 (D,).
        ``progress`` shows the probes' progress on stderr, or is called with (nodes measured, nodes in all) (see
        :func:`~behavioral_pq.embedding.spectrum.spectra`). A module of more than ``sample_above`` IR
        instructions is measured on a sample of its functions (large-module mode); None measures it whole.
        ``deadline``: a ``time.monotonic()`` value by which the probes must be measured.

        Raises:
            InvalidIRError, CompileError, PassCrashError, PassTimeoutError: the module could not be measured.
            DeadlineError: the probes were not measured by ``deadline``.
        """
        batch = spectra([module], self.probe_set, progress=progress, sample_above=sample_above, engine=engine,
                        deadline=deadline)
        batch.raise_first()
        return self.embed_spectra(batch.spectra, batch.autophase[:, 0])[0]

    def embed_many(self, modules: Sequence, *, workers: Optional[int] = None, progress: bool = False,
                   sample_above: Optional[int] = SAMPLE_ABOVE) -> np.ndarray:
        """Embeddings of many modules: float32 (N, D), row i for modules[i]; a row of NaN for a module that could
        not be loaded or measured (see :meth:`embed_batch` for the errors)."""
        return self.embed_batch(modules, workers=workers, progress=progress, sample_above=sample_above).embeddings

    def embed_batch(self, modules: Sequence, *, workers: Optional[int] = None, progress: bool = False,
                    flags: Sequence[str] = (), sample_above: Optional[int] = SAMPLE_ABOVE) -> EmbeddingBatch:
        """Embeddings of many modules with what went wrong: a module that cannot be loaded or measured gets a row
        of NaN, its error in ``errors`` and a logged warning; the others complete.

        Args:
            workers: engine worker processes for the spectra (None: the default engine).
            flags: clang flags for modules given as C/C++ files (``-I``, ``-D``).
            sample_above: large-module mode threshold (see :meth:`embed`).
        """
        problems: List[Optional[BaseException]] = [None] * len(modules)
        engine = Engine(workers) if workers is not None else default_engine()
        try:
            loaded = []
            for i, m in enumerate(modules):
                try:
                    loaded.append((i, load_module(m, engine=engine, flags=flags)))
                except (BPQError, OSError) as exc:
                    problems[i] = exc
            batch = spectra([m for _, m in loaded], self.probe_set, engine=engine, progress=progress,
                            sample_above=sample_above)
        finally:
            if workers is not None:
                engine.close()
        out = np.full((len(modules), self.dim), np.nan, np.float32)
        measured = [(i, k) for k, (i, _) in enumerate(loaded) if batch.errors[k] is None]
        for k, (i, _) in enumerate(loaded):
            problems[i] = problems[i] or batch.errors[k]
        if measured:
            rows = [k for _, k in measured]
            values = self.embed_spectra(batch.spectra[rows], batch.autophase[rows, 0])
            out[[i for i, _ in measured]] = values
        for i, problem in enumerate(problems):
            if problem is not None:
                logger.warning("embed_many: module %d failed: %s", i, problem)
        degraded: List[tuple] = [()] * len(modules)
        sampled: List[Optional[float]] = [None] * len(modules)
        for k, (i, _) in enumerate(loaded):
            degraded[i] = batch.degraded[k] if batch.degraded else ()
            sampled[i] = batch.sampled[k] if batch.sampled else None
        return EmbeddingBatch(out, tuple(problems), tuple(degraded), tuple(sampled))


_default: Optional[Encoder] = None
_lock = threading.Lock()


def load_encoder(path: Union[str, os.PathLike, None] = None, *, pooling: Optional[str] = None) -> Encoder:
    """Load an encoder checkpoint folder (verified, see behavioral_pq.embedding.checkpoint); None: the shipped default,
    loaded once per process."""

    global _default
    if path is None and pooling is None:
        with _lock:
            if _default is None:
                _default = Encoder(load_checkpoint(default_checkpoint()))
            return _default
    return Encoder(load_checkpoint(default_checkpoint() if path is None else path), pooling=pooling)


def embed(module, *, encoder: Optional[Encoder] = None, sample_above: Optional[int] = SAMPLE_ABOVE) -> np.ndarray:
    """Embedding of one module with ``encoder`` (default: the shipped one): float32 (D,). Modules above
    ``sample_above`` instructions are measured on a function sample; None: always whole."""
    return (encoder or load_encoder()).embed(module, sample_above=sample_above)


def embed_many(modules: Sequence, *, encoder: Optional[Encoder] = None, workers: Optional[int] = None,
               progress: bool = False, sample_above: Optional[int] = SAMPLE_ABOVE) -> np.ndarray:
    """Embeddings of many modules: float32 (N, D); NaN rows for modules that failed (see Encoder.embed_many)."""
    return (encoder or load_encoder()).embed_many(modules, workers=workers, progress=progress,
                                                  sample_above=sample_above)
