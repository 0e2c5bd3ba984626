"""Probe-search benchmark: fitness evaluation throughput, and the spectrum cost of a probe set.

    python bench/spectra/bench_search.py [--store STORE] [--modules 16] [--generations 10] [--spectrum-modules 60]

(1) One genetic search (same seed, same modules, same GA settings) with three fitness evaluators:
    - naive: one engine call per individual (all modules, one sequence), nothing remembered;
    - batched: the population's new individuals in one engine call, cached by (module, sequence);
    - tree: batched + cached + prefix-tree evaluation with prefix states kept every --checkpoint passes.
    All three must find the same sequence with the same fitness history (asserted). Throughput is
    (module, sequence) evaluations per second of wall time, where naive counts every evaluation it makes.
(2) Spectrum cost per module (Engine(workers=1).autophase_after, the whole probe set) of the default probe set
    against the provisional random set, on the same modules, alternating to share machine noise.

Modules: a seeded sample of the store's pretraining modules up to 5,000 instructions, as the probe search draws
them (default store: /work/corpora/stores/main), or the package's example programs without a store.
Results: search.{json,md} in --out (default bench/spectra/results).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import List

import numpy as np

import behavioral_pq as bpq
from behavioral_pq.core._native_loader import LLVM_VERSION
from behavioral_pq.core.catalog import sequence_pipeline
from behavioral_pq.core.engine import Engine
from behavioral_pq.embedding.probes import PROVISIONAL_PROBES, load_probes
from behavioral_pq.training.genetic import TOTAL_INSTS, FitnessCache, GAConfig, genetic_search

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

DEFAULT_STORE = Path("/work/corpora/stores/main")


class NaiveFitness:
    """One engine call per sequence, nothing cached: the baseline."""

    def __init__(self, modules, engine):
        self.modules, self.engine = modules, engine
        self.original = np.array([max(1, m.instruction_count) for m in modules], dtype=np.float64)
        self.misses = 0

    def fitness(self, sequences) -> np.ndarray:
        out = []
        for seq in sequences:
            features, errors = self.engine.autophase_after([m.bitcode for m in self.modules],
                                                           [sequence_pipeline(seq)])
            counts = np.array([features[n, 1, TOTAL_INSTS] if errors[n] is None else m.instruction_count
                               for n, m in enumerate(self.modules)], dtype=np.float64)
            self.misses += len(self.modules)
            out.append(((self.original - counts) / self.original).mean())
        return np.array(out)


def sample_modules(store: Path, count: int, seed: int) -> List[bpq.Module]:
    if not store.exists():
        return [bpq.load_module(p) for p in sorted(common.EXAMPLES.glob("*.c"))][:count]
    from behavioral_pq.corpus import Corpus

    corpus = Corpus(store)
    table = corpus.modules(["sha256", "instruction_count"])
    sizes = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist()))
    small = [s for s in corpus.pretraining() if sizes[s] <= 5000]
    rng = np.random.default_rng(seed)
    chosen = {small[i] for i in rng.choice(len(small), count, replace=False)}
    return sorted(corpus.iter_modules(only=chosen), key=lambda m: m.name)


def bench_fitness(modules, config: GAConfig, checkpoint: int) -> dict:
    rows = {}
    with Engine(workers=2) as engine:
        engine.autophase_after([m.bitcode for m in modules], ["function(sroa)"])  # start the workers
        results = {}
        for name, make in (("naive", lambda: NaiveFitness(modules, engine)),
                           ("batched", lambda: FitnessCache(modules, engine, tree=False)),
                           ("tree", lambda: FitnessCache(modules, engine, checkpoint=checkpoint))):
            evaluator = make()
            start = time.perf_counter()
            results[name] = genetic_search(evaluator, config)
            seconds = time.perf_counter() - start
            rows[name] = {"seconds": seconds, "evaluations": evaluator.misses,
                          "evaluations_per_second": evaluator.misses / seconds,
                          "passes": getattr(evaluator, "passes_run", evaluator.misses * config.length)}
    for name in ("batched", "tree"):
        assert results[name].best == results["naive"].best, name
        assert results[name].history == results["naive"].history, name
    for name in rows:
        rows[name]["speedup_vs_naive"] = rows["naive"]["seconds"] / rows[name]["seconds"]
    return {"best_fitness": results["tree"].fitness, "rows": rows}


def bench_spectrum(modules, rounds: int = 1) -> dict:
    sets = {"default": load_probes(), "provisional": load_probes(PROVISIONAL_PROBES)}
    seconds = {k: [] for k in sets}
    with Engine(workers=1) as engine:
        engine.autophase_after([modules[0].bitcode], ["function(sroa)"])
        for _ in range(rounds):
            for m in modules:
                for key, probes in sets.items():
                    start = time.perf_counter()
                    engine.autophase_after([m.bitcode], probes.pipelines())
                    seconds[key].append(time.perf_counter() - start)
    out = {key: {"name": sets[key].name, "hash": sets[key].hash[:16], "P": sets[key].num_probes,
                 "L": sets[key].length, "median_seconds": float(np.median(v)), "mean_seconds": float(np.mean(v))}
           for key, v in seconds.items()}
    out["ratio_median"] = out["default"]["median_seconds"] / out["provisional"]["median_seconds"]
    out["ratio_mean"] = out["default"]["mean_seconds"] / out["provisional"]["mean_seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE)
    parser.add_argument("--modules", type=int, default=16, help="GA sample size (16)")
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--generations", type=int, default=10)
    parser.add_argument("--checkpoint", type=int, default=25)
    parser.add_argument("--spectrum-modules", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    modules = sample_modules(args.store, args.modules, args.seed)
    config = GAConfig(length=50, population=args.population, generations=args.generations, seed=args.seed)
    fitness = bench_fitness(modules, config, args.checkpoint)
    spectrum_modules = sample_modules(args.store, args.spectrum_modules, args.seed + 1)
    spectrum = bench_spectrum(spectrum_modules)
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "llvm": LLVM_VERSION},
              "modules": {"count": len(modules), "instructions": sorted(m.instruction_count for m in modules),
                          "source": str(args.store) if args.store.exists() else "package examples"},
              "ga": config.__dict__, "checkpoint": args.checkpoint, "fitness": fitness,
              "spectrum": {"modules": len(spectrum_modules), **spectrum}}
    common.write_json(args.out / "search.json", result)
    lines = [common.markdown_table(
        ["evaluator", "seconds", "evaluations", "evaluations/s", "pass executions", "speedup vs naive"],
        [[name, f"{row['seconds']:.1f}", f"{row['evaluations']:,}", f"{row['evaluations_per_second']:.0f}",
          f"{row['passes']:,}", f"{row['speedup_vs_naive']:.2f}x"] for name, row in fitness["rows"].items()]), ""]
    lines.append(common.markdown_table(
        ["probe set", "P", "L", "median s/module", "mean s/module"],
        [[s["name"], s["P"], s["L"], f"{s['median_seconds']:.3f}", f"{s['mean_seconds']:.3f}"]
         for s in (spectrum["default"], spectrum["provisional"])]))
    lines.append(f"\ndefault / provisional: median {spectrum['ratio_median']:.2f}, mean {spectrum['ratio_mean']:.2f}")
    common.write_text(args.out / "search.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
