"""Corpora of LLVM modules: discover inputs, build a Parquet store with features and labels, add spectra, split.

Typical use::

    from behavioral_pq.corpus import discover, build_corpus, Corpus
    summary = build_corpus(discover(["my_sources/"], origin="mine"), "store/", progress=True)
    corpus = Corpus("store/")
    corpus.labels()          # pyarrow Table: sha256, pass_counts, best_passes, oz_benefit, ...

Storage layout, resumability and concurrency: :mod:`behavioral_pq.corpus.store`; jobs and executors:
:mod:`behavioral_pq.corpus.build`.
"""

from behavioral_pq.corpus.build import (
    JobSummary,
    build_corpus,
    compute_spectra,
    dask_executor,
    label_corpus,
    local_executor,
)
from behavioral_pq.corpus.inputs import InputItem, discover, from_compile_commands
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.corpus.split import split_corpus
from behavioral_pq.corpus.store import CorpusStore

__all__ = ["Corpus", "CorpusStore", "InputItem", "JobSummary", "build_corpus", "compute_spectra", "dask_executor",
           "discover", "from_compile_commands", "label_corpus", "local_executor", "split_corpus"]
