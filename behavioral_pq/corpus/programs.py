"""Whole programs of a project: each translation unit that defines ``main``, linked with the units it needs.

A compile database (CMake's, or ``bear``'s) records compilations, not links, so which units make up an executable
is found the way a static linker takes members from an archive: start from a unit that defines ``main``; while the
program uses a symbol that it does not define, add the unit that defines it (the first by source path when several
do, as in archive order). Units that define another ``main`` are never added (they are other programs), and symbols
that no unit defines are the libraries' (libc, libm, ...). A program of one unit is that unit, already in the store,
so only programs of two or more units are built.

A unit that defines data but no function (a lookup table in its own file) is not a module, but programs link with
it: ``bpq corpus build --project`` keeps its bitcode, content-addressed, in ``STORE/data-units`` (its input row
stays failed with "no code"), and the programs that use its symbols take it like any other unit.

The units are read from the store (the project's prepared modules, built by ``bpq corpus build --compile-commands
--project NAME``), written content-addressed under a units folder and linked with ``llvm-link-19`` as an ordinary
corpus input: origin ``project:NAME`` and the project's split group, so a program and its units always land in the
same split, and a second run resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from behavioral_pq.artifacts import write_bytes_atomic
from behavioral_pq.config import read_bounded
from behavioral_pq.core.module import IR_FILE_LIMIT, load_module
from behavioral_pq.core.toolchain import check_link_flags, find_tool, internalize_bitcode, link_bitcode, run_tool
from behavioral_pq.corpus.buckets import project_origin
from behavioral_pq.corpus.inputs import InputItem, from_compile_commands, load_bitcode, make_item, recorded_links
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.corpus.store import CorpusStore
from behavioral_pq.errors import BPQError, CorpusError, ToolError

logger = logging.getLogger(__name__)

ENTRY = "main"
#: The error of a unit without functions; a project's such units are kept for linking (see the module docstring).
NO_CODE = "no code (no function is defined)"
#: Key of a build result, and folder of the store, for those units' bitcode.
DATA_UNITS = "data-units"
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: ``llvm-nm -P`` symbol types that are references, not definitions (undefined, weak undefined).
_UNDEFINED_TYPES = {"U", "w", "v"}


@dataclass(frozen=True)
class Unit:
    """One translation unit of a project, as stored.

    Attributes:
        sha256: the stored module. source: its source file (for names and order only; never opened).
        defined / used: external symbols it defines / references without defining.
        instruction_count: the module's IR instructions.
    """

    sha256: str
    source: str
    defined: FrozenSet[str]
    used: FrozenSet[str]
    instruction_count: int = 0


@dataclass(frozen=True)
class Program:
    """A whole program: ``units[0]`` defines ``main``; the rest are what it needs, in the order they were added."""

    units: Tuple[Unit, ...]

    @property
    def name(self) -> str:
        return Path(self.units[0].source).stem

    @property
    def instruction_count(self) -> int:
        """IR instructions of its units together (the linked module's, before linking merges declarations)."""
        return sum(u.instruction_count for u in self.units)


def symbols(bitcode: bytes, *, timeout: float = 60.0) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """External symbols a module defines and those it references without defining (``llvm-nm-19 -P``).

    Raises:
        ToolError: llvm-nm cannot read the module.
    """
    out = run_tool([find_tool("llvm-nm"), "--extern-only", "-P", "-"], input=bitcode, timeout=timeout).stdout
    defined, used = set(), set()
    for line in out.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        (used if parts[1] in _UNDEFINED_TYPES else defined).add(parts[0])
    return frozenset(defined), frozenset(used - defined)


def whole_programs(units: Sequence[Unit]) -> List[Program]:
    """Every program of ``units``: one per unit that defines ``main``, closed over the symbols it uses.

    Deterministic: candidates are taken by source path, then hash; a program's units are in the order they were
    added (a breadth-first walk from the ``main`` unit)."""
    ordered = sorted(units, key=lambda u: (u.source, u.sha256))
    definer: Dict[str, Unit] = {}
    for unit in ordered:
        if ENTRY in unit.defined:
            continue
        for symbol in unit.defined:
            definer.setdefault(symbol, unit)
    programs = []
    for root in (u for u in ordered if ENTRY in u.defined):
        chosen, queue, defined = [root], [root], set(root.defined)
        taken = {root.sha256}
        while queue:
            unit = queue.pop(0)
            for symbol in sorted(unit.used):
                if symbol in defined or symbol not in definer:
                    continue
                member = definer[symbol]
                if member.sha256 in taken:
                    continue
                taken.add(member.sha256)
                chosen.append(member)
                queue.append(member)
                defined |= member.defined
        programs.append(Program(tuple(chosen)))
    return programs


def write_data_unit(store: os.PathLike, sha256: str, bitcode: bytes) -> None:
    """Keep a data-only unit's bitcode under ``STORE/data-units/<sha256>.bc`` (once; atomic)."""
    if not _SHA256.fullmatch(sha256) or hashlib.sha256(bitcode).hexdigest() != sha256:
        raise CorpusError(f"data unit {sha256[:70]!r}: not the sha256 of its bitcode")
    path = Path(store) / DATA_UNITS / f"{sha256}.bc"
    if not path.is_file():
        path.parent.mkdir(exist_ok=True)
        write_bytes_atomic(path, bitcode)


def _data_unit(store: os.PathLike, sha256: Optional[str]) -> Optional[bytes]:
    """A kept data-only unit's bitcode, or None (none kept, or the file does not hash to its name)."""
    if not sha256 or not _SHA256.fullmatch(sha256):
        return None
    path = Path(store) / DATA_UNITS / f"{sha256}.bc"
    try:
        data = read_bounded(path, limit=IR_FILE_LIMIT, what="data unit", error=OSError)
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def project_units(store: os.PathLike, project: str) -> Tuple[List[Unit], Dict[str, bytes], str]:
    """The stored units of ``project`` with their symbols, their bitcode by hash, and the project's split group.

    Raises:
        CorpusError: the store holds no unit of the project.
    """
    corpus = CorpusStore(store)
    origin = project_origin(project)
    first_source: Dict[str, str] = {}
    groups = set()
    data_units: Dict[str, bytes] = {}
    inputs = corpus.read("inputs", ["sha256", "origin", "group", "status", "sources", "error"])
    for sha, row_origin, group, status, sources, error in zip(*(c.to_pylist() for c in inputs.columns)):
        if row_origin != origin or len(sources) != 1:
            continue
        if status != "ok":
            kept = _data_unit(store, sha) if (error or "").endswith(NO_CODE) else None
            if kept is None:
                continue
            data_units[sha] = kept
        groups.add(group)
        if sha not in first_source or sources[0] < first_source[sha]:
            first_source[sha] = sources[0]
    if not first_source:
        raise CorpusError(f"{store}: no unit of project {project!r} (build it first: bpq corpus build "
                          f"--compile-commands FILE --project {project} --out {store})")
    if len(groups) != 1:
        raise CorpusError(f"{store}: the units of project {project!r} are in {len(groups)} split groups "
                          "(built with --group-regex); a whole program needs one")
    bitcode: Dict[str, bytes] = dict(data_units)
    sizes: Dict[str, int] = dict.fromkeys(data_units, 0)
    for batch in corpus.iter_batches("modules", ["sha256", "bitcode", "instruction_count"], batch_size=256):
        for sha, data, size in zip(*(c.to_pylist() for c in batch.columns)):
            if sha in first_source:
                bitcode[sha], sizes[sha] = data, size
    units = []
    for sha, source in sorted(first_source.items(), key=lambda kv: kv[1]):
        try:
            defined, used = symbols(bitcode[sha])
        except ToolError:   # a module llvm-nm cannot read cannot be linked either: leave it out
            continue
        units.append(Unit(sha, source, defined, used, sizes[sha]))
    return units, bitcode, groups.pop()


def program_items(store: os.PathLike, project: str, units_dir: Optional[os.PathLike] = None, *,
                  max_instructions: Optional[int] = None) -> Tuple[List[InputItem], List[Program]]:
    """Corpus inputs for the whole programs of ``project`` (two or more units each, at most ``max_instructions``
    IR instructions in all when given) and the programs.

    Each unit's bitcode is written once to ``units_dir/NAME/<sha256>.bc`` (default ``STORE/programs``); an item's
    sources are those files, the ``main`` unit first.
    """
    units, bitcode, group = project_units(store, project)
    programs = [p for p in whole_programs(units) if len(p.units) > 1
                and (max_instructions is None or p.instruction_count <= max_instructions)]
    folder = Path(units_dir if units_dir is not None else Path(store) / "programs") / project
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for program in programs:
        paths = []
        for unit in program.units:
            path = folder / f"{unit.sha256}.bc"
            if path.is_symlink() or not path.is_file() or path.stat().st_size != len(bitcode[unit.sha256]):
                write_bytes_atomic(path, bitcode[unit.sha256])   # a link planted there is replaced, not followed
            paths.append(path)
        items.append(make_item(paths, language=None, flags=(), cwd=None, origin=project_origin(project),
                               group=group))
    return items, programs


def compile_units(path: os.PathLike, *, flags: Sequence[str] = (), allow_plugins: bool = False
                  ) -> Tuple[List[Unit], Dict[str, bytes]]:
    """Every unit of a ``compile_commands.json`` compiled with its recorded flags plus ``flags``, with its symbols,
    and the bitcode by hash (what :func:`whole_programs` takes). Units that do not compile are left out, logged."""
    units, bitcode = [], {}
    for item in from_compile_commands(path, allow_plugins=allow_plugins):
        try:
            data = load_bitcode(dataclasses.replace(item, flags=item.flags + tuple(flags)))
            defined, used = symbols(data)
        except BPQError as exc:
            logger.warning("%s: left out: %s", item.sources[0], exc)
            continue
        sha = hashlib.sha256(data).hexdigest()
        bitcode[sha] = data
        units.append(Unit(sha, item.sources[0], defined, used))
    return units, bitcode


@dataclass(frozen=True)
class ProjectProgram:
    """One whole program of a compile database, linked (:func:`project_program`).

    Attributes:
        name: its name among the database's programs (:func:`program_names`). source: the file that defines
            ``main``. module: the units linked into one module. units: how many.
        link_flags: the link flags the database records for its units, checked
            (:func:`~behavioral_pq.core.toolchain.check_link_flags`; those refused are left out, logged).
    """

    name: str
    source: str
    module: object
    units: int
    link_flags: Tuple[str, ...] = ()


def _common_folder(units: Sequence[Unit]) -> str:
    """The folder that holds every unit's source ("" for none): a project's root, as far as its units show it."""
    folders = [os.path.dirname(u.source) for u in units]
    return os.path.commonpath(folders) if folders else ""


def _in_project(source: str, root: str) -> str:
    return os.path.relpath(source, root) if root else source


def program_names(programs: Sequence[Program], targets: Optional[Dict[str, str]] = None, *,
                  root: Optional[str] = None) -> List[str]:
    """A name for each program, different from the others': the build target that holds its ``main`` unit
    (``targets``: source -> target, from the compile database: :func:`~behavioral_pq.corpus.inputs.recorded_links`)
    where the database shows it, else the stem of that unit's file (``minigzip``); where two programs would share
    a name, each of them is named by the path of its ``main`` file relative to ``root`` (default: the folder that
    holds every unit of the programs), e.g. ``src/main.c`` and ``api_test/main.c``."""
    targets = targets or {}
    if root is None:
        root = _common_folder([u for p in programs for u in p.units])
    preferred = [targets.get(p.units[0].source) or p.name for p in programs]
    names = [name if preferred.count(name) == 1 else _in_project(p.units[0].source, root)
             for name, p in zip(preferred, programs)]
    # a path that is another program's preferred name as well: the absolute path is never shared
    return [name if names.count(name) == 1 else p.units[0].source for name, p in zip(names, programs)]


def project_program(path: os.PathLike, program: str, *, flags: Sequence[str] = (), allow_plugins: bool = False
                    ) -> ProjectProgram:
    """One whole program of a ``compile_commands.json``: the unit that defines ``main`` with the units it needs,
    found as :func:`whole_programs` finds them (units as :func:`compile_units` gives them; one that does not
    compile is left out, and the link then names what it would have defined), linked.

    ``program`` names it as :func:`program_names` does (the build target, such as ``cmark``, or the stem of its
    ``main`` file), or names that file: its path from the current folder, its path in the project
    (``src/main.c``), its file name or stem. A program's own name picks it; any other ``program`` must fit one
    program only.

    Raises:
        ValueError: no program fits ``program`` (the message lists the programs there are), or several do (the
            message lists them, each with its name and ``main`` file).
        CompileError: the chosen units do not link.
    """
    units, bitcode = compile_units(path, flags=flags, allow_plugins=allow_plugins)
    programs = whole_programs(units)
    recorded = recorded_links(path)
    targets = {source: link.target for source, (link, _) in recorded.items() if link.target}
    root = _common_folder(units)
    names = program_names(programs, targets, root=root)
    mains = [p.units[0].source for p in programs]

    def fits(i: int) -> bool:
        main = mains[i]
        return (program in (targets.get(main), programs[i].name, Path(main).name)
                or os.path.normpath(program) == _in_project(main, root)
                or str(Path(program).resolve()) == main)

    chosen = [i for i, name in enumerate(names) if name == program] or [i for i in range(len(programs)) if fits(i)]
    if not chosen:
        listed = ", ".join(sorted(name if name in (_in_project(main, root), p.name)
                                  else f"{name} ({_in_project(main, root)})"
                                  for name, main, p in zip(names, mains, programs))) or "none"
        raise ValueError(f"{path}: no program {program!r} (no build target of that name, no unit that defines main "
                         f"in such a file); the programs there: {listed}")
    if len(chosen) > 1:
        listed = ", ".join(f"{names[i]} ({_in_project(mains[i], root)})" for i in chosen)
        raise ValueError(f"{path}: {program!r} fits {len(chosen)} programs: {listed}; give one of their names")
    found, name = programs[chosen[0]], names[chosen[0]]
    link_flags: List[str] = []
    for unit in found.units:
        link, directory = recorded.get(unit.source, (None, ""))
        for flag in link.flags if link is not None else ():
            try:
                link_flags += check_link_flags([flag], base=directory, what=f"{path}: {unit.source}")
            except (ValueError, OSError) as exc:
                logger.warning("%s: left out of the link: %s", name, exc)
    module = link_bitcode([bitcode[u.sha256] for u in found.units], what=f"program {name}")
    return ProjectProgram(name, found.units[0].source,
                          load_module(module, name=f"{name} ({len(found.units)} units)"), len(found.units),
                          tuple(dict.fromkeys(link_flags)))


def program_from_compile_commands(path: os.PathLike, program: str, *, flags: Sequence[str] = (),
                                  allow_plugins: bool = False):
    """The module of :func:`project_program` (one whole program of a ``compile_commands.json``, named by
    ``program`` as there).

    Raises:
        ValueError: no program or several fit ``program`` (the message lists them). CompileError: the chosen
        units do not link.
    """
    return project_program(path, program, flags=flags, allow_plugins=allow_plugins).module


__all__ = ["DATA_UNITS", "NO_CODE", "Program", "ProjectProgram", "Unit", "compile_units",
           "program_from_compile_commands", "program_items", "program_names", "project_program", "project_units",
           "symbols", "whole_programs", "write_data_unit"]


@dataclass(frozen=True)
class WholeProgram:
    """A whole program of a stored project, linked and made ready for a whole-program build: ``module`` has every
    definition but ``main`` internal (:func:`~behavioral_pq.core.toolchain.internalize_bitcode`, as ``bpq compile
    --whole-program`` builds it); ``name`` is ``project/program``; ``group`` the project's split group."""

    name: str
    project: str
    group: str
    instruction_count: int
    module: object


def split_whole_programs(store: os.PathLike, split: str, *, max_instructions: Optional[int] = None,
                         names: Optional[Sequence[str]] = None):
    """The whole programs (two units or more) of the store's real projects in ``split``, by project, then size
    (the units' instruction count), each linked and internalized on demand (a generator of
    :class:`WholeProgram`; a program that fails to link or internalize is logged and skipped). ``names``: only
    these (``project/program``)."""
    wanted = set(names) if names is not None else None
    corpus = Corpus(store)
    for project, row in sorted(corpus.projects().items()):
        if split not in row["splits"] or wanted is not None and not any(n.startswith(f"{project}/") for n in wanted):
            continue
        units, bitcode, group = project_units(store, project)
        programs = sorted((p for p in whole_programs(units) if len(p.units) > 1
                           and (max_instructions is None or p.instruction_count <= max_instructions)),
                          key=lambda p: (p.instruction_count, p.name))
        for program in programs:
            name = f"{project}/{program.name}"
            if wanted is not None and name not in wanted:
                continue
            try:
                linked = link_bitcode([bitcode[u.sha256] for u in program.units], what=name)
                module = load_module(internalize_bitcode(linked), name=name)
            except BPQError as exc:
                logger.warning("%s: left out (%s)", name, exc)
                continue
            yield WholeProgram(name, project, group, program.instruction_count, module)
