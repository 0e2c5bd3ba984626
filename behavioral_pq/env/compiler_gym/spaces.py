"""CompilerGym 0.2.5's spaces: ``Discrete`` and the named, commandline action spaces, ``Scalar``, ``Sequence``,
``SpaceSequence``, ``Permutation``, ``Box``, ``Dict``, ``Tuple``, and the reward spaces: those of ``llvm-v0``
(``IrInstructionCount``, ``...Norm``, ``...O3``, ``...Oz`` over IR instructions, object and binary text sizes),
``RuntimeReward`` and ``DefaultRewardFromObservation``. Every space has a ``name``, and two spaces are equal when
their names and definitions are (as in CompilerGym, which builds on gym 0.21: a ``Box``'s dtype does not count).

A reward is stateful within an episode, as in CompilerGym: ``update`` returns the drop in its cost since the last
call (the first call measures from the benchmark's unoptimized cost), scaled for the normalized kinds.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection
from collections.abc import Iterable as IterableType
from numbers import Integral
from typing import Callable, Iterable, List, NamedTuple, Optional, Union

import gymnasium
import numpy as np
from gymnasium import spaces

from behavioral_pq.errors import BenchmarkInitError, UnknownPassError


class Discrete(spaces.Discrete):
    """The integers ``0 .. n - 1``: a gymnasium ``Discrete`` with a name."""

    def __init__(self, n: int, name: str):
        super().__init__(n)
        self.name = name

    def __eq__(self, other) -> bool:
        return isinstance(other, Discrete) and self.name == other.name and super().__eq__(other)

    def __hash__(self) -> int:
        return hash((self.name, int(self.n)))


class NamedDiscrete(Discrete):
    """A ``Discrete`` space whose points have names: ``space["a"]`` -> index, ``space.names[i]`` -> name."""

    def __init__(self, items: Iterable[str], name: str):
        items = [str(x) for x in items]
        if not items:
            raise ValueError("No values for discrete space")
        self.names: List[str] = items
        super().__init__(len(items), name=name)

    def __getitem__(self, name: str) -> int:
        """The index of ``name``; ValueError (UnknownPassError) when it is not in the space."""
        try:
            return self.names.index(name)
        except ValueError:
            raise UnknownPassError(f"{name!r} is not in the action space {self.name}") from None

    def __repr__(self) -> str:
        return f"NamedDiscrete([{', '.join(self.names)}])"

    def to_string(self, values: Union[int, Iterable[int]]) -> str:
        """The name of an action, or the names of a sequence of actions joined by spaces."""
        if isinstance(values, IterableType):
            return " ".join(self.names[int(v)] for v in values)
        return self.names[int(values)]

    def from_string(self, values: Union[str, Iterable[str]]) -> Union[int, List[int]]:
        """The index of a name, or the indices of a list of names. A string with spaces is read as a command line
        (``"opt -mem2reg -reg2mem input.bc -o output.bc"`` or ``"-mem2reg -reg2mem"``): its actions, in order."""
        if isinstance(values, str):
            if " " not in values.strip():
                return self[values.strip()]
            return [self[word] for word in _commandline_words(values)]
        return [self[v] for v in values]

    def __eq__(self, other) -> bool:
        return (isinstance(other, NamedDiscrete) and self.name == other.name
                and Counter(self.names) == Counter(other.names) and self.n == other.n)

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.names)))


class CommandlineFlag(NamedTuple):
    """One flag of a :class:`Commandline` space: its name, the flag string, a description."""

    name: str
    flag: str
    description: str


class Commandline(NamedDiscrete):
    """A :class:`NamedDiscrete` space of command-line flags (CompilerGym's ``PassesAll``): the names are the flags
    (``"-mem2reg"``), ``flags`` and ``descriptions`` are lists in action order, ``commandline(actions)`` joins
    flags and ``from_commandline(text)`` reads them back."""

    def __init__(self, items: Iterable[CommandlineFlag], name: str):
        items = list(items)
        self.flags: List[str] = [f.flag for f in items]
        self.descriptions: List[str] = [f.description for f in items]
        super().__init__([f.flag for f in items], name=name)

    def __repr__(self) -> str:
        return f"Commandline([{' '.join(self.flags)}])"

    def commandline(self, values: Union[int, Iterable[int]]) -> str:
        """The flags of an action or of a sequence of actions, joined by spaces."""
        if isinstance(values, IterableType):
            return " ".join(self.flags[int(v)] for v in values)
        return self.flags[int(values)]

    def from_commandline(self, commandline: str) -> List[int]:
        """The actions of a string of flags, in order; LookupError (UnknownPassError) names an unknown flag."""
        values = []
        for flag in commandline.split():
            if flag not in self.flags:
                raise UnknownPassError(f"unknown flag {flag!r}")
            values.append(self.flags.index(flag))
        return values


def _commandline_words(text: str) -> List[str]:
    """The flags of ``opt FLAGS input.bc -o output.bc`` (or of a bare ``FLAGS``)."""
    words = text.split()
    if words and words[0] in ("opt", "opt-19"):
        words = words[1:]
    for tail in (["input.bc", "-o", "output.bc"], ["input.ll", "-S", "-o", "output.ll"]):
        if words[-len(tail):] == tail:
            words = words[:-len(tail)]
    return words


class Scalar(spaces.Space):
    """One number in ``[min, max]`` (None: unbounded) of type ``dtype``."""

    def __init__(self, name: str, min: Optional[float] = None, max: Optional[float] = None, dtype=np.float64):
        super().__init__((), None)
        self.name, self.min, self.max, self.scalar_dtype = name, min, max, dtype

    @property
    def dtype(self):
        return self.scalar_dtype

    @dtype.setter
    def dtype(self, value) -> None:    # gymnasium's Space.__init__ assigns it
        pass

    def sample(self, mask=None, probability=None):
        low = 0 if self.min is None else self.min
        high = 1 if self.max is None else self.max
        return self.scalar_dtype(random.uniform(low, high))

    def contains(self, x) -> bool:
        if not np.issubdtype(type(x), self.scalar_dtype):
            return False
        low = -np.inf if self.min is None else self.min
        high = np.inf if self.max is None else self.max
        return bool(low <= x <= high)

    def __repr__(self) -> str:
        if self.min is None and self.max is None:
            return self.scalar_dtype.__name__
        return f"{self.scalar_dtype.__name__}<{'-inf' if self.min is None else self.min}," \
               f"{'inf' if self.max is None else self.max}>"

    def __eq__(self, other) -> bool:
        return (isinstance(other, Scalar) and self.name == other.name and self.min == other.min
                and self.max == other.max and np.dtype(self.scalar_dtype) == np.dtype(other.scalar_dtype))

    def __hash__(self) -> int:
        return hash((self.name, self.min, self.max))


class Sequence(spaces.Space):
    """A variable-length sequence (a string, bytes, or a 1-D array of ``dtype``) whose length is in
    ``size_range`` (``(low, None)``: unbounded)."""

    def __init__(self, name: str, size_range: tuple[int, Optional[int]] = (0, None), dtype=bytes,
                 opaque_data_format: Optional[str] = None, scalar_range: Optional[Scalar] = None):
        super().__init__((), None)
        self.name, self.size_range, self.sequence_dtype = name, tuple(size_range), dtype
        self.opaque_data_format, self.scalar_range = opaque_data_format, scalar_range

    @property
    def dtype(self):
        return self.sequence_dtype

    @dtype.setter
    def dtype(self, value) -> None:    # gymnasium's Space.__init__ assigns it
        pass

    def contains(self, x) -> bool:
        high = np.inf if self.size_range[1] is None else self.size_range[1]
        if not self.size_range[0] <= len(x) <= high:
            return False
        if self.sequence_dtype in (str, bytes):
            return isinstance(x, self.sequence_dtype)
        if hasattr(x, "dtype"):
            return bool(np.issubdtype(x.dtype, self.sequence_dtype))
        if self.scalar_range is not None:
            return all(self.scalar_range.contains(v) for v in x)
        return all(np.issubdtype(type(v), self.sequence_dtype) for v in x)

    def sample(self, mask=None, probability=None):
        raise NotImplementedError("a Sequence space cannot be sampled")

    def __repr__(self) -> str:
        high = "inf" if self.size_range[1] is None else self.size_range[1]
        fmt = f" -> {self.opaque_data_format}" if self.opaque_data_format else ""
        name = getattr(self.sequence_dtype, "__name__", self.sequence_dtype)
        return f"{name}_list<>[{self.size_range[0]},{high}]){fmt}"

    def __eq__(self, other) -> bool:
        return (isinstance(other, Sequence) and self.name == other.name and self.size_range == other.size_range
                and np.dtype(self.sequence_dtype) == np.dtype(other.sequence_dtype)
                and self.opaque_data_format == other.opaque_data_format and self.scalar_range == other.scalar_range)

    def __hash__(self) -> int:
        return hash((self.name, self.size_range))


class Box(spaces.Box):
    """A gymnasium ``Box`` with a name. Equal to a ``Box`` of the same name, shape and bounds, whatever the two
    dtypes (gym 0.21's equality, which CompilerGym's is)."""

    def __init__(self, low, high, name: str, shape=None, dtype=np.float32):
        super().__init__(low=low, high=high, shape=shape, dtype=dtype)
        self.name = name

    def __eq__(self, other) -> bool:
        return (isinstance(other, Box) and self.name == other.name and self.shape == other.shape
                and bool(np.allclose(self.low, other.low)) and bool(np.allclose(self.high, other.high)))

    def __hash__(self) -> int:
        return hash((self.name, self.shape))


class Dict(spaces.Dict):
    """A gymnasium ``Dict`` space with a name."""

    def __init__(self, spaces_by_name, name: str):
        super().__init__(spaces_by_name)
        self.name = name

    def __eq__(self, other) -> bool:
        return isinstance(other, Dict) and self.name == other.name and super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self.name)


class Tuple(spaces.Tuple):
    """A product of spaces: a gymnasium ``Tuple`` with a name."""

    def __init__(self, spaces: List[gymnasium.Space], name: str):
        super().__init__(spaces)
        self.name = name

    def __eq__(self, other) -> bool:
        return isinstance(other, Tuple) and self.name == other.name and super().__eq__(other)

    def __hash__(self) -> int:
        return hash((self.name, len(self.spaces)))


class SpaceSequence(spaces.Space):
    """A variable-length sequence of values of one ``space``, its length in ``size_range`` (``(low, None)``:
    unbounded)."""

    def __init__(self, name: str, space: spaces.Space, size_range: tuple[int, Optional[int]] = (0, None)):
        super().__init__(None, None)
        self.name, self.space, self.size_range = name, space, tuple(size_range)

    def contains(self, x) -> bool:
        if not isinstance(x, Collection):
            return False
        high = np.inf if self.size_range[1] is None else self.size_range[1]
        if not self.size_range[0] <= len(x) <= high:
            return False
        return all(self.space.contains(element) for element in x)

    def sample(self, mask=None, probability=None) -> list:
        high = None if self.size_range[1] is None else self.size_range[1] + 1
        return [self.space.sample() for _ in range(self.np_random.integers(self.size_range[0], high))]

    def __repr__(self) -> str:
        high = "inf" if self.size_range[1] is None else self.size_range[1]
        return f"SpaceSequence<{self.space!r}>[{self.size_range[0]},{high}]"

    def __eq__(self, other) -> bool:
        return (isinstance(other, SpaceSequence) and self.name == other.name
                and Counter(self.size_range) == Counter(other.size_range) and self.space == other.space)

    def __hash__(self) -> int:
        return hash((self.name, self.size_range))


class Permutation(Sequence):
    """The orderings of all the integers of ``scalar_range`` (``[1, 3]``: ``[1, 2, 3]``, ``[2, 1, 3]``, ...): a
    :class:`Sequence` whose length is the number of integers in the range; TypeError for a range of non-integers."""

    def __init__(self, name: str, scalar_range: Scalar):
        if not issubclass(np.dtype(scalar_range.dtype).type, Integral):
            raise TypeError("Permutation space can have integral scalar range only.")
        size = scalar_range.max - scalar_range.min + 1
        super().__init__(name=name, size_range=(size, size), dtype=scalar_range.dtype, scalar_range=scalar_range)

    def sample(self, mask=None, probability=None) -> np.ndarray:
        return self.np_random.permutation(self.size_range[0]) + self.scalar_range.min

    def __eq__(self, other) -> bool:
        return isinstance(other, Permutation) and super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()


class Reward(Scalar):
    """A reward space. ``observation_spaces``: the observations ``update`` receives; ``default_value`` (what a
    failed step earns, minus the episode's reward when ``default_negates_returns``); ``success_threshold``;
    ``deterministic`` and ``platform_dependent`` as CompilerGym states them."""

    def __init__(self, name: str, observation_spaces: Optional[List[str]] = None, default_value: float = 0,
                 min: Optional[float] = None, max: Optional[float] = None, default_negates_returns: bool = False,
                 success_threshold: Optional[float] = None, deterministic: bool = False,
                 platform_dependent: bool = True):
        if not name:
            raise TypeError("a reward space needs a name")
        super().__init__(name=name, min=-np.inf if min is None else min, max=np.inf if max is None else max,
                         dtype=np.float64)
        self.observation_spaces = list(observation_spaces or [])
        self.default_value = default_value
        self.default_negates_returns = default_negates_returns
        self.success_threshold = success_threshold
        self.deterministic = deterministic
        self.platform_dependent = platform_dependent

    def reset(self, benchmark, observation_view) -> None:
        """Called at the start of every episode."""

    def update(self, actions: List[int], observations: list, observation_view) -> float:
        """The reward of the step that took ``actions``, given the values of ``observation_spaces`` after it."""
        raise NotImplementedError("a reward space defines update()")

    def reward_on_error(self, episode_reward: float) -> float:
        """The reward of a step that failed."""
        return self.default_value - episode_reward if self.default_negates_returns else self.default_value

    @property
    def range(self) -> tuple[float, float]:
        return (self.min, self.max)

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.name == other
        return isinstance(other, Reward) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


class DefaultRewardFromObservation(Reward):
    """The change in the value of the observation ``observation_name`` since the last step (the first step
    measures from 0); the reward space takes the observation's name."""

    def __init__(self, observation_name: str, **kwargs):
        super().__init__(observation_spaces=[observation_name], name=observation_name, **kwargs)
        self.previous_value = None

    def reset(self, benchmark, observation_view) -> None:
        self.previous_value = None

    def update(self, actions, observations, observation_view) -> float:
        value = observations[0]
        previous = 0 if self.previous_value is None else self.previous_value
        self.previous_value = value
        return float(value - previous)


class RuntimeReward(Reward):
    """``runtime``: the drop in the estimated runtime of the benchmark since the last step. The estimate is
    ``estimator`` (``np.median``, ``min``, ...) of the ``Runtime`` observation's ``runtime_count`` timed runs,
    made after ``warmup_count`` untimed ones (both are the environment's settings, which the
    ``RuntimePointEstimateReward`` wrapper sets). ``reset`` raises BenchmarkInitError for a benchmark that cannot
    be run; the start of an episode on the same benchmark reuses its first estimate."""

    def __init__(self, runtime_count: int, warmup_count: int, estimator: Callable[[Iterable[float]], float],
                 default_value: int = 0):
        super().__init__(name="runtime", observation_spaces=["Runtime"], default_value=default_value, min=None,
                         max=None, default_negates_returns=True, deterministic=False, platform_dependent=True)
        self.runtime_count = runtime_count
        self.warmup_count = warmup_count
        self.estimator = estimator
        self.starting_runtime: Optional[float] = None
        self.previous_runtime: Optional[float] = None
        self.current_benchmark = None

    def reset(self, benchmark, observation_view) -> None:
        if benchmark != self.current_benchmark:
            if not observation_view["IsRunnable"]:
                raise BenchmarkInitError(f"Benchmark is not runnable: {benchmark}")
            self.current_benchmark = benchmark
            self.starting_runtime = None
        if self.starting_runtime is None:
            self.starting_runtime = self.estimator(observation_view["Runtime"])
        self.previous_runtime = self.starting_runtime

    def update(self, actions, observations, observation_view) -> float:
        runtimes = observations[0]
        if len(runtimes) != self.runtime_count:
            raise RuntimeError(f"Expected {self.runtime_count} runtimes but received {len(runtimes)}")
        runtime = self.estimator(runtimes)
        reward = self.previous_runtime - runtime
        self.previous_runtime = runtime
        return reward


class CostFunctionReward(Reward):
    """The drop in ``cost_function`` since the last step (the first step measures from ``init_cost_function``)."""

    def __init__(self, cost_function: str, init_cost_function: str, **kwargs):
        super().__init__(observation_spaces=[cost_function], **kwargs)
        self.cost_function = cost_function
        self.init_cost_function = init_cost_function
        self.previous_cost: Optional[float] = None

    def reset(self, benchmark, observation_view) -> None:
        self.previous_cost = None

    def update(self, actions, observations, observation_view) -> float:
        cost = float(observations[0])
        if self.previous_cost is None:
            self.previous_cost = float(observation_view[self.init_cost_function])
        reward = self.previous_cost - cost
        self.previous_cost = cost
        return reward


class NormalizedReward(CostFunctionReward):
    """:class:`CostFunctionReward` divided by the benchmark's unoptimized cost."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.cost_norm: Optional[float] = None
        self.benchmark = None

    def reset(self, benchmark, observation_view) -> None:
        super().reset(benchmark, observation_view)
        if self.benchmark != benchmark:
            self.cost_norm, self.benchmark = None, benchmark

    def update(self, actions, observations, observation_view) -> float:
        if self.cost_norm is None:
            self.cost_norm = self.get_cost_norm(observation_view)
        return super().update(actions, observations, observation_view) / self.cost_norm

    def get_cost_norm(self, observation_view) -> float:
        return float(observation_view[self.init_cost_function])


class BaselineImprovementNormalizedReward(NormalizedReward):
    """:class:`CostFunctionReward` divided by what a baseline pipeline gains (``max(init - baseline, 1)``): 1.0 in
    total means as good as ``-O3`` / ``-Oz``."""

    def __init__(self, baseline_cost_function: str, **kwargs):
        super().__init__(**kwargs)
        self.baseline_cost_function = baseline_cost_function

    def get_cost_norm(self, observation_view) -> float:
        init = float(observation_view[self.init_cost_function])
        return max(init - float(observation_view[self.baseline_cost_function]), 1.0)


def llvm_rewards() -> List[Reward]:
    """The reward spaces of CompilerGym's ``llvm-v0``, in its order, fresh (rewards hold per-episode state)."""
    rewards: List[Reward] = []
    for cost, init, platform_dependent, prefix, norm in (
            ("IrInstructionCount", "IrInstructionCountO0", False, "IrInstructionCount", "IrInstructionCountNorm"),
            ("ObjectTextSizeBytes", "ObjectTextSizeO0", True, "ObjectTextSize", "ObjectTextSizeNorm"),
            ("TextSizeBytes", "TextSizeO0", True, "TextSize", "TextSizeNorm")):
        common = dict(cost_function=cost, init_cost_function=init, default_negates_returns=True,
                      deterministic=True, platform_dependent=platform_dependent)
        rewards.append(CostFunctionReward(name=cost, **common))
        rewards.append(NormalizedReward(name=norm, max=1, **common))
        for level in ("O3", "Oz"):
            rewards.append(BaselineImprovementNormalizedReward(
                name=f"{prefix}{level}", baseline_cost_function=f"{prefix}{level}", success_threshold=1, **common))
    return rewards


__all__ = ["BaselineImprovementNormalizedReward", "Box", "Commandline", "CommandlineFlag", "CostFunctionReward",
           "DefaultRewardFromObservation", "Dict", "Discrete", "NamedDiscrete", "NormalizedReward", "Permutation",
           "Reward", "RuntimeReward", "Scalar", "Sequence", "SpaceSequence", "Tuple", "llvm_rewards"]
