"""Writing files: the one way every artifact and every output a user names is written.

- :func:`check_output_file` checks a path the user named for an output before any work starts: its folder exists
  and takes new files, it is not a folder, a device or a FIFO, and not a symbolic link unless ``overwrite``
  (then the link's target is what gets written). Each refusal is one line naming the user's path.
- :func:`check_output_folder` does the same for a folder of outputs (``--out DIR``).
- :func:`atomic_path` writes a file or a folder all at once: a unique temporary name beside the target (pid +
  random suffix, so two writers never share one), fsync, then an atomic replace; on an error (a full disk
  included) nothing is left behind and the old file is untouched. :func:`write_bytes_atomic`,
  :func:`write_text_atomic` and :func:`write_json_atomic` wrap it for single files.

:mod:`behavioral_pq.artifacts` re-exports the writers; they live here so that the core (``Module.save``, the
linker's output) writes as every artifact does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Iterator, Optional, Union

from behavioral_pq.errors import OutputPathError

PathLike = Union[str, os.PathLike]


# -- checks before the work ----------------------------------------------------------------------------------------

def check_output_file(path: PathLike, *, overwrite: bool = False) -> Path:
    """The file to write for an output the user named ``path``, checked before any work is done.

    A regular file at ``path`` is fine (it is replaced whole). A symbolic link is refused unless ``overwrite``: then
    its target (resolved, even when it does not exist yet) is the file written and returned, and the link stays.
    The folder is tried by creating and removing an empty file in it, since ``os.access`` says yes to root for
    ``/sys`` and ``/proc``, which take no new files.

    Returns:
        the path to write: ``path``, or the link's target with ``overwrite``.
    Raises:
        OutputPathError: ``path`` is a symbolic link (without ``overwrite``), a device, a FIFO or a socket.
        IsADirectoryError: ``path`` is a folder.
        FileNotFoundError, NotADirectoryError: its folder does not exist, or is not a folder.
        PermissionError: its folder does not take new files.
    """
    given = Path(path)
    target = given
    if given.is_symlink():
        if not overwrite:
            raise OutputPathError(f"{given}: is a symbolic link (to {os.readlink(given)}); refusing to write "
                                  "through it (remove it, or pass --overwrite / overwrite=True to write its target)")
        target = Path(os.path.realpath(given))
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):   # new, or its folder is refused below
        mode = None
    except OSError as exc:   # a link loop, a folder that cannot be searched
        raise PermissionError(f"{given}: cannot write there ({exc.strerror})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{given}: is a folder (give a file name)")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputPathError(f"{given}: is not a regular file (a device, FIFO or socket); refusing to replace it")
    parent = target.parent
    if not parent.exists():
        raise FileNotFoundError(f"{given}: cannot write there: no folder {parent}")
    if not parent.is_dir():
        raise NotADirectoryError(f"{given}: cannot write there: {parent} is not a folder")
    _check_takes_files(given, parent)
    return target


def check_output_folder(path: PathLike) -> Path:
    """A folder the user named for outputs (``--out DIR``; made when missing, resumed or added to when present),
    checked before any work is done: it is a folder or can become one, and it (or the nearest folder above it that
    exists) takes new files. A symbolic link to a folder is fine (a run kept on another disk); a link to nothing
    is refused. Returns ``path``.

    Raises:
        NotADirectoryError: ``path``, or the nearest existing path above it, is not a folder.
        OutputPathError: ``path`` is a symbolic link to nothing.
        PermissionError: the folder does not take new files.
    """
    given = Path(path)
    if given.is_symlink() and not given.exists():
        raise OutputPathError(f"{given}: is a symbolic link to nothing ({os.readlink(given)}); refusing to make a "
                              "folder through it")
    if given.exists() and not given.is_dir():
        raise NotADirectoryError(f"{given}: is not a folder (give a folder for the outputs)")
    existing = given
    while not existing.exists():
        if existing.is_symlink():
            raise OutputPathError(f"{given}: cannot write there: {existing} is a symbolic link to nothing")
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(f"{given}: cannot write there: {existing} is not a folder")
    _check_takes_files(given, existing)
    return given


def _check_takes_files(given: Path, folder: Path) -> None:
    """Refuse ``given`` (for its message) unless ``folder`` takes a new file: ``os.access`` first, then a real
    one, made and removed, since ``os.access`` says yes to root for ``/sys`` and ``/proc``."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{given}: cannot write there: {folder} is not writable")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".bpq-check-")
    except OSError as exc:
        raise PermissionError(f"{given}: cannot write there: {folder} takes no new files ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


# -- atomic writes -------------------------------------------------------------------------------------------------

def _temporary_name(path: Path) -> Path:
    """A name beside ``path`` that no other writer uses; keeps the suffix (matplotlib picks the format by it)."""
    return path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:10]}.tmp{path.suffix}")


def _fsync_tree(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        with open(file, "rb") as f:
            os.fsync(f.fileno())


def _fsync_folder(folder: Path) -> None:
    """Make a replace in ``folder`` durable (best effort: not every file system can sync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Write a file or a folder at ``path`` all at once.

    Yields a temporary path beside ``path`` (nothing exists there yet: create a file or a folder at it). When the
    block ends normally, its content is fsynced and replaces ``path`` (an existing folder is moved aside first and
    removed after the replace, so readers see the old or the new artifact, never a mix; a symbolic link is
    replaced, never written through). When the block raises, the temporary is removed and ``path`` is left as it
    was; an OSError while writing the temporary (a full disk, a folder that takes no files) names ``path``.

    Raises:
        OutputPathError: ``path`` is a device, a FIFO or a socket (never replaced).
    """
    path = Path(path)
    if not path.is_symlink() and path.exists() and not (path.is_file() or path.is_dir()):
        raise OutputPathError(f"{path}: is not a regular file (a device, FIFO or socket); refusing to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary_name(path)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"{tmp}: nothing was written for {path}")
        _fsync_tree(tmp)
        old: Optional[Path] = None
        if path.is_dir() and not path.is_symlink():
            old = _temporary_name(path.with_name(path.name + ".old"))
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        _fsync_folder(path.parent)
    except OSError as exc:
        _remove(tmp)
        about_tmp = exc.filename is None or Path(exc.filename) == tmp
        if about_tmp and exc.errno is not None and type(exc).__module__ == "builtins":
            error = type(exc)(f"{path}: cannot write it ({exc.strerror or os.strerror(exc.errno)}); nothing was "
                              "changed")
            error.errno = exc.errno
            raise error from None
        raise
    except BaseException:
        _remove(tmp)
        raise


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: PathLike, data, *, indent: Optional[int] = 1) -> Path:
    """Write ``data`` as JSON (with a final newline) to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(data, f, indent=indent)
        f.write("\n")
    return Path(path)
