"""Benchmarks and datasets, CompilerGym 0.2.5's way of naming programs (``benchmark://NAME-v0/PATH``), over what
is on this machine: a folder of C/C++/IR files or a corpus store registered as a dataset, the package's example
programs (``benchmark://examples-v0/matmul``), and the csmith / llvm-stress generators
(``generator://csmith-v0/SEED``). Nothing is downloaded::

    env.datasets.register("mine-v0", "path/to/programs")        # or a corpus store folder
    env.reset(benchmark="benchmark://mine-v0/sub/prog")          # path/to/programs/sub/prog.c
    env.reset(benchmark=env.datasets["mine-v0"].random_benchmark())

The classes are CompilerGym's, with its constructors and behaviour: :class:`Benchmark` wraps a
:class:`BenchmarkProto` message (``Benchmark(BenchmarkProto(uri=..., program=File(contents=...)))``) and its
validation callbacks; :class:`Dataset`, :class:`FilesDataset` (``FilesDataset(dataset_root=..., name=...,
description=..., license=...)``) and :class:`Datasets` resolve a :class:`BenchmarkUri`
(``scheme://dataset/path?params#fragment``); ``proto://FILE`` names a serialized message (the protobuf wire
format, so CompilerGym's own ``.pb`` files read here), ``file://PATH`` a file. The shorter forms of this package
stay: ``Benchmark(uri, source)`` (source: a path, IR or bitcode bytes, a Module, or a generator or store URI),
``FilesDataset(name, folder)`` (its C/C++/IR programs, see :class:`ProgramsDataset`).

A benchmark is buildable and runnable as in CompilerGym: only when it says how it is built and run. The package's
examples (``benchmark://examples-v0/...``) and Csmith programs are, the package's way (``llc-19 -O2``, linked by
clang, run without arguments in the sandbox), when they have a ``main`` that links; a benchmark given a
``build_cmd`` (and ``run_cmd``) in ``benchmark.proto.dynamic_config`` is, with those commands. Everything else is
not, even with a ``main``: a file (``file://...``), a ``make_benchmark`` program, a registered folder or corpus
store, llvm-stress modules (CompilerGym 0.2.5's ``IsBuildable`` / ``IsRunnable`` are 0 and ``Runtime`` /
``Buildtime`` None for a benchmark without a build command, whatever its module holds: running a program needs
its arguments and inputs, which a file does not carry). A dataset given ``dynamic_configs`` (one build-and-run
configuration per runtime data set of each program, as CompilerGym's cBench has) gives its benchmarks the one that
the URI's ``?dataset=N`` parameter names (default 0).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import re
import warnings
from collections import OrderedDict, deque
from importlib import resources
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union
from urllib.parse import parse_qs, urlencode, urlparse

import numpy as np

from behavioral_pq.core.module import Module
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.corpus.store import MANIFEST
from behavioral_pq.env.llvm import load_benchmark
from behavioral_pq.errors import BenchmarkInitError, InvalidIRError, UnknownBenchmarkError

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".bc", ".ll")
#: Benchmarks per dataset whose loaded module is kept for the next reset by URI.
CACHED_BENCHMARKS = 64
_NAME = re.compile(r"[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*-v\d+")
#: CompilerGym's dataset version tag: ``NAME-vN`` (N is the version; a name without one is version 0).
_DATASET_VERSION = re.compile(r"[a-zA-z0-9-_]+-v(?P<version>[0-9]+)")
#: URI schemes whose empty dataset is still written ``scheme://`` (urllib's ``uses_netloc`` ones CompilerGym meets).
_NETLOC_SCHEMES = ("file",)


def canonical_uri(uri: str) -> str:
    """``cbench-v1/crc32`` -> ``benchmark://cbench-v1/crc32`` (a URI with a scheme is kept)."""
    uri = str(uri)
    return uri if "://" in uri else f"benchmark://{uri}"


# -- the protobuf wire format (proto3), for the messages below --------------------------------------------------

_VARINT, _LENGTH_DELIMITED = 0, 2


def _encode_varint(value: int) -> bytes:
    """A base-128 varint; a negative value as its 64-bit two's complement (protobuf's int32 encoding)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_varint(data: bytes, pos: int) -> Tuple[int, int]:
    """(value, position after it); ValueError when the data ends inside it or it runs past 64 bits."""
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("Error parsing message: truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise ValueError("Error parsing message: varint too long")


def _delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LENGTH_DELIMITED) + _encode_varint(len(payload)) + payload


def _proto_field(number: int, kind: str, default=dataclasses.MISSING, *, factory=dataclasses.MISSING,
                 message: Optional[type] = None):
    """A message field: its ``number`` and ``kind`` (``string``, ``bytes``, ``int32``, ``message``, ``repeated
    string``, ``repeated message``, ``map``; ``message``: the class of a message field's values)."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"number": number, "kind": kind, "message": message})


class _Message:
    """protobuf's message methods over a dataclass whose fields are :func:`_proto_field`: ``SerializeToString``
    (proto3 wire format: a field at its default value is left out), ``ParseFromString`` and ``FromString``."""

    def SerializeToString(self) -> bytes:
        out = bytearray()
        for field in sorted(dataclasses.fields(self), key=lambda f: f.metadata["number"]):
            number, kind, value = field.metadata["number"], field.metadata["kind"], getattr(self, field.name)
            if kind == "string" and value:
                out += _delimited(number, value.encode("utf-8"))
            elif kind == "bytes" and value:
                out += _delimited(number, bytes(value))
            elif kind == "int32" and value:
                out += _encode_varint(number << 3 | _VARINT) + _encode_varint(int(value))
            elif kind == "message":
                payload = value.SerializeToString()
                if payload:
                    out += _delimited(number, payload)
            elif kind == "repeated string":
                for item in value:
                    out += _delimited(number, item.encode("utf-8"))
            elif kind == "repeated message":
                for item in value:
                    out += _delimited(number, item.SerializeToString())
            elif kind == "map":
                for key, item in value.items():
                    out += _delimited(number, _delimited(1, key.encode("utf-8")) + _delimited(2, item.encode("utf-8")))
        return bytes(out)

    def ParseFromString(self, data: bytes) -> int:
        """Replace every field by what ``data`` holds (fields it does not name are reset); the bytes read.
        Unknown fields are skipped; ValueError for data that is not a message of this type."""
        fresh = type(self)()
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(fresh, field.name))
        by_number = {f.metadata["number"]: f for f in dataclasses.fields(self)}
        data, pos = bytes(data), 0
        while pos < len(data):
            tag, pos = _decode_varint(data, pos)
            number, wire_type = tag >> 3, tag & 7
            if wire_type == _VARINT:
                value, pos = _decode_varint(data, pos)
            elif wire_type == _LENGTH_DELIMITED:
                size, pos = _decode_varint(data, pos)
                if pos + size > len(data):
                    raise ValueError("Error parsing message: truncated field")
                value, pos = data[pos:pos + size], pos + size
            elif wire_type in (1, 5):
                pos += 8 if wire_type == 1 else 4
                continue
            else:
                raise ValueError(f"Error parsing message: wire type {wire_type} of field {number}")
            field = by_number.get(number)
            if field is not None:
                self._set_parsed(field, wire_type, value)
        if pos > len(data):
            raise ValueError("Error parsing message: truncated field")
        return len(data)

    def _set_parsed(self, field: dataclasses.Field, wire_type: int, value) -> None:
        kind = field.metadata["kind"]
        expected = _VARINT if kind == "int32" else _LENGTH_DELIMITED
        if wire_type != expected:
            raise ValueError(f"Error parsing message: field {field.name} has wire type {wire_type}")
        if kind == "int32":
            value &= (1 << 32) - 1
            setattr(self, field.name, value - (1 << 32) if value >= 1 << 31 else value)
        elif kind == "string":
            setattr(self, field.name, value.decode("utf-8"))
        elif kind == "bytes":
            setattr(self, field.name, value)
        elif kind == "message":
            getattr(self, field.name).ParseFromString(value)
        elif kind == "repeated string":
            getattr(self, field.name).append(value.decode("utf-8"))
        elif kind == "repeated message":
            getattr(self, field.name).append(field.metadata["message"].FromString(value))
        elif kind == "map":
            entry = _MapEntry.FromString(value)
            getattr(self, field.name)[entry.key] = entry.value

    @classmethod
    def FromString(cls, data: bytes):
        """The message that ``data`` (protobuf wire format) holds."""
        message = cls()
        message.ParseFromString(data)
        return message


@dataclasses.dataclass
class _MapEntry(_Message):
    """One entry of a ``map<string, string>`` field on the wire."""

    key: str = _proto_field(1, "string", "")
    value: str = _proto_field(2, "string", "")


# -- CompilerGym's Benchmark message, as plain dataclasses (attribute access as on the protobuf messages) ---------

@dataclasses.dataclass
class File(_Message):
    """CompilerGym's ``File`` message: a program's ``contents`` (bytes) or the ``uri`` of a file holding it
    (``file:///PATH``)."""

    contents: bytes = _proto_field(1, "bytes", b"")
    uri: str = _proto_field(2, "string", "")


@dataclasses.dataclass
class Command(_Message):
    """CompilerGym's ``Command`` message: ``argument``, the command line (``$CC`` is clang-19, ``$IN`` the module's
    bitcode file); ``env``, variables to set; ``timeout_seconds`` (0: 300); ``infile`` / ``outfile``, files that
    must exist before / after it runs. It runs in the benchmark's scratch folder."""

    argument: List[str] = _proto_field(1, "repeated string", factory=list)
    env: Dict[str, str] = _proto_field(2, "map", factory=dict)
    timeout_seconds: int = _proto_field(3, "int32", 0)
    infile: List[str] = _proto_field(4, "repeated string", factory=list)
    outfile: List[str] = _proto_field(5, "repeated string", factory=list)


class Commands(list):
    """A repeated ``Command`` field: a list with protobuf's ``add(**fields)``."""

    def add(self, **fields) -> Command:
        self.append(Command(**fields))
        return self[-1]


@dataclasses.dataclass
class BenchmarkDynamicConfig(_Message):
    """CompilerGym's ``BenchmarkDynamicConfig`` message: how the benchmark is built (``build_cmd``) and run
    (``run_cmd``, between the ``pre_run_cmd`` and ``post_run_cmd`` commands)."""

    build_cmd: Command = _proto_field(1, "message", factory=Command, message=Command)
    run_cmd: Command = _proto_field(2, "message", factory=Command, message=Command)
    pre_run_cmd: Commands = _proto_field(3, "repeated message", factory=Commands, message=Command)
    post_run_cmd: Commands = _proto_field(4, "repeated message", factory=Commands, message=Command)

    @property
    def is_buildable(self) -> bool:
        return bool(self.build_cmd.argument)

    @property
    def is_runnable(self) -> bool:
        return bool(self.build_cmd.argument and self.run_cmd.argument)


@dataclasses.dataclass
class BenchmarkProto(_Message):
    """CompilerGym's ``Benchmark`` message (``compiler_gym.service.proto.Benchmark``): ``uri``, ``program`` and
    ``dynamic_config``; ``SerializeToString`` / ``FromString`` read and write protobuf's wire format."""

    uri: str = _proto_field(1, "string", "")
    program: File = _proto_field(2, "message", factory=File, message=File)
    dynamic_config: BenchmarkDynamicConfig = _proto_field(3, "message", factory=BenchmarkDynamicConfig,
                                                          message=BenchmarkDynamicConfig)


# -- URIs ---------------------------------------------------------------------------------------------------------

class BenchmarkUri(str):
    """A benchmark URI, ``scheme://dataset/path?params#fragment``, as CompilerGym parses it: ``scheme`` (default
    ``benchmark``), ``dataset`` (``cbench-v1``), ``path`` (``/qsort``, or empty), ``params`` (the query as lists
    of values: ``{"dataset": ["1"]}``) and ``fragment``. It is the ``str`` of the URI it names, so it compares,
    hashes and sorts as that string.

    ``BenchmarkUri.from_string("cbench-v1/qsort")`` (or ``BenchmarkUri("cbench-v1/qsort")``) parses one;
    ``BenchmarkUri(scheme=..., dataset=..., path=..., params=..., fragment=...)`` builds one from its parts."""

    def __new__(cls, uri: Optional[str] = None, *, scheme: str = "benchmark", dataset: str = "", path: str = "",
                params: Optional[Dict[str, List[str]]] = None, fragment: str = "") -> "BenchmarkUri":
        if uri is not None:
            return cls.from_string(uri)
        params = {str(key): [str(v) for v in values] for key, values in (params or {}).items()}
        text = f"{scheme}:"
        if dataset or path or scheme in _NETLOC_SCHEMES:
            text += "//" + dataset + (path if not path or path.startswith("/") or not dataset else "/" + path)
        query = urlencode(params, doseq=True)
        text += (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")
        self = super().__new__(cls, text)
        self._parts = (scheme, dataset, path, params, fragment)
        return self

    @classmethod
    def from_string(cls, uri: str) -> "BenchmarkUri":
        """Parse ``uri``; one without a scheme is a ``benchmark://`` one (``cbench-v1/qsort``)."""
        components = urlparse(str(uri))
        if not components.scheme and not components.netloc:
            components = urlparse(f"benchmark://{uri}")
        return cls(scheme=components.scheme, dataset=components.netloc, path=components.path,
                   params=parse_qs(components.query), fragment=components.fragment)

    @staticmethod
    def canonicalize(uri: str) -> str:
        """``uri`` with its scheme: ``test-v0`` -> ``benchmark://test-v0``."""
        return str(BenchmarkUri.from_string(uri))

    @property
    def scheme(self) -> str:
        return self._parts[0]

    @property
    def dataset(self) -> str:
        return self._parts[1]

    @property
    def path(self) -> str:
        return self._parts[2]

    @property
    def params(self) -> Dict[str, List[str]]:
        return self._parts[3]

    @property
    def fragment(self) -> str:
        return self._parts[4]

    @property
    def dataset_key(self) -> str:
        """``scheme://dataset``: the name of the dataset that serves this URI."""
        return f"{self.scheme}://{self.dataset}"

    def __repr__(self) -> str:
        return str(self)


# -- benchmarks ---------------------------------------------------------------------------------------------------

#: A validation callback: called with the environment, it returns (or yields) zero or more ValidationErrors.
ValidationCallback = Callable[[object], Optional[Iterable[object]]]


class BenchmarkSource(NamedTuple):
    """A source file of a benchmark: its ``filename`` and ``contents`` (bytes)."""

    filename: str
    contents: bytes

    def __repr__(self) -> str:
        return str(self.filename)


class Benchmark:
    """A program to compile: its :class:`BenchmarkProto` message (``uri``, ``program``, ``dynamic_config``), the
    callbacks that validate it, and its source files. Two forms:

    - CompilerGym's, ``Benchmark(proto, validation_callbacks=None, sources=None)``: the module is the program the
      message holds (``program.contents``: IR or bitcode; ``program.uri``: a ``file:///`` path).
    - this package's, ``Benchmark(uri, source, runnable=False)``: the module comes from ``source`` (a path, IR or
      bitcode bytes, a Module, or a generator or store URI); the message is made when first asked for.

    The module is loaded once and kept. ``runnable``: built and run the package's way (see the module docstring);
    else only a ``build_cmd`` / ``run_cmd`` set in :attr:`proto`'s ``dynamic_config`` makes it buildable /
    runnable. ``uri`` and ``proto`` are read-only; new attributes may be set."""

    def __init__(self, proto: Union[BenchmarkProto, str, None] = None,
                 validation_callbacks: Optional[List[ValidationCallback]] = None,
                 sources: Optional[Sequence[Tuple[str, bytes]]] = None, *, runnable: bool = False):
        if isinstance(proto, str):
            uri, source, validation_callbacks = proto, validation_callbacks, None
            self._proto: Optional[BenchmarkProto] = None
            self._uri_text = str(BenchmarkUri.from_string(uri))
            self._dynamic_config = BenchmarkDynamicConfig()
        else:
            source = None
            self._proto = proto if proto is not None else BenchmarkProto()
            self._uri_text = None
            self._dynamic_config = self._proto.dynamic_config
        self.source = source
        self.runnable = runnable
        self._validation_callbacks = validation_callbacks if validation_callbacks is not None else []
        self._sources = list(sources or [])
        self._module: Optional[Module] = None
        self._parsed: Tuple[Optional[str], Optional[BenchmarkUri]] = (None, None)

    @property
    def uri(self) -> BenchmarkUri:
        """The URI of the benchmark (``proto.uri``, parsed)."""
        text = self._proto.uri if self._proto is not None else self._uri_text
        if self._parsed[0] != text:
            self._parsed = (text, BenchmarkUri.from_string(text))
        return self._parsed[1]

    @property
    def proto(self) -> BenchmarkProto:
        """CompilerGym's ``Benchmark`` message of this benchmark: ``uri``, ``program.contents`` (the file's bytes,
        the IR or bitcode given, else the module's bitcode) and ``dynamic_config``, which is the benchmark's own:
        a ``build_cmd`` set there makes it buildable, with a ``run_cmd`` runnable (read at the next ``reset``)."""
        if self._proto is None:
            self._proto = BenchmarkProto(uri=self._uri_text, program=File(contents=self._contents()),
                                         dynamic_config=self._dynamic_config)
        return self._proto

    @property
    def dynamic_config(self) -> BenchmarkDynamicConfig:
        """How the benchmark is built and run (the same object as ``proto.dynamic_config``)."""
        return self._proto.dynamic_config if self._proto is not None else self._dynamic_config

    def _contents(self) -> bytes:
        if self.source is None:
            return b""
        if isinstance(self.source, Module):
            return self.source.bitcode
        if isinstance(self.source, (bytes, bytearray)):
            return bytes(self.source)
        if isinstance(self.source, os.PathLike) or (isinstance(self.source, str) and Path(self.source).is_file()):
            return Path(self.source).read_bytes()
        return self.load(None).bitcode

    def _program(self) -> Union[str, os.PathLike, bytes, Module]:
        """Where the module comes from: the source given, else the message's program. ValueError when the message
        holds none, or names it by a URI that is not a ``file:///`` one."""
        if self.source is not None:
            return self.source
        program = self.proto.program
        if program.contents:
            return program.contents
        if program.uri:
            if not program.uri.startswith("file:///"):
                raise ValueError("Invalid benchmark data URI. Only the file:/// scheme is supported: "
                                 f'"{program.uri}"')
            return Path(program.uri[len("file://"):])
        raise ValueError(f'No program set in Benchmark: "{self.uri}"')

    def load(self, engine) -> Module:
        """The benchmark's module (compiled or parsed on the first call)."""
        if self._module is None:
            try:
                _, self._module = load_benchmark(self._program(), engine)
            except InvalidIRError as exc:
                raise InvalidIRError(f'Failed to parse LLVM bitcode: "{self.uri}": {exc}') from None
        return self._module

    def is_buildable(self) -> bool:
        """Whether the benchmark says how it is built (the package's way, or a ``build_cmd``)."""
        return self.runnable or self.dynamic_config.is_buildable

    def is_runnable(self) -> bool:
        """Whether the benchmark says how it is built and run (the package's way, or ``build_cmd`` and
        ``run_cmd``)."""
        return self.runnable or self.dynamic_config.is_runnable

    # -- validation and sources ----------------------------------------------------------------------------------

    def validation_callbacks(self) -> List[ValidationCallback]:
        """The callbacks that :meth:`validate` runs (the list itself)."""
        return self._validation_callbacks

    def add_validation_callback(self, validation_callback: ValidationCallback) -> None:
        """Run ``validation_callback(env)`` on :meth:`validate`; it returns or yields ValidationErrors (or None)."""
        self._validation_callbacks.append(validation_callback)

    def is_validatable(self) -> bool:
        """Whether any validation callback is registered."""
        return self._validation_callbacks != []

    def ivalidate(self, env) -> Iterator[object]:
        """The errors of the validation callbacks, callback by callback, as they come."""
        for callback in self._validation_callbacks:
            errors = callback(env)
            if errors:
                yield from errors

    def validate(self, env) -> list:
        """Every error of the validation callbacks (empty: the benchmark validated)."""
        return list(self.ivalidate(env))

    @property
    def sources(self) -> Iterator[BenchmarkSource]:
        """The source files the benchmark was made from, as :class:`BenchmarkSource`."""
        return (BenchmarkSource(*source) for source in self._sources)

    def add_source(self, source: Tuple[str, bytes]) -> None:
        """Record one more source file (a :class:`BenchmarkSource` or a (filename, contents) pair)."""
        self._sources.append(source)

    def write_sources_to_directory(self, directory: os.PathLike) -> int:
        """Write the source files under ``directory`` (created if needed); the number of files written."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = set()
        for filename, contents in self.sources:
            path = directory / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(contents)
            written.add(path)
        return len(written)

    # -- construction ----------------------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, uri: str, path: os.PathLike) -> "Benchmark":
        """The benchmark of the file at ``path``: its bytes are the message's ``program.contents``, and the module
        is loaded from the file (a C/C++ source is compiled). FileNotFoundError when there is no such file."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(str(path))
        benchmark = cls(BenchmarkProto(uri=str(uri), program=File(contents=path.read_bytes())))
        benchmark.source = path
        return benchmark

    @classmethod
    def from_file_contents(cls, uri: str, data: bytes) -> "Benchmark":
        """The benchmark whose program is ``data`` (IR or bitcode)."""
        return cls(BenchmarkProto(uri=str(uri), program=File(contents=bytes(data))))

    # -- comparison ------------------------------------------------------------------------------------------------

    def __eq__(self, other) -> bool:
        if isinstance(other, Benchmark):
            return self.uri == other.uri
        if isinstance(other, str):
            return self.uri == canonical_uri(other)
        return False

    def __lt__(self, other) -> bool:
        return self.uri < (other.uri if isinstance(other, Benchmark) else other)

    def __le__(self, other) -> bool:
        return self < other or self == other

    def __hash__(self) -> int:
        return hash(self.uri)

    def __str__(self) -> str:
        return str(self.uri)

    def __repr__(self) -> str:
        return str(self.uri)


# -- datasets -----------------------------------------------------------------------------------------------------

class Dataset:
    """A named collection of benchmarks, CompilerGym's ``Dataset``: ``name`` (``SCHEME://NAME-vN``; the
    ``benchmark://`` scheme is optional), ``description``, ``license``, ``site_data_base`` (a folder under which
    ``site_data_path`` is ``SCHEME/NAME-vN``; not created), ``benchmark_class`` (what benchmarks are made as),
    ``references`` (named URLs), ``deprecated`` (a message: the dataset is left out of a :class:`Datasets`'
    iteration and :meth:`install` warns with it), ``sort_order`` (lowest first) and ``validatable`` ("Yes", "No"
    or "Partial"; documentation only). ``size`` is 0 for an endless generator.

    A subclass lists its URIs (:meth:`benchmark_uris`) and makes a benchmark from a parsed URI
    (:meth:`benchmark_from_parsed_uri`)."""

    def __init__(self, name: str, description: str = "", license: str = "",
                 site_data_base: Optional[os.PathLike] = None, benchmark_class: type = Benchmark,
                 references: Optional[Dict[str, str]] = None, deprecated: Union[str, bool, None] = None,
                 sort_order: int = 0, validatable: str = "No"):
        self._name = canonical_uri(name)
        uri = BenchmarkUri.from_string(self._name)
        self._description = description
        self._license = license
        self._scheme = uri.scheme
        match = _DATASET_VERSION.match(uri.dataset)
        self._version = int(match.group("version")) if match else 0
        self._references = dict(references or {})
        self._deprecation_message = ("" if deprecated is True else None) if isinstance(deprecated, bool) \
            else deprecated
        self._validatable = validatable
        self.sort_order = sort_order
        self.benchmark_class = benchmark_class
        self._site_data_path = (Path(site_data_base).resolve() / uri.scheme / uri.dataset
                                if site_data_base else None)
        self._recent: "OrderedDict[str, Benchmark]" = OrderedDict()

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def license(self) -> str:
        return self._license

    @property
    def scheme(self) -> str:
        """The URI scheme of the dataset's benchmarks (``benchmark``, ``generator``)."""
        return self._scheme

    @property
    def protocol(self) -> str:
        """The old name of :attr:`scheme` (deprecated, as in CompilerGym)."""
        warnings.warn("The `protocol` attribute has been renamed `scheme`", DeprecationWarning, stacklevel=2)
        return self.scheme

    @property
    def version(self) -> int:
        """N of ``NAME-vN`` (0 when the name has no version tag)."""
        return self._version

    @property
    def references(self) -> Dict[str, str]:
        return self._references

    @property
    def deprecated(self) -> bool:
        return self._deprecation_message is not None

    @property
    def validatable(self) -> str:
        return self._validatable

    @property
    def has_site_data(self) -> bool:
        """Whether the dataset was given a ``site_data_base``."""
        return self._site_data_path is not None

    @property
    def site_data_path(self) -> Path:
        """``site_data_base/SCHEME/NAME-vN``; ValueError without a ``site_data_base``."""
        if self._site_data_path is None:
            raise ValueError(f"Dataset has no site data path: {self.name}")
        return self._site_data_path

    @property
    def site_data_size_in_bytes(self) -> int:
        """The bytes of the files under :attr:`site_data_path` (0 when there is none)."""
        if self._site_data_path is None or not self._site_data_path.is_dir():
            return 0
        return sum(p.stat().st_size for p in self._site_data_path.rglob("*") if p.is_file())

    @property
    def installed(self) -> bool:
        """True: every dataset here is local."""
        return True

    @property
    def size(self) -> int:
        """The number of benchmarks (0: unknown or endless)."""
        return 0

    def __len__(self) -> int:
        return self.size

    def install(self) -> None:
        """Nothing to download; a DeprecationWarning with the deprecation message for a deprecated dataset."""
        if self.deprecated:
            warnings.warn(f"Dataset '{self.name}' is marked as deprecated. {self._deprecation_message}",
                          category=DeprecationWarning, stacklevel=2)

    def uninstall(self) -> None:
        """Nothing to remove: the dataset's files are the user's."""

    def benchmark_uris(self) -> Iterable[str]:
        raise NotImplementedError("abstract class")

    def benchmarks(self) -> Iterator[Benchmark]:
        """The benchmarks, in the order of :meth:`benchmark_uris`."""
        for uri in self.benchmark_uris():
            yield self.benchmark(uri)

    def __iter__(self) -> Iterator[Benchmark]:
        return self.benchmarks()

    def benchmark_from_parsed_uri(self, uri: BenchmarkUri) -> Benchmark:
        """The benchmark of ``uri`` (a URI of this dataset); LookupError when there is none."""
        raise NotImplementedError("abstract class")

    def benchmark(self, uri: Optional[str] = None) -> Benchmark:
        """The benchmark at ``uri``: a full URI, or a path inside the dataset (``sub/prog``); None: the first.
        UnknownBenchmarkError (a LookupError) when the dataset has no such benchmark."""
        if uri is None:
            uri = next(iter(self.benchmark_uris()), None)
            if uri is None:
                raise UnknownBenchmarkError(f"Dataset is empty: {self.name}")
        text = str(uri)
        parsed = BenchmarkUri.from_string(text)
        if "://" not in text and parsed.dataset_key != self.name:
            parsed = BenchmarkUri.from_string(f"{self.name}/{text.lstrip('/')}")
        if parsed.dataset_key != self.name:
            raise UnknownBenchmarkError(f"Benchmark not found: {text}")
        return self.benchmark_from_parsed_uri(parsed)

    __getitem__ = benchmark

    def random_benchmark(self, random_state: Optional[np.random.Generator] = None) -> Benchmark:
        """A benchmark drawn uniformly (seeded by ``random_state``)."""
        return self._random_benchmark(random_state if random_state is not None else np.random.default_rng())

    def _random_benchmark(self, random_state: np.random.Generator) -> Benchmark:
        uris = list(self.benchmark_uris())
        if not uris:
            raise UnknownBenchmarkError(f"Dataset is empty: {self.name}")
        return self.benchmark(uris[int(random_state.integers(len(uris)))])

    def _kept(self, uri: BenchmarkUri, make: Callable[[], Benchmark]) -> Benchmark:
        """The benchmark of ``uri`` made before, while it is among the last CACHED_BENCHMARKS (a reset by URI
        reuses its loaded module), else ``make()``."""
        key = str(uri)
        benchmark = self._recent.pop(key, None) or make()
        self._recent[key] = benchmark
        while len(self._recent) > CACHED_BENCHMARKS:
            self._recent.popitem(last=False)
        return benchmark

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, Dataset):
            return self.name == other.name
        if isinstance(other, str):
            return self.name == canonical_uri(other)
        return False

    def __lt__(self, other) -> bool:
        return self.name < (other.name if isinstance(other, Dataset) else other)

    def __le__(self, other) -> bool:
        return self < other or self == other

    def __hash__(self) -> int:
        return hash(self.name)


def _apply_dynamic_config(benchmark: Benchmark, uri: BenchmarkUri,
                          configs: Sequence[BenchmarkDynamicConfig]) -> None:
    """Give ``benchmark`` the configuration of ``configs`` that ``?dataset=N`` names (default 0); ValueError for
    an N that is not an index of ``configs``."""
    chosen = uri.params.get("dataset", ["0"])[-1]
    try:
        index = int(chosen)
    except ValueError:
        raise ValueError(f"Invalid dataset: {chosen}") from None
    if not 0 <= index < len(configs):
        raise ValueError(f"Invalid dataset: {index}")
    config = copy.deepcopy(configs[index])
    for field in dataclasses.fields(BenchmarkDynamicConfig):
        setattr(benchmark.dynamic_config, field.name, getattr(config, field.name))


class FilesDataset(Dataset):
    """The files of a folder tree, one benchmark each, CompilerGym's ``FilesDataset``::

        FilesDataset(dataset_root="path/to/files", benchmark_file_suffix=".bc", name="benchmark://ds-v0",
                     description="...", license="MIT")

    ``benchmark://ds-v0/REL/PATH`` is ``dataset_root/REL/PATH`` + ``benchmark_file_suffix`` (a file without the
    suffix is no benchmark; no suffix: every file, its name whole); URIs come directory by directory, sorted.
    ``memoize_uris``: list the folder once. ``dynamic_configs``: per benchmark path (``"qsort"``), its
    build-and-run configurations, one per runtime data set (see the module docstring). Benchmarks are
    ``benchmark_class.from_file(uri, path)``.

    ``FilesDataset(name, folder, description="")``, with no ``name=`` keyword, is this package's form: a
    :class:`ProgramsDataset`."""

    def __new__(cls, *args, **kwargs):
        if cls is FilesDataset and "name" not in kwargs and len(args) >= 2:
            cls = ProgramsDataset
        return super().__new__(cls)

    def __init__(self, dataset_root: os.PathLike, benchmark_file_suffix: Union[str, Tuple[str, ...]] = "",
                 memoize_uris: bool = True, *, runnable: bool = False,
                 dynamic_configs: Optional[Dict[str, Sequence[BenchmarkDynamicConfig]]] = None, **dataset_args):
        super().__init__(**dataset_args)
        self.dataset_root = Path(dataset_root)
        self.benchmark_file_suffix = benchmark_file_suffix
        self.memoize_uris = memoize_uris
        self.runnable = runnable
        self.dynamic_configs: Dict[str, Sequence[BenchmarkDynamicConfig]] = dict(dynamic_configs or {})

    @property
    def benchmark_file_suffix(self) -> Union[str, Tuple[str, ...]]:
        """The suffix a benchmark's file has (or one of several); setting it lists the folder again."""
        return self._suffix

    @benchmark_file_suffix.setter
    def benchmark_file_suffix(self, suffix: Union[str, Tuple[str, ...]]) -> None:
        self._suffix = suffix
        self._memoized_uris: Optional[List[str]] = None
        self._size: Optional[int] = None

    @property
    def folder(self) -> Path:
        """The folder of the files (``dataset_root``)."""
        return self.dataset_root

    def _stem(self, filename: str) -> Optional[str]:
        """``filename`` without its benchmark suffix; None when it has none of them."""
        suffixes = (self._suffix,) if isinstance(self._suffix, str) else tuple(self._suffix)
        for suffix in suffixes:
            if filename.endswith(suffix):
                return filename[:len(filename) - len(suffix)] if suffix else filename
        return None

    def _uris(self) -> Iterator[str]:
        for root, dirs, files in os.walk(self.dataset_root):
            dirs.sort()
            reldir = os.path.relpath(root, self.dataset_root)
            seen = set()
            for filename in sorted(files):
                stem = self._stem(filename)
                if stem is not None and stem not in seen:
                    seen.add(stem)
                    yield f"{self.name}/{stem}" if reldir == "." else f"{self.name}/{Path(reldir, stem).as_posix()}"

    def benchmark_uris(self) -> Iterator[str]:
        if self._memoized_uris is not None:
            return iter(self._memoized_uris)
        if self.memoize_uris:
            self._memoized_uris = list(self._uris())
            return iter(self._memoized_uris)
        return self._uris()

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = sum(1 for _ in self.benchmark_uris())
        return self._size

    def _file_of(self, uri: BenchmarkUri) -> Optional[Path]:
        """The file of ``uri`` (inside ``dataset_root``), None when there is none."""
        relative = uri.path.lstrip("/")
        root = self.dataset_root.resolve()
        suffixes = (self._suffix,) if isinstance(self._suffix, str) else tuple(self._suffix)
        for candidate in sorted(os.path.normpath(os.path.join(root, relative + s)) for s in suffixes):
            path = Path(candidate)
            if path.is_file() and (path == root or root in path.parents) and relative:
                return path
        return None

    def benchmark_from_parsed_uri(self, uri: BenchmarkUri) -> Benchmark:
        def make() -> Benchmark:
            path = self._file_of(uri)
            if path is None:
                raise UnknownBenchmarkError(f"Benchmark not found: {uri}")
            benchmark = self.benchmark_class.from_file(uri, path)
            benchmark.runnable = self.runnable
            configs = self.dynamic_configs.get(uri.path.lstrip("/"))
            if configs:
                _apply_dynamic_config(benchmark, uri, configs)
            return benchmark

        return self._kept(uri, make)

    def _random_benchmark(self, random_state: np.random.Generator) -> Benchmark:
        uris = list(self.benchmark_uris())
        if not uris:
            raise UnknownBenchmarkError(f"Dataset is empty: {self.name}")
        return self.benchmark(str(random_state.choice(uris)))


class ProgramsDataset(FilesDataset):
    """The C/C++/IR programs of a folder (recursively), ``FilesDataset(name, folder, description="")``:
    ``benchmark://NAME-vN/REL/PATH`` is the program ``folder/REL/PATH`` with one of :data:`SOURCE_SUFFIXES`
    (a C/C++ source is compiled when loaded). ``runnable``: its programs are built and run the package's way (see
    the module docstring)."""

    def __init__(self, name: str, folder: os.PathLike, description: str = "", *, runnable: bool = False,
                 **dataset_args):
        if not Path(folder).is_dir():
            raise UnknownBenchmarkError(f"{folder}: no such folder")
        super().__init__(Path(folder).resolve(), SOURCE_SUFFIXES, runnable=runnable, name=name,
                         description=description or f"the programs in {folder}", **dataset_args)


class StoreDataset(Dataset):
    """The modules of a corpus store: ``benchmark://NAME-vN/SHA256``, optionally one split's."""

    def __init__(self, name: str, store: os.PathLike, split: Optional[str] = None, description: str = "",
                 **dataset_args):
        super().__init__(name, description or f"the modules of the corpus store {store}", **dataset_args)
        self.store = Path(store).resolve()
        corpus = Corpus(self.store)
        self._shas = corpus.split(split) if split else sorted(corpus.store.keys("modules"))
        self._known = set(self._shas)

    @property
    def size(self) -> int:
        return len(self._shas)

    def benchmark_uris(self) -> Iterator[str]:
        return (f"{self.name}/{sha}" for sha in self._shas)

    def benchmark_from_parsed_uri(self, uri: BenchmarkUri) -> Benchmark:
        sha = uri.path.lstrip("/")
        if sha not in self._known:
            raise UnknownBenchmarkError(f"Benchmark not found: {uri}")
        return self._kept(uri, lambda: Benchmark(str(uri), f"benchmark://{self.store}/{sha}"))


class GeneratorDataset(Dataset):
    """Programs generated on demand from a seed: ``generator://csmith-v0/SEED``, ``generator://llvm-stress-v0/SEED``
    (endless: ``size`` 0, ``benchmark_uris`` counts up from seed 0). Csmith's programs are runnable (as in
    CompilerGym), llvm-stress's modules are not (they have no ``main``)."""

    def benchmark_uris(self) -> Iterator[str]:
        return (f"{self.name}/{seed}" for seed in itertools.count())

    def benchmark_from_parsed_uri(self, uri: BenchmarkUri) -> Benchmark:
        seed = uri.path.lstrip("/")
        if not seed.isdigit():
            raise UnknownBenchmarkError(f"Benchmark not found: {uri} (the path of a generated benchmark is a seed)")
        return self.benchmark_from_seed(int(seed))

    def benchmark_from_seed(self, seed: int, max_retries: int = 3, retry_count: int = 0) -> Benchmark:
        """The benchmark of ``seed`` (generated when its module is first loaded). OSError once ``retry_count``
        attempts reach ``max_retries`` (CompilerGym's generator retries a failing seed so)."""
        if retry_count >= max_retries:
            raise OSError(f"{self.name.split('://', 1)[1].split('-v', 1)[0].capitalize()} failed after "
                          f"{retry_count} {'attempt' if retry_count == 1 else 'attempts'} with seed {seed}")
        uri = BenchmarkUri.from_string(f"{self.name}/{int(seed)}")
        return self._kept(uri, lambda: Benchmark(str(uri), str(uri), runnable=self.name == "generator://csmith-v0"))

    def _random_benchmark(self, random_state: np.random.Generator) -> Benchmark:
        return self.benchmark_from_seed(int(random_state.integers(2 ** 32)))


def dataset_from_path(name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
    """A :class:`StoreDataset` when ``path`` is a corpus store, else a :class:`ProgramsDataset`. ``name``:
    ``NAME-vN`` (the ``benchmark://`` prefix is optional)."""
    bare = name.split("://", 1)[-1]
    if not _NAME.fullmatch(bare):
        raise ValueError(f"dataset name {name!r}: expected NAME-vN, e.g. 'mine-v0'")
    if (Path(path) / MANIFEST).is_file():
        return StoreDataset(bare, path, split=split)
    if split:
        raise ValueError(f"{path}: a split needs a corpus store")
    return ProgramsDataset(bare, path)


#: Datasets that every new environment lists (see :func:`register_dataset`).
_REGISTERED: Dict[str, Dataset] = {}


def register_dataset(name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
    """Make a folder of programs or a corpus store a dataset of every environment created from now on
    (``benchmark://NAME-vN/...``)."""
    dataset = dataset_from_path(name, path, split=split)
    _REGISTERED[dataset.name] = dataset
    return dataset


def default_datasets() -> List[Dataset]:
    """The package's examples (``benchmark://examples-v0/...``), the generators, then the registered datasets
    (the first three sort first)."""
    examples = Path(str(resources.files("behavioral_pq").joinpath("data/examples")))
    return [ProgramsDataset("examples-v0", examples, "the package's example programs", runnable=True, sort_order=-1),
            GeneratorDataset("generator://csmith-v0", "programs generated by csmith", sort_order=-1),
            GeneratorDataset("generator://llvm-stress-v0", "modules generated by llvm-stress", sort_order=-1),
            *_REGISTERED.values()]


def round_robin_iterables(iterables: Iterable[Iterable]) -> Iterator:
    """One item of each iterable in turn, dropping each when it runs out."""
    queue = deque(iter(it) for it in iterables)
    while len(queue) > 1:
        it = queue.popleft()
        try:
            yield next(it)
        except StopIteration:
            continue
        queue.append(it)
    if queue:
        yield from queue.popleft()


class Datasets:
    """The datasets of an environment, CompilerGym's ``Datasets``: by name (``datasets["examples-v0"]``, ``in``,
    item assignment and deletion), iterated by ``(sort_order, name)`` without the deprecated ones,
    ``benchmark(uri)``, ``benchmarks()`` / ``benchmark_uris()`` (round robin over the datasets),
    ``random_benchmark()``. A benchmark can also be ``proto://FILE`` (a serialized :class:`BenchmarkProto`),
    ``file://PATH`` or a path to a file, or a corpus store's ``benchmark:///STORE-FOLDER/SHA256``."""

    def __init__(self, datasets: Iterable[Dataset]):
        self._datasets: Dict[str, Dataset] = {d.name: d for d in datasets}

    def datasets(self, with_deprecated: bool = False) -> Iterator[Dataset]:
        chosen = [d for d in self._datasets.values() if with_deprecated or not d.deprecated]
        return iter(sorted(chosen, key=lambda d: (d.sort_order, d.name)))

    def __iter__(self) -> Iterator[Dataset]:
        return self.datasets()

    @staticmethod
    def _key(uri: BenchmarkUri) -> str:
        if not (uri.scheme and uri.dataset):
            raise ValueError(f"Invalid benchmark URI: '{uri}'")
        return uri.dataset_key

    def dataset_from_parsed_uri(self, uri: BenchmarkUri) -> Dataset:
        key = self._key(uri)
        if key not in self._datasets:
            raise UnknownBenchmarkError(f"Dataset not found: {key}")
        return self._datasets[key]

    def dataset(self, dataset: Union[str, Dataset]) -> Dataset:
        """The dataset of that name (deprecated ones too); UnknownBenchmarkError (a LookupError) when there is
        none."""
        name = dataset.name if isinstance(dataset, Dataset) else str(dataset)
        return self.dataset_from_parsed_uri(BenchmarkUri.from_string(name))

    __getitem__ = dataset

    def __setitem__(self, key: str, dataset: Dataset) -> None:
        self._datasets[self._key(BenchmarkUri.from_string(key))] = dataset

    def __delitem__(self, dataset: Union[str, Dataset]) -> None:
        name = dataset.name if isinstance(dataset, Dataset) else str(dataset)
        key = self._key(BenchmarkUri.from_string(name))
        if key not in self._datasets:
            raise UnknownBenchmarkError(f"Dataset not found: {key}")
        del self._datasets[key]

    def __contains__(self, dataset) -> bool:
        try:
            self.dataset(dataset)
        except (LookupError, ValueError):
            return False
        return True

    def register(self, name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
        """Add a folder of programs or a corpus store as the dataset ``benchmark://NAME-vN``."""
        return self.add(dataset_from_path(name, path, split=split))

    def add(self, dataset: Dataset) -> Dataset:
        self._datasets[dataset.name] = dataset
        return dataset

    def benchmarks(self, with_deprecated: bool = False) -> Iterator[Benchmark]:
        """Every benchmark, one of each dataset in turn (endless when a generator is among them)."""
        return round_robin_iterables(d.benchmarks() for d in self.datasets(with_deprecated))

    def benchmark_uris(self, with_deprecated: bool = False) -> Iterator[str]:
        """The URIs of :meth:`benchmarks`, in its order."""
        return round_robin_iterables(d.benchmark_uris() for d in self.datasets(with_deprecated))

    def benchmark(self, uri: Union[str, os.PathLike]) -> Benchmark:
        """The benchmark named by a URI of one of the datasets, ``proto://FILE``, ``file://PATH``, a store URI, or
        a path to a file; UnknownBenchmarkError (a LookupError) when nothing provides it, FileNotFoundError for a
        ``proto://`` or ``file://`` file that is not there."""
        text = os.fspath(uri)
        if "://" not in text and not (_NAME.match(text.split("/", 1)[0]) and "/" in text):
            return _file_benchmark(text)
        return self.benchmark_from_parsed_uri(BenchmarkUri.from_string(text))

    def benchmark_from_parsed_uri(self, uri: BenchmarkUri) -> Benchmark:
        if uri.scheme == "proto":
            path = Path(os.path.normpath(f"{uri.dataset}/{uri.path}"))
            if not path.is_file():
                raise FileNotFoundError(str(path))
            return Benchmark(BenchmarkProto.FromString(path.read_bytes()))
        if uri.scheme == "file":
            path = Path(os.path.normpath(f"{uri.dataset}/{uri.path}"))
            if not path.is_file():
                raise FileNotFoundError(str(path))
            return Benchmark.from_file(uri, path)
        if re.fullmatch(r"benchmark://(/.+)/([0-9a-f]{64})", uri):
            return Benchmark(str(uri), str(uri))
        return self.dataset_from_parsed_uri(uri).benchmark_from_parsed_uri(uri)

    def random_benchmark(self, random_state: Optional[np.random.Generator] = None, weighted: bool = False,
                         weights: Optional[Dict[str, float]] = None) -> Benchmark:
        """A benchmark of a dataset drawn uniformly among the finite ones (those of a non-zero ``size``), or,
        when ``weighted`` or given ``weights`` (dataset name -> weight), with probability proportional to its
        size or weight; then a benchmark of it, uniformly."""
        rng = random_state if random_state is not None else np.random.default_rng()
        names = sorted(d.name for d in self.datasets())
        if weighted or weights:
            w = np.array([(weights or {}).get(n, self._datasets[n].size) for n in names], dtype=float)
        else:
            w = np.array([1.0 if self._datasets[n].size else 0.0 for n in names])
            if not w.any():
                w = np.ones(len(names))
        if not len(names) or w.sum() <= 0:
            raise UnknownBenchmarkError("No dataset to draw a benchmark from")
        dataset = self._datasets[names[int(rng.choice(len(names), p=w / w.sum()))]]
        return dataset.random_benchmark(random_state=rng)

    @property
    def size(self) -> int:
        """The number of datasets, the deprecated ones left out."""
        return sum(1 for d in self._datasets.values() if not d.deprecated)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Datasets({', '.join(self._datasets)})"


def _file_benchmark(path: str) -> Benchmark:
    """The benchmark of the file at ``path`` (``file://`` + its absolute path); UnknownBenchmarkError naming
    the dataset that ``path`` would be when it is no file."""
    if not Path(path).is_file():
        raise UnknownBenchmarkError(f"Dataset not found: {BenchmarkUri.from_string(path).dataset_key}")
    return Benchmark.from_file(f"file://{Path(path).resolve()}", Path(path))


__all__ = ["Benchmark", "BenchmarkDynamicConfig", "BenchmarkInitError", "BenchmarkProto", "BenchmarkSource",
           "BenchmarkUri", "Command", "Commands", "Dataset", "Datasets", "File", "FilesDataset", "GeneratorDataset",
           "ProgramsDataset", "StoreDataset", "ValidationCallback", "canonical_uri", "dataset_from_path",
           "default_datasets", "register_dataset", "round_robin_iterables"]
