"""A Gymnasium environment on LLVM 19 that speaks CompilerGym's ``llvm-v0``: the same 124 actions (names,
flags, order), Autophase, InstCount, IR, instruction counts and object sizes, CompilerGym's reward definitions,
and this project's Spectrum, Codes and Embedding observations. Needs ``gymnasium`` (``pip install
behavioral-pq[env]``).

    >>> from behavioral_pq.env import make
    >>> env = make("llvm-v0", benchmark="behavioral_pq/data/examples/sum_array.c",
    ...            observation_space="Autophase", reward_space="IrInstructionCountOz")
    >>> observation, info = env.reset()
    >>> observation, reward, terminated, truncated, info = env.step(env.action_space.flags.index("-sroa"))
    >>> reward > 0
    True

Also registered with Gymnasium as ``bpq/llvm-v0`` (``gymnasium.make("bpq/llvm-v0", benchmark=...)``).
For code written for CompilerGym (4-tuple ``step``), see :mod:`behavioral_pq.env.compiler_gym`.
"""

import gymnasium

from behavioral_pq.env.llvm import (
    OBSERVATION_SPACES,
    REWARD_SPACES,
    ActionSpace,
    EnvState,
    LlvmEnv,
    StoreBenchmarks,
    make,
)

if "bpq/llvm-v0" not in gymnasium.registry:
    # As in CompilerGym, an environment may have no observation space (step then observes None): Gymnasium's
    # passive checker would refuse that, so gymnasium.make takes the same arguments as make().
    gymnasium.register(id="bpq/llvm-v0", entry_point="behavioral_pq.env.llvm:LlvmEnv", disable_env_checker=True)

__all__ = ["ActionSpace", "EnvState", "LlvmEnv", "OBSERVATION_SPACES", "REWARD_SPACES", "StoreBenchmarks", "make"]
