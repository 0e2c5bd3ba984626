"""Labels of a module as built (DESIGN.md section 8).

- ``pass_counts[i]``: instruction count after catalog pass ``i`` alone, on a fresh copy of the module;
- ``best_passes``: every catalog index reaching the smallest of those counts (ties are the rule; a prediction is
  correct when it is in the set). When no pass reduces the count, the set holds the passes that leave it unchanged
  or best, so it is never empty; ``best_reduction`` tells the two cases apart;
- ``oz_benefit = (IC0 - IC_Oz) / IC0``; ``o3_count`` the count after ``default<O3>``.

All of it comes from one batched engine call of 126 pipelines per module.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from behavioral_pq.core.catalog import BASELINES, PASSES
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.errors import BPQError

#: The 124 catalog passes in index order, then -Oz, then -O3.
LABEL_PIPELINES: Tuple[str, ...] = tuple(p.pipeline for p in PASSES) + (BASELINES["Oz"], BASELINES["O3"])
NUM_PASSES = len(PASSES)
TOTAL_INSTS = AUTOPHASE_FEATURES.index("TotalInsts")


def label_row(sha256: str, features: Optional[np.ndarray], error: Optional[BPQError] = None) -> dict:
    """One ``labels`` row from the Autophase of a module before and after :data:`LABEL_PIPELINES`.

    Args:
        features: int64 (1 + 126, 56) as returned by ``Engine.autophase_after(..., LABEL_PIPELINES)``.
        error: the module's engine error; gives a ``failed`` row.
    """
    if error is not None or features is None:
        return {"sha256": sha256, "status": "failed", "error_kind": type(error).__name__ if error else "Error",
                "error": str(error) if error else "no features", "pass_counts": None, "best_passes": None,
                "oz_count": None, "o3_count": None, "oz_benefit": None}
    counts = features[:, TOTAL_INSTS]
    ic0 = int(counts[0])
    pass_counts = counts[1:1 + NUM_PASSES]
    best = pass_counts.min()
    oz = int(counts[1 + NUM_PASSES])
    return {"sha256": sha256, "status": "ok", "error_kind": None, "error": None,
            "pass_counts": pass_counts.astype(np.int64).tolist(),
            "best_passes": np.flatnonzero(pass_counts == best).astype(np.int16).tolist(),
            "oz_count": oz, "o3_count": int(counts[2 + NUM_PASSES]),
            "oz_benefit": (ic0 - oz) / ic0 if ic0 else 0.0}
