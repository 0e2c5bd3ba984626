"""CompilerGym 0.2.5's ``compiler_gym.wrappers``: the wrapper bases (``CompilerEnvWrapper``, ``ActionWrapper``,
``ObservationWrapper``, ``RewardWrapper``), ``TimeLimit``, the command-line action wrappers and the benchmark
iterators, with its names and behaviour. A wrapper is a gymnasium ``Wrapper`` whose attributes (spaces,
benchmark, views, state) are the wrapped environment's; setting them sets the environment's.
"""

from __future__ import annotations

import itertools
import threading
from abc import abstractmethod
from collections.abc import Iterable as IterableType
from typing import Callable, Dict, Iterable, List, Optional, Union

import gymnasium
import numpy as np

from behavioral_pq.env.compiler_gym.datasets import Benchmark
from behavioral_pq.env.compiler_gym.env import CompilerEnv
from behavioral_pq.env.compiler_gym.spaces import Commandline, CommandlineFlag

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


class ObservationWrapper(CompilerEnvWrapper):
    """Converts every observation (of ``reset`` and ``step``) with :meth:`convert_observation`."""

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


class RewardWrapper(CompilerEnvWrapper):
    """Converts every reward with :meth:`convert_reward`; ``episode_reward`` sums the converted rewards."""

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


__all__ = ["ActionWrapper", "CommandlineWithTerminalAction", "CompilerEnvWrapper", "ConstrainedCommandline",
           "CycleOverBenchmarks", "CycleOverBenchmarksIterator", "IterateOverBenchmarks", "ObservationWrapper",
           "RandomOrderBenchmarks", "RewardWrapper", "TimeLimit"]
