"""The tree probe search: probes that share prefixes by construction, so a spectrum costs a fraction of the passes.

A tree has levels; level l has ``segments[l]`` passes and each node of level l - 1 has ``branching[l]`` children.
A probe is a path from the root: the leaves (and, with ``inner_probes``, every node) give spectrum rows.
:meth:`ProbeSet.trie` then runs each shared prefix once per module.

The search follows the flat one (:mod:`behavioral_pq.training.probe_search`) level by level:

1. the modules under a node (all of them at the root) are clustered by their Autophase *after the node's path*
   (k-means, seeded), one cluster per child, so the tree splits modules by how they reacted so far;
2. for each child, :func:`~behavioral_pq.training.genetic.genetic_search` finds the segment that most reduces
   the instruction count of a sample of its cluster, starting from the node's state;
3. the winner must give the same result twice (the next distinct sequence of the final population otherwise).

Every finished node is a line of ``search-state.jsonl``, so an interrupted search resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.artifacts import write_text_atomic
from behavioral_pq.core.catalog import PASSES, sequence_pipeline
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.module import Module
from behavioral_pq.embedding.probes import ProbeSet
from behavioral_pq.errors import ProbeSetError
from behavioral_pq.training.genetic import FitnessCache, GAConfig, genetic_search
from behavioral_pq.training.probe_search import (
    STATE_FILE,
    SearchConfig,
    choose_samples,
    cluster_autophase,
    is_deterministic,
    load_bitcode,
)


@dataclass(frozen=True)
class TreeConfig:
    """Tree-search settings.

    Attributes:
        branching: children per node at each level (the root's first); leaves = their product.
        segments: passes added at each level; a leaf probe has ``sum(segments)`` passes.
        inner_probes: every node is a probe (rows at every depth), not only the leaves.
        sample: modules per node the GA judges a segment on.
        max_instructions: the GA sample is drawn from modules up to this size (see ``SearchConfig``).
        ga: genetic-algorithm settings (``length`` is taken from ``segments``).
        checkpoint: FitnessCache prefix-state interval.
        seed: clustering, sampling and GA seed.
    """

    branching: Tuple[int, ...] = (4, 5, 5)
    segments: Tuple[int, ...] = (20, 15, 15)
    inner_probes: bool = True
    sample: int = 12
    max_instructions: int = 5000
    ga: GAConfig = GAConfig(length=0, population=24, generations=16)
    checkpoint: int = 5
    seed: int = 0

    def __post_init__(self):
        if not self.branching or len(self.branching) != len(self.segments):
            raise ValueError("branching and segments need one entry per level")
        if min(self.branching) < 1 or min(self.segments) < 1:
            raise ValueError("branching factors and segment lengths must be positive")

    @property
    def num_probes(self) -> int:
        leaves = int(np.prod(self.branching))
        if not self.inner_probes:
            return leaves
        return int(sum(np.prod(self.branching[:level + 1]) for level in range(len(self.branching))))

    @property
    def pass_executions(self) -> int:
        """Passes one spectrum runs: every node's segment once."""
        return int(sum(np.prod(self.branching[:level + 1]) * self.segments[level]
                       for level in range(len(self.branching))))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TreeConfig":
        data = dict(data)
        data["ga"] = GAConfig(**data.get("ga", {}))
        data["branching"], data["segments"] = tuple(data["branching"]), tuple(data["segments"])
        return cls(**data)

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class NodeResult:
    """What the search found for one node: its ``path`` (child index per level), the segment it adds and its
    whole sequence (catalog indices), the GA fitness, and what it cost."""

    path: Tuple[int, ...]
    members: int
    sample: List[str]
    segment: Tuple[int, ...]
    sequence: Tuple[int, ...]
    fitness: float
    rejected: int = 0
    passes: int = 0
    seconds: float = 0.0
    history: List[Tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "NodeResult":
        data = dict(data)
        for key in ("path", "segment", "sequence"):
            data[key] = tuple(data[key])
        data["history"] = [tuple(h) for h in data.get("history", [])]
        return cls(**data)


def _node_seed(seed: int, path: Tuple[int, ...]) -> int:
    return int.from_bytes(hashlib.sha256(json.dumps([seed, list(path)]).encode()).digest()[:4], "little")


def _split(members: List[str], features: np.ndarray, branches: int, seed: int) -> List[List[str]]:
    """Members of each child: k-means clusters of ``features``; too few members (or too few distinct feature
    rows) are dealt round robin, and a child left empty judges on its parent's members."""
    if branches == 1:
        return [members]
    if len(members) >= 2 * branches and len(np.unique(features, axis=0)) >= branches:
        labels, _ = cluster_autophase(features, branches, seed)
    else:
        labels = np.arange(len(members)) % branches
    groups = [[s for s, label in zip(members, labels) if label == c] for c in range(branches)]
    return [g or members for g in groups]


def search_probe_tree(corpus, shas: Sequence[str], out_dir: os.PathLike, config: TreeConfig = TreeConfig(), *,
                      engine: Optional[Engine] = None, corpus_description: str = "", name: Optional[str] = None,
                      progress: bool = True) -> Tuple[ProbeSet, List[NodeResult]]:
    """Search a probe tree on ``shas`` (modules of ``corpus``); resumable through ``out_dir``.

    Returns the probe set (probes in breadth-first order of their nodes: level 1 first; with
    ``inner_probes=False`` the leaves only) and one result per node in the same order.
    """
    engine = engine or default_engine()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shas = sorted(set(shas))
    table = corpus.modules(["sha256", "autophase", "instruction_count"])
    index = {s: i for i, s in enumerate(table.column("sha256").to_pylist())}
    missing = [s for s in shas if s not in index]
    if missing:
        raise ProbeSetError(f"{len(missing)} module hashes are not in {corpus.path} (first: {missing[0]})")
    rows = [index[s] for s in shas]
    original = dict(zip(shas, np.array(table.column("autophase").to_pylist(), dtype=np.int64)[rows]))
    counts = dict(zip(shas, np.array(table.column("instruction_count").to_pylist())[rows].tolist()))
    fingerprint = hashlib.sha256("\n".join(shas).encode()).hexdigest()[:16]
    header = {"kind": "tree", "config": config.to_dict(), "config_hash": config.hash, "modules": len(shas),
              "modules_hash": fingerprint, "corpus": corpus_description}
    done = _resume(out_dir / STATE_FILE, header)
    if not done:
        write_text_atomic(out_dir / STATE_FILE, json.dumps(header) + "\n")
    modules = load_bitcode(corpus, shas)
    sampling = SearchConfig(sample=config.sample, max_instructions=config.max_instructions, holdout=0,
                            seed=config.seed)

    from tqdm import tqdm

    total = sum(int(np.prod(config.branching[:level + 1])) for level in range(len(config.branching)))
    bar = tqdm(total=total, initial=len(done), desc="probe tree", unit="node", disable=not progress, leave=False)
    results: List[NodeResult] = []
    level_nodes: List[Tuple[Tuple[int, ...], Tuple[int, ...], List[str]]] = [((), (), shas)]
    number = 0
    with (out_dir / STATE_FILE).open("a") as state:
        for level, (branches, length) in enumerate(zip(config.branching, config.segments)):
            next_nodes = []
            for path, sequence, members in level_nodes:
                members, features, states = _after(engine, modules, members, sequence, original)
                groups = _split(members, features, branches, _node_seed(config.seed, path) % (2 ** 31))
                for child, group in enumerate(groups):
                    child_path = path + (child,)
                    result = done.get(child_path)
                    if result is None:
                        sample, _ = choose_samples(group, counts, sampling, number)
                        result = _search_node(child_path, len(group), sample, states, sequence, length, config,
                                              engine, modules)
                        state.write(json.dumps({"kind": "node", "result": result.to_dict()}) + "\n")
                        state.flush()
                        bar.update(1)
                        bar.set_postfix(fitness=f"{result.fitness:.3f}")
                    number += 1
                    results.append(result)
                    next_nodes.append((child_path, result.sequence, group))
            level_nodes = next_nodes
    bar.close()

    leaves = len(config.branching)
    chosen = [r for r in results if config.inner_probes or len(r.path) == leaves]
    probe_set = ProbeSet(
        name=name or _default_name(config),
        sequences=tuple(tuple(PASSES[i].flag for i in r.sequence) for r in chosen),
        seed=config.seed, corpus=corpus_description,
        search={"method": "probe tree: k-means on Autophase after each node's path + DEAP genetic search per "
                          "child segment (behavioral_pq.training.probe_tree)",
                "config": config.to_dict(), "modules": len(shas), "modules_hash": fingerprint,
                "seconds": round(sum(r.seconds for r in results), 1),
                "search_passes": int(sum(r.passes for r in results)),
                "rejected_nondeterministic": sum(r.rejected for r in results)})
    return probe_set, results


def _default_name(config: TreeConfig) -> str:
    shape = "x".join(str(b) for b in config.branching)
    lengths = "-".join(str(s) for s in config.segments)
    return f"tree-b{shape}-l{lengths}{'-inner' if config.inner_probes else ''}-s{config.seed}"


def _resume(path: Path, header: dict) -> Dict[Tuple[int, ...], NodeResult]:
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    first = json.loads(lines[0]) if lines else {}
    if {k: first.get(k) for k in ("config_hash", "modules_hash")} != \
            {k: header[k] for k in ("config_hash", "modules_hash")}:
        raise ProbeSetError(f"{path} belongs to another search (configuration or modules differ); remove it or "
                       "choose another output directory")
    done = {}
    for line in lines[1:]:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut short by an interruption: that node runs again
        if record.get("kind") == "node":
            result = NodeResult.from_dict(record["result"])
            done[result.path] = result
    return done


def _after(engine: Engine, modules: Dict[str, Module], members: List[str], sequence: Tuple[int, ...],
           original: Dict[str, np.ndarray]) -> Tuple[List[str], np.ndarray, Dict[str, bytes]]:
    """Members that survive ``sequence`` (a module whose run fails drops out), their Autophase after it,
    int64 (M, 56), and a lazy cache for their states (filled by :func:`_search_node` for the sampled ones)."""
    if not sequence:
        return members, np.array([original[s] for s in members]), {}
    features, errors = engine.autophase_after([modules[s].bitcode for s in members], [sequence_pipeline(sequence)],
                                              names=[s[:12] for s in members])
    keep = [i for i, e in enumerate(errors) if e is None]
    return [members[i] for i in keep], features[keep, 1], {}


def _search_node(path: Tuple[int, ...], members: int, sample: List[str], states: Dict[str, bytes],
                 prefix: Tuple[int, ...], length: int, config: TreeConfig, engine: Engine,
                 modules: Dict[str, Module]) -> NodeResult:
    start = time.monotonic()
    judged = []
    for sha in sample:
        if sha not in states:
            bitcode = modules[sha].bitcode
            states[sha] = engine.run_pipeline(bitcode, sequence_pipeline(prefix), name=sha[:12]) if prefix else bitcode
        judged.append(Module(states[sha], name=sha[:12]))
    cache = FitnessCache(judged, engine, checkpoint=config.checkpoint)
    ga = dataclasses.replace(config.ga, length=length, seed=_node_seed(config.seed, path) % (2 ** 31))
    found = genetic_search(cache, ga)
    rejected = 0
    for segment, fitness in found.ranked:
        if is_deterministic(segment, judged, engine, cache.counts([segment])[0]):
            break
        rejected += 1
    else:
        raise ProbeSetError(f"probe-tree node {path}: no segment of the final population was deterministic")
    return NodeResult(path=path, members=members, sample=list(sample), segment=tuple(segment),
                      sequence=tuple(prefix) + tuple(segment), fitness=float(fitness), rejected=rejected,
                      passes=cache.passes_run, seconds=time.monotonic() - start, history=found.history)


__all__ = ["TreeConfig", "NodeResult", "search_probe_tree"]
