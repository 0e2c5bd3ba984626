"""A coreset of pipelines: a few pipelines that, tried on any program, find most of what the library's searches
found for its own programs.

After Liang et al., "Learning Compiler Pass Orders using Coreset and Normalized Value Prediction" (ICML 2023).
The pool is every library program's best pipeline and the generic ones; on request also -Oz followed by each single
pass (with and without a second -Oz). Each is measured on a sample of the
library's programs, and a greedy choice keeps, one at a time, the pipeline that most raises the summed
``log(IC_Oz / min IC over the chosen)`` over the sample. That sum is a coverage function (monotone, submodular),
so the greedy choice of K is within 1 - 1/e of the best choice of K.

The library's nearest-neighbor candidates transfer what worked on similar programs; the coreset is what works on
many programs at once. :func:`~behavioral_pq.tasks.guidance.recommend.recommend_pipeline` tries both.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.core.catalog import PASSES, meaning_preserving, steps_pipeline
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.errors import BPQError, LibraryError
from behavioral_pq.tasks.guidance.library import (
    GENERIC,
    OZ,
    ProgramLibrary,
    Steps,
    encode_steps,
)

logger = logging.getLogger(__name__)

#: Pipelines kept in a coreset, and library programs they are measured on (defaults of ``bpq library coreset``).
CORESET_SIZE = 32
CORESET_PROGRAMS = 300


def oz_suffixes() -> List[Steps]:
    """-Oz followed by one catalog pass, and by that pass and -Oz again: what -Oz leaves undone in one step (its
    size-minded defaults skip, for example, the SLP vectorizer, which in measure mode merges scalar instructions)."""
    return [(OZ, p.flag) for p in PASSES] + [(OZ, p.flag, OZ) for p in PASSES]


def coreset_pool(library: ProgramLibrary, oz_suffixed: bool = False) -> List[Steps]:
    """The candidates: the generic pipelines, every program's best pipeline that beats -Oz (first seen first), and
    with ``oz_suffixed`` the 248 :func:`oz_suffixes`."""
    pool: Dict[Steps, None] = dict.fromkeys(GENERIC)
    for program in library.programs:
        steps, count = program.best()
        if steps != (OZ,) and count < program.oz_count:
            pool.setdefault(steps)
    if oz_suffixed:
        pool.update(dict.fromkeys(oz_suffixes()))
    return list(pool)


def measure_pool(module, pool: Sequence[Steps], engine) -> Tuple[int, List[Optional[int]]]:
    """IR instructions after -Oz and after each pipeline of ``pool`` on ``module`` (None where one failed).

    One engine call over a tree: each pipeline continues from its longest proper prefix that is measured too (-Oz
    is), so ``(-Oz, p, -Oz)`` costs one -Oz run after ``(-Oz, p)``. A pipeline is measured as a search runs it,
    without the passes that change what the program does (:func:`~behavioral_pq.core.catalog.meaning_preserving`);
    one left with no pass counts as failed."""
    pool = [meaning_preserving(steps) for steps in pool]
    order = sorted(dict.fromkeys([(OZ,), *(steps for steps in pool if steps)]), key=len)
    node: Dict[Steps, int] = {}
    parents: List[int] = []
    edges: List[str] = []
    for steps in order:
        cut = next((k for k in range(len(steps) - 1, 0, -1) if steps[:k] in node), 0)
        parents.append(node[steps[:cut]] if cut else -1)
        edges.append(steps_pipeline(steps[cut:]))
        node[steps] = len(edges) - 1
    features, _, errors = engine.autophase_tree([module.bitcode], parents, edges, names=[module.name])
    oz = node[(OZ,)]
    if errors[oz] is not None:
        raise errors[oz]
    total = AUTOPHASE_FEATURES.index("TotalInsts")
    counts = [None if not s or errors[node[s]] is not None else int(features[node[s], total]) for s in pool]
    return int(features[oz, total]), counts


def choose_coreset(gains: np.ndarray, size: int) -> Tuple[List[int], List[float]]:
    """Greedy cover: columns of ``gains`` float (N programs, P pipelines), ``log(IC_Oz / IC)`` clipped at 0 (-Oz is
    always kept), chosen one at a time for the largest rise of the mean best gain. Returns the chosen columns and
    the mean best gain after each choice; stops early when no column adds anything."""
    gains = np.maximum(np.asarray(gains, np.float64), 0.0)
    best = np.zeros(gains.shape[0])
    chosen: List[int] = []
    curve: List[float] = []
    for _ in range(min(size, gains.shape[1])):
        rise = np.maximum(gains, best[:, None]).sum(0) - best.sum()
        rise[chosen] = -1.0
        j = int(np.argmax(rise))
        if rise[j] <= 0:
            break
        chosen.append(j)
        best = np.maximum(best, gains[:, j])
        curve.append(float(best.mean()))
    return chosen, curve


def fit_coreset(library: ProgramLibrary, store: Union[str, os.PathLike], log: Union[str, os.PathLike], *,
                size: int = CORESET_SIZE, programs: int = CORESET_PROGRAMS, seed: int = 0,
                oz_suffixed: bool = False, engine=None, progress: bool = False) -> dict:
    """Measure :func:`coreset_pool` on ``programs`` library programs (seeded sample) read from ``store`` and set
    ``library.coreset`` to the greedy choice of ``size``. The measured counts also go into those programs' results,
    so that neighbor votes see them. Resumable: each program's counts go to ``log`` (JSON lines) as it finishes.
``oz_suffixed`` widens the pool with :func:`oz_suffixes` (off by default: on the real store's valid units it moved
the budget-50 result from 1.0149 to 1.0155, within noise, and measuring took about 5 minutes instead of 3).

    Returns the summary saved as ``library.settings["coreset"]``: sample and pool sizes, the mean gain
    ``exp(mean log(IC_Oz / IC))`` of the chosen K and of the whole pool on the sample, and the curve by K.

    Raises:
        LibraryError: the store holds none of the sampled programs, ``log`` was made for another pool, or the
            library counts something else than IR instructions.
    """
    from tqdm import tqdm

    if library.objective != "ir-count":
        raise LibraryError(f"a coreset counts IR instructions; this library counts {library.objective}")
    engine = engine or default_engine()
    pool = coreset_pool(library, oz_suffixed)
    rng = np.random.default_rng(seed)
    indices = sorted(rng.choice(len(library), min(programs, len(library)), replace=False).tolist())
    sample = {library.programs[i].program: i for i in indices}
    log = Path(log)
    header = {"pool": [encode_steps(s) for s in pool], "seed": seed, "programs": len(sample)}
    done: Dict[str, dict] = {}
    if log.exists():
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        if not lines or lines[0] != header:
            raise LibraryError(f"{log}: made for another library, pool or sample; remove it to restart")
        done = {row["program"]: row for row in lines[1:]}
    else:
        log.write_text(json.dumps(header) + "\n")
    todo = set(sample) - set(done)
    with log.open("a") as sink, tqdm(total=len(todo), disable=not progress, desc="coreset", unit="program") as bar:
        for module in Corpus(store).iter_modules(only=todo):
            sha = module.sha256
            try:
                oz, counts = measure_pool(module, pool, engine)
                row = {"program": sha, "oz": oz, "counts": counts}
            except BPQError as exc:
                row = {"program": sha, "error": f"{type(exc).__name__}: {exc}"}
                logger.warning("coreset: %s failed: %s", module.name, exc)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            done[sha] = row
            bar.update()
    rows = [done[s] for s in sample if s in done and "error" not in done[s]]
    if not rows:
        raise LibraryError(f"{store}: none of the {len(sample)} sampled library programs could be measured")
    gains = np.array([[math.log(max(r["oz"], 1) / max(c, 1)) if c is not None else -1.0 for c in r["counts"]]
                      for r in rows])
    chosen, curve = choose_coreset(gains, size)
    library.coreset = [pool[j] for j in chosen]
    protected = set(GENERIC) | set(library.coreset)
    for row in rows:
        entry = library.programs[sample[row["program"]]]
        for steps, count in zip(pool, row["counts"]):
            if steps in protected and count is not None:
                entry.results[steps] = min(count, entry.results.get(steps, count))
    whole = np.maximum(gains, 0).max(1).mean()
    summary = {"programs": len(rows), "failed": len(sample) - len(rows), "pool": len(pool), "size": len(chosen),
               "seed": seed, "gain": math.exp(curve[-1]) if curve else 1.0, "pool_gain": math.exp(whole),
               "curve": [round(math.exp(c), 5) for c in curve]}
    library.settings["coreset"] = summary
    return summary
