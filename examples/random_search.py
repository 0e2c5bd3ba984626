"""Random search over pass sequences, in CompilerGym's idiom: only the import differs.

    python examples/random_search.py PROGRAM.c [--episodes 20] [--steps 30]
"""
import argparse

import behavioral_pq.env.compiler_gym as compiler_gym   # was: import compiler_gym


def random_search(benchmark: str, episodes: int, steps: int, seed: int = 0):
    env = compiler_gym.make("llvm-v0", benchmark=benchmark, reward_space="IrInstructionCountOz")
    env.action_space.seed(seed)
    best_reward, best_actions = float("-inf"), []
    for _ in range(episodes):
        env.reset()
        total = 0.0
        for _ in range(steps):
            _, reward, done, _ = env.step(env.action_space.sample())
            total += reward
            if done:
                break
        if total > best_reward:
            best_reward, best_actions = total, env.actions
    env.close()
    return best_reward, best_actions


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    reward, actions = random_search(args.benchmark, args.episodes, args.steps)
    print(f"best reward {reward:.3f} (1.0 = as good as -Oz): {len(actions)} actions")
