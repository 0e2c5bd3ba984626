"""Saved predictors on top of an encoder: ``predict_best_pass(module, k=5)`` and ``predict_oz_benefit(module)``.

A predictor folder holds ``predictor.json`` (format version, kind, the encoder it was trained on — its weights'
sha256 and probe-set hash —, the training data, validation metrics, versions) and the estimator
(``estimator.json`` + ``estimator.safetensors``, see :mod:`behavioral_pq.tasks.estimators`). Loading refuses a predictor
whose encoder is not the one given (or the shipped default), since its inputs would mean something else.

- ``best-pass``: the best *next* pass from the module's current state (125 classes: the 124 catalog passes and
  "no pass reduces the instruction count"), trained on modules as built plus intermediate states when a state
  folder is given.
- ``oz-benefit``: ``(IC0 - IC_Oz) / IC0``, trained on modules as built.

Train with :func:`train_predictor` or ``bpq train best-pass|oz --corpus STORE --out DIR``.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Union

import numpy as np

from behavioral_pq.artifacts import (
    atomic_path,
    check_encoder,
    check_files,
    check_replaceable,
    encoder_identity,
    file_checksums,
    read_sealed_config,
    seal,
    versions,
)
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.corpus.states import NUM_CLASSES
from behavioral_pq.embedding.encoder import load_encoder, shipped
from behavioral_pq.errors import PredictorError
from behavioral_pq.tasks.datasets import concat, embeddings, module_items, state_items
from behavioral_pq.tasks.estimators import BestPassClassifier, OzBenefitRegressor, TrainSettings

FORMAT = "behavioral_pq.predictor"
FORMAT_VERSION = 1
KINDS = ("best-pass", "oz-benefit")
ESTIMATOR_FILES = ("estimator.json", "estimator.safetensors")
DEFAULT_NAMES = {"best-pass": "pqbert-small-s0-best-pass", "oz-benefit": "pqbert-small-s0-oz"}


class PassScore(NamedTuple):
    """One ranked best-pass prediction: ``name`` is the catalog flag ("-sroa"), or "(none)" for the class "no
    pass reduces the instruction count" (``index`` 124); ``score`` its probability."""

    name: str
    index: int
    score: float


@dataclass
class Predictor:
    """A loaded predictor: ``estimator`` on the embeddings of ``encoder``."""

    kind: str
    estimator: object
    encoder: object
    config: dict
    path: Optional[Path] = None

    def predict_embeddings(self, X: np.ndarray) -> np.ndarray:
        """best-pass: float32 (N, 125) probabilities; oz-benefit: float32 (N,) fractions."""
        if self.kind == "best-pass":
            return self.estimator.predict_proba(X)
        return self.estimator.predict(X)

    def predict_module(self, module) -> np.ndarray:
        return self.predict_embeddings(self.encoder.embed(module)[None])[0]

    def ranked(self, probabilities: np.ndarray, k: int) -> List[PassScore]:
        order = np.argsort(-probabilities, kind="stable")[:k]
        return [PassScore(PASSES[i].flag if i < len(PASSES) else "(none)", int(i), float(probabilities[i]))
                for i in order]


def save_predictor(path: Union[str, os.PathLike], kind: str, estimator, encoder, *, training: dict,
                   metrics: dict, overwrite: bool = False) -> Path:
    """Write a predictor folder (replacing ``path`` only once complete; a folder that holds something else than
    a predictor is refused unless ``overwrite``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(path)
    check_replaceable(path, config="predictor.json", format=FORMAT, overwrite=overwrite, error=PredictorError,
                      what="a predictor")
    with atomic_path(path) as tmp:
        estimator.save(tmp)
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "versions": versions(),
                  "encoder": encoder_identity(encoder), "representation": f"pqbert-{encoder.pooling}",
                  "pooling": encoder.pooling, "training": training, "metrics": metrics,
                  "files": file_checksums(tmp, ESTIMATOR_FILES)}
        (tmp / "predictor.json").write_text(json.dumps(seal(config), indent=2) + "\n")
    return path


def load_predictor(path: Union[str, os.PathLike, None] = None, *, kind: Optional[str] = None,
                   encoder=None) -> Predictor:
    """Load a predictor folder (default: the shipped one of ``kind``) on ``encoder`` (default: the shipped one).

    Raises:
        PredictorError: missing or unreadable folder, another format or kind, or an encoder mismatch.
    """

    if path is None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} when no path is given")
        path = shipped(DEFAULT_NAMES[kind])
    path = Path(path)
    config = read_sealed_config(path / "predictor.json", format=FORMAT, version=FORMAT_VERSION, error=PredictorError,
                                what="a predictor")
    if kind is not None and config.get("kind") != kind:
        raise PredictorError(f"{path}: a {config.get('kind')!r} predictor, not {kind!r}")
    encoder = encoder or load_encoder(pooling=config.get("pooling"))
    if encoder.pooling != config.get("pooling"):
        encoder = load_encoder(encoder.path, pooling=config.get("pooling"))  # same weights, the predictor's pooling
    check_encoder(path, config.get("encoder", {}), encoder, PredictorError,
                  "pass the encoder it was trained on (--checkpoint) or retrain it (bpq train)", verb="trained")
    check_files(path, config, PredictorError)
    cls = BestPassClassifier if config["kind"] == "best-pass" else OzBenefitRegressor
    try:
        estimator = cls.load(path)
    except ValueError as exc:
        raise PredictorError(str(exc)) from None
    if estimator.dim != encoder.dim:
        raise PredictorError(f"{path}: estimator reads {estimator.dim} features, the encoder gives {encoder.dim}")
    return Predictor(config["kind"], estimator, encoder, config, path)


_cache: Dict[str, Predictor] = {}
_lock = threading.Lock()


def _default(kind: str) -> Predictor:
    with _lock:
        if kind not in _cache:
            _cache[kind] = load_predictor(kind=kind)
        return _cache[kind]


def predict_best_pass(module, k: int = 5, *, predictor: Optional[Predictor] = None) -> List[PassScore]:
    """The ``k`` most likely best next passes for ``module`` (a Module or what ``load_module`` takes), ranked.

    Example::

        >>> predict_best_pass("prog.c", k=3)          # doctest: +SKIP
        [PassScore(name='-sroa', index=114, score=0.71), PassScore(name='-mem2reg', index=104, score=0.22), ...]
    """
    predictor = predictor or _default("best-pass")
    if predictor.kind != "best-pass":
        raise PredictorError(f"{predictor.path}: a {predictor.kind!r} predictor, not 'best-pass'")
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    return predictor.ranked(predictor.predict_module(module), k)


def predict_oz_benefit(module, *, predictor: Optional[Predictor] = None) -> float:
    """Predicted ``(IC0 - IC_Oz) / IC0`` of ``module``: the fraction of instructions -Oz would remove."""
    predictor = predictor or _default("oz-benefit")
    if predictor.kind != "oz-benefit":
        raise PredictorError(f"{predictor.path}: a {predictor.kind!r} predictor, not 'oz-benefit'")
    return float(predictor.predict_module(module))


def training_data(kind: str, store: Union[str, os.PathLike], *, states: Optional[Union[str, os.PathLike]] = None,
                  probes=None):
    """(train, valid) ItemSets for a predictor kind: labelled modules with spectra (+ states for best-pass)."""

    items = module_items(store, probes)
    if states is not None and kind == "best-pass":
        items = concat([items, state_items(states)])
    if not len(items):
        raise PredictorError(f"{store}: no labelled modules with spectra for this probe set "
                             f"(run: bpq corpus labels {store}; bpq corpus spectra {store})")
    has_splits = any(items.splits)
    train = items.split("train") if has_splits else items
    valid = items.split("valid") if has_splits else None
    return train, (valid if valid is not None and len(valid) else None)


def train_predictor(kind: str, store: Union[str, os.PathLike], out: Union[str, os.PathLike], *, encoder=None,
                    states: Optional[Union[str, os.PathLike]] = None, seed: int = 0, settings=None,
                    overwrite: bool = False) -> dict:
    """Train a predictor of ``kind`` on the embeddings of a corpus store and save it to ``out``.

    Trains on the store's ``train`` split and stops early on ``valid`` (an unsplit store uses every labelled
    module, with 10% held out for early stopping). Returns the saved config's ``training`` and ``metrics``.
    """

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    check_replaceable(out, config="predictor.json", format=FORMAT, overwrite=overwrite, error=PredictorError,
                      what="a predictor")
    encoder = encoder or load_encoder()
    train, valid = training_data(kind, store, states=states, probes=encoder.probe_set)
    settings = settings or TrainSettings(seed=seed)
    X = embeddings(train, encoder)
    Xv = embeddings(valid, encoder) if valid is not None else None
    metrics: dict = {}
    if kind == "best-pass":
        estimator = BestPassClassifier(settings, num_classes=NUM_CLASSES)
        estimator.fit(X, train.next_pass_sets(), Xv, valid.next_pass_sets() if valid is not None else None)
        if valid is not None:
            metrics = {"valid_top1": estimator.score(Xv, valid.next_pass_sets(), 1),
                       "valid_top5": estimator.score(Xv, valid.next_pass_sets(), 5)}
    else:
        estimator = OzBenefitRegressor(settings)
        estimator.fit(X, train.oz_benefit(), Xv, valid.oz_benefit() if valid is not None else None)
        if valid is not None:
            metrics = {"valid_mae_points": estimator.score(Xv, valid.oz_benefit())}
    training = {"store": str(Path(store).resolve()), "states": str(Path(states).resolve()) if states else None,
                "items": {"train": len(train), "valid": len(valid) if valid is not None else 0},
                "seed": settings.seed, "best_epoch": estimator.best_epoch_}
    save_predictor(out, kind, estimator, encoder, training=training, metrics=metrics, overwrite=overwrite)
    return {"training": training, "metrics": metrics}


__all__ = ["PassScore", "Predictor", "PredictorError", "load_predictor", "save_predictor", "predict_best_pass",
           "predict_oz_benefit", "train_predictor", "training_data"]
