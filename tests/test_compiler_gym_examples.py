"""CompilerGym 0.2.5's examples (random_walk.py, tabular_q.py, actor_critic.py, llvm_autotuning's greedy search),
shortened, run against the shim with only the imports and the benchmark changed: each calls exactly the
CompilerGym API the original script calls."""

import random
from collections import namedtuple
from typing import Dict, NamedTuple

import numpy as np
import pytest

import behavioral_pq.env.compiler_gym as compiler_gym          # was: import compiler_gym
from behavioral_pq.env.compiler_gym import gym                  # was: import gym
from behavioral_pq.env.compiler_gym.wrappers import ConstrainedCommandline, TimeLimit   # was: compiler_gym.wrappers

BENCHMARK = "benchmark://examples-v0/matmul"                    # was: cbench-v1/qsort
FLAGS = ["-break-crit-edges", "-early-cse-memssa", "-gvn-hoist", "-gvn", "-instcombine", "-instsimplify",
         "-jump-threading", "-loop-reduce", "-loop-rotate", "-loop-versioning", "-mem2reg", "-newgvn", "-reg2mem",
         "-simplifycfg", "-sroa"]


def test_random_walk():
    random.seed(0)
    with compiler_gym.make("llvm-autophase-ic-v0", benchmark=BENCHMARK) as env:
        env.action_space.seed(0)
        rewards = []
        env.reset()
        for _ in range(12):
            action_index = env.action_space.sample()
            observation, reward, done, info = env.step(action_index)
            assert env.action_space.names[action_index].startswith("-")
            assert isinstance(info.get("action_had_no_effect"), bool)
            rewards.append(reward)
            if env.observation_space:
                assert observation.shape == (56,)
            if done:
                break
        # the rewards are IrInstructionCountOz: they add up to the episode's reduction in units of -Oz's
        ic0, oz, now = (env.observation[k] for k in ("IrInstructionCountO0", "IrInstructionCountOz",
                                                    "IrInstructionCount"))
        assert sum(rewards) == pytest.approx((ic0 - now) / max(ic0 - oz, 1))
        assert env.episode_reward == pytest.approx(sum(rewards))


class StateActionTuple(NamedTuple):
    autophase0: int
    autophase1: int
    autophase2: int
    cur_step: int
    action_index: int


def test_tabular_q():
    random.seed(0)
    episodes, episode_length, learning_rate, discount, epsilon = 12, 4, 0.1, 1.0, 0.2
    features_indices = [19, 22, 51]

    def make_q_table_key(autophase_feature, action, step):
        return StateActionTuple(*autophase_feature[features_indices], step, FLAGS.index(action))

    def select_action(q_table, ob, step, eps=0.0):
        qs = [q_table.get(make_q_table_key(ob, act, step), -1) for act in FLAGS]
        if random.random() < eps:
            return random.choice(FLAGS)
        max_indices = [i for i, x in enumerate(qs) if x == max(qs)]
        return FLAGS[random.choice(max_indices)]

    def get_max_q_value(q_table, ob, step):
        return max([q_table.get(make_q_table_key(ob, act, step), 0) for act in FLAGS] + [0])

    def rollout(q_table, env):
        observation = env.reset()
        rewards = []
        for i in range(episode_length):
            a = select_action(q_table, observation, i)
            observation, reward, done, info = env.step(env.action_space.flags.index(a))
            rewards.append(reward)
            if done:
                break
        return sum(rewards)

    q_table: Dict[StateActionTuple, float] = {}
    with gym.make("llvm-ic-v0", benchmark=BENCHMARK) as env:
        env.observation_space = "Autophase"           # the setter tabular_q.py relies on
        for _ in range(episodes):
            current_length = 0
            observation = env.reset()
            assert observation.shape == (56,)
            while current_length < episode_length:
                a = select_action(q_table, observation, current_length, epsilon)
                hashed = make_q_table_key(observation, a, current_length)
                q_table.setdefault(hashed, 0)
                observation, reward, done, info = env.step(env.action_space.flags.index(a))
                if done:
                    break
                current_length += 1
                target = reward + discount * get_max_q_value(q_table, observation, current_length)
                q_table[hashed] = learning_rate * target + (1 - learning_rate) * q_table[hashed]
        assert q_table and any(v > 0 for v in q_table.values())      # some pass reduced the IR and was learned
        assert rollout(q_table, env) == pytest.approx(env.episode_reward)   # the greedy rollout's total


def test_actor_critic():
    torch = pytest.importorskip("torch")
    from torch import nn, optim
    from torch.distributions import Categorical
    from torch.nn import functional as F

    episode_len, hidden_size, episodes = 3, 16, 6
    SavedAction = namedtuple("SavedAction", ["log_prob", "value"])

    class HistoryObservation(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env=env)
            self.observation_space = gym.spaces.Box(low=np.full(len(FLAGS), 0, dtype=np.float32),
                                                    high=np.full(len(FLAGS), float("inf"), dtype=np.float32),
                                                    dtype=np.float32)

        def reset(self, *args, **kwargs):
            self._steps_taken = 0
            self._state = np.zeros((episode_len - 1, self.action_space.n), dtype=np.int32)
            return super().reset(*args, **kwargs)

        def step(self, action: int):
            if self._steps_taken < episode_len - 1:
                self._state[self._steps_taken][action] = 1
            self._steps_taken += 1
            return super().step(action)

        def observation(self, observation):
            return self._state

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear((episode_len - 1) * len(FLAGS), hidden_size)
            self.action_head = nn.Linear(hidden_size, len(FLAGS))
            self.value_head = nn.Linear(hidden_size, 1)
            self.saved_actions, self.rewards = [], []

        def forward(self, x):
            x = F.relu(self.affine1(x))
            return F.softmax(self.action_head(x), dim=-1), self.value_head(x)

    def select_action(model, state):
        probs, state_value = model(torch.from_numpy(state.flatten()).float())
        m = Categorical(probs)
        action = m.sample()
        model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
        return action.item()

    def finish_episode(model, optimizer):
        returns, r_sum = [], 0.0
        for r in model.rewards[::-1]:
            r_sum += r
            returns.insert(0, r_sum)
        returns = torch.tensor(returns)
        losses = [-log_prob * (ret - value.item()) + F.smooth_l1_loss(value, torch.tensor([ret]))
                  for (log_prob, value), ret in zip(model.saved_actions, returns)]
        optimizer.zero_grad()
        loss = torch.stack(losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:], model.saved_actions[:]
        return loss.item()

    torch.manual_seed(0)
    env = compiler_gym.make("llvm-v0", reward_space="IrInstructionCountOz", benchmark=BENCHMARK)
    env = ConstrainedCommandline(env, flags=FLAGS)
    env = TimeLimit(env, max_episode_steps=episode_len)
    env = HistoryObservation(env)
    with env:
        assert env.action_space.n == len(FLAGS)
        model = Policy()
        optimizer = optim.Adam(model.parameters(), lr=0.01)
        for _ in range(episodes):
            state = env.reset()
            assert state.shape == (episode_len - 1, len(FLAGS))
            steps = 0
            while True:
                action = select_action(model, state)
                state, reward, done, _ = env.step(action)
                model.rewards.append(reward)
                steps += 1
                if done:
                    break
            assert steps == episode_len                    # TimeLimit ends the episode
            assert env.actions == [FLAGS.index(f) for f in env.commandline().split()[1:-3]]
            assert np.isfinite(finish_episode(model, optimizer))


def test_greedy_autotuner():
    def greedy(env, search_time_seconds: int) -> None:
        import time

        def eval_action(env, action: int):
            with env.fork() as fkd:
                return (fkd.step(action)[1], action)

        end_time = time.time() + search_time_seconds
        while time.time() < end_time:
            best = max(eval_action(env, action) for action in range(env.action_space.n))
            if best[0] <= 0 or env.step(best[1])[2]:
                return

    with compiler_gym.make("llvm-v0", benchmark="benchmark://examples-v0/sum_array",
                           reward_space="IrInstructionCount") as env:
        env.reset()
        env = ConstrainedCommandline(env, flags=["-mem2reg", "-sroa", "-instcombine", "-simplifycfg", "-dce"])
        greedy(env, search_time_seconds=30)
        assert env.episode_reward > 0
        assert env.episode_reward == env.observation["IrInstructionCountO0"] - env.observation["IrInstructionCount"]
        assert env.validate().okay()
