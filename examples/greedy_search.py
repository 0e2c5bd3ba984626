"""Greedy search with forks: at each step try every action on a fork and keep the best, in CompilerGym's idiom.

    python examples/greedy_search.py PROGRAM.c [--steps 10]
"""
import argparse

import behavioral_pq.env.compiler_gym as compiler_gym   # was: import compiler_gym


def greedy_search(benchmark: str, steps: int, actions=None):
    env = compiler_gym.make("llvm-v0", benchmark=benchmark, reward_space="IrInstructionCount")
    env.reset()
    candidates = actions if actions is not None else range(env.action_space.n)
    for _ in range(steps):
        best, best_reward = None, 0.0
        for action in candidates:
            fork = env.fork()
            _, reward, done, _ = fork.step(action)
            if not done and reward > best_reward:
                best, best_reward = action, reward
        if best is None:            # no action lowers the instruction count any more
            break
        env.step(best)
    count = env.observation["IrInstructionCount"]
    oz = env.observation["IrInstructionCountOz"]
    env.close()
    return count, oz, env.actions


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    count, oz, actions = greedy_search(args.benchmark, args.steps)
    print(f"{count} IR instructions after {len(actions)} greedy steps (-Oz: {oz})")
