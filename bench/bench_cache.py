"""What the spectrum cache saves: ``embed`` of the same module with the cache off, the first time with it on (the
probes run and the entry is written) and the second time (read back), in one run on the same modules.

    python bench/bench_cache.py [--out bench/results]

Modules: the package's example programs and a larger one the benchmark writes (a chain of small functions).
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["BPQ_CACHE_DIR"] = tempfile.mkdtemp(prefix="bpq-bench-cache-")

import behavioral_pq as bpq  # noqa: E402
from behavioral_pq.embedding.cache import SpectrumCache  # noqa: E402
from behavioral_pq.embedding.encoder import load_encoder  # noqa: E402
from behavioral_pq.embedding.spectrum import spectra  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "behavioral_pq" / "data" / "examples"


def large_program(path: Path, functions: int = 60) -> Path:
    body = [f"int f{i}(int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) s += a[k] * {i % 7 + 1} "
            f"- (s >> {i % 5 + 1}); return s + (n > {i} ? f{i - 1}(a, n - 1) : 0); }}" if i else
            "int f0(int *a, int n) { return n ? a[0] : 0; }" for i in range(functions)]
    path.write_text("\n".join(body) + "\n")
    return path


def timed(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    encoder = load_encoder()
    with tempfile.TemporaryDirectory() as tmp:
        paths = sorted(EXAMPLES.glob("*.c")) + [large_program(Path(tmp) / "chain.c")]
        modules = [bpq.load_module(p) for p in paths]
        rows = []
        for module in modules:
            cache = SpectrumCache(Path(tmp) / "cache" / module.sha256[:8])
            def embed(cache):
                batch = spectra([module], cache=cache)
                return encoder.embed_spectra(batch.spectra, batch.autophase[:, 0])

            off = timed(lambda: embed(False))
            start = time.perf_counter()
            embed(cache)
            first = time.perf_counter() - start
            second = timed(lambda: embed(cache))
            rows.append({"module": module.name, "instructions": module.instruction_count, "cache_off_s": off,
                         "first_s": first, "second_s": second, "speedup_second_vs_off": off / second})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| module | instructions | cache off (s) | first call (s) | second call (s) | second vs off |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['module']} | {r['instructions']} | {r['cache_off_s']:.3f} | {r['first_s']:.3f} | "
              f"{r['second_s']:.4f} | {r['speedup_second_vs_off']:.0f}x |" for r in rows]
    (out / "cache.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
