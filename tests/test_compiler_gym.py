"""The CompilerGym 0.2.5 shim behaves as CompilerGym's ``LlvmEnv``: setters reach the environment, actions are
named by their flags, views, state, forks, env ids, observation spaces, wrappers and local datasets."""

import copy
import hashlib

import gymnasium
import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq.env.compiler_gym as compiler_gym
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.features import AUTOPHASE_FEATURES, INSTCOUNT_FEATURES
from behavioral_pq.env.compiler_gym import wrappers
from behavioral_pq.errors import BPQError, UnknownBenchmarkError, UnsupportedSpaceError

MATMUL = "benchmark://examples-v0/matmul"
SUM_ARRAY = "benchmark://examples-v0/sum_array"
NO_MAIN = b"define i32 @f(i32 %x) {\n  %y = add i32 %x, 0\n  ret i32 %y\n}\n"


def flag(name):
    return [p.flag for p in PASSES].index(name)


@pytest.fixture
def env():
    with compiler_gym.make("llvm-v0", benchmark=MATMUL) as e:
        yield e


def test_attribute_setters_reach_the_environment(env):
    assert env.reset() is None and env.observation_space is None and env.reward_space is None
    env.observation_space = "Autophase"
    env.reward_space = "IrInstructionCount"
    observation = env.reset()
    assert observation.shape == (56,) and observation.dtype == np.int64
    assert env.observation_space.shape == (56,) and env.observation_space_spec.id == "Autophase"
    before = env.observation["IrInstructionCount"]
    observation, reward, done, info = env.step(flag("-mem2reg"))
    assert not done and reward == before - env.observation["IrInstructionCount"] > 0
    assert env.episode_reward == reward
    np.testing.assert_array_equal(observation, env.observation["Autophase"])
    # a new benchmark takes effect at the next reset, with CompilerGym's warning
    with pytest.warns(UserWarning, match="Changing the benchmark has no effect until reset"):
        env.benchmark = SUM_ARRAY
    assert env.benchmark == MATMUL
    env.reset()
    assert env.benchmark == SUM_ARRAY and str(env.benchmark) == SUM_ARRAY and env.actions == []
    # reset(observation_space=, reward_space=) set them; None turns them off
    observation = env.reset(observation_space="InstCount", reward_space=None)
    assert observation.shape == (len(INSTCOUNT_FEATURES),) and env.reward_space is None
    _, reward, _, _ = env.step(flag("-mem2reg"))
    assert reward is None and env.episode_reward is None
    env.runtime_observation_count = 3
    assert env.runtime_observation_count == 3
    with pytest.raises(ValueError, match="must be >= 1"):
        env.runtime_observation_count = 0
    with pytest.raises(LookupError, match="Reward space not found: IrInstructionCountOs"):
        env.reward_space = "IrInstructionCountOs"


def test_actions_are_named_by_their_flags(env):
    space = env.action_space
    assert space.names == space.flags == [p.flag for p in PASSES] and space.n == 124
    assert space["-mem2reg"] == flag("-mem2reg") and space.names[space["-sroa"]] == "-sroa"
    pair = [flag("-mem2reg"), flag("-reg2mem")]
    assert space.from_string("opt -mem2reg -reg2mem input.bc -o output.bc") == pair
    assert space.from_string(["-mem2reg", "-reg2mem"]) == pair and space.from_string("-reg2mem") == pair[1]
    assert space.to_string(pair) == "-mem2reg -reg2mem" and space.to_string(pair[0]) == "-mem2reg"
    with pytest.raises(ValueError, match="-mem3reg"):
        space["-mem3reg"]
    env.reset()
    assert env.commandline() == "opt  input.bc -o output.bc" and env.commandline_to_actions(env.commandline()) == []
    env.multistep(pair)
    assert env.commandline() == "opt -mem2reg -reg2mem input.bc -o output.bc" and env.actions == pair
    assert env.commandline_to_actions(env.commandline()) == pair
    with pytest.raises(ValueError, match="invalid command line"):
        env.commandline_to_actions("clang -O2")


def test_views_state_and_replay(env, tmp_path):
    env.reward_space = "IrInstructionCountOz"
    env.reset()
    assert env.in_episode and env.episode_reward == 0.0
    assert {"Autophase", "AutophaseDict", "InstCountNorm", "IrSha1", "TextSizeOz", "LexedIr"} <= \
        set(env.observation.spaces)
    assert set(env.reward.spaces) == {f"{p}{s}" for p in ("IrInstructionCount", "ObjectTextSize", "TextSize")
                                      for s in ("O3", "Oz", "Norm")} | {"IrInstructionCount",
                                                                        "ObjectTextSizeBytes", "TextSizeBytes"}
    spec = env.observation.spaces["ObjectTextSizeBytes"]
    assert spec.deterministic and spec.platform_dependent and not env.observation.spaces["Ir"].platform_dependent
    assert env.observation.IrInstructionCount() == env.observation["IrInstructionCount"]
    ic0 = env.observation["IrInstructionCount"]
    env.step(flag("-sroa"))
    # a reward view is stateful, as CompilerGym's: its first call measures from the unoptimized module
    assert env.reward["IrInstructionCount"] == ic0 - env.observation["IrInstructionCount"] > 0
    assert env.reward["IrInstructionCount"] == 0.0
    env.step(flag("-instcombine"))
    assert env.ir_sha1 == hashlib.sha1(env.ir.encode()).hexdigest() == env.observation["IrSha1"]
    path = env.write_bitcode(tmp_path / "out.bc")
    assert path.read_bytes() == env.observation["Bitcode"].tobytes()
    state = env.state
    assert state.reward == env.episode_reward > 0 and state.benchmark == MATMUL
    assert state.commandline == "opt -sroa -instcombine input.bc -o output.bc"
    with compiler_gym.make("llvm-v0", reward_space="IrInstructionCountOz") as other:
        other.apply(state)
        assert other.state == state and other.state.walltime != state.walltime
        assert other.observation["IrSha1"] == env.ir_sha1
    assert env.validate().okay() and env.state == state
    tampered = compiler_gym.CompilerEnvState(benchmark=state.benchmark, commandline=state.commandline,
                                             walltime=state.walltime, reward=state.reward + 1)
    result = env.validate(tampered)
    assert not result.okay() and result.reward_validation_failed and "Expected reward" in result.error_details
    assert str(result).startswith("❌  examples-v0/matmul  Expected reward")
    assert env.actions == []        # validate(state) resets the environment to the state's benchmark, as CompilerGym
    assert str(env.validate()) == "✅  examples-v0/matmul  0.0000"


def test_step_multistep_and_lists_of_spaces(env):
    env.reset(observation_space="IrInstructionCount", reward_space="IrInstructionCountNorm")
    ic0 = env.observation["IrInstructionCountO0"]
    with pytest.warns(DeprecationWarning, match="multistep"):
        count, reward, done, info = env.step([flag("-mem2reg"), flag("-instcombine")])
    assert env.actions == [flag("-mem2reg"), flag("-instcombine")] and count == env.observation["IrInstructionCount"]
    assert reward == pytest.approx((ic0 - count) / ic0) and not done and info["action_had_no_effect"] is False
    observations, rewards, done, info = env.multistep(
        [flag("-simplifycfg")], observation_spaces=["Autophase", "IrInstructionCount"],
        reward_spaces=["IrInstructionCount"])
    # IrInstructionCount had not been updated in this episode: as in CompilerGym, it measures from -O0
    assert len(observations) == 2 and observations[0].shape == (56,) and rewards == [ic0 - observations[1]]
    _, _, _, info = env.step(flag("-simplifycfg"))
    assert info["action_had_no_effect"] is True


def test_env_ids_and_gymnasium_make():
    assert set(compiler_gym.COMPILER_GYM_ENVS) == {
        "llvm-v0", "llvm-ic-v0", "llvm-codesize-v0", "llvm-autophase-ic-v0", "llvm-autophase-codesize-v0",
        "llvm-ir-ic-v0", "llvm-ir-codesize-v0"}
    with compiler_gym.make("llvm-autophase-codesize-v0") as env:
        assert env.observation_space_spec.id == "Autophase" and env.reward_space.name == "ObjectTextSizeOz"
    with compiler_gym.make("llvm-ir-ic-v0", reward_space="IrInstructionCount") as env:
        assert env.observation_space_spec.id == "Ir" and env.reward_space.name == "IrInstructionCount"
    env = gymnasium.make("llvm-autophase-ic-v0", benchmark=SUM_ARRAY)
    assert isinstance(env, compiler_gym.LlvmEnv) and env.spec.id == "llvm-autophase-ic-v0"
    assert env.reset().shape == (56,) and env.reward_space.name == "IrInstructionCountOz"
    with pytest.raises(LookupError, match="llvm-v1"):
        compiler_gym.make("llvm-v1")


def test_derived_observation_spaces(env):
    env.reset()
    autophase, instcount = env.observation["Autophase"], env.observation["InstCount"]
    assert env.observation["AutophaseDict"] == dict(zip(AUTOPHASE_FEATURES, autophase.tolist()))
    assert env.observation["InstCountDict"] == dict(zip(INSTCOUNT_FEATURES, instcount.tolist()))
    norm = env.observation["InstCountNorm"]
    np.testing.assert_allclose(norm, instcount[1:] / instcount[0], rtol=1e-6)
    assert norm.dtype == np.float32 and env.observation.spaces["InstCountNorm"].space.contains(norm)
    assert env.observation["InstCountNormDict"]["RetDensity"] == pytest.approx(norm[INSTCOUNT_FEATURES.index(
        "RetCount") - 1])
    with open(env.observation["BitcodeFile"], "rb") as f:
        assert f.read() == env.observation["Bitcode"].tobytes()
    assert env.observation["IsBuildable"] == env.observation["IsRunnable"] == 1
    assert env.observation["TextSizeBytes"] > env.observation["ObjectTextSizeBytes"] > 0   # linked: + crt code
    assert env.observation["TextSizeO0"] == env.observation["TextSizeBytes"]
    assert env.observation["Buildtime"].shape == (1,) and env.observation["Buildtime"][0] > 0
    lexed = env.observation["LexedIr"]
    assert len(set(map(len, lexed.values()))) == 1 and "define" in lexed["token_value"]
    assert "@main" in [v for v, c in zip(lexed["token_value"], lexed["token_category"]) if c == "variable"]
    info = env.observation["CpuInfo"]
    assert info["cores_count"] >= 1 and set(info) == set(env.observation.spaces["CpuInfo"].space.spaces)
    env.reset(benchmark=compiler_gym.Benchmark.from_file_contents("benchmark://user-v0/f", NO_MAIN))
    assert env.observation["IsBuildable"] == 0 and env.observation["Runtime"] is None
    assert env.observation["TextSizeBytes"] == env.observation["ObjectTextSizeBytes"]
    text = env.observation["Inst2vecPreprocessedText"]          # inst2vec on LLVM 19 (core.inst2vec)
    indices = env.observation["Inst2vecEmbeddingIndices"]
    vectors = env.observation["Inst2vec"]
    assert text and all(isinstance(t, str) for t in text) and len(indices) == len(text)
    assert indices.dtype == np.int32 and vectors.shape == (len(text), 200) and vectors.dtype == np.float32
    graph = env.observation["Programl"]                       # ProGraML on LLVM 19 (core.programl)
    data = env.observation["ProgramlJson"]
    kinds = {0: "instruction", 1: "variable", 2: "constant"}
    assert graph.number_of_nodes() == len(data["nodes"]) > 1 and data["directed"] and data["multigraph"]
    assert {kinds.get(n["type"], n["type"]) for n in data["nodes"]} >= {"instruction", "variable"}
    assert sum(1 for n in data["nodes"] if n["type"] == 0) > env.observation["IrInstructionCount"]  # + the root
    env.observation_space = "ProgramlJson"
    env.observation_space = None
    with pytest.raises(KeyError, match="^'Autophse'$"):
        env.observation["Autophse"]
    env.observation.add_derived_space(id="IrLines", base_id="Ir", translate=lambda ir: ir.count("\n"))
    assert env.observation.IrLines() == env.ir.count("\n") > 0


def test_copies_forks_and_episodes_before_reset():
    env = compiler_gym.make("llvm-v0", benchmark=MATMUL, reward_space="IrInstructionCount")
    assert isinstance(env, gymnasium.Env) and isinstance(gymnasium.Wrapper(env).unwrapped, compiler_gym.LlvmEnv)
    with pytest.raises(TypeError, match="deepcopy"):
        copy.copy(env)
    assert not env.in_episode
    with env.fork() as forked:                      # fork() before reset() starts an episode
        assert env.in_episode and forked.in_episode and forked.state == env.state
    other = compiler_gym.make("llvm-v0", benchmark=MATMUL)
    _, _, done, _ = other.step(flag("-mem2reg"))    # so does step()
    assert other.in_episode and other.actions == [flag("-mem2reg")] and not done
    env.step(flag("-sroa"))
    twin = copy.deepcopy(env)
    assert twin is not env and twin.state == env.state and twin.episode_reward == env.episode_reward
    twin.step(flag("-instcombine"))
    assert env.actions == [flag("-sroa")] and twin.actions == [flag("-sroa"), flag("-instcombine")]
    assert twin.reward_space is not env.reward_space          # rewards hold episode state: each env its own
    assert env.state != twin.state
    for bad in ("benchmark://examples-v0/nonexistent", "benchmark://cbench-v1/crc32", "no/such/file.c"):
        with pytest.raises(UnknownBenchmarkError) as caught:
            env.reset(benchmark=bad)
        assert isinstance(caught.value, LookupError) and isinstance(caught.value, BPQError)
    assert env.benchmark == MATMUL
    env.close()
    other.close()


def test_state_csv_round_trip(env):
    import io

    env.reward_space = "IrInstructionCount"
    env.reset()
    env.step(flag("-mem2reg"))
    buffer = io.StringIO()
    compiler_gym.CompilerEnvStateWriter(buffer).write_state(env.state)
    buffer.seek(0)
    assert buffer.getvalue().startswith("benchmark,reward,walltime,commandline\n")
    (read,) = list(compiler_gym.CompilerEnvStateReader(buffer))
    assert read == env.state and read.reward == env.episode_reward


def test_wrappers():
    env = compiler_gym.make("llvm-v0", benchmark=MATMUL, reward_space="IrInstructionCount")
    limited = wrappers.TimeLimit(env, max_episode_steps=2)
    limited.observation_space = "IrInstructionCount"          # a wrapper's setters reach the environment
    assert env.observation_space_spec.id == "IrInstructionCount"
    limited.reset()
    assert limited.step(flag("-mem2reg"))[2] is False
    _, _, done, info = limited.step(flag("-sroa"))
    assert done and info["TimeLimit.truncated"] is True
    assert env.spec.max_episode_steps == 2 and gymnasium.spec("llvm-v0").max_episode_steps is None
    fork = limited.fork()
    assert isinstance(fork, wrappers.TimeLimit) and fork.actions == env.actions

    terminal = wrappers.CommandlineWithTerminalAction(env)
    assert terminal.action_space.n == 125 and terminal.action_space.flags[-1] == "# end-of-episode"
    terminal.reset()
    _, _, done, info = terminal.multistep([flag("-mem2reg"), 124, flag("-sroa")])
    assert done and info["terminal_action"] and env.actions == [flag("-mem2reg")]

    constrained = wrappers.ConstrainedCommandline(env, flags=["-mem2reg", "-instcombine"])
    assert constrained.action_space.names == ["-mem2reg", "-instcombine"]
    constrained.reset()
    constrained.multistep([1, 0])
    assert env.actions == [flag("-instcombine"), flag("-mem2reg")] and constrained.actions == [1, 0]

    uris = [MATMUL, SUM_ARRAY]
    cycle = wrappers.CycleOverBenchmarks(env, uris)
    assert [(cycle.reset(), str(env.benchmark))[1] for _ in range(3)] == [MATMUL, SUM_ARRAY, MATMUL]
    once = wrappers.IterateOverBenchmarks(env, uris)
    once.reset(), once.reset()
    with pytest.raises(StopIteration):
        once.reset()
    with pytest.raises(TypeError, match="benchmark passed"):
        once.reset(benchmark=MATMUL)
    shuffled = wrappers.RandomOrderBenchmarks(env, uris, rng=np.random.default_rng(0))
    seen = {(shuffled.reset(), str(env.benchmark))[1] for _ in range(8)}
    assert seen == set(uris)

    class Doubled(wrappers.RewardWrapper):
        def convert_reward(self, reward):
            return 2 * reward

    class Counts(wrappers.ObservationWrapper):
        def convert_observation(self, observation):
            return -observation

    class Second(wrappers.ActionWrapper):
        def action(self, action):
            return [flag("-mem2reg"), flag("-sroa")][action]

    wrapped = Second(Counts(Doubled(env)))
    assert wrapped.reset(benchmark=MATMUL) == -env.observation["IrInstructionCount"]
    ic0 = env.observation["IrInstructionCount"]
    observation, reward, _, _ = wrapped.step(0)
    assert env.actions == [flag("-mem2reg")] and observation == -env.observation["IrInstructionCount"]
    assert reward == 2 * (ic0 - env.observation["IrInstructionCount"]) == env.episode_reward
    env.close()


def test_datasets_over_a_folder_and_a_store(tmp_path):
    from behavioral_pq.corpus import build_corpus, discover, split_corpus

    folder = tmp_path / "programs"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "twice.c").write_text("int twice(int x) { int y = x; return y + y; }\n")
    (folder / "loop.ll").write_bytes(NO_MAIN)
    (folder / "notes.txt").write_text("not a program\n")
    store = tmp_path / "store"
    build_corpus(discover([EXAMPLES], origin="examples"), store, workers=1, labels=False)
    split_corpus(store, seed=0, fractions=(0.5, 0.25, 0.25))

    env = compiler_gym.make("llvm-v0", reward_space="IrInstructionCount")
    mine = env.datasets.register("mine-v0", folder)
    assert mine.name == "benchmark://mine-v0" and mine.size == 2
    assert sorted(env.datasets["mine-v0"].benchmark_uris()) == ["benchmark://mine-v0/loop",
                                                                "benchmark://mine-v0/sub/twice"]
    env.reset(benchmark="mine-v0/sub/twice")                    # scheme optional, as in CompilerGym
    # a reset by URI reuses the module loaded by the last one (the program is compiled once)
    assert env.datasets.benchmark("benchmark://mine-v0/sub/twice") is env.benchmark
    assert env.benchmark == "benchmark://mine-v0/sub/twice" and env.observation["IrInstructionCount"] > 0
    uri = env.benchmark.uri
    assert (uri.scheme, uri.dataset, uri.path) == ("benchmark", "mine-v0", "/sub/twice")
    drawn = [str(mine.random_benchmark(np.random.default_rng(seed))) for seed in range(6)]
    assert set(drawn) <= set(mine.benchmark_uris()) and drawn == [
        str(mine.random_benchmark(np.random.default_rng(seed))) for seed in range(6)]

    corpus = env.datasets.register("corpus-v0", store)
    assert corpus.size == 4 and all(u.startswith("benchmark://corpus-v0/") for u in corpus.benchmark_uris())
    train = env.datasets.register("train-v0", store, split="train")
    from behavioral_pq.corpus import Corpus

    shas = Corpus(store).split("train")
    assert list(train.benchmark_uris()) == [f"benchmark://train-v0/{sha}" for sha in shas] and train.size > 0
    uri = next(iter(corpus.benchmark_uris()))
    env.reset(benchmark=uri)
    env.step(flag("-sroa"))
    assert env.state.benchmark == uri and env.validate().okay()
    finite = {u for d in env.datasets if d.size for u in d.benchmark_uris()}
    assert {str(env.datasets.random_benchmark(np.random.default_rng(s))) for s in range(10)} <= finite
    assert [d.name for d in env.datasets][:3] == ["benchmark://examples-v0", "generator://csmith-v0",
                                                 "generator://llvm-stress-v0"]
    with pytest.raises(ValueError, match="NAME-vN"):
        env.datasets.register("mine", folder)
    with pytest.raises(UnknownBenchmarkError, match="^Benchmark not found: benchmark://mine-v0/sub/thrice$"):
        env.datasets.benchmark("benchmark://mine-v0/sub/thrice")
    env.close()


def test_make_benchmark_from_sources_ir_and_clang_jobs(tmp_path):
    (tmp_path / "main.c").write_text("int helper(int);\nint main(void) { return helper(2); }\n")
    (tmp_path / "helper.c").write_text("int helper(int x) { return twice(x); }\n")   # implicit: clang 10 allowed it
    (tmp_path / "twice.c").write_text("int twice(int x) { return x + x; }\n")
    (tmp_path / "notes.txt").write_text("text\n")
    env = compiler_gym.make("llvm-v0")
    job = compiler_gym.ClangInvocation.from_c_file(tmp_path / "twice.c", system_includes=False)
    linked = env.make_benchmark([tmp_path / "main.c", tmp_path / "helper.c", job])
    other = env.make_benchmark([tmp_path / "main.c", tmp_path / "helper.c", job])
    assert linked.uri.startswith("benchmark://user-v0/") and linked.uri != other.uri
    env.reset(benchmark=linked)
    assert env.benchmark == linked and {"@main", "@helper", "@twice"} <= set(
        env.observation["LexedIr"]["token_value"])
    assert env.observation["IsRunnable"] == 0       # a make_benchmark program has no build command
    (tmp_path / "twice.ll").write_text(env.ir)
    assert compiler_gym.compute_observation(env.observation.spaces["IrInstructionCount"], tmp_path / "twice.ll") \
        == env.observation["IrInstructionCount"]
    single = compiler_gym.make_benchmark(tmp_path / "twice.ll")
    assert single.uri == f"benchmark://file-v0{tmp_path / 'twice.ll'}"
    with pytest.raises(ValueError, match="Unrecognized file type: notes.txt"):
        env.make_benchmark(tmp_path / "notes.txt")
    with pytest.raises(FileNotFoundError):
        env.make_benchmark(tmp_path / "missing.c")
    with pytest.raises(TypeError, match="Invalid input type"):
        env.make_benchmark([3])
    flags = compiler_gym.get_system_library_flags()
    assert flags[0::2] == ["-isystem"] * (len(flags) // 2) and flags
    env.close()


def test_benchmark_from_a_command_line_builds_back(tmp_path, monkeypatch):
    import subprocess

    from behavioral_pq.core.toolchain import find_tool

    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.h").write_text("int B(void);\n")
    (tmp_path / "a.c").write_text('#include "b.h"\nint A(void) { int x = B(); return x; }\n'
                                  "int main(void) { return A(); }\n")
    (tmp_path / "b.c").write_text("int B(void) { return 5; }\n")
    (tmp_path / "c.c").write_text("int C(void) { return 7; }\n")
    subprocess.run([find_tool("clang"), "-c", "c.c"], check=True, timeout=60)
    env = compiler_gym.make("llvm-v0", reward_space="IrInstructionCount")
    benchmark = env.make_benchmark_from_command_line("gcc -DNDEBUG a.c b.c c.o -o foo -lm")
    assert benchmark.uri.startswith("benchmark://clang-v0/") and not (tmp_path / "foo").exists()
    env.reset(benchmark=benchmark)
    assert "@main" in env.ir and "define dso_local i32 @B" in env.ir and "@C" not in env.ir
    env.multistep([flag("-mem2reg"), flag("-inline"), flag("-instcombine")])
    assert env.episode_reward > 0
    benchmark.compile(env)
    assert subprocess.run(["./foo"], timeout=60).returncode == 5
    with pytest.raises(ValueError, match="Input command line has no source file inputs"):
        env.make_benchmark_from_command_line(["gcc", "c.o", "-c"])
    with pytest.raises(ValueError, match="is too short"):
        env.make_benchmark_from_command_line("gcc")
    with pytest.raises(ValueError, match="reads from stdin"):
        env.make_benchmark_from_command_line("gcc -xc - -o foo")
    env.close()
