"""One side of bench/env/env_step.py, run in its own process (pinned by the caller): times ``reset`` and ``step``
of one environment on one bitcode file. Runs under CompilerGym 0.2.5's venv (``--side compiler_gym``) or this
package's (``shim``, ``core``, ``core-bytes``). Reads a JSON request on stdin, prints a JSON reply on stdout.

Request: {"side", "bitcode" (path), "actions" (ints), "resets" (int)}. Reply: {"reset_s": [...], "start_s": [...]
(reset + first step), "step_s": [...], "instructions" (at reset), "errors" (steps that ended an episode)}.

Each step is ``env.step(action)`` of an environment made with observation_space="Autophase" and
reward_space="IrInstructionCount" (the observation and the reward come back with the step). A step that ends the
episode (an LLVM error) is not timed; the episode restarts.
"""

import json
import sys
import time


def _compiler_gym(bitcode: bytes):
    import compiler_gym
    from compiler_gym.datasets import Benchmark

    benchmark = Benchmark.from_file_contents("benchmark://file-v0/bench", bitcode)
    env = compiler_gym.make("llvm-v0", benchmark=benchmark, observation_space="Autophase",
                            reward_space="IrInstructionCount")

    def step(action):
        _, _, done, _ = env.step(action)
        return done

    return env, env.reset, step, lambda: int(env.observation["IrInstructionCount"])


def _ours(side: str, path: str):
    import behavioral_pq as bpq

    module = path   # each reset loads the file, as CompilerGym's sends the bitcode
    if side == "shim":
        import behavioral_pq.env.compiler_gym as compiler_gym

        env = compiler_gym.make("llvm-v0", benchmark=module, observation_space="Autophase",
                                reward_space="IrInstructionCount")

        def step(action):
            return env.step(action)[2]
    else:
        from behavioral_pq.env import make

        engine = inner = bpq.Engine(workers=1)
        if side == "core-bytes":     # not an Engine: bitcode in and out of the worker at every step (old path)
            class ByteEngine:
                def run_pipeline(self, bitcode, pipeline, name="module"):
                    return inner.run_pipeline(bitcode, pipeline, name=name)

                def __getattr__(self, name):
                    return getattr(inner, name)

            engine = ByteEngine()
        env = make("llvm-v0", benchmark=module, observation_space="Autophase", reward_space="IrInstructionCount",
                   engine=engine)

        def step(action):
            return env.step(action)[2]

    return env, env.reset, step, lambda: int(env.observation["IrInstructionCount"])


def main() -> None:
    request = json.loads(sys.stdin.read())
    side = request["side"]
    if side == "compiler_gym":
        with open(request["bitcode"], "rb") as f:
            env, reset, step, count = _compiler_gym(f.read())
    else:
        env, reset, step, count = _ours(side, request["bitcode"])
    reset()   # the first reset and step start services and workers: not timed
    instructions = count()
    step(request["actions"][0])
    reset()
    reset_s, start_s = [], []
    for _ in range(request["resets"]):
        start = time.perf_counter()
        reset()
        reset_s.append(time.perf_counter() - start)
        step(request["actions"][0])   # an episode's start: reset and its first step (a live module opens there)
        start_s.append(time.perf_counter() - start)
        reset()
    step_s, errors = [], 0
    for action in request["actions"]:
        start = time.perf_counter()
        done = step(action)
        elapsed = time.perf_counter() - start
        if done:
            errors += 1
            reset()
        else:
            step_s.append(elapsed)
    env.close()
    json.dump({"reset_s": reset_s, "start_s": start_s, "step_s": step_s, "instructions": instructions,
               "errors": errors}, sys.stdout)


if __name__ == "__main__":
    main()
