"""The part of OpenAI gym 0.21 that CompilerGym scripts use (``gym.make``, ``gym.spaces``, ``gym.Env`` and the
``Wrapper`` / ``ObservationWrapper`` / ``RewardWrapper`` / ``ActionWrapper`` classes with 4-tuple ``step`` and a
``reset`` that returns the observation), over this package's environments. gym itself is unmaintained and
gymnasium's wrappers expect 5-tuples; a script changes ``import gym`` to
``from behavioral_pq.env.compiler_gym import gym`` and keeps the rest.
"""

from __future__ import annotations

from gymnasium import Env, Space, spaces

from behavioral_pq.env.compiler_gym.env import make
from behavioral_pq.env.compiler_gym.wrappers import CompilerEnvWrapper


class Wrapper(CompilerEnvWrapper):
    """gym 0.21's ``Wrapper``: ``action_space`` and ``observation_space`` set on the wrapper stay on it (read
    through to the environment until then); everything else is the environment's."""

    _wrapper_spaces: dict

    def __init__(self, env):
        super().__init__(env)
        self._wrapper_spaces = {}

    @property
    def action_space(self):
        return self._wrapper_spaces.get("action_space", self.env.action_space)

    @action_space.setter
    def action_space(self, space) -> None:
        self._wrapper_spaces["action_space"] = space

    @property
    def observation_space(self):
        return self._wrapper_spaces.get("observation_space", self.env.observation_space)

    @observation_space.setter
    def observation_space(self, space) -> None:
        self._wrapper_spaces["observation_space"] = space

    def step(self, action):
        return self.env.step(action)

    def fork(self):
        raise TypeError(f"{type(self).__name__} cannot fork: a gym wrapper holds state of its own")


class ObservationWrapper(Wrapper):
    """Applies ``observation(obs)`` to what ``reset`` and ``step`` return."""

    def reset(self, *args, **kwargs):
        return self.observation(self.env.reset(*args, **kwargs))

    def step(self, action):
        observation, reward, done, info = self.env.step(action)
        return self.observation(observation), reward, done, info

    def observation(self, observation):
        raise NotImplementedError


class RewardWrapper(Wrapper):
    """Applies ``reward(r)`` to what ``step`` returns."""

    def step(self, action):
        observation, reward, done, info = self.env.step(action)
        return observation, self.reward(reward), done, info

    def reward(self, reward):
        raise NotImplementedError


class ActionWrapper(Wrapper):
    """Applies ``action(a)`` before the environment takes ``a``."""

    def step(self, action):
        return self.env.step(self.action(action))

    def action(self, action):
        raise NotImplementedError

    def reverse_action(self, action):
        raise NotImplementedError


__all__ = ["ActionWrapper", "Env", "ObservationWrapper", "RewardWrapper", "Space", "Wrapper", "make", "spaces"]
