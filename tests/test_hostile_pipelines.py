"""Hostile input at the edges: raw pipelines (nesting, length, passes that touch files), a model endpoint's odd
answers and settings, assembly that reads files past the screen, and guidance arguments or artifacts that would
give nonsense. Each test fails on the behaviour it guards against, not only on an exception."""

import json
import math
import re
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.core.catalog import (
    BASELINES,
    MAX_PIPELINE_DEPTH,
    MAX_PIPELINE_LENGTH,
    PASSES,
    PIPELINE_ANALYSES,
    PIPELINE_PASSES,
    pipeline_elements,
)
from behavioral_pq.core.engine import Engine, check_pipeline
from behavioral_pq.embedding.probes import MAX_PROBE_LENGTH, ProbeSet
from behavioral_pq.errors import LLMResponseError, PipelineError, ProbeSetError, RankerError, ToolError
from behavioral_pq.lowering.harness import static_cost
from behavioral_pq.lowering.llm import ChatClient, LLMSettings, load_llm_settings, user
from behavioral_pq.lowering.sandbox import screen_assembly
from behavioral_pq.lowering.scripted import Reply, ScriptedServer

DEEP = "function(" * 1500 + "instcombine" + ")" * 1500


def bpq_cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=600, cwd=cwd, env={**os.environ, **(env or {})})


# -- 1. nesting and length are bounded before LLVM parses ----------------------------------------------------------

def test_a_deeply_nested_pipeline_is_refused_not_a_crash():
    """LLVM's parser recursed once per level in the calling process: 1,500 levels were a SIGSEGV."""
    code = ("from behavioral_pq.core.passes import optimize\n"
            "from behavioral_pq.errors import PipelineError\n"
            f"try:\n    optimize({str(EXAMPLES / 'sum_array.c')!r}, {DEEP!r})\n"
            "except PipelineError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the process died (returncode {done.returncode})"
    assert "nested 1500 deep, more than the 32" in done.stdout
    assert len(done.stdout) < 600 and "(15,011 characters)" in done.stdout


def test_the_cli_refuses_a_deeply_nested_pipeline_in_one_line(tmp_path):
    done = bpq_cli("optimize", EXAMPLES / "sum_array.c", "--passes", DEEP, "-o", tmp_path / "out.ll")
    assert done.returncode > 0, f"killed by signal {-done.returncode}" if done.returncode < 0 else "accepted"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "nested 1500 deep" in lines[0] and len(lines[0]) < 600
    assert not (tmp_path / "out.ll").exists()


def test_nesting_up_to_the_bound_is_accepted_and_real_pipelines_are_shallow():
    at_bound = "module(" * (MAX_PIPELINE_DEPTH - 1) + "function(sroa)" + ")" * (MAX_PIPELINE_DEPTH - 1)
    assert check_pipeline(at_bound) == at_bound
    with pytest.raises(PipelineError, match=f"nested {MAX_PIPELINE_DEPTH + 1} deep"):
        check_pipeline("module(" + at_bound + ")")
    deepest = max(p.pipeline.count("(") for p in PASSES)
    assert deepest == 2                                   # function(loop-mssa(licm)): far below the bound
    longest_probe = MAX_PROBE_LENGTH * (max(len(p.pipeline) for p in PASSES) + 1)
    assert longest_probe <= MAX_PIPELINE_LENGTH           # the longest probe a probe set may hold still runs


# -- 2. a huge pipeline is quoted in part ------------------------------------------------------------------------

@pytest.mark.parametrize("size, reason", [(240_000, "longer than the 100,000"), (90_000, "unknown pass name")])
def test_a_huge_unknown_pipeline_is_quoted_in_part(examples, size, reason):
    with pytest.raises(PipelineError) as info:
        bpq.optimize(examples["sum_array"], "x" * size)
    message = str(info.value)
    assert reason in message and f"({size:,} characters)" in message
    assert len(message) < 1200 and "\n" not in message                 # was 2 x the pipeline: 480,000 characters


# -- 3. passes that write or read files are not run --------------------------------------------------------------

FILE_PASSES = ["function(dot-cfg)", "function(dot-cfg-only)", "function(dot-dom)", "dot-callgraph",
               "function(loop(dot-ddg))", "function(view-cfg)", "memprof-use<profile-filename=/etc/hostname>",
               "pgo-instr-use", "sample-profile", "function-import", "function(print<domtree>)",
               "function(require<bb-sections-profile-reader>)", "function(trigger-crash-function)"]


@pytest.mark.parametrize("pipeline", FILE_PASSES)
def test_passes_that_touch_files_are_refused_naming_the_element(examples, tmp_path, monkeypatch, pipeline):
    monkeypatch.chdir(tmp_path)
    element = pipeline_elements(pipeline)[-1]
    with Engine(workers=0) as engine:                    # in this process: a .dot file would land in tmp_path
        with pytest.raises(PipelineError, match=re.escape(f"pipeline element '{element}' is not allowed")):
            bpq.optimize(examples["sum_array"], f"function(sroa),{pipeline}", engine=engine)
    assert list(tmp_path.iterdir()) == []


def test_a_function_name_cannot_steer_a_dot_file_elsewhere(tmp_path):
    """dot-cfg writes ``.NAME.dot`` in the worker's folder (``/``); a function named "/../X/Y" put it in X."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    source = tmp_path / "evil.ll"
    name = f"/../{target.relative_to('/')}/planted"
    source.write_text(f'define i32 @"{name}"(i32 %x) {{\n  %y = add i32 %x, 1\n  ret i32 %y\n}}\n')
    with Engine(workers=1) as engine:
        with pytest.raises(PipelineError, match="'dot-cfg' is not allowed"):
            bpq.optimize(source, "function(dot-cfg)", engine=engine)
    assert list(target.iterdir()) == []                  # was elsewhere/planted.dot


def test_the_cli_refuses_a_file_writing_pass_in_one_line(tmp_path):
    done = bpq_cli("optimize", EXAMPLES / "sum_array.c", "--passes", "function(sroa),function(dot-cfg)",
                   "-o", tmp_path / "out.ll", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bpq: error: pipeline element 'dot-cfg' is not allowed: a raw pipeline may name the catalog's passes and "
        "LLVM's IR transforms, not passes that read or write files, print, instrument or crash on purpose"]
    assert list(tmp_path.iterdir()) == []


def test_every_real_pipeline_is_allowed(examples):
    for p in PASSES:
        assert check_pipeline(p.pipeline) == p.pipeline
    for pipeline in list(BASELINES.values()) + ["function(sroa<preserve-cfg>),function(adce)",
                                                  "function(instcombine<no-verify-fixpoint>)", "strip",
                                                  "require<domtree>,invalidate<all>", "cgscc(devirt<4>(inline))",
                                                  "function<eager-inv>(loop-mssa(licm<allowspeculation>))"]:
        assert check_pipeline(pipeline) == pipeline
    assert bpq.optimize(examples["sum_array"], "function(sroa),function(loop-mssa(licm))").instruction_count > 0


@pytest.mark.skipif(shutil.which("opt-19") is None, reason="needs opt-19")
def test_the_allow_list_names_only_passes_llvm_19_has():
    listed = subprocess.run(["opt-19", "-print-passes"], capture_output=True, text=True, timeout=60).stdout
    known = {line.strip().partition("<")[0] for line in listed.splitlines() if line.startswith("  ")}
    assert PIPELINE_PASSES <= known and PIPELINE_ANALYSES <= known
    for dangerous in ("dot-cfg", "view-cfg", "memprof-use", "pgo-instr-use", "sample-profile", "print",
                      "insert-gcov-profiling", "bb-sections-profile-reader"):
        assert dangerous in known and dangerous not in PIPELINE_PASSES | PIPELINE_ANALYSES


def test_a_probe_set_file_cannot_carry_a_raw_pipeline():
    data = {"format_version": 1, "name": "evil", "llvm_major": 19, "sequences": [["function(dot-cfg)"]]}
    with pytest.raises(ProbeSetError, match="unknown pass 'function\\(dot-cfg\\)'"):
        ProbeSet.from_dict(data, origin="evil.json")


# -- 4. a model endpoint's odd answers and settings ----------------------------------------------------------------

def settings(server, **kw):
    return LLMSettings(base_url=server.base_url, **{"retries": 0, "backoff": 0.0, "timeout": 5.0, **kw})


def completion(**extra) -> bytes:
    return json.dumps({"model": "m", "choices": [{"message": {"role": "assistant", "content": "hello"}}],
                       **extra}).encode()


@pytest.mark.parametrize("usage", [5, "many", [[1, 2]], None])
def test_an_odd_usage_field_is_ignored_not_a_type_error(usage):
    with ScriptedServer([Reply(raw=completion(usage=usage))]) as server:
        answer = ChatClient(settings(server)).complete([user("hi")])
    assert answer.content == "hello" and answer.usage == {} and answer.model == "m"


def test_a_deeply_nested_answer_is_a_response_error_naming_the_endpoint():
    with ScriptedServer([Reply(raw=b"[" * 100_000)]) as server:
        client = ChatClient(settings(server))
        with pytest.raises(LLMResponseError) as info:
            client.complete([user("hi")])
    assert str(info.value) == f"{client.url}: not a chat completion: JSON nested too deeply to read"


def test_retry_after_is_waited_at_most_the_timeout():
    slept = []
    with ScriptedServer([Reply(status=429, retry_after=1e9), Reply(status=503, retry_after=1.5),
                         Reply("finally")]) as server:
        answer = ChatClient(settings(server, retries=2, timeout=2.0), sleep=slept.append).complete([user("hi")])
    assert answer.content == "finally" and answer.tries == 3
    assert slept == [2.0, 1.5]                                     # was [60.0, 1.5] whatever the timeout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-3", "soon"])
def test_a_bad_llm_timeout_in_the_environment_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("BPQ_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("BPQ_LLM_TIMEOUT", value)
    with pytest.raises(ValueError) as info:
        load_llm_settings()
    assert str(info.value) == f"BPQ_LLM_TIMEOUT must be a positive, finite number of seconds, got {value!r}"
    monkeypatch.setenv("BPQ_LLM_TIMEOUT", "7.5")
    assert load_llm_settings().timeout == 7.5


def test_non_finite_timeouts_are_refused_in_settings_too():
    for timeout in (math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout and backoff must be finite"):
            LLMSettings(base_url="http://127.0.0.1:9/v1", timeout=timeout)


def test_the_cli_names_a_bad_llm_timeout():
    done = bpq_cli("lower", "--task", "gcd", "--backend", "llm",
                   env={"BPQ_LLM_BASE_URL": "http://127.0.0.1:9/v1", "BPQ_LLM_TIMEOUT": "nan"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("bpq: error: BPQ_LLM_TIMEOUT must be a positive, finite number "
                                                    "of seconds, got 'nan'")


# -- 5. assembly that would read files ---------------------------------------------------------------------------

@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text("hunter2-first-line\n")
    return path


def bypasses(path) -> dict:
    return {
        "after a semicolon": f'nop; .include "{path}"\n',
        "after a label": f'here: nop; there: .incbin "{path}"\n',
        "upper case": f'\tnop ;.INCLUDE "{path}"\n',
        "quoted name": f'".include" "{path}"\n',
        "macro body": f'.macro m\n.incbin "{path}"\n.endm\nm\nnop\n',
        "macro argument": f'.macro m d\n.\\d "{path}"\n.endm\nm include\n',
        "irp argument": f'.irp d, include\n.\\d "{path}"\n.endr\n',
        "irpc pasting": f'.irpc c, i\n.\\c\\()nclude "{path}"\n.endr\n',
    }


@pytest.mark.parametrize("case", list(bypasses("FILE")))
def test_file_reading_assembly_is_screened_wherever_it_hides(secret_file, case):
    assembly = bypasses(secret_file)[case]
    reason = screen_assembly(assembly)
    assert reason is not None and "is not allowed" in reason
    with pytest.raises(ToolError, match="llvm-mca not run") as info:
        static_cost(assembly)
    assert "hunter2" not in str(info.value)


def test_the_screen_passes_ordinary_assembly():
    ordinary = ("\t.text\n\t.section\t.text.include_all,\"ax\",@progbits\n\t.globl\tf\nf:  # a comment\n"
                "\tmovl\t%edi, %eax ; addl\t$1, %eax\n\tretq\n\t.section\t.rodata\n.L.str:\t.asciz\t\"includes\"\n"
                "\t.rept 2\n\tnop\n\t.endr\n")
    assert screen_assembly(ordinary) is None
    assert static_cost(ordinary).instructions > 0


# -- 6. guidance arguments, ranker artifacts and the -Oz predictor ---------------------------------------------------

@pytest.mark.parametrize("arguments, error, name", [
    ({"budget": 1.5}, TypeError, "budget"), ({"budget": True}, TypeError, "budget"),
    ({"budget": -1}, ValueError, "budget"), ({"seconds": math.nan}, ValueError, "seconds"),
    ({"seconds": math.inf}, ValueError, "seconds"), ({"coreset_share": 2.0}, ValueError, "coreset_share"),
    ({"coreset_share": math.nan}, ValueError, "coreset_share"), ({"retrieval_share": -0.1}, ValueError,
                                                                  "retrieval_share"),
    ({"neighbors": 0}, ValueError, "neighbors"), ({"reserve_builds": 0.5}, TypeError, "reserve_builds"),
])
def test_recommend_pipeline_refuses_nonsense_arguments(arguments, error, name):
    arguments = {"budget": 3, **arguments}
    with pytest.raises(error, match=f"^{name} must be"):
        bpq.recommend_pipeline(EXAMPLES / "sum_array.c", **arguments)


def small_ranker():
    from behavioral_pq.tasks.guidance.ranker import PipelineRanker

    rng = np.random.default_rng(0)
    rows = rng.normal(size=(40, 3)).astype(np.float32)
    gains = np.stack([rows[:, 0] * 0.1, -rows[:, 0] * 0.1], axis=1).astype(np.float32)
    return PipelineRanker.fit(rows, gains, [("-Oz", "-gvn"), ("-Oz", "-sroa")], "autophase")


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.scale.__setitem__(0, 0.0), "scale holds 0, below"),
    (lambda r: r.weights.__setitem__((0, 0), 1e38), "weights holds 1e\\+38, beyond"),
    (lambda r: setattr(r, "alpha", math.nan), "alpha must be a finite number >= 0, got nan"),
])
def test_a_ranker_that_would_score_nan_is_refused_on_load(tmp_path, damage, message):
    from behavioral_pq.tasks.guidance.ranker import load_ranker

    ranker = small_ranker()
    good = load_ranker(ranker.save(tmp_path / "good"))
    assert np.isfinite(good.scores(np.array([1.0, 2.0, 3.0]))).all()
    damage(ranker)
    ranker.save(tmp_path / "bad")
    with pytest.raises(RankerError, match=message):
        load_ranker(tmp_path / "bad")


def test_the_shipped_rankers_still_load():
    from behavioral_pq.tasks.guidance.ranker import DEFAULT_RANKERS, load_ranker
    from behavioral_pq.embedding.encoder import shipped

    for choices in DEFAULT_RANKERS.values():
        for _, name in choices:
            if shipped(name).is_dir():
                assert np.isfinite(load_ranker(shipped(name)).scores(None)).all()


EMPTY = "declare i32 @puts(ptr)\n"


def test_no_oz_benefit_is_predicted_for_a_module_without_instructions(tmp_path):
    from behavioral_pq.tasks.predictors import predict_oz_benefit

    path = tmp_path / "empty.ll"
    path.write_text(EMPTY)
    assert bpq.load_module(path).instruction_count == 0
    with pytest.raises(ValueError, match="^the module has no instructions: -Oz has nothing to remove, so there "
                                         "is nothing to predict$"):
        predict_oz_benefit(path)


def test_the_cli_says_there_is_nothing_to_predict_for_an_empty_module(tmp_path):
    path = tmp_path / "empty.ll"
    path.write_text(EMPTY)
    done = bpq_cli("predict", "oz", path)
    assert "would remove" not in done.stdout
    assert done.stderr.strip().splitlines() == [
        f"bpq: error: {path}: the module has no instructions: -Oz has nothing to remove, so there is nothing to "
        "predict"]
    assert done.returncode == 2
