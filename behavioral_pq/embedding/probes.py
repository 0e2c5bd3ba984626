"""Probe sets: the P fixed pass sequences a module is probed with to measure its spectrum.

A probe set is a versioned JSON file; its content hash covers what changes measurements (the sequences and
the LLVM major version), so spectra, codebooks and checkpoints can name the probe set they belong to.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import (
    CONFIG_LIMIT,
    check_output_file,
    parse_json_bounded,
    read_json_bounded,
    write_json_atomic,
)
from behavioral_pq.core._native_loader import LLVM_MAJOR
from behavioral_pq.core.catalog import PASSES, get_pass, sequence_pipeline
from behavioral_pq.errors import BPQError, ProbeSetError

FORMAT_VERSION = 1
PROVISIONAL_PROBES = "provisional-random-p100-l50-s0"  # the seeded-random set the search replaced
#: The package default: the first 24 probes of the searched set (probes/searched-p24-l50-s0/REPORT.md: 4.15x fewer
#: pass executions than all 100, the raw spectrum's downstream quality within the seed spread). The shipped encoder
#: keeps the set it was pretrained on (its checkpoint's probes.json).
DEFAULT_PROBES = "searched-p24-l50-s0.json"
SEARCHED_P100 = "searched-p100-l50-s0"  # the flat set the probe search found (bpq probes search)
#: The most probes a set may hold: 40x the largest set the project made (100); every probe is run on every module.
MAX_PROBES = 4096
#: The most passes one probe may hold: 20x the longest the project made (50).
MAX_PROBE_LENGTH = 1000


@dataclass(frozen=True)
class ProbeTrie:
    """The probes of a set laid out as a prefix tree, so that passes shared by several probes run once.

    Node k applies the passes ``edges[k]`` to the state of node ``parents[k]`` (-1: the module as given);
    parents come before children. A node ends where a probe ends or where probes part, so a set with no shared
    prefix is P one-edge paths. Running a sequence in pieces gives the module that running it whole gives
    (the engine keeps use-list order where the tree branches; tests/test_spectrum.py checks it).

    Attributes:
        parents: int per node.
        edges: tuple of catalog flags per node.
        probe_nodes: P node indices: where probe i ends (its spectrum row).
    """

    parents: Tuple[int, ...]
    edges: Tuple[Tuple[str, ...], ...]
    probe_nodes: Tuple[int, ...]

    @property
    def pass_executions(self) -> int:
        """Passes run per module: the sum of the edge lengths."""
        return sum(len(e) for e in self.edges)


def _trie(sequences: Sequence[Tuple[str, ...]]) -> ProbeTrie:
    # One node per distinct prefix first, then chains of single-child, non-probe nodes merged into one edge.
    prefix_node = {(): -1}
    parent, last, children, ends = [], [], {}, set()
    for seq in sequences:
        for depth in range(1, len(seq) + 1):
            prefix = seq[:depth]
            if prefix not in prefix_node:
                prefix_node[prefix] = len(parent)
                parent.append(prefix_node[seq[:depth - 1]])
                last.append(seq[depth - 1])
                children.setdefault(parent[-1], []).append(prefix_node[prefix])
        ends.add(prefix_node[seq])
    parents, edges, renamed = [], [], {-1: -1}
    stack = [(child, -1) for child in reversed(children.get(-1, []))]
    while stack:
        node, new_parent = stack.pop()
        run = [last[node]]
        while node not in ends and len(children.get(node, [])) == 1:
            node = children[node][0]
            run.append(last[node])
        renamed[node] = len(parents)
        parents.append(new_parent)
        edges.append(tuple(run))
        stack += [(child, renamed[node]) for child in reversed(children.get(node, []))]
    return ProbeTrie(tuple(parents), tuple(edges), tuple(renamed[prefix_node[s]] for s in sequences))


@dataclass(frozen=True)
class ProbeSet:
    """P pass sequences (catalog flags) plus where they came from.

    Attributes:
        name: short identifier.
        sequences: P tuples of catalog flags.
        llvm_major: LLVM major version the set was made for.
        seed: RNG seed of the search or sampling, if any.
        corpus: description of the corpus the probes were searched on ("" if none).
        provisional: True for the seeded-random placeholder set.
        search: free-form description of how the set was made (configuration of the search).
    """

    name: str
    sequences: Tuple[Tuple[str, ...], ...]
    llvm_major: int = LLVM_MAJOR
    seed: Optional[int] = None
    corpus: str = ""
    provisional: bool = False
    search: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if not self.sequences:
            raise ProbeSetError(f"probe set {self.name!r} has no sequences")
        _check_counts(self.sequences, f"probe set {self.name!r}")
        for i, seq in enumerate(self.sequences):
            if not seq:
                raise ProbeSetError(f"probe set {self.name!r}: probe {i} is empty")
            try:
                normalized = tuple(get_pass(flag).flag for flag in seq)
            except BPQError as exc:
                raise ProbeSetError(f"probe set {self.name!r}, probe {i}: {exc}") from None
            if normalized != tuple(seq):
                raise ProbeSetError(f"probe set {self.name!r}, probe {i}: write flags as '-name'")

    @property
    def num_probes(self) -> int:
        """P."""
        return len(self.sequences)

    @property
    def length(self) -> int:
        """Length of the longest probe."""
        return max(len(s) for s in self.sequences)

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of the sequences and the LLVM major version."""
        canonical = json.dumps({"llvm_major": self.llvm_major, "sequences": [list(s) for s in self.sequences]},
                               sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def trie(self) -> ProbeTrie:
        """The probes as a prefix tree (what :func:`~behavioral_pq.embedding.spectrum.spectra` runs)."""
        return _trie(self.sequences)

    @property
    def pass_executions(self) -> int:
        """Passes run to measure one module's spectrum (shared prefixes run once)."""
        return self.trie().pass_executions

    def pipelines(self) -> Tuple[str, ...]:
        """One new-PM pipeline string per probe."""
        return tuple(sequence_pipeline(s) for s in self.sequences)

    def to_dict(self) -> dict:
        return {"format_version": FORMAT_VERSION, "name": self.name, "num_probes": self.num_probes,
                "length": self.length, "pass_executions": self.pass_executions, "llvm_major": self.llvm_major, "seed": self.seed, "corpus": self.corpus,
                "provisional": self.provisional, "search": self.search,
                "sequences": [list(s) for s in self.sequences], "hash": self.hash}

    def save(self, path: Union[str, os.PathLike], *, overwrite: bool = False) -> Path:
        """Write the probe set as JSON to ``path`` all at once; a symbolic link there is refused unless
        ``overwrite`` (see :func:`~behavioral_pq.artifacts.check_output_file`)."""
        path = Path(path)
        write_json_atomic(check_output_file(path, overwrite=overwrite), self.to_dict())
        return path

    @classmethod
    def from_dict(cls, data: dict, origin: str = "probe set") -> "ProbeSet":
        if not isinstance(data, dict):
            raise ProbeSetError(f"{origin}: expected a JSON object")
        if data.get("format_version") != FORMAT_VERSION:
            raise ProbeSetError(f"{origin}: unsupported format_version {data.get('format_version')!r}")
        if isinstance(data.get("sequences"), list):
            _check_counts(data["sequences"], origin)
        try:
            sequences = tuple(tuple(s) for s in data["sequences"])
            probes = cls(name=str(data["name"]), sequences=sequences, llvm_major=int(data["llvm_major"]),
                         seed=data.get("seed"), corpus=data.get("corpus", ""),
                         provisional=bool(data.get("provisional", False)), search=data.get("search") or {})
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProbeSetError):
                raise ProbeSetError(f"{origin}: {exc}") from None
            raise ProbeSetError(f"{origin}: malformed probe set ({type(exc).__name__}: {exc})") from None
        for key, actual in (("num_probes", probes.num_probes), ("length", probes.length),
                            ("pass_executions", probes.pass_executions)):
            if key in data and data[key] != actual:
                raise ProbeSetError(f"{origin}: {key} says {data[key]} but the sequences give {actual}")
        if "hash" in data and data["hash"] != probes.hash:
            raise ProbeSetError(f"{origin}: content hash mismatch (edited or corrupt file)")
        if probes.llvm_major != LLVM_MAJOR:
            raise ProbeSetError(f"{origin}: made for LLVM {probes.llvm_major}, this build uses LLVM {LLVM_MAJOR}")
        return probes


def _check_counts(sequences, origin: str) -> None:
    """Refuse more than MAX_PROBES probes or a probe of more than MAX_PROBE_LENGTH passes, before any is read."""
    if len(sequences) > MAX_PROBES:
        raise ProbeSetError(f"{origin}: {len(sequences)} probes, more than the {MAX_PROBES} a probe set may hold")
    for i, seq in enumerate(sequences):
        if isinstance(seq, (list, tuple)) and len(seq) > MAX_PROBE_LENGTH:
            raise ProbeSetError(f"{origin}: probe {i} has {len(seq)} passes, more than the {MAX_PROBE_LENGTH} a "
                                "probe may hold")


def shipped_probe_sets() -> Tuple[str, ...]:
    """Names of the probe sets that ship with the package (``load_probes(name)`` loads one)."""
    folder = resources.files("behavioral_pq").joinpath("data/probes")
    return tuple(sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".json")))


def load_probes(path: Union[str, os.PathLike, ProbeSet, None] = None) -> ProbeSet:
    """Load a probe set: a JSON file, the name of a shipped set (see :func:`shipped_probe_sets`), or None for
    the package default."""
    if isinstance(path, ProbeSet):
        return path
    if path is None or (isinstance(path, str) and not os.path.exists(path) and path in shipped_probe_sets()):
        filename = DEFAULT_PROBES if path is None else path + ".json"
        data = resources.files("behavioral_pq").joinpath("data/probes", filename).read_bytes()
        return ProbeSet.from_dict(parse_json_bounded(data, origin=filename, what="probe set", error=ProbeSetError),
                                  origin=f"shipped probe set {filename}")
    path = Path(path)
    if not os.path.lexists(path):
        raise ProbeSetError(f"cannot read probe set {path}: no such file")
    data = read_json_bounded(path, limit=CONFIG_LIMIT, what="probe set", error=ProbeSetError)
    return ProbeSet.from_dict(data, origin=str(path))


def random_probes(num_probes: int = 100, length: int = 50, seed: int = 0,
                  exclude: Sequence[str] = ()) -> ProbeSet:
    """A seeded-random probe set: each probe draws ``length`` passes uniformly from the catalog."""
    rng = np.random.default_rng(seed)
    pool = [p.flag for p in PASSES if p.flag not in set(exclude)]
    sequences = tuple(tuple(pool[i] for i in rng.integers(0, len(pool), size=length)) for _ in range(num_probes))
    return ProbeSet(name=f"provisional-random-p{num_probes}-l{length}-s{seed}", sequences=sequences, seed=seed,
                    corpus="none (uniform random over the catalog)", provisional=True,
                    search={"method": "uniform random", "exclude": list(exclude)})
