"""The CompilerGym 0.2.5 shim's states, validation results, observation names, working directory and random
search behave as CompilerGym's: values and texts from its tests/compiler_env_state_test.py,
tests/validation_result_test.py, tests/llvm/observation_spaces_test.py and tests/random_search_test.py."""

import io
import json
import os
import sys

import numpy as np
import pytest

import behavioral_pq.env.compiler_gym as compiler_gym
from behavioral_pq.env.compiler_gym import (
    CompilerEnvState,
    CompilerEnvStateReader,
    ValidationError,
    ValidationResult,
)
from behavioral_pq.env.compiler_gym.random_search import random_search, replay_actions_from_logs
from behavioral_pq.errors import UnknownSpaceError

MATMUL = "benchmark://examples-v0/matmul"
FOO = "benchmark://cbench-v0/foo"
CSV = "benchmark,reward,walltime,commandline\nbenchmark://cbench-v0/foo,2.0,5.0,-a -b -c\n"
#: One definition and two declarations: LLVM's InstCount counts three functions.
DECLARATIONS = """declare i32 @puts(ptr)
declare void @exit(i32)

define i32 @main() {
  ret i32 0
}
"""
#: ``env.observation.spaces`` of CompilerGym 0.2.5's llvm-v0 (tests/llvm/observation_spaces_test.py).
COMPILER_GYM_SPACES = {
    "Autophase", "AutophaseDict", "Bitcode", "BitcodeFile", "Buildtime", "CpuInfo", "Inst2vec",
    "Inst2vecEmbeddingIndices", "Inst2vecPreprocessedText", "InstCount", "InstCountDict", "InstCountNorm",
    "InstCountNormDict", "Ir", "IrInstructionCount", "IrInstructionCountO0", "IrInstructionCountO3",
    "IrInstructionCountOz", "IrSha1", "IsBuildable", "IsRunnable", "LexedIr", "LexedIrTuple", "ObjectTextSizeBytes",
    "ObjectTextSizeO0", "ObjectTextSizeO3", "ObjectTextSizeOz", "Programl", "ProgramlJson", "Runtime",
    "TextSizeBytes", "TextSizeO0", "TextSizeO3", "TextSizeOz",
}


def state(**fields):
    return CompilerEnvState(**{"benchmark": FOO, "walltime": 5, "commandline": "-a -b -c", "reward": 2, **fields})


def result(benchmark="benchmark://example-compiler-v0/test", walltime=3, errors=()):
    return ValidationResult(state=CompilerEnvState(benchmark=benchmark, commandline="test", walltime=1),
                            walltime=walltime, errors=list(errors))


def test_state_fields_are_checked_as_compiler_gyms_model():
    with pytest.raises(ValueError, match=r"3 validation errors for CompilerEnvState\nbenchmark\n") as missing:
        CompilerEnvState()
    assert "commandline" in str(missing.value) and "walltime" in str(missing.value)
    with pytest.raises(ValueError, match="Walltime cannot be negative"):
        state(walltime=-1)
    s = state()
    with pytest.raises(ValueError, match="Walltime cannot be negative"):
        s.walltime = -1
    assert s.walltime == 5.0
    s.reward = "1.5"
    assert s.reward == 1.5
    with pytest.raises(TypeError, match="allow_mutation"):
        s.benchmark = "benchmark://cbench-v0/bar"


def test_state_json_round_trip_and_equality():
    original = state(walltime=100, reward=1.5)
    assert json.loads(original.json()) == {"benchmark": FOO, "commandline": "-a -b -c", "walltime": 100.0,
                                           "reward": 1.5}
    again = CompilerEnvState(**json.loads(original.json()))
    assert (again.benchmark, again.walltime, again.reward, again.commandline) == (FOO, 100, 1.5, "-a -b -c")
    assert CompilerEnvState.parse_raw(state(reward=None).json()).reward is None
    assert state(walltime=1) == state(walltime=99) and (state(walltime=1) != state(walltime=99)) is False
    assert state(reward=2) != state(reward=3) and state(reward=None) == state(reward=3) and state() != 5


def test_state_reader_texts_and_paths(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"^Expected 4 columns in the first row of CSV: \['abcdef'\]$"):
        next(iter(CompilerEnvStateReader(io.StringIO("abcdef\n"))))
    expected = [state()]
    monkeypatch.setattr(sys, "stdin", io.StringIO(CSV))
    assert list(CompilerEnvStateReader.read_paths(["-"])) == expected
    (tmp_path / "states.csv").write_text(CSV)
    assert list(CompilerEnvStateReader.read_paths([str(tmp_path / "states.csv"), "-"])) == expected
    for bad in ("/fake/directory/file.csv", "https://www.compilergym.ai/benchmark",
                "htts://www.compilergym.ai/benchmark.csv"):
        with pytest.raises(FileNotFoundError):
            list(CompilerEnvStateReader.read_paths([bad]))


def test_state_reader_fetches_csv_addresses(monkeypatch):
    requests = pytest.importorskip("requests")
    asked = []

    class Response:
        def __init__(self, text, status_code):
            self.text, self.status_code = text, status_code

    monkeypatch.setattr(requests, "get", lambda url, **kwargs: asked.append((url, kwargs)) or Response(CSV, 200))
    assert list(CompilerEnvStateReader.read_paths(["https://compilergym.ai/benchmarktest.csv"])) == [state()]
    assert asked[0][0] == "https://compilergym.ai/benchmarktest.csv" and asked[0][1]["timeout"] > 0
    monkeypatch.setattr(requests, "get", lambda url, **kwargs: Response("", 404))
    with pytest.raises(requests.exceptions.InvalidURL, match="could not be obtained"):
        list(CompilerEnvStateReader.read_paths(["https://compilergym.ai/benchmarktest.csv"]))


def test_validation_errors_compare_serialize_and_sort():
    e1 = ValidationError(type="Syntax Error", data={"data": [1, 2, 3]})
    assert e1 == ValidationError(type="Syntax Error", data={"data": [1, 2, 3]})
    assert e1 != ValidationError(type="Foobar", data={"data": [1, 2, 3]})
    assert e1 != ValidationError(type="Syntax Error", data={"data": [1, 2, 3, 4]})
    assert ValidationError(**json.loads(e1.json())) == e1 and ValidationError(type="x").data == {}
    runtime = ValidationError(type="Runtime Error", data={"a": "b"})
    assert sorted([e1, runtime]) == [runtime, e1]


def test_validation_results_join_and_compare_without_walltime():
    syntax = ValidationError(type="Syntax Error", data={"data": [1, 2, 3]})
    other = ValidationError(type="Type Error", data={"a": "b"})
    one = result(errors=[syntax])
    assert ValidationResult(**json.loads(one.json())) == one
    assert result(walltime=3) == result(walltime=10) and result(benchmark="benchmark://a/b") != result()
    assert result(errors=[syntax, other]) == result(errors=[other, syntax]) != result(errors=[syntax])
    joined = ValidationResult.join([one, result(errors=[other])])
    assert joined == result(errors=[syntax, other]) and joined.walltime == 6
    assert ValidationResult.join([one]) == one
    with pytest.raises(ValueError, match=r"^No states to join$"):
        ValidationResult.join([])
    with pytest.raises(ValueError, match="All states must be the same"):
        ValidationResult.join([one, result(benchmark="benchmark://a/b")])
    with pytest.raises(ValueError, match="Walltime cannot be negative"):
        result(walltime=-1)
    assert result(errors=[syntax, syntax]).error_details == "2× Syntax Error"


def test_observation_spaces_are_compiler_gyms_and_the_extras_are_named():
    with compiler_gym.make("llvm-v0", benchmark=MATMUL) as env:
        env.reset()
        assert set(env.observation.spaces) == COMPILER_GYM_SPACES
        assert set(env.extra_observation_spaces) == {"Spectrum", "Codes", "Embedding"}
        env.observation_space = "Codes"
        assert env.observation_space_spec.id == "Codes" and callable(env.observation.Embedding)
        with pytest.raises(UnknownSpaceError, match="Observation space not found: Cods"):
            env.observation_space = "Cods"


def test_instcount_counts_declared_functions(tmp_path):
    (tmp_path / "declarations.ll").write_text(DECLARATIONS)
    with compiler_gym.make("llvm-v0", benchmark=str(tmp_path / "declarations.ll")) as env:
        env.reset()
        counts = env.observation["InstCount"]
        assert counts[:3].tolist() == [1, 1, 3]
        assert env.observation["InstCountDict"]["TotalFuncsCount"] == 3
        np.testing.assert_allclose(env.observation["InstCountNorm"][:2], [1.0, 3.0])
        _, _, done, _ = env.step(env.action_space["-mem2reg"], observation_spaces=["InstCount"])
        assert not done and env.observation["InstCount"][2] == 3


def test_bitcode_file_is_removed_when_the_environment_closes():
    env = compiler_gym.make("llvm-v0", benchmark=MATMUL)
    env.reset()
    path = env.observation["BitcodeFile"]
    assert os.path.dirname(path) == str(env.working_directory)
    with open(path, "rb") as f:
        assert f.read() == bytes(env.observation["Bitcode"].tobytes())
    fork = env.fork()
    forked = fork.observation["BitcodeFile"]
    assert os.path.dirname(forked) != os.path.dirname(path)
    fork.close()
    assert not os.path.exists(forked) and os.path.isfile(path)
    env.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


def test_random_search_writes_compiler_gyms_logs(tmp_path):
    def make_env():
        return compiler_gym.make("llvm-ic-v0", benchmark=MATMUL)

    env = random_search(make_env=make_env, outdir=tmp_path, patience=5, total_runtime=1, nproc=1)
    env.close()
    assert json.loads((tmp_path / "random_search.json").read_text()) == {
        "env": "llvm-ic-v0", "benchmark": MATMUL, "reward": "IrInstructionCountOz", "patience": 5}
    header, *rows = (tmp_path / "random_search_progress.csv").read_text().splitlines()
    assert header == "runtime_seconds,total_episode_count,total_step_count,num_passes,reward" and rows
    names = (tmp_path / "random_search_best_actions.txt").read_text().split()
    assert names and all(n.startswith("-") for n in names)
    assert (tmp_path / "optimized.bc").read_bytes()[:2] == b"BC"
    assert (tmp_path / "random_search_best_actions_commandline.txt").read_text().startswith("opt ")
    with make_env() as env:
        replay_actions_from_logs(env, tmp_path)
        assert env.actions == [env.action_space.names.index(n) for n in names]
    assert len((tmp_path / "random_search_best_actions_progress.csv").read_text().splitlines()) == len(names)
    with pytest.raises(ValueError, match="A reward space must be specified"):
        random_search(make_env=lambda: compiler_gym.make("llvm-v0", benchmark=MATMUL), outdir=tmp_path / "x")
