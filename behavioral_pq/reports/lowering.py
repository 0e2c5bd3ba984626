"""Back ends judged on task sets (ACC, ACC+Perf, llvm-mca cost, runtime vs clang -O3), the scripted-server
scenarios that exercise the LLM path, and the report ``downstream/lowering.md``.

* ACC: the share of tasks whose assembly passes its tests.
* ACC+Perf: the share of timed tasks (kernels) whose assembly passes and is faster than ``clang-19 -O3`` of the
  same C source by the margin (median of process runs, each the fastest of the driver's repetitions).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import re
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from behavioral_pq._version import __version__
from behavioral_pq.artifacts import write_json_atomic, write_text_atomic
from behavioral_pq.core.module import load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.target import Target
from behavioral_pq.core.toolchain import llc_assembly, llvm_tool_version
from behavioral_pq.errors import BPQError, ToolError
from behavioral_pq.lowering.backends import LlcBackend, LLMBackend
from behavioral_pq.lowering.harness import TaskHarness, is_faster, static_cost
from behavioral_pq.lowering.llm import ChatClient, LLMSettings
from behavioral_pq.lowering.prompts import OPTIMIZE_INSTRUCTIONS, Prompt, refine_prompt
from behavioral_pq.lowering.speed import SPEED_CANDIDATES, SpeedBackend
from behavioral_pq.lowering.scripted import Reply, ScriptedServer
from behavioral_pq.lowering.tasks import Task, load_tasks, split_tasks

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TaskOutcome:
    """One task under one back end. Costs are llvm-mca cycles; times are medians in ns (kernels only);
    ``speedup`` is clang -O3's time over the candidate's."""

    task: str
    kind: str
    ok: bool
    stage: str
    rounds: int = 1
    mca_cycles: Optional[int] = None
    o3_mca_cycles: Optional[int] = None
    time_ns: Optional[float] = None
    o3_time_ns: Optional[float] = None
    o2_time_ns: Optional[float] = None
    faster: Optional[bool] = None
    seconds: float = 0.0
    optimized: bool = False
    build: Optional[str] = None     # the speed objective's chosen build (SpeedCandidate.label)

    @property
    def speedup(self) -> Optional[float]:
        return self.o3_time_ns / self.time_ns if self.time_ns and self.o3_time_ns else None

    @property
    def speedup_vs_o2(self) -> Optional[float]:
        return self.o2_time_ns / self.time_ns if self.time_ns and self.o2_time_ns else None


def evaluate_backend(tasks: Sequence[Task], backend, *, pipeline="O3", timing_runs: int = 5, margin: float = 0.05,
                     measure: bool = True, progress: bool = False) -> List[TaskOutcome]:
    """Lower each task's IR (optimized by ``pipeline``) with ``backend`` and judge it. A task that fails for
    any reason is recorded with its stage; the batch goes on."""
    from tqdm.auto import tqdm

    outcomes = []
    for task in tqdm(tasks, desc=f"lowering ({backend.name})", disable=not progress, unit="task"):
        start = time.monotonic()
        try:
            outcomes.append(_evaluate_one(task, backend, pipeline, timing_runs, margin, measure, start))
        except BPQError as exc:
            logger.warning("%s: %s", task.name, exc)
            outcomes.append(TaskOutcome(task.name, task.kind, False, f"error: {exc}"[:200],
                                        seconds=time.monotonic() - start))
    return outcomes


def _evaluate_one(task, backend, pipeline, timing_runs, margin, measure, start) -> TaskOutcome:
    module = task.module(pipeline)
    with TaskHarness(task) as harness:
        if isinstance(backend, LLMBackend):
            result = backend.run(module, harness, name=task.name, symbol=task.symbol)
            assembly, rounds, optimized = result.assembly, result.rounds, result.optimized
            stage = "ok" if result.ok else (result.attempts[-1].stage if result.attempts else "endpoint")
        else:
            lowering = backend.lower(module, harness)
            assembly, rounds, optimized, stage = lowering.assembly, 1, False, lowering.verdict.stage
        ok = stage == "ok"
        build = backend.last.chosen.label if isinstance(backend, SpeedBackend) and backend.last else None
        outcome = TaskOutcome(task.name, task.kind, ok, stage, rounds, optimized=optimized, build=build)
        if not (ok and measure):
            return dataclasses.replace(outcome, seconds=time.monotonic() - start)
        try:
            outcome = dataclasses.replace(outcome, mca_cycles=static_cost(assembly).cycles,
                                          o3_mca_cycles=static_cost(harness.baseline_assembly()).cycles)
        except ToolError as exc:
            logger.warning("%s: llvm-mca: %s", task.name, exc)
        if task.timed:
            mine, baselines = harness.compare_timings(assembly, timing_runs, levels=("O3", "O2"))
            baseline, o2 = baselines["O3"], baselines["O2"]
            outcome = dataclasses.replace(outcome, time_ns=mine.median_ns, o3_time_ns=baseline.median_ns,
                                          o2_time_ns=o2.median_ns, faster=is_faster(mine, baseline, margin))
    return dataclasses.replace(outcome, seconds=time.monotonic() - start)


def summarize(outcomes: Sequence[TaskOutcome]) -> Dict:
    """ACC, ACC+Perf, mean rounds, geomean mca-cycle ratio and runtime speedup against clang -O3."""
    timed = [o for o in outcomes if o.kind == "kernel"]
    ratios = [o.mca_cycles / o.o3_mca_cycles for o in outcomes if o.mca_cycles and o.o3_mca_cycles]
    speedups = [o.speedup for o in outcomes if o.speedup]
    vs_o2 = [o.speedup_vs_o2 for o in outcomes if o.speedup_vs_o2]
    return {
        "tasks": len(outcomes), "correct": sum(o.ok for o in outcomes),
        "acc": _share(sum(o.ok for o in outcomes), len(outcomes)),
        "timed": len(timed), "faster_than_o3": sum(bool(o.ok and o.faster) for o in timed),
        "acc_perf": _share(sum(bool(o.ok and o.faster) for o in timed), len(timed)),
        "mean_rounds": round(statistics.mean(o.rounds for o in outcomes), 3) if outcomes else None,
        "geomean_mca_ratio_vs_o3": _geomean(ratios), "geomean_speedup_vs_o3": _geomean(speedups),
        "geomean_speedup_vs_o2": _geomean(vs_o2),
        "slower_than_o2_by_5pct": sorted(o.task for o in timed if o.speedup_vs_o2 and o.speedup_vs_o2 < 1 / 1.05),
        "stages": {s: sum(o.stage == s for o in outcomes) for s in sorted({o.stage for o in outcomes})},
        "builds": dict(Counter(o.build for o in timed if o.build).most_common()),
    }


def _share(k: int, n: int) -> Optional[float]:
    return round(k / n, 4) if n else None


def _geomean(values: Sequence[float]) -> Optional[float]:
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return round(float(statistics.geometric_mean(values)), 4)


# -- scripted "models" for the LLM path ------------------------------------------------------------------------

_IR_BLOCK = re.compile(r"```llvm\n(.*?)```", re.S)


def _module_in(body: Dict):
    first = next(m["content"] for m in body["messages"] if m["role"] == "user")
    match = _IR_BLOCK.search(first)
    return load_module(match.group(1) if match else "", name="request")


def _global_labels(assembly: str) -> List[str]:
    return re.findall(r"^\s*\.globl\s+([\w.$]+)", assembly, re.M)


def _insert_at_entry(assembly: str, lines: str) -> str:
    for label in _global_labels(assembly):
        assembly = re.sub(rf"^({re.escape(label)}:.*)$", lambda m: m.group(1) + "\n" + lines, assembly,
                          count=1, flags=re.M)
    return assembly


def syntax_error(assembly: str) -> str:
    """A broken answer: an instruction the assembler rejects at every function's entry."""
    return _insert_at_entry(assembly, "\tmovq\t%rax, %%rbx")


def wrong_code(assembly: str) -> str:
    """An answer that assembles but computes something else: the first integer argument halved and the first
    floating-point argument doubled at each function's entry."""
    return _insert_at_entry(assembly, "\tshrq\t%rdi\n\taddsd\t%xmm0, %xmm0")


def fenced(assembly: str) -> str:
    return f"Here is the assembly.\n\n```asm\n{assembly}```\n"


class ScenarioModel:
    """A scripted model for the loopback server: per conversation it plays ``plan``, a list of answer kinds
    (``correct``, ``syntax``, ``wrong``, ``prose``, ``slow``, ``429``, ``500``, ``bad-json``, ``slow-correct``),
    the last repeated; an optimization request gets ``llc -O3`` of the module (correct, usually faster), a lesson
    or review request gets ``lessons`` / ``review``. ``heed`` maps a lesson substring to a plan used instead
    when the system prompt contains it (a model that learns from the prompt)."""

    def __init__(self, plan: Sequence[str], *, slow_seconds: float = 2.0, lessons: str = "", review: str = "",
                 heed: Optional[Dict[str, Sequence[str]]] = None, correct_opt_level: int = 0):
        self.plan, self.slow_seconds = list(plan), slow_seconds
        self.lessons, self.review, self.heed = lessons, review, dict(heed or {})
        self.correct_opt_level = correct_opt_level
        self.turns: Dict[str, int] = {}

    def __call__(self, body: Dict) -> Reply:
        messages = body["messages"]
        last = messages[-1]["content"]
        if "LESSON:" in last:
            return Reply(self.lessons)
        if "KEEP" in last and "DROP" in last:
            return Reply(self.review)
        first = next(m["content"] for m in messages if m["role"] == "user")
        turn = sum(m["role"] == "assistant" for m in messages)
        key = f"{hash(first)}:{turn}"  # one conversation turn: a second request for it is the client's retry
        plan = self.plan
        for lesson, heeded in self.heed.items():
            if lesson in messages[0]["content"]:
                plan = list(heeded)
        if OPTIMIZE_INSTRUCTIONS in last:
            module = _module_in(body)

            return Reply(fenced(llc_assembly(optimize(module, "O3").bitcode, opt_level=3)))
        count = self.turns[key] = self.turns.get(key, 0) + 1
        kind = plan[min(turn, len(plan) - 1)]
        if kind in ("429", "500", "bad-json", "slow") and count > 1:  # the client's retry of the same turn
            kind = "correct"
        if kind == "429":
            return Reply(status=429, retry_after=0)
        if kind == "500":
            return Reply(status=500)
        if kind == "bad-json":
            return Reply(raw=b"<html>gateway hiccup</html>")
        if kind == "slow":
            return Reply(fenced(self._correct(body)), delay=self.slow_seconds)
        if kind == "prose":
            return Reply("I would translate this module by first allocating registers for each value...")
        assembly = self._correct(body)
        return Reply(fenced({"correct": assembly, "syntax": syntax_error(assembly),
                             "wrong": wrong_code(assembly)}[kind]))

    def _correct(self, body: Dict) -> str:
        return llc_assembly(_module_in(body).bitcode, opt_level=self.correct_opt_level)


#: The scenarios of the report: name -> (plan, what it shows).
SCENARIOS = {
    "correct": (["correct"], "a correct first answer"),
    "syntax-then-fix": (["syntax", "correct"], "assembler error fed back, then fixed"),
    "wrong-then-fix": (["wrong", "correct"], "wrong output (or a crash) fed back, then fixed"),
    "prose-then-fix": (["prose", "correct"], "an answer without a code block, then fixed"),
    "rate-limited": (["429", "correct"], "HTTP 429 with Retry-After, retried by the client"),
    "server-error": (["500", "correct"], "HTTP 500, retried by the client"),
    "bad-json": (["bad-json", "correct"], "a body that is not a chat completion: a failed round"),
    "slow": (["slow", "correct"], "an answer slower than the client timeout, retried"),
    "always-wrong": (["wrong"], "never correct: gives up after 1 + repairs answers"),
}


def run_scenarios(tasks: Sequence[Task], *, repairs: int = 3, pipeline="O3", client_timeout: float = 1.0,
                  progress: bool = False, scenarios: Optional[Sequence[str]] = None) -> Dict[str, Dict]:
    """Run each scenario's scripted model over ``tasks`` through the real HTTP client and repair loop."""
    report = {}
    for name in scenarios or SCENARIOS:
        plan, _ = SCENARIOS[name]
        model = ScenarioModel(plan, slow_seconds=client_timeout + 1.0)
        with ScriptedServer(model) as server:
            client = ChatClient(LLMSettings(base_url=server.base_url, timeout=client_timeout, retries=2, backoff=0))
            backend = LLMBackend(client=client, repairs=repairs)
            outcomes = evaluate_backend(tasks, backend, pipeline=pipeline, measure=False, progress=progress)
            passed_first = [o.task for o in outcomes if o.ok and o.rounds == 1]
            report[name] = {**summarize(outcomes), "requests": len(server.requests),
                            "first_answer_ok": passed_first if len(passed_first) < len(outcomes) else "all",
                            "http_tries": client.requests_sent,
                            "rounds_histogram": _histogram(o.rounds for o in outcomes)}
    return report


def run_optimization_scenario(tasks: Sequence[Task], *, rounds: int = 1, pipeline="O3", timing_runs: int = 5,
                              progress: bool = False) -> Dict:
    """A model whose first answer is ``llc -O0`` code (correct, slow) and whose optimization answer is ``llc
    -O3`` of the -O3 module: the phase must keep the faster code and judge it against clang -O3."""
    model = ScenarioModel(["correct"], correct_opt_level=0)
    with ScriptedServer(model) as server:
        client = ChatClient(LLMSettings(base_url=server.base_url, timeout=30, retries=1, backoff=0))
        backend = LLMBackend(client=client, repairs=1, optimize_rounds=rounds)
        outcomes = evaluate_backend(tasks, backend, pipeline=pipeline, timing_runs=timing_runs, progress=progress)
    return {**summarize(outcomes), "optimized": sum(o.optimized for o in outcomes)}


LESSON_TEXT = ("Check every instruction's operand syntax: registers take a single % sign in AT&T syntax.")


def run_refinement_scenario(tasks: Sequence[Task], *, repairs: int = 3, pipeline="O3", seed: int = 0,
                            progress: bool = False) -> Dict:
    """Prompt refinement end to end on the scripted server: on the train half, a model that makes a syntax
    error first; lessons proposed from its repaired traces (one general, one naming a program, one the review
    drops); the refined prompt judged on the held-out half against a model that heeds the kept lesson."""
    train, held_out = split_tasks(tasks, held_out=0.5, seed=seed)
    named = train[0].symbol if train else "main"
    lessons = (f"LESSON: {LESSON_TEXT}\nLESSON: In {named}, keep the loop counter in a callee-saved register.\n"
               "LESSON: Always add comments to every line of the assembly output for readability.")
    review = "1: KEEP\n2: DROP"
    model = ScenarioModel(["syntax", "correct"], lessons=lessons, review=review, heed={LESSON_TEXT: ["correct"]})
    with ScriptedServer(model) as server:
        client = ChatClient(LLMSettings(base_url=server.base_url, timeout=30, retries=1, backoff=0))
        base = Prompt()
        def run(tasks, prompt):
            return run_tasks(tasks, LLMBackend(client=client, prompt=prompt, repairs=repairs), pipeline=pipeline,
                             progress=progress)

        refinement = refine_prompt(base, run(train, base), client)
        before, after = run(held_out, base), run(held_out, refinement.prompt)
    return {"train_tasks": len(train), "held_out_tasks": len(held_out), "traces_used": refinement.traces_used,
            "proposed": list(refinement.proposed), "kept": list(refinement.kept),
            "rejected": [list(r) for r in refinement.rejected],
            "prompt_versions": [base.version, refinement.prompt.version],
            "prompt_parent": refinement.prompt.parent, "prompt": refinement.prompt.to_json(),
            "held_out_before": {"acc": _share(sum(r.ok for r in before), len(before)),
                                "mean_rounds": statistics.mean(r.rounds for r in before) if before else None},
            "held_out_after": {"acc": _share(sum(r.ok for r in after), len(after)),
                               "mean_rounds": statistics.mean(r.rounds for r in after) if after else None}}


def run_tasks(tasks: Sequence[Task], backend: LLMBackend, *, pipeline="O3", progress: bool = False) -> List:
    """The LLM loop's full result (:class:`~behavioral_pq.lowering.repair.LLMResult`) for each task, with the
    backend's prompt: the traces prompt refinement learns from, and how a prompt is judged."""
    from tqdm.auto import tqdm

    results = []
    for task in tqdm(tasks, desc=f"prompt v{backend.prompt.version}", disable=not progress, unit="task"):
        with TaskHarness(task) as harness:
            results.append(backend.run(task.module(pipeline), harness, name=task.name, symbol=task.symbol))
    return results


def pipeline_label(pipeline: str) -> str:
    """How a report names an IR pipeline: ``opt:O3`` -> "opt-19 -O3", ``target:O3`` -> "-O3 (target mode, host)",
    ``Oz`` -> "-Oz"."""
    if pipeline.startswith("opt:"):
        return f"opt-19 -{pipeline[4:]}"
    if pipeline.startswith("target:"):
        return f"-{pipeline[7:]} (target mode, host)"
    return f"-{pipeline}"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (the machine timings were taken on)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


#: The IR pipelines the lowering report compares by default: measure-mode -O3 and -Oz, opt-19 -O3, target-mode
#: -O3 for the host, and the speed objective.
DEFAULT_PIPELINES = ("O3", "Oz", "opt:O3", "target:O3", "speed")


def evaluate_lowering(out: Path, *, tasks: str = "all", pipelines: Sequence[str] = DEFAULT_PIPELINES,
                      timing_runs: int = 5, margin: float = 0.05, repairs: int = 3, llm: Optional[LLMBackend] = None,
                      scripted: bool = True, command: str = "", progress: bool = False) -> Tuple[Dict, Path]:
    """Evaluate llc (after each of ``pipelines``) and, when given, the ``llm`` back end on a task set, run the
    scripted-server scenarios unless ``scripted`` is False, and write the report into ``out``.

    Args:
        tasks: "functions", "kernels", "all" or a task-set .json.
        pipelines: IR pipelines before lowering: bpq passes ("O3", measure mode), "target:O3" (target mode on
            the host, llc -O3), "opt:LEVEL" for opt-19, or "speed" for the speed objective
            (:class:`~behavioral_pq.lowering.speed.SpeedBackend`).
        command: the command line that reproduces the report (recorded in it).
    Returns:
        (the report as a dict, the path of ``lowering.md``).
    """
    start = time.monotonic()
    task_list = load_tasks(tasks)
    report: Dict = {"meta": {}, "backends": {}, "scenarios": {}}
    outcomes: Dict[str, List[TaskOutcome]] = {}
    for pipeline in pipelines:
        if pipeline == "speed":  # the speed objective: -O3 unless a checked build is faster beyond the spread
            config = "speed objective: -O3 unless faster beyond the spread, of " + \
                ", ".join(c.label for c in SPEED_CANDIDATES) + " (target-mode -O3 and llc -O3 unless -O2 is named)"
            outcomes[config] = evaluate_backend(task_list, SpeedBackend(runs=timing_runs), pipeline=None,
                                                timing_runs=timing_runs, margin=margin, progress=progress)
            report["backends"][config] = summarize(outcomes[config])
            continue
        if pipeline.startswith("target:"):  # the speed objective: target mode on the host, llc -O3 for its CPU
            backend = LlcBackend(opt_level=3, cpu=Target.host().cpu)
            config = f"llc -O3 -mcpu={backend.cpu} on {pipeline_label(pipeline)} IR"
        else:
            backend = LlcBackend(opt_level=2)
            config = f"llc -O2 on {pipeline_label(pipeline)} IR"
        outcomes[config] = evaluate_backend(task_list, backend, pipeline=pipeline,
                                            timing_runs=timing_runs, margin=margin, progress=progress)
        report["backends"][config] = summarize(outcomes[config])
    if llm is not None:
        config = f"llm ({llm.client.settings.model}) on {pipeline_label(pipelines[0])} IR"
        outcomes[config] = evaluate_backend(task_list, llm, pipeline=pipelines[0], timing_runs=timing_runs,
                                            margin=margin, progress=progress)
        report["backends"][config] = summarize(outcomes[config])
        report["llm"] = {"model": llm.client.settings.model, "summary": report["backends"][config]}
    if scripted:
        report["scenarios"] = run_scenarios(task_list, repairs=repairs, progress=progress)
        kernels = [t for t in task_list if t.timed]
        report["optimization"] = run_optimization_scenario(kernels, timing_runs=timing_runs, progress=progress)
        report["refinement"] = run_refinement_scenario(task_list, repairs=repairs, progress=progress)
    report["meta"] = {"command": command, "version": __version__, "llvm": llvm_tool_version("llc"),
                      "machine": f"{platform.machine()}, {cpu_name()}",
                      "tasks": f"{tasks} ({len(task_list)}: {sum(not t.timed for t in task_list)} functions, "
                               f"{sum(t.timed for t in task_list)} kernels)",
                      "margin": margin, "timing_runs": timing_runs, "seconds": time.monotonic() - start}
    return report, write_report(Path(out), report, outcomes)


def _histogram(values) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for v in values:
        counts[str(v)] = counts.get(str(v), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: int(kv[0])))


def write_report(out: Path, report: Dict, outcomes: Dict[str, List[TaskOutcome]]) -> Path:
    """``lowering.md``, ``lowering.json`` and ``lowering_per_task.jsonl`` into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "lowering.json", report)
    write_text_atomic(out / "lowering_per_task.jsonl", "".join(
        json.dumps({"config": config, **dataclasses.asdict(row), "speedup": row.speedup}) + "\n"
        for config, rows in outcomes.items() for row in rows))
    path = write_text_atomic(out / "lowering.md", render_markdown(report, outcomes))
    return path


def _fmt(value, spec=".3f") -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: Dict, outcomes: Dict[str, List[TaskOutcome]]) -> str:
    meta = report["meta"]
    lines = ["# Lowering: llc and the LLM path", "",
             f"Generated by `{meta['command']}` on {meta['machine']} (LLVM {meta['llvm']}, behavioral_pq "
             f"{meta['version']}). Task sets: {meta['tasks']}.", "",
             "ACC is the share of tasks whose assembly passes the task's tests; ACC+Perf the share of kernels whose "
             f"assembly passes and runs faster than `clang-19 -O3` of the same C source by more than "
             f"{meta['margin']:.0%} (median of {meta['timing_runs']} rounds, each running the candidate and clang's "
             "-O3 and -O2 builds once, interleaved; each run the fastest of the driver's repetitions). mca ratio: llvm-mca-19 cycles (skylake model) over those of clang -O3's assembly; "
             "speedup: clang -O3 time over the candidate's; both geometric means. llvm-mca reads the whole listing "
             "as one straight-line block, so its cycles measure the size and throughput of the code as written, "
             "not time per loop iteration: vectorized, unrolled code scores worse there while running faster.", "",
             "## Back ends on the task sets", "",
             "| configuration | tasks | ACC | ACC+Perf (kernels) | geomean mca ratio | geomean speedup vs -O3 "
             "| vs -O2 | kernels > 5% slower than -O2 |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for config, summary in report["backends"].items():
        slow = summary.get("slower_than_o2_by_5pct")
        lines.append(f"| {config} | {summary['tasks']} | {_fmt(summary['acc'])} | "
                     f"{_fmt(summary['acc_perf'])} ({summary['faster_than_o3']}/{summary['timed']}) | "
                     f"{_fmt(summary['geomean_mca_ratio_vs_o3'])} | {_fmt(summary['geomean_speedup_vs_o3'])} | "
                     f"{_fmt(summary.get('geomean_speedup_vs_o2'))} | "
                     f"{(', '.join(slow) or 'none') if slow is not None else '-'} |")
    for config, summary in report["backends"].items():
        if summary.get("builds"):
            lines += ["", f"Builds `{config.split(':')[0]}` chose for the kernels: "
                      + ", ".join(f"{label} {n}" for label, n in summary["builds"].items()) + "."]
    first = next(iter(outcomes))
    lines += ["", f"Kernels under `{first}`:", "", "| kernel | ok | time (us) | clang -O3 (us) | speedup | mca cycles | "
              "clang -O3 mca |", "|---|---|---:|---:|---:|---:|---:|"]
    for o in outcomes[first]:
        if o.kind == "kernel":
            lines.append(f"| {o.task} | {'yes' if o.ok else o.stage} | {_fmt(o.time_ns and o.time_ns / 1e3, '.1f')} | "
                         f"{_fmt(o.o3_time_ns and o.o3_time_ns / 1e3, '.1f')} | {_fmt(o.speedup, '.2f')} | "
                         f"{_fmt(o.mca_cycles, 'd')} | {_fmt(o.o3_mca_cycles, 'd')} |")
    llm = report.get("llm")
    if llm:
        lines += ["", "## A real model endpoint", "",
                  f"Model `{llm['model']}`: ACC {_fmt(llm['summary']['acc'])}, ACC+Perf "
                  f"{_fmt(llm['summary']['acc_perf'])}, mean rounds {_fmt(llm['summary']['mean_rounds'], '.2f')}."]
    else:
        lines += ["", "## A real model endpoint", "",
                  "None was configured for this run (none is reachable where the report is built). Set "
                  "`BPQ_LLM_BASE_URL` (and `BPQ_LLM_MODEL`, `BPQ_LLM_API_KEY`) and run the same command with "
                  "`--llm`: the table above gains an `llm` row with its ACC and ACC+Perf."]
    lines += ["", "## The LLM path on the scripted loopback server", "",
              "A real HTTP server on 127.0.0.1 answers chat completions from a script; the client, the repair loop "
              "and the harness are the production ones. The scripted model's correct answer is llc's assembly of "
              "the IR it is sent; its mistakes are made from it (an instruction the assembler rejects; the first "
              "integer argument halved and the first floating-point argument doubled at entry).", "",
              "| scenario | what it shows | ACC | mean answers | answers histogram | HTTP tries | stages |",
              "|---|---|---:|---:|---|---:|---|"]
    for name, row in report["scenarios"].items():
        stages = ", ".join(f"{k} {v}" for k, v in row["stages"].items())
        lines.append(f"| {name} | {SCENARIOS[name][1]} | {_fmt(row['acc'])} | {_fmt(row['mean_rounds'], '.2f')} | "
                     f"{row['rounds_histogram']} | {row['http_tries']} | {stages} |")
    for name, row in report["scenarios"].items():
        first = row.get("first_answer_ok")
        if SCENARIOS[name][0][0] in ("syntax", "wrong", "prose", "bad-json") and first and first != "all":
            lines.append(f"\nIn `{name}`, the first (mutated) answer still passed on: {', '.join(first)} (the "
                         "mutation does not change what the tests print there).")
    opt = report.get("optimization")
    if opt:
        lines += ["", "### Optimization phase", "",
                  f"First answer `llc -O0` (correct, slow), then one request for faster code answered with `llc -O3` "
                  f"of the -O3 module: {opt['optimized']} of {opt['tasks']} results replaced by the faster answer "
                  f"(kept only when still correct and faster by the margin); ACC {_fmt(opt['acc'])}, ACC+Perf "
                  f"{_fmt(opt['acc_perf'])} ({opt['faster_than_o3']}/{opt['timed']} kernels faster than clang -O3), "
                  f"geomean speedup vs -O3 {_fmt(opt['geomean_speedup_vs_o3'])}."]
    ref = report.get("refinement")
    if ref:
        counts: Dict[tuple, int] = {}
        for lesson, why in ref["rejected"]:
            counts[(lesson, why)] = counts.get((lesson, why), 0) + 1
        rejected = "; ".join(f"\"{lesson}\" ({why}, {n}x)" for (lesson, why), n in counts.items())
        lines += ["", "### Prompt refinement", "",
                  f"Train half: {ref['train_tasks']} tasks, a model that first makes a syntax error; "
                  f"{ref['traces_used']} repaired traces. Proposed {len(ref['proposed'])} lessons; kept "
                  f"{len(ref['kept'])}: {ref['kept']}; rejected: {rejected}. Prompt v{ref['prompt_versions'][0]} -> "
                  f"v{ref['prompt_versions'][1]} (parent {ref['prompt_parent']}).", "",
                  f"Held-out half ({ref['held_out_tasks']} tasks), with a model that avoids the mistake when the "
                  f"prompt carries the lesson: mean answers {_fmt(ref['held_out_before']['mean_rounds'], '.2f')} "
                  f"with v1, {_fmt(ref['held_out_after']['mean_rounds'], '.2f')} with the refined prompt (ACC "
                  f"{_fmt(ref['held_out_before']['acc'])} -> {_fmt(ref['held_out_after']['acc'])}). This shows the "
                  "mechanism works end to end; what a real model learns must be measured against a real endpoint."]
    lines += ["", f"Wall time: {meta['seconds']:.0f} s.", ""]
    return "\n".join(lines)

