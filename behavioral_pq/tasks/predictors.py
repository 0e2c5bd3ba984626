"""Saved predictors on top of an encoder: ``predict_best_pass(module, k=5)`` and ``predict_oz_benefit(module)``.

A predictor folder holds ``predictor.json`` (format version, kind, the encoder it was trained on — its weights'
sha256 and probe-set hash —, the training data, validation metrics, versions) and the estimator
(``estimator.json`` + ``estimator.safetensors``, see :mod:`behavioral_pq.tasks.estimators`). Loading refuses a predictor
whose encoder is not the one given (or the shipped default), since its inputs would mean something else.

A predictor trained with fine-tuning (``fine_tune=FineTuneSettings()``, ``bpq train ... --fine-tune``; see
:mod:`behavioral_pq.tasks.finetune`) also holds the tuned PQ-BERT weights (``encoder.safetensors``): it is loaded on
the encoder it started from (same identity checks) and embeds with its own weights (``Predictor.encoder``).

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Union

import numpy as np

from behavioral_pq.artifacts import (
    WEIGHTS_LIMIT,
    atomic_path,
    check_encoder,
    check_files,
    check_replaceable,
    check_shapes,
    confined,
    encoder_identity,
    file_checksums,
    read_bounded,
    read_sealed_config,
    safetensors_header,
    seal,
    versions,
)
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.module import load_module
from behavioral_pq.corpus.states import NUM_CLASSES
from behavioral_pq.embedding.encoder import POOLINGS, load_encoder, shipped
from behavioral_pq.errors import PredictorError
from behavioral_pq.tasks.datasets import concat, embeddings, module_items, state_items
from behavioral_pq.tasks import finetune
from behavioral_pq.tasks.estimators import BestPassClassifier, OzBenefitRegressor, TrainSettings
from behavioral_pq.tasks.finetune import FineTuneSettings

FORMAT = "behavioral_pq.predictor"
FORMAT_VERSION = 1
KINDS = ("best-pass", "oz-benefit")
ESTIMATOR_FILES = ("estimator.json", "estimator.safetensors")
TUNED_ENCODER_FILE = "encoder.safetensors"
DEFAULT_NAMES = {"best-pass": "pqbert-small-m14-s0-best-pass", "oz-benefit": "pqbert-small-m14-s0-oz"}


class PassScore(NamedTuple):
    """One ranked best-pass prediction: ``name`` is the catalog flag ("-sroa"), or "(none)" for the class "no
    pass reduces the instruction count" (``index`` 124); ``score`` its probability."""

    name: str
    index: int
    score: float


@dataclass
class Predictor:
    """A loaded predictor: ``estimator`` on the embeddings of ``encoder`` (for a fine-tuned predictor, the
    encoder it was trained from with the tuned weights: ``encoder.fine_tuned`` is True)."""

    kind: str
    estimator: object
    encoder: object
    config: dict
    path: Optional[Path] = None

    def predict_embeddings(self, X: np.ndarray) -> np.ndarray:
        """best-pass: float32 (N, 125) probabilities; oz-benefit: float32 (N,) fractions. ``X`` float32 (N, D)
        must come from ``self.encoder`` (for a fine-tuned predictor, not the encoder it started from)."""
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
                   metrics: dict, overwrite: bool = False, tuned_model=None,
                   fine_tune: Optional[FineTuneSettings] = None) -> Path:
    """Write a predictor folder (replacing ``path`` only once complete; a folder that holds something else than
    a predictor is refused unless ``overwrite``). ``encoder`` is the encoder trained on (or started from, with
    ``tuned_model`` the fine-tuned PQ-BERT and ``fine_tune`` its settings)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(path)
    check_replaceable(path, config="predictor.json", format=FORMAT, overwrite=overwrite, error=PredictorError,
                      what="a predictor")
    if (tuned_model is None) != (fine_tune is None):
        raise ValueError("a fine-tuned predictor needs both tuned_model and fine_tune")
    with atomic_path(path) as tmp:
        estimator.save(tmp)
        files = ESTIMATOR_FILES
        if tuned_model is not None:
            from safetensors.torch import save_file

            save_file({k: v.detach().contiguous() for k, v in tuned_model.state_dict().items()},
                      str(tmp / TUNED_ENCODER_FILE))
            os.chmod(tmp / TUNED_ENCODER_FILE, 0o644)
            files = ESTIMATOR_FILES + (TUNED_ENCODER_FILE,)
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "versions": versions(),
                  "encoder": encoder_identity(encoder),
                  "representation": f"pqbert-{encoder.pooling}" + ("-fine-tuned" if tuned_model is not None else ""),
                  "pooling": encoder.pooling, "fine_tune": asdict(fine_tune) if fine_tune is not None else None,
                  "training": training, "metrics": metrics, "files": file_checksums(tmp, files)}
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
    pooling = config.get("pooling", "mean")
    if pooling not in POOLINGS:
        raise PredictorError(f"{path}: unknown pooling {pooling!r} (known: {', '.join(POOLINGS)})")
    try:
        encoder = (encoder or load_encoder()).with_pooling(pooling)     # same weights, the predictor's pooling
    except ValueError as exc:          # a pooling this encoder cannot give (mean+changes of absolute reactions)
        raise PredictorError(f"{path}: {exc}") from None
    check_encoder(path, config.get("encoder", {}), encoder, PredictorError,
                  "pass the encoder it was trained on (--checkpoint) or retrain it (bpq train)", verb="trained")
    check_files(path, config, PredictorError)
    if config.get("fine_tune"):
        encoder = _tuned_encoder(path, encoder)
    cls = BestPassClassifier if config["kind"] == "best-pass" else OzBenefitRegressor
    try:
        estimator = cls.load(path)
    except ValueError as exc:
        raise PredictorError(str(exc)) from None
    if estimator.dim != encoder.dim:
        raise PredictorError(f"{path}: estimator reads {estimator.dim} features, the encoder gives {encoder.dim}")
    return Predictor(config["kind"], estimator, encoder, config, path)


def _tuned_encoder(path: Path, encoder):
    """``encoder`` with the tuned weights of the fine-tuned predictor at ``path`` (checksummed by check_files)."""
    import copy

    from safetensors import SafetensorError
    from safetensors.torch import load as load_weights

    file = confined(path, TUNED_ENCODER_FILE, PredictorError)
    data = read_bounded(file, limit=WEIGHTS_LIMIT, what="tuned weights", error=PredictorError)
    expected = {k: tuple(v.shape) for k, v in encoder.model.state_dict().items()}
    check_shapes(expected, safetensors_header(data, origin=file, error=PredictorError), origin=file,
                 error=PredictorError)
    model = copy.deepcopy(encoder.model)
    try:
        model.load_state_dict(load_weights(data))
    except (SafetensorError, RuntimeError, ValueError) as exc:
        raise PredictorError(f"{path / TUNED_ENCODER_FILE}: tuned weights do not fit the encoder ({exc})") from None
    return encoder.with_model(model)


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
    """Predicted ``(IC0 - IC_Oz) / IC0`` of ``module``: the fraction of instructions -Oz would remove. Raises
    ValueError for a module with no instructions (declarations only), where that fraction means nothing."""
    module = load_module(module)
    if module.instruction_count == 0:
        raise ValueError("the module has no instructions: -Oz has nothing to remove, so there is nothing to predict")
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
                    overwrite: bool = False, fine_tune: Optional[FineTuneSettings] = None,
                    progress: Optional[Callable[[str], None]] = None) -> dict:
    """Train a predictor of ``kind`` on the embeddings of a corpus store and save it to ``out``.

    Trains on the store's ``train`` split and stops early on ``valid`` (an unsplit store uses every labelled
    module, with 10% held out for early stopping). With ``fine_tune``, the head and a copy of the encoder's
    PQ-BERT are trained together (:func:`behavioral_pq.tasks.finetune.fine_tune`) and both are saved; otherwise the
    encoder stays frozen. ``progress`` gets a line per fine-tuning epoch. Returns the saved config's ``training``
    and ``metrics``.
    """

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    check_replaceable(out, config="predictor.json", format=FORMAT, overwrite=overwrite, error=PredictorError,
                      what="a predictor")
    encoder = encoder or load_encoder()
    train, valid = training_data(kind, store, states=states, probes=encoder.probe_set)
    settings = settings or TrainSettings(seed=seed)
    if kind == "best-pass":
        estimator = BestPassClassifier(settings, num_classes=NUM_CLASSES)
        targets = lambda items: items.next_pass_sets()  # noqa: E731
    else:
        estimator = OzBenefitRegressor(settings)
        targets = lambda items: items.oz_benefit()  # noqa: E731
    y_valid = targets(valid) if valid is not None else None
    tuned = None
    if fine_tune is None:
        estimator.fit(embeddings(train, encoder), targets(train),
                      embeddings(valid, encoder) if valid is not None else None, y_valid)
        scored_with = encoder
    else:
        codes = lambda items: encoder.model_inputs(items.spectra, items.autophase)  # noqa: E731
        extra = lambda items: encoder.readout(encoder.reaction_rows(items.spectra, items.autophase))  # noqa: E731
        estimator, tuned = finetune.fine_tune(estimator, encoder, codes(train), targets(train),
                                              codes(valid) if valid is not None else None, y_valid,
                                              settings=fine_tune, progress=progress, extra=extra(train),
                                              valid_extra=extra(valid) if valid is not None else None)
        scored_with = encoder.with_model(tuned)
    metrics: dict = {}
    if valid is not None:
        Xv = embeddings(valid, scored_with)
        if kind == "best-pass":
            metrics = {"valid_top1": estimator.score(Xv, y_valid, 1), "valid_top5": estimator.score(Xv, y_valid, 5)}
        else:
            metrics = {"valid_mae_points": estimator.score(Xv, y_valid)}
    training = {"store": str(Path(store).resolve()), "states": str(Path(states).resolve()) if states else None,
                "items": {"train": len(train), "valid": len(valid) if valid is not None else 0},
                "seed": settings.seed, "best_epoch": estimator.best_epoch_, "fine_tuned": tuned is not None}
    save_predictor(out, kind, estimator, encoder, training=training, metrics=metrics, overwrite=overwrite,
                   tuned_model=tuned, fine_tune=fine_tune)
    return {"training": training, "metrics": metrics}


__all__ = ["FineTuneSettings", "PassScore", "Predictor", "PredictorError", "load_predictor", "save_predictor", "predict_best_pass",
           "predict_oz_benefit", "train_predictor", "training_data"]
