"""Evidence that a pretrained encoder learned something, written as ``REPORT.md`` + ``report.json``.

1. Masked-code accuracy per head on the held-out test modules (seeded 15% masks), against
   - the frequency baseline: the most frequent training code of each head at each probe position;
   - a context-free model: the same architecture trained with attention limited to each position itself
     (``context_free = true``), which sees only the other sub-codes of the masked probe.
2. Pooling: mean of the probe states vs the [CLS] state (and Autophase as a reference), judged by leave-one-out
   5-nearest-neighbour prediction on the held-out labelled modules: -Oz benefit (MAE, points) and best single pass
   (Top-1, correct when the prediction is in the module's set of best passes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pyarrow.parquet as pq

from behavioral_pq.artifacts import write_json_atomic, write_text_atomic
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.checkpoint import load_checkpoint
from behavioral_pq.embedding.encoder import Encoder
from behavioral_pq.training.pretraining import frequency_baseline, mlm_accuracy, read_codes


def _knn_scores(vectors: np.ndarray, benefit: np.ndarray, best: List[set], k: int = 5) -> dict:
    """Leave-one-out k-NN on standardized vectors (N, D): MAE of the mean neighbour -Oz benefit (points), and
    Top-1 of the most common best pass among the neighbours."""
    x = (vectors - vectors.mean(0)) / (vectors.std(0) + 1e-8)
    d = np.square(x[:, None, :] - x[None, :, :]).sum(-1)                               # (N, N)
    np.fill_diagonal(d, np.inf)
    neighbours = np.argsort(d, axis=1)[:, :k]                                          # (N, k)
    mae = float(np.abs(benefit[neighbours].mean(1) - benefit).mean() * 100)
    hits = 0
    for i, row in enumerate(neighbours):
        votes: Dict[int, int] = {}
        for j in row:
            for p in best[j]:
                votes[p] = votes.get(p, 0) + 1
        guess = max(sorted(votes), key=lambda p: votes[p]) if votes else -1
        hits += guess in best[i]
    return {"oz_benefit_mae_points": round(mae, 2), "best_pass_top1": round(hits / len(best), 4)}


def pooling_comparison(run: Path, encoder, store: Optional[str]) -> Optional[dict]:
    """k-NN scores of mean and [CLS] pooling and of Autophase on the run's held-out labelled modules."""

    if store is None:
        return None
    corpus = Corpus(store)
    shas, codes = [], []
    for name in ("valid", "test"):
        path = run / "codes" / f"{name}.parquet"
        shas += pq.read_table(path, columns=["sha256"]).column(0).to_pylist()
        codes.append(read_codes(path, encoder.quantizer.num_subspaces))
    codes = np.concatenate(codes)
    labels = {r["sha256"]: r for r in corpus.labels().select(["sha256", "best_passes", "oz_benefit"]).to_pylist()}
    keep = [i for i, s in enumerate(shas) if s in labels]
    if len(keep) < 10:
        return None
    shas, codes = [shas[i] for i in keep], codes[keep]
    benefit = np.array([labels[s]["oz_benefit"] for s in shas])
    best = [set(labels[s]["best_passes"]) for s in shas]
    modules = corpus.modules(["sha256", "autophase"])
    autophase = dict(zip(modules.column(0).to_pylist(), modules.column(1).to_pylist()))
    rows = {"autophase (log1p)": np.log1p(np.array([autophase[s] for s in shas], np.float64))}
    for pooling in ("mean", "cls"):
        encoder.pooling = pooling
        rows[f"PQ-BERT {pooling}"] = encoder.embed_codes(codes)
    encoder.pooling = "mean"
    counts: Dict[int, int] = {}
    for b in best:
        for p in b:
            counts[p] = counts.get(p, 0) + 1
    prior = max(counts, key=counts.get)
    return {"modules": len(shas), "k": 5,
            "prior": {"oz_benefit_mae_points": round(float(np.abs(benefit.mean() - benefit).mean() * 100), 2),
                      "best_pass_top1": round(float(np.mean([prior in b for b in best])), 4)},
            "methods": {name: _knn_scores(v, benefit, best) for name, v in rows.items()}}


def mlm_report(run, *, context_free_run=None, store: Optional[str] = None, seed: int = 1234) -> dict:
    """Measure the encoder of ``run`` (and the context-free run) on ``run``'s held-out test codes."""

    run = Path(run)
    checkpoint = load_checkpoint(run / "encoder")
    encoder = Encoder(checkpoint)
    test = read_codes(run / "codes" / "test.parquet", encoder.quantizer.num_subspaces)
    if len(test) == 0:
        test = read_codes(run / "codes" / "valid.parquet", encoder.quantizer.num_subspaces)
    probability = checkpoint.config["training"].get("mask_probability", 0.15)
    report = {"run": str(run), "test_modules": len(test), "mask_probability": probability, "seed": seed,
              "training": {k: checkpoint.config["training"].get(k) for k in ("steps", "seconds", "batch_size")},
              "corpus": checkpoint.config["corpus"], "model": checkpoint.config["model"],
              "methods": {}}
    report["methods"]["frequency baseline"] = frequency_baseline(run / "codes" / "train.parquet", test, probability,
                                                                 seed, encoder.quantizer.num_subspaces)
    report["methods"]["PQ-BERT"] = mlm_accuracy(checkpoint.model, test, probability, seed)
    if context_free_run is not None:
        other = load_checkpoint(Path(context_free_run) / "encoder")
        if other.quantizer.centroids_.tobytes() != checkpoint.quantizer.centroids_.tobytes():
            raise ValueError(f"{context_free_run}: another quantizer; the codes would not be comparable")
        report["methods"]["context-free"] = mlm_accuracy(other.model, test, probability, seed)
        report["context_free_training"] = {k: other.config["training"].get(k) for k in ("steps", "seconds")}
    report["pooling"] = pooling_comparison(run, encoder, store)
    return report


def write_report(report: dict, out: Path) -> None:
    """``out/REPORT.md`` and ``out/report.json``."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "report.json", report)
    methods = report["methods"]
    heads = len(next(iter(methods.values()))["accuracy"])
    lines = ["# PQ-BERT masked-code accuracy (held-out test modules)", "",
             f"Run `{Path(report['run']).name}`: {report['training']['steps']} steps, "
             f"{report['corpus'].get('modules')} pretraining modules; {report['test_modules']} test modules, "
             f"{report['mask_probability']:.0%} of the P x {heads} positions masked (seed {report['seed']}).", "",
             "| method | mean | " + " | ".join(f"head {h}" for h in range(heads)) + " |",
             "|---|---|" + "---|" * heads]
    for name, result in methods.items():
        lines.append(f"| {name} | **{result['accuracy_mean']:.3f}** | "
                     + " | ".join(f"{a:.3f}" for a in result["accuracy"]) + " |")
    if "context_free_training" in report:
        lines += ["", f"PQ-BERT trained {report['training']['steps']} steps, the context-free model "
                      f"{report['context_free_training']['steps']} (same data, quantizer, architecture and "
                      f"optimizer; its log shows how far it had got)."]
    pooling = report.get("pooling")
    if pooling:
        lines += ["", f"## Pooling: mean vs [CLS] ({pooling['modules']} held-out labelled modules, leave-one-out "
                      f"{pooling['k']}-NN)", "",
                  "| representation | -Oz benefit MAE (points) | best-pass Top-1 |", "|---|---|---|",
                  f"| prior (mean / most frequent) | {pooling['prior']['oz_benefit_mae_points']} | "
                  f"{pooling['prior']['best_pass_top1']} |"]
        for name, r in pooling["methods"].items():
            lines.append(f"| {name} | {r['oz_benefit_mae_points']} | {r['best_pass_top1']} |")
    write_text_atomic(out / "REPORT.md", "\n".join(lines) + "\n")
