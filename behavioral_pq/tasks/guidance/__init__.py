"""Guiding the pass pipeline (DESIGN.md section 10): a program library and :func:`recommend_pipeline`.

A *pipeline* here is a tuple of steps, each a catalog flag (``"-gvn"``) or ``"-Oz"`` (all of LLVM 19's
``default<Oz>``); :func:`behavioral_pq.core.catalog.steps_pipeline` turns it into a new-PM string.

- :class:`ProgramLibrary`: training programs' embeddings in a FAISS index and, per program, the instruction counts
  of good pipelines found for it offline (:func:`build_library`: a few generic pipelines, and genetic searches
  from the module as built and from its -Oz output). Saved as a versioned folder; the shipped default is
  ``checkpoints/pqbert-small-m14-s0-library``.
- :func:`recommend_pipeline`: embed a module, rank the pipelines of its nearest library programs by a
  distance-weighted vote of their measured gains over -Oz, try the best within a budget of compilations, spend
  the rest of the budget on a local search around the best found, and return the best. -Oz is the reference: it
  is always compiled (outside the budget), so the answer is never worse than -Oz. With ``learn=True`` the
  result goes back into the library (self-improvement: a better pipeline replaces a program's old target).
- :func:`fit_coreset`: a library's coreset, a few pipelines that do well on many of its programs at once
  (measured across a sample of them, chosen greedily); :func:`recommend_pipeline` tries them next to the
  neighbors' pipelines.

The budget counts candidate compilations (one pipeline run on the module); the embedding's probe runs are a
fixed cost reported separately (``Recommendation.probe_compilations``).
"""

from behavioral_pq.tasks.guidance.baselines import greedy_search, random_search
from behavioral_pq.tasks.guidance.build import build_library, choose_library_programs, search_program
from behavioral_pq.tasks.guidance.coreset import fit_coreset
from behavioral_pq.tasks.guidance.library import (
    GENERIC,
    OZ,
    LibraryProgram,
    ProgramLibrary,
    Steps,
    default_library,
    describe_steps,
    load_library,
    merge_libraries,
)
from behavioral_pq.tasks.guidance.recommend import recommend_and_optimize, recommend_pipeline
from behavioral_pq.tasks.guidance.trials import Recommendation, SearchProgress, Trials

__all__ = ["GENERIC", "OZ", "LibraryProgram", "ProgramLibrary", "Recommendation", "SearchProgress", "Steps", "Trials",
           "build_library", "choose_library_programs", "default_library", "describe_steps", "fit_coreset",
           "greedy_search", "load_library", "merge_libraries", "random_search", "recommend_and_optimize",
           "recommend_pipeline", "search_program"]
