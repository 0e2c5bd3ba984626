"""Saved artifacts: one home for what every checkpoint, predictor, library, probe set, store and report shares.

- **Digests**: :func:`sha256_file` of a file; :func:`content_digest` of a JSON object's canonical form.
- **Sealing**: :func:`seal` adds a ``digest`` of a config's own content and :func:`check_seal` verifies it, so a
  bit flip in a number is refused instead of loading as a silently different artifact. :func:`file_checksums` and
  :func:`check_files` do the same for the files a config lists.
- **Version stamps**: :func:`versions` (package, LLVM, torch, faiss, numpy) goes into every config.
- **Encoder identity**: :func:`encoder_identity` ties a predictor or library to the encoder it was made on;
  :func:`check_encoder` refuses another one.
- **Reading**: :func:`~behavioral_pq.config.read_bounded` (defined low, in config, so TOML and IR files use it too) is
  the one way to read a file named by an artifact or a user: a regular file only (a FIFO, a device or ``/proc`` file
  is refused at once, never waited on) and at most a size cap per kind (``*_LIMIT``). :func:`read_json_bounded`
  adds a nesting cap before parsing, :func:`safetensors_header` and :func:`check_shapes` compare the tensor shapes
  of weights with a model's before anything is allocated, and :func:`read_sealed_config` reads a config file and
  checks its format, version and seal.
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
import re
from pathlib import Path
from typing import Dict, Iterable, Optional, Tuple, Type, Union

from behavioral_pq._version import __version__
from behavioral_pq.config import CONFIG_LIMIT, open_regular, read_bounded
from behavioral_pq.core._native_loader import LLVM_VERSION
from behavioral_pq.core.files import (  # noqa: F401 (re-exported: the writers every artifact uses)
    atomic_path,
    check_output_file,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)

PathLike = Union[str, os.PathLike]

# Size caps per kind of file, each far above what the project writes, so that a device, a pseudo-file or a huge file
# in an artifact's place is refused with a typed error instead of filling memory.
# CONFIG_LIMIT (in behavioral_pq.config, which reads TOML files): a config or header in JSON or TOML, 16 MiB.
#: A listing that grows with its data (a library's ``library.json``: 0.6 MiB for 1,200 programs; a corpus manifest).
LISTING_LIMIT = 256 << 20
#: Weights and other binary members of an artifact (``model.safetensors``: 3.4 MiB shipped; ``index.faiss``).
WEIGHTS_LIMIT = 2 << 30
#: A quantizer file: at most 256 centroids of 56 floats per sub-space (58 KiB shipped).
QUANTIZER_LIMIT = 16 << 20
#: Nesting of a JSON file: the project writes at most 6 levels; Python's parser overflows its stack near 1,000.
JSON_DEPTH_LIMIT = 100


# -- digests and seals ---------------------------------------------------------------------------------------------

def sha256_file(path: PathLike, *, limit: Optional[int] = None, error: Type[Exception] = OSError,
                what: str = "file") -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks; with a ``limit``, the file must be a regular file of at
    most ``limit`` bytes (see :func:`read_bounded`), else ``error`` is raised."""
    h = hashlib.sha256()
    if limit is None:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    with open_regular(path, limit=limit, what=what, error=error) as (f, size):
        read = 0
        for block in iter(lambda: f.read(1 << 20), b""):
            read += len(block)
            if read > size:
                raise error(f"{path}: unreadable {what} (it grows while read: not a plain file)")
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
        if not os.path.lexists(file):
            raise error(f"{file}: missing")
        if sha256_file(file, limit=WEIGHTS_LIMIT, error=error, what="artifact file") != digest:
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


# -- bounded reads -------------------------------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[{]}"))


def json_depth(data: bytes) -> int:
    """How deep arrays and objects nest in JSON text (brackets inside strings do not count), without parsing it."""
    import numpy as np

    brackets = _JSON_STRING.sub(b"", data).translate(None, _NOT_BRACKETS).translate(_BRACKETS)
    steps = np.frombuffer(brackets, dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max()) if len(steps) else 0


def parse_json_bounded(data: bytes, *, origin: PathLike, what: str, error: Type[Exception]):
    """JSON bytes parsed, after checking that they nest at most :data:`JSON_DEPTH_LIMIT` deep (deeper input makes
    Python's parser overflow its stack); ``error`` names ``origin`` for input that is not UTF-8 JSON."""
    if json_depth(data) > JSON_DEPTH_LIMIT:
        raise error(f"{origin}: unreadable {what} (JSON nested deeper than {JSON_DEPTH_LIMIT} levels)")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"{origin}: unreadable {what} (not UTF-8 text: byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{origin}: unreadable {what} (not valid JSON: {exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:    # numbers past Python's digit limit; a depth check missed
        raise error(f"{origin}: unreadable {what} ({type(exc).__name__})") from None


def read_json_bounded(path: PathLike, *, limit: int = CONFIG_LIMIT, what: str, error: Type[Exception]):
    """A JSON file read with :func:`read_bounded` and parsed with :func:`parse_json_bounded`."""
    return parse_json_bounded(read_bounded(path, limit=limit, what=what, error=error), origin=path, what=what,
                              error=error)


#: safetensors dtypes and their sizes in bytes.
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1}


def safetensors_header(data: bytes, *, origin: PathLike, error: Type[Exception]) -> Dict[str, Tuple[str, tuple]]:
    """{tensor name: (dtype, shape)} from the header of safetensors bytes, checked against the data it describes,
    so shapes can be compared with a model's before anything is allocated.

    Layout: 8 bytes little-endian header length n, n bytes of JSON ``{name: {"dtype", "shape", "data_offsets"}}``
    (and an optional ``__metadata__``), then the tensors' bytes."""
    if len(data) < 8:
        raise error(f"{origin}: not a safetensors file (shorter than its header)")
    n = int.from_bytes(data[:8], "little")
    if n > min(CONFIG_LIMIT, len(data) - 8):
        raise error(f"{origin}: not a safetensors file (header of {n} bytes)")
    header = parse_json_bounded(data[8:8 + n], origin=origin, what="safetensors header", error=error)
    if not isinstance(header, dict):
        raise error(f"{origin}: not a safetensors file (its header is not a JSON object)")
    tensors, body = {}, len(data) - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            if not all(isinstance(x, int) and x >= 0 for x in (*shape, begin, end)):
                raise ValueError("negative or fractional sizes")
            count = 1
            for x in shape:
                count *= x
            if dtype not in SAFETENSORS_DTYPES or not begin <= end <= body \
                    or end - begin != count * SAFETENSORS_DTYPES[dtype]:
                raise ValueError(f"{dtype} {shape} in bytes {begin}..{end} of {body}")
        except (KeyError, TypeError, ValueError) as exc:
            raise error(f"{origin}: corrupt safetensors header at tensor {str(name)[:80]!r} "
                        f"({type(exc).__name__}: {exc})") from None
        tensors[name] = (dtype, shape)
    return tensors


def check_shapes(expected: Dict[str, tuple], header: Dict[str, Tuple[str, tuple]], *, origin: PathLike,
                 error: Type[Exception]) -> None:
    """Refuse weights whose tensors (``header``, from :func:`safetensors_header`) are not the ``expected``
    {name: shape} of the model they are for, naming the first tensors that differ."""
    found = {name: shape for name, (_, shape) in header.items()}
    if expected == found:
        return
    missing, unexpected = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    differ = [f"{name}: {found[name]} in the weights, {expected[name]} by the config" for name in sorted(expected)
              if name in found and found[name] != expected[name]]
    raise error(f"{origin}: weights do not fit the model config ("
                + "; ".join(differ[:2] + [f"missing {missing[:3]}"] * bool(missing)
                            + [f"unexpected {[name[:80] for name in unexpected[:3]]}"] * bool(unexpected)) + ")")


def read_sealed_config(file: PathLike, *, format: str, version: int, error: Type[Exception], what: str,
                       limit: int = CONFIG_LIMIT) -> dict:
    """The JSON config of a saved artifact, checked for its ``format``, ``format_version`` and seal.

    Args:
        what: the artifact's kind for messages ("a predictor").
        limit: its size cap (:data:`CONFIG_LIMIT`, or :data:`LISTING_LIMIT` for a config that lists data).
    Raises:
        error: the file is missing, not a regular file, over ``limit``, unreadable, of another format or version,
            or its digest does not match.
    """
    file = Path(file)
    if not os.path.lexists(file):
        raise error(f"{file.parent}: not {what} (no {file.name})")
    config = read_json_bounded(file, limit=limit, what=f"config of {what}", error=error)
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
    """What ties a predictor or library to an encoder: its name, the weights' sha256, the probe-set hash and the
    pooling (the same weights give other embeddings under another pooling)."""
    return {"name": Path(encoder.path).name if encoder.path else None,
            "model_sha256": encoder.config.get("files", {}).get("model.safetensors"),
            "probe_set_hash": encoder.probe_set.hash, "pooling": encoder.pooling}


def with_pooling_of(encoder, wanted: dict):
    """``encoder``, or the same checkpoint under the pooling an artifact was made with (``wanted``: its saved
    encoder identity; one saved before poolings were recorded was made with "mean")."""
    pooling = wanted.get("pooling", "mean")
    if encoder.pooling == pooling or encoder.fine_tuned:
        return encoder              # (a fine-tuned copy is left as it is: check_encoder then names the mismatch)
    try:
        return encoder.with_pooling(pooling)
    except ValueError:              # a pooling no encoder has: check_encoder names the mismatch, in the artifact's error
        return encoder


def check_encoder(path: PathLike, wanted: dict, encoder, error: Type[Exception], hint: str,
                  verb: str = "built") -> None:
    """Refuse an artifact at ``path`` made on another encoder than ``encoder`` (``wanted``: its saved identity)."""
    mine = encoder_identity(encoder)
    wanted = {"pooling": "mean", **wanted}
    for key in ("model_sha256", "probe_set_hash", "pooling"):
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
            same = read_json_bounded(path / config, what="config", error=ValueError).get("format") == format
        except (ValueError, AttributeError):
            same = False
        if same or overwrite:
            return
        raise error(f"{path}: exists and is not {what}; refusing to replace it (choose another folder, or pass "
                    "--overwrite / overwrite=True)")
    if not overwrite:
        raise error(f"{path}: exists and is not a folder; refusing to replace it (pass --overwrite to do so)")
