"""Genetic search for pass sequences (the probe search of DESIGN.md section 5).

- :class:`FitnessCache` measures the instruction count of modules after pass sequences, a whole population
  at a time through one batched engine call, and remembers every (module, sequence) it has measured.
- :func:`genetic_search` finds one fixed-length sequence over the catalog that maximizes the mean relative
  instruction-count reduction on a sample of modules (DEAP: two-point crossover, per-gene uniform mutation,
  tournament selection, elitism). It builds its own toolbox and fitness classes and restores the state of
  Python's ``random`` module afterwards, so searches never leak state into each other.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.core.catalog import PASSES, sequence_pipeline
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.core.module import Module

TOTAL_INSTS = AUTOPHASE_FEATURES.index("TotalInsts")

PassSequence = Tuple[int, ...]  # catalog indices


@dataclass
class PrefixTree:
    """Pass sequences on several modules laid out as one tree for :meth:`Engine.autophase_tree`.

    A node exists where a sequence ends, where sequences part, at every ``checkpoint``-th depth (those states
    are kept so that later sequences with the same prefix start there), and under each root. Each node's
    edge is the run of passes from its parent node to it.

    Attributes:
        roots: bitcode the subtrees start from (a module, or a cached state after a prefix).
        root_keys: (module index, prefix) each root stands for.
        parents, edges, wanted, keep: the tree, as ``Engine.autophase_tree`` takes it.
        leaves: (module index, sequence) -> node where the sequence ends.
        states: node -> (module index, prefix) for nodes whose bitcode is kept.
    """

    roots: List[bytes] = field(default_factory=list)
    root_keys: List[Tuple[int, PassSequence]] = field(default_factory=list)
    parents: List[int] = field(default_factory=list)
    edges: List[str] = field(default_factory=list)
    wanted: List[bool] = field(default_factory=list)
    keep: List[bool] = field(default_factory=list)
    leaves: Dict[Tuple[int, PassSequence], int] = field(default_factory=dict)
    states: Dict[int, Tuple[int, PassSequence]] = field(default_factory=dict)
    passes: int = 0  # pass executions the tree costs (a naive evaluation costs the sum of the lengths)

    @classmethod
    def build(cls, work: Sequence[Tuple[int, bytes, Sequence[PassSequence]]], checkpoint: int = 0,
              state: Callable[[int, PassSequence], Optional[bytes]] = lambda m, prefix: None) -> "PrefixTree":
        """Lay out ``work``: (module index, module bitcode, sequences to evaluate on it) triples.

        ``state(m, prefix)`` returns cached bitcode of module m after ``prefix`` (or None); each sequence
        starts from its longest cached checkpoint prefix. ``checkpoint`` 0 keeps no states.
        """
        tree = cls()
        for m, bitcode, sequences in work:
            # Children of every prefix that occurs, per starting point.
            starts: Dict[PassSequence, bytes] = {(): bitcode}
            children: Dict[PassSequence, Dict[int, None]] = {}
            ends = set()
            for seq in sequences:
                start = 0
                if checkpoint:
                    for depth in range((len(seq) - 1) // checkpoint * checkpoint, 0, -checkpoint):
                        cached = state(m, seq[:depth])
                        if cached is not None:
                            starts[seq[:depth]], start = cached, depth
                            break
                for depth in range(start, len(seq)):
                    children.setdefault(seq[:depth], {})[seq[depth]] = None
                ends.add(seq)
            tree.passes += sum(len(c) for c in children.values())

            def is_node(prefix: PassSequence) -> bool:
                return (prefix in ends or len(children.get(prefix, ())) > 1
                        or bool(checkpoint) and len(prefix) % checkpoint == 0)

            for start in sorted(starts, key=len):
                if start not in children:
                    continue
                tree.roots.append(starts[start])
                tree.root_keys.append((m, start))
                stack = [(start, -len(tree.roots))]  # (prefix of a node, its index in the tree)
                while stack:
                    prefix, parent = stack.pop()
                    for first in children.get(prefix, ()):
                        end = prefix + (first,)
                        while not is_node(end):
                            (only,) = children[end]
                            end += (only,)
                        node = len(tree.parents)
                        tree.parents.append(parent)
                        tree.edges.append(sequence_pipeline(end[len(prefix):]))
                        tree.wanted.append(end in ends)
                        keep = bool(checkpoint) and len(end) % checkpoint == 0 and end not in ends
                        tree.keep.append(keep)
                        if keep:
                            tree.states[node] = (m, end)
                        if end in ends:
                            tree.leaves[(m, end)] = node
                        stack.append((end, node))
        return tree


class FitnessCache:
    """Instruction counts of modules after pass sequences, measured in batches and cached.

    Args:
        modules: the modules a sequence is judged on.
        engine: where passes run (default: the shared engine).
        tree: evaluate each batch as a prefix tree (shared prefixes run once); False runs every sequence
            from scratch in one batched call.
        checkpoint: with ``tree``, keep the module state after every ``checkpoint`` passes so that later
            batches start sequences from their longest known prefix (0: never).
        state_bytes: bound on the bitcode kept for those states (least recently used go first).

    ``fitness(sequences)`` returns float64 (S,): the mean over modules of ``(IC0 - IC) / IC0``. A module that
    fails under a sequence counts as no reduction for it. ``hits`` and ``misses`` count cache use per
    (module, sequence) pair; ``passes_run`` counts pass executions.
    """

    def __init__(self, modules: Sequence[Module], engine: Optional[Engine] = None, *, tree: bool = True,
                 checkpoint: int = 10, state_bytes: int = 256 << 20):
        if not modules:
            raise ValueError("need at least one module to judge sequences on")
        self.modules = list(modules)
        self.engine = engine or default_engine()
        self.tree = tree
        self.checkpoint = checkpoint if tree else 0
        self.state_bytes = state_bytes
        self.original = np.array([max(1, m.instruction_count) for m in self.modules], dtype=np.float64)
        self._counts: Dict[Tuple[str, PassSequence], int] = {}
        self._states: "OrderedDict[Tuple[str, PassSequence], bytes]" = OrderedDict()
        self._state_total = 0
        self.hits = 0
        self.misses = 0
        self.passes_run = 0

    def counts(self, sequences: Sequence[PassSequence]) -> np.ndarray:
        """int64 (S, N): instruction count of module n after sequence s (IC0 where the module failed)."""
        sequences = [tuple(int(i) for i in s) for s in sequences]
        before = len(self._counts)
        todo = [(n, m, list(dict.fromkeys(s for s in sequences if (m.sha256, s) not in self._counts)))
                for n, m in enumerate(self.modules)]
        todo = [(n, m, seqs) for n, m, seqs in todo if seqs]
        if todo and self.tree:
            self._measure_tree(todo)
        elif todo:
            self._measure_flat(todo)
        measured = len(self._counts) - before
        self.misses += measured
        self.hits += len(sequences) * len(self.modules) - measured
        return np.array([[self._counts[(m.sha256, s)] for m in self.modules] for s in sequences], dtype=np.int64)

    def _measure_flat(self, todo) -> None:
        missing = list(dict.fromkeys(s for _, _, seqs in todo for s in seqs))
        modules = [m for _, m, _ in todo]
        features, errors = self.engine.autophase_after([m.bitcode for m in modules],
                                                       [sequence_pipeline(s) for s in missing],
                                                       names=[m.name for m in modules])
        self.passes_run += len(modules) * sum(len(s) for s in missing)
        for n, module in enumerate(modules):
            for k, seq in enumerate(missing):
                value = features[n, k + 1, TOTAL_INSTS] if errors[n] is None else module.instruction_count
                self._counts.setdefault((module.sha256, seq), int(value))

    def _measure_tree(self, todo) -> None:
        def state(n: int, prefix: PassSequence) -> Optional[bytes]:
            key = (self.modules[n].sha256, prefix)
            bitcode = self._states.get(key)
            if bitcode is not None:
                self._states.move_to_end(key)
            return bitcode

        tree = PrefixTree.build([(n, m.bitcode, seqs) for n, m, seqs in todo], self.checkpoint, state)
        features, kept, errors = self.engine.autophase_tree(
            tree.roots, tree.parents, tree.edges, wanted=tree.wanted, keep=tree.keep,
            names=[self.modules[n].name for n, _ in tree.root_keys])
        self.passes_run += tree.passes
        for (n, seq), node in tree.leaves.items():
            module = self.modules[n]
            value = features[node, TOTAL_INSTS] if errors[node] is None else module.instruction_count
            self._counts.setdefault((module.sha256, seq), int(value))
        for node, bitcode in kept.items():
            n, prefix = tree.states[node]
            key = (self.modules[n].sha256, prefix)
            if key not in self._states:
                self._states[key] = bitcode
                self._state_total += len(bitcode)
        while self._state_total > self.state_bytes and self._states:
            _, bitcode = self._states.popitem(last=False)
            self._state_total -= len(bitcode)

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
    """Best sequence found, its fitness, the best/mean fitness of every generation (0 = initial), and the
    distinct sequences of the final population with their fitness, best first."""

    best: PassSequence
    fitness: float
    history: List[Tuple[float, float]] = field(default_factory=list)
    ranked: List[Tuple[PassSequence, float]] = field(default_factory=list)


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
        ranked = {}
        for ind in sorted(population, key=lambda ind: -ind.fitness.values[0]):  # stable: ties keep order
            ranked.setdefault(tuple(ind), ind.fitness.values[0])
        best, value = next(iter(ranked.items()))
        return GAResult(best, value, history, list(ranked.items()))
    finally:
        random.setstate(state)


def _stats(population) -> Tuple[float, float]:
    values = [ind.fitness.values[0] for ind in population]
    return max(values), float(np.mean(values))
