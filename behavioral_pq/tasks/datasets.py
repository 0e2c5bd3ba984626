"""Downstream datasets: labelled items (modules as built, or intermediate states) with every representation's inputs.

An :class:`ItemSet` holds, for N items, what any representation or task needs: the split, Autophase, InstCount,
the spectrum, the instruction count, the count after each of the 124 passes and the -Oz count. Build one from a
corpus store (:func:`module_items`: labelled modules with stored spectra) or from a state folder
(:func:`state_items`, see :mod:`behavioral_pq.corpus.states`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import numpy as np

from behavioral_pq.core.features import INSTCOUNT_FEATURES
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.corpus.states import NO_PASS, next_pass_labels, read_states, state_spectra, states_settings
from behavioral_pq.errors import CorpusError


@dataclass
class ItemSet:
    """N labelled items.

    Attributes:
        ids: N item ids (module hash; ``program:state`` for states).
        groups: N program hashes (the unit of splitting: all states of a program share it).
        splits: N split names ("train", "valid", "test", or "" when unsplit).
        autophase: int64 (N, 56), the item's own features. instcount: int64 (N, K).
        spectra: float32 (N, P, 56), log-relative. instruction_count: int64 (N,).
        pass_counts: int64 (N, 124). oz_count: int64 (N,). kinds: N item kinds ("module", "random", "oz-like").
    """

    ids: List[str]
    groups: List[str]
    splits: List[str]
    autophase: np.ndarray
    instcount: np.ndarray
    spectra: np.ndarray
    instruction_count: np.ndarray
    pass_counts: np.ndarray
    oz_count: np.ndarray
    kinds: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def subset(self, mask: Union[np.ndarray, Sequence[int]]) -> "ItemSet":
        index = np.flatnonzero(mask) if np.asarray(mask).dtype == bool else np.asarray(mask, dtype=np.int64)
        pick = lambda values: [values[i] for i in index]  # noqa: E731
        return ItemSet(pick(self.ids), pick(self.groups), pick(self.splits), self.autophase[index],
                       self.instcount[index], self.spectra[index], self.instruction_count[index],
                       self.pass_counts[index], self.oz_count[index], pick(self.kinds) if self.kinds else [])

    def split(self, name: str) -> "ItemSet":
        return self.subset(np.array([s == name for s in self.splits], dtype=bool))

    def best_pass_sets(self) -> List[List[int]]:
        """Paper task (Task 1): the passes reaching the smallest count (124-way; ties kept, never empty)."""
        return [np.flatnonzero(row == row.min()).tolist() for row in self.pass_counts]

    def next_pass_sets(self) -> List[List[int]]:
        """Guidance task (Task 1b): the passes with the largest reduction, or ``[NO_PASS]`` (125-way)."""
        return [next_pass_labels(ic, row) for ic, row in zip(self.instruction_count, self.pass_counts)]

    def oz_benefit(self) -> np.ndarray:
        """float64 (N,): ``(IC0 - IC_Oz) / IC0``."""
        ic = self.instruction_count.astype(np.float64)
        return np.where(ic > 0, (ic - self.oz_count) / np.maximum(ic, 1), 0.0)


def module_items(store: Union[str, os.PathLike], probes=None, *, splits: Optional[Sequence[str]] = None,
                 shas: Optional[Sequence[str]] = None) -> ItemSet:
    """Labelled modules of a corpus store that have stored spectra for ``probes`` (sorted by hash).

    Args:
        splits: keep only these splits (default: all).
        shas: keep only these modules.
    Raises:
        CorpusError: the store has no labels or no spectra for the probe set.
    """

    corpus = Corpus(store)
    if not corpus.store.keys("labels"):
        raise CorpusError(f"{store}: no labels (run: bpq corpus labels {store})")
    labels = corpus.labels().to_pydict()
    assigned = corpus.store.splits()
    label_rows = {s: i for i, s in enumerate(labels["sha256"])}
    wanted = [s for s in (shas if shas is not None else label_rows) if s in label_rows]
    if splits is not None:
        wanted = [s for s in wanted if assigned.get(s, "") in set(splits)]
    ids, spectra = corpus.spectra(probes, shas=sorted(wanted))
    modules = corpus.modules(["sha256", "instruction_count", "autophase", "instcount"]).to_pydict()
    module_rows = {s: i for i, s in enumerate(modules["sha256"])}
    rows = [module_rows[s] for s in ids]
    lrows = [label_rows[s] for s in ids]
    if not ids:
        return _empty(spectra.shape[1])
    return ItemSet(ids=list(ids), groups=list(ids), splits=[assigned.get(s, "") for s in ids],
                   autophase=np.array([modules["autophase"][r] for r in rows], np.int64),
                   instcount=np.array([modules["instcount"][r] for r in rows], np.int64),
                   spectra=spectra, instruction_count=np.array([modules["instruction_count"][r] for r in rows],
                                                               np.int64),
                   pass_counts=np.array([labels["pass_counts"][r] for r in lrows], np.int64),
                   oz_count=np.array([labels["oz_count"][r] for r in lrows], np.int64),
                   kinds=["module"] * len(ids))


def state_items(path: Union[str, os.PathLike]) -> ItemSet:
    """The measured states of a state folder (failed ones left out), in (program, state) order."""

    num_probes = states_settings(path)["probe_set"]["num_probes"]
    table = read_states(path, status="ok").sort_by([("program", "ascending"), ("state", "ascending")])
    if table.num_rows == 0:
        return _empty(num_probes)
    data = table.select([c for c in table.column_names if c != "spectrum"]).to_pydict()
    return ItemSet(ids=[f"{p}:{s}" for p, s in zip(data["program"], data["state"])], groups=data["program"],
                   splits=[s or "" for s in data["split"]], autophase=np.array(data["autophase"], np.int64),
                   instcount=np.array(data["instcount"], np.int64), spectra=state_spectra(table, num_probes),
                   instruction_count=np.array(data["instruction_count"], np.int64),
                   pass_counts=np.array(data["pass_counts"], np.int64),
                   oz_count=np.array(data["oz_count"], np.int64), kinds=data["kind"])


def _empty(num_probes: int) -> ItemSet:
    return ItemSet([], [], [], np.zeros((0, 56), np.int64), np.zeros((0, len(INSTCOUNT_FEATURES)), np.int64),
                   np.zeros((0, num_probes, 56), np.float32), np.zeros(0, np.int64), np.zeros((0, 124), np.int64),
                   np.zeros(0, np.int64), [])


def embeddings(items: ItemSet, encoder, batch_size: int = 128) -> np.ndarray:
    """float32 (N, D): the encoder's embeddings of the items' spectra, ``batch_size`` modules per forward pass
    (bulk work: much faster than one by one, equal to it up to float rounding)."""
    if len(items) == 0:
        return np.zeros((0, encoder.dim), np.float32)
    return encoder.embed_spectra(items.spectra, items.autophase, batch_size)


def concat(parts: Sequence[ItemSet]) -> ItemSet:
    """One ItemSet of several (same probe count)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        raise ValueError("nothing to concatenate")
    return ItemSet(sum((p.ids for p in parts), []), sum((p.groups for p in parts), []),
                   sum((p.splits for p in parts), []), np.concatenate([p.autophase for p in parts]),
                   np.concatenate([p.instcount for p in parts]), np.concatenate([p.spectra for p in parts]),
                   np.concatenate([p.instruction_count for p in parts]),
                   np.concatenate([p.pass_counts for p in parts]), np.concatenate([p.oz_count for p in parts]),
                   sum((p.kinds for p in parts), []))


__all__ = ["ItemSet", "module_items", "state_items", "embeddings", "concat", "NO_PASS"]
