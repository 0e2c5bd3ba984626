"""Artifact fault campaign: truncated, bit-flipped and version-edited copies of every artifact, loaded again.

    python bench/faults/fault_artifacts.py --work WORK [--flips 40] [--seed 0]

Artifacts: the shipped encoder checkpoint (config.json, probes.json, quantizer.npz, model.safetensors), a
predictor (predictor.json, estimator.json, estimator.safetensors), the program library (library.json,
index.faiss), a probe-set file and a quantizer file on their own, and a Parquet shard of a small corpus store.
For each file: truncation to 0 and 1 bytes and to 10/50/90/99% and size-1, --flips single-bit flips at seeded
random offsets, and (JSON files) a format-version or LLVM-version edit. Each faulty copy is loaded with the
library's loader; the outcome is:

- ``refused``: the loader's typed error, naming the file (or its folder);
- ``same``: it loads and gives exactly what the intact artifact gives (e.g. a flip inside JSON whitespace);
- a **defect**: another exception, an error that names neither, or a load that gives a different answer
  (a silent wrong answer).

"Gives" is compared on what users get: embeddings of three example modules (checkpoint), predictions on fixed
embeddings (predictor), recommendations' neighbours (library), the probe pipelines, the codes of fixed rows
(quantizer), the table (shard). Results: WORK/fault_artifacts.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

CHECKPOINTS = common.REPO / "checkpoints"


def faults(path: Path, rng: random.Random, flips: int):
    """(name, bytes) of the faulty versions of one file."""
    data = path.read_bytes()
    n = len(data)
    for cut in sorted({0, 1, n // 10, n // 2, 9 * n // 10, 99 * n // 100, n - 1}):
        yield f"truncate@{cut}", data[:cut]
    for _ in range(flips):
        pos, bit = rng.randrange(n), rng.randrange(8)
        flipped = bytearray(data)
        flipped[pos] ^= 1 << bit
        yield f"flip@{pos}.{bit}", bytes(flipped)
    if path.suffix == ".json":
        config = json.loads(data)
        for key, value in (("format_version", 99), ("version", 99), ("llvm_major", 18)):
            if key in config:
                yield f"{key}={value}", json.dumps(dict(config, **{key: value})).encode()


def _embed_answer(folder: Path):
    from behavioral_pq.embedding.encoder import load_encoder

    encoder = load_encoder(folder)
    examples = sorted(common.EXAMPLES.glob("*.c"))[:3]
    return np.stack([encoder.embed(str(p)) for p in examples])


def _predictor_answer(folder: Path):
    from behavioral_pq.tasks.predictors import load_predictor

    predictor = load_predictor(folder)
    x = np.random.default_rng(0).normal(size=(8, predictor.encoder.dim)).astype(np.float32)
    return predictor.predict_embeddings(x)


def _library_answer(folder: Path):
    from behavioral_pq.tasks.guidance import load_library

    library = load_library(folder)
    return np.concatenate([library.embeddings.ravel(), library.mean.ravel(), library.scale.ravel()]), \
        [(p.program, p.oz_count, sorted(p.results.items())) for p in library.programs]


def _probes_answer(path: Path):
    from behavioral_pq.embedding.probes import load_probes

    return load_probes(path).pipelines()


def _quantizer_answer(path: Path):
    from behavioral_pq.embedding.quantizer import Quantizer

    q = Quantizer.load(path)
    rows = np.random.default_rng(0).normal(size=(64, q.dim)).astype(np.float32)
    return q.encode(rows), q.centroids_


def _shard_answer(store: Path):
    from behavioral_pq.corpus.store import CorpusStore

    return CorpusStore(store).read("modules").to_pylist()


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and \
            np.array_equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def campaign(work: Path, flips: int, seed: int) -> dict:
    from behavioral_pq.errors import BPQError

    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    targets = []  # (artifact, folder to copy, file inside it, answer(path-of-copy), error class name)
    for f in ("config.json", "probes.json", "quantizer.npz", "model.safetensors"):
        targets.append(("checkpoint", CHECKPOINTS / "pqbert-small-m14-s0", f, _embed_answer))
    for f in ("predictor.json", "estimator.json", "estimator.safetensors"):
        targets.append(("predictor", CHECKPOINTS / "pqbert-small-m14-s0-oz", f, _predictor_answer))
    for f in ("library.json", "index.faiss"):
        targets.append(("library", CHECKPOINTS / "pqbert-small-m14-s0-library", f, _library_answer))
    targets.append(("probe-set", CHECKPOINTS / "pqbert-small-m14-s0", "probes.json", lambda d: _probes_answer(d / "probes.json")))
    targets.append(("quantizer", CHECKPOINTS / "pqbert-small-m14-s0", "quantizer.npz",
                    lambda d: _quantizer_answer(d / "quantizer.npz")))
    store = work / "store"
    if not store.exists():
        from behavioral_pq.corpus import build_corpus, discover

        build_corpus(discover([common.EXAMPLES], origin="t"), store, workers=1,
                     labels=False)
    from behavioral_pq.corpus.store import CorpusStore

    shard = CorpusStore(store).shards("modules")[0]["path"]
    targets.append(("parquet-shard", store, shard, _shard_answer))

    records = []
    for artifact, folder, file, answer in targets:
        expected = answer(folder)
        copy = work / "copy"
        for fault, data in faults(folder / file, rng, flips):
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(folder, copy)
            (copy / file).write_bytes(data)
            record = {"artifact": artifact, "file": file, "fault": fault}
            try:
                got = answer(copy)
            except BPQError as exc:
                message = str(exc)
                named = Path(file).name in message or str(copy) in message
                record.update(outcome="refused" if named else "defect", error=type(exc).__name__,
                              message=message[:300], why="" if named else "does not name the file")
            except Exception as exc:  # noqa: BLE001 - an untyped error is a defect
                record.update(outcome="defect", error=type(exc).__name__, message=str(exc)[:300], why="untyped")
            else:
                ok = same(expected, got)
                record.update(outcome="same" if ok else "defect", why="" if ok else "silent wrong answer")
            records.append(record)
    shutil.rmtree(work / "copy", ignore_errors=True)
    table = defaultdict(Counter)
    for r in records:
        table[(r["artifact"], r["file"])][r["outcome"]] += 1
    return {"flips": flips, "seed": seed, "cases": len(records),
            "defects": sum(r["outcome"] == "defect" for r in records),
            "table": [{"artifact": a, "file": f, **dict(c)} for (a, f), c in table.items()],
            "records": records}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path, help="scratch directory (outside the repository)")
    parser.add_argument("--flips", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = campaign(args.work, args.flips, args.seed)
    common.write_json(args.work / "fault_artifacts.json", result)
    print(f"{result['cases']} faulty copies, {result['defects']} defects\n")
    print("| artifact | file | refused | same | defect |\n|---|---|---|---|---|")
    for row in result["table"]:
        print(f"| {row['artifact']} | {row['file']} | {row.get('refused', 0)} | {row.get('same', 0)} | "
              f"{row.get('defect', 0)} |")
    for r in result["records"]:
        if r["outcome"] == "defect":
            print(f"DEFECT {r['artifact']} {r['file']} {r['fault']}: {r.get('error')} {r['why']} {r['message'][:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
