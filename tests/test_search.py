"""Genetic pass-sequence search: batched and cached fitness, reproducible GA that improves on its start."""

import random

import numpy as np
import pytest

import behavioral_pq as bpq
from behavioral_pq.core.catalog import sequence_pipeline
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.training.genetic import TOTAL_INSTS, FitnessCache, GAConfig, PrefixTree, genetic_search


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


# -- prefix-tree evaluation -----------------------------------------------------------------------------------

def family(seed: int, base: int = 3, children: int = 4, length: int = 20):
    """Sequences that share prefixes, as a GA population does: a few random ones and variants of each that
    keep a random-length prefix."""
    rng = random.Random(seed)
    out = []
    for _ in range(base):
        parent = tuple(rng.randrange(124) for _ in range(length))
        out.append(parent)
        for _ in range(children):
            cut = rng.randrange(1, length)
            out.append(parent[:cut] + tuple(rng.randrange(124) for _ in range(length - cut)))
    return out


def test_tree_evaluation_equals_naive_evaluation(examples, engine):
    modules = list(examples.values())
    sequences = family(3) + family(4, base=1, length=12)  # two lengths in one batch
    flat = FitnessCache(modules, engine, tree=False)
    tree = FitnessCache(modules, engine, checkpoint=5)
    np.testing.assert_array_equal(tree.counts(sequences), flat.counts(sequences))
    assert tree.passes_run < flat.passes_run == len(modules) * sum(len(s) for s in sequences)
    # A later batch starts from the kept prefix states and still agrees with evaluation from scratch.
    assert tree._states, "checkpoint states were kept"
    later = [s[:10] + tuple((g + 1) % 124 for g in s[10:]) for s in sequences[:6]]
    before = tree.passes_run
    np.testing.assert_array_equal(tree.counts(later), flat.counts(later))
    assert tree.passes_run - before <= len(modules) * sum(len(s) - 10 for s in later)
    # And both equal one engine call per sequence on a fresh copy of each module.
    for seq in later[:2]:
        features, errors = engine.autophase_after([m.bitcode for m in modules], [sequence_pipeline(seq)])
        assert errors == [None] * len(modules)
        np.testing.assert_array_equal(tree.counts([seq])[0], features[:, 1, TOTAL_INSTS])


def test_prefix_tree_layout():
    a, b, c = (1, 2, 3, 4), (1, 2, 5, 6), (1, 2)  # c is a prefix of a and b
    tree = PrefixTree.build([(0, b"m0", [a, b, c]), (1, b"m1", [a])])
    assert tree.roots == [b"m0", b"m1"] and tree.root_keys == [(0, ()), (1, ())]
    # Module 0: one edge for the shared prefix (ending where c ends), then one edge each for a and b.
    assert tree.parents == [-1, 0, 0, -2]
    assert tree.edges[0] == sequence_pipeline((1, 2)) and tree.edges[3] == sequence_pipeline(a)
    assert {k: tree.leaves[k] for k in [(0, a), (0, b), (0, c), (1, a)]} == \
        {(0, c): 0, (0, a): tree.leaves[(0, a)], (0, b): tree.leaves[(0, b)], (1, a): 3}
    assert tree.wanted == [True, True, True, True] and not any(tree.keep)
    assert tree.passes == 6 + 4
    # Checkpoints every 2 passes: states after (1, 2) are kept unless a sequence ends there; a cached state is
    # where a sequence starts.
    kept = PrefixTree.build([(0, b"m0", [a, b])], checkpoint=2)
    assert [kept.states[n] for n in sorted(kept.states)] == [(0, (1, 2))]
    resumed = PrefixTree.build([(0, b"m0", [a, b])], checkpoint=2,
                               state=lambda m, prefix: b"after12" if prefix == (1, 2) else None)
    assert resumed.roots == [b"after12"] and resumed.passes == 4
    assert resumed.edges == [sequence_pipeline((3, 4)), sequence_pipeline((5, 6))]


def test_tree_contains_a_crash_to_its_subtree(examples):
    from test_engine import ABORTING

    from behavioral_pq.errors import PassCrashError

    looping = examples["sum_array"]
    parents = [-1, 0, 0, 1, -2]
    edges = ["function(sroa)", ABORTING, "function(instcombine<no-verify-fixpoint>)", "function(sroa)",
             "function(sroa)"]
    with bpq.Engine(workers=2) as engine:
        features, kept, errors = engine.autophase_tree([looping.bitcode, examples["matmul"].bitcode], parents,
                                                       edges, keep=[True, False, False, False, False],
                                                       names=["sum_array", "matmul"])
        assert engine.restarts >= 1
    assert isinstance(errors[1], PassCrashError) and errors[3] is errors[1]
    assert "LICM requires MemorySSA" in errors[1].detail
    assert errors[0] is None and errors[2] is None and errors[4] is None
    assert not features[[1, 3]].any()
    with bpq.Engine(workers=0) as inproc:
        sroa = inproc.autophase_after([looping.bitcode, examples["matmul"].bitcode], ["function(sroa)"])[0]
        both = inproc.autophase_after([looping.bitcode],
                                      ["function(sroa),function(instcombine<no-verify-fixpoint>)"])[0]
    np.testing.assert_array_equal(features[0], sroa[0, 1])
    np.testing.assert_array_equal(features[4], sroa[1, 1])
    np.testing.assert_array_equal(features[2], both[0, 1])
    assert bpq.Module(kept[0]).instruction_count == sroa[0, 1, TOTAL_INSTS]


def test_tree_rejects_bad_input(examples, engine):
    from behavioral_pq.errors import PipelineError

    bitcode = examples["matmul"].bitcode
    with pytest.raises(ValueError, match="parents must come first"):
        engine.autophase_tree([bitcode], [-1, 2, 1], ["function(sroa)"] * 3)
    with pytest.raises(ValueError, match="parents must come first"):
        engine.autophase_tree([bitcode], [-2], ["function(sroa)"])
    with pytest.raises(PipelineError):
        engine.autophase_tree([bitcode], [-1], ["no-such-pass"])
    features, kept, errors = engine.autophase_tree([b"not bitcode", bitcode], [-1, 0, -2],
                                                   ["function(sroa)"] * 3)
    assert "invalid bitcode" in str(errors[0]) and str(errors[1]) == str(errors[0]) and errors[2] is None
    assert features[2, TOTAL_INSTS] > 0 and not features[:2].any()
