"""Benchmarks and datasets, CompilerGym 0.2.5's way of naming programs (``benchmark://NAME-v0/PATH``), over what
is on this machine: a folder of C/C++/IR files or a corpus store registered as a dataset, the package's example
programs (``benchmark://examples-v0/matmul``), and the csmith / llvm-stress generators
(``generator://csmith-v0/SEED``). Nothing is downloaded::

    env.datasets.register("mine-v0", "path/to/programs")        # or a corpus store folder
    env.reset(benchmark="benchmark://mine-v0/sub/prog")          # path/to/programs/sub/prog.c
    env.reset(benchmark=env.datasets["mine-v0"].random_benchmark())

A benchmark is buildable and runnable as in CompilerGym: only when it says how it is built and run. The package's
examples (``benchmark://examples-v0/...``) and Csmith programs are, the package's way (``llc-19 -O2``, linked by
clang, run without arguments in the sandbox), when they have a ``main`` that links; a benchmark given a
``build_cmd`` (and ``run_cmd``) in ``benchmark.proto.dynamic_config`` is, with those commands. Everything else is
not, even with a ``main``: a file (``file://...``), a ``make_benchmark`` program, a registered folder or corpus
store, llvm-stress modules (CompilerGym 0.2.5's ``IsBuildable`` / ``IsRunnable`` are 0 and ``Runtime`` /
``Buildtime`` None for a benchmark without a build command, whatever its module holds: running a program needs
its arguments and inputs, which a file does not carry).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Union

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


def canonical_uri(uri: str) -> str:
    """``cbench-v1/crc32`` -> ``benchmark://cbench-v1/crc32`` (a URI with a scheme is kept)."""
    uri = str(uri)
    return uri if "://" in uri else f"benchmark://{uri}"


# -- CompilerGym's Benchmark message, as plain dataclasses (attribute access as on the protobuf messages) ---------

@dataclasses.dataclass
class File:
    """CompilerGym's ``File`` message: a program's ``contents`` (bytes) or the ``uri`` of a file holding it."""

    contents: bytes = b""
    uri: str = ""


@dataclasses.dataclass
class Command:
    """CompilerGym's ``Command`` message: ``argument``, the command line (``$CC`` is clang-19, ``$IN`` the module's
    bitcode file); ``env``, variables to set; ``timeout_seconds`` (0: 300); ``infile`` / ``outfile``, files that
    must exist before / after it runs. It runs in the benchmark's scratch folder."""

    argument: List[str] = dataclasses.field(default_factory=list)
    env: Dict[str, str] = dataclasses.field(default_factory=dict)
    timeout_seconds: int = 0
    infile: List[str] = dataclasses.field(default_factory=list)
    outfile: List[str] = dataclasses.field(default_factory=list)


class Commands(list):
    """A repeated ``Command`` field: a list with protobuf's ``add(**fields)``."""

    def add(self, **fields) -> Command:
        self.append(Command(**fields))
        return self[-1]


@dataclasses.dataclass
class BenchmarkDynamicConfig:
    """CompilerGym's ``BenchmarkDynamicConfig`` message: how the benchmark is built (``build_cmd``) and run
    (``run_cmd``, between the ``pre_run_cmd`` and ``post_run_cmd`` commands)."""

    build_cmd: Command = dataclasses.field(default_factory=Command)
    run_cmd: Command = dataclasses.field(default_factory=Command)
    pre_run_cmd: Commands = dataclasses.field(default_factory=Commands)
    post_run_cmd: Commands = dataclasses.field(default_factory=Commands)

    @property
    def is_buildable(self) -> bool:
        return bool(self.build_cmd.argument)

    @property
    def is_runnable(self) -> bool:
        return bool(self.build_cmd.argument and self.run_cmd.argument)


@dataclasses.dataclass
class BenchmarkProto:
    """CompilerGym's ``Benchmark`` message (``compiler_gym.service.proto.Benchmark``): ``uri``, ``program`` and
    ``dynamic_config``."""

    uri: str = ""
    program: File = dataclasses.field(default_factory=File)
    dynamic_config: BenchmarkDynamicConfig = dataclasses.field(default_factory=BenchmarkDynamicConfig)


class BenchmarkUri(str):
    """A benchmark URI (a ``str``) with CompilerGym's parts: ``scheme``, ``dataset``, ``path``."""

    @property
    def scheme(self) -> str:
        return self.split("://", 1)[0]

    @property
    def dataset(self) -> str:
        return self.split("://", 1)[1].split("/", 1)[0]

    @property
    def path(self) -> str:
        rest = self.split("://", 1)[1]
        return rest[len(rest.split("/", 1)[0]):]


class Benchmark:
    """A program to compile: its ``uri`` and where its module comes from (``source``: a path, IR or bitcode
    bytes, a Module, or a generator or store URI). The module is loaded once and kept.

    ``runnable``: built and run the package's way (see the module docstring); else only a ``build_cmd`` /
    ``run_cmd`` set in :attr:`proto`'s ``dynamic_config`` makes it buildable / runnable."""

    def __init__(self, uri: str, source: Union[str, os.PathLike, bytes, Module], *, runnable: bool = False):
        self._uri = BenchmarkUri(canonical_uri(uri))
        self.source = source
        self.runnable = runnable
        self._module: Optional[Module] = None
        self._dynamic_config = BenchmarkDynamicConfig()
        self._proto: Optional[BenchmarkProto] = None

    @property
    def uri(self) -> BenchmarkUri:
        return self._uri

    @property
    def proto(self) -> BenchmarkProto:
        """CompilerGym's ``Benchmark`` message of this benchmark: ``uri``, ``program.contents`` (the file's bytes,
        the IR or bitcode given, else the module's bitcode) and ``dynamic_config``, which is the benchmark's own:
        a ``build_cmd`` set there makes it buildable, with a ``run_cmd`` runnable (read at the next ``reset``)."""
        if self._proto is None:
            self._proto = BenchmarkProto(uri=str(self.uri), program=File(contents=self._contents()),
                                         dynamic_config=self._dynamic_config)
        return self._proto

    @property
    def dynamic_config(self) -> BenchmarkDynamicConfig:
        """How the benchmark is built and run (the same object as ``proto.dynamic_config``)."""
        return self._dynamic_config

    def _contents(self) -> bytes:
        if isinstance(self.source, Module):
            return self.source.bitcode
        if isinstance(self.source, (bytes, bytearray)):
            return bytes(self.source)
        if isinstance(self.source, os.PathLike) or (isinstance(self.source, str) and Path(self.source).is_file()):
            return Path(self.source).read_bytes()
        return self.load(None).bitcode

    def load(self, engine) -> Module:
        """The benchmark's module (compiled or parsed on the first call)."""
        if self._module is None:
            try:
                _, self._module = load_benchmark(self.source, engine)
            except InvalidIRError as exc:
                raise InvalidIRError(f'Failed to parse LLVM bitcode: "{self.uri}": {exc}') from None
        return self._module

    def is_buildable(self) -> bool:
        """Whether the benchmark says how it is built (the package's way, or a ``build_cmd``)."""
        return self.runnable or self._dynamic_config.is_buildable

    def is_runnable(self) -> bool:
        """Whether the benchmark says how it is built and run (the package's way, or ``build_cmd`` and
        ``run_cmd``)."""
        return self.runnable or self._dynamic_config.is_runnable

    def is_validatable(self) -> bool:
        """False: no benchmark here carries semantics checks (CompilerGym's cBench validators are not shipped)."""
        return False

    def validate(self, env) -> list:
        return []

    @classmethod
    def from_file(cls, uri: str, path: os.PathLike) -> "Benchmark":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(str(path))
        return cls(uri, path)

    @classmethod
    def from_file_contents(cls, uri: str, data: bytes) -> "Benchmark":
        return cls(uri, bytes(data))

    def __eq__(self, other) -> bool:
        if isinstance(other, Benchmark):
            return self.uri == other.uri
        if isinstance(other, str):
            return self.uri == canonical_uri(other)
        return False

    def __hash__(self) -> int:
        return hash(self.uri)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return self.uri


class Dataset:
    """A named collection of benchmarks. ``name`` is ``SCHEME://NAME-vN``; ``size`` is 0 for an endless
    generator."""

    def __init__(self, name: str, description: str = "", license: str = "", deprecated: bool = False):
        self.name = canonical_uri(name)
        self.description = description
        self.license = license
        self.deprecated = deprecated
        self.installed = True
        self._recent: "OrderedDict[str, Benchmark]" = OrderedDict()

    def _keep(self, benchmark: Benchmark) -> Benchmark:
        """The benchmark already made for this URI when it is among the last CACHED_BENCHMARKS (so a reset by URI
        reuses the loaded module), else ``benchmark``."""
        kept = self._recent.pop(benchmark.uri, benchmark)
        self._recent[benchmark.uri] = kept
        while len(self._recent) > CACHED_BENCHMARKS:
            self._recent.popitem(last=False)
        return kept

    @property
    def protocol(self) -> str:
        return self.name.split("://", 1)[0]

    scheme = protocol

    @property
    def version(self) -> int:
        return int(self.name.rsplit("-v", 1)[1])

    @property
    def size(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.size

    def install(self) -> None:
        """Nothing to install: every dataset here is local."""

    def benchmark_uris(self) -> Iterator[str]:
        raise NotImplementedError

    def benchmarks(self) -> Iterator[Benchmark]:
        for uri in self.benchmark_uris():
            yield self.benchmark(uri)

    def benchmark(self, uri: Optional[str] = None) -> Benchmark:
        """The benchmark at ``uri`` (a full URI or a path inside the dataset); None: the first."""
        raise NotImplementedError

    def random_benchmark(self, random_state: Optional[np.random.Generator] = None) -> Benchmark:
        """A benchmark drawn uniformly (seeded by ``random_state``)."""
        rng = random_state if random_state is not None else np.random.default_rng()
        uris = list(self.benchmark_uris())
        return self.benchmark(uris[int(rng.integers(len(uris)))])

    def _path_of(self, uri: str) -> str:
        """The path of ``uri`` inside this dataset (``uri``: a full URI or already a path inside it)."""
        canonical = canonical_uri(uri)
        if canonical.startswith(self.name + "/"):
            return canonical[len(self.name) + 1:]
        if "://" in uri:
            raise UnknownBenchmarkError(f"Benchmark not found: {uri}")
        return uri.lstrip("/")

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.name == canonical_uri(other)
        return isinstance(other, Dataset) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


class FilesDataset(Dataset):
    """The C/C++/IR files of a folder (recursively): ``benchmark://NAME-vN/REL/PATH`` without the suffix.
    ``runnable``: its programs are built and run the package's way (see the module docstring)."""

    def __init__(self, name: str, folder: os.PathLike, description: str = "", *, runnable: bool = False):
        super().__init__(name, description or f"the programs in {folder}")
        self.runnable = runnable
        self.folder = Path(folder).resolve()
        if not self.folder.is_dir():
            raise UnknownBenchmarkError(f"{folder}: no such folder")
        self._files: Dict[str, Path] = {}
        for path in sorted(p for p in self.folder.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
            rel = path.relative_to(self.folder)
            self._files.setdefault(rel.with_suffix("").as_posix(), path)

    @property
    def size(self) -> int:
        return len(self._files)

    def benchmark_uris(self) -> Iterator[str]:
        return (f"{self.name}/{rel}" for rel in self._files)

    def benchmark(self, uri: Optional[str] = None) -> Benchmark:
        rel = next(iter(self._files)) if uri is None else self._path_of(uri)
        if rel not in self._files:
            raise UnknownBenchmarkError(f"Benchmark not found: {self.name}/{rel}")
        return self._keep(Benchmark(f"{self.name}/{rel}", self._files[rel], runnable=self.runnable))


class StoreDataset(Dataset):
    """The modules of a corpus store: ``benchmark://NAME-vN/SHA256``, optionally one split's."""

    def __init__(self, name: str, store: os.PathLike, split: Optional[str] = None, description: str = ""):
        super().__init__(name, description or f"the modules of the corpus store {store}")
        self.store = Path(store).resolve()
        corpus = Corpus(self.store)
        self._shas = corpus.split(split) if split else sorted(corpus.store.keys("modules"))

    @property
    def size(self) -> int:
        return len(self._shas)

    def benchmark_uris(self) -> Iterator[str]:
        return (f"{self.name}/{sha}" for sha in self._shas)

    def benchmark(self, uri: Optional[str] = None) -> Benchmark:
        sha = self._shas[0] if uri is None else self._path_of(uri)
        if sha not in self._shas:
            raise UnknownBenchmarkError(f"Benchmark not found: {self.name}/{sha}")
        return self._keep(Benchmark(f"{self.name}/{sha}", f"benchmark://{self.store}/{sha}"))


class GeneratorDataset(Dataset):
    """Programs generated on demand from a seed: ``generator://csmith-v0/SEED``, ``generator://llvm-stress-v0/SEED``
    (endless: ``size`` 0, ``benchmark_uris`` counts up from seed 0). Csmith's programs are runnable (as in
    CompilerGym), llvm-stress's modules are not (they have no ``main``)."""

    @property
    def size(self) -> int:
        return 0

    def benchmark_uris(self) -> Iterator[str]:
        return (f"{self.name}/{seed}" for seed in itertools.count())

    def benchmark(self, uri: Optional[str] = None) -> Benchmark:
        seed = "0" if uri is None else self._path_of(uri)
        if not seed.isdigit():
            raise UnknownBenchmarkError(f"Benchmark not found: {self.name}/{seed} (the path of a generated "
                                        "benchmark is a seed)")
        return self._keep(Benchmark(f"{self.name}/{int(seed)}", f"{self.name}/{int(seed)}",
                                    runnable=self.name == "generator://csmith-v0"))

    def random_benchmark(self, random_state: Optional[np.random.Generator] = None) -> Benchmark:
        rng = random_state if random_state is not None else np.random.default_rng()
        return self.benchmark(f"{self.name}/{int(rng.integers(2 ** 32))}")


def dataset_from_path(name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
    """A :class:`StoreDataset` when ``path`` is a corpus store, else a :class:`FilesDataset`. ``name``:
    ``NAME-vN`` (the ``benchmark://`` prefix is optional)."""
    bare = name.split("://", 1)[-1]
    if not _NAME.fullmatch(bare):
        raise ValueError(f"dataset name {name!r}: expected NAME-vN, e.g. 'mine-v0'")
    if (Path(path) / MANIFEST).is_file():
        return StoreDataset(bare, path, split=split)
    if split:
        raise ValueError(f"{path}: a split needs a corpus store")
    return FilesDataset(bare, path)


#: Datasets that every new environment lists (see :func:`register_dataset`).
_REGISTERED: Dict[str, Dataset] = {}


def register_dataset(name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
    """Make a folder of programs or a corpus store a dataset of every environment created from now on
    (``benchmark://NAME-vN/...``)."""
    dataset = dataset_from_path(name, path, split=split)
    _REGISTERED[dataset.name] = dataset
    return dataset


def default_datasets() -> List[Dataset]:
    """The package's examples (``benchmark://examples-v0/...``), the generators, then the registered datasets."""
    examples = Path(str(resources.files("behavioral_pq").joinpath("data/examples")))
    return [FilesDataset("examples-v0", examples, "the package's example programs", runnable=True),
            GeneratorDataset("generator://csmith-v0", "programs generated by csmith"),
            GeneratorDataset("generator://llvm-stress-v0", "modules generated by llvm-stress"),
            *_REGISTERED.values()]


class Datasets:
    """The datasets of an environment, by name: ``datasets["examples-v0"]``, ``benchmark(uri)``,
    ``benchmark_uris()``, ``random_benchmark()``. A benchmark can also be a path to a file, or a corpus store's
    ``benchmark://STORE-FOLDER/SHA256``."""

    def __init__(self, datasets: Iterable[Dataset]):
        self._datasets: Dict[str, Dataset] = {d.name: d for d in datasets}

    def datasets(self, with_deprecated: bool = False) -> Iterator[Dataset]:
        return (d for d in self._datasets.values() if with_deprecated or not d.deprecated)

    def __iter__(self) -> Iterator[Dataset]:
        return self.datasets()

    def __len__(self) -> int:
        return len(self._datasets)

    def __contains__(self, name) -> bool:
        try:
            self.dataset(name)
        except LookupError:
            return False
        return True

    def dataset(self, name: Union[str, Dataset]) -> Dataset:
        name = name.name if isinstance(name, Dataset) else canonical_uri(str(name)).rstrip("/")
        if name not in self._datasets:
            raise UnknownBenchmarkError(f"Dataset not found: {name}")
        return self._datasets[name]

    __getitem__ = dataset

    def register(self, name: str, path: os.PathLike, split: Optional[str] = None) -> Dataset:
        """Add a folder of programs or a corpus store as the dataset ``benchmark://NAME-vN``."""
        return self.add(dataset_from_path(name, path, split=split))

    def add(self, dataset: Dataset) -> Dataset:
        self._datasets[dataset.name] = dataset
        return dataset

    def benchmarks(self, with_deprecated: bool = False) -> Iterator[Benchmark]:
        """Every benchmark, dataset by dataset (endless when a generator is among them: it comes last)."""
        ordered = sorted(self.datasets(with_deprecated), key=lambda d: d.size == 0)
        return itertools.chain.from_iterable(d.benchmarks() for d in ordered)

    def benchmark_uris(self, with_deprecated: bool = False) -> Iterator[str]:
        ordered = sorted(self.datasets(with_deprecated), key=lambda d: d.size == 0)
        return itertools.chain.from_iterable(d.benchmark_uris() for d in ordered)

    def benchmark(self, uri: Union[str, os.PathLike]) -> Benchmark:
        """The benchmark named by a URI of one of the datasets, a store URI, or a path to a file;
        UnknownBenchmarkError (a LookupError) when nothing provides it."""
        text = os.fspath(uri)
        if "://" in text or _NAME.match(text.split("/", 1)[0]) and "/" in text:
            canonical = canonical_uri(text)
            for name, dataset in self._datasets.items():
                if canonical.startswith(name + "/"):
                    return dataset.benchmark(canonical)
            if re.fullmatch(r"benchmark://(/.+)/([0-9a-f]{64})", canonical):
                return Benchmark(canonical, canonical)
            if canonical.startswith("file://"):
                return _file_benchmark(canonical[len("file://"):], text)
            raise UnknownBenchmarkError(f"Dataset not found: {_dataset_of(canonical)}")
        return _file_benchmark(text, text)

    def random_benchmark(self, random_state: Optional[np.random.Generator] = None,
                         weighted: bool = False) -> Benchmark:
        """A benchmark of a dataset drawn uniformly (by size when ``weighted``) among the finite ones."""
        rng = random_state if random_state is not None else np.random.default_rng()
        finite = [d for d in self.datasets() if d.size]
        weights = np.array([d.size for d in finite], dtype=float) if weighted else np.ones(len(finite))
        dataset = finite[int(rng.choice(len(finite), p=weights / weights.sum()))]
        return dataset.random_benchmark(random_state=rng)

    @property
    def size(self) -> int:
        return len(self._datasets)

    def __repr__(self) -> str:
        return f"Datasets({', '.join(self._datasets)})"


def _dataset_of(uri: str) -> str:
    """``SCHEME://DATASET`` of a canonical URI (CompilerGym's dataset key)."""
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _file_benchmark(path: str, text: str) -> Benchmark:
    if not Path(path).is_file():
        if text.startswith("file://"):
            raise UnknownBenchmarkError(f"File not found: {path}")
        raise UnknownBenchmarkError(f"Dataset not found: {_dataset_of(canonical_uri(text))}")
    return Benchmark(f"file://{Path(path).resolve()}", Path(path))


__all__ = ["Benchmark", "BenchmarkDynamicConfig", "BenchmarkInitError", "BenchmarkProto", "BenchmarkUri", "Command",
           "Commands", "Dataset", "Datasets", "File", "FilesDataset", "GeneratorDataset", "StoreDataset",
           "canonical_uri", "dataset_from_path", "default_datasets", "register_dataset"]
