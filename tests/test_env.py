"""The llvm-v0 environment: CompilerGym's idioms run unchanged but for the import, episodes replay exactly."""

import json
import subprocess
import sys
import textwrap

import gymnasium
import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
import behavioral_pq.env.compiler_gym as compiler_gym
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.env import OBSERVATION_SPACES, EnvState, StoreBenchmarks, make
from behavioral_pq.errors import PassCrashError

PROGRAM = str(EXAMPLES / "matmul.c")


def test_a_random_walk_written_for_compiler_gym():
    env = compiler_gym.make("llvm-v0", benchmark=PROGRAM, observation_space="Autophase",
                            reward_space="IrInstructionCountOz")
    env.action_space.seed(0)
    observation = env.reset()
    assert observation.shape == (56,)
    total = 0.0
    for _ in range(8):
        observation, reward, done, info = env.step(env.action_space.sample())
        total += reward
        if done:
            break
    assert observation.dtype == np.int64 and isinstance(info, dict)
    oz = env.observation["IrInstructionCountOz"]
    ic0 = env.observation["IrInstructionCountO0"]
    # the Oz-normalized rewards add up to the reduction so far, in units of -Oz's reduction
    assert total == pytest.approx((ic0 - env.observation["IrInstructionCount"]) / (ic0 - oz))
    env.close()


def test_multistep_with_lists_of_spaces():
    env = compiler_gym.make("llvm-v0", benchmark=PROGRAM)
    env.reset()
    flags = env.action_space.flags
    assert flags == [p.flag for p in PASSES] and env.action_space.names == flags
    actions = [flags.index("-mem2reg"), flags.index("-instcombine"), flags.index("-simplifycfg")]
    observations, rewards, done, info = env.multistep(
        actions, observation_spaces=["IrInstructionCount", "Autophase"],
        reward_spaces=["IrInstructionCount", "IrInstructionCountNorm"])
    count, features = observations
    assert count == features[bpq.AUTOPHASE_FEATURES.index("TotalInsts")] and not done
    ic0 = env.observation["IrInstructionCountO0"]
    assert rewards[0] == ic0 - count and rewards[1] == pytest.approx((ic0 - count) / ic0)
    assert env.actions == actions
    assert env.commandline() == "opt -mem2reg -instcombine -simplifycfg input.bc -o output.bc"


def test_a_fork_based_greedy_search():
    env = make("llvm-v0", benchmark=PROGRAM, reward_space="IrInstructionCount")
    env.reset()
    candidates = [PASSES.index(p) for p in PASSES if p.flag in ("-sroa", "-gvn", "-instcombine", "-dce")]
    for _ in range(3):
        best, gain = None, 0.0
        for action in candidates:
            child = env.fork()
            _, reward, terminated, _, _ = child.step(action)
            if not terminated and reward > gain:
                best, gain = action, reward
        if best is None:
            break
        before = env.observation["IrInstructionCount"]
        env.step(best)
        assert env.observation["IrInstructionCount"] == before - gain
    assert env.observation["IrInstructionCount"] < env.observation["IrInstructionCountO0"]
    assert env.validate()


def test_episodes_replay_in_a_new_process():
    script = textwrap.dedent(f"""\
        import json
        from behavioral_pq.env import make
        env = make("llvm-v0", benchmark={PROGRAM!r}, observation_space="Autophase", reward_space="IrInstructionCountOz")
        env.reset()
        out = []
        for action in (5, 111, 60, 27, 90, 33):
            obs, reward, terminated, truncated, info = env.step(action)
            out.append([obs.tolist(), reward, terminated])
        print(json.dumps(out))
        """)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                           check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and len(json.loads(runs[0])) == 6


def test_validate_catches_a_tampered_state():
    env = make("llvm-v0", benchmark=PROGRAM, reward_space="IrInstructionCountOz")
    env.reset()
    for action in (111, 60, 27):
        env.step(action)
    state = env.state
    assert env.validate(state)
    restored = EnvState.from_json(json.loads(json.dumps(state.to_json())))
    assert restored.actions == state.actions and env.validate(restored)
    for bad in (1.7, "5", True, 124):          # a saved state's actions are read as env.step reads them
        with pytest.raises((TypeError, ValueError), match="an action is an integer|not in 0..123"):
            EnvState.from_json(dict(state.to_json(), actions=[111, bad]))
    with pytest.raises(ValueError, match="another module"):
        env.validate(EnvState(state.benchmark, state.actions[:-1], state.reward, state.walltime))
    with pytest.raises(ValueError, match="reward"):
        env.validate(EnvState(state.benchmark, state.actions, state.reward + 1.0, state.walltime))


class CrashingEngine:
    """An engine whose next pipeline aborts LLVM (as a pass on a hostile module would)."""

    def __init__(self, engine):
        self.engine, self.crash = engine, False

    def run_pipeline(self, bitcode, pipeline, name="module"):
        if self.crash:
            self.crash = False
            raise PassCrashError(f"{name}: LLVM crashed", module=name, pipeline=pipeline)
        return self.engine.run_pipeline(bitcode, pipeline, name=name)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_a_crashing_pass_ends_the_episode_not_the_environment(engine):
    crashing = CrashingEngine(engine)
    env = make("llvm-v0", benchmark=PROGRAM, reward_space="IrInstructionCount", engine=crashing)
    env.reset()
    crashing.crash = True
    _, reward, terminated, truncated, info = env.step(3)
    assert terminated and not truncated and reward == 0.0 and "PassCrashError" in info["error"]
    env.reset()
    _, reward, terminated, _, _ = env.step(PASSES.index(next(p for p in PASSES if p.flag == "-sroa")))
    assert not terminated and reward > 0


def test_observations_benchmarks_and_registration():
    env = make("llvm-v0", benchmark="generator://llvm-stress-v0/7")
    env.reset()
    assert env.observation["IrInstructionCount"] > 0 and "define" in env.observation["Ir"]
    assert env.observation["Bitcode"][:2] == b"BC"
    assert env.observation["InstCount"].shape == (len(bpq.core.features.INSTCOUNT_FEATURES),)
    assert env.observation["ObjectTextSizeBytes"] > 0
    env.reset(benchmark=PROGRAM)
    encoder = bpq.load_encoder()
    p, m = encoder.probe_set.num_probes, encoder.quantizer.num_subspaces
    assert env.observation["Spectrum"].shape == (p, 56) and env.observation["Embedding"].shape == (encoder.dim,)
    assert env.observation["Codes"].shape == (encoder.model.config.num_probes, m)   # + the module row
    np.testing.assert_array_equal(env.observation["Codes"], encoder.spectra_codes(
        env.observation["Spectrum"][None], env.observation["Autophase"][None])[0])
    np.testing.assert_array_equal(env.observation["Embedding"], bpq.embed(PROGRAM))
    assert set(env.observation.keys()) == set(OBSERVATION_SPACES)
    gym_env = gymnasium.make("bpq/llvm-v0", benchmark=PROGRAM, observation_space="IrInstructionCount",
                             disable_env_checker=True)
    observation, _ = gym_env.reset()
    assert observation == bpq.load_module(PROGRAM).instruction_count
    with pytest.raises(ValueError, match="unknown observation space"):
        make("llvm-v0", observation_space="Autophse")
    with pytest.raises(ValueError, match="unknown reward space"):
        make("llvm-v0", reward_space="Runtime")
    with pytest.raises(RuntimeError, match="reset"):
        make("llvm-v0", benchmark=PROGRAM).step(0)
    with pytest.raises(ValueError, match="not in 0..123"):
        env.step(124)


def test_benchmarks_from_a_corpus_store_by_split(tmp_path):
    from behavioral_pq.corpus import Corpus, build_corpus, discover, split_corpus

    store = tmp_path / "store"
    build_corpus(discover([EXAMPLES], origin="examples"), store, workers=1, labels=False)
    split_corpus(store, seed=0, fractions=(0.5, 0.25, 0.25))
    bench = StoreBenchmarks(store)
    everything = bench.uris()
    assert len(everything) == 4 and all(u.startswith(f"benchmark://{store.resolve()}/") for u in everything)
    train = bench.uris("train")
    assert train and set(train) <= set(everything)
    assert len(train) == len([s for s in Corpus(store).store.splits().values() if s == "train"])
    assert bench.sample(2, split="train", seed=1) == bench.sample(2, split="train", seed=1)
    env = make("llvm-v0", benchmark=train[0], reward_space="IrInstructionCount")
    _, info = env.reset()
    assert info["benchmark"] == train[0]
    env.step(PASSES.index(next(p for p in PASSES if p.flag == "-sroa")))
    assert env.validate()
    with pytest.raises(ValueError, match="no such module"):
        env.reset(benchmark=f"benchmark://{store.resolve()}/{'0' * 64}")


def test_runtime_of_a_program_with_main(tmp_path):
    program = tmp_path / "loop.c"
    program.write_text("int main(void) { volatile long s = 0; for (long i = 0; i < 20000000; i++) s += i; "
                       "return (int)(s & 1); }\n")
    env = make("llvm-v0", benchmark=program)
    env.reset()
    before = env.observation["Runtime"]
    assert before.shape == (5,) and (before > 0).all()
    env.step(PASSES.index(next(p for p in PASSES if p.flag == "-mem2reg")))
    assert env.observation["Runtime"].shape == (5,)
    env.reset(benchmark=b"define i32 @f(i32 %x) {\n  ret i32 %x\n}\n")
    with pytest.raises(ValueError, match="no main"):
        env.observation["Runtime"]


def test_leaderboard_on_a_small_store(tmp_path):
    from behavioral_pq.corpus import build_corpus, discover, split_corpus
    from behavioral_pq.reports.leaderboard import METHODS, leaderboard

    store = tmp_path / "store"
    build_corpus(discover([EXAMPLES], origin="examples"), store, workers=1, labels=False)
    split_corpus(store, seed=0, fractions=(0.0, 0.0, 1.0))
    report = leaderboard(store, tmp_path / "out", programs=2, seconds=0.5, budget=2)
    assert report["programs"] == 2 and not report["failed"]
    everything = report["slices"]["all"]
    for method in METHODS:
        assert everything[method]["geomean_oz_over_ic"] >= 1.0     # -Oz is always available to every method
    text = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "| all | 2 |" in text and "recommend_pipeline" in text
    rows = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["rows"]
    assert all(r["counts"]["random-search"] <= r["oz"] for r in rows)
    for r in rows:                                                # the budget, and the wall time, bound the two runs
        assert r["compilations"]["recommend_pipeline"] <= 2
        assert r["seconds"]["recommend_pipeline (same time)"] < 0.5 + 10   # one last batch may finish late


def test_gymnasium_make_takes_the_arguments_make_takes():
    """gymnasium.make with a reward space and no observation space (as make() allows)."""
    env = gymnasium.make("bpq/llvm-v0", benchmark=PROGRAM, reward_space="IrInstructionCountOz")
    observation, info = env.reset()
    assert observation is None and info["benchmark"].endswith("matmul.c")
    observation, reward, terminated, truncated, _ = env.step(env.unwrapped.action_space.flags.index("-sroa"))
    direct = make("llvm-v0", benchmark=PROGRAM, reward_space="IrInstructionCountOz")
    direct.reset()
    assert observation is None and reward > 0
    assert reward == direct.step(direct.action_space.flags.index("-sroa"))[1]
    env.close()
    direct.close()


def test_actions_that_are_not_integers_are_refused_not_converted():
    env = make("llvm-v0", benchmark=PROGRAM)
    env.reset()
    for action in (1.7, "5", True, np.float64(2.0), np.bool_(False), None):
        with pytest.raises(TypeError, match="an action is an integer in 0..123"):
            env.step(action)
    with pytest.raises(TypeError, match="not str '5'"):
        env.multistep([2, "5"])
    assert env.actions == []                                    # a refused list applies none of its actions
    env.step(np.int64(5))
    env.multistep([np.uint8(3), 7])
    assert env.actions == [5, 3, 7] and all(type(a) is int for a in env.actions)
    gym_env = compiler_gym.make("llvm-v0", benchmark=PROGRAM)
    gym_env.reset()
    with pytest.raises(TypeError, match="not float 1.7"):
        gym_env.step(1.7)
    gym_env.step(np.int32(5))
    assert gym_env.actions == [5]
    env.close()
    gym_env.close()
