"""CompilerGym's own API over :class:`~behavioral_pq.env.llvm.LlvmEnv`, for code written for CompilerGym: change
the import and keep the rest::

    import behavioral_pq.env.compiler_gym as compiler_gym      # was: import compiler_gym

    env = compiler_gym.make("llvm-v0", benchmark="prog.c", observation_space="Autophase",
                            reward_space="IrInstructionCountOz")
    observation = env.reset()
    observation, reward, done, info = env.step(env.action_space.sample())

``reset`` returns the observation and ``step`` / ``multistep`` the 4-tuple of CompilerGym (``done`` is
``terminated or truncated``); everything else (``observation[...]``, ``fork``, ``state``, ``validate``,
``commandline``, ``action_space.names``) is the environment's own.
"""

from __future__ import annotations

from typing import Optional, Sequence

from behavioral_pq.env.llvm import LlvmEnv
from behavioral_pq.env.llvm import make as make_env


class CompilerGymEnv:
    """An :class:`LlvmEnv` that speaks CompilerGym 0.2's API (see the module docstring)."""

    def __init__(self, env: LlvmEnv):
        self.env = env

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, benchmark=None, *, seed: Optional[int] = None):
        observation, _ = self.env.reset(benchmark=benchmark, seed=seed)
        return observation

    def step(self, action: int, *, observation_spaces: Optional[Sequence[str]] = None,
             reward_spaces: Optional[Sequence[str]] = None):
        return self.multistep([action], observation_spaces=observation_spaces, reward_spaces=reward_spaces)

    def multistep(self, actions: Sequence[int], *, observation_spaces: Optional[Sequence[str]] = None,
                  reward_spaces: Optional[Sequence[str]] = None):
        observation, reward, terminated, truncated, info = self.env.multistep(
            actions, observation_spaces=observation_spaces, reward_spaces=reward_spaces)
        return observation, reward, terminated or truncated, info

    def fork(self) -> "CompilerGymEnv":
        return CompilerGymEnv(self.env.fork())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.env.close()


def make(env_id: str = "llvm-v0", **kwargs) -> CompilerGymEnv:
    """``compiler_gym.make("llvm-v0", benchmark=..., observation_space=..., reward_space=...)``."""
    return CompilerGymEnv(make_env(env_id, **kwargs))
