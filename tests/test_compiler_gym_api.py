"""The CompilerGym 0.2.5 shim answers as CompilerGym 0.2.5 does where its own test suite looks: the benchmark
message (``Benchmark.proto``), build and run commands, command-line benchmarks built at ``reset``, compilation
errors as OSError, the IR's module ID, ``__version__`` and the space enums, error texts and gym's ``_kwargs``.
Each test names the CompilerGym test (file and function, tag v0.2.5) or source whose behaviour it states."""

import copy
import subprocess

import pytest
from packaging import version

import behavioral_pq.env.compiler_gym as compiler_gym
from behavioral_pq.core.features import INSTCOUNT_FEATURES
from behavioral_pq.core.toolchain import find_tool
from behavioral_pq.env import make as make_core
from behavioral_pq.env.compiler_gym import BenchmarkProto, File, gym
from behavioral_pq.env.compiler_gym.datasets import Datasets, FilesDataset
from behavioral_pq.env.compiler_gym.observations import UNSUPPORTED
from behavioral_pq.env.compiler_gym.specs import COMPILER_GYM_OBSERVATION_SPACES, COMPILER_GYM_REWARD_SPACES
from behavioral_pq.errors import BenchmarkInitError, BPQError

MATMUL = "benchmark://examples-v0/matmul"
HELLO = """#include <stdio.h>

int main(int argc, char** argv) {
    printf("Hello\\n");
    for (int i = 0; i < 10; ++i) {
        argc += 2;
    }
    return argc - argc;
}
"""


@pytest.fixture
def env():
    with compiler_gym.make("llvm-v0", benchmark=MATMUL) as e:
        yield e


def test_benchmark_proto_has_the_uri_and_the_program(tmp_path):
    """CompilerGym's Benchmark wraps its ``Benchmark`` message: ``proto.uri``, ``proto.program.contents``
    (tests/datasets/benchmark_test.py::test_benchmark_from_file, ::test_benchmark_immutable;
    tests/datasets/datasets_test.py::test_dataset_file_scheme; tests/datasets/files_dataset_test.py::
    test_populated_dataset_benchmark_lookup)."""
    path = tmp_path / "file.dat"
    path.write_text("hello, world")
    benchmark = Datasets([]).benchmark(f"file://{path}")
    assert benchmark.proto.uri == benchmark.uri == f"file://{path}"
    assert benchmark.proto.program.contents == b"hello, world"
    (tmp_path / "foo.txt").write_text("Hello, world!")
    from_file = compiler_gym.Benchmark.from_file("benchmark://example-compiler-v0/foo", tmp_path / "foo.txt")
    assert from_file.proto.program.contents.decode("utf-8") == "Hello, world!"
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "missing.txt")):
        compiler_gym.Benchmark.from_file("benchmark://example-compiler-v0/foo", tmp_path / "missing.txt")
    contents = compiler_gym.Benchmark.from_file_contents("benchmark://user-v0/a", b"\x42")
    assert contents.proto == BenchmarkProto(uri="benchmark://user-v0/a", program=File(contents=b"\x42"))
    (tmp_path / "programs").mkdir()
    (tmp_path / "programs" / "e.ll").write_text("define i32 @e() {\n  ret i32 0\n}\n")
    dataset = FilesDataset("test-v0", tmp_path / "programs")
    found = dataset.benchmark("benchmark://test-v0/e")
    assert found.proto.uri == found.uri == "benchmark://test-v0/e"
    assert found.proto.program.contents.decode("utf-8").startswith("define i32 @e()")
    with pytest.raises(LookupError, match=r"^Benchmark not found: benchmark://test-v0/not/a/file"):
        dataset.benchmark("benchmark://test-v0/not/a/file")
    with pytest.raises(AttributeError):
        found.proto = 123
    with pytest.raises(AttributeError):
        found.uri = 123


def test_build_and_run_commands_make_a_benchmark_runnable(env, tmp_path):
    """``proto.dynamic_config`` build and run commands are what make a benchmark runnable, and are what
    ``Runtime`` runs (tests/llvm/runtime_test.py::test_custom_benchmark_runtime, ::
    test_custom_benchmark_runtimes_differ); a build command that fails fails ``reset()``
    (tests/llvm/custom_benchmarks_test.py::test_failing_build_cmd; clang-19 names itself ``clang-19:`` where
    CompilerGym's clang 10 wrote ``clang:``)."""
    (tmp_path / "program.c").write_text(HELLO)
    benchmark = env.make_benchmark(tmp_path / "program.c")
    env.reset(benchmark=benchmark)
    assert env.observation["IsBuildable"] == env.observation["IsRunnable"] == 0
    assert env.observation["Runtime"] is None
    config = benchmark.proto.dynamic_config
    config.build_cmd.argument.extend(["$CC", "$IN"] + compiler_gym.get_system_library_flags())
    config.build_cmd.outfile.extend(["a.out"])
    config.build_cmd.timeout_seconds = 10
    config.run_cmd.argument.extend(["./a.out"])
    config.run_cmd.timeout_seconds = 10
    env.runtime_observation_count = 3
    env.reset(benchmark=benchmark)
    assert env.observation["IsBuildable"] == env.observation["IsRunnable"] == 1
    runtimes = env.observation.Runtime()
    assert runtimes.shape == (3,) and (runtimes > 0).all()
    assert (env.observation.Runtime() != runtimes).any()          # measured again, never cached
    assert env.observation["Buildtime"].shape == (1,) and env.observation["Buildtime"][0] > 0

    (tmp_path / "empty.c").touch()
    failing = env.make_benchmark(tmp_path / "empty.c")
    failing.proto.dynamic_config.build_cmd.argument.extend(["$CC", "$IN", "-invalid-cc-argument"])
    failing.proto.dynamic_config.build_cmd.timeout_seconds = 10
    with pytest.raises(BenchmarkInitError, match=r"error: unknown argument: '-invalid-cc-argument'"):
        env.reset(benchmark=failing)
    assert not env.in_episode


def test_a_benchmark_without_build_commands_is_neither_buildable_nor_runnable(env, tmp_path):
    """A benchmark is buildable only when it has a build command, runnable only with a run command too, whatever
    its module holds (compiler_gym/envs/llvm/service/BenchmarkDynamicConfig.cc: ``isBuildable_ =
    !buildCommand_.empty()``; tests/llvm/observation_spaces_test.py::
    test_is_buildable_observation_space_not_buildable, ::test_is_runnable_observation_space_not_runnable, ::
    test_buildtime_observation_space_not_runnable, ::test_runtime_observation_space_not_runnable). Here a file
    with a ``main`` is not; the package's own examples are (as CompilerGym's cBench is)."""
    env.reset()
    assert env.observation["IsBuildable"] == env.observation["IsRunnable"] == 1
    path = env.write_ir(tmp_path / "matmul.ll")
    env.reset(benchmark=f"file://{path}")
    assert "@main" in env.ir
    for name in ("IsBuildable", "IsRunnable"):
        value = env.observation[name]
        assert isinstance(value, int) and value == 0
    assert env.observation["Runtime"] is None and env.observation["Buildtime"] is None
    assert env.observation["TextSizeBytes"] == env.observation["ObjectTextSizeBytes"]


def test_reset_builds_a_command_line_benchmark(env, tmp_path, monkeypatch):
    """A command-line benchmark's build command is the command with ``-xir $IN`` and an absolute output, and
    ``reset()`` builds that output; ``compile()`` builds it again
    (tests/llvm/custom_benchmarks_test.py::test_make_benchmark_from_command_line, ::
    test_make_benchmark_from_command_line_build_cmd). It is buildable, not runnable (no run command). A library
    unit, which does not link, is built compile-only at ``reset()`` where CompilerGym 0.2.5's ``reset()``
    fails."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.c").write_text("int main() { return 0; }")
    benchmark = env.make_benchmark_from_command_line(["gcc", "in.c", "-o", "foo"], system_includes=False)
    argument = benchmark.proto.dynamic_config.build_cmd.argument
    assert argument[:4] == [find_tool("clang"), "-xir", "$IN", "-o"]
    assert argument[-1].endswith(f"{tmp_path}/foo")
    assert not (tmp_path / "foo").is_file()
    env.reset(benchmark=benchmark)
    assert "main()" in env.ir and (tmp_path / "foo").is_file()
    assert subprocess.run(["./foo"], timeout=60).returncode == 0
    assert env.observation["IsBuildable"] == 1 and env.observation["IsRunnable"] == 0
    (tmp_path / "foo").unlink()
    benchmark.compile(env)
    assert (tmp_path / "foo").is_file()

    (tmp_path / "lib.c").write_text("int a(int x) { return x + 1; }\n")
    library = env.make_benchmark_from_command_line("gcc lib.c -o lib.o", system_includes=False)
    env.reset(benchmark=library)
    assert (tmp_path / "lib.o").read_bytes()[:4] == b"\x7fELF"


def test_a_failing_compilation_job_raises_oserror(tmp_path, monkeypatch):
    """A clang job that fails raises OSError with CompilerGym's text
    (tests/llvm/custom_benchmarks_test.py::test_make_benchmark_invalid_clang_job, ::
    test_make_benchmark_single_clang_invocation_multiple_inputs; compiler_gym/util/commands.py::run_command), and
    a command line whose source does not compile raises BenchmarkInitError, an OSError there too
    (::test_make_benchmark_from_command_line_no_system_includes, where CompilerGym's own clang finds no
    ``stdio.h``; clang-19 finds the system's, so a syntax error stands in). Here both are BenchmarkInitError, a
    BPQError."""
    with pytest.raises(OSError, match="Compilation job failed with returncode 1\nCommand: .*-invalid-arg\n"
                                      "Stderr: .*unknown argument: '-invalid-arg'") as caught:
        compiler_gym.make_benchmark(compiler_gym.ClangInvocation(["-invalid-arg"]))
    assert isinstance(caught.value, BenchmarkInitError) and isinstance(caught.value, BPQError)
    (tmp_path / "a.c").write_text("int B() { return A(); }")
    (tmp_path / "b.c").write_text("int A() { return 0; }")
    with pytest.raises(OSError):
        compiler_gym.make_benchmark(compiler_gym.ClangInvocation([str(tmp_path / "a.c"), str(tmp_path / "b.c")]))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.c").write_text("int main() { return }\n")
    with pytest.raises(BenchmarkInitError, match="in.c:1:21: error: expected expression"):
        compiler_gym.make_benchmark_from_command_line("gcc in.c", system_includes=False)


def test_the_module_id_and_source_file_name_are_a_dash(env, tmp_path):
    """The IR names no module and no source file: ``; ModuleID = '-'``, ``source_filename = "-"``
    (tests/llvm/module_id_test.py::test_no_module_id_builtin_benchmark, ::test_no_module_id_custom_benchmark);
    the core environment's ``Ir`` too."""
    env.reset()
    assert env.ir.startswith("; ModuleID = '-'\nsource_filename = \"-\"\n")
    (tmp_path / "source.c").write_text("int A() {return 0;}")
    env.reset(benchmark=env.make_benchmark(tmp_path / "source.c"))
    assert "; ModuleID = '-'\n" in env.ir and '\nsource_filename = "-"\n' in env.ir
    assert env.ir.count("source_filename") == 1
    with make_core("llvm-v0", benchmark=str(tmp_path / "source.c")) as core:
        core.reset()
        assert core.observation["Ir"].startswith("; ModuleID = '-'\nsource_filename = \"-\"\n")


def test_version_and_the_space_enums(env):
    """``compiler_gym.__version__`` is a version string that ``env.version`` reports
    (tests/version_test.py::test_version_dunder, ::test_version_dunder_format; tests/llvm/llvm_env_test.py::
    test_service_version); ``observation_spaces`` and ``reward_spaces`` are enums
    (tests/llvm/llvm_env_test.py::test_generate_enum_declarations) with the members of CompilerGym 0.2.5's
    generated ``compiler_gym/envs/llvm/specs.py``, in its order, then Spectrum, Codes and Embedding."""
    assert isinstance(compiler_gym.__version__, str) and env.version == compiler_gym.__version__
    version.parse(compiler_gym.__version__)
    observations, rewards = compiler_gym.observation_spaces, compiler_gym.reward_spaces
    assert [m.name for m in observations] == [*COMPILER_GYM_OBSERVATION_SPACES, "Spectrum", "Codes", "Embedding"]
    assert all(m.value == m.name for m in observations) and observations.Autophase.value == "Autophase"
    assert len(COMPILER_GYM_OBSERVATION_SPACES) == 33 and COMPILER_GYM_OBSERVATION_SPACES[-1] == "LexedIr"
    assert not set(env.extra_observation_spaces) & set(env.observation.spaces)
    assert {m.value for m in observations} <= set(env.observation.spaces) | set(env.extra_observation_spaces) \
        | set(UNSUPPORTED)
    assert [m.value for m in rewards] == list(COMPILER_GYM_REWARD_SPACES)
    assert set(COMPILER_GYM_REWARD_SPACES) == set(env.reward.spaces)
    env.observation_space = observations.InstCount.value
    assert env.reset().shape == (len(INSTCOUNT_FEATURES),)


def test_error_texts_are_compiler_gyms(env):
    """Errors carry CompilerGym's texts: tests/env_copy_test.py::test_forbidden_shallow_copy,
    tests/compiler_env_test.py::test_set_benchmark_invalid_type, tests/llvm/observation_spaces_test.py::
    test_default_observation_space and ::test_cpuinfo_observation_space (a view's KeyError), tests/llvm/
    reward_spaces_test.py::test_reward_space and ::test_invalid_reward_space_name, tests/datasets/
    datasets_test.py::test_datasets_get_item_lookup_miss, tests/llvm/custom_benchmarks_test.py::
    test_reset_invalid_benchmark."""
    with pytest.raises(TypeError, match=r"^ClientServiceCompilerEnv instances do not support shallow copies. "
                                        r"Use deepcopy\(\)$"):
        copy.copy(env)
    with pytest.raises(TypeError) as caught:
        env.benchmark = 10
    assert str(caught.value) == "Expected a Benchmark or str, received: 'int'"
    invalid = "invalid value"
    with pytest.raises(LookupError) as caught:
        env.observation_space = invalid
    assert str(caught.value) == f"Observation space not found: {invalid}"
    with pytest.raises(LookupError) as caught:
        env.reward_space = invalid
    assert str(caught.value) == f"Reward space not found: {invalid}"
    env.reset()
    for view in (env.observation, env.reward):
        with pytest.raises(KeyError) as caught:
            view[invalid]
        assert str(caught.value) == f"'{invalid}'" and isinstance(caught.value, BPQError)
    with pytest.raises(LookupError, match=r"^Dataset not found: benchmark://bar-v0$"):
        env.datasets.dataset("benchmark://bar-v0")
    with pytest.raises(LookupError, match=r"^Dataset not found: benchmark://bar-v0$"):
        env.datasets["benchmark://bar-v0"]
    with pytest.raises(LookupError, match=r"^Dataset not found: benchmark://an invalid benchmark$"):
        env.reset(benchmark="an invalid benchmark")
    with pytest.raises(LookupError, match=r"^Dataset not found: benchmark://nope-v0$"):
        env.reset(benchmark="benchmark://nope-v0/a/b")


def test_env_spec_kwargs_is_gyms():
    """``env.spec._kwargs`` is gym 0.21's name for the keyword arguments, and editing it changes what
    ``env.spec.make()`` makes (tests/llvm/gym_interface_compatability_test.py::test_env_spec_make_workaround);
    without the edit the new environment has the default benchmark (::test_env_spec_make, a strict xfail)."""
    with gym.make("llvm-v0") as env:
        env.reset(benchmark="benchmark://examples-v0/sum_array")
        with env.spec.make() as new_env:
            assert new_env.benchmark != env.benchmark
        env.spec._kwargs["benchmark"] = "benchmark://examples-v0/sum_array"
        assert env.spec.kwargs["benchmark"] == "benchmark://examples-v0/sum_array"
        with env.spec.make() as new_env:
            assert new_env.benchmark == env.benchmark
    with gym.make("llvm-v0") as other:
        assert "benchmark" not in other.spec._kwargs          # the registry's spec is untouched
    with compiler_gym.LlvmEnv(benchmark=MATMUL) as env:
        assert env.spec is None
