"""``bpq optimize --auto``, ``bpq library build`` and ``bpq evaluate-guidance``: pipelines chosen by embedding."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from behavioral_pq.cli.common import check_output_folder
from behavioral_pq.cli.ranker import load_checked_ranker

LIBRARY_EPILOG = """\
example (the shipped library, checkpoints/pqbert-small-m14-s0-library):
  bpq library build --corpus store/ --out my-library --programs 1200

Programs are drawn (seeded) from the store's train split among modules with spectra for the encoder's probe
set. Each gets generic pipelines and two genetic searches; results are logged to OUT.search.jsonl as they come,
so an interrupted build resumes where it stopped.

--objective text-size scores pipelines by .text bytes: the same searches, then -Os, every pipeline found and
16 random edits of the smallest, each compiled for this host. Give it to `bpq optimize --auto --objective
text-size --library DIR`; none is shipped (a 300-program one did not beat the shipped library: BENCHMARKS.md).
"""

GUIDANCE_EPILOG = """\
example (the project's report, downstream/guidance/):
  bpq evaluate-guidance --corpus store/ --out downstream/guidance --programs 300

Compares the shipped pipeline ranker (what `bpq optimize --auto` uses; --ranker DIR for another, --no-ranker to
leave it out) and the library recommendation with random-neighbor retrieval, random search and greedy search at
each budget on held-out programs (the test split by default; library programs are left out).
"""


def _encoder(args):
    from behavioral_pq.embedding.encoder import load_encoder

    return load_encoder(args.checkpoint) if getattr(args, "checkpoint", None) else None


class SearchBar:
    """A pipeline search's progress on stderr (tqdm), fed :class:`~behavioral_pq.tasks.guidance.SearchProgress`:
    the step, compilations done / budget, the best so far against -Oz, and the time since the bar began. Shown
    only when ``enabled`` (stderr a terminal, no ``--json``); use as a context manager."""

    def __init__(self, budget: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(total=budget, file=sys.stderr, disable=not enabled, leave=False, dynamic_ncols=True,
                        bar_format="{desc}: {n}/{total} compilations{postfix} [{elapsed}]")
        self.bar.set_postfix_str("-Oz not measured yet", refresh=False)

    def __call__(self, progress) -> None:
        step = progress.phase + (f" ({progress.done}/{progress.total} probe nodes)" if progress.total else "")
        self.bar.set_description_str(step, refresh=False)
        self.bar.n = progress.compilations
        if progress.oz is not None:
            unit = "bytes" if progress.objective == "text-size" else "instructions"
            change = 100.0 * (progress.best - progress.oz) / max(progress.oz, 1)
            self.bar.set_postfix_str(f"best {progress.best} {unit}, -Oz {progress.oz} ({change:+.1f}%)",
                                     refresh=False)
        self.bar.refresh()

    def __enter__(self) -> "SearchBar":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def seconds_left(args, started: float):
    """What is left of ``--seconds`` (None without it; <= 0 when spent) at this point of a command that began at
    ``started`` (``time.monotonic()``)."""
    if getattr(args, "seconds", None) is None:
        return None
    return args.seconds - (time.monotonic() - started)


def run_auto(args, module, target=None, started=None):
    """``bpq optimize FILE --auto``: the recommendation and the module optimized with it. ``target``: where the
    search counts and the result is built (None: measure mode); every candidate is measured as it will be
    written, so the module written is the best the search found there. ``started``: when the command began
    (``--seconds`` counts from there)."""
    from behavioral_pq.tasks.guidance import load_library, recommend_and_optimize

    started = time.monotonic() if started is None else started
    objective = getattr(args, "objective", "ir-count")
    if args.learn and not args.library:
        raise ValueError("--learn needs --library DIR: the library to update (the shipped one is read-only)")
    if objective == "text-size" and target is None:
        raise ValueError("--objective text-size measures object code, which needs target mode: drop --target measure")
    if getattr(args, "ranker", None) and (args.library or args.learn):
        raise ValueError("--ranker chooses the candidates instead of a library: drop --library and --learn")
    # recommend_pipeline refuses this too; said here in the CLI's terms, before the library and encoder load
    if args.learn and objective == "ir-count" and target is not None:
        raise ValueError("--learn keeps the search's instruction counts in the library, which holds them in measure "
                         "mode: add --target measure")
    encoder = _encoder(args)
    ranker = None
    if getattr(args, "ranker", None):
        ranker, encoder = load_checked_ranker(args.ranker, encoder, objective=objective)
    library = load_library(args.library, encoder=encoder) if args.library else None  # None: shipped, per objective
    with SearchBar(args.budget, sys.stderr.isatty() and not args.json) as bar:
        left = seconds_left(args, started)     # when loading spent it all, -Oz still runs
        found, result = recommend_and_optimize(module, args.budget, library=library, encoder=encoder,
                                               learn=args.learn, progress=bar, objective=objective, target=target,
                                               seconds=None if left is None else max(1e-3, left), ranker=ranker)
    if args.learn:
        library.save(args.library)
    return found, result


def cmd_library_build(args) -> int:
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.guidance import build_library, choose_library_programs

    check_output_folder(args.out)
    encoder = _encoder(args) or load_encoder()
    programs = choose_library_programs(args.corpus, args.programs, encoder=encoder, split=args.split, seed=args.seed,
                                       kind=None if args.kind == "all" else args.kind,
                                       max_instructions=args.max_instructions)
    if not programs:
        raise ValueError(f"{args.corpus}: no {'' if args.kind == 'all' else args.kind + ' '}programs in split "
                         f"{args.split!r}")
    library = build_library(args.corpus, args.out, programs, encoder=encoder, seed=args.seed, progress=True,
                            overwrite=args.overwrite, objective=args.objective)
    better = sum(1 for p in library.programs if p.best()[1] < p.oz_count)
    print(f"wrote {args.out}: {len(library)} programs, {better} with a pipeline better than -Oz")
    return 0


def cmd_library_merge(args) -> int:
    from behavioral_pq.tasks.guidance import load_library, merge_libraries

    check_output_folder(args.out)
    encoder = _encoder(args)
    library = merge_libraries([load_library(path, encoder=encoder) for path in args.libraries])
    library.save(args.out, overwrite=args.overwrite)
    print(f"wrote {args.out}: {len(library)} programs from {len(args.libraries)} libraries")
    return 0


def cmd_library_coreset(args) -> int:
    from behavioral_pq.tasks.guidance import fit_coreset, load_library

    library = load_library(args.library, encoder=_encoder(args))
    log = Path(str(Path(args.library)).rstrip("/") + ".coreset.jsonl")
    summary = fit_coreset(library, args.corpus, log, size=args.size, programs=args.programs, seed=args.seed,
                          oz_suffixed=args.oz_suffixes, progress=True)
    library.save(args.library)
    print(f"{args.library}: coreset of {summary['size']} pipelines (from a pool of {summary['pool']}) measured on "
          f"{summary['programs']} library programs ({summary['failed']} failed): geomean IC_Oz / IC "
          f"{summary['gain']:.4f}, {summary['pool_gain']:.4f} with the whole pool")
    return 0


def cmd_evaluate_guidance(args) -> int:
    from behavioral_pq.reports.guidance import evaluate_guidance
    from behavioral_pq.tasks.guidance import load_library

    check_output_folder(args.out)
    encoder = _encoder(args)
    library = load_library(args.library, encoder=encoder)
    budgets = [int(b) for b in args.budgets.split(",")]
    if any(b < 1 for b in budgets):
        raise ValueError(f"budgets must be positive integers, got {args.budgets!r}")
    ranker = False if args.no_ranker else args.ranker          # None: the shipped ranker
    report = evaluate_guidance(args.corpus, args.out, library=library, encoder=encoder, split=args.split,
                               programs=args.programs, budgets=budgets, seed=args.seed, ranker=ranker,
                               kind=None if args.kind == "all" else args.kind,
                               max_instructions=args.max_instructions, progress=True)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print((Path(args.out) / "report.md").read_text())
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("library", help="build a program library for pipeline recommendation",
                       epilog=LIBRARY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    lsub = p.add_subparsers(dest="library_command", metavar="ACTION")
    lsub.required = True
    b = lsub.add_parser("build", help="search good pipelines for corpus programs and index them by embedding",
                        epilog=LIBRARY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--corpus", required=True, metavar="STORE", help="corpus store (bpq corpus build)")
    b.add_argument("--out", required=True, metavar="DIR", help="library folder to write")
    b.add_argument("--programs", type=int, default=1200, metavar="N", help="programs to search (default 1200)")
    b.add_argument("--split", default="train", help="split to draw programs from (default train)")
    b.add_argument("--kind", choices=("all", "small", "real"), default="all",
                   help="draw only small programs or only real programs (default all)")
    b.add_argument("--max-instructions", type=int, metavar="N", help="leave out modules larger than N")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--objective", choices=("ir-count", "text-size"), default="ir-count",
                   help="what the library's pipelines are scored by: IR instructions (default) or .text bytes of "
                        "the object in target mode for this host")
    b.add_argument("--checkpoint", metavar="DIR", help="encoder checkpoint (default: the shipped one)")
    b.add_argument("--overwrite", action="store_true",
                   help="replace --out even when it holds something else than a program library")
    b.set_defaults(func=cmd_library_build)
    c = lsub.add_parser("coreset", help="fit a library's coreset: a few pipelines good on many programs at once",
                        description="Measure every library program's best pipeline on a sample of library programs "
                                    "and keep, greedily, the SIZE that together gain most over -Oz; "
                                    "recommendations then try them next to the neighbors' pipelines. Resumable "
                                    "(LIBRARY.coreset.jsonl); the library folder is updated in place.")
    c.add_argument("library", metavar="LIBRARY", help="library folder (bpq library build)")
    c.add_argument("--corpus", required=True, metavar="STORE", help="the store the library was built from")
    c.add_argument("--size", type=int, default=32, metavar="K",  # coreset.CORESET_SIZE
                   help="pipelines to keep (default 32)")
    c.add_argument("--programs", type=int, default=300, metavar="N",  # coreset.CORESET_PROGRAMS
                   help="library programs to measure them on (default 300)")
    c.add_argument("--seed", type=int, default=0, help="seed of the program sample")
    c.add_argument("--oz-suffixes", action="store_true",
                   help="also measure -Oz followed by each single pass, with and without a second -Oz (248 more "
                        "candidates; not used for the shipped library)")
    c.add_argument("--checkpoint", metavar="DIR", help="encoder the library was built on (default: the shipped one)")
    c.set_defaults(func=cmd_library_coreset)
    m = lsub.add_parser("merge", help="one library from several built on the same encoder",
                        description="Merge program libraries (e.g. the shipped one and one of real programs); "
                                    "neighbours are searched over all their programs.")
    m.add_argument("libraries", nargs="+", metavar="DIR", help="library folders")
    m.add_argument("--out", required=True, metavar="DIR", help="library folder to write")
    m.add_argument("--checkpoint", metavar="DIR", help="encoder checkpoint (default: the shipped one)")
    m.add_argument("--overwrite", action="store_true",
                   help="replace --out even when it holds something else than a program library")
    m.set_defaults(func=cmd_library_merge)

    p = sub.add_parser("evaluate-guidance", help="recommended pipelines vs -Oz, random and greedy search",
                       epilog=GUIDANCE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, metavar="STORE", help="corpus store with a split")
    p.add_argument("--out", required=True, metavar="DIR", help="report folder")
    p.add_argument("--library", metavar="DIR", help="program library (default: the shipped one)")
    p.add_argument("--ranker", metavar="DIR", help="pipeline ranker of the method 'ranker' (default: the shipped "
                   "one, what `bpq optimize --auto` uses)")
    p.add_argument("--no-ranker", action="store_true", help="leave the ranker method out")
    p.add_argument("--checkpoint", metavar="DIR", help="encoder checkpoint (default: the shipped one)")
    p.add_argument("--split", default="test", help="held-out split (default test)")
    p.add_argument("--programs", type=int, default=200, metavar="N", help="programs to evaluate (default 200)")
    p.add_argument("--kind", choices=("all", "small", "real"), default="all",
                   help="draw only small programs or only real programs (default all)")
    p.add_argument("--max-instructions", type=int, metavar="N", help="leave out modules larger than N")
    p.add_argument("--budgets", default="1,10,50", help="comma-separated budgets (default 1,10,50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_evaluate_guidance)
