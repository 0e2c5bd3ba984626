"""Genetic pass-sequence search: batched and cached fitness, reproducible GA that improves on its start."""

import random

import numpy as np
import pytest

import behavioral_pq as bpq
from behavioral_pq.catalog import sequence_pipeline
from behavioral_pq.features import AUTOPHASE_FEATURES
from behavioral_pq.search import TOTAL_INSTS, FitnessCache, GAConfig, genetic_search


def test_total_insts_index():
    assert AUTOPHASE_FEATURES[TOTAL_INSTS] == "TotalInsts"


def test_fitness_equals_direct_runs_and_cache_hits_are_correct(examples, engine):
    modules = [examples["sum_array"], examples["matmul"]]
    cache = FitnessCache(modules, engine)
    rng = random.Random(1)
    sequences = [tuple(rng.randrange(124) for _ in range(8)) for _ in range(5)]
    counts = cache.counts(sequences)
    assert cache.misses == 10 and cache.hits == 0
    for s, seq in enumerate(sequences):
        for n, module in enumerate(modules):
            assert counts[s, n] == bpq.optimize(module, sequence_pipeline(seq), engine=engine).instruction_count
    again = cache.counts(sequences[::-1] + [sequences[0]])
    assert cache.misses == 10 and cache.hits == 12
    np.testing.assert_array_equal(again[:5], counts[::-1])
    ic0 = np.array([m.instruction_count for m in modules])
    np.testing.assert_allclose(cache.fitness(sequences), ((ic0 - counts) / ic0).mean(axis=1))


def test_ga_is_reproducible_and_improves_on_its_start(examples, engine):
    modules = [examples["sum_array"], examples["list_sort"]]
    config = GAConfig(length=6, population=8, generations=4, seed=7)
    first = genetic_search(FitnessCache(modules, engine), config)
    state = random.getstate()
    second = genetic_search(FitnessCache(modules, engine), config)
    assert random.getstate() == state, "the search leaves the global random state alone"
    assert first.best == second.best and first.history == second.history
    assert len(first.best) == 6 and all(0 <= p < 124 for p in first.best)
    assert first.history[-1][0] >= first.history[0][0]
    assert first.history[-1][1] > first.history[0][1], "the population's mean fitness improves"
    assert first.fitness == pytest.approx(FitnessCache(modules, engine).fitness([first.best])[0])
    other = genetic_search(FitnessCache(modules, engine), GAConfig(length=6, population=8, generations=4, seed=8))
    assert other.history != first.history


def test_fitness_needs_modules():
    with pytest.raises(ValueError, match="at least one module"):
        FitnessCache([])
