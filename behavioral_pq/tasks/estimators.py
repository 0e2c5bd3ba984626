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
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (N, D), got shape {X.shape}")
        if self.mean_ is not None and X.shape[1] != len(self.mean_):
            raise ValueError(f"X has {X.shape[1]} features; this estimator was fitted on {len(self.mean_)}")
        if not np.isfinite(X).all():
            raise ValueError("X holds NaN or infinite values (a module that failed to embed?)")
        return X

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
           "top_k_accuracy", "knn_top1", "set_membership", "class_frequencies"]
