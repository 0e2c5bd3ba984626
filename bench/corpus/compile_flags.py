"""What the allow-list of compile flags keeps of real compile databases, next to the deny-list it replaced.

    python bench/corpus/compile_flags.py build/compile_commands.json [...] [--compile] [--json OUT]

For each ``compile_commands.json``: its entries (clang's own ``-cc1`` jobs left out, as ``bpq corpus build``
leaves them out), the units the old deny-list took (one per entry: it refused the whole file only for ``-fplugin``,
``-fpass-plugin``, ``-B`` and ``-Xclang``/``-mllvm -load``), the entries the allow-list accepts and the units it
gives (one per file: a file listed twice, as CMake's static and shared builds list it, is one unit), the refused
flags with their counts, the files listed more than once, and how many accepted entries get other flags than the
deny-list gave them (the allow-list drops a few more: ``-Wa,``, ``-Wp,-MD,FILE``, coverage instrumentation, the
other sources of a command that compiles several). With ``--compile``, every unit is also compiled with the flags
each gives it (clang-19, as ``bpq corpus build`` compiles it), to show the units that compile are the same.
With ``--json OUT`` the rows are written there too (bench/corpus/results/compile_flags.json holds a run).

The deny-list is a copy of ``corpus/inputs.py`` before the allow-list (commit dcb744c), kept here as the baseline.
"""

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

# -- the deny-list of commit dcb744c, verbatim but for the names (the source matcher is the package's) --------
_DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ", "-Xclang-dep", "--serialize-diagnostics", "-Xlinker", "-L", "-l"}
_DROP_EXACT = {"-c", "-S", "-E", "-M", "-MM", "-MD", "-MMD", "-MP", "-emit-llvm", "-pipe", "-g", "-flto", "-Werror"}
_DROP_PREFIX = ("-O", "-g", "-flto=", "-Werror=", "-fprofile", "-fsanitize", "-fcoverage", "-Wl,", "-save-temps")
_LINKER_INPUT = re.compile(r"\.(a|o|lo|la|obj|so|dylib)(\.[0-9.]+)?$")
_LINKER_ONLY_PREFIX = ("-l", "-L", "-fuse-ld=")
_LINKER_ONLY_EXACT = {"-shared", "-static", "-rdynamic", "-pie", "-no-pie", "-nostdlib", "-nodefaultlibs"}
_CODE_LOADING_PREFIX = ("-fplugin", "-fpass-plugin", "--load-pass-plugin", "-B")
_CODE_LOADING_XCLANG = ("-load", "-plugin", "-add-plugin", "-plugin-arg", "-load-pass-plugin")


def old_code_loading_flags(arguments: Sequence[str]) -> List[str]:
    found = []
    for i, arg in enumerate(arguments):
        if arg.startswith(_CODE_LOADING_PREFIX):
            found.append(arg)
        elif arg in ("-Xclang", "-mllvm") and i + 1 < len(arguments) \
                and arguments[i + 1].startswith(_CODE_LOADING_XCLANG):
            found.append(f"{arg} {arguments[i + 1]}")
    return found


def old_clean_arguments(arguments: Sequence[str], file: str, directory: Optional[Path] = None) -> Tuple[str, ...]:
    from behavioral_pq.corpus.inputs import source_matcher

    is_source = source_matcher(file, directory)
    kept: List[str] = []
    skip = False
    for arg in arguments[1:]:
        if skip:
            skip = False
            continue
        if arg in _DROP_WITH_VALUE:
            skip = True
            continue
        if arg in _DROP_EXACT or arg.startswith(_DROP_PREFIX) or is_source(arg) or arg.startswith("-o"):
            continue
        if arg in _LINKER_ONLY_EXACT or arg.startswith(_LINKER_ONLY_PREFIX) \
                or (not arg.startswith("-") and _LINKER_INPUT.search(arg)):
            continue
        kept.append(arg)
    return tuple(kept)


# -- the measurement -----------------------------------------------------------------------------------------------

def flag_name(flag: str) -> str:
    """A refused flag without its value, so that counts group (``-ftime-trace=/x`` -> ``-ftime-trace=``)."""
    if flag.startswith("@"):
        return "@FILE"
    head = flag.split(" ", 1)[0]
    return head.split("=", 1)[0] + "=" if "=" in head else head


def measure(database: Path, compile_units: bool) -> dict:
    from behavioral_pq.corpus.inputs import _FRONTEND_JOBS, _entry_arguments, _read_database, recorded_flags

    entries = _read_database(database)
    rows = []
    for i, entry in enumerate(entries):
        arguments = _entry_arguments(database, i, entry)
        if len(arguments) > 1 and arguments[1] in _FRONTEND_JOBS:
            continue
        directory = Path(entry["directory"])
        file = Path(entry["file"])
        source = str((file if file.is_absolute() else directory / file).resolve())
        screened = recorded_flags(arguments, entry["file"], directory)
        rows.append(dict(source=source, directory=str(directory), old_refused=old_code_loading_flags(arguments),
                         old_flags=old_clean_arguments(arguments, entry["file"], directory),
                         flags=screened.flags, refused=screened.refused))
    old_whole = not any(r["old_refused"] for r in rows)
    new_whole = not any(r["refused"] for r in rows)
    per_file = Counter(r["source"] for r in rows)
    variants = {}
    for r in rows:
        variants.setdefault(r["source"], set()).add((r["directory"], r["flags"]))
    first = {}
    for r in rows:
        first.setdefault(r["source"], r)
    result = {
        "database": str(database), "entries": len(rows),
        "old_entries_accepted": sum(not r["old_refused"] for r in rows),
        "files": len(first), "old_units": len(rows) if old_whole else 0,
        "entries_accepted": sum(not r["refused"] for r in rows),
        "units": len(first) if new_whole else 0,
        "files_listed_twice_or_more": sum(n > 1 for n in per_file.values()),
        "of_them_with_other_flags": sum(len(v) > 1 for v in variants.values()),
        "accepted_entries_with_other_flags_than_before": sum(not r["refused"] and r["flags"] != r["old_flags"]
                                                             for r in rows),
        "refused_flags": dict(Counter(flag_name(f) for r in rows for f, _ in r["refused"]).most_common()),
        "old_refused_flags": dict(Counter(flag_name(f) for r in rows for f in r["old_refused"]).most_common()),
    }
    if compile_units:
        from behavioral_pq.core.toolchain import compile_to_bitcode, language_of
        from behavioral_pq.errors import BPQError

        def compiles(source: str, flags, directory: str) -> bool:
            try:
                compile_to_bitcode(Path(source), language=language_of(Path(source)), flags=flags, cwd=directory)
                return True
            except BPQError:
                return False

        old_ok = sum(compiles(r["source"], r["old_flags"], r["directory"]) for r in rows) if old_whole else 0
        new_ok = sum(compiles(r["source"], r["flags"], r["directory"]) for r in first.values()) if new_whole else 0
        result.update(old_units_compiled=old_ok, units_compiled=new_ok)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("databases", nargs="+", metavar="JSON", help="compile_commands.json files")
    parser.add_argument("--compile", action="store_true", help="also compile every unit both ways")
    parser.add_argument("--json", metavar="OUT", help="write the rows to this file too")
    args = parser.parse_args()

    results = [measure(Path(d), args.compile) for d in args.databases]
    for r in results:
        compiled = (f", compiled {r['old_units_compiled']} -> {r['units_compiled']}" if "units_compiled" in r
                    else "")
        print(f"{r['database']}: {r['entries']} entries of {r['files']} files; units: deny-list {r['old_units']}, "
              f"allow-list {r['units']} ({r['entries_accepted']} entries accepted, "
              f"{r['files_listed_twice_or_more']} files listed twice or more, {r['of_them_with_other_flags']} with "
              f"other flags){compiled}; {r['accepted_entries_with_other_flags_than_before']} accepted entries get "
              "other flags than before")
        if r["refused_flags"]:
            print("  refused: " + ", ".join(f"{f} x{n}" for f, n in r["refused_flags"].items()))
    if args.json:
        common.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
