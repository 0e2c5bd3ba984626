"""An RL-ready wrapper: a fixed-length episode with a flat float observation (log Autophase) and the
-Oz-normalized reward, ready for any Gymnasium agent library.

    python examples/rl_wrapper.py PROGRAM.c
"""
import sys

import gymnasium
import numpy as np

from behavioral_pq.env import make


class AutophaseEpisodes(gymnasium.Wrapper):
    """log1p(Autophase) observations (float32 (56,)), episodes of ``horizon`` steps."""

    def __init__(self, env, horizon: int = 45):
        super().__init__(env)
        self.horizon, self.t = horizon, 0
        self.observation_space = gymnasium.spaces.Box(0.0, np.inf, (56,), np.float32)

    def reset(self, **kwargs):
        self.t = 0
        observation, info = self.env.reset(**kwargs)
        return np.log1p(observation).astype(np.float32), info

    def step(self, action):
        self.t += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        return (np.log1p(observation).astype(np.float32), reward, terminated, truncated or self.t >= self.horizon,
                info)


if __name__ == "__main__":
    env = AutophaseEpisodes(make("llvm-v0", benchmark=sys.argv[1], observation_space="Autophase",
                                 reward_space="IrInstructionCountOz"), horizon=10)
    observation, _ = env.reset(seed=0)
    done, total = False, 0.0
    while not done:
        observation, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        total += reward
        done = terminated or truncated
    print(f"random policy, 10 steps: reward {total:.3f}; observation {observation.shape} {observation.dtype}")
