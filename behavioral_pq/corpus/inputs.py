"""What goes into a corpus: discovering input programs and turning each into raw (unprepared) LLVM bitcode.

An :class:`InputItem` is one future module: one file, all translation units of one directory linked together, or
one translation unit of a ``compile_commands.json``. Its ``key`` is a hash of everything that determines its
result (kind, paths, file contents, flags), so a corpus build can tell what it has already done.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.toolchain import C_SUFFIXES, CXX_SUFFIXES, compile_to_bitcode, link_bitcode
from behavioral_pq.corpus.buckets import project_origin

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
    not exist (a generated source a build did not make) keys as missing: compiling it then fails as that item's
    own failure, and once the file exists the item is new."""
    paths = tuple(str(Path(s).resolve()) for s in sources)
    parts: List[bytes] = [b"bpq-input-1", (language or "").encode(), (cwd or "").encode()]
    parts += [f.encode() for f in flags]
    for p in paths:
        parts.append(p.encode())
        parts.append(Path(p).read_bytes() if Path(p).is_file() else b"\0bpq: missing file")
    return InputItem(_digest(parts), paths, language, tuple(flags), cwd, origin, group)


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

    Raises:
        FileNotFoundError: a source does not exist. ValueError: bad ``per`` or ``group_regex``.
    """
    if per not in GROUPINGS:
        raise ValueError(f"per must be one of {GROUPINGS}, not {per!r}")
    regex = re.compile(group_regex) if group_regex else None
    all_flags = tuple(flags) + tuple(f"-I{Path(d).resolve()}" for d in include)
    for source in sources:
        root = Path(source)
        if not root.exists():
            raise FileNotFoundError(f"no such file or directory: {root}")
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


# Flags of a recorded build that do not belong in IR generation: output, dependency files, optimization and
# debug levels (ours replace them), and things that would make clang do something other than emit one module.
_DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ", "-Xclang-dep", "--serialize-diagnostics", "-Xlinker", "-L", "-l"}
_DROP_EXACT = {"-c", "-S", "-E", "-M", "-MM", "-MD", "-MMD", "-MP", "-emit-llvm", "-pipe", "-g", "-flto", "-Werror"}
_DROP_PREFIX = ("-O", "-g", "-flto=", "-Werror=", "-fprofile", "-fsanitize", "-fcoverage", "-Wl,", "-save-temps")
# A command that compiles and links in one step (``cc -o tool tool.c libutil.a -lm``, as Make rules often do and
# Bear records) also names the link's inputs; with ``-x c`` in front of them clang would compile those too.
_LINKER_INPUT = re.compile(r"\.(a|o|lo|la|obj|so|dylib)(\.[0-9.]+)?$")
_LINKER_ONLY_PREFIX = ("-l", "-L", "-fuse-ld=")
_LINKER_ONLY_EXACT = {"-shared", "-static", "-rdynamic", "-pie", "-no-pie", "-nostdlib", "-nodefaultlibs"}
# Jobs the clang driver runs itself, recorded by tools that watch every process (Bear): the driver's own
# command for the same source is in the database too.
_FRONTEND_JOBS = {"-cc1", "-cc1as"}


# Flags that make clang load or run other code: a third-party compile_commands.json is refused when it has them,
# unless the user allows them (allow_plugins=True, --allow-plugins).
_CODE_LOADING_PREFIX = ("-fplugin", "-fpass-plugin", "--load-pass-plugin", "-B")
_CODE_LOADING_XCLANG = ("-load", "-plugin", "-add-plugin", "-plugin-arg", "-load-pass-plugin")


def code_loading_flags(arguments: Sequence[str]) -> List[str]:
    """The flags of a recorded command that would make clang load plugins or run other programs."""
    found = []
    for i, arg in enumerate(arguments):
        if arg.startswith(_CODE_LOADING_PREFIX):
            found.append(arg)
        elif arg in ("-Xclang", "-mllvm") and i + 1 < len(arguments) \
                and arguments[i + 1].startswith(_CODE_LOADING_XCLANG):
            found.append(f"{arg} {arguments[i + 1]}")
    return found


def _clean_arguments(arguments: Sequence[str], file: str, directory: Optional[Path] = None) -> Tuple[str, ...]:
    """The flags of a recorded command without the compiler, the source file (however it is spelled: ``a.c``,
    ``./src/a.c`` or absolute), the flags that ours replace and, for a command that also links, the link's inputs
    and linker-only flags."""
    source = (directory / file if directory is not None and not Path(file).is_absolute() else Path(file))
    source = os.path.normpath(str(source))

    def is_source(arg: str) -> bool:
        if arg == file:
            return True
        if arg.startswith("-") or directory is None:
            return False
        return os.path.normpath(str(directory / arg) if not Path(arg).is_absolute() else arg) == source

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


def from_compile_commands(path: os.PathLike, *, origin: Optional[str] = None, group_regex: Optional[str] = None,
                          project: Optional[str] = None, allow_plugins: bool = False) -> Iterator[InputItem]:
    """Yield one input item per translation unit of a ``compile_commands.json`` (as CMake, Meson or Bear write
    it).

    Each unit keeps its own flags (defines, includes, language standard) and runs in its own directory; the
    output, dependency, optimization and debug flags of the recorded command are dropped for ours. A command that
    compiles and links in one step loses its link inputs (``libutil.a``, ``-lm``); clang's own frontend jobs
    (``clang -cc1 ...``, which Bear records next to the driver's command) are skipped.

    Args:
        project: the units are one real program: origin ``project:NAME`` (a *real* program for the reports,
            :mod:`behavioral_pq.corpus.buckets`) and one split group, so a project never straddles train and test
            (unless ``group_regex`` says otherwise).
        allow_plugins: keep flags that load code into clang or make it run other programs (``-fplugin=``,
            ``-Xclang -load``, ``-B``, ...); by default a file with any of them is refused, since a third-party
            build file could run code on this machine through them.
    Raises:
        FileNotFoundError, ValueError: a missing or malformed file, or both ``origin`` and ``project``.
    """
    if project is not None:
        if origin is not None:
            raise ValueError("give origin or project, not both (a project's origin is 'project:NAME')")
        origin = project_origin(project)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        entries = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of compile commands")
    regex = re.compile(group_regex) if group_regex else None
    label = origin or path.resolve().parent.name
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "file" not in entry or "directory" not in entry:
            raise ValueError(f"{path}: entry {i} lacks 'file' or 'directory'")
        arguments = entry.get("arguments")
        if arguments is None:
            if "command" not in entry:
                raise ValueError(f"{path}: entry {i} has neither 'arguments' nor 'command'")
            arguments = shlex.split(entry["command"])  # splitting only; no shell ever runs
        if len(arguments) > 1 and arguments[1] in _FRONTEND_JOBS:
            continue
        directory = Path(entry["directory"])
        file = Path(entry["file"])
        source = file if file.is_absolute() else directory / file
        if not allow_plugins:
            loading = code_loading_flags(arguments)
            if loading:
                raise ValueError(f"{path}: entry {i} ({entry['file']}) has flags that load or run other code "
                                 f"({', '.join(loading)}); refused (allow them with --allow-plugins)")
        flags = _clean_arguments(arguments, entry["file"], directory)
        suffix = source.suffix
        language = "c++" if suffix in CXX_SUFFIXES else "c" if suffix in C_SUFFIXES else None
        group = project if project is not None and regex is None else _group_of(str(source), regex)
        yield make_item([source], language=language, flags=flags, cwd=str(directory), origin=label, group=group)


def load_bitcode(item: InputItem, *, timeout: float = 120.0) -> bytes:
    """Raw bitcode (or IR text) of an input item: compiled with clang-19 and, for several files, linked.

    Raises:
        CompileError: clang or llvm-link failed (stderr included). ToolTimeoutError: past ``timeout``.
    """
    units: List[bytes] = []
    for source in item.sources:
        path = Path(source)
        if path.suffix in IR_SUFFIXES and item.language is None:
            units.append(path.read_bytes())
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
