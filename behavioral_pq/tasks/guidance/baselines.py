"""Search baselines that need no embedding, at the same budget: random sequences and greedy hill climbing.
"""


from __future__ import annotations

import random
import time

from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.engine import default_engine
from behavioral_pq.core.module import load_module
from behavioral_pq.tasks.guidance.library import OZ
from behavioral_pq.tasks.guidance.trials import Recommendation, Trials, recommendation_from


def random_search(module, budget: int, *, engine=None, seed: int = 0, max_length: int = 40) -> Recommendation:
    """Baseline: ``budget`` random catalog sequences (lengths uniform in 1..max_length), best of them and -Oz."""

    start = time.monotonic()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    rng = random.Random(f"{seed}:{module.sha256}")
    trials = Trials(module, engine, budget)
    while trials.left > 0:
        batch = [tuple(rng.choice(PASSES).flag for _ in range(rng.randint(1, max_length)))
                 for _ in range(min(trials.left, 8))]
        trials.run(batch, "random")
    return recommendation_from(trials, start)


def greedy_search(module, budget: int, *, engine=None, seed: int = 0) -> Recommendation:
    """Baseline: first-improvement hill climbing after -Oz. Tries -Oz followed by the current passes and one more
    catalog pass (in a random order), keeps the first that lowers the count, and starts over from there."""

    start = time.monotonic()
    engine = engine or default_engine()
    module = load_module(module, engine=engine)
    rng = random.Random(f"{seed}:{module.sha256}")
    trials = Trials(module, engine, budget)
    current, count = (OZ,), trials.oz_count
    order = [p.flag for p in PASSES]
    rng.shuffle(order)
    while trials.left > 0 and order:  # an empty order: no single pass improves the current pipeline
        candidate = current + (order.pop(),)
        trials.run([candidate], "greedy")
        value = trials.counts.get(candidate)
        if value is not None and value < count:
            current, count = candidate, value
            order = [p.flag for p in PASSES]
            rng.shuffle(order)
    return recommendation_from(trials, start)


