"""Program libraries side by side, at equal budget: recommend_pipeline with each, greedy and random search.

    python bench/guidance/guidance_libraries.py STORE --split valid --library NAME=DIR [--library ...] [--merge A+B]
                                                [--kind real] [--programs 40] [--budget 50] [--out DIR]

``--library shipped`` (no DIR) is the shipped library; ``--merge A+B`` adds the merge of two named libraries;
``--coreset-share X`` adds a row per library with a coreset (``bpq library coreset``) that takes that share of
its retrieved candidates from the coreset (0: neighbors only, as before coresets).
A library sits on the shipped encoder unless ``--encoder NAME=CHECKPOINT`` names the one it was built on (to
compare the libraries of two encoders; each embeds the module with its own).
On a seeded sample of the split's labelled modules (of ``--kind``, at most 20,000 instructions), each method
gets the same ``--budget`` of candidate compilations (-Oz is measured besides and always available). Score:
geometric mean of IC_Oz / IC, overall and by size bucket. Writes ``guidance-libraries-SPLIT.json`` in --out (default
bench/guidance/results).
"""

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--split", default="valid")
    parser.add_argument("--library", action="append", default=[], metavar="NAME[=DIR]")
    parser.add_argument("--merge", action="append", default=[], metavar="A+B")
    parser.add_argument("--kind", choices=("all", "small", "real"), default="real")
    parser.add_argument("--programs", type=int, default=40)
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--encoder", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="the encoder library NAME was built on (default: the shipped one)")
    parser.add_argument("--coreset-share", action="append", type=float, default=[], metavar="X",
                        help="also run each library that has a coreset with this coreset_share (repeatable; the "
                             "library's own row uses the default)")
    parser.add_argument("--retrieval-share", action="append", type=float, default=[], metavar="X",
                        help="also run each library with this retrieval_share (the rest of the budget goes to the "
                             "local search; repeatable)")
    parser.add_argument("--no-baselines", action="store_true", help="leave out greedy and random search")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_bucket
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.guidance import (default_library, greedy_search, load_library, merge_libraries,
                                              random_search, recommend_pipeline)

    shipped = load_encoder()
    on = {name: load_encoder(path) for name, path in (e.split("=", 1) for e in args.encoder)}
    libraries, encoders = {}, {}
    for spec in args.library or ["shipped"]:
        name, _, path = spec.partition("=")
        encoders[name] = on.get(name, shipped)
        libraries[name] = (default_library(encoders[name]) if not path
                           else load_library(path, encoder=encoders[name]))
    for spec in args.merge:
        a, b = spec.split("+")
        if encoders[a] is not encoders[b]:
            parser.error(f"--merge {spec}: the two libraries sit on different encoders")
        libraries[spec], encoders[spec] = merge_libraries([libraries[a], libraries[b]]), encoders[a]
    corpus = Corpus(args.store)
    kinds = corpus.program_kinds()
    sizes = common.instruction_counts(corpus)
    labelled = set(corpus.labels().column("sha256").to_pylist())
    pool = sorted(s for s in corpus.split(args.split) if s in labelled and sizes[s] <= 20_000
                  and (args.kind == "all" or kinds.get(s) == args.kind))
    chosen = set(random.Random(args.seed).sample(pool, min(args.programs, len(pool))))
    rows = []
    with Engine(2) as engine:
        for module in corpus.iter_modules(only=chosen):
            embedded = {}       # one embedding per encoder
            row = {"sha256": module.sha256, "instructions": module.instruction_count,
                   "bucket": size_bucket(module.instruction_count)}
            for name, library in libraries.items():
                encoder = encoders[name]
                if id(encoder) not in embedded:
                    embedded[id(encoder)] = encoder.embed(module)
                row[name] = recommend_pipeline(module, args.budget, library=library, encoder=encoder, engine=engine,
                                               embedding=embedded[id(encoder)]).improvement
                for share in args.coreset_share if library.coreset else ():
                    row[f"{name}@coreset={share:g}"] = recommend_pipeline(
                        module, args.budget, library=library, encoder=encoder, engine=engine,
                        embedding=embedded[id(encoder)], coreset_share=share).improvement
                for share in args.retrieval_share:
                    row[f"{name}@retrieval={share:g}"] = recommend_pipeline(
                        module, args.budget, library=library, encoder=encoder, engine=engine,
                        embedding=embedded[id(encoder)], retrieval_share=share).improvement
            if not args.no_baselines:
                row[f"greedy@{args.budget}"] = greedy_search(module, args.budget, engine=engine).improvement
                row[f"random@{args.budget}"] = random_search(module, args.budget, engine=engine).improvement
            rows.append(row)
            print(f"{len(rows)}/{len(chosen)} {module.instruction_count} instr: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float)), file=sys.stderr)
    methods = [k for k in rows[0] if isinstance(rows[0][k], float)] if rows else []
    summary = {"all": {"n": len(rows), **{m: common.geomean([r[m] for r in rows]) for m in methods}}}
    for bucket in BUCKET_NAMES:
        sub = [r for r in rows if r["bucket"] == bucket]
        if sub:
            summary[bucket] = {"n": len(sub), **{m: common.geomean([r[m] for r in sub]) for m in methods}}
    path = common.write_json(args.out / f"guidance-libraries-{args.split}.json",
                             {"config": {**vars(args), "out": str(args.out)}, "summary": summary, "rows": rows})
    print(common.markdown_table(["slice", "n", *methods],
                                [[name, s["n"], *(f"{s[m]:.4f}" for m in methods)] for name, s in summary.items()],
                                align="lr" + "r" * len(methods)))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
