"""The behavior model itself, in torch alone: a module tower and a pipeline tower meeting in a small head that
predicts a module's gain under a pipeline (see :mod:`behavioral_pq.tasks.guidance.behavior` for the data, the
comparisons and the searches that use it).

This module imports torch, numpy, the pass catalog and PQ-BERT, nothing that needs LLVM, so a model can be trained
on a machine that has a GPU but no compiler: the inputs (tower rows, measured gains, pipeline tokens) are arrays.

The PQ-BERT tower is trained under one of :data:`PQBERT_OBJECTIVES`, which say what its weights learned from:
masked codes only (frozen), masked codes then behavior (today's default), behavior only (from a fresh
initialization), or masked codes and behavior together.

Shapes: N modules, K pipelines, P probes, M sub-spaces, L tokens per pipeline (at most :data:`MAX_STEPS`), d the
towers' width.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from behavioral_pq.core.catalog import BASELINES, PASSES
from behavioral_pq.embedding.model import mask_codes, masked_lm_loss

#: Module towers, in the order reports list them. ``pqbert+counts`` reads what the shipped embedding is made of
#: (PQ-BERT's pooled mean and the count tail); ``none`` reads nothing of the module: a global ranking.
TOWERS = ("pqbert", "pqbert+counts", "spectrum", "counts", "autophase", "none")
#: PQ-BERT towers by what their weights learn from (the tower reads the codes, as ``pqbert`` does):
#: ``pqbert`` masked codes (the shipped encoder's pretraining), then behavior; ``pqbert-frozen`` masked codes
#: only (the shipped weights stay as they are; only the projection and the head learn); ``pqbert-scratch``
#: behavior only (the same architecture, freshly initialized); ``pqbert-joint`` masked codes and behavior
#: together (the shipped weights, fine-tuned on the behavior loss plus the masked-code loss on the same modules).
PQBERT_OBJECTIVES = ("pqbert", "pqbert-frozen", "pqbert-scratch", "pqbert-joint")
#: Share of code positions masked for the masked-code loss of ``pqbert-joint`` (as in pretraining).
JOINT_MASK = 0.15
VOCABULARY: Tuple[str, ...] = ("<pad>",) + tuple(f"-{name}" for name in BASELINES) + tuple(p.flag for p in PASSES)
TOKEN = {flag: i for i, flag in enumerate(VOCABULARY)}
#: A pipeline's steps past this many are not read (the pools' longest pipeline has 173).
MAX_STEPS = 256
#: Upper bounds of the pipeline-length groups the pipeline tower encodes separately (the last is MAX_STEPS).
LENGTH_GROUPS = (4, 16, 48, MAX_STEPS)
#: Gains are scaled by this inside the model, so its outputs are of order one.
GAIN_SCALE = 10.0


def pipeline_tokens(pool: Sequence[Sequence[str]]) -> np.ndarray:
    """int64 (K, L) token ids of ``pool``'s pipelines, 0-padded to the longest (at most :data:`MAX_STEPS`).

    Raises:
        ValueError: a step that is neither a whole-pipeline step nor a catalog pass.
    """
    longest = min(MAX_STEPS, max((len(s) for s in pool), default=1)) or 1
    out = np.zeros((len(pool), longest), np.int64)
    for i, steps in enumerate(pool):
        for j, step in enumerate(list(steps)[:longest]):
            if step not in TOKEN:
                raise ValueError(f"pipeline {i}: unknown step {step!r} (not a catalog pass or a whole-pipeline step)")
            out[i, j] = TOKEN[step]
    return out




def held_out_columns(pool: int, seed: int, share: float = 0.2) -> Tuple[np.ndarray, np.ndarray]:
    """(train columns, held-out columns), int64 sorted, of a pool of ``pool`` pipelines: a random ``share`` of
    them (at least one), drawn by ``seed``, is never trained on."""
    cols = np.random.default_rng(seed).permutation(pool)
    n_held = max(1, int(round(share * pool)))
    return np.sort(cols[n_held:]), np.sort(cols[:n_held])


def build_model(tower: str, input_dim: int, *, width: int = 64, encoder=None, seed: int = 0):
    """A :class:`BehaviorModel`-shaped ``torch.nn.Module`` for ``tower`` (one of :data:`TOWERS` or
    :data:`PQBERT_OBJECTIVES`) reading rows of ``input_dim`` values. The PQ-BERT towers hold a copy of
    ``encoder.model``: fine-tuned with the rest (``pqbert``, ``pqbert+counts``, ``pqbert-joint``), kept as it is
    (``pqbert-frozen``) or freshly initialized (``pqbert-scratch``)."""
    torch.manual_seed(seed)

    class MLPTower(nn.Module):
        def __init__(self, dim: int):
            super().__init__()
            self.register_buffer("mean", torch.zeros(dim))
            self.register_buffer("scale", torch.ones(dim))
            self.net = nn.Sequential(nn.Linear(dim, 256), nn.GELU(), nn.Dropout(0.1), nn.Linear(256, width))

        def forward(self, x):                                                        # (B, D) -> (B, d)
            return self.net((x - self.mean) / self.scale)

    class ConstantTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.vector = nn.Parameter(torch.zeros(width))

        def forward(self, x):                                                        # (B, 0) -> (B, d)
            return self.vector.expand(x.shape[0], -1)

    class PQBertTower(nn.Module):
        """PQ-BERT's pooled mean, projected; with ``tail`` > 0 the rows are codes (P M values) then a count tail
        of ``tail`` values, standardized and projected beside it."""

        def __init__(self, model, tail: int = 0):
            super().__init__()
            self.model = model
            self.tail = tail
            self.out = nn.Linear(model.config.hidden_size, width)
            if tail:
                self.register_buffer("mean", torch.zeros(tail))
                self.register_buffer("scale", torch.ones(tail))
                self.tail_out = nn.Linear(tail, width)

        def embed(self, x):                                                          # (B, H)
            if not self.tail:
                return self.model.embed(x.long(), "mean")
            c = self.model.config
            codes = x[:, :-self.tail].long().view(x.shape[0], -1, c.num_subspaces)
            return self.model.embed(codes, "mean")

        def forward(self, x):                                                        # -> (B, d)
            m = self.out(self.embed(x))
            if self.tail:
                m = m + self.tail_out((x[:, -self.tail:] - self.mean) / self.scale)
            return m

    class PipelineTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(len(VOCABULARY), width, padding_idx=0)
            self.positions = nn.Embedding(MAX_STEPS, width)
            layer = nn.TransformerEncoderLayer(width, 4, 2 * width, 0.1, activation="gelu", batch_first=True,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)

        def encode(self, tokens):                                                    # (K, L) -> (K, d)
            pad = tokens == 0
            x = self.tokens(tokens) + self.positions.weight[:tokens.shape[1]]
            x = self.norm(self.encoder(x, src_key_padding_mask=pad))
            keep = (~pad).unsqueeze(-1).float()
            return (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)

        def forward(self, tokens):                                                   # (K, L) -> (K, d)
            """Pipelines grouped by length (:data:`LENGTH_GROUPS`), each group cut to its longest: a pool's few
            long pipelines would otherwise make every short one cost as much as they do."""
            lengths = (tokens != 0).sum(1)
            out = None
            low = 0
            for high in LENGTH_GROUPS:
                rows = torch.nonzero((lengths > low) & (lengths <= high) if low else lengths <= high).squeeze(1)
                low = high
                if rows.numel() == 0:
                    continue
                part = tokens[rows][:, :max(1, int(lengths[rows].max()))]
                encoded = self.encode(part)
                if out is None:
                    out = encoded.new_zeros(tokens.shape[0], encoded.shape[1])
                out = out.index_copy(0, rows, encoded)
            return out

    class BehaviorModel(nn.Module):
        def __init__(self):
            super().__init__()
            if tower == "pqbert+counts" or tower in PQBERT_OBJECTIVES:
                if encoder is None:
                    raise ValueError(f"the {tower} tower starts from an encoder's PQ-BERT: give encoder=")
                tail = input_dim - encoder.model.config.num_probes * encoder.model.config.num_subspaces \
                    if tower == "pqbert+counts" else 0
                model = copy.deepcopy(encoder.model).train()
                if tower == "pqbert-scratch":
                    model.apply(model._init_weights)                   # same architecture and buffers, new weights
                if tower == "pqbert-frozen":
                    model.eval().requires_grad_(False)
                self.module_tower = PQBertTower(model, tail)
            elif tower == "none":
                self.module_tower = ConstantTower()
            else:
                self.module_tower = MLPTower(input_dim)
            self.pipeline_tower = PipelineTower()
            self.head = nn.Sequential(nn.Linear(3 * width, width), nn.GELU(), nn.Linear(width, 1))

        def forward(self, modules, tokens):
            """Predicted scaled gains float (B, K) of B modules' rows under K pipelines' tokens."""
            m = self.module_tower(modules)                                            # (B, d)
            p = self.pipeline_tower(tokens)                                           # (K, d)
            b, k = m.shape[0], p.shape[0]
            mm, pp = m[:, None, :].expand(b, k, -1), p[None, :, :].expand(b, k, -1)
            return self.head(torch.cat([mm, pp, mm * pp], dim=-1)).squeeze(-1)       # (B, K)

    return BehaviorModel()


@dataclass
class FitResult:
    """A fitted behavior model and how it got there: ``history`` holds one dict per epoch (train loss, valid
    per-module rank correlation)."""

    tower: str
    model: object
    history: List[dict] = field(default_factory=list)
    best_epoch: int = 0
    seconds: float = 0.0


def _tensor(rows: np.ndarray, device=None):
    x = torch.from_numpy(np.ascontiguousarray(rows)).long() if rows.dtype == np.uint8 else \
        torch.from_numpy(np.ascontiguousarray(rows, np.float32))
    return x if device is None else x.to(device)


def _device_of(model):
    """Where ``model``'s weights are (the CPU for a model without any)."""
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def predict(model, rows: np.ndarray, tokens: np.ndarray, *, batch: int = 64) -> np.ndarray:
    """Predicted gains float32 (N, K) of N modules' tower rows under K pipelines' tokens int64 (K, L), computed
    on the device the model is on."""
    model.eval()
    device = _device_of(model)
    out = np.zeros((len(rows), len(tokens)), np.float32)
    with torch.inference_mode():
        t = torch.from_numpy(tokens).to(device)
        for start in range(0, len(rows), batch):
            x = _tensor(rows[start:start + batch], device)
            out[start:start + len(x)] = model(x, t).float().cpu().numpy() / GAIN_SCALE
    return out


def rank_correlations(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Spearman correlation per row float64 (N,) of predicted and measured gains (N, K); NaN for a row whose
    measured gains are all equal (nothing to rank)."""
    from scipy.stats import spearmanr

    out = np.full(len(measured), np.nan)
    for i, (p, m) in enumerate(zip(predicted, measured)):
        if np.ptp(m) > 1e-9 and np.ptp(p) > 0:
            out[i] = spearmanr(p, m).statistic
        elif np.ptp(m) > 1e-9:
            out[i] = 0.0
    return out


def fit_behavior(tower: str, rows: np.ndarray, gains: np.ndarray, tokens: np.ndarray, *,
                 train_rows: Sequence[int], train_cols: Sequence[int], valid_rows: Sequence[int],
                 valid_cols: Sequence[int], encoder=None, epochs: int = 30, steps_per_epoch: int = 60,
                 module_batch: int = 32, pipeline_batch: int = 64, lr: float = 1e-3, seed: int = 0,
                 device=None, progress: bool = False) -> FitResult:
    """Train a behavior model on the cells ``train_rows`` x ``train_cols`` of ``gains`` float (N, K) and keep the
    epoch whose mean per-module rank correlation on ``valid_rows`` x ``valid_cols`` is best.

    Args:
        rows: the tower's input rows for all N modules
            (:meth:`~behavioral_pq.tasks.guidance.behavior.ModuleInputs.rows`).
        tokens: int64 (K, L), :func:`pipeline_tokens` of the pool.
        encoder: the encoder whose PQ-BERT the PQ-BERT towers start from (only ``encoder.model`` is read).
        device: where to train (``"cuda"``, a ``torch.device``; default the CPU). The returned model is on the
            CPU either way.

    Each step draws ``module_batch`` train modules and ``pipeline_batch`` train pipelines and fits the whole
    block: squared error of the scaled gains, plus squared error after centering each module's row (what decides
    the ranking within a module). ``pqbert-joint`` adds PQ-BERT's masked-code loss on the step's modules
    (:data:`JOINT_MASK` of their code positions masked). PQ-BERT's own weights learn at ``lr / 10`` when they
    start from the encoder and at ``lr / 3`` from a fresh initialization.
    """
    from tqdm import tqdm

    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    train_rows, train_cols = np.asarray(train_rows), np.asarray(train_cols)
    valid_rows, valid_cols = np.asarray(valid_rows), np.asarray(valid_cols)
    input_dim = rows.shape[1] if rows.ndim == 2 else 0
    model = build_model(tower, input_dim, encoder=encoder, seed=seed)
    standardized = getattr(model.module_tower, "tail", None)
    if standardized:
        x = rows[train_rows][:, -standardized:].astype(np.float64)
    elif rows.ndim == 2 and input_dim and hasattr(model.module_tower, "mean"):
        x = rows[train_rows].astype(np.float64)
    else:
        x = None
    if x is not None:
        model.module_tower.mean.copy_(torch.from_numpy(x.mean(0).astype(np.float32)))
        scale = x.std(0)
        model.module_tower.scale.copy_(torch.from_numpy(np.where(scale > 1e-6, scale, 1.0).astype(np.float32)))
    device = torch.device(device or "cpu")
    model.to(device)
    frozen = tower == "pqbert-frozen"
    encoder_params = list(model.module_tower.model.parameters()) if tower.startswith("pqbert") else []
    ids = {id(p) for p in encoder_params}
    groups = [{"params": [p for p in model.parameters() if id(p) not in ids], "lr": lr}]
    if encoder_params and not frozen:
        groups.append({"params": encoder_params, "lr": lr / 3 if tower == "pqbert-scratch" else lr / 10})
    optimizer = torch.optim.AdamW(groups, weight_decay=1e-4)
    y = torch.from_numpy(np.asarray(gains, np.float32) * GAIN_SCALE).to(device)
    all_tokens = torch.from_numpy(tokens).to(device)
    masking = torch.Generator().manual_seed(seed) if tower == "pqbert-joint" else None
    history, best, best_state, best_epoch = [], -np.inf, None, 0
    bar = tqdm(range(epochs), disable=not progress, desc=f"behavior[{tower}]", unit="epoch")
    for epoch in bar:
        model.train()
        if frozen:
            model.module_tower.model.eval()                                      # no dropout in fixed weights
        losses = []
        for _ in range(steps_per_epoch):
            r = rng.choice(train_rows, min(module_batch, len(train_rows)), replace=False)
            c = rng.choice(train_cols, min(pipeline_batch, len(train_cols)), replace=False)
            x = _tensor(rows[r], device)
            pred = model(x, all_tokens[c])
            target = y[torch.from_numpy(r).to(device)][:, torch.from_numpy(c).to(device)]
            centered = (pred - pred.mean(1, keepdim=True)) - (target - target.mean(1, keepdim=True))
            loss = nn.functional.mse_loss(pred, target) + centered.pow(2).mean()
            if masking is not None:
                inputs, labels = mask_codes(x, JOINT_MASK, masking)
                loss = loss + masked_lm_loss(model.module_tower.model, inputs, labels)[0]
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
        valid = predict(model, rows[valid_rows], tokens[valid_cols])
        rho = float(np.nanmean(rank_correlations(valid, gains[np.ix_(valid_rows, valid_cols)])))
        history.append({"epoch": epoch, "loss": float(np.mean(losses)), "valid_rho": rho})
        bar.set_postfix(loss=f"{np.mean(losses):.3f}", rho=f"{rho:.3f}")
        if rho > best:
            best, best_epoch = rho, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    model.to("cpu").eval()
    return FitResult(tower, model, history, best_epoch, time.perf_counter() - started)


def module_vectors(model, rows: np.ndarray, *, batch: int = 64) -> np.ndarray:
    """What a fitted model's module tower makes of N modules: float32 (N, H) PQ-BERT's pooled mean for the
    PQ-BERT towers (the embedding's mean part it would give), else the tower's output (N, d)."""
    model.eval()
    device = _device_of(model)
    out = []
    with torch.inference_mode():
        for start in range(0, len(rows), batch):
            x = _tensor(rows[start:start + batch], device)
            tower = model.module_tower
            out.append((tower.embed(x) if hasattr(tower, "model") else tower(x)).float().cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


