"""Saved predictors on top of an encoder: ``predict_best_pass(module, k=5)`` and ``predict_oz_benefit(module)``.

A predictor folder holds ``predictor.json`` (format version, kind, the encoder it was trained on — its weights'
sha256 and probe-set hash —, the training data, validation metrics, versions) and the estimator
(``estimator.json`` + ``estimator.safetensors``, see :mod:`behavioral_pq.downstream`). Loading refuses a predictor
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

from behavioral_pq.errors import BPQError

FORMAT = "behavioral_pq.predictor"
FORMAT_VERSION = 1
KINDS = ("best-pass", "oz-benefit")
ESTIMATOR_FILES = ("estimator.json", "estimator.safetensors")
DEFAULT_NAMES = {"best-pass": "pqbert-small-s0-best-pass", "oz-benefit": "pqbert-small-s0-oz"}


class PredictorError(BPQError, ValueError):
    """A predictor folder that cannot be used: missing, corrupt, another format, or tied to another encoder."""


class PassScore(NamedTuple):
    """One ranked best-pass prediction: ``name`` is the catalog flag ("-sroa"), or "(none)" for the class "no
    pass reduces the instruction count" (``index`` 124); ``score`` its probability."""

    name: str
    index: int
    score: float


def encoder_identity(encoder) -> dict:
    """What ties a predictor to an encoder: the weights' sha256 and the probe-set hash."""
    return {"name": Path(encoder.path).name if encoder.path else None,
            "model_sha256": encoder.config.get("files", {}).get("model.safetensors"),
            "probe_set_hash": encoder.probe_set.hash}


def read_config(file: Path, fmt: str, version: int, error: type, what: str) -> dict:
    """The JSON config of a saved artifact folder, checked for its format and version; ``error`` otherwise."""
    try:
        config = json.loads(file.read_text())
    except FileNotFoundError:
        raise error(f"{file.parent}: not {what} (no {file.name})") from None
    except (OSError, ValueError) as exc:
        raise error(f"{file}: unreadable ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != fmt or config.get("format_version") != version:
        found = (config.get("format"), config.get("format_version")) if isinstance(config, dict) else (None, None)
        raise error(f"{file.parent}: format {found[0]!r} version {found[1]!r}, this library reads {fmt!r} "
                    f"version {version}")
    from behavioral_pq.checkpoint import check_seal

    check_seal(config, file, error)
    return config


def file_checksums(folder: Path, names) -> dict:
    """sha256 of each named file of ``folder``, for a sealed config."""
    from behavioral_pq.corpus.store import sha256_file

    return {name: sha256_file(folder / name) for name in names}


def check_files(folder: Path, config: dict, error: type) -> None:
    """Raise ``error`` naming the file when a file listed in ``config["files"]`` is missing or differs."""
    from behavioral_pq.corpus.store import sha256_file

    files = config.get("files")
    if not isinstance(files, dict) or not files:
        raise error(f"{folder}: no file checksums in its config; save it again")
    for name, digest in files.items():
        file = folder / name
        if not file.is_file():
            raise error(f"{file}: missing")
        if sha256_file(file) != digest:
            raise error(f"{file}: checksum mismatch (corrupt or edited file)")


def check_encoder(path, wanted: dict, encoder, error: type, hint: str, verb: str = "built") -> None:
    """Refuse an artifact at ``path`` made on another encoder than ``encoder`` (``wanted``: its saved identity)."""
    mine = encoder_identity(encoder)
    for key in ("model_sha256", "probe_set_hash"):
        if mine[key] != wanted.get(key):
            raise error(f"{path}: {verb} on encoder {wanted.get('name')!r} ({key} {str(wanted.get(key))[:12]}), "
                        f"given {mine['name']!r} ({key} {str(mine[key])[:12]}); {hint}")


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
        from behavioral_pq.catalog import PASSES

        order = np.argsort(-probabilities, kind="stable")[:k]
        return [PassScore(PASSES[i].flag if i < len(PASSES) else "(none)", int(i), float(probabilities[i]))
                for i in order]


def save_predictor(path: Union[str, os.PathLike], kind: str, estimator, encoder, *, training: dict,
                   metrics: dict) -> Path:
    """Write a predictor folder (replacing ``path`` only once complete)."""
    import shutil

    from behavioral_pq.checkpoint import seal, versions

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    estimator.save(tmp)
    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "versions": versions(),
              "encoder": encoder_identity(encoder), "representation": f"pqbert-{encoder.pooling}",
              "pooling": encoder.pooling, "training": training, "metrics": metrics,
              "files": file_checksums(tmp, ESTIMATOR_FILES)}
    (tmp / "predictor.json").write_text(json.dumps(seal(config), indent=2) + "\n")
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    return path


def load_predictor(path: Union[str, os.PathLike, None] = None, *, kind: Optional[str] = None,
                   encoder=None) -> Predictor:
    """Load a predictor folder (default: the shipped one of ``kind``) on ``encoder`` (default: the shipped one).

    Raises:
        PredictorError: missing or unreadable folder, another format or kind, or an encoder mismatch.
    """
    from behavioral_pq.downstream import BestPassClassifier, OzBenefitRegressor
    from behavioral_pq.encoder import load_encoder, shipped

    if path is None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS} when no path is given")
        path = shipped(DEFAULT_NAMES[kind])
    path = Path(path)
    config = read_config(path / "predictor.json", FORMAT, FORMAT_VERSION, PredictorError, "a predictor")
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
    from behavioral_pq.datasets import concat, module_items, state_items

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
                    states: Optional[Union[str, os.PathLike]] = None, seed: int = 0, settings=None) -> dict:
    """Train a predictor of ``kind`` on the embeddings of a corpus store and save it to ``out``.

    Trains on the store's ``train`` split and stops early on ``valid`` (an unsplit store uses every labelled
    module, with 10% held out for early stopping). Returns the saved config's ``training`` and ``metrics``.
    """
    from behavioral_pq.datasets import embeddings
    from behavioral_pq.downstream import BestPassClassifier, OzBenefitRegressor, TrainSettings
    from behavioral_pq.encoder import load_encoder
    from behavioral_pq.states import NUM_CLASSES

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
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
    save_predictor(out, kind, estimator, encoder, training=training, metrics=metrics)
    return {"training": training, "metrics": metrics}


__all__ = ["PassScore", "Predictor", "PredictorError", "load_predictor", "save_predictor", "predict_best_pass",
           "predict_oz_benefit", "train_predictor", "training_data"]
