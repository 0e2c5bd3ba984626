"""The pass catalog: CompilerGym's 124-pass ``llvm-v0`` action space mapped to LLVM 19 pipeline elements.

The table is package data (``data/passes.tsv``, the project's spec). A pass sequence becomes a new-pass-manager
pipeline by joining the elements with commas.
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Sequence, Tuple, Union

from behavioral_pq.errors import PipelineError, UnknownPassError

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
        * any other string: a raw new-PM pipeline (``"function(sroa),gvn"``): its length and nesting are checked
          here (:func:`check_pipeline_shape`), its passes when it runs (LLVM parses it, then
          :func:`check_pipeline_elements` refuses passes that touch files).
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
        check_pipeline_shape(text)
        return text
    return sequence_pipeline(passes)


# -- what a raw pipeline may contain ---------------------------------------------------------------------------

#: The deepest nesting of adaptors a pipeline may have (``function(loop-mssa(licm))`` is 2, the catalog's deepest).
#: LLVM parses a pipeline recursively in the calling process: one nested 1,500 deep overflows its stack.
MAX_PIPELINE_DEPTH = 32
#: The longest pipeline text: a probe holds at most 1,000 catalog passes (``probes.MAX_PROBE_LENGTH``) of at most
#: 62 characters each (about 63,000 with the commas).
MAX_PIPELINE_LENGTH = 100_000
#: How much of a pipeline an error message quotes.
QUOTED_PIPELINE_CHARS = 200

#: Adaptors (``function(...)``, ``repeat<2>(...)``), whole pipelines (``default<Oz>``) and the engine's own
#: ``bpq-inline-threshold<N>``: allowed with any parameters and inner pipeline LLVM accepts.
PIPELINE_ADAPTORS = frozenset({
    "module", "cgscc", "function", "loop", "loop-mssa", "repeat", "devirt", "coro-cond",
    "default", "thinlto-pre-link", "thinlto", "lto-pre-link", "lto", "function-simplification",
    "bpq-inline-threshold",
})

#: LLVM 19's IR transform passes a raw pipeline may name (besides the catalog's elements): those of ``opt-19
#: -print-passes`` (module, CGSCC, function, loop-nest and loop passes, with or without parameters) that neither
#: read nor write files and run without a TargetMachine. Written out here rather than asked of opt at run time,
#: so that what is allowed is reviewed, not whatever a newer LLVM adds. Left out, among others: the printers,
#: ``dot-*`` and ``view-*`` (they write .dot files, or start a viewer, under a name taken from the function),
#: the profile readers and writers (``pgo-instr-use``, ``sample-profile``, ``memprof-use<profile-filename=..>``,
#: ``function-import``, ``insert-gcov-profiling``), the sanitizers and other instrumentation, codegen-preparation
#: passes that need a target, and the passes that crash or break the verifier on purpose (``trigger-*``).
PIPELINE_PASSES = frozenset({
    # module passes
    "always-inline", "annotation2metadata", "attributor", "attributor-light", "called-value-propagation",
    "canonicalize-aliases", "constmerge", "coro-cleanup", "coro-early", "deadargelim", "elim-avail-extern",
    "expand-variadics", "forceattrs", "global-merge", "globaldce", "globalopt", "globalsplit", "hotcoldsplit",
    "inferattrs", "inliner-wrapper", "inliner-wrapper-no-mandatory-first", "internalize", "ipsccp", "iroutliner",
    "loop-extract", "lower-global-dtors", "lower-ifunc", "mergefunc", "module-inline", "name-anon-globals",
    "no-op-module", "openmp-opt", "openmp-opt-postlink", "partial-inliner", "recompute-globalsaa",
    "rel-lookup-table-converter", "rpo-function-attrs", "scc-oz-module-inliner", "strip", "strip-dead-debug-info",
    "strip-dead-prototypes", "strip-debug-declare", "strip-nondebug", "strip-nonlinetable-debuginfo", "verify",
    # CGSCC passes
    "argpromotion", "attributor-cgscc", "attributor-light-cgscc", "coro-split", "function-attrs", "inline",
    "no-op-cgscc", "openmp-opt-cgscc",
    # function passes
    "adce", "add-discriminators", "aggressive-instcombine", "alignment-from-assumptions", "assume-builder",
    "assume-simplify", "bdce", "break-crit-edges", "callsite-splitting", "chr", "consthoist",
    "constraint-elimination", "coro-elide", "correlated-propagation", "dce", "declare-to-assign",
    "dfa-jump-threading", "div-rem-pairs", "dse", "early-cse", "ee-instrument", "fix-irreducible", "flatten-cfg",
    "float2int", "guard-widening", "gvn", "gvn-hoist", "gvn-sink", "infer-address-spaces", "infer-alignment",
    "inject-tli-mappings", "instcombine", "instnamer", "instsimplify", "irce", "jump-table-to-switch",
    "jump-threading", "lcssa", "libcalls-shrinkwrap", "load-store-vectorizer", "loop-data-prefetch",
    "loop-distribute", "loop-fusion", "loop-load-elim", "loop-simplify", "loop-sink", "loop-unroll",
    "loop-vectorize", "loop-versioning", "lower-allow-check", "lower-atomic", "lower-constant-intrinsics",
    "lower-expect", "lower-guard-intrinsic", "lower-invoke", "lower-matrix-intrinsics", "lower-switch",
    "lower-widenable-condition", "make-guards-explicit", "mem2reg", "memcpyopt", "mergeicmps", "mergereturn",
    "mldst-motion", "move-auto-init", "nary-reassociate", "newgvn", "no-op-function", "partially-inline-libcalls",
    "reassociate", "redundant-dbg-inst-elim", "reg2mem", "scalarize-masked-mem-intrin", "scalarizer", "sccp",
    "separate-const-offset-from-gep", "simplifycfg", "sink", "slp-vectorizer", "slsr", "speculative-execution",
    "sroa", "structurizecfg", "tailcallelim", "tlshoist", "transform-warning", "unify-loop-exits",
    "vector-combine",
    # loop-nest and loop passes
    "loop-flatten", "loop-interchange", "loop-unroll-and-jam", "no-op-loopnest", "canon-freeze", "indvars",
    "licm", "lnicm", "loop-bound-split", "loop-deletion", "loop-idiom", "loop-idiom-vectorize",
    "loop-instsimplify", "loop-predication", "loop-reduce", "loop-rotate", "loop-simplifycfg", "loop-unroll-full",
    "loop-versioning-licm", "no-op-loop", "simple-loop-unswitch",
})

#: Analyses ``require<..>`` and ``invalidate<..>`` may name (``invalidate<all>`` too): those of ``opt-19
#: -print-passes`` but the one that reads a file (``bb-sections-profile-reader``) and the machine-code ones.
PIPELINE_ANALYSES = frozenset({
    "callgraph", "collector-metadata", "inline-advisor", "ir-similarity", "lcg", "module-summary", "no-op-module",
    "pass-instrumentation", "profile-summary", "stack-safety", "verify", "globals-aa", "no-op-cgscc", "fam-proxy",
    "aa", "access-info", "assumptions", "block-freq", "branch-prob", "cycles", "da", "debug-ata", "demanded-bits",
    "domfrontier", "domtree", "func-properties", "gc-function", "inliner-size-estimator", "lazy-value-info",
    "loops", "memdep", "memoryssa", "no-op-function", "opt-remark-emit", "phi-values", "postdomtree", "regions",
    "scalar-evolution", "should-not-run-function-passes", "should-run-extra-vector-passes", "ssp-layout",
    "stack-safety-local", "target-ir", "target-lib-info", "uniformity", "basic-aa", "objc-arc-aa", "scev-aa",
    "scoped-noalias-aa", "tbaa", "ddg", "iv-users", "no-op-loop", "should-run-extra-simple-loop-unswitch",
})


def quote_pipeline(pipeline: str) -> str:
    """``pipeline`` in quotes as an error message shows it: at most :data:`QUOTED_PIPELINE_CHARS` of it."""
    if len(pipeline) <= QUOTED_PIPELINE_CHARS:
        return f"'{pipeline}'"
    return f"'{pipeline[:QUOTED_PIPELINE_CHARS]}...' ({len(pipeline):,} characters)"


def pipeline_elements(pipeline: str) -> Tuple[str, ...]:
    """The element names of a new-PM pipeline (``"function(sroa<modify-cfg>),gvn"`` -> ``("function",
    "sroa<modify-cfg>", "gvn")``), split where LLVM's parser splits: at commas and parentheses."""
    return tuple(name for name in _PIPELINE_SEPARATORS.split(pipeline) if name)


_PIPELINE_SEPARATORS = re.compile(r"[,()]")


def check_pipeline_shape(pipeline: str) -> None:
    """Refuse (PipelineError) what must not reach LLVM's parser: a non-string, a pipeline longer than
    :data:`MAX_PIPELINE_LENGTH` or nested deeper than :data:`MAX_PIPELINE_DEPTH`."""
    if not isinstance(pipeline, str):
        raise PipelineError(f"a pipeline is a string, got {type(pipeline).__name__}")
    if len(pipeline) > MAX_PIPELINE_LENGTH:
        raise PipelineError(f"invalid pass pipeline {quote_pipeline(pipeline)}: longer than the "
                            f"{MAX_PIPELINE_LENGTH:,} characters a pipeline may have")
    depth = deepest = 0
    for char in pipeline:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    if deepest > MAX_PIPELINE_DEPTH:
        raise PipelineError(f"invalid pass pipeline {quote_pipeline(pipeline)}: nested {deepest} deep, more than the "
                            f"{MAX_PIPELINE_DEPTH} a pipeline may have")


def check_pipeline_elements(pipeline: str) -> None:
    """Refuse (PipelineError, naming the element) a pipeline that names an LLVM pass outside
    :data:`PIPELINE_PASSES`, :data:`PIPELINE_ADAPTORS` and the catalog's elements (a pass that writes or reads
    files, prints, instruments or crashes on purpose), or a ``require<..>`` / ``invalidate<..>`` of an analysis
    outside :data:`PIPELINE_ANALYSES`. Run after LLVM has parsed the pipeline: a name LLVM does not know gets
    LLVM's own message."""
    for element in pipeline_elements(pipeline):
        name, _, parameters = element.partition("<")
        name = name.strip()
        if name in ("require", "invalidate"):
            analysis = parameters[:-1] if parameters.endswith(">") else parameters
            if analysis in PIPELINE_ANALYSES or (name == "invalidate" and analysis == "all"):
                continue
        elif name in PIPELINE_PASSES or name in PIPELINE_ADAPTORS or name in _CATALOG_ELEMENTS:
            continue
        shown = element if len(element) <= QUOTED_PIPELINE_CHARS else element[:QUOTED_PIPELINE_CHARS] + "..."
        raise PipelineError(f"pipeline element '{shown}' is not allowed: a raw pipeline may name the catalog's "
                            "passes and LLVM's IR transforms, not passes that read or write files, print, "
                            "instrument or crash on purpose")


_CATALOG_ELEMENTS = frozenset(element.partition("<")[0]
                              for p in PASSES for element in pipeline_elements(p.pipeline))
