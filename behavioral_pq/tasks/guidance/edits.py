"""What a local search's edits insert: a prior over the catalog's passes.

A local search edits the best pipeline so far (:func:`~behavioral_pq.tasks.guidance.library.mutate_steps`): half of
its edits insert a pass of the ranker's picks, half a pass of the catalog. Uniformly, most catalog passes do nothing
after -Oz for the instruction count; weighted by the *edit prior*, the catalog half leans to the passes that beat
-Oz on train modules. The prior is read off ranker rows (:func:`edit_weights`): for each pass, the share of the
rows' modules on which ``(-Oz, pass)`` beat -Oz, plus a floor that keeps every pass possible.

The shipped prior, ``behavioral_pq/data/edit-prior-host.json``, was read off rows built for the host (AMD znver4)
of 180 train modules; the instruction-count search for a target uses it (BENCHMARKS, "Local-search edits for the
host"). Measure mode and text size keep uniform edits.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import parse_json_bounded, read_json_bounded
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.target import Target
from behavioral_pq.errors import RankerError
from behavioral_pq.tasks.guidance.library import OZ

FORMAT = "behavioral_pq.edit-prior"
FORMAT_VERSION = 1
#: The weight of a pass that never beat -Oz, against 1 for one that always did.
EDIT_FLOOR = 0.02
#: The shipped prior (package data).
SHIPPED_PRIOR = "edit-prior-host.json"


def edit_weights(data, floor: float = EDIT_FLOOR) -> Dict[str, float]:
    """Catalog flag -> ``floor`` + the share of ``data``'s modules (a
    :class:`~behavioral_pq.tasks.guidance.ranker.RankerData`) on which ``(-Oz, flag)`` beat -Oz (a failed cell
    counts as not beating it). A pass with no ``(-Oz, pass)`` column in the pool gets ``floor``."""
    if not (math.isfinite(floor) and floor > 0):
        raise ValueError(f"floor must be positive, got {floor!r}")
    if not len(data.shas):
        raise RankerError("no rows to read an edit prior off")
    column = {steps: j for j, steps in enumerate(data.pool)}
    weights = {}
    for p in PASSES:
        j = column.get((OZ, p.flag))
        beat = 0.0 if j is None else float(np.mean(np.nan_to_num(data.values[:, j], nan=np.inf) < data.oz))
        weights[p.flag] = floor + beat
    return weights


def save_edit_prior(path: Union[str, os.PathLike], weights: Dict[str, float], *, modules: int,
                    target: Optional[Target], floor: float = EDIT_FLOOR) -> Path:
    """Write ``weights`` (catalog flag -> weight) as an edit-prior file, with what it was read off."""
    path = Path(path)
    body = {"format": FORMAT, "format_version": FORMAT_VERSION, "modules": int(modules), "floor": floor,
            "target": None if target is None else target.to_dict(),
            "weights": {flag: float(w) for flag, w in weights.items()}}
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def load_edit_prior(path: Union[str, os.PathLike, None] = None) -> Tuple[float, ...]:
    """The weights of an edit-prior file (None: the shipped one), one per catalog pass in the order of
    :data:`~behavioral_pq.core.catalog.PASSES`: what ``mutate_steps(..., weights=)`` takes. Raises RankerError for
    a file that is not one, names an unknown pass, misses one, or holds a weight that is not positive and finite."""
    if path is None:
        return _shipped_prior()
    return _weights(read_json_bounded(Path(path), what="edit prior", error=RankerError), str(path))


@lru_cache(maxsize=1)
def _shipped_prior() -> Tuple[float, ...]:
    data = resources.files("behavioral_pq").joinpath("data", SHIPPED_PRIOR).read_bytes()
    return _weights(parse_json_bounded(data, origin=SHIPPED_PRIOR, what="edit prior", error=RankerError),
                    SHIPPED_PRIOR)


def _weights(body, origin: str) -> Tuple[float, ...]:
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("format_version") != FORMAT_VERSION:
        raise RankerError(f"{origin}: not an edit prior of format {FORMAT} version {FORMAT_VERSION}")
    weights = body.get("weights")
    if not isinstance(weights, dict):
        raise RankerError(f"{origin}: its weights are not a mapping of pass flags to numbers")
    known = {p.flag for p in PASSES}
    unknown = sorted(set(weights) - known)
    missing = sorted(known - set(weights))
    if unknown or missing:
        raise RankerError(f"{origin}: " + "; ".join(
            part for part in (f"unknown passes {', '.join(unknown[:5])}" if unknown else "",
                              f"no weight for {', '.join(missing[:5])}" if missing else "") if part))
    out = []
    for p in PASSES:
        w = weights[p.flag]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w > 0):
            raise RankerError(f"{origin}: the weight of {p.flag} must be positive and finite, got {w!r}")
        out.append(float(w))
    return tuple(out)
