"""Configuration files: TOML read by one helper into frozen dataclasses, unknown keys rejected.

Every file read from a user or an artifact goes through :func:`read_bounded` (here, below every layer that reads
files): a regular file only, at most a size cap per kind (``CONFIG_LIMIT`` here, the others in
behavioral_pq.artifacts).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Type, TypeVar, Union

from behavioral_pq.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")

#: A config or header in JSON or TOML (checkpoint, predictor and estimator configs, probe sets, TOML settings): the
#: shipped ones are under 110 KiB; a probe set at its caps (4096 probes of 1000 passes) would not fit, none needs to.
CONFIG_LIMIT = 16 << 20

_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


@contextlib.contextmanager
def open_regular(path: Union[str, os.PathLike], *, limit: int, what: str, error: Type[Exception]):
    """Yields (binary file, its size) for a regular file of at most ``limit`` bytes; ``error`` otherwise.

    Opened without blocking (a FIFO with no writer would hang ``open``), then checked with fstat on the open file,
    so what is checked is what is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except OSError as exc:
        raise error(f"{path}: unreadable {what} ({exc.strerror or type(exc).__name__})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if info.st_size > limit:
            raise error(f"{path}: unreadable {what} ({info.st_size} bytes, more than the {_size(limit)} limit)")
        kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a plain file")
        raise error(f"{path}: unreadable {what} (not a regular file: {kind})")
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            yield f, info.st_size
        except OSError as exc:
            if isinstance(exc, error):
                raise
            raise error(f"{path}: unreadable {what} ({exc.strerror or type(exc).__name__})") from None


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def read_bounded(path: Union[str, os.PathLike], *, limit: int, what: str, error: Type[Exception]) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    A FIFO, a device, a folder or a file over the limit is refused at once with ``error`` (never read, never waited
    on); so is a file that holds more than its size says (``/proc`` files report 0 bytes). Messages name the file
    and the reason, never its content.

    Args:
        limit: the cap for this kind of file (one of the ``*_LIMIT`` constants).
        what: the file's kind for messages ("checkpoint config").
    """
    with open_regular(path, limit=limit, what=what, error=error) as (f, size):
        data = f.read(size + 1)
        while len(data) <= size:            # a short read of a regular file: read on to the size it had
            more = f.read(size + 1 - len(data))
            if not more:
                break
            data += more
    if len(data) > size:
        raise error(f"{path}: unreadable {what} (it holds more than its size of {size} bytes: not a plain file)")
    return data


def load_toml(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """A TOML file as a dict; ConfigError when it is missing, not a regular file of at most CONFIG_LIMIT bytes,
    not UTF-8 or not valid TOML (nested past Python's stack included)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise ConfigError(f"{path}: no such configuration file")
    data = read_bounded(path, limit=CONFIG_LIMIT, what="configuration file", error=ConfigError)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML (nested too deep)") from None


def from_dict(cls: Type[T], data: Dict[str, Any], where: str = "") -> T:
    """Build the frozen dataclass ``cls`` from ``data``; an unknown key or a wrong type raises ConfigError."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{where or cls.__name__}: unknown keys {unknown}; known: {sorted(known)}")
    try:
        return cls(**data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from None


def env_number(name: str, default: T, *, kind: Callable[[str], T] = float, minimum: float = 0,
               allow_minimum: bool = True) -> T:
    """The number in the environment variable ``name`` (``default`` when it is unset or empty), read with
    ``kind`` (``int`` or ``float``): a finite number of at least ``minimum`` (above it when ``allow_minimum`` is
    False). ConfigError naming the variable otherwise: ``nan`` would turn every comparison with it off, a
    negative count would mean something else than asked."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    what = "a whole number" if kind is int else "a number"
    bound = f"{'at least' if allow_minimum else 'greater than'} {minimum:g}"
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={text[:40]!r}: not {what} (it must be {bound})") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name}={text[:40]!r}: not a finite number (it must be {bound})")
    if value < minimum or (value == minimum and not allow_minimum):
        raise ConfigError(f"{name}={text[:40]!r}: out of range (it must be {bound})")
    return value
