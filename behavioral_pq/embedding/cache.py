"""An on-disk cache of measured spectra, so that ``embed``, ``predict``, ``optimize --auto`` and ``spectrum`` on
the same module measure its probes once.

Content-addressed: the key is the sha256 of (prepared module bitcode hash, probe-set hash, LLVM version, pass
catalog version), so a changed module, probe set, LLVM or catalog never reads a stale entry. An entry is the
module's Autophase before and after each probe, int32 (P + 1, 56), in one ``.npy`` file written atomically
(a temporary file beside it, fsynced, then renamed over it), so concurrent processes can share the folder: at
worst two of them measure the same module and one write wins. Reading an entry refreshes its time; when the folder
grows past its bound, the least recently used entries go.

The folder is not trusted: entries and their 2-character subfolders are opened without following symlinks, an
entry must be a regular file no larger than its rows need, and an entry that is anything else (a link, a FIFO, a
folder, an empty, short, oversized or corrupt file) is removed and its module measured again. A subfolder that is
not a real folder (a link, a file) is read as empty and replaced by a new folder on the next write; links are
never followed, so neither reads, writes, time stamps nor pruning reach outside the cache. Pruning removes only
names the cache gives (``<key>.npy`` in the subfolder of the key's first two hex digits, and its own temporaries):
other files in the folder, even in a 2-character subfolder, are never counted nor removed.

Where: ``$BPQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/behavioral_pq/spectra``, else
``~/.cache/behavioral_pq/spectra``. Bound: ``$BPQ_CACHE_MAX_MB`` (default 512). Off: ``BPQ_NO_CACHE=1``, the
CLI's ``--no-cache``, or ``cache=False`` in :func:`behavioral_pq.embedding.spectrum.spectra`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import stat
import uuid
from io import BytesIO
from pathlib import Path
from typing import Iterator, Optional, Tuple

import numpy as np

from behavioral_pq.config import env_number
from behavioral_pq.core._native_loader import LLVM_VERSION
from behavioral_pq.core.catalog import CATALOG_VERSION

logger = logging.getLogger(__name__)

DEFAULT_MAX_MB = 512
_PRUNE_EVERY = 64   # puts between two size checks of the folder
_HEADER_ROOM = 4096   # bytes an entry may hold besides its rows (the .npy header: 128 bytes as numpy writes it)
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC   # NONBLOCK: a FIFO does not hang


_SUBFOLDER = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"(?P<key>[0-9a-f]{64})\.npy")
_TEMPORARY = re.compile(r"\.(?P<key>[0-9a-f]{64})\.npy\.[0-9]+-[0-9a-f]{10}\.tmp")   # as SpectrumCache._write names it


def _owned(folder: str, name: str) -> bool:
    """Whether ``name`` in the subfolder ``folder`` is a name the cache gives: an entry or a temporary of a key
    that starts with ``folder``."""
    match = _ENTRY.fullmatch(name) or _TEMPORARY.fullmatch(name)
    return match is not None and match.group("key")[:2] == folder


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
            max_mb = env_number("BPQ_CACHE_MAX_MB", float(DEFAULT_MAX_MB), minimum=0, allow_minimum=False)
            max_bytes = max(1, int(max_mb * (1 << 20)))
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
        """int64 (P + 1, 56) Autophase rows of the module, or None when not cached (or the entry was unusable and
        has been removed)."""
        key = self.key(module_sha256, probe_set_hash)
        try:
            folder = self._open_folder(key[:2], create=False)
        except OSError as exc:
            logger.warning("spectrum cache: cannot open %s (%s)", self.directory / key[:2], exc)
            return None
        if folder is None:
            return None
        try:
            return self._read(folder, f"{key}.npy", num_probes)
        finally:
            os.close(folder)

    def _read(self, folder: int, name: str, num_probes: int) -> Optional[np.ndarray]:
        """The entry ``name`` of the subfolder open as ``folder``, read without following a link and at most as
        many bytes as (P + 1, 56) int32 rows take; an unusable entry is removed."""
        try:
            fd = os.open(name, _ENTRY_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as exc:   # ELOOP: a symlink
            return self._drop(folder, name, exc.strerror)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return self._drop(folder, name, "not a regular file")
            limit = (num_probes + 1) * 56 * 4 + _HEADER_ROOM
            if info.st_size > limit:
                return self._drop(folder, name, f"{info.st_size} bytes, more than {limit}")
            chunks, left = [], limit + 1
            while left > 0:
                chunk = os.read(fd, left)
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            try:
                rows = np.load(BytesIO(b"".join(chunks)), allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:   # EOFError: an empty file
                return self._drop(folder, name, str(exc) or type(exc).__name__)
            if rows.shape != (num_probes + 1, 56) or rows.dtype != np.int32:
                return self._drop(folder, name, f"shape {rows.shape} {rows.dtype}")
            with contextlib.suppress(OSError):
                os.utime(fd)   # least recently used goes first; on the file itself, never a link's target
            return rows.astype(np.int64)
        except OSError as exc:
            return self._drop(folder, name, str(exc))
        finally:
            os.close(fd)

    def _drop(self, folder: int, name: str, why: str) -> None:
        logger.warning("spectrum cache: dropping unusable entry %s (%s)", self.directory / name[:2] / name, why)
        try:
            os.unlink(name, dir_fd=folder)   # a link itself, not its target
        except IsADirectoryError:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=folder)
        except OSError:
            pass
        return None

    def _open_folder(self, name: str, create: bool) -> Optional[int]:
        """A descriptor of the subfolder ``name``, opened without following a link, or None when there is no
        real folder of that name. ``create``: make it, replacing a link or a file of that name (never None; an
        OSError when that fails)."""
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        try:
            top = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if create:
                raise
            return None
        try:
            for _ in range(3):   # other writers may fix the same folder at the same time
                try:
                    return os.open(name, _FOLDER_FLAGS, dir_fd=top)
                except FileNotFoundError:
                    if not create:
                        return None
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    logger.warning("spectrum cache: %s is not a folder (a link or a file)%s",
                                   self.directory / name, "; replacing it" if create else "")
                    if not create:
                        return None
                    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                        os.unlink(name, dir_fd=top)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=top)
            return os.open(name, _FOLDER_FLAGS, dir_fd=top)
        finally:
            os.close(top)

    def put(self, module_sha256: str, probe_set_hash: str, autophase: np.ndarray) -> None:
        """Store int (P + 1, 56) Autophase rows of a measured module. Failures to write are logged, not raised:
        the cache only ever saves time."""
        rows = np.asarray(autophase)
        if rows.ndim != 2 or rows.shape[1] != 56:
            raise ValueError(f"cache rows must have shape (P + 1, 56), got {rows.shape}")
        key = self.key(module_sha256, probe_set_hash)
        buffer = BytesIO()
        np.save(buffer, rows.astype(np.int32), allow_pickle=False)
        try:
            folder = self._open_folder(key[:2], create=True)
            try:
                self._write(folder, f"{key}.npy", buffer.getvalue())
            finally:
                os.close(folder)
        except OSError as exc:
            logger.warning("spectrum cache: cannot write %s (%s)", self._path(key), exc)
            return
        self._puts += 1
        if self._puts % _PRUNE_EVERY == 1:
            self.prune()

    @staticmethod
    def _write(folder: int, name: str, data: bytes) -> None:
        """Write ``name`` in the subfolder open as ``folder`` atomically: a new temporary file, fsynced, renamed
        over the name (a link of that name is replaced, not followed)."""
        tmp = f".{name}.{os.getpid()}-{uuid.uuid4().hex[:10]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise

    def _entries(self) -> Iterator[Tuple[os.stat_result, Path]]:
        """(lstat, path) of every file the cache named in its real subfolders: entries (``<key>.npy``), and
        temporaries a killed writer left. Nothing else is listed (so nothing else is ever pruned: the folder may
        be shared with other files); links are listed, never followed."""
        try:
            with os.scandir(self.directory) as top:
                folders = [f for f in top if _SUBFOLDER.fullmatch(f.name) and f.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return
        for folder in folders:
            try:
                with os.scandir(folder.path) as entries:
                    found = [e for e in entries if _owned(folder.name, e.name) and not e.is_dir(follow_symlinks=False)]
            except OSError:   # removed or replaced meanwhile
                continue
            for entry in found:
                try:
                    yield entry.stat(follow_symlinks=False), Path(entry.path)
                except FileNotFoundError:   # another process pruned it
                    continue

    def _remove(self, path: Path) -> None:
        """Remove an entry of :meth:`_entries` through its subfolder opened again, so that a subfolder replaced by
        a link meanwhile is not followed."""
        try:
            folder = self._open_folder(path.parent.name, create=False)
        except OSError:
            return
        if folder is not None:
            with contextlib.suppress(OSError):
                os.unlink(path.name, dir_fd=folder)
            os.close(folder)

    def size(self) -> int:
        """Bytes held by the entries."""
        return sum(info.st_size for info, _ in self._entries())

    def prune(self) -> int:
        """Remove the least recently used entries until the folder is within 90% of its bound; returns how many
        were removed."""
        entries = [(info.st_mtime, info.st_size, path) for info, path in self._entries()]
        total = sum(size for _, size, _ in entries)
        removed = 0
        if total <= self.max_bytes:
            return 0
        for _, size, path in sorted(entries):
            if total <= 0.9 * self.max_bytes:
                break
            self._remove(path)
            total -= size
            removed += 1
        return removed


def default_cache() -> Optional[SpectrumCache]:
    """The cache the verbs use, or None when it is turned off (``BPQ_NO_CACHE``)."""
    return SpectrumCache() if cache_enabled() else None
