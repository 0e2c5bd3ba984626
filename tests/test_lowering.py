"""Lowering: task sets, the verification harness, llc, and the LLM path against a real loopback HTTP server
answering scripted completions (no test needs the internet)."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import EXAMPLES

from behavioral_pq.core.module import load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import llc_assembly
from behavioral_pq.errors import LLMError, LLMResponseError, LLMTimeoutError, LoweringError, MalformedAnswer, TaskError
from behavioral_pq.lowering import load_tasks, lower, split_tasks
from behavioral_pq.lowering.backends import LLMBackend
from behavioral_pq.lowering.harness import (
    ProgramHarness,
    SymbolHarness,
    TaskHarness,
    Timing,
    compare_outputs,
    is_faster,
    static_cost,
)
from behavioral_pq.lowering.llm import ChatClient, LLMSettings, load_llm_settings, user
from behavioral_pq.lowering.prompts import Prompt, load_prompt, refine_prompt
from behavioral_pq.lowering.repair import extract_assembly, llm_lower
from behavioral_pq.lowering.scripted import Reply, ScriptedServer
from behavioral_pq.lowering.tasks import Signature
from behavioral_pq.reports import lowering as ev

# Hand-written System V x86-64 assembly for `int32_t saturating_add(int32_t a, int32_t b)`.
HEADER = "\t.text\n\t.globl\tsaturating_add\n\t.type\tsaturating_add,@function\nsaturating_add:\n"
GOOD = HEADER + ("\tmovslq\t%edi, %rax\n\tmovslq\t%esi, %rcx\n\taddq\t%rcx, %rax\n"
                 "\tmovl\t$2147483647, %ecx\n\tcmpq\t%rcx, %rax\n\tcmovgq\t%rcx, %rax\n"
                 "\tmovq\t$-2147483648, %rcx\n\tcmpq\t%rcx, %rax\n\tcmovlq\t%rcx, %rax\n\tretq\n")
WRONG = HEADER + "\tleal\t(%rdi,%rsi), %eax\n\tretq\n"          # wraps instead of saturating
SYNTAX = HEADER + "\tleal\t(%rdi,%rsi, %eax\n\tretq\n"
CRASH = HEADER + "\txorl\t%eax, %eax\n\tmovl\t(%rax), %eax\n\tretq\n"
HANG = HEADER + "1:\tjmp\t1b\n"
NO_SYMBOL = "\t.text\n\t.globl\tsomething_else\nsomething_else:\n\tretq\n"


def fence(asm):
    return f"Here you go:\n```asm\n{asm}```\n"


@pytest.fixture(scope="module")
def sat_task():
    return load_tasks("functions", names=["saturating_add"])[0]


@pytest.fixture(scope="module")
def sat_module(sat_task):
    return optimize(sat_task.module(), "Oz")


def settings(server, **kw):
    return LLMSettings(base_url=server.base_url, **{"retries": 2, "backoff": 0.0, "timeout": 5.0, **kw})


# -- task sets -------------------------------------------------------------------------------------------------

def test_task_sets_have_enough_tasks_with_sources_and_distinct_names():
    functions, kernels = load_tasks("functions"), load_tasks("kernels")
    assert len(functions) >= 20 and len(kernels) >= 20
    assert len({t.name for t in functions + kernels}) == len(functions) + len(kernels)
    assert all(t.source.is_file() and not t.timed for t in functions)
    assert all(t.timed and t.bench_n > t.test_n > 0 for t in kernels)
    train, held = split_tasks(functions + kernels, held_out=0.5, seed=0)
    assert not {t.name for t in train} & {t.name for t in held} and len(train) + len(held) == 47


def test_signature_parsing_and_errors(tmp_path):
    sig = Signature.parse("int64_t f(const int32_t *restrict a, int32_t n, double x)")
    assert sig.returns == "int64_t" and sig.name == "f"
    assert [(p.name, p.ctype, p.pointer, p.const) for p in sig.params] == [
        ("a", "int32_t", True, True), ("n", "int32_t", False, False), ("x", "double", False, False)]
    with pytest.raises(TaskError, match="unsupported parameter type"):
        Signature.parse("int f(bool x)")
    with pytest.raises(TaskError, match="not a C function"):
        Signature.parse("int f")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "g.c").write_text("int g(int a) { return a; }\n")
    (tmp_path / "set.json").write_text(json.dumps({"kind": "function", "tasks": [
        {"name": "g", "signature": "int g(int a)", "cases": [[1, 2]]}]}))
    with pytest.raises(TaskError, match="has 2 arguments"):
        load_tasks(tmp_path / "set.json")
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "missing.json")
    with pytest.raises(TaskError, match="unknown tasks"):
        load_tasks("functions", names=["no_such_task"])


def test_reference_outputs_match_hand_computed_values():
    gcd, = load_tasks("functions", names=["gcd"])
    with TaskHarness(gcd) as harness:
        lines = harness.expected.splitlines()
    # cases: gcd(12,18), gcd(17,5), gcd(0,9), gcd(-48,36), gcd(1071,462), gcd(2^53+1, 3)
    assert [int(l.split()[-1]) for l in lines] == [6, 1, 9, 12, 21, 3]
    sort, = load_tasks("functions", names=["insertion_sort"])
    with TaskHarness(sort) as harness:
        assert harness.expected.splitlines()[0].split("|")[1].split() == ["1", "2", "5", "5", "6", "9"]


# -- harness ---------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_llc_passes_every_task_of_both_sets():
    failures = []
    for task in load_tasks("all"):
        result = lower(task.module("Oz"), "llc", task=task)
        if not result.verified:
            failures.append((task.name, result.verdict))
    assert failures == []


def test_harness_names_the_failing_stage(sat_task):
    with TaskHarness(sat_task, run_timeout=1.0) as harness:
        assert harness.check(GOOD).ok
        wrong = harness.check(WRONG)
        assert wrong.stage == "wrong-output" and "expected" in wrong.message
        syntax = harness.check(SYNTAX)
        assert syntax.stage == "assemble" and "error" in syntax.message and harness.workdir.name not in syntax.message
        crash = harness.check(CRASH)
        assert crash.stage == "crash" and "SIGSEGV" in crash.message
        assert harness.check(HANG).stage == "timeout"
        link = harness.check(NO_SYMBOL)
        assert link.stage == "link" and "saturating_add" in link.message
    assert not harness.workdir.exists()


def test_compare_outputs_exact_integers_and_float_tolerance():
    assert compare_outputs("a 1 2.0\n", "a 1 2.0000000001\n") is None
    assert "line 1" in compare_outputs("a 1 2.0\n", "a 1 2.1\n")
    assert "line 1" in compare_outputs("7\n", "8\n")
    assert "lines" in compare_outputs("1\n2\n", "1\n")
    assert compare_outputs("x nan\n", "x nan\n") is None


def test_program_and_symbol_harnesses():
    program = load_module(EXAMPLES / "list_sort.c")
    optimized = optimize(program, "Oz")
    with ProgramHarness(optimized, reference=program) as harness:
        assert harness.expected.strip()
        assert harness.check(llc_assembly(optimized.bitcode)).ok
        other = llc_assembly(optimize(load_module(EXAMPLES / "sum_array.c"), "Oz").bitcode)
        assert harness.check(other).stage == "wrong-output"
    library = load_module(load_tasks("functions", names=["gcd"])[0].source)
    with SymbolHarness(library) as harness:
        assert harness.symbols == ["gcd"]
        verdict = harness.check(llc_assembly(library.bitcode))
        assert verdict.ok and not verdict.tested
        assert harness.check(NO_SYMBOL).stage == "link"


def test_static_cost_and_runtime_against_clang_o3():
    saxpy, = load_tasks("kernels", names=["saxpy"])
    fast = llc_assembly(saxpy.module("opt:O3").bitcode, opt_level=3)
    slow = llc_assembly(saxpy.module().bitcode, opt_level=0)
    assert static_cost(slow).cycles > static_cost(fast).cycles > 0
    with TaskHarness(saxpy) as harness:
        t_slow, t_fast = harness.timing(slow, runs=3), harness.timing(fast, runs=3)
        assert len(t_slow.samples) == 3 and is_faster(t_fast, t_slow)
        assert harness.baseline_timing(runs=3).median_ns > 0
        mine, baselines = harness.compare_timings(slow, runs=3, levels=("O3", "O2"))
        assert len(mine.samples) == 3 and set(baselines) == {"O3", "O2"}
        assert all(len(t.samples) == 3 for t in baselines.values())
        assert is_faster(baselines["O3"], mine) and is_faster(baselines["O2"], mine)   # -O0 code against clang's
    assert not is_faster(Timing((100.0,)), Timing((103.0,)), margin=0.05)
    assert is_faster(Timing((90.0,)), Timing((100.0,)), margin=0.05)


# -- the HTTP client -------------------------------------------------------------------------------------------

def test_client_retries_429_and_500_then_succeeds():
    with ScriptedServer([Reply(status=429, retry_after=0), Reply(status=500), Reply("hello")]) as server:
        client = ChatClient(settings(server))
        answer = client.complete([user("hi")])
        assert answer.content == "hello" and answer.tries == 3 and answer.model == "scripted"
        assert len(server.requests) == 3 and server.requests[0]["messages"] == [{"role": "user", "content": "hi"}]


def test_client_gives_up_after_retries_and_does_not_retry_client_errors():
    with ScriptedServer([Reply(status=503)] * 3) as server:
        with pytest.raises(LLMError, match="HTTP 503.*tried 3 times"):
            ChatClient(settings(server)).complete([user("hi")])
    with ScriptedServer([Reply(status=401), Reply("never sent")]) as server:
        with pytest.raises(LLMError, match="HTTP 401"):
            ChatClient(settings(server)).complete([user("hi")])
        assert len(server.requests) == 1


def test_client_timeout_is_retried_then_raises():
    with ScriptedServer([Reply("late", delay=1.5), Reply("on time")]) as server:
        answer = ChatClient(settings(server, timeout=0.5)).complete([user("hi")])
        assert answer.content == "on time" and answer.tries == 2
    with ScriptedServer([Reply("late", delay=1.0)] * 2) as server:
        with pytest.raises(LLMTimeoutError):
            ChatClient(settings(server, timeout=0.3, retries=1)).complete([user("hi")])


def test_client_rejects_malformed_completions_and_sends_the_key():
    with ScriptedServer([Reply(raw=b"<html>oops</html>"), Reply(raw=b'{"choices": []}')]) as server:
        client = ChatClient(settings(server))
        with pytest.raises(LLMResponseError, match="not a chat completion"):
            client.complete([user("hi")])
        with pytest.raises(LLMResponseError):
            client.complete([user("hi")])
    seen = {}

    def respond(body):
        seen.update(body)
        return Reply("ok")

    with ScriptedServer(respond) as server:
        assert ChatClient(settings(server, api_key="sk-test", model="m1")).complete([user("x")]).content == "ok"
        assert seen["model"] == "m1"
    assert "sk-test" not in repr(LLMSettings(base_url="http://127.0.0.1:1", api_key="sk-test"))


def test_settings_come_from_environment_or_file_and_nothing_is_guessed(tmp_path, monkeypatch):
    for name in ("BPQ_LLM_BASE_URL", "OPENAI_BASE_URL", "BPQ_LLM_MODEL", "BPQ_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(LLMError, match="no LLM endpoint configured"):
        load_llm_settings()
    monkeypatch.setenv("BPQ_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("BPQ_LLM_TIMEOUT", "7")
    s = load_llm_settings()
    assert s.base_url == "http://127.0.0.1:9/v1" and s.timeout == 7.0
    config = tmp_path / "llm.toml"
    config.write_text('[llm]\nbase_url = "http://localhost:8000/v1"\nmodel = "qwen"\nretries = 1\n')
    assert load_llm_settings(config).model == "qwen"
    config.write_text('[llm]\nbase_url = "http://localhost:8000/v1"\nmodle = "typo"\n')
    with pytest.raises(ValueError, match="unknown keys"):
        load_llm_settings(config)


# -- the repair loop -------------------------------------------------------------------------------------------

def test_extract_assembly():
    assert extract_assembly(fence(GOOD)) == GOOD
    assert extract_assembly("```llvm\nignored\n```\n```s\n" + GOOD + "```") == GOOD
    assert extract_assembly(GOOD) == GOOD  # a bare assembly file
    with pytest.raises(MalformedAnswer):
        extract_assembly("I cannot do that.")
    with pytest.raises(MalformedAnswer, match="empty"):
        extract_assembly("")


def test_correct_first_answer(sat_task, sat_module):
    with ScriptedServer([Reply(fence(GOOD))]) as server:
        result = lower(sat_module, LLMBackend(settings(server)), task=sat_task)
        assert result.verified and result.assembly == GOOD and len(result.attempts) == 1
        request = server.requests[0]["messages"]
        assert request[0]["role"] == "system" and "x86-64" in request[0]["content"]
        assert "@saturating_add" in request[1]["content"]


def test_syntax_error_then_fix_feeds_the_assembler_error_back(sat_task, sat_module):
    with ScriptedServer([Reply(fence(SYNTAX)), Reply(fence(GOOD))]) as server:
        result = lower(sat_module, LLMBackend(settings(server)), task=sat_task)
        assert result.verified and [a.stage for a in result.attempts] == ["assemble", "ok"]
        feedback = server.requests[1]["messages"]
        assert feedback[-2] == {"role": "assistant", "content": fence(SYNTAX)}
        assert "assembler rejected" in feedback[-1]["content"] and "error" in feedback[-1]["content"]


def test_wrong_output_then_fix(sat_task, sat_module):
    with ScriptedServer([Reply(fence(WRONG)), Reply(fence(CRASH)), Reply(fence(GOOD))]) as server:
        result = lower(sat_module, LLMBackend(settings(server)), task=sat_task)
        assert [a.stage for a in result.attempts] == ["wrong-output", "crash", "ok"]
        assert "printed wrong results" in server.requests[1]["messages"][-1]["content"]
        assert "crashed" in server.requests[2]["messages"][-1]["content"]


def test_malformed_answers_and_bodies_count_as_failed_rounds(sat_task, sat_module):
    script = [Reply("Let me think about registers first."), Reply(raw=b"not json"), Reply(fence(GOOD))]
    with ScriptedServer(script) as server:
        with TaskHarness(sat_task) as harness:
            result = llm_lower(sat_module, harness, ChatClient(settings(server)), repairs=3)
        assert result.ok and result.repaired and result.rounds == 3
        assert [a.stage for a in result.attempts] == ["malformed", "malformed", "ok"]
        # the prose was shown back with a complaint; the broken body was not shown at all
        assert "no ```asm code block" in server.requests[1]["messages"][-1]["content"]
        assert len(server.requests[2]["messages"]) == len(server.requests[1]["messages"])


def test_rate_limit_and_timeout_are_retried_inside_one_round(sat_task, sat_module):
    script = [Reply(status=429, retry_after=0), Reply(fence(GOOD), delay=1.5), Reply(fence(GOOD))]
    with ScriptedServer(script) as server:
        result = lower(sat_module, LLMBackend(settings(server, timeout=0.5)), task=sat_task)
        assert result.verified and len(result.attempts) == 1 and len(server.requests) == 3


def test_bounded_rounds_then_lowering_error_with_the_trace(sat_task, sat_module):
    with ScriptedServer([Reply(fence(WRONG))] * 3) as server:
        with pytest.raises(LoweringError, match="no verified assembly after 3 answers") as info:
            lower(sat_module, LLMBackend(settings(server), repairs=2), task=sat_task)
        assert len(server.requests) == 3
        assert [a.stage for a in info.value.result.attempts] == ["wrong-output"] * 3
        assert not info.value.result.ok


def test_endpoint_failure_ends_the_loop_without_losing_the_batch(sat_task):
    with ScriptedServer([Reply(status=500)] * 3) as server:
        backend = LLMBackend(settings(server), repairs=3)
        outcomes = ev.evaluate_backend([sat_task], backend, measure=False)
        assert outcomes[0].stage == "endpoint" and not outcomes[0].ok and len(server.requests) == 3


def test_optimization_phase_keeps_only_correct_and_faster_code():
    saxpy, = load_tasks("kernels", names=["saxpy"])
    module = saxpy.module("opt:O3")
    slow = llc_assembly(saxpy.module().bitcode, opt_level=0)
    fast = llc_assembly(module.bitcode, opt_level=3)
    broken = fast.replace("mulps", "addps").replace("mulss", "addss")
    assert broken != fast
    with ScriptedServer([Reply(fence(slow)), Reply(fence(broken)), Reply(fence(fast)), Reply(fence(slow))]) as server:
        with TaskHarness(saxpy) as harness:
            result = llm_lower(module, harness, ChatClient(settings(server)), optimize_rounds=3, timing_runs=3)
    phases = [(a.phase, a.stage, a.kept) for a in result.attempts]
    assert phases == [("generate", "ok", False), ("optimize", "wrong-output", False), ("optimize", "ok", True),
                      ("optimize", "ok", False)]
    assert result.assembly == fast and result.optimized and result.rounds == 1
    assert "not faster" in result.attempts[-1].note


# -- prompts ---------------------------------------------------------------------------------------------------

def test_prompt_refinement_filters_reviews_and_versions(tmp_path, sat_task, sat_module):
    general = "Check each operand list: AT&T memory operands close their parenthesis before the next operand."
    lessons = (f"LESSON: {general}\nLESSON: In saturating_add, clamp with cmov.\n"
               "LESSON: Add a comment on every line.\nLESSON: short")
    script = [Reply(fence(SYNTAX)), Reply(fence(GOOD)), Reply(lessons), Reply("1: KEEP\n2: DROP")]
    with ScriptedServer(script) as server:
        client = ChatClient(settings(server))
        with TaskHarness(sat_task) as harness:
            trace = llm_lower(sat_module, harness, client, symbol="saturating_add")
        base = Prompt()
        refinement = refine_prompt(base, [trace], client)
        lesson_request = server.requests[2]["messages"][-1]["content"]
        assert "leal\t(%rdi,%rsi, %eax" in lesson_request and "Failure (assemble)" in lesson_request
        review_request = server.requests[3]["messages"][-1]["content"]
        assert "1. " + general in review_request and "clamp with cmov" not in review_request
    new = refinement.prompt
    assert refinement.traces_used == 1 and refinement.kept == (general,)
    assert dict(refinement.rejected) == {"In saturating_add, clamp with cmov.": "names a program",
                                         "Add a comment on every line.": "dropped in review", "short": "length"}
    assert new.version == 2 and new.parent == base.digest and general in new.render()
    path = new.save(tmp_path)
    assert path.name == "prompt-v2.json" and load_prompt(tmp_path) == new
    assert load_prompt(None) == base
    data = json.loads(path.read_text())
    data["lessons"].append("edited by hand")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="digest"):
        load_prompt(path)


def test_refined_prompt_is_judged_on_held_out_tasks():
    tasks = load_tasks("functions", names=["gcd", "popcount32", "fib_iter", "day_kind"])
    report = ev.run_refinement_scenario(tasks, repairs=2)
    assert report["train_tasks"] == 2 and report["held_out_tasks"] == 2 and report["traces_used"] == 2
    assert report["kept"] == [ev.LESSON_TEXT] and report["prompt_versions"] == [1, 2]
    assert report["held_out_before"]["mean_rounds"] == 2 and report["held_out_after"]["mean_rounds"] == 1
    assert report["held_out_after"]["acc"] == 1.0


@pytest.mark.slow
def test_scripted_scenarios_behave_as_specified():
    tasks = load_tasks("functions", names=["gcd", "newton_sqrt"]) + load_tasks("kernels", names=["sum_i64"])
    report = ev.run_scenarios(tasks, repairs=2, client_timeout=0.5,
                              scenarios=["correct", "wrong-then-fix", "rate-limited", "bad-json", "always-wrong"])
    assert report["correct"]["acc"] == 1.0 and report["correct"]["mean_rounds"] == 1
    assert report["wrong-then-fix"]["rounds_histogram"] == {"2": 3}
    assert report["rate-limited"]["mean_rounds"] == 1 and report["rate-limited"]["http_tries"] == 6
    assert report["bad-json"]["rounds_histogram"] == {"2": 3}
    assert report["always-wrong"]["acc"] == 0.0 and report["always-wrong"]["requests"] == 9


# -- CLI -------------------------------------------------------------------------------------------------------

def bpq(*args, env=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_cli_lower_with_llc_and_llm(tmp_path, sat_module):
    out = tmp_path / "sum.s"
    proc = bpq("lower", str(EXAMPLES / "sum_array.c"), "-o", str(out), "--verify")
    assert proc.returncode == 0, proc.stderr
    assert "verification: ok" in proc.stdout and ".globl\tmain" in out.read_text()
    with ScriptedServer([Reply(fence(SYNTAX)), Reply(fence(GOOD))]) as server:
        proc = bpq("lower", "--task", "saturating_add", "--backend", "llm", "--json",
                   env={"BPQ_LLM_BASE_URL": server.base_url, "BPQ_LLM_RETRIES": "0"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verified"] and [a["stage"] for a in data["answers"]] == ["assemble", "ok"]
    proc = bpq("lower", str(tmp_path / "missing.c"))
    assert proc.returncode == 2 and proc.stderr.startswith("bpq: error:")
    proc = bpq("lower", "--task", "gcd", "--backend", "llm", env={"BPQ_LLM_BASE_URL": "", "OPENAI_BASE_URL": ""})
    assert proc.returncode == 2 and "no LLM endpoint configured" in proc.stderr


def reference_stdout(source, tmp_path) -> str:
    """What ``clang-19 -O0``'s build of ``source`` prints, run without arguments: the output a build must match."""
    reference = tmp_path / "ref"
    subprocess.run(["clang-19", "-O0", str(source), "-o", str(reference)], check=True)
    return subprocess.run([str(reference)], capture_output=True, text=True, check=True).stdout


def test_cli_compile_auto_passes_builds_a_program_that_prints_the_same(tmp_path):
    source = EXAMPLES / "state_machine.c"
    binary = tmp_path / "prog"
    proc = bpq("compile", str(source), "--auto-passes", "--budget", "3", "-o", str(binary))
    assert proc.returncode == 0, proc.stderr
    for step in ("1. load", "2. recommend", "3. optimize", "4. lower", "verification: ok", "5. link"):
        assert step in proc.stdout
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == reference_stdout(source, tmp_path)


@pytest.mark.slow
def test_cli_compile_for_size_keeps_the_smaller_of_oz_and_os(tmp_path):
    """A counted loop: -Oz leaves it top-tested with its trip count computed, -Os rotates it and is smaller."""
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import text_size

    source = tmp_path / "gather.c"
    source.write_text("void gather(long n, double *restrict out, const double *restrict v, const unsigned *restrict i)"
                      " { for (long k = 0; k < n; k++) out[k] = v[i[k] % n]; }\n")
    module = load_module(source)
    target = Target(Target.host().triple, "", "")
    oz, os_ = (text_size(optimize(module, level, target=target).bitcode) for level in ("Oz", "Os"))
    assert os_ < oz                                    # the premise: this loop is shorter rotated
    proc = bpq("compile", str(source), "-o", str(tmp_path / "gather.o"))
    assert proc.returncode == 0, proc.stderr
    assert f"2. passes     Os (.text: -Oz {oz} bytes, -Os {os_})" in proc.stdout
    table = subprocess.run(["llvm-size-19", "-A", str(tmp_path / "gather.o")], capture_output=True, text=True).stdout
    assert sum(int(line.split()[1]) for line in table.splitlines() if line.startswith(".text")) == os_
    proc = bpq("compile", str(source), "--passes", "Oz", "-o", str(tmp_path / "oz.o"))
    assert proc.returncode == 0 and "2. passes     Oz\n" in proc.stdout


REPEATED_BODIES = r"""#include <stdio.h>
static volatile int state[16];
#define STEP state[1] = state[2] * 3 + 7; state[3] ^= state[4] << 2; state[5] += state[6] - state[7]; \
  state[8] = state[9] | state[10]; state[11] = state[12] & 0x55; state[13] += state[14] * state[15];
#define BODY STEP STEP STEP STEP
int f0(int x) { BODY return x + state[1]; }
int f1(int x) { BODY return x * state[3]; }
int f2(int x) { BODY return x - state[5]; }
int f3(int x) { BODY return x ^ state[8]; }
int f4(int x) { BODY return x | state[11]; }
int f5(int x) { BODY return x & state[13]; }
int main(int argc, char **argv) {
  printf("%d\n", f0(argc) + f1(argc) + f2(argc) + f3(argc) + f4(argc) + f5(argc));
  return 0;
}
"""


def test_machine_outliner_is_kept_only_where_the_text_is_smaller(tmp_path):
    """Six functions share a long volatile sequence: llc's machine outliner turns the copies into calls and the
    .text shrinks; a single small function gains nothing, and ties keep the outliner off."""
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import smaller_codegen, text_size
    from behavioral_pq.lowering.backends import LlcBackend

    source = tmp_path / "repeated.c"
    source.write_text(REPEATED_BODIES)
    target = Target.module_cpus()
    bitcode = optimize(load_module(source), "Oz", target=target).bitcode
    choice = smaller_codegen(bitcode, block_placement=(True,))          # the outliner alone
    assert choice.outline and choice.text == text_size(bitcode, outline=True) < choice.plain == text_size(bitcode)
    assert "OUTLINED_FUNCTION" in llc_assembly(bitcode, outline=True)
    assert "OUTLINED_FUNCTION" not in llc_assembly(bitcode)
    small = optimize(load_module(EXAMPLES / "sum_array.c"), "Oz", target=target).bitcode
    choice = smaller_codegen(small)
    assert choice[:4] == (False, True, text_size(small), text_size(small))     # ties keep llc's defaults
    assert choice.flags == () and choice.builds == 4
    assert LlcBackend(outline=True).options()["machine_outliner"] is True


#: A main that checks forty results, each failure printing and returning: block placement moves the failure
#: blocks after the checks, so every branch to one needs a 4-byte displacement; in source order they are near.
CHECKS = "#include <stdio.h>\n__attribute__((noinline)) int step(int v, int i) { return (v * 7 + i * 7) % 13; }\n" \
    "int main(int argc, char **argv) {\n  int v = argc - 1;\n" + "".join(
        f'  if (step(v, {i}) != {i * 7 % 13}) {{ printf("check {i} failed: %d\\n", step(v, {i})); return {i + 1}; }}\n'
        for i in range(40)) + '  puts("ok");\n  return 0;\n}\n'


def test_block_placement_is_turned_off_only_where_the_text_is_smaller(tmp_path):
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import smaller_codegen, text_size
    from behavioral_pq.lowering.backends import LlcBackend

    source = tmp_path / "checks.c"
    source.write_text(CHECKS)
    bitcode = optimize(load_module(source), "Oz", target=Target.module_cpus()).bitcode
    choice = smaller_codegen(bitcode)
    assert not choice.block_placement and not choice.outline
    assert choice.text == text_size(bitcode, block_placement=False) < 0.95 * choice.plain
    assert choice.plain == text_size(bitcode) == min(text_size(bitcode, outline=True), choice.plain)
    assert llc_assembly(bitcode, block_placement=False) != llc_assembly(bitcode)
    assert smaller_codegen(bitcode, block_placement=(True,)).text == choice.plain     # asked to keep it: kept
    backend = LlcBackend(block_placement=False)
    assert backend.options()["block_placement"] is False
    assert backend.lower(load_module(bitcode)).assembly == llc_assembly(bitcode, block_placement=False)


@pytest.mark.slow
def test_cli_compile_for_size_turns_the_outliner_on_where_it_pays(tmp_path):
    source = tmp_path / "repeated.c"
    source.write_text(REPEATED_BODIES)
    expected = reference_stdout(source, tmp_path)
    symbols = {}
    for choice in ("auto", "off"):
        binary = tmp_path / choice
        proc = bpq("compile", str(source), "--outline", choice, "-o", str(binary))
        assert proc.returncode == 0, proc.stderr
        assert ("codegen:   machine outliner on, block placement" in proc.stdout) == (choice == "auto")
        assert "verification: ok" in proc.stdout
        assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == expected
        table = subprocess.run(["llvm-nm-19", str(binary)], capture_output=True, text=True).stdout
        symbols[choice] = "OUTLINED_FUNCTION" in table
    assert symbols == {"auto": True, "off": False}
    proc = bpq("compile", str(source), "--objective", "speed", "--outline", "on", "-o", str(tmp_path / "s"))
    assert proc.returncode == 2 and "--outline on is an llc option of size builds" in proc.stderr


@pytest.mark.slow
def test_cli_compile_for_size_turns_block_placement_off_where_it_pays(tmp_path):
    source = tmp_path / "checks.c"
    source.write_text(CHECKS)
    sizes = {}
    for choice in ("auto", "on"):
        binary = tmp_path / choice
        proc = bpq("compile", str(source), "--block-placement", choice, "-o", str(binary))
        assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
        assert ("block placement off, llc flags" in proc.stdout) == (choice == "auto"), proc.stdout
        run = subprocess.run([str(binary)], capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout == "ok\n"
        sizes[choice] = int(re.search(r"\(\.text (\d+) bytes", proc.stdout).group(1))
    assert sizes["auto"] < sizes["on"]
    proc = bpq("compile", str(source), "--objective", "speed", "--block-placement", "off", "-o", str(tmp_path / "s"))
    assert proc.returncode == 2 and "--block-placement off is an llc option of size builds" in proc.stderr


#: Six values live across three calls per iteration to a small function of the module: without interprocedural
#: register allocation each call is assumed to clobber every caller-saved register, so the loop saves and reloads
#: them around the calls; with it (llc's -enable-ipra) llc knows which few registers ``mix`` uses.
LIVE_ACROSS_CALLS = r"""#include <stdio.h>
static int table[64];
__attribute__((noinline)) static int mix(int a) { return table[a & 63] ^ a; }
int main(int argc, char **argv) {
  int a = argc, b = argc * 3, c = argc + 5, d = argc ^ 9, e = argc - 2, f = argc * 7, s = 0;
  for (int i = 0; i < 64; i++) table[i] = i * 2654435761u >> 7;
  for (int i = 0; i < 100; i++) {
    s += mix(i + a) * b + mix(s + c) * d + mix(e + i) * f;
    a += s; b ^= a; c += b; d -= c; e ^= d; f += e;
  }
  printf("%d %d %d %d %d %d %d\n", s, a, b, c, d, e, f);
  return 0;
}
"""


def test_codegen_flags_are_added_only_where_the_text_is_smaller(tmp_path):
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import CODEGEN_FLAGS, smaller_codegen, text_size
    from behavioral_pq.lowering.backends import LlcBackend

    target = Target.module_cpus()
    source = tmp_path / "calls.c"
    source.write_text(LIVE_ACROSS_CALLS)
    bitcode = optimize(load_module(source), "Oz", target=target).bitcode
    without = smaller_codegen(bitcode)
    choice = smaller_codegen(bitcode, flags=tuple(CODEGEN_FLAGS))
    assert choice.flags[0] == "ipra"                       # the first flag that makes it smaller
    assert choice.text == text_size(bitcode, outline=choice.outline, block_placement=choice.block_placement,
                                    flags=choice.flags) < 0.9 * without.text
    assert text_size(bitcode, flags=("ipra",)) < text_size(bitcode) < text_size(bitcode, flags=("regalloc-basic",))
    assert choice.plain == without.plain == text_size(bitcode) and choice.builds > without.builds == 4
    assert "-enable-ipra" not in llc_assembly(bitcode) and llc_assembly(bitcode, flags=("ipra",)) != \
        llc_assembly(bitcode)
    # the checks program: block placement off pays, and every flag is no smaller from there, so none is added
    checks = tmp_path / "checks.c"
    checks.write_text(CHECKS)
    bitcode = optimize(load_module(checks), "Oz", target=target).bitcode
    choice = smaller_codegen(bitcode, flags=tuple(CODEGEN_FLAGS))
    assert choice.flags == () and choice[:4] == smaller_codegen(bitcode)[:4]
    assert choice.builds == 4 + len(CODEGEN_FLAGS)
    backend = LlcBackend(flags=("ipra", "no-lsr"))
    assert backend.options()["flags"] == ["ipra", "no-lsr"]
    module = load_module(bitcode)
    assert backend.lower(module).assembly == llc_assembly(bitcode, flags=("ipra", "no-lsr"))
    for bad in (("fast-math",), ("ipra", "ipra")):
        with pytest.raises(ValueError, match="codegen flag"):
            LlcBackend(flags=bad)
        with pytest.raises(ValueError, match="codegen flag"):
            text_size(bitcode, flags=bad)


def test_a_codegen_flag_whose_build_fails_is_left_out(tmp_path, monkeypatch, caplog):
    """llc 19 crashes on some modules with IPRA and the machine outliner together (an sbase tool after a searched
    pipeline): the choice leaves that flag out, warns, and goes on with the others."""
    from behavioral_pq.core import toolchain
    from behavioral_pq.core.target import Target
    from behavioral_pq.errors import ToolError

    source = tmp_path / "calls.c"
    source.write_text(LIVE_ACROSS_CALLS)
    bitcode = optimize(load_module(source), "Oz", target=Target.module_cpus()).bitcode
    real = toolchain.text_size

    def crashing(code, **kwargs):
        if "ipra" in kwargs.get("flags", ()):
            raise ToolError("llc-19 exited with -11: PLEASE submit a bug report")
        return real(code, **kwargs)

    monkeypatch.setattr(toolchain, "text_size", crashing)
    with caplog.at_level("WARNING", logger="behavioral_pq.core.toolchain"):
        choice = toolchain.smaller_codegen(bitcode, flags=tuple(toolchain.CODEGEN_FLAGS))
    assert "ipra" not in choice.flags and choice.builds == 4 + len(toolchain.CODEGEN_FLAGS)
    assert "codegen flags" in caplog.text and "ipra left out" in caplog.text
    assert choice.text == real(bitcode, outline=choice.outline, block_placement=choice.block_placement,
                               flags=choice.flags) <= choice.plain
    monkeypatch.setattr(toolchain, "text_size", lambda code, **kwargs: (_ for _ in ()).throw(ToolError("llc")))
    with pytest.raises(ToolError):           # the builds without flags failing is the caller's error, as before
        toolchain.smaller_codegen(bitcode, flags=tuple(toolchain.CODEGEN_FLAGS))


@pytest.mark.slow
def test_cli_compile_for_size_adds_llc_flags_where_they_pay(tmp_path):
    source = tmp_path / "calls.c"
    source.write_text(LIVE_ACROSS_CALLS)
    expected = reference_stdout(source, tmp_path)
    assert expected.count(" ") == 6
    sizes = {}
    for choice in ("auto", "none", "no-lsr"):
        binary = tmp_path / choice
        proc = bpq("compile", str(source), "--codegen-flags", choice, "-o", str(binary))
        assert proc.returncode == 0 and "verification: ok" in proc.stdout, proc.stderr
        flags = re.search(r"llc flags ([^(]*) \(\.text (\d+) bytes", proc.stdout)
        if choice == "none":
            assert flags is None or flags.group(1) == "none"
        else:
            assert flags is not None and ("ipra" in flags.group(1)) == (choice == "auto"), proc.stdout
        run = subprocess.run([str(binary)], capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout == expected
        sizes[choice] = int(subprocess.run(["llvm-size-19", "-A", str(binary)], capture_output=True,
                                           text=True).stdout.split(".text")[1].split()[0])
    assert sizes["auto"] < sizes["none"]
    proc = bpq("compile", str(source), "--codegen-flags", "ipra,fast", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and "unknown codegen flag(s) 'fast'" in proc.stderr and "no-machine-licm" in proc.stderr
    proc = bpq("compile", str(source), "--objective", "speed", "--codegen-flags", "ipra", "-o", str(tmp_path / "s"))
    assert proc.returncode == 2 and "--codegen-flags names llc options of size builds" in proc.stderr


@pytest.mark.slow
def test_cli_compile_links_a_cxx_program_with_the_cxx_runtime(tmp_path):
    """std::string and iostream: the program needs libstdc++ at link time, and its headers' always_inline members
    (not exported by the runtime) must be inlined in the -O0 reference as clang -O0 does."""
    from behavioral_pq.core.toolchain import needs_cxx_runtime

    source = tmp_path / "hello.cpp"
    source.write_text('#include <iostream>\n#include <string>\n#include <vector>\n'
                      'std::string greet(const std::string &who) { return "hello, " + who; }\n'
                      'int main() { std::vector<std::string> v{"a", "b"};\n'
                      '  for (auto &s : v) std::cout << greet(s) << "\\n"; return 0; }\n')
    assert needs_cxx_runtime(load_module(source).text())
    assert not needs_cxx_runtime(load_module(EXAMPLES / "sum_array.c").text())
    for extra in ([], ["--whole-program"]):
        binary = tmp_path / ("whole" if extra else "separate")
        proc = bpq("compile", str(source), *extra, "-o", str(binary))
        assert proc.returncode == 0, proc.stderr
        assert "verification: ok" in proc.stdout
        assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "hello, a\nhello, b\n"


def test_cli_compile_one_program_of_a_compile_commands_project(tmp_path):
    """Two programs in one database: --program picks one main with the units it needs (a table of data among
    them), builds it as a whole program and checks it; a name that is no program is refused with the list."""
    project = tmp_path / "proj"
    project.mkdir()
    sources = {"app.c": '#include <stdio.h>\nint parse(const char *);\n'
                        'int main(void) { printf("%d\\n", parse("abc")); return 0; }\n',
               "parse.c": "extern const int weights[3];\n"
                          "int parse(const char *s) { int n = 0; for (int i = 0; s[i]; i++) n += s[i] * weights[i % 3];"
                          " return n; }\n",
               "weights.c": "const int weights[3] = {1, 10, 100};\n",
               "tool.c": "int main(void) { return 3; }\n"}
    for name, text in sources.items():
        (project / name).write_text(text)
    database = project / "compile_commands.json"
    database.write_text(json.dumps([{"directory": str(project), "file": name, "arguments": ["cc", "-O2", "-c", name]}
                                    for name in sources]))
    binary = tmp_path / "app"
    proc = bpq("compile", "--compile-commands", str(database), "--program", "app", "--whole-program", "-o",
               str(binary))
    assert proc.returncode == 0, proc.stderr
    assert "1. load       app (3 units)" in proc.stdout and "verification: ok" in proc.stdout
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == f"{97 + 980 + 9900}\n"
    proc = bpq("compile", "--compile-commands", str(database), "--program", "nope", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and "the programs there: app, tool" in proc.stderr
    proc = bpq("compile", str(project / "app.c"), "--program", "app", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and "--program picks a program of --compile-commands" in proc.stderr


def test_cli_compile_says_when_the_reference_build_cannot_check_the_program(tmp_path):
    source = tmp_path / "crash.c"
    source.write_text("int main(void) { return *(volatile int *)0; }\n")
    proc = bpq("compile", str(source), "-o", str(tmp_path / "crash"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "its -O0 reference build cannot serve as the check" in proc.stderr and "--no-verify" in proc.stderr
    proc = bpq("compile", str(source), "--no-verify", "-o", str(tmp_path / "crash"))
    assert proc.returncode == 0, proc.stderr
    missing = tmp_path / "missing.c"
    missing.write_text("int helper(void);\nint main(void) { return helper(); }\n")
    proc = bpq("compile", str(missing), "-o", str(tmp_path / "missing"))
    assert proc.returncode == 1 and "(link: " in proc.stderr and "a unit or library it needs is missing" in proc.stderr


def test_cli_compile_passes_flags_to_the_checked_program(tmp_path):
    """A program that crashes unless it gets "-n 3 -q": the flags reach both builds through --run-args, as one
    quoted value split like a shell would, or as --run-args=FLAG."""
    source = tmp_path / "flags.c"
    source.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n'
                      'int main(int argc, char **argv) {\n'
                      '  if (argc != 4 || strcmp(argv[1], "-n") || strcmp(argv[3], "-q")) abort();\n'
                      '  printf("%d\\n", atoi(argv[2]) * 7); return 0; }\n')
    proc = bpq("compile", str(source), "--run-args", "-n 3", "--run-args=-q", "-o", str(tmp_path / "flags"))
    assert proc.returncode == 0, proc.stderr
    assert "verification: ok" in proc.stdout
    assert subprocess.run([str(tmp_path / "flags"), "-n", "3", "-q"], capture_output=True, text=True).stdout == "21\n"
    proc = bpq("compile", str(source), "--run-args", "-n 3", "-o", str(tmp_path / "flags"))
    assert proc.returncode == 1 and "its -O0 reference build cannot serve as the check" in proc.stderr
    # one dashed value followed by an option is the program's (here too few arguments: the reference fails)
    proc = bpq("compile", str(source), "--run-args", "-q", "-o", str(tmp_path / "flags"))
    assert proc.returncode == 1 and "its run with arguments -q killed by signal 6" in proc.stderr, proc.stderr
    # a program flag followed by a plain word is read as bpq's own: the error says how to pass it
    proc = bpq("compile", str(source), "--run-args", "-q", "3", "-o", str(tmp_path / "flags"))
    assert proc.returncode == 2 and "unrecognized arguments: -q" in proc.stderr
    assert "--run-args '-q'" in proc.stderr and "--run-args=-q" in proc.stderr
    proc = bpq("compile", str(source), "--frobnicate", "-o", str(tmp_path / "flags"))
    assert proc.returncode == 2 and "unrecognized arguments: --frobnicate" in proc.stderr
    assert "a flag of the checked program" not in proc.stderr


def test_every_checked_run_starts_in_an_empty_folder(tmp_path):
    """A program that lists its working folder and creates a file there, failing if the file exists: the
    reference and the build must see the same empty folder, not the builds beside them or the last run's file."""
    source = tmp_path / "cwd.c"
    source.write_text('#include <dirent.h>\n#include <fcntl.h>\n#include <stdio.h>\n#include <stdlib.h>\n'
                      'int main(void) {\n'
                      '  int fd = open("marker", O_CREAT | O_EXCL | O_WRONLY, 0600);\n'
                      '  if (fd < 0) abort();\n'
                      '  DIR *d = opendir("."); struct dirent *e; int n = 0;\n'
                      '  while ((e = readdir(d))) if (e->d_name[0] != \'.\') { printf("%s\\n", e->d_name); n++; }\n'
                      '  return n != 1; }\n')   # only the marker it made
    proc = bpq("compile", str(source), "-o", str(tmp_path / "cwd"))
    assert proc.returncode == 0, proc.stderr
    assert "verification: ok" in proc.stdout


@pytest.mark.slow
def test_cli_compile_whole_program_internalizes_and_drops_what_nothing_calls(tmp_path):
    """Two files: main calls scale() once; table_sum() is defined but never called. Separately compiled, both
    stay; as a whole program, table_sum goes, scale is inlined, and the program prints the same."""
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint scale(int);\n'
                                     'int main(void) { printf("%d\\n", scale(21)); return 0; }\n')
    (tmp_path / "lib.c").write_text("int scale(int x) { return 2 * x; }\n"
                                    "long table_sum(const long *t, long n) { long s = 0;\n"
                                    "  for (long i = 0; i < n; i++) s += t[i] * (i + 1); return s; }\n")
    files = [str(tmp_path / "main.c"), str(tmp_path / "lib.c")]
    symbols = {}
    for tag, extra in (("separate", []), ("whole", ["--whole-program"])):
        binary = tmp_path / tag
        proc = bpq("compile", *files, *extra, "-o", str(binary))
        assert proc.returncode == 0, proc.stderr
        assert ("whole program: every definition but main made internal" in proc.stdout) == bool(extra)
        assert "verification: ok" in proc.stdout
        assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "42\n"
        table = subprocess.run(["llvm-nm-19", "--defined-only", str(binary)], capture_output=True, text=True).stdout
        symbols[tag] = {line.split()[-1] for line in table.splitlines()}
    assert {"table_sum", "scale"} <= symbols["separate"]
    assert not {"table_sum", "scale"} & symbols["whole"] and "main" in symbols["whole"]
    proc = bpq("compile", files[1], "--whole-program", "-o", str(tmp_path / "lib.o"))
    assert proc.returncode != 0 and "needs a program that defines main" in proc.stderr


def test_cli_and_report_default_pipelines_agree():
    from behavioral_pq.cli.lowering import DEFAULT_PIPELINES as CLI_DEFAULT
    from behavioral_pq.reports.lowering import DEFAULT_PIPELINES

    assert CLI_DEFAULT.split(",") == list(DEFAULT_PIPELINES)


def test_lowering_package_docstring_example_runs():
    import doctest

    import behavioral_pq.lowering as lowering

    test = doctest.DocTestParser().get_doctest(lowering.__doc__, {}, "behavioral_pq.lowering", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.tries >= 3 and runner.failures == 0


def test_cli_refine_prompt_writes_a_new_version(tmp_path):
    names = ["gcd", "popcount32", "fib_iter", "day_kind"]
    (tmp_path / "few").mkdir()
    data = json.loads((load_tasks("functions")[0].source.parent.parent / "functions.json").read_text())
    data["tasks"] = [t for t in data["tasks"] if t["name"] in names]
    (tmp_path / "few.json").write_text(json.dumps(data))
    for task in load_tasks("functions", names=names):
        (tmp_path / "few" / task.source.name).write_text(task.source.read_text())
    model = ev.ScenarioModel(["syntax", "correct"], lessons=f"LESSON: {ev.LESSON_TEXT}", review="1: KEEP",
                             heed={ev.LESSON_TEXT: ["correct"]})
    with ScriptedServer(model) as server:
        proc = bpq("refine-prompt", "--tasks", str(tmp_path / "few.json"), "--out", str(tmp_path / "prompts"),
                   env={"BPQ_LLM_BASE_URL": server.base_url})
    assert proc.returncode == 0, proc.stderr
    assert "2 repaired traces on 2 train tasks" in proc.stdout
    assert "prompt v1: ACC 1.000, mean answers 2.00" in proc.stdout
    assert "prompt v2: ACC 1.000, mean answers 1.00" in proc.stdout
    assert load_prompt(tmp_path / "prompts").lessons == (ev.LESSON_TEXT,)
