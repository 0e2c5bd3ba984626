"""``bpq evaluate-guidance``: recommended pipelines against -Oz, random search and greedy search at equal budgets.

For each held-out program and budget N (candidate compilations; -Oz is the reference every method gets):

- ``ranker`` (unless ``ranker=False``): :func:`recommend_pipeline` with a pipeline ranker (default: the shipped
  one for the module's size, what ``recommend_pipeline`` uses when no library is asked for), then local search;
- ``pqbert-library``: :func:`recommend_pipeline` (nearest library programs by embedding, then local search);
- ``random-neighbors``: the same, consulting random library programs instead of the nearest (does the embedding
  matter?);
- ``coreset`` (libraries with one, ``bpq library coreset``): the library's coreset alone, without the embedding
  or neighbors, then the same local search (does anything beyond a fixed list of good pipelines matter?);
- ``random``: :func:`random_search`; ``greedy``: :func:`greedy_search` (both anytime: one run at the largest
  budget, read at each smaller one).

The score is the geometric mean over programs of IC_Oz / IC_method (>= 1; higher is better).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from behavioral_pq.artifacts import with_pooling_of, write_json_atomic, write_text_atomic
from behavioral_pq.core.engine import default_engine
from behavioral_pq.corpus.buckets import slices
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.errors import BPQError, CorpusError
from behavioral_pq.reports.plotting import pyplot, save_figure
from behavioral_pq.tasks.guidance import greedy_search, random_search, recommend_pipeline
from behavioral_pq.tasks.guidance.build import stored_embeddings
from behavioral_pq.tasks.guidance.ranker import load_ranker

METHODS = ("pqbert-library", "random-neighbors", "random", "greedy")
#: Added when the library has a coreset.
CORESET_METHOD = "coreset"
#: Added first unless ``ranker=False``: recommend_pipeline's default for the ir-count objective.
RANKER_METHOD = "ranker"
TARGETS = {"geomean at budget 50 >= 1.05": lambda r: r["pqbert-library"]["50"] >= 1.05,
           "better than random search at budget 50": lambda r: r["pqbert-library"]["50"] > r["random"]["50"],
           "geomean at budget 1 > 1.00": lambda r: r["pqbert-library"]["1"] > 1.0}


def geomean(values: Sequence[float]) -> float:
    return float(math.exp(np.mean(np.log(values)))) if len(values) else float("nan")


def evaluate_guidance(store: Union[str, os.PathLike], out: Union[str, os.PathLike], *, library, encoder=None,
                      engine=None, split: str = "test", programs: int = 200, budgets: Sequence[int] = (1, 10, 50),
                      neighbors: int = 8, seed: int = 0, kind: Optional[str] = None,
                      max_instructions: Optional[int] = None, progress: bool = False, ranker=None) -> dict:
    """Run every method on ``programs`` random modules of the store's ``split`` and write ``report.md``,
    ``report.json``, ``per_program.jsonl`` and ``budgets.png`` to ``out``. Returns the report dict.

    ``kind`` ("small" or "real") and ``max_instructions`` narrow the modules drawn from. ``ranker``: the pipeline
    ranker of method "ranker" (a :class:`~behavioral_pq.tasks.guidance.ranker.PipelineRanker` or its folder;
    None: the shipped one for each module's size; False: leave the method out).

    Embeddings come from the store's spectra for the encoder's probe set (programs without spectra are measured).
    """
    from tqdm import tqdm

    # None stays None: recommend_pipeline then takes the shipped ranker for each module's size
    if ranker is not None and ranker is not False and not hasattr(ranker, "choose"):
        ranker = load_ranker(ranker)
    # the modules are embedded under the pooling the library's programs were embedded with
    encoder = with_pooling_of(encoder or load_encoder(), library.encoder)
    engine = engine or default_engine()
    corpus = Corpus(store)
    shas = corpus.split(split)
    if not shas:
        raise CorpusError(f"{store}: no {split!r} split (run bpq corpus split)")
    library_programs = {p.program for p in library.programs}
    shas = corpus.narrow(sorted(set(shas) - library_programs), kind=kind, max_instructions=max_instructions)
    if not shas:
        raise CorpusError(f"{store}: no {split!r} module" + (f" of a {kind} program" if kind else "")
                          + (f" of at most {max_instructions} instructions" if max_instructions else "")
                          + " outside the library")
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(shas, min(programs, len(shas)), replace=False).tolist())
    stored = stored_embeddings(corpus, encoder, chosen)
    budgets = sorted(set(int(b) for b in budgets))
    top = budgets[-1]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows: List[dict] = []
    failed: List[dict] = []
    modules = list(corpus.iter_modules(only=set(chosen)))
    kind_of = corpus.program_kinds()
    methods = ((RANKER_METHOD,) if ranker is not False else ()) + METHODS + \
        ((CORESET_METHOD,) if library.coreset else ())
    for module in tqdm(modules, disable=not progress, desc="guidance", unit="program"):
        try:
            start = time.perf_counter()
            embedding = stored.get(module.sha256)
            if embedding is None:
                embedding = encoder.embed(module)
            embed_seconds = time.perf_counter() - start
            row = {"program": module.sha256, "name": module.name, "instruction_count": module.instruction_count,
                   "kind": kind_of.get(module.sha256, "small"), "counts": {m: {} for m in methods},
                   "seconds": {m: {} for m in methods}}
            random_ids = np.random.default_rng([seed, int(module.sha256[:8], 16)]).choice(
                len(library), min(neighbors, len(library)), replace=False)
            for budget in budgets:
                ours = recommend_pipeline(module, budget, library=library, engine=engine, embedding=embedding,
                                          neighbors=neighbors, seed=seed)
                row["oz_count"] = ours.oz_count
                row["counts"]["pqbert-library"][budget] = ours.instruction_count
                row["seconds"]["pqbert-library"][budget] = ours.seconds + embed_seconds
                if budget == 1:
                    row["first_count"] = ours.first_count
                    row["first_method"] = ours.method
                if budget == top:
                    row["pipeline"] = " ".join(ours.steps)
                    row["method"] = ours.method
                ablation = recommend_pipeline(module, budget, library=library, engine=engine,
                                              neighbor_indices=random_ids, seed=seed)
                row["counts"]["random-neighbors"][budget] = ablation.instruction_count
                row["seconds"]["random-neighbors"][budget] = ablation.seconds
                if RANKER_METHOD in methods:
                    ranked = recommend_pipeline(module, budget, engine=engine, encoder=encoder, ranker=ranker,
                                                seed=seed)
                    row["counts"][RANKER_METHOD][budget] = ranked.instruction_count
                    row["seconds"][RANKER_METHOD][budget] = ranked.seconds
                if CORESET_METHOD in methods:
                    fixed = recommend_pipeline(module, budget, library=library, engine=engine, neighbor_indices=[],
                                               coreset_share=1.0, seed=seed)
                    row["counts"][CORESET_METHOD][budget] = fixed.instruction_count
                    row["seconds"][CORESET_METHOD][budget] = fixed.seconds
            for name, search in (("random", random_search), ("greedy", greedy_search)):
                t0 = time.perf_counter()
                result = search(module, top, engine=engine, seed=seed)
                seconds = time.perf_counter() - t0
                trials_best = _best_at(result, budgets)
                for budget in budgets:
                    row["counts"][name][budget] = trials_best[budget]
                    row["seconds"][name][budget] = seconds * min(budget, max(result.compilations, 1)) / max(
                        result.compilations, 1)
            rows.append(row)
        except BPQError as exc:
            failed.append({"program": module.sha256, "name": module.name, "error": f"{type(exc).__name__}: {exc}"})
    write_text_atomic(out / "per_program.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    report = _summarize(rows, failed, budgets, library, split, neighbors, seed, methods)
    report.update(kind=kind, max_instructions=max_instructions)
    write_json_atomic(out / "report.json", report, indent=2)
    write_text_atomic(out / "report.md", _markdown(report))
    _plot(report, out / "budgets.png")
    return report


def _best_at(result, budgets: Sequence[int]) -> Dict[int, int]:
    """Best count of an anytime search after each budget, from the order its candidates were measured in."""
    counts = [c for _, c in result.tried]
    out = {}
    for budget in budgets:
        out[budget] = min([result.oz_count] + [c for c in counts[:budget] if c is not None])
    return out


def _summarize(rows, failed, budgets, library, split, neighbors, seed, methods=METHODS) -> dict:
    ratios = {m: {str(b): geomean([max(r["oz_count"], 1) / max(r["counts"][m][b], 1) for r in rows])
                  for b in budgets} for m in methods}
    improved = {m: {str(b): float(np.mean([r["counts"][m][b] < r["oz_count"] for r in rows])) for b in budgets}
                for m in methods}
    seconds = {m: {str(b): float(np.mean([r["seconds"][m][b] for r in rows])) for b in budgets} for m in methods}
    unguarded = geomean([max(r["oz_count"], 1) / max(r["first_count"], 1) for r in rows
                         if r.get("first_count") is not None])
    winners: Dict[str, int] = {}
    for r in rows:
        winners[r.get("method", "?")] = winners.get(r.get("method", "?"), 0) + 1
    report = {"methods": list(methods), "split": split, "programs": len(rows), "failed": failed, "budgets": budgets,
              "neighbors": neighbors,
              "seed": seed, "library": {"programs": len(library), "revision": library.revision,
                                        "settings": library.settings},
              "geomean_oz_over_method": ratios, "fraction_better_than_oz": improved, "seconds_per_program": seconds,
              "budget1_unguarded_geomean": unguarded, "winning_method_at_top_budget": winners,
              "instruction_count": {"median": float(np.median([r["instruction_count"] for r in rows])) if rows else 0}}
    report["slices"] = {}
    for name, mask in slices([r.get("kind", "small") for r in rows], [r["instruction_count"] for r in rows]).items():
        part = [r for r, m in zip(rows, mask) if m]
        report["slices"][name] = {"programs": len(part), **{
            m: {str(b): geomean([max(r["oz_count"], 1) / max(r["counts"][m][b], 1) for r in part]) for b in budgets}
            for m in methods}}
    if all(str(b) in ratios["pqbert-library"] for b in (1, 50)):
        report["targets"] = {name: bool(check(ratios)) for name, check in TARGETS.items()}
    return report


def _markdown(report: dict) -> str:
    budgets = report["budgets"]
    methods = report.get("methods", METHODS)
    drawn = "".join([f", {report['kind']} programs" if report.get("kind") else "",
                     f", at most {report['max_instructions']} instructions" if report.get("max_instructions") else ""])
    lines = [f"# Guidance: recommended pipelines against -Oz ({report['split']} split{drawn})", "",
             f"{report['programs']} held-out programs (median {report['instruction_count']['median']:.0f} IR "
             f"instructions), {len(report['failed'])} failed; library of {report['library']['programs']} programs, "
             f"{report['neighbors']} neighbors, seed {report['seed']}.", "",
             "Geometric mean of IC_Oz / IC_method (higher is better; 1.05 = 5% fewer IR instructions than -Oz). "
             "The budget counts candidate compilations; every method also compiles -Oz and keeps it when nothing "
             "beats it.", "",
             "| method | " + " | ".join(f"budget {b}" for b in budgets) + " |",
             "|---|" + "---:|" * len(budgets)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(f"{report['geomean_oz_over_method'][m][str(b)]:.4f}" for b in budgets)
                     + " |")
    lines += ["", "Fraction of programs where the method beats -Oz:", "",
              "| method | " + " | ".join(f"budget {b}" for b in budgets) + " |", "|---|" + "---:|" * len(budgets)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(f"{report['fraction_better_than_oz'][m][str(b)]:.3f}" for b in budgets)
                     + " |")
    lines += ["", "Wall time per program (seconds, 2 cores; pqbert-library includes the embedding when it was "
              "measured, not when read from the store; a ranker that reads the module includes its probes; random "
              "and greedy run once at the largest budget, their time at a smaller budget is prorated by "
              "compilations):", "",
              "| method | " + " | ".join(f"budget {b}" for b in budgets) + " |", "|---|" + "---:|" * len(budgets)]
    for m in methods:
        lines.append(f"| {m} | " + " | ".join(f"{report['seconds_per_program'][m][str(b)]:.3f}" for b in budgets)
                     + " |")
    lines += ["", f"Budget 1 without the -Oz fallback (the first library pipeline alone): geomean "
              f"{report['budget1_unguarded_geomean']:.4f}.", "",
              "Where the best pipeline came from at the largest budget: "
              + ", ".join(f"{k} {v}" for k, v in sorted(report["winning_method_at_top_budget"].items())) + "."]
    if report.get("slices"):
        top = str(budgets[-1])
        lines += ["", f"## By program kind and size (geomean IC_Oz / IC at budget {top})", "",
                  "| slice | programs | " + " | ".join(methods) + " |", "|---|---:|" + "---:|" * len(methods)]
        for name, row in report["slices"].items():
            lines.append(f"| {name} | {row['programs']} | " + " | ".join(f"{row[m][top]:.4f}" for m in methods) + " |")
    if "targets" in report:
        lines += ["", "## Targets", ""] + [f"- {'met' if ok else 'NOT met'}: {name}"
                                          for name, ok in report["targets"].items()]
    return "\n".join(lines) + "\n"


def _plot(report: dict, path: Path) -> None:
    plt = pyplot()
    budgets = report["budgets"]
    methods = report.get("methods", METHODS)
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in methods:
        ax.plot(budgets, [report["geomean_oz_over_method"][m][str(b)] for b in budgets], marker="o", label=m)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("budget (candidate compilations)")
    ax.set_ylabel("geomean IC_Oz / IC")
    ax.set_title(f"Pipeline guidance, {report['programs']} {report['split']} programs")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
