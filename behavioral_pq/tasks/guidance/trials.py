"""Measuring candidate pipelines on one module within a budget of compilations, and the result type."""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from behavioral_pq.core._native_loader import native
from behavioral_pq.core.catalog import BASELINES, meaning_preserving, steps_pipeline
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.target import Target
from behavioral_pq.core.toolchain import text_size
from behavioral_pq.errors import BPQError, DeadlineError
from behavioral_pq.tasks.guidance.library import OZ, Steps

#: What a pipeline search minimizes. ``ir-count``: IR instructions after the pipeline (CompilerGym's
#: IrInstructionCount), in measure mode (what the program library and the rankers were built from) or, given a
#: target, in target mode for it (what is then written). ``text-size``: bytes of the ``.text`` of ``llc-19 -O2``'s
#: object after the pipeline in target mode (CompilerGym's ObjectTextSizeBytes).
OBJECTIVES = ("ir-count", "text-size")


@dataclass(frozen=True)
class SearchProgress:
    """Where a pipeline search stands, as given to a ``progress`` callback after each step.

    Attributes:
        phase: what runs now: ``"-Oz"`` (the reference), ``"loading the library"``, ``"embedding"`` (the
            probes), the origin of the candidates measured (``"library"``, ``"local search"``, ``"-Os"``, ...)
            or ``"build"`` (the chosen pipeline applied).
        compilations: candidate compilations done; ``budget`` allowed.
        best, oz: the objective's value of the best pipeline so far and of -Oz (None before -Oz is measured).
        seconds: wall time since the search began.
        done, total: the step's own count where it has one (probe-tree nodes measured for ``"embedding"``).
    """

    phase: str
    compilations: int
    budget: int
    best: Optional[int]
    oz: Optional[int]
    seconds: float
    objective: str = "ir-count"
    done: Optional[int] = None
    total: Optional[int] = None


ProgressCallback = Callable[[SearchProgress], None]


#: The candidates of a search in target mode that carry their own size marks (see :func:`candidate_target`).
SIZE_LEVEL_STEPS = ("-Oz", "-Os")


def candidate_target(target: Optional[Target], steps: Iterable[str]) -> Optional[Target]:
    """The target a candidate of a search in target mode is compiled for: ``target`` with every definition marked
    as clang -Oz marks it (``minsize``, ``optsize``; :attr:`Target.size` "Oz") before the candidate's passes,
    unless the candidate holds a size level (``-Oz``, ``-Os``) that marks them its own way. Both objectives are
    sizes, and passes and the code generator read the marks:

    - text-size: an unmarked candidate was compiled for speed after its passes (functions aligned, longer
      encodings), which a size build never is. ``-Os`` keeps its own ``optsize`` alone (with ``minsize`` as well
      it lost on 1 of 10 train-split whole programs that it won).
    - ir-count: unmarked, a real target's costs let the vectorizers and the unroller grow loops that -Oz leaves
      alone; marked, the train projects' units came out smaller at budgets 10 and 50, and none larger
      (BENCHMARKS, "The search counts where it writes").

    ``None`` (measure mode) stays None."""
    if target is None or target.size or any(step in SIZE_LEVEL_STEPS for step in steps):
        return target
    return replace(target, size="Oz")


class TextSizes:
    """``.text`` bytes of ``llc-19 -O2``'s object for bitcode, remembered by the bitcode's hash: a candidate whose
    passes changed nothing (many after -Oz) gives the bitcode of one measured before and costs no second llc run."""

    def __init__(self, cpu: Optional[str] = None):
        self.cpu = cpu or None
        self._known: Dict[bytes, int] = {}

    def __call__(self, bitcode: bytes, timeout: float = 120.0) -> int:
        key = hashlib.sha256(bitcode).digest()
        if key not in self._known:
            self._known[key] = text_size(bitcode, opt_level=2, cpu=self.cpu, timeout=timeout)
        return self._known[key]


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return objective


class Trials:
    """Candidate pipelines measured on one module, counted against a budget.

    The -Oz reference is measured first and is not counted. Each new candidate costs one compilation; a
    candidate measured before costs nothing; a candidate that fails (crash, timeout, invalid result) costs one
    and scores as unusable. ``counts`` hold the objective's value (IR instructions, or .text bytes for
    ``text-size``); ``history[i]`` is the best value after i + 1 compilations.

    ``target``: the :class:`~behavioral_pq.core.target.Target` the pipelines run for. For ``ir-count``, None
    (default) counts in measure mode; a target counts each candidate as it will be built and written for that
    target, so that the best found is the best written (a count in measure mode does not rank pipelines the way
    the target's cost models do). For ``text-size`` the default is the host's triple keeping the CPU each
    function was compiled for (what ``bpq compile`` does for size). In target mode each candidate runs for
    :func:`candidate_target` of it (:meth:`target_for`): marked for size as clang -Oz marks functions, unless it
    is a size level of its own.

    ``progress``: called with a :class:`SearchProgress` after -Oz and after each batch measured (``start``: the
    ``time.monotonic()`` its ``seconds`` count from; default now). ``oz_seconds`` is how long -Oz took: about
    what one compilation of this module costs.
    """

    def __init__(self, module, engine, budget: int, objective: str = "ir-count", target: Optional[Target] = None,
                 *, progress: Optional[ProgressCallback] = None, start: Optional[float] = None):
        self.module = module
        self.engine = engine
        self.budget = int(budget)
        self.objective = check_objective(objective)
        if objective == "text-size" and target is None:
            target = Target.module_cpus()
        self.target = target
        self._sizes = TextSizes(self.target.cpu if self.target is not None else None)
        self._heads: Dict[str, bytes] = {}   # target mode: results of whole-pipeline steps that others continue from
        self.counts: Dict[Steps, Optional[int]] = {}
        self.origin: Dict[Steps, str] = {}
        self._kept: Dict[Steps, Tuple[int, bytes]] = {}  # -Oz's and the best candidates' results (bitcode)
        self.compilations = 0
        self.history: List[int] = []
        self.progress = progress
        self.start = time.monotonic() if start is None else start
        self.oz_count: Optional[int] = None
        self.report("-Oz")
        began = time.monotonic()
        (self.oz_count,), (error,) = self._measure([(OZ,)])
        if error is not None:
            raise error
        self.oz_seconds = time.monotonic() - began
        self.counts[(OZ,)] = self.oz_count
        self.origin[(OZ,)] = "-Oz"
        self.report("-Oz")

    def report(self, phase: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        """Tell ``progress`` (if any) where the search stands."""
        if self.progress is not None:
            best = self.best()[1] if self.oz_count is not None else None
            self.progress(SearchProgress(phase, self.compilations, self.budget, best, self.oz_count,
                                         time.monotonic() - self.start, self.objective, done, total))

    def target_for(self, steps: Iterable[str]) -> Optional[Target]:
        """The target ``steps`` are compiled for in this search (None in measure mode): :func:`candidate_target`."""
        return candidate_target(self.target, steps)

    @property
    def left(self) -> int:
        return self.budget - self.compilations

    def _measure(self, candidates: List[Steps], deadline: Optional[float] = None
                 ) -> Tuple[List[Optional[int]], list]:
        """The objective's value after each candidate (None where it failed), and the errors (a DeadlineError
        where ``deadline``, a ``time.monotonic()`` value, passed first)."""
        if self.target is not None:
            return self._measure_built(candidates, deadline)
        features, kept, errors = self.engine.autophase_tree(
            [self.module.bitcode], [-1] * len(candidates), [steps_pipeline(s) for s in candidates],
            keep=[True] * len(candidates), names=[self.module.name], deadline=deadline)
        total = AUTOPHASE_FEATURES.index("TotalInsts")
        values = [None if e is not None else int(features[i, total]) for i, e in enumerate(errors)]
        for i, steps in enumerate(candidates):
            if values[i] is not None and i in kept:
                self._keep(steps, kept[i], values[i])
        return values, errors

    def _measure_built(self, candidates: List[Steps], deadline: Optional[float] = None
                       ) -> Tuple[List[Optional[int]], list]:
        """Target mode: every candidate's pipeline, in one engine call spread over its workers, then its value on
        the result: IR instructions, or .text bytes of llc's object (one llc per engine worker at a time). A
        candidate that begins with a whole-pipeline step measured before (-Oz, -Os, -Oz-outline) and is compiled
        for the same target continues from that step's result, as :func:`measure_built_pool` does: ``(-Oz, p)``
        costs a run of ``p``. Results in the candidates' order."""
        sources, pipelines = [], []
        for steps in candidates:
            head = steps[0]
            if len(steps) > 1 and head in self._heads and self.target_for((head,)) == self.target_for(steps):
                sources.append(self._heads[head])
                pipelines.append(steps_pipeline(steps[1:]))
            else:
                sources.append(self.module.bitcode)
                pipelines.append(steps_pipeline(steps))
        built, errors = self.engine.run_pipelines(sources, pipelines, names=[self.module.name] * len(candidates),
                                                  targets=[self.target_for(s) for s in candidates], deadline=deadline)
        for steps, bitcode in zip(candidates, built):
            if bitcode is not None and len(steps) == 1 and steps[0].lstrip("-") in BASELINES:
                self._heads[steps[0]] = bitcode
        values: List[Optional[int]] = [None] * len(candidates)
        if self.objective == "ir-count":
            for i, bitcode in enumerate(built):
                if bitcode is not None:
                    values[i] = int(native.instruction_count(bitcode))
        else:
            def text(i: int) -> None:
                left = 120.0 if deadline is None else deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise DeadlineError(f"{self.module.name}: the deadline passed before llc ran")
                    try:
                        values[i] = self._sizes(built[i], timeout=min(120.0, left))
                    except TimeoutError as exc:
                        if deadline is None or left >= 120.0:
                            raise
                        raise DeadlineError(f"{self.module.name}: the deadline passed while llc ran") from exc
                except BPQError as exc:  # an llc failure: this candidate is unusable
                    errors[i] = exc

            done = [i for i, bitcode in enumerate(built) if bitcode is not None]
            with ThreadPoolExecutor(max_workers=max(1, min(len(done), self.engine.workers))) as pool:
                list(pool.map(text, done))
        for i, steps in enumerate(candidates):
            if errors[i] is None:
                self._keep(steps, built[i], values[i])
        return values, errors

    def _keep(self, steps: Steps, bitcode: bytes, value: int) -> None:
        """Keep the result of -Oz and of every candidate as small as the smallest so far (one of them is what
        :meth:`best` returns), so that :meth:`instruction_count` and :meth:`result` need no second run."""
        if steps != (OZ,):
            smallest = min((v for k, (v, _) in self._kept.items() if k != (OZ,)), default=value)
            if value > smallest:
                return
            self._kept = {k: kept for k, kept in self._kept.items() if k == (OZ,) or kept[0] <= value}
        self._kept[steps] = (value, bitcode)

    def instruction_count(self, steps: Steps) -> int:
        """IR instructions after ``steps`` in this search's mode (for reports; measured again unless the search
        kept the result)."""
        steps = tuple(steps)
        if self.objective == "ir-count" and self.counts.get(steps) is not None:
            return int(self.counts[steps])
        bitcode = self._kept[steps][1] if steps in self._kept else None
        if bitcode is None:
            bitcode = self.engine.run_pipeline(self.module.bitcode, steps_pipeline(steps), self.module.name,
                                               target=self.target_for(steps))
        return load_module(bitcode, name=self.module.name, engine=self.engine).instruction_count

    def result(self, steps: Steps) -> Optional[bytes]:
        """The module after ``steps`` as this search measured it (bitcode; in target mode when the search has a
        target), or None when it was not kept (only -Oz and the best candidates are)."""
        kept = self._kept.get(tuple(steps))
        return kept[1] if kept is not None else None

    def run(self, candidates: Iterable[Steps], origin: str, deadline: Optional[float] = None) -> bool:
        """Measure the candidates not measured yet, as far as the budget goes: one batched engine call, or with a
        ``deadline`` (a ``time.monotonic()`` value) one call per round of the engine's workers, in the given
        order, until it passes. A candidate cut by the deadline is not counted. Returns False when the deadline
        cut the batch short. A candidate is measured without the passes that change what the program does
        (:func:`~behavioral_pq.core.catalog.meaning_preserving`): what is built from a search must behave as its
        source does."""
        new = [s for s in dict.fromkeys(meaning_preserving(c) for c in candidates)
               if s and s not in self.counts][:max(self.left, 0)]
        step = len(new) if deadline is None else max(1, self.engine.workers)
        for first in range(0, len(new), max(step, 1)):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            batch = new[first:first + step]
            values, errors = self._measure(batch, deadline)
            for steps, count, error in zip(batch, values, errors):
                if isinstance(error, DeadlineError):
                    continue
                self.counts[steps] = count
                self.origin[steps] = origin
                self.compilations += 1
                self.history.append(min(self.best()[1], count if count is not None else self.oz_count))
            self.report(origin)
            if any(isinstance(e, DeadlineError) for e in errors):
                return False
        return True

    def best(self) -> Tuple[Steps, int]:
        """The best measured pipeline (shortest among equals; -Oz unless something is strictly better)."""
        best, count = (OZ,), self.oz_count
        for steps, c in self.counts.items():
            if c is not None and (c < count or c == count and best != (OZ,) and len(steps) < len(best)):
                best, count = steps, c
        return best, count

    def best_at(self, budget: int) -> int:
        """The best value of the objective after ``budget`` compilations (-Oz at 0)."""
        return min([self.oz_count] + self.history[:budget])

    def measured(self) -> Dict[Steps, int]:
        return {s: c for s, c in self.counts.items() if c is not None}


def measure_built_pool(module: Module, pool: Iterable[Steps], engine, target: Target, objective: str = "text-size"
                       ) -> Tuple[int, List[Optional[int]]]:
    """The objective's value (.text bytes, or IR instructions) after -Oz and after each pipeline of ``pool`` on
    ``module`` (None where one failed), measured as a search in target mode measures its candidates
    (:class:`Trials`): each built for :func:`candidate_target` of ``target``, a pipeline that begins with a
    whole-pipeline step (``-Oz``, ``-Os``, ``-Oz-outline``) continuing from that step's result, which is measured
    first, once. A pipeline is measured as the search runs it, without the passes that change what the program
    does. Raises the error of -Oz when -Oz fails."""
    pool = [tuple(steps) for steps in pool]
    heads = [(head,) for head in dict.fromkeys(steps[0] for steps in pool if len(steps) > 1)
             if head.lstrip("-") in BASELINES]
    trials = Trials(module, engine, len(heads) + len(pool), objective=objective, target=target)
    trials.run(heads, "pool")
    trials.run(pool, "pool")
    return trials.oz_count, [trials.counts.get(meaning_preserving(steps)) for steps in pool]


@dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend_pipeline` (or a baseline search) found for a module.

    Attributes:
        steps: the pipeline, e.g. ``("-Oz", "-instcombine")``; ``pipeline`` its new-PM string.
        instruction_count: IR instructions after the pipeline; ``oz_count`` after -Oz; ``original_count`` as
            built (in target mode for the text-size objective).
        objective: what the search minimized (see :data:`OBJECTIVES`).
        text_size, oz_text_size: for ``text-size``: .text bytes after the pipeline and after -Oz (else None).
        compilations: candidate compilations spent (the budget counts these; -Oz is compiled besides).
        method: how the pipeline was found ("library", "local search", "random", "greedy" or "-Oz").
        neighbors: names of the library programs consulted (nearest first).
        tried: every candidate measured, in order, with the objective's value (None: it failed).
        first_count: that value for the first candidate (the pure prediction of budget 1), or None.
        seconds: wall time, embedding included.
        notes: what a time bound (``seconds=``) cut or skipped, one sentence each (empty when nothing was).
    """

    steps: Steps
    pipeline: str
    instruction_count: int
    oz_count: int
    original_count: int
    compilations: int
    budget: int
    method: str
    neighbors: Tuple[str, ...] = ()
    tried: Tuple[Tuple[Steps, Optional[int]], ...] = ()
    first_count: Optional[int] = None
    probe_compilations: int = 0
    seconds: float = 0.0
    objective: str = "ir-count"
    text_size: Optional[int] = None
    oz_text_size: Optional[int] = None
    notes: Tuple[str, ...] = ()

    @property
    def improvement(self) -> float:
        """-Oz's value over the recommended pipeline's, for the objective: IC_Oz / IC, or .text bytes of -Oz over
        ours (>= 1.0; 1.05 means 5% fewer instructions, or bytes, than -Oz)."""
        if self.objective == "text-size":
            return max(self.oz_text_size or 0, 1) / max(self.text_size or 0, 1)
        return max(self.oz_count, 1) / max(self.instruction_count, 1)

    def as_dict(self) -> dict:
        return {"pipeline": self.pipeline, "steps": list(self.steps), "instruction_count": self.instruction_count,
                "oz_count": self.oz_count, "original_count": self.original_count,
                "improvement_over_oz": self.improvement, "method": self.method, "budget": self.budget,
                "compilations": self.compilations, "probe_compilations": self.probe_compilations,
                "neighbors": list(self.neighbors), "seconds": self.seconds, "objective": self.objective,
                "text_size": self.text_size, "oz_text_size": self.oz_text_size, "notes": list(self.notes)}


def recommendation_from(trials: Trials, start: float, kind: Optional[str] = None, **extra) -> Recommendation:
    """The best of ``trials`` as a :class:`Recommendation`; ``start`` is the ``time.monotonic()`` at which the
    search began (the embedding included), ``extra`` sets the optional fields."""
    steps, count = trials.best()
    method = "-Oz" if steps == (OZ,) else (kind or trials.origin[steps])
    tried = tuple((s, c) for s, c in trials.counts.items() if s != (OZ,))
    if trials.objective == "text-size":
        extra.update(objective="text-size", text_size=count, oz_text_size=trials.oz_count)
        count, oz_count = trials.instruction_count(steps), trials.instruction_count((OZ,))
    else:
        oz_count = trials.oz_count
    return Recommendation(steps, steps_pipeline(steps), count, oz_count, trials.module.instruction_count,
                          trials.compilations, trials.budget, method, tried=tried,
                          first_count=tried[0][1] if tried else None, seconds=time.monotonic() - start,
                          **extra)
