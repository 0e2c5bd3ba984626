"""LLVM IR modules: loading from files or bytes, preparation, serialization."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from behavioral_pq.config import read_bounded
from behavioral_pq.core._native_loader import native
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.files import check_output_file, write_bytes_atomic
from behavioral_pq.core.toolchain import compile_to_bitcode, language_of, link_bitcode
from behavioral_pq.errors import InvalidIRError

IR_SUFFIXES = (".ll", ".bc")
#: Size cap of an IR or bitcode file read from a path (behavioral_pq.config.read_bounded): 1 GiB, 40x the IR of
#: sqlite3's amalgamation, so that a device or a ``/proc`` file given as a module is refused instead of read forever.
IR_FILE_LIMIT = 1 << 30


class Module:
    """An LLVM IR module, prepared as CompilerGym does (debug info stripped, named metadata erased), with its
    source file name cleared (one program at two paths is one module), held as bitcode. Immutable: passes return
    a new Module (see :func:`behavioral_pq.optimize`).

    Build one with :func:`load_module`. Attributes: ``name`` (for messages), ``source`` (path it came from,
    or None), ``bitcode`` (bytes), ``sha256`` (of the bitcode), ``instruction_count``.
    """

    def __init__(self, bitcode: bytes, name: str = "module", source: Optional[str] = None):
        self._bitcode = bytes(bitcode)
        self.name = name
        self.source = source

    @property
    def bitcode(self) -> bytes:
        return self._bitcode

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self._bitcode).hexdigest()

    @functools.cached_property
    def instruction_count(self) -> int:
        """Number of IR instructions (Autophase's TotalInsts)."""
        return int(native.instruction_count(self._bitcode))

    def text(self) -> str:
        """The module as textual LLVM IR."""
        return native.to_text(self._bitcode)

    def verify(self, engine: Optional[Engine] = None) -> "Module":
        """Run LLVM's verifier on the module (in a worker); returns self, raises InvalidIRError when broken."""
        (engine or default_engine()).prepare(self._bitcode, self.name)
        return self

    def save(self, path: Union[str, os.PathLike], *, overwrite: bool = False) -> Path:
        """Write ``.bc`` (bitcode) or any other suffix as text IR, all at once (a failed write, a full disk
        included, leaves an existing file as it was). A symbolic link at ``path`` is refused unless ``overwrite``
        (then its target is written); see :func:`~behavioral_pq.core.files.check_output_file`. Returns ``path``."""
        path = Path(path)
        data = self._bitcode if path.suffix == ".bc" else self.text().encode()
        write_bytes_atomic(check_output_file(path, overwrite=overwrite), data)
        return path

    def __eq__(self, other) -> bool:
        return isinstance(other, Module) and other._bitcode == self._bitcode

    def __hash__(self) -> int:
        return hash(self.sha256)

    def __repr__(self) -> str:
        return f"Module({self.name!r}, {self.instruction_count} instructions)"


ModuleLike = Union[Module, str, os.PathLike, bytes, bytearray, Sequence[Union[str, os.PathLike]]]


def _read_source(path: Path, language: Optional[str], flags: Sequence[str]) -> Tuple[bytes, bool]:
    """(bitcode or IR text of one file, whether clang compiled it)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    if language or (path.suffix not in IR_SUFFIXES and language_of(path)):
        return compile_to_bitcode(path, language=language, flags=flags), True
    return read_bounded(path, limit=IR_FILE_LIMIT, what="IR file", error=InvalidIRError), False


def load_module(source: ModuleLike, *, name: Optional[str] = None, language: Optional[str] = None,
                flags: Sequence[str] = (), engine: Optional[Engine] = None) -> Module:
    """Load and prepare an LLVM module.

    Args:
        source: a path to ``.ll``, ``.bc`` or a C/C++ file (compiled with ``clang-19 -O1 -Xclang
            -disable-llvm-passes -g0 -emit-llvm``); a list of such paths (one program: each compiled, then all
            linked with ``llvm-link-19``); bytes of bitcode or IR text; a string holding IR text (anything
            with a newline); or a Module (returned as is).
        name: shown in messages (default: the file name; the names joined by ``+`` for several).
        language: for C/C++ sources: ``"c"`` or ``"c++"`` (default from the suffix).
        flags: for C/C++ sources: extra clang flags (``-I``, ``-D``, ``-std=``).
        engine: where parsing runs (default: the shared protected engine).

    Raises:
        FileNotFoundError: no such file.
        InvalidIRError: not valid LLVM IR, or a C/C++ program with no code (no function defined).
        CompileError: clang failed, or the files do not link.
    """
    if isinstance(source, Module):
        return source
    engine = engine or default_engine()
    paths: List[Path] = []
    compiled = False
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif isinstance(source, str) and "\n" in source:
        data = source.encode()
    elif isinstance(source, (str, os.PathLike)):
        paths = [Path(source)]
        data, compiled = _read_source(paths[0], language, flags)
    elif isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("no source files given")
        paths = [Path(s) for s in source]
        units = [_read_source(p, language, flags) for p in paths]
        compiled = any(c for _, c in units)
        data = link_bitcode([u for u, _ in units], what=f"files ({', '.join(p.name for p in paths)})")
    else:
        raise TypeError(f"cannot load a module from {type(source).__name__}")
    label = name or ("+".join(p.name for p in paths) if paths else "module")
    if not data.strip():
        raise InvalidIRError(f"{label}: empty input")
    module = Module(engine.prepare(data, label), name=label,
                    source=os.pathsep.join(str(p) for p in paths) if paths else None)
    if compiled and module.instruction_count == 0:
        raise InvalidIRError(f"{label}: no code to optimize (the program defines no function)")
    return module
