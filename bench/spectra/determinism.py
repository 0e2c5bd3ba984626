"""Is a spectrum the same in every run? N modules x R runs, each run a fresh Python process with fresh engine
workers (1 and 2 workers alternately), every Autophase row compared with the first run's.

    python bench/spectra/determinism.py STORE [--kind real] [--modules 50] [--runs 10] [--probes FILE]
                                              [--max-instructions 30000] [--out DIR]

Modules: a seeded draw of the store's modules of that kind, spread over the size buckets (the largest bucket
that has modules first, so that big programs are in). Writes ``determinism-KIND-PROBESET.json`` in --out (default
bench/spectra/results; per run, per module: rows that differ from run 0 and the features that differ) and prints a
summary; exit status 1 when any row differs.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

RUN = """
import sys, numpy as np
from pathlib import Path
from behavioral_pq.core.engine import Engine
from behavioral_pq.core.module import Module
from behavioral_pq.embedding.spectrum import spectra
folder, probes, workers, out = Path(sys.argv[1]), sys.argv[2] or None, int(sys.argv[3]), sys.argv[4]
modules = [Module(p.read_bytes(), name=p.stem) for p in sorted(folder.glob('*.bc'))]
with Engine(workers) as engine:
    batch = spectra(modules, probes, engine=engine, cache=False)
np.savez(out, autophase=batch.autophase, ok=batch.ok,
         degraded=np.array([repr(d) for d in batch.degraded], dtype=object), allow_pickle=True)
"""


def choose(store: str, kind: str, count: int, max_instructions: int, seed: int):
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_bucket

    corpus = Corpus(store)
    kinds = corpus.program_kinds()
    sizes = common.instruction_counts(corpus)
    pool = sorted(s for s in sizes if kinds.get(s) == kind and sizes[s] <= max_instructions)
    by_bucket = {b: [s for s in pool if size_bucket(sizes[s]) == b] for b in BUCKET_NAMES}
    rng = np.random.default_rng(seed)
    for bucket in by_bucket.values():
        rng.shuffle(bucket)
    chosen = []
    while len(chosen) < count and any(by_bucket.values()):   # round robin over buckets, largest first
        for bucket in reversed(BUCKET_NAMES):
            if by_bucket[bucket] and len(chosen) < count:
                chosen.append(by_bucket[bucket].pop())
    modules = {m.sha256: m for m in corpus.iter_modules(only=set(chosen))}
    return [modules[s] for s in sorted(chosen)], sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--kind", default="real", choices=("real", "small"))
    parser.add_argument("--modules", type=int, default=50)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--probes", default="", help="probe-set JSON or shipped name (default: the package's)")
    parser.add_argument("--max-instructions", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.core.features import AUTOPHASE_FEATURES
    from behavioral_pq.embedding.probes import load_probes

    probes = load_probes(args.probes or None)
    modules, sizes = choose(args.store, args.kind, args.modules, args.max_instructions, args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="bpq-determinism-") as tmp:
        folder = Path(tmp) / "modules"
        folder.mkdir()
        for m in modules:
            (folder / f"{m.sha256}.bc").write_bytes(m.bitcode)
        for run in range(args.runs):
            workers = 1 + run % 2
            start = time.perf_counter()
            out = Path(tmp) / f"run{run}.npz"
            subprocess.run([sys.executable, "-c", RUN, str(folder), args.probes, str(workers), str(out)],
                           check=True, env={**os.environ, "BPQ_NO_CACHE": "1"})
            data = np.load(out, allow_pickle=True)
            results.append((workers, time.perf_counter() - start, data["autophase"], data["ok"]))
            print(f"run {run}: {workers} worker(s), {results[-1][1]:.1f} s", file=sys.stderr)
    reference = results[0][2]
    report = {"store": args.store, "kind": args.kind, "probe_set": probes.name, "probe_hash": probes.hash,
              "modules": [{"sha256": m.sha256, "instructions": sizes[m.sha256]} for m in modules],
              "runs": [], "differing_rows": 0, "rows_compared": 0}
    for run, (workers, seconds, autophase, ok) in enumerate(results):
        entry = {"run": run, "workers": workers, "seconds": round(seconds, 2), "failed": int((~ok).sum()),
                 "differences": []}
        for i, m in enumerate(modules):
            rows = np.flatnonzero((autophase[i] != reference[i]).any(axis=1))
            for row in rows:
                features = np.flatnonzero(autophase[i, row] != reference[i, row])
                entry["differences"].append({"module": m.sha256, "instructions": sizes[m.sha256],
                                             "probe": int(row) - 1,
                                             "features": [AUTOPHASE_FEATURES[f] for f in features]})
        report["runs"].append(entry)
        if run:
            report["rows_compared"] += int(reference.shape[0] * reference.shape[1])
            report["differing_rows"] += len(entry["differences"])
    path = common.write_json(args.out / f"determinism-{args.kind}-{probes.name}.json", report)
    sizes_chosen = [sizes[m.sha256] for m in modules]
    print(f"{len(modules)} {args.kind} modules ({min(sizes_chosen)}-{max(sizes_chosen)} instructions, median "
          f"{int(np.median(sizes_chosen))}), {args.runs} fresh-process runs, probe set {probes.name}: "
          f"{report['differing_rows']} differing rows of {report['rows_compared']} compared; wrote {path}")
    return 1 if report["differing_rows"] else 0


if __name__ == "__main__":
    sys.exit(main())
