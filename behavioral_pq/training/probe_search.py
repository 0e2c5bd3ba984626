"""The probe search (DESIGN.md section 5): cluster a corpus, find one pass sequence per cluster, check it, report.

1. :func:`cluster_autophase` groups the corpus by its Autophase vectors (k-means on log1p-scaled features,
   seeded, scikit-learn).
2. :func:`search_probes` runs :func:`~behavioral_pq.training.genetic.genetic_search` on a seeded sample of each cluster,
   rejects a winner whose results differ between two runs on the same modules (the next best distinct
   sequence of the final population takes its place), and writes one line per cluster to a state file so an
   interrupted search resumes where it stopped.
3. :func:`probe_report` measures the probe set: per probe its cluster's size, its reduction on modules of the
   cluster it was not searched on, its reduction across a sample of the whole corpus, -Oz on the same modules,
   and the diversity of the set (distances between the probes' reaction vectors).
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

from behavioral_pq.core.catalog import BASELINES, PASSES, sequence_pipeline
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.module import Module
from behavioral_pq.embedding.probes import ProbeSet
from behavioral_pq.embedding.spectrum import log_relative
from behavioral_pq.errors import BPQError
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
        raise BPQError(f"cluster {cluster}: no sequence of the final population was deterministic")
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
        raise BPQError(f"{len(missing)} module hashes are not in {corpus.path} (first: {missing[0]})")
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
            raise BPQError(f"{state_path} belongs to another search (configuration or modules differ); "
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
        state_path.write_text(json.dumps(header) + "\n")

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


def probe_report(corpus, probe_set: ProbeSet, results: Sequence[ClusterResult], shas: Sequence[str], *,
                 corpus_sample: int = 400, seed: int = 0, baseline: Optional[ProbeSet] = None,
                 engine: Optional[Engine] = None, progress: bool = True) -> dict:
    """Measure a searched probe set (see the module docstring). Reductions are mean relative
    instruction-count reductions ``(IC0 - IC) / IC0``; a module that fails counts as 0.

    Returns a JSON-ready dict: ``probes`` (one entry per probe), ``corpus`` (whole-corpus sample summary,
    with ``baseline`` measured the same way if given) and ``diversity``.
    """

    engine = engine or default_engine()
    rng = np.random.default_rng(seed)
    shas = sorted(set(shas))
    picked = [shas[i] for i in sorted(rng.choice(len(shas), min(corpus_sample, len(shas)), replace=False))]
    holdouts = {s for r in results for s in r.holdout}
    modules = load_bitcode(corpus, set(picked) | holdouts)
    oz = BASELINES["Oz"]

    def measure(mods: Sequence[Module], pipelines: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """(reductions float64 (N, K), Autophase int64 (N, 1 + K, 56)); failed modules give 0 reduction."""
        features, errors = engine.autophase_after([m.bitcode for m in mods], list(pipelines),
                                                  names=[m.name for m in mods])
        ic0 = np.array([max(1, m.instruction_count) for m in mods], dtype=np.float64)[:, None]
        reduction = (ic0 - features[:, 1:, TOTAL_INSTS]) / ic0
        failed = np.array([e is not None for e in errors])
        reduction[failed] = 0.0
        return reduction, features

    started = time.monotonic()
    sample_modules = [modules[s] for s in picked]
    pipelines = list(probe_set.pipelines()) + [oz]
    reduction, features = measure(sample_modules, pipelines)
    corpus_seconds = time.monotonic() - started
    probe_reduction, oz_reduction = reduction[:, :-1], reduction[:, -1]
    spectra = log_relative(features[:, :1], features[:, 1:-1])  # (N, P, 56)
    summary = {"modules": len(picked), "oz_mean_reduction": float(oz_reduction.mean()),
               "probe_mean_reduction": float(probe_reduction.mean()),
               "best_probe_mean_reduction": float(probe_reduction.max(axis=1).mean()),
               "modules_where_best_probe_beats_oz": float((probe_reduction.max(axis=1) > oz_reduction).mean()),
               "seconds_per_module": corpus_seconds / max(1, len(picked))}
    diversity = {"searched": _diversity(spectra)}
    if baseline is not None:
        started = time.monotonic()
        base_reduction, base_features = measure(sample_modules, baseline.pipelines())
        summary["baseline"] = {"name": baseline.name, "hash": baseline.hash,
                               "probe_mean_reduction": float(base_reduction.mean()),
                               "best_probe_mean_reduction": float(base_reduction.max(axis=1).mean()),
                               "seconds_per_module": (time.monotonic() - started) / max(1, len(picked))}
        diversity["baseline"] = _diversity(log_relative(base_features[:, :1], base_features[:, 1:]))

    probes = []
    bar = _progress(total=len(results), desc="probe report", enabled=progress)
    for i, r in enumerate(results):
        entry = {"probe": i, "cluster": r.cluster, "cluster_size": r.size, "sequence": list(probe_set.sequences[i]),
                 "search_fitness": r.fitness, "search_seconds": round(r.seconds, 2),
                 "rejected_nondeterministic": len(r.rejected),
                 "corpus_reduction": float(probe_reduction[:, i].mean()),
                 "corpus_oz_reduction": summary["oz_mean_reduction"],
                 "nearest_probe_distance": diversity["searched"]["nearest"][i]}
        if r.holdout:
            held, _ = measure([modules[s] for s in r.holdout], [probe_set.pipelines()[i], oz])
            entry.update(cluster_holdout=len(r.holdout), cluster_reduction=float(held[:, 0].mean()),
                         cluster_oz_reduction=float(held[:, 1].mean()))
        probes.append(entry)
        bar.update(1)
    bar.close()
    for d in diversity.values():
        d.pop("nearest")
    return {"probe_set": probe_set.name, "hash": probe_set.hash, "corpus": summary, "diversity": diversity,
            "search_seconds": round(sum(r.seconds for r in results), 1),
            "evaluations": int(sum(r.evaluations for r in results)),
            "passes": int(sum(r.passes for r in results)), "probes": probes}


def _diversity(spectra: np.ndarray) -> dict:
    """Pairwise RMS distances between probes' reaction vectors: probe i's vector is its spectrum rows over
    the sample modules, float (N * 56,)."""
    n, p, _ = spectra.shape
    vectors = spectra.transpose(1, 0, 2).reshape(p, -1).astype(np.float64)
    sq = (vectors ** 2).sum(axis=1)
    dist = np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2 * vectors @ vectors.T, 0) / (n * 56))
    upper = dist[np.triu_indices(p, 1)]
    np.fill_diagonal(dist, np.inf)
    return {"pairs": int(upper.size), "min": float(upper.min()), "p5": float(np.percentile(upper, 5)),
            "median": float(np.median(upper)), "mean": float(upper.mean()),
            "identical_pairs": int((upper < 1e-9).sum()), "nearest": dist.min(axis=1).tolist()}


def _progress(total: int, desc: str, enabled: bool, initial: int = 0):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="cluster", disable=not enabled, leave=False)


__all__ = ["SearchConfig", "ClusterResult", "cluster_autophase", "choose_samples", "is_deterministic",
           "search_cluster", "search_probes", "probe_report", "write_report", "STATE_FILE"]


def write_report(report: dict, probe_set: ProbeSet, out_dir: os.PathLike) -> List[Path]:
    """Write ``report.json``, ``REPORT.md`` and ``report.png`` (per-probe reductions against -Oz) to ``out_dir``."""
    out_dir = Path(out_dir)
    paths = [out_dir / "report.json", out_dir / "REPORT.md", out_dir / "report.png"]
    paths[0].write_text(json.dumps(report, indent=1) + "\n")
    c, d = report["corpus"], report["diversity"]
    search = probe_set.search
    lines = [f"# Probe set `{probe_set.name}`", "",
             f"Content hash `{probe_set.hash[:16]}`, P={probe_set.num_probes}, L={probe_set.length}, "
             f"LLVM {probe_set.llvm_major}, seed {probe_set.seed}.", "",
             f"Corpus: {probe_set.corpus or 'n/a'} ({search.get('modules', '?')} modules).", "",
             f"Search: {report['search_seconds'] / 60:.1f} min on this machine, {report['evaluations']:,} "
             f"(module, sequence) evaluations, {report['passes']:,} pass executions; "
             f"{search.get('rejected_nondeterministic', 0)} winners rejected as non-deterministic.", "",
             "## Whole corpus", "",
             f"Sample of {c['modules']} modules drawn from the whole corpus (seeded). Reduction = mean relative "
             "instruction-count reduction (IC0 - IC) / IC0.", "",
             "| | mean reduction of a probe | mean best-probe reduction | -Oz | spectrum seconds / module |",
             "|---|---|---|---|---|",
             f"| searched | {c['probe_mean_reduction']:.3f} | {c['best_probe_mean_reduction']:.3f} | "
             f"{c['oz_mean_reduction']:.3f} | {c['seconds_per_module']:.3f} |"]
    if "baseline" in c:
        b = c["baseline"]
        lines.append(f"| {b['name']} | {b['probe_mean_reduction']:.3f} | {b['best_probe_mean_reduction']:.3f} | "
                     f"{c['oz_mean_reduction']:.3f} | {b['seconds_per_module']:.3f} |")
    lines += ["", f"Modules where the best probe beats -Oz: {c['modules_where_best_probe_beats_oz']:.1%}.", "",
              "## Diversity", "",
              "RMS distance between two probes' reaction vectors (their spectrum rows over the corpus sample).", "",
              "| set | min | 5th percentile | median | mean | identical pairs |", "|---|---|---|---|---|---|"]
    for key, v in d.items():
        lines.append(f"| {key} | {v['min']:.4f} | {v['p5']:.4f} | {v['median']:.4f} | {v['mean']:.4f} | "
                     f"{v['identical_pairs']} |")
    lines += ["", "## Probes", "",
              "Cluster reduction is measured on up to "
              f"{max((p.get('cluster_holdout', 0) for p in report['probes']), default=0)} modules of the cluster "
              "that the search did not see; search fitness is on the GA sample.", "",
              "| probe | cluster size | search fitness | cluster reduction | cluster -Oz | corpus reduction | "
              "nearest probe | first passes |", "|---|---|---|---|---|---|---|---|"]
    for p in report["probes"]:
        cluster = (f"{p['cluster_reduction']:.3f} | {p['cluster_oz_reduction']:.3f}" if "cluster_reduction" in p
                   else "n/a | n/a")
        lines.append(f"| {p['probe']} | {p['cluster_size']} | {p['search_fitness']:.3f} | {cluster} | "
                     f"{p['corpus_reduction']:.3f} | {p['nearest_probe_distance']:.3f} | "
                     f"{' '.join(p['sequence'][:5])} ... |")
    paths[1].write_text("\n".join(lines) + "\n")
    _plot_report(report, paths[2])
    return paths


def _plot_report(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = report["probes"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    x = np.arange(len(probes))
    axes[0].bar(x, [p.get("cluster_reduction", np.nan) for p in probes], color="tab:blue",
                label="probe on its cluster (holdout)")
    axes[0].plot(x, [p.get("cluster_oz_reduction", np.nan) for p in probes], "k.", label="-Oz on the same modules")
    axes[0].plot(x, [p["corpus_reduction"] for p in probes], "r_", markersize=8, label="probe on the whole corpus")
    axes[0].set_xlabel("probe (= cluster, by decreasing size)")
    axes[0].set_ylabel("mean instruction-count reduction")
    axes[0].legend(fontsize=8)
    axes[1].hist([p["nearest_probe_distance"] for p in probes], bins=30, color="tab:green")
    axes[1].set_xlabel("RMS distance to the nearest other probe's reaction vector")
    axes[1].set_ylabel("probes")
    fig.suptitle(f"{report['probe_set']}: per-probe reduction and diversity")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
