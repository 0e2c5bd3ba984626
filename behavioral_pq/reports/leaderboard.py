"""A leaderboard in CompilerGym's style on ``llvm-v0``: random search and greedy search at a fixed wall time per
program against -Oz, next to ``recommend_pipeline`` at a compilation budget and at the same wall time, on a
store's test programs, small and real, by size bucket. Score: IC_Oz / IC (higher is better; 1.05 = 5% fewer IR
instructions than -Oz).
"""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path
from typing import Dict, List, Sequence, Union

import numpy as np

from behavioral_pq.artifacts import write_json_atomic, write_text_atomic
from behavioral_pq.corpus.buckets import KINDS, slices
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.env.llvm import LlvmEnv, StoreBenchmarks
from behavioral_pq.errors import BPQError
from behavioral_pq.tasks.guidance import recommend_pipeline

#: recommend_pipeline runs twice: at the compilation budget, and with the searches' wall time (its local search
#: goes on until the time is spent, the embedding included).
METHODS = ("random-search", "greedy-search", "recommend_pipeline", "recommend_pipeline (same time)")
#: The compilation cap of the time-bound run: large enough that time ends it.
TIMED_BUDGET = 100_000


def _random_search(env: LlvmEnv, seconds: float, rng: random.Random, max_steps: int = 40) -> int:
    """Best instruction count seen within ``seconds`` of random walks (any prefix counts, as -Oz is kept)."""
    best = env.observation["IrInstructionCountOz"]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        env.reset()
        for _ in range(max_steps):
            _, _, terminated, _, _ = env.step(rng.randrange(env.action_space.n))
            if terminated:
                break
            best = min(best, env.observation["IrInstructionCount"])
            if time.monotonic() >= deadline:
                break
    return best


def _greedy_search(env: LlvmEnv, seconds: float, rng: random.Random) -> int:
    """First-improvement hill climbing with forks: try actions in a random order, take the first that lowers the
    count, until no action does or the time is up."""
    env.reset()
    best = min(env.observation["IrInstructionCountOz"], env.observation["IrInstructionCount"])
    deadline = time.monotonic() + seconds
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        order = list(range(env.action_space.n))
        rng.shuffle(order)
        for action in order:
            if time.monotonic() >= deadline:
                break
            child = env.fork()
            _, reward, terminated, _, _ = child.step(action)
            if not terminated and reward > 0:
                env.step(action)
                best = min(best, env.observation["IrInstructionCount"])
                improved = True
                break
    return best


def leaderboard(store: Union[str, os.PathLike], out: Union[str, os.PathLike], *, programs: int = 10,
                seconds: float = 5.0, budget: int = 50, split: str = "test", max_instructions: int = 20_000,
                seed: int = 0, progress: bool = False) -> dict:
    """Run the three methods on up to ``programs`` modules of each kind from the store's ``split`` (at most
    ``max_instructions`` each) and write ``leaderboard.md`` / ``leaderboard.json`` to ``out``."""
    from tqdm import tqdm

    corpus = Corpus(store)
    kinds = corpus.program_kinds()
    sizes = dict(zip(*(corpus.modules(["sha256", "instruction_count"]).column(c).to_pylist()
                       for c in ("sha256", "instruction_count"))))
    uris = StoreBenchmarks(store).uris(split)
    rng = random.Random(seed)
    chosen: List[str] = []
    for kind in KINDS:
        pool = [u for u in uris if kinds.get(u[-64:]) == kind and sizes.get(u[-64:], 0) <= max_instructions]
        chosen += rng.sample(pool, min(programs, len(pool)))
    rows, failed = [], []
    for uri in tqdm(chosen, disable=not progress, desc="leaderboard", unit="program"):
        sha = uri[-64:]
        try:
            env = LlvmEnv(uri, reward_space="IrInstructionCount")
            env.reset()
            oz = env.observation["IrInstructionCountOz"]
            row = {"program": sha, "kind": kinds.get(sha, "small"), "instruction_count": sizes[sha], "oz": oz,
                   "counts": {}, "seconds": {}}
            for name, run in (("random-search", lambda: _random_search(env, seconds, random.Random(seed))),
                              ("greedy-search", lambda: _greedy_search(env, seconds, random.Random(seed)))):
                start = time.monotonic()
                row["counts"][name] = int(run())
                row["seconds"][name] = time.monotonic() - start
            for name, limits in (("recommend_pipeline", dict(budget=budget)),
                                 ("recommend_pipeline (same time)", dict(budget=TIMED_BUDGET, seconds=seconds))):
                start = time.monotonic()
                found = recommend_pipeline(env.initial_module, seed=seed, **limits)
                row["counts"][name] = found.instruction_count
                row["seconds"][name] = time.monotonic() - start
                row.setdefault("compilations", {})[name] = found.compilations
            rows.append(row)
        except BPQError as exc:
            failed.append({"program": sha, "error": f"{type(exc).__name__}: {exc}"})
    report = {"store": str(Path(store).resolve()), "split": split, "seconds_per_search": seconds, "budget": budget,
              "max_instructions": max_instructions, "seed": seed, "programs": len(rows), "failed": failed,
              "slices": {}}
    for name, mask in slices([r["kind"] for r in rows], [r["instruction_count"] for r in rows]).items():
        part = [r for r, m in zip(rows, mask) if m]
        report["slices"][name] = {"programs": len(part), **{
            m: {"geomean_oz_over_ic": _geomean([max(r["oz"], 1) / max(r["counts"][m], 1) for r in part]),
                "mean_seconds": float(np.mean([r["seconds"][m] for r in part]))} for m in METHODS}}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "leaderboard.json", {**report, "rows": rows}, indent=1)
    write_text_atomic(out / "leaderboard.md", _markdown(report))
    return report


def _geomean(values: Sequence[float]) -> float:
    return float(math.exp(np.mean(np.log(values)))) if len(values) else float("nan")


def _markdown(report: Dict) -> str:
    lines = [f"# llvm-v0 leaderboard ({report['split']} split)", "",
             f"{report['programs']} programs of at most {report['max_instructions']:,} IR instructions from "
             f"`{report['store']}`, {len(report['failed'])} failed. Random and greedy search get "
             f"{report['seconds_per_search']:g} s of wall time per program (2 cores); recommend_pipeline a budget "
             f"of {report['budget']} compilations, and again the same wall time as they get (both include the "
             "embedding; the library's candidates are always measured). Score: geometric mean of "
             "IC_Oz / IC (higher is better; -Oz is always available to every method).", "",
             "| slice | programs | " + " | ".join(METHODS) + " | seconds (" + ", ".join(METHODS) + ") |",
             "|---|---:|" + "---:|" * len(METHODS) + "---|"]
    for name, row in report["slices"].items():
        lines.append(f"| {name} | {row['programs']} | "
                     + " | ".join(f"{row[m]['geomean_oz_over_ic']:.4f}" for m in METHODS) + " | "
                     + ", ".join(f"{row[m]['mean_seconds']:.1f}" for m in METHODS) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["leaderboard", "METHODS"]
