"""Spectrum wall time per module by size bucket: probe sets side by side on the same modules, in one run.

    python bench/spectra/bench_probe_sets.py STORE [--probes A B ...] [--per-bucket 6] [--out DIR]

Default sets: the 100-probe searched set (the baseline every ratio is taken against) and the package default.
Modules: the store's test split, ``--per-bucket`` per size bucket (the first by hash); 1 engine worker below
5,000 instructions, 2 above (as ``bpq probes compare`` times them), cache off, median per bucket. Writes
``probe_sets.json`` in --out (default bench/spectra/results).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--probes", nargs="*", default=["searched-p100-l50-s0", None])
    parser.add_argument("--per-bucket", type=int, default=6)
    parser.add_argument("--max-instructions", type=int, default=50_000)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.reports.probe_sets import _timing

    corpus = Corpus(args.store)
    sizes = common.instruction_counts(corpus)
    test = [s for s in corpus.split("test") if sizes[s] <= args.max_instructions]
    modules = list(corpus.iter_modules(only=set(test)))
    sets = [load_probes(p) for p in args.probes]
    rows = []
    for probes in sets:
        timing = _timing(modules, probes, args.per_bucket, lambda line: print(line, file=sys.stderr))
        rows.append({"probe_set": probes.name, "num_probes": probes.num_probes,
                     "pass_executions": probes.pass_executions, "timing": timing})
    for row in rows:
        for bucket, t in row["timing"].items():
            base = rows[0]["timing"].get(bucket)
            t["speedup"] = base["median_s"] / t["median_s"] if base else None
        print(f"{row['probe_set']}: " + ", ".join(f"{b} {t['median_s'] * 1000:.0f} ms ({t['speedup']:.2f}x)"
                                                  for b, t in row["timing"].items()))
    common.write_json(args.out / "probe_sets.json", {"store": args.store, "sets": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
