"""Measuring candidate pipelines on one module within a budget of compilations, and the result type."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from behavioral_pq.core.catalog import steps_pipeline
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.tasks.guidance.library import OZ, Steps


class Trials:
    """Candidate pipelines measured on one module, counted against a budget.

    The -Oz reference is measured first and is not counted. Each new candidate costs one compilation; a
    candidate measured before costs nothing; a candidate that fails (crash, timeout, invalid result) costs one
    and scores as unusable. ``history[i]`` is the best instruction count after i + 1 compilations.
    """

    def __init__(self, module, engine, budget: int):
        self.module = module
        self.engine = engine
        self.budget = int(budget)
        self.counts: Dict[Steps, Optional[int]] = {}
        self.origin: Dict[Steps, str] = {}
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
        """Instruction counts after each candidate (None where it failed), and the errors."""

        features, _, errors = self.engine.autophase_tree(
            [self.module.bitcode], [-1] * len(candidates), [steps_pipeline(s) for s in candidates],
            names=[self.module.name])
        total = AUTOPHASE_FEATURES.index("TotalInsts")
        return [None if e is not None else int(features[i, total]) for i, e in enumerate(errors)], errors

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
        """The best instruction count after ``budget`` compilations (-Oz at 0)."""
        return min([self.oz_count] + self.history[:budget])

    def measured(self) -> Dict[Steps, int]:
        return {s: c for s, c in self.counts.items() if c is not None}


@dataclass(frozen=True)
class Recommendation:
    """What :func:`recommend_pipeline` (or a baseline search) found for a module.

    Attributes:
        steps: the pipeline, e.g. ``("-Oz", "-instcombine")``; ``pipeline`` its new-PM string.
        instruction_count: measured after the pipeline; ``oz_count`` after -Oz; ``original_count`` as built.
        compilations: candidate compilations spent (the budget counts these; -Oz is compiled besides).
        method: how the pipeline was found ("library", "local search", "random", "greedy" or "-Oz").
        neighbors: names of the library programs consulted (nearest first).
        tried: every candidate measured, in order, with its count (None: it failed).
        first_count: the count of the first candidate (the pure prediction of budget 1), or None.
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

    @property
    def improvement(self) -> float:
        """IC_Oz / IC of the recommended pipeline (>= 1.0; 1.05 means 5% fewer instructions than -Oz)."""
        return max(self.oz_count, 1) / max(self.instruction_count, 1)

    def as_dict(self) -> dict:
        return {"pipeline": self.pipeline, "steps": list(self.steps), "instruction_count": self.instruction_count,
                "oz_count": self.oz_count, "original_count": self.original_count,
                "improvement_over_oz": self.improvement, "method": self.method, "budget": self.budget,
                "compilations": self.compilations, "probe_compilations": self.probe_compilations,
                "neighbors": list(self.neighbors), "seconds": self.seconds}


def recommendation_from(trials: Trials, start: float, kind: Optional[str] = None, **extra) -> Recommendation:
    """The best of ``trials`` as a :class:`Recommendation`; ``start`` is the ``time.perf_counter()`` at which the
    search began (the embedding included), ``extra`` sets the optional fields."""
    steps, count = trials.best()
    method = "-Oz" if steps == (OZ,) else (kind or trials.origin[steps])
    tried = tuple((s, c) for s, c in trials.counts.items() if s != (OZ,))
    return Recommendation(steps, steps_pipeline(steps), count, trials.oz_count, trials.module.instruction_count,
                          trials.compilations, trials.budget, method, tried=tried,
                          first_count=tried[0][1] if tried else None, seconds=time.perf_counter() - start,
                          **extra)
