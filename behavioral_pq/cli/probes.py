"""``bpq probes ...``: search a probe set on a corpus store, and show one (see behavioral_pq.training.probe_search)."""

from __future__ import annotations

import argparse
import json
import sys

from behavioral_pq.cli.common import add_overwrite_argument, check_output, check_output_folder

PROBES_EPILOG = """\
examples:
  bpq probes show                              # the package's default probe set
  bpq probes show probes/searched-p100-l50-s0.json --json
  bpq probes search stores/main --out probes/run --corpus-description 'my corpus'
  bpq probes tree stores/main --out probes/tree --branching 4,5,5 --segments 20,15,15
  bpq probes compare stores/main --out probes/compare --probes probes/tree/tree-*.json --subsets 50,25

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
    print(f"{probes.name}: P={probes.num_probes}, L={probes.length}, {probes.pass_executions} passes per spectrum, "
          f"LLVM {probes.llvm_major}, seed {probes.seed}, hash {probes.hash[:16]}"
          f"{', provisional' if probes.provisional else ''}")
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

    check_output_folder(args.out)
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


def _sizes(text: str) -> tuple:
    try:
        values = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers, got {text!r}")
    return values


def _universe(corpus, count: int, max_instructions: int, seed: int) -> list:
    """The modules a tree search clusters: up to ``count`` pretraining modules (half small, half real where the
    store has them) of at most ``max_instructions`` instructions, seeded."""
    import numpy as np

    sizes = dict(zip(*corpus.modules(["sha256", "instruction_count"]).to_pydict().values()))
    kinds = corpus.program_kinds()
    pool = [s for s in corpus.pretraining() if sizes[s] <= max_instructions]
    rng = np.random.default_rng(seed)
    real = sorted(s for s in pool if kinds.get(s) == "real")
    real = [real[i] for i in sorted(rng.choice(len(real), min(len(real), count // 2), replace=False))]
    small = sorted(s for s in pool if kinds.get(s) != "real")
    small = [small[i] for i in sorted(rng.choice(len(small), min(len(small), count - len(real)), replace=False))]
    return sorted(real + small)


def cmd_tree(args) -> int:
    from dataclasses import replace
    from pathlib import Path

    from behavioral_pq.artifacts import write_json_atomic
    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.training.genetic import GAConfig
    from behavioral_pq.training.probe_tree import TreeConfig, search_probe_tree

    check_output_folder(args.out)
    if len(args.branching) != len(args.segments):
        raise ValueError(f"--branching has {len(args.branching)} levels, --segments {len(args.segments)}")
    corpus = Corpus(args.store)
    config = TreeConfig(branching=args.branching, segments=args.segments, inner_probes=not args.leaves_only,
                        sample=args.sample, max_instructions=args.max_instructions, checkpoint=args.checkpoint,
                        seed=args.seed, ga=GAConfig(length=0, population=args.population,
                                                    generations=args.generations, seed=args.seed))
    shas = _universe(corpus, args.modules, args.universe_max_instructions, args.seed)
    print(f"tree {'x'.join(map(str, config.branching))}, segments {config.segments}: {config.num_probes} probes, "
          f"{config.pass_executions} passes per spectrum; clustering {len(shas)} modules", file=sys.stderr)
    with Engine(workers=args.workers) as engine:
        probes, results = search_probe_tree(corpus, shas, args.out, config, engine=engine, name=args.name,
                                            corpus_description=args.corpus_description or str(corpus.path),
                                            progress=sys.stderr.isatty())
    path = probes.save(Path(args.out) / f"{probes.name}.json")
    write_json_atomic(Path(args.out) / "nodes.json", [r.to_dict() for r in results], indent=1)
    if config.inner_probes:  # the same tree read at its leaves only: same passes, fewer rows (to compare)
        depth = len(config.branching)
        leaves = replace(probes, name=probes.name.replace("-inner", "-leaves"),
                         sequences=tuple(s for s, r in zip(probes.sequences, results) if len(r.path) == depth))
        print(f"wrote {leaves.save(Path(args.out) / f'{leaves.name}.json')} ({leaves.num_probes} leaf probes)")
    print(f"{probes.name}: {probes.num_probes} probes of up to {probes.length} passes, {probes.pass_executions} "
          f"passes per spectrum, hash {probes.hash[:16]}, search {probes.search['seconds'] / 60:.1f} min")
    print(f"wrote {path}")
    return 0


def cmd_subset(args) -> int:
    from dataclasses import replace

    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.reports.probe_sets import subset

    output = check_output(args.output, args.overwrite)
    base = load_probes(args.base)
    if not 0 < args.first <= base.num_probes:
        raise ValueError(f"--first must be in 1..{base.num_probes}, got {args.first}")
    derived = subset(base, count=args.first, length=args.length)
    search = {"method": f"the first {args.first} probes" + (f", cut to {args.length} passes" if args.length else "")
                        + f" of {base.name} (its largest clusters first)", "from": base.name, "from_hash": base.hash,
              "why": args.why or "", "base_search": base.search}
    derived = replace(derived, name=args.name or derived.name, search=search)
    derived.save(output)
    print(f"{derived.name}: P={derived.num_probes}, {derived.pass_executions} passes per spectrum "
          f"({base.pass_executions / derived.pass_executions:.2f}x fewer than {base.name}); wrote {args.output}")
    return 0


def cmd_compare(args) -> int:
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.reports.probe_sets import DEFAULT_SAMPLE, compare_probe_sets, subset

    check_output_folder(args.out)
    baseline = load_probes(args.baseline)
    candidates = [baseline]
    candidates += [subset(baseline, count=n) for n in args.subsets or ()]
    candidates += [subset(baseline, length=n) for n in args.lengths or ()]
    candidates += [load_probes(p) for p in args.probes or ()]
    sample = dict(DEFAULT_SAMPLE)
    for part in args.sample.split(",") if args.sample else ():
        split, _, count = part.partition("=")
        sample[split.strip()] = int(count)
    quiet = args.quiet or not sys.stderr.isatty()
    report = compare_probe_sets(args.store, candidates, args.out, sample=sample,
                                max_instructions=args.max_instructions, timing_per_bucket=args.timing_modules,
                                workers=args.workers, progress=None if quiet else (lambda line: print(
                                    line, file=sys.stderr)))
    for c in report["candidates"]:
        print(f"{c['name']}: P={c['num_probes']}, {c['pass_executions']} passes ({c['pass_ratio']:.2f}x fewer), "
              f"best pass {c['best_pass_top1']['mean'] * 100:.1f}%, -Oz MAE {c['oz_mae_points']['mean']:.2f}, "
              f"5-NN {c['knn5_top1'] * 100:.1f}%")
    print(f"wrote {args.out}/report.md")
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

    from behavioral_pq.training.probe_tree import TreeConfig

    t = TreeConfig()
    p = psub.add_parser("tree", help="search probes that share prefixes by construction (resumable)",
                        description="Search a probe tree: level by level, the modules under a node are clustered "
                        "by their Autophase after the node's path and a genetic search finds each child's segment. "
                        "A spectrum then runs each shared prefix once. Writes search-state.jsonl as it goes "
                        "(rerun to resume), the probe set and nodes.json to --out.",
                        epilog=PROBES_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="STORE", help="corpus store (bpq corpus build)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder")
    p.add_argument("--branching", type=_sizes, default=t.branching, metavar="B1,B2,...",
                   help=f"children per node at each level ({','.join(map(str, t.branching))})")
    p.add_argument("--segments", type=_sizes, default=t.segments, metavar="S1,S2,...",
                   help=f"passes each level adds ({','.join(map(str, t.segments))})")
    p.add_argument("--leaves-only", action="store_true", help="only the leaves are probes (default: every node)")
    p.add_argument("--modules", type=int, default=2000, help="pretraining modules clustered, half real where the "
                                                             "store has them (2000)")
    p.add_argument("--universe-max-instructions", type=int, default=20_000, metavar="N",
                   help="largest module clustered (20000)")
    p.add_argument("--population", type=int, default=t.ga.population, help=f"GA population ({t.ga.population})")
    p.add_argument("--generations", type=int, default=t.ga.generations, help=f"GA generations ({t.ga.generations})")
    p.add_argument("--sample", type=int, default=t.sample, help=f"modules per node the GA judges on ({t.sample})")
    p.add_argument("--max-instructions", type=int, default=t.max_instructions,
                   help=f"prefer GA sample modules up to this size ({t.max_instructions})")
    p.add_argument("--checkpoint", type=int, default=t.checkpoint,
                   help=f"prefix-state interval of the fitness cache ({t.checkpoint})")
    p.add_argument("--seed", type=int, default=t.seed, help=f"clustering, sampling and GA seed ({t.seed})")
    p.add_argument("--name", help="probe-set name (default tree-bB1xB2-lS1-S2[-inner]-sSEED)")
    p.add_argument("--corpus-description", metavar="TEXT", help="recorded in the probe set")
    p.add_argument("--workers", type=int, default=None, help="engine worker processes (default: CPUs)")
    p.set_defaults(func=cmd_tree)

    p = psub.add_parser("subset", help="a probe set made of another's first P probes (optionally cut to L passes)")
    p.add_argument("base", metavar="BASE", help="probe-set JSON or shipped name")
    p.add_argument("--first", type=int, required=True, metavar="P", help="probes to keep (the first P)")
    p.add_argument("--length", type=int, metavar="L", help="cut every probe to its first L passes")
    p.add_argument("--name", help="name of the new set")
    p.add_argument("--why", metavar="TEXT", help="recorded in the set (e.g. the report that chose it)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="probe-set JSON to write")
    add_overwrite_argument(p)
    p.set_defaults(func=cmd_subset)

    p = psub.add_parser("compare", help="judge probe sets by cost and by the raw spectrum's downstream quality",
                        description="Measure every candidate on one seeded sample of labelled modules (small and "
                        "real programs apart): pass executions per spectrum, spectrum time per module by size "
                        "bucket, and the raw-spectrum baseline's best-pass Top-1, -Oz MAE and 5-NN Top-1 "
                        "(3 seeds). The first candidate, --baseline, is what ratios are taken against.",
                        epilog=PROBES_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="STORE", help="split, labelled corpus store")
    p.add_argument("--out", required=True, metavar="DIR", help="report folder (report.md, report.json)")
    p.add_argument("--baseline", default=None, metavar="FILE", help="baseline probe set (default: the package's)")
    p.add_argument("--probes", nargs="*", metavar="FILE", help="more probe sets to judge")
    p.add_argument("--subsets", type=_sizes, metavar="P1,P2", help="also judge the baseline's first P probes")
    p.add_argument("--lengths", type=_sizes, metavar="L1,L2", help="also judge the baseline cut to L passes")
    p.add_argument("--sample", metavar="SPLIT=N,...", help="modules per split and kind (train=1000,valid=200,"
                                                          "test=400)")
    p.add_argument("--max-instructions", type=int, default=20_000, help="largest module judged (20000)")
    p.add_argument("--timing-modules", type=int, default=6, help="modules timed per size bucket (6)")
    p.add_argument("--workers", type=int, default=None, help="engine worker processes (default: CPUs)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_compare)
