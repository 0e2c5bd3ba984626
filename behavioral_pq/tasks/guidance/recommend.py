"""recommend_pipeline: retrieve the pipelines of a module's nearest library programs, try the best within
the budget, then search locally around the best found.
"""


from __future__ import annotations

import logging
import random
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.core.catalog import BASELINES, PASSES
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.target import Target
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.tasks.guidance.library import OZ, ProgramLibrary, Steps, default_library
from behavioral_pq.tasks.guidance.trials import Recommendation, Trials, check_objective, recommendation_from

logger = logging.getLogger(__name__)

#: The first candidate of a text-size search (after the -Oz reference).
SIZE_SEEDS = ("-Os",)
#: The share of the retrieved candidates taken from the library's coreset (when it has one).
CORESET_SHARE = 0.5

def _mutate(steps: Steps, rng: random.Random, vocabulary: Sequence[str]) -> Steps:
    """One random edit: append, insert or replace a pass (from ``vocabulary`` half the time, else any), or delete one.
    Whole-pipeline steps (-Oz, -Os) are never removed or replaced."""
    flag = rng.choice(vocabulary) if vocabulary and rng.random() < 0.5 else rng.choice(PASSES).flag
    op = rng.choice(("append", "insert", "replace", "delete"))
    s = list(steps)
    movable = [i for i, x in enumerate(s) if x.lstrip("-") not in BASELINES]
    if op == "append" or not movable:
        s.append(flag)
    elif op == "insert":
        s.insert(rng.randrange(len(s) + 1), flag)
    elif op == "replace":
        s[rng.choice(movable)] = flag
    elif len(s) > 1:
        del s[rng.choice(movable)]
    return tuple(s)


def _local_search(trials: Trials, start: Steps, rng: random.Random, vocabulary: Sequence[str],
                  batch: int = 4, deadline: Optional[float] = None) -> None:
    """Spend what is left of the budget on random edits of the best pipeline so far (``start`` while -Oz leads),
    until ``deadline`` (a ``time.perf_counter()`` value) if one is given."""
    stalls = 0
    while trials.left > 0 and stalls < 50 and (deadline is None or time.perf_counter() < deadline):
        best = trials.best()[0]
        base = start if best == (OZ,) else best
        before = trials.compilations
        trials.run([_mutate(base, rng, vocabulary) for _ in range(min(trials.left, batch))], "local search")
        stalls = stalls + 1 if trials.compilations == before else 0


def retrieval_order(ranked: Sequence[Steps], coreset: Sequence[Steps], count: int, coreset_share: float
                    ) -> List[Steps]:
    """The first ``count`` distinct candidates of two lists taken in turn: the neighbors' ``ranked`` pipelines and
    the library's ``coreset``, about ``coreset_share`` of them from the coreset (the other list fills in when one
    runs out)."""
    if not 0.0 <= coreset_share <= 1.0:
        raise ValueError(f"coreset_share must be in [0, 1], got {coreset_share}")
    sources = {"coreset": list(coreset), "neighbors": list(ranked)}
    taken: Dict[str, int] = {"coreset": 0, "neighbors": 0}
    order: Dict[Steps, None] = {}
    while len(order) < count and (sources["coreset"] or sources["neighbors"]):
        from_coreset = taken["coreset"] < coreset_share * (len(order) + 1) - 1e-9
        name = "coreset" if (from_coreset and sources["coreset"]) or not sources["neighbors"] else "neighbors"
        steps = tuple(sources[name].pop(0))
        if steps not in order and steps != (OZ,):
            order[steps] = None
            taken[name] += 1
    return list(order)


def recommend_pipeline(module, budget: int = 10, *, library: Optional[ProgramLibrary] = None, encoder=None,
                       engine=None, embedding: Optional[np.ndarray] = None, neighbors: int = 8,
                       retrieval_share: float = 0.5, coreset_share: float = CORESET_SHARE, seed: int = 0,
                       learn: bool = False,
                       neighbor_indices: Optional[Sequence[int]] = None, progress: bool = False,
                       objective: str = "ir-count", target: Optional[Target] = None,
                       seconds: Optional[float] = None) -> Recommendation:
    """Choose a pass pipeline for ``module`` within ``budget`` candidate compilations.

    Embeds the module, takes the pipelines of its ``neighbors`` nearest library programs ranked by
    :meth:`ProgramLibrary.candidates` and, where the library has one, its coreset (pipelines good on many programs,
    :mod:`~behavioral_pq.tasks.guidance.coreset`), in turn, ``coreset_share`` of them from the coreset. It measures
    the first ``max(1, round(budget * retrieval_share))`` of those (all of the budget when it is 1 or 2), and spends
    the rest on a local search around the best found. -Oz is always measured as the reference (not counted), so
    the result is never worse than -Oz.

    Args:
        module: a Module, or what :func:`load_module` takes (.c/.ll/.bc path or bytes).
        budget: candidate compilations allowed (0: -Oz).
        library: a :class:`ProgramLibrary` (default: the shipped one for ``objective``, see
            :func:`default_library`). A text-size library cannot serve the ir-count objective.
        embedding: the module's embedding float32 (D,), when already known (skips the probes).
        coreset_share: the share of the retrieved candidates taken from the library's coreset (0: the neighbors'
            pipelines only; 1: the coreset only, which needs no embedding when ``neighbor_indices=[]``).
        learn: put what was measured into ``library`` (self-improvement; save it with ``library.save``); the
            library must count the objective searched for.
        neighbor_indices: consult these library programs instead of the nearest (an ablation).
        objective: ``"ir-count"`` (IR instructions in measure mode, what the library holds) or ``"text-size"``
            (.text bytes of ``llc-19 -O2``'s object, each candidate run in target mode for ``target``: default
            the host triple with the CPU each function was compiled for). The library's pipelines are the
            candidates either way (text-size tries -Os first), ranked by what the library counts: a library
            searched for text size (``bpq library build --objective text-size``) ranks them by bytes. Text-size
            measures each candidate by compiling it, so it costs more per candidate.
        seconds: also stop the local search once this much wall time has passed since the call (embedding
            included); with a large ``budget`` this makes the search time-bound, as baselines given a fixed wall
            time are. The library's candidates are always measured.

    Returns:
        a :class:`Recommendation`; ``recommendation.pipeline`` can be given to :func:`optimize`.
    """

    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if seconds is not None and seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    check_objective(objective)
    start = time.perf_counter()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    if library is None:
        library = default_library(encoder, objective)
    if library.objective == "text-size" and objective != "text-size":
        raise ValueError(f"this library was searched for text size: its pipelines are ranked by bytes, not by "
                         f"{objective}; give the instruction-count library")
    if learn and library.objective != objective:
        raise ValueError(f"learn=True needs a library of the objective searched for: the library counts "
                         f"{library.objective}, the search {objective}")
    probe_compilations = 0
    if embedding is None and neighbor_indices is None:

        encoder = encoder or load_encoder()
        embedding = encoder.embed(module, progress=progress)
        probe_compilations = encoder.probe_set.num_probes
    if neighbor_indices is None:
        neighbor_indices, _ = library.neighbors(embedding, neighbors)
    ranked = library.candidates(neighbor_indices)
    trials = Trials(module, engine, budget, objective=objective, target=target)
    if objective == "text-size":
        # -Os first: it rotates loops, which -Oz does not, and a guarded bottom-tested loop is often shorter than
        # a top-tested one with its trip count (smax) computed; 18 of the 47 shipped tasks are 2-20% smaller
        # with -Os than with -Oz in target mode, real units rarely are
        trials.run([SIZE_SEEDS], "-Os")
    retrieve = budget if budget <= 2 else max(1, int(round(budget * retrieval_share)))
    retrieved = retrieval_order([s for s, _ in ranked], library.coreset, retrieve, coreset_share)
    trials.run(retrieved, "library")
    vocabulary = sorted({x for s in retrieved for x in s if x != OZ})
    rng = random.Random(f"{seed}:{module.sha256}")
    _local_search(trials, retrieved[0] if retrieved else (OZ,), rng, vocabulary,
                  deadline=None if seconds is None else start + seconds)
    if learn and embedding is not None:
        library.learn(module.sha256, embedding, trials.measured(), name=module.name,
                      instruction_count=module.instruction_count, oz_count=trials.oz_count)
    return recommendation_from(trials, start, neighbors=tuple(library.programs[int(j)].name for j in neighbor_indices),
                               probe_compilations=probe_compilations)


def recommend_and_optimize(module, budget: int = 10, *, library: Optional[ProgramLibrary] = None, encoder=None,
                           engine=None, learn: bool = False, progress: bool = False, objective: str = "ir-count",
                           target: Optional[Target] = None, seconds: Optional[float] = None,
                           ) -> Tuple[Recommendation, Module]:
    """:func:`recommend_pipeline`, then the module optimized with the recommendation, re-run from scratch and
    checked to give the count the search measured (``bpq optimize --auto``). With ``objective="text-size"`` the
    module is optimized in target mode (``target``, default as in :func:`recommend_pipeline`).

    Raises:
        RuntimeError: the re-run gave another instruction count (a non-deterministic pass).
    """
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    found = recommend_pipeline(module, budget, library=library, encoder=encoder, engine=engine, learn=learn,
                               progress=progress, objective=objective, target=target, seconds=seconds)
    if objective == "text-size":
        target = target or Target.module_cpus()
    result = optimize(module, found.pipeline, engine=engine, target=target)
    if result.instruction_count != found.instruction_count:
        raise RuntimeError(f"{module.name}: the recommended pipeline gave {result.instruction_count} instructions "
                           f"when re-run, {found.instruction_count} when searched (non-deterministic pass?)")
    return found, result


