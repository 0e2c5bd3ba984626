"""A behavior model: how a module reacts to a pipeline, including pipelines it was never probed with.

Two towers meet in one small head. The **module tower** reads what is known of a module before any search (one of
:data:`TOWERS`: PQ-BERT over the spectrum's codes, initialized from the shipped encoder; an MLP on the raw spectrum
and Autophase row; an MLP on the count tail, the 8 count reactions of each probe; an MLP on Autophase; or nothing,
which makes the model a global ranking). The **pipeline tower** reads a pipeline as tokens (whole-pipeline steps
such as -Oz, and catalog passes) with learned positions, through a small Transformer, so order matters and a
pipeline it never saw gets a score. The head reads ``[m, p, m * p]`` and predicts the gain
``log(value_Oz / value)`` of the objective (:func:`~behavioral_pq.tasks.guidance.ranker.gains_matrix`).

Training data are the rows ``bpq ranker measure`` writes (every pool pipeline on each train module). The model is
judged on modules and pipelines it did not train on: per-module rank correlation of predicted and measured gains,
and the best gain among the budget pipelines it chooses (:func:`coverage_choice`), against the global ranking.

Shapes: N modules, K pipelines, P probes, L tokens per pipeline (at most :data:`MAX_STEPS`), d the towers' width.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES
from behavioral_pq.corpus.buckets import BUCKET_NAMES, size_buckets
from behavioral_pq.tasks.guidance.library import OZ, Steps, mutate_steps
from behavioral_pq.tasks.guidance.ranker import PipelineRanker, coverage_choice, representation_rows
from behavioral_pq.tasks.guidance.recommend import _local_search
from behavioral_pq.tasks.guidance.trials import Trials
from behavioral_pq.training.behavior_model import (  # noqa: F401  (the model's names, as this module always gave them)
    GAIN_SCALE,
    LENGTH_GROUPS,
    MAX_STEPS,
    PQBERT_OBJECTIVES,
    TOKEN,
    TOWERS,
    VOCABULARY,
    FitResult,
    build_model,
    fit_behavior,
    held_out_columns,
    module_vectors,
    pipeline_tokens,
    predict,
    rank_correlations,
)

logger = logging.getLogger(__name__)


def count_tail(encoder, spectra: np.ndarray, autophase: np.ndarray) -> np.ndarray:
    """The count tail float32 (N, 8 P'): what ``encoder`` under the ``mean+changes`` pooling appends to its
    embedding (the shipped encoder's default), each of its reaction rows' 8 count features
    (:data:`~behavioral_pq.embedding.encoder.COUNT_NAMES`) as relative changes; from log-relative spectra float32
    (N, P, 56) and the modules' Autophase int (N, 56)."""
    rows = encoder.reaction_rows(spectra, autophase)
    return encoder.with_pooling("mean+changes").readout(rows)


@dataclass
class ModuleInputs:
    """What the module towers read, for N modules: log-relative ``spectra`` float32 (N, P, 56), ``autophase``
    int64 (N, 56) before the probes, the encoder's ``codes`` uint8 (N, P', M) of the spectra and their count
    ``tail`` float32 (N, 8 P') (:func:`count_tail`)."""

    shas: List[str]
    spectra: np.ndarray
    autophase: np.ndarray
    codes: Optional[np.ndarray] = None
    tail: Optional[np.ndarray] = None

    def __post_init__(self):
        n = len(self.shas)
        if self.spectra.shape[0] != n or self.autophase.shape != (n, len(AUTOPHASE_FEATURES)):
            raise ValueError(f"module inputs disagree: {n} hashes, spectra {self.spectra.shape}, Autophase "
                             f"{self.autophase.shape}")
        if self.codes is not None and len(self.codes) != n:
            raise ValueError(f"{len(self.codes)} rows of codes for {n} modules")

    def rows(self, tower: str) -> np.ndarray:
        """The tower's input rows: float32 (N, D) for an MLP tower, uint8 codes (N, P, M) for ``pqbert`` (and
        every tower of :data:`PQBERT_OBJECTIVES`), float32 (N, P M + 8 P) codes then count tail for
        ``pqbert+counts``, (N, 0) for ``none``."""
        if tower == "pqbert+counts" or tower in PQBERT_OBJECTIVES:
            if self.codes is None:
                raise ValueError(f"the {tower} tower needs the encoder's codes (ModuleInputs.codes)")
            if tower != "pqbert+counts":
                return self.codes
            if self.tail is None:
                raise ValueError("the pqbert+counts tower needs the count tail (ModuleInputs.tail)")
            return np.concatenate([self.codes.reshape(len(self.codes), -1).astype(np.float32), self.tail], axis=1)
        if tower == "spectrum":
            return representation_rows("spectrum", spectra=self.spectra, autophase=self.autophase)
        if tower == "counts":
            if self.tail is None:
                raise ValueError("the counts tower needs the count tail (ModuleInputs.tail)")
            return self.tail
        if tower == "autophase":
            return representation_rows("autophase", autophase=self.autophase)
        if tower == "none":
            return np.zeros((len(self.shas), 0), np.float32)
        raise ValueError(f"tower must be one of {', '.join(dict.fromkeys(TOWERS + PQBERT_OBJECTIVES))}, "
                         f"got {tower!r}")


def bootstrap_interval(values: np.ndarray, *, draws: int = 2000, seed: int = 0, level: float = 0.95
                       ) -> Tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` float (N,)."""
    values = np.asarray(values, np.float64)
    if len(values) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), (draws, len(values)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(low), float(high)


def best_found(gains: np.ndarray, choices: Sequence[Sequence[int]]) -> np.ndarray:
    """float64 (N,) best gain (at least 0: -Oz is always measured) among each module's chosen columns."""
    return np.array([max(0.0, float(np.max(row[list(c)]))) if len(c) else 0.0 for row, c in zip(gains, choices)])


def summarize(per_module: Dict[str, np.ndarray]) -> Dict[str, float]:
    """Mean, and geometric-mean ratio ``exp(mean)``, of each array of per-module gains."""
    return {name: {"mean_gain": float(np.mean(v)), "ratio": float(np.exp(np.mean(v)))} for name, v in
            per_module.items()}


# ------------------------------------------------------------------------------------------------------ evaluation

#: Search budgets the guidance comparison reports (pipelines compiled per module).
BUDGETS = (5, 10, 50)


def load_inputs(corpus, shas: Sequence[str], encoder) -> ModuleInputs:
    """The module towers' inputs for the modules among ``shas`` whose spectra for ``encoder``'s probe set are in
    ``corpus`` (order of ``shas`` kept; the others left out)."""
    table = corpus.modules(["sha256", "autophase"]).to_pydict()
    by_sha = dict(zip(table["sha256"], table["autophase"]))
    kept, spectra = corpus.spectra(encoder.probe_set, shas=[s for s in shas if s in by_sha])
    autophase = np.array([by_sha[s] for s in kept], np.int64).reshape(-1, len(AUTOPHASE_FEATURES))
    if not kept:
        return ModuleInputs([], np.zeros((0, encoder.probe_set.num_probes, 56), np.float32), autophase)
    return ModuleInputs(list(kept), np.asarray(spectra, np.float32), autophase,
                        encoder.spectra_codes(spectra, autophase), count_tail(encoder, spectra, autophase))


def probe_representations(representations: Dict[str, np.ndarray], target: np.ndarray, train: np.ndarray,
                          test: np.ndarray, buckets: np.ndarray, *, k: int = 5) -> Dict[str, dict]:
    """One simple head per representation, the fair way to judge what a representation holds: a ridge (penalty by
    inner cross-validation) and a k-NN (k=5, standardized, Euclidean) regression of ``target`` float (N,),
    fitted on rows ``train`` and scored on ``test`` (MAE, in ``target``'s units x 100, overall and by bucket)."""
    from sklearn.linear_model import RidgeCV
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.preprocessing import StandardScaler

    out = {}
    for name, x in representations.items():
        x = np.asarray(x, np.float64)
        scaler = StandardScaler().fit(x[train])
        xt, xs = scaler.transform(x[train]), scaler.transform(x[test])
        ridge = RidgeCV(alphas=np.logspace(-2, 5, 15)).fit(xt, target[train])
        knn = KNeighborsRegressor(n_neighbors=k).fit(xt, target[train])
        entry = {"dim": int(x.shape[1])}
        for head, model in (("ridge", ridge), ("knn", knn)):
            err = np.abs(model.predict(xs) - target[test]) * 100
            entry[head] = float(err.mean())
            entry[f"{head}_by_bucket"] = {b: float(err[buckets == b].mean()) for b in dict.fromkeys(buckets)}
        out[name] = entry
    return out


def evaluate_towers(data, corpus, encoder, *, towers: Sequence[str] = TOWERS, held_out: float = 0.2,
                    seed: int = 0, epochs: int = 30, steps_per_epoch: int = 60, budgets: Sequence[int] = BUDGETS,
                    searches: int = 0, device=None, progress: bool = False) -> dict:
    """Fit a behavior model per module tower and compare them, and the rankers, on modules and pipelines they
    did not train on.

    ``data``: :class:`~behavioral_pq.tasks.guidance.ranker.RankerData` measured on modules of ``corpus``'s
    train, valid and test splits. A random ``held_out`` share of the pool's pipelines is never trained on. Each
    tower trains on train modules x the other pipelines and keeps the epoch best on valid modules x held-out
    pipelines; it is then judged, once, on test modules:

    - ``rank``: mean per-module Spearman correlation of predicted and measured gains over the held-out pipelines
      (overall and by size bucket);
    - ``guidance``: at each budget, the best gain found (at least -Oz's 0) among the pool pipelines chosen per
      module (:func:`coverage_choice`, residuals from the valid modules), against the global ranking (a ranker
      without module input fitted on the train modules) and the ridge ranker on the raw spectrum, with a
      bootstrap interval of the per-module difference to the global ranking;
    - ``searches`` > 0: real searches (:func:`compare_searches`) on that many test modules with the tower best on
      valid, against the shipped shape of search (global ranking, then random local search).
    """
    inputs = load_inputs(corpus, data.shas, encoder)
    data = data.subset(inputs.shas)
    gains = data.gains.astype(np.float64)                                          # (N, K)
    index = {s: i for i, s in enumerate(inputs.shas)}
    split = {name: np.array([index[s] for s in corpus.split(name) if s in index], np.int64)
             for name in ("train", "valid", "test")}
    for name, rows in split.items():
        if len(rows) < 2:
            raise ValueError(f"{len(rows)} measured modules with spectra in split {name!r}; need at least 2 "
                             "(measure every split: bpq ranker measure STORE --split NAME --out DATA)")
    k = len(data.pool)
    train_cols, held_cols = held_out_columns(k, seed, held_out)
    tokens = pipeline_tokens(data.pool)
    sizes = corpus.modules(["sha256", "instruction_count"]).to_pydict()
    count_of = dict(zip(sizes["sha256"], sizes["instruction_count"]))
    test = split["test"]
    buckets = np.array(size_buckets([count_of[inputs.shas[i]] for i in test]))
    report = {"modules": {n: int(len(r)) for n, r in split.items()},
              "pipelines": {"pool": k, "train": int(len(train_cols)), "held_out": int(len(held_cols))},
              "buckets": {b: int((buckets == b).sum()) for b in BUCKET_NAMES if (buckets == b).any()},
              "seed": seed, "epochs": epochs, "towers": {}, "guidance": {}}

    def by_bucket(values: np.ndarray) -> Dict[str, float]:
        return {b: float(np.nanmean(values[buckets == b])) for b in report["buckets"]}

    choices: Dict[str, Dict[int, List[List[int]]]] = {}
    learned: Dict[str, np.ndarray] = {}
    fitted: Dict[str, tuple] = {}
    for tower in towers:
        rows = inputs.rows(tower)
        fit = fit_behavior(tower, rows, gains, tokens, train_rows=split["train"], train_cols=train_cols,
                           valid_rows=split["valid"], valid_cols=held_cols, encoder=encoder, epochs=epochs,
                           steps_per_epoch=steps_per_epoch, seed=seed, device=device, progress=progress)
        full_test = predict(fit.model, rows[test], tokens)                           # (T, K)
        rho = rank_correlations(full_test[:, held_cols], gains[np.ix_(test, held_cols)])
        residuals = gains[split["valid"]] - predict(fit.model, rows[split["valid"]], tokens)
        report["towers"][tower] = {
            "test_rho": float(np.nanmean(rho)), "test_rho_by_bucket": by_bucket(rho),
            "valid_rho": float(max(h["valid_rho"] for h in fit.history)), "best_epoch": fit.best_epoch,
            "seconds": round(fit.seconds, 1), "history": fit.history}
        choices[tower] = {b: [coverage_choice(p, residuals, b) for p in full_test] for b in budgets}
        if tower != "none":
            learned[f"behavior {tower}"] = module_vectors(fit.model, rows)
        fitted[tower] = (fit.model, residuals, rows)
        logger.info("tower %s: test rho %.3f", tower, report["towers"][tower]["test_rho"])
    col = {steps: j for j, steps in enumerate(data.pool)}
    train_gains = gains[split["train"]]
    glob = PipelineRanker.fit(np.zeros((len(split["train"]), 0)), train_gains, data.pool, "none", seed=seed)
    spectrum_rows = inputs.rows("spectrum")
    groups = corpus.split_groups()
    ridge = PipelineRanker.fit(spectrum_rows[split["train"]], train_gains, data.pool, "spectrum",
                               groups=[groups.get(inputs.shas[i], inputs.shas[i]) for i in split["train"]],
                               seed=seed)
    choices["global"] = {b: [[col[s] for s in glob.choose(None, b)]] * len(test) for b in budgets}
    choices["ridge-spectrum"] = {b: [[col[s] for s in ridge.choose(spectrum_rows[i], b)] for i in test]
                                 for b in budgets}
    test_gains = gains[test]
    oracle = np.maximum(test_gains.max(axis=1), 0.0)
    for b in budgets:
        found = {name: best_found(test_gains, c[b]) for name, c in choices.items()}
        entry = {name: {"ratio": float(np.exp(v.mean())), "mean_gain": float(v.mean()),
                        "by_bucket": {bk: float(np.exp(v[buckets == bk].mean())) for bk in report["buckets"]}}
                 for name, v in found.items()}
        for name, v in found.items():
            if name != "global":
                diff = v - found["global"]
                entry[name]["vs_global"] = {"mean": float(diff.mean()),
                                            "interval": list(bootstrap_interval(diff, seed=seed))}
        entry["pool-best"] = {"ratio": float(np.exp(oracle.mean())), "mean_gain": float(oracle.mean())}
        report["guidance"][str(b)] = entry
    embedding = encoder.embed_spectra(inputs.spectra, inputs.autophase, batch_size=64)
    hidden = encoder.model.config.hidden_size
    representations = {"autophase": inputs.rows("autophase"), "raw spectrum": inputs.rows("spectrum"),
                       "count tail": inputs.tail, "encoder mean": embedding[:, :hidden],
                       f"shipped embedding ({encoder.pooling})": embedding}
    representations.update(learned)
    ic0 = np.array([max(count_of[s], 1) for s in inputs.shas], np.float64)
    benefit = (ic0 - np.minimum(data.oz.astype(np.float64), ic0 * 10)) / ic0         # (IC0 - IC_Oz) / IC0
    fit_rows = np.concatenate([split["train"], split["valid"]])
    report["oz_benefit_probe"] = probe_representations(representations, benefit, fit_rows, test, buckets)
    if searches > 0:
        chosen = max(report["towers"], key=lambda t: report["towers"][t]["valid_rho"])
        model, residuals, rows = fitted[chosen]
        keep = test[np.sort(np.random.default_rng(seed).permutation(len(test))[:searches])]
        wanted = {inputs.shas[i] for i in keep}
        by_sha = {m.sha256: m for m in corpus.iter_modules(only=wanted)}
        keep = np.array([i for i in keep if inputs.shas[i] in by_sha], np.int64)
        report["searches"] = {"tower": chosen, "modules": int(len(keep)),
                              **compare_searches([by_sha[inputs.shas[i]] for i in keep], rows[keep], model,
                                                 data.pool, residuals, glob, seed=seed, progress=progress)}
    return report


def behavior_markdown(report: dict) -> str:
    """The report of :func:`evaluate_towers` for people."""
    m, p = report["modules"], report["pipelines"]
    lines = [f"Modules: train {m['train']}, valid {m['valid']}, test {m['test']} (split by program group). "
             f"Pipelines: a pool of {p['pool']}, {p['held_out']} held out (never trained on). "
             f"Seed {report['seed']}, at most {report['epochs']} epochs, the epoch kept by valid.", "",
             "### Held-out modules x held-out pipelines: rank correlation (mean per-module Spearman)", ""]
    buckets = list(report["buckets"])
    lines.append("| module tower | valid | test | " + " | ".join(f"test {b} (n={report['buckets'][b]})"
                                                            for b in buckets) + " | train seconds |")
    lines.append("|---|---:|---:|" + "---:|" * len(buckets) + "---:|")
    for tower, r in report["towers"].items():
        lines.append(f"| {tower} | {r['valid_rho']:.3f} | {r['test_rho']:.3f} | "
                     + " | ".join(f"{r['test_rho_by_bucket'][b]:.3f}" for b in buckets) + f" | {r['seconds']:.0f} |")
    lines += ["", "### Guidance on test modules: best IC_Oz / IC found among the budget's picks (geomean)", ""]
    budgets = list(report["guidance"])
    names = [n for n in report["guidance"][budgets[0]] if n != "pool-best"]
    lines.append("| choice | " + " | ".join(f"budget {b}" for b in budgets)
                 + " | " + " | ".join(f"vs global, budget {b} (95% bootstrap)" for b in budgets) + " |")
    lines.append("|---|" + "---:|" * (2 * len(budgets)))
    for name in names:
        cells = [f"{report['guidance'][b][name]['ratio']:.4f}" for b in budgets]
        diffs = []
        for b in budgets:
            v = report["guidance"][b][name].get("vs_global")
            diffs.append("(baseline)" if v is None else
                         f"{v['mean']:+.4f} [{v['interval'][0]:+.4f}, {v['interval'][1]:+.4f}]")
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")
    lines.append("| best in pool | " + " | ".join(f"{report['guidance'][b]['pool-best']['ratio']:.4f}"
                                                 for b in budgets) + " |" + " |" * len(budgets))
    searches = report.get("searches")
    if searches:
        budgets_s = [b for b in searches if b not in ("tower", "modules")]
        lines += ["", f"### Real searches on {searches['modules']} test modules (compiled; the {searches['tower']} "
                  "tower, best on valid)", "",
                  "| search | " + " | ".join(f"budget {b}" for b in budgets_s) + " | "
                  + " | ".join(f"vs shipped, budget {b} (95% bootstrap)" for b in budgets_s) + " |",
                  "|---|" + "---:|" * (2 * len(budgets_s))]
        for name in searches[budgets_s[0]]:
            cells = [f"{searches[b][name]['ratio']:.4f}" for b in budgets_s]
            diffs = []
            for b in budgets_s:
                v = searches[b][name].get("vs_shipped")
                diffs.append("(shipped shape)" if v is None else
                             f"{v['mean']:+.4f} [{v['interval'][0]:+.4f}, {v['interval'][1]:+.4f}]")
            lines.append(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")
    probe = report.get("oz_benefit_probe")
    if probe:
        lines += ["", "### -Oz benefit, one simple head per representation (test MAE in points; fitted on train + "
                  "valid)", ""]
        lines.append("| representation | dims | ridge | k-NN (k=5) | " + " | ".join(f"ridge {b}" for b in buckets)
                     + " |")
        lines.append("|---|---:|---:|---:|" + "---:|" * len(buckets))
        for name, r in probe.items():
            lines.append(f"| {name} | {r['dim']} | {r['ridge']:.2f} | {r['knn']:.2f} | "
                         + " | ".join(f"{r['ridge_by_bucket'].get(b, float('nan')):.2f}" for b in buckets) + " |")
    return "\n".join(lines) + "\n"


def plot_curves(report: dict, path) -> None:
    """Training curves: each tower's valid rank correlation by epoch, written to ``path`` (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for tower, r in report["towers"].items():
        ax.plot([h["epoch"] for h in r["history"]], [h["valid_rho"] for h in r["history"]], label=tower)
    ax.set_xlabel("epoch")
    ax.set_ylabel("valid rank correlation")
    ax.set_title("mean per-module Spearman, held-out pipelines", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- guided local search

#: Mutations of the best pipeline found that the model scores per compiled batch in a model-guided local search.
GUIDED_CANDIDATES = 256


def guided_local_search(trials, model, row: np.ndarray, start: Steps, rng, vocabulary: Sequence[str], *,
                        candidates: int = GUIDED_CANDIDATES, batch: int = 4) -> None:
    """Spend what is left of ``trials``' budget as a local search around the best pipeline found (``start`` while
    -Oz leads) in which ``model`` chooses: each round draws ``candidates`` random edits of it, scores them for
    the module of tower row ``row`` and compiles the ``batch`` best not measured yet."""
    stalls = 0
    while trials.left > 0 and stalls < 50:
        best = trials.best()[0]
        base = start if best == (OZ,) else best
        pool = list(dict.fromkeys(mutate_steps(base, rng, vocabulary) for _ in range(candidates)))
        pool = [s for s in pool if s not in trials.counts]
        if not pool:
            stalls += 1
            continue
        scores = predict(model, row[None], pipeline_tokens(pool))[0]
        order = np.argsort(-scores, kind="stable")[:min(trials.left, batch)]
        before = trials.compilations
        if not trials.run([pool[i] for i in order], "guided local search"):
            return
        stalls = stalls + 1 if trials.compilations == before else 0


def compare_searches(modules: Sequence, rows: np.ndarray, model, pool: Sequence[Steps], residuals: np.ndarray,
                     global_ranker, *, budgets: Sequence[int] = (10, 50), share: float = 0.6, engine=None,
                     seed: int = 0, progress: bool = False) -> dict:
    """Real searches on ``modules`` (compiled, not looked up), per budget: the shipped shape (the global
    ranking's picks for ``share`` of the budget, then random local search) against the behavior model's picks
    (:func:`coverage_choice` over ``pool``, ``residuals`` float (S, K)) followed by random local search, and
    followed by :func:`guided_local_search`. ``rows``: the model's tower rows of the modules. Returns per
    budget and strategy the geomean IC_Oz / IC, and each strategy's per-module difference to the shipped shape
    (mean, 95% bootstrap interval)."""
    import random

    from tqdm import tqdm

    engine = engine or default_engine()
    out: Dict[str, dict] = {}
    strategies = ("global + local", "behavior + local", "behavior + guided")
    predictions = predict(model, rows, pipeline_tokens(pool))                          # (N, K), once
    for budget in budgets:
        picks = max(1, int(round(budget * share)))
        gains = {name: [] for name in strategies}
        for i, module in enumerate(tqdm(modules, disable=not progress, desc=f"searches, budget {budget}",
                                        unit="module")):
            behavior_picks = [tuple(pool[j]) for j in coverage_choice(predictions[i], residuals, picks)]
            for name in strategies:
                trials = Trials(module, engine, budget)
                chosen = global_ranker.choose(None, picks) if name.startswith("global") else behavior_picks
                trials.run(chosen, name.split(" + ")[0])
                rng = random.Random(f"{seed}:{module.sha256}")
                vocabulary = sorted({x for s in chosen for x in s if x != OZ})
                start = chosen[0] if chosen else (OZ,)
                if name.endswith("guided"):
                    guided_local_search(trials, model, rows[i], start, rng, vocabulary)
                else:
                    _local_search(trials, start, rng, vocabulary)
                gains[name].append(math.log(max(trials.oz_count, 1) / max(trials.best()[1], 1)))
        entry = {}
        base = np.array(gains["global + local"])
        for name in strategies:
            v = np.array(gains[name])
            entry[name] = {"ratio": float(np.exp(v.mean())), "mean_gain": float(v.mean())}
            if name != "global + local":
                entry[name]["vs_shipped"] = {"mean": float((v - base).mean()),
                                             "interval": list(bootstrap_interval(v - base, seed=seed))}
        out[str(budget)] = entry
    return out
