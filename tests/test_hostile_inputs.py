"""Hostile inputs, second campaign (issue 41): each probe of the campaign, refused with a typed error, at once."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import behavioral_pq as bpq

REPO = Path(__file__).resolve().parent.parent
CHECKPOINTS = REPO / "checkpoints"


# -- artifacts: bounded, typed reads -------------------------------------------------------------------------------
# Every file read from an artifact or a user is a regular file of bounded size and (JSON) bounded depth; weights are
# checked against the model config before anything is allocated; refusals never quote the refused file.

from behavioral_pq.artifacts import file_checksums, seal  # noqa: E402
from behavioral_pq.config import load_toml  # noqa: E402
from behavioral_pq.embedding.checkpoint import load_checkpoint  # noqa: E402
from behavioral_pq.embedding.probes import MAX_PROBE_LENGTH, MAX_PROBES, ProbeSet, load_probes  # noqa: E402
from behavioral_pq.embedding.quantizer import Quantizer  # noqa: E402
from behavioral_pq.errors import (  # noqa: E402
    CheckpointError,
    ConfigError,
    InvalidIRError,
    LibraryError,
    ProbeSetError,
    QuantizerError,
)
from behavioral_pq.tasks.estimators import BestPassClassifier  # noqa: E402
from behavioral_pq.tasks.guidance.library import load_library  # noqa: E402

ENCODER = CHECKPOINTS / "pqbert-small-m14-s0"
LIBRARY = CHECKPOINTS / "pqbert-small-m14-s0-library"
BEST_PASS = CHECKPOINTS / "pqbert-small-m14-s0-best-pass"
SECRET = "SECRET-4f1c9e hunter2 root:$6$salt$hash"
DEEP_JSON = "[" * 200_000 + "]" * 200_000


def artifact_copy(tmp_path: Path, source: Path = ENCODER) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def replace_with(path: Path, target) -> Path:
    """``path`` made a symlink to ``target`` (a device, a pseudo-file), as a hostile folder would ship it."""
    path.unlink()
    path.symlink_to(target)
    return path


def reseal_checkpoint(folder: Path, change=lambda config: None) -> None:
    """Apply ``change`` to config.json, then recompute its file checksums and digest: a checkpoint that passes every
    integrity check, as one made (or remade) by a hostile author would."""
    config = json.loads((folder / "config.json").read_text())
    change(config)
    config["files"] = file_checksums(folder, config["files"])
    (folder / "config.json").write_text(json.dumps(seal(config)))


@pytest.mark.timeout(20)
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_checkpoint_config_that_is_a_device_or_a_fifo_is_refused_at_once(tmp_path, target):
    folder = artifact_copy(tmp_path)
    if target == "fifo":
        (folder / "config.json").unlink()
        os.mkfifo(folder / "config.json")
    else:
        replace_with(folder / "config.json", target)
    kind = "a FIFO" if target == "fifo" else "a character device"   # refused by type, never opened for reading
    with pytest.raises(CheckpointError, match=f"config.json: unreadable checkpoint config .not a regular file: {kind}"):
        load_checkpoint(folder)


@pytest.mark.timeout(20)
def test_a_library_listing_that_is_dev_zero_is_refused_at_once(tmp_path):
    folder = artifact_copy(tmp_path, LIBRARY)
    replace_with(folder / "library.json", "/dev/zero")
    with pytest.raises(LibraryError, match="library.json: unreadable .* \\(not a regular file: a character device"):
        load_library(folder)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/pagemap", "fifo"])
def test_a_probe_set_that_is_not_a_plain_file_is_refused_at_once(tmp_path, target):
    if target == "fifo":
        target = tmp_path / "probes.json"
        os.mkfifo(target)
    with pytest.raises(ProbeSetError, match="unreadable probe set"):
        load_probes(target)


@pytest.mark.timeout(20)
def test_weights_linked_to_a_pseudo_file_outside_the_folder_are_refused(tmp_path):
    folder = artifact_copy(tmp_path)
    replace_with(folder / "model.safetensors", "/proc/self/pagemap")
    with pytest.raises(CheckpointError, match="'model.safetensors' leads outside the folder"):
        load_checkpoint(folder)


def test_checkpoint_files_are_confined_to_their_folder(tmp_path):
    """A probes.json linked to an identical file elsewhere passes its checksum, and is still refused: a hostile
    checkpoint must not make the library read files outside it."""
    folder = artifact_copy(tmp_path)
    outside = tmp_path / "elsewhere.json"
    shutil.copy(folder / "probes.json", outside)
    replace_with(folder / "probes.json", outside)
    with pytest.raises(CheckpointError, match="'probes.json' leads outside the folder"):
        load_checkpoint(folder)


@pytest.mark.timeout(20)
def test_a_toml_config_or_an_ir_file_read_from_proc_is_refused_at_once():
    with pytest.raises(ConfigError, match="unreadable configuration file"):
        load_toml("/proc/self/pagemap")
    with pytest.raises(InvalidIRError, match="unreadable IR file"):
        bpq.load_module("/proc/self/pagemap")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change, mismatch", [
    (lambda model: model.update(intermediate_size=1 << 40), r"linear1.weight: \(512, 224\) in the weights, "
                                                            r"\(1099511627776, 224\) by the config"),
    (lambda model: model.update(num_hidden_layers=10 ** 9), "1000000000 layers and 14 sub-spaces in the config, "
                                                            "70 tensors in the weights"),
    (lambda model: model.update(sub_embedding_size=1 << 20), r"cls_embedding: \(224,\) in the weights, "
                                                             r"\(14680064,\) by the config"),
])
def test_a_resealed_config_naming_a_huge_model_is_refused_before_it_is_built(tmp_path, change, mismatch):
    folder = artifact_copy(tmp_path)
    reseal_checkpoint(folder, lambda config: change(config["model"]))
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=f"model.safetensors: weights do not fit the model config .*{mismatch}"):
        load_checkpoint(folder)
    assert time.monotonic() - start < 20


def test_weights_that_are_not_finite_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = artifact_copy(tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    weights["final_norm.weight"][3] = float("nan")
    save_file(weights, str(folder / "model.safetensors"))
    reseal_checkpoint(folder)
    with pytest.raises(CheckpointError, match="tensor final_norm.weight holds NaN or infinite values"):
        load_checkpoint(folder)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_quantizer_centroids_that_are_not_finite_are_refused(tmp_path, value):
    quantizer = Quantizer.load(ENCODER / "quantizer.npz")
    quantizer.centroids_ = quantizer.centroids_.copy()
    quantizer.centroids_[2, 17, 0] = value
    quantizer.save(tmp_path / "quantizer.npz")          # with the checksum of its (poisoned) centroids
    with pytest.raises(QuantizerError, match="centroids hold NaN or infinite values"):
        Quantizer.load(tmp_path / "quantizer.npz")


def test_a_quantizer_whose_array_header_claims_a_huge_shape_is_refused_before_allocating(tmp_path):
    import io
    import zipfile

    header = np.frombuffer(json.dumps({"format": "bpq-quantizer", "version": 1}).encode(), np.uint8)
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    npy.write(b"\0" * 64)
    with zipfile.ZipFile(tmp_path / "quantizer.npz", "w") as archive:
        archive.writestr("centroids.npy", npy.getvalue())
        buffer = io.BytesIO()
        np.save(buffer, header)
        archive.writestr("header.npy", buffer.getvalue())
    with pytest.raises(QuantizerError, match=r"centroids.npy claims float32 \(1099511627776,\)"):
        Quantizer.load(tmp_path / "quantizer.npz")


def test_an_estimator_config_naming_a_huge_net_is_refused_before_it_is_built(tmp_path):
    folder = artifact_copy(tmp_path, BEST_PASS)
    meta = json.loads((folder / "estimator.json").read_text())
    meta["settings"]["hidden"] = 1 << 40
    (folder / "estimator.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"net.0.weight: \(\d+, 224\) in the weights, \(1099511627776, 224\)"):
        BestPassClassifier.load(folder)


@pytest.mark.timeout(20)
def test_json_nested_200k_deep_is_a_typed_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text(DEEP_JSON)
    with pytest.raises(ProbeSetError, match="JSON nested deeper than 100 levels"):
        load_probes(path)
    folder = artifact_copy(tmp_path)
    (folder / "config.json").write_text(DEEP_JSON)
    with pytest.raises(CheckpointError, match="JSON nested deeper than 100 levels"):
        load_checkpoint(folder)
    library = artifact_copy(tmp_path, LIBRARY)
    (library / "library.json").write_text(DEEP_JSON)
    with pytest.raises(LibraryError, match="JSON nested deeper than 100 levels"):
        load_library(library)
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 200_000)
    with pytest.raises(ConfigError, match="nested too deep"):
        load_toml(path)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("sequences, message", [
    ([["-sroa"]] * 10 ** 6, f"1000000 probes, more than the {MAX_PROBES} a probe set may hold"),
    ([["-sroa"]] * 3 + [["-sroa"] * 10 ** 5], f"probe 3 has 100000 passes, more than the {MAX_PROBE_LENGTH}"),
])
def test_an_absurd_probe_set_is_refused_fast(tmp_path, sequences, message):
    path = tmp_path / "probes.json"
    path.write_text(json.dumps({"format_version": 1, "name": "absurd", "llvm_major": 19, "sequences": sequences}))
    start = time.monotonic()
    with pytest.raises(ProbeSetError, match=message):
        load_probes(path)
    assert time.monotonic() - start < 15       # parsing 11 MB of JSON: about 3 s on a busy 2-core machine
    with pytest.raises(ProbeSetError, match=message.split(",")[1].strip()):
        ProbeSet("absurd", tuple(tuple(s) for s in sequences))


def test_the_shipped_probe_sets_are_within_the_caps():
    from behavioral_pq.embedding.probes import shipped_probe_sets

    for name in shipped_probe_sets():
        probes = load_probes(name)
        assert probes.num_probes <= 100 <= MAX_PROBES and probes.length <= 50 <= MAX_PROBE_LENGTH


@pytest.mark.timeout(60)
def test_a_benchmark_or_module_that_is_not_ir_is_refused_without_quoting_it(tmp_path):
    from behavioral_pq.env.llvm import make

    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\nsecond line\n")
    env = make("llvm-v0", benchmark=str(secret))
    with pytest.raises(InvalidIRError) as refused:
        env.reset()
    message = str(refused.value)
    assert "shadow:1:1: error: expected top-level entity" in message and "SECRET" not in message
    assert "\n" not in message
    for source in (secret, secret.read_bytes()):
        with pytest.raises(InvalidIRError) as refused:
            bpq.load_module(source)
        assert "expected top-level entity" in str(refused.value) and "SECRET" not in str(refused.value)


def test_artifact_refusals_never_quote_the_refused_file(tmp_path):
    folder = artifact_copy(tmp_path)
    (folder / "config.json").write_text(SECRET + "\n")
    path = tmp_path / "probes.json"
    path.write_bytes(SECRET.encode() + b"\xff\n")
    toml = tmp_path / "settings.toml"
    toml.write_text(SECRET + "\n")
    for load, source, error in ((load_checkpoint, folder, CheckpointError), (load_probes, path, ProbeSetError),
                                (load_toml, toml, ConfigError)):
        with pytest.raises(error) as refused:
            load(source)
        assert str(source) in str(refused.value) and "SECRET" not in str(refused.value)
