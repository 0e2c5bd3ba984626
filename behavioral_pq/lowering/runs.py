"""Checked runs of a whole program: what it is given (:class:`RunInput`) and what it leaves behind (:func:`written`).

A :class:`~behavioral_pq.lowering.harness.ProgramHarness` runs the program in the sandbox, which shows it only
``/usr`` and a new empty working folder. What the user names for the run is shown too, at the paths the program
will open, read-only unless named writable:

* an argument that names an existing file or folder (the whole word, or what follows the first ``=`` of
  ``--flag=PATH``): an absolute path at the same path; a relative one (to the folder the command was started in)
  at the same relative path inside the run's working folder, so the program opens it as typed;
* ``folders``: folders the program reads without naming them in its arguments (same rules);
* ``writable``: the one folder the program may write to: each run gets a copy of its own, read-write, and the
  user's folder is never touched (the run's changes to the copy are compared: created, changed and deleted
  files);
* ``stdin``: a file that becomes the program's standard input (its descriptor is passed, nothing is bound).

Any other path is not there for the program. What the run writes in its working folder (and the files it
creates, changes or deletes in its copy of the writable folder) is part of its result: :func:`written` reads it
back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import hashlib
import os
import stat
import struct
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from behavioral_pq.core.toolchain import check_link_flags, library_folders
from behavioral_pq.lowering.sandbox import Bind

#: Folders the sandbox shows anyway: a path under them needs no bind.
VISIBLE = (Path("/usr"), Path("/dev"), Path("/proc"))
#: Written files larger than this are compared by digest only (smaller text files tolerate float rounding).
MAX_TEXT_BYTES = 1 << 20
#: Folder levels below a run's working folder (or writable folder) that are read back; a deeper tree counts as
#: one entry saying so (what lies deeper is not compared).
MAX_DEPTH = 64
#: The largest writable folder: every run (the reference's, each candidate's, each timed one) works on a copy.
MAX_WRITABLE_BYTES = 1 << 30
#: The digest of :func:`written`'s entry for a file a run deleted from the writable folder.
DELETED = "deleted"

#: How :func:`written` names a file of the writable folder (``writable:out/log.txt``), apart from the working
#: folder's and without the user's paths (which verdicts fed back to a model must not show).
WRITABLE = "writable:"

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass(frozen=True)
class RunInput:
    """What a checked program is run with, and what its reference run must do (see the module docstring).

    Args:
        args: the program's arguments; those that name existing files or folders are shown read-only.
        stdin: a file read as standard input (default: empty).
        folders: more folders shown read-only.
        writable: the one folder shown read-write.
        expect_exit: the exit status the reference run must end with (default 0; another status stops the check).
        compare_stderr: compare standard error too (stdout, the exit status and written files always are).
        base: the folder relative paths are relative to (default: the current folder when the input is made).
        link_flags: what the program is linked with besides libc and libm (``-lz``, ``-L DIR``: see
            :func:`~behavioral_pq.core.toolchain.check_link_flags`, which checks them and makes ``-L`` folders
            absolute); an ``-L`` folder outside ``/usr`` is shown read-only to the link, not to the run.

    Raises:
        FileNotFoundError, NotADirectoryError, ValueError: a named file or folder is missing or cannot be shown
            (``/``, a relative path that leaves ``base``, ``.`` itself: the run's working folder is its own), or a
            link flag is refused.
    """

    args: Tuple[str, ...] = ()
    stdin: Optional[Path] = None
    folders: Tuple[Path, ...] = ()
    writable: Optional[Path] = None
    expect_exit: Optional[int] = None
    compare_stderr: bool = False
    base: Optional[Path] = None
    link_flags: Tuple[str, ...] = ()
    binds: Tuple[Bind, ...] = dataclasses.field(init=False, default=(), compare=False)

    def __post_init__(self):
        base = Path(os.path.abspath(self.base if self.base is not None else os.getcwd()))
        set_ = object.__setattr__
        set_(self, "base", base)
        set_(self, "args", tuple(str(a) for a in self.args))
        set_(self, "link_flags", check_link_flags(self.link_flags, base=base, what="link flags"))
        if self.expect_exit is not None and not 0 <= int(self.expect_exit) <= 255:
            raise ValueError(f"an exit status is 0..255, got {self.expect_exit}")
        if self.stdin is not None:
            stdin = base / Path(self.stdin).expanduser()
            if not stdin.exists():
                raise FileNotFoundError(f"{self.stdin}: no such file (the checked run's stdin)")
            if not stdin.is_file():
                raise ValueError(f"{self.stdin}: the checked run's stdin must be a regular file")
            set_(self, "stdin", stdin)
        binds: Dict[Path, Bind] = {}
        for word in self.args:
            for text in _path_words(word):
                if os.path.exists(base / text):
                    self._add(binds, text, writable=False)
        for folder in self.folders:
            self._add(binds, _folder(base, folder), writable=False)
        if self.writable is not None:
            self._add(binds, _folder(base, self.writable), writable=True)
            room = next(b.source for b in binds.values() if b.writable)   # what it holds stays writable
            binds = {t: b for t, b in binds.items() if b.writable or not _under(b.source, room)}
        set_(self, "folders", tuple(Path(f) for f in self.folders))
        set_(self, "binds", tuple(binds.values()))

    def _add(self, binds: Dict[Path, Bind], text: PathLike, writable: bool) -> None:
        path = Path(os.path.normpath(text))
        if path == Path("/") or Path(os.path.realpath(self.base / path)) == Path("/"):
            shown = "/" if path == Path("/") else f"{text} (a link to /)"
            raise ValueError(f"{shown}: the whole file system cannot be shown to the checked run; name the files "
                             "it reads")
        if path.is_absolute():
            if not writable and any(_under(Path(os.path.realpath(path)), v) for v in VISIBLE):
                return
            target = path
        elif ".." in Path(text).parts:
            raise ValueError(f"{text}: a relative path out of the current folder cannot be shown to the checked run "
                             "at the same relative path; give it as an absolute path")
        elif path == Path("."):
            raise ValueError(f"{text}: the checked run starts in a new empty folder of its own; name the files and "
                             "folders it reads instead of the current folder")
        else:
            target = path
        source = Path(os.path.realpath(self.base / path))
        if target not in binds or writable:
            binds[target] = Bind(source, target, writable)

    @property
    def given(self) -> bool:
        """Whether the run is given anything (arguments, stdin, folders); else it runs bare, on empty stdin."""
        return bool(self.args or self.stdin is not None or self.folders or self.writable is not None)

    @property
    def link_binds(self) -> Tuple[Bind, ...]:
        """The ``-L`` folders of :attr:`link_flags` outside the folders the sandbox shows anyway, read-only at their
        own paths: what the link needs to see."""
        binds = {}
        for folder in library_folders(self.link_flags):
            source = Path(os.path.realpath(folder))
            if not all(any(_under(p, v) for v in VISIBLE) for p in (folder, source)):
                binds.setdefault(folder, Bind(source, folder))
        return tuple(binds.values())

    @property
    def named(self) -> List[Path]:
        """The host paths shown to the run, in the order named."""
        return [bind.source for bind in self.binds]

    def describe(self) -> str:
        """How the run is made, for messages: ``args 'in.txt' -n 3, stdin data.bin``."""
        parts = []
        if self.args:
            parts.append("arguments " + " ".join(self.args))
        if self.stdin is not None:
            parts.append(f"stdin {self.stdin}")
        if self.folders:
            parts.append("folders " + ", ".join(map(str, self.folders)))
        if self.writable is not None:
            parts.append(f"writable folder {self.writable}")
        return "; ".join(parts) or "no arguments and empty stdin"


def _path_words(word: str) -> List[str]:
    """The parts of an argument that may name a path: the word, what follows its first ``=`` (``--in=PATH``),
    and what follows a one-letter flag (``-iPATH``, as ``-I/usr/include`` is written)."""
    words = [word] if word not in ("", "-") else []
    if "=" in word:
        value = word.split("=", 1)[1]
        if value not in ("", "-"):
            words.append(value)
    if len(word) > 2 and word[0] == "-" and word[1].isalpha():
        words.append(word[2:])
    return words


def _folder(base: Path, folder: PathLike) -> str:
    path = base / Path(folder).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{folder}: no such folder (named for the checked run)")
    if not path.is_dir():
        raise NotADirectoryError(f"{folder}: not a folder (named for the checked run)")
    return str(Path(folder).expanduser())


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclasses.dataclass(frozen=True)
class WrittenFile:
    """A file a run left: its ``size``, sha256 ``digest`` and ``text`` (None when over :data:`MAX_TEXT_BYTES` or
    not UTF-8)."""

    size: int
    digest: str
    text: Optional[str]


def _read(path: Path) -> WrittenFile:
    digest, size, head = hashlib.sha256(), 0, b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            if size <= MAX_TEXT_BYTES:
                head += chunk
            size += len(chunk)
    text = None
    if size <= MAX_TEXT_BYTES:
        try:
            text = head.decode()
        except UnicodeDecodeError:
            pass
    return WrittenFile(size, digest.hexdigest(), text)


def stamps(folder: Optional[Path]) -> Dict[str, Tuple[int, int, int]]:
    """(mtime in ns, size, inode) of every file under ``folder`` by relative path: what a run may change."""
    found: Dict[str, Tuple[int, int, int]] = {}
    if folder is None:
        return found
    for path in _files(folder, ()):
        try:
            st = path.lstat()
        except OSError:
            continue
        found[str(path.relative_to(folder))] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return found


def written(folder: Path, skip: Sequence[Path] = (), writable: Optional[Path] = None,
            before: Optional[Dict[str, Tuple[int, int, int]]] = None) -> Dict[str, WrittenFile]:
    """The files a run left: every file under its working ``folder`` (by relative path; ``skip``: the mount
    points of its binds, relative to ``folder``) and, in the ``writable`` folder, those it created, changed or
    deleted since ``before`` (:func:`stamps`; by relative path after :data:`WRITABLE`; a deleted file's digest is
    :data:`DELETED`). Symbolic links count as files holding their target; a tree deeper than :data:`MAX_DEPTH`
    counts as one entry saying so."""
    found = {str(path.relative_to(folder)): _entry(path) for path in _files(folder, skip)}
    if writable is not None:
        now, before = stamps(writable), before or {}
        for name, stamp in now.items():
            if before.get(name) != stamp:
                found[WRITABLE + name] = _entry(writable / name)
        for name in before.keys() - now.keys():
            found[WRITABLE + name] = WrittenFile(0, DELETED, None)
    return found


class _TooDeep(Path().__class__):
    """A folder :func:`_files` did not descend into (deeper than :data:`MAX_DEPTH`, or a path too long)."""


def _entry(path: Path) -> WrittenFile:
    """A regular file's contents; a link's target; for anything else (a FIFO, a socket) or a file that cannot be
    read, its kind."""
    if isinstance(path, _TooDeep):
        return WrittenFile(0, f"a folder tree deeper than {MAX_DEPTH} levels", None)
    try:
        mode = path.lstat().st_mode
    except OSError as exc:
        return WrittenFile(0, f"unreadable: {exc.strerror}", None)
    if stat.S_ISLNK(mode):
        target = os.readlink(path)
        return WrittenFile(len(target), hashlib.sha256(target.encode()).hexdigest(), f"-> {target}")
    if stat.S_ISREG(mode):
        try:
            return _read(path)
        except OSError as exc:
            return WrittenFile(0, f"unreadable: {exc.strerror}", None)
    return WrittenFile(0, f"mode {stat.filemode(mode)}", None)


def _files(folder: Path, skip: Iterable[Path]) -> List[Path]:
    """Every file (and link) under ``folder`` but those in ``skip``, sorted, without recursion: a folder at
    :data:`MAX_DEPTH` levels, or one that cannot be listed, is itself listed (as :class:`_TooDeep`)."""
    skipped = {folder / s for s in skip}
    found: List[Path] = []
    stack: List[Tuple[Path, int]] = [(folder, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            if here != folder:
                found.append(_TooDeep(here))
            continue
        for entry in entries:
            path = here / entry.name
            if path in skipped:
                continue
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 >= MAX_DEPTH:
                    found.append(_TooDeep(path))
                else:
                    stack.append((path, depth + 1))
            else:
                found.append(path)
    return sorted(found)


def writable_size(folder: Path) -> int:
    """The bytes of the regular files under ``folder`` (what a run's copy of it costs)."""
    total = 0
    for path in _files(folder, ()):
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


class Opened:
    """Which of some files and folders a run opens (a folder: it or anything directly in it), watched with
    inotify on their inodes, so opens through the sandbox's binds count. Use as a context manager around the run;
    :attr:`unopened` is then the paths never opened, or None where inotify is not available (nothing is
    claimed then)."""

    IN_ACCESS, IN_OPEN, IN_NONBLOCK, IN_CLOEXEC = 0x1, 0x20, 0o4000, 0o2000000
    IN_Q_OVERFLOW = 0x4000

    def __init__(self, paths: Sequence[Path]):
        self.paths = list(paths)
        self.unopened: Optional[List[Path]] = None
        self._fd = -1
        self._watches: Dict[int, Path] = {}

    def __enter__(self) -> "Opened":
        libc = _libc()
        if libc is None or not self.paths:
            return self
        self._fd = libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        for path in self.paths if self._fd >= 0 else ():
            wd = libc.inotify_add_watch(self._fd, os.fsencode(path), self.IN_OPEN | self.IN_ACCESS)
            if wd < 0:   # cannot watch one: claim nothing
                os.close(self._fd)
                self._fd = -1
                break
            self._watches[wd] = path
        return self

    def __exit__(self, *exc) -> None:
        if self._fd < 0:
            return
        seen, data = set(), b""
        try:
            while True:
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(self._fd)
        offset = 0
        while offset + 16 <= len(data):   # struct inotify_event: int wd; u32 mask, cookie, len; char name[len]
            wd, mask, _, size = struct.unpack_from("iIII", data, offset)
            if mask & self.IN_Q_OVERFLOW:
                return
            seen.add(wd)
            offset += 16 + size
        self.unopened = [path for wd, path in self._watches.items() if wd not in seen]


def _libc():
    """libc with inotify, or None (not Linux, or no such functions)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None
