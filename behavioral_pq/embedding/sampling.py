"""Large-module mode: measure a spectrum on a deterministic sample of a module's functions.

A spectrum's rows are log ratios of module totals (Autophase counts summed over functions), so a sample of
functions that reacts like the whole module gives nearly the same rows at a fraction of the cost. The sample:

- *roots* are the module's externally visible defined functions, taken in an order fixed by a hash of the
  module and the function name (so the same module always gives the same sample, whatever its layout);
- each root comes with the local (internal or private) functions it reaches through calls and references,
  as the optimizer would see them: inlining and IPO of a local callee behave as in the whole module;
- roots are added while the sample stays within ``budget`` instructions;
- every other function becomes a declaration (``llvm-extract-19``), and globals that nothing kept refers to
  are dropped (llvm-extract's own clean-up), so callees outside the sample are declared, not defined.

``sample_functions`` returns the sample and what it holds; :func:`behavioral_pq.embedding.spectrum.spectra`
uses it for modules above a size threshold when asked (``sample_above``), and says so in its result.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass
from typing import Dict, List, Set, Tuple

from behavioral_pq.core.module import Module
from behavioral_pq.core.toolchain import find_tool, run_tool
from behavioral_pq.errors import BPQError

#: Modules above this many IR instructions are sampled when large-module mode is on (``embed``'s default). A
#: 40,000-instruction module took about 40 s whole with the first encoder's 100 probes on 2 cores.
LARGE_MODULE_INSTRUCTIONS = 50_000
#: Instructions a sample aims at. On 4 real programs of 77k-159k instructions (bench/spectra/large_modules.py), the
#: mean absolute spectrum error against the exact spectrum was 0.57-0.67 with 10,000 and 0.22-0.40 with 25,000: rare
#: features (a few ashr or sext in the sample) dominate it, so the sample must not be too small.
SAMPLE_BUDGET = 25_000

_DEFINE = re.compile(r'^define\s+(?P<head>[^@]*)@(?P<name>"(?:[^"\\]|\\.)*"|[-\w$.]+)\(')
_REFERENCE = re.compile(r'@("(?:[^"\\]|\\.)*"|[-\w$.]+)')
_LABEL = re.compile(r'^(?:[-\w.$]+|"(?:[^"\\]|\\.)*"):')
_LOCAL = ("internal ", "private ")
_GLOBAL = re.compile(r'^@(?:"(?:[^"\\]|\\.)*"|[-\w$.]+)\s*=(?P<rest>[^\n]*)', re.MULTILINE)


@dataclass(frozen=True)
class FunctionSample:
    """A module's function sample.

    Attributes:
        module: the sample (a valid module: kept functions defined, the rest declared).
        functions: defined functions kept, of ``total_functions``.
        instructions: IR instructions of the sample, of ``total_instructions``.
    """

    module: Module
    functions: int
    total_functions: int
    instructions: int
    total_instructions: int

    @property
    def fraction(self) -> float:
        """Share of the module's instructions in the sample."""
        return self.instructions / max(1, self.total_instructions)


def _functions(text: str) -> Dict[str, Tuple[int, bool, Set[str]]]:
    """{name: (instructions, is_local, names referenced in the body)} for every defined function of IR text."""
    out: Dict[str, Tuple[int, bool, Set[str]]] = {}
    name, local, count, refs, in_table = None, False, 0, set(), False
    for line in text.splitlines():
        if name is None:
            match = _DEFINE.match(line)
            if match:
                head = match.group("head")
                name, local, count, refs = match.group("name"), any(w in head for w in _LOCAL), 0, set()
            continue
        if line.startswith("}"):
            out[name] = (count, local, refs)
            name = None
            continue
        stripped = line.strip()
        if "@" in stripped:
            refs.update(_REFERENCE.findall(stripped))
        if in_table:                                   # the case lines of a switch (or indirectbr) table
            in_table = not stripped.startswith("]")
        elif stripped and not stripped.startswith(";") and not _LABEL.match(stripped):
            count += 1
            in_table = stripped.endswith("[")
    return out


def _has_global_variable(text: str) -> bool:
    """Whether IR text defines or declares a global variable (an alias or an ifunc is not one)."""
    for match in _GLOBAL.finditer(text):
        for word in match.group("rest").split():
            if word in ("global", "constant"):
                return True
            if word in ("alias", "ifunc"):
                break
    return False


def _closure(root: str, functions: Dict[str, Tuple[int, bool, Set[str]]]) -> List[str]:
    """``root`` and the local defined functions it reaches."""
    seen, stack = [root], [root]
    while stack:
        for ref in functions[stack.pop()][2]:
            if ref in functions and functions[ref][1] and ref not in seen:
                seen.append(ref)
                stack.append(ref)
    return seen


def sample_functions(module: Module, budget: int = SAMPLE_BUDGET) -> FunctionSample:
    """The deterministic function sample of ``module`` within about ``budget`` instructions (see the module
    docstring). A module with no externally visible defined function is returned whole.

    Raises:
        ToolError: llvm-extract failed; a UserWarning says so first, since the caller
            (:func:`~behavioral_pq.embedding.spectrum.spectra`) then measures the module whole and a log line
            alone would not reach a user of the CLI.
    """
    text = module.text()
    functions = _functions(text)
    total = sum(f[0] for f in functions.values())
    roots = sorted((n for n, f in functions.items() if not f[1]),
                   key=lambda n: hashlib.sha256(f"{module.sha256}:{n}".encode()).digest())
    kept: List[str] = []
    size = 0
    for root in roots:
        new = [n for n in _closure(root, functions) if n not in set(kept)]
        cost = sum(functions[n][0] for n in new)
        if kept and size + cost > budget:
            continue
        kept += new
        size += cost
        if size >= budget:
            break
    if not kept or len(kept) == len(functions):
        return FunctionSample(module, len(functions), len(functions), total, total)
    # --rglob keeps every global variable for the kept functions; llvm-extract refuses a pattern that matches
    # none, so it is passed only to a module that has one.
    argv = [find_tool("llvm-extract"), *(["--rglob=.*"] if _has_global_variable(text) else []),
            "--keep-const-init", "-o", "-", "-"]
    argv[1:1] = ["--func=" + (name[1:-1] if name.startswith('"') else name) for name in kept]
    try:
        extracted = run_tool(argv, input=module.bitcode, timeout=300).stdout
    except BPQError as exc:
        warnings.warn(f"{module.name}: no function sample, the module is measured whole "
                      f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})", stacklevel=2)
        raise
    sample = Module(extracted, name=f"{module.name}[sample]", source=module.source)
    return FunctionSample(sample, len(kept), len(functions), sample.instruction_count, total)
