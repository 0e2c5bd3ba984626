"""Large-module mode against the exact spectrum, on the largest modules of a store, in one run.

    python bench/spectra/large_modules.py STORE [--modules 12] [--min-instructions 10000] [--max-instructions N]
                                                [--out DIR]

For each module (the largest of the store first, any kind): the exact spectrum and the function-sample spectrum
(threshold just below the module's size, so every module is sampled), their wall times on 2 workers, the mean
absolute spectrum error, the shipped encoder's embeddings of both (cosine), and the shipped -Oz predictor's
prediction from each against the module's label (|error| in points), and the wall time of ``encoder.embed`` with
its defaults (run with BPQ_NO_CACHE=1 so that it measures). Writes ``large_modules.json`` in --out (default
bench/spectra/results).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--modules", type=int, default=12)
    parser.add_argument("--min-instructions", type=int, default=10_000)
    parser.add_argument("--max-instructions", type=int, default=10 ** 9)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import size_bucket
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.embedding.sampling import LARGE_MODULE_INSTRUCTIONS, SAMPLE_BUDGET
    from behavioral_pq.embedding.spectrum import spectra
    from behavioral_pq.tasks.predictors import load_predictor

    corpus = Corpus(args.store)
    sizes = common.instruction_counts(corpus)
    labels = corpus.labels().to_pydict()
    oz = {s: (ic - o) / max(ic, 1) for s, o, ic in zip(labels["sha256"], labels["oz_count"],
                                                       [sizes[s] for s in labels["sha256"]])}
    kinds = corpus.program_kinds()
    chosen = sorted((s for s in oz if args.min_instructions <= sizes[s] <= args.max_instructions),
                    key=lambda s: -sizes[s])[:args.modules]
    modules = {m.sha256: m for m in corpus.iter_modules(only=set(chosen))}
    encoder = load_encoder()
    predictor = load_predictor(kind="oz-benefit")
    rows = []
    with Engine(2) as engine:
        for sha in chosen:
            module = modules[sha]
            timings = {}
            batches = {}
            for mode, threshold in (("exact", None), ("sampled", min(sizes[sha] - 1, LARGE_MODULE_INSTRUCTIONS))):
                start = time.perf_counter()
                batches[mode] = spectra([module], encoder.probe_set, engine=engine, cache=False,
                                        sample_above=threshold)
                timings[mode] = time.perf_counter() - start
            if not all(b.ok.all() for b in batches.values()):
                print(f"{sha[:12]}: failed ({[b.errors[0] for b in batches.values()]})", file=sys.stderr)
                continue
            start = time.perf_counter()  # what a user waits for: embed() with its defaults (the engine started)
            encoder.embed(module)
            embed_s = time.perf_counter() - start
            exact, sampled = batches["exact"], batches["sampled"]
            e_exact = encoder.embed_spectra(exact.spectra, exact.autophase[:, 0])[0]
            e_sampled = encoder.embed_spectra(sampled.spectra, sampled.autophase[:, 0])[0]
            p_exact = float(predictor.predict_embeddings(e_exact[None])[0])
            p_sampled = float(predictor.predict_embeddings(e_sampled[None])[0])
            row = {"sha256": sha, "kind": kinds.get(sha), "instructions": sizes[sha], "bucket": size_bucket(sizes[sha]),
                   "sample_share": sampled.sampled[0], "exact_s": round(timings["exact"], 2),
                   "sampled_s": round(timings["sampled"], 2), "embed_default_s": round(embed_s, 2),
                   "spectrum_mae": float(np.abs(exact.spectra[0] - sampled.spectra[0]).mean()),
                   "embedding_cosine": float(e_exact @ e_sampled / np.linalg.norm(e_exact) / np.linalg.norm(e_sampled)),
                   "oz_label_points": oz[sha] * 100, "oz_error_exact_points": abs(p_exact - oz[sha]) * 100,
                   "oz_error_sampled_points": abs(p_sampled - oz[sha]) * 100}
            rows.append(row)
            print(f"{sha[:12]} {row['instructions']:>7} instr: exact {row['exact_s']:.1f} s, sampled "
                  f"{row['sampled_s']:.1f} s (share {row['sample_share'] or 1:.2f}), spectrum MAE "
                  f"{row['spectrum_mae']:.3f}, cos {row['embedding_cosine']:.3f}, -Oz error "
                  f"{row['oz_error_exact_points']:.2f} vs {row['oz_error_sampled_points']:.2f} points", file=sys.stderr)
    summary = {"modules": len(rows), "sample_budget": SAMPLE_BUDGET,
               "speedup_median": float(np.median([r["exact_s"] / r["sampled_s"] for r in rows])) if rows else None,
               "oz_mae_exact_points": float(np.mean([r["oz_error_exact_points"] for r in rows])) if rows else None,
               "oz_mae_sampled_points": float(np.mean([r["oz_error_sampled_points"] for r in rows])) if rows else None,
               "spectrum_mae_median": float(np.median([r["spectrum_mae"] for r in rows])) if rows else None}
    common.write_json(args.out / "large_modules.json", {"store": args.store, "summary": summary, "modules": rows})
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
