"""Downstream estimators on any representation: best pass (set-valued labels) and -Oz benefit (DESIGN.md section 9).

scikit-learn style: ``fit(X, y, X_valid, y_valid)``, ``predict``, ``score``, ``save`` / ``load``. ``X`` is float
(N, D) of any representation (embeddings, Autophase, a flattened spectrum); inputs are standardized with the
training rows' statistics, which are saved with the weights.

- :class:`BestPassClassifier`: MLP (D -> 256 -> C). A label is a *set* of passes (ties are the rule); training
  maximizes the probability of the set, ``log sum_{j in set} p_j``, and a prediction is correct when it is in the
  set (:func:`top_k_accuracy`).
- :class:`OzBenefitRegressor`: MLP tapering 256 -> 128 -> 64 -> 1 on ``(IC0 - IC_Oz) / IC0``; MAE loss; scores
  in percentage points.
- :class:`PriorClassifier` / :class:`PriorRegressor`: the baselines that ignore ``X`` (most frequent best pass;
  training mean).
- :func:`knn_top1`: k-nearest-neighbour vote in a representation's space.
- :class:`LinearBestPassProbe` / :class:`LinearOzProbe`: the linear probe, one simple head for every
  representation (logistic regression / ridge on standardized inputs, the one regularization hyperparameter
  chosen by inner cross-validation over groups), so that a representation is not judged by its head's tuning.
- :func:`capture`: the share of the best single pass's reduction that a predicted next pass achieves.

Early stopping: every estimator keeps the weights of its best validation epoch (Top-1 for the classifier, MAE for
the regressor) and stops after ``patience`` epochs without improvement.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np

from behavioral_pq.artifacts import (
    WEIGHTS_LIMIT,
    check_shapes,
    confined,
    read_bounded,
    read_json_bounded,
    safetensors_header,
)

LabelSets = Sequence[Sequence[int]]

FORMAT = "behavioral_pq.estimator"
FORMAT_VERSION = 1


def top_k_accuracy(scores: np.ndarray, label_sets: LabelSets, k: int = 1) -> float:
    """Fraction of rows whose ``k`` highest-scoring classes include a member of the row's label set.

    Args:
        scores: float (N, C).
        label_sets: N collections of class indices (each non-empty).
    """
    scores = np.asarray(scores)
    if len(scores) != len(label_sets):
        raise ValueError(f"{len(scores)} score rows for {len(label_sets)} label sets")
    if len(scores) == 0:
        return float("nan")
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return float(np.mean([bool(set(row.tolist()) & set(labels)) for row, labels in zip(top, label_sets)]))


def capture(scores: np.ndarray, instruction_count: np.ndarray, pass_counts: np.ndarray) -> float:
    """Mean share of the best single pass's reduction that the top-scoring pass achieves.

    For each item whose best pass reduces the count (``min(pass_counts) < IC``):
    ``(IC - pass_counts[predicted]) / (IC - min(pass_counts))``; 1 when the prediction is a best pass, 0 when it
    changes nothing or is the "no pass" class (an index past the passes), negative when it grows the module.
    Items where no pass reduces the count are left out.

    Args:
        scores: float (N, C), C >= number of passes.
        instruction_count: int (N,), the count of each item.
        pass_counts: int (N, K), the count after each of the K passes.
    Returns:
        the mean over the items where it is defined (NaN when there are none).
    """
    scores = np.asarray(scores)
    ic = np.asarray(instruction_count, np.float64)
    after = np.asarray(pass_counts, np.float64)
    if not len(scores) == len(ic) == len(after):
        raise ValueError(f"{len(scores)} score rows, {len(ic)} counts, {len(after)} rows of pass counts")
    predicted = np.argmax(scores, axis=1)                        # first maximum, as top_k_accuracy's stable sort
    best = after.min(axis=1) if after.size else np.zeros(0)
    defined = best < ic
    if not defined.any():
        return float("nan")
    known = predicted < after.shape[1]
    achieved = np.where(known, after[np.arange(len(after)), np.minimum(predicted, after.shape[1] - 1)], ic)
    return float(np.mean(((ic - achieved) / np.maximum(ic - best, 1e-12))[defined]))


def set_membership(label_sets: LabelSets, num_classes: int) -> np.ndarray:
    """float32 (N, C): 1 where the class is in the row's set."""
    out = np.zeros((len(label_sets), num_classes), np.float32)
    for i, labels in enumerate(label_sets):
        if len(labels) == 0:
            raise ValueError(f"label set {i} is empty")
        out[i, list(labels)] = 1.0
    return out


def class_frequencies(label_sets: LabelSets, num_classes: int) -> np.ndarray:
    """float64 (C,): the fraction of rows whose set contains each class."""
    return set_membership(label_sets, num_classes).mean(axis=0).astype(np.float64)


def knn_top1(train_x: np.ndarray, train_sets: LabelSets, test_x: np.ndarray, test_sets: LabelSets, *,
             num_classes: int, k: int = 5) -> float:
    """Top-1 of a k-NN vote: each of the ``k`` nearest training rows (Euclidean, after standardizing with the
    training statistics) gives ``1/|set|`` to each class of its set; the top class must be in the test row's set.
    Ties go to the class more frequent in training."""
    train_x, test_x = _standardize_pair(np.asarray(train_x, np.float64), np.asarray(test_x, np.float64))
    votes = np.zeros((len(test_x), num_classes))
    membership = set_membership(train_sets, num_classes)
    weights = membership / membership.sum(axis=1, keepdims=True)
    train_norm = (train_x ** 2).sum(axis=1)
    for start in range(0, len(test_x), 1024):
        block = test_x[start:start + 1024]
        distance = train_norm[None, :] - 2.0 * block @ train_x.T
        nearest = np.argsort(distance, axis=1, kind="stable")[:, :k]
        votes[start:start + len(block)] = weights[nearest].sum(axis=1)
    votes += 1e-9 * class_frequencies(train_sets, num_classes)[None, :]
    return top_k_accuracy(votes, test_sets, 1)


def standard_scale(X: np.ndarray):
    """Per-feature (mean, scale) of rows X; constant features get scale 1."""
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale < 1e-6] = 1.0
    return mean, scale


def _standardize_pair(train: np.ndarray, test: np.ndarray):
    mean, scale = standard_scale(train)
    return (train - mean) / scale, (test - mean) / scale


def checked_features(X, dtype, mean: Optional[np.ndarray], what: str) -> np.ndarray:
    """``X`` as a 2-D (N, D) array of ``dtype``, refused (ValueError) when it is not 2-D, has another D than the
    ``mean`` of the data ``what`` was fitted on, or holds NaN or infinite values."""
    X = np.asarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (N, D), got shape {X.shape}")
    if mean is not None and X.shape[1] != len(mean):
        raise ValueError(f"X has {X.shape[1]} features; this {what} was fitted on {len(mean)}")
    if not np.isfinite(X).all():
        raise ValueError("X holds NaN or infinite values (a module that failed to embed?)")
    return X


@dataclass
class TrainSettings:
    """Optimization settings shared by the MLP estimators."""

    hidden: int = 256
    dropout: float = 0.1
    learning_rate: float = 1e-3
    weight_decay: float = 1e-5
    batch_size: int = 256
    max_epochs: int = 200
    patience: int = 15
    seed: int = 0


class _MLPEstimator:
    """Shared machinery: input standardization, the training loop with early stopping, save / load."""

    kind = ""

    def __init__(self, settings: Optional[TrainSettings] = None, **overrides):
        self.settings = settings or TrainSettings(**overrides)
        self.mean_: Optional[np.ndarray] = None
        self.scale_: Optional[np.ndarray] = None
        self.net_ = None
        self.history_: List[dict] = []
        self.best_epoch_: Optional[int] = None

    # -- to be provided by subclasses -------------------------------------------------------------------------

    def _layers(self, dim: int) -> List[int]:
        raise NotImplementedError

    def _targets(self, y):
        raise NotImplementedError

    def _loss(self, output, target):
        raise NotImplementedError

    def _validation_score(self, X: np.ndarray, y) -> float:
        """Higher is better."""
        raise NotImplementedError

    def _output_bias(self, y) -> Optional[np.ndarray]:
        """Initial bias of the last layer, so that training starts from the prior (None: PyTorch's default)."""
        return None

    # -- shared ----------------------------------------------------------------------------------------------

    @property
    def dim(self) -> int:
        self._check_fitted()
        return len(self.mean_)

    def _check_fitted(self) -> None:
        if self.net_ is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted (call fit, or load a saved one)")

    def _build(self, dim: int):
        import torch

        sizes = [dim] + self._layers(dim)
        layers: list = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers += [torch.nn.ReLU(), torch.nn.Dropout(self.settings.dropout)]
        return torch.nn.Sequential(*layers)

    def _check_x(self, X: np.ndarray) -> np.ndarray:
        return checked_features(X, np.float32, self.mean_, "estimator")

    def _forward(self, X: np.ndarray) -> np.ndarray:
        import torch

        self._check_fitted()
        X = self._check_x(X)
        self.net_.eval()
        with torch.inference_mode():
            return self.net_(torch.from_numpy((X - self.mean_) / self.scale_)).numpy()

    def fit(self, X: np.ndarray, y, X_valid: Optional[np.ndarray] = None, y_valid=None):
        """Train on (X, y); early stopping on (X_valid, y_valid), or on a seeded 10% of the training rows when
        none is given. Returns self."""
        import torch

        s = self.settings
        X = self._check_x(X)
        if len(X) != len(y):
            raise ValueError(f"{len(X)} rows of X for {len(y)} targets")
        rng = np.random.default_rng(s.seed)
        if X_valid is None:
            order = rng.permutation(len(X))
            cut = max(1, len(X) // 10)
            X_valid, y_valid = X[order[:cut]], [y[i] for i in order[:cut]]
            X, y = X[order[cut:]], [y[i] for i in order[cut:]]
        X_valid = self._check_x(X_valid)
        mean, scale = standard_scale(X)
        self.mean_, self.scale_ = mean, scale.astype(np.float32)
        torch.manual_seed(s.seed)
        self.net_ = self._build(X.shape[1])
        bias = self._output_bias(y)
        if bias is not None:
            with torch.no_grad():
                self.net_[-1].bias.copy_(torch.from_numpy(bias.astype(np.float32)))
        optimizer = torch.optim.Adam(self.net_.parameters(), lr=s.learning_rate, weight_decay=s.weight_decay)
        inputs = torch.from_numpy((X - self.mean_) / self.scale_)
        targets = self._targets(y)
        best, best_state, waited = -np.inf, None, 0
        self.history_ = []
        generator = torch.Generator().manual_seed(s.seed)
        for epoch in range(s.max_epochs):
            self.net_.train()
            total = 0.0
            for batch in torch.randperm(len(inputs), generator=generator).split(s.batch_size):
                loss = self._loss(self.net_(inputs[batch]), targets[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += float(loss.detach()) * len(batch)
            score = self._validation_score(X_valid, y_valid)
            self.history_.append({"epoch": epoch, "train_loss": total / len(inputs), "valid_score": score})
            if score > best + 1e-9:
                best, waited, self.best_epoch_ = score, 0, epoch
                best_state = {k: v.detach().clone() for k, v in self.net_.state_dict().items()}
            else:
                waited += 1
                if waited >= s.patience:
                    break
        self.net_.load_state_dict(best_state)
        self.net_.eval()
        return self

    def save(self, path: Union[str, os.PathLike]) -> Path:
        """Write ``estimator.json`` and ``estimator.safetensors`` into the folder ``path`` (created)."""
        from safetensors.numpy import save_file

        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {f"net.{k}": v.detach().cpu().numpy() for k, v in self.net_.state_dict().items()}
        tensors.update(mean=self.mean_.astype(np.float32), scale=self.scale_.astype(np.float32))
        save_file(tensors, str(path / "estimator.safetensors"))
        os.chmod(path / "estimator.safetensors", 0o644)
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": self.kind, "dim": self.dim,
                "settings": asdict(self.settings), "best_epoch": self.best_epoch_,
                **{k: getattr(self, k) for k in self._meta_keys()}}
        (path / "estimator.json").write_text(json.dumps(meta, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "_MLPEstimator":
        """Read a folder written by :meth:`save` (ValueError when it is not this kind of estimator)."""
        import torch
        from safetensors import SafetensorError
        from safetensors.numpy import load as load_tensors

        path = Path(path)
        weights = confined(path, "estimator.safetensors", ValueError)
        try:
            meta = read_json_bounded(confined(path, "estimator.json", ValueError), what="estimator config",
                                     error=ValueError)
            data = read_bounded(weights, limit=WEIGHTS_LIMIT, what="estimator weights", error=ValueError)
            header = safetensors_header(data, origin=weights, error=ValueError)
            tensors = load_tensors(data)
        except (OSError, ValueError, SafetensorError) as exc:
            raise ValueError(f"{path}: not a readable estimator ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("kind") != cls.kind:
            kind = meta.get("kind") if isinstance(meta, dict) else None
            raise ValueError(f"{path}: holds a {kind!r} estimator, not {cls.kind!r}")
        estimator = cls(TrainSettings(**meta["settings"]), **{k: meta[k] for k in cls._meta_keys()})
        estimator.mean_, estimator.scale_ = tensors.pop("mean"), tensors.pop("scale")
        estimator.best_epoch_ = meta.get("best_epoch")
        with torch.device("meta"):      # shapes only: a config edited to name a huge net allocates nothing
            expected = {f"net.{k}": tuple(v.shape) for k, v in estimator._build(meta["dim"]).state_dict().items()}
        check_shapes(dict(expected, mean=(meta["dim"],), scale=(meta["dim"],)), header, origin=weights,
                     error=ValueError)
        estimator.net_ = estimator._build(meta["dim"])
        try:
            estimator.net_.load_state_dict({k[4:]: torch.from_numpy(v) for k, v in tensors.items()})
        except RuntimeError as exc:
            raise ValueError(f"{path}: weights do not fit the saved settings ({exc})") from None
        estimator.net_.eval()
        return estimator

    @classmethod
    def _meta_keys(cls) -> Sequence[str]:
        """Constructor arguments saved with the weights (besides the settings)."""
        return ()


class BestPassClassifier(_MLPEstimator):
    """Best pass with set-valued labels: MLP D -> hidden -> ``num_classes``.

    Args:
        num_classes: 124 (catalog passes), or 125 with the "no pass helps" class of intermediate states.
    """

    kind = "best-pass"

    def __init__(self, settings: Optional[TrainSettings] = None, num_classes: int = 124, **overrides):
        super().__init__(settings, **overrides)
        self.num_classes = num_classes

    def _layers(self, dim: int) -> List[int]:
        return [self.settings.hidden, self.num_classes]

    def _targets(self, y):
        import torch

        return torch.from_numpy(set_membership(y, self.num_classes))

    def _loss(self, output, target):
        import torch

        log_p = torch.log_softmax(output, dim=1)
        return -(torch.logsumexp(log_p.masked_fill(target == 0, -torch.inf), dim=1)).mean()

    def _validation_score(self, X, y) -> float:
        scores = self._forward(X)
        return top_k_accuracy(scores, y, 1) + 1e-3 * top_k_accuracy(scores, y, 5)

    def _output_bias(self, y) -> np.ndarray:
        return np.log(class_frequencies(y, self.num_classes) + 1e-4)

    @classmethod
    def _meta_keys(cls):
        return ("num_classes",)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """float32 (N, num_classes), rows summing to 1."""
        logits = self._forward(X)
        logits = logits - logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)

    def predict(self, X: np.ndarray, k: int = 1) -> np.ndarray:
        """int64 (N, k): the k most probable classes, best first."""
        return np.argsort(-self.predict_proba(X), axis=1, kind="stable")[:, :k]

    def score(self, X: np.ndarray, y: LabelSets, k: int = 1) -> float:
        """Top-k accuracy against set-valued labels."""
        return top_k_accuracy(self.predict_proba(X), y, k)


class OzBenefitRegressor(_MLPEstimator):
    """-Oz benefit ``(IC0 - IC_Oz) / IC0`` from a representation: MLP D -> 256 -> 128 -> 64 -> 1, MAE loss."""

    kind = "oz-benefit"

    def _layers(self, dim: int) -> List[int]:
        h = self.settings.hidden
        return [h, max(h // 2, 1), max(h // 4, 1), 1]

    def _targets(self, y):
        import torch

        return torch.as_tensor(np.asarray(y, dtype=np.float32))

    def _loss(self, output, target):
        return (output[:, 0] - target).abs().mean()

    def _output_bias(self, y) -> np.ndarray:
        return np.array([np.median(np.asarray(y, np.float64))])

    def _validation_score(self, X, y) -> float:
        return -self.score(X, y)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """float32 (N,): predicted fractions (0.25 = -Oz removes a quarter of the instructions)."""
        return self._forward(X)[:, 0]

    def score(self, X: np.ndarray, y: Sequence[float]) -> float:
        """Mean absolute error in percentage points."""
        return float(np.mean(np.abs(self.predict(X) - np.asarray(y, np.float64))) * 100.0)


#: The linear probes' grids: inverse regularization C of the logistic regression, alpha of the ridge.
LOGISTIC_C_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
RIDGE_ALPHA_GRID = (1e-1, 1.0, 1e1, 1e2, 1e3, 1e4)


class _LinearProbe:
    """Shared machinery of the linear probes: standardization with the training rows' statistics, and the choice
    of the one hyperparameter by grouped inner cross-validation (no group on both sides of a fold)."""

    def __init__(self, grid: Sequence[float], folds: int = 3):
        if folds < 2:
            raise ValueError(f"folds must be >= 2, got {folds}")
        if not grid or min(grid) <= 0:
            raise ValueError(f"the grid must hold positive values, got {list(grid)}")
        self.grid, self.folds = tuple(grid), folds
        self.mean_: Optional[np.ndarray] = None
        self.scale_: Optional[np.ndarray] = None
        self.model_ = None
        self.chosen_: Optional[float] = None
        self.cv_scores_: Optional[List[float]] = None

    def _new(self, value: float):
        raise NotImplementedError

    def _fit_one(self, model, X: np.ndarray, y):
        raise NotImplementedError

    def _cv_score(self, model, X: np.ndarray, y) -> float:
        """Higher is better."""
        raise NotImplementedError

    def _check_x(self, X) -> np.ndarray:
        return checked_features(X, np.float64, self.mean_, "probe")

    def _standardized(self, X) -> np.ndarray:
        if self.model_ is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted (call fit)")
        return (self._check_x(X) - self.mean_) / self.scale_

    def fit(self, X: np.ndarray, y, groups: Optional[Sequence[str]] = None):
        """Choose the hyperparameter by ``folds``-fold cross-validation on (X, y), folds by ``groups`` (default:
        every row its own group), then refit on all of it with the chosen value. Returns self."""
        from sklearn.model_selection import GroupKFold

        X = self._check_x(X)
        if len(X) != len(y):
            raise ValueError(f"{len(X)} rows of X for {len(y)} targets")
        groups = np.asarray(groups if groups is not None else np.arange(len(X)))
        folds = min(self.folds, len(set(groups.tolist())))
        if folds < 2:
            raise ValueError("the inner cross-validation needs items of at least two groups")
        self.mean_, self.scale_ = standard_scale(X)
        Z = (X - self.mean_) / self.scale_
        splits = list(GroupKFold(n_splits=folds).split(Z, groups=groups))
        self.cv_scores_ = []
        for value in self.grid:
            scores = []
            for fit_rows, score_rows in splits:
                model = self._fit_one(self._new(value), Z[fit_rows], [y[i] for i in fit_rows])
                scores.append(self._cv_score(model, Z[score_rows], [y[i] for i in score_rows]))
            self.cv_scores_.append(float(np.mean(scores)))
        self.chosen_ = self.grid[int(np.argmax(self.cv_scores_))]   # a tie goes to the first: the grids list the
        self.model_ = self._fit_one(self._new(self.chosen_), Z, list(y))    # strongest penalty first
        return self


class LinearBestPassProbe(_LinearProbe):
    """Linear probe for set-valued best-pass labels: multinomial logistic regression on standardized inputs.

    Each item's set is spread over its members (one training row per member, weight ``1 / |set|``), so that a tie
    weighs as much as a single best pass. ``C`` (the inverse L2 penalty) is chosen from ``grid`` by inner
    cross-validation on Top-1 against the sets. Fitted: ``chosen_`` (C), ``cv_scores_``, ``model_``.
    """

    def __init__(self, num_classes: int = 124, grid: Sequence[float] = LOGISTIC_C_GRID, folds: int = 3,
                 max_iter: int = 300):
        super().__init__(grid, folds)
        self.num_classes, self.max_iter = num_classes, max_iter

    def _new(self, value: float):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=value, max_iter=self.max_iter, tol=1e-3)

    def _fit_one(self, model, X, y):
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        rows = np.concatenate([np.full(len(labels), i) for i, labels in enumerate(y)])
        classes = np.concatenate([np.asarray(labels, np.int64) for labels in y])
        weights = np.concatenate([np.full(len(labels), 1.0 / len(labels)) for labels in y])
        if len(set(classes.tolist())) == 1:               # one class only: a constant, as the prior would be
            return ("constant", int(classes[0]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)   # max_iter bounds the cost; a probe, not a tuned head
            return model.fit(X[rows], classes, sample_weight=weights)

    def _proba(self, model, Z) -> np.ndarray:
        out = np.zeros((len(Z), self.num_classes), np.float64)
        if isinstance(model, tuple):
            out[:, model[1]] = 1.0
            return out
        out[:, model.classes_] = model.predict_proba(Z)
        return out

    def _cv_score(self, model, X, y) -> float:
        return top_k_accuracy(self._proba(model, X), y, 1)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """float64 (N, num_classes); classes never seen in training get 0."""
        return self._proba(self.model_, self._standardized(X))

    def score(self, X: np.ndarray, y: LabelSets, k: int = 1) -> float:
        """Top-k accuracy against set-valued labels."""
        return top_k_accuracy(self.predict_proba(X), y, k)


class LinearOzProbe(_LinearProbe):
    """Linear probe for -Oz benefit: ridge regression on standardized inputs, ``alpha`` chosen from ``grid`` by
    inner cross-validation on the mean absolute error. Fitted: ``chosen_`` (alpha), ``cv_scores_``, ``model_``."""

    def __init__(self, grid: Sequence[float] = tuple(reversed(RIDGE_ALPHA_GRID)), folds: int = 3):
        super().__init__(grid, folds)        # strongest penalty first: ties go to it, as for C

    def _new(self, value: float):
        from sklearn.linear_model import Ridge

        return Ridge(alpha=value)

    def _fit_one(self, model, X, y):
        return model.fit(X, np.asarray(y, np.float64))

    def _cv_score(self, model, X, y) -> float:
        return -float(np.mean(np.abs(model.predict(X) - np.asarray(y, np.float64))))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """float32 (N,): predicted fractions."""
        Z = self._standardized(X)
        return self.model_.predict(Z).astype(np.float32)

    def score(self, X: np.ndarray, y: Sequence[float]) -> float:
        """Mean absolute error in percentage points."""
        return float(np.mean(np.abs(self.predict(X) - np.asarray(y, np.float64))) * 100.0)


class PriorClassifier:
    """Baseline: ranks classes by how often they are in a training label set, whatever the input."""

    def __init__(self, num_classes: int = 124):
        self.num_classes = num_classes
        self.frequencies_: Optional[np.ndarray] = None

    def fit(self, X, y: LabelSets, X_valid=None, y_valid=None) -> "PriorClassifier":
        self.frequencies_ = class_frequencies(y, self.num_classes)
        return self

    def predict_proba(self, X) -> np.ndarray:
        p = self.frequencies_ / self.frequencies_.sum()
        return np.tile(p.astype(np.float32), (len(X), 1))

    def score(self, X, y: LabelSets, k: int = 1) -> float:
        return top_k_accuracy(self.predict_proba(X), y, k)


class PriorRegressor:
    """Baseline: predicts the training mean, whatever the input."""

    def __init__(self):
        self.mean_: Optional[float] = None

    def fit(self, X, y, X_valid=None, y_valid=None) -> "PriorRegressor":
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X) -> np.ndarray:
        return np.full(len(X), self.mean_, np.float32)

    def score(self, X, y) -> float:
        return float(np.mean(np.abs(self.predict(X) - np.asarray(y, np.float64))) * 100.0)


__all__ = ["BestPassClassifier", "OzBenefitRegressor", "PriorClassifier", "PriorRegressor", "TrainSettings",
           "LinearBestPassProbe", "LinearOzProbe", "capture", "top_k_accuracy", "knn_top1", "set_membership",
           "class_frequencies"]
