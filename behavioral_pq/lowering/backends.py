"""Back ends behind one interface: ``backend.lower(module, harness) -> Lowering``.

* :class:`LlcBackend` (the default): ``llc-19``. Trusted, so it is verified only when a harness is given.
* :class:`LLMBackend`: a model behind the chat-completions API with the verify-and-repair loop
  (:func:`~behavioral_pq.lowering.repair.llm_lower`); always verified, and :class:`LoweringError` when no answer
  passed.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

from behavioral_pq.artifacts import check_output_file, write_text_atomic
from behavioral_pq.core.toolchain import check_codegen_flags, llc_assembly
from behavioral_pq.errors import LoweringError
from behavioral_pq.lowering.harness import Harness, Verdict, harness_for
from behavioral_pq.lowering.llm import ChatClient, LLMSettings, load_llm_settings
from behavioral_pq.lowering.prompts import Prompt, load_prompt
from behavioral_pq.lowering.repair import Attempt, LLMResult, llm_lower
from behavioral_pq.lowering.runs import RunInput
from behavioral_pq.lowering.tasks import Task

BACKENDS = ("llc", "llm")


@dataclasses.dataclass(frozen=True)
class Lowering:
    """Assembly for one module: the ``assembly`` text (x86-64, AT&T), the ``backend`` name, the ``verdict``
    (None when not verified), the LLM ``attempts`` (empty for llc), wall ``seconds`` and the check's ``notes``
    (e.g. that it ran the program with no arguments and empty stdin; see ``Harness.notes``)."""

    assembly: str
    backend: str
    verdict: Optional[Verdict]
    attempts: Tuple[Attempt, ...] = ()
    seconds: float = 0.0
    notes: Tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        return self.verdict is not None and self.verdict.ok

    def save(self, path: Union[str, Path], *, overwrite: bool = False) -> Path:
        """Write the assembly to ``path`` all at once; a symbolic link there is refused unless ``overwrite`` (see
        :func:`~behavioral_pq.artifacts.check_output_file`)."""
        path = Path(path)
        write_text_atomic(check_output_file(path, overwrite=overwrite), self.assembly)
        return path


class LlcBackend:
    """``llc-19 -O<opt_level>`` for x86-64: ``cpu`` for functions that name none, ``fp_contract``,
    ``relocation_model``, the machine outliner (``outline``), block placement (``block_placement``) and
    :data:`~behavioral_pq.core.toolchain.CODEGEN_FLAGS` by name (``flags``) as llc takes them (see
    :func:`~behavioral_pq.core.toolchain.llc_assembly`)."""

    name = "llc"

    def __init__(self, opt_level: int = 2, cpu: Optional[str] = None, fp_contract: Optional[str] = None,
                 relocation_model: str = "pic", outline: bool = False, block_placement: bool = True,
                 flags: Sequence[str] = ()):
        if opt_level not in (0, 1, 2, 3):
            raise ValueError(f"llc optimization level must be 0..3, got {opt_level}")
        self.opt_level, self.cpu, self.fp_contract = opt_level, cpu, fp_contract
        self.relocation_model, self.outline, self.block_placement = relocation_model, outline, block_placement
        self.flags = check_codegen_flags(flags)

    def options(self) -> dict:
        """The code-generation options, as recorded in outputs."""
        return {"llc": f"-O{self.opt_level}", "cpu": self.cpu, "fp_contract": self.fp_contract or "on",
                "relocation_model": self.relocation_model, "machine_outliner": self.outline,
                "block_placement": self.block_placement, "flags": list(self.flags)}

    def lower(self, module, harness: Optional[Harness] = None) -> Lowering:
        start = time.monotonic()
        assembly = llc_assembly(module.bitcode, opt_level=self.opt_level, cpu=self.cpu, fp_contract=self.fp_contract,
                                relocation_model=self.relocation_model, outline=self.outline,
                                block_placement=self.block_placement, flags=self.flags)
        verdict = harness.check(assembly) if harness is not None else None
        return Lowering(assembly, self.name, verdict, (), time.monotonic() - start,
                        harness.notes if harness is not None else ())


class LLMBackend:
    """A chat-completions model with verify-and-repair. ``settings`` default to the environment
    (:func:`~behavioral_pq.lowering.llm.load_llm_settings`); ``prompt`` to the built-in version 1."""

    name = "llm"

    def __init__(self, settings: Optional[LLMSettings] = None, *, client: Optional[ChatClient] = None,
                 prompt: Optional[Prompt] = None, repairs: int = 3, optimize_rounds: int = 0,
                 margin: float = 0.05):
        if repairs < 0 or optimize_rounds < 0:
            raise ValueError("repairs and optimize_rounds must be non-negative")
        self.client = client or ChatClient(settings or load_llm_settings())
        self.prompt = prompt or Prompt()
        self.repairs, self.optimize_rounds, self.margin = repairs, optimize_rounds, margin

    def run(self, module, harness: Harness, *, name: Optional[str] = None,
            symbol: Optional[str] = None) -> LLMResult:
        """The loop's full result (never raises for a failed lowering; see :meth:`lower`)."""
        return llm_lower(module, harness, self.client, self.prompt, repairs=self.repairs,
                         optimize_rounds=self.optimize_rounds, margin=self.margin, name=name, symbol=symbol)

    def lower(self, module, harness: Harness) -> Lowering:
        start = time.monotonic()
        result = self.run(module, harness)
        if not result.ok:
            last = result.attempts[-1] if result.attempts else None
            raise LoweringError(f"{module.name}: no verified assembly after {len(result.attempts)} answers"
                                + (f"; last: {last.stage}: {last.message[:300]}" if last else ""), result)
        return Lowering(result.assembly, self.name, result.verdict, tuple(result.attempts),
                        time.monotonic() - start, harness.notes)


def make_backend(backend: Union[str, LlcBackend, LLMBackend] = "llc", **options):
    """A back end by name (``"llc"``, ``"llm"``) with its options, or a back end object as it is."""
    if not isinstance(backend, str):
        return backend
    if backend == "llc":
        return LlcBackend(**options)
    if backend == "llm":
        prompt = options.pop("prompt", None)
        if prompt is not None and not isinstance(prompt, Prompt):
            prompt = load_prompt(prompt)
        return LLMBackend(prompt=prompt, **options)
    raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")


def lower(module, backend: Union[str, LlcBackend, LLMBackend] = "llc", *, task: Optional[Task] = None,
          verify: Optional[bool] = None, reference=None, run_args: Sequence[str] = (), run: Optional[RunInput] = None,
          harness: Optional[Harness] = None, run_timeout: Optional[float] = None, **options) -> Lowering:
    """Lower a module to x86-64 assembly.

    Args:
        module: a :class:`~behavioral_pq.Module` (optimize it first: the back end lowers what it is given).
        backend: ``"llc"`` (default), ``"llm"``, or a back-end object; ``options`` go to its constructor
            (llc: ``opt_level``, ``cpu``; llm: ``settings``, ``prompt``, ``repairs``, ``optimize_rounds``).
        task: a task from :func:`~behavioral_pq.lowering.tasks.load_tasks` whose tests the assembly must pass.
        verify: check the result (default: always for the LLM, only with a task for llc). Without a task, a
            module with ``main`` is run against llc's build of ``reference`` (default: the module itself; pass
            the unoptimized module to check the passes too) with ``run`` (a
            :class:`~behavioral_pq.lowering.runs.RunInput`: arguments, stdin, files shown, expected exit status)
            or ``run_args`` alone; any other is assembled and its symbols checked.
        harness: a harness made beforehand (:func:`~behavioral_pq.lowering.harness.harness_for`, e.g. to run the
            reference before a long search), used instead of one made here; the caller closes it.
        run_timeout: seconds a checked run may take (default: the harness's, 10).

    Raises:
        LoweringError: the LLM produced no verified assembly. ReferenceRunError (a LoweringError): the reference
        run failed, so it cannot check anything. LLMError: the endpoint is not configured. ToolError: llc failed.
    """
    backend = make_backend(backend, **options)
    if verify is None:
        verify = backend.name != "llc" or task is not None
    if not verify and backend.name != "llc":
        raise ValueError("LLM output is always verified; verify=False is only for llc")
    if not verify:
        return backend.lower(module)
    # llc's own output is as trusted as the module it comes from: only a model's answers are size-bounded
    if harness is not None:
        return backend.lower(module, harness)
    bound = {} if backend.name == "llm" else {"max_assembly_bytes": None}
    if run_timeout is not None:
        bound["run_timeout"] = run_timeout
    with harness_for(module, task, reference=reference, args=run_args, run=run, **bound) as made:
        return backend.lower(module, made)
