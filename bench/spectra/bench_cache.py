"""What the spectrum cache saves: ``embed`` of the same module with the cache off, the first time with it on (the
probes run and the entry is written) and the second time (read back), in one run on the same modules.

    python bench/spectra/bench_cache.py [--out DIR]

Modules: the package's example programs and a larger one the benchmark writes (a chain of small functions).
Results: cache.{json,md} in --out (default bench/spectra/results).
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

os.environ["BPQ_CACHE_DIR"] = tempfile.mkdtemp(prefix="bpq-bench-cache-")

import behavioral_pq as bpq  # noqa: E402
from behavioral_pq.embedding.cache import SpectrumCache  # noqa: E402
from behavioral_pq.embedding.encoder import load_encoder  # noqa: E402
from behavioral_pq.embedding.spectrum import spectra  # noqa: E402


def large_program(path: Path, functions: int = 60) -> Path:
    body = [f"int f{i}(int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) s += a[k] * {i % 7 + 1} "
            f"- (s >> {i % 5 + 1}); return s + (n > {i} ? f{i - 1}(a, n - 1) : 0); }}" if i else
            "int f0(int *a, int n) { return n ? a[0] : 0; }" for i in range(functions)]
    path.write_text("\n".join(body) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    encoder = load_encoder()
    with tempfile.TemporaryDirectory() as tmp:
        paths = sorted(common.EXAMPLES.glob("*.c")) + [large_program(Path(tmp) / "chain.c")]
        modules = [bpq.load_module(p) for p in paths]
        rows = []
        for module in modules:
            cache = SpectrumCache(Path(tmp) / "cache" / module.sha256[:8])
            def embed(cache):
                batch = spectra([module], cache=cache)
                return encoder.embed_spectra(batch.spectra, batch.autophase[:, 0])

            off = common.median_seconds(lambda: embed(False), 3)
            start = time.perf_counter()
            embed(cache)
            first = time.perf_counter() - start
            second = common.median_seconds(lambda: embed(cache), 3)
            rows.append({"module": module.name, "instructions": module.instruction_count, "cache_off_s": off,
                         "first_s": first, "second_s": second, "speedup_second_vs_off": off / second})
    common.write_json(args.out / "cache.json", rows)
    table = common.markdown_table(
        ["module", "instructions", "cache off (s)", "first call (s)", "second call (s)", "second vs off"],
        [[r["module"], r["instructions"], f"{r['cache_off_s']:.3f}", f"{r['first_s']:.3f}", f"{r['second_s']:.4f}",
          f"{r['speedup_second_vs_off']:.0f}x"] for r in rows], align="lrrrrr")
    common.write_text(args.out / "cache.md", table + "\n")
    print(table)


if __name__ == "__main__":
    main()
