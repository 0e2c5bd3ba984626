"""Encoder checkpoints: one folder that holds everything ``embed`` needs, verified on load.

Layout::

    config.json          format and version; versions of behavioral_pq, LLVM, torch, faiss; model config;
                         pooling; feature names; probe-set name and hash; corpus description; seed; training
                         summary; sha256 of every other file; a digest of its own content
    probes.json          the probe set the spectra are measured with
    quantizer.npz        the product quantizer (see behavioral_pq.embedding.quantizer)
    model.safetensors    PQ-BERT weights (float32, or float16 to keep the file small)

Loading refuses, with a message naming the file: a missing folder or file, a checksum mismatch, a format version
this package does not read, a checkpoint made with another LLVM major version (the spectra would differ), another
feature schema, a probe set whose hash differs from the one recorded, a file that is not a regular file inside the
folder or is over its size cap (behavioral_pq.artifacts), weights whose header does not fit the model config
(checked before the model is built, so a config edited to name a huge model allocates nothing) or that hold more
than MAX_PARAMETERS, and weights that are not finite.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from behavioral_pq.artifacts import (
    CONFIG_LIMIT,
    QUANTIZER_LIMIT,
    WEIGHTS_LIMIT,
    atomic_path,
    check_replaceable,
    check_seal,
    check_shapes,
    confined,
    file_checksums,
    read_bounded,
    read_json_bounded,
    safetensors_header,
    seal,
    sha256_file,
    versions,
)
from behavioral_pq.core._native_loader import LLVM_MAJOR
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.embedding.model import PQBert, PQBertConfig
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.quantizer import Quantizer, QuantizerError
from behavioral_pq.embedding.spectrum import reaction_positions
from behavioral_pq.errors import CheckpointError, ProbeSetError

FORMAT = "bpq-encoder"
FORMAT_VERSION = 1
FILES = ("probes.json", "quantizer.npz", "model.safetensors")
#: Size cap of each file of a checkpoint (behavioral_pq.artifacts: configs, quantizers, weights).
FILE_LIMITS = {"probes.json": CONFIG_LIMIT, "quantizer.npz": QUANTIZER_LIMIT, "model.safetensors": WEIGHTS_LIMIT}
#: The most parameters a checkpoint's model may have: 268M (1 GiB in float32), 150x the shipped encoder's 1.7M.
MAX_PARAMETERS = 1 << 28


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the model (eval mode, float32, CPU), its quantizer and probe set, and config.json."""

    model: object
    quantizer: object
    probe_set: object
    config: dict
    path: Path


def save_encoder(path: Union[str, os.PathLike], model, quantizer, probe_set, *, corpus: dict, seed: int,
                 training: Optional[dict] = None, pooling: str = "mean", dtype: str = "float32",
                 reaction: str = "log-relative", overwrite: bool = False) -> Path:
    """Write an encoder checkpoint folder (replacing an existing one at ``path`` only once complete; a folder
    that holds something else than a checkpoint is refused unless ``overwrite``).

    Args:
        model: a PQBert.
        dtype: "float32" (bit-identical round trip) or "float16" (half the size; loaded back as float32).
        reaction: how the quantizer's rows are expressed (one of spectrum.REACTIONS: "log-relative", "absolute"
            for the ablation, "log-relative+module" with the module's own Autophase as one more position).
    """
    import torch
    from safetensors.torch import save_file

    if dtype not in ("float32", "float16"):
        raise ValueError(f"dtype must be 'float32' or 'float16', got {dtype!r}")
    positions = reaction_positions(probe_set.num_probes, reaction)
    if model.config.num_probes != positions:
        raise ValueError(f"model reads {model.config.num_probes} positions, {reaction} spectra of the probe set "
                         f"have {positions}")
    path = Path(path)
    check_replaceable(path, config="config.json", format=FORMAT, overwrite=overwrite, error=CheckpointError,
                      what="an encoder checkpoint")
    with atomic_path(path) as tmp:
        tmp.mkdir()
        probe_set.save(tmp / "probes.json")
        quantizer.save(tmp / "quantizer.npz")
        weights = {k: v.detach().to("cpu", getattr(torch, dtype)).contiguous()
                   for k, v in model.state_dict().items()}
        save_file(weights, str(tmp / "model.safetensors"))
        os.chmod(tmp / "model.safetensors", 0o644)   # safetensors creates it owner-only
        config = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(), "llvm_major": LLVM_MAJOR,
            "model": model.config.to_dict(), "pooling": pooling, "reaction": reaction, "weights_dtype": dtype,
            "feature_names": list(AUTOPHASE_FEATURES),
            "probe_set": {"name": probe_set.name, "hash": probe_set.hash, "num_probes": probe_set.num_probes},
            "quantizer": {"num_subspaces": quantizer.num_subspaces, "bits": quantizer.bits,
                          "rows_fit": quantizer.num_rows_fit_},
            "corpus": corpus, "seed": seed, "training": training or {},
            "files": file_checksums(tmp, FILES),
        }
        (tmp / "config.json").write_text(json.dumps(seal(config), indent=2) + "\n")
    return path


def read_checkpoint_config(path: Union[str, os.PathLike]) -> dict:
    """config.json of a checkpoint folder, format-checked (no other file is read)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    config_path = path / "config.json"
    if not os.path.lexists(config_path):
        raise CheckpointError(f"{config_path}: missing (not a checkpoint folder?)")
    config = read_json_bounded(config_path, what="checkpoint config", error=CheckpointError)
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"{config_path}: not an encoder checkpoint")
    if config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{config_path}: checkpoint format version {config.get('format_version')} is not "
                              f"supported (this package reads version {FORMAT_VERSION})")
    check_seal(config, config_path, CheckpointError)
    return config


def load_checkpoint(path: Union[str, os.PathLike]) -> Checkpoint:
    """Load and verify a checkpoint folder (see the module docstring for what is checked)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load as load_weights

    path = Path(path)
    config = read_checkpoint_config(path)
    try:
        if config["llvm_major"] != LLVM_MAJOR:
            raise CheckpointError(f"{path}: made with LLVM {config['llvm_major']}, this build uses LLVM "
                                  f"{LLVM_MAJOR}; spectra differ across LLVM versions, so its embeddings would be "
                                  f"meaningless (retrain, or use a build for LLVM {config['llvm_major']})")
        if config["feature_names"] != list(AUTOPHASE_FEATURES):
            raise CheckpointError(f"{path}: made for another Autophase feature schema")
        files = {name: confined(path, name, CheckpointError) for name in FILES}
        for name, file in files.items():
            if not os.path.lexists(file):
                raise CheckpointError(f"{file}: missing")
        weights_file = files["model.safetensors"]
        data = read_bounded(weights_file, limit=WEIGHTS_LIMIT, what="weights file", error=CheckpointError)
        for name, file in files.items():     # the weights are checked on the bytes read, read once
            digest = hashlib.sha256(data).hexdigest() if name == "model.safetensors" else \
                sha256_file(file, limit=FILE_LIMITS[name], error=CheckpointError, what="checkpoint file")
            if digest != config["files"][name]:
                raise CheckpointError(f"{file}: checksum mismatch (corrupt or edited file)")
        try:
            probe_set = load_probes(files["probes.json"])
        except ProbeSetError as exc:
            raise CheckpointError(f"{files['probes.json']}: {exc}") from None
        if probe_set.hash != config["probe_set"]["hash"]:
            raise CheckpointError(f"{files['probes.json']}: probe set {probe_set.hash[:12]} is not the one the "
                                  f"model was trained with ({config['probe_set']['hash'][:12]})")
        try:
            quantizer = Quantizer.load(files["quantizer.npz"])
        except QuantizerError as exc:
            raise CheckpointError(str(exc)) from None
        model_config = PQBertConfig.from_dict(config["model"])
        positions = reaction_positions(probe_set.num_probes, config.get("reaction", "log-relative"))
        if model_config.num_probes != positions or model_config.num_subspaces != quantizer.num_subspaces:
            raise CheckpointError(f"{path}: model config does not fit its probe set or quantizer")
        check_weight_shapes(model_config, safetensors_header(data, origin=weights_file, error=CheckpointError),
                            weights_file)
        try:
            weights = load_weights(data)
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{weights_file}: unreadable ({exc})") from None
        del data
        for name, tensor in weights.items():
            if not torch.isfinite(tensor).all():
                raise CheckpointError(f"{weights_file}: tensor {name} holds NaN or infinite values")
        model = PQBert(model_config)
        model.load_state_dict({k: v.to(torch.float32) for k, v in weights.items()})
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path / 'config.json'}: incomplete ({type(exc).__name__}: {exc})") from None
    model.eval()
    return Checkpoint(model, quantizer, probe_set, config, path)


def check_weight_shapes(model_config: PQBertConfig, header: dict, file: Path) -> None:
    """Refuse weights whose tensors (``header``: name -> (dtype, shape), see artifacts.safetensors_header) are not
    those of a PQBert of ``model_config``, or a model of more than MAX_PARAMETERS, before anything is allocated:
    the expected shapes come from a model built on torch's meta device (no storage), and the counts that decide
    how many modules it has are first bounded by the number of tensors in the file."""
    import torch

    layers, subspaces = model_config.num_hidden_layers, model_config.num_subspaces
    if layers + subspaces > len(header):
        raise CheckpointError(f"{file}: weights do not fit the model config ({layers} layers and {subspaces} "
                              f"sub-spaces in the config, {len(header)} tensors in the weights)")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in PQBert(model_config).state_dict().items()}
    check_shapes(expected, header, origin=file, error=CheckpointError)
    parameters = sum(_count(shape) for shape in expected.values())
    if parameters > MAX_PARAMETERS:
        raise CheckpointError(f"{file}: a model of {parameters} parameters, more than the {MAX_PARAMETERS} this "
                              "package loads")


def _count(shape: tuple) -> int:
    count = 1
    for x in shape:
        count *= x
    return count
