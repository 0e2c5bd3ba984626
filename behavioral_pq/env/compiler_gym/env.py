"""CompilerGym 0.2.5's ``LlvmEnv`` over this package's ``llvm-v0`` core (:class:`behavioral_pq.env.llvm.LlvmEnv`):
the same attributes, setters, views, state, fork/validate/apply and 4-tuple ``step``; passes and observations on
LLVM 19. Errors carry CompilerGym's texts (``Reward space not found: X``, ``'X'`` for a view's missing key).

``reset()`` on a benchmark that has a build command (``benchmark.proto.dynamic_config.build_cmd``, as a
:func:`~.benchmarks.make_benchmark_from_command_line` benchmark has) builds it once per build command, as
CompilerGym's does when it measures the benchmark's baseline sizes: a command line's output is there after
``reset()``, and a command that does not compile raises BenchmarkInitError from ``reset()``. One that compiles
but does not link (a library unit, no ``main``) is built compile-only (``-c``) there: CompilerGym 0.2.5 fails
its ``reset()`` (its TextSize baselines link the unit), which leaves such a benchmark unusable for no cost asked.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
import shutil
import sys
import tempfile
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Iterable as IterableType
from copy import deepcopy
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, TextIO, Union

import gymnasium
import numpy as np

from behavioral_pq._version import __version__
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.files import check_output_file, write_bytes_atomic, write_text_atomic
from behavioral_pq.core.module import Module
from behavioral_pq.core.toolchain import llvm_tool_version
from behavioral_pq.env.compiler_gym.benchmarks import (
    build_benchmark,
    make_benchmark,
    make_benchmark_from_command_line,
)
from behavioral_pq.env.compiler_gym.datasets import Benchmark, BenchmarkDynamicConfig, Datasets, default_datasets
from behavioral_pq.env.compiler_gym.observations import (
    COMPUTE,
    UNSUPPORTED,
    extra_observation_specs,
    observation_specs,
    refuse,
)
from behavioral_pq.env.compiler_gym.spaces import Commandline, CommandlineFlag, Reward, llvm_rewards
from behavioral_pq.env.compiler_gym.views import ObservationSpaceSpec, ObservationView, RewardView
from behavioral_pq.env.llvm import IN_PLACE
from behavioral_pq.env.llvm import LlvmEnv as CoreEnv
from behavioral_pq.errors import BenchmarkInitError, UnknownSpaceError

#: ``reset(observation_space=UNCHANGED)``: keep the current space (None turns it off).
UNCHANGED = object()


class CompilerEnv(gymnasium.Env):
    """What every environment and wrapper of this module is: CompilerGym's ``CompilerEnv`` API on a gymnasium
    ``Env`` (so gymnasium's wrappers accept it)."""

    def step(self, action, observation_spaces=None, reward_spaces=None, observations=None, rewards=None,
             timeout: float = 300):
        """One action; ``(observation, reward, done, info)``. A list of actions is taken as ``multistep`` (with
        CompilerGym's DeprecationWarning). The environment's ``multistep`` does the work (an environment starts an
        episode there before any ``reset()``; a wrapper changes what it does there)."""
        if type(action) is not int and isinstance(action, IterableType) and not isinstance(action, (str, bytes)) \
                and np.ndim(action) > 0:
            warnings.warn("Argument `action` of CompilerEnv.step no longer accepts a list of actions. "
                          "Please use CompilerEnv.multistep instead", category=DeprecationWarning, stacklevel=2)
            return self.multistep(action, observation_spaces=observation_spaces, reward_spaces=reward_spaces,
                                  observations=observations, rewards=rewards)
        return self.multistep([action], observation_spaces=observation_spaces, reward_spaces=reward_spaces,
                              observations=observations, rewards=rewards)


_REQUIRED = object()


def _truncate(text: Any, width: int = 60) -> str:
    """The first line of ``str(text)``, cut to ``width`` characters with an ellipsis (CompilerGym's
    ``truncate``)."""
    line = str(text).split("\n", 1)[0]
    return line if len(line) <= width else f"{line[:width - 3]}..."


_PYDANTIC_MODELS: Dict[str, type] = {}


def _invalid(model: str, problems: List[tuple]) -> ValueError:
    """The error of CompilerGym's pydantic models for invalid fields: ``pydantic.ValidationError`` (pydantic 1
    or 2) where pydantic is installed, as CompilerGym raises it, else a ValueError with pydantic 1's text; both
    are ValueErrors. ``problems``: ``(field, kind, value, message)``, ``kind`` one of ``missing``, ``float``,
    ``str`` or ``assert`` (then ``message`` is the assertion's)."""
    try:
        import pydantic
    except ImportError:
        pydantic = None
    if pydantic is not None and pydantic.VERSION.startswith("1."):
        from pydantic.error_wrappers import ErrorWrapper
        from pydantic.errors import FloatError, MissingError, StrError
        made = {"missing": lambda m: MissingError(), "float": lambda m: FloatError(), "str": lambda m: StrError(),
                "assert": AssertionError}
        if model not in _PYDANTIC_MODELS:
            _PYDANTIC_MODELS[model] = type(model, (pydantic.BaseModel,), {"__module__": __name__})
        return pydantic.ValidationError([ErrorWrapper(made[kind](message), loc=field)
                                         for field, kind, _, message in problems], _PYDANTIC_MODELS[model])
    if pydantic is not None:
        from pydantic_core import ValidationError as CoreValidationError
        types = {"missing": "missing", "float": "float_parsing", "str": "string_type", "assert": "assertion_error"}
        return CoreValidationError.from_exception_data(model, [
            {"type": types[kind], "loc": (field,), "input": value,
             **({"ctx": {"error": message}} if kind == "assert" else {})}
            for field, kind, value, message in problems])
    texts = {"missing": "field required (type=value_error.missing)",
             "float": "value is not a valid float (type=type_error.float)",
             "str": "str type expected (type=type_error.str)"}
    count = len(problems)
    return ValueError(f"{count} validation error{'s' if count > 1 else ''} for {model}\n" + "\n".join(
        f"{field}\n  " + (f"{message} (type=assertion_error)" if kind == "assert" else texts[kind])
        for field, kind, _, message in problems))


def _as_str(value: Any, field: str, problems: list, coerce: bool = False) -> Optional[str]:
    if value is _REQUIRED or value is None:
        problems.append((field, "missing", None, ""))
    elif isinstance(value, str) or coerce or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return str(value)
    else:
        problems.append((field, "str", value, ""))
    return None


def _as_float(value: Any, field: str, problems: list, required: bool = True) -> Optional[float]:
    if value is _REQUIRED or value is None:
        if required:
            problems.append((field, "missing", None, ""))
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        problems.append((field, "float", value, ""))
        return None


class CompilerEnvState:
    """An episode that can be replayed: the benchmark URI, the ``opt`` command line of its actions, the time
    spent and the reward so far (None without a reward space). CompilerGym's pydantic model, field for field:
    keyword construction (``CompilerEnvState(**state.dict())``), fields checked on construction and assignment
    (walltime non-negative; the benchmark cannot be reassigned), ``dict()``, ``json()``, ``parse_obj()``,
    ``parse_raw()``; invalid fields raise pydantic's ``ValidationError`` where pydantic is installed, else a
    ValueError (see :func:`_invalid`).

    Two states are equal when benchmark, command line and reward (within 1e-5, when both have one) are; the
    walltime is ignored.
    """

    FIELDS = ("benchmark", "commandline", "walltime", "reward")

    def __init__(self, benchmark: str = _REQUIRED, commandline: str = _REQUIRED, walltime: float = _REQUIRED,
                 reward: Optional[float] = None):
        problems: list = []
        values = {"benchmark": _as_str(benchmark, "benchmark", problems, coerce=True),
                  "commandline": _as_str(commandline, "commandline", problems),
                  "walltime": _as_float(walltime, "walltime", problems),
                  "reward": _as_float(reward, "reward", problems, required=False)}
        if values["walltime"] is not None and values["walltime"] < 0:
            problems.append(("walltime", "assert", walltime, "Walltime cannot be negative"))
        if problems:
            raise _invalid("CompilerEnvState", problems)
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "benchmark":
            raise TypeError('"benchmark" has allow_mutation set to False and cannot be assigned')
        if name not in self.FIELDS:
            raise ValueError(f'"CompilerEnvState" object has no field "{name}"')
        fields = {**self.dict(), name: value}
        self.__dict__[name] = getattr(CompilerEnvState(**fields), name)

    @property
    def has_reward(self) -> bool:
        """Whether the state has a reward value."""
        return self.reward is not None

    def __eq__(self, other) -> bool:
        if not isinstance(other, CompilerEnvState):
            return False
        reward_equal = not (self.has_reward and other.has_reward) or abs(self.reward - other.reward) < 1e-5
        return self.benchmark == other.benchmark and reward_equal and self.commandline == other.commandline

    def __ne__(self, other) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((self.benchmark, self.commandline))

    def __repr__(self) -> str:
        return f"CompilerEnvState({', '.join(f'{k}={v!r}' for k, v in self.dict().items())})"

    def dict(self) -> Dict[str, Any]:
        """The fields, in CompilerGym's order: ``benchmark``, ``commandline``, ``walltime``, ``reward``."""
        return {name: self.__dict__[name] for name in self.FIELDS}

    def json(self, **dumps_kwargs) -> str:
        """The fields as a JSON object (``json.dumps`` keywords are passed on)."""
        return json.dumps(self.dict(), **dumps_kwargs)

    def copy(self) -> "CompilerEnvState":
        return CompilerEnvState(**self.dict())

    @classmethod
    def parse_obj(cls, obj: Dict[str, Any]) -> "CompilerEnvState":
        """A state from a dictionary of its fields (as :meth:`dict` returns)."""
        if not isinstance(obj, dict):
            raise _invalid(cls.__name__, [("__root__", "assert", obj,
                                           f"{cls.__name__} expected dict not {type(obj).__name__}")])
        return cls(**obj)

    @classmethod
    def parse_raw(cls, text: Union[str, bytes]) -> "CompilerEnvState":
        """A state from the JSON that :meth:`json` writes."""
        return cls.parse_obj(json.loads(text))


class CompilerEnvStateWriter:
    """Write states as CSV rows (``benchmark,reward,walltime,commandline``, with a header first)."""

    def __init__(self, f: TextIO, header: bool = True):
        self.f, self.header = f, header
        self.writer = csv.writer(f, lineterminator="\n")

    def write_state(self, state: CompilerEnvState, flush: bool = False) -> None:
        if self.header:
            self.writer.writerow(("benchmark", "reward", "walltime", "commandline"))
            self.header = False
        self.writer.writerow((state.benchmark, state.reward, state.walltime, state.commandline))
        if flush:
            self.f.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


#: ``CompilerEnvStateReader.read_paths``: the paths read over HTTP (CompilerGym's pattern).
_STATE_URL = re.compile(r"^(http|https)://[a-zA-Z0-9.-_/]+(\.csv)$")

#: Seconds that reading a state file over HTTP may take.
URL_TIMEOUT = 60


class CompilerEnvStateReader:
    """Read the states written by :class:`CompilerEnvStateWriter`; the header is optional, and when there is
    one its columns may come in any order. ValueError when the first row has not 4 columns."""

    COLUMNS = ["benchmark", "reward", "walltime", "commandline"]

    def __init__(self, f: TextIO):
        self.f = f

    def __iter__(self):
        rows = csv.reader(self.f)
        first = next(rows, None)
        if first is None:
            return
        if len(first) != len(self.COLUMNS):
            raise ValueError(f"Expected {len(self.COLUMNS)} columns in the first row of CSV: {_truncate(first)}")
        if {c.lower() for c in first} == set(self.COLUMNS):
            order = [[c.lower() for c in first].index(c) for c in self.COLUMNS]
        else:
            order, rows = list(range(4)), _chain([first], rows)
        for row in rows:
            benchmark, reward, walltime, commandline = (row[i] for i in order)
            yield CompilerEnvState(benchmark=benchmark, reward=None if reward == "" else float(reward),
                                   walltime=0.0 if walltime == "" else float(walltime), commandline=commandline)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    @staticmethod
    def read_paths(paths: Iterable[str]) -> Iterable[CompilerEnvState]:
        """The states of each CSV in ``paths``, in order: ``"-"`` is stdin; an ``http(s)://...csv`` address is
        fetched with ``requests`` (``requests.exceptions.InvalidURL`` when it does not answer 200; ImportError
        without ``requests``); anything else is a file (FileNotFoundError when missing)."""
        for path in paths:
            if path == "-":
                yield from iter(CompilerEnvStateReader(sys.stdin))
            elif _STATE_URL.match(path) is not None:
                try:
                    import requests
                except ImportError:
                    raise ImportError(f"reading states from {path} needs the requests package") from None
                response = requests.get(path, timeout=URL_TIMEOUT)
                if response.status_code != 200:
                    raise requests.exceptions.InvalidURL(f"Url {path} content could not be obtained")
                yield from iter(CompilerEnvStateReader(io.StringIO(response.text)))
            else:
                with open(path) as f:
                    yield from iter(CompilerEnvStateReader(f))


def _chain(first, rest):
    yield from first
    yield from rest


@dataclasses.dataclass
class ValidationError:
    """An error found by :meth:`LlvmEnv.validate`: a short ``type`` (``"Action replay failed"``) and a
    JSON-serializable ``data`` dictionary that describes it. Equal when both fields are; sortable."""

    type: str
    data: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        problems: list = []
        self.type = _as_str(self.type, "type", problems)
        if not isinstance(self.data, dict):
            problems.append(("data", "assert", self.data, "value is not a valid dict"))
        if problems:
            raise _invalid("ValidationError", problems)

    def __lt__(self, other) -> bool:
        if not isinstance(other, ValidationError):
            return True
        return (self.type, self.data) <= (other.type, other.data)

    def dict(self) -> Dict[str, Any]:
        return {"type": self.type, "data": deepcopy(self.data)}

    def json(self, **dumps_kwargs) -> str:
        return json.dumps(self.dict(), **dumps_kwargs)


@dataclasses.dataclass(eq=False)
class ValidationResult:
    """What :meth:`LlvmEnv.validate` found: ``okay()`` when the actions replayed and the reward reproduced.
    Built from keywords, as CompilerGym's pydantic model (``state`` and ``errors`` may be the dictionaries that
    :meth:`dict` writes). Two results are equal when all but ``walltime`` are, the errors in any order."""

    state: CompilerEnvState
    walltime: float
    reward_validated: bool = False
    actions_replay_failed: bool = False
    reward_validation_failed: bool = False
    benchmark_semantics_validated: bool = False
    benchmark_semantics_validation_failed: bool = False
    errors: List[ValidationError] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if isinstance(self.state, dict):
            self.state = CompilerEnvState(**self.state)
        self.errors = [ValidationError(**e) if isinstance(e, dict) else e for e in self.errors]
        problems: list = []
        walltime = _as_float(self.walltime, "walltime", problems)
        if walltime is not None and walltime < 0:
            problems.append(("walltime", "assert", self.walltime, "Walltime cannot be negative"))
        if problems:
            raise _invalid("ValidationResult", problems)
        self.walltime = walltime

    def __eq__(self, other) -> bool:
        if not isinstance(other, ValidationResult):
            return False
        flags = ("reward_validated", "actions_replay_failed", "reward_validation_failed",
                 "benchmark_semantics_validated", "benchmark_semantics_validation_failed")
        return self.state == other.state and all(getattr(self, f) == getattr(other, f) for f in flags) \
            and sorted(self.errors) == sorted(other.errors)

    def __ne__(self, other) -> bool:
        return not self == other

    def okay(self) -> bool:
        return not (self.actions_replay_failed or self.reward_validation_failed
                    or self.benchmark_semantics_validation_failed)

    @property
    def error_details(self) -> str:
        """The errors' types, the most frequent first (``"3× Expected reward ..."``); at most three kinds and a
        count of the rest, as CompilerGym summarizes them."""
        if not self.errors:
            return ""
        counts = Counter(e.type for e in self.errors)
        if len(counts) == 1:
            (message, count), = counts.items()
            return message if count == 1 else f"{count}× {message}"
        ranked = sorted(counts.items(), key=lambda item: -item[1])
        parts = []
        for j, (message, count) in enumerate(ranked, start=1):
            parts.append(f"[{j}/{len(ranked)}] " + (f"{count}× {message}" if count > 1 else message))
            remaining = len(ranked) - j
            if j >= 3 and remaining > 3:
                parts.append(f"... ({remaining} more {'error' if remaining == 1 else 'errors'})")
                break
        return ", ".join(parts)

    def dict(self) -> Dict[str, Any]:
        """The fields, ``state`` and ``errors`` as dictionaries."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**fields, "state": self.state.dict(), "errors": [e.dict() for e in self.errors]}

    def json(self, **dumps_kwargs) -> str:
        return json.dumps(self.dict(), **dumps_kwargs)

    @classmethod
    def join(cls, results: Iterable["ValidationResult"]) -> "ValidationResult":
        """One result for several validations of the same state: the walltimes summed, each flag set when any
        result sets it, all the errors. ValueError for no results or results of different states."""
        results = list(results)
        if not results:
            raise ValueError("No states to join")
        if any(r.state != results[0].state for r in results[1:]):
            raise ValueError("All states must be the same")
        flags = ("reward_validated", "actions_replay_failed", "reward_validation_failed",
                 "benchmark_semantics_validated", "benchmark_semantics_validation_failed")
        return cls(state=results[0].state, walltime=sum(r.walltime for r in results),
                   **{f: any(getattr(r, f) for r in results) for f in flags},
                   errors=[e for r in results for e in r.errors])

    def __repr__(self) -> str:
        benchmark = re.sub(r"^benchmark://", "", str(self.state.benchmark))
        if not self.okay():
            return f"❌  {benchmark}  {_truncate(', '.join(self.error_details.strip().splitlines()), 50)}"
        if self.state.reward is None:
            return f"✅  {benchmark}"
        return f"✅  {benchmark}  {self.state.reward:.4f}"

    __str__ = __repr__


class EnvSpec(gymnasium.envs.registration.EnvSpec):
    """gymnasium's ``EnvSpec`` that also answers to gym 0.21's ``_kwargs`` (the same dict as ``kwargs``: editing
    it changes what ``spec.make()`` makes, the workaround CompilerGym documents)."""

    @property
    def _kwargs(self) -> dict:
        return self.kwargs

    @classmethod
    def of(cls, spec: Optional[gymnasium.envs.registration.EnvSpec]) -> Optional["EnvSpec"]:
        if spec is None or isinstance(spec, cls):
            return spec
        return cls(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init})


def action_space() -> Commandline:
    """The 124 catalog passes as CompilerGym's ``PassesAll`` space (names and flags: ``"-mem2reg"``)."""
    return Commandline([CommandlineFlag(p.flag, p.flag, f"LLVM 19: {p.pipeline}") for p in PASSES], name="PassesAll")


class LlvmEnv(CompilerEnv):
    """CompilerGym 0.2.5's ``llvm-v0`` (see the package docstring). Everything CompilerGym's ``LlvmEnv`` has for
    pass ordering, without its gRPC service: ``reset`` returns the observation (or None), ``step`` /
    ``multistep`` return ``(observation, reward, done, info)``.

    Args:
        benchmark: a URI (``benchmark://examples-v0/matmul``, a registered dataset's), a path, or a
            :class:`Benchmark`; default: the first benchmark of ``datasets``.
        observation_space: name (or spec) of the default observation; None: none.
        reward_space: name (or spec) of the default reward; None: none.
        datasets: the datasets to name benchmarks from (default: examples, generators, registered datasets).
        engine: as :class:`behavioral_pq.env.llvm.LlvmEnv`.
        encoder: as :class:`behavioral_pq.env.llvm.LlvmEnv`.
    """

    metadata = {"render_modes": ["human", "ansi"], "render.modes": ["human", "ansi"]}   # gymnasium's, gym's key

    def __init__(self, benchmark: Optional[Union[str, Benchmark]] = None, observation_space=None,
                 reward_space=None, action_space: Optional[str] = None, *, datasets=None, engine=None,
                 encoder=None):
        self._core = CoreEnv(engine=engine, encoder=encoder)
        self._datasets = Datasets(datasets if datasets is not None else default_datasets())
        self._action_space = globals()["action_space"]()
        if action_space not in (None, self._action_space.name):
            raise LookupError(f"unknown action space {action_space!r}; the only one is 'PassesAll'")
        self._extra_observation_specs = {spec.id: spec for spec in extra_observation_specs()}
        self._working_directory: Optional[Path] = None
        self._remove_working_directory: Optional[weakref.finalize] = None
        self.observation = self._observation_view(observation_specs())
        self.reward = RewardView(llvm_rewards(), self.observation)
        self._cache: Dict[Any, Any] = {}
        self._in_episode = False
        self._actions: List[int] = []
        self._next_benchmark: Optional[Benchmark] = None
        self._benchmark_in_use: Optional[Benchmark] = None
        self.benchmark = benchmark if benchmark is not None else next(iter(self._datasets.benchmarks()))
        self._benchmark_in_use = self._next_benchmark
        self.episode_reward: Optional[float] = None
        self.episode_start_time = time.time()
        self._observation_space_spec: Optional[ObservationSpaceSpec] = None
        self._reward_space_spec: Optional[Reward] = None
        self._last_prefetch: Optional[tuple] = None   # (spaces, what a step with them prefetches)
        self._reward_range = (-np.inf, np.inf)
        self.observation_space = observation_space
        self.reward_space = reward_space
        self._runtime_count = 1
        self._runtime_warmup = 0
        self.buildtime_observation_count = 1
        self._built: Dict[str, BenchmarkDynamicConfig] = {}     # URI -> the build command reset() last ran

    # -- gym's spec ------------------------------------------------------------------------------------------

    @property
    def spec(self) -> Optional[EnvSpec]:
        return self.__dict__.get("_spec")

    @spec.setter
    def spec(self, spec) -> None:
        self.__dict__["_spec"] = EnvSpec.of(spec)

    # -- spaces and benchmark ------------------------------------------------------------------------------------

    @property
    def action_space(self) -> Commandline:
        return self._action_space

    @action_space.setter
    def action_space(self, space) -> None:
        if isinstance(space, str) or space is None:
            if space not in (None, "PassesAll"):
                raise LookupError(f"unknown action space {space!r}; the only one is 'PassesAll'")
            space = globals()["action_space"]()
        self._action_space = space

    @property
    def action_spaces(self) -> List[Commandline]:
        return [self._action_space]

    @property
    def observation_space_spec(self) -> Optional[ObservationSpaceSpec]:
        return self._observation_space_spec

    @observation_space_spec.setter
    def observation_space_spec(self, spec: Optional[ObservationSpaceSpec]) -> None:
        self._observation_space_spec = spec

    @property
    def observation_space(self):
        """The default observation's space (None when there is none); set it by name, spec or None."""
        return self._observation_space_spec.space if self._observation_space_spec else None

    @observation_space.setter
    def observation_space(self, space: Optional[Union[str, ObservationSpaceSpec]]) -> None:
        self._observation_space_spec = self._observation_spec(space) if space else None

    @property
    def reward_space_spec(self) -> Optional[Reward]:
        return self._reward_space_spec

    @reward_space_spec.setter
    def reward_space_spec(self, reward: Optional[Reward]) -> None:
        self._reward_space_spec = reward

    @property
    def reward_space(self) -> Optional[Reward]:
        """The default reward (None when there is none); set it by name, Reward or None."""
        return self._reward_space_spec

    @reward_space.setter
    def reward_space(self, space: Optional[Union[str, Reward]]) -> None:
        name = space.name if isinstance(space, Reward) else space
        if not name:
            self._reward_space_spec, self._reward_range = None, (-np.inf, np.inf)
            return
        if name not in self.reward.spaces:
            raise UnknownSpaceError(f"Reward space not found: {name}")
        if self._reward_space_spec is not None and name == self._reward_space_spec.name:
            return
        self._reward_space_spec = self.reward.spaces[name]
        self._reward_range = (self._reward_space_spec.min, self._reward_space_spec.max)
        if self.in_episode:
            self.episode_reward = 0.0

    @property
    def reward_range(self):
        return self._reward_range

    @reward_range.setter
    def reward_range(self, value) -> None:
        self._reward_range = tuple(value)

    @property
    def datasets(self) -> Datasets:
        return self._datasets

    @property
    def extra_observation_spaces(self) -> Dict[str, ObservationSpaceSpec]:
        """This package's observations beyond CompilerGym's: Spectrum, Codes and Embedding. They are named as any
        other (``env.observation["Codes"]``, ``env.observation.Codes()``, ``observation_space="Codes"``,
        ``multistep(..., observation_spaces=["Embedding"])``) but are not in ``env.observation.spaces``, which
        lists CompilerGym 0.2.5's spaces only."""
        return dict(self._extra_observation_specs)

    @property
    def working_directory(self) -> Path:
        """A folder of this environment's own (made on first use) for the files its observations write
        (``BitcodeFile``); removed with what is in it by :meth:`close`, or when the environment is collected."""
        if self._working_directory is None or not self._working_directory.is_dir():
            self._working_directory = Path(tempfile.mkdtemp(prefix="bpq-compiler-gym-env-"))
            self._remove_working_directory = weakref.finalize(self, shutil.rmtree, str(self._working_directory),
                                                              ignore_errors=True)
        return self._working_directory

    @property
    def benchmark(self) -> Optional[Benchmark]:
        """The benchmark of this episode; setting it takes effect at the next ``reset()``."""
        return self._benchmark_in_use

    @benchmark.setter
    def benchmark(self, benchmark: Union[str, Benchmark, Path]) -> None:
        if self.in_episode:
            warnings.warn("Changing the benchmark has no effect until reset() is called", stacklevel=2)
        if isinstance(benchmark, Benchmark):
            self._next_benchmark = benchmark
        elif isinstance(benchmark, (str, Path)):
            self._next_benchmark = self._datasets.benchmark(benchmark)
        else:
            raise TypeError(f"Expected a Benchmark or str, received: '{type(benchmark).__name__}'")

    @property
    def in_episode(self) -> bool:
        return self._in_episode

    @property
    def actions(self) -> List[int]:
        return self._actions

    @property
    def episode_walltime(self) -> float:
        return time.time() - self.episode_start_time

    @property
    def version(self) -> str:
        return __version__

    @property
    def compiler_version(self) -> str:
        return llvm_tool_version("opt")

    @property
    def runtime_observation_count(self) -> int:
        """How many timed runs a ``Runtime`` observation makes (default 1)."""
        return self._runtime_count

    @runtime_observation_count.setter
    def runtime_observation_count(self, n: int) -> None:
        if int(n) < 1:
            raise ValueError(f"runtimes_per_observation_count must be >= 1. Received: {n}")
        self._runtime_count = int(n)

    @property
    def runtime_warmup_runs_count(self) -> int:
        """How many untimed runs come before a ``Runtime`` observation's timed ones (default 0)."""
        return self._runtime_warmup

    @runtime_warmup_runs_count.setter
    def runtime_warmup_runs_count(self, n: int) -> None:
        if int(n) < 0:
            raise ValueError(f"warmup_runs_count_per_runtime_observation must be >= 0. Received: {n}")
        self._runtime_warmup = int(n)

    # -- episodes ------------------------------------------------------------------------------------------------

    def reset(self, benchmark: Optional[Union[str, Benchmark]] = None, action_space: Optional[str] = None,
              reward_space=UNCHANGED, observation_space=UNCHANGED, timeout: float = 300, *,
              seed: Optional[int] = None, options: Optional[dict] = None):
        """Start an episode (on ``benchmark`` when given, else the one set last); returns the default observation
        (None without one)."""
        super().reset(seed=seed)
        if seed is not None:
            self.action_space.seed(seed)
        if observation_space is not UNCHANGED:
            self.observation_space = observation_space
        if reward_space is not UNCHANGED:
            self.reward_space = reward_space
        if action_space is not None:
            self.action_space = action_space
        benchmark = benchmark if benchmark is not None else (options or {}).get("benchmark")
        if benchmark is not None:
            self._in_episode = False          # no warning: the new benchmark is used now
            self.benchmark = benchmark
        if self._next_benchmark is None:
            raise TypeError("no benchmark set: env.reset(benchmark=...); env.datasets lists the benchmarks")
        self._benchmark_in_use = self._next_benchmark
        self._in_episode = False
        self._core.reset(benchmark=self._benchmark_in_use.load(self._core.engine))
        self._build_benchmark()
        self._in_episode = True
        self._actions = []
        self.episode_start_time = time.time()
        self.reward.reset(benchmark=self._benchmark_in_use, observation_view=self.observation)
        self.episode_reward = 0.0 if self.reward_space else None
        if self._observation_space_spec is not None:
            return self.observation[self._observation_space_spec.id]
        return None

    def _build_benchmark(self) -> None:
        """Build the benchmark with its build command, unless this command built it already (see the module
        docstring); BenchmarkInitError when the build fails."""
        benchmark = self._benchmark_in_use
        config = benchmark.dynamic_config
        if not config.is_buildable or self._built.get(benchmark.uri) == config:
            return
        try:
            with tempfile.TemporaryDirectory(prefix="bpq-benchmark-") as tmp:
                build_benchmark(self._core._module, config, Path(tmp))
        except BenchmarkInitError as failed:
            compile_only = deepcopy(config)
            compile_only.build_cmd.argument.append("-c")
            try:
                with tempfile.TemporaryDirectory(prefix="bpq-benchmark-") as tmp:
                    build_benchmark(self._core._module, compile_only, Path(tmp))
            except BenchmarkInitError:
                raise failed from None
        self._built[benchmark.uri] = deepcopy(config)

    def multistep(self, actions: Iterable, observation_spaces=None, reward_spaces=None, observations=None,
                  rewards=None, timeout: float = 300):
        """Take ``actions`` in order. With ``observation_spaces`` / ``reward_spaces`` (names or specs) the
        observation and reward are lists in that order, else the default space's value (or None)."""
        if observations is not None:
            warnings.warn("Argument `observations` of CompilerEnv.multistep has been renamed "
                          "`observation_spaces`. Please update your code", category=DeprecationWarning,
                          stacklevel=2)
            observation_spaces = observations
        if rewards is not None:
            warnings.warn("Argument `rewards` of CompilerEnv.multistep has been renamed `reward_spaces`. "
                          "Please update your code", category=DeprecationWarning, stacklevel=2)
            reward_spaces = rewards
        if not self.in_episode:
            self.reset()
        actions = list(actions)
        if observation_spaces:
            obs_specs = [self._observation_spec(s) for s in observation_spaces]
        else:
            obs_specs = [self._observation_space_spec] if self._observation_space_spec else []
        if reward_spaces:
            reward_specs = [self._reward_spec(r) for r in reward_spaces]
        else:
            reward_specs = [self._reward_space_spec] if self._reward_space_spec else []
        self._core.prefetch = self._prefetch(obs_specs, reward_specs)
        _, _, terminated, _, core_info = self._core.multistep(actions)
        self._actions.extend(self._core._actions[len(self._actions):])
        if terminated:
            self._in_episode = False
            info = {"error_type": core_info["error"].split(":", 1)[0], "error_details": core_info["error"]}
            observation_values = [spec.default_value for spec in obs_specs]
            reward_values = [float(r.reward_on_error(self.episode_reward or 0.0)) for r in reward_specs]
        else:
            info = {"action_had_no_effect": core_info["action_had_no_effect"], "new_action_space": False}
            observation_values = [self.observation[spec.id] for spec in obs_specs]
            reward_values = [float(r.update(actions, [self.observation[o] for o in r.observation_spaces],
                                            self.observation)) for r in reward_specs]
            self.reward.previous_action = actions[-1] if actions else None
        observation = observation_values if observation_spaces else (
            observation_values[0] if obs_specs else None)
        if reward_spaces:
            reward = reward_values
        elif reward_specs:
            reward = reward_values[0]
            self.episode_reward = (self.episode_reward or 0.0) + reward
        else:
            reward = None
        return observation, reward, terminated, info

    def close(self) -> None:
        """End the episode, free the module and remove the working directory (see
        :attr:`working_directory`)."""
        self._in_episode = False
        self._core.close()
        if self._remove_working_directory is not None:
            self._remove_working_directory()
        self._working_directory = self._remove_working_directory = None

    def render(self, mode: str = "human") -> Optional[str]:
        """``"human"``: print the IR (CompilerGym's LLVM render); ``"ansi"``: the default observation as text."""
        if mode == "human":
            print(self.ir)
            return None
        if mode == "ansi":
            if not self._observation_space_spec:
                raise ValueError("cannot render without an observation space")
            return str(self.observation[self._observation_space_spec.id])
        raise ValueError(f"invalid render mode {mode!r}: 'human' or 'ansi'")

    # -- state, forks, replay ------------------------------------------------------------------------------------

    @property
    def state(self) -> CompilerEnvState:
        return CompilerEnvState(benchmark=str(self.benchmark) if self.benchmark else None,
                                reward=self.episode_reward, walltime=self.episode_walltime,
                                commandline=self.commandline())

    def commandline(self, textformat: bool = False) -> str:
        """The ``opt`` invocation of this episode's actions, in CompilerGym's form (its flags)."""
        command = self.action_space.commandline(self.actions) if isinstance(self.action_space, Commandline) \
            else " ".join(PASSES[a].flag for a in self.actions)
        if textformat:
            return f"opt {command} input.ll -S -o output.ll"
        return f"opt {command} input.bc -o output.bc"

    def commandline_to_actions(self, commandline: str) -> List[int]:
        """The actions of a command line made by :meth:`commandline`; ValueError when it is malformed."""
        if not commandline.startswith("opt "):
            raise ValueError(f"invalid command line: `{commandline}`")
        for tail in (" input.ll -S -o output.ll", " input.bc -o output.bc"):
            if commandline.endswith(tail):
                return self.action_space.from_commandline(commandline[len("opt "):-len(tail)])
        raise ValueError(f"invalid command line: `{commandline}`")

    def fork(self) -> "LlvmEnv":
        """A new environment in this one's state (no pass is re-run: modules are immutable). Before ``reset()``,
        starts an episode first."""
        if not self.in_episode:
            actions = list(self.actions)
            self.reset()
            if actions:
                self.multistep(actions)
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._core = self._core.fork()
        other._action_space = deepcopy(self._action_space)
        other._working_directory = other._remove_working_directory = None
        other.observation = other._observation_view(list(self.observation.spaces.values()))
        other.reward = RewardView(list(deepcopy(self.reward.spaces).values()), other.observation)
        other._reward_space_spec = other.reward.spaces[self.reward_space.name] if self.reward_space else None
        other._actions = list(self._actions)
        other._built = dict(self._built)
        other._np_random = None
        return other

    def apply(self, state: CompilerEnvState) -> None:
        """Replay ``state``'s actions (on its benchmark, when no episode runs); ValueError when a step fails."""
        if not self.in_episode:
            self.reset(benchmark=state.benchmark)
        if self.benchmark != state.benchmark:
            warnings.warn(f"applying a state of benchmark {state.benchmark!r} to an environment on "
                          f"{self.benchmark!r}", stacklevel=2)
        info: dict = {}
        done = False
        for action in self.commandline_to_actions(state.commandline):
            _, _, done, info = self.step(action)
            if done:
                break
        if done:
            raise ValueError(f"environment terminated with error: `{info.get('error_details')}`")

    def validate(self, state: Optional[CompilerEnvState] = None) -> ValidationResult:
        """Replay ``state`` (default: this episode, in place) from the start and compare the reward."""
        in_place = state is None
        state = self.state if in_place else state
        if not in_place:
            self.reset(benchmark=state.benchmark)
        result = ValidationResult(state=state, walltime=0.0)
        start = time.time()
        target = self if in_place else self.fork()
        try:
            target.reset(benchmark=state.benchmark)
            try:
                target.apply(state)
            except (ValueError, OSError) as exc:
                result.actions_replay_failed = True
                result.errors.append(ValidationError(
                    type="Action replay failed", data={"exception": str(exc), "exception_type": type(exc).__name__}))
            else:
                if state.reward is not None and self.reward_space is None:
                    warnings.warn("Validating state with reward, but environment has no reward space set",
                                  stacklevel=2)
                if state.reward is not None and self.reward_space is not None and self.reward_space.deterministic:
                    result.reward_validated = True
                    if not math.isclose(state.reward, target.episode_reward, rel_tol=1e-5, abs_tol=1e-10):
                        result.reward_validation_failed = True
                        result.errors.append(ValidationError(
                            type=f"Expected reward {state.reward} but received reward {target.episode_reward}",
                            data={"expected_reward": state.reward, "actual_reward": target.episode_reward}))
        finally:
            if not in_place:
                target.close()
        result.walltime = time.time() - start
        return result

    def __copy__(self):
        raise TypeError("ClientServiceCompilerEnv instances do not support shallow copies. Use deepcopy()")

    def __deepcopy__(self, memo) -> "LlvmEnv":
        return self.fork()

    # -- LLVM extras ---------------------------------------------------------------------------------------------

    @property
    def ir(self) -> str:
        return self.observation["Ir"]

    @property
    def ir_sha1(self) -> str:
        return self.observation["IrSha1"]

    def write_ir(self, path: Union[str, Path], *, overwrite: bool = False) -> Path:
        """Write the current module's IR text to ``path``, all at once. A FIFO, a device or a folder there is
        refused, and so is a symbolic link unless ``overwrite`` (then its target is written); see
        :func:`~behavioral_pq.core.files.check_output_file`. Returns ``path``."""
        path = Path(path).expanduser()
        target = check_output_file(path, overwrite=overwrite)
        write_text_atomic(target, self.ir)
        return path

    def write_bitcode(self, path: Union[str, Path], *, overwrite: bool = False) -> Path:
        """Write the current module's bitcode to ``path``, checked and written as :meth:`write_ir`."""
        path = Path(path).expanduser()
        self._require_episode()
        target = check_output_file(path, overwrite=overwrite)
        write_bytes_atomic(target, self._core._module.bitcode)
        return path

    def make_benchmark(self, inputs, copt: Optional[List[str]] = None, system_includes: bool = True,
                       timeout: int = 600) -> Benchmark:
        """See :func:`make_benchmark`."""
        return make_benchmark(inputs, copt=copt, system_includes=system_includes, timeout=timeout,
                              engine=self._core.engine)

    def make_benchmark_from_command_line(self, cmd: Union[str, List[str]], replace_driver: bool = True,
                                         system_includes: bool = True, timeout: int = 600, *,
                                         allow_plugins: bool = False):
        """See :func:`~behavioral_pq.env.compiler_gym.benchmarks.make_benchmark_from_command_line`."""
        return make_benchmark_from_command_line(cmd, replace_driver=replace_driver, system_includes=system_includes,
                                                timeout=timeout, engine=self._core.engine,
                                                allow_plugins=allow_plugins)

    # -- internals -----------------------------------------------------------------------------------------------

    def _observation_spec(self, space: Union[str, ObservationSpaceSpec]) -> ObservationSpaceSpec:
        if isinstance(space, ObservationSpaceSpec):
            return space
        if space in UNSUPPORTED:
            refuse(space)
        if space in self.observation.spaces:
            return self.observation.spaces[space]
        if space in self._extra_observation_specs:
            return self._extra_observation_specs[space]
        raise UnknownSpaceError(f"Observation space not found: {space}")

    def _observation_view(self, specs: List[ObservationSpaceSpec]) -> ObservationView:
        """The view of ``specs``, with a method for each extra space too (``view.Codes()``), which it does not
        list in ``spaces``."""
        view = ObservationView(self, specs)
        for name in self._extra_observation_specs:
            setattr(view, name, lambda name=name: view[name])
        return view

    def _reward_spec(self, space: Union[str, Reward]) -> Reward:
        if isinstance(space, Reward):
            return space
        if space not in self.reward.spaces:
            raise UnknownSpaceError(f"Reward space not found: {space}")
        return self.reward.spaces[space]

    def _prefetch(self, obs_specs, reward_specs) -> tuple:
        """What a step's worker call should bring back with the pass for these spaces: the in-place observations
        (``IN_PLACE``) that Autophase*, InstCount* and rewards computed from them read (InstCount* read Autophase's
        function count too). Remembered for the last combination of spaces (a step with the default spaces asks
        the same every time)."""
        specs = (*obs_specs, *reward_specs)
        last = self._last_prefetch
        if last is not None and len(last[0]) == len(specs) and all(a is b for a, b in zip(last[0], specs)):
            return last[1]
        wanted = [str(s.id if s.base_id is None else s.base_id) for s in obs_specs] + \
            [str(o) for r in reward_specs for o in r.observation_spaces]
        if any(w.startswith("InstCount") for w in wanted):
            wanted.append("Autophase")
        prefetch = tuple(base for base in IN_PLACE if any(w.startswith(base) for w in wanted))
        self._last_prefetch = (specs, prefetch)
        return prefetch

    def _require_episode(self) -> None:
        if not self.in_episode:
            raise RuntimeError("call reset() first (no episode is running)")

    def _observe(self, spec: ObservationSpaceSpec):
        self._require_episode()
        if spec.base_id is not None:                 # a derived space (ObservationView.add_derived_space)
            return spec.translate(self._observe(self.observation.spaces[spec.base_id]))
        return COMPUTE[spec.id](self, self._core._module, self._core._initial)

    def _cached(self, name: str, module: Module, compute):
        return self._core._cached(name, module, compute)


def compute_observation(observation_space: ObservationSpaceSpec, bitcode: Union[str, Path],
                        timeout: float = 300):
    """The ``observation_space`` observation of the module in the file ``bitcode`` (``.bc`` or ``.ll``), without
    an environment of one's own. FileNotFoundError for a missing file, ValueError for an unknown space."""
    path = Path(bitcode)
    if not path.is_file():
        raise FileNotFoundError(str(path))
    if observation_space.id not in COMPUTE and observation_space.id not in UNSUPPORTED:
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", observation_space.id).upper()
        raise ValueError(f"Invalid observation space name: {name}")
    with LlvmEnv(benchmark=Benchmark(f"file://{path.resolve()}", path)) as env:
        env.reset()
        return env.observation[observation_space.id]


#: The environments CompilerGym 0.2.5 registers for LLVM, and their default observation and reward spaces:
#: ``llvm-v0``, ``llvm-{ic,codesize}-v0``, ``llvm-{autophase,ir}-{ic,codesize}-v0``.
LLVM_ENVS: Dict[str, dict] = {"llvm-v0": {}}
for _reward, _reward_space in {"ic": "IrInstructionCountOz", "codesize": "ObjectTextSizeOz"}.items():
    LLVM_ENVS[f"llvm-{_reward}-v0"] = {"reward_space": _reward_space}
    for _observation, _observation_space in {"autophase": "Autophase", "ir": "Ir"}.items():
        LLVM_ENVS[f"llvm-{_observation}-{_reward}-v0"] = {"observation_space": _observation_space,
                                                          "reward_space": _reward_space}


def make(env_id: str = "llvm-v0", **kwargs) -> LlvmEnv:
    """``compiler_gym.make("llvm-ic-v0", benchmark=..., observation_space=..., reward_space=...)``: the
    environment itself, unwrapped (keyword arguments override the id's default spaces)."""
    if env_id not in LLVM_ENVS:
        raise LookupError(f"unknown environment {env_id!r}; known: {', '.join(LLVM_ENVS)}")
    env = LlvmEnv(**{**LLVM_ENVS[env_id], **kwargs})
    if env_id in gymnasium.registry:
        env.spec = deepcopy(gymnasium.spec(env_id))      # wrappers (TimeLimit) and _kwargs edit it: a copy
    return env


__all__ = ["LLVM_ENVS", "CompilerEnv", "CompilerEnvState", "CompilerEnvStateReader", "CompilerEnvStateWriter",
           "EnvSpec", "LlvmEnv", "ValidationError", "ValidationResult", "action_space", "compute_observation", "make"]
