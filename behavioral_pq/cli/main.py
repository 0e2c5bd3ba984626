"""The ``bpq`` command. Human-readable output by default, ``--json`` for machines; bad input gives a one-line
error and a non-zero exit, never a traceback (set BPQ_DEBUG=1 to see one).

Each command group lives in its own module of ``behavioral_pq.cli`` (argparse and printing only) and registers
its parsers through ``add_parsers``; library modules load inside each command, so ``bpq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from behavioral_pq._version import __version__
from behavioral_pq.cli import core, corpus, downstream, encoder, guidance, lowering, probes
from behavioral_pq.cli.common import PASSES_EPILOG

EXIT_ERROR = 2

#: Command groups in the order ``bpq --help`` lists them.
GROUPS = (core, corpus, probes, encoder, downstream, guidance, lowering)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bpq", description="Behavioral embeddings of LLVM IR modules (LLVM 19). FILE is .ll, .bc, .c or .cpp.",
        epilog=PASSES_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"behavioral_pq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("bpq: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (ValueError, OSError, RuntimeError, TimeoutError) as exc:  # BPQError subclasses these
        if os.environ.get("BPQ_DEBUG"):
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in message:
            message = f"{exc.filename}: {message}"
        print(f"bpq: error: {message}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
