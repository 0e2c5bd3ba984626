"""Pretraining PQ-BERT on a corpus store: data preparation, the masked-LM training loop, MLM evaluation.

Steps (``bpq pretrain STORE --out RUN``, resumable at every stage):

1. ``prepare``: fit the quantizer on a seeded uniform sample of reaction rows of the pretraining modules, then encode
   every stored spectrum into codes, written as Parquet (``RUN/codes/{train,valid,test}.parquet``; one row per
   module: ``sha256``, ``codes`` = P x M bytes, ``spectra`` = the P x 56 float32 reaction rows the codes were made
   of, which a model of ``input_kind = "spectrum"`` reads). Spectra are streamed; memory does not grow with the
   corpus.
2. ``train``: AdamW with linear warm-up and cosine decay, gradient clipping, masked-LM loss; CPU or CUDA, one
   process or several under ``torchrun`` (DDP, gloo on CPU). Codes are streamed from the Parquet files through a
   seeded shuffle buffer. The masks of a global batch depend only on (seed, step), so a run with W processes
   computes the same gradients as one process on the same global batch. A model that reads the spectrum
   (continuous inputs) gets the rows next to their codes, standardized with the train rows' per-position
   statistics, and is masked by whole rows; its targets are the masked rows' codes.
3. Every ``eval_every`` steps: masked-code accuracy per head on the validation modules; ``RUN/train-state.pt``
   is rewritten (resume with the same command); ``RUN/log.csv`` and ``RUN/training-curve.png`` grow.
4. At the end: the encoder checkpoint ``RUN/encoder`` (see :mod:`behavioral_pq.embedding.checkpoint`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from behavioral_pq.artifacts import atomic_path, read_json_bounded, write_json_atomic
from behavioral_pq.config import ConfigError, from_dict, load_toml
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.checkpoint import save_encoder
from behavioral_pq.embedding.model import IGNORE_INDEX, MASK_ID, PQBert, PQBertConfig, mask_rows, masked_lm_loss
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.quantizer import Quantizer
from behavioral_pq.embedding.spectrum import REACTIONS, reaction_positions
from behavioral_pq.errors import PretrainError

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class TrainingConfig:
    """Optimization and data settings of a pretraining run (the ``[training]`` table of a config file)."""

    batch_size: int = 64               # global: split over the processes of a torchrun job
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    max_steps: int = 3000
    min_lr_ratio: float = 0.1          # cosine decay ends at learning_rate * min_lr_ratio
    grad_clip: float = 1.0
    mask_probability: float = 0.15
    seed: int = 0
    log_every: int = 10
    eval_every: int = 250
    shuffle_buffer: int = 8192         # modules held for shuffling
    quantizer_rows: int = 262_144      # reaction rows sampled to fit the quantizer
    validation_modules: int = 1000     # at most this many modules per held-out split
    reaction: str = "log-relative+module"  # + the module's own Autophase as a token; "log-relative" (the paper's),
                                           # "absolute" (ablation: h_opt - h_orig)
    quantizer_subspaces: int = 14      # M (the paper's is 8); 1 makes the quantizer k-means on whole rows (ablation)
    pooled_weight: float = 0.0         # > 0: also rebuild every code from the mean-pooled embedding (a pooled decoder)
    keep_probability: float = 0.0      # > 0: also predict this share of the codes left visible (BERT's unchanged
                                       # tokens), so that every position's final state keeps its own reaction

    def __post_init__(self):
        for name in ("batch_size", "max_steps", "log_every", "eval_every", "shuffle_buffer", "quantizer_rows",
                     "validation_modules"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

        if self.reaction not in REACTIONS:
            raise ValueError(f"reaction must be one of {REACTIONS}, got {self.reaction!r}")
        if self.quantizer_subspaces <= 0 or 56 % self.quantizer_subspaces:
            raise ValueError(f"quantizer_subspaces must divide 56, got {self.quantizer_subspaces}")
        if self.pooled_weight < 0:
            raise ValueError(f"pooled_weight must be >= 0, got {self.pooled_weight}")
        if not 0.0 < self.mask_probability < 1.0:
            raise ValueError(f"mask_probability must be in (0, 1), got {self.mask_probability}")
        if not 0.0 <= self.keep_probability < 1.0:
            raise ValueError(f"keep_probability must be in [0, 1), got {self.keep_probability}")


#: The shipped encoder's model: the small preset with 14 sub-spaces of 16-dim sub-embeddings (d_model 224).
DEFAULT_MODEL = {"preset": "small", "num_subspaces": 14, "sub_embedding_size": 16}


@dataclass(frozen=True)
class PretrainConfig:
    """A whole run: the model (``[model]``: ``preset`` plus PQBertConfig overrides) and ``[training]``.

    The defaults are the shipped encoder's (``pretrain/default.toml``). The model has one token slot per quantizer
    sub-space: its ``num_subspaces`` is ``training.quantizer_subspaces`` unless ``model`` names it, and then they
    must be equal.
    """

    model: dict = field(default_factory=lambda: dict(DEFAULT_MODEL))
    training: TrainingConfig = TrainingConfig()

    def __post_init__(self):
        given = self.model.get("num_subspaces", self.training.quantizer_subspaces)
        if given != self.training.quantizer_subspaces:
            raise ConfigError(f"[model] num_subspaces is {given}, [training] quantizer_subspaces "
                              f"{self.training.quantizer_subspaces}; they must be equal")

    def model_config(self, num_probes: int) -> PQBertConfig:
        overrides = {k: v for k, v in self.model.items() if k != "preset"}
        overrides.setdefault("num_subspaces", self.training.quantizer_subspaces)
        overrides.setdefault("pooled_decoder", self.training.pooled_weight > 0)
        try:
            return PQBertConfig.preset(self.model.get("preset", "base"), num_probes=num_probes, **overrides)
        except TypeError as exc:
            raise ConfigError(f"[model]: {exc}") from None

    def to_dict(self) -> dict:
        return {"model": dict(self.model), "training": asdict(self.training)}

    @classmethod
    def from_dict(cls, data: dict, where: str = "pretraining config") -> "PretrainConfig":
        unknown = sorted(set(data) - {"model", "training"})
        if unknown:
            raise ConfigError(f"{where}: unknown tables {unknown}; known: ['model', 'training']")
        try:
            config = cls(model=dict(data.get("model", DEFAULT_MODEL)),
                         training=from_dict(TrainingConfig, data.get("training", {}), f"{where} [training]"))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        config.model_config(100)  # validates the model table
        return config

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "PretrainConfig":
        return cls.from_dict(load_toml(path), str(path))


# -- 1. data preparation ---------------------------------------------------------------------------------------

def split_modules(corpus, seed: int, limit: int, measured: Optional[set] = None) -> Dict[str, List[str]]:
    """Module hashes per split. train: the store's pretraining corpus (everything but the labelled modules of the
    valid and test splits); valid / test: at most ``limit`` of those held-out labelled modules (seeded), drawn from
    the ``measured`` ones (with stored spectra) when given. An unsplit store holds out every module whose hash
    starts with '0' or '1' (about 1/8) as valid."""
    train = corpus.pretraining()
    held = {}
    if corpus.store.splits():
        known = set(train)
        for name in ("valid", "test"):
            held[name] = sorted(s for s in corpus.split(name) if s not in known and (measured is None or s in measured))
    else:
        held["valid"] = [s for s in train if s[0] in "01"]
        train = [s for s in train if s[0] not in "01"]
        held["test"] = []
    rng = np.random.default_rng(seed)
    for name, shas in held.items():
        if len(shas) > limit:
            held[name] = sorted(rng.choice(shas, size=limit, replace=False).tolist())
    return {"train": train, **held}


def sample_rows(corpus, probe_set, shas: Sequence[str], size: int, seed: int, reaction: str = "log-relative"
                ) -> np.ndarray:
    """A uniform sample of ``size`` reaction rows, float32 (<= size, 56), from the spectra of ``shas`` (streamed).

    The sample depends on the rows, not on the order the store holds them in (a store filled by parallel workers
    holds modules in the order they finished): each row gets a seeded pseudo-random key from its module's hash and
    its probe, and the ``size`` smallest keys are kept, in key order. Memory: two samples' rows at most.
    """
    keys = np.zeros(0, np.uint64)
    kept = np.zeros((0, 56), np.float32)
    for batch_shas, spectra in corpus.iter_spectra(probe_set, shas=shas, reaction=reaction):
        keys = np.concatenate([keys, row_keys(batch_shas, spectra.shape[1], seed)])
        kept = np.concatenate([kept, spectra.reshape(-1, 56)])
        if len(keys) > size:
            smallest = np.argpartition(keys, size)[:size]
            keys, kept = keys[smallest], kept[smallest]
    return kept[np.argsort(keys, kind="stable")]


def row_keys(shas: Sequence[str], rows_per_module: int, seed: int) -> np.ndarray:
    """Seeded pseudo-random sampling keys, uint64 (len(shas) * rows_per_module,): module-major, one per row, a
    function of (seed, module hash, row index) only."""
    keys = np.empty((len(shas), rows_per_module), np.uint64)
    for i, sha in enumerate(shas):
        digest = hashlib.blake2b(f"{seed}:{sha}".encode(), digest_size=8).digest()
        keys[i] = np.random.default_rng(int.from_bytes(digest, "little")).integers(
            0, np.iinfo(np.uint64).max, size=rows_per_module, dtype=np.uint64, endpoint=True)
    return keys.reshape(-1)


def encode_split(corpus, probe_set, quantizer, shas: Sequence[str], path: Path, reaction: str = "log-relative"
                 ) -> List[str]:
    """Encode the stored spectra of ``shas`` into ``path`` (Parquet: sha256, codes = P x M uint8 bytes, spectra =
    the P x 56 float32 reaction rows); returns the hashes of the modules written (those with a measured spectrum).

    Modules are written in hash order, in row groups of at most 4,096, whatever order the store holds them in; so
    the training stream, like the quantizer's sample, depends on the modules and not on the timing of the job that
    measured them. The sort goes through one scratch file per first character of the hash: memory holds about a
    sixteenth of the split's rows at a time.
    """
    schema = pa.schema([("sha256", pa.string()), ("codes", pa.binary()), ("spectra", pa.binary())])
    written: List[str] = []
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{path.stem}-sort-", dir=path.parent) as scratch:
        parts: Dict[str, pq.ParquetWriter] = {}
        try:
            for batch_shas, spectra in corpus.iter_spectra(probe_set, shas=shas, reaction=reaction):
                n, p, d = spectra.shape
                codes = quantizer.encode(spectra.reshape(n * p, d)).reshape(n, p, -1)          # (n, P, M)
                table = pa.table({"sha256": batch_shas, "codes": [c.tobytes() for c in codes],
                                  "spectra": [r.astype(np.float32).tobytes() for r in spectra]}, schema=schema)
                first = np.array([sha[:1] for sha in batch_shas])
                for key in sorted(set(first)):
                    if key not in parts:
                        parts[key] = pq.ParquetWriter(Path(scratch) / f"{ord(key)}.parquet", schema)
                    parts[key].write_table(table.take(np.flatnonzero(first == key)))
        finally:
            for writer in parts.values():
                writer.close()
        with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema) as writer:
            for key in sorted(parts):
                part = pq.read_table(Path(scratch) / f"{ord(key)}.parquet").sort_by("sha256")
                writer.write_table(part, row_group_size=4096)
                written.extend(part.column("sha256").to_pylist())
    return written


def prepare(store: Union[str, os.PathLike], out: Union[str, os.PathLike], config: PretrainConfig,
            probes=None, modules_like: Optional[Union[str, os.PathLike]] = None) -> dict:
    """Fit the quantizer and encode the corpus into ``out`` (skipped when ``out/prepare.json`` exists).

    Args:
        modules_like: another run folder whose train / valid / test modules to use, so that an ablation sees
            exactly the data of the run it is compared with (default: :func:`split_modules`).
    """

    out = Path(out)
    done = out / "prepare.json"
    if done.is_file():
        return read_json_bounded(done, what="run summary", error=PretrainError)
    t = config.training
    corpus = Corpus(store)
    probe_set = load_probes(probes)
    if modules_like is not None:
        splits = {name: pq.read_table(Path(modules_like) / "codes" / f"{name}.parquet", columns=["sha256"])
                  .column(0).to_pylist() for name in ("train", "valid", "test")}
    else:
        splits = split_modules(corpus, t.seed, t.validation_modules,
                               corpus.store.keys("spectra", probe_set=probe_set.hash))
    start = time.perf_counter()
    rows = sample_rows(corpus, probe_set, splits["train"], t.quantizer_rows, t.seed, t.reaction)
    if len(rows) == 0:
        raise PretrainError(f"{store}: no stored spectra for probe set {probe_set.name} among the pretraining "
                            f"modules; run: bpq corpus spectra {store}")
    quantizer = Quantizer(num_subspaces=t.quantizer_subspaces, seed=t.seed).fit(rows)
    fit_seconds = time.perf_counter() - start
    (out / "codes").mkdir(parents=True, exist_ok=True)
    quantizer.save(out / "quantizer.npz")
    probe_set.save(out / "probes.json")
    encoded = {name: encode_split(corpus, probe_set, quantizer, shas, out / "codes" / f"{name}.parquet", t.reaction)
               for name, shas in splits.items()}
    m = quantizer.num_subspaces
    valid_rows = np.concatenate([c.reshape(-1, m) for c in iter_code_arrays(out / "codes" / "valid.parquet", m)] or
                                [np.zeros((0, quantizer.num_subspaces), np.uint8)])
    summary = {
        "store": str(Path(store).resolve()), "corpus": corpus_description(corpus, encoded["train"]),
        "probe_set": probe_set.name, "probe_set_hash": probe_set.hash,
        "modules": {name: len(shas) for name, shas in encoded.items()},
        "quantizer": {"rows_fit": len(rows), "fit_seconds": round(fit_seconds, 1),
                      "relative_error_fit_rows": round(quantizer.relative_error(rows), 4),
                      "code_usage_valid": quantizer.code_usage(valid_rows) if len(valid_rows) else None},
        "prepare_seconds": round(time.perf_counter() - start, 1),
    }
    write_json_atomic(done, summary, indent=2)
    return summary


def corpus_description(corpus, shas: Sequence[str]) -> dict:
    """What the pretraining modules are: their number, counts per input origin (a module built from inputs of
    several origins counts for each), the size distribution, and the store's LLVM version."""
    wanted = set(shas)
    inputs = corpus.inputs(["sha256", "origin"])
    per_origin: Dict[str, set] = {}
    for sha, origin in zip(inputs.column("sha256").to_pylist(), inputs.column("origin").to_pylist()):
        if sha in wanted:
            per_origin.setdefault(origin or "?", set()).add(sha)
    modules = corpus.modules(["sha256", "instruction_count"])
    sizes = np.array([n for s, n in zip(modules.column(0).to_pylist(), modules.column(1).to_pylist())
                      if s in wanted])
    size = {q: int(np.quantile(sizes, v)) for q, v in (("min", 0), ("median", 0.5), ("max", 1))} if len(sizes) else {}
    return {"modules": len(wanted), "origins": {k: len(v) for k, v in sorted(per_origin.items())},
            "instruction_count": size, "llvm_version": corpus.store.manifest.get("llvm_version")}


# -- 2. streaming codes ----------------------------------------------------------------------------------------

def iter_code_arrays(path: Path, num_subspaces: int = 8) -> Iterator[np.ndarray]:
    """Codes of a Parquet code file, one uint8 (n, P, M) array per row group."""
    f = pq.ParquetFile(path)
    for g in range(f.num_row_groups):
        blobs = f.read_row_group(g, columns=["codes"]).column(0).to_pylist()
        if blobs:
            yield np.frombuffer(b"".join(blobs), np.uint8).reshape(len(blobs), -1, num_subspaces)


def read_codes(path: Path, num_subspaces: int = 8) -> np.ndarray:
    """All codes of a (small, held-out) code file: uint8 (N, P, M)."""
    arrays = list(iter_code_arrays(path, num_subspaces))
    return np.concatenate(arrays) if arrays else np.zeros((0, 0, num_subspaces), np.uint8)


def _check_spectra(path: Path) -> pq.ParquetFile:
    f = pq.ParquetFile(path)
    if "spectra" not in f.schema_arrow.names:
        raise PretrainError(f"{path}: prepared without the spectra a model of input_kind 'spectrum' reads (a run "
                            "prepared by an older version); prepare it again in a new --out")
    return f


def iter_spectrum_arrays(path: Path) -> Iterator[np.ndarray]:
    """Reaction rows of a Parquet code file, one float32 (n, P, 56) array per row group."""
    f = _check_spectra(path)
    for g in range(f.num_row_groups):
        blobs = f.read_row_group(g, columns=["spectra"]).column(0).to_pylist()
        if blobs:
            yield np.frombuffer(b"".join(blobs), np.float32).reshape(len(blobs), -1, 56)


def read_spectra(path: Path) -> np.ndarray:
    """All reaction rows of a (small, held-out) code file: float32 (N, P, 56)."""
    arrays = list(iter_spectrum_arrays(path))
    return np.concatenate(arrays) if arrays else np.zeros((0, 0, 56), np.float32)


def row_statistics(path: Path) -> tuple:
    """Per-position mean and standard deviation of the reaction rows of a code file (streamed, in float64):
    (float32 (P, 56), float32 (P, 56)), what a ``spectrum`` model standardizes its inputs with."""
    total = squares = None
    n = 0
    for array in iter_spectrum_arrays(path):                                          # (n, P, 56)
        rows = array.astype(np.float64)
        total = rows.sum(axis=0) if total is None else total + rows.sum(axis=0)
        squares = (rows ** 2).sum(axis=0) if squares is None else squares + (rows ** 2).sum(axis=0)
        n += len(rows)
    if n == 0:
        raise PretrainError(f"{path}: no modules to take input statistics from")
    mean = total / n
    return mean.astype(np.float32), np.sqrt(np.maximum(squares / n - mean ** 2, 0.0)).astype(np.float32)


class CodeStream:
    """An endless, seeded, shuffled stream of code arrays uint8 (P, M) from a Parquet code file; with
    ``spectra``, of (codes uint8 (P, M), rows float32 (P, 56)) pairs.

    Epoch e visits the row groups in a permutation drawn from (seed, e) and shuffles modules through a buffer of
    ``buffer`` modules. Process ``rank`` of ``world`` takes the stream's items rank, rank + world, ...; so the
    first B * world items of the single-process stream are, interleaved, the first B items of each process.
    """

    def __init__(self, path: Path, seed: int, buffer: int, rank: int = 0, world: int = 1, num_subspaces: int = 8,
                 spectra: bool = False):
        self.file = _check_spectra(path) if spectra else pq.ParquetFile(path)
        if self.file.metadata.num_rows == 0:
            raise PretrainError(f"{path}: no modules to train on")
        self.path, self.seed, self.buffer, self.rank, self.world = path, seed, buffer, rank, world
        self.num_subspaces, self.spectra = num_subspaces, spectra

    def _items(self, group: int) -> Iterator:
        columns = ["codes", "spectra"] if self.spectra else ["codes"]
        table = self.file.read_row_group(group, columns=columns)
        codes = (np.frombuffer(blob, np.uint8).reshape(-1, self.num_subspaces) for blob in table.column(0).to_pylist())
        if not self.spectra:
            return codes
        rows = (np.frombuffer(blob, np.float32).reshape(-1, 56) for blob in table.column(1).to_pylist())
        return zip(codes, rows)

    def _epoch(self, epoch: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        held: List[np.ndarray] = []
        for g in rng.permutation(self.file.num_row_groups):
            for item in self._items(int(g)):
                if len(held) < self.buffer:
                    held.append(item)
                    continue
                i = int(rng.integers(len(held)))
                held[i], item = item, held[i]
                yield item
        for i in rng.permutation(len(held)):
            yield held[int(i)]

    def __iter__(self) -> Iterator[np.ndarray]:
        position, epoch = 0, 0
        while True:
            for item in self._epoch(epoch):
                if position % self.world == self.rank:
                    yield item
                position += 1
            epoch += 1

    def batches(self, batch_size: int, skip: int = 0) -> Iterator:
        """Batches uint8 (batch_size, P, M) of this process's items, after skipping ``skip`` batches (resume); with
        ``spectra``, (codes uint8 (batch_size, P, M), rows float32 (batch_size, P, 56)) pairs."""
        items = iter(self)
        for _ in range(skip * batch_size):
            next(items)
        while True:
            batch = [next(items) for _ in range(batch_size)]
            if self.spectra:
                yield np.stack([c for c, _ in batch]), np.stack([r for _, r in batch])
            else:
                yield np.stack(batch)


# -- 3. training -----------------------------------------------------------------------------------------------

def global_mask(step: int, seed: int, shape: tuple, probability: float, stream: int = 0):
    """The mask of global batch ``step``: bool (B, P, M), the same in every process. ``stream`` gives another
    draw of the same batch (the kept codes of :func:`global_targets`)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step + stream)
    return torch.rand(shape, generator=generator) < probability


#: The draw of the kept codes, apart from the masks' (global_mask's ``stream``).
KEPT_STREAM = 7_919_000_017


def global_targets(step: int, seed: int, shape: tuple, t: TrainingConfig):
    """The masked codes and the codes to predict of global batch ``step``: two bool (B, P, M), the same in every
    process. The second is the first plus, with ``t.keep_probability``, codes that stay visible in the input."""
    masked = global_mask(step, seed, shape, t.mask_probability)
    if t.keep_probability == 0:
        return masked, masked
    return masked, masked | global_mask(step, seed, shape, t.keep_probability, KEPT_STREAM)


def learning_rate(step: int, t: TrainingConfig) -> float:
    """Linear warm-up to ``learning_rate`` over ``warmup_steps``, then cosine decay to ``min_lr_ratio`` of it."""
    if step < t.warmup_steps:
        return t.learning_rate * (step + 1) / t.warmup_steps
    progress = min(1.0, (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps))
    return t.learning_rate * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class MaskedLM(torch.nn.Module):
    """PQ-BERT with the masked-LM loss as its forward, so that DDP synchronizes the gradients of that loss."""

    def __init__(self, model: PQBert, pooled_weight: float = 0.0, batch_size: int = None):
        super().__init__()
        self.model, self.pooled_weight, self.batch_size = model, pooled_weight, batch_size

    def forward(self, inputs, labels, counts, masked=None):
        return masked_lm_loss(self.model, inputs, labels, counts, self.pooled_weight, self.batch_size, masked)


def mlm_accuracy(model, codes: np.ndarray, probability: float, seed: int, batch_size: int = 256,
                 device=None, spectra: Optional[np.ndarray] = None) -> dict:
    """Masked-code accuracy and loss per head on codes uint8 (N, P, M) with seeded masks (the same masks for
    the same seed), the model in eval mode. Returns {"accuracy": [M], "loss": [M], "accuracy_mean", "loss_sum"}.
    A model of input_kind "spectrum" reads ``spectra``, float32 (N, P, 56), the rows of those codes, masked by
    whole rows."""
    device = device or next(model.parameters()).device
    M = codes.shape[2]
    generator = torch.Generator().manual_seed(seed)
    ce, n, correct = torch.zeros(M, dtype=torch.float64), torch.zeros(M, dtype=torch.float64), \
        torch.zeros(M, dtype=torch.float64)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(codes), batch_size):
            batch = torch.from_numpy(codes[start:start + batch_size].astype(np.int64))
            if model.config.input_kind == "spectrum":
                rows = torch.from_numpy(np.asarray(spectra[start:start + batch_size], np.float32)).to(device)
                masked, labels = mask_rows(batch, probability, generator)
                _, s, c, k = masked_lm_loss(model, rows, labels.to(device), masked=masked.to(device))
            else:
                masked = torch.rand(batch.shape, generator=generator) < probability
                inputs = batch.masked_fill(masked, MASK_ID).to(device)
                labels = batch.masked_fill(~masked, IGNORE_INDEX).to(device)
                _, s, c, k = masked_lm_loss(model, inputs, labels)
            ce += s.double().cpu()
            n += c.double().cpu()
            correct += k.double().cpu()
    model.train(was_training)
    accuracy = (correct / n.clamp(min=1)).tolist()
    loss = (ce / n.clamp(min=1)).tolist()
    return {"accuracy": accuracy, "loss": loss, "accuracy_mean": float(np.mean(accuracy)),
            "loss_sum": float(np.sum(loss))}


def frequency_baseline(train_path: Path, codes: np.ndarray, probability: float, seed: int,
                       num_subspaces: int = 8) -> dict:
    """Accuracy per head of predicting, at each masked position, the most frequent training code of that head
    and probe position; scored on the same seeded masks as :func:`mlm_accuracy`."""
    counts = None
    for array in iter_code_arrays(train_path, num_subspaces):                       # (n, P, M)
        n, p, m = array.shape
        if counts is None:
            counts = np.zeros((p, m, 256), np.int64)
        flat = (np.arange(p * m) * 256).reshape(p, m) + array.astype(np.int64)       # (n, P, M)
        counts += np.bincount(flat.ravel(), minlength=p * m * 256).reshape(p, m, 256)
    prediction = counts.argmax(-1)                                                   # (P, M)
    generator = torch.Generator().manual_seed(seed)
    M = codes.shape[2]
    hits, total = np.zeros(M), np.zeros(M)
    for start in range(0, len(codes), 256):
        batch = codes[start:start + 256]
        masked = (torch.rand(batch.shape, generator=generator) < probability).numpy()
        right = (batch == prediction[None]) & masked
        hits += right.sum(axis=(0, 1))
        total += masked.sum(axis=(0, 1))
    accuracy = (hits / np.maximum(total, 1)).tolist()
    return {"accuracy": accuracy, "accuracy_mean": float(np.mean(accuracy))}


@dataclass
class _Distributed:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def _init_distributed(device_name: Optional[str]) -> tuple:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device_name is None:
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    if device_name == "cuda" and not torch.cuda.is_available():
        raise PretrainError("--device cuda: no CUDA device is available")
    if world == 1:
        return _Distributed(), torch.device(device_name)
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_name == "cuda" else "gloo")
    device = torch.device(f"cuda:{local_rank}") if device_name == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return _Distributed(dist.get_rank(), dist.get_world_size(), local_rank), device


LOG_FIELDS = ("step", "elapsed_s", "learning_rate", "train_loss", "train_accuracy", "valid_loss",
              "valid_accuracy", "sequences_per_s")


def train(run: Union[str, os.PathLike], config: PretrainConfig, *, device: Optional[str] = None,
          progress: bool = False, max_steps: Optional[int] = None) -> dict:
    """Train PQ-BERT on the prepared codes in ``run`` (see :func:`prepare`); resumes from ``run/train-state.pt``.

    Args:
        device: "cpu", "cuda" or None (CUDA when available).
        max_steps: stop after this many steps in this call (the schedule still follows the config), for tests.
    Returns:
        the run summary (also written to ``run/summary.json``).
    """

    run = Path(run)
    t = config.training
    dist_info, dev = _init_distributed(device)
    if t.batch_size % dist_info.world:
        raise PretrainError(f"batch_size {t.batch_size} is not divisible by the {dist_info.world} processes")
    local_batch = t.batch_size // dist_info.world
    prepared = read_json_bounded(run / "prepare.json", what="run summary", error=PretrainError)
    quantizer = Quantizer.load(run / "quantizer.npz")
    probe_set = load_probes(run / "probes.json")
    model_config = config.model_config(reaction_positions(probe_set.num_probes, t.reaction))
    if model_config.num_subspaces != quantizer.num_subspaces:
        raise PretrainError(f"model has {model_config.num_subspaces} sub-spaces, quantizer {quantizer.num_subspaces}")

    torch.manual_seed(t.seed)
    model = PQBert(model_config)
    if model_config.value_inputs:
        model.set_centroids(quantizer.centroids_)
    rows_read = model_config.input_kind == "spectrum"
    if rows_read:
        model.set_input_statistics(*row_statistics(run / "codes" / "train.parquet"))
    model = model.to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate, betas=(0.9, 0.98),
                                  weight_decay=t.weight_decay)
    state_path = run / "train-state.pt"
    step, elapsed = 0, 0.0
    if state_path.is_file():
        state = torch.load(state_path, map_location=dev, weights_only=True)
        if state["config"] != json.dumps(config.to_dict(), sort_keys=True):
            raise PretrainError(f"{state_path} was written by another configuration; use another --out")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, elapsed = int(state["step"]), float(state["elapsed"])
    wrapped = MaskedLM(model, t.pooled_weight, t.batch_size)
    if dist_info.world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(wrapped, device_ids=[dev.index] if dev.type == "cuda" else None)

    stream = CodeStream(run / "codes" / "train.parquet", t.seed, t.shuffle_buffer, dist_info.rank, dist_info.world,
                        quantizer.num_subspaces, spectra=rows_read)
    batches = stream.batches(local_batch, skip=step)
    valid = read_codes(run / "codes" / "valid.parquet", quantizer.num_subspaces)
    valid_rows = read_spectra(run / "codes" / "valid.parquet") if rows_read else None
    log_path = run / "log.csv"
    if dist_info.main and not log_path.is_file():
        with open(log_path, "w", newline="") as f:
            csv.writer(f).writerow(LOG_FIELDS)
    last = t.max_steps if max_steps is None else min(t.max_steps, step + max_steps)
    bar = None
    if progress and dist_info.main:
        from tqdm.auto import tqdm

        bar = tqdm(total=t.max_steps, initial=step, desc="pretrain", unit="step", dynamic_ncols=True)
    window = {"ce": torch.zeros(model_config.num_subspaces, dtype=torch.float64),
              "n": torch.zeros(model_config.num_subspaces, dtype=torch.float64),
              "correct": torch.zeros(model_config.num_subspaces, dtype=torch.float64), "sequences": 0}
    window_start = time.perf_counter()
    model.train()
    while step < last:
        tick = time.perf_counter()
        batch = next(batches)
        codes = torch.from_numpy((batch[0] if rows_read else batch).astype(np.int64))         # (b, P, M)
        if rows_read:                          # whole rows: draw (B, P, 1) masks, every sub-space of a row a target
            masked, predicted = global_targets(step, t.seed, (t.batch_size, codes.shape[1], 1), t)
            predicted = predicted.expand(-1, -1, codes.shape[2])                              # (B, P, M)
            row_mask = masked[dist_info.rank::dist_info.world, :, 0].to(dev)                  # (b, P)
            inputs = torch.from_numpy(batch[1]).to(dev)                                       # (b, P, 56)
        else:
            masked, predicted = global_targets(step, t.seed, (t.batch_size,) + tuple(codes.shape[1:]), t)
            row_mask = None
            inputs = codes.masked_fill(masked[dist_info.rank::dist_info.world], MASK_ID).to(dev)  # (b, P, M)
        counts = predicted.sum(dim=(0, 1)).to(torch.float32).to(dev)                          # (M,) global
        labels = codes.masked_fill(~predicted[dist_info.rank::dist_info.world], IGNORE_INDEX).to(dev)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, t)
        loss, ce, n, correct = wrapped(inputs, labels, counts, row_mask)
        optimizer.zero_grad(set_to_none=True)
        (loss * dist_info.world).backward()   # DDP averages gradients over processes: undo it to sum the loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        stats = torch.stack([ce.double().cpu(), n.double().cpu(), correct.double().cpu()])
        if dist_info.world > 1:
            import torch.distributed as dist

            dist.all_reduce(stats)
        window["ce"] += stats[0]
        window["n"] += stats[1]
        window["correct"] += stats[2]
        window["sequences"] += t.batch_size
        elapsed += time.perf_counter() - tick
        step += 1
        if bar is not None:
            bar.update(1)
        evaluate = step % t.eval_every == 0 or step == last
        if step % t.log_every == 0 or evaluate:
            row = {"step": step, "elapsed_s": round(elapsed, 2), "learning_rate": f"{learning_rate(step - 1, t):.3g}",
                   "train_loss": round(float((window["ce"] / window["n"].clamp(min=1)).sum()), 4),
                   "train_accuracy": round(float((window["correct"] / window["n"].clamp(min=1)).mean()), 4),
                   "valid_loss": "", "valid_accuracy": "",
                   "sequences_per_s": round(window["sequences"] / max(1e-9, time.perf_counter() - window_start), 1)}
            if evaluate and dist_info.main and len(valid):
                result = mlm_accuracy(model, valid, t.mask_probability, t.seed + 1, spectra=valid_rows)
                row["valid_loss"], row["valid_accuracy"] = round(result["loss_sum"], 4), round(
                    result["accuracy_mean"], 4)
                _append_jsonl(run / "eval.jsonl", {"step": step, **result})
            if dist_info.main:
                with open(log_path, "a", newline="") as f:
                    csv.writer(f).writerow([row[k] for k in LOG_FIELDS])
                if bar is not None:
                    bar.set_postfix(loss=row["train_loss"], acc=row["train_accuracy"])
            for key in ("ce", "n", "correct"):
                window[key].zero_()
            window["sequences"], window_start = 0, time.perf_counter()
        if evaluate:
            if dist_info.main:
                _save_state(state_path, model, optimizer, step, elapsed, config)
                plot_training_curve(log_path, run / "training-curve.png", model_config.num_subspaces)
            dist_info.barrier()
    if bar is not None:
        bar.close()
    summary = {"steps": step, "max_steps": t.max_steps, "train_seconds": round(elapsed, 1),
               "processes": dist_info.world, "device": dev.type, "prepared": prepared}
    if step >= t.max_steps and dist_info.main:

        final = (mlm_accuracy(model, valid, t.mask_probability, t.seed + 1, spectra=valid_rows) if len(valid)
                 else None)
        summary["valid"] = final
        save_encoder(run / "encoder", model.cpu(), quantizer, probe_set, reaction=t.reaction,
                     corpus=prepared["corpus"], seed=t.seed, training={**config.to_dict()["training"],
                                                                       "steps": step, "seconds": round(elapsed, 1),
                                                                       "processes": dist_info.world,
                                                                       "device": dev.type,
                                                                       "valid_accuracy": final})
        write_json_atomic(run / "summary.json", summary, indent=2)
    dist_info.barrier()
    return summary


def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _save_state(path: Path, model, optimizer, step: int, elapsed: float, config: PretrainConfig) -> None:
    with atomic_path(path) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                    "elapsed": elapsed, "config": json.dumps(config.to_dict(), sort_keys=True)}, tmp)


def read_log(path: Path) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_training_curve(log_path: Path, out: Path, heads: int = 8) -> None:
    """Training and validation loss (left; the sum over the ``heads`` sub-space heads) and validation masked-code
    accuracy (right) against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(log_path)
    if not rows:
        return
    step = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(step, [float(r["train_loss"]) for r in rows], label="train loss", color="tab:blue")
    valid = [r for r in rows if r["valid_loss"]]
    ax.plot([int(r["step"]) for r in valid], [float(r["valid_loss"]) for r in valid], "o-", label="valid loss",
            color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel(f"masked-LM loss (sum over {heads} heads)")
    right = ax.twinx()
    right.plot([int(r["step"]) for r in valid], [float(r["valid_accuracy"]) for r in valid], "s--",
               color="tab:green", label="valid accuracy")
    right.set_ylabel("valid masked-code accuracy (mean of heads)")
    right.set_ylim(0, 1)
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right")
    ax.set_title("PQ-BERT pretraining")
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def pretrain(store: Union[str, os.PathLike], out: Union[str, os.PathLike], config: PretrainConfig, *,
             probes=None, device: Optional[str] = None, progress: bool = False,
             max_steps: Optional[int] = None, modules_like: Optional[Union[str, os.PathLike]] = None) -> dict:
    """Prepare (rank 0) and train; see the module docstring (``modules_like``: see :func:`prepare`)."""
    dist_info, _ = _init_distributed(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "config.json"
    if dist_info.main:
        if saved.is_file() and read_json_bounded(saved, what="run config", error=PretrainError) != config.to_dict():
            raise PretrainError(f"{out} holds a run with another configuration ({saved}); use another --out")
        write_json_atomic(saved, config.to_dict(), indent=2)
        prepare(store, out, config, probes, modules_like)
    dist_info.barrier()
    return train(out, config, device=device, progress=progress, max_steps=max_steps)
