"""The ``bpq`` command. Human-readable output by default, ``--json`` for machines; bad input gives a one-line
error and a non-zero exit, never a traceback (set BPQ_DEBUG=1 to see one).

Each command group lives in its own module of ``behavioral_pq.cli`` (argparse and printing only) and registers
its parsers through ``add_parsers``; library modules load inside each command, so ``bpq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from typing import List, Optional

from behavioral_pq._version import __version__
from behavioral_pq.cli import core, corpus, downstream, encoder, env, guidance, lowering, probes, ranker
from behavioral_pq.cli.common import PASSES_EPILOG, error_line, is_bad_input

EXIT_ERROR = 2     # bad input
EXIT_FAILURE = 1   # a failure during the work

#: Command groups in the order ``bpq --help`` lists them.
GROUPS = (core, corpus, probes, encoder, downstream, guidance, ranker, lowering, env)


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


#: Options whose value may start with "-" (a pass flag, a link flag): ``--passes -sroa`` is read as
#: ``--passes=-sroa``, ``--ldflags -lz`` as ``--ldflags=-lz``.
DASH_VALUE_OPTIONS = ("--passes", "--ldflags")
#: Options of many values whose one value may start with "-" (a program's flag, ``--run-args '-i/in.txt'``), where
#: it is the last value: followed by nothing or by another option (``--run-args -n 3`` stays an error, since the
#: ``3`` would be read as a FILE).
DASH_LAST_VALUE_OPTIONS = ("--run-args",)


def join_dash_values(argv: List[str]) -> List[str]:
    """``--passes -sroa`` -> ``--passes=-sroa``, ``--run-args -v -o x`` -> ``--run-args=-v -o x`` (argparse
    would take ``-sroa`` and ``-v`` for options)."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        dashed = i + 1 < len(argv) and argv[i + 1].startswith("-") and not argv[i + 1].startswith("--")
        last = i + 2 >= len(argv) or argv[i + 2].startswith("-")
        if dashed and (argv[i] in DASH_VALUE_OPTIONS or (argv[i] in DASH_LAST_VALUE_OPTIONS and last)):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``bpq``. Exit status: 0 done, 2 bad input (file, IR, source, option), 1 a failure during the work
    (a pass crash or timeout, a tool or endpoint failing); errors are one line, ``bpq: error: <what>: <why>``."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parser.parse_known_args(join_dash_values(argv))
    if extra:
        # argparse gives an optional FILE... after another positional (``predict oz --link a.c b.c``) nothing
        # and leaves the files over: they are the FILEs still.
        if isinstance(getattr(args, "files", None), list) and not any(e.startswith("-") for e in extra):
            args.files += extra
        else:
            dashed = [e for e in extra if e.startswith("-")]
            hint = (f" (a flag of the checked program goes in one quoted value, --run-args '{' '.join(dashed)}', "
                    f"or as --run-args={dashed[0]})" if dashed and "--run-args" in argv else "")
            verb_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    debug = bool(os.environ.get("BPQ_DEBUG"))
    if not debug:   # a warning is one line, as an error is, without the line of library code that raised it
        warnings.formatwarning = _one_line_warning
    if not debug:   # the library logs what the CLI also prints; one line per problem is enough
        logging.getLogger("behavioral_pq").addHandler(logging.NullHandler())
        logging.getLogger("behavioral_pq").propagate = False
    if getattr(args, "no_cache", False):
        os.environ["BPQ_NO_CACHE"] = "1"
    if getattr(args, "unsafe_run", False):
        os.environ["BPQ_UNSAFE_RUN"] = "1"
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
        if debug:
            raise
        print(error_line(exc), file=sys.stderr)
        return EXIT_ERROR if is_bad_input(exc) else EXIT_FAILURE


def verb_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of one verb (``bpq compile``), whose usage an error about that verb's options shows; the whole
    parser where there is none."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"bpq: warning: {' '.join(str(message).split())}\n"


if __name__ == "__main__":
    sys.exit(main())
