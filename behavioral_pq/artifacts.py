"""Saved artifacts: one home for what every checkpoint, predictor, library, probe set, store and report shares.

- **Digests**: :func:`sha256_file` of a file; :func:`content_digest` of a JSON object's canonical form.
- **Sealing**: :func:`seal` adds a ``digest`` of a config's own content and :func:`check_seal` verifies it, so a
  bit flip in a number is refused instead of loading as a silently different artifact. :func:`file_checksums` and
  :func:`check_files` do the same for the files a config lists.
- **Version stamps**: :func:`versions` (package, LLVM, torch, faiss, numpy) goes into every config.
- **Encoder identity**: :func:`encoder_identity` ties a predictor or library to the encoder it was made on;
  :func:`check_encoder` refuses another one.
- **Reading**: :func:`read_sealed_config` reads a config file and checks its format, version and seal.
- **Writing**: :func:`atomic_path` is the one way to write an artifact: a unique temporary name beside the target
  (pid + random suffix, so two writers never share one), fsync, then an atomic replace; on an error nothing is
  left behind and the old artifact is untouched. :func:`write_text_atomic`, :func:`write_bytes_atomic` and
  :func:`write_json_atomic` wrap it for single files; :func:`check_output_file` checks a path a user named for an
  output before the work. They live in :mod:`behavioral_pq.core.files` (the core writes with them too).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Type, Union

from behavioral_pq._version import __version__
from behavioral_pq.core._native_loader import LLVM_VERSION
from behavioral_pq.core.files import (  # noqa: F401 (re-exported: the writers every artifact uses)
    atomic_path,
    check_output_file,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

PathLike = Union[str, os.PathLike]


# -- digests and seals ---------------------------------------------------------------------------------------------

def sha256_file(path: PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def content_digest(data: dict) -> str:
    """sha256 of a JSON object's canonical form (sorted keys, no spaces), without its own ``digest`` field."""
    body = {k: v for k, v in data.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(data: dict) -> dict:
    """``data`` with a ``digest`` of its content, checked by :func:`check_seal` when read back."""
    return dict(data, digest=content_digest(data))


def check_seal(data: dict, file: PathLike, error: Type[Exception]) -> None:
    """Raise ``error`` naming ``file`` unless ``data`` carries the digest of its own content."""
    if "digest" not in data:
        raise error(f"{file}: no content digest (written by an older behavioral_pq, or edited); save it again")
    if data["digest"] != content_digest(data):
        raise error(f"{file}: content digest mismatch (corrupt or edited file)")


def file_checksums(folder: PathLike, names: Iterable[str]) -> dict:
    """sha256 of each named file of ``folder``, for the ``files`` entry of a sealed config."""
    return {name: sha256_file(Path(folder) / name) for name in names}


def check_files(folder: PathLike, config: dict, error: Type[Exception]) -> None:
    """Raise ``error`` naming the file when a file listed in ``config["files"]`` is missing or differs."""
    files = config.get("files")
    if not isinstance(files, dict) or not files:
        raise error(f"{folder}: no file checksums in its config; save it again")
    for name, digest in files.items():
        file = confined(folder, name, error)
        if not file.is_file():
            raise error(f"{file}: missing")
        if sha256_file(file) != digest:
            raise error(f"{file}: checksum mismatch (corrupt or edited file)")


def confined(folder: PathLike, name: str, error: Type[Exception]) -> Path:
    """``folder / name`` for a file name read from an artifact's own config or manifest, refused with ``error``
    when it would leave the folder (absolute, ``..``, or a link that points outside): a hostile manifest must
    not make the library read or delete files elsewhere."""
    folder = Path(folder)
    relative = Path(str(name))
    if not str(name) or relative.is_absolute() or ".." in relative.parts:
        raise error(f"{folder}: names a file outside its folder ({name!r}); refused")
    path = folder / relative
    if not path.resolve().is_relative_to(folder.resolve()):
        raise error(f"{folder}: {name!r} leads outside the folder; refused")
    return path


def read_sealed_config(file: PathLike, *, format: str, version: int, error: Type[Exception], what: str) -> dict:
    """The JSON config of a saved artifact, checked for its ``format``, ``format_version`` and seal.

    Args:
        what: the artifact's kind for messages ("a predictor").
    Raises:
        error: the file is missing, unreadable, of another format or version, or its digest does not match.
    """
    file = Path(file)
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise error(f"{file.parent}: not {what} (no {file.name})") from None
    except (OSError, ValueError) as exc:
        raise error(f"{file}: unreadable ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != format or config.get("format_version") != version:
        found = (config.get("format"), config.get("format_version")) if isinstance(config, dict) else (None, None)
        raise error(f"{file.parent}: format {found[0]!r} version {found[1]!r}, this library reads {format!r} "
                    f"version {version}")
    check_seal(config, file, error)
    return config


# -- version stamps and encoder identity ---------------------------------------------------------------------------

def versions() -> dict:
    """Versions that made an artifact: behavioral_pq, LLVM, torch, faiss and numpy."""
    import faiss
    import numpy
    import torch

    return {"behavioral_pq": __version__, "llvm": LLVM_VERSION, "torch": torch.__version__,
            "faiss": faiss.__version__, "numpy": numpy.__version__}


def encoder_identity(encoder) -> dict:
    """What ties a predictor or library to an encoder: its name, the weights' sha256 and the probe-set hash."""
    return {"name": Path(encoder.path).name if encoder.path else None,
            "model_sha256": encoder.config.get("files", {}).get("model.safetensors"),
            "probe_set_hash": encoder.probe_set.hash}


def check_encoder(path: PathLike, wanted: dict, encoder, error: Type[Exception], hint: str,
                  verb: str = "built") -> None:
    """Refuse an artifact at ``path`` made on another encoder than ``encoder`` (``wanted``: its saved identity)."""
    mine = encoder_identity(encoder)
    for key in ("model_sha256", "probe_set_hash"):
        if mine[key] != wanted.get(key):
            raise error(f"{path}: {verb} on encoder {wanted.get('name')!r} ({key} {str(wanted.get(key))[:12]}), "
                        f"given {mine['name']!r} ({key} {str(mine[key])[:12]}); {hint}")


def check_replaceable(path: PathLike, *, config: str, format: str, overwrite: bool, error: Type[Exception],
                      what: str) -> None:
    """Refuse to replace ``path`` unless it is absent, an empty folder, an artifact of the same kind (its
    ``config`` file names ``format``), or ``overwrite`` is set: a mistyped ``--out`` must not wipe a folder."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_dir() and not path.is_symlink():
        if not any(path.iterdir()):
            return
        try:
            same = json.loads((path / config).read_text()).get("format") == format
        except (OSError, ValueError, AttributeError):
            same = False
        if same or overwrite:
            return
        raise error(f"{path}: exists and is not {what}; refusing to replace it (choose another folder, or pass "
                    "--overwrite / overwrite=True)")
    if not overwrite:
        raise error(f"{path}: exists and is not a folder; refusing to replace it (pass --overwrite to do so)")
