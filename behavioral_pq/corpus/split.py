"""Train/validation/test splits by source group.

Groups are ``origin:group`` of the inputs (the program a module came from, see ``--group-regex``). Groups that
share a module (the same prepared bitcode from two programs) are merged first, so a module, and every near-copy
that compiles to it, lands in exactly one split. Each merged group goes to a split by a seeded hash of its
name: stable when the corpus grows, independent of the order of the store.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from typing import Dict, Sequence

import pyarrow as pa

from behavioral_pq.corpus.store import CorpusStore

DEFAULT_SPLITS = ("train", "valid", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)


class _UnionFind:
    def __init__(self):
        self.parent: Dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # the smaller name becomes the root, so the component's name does not depend on the order
            self.parent[max(ra, rb)] = min(ra, rb)


def _unit(name: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0 ** 64


def split_corpus(store: os.PathLike, *, fractions: Sequence[float] = DEFAULT_FRACTIONS,
                 names: Sequence[str] = DEFAULT_SPLITS, seed: int = 0) -> Dict[str, int]:
    """Assign every module of the store to a split by source group; write the assignment into the store.

    Returns:
        number of modules per split name.
    Raises:
        ValueError: fractions that do not match the names, are negative or do not sum to 1.
    """
    if len(fractions) != len(names) or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"need one non-negative fraction per split ({list(names)}) summing to 1, got "
                         f"{list(fractions)}")
    corpus = CorpusStore(store)
    uf = _UnionFind()
    module_group: Dict[str, str] = {}
    for batch in corpus.iter_batches("inputs", ["sha256", "origin", "group", "status"]):
        for sha, origin, group, status in zip(*(c.to_pylist() for c in batch.columns)):
            if status != "ok":
                continue
            name = f"{origin}:{group}"
            uf.find(name)
            if sha in module_group:
                uf.union(module_group[sha], name)
            else:
                module_group[sha] = name
    bounds, acc = [], 0.0
    for f in fractions:
        acc += f
        bounds.append(acc)
    shas = sorted(module_group)
    groups = [uf.find(module_group[s]) for s in shas]
    assignment = {}
    for group in set(groups):
        u = _unit(group, seed)
        assignment[group] = next((n for n, b in zip(names, bounds) if u < b), names[-1])
    splits = [assignment[g] for g in groups]
    counts = Counter(splits)
    group_counts = Counter(assignment.values())
    corpus.write_splits(pa.table({"sha256": shas, "group": groups, "split": splits}),
                        {"seed": seed, "fractions": list(fractions), "names": list(names),
                         "counts": {n: counts.get(n, 0) for n in names},
                         "groups": {n: group_counts.get(n, 0) for n in names}})
    return {n: counts.get(n, 0) for n in names}
