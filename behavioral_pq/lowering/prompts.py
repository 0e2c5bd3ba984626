"""Versioned prompts for LLM lowering, and their refinement from repair traces (as NeuComBack does).

A :class:`Prompt` is fixed instructions plus a list of *lessons*. :func:`refine_prompt` takes traces that failed and
were then repaired, asks the model for general lessons, filters them (length, duplicates, names of the programs
they came from), asks the model to review the survivors (KEEP / DROP each), and merges the kept ones into a new
version whose ``parent`` is the old prompt's digest. Judge a prompt on held-out tasks with
:func:`behavioral_pq.reports.lowering.evaluate_backend`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from behavioral_pq.artifacts import read_json_bounded, write_json_atomic
from behavioral_pq.lowering.llm import ChatClient, system, user

logger = logging.getLogger(__name__)

PROMPT_FORMAT = 1
MAX_LESSON_CHARS = 300
MIN_LESSON_CHARS = 15

BASE_INSTRUCTIONS = """\
You are a compiler back end. Translate the LLVM IR module you are given into x86-64 assembly for Linux
(AT&T syntax, as GNU as and clang's integrated assembler read it, System V AMD64 calling convention).
The assembly is assembled, linked with a test driver and run; it must define every function the module defines,
with the same names, global visibility and behaviour, and it must not call functions the module does not call.
Use position-independent code: reach data with RIP-relative addressing and call external functions through @PLT.
Answer with the complete assembly file in one ```asm code block and nothing after it."""

REPAIR_INSTRUCTIONS = ("Return the complete corrected assembly file in one ```asm code block. "
                       "Fix the cause, not the symptom; keep what already worked.")

OPTIMIZE_INSTRUCTIONS = ("The assembly above is correct. Make it faster on a modern x86-64 CPU (SSE2 only, no AVX) "
                         "without changing its behaviour on any input. Return the complete file in one ```asm "
                         "code block.")


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A versioned system prompt: ``instructions`` plus numbered ``lessons``. ``parent`` is the digest of the
    prompt this one was refined from (None for the first)."""

    instructions: str = BASE_INSTRUCTIONS
    lessons: Tuple[str, ...] = ()
    version: int = 1
    parent: Optional[str] = None

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps([self.instructions, list(self.lessons)]).encode()).hexdigest()[:16]

    def render(self) -> str:
        """The system message."""
        if not self.lessons:
            return self.instructions
        lessons = "\n".join(f"{i}. {lesson}" for i, lesson in enumerate(self.lessons, 1))
        return f"{self.instructions}\n\nLessons from earlier repairs:\n{lessons}"

    def task_message(self, module_text: str, symbols: Sequence[str] = ()) -> str:
        """The first user message: the IR, and the symbols the assembly must define."""
        must = f"\nThe assembly must define: {', '.join(symbols)}." if symbols else ""
        return f"Translate this LLVM IR module to x86-64 assembly.{must}\n\n```llvm\n{module_text.strip()}\n```"

    def to_json(self) -> Dict:
        return {"format": PROMPT_FORMAT, "version": self.version, "digest": self.digest, "parent": self.parent,
                "instructions": self.instructions, "lessons": list(self.lessons)}

    def save(self, directory: Union[str, Path]) -> Path:
        """Write ``prompt-v<version>.json`` into ``directory``; versions already there are never overwritten
        with different text."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"prompt-v{self.version}.json"
        if path.exists() and json.loads(path.read_text()).get("digest") != self.digest:
            raise FileExistsError(f"{path} holds a different prompt; versions are immutable")
        write_json_atomic(path, self.to_json(), indent=2)
        return path


def load_prompt(path: Union[str, Path, None] = None) -> Prompt:
    """A prompt file written by :meth:`Prompt.save`, or a folder (its highest version); None is the built-in
    version 1. Raises FileNotFoundError or ValueError for a missing or malformed file."""
    if path is None:
        return Prompt()
    path = Path(path)
    if path.is_dir():
        versions = sorted(path.glob("prompt-v*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
        if not versions:
            raise FileNotFoundError(f"{path}: no prompt-v*.json")
        path = versions[-1]
    if not path.is_file():
        raise FileNotFoundError(f"no such prompt file: {path}")
    data = read_json_bounded(path, what="prompt file", error=ValueError)
    try:
        prompt = Prompt(str(data["instructions"]), tuple(str(x) for x in data.get("lessons", [])),
                        int(data["version"]), data.get("parent"))
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a prompt file ({exc})") from None
    if data.get("format") != PROMPT_FORMAT:
        raise ValueError(f"{path}: prompt format {data.get('format')!r}, this library reads {PROMPT_FORMAT}")
    if data.get("digest") not in (None, prompt.digest):
        raise ValueError(f"{path}: digest does not match the text (edited by hand? bump the version instead)")
    return prompt


@dataclasses.dataclass(frozen=True)
class Refinement:
    """What :func:`refine_prompt` did: the new ``prompt``, the lessons ``proposed`` by the model, those
    ``rejected`` with the reason (``(lesson, reason)``), and those ``kept``."""

    prompt: Prompt
    traces_used: int
    proposed: Tuple[str, ...]
    rejected: Tuple[Tuple[str, str], ...]
    kept: Tuple[str, ...]


LESSON_REQUEST = """\
An attempt to translate LLVM IR to x86-64 assembly failed, and a later attempt fixed it.

Failure ({stage}):
{message}

Failing assembly (excerpt):
```asm
{failed}
```

Corrected assembly (excerpt):
```asm
{fixed}
```

State up to three general lessons that would have avoided the failure for any program, one per line, each
starting with "LESSON:". Do not mention this program's function or variable names."""

REVIEW_REQUEST = """\
Review these candidate lessons for a system prompt that makes a model translate LLVM IR to x86-64 assembly.
Keep a lesson only if it is correct, general (not about one program) and not redundant with the others or with
the existing lessons. Answer one line per lesson, "<number>: KEEP" or "<number>: DROP".

Existing lessons:
{existing}

Candidates:
{candidates}"""


def refine_prompt(prompt: Prompt, results: Sequence, client: ChatClient, *, max_lessons: int = 12,
                  excerpt_lines: int = 60) -> Refinement:
    """A new prompt version from the repaired traces in ``results`` (:class:`~behavioral_pq.lowering.repair
    .LLMResult` objects; those that failed and then passed are used). Returns the old prompt unchanged (same
    version) when no lesson survives. ``max_lessons`` caps the list; the oldest lessons go first."""
    repaired = [r for r in results if r.repaired]
    proposed: List[str] = []
    avoid = {r.symbol.lower() for r in repaired if getattr(r, "symbol", None)}
    for result in repaired:
        failed, fixed = result.repair_pair()
        request = LESSON_REQUEST.format(stage=failed.stage, message=failed.message[:1500],
                                        failed=_excerpt(failed.assembly, excerpt_lines),
                                        fixed=_excerpt(fixed.assembly, excerpt_lines))
        answer = client.complete([system("You write short, general lessons for compiler engineers."),
                                  user(request)]).content
        proposed.extend(m.strip() for m in re.findall(r"^\s*[-*\d.)\s]*LESSON:\s*(.+)$", answer, re.M))
    rejected: List[Tuple[str, str]] = []
    candidates: List[str] = []
    seen = {_normal(lesson) for lesson in prompt.lessons}
    for lesson in proposed:
        reason = None
        if not MIN_LESSON_CHARS <= len(lesson) <= MAX_LESSON_CHARS:
            reason = "length"
        elif _normal(lesson) in seen:
            reason = "duplicate"
        elif any(re.search(rf"\b{re.escape(name)}\b", lesson.lower()) for name in avoid):
            reason = "names a program"
        if reason:
            rejected.append((lesson, reason))
        else:
            seen.add(_normal(lesson))
            candidates.append(lesson)
    kept: List[str] = []
    if candidates:
        review = client.complete([system("You review prompt lessons strictly."), user(REVIEW_REQUEST.format(
            existing="\n".join(f"- {x}" for x in prompt.lessons) or "(none)",
            candidates="\n".join(f"{i}. {c}" for i, c in enumerate(candidates, 1))))]).content
        verdicts = {int(n): v.upper() for n, v in re.findall(r"^\s*(\d+)\s*[:.)-]\s*(KEEP|DROP)\b", review,
                                                              re.M | re.I)}
        for i, lesson in enumerate(candidates, 1):
            if verdicts.get(i) == "KEEP":
                kept.append(lesson)
            else:
                rejected.append((lesson, "dropped in review" if i in verdicts else "not reviewed"))
    if not kept:
        new = prompt
    else:
        lessons = (list(prompt.lessons) + kept)[-max_lessons:]
        new = Prompt(prompt.instructions, tuple(lessons), prompt.version + 1, prompt.digest)
    logger.info("prompt refinement: %d traces, %d proposed, %d kept", len(repaired), len(proposed), len(kept))
    return Refinement(new, len(repaired), tuple(proposed), tuple(rejected), tuple(kept))


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", "", text.lower()).split())


def _excerpt(text: Optional[str], lines: int) -> str:
    rows = (text or "(none)").splitlines()
    return "\n".join(rows[:lines] + ([f"... ({len(rows) - lines} more lines)"] if len(rows) > lines else []))
