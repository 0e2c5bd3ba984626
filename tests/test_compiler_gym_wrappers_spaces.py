"""The CompilerGym 0.2.5 shim's spaces, views and wrappers behave as CompilerGym 0.2.5's: named spaces that compare
by name and definition (``Discrete``, ``Box`` without its dtype, ``Tuple``, ``Permutation``, ``SpaceSequence``),
the reward spaces ``RuntimeReward`` and ``DefaultRewardFromObservation``, and the wrappers ``Counter``,
``ForkOnStep``, ``ValidateBenchmarkAfterEveryStep``, ``RuntimePointEstimateReward`` and
``SynchronousSqliteLogger``. Each test names the CompilerGym test (tag v0.2.5) whose values it takes."""

import pickle
import sqlite3
import zlib

import numpy as np
import pytest

from behavioral_pq.env import compiler_gym
from behavioral_pq.env.compiler_gym import gym
from behavioral_pq.env.compiler_gym.spaces import (
    Box,
    DefaultRewardFromObservation,
    Discrete,
    NamedDiscrete,
    Permutation,
    RuntimeReward,
    Scalar,
    SpaceSequence,
    Tuple,
)
from behavioral_pq.env.compiler_gym.views import ObservationView
from behavioral_pq.env.compiler_gym.wrappers import (
    CompilerEnvWrapper,
    Counter,
    ForkOnStep,
    ObservationWrapper,
    RewardWrapper,
    RuntimePointEstimateReward,
    SynchronousSqliteLogger,
    ValidateBenchmarkAfterEveryStep,
)
from behavioral_pq.errors import BenchmarkInitError

MATMUL = "benchmark://examples-v0/matmul"


@pytest.fixture
def env():
    with compiler_gym.make("llvm-v0", benchmark=MATMUL) as e:
        yield e


# -- spaces -------------------------------------------------------------------------------------------------------

def test_discrete_compares_name_and_size():
    """tests/spaces/discrete_test.py::test_equal, ::test_not_equal."""
    assert Discrete(2, name="test_discrete") == Discrete(2, name="test_discrete")
    assert Discrete(2, name="test_discrete") != Discrete(3, name="test_discrete")
    assert Discrete(2, name="test_discrete") != Discrete(2, name="test_discrete_2")
    assert Discrete(2, name="test_discrete") != "not_a_discrete"
    assert isinstance(NamedDiscrete(["a", "b"], name="n"), Discrete)


def test_named_discrete_needs_values():
    """tests/spaces/named_discrete_test.py::test_empty_space."""
    with pytest.raises(ValueError, match="No values for discrete space"):
        NamedDiscrete([], name="test")


def test_box_equality_ignores_the_dtype():
    """tests/spaces/box_test.py::test_equal, ::test_not_equal (gym 0.21's Box equality)."""
    box = Box(low=0, high=1, name="test_box", shape=[1, 2], dtype=int)
    assert box == Box(low=0, high=1, name="test_box", shape=[1, 2], dtype=int)
    assert box == Box(low=0, high=1, name="test_box", shape=[1, 2], dtype=float)
    assert box != Box(low=0, high=1, name="test_box_2", shape=[1, 2], dtype=int)
    assert box != Box(low=-1, high=1, name="test_box", shape=[1, 2], dtype=int)
    assert box != Box(low=0, high=2, name="test_box", shape=[1, 2], dtype=int)
    assert box != Box(low=0, high=1, name="test_box", shape=[1, 3], dtype=int)
    assert box != "not_a_box"


def test_tuple_compares_name_and_spaces():
    """tests/spaces/tuple_test.py::test_equal, ::test_not_equal."""
    tuple_space = Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)], name="test_tuple")
    assert tuple_space == Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)], name="test_tuple")
    assert tuple_space != Tuple([gym.spaces.Discrete(3), gym.spaces.Discrete(3)], name="test_tuple")
    assert tuple_space != Tuple([gym.spaces.Discrete(2)], name="test_tuple")
    assert tuple_space != Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)], name="test_tuple_2")
    assert tuple_space != "not_a_tuple"


def test_permutation_is_an_ordering_of_an_integer_range():
    """tests/spaces/permutation_test.py::test_invalid_scalar_range_dtype, ::test_equal, ::test_not_equal."""
    with pytest.raises(TypeError, match="Permutation space can have integral scalar range only."):
        Permutation(name="", scalar_range=Scalar(name="", min=0, max=2, dtype=float))
    permutation = Permutation(name="perm", scalar_range=Scalar(name="range", min=0, max=2, dtype=int))
    assert permutation == Permutation(name="perm", scalar_range=Scalar(name="range", min=0, max=2, dtype=int))
    assert permutation != Permutation(name="perm", scalar_range=Scalar(name="range", min=0, max=1, dtype=int))
    assert permutation.size_range == (3, 3)
    one_to_three = Permutation(name="perm", scalar_range=Scalar(name="range", min=1, max=3, dtype=int))
    one_to_three.seed(0)
    assert sorted(one_to_three.sample().tolist()) == [1, 2, 3]


def test_space_sequence_contains():
    """tests/spaces/sequence_test.py::test_space_sequence_contains."""
    space = SpaceSequence(name="seq", space=Scalar(name="subspace", min=0, max=1, dtype=float), size_range=(0, 2))
    assert space.contains([0.5, 0.6])
    assert not space.contains(["not-a-number"])
    assert not space.contains([2.0])
    assert not space.contains([0.1, 0.2, 0.3])
    assert not space.contains(0.5)
    assert space == SpaceSequence(name="seq", space=Scalar(name="subspace", min=0, max=1, dtype=float),
                                  size_range=(0, 2))
    assert space != SpaceSequence(name="seq", space=Scalar(name="subspace", min=0, max=2, dtype=float),
                                  size_range=(0, 2))


def test_default_reward_from_observation_is_the_change_of_the_value():
    """compiler_gym/spaces/reward.py DefaultRewardFromObservation: the first step measures from 0."""
    reward = DefaultRewardFromObservation("IrInstructionCount")
    assert reward.name == "IrInstructionCount" and reward.observation_spaces == ["IrInstructionCount"]
    reward.reset(benchmark=MATMUL, observation_view=None)
    assert reward.update([0], [10], None) == 10.0
    assert reward.update([0], [7], None) == -3.0
    reward.reset(benchmark=MATMUL, observation_view=None)
    assert reward.update([0], [4], None) == 4.0


def test_runtime_reward_is_the_drop_of_the_estimate():
    """compiler_gym/spaces/runtime_reward.py: the estimator over the ``Runtime`` values, BenchmarkInitError for a
    benchmark that cannot run (tests/wrappers/llvm_test.py::test_reward_range_not_runnable_benchmark's message)."""
    reward = RuntimeReward(runtime_count=3, warmup_count=0, estimator=np.median)
    assert (reward.name, reward.observation_spaces, reward.range) == ("runtime", ["Runtime"], (-np.inf, np.inf))
    with pytest.raises(BenchmarkInitError, match=r"^Benchmark is not runnable: benchmark://npb-v0/1$"):
        reward.reset("benchmark://npb-v0/1", {"IsRunnable": 0})
    reward.reset(MATMUL, {"IsRunnable": 1, "Runtime": [3.0, 1.0, 2.0]})
    assert reward.update([0], [[1.0, 1.5, 0.5]], None) == 1.0
    assert reward.update([0], [[2.0, 2.0, 2.0]], None) == -1.0
    with pytest.raises(RuntimeError, match="Expected 3 runtimes but received 2"):
        reward.update([0], [[1.0, 1.0]], None)


# -- views --------------------------------------------------------------------------------------------------------

def test_observation_view_needs_spaces():
    """tests/views/observation_test.py::test_empty_space."""
    with pytest.raises(ValueError) as ctx:
        ObservationView(None, [])
    assert str(ctx.value) == "No observation spaces"


# -- wrappers -----------------------------------------------------------------------------------------------------

def test_observation_and_reward_wrappers_need_a_conversion(env):
    """tests/wrappers/core_wrappers_test.py::test_wrapped_observation_missing_definition."""
    with pytest.raises(TypeError):
        ObservationWrapper(env)
    with pytest.raises(TypeError):
        RewardWrapper(env)


def test_counter_counts_calls(env):
    """tests/wrappers/counter_test.py::test_Counter_reset, ::test_Counter_step, ::test_Counter_double_close."""
    with Counter(env) as counted:
        counted.reset()
        counted.reset()
        counted.step(0)
        assert counted.counters == {"close": 0, "fork": 0, "reset": 2, "step": 1}
        with counted.fork() as forked:
            assert forked.actions == [0] and not isinstance(forked, Counter)
        counted.close()
        counted.close()
        assert counted.counters == {"close": 2, "fork": 1, "reset": 2, "step": 1}
    assert counted.counters["close"] == 3


def test_fork_on_step_undoes_steps(env):
    """tests/wrappers/fork_test.py::test_ForkOnStep_step, ::test_ForkOnStep_reset, ::test_ForkOnStep_undo."""
    with ForkOnStep(env) as forking:
        forking.reset()
        assert forking.stack == []
        forking.step(0)
        forking.step(1)
        assert forking.actions == [0, 1]
        assert [fork.actions for fork in forking.stack] == [[], [0]]
        forking.undo()
        assert forking.actions == [0] and len(forking.stack) == 1
        forking.undo()
        assert forking.actions == [] and forking.stack == []
        assert forking.undo() is None and forking.actions == []
        forking.step(0)
        forking.reset()
        assert forking.actions == [] and forking.stack == []
        with pytest.raises(NotImplementedError):
            forking.fork()
        forking.close()
        forking.close()


@pytest.mark.parametrize("reward_penalty", [-5, 10])
def test_validate_after_every_step_ends_the_episode_on_an_error(env, monkeypatch, reward_penalty):
    """tests/wrappers/validation_test.py::test_ValidateBenchmarkAfterEveryStep_valid, ::_invalid."""
    env.reset()
    monkeypatch.setattr(type(env.benchmark), "ivalidate", lambda *_: iter(()))
    validated = ValidateBenchmarkAfterEveryStep(env, reward_penalty=reward_penalty)
    _, reward, done, info = validated.step(0)
    assert reward != reward_penalty and not done and "error_details" not in info
    monkeypatch.setattr(type(env.benchmark), "ivalidate", lambda *_: iter(["Oh no!"]))
    _, reward, done, info = validated.step(0)
    assert reward == reward_penalty and done and info["error_details"] == "Oh no!"


def test_runtime_point_estimate_reward_checks_its_counts_at_reset(env):
    """tests/wrappers/llvm_test.py::test_invalid_runtime_count, ::test_invalid_warmup_count, ::test_reward_range."""
    wrapped = RuntimePointEstimateReward(env, runtime_count=-10)
    assert wrapped.reward_range == (-float("inf"), float("inf"))
    with pytest.raises(ValueError, match="runtimes_per_observation_count must be >= 1. Received: -10"):
        wrapped.reset()
    wrapped = RuntimePointEstimateReward(compiler_gym.make("llvm-v0", benchmark=MATMUL), warmup_count=-10)
    with wrapped, pytest.raises(ValueError,
                                match="warmup_runs_count_per_runtime_observation must be >= 0. Received: -10"):
        wrapped.reset()


def test_runtime_point_estimate_reward_values(env):
    """tests/wrappers/llvm_test.py::test_reward_values, ::test_fork."""
    wrapped = RuntimePointEstimateReward(env, runtime_count=3, warmup_count=1, estimator=min)
    wrapped.reset()
    assert env.runtime_observation_count == 3 and env.runtime_warmup_runs_count == 1
    space = wrapped.reward_space_spec
    assert (space.name, space.runtime_count, space.warmup_count, space.estimator) == ("runtime", 3, 1, min)
    _, reward_a, done, info = wrapped.step(wrapped.action_space["-mem2reg"])
    assert not done, info
    _, reward_b, done, info = wrapped.step(wrapped.action_space["-instcombine"])
    assert not done, info
    assert wrapped.episode_reward == reward_a + reward_b
    assert reward_a or reward_b
    with wrapped.fork() as forked:
        assert isinstance(forked, RuntimePointEstimateReward)
        assert forked.reward_space_spec.name == "runtime"
        assert forked.reward_space_spec.previous_runtime == space.previous_runtime


def test_sqlite_logger_writes_compiler_gyms_tables(env, tmp_path):
    """tests/wrappers/sqlite_logger_test.py::test_SynchronousSqliteLogger_creates_file, ::_requires_llvm_env,
    ::_wrapped_env; the rows are those of CompilerGym's schema."""
    with pytest.raises(TypeError, match="Requires LlvmEnv base environment"):
        SynchronousSqliteLogger(1, tmp_path / "example.db")
    db_path = tmp_path / "logs" / "example.db"
    env.observation_space = "Autophase"
    env.reward_space = "IrInstructionCount"
    logged = SynchronousSqliteLogger(CompilerEnvWrapper(env), db_path)
    logged.reset()
    initial_sha1 = env.observation["IrSha1"]
    observation, reward, done, _ = logged.step(env.action_space["-mem2reg"])
    assert not done
    assert np.array_equal(observation, env.observation["Autophase"])
    assert logged.episode_reward == reward
    ir, autophase, instcount = env.observation["Ir"], env.observation["Autophase"], env.observation["InstCount"]
    sha1, count = env.observation["IrSha1"], env.observation["IrInstructionCount"]
    logged.flush()
    with sqlite3.connect(str(db_path)) as connection:
        states = connection.execute("SELECT benchmark_uri, done, state_id, actions FROM States").fetchall()
        row = connection.execute(
            "SELECT ir_instruction_count, compressed_llvm_ir, pickled_compressed_programl, autophase, instcount "
            "FROM Observations WHERE state_id = ?", (sha1,)).fetchone()
    connection.close()
    assert sorted(states, key=lambda state: state[3]) == [
        (MATMUL, 0, initial_sha1, ""), (MATMUL, 0, sha1, str(env.action_space["-mem2reg"]))]
    assert row[0] == count
    assert zlib.decompress(row[1]).decode("utf-8") == ir
    assert pickle.loads(zlib.decompress(row[2])).number_of_nodes() > 0
    assert [int(x) for x in row[3].split()] == autophase.tolist()
    assert [int(x) for x in row[4].split()] == instcount.tolist()
    with pytest.raises(ValueError, match="default observation and reward spaces"):
        logged.step(0, observation_spaces=["Ir"])
    logged.close()
