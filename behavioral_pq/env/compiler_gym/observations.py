"""The observation spaces of CompilerGym 0.2.5's ``llvm-v0`` on LLVM 19: each one's spec (space type,
determinism, platform dependence, the value a failed step returns, as CompilerGym declares them) and how it is
computed from the core environment's modules. ProGraML graphs come from the native core
(:mod:`behavioral_pq.core.programl`), inst2vec from :mod:`behavioral_pq.core.inst2vec` (its vocabulary is
installed by setup).

``IsBuildable``, ``IsRunnable``, ``Buildtime`` and ``Runtime`` follow the benchmark, as in CompilerGym (see
:mod:`.datasets`): a benchmark built the package's way is buildable and runnable when its module has a ``main``
that links; one with a ``build_cmd`` in its ``dynamic_config`` is buildable, and runnable with a ``run_cmd``
(those commands build and time it); any other is neither (0, 0, None, None). ``TextSize*`` is the linked
program's .text when the package builds it, else the object file's (CompilerGym's fallback).

``observation_specs()`` are CompilerGym's spaces, the names an environment lists in ``env.observation.spaces``;
this package's Spectrum, Codes and Embedding (``extra_observation_specs()``) are computed as they are but not
listed there. ``BitcodeFile`` files go to the environment's working directory, which its ``close()`` removes.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from behavioral_pq.core.features import AUTOPHASE_FEATURES, INSTCOUNT_FEATURES
from behavioral_pq.core.inst2vec import EMBEDDING_DIM, inst2vec_embeddings, inst2vec_indices, inst2vec_preprocess
from behavioral_pq.core.programl import graph_from_json, programl_graph, programl_json
from behavioral_pq.core.module import Module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import assemble, llc_assembly, needs_cxx_runtime, object_text_size
from behavioral_pq.env.compiler_gym.benchmarks import benchmark_runtimes, build_benchmark
from behavioral_pq.env.compiler_gym.lexed_ir import lex_ir, lexed_tokens
from behavioral_pq.env.compiler_gym.spaces import Box, Dict as DictSpace, Scalar, Sequence
from behavioral_pq.env.compiler_gym.views import ObservationSpaceSpec
from behavioral_pq.env.llvm import _runtime as run_program
from behavioral_pq.errors import ToolError, UnsupportedSpaceError

INT64_MAX = int(np.iinfo(np.int64).max)

#: CompilerGym's spaces that have no LLVM 19 implementation here, and why (none today: every llvm-v0 space of
#: CompilerGym 0.2.5 is computed).
UNSUPPORTED: Dict[str, str] = {}

#: ProgramlJson of a failed step: an empty node-link graph.
EMPTY_GRAPH = {"directed": True, "graph": {"function": [], "module": []}, "links": [], "multigraph": True,
               "nodes": []}

_MAIN = re.compile(r"^define [^@]*@main\(", re.M)


def has_main(module: Module) -> bool:
    return bool(_MAIN.search(module.text()))


def build_program(module: Module, folder: Path) -> Path:
    """The module linked as an executable (``llc-19 -O2`` and clang, as the Runtime observation runs it)."""
    return assemble(llc_assembly(module.bitcode, opt_level=2), folder / "a.out", executable=True,
                    cxx=needs_cxx_runtime(module.text()))


def _builds_natively(env, module: Module) -> bool:
    """Whether the package builds the benchmark (its own way, no ``build_cmd``) and ``module`` links."""
    benchmark = env.benchmark
    if not benchmark.runnable or benchmark.dynamic_config.is_buildable:
        return False

    def compute():
        if not has_main(module):
            return False
        try:
            with tempfile.TemporaryDirectory(prefix="bpq-build-") as tmp:
                build_program(module, Path(tmp))
            return True
        except ToolError:
            return False
    return env._cached("IsBuildable", module, compute)


def _buildable(env, module: Module) -> bool:
    return env.benchmark.dynamic_config.is_buildable or _builds_natively(env, module)


def _runnable(env, module: Module) -> bool:
    config = env.benchmark.dynamic_config
    return config.is_runnable if config.is_buildable else _builds_natively(env, module)


def _text_size(env, module: Module) -> int:
    """.text bytes of the linked program when the package builds it, else of its object (CompilerGym's
    fallback)."""
    def compute():
        if not _builds_natively(env, module):
            return int(env._core._compute("ObjectTextSizeBytes", module))
        with tempfile.TemporaryDirectory(prefix="bpq-build-") as tmp:
            return object_text_size(build_program(module, Path(tmp)))
    return env._cached("TextSizeBytes", module, compute)


def _baseline(env, module: Module, level: str) -> Module:
    return env._cached(f"module{level}", module, lambda: optimize(module, level, engine=env._core.engine))


def _buildtime(env, module: Module) -> Optional[np.ndarray]:
    config = env.benchmark.dynamic_config
    if not _buildable(env, module):
        return None
    times = []
    for _ in range(env.buildtime_observation_count):
        with tempfile.TemporaryDirectory(prefix="bpq-build-") as tmp:
            if config.is_buildable:
                times.append(build_benchmark(module, config, Path(tmp)))
                continue
            start = time.perf_counter()
            build_program(module, Path(tmp))
            times.append(time.perf_counter() - start)
    return np.array(times, dtype=np.float64)


def _runtime(env, module: Module) -> Optional[np.ndarray]:
    config = env.benchmark.dynamic_config
    if not _runnable(env, module):
        return None
    if config.is_buildable:
        return benchmark_runtimes(module, config, runs=env.runtime_observation_count,
                                  warmup=env.runtime_warmup_runs_count)
    return run_program(module, runs=env.runtime_observation_count, warmup=env.runtime_warmup_runs_count)


def _bitcode_file(env, module: Module) -> str:
    """The path of a new file holding ``module``'s bitcode, in the environment's working directory (removed
    with it when the environment closes, as CompilerGym's are)."""
    handle, path = tempfile.mkstemp(prefix="module-", suffix=".bc", dir=env.working_directory)
    with os.fdopen(handle, "wb") as f:
        f.write(module.bitcode)
    return path


#: Where Autophase counts every function, declarations included.
_TOTAL_FUNCS = AUTOPHASE_FEATURES.index("TotalFuncs")


def _instcount(env, module: Module) -> np.ndarray:
    """CompilerGym's InstCount: the core's counts with ``TotalFuncsCount`` counting declarations too, as LLVM's
    InstCount visitor does when CompilerGym runs it on every function of the module."""
    counts = np.array(env._core._compute("InstCount", module), dtype=np.int64)
    counts[2] = env._core._compute("Autophase", module)[_TOTAL_FUNCS]
    return counts


def _cache_size(level: str, kind: str) -> Tuple[int, int]:
    """(bytes, count) of a CPU cache level from sysfs (0, 0 when absent)."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            if (index / "level").read_text().strip() != level[1] or \
                    (index / "type").read_text().strip() not in kind:
                continue
            size = (index / "size").read_text().strip()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            value = int(size.rstrip("KMG")) * scale
            shared = (index / "shared_cpu_list").read_text().strip()
            sharing = sum(int(b) - int(a) + 1 if "-" in part else 1
                          for part in shared.split(",") for a, _, b in [part.partition("-")])
            return value, max(1, (os.cpu_count() or 1) // max(1, sharing))
        except (OSError, ValueError):
            continue
    return 0, 0


def cpu_info() -> Dict[str, Any]:
    """The host CPU as CompilerGym's CpuInfo: name, core count, and size and count of each cache level."""
    name = ""
    try:
        name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "")
    except OSError:
        pass
    info: Dict[str, Any] = {"name": name, "cores_count": int(os.cpu_count() or 1)}
    for key, level, kind in (("l1i", "L1", ("Instruction",)), ("l1d", "L1", ("Data",)),
                             ("l2", "L2", ("Unified", "Data")), ("l3", "L3", ("Unified", "Data")),
                             ("l4", "L4", ("Unified", "Data"))):
        size, count = _cache_size(level, kind)
        info[f"{key}_cache_size"], info[f"{key}_cache_count"] = int(size), int(count)
    return info


def _scalar(name: str, dtype=int, low=0, high=None) -> Scalar:
    return Scalar(name=name, min=low, max=high, dtype=dtype)


_INSTCOUNT_NAMES = [n[:-len("Count")] for n in INSTCOUNT_FEATURES]

#: name -> (space, deterministic, platform dependent, default value, compute(env, module, initial module)).
_TABLE: List[Tuple[str, Any, bool, bool, Any, Callable]] = [
    ("Ir", Sequence("Ir", (0, INT64_MAX), str), True, False, "", lambda e, m, i: e._core._compute("Ir", m)),
    ("IrSha1", Sequence("IrSha1", (40, 40), str), True, False, "",
     lambda e, m, i: hashlib.sha1(e._core._compute("Ir", m).encode("utf-8")).hexdigest()),
    ("Bitcode", Sequence("Bitcode", (0, INT64_MAX), np.int8), True, False, np.zeros(0, np.int8),
     lambda e, m, i: np.frombuffer(m.bitcode, dtype=np.int8)),
    ("BitcodeFile", Sequence("BitcodeFile", (0, 4096), str), False, False, "",
     lambda e, m, i: _bitcode_file(e, m)),
    ("InstCount", Box(0, INT64_MAX, "InstCount", (len(INSTCOUNT_FEATURES),), np.int64), True, False,
     np.zeros(len(INSTCOUNT_FEATURES), np.int64), lambda e, m, i: _instcount(e, m)),
    ("InstCountDict", DictSpace({n: _scalar(n) for n in INSTCOUNT_FEATURES}, "InstCountDict"), True, False,
     {n: 0 for n in INSTCOUNT_FEATURES},
     lambda e, m, i: {n: int(v) for n, v in zip(INSTCOUNT_FEATURES, _instcount(e, m))}),
    ("InstCountNorm", Box(0, 1, "InstCountNorm", (len(INSTCOUNT_FEATURES) - 1,), np.float32), True, False,
     np.zeros(len(INSTCOUNT_FEATURES) - 1, np.float32), lambda e, m, i: _instcount_norm(e, m)),
    ("InstCountNormDict", DictSpace({f"{n}Density": _scalar(f"{n}Density", float) for n in _INSTCOUNT_NAMES[1:]},
                                    "InstCountNormDict"), True, False,
     {f"{n}Density": 0.0 for n in _INSTCOUNT_NAMES[1:]},
     lambda e, m, i: {f"{n}Density": float(v) for n, v in zip(_INSTCOUNT_NAMES[1:], _instcount_norm(e, m))}),
    ("Autophase", Box(0, INT64_MAX, "Autophase", (len(AUTOPHASE_FEATURES),), np.int64), True, False,
     np.zeros(len(AUTOPHASE_FEATURES), np.int64), lambda e, m, i: e._core._compute("Autophase", m)),
    ("AutophaseDict", DictSpace({n: _scalar(n) for n in AUTOPHASE_FEATURES}, "AutophaseDict"), True, False,
     {n: 0 for n in AUTOPHASE_FEATURES},
     lambda e, m, i: {n: int(v) for n, v in zip(AUTOPHASE_FEATURES, e._core._compute("Autophase", m))}),
    ("LexedIr", Sequence("LexedIr", (0, INT64_MAX), dict), True, False,
     {"token_id": [], "token_kind": [], "token_category": [], "token_value": []},
     lambda e, m, i: lex_ir(e._core._compute("Ir", m))),
    ("LexedIrTuple", Sequence("LexedToken", (0, INT64_MAX), tuple), True, False, [],
     lambda e, m, i: lexed_tokens(lex_ir(e._core._compute("Ir", m)))),
    ("CpuInfo", DictSpace({"name": Sequence("name", (0, None), str),
                           **{k: _scalar(k, int, None) for k in (
                               "cores_count", "l1i_cache_size", "l1i_cache_count", "l1d_cache_size",
                               "l1d_cache_count", "l2_cache_size", "l2_cache_count", "l3_cache_size",
                               "l3_cache_count", "l4_cache_size", "l4_cache_count")}}, "CpuInfo"),
     True, True, {}, lambda e, m, i: cpu_info()),
    ("IrInstructionCount", _scalar("IrInstructionCount"), True, False, 0,
     lambda e, m, i: int(m.instruction_count)),
    ("IrInstructionCountO0", _scalar("IrInstructionCountO0"), True, False, 0,
     lambda e, m, i: int(i.instruction_count)),
    ("IrInstructionCountO3", _scalar("IrInstructionCountO3"), True, False, 0,
     lambda e, m, i: int(_baseline(e, i, "O3").instruction_count)),
    ("IrInstructionCountOz", _scalar("IrInstructionCountOz"), True, False, 0,
     lambda e, m, i: int(_baseline(e, i, "Oz").instruction_count)),
    ("ObjectTextSizeBytes", _scalar("ObjectTextSizeBytes"), True, True, 0,
     lambda e, m, i: int(e._core._compute("ObjectTextSizeBytes", m))),
    ("ObjectTextSizeO0", _scalar("ObjectTextSizeO0"), True, True, 0,
     lambda e, m, i: int(e._core._compute("ObjectTextSizeBytes", i))),
    ("ObjectTextSizeO3", _scalar("ObjectTextSizeO3"), True, True, 0,
     lambda e, m, i: int(e._core._compute("ObjectTextSizeBytes", _baseline(e, i, "O3")))),
    ("ObjectTextSizeOz", _scalar("ObjectTextSizeOz"), True, True, 0,
     lambda e, m, i: int(e._core._compute("ObjectTextSizeBytes", _baseline(e, i, "Oz")))),
    ("TextSizeBytes", _scalar("TextSizeBytes"), True, True, 0, lambda e, m, i: _text_size(e, m)),
    ("TextSizeO0", _scalar("TextSizeO0"), True, True, 0, lambda e, m, i: _text_size(e, i)),
    ("TextSizeO3", _scalar("TextSizeO3"), True, True, 0, lambda e, m, i: _text_size(e, _baseline(e, i, "O3"))),
    ("TextSizeOz", _scalar("TextSizeOz"), True, True, 0, lambda e, m, i: _text_size(e, _baseline(e, i, "Oz"))),
    ("Runtime", Sequence("Runtime", (0, None), np.float64, scalar_range=Scalar("runtime", 0, None, np.float64)),
     False, True, None, lambda e, m, i: _runtime(e, m)),
    ("Buildtime", Sequence("Buildtime", (0, None), np.float64, scalar_range=Scalar("buildtime", 0, None,
                                                                                   np.float64)),
     False, True, None, lambda e, m, i: _buildtime(e, m)),
    ("IsBuildable", _scalar("IsBuildable", int, 0, 1), True, True, 0, lambda e, m, i: int(_buildable(e, m))),
    ("IsRunnable", _scalar("IsRunnable", int, 0, 1), True, True, 0, lambda e, m, i: int(_runnable(e, m))),
    # ProGraML (behavioral_pq.core.programl): the graph built by the native core, in ProGraML's schema
    ("Programl", Sequence("Programl", (0, INT64_MAX), str), True, False, graph_from_json(EMPTY_GRAPH),
     lambda e, m, i: programl_graph(m)),
    ("ProgramlJson", Sequence("ProgramlJson", (0, INT64_MAX), str), True, False, EMPTY_GRAPH,
     lambda e, m, i: programl_json(m)),
    # inst2vec (behavioral_pq.core.inst2vec): its vocabulary and embeddings are installed by setup; LLVM 19's opaque
    # pointers are looked up by the statement's typed-pointer forms. Failed steps give empty values.
    ("Inst2vecPreprocessedText", Sequence("Inst2vecPreprocessedText", (0, None), str), True, False, [],
     lambda e, m, i: inst2vec_preprocess(m)),
    ("Inst2vecEmbeddingIndices", Sequence("Inst2vecEmbeddingIndices", (0, None), np.int32), True, False,
     np.zeros(0, np.int32), lambda e, m, i: inst2vec_indices(m)),
    ("Inst2vec", Sequence("Inst2vec", (0, None), np.ndarray), True, False,
     np.zeros((0, EMBEDDING_DIM), np.float32), lambda e, m, i: inst2vec_embeddings(m)),
]

#: This package's observations beyond CompilerGym's (see :func:`extra_observation_specs`), as ``_TABLE``.
_EXTRA_TABLE: List[Tuple[str, Any, bool, bool, Any, Callable]] = [
    ("Spectrum", Box(-np.inf, np.inf, "Spectrum", (0,), np.float32), True, False, None,
     lambda e, m, i: e._core._compute("Spectrum", m)),
    ("Codes", Box(0, 255, "Codes", (0,), np.uint8), True, False, None, lambda e, m, i: e._core._compute("Codes", m)),
    ("Embedding", Box(-np.inf, np.inf, "Embedding", (0,), np.float32), True, False, None,
     lambda e, m, i: e._core._compute("Embedding", m)),
]


def _instcount_norm(env, module: Module) -> np.ndarray:
    counts = _instcount(env, module)
    return (counts[1:] / max(int(counts[0]), 1)).astype(np.float32)


def observation_specs() -> List[ObservationSpaceSpec]:
    """The specs of CompilerGym 0.2.5's observation spaces (what ``env.observation.spaces`` lists), in a fixed
    order (``index``)."""
    return [ObservationSpaceSpec(name, index, space, deterministic, platform_dependent, default)
            for index, (name, space, deterministic, platform_dependent, default, _) in enumerate(_TABLE)]


def extra_observation_specs() -> List[ObservationSpaceSpec]:
    """The specs of this package's Spectrum, Codes and Embedding observations, indexed after CompilerGym's: an
    environment computes them as any other (``env.observation["Codes"]``, ``observation_space="Codes"``) but
    does not list them in ``env.observation.spaces``, which holds CompilerGym's names only."""
    return [ObservationSpaceSpec(name, index, space, deterministic, platform_dependent, default)
            for index, (name, space, deterministic, platform_dependent, default, _)
            in enumerate(_EXTRA_TABLE, start=len(_TABLE))]


#: name -> compute(env, module, initial module).
COMPUTE: Dict[str, Callable] = {row[0]: row[5] for row in (*_TABLE, *_EXTRA_TABLE)}


def refuse(name: str) -> None:
    """UnsupportedSpaceError for a CompilerGym space this package does not compute."""
    raise UnsupportedSpaceError(f"observation space {name!r} is not available: it {UNSUPPORTED[name]}. "
                                "Autophase, InstCount, Ir and Embedding are")


__all__ = ["COMPUTE", "UNSUPPORTED", "cpu_info", "extra_observation_specs", "observation_specs", "refuse"]
