"""The environment's live module: a step runs one pass on the module kept in the session worker, with the same
results as the pass sequence applied from scratch, no bitcode sent, and crashes and hangs contained as before."""

import gc
import hashlib
import random
import re

import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
import behavioral_pq.env.llvm as env_llvm
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.engine import Engine, LiveSession
from behavioral_pq.core.features import INSTCOUNT_FEATURES
from behavioral_pq.env import make
from behavioral_pq.errors import InvalidIRError, PassCrashError, PipelineError

# LLVM 19 aborts (report_fatal_error "LICM requires MemorySSA") on the first loop it meets: see test_engine.py.
ABORTING = "function(sroa),licm"
SLOW = ",".join(["default<O3>"] * 40)
SROA = next(i for i, p in enumerate(PASSES) if p.flag == "-sroa")
TOTAL_INSTS = 51   # AUTOPHASE_FEATURES.index("TotalInsts")


def replace_pipeline(monkeypatch, action, pipeline):
    """Make the environment run ``pipeline`` for ``action``."""
    pipelines = list(env_llvm.ACTION_PIPELINES)
    pipelines[action] = pipeline
    monkeypatch.setattr(env_llvm, "ACTION_PIPELINES", tuple(pipelines))


class ByteEngine:
    """Not an Engine: the environment sends bitcode in and out at every step (the path before live modules)."""

    def __init__(self, engine):
        self.engine = engine

    def run_pipeline(self, bitcode, pipeline, name="module"):
        return self.engine.run_pipeline(bitcode, pipeline, name=name)

    def __getattr__(self, name):
        return getattr(self.engine, name)


@pytest.mark.parametrize("program,seed", [("matmul", 0), ("list_sort", 1), ("sum_array", 2)])
def test_live_steps_equal_the_prefix_optimized_from_scratch(engine, program, seed):
    rng = random.Random(seed)
    actions = [rng.randrange(len(PASSES)) for _ in range(25)]
    path = str(EXAMPLES / f"{program}.c")
    live = make("llvm-v0", benchmark=path, observation_space="Autophase", reward_space="IrInstructionCount",
                engine=engine)
    byte = make("llvm-v0", benchmark=path, observation_space="Autophase", reward_space="IrInstructionCount",
                engine=ByteEngine(engine))
    live.reset(), byte.reset()
    assert live._live and not byte._live
    initial = live.initial_module
    for i, action in enumerate(actions):
        observation, reward, terminated, _, _ = live.step(action)
        old_observation, old_reward, old_terminated, _, _ = byte.step(action)
        expected = bpq.optimize(initial, [PASSES[a].flag for a in actions[:i + 1]], engine=engine)
        assert not terminated and not old_terminated
        np.testing.assert_array_equal(observation, bpq.autophase(expected))
        np.testing.assert_array_equal(live.observation["InstCount"], bpq.instcount(expected))
        assert live.observation["IrInstructionCount"] == expected.instruction_count
        # the bitcode path gives the same numbers (its bitcode differs only in value-name suffixes, which a
        # module parsed afresh at every step numbers anew)
        np.testing.assert_array_equal(observation, old_observation)
        np.testing.assert_array_equal(live.observation["InstCount"], byte.observation["InstCount"])
        assert reward == old_reward
    assert live.observation["Bitcode"] == expected.bitcode
    assert live.state.reward == byte.state.reward
    assert live.validate()


def _ir_digest(text: str) -> bytes:
    """The IR's digest without the blocks' "; preds = ..." comments: they list the use-list order, which a module
    written as bitcode without it (the Ir observation) does not keep."""
    return hashlib.sha256(re.sub(r" *; preds = [^\n]*", "", text).encode()).digest()


def test_live_episodes_equal_their_pass_chains_run_afresh():
    """Many random episodes: at every step, the live module's Autophase is that of the chain of the episode's
    passes applied to a fresh copy of the benchmark, each pass with fresh analyses (as Engine.autophase_tree runs a
    chain), and the episode's final module is that chain's (the same IR)."""
    with Engine(workers=1, timeout=60) as engine:
        for program in ("matmul", "list_sort", "state_machine", "sum_array"):
            env = make("llvm-v0", benchmark=str(EXAMPLES / f"{program}.c"), observation_space="Autophase",
                       reward_space="IrInstructionCount", engine=engine)
            for seed in range(6):
                rng = random.Random(seed)
                actions = [rng.randrange(len(PASSES)) for _ in range(30)]
                env.reset()
                steps = [env.step(action) for action in actions]
                assert not any(terminated for _, _, terminated, _, _ in steps)
                features, kept, errors = engine.autophase_tree(
                    [env.initial_module.bitcode], [-1] + list(range(len(actions) - 1)),
                    [env_llvm.ACTION_PIPELINES[a] for a in actions], keep=[False] * (len(actions) - 1) + [True])
                assert not any(errors)
                np.testing.assert_array_equal(np.stack([observation for observation, *_ in steps]), features)
                assert sum(reward for _, reward, *_ in steps) == \
                    env.initial_module.instruction_count - features[-1, TOTAL_INSTS]
                live, chain = env.observation["Ir"], env_llvm.ir_text(bpq.Module(kept[len(actions) - 1]))
                assert _ir_digest(live) == _ir_digest(chain)


def test_a_pass_that_changes_the_module_without_reporting_it_still_moves_the_state(engine):
    # LLVM 19's IPSCCP replaces sum_array's argument by a constant and reports every analysis preserved
    ipsccp = next(i for i, p in enumerate(PASSES) if p.flag == "-ipconstprop")
    env = make("llvm-v0", benchmark=str(EXAMPLES / "sum_array.c"), observation_space="Autophase",
               reward_space="IrInstructionCount", engine=engine)
    env.reset()
    observation, _, terminated, _, info = env.step(ipsccp)
    expected = bpq.optimize(env.initial_module, "-ipconstprop", engine=engine)
    assert expected.bitcode != env.initial_module.bitcode and info["action_had_no_effect"] and not terminated
    np.testing.assert_array_equal(observation, bpq.autophase(expected))
    assert env.observation["Bitcode"] == expected.bitcode


def test_values_from_bitcode_serve_again_after_a_step_that_changed_nothing(engine, monkeypatch):
    sizes = []
    monkeypatch.setitem(env_llvm._OBSERVERS, "ObjectTextSizeBytes", lambda env, m: sizes.append(m.sha256) or 7)
    barrier = next(i for i, p in enumerate(PASSES) if p.flag == "-barrier")   # no-op-module
    env = make("llvm-v0", benchmark=str(EXAMPLES / "matmul.c"), reward_space="ObjectTextSizeBytes", engine=engine)
    env.reset()
    env.step(barrier)        # from the initial module (its values kept by hash)
    env.step(SROA)
    env.step(barrier)        # from a live state
    env.step(barrier)
    assert len(sizes) == 2 and sizes[0] == env.initial_module.sha256


def test_a_step_sends_no_bitcode_unless_asked(engine, monkeypatch):
    fetched = []
    original = LiveSession.bitcode
    monkeypatch.setattr(LiveSession, "bitcode", lambda self: fetched.append(1) or original(self))
    env = make("llvm-v0", benchmark=str(EXAMPLES / "matmul.c"), observation_space="Autophase",
               reward_space="IrInstructionCountNorm", engine=engine)
    env.reset()
    for action in (SROA, 5, 60, 27, 90):
        env.step(action)
    env.observation["InstCount"]
    child = env.fork()
    child.step(SROA)
    assert fetched == []
    ir = env.observation["Ir"]
    assert fetched == [1] and "define" in ir
    assert env.observation["Bitcode"] == bpq.optimize(env.initial_module, [PASSES[a].flag for a in env.actions],
                                                      engine=engine).bitcode
    assert fetched == [1]   # fetched once per state


def test_action_had_no_effect_comes_from_the_live_module(engine):
    env = make("llvm-v0", benchmark=str(EXAMPLES / "matmul.c"), engine=engine)
    env.reset()
    coro_cleanup = next(i for i, p in enumerate(PASSES) if p.flag == "-coro-cleanup")
    assert env.step(coro_cleanup)[4]["action_had_no_effect"]
    assert not env.step(SROA)[4]["action_had_no_effect"]
    assert env.step(SROA)[4]["action_had_no_effect"]


def test_forks_are_independent_and_continue_as_their_parent(engine):
    env = make("llvm-v0", benchmark=str(EXAMPLES / "list_sort.c"), observation_space="Autophase", engine=engine)
    env.reset()
    for action in (SROA, 60, 27):
        env.step(action)
    child = env.fork()
    gvn = next(i for i, p in enumerate(PASSES) if p.flag == "-gvn")
    child_obs = child.step(gvn)[0]
    parent_obs = env.observation["Autophase"]
    expected = bpq.optimize(env.initial_module, [PASSES[a].flag for a in (SROA, 60, 27)], engine=engine)
    np.testing.assert_array_equal(parent_obs, bpq.autophase(expected))
    np.testing.assert_array_equal(child_obs, bpq.autophase(bpq.optimize(expected, "-gvn", engine=engine)))
    assert env.actions == [SROA, 60, 27] and child.actions == [SROA, 60, 27, gvn]


def test_in_process_engine_runs_live_sessions_too():
    with Engine(workers=0) as engine:
        env = make("llvm-v0", benchmark=str(EXAMPLES / "sum_array.c"), reward_space="IrInstructionCount",
                   engine=engine)
        env.reset()
        reward = env.step(SROA)[1]
        expected = bpq.optimize(env.initial_module, "-sroa", engine=engine)
        assert reward == env.initial_module.instruction_count - expected.instruction_count > 0
        assert env.observation["Bitcode"] == expected.bitcode


def test_a_crash_in_the_live_worker_ends_the_episode_and_other_episodes_replay(monkeypatch):
    crash_on = SROA
    replace_pipeline(monkeypatch, crash_on, ABORTING)
    with Engine(workers=1) as engine:
        env = make("llvm-v0", benchmark=str(EXAMPLES / "sum_array.c"), observation_space="Autophase",
                   reward_space="IrInstructionCount", engine=engine)
        env.reset()
        mem2reg = next(i for i, p in enumerate(PASSES) if p.flag == "-mem2reg")
        env.step(mem2reg)
        other = env.fork()          # its module lives in the same worker, which is about to die
        _, reward, terminated, truncated, info = env.step(crash_on)
        assert terminated and not truncated and reward == 0.0
        assert "PassCrashError" in info["error"] and "LICM requires MemorySSA" in info["error"]
        assert engine.restarts == 1 and env.actions == [mem2reg]
        # the fork lost its live module with the worker: it is replayed, and goes on as if nothing happened
        licm = next(i for i, p in enumerate(PASSES) if p.flag == "-licm")
        observation, _, terminated, _, _ = other.step(licm)
        expected = bpq.optimize(env.initial_module, ["-mem2reg", "-licm"], engine=engine)
        assert not terminated
        np.testing.assert_array_equal(observation, bpq.autophase(expected))
        assert other.observation["Bitcode"] == expected.bitcode
        # the crashed episode's environment resets and works
        env.reset()
        _, reward, terminated, _, _ = env.step(mem2reg)
        assert not terminated and reward > 0


def test_a_hanging_pass_in_the_live_worker_times_out(tmp_path, monkeypatch):
    lines = [f"int f{i}(int x) {{ int a = x * {i + 1} + 7; int b = a ^ (x >> 3); int c = b - a * 5; "
             f"return {f'f{i - 1}(x + {i}) * 3' if i else 'x'} + c; }}" for i in range(300)]
    source = tmp_path / "big.c"
    source.write_text("\n".join(lines) + "\n")
    replace_pipeline(monkeypatch, SROA, SLOW)
    with Engine(workers=1, timeout=1.0) as engine:
        env = make("llvm-v0", benchmark=str(source), reward_space="IrInstructionCount", engine=engine)
        env.reset()
        _, reward, terminated, _, info = env.step(SROA)
        assert terminated and reward == 0.0 and "PassTimeoutError" in info["error"]
        mem2reg = next(i for i, p in enumerate(PASSES) if p.flag == "-mem2reg")
        _, reward, terminated, _, _ = env.step(mem2reg)   # the state before the hanging pass, replayed
        assert not terminated and reward > 0 and env.actions == [mem2reg]


def test_live_session_errors_are_typed():
    with Engine(workers=1, timeout=60) as engine:
        session = engine.open_session(bpq.load_module(EXAMPLES / "sum_array.c").bitcode, "sum_array")
        with pytest.raises(PassCrashError):
            session.apply(ABORTING)
        assert session.apply("function(sroa)").changed          # replayed into a new worker
        with pytest.raises(PipelineError):
            session.apply("no-such-pass")
        assert session.pipelines == ["function(sroa)"]


def test_a_step_the_worker_cannot_run_is_refused_and_the_worker_lives_on():
    with Engine(workers=1, timeout=60) as engine:
        session = engine.open_session(bpq.load_module(EXAMPLES / "sum_array.c").bitcode, "sum_array")
        assert session.apply("function(sroa)", autophase=True).autophase is not None
        worker = engine._session_worker
        with pytest.raises(InvalidIRError, match="no live session 999"):   # answered by the native step server
            engine._session_call(("apply", 999, "function(sroa)", (True, False)), "sum_array")
        assert engine._session_worker is worker and engine.restarts == 0
        result = session.observe(autophase=True, instcount=True)
        expected = bpq.optimize(bpq.load_module(EXAMPLES / "sum_array.c"), "-sroa", engine=engine)
        np.testing.assert_array_equal(result.autophase, bpq.autophase(expected))
        np.testing.assert_array_equal(result.instcount, bpq.instcount(expected))
        assert result.instruction_count == expected.instruction_count


def test_reset_reuses_an_unchanged_benchmark_file_and_reloads_a_changed_one(engine, tmp_path, monkeypatch):
    loads = []
    original = env_llvm.load_benchmark
    monkeypatch.setattr(env_llvm, "load_benchmark", lambda b, e: loads.append(str(b)) or original(b, e))
    path = tmp_path / "prog.c"
    path.write_text("int f(int x) { return x + 1; }\n")
    env = make("llvm-v0", benchmark=str(path), engine=engine)
    env.reset()
    first = env.initial_module
    env.step(SROA)
    env.reset()
    assert len(loads) == 1 and env.initial_module is first and env.actions == []
    path.write_text("int f(int x) { int y = x * 3; return y + 1; }\n")
    env.reset()
    assert len(loads) == 2 and env.initial_module.instruction_count > first.instruction_count


def test_an_episode_continued_in_a_fork_validates(engine):
    # seed 0 on matmul: the fork's later passes name new values with other suffixes than a replay from scratch
    rng = random.Random(0)
    actions = [rng.randrange(len(PASSES)) for _ in range(30)]
    env = make("llvm-v0", benchmark=str(EXAMPLES / "matmul.c"), reward_space="IrInstructionCount", engine=engine)
    env.reset()
    for action in actions[:8]:
        env.step(action)
    fork = env.fork()
    for action in actions[8:]:
        fork.step(action)
    assert fork.validate()
    replayed = bpq.optimize(env.initial_module, [PASSES[a].flag for a in actions], engine=engine)
    assert fork.observation["Bitcode"] != replayed.bitcode       # only value names differ
    assert env_llvm._same_module(fork._module, replayed, engine)
    assert not env_llvm._same_module(fork._module, bpq.optimize(replayed, "-instcombine", engine=engine), engine)


def test_closed_and_collected_episodes_free_their_live_modules():
    # in-process sessions can be counted; a worker runs the same Sessions code and gets the same close requests
    with Engine(workers=0) as engine:
        env = make("llvm-v0", benchmark=str(EXAMPLES / "sum_array.c"), engine=engine)
        env.reset()
        env.step(SROA)
        forks = [env.fork() for _ in range(3)]
        for fork in forks:
            fork.step(SROA)
        assert len(engine._in_process_sessions.modules) == 4
        del forks, fork
        gc.collect()       # an environment is in reference cycles (its observation view)
        env.reset()        # the episode's own session is closed too
        env.step(SROA)     # the next request frees what was dropped
        assert len(engine._in_process_sessions.modules) == 1


def test_a_compiler_gym_step_sends_no_bitcode_unless_asked(monkeypatch):
    import behavioral_pq.env.compiler_gym as compiler_gym

    fetched = []
    original = LiveSession.bitcode
    monkeypatch.setattr(LiveSession, "bitcode", lambda self: fetched.append(1) or original(self))
    env = compiler_gym.make("llvm-v0", benchmark=str(EXAMPLES / "matmul.c"), observation_space="InstCountNorm",
                            reward_space="IrInstructionCountOz")
    env.reset()
    for action in (SROA, 5, 60, 27, 90):
        observation, reward, done, info = env.step(action)
        assert not done and observation.shape == (len(INSTCOUNT_FEATURES) - 1,)
    env.observation["AutophaseDict"]
    env.fork().step(SROA)
    assert fetched == []
    assert env.ir_sha1 and fetched == [1]
