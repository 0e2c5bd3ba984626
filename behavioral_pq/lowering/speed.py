"""The speed objective: a few target-mode builds, timed, and plain -O3 kept unless another is faster beyond noise.

No single build is fastest everywhere. Compiling for the host CPU (``clang -march=native``) vectorizes with its
widest registers, but the FMA it fuses into a serial floating-point reduction lengthens the dependency chain
(a dot product ran 2x slower than ``clang -O3`` on a Zen 5 for that reason), and code compiled for the CPU the
module was built for is what ``clang -O3`` itself gives; and ``-O2`` is sometimes faster than ``-O3`` (a complex
multiply ran 6% faster with clang -O2 than with clang -O3 on a Zen 4). So the objective builds each
:data:`SPEED_CANDIDATES` (target-mode ``-O3`` and ``llc -O3``, or ``-O2`` and ``llc -O2`` where a candidate says
so), checks each against the program's tests or reference output and times those that pass, interleaved (each
round runs every build once, so a machine that slows down during the measurement slows them alike). A program's
time is its own run, measured inside the sandbox (see ``ProgramHarness._sample``), not the sandbox's start-up.

Most builds differ by less than a run's noise, so the choice is not "the lowest median": it keeps
:data:`O3_BUILD`, what ``clang -O3`` builds, unless another build is faster beyond the spread (:func:`choose`):

* its median is at least :data:`MIN_GAIN` (1%) below -O3's: a smaller gain is not worth a build other than the
  default (code layout alone moves a program by that much), and
* its runs are faster than -O3's by a one-sided exact Mann-Whitney test at :data:`ALPHA` (1%;
  :func:`mann_whitney_p`): with 5 runs each, at most one of the 25 (build run, -O3 run) pairs may have the build
  slower. Two builds of equal speed pass it under 1% of the time, each of the three other builds (under 3% for
  any); "upper quartile below -O3's lower quartile" would pass 10% of the time each.

Among the builds that pass both, the lowest median is chosen. -O3 is kept without ranking when a program's run
takes under :data:`MIN_PROGRAM_NS` (5 ms) or under :data:`START_UP_FACTOR` (3) times a trivial program's run timed
the same way (``ProgramHarness.start_up_timing``): process creation and dynamic loading, whose jitter is not the
build's, are then most of it. So is it when the runs are too few for the test ever to pass (4 or fewer). A build
one of whose timed runs fails (a crash, a timeout, another exit status than the reference's) is dropped, never
ranked. A module that cannot be run (no tests, no ``main``, or no check) gets -O3.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from behavioral_pq.core.passes import optimize
from behavioral_pq.core.target import Target
from behavioral_pq.errors import BPQError, LoweringError
from behavioral_pq.lowering.backends import LlcBackend, Lowering
from behavioral_pq.lowering.harness import Harness, ProgramHarness, Timing

#: a build is chosen over -O3 only with a median at least this much lower (a fraction of -O3's)
MIN_GAIN = 0.01
#: the one-sided Mann-Whitney p-value a build's runs must be under to count as faster than -O3's
ALPHA = 0.01
#: a program run shorter than this (ns, -O3's median) is too short to rank builds on
MIN_PROGRAM_NS = 5e6
#: ... as is one shorter than this many times a trivial program's (start-up: several ms on a loaded machine)
START_UP_FACTOR = 3.0


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


#: what clang -O3 builds (the module's CPU, its FMA contraction, -O3 and llc -O3): kept unless another is faster
O3_BUILD = SpeedCandidate("", "on")

SPEED_CANDIDATES: Tuple[SpeedCandidate, ...] = (
    SpeedCandidate("host", "on"), SpeedCandidate("host", "off"), O3_BUILD, SpeedCandidate("", "on", "O2"))


@dataclass
class SpeedChoice:
    """What :class:`SpeedBackend` tried: ``tried`` per candidate (label, median time in ns or None, ``"ok"`` or
    why it was dropped), the ``timings`` of those timed (by label), the ``chosen`` build, the ``baseline`` it was
    compared with (-O3), the ``reason`` for the choice and ``notes`` on the measurement."""

    chosen: SpeedCandidate
    tried: List[Tuple[str, Optional[float], str]] = field(default_factory=list)
    timings: Dict[str, Timing] = field(default_factory=dict)
    baseline: SpeedCandidate = O3_BUILD
    reason: str = ""
    notes: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SpeedProgress:
    """Where :meth:`SpeedBackend.lower` is: ``phase`` (what runs now), ``done`` of ``total`` steps (a build and
    its check are a step each, a timed run is one)."""

    phase: str
    done: int
    total: int


def mann_whitney_p(faster: Sequence[float], slower: Sequence[float]) -> float:
    """One-sided exact Mann-Whitney p-value for "``faster``'s samples are smaller than ``slower``'s".

    U is the number of pairs (x of ``faster``, y of ``slower``) with x > y (a tie counts 1/2); p is the share of
    the C(m + n, m) orderings of the m + n samples, all equally likely when both come from one distribution, with
    a U at most the one observed. The counts of U are the coefficients of the Gaussian binomial
    [m + n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i). With 5 samples each, U = 0 (every sample
    faster) gives p = 1/252 = 0.004 and U = 1 gives 2/252 = 0.008."""
    m, n = len(faster), len(slower)
    if m == 0 or n == 0:
        raise ValueError("mann_whitney_p needs samples on both sides")
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in faster for y in slower)
    counts = [1] + [0] * (m * n)      # the power series, exact up to q^(m n): each step only looks back
    for i in range(1, m + 1):
        for k in range(len(counts) - 1, n + i - 1, -1):
            counts[k] -= counts[k - n - i]
        for k in range(i, len(counts)):
            counts[k] += counts[k - i]
    return sum(counts[:math.floor(u) + 1]) / math.comb(m + n, m)


def choose(timings: Dict[str, Timing], baseline: str, *, min_gain: float = MIN_GAIN, alpha: float = ALPHA
           ) -> Tuple[str, str]:
    """The build to keep among ``timings`` (by label) and why: ``baseline`` (-O3) unless another's median is at
    least ``min_gain`` lower and its runs are faster by a one-sided Mann-Whitney test at ``alpha`` (see the module
    docstring); of several such builds, the lowest median. Without a baseline timing, the lowest median."""
    if baseline not in timings:
        best = min(timings, key=lambda label: timings[label].median_ns)
        return best, "the lowest median (-O3 could not be timed)"
    base = timings[baseline]
    others = {label: t for label, t in timings.items() if label != baseline}
    if not others:
        return baseline, "kept -O3: no other build to compare"
    runs = min(len(t.samples) for t in timings.values())
    if 1 / math.comb(2 * runs, runs) >= alpha:
        return baseline, (f"kept -O3: {runs} runs per build cannot show a build faster at p < {alpha:g} "
                          f"(give --runs 5 or more)")
    gains = {label: 1.0 - t.median_ns / base.median_ns for label, t in others.items()}
    tests = {label: mann_whitney_p(t.samples, base.samples) for label, t in others.items()}
    passed = [label for label in others if gains[label] >= min_gain and tests[label] < alpha]
    if passed:
        best = min(passed, key=lambda label: others[label].median_ns)
        return best, (f"{100 * gains[best]:.1f}% faster than -O3 beyond the spread (Mann-Whitney p = "
                      f"{tests[best]:.3f} < {alpha:g}, gain >= {100 * min_gain:g}%)")
    best = max(others, key=lambda label: gains[label])
    side = "below" if gains[best] >= 0 else "above"
    return baseline, (f"kept -O3: no build faster beyond the spread (the best, {best}: median "
                      f"{100 * abs(gains[best]):.1f}% {side} -O3's, p = {tests[best]:.2f}; a change needs "
                      f"p < {alpha:g} and a gain of at least {100 * min_gain:g}%)")


class SpeedBackend:
    """Lowers for the speed objective (see the module docstring). Takes the module *before* optimization:
    each candidate runs ``passes`` in target mode itself. ``baseline``: the build kept unless another is faster
    (one of ``candidates``)."""

    name = "llc (speed objective)"

    def __init__(self, passes: str = "O3", runs: int = 5, candidates: Tuple[SpeedCandidate, ...] = SPEED_CANDIDATES,
                 baseline: SpeedCandidate = O3_BUILD):
        if baseline not in candidates:
            raise ValueError(f"the baseline build ({baseline.label}) must be one of the candidates")
        if runs < 1:
            raise ValueError(f"runs must be at least 1, not {runs}")
        self.passes, self.runs, self.candidates, self.baseline = passes, runs, candidates, baseline
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

    def lower(self, module, harness: Optional[Harness] = None,
              progress: Optional[Callable[[SpeedProgress], None]] = None) -> Lowering:
        """Build, check, time and choose (see the module docstring); :attr:`last` holds what was tried and why the
        build was chosen. ``progress`` is called with a :class:`SpeedProgress` at each step."""
        start = time.monotonic()
        tell = progress or (lambda step: None)
        runnable = bool(harness is not None and harness.runs and harness.timed)
        candidates = self.candidates if runnable else (self.baseline,)
        steps = 2 * len(candidates) + self.runs * len(candidates)
        tried: List[Tuple[str, Optional[float], str]] = []
        built: Dict[SpeedCandidate, str] = {}
        passed: List[SpeedCandidate] = []
        for n, candidate in enumerate(candidates):
            tell(SpeedProgress(f"build {candidate.label}", 2 * n, steps))
            try:
                _, built[candidate] = self.build(module, candidate)
            except BPQError as exc:
                tried.append((candidate.label, None, f"build: {exc}"[:200]))
                continue
            if not runnable:
                tried.append((candidate.label, None, "not timed"))
                continue
            tell(SpeedProgress(f"check {candidate.label}", 2 * n + 1, steps))
            verdict = harness.check(built[candidate])
            if verdict.ok:
                passed.append(candidate)
            else:
                tried.append((candidate.label, None, verdict.stage))
        checked = 2 * len(candidates)

        def timed(done: int, total: int) -> None:
            tell(SpeedProgress(f"time {len(passed)} builds, {self.runs} runs each", checked + done, checked + total))

        results = harness.try_timings([built[c] for c in passed], self.runs, progress=timed) if passed else []
        timings: Dict[str, Timing] = {}
        for candidate, timing in zip(passed, results):
            if isinstance(timing, str):
                tried.append((candidate.label, None, f"not ranked: {timing}"[:200]))
                continue
            timings[candidate.label] = timing
            tried.append((candidate.label, timing.median_ns, "ok"))
        by_label = {c.label: c for c in candidates}
        notes: List[str] = []
        if not runnable:
            if self.baseline not in built:
                raise LoweringError(f"{module.name}: the -O3 build failed: {tried}")
            chosen, reason = self.baseline, ("kept -O3: not checked, so not timed" if harness is None else
                                             "kept -O3: nothing to run (no main, no timed tests), so nothing timed")
        elif not timings:
            raise LoweringError(f"{module.name}: no speed candidate built and passed: {tried}")
        else:
            label, reason = self._choose(timings, harness, notes)
            chosen = by_label[label]
        self.last = SpeedChoice(chosen, tried, timings, self.baseline, reason, tuple(notes))
        verdict = harness.check(built[chosen]) if harness is not None else None
        return Lowering(built[chosen], self.name, verdict, (), time.monotonic() - start,
                        harness.notes if harness is not None else ())

    def _choose(self, timings: Dict[str, Timing], harness: Harness, notes: List[str]) -> Tuple[str, str]:
        """:func:`choose`, but -O3 without ranking when a program's run is too short (a note says why)."""
        base = self.baseline.label
        if isinstance(harness, ProgramHarness):
            if not harness.run.given:
                notes.append("the timed run had no arguments and empty stdin (no --run-args, --stdin or --run-dir): "
                             "the builds were timed on the empty run")
            if base in timings:
                ms, floor = timings[base].median_ns / 1e6, harness.start_up_timing(self.runs)
                start_up = floor.median_ns / 1e6 if floor is not None else 0.0
                if ms < max(MIN_PROGRAM_NS / 1e6, START_UP_FACTOR * start_up):
                    notes.append(f"the run takes {ms:.2f} ms (starting a trivial program takes {start_up:.2f} ms "
                                 f"here): too short to rank builds (under {MIN_PROGRAM_NS / 1e6:g} ms, or under "
                                 f"{START_UP_FACTOR:g}x the start-up); give --run-args (or --stdin) inputs that make "
                                 "it run longer")
                    return base, f"kept -O3: the run ({ms:.2f} ms) is too short to rank builds"
        return choose(timings, base)
