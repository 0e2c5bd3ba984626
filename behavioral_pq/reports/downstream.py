"""``bpq evaluate``: every downstream task on every representation, over several seeds, as one report.

Tasks (DESIGN.md section 9):

- ``task1`` (the paper's): best pass of a module as built, 124-way, set-valued; Top-1 / Top-5. Near-trivial on
  LLVM 19 (``-sroa``/``-mem2reg`` win most modules), so it is always shown next to the prior.
- ``task1b`` (the one that matters for guidance): best *next* pass from intermediate states, 125-way (the extra
  class: no pass reduces the count); Top-1 / Top-5 and *capture* (the share of the best single pass's reduction
  that the predicted pass achieves, :func:`~behavioral_pq.tasks.estimators.capture`); splits by program.
- ``oz``: -Oz benefit ``(IC0 - IC_Oz) / IC0``; MAE in percentage points.
- ``knn``: Top-1 of a 5-NN vote in each representation's space (task1b, and task1).

Representations: the prior (no input), Autophase, InstCount, the raw spectrum flattened (P x 56), the raw spectrum
with Autophase, IR2Vec (with ``ir2vec``: the optional extra, :mod:`behavioral_pq.tasks.ir2vec`), inst2vec (with
``inst2vec``: the mean of the statements' embeddings, :mod:`behavioral_pq.core.inst2vec`; its data installed by
``python scripts/inst2vec_data.py``), ProGraML (with ``programl``: statistics of each module's ProGraML graph,
counts of nodes, edges, opcodes, degrees and operand positions, no GNN; :mod:`behavioral_pq.tasks.programl_features`),
PQ-BERT, and the ablations: no Transformer (the encoder's sub-embeddings mean-pooled over probes), k-means instead of
PQ and absolute instead of log-relative reactions (each an encoder pretrained that way, given with ``--ablation
NAME=DIR``). IR2Vec, inst2vec and ProGraML read the module: a state is replayed from its program and prefix, and an
item one of them cannot read counts as a zero vector in it (the report counts them).

Every MLP is trained on the train split, stopped early on valid and scored on test, once per seed; the report
gives mean and standard deviation over seeds, per-pass precision/recall and a confusion table for the most
frequent passes, the targets with their margins, and a t-SNE picture of the test embeddings.

Next to the MLPs, the **linear probe**: the same simple head on every representation (logistic regression for
the best-pass tasks, ridge for -Oz benefit, on standardized inputs; :class:`~behavioral_pq.tasks.estimators.
LinearBestPassProbe`), its one regularization hyperparameter chosen by 3-fold cross-validation over the programs
of train and valid together, refit on them and scored on test once (it is deterministic). A representation that
wins only with the MLP wins by its head's tuning.

To *choose* between encoders without reading test, score on valid (``score_split="valid"``): the heads then stop
early on a held-out eighth of the train programs (chosen by a hash of the program, so modules and their states
agree) and the test split is not read at all. Keys of the report keep the name "test" for the scored split.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.artifacts import versions, write_json_atomic, write_text_atomic
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.inst2vec import EMBEDDING_DIM as INST2VEC_DIM
from behavioral_pq.core.inst2vec import Vocabulary, load_vocabulary, preprocess_ir
from behavioral_pq.core.module import Module
from behavioral_pq.corpus.buckets import slices
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.corpus.states import NO_PASS, NUM_CLASSES, read_states, replay
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.reports.plotting import pyplot, save_figure
from behavioral_pq.tasks.datasets import ItemSet, embeddings, module_items, state_items
from behavioral_pq.tasks.estimators import (
    BestPassClassifier,
    OzBenefitRegressor,
    PriorClassifier,
    PriorRegressor,
    LinearBestPassProbe,
    LinearOzProbe,
    TrainSettings,
    capture,
    class_frequencies,
    knn_top1,
    top_k_accuracy,
)
from behavioral_pq.tasks.ir2vec import IR2VEC_DIM, ir2vec_vectors
from behavioral_pq.tasks.programl_features import (
    PROGRAML_DIM,
    PROGRAML_FEATURES,
    PROGRAML_INSTRUCTION_LIMIT,
    programl_vectors,
)

BASELINES = ("prior", "autophase", "instcount", "raw-spectrum", "spectrum+autophase", "ir2vec", "inst2vec",
             "programl")
ABLATIONS = ("no-transformer", "kmeans", "absolute")
MAIN = "pqbert"
#: Which programs the heads learn from: every program of the train and valid splits, or one kind of them (the
#: test split is always scored whole). ``"small"`` measures what a model that never saw a real program does on
#: real programs, next to one that did, on the same test items.
TRAIN_ON = ("all", "small", "real")
#: The split the heads are scored on: test (the report's numbers), or valid (choosing an encoder or a setting
#: without reading test; the heads then stop early on EARLY_STOP_SHARE of the train programs).
SCORE_SPLITS = ("test", "valid")
EARLY_STOP_SHARE = 8
#: Longest module text (characters) inst2vec reads: its statements are cut and normalized by regular expressions in
#: Python (about 0.2 to 0.4 million characters a second), so a longer module gets a zero row and counts as failed
#: instead of holding the evaluation for minutes.
INST2VEC_TEXT_LIMIT = 8 << 20


@dataclass
class EvaluationConfig:
    """Settings of an evaluation run (saved in the report)."""

    seeds: Tuple[int, ...] = (0, 1, 2)
    knn_k: int = 5
    tsne_points: int = 1500
    confusion_passes: int = 10
    train_on: str = "all"
    score_split: str = "test"
    linear_probe: bool = True
    ir2vec: bool = False
    inst2vec: bool = False
    programl: bool = False
    train: TrainSettings = field(default_factory=TrainSettings)

    def __post_init__(self):
        if self.train_on not in TRAIN_ON:
            raise ValueError(f"train_on must be one of {', '.join(TRAIN_ON)}, got {self.train_on!r}")
        if self.score_split not in SCORE_SPLITS:
            raise ValueError(f"score_split must be one of {', '.join(SCORE_SPLITS)}, got {self.score_split!r}")


# -- representations -------------------------------------------------------------------------------------------

def no_transformer_embeddings(items: ItemSet, encoder) -> np.ndarray:
    """Ablation: the encoder's sub-embeddings of each probe's codes, concatenated (M x sub-size) and mean-pooled
    over the P probes, without the Transformer: float32 (N, D). For an encoder that reads the spectrum, the mean of
    its projected rows."""
    import torch

    if encoder.reads_spectrum:
        rows = encoder.reaction_rows(items.spectra, items.autophase) if len(items) else np.zeros(
            (0, encoder.model.config.num_probes, 56), np.float32)
        with torch.inference_mode():
            return encoder.model.input_states(torch.from_numpy(rows)).mean(dim=1).numpy().astype(np.float32)
    codes = (encoder.spectra_codes(items.spectra, items.autophase) if len(items)
             else np.zeros((0, 1, encoder.quantizer.num_subspaces)))
    tables = encoder.model.sub_embeddings
    with torch.inference_mode():
        x = torch.from_numpy(codes.astype(np.int64))                                       # (N, P, M)
        parts = [tables[m](x[..., m]) for m in range(x.shape[-1])]                          # M x (N, P, sub)
        return torch.cat(parts, dim=-1).mean(dim=1).numpy().astype(np.float32)


def item_modules(store: Union[str, os.PathLike], items: ItemSet,
                 states: Optional[Union[str, os.PathLike]] = None) -> List[Module]:
    """The module of each item: modules are read from the store; with ``states`` (the items' state folder) each
    state is its program's module after its prefix, replayed."""
    if not len(items):
        return []
    modules = {m.sha256: m for m in Corpus(store).iter_modules(only=set(items.groups))}
    if states is None:
        return [modules[i] for i in items.ids]
    table = read_states(states, ["program", "state", "prefix"]).to_pydict()
    prefixes = {f"{p}:{s}": prefix for p, s, prefix in zip(table["program"], table["state"], table["prefix"])}
    return [replay(modules[g], prefixes[i]) for i, g in zip(items.ids, items.groups)]


def item_texts(store: Union[str, os.PathLike], items: ItemSet,
               states: Optional[Union[str, os.PathLike]] = None) -> List[str]:
    """The IR text of each item's module (:func:`item_modules`)."""
    return [m.text() for m in item_modules(store, items, states)]


def ir2vec_of_items(store: Union[str, os.PathLike], items: ItemSet,
                    states: Optional[Union[str, os.PathLike]] = None, *,
                    texts: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, int]:
    """IR2Vec vectors of the items, float32 (N, 300), and how many could not be read (their rows are zero); the
    items' IR is :func:`item_texts`' (or ``texts``, when already read)."""
    texts = item_texts(store, items, states) if texts is None else texts
    if not len(texts):
        return np.zeros((0, IR2VEC_DIM), np.float32), 0
    vectors, errors = ir2vec_vectors(texts)
    failed = [i for i, e in enumerate(errors) if e is not None]
    vectors[failed] = 0.0
    return vectors, len(failed)


def inst2vec_of_texts(texts: Sequence[str], vocabulary: Optional[Vocabulary] = None
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """inst2vec vectors of IR texts and their ``!UNK`` shares: (float32 (N, 200), float64 (N,)). A vector is the
    mean of the embeddings of the module's statements (:func:`~behavioral_pq.core.inst2vec.inst2vec_mean`, typed
    pointers looked up by their opaque form), its share the fraction of those statements that are ``!UNK``
    (:func:`~behavioral_pq.core.inst2vec.unknown_share`). A text longer than :data:`INST2VEC_TEXT_LIMIT` characters
    or that cannot be cut into statements gets a zero row and a NaN share.

    Raises:
        CheckpointError: inst2vec's data are not installed (the message names the command that installs them).
    """
    vocabulary = vocabulary or load_vocabulary()
    vectors = np.zeros((len(texts), INST2VEC_DIM), np.float32)
    shares = np.full(len(texts), np.nan)
    for i, text in enumerate(texts):
        if len(text) > INST2VEC_TEXT_LIMIT:
            continue
        try:
            rows = np.array([vocabulary.index(s) for s in preprocess_ir(text)], np.int64)
        except (ValueError, RecursionError):
            continue
        if len(rows):
            vectors[i] = vocabulary.embeddings[rows].mean(axis=0, dtype=np.float64)
        shares[i] = float(np.mean(rows == vocabulary.unknown)) if len(rows) else 0.0
    return vectors, shares


def inst2vec_of_items(store: Union[str, os.PathLike], items: ItemSet,
                      states: Optional[Union[str, os.PathLike]] = None, *,
                      texts: Optional[Sequence[str]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`inst2vec_of_texts` of the items' IR (:func:`item_texts`', or ``texts`` when already read): float32
    (N, 200) vectors and float64 (N,) ``!UNK`` shares, NaN (and a zero row) where an item could not be read."""
    return inst2vec_of_texts(item_texts(store, items, states) if texts is None else texts)


def programl_of_items(store: Union[str, os.PathLike], items: ItemSet,
                      states: Optional[Union[str, os.PathLike]] = None, *,
                      modules: Optional[Sequence[Module]] = None) -> Tuple[np.ndarray, int]:
    """ProGraML graph statistics of the items (:func:`~behavioral_pq.tasks.programl_features.programl_vectors`),
    float32 (N, PROGRAML_DIM), and how many could not be read (over the instruction limit, or no graph; their rows
    are zero); the items' modules are :func:`item_modules`' (or ``modules``, when already read)."""
    modules = item_modules(store, items, states) if modules is None else modules
    vectors, errors = programl_vectors(modules)
    return vectors, sum(e is not None for e in errors)


def _read_baselines(store, parts: Dict[str, ItemSet], states, config: EvaluationConfig, what: str,
                    report: dict, shares: Dict[str, List[np.ndarray]], say) -> Dict[str, Dict[str, np.ndarray]]:
    """The baselines that read the module (IR2Vec, inst2vec, ProGraML) of each part, split -> name -> float32
    (N, D); their failures counted in ``report["items"]`` under "``what`` split", inst2vec's ``!UNK`` shares of the
    items appended to ``shares[what]``. Each item's module is read (or replayed) once for all, its IR printed once
    for IR2Vec and inst2vec."""
    extra: Dict[str, Dict[str, np.ndarray]] = {split: {} for split in parts}
    if not (config.ir2vec or config.inst2vec or config.programl):
        return extra
    for split, part in parts.items():
        say(f"reading {what} {split}" + (" (replayed)" if states is not None else ""))
        modules = item_modules(store, part, states)
        texts = [m.text() for m in modules] if config.ir2vec or config.inst2vec else []
        if config.ir2vec:
            say(f"IR2Vec vectors of {what} {split}")
            extra[split]["ir2vec"], failed = ir2vec_of_items(store, part, texts=texts)
            report["items"].setdefault("ir2vec_failed", {})[f"{what} {split}"] = failed
        if config.inst2vec:
            say(f"inst2vec vectors of {what} {split}")
            extra[split]["inst2vec"], unknown = inst2vec_of_items(store, part, texts=texts)
            report["items"].setdefault("inst2vec_failed", {})[f"{what} {split}"] = int(np.isnan(unknown).sum())
            shares.setdefault(what, []).append(unknown)
        if config.programl:
            say(f"ProGraML graph statistics of {what} {split}")
            extra[split]["programl"], failed = programl_of_items(store, part, modules=modules)
            report["items"].setdefault("programl_failed", {})[f"{what} {split}"] = failed
    return extra


def baseline_representations(items: ItemSet) -> Dict[str, np.ndarray]:
    """The baselines that need no encoder: name -> float32 (N, D_name): the prior (no input), log1p of the
    module's Autophase and InstCount counts, the raw spectrum flattened (P x 56) and it followed by Autophase."""
    n = len(items)
    autophase = np.log1p(np.maximum(items.autophase, 0)).astype(np.float32)
    spectrum = items.spectra.reshape(n, -1).astype(np.float32)
    return {"prior": np.zeros((n, 1), np.float32), "autophase": autophase,
            "instcount": np.log1p(np.maximum(items.instcount, 0)).astype(np.float32),
            "raw-spectrum": spectrum, "spectrum+autophase": np.concatenate([spectrum, autophase], axis=1)}


def representations(items: ItemSet, encoder, ablations: Optional[Dict[str, object]] = None,
                    extra: Optional[Dict[str, np.ndarray]] = None) -> Dict[str, np.ndarray]:
    """Every representation of the items: name -> float32 (N, D_name); ``extra`` adds precomputed ones after the
    baselines (IR2Vec, inst2vec, ProGraML)."""
    reps = {
        **baseline_representations(items),
        **(extra or {}),
        MAIN: embeddings(items, encoder),
        "no-transformer": no_transformer_embeddings(items, encoder),
    }
    for name, other in (ablations or {}).items():
        reps[name] = embeddings(items, other)
    return reps


# -- one task ----------------------------------------------------------------------------------------------------

def _classify(name: str, X: Dict[str, np.ndarray], y: Dict[str, list], num_classes: int, config: EvaluationConfig,
              counts: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> dict:
    """MLP heads (or the prior) over the seeds; ``counts``: (instruction_count (N,), pass_counts (N, 124)) of the
    scored items, to measure capture."""
    runs = []
    for seed in config.seeds:
        if name == "prior":
            model = PriorClassifier(num_classes).fit(X["train"], y["train"])
        else:
            settings = replace(config.train, seed=seed)
            model = BestPassClassifier(settings, num_classes=num_classes)
            model.fit(X["train"], y["train"], X["valid"], y["valid"])
        scores = model.predict_proba(X["test"])
        runs.append({"seed": seed, "top1": top_k_accuracy(scores, y["test"], 1),
                     "top5": top_k_accuracy(scores, y["test"], 5),
                     "best_epoch": getattr(model, "best_epoch_", None), "_scores": scores})
        if counts is not None:
            runs[-1]["capture"] = capture(scores, *counts)
        if name == "prior":
            break   # deterministic: one run stands for every seed
    return _summarize(runs, ("top1", "top5") + (("capture",) if counts is not None else ()))


def _fit_rows(X: Dict[str, np.ndarray], y: Dict[str, list], groups: Dict[str, list]) -> tuple:
    """What the linear probe learns from: the items the heads learn from and stop early on, together."""
    fit_y = list(y["train"]) + list(y["valid"])
    if isinstance(y["train"], np.ndarray):
        fit_y = np.asarray(fit_y, np.float64)
    return np.concatenate([X["train"], X["valid"]]), fit_y, list(groups["train"]) + list(groups["valid"])


def _linear_classify(X: Dict[str, np.ndarray], y: Dict[str, list], groups: Dict[str, list], num_classes: int,
                     counts: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> dict:
    """The linear probe on one representation: Top-1, Top-5 (and capture) on test, the C chosen."""
    probe = LinearBestPassProbe(num_classes).fit(*_fit_rows(X, y, groups))
    scores = probe.predict_proba(X["test"])
    out = {"top1": top_k_accuracy(scores, y["test"], 1), "top5": top_k_accuracy(scores, y["test"], 5),
           "C": probe.chosen_, "cv_top1": max(probe.cv_scores_)}
    if counts is not None:
        out["capture"] = capture(scores, *counts)
    return out


def _linear_regress(X: Dict[str, np.ndarray], y: Dict[str, np.ndarray], groups: Dict[str, list]) -> dict:
    """The linear probe on one representation: -Oz benefit MAE (points) on test, the alpha chosen."""
    probe = LinearOzProbe().fit(*_fit_rows(X, y, groups))
    return {"mae": probe.score(X["test"], y["test"]), "alpha": probe.chosen_, "cv_mae": -max(probe.cv_scores_) * 100}


def _regress(name: str, X: Dict[str, np.ndarray], y: Dict[str, np.ndarray], config: EvaluationConfig) -> dict:
    runs = []
    for seed in config.seeds:
        if name == "prior":
            model = PriorRegressor().fit(X["train"], y["train"])
        else:
            settings = replace(config.train, seed=seed)
            model = OzBenefitRegressor(settings).fit(X["train"], y["train"], X["valid"], y["valid"])
        runs.append({"seed": seed, "mae": model.score(X["test"], y["test"]),
                     "best_epoch": getattr(model, "best_epoch_", None), "_predictions": model.predict(X["test"])})
        if name == "prior":
            break
    return _summarize(runs, ("mae",))


def _summarize(runs: List[dict], metrics: Sequence[str]) -> dict:
    out = {"runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in runs]}
    for m in metrics:
        values = np.array([r[m] for r in runs], np.float64)
        out[m] = {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0}
    for key in ("_scores", "_predictions"):
        if key in runs[0]:
            out[key] = runs[0][key]
    return out


def _held_out(group: str) -> bool:
    """Whether a train program stops the heads early when scoring on valid (1 in EARLY_STOP_SHARE, by hash)."""
    return hashlib.sha256(group.encode()).digest()[0] % EARLY_STOP_SHARE == 0


def head_parts(items: ItemSet, kind_of: Dict[str, str], train_on: str = "all",
               score_split: str = "test") -> Dict[str, ItemSet]:
    """The items the heads learn from ("train"), stop early on ("valid") and are scored on ("test").

    With ``score_split`` "test" these are the store's splits. With "valid" the store's valid split is scored, a
    hashed eighth of the train programs stops early, and the store's test split is not used. With ``train_on``
    "small" or "real", the items learnt from and stopped on keep that kind only; the scored split stays whole.
    """
    if score_split == "valid":
        train = items.split("train")
        held = np.array([_held_out(g) for g in train.groups], bool)
        parts = {"train": train.subset(~held), "valid": train.subset(held), "test": items.split("valid")}
    else:
        parts = {name: items.split(name) for name in ("train", "valid", "test")}
    if train_on != "all":
        for name in ("train", "valid"):
            part = parts[name]
            parts[name] = part.subset(np.array([kind_of.get(g, "small") == train_on for g in part.groups], bool))
    empty = [name for name, part in parts.items() if not len(part)]
    if empty and score_split == "valid" and "valid" in empty:
        raise ValueError(f"no train program fell in the held-out 1/{EARLY_STOP_SHARE} that stops the heads early "
                         "when scoring on valid: the train split is too small for --score-split valid")
    if empty:
        raise ValueError(f"no {', '.join(empty)} items: the corpus must be split (bpq corpus split) and hold "
                         "labelled modules with spectra in each split"
                         + (f" (of {train_on} programs for train and valid)" if train_on != "all" else ""))
    return parts


# -- the whole evaluation ----------------------------------------------------------------------------------------

def evaluate(store: Union[str, os.PathLike], out: Union[str, os.PathLike], *,
             states: Optional[Union[str, os.PathLike]] = None, encoder=None,
             ablations: Optional[Dict[str, Union[str, os.PathLike]]] = None,
             config: Optional[EvaluationConfig] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Run every task on every representation and write ``out/report.md``, ``out/report.json`` and figures.

    Args:
        store: a split, labelled corpus store with spectra for the encoder's probe set.
        states: a state folder (:mod:`behavioral_pq.corpus.states`) for task1b; without it task1b is left out.
        encoder: the encoder to judge (default: the shipped one).
        ablations: {"kmeans": DIR, "absolute": DIR}: encoders pretrained as those ablations.
        progress: called with a line of text as each step starts.
    """

    config = config or EvaluationConfig()
    say = progress or (lambda line: None)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    encoder = encoder or load_encoder()
    others = {name: load_encoder(path) for name, path in (ablations or {}).items()}
    for name, other in others.items():
        if other.probe_set.hash != encoder.probe_set.hash:
            raise ValueError(f"ablation {name!r} uses probe set {other.probe_set.name}, the encoder "
                             f"{encoder.probe_set.name}; they must match")
    start = time.perf_counter()
    say("reading labelled modules with spectra")
    kind_of = Corpus(store).program_kinds()
    modules = head_parts(module_items(store, encoder.probe_set), kind_of, config.train_on, config.score_split)
    report: dict = {"store": str(Path(store).resolve()), "states": str(Path(states).resolve()) if states else None,
                    "encoder": {"path": str(encoder.path), "pooling": encoder.pooling,
                                "model_sha256": encoder.config.get("files", {}).get("model.safetensors"),
                                "corpus": encoder.config.get("corpus")},
                    "ablation_encoders": {k: str(v.path) for k, v in others.items()},
                    "probe_set": {"name": encoder.probe_set.name, "hash": encoder.probe_set.hash},
                    "versions": versions(), "config": {**asdict(config), "seeds": list(config.seeds)},
                    "items": {"modules": {k: len(v) for k, v in modules.items()}}, "tasks": {}}
    if config.inst2vec:
        load_vocabulary()           # before any work: absent data stop the run here, naming the command to get them
    say("representations of modules")
    inst2vec_shares: Dict[str, List[np.ndarray]] = {}
    extra = _read_baselines(store, modules, None, config, "modules", report, inst2vec_shares, say)
    module_reps = {split: representations(part, encoder, others, extra[split]) for split, part in modules.items()}
    names = list(module_reps["train"])
    report["representations"] = {name: int(module_reps["train"][name].shape[1]) for name in names}

    tasks = report["tasks"]
    sets1 = {split: part.best_pass_sets() for split, part in modules.items()}
    tasks["task1"] = _classification_task("task1", names, module_reps, sets1, 124, config, say, modules)
    oz = {split: part.oz_benefit() for split, part in modules.items()}
    module_groups = {split: part.groups for split, part in modules.items()}
    tasks["oz"] = {}
    for name in names:
        say(f"oz: {name}")
        X = {s: module_reps[s][name] for s in modules}
        tasks["oz"][name] = _regress(name, X, oz, config)
        if config.linear_probe and name != "prior":
            tasks["oz"][name]["linear"] = _linear_regress(X, oz, module_groups)
    tasks["oz"]["_test_mean_benefit_points"] = float(oz["test"].mean() * 100)

    figures = {}
    if states is not None:
        say("reading states")
        state_parts = head_parts(state_items(states), kind_of, config.train_on, config.score_split)
        report["items"]["states"] = {k: len(v) for k, v in state_parts.items()}
        report["items"]["state_programs"] = {k: len(set(v.groups)) for k, v in state_parts.items()}
        say("representations of states")
        extra = _read_baselines(store, state_parts, states, config, "states", report, inst2vec_shares, say)
        state_reps = {split: representations(part, encoder, others, extra[split])
                      for split, part in state_parts.items()}
        sets1b = {split: part.next_pass_sets() for split, part in state_parts.items()}
        report["items"]["states_no_pass_fraction"] = {k: float(np.mean([s == [NO_PASS] for s in v]))
                                                      for k, v in sets1b.items()}
        tasks["task1b"] = _classification_task("task1b", names, state_reps, sets1b, NUM_CLASSES, config, say,
                                               state_parts, with_capture=True)
        by_kind = {}
        for kind in sorted(set(state_parts["test"].kinds)):
            mask = np.array([k == kind for k in state_parts["test"].kinds])
            scores = tasks["task1b"][MAIN]["_scores"][mask]
            labels = [s for s, m in zip(sets1b["test"], mask) if m]
            test = state_parts["test"].subset(mask)
            by_kind[kind] = {"items": int(mask.sum()), "top1": top_k_accuracy(scores, labels, 1),
                             "prior_top1": top_k_accuracy(tasks["task1b"]["prior"]["_scores"][mask], labels, 1),
                             "capture": capture(scores, test.instruction_count, test.pass_counts),
                             "prior_capture": capture(tasks["task1b"]["prior"]["_scores"][mask],
                                                      test.instruction_count, test.pass_counts)}
        tasks["task1b"]["_by_kind"] = by_kind
        tasks["task1b"]["_per_pass"] = per_pass_table(tasks["task1b"][MAIN]["_scores"], sets1b["test"],
                                                      class_frequencies(sets1b["train"], NUM_CLASSES),
                                                      config.confusion_passes)
        say("t-SNE")
        figures["tsne"] = tsne_figure(state_reps["test"][MAIN], sets1b["test"], out / "tsne-task1b.png",
                                      config.tsne_points, title=f"PQ-BERT embeddings of {config.score_split} states, "
                                      "coloured by best next pass")
    else:
        say("t-SNE")
        figures["tsne"] = tsne_figure(module_reps["test"][MAIN], sets1["test"], out / "tsne-task1.png",
                                      config.tsne_points, title=f"PQ-BERT embeddings of {config.score_split} modules, "
                                      "coloured by best pass")
    report["slices"] = {"task1": _task_slices(tasks["task1"], names, modules["test"], sets1["test"], kind_of),
                        "oz": _task_slices(tasks["oz"], names, modules["test"], oz["test"], kind_of)}
    if "task1b" in tasks:
        report["slices"]["task1b"] = _task_slices(tasks["task1b"], names, state_parts["test"], sets1b["test"],
                                                  kind_of)
    tasks["task1"]["_per_pass"] = per_pass_table(tasks["task1"][MAIN]["_scores"], sets1["test"],
                                                 class_frequencies(sets1["train"], 124), config.confusion_passes)
    for task in tasks.values():
        for result in task.values():
            if isinstance(result, dict):
                result.pop("_scores", None)
                result.pop("_predictions", None)
    report["figures"] = figures
    if config.inst2vec:
        report["inst2vec"] = _inst2vec_summary(inst2vec_shares)
    if config.programl:
        report["programl"] = {"instruction_limit": PROGRAML_INSTRUCTION_LIMIT, "features": list(PROGRAML_FEATURES)}
    report["targets"] = check_targets(report)
    report["seconds"] = round(time.perf_counter() - start, 1)
    write_json_atomic(out / "report.json", report, indent=2)
    write_text_atomic(out / "report.md", markdown(report))
    return report


def _inst2vec_summary(shares: Dict[str, List[np.ndarray]]) -> dict:
    """The mean ``!UNK`` share of inst2vec's statements over the items it read (each item weighs the same), for
    modules, states and all of them, and the longest text it reads."""
    joined = {what: np.concatenate(parts) for what, parts in shares.items()}
    joined["all"] = np.concatenate(list(joined.values()))
    means = {what: float(np.nanmean(v)) if np.isfinite(v).any() else None for what, v in joined.items()}
    return {"unknown_share": means, "text_limit_chars": INST2VEC_TEXT_LIMIT}


def _task_slices(task: dict, names: Sequence[str], test: ItemSet, labels, kind_of: Dict[str, str]) -> dict:
    """Each representation's seed-0 test score on each slice of the test items (program kind x size bucket, see
    :mod:`behavioral_pq.corpus.buckets`): Top-1 for the classification tasks, MAE in points for -Oz benefit."""
    kinds = [kind_of.get(group, "small") for group in test.groups]
    out = {}
    for name, mask in slices(kinds, test.instruction_count).items():
        row: dict = {"items": int(mask.sum())}
        for rep in names:
            if "_scores" in task[rep]:
                row[rep] = top_k_accuracy(task[rep]["_scores"][mask], [s for s, m in zip(labels, mask) if m], 1)
            else:
                row[rep] = float(np.abs(task[rep]["_predictions"][mask] - labels[mask]).mean() * 100)
        out[name] = row
    return out


def _classification_task(task: str, names: Sequence[str], reps: Dict[str, Dict[str, np.ndarray]],
                         sets: Dict[str, list], num_classes: int, config: EvaluationConfig, say,
                         parts: Dict[str, ItemSet], with_capture: bool = False) -> dict:
    """Every representation's MLP heads, 5-NN and linear probe on one classification task; ``with_capture``:
    also the share of the best pass's reduction the predictions achieve (states)."""
    result: dict = {}
    counts = (parts["test"].instruction_count, parts["test"].pass_counts) if with_capture else None
    groups = {split: part.groups for split, part in parts.items()}
    for name in names:
        say(f"{task}: {name}")
        X = {split: reps[split][name] for split in reps}
        result[name] = _classify(name, X, sets, num_classes, config, counts)
        if name != "prior":
            result[name]["knn_top1"] = knn_top1(X["train"], sets["train"], X["test"], sets["test"],
                                                num_classes=num_classes, k=config.knn_k)
            if config.linear_probe:
                result[name]["linear"] = _linear_classify(X, sets, groups, num_classes, counts)
    result["_label_set_size_mean"] = float(np.mean([len(s) for s in sets["test"]]))
    return result


# -- details ---------------------------------------------------------------------------------------------------

def _pass_name(index: int) -> str:
    return PASSES[index].flag if index < len(PASSES) else "(no pass)"


def per_pass_table(scores: np.ndarray, label_sets: Sequence[Sequence[int]], train_frequency: np.ndarray,
                   top: int) -> dict:
    """Precision / recall of top-1 predictions for the ``top`` passes most often best in training, and a
    confusion table (rows: the most frequent member of the item's label set; columns: predicted pass; the last
    row and column gather the other passes)."""
    predicted = np.argsort(-scores, axis=1, kind="stable")[:, 0]
    passes = [int(i) for i in np.argsort(-train_frequency, kind="stable")[:top]]
    rows = []
    for c in passes:
        holders = np.array([c in s for s in label_sets])
        chosen = predicted == c
        correct = np.array([p in s for p, s in zip(predicted, label_sets)])
        rows.append({"pass": _pass_name(c), "index": c, "test_support": int(holders.sum()),
                     "predicted": int(chosen.sum()),
                     "precision": float(correct[chosen].mean()) if chosen.any() else None,
                     "recall": float((chosen & holders).sum() / holders.sum()) if holders.any() else None})
    position = {c: i for i, c in enumerate(passes)}
    matrix = np.zeros((top + 1, top + 1), np.int64)
    for p, s in zip(predicted, label_sets):
        truth = max(s, key=lambda c: train_frequency[c])
        matrix[position.get(truth, top), position.get(int(p), top)] += 1
    return {"passes": rows, "confusion": {"labels": [_pass_name(c) for c in passes] + ["other"],
                                          "matrix": matrix.tolist()}}


def tsne_figure(X: np.ndarray, label_sets: Sequence[Sequence[int]], path: Path, points: int, title: str) -> str:
    """t-SNE of (at most ``points``) rows of X coloured by the most frequent best pass; writes a PNG."""
    from sklearn.manifold import TSNE

    plt = pyplot()
    rng = np.random.default_rng(0)
    pick = np.sort(rng.permutation(len(X))[:points])
    X, label_sets = X[pick], [label_sets[i] for i in pick]
    frequency = class_frequencies(label_sets, NUM_CLASSES)
    colours = [int(i) for i in np.argsort(-frequency, kind="stable")[:9] if frequency[i] > 0]
    label = np.array([next((c for c in colours if c in s), -1) for s in label_sets])
    xy = TSNE(n_components=2, init="pca", random_state=0, perplexity=min(30.0, max(1.0, (len(X) - 1) / 3))
              ).fit_transform(X.astype(np.float64))
    fig, ax = plt.subplots(figsize=(8, 6.5))
    other = label == -1
    ax.scatter(xy[other, 0], xy[other, 1], s=5, c="lightgrey", label="other")
    cmap = plt.get_cmap("tab10")
    for k, c in enumerate(colours):
        mask = label == c
        ax.scatter(xy[mask, 0], xy[mask, 1], s=6, color=cmap(k), label=f"{_pass_name(c)} ({mask.sum()})")
    ax.set_title(title, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(fontsize=7, markerscale=2, loc="best")
    fig.tight_layout()
    save_figure(fig, path)
    return path.name


# -- targets and the Markdown report -----------------------------------------------------------------------------

def check_targets(report: dict) -> List[dict]:
    """The downstream targets, each with the measured values and whether it is met."""
    tasks, checks = report["tasks"], []
    rep_names = [n for n in report["representations"] if n not in ("prior",) + ABLATIONS]
    baselines = [n for n in BASELINES if n in tasks["task1"]]
    if "task1b" in tasks:
        t = tasks["task1b"]
        for metric in ("top1", "top5"):
            ours = t[MAIN][metric]
            for base in baselines:
                spread = max(ours["std"], t[base][metric]["std"])
                margin = ours["mean"] - t[base][metric]["mean"]
                checks.append({"target": f"task1b {metric}: PQ-BERT above {base} by > 3x seed spread",
                               "value": margin, "needed": 3 * spread, "met": margin > 3 * spread})
        margin = t[MAIN]["top1"]["mean"] - t["autophase"]["top1"]["mean"]
        checks.append({"target": "task1b top1: PQ-BERT >= Autophase + 15 points", "value": margin, "needed": 0.15,
                       "met": margin >= 0.15})
        knn = {n: t[n]["knn_top1"] for n in rep_names}
        best_other = max(v for n, v in knn.items() if n != MAIN)
        checks.append({"target": "task1b k-NN top1: PQ-BERT above every baseline representation",
                       "value": knn[MAIN] - best_other, "needed": 0.0, "met": knn[MAIN] > best_other})
    oz = tasks["oz"]
    checks += _keeps_its_input(tasks)
    checks.append({"target": "oz: MAE <= 6.0 points", "value": oz[MAIN]["mae"]["mean"], "needed": 6.0,
                   "met": oz[MAIN]["mae"]["mean"] <= 6.0})
    checks.append({"target": "oz: MAE <= 1/3 of Autophase's", "value": oz[MAIN]["mae"]["mean"],
                   "needed": oz["autophase"]["mae"]["mean"] / 3,
                   "met": oz[MAIN]["mae"]["mean"] <= oz["autophase"]["mae"]["mean"] / 3})
    return checks


def _keeps_its_input(tasks: dict) -> List[dict]:
    """The targets of an embedding that keeps its input: the frozen embedding no worse than the raw spectrum it is made from (-Oz MAE and states
    Top-1, within one MLP seed spread, under the MLP heads and the linear probe), and ahead of the other
    representations on -Oz by more than three spreads."""
    checks = []
    raw = "raw-spectrum"
    heads = [("MLP", lambda r, m: r[m]["mean"])]
    if "linear" in tasks["oz"][MAIN]:
        heads.append(("linear probe", lambda r, m: r["linear"][m]))
    for head, value in heads:
        t = tasks["oz"]
        spread = max(t[MAIN]["mae"]["std"], t[raw]["mae"]["std"])
        ours, theirs = value(t[MAIN], "mae"), value(t[raw], "mae")
        checks.append({"target": f"oz ({head}): PQ-BERT MAE <= raw spectrum's + one MLP seed spread",
                       "value": ours - theirs, "needed": spread, "met": ours - theirs <= spread})
        if "task1b" in tasks:
            t = tasks["task1b"]
            spread = max(t[MAIN]["top1"]["std"], t[raw]["top1"]["std"])
            ours, theirs = value(t[MAIN], "top1"), value(t[raw], "top1")
            checks.append({"target": f"task1b top1 ({head}): PQ-BERT >= raw spectrum's - one MLP seed spread",
                           "value": ours - theirs, "needed": -spread, "met": ours - theirs >= -spread})
    t = tasks["oz"]
    for base in [n for n in ("autophase", "instcount", "ir2vec", "inst2vec", "programl") if n in t]:
        spread = max(t[MAIN]["mae"]["std"], t[base]["mae"]["std"])
        margin = t[base]["mae"]["mean"] - t[MAIN]["mae"]["mean"]
        checks.append({"target": f"oz: PQ-BERT MAE below {base}'s by > 3x seed spread", "value": margin,
                       "needed": 3 * spread, "met": margin > 3 * spread})
    return checks


def _ms(value: dict, scale: float = 100.0, digits: int = 1) -> str:
    return f"{value['mean'] * scale:.{digits}f} ± {value['std'] * scale:.{digits}f}"


def markdown(report: dict) -> str:
    """The report as Markdown (every number also in report.json)."""
    tasks = report["tasks"]
    names = list(report["representations"])
    kind = {n: ("baseline" if n in BASELINES else "ablation" if n in ABLATIONS else "method") for n in names}
    seeds = report["config"]["seeds"]
    on_valid = report["config"].get("score_split", "test") == "valid"
    protocol = ("trained on seven eighths of the train programs, stopped early on the other eighth and scored on "
                "**valid** (the test split is not read; in this report \"test\" means the scored valid split)"
                if on_valid else "trained on train, stopped early on valid and scored on **test**")
    lines = ["# Downstream evaluation" + (" (scored on valid)" if on_valid else ""), "",
             f"Corpus store `{report['store']}`; probe set {report['probe_set']['name']} "
             f"(`{report['probe_set']['hash'][:12]}`); encoder `{report['encoder']['path']}` "
             f"(pooling {report['encoder']['pooling']}). Seeds {seeds}: each MLP is {protocol}; values are "
             "mean ± standard deviation over seeds (the prior is deterministic). Accuracies and MAE in percentage "
             "points.", "",
             *([f"**Trained on {report['config']['train_on']} programs only**: the items learnt from and stopped "
                "on hold only those; the scored split is whole.", ""]
               if report["config"].get("train_on", "all") != "all" else []),
             "Items: " + ", ".join(f"{what} {counts}" for what, counts in report["items"].items()), "",
             f"Versions: {json.dumps(report['versions'])}", "",
             "The field's baselines: " + ("IR2Vec 2.1.1 (flow-aware program vectors of the IR lowered to LLVM 16 "
                                          "syntax; a module it could not read counts as a zero vector, see Items)"
                                          if "ir2vec" in names else "IR2Vec not run (`bpq evaluate --ir2vec`, the "
                                          "optional extra behavioral-pq[ir2vec])")
             + "; " + _inst2vec_sentence(report, names) + "; " + _programl_sentence(report, names) + ".", ""]
    lines += _linear_lines(tasks, names, kind)
    if "task1b" in tasks:
        t = tasks["task1b"]
        lines += ["## Task 1b: best next pass from intermediate states (the measure that matters)", "",
                  "125 classes (124 passes + \"no pass reduces the count\"); a prediction is correct when it is in "
                  f"the state's best set (mean set size {t['_label_set_size_mean']:.2f}). Capture: the share of the "
                  "best single pass's reduction that the predicted pass achieves (mean over the states where a pass "
                  "reduces the count).", "",
                  "| representation | kind | dims | Top-1 | Top-5 | capture | 5-NN Top-1 | linear Top-1 | linear Top-5 "
                  "| linear capture |", "|---|---|---|---|---|---|---|---|---|---|"]
        for n in names:
            knn = f"{t[n]['knn_top1'] * 100:.1f}" if "knn_top1" in t[n] else "-"
            linear = t[n].get("linear")
            linear_cells = (f"{linear['top1'] * 100:.1f} | {linear['top5'] * 100:.1f} | {linear['capture'] * 100:.1f}"
                            if linear else "- | - | -")
            lines.append(f"| {n} | {kind[n]} | {report['representations'][n]} | {_ms(t[n]['top1'])} | "
                         f"{_ms(t[n]['top5'])} | {_ms(t[n]['capture'])} | {knn} | {linear_cells} |")
        lines += ["", "By kind of state (PQ-BERT seed 0 vs prior): " + "; ".join(
            f"{k}: {v['items']} states, Top-1 {v['top1'] * 100:.1f} vs {v['prior_top1'] * 100:.1f}, capture "
            f"{v['capture'] * 100:.1f} vs {v['prior_capture'] * 100:.1f}" for k, v in t["_by_kind"].items()), ""]
        lines += _per_pass_lines(t["_per_pass"], "task1b")
    t = tasks["task1"]
    lines += ["## Task 1 (the paper's): best pass of the module as built", "",
              "124 classes. Near-trivial on LLVM 19: read it against the prior.", "",
              "| representation | kind | Top-1 | Top-5 | 5-NN Top-1 | linear Top-1 | linear Top-5 |",
              "|---|---|---|---|---|---|---|"]
    for n in names:
        knn = f"{t[n]['knn_top1'] * 100:.1f}" if "knn_top1" in t[n] else "-"
        linear = t[n].get("linear")
        linear_cells = f"{linear['top1'] * 100:.1f} | {linear['top5'] * 100:.1f}" if linear else "- | -"
        lines.append(f"| {n} | {kind[n]} | {_ms(t[n]['top1'])} | {_ms(t[n]['top5'])} | {knn} | {linear_cells} |")
    lines += [""] + _per_pass_lines(t["_per_pass"], "task1")
    oz = tasks["oz"]
    lines += ["## -Oz benefit", "",
              f"Regression of (IC0 - IC_Oz) / IC0 (test mean {oz['_test_mean_benefit_points']:.1f} points).", "",
              "| representation | kind | MAE (points) | linear MAE | ridge alpha |", "|---|---|---|---|---|"]
    for n in names:
        linear = oz[n].get("linear")
        linear_cells = f"{linear['mae']:.2f} | {linear['alpha']:g}" if linear else "- | -"
        lines.append(f"| {n} | {kind[n]} | {_ms(oz[n]['mae'], 1.0, 2)} | {linear_cells} |")
    lines += _slice_lines(report.get("slices", {}), names)
    lines += ["", "## Targets", "", "| target | measured | needed | met |", "|---|---|---|---|"]
    for c in report["targets"]:
        lines.append(f"| {c['target']} | {c['value']:.4f} | {c['needed']:.4f} | {'yes' if c['met'] else '**no**'} |")
    lines += ["", "## Figures", ""] + [f"![{k}]({v})" for k, v in report["figures"].items()]
    lines += ["", f"Run time {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)


def _inst2vec_sentence(report: dict, names: Sequence[str]) -> str:
    """What the report says of inst2vec: how its vectors are made and the share of statements it could not map."""
    if "inst2vec" not in names:
        return ("inst2vec not run (`bpq evaluate --inst2vec`, after `python scripts/inst2vec_data.py` installs its "
                "data)")
    summary = report.get("inst2vec", {})
    share = summary.get("unknown_share", {})
    measured = ", ".join(f"{what} {value * 100:.1f}%" for what, value in share.items() if value is not None)
    limit = summary.get("text_limit_chars", INST2VEC_TEXT_LIMIT)
    return ("inst2vec (the mean of the embeddings of a module's statements, 200 dims, from CompilerGym 0.2.5's "
            "vocabulary of LLVM 3.x statements, normalized by inst2vec's rules; since LLVM 19 writes every pointer as "
            "`ptr`, a statement absent as written is looked up by its opaque form, in which typed pointers are "
            "`ptr` and the newer attributes are gone, and only what matches neither way is !UNK: "
            f"{measured or 'no item read'} of the statements, mean over the evaluated items; a module over "
            f"{limit / (1 << 20):g} MiB of text or that could not be read counts as a zero vector, see Items)")


def _programl_sentence(report: dict, names: Sequence[str]) -> str:
    """What the report says of ProGraML: which statistics of its graphs make the vector, and that no GNN reads them."""
    if "programl" not in names:
        return "ProGraML not run (`bpq evaluate --programl`)"
    limit = report.get("programl", {}).get("instruction_limit", PROGRAML_INSTRUCTION_LIMIT)
    return (f"ProGraML graph statistics ({PROGRAML_DIM} dims, log1p of counts read from each module's ProGraML graph "
            "as this package builds it on LLVM 19: nodes by type, edges by flow, instructions by opcode, mean and "
            "largest in- and out-degree by flow, functions, blocks and data edges by operand position; no graph "
            "neural network is trained, so this row measures what the graph's counts tell, not what a GNN would "
            f"learn from it; a module over {limit:,} instructions or whose graph could not be built counts as a "
            "zero vector, see Items)")


def _linear_lines(tasks: dict, names: Sequence[str], kind: Dict[str, str]) -> List[str]:
    """The linear probe's table: one head for every representation, so that the representations are compared and
    not their heads' tuning (the prior's row is the constant answer)."""
    if not any("linear" in tasks["oz"][n] for n in names):
        return []
    states = "task1b" in tasks
    header = "| representation | kind | -Oz benefit MAE (points) |" + (
        " best next pass Top-1 | Top-5 | capture |" if states else "") + " best pass as built Top-1 |"
    lines = ["## One linear head on every representation", "",
             "Logistic regression (best pass) and ridge (-Oz benefit) on standardized inputs, the one "
             "regularization hyperparameter chosen by 3-fold cross-validation over the programs of the items the "
             "MLPs learn from and stop early on, refit on them, scored once (deterministic).", "",
             header, "|---|---|---:|" + ("---:|---:|---:|" if states else "") + "---:|"]
    for n in names:
        oz, t1 = tasks["oz"][n], tasks["task1"][n]
        if n == "prior":
            cells = [f"{oz['mae']['mean']:.2f}"]
            if states:
                t = tasks["task1b"][n]
                cells += [f"{t['top1']['mean'] * 100:.1f}", f"{t['top5']['mean'] * 100:.1f}",
                          f"{t['capture']['mean'] * 100:.1f}"]
            cells.append(f"{t1['top1']['mean'] * 100:.1f}")
        elif "linear" in oz:
            cells = [f"{oz['linear']['mae']:.2f}"]
            if states:
                t = tasks["task1b"][n]["linear"]
                cells += [f"{t['top1'] * 100:.1f}", f"{t['top5'] * 100:.1f}", f"{t['capture'] * 100:.1f}"]
            cells.append(f"{t1['linear']['top1'] * 100:.1f}")
        else:
            continue
        lines.append(f"| {n} | {kind[n]} | " + " | ".join(cells) + " |")
    return lines + [""]


SLICE_TITLES = {"task1b": "Task 1b Top-1", "task1": "Task 1 Top-1", "oz": "-Oz benefit MAE (points)"}


def _slice_lines(slices_by_task: dict, names: Sequence[str]) -> List[str]:
    """One table per task: rows are slices of the test split (all, sizes, program kinds, kind x size), columns
    the representations (seed 0)."""
    if not slices_by_task:
        return []
    lines = ["", "## By program kind and size", "",
             "Seed 0 on the test split, sliced by program kind (small programs; real programs: units of whole "
             "projects) and by IR instruction count.", ""]
    for task, title in SLICE_TITLES.items():
        if task not in slices_by_task:
            continue
        scale, digits = (1.0, 2) if task == "oz" else (100.0, 1)
        lines += [f"{title}:", "", "| slice | items | " + " | ".join(names) + " |",
                  "|---|---:|" + "---:|" * len(names)]
        for name, row in slices_by_task[task].items():
            lines.append(f"| {name} | {row['items']} | "
                         + " | ".join(f"{row[n] * scale:.{digits}f}" for n in names) + " |")
        lines.append("")
    return lines


def _per_pass_lines(table: dict, task: str) -> List[str]:
    lines = [f"Per pass ({task}, PQ-BERT seed 0, the passes most often best in training):", "",
             "| pass | test support | predicted | precision | recall |", "|---|---|---|---|---|"]
    for row in table["passes"]:
        fmt = lambda v: "-" if v is None else f"{v * 100:.1f}"  # noqa: E731
        lines.append(f"| {row['pass']} | {row['test_support']} | {row['predicted']} | {fmt(row['precision'])} | "
                     f"{fmt(row['recall'])} |")
    labels = table["confusion"]["labels"]
    lines += ["", "Confusion (rows: the most frequent pass of the true set; columns: predicted):", "",
              "| | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for label, row in zip(labels, table["confusion"]["matrix"]):
        lines.append(f"| {label} | " + " | ".join(str(v) for v in row) + " |")
    return lines + [""]


__all__ = ["EvaluationConfig", "evaluate", "representations", "no_transformer_embeddings", "check_targets",
           "markdown", "per_pass_table", "tsne_figure", "item_modules", "item_texts", "ir2vec_of_items",
           "inst2vec_of_items", "inst2vec_of_texts", "programl_of_items"]
