"""Measuring candidate pipelines on one module within a budget of compilations, and the result type."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from behavioral_pq.core.catalog import steps_pipeline
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.core.module import load_module
from behavioral_pq.core.target import Target
from behavioral_pq.core.toolchain import text_size
from behavioral_pq.errors import BPQError
from behavioral_pq.tasks.guidance.library import OZ, Steps

#: What a pipeline search minimizes. ``ir-count``: IR instructions after the pipeline in measure mode
#: (CompilerGym's IrInstructionCount; what the program library was built for). ``text-size``: bytes of the
#: ``.text`` of ``llc-19 -O2``'s object after the pipeline in target mode (CompilerGym's ObjectTextSizeBytes).
OBJECTIVES = ("ir-count", "text-size")


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

    ``target`` (text-size only): the :class:`~behavioral_pq.core.target.Target` the pipelines run for; default
    the host's triple keeping the CPU each function was compiled for (what ``bpq compile`` does for size).
    """

    def __init__(self, module, engine, budget: int, objective: str = "ir-count", target: Optional[Target] = None):
        self.module = module
        self.engine = engine
        self.budget = int(budget)
        self.objective = check_objective(objective)
        if objective == "text-size" and target is None:
            target = Target.module_cpus()
        self.target = target if objective == "text-size" else None
        self.counts: Dict[Steps, Optional[int]] = {}
        self.origin: Dict[Steps, str] = {}
        self._kept: Dict[Steps, Tuple[int, bytes]] = {}  # text-size: -Oz's and the smallest candidates' results
        self.compilations = 0
        self.history: List[int] = []
        (self.oz_count,), (error,) = self._measure([(OZ,)])
        if error is not None:
            raise error
        self.counts[(OZ,)] = self.oz_count
        self.origin[(OZ,)] = "-Oz"

    @property
    def left(self) -> int:
        return self.budget - self.compilations

    def _measure(self, candidates: List[Steps]) -> Tuple[List[Optional[int]], list]:
        """The objective's value after each candidate (None where it failed), and the errors."""
        if self.objective == "text-size":
            return self._measure_text(candidates)
        features, _, errors = self.engine.autophase_tree(
            [self.module.bitcode], [-1] * len(candidates), [steps_pipeline(s) for s in candidates],
            names=[self.module.name])
        total = AUTOPHASE_FEATURES.index("TotalInsts")
        return [None if e is not None else int(features[i, total]) for i, e in enumerate(errors)], errors

    def _measure_text(self, candidates: List[Steps]) -> Tuple[List[Optional[int]], list]:
        values: List[Optional[int]] = []
        errors: List[Optional[BPQError]] = []
        for steps in candidates:
            try:
                bitcode = self.engine.run_pipeline(self.module.bitcode, steps_pipeline(steps), self.module.name,
                                                   target=self.target)
                values.append(text_size(bitcode, opt_level=2, cpu=self.target.cpu or None))
                errors.append(None)
                self._keep(steps, bitcode, values[-1])
            except BPQError as exc:  # a crashing pass or an llc failure: this candidate is unusable
                values.append(None)
                errors.append(exc)
        return values, errors

    def _keep(self, steps: Steps, bitcode: bytes, value: int) -> None:
        """Keep the result of -Oz and of every candidate as small as the smallest so far (one of them is what
        :meth:`best` returns), so that :meth:`instruction_count` needs no second run."""
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
                                               target=self.target)
        return load_module(bitcode, name=self.module.name, engine=self.engine).instruction_count

    def run(self, candidates: Iterable[Steps], origin: str) -> None:
        """Measure the candidates not measured yet, as far as the budget goes (one batched engine call)."""
        new = [s for s in dict.fromkeys(tuple(c) for c in candidates) if s not in self.counts][:max(self.left, 0)]
        if not new:
            return
        for steps, count in zip(new, self._measure(new)[0]):
            self.counts[steps] = count
            self.origin[steps] = origin
            self.compilations += 1
            self.history.append(min(self.best()[1], count if count is not None else self.oz_count))

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
                "text_size": self.text_size, "oz_text_size": self.oz_text_size}


def recommendation_from(trials: Trials, start: float, kind: Optional[str] = None, **extra) -> Recommendation:
    """The best of ``trials`` as a :class:`Recommendation`; ``start`` is the ``time.perf_counter()`` at which the
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
                          first_count=tried[0][1] if tried else None, seconds=time.perf_counter() - start,
                          **extra)
