"""behavioral_pq: behavioral embeddings of LLVM IR modules for ML-driven compiler optimization.

A module is probed with P pass sequences; how its 56 Autophase features react gives a P x 56 spectrum, which a
product quantizer and PQ-BERT turn into an embedding (Pan et al., "Behavioral Embeddings of Programs").

Example::

    >>> import behavioral_pq as bpq
    >>> m = bpq.load_module("behavioral_pq/data/examples/sum_array.c")
    >>> int(bpq.autophase(m)[bpq.AUTOPHASE_FEATURES.index("TotalFuncs")])  # declarations count
    5
    >>> bpq.optimize(m, "Oz").instruction_count < m.instruction_count
    True
    >>> bpq.spectrum(m).shape
    (24, 56)

The package is layered (see docs/architecture.md): ``core`` (LLVM, modules, passes, features),
``embedding`` (probe sets, spectra, quantizer, PQ-BERT, encoder), ``corpus``, ``training``, ``tasks``
(predictors, guidance), ``lowering``, ``reports`` and ``cli``. This module re-exports the few names most users
need; everything else is reachable by submodule (``behavioral_pq.errors`` holds every error class). Names load
lazily: ``import behavioral_pq`` does not import the native core, torch or faiss.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from behavioral_pq._version import __version__

_EXPORTS = {
    "Module": "behavioral_pq.core.module",
    "load_module": "behavioral_pq.core.module",
    "autophase": "behavioral_pq.core.features",
    "instcount": "behavioral_pq.core.features",
    "AUTOPHASE_FEATURES": "behavioral_pq.core.features",
    "PASSES": "behavioral_pq.core.catalog",
    "optimize": "behavioral_pq.core.passes",
    "Engine": "behavioral_pq.core.engine",
    "load_probes": "behavioral_pq.embedding.probes",
    "spectrum": "behavioral_pq.embedding.spectrum",
    "spectra": "behavioral_pq.embedding.spectrum",
    "embed": "behavioral_pq.embedding.encoder",
    "embed_many": "behavioral_pq.embedding.encoder",
    "load_encoder": "behavioral_pq.embedding.encoder",
    "predict_best_pass": "behavioral_pq.tasks.predictors",
    "predict_oz_benefit": "behavioral_pq.tasks.predictors",
    "recommend_pipeline": "behavioral_pq.tasks.guidance",
    "lower": "behavioral_pq.lowering.backends",
    "BPQError": "behavioral_pq.errors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from behavioral_pq.core.catalog import PASSES
    from behavioral_pq.core.engine import Engine
    from behavioral_pq.core.features import AUTOPHASE_FEATURES, autophase, instcount
    from behavioral_pq.core.module import Module, load_module
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.embedding.encoder import embed, embed_many, load_encoder
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.embedding.spectrum import spectra, spectrum
    from behavioral_pq.errors import BPQError
    from behavioral_pq.lowering.backends import lower
    from behavioral_pq.tasks.guidance import recommend_pipeline
    from behavioral_pq.tasks.predictors import predict_best_pass, predict_oz_benefit


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'behavioral_pq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
