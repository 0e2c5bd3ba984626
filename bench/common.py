"""What the benchmark scripts share: where things are, how results are written, and small statistics.

A script lives in ``bench/<topic>/`` and is run as ``python bench/<topic>/script.py`` from any folder. It finds
this module by putting ``bench/`` first on the import path, in its first lines::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
    import common  # noqa: E402

Its results go to ``bench/<topic>/results/`` (:func:`results_dir`) unless ``--out`` says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Sequence

#: the repository's root folder
REPO = Path(__file__).resolve().parent.parent
#: the package's example C programs
EXAMPLES = REPO / "behavioral_pq" / "data" / "examples"
#: inputs the benchmarks generate and keep between runs (Csmith programs, scratch stores); ignored by git
CACHE = REPO / "bench" / ".cache"


def results_dir(script: str) -> Path:
    """``bench/<topic>/results`` of the script at ``script`` (pass ``__file__``): its default output folder."""
    return Path(script).resolve().parent / "results"


def geomean(values: Iterable[float]) -> Optional[float]:
    """Geometric mean, exp(mean(log v)), of positive values; None when there are none."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time in seconds of ``repeat`` calls of ``fn()``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    """``"x86_64, 2 CPUs"``: the machine a result was measured on, as the Markdown reports name it."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs"


def write_json(path, data, indent: Optional[int] = 1) -> Path:
    """Write ``data`` as JSON (and a final newline) to ``path`` all at once, creating its folder."""
    return write_text(path, json.dumps(data, indent=indent) + "\n")


def write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` all at once (:func:`behavioral_pq.core.files.atomic_path`), creating its
    folder."""
    from behavioral_pq.core.files import write_bytes_atomic

    return write_bytes_atomic(path, text.encode())


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], align: str = "") -> str:
    """A Markdown table, without a final newline. ``align``: one character per column, ``l`` (``---``) or ``r``
    (``---:``); columns past its end are ``l``."""
    rule = ["---:" if align[i:i + 1] == "r" else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def checkout_env(**extra: str) -> Dict[str, str]:
    """The environment of a ``python -m behavioral_pq`` subprocess: this checkout first on the import path, and
    ``extra`` variables (e.g. ``BPQ_WORKERS="1"``)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def side_command(side: str, script: Path, cpu: int, cgenv: Path) -> list:
    """The command that runs a bench's side ``script`` pinned to ``cpu``: CompilerGym's side ("compiler_gym") with
    the CompilerGym 0.2.5 venv ``cgenv``, offline (``unshare -n``, loopback up); any other with this Python."""
    pinned = ["taskset", "-c", str(cpu)]
    if side == "compiler_gym":
        python = cgenv / "bin" / "python"
        return ["unshare", "-n", "bash", "-c", f"ip link set lo up; exec {' '.join(pinned)} {python} {script}"]
    return pinned + [sys.executable, str(script)]


def instruction_counts(corpus) -> Dict[str, int]:
    """sha256 -> IR instruction count of every module of a :class:`~behavioral_pq.corpus.Corpus`."""
    table = corpus.modules(["sha256", "instruction_count"]).to_pydict()
    return dict(zip(table["sha256"], table["instruction_count"]))


def even_by_bucket(shas: Iterable[str], sizes: Dict[str, int], count: int) -> list:
    """About ``count`` of ``shas`` spread evenly over the size buckets they fall in: the first ``count // buckets``
    of each bucket in hash order, buckets from small to large (deterministic)."""
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_bucket

    by_bucket: Dict[str, list] = {}
    for sha in sorted(shas):
        by_bucket.setdefault(size_bucket(sizes[sha]), []).append(sha)
    per = max(1, count // max(1, len(by_bucket)))
    return [sha for bucket in BUCKET_NAMES for sha in by_bucket.get(bucket, [])[:per]]
