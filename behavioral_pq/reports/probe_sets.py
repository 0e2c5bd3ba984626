"""Probe sets side by side: what a spectrum costs and what it is worth, with no pretraining in the way.

Each probe set is judged by the raw-spectrum baseline (the P x 56 spectrum flattened, fed to the downstream
estimators): best pass of the module as built (Top-1), -Oz benefit (MAE, points) and 5-NN Top-1, on one
seeded sample of labelled modules of a split corpus, small and real programs reported apart. Cost is pass
executions per spectrum and spectrum wall time per module by size bucket (1 worker; 2 workers for modules over
5,000 instructions), measured in the same run on the same modules.

Every candidate's rows come from one measurement: the union of all the candidates' probes is run as one prefix
tree, so truncated probes (prefixes) and subsets cost nothing extra and every set sees identical Autophase rows.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Union

import numpy as np

from behavioral_pq.artifacts import versions, write_json_atomic, write_text_atomic
from behavioral_pq.core.engine import Engine
from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_bucket
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.probes import ProbeSet
from behavioral_pq.embedding.spectrum import log_relative, spectra
from behavioral_pq.reports.downstream import EvaluationConfig, _classify, _regress
from behavioral_pq.tasks.estimators import knn_top1
from behavioral_pq.training.genetic import TOTAL_INSTS

#: Labelled modules drawn per split, per program kind.
DEFAULT_SAMPLE = {"train": 1000, "valid": 200, "test": 400}


def subset(probes: ProbeSet, count: Optional[int] = None, length: Optional[int] = None) -> ProbeSet:
    """The first ``count`` probes of a set, each cut to its first ``length`` passes (a candidate that costs no
    extra measurement next to the full set)."""
    sequences = tuple(s[:length] if length else s for s in probes.sequences[:count])
    suffix = (f"[:{count}]" if count else "") + (f"[l{length}]" if length else "")
    return replace(probes, name=probes.name + suffix, sequences=sequences)


def choose_modules(corpus: Corpus, sample: Dict[str, int], max_instructions: int, seed: int) -> Dict[str, list]:
    """Labelled, split modules up to ``max_instructions``: ``sample[split]`` per program kind (all of a kind when
    it has fewer), seeded; {split: [sha256, ...]}."""
    labels = set(corpus.labels().column("sha256").to_pylist())
    assigned = corpus.store.splits()
    sizes = dict(zip(*corpus.modules(["sha256", "instruction_count"]).to_pydict().values()))
    kinds = corpus.program_kinds()
    rng = np.random.default_rng(seed)
    chosen: Dict[str, list] = {}
    for split, count in sample.items():
        picked = []
        for kind in ("small", "real"):
            pool = sorted(s for s in labels if assigned.get(s) == split and kinds.get(s) == kind
                          and sizes[s] <= max_instructions)
            picked += [pool[i] for i in sorted(rng.choice(len(pool), min(count, len(pool)), replace=False))]
        chosen[split] = sorted(picked)
    return chosen


def _timing(modules: list, probes: ProbeSet, per_bucket: int, say: Callable[[str], None]) -> dict:
    """Spectrum seconds per module by size bucket, median over up to ``per_bucket`` modules each."""
    by_bucket: Dict[str, list] = {}
    for module in modules:
        by_bucket.setdefault(size_bucket(module.instruction_count), []).append(module)
    out = {}
    for bucket in BUCKET_NAMES:
        chosen = sorted(by_bucket.get(bucket, []), key=lambda m: m.sha256)[:per_bucket]
        if not chosen:
            continue
        workers = 2 if bucket in ("5k-50k", ">50k") else 1
        say(f"timing {probes.name}: {len(chosen)} modules {bucket}, {workers} worker(s)")
        seconds = []
        with Engine(workers) as engine:
            spectra(chosen[:1], probes, engine=engine, cache=False)   # workers started, pipelines parsed
            for module in chosen:
                start = time.perf_counter()
                spectra([module], probes, engine=engine, cache=False)
                seconds.append(time.perf_counter() - start)
        out[bucket] = {"modules": len(chosen), "workers": workers, "median_s": float(np.median(seconds)),
                       "mean_s": float(np.mean(seconds))}
    return out


def compare_probe_sets(store: Union[str, os.PathLike], candidates: Sequence[ProbeSet],
                       out: Union[str, os.PathLike], *, sample: Optional[Dict[str, int]] = None,
                       max_instructions: int = 20_000, timing_per_bucket: int = 6, seeds: Sequence[int] = (0, 1, 2),
                       seed: int = 0, workers: Optional[int] = None,
                       progress: Optional[Callable[[str], None]] = None) -> dict:
    """Judge ``candidates`` (the first is the baseline of every ratio); write ``out/report.json`` and
    ``out/report.md``."""
    say = progress or (lambda line: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"candidate names must differ: {names}")
    corpus = Corpus(store)
    chosen = choose_modules(corpus, sample or DEFAULT_SAMPLE, max_instructions, seed)
    everything = sorted({s for shas in chosen.values() for s in shas})
    say(f"{len(everything)} modules: " + ", ".join(f"{k} {len(v)}" for k, v in chosen.items()))
    modules = {m.sha256: m for m in corpus.iter_modules(only=set(everything))}
    kinds = corpus.program_kinds()
    labels = corpus.labels().to_pydict()
    row_of = {s: i for i, s in enumerate(labels["sha256"])}

    union = list(dict.fromkeys(s for p in candidates for s in p.sequences))
    column = {s: i for i, s in enumerate(union)}
    union_set = ProbeSet("union", tuple(union))
    say(f"measuring {len(union)} distinct probes ({union_set.pass_executions} passes per module)")
    engine = Engine(workers)
    try:
        batch = spectra([modules[s] for s in everything], union_set, engine=engine, progress=progress is not None)
    finally:
        engine.close()
    ok = {s for s, e in zip(everything, batch.errors) if e is None}
    features = {s: batch.autophase[i] for i, s in enumerate(everything)}
    chosen = {split: [s for s in shas if s in ok] for split, shas in chosen.items()}

    def labels_of(shas):
        counts = np.array([labels["pass_counts"][row_of[s]] for s in shas], np.int64)
        sets = [np.flatnonzero(r == r.min()).tolist() for r in counts]
        ic = np.array([modules[s].instruction_count for s in shas], np.float64)
        oz = np.array([labels["oz_count"][row_of[s]] for s in shas], np.float64)
        return sets, np.where(ic > 0, (ic - oz) / np.maximum(ic, 1), 0.0)

    targets = {split: labels_of(shas) for split, shas in chosen.items()}
    test_kinds = np.array([kinds.get(s, "small") for s in chosen["test"]])
    config = EvaluationConfig(seeds=tuple(seeds))
    baseline = candidates[0]
    report = {"store": str(Path(store).resolve()), "versions": versions(), "seeds": list(seeds),
              "max_instructions": max_instructions,
              "modules": {split: {kind: int(sum(kinds.get(s) == kind for s in shas)) for kind in ("small", "real")}
                          for split, shas in chosen.items()},
              "failed": len(everything) - len(ok), "candidates": []}
    for probes in candidates:
        cols = [column[s] for s in probes.sequences]
        say(f"judging {probes.name} (P={probes.num_probes})")

        def raw(shas):
            rows = np.stack([features[s] for s in shas])                          # (N, 1 + U, 56)
            values = log_relative(rows[:, :1], rows[:, 1:][:, cols])              # (N, P, 56)
            return values.reshape(len(shas), -1)

        X = {split: raw(shas) for split, shas in chosen.items()}
        sets = {split: t[0] for split, t in targets.items()}
        oz = {split: t[1] for split, t in targets.items()}
        best = _classify("raw-spectrum", X, sets, 124, config)
        mae = _regress("raw-spectrum", X, oz, config)
        entry = {"name": probes.name, "hash": probes.hash, "num_probes": probes.num_probes,
                 "length": probes.length, "pass_executions": probes.pass_executions,
                 "pass_ratio": baseline.pass_executions / probes.pass_executions,
                 "best_pass_top1": best["top1"], "oz_mae_points": mae["mae"],
                 "knn5_top1": knn_top1(X["train"], sets["train"], X["test"], sets["test"], num_classes=124, k=5),
                 "by_kind": {}}
        test_rows = np.stack([features[s] for s in chosen["test"]])
        ic0 = np.maximum(test_rows[:, 0, TOTAL_INSTS], 1).astype(np.float64)
        reductions = (ic0[:, None] - test_rows[:, 1:][:, cols, TOTAL_INSTS]) / ic0[:, None]
        entry["best_probe_reduction"] = float(reductions.max(axis=1).mean())
        for kind in ("small", "real"):
            mask = test_kinds == kind
            if not mask.any():
                continue
            scores, predictions = best["_scores"][mask], mae["_predictions"][mask]
            labels_k = [t for t, m in zip(sets["test"], mask) if m]
            entry["by_kind"][kind] = {
                "modules": int(mask.sum()),
                "best_pass_top1": float(np.mean([int(np.argmax(r)) in t for r, t in zip(scores, labels_k)])),
                "oz_mae_points": float(np.abs(predictions - oz["test"][mask]).mean() * 100),
                "knn5_top1": knn_top1(X["train"], sets["train"], X["test"][mask], labels_k, num_classes=124, k=5),
                "best_probe_reduction": float(reductions[mask].max(axis=1).mean())}
        entry["timing"] = _timing([modules[s] for s in chosen["test"]], probes, timing_per_bucket, say)
        report["candidates"].append(entry)
    base_timing = report["candidates"][0]["timing"]
    for entry in report["candidates"]:
        for bucket, t in entry["timing"].items():
            if bucket in base_timing:
                t["speedup"] = base_timing[bucket]["median_s"] / max(t["median_s"], 1e-9)
    write_json_atomic(out / "report.json", report, indent=2)
    write_text_atomic(out / "report.md", markdown(report))
    return report


def _pm(value: dict, digits: int = 1, scale: float = 1.0) -> str:
    return f"{value['mean'] * scale:.{digits}f} ± {value['std'] * scale:.{digits}f}"


def markdown(report: dict) -> str:
    """The comparison as Markdown tables."""
    m = report["modules"]
    lines = ["# Probe sets compared by the raw-spectrum baseline", "",
             f"Modules (labelled, at most {report['max_instructions']:,} instructions; small / real): "
             + ", ".join(f"{split} {v['small']} / {v['real']}" for split, v in m.items())
             + f"; {report['failed']} failed to measure. Seeds {report['seeds']} (mean ± std).", "",
             "| probe set | P | L | passes / spectrum | fewer passes | best pass Top-1 % | -Oz MAE (points) "
             "| 5-NN Top-1 % | best-probe reduction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report["candidates"]:
        lines.append(f"| {c['name']} | {c['num_probes']} | {c['length']} | {c['pass_executions']:,} | "
                     f"{c['pass_ratio']:.2f}x | {_pm(c['best_pass_top1'], scale=100)} | {_pm(c['oz_mae_points'], 2)} "
                     f"| {c['knn5_top1'] * 100:.1f} | {c['best_probe_reduction']:.3f} |")
    lines += ["", "## By program kind (test split, seed 0)", "",
              "| probe set | kind | modules | best pass Top-1 % | -Oz MAE | 5-NN Top-1 % | best-probe reduction |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for c in report["candidates"]:
        for kind, k in c["by_kind"].items():
            lines.append(f"| {c['name']} | {kind} | {k['modules']} | {k['best_pass_top1'] * 100:.1f} | "
                         f"{k['oz_mae_points']:.2f} | {k['knn5_top1'] * 100:.1f} | {k['best_probe_reduction']:.3f} |")
    lines += ["", "## Spectrum wall time per module (median; 1 worker, 2 workers from 5k instructions)", "",
              "| probe set | " + " | ".join(BUCKET_NAMES) + " |", "|---|" + "---:|" * len(BUCKET_NAMES)]
    for c in report["candidates"]:
        cells = []
        for bucket in BUCKET_NAMES:
            t = c["timing"].get(bucket)
            cells.append(f"{t['median_s'] * 1000:.0f} ms ({t.get('speedup', 1):.2f}x, n={t['modules']})" if t else "")
        lines.append(f"| {c['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
