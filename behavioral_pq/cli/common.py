"""What every command group shares: JSON printing, the ``--passes`` syntax, program arguments (several files,
flags, a compile_commands.json), output checks and the one error format."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from behavioral_pq.core.catalog import MEANING_CHANGING, PASSES, resolve_pipeline
from behavioral_pq.core.files import (  # check_output_folder: for the verbs with --out DIR
    check_output_file,
    check_output_folder,  # noqa: F401
    write_bytes_atomic,
)
from behavioral_pq.core.toolchain import check_link_flags, failure_lines
from behavioral_pq.errors import CompileError

PASSES_EPILOG = """\
passes: catalog flags ("--passes='-sroa -gvn'" or "--passes=-sroa,-gvn"), catalog indices ("--passes 1,57"),
Oz / Os / O3 / O2 / O1 / O0 (O0: none; joins a program's files into one module), Oz-outline (-Oz, LLVM's IR
outliner, -Oz again: for size), or a raw LLVM new-PM pipeline ("--passes 'function(sroa),gvn'").
Environment: BPQ_WORKERS (worker processes), BPQ_TIMEOUT (seconds per pipeline run), BPQ_DEBUG=1 (tracebacks).
"""

PROGRAM_EPILOG = """\
programs: one FILE, or several compiled and linked into one module (bpq features tok.c main.c -I include);
-I/-D/--cflags go to clang; --compile-commands build/compile_commands.json takes each FILE's recorded flags
(with no FILE: every unit it lists, linked); --compile-commands DB --program NAME takes one program of a project
(the unit with NAME's main and the units it needs; NAME: its build target, e.g. cmark, or its main file).
embed and predict take each FILE as its own module unless --link, --compile-commands or --program make them one
program.
"""


def print_json(data) -> None:
    print(json.dumps(data, indent=1))


def parse_passes(text: str) -> str:
    """A ``--passes`` value as a new-PM pipeline: catalog indices ("1,57") or what ``resolve_pipeline`` takes.
    Passes that change what the program does (``catalog.MEANING_CHANGING``) are run as asked, with a note on
    stderr."""
    parts = text.replace(",", " ").split()
    indices = bool(parts) and all(p.isdigit() for p in parts)
    pipeline = resolve_pipeline([int(p) for p in parts]) if indices else resolve_pipeline(text)
    flags = [PASSES[int(p)].flag for p in parts] if indices else parts
    for flag in dict.fromkeys(f for f in flags if f in MEANING_CHANGING):
        print(f"bpq: note: {flag} changes what the program does ({MEANING_CHANGING[flag]}); pipeline searches "
              "never choose it", file=sys.stderr)
    return pipeline


# -- programs: one module from several files, flags or a compile_commands.json -----------------------------------

def add_program_arguments(parser: argparse.ArgumentParser, *, several_modules: bool = False,
                          links: bool = False) -> None:
    """FILE... plus the flags a program needs. With ``several_modules`` each FILE is its own module (``embed``,
    ``predict``) unless ``--link``, ``--compile-commands`` or ``--program`` make them one program; otherwise the
    files are one program, compiled and linked into one module. ``links``: the verb links the program (``compile``,
    ``lower``'s checked runs), so it takes ``--ldflags`` (:func:`program_link_flags`)."""
    if several_modules:
        parser.add_argument("files", metavar="FILE", nargs="*",
                            help=".c/.cc/.cpp/.ll/.bc files, one module each (with --link: one program)")
    else:
        parser.add_argument("files", metavar="FILE", nargs="*",
                            help=".c/.cc/.cpp/.ll/.bc files of one program (several are compiled and linked)")
    group = parser.add_argument_group("compiling C/C++ and whole programs")
    group.add_argument("-I", dest="include", action="append", default=[], metavar="DIR", help="include folder")
    group.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]", help="macro")
    group.add_argument("--cflags", metavar="FLAGS", help="more clang flags, e.g. --cflags='-std=c11 -w'")
    if links:
        group.add_argument("--ldflags", metavar="FLAGS",
                           help="libraries the program links with besides libc and libm, for the checked runs and "
                                "the executable, e.g. --ldflags=-lreadline or --ldflags='-L lib -lfoo' (allowed: -l, "
                                "-L, -pthread, -rdynamic, -static and -Wl, options that only shape the executable; a "
                                "compile database's own -l/-L flags for the program are added)")
    group.add_argument("--link", action="store_true",
                       help="the FILEs are one program: compile and link them into one module"
                            + ("" if several_modules else " (always so for this verb)"))
    group.add_argument("--compile-commands", metavar="JSON",
                       help="take the flags of each FILE from a compile_commands.json; with no FILE, every unit it "
                            "lists, linked into one program" + (" (one module)" if several_modules else ""))
    group.add_argument("--allow-plugins", action="store_true",
                       help="with --compile-commands: take every flag it gives, not only those known to be safe (by "
                            "default a flag that could load code into clang, run other programs, read flags from a "
                            "file or write files, or any unknown flag, refuses the file)")
    group.add_argument("--program", metavar="NAME",
                       help="with --compile-commands: one program with the units it needs, as a static link or "
                            "`bpq corpus link` finds them: NAME is its build target where the database shows it "
                            "(cmark), else its main file's stem, or the path of its main file (src/main.c, from the "
                            "project or the current folder); a wrong or ambiguous NAME lists the programs")
    parser.add_argument("--no-cache", action="store_true",
                        help="measure spectra again instead of reading the spectrum cache (also: BPQ_NO_CACHE=1)")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``--target`` and ``--cpu``: where the passes (and llc) compile for (see behavioral_pq.core.target)."""
    parser.add_argument("--target", default=None, metavar="TRIPLE",
                        help="target mode for this triple: 'host' (default: this machine, its CPU and features, as "
                             "clang -march=native), a triple such as x86_64-pc-linux-gnu, or 'measure' for measure "
                             "mode (no target machine, as labels and spectra are made)")
    parser.add_argument("--cpu", metavar="NAME", help="CPU to compile for (default: the host's with --target host, "
                                                       "else generic), e.g. x86-64-v3, znver4, skylake")


def cli_target(args):
    """The Target ``--target``/``--cpu`` name, or None for measure mode."""
    from behavioral_pq.core.target import resolve_target

    if args.target == "measure" and args.cpu:
        raise ValueError("--cpu has no meaning with --target measure")
    return resolve_target(args.target or "host", args.cpu)


def size_target(args, target):
    """The target of a size build: ``target``, or, when the user named no CPU (``--target host``), the host
    keeping the CPU each function was compiled for (:meth:`~behavioral_pq.core.target.Target.module_cpus`)."""
    from behavioral_pq.core.target import Target

    if target is not None and args.target in (None, "host") and args.cpu is None:
        return Target.module_cpus()
    return target


def program_flags(args) -> List[str]:
    """The clang flags of ``-I``, ``-D`` and ``--cflags``."""
    flags = [f"-I{d}" for d in args.include] + [f"-D{d}" for d in args.define]
    return flags + shlex.split(args.cflags or "")


def load_program(args):
    """The one module of a program verb's FILE arguments (see :func:`add_program_arguments`)."""
    from behavioral_pq.core.module import load_module
    from behavioral_pq.corpus.inputs import module_from_compile_commands

    flags = program_flags(args)
    program = getattr(args, "program", None)
    if program is not None:
        if not getattr(args, "compile_commands", None) or args.files:
            raise ValueError("--program picks a program of --compile-commands JSON: give both, and no FILE")
        from behavioral_pq.corpus.programs import project_program

        found = project_program(args.compile_commands, program, flags=flags,
                                allow_plugins=getattr(args, "allow_plugins", False))
        args.recorded_ldflags = found.link_flags     # for program_link_flags
        return found.module
    if getattr(args, "compile_commands", None):
        return module_from_compile_commands(args.compile_commands, files=args.files, flags=flags,
                                            allow_plugins=getattr(args, "allow_plugins", False))
    if not args.files:
        raise ValueError("give FILE (or --compile-commands JSON)")
    return load_module(args.files[0] if len(args.files) == 1 else list(args.files), flags=flags)


def program_link_flags(args) -> List[str]:
    """The link flags of ``--ldflags`` (split as a shell would, checked:
    :func:`~behavioral_pq.core.toolchain.check_link_flags`), then those the compile database records for the
    ``--program`` :func:`load_program` loaded (checked already)."""
    given = check_link_flags(shlex.split(getattr(args, "ldflags", None) or ""), what="--ldflags")
    return list(given) + list(getattr(args, "recorded_ldflags", ()))


def program_inputs(args) -> List[tuple]:
    """``(label, input)`` pairs of a verb that takes many modules (``embed``, ``predict``): each FILE its own
    module (the input is the path, loaded by the verb so that one failure does not stop the others), or one linked
    program (the input is its Module) with ``--link``, ``--compile-commands`` or ``--program``."""
    if getattr(args, "link", False) or getattr(args, "compile_commands", None) or getattr(args, "program", None):
        if getattr(args, "link", False) and (args.compile_commands or args.program):
            raise ValueError("--link joins FILEs; --compile-commands/--program take the program from a database: "
                             "give one of them")
        module = load_program(args)
        return [(module.name, module)]
    if not args.files:
        raise ValueError("give FILE (or --link FILE..., or --compile-commands JSON [--program NAME])")
    return [(str(f), str(f)) for f in args.files]


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    """``--overwrite`` for a verb that writes a file the user names (see :func:`check_output`)."""
    parser.add_argument("--overwrite", action="store_true",
                        help="let an output path be a symbolic link and write its target (by default refused; a "
                             "regular file is always replaced, all at once)")


def check_output(path, overwrite: bool = False) -> Optional[Path]:
    """The file to write for an output option (None when it was not given), refused before any work starts when
    it cannot or must not be written: no folder, a folder that takes no files, a folder, a device or FIFO, or a
    symbolic link without ``--overwrite`` (see :func:`behavioral_pq.core.files.check_output_file`)."""
    if path is None:
        return None
    return check_output_file(path, overwrite=overwrite)


def save_array(path: Path, array) -> None:
    """``np.save`` of ``array`` to exactly ``path`` (numpy would add ``.npy`` to a name without it), all at once."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    write_bytes_atomic(path, buffer.getvalue())


# -- errors ------------------------------------------------------------------------------------------------------

def is_bad_input(exc: BaseException) -> bool:
    """Whether an error is the user's input (exit 2) rather than a failure during the work (exit 1)."""
    return isinstance(exc, (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
                            CompileError))


def error_line(exc: BaseException, what: Optional[str] = None) -> str:
    """``bpq: error: <what>: <why>`` on one line; ``what`` is added only when the message does not start with it.
    A message of several lines (a tool's output) gives its first line and, after `` | ``, the later lines that
    name what failed (an undefined reference, a library not found, a compiler's ``error:``; see
    :func:`~behavioral_pq.core.toolchain.failure_lines`), so the line says why a link failed, not only where."""
    text = str(exc).strip()
    lines = text.splitlines()
    message = (" | ".join([lines[0].strip()] + failure_lines("\n".join(lines[1:]), lines=4, limit=300)) if text
               else type(exc).__name__)
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in message:
        message = f"{exc.filename}: {message}"
    if what and not message.startswith((str(what), Path(str(what)).name)):
        message = f"{what}: {message}"
    return f"bpq: error: {message}"


def batch_exit_code(errors: Sequence[Optional[BaseException]]) -> int:
    """0 when every item succeeded; 2 when none did and every failure is bad input; else 1."""
    failures = [e for e in errors if e is not None]
    if not failures:
        return 0
    return 2 if len(failures) == len(errors) and all(is_bad_input(e) for e in failures) else 1
