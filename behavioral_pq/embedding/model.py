"""PQ-BERT: a Transformer encoder over the product-quantized codes of a spectrum.

Input (``input_kind="codes"``, the default): codes, int64 (B, P, M) with values 0..255 (M = 8 sub-spaces, P
probes), or MASK_ID (256) where masked. Each of the P probe positions is embedded as the concatenation of M
sub-embeddings (one table per sub-space), a [CLS] vector is prepended, learned position embeddings are added, and a
pre-norm Transformer encoder mixes the positions. M linear heads predict each sub-space's code at every probe
position (the masked-LM objective).

Input ``input_kind="spectrum"`` (continuous inputs, discrete targets: the HuBERT / wav2vec 2.0 pattern): each
position reads its 56 reaction values, float (B, P, 56), standardized with the pretraining rows' per-position
statistics (buffers, :meth:`PQBert.set_input_statistics`) and mapped to ``hidden_size`` by one learned projection.
Masking is by whole rows (a bool (B, P) ``masked`` argument): a masked row's values are dropped and a learned
[MASK] vector stands in its place, and the targets are the PQ codes of that row, every sub-space, one head each.
Whole rows, not sub-space slices, because the sub-spaces of one row are correlated features (a count and the
counts it sums): a row with a slice left visible would be predicted from itself, and the context that masked-LM
is meant to teach is how a module reacts to the *other* probes. The quantizer stays the target vocabulary.

The embedding of a module is the mean of the final hidden states over the P probe positions (``pooling="mean"``,
the default); ``pooling="cls"`` takes the [CLS] state instead. See docs/architecture.md, "The encoder", for the comparison.

A model with ``pooled_decoder`` also learns, during pretraining, to rebuild every code from the mean-pooled
embedding alone (``masked_lm_loss(..., pooled_weight=...)``), which makes the pooled vector keep each probe's
reaction; the decoder is not used to embed.

A model with ``value_inputs`` also reads each code's value: the quantizer's centroids of the input codes
(float (B, P, M x d), zero where masked) go through one linear map that is added to the sub-embeddings, so
neighbouring codes start close instead of each table row being learned on its own. The centroids are a buffer of
the model (:meth:`PQBert.set_centroids`), saved with its weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn

MASK_ID = 256          # the extra id of every sub-embedding table
INPUT_KINDS = ("codes", "spectrum")
SPECTRUM_DIM = 56      # values per reaction row: core.engine.NUM_AUTOPHASE (not imported: it loads the engine)
IGNORE_INDEX = -100    # label of positions that are not masked (ignored by the loss)


@dataclass(frozen=True)
class PQBertConfig:
    """Hyperparameters of PQ-BERT (Hugging Face field names). ``hidden_size = num_subspaces * sub_embedding_size``."""

    num_probes: int = 100                 # P, sequence length without [CLS]
    num_subspaces: int = 8                # M, codes per probe
    codebook_size: int = 256              # codes per sub-space
    sub_embedding_size: int = 32          # dims per sub-embedding table
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    intermediate_size: int = 1024
    hidden_dropout_prob: float = 0.1
    layer_norm_eps: float = 1e-5
    initializer_range: float = 0.02
    context_free: bool = False            # ablation: each position attends only to itself (no cross-probe context)
    pooled_decoder: bool = False          # a decoder that rebuilds every code from the mean-pooled embedding alone
    value_inputs: bool = False            # each position also reads its codes' centroid values (a linear map)
    input_kind: str = "codes"             # "spectrum": each position reads its 56 reaction values (INPUT_KINDS)

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"PQBertConfig.{f.name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {INPUT_KINDS}, got {self.input_kind!r}")
        if self.input_kind == "spectrum" and (self.value_inputs or self.pooled_decoder):
            raise ValueError("a model with input_kind 'spectrum' reads no codes: value_inputs and pooled_decoder "
                             "(which rebuilds the input codes) apply to input_kind 'codes' only")
        if self.value_inputs and SPECTRUM_DIM % self.num_subspaces:
            raise ValueError(f"value_inputs needs num_subspaces dividing {SPECTRUM_DIM}, got {self.num_subspaces}")
        if not 0.0 <= self.hidden_dropout_prob < 1.0:
            raise ValueError(f"hidden_dropout_prob must be in [0, 1), got {self.hidden_dropout_prob}")

    @property
    def hidden_size(self) -> int:
        return self.num_subspaces * self.sub_embedding_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PQBertConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown PQBertConfig keys: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def preset(cls, name: str, **overrides) -> "PQBertConfig":
        """``base`` (the design's start: 4 layers, d_model 256, FFN 1024), ``small`` (the shipped encoder, sized
        for CPU pretraining: 2 layers, d_model 256, FFN 512) or ``tiny`` (tests: 2 layers, d_model 64)."""
        presets = {
            "base": cls(),
            "small": cls(num_hidden_layers=2, intermediate_size=512),
            "tiny": cls(sub_embedding_size=8, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        hidden_dropout_prob=0.0),
        }
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(presets)}")
        return replace(presets[name], **overrides)


class PQBert(nn.Module):
    def __init__(self, config: PQBertConfig):
        super().__init__()
        self.config = config
        c = config
        if c.input_kind == "codes":
            self.sub_embeddings = nn.ModuleList(nn.Embedding(c.codebook_size + 1, c.sub_embedding_size)
                                                for _ in range(c.num_subspaces))
        else:                       # rows standardized with the pretraining rows' statistics, then projected
            self.register_buffer("input_mean", torch.zeros(c.num_probes, SPECTRUM_DIM))
            self.register_buffer("input_scale", torch.ones(c.num_probes, SPECTRUM_DIM))
            self.input_projection = nn.Linear(SPECTRUM_DIM, c.hidden_size)
            self.mask_embedding = nn.Parameter(torch.zeros(c.hidden_size))
        self.cls_embedding = nn.Parameter(torch.zeros(c.hidden_size))
        self.position_embeddings = nn.Embedding(c.num_probes + 1, c.hidden_size)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        layer = nn.TransformerEncoderLayer(c.hidden_size, c.num_attention_heads, c.intermediate_size,
                                           c.hidden_dropout_prob, activation="gelu", layer_norm_eps=c.layer_norm_eps,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, c.num_hidden_layers, enable_nested_tensor=False)
        self.final_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.heads = nn.ModuleList(nn.Linear(c.hidden_size, c.codebook_size) for _ in range(c.num_subspaces))
        if c.pooled_decoder:        # pretraining only: makes the pooled embedding hold each position's codes
            self.decoder_positions = nn.Embedding(c.num_probes, c.hidden_size)
            self.decoder = nn.Sequential(nn.Linear(c.hidden_size, c.hidden_size), nn.GELU(),
                                         nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps))
        if c.value_inputs:          # row MASK_ID stays zero: a masked code shows no value
            self.register_buffer("centroids", torch.zeros(c.num_subspaces, c.codebook_size + 1,
                                                          SPECTRUM_DIM // c.num_subspaces))
            self.value_projection = nn.Linear(SPECTRUM_DIM, c.hidden_size)
        self.apply(self._init_weights)
        nn.init.normal_(self.cls_embedding, std=c.initializer_range)
        if c.input_kind == "spectrum":
            nn.init.normal_(self.mask_embedding, std=c.initializer_range)

    def set_input_statistics(self, mean, scale) -> None:
        """Give a ``spectrum`` model the per-position mean and standard deviation of its pretraining rows, float
        (P, 56) each; a scale below 1e-6 (a constant feature) counts as 1."""
        if self.config.input_kind != "spectrum":
            raise ValueError("this model reads codes, not rows (PQBertConfig.input_kind)")
        mean = torch.as_tensor(mean, dtype=self.input_mean.dtype)
        scale = torch.as_tensor(scale, dtype=self.input_scale.dtype)
        for name, value in (("mean", mean), ("scale", scale)):
            if tuple(value.shape) != tuple(self.input_mean.shape):
                raise ValueError(f"{name} must have shape {tuple(self.input_mean.shape)}, got {tuple(value.shape)}")
        if not (torch.isfinite(mean).all() and torch.isfinite(scale).all()):
            raise ValueError("input statistics hold NaN or infinite values")
        with torch.no_grad():
            self.input_mean.copy_(mean)
            self.input_scale.copy_(torch.where(scale < 1e-6, torch.ones_like(scale), scale))

    def set_centroids(self, centroids) -> None:
        """Give a ``value_inputs`` model its quantizer's centroids, float (M, 256, 56 / M)."""
        if not self.config.value_inputs:
            raise ValueError("this model reads no values (PQBertConfig.value_inputs)")
        centroids = torch.as_tensor(centroids, dtype=self.centroids.dtype)
        expected = (self.config.num_subspaces, self.config.codebook_size, self.centroids.shape[2])
        if tuple(centroids.shape) != expected:
            raise ValueError(f"centroids must have shape {expected}, got {tuple(centroids.shape)}")
        with torch.no_grad():
            self.centroids.zero_()
            self.centroids[:, :-1] = centroids

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def input_states(self, inputs: torch.Tensor, masked: torch.Tensor = None) -> torch.Tensor:
        """What enters the Transformer at the P positions, before [CLS] and position embeddings: float (B, P, H).

        Args:
            inputs: codes int64 (B, P, M), MASK_ID where masked (``input_kind="codes"``); or reaction rows float
                (B, P, 56) (``input_kind="spectrum"``).
            masked: ``spectrum`` models only: bool (B, P), the rows replaced by the [MASK] vector (None: none).
        """
        c = self.config
        if c.input_kind == "spectrum":
            return self._row_states(inputs, masked)
        if masked is not None:
            raise ValueError("a model of input_kind 'codes' reads MASK_ID in its codes, not a row mask")
        codes = inputs
        if codes.dim() != 3 or codes.shape[1] != c.num_probes or codes.shape[2] != c.num_subspaces:
            raise ValueError(f"codes must have shape (B, {c.num_probes}, {c.num_subspaces}), got {tuple(codes.shape)}")
        x = torch.cat([table(codes[:, :, m]) for m, table in enumerate(self.sub_embeddings)], dim=-1)  # (B, P, H)
        if c.value_inputs:
            subspace = torch.arange(c.num_subspaces, device=codes.device)
            values = self.centroids[subspace, codes].flatten(2)                                         # (B, P, 56)
            x = x + self.value_projection(values)                                                       # (B, P, H)
        return x

    def _row_states(self, rows: torch.Tensor, masked: torch.Tensor = None) -> torch.Tensor:
        c = self.config
        if rows.dim() != 3 or rows.shape[1] != c.num_probes or rows.shape[2] != SPECTRUM_DIM:
            raise ValueError(f"rows must have shape (B, {c.num_probes}, {SPECTRUM_DIM}), got {tuple(rows.shape)}")
        if not rows.is_floating_point():
            raise ValueError(f"a model of input_kind 'spectrum' reads float reaction rows, got {rows.dtype}")
        if masked is None:
            masked = torch.zeros(rows.shape[:2], dtype=torch.bool, device=rows.device)                  # (B, P)
        if masked.shape != rows.shape[:2] or masked.dtype != torch.bool:
            raise ValueError(f"masked must be bool (B, P) = {tuple(rows.shape[:2])}, got {masked.dtype} "
                             f"{tuple(masked.shape)}")
        x = (rows.to(self.input_mean.dtype) - self.input_mean) / self.input_scale                       # (B, P, 56)
        x = self.input_projection(x.masked_fill(masked[..., None], 0.0))                                # (B, P, H)
        return torch.where(masked[..., None], self.mask_embedding, x)                                   # (B, P, H)

    def hidden_states(self, inputs: torch.Tensor, masked: torch.Tensor = None) -> torch.Tensor:
        """Final hidden states, float (B, P + 1, H); position 0 is [CLS]. ``inputs``, ``masked``: see
        :meth:`input_states`."""
        c = self.config
        x = self.input_states(inputs, masked)                                                           # (B, P, H)
        B = x.shape[0]
        x = torch.cat([self.cls_embedding.expand(B, 1, -1), x], dim=1)                                  # (B, P+1, H)
        x = x + self.position_embeddings.weight                                                         # (B, P+1, H)
        mask = None
        if c.context_free:                                    # True = may not attend: only the diagonal is open
            mask = ~torch.eye(c.num_probes + 1, dtype=torch.bool, device=x.device)                      # (P+1, P+1)
        x = self.encoder(self.dropout(x), mask=mask)                                                    # (B, P+1, H)
        return self.final_norm(x)

    def forward(self, inputs: torch.Tensor, masked: torch.Tensor = None) -> torch.Tensor:
        """Logits of every sub-space's code at every probe position, float (B, P, M, 256)."""
        h = self.hidden_states(inputs, masked)[:, 1:]                                # (B, P, H)
        return torch.stack([head(h) for head in self.heads], dim=2)                  # (B, P, M, 256)

    def reconstruct(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits of every code rebuilt from mean-pooled embeddings float (B, H) alone: float (B, P, M, 256)
        (``pooled_decoder`` models). The decoder sees one vector per module plus the position it rebuilds."""
        if not self.config.pooled_decoder:
            raise ValueError("this model has no pooled decoder (PQBertConfig.pooled_decoder)")
        h = self.decoder(pooled[:, None, :] + self.decoder_positions.weight)                     # (B, P, H)
        return torch.stack([head(h) for head in self.heads], dim=2)

    def embed(self, inputs: torch.Tensor, pooling: str = "mean") -> torch.Tensor:
        """Embeddings, float (B, H): mean of the P probe states (``mean``) or the [CLS] state (``cls``).
        ``inputs``: codes int64 (B, P, M) or, for a ``spectrum`` model, reaction rows float (B, P, 56)."""
        h = self.hidden_states(inputs)                                               # (B, P+1, H)
        if pooling == "mean":
            return h[:, 1:].mean(dim=1)
        if pooling == "cls":
            return h[:, 0]
        raise ValueError(f"pooling must be 'mean' or 'cls', got {pooling!r}")


def mask_codes(codes: torch.Tensor, probability: float, generator: torch.Generator) -> tuple:
    """Masked-LM input and labels for codes int64 (B, P, M).

    Each of the P x M sub-word positions is masked independently with ``probability``; masked positions are
    replaced by MASK_ID in the input and keep their code in the labels; every other label is IGNORE_INDEX.
    Returns (inputs int64 (B, P, M), labels int64 (B, P, M)).
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"mask probability must be in (0, 1), got {probability}")
    masked = torch.rand(codes.shape, generator=generator) < probability                   # (B, P, M)
    masked = masked.to(codes.device)
    inputs = codes.masked_fill(masked, MASK_ID)
    labels = codes.masked_fill(~masked, IGNORE_INDEX)
    return inputs, labels


def mask_rows(codes: torch.Tensor, probability: float, generator: torch.Generator) -> tuple:
    """Masked-LM row mask and labels for a ``spectrum`` model, from the rows' codes int64 (B, P, M).

    Each of the P rows is masked independently with ``probability``; a masked row keeps all M of its codes in the
    labels, every other label is IGNORE_INDEX. Returns (masked bool (B, P), labels int64 (B, P, M)).
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"mask probability must be in (0, 1), got {probability}")
    masked = (torch.rand(codes.shape[:2], generator=generator) < probability).to(codes.device)      # (B, P)
    return masked, codes.masked_fill(~masked[..., None], IGNORE_INDEX)


def masked_lm_loss(model: PQBert, inputs: torch.Tensor, labels: torch.Tensor, counts: torch.Tensor = None,
                   pooled_weight: float = 0.0, pooled_items: float = None, masked: torch.Tensor = None) -> tuple:
    """Sum over heads of the mean cross-entropy at that head's masked positions, plus ``pooled_weight`` times the
    pooled-reconstruction loss when it is > 0: the sum over heads of the mean cross-entropy of *every* code (masked
    or not) rebuilt by the model's pooled decoder from the mean of the final states.

    Each head's masked-LM logits are computed only at its masked positions (about 15% of them), not at all P.

    Args:
        inputs: int64 (B, P, M), MASK_ID where masked; or, for a ``spectrum`` model, rows float (B, P, 56).
        labels: int64 (B, P, M), IGNORE_INDEX where not masked (nor kept, see the training loop).
        masked: ``spectrum`` models: bool (B, P), the rows the model sees as [MASK] (:func:`mask_rows`).
        counts: optional float (M,) masked positions per head to divide by, instead of this batch's own (data
            parallel training passes the global counts, so that the processes' losses add up to the global one).
        pooled_items: modules to divide the pooled-reconstruction loss by (default this batch's; data parallel
            training passes the global batch size, for the same reason).
    Returns:
        (loss scalar, per-head summed cross-entropy float (M,), per-head masked counts float (M,),
         per-head correct predictions float (M,)); the last three are detached.
    """
    h = model.hidden_states(inputs, masked)[:, 1:]                                         # (B, P, H)
    loss = h.new_zeros(())
    summed, own, correct = [], [], []
    for m, head in enumerate(model.heads):
        where = labels[:, :, m] != IGNORE_INDEX                                            # (B, P)
        target = labels[:, :, m][where]                                                    # (n_m,)
        logits = head(h[where])                                                            # (n_m, 256)
        ce = F.cross_entropy(logits, target, reduction="sum")
        n = where.sum().to(h.dtype)
        loss = loss + ce / (n if counts is None else counts[m]).clamp(min=1)
        summed.append(ce.detach())
        own.append(n)
        correct.append((logits.argmax(-1) == target).sum().to(h.dtype))
    if pooled_weight > 0:
        codes = torch.where(labels != IGNORE_INDEX, labels, inputs)                           # (B, P, M) unmasked
        logits = model.reconstruct(h.mean(dim=1))                                             # (B, P, M, 256)
        ce = F.cross_entropy(logits.flatten(0, 2), codes.flatten(), reduction="sum")
        loss = loss + pooled_weight * ce / ((pooled_items or inputs.shape[0]) * inputs.shape[1])
    return loss, torch.stack(summed), torch.stack(own), torch.stack(correct)
