"""The LLM verify-and-repair loop (NeuComBack's self-debugging): generate assembly, verify it, send the failure
back, at most ``repairs`` times; keep the first correct result and the whole trace. Then, optionally, an
optimization phase asks for faster code and keeps it only when it is still correct and faster past a margin.

Every answer is verified by a :class:`~behavioral_pq.lowering.harness.Harness`; nothing unverified is returned
as correct. An answer with no assembly in it counts as a failed round (stage ``malformed``); an endpoint that
fails after its own retries ends the loop (stage ``endpoint``) without raising, so one bad task never loses a
batch.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import List, Optional, Tuple

from behavioral_pq.errors import LLMError, LLMResponseError, MalformedAnswer, ToolError
from behavioral_pq.lowering.harness import Harness, Timing, Verdict, is_faster, static_cost
from behavioral_pq.lowering.llm import ChatClient, Messages, assistant, system, user
from behavioral_pq.lowering.prompts import OPTIMIZE_INSTRUCTIONS, REPAIR_INSTRUCTIONS, Prompt
from behavioral_pq.lowering.sandbox import scrub

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.S)
_ASM_TAGS = {"", "asm", "s", "gas", "x86", "x86asm", "x86_64", "assembly", "nasm", "att"}


def extract_assembly(content: str) -> str:
    """The assembly in a model's answer: the last fenced block tagged as assembly (or untagged); an answer with
    no fence is taken whole only when it looks like an assembly file (a ``.globl``/``.text`` directive and a
    label). Raises MalformedAnswer otherwise."""
    blocks = [body for tag, body in _FENCE.findall(content) if tag.lower() in _ASM_TAGS and body.strip()]
    if blocks:
        return blocks[-1].lstrip("\n").rstrip() + "\n"
    if re.search(r"^\s*\.(globl|text)\b", content, re.M) and re.search(r"^[\w.$]+:", content, re.M):
        return content.lstrip("\n").rstrip() + "\n"
    raise MalformedAnswer("no ```asm code block in the answer" + (": empty answer" if not content.strip() else ""))


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One model answer and its verdict. ``phase`` is ``generate``, ``repair`` or ``optimize``; ``stage`` is a
    verdict stage, ``malformed`` or ``endpoint``; ``assembly`` is None when none could be extracted; ``kept``
    says whether an optimize attempt replaced the result (``note`` says why or why not)."""

    phase: str
    stage: str
    message: str
    assembly: Optional[str]
    seconds: float
    kept: bool = False
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.stage == "ok"


@dataclasses.dataclass
class LLMResult:
    """The outcome for one module: ``assembly`` (the first correct answer, or the optimized one that replaced
    it; None if nothing passed), its ``verdict``, all ``attempts`` in order, the ``prompt`` digest used and the
    ``symbol``/name of what was lowered."""

    name: str
    symbol: Optional[str]
    prompt: str
    assembly: Optional[str] = None
    verdict: Optional[Verdict] = None
    attempts: List[Attempt] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.assembly is not None

    @property
    def rounds(self) -> int:
        """Answers until the first correct one (or all answers of the correctness phase when none passed)."""
        correctness = [a for a in self.attempts if a.phase != "optimize"]
        for i, attempt in enumerate(correctness, 1):
            if attempt.ok:
                return i
        return len(correctness)

    @property
    def repaired(self) -> bool:
        """Correct after at least one failed answer: the traces prompt refinement learns from."""
        return self.ok and self.rounds > 1

    @property
    def optimized(self) -> bool:
        return any(a.kept for a in self.attempts if a.phase == "optimize")

    def repair_pair(self) -> Tuple[Attempt, Attempt]:
        """(last failed answer with assembly, first correct answer) of a repaired trace."""
        correctness = [a for a in self.attempts if a.phase != "optimize"][:self.rounds]
        failed = [a for a in correctness[:-1] if a.assembly is not None] or correctness[:-1]
        return failed[-1], correctness[-1]

    def as_dict(self) -> dict:
        return {"name": self.name, "symbol": self.symbol, "prompt": self.prompt, "ok": self.ok,
                "rounds": self.rounds, "repaired": self.repaired, "optimized": self.optimized,
                "attempts": [{"phase": a.phase, "stage": a.stage, "message": a.message[:500],
                              "seconds": round(a.seconds, 3), "kept": a.kept, "note": a.note}
                             for a in self.attempts]}


def llm_lower(module, harness: Harness, client: ChatClient, prompt: Optional[Prompt] = None, *, repairs: int = 3,
              optimize_rounds: int = 0, margin: float = 0.05, timing_runs: int = 5, name: Optional[str] = None,
              symbol: Optional[str] = None) -> LLMResult:
    """Lower ``module`` with the model behind ``client``, verifying every answer with ``harness``.

    Args:
        repairs: failed answers fed back at most this many times (1 + repairs answers in all).
        optimize_rounds: after a correct answer, ask this many times for faster code; an answer is kept when it
            passes the harness and is faster than the current one by ``margin`` (runtime for timed tasks,
            llvm-mca cycles otherwise).
        timing_runs: process runs per runtime measurement (the median is compared).
    """
    prompt = prompt or Prompt()
    symbols = getattr(harness, "symbols", None) or ([symbol] if symbol else [])
    messages: Messages = [system(prompt.render()), user(prompt.task_message(module.text(), symbols))]
    result = LLMResult(name or module.name, symbol, prompt.digest)
    for round_number in range(repairs + 1):
        phase = "generate" if round_number == 0 else "repair"
        attempt, content = _ask(client, messages, harness, phase)
        result.attempts.append(attempt)
        if attempt.stage == "endpoint":
            return result
        if attempt.ok:
            result.assembly = attempt.assembly
            result.verdict = Verdict("ok", attempt.message, tested=harness.runs)
            messages.append(assistant(content))
            break
        if content is not None:  # the model said something: show it what was wrong with it (scrubbed, bounded)
            feedback = scrub(_feedback(attempt), workdir=harness.workdir, secrets=[client.settings.api_key or ""])
            messages += [assistant(content), user(feedback + "\n\n" + REPAIR_INSTRUCTIONS)]
    if not result.ok or optimize_rounds <= 0:
        return result
    current = _measure(harness, result.assembly, timing_runs)
    for _ in range(optimize_rounds):
        attempt, content = _ask(client, messages + [user(OPTIMIZE_INSTRUCTIONS)], harness, "optimize")
        if attempt.stage == "endpoint":
            result.attempts.append(attempt)
            break
        if attempt.ok and content is not None:
            candidate = _measure(harness, attempt.assembly, timing_runs)
            faster = candidate is not None and current is not None and _better(candidate, current, margin)
            attempt = dataclasses.replace(attempt, kept=faster,
                                          note=f"{_describe(candidate)} vs {_describe(current)}: "
                                               + ("faster, kept" if faster else "not faster, discarded"))
            if faster:
                result.assembly, current = attempt.assembly, candidate
                messages = messages + [user(OPTIMIZE_INSTRUCTIONS), assistant(content)]
        else:
            attempt = dataclasses.replace(attempt, note="incorrect, discarded")
        result.attempts.append(attempt)
    return result


def _ask(client: ChatClient, messages: Messages, harness: Harness, phase: str) -> Tuple[Attempt, Optional[str]]:
    """One answer, verified. The content is None when the endpoint sent no usable completion."""
    start = time.monotonic()
    try:
        content = client.complete(messages).content
    except LLMResponseError as exc:  # the answer is broken, not the endpoint: a failed round
        return Attempt(phase, "malformed", str(exc), None, time.monotonic() - start), None
    except LLMError as exc:
        logger.warning("LLM endpoint failed: %s", exc)
        return Attempt(phase, "endpoint", str(exc), None, time.monotonic() - start), None
    try:
        assembly = extract_assembly(content)
    except MalformedAnswer as exc:
        return Attempt(phase, "malformed", str(exc), None, time.monotonic() - start), content
    verdict = harness.check(assembly)
    return Attempt(phase, verdict.stage, verdict.message, assembly, time.monotonic() - start), content


def _feedback(attempt: Attempt) -> str:
    if attempt.stage == "malformed":
        return f"Your answer could not be used: {attempt.message}."
    return Verdict(attempt.stage, attempt.message).feedback()


def _measure(harness: Harness, assembly: str, runs: int):
    try:
        return harness.timing(assembly, runs) if harness.timed else static_cost(assembly)
    except (ToolError, NotImplementedError) as exc:
        logger.warning("cannot measure assembly: %s", exc)
        return None


def _better(candidate, current, margin: float) -> bool:
    if isinstance(candidate, Timing):
        return is_faster(candidate, current, margin)
    return candidate.cycles < current.cycles * (1.0 - margin)


def _describe(cost) -> str:
    if cost is None:
        return "unmeasured"
    if isinstance(cost, Timing):
        return f"{cost.median_ns / 1e3:.1f} us"
    return f"{cost.cycles} mca cycles"
