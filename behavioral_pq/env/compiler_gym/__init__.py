"""CompilerGym 0.2.5's API on LLVM 19, for code written for CompilerGym: change the import and keep the rest::

    import behavioral_pq.env.compiler_gym as compiler_gym      # was: import compiler_gym

    env = compiler_gym.make("llvm-autophase-ic-v0", benchmark="benchmark://examples-v0/matmul")
    observation = env.reset()                                   # Autophase, (56,) int64
    observation, reward, done, info = env.step(env.action_space["-mem2reg"])
    env.observation_space = "InstCount"                         # setters reach the environment
    env.reward["IrInstructionCount"], env.state, env.fork(), env.validate()

Everything of CompilerGym's ``LlvmEnv`` for pass ordering is here: the env ids it registers (``llvm-v0``,
``llvm-ic-v0``, ``llvm-codesize-v0``, ``llvm-autophase-ic-v0``, ...; also ``gymnasium.make("llvm-v0")``), the
``PassesAll`` action space (names are the flags), the observation and reward spaces and their views, state,
``fork`` / ``apply`` / ``validate``, :mod:`.wrappers` and :mod:`.datasets` (local folders and corpus stores as
datasets; nothing is downloaded), ``Benchmark.proto`` (plain dataclasses with the protobuf messages' fields,
``dynamic_config`` included), the ``observation_spaces`` / ``reward_spaces`` enums and ``__version__`` (this
package's, which ``env.version`` also reports), ProGraML graphs (:mod:`behavioral_pq.core.programl`) and inst2vec
(:mod:`behavioral_pq.core.inst2vec`) on LLVM 19. Not here: its gRPC service and dataset downloads.
"""

from __future__ import annotations

import gymnasium

from behavioral_pq._version import __version__
from behavioral_pq.env.compiler_gym import datasets, gym, spaces, wrappers
from behavioral_pq.env.compiler_gym.benchmarks import (
    BenchmarkFromCommandLine,
    ClangInvocation,
    get_system_library_flags,
    make_benchmark,
    make_benchmark_from_command_line,
)
from behavioral_pq.env.compiler_gym.datasets import (
    Benchmark,
    BenchmarkInitError,
    BenchmarkProto,
    Dataset,
    Datasets,
    File,
    register_dataset,
)
from behavioral_pq.env.compiler_gym.env import (
    LLVM_ENVS,
    CompilerEnv,
    CompilerEnvState,
    CompilerEnvStateReader,
    CompilerEnvStateWriter,
    LlvmEnv,
    ValidationError,
    ValidationResult,
    compute_observation,
    make,
)
from behavioral_pq.env.compiler_gym.specs import observation_spaces, reward_spaces
from behavioral_pq.env.compiler_gym.views import ObservationSpaceSpec, ObservationView, RewardView

COMPILER_GYM_ENVS = list(LLVM_ENVS)

for _id, _kwargs in LLVM_ENVS.items():
    if _id not in gymnasium.registry:
        gymnasium.register(id=_id, entry_point="behavioral_pq.env.compiler_gym.env:LlvmEnv", kwargs=_kwargs,
                           order_enforce=False, disable_env_checker=True)


#: The name this shim had before it became CompilerGym's whole API.
CompilerGymEnv = LlvmEnv

__all__ = ["Benchmark", "BenchmarkFromCommandLine", "BenchmarkInitError", "BenchmarkProto", "COMPILER_GYM_ENVS",
           "ClangInvocation", "CompilerEnv", "CompilerEnvState", "CompilerEnvStateReader", "CompilerEnvStateWriter",
           "CompilerGymEnv", "Dataset", "Datasets", "File", "LLVM_ENVS", "LlvmEnv", "ObservationSpaceSpec",
           "ObservationView", "RewardView", "ValidationError", "ValidationResult", "__version__",
           "compute_observation", "datasets", "get_system_library_flags", "gym", "make", "make_benchmark",
           "make_benchmark_from_command_line", "observation_spaces", "register_dataset", "reward_spaces", "spaces",
           "wrappers"]
