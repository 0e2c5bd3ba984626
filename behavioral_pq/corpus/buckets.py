"""How every report slices modules: by size (IR instruction count) and by kind of program.

- **Size buckets**: ``<200``, ``200-1k``, ``1k-5k``, ``5k-50k``, ``>50k`` instructions (lower bound included).
- **Program kinds**: ``small`` (single functions and generated or test-suite programs: Jotai, Csmith,
  SingleSource) and ``real`` (translation units and linked programs of whole projects). A module is real when an
  input that produced it was built as part of a project: its origin is ``project:NAME`` (what
  ``bpq corpus build --compile-commands FILE --project NAME`` records).
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence, Tuple

import numpy as np

SIZE_BUCKETS: Tuple[Tuple[str, float, float], ...] = (
    ("<200", 0, 200), ("200-1k", 200, 1_000), ("1k-5k", 1_000, 5_000), ("5k-50k", 5_000, 50_000),
    (">50k", 50_000, math.inf))
BUCKET_NAMES: Tuple[str, ...] = tuple(name for name, _, _ in SIZE_BUCKETS)

PROJECT_PREFIX = "project:"
KINDS: Tuple[str, ...] = ("small", "real")


def size_bucket(instruction_count: int) -> str:
    """The bucket of one module: ``size_bucket(1500) == "1k-5k"``."""
    for name, low, high in SIZE_BUCKETS:
        if low <= instruction_count < high:
            return name
    return BUCKET_NAMES[0]  # negative counts do not occur; keep the function total


def size_buckets(instruction_counts: Sequence[int]) -> List[str]:
    """The bucket of each module, in order."""
    return [size_bucket(int(n)) for n in instruction_counts]


def bucket_counts(instruction_counts: Sequence[int]) -> Dict[str, int]:
    """Modules per bucket, every bucket listed (zeros included), smallest first."""
    counts = dict.fromkeys(BUCKET_NAMES, 0)
    for name in size_buckets(instruction_counts):
        counts[name] += 1
    return counts


def project_origin(name: str) -> str:
    """The origin recorded for the units of project ``name`` (``"project:sqlite"``)."""
    if not name or any(c in name for c in ":/\\") or name.strip() != name:
        raise ValueError(f"project name must be a plain non-empty name without ':' '/' or spaces at the ends, "
                         f"got {name!r}")
    return PROJECT_PREFIX + name


def program_kind(origins: Iterable[str]) -> str:
    """``"real"`` when any origin of a module is a project's, else ``"small"``."""
    return "real" if any(o.startswith(PROJECT_PREFIX) for o in origins) else "small"


def slices(kinds: Sequence[str], instruction_counts: Sequence[int]) -> Dict[str, np.ndarray]:
    """Boolean masks over N items for each reported slice: ``all``, each kind present, and each (kind, bucket)
    and bucket present; named ``"all"``, ``"real"``, ``"real 1k-5k"``, ``"1k-5k"``. Empty slices are left out."""
    kinds = np.asarray(list(kinds), dtype=object)
    buckets = np.asarray(size_buckets(instruction_counts), dtype=object)
    out = {"all": np.ones(len(kinds), dtype=bool)}
    for bucket in BUCKET_NAMES:
        mask = buckets == bucket
        if mask.any():
            out[bucket] = mask
    for kind in KINDS:
        kind_mask = kinds == kind
        if not kind_mask.any():
            continue
        out[kind] = kind_mask
        for bucket in BUCKET_NAMES:
            mask = kind_mask & (buckets == bucket)
            if mask.any():
                out[f"{kind} {bucket}"] = mask
    return out
