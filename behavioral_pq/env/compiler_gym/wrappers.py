"""CompilerGym 0.2.5's ``compiler_gym.wrappers``: the wrapper bases (``CompilerEnvWrapper``, ``ActionWrapper``,
``ObservationWrapper``, ``RewardWrapper``), ``TimeLimit``, the command-line action wrappers, the benchmark
iterators, ``Counter``, ``ForkOnStep``, ``ValidateBenchmarkAfterEveryStep`` and, for ``LlvmEnv``,
``RuntimePointEstimateReward`` and ``SynchronousSqliteLogger``, with its names and behaviour. A wrapper is a
gymnasium ``Wrapper`` whose attributes (spaces, benchmark, views, state) are the wrapped environment's; setting
them sets the environment's.
"""

from __future__ import annotations

import itertools
import logging
import pickle
import sqlite3
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable as IterableType
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Union

import gymnasium
import numpy as np

from behavioral_pq.env.compiler_gym.datasets import Benchmark
from behavioral_pq.env.compiler_gym.env import CompilerEnv, LlvmEnv
from behavioral_pq.env.compiler_gym.spaces import Commandline, CommandlineFlag, RuntimeReward

logger = logging.getLogger(__name__)

BenchmarkLike = Union[str, Benchmark]


def _forward(name: str, doc: str = "", settable: bool = True) -> property:
    def get(self):
        return getattr(self.env, name)

    def set(self, value):
        setattr(self.env, name, value)

    return property(get, set if settable else None, doc=doc or f"The wrapped environment's ``{name}``.")


class CompilerEnvWrapper(CompilerEnv, gymnasium.Wrapper):
    """The base wrapper: every call and attribute goes to the wrapped environment unless a subclass overrides it
    (``reset`` returns the observation and ``step`` the 4-tuple, as CompilerGym's do)."""

    def __init__(self, env: CompilerEnv):
        gymnasium.Wrapper.__init__(self, env)

    def __getattr__(self, name: str):
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, *args, **kwargs):
        return self.env.reset(*args, **kwargs)

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        return self.env.multistep(actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
                                  observations=observations, rewards=rewards)

    def fork(self) -> "CompilerEnvWrapper":
        return type(self)(env=self.env.fork())

    def close(self) -> None:
        self.env.close()

    def render(self, mode: str = "human"):
        return self.env.render(mode)

    def commandline(self, *args, **kwargs) -> str:
        return self.env.commandline(*args, **kwargs)

    def commandline_to_actions(self, commandline: str) -> List[int]:
        return self.env.commandline_to_actions(commandline)

    def apply(self, state) -> None:
        self.env.apply(state)

    def validate(self, state=None):
        return self.env.validate(state)

    def __copy__(self):
        raise TypeError("CompilerEnv instances do not support shallow copies. Use deepcopy()")

    def __deepcopy__(self, memo):
        return self.fork()

    action_space = _forward("action_space")
    observation_space = _forward("observation_space")
    reward_range = _forward("reward_range")
    observation = _forward("observation")
    observation_space_spec = _forward("observation_space_spec")
    reward = _forward("reward")
    reward_space = _forward("reward_space")
    reward_space_spec = _forward("reward_space_spec")
    benchmark = _forward("benchmark")
    datasets = _forward("datasets")
    episode_reward = _forward("episode_reward")
    spec = _forward("spec")

    action_spaces = _forward("action_spaces", settable=False)
    in_episode = _forward("in_episode", settable=False)
    episode_walltime = _forward("episode_walltime", settable=False)
    actions = _forward("actions", settable=False)
    state = _forward("state", settable=False)
    version = _forward("version", settable=False)
    compiler_version = _forward("compiler_version", settable=False)


class ActionWrapper(CompilerEnvWrapper):
    """Translates every action with :meth:`action` before the wrapped environment takes it."""

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        return self.env.multistep([self.action(a) for a in actions], observation_spaces=observation_spaces,
                                  reward_spaces=reward_spaces, observations=observations, rewards=rewards)

    def action(self, action):
        raise NotImplementedError

    def reverse_action(self, action):
        raise NotImplementedError


class ObservationWrapper(CompilerEnvWrapper, ABC):
    """Converts every observation (of ``reset`` and ``step``) with :meth:`convert_observation`, which a subclass
    defines (TypeError on instantiating one that does not)."""

    def reset(self, *args, **kwargs):
        return self.convert_observation(self.env.reset(*args, **kwargs))

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        observation, reward, done, info = self.env.multistep(
            actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
            observations=observations, rewards=rewards)
        return self.convert_observation(observation), reward, done, info

    @abstractmethod
    def convert_observation(self, observation):
        raise NotImplementedError


class RewardWrapper(CompilerEnvWrapper, ABC):
    """Converts every reward with :meth:`convert_reward`, which a subclass defines (TypeError on instantiating one
    that does not); ``episode_reward`` sums the converted rewards."""

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        observation, reward, done, info = self.env.multistep(
            actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
            observations=observations, rewards=rewards)
        if reward is not None and self.episode_reward is not None:
            self.unwrapped.episode_reward -= reward
            reward = self.convert_reward(reward)
            self.unwrapped.episode_reward += reward
        return observation, reward, done, info

    @abstractmethod
    def convert_reward(self, reward):
        raise NotImplementedError


class TimeLimit(CompilerEnvWrapper):
    """Ends an episode after ``max_episode_steps`` actions (``done``, and ``info["TimeLimit.truncated"]`` when
    the episode had not ended by itself)."""

    def __init__(self, env: CompilerEnv, max_episode_steps: Optional[int] = None):
        super().__init__(env=env)
        if max_episode_steps is None and self.env.spec is not None:
            max_episode_steps = env.spec.max_episode_steps
        if self.env.spec is not None:
            self.env.spec.max_episode_steps = max_episode_steps
        self._max_episode_steps = max_episode_steps
        self._elapsed_steps: Optional[int] = None

    def multistep(self, actions, **kwargs):
        actions = list(actions)
        if self._elapsed_steps is None:
            raise RuntimeError("cannot call env.step() before calling reset()")
        observation, reward, done, info = self.env.multistep(actions, **kwargs)
        self._elapsed_steps += len(actions)
        if self._elapsed_steps >= self._max_episode_steps:
            info["TimeLimit.truncated"] = not done
            done = True
        return observation, reward, done, info

    def reset(self, *args, **kwargs):
        self._elapsed_steps = 0
        return self.env.reset(*args, **kwargs)

    def fork(self) -> "TimeLimit":
        forked = type(self)(env=self.env.fork(), max_episode_steps=self._max_episode_steps)
        forked._elapsed_steps = self._elapsed_steps
        return forked


class CommandlineWithTerminalAction(CompilerEnvWrapper):
    """Adds one action (``terminal``, by default ``"# end-of-episode"``) that ends the episode."""

    def __init__(self, env: CompilerEnv, terminal: CommandlineFlag = CommandlineFlag(
            name="end-of-episode", flag="# end-of-episode", description="End the episode")):
        super().__init__(env)
        if not isinstance(env.action_space, Commandline):
            raise TypeError(f"unsupported action space: {type(env.action_space).__name__}")
        space = env.action_space
        self._wrapper_action_space = Commandline(
            [CommandlineFlag(n, f, d) for n, f, d in zip(space.names, space.flags, space.descriptions)] + [terminal],
            name=f"{type(self).__name__}<{space.name}>")

    @property
    def action_space(self) -> Commandline:
        return self._wrapper_action_space

    @action_space.setter
    def action_space(self, space) -> None:
        self._wrapper_action_space = space

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        actions = list(actions)
        terminal = len(self.action_space.flags) - 1
        cut = actions.index(terminal) if terminal in actions else -1
        if cut >= 0:
            actions = actions[:cut]
        observation, reward, done, info = self.env.multistep(
            actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
            observations=observations, rewards=rewards)
        if cut >= 0 and not done:
            done = True
            info["terminal_action"] = True
        return observation, reward, done, info


class ConstrainedCommandline(ActionWrapper):
    """Restricts the actions to ``flags`` (action ``i`` of the wrapper is ``flags[i]``)."""

    def __init__(self, env: CompilerEnv, flags: Iterable[str], name: Optional[str] = None):
        super().__init__(env)
        flags = list(flags)
        if not flags:
            raise TypeError("no flags provided")
        if not isinstance(env.action_space, Commandline):
            raise TypeError(f"can only wrap a Commandline action space, not {type(env.action_space).__name__}")
        self._flags = flags
        space = env.action_space
        self._forward_translation: List[int] = [space[f] for f in flags]
        self._reverse_translation: Dict[int, int] = {v: i for i, v in enumerate(self._forward_translation)}
        self._wrapper_action_space = Commandline(
            [CommandlineFlag(space.names[a], space.flags[a], space.descriptions[a])
             for a in self._forward_translation],
            name=f"{type(self).__name__}<{name or space.name}, {len(flags)}>")

    @property
    def action_space(self) -> Commandline:
        return self._wrapper_action_space

    @action_space.setter
    def action_space(self, space) -> None:
        self._wrapper_action_space = space

    def action(self, action):
        if isinstance(action, IterableType):
            return [self._forward_translation[a] for a in action]
        return self._forward_translation[action]

    def reverse_action(self, action):
        if isinstance(action, IterableType):
            return [self._reverse_translation[a] for a in action]
        return self._reverse_translation[action]

    @property
    def actions(self) -> List[int]:
        return self.reverse_action(self.env.actions)

    def fork(self) -> "ConstrainedCommandline":
        return ConstrainedCommandline(env=self.env.fork(), flags=self._flags, name=self.action_space.name)


def _thread_safe_tee(iterable, n: int = 2):
    lock = threading.Lock()
    iterators = itertools.tee(iterable, n)

    def guarded(it):
        while True:
            with lock:
                try:
                    value = next(it)
                except StopIteration:
                    return
            yield value

    return tuple(guarded(it) for it in iterators)


class IterateOverBenchmarks(CompilerEnvWrapper):
    """Each ``reset()`` takes the next of ``benchmarks`` (StopIteration when they run out); ``reset`` refuses a
    ``benchmark`` argument."""

    def __init__(self, env: CompilerEnv, benchmarks: Iterable[BenchmarkLike], fork_shares_iterator: bool = False):
        super().__init__(env)
        self.benchmarks = iter(benchmarks)
        self.fork_shares_iterator = fork_shares_iterator

    def reset(self, benchmark: Optional[BenchmarkLike] = None, **kwargs):
        if benchmark is not None:
            raise TypeError("benchmark passed to IterateOverBenchmarks.reset()")
        return self.env.reset(benchmark=next(self.benchmarks), **kwargs)

    def fork(self) -> "IterateOverBenchmarks":
        if self.fork_shares_iterator:
            other = self.benchmarks
        else:
            self.benchmarks, other = _thread_safe_tee(self.benchmarks)
        return IterateOverBenchmarks(env=self.env.fork(), benchmarks=other,
                                     fork_shares_iterator=self.fork_shares_iterator)


class CycleOverBenchmarks(IterateOverBenchmarks):
    """As :class:`IterateOverBenchmarks`, cycling over ``benchmarks`` for ever."""

    def __init__(self, env: CompilerEnv, benchmarks: Iterable[BenchmarkLike], fork_shares_iterator: bool = False):
        super().__init__(env, benchmarks=itertools.cycle(benchmarks), fork_shares_iterator=fork_shares_iterator)


class CycleOverBenchmarksIterator(CompilerEnvWrapper):
    """Each ``reset()`` takes the next benchmark of ``make_benchmark_iterator()``, remaking it when it runs out."""

    def __init__(self, env: CompilerEnv, make_benchmark_iterator: Callable[[], Iterable[BenchmarkLike]]):
        super().__init__(env)
        self.make_benchmark_iterator = make_benchmark_iterator
        self.benchmarks = iter(make_benchmark_iterator())

    def reset(self, benchmark: Optional[BenchmarkLike] = None, **kwargs):
        if benchmark is not None:
            raise TypeError("benchmark passed to CycleOverBenchmarksIterator.reset()")
        try:
            benchmark = next(self.benchmarks)
        except StopIteration:
            self.benchmarks = iter(self.make_benchmark_iterator())
            benchmark = next(self.benchmarks)
        return self.env.reset(benchmark=benchmark, **kwargs)

    def fork(self) -> "CycleOverBenchmarksIterator":
        return CycleOverBenchmarksIterator(env=self.env.fork(), make_benchmark_iterator=self.make_benchmark_iterator)


class RandomOrderBenchmarks(IterateOverBenchmarks):
    """Each ``reset()`` takes a benchmark drawn uniformly, with replacement, from ``benchmarks``."""

    def __init__(self, env: CompilerEnv, benchmarks: Iterable[BenchmarkLike],
                 rng: Optional[np.random.Generator] = None):
        self._all_benchmarks = list(benchmarks)
        rng = rng or np.random.default_rng()
        super().__init__(env, benchmarks=(rng.choice(self._all_benchmarks) for _ in iter(int, 1)),
                         fork_shares_iterator=True)

    def fork(self) -> "IterateOverBenchmarks":
        return IterateOverBenchmarks(env=self.env.fork(), benchmarks=self._all_benchmarks)


class Counter(CompilerEnvWrapper):
    """Counts the calls to ``close``, ``reset``, ``step`` and ``fork`` in ``counters`` (``reset`` does not clear
    them). ``fork`` returns a fork of the wrapped environment, without a counter."""

    def __init__(self, env: CompilerEnv):
        super().__init__(env)
        self.counters: Dict[str, int] = {"close": 0, "reset": 0, "step": 0, "fork": 0}

    def close(self) -> None:
        self.counters["close"] += 1
        self.env.close()

    def reset(self, *args, **kwargs):
        self.counters["reset"] += 1
        return self.env.reset(*args, **kwargs)

    def step(self, *args, **kwargs):
        self.counters["step"] += 1
        return self.env.step(*args, **kwargs)

    def fork(self) -> CompilerEnv:
        self.counters["fork"] += 1
        return self.env.fork()


class ForkOnStep(CompilerEnvWrapper):
    """Forks the environment before every ``step``, so that :meth:`undo` can go back one step. ``stack`` holds the
    forks, oldest first; ``reset`` and ``close`` close them and empty it. A ``ForkOnStep`` cannot itself be
    forked (NotImplementedError)."""

    def __init__(self, env: CompilerEnv):
        super().__init__(env)
        self.stack: List[CompilerEnv] = []

    def undo(self) -> Optional[CompilerEnv]:
        """Go back to the state before the last step, closing the current one; returns the environment now
        wrapped (None, and nothing changes, when there is no step to undo)."""
        if not self.stack:
            return None
        self.env.close()
        self.env = self.stack.pop()
        return self.env

    def _close_stack(self) -> None:
        for env in self.stack:
            env.close()
        self.stack = []

    def close(self) -> None:
        self._close_stack()
        self.env.close()

    def reset(self, *args, **kwargs):
        observation = self.env.reset(*args, **kwargs)
        self._close_stack()
        return observation

    def step(self, *args, **kwargs):
        self.stack.append(self.env.fork())
        return self.env.step(*args, **kwargs)

    def fork(self):
        raise NotImplementedError("a ForkOnStep environment cannot be forked")


class ValidateBenchmarkAfterEveryStep(CompilerEnvWrapper):
    """Validates the benchmark (``benchmark.ivalidate``) after every step that does not end the episode; at the
    first error the step returns ``reward_penalty`` as its reward, ends the episode (``done``) and puts the error
    in ``info["error_details"]``."""

    def __init__(self, env: CompilerEnv, reward_penalty: float = -1e3):
        super().__init__(env)
        self.reward_penalty = reward_penalty

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        observation, reward, done, info = self.env.multistep(
            actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
            observations=observations, rewards=rewards)
        if done:
            return observation, reward, done, info
        error = next(iter(self.env.benchmark.ivalidate(self.env)), None)
        if error is None:
            return observation, reward, done, info
        info["error_details"] = error
        return observation, self.reward_penalty, True, info


class RuntimePointEstimateReward(CompilerEnvWrapper):
    """Makes ``runtime`` (a :class:`~behavioral_pq.env.compiler_gym.spaces.RuntimeReward`) the reward space of
    an ``LlvmEnv``: each step earns the drop in ``estimator`` of ``runtime_count`` timed runs of the benchmark,
    after ``warmup_count`` untimed ones. The counts reach the environment at the start of every episode, as
    CompilerGym sends them to its service (so ``reset`` raises ValueError for a count out of range; so does the
    constructor when an episode runs already)."""

    def __init__(self, env: LlvmEnv, runtime_count: int = 30, warmup_count: int = 0,
                 estimator: Callable[[Iterable[float]], float] = np.median):
        super().__init__(env)
        self.env.unwrapped.reward.add_space(
            RuntimeReward(runtime_count=runtime_count, warmup_count=warmup_count, estimator=estimator))
        self.env.unwrapped.reward_space = "runtime"
        self.runtime_count = runtime_count
        self.warmup_count = warmup_count
        if self.env.unwrapped.in_episode:
            self._send_runtime_counts()

    def _send_runtime_counts(self) -> None:
        self.env.unwrapped.runtime_observation_count = self.runtime_count
        self.env.unwrapped.runtime_warmup_runs_count = self.warmup_count

    def reset(self, *args, **kwargs):
        self._send_runtime_counts()
        return self.env.reset(*args, **kwargs)

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        if not self.env.unwrapped.in_episode:
            self.reset()
        return self.env.multistep(actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
                                  observations=observations, rewards=rewards)

    def fork(self) -> "RuntimePointEstimateReward":
        forked_env = self.env.fork()
        space = self.env.unwrapped.reward.spaces["runtime"]
        forked_space = forked_env.unwrapped.reward.spaces.pop("runtime")
        forked = RuntimePointEstimateReward(forked_env, runtime_count=space.runtime_count,
                                            warmup_count=space.warmup_count, estimator=space.estimator)
        forked_env.unwrapped.reward.spaces["runtime"] = forked_space    # the episode's estimates so far
        forked_env.unwrapped.reward_space = "runtime"
        return forked


#: The tables of :class:`SynchronousSqliteLogger`'s database (CompilerGym's schema).
SQLITE_LOGGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS States (
  benchmark_uri TEXT NOT NULL,         -- The URI of the benchmark.
  done INTEGER NOT NULL,               -- 0 = False, 1 = True.
  ir_instruction_count_oz_reward REAL NULLABLE,
  state_id TEXT NOT NULL,              -- 40-char sha1.
  actions TEXT NOT NULL,               -- Decode: [int(x) for x in field.split()]
  PRIMARY KEY (benchmark_uri, actions),
  FOREIGN KEY (state_id) REFERENCES Observations(state_id) ON UPDATE CASCADE
);

CREATE TABLE IF NOT EXISTS Observations (
    state_id TEXT NOT NULL,            -- 40-char sha1.
    ir_instruction_count INTEGER NOT NULL,
    compressed_llvm_ir BLOB NOT NULL,           -- Decode: zlib.decompress(...)
    pickled_compressed_programl BLOB NOT NULL,  -- Decode: pickle.loads(zlib.decompress(...))
    autophase TEXT NOT NULL,                    -- Decode: np.array([int(x) for x in field.split()], dtype=np.int64)
    instcount TEXT NOT NULL,                    -- Decode: np.array([int(x) for x in field.split()], dtype=np.int64)
    PRIMARY KEY (state_id)
);
"""

#: What :class:`SynchronousSqliteLogger` records of every state, in the order of its ``_record``.
_LOGGED_OBSERVATIONS = ("IrSha1", "Ir", "Programl", "Autophase", "InstCount", "IrInstructionCount")
_LOGGED_REWARDS = ("IrInstructionCountOz", "IrInstructionCount")


class SynchronousSqliteLogger(CompilerEnvWrapper):
    """Logs every state of an ``LlvmEnv`` (wrapped or not; TypeError for another environment) to the sqlite
    database ``db_path`` (created, or appended to), with CompilerGym's schema (:data:`SQLITE_LOGGER_SCHEMA`):
    ``States`` holds each benchmark and action sequence with its state id (the IR's sha1), whether the episode
    ended and the episode's ``IrInstructionCountOz`` reward; ``Observations`` each state's IR (zlib), ProGraML
    graph (pickled, zlib), Autophase, InstCount and instruction count. Writes are buffered: :meth:`flush` (also
    ``close``, every ``commit_frequency_in_seconds`` and every ``max_step_buffer_length`` steps) commits them.
    A step takes the environment's default observation and reward spaces (ValueError for others, or without
    them) and adds its reward to ``episode_reward`` as the environment's own step does."""

    def __init__(self, env: LlvmEnv, db_path: Union[str, Path], commit_frequency_in_seconds: int = 300,
                 max_step_buffer_length: int = 5000):
        if not isinstance(getattr(env, "unwrapped", None), LlvmEnv):
            raise TypeError("Requires LlvmEnv base environment")
        super().__init__(env)
        db_path = Path(db_path)
        db_path.parent.mkdir(exist_ok=True, parents=True)
        self.connection = sqlite3.connect(str(db_path))
        self.cursor = self.connection.cursor()
        self.commit_frequency = commit_frequency_in_seconds
        self.max_step_buffer_length = max_step_buffer_length
        self.cursor.executescript(SQLITE_LOGGER_SCHEMA)
        self.connection.commit()
        self.last_commit = time.time()
        self.observations_buffer: Dict[str, tuple] = {}
        self.step_buffer: List[tuple] = []
        self._observations = [self.env.observation.spaces[name] for name in _LOGGED_OBSERVATIONS]
        self._rewards = [self.env.reward.spaces[name] for name in _LOGGED_REWARDS]
        self._reward_totals = np.zeros(len(self._rewards))

    def flush(self) -> None:
        """Write the buffered states and observations to the database."""
        n_steps, n_observations = len(self.step_buffer), len(self.observations_buffer)
        if not n_steps:
            return
        start = time.time()
        self.cursor.executemany("INSERT OR IGNORE INTO States VALUES (?, ?, ?, ?, ?)", self.step_buffer)
        self.cursor.executemany("INSERT OR IGNORE INTO Observations VALUES (?, ?, ?, ?, ?, ?)",
                                ((k, *v) for k, v in self.observations_buffer.items()))
        self.step_buffer = []
        self.observations_buffer = {}
        self.connection.commit()
        logger.info("Wrote %d state records and %d observations in %.3fs. Last flush %.3fs ago", n_steps,
                    n_observations, time.time() - start, start - self.last_commit)
        self.last_commit = time.time()

    def reset(self, *args, **kwargs):
        observation = self.env.reset(*args, **kwargs)
        values, rewards, done, info = self.env.multistep(
            [], observation_spaces=self._observations, reward_spaces=self._rewards)
        if done:
            raise RuntimeError(f"reset() failed: {info.get('error_details')}")
        self._reward_totals = np.array(rewards, dtype=np.float32)
        self._record(self.actions, values, self._reward_totals, done=False)
        return observation

    def multistep(self, actions, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
                  timeout: Optional[float] = 300):
        if any(x is not None for x in (observation_spaces, reward_spaces, observations, rewards)):
            raise ValueError("SynchronousSqliteLogger steps with the default observation and reward spaces only")
        if not self.observation_space_spec:
            raise ValueError("No observation space set")
        if not self.reward_space:
            raise ValueError("No reward space set")
        values, reward_values, done, info = self.env.multistep(
            actions, observation_spaces=self._observations + [self.observation_space_spec],
            reward_spaces=self._rewards + [self.reward_space])
        self._reward_totals += reward_values[:-1]
        if self.unwrapped.episode_reward is not None:
            self.unwrapped.episode_reward += reward_values[-1]
        self._record(self.actions, values[:-1], self._reward_totals, done=done)
        return values[-1], reward_values[-1], done, info

    def _record(self, actions, observations, rewards, done: bool) -> None:
        state_id, ir, programl, autophase, instcount, instruction_count = observations
        self.step_buffer.append((str(self.benchmark.uri), 1 if done else 0, float(rewards[0]), state_id,
                                 " ".join(str(x) for x in actions)))
        self.observations_buffer[state_id] = (
            int(instruction_count), zlib.compress(ir.encode("utf-8")), zlib.compress(pickle.dumps(programl)),
            " ".join(str(x) for x in autophase), " ".join(str(x) for x in instcount))
        if (len(self.step_buffer) >= self.max_step_buffer_length
                or time.time() - self.last_commit >= self.commit_frequency):
            self.flush()

    def close(self) -> None:
        """Flush the buffers, close the database and the environment."""
        if self.connection is not None:
            self.flush()
            self.connection.close()
            self.connection = self.cursor = None
        self.env.close()

    def fork(self):
        raise NotImplementedError("a SynchronousSqliteLogger environment cannot be forked")


__all__ = ["SQLITE_LOGGER_SCHEMA", "ActionWrapper", "CommandlineWithTerminalAction", "CompilerEnvWrapper",
           "ConstrainedCommandline", "Counter", "CycleOverBenchmarks", "CycleOverBenchmarksIterator", "ForkOnStep",
           "IterateOverBenchmarks", "ObservationWrapper", "RandomOrderBenchmarks", "RewardWrapper",
           "RuntimePointEstimateReward", "SynchronousSqliteLogger", "TimeLimit", "ValidateBenchmarkAfterEveryStep"]
