"""Corpus benchmark: (1) build throughput and peak memory, (2) labelling vs one opt-19 process per pass.

    python bench/corpus/bench_corpus.py --sources DIR [--limit 10000] [--label-modules 60] [--workers 2]

(1) `build_corpus` over the first --limit inputs of DIR (sorted), with labels, into a fresh store under
    bench/.cache; the memory of the whole process tree (driver, pool workers, engine workers, clang) is sampled
    every 0.5 s, and reported at 10/50/90/100% of the build to show it stays flat.
(2) On --label-modules modules of that store (seeded sample), in the same run and with the same parallelism:
    (a) the engine: `Engine(workers=W).autophase_after(bitcodes, LABEL_PIPELINES)` (124 passes + Oz + O3);
    (b) one `opt-19 -passes=P in.bc -o out.bc` per (module, pipeline), W at a time, instruction count of the
        output counted in-process. Counts of (a) and (b) are compared (O3 excluded: opt adds the host's
        TargetMachine, the engine runs without one by design).
Results: corpus.{json,md} in --out (default bench/corpus/results).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

import numpy as np
import psutil

from behavioral_pq.core import _native as native
from behavioral_pq.core.engine import Engine
from behavioral_pq.core.toolchain import find_tool
from behavioral_pq.corpus import Corpus, build_corpus, discover
from behavioral_pq.corpus.labels import LABEL_PIPELINES, NUM_PASSES, TOTAL_INSTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


class MemorySampler(threading.Thread):
    """RSS of this process and all its descendants, every `interval` seconds."""

    def __init__(self, interval: float = 0.5):
        super().__init__(daemon=True)
        self.interval, self.samples, self.stop = interval, [], threading.Event()
        self.progress = 0

    def run(self) -> None:
        me = psutil.Process()
        while not self.stop.is_set():
            total, driver = 0, 0
            for p in [me] + me.children(recursive=True):
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                driver = driver or rss
            self.samples.append((time.time(), self.progress, driver, total))
            self.stop.wait(self.interval)


def bench_build(sources: Path, limit: int, workers: int, cache: Path) -> dict:
    store = cache / "bench-store"
    shutil.rmtree(store, ignore_errors=True)
    items = list(islice(discover([sources], origin=sources.name), limit))
    sampler = MemorySampler()

    def counted():
        for i, item in enumerate(items):
            sampler.progress = i
            yield item

    sampler.start()
    start = time.perf_counter()
    summary = build_corpus(counted(), store, workers=workers, progress=True, total=len(items))
    seconds = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    samples = sampler.samples
    at = {}
    for fraction in (0.1, 0.5, 0.9, 1.0):
        eligible = [s for s in samples if s[1] <= fraction * len(items)]
        at[f"{int(fraction * 100)}%"] = round(max(s[3] for s in eligible) / 2 ** 20, 1) if eligible else None
    return {"inputs": len(items), "seconds": round(seconds, 1), "inputs_per_s": round(len(items) / seconds, 2),
            "summary": summary.to_dict(), "peak_tree_mib": round(max(s[3] for s in samples) / 2 ** 20, 1),
            "peak_driver_mib": round(max(s[2] for s in samples) / 2 ** 20, 1),
            "peak_tree_mib_up_to": at, "store_mib": round(sum(f.stat().st_size for f in store.rglob("*")
                                                             if f.is_file()) / 2 ** 20, 1)}


def opt_counts(bitcode: bytes, workers: int, tmp: Path) -> np.ndarray:
    src = tmp / f"m-{threading.get_ident()}-{time.time_ns()}.bc"
    src.write_bytes(bitcode)
    opt = find_tool("opt")

    def one(pipeline: str) -> int:
        out = subprocess.run([opt, f"-passes={pipeline}", str(src), "-o", "-"], capture_output=True, check=True)
        return native.instruction_count(out.stdout)

    with ThreadPoolExecutor(workers) as pool:
        return np.array(list(pool.map(one, LABEL_PIPELINES)))


def bench_labels(store: Path, count: int, workers: int, seed: int = 0) -> dict:
    modules = Corpus(store).modules(["sha256", "instruction_count", "bitcode"]).to_pylist()
    rng = random.Random(seed)
    sample = rng.sample(modules, min(count, len(modules)))
    bitcodes = [m["bitcode"] for m in sample]
    with Engine(workers=workers) as engine:
        engine.autophase_after(bitcodes[:1], LABEL_PIPELINES[:1])  # start the workers outside the timing
        start = time.perf_counter()
        features, errors = engine.autophase_after(bitcodes, LABEL_PIPELINES)
        ours = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        reference = [opt_counts(bc, workers, Path(tmp)) for bc in bitcodes]
        baseline = time.perf_counter() - start
    agree = total = 0
    for i, ref in enumerate(reference):
        if errors[i] is not None:
            continue
        counts = features[i, 1:, TOTAL_INSTS]
        agree += int((counts[:NUM_PASSES + 1] == ref[:NUM_PASSES + 1]).sum())
        total += NUM_PASSES + 1
    sizes = [m["instruction_count"] for m in sample]
    return {"modules": len(sample), "pipelines": len(LABEL_PIPELINES),
            "instructions_median": float(np.median(sizes)), "instructions_max": int(max(sizes)),
            "engine_s": round(ours, 2), "opt_s": round(baseline, 2),
            "engine_modules_per_s": round(len(sample) / ours, 2), "opt_modules_per_s": round(len(sample) / baseline, 3),
            "speedup": round(baseline / ours, 2), "count_agreement_124_plus_oz": f"{agree}/{total}",
            "errors": sum(e is not None for e in errors)}


def markdown(result: dict) -> str:
    b, l = result["build"], result["labels"]
    lines = [
        f"# Corpus benchmark ({result['date']}, {result['machine']})", "",
        f"Build: {b['inputs']} inputs from `{result['sources']}` with labels, {result['workers']} workers.", "",
        "| measure | value |", "|---|---|",
        f"| build throughput | {b['inputs_per_s']} inputs/s ({b['seconds']} s) |",
        f"| new modules / duplicates / failed | {b['summary']['new_modules']} / {b['summary']['duplicates']} / "
        f"{sum(b['summary']['failures'].values())} |",
        f"| peak RSS, whole process tree | {b['peak_tree_mib']} MiB (driver {b['peak_driver_mib']} MiB) |",
        "| peak RSS up to 10/50/90/100% | " + " / ".join(f"{v}" for v in b["peak_tree_mib_up_to"].values())
        + " MiB |",
        f"| store size | {b['store_mib']} MiB |", "",
        f"Labels: {l['modules']} modules (median {l['instructions_median']:g}, max {l['instructions_max']} "
        f"instructions), {l['pipelines']} pipelines each, same run, {result['workers']} workers each side.", "",
        "| | seconds | modules/s |", "|---|---|---|",
        f"| engine (batched, in-process passes) | {l['engine_s']} | {l['engine_modules_per_s']} |",
        f"| one opt-19 process per pipeline | {l['opt_s']} | {l['opt_modules_per_s']} |",
        f"| **speedup** | **{l['speedup']}x** | |", "",
        f"Instruction counts equal to opt-19's for the 124 passes and -Oz: {l['count_agreement_124_plus_oz']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=Path, required=True, help="directory of C sources (kept outside the repo)")
    parser.add_argument("--limit", type=int, default=10000)
    parser.add_argument("--label-modules", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=common.CACHE)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    result = {"date": time.strftime("%Y-%m-%d"), "machine": common.machine(),
              "sources": args.sources.name, "workers": args.workers}
    result["build"] = bench_build(args.sources, args.limit, args.workers, args.cache)
    print(json.dumps(result["build"], indent=1), file=sys.stderr)
    result["labels"] = bench_labels(args.cache / "bench-store", args.label_modules, args.workers)
    common.write_json(args.out / "corpus.json", result)
    common.write_text(args.out / "corpus.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
