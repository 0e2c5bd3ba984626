"""Lowering optimized IR to x86-64 assembly: ``llc-19`` or an LLM with a verify-and-repair loop.

Layers, each importing only the ones above it in this list:

* :mod:`~behavioral_pq.lowering.tasks`: task sets (C functions with cases, loop kernels with a timing driver);
* :mod:`~behavioral_pq.lowering.runs`: what a checked program is run with (the files shown to it) and leaves;
* :mod:`~behavioral_pq.lowering.harness`: assemble, link, run, compare; llvm-mca cost; runtime vs clang -O3;
* :mod:`~behavioral_pq.lowering.llm`: the chat-completions client (settings, timeouts, retries);
* :mod:`~behavioral_pq.lowering.prompts`: versioned prompts and their refinement from repair traces;
* :mod:`~behavioral_pq.lowering.repair`: the verify-and-repair loop and the optimization phase;
* :mod:`~behavioral_pq.lowering.backends`: ``lower(module, backend=...)``;
* :mod:`~behavioral_pq.reports.lowering`: ACC / ACC+Perf over a task set, and the report;
* :mod:`~behavioral_pq.lowering.scripted`: a loopback chat-completions server answering from a script.

Example::

    >>> from behavioral_pq import load_module, optimize
    >>> from behavioral_pq.lowering import lower, load_tasks
    >>> task = load_tasks("functions", names=["gcd"])[0]
    >>> result = lower(optimize(task.module(), "Oz"), "llc", task=task)
    >>> result.verified, ".globl\\tgcd" in result.assembly
    (True, True)
"""

from behavioral_pq.lowering.backends import BACKENDS, LlcBackend, LLMBackend, Lowering, lower, make_backend
from behavioral_pq.lowering.runs import RunInput
from behavioral_pq.lowering.tasks import Task, load_tasks, split_tasks

__all__ = ["BACKENDS", "LLMBackend", "LlcBackend", "Lowering", "RunInput", "Task", "load_tasks", "lower",
           "make_backend", "split_tasks"]
