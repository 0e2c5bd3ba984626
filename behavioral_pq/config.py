"""Configuration files: TOML read by one helper into frozen dataclasses, unknown keys rejected."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Dict, Type, TypeVar, Union

from behavioral_pq.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


def load_toml(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such configuration file")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


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
