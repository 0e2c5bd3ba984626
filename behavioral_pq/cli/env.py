"""``bpq leaderboard``: random search, greedy search and recommend_pipeline on llvm-v0, against -Oz."""

from __future__ import annotations

import argparse
import json

from behavioral_pq.cli.common import check_output_folder

LEADERBOARD_EPILOG = """\
example:
  bpq leaderboard --corpus stores/main --out downstream/leaderboard --programs 20 --seconds 5

Programs come from the store's test split (both kinds, small and real, up to --programs each). Random and
greedy search run on the llvm-v0 environment for --seconds of wall time per program; recommend_pipeline gets
--budget compilations. Writes leaderboard.md and leaderboard.json.
"""


def cmd_leaderboard(args) -> int:
    from behavioral_pq.reports.leaderboard import leaderboard

    check_output_folder(args.out)
    report = leaderboard(args.corpus, args.out, programs=args.programs, seconds=args.seconds, budget=args.budget,
                         split=args.split, max_instructions=args.max_instructions, seed=args.seed, progress=True)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        with open(f"{args.out}/leaderboard.md") as f:
            print(f.read())
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("leaderboard", help="random and greedy search on llvm-v0 vs recommend_pipeline vs -Oz",
                       epilog=LEADERBOARD_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, metavar="STORE", help="a split corpus store")
    p.add_argument("--out", required=True, metavar="DIR", help="report folder")
    p.add_argument("--programs", type=int, default=10, help="programs per kind (default 10)")
    p.add_argument("--seconds", type=float, default=5.0, help="wall seconds per search and program (default 5)")
    p.add_argument("--budget", type=int, default=50, help="recommend_pipeline's compilations (default 50)")
    p.add_argument("--split", default="test")
    p.add_argument("--max-instructions", type=int, default=20_000, help="largest module (default 20,000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_leaderboard)
