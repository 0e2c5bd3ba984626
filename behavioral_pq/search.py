"""Genetic search for pass sequences (the probe search of DESIGN.md section 5; issue 4, in progress).

- :class:`FitnessCache` measures the instruction count of modules after pass sequences, a whole population
  at a time through one batched engine call, and remembers every (module, sequence) it has measured.
- :func:`genetic_search` finds one fixed-length sequence over the catalog that maximizes the mean relative
  instruction-count reduction on a sample of modules (DEAP: two-point crossover, per-gene uniform mutation,
  tournament selection, elitism). It builds its own toolbox and fitness classes and restores the state of
  Python's ``random`` module afterwards, so searches never leak state into each other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.catalog import PASSES, sequence_pipeline
from behavioral_pq.engine import Engine, default_engine
from behavioral_pq.features import AUTOPHASE_FEATURES
from behavioral_pq.module import Module

TOTAL_INSTS = AUTOPHASE_FEATURES.index("TotalInsts")

PassSequence = Tuple[int, ...]  # catalog indices


class FitnessCache:
    """Instruction counts of modules after pass sequences, measured in batches and cached.

    Args:
        modules: the modules a sequence is judged on.
        engine: where passes run (default: the shared engine).

    ``fitness(sequences)`` returns float64 (S,): the mean over modules of ``(IC0 - IC) / IC0``. A module that
    fails under a sequence counts as no reduction for it. ``hits`` and ``misses`` count cache use per
    (module, sequence) pair.
    """

    def __init__(self, modules: Sequence[Module], engine: Optional[Engine] = None):
        if not modules:
            raise ValueError("need at least one module to judge sequences on")
        self.modules = list(modules)
        self.engine = engine or default_engine()
        self.original = np.array([max(1, m.instruction_count) for m in self.modules], dtype=np.float64)
        self._counts: Dict[Tuple[str, PassSequence], int] = {}
        self.hits = 0
        self.misses = 0

    def counts(self, sequences: Sequence[PassSequence]) -> np.ndarray:
        """int64 (S, N): instruction count of module n after sequence s (IC0 where the module failed)."""
        sequences = [tuple(int(i) for i in s) for s in sequences]
        before = len(self._counts)
        missing = list(dict.fromkeys(s for s in sequences
                                     if any((m.sha256, s) not in self._counts for m in self.modules)))
        if missing:
            pipelines = [sequence_pipeline(s) for s in missing]
            features, errors = self.engine.autophase_after([m.bitcode for m in self.modules], pipelines,
                                                           names=[m.name for m in self.modules])
            for n, module in enumerate(self.modules):
                for k, seq in enumerate(missing):
                    value = features[n, k + 1, TOTAL_INSTS] if errors[n] is None else module.instruction_count
                    self._counts.setdefault((module.sha256, seq), int(value))
        measured = len(self._counts) - before
        self.misses += measured
        self.hits += len(sequences) * len(self.modules) - measured
        return np.array([[self._counts[(m.sha256, s)] for m in self.modules] for s in sequences], dtype=np.int64)

    def fitness(self, sequences: Sequence[PassSequence]) -> np.ndarray:
        """float64 (S,): mean relative instruction-count reduction of each sequence over the modules."""
        return ((self.original - self.counts(sequences)) / self.original).mean(axis=1)


@dataclass(frozen=True)
class GAConfig:
    """Genetic-search settings (defaults: the probe search's)."""

    length: int = 50
    population: int = 24
    generations: int = 12
    crossover: float = 0.7
    mutation: float = 0.3          # probability that an individual is mutated
    gene_mutation: float = 0.04    # per-gene probability of a new random pass, once mutated
    tournament: int = 3
    elite: int = 2
    seed: int = 0


@dataclass
class GAResult:
    """Best sequence found, its fitness, and the best/mean fitness of every generation (0 = initial)."""

    best: PassSequence
    fitness: float
    history: List[Tuple[float, float]] = field(default_factory=list)


def genetic_search(cache: FitnessCache, config: GAConfig = GAConfig()) -> GAResult:
    """Find one sequence of ``config.length`` catalog passes maximizing ``cache.fitness`` (seeded, reproducible)."""
    from deap import base, tools

    class Fitness(base.Fitness):
        weights = (1.0,)

    class Individual(list):
        def __init__(self, genes):
            super().__init__(genes)
            self.fitness = Fitness()

    state = random.getstate()
    random.seed(config.seed)
    try:
        n = len(PASSES)
        toolbox = base.Toolbox()
        toolbox.register("individual", lambda: Individual(random.randrange(n) for _ in range(config.length)))
        toolbox.register("mate", tools.cxTwoPoint)
        toolbox.register("mutate", tools.mutUniformInt, low=0, up=n - 1, indpb=config.gene_mutation)
        toolbox.register("select", tools.selTournament, tournsize=config.tournament)

        def evaluate(population) -> None:
            todo = [ind for ind in population if not ind.fitness.valid]
            if todo:
                for ind, value in zip(todo, cache.fitness([tuple(ind) for ind in todo])):
                    ind.fitness.values = (float(value),)

        population = [toolbox.individual() for _ in range(config.population)]
        evaluate(population)
        history = [_stats(population)]
        for _ in range(config.generations):
            elite = [toolbox.clone(ind) for ind in tools.selBest(population, config.elite)]
            offspring = [toolbox.clone(ind) for ind in toolbox.select(population, len(population) - config.elite)]
            for a, b in zip(offspring[::2], offspring[1::2]):
                if random.random() < config.crossover:
                    toolbox.mate(a, b)
                    del a.fitness.values, b.fitness.values
            for ind in offspring:
                if random.random() < config.mutation:
                    toolbox.mutate(ind)
                    del ind.fitness.values
            evaluate(offspring)
            population = elite + offspring
            history.append(_stats(population))
        best = tools.selBest(population, 1)[0]
        return GAResult(tuple(best), best.fitness.values[0], history)
    finally:
        random.setstate(state)


def _stats(population) -> Tuple[float, float]:
    values = [ind.fitness.values[0] for ind in population]
    return max(values), float(np.mean(values))
