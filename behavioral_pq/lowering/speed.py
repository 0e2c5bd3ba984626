"""The speed objective: the fastest of a few target-mode builds, chosen by running them.

No single build is fastest everywhere. Compiling for the host CPU (``clang -march=native``) vectorizes with its
widest registers, but the FMA it fuses into a serial floating-point reduction lengthens the dependency chain
(a dot product ran 2x slower than ``clang -O3`` on a Zen 5 for that reason), and code compiled for the CPU the
module was built for is what ``clang -O3`` itself gives; and ``-O2`` is sometimes faster than ``-O3`` (a complex
multiply ran 6% faster with clang -O2 than with clang -O3 on a Zen 4). So the objective builds each
:data:`SPEED_CANDIDATES` (target-mode ``-O3`` and ``llc -O3``, or ``-O2`` and ``llc -O2`` where a candidate says
so), checks each against the program's tests or reference output, times those that pass, interleaved (each
round runs every build once, so a machine that slows down during the measurement slows them alike; median of the
rounds) and keeps the fastest. A build one of whose timed runs fails (a crash, a timeout, another exit status than
the reference's) is dropped, never ranked. A module that cannot be run (no tests, no ``main``) gets the first
candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from behavioral_pq.core.passes import optimize
from behavioral_pq.core.target import Target
from behavioral_pq.errors import BPQError, LoweringError
from behavioral_pq.lowering.backends import LlcBackend, Lowering
from behavioral_pq.lowering.harness import Harness


@dataclass(frozen=True)
class SpeedCandidate:
    """One build: ``cpu`` ``"host"`` (this machine, as -march=native) or ``""`` (each function's own CPU, as
    clang -O3 of the source targets), llc's ``fp_contract``, and ``level`` ``"O2"`` for target-mode -O2 with
    ``llc -O2`` (what clang -O2 builds) or ``""`` for the backend's passes with ``llc -O3``."""

    cpu: str
    fp_contract: str
    level: str = ""

    @property
    def label(self) -> str:
        cpu = "host CPU" if self.cpu == "host" else "module CPU"
        return f"{cpu}, fp-contract={self.fp_contract}" + (f", -{self.level}" if self.level else "")


SPEED_CANDIDATES: Tuple[SpeedCandidate, ...] = (
    SpeedCandidate("host", "on"), SpeedCandidate("host", "off"), SpeedCandidate("", "on"),
    SpeedCandidate("", "on", "O2"))


@dataclass
class SpeedChoice:
    """What :class:`SpeedBackend` tried: per candidate, its median time in ns or why it was dropped."""

    chosen: SpeedCandidate
    tried: List[Tuple[str, Optional[float], str]] = field(default_factory=list)


class SpeedBackend:
    """Lowers for the speed objective (see the module docstring). Takes the module *before* optimization:
    each candidate runs ``passes`` in target mode itself."""

    name = "llc (speed objective)"

    def __init__(self, passes: str = "O3", runs: int = 5, candidates: Tuple[SpeedCandidate, ...] = SPEED_CANDIDATES):
        self.passes, self.runs, self.candidates = passes, runs, candidates
        self.host = Target.host()
        self.last: Optional[SpeedChoice] = None

    def build(self, module, candidate: SpeedCandidate):
        """(optimized module, assembly) of one candidate."""
        target = Target(self.host.triple, self.host.cpu if candidate.cpu == "host" else "",
                        self.host.features if candidate.cpu == "host" else "")
        optimized = optimize(module, candidate.level or self.passes, target=target)
        llc = LlcBackend(opt_level=2 if candidate.level == "O2" else 3, cpu=target.cpu or None,
                         fp_contract=candidate.fp_contract)
        return optimized, llc.lower(optimized).assembly

    def lower(self, module, harness: Optional[Harness] = None) -> Lowering:
        start = time.monotonic()
        best: Optional[Tuple[float, SpeedCandidate, str]] = None
        tried: List[Tuple[str, Optional[float], str]] = []
        runnable = harness is not None and harness.runs and harness.timed
        passed: List[Tuple[SpeedCandidate, str]] = []
        for candidate in (self.candidates if runnable else self.candidates[:1]):
            try:
                _, assembly = self.build(module, candidate)
            except BPQError as exc:
                tried.append((candidate.label, None, f"build: {exc}"[:200]))
                continue
            if not runnable:
                best = (0.0, candidate, assembly)
                tried.append((candidate.label, None, "not timed (nothing to run)"))
                break
            verdict = harness.check(assembly)
            if verdict.ok:
                passed.append((candidate, assembly))
            else:
                tried.append((candidate.label, None, verdict.stage))
        timings = harness.try_timings([assembly for _, assembly in passed], self.runs) if passed else []
        for (candidate, assembly), timing in zip(passed, timings):
            if isinstance(timing, str):
                tried.append((candidate.label, None, f"not ranked: {timing}"[:200]))
                continue
            median = timing.median_ns
            tried.append((candidate.label, median, "ok"))
            if best is None or median < best[0]:
                best = (median, candidate, assembly)
        if best is None:
            raise LoweringError(f"{module.name}: no speed candidate built and passed: {tried}")
        self.last = SpeedChoice(best[1], tried)
        verdict = harness.check(best[2]) if harness is not None else None
        return Lowering(best[2], self.name, verdict, (), time.monotonic() - start,
                        harness.notes if harness is not None else ())
