"""Lowering task sets: small C functions with input/output cases and loop kernels with a timing driver.

A task is one C function in its own file (``data/lowering/<set>/<name>.c``) and a declared signature. The test
driver is generated from the signature, compiled separately and linked with the assembly under test, so the
assembly is the only code that changes between a reference build and a candidate:

* a **function** task calls the function once per case and prints the return value and every non-const array
  after the call, one line per case;
* a **kernel** task fills every array from a fixed-seed generator, calls the kernel at ``test_n`` and prints the
  return value and a checksum of each written array (exact for integers, two sums for floats); run with
  ``N REPS`` arguments it prints ``time_ns`` (the fastest of ``reps`` calls at size N, arrays refilled before each).

Task sets shipped with the package: ``functions`` (24 functions) and ``kernels`` (23 kernels).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from behavioral_pq.artifacts import read_json_bounded
from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import opt_bitcode
from behavioral_pq.errors import TaskError

TASK_DIR = Path(__file__).resolve().parent.parent / "data" / "lowering"
TASK_SETS = ("functions", "kernels")

#: C types a signature may use, with the printf conversion the driver prints them with.
SCALAR_TYPES = {
    "char": ("signed", 8), "int8_t": ("signed", 8), "uint8_t": ("unsigned", 8),
    "int16_t": ("signed", 16), "uint16_t": ("unsigned", 16), "int": ("signed", 32), "int32_t": ("signed", 32),
    "unsigned": ("unsigned", 32), "uint32_t": ("unsigned", 32), "long": ("signed", 64),
    "int64_t": ("signed", 64), "uint64_t": ("unsigned", 64), "float": ("float", 32), "double": ("float", 64),
}

_SIGNATURE = re.compile(r"^\s*(?P<ret>[A-Za-z_][\w ]*?)\s*(?P<name>[A-Za-z_]\w*)\s*\((?P<params>.*)\)\s*$")


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: base C type (``int32_t``), whether it is a pointer, and whether it points to const."""

    name: str
    ctype: str
    pointer: bool = False
    const: bool = False

    @property
    def kind(self) -> str:
        """``"signed"``, ``"unsigned"``, ``"float"`` or ``"string"`` (a ``const char *``)."""
        if self.pointer and self.ctype == "char":
            return "string"
        return SCALAR_TYPES[self.ctype][0]


@dataclasses.dataclass(frozen=True)
class Signature:
    """A C function signature limited to the scalar types in :data:`SCALAR_TYPES` and pointers to them."""

    text: str
    returns: str
    name: str
    params: Tuple[Param, ...]

    @classmethod
    def parse(cls, text: str) -> "Signature":
        match = _SIGNATURE.match(text)
        if not match:
            raise TaskError(f"not a C function signature: {text!r}")
        returns = " ".join(match["ret"].split())
        if returns != "void" and returns not in SCALAR_TYPES:
            raise TaskError(f"{text!r}: unsupported return type {returns!r}")
        params = []
        for raw in filter(None, (p.strip() for p in match["params"].split(","))):
            tokens = raw.replace("*", " * ").split()
            const = tokens[:1] == ["const"]
            tokens = [t for t in tokens if t not in ("const", "restrict")]
            pointer = tokens[1:2] == ["*"]
            tokens = [t for t in tokens if t != "*"]
            if len(tokens) != 2 or not re.fullmatch(r"[A-Za-z_]\w*", tokens[1]):
                raise TaskError(f"{text!r}: cannot parse parameter {raw!r}")
            ctype, name = tokens
            if ctype not in SCALAR_TYPES:
                raise TaskError(f"{text!r}: unsupported parameter type {ctype!r}")
            params.append(Param(name, ctype, pointer, const))
        return cls(text.strip(), returns, match["name"], tuple(params))


@dataclasses.dataclass(frozen=True)
class Task:
    """One lowering task. ``kind`` is ``"function"`` (``cases``: argument lists) or ``"kernel"`` (``lengths``:
    array length expressions in ``n``; ``test_n``, ``bench_n``, ``reps``)."""

    name: str
    kind: str
    source: Path
    signature: Signature
    cases: Tuple[tuple, ...] = ()
    lengths: Tuple[Tuple[str, str], ...] = ()
    test_n: int = 0
    bench_n: int = 0
    reps: int = 0

    @property
    def symbol(self) -> str:
        return self.signature.name

    @property
    def timed(self) -> bool:
        """Kernels carry a timing driver; functions are only checked."""
        return self.kind == "kernel"

    def module(self, pipeline=None):
        """The task's IR as the package builds it (clang-19, no LLVM passes), optimized by ``pipeline`` if given:
        anything :func:`behavioral_pq.optimize` takes (measure mode), ``"target:O3"`` (any of those) for the
        engine's target mode on the host, or ``"opt:O3"`` (any level) for ``opt-19`` with the target machine."""

        module = load_module(self.source)
        if pipeline is None:
            return module
        if isinstance(pipeline, str) and pipeline.startswith("opt:"):

            return Module(opt_bitcode(module.bitcode, pipeline[4:]), name=module.name, source=module.source)

        if isinstance(pipeline, str) and pipeline.startswith("target:"):
            return optimize(module, pipeline[len("target:"):], target="host")
        return optimize(module, pipeline)

    def driver_source(self) -> str:
        """C source of the test driver (see the module docstring)."""
        return (_function_driver if self.kind == "function" else _kernel_driver)(self)

    @property
    def digest(self) -> str:
        """Hash of everything that defines the task (source, signature, cases, sizes)."""
        data = json.dumps([self.name, self.kind, self.source.read_text(), self.signature.text, self.cases,
                           self.lengths, self.test_n, self.bench_n, self.reps], default=str)
        return hashlib.sha256(data.encode()).hexdigest()[:16]


def load_tasks(name_or_path: Union[str, Path] = "functions", *, names: Optional[Sequence[str]] = None) -> List[Task]:
    """Read a task set: ``"functions"``, ``"kernels"``, ``"all"`` (both), or the path of a task-set JSON file
    whose C sources lie in the folder of the same name next to it.

    Raises TaskError for a malformed file, FileNotFoundError for a missing one."""
    if str(name_or_path) == "all":
        tasks = [t for s in TASK_SETS for t in load_tasks(s)]
    else:
        path = Path(name_or_path)
        if str(name_or_path) in TASK_SETS:
            path = TASK_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise FileNotFoundError(f"no such task set: {name_or_path} (known: {', '.join(TASK_SETS)} or a .json)")
        data = read_json_bounded(path, what="task set", error=TaskError)
        if not isinstance(data, dict):
            raise TaskError(f"{path}: not a task set (not a JSON object)")
        tasks = [_task(entry, data, path) for entry in data.get("tasks", [])]
    if names is not None:
        known = {t.name: t for t in tasks}
        missing = [n for n in names if n not in known]
        if missing:
            raise TaskError(f"unknown tasks {missing}; known: {sorted(known)}")
        tasks = [known[n] for n in names]
    return tasks


def split_tasks(tasks: Sequence[Task], held_out: float = 0.5, seed: int = 0) -> Tuple[List[Task], List[Task]]:
    """A fixed split (by a hash of name and seed) into (train, held-out): traces for prompt refinement come from
    train, a prompt is judged on held-out."""
    keyed = sorted(tasks, key=lambda t: hashlib.sha256(f"{seed}:{t.name}".encode()).hexdigest())
    cut = len(keyed) - int(round(held_out * len(keyed)))
    train, held = keyed[:cut], keyed[cut:]
    return sorted(train, key=lambda t: t.name), sorted(held, key=lambda t: t.name)


def _task(entry: Dict, data: Dict, path: Path) -> Task:
    kind = data.get("kind")
    if kind not in ("function", "kernel"):
        raise TaskError(f"{path}: kind must be 'function' or 'kernel', got {kind!r}")
    name = entry.get("name")
    source = path.parent / path.stem / f"{name}.c"
    if not source.is_file():
        raise TaskError(f"{path}: task {name!r} has no source {source}")
    signature = Signature.parse(entry.get("signature", ""))
    if signature.name != name:
        raise TaskError(f"{path}: task {name!r} declares function {signature.name!r}")
    if kind == "function":
        cases = tuple(tuple(c) for c in entry.get("cases", []))
        if not cases:
            raise TaskError(f"{path}: function task {name!r} has no cases")
        for case in cases:
            if len(case) != len(signature.params):
                raise TaskError(f"{path}: {name}: case {list(case)} has {len(case)} arguments, "
                                f"the signature {len(signature.params)}")
        return Task(name, kind, source, signature, cases=cases)
    defaults = data.get("defaults", {})
    params = signature.params
    if not params or params[0].pointer or params[0].kind not in ("signed", "unsigned"):
        raise TaskError(f"{path}: kernel {name!r} must take the size n as its first (integer) parameter")
    lengths = dict(entry.get("lengths", {}))
    unknown = set(lengths) - {p.name for p in params if p.pointer}
    if unknown:
        raise TaskError(f"{path}: kernel {name!r}: lengths for unknown arrays {sorted(unknown)}")
    for expr in lengths.values():
        if not re.fullmatch(r"[n0-9*+\- ()]+", expr):
            raise TaskError(f"{path}: kernel {name!r}: length {expr!r} may use only n, integers and + - * ( )")
    return Task(name, kind, source, signature, lengths=tuple(sorted(lengths.items())),
                test_n=int(entry.get("test_n", defaults.get("test_n", 257))),
                bench_n=int(entry.get("bench_n", defaults.get("bench_n", 1 << 20))),
                reps=int(entry.get("reps", defaults.get("reps", 20))))


# -- driver generation -------------------------------------------------------------------------------------------

_PRELUDE = """\
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

"""


def _literal(value, param_type: str) -> str:
    kind, bits = SCALAR_TYPES[param_type]
    if kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TaskError(f"expected a number for {param_type}, got {value!r}")
        return repr(float(value))
    if not isinstance(value, int) or isinstance(value, bool):
        raise TaskError(f"expected an integer for {param_type}, got {value!r}")
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if kind == "signed" else (0, (1 << bits) - 1)
    if not low <= value <= high:
        raise TaskError(f"{value} does not fit {param_type}")
    if kind == "unsigned":
        return f"({param_type}){value}ULL"
    if value == -(1 << 63):
        return f"({param_type})(-9223372036854775807LL - 1)"
    return f"({param_type}){value}LL"


def _print_value(expr: str, ctype: str) -> str:
    kind = SCALAR_TYPES[ctype][0]
    if kind == "float":
        return f'printf(" %.17g", (double)({expr}));'
    if kind == "unsigned":
        return f'printf(" %llu", (unsigned long long)({expr}));'
    return f'printf(" %lld", (long long)({expr}));'


def _c_string(text: str) -> str:
    if not all(32 <= ord(c) < 127 for c in text):
        raise TaskError(f"string arguments must be printable ASCII: {text!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _function_driver(task: Task) -> str:
    sig = task.signature
    lines = [_PRELUDE + f"{sig.text};\n", "int main(void) {"]
    for number, case in enumerate(task.cases):
        body, args, after = [], [], []
        for index, (param, value) in enumerate(zip(sig.params, case)):
            if param.kind == "string":
                if not isinstance(value, str):
                    raise TaskError(f"{task.name}: {param.name} expects a string, got {value!r}")
                args.append(_c_string(value))
            elif param.pointer:
                if not isinstance(value, list) or not value:
                    raise TaskError(f"{task.name}: {param.name} expects a non-empty list, got {value!r}")
                array = f"a{index}"
                body.append(f"  {param.ctype} {array}[] = {{{', '.join(_literal(v, param.ctype) for v in value)}}};")
                args.append(array)
                if not param.const:
                    after.append(f'  printf(" |"); for (size_t i = 0; i < {len(value)}; i++) '
                                 + _print_value(f"{array}[i]", param.ctype))
            else:
                args.append(_literal(value, param.ctype))
        call = f"{sig.name}({', '.join(args)})"
        lines.append(f"  {{ /* case {number} */")
        lines.extend(body)
        if sig.returns == "void":
            lines.append(f'  {call}; printf("case {number}:");')
        else:
            lines.append(f'  {sig.returns} r = {call}; printf("case {number}:"); ' + _print_value("r", sig.returns))
        lines.extend(after)
        lines.append('  printf("\\n"); }')
    lines.append("  return 0;\n}\n")
    return "\n".join(lines)


def _fill(param: Param, array: str, length: str) -> str:
    kind, bits = SCALAR_TYPES[param.ctype]
    if kind == "float":
        value = "(double)(next_random() % 2000001) / 1000000.0 - 1.0"
    elif kind == "unsigned":
        value = "next_random()"
    else:
        value = "(int64_t)(next_random() % 2001) - 1000"
    return f"  for (int64_t i = 0; i < {length}; i++) {array}[i] = ({param.ctype})({value});"


def _checksum(param: Param, array: str, length: str) -> str:
    if SCALAR_TYPES[param.ctype][0] == "float":
        return (f"  {{ double s = 0, w = 0; for (int64_t i = 0; i < {length}; i++) {{ s += {array}[i]; "
                f"w += {array}[i] * (double)(i % 13 + 1); }} printf(\"{param.name} %.17g %.17g\\n\", s, w); }}")
    return (f"  {{ uint64_t h = 0; for (int64_t i = 0; i < {length}; i++) h = h * 1099511628211ULL + "
            f"(uint64_t)(int64_t){array}[i]; printf(\"{param.name} %llu\\n\", (unsigned long long)h); }}")


def _kernel_driver(task: Task) -> str:
    sig = task.signature
    size, arrays = sig.params[0], [p for p in sig.params[1:] if p.pointer]
    scalars = [p for p in sig.params[1:] if not p.pointer]
    if scalars:
        raise TaskError(f"{task.name}: kernel parameters after n must be arrays")
    lengths = dict(task.lengths)
    length = {p.name: f"(int64_t)({lengths.get(p.name, 'n').replace('n', '(int64_t)n')})" for p in arrays}
    call = f"{sig.name}(({size.ctype})n{''.join(', ' + p.name for p in arrays)})"
    out = [_PRELUDE + f"{sig.text};\n",
           "static uint64_t random_state;",
           "static uint64_t next_random(void) {",
           "  random_state = random_state * 6364136223846793005ULL + 1442695040888963407ULL;",
           "  return random_state >> 11;", "}\n",
           "static double now_ns(void) {",
           "  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);",
           "  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;", "}\n"]
    out.append("static int64_t n;")
    for p in arrays:
        out.append(f"static {p.ctype} *{p.name};")
    out.append("\nstatic void fill(void) {\n  random_state = 0x5eed;")
    out.extend(_fill(p, p.name, length[p.name]) for p in arrays)
    out.append("}\n")
    out.append("int main(int argc, char **argv) {")
    out.append(f"  n = argc > 1 ? atoll(argv[1]) : {task.test_n};")
    out.append("  int reps = argc > 2 ? atoi(argv[2]) : 0;")
    for p in arrays:
        out.append(f"  {p.name} = malloc(sizeof({p.ctype}) * ({length[p.name]} > 0 ? {length[p.name]} : 1));")
        out.append(f'  if (!{p.name}) {{ fprintf(stderr, "out of memory\\n"); return 3; }}')
    out.append("  if (reps <= 0) {\n    fill();")
    if sig.returns == "void":
        out.append(f"    {call};")
    else:
        out.append(f'    {sig.returns} r = {call}; printf("return"); {_print_value("r", sig.returns)} printf("\\n");')
    out.extend("  " + _checksum(p, p.name, length[p.name]) for p in arrays if not p.const)
    out.append("    return 0;\n  }")
    out.append("  double best = 1e300;")
    sink = "" if sig.returns == "void" else "volatile double sink = 0; "
    out.append(f"  {sink}for (int r = 0; r < reps; r++) {{")
    out.append("    fill();\n    double t0 = now_ns();")
    out.append(f"    {'sink += (double)' if sig.returns != 'void' else ''}{call};")
    out.append("    double t = now_ns() - t0;\n    if (t < best) best = t;\n  }")
    out.append('  printf("time_ns %.0f\\n", best);\n  return 0;\n}\n')
    return "\n".join(out)
