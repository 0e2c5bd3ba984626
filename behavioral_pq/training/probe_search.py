"""The probe search (DESIGN.md section 5): cluster a corpus, find one pass sequence per cluster, check it.

1. :func:`cluster_autophase` groups the corpus by its Autophase vectors (k-means on log1p-scaled features,
   seeded, scikit-learn).
2. :func:`search_probes` runs :func:`~behavioral_pq.training.genetic.genetic_search` on a seeded sample of each cluster,
   rejects a winner whose results differ between two runs on the same modules (the next best distinct
   sequence of the final population takes its place), and writes one line per cluster to a state file so an
   interrupted search resumes where it stopped.
3. :func:`behavioral_pq.reports.probes.probe_report` then measures the probe set.
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
from behavioral_pq.training.genetic import TOTAL_INSTS, FitnessCache, GAConfig, PassSequence, genetic_search

STATE_FILE = "search-state.jsonl"


@dataclass(frozen=True)
class SearchConfig:
    """Probe-search settings (defaults: those of the shipped probe set).

    Attributes:
        num_probes: P, the number of clusters and probes.
        sample: modules per cluster the GA judges a sequence on.
        max_instructions: the GA sample is drawn from a cluster's modules up to this size (the smallest larger
            ones fill in when a cluster has too few, within half of ``sample * max_instructions``
            instructions in all), which bounds the cost of the hot loop.
        holdout: modules per cluster, outside the GA sample, the report measures a probe on.
        ga: genetic-algorithm settings; cluster c searches with seed ``ga.seed * 1000 + c``.
        checkpoint: FitnessCache prefix-state interval.
        seed: k-means and sampling seed.
    """

    num_probes: int = 100
    sample: int = 16
    max_instructions: int = 5000
    holdout: int = 32
    ga: GAConfig = GAConfig(length=50, population=32, generations=40)
    checkpoint: int = 25
    seed: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "SearchConfig":
        data = dict(data)
        data["ga"] = GAConfig(**data.get("ga", {}))
        return cls(**data)

    @property
    def hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ClusterResult:
    """What the search found for one cluster."""

    cluster: int
    size: int
    sample: List[str]           # module hashes the GA judged on
    holdout: List[str]          # module hashes for the report (may be empty for tiny clusters)
    sequence: PassSequence      # catalog indices
    fitness: float              # mean reduction on the sample
    history: List[Tuple[float, float]] = field(default_factory=list)
    rejected: List[PassSequence] = field(default_factory=list)  # winners that were not deterministic
    evaluations: int = 0        # (module, sequence) pairs measured
    passes: int = 0             # pass executions
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ClusterResult":
        data = dict(data)
        data["sequence"] = tuple(data["sequence"])
        data["history"] = [tuple(h) for h in data["history"]]
        data["rejected"] = [tuple(r) for r in data["rejected"]]
        return cls(**data)


def cluster_autophase(autophase: np.ndarray, k: int, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """k-means on log1p-scaled Autophase vectors.

    Args:
        autophase: int (N, 56).
    Returns:
        labels int64 (N,) in [0, k), centers float64 (k, 56) in log1p space. Clusters are numbered by
        decreasing size (ties: by the smallest member index), so numbering does not depend on k-means' order.
    """
    from sklearn.cluster import KMeans

    x = np.log1p(np.maximum(np.asarray(autophase, dtype=np.float64), 0))
    if len(x) < k:
        raise ValueError(f"cannot make {k} clusters from {len(x)} modules")
    model = KMeans(n_clusters=k, random_state=seed, n_init=4).fit(x)
    labels = model.labels_.astype(np.int64)
    sizes = np.bincount(labels, minlength=k)
    first = np.array([np.flatnonzero(labels == c)[0] for c in range(k)])
    order = sorted(range(k), key=lambda c: (-sizes[c], first[c]))
    rename = np.empty(k, dtype=np.int64)
    rename[order] = np.arange(k)
    return rename[labels], model.cluster_centers_[order]


def choose_samples(members: Sequence[str], instruction_counts: Dict[str, int], config: SearchConfig,
                   cluster: int) -> Tuple[List[str], List[str]]:
    """Seeded GA sample and report holdout of one cluster's members."""
    rng = np.random.default_rng([config.seed, cluster])
    members = sorted(members)
    small = [s for s in members if instruction_counts[s] <= config.max_instructions]
    if len(small) >= config.sample:
        sample = [small[i] for i in sorted(rng.choice(len(small), config.sample, replace=False))]
    else:
        # Too few modules within the size bound: the smallest larger ones fill in while the sample stays within
        # half a full sample's instruction budget (a cluster of 100,000-instruction modules would
        # otherwise cost hours), and at least one module.
        budget = config.sample * config.max_instructions / 2 - sum(instruction_counts[s] for s in small)
        sample = list(small)
        for s in sorted((s for s in members if s not in set(small)), key=lambda s: (instruction_counts[s], s)):
            if len(sample) >= config.sample or (sample and instruction_counts[s] > budget):
                break
            sample.append(s)
            budget -= instruction_counts[s]
    rest = [s for s in members if s not in set(sample)]
    holdout = [rest[i] for i in sorted(rng.choice(len(rest), min(config.holdout, len(rest)), replace=False))]
    return sorted(sample), holdout


def is_deterministic(sequence: PassSequence, modules: Sequence[Module], engine: Engine,
                     expected: Optional[np.ndarray] = None) -> bool:
    """True if two independent runs of ``sequence`` give the same Autophase vectors on every module (and the
    instruction counts ``expected``, int (N,), if given). A module that fails counts as not deterministic."""
    pipeline = sequence_pipeline(sequence)
    runs = []
    for _ in range(2):
        features, errors = engine.autophase_after([m.bitcode for m in modules], [pipeline],
                                                  names=[m.name for m in modules])
        if any(e is not None for e in errors):
            return False
        runs.append(features[:, 1])
    if not np.array_equal(runs[0], runs[1]):
        return False
    return expected is None or np.array_equal(runs[0][:, TOTAL_INSTS], expected)


def search_cluster(cluster: int, size: int, sample: Sequence[Module], holdout: Sequence[str],
                   config: SearchConfig, engine: Engine) -> ClusterResult:
    """GA on one cluster's sample, then the determinism check on the winner (falling back down the ranking)."""
    start = time.monotonic()
    cache = FitnessCache(sample, engine, checkpoint=config.checkpoint)
    ga = dataclasses.replace(config.ga, seed=config.ga.seed * 1000 + cluster)
    result = genetic_search(cache, ga)
    rejected: List[PassSequence] = []
    chosen: Optional[Tuple[PassSequence, float]] = None
    for sequence, fitness in result.ranked:
        if is_deterministic(sequence, sample, engine, cache.counts([sequence])[0]):
            chosen = (sequence, fitness)
            break
        rejected.append(sequence)
    if chosen is None:
        raise ProbeSetError(f"cluster {cluster}: no sequence of the final population was deterministic")
    return ClusterResult(cluster=cluster, size=size, sample=[m.sha256 for m in sample], holdout=list(holdout),
                         sequence=chosen[0], fitness=float(chosen[1]), history=result.history,
                         rejected=rejected, evaluations=cache.misses, passes=cache.passes_run,
                         seconds=time.monotonic() - start)


def load_bitcode(corpus, shas) -> Dict[str, Module]:
    """Modules of ``corpus`` by hash (one pass over the store)."""
    return {m.sha256: m for m in corpus.iter_modules(only=set(shas))}


def search_probes(corpus, shas: Sequence[str], out_dir: os.PathLike, config: SearchConfig = SearchConfig(), *,
                  engine: Optional[Engine] = None, corpus_description: str = "", name: Optional[str] = None,
                  progress: bool = True) -> Tuple[ProbeSet, List[ClusterResult]]:
    """Search one probe per cluster of ``shas`` (modules of ``corpus``); resumable through ``out_dir``.

    Writes ``out_dir/search-state.jsonl`` (configuration, clustering, then one line per finished cluster);
    rerunning with the same configuration and modules continues from it. Returns the probe set (probe i is
    cluster i's sequence; clusters are numbered by decreasing size) and the per-cluster results.
    """
    engine = engine or default_engine()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = corpus.modules(["sha256", "autophase", "instruction_count"])
    index = {s: i for i, s in enumerate(table.column("sha256").to_pylist())}
    missing = [s for s in shas if s not in index]
    if missing:
        raise ProbeSetError(f"{len(missing)} module hashes are not in {corpus.path} (first: {missing[0]})")
    shas = sorted(set(shas))
    rows = [index[s] for s in shas]
    autophase = np.array(table.column("autophase").to_pylist(), dtype=np.int64)[rows]
    counts = dict(zip(shas, np.array(table.column("instruction_count").to_pylist())[rows].tolist()))
    fingerprint = hashlib.sha256("\n".join(shas).encode()).hexdigest()[:16]
    header = {"config": config.to_dict(), "config_hash": config.hash, "modules": len(shas),
              "modules_hash": fingerprint, "corpus": corpus_description}

    state_path = out_dir / STATE_FILE
    done: Dict[int, ClusterResult] = {}
    if state_path.exists():
        lines = state_path.read_text().splitlines()
        first = json.loads(lines[0]) if lines else {}
        if {k: first.get(k) for k in ("config_hash", "modules_hash")} != \
                {k: header[k] for k in ("config_hash", "modules_hash")}:
            raise ProbeSetError(f"{state_path} belongs to another search (configuration or modules differ); "
                           f"remove it or choose another output directory")
        corpus_description = corpus_description or first.get("corpus", "")
        for line in lines[1:]:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut short by an interruption: that cluster runs again
            if record.get("kind") == "cluster":
                result = ClusterResult.from_dict(record["result"])
                done[result.cluster] = result
    else:
        write_text_atomic(state_path, json.dumps(header) + "\n")

    labels, _ = cluster_autophase(autophase, config.num_probes, config.seed)
    members = [[shas[i] for i in np.flatnonzero(labels == c)] for c in range(config.num_probes)]
    plans = {c: choose_samples(members[c], counts, config, c) for c in range(config.num_probes)}
    todo = [c for c in range(config.num_probes) if c not in done]
    modules = load_bitcode(corpus, [s for c in todo for s in plans[c][0]]) if todo else {}

    bar = _progress(total=config.num_probes, initial=len(done), desc="probe search", enabled=progress)
    with state_path.open("a") as state:
        for c in todo:
            sample, holdout = plans[c]
            result = search_cluster(c, len(members[c]), [modules[s] for s in sample], holdout, config, engine)
            done[c] = result
            state.write(json.dumps({"kind": "cluster", "result": result.to_dict()}) + "\n")
            state.flush()
            bar.set_postfix(fitness=f"{result.fitness:.3f}")
            bar.update(1)
    bar.close()

    results = [done[c] for c in range(config.num_probes)]
    probe_set = ProbeSet(
        name=name or f"searched-p{config.num_probes}-l{config.ga.length}-s{config.seed}",
        sequences=tuple(tuple(PASSES[i].flag for i in r.sequence) for r in results),
        seed=config.seed, corpus=corpus_description,
        search={"method": "k-means clusters + DEAP genetic search per cluster (behavioral_pq.training.probe_search)",
                "config": config.to_dict(), "modules": len(shas), "modules_hash": fingerprint,
                "cluster_sizes": [r.size for r in results],
                "seconds": round(sum(r.seconds for r in results), 1),
                "rejected_nondeterministic": sum(len(r.rejected) for r in results)})
    return probe_set, results


def _progress(total: int, desc: str, enabled: bool, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="cluster", disable=not enabled, leave=False)
