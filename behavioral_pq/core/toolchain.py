"""The one wrapper around external LLVM tools (clang-19, llvm-link-19, ...): argument lists, never a shell,
a timeout, and the tool's stderr in every error."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple

from behavioral_pq.core.files import atomic_path, check_output_file
from behavioral_pq.errors import CompileError, ToolError, ToolNotFoundError, ToolTimeoutError

logger = logging.getLogger(__name__)

LLVM_BIN_DIRS = ("/usr/lib/llvm-19/bin",)
C_SUFFIXES = {".c": "c", ".i": "c"}
CXX_SUFFIXES = {".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".c++": "c++", ".C": "c++", ".ii": "c++"}
#: How the design builds IR: optimizations enabled for the front end's IR shape, no LLVM passes, no debug info.
BITCODE_MAGICS = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")   # raw bitcode, bitcode wrapper
CLANG_IR_FLAGS = ("-O1", "-Xclang", "-disable-llvm-passes", "-g0", "-emit-llvm")


@functools.lru_cache(maxsize=None)
def find_tool(name: str) -> str:
    """Absolute path of an LLVM 19 tool: ``$BPQ_<NAME>``, ``<name>-19`` on PATH, or LLVM 19's bin directory."""
    env = os.environ.get("BPQ_" + name.upper().replace("-", "_"))
    if env:
        return env
    for candidate in (f"{name}-19", name):
        found = shutil.which(candidate)
        if found and (candidate.endswith("-19") or any(found.startswith(d) for d in LLVM_BIN_DIRS)):
            return found
    for directory in LLVM_BIN_DIRS:
        path = Path(directory, name)
        if path.exists():
            return str(path)
    raise ToolNotFoundError(f"{name}-19 not found; install LLVM 19 (apt-get install clang-19 llvm-19)")


def run_tool(argv: Sequence[str], *, timeout: float = 120.0, input: Optional[bytes] = None,
             cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """Run a tool; raise ToolTimeoutError past ``timeout`` and ToolError on a non-zero exit (stderr included)."""
    argv = [str(a) for a in argv]
    logger.debug("running %s", argv)
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, timeout=timeout, cwd=cwd, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ToolTimeoutError(f"{Path(argv[0]).name} timed out after {timeout:g} s") from exc
    except FileNotFoundError as exc:
        if cwd is not None and not Path(cwd).is_dir():
            raise ToolError(f"cannot run {Path(argv[0]).name} in {cwd}: no such folder") from None
        raise ToolNotFoundError(f"{argv[0]} not found") from exc
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace").strip()
        raise ToolError(f"{Path(argv[0]).name} exited with {proc.returncode}: {excerpt(stderr)}")
    return proc


def language_of(path: Path) -> Optional[str]:
    """``"c"``, ``"c++"`` or None from a file suffix."""
    return C_SUFFIXES.get(path.suffix) or CXX_SUFFIXES.get(path.suffix)


def compile_to_bitcode(source: Path, *, language: Optional[str] = None, flags: Sequence[str] = (),
                       timeout: float = 120.0, cwd: Optional[str] = None) -> bytes:
    """Compile one C/C++ translation unit to bitcode with ``clang-19 -O1 -Xclang -disable-llvm-passes -g0``.

    ``cwd`` is the directory clang runs in (relative ``-I`` paths of a recorded build resolve against it)."""
    language = language or language_of(source)
    if language is None and source.suffix in (".s", ".S", ".asm", ".sx"):
        raise CompileError(f"{source}: an assembly source has no LLVM IR (only C and C++ units become modules)")
    if language is None:
        raise CompileError(f"{source}: cannot tell the language from the suffix; pass language='c' or 'c++'")
    argv = [find_tool("clang"), "-x", language, *CLANG_IR_FLAGS, *flags, "-c", str(source), "-o", "-"]
    try:
        return run_tool(argv, timeout=timeout, cwd=cwd).stdout
    except ToolError as exc:
        raise CompileError(f"{source}: {exc}") from None


def link_bitcode(units: Sequence[bytes], *, timeout: float = 120.0, what: str = "units") -> bytes:
    """One module from several (bitcode or IR text), linked with ``llvm-link-19``; a single unit is returned as
    is. Raises CompileError naming ``what`` when they do not link (duplicate definitions, type clashes)."""
    if len(units) == 1:
        return units[0]
    if not units:
        raise ValueError("nothing to link")
    with tempfile.TemporaryDirectory(prefix="bpq-link-") as tmp:
        names = []
        for i, data in enumerate(units):
            suffix = "bc" if data[:4] in BITCODE_MAGICS else "ll"
            name = Path(tmp, f"unit{i}.{suffix}")
            name.write_bytes(data)
            names.append(str(name))
        try:
            return run_tool([find_tool("llvm-link"), *names, "-o", "-"], timeout=timeout).stdout
        except ToolError as exc:
            raise CompileError(f"linking {len(units)} {what}: {exc}") from None


#: llc's floating-point contraction: ``on`` fuses ``llvm.fmuladd`` into FMA where the CPU has it, ``off`` never
#: does (a latency-bound reduction can be faster unfused), ``fast`` fuses any fmul + fadd.
FP_CONTRACT = ("on", "off", "fast")
RELOCATION_MODELS = ("pic", "static", "dynamic-no-pic")
#: llc's machine outliner: repeated instruction sequences of the whole module become calls to one outlined
#: function. clang -Oz leaves it off on x86-64; a size build may turn it on (:func:`smaller_codegen`).
MACHINE_OUTLINER = "-enable-machine-outliner"
#: llc without block placement: the blocks keep the order the IR gives them. Block placement lays blocks out for
#: branch prediction (its chains can need extra jumps); without it a size build's .text was 1.0% smaller on 33
#: train whole programs and 0.7% on 13 valid ones (each the smaller of both ways, with or without the outliner;
#: BENCHMARKS "Block placement as a codegen choice"). A size build may turn it off (:func:`smaller_codegen`).
NO_BLOCK_PLACEMENT = "-disable-block-placement"
#: llc options a size build may add, by name, in the order :func:`smaller_codegen` tries them (set by hand from
#: the train whole programs: machine LICM and CSE off, which saved most there, first). Each turns off one
#: of llc's optimizations or takes another of its equivalent strategies, so the program computes the same; each
#: was smaller alone on some train whole programs and larger on others (BENCHMARKS "llc options as a codegen
#: search"), so they are chosen per program by measurement, never all at once.
CODEGEN_FLAGS = {
    # machine LICM hoists loop invariants into the preheader: longer live ranges, more spills
    "no-machine-licm": ("-disable-machine-licm",),
    # machine CSE reuses a computed value instead of computing it again: longer live ranges, more spills
    "no-machine-cse": ("-disable-machine-cse",),
    # interprocedural register allocation: a call to a function of the module clobbers only the registers that
    # function uses, so fewer values are saved around it
    "ipra": ("-enable-ipra",),
    # the machine scheduler reorders for latency, which can raise register pressure
    "no-misched": ("-enable-misched=false",),
    # loop strength reduction adds induction variables and pointer increments
    "no-lsr": ("-disable-lsr",),
    # branch folding merges common block tails of two instructions or more (llc: three)
    "tail-merge-2": ("-tail-merge-size=2",),
    # the greedy allocator splits live ranges around spills to save size, not time
    "split-spill-size": ("-split-spill-mode=size",),
    # the basic register allocator instead of the greedy one
    "regalloc-basic": ("-regalloc=basic",),
    # machine sinking moves instructions into the successors that use them
    "no-machine-sink": ("-disable-machine-sink",),
}


class CodegenChoice(NamedTuple):
    """What :func:`smaller_codegen` chose: the machine outliner on or off, block placement on or off, the .text
    bytes with that choice, with llc's defaults (outliner off, block placement on), the :data:`CODEGEN_FLAGS`
    names it added (in the order chosen) and how many llc builds it measured."""

    outline: bool
    block_placement: bool
    text: int
    plain: int
    flags: Tuple[str, ...] = ()
    builds: int = 0


def check_codegen_flags(flags: Sequence[str]) -> Tuple[str, ...]:
    """``flags`` as a tuple of :data:`CODEGEN_FLAGS` names, each once; ValueError naming the known ones."""
    unknown = [name for name in flags if name not in CODEGEN_FLAGS]
    if unknown:
        raise ValueError(f"unknown codegen flag(s) {', '.join(map(repr, unknown))}; known: {', '.join(CODEGEN_FLAGS)}")
    if len(set(flags)) != len(flags):
        raise ValueError(f"codegen flags named twice: {list(flags)}")
    return tuple(flags)


def _llc_flags(outline: bool, block_placement: bool, flags: Sequence[str] = ()) -> List[str]:
    return ([MACHINE_OUTLINER] if outline else []) + ([] if block_placement else [NO_BLOCK_PLACEMENT]) + \
        [arg for name in check_codegen_flags(flags) for arg in CODEGEN_FLAGS[name]]


def llc_assembly(bitcode: bytes, *, opt_level: int = 2, cpu: Optional[str] = None, fp_contract: Optional[str] = None,
                 relocation_model: str = "pic", outline: bool = False, block_placement: bool = True,
                 flags: Sequence[str] = (), timeout: float = 120.0) -> str:
    """x86-64 assembly from ``llc-19 -O<opt_level> --relocation-model=pic`` (PIC because the distribution's clang
    links position-independent executables). ``cpu`` is the default for functions without a ``target-cpu``
    attribute; ``outline`` turns on the machine outliner (:data:`MACHINE_OUTLINER`), ``block_placement=False``
    turns block placement off (:data:`NO_BLOCK_PLACEMENT`), ``flags`` adds :data:`CODEGEN_FLAGS` by name. Raises
    ToolError with llc's stderr."""
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"llc optimization level must be 0..3, got {opt_level}")
    if fp_contract is not None and fp_contract not in FP_CONTRACT:
        raise ValueError(f"fp_contract must be one of {FP_CONTRACT}, got {fp_contract!r}")
    if relocation_model not in RELOCATION_MODELS:
        raise ValueError(f"relocation model must be one of {RELOCATION_MODELS}, got {relocation_model!r}")
    argv = [find_tool("llc"), f"-O{opt_level}", f"--relocation-model={relocation_model}", "-filetype=asm", "-o", "-",
            "-"]
    if cpu:
        argv.insert(1, f"-mcpu={cpu}")
    if fp_contract:
        argv.insert(1, f"--fp-contract={fp_contract}")
    argv[1:1] = _llc_flags(outline, block_placement, flags)
    return run_tool(argv, input=bitcode, timeout=timeout).stdout.decode()


def text_size(bitcode: bytes, *, opt_level: int = 2, cpu: Optional[str] = None, relocation_model: str = "pic",
              outline: bool = False, block_placement: bool = True, flags: Sequence[str] = (),
              timeout: float = 120.0) -> int:
    """Bytes of the ``.text`` sections (``.text`` and ``.text.*``) of ``llc-19 -O<opt_level>``'s object for the
    module: CompilerGym's ObjectTextSizeBytes, and the text-size objective (which keeps llc's defaults). ``cpu``,
    ``outline``, ``block_placement`` and ``flags`` as in :func:`llc_assembly`. Raises ToolError with llc's
    stderr."""
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"llc optimization level must be 0..3, got {opt_level}")
    if relocation_model not in RELOCATION_MODELS:
        raise ValueError(f"relocation model must be one of {RELOCATION_MODELS}, got {relocation_model!r}")
    with tempfile.TemporaryDirectory(prefix="bpq-size-") as tmp:
        obj = Path(tmp) / "m.o"
        argv = [find_tool("llc"), f"-O{opt_level}", "-filetype=obj", f"--relocation-model={relocation_model}",
                "-o", str(obj), "-"]
        if cpu:
            argv.insert(1, f"-mcpu={cpu}")
        argv[1:1] = _llc_flags(outline, block_placement, flags)
        run_tool(argv, input=bitcode, timeout=timeout)
        return object_text_size(obj, timeout=timeout)


def smaller_codegen(bitcode: bytes, *, opt_level: int = 2, cpu: Optional[str] = None, relocation_model: str = "pic",
                    outline: Sequence[bool] = (False, True), block_placement: Sequence[bool] = (True, False),
                    flags: Sequence[str] = (), keep: Sequence[str] = (), timeout: float = 120.0) -> CodegenChoice:
    """The llc options that give the smallest .text. First the outliner and block placement, among ``outline`` x
    ``block_placement`` (the machine outliner on or off, block placement on or off; default: each way; ties keep
    llc's defaults: outlined code adds calls and returns, block placement lays out for speed). Then, from that
    choice, :data:`CODEGEN_FLAGS` by name among ``flags`` (default none), in their order: each is added if the
    build with it is strictly smaller, one llc build per flag. (Adding the smallest flag each round instead found
    0.06% more on 38 valid whole programs for three times the builds: BENCHMARKS "llc options as a codegen
    search".) A flag whose build fails (llc 19 crashes on some modules with IPRA and the outliner together) is
    left out with a warning. ``keep``: flags every build has (the choice's ``flags`` start with them); ``plain``
    is without them."""
    keep = check_codegen_flags(keep)
    flags = tuple(name for name in check_codegen_flags(flags) if name not in keep)
    options = dict(opt_level=opt_level, cpu=cpu, relocation_model=relocation_model, timeout=timeout)
    sizes = {(o, b): text_size(bitcode, outline=o, block_placement=b, flags=keep, **options)
             for o in sorted(set(outline)) for b in sorted(set(block_placement), reverse=True)}
    plain, builds = sizes.get((False, True)) if not keep else None, len(sizes)
    if plain is None:
        plain, builds = text_size(bitcode, **options), builds + 1
    # fewest bytes; among equals llc's defaults first (outliner off, block placement on)
    (o, b), text = min(sizes.items(), key=lambda item: (item[1], item[0][0], not item[0][1]))
    chosen = keep
    for name in flags:
        builds += 1
        try:
            tried = text_size(bitcode, outline=o, block_placement=b, flags=chosen + (name,), **options)
        except ToolError as exc:   # llc 19 can crash on a combination (IPRA with the outliner on one sbase tool)
            logger.warning("llc with codegen flags %s failed, %s left out: %s", ", ".join(chosen + (name,)), name,
                           str(exc).splitlines()[0][:200])
            continue
        if tried < text:
            chosen, text = chosen + (name,), tried
    return CodegenChoice(o, b, text, plain, chosen, builds)


def object_text_size(path: Path, *, timeout: float = 120.0) -> int:
    """Bytes of the ``.text`` sections (``.text`` and ``.text.*``) of an object file, from ``llvm-size-19 -A``."""
    table = run_tool([find_tool("llvm-size"), "-A", str(path)], timeout=timeout).stdout.decode()
    return sum(int(m.group(1)) for m in re.finditer(r"^\.text\S*\s+(\d+)", table, re.M))


def opt_bitcode(bitcode: bytes, level: str = "O3", *, timeout: float = 120.0) -> bytes:
    """``opt-19 -<level>`` with the module's target machine (vectorizers get the real vector width, which the
    in-process engine, built without a target machine, does not give them)."""
    if level not in ("O0", "O1", "O2", "O3", "Os", "Oz"):
        raise ValueError(f"opt level must be one of O0..O3, Os, Oz, got {level!r}")
    return run_tool([find_tool("opt"), f"-{level}", "-o", "-", "-"], input=bitcode, timeout=timeout).stdout


def internalize_bitcode(bitcode: bytes, keep: Sequence[str] = ("main",), *, timeout: float = 120.0) -> bytes:
    """The module with every definition but ``keep`` made internal (``opt-19 -passes=internalize``), as a linker's
    LTO does for an executable whose only entry point is ``main``: what nothing in the program calls can then be
    removed, and what is called once inlined. Only for a whole program (every unit linked in, no caller outside:
    a symbol looked up with ``dlsym`` or referenced from assembly would be lost). Raises ToolError with opt's
    stderr."""
    if not keep or any(not name or "," in name for name in keep):
        raise ValueError(f"keep must name symbols, got {list(keep)!r}")
    return run_tool([find_tool("opt"), "-passes=internalize", f"-internalize-public-api-list={','.join(keep)}",
                     "-o", "-", "-"], input=bitcode, timeout=timeout).stdout


def llvm_tool_version(name: str = "llc") -> str:
    """The version an LLVM tool reports ("19.1.7"), from ``NAME --version``."""
    text = run_tool([find_tool(name), "--version"], timeout=30).stdout.decode(errors="replace")
    words = text.split("version", 1)
    if len(words) < 2 or not words[1].split():
        raise ToolError(f"{name} --version: no version in its output ({text.strip()[:200]!r})")
    return words[1].split()[0]


#: What a module declares but does not define when it needs the C++ runtime (libstdc++, libsupc++): mangled
#: names, the C++ ABI's ``__cxa_*`` and the exception personality.
_CXX_RUNTIME = re.compile(r'^(?:declare [^@]*@|@)"?(?:_Z|__cxa_|__gxx_personality)[^ ]*(?: = external |\()', re.M)


def needs_cxx_runtime(module_text: str) -> bool:
    """Whether a module (its textual IR) uses the C++ runtime, so that an executable must be linked as C++."""
    return _CXX_RUNTIME.search(module_text) is not None


def linker(cxx: bool = False, flags: Sequence[str] = ()) -> list:
    """The link command's head: clang-19 with libm, or clang++-19 (libstdc++ and libm) for C++ programs, then
    ``flags`` (link flags :func:`check_link_flags` allowed) before ``-lm``; what follows the head goes after the
    objects, as libraries must."""
    return [find_tool("clang++" if cxx else "clang"), *flags, "-lm"]


# -- link flags ---------------------------------------------------------------------------------------------------
#
# What a program links with besides libc and libm (``--ldflags``, and the link flags a compile database records)
# goes to clang and from it to the linker, which also loads plugins (``-Wl,-plugin``), runs other programs
# (``-fuse-ld=``, ``-B``) and reads flags from files (``@FILE``). So link flags are allow-listed: libraries and the
# folders to find them in, and options that only shape the executable; anything else is refused, naming the flag.

#: Flags allowed as they are.
_LINK_EXACT = {"-pthread", "-rdynamic", "-static", "-static-libgcc", "-static-libstdc++", "-pie", "-no-pie"}
#: Linker options allowed after ``-Wl,`` (each comma-separated part one of them; ``-z`` takes one of
#: :data:`_LINKER_Z`, ``-rpath`` a folder the executable records, never reads at link time).
_LINKER_OPTIONS = {"--as-needed", "--no-as-needed", "--gc-sections", "--no-gc-sections", "--export-dynamic", "-E",
                   "--start-group", "--end-group", "-(", "-)", "--whole-archive", "--no-whole-archive", "-Bstatic",
                   "-Bdynamic", "-O0", "-O1", "-O2", "-s", "--strip-all", "-S", "--strip-debug", "--build-id",
                   "--no-undefined", "--allow-shlib-undefined", "--eh-frame-hdr", "--sort-common",
                   "--hash-style=gnu", "--hash-style=sysv", "--hash-style=both", "--enable-new-dtags",
                   "--disable-new-dtags", "--copy-dt-needed-entries", "--no-copy-dt-needed-entries"}
_LINKER_Z = {"now", "lazy", "relro", "norelro", "noexecstack", "execstack", "defs", "nodefs", "origin",
             "separate-code", "noseparate-code"}
_LIBRARY = re.compile(r"[A-Za-z0-9_+.-]+|:[A-Za-z0-9_+.-]+")
#: Refused link flags with the reason, by prefix (anything else off the allow-list is refused all the same).
_LINK_REFUSED = (
    ("@", "reads more flags from a file"), ("-fuse-ld", "makes clang run another linker"),
    ("--ld-path", "makes clang run another linker"), ("-B", "makes clang run other programs"),
    ("--prefix", "makes clang run other programs"), ("--gcc-toolchain", "makes clang run other programs"),
    ("-ccc-", "makes clang run other programs"), ("--sysroot", "changes where the system's libraries are read"),
    ("-isysroot", "changes where the system's libraries are read"),
    ("-Xlinker", "passes an option to the linker unchecked (give an allowed one as -Wl,OPTION)"),
    ("-z", "passes an option to the linker unchecked (give an allowed one as -Wl,-z,VALUE)"),
    ("-specs", "reads a specs file"), ("-fplugin", "loads code into clang"), ("-flto", "loads the LTO plugin"),
)
#: The link flags allowed, for messages.
LINK_FLAGS_ALLOWED = ("-l NAME, -L DIR, -pthread, -rdynamic, -static, -static-libgcc, -pie, -no-pie and -Wl, "
                      "options that only shape the executable (-Wl,--as-needed, -Wl,--gc-sections, -Wl,-z,now, "
                      "-Wl,-rpath,DIR, ...)")


def _linker_option_refusal(flag: str) -> Optional[str]:
    """Why a ``-Wl,`` flag is refused, or None when each of its parts is allowed."""
    parts = flag.split(",")[1:]
    i = 0
    while i < len(parts):
        part = parts[i]
        if "plugin" in part:
            return "loads code into the linker"
        if part in ("-z", "-rpath", "--rpath", "-R") and i + 1 < len(parts):
            value = parts[i + 1]
            if part == "-z" and value not in _LINKER_Z:
                return f"passes the linker -z {value}, which is not on the allow-list"
            i += 2
            continue
        if part.startswith(("-rpath=", "--rpath=")) or part in _LINKER_OPTIONS:
            i += 1
            continue
        return f"passes the linker {part!r}, which is not on the allow-list"
    return None if parts else "passes the linker nothing"


def check_link_flags(flags: Sequence[str], *, base: Optional[os.PathLike] = None,
                     what: str = "link flags") -> Tuple[str, ...]:
    """``flags`` as the linker gets them: ``-l NAME`` joined (``-lz``), ``-L DIR`` joined with DIR absolute
    (relative to ``base``, default the current folder); each must be on the allow-list (:data:`LINK_FLAGS_ALLOWED`).

    Raises:
        ValueError: a refused flag (one line naming it and why, ``what`` first), a flag without its value, or
            ``-L /``. FileNotFoundError, NotADirectoryError: an ``-L`` folder that does not exist or is not one.
    """
    base = Path(os.path.abspath(base if base is not None else os.getcwd()))
    out: List[str] = []
    rest = iter(flags)
    for flag in rest:
        if flag in ("-l", "-L"):
            value = next(rest, None)
            if not value:
                raise ValueError(f"{what}: {flag} lacks its value")
            flag = flag + value
        if flag.startswith("-l") and _LIBRARY.fullmatch(flag[2:]):
            out.append(flag)
        elif flag.startswith("-L") and len(flag) > 2:
            folder = base / Path(flag[2:]).expanduser()
            if not folder.exists():
                raise FileNotFoundError(f"{what}: -L {flag[2:]}: no such folder")
            if not folder.is_dir():
                raise NotADirectoryError(f"{what}: -L {flag[2:]}: not a folder")
            if Path(os.path.realpath(folder)) == Path("/"):
                raise ValueError(f"{what}: -L {flag[2:]}: the whole file system cannot be shown to the link; name "
                                 "the folder that holds the library")
            out.append(f"-L{os.path.normpath(folder)}")
        elif flag in _LINK_EXACT or (flag.startswith("-Wl,") and _linker_option_refusal(flag) is None):
            out.append(flag)
        else:
            raise ValueError(f"{what}: refused link flag {flag!r}: it {_link_refusal(flag)}; allowed: "
                             f"{LINK_FLAGS_ALLOWED}")
    return tuple(out)


def _link_refusal(flag: str) -> str:
    if flag.startswith("-Wl,"):
        return _linker_option_refusal(flag) or "is not on the allow-list"
    for prefix, reason in _LINK_REFUSED:
        if flag.startswith(prefix):
            return reason
    if flag.startswith("-l"):
        return "does not name a library"
    if not flag.startswith("-"):
        return "is an input file, not a flag (give a library as -L DIR -l NAME)"
    return "is not a link flag on the allow-list"


def library_folders(flags: Sequence[str]) -> List[Path]:
    """The ``-L`` folders of link flags :func:`check_link_flags` gave (absolute), in order."""
    return [Path(f[2:]) for f in flags if f.startswith("-L")]


def assemble(assembly: str, output: Path, *, executable: bool, cxx: bool = False, timeout: float = 120.0,
             overwrite: bool = False, link_flags: Sequence[str] = ()) -> Path:
    """Assemble ``assembly`` (AT&T x86-64 text) with clang into ``output``: an executable linked with libm (and the
    C++ runtime when ``cxx``, see :func:`needs_cxx_runtime`; and ``link_flags``, checked by
    :func:`check_link_flags`) when ``executable``, else an object file. The assembly
    goes through a scratch folder; ``output`` is replaced all at once (an existing file stays as it was when the
    link fails, and the ToolError names ``output``), and a symbolic link there is refused unless ``overwrite`` (see
    :func:`~behavioral_pq.core.files.check_output_file`)."""
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="bpq-assemble-") as scratch_dir, \
            atomic_path(check_output_file(output, overwrite=overwrite)) as tmp:
        scratch = Path(scratch_dir) / "program.s"
        scratch.write_text(assembly)
        if executable:
            head, *libraries = linker(cxx, check_link_flags(link_flags))
            argv = [head, str(scratch), "-o", str(tmp), *libraries]
        else:
            argv = [find_tool("clang"), str(scratch), "-o", str(tmp), "-c"]
        try:
            run_tool(argv, timeout=timeout)
        except ToolError as exc:   # its message names the temporary; the user knows the output
            raise type(exc)(f"{output}: not written: {exc}") from None
    return output


#: A line of a tool's output that names what failed: a compiler's ``error:``, a linker's undefined or duplicate
#: symbol, a library or file it cannot find.
FAILURE_LINE = re.compile(r"\berror:|undefined reference|undefined symbol|multiple definition|cannot find|"
                          r"no such file", re.IGNORECASE)
#: clang's own summary of a failed link, which names nothing the lines before it do not.
_LINK_SUMMARY = re.compile(r"linker command failed with exit code")


def failure_lines(text: str, *, lines: int = 4, limit: int = 600) -> List[str]:
    """The lines of a tool's output (or an error message) that name what failed (:data:`FAILURE_LINE`), without
    clang's "linker command failed" summary: at most ``lines`` of them, each stripped and cut to ``limit``
    characters, every one once, in their order."""
    found: List[str] = []
    for line in text.splitlines():
        line = line.strip()
        if FAILURE_LINE.search(line) and not _LINK_SUMMARY.search(line) and line[:limit] not in found:
            found.append(line[:limit])
            if len(found) == lines:
                break
    return found


def excerpt(text: str, limit: int = 2000) -> str:
    """A tool's output cut to about ``limit`` characters, keeping what a reader needs: the head (where the first
    error is), the first line that names what failed (:data:`FAILURE_LINE`: ``error``, an undefined reference,
    a library not found) even when it comes later, and the tail (the summary)."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
    first_error = next(iter(failure_lines(text, lines=1, limit=300)), "")
    if first_error and first_error not in head:
        head = head + "\n" + first_error
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n... [{cut} characters cut] ...\n{tail}"
