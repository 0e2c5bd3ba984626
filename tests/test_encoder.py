"""Quantizer, PQ-BERT, pretraining, checkpoints and embed."""

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import EXAMPLES, ROOT

import behavioral_pq as bpq
from behavioral_pq.artifacts import sha256_file
from behavioral_pq.corpus import build_corpus, compute_spectra, discover
from behavioral_pq.embedding.checkpoint import load_checkpoint, read_checkpoint_config, save_encoder
from behavioral_pq.embedding.encoder import default_checkpoint, load_encoder
from behavioral_pq.embedding.model import IGNORE_INDEX, MASK_ID, PQBert, PQBertConfig, mask_codes, masked_lm_loss
from behavioral_pq.embedding.probes import random_probes
from behavioral_pq.embedding.quantizer import Quantizer
from behavioral_pq.errors import CheckpointError, ConfigError, InvalidIRError, PretrainError, QuantizerError
from behavioral_pq.training.pretraining import (
    CodeStream,
    PretrainConfig,
    TrainingConfig,
    global_mask,
    global_targets,
    learning_rate,
    pretrain,
    read_codes,
    train,
)

# -- quantizer -------------------------------------------------------------------------------------------------


def fitted_quantizer(seed=0, rows=20_000):
    data = np.random.default_rng(seed).normal(size=(rows, 56)).astype(np.float32)
    return Quantizer(seed=seed).fit(data), data


def test_quantizer_round_trip_is_exact_on_its_own_centroids():
    q, _ = fitted_quantizer()
    codes = np.random.default_rng(1).integers(0, 256, size=(5000, 8)).astype(np.uint8)
    rows = q.decode(codes)
    assert rows.dtype == np.float32 and rows.shape == (5000, 56)
    assert np.array_equal(q.encode(rows), codes)
    assert q.relative_error(rows) == 0.0


def test_quantizer_shapes_dtypes_and_diagnostics():
    q, data = fitted_quantizer()
    codes = q.encode(data[:100])
    assert codes.dtype == np.uint8 and codes.shape == (100, 8)
    assert q.centroids_.shape == (8, 256, 7)
    assert 0.0 < q.relative_error(data) < 0.5          # 8 bytes for 56 Gaussian floats: coarse but informative
    usage = q.code_usage(q.encode(data))
    assert all(u > 0.9 for u in usage["used_fraction"]) and all(100 < p <= 256 for p in usage["perplexity"])
    with pytest.raises(ValueError, match=r"shape \(N, 56\)"):
        q.encode(data[:, :50])
    with pytest.raises(ValueError, match=r"shape \(N, 8\)"):
        q.decode(codes[:, :4])


def test_quantizer_refuses_tiny_data_and_warns_on_little(caplog):
    rows = np.random.default_rng(0).normal(size=(255, 56)).astype(np.float32)
    with pytest.raises(QuantizerError, match="on 255 rows"):
        Quantizer().fit(rows)
    with pytest.raises(QuantizerError, match="NaN"):
        Quantizer().fit(np.full((1000, 56), np.nan, np.float32))
    with caplog.at_level(logging.WARNING, logger="behavioral_pq.embedding.quantizer"):
        Quantizer().fit(np.random.default_rng(0).normal(size=(2000, 56)).astype(np.float32))
    assert "per centroid" in caplog.text
    with pytest.raises(QuantizerError, match="not fitted"):
        Quantizer().encode(rows)


def test_quantizer_save_load_and_corruption(tmp_path):
    q, data = fitted_quantizer()
    path = q.save(tmp_path / "q.npz")
    again = Quantizer.load(path)
    assert np.array_equal(again.centroids_, q.centroids_)
    assert np.array_equal(again.encode(data), q.encode(data))
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / "flipped.npz").write_bytes(bytes(blob))
    (tmp_path / "truncated.npz").write_bytes(path.read_bytes()[:1000])
    for name in ("flipped.npz", "truncated.npz", "missing.npz"):
        with pytest.raises(QuantizerError, match=name):
            Quantizer.load(tmp_path / name)


# -- model -----------------------------------------------------------------------------------------------------


def test_masking_rate_and_loss_only_on_masked_positions():
    codes = torch.randint(0, 256, (64, 100, 8), generator=torch.Generator().manual_seed(0))
    inputs, labels = mask_codes(codes, 0.15, torch.Generator().manual_seed(1))
    masked = labels != IGNORE_INDEX
    assert abs(masked.float().mean().item() - 0.15) < 0.01
    assert torch.equal(inputs == MASK_ID, masked)
    assert torch.equal(labels[masked], codes[masked]) and torch.equal(inputs[~masked], codes[~masked])

    torch.manual_seed(0)
    model = PQBert(PQBertConfig.preset("tiny")).eval()
    with torch.no_grad():
        loss, per_head, counts, _ = masked_lm_loss(model, inputs, labels)
        logits = model(inputs)                                                        # (B, P, M, 256)
        expected = sum(torch.nn.functional.cross_entropy(logits[:, :, m][masked[:, :, m]], codes[:, :, m][
            masked[:, :, m]]) for m in range(8))
        assert torch.allclose(loss, expected, atol=1e-4)
        assert torch.equal(counts, masked.sum(dim=(0, 1)).float())
        # changing labels at unmasked positions cannot change the loss: they are ignored
        other = labels.clone()
        other[~masked] = IGNORE_INDEX
        assert torch.equal(masked_lm_loss(model, inputs, other)[0], loss)
        # the encoder sees the masked input only: changing a code under a mask changes nothing
        changed = codes.clone()
        changed[masked] = (changed[masked] + 1) % 256
        assert torch.equal(changed.masked_fill(masked, MASK_ID), inputs)


def test_pooled_decoder_loss_rebuilds_every_code_from_the_pooled_embedding():
    """pooled_weight > 0 adds the cross-entropy of every code (masked or not) rebuilt from the mean of the final
    states alone; the embedding is unchanged by the decoder, and the loss splits exactly between processes."""
    codes = torch.randint(0, 256, (6, 12, 8), generator=torch.Generator().manual_seed(0))
    inputs, labels = mask_codes(codes, 0.15, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = PQBert(PQBertConfig.preset("tiny", num_probes=12, pooled_decoder=True)).eval()
    with torch.no_grad():
        mlm = masked_lm_loss(model, inputs, labels)[0]
        both = masked_lm_loss(model, inputs, labels, pooled_weight=0.5)[0]
        logits = model.reconstruct(model.embed(inputs))                                  # (B, P, M, 256)
        rebuilt = sum(torch.nn.functional.cross_entropy(logits[:, :, m].flatten(0, 1), codes[:, :, m].flatten())
                      for m in range(8))
        assert torch.allclose(both, mlm + 0.5 * rebuilt, atol=1e-4)
        counts = (labels != IGNORE_INDEX).sum(dim=(0, 1)).float()
        halves = sum(masked_lm_loss(model, inputs[k::2], labels[k::2], counts, 0.5, len(codes))[0] for k in (0, 1))
        assert torch.allclose(halves, masked_lm_loss(model, inputs, labels, counts, 0.5)[0], atol=1e-4)
    plain = PQBert(PQBertConfig.preset("tiny", num_probes=12))
    with pytest.raises(ValueError, match="no pooled decoder"):
        plain.reconstruct(torch.zeros(1, 64))
    config = PretrainConfig(model={"preset": "tiny"}, training=TrainingConfig(pooled_weight=1.0))
    assert config.model_config(12).pooled_decoder and not PretrainConfig().model_config(12).pooled_decoder
    with pytest.raises(ValueError, match="pooled_weight"):
        TrainingConfig(pooled_weight=-1.0)


def test_value_inputs_read_the_quantizer_centroids_and_hide_masked_ones(tmp_path):
    """A value_inputs run gives its model the quantizer's centroids (saved with the weights); the model's states
    then depend on those values, except at masked codes, which show none."""
    run = synthetic_run(tmp_path / "run", modules=64)
    base = tiny_config(max_steps=5, eval_every=5)
    train(run, PretrainConfig(model={"preset": "tiny", "value_inputs": True}, training=base.training))
    model = load_checkpoint(run / "encoder").model.eval()
    centroids = Quantizer.load(run / "quantizer.npz").centroids_                       # (8, 256, 7)
    assert torch.allclose(model.centroids[:, :256], torch.from_numpy(centroids), atol=1e-2)
    assert not model.centroids[:, MASK_ID].any()
    codes = torch.from_numpy(read_codes(run / "codes" / "valid.parquet")[:4].astype(np.int64))   # (4, 16, 8)
    masked = torch.full_like(codes, MASK_ID)
    with torch.no_grad():
        before, before_masked = model.hidden_states(codes), model.hidden_states(masked)
        model.set_centroids(2 * centroids + 1)
        assert not torch.allclose(model.hidden_states(codes), before, atol=1e-3)
        assert torch.equal(model.hidden_states(masked), before_masked)
    with pytest.raises(ValueError, match="shape"):
        model.set_centroids(centroids[:, :10])
    with pytest.raises(ValueError, match="reads no values"):
        PQBert(PQBertConfig.preset("tiny")).set_centroids(centroids)
    with pytest.raises(ValueError, match="dividing 56"):
        PQBertConfig.preset("tiny", num_subspaces=5, sub_embedding_size=8, num_attention_heads=5, value_inputs=True)


def test_tiny_model_overfits_a_small_batch():
    torch.manual_seed(0)
    model = PQBert(PQBertConfig.preset("tiny"))
    codes = torch.randint(0, 256, (8, 100, 8), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    inputs, labels = mask_codes(codes, 0.15, torch.Generator().manual_seed(0))    # one fixed batch
    first = None
    for _ in range(100):
        loss, *_ = masked_lm_loss(model, inputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = first if first is not None else loss.item()
    assert first > 8 * 5.0                 # about 8 * ln(256) = 44 at the start
    assert loss.item() < 8 * 1.0           # it has memorized the batch


def test_model_rejects_wrong_shapes_and_configs():
    model = PQBert(PQBertConfig.preset("tiny"))
    with pytest.raises(ValueError, match=r"\(B, 100, 8\)"):
        model(torch.zeros((2, 99, 8), dtype=torch.long))
    with pytest.raises(ValueError, match="divisible"):
        PQBertConfig(num_attention_heads=7)
    with pytest.raises(ValueError, match="unknown preset"):
        PQBertConfig.preset("huge")
    with pytest.raises(ValueError, match="pooling"):
        model.embed(torch.zeros((1, 100, 8), dtype=torch.long), pooling="max")


# -- pretraining on synthetic codes ----------------------------------------------------------------------------


def synthetic_run(path: Path, modules=512, probes=16, seed=0, noise=False) -> Path:
    """A prepared run folder with structured codes: each module draws a latent k; code[p, m] = (k + 7m) mod 256
    for every probe p (probes that react alike), so a masked code is predictable from the rest of the module, and
    not from its position alone. ``noise``: independent random codes instead (nothing predicts a masked one).
    The rows next to them are the quantizer's decoding of those codes (so the codes are the rows' own codes)."""
    rng = np.random.default_rng(seed)
    (path / "codes").mkdir(parents=True)
    q, _ = fitted_quantizer(rows=12_000)
    q.save(path / "quantizer.npz")
    probe_set = random_probes(probes, 4, seed=0)
    probe_set.save(path / "probes.json")

    def write(name, n):
        k = rng.permutation(256)[:n] if n <= 256 else rng.integers(0, 256, size=n)   # distinct when possible
        m = np.arange(8)
        codes = np.broadcast_to((k[:, None, None] + 7 * m[None, None, :]) % 256, (n, probes, 8)).astype(np.uint8)
        if noise:
            codes = rng.integers(0, 256, size=(n, probes, 8), dtype=np.uint8)
        rows = q.decode(codes.reshape(-1, 8)).reshape(n, probes, 56)
        table = pa.table({"sha256": [f"{name}{i:06d}" for i in range(n)], "codes": [c.tobytes() for c in codes],
                          "spectra": [r.tobytes() for r in rows]})
        pq.write_table(table, path / "codes" / f"{name}.parquet", row_group_size=64)

    write("train", modules)
    write("valid", 64)
    write("test", 64)
    (path / "prepare.json").write_text(json.dumps({"corpus": {"modules": modules, "synthetic": True},
                                                   "probe_set_hash": probe_set.hash}))
    return path


def tiny_config(**training) -> PretrainConfig:
    base = dict(batch_size=16, learning_rate=3e-3, warmup_steps=10, max_steps=60, log_every=5, eval_every=30,
                shuffle_buffer=128, reaction="log-relative", quantizer_subspaces=8)   # the synthetic runs' codes
    base.update(training)
    return PretrainConfig(model={"preset": "tiny"}, training=TrainingConfig(**base))


def test_code_stream_is_seeded_and_splits_between_processes(tmp_path):
    run = synthetic_run(tmp_path / "run", modules=100)
    path = run / "codes" / "train.parquet"
    one = [b.copy() for _, b in zip(range(6), CodeStream(path, 0, 32).batches(20))]      # 120 items: 1.2 epochs
    again = [b for _, b in zip(range(6), CodeStream(path, 0, 32).batches(20))]
    assert all(np.array_equal(a, b) for a, b in zip(one, again))
    first_epoch = np.concatenate(one)[:100]
    assert len({x.tobytes() for x in first_epoch}) == 100                            # a permutation of the file
    other = np.concatenate([b for _, b in zip(range(5), CodeStream(path, 1, 32).batches(20))])
    assert not np.array_equal(other, np.concatenate(one)[:100])
    ranks = [np.concatenate([b for _, b in zip(range(3), CodeStream(path, 0, 32, r, 2).batches(10))])
             for r in range(2)]
    interleaved = np.stack([ranks[i % 2][i // 2] for i in range(60)])
    assert np.array_equal(interleaved, np.concatenate(one)[:60])
    resumed = next(CodeStream(path, 0, 32).batches(20, skip=3))
    assert np.array_equal(resumed, one[3])


@pytest.mark.slow
def test_kept_codes_make_the_final_states_keep_their_own_code(tmp_path):
    """On codes no context predicts, masked-LM alone never asks a visible position for its code; with
    keep_probability the heads read it back from the final state of the same position."""
    def own_code_accuracy(keep):
        run = synthetic_run(tmp_path / f"keep-{keep}", modules=256, noise=True)
        train(run, tiny_config(max_steps=400, eval_every=200, keep_probability=keep, mask_probability=0.1))
        model = load_checkpoint(run / "encoder").model.eval()
        codes = torch.from_numpy(read_codes(run / "codes" / "valid.parquet").astype(np.int64))   # (64, 16, 8)
        with torch.no_grad():
            return float((model(codes).argmax(-1) == codes).float().mean())
    kept, masked_only = own_code_accuracy(0.5), own_code_accuracy(0.0)     # held-out modules; chance is 1/256
    assert kept > 0.04 and kept > 5 * masked_only


def test_learning_rate_schedule():
    t = TrainingConfig(learning_rate=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert learning_rate(0, t) == pytest.approx(1e-4)
    assert learning_rate(9, t) == pytest.approx(1e-3)
    assert learning_rate(60, t) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    assert learning_rate(110, t) == pytest.approx(1e-4)


def test_pretraining_learns_resumes_and_writes_a_checkpoint(tmp_path):
    run = synthetic_run(tmp_path / "run")
    config = tiny_config(max_steps=80)
    first = train(run, config, max_steps=30)                 # stops early: state saved at step 30
    assert first["steps"] == 30 and not (run / "encoder").exists()
    state = torch.load(run / "train-state.pt", weights_only=True)
    assert state["step"] == 30
    summary = train(run, config)                             # resumes at 30
    assert summary["steps"] == 80
    log = (run / "log.csv").read_text().splitlines()
    assert log[0].startswith("step,") and [int(r.split(",")[0]) for r in log[1:]][:7] == [5, 10, 15, 20, 25, 30, 35]
    valid = summary["valid"]
    assert len(valid["accuracy"]) == 8
    assert valid["accuracy_mean"] > 0.2                      # chance is 1/256; the frequency baseline near 0
    assert (run / "training-curve.png").stat().st_size > 10_000
    encoder = load_encoder(run / "encoder")
    assert encoder.dim == 64 and encoder.probe_set.num_probes == 16
    assert encoder.config["training"]["steps"] == 80


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    config = tiny_config(max_steps=20, eval_every=10)
    a = synthetic_run(tmp_path / "a")
    b = synthetic_run(tmp_path / "b")
    train(a, config, max_steps=10)
    train(a, config)
    train(b, config)
    wa = load_checkpoint(a / "encoder").model.state_dict()
    wb = load_checkpoint(b / "encoder").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_global_masks_split_exactly_between_processes():
    whole = global_mask(7, 0, (8, 16, 8), 0.15)
    assert torch.equal(whole, global_mask(7, 0, (8, 16, 8), 0.15))
    assert not torch.equal(whole, global_mask(8, 0, (8, 16, 8), 0.15))


def test_kept_codes_are_predicted_but_stay_visible():
    """keep_probability adds visible codes to the predicted ones (BERT's unchanged tokens); 0 changes nothing."""
    shape = (64, 25, 14)
    masked, predicted = global_targets(3, 0, shape, TrainingConfig())
    assert torch.equal(masked, global_mask(3, 0, shape, 0.15)) and torch.equal(masked, predicted)
    masked, predicted = global_targets(3, 0, shape, TrainingConfig(keep_probability=0.2))
    assert torch.equal(masked, global_mask(3, 0, shape, 0.15))     # the input is masked as before
    kept = predicted & ~masked
    assert bool((predicted | ~masked).all())                        # every masked code is still predicted
    assert abs(kept.float().mean().item() - 0.2 * 0.85) < 0.01     # a fifth of the visible codes more
    keep = TrainingConfig(keep_probability=0.2)
    assert torch.equal(predicted, global_targets(3, 0, shape, keep)[1])      # seeded by (seed, step) alone
    assert not torch.equal(predicted, global_targets(4, 0, shape, keep)[1])
    with pytest.raises(ValueError, match="keep_probability"):
        TrainingConfig(keep_probability=1.0)


def test_pretrain_config_files(tmp_path):
    config = PretrainConfig.load(ROOT / "pretrain" / "default.toml")
    assert config == PretrainConfig()          # the file spells out the defaults the CLI uses
    assert config.model["preset"] == "small" and config.training.batch_size % 2 == 0
    assert config.model_config(25).hidden_size == 224 and config.training.quantizer_subspaces == 14
    shipped = read_checkpoint_config(default_checkpoint())    # the shipped encoder was trained with these settings
    assert config.model_config(25) == PQBertConfig.from_dict(shipped["model"])
    later = {"pooled_weight": 0.0, "keep_probability": 0.0}   # settings added after it was trained, at defaults
    assert {k: shipped["training"].get(k, later.get(k)) for k in config.to_dict()["training"]} == \
        config.to_dict()["training"]
    paper = PretrainConfig.load(ROOT / "pretrain" / "paper-m8.toml")
    assert paper.model_config(100).num_subspaces == 8 and paper.training.reaction == "log-relative"
    bad = tmp_path / "mismatch.toml"
    bad.write_text("[model]\npreset = 'small'\nnum_subspaces = 8\n[training]\nquantizer_subspaces = 14\n")
    with pytest.raises(ConfigError, match="mismatch.toml: .*num_subspaces is 8.*quantizer_subspaces 14"):
        PretrainConfig.load(bad)
    follows = PretrainConfig(model={"preset": "tiny"}, training=TrainingConfig(quantizer_subspaces=28))
    assert follows.model_config(25).num_subspaces == 28        # the model takes the quantizer's sub-spaces
    bad = tmp_path / "bad.toml"
    bad.write_text("[training]\nbatch_sise = 3\n")
    with pytest.raises(ConfigError, match="batch_sise"):
        PretrainConfig.load(bad)
    bad.write_text("[model]\npreset = 'tiny'\nhiden_size = 3\n")
    with pytest.raises(ConfigError, match="hiden_size"):
        PretrainConfig.load(bad)
    bad.write_text("[training\n")
    with pytest.raises(ConfigError, match="TOML"):
        PretrainConfig.load(bad)


# -- continuous inputs (input_kind "spectrum") ------------------------------------------------------------------


def spectrum_model(num_probes=12, seed=0):
    torch.manual_seed(seed)
    model = PQBert(PQBertConfig.preset("tiny", num_probes=num_probes, input_kind="spectrum")).eval()
    rng = np.random.default_rng(seed)
    model.set_input_statistics(rng.normal(size=(num_probes, 56)), rng.uniform(0.5, 2.0, size=(num_probes, 56)))
    return model


def test_spectrum_model_reads_the_values_and_masked_rows_show_none():
    """A model of input_kind "spectrum" reads each row's 56 values; a masked row's values reach nothing."""
    model = spectrum_model()
    rows = torch.from_numpy(np.random.default_rng(1).normal(size=(3, 12, 56)).astype(np.float32))  # (3, 12, 56)
    masked = torch.zeros(3, 12, dtype=torch.bool)
    masked[:, [2, 7]] = True
    with torch.no_grad():
        logits = model(rows, masked)                                                   # (3, 12, 8, 256)
        assert logits.shape == (3, 12, 8, 256)
        nudged = rows.clone()
        nudged[0, 4, 10] += 0.05                                                       # one value, unmasked row
        changed = model(nudged, masked)
        assert not torch.allclose(changed[0], logits[0], atol=1e-6)
        assert not torch.allclose(changed[0, 2], logits[0, 2], atol=1e-6)   # the masked row's logits read it
        assert torch.equal(changed[1:], logits[1:])                          # other modules are untouched
        hidden = rows.clone()
        hidden[:, 2] = torch.randn(3, 56) * 100                              # masked rows: any values
        hidden[:, 7] = float("nan")
        assert torch.equal(model(hidden, masked), logits)
        assert torch.isfinite(model.embed(rows)).all()
        assert not torch.equal(model.embed(rows), model.embed(hidden.nan_to_num(0.0)))   # unmasked, they count
        # the input statistics standardize the rows: shifting both by the same amount changes nothing
        model.input_mean += 1.0
        assert torch.allclose(model(rows + 1.0, masked), logits, atol=1e-5)
    with pytest.raises(ValueError, match="float reaction rows"):
        model(torch.zeros((1, 12, 56), dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, 12, 56\)"):
        model(torch.zeros((1, 12, 8)))
    with pytest.raises(ValueError, match="masked must be bool"):
        model(rows, masked[:, :5])
    with pytest.raises(ValueError, match="not a row mask"):
        PQBert(PQBertConfig.preset("tiny", num_probes=12))(torch.zeros((1, 12, 8), dtype=torch.long), masked[:1])
    with pytest.raises(ValueError, match="shape"):
        model.set_input_statistics(np.zeros((11, 56)), np.ones((11, 56)))
    with pytest.raises(ValueError, match="reads codes"):
        PQBert(PQBertConfig.preset("tiny")).set_input_statistics(np.zeros((100, 56)), np.ones((100, 56)))


def test_spectrum_model_configs_are_checked():
    with pytest.raises(ValueError, match="input_kind must be one of"):
        PQBertConfig.preset("tiny", input_kind="rows")
    for wrong in ({"value_inputs": True}, {"pooled_decoder": True}):
        with pytest.raises(ValueError, match="reads no codes"):
            PQBertConfig.preset("tiny", input_kind="spectrum", **wrong)
    with pytest.raises(ValueError, match="reads no codes"):
        PretrainConfig(model={"preset": "tiny", "input_kind": "spectrum"},
                       training=TrainingConfig(pooled_weight=0.5)).model_config(16)
    assert PQBertConfig.from_dict({"num_probes": 25}).input_kind == "codes"    # checkpoints made before the option
    config = PretrainConfig.load(ROOT / "pretrain" / "every-size-module-m14-spectrum.toml")
    model_config = config.model_config(25)
    assert model_config.input_kind == "spectrum" and model_config.hidden_size == 224
    assert config.training.reaction == "log-relative+module" and config.training.quantizer_subspaces == 14


def test_spectrum_pretraining_learns_and_its_encoder_round_trips(tmp_path):
    """Pretraining a spectrum model feeds it the stored rows (standardized with the train rows' statistics) and
    asks it for the masked rows' codes; the loss falls, the checkpoint embeds through the rows alone (the quantizer
    only names the targets) and loads back bit for bit."""
    from behavioral_pq.embedding.encoder import Encoder
    from behavioral_pq.training.pretraining import read_spectra, read_log, row_statistics

    run = synthetic_run(tmp_path / "run", modules=256)
    config = PretrainConfig(model={"preset": "tiny", "input_kind": "spectrum"}, training=tiny_config(
        max_steps=80, eval_every=40, mask_probability=0.3).training)
    summary = train(run, config)
    losses = [float(r["train_loss"]) for r in read_log(run / "log.csv")]
    assert losses[-1] < 0.9 * losses[0]                              # about 8 ln 256 = 44 at the start
    assert summary["valid"]["accuracy_mean"] > 0.2                   # chance is 1/256; 0.61 when written
    loaded = load_checkpoint(run / "encoder")
    mean, scale = row_statistics(run / "codes" / "train.parquet")
    assert torch.allclose(loaded.model.input_mean, torch.from_numpy(mean))
    assert loaded.model.config.input_kind == "spectrum" and "sub_embeddings.0.weight" not in loaded.model.state_dict()
    encoder = Encoder(loaded)
    rows = read_spectra(run / "codes" / "valid.parquet")[:5]                          # (5, 16, 56)
    vectors = encoder.embed_spectra(rows)
    with torch.no_grad():
        assert np.array_equal(vectors, loaded.model.embed(torch.from_numpy(rows)).numpy())
    again = save_encoder(tmp_path / "again", loaded.model, loaded.quantizer, loaded.probe_set, corpus={}, seed=0,
                         reaction="log-relative")
    assert np.array_equal(load_encoder(again).embed_spectra(rows), vectors)

    def no_quantizer(rows):
        raise AssertionError("a spectrum encoder must not quantize its input")
    encoder.quantizer.encode = no_quantizer
    assert np.array_equal(encoder.embed_spectra(rows), vectors)
    with pytest.raises(ValueError, match="not codes"):
        encoder.embed_codes(np.zeros((1, 16, 8), np.uint8))


def test_a_run_prepared_without_spectra_is_refused_for_a_spectrum_model(tmp_path):
    run = synthetic_run(tmp_path / "run", modules=64)
    for name in ("train", "valid", "test"):
        path = run / "codes" / f"{name}.parquet"
        pq.write_table(pq.read_table(path).drop(["spectra"]), path)
    config = PretrainConfig(model={"preset": "tiny", "input_kind": "spectrum"}, training=tiny_config().training)
    with pytest.raises(PretrainError, match="prepared without the spectra"):
        train(run, config, max_steps=1)
    assert train(run, tiny_config(max_steps=2, eval_every=2))["steps"] == 2      # a codes model needs none


#: Embeddings of the shipped code-input encoders of seeded rows (computed before input_kind existed).
SHIPPED_EMBEDDINGS = {
    "pqbert-small-m14-s0": [1.3793683052062988, 1.0270155668258667, -1.6278239488601685, 2.2525179386138916],
    "pqbert-small-s0": [-1.4113531112670898, 0.5536863803863525, -2.6401665210723877, 0.7280904650688171],
}


def test_code_input_checkpoints_embed_as_before():
    from behavioral_pq.embedding.encoder import shipped

    for name, first in SHIPPED_EMBEDDINGS.items():
        encoder = load_encoder(shipped(name))
        assert encoder.model.config.input_kind == "codes" and not encoder.reads_spectrum
        rng = np.random.default_rng(42)
        spectra = rng.normal(scale=0.5, size=(3, encoder.probe_set.num_probes, 56)).astype(np.float32)
        original = rng.integers(0, 400, size=(3, 56))
        vectors = encoder.embed_spectra(spectra, original)
        assert vectors[0, :4].tolist() == pytest.approx(first, abs=1e-6)
        rows = encoder.reaction_rows(spectra, original)
        assert np.array_equal(vectors, encoder.embed_inputs(encoder.codes(rows), rows=rows))
        hidden = encoder.model.config.hidden_size
        if encoder.reads_counts:              # the shipped default: the states' mean, then the rows' count reactions
            assert np.array_equal(vectors[:, hidden:], encoder.readout(rows)) and encoder.dim == hidden + 8 * 25
        else:
            assert np.array_equal(vectors, encoder.embed_codes(encoder.spectra_codes(spectra, original)))


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path):
    """torchrun with 2 CPU processes (gloo) follows the single-process loss trajectory on the same global batch."""
    config = tiny_config(max_steps=12, log_every=1, eval_every=12, warmup_steps=2)
    one = synthetic_run(tmp_path / "one")
    two = synthetic_run(tmp_path / "two")
    (tmp_path / "cfg.json").write_text(json.dumps(config.to_dict()))
    train(one, config)
    script = tmp_path / "ddp.py"
    script.write_text(
        "import json, sys\n"
        "from behavioral_pq.training.pretraining import PretrainConfig, train\n"
        "config = PretrainConfig.from_dict(json.load(open(sys.argv[1])))\n"
        "train(sys.argv[2], config, device='cpu')\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517",
                    str(script), str(tmp_path / "cfg.json"), str(two)], check=True, env=env, timeout=600,
                   capture_output=True)
    loss = [[float(r.split(",")[3]) for r in (run / "log.csv").read_text().splitlines()[1:]] for run in (one, two)]
    assert len(loss[0]) == len(loss[1]) == 12
    assert np.allclose(loss[0], loss[1], rtol=1e-4, atol=1e-4), loss
    assert json.loads((two / "summary.json").read_text())["processes"] == 2


# -- checkpoints -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    probe_set = random_probes(16, 4, seed=0)
    model = PQBert(PQBertConfig.preset("tiny", num_probes=16))
    q, _ = fitted_quantizer(rows=12_000)
    path = save_encoder(tmp_path_factory.mktemp("ckpt") / "enc", model, q, probe_set,
                        corpus={"modules": 0, "note": "untrained, for tests"}, seed=0)
    return path, model


def test_checkpoint_round_trip_is_bit_identical(tiny_checkpoint, tmp_path):
    path, model = tiny_checkpoint
    loaded = load_checkpoint(path)
    original = model.state_dict()
    assert all(torch.equal(v, original[k]) for k, v in loaded.model.state_dict().items())
    config = json.loads((path / "config.json").read_text())
    for key in ("format_version", "versions", "model", "feature_names", "probe_set", "corpus", "seed", "files"):
        assert key in config
    assert config["versions"]["llvm"].startswith("19.") and config["probe_set"]["hash"] == loaded.probe_set.hash
    half = save_encoder(tmp_path / "half", model, loaded.quantizer, loaded.probe_set, corpus={}, seed=0,
                        dtype="float16")
    assert (half / "model.safetensors").stat().st_size < 0.6 * (path / "model.safetensors").stat().st_size
    again = load_checkpoint(half).model.state_dict()
    assert all(torch.equal(again[k], v.half().float()) for k, v in original.items())


def corrupt_copies(path: Path, tmp_path: Path):
    """(name, folder, expected message) for one kind of damage each."""
    def copy(name):
        target = tmp_path / name
        shutil.copytree(path, target)
        return target

    def edit_config(folder, change, reseal=True):
        """Change config.json; resealed, it stands for a genuine checkpoint made another way."""
        from behavioral_pq.artifacts import seal

        config = json.loads((folder / "config.json").read_text())
        change(config)
        (folder / "config.json").write_text(json.dumps(seal(config) if reseal else config))

    out = []
    c = copy("truncated")
    (c / "model.safetensors").write_bytes((c / "model.safetensors").read_bytes()[:500])
    out.append((c, "model.safetensors: checksum"))
    c = copy("flipped")
    blob = bytearray((c / "quantizer.npz").read_bytes())
    blob[200] ^= 1
    (c / "quantizer.npz").write_bytes(bytes(blob))
    out.append((c, "quantizer.npz: checksum"))
    c = copy("missing")
    (c / "probes.json").unlink()
    out.append((c, "probes.json: missing"))
    c = copy("llvm")
    edit_config(c, lambda config: config.update(llvm_major=18))
    out.append((c, "LLVM 18"))
    c = copy("probes")
    random_probes(16, 4, seed=1).save(c / "probes.json")       # another probe set, with a matching file checksum
    edit_config(c, lambda config: config["files"].update({"probes.json": sha256_file(c / "probes.json")}))
    out.append((c, "not the one the model was trained with"))
    c = copy("edited")
    edit_config(c, lambda config: config.update(pooling="cls"), reseal=False)
    out.append((c, "config.json: content digest mismatch"))
    c = copy("version")
    edit_config(c, lambda config: config.update(format_version=99))
    out.append((c, "format version 99"))
    c = copy("garbage")
    (c / "config.json").write_text("{not json")
    out.append((c, "config.json: unreadable"))
    out.append((tmp_path / "nowhere", "no such checkpoint folder"))
    return out


def test_corrupt_checkpoints_are_refused(tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    for folder, message in corrupt_copies(path, tmp_path):
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(folder)


# -- embed -----------------------------------------------------------------------------------------------------


def test_embed_is_deterministic_and_embed_many_stacks_embed(tiny_checkpoint):
    path, _ = tiny_checkpoint
    encoder = load_encoder(path)
    modules = [bpq.load_module(p) for p in sorted(EXAMPLES.glob("*.c"))]
    one = [encoder.embed(m) for m in modules]
    assert one[0].dtype == np.float32 and one[0].shape == (64,)
    many = encoder.embed_many(modules)
    assert np.array_equal(many, np.stack(one))
    assert np.array_equal(encoder.embed(modules[0]), one[0])
    assert not np.allclose(one[0], one[1])
    cls = load_encoder(path, pooling="cls").embed(modules[0])
    assert cls.shape == (64,) and not np.allclose(cls, one[0])


def test_mean_counts_pooling_appends_each_probes_count_reactions(tiny_checkpoint):
    path, _ = tiny_checkpoint
    from behavioral_pq.core.features import AUTOPHASE_FEATURES, autophase
    from behavioral_pq.core.passes import optimize

    mean, sized = load_encoder(path), load_encoder(path, pooling="mean+counts")
    module = bpq.load_module(sorted(EXAMPLES.glob("*.c"))[0])
    assert sized.dim == 64 + 8 * 16 and sized.model_pooling == "mean"
    e = sized.embed(module)
    assert e.shape == (192,) and e.dtype == np.float32
    assert np.array_equal(e[:64], mean.embed(module))
    # the tail, measured here without the spectrum code: log1p of the 8 counts after each probe, relative to the
    # module's, probe by probe
    names = ("TotalInsts", "TotalBlocks", "TotalFuncs", "TotalMemInst", "NumAllocaInst", "NumLoadInst",
             "NumStoreInst", "NumPHIInst")
    features = [AUTOPHASE_FEATURES.index(name) for name in names]
    before = autophase(module)[features]
    after = np.array([autophase(optimize(module, list(seq)))[features] for seq in sized.probe_set.sequences])
    assert np.allclose(e[64:], (np.log1p(after) - np.log1p(before)).ravel(), atol=1e-5)
    assert (e[64::8] < 0).any() and (e[67::8] < 0).any()    # the probes shrink this module: not all zeros
    assert np.array_equal(sized.embed_many([module]), e[None])
    codes = sized.codes(np.zeros((1, 16, 56), np.float32))
    with pytest.raises(ValueError, match=r"mean\+counts.*rows"):
        sized.embed_codes(codes)


def test_mean_changes_pooling_appends_each_probes_relative_count_changes(tiny_checkpoint):
    """The shipped default: the tail of mean+counts with each probe's reactions as relative changes, the unit of
    the -Oz benefit, measured here without the spectrum code; an encoder of absolute reactions refuses it."""
    path, _ = tiny_checkpoint
    from behavioral_pq.core.features import AUTOPHASE_FEATURES, autophase
    from behavioral_pq.core.passes import optimize
    from behavioral_pq.embedding.encoder import COUNT_NAMES

    counts, changes = load_encoder(path, pooling="mean+counts"), load_encoder(path, pooling="mean+changes")
    module = bpq.load_module(sorted(EXAMPLES.glob("*.c"))[0])
    e = changes.embed(module)
    assert changes.dim == 64 + 8 * 16 and e.shape == (192,) and e.dtype == np.float32
    assert np.array_equal(e[:64], counts.embed(module)[:64])
    features = [AUTOPHASE_FEATURES.index(name) for name in COUNT_NAMES]
    before = autophase(module)[features].astype(np.float64)
    after = np.array([autophase(optimize(module, list(seq)))[features] for seq in changes.probe_set.sequences])
    assert np.allclose(e[64:], ((after + 1) / (before + 1) - 1).ravel(), atol=1e-5)
    shrunk = e[64::8]                                       # instructions: a probe that halves them reads -0.5ish
    assert (shrunk < 0).any() and (shrunk > -1).all()
    assert np.array_equal(changes.embed_many([module]), e[None])

    # a "log-relative+module" encoder's last row is the module's own log1p counts: kept as it is
    rows = np.zeros((2, 16, 56), np.float32)
    rows[:, :, features[0]] = np.log(0.5)
    changes.reaction = "log-relative+module"
    tail = changes.readout(rows).reshape(2, 16, 8)
    assert np.allclose(tail[:, :15, 0], -0.5) and np.allclose(tail[:, 15, 0], np.log(0.5))
    changes.reaction = "absolute"
    with pytest.raises(ValueError, match="absolute"):
        changes.with_pooling("mean+changes")


def test_embed_many_keeps_going_past_a_bad_module(tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    encoder = load_encoder(path)
    bad = tmp_path / "bad.ll"
    bad.write_text("not IR\n")
    good = sorted(EXAMPLES.glob("*.c"))[:2]
    batch = encoder.embed_batch([good[0], bad, tmp_path / "missing.ll", good[1]])
    out, errors = batch.embeddings, batch.errors
    assert batch.ok.tolist() == [True, False, False, True]
    assert np.array_equal(encoder.embed_many([good[0], bad]), out[:2], equal_nan=True)
    assert out.shape == (4, 64)
    assert np.isnan(out[1]).all() and np.isnan(out[2]).all()
    assert np.array_equal(out[0], encoder.embed(good[0])) and np.array_equal(out[3], encoder.embed(good[1]))
    assert errors[0] is None and isinstance(errors[1], InvalidIRError) and errors[2] is not None


# -- the whole path on a real (small) store --------------------------------------------------------------------


def test_prepare_and_pretrain_from_a_corpus_store(tmp_path):
    from test_corpus import tiny_programs

    programs = tiny_programs(tmp_path / "src", 40)
    store = tmp_path / "store"
    build_corpus(discover([programs, EXAMPLES], origin="t"), store, workers=1, labels=False)
    probe_set = random_probes(16, 6, seed=3)
    probes_path = probe_set.save(tmp_path / "probes.json")
    compute_spectra(store, probes_path, workers=1)
    config = PretrainConfig(model={"preset": "tiny"},
                            training=TrainingConfig(batch_size=8, max_steps=6, eval_every=3, log_every=1,
                                                    warmup_steps=2, quantizer_rows=4096, reaction="log-relative",
                                                    quantizer_subspaces=8))   # the paper's vocabulary
    summary = pretrain(store, tmp_path / "run", config, probes=probes_path)
    prepared = json.loads((tmp_path / "run" / "prepare.json").read_text())
    counts = prepared["modules"]
    assert counts["train"] + counts["valid"] == 44 and counts["valid"] > 0
    assert prepared["probe_set_hash"] == probe_set.hash and summary["steps"] == 6
    encoder = load_encoder(tmp_path / "run" / "encoder")
    module = bpq.load_module(EXAMPLES / "matmul.c")
    vector = encoder.embed(module)
    assert vector.shape == (64,) and np.isfinite(vector).all()
    # the codes the run trained on are the encoder's own codes of the stored spectra
    from behavioral_pq.training.pretraining import read_codes, read_spectra
    stored = read_codes(tmp_path / "run" / "codes" / "train.parquet")
    assert stored.shape[1:] == (16, 8)
    assert np.array_equal(encoder.quantizer.encode(read_spectra(tmp_path / "run" / "codes" / "train.parquet")
                                                   .reshape(-1, 56)).reshape(stored.shape), stored)
    assert np.array_equal(encoder.codes(bpq.spectrum(module, probe_set)[None])[0],
                          encoder.codes(bpq.spectrum(module, encoder.probe_set)[None])[0])
    with pytest.raises(Exception, match="another configuration"):
        pretrain(store, tmp_path / "run", PretrainConfig(model={"preset": "tiny"},
                                                         training=TrainingConfig(batch_size=4)), probes=probes_path)


class _OrderedSpectra:
    """A stand-in for a corpus store's spectra reader that streams the same modules in a chosen order and batching,
    as two stores filled by parallel workers would."""

    def __init__(self, shas, spectra, order, batch):
        self.shas, self.spectra, self.order, self.batch = shas, spectra, order, batch

    def iter_spectra(self, probes=None, *, shas=None, reaction="log-relative"):
        for start in range(0, len(self.order), self.batch):
            chosen = self.order[start:start + self.batch]
            yield [self.shas[i] for i in chosen], self.spectra[chosen]


def test_the_quantizer_sample_and_the_code_files_do_not_depend_on_the_store_order(tmp_path):
    """A store filled by parallel workers holds modules in the order they finished. The quantizer's sample and the
    code files a run trains on must depend on the modules only: a flaky test traced to this (the same corpus
    pretrained into different encoders when the machine was busy)."""
    import hashlib

    from behavioral_pq.training.pretraining import encode_split, sample_rows

    rng = np.random.default_rng(0)
    shas = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(300)]
    spectra = rng.normal(size=(300, 4, 56)).astype(np.float32)
    stores = [_OrderedSpectra(shas, spectra, np.arange(300), 64),
              _OrderedSpectra(shas, spectra, rng.permutation(300), 37)]
    samples = [sample_rows(store, None, shas, 500, seed=7, reaction="log-relative") for store in stores]
    assert samples[0].shape == (500, 56) and np.array_equal(samples[0], samples[1])
    # rows drawn uniformly, not whole modules: with 500 of 1,200 rows about 1 - (7/12)^4 = 88% of modules are hit
    drawn = np.isin(spectra.reshape(-1, 56)[:, 0], samples[0][:, 0]).reshape(300, 4).sum(axis=1)
    assert drawn.sum() == 500 and 0.8 < (drawn > 0).mean() < 0.95
    assert not np.array_equal(sample_rows(stores[0], None, shas, 500, seed=8), samples[0])
    everything = sample_rows(stores[1], None, shas, 5000, seed=7)
    assert everything.shape == (1200, 56) and set(map(bytes, everything)) == set(map(bytes, spectra.reshape(-1, 56)))

    quantizer = Quantizer(num_subspaces=8, seed=0).fit(samples[0])
    paths = [tmp_path / f"{i}" / "train.parquet" for i in range(2)]
    written = [encode_split(store, None, quantizer, shas, path) for store, path in zip(stores, paths)]
    assert written[0] == written[1] == sorted(shas)
    tables = [pq.read_table(path) for path in paths]
    assert tables[0].equals(tables[1]) and tables[0].column("sha256").to_pylist() == sorted(shas)
    groups = [[f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)] for f in map(pq.ParquetFile, paths)]
    assert groups[0] == groups[1] and sum(groups[0]) == 300
    assert os.listdir(paths[0].parent) == ["train.parquet"]                  # no scratch files left behind
    row = sorted(shas).index(shas[5])
    assert np.array_equal(read_codes(paths[0])[row], quantizer.encode(spectra[5]))


def test_module_token_encoder_reads_the_modules_own_autophase(tmp_path):
    """reaction "log-relative+module": the P log-relative rows and one more, log1p of the module's Autophase,
    quantized and read as one more position; the encoder then tells apart modules that react alike."""
    from test_corpus import tiny_programs

    from behavioral_pq.embedding.spectrum import module_row
    from behavioral_pq.training.pretraining import read_codes

    store = tmp_path / "store"
    build_corpus(discover([tiny_programs(tmp_path / "src", 40), EXAMPLES], origin="t"), store, workers=1,
                 labels=False)
    probes_path = random_probes(16, 6, seed=3).save(tmp_path / "probes.json")
    compute_spectra(store, probes_path, workers=1)
    config = PretrainConfig(model={"preset": "tiny"},
                            training=TrainingConfig(batch_size=8, max_steps=4, eval_every=2, log_every=1,
                                                    warmup_steps=1, quantizer_rows=4096))   # the default reaction
    pretrain(store, tmp_path / "run", config, probes=probes_path)
    encoder = load_encoder(tmp_path / "run" / "encoder")
    assert encoder.reaction == "log-relative+module" and encoder.model.config.num_probes == 17
    assert encoder.quantizer.num_subspaces == encoder.model.config.num_subspaces == 14     # the default vocabulary
    assert read_codes(tmp_path / "run" / "codes" / "train.parquet", 14).shape[1:] == (17, 14)

    module = bpq.load_module(EXAMPLES / "matmul.c")
    batch = bpq.spectra([module], encoder.probe_set)
    original = batch.autophase[:, 0]
    codes = encoder.spectra_codes(batch.spectra, original)
    assert codes.shape == (1, 17, 14)
    assert np.array_equal(codes[0, :16], encoder.quantizer.encode(batch.spectra[0]))   # the probes, as always
    assert np.array_equal(codes[0, 16], encoder.quantizer.encode(module_row(original))[0])
    assert np.array_equal(encoder.embed(module), encoder.embed_spectra(batch.spectra, original)[0])
    # the same reactions in a module ten times larger: a log-relative encoder cannot see it, this one does
    bigger = encoder.embed_spectra(batch.spectra, original * 10 + 10)[0]
    assert not np.allclose(bigger, encoder.embed_spectra(batch.spectra, original)[0])
    with pytest.raises(ValueError, match="original Autophase"):
        encoder.embed_spectra(batch.spectra)
    with pytest.raises(ValueError, match=r"shape \(N, 17, 56\)"):
        encoder.codes(batch.spectra)


def test_the_first_encoder_and_its_models_still_load_by_path():
    """pqbert-small-s0 (the paper's M=8, 100 probes, no module row) was the default until 2026-11-25; it stays usable."""
    from behavioral_pq.embedding.encoder import shipped
    from behavioral_pq.tasks.guidance import load_library
    from behavioral_pq.tasks.predictors import load_predictor

    first = load_encoder(shipped("pqbert-small-s0"))
    assert first.reaction == "log-relative" and first.probe_set.num_probes == 100 and first.dim == 256
    assert first.dim != load_encoder().dim
    module = bpq.load_module(EXAMPLES / "sum_array.c")
    vector = first.embed(module)
    assert vector.shape == (256,) and np.isfinite(vector).all()
    oz = load_predictor(shipped("pqbert-small-s0-oz"), encoder=first)
    assert 0.0 < bpq.predict_oz_benefit(module, predictor=oz) < 1.0
    assert len(load_library(shipped("pqbert-small-s0-library"), encoder=first).programs) == 1200
    with pytest.raises(Exception, match="trained on encoder"):      # and never on top of the new default
        load_predictor(shipped("pqbert-small-s0-oz"))


@pytest.mark.slow
def test_default_encoder_embeds_from_a_fresh_process_via_the_cli(tmp_path):
    out = tmp_path / "e.npy"
    run = subprocess.run([sys.executable, "-m", "behavioral_pq", "embed", str(EXAMPLES / "sum_array.c"),
                          str(EXAMPLES / "matmul.c"), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    vectors = np.load(out)
    assert vectors.shape == (2, load_encoder().dim) and np.isfinite(vectors).all()
    assert np.array_equal(vectors[0], bpq.embed(EXAMPLES / "sum_array.c"))
    text = subprocess.run([sys.executable, "-m", "behavioral_pq", "embed", "--json", str(EXAMPLES / "matmul.c")],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and json.loads(text.stdout)[0]["embedding"] == pytest.approx(vectors[1].tolist())
    bad = subprocess.run([sys.executable, "-m", "behavioral_pq", "embed", str(tmp_path / "none.ll")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "none.ll" in bad.stderr and "Traceback" not in bad.stderr
