"""An on-disk cache of measured spectra, so that ``embed``, ``predict``, ``optimize --auto`` and ``spectrum`` on
the same module measure its probes once.

Content-addressed: the key is the sha256 of (prepared module bitcode hash, probe-set hash, LLVM version, pass
catalog version), so a changed module, probe set, LLVM or catalog never reads a stale entry. An entry is the
module's Autophase before and after each probe, int32 (P + 1, 56), in one ``.npy`` file written atomically
(:func:`behavioral_pq.artifacts.atomic_path`), so concurrent processes can share the folder: at worst two of
them measure the same module and one write wins. Reading an entry refreshes its time; when the folder grows past
its bound, the least recently used entries go. A corrupt entry is removed and measured again.

Where: ``$BPQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/behavioral_pq/spectra``, else
``~/.cache/behavioral_pq/spectra``. Bound: ``$BPQ_CACHE_MAX_MB`` (default 512). Off: ``BPQ_NO_CACHE=1``, the
CLI's ``--no-cache``, or ``cache=False`` in :func:`behavioral_pq.embedding.spectrum.spectra`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from io import BytesIO
from pathlib import Path
from typing import Optional

import numpy as np

from behavioral_pq.artifacts import write_bytes_atomic
from behavioral_pq.core._native_loader import LLVM_VERSION
from behavioral_pq.core.catalog import CATALOG_VERSION

logger = logging.getLogger(__name__)

DEFAULT_MAX_MB = 512
_PRUNE_EVERY = 64   # puts between two size checks of the folder


def cache_directory() -> Path:
    """Where the spectrum cache lives (see the module docstring)."""
    if os.environ.get("BPQ_CACHE_DIR"):
        return Path(os.environ["BPQ_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "behavioral_pq" / "spectra"


def cache_enabled() -> bool:
    """False when ``BPQ_NO_CACHE`` is set to anything but ``0`` or an empty string."""
    return os.environ.get("BPQ_NO_CACHE", "") in ("", "0")


class SpectrumCache:
    """Autophase rows of measured modules, keyed by content (see the module docstring).

    Args:
        directory: the cache folder (default :func:`cache_directory`).
        max_bytes: the folder's bound (default ``$BPQ_CACHE_MAX_MB`` MiB, else 512 MiB).
    """

    def __init__(self, directory: Optional[os.PathLike] = None, max_bytes: Optional[int] = None):
        self.directory = Path(directory) if directory is not None else cache_directory()
        if max_bytes is None:
            max_bytes = int(float(os.environ.get("BPQ_CACHE_MAX_MB", DEFAULT_MAX_MB)) * (1 << 20))
        if max_bytes <= 0:
            raise ValueError(f"the cache bound must be positive, got {max_bytes} bytes")
        self.max_bytes = max_bytes
        self._puts = 0

    @staticmethod
    def key(module_sha256: str, probe_set_hash: str) -> str:
        parts = ["bpq-spectrum-1", module_sha256, probe_set_hash, LLVM_VERSION, CATALOG_VERSION]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.npy"

    def get(self, module_sha256: str, probe_set_hash: str, num_probes: int) -> Optional[np.ndarray]:
        """int64 (P + 1, 56) Autophase rows of the module, or None when not cached (or the entry is corrupt)."""
        path = self._path(self.key(module_sha256, probe_set_hash))
        try:
            with open(path, "rb") as f:
                rows = np.load(f, allow_pickle=False)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("spectrum cache: dropping unreadable entry %s (%s)", path, exc)
            path.unlink(missing_ok=True)
            return None
        if rows.shape != (num_probes + 1, 56) or rows.dtype != np.int32:
            logger.warning("spectrum cache: dropping entry %s of shape %s %s", path, rows.shape, rows.dtype)
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)   # least recently used goes first
        except OSError:
            pass
        return rows.astype(np.int64)

    def put(self, module_sha256: str, probe_set_hash: str, autophase: np.ndarray) -> None:
        """Store int (P + 1, 56) Autophase rows of a measured module. Failures to write are logged, not raised:
        the cache only ever saves time."""
        rows = np.asarray(autophase)
        if rows.ndim != 2 or rows.shape[1] != 56:
            raise ValueError(f"cache rows must have shape (P + 1, 56), got {rows.shape}")
        path = self._path(self.key(module_sha256, probe_set_hash))
        try:
            buffer = BytesIO()
            np.save(buffer, rows.astype(np.int32), allow_pickle=False)
            write_bytes_atomic(path, buffer.getvalue())
        except OSError as exc:
            logger.warning("spectrum cache: cannot write %s (%s)", path, exc)
            return
        self._puts += 1
        if self._puts % _PRUNE_EVERY == 1:
            self.prune()

    def size(self) -> int:
        """Bytes held by the entries."""
        return sum(p.stat().st_size for p in self.directory.glob("??/*.npy"))

    def prune(self) -> int:
        """Remove the least recently used entries until the folder is within 90% of its bound; returns how many
        were removed."""
        entries = []
        for path in self.directory.glob("??/*.npy"):
            try:
                stat = path.stat()
            except FileNotFoundError:   # another process pruned it
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total <= self.max_bytes:
            return 0
        for _, size, path in sorted(entries):
            if total <= 0.9 * self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            removed += 1
        return removed


def default_cache() -> Optional[SpectrumCache]:
    """The cache the verbs use, or None when it is turned off (``BPQ_NO_CACHE``)."""
    return SpectrumCache() if cache_enabled() else None
