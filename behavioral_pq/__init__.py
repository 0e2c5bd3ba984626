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
    (100, 56)

Names load lazily: ``import behavioral_pq`` does not import the native core, torch or faiss.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    "Module": "behavioral_pq.module",
    "load_module": "behavioral_pq.module",
    "autophase": "behavioral_pq.features",
    "instcount": "behavioral_pq.features",
    "AUTOPHASE_FEATURES": "behavioral_pq.features",
    "INSTCOUNT_FEATURES": "behavioral_pq.features",
    "optimize": "behavioral_pq.passes",
    "PASSES": "behavioral_pq.catalog",
    "spectrum": "behavioral_pq.reaction",
    "spectra": "behavioral_pq.reaction",
    "log_relative": "behavioral_pq.reaction",
    "ProbeSet": "behavioral_pq.probes",
    "load_probes": "behavioral_pq.probes",
    "Engine": "behavioral_pq.engine",
    "embed": "behavioral_pq.encoder",
    "embed_many": "behavioral_pq.encoder",
    "load_encoder": "behavioral_pq.encoder",
    "predict_best_pass": "behavioral_pq.predictors",
    "predict_oz_benefit": "behavioral_pq.predictors",
    "load_predictor": "behavioral_pq.predictors",
    "recommend_pipeline": "behavioral_pq.guidance",
    "load_library": "behavioral_pq.guidance",
    "lower": "behavioral_pq.lowering.backends",
    "BPQError": "behavioral_pq.errors",
    "InvalidIRError": "behavioral_pq.errors",
    "UnknownPassError": "behavioral_pq.errors",
    "PassCrashError": "behavioral_pq.errors",
    "PassTimeoutError": "behavioral_pq.errors",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from behavioral_pq.catalog import PASSES
    from behavioral_pq.encoder import embed, embed_many, load_encoder
    from behavioral_pq.engine import Engine
    from behavioral_pq.errors import BPQError, InvalidIRError, PassCrashError, PassTimeoutError, UnknownPassError
    from behavioral_pq.guidance import load_library, recommend_pipeline
    from behavioral_pq.lowering.backends import lower
    from behavioral_pq.features import AUTOPHASE_FEATURES, INSTCOUNT_FEATURES, autophase, instcount
    from behavioral_pq.module import Module, load_module
    from behavioral_pq.passes import optimize
    from behavioral_pq.predictors import load_predictor, predict_best_pass, predict_oz_benefit
    from behavioral_pq.probes import ProbeSet, load_probes
    from behavioral_pq.reaction import log_relative, spectra, spectrum


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'behavioral_pq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
