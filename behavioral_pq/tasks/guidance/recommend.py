"""recommend_pipeline: retrieve the pipelines of a module's nearest library programs, try the best within
the budget, then search locally around the best found.
"""


from __future__ import annotations

import logging
import math
import numbers
import random
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import with_pooling_of
from behavioral_pq.core.catalog import meaning_preserving
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.features import autophase
from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.target import Target, TargetLike, resolve_target
from behavioral_pq.embedding.encoder import SAMPLE_ABOVE, load_encoder
from behavioral_pq.embedding.sampling import SAMPLE_BUDGET
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.errors import DeadlineError
from behavioral_pq.tasks.guidance.edits import load_edit_prior
from behavioral_pq.tasks.guidance.library import OZ, ProgramLibrary, Steps, default_library, mutate_steps
from behavioral_pq.tasks.guidance.ranker import check_ranker, default_ranker, load_ranker, representation_rows
from behavioral_pq.tasks.guidance.trials import (
    ProgressCallback,
    Recommendation,
    Trials,
    check_objective,
    recommendation_from,
)

logger = logging.getLogger(__name__)

#: The first candidate of a text-size search (after the -Oz reference).
SIZE_SEEDS = ("-Os",)
#: The second: -Oz with LLVM's IR outliner (see ``catalog.BASELINES``).
OUTLINE_SEED = ("-Oz-outline",)
#: The share of the retrieved candidates taken from the library's coreset (when it has one).
CORESET_SHARE = 0.5
#: What a module's probes cost in -Oz runs of it (or of its function sample), on two workers: 24 probes, 1197
#: passes in their prefix tree; 20 to 33 on two modules of 77k IR instructions (Lua; linked Csmith programs).
PROBES_PER_OZ = 30
#: With a time bound, the probes run only when they should take at most this share of the time left after -Oz,
#: and are stopped past ``EMBEDDING_CUT`` of it; the library's coreset then stands in for the neighbors' pipelines
#: (on 400 real valid units the coreset alone scored 1.0127 at budget 50, the default mix 1.0114).
EMBEDDING_SHARE = 0.5
EMBEDDING_CUT = 0.7
#: With a ranker, the share of the budget spent on its picks (the rest: local search around the best found).
RANKED_SHARE = 0.6
#: The ranker's picks are measured in rounds of this many, each chosen knowing the earlier rounds' outcomes (0: all
#: in one round). One round by default: rounds of 2 found more among the pool's pipelines at budget 5, but not in
#: the compiled searches, where a local search spends the rest (BENCHMARKS, "A sequential choice").
RANKED_ROUND = 0

def _local_search(trials: Trials, start: Steps, rng: random.Random, vocabulary: Sequence[str],
                  batch: int = 4, deadline: Optional[float] = None,
                  weights: Optional[Sequence[float]] = None) -> None:
    """Spend what is left of the budget on random edits of the best pipeline so far (``start`` while -Oz leads),
    until ``deadline`` (a ``time.monotonic()`` value) if one is given; ``weights``: the catalog half's edit prior
    (see :func:`mutate_steps`)."""
    stalls = 0
    while trials.left > 0 and stalls < 50 and (deadline is None or time.monotonic() < deadline):
        best = trials.best()[0]
        base = start if best == (OZ,) else best
        before = trials.compilations
        edits = [mutate_steps(base, rng, vocabulary, weights) for _ in range(min(trials.left, batch))]
        if not trials.run(edits, "local search", deadline=deadline):
            return
        stalls = stalls + 1 if trials.compilations == before else 0


def _try_then_search_locally(trials: Trials, candidates: List[Steps], origin: str, seed: int,
                             end: Optional[float], notes: List[str], *, gaining: bool = False,
                             weights: Optional[Sequence[float]] = None) -> None:
    """Measure ``candidates`` (from ``origin``), then spend the rest of the budget on a local search around the
    best found, with their passes as its vocabulary, until ``end``; note when the time bound ended it early.
    ``gaining``: the vocabulary is the passes of the candidates that beat -Oz on this module (all candidates'
    when none did); ``weights``: the edit prior of the catalog half (see :func:`mutate_steps`)."""
    trials.run(candidates, origin, deadline=end)
    vocabulary = sorted({x for s in candidates for x in s if x != OZ})
    if gaining:
        counts = [trials.counts.get(meaning_preserving(s)) for s in candidates]
        better = [s for s, c in zip(candidates, counts) if c is not None and c < trials.oz_count]
        vocabulary = sorted({x for s in better for x in s if x != OZ}) or vocabulary
    rng = random.Random(f"{seed}:{trials.module.sha256}")
    _local_search(trials, candidates[0] if candidates else (OZ,), rng, vocabulary, deadline=end, weights=weights)
    if end is not None and trials.left > 0 and time.monotonic() >= end and not notes:
        notes.append(f"the time bound ended the search after {trials.compilations} of {trials.budget} compilations")


def pool_outcomes(trials: Trials, pool: Iterable[Steps]) -> Dict[Steps, float]:
    """The module's measured gains, log(-Oz's value / the pipeline's), of the ``pool`` pipelines ``trials`` has
    measured (as built: without meaning-changing passes); failed ones left out."""
    out: Dict[Steps, float] = {}
    for steps in pool:
        value = trials.counts.get(meaning_preserving(steps))
        if value is not None and trials.oz_count:
            out[tuple(steps)] = math.log(max(trials.oz_count, 1) / max(value, 1))
    return out


def ranked_rounds(trials: Trials, ranker, row, count: int, *, deadline: Optional[float] = None,
                  round_size: int = RANKED_ROUND) -> List[Steps]:
    """Measure ``count`` of ``ranker``'s picks for the module of ``row`` in rounds of ``round_size`` (0: one
    round), each round chosen knowing what the earlier ones gained on the module (:meth:`PipelineRanker.choose`
    with ``outcomes``): after its first round the choice leans to the pipelines that helped the train modules
    which reacted alike. Returns the pipelines chosen, in order (the last round may be cut by ``deadline``)."""
    chosen: List[Steps] = []
    round_size = int(round_size) if round_size > 0 else max(count, 1)
    while len(chosen) < count:
        outcomes = pool_outcomes(trials, chosen) if chosen else None
        batch = ranker.choose(row, min(round_size, count - len(chosen)), measured=trials.counts, outcomes=outcomes,
                              exclude=chosen)
        if not batch:
            break
        chosen += batch
        if not trials.run(batch, "ranker", deadline=deadline) or trials.left <= 0:
            break
    return chosen


def embedding_seconds(trials: Trials, sample_above: Optional[int] = SAMPLE_ABOVE) -> float:
    """About how long the probes take on ``trials.module``, from how long -Oz took on it: the probe set's passes
    cost about :data:`PROBES_PER_OZ` -Oz runs over two workers (on the module, or on its function sample in
    large-module mode); more workers share them."""
    module = trials.module
    share = 1.0
    if sample_above is not None and module.instruction_count > sample_above:
        share = min(SAMPLE_BUDGET, max(1, sample_above // 2)) / module.instruction_count
    return trials.oz_seconds * share * PROBES_PER_OZ * 2 / max(2, trials.engine.workers)


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
                       neighbor_indices: Optional[Sequence[int]] = None,
                       progress: Union[bool, ProgressCallback] = False,
                       objective: str = "ir-count", target: TargetLike = None,
                       seconds: Optional[float] = None, reserve_builds: int = 0,
                       ranker=None, ranked_share: float = RANKED_SHARE) -> Recommendation:
    """Choose a pass pipeline for ``module`` within ``budget`` candidate compilations.

    By default (no library asked for) the shipped pipeline ranker of the objective chooses the first candidates
    from its pool (see ``ranker``), then a local search spends the rest; on the real valid projects it found more
    at budget 50 than the library's retrieval below (BENCHMARKS, "A learned ranker over pipelines"). The
    text-size search tries -Os and ``Oz-outline`` (-Oz with LLVM's IR outliner) before the ranker's picks.

    With a library (``library``, ``embedding``, ``learn``, ``ranker=False``, or the text-size objective):
    measures -Oz first (the reference, not counted: the result is never worse than -Oz), embeds the module, takes
    the pipelines of its ``neighbors`` nearest library programs ranked by :meth:`ProgramLibrary.candidates` and,
    where the library has one, its coreset (pipelines good on many programs,
    :mod:`~behavioral_pq.tasks.guidance.coreset`), in turn, ``coreset_share`` of them from the coreset. It measures
    the first ``max(1, round(budget * retrieval_share))`` of those (all of the budget when it is 1 or 2), and spends
    the rest on a local search around the best found.

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
        progress: a callable, given a :class:`SearchProgress` after each step (-Oz, loading the library, the
            probes, each batch of candidates); or True for the probes' progress bar on stderr.
        objective: ``"ir-count"`` (IR instructions: in measure mode, what the library holds, or with ``target``
            in target mode, each candidate counted as it will be built for that target) or ``"text-size"``
            (.text bytes of ``llc-19 -O2``'s object, each candidate run in target mode for ``target``: default
            the host triple with the CPU each function was compiled for). The library's pipelines are the
            candidates either way (text-size tries -Os first, then ``Oz-outline``: -Oz with LLVM's IR
            outliner), ranked by what the library counts: a library searched for text size (``bpq library
            build --objective text-size``) ranks them by bytes. Text-size measures each candidate by compiling
            it, so it costs more per candidate; every candidate but -Oz / -Os is compiled with its functions
            marked as clang -Oz marks them (:func:`~behavioral_pq.tasks.guidance.trials.candidate_target`).
        target: where the candidates are built and counted: None or ``"measure"`` (measure mode; for text-size,
            the default target above), ``"host"``, a triple or a :class:`~behavioral_pq.core.target.Target`
            (:func:`~behavioral_pq.core.target.resolve_target`). ``learn`` needs measure mode for ir-count. An
            ir-count search for a target edits in its local search with the passes of the ranker's picks that beat
            -Oz on the module and the shipped edit prior (:mod:`~behavioral_pq.tasks.guidance.edits`).
        seconds: a bound on the call's wall time, from its start: the search stops there whatever is left of
            ``budget`` (with a large budget it is time-bound, as baselines given a fixed wall time are). -Oz is
            always measured, first, however long it takes (``notes`` says when it alone overran). Loading the
            shipped library is skipped when no time is left; the probes are skipped when they should take more
            than :data:`EMBEDDING_SHARE` of the time left (estimated from -Oz's time, see
            :func:`embedding_seconds`) and stopped past :data:`EMBEDDING_CUT` of it, the library's coreset then
            standing in for the neighbors' pipelines; compilations still running at the bound are stopped and not
            counted. ``notes`` says what was skipped or cut.
        reserve_builds: with ``seconds``: end the search early enough for this many more builds of the module
            by the caller (each reserved as long as -Oz took), so that they too end within ``seconds``.
        ranker: a :class:`~behavioral_pq.tasks.guidance.ranker.PipelineRanker` (or its folder) trained for
            ``objective``: its choice from its pool replaces the library's retrieval. Default: the shipped ranker
            of the objective for the module's size (:func:`~behavioral_pq.tasks.guidance.ranker.default_ranker`:
            for instruction counts, modules of 5,000 instructions or more take a ranker of their own) when no
            ``library``,
            ``embedding``, ``neighbor_indices`` or ``learn`` asks for the library's retrieval;
            ``False``: the library's retrieval (the shipped library when ``library`` is None). The first
            ``max(1, round(budget * ranked_share))`` candidates are its picks (all of the budget when it is 1 or
            2), the rest a local search around the best found. A ranker that reads the embedding or the spectrum
            runs the probes (skipped or cut under ``seconds`` as above, its no-module ranking then standing in).

    Returns:
        a :class:`Recommendation`; ``recommendation.pipeline`` can be given to :func:`optimize`.
    """
    return _search(module, budget, library=library, encoder=encoder, engine=engine, embedding=embedding,
                   neighbors=neighbors, retrieval_share=retrieval_share, coreset_share=coreset_share, seed=seed,
                   learn=learn, neighbor_indices=neighbor_indices, progress=progress, objective=objective,
                   target=target, seconds=seconds, reserve_builds=reserve_builds, ranker=ranker,
                   ranked_share=ranked_share)[0]


def _is_number(value) -> bool:
    return isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_count(name: str, value, minimum: int = 0) -> None:
    """Refuse a ``value`` that is not a whole number >= ``minimum`` (``True`` and ``1.5`` included)."""
    if not isinstance(value, (numbers.Integral, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_learning(objective: str, target: Optional[Target], learn: bool) -> None:
    """An instruction-count library holds counts in measure mode: a search that counts for a target cannot teach
    it."""
    if learn and objective == "ir-count" and target is not None:
        raise ValueError("learn=True keeps what the search measured in an instruction-count library, whose counts "
                         "are in measure mode; this search counts for a target: search without one (measure mode) "
                         "to learn")


def _check_library(library: ProgramLibrary, objective: str, learn: bool) -> None:
    if library.objective == "text-size" and objective != "text-size":
        raise ValueError(f"this library was searched for text size: its pipelines are ranked by bytes, not by "
                         f"{objective}; give the instruction-count library")
    if learn and library.objective != objective:
        raise ValueError(f"learn=True needs a library of the objective searched for: the library counts "
                         f"{library.objective}, the search {objective}")


def _search(module, budget: int, *, library: Optional[ProgramLibrary] = None, encoder=None, engine=None,
            embedding: Optional[np.ndarray] = None, neighbors: int = 8, retrieval_share: float = 0.5,
            coreset_share: float = CORESET_SHARE, seed: int = 0, learn: bool = False,
            neighbor_indices: Optional[Sequence[int]] = None, progress: Union[bool, ProgressCallback] = False,
            objective: str = "ir-count", target: TargetLike = None, seconds: Optional[float] = None,
            reserve_builds: int = 0, start: Optional[float] = None, ranker=None,
            ranked_share: float = RANKED_SHARE) -> Tuple[Recommendation, Trials]:
    """:func:`recommend_pipeline` and its :class:`Trials` (whose kept results spare the caller a second run);
    ``start``: the ``time.monotonic()`` that ``seconds`` counts from (default: now)."""
    _check_count("budget", budget)
    _check_count("reserve_builds", reserve_builds)
    _check_count("neighbors", neighbors, minimum=1)
    if seconds is not None and not (_is_number(seconds) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be positive and finite, got {seconds!r}")
    for name, share in (("retrieval_share", retrieval_share), ("coreset_share", coreset_share)):
        if not (_is_number(share) and 0.0 <= share <= 1.0):
            raise ValueError(f"{name} must be a number in [0, 1], got {share!r}")
    check_objective(objective)
    target = resolve_target(target)
    _check_learning(objective, target, learn)
    start = time.monotonic() if start is None else start
    deadline = None if seconds is None else start + seconds
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    if ranker is None and library is None and embedding is None and neighbor_indices is None and not learn:
        ranker = default_ranker(objective, module.instruction_count)
    if ranker is not None and ranker is not False:
        return _ranked_search(module, budget, ranker, engine=engine, encoder=encoder, seed=seed, progress=progress,
                              objective=objective, target=target, deadline=deadline,
                              reserve_builds=reserve_builds, start=start, ranked_share=ranked_share)
    if library is not None:
        _check_library(library, objective, learn)
    report = progress if callable(progress) else None
    trials = Trials(module, engine, budget, objective=objective, target=target, progress=report, start=start)
    # with a time bound, the search ends early enough for the caller's builds
    end = None if deadline is None else deadline - reserve_builds * trials.oz_seconds
    notes: List[str] = []
    if deadline is not None and time.monotonic() >= deadline:
        notes.append(f"-Oz alone took {trials.oz_seconds:.1f} s and used up the time bound: nothing else was tried")
    if library is None and (end is None or time.monotonic() < end):
        trials.report("loading the library")
        library = default_library(encoder, objective)
        _check_library(library, objective, learn)
    probe_compilations = 0
    if library is not None and embedding is None and neighbor_indices is None:
        if end is not None and embedding_seconds(trials) > EMBEDDING_SHARE * (end - time.monotonic()):
            notes.append(f"probes skipped: about {embedding_seconds(trials):.1f} s of probes, "
                         f"{max(0.0, end - time.monotonic()):.1f} s left; the library's coreset stood in for the "
                         "neighbors' pipelines")
            neighbor_indices = []
        else:
            encoder = with_pooling_of(encoder or load_encoder(), library.encoder)   # the library's embeddings
            trials.report("embedding")
            watch = (lambda done, total: trials.report("embedding", done, total)) if report else bool(progress)
            cut = None if end is None else time.monotonic() + EMBEDDING_CUT * (end - time.monotonic())
            try:
                embedding = encoder.embed(module, progress=watch, engine=engine, deadline=cut)
                probe_compilations = encoder.probe_set.num_probes
            except DeadlineError:
                notes.append(f"probes stopped after {EMBEDDING_CUT:.0%} of the time left; the library's coreset "
                             "stood in for the neighbors' pipelines")
                neighbor_indices = []
    if library is None:
        neighbor_indices, ranked, coreset = [], [], []
    else:
        if neighbor_indices is None:
            neighbor_indices, _ = library.neighbors(embedding, neighbors)
        ranked, coreset = [s for s, _ in library.candidates(neighbor_indices)], library.coreset
    if objective == "text-size":
        _size_seeds(trials, end)
    retrieve = budget if budget <= 2 else max(1, int(round(budget * retrieval_share)))
    retrieved = retrieval_order(ranked, coreset, retrieve, coreset_share)
    _try_then_search_locally(trials, retrieved, "library", seed, end, notes)
    if learn and embedding is not None and library is not None:
        library.learn(module.sha256, embedding, trials.measured(), name=module.name,
                      instruction_count=module.instruction_count, oz_count=trials.oz_count)
    names = tuple(library.programs[int(j)].name for j in neighbor_indices) if library is not None else ()
    found = recommendation_from(trials, start, neighbors=names, probe_compilations=probe_compilations,
                                notes=tuple(notes))
    return found, trials


def _size_seeds(trials: Trials, end: Optional[float]) -> None:
    """The first candidates of a text-size search. -Os first: it rotates loops, which -Oz does not, and a guarded
    bottom-tested loop is often shorter than a top-tested one with its trip count (smax) computed; 18 of the 47
    shipped tasks are 2-20% smaller with -Os than with -Oz in target mode, real units rarely are. Then the IR
    outliner after -Oz: what -Oz keeps in several functions becomes one function and calls (whole programs: 0.936
    of -Oz's .text on 10 of the train projects', 0.976 on 33 of the valid ones')."""
    trials.run([SIZE_SEEDS], "-Os", deadline=end)
    trials.run([OUTLINE_SEED], "-Oz-outline", deadline=end)


def _ranked_search(module, budget: int, ranker, *, engine, encoder=None, seed: int = 0,
                   progress: Union[bool, ProgressCallback] = False, objective: str = "ir-count",
                   target: Optional[Target] = None, deadline: Optional[float] = None, reserve_builds: int = 0,
                   start: float, ranked_share: float = RANKED_SHARE) -> Tuple[Recommendation, Trials]:
    """:func:`_search` with a :class:`PipelineRanker` choosing the candidates instead of the library."""
    if not 0.0 < ranked_share <= 1.0:
        raise ValueError(f"ranked_share must be in (0, 1], got {ranked_share}")
    if not hasattr(ranker, "choose"):
        ranker = load_ranker(ranker)
    if ranker.objective != objective:
        raise ValueError(f"this pipeline ranker was trained for the {ranker.objective} objective, the search is for "
                         f"{objective}; give a ranker of {objective} rows (bpq ranker measure --objective "
                         f"{objective})")
    report = progress if callable(progress) else None
    trials = Trials(module, engine, budget, objective=objective, target=target, progress=report, start=start)
    end = None if deadline is None else deadline - reserve_builds * trials.oz_seconds
    notes: List[str] = []
    row = None
    probe_compilations = 0
    if ranker.representation == "autophase":
        row = representation_rows("autophase", autophase=autophase(module)[None])[0]
    elif ranker.representation in ("spectrum", "embedding"):
        if end is not None and embedding_seconds(trials) > EMBEDDING_SHARE * (end - time.monotonic()):
            notes.append(f"probes skipped: about {embedding_seconds(trials):.1f} s of probes, "
                         f"{max(0.0, end - time.monotonic()):.1f} s left; the ranking without module input "
                         "stood in")
        else:
            encoder = encoder or load_encoder()
            if ranker.representation == "embedding":
                encoder = with_pooling_of(encoder, ranker.identity)
            check_ranker(ranker, encoder)
            trials.report("embedding")
            watch = (lambda done, total: trials.report("embedding", done, total)) if report else bool(progress)
            cut = None if end is None else time.monotonic() + EMBEDDING_CUT * (end - time.monotonic())
            try:
                batch = spectra([module], encoder.probe_set, progress=watch, sample_above=SAMPLE_ABOVE,
                                engine=engine, deadline=cut)
                batch.raise_first()
                probe_compilations = encoder.probe_set.num_probes
                if ranker.representation == "spectrum":
                    row = representation_rows("spectrum", spectra=batch.spectra,
                                              autophase=batch.autophase[:, 0])[0]
                else:
                    row = encoder.embed_spectra(batch.spectra, batch.autophase[:, 0])[0]
            except DeadlineError:
                notes.append(f"probes stopped after {EMBEDDING_CUT:.0%} of the time left; the ranking without "
                             "module input stood in")
    if objective == "text-size":
        _size_seeds(trials, end)
    picks = budget if budget <= 2 else max(1, int(round(budget * ranked_share)))
    chosen = ranked_rounds(trials, ranker, row, max(0, picks - trials.compilations), deadline=end,
                           round_size=RANKED_ROUND)
    host = objective == "ir-count" and target is not None   # edits for a target: the module's gains and the prior
    _try_then_search_locally(trials, chosen, "ranker", seed, end, notes, gaining=host,
                             weights=load_edit_prior() if host else None)
    found = recommendation_from(trials, start, probe_compilations=probe_compilations, notes=tuple(notes))
    return found, trials


def recommend_and_optimize(module, budget: int = 10, *, library: Optional[ProgramLibrary] = None, encoder=None,
                           engine=None, learn: bool = False, progress: Union[bool, ProgressCallback] = False,
                           objective: str = "ir-count", target: TargetLike = None,
                           seconds: Optional[float] = None, reserve_builds: int = 0, ranker=None,
                           ) -> Tuple[Recommendation, Module]:
    """:func:`recommend_pipeline` (with ``ranker``, its ranked search), then the module optimized with the
    recommendation (``bpq optimize --auto``).
    With a ``target`` (and always for ``objective="text-size"``, default as in :func:`recommend_pipeline`) the
    search counts in target mode and the module is optimized in target mode: what is returned is what was
    searched.

    Without ``seconds`` the recommendation is re-run from scratch and checked to give the count the search
    measured; with ``seconds`` (a bound on the whole call, the module's loading included) the module is the one
    the search measured, so that no second run is needed.

    Raises:
        RuntimeError: the re-run gave another instruction count (a non-deterministic pass).
    """
    start = time.monotonic()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    found, trials = _search(module, budget, library=library, encoder=encoder, engine=engine, learn=learn,
                            progress=progress, objective=objective, target=target, seconds=seconds,
                            reserve_builds=reserve_builds, start=start, ranker=ranker)
    kept = trials.result(found.steps) if seconds is not None else None
    if kept is not None:
        return found, Module(kept, name=module.name, source=module.source)
    if callable(progress):
        trials.report("build")
    result = optimize(module, found.pipeline, engine=engine, target=trials.target_for(found.steps))
    if result.instruction_count != found.instruction_count:
        raise RuntimeError(f"{module.name}: the recommended pipeline gave {result.instruction_count} instructions "
                           f"when re-run, {found.instruction_count} when searched (non-deterministic pass?)")
    return found, result
