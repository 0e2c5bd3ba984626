"""The vocabulary: a product quantizer that turns reaction rows (56 floats) into 8 byte codes.

Each row of a spectrum (one probe's reaction, 56 log-relative feature changes) is split into M = 8 sub-vectors of
7 dimensions; each sub-vector is replaced by the index of its nearest of 256 centroids (k-means per sub-space,
faiss). A P x 56 spectrum becomes P x 8 codes, the "sub-words" PQ-BERT reads.

    >>> q = Quantizer(seed=0).fit(rows)        # rows: float32 (N, 56), N >= 256
    >>> codes = q.encode(rows)                 # uint8 (N, 8)
    >>> approx = q.decode(codes)               # float32 (N, 56)
    >>> q.save("quantizer.npz"); Quantizer.load("quantizer.npz")

The saved file is portable: a NumPy ``.npz`` with the centroids and a JSON header (no faiss index format).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Union

import numpy as np

from behavioral_pq.artifacts import QUANTIZER_LIMIT, parse_json_bounded, read_bounded, write_bytes_atomic
from behavioral_pq.errors import QuantizerError

logger = logging.getLogger(__name__)

FORMAT = "bpq-quantizer"
FORMAT_VERSION = 1
MIN_ROWS = 256            # fewer rows than centroids: k-means is not defined
ROWS_PER_CENTROID = 40    # below this, warn: centroids are fitted on too little data


class Quantizer:
    """Product quantizer over reaction rows (faiss ``ProductQuantizer``), with scikit-learn manners.

    Args:
        dim: row dimension (56, the Autophase features).
        num_subspaces: M, sub-vectors per row; ``dim`` must be divisible by it.
        bits: bits per code (8: 256 centroids per sub-space).
        seed: seed of the k-means initialization.
        iterations: k-means iterations per sub-space.

    Fitted attributes:
        centroids_: float32 (M, 2**bits, dim / M).
        num_rows_fit_: rows the quantizer was fitted on.
    """

    def __init__(self, dim: int = 56, num_subspaces: int = 8, bits: int = 8, seed: int = 0, iterations: int = 25):
        if dim % num_subspaces:
            raise ValueError(f"dim {dim} is not divisible by num_subspaces {num_subspaces}")
        if not 1 <= bits <= 8:
            raise ValueError(f"bits must be in 1..8 (codes are uint8), got {bits}")
        self.dim, self.num_subspaces, self.bits = dim, num_subspaces, bits
        self.seed, self.iterations = seed, iterations
        self._pq = None

    @property
    def codebook_size(self) -> int:
        return 1 << self.bits

    @property
    def subspace_dim(self) -> int:
        return self.dim // self.num_subspaces

    # -- fitting -------------------------------------------------------------------------------------------------

    def fit(self, rows: np.ndarray) -> "Quantizer":
        """Fit the centroids on reaction rows, float (N, dim); returns self.

        Raises:
            QuantizerError: fewer than 256 rows, or rows that are not finite.
        """
        rows = self._rows(rows)
        if len(rows) < max(MIN_ROWS, self.codebook_size):
            raise QuantizerError(f"cannot fit {self.codebook_size} centroids per sub-space on {len(rows)} rows "
                                 f"(need at least {max(MIN_ROWS, self.codebook_size)})")
        if len(rows) < ROWS_PER_CENTROID * self.codebook_size:
            logger.warning("fitting %d centroids per sub-space on %d rows (%.1f per centroid, fewer than %d): "
                           "codes will be noisy", self.codebook_size, len(rows), len(rows) / self.codebook_size,
                           ROWS_PER_CENTROID)
        import faiss

        pq = faiss.ProductQuantizer(self.dim, self.num_subspaces, self.bits)
        pq.cp.seed = self.seed
        pq.cp.niter = self.iterations
        pq.verbose = False
        pq.train(rows)
        self._pq = pq
        self.centroids_ = faiss.vector_to_array(pq.centroids).reshape(
            self.num_subspaces, self.codebook_size, self.subspace_dim).astype(np.float32)
        self.num_rows_fit_ = int(len(rows))
        return self

    @property
    def fitted(self) -> bool:
        return hasattr(self, "centroids_")

    # -- coding --------------------------------------------------------------------------------------------------

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """Codes of rows: float (N, dim) -> uint8 (N, M), the nearest centroid per sub-space."""
        rows = self._rows(rows)
        pq = self._faiss()
        return pq.compute_codes(rows).reshape(len(rows), self.num_subspaces).astype(np.uint8, copy=False)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Reconstruction of codes: uint8 (N, M) -> float32 (N, dim), the concatenated centroids."""
        self._check_fitted()
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.num_subspaces:
            raise ValueError(f"codes must have shape (N, {self.num_subspaces}), got {codes.shape}")
        if codes.dtype != np.uint8:
            if codes.size and (codes.min() < 0 or codes.max() >= self.codebook_size):
                raise ValueError(f"codes must be in 0..{self.codebook_size - 1}")
            codes = codes.astype(np.uint8)
        parts = [self.centroids_[m][codes[:, m]] for m in range(self.num_subspaces)]  # M x (N, dim / M)
        return np.concatenate(parts, axis=1) if parts else np.zeros((0, self.dim), np.float32)

    # -- diagnostics ---------------------------------------------------------------------------------------------

    def relative_error(self, rows: np.ndarray) -> float:
        """Relative MSE of the round trip: sum |x - decode(encode(x))|^2 / sum |x - mean(x)|^2 (0 is perfect,
        1 is no better than predicting the mean row)."""
        rows = self._rows(rows)
        error = np.square(rows - self.decode(self.encode(rows)), dtype=np.float64).sum()
        spread = np.square(rows - rows.mean(axis=0), dtype=np.float64).sum()
        return float(error / spread) if spread > 0 else float(error > 0)

    def code_usage(self, codes: np.ndarray) -> dict:
        """Per sub-space: the fraction of the 256 codes that occur, and the perplexity (exp of the entropy) of
        their distribution, for codes uint8 (N, M)."""
        codes = np.asarray(codes)
        used, perplexity = [], []
        for m in range(self.num_subspaces):
            counts = np.bincount(codes[:, m], minlength=self.codebook_size).astype(np.float64)
            p = counts[counts > 0] / max(1.0, counts.sum())
            used.append(float((counts > 0).mean()))
            perplexity.append(float(np.exp(-(p * np.log(p)).sum())) if len(p) else 0.0)
        return {"used_fraction": used, "perplexity": perplexity}

    # -- files ---------------------------------------------------------------------------------------------------

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write the quantizer as ``.npz`` (centroids float32 (M, 256, dim / M) plus a JSON header)."""
        self._check_fitted()
        path = Path(path)
        header = {"format": FORMAT, "version": FORMAT_VERSION, "dim": self.dim, "num_subspaces": self.num_subspaces,
                  "bits": self.bits, "seed": self.seed, "iterations": self.iterations,
                  "num_rows_fit": self.num_rows_fit_, "centroids_sha256": _digest(self.centroids_)}
        buffer = io.BytesIO()
        np.savez(buffer, centroids=self.centroids_, header=np.frombuffer(json.dumps(header).encode(), np.uint8))
        return write_bytes_atomic(path, buffer.getvalue())

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Quantizer":
        """Read a quantizer written by :meth:`save`.

        Raises:
            QuantizerError: missing file, not a regular file or over QUANTIZER_LIMIT, not a quantizer, another
                format version, centroids that fail their checksum (a corrupt file) or are not finite.
        """
        path = Path(path)
        if not os.path.lexists(path):
            raise QuantizerError(f"{path}: no such quantizer file")
        arrays = _npz_arrays(read_bounded(path, limit=QUANTIZER_LIMIT, what="quantizer file", error=QuantizerError),
                             path)
        header = parse_json_bounded(arrays["header"].tobytes(), origin=path, what="quantizer header",
                                    error=QuantizerError)
        centroids = arrays["centroids"].astype(np.float32)
        if not isinstance(header, dict):
            raise QuantizerError(f"{path}: not a quantizer file (its header is not a JSON object)")
        if header.get("format") != FORMAT:
            raise QuantizerError(f"{path}: not a quantizer file (format {header.get('format')!r})")
        if header.get("version") != FORMAT_VERSION:
            raise QuantizerError(f"{path}: quantizer format version {header.get('version')} is not supported "
                                 f"(this package reads version {FORMAT_VERSION})")
        q = cls(header["dim"], header["num_subspaces"], header["bits"], header["seed"], header["iterations"])
        expected = (q.num_subspaces, q.codebook_size, q.subspace_dim)
        if centroids.shape != expected or _digest(centroids) != header.get("centroids_sha256"):
            raise QuantizerError(f"{path}: centroids do not match their checksum (corrupt file)")
        if not np.isfinite(centroids).all():
            raise QuantizerError(f"{path}: centroids hold NaN or infinite values (every code would embed as NaN)")
        q.centroids_, q.num_rows_fit_ = centroids, int(header["num_rows_fit"])
        return q

    # -- helpers -------------------------------------------------------------------------------------------------

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"rows must have shape (N, {self.dim}), got {rows.shape}")
        if not np.isfinite(rows).all():
            raise QuantizerError("rows contain NaN or infinite values (a failed spectrum?)")
        return rows

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise QuantizerError("this quantizer is not fitted yet: call fit() or Quantizer.load()")

    def _faiss(self):
        self._check_fitted()
        if self._pq is None:
            import faiss

            pq = faiss.ProductQuantizer(self.dim, self.num_subspaces, self.bits)
            faiss.copy_array_to_vector(self.centroids_.ravel(), pq.centroids)
            self._pq = pq
        return self._pq

    def __repr__(self) -> str:
        state = f"fitted on {self.num_rows_fit_} rows" if self.fitted else "not fitted"
        return f"Quantizer(dim={self.dim}, num_subspaces={self.num_subspaces}, bits={self.bits}, {state})"


def _npz_arrays(data: bytes, path: Path) -> dict:
    """{"centroids", "header"} arrays of a quantizer's ``.npz`` bytes; each member's shape is checked against its
    stored size before numpy allocates it (``np.load`` trusts the shape an ``.npy`` header claims)."""
    from numpy.lib import format as npy

    arrays = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = {info.filename: info for info in archive.infolist()}
            if set(members) != {"centroids.npy", "header.npy"}:
                raise ValueError(f"members {sorted(members)[:4]}, expected centroids.npy and header.npy")
            for name, info in members.items():
                if info.file_size > QUANTIZER_LIMIT:
                    raise ValueError(f"{name} unpacks to {info.file_size} bytes")
                with archive.open(info) as f:
                    read_header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(
                        npy.read_magic(f))
                    if read_header is None:
                        raise ValueError(f"{name} is not in .npy format 1.0 or 2.0")
                    shape, fortran, dtype = read_header(f)
                    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                    if dtype.kind not in "biuf" or count * dtype.itemsize > info.file_size:
                        raise ValueError(f"{name} claims {dtype} {shape} in {info.file_size} bytes")
                    body = f.read()
                if len(body) != count * dtype.itemsize:
                    raise ValueError(f"{name} holds {len(body)} bytes for {dtype} {shape}")
                array = np.frombuffer(body, dtype=dtype)
                arrays[name[:-4]] = array.reshape(shape, order="F" if fortran else "C")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise QuantizerError(f"{path}: not a readable quantizer file ({type(exc).__name__}: {exc})") from None
    return arrays


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.float32).tobytes()).hexdigest()
