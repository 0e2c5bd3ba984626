"""Fine-tuning: a predictor's MLP head and PQ-BERT trained together, end to end, on the items' codes.

The frozen path fits an estimator (:mod:`behavioral_pq.tasks.estimators`) on fixed embeddings. Fine-tuning starts
from the same estimator and from the encoder's weights, and trains both on codes uint8 (N, P, M) (the quantizer stays
fixed: codes are the input), the encoder at a lower learning rate than the head. The head keeps the standardization
of the starting embeddings; early stopping on the valid items restores the best epoch of both. The result is an
ordinary fitted estimator plus the tuned weights, which :func:`behavioral_pq.tasks.predictors.save_predictor` stores
next to it (``bpq train ... --fine-tune``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from behavioral_pq.tasks.estimators import standard_scale


@dataclass(frozen=True)
class FineTuneSettings:
    """What fine-tuning adds to the head's :class:`~behavioral_pq.tasks.estimators.TrainSettings` (whose learning
    rate, dropout, weight decay and seed it keeps): the encoder's learning rate, and epochs, patience and batch size,
    which replace the head's (a pass over the encoder costs far more than one over a head, and needs fewer)."""

    encoder_learning_rate: float = 1e-4
    max_epochs: int = 30
    patience: int = 5
    batch_size: int = 64


def _tensor(model, inputs: np.ndarray):
    """What the model reads as a tensor: codes as int64, reaction rows (input_kind "spectrum") as float32."""
    import torch

    return torch.from_numpy(inputs.astype(np.float32 if model.config.input_kind == "spectrum" else np.int64))


def _embed(model, codes: np.ndarray, pooling: str, extra: np.ndarray, batch_size: int = 256):
    """float32 (N, D) tensor of the model's embeddings of codes uint8 (N, P, M) (or rows, see fine_tune), followed
    by ``extra`` float32 (N, E), in eval mode."""
    import torch

    model.eval()
    with torch.inference_mode():
        pooled = torch.cat([model.embed(_tensor(model, codes[i:i + batch_size]), pooling)
                            for i in range(0, len(codes), batch_size)]) if len(codes) else torch.zeros(0)
    return torch.cat([pooled, torch.from_numpy(extra)], dim=1) if len(codes) else pooled


def fine_tune(estimator, encoder, codes: np.ndarray, y, valid_codes: Optional[np.ndarray] = None, y_valid=None,
              settings: FineTuneSettings = FineTuneSettings(), progress: Optional[Callable[[str], None]] = None,
              extra: Optional[np.ndarray] = None, valid_extra: Optional[np.ndarray] = None):
    """Fit ``estimator`` (a new BestPassClassifier or OzBenefitRegressor) together with a copy of ``encoder``'s PQ-BERT.

    Args:
        codes: uint8 (N, P, M), the training items' codes; or the reaction rows float32 (N, P, 56) for a model
            of input_kind "spectrum": what ``encoder.model_inputs`` gives. ``y``: their targets, as the
            estimator's ``fit`` takes them (label sets, or fractions).
        valid_codes, y_valid: early-stopping items; None holds out a seeded 10% of the training items.
        progress: called with one line per epoch.
        extra, valid_extra: what the encoder's pooling appends to the pooled states (``encoder.readout`` of the
            items' reaction rows, float32 (N, E)); needed when it appends something (a count pooling), not tuned.
    Returns:
        (estimator, model): the fitted estimator, whose ``best_epoch_`` and ``history_`` are set, and the tuned
        PQ-BERT (eval mode); the encoder given is left unchanged.
    """
    import torch

    head_settings = estimator.settings
    codes = np.asarray(codes)
    if codes.ndim != 3:
        raise ValueError(f"codes must have shape (N, P, M) (or rows (N, P, 56)), got {codes.shape}")
    if len(codes) != len(y):
        raise ValueError(f"{len(codes)} items of codes for {len(y)} targets")
    width = encoder.dim - encoder.model.config.hidden_size          # what the pooling appends
    extra = _extra(extra, len(codes), width, "extra")
    rng = np.random.default_rng(head_settings.seed)
    if valid_codes is None:
        order = rng.permutation(len(codes))
        cut = max(1, len(codes) // 10)
        valid_codes, y_valid, valid_extra = codes[order[:cut]], [y[i] for i in order[:cut]], extra[order[:cut]]
        codes, y, extra = codes[order[cut:]], [y[i] for i in order[cut:]], extra[order[cut:]]
    else:
        valid_extra = _extra(valid_extra, len(valid_codes), width, "valid_extra")
    pooling = encoder.model_pooling
    model = copy.deepcopy(encoder.model).float()
    start = _embed(model, codes, pooling, extra).numpy()
    mean, scale = standard_scale(start)
    estimator.mean_, estimator.scale_ = mean, scale.astype(np.float32)
    torch.manual_seed(head_settings.seed)
    estimator.net_ = estimator._build(start.shape[1])
    bias = estimator._output_bias(y)
    if bias is not None:
        with torch.no_grad():
            estimator.net_[-1].bias.copy_(torch.from_numpy(bias.astype(np.float32)))
    mean_t, scale_t = torch.from_numpy(estimator.mean_), torch.from_numpy(estimator.scale_)
    optimizer = torch.optim.Adam([
        {"params": estimator.net_.parameters(), "lr": head_settings.learning_rate},
        {"params": model.parameters(), "lr": settings.encoder_learning_rate}], weight_decay=head_settings.weight_decay)
    targets = estimator._targets(y)
    generator = torch.Generator().manual_seed(head_settings.seed)
    best, best_state, waited = -np.inf, None, 0
    estimator.history_ = []
    for epoch in range(settings.max_epochs):
        model.train()
        estimator.net_.train()
        total = 0.0
        for batch in torch.randperm(len(codes), generator=generator).split(settings.batch_size):
            x = _tensor(model, codes[batch.numpy()])                                        # (b, P, M)
            pooled = torch.cat([model.embed(x, pooling), torch.from_numpy(extra[batch.numpy()])], dim=1)
            output = estimator.net_((pooled - mean_t) / scale_t)
            loss = estimator._loss(output, targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        score = estimator._validation_score(_embed(model, valid_codes, pooling, valid_extra).numpy(), y_valid)
        estimator.history_.append({"epoch": epoch, "train_loss": total / len(codes), "valid_score": score})
        if progress:
            progress(f"epoch {epoch}: train loss {total / len(codes):.4f}, valid score {score:.4f}")
        if score > best + 1e-9:
            best, waited, estimator.best_epoch_ = score, 0, epoch
            best_state = (copy.deepcopy(model.state_dict()), copy.deepcopy(estimator.net_.state_dict()))
        else:
            waited += 1
            if waited >= settings.patience:
                break
    model.load_state_dict(best_state[0])
    estimator.net_.load_state_dict(best_state[1])
    model.eval()
    estimator.net_.eval()
    return estimator, model


def _extra(extra: Optional[np.ndarray], n: int, width: int, name: str) -> np.ndarray:
    """``extra`` checked against ``n`` items and the ``width`` the encoder's pooling appends: float32 (n, width)."""
    if extra is None:
        if width:
            raise ValueError(f"this encoder's pooling appends {width} values to the pooled states: pass {name} "
                             "(encoder.readout of the items' reaction rows)")
        return np.zeros((n, 0), np.float32)
    extra = np.asarray(extra, dtype=np.float32)
    if extra.shape != (n, width):
        raise ValueError(f"{name} must have shape ({n}, {width}), got {extra.shape}")
    return extra


__all__ = ["FineTuneSettings", "fine_tune"]
