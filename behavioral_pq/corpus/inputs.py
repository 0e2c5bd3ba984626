"""What goes into a corpus: discovering input programs and turning each into raw (unprepared) LLVM bitcode.

An :class:`InputItem` is one future module: one file, all translation units of one directory linked together, or
one translation unit of a ``compile_commands.json``. Its ``key`` is a hash of everything that determines its
result (kind, paths, file contents, flags), so a corpus build can tell what it has already done.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import re
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from behavioral_pq.artifacts import read_json_bounded
from behavioral_pq.config import read_bounded
from behavioral_pq.core.module import IR_FILE_LIMIT, Module, load_module
from behavioral_pq.core.toolchain import C_SUFFIXES, CXX_SUFFIXES, compile_to_bitcode, link_bitcode
from behavioral_pq.corpus.buckets import project_origin
from behavioral_pq.errors import CompileCommandsError, CompileError

logger = logging.getLogger(__name__)

IR_SUFFIXES = (".ll", ".bc")
SOURCE_SUFFIXES = tuple(C_SUFFIXES) + tuple(CXX_SUFFIXES) + IR_SUFFIXES
GROUPINGS = ("file", "directory")


@dataclass(frozen=True)
class InputItem:
    """One future module of a corpus.

    Attributes:
        key: sha256 hex of kind, paths, contents and flags: equal keys give equal results.
        sources: absolute paths of the files making up the module (several: linked with llvm-link-19).
        language: ``"c"``, ``"c++"`` or None (from each file's suffix; ``.ll``/``.bc`` are read as IR).
        flags: extra clang flags (``-I``, ``-D``, ``-std=...``).
        cwd: directory clang runs in (compile_commands entries), or None.
        origin: corpus label, e.g. ``"jotai"``.
        group: program group used by splits: items of one group never land on both sides of a split.
    """

    key: str
    sources: Tuple[str, ...]
    language: Optional[str]
    flags: Tuple[str, ...]
    cwd: Optional[str]
    origin: str
    group: str


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def make_item(sources: Sequence[Path], *, language: Optional[str], flags: Sequence[str], cwd: Optional[str],
              origin: str, group: str) -> InputItem:
    """An InputItem whose key covers the files' paths and contents, the language and the flags. A file that does
    not exist (a generated source a build did not make) or is not a regular file (a FIFO is never opened) keys as
    missing: compiling it then fails as that item's own failure, and once the file exists the item is new."""
    paths = tuple(str(Path(s).resolve()) for s in sources)
    parts: List[bytes] = [b"bpq-input-1", (language or "").encode(), (cwd or "").encode()]
    parts += [f.encode() for f in flags]
    for p in paths:
        parts.append(p.encode())
        try:
            parts.append(read_bounded(p, limit=IR_FILE_LIMIT, what="source", error=OSError))
        except OSError:
            parts.append(b"\0bpq: missing file")
    return InputItem(_digest(parts), paths, language, tuple(flags), cwd, origin, group)


def _special_file(path: Path) -> Optional[str]:
    """What ``path`` is when it exists but is not a regular file or a folder (a link is followed): ``"a FIFO"``,
    ``"a device"``, ``"a socket"``; None otherwise (a missing file or a broken link included)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _group_of(relative: str, regex: Optional[re.Pattern]) -> str:
    if regex is None:
        return relative
    match = regex.search(relative)
    if not match:
        return relative
    return match.group(1) if match.groups() else match.group(0)


def discover(sources: Sequence[os.PathLike], *, per: str = "file", language: Optional[str] = None,
             flags: Sequence[str] = (), include: Sequence[os.PathLike] = (), origin: Optional[str] = None,
             group_regex: Optional[str] = None) -> Iterator[InputItem]:
    """Yield the input items under ``sources`` (files or directories), in a stable sorted order.

    Args:
        per: ``"file"`` (one module per file) or ``"directory"`` (the files directly in each directory linked
            into one module).
        language: force ``"c"`` or ``"c++"`` for every non-IR file (default: from the suffix).
        flags, include: extra clang flags and ``-I`` directories.
        origin: corpus label (default: the name of each source argument).
        group_regex: regular expression applied to a file's path relative to its source argument; its first
            capture group (or the whole match) names the program group. Default: the relative path itself.

    A file under a directory that is not a regular file (a FIFO, a device, a socket) is yielded all the same and
    never opened: :func:`load_bitcode` refuses it, so a corpus build records it as a failed row.

    Raises:
        FileNotFoundError: a source does not exist. ValueError: bad ``per`` or ``group_regex``, or a source that
        is neither a regular file nor a directory.
    """
    if per not in GROUPINGS:
        raise ValueError(f"per must be one of {GROUPINGS}, not {per!r}")
    regex = re.compile(group_regex) if group_regex else None
    all_flags = tuple(flags) + tuple(f"-I{Path(d).resolve()}" for d in include)
    for source in sources:
        root = Path(source)
        if not root.exists():
            raise FileNotFoundError(f"no such file or directory: {root}")
        kind = _special_file(root)
        if kind is not None:
            raise ValueError(f"{root}: is {kind}, not a source file or a directory; not read")
        label = origin or root.resolve().name
        if root.is_file():
            yield make_item([root], language=language, flags=all_flags, cwd=None, origin=label,
                            group=_group_of(root.name, regex))
            continue
        for directory, subdirs, files in os.walk(root):
            subdirs.sort()
            chosen = sorted(f for f in files if f.endswith(SOURCE_SUFFIXES) or (language and _is_source(f)))
            if not chosen:
                continue
            base = Path(directory)
            if per == "file":
                for name in chosen:
                    relative = str((base / name).relative_to(root))
                    yield make_item([base / name], language=language, flags=all_flags, cwd=None, origin=label,
                                    group=_group_of(relative, regex))
            else:
                relative = str(base.relative_to(root)) if base != root else "."
                yield make_item([base / n for n in chosen], language=language, flags=all_flags, cwd=None,
                                origin=label, group=_group_of(relative, regex))


def _is_source(name: str) -> bool:
    return name.endswith(SOURCE_SUFFIXES)


# -- flags of a recorded build ------------------------------------------------------------------------------------
#
# A compile_commands.json is a third-party file, and clang does more with flags than compile: load plugins, read
# more flags from files, run other programs, write files. So the flags it gives are screened against an
# allow-list: the flags that ours replace (output, dependency files, optimization and debug levels,
# instrumentation) and the link's inputs are dropped first (clang never sees them); every other flag must be one
# known to be safe (a define, a folder to search, a header to read, a language standard, a warning, a code
# generation or target option that names no path), or the whole file is refused, naming the entry, the file and
# the flag. ``allow_plugins=True`` (``--allow-plugins``) keeps every flag that is not dropped, unscreened.

# Flags of a recorded build that do not belong in IR generation: output, dependency files, optimization and
# debug levels (ours replace them), instrumentation, and things that would make clang do something other than
# emit one module.
_DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ", "-Xclang-dep", "--serialize-diagnostics", "-Xlinker", "-L", "-l"}
_DROP_EXACT = {"-c", "-S", "-E", "-M", "-MM", "-MD", "-MMD", "-MP", "-MG", "-emit-llvm", "-pipe", "-g", "-flto",
               "-Werror", "--coverage", "-ftest-coverage", "-pg"}
# Options for the assembler (``-Wa,--noexecstack``) are dropped too: making bitcode never assembles, and clang
# would turn some of them into front-end options (``-Wa,-mllvm,...``).
_DROP_PREFIX = ("-O", "-g", "-flto=", "-Werror=", "-fprofile", "-fsanitize", "-fcoverage", "-Wl,", "-Wa,",
                "-save-temps", "--save-temps", "-fcs-profile", "-fauto-profile", "-fmemory-profile", "-fxray")
# A dependency file asked of the preprocessor (``-Wp,-MD,.deps/a.d``, as the Linux kernel's build does).
_DEPENDENCY_WP = re.compile(r"-Wp,-M{1,2}D,[^,]+")
# A command that compiles and links in one step (``cc -o tool tool.c libutil.a -lm``, as Make rules often do and
# Bear records) also names the link's inputs; with ``-x c`` in front of them clang would compile those too.
_LINKER_INPUT = re.compile(r"\.(a|o|lo|la|obj|so|dylib)(\.[0-9.]+)?$")
_LINKER_ONLY_PREFIX = ("-l", "-L", "-fuse-ld=", "-rtlib=", "-unwindlib=")
_LINKER_ONLY_EXACT = {"-shared", "-static", "-rdynamic", "-pie", "-no-pie", "-static-pie", "-nostdlib",
                      "-nodefaultlibs", "-nostartfiles", "-static-libgcc", "-static-libstdc++"}
# The other sources of a command that compiles several (each has its own entry).
_OTHER_SOURCE = tuple(SOURCE_SUFFIXES) + (".s", ".S", ".sx", ".asm")
# Jobs the clang driver runs itself, recorded by tools that watch every process (Bear): the driver's own
# command for the same source is in the database too.
_FRONTEND_JOBS = {"-cc1", "-cc1as"}

_HEADER = re.compile(r"[^@]*\.(h|hh|hpp|hxx|h\+\+|inc|def)")
_STANDARD = re.compile(r"[A-Za-z0-9+]+")
_TRIPLE = re.compile(r"[A-Za-z0-9_.-]+")
_LANGUAGES = {"c", "c++", "cpp-output", "c++-cpp-output"}


def _anything(value: str) -> bool:
    return bool(value)


# Allowed flags with a value, joined (``-Iinclude``, ``-std=c99``) or as the next argument (``-I include``): the
# flag and what its value may be. A folder to search or a define may be anything; ``-include`` may only name a
# header (it reads the file as C); ``-x`` only C or C++. Longest first, so ``-iwithprefixbefore`` is not read as
# ``-iwithprefix`` with a value.
_VALUE_FLAGS = sorted({
    "-I": _anything, "-isystem": _anything, "-iquote": _anything, "-idirafter": _anything,
    "-cxx-isystem": _anything, "-iprefix": _anything, "-iwithprefix": _anything, "-iwithprefixbefore": _anything,
    "-isysroot": _anything, "--sysroot": _anything, "-D": _anything, "-U": _anything,
    "-include": _HEADER.fullmatch, "-imacros": _HEADER.fullmatch, "-x": _LANGUAGES.__contains__,
    "-target": _TRIPLE.fullmatch, "--target": _TRIPLE.fullmatch, "-std": _STANDARD.fullmatch,
    "--std": _STANDARD.fullmatch, "-stdlib": _STANDARD.fullmatch,
}.items(), key=lambda kv: -len(kv[0]))
# Of those, the ones clang also takes with the value as the next argument (the others only joined, ``-std=c99``).
_SEPARATE_VALUE = {"-I", "-isystem", "-iquote", "-idirafter", "-cxx-isystem", "-iprefix", "-iwithprefix",
                   "-iwithprefixbefore", "-isysroot", "--sysroot", "-D", "-U", "-include", "-imacros", "-x",
                   "-target", "--std"}
# Joined with "=" (``--sysroot=DIR``), not directly (``-isysrootDIR`` is also fine for clang, ``-stdc99`` is not).
_EQUALS_ONLY = {"--sysroot", "--target", "-std", "--std", "-stdlib"}

_SAFE_EXACT = {"-pthread", "-ansi", "-pedantic", "-pedantic-errors", "--pedantic", "--pedantic-errors", "-w",
               "-nostdinc", "-nostdinc++", "-nostdlibinc", "-nobuiltininc", "-undef", "-C", "-CC", "-P",
               "-trigraphs", "-integrated-as", "-no-canonical-prefixes", "-Qunused-arguments"}
# Code generation options (``-fPIC``, ``-fvisibility=hidden``), target options (``-march=native``, ``-mavx2``)
# and warnings (``-Wall``, ``-Wno-unused``, ``-Wframe-larger-than=4096``), with a value that names no path:
# the ones among them that load code, read or write files or run programs are refused first (_REFUSED).
_SAFE_PATTERN = re.compile(r"-f[A-Za-z0-9][A-Za-z0-9+_.-]*(=[^/\\]*)?|-m[A-Za-z0-9][A-Za-z0-9+_.-]*(=[^/\\]*)?"
                           r"|-W[A-Za-z0-9+_#-]*(=[A-Za-z0-9+_.#-]*)?")
# -f flags whose value is a path that is only written into debug information or macros (or a seed, as Bazel
# gives), never opened.
_PATH_STRINGS = ("-fdebug-prefix-map=", "-fmacro-prefix-map=", "-ffile-prefix-map=", "-fdebug-compilation-dir=",
                 "-ffile-compilation-dir=", "-frandom-seed=")

_LOADS = "loads code into clang"
_RUNS = "makes clang run other programs"
_WRITES = "makes clang write files"
_READS = "makes clang read a file given by the build file"
# Flags refused with the reason, by prefix (checked after the dropped ones, before the allowed ones). The table
# names the dangerous flags a reader would look for; anything else not allowed is refused all the same.
_REFUSED = (
    ("@", "reads more flags from a response file"), ("--config", "reads more flags from a configuration file"),
    ("--no-default-config", "changes which configuration file clang reads"),
    ("-Xclang", "passes options to clang's front end unchecked"), ("-mllvm", "passes options to LLVM unchecked"),
    ("-X", "passes options to another tool unchecked"), ("-Wp,", "passes options to the preprocessor unchecked"),
    ("-fplugin", _LOADS), ("-fpass-plugin", _LOADS),
    ("-B", _RUNS), ("--prefix", _RUNS), ("-ccc-", _RUNS), ("--gcc-toolchain", _RUNS), ("--gcc-install-dir", _RUNS),
    ("--ld-path", _RUNS), ("-fno-integrated-as", _RUNS), ("-no-integrated-as", _RUNS), ("-fno-integrated-cc1", _RUNS),
    ("-ftime-trace", _WRITES), ("-fproc-stat-report", _WRITES), ("-foptimization-record", _WRITES),
    ("-fsave-optimization-record", _WRITES), ("-fcrash-diagnostics", _WRITES), ("-fstack-usage", _WRITES),
    ("-save-stats", _WRITES), ("--save-stats", _WRITES), ("-MJ", _WRITES), ("-fdump", _WRITES),
    ("-module-", _WRITES), ("-fmodule", "reads and writes a module cache"), ("-fimplicit-module", _WRITES),
    ("-fcxx-modules", _WRITES), ("-fbuiltin-module-map", _READS), ("-fprebuilt-", _READS), ("-fpch", _WRITES),
    ("-include-pch", _READS), ("-ivfsoverlay", _READS), ("-fembed-offload-object", _READS),
    ("-fbuild-session-file", _READS), ("-frandomize-layout-seed-file", _READS), ("-fdepfile-entry", _READS),
    ("-fexperimental-sanitize-metadata", _READS), ("-fbasic-block-sections=list", _READS),
    ("-fthinlto-index", _READS), ("-fthin-link-bitcode", _WRITES), ("-fhip-dump", _WRITES),
    ("-fbootclasspath", _READS), ("-fclasspath", _READS), ("-fextdirs", _READS), ("-fcompile-resource", _READS),
    ("-foutput-class-dir", _WRITES), ("-fopenmp-targets", _RUNS), ("-foffload", _RUNS), ("--offload", _RUNS),
    ("-specs", _READS), ("--embed-dir", _READS), ("-mlink", _READS),
)
# Refused flags that take the next argument as their value: named together (``-Xclang -load``).
_REFUSED_WITH_VALUE = {"-Xclang", "-mllvm", "-Xassembler", "-Xpreprocessor", "-Xanalyzer", "-Xopenmp-target",
                       "-B", "--prefix", "--config", "-MJ", "-include-pch", "-ivfsoverlay", "-module-dependency-dir"}


@dataclass(frozen=True)
class RecordedFlags:
    """The flags of one recorded command, screened.

    Attributes:
        flags: what clang gets (with ``allow_plugins``): the command without the compiler, the source, the
            dropped flags and the link's inputs; refused flags included, in their place.
        refused: ``(flag, reason)`` for each flag off the allow-list, a flag taking the next argument named with
            it (``"-Xclang -load"``). Empty: every flag in ``flags`` is known to be safe.
    """

    flags: Tuple[str, ...]
    refused: Tuple[Tuple[str, str], ...]


def _refused_reason(arg: str) -> Optional[str]:
    for prefix, reason in _REFUSED:
        if arg.startswith(prefix):
            return reason
    return None


@functools.lru_cache(maxsize=1 << 16)     # a database repeats its flags in every entry
def _allowed(arg: str) -> bool:
    """Whether a flag (one argument, its value joined) is on the allow-list."""
    if arg.startswith("-Wp,"):    # defines for the preprocessor (-Wp,-D_FORTIFY_SOURCE=2, as distributions add)
        return all(len(part) > 2 and part.startswith(("-D", "-U")) for part in arg[4:].split(","))
    if _refused_reason(arg) is not None:
        return False
    if arg in _SAFE_EXACT:
        return True
    for flag, check in _VALUE_FLAGS:
        if arg.startswith(flag) and len(arg) > len(flag):
            value = arg[len(flag):]
            if flag in _EQUALS_ONLY:
                if not value.startswith("="):
                    continue
                value = value[1:]
            return bool(check(value))
    if _SAFE_PATTERN.fullmatch(arg):
        return True
    return arg.startswith(_PATH_STRINGS)


@functools.lru_cache(maxsize=1 << 12)
def _refusal(arg: str) -> str:
    """Why a flag off the allow-list is refused."""
    reason = _refused_reason(arg)
    if reason is not None:
        return reason
    if arg.startswith("-x"):
        return "compiles the unit as another language than C or C++"
    if arg.startswith(("-include", "-imacros")):
        return "reads a file that is not a header"
    if arg.startswith(("-f", "-m", "-W")) and "=" in arg:
        return "names a path"
    if not arg.startswith("-"):
        return "is an input other than the entry's file"
    return "is not on the allow-list of flags taken from a build file"


def _without_precompiled_header(arguments: Sequence[str]) -> List[str]:
    """CMake's precompiled header for clang (``-Xclang -include-pch -Xclang H.pch -Xclang -include -Xclang H``):
    the ``.pch`` dropped (clang would load it), the header it was made from included as ``-include H``."""
    out: List[str] = []
    i = 0
    while i < len(arguments):
        four = arguments[i:i + 4]
        if len(four) == 4 and four[0] == four[2] == "-Xclang" and four[1] in ("-include-pch", "-include"):
            out += ["-include", four[3]] if four[1] == "-include" else []
            i += 4
        else:
            out.append(arguments[i])
            i += 1
    return out


def source_matcher(file: str, directory: Optional[Path] = None):
    """Whether an argument of a recorded command names its source ``file``, however it is spelled (``a.c``,
    ``./src/a.c`` or absolute, relative to the entry's ``directory``)."""
    source = os.path.normpath(str(directory / file if directory is not None and not Path(file).is_absolute()
                                  else Path(file)))

    def is_source(arg: str) -> bool:
        if arg == file:
            return True
        if arg.startswith("-") or directory is None:
            return False
        return os.path.normpath(str(directory / arg) if not Path(arg).is_absolute() else arg) == source

    return is_source


def recorded_flags(arguments: Sequence[str], file: str, directory: Optional[Path] = None) -> RecordedFlags:
    """The flags of a recorded command (``arguments[0]`` is the compiler) for clang, screened against the
    allow-list: without the compiler, the source file (however it is spelled: ``a.c``, ``./src/a.c`` or
    absolute), the flags that ours replace and, for a command that also links, the link's inputs and linker-only
    flags, and a precompiled header (the header it was made from is included instead). Nothing is read or run: a
    response file (``@FILE``) is refused by its name."""
    is_source = source_matcher(file, directory)
    kept: List[str] = []
    refused: List[Tuple[str, str]] = []
    rest = iter(_without_precompiled_header(arguments[1:]))
    for arg in rest:
        if arg in _DROP_WITH_VALUE:
            next(rest, None)
            continue
        if arg in _DROP_EXACT or arg.startswith(_DROP_PREFIX) or is_source(arg) or arg.startswith("-o") \
                or _DEPENDENCY_WP.fullmatch(arg):
            continue
        if arg in _LINKER_ONLY_EXACT or arg.startswith(_LINKER_ONLY_PREFIX):
            continue
        if not arg.startswith(("-", "@")) and (_LINKER_INPUT.search(arg) or arg.endswith(_OTHER_SOURCE)):
            continue
        if arg in _SEPARATE_VALUE:
            value = next(rest, None)
            if value is None:
                refused.append((arg, "lacks its value"))
                kept.append(arg)
                continue
            kept += [arg, value]
            if not _allowed(arg + ("=" if arg in _EQUALS_ONLY else "") + value):
                refused.append((f"{arg} {value}", _refusal(arg + value)))
            continue
        kept.append(arg)
        if _allowed(arg):
            continue
        if arg in _REFUSED_WITH_VALUE:
            value = next(rest, None)
            if value is not None:
                kept.append(value)
                arg = f"{arg} {value}"
        refused.append((arg, _refusal(arg)))
    return RecordedFlags(tuple(kept), tuple(refused))


#: At most this many entries are read from one compile_commands.json (the largest real projects list tens of
#: thousands); past it the file is refused rather than compiled for hours.
MAX_COMPILE_COMMANDS = 100_000
#: At most this many bytes of compile_commands.json are read.
MAX_COMPILE_COMMANDS_BYTES = 1 << 30


def _read_database(path: Path) -> list:
    """The entries of a compile_commands.json: a regular file of at most MAX_COMPILE_COMMANDS_BYTES, JSON nested
    no deeper than :data:`~behavioral_pq.artifacts.JSON_DEPTH_LIMIT` (read as every artifact is:
    :func:`~behavioral_pq.artifacts.read_json_bounded`), a list. Raises FileNotFoundError or CompileCommandsError."""
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no such file: {path}")
    entries = read_json_bounded(path, limit=MAX_COMPILE_COMMANDS_BYTES, what="compile database",
                                error=CompileCommandsError)
    if not isinstance(entries, list):
        raise CompileCommandsError(f"{path}: expected a JSON list of compile commands")
    if len(entries) > MAX_COMPILE_COMMANDS:
        raise CompileCommandsError(f"{path}: {len(entries):,} entries, more than the {MAX_COMPILE_COMMANDS:,} bpq "
                                   "compiles from one database; split it")
    return entries


_PLAIN_COMMAND = re.compile(r"[^'\"\\]*")
_BLANKS = re.compile(r"[ \t\r\n]+")


def _split_command(command: str) -> List[str]:
    """``shlex.split(command)``, at once for a command without quotes or backslashes (most are)."""
    if _PLAIN_COMMAND.fullmatch(command):
        return [word for word in _BLANKS.split(command) if word]
    return shlex.split(command)


def _entry_arguments(path: Path, i: int, entry) -> List[str]:
    """The argument list of entry ``i``, its fields checked."""
    if not isinstance(entry, dict) or "file" not in entry or "directory" not in entry:
        raise CompileCommandsError(f"{path}: entry {i} lacks 'file' or 'directory'")
    if not isinstance(entry["file"], str) or not isinstance(entry["directory"], str):
        raise CompileCommandsError(f"{path}: entry {i}: 'file' and 'directory' must be strings")
    arguments = entry.get("arguments")
    if arguments is None:
        if not isinstance(entry.get("command"), str):
            raise CompileCommandsError(f"{path}: entry {i} has neither 'arguments' nor a 'command' string")
        try:    # splitting only; no shell ever runs
            arguments = _split_command(entry["command"])
        except ValueError as exc:
            raise CompileCommandsError(f"{path}: entry {i} ({entry['file']}): a command shlex cannot split "
                                       f"({exc})") from None
    if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
        raise CompileCommandsError(f"{path}: entry {i}: 'arguments' must be a list of strings")
    return arguments


def from_compile_commands(path: os.PathLike, *, origin: Optional[str] = None, group_regex: Optional[str] = None,
                          project: Optional[str] = None, allow_plugins: bool = False) -> Iterator[InputItem]:
    """Yield one input item per translation unit of a ``compile_commands.json`` (as CMake, Meson or Bear write
    it).

    Each unit keeps its own flags (defines, includes, language standard) and runs in its own directory; the
    output, dependency, optimization, debug and instrumentation flags of the recorded command are dropped for
    ours. A command that compiles and links in one step loses its link inputs (``libutil.a``, ``-lm``); clang's
    own frontend jobs (``clang -cc1 ...``, which Bear records next to the driver's command) are skipped.

    Every other flag must be on the allow-list (:func:`recorded_flags`), or the whole file is refused before
    anything is compiled, naming the entry, its file and the flag: a third-party build file could otherwise load
    code into clang (``-fplugin=``, ``-Xclang -load``), run other programs (``--prefix=DIR
    -fno-integrated-as``), read more flags from files (``@FILE``, ``--config=``) or write files
    (``-ftime-trace=``).

    A file listed more than once (CMake's static and shared builds of one library) gives one unit, its first
    entry's: two units of one file would define every symbol twice in a linked program. Entries with the same
    flags are collapsed silently; entries with other flags are logged.

    Args:
        project: the units are one real program: origin ``project:NAME`` (a *real* program for the reports,
            :mod:`behavioral_pq.corpus.buckets`) and one split group, so a project never straddles train and test
            (unless ``group_regex`` says otherwise).
        allow_plugins: keep every flag that is not dropped, unscreened (the explicit way out for a build file the
            user trusts).
    Raises:
        FileNotFoundError: no such file. CompileCommandsError (a ValueError): a malformed file, more than
        :data:`MAX_COMPILE_COMMANDS` entries, an entry whose folder does not exist, or a refused flag.
        ValueError: both ``origin`` and ``project``.
    """
    if project is not None:
        if origin is not None:
            raise ValueError("give origin or project, not both (a project's origin is 'project:NAME')")
        origin = project_origin(project)
    path = Path(path)
    entries = _read_database(path)
    regex = re.compile(group_regex) if group_regex else None
    label = origin or path.resolve().parent.name
    units = {}      # resolved source -> (source, directory, flags) of the first entry of each file
    conflicts = {}  # resolved source -> entries with other flags
    folders = {}
    for i, entry in enumerate(entries):
        arguments = _entry_arguments(path, i, entry)
        if len(arguments) > 1 and arguments[1] in _FRONTEND_JOBS:
            continue
        directory = Path(entry["directory"])
        file = Path(entry["file"])
        screened = recorded_flags(arguments, entry["file"], directory)
        if screened.refused and not allow_plugins:
            named = "; ".join(f"{flag!r}: it {reason}" for flag, reason in screened.refused[:4])
            more = f"; and {len(screened.refused) - 4} more" if len(screened.refused) > 4 else ""
            raise CompileCommandsError(
                f"{path}: entry {i} ({entry['file']}): refused flag {named}{more}. Nothing was compiled: only flags "
                "known to be safe are taken from a build file (--allow-plugins takes them all, for a build file "
                "you trust)")
        if entry["directory"] not in folders:
            folders[entry["directory"]] = directory.is_dir()
        if not folders[entry["directory"]]:
            what = "is not a folder" if directory.exists() else "does not exist"
            raise CompileCommandsError(f"{path}: entry {i} ({entry['file']}): its directory {directory} {what} "
                                       "(a database made on another machine, or a build folder removed since?)")
        source = file if file.is_absolute() else directory / file
        resolved = str(source.resolve())
        if resolved not in units:
            units[resolved] = (source, directory, screened.flags)
        elif units[resolved][1:] != (directory, screened.flags):
            conflicts[resolved] = conflicts.get(resolved, 0) + 1
    if conflicts:
        logger.warning("%s: %d files have several entries with other flags (a static and a shared build?); the "
                       "first entry of each is used, e.g. %s", path, len(conflicts), next(iter(conflicts)))
    for source, directory, flags in units.values():
        suffix = source.suffix
        language = "c++" if suffix in CXX_SUFFIXES else "c" if suffix in C_SUFFIXES else None
        group = project if project is not None and regex is None else _group_of(str(source), regex)
        yield make_item([source], language=language, flags=flags, cwd=str(directory), origin=label, group=group)


# -- what a recorded build says about its links -------------------------------------------------------------------

#: The options that make clang stop before linking.
_NO_LINK = {"-c", "-S", "-E", "-M", "-MM", "-fsyntax-only"}
#: The object of a unit compiled for a CMake target (``src/CMakeFiles/cmark.dir/main.c.o``) or a Meson one
#: (``src/cmark.p/main.c.o``): the target's name.
_CMAKE_OBJECT = re.compile(r"(?:^|/)CMakeFiles/([^/]+)\.dir/")
_MESON_OBJECT = re.compile(r"(?:^|/)([^/]+)\.p/[^/]+$")


@dataclass(frozen=True)
class RecordedLink:
    """What one recorded command says about the link of its unit.

    Attributes:
        target: the executable (or library) the unit is built for, where the command shows it: the ``-o`` of a
            command that compiles and links in one step (its file name), or the target of CMake's
            ``CMakeFiles/NAME.dir/`` or Meson's ``NAME.p/`` folder in the object's path; else None.
        flags: its link flags as recorded, each one argument (``-lz``, ``-L`` joined with its folder): libraries,
            ``-L``, ``-Wl,``, ``-Xlinker``, linker-only options, and ``-pthread`` of a command that links. Not
            screened: :func:`~behavioral_pq.core.toolchain.check_link_flags` does that (relative ``-L`` folders are
            relative to the entry's directory).
    """

    target: Optional[str]
    flags: Tuple[str, ...]


def recorded_link(arguments: Sequence[str]) -> RecordedLink:
    """The :class:`RecordedLink` of a recorded command (``arguments[0]`` is the compiler). Nothing is read or run."""
    output, links, flags = None, True, []
    rest = iter(arguments[1:])
    for arg in rest:
        if arg in _NO_LINK:
            links = False
        elif arg == "-o":
            output = next(rest, None)
        elif arg.startswith("-o") and len(arg) > 2:
            output = arg[2:]
        elif arg in ("-l", "-L", "-Xlinker"):
            value = next(rest, None)
            if value is not None:
                flags.append(arg + value if arg != "-Xlinker" else f"{arg} {value}")
        elif arg in _DROP_WITH_VALUE or arg in _SEPARATE_VALUE:
            next(rest, None)
        elif arg.startswith(("-Wl,",) + _LINKER_ONLY_PREFIX) or arg in _LINKER_ONLY_EXACT:
            flags.append(arg)
    if links and "-pthread" in arguments[1:]:
        flags.append("-pthread")
    target = None
    if output:
        match = None if links else (_CMAKE_OBJECT.search(output) or _MESON_OBJECT.search(output))
        target = Path(output).name if links else (match.group(1) if match else None)
    return RecordedLink(target or None, tuple(dict.fromkeys(flags)))


def recorded_links(path: os.PathLike) -> Dict[str, Tuple[RecordedLink, str]]:
    """For each unit of a ``compile_commands.json`` (its resolved source, as :func:`from_compile_commands` names
    it; the first entry of a file listed twice), its :class:`RecordedLink` and the entry's directory.

    Raises:
        FileNotFoundError, CompileCommandsError: as :func:`from_compile_commands`.
    """
    path = Path(path)
    links: Dict[str, Tuple[RecordedLink, str]] = {}
    for i, entry in enumerate(_read_database(path)):
        arguments = _entry_arguments(path, i, entry)
        if len(arguments) > 1 and arguments[1] in _FRONTEND_JOBS:
            continue
        directory, file = Path(entry["directory"]), Path(entry["file"])
        source = str((file if file.is_absolute() else directory / file).resolve())
        if source not in links:
            links[source] = (recorded_link(arguments), entry["directory"])
    return links


def load_bitcode(item: InputItem, *, timeout: float = 120.0) -> bytes:
    """Raw bitcode (or IR text) of an input item: compiled with clang-19 and, for several files, linked.

    Raises:
        CompileError: clang or llvm-link failed (stderr included), or a source is not a regular file (a FIFO, a
            device: never opened). ToolTimeoutError: past ``timeout``.
    """
    units: List[bytes] = []
    for source in item.sources:
        path = Path(source)
        kind = _special_file(path)
        if kind is not None:
            raise CompileError(f"{path}: is {kind}, not a regular file; not compiled")
        if path.suffix in IR_SUFFIXES and item.language is None:
            units.append(read_bounded(path, limit=IR_FILE_LIMIT, what="IR file", error=CompileError))
        else:
            units.append(compile_to_bitcode(path, language=item.language, flags=item.flags, timeout=timeout,
                                            cwd=item.cwd))
    return link_bitcode(units, timeout=timeout, what=f"units of {Path(item.sources[0]).parent}")


def module_from_compile_commands(path: os.PathLike, *, files: Sequence[os.PathLike] = (), flags: Sequence[str] = (),
                                 allow_plugins: bool = False) -> Module:
    """One module from a ``compile_commands.json``: the units of ``files`` (each with its recorded flags, plus
    ``flags``), or every unit it lists when ``files`` is empty, compiled and linked.

    Raises:
        ValueError: a file with no entry, or a database without units. CompileError: a unit does not compile
        or the units do not link.
    """
    items = list(from_compile_commands(path, allow_plugins=allow_plugins))
    if files:
        wanted = {str(Path(f).resolve()) for f in files}
        chosen = [i for i in items if i.sources[0] in wanted]
        missing = wanted - {i.sources[0] for i in chosen}
        if missing:
            raise ValueError(f"{path}: no entry for {', '.join(sorted(missing))}")
    else:
        chosen = items
    if not chosen:
        raise ValueError(f"{path}: lists no translation unit")
    units = [load_bitcode(dataclasses.replace(i, flags=i.flags + tuple(flags))) for i in chosen]
    name = Path(chosen[0].sources[0]).name if len(chosen) == 1 else f"{Path(path).name} ({len(chosen)} units)"
    return load_module(link_bitcode(units, what=f"units of {path}"), name=name)
