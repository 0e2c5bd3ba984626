"""IR2Vec program vectors, the field's baseline representation (VenkataKeerthy et al., TACO 2020), for ``bpq
evaluate --ir2vec``: the optional extra ``behavioral-pq[ir2vec]`` (pip ``IR2Vec`` 2.1.1, flow-aware program
vectors of 300 dims from its shipped seed vocabulary).

IR2Vec 2.1.1 is built against LLVM 16, whose parser refuses syntax LLVM 19 writes: the ``nneg`` flag of ``zext`` /
``uitofp``, ``nuw`` / ``nsw`` on ``trunc``, ``disjoint`` on ``or``, ``nusw`` / ``nuw`` on ``getelementptr``, and
the ``range(...)``, ``dead_on_unwind`` and ``writable`` attributes. :func:`lower_syntax` drops them: they state
facts about poison and memory, not which instruction, type or operand is there, which is all that IR2Vec's
vocabulary reads. On the project's example programs at -O0, -O1, -O2, -O3 and -Oz and its Autophase test modules,
half of the modules fail to parse without it and none with it (``tests/test_downstream.py``).

IR2Vec's parser ends the whole process on IR it cannot read, and it links its own LLVM; so the vectors are
computed in a child Python process (never in the one that holds the native core), with a timeout, and a batch
that fails is retried a module at a time, so that one bad module costs only its own row.

inst2vec (Ben-Nun et al., NeurIPS 2018), the other baseline (``bpq evaluate --inst2vec``), is
:mod:`behavioral_pq.core.inst2vec`: its packaged encoders (ProGraML's, CompilerGym's) read IR only through the LLVM
they bundle (10 or older), so inst2vec's normalization is applied anew to LLVM 19 text there, in this process (pure
Python, no parser of its own), and a statement whose pointers LLVM 19 writes as ``ptr`` is looked up by its opaque
form in the LLVM 3.x vocabulary, which leaves about a quarter of the statements ``!UNK`` instead of two thirds.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.errors import ToolError, ToolNotFoundError, ToolTimeoutError

IR2VEC_DIM = 300
IR2VEC_VERSION = "2.1.1"

#: LLVM 19 syntax that LLVM 16's parser refuses, and what it is lowered to (see the module docstring).
LLVM19_SYNTAX = (
    (re.compile(r"\b(zext|uitofp) nneg\b"), r"\1"),
    (re.compile(r"\btrunc(?: nuw| nsw)+\b"), "trunc"),
    (re.compile(r"\bor disjoint\b"), "or"),
    (re.compile(r"\bgetelementptr( inbounds)?(?: nusw| nuw)+\b"), r"getelementptr\1"),
    (re.compile(r"\brange\([^()]*\)\s*"), ""),
    (re.compile(r"\b(?:dead_on_unwind|writable)\b\s*"), ""),
)

# Runs in the child: argv = output .npy, then IR files; writes float64 (N, 300). Reads no behavioral_pq code.
_CHILD = """
import sys, numpy as np, ir2vec
rows = [ir2vec.initEmbedding(path, "fa", "p").getProgramVector() for path in sys.argv[2:]]
np.save(sys.argv[1], np.asarray(rows, dtype=np.float64).reshape(len(rows), 300))
"""


def lower_syntax(text: str) -> str:
    """LLVM 19 IR text with the syntax LLVM 16 cannot parse removed (:data:`LLVM19_SYNTAX`)."""
    for pattern, replacement in LLVM19_SYNTAX:
        text = pattern.sub(replacement, text)
    return text


def available(python: Optional[str] = None) -> bool:
    """Whether ``IR2Vec`` can be imported by ``python`` (default: this interpreter), in a child process."""
    try:
        done = subprocess.run([python or sys.executable, "-c", "import ir2vec"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _run(paths: Sequence[Path], out: Path, timeout: float) -> None:
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(out), *map(str, paths)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolTimeoutError(f"IR2Vec took more than {timeout:.0f} s on {len(paths)} modules") from None
    if done.returncode != 0:
        if "No module named 'ir2vec'" in done.stderr:
            raise ToolNotFoundError(f"IR2Vec is not installed (pip install 'behavioral-pq[ir2vec]', which is "
                                    f"IR2Vec=={IR2VEC_VERSION})")
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise ToolError(f"IR2Vec failed (exit {done.returncode}): {' | '.join(tail)}")


def ir2vec_vectors(texts: Sequence[str], *, lower: bool = True, timeout: float = 600.0
                   ) -> Tuple[np.ndarray, List[Optional[Exception]]]:
    """IR2Vec flow-aware program vectors of LLVM IR texts (``Module.text``).

    Args:
        texts: N modules' IR text (``Module.text()``).
        lower: pass the text through :func:`lower_syntax` first (only turn it off to see what IR2Vec refuses).
        timeout: seconds per child process (one for the batch; one per module when the batch fails).
    Returns:
        (float32 (N, 300), N errors): a module IR2Vec could not read has a row of NaN and its ToolError.
    Raises:
        ToolNotFoundError: IR2Vec is not installed.
    """
    out = np.full((len(texts), IR2VEC_DIM), np.nan, np.float32)
    errors: List[Optional[Exception]] = [None] * len(texts)
    if not texts:
        return out, errors
    with tempfile.TemporaryDirectory(prefix="bpq-ir2vec-") as tmp:
        folder = Path(tmp)
        paths = []
        for i, text in enumerate(texts):
            path = folder / f"m{i}.ll"
            path.write_text(lower_syntax(text) if lower else text)
            paths.append(path)
        try:
            _run(paths, folder / "all.npy", timeout)
            _keep_finite(np.load(folder / "all.npy"), range(len(paths)), out, errors)
            return out, errors
        except (ToolError, ToolTimeoutError) as exc:
            if len(paths) == 1:
                errors[0] = exc
                return out, errors
        for i, path in enumerate(paths):          # the batch failed: a module at a time, to keep the others
            try:
                _run([path], folder / f"m{i}.npy", timeout)
                _keep_finite(np.load(folder / f"m{i}.npy"), [i], out, errors)
            except (ToolError, ToolTimeoutError) as exc:
                errors[i] = exc
    return out, errors


def _keep_finite(vectors: np.ndarray, rows: Sequence[int], out: np.ndarray, errors: list) -> None:
    """Copy IR2Vec's float64 vectors into float32 ``out`` at ``rows``; a vector with a value float32 cannot hold
    (IR2Vec's flow-aware sums grow past 3.4e38 on some large modules) or that is not finite stays NaN, with an
    error, instead of entering a head as infinity."""
    for row, vector in zip(rows, np.asarray(vectors, np.float64)):
        if np.isfinite(vector).all() and np.abs(vector).max(initial=0.0) <= np.finfo(np.float32).max:
            out[row] = vector
        else:
            errors[row] = ToolError(f"IR2Vec gave a vector out of float32 range (largest magnitude "
                                    f"{np.nanmax(np.abs(vector)):.3g})")


__all__ = ["IR2VEC_DIM", "LLVM19_SYNTAX", "available", "ir2vec_vectors", "lower_syntax"]
