"""``llvm-v0`` on LLVM 19: CompilerGym's pass-ordering environment, as a Gymnasium environment.

Actions are the 124 catalog passes in CompilerGym's order and names. Observations are computed lazily and cached
per state; rewards follow CompilerGym's definitions. Every pass runs in the crash-contained engine (worker
processes, fixed address layout), so a pass that aborts LLVM ends the episode (``terminated``, the error in
``info["error"]``) and the environment goes on working. Passes run in the engine's *measure* mode (no
TargetMachine), so ``ObjectTextSizeBytes`` is ``llc-19 -O2``'s .text of that IR for the host triple. ``Ir``
starts as CompilerGym's does (``; ModuleID = '-'`` and ``source_filename = "-"``).

With the package's :class:`~behavioral_pq.core.engine.Engine`, the episode's module stays live in the engine's
session worker (:class:`~behavioral_pq.core.engine.LiveSession`): a step sends one pass and gets the instruction
count and the Autophase / InstCount it needs back, and bitcode crosses over only when something asks for it (Ir,
Bitcode, a tool's observation, ``validate``). A fork copies the module in the worker.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import gymnasium
import numpy as np
from gymnasium import spaces

from behavioral_pq.core.catalog import PASSES, sequence_pipeline
from behavioral_pq.core.engine import Engine, LiveSession, StepResult, default_engine
from behavioral_pq.core.features import AUTOPHASE_FEATURES, INSTCOUNT_FEATURES, autophase, instcount
from behavioral_pq.core.module import Module, load_module
from behavioral_pq.core.passes import optimize
from behavioral_pq.core.toolchain import assemble, find_tool, llc_assembly, needs_cxx_runtime, run_tool, text_size
from behavioral_pq.corpus.csmith import CSMITH_INCLUDE, csmith_program
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.spectrum import spectrum
from behavioral_pq.errors import EngineError
from behavioral_pq.lowering.sandbox import Sandbox, describe

OBSERVATION_SPACES = ("Autophase", "InstCount", "Ir", "Bitcode", "IrInstructionCount", "IrInstructionCountO0",
                      "IrInstructionCountO3", "IrInstructionCountOz", "ObjectTextSizeBytes", "ObjectTextSizeO0",
                      "ObjectTextSizeO3", "ObjectTextSizeOz", "Runtime", "Spectrum", "Codes", "Embedding")
REWARD_SPACES = ("IrInstructionCount", "IrInstructionCountNorm", "IrInstructionCountO3", "IrInstructionCountOz",
                 "ObjectTextSizeBytes", "ObjectTextSizeOz")

BenchmarkLike = Union[str, os.PathLike, bytes, Module]


class ActionSpace(spaces.Discrete):
    """The 124 catalog passes as CompilerGym's ``llvm-v0`` action space: ``names`` and ``flags`` in its order (a
    name is the flag, ``"-mem2reg"``, as in CompilerGym)."""

    def __init__(self, seed: Optional[int] = None):
        super().__init__(len(PASSES), seed=seed)
        self.names: List[str] = [p.flag for p in PASSES]
        self.flags: List[str] = [p.flag for p in PASSES]

    def to_string(self, actions: Sequence[int]) -> str:
        return " ".join(self.flags[a] for a in actions)


#: Each action's pipeline, ``sequence_pipeline([action])``, made once.
ACTION_PIPELINES: Tuple[str, ...] = tuple(sequence_pipeline([i]) for i in range(len(PASSES)))


def _action(action) -> int:
    """``action`` as a pass index: an integer (Python, numpy, anything with ``__index__``) in 0..123. A bool, a
    float or a string is refused with a TypeError, never rounded or parsed (1.7 is not pass 1)."""
    if type(action) is int and 0 <= action < len(PASSES):   # the common case, first
        return action
    if isinstance(action, (bool, np.bool_)):
        raise TypeError(f"an action is an integer in 0..{len(PASSES) - 1}, not the bool {action!r}")
    try:
        index = operator.index(action)
    except TypeError:
        raise TypeError(f"an action is an integer in 0..{len(PASSES) - 1}, not {type(action).__name__} "
                        f"{action!r}") from None
    if not 0 <= index < len(PASSES):
        raise ValueError(f"action {index} is not in 0..{len(PASSES) - 1}")
    return index


@dataclasses.dataclass(frozen=True)
class EnvState:
    """A replayable episode: the benchmark, the actions taken, the reward so far and the time spent."""

    benchmark: str
    actions: Tuple[int, ...]
    reward: Optional[float]
    walltime: float

    @property
    def commandline(self) -> str:
        return " ".join(PASSES[a].flag for a in self.actions)

    def to_json(self) -> dict:
        return {"benchmark": self.benchmark, "actions": list(self.actions), "reward": self.reward,
                "walltime": self.walltime}

    @classmethod
    def from_json(cls, data: dict) -> "EnvState":
        return cls(str(data["benchmark"]), tuple(_action(a) for a in data["actions"]), data.get("reward"),
                   float(data.get("walltime", 0.0)))


class StoreBenchmarks:
    """The modules of a corpus store as benchmark URIs, ``benchmark://STORE/SHA256`` (STORE: the store's folder,
    absolute), listed and sampled by split::

        bench = StoreBenchmarks("stores/main")
        env.reset(benchmark=bench.sample(split="test", seed=0)[0])
    """

    def __init__(self, store: os.PathLike):
        self.path = Path(store).resolve()
        self.corpus = Corpus(self.path)

    def uris(self, split: Optional[str] = None) -> List[str]:
        """Every module's URI (sorted by hash), or those of one split."""
        shas = self.corpus.split(split) if split else sorted(self.corpus.store.keys("modules"))
        return [f"benchmark://{self.path}/{sha}" for sha in shas]

    def sample(self, count: int = 1, *, split: Optional[str] = None, seed: int = 0) -> List[str]:
        """``count`` URIs drawn without replacement (seeded)."""
        uris = self.uris(split)
        return random.Random(seed).sample(uris, min(count, len(uris)))


RUNTIME_RUNS = 5
RUNTIME_TIMEOUT = 30.0


def _runtime(module: Module, runs: int = RUNTIME_RUNS, warmup: int = 0) -> np.ndarray:
    """float64 (runs,): wall seconds of each run of the module's program (``llc-19 -O2``, linked with clang), in a
    sandbox, after ``warmup`` runs that are not timed; ValueError when the module has no ``main``, RuntimeError
    when a run fails."""
    text = module.text()
    if not re.search(r"^define [^@]*@main\(", text, re.M):
        raise ValueError(f"{module.name}: no main function, so no Runtime observation")
    with tempfile.TemporaryDirectory(prefix="bpq-runtime-") as tmp:
        binary = assemble(llc_assembly(module.bitcode, opt_level=2), Path(tmp) / "program", executable=True,
                          cxx=needs_cxx_runtime(text))
        box = Sandbox(tmp)
        times = []
        for _ in range(warmup + runs):
            result = box.run([str(binary)], timeout=RUNTIME_TIMEOUT)
            if result.returncode is None:
                raise RuntimeError(f"{module.name}: the program {describe(result)[1]}")
            times.append(result.seconds)
    return np.array(times[warmup:], dtype=np.float64)


def load_benchmark(benchmark: BenchmarkLike, engine: Engine) -> Tuple[str, Module]:
    """(URI, module) of a benchmark: a Module, IR/bitcode bytes, a path, a corpus-store URI
    (``benchmark://STORE/SHA256``, see :class:`StoreBenchmarks`), or a generator URI
    (``generator://csmith-v0/SEED``, ``generator://llvm-stress-v0/SEED``)."""
    if isinstance(benchmark, Module):
        return f"module://{benchmark.sha256[:16]}", benchmark
    if isinstance(benchmark, (bytes, bytearray)):
        module = load_module(bytes(benchmark), engine=engine)
        return f"module://{module.sha256[:16]}", module
    text = str(benchmark)
    match = re.fullmatch(r"generator://(csmith|llvm-stress)-v0/(\d+)", text)
    if match:
        kind, seed = match.group(1), int(match.group(2))
        with tempfile.TemporaryDirectory(prefix="bpq-gen-") as tmp:
            if kind == "csmith":
                source = Path(tmp) / f"csmith-{seed}.c"
                source.write_bytes(csmith_program(seed))
                module = load_module(source, flags=[f"-I{CSMITH_INCLUDE}", "-w"], engine=engine)
            else:
                data = run_tool([find_tool("llvm-stress"), f"--seed={seed}", "--size=50"]).stdout
                module = load_module(data, name=f"llvm-stress-{seed}", engine=engine)
        return text, module
    store_uri = re.fullmatch(r"benchmark://(/.+)/([0-9a-f]{64})", text)
    if store_uri:
        store, sha = store_uri.groups()
        found = next(Corpus(store).iter_modules(only={sha}), None)
        if found is None:
            raise ValueError(f"{text}: no such module in the store")
        return text, load_module(found.bitcode, name=sha[:12], engine=engine)
    if text.startswith("benchmark://"):
        raise ValueError(f"{text}: a store benchmark is benchmark://STORE-FOLDER/SHA256 (absolute folder)")
    if text.startswith("generator://"):
        raise ValueError(f"unknown generator {text!r}: generator://csmith-v0/SEED or generator://llvm-stress-v0/SEED")
    path = Path(text[len("file://"):] if text.startswith("file://") else text)
    return f"file://{path.resolve()}", load_module(path, engine=engine)


class LiveState(Module):
    """The module of an episode's current state, live in the engine's session worker: its instruction count and
    the features the step asked for came back with the step; its bitcode is fetched when something needs it (IR,
    bitcode, a hash, a tool), and only while the session is still in this state (``RuntimeError`` after).
    ``values`` caches this state's observations.

    Every step makes a new state, also one whose passes reported no change: a pass may change the module and still
    report every analysis preserved (LLVM 19's IPSCCP replaces an argument by a constant so). After such a step,
    ``unchanged_from`` is (SHA-256, values) of the state before (values None: the environment's cache by hash):
    what was computed from that state's bitcode serves again once this state's bitcode is seen to be the same."""

    def __init__(self, session: LiveSession, result: StepResult,
                 unchanged_from: Optional[Tuple[str, Optional[Dict[str, Any]]]] = None):
        self.name, self.source = session.name, None
        self.session = session
        self.version = len(session.pipelines)
        self.values: Dict[str, Any] = {}
        self._fetched: Optional[bytes] = None
        self.unchanged_from = unchanged_from
        self.__dict__["instruction_count"] = result.instruction_count
        self.record(result)

    @staticmethod
    def after(previous: Module, session: LiveSession, result: StepResult) -> "LiveState":
        """The state after a step from ``previous`` that gave ``result``."""
        if result.changed:
            return LiveState(session, result)
        if isinstance(previous, LiveState):
            unchanged_from = (previous.sha256, previous.values) if previous._fetched is not None else \
                previous.unchanged_from
        else:
            unchanged_from = (previous.sha256, None)
        return LiveState(session, result, unchanged_from)

    def record(self, result: StepResult) -> None:
        if result.autophase is not None:
            self.values["Autophase"] = result.autophase
        if result.instcount is not None:
            self.values["InstCount"] = result.instcount

    @property
    def live(self) -> bool:
        return len(self.session.pipelines) == self.version

    @property
    def _bitcode(self) -> bytes:   # what Module's methods read
        if self._fetched is None:
            if not self.live:
                raise RuntimeError(f"{self.name}: this state's module is gone (its episode moved on)")
            self._fetched = self.session.bitcode()
        return self._fetched

    def features(self, name: str) -> np.ndarray:
        """Autophase or InstCount, read in place (one round trip, no bitcode)."""
        if name not in self.values:
            if self._fetched is not None or not self.live:
                self.values[name] = autophase(Module(self._bitcode)) if name == "Autophase" else \
                    instcount(Module(self._bitcode))
            else:
                self.record(self.session.observe(autophase=name == "Autophase", instcount=name == "InstCount"))
        return self.values[name]

    def rebind(self, session: LiveSession) -> "LiveState":
        """This state as the state of ``session`` (a fork of this one's session)."""
        other = LiveState.__new__(LiveState)
        other.__dict__.update(self.__dict__)
        other.session, other.values = session, dict(self.values)
        return other


#: Observations a step brings back with the pass result when they are the ones asked for.
IN_PLACE = ("Autophase", "InstCount")


def _benchmark_key(benchmark: BenchmarkLike) -> Optional[tuple]:
    """What identifies a benchmark's content without loading it: a generator or store URI (deterministic,
    content-addressed), or a file's path, size and modification time; None when there is no cheap key."""
    if isinstance(benchmark, (Module, bytes, bytearray)):
        return None
    text = str(benchmark)
    if text.startswith(("generator://", "benchmark://")):
        return (text,)
    try:
        info = os.stat(text[len("file://"):] if text.startswith("file://") else text)
    except (OSError, ValueError):
        return None
    return (text, info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class LlvmEnv(gymnasium.Env):
    """CompilerGym's ``llvm-v0`` on LLVM 19 (Gymnasium API: ``reset`` -> (obs, info), ``step`` -> (obs, reward,
    terminated, truncated, info)).

    Args:
        benchmark: what to compile (see :func:`load_benchmark`); ``reset(benchmark=...)`` changes it.
        observation_space: the name of the default observation (None: none; a list: a list of observations).
        reward_space: the name of the default reward (None: reward 0.0).
        engine: where passes run (default: the shared protected engine).
        encoder: the encoder of the ``Embedding`` and ``Codes`` observations (default: the shipped one).
    """

    metadata = {"render_modes": []}

    def __init__(self, benchmark: Optional[BenchmarkLike] = None, *, observation_space: Optional[str] = None,
                 reward_space: Optional[str] = None, engine: Optional[Engine] = None, encoder=None):
        for name in ([observation_space] if isinstance(observation_space, str) else observation_space or []):
            _check(name, OBSERVATION_SPACES, "observation space")
        if reward_space is not None:
            _check(reward_space, REWARD_SPACES, "reward space")
        self.engine = engine or default_engine()
        self._encoder = encoder
        self.action_space = ActionSpace()
        self.observation_space_name = observation_space
        self.reward_space_name = reward_space
        self.observation_space = _space(observation_space) if isinstance(observation_space, str) else None
        self.benchmark = benchmark
        self._uri: Optional[str] = None
        self._initial: Optional[Module] = None
        self._module: Optional[Module] = None
        self._actions: List[int] = []
        self._reward_total = 0.0
        self._start = time.monotonic()
        self._cache: Dict[Tuple[str, str], Any] = {}
        self.observation = _Observations(self)
        # With the package's Engine, the episode's module stays live in its session worker (one pass per step in
        # place, no bitcode sent); any other engine object gets bitcode in and out at every step.
        self._live = isinstance(self.engine, Engine)
        self._session: Optional[LiveSession] = None
        self._loaded: Optional[Tuple[Any, str, Module]] = None   # (key, URI, module) of the last benchmark loaded
        #: Observations that each step computes in place along with the pass (besides the default observation).
        self.prefetch: Tuple[str, ...] = ()

    # -- the Gymnasium API ---------------------------------------------------------------------------------------

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None,
              benchmark: Optional[BenchmarkLike] = None):
        super().reset(seed=seed)
        if seed is not None:
            self.action_space.seed(seed)
        benchmark = benchmark if benchmark is not None else (options or {}).get("benchmark", self.benchmark)
        if benchmark is None:
            raise ValueError("no benchmark: make('llvm-v0', benchmark=...) or reset(benchmark=...)")
        self.benchmark = benchmark
        self._uri, self._initial = self._load(benchmark)
        self._module = self._initial
        self._close_session()
        if self._live:
            self._session = self.engine.open_session(self._initial.bitcode, self._initial.name)
        self._actions = []
        self._reward_total = 0.0
        self._start = time.monotonic()
        return self._observe(self.observation_space_name), {"benchmark": self._uri}

    def _load(self, benchmark: BenchmarkLike) -> Tuple[str, Module]:
        """:func:`load_benchmark`, reusing the last benchmark while it is the same (a file: same path, size and
        modification time), so that a reset per episode does not compile or prepare it again."""
        key = _benchmark_key(benchmark)
        if key is not None and self._loaded is not None and self._loaded[0] == key:
            return self._loaded[1], self._loaded[2]
        uri, module = load_benchmark(benchmark, self.engine)
        self._loaded = (key, uri, module) if key is not None else None
        return uri, module

    def step(self, action: int, *, observation_spaces: Optional[Sequence[str]] = None,
             reward_spaces: Optional[Sequence[str]] = None):
        return self.multistep([action], observation_spaces=observation_spaces, reward_spaces=reward_spaces)

    def multistep(self, actions: Sequence[int], *, observation_spaces: Optional[Sequence[str]] = None,
                  reward_spaces: Optional[Sequence[str]] = None):
        """Apply ``actions`` in order, as that many steps; rewards are summed over them. With lists of spaces, the
        observation and reward are lists in that order (as CompilerGym's ``observation_spaces`` /
        ``reward_spaces``)."""
        self._require_reset()
        actions = [_action(a) for a in actions]
        rewards = list(reward_spaces) if reward_spaces is not None else (
            [self.reward_space_name] if self.reward_space_name else [])
        before = {r: self._reward_metric(r, self._module) for r in rewards}
        info: Dict[str, Any] = {"action_had_no_effect": False}
        terminated = False
        obs_names = list(observation_spaces) if observation_spaces is not None else self.observation_space_name
        try:
            if self._live:
                info["action_had_no_effect"] = not self._live_steps(actions, obs_names)
            else:
                start = self._module
                for action in actions:   # one run per action, as separate steps: the same modules as step()
                    bitcode = self.engine.run_pipeline(self._module.bitcode, ACTION_PIPELINES[action],
                                                       name=self._module.name)
                    self._module = Module(bitcode, name=self._module.name)
                    self._actions.append(action)
                info["action_had_no_effect"] = self._module.sha256 == start.sha256
        except EngineError as exc:
            terminated = True
            info["error"] = f"{type(exc).__name__}: {exc}"
        values = [self._reward(r, before[r]) if not terminated else 0.0 for r in rewards]
        if self.reward_space_name in rewards:
            self._reward_total += values[rewards.index(self.reward_space_name)]
        observation = self._observe(obs_names)
        reward = values if reward_spaces is not None else (values[0] if values else 0.0)
        return observation, reward, terminated, False, info

    def _live_steps(self, actions: Sequence[int], obs_names) -> bool:
        """Apply ``actions`` to the live module, one run each; True when the passes of any reported a change. The
        last one brings back the in-place observations that are asked for or prefetched."""
        wanted = set(self.prefetch) | set([obs_names] if isinstance(obs_names, str) else obs_names or [])
        autophase, instcount = "Autophase" in wanted, "InstCount" in wanted
        changed = False
        for i, action in enumerate(actions):
            last = i == len(actions) - 1
            result = self._session.apply(ACTION_PIPELINES[action], autophase=last and autophase,
                                         instcount=last and instcount)
            self._actions.append(action)
            changed = changed or result.changed
            self._module = LiveState.after(self._module, self._session, result)
        return changed

    def _close_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def close(self) -> None:
        self._cache.clear()
        if self._session is not None:
            self._session.close()   # frees the live module; a later step replays the episode into a new one

    # -- CompilerGym's extras ------------------------------------------------------------------------------------

    @property
    def initial_module(self) -> Module:
        """The benchmark's module as loaded by the last ``reset``."""
        self._require_reset()
        return self._initial

    @property
    def actions(self) -> List[int]:
        return list(self._actions)

    @property
    def state(self) -> EnvState:
        self._require_reset()
        return EnvState(self._uri, tuple(self._actions), self._reward_total if self.reward_space_name else None,
                        time.monotonic() - self._start)

    def commandline(self) -> str:
        """The equivalent ``opt-19`` command."""
        self._require_reset()
        return f"opt-19 -passes='{sequence_pipeline(self._actions) if self._actions else ''}' input.bc -o output.bc"

    def fork(self) -> "LlvmEnv":
        """A new environment in this one's state (modules are immutable: nothing is re-run)."""
        self._require_reset()
        other = LlvmEnv(self.benchmark, observation_space=self.observation_space_name,
                        reward_space=self.reward_space_name, engine=self.engine, encoder=self._encoder)
        other._uri, other._initial, other._module = self._uri, self._initial, self._module
        if self._session is not None:
            other._session = self._session.fork()
            if isinstance(self._module, LiveState):
                other._module = self._module.rebind(other._session)
        other.prefetch, other._loaded = self.prefetch, self._loaded
        other._actions, other._reward_total, other._start = list(self._actions), self._reward_total, self._start
        other._cache = self._cache          # keyed by module hash: shared safely
        return other

    def validate(self, state: Optional[EnvState] = None) -> bool:
        """Replay ``state`` (default: this episode) from scratch and check that it gives this module and reward.
        The modules are compared but for the names of local values: an episode that went through a fork names the
        values later passes create with other suffixes (``%.promoted4`` for ``%.promoted1``) than a replay
        does, as a fork's module is parsed afresh from bitcode.

        Raises ValueError naming what differs (another benchmark, another module, another reward)."""
        state = state or self.state
        replayable = state.benchmark.startswith(("file://", "generator://", "benchmark://"))
        replay = LlvmEnv(state.benchmark if replayable else self.benchmark, reward_space=self.reward_space_name,
                         engine=self.engine)
        replay.reset()
        if replay._uri != self._uri:
            raise ValueError(f"state is for {state.benchmark}, this episode runs {self._uri}")
        if state.actions:
            replay.multistep(state.actions)
        if tuple(self._actions) != state.actions or not _same_module(replay._module, self._module, self.engine):
            raise ValueError("replaying the actions gives another module than this episode's")
        if state.reward is not None and self.reward_space_name and not np.isclose(
                replay._reward_total, state.reward, rtol=1e-9, atol=1e-9):
            raise ValueError(f"replayed reward {replay._reward_total} differs from the state's {state.reward}")
        return True

    # -- observations and rewards --------------------------------------------------------------------------------

    def _require_reset(self) -> None:
        if self._module is None:
            raise RuntimeError("call reset() first")

    def _observe(self, names):
        if names is None:
            return None
        if isinstance(names, str):
            return self.observation[names]
        return [self.observation[n] for n in names]

    def _compute(self, name: str, module: Module):
        if isinstance(module, LiveState) and name in IN_PLACE:
            return module.features(name)
        return self._cached(name, module, lambda: _OBSERVERS[name](self, module))

    def _cached(self, name: str, module: Module, compute: Callable[[], Any]):
        """``compute()``, once per (name, module): a live state keeps its own values, a Module's are keyed by
        its hash."""
        if isinstance(module, LiveState):
            if name not in module.values:
                found, value = self._unchanged_value(name, module)
                module.values[name] = value if found else compute()
            return module.values[name]
        key = (name, module.sha256)
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def _unchanged_value(self, name: str, state: LiveState) -> Tuple[bool, Any]:
        """(True, value) when ``state`` follows a step that reported no change, ``name`` was computed for the state
        before it, and the two modules are the same (their bitcode hashes); else (False, None)."""
        if state.unchanged_from is None:
            return False, None
        sha, values = state.unchanged_from
        if values is not None:
            if name not in values:
                return False, None
            value = values[name]
        elif (name, sha) in self._cache:
            value = self._cache[(name, sha)]
        else:
            return False, None
        return (True, value) if state.sha256 == sha else (False, None)

    def _reward_metric(self, name: str, module: Module) -> float:
        if name.startswith("IrInstructionCount"):
            return float(module.instruction_count)
        return float(self._compute("ObjectTextSizeBytes", module))

    def _reward(self, name: str, before: float) -> float:
        after = self._reward_metric(name, self._module)
        delta = before - after
        if name in ("IrInstructionCount", "ObjectTextSizeBytes"):
            return delta
        if name == "IrInstructionCountNorm":
            return delta / max(1.0, float(self._initial.instruction_count))
        if name == "ObjectTextSizeOz":
            base = self._compute("ObjectTextSizeO0", self._initial) - self._compute("ObjectTextSizeOz", self._initial)
        else:
            level = "O3" if name.endswith("O3") else "Oz"
            base = self._initial.instruction_count - self._compute(f"IrInstructionCount{level}", self._initial)
        return delta / base if base else 0.0

    @property
    def encoder(self):
        if self._encoder is None:
            from behavioral_pq.embedding.encoder import load_encoder   # torch loads here, not with the environment

            self._encoder = load_encoder()
        return self._encoder


class _Observations:
    """``env.observation["Autophase"]``: the current state's observation, computed once."""

    def __init__(self, env: LlvmEnv):
        self._env = env

    def __getitem__(self, name: str):
        _check(name, OBSERVATION_SPACES, "observation space")
        self._env._require_reset()
        module = self._env._initial if name.endswith(("O0", "O3", "Oz")) else self._env._module
        return self._env._compute(name, module)

    def keys(self) -> Tuple[str, ...]:
        return OBSERVATION_SPACES


_HEADER = re.compile(r"\A; ModuleID = '[^\n]*'\n(?:source_filename = \"[^\n]*\"\n)?")


def ir_text(module: Module) -> str:
    """The module's IR text as CompilerGym's ``Ir`` observation starts it: ``; ModuleID = '-'`` and
    ``source_filename = "-"`` (CompilerGym reads modules from stdin; modules here carry no file name)."""
    return _HEADER.sub("; ModuleID = '-'\nsource_filename = \"-\"\n", module.text(), count=1)


def _same_module(a: Module, b: Module, engine: Engine) -> bool:
    """Whether two modules are the same but for the names of local values and internal symbols."""
    if a.sha256 == b.sha256:
        return True
    return engine.run_pipeline(a.bitcode, "strip", name=a.name) == engine.run_pipeline(b.bitcode, "strip", name=b.name)


def _check(name: str, known: Sequence[str], what: str) -> None:
    if name not in known:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")


def _space(name: str) -> spaces.Space:
    if name == "Autophase":
        return spaces.Box(0, np.iinfo(np.int64).max, (len(AUTOPHASE_FEATURES),), np.int64)
    if name == "InstCount":
        return spaces.Box(0, np.iinfo(np.int64).max, (len(INSTCOUNT_FEATURES),), np.int64)
    if name in ("Ir", "Bitcode"):
        return spaces.Text(max_length=1 << 30)
    if name in ("Spectrum", "Codes", "Embedding"):
        return spaces.Box(-np.inf, np.inf, (0,), np.float32)   # shape depends on the probe set and encoder
    return spaces.Box(0, np.iinfo(np.int64).max, (), np.int64)


_OBSERVERS: Dict[str, Callable[[LlvmEnv, Module], Any]] = {
    "Autophase": lambda env, m: autophase(m),
    "InstCount": lambda env, m: instcount(m),
    "Ir": lambda env, m: ir_text(m),
    "Bitcode": lambda env, m: m.bitcode,
    "IrInstructionCount": lambda env, m: m.instruction_count,
    "IrInstructionCountO0": lambda env, m: m.instruction_count,
    "IrInstructionCountO3": lambda env, m: optimize(m, "O3", engine=env.engine).instruction_count,
    "IrInstructionCountOz": lambda env, m: optimize(m, "Oz", engine=env.engine).instruction_count,
    "ObjectTextSizeBytes": lambda env, m: text_size(m.bitcode),
    "ObjectTextSizeO0": lambda env, m: text_size(m.bitcode),
    "ObjectTextSizeO3": lambda env, m: text_size(optimize(m, "O3", engine=env.engine).bitcode),
    "ObjectTextSizeOz": lambda env, m: text_size(optimize(m, "Oz", engine=env.engine).bitcode),
    "Runtime": lambda env, m: _runtime(m),
    "Spectrum": lambda env, m: spectrum(m, env.encoder.probe_set, engine=env.engine),
    "Codes": lambda env, m: env.encoder.spectra_codes(env._compute("Spectrum", m)[None], autophase(m)[None])[0],
    "Embedding": lambda env, m: env.encoder.embed_spectra(env._compute("Spectrum", m)[None], autophase(m)[None])[0],
}


def make(env_id: str = "llvm-v0", **kwargs) -> LlvmEnv:
    """``make("llvm-v0", benchmark=..., observation_space=..., reward_space=...)``."""
    if env_id not in ("llvm-v0", "bpq/llvm-v0"):
        raise ValueError(f"unknown environment {env_id!r}; this package provides 'llvm-v0'")
    return LlvmEnv(**kwargs)


__all__ = ["ActionSpace", "EnvState", "LlvmEnv", "OBSERVATION_SPACES", "REWARD_SPACES", "StoreBenchmarks",
           "load_benchmark", "make"]
