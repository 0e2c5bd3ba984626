"""The text-size search on a split's units: the shipped library's retrieval against text-size rankers, in one run.

    python bench/size/size_units.py STORE [--split valid] [--programs 30] [--max-instructions 5000] [--budget 50]
                                    --ranker NAME=DIR [--ranker ...] [--out FILE.json]

Draws ``--programs`` real units of the split (seeded), searches each with ``recommend_pipeline(...,
objective="text-size")`` at ``--budget``: the shipped text-size library (the embedding's neighbours and coreset;
the probes are counted in its time) and each ranker; prints the geomean of .text / -Oz's .text and the median
search time per method, and writes every unit's (bytes, -Oz bytes, seconds) per method to --out (default
bench/size/results/size_rankers-valid-units.json).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--programs", type=int, default=30)
    parser.add_argument("--max-instructions", type=int, default=5000)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="seed of the unit sample")
    parser.add_argument("--ranker", action="append", default=[], metavar="NAME=DIR", required=True)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__) / "size_rankers-valid-units.json")
    args = parser.parse_args()

    import numpy as np

    from behavioral_pq.artifacts import with_pooling_of
    from behavioral_pq.core.target import Target
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.guidance import default_library, recommend_pipeline
    from behavioral_pq.tasks.guidance.ranker import load_ranker

    corpus = Corpus(args.store)
    shas = corpus.narrow(corpus.split(args.split), kind="real", max_instructions=args.max_instructions)
    shas = sorted(np.random.default_rng(args.seed).choice(shas, min(args.programs, len(shas)), replace=False).tolist())
    encoder = load_encoder()
    library = default_library(encoder, "text-size")
    encoder = with_pooling_of(encoder, library.encoder)
    rankers = {name: load_ranker(path) for name, _, path in (r.partition("=") for r in args.ranker)}
    target = Target.module_cpus()
    rows = []
    for module in corpus.iter_modules(only=set(shas)):
        row = {"name": module.name, "n": module.instruction_count}
        start = time.perf_counter()
        found = recommend_pipeline(module, args.budget, library=library, embedding=encoder.embed(module),
                                   objective="text-size", target=target)
        row["library"] = (found.text_size, found.oz_text_size, time.perf_counter() - start)
        for name, ranker in rankers.items():
            start = time.perf_counter()
            found = recommend_pipeline(module, args.budget, ranker=ranker, objective="text-size", target=target)
            row[name] = (found.text_size, found.oz_text_size, time.perf_counter() - start)
        rows.append(row)
        print(row, flush=True)
    common.write_json(args.out, rows, indent=None)
    for method in ["library", *rankers]:
        ratio = common.geomean(r[method][0] / r[method][1] for r in rows)
        seconds = sorted(r[method][2] for r in rows)[len(rows) // 2]
        print(f"{method}: .text / -Oz {ratio:.4f} (geomean of {len(rows)}), median search {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
