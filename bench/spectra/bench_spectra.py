"""Spectrum engine benchmark: (a) this engine vs (b) one opt-19 process per probe vs (c) the in-process floor.

    python bench/spectra/bench_spectra.py [--csmith 44] [--opt-modules 12] [--batch 1000] [--out DIR]

Modules: the package's example programs, Csmith programs (seeded) and generated loop programs of 5k-20k
instructions, built outside the repository under bench/.cache. Probe set: the package default (P=100, L=50).

(a) Engine(workers=1).autophase_after on one module: worker hop, copies re-parsed from bitcode, passes, features.
(b) for each probe, `opt-19 -passes=... in.bc -o out.bc`, then Autophase of out.bc (in-process).
(c) native time_pipelines: only the P pipeline runs, copies made outside the timed region.
Also: throughput of a whole batch with 1 vs 2 workers, a single large module with 1 vs 2 workers, and peak
memory (parent + workers) of a 1,000-module batch. Results: spectra.{json,md} in --out (default
bench/spectra/results).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import behavioral_pq as bpq
from behavioral_pq.core import _native as native
from behavioral_pq.core.engine import Engine
from behavioral_pq.core.toolchain import find_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

BUCKETS = [(0, 200), (200, 1000), (1000, 5000), (5000, 40000)]


def generated_program(functions: int) -> str:
    """Loops, branches and arithmetic in `functions` functions: about 60 instructions each."""
    body = []
    for i in range(functions):
        body.append(
            f"int k{i}(int *a, int n, int s) {{\n"
            f"  for (int j = 0; j < n; j++) {{\n"
            f"    if (a[j] % {i % 7 + 2} == 0) s += a[j] * {i + 3}; else s ^= a[j] >> {i % 5 + 1};\n"
            f"    a[j] = s - j;\n  }}\n"
            f"  return {'k%d(a, n - 1, s)' % (i - 1) if i else 's'};\n}}\n")
    return "".join(body)


def build_modules(cache: Path, csmith: int) -> list:
    cache.mkdir(parents=True, exist_ok=True)
    modules = [bpq.load_module(p) for p in sorted(common.EXAMPLES.glob("*.c"))]
    for seed in range(1, csmith + 1):
        path = cache / f"csmith_{seed}.c"
        if not path.exists():
            args = ["csmith", "--seed", str(seed), "--max-funcs", str(2 + seed % 12), "--no-volatiles"]
            path.write_text(subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout)
        try:
            modules.append(bpq.load_module(path, flags=["-I/usr/include/csmith", "-w"]))
        except bpq.BPQError as exc:
            print(f"skipping {path.name}: {exc}", file=sys.stderr)
    for functions in (90, 170, 330):
        path = cache / f"generated_{functions}.c"
        path.write_text(generated_program(functions))
        modules.append(bpq.load_module(path))
    return modules


def bucket_of(count: int) -> str:
    for lo, hi in BUCKETS:
        if lo <= count < hi:
            return f"{lo}-{hi}"
    return "other"


def opt_per_probe(module, pipelines, workdir: Path) -> float:
    source = workdir / "in.bc"
    module.save(source)
    opt = find_tool("opt")
    start = time.perf_counter()
    for i, pipeline in enumerate(pipelines):
        out = workdir / f"out{i}.bc"
        subprocess.run([opt, f"-passes={pipeline}", str(source), "-o", str(out)], check=True, timeout=600)
        native.autophase(out.read_bytes())
    return time.perf_counter() - start


def peak_rss_mb(engine: Engine) -> float:
    """Parent's peak RSS plus each live worker's peak RSS (VmHWM), in MiB."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for worker in engine._pool:
        status = Path(f"/proc/{worker.proc.pid}/status").read_text()
        total += int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1]) / 1024
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csmith", type=int, default=44, help="Csmith programs (seeds 1..N)")
    parser.add_argument("--opt-modules", type=int, default=12, help="modules also measured with opt-19 (b)")
    parser.add_argument("--batch", type=int, default=1000, help="modules in the memory batch")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    probes = bpq.load_probes()
    pipelines = list(probes.pipelines())
    modules = build_modules(common.CACHE, args.csmith)
    modules.sort(key=lambda m: m.instruction_count)
    print(f"{len(modules)} modules, {modules[0].instruction_count}..{modules[-1].instruction_count} instructions; "
          f"P={probes.num_probes}, L={probes.length}", flush=True)

    rows = []
    with Engine(workers=1) as engine:
        engine.autophase_after([modules[0].bitcode], pipelines[:2])  # start the worker
        opt_every = max(1, len(modules) // max(1, args.opt_modules))
        with tempfile.TemporaryDirectory() as tmp:
            for k, module in enumerate(modules):
                t0 = time.perf_counter()
                _, errors = engine.autophase_after([module.bitcode], pipelines)
                a = time.perf_counter() - t0
                c = native.time_pipelines(module.bitcode, pipelines)[0]
                b = opt_per_probe(module, pipelines, Path(tmp)) if k % opt_every == 0 else None
                rows.append({"module": module.name, "instructions": module.instruction_count, "a": a, "b": b,
                             "c": c, "error": str(errors[0]) if errors[0] else None})
                print(f"  {module.name:22s} {module.instruction_count:6d} insts  a={a * 1e3:8.1f} ms  "
                      f"c={c * 1e3:8.1f} ms  a/c={a / c:5.2f}" + (f"  b/a={b / a:5.1f}" if b else ""), flush=True)

    # Throughput, 1 vs 2 workers: the whole set, and the largest module alone.
    throughput = {}
    largest = modules[-1]
    for workers in (1, 2):
        with Engine(workers=workers) as engine:
            engine.autophase_after([modules[0].bitcode] * workers, pipelines[:2])  # start workers
            t0 = time.perf_counter()
            engine.autophase_after([m.bitcode for m in modules], pipelines)
            whole = time.perf_counter() - t0
            t0 = time.perf_counter()
            engine.autophase_after([largest.bitcode], pipelines)
            single = time.perf_counter() - t0
        throughput[workers] = {"batch_s": whole, "modules_per_s": len(modules) / whole, "largest_s": single}
        print(f"workers={workers}: batch {whole:.1f} s ({len(modules) / whole:.2f} modules/s); "
              f"largest module ({largest.instruction_count} insts) {single:.2f} s", flush=True)

    # Peak memory of a large batch (the smaller half of the set, repeated).
    small = [m for m in modules if m.instruction_count < 1000]
    batch = [small[i % len(small)].bitcode for i in range(args.batch)]
    with Engine(workers=2) as engine:
        t0 = time.perf_counter()
        _, errors = engine.autophase_after(batch, pipelines)
        batch_s = time.perf_counter() - t0
        memory = peak_rss_mb(engine)
    print(f"{args.batch}-module batch: {batch_s:.1f} s, peak RSS {memory:.0f} MiB, "
          f"{sum(e is not None for e in errors)} failures", flush=True)

    summary = summarize(rows, throughput, memory, batch_s, args.batch, len(modules), probes)
    common.write_json(args.out / "spectra.json", {"summary": summary, "rows": rows})
    common.write_text(args.out / "spectra.md", markdown(summary))
    print(markdown(summary))


def summarize(rows, throughput, memory, batch_s, batch_n, n_modules, probes) -> dict:
    buckets = {}
    for lo, hi in BUCKETS:
        sel = [r for r in rows if lo <= r["instructions"] < hi and not r["error"]]
        if not sel:
            continue
        a = [r["a"] for r in sel]
        ratio_ac = [r["a"] / r["c"] for r in sel]
        ratio_ba = [r["b"] / r["a"] for r in sel if r["b"]]
        buckets[f"{lo}-{hi}"] = {
            "modules": len(sel),
            "a_median_ms": 1e3 * statistics.median(a), "a_p90_ms": 1e3 * float(np.percentile(a, 90)),
            "c_median_ms": 1e3 * statistics.median(r["c"] for r in sel),
            "a_over_c_median": statistics.median(ratio_ac), "a_over_c_p90": float(np.percentile(ratio_ac, 90)),
            "b_over_a_median": statistics.median(ratio_ba) if ratio_ba else None, "b_samples": len(ratio_ba)}
    all_ba = [r["b"] / r["a"] for r in rows if r["b"]]
    return {
        "date": time.strftime("%Y-%m-%d"), "machine": common.machine(),
        "llvm": native.LLVM_VERSION, "probe_set": probes.name, "P": probes.num_probes, "L": probes.length,
        "modules": n_modules, "buckets": buckets, "b_over_a_median_all": statistics.median(all_ba),
        "throughput": throughput,
        "speedup_2_workers_batch": throughput[1]["batch_s"] / throughput[2]["batch_s"],
        "speedup_2_workers_largest": throughput[1]["largest_s"] / throughput[2]["largest_s"],
        "batch_modules": batch_n, "batch_s": batch_s, "batch_peak_rss_mib": memory,
        "failures": [r["module"] for r in rows if r["error"]],
    }


def markdown(s: dict) -> str:
    lines = [f"Spectrum engine, {s['date']}, {s['machine']}, LLVM {s['llvm']}, probe set {s['probe_set']} "
             f"(P={s['P']}, L={s['L']}), {s['modules']} modules.", "",
             "| instructions | modules | a median (ms) | a p90 (ms) | c median (ms) | a/c median | a/c p90 | "
             "b/a median (n) |", "|---|---|---|---|---|---|---|---|"]
    for name, b in s["buckets"].items():
        ba = f"{b['b_over_a_median']:.1f} ({b['b_samples']})" if b["b_over_a_median"] else "-"
        lines.append(f"| {name} | {b['modules']} | {b['a_median_ms']:.1f} | {b['a_p90_ms']:.1f} | "
                     f"{b['c_median_ms']:.1f} | {b['a_over_c_median']:.3f} | {b['a_over_c_p90']:.3f} | {ba} |")
    t = s["throughput"]
    lines += ["", f"b/a median over all sampled modules: {s['b_over_a_median_all']:.1f}",
              f"Throughput, whole set: 1 worker {t[1]['modules_per_s']:.2f} modules/s, 2 workers "
              f"{t[2]['modules_per_s']:.2f} modules/s: **{s['speedup_2_workers_batch']:.2f}x**",
              f"Largest module alone: 1 worker {t[1]['largest_s']:.2f} s, 2 workers {t[2]['largest_s']:.2f} s: "
              f"**{s['speedup_2_workers_largest']:.2f}x**",
              f"{s['batch_modules']}-module batch (2 workers): {s['batch_s']:.1f} s, peak RSS parent + workers "
              f"**{s['batch_peak_rss_mib']:.0f} MiB**", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
