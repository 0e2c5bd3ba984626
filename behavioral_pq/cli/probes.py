"""``bpq probes ...``: search a probe set on a corpus store, and show one (see behavioral_pq.training.probe_search)."""

from __future__ import annotations

import argparse
import json
import sys

PROBES_EPILOG = """\
examples:
  bpq probes show                              # the package's default probe set
  bpq probes show probes/searched-p100-l50-s0.json --json
  bpq probes search stores/main --out probes/run --corpus-description 'my corpus'

The search clusters the store's pretraining modules (all but the labelled valid/test split) into P groups and runs
a genetic search per cluster; it writes search-state.jsonl as it goes, so running the same command again after an
interruption continues where it stopped. The probe-set JSON, report.json, REPORT.md and report.png land in --out.
"""


def cmd_show(args) -> int:
    from behavioral_pq.embedding.probes import DEFAULT_PROBES, load_probes

    probes = load_probes(args.file)
    if args.json:
        print(json.dumps(probes.to_dict(), indent=1))
        return 0
    origin = args.file or f"package default ({DEFAULT_PROBES})"
    print(f"{probes.name}: P={probes.num_probes}, L={probes.length}, LLVM {probes.llvm_major}, seed {probes.seed}, "
          f"hash {probes.hash[:16]}{', provisional' if probes.provisional else ''}")
    print(f"from: {origin}")
    if probes.corpus:
        print(f"corpus: {probes.corpus}")
    method = probes.search.get("method")
    if method:
        print(f"search: {method}")
    for i, seq in enumerate(probes.sequences if args.all else probes.sequences[:args.head]):
        print(f"{i:4d}  {' '.join(seq)}")
    hidden = probes.num_probes - (probes.num_probes if args.all else min(args.head, probes.num_probes))
    if hidden:
        print(f"... {hidden} more (--all shows every probe)")
    return 0


def cmd_search(args) -> int:
    from pathlib import Path

    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.reports.probes import probe_report, write_report
    from behavioral_pq.training.genetic import GAConfig
    from behavioral_pq.training.probe_search import SearchConfig, search_probes

    corpus = Corpus(args.store)
    shas = corpus.pretraining()
    config = SearchConfig(num_probes=args.num_probes, sample=args.sample, max_instructions=args.max_instructions,
                          holdout=args.holdout, checkpoint=args.checkpoint, seed=args.seed,
                          ga=GAConfig(length=args.length, population=args.population, generations=args.generations,
                                      seed=args.seed))
    progress = sys.stderr.isatty()
    with Engine(workers=args.workers) as engine:
        probes, results = search_probes(corpus, shas, args.out, config, engine=engine, name=args.name,
                                        corpus_description=args.corpus_description or str(corpus.path),
                                        progress=progress)
        path = probes.save(Path(args.out) / f"{probes.name}.json")
        report = probe_report(corpus, probes, results, shas, corpus_sample=args.report_sample, seed=args.seed,
                              baseline=load_probes(args.baseline) if args.baseline != "none" else None,
                              engine=engine, progress=progress)
    written = write_report(report, probes, args.out)
    c = report["corpus"]
    print(f"{probes.name}: {probes.num_probes} probes of {probes.length} passes, hash {probes.hash[:16]}, "
          f"search {report['search_seconds'] / 60:.1f} min")
    print(f"corpus sample of {c['modules']}: mean probe reduction {c['probe_mean_reduction']:.3f}, "
          f"best probe {c['best_probe_mean_reduction']:.3f}, -Oz {c['oz_mean_reduction']:.3f}")
    for p in [path, *written]:
        print(f"wrote {p}")
    return 0


def add_parsers(sub) -> None:
    from behavioral_pq.embedding.probes import PROVISIONAL_PROBES
    from behavioral_pq.training.probe_search import SearchConfig

    d = SearchConfig()
    probes = sub.add_parser("probes", help="search or show probe sets", epilog=PROBES_EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    psub = probes.add_subparsers(dest="probes_command", metavar="SUBCOMMAND")
    psub.required = True

    p = psub.add_parser("show", help="print a probe set (default: the package's)")
    p.add_argument("file", nargs="?", metavar="FILE", help="probe-set JSON")
    p.add_argument("--head", type=int, default=10, metavar="N", help="probes to list (default 10)")
    p.add_argument("--all", action="store_true", help="list every probe")
    p.add_argument("--json", action="store_true", help="print the whole probe set as JSON")
    p.set_defaults(func=cmd_show)

    p = psub.add_parser("search", help="cluster a corpus and search one probe per cluster (resumable)",
                        epilog=PROBES_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="STORE", help="corpus store (bpq corpus build)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (state, probe set, report)")
    p.add_argument("--num-probes", "-P", type=int, default=d.num_probes, metavar="P",
                   help=f"clusters and probes ({d.num_probes})")
    p.add_argument("--length", "-L", type=int, default=d.ga.length, metavar="L",
                   help=f"passes per probe ({d.ga.length})")
    p.add_argument("--population", type=int, default=d.ga.population, help=f"GA population ({d.ga.population})")
    p.add_argument("--generations", type=int, default=d.ga.generations, help=f"GA generations ({d.ga.generations})")
    p.add_argument("--sample", type=int, default=d.sample, help=f"modules per cluster the GA judges on ({d.sample})")
    p.add_argument("--max-instructions", type=int, default=d.max_instructions,
                   help=f"prefer GA sample modules up to this size ({d.max_instructions})")
    p.add_argument("--holdout", type=int, default=d.holdout,
                   help=f"modules per cluster the report measures on ({d.holdout})")
    p.add_argument("--checkpoint", type=int, default=d.checkpoint,
                   help=f"prefix-state interval of the fitness cache ({d.checkpoint})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"k-means, sampling and GA seed ({d.seed})")
    p.add_argument("--report-sample", type=int, default=400, help="whole-corpus modules in the report (400)")
    p.add_argument("--baseline", default=PROVISIONAL_PROBES, metavar="FILE",
                   help="probe set the report compares with (default: the shipped provisional random set; "
                        "'none': no comparison)")
    p.add_argument("--name", help="probe-set name (default searched-pP-lL-sSEED)")
    p.add_argument("--corpus-description", metavar="TEXT", help="recorded in the probe set")
    p.add_argument("--workers", type=int, default=None, help="engine worker processes (default: CPUs)")
    p.set_defaults(func=cmd_search)
