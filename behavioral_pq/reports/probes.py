"""The probe-set report: per probe its cluster's size, its reduction on modules of the cluster it was not searched
on, its reduction across a sample of the whole corpus, -Oz on the same modules, and the diversity of the set
(distances between the probes' reaction vectors). ``bpq probes search`` writes it next to the probe set.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.artifacts import write_text_atomic
from behavioral_pq.core.catalog import BASELINES
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.module import Module
from behavioral_pq.embedding.probes import ProbeSet
from behavioral_pq.embedding.spectrum import log_relative
from behavioral_pq.reports.plotting import pyplot, save_figure
from behavioral_pq.training.genetic import TOTAL_INSTS
from behavioral_pq.training.probe_search import ClusterResult, load_bitcode


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
    from tqdm import tqdm

    bar = tqdm(total=len(results), desc="probe report", unit="cluster", disable=not progress, leave=False)
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


def write_report(report: dict, probe_set: ProbeSet, out_dir: os.PathLike) -> List[Path]:
    """Write ``report.json``, ``REPORT.md`` and ``report.png`` (per-probe reductions against -Oz) to ``out_dir``."""
    out_dir = Path(out_dir)
    paths = [out_dir / "report.json", out_dir / "REPORT.md", out_dir / "report.png"]
    write_text_atomic(paths[0], json.dumps(report, indent=1) + "\n")
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
    write_text_atomic(paths[1], "\n".join(lines) + "\n")
    _plot_report(report, paths[2])
    return paths


def _plot_report(report: dict, path: Path) -> None:
    plt = pyplot()
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
    save_figure(fig, path)
