"""The pass catalog: CompilerGym's 124-pass ``llvm-v0`` action space mapped to LLVM 19 pipeline elements.

The table is package data (``data/passes.tsv``, the project's spec). A pass sequence becomes a new-pass-manager
pipeline by joining the elements with commas.
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Sequence, Tuple, Union

from behavioral_pq.errors import UnknownPassError

CATALOG_VERSION = "llvm-v0/llvm19-1"

#: Named whole pipelines a step may stand for: the optimization levels, and ``Oz-outline``: -Oz, then LLVM's IR
#: outliner (``iroutliner``: similar instruction sequences in several functions become one function and calls;
#: clang's pipelines leave it off, and it is not in CompilerGym's action space), then -Oz again to tidy what it
#: leaves. A size candidate of the text-size search (BENCHMARKS "The IR outliner as a size candidate").
#: ``Oz-inline0``: -Oz with its inliner's threshold 0 instead of -Oz's own, a ``--passes`` name (``opt-19
#: -passes='default<Oz>' -inline-threshold=0``; ``bpq-inline-threshold<N>`` is the engine's own element, not
#: LLVM's): it halved a C++ train program's .text, and the text-size search, which does not try it, found as much
#: there without it (BENCHMARKS "Block placement as a codegen choice", the inliner threshold).
BASELINES = {"Oz": "default<Oz>", "O3": "default<O3>", "O2": "default<O2>", "O1": "default<O1>",
             "Os": "default<Os>", "O0": "default<O0>", "Oz-outline": "default<Oz>,iroutliner,default<Oz>",
             "Oz-inline0": "bpq-inline-threshold<0>,default<Oz>"}

#: LLVM 19's ``default<Oz>`` pipeline written with catalog passes, in order: the passes of
#: ``opt-19 -passes='default<Oz>' -print-pipeline-passes`` that the catalog has (analyses, openmp-opt,
#: constraint-elimination, vector-combine, infer-alignment and similar are left out; repeats kept, runs of the same
#: pass merged). A "good pipeline" whose prefixes give realistic intermediate states (see ``states.py``).
OZ_LIKE_ORDER = (
    "-forceattrs", "-inferattrs", "-coro-early", "-ee-instrument", "-lower-expect", "-simplifycfg", "-sroa",
    "-early-cse", "-ipsccp", "-called-value-propagation", "-globalopt", "-mem2reg", "-instcombine", "-simplifycfg",
    "-always-inline", "-inline", "-functionattrs", "-sroa", "-early-cse", "-speculative-execution",
    "-jump-threading", "-correlated-propagation", "-simplifycfg", "-instcombine", "-aggressive-instcombine",
    "-tailcallelim", "-simplifycfg", "-reassociate", "-loop-instsimplify", "-loop-simplifycfg", "-licm",
    "-loop-rotate", "-licm", "-simple-loop-unswitch", "-simplifycfg", "-instcombine", "-loop-idiom", "-indvars",
    "-simple-loop-unswitch", "-loop-deletion", "-sroa", "-mldst-motion", "-gvn", "-sccp", "-bdce", "-instcombine",
    "-jump-threading", "-correlated-propagation", "-adce", "-memcpyopt", "-dse", "-licm", "-coro-elide",
    "-simplifycfg", "-instcombine", "-functionattrs", "-coro-split", "-deadargelim", "-coro-cleanup", "-globalopt",
    "-globaldce", "-elim-avail-extern", "-rpo-functionattrs", "-float2int", "-lower-constant-intrinsics",
    "-loop-rotate", "-loop-deletion", "-loop-distribute", "-inject-tli-mappings", "-loop-vectorize",
    "-loop-load-elim", "-instcombine", "-simplifycfg", "-instcombine", "-loop-unroll", "-sroa", "-instcombine",
    "-licm", "-alignment-from-assumptions", "-loop-sink", "-instsimplify", "-div-rem-pairs", "-tailcallelim",
    "-simplifycfg", "-globaldce", "-constmerge",
)


#: Catalog passes that change what a program does. CompilerGym's action space has them (LLVM runs them for
#: targets that lack the feature); a pipeline meant to be built must not: ``-lowerinvoke`` turns every ``invoke``
#: into a ``call``, so an exception thrown through the function skips its handlers and cleanups (a caught
#: exception ends the program in std::terminate); ``-loweratomic`` turns atomic operations into plain loads and
#: stores, so threads race. On a module without invokes or atomics they change nothing. The pipeline searches
#: (:class:`~behavioral_pq.tasks.guidance.trials.Trials`) leave them out (:func:`meaning_preserving`); the
#: environment and the probes keep the whole action space.
MEANING_CHANGING = {"-lowerinvoke": "exceptions thrown through a call skip its handlers and cleanups",
                    "-loweratomic": "atomic operations become plain loads and stores, so threads race"}

@dataclass(frozen=True)
class Pass:
    """One catalog entry.

    Attributes:
        index: position in CompilerGym's ``llvm-v0`` action space (0..123).
        flag: CompilerGym's flag, e.g. ``"-instcombine"``.
        level: ``module``, ``cgscc``, ``function``, ``loop``, ...
        pipeline: the LLVM 19 new-PM element, already wrapped, e.g. ``"function(adce)"``.
        kind: ``same``, ``params``, ``substitute``, ``noop``, ... (how it relates to the LLVM 10 pass).
        note: free text from the spec.
    """

    index: int
    flag: str
    level: str
    pipeline: str
    kind: str
    note: str


def _load() -> Tuple[Pass, ...]:
    text = resources.files("behavioral_pq").joinpath("data/passes.tsv").read_text()
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
    passes = tuple(Pass(int(r["index"]), r["flag"], r["level"], r["pipeline_llvm19"], r["kind"], r["note"])
                   for r in rows)
    if [p.index for p in passes] != list(range(len(passes))):
        raise RuntimeError("corrupt pass catalog: indices are not 0..N-1")
    return passes


#: The 124 catalog passes in CompilerGym order.
PASSES: Tuple[Pass, ...] = _load()
_BY_FLAG = {p.flag: p for p in PASSES}

PassLike = Union[int, str, Pass]


def get_pass(spec: PassLike) -> Pass:
    """A catalog entry from an index, a flag (``"-sroa"`` or ``"sroa"``) or a :class:`Pass`."""
    if isinstance(spec, Pass):
        return spec
    if isinstance(spec, bool):
        raise UnknownPassError(f"not a pass: {spec!r}")
    if isinstance(spec, int):
        if 0 <= spec < len(PASSES):
            return PASSES[spec]
        raise UnknownPassError(f"pass index {spec} out of range 0..{len(PASSES) - 1}")
    if isinstance(spec, str):
        flag = spec.strip()
        flag = flag if flag.startswith("-") else "-" + flag
        if flag in _BY_FLAG:
            return _BY_FLAG[flag]
        close = difflib.get_close_matches(flag, _BY_FLAG, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownPassError(f"unknown pass {spec!r}{hint}; `bpq passes` lists the catalog")
    raise UnknownPassError(f"not a pass: {spec!r}")


def sequence_pipeline(passes: Iterable[PassLike]) -> str:
    """The new-PM pipeline of a pass sequence: catalog elements joined with commas."""
    elements = [get_pass(p).pipeline for p in passes]
    if not elements:
        raise UnknownPassError("empty pass sequence")
    return ",".join(elements)


def steps_pipeline(steps: Iterable[PassLike]) -> str:
    """Like :func:`sequence_pipeline`, but a step may also name a whole baseline (``"-Oz"``, ``"O3"``): the
    pipelines :mod:`behavioral_pq.tasks.guidance` recommends, e.g. ``("-Oz", "-instcombine")``."""
    elements = []
    for step in steps:
        name = step.lstrip("-") if isinstance(step, str) else None
        elements.append(BASELINES[name] if name in BASELINES else get_pass(step).pipeline)
    if not elements:
        raise UnknownPassError("empty pass sequence")
    return ",".join(elements)


def meaning_preserving(steps: Iterable[str]) -> Tuple[str, ...]:
    """``steps`` without the passes of :data:`MEANING_CHANGING` (the empty tuple when nothing else is left)."""
    return tuple(step for step in steps if step not in MEANING_CHANGING)

def resolve_pipeline(passes: Union[str, Sequence[PassLike]]) -> str:
    """Turn what a user wrote into a new-PM pipeline string.

    Accepted forms:
        * ``"Oz"`` / ``"O3"`` (also ``"-Oz"``): ``default<Oz>``, ``default<O3>``;
        * a list of catalog indices, flags or :class:`Pass` objects;
        * a string of whitespace-separated catalog flags, each starting with ``-`` (``"-sroa -gvn"``), where a
          baseline may stand for its whole pipeline (``"-Oz -gvn"``);
        * any other string: a raw new-PM pipeline (``"function(sroa),gvn"``), checked by LLVM when it runs.
    """
    if isinstance(passes, str):
        text = passes.strip()
        if text.lstrip("-") in BASELINES:
            return BASELINES[text.lstrip("-")]
        tokens = text.replace(",", " ").split() if "(" not in text and "<" not in text else [text]
        if tokens and all(t.startswith("-") for t in tokens):
            return steps_pipeline(tokens)
        if not text:
            raise UnknownPassError("empty pipeline")
        return text
    return sequence_pipeline(passes)
