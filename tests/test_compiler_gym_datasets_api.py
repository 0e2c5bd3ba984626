"""The CompilerGym 0.2.5 shim's datasets answer as CompilerGym's ``compiler_gym.datasets`` does: URIs, the
``Benchmark`` message and its wire format, benchmarks with validation callbacks and sources, datasets and their
properties, files datasets, the ``Datasets`` collection, ``proto://`` and ``file://`` benchmarks, runtime data
sets picked by ``?dataset=N``. Each test names the CompilerGym test (file and function, tag v0.2.5) whose values
it asserts."""

import numpy as np
import pytest

from behavioral_pq.env.compiler_gym.datasets import (
    Benchmark,
    BenchmarkDynamicConfig,
    BenchmarkProto,
    BenchmarkSource,
    BenchmarkUri,
    Command,
    Dataset,
    Datasets,
    File,
    FilesDataset,
    GeneratorDataset,
    ProgramsDataset,
    round_robin_iterables,
)
from behavioral_pq.env.compiler_gym.env import ValidationError

IR = b"define i32 @f(i32 %x) {\n  %y = add i32 %x, 0\n  ret i32 %y\n}\n"


@pytest.mark.parametrize("text, parts, canonical", [
    ("benchmark://test-v0", ("benchmark", "test-v0", "", {}, ""), "benchmark://test-v0"),
    ("test-v0", ("benchmark", "test-v0", "", {}, ""), "benchmark://test-v0"),
    ("generator://csmith-v0/this path has whitespace/in/it",
     ("generator", "csmith-v0", "/this path has whitespace/in/it", {}, ""),
     "generator://csmith-v0/this path has whitespace/in/it"),
    ("generator://csmith-v0?a=b&c=d#foo", ("generator", "csmith-v0", "", {"a": ["b"], "c": ["d"]}, "foo"),
     "generator://csmith-v0?a=b&c=d#foo"),
    ("", ("benchmark", "", "", {}, ""), "benchmark:"),
    ("generator:", ("generator", "", "", {}, ""), "generator:"),
])
def test_uri_parts_and_text(text, parts, canonical):
    """tests/datasets/uri_test.py::test_from_string_1 to _8."""
    uri = BenchmarkUri.from_string(text)
    assert (uri.scheme, uri.dataset, uri.path, uri.params, uri.fragment) == parts
    assert str(uri) == canonical == repr(uri)
    assert BenchmarkUri.canonicalize(text) == canonical


def test_uri_is_its_string():
    """tests/datasets/uri_test.py::test_startswith, ::test_endswith, ::test_canonicalize_1; a store URI keeps its
    empty dataset."""
    uri = BenchmarkUri.from_string("benchmark://test-v0/foo")
    assert uri.startswith("benchmark://test-v0/fo") and not uri.startswith("!!!")
    assert uri.endswith("mark://test-v0/foo") and not uri.endswith("!!!")
    assert {uri: 1}["benchmark://test-v0/foo"] == 1 and uri < "benchmark://test-v0/g"
    store = BenchmarkUri("benchmark:///data/store/" + "a" * 64)
    assert store == "benchmark:///data/store/" + "a" * 64 and store.dataset == "" and store.path.startswith("/data")
    assert str(BenchmarkUri(scheme="file", path="/tmp/x.bc")) == "file:///tmp/x.bc"


def test_benchmark_message_is_protobufs_wire_format(tmp_path):
    """tests/datasets/datasets_test.py::test_dataset_proto_scheme: ``SerializeToString`` writes what
    CompilerGym 0.2.5's protobuf ``Benchmark`` message writes (bytes from its python protobuf), and
    ``FromString`` reads it back."""
    assert BenchmarkProto(uri="hello world").SerializeToString() == b"\n\x0bhello world"
    assert BenchmarkProto(uri="u", program=File(uri="file:///x.bc")).SerializeToString() == \
        b"\n\x01u\x12\x0e\x12\x0cfile:///x.bc"
    message = BenchmarkProto(uri="benchmark://test-v0/a", program=File(contents=b"BC"),
                             dynamic_config=BenchmarkDynamicConfig(
                                 build_cmd=Command(argument=["$CC", "$IN"], env={"A": "1"}, timeout_seconds=-5,
                                                   outfile=["a.out"])))
    message.dynamic_config.pre_run_cmd.add(argument=["echo"])
    wire = (b"\n\x15benchmark://test-v0/a\x12\x04\n\x02BC\x1a.\n$\n\x03$CC\n\x03$IN\x12\x06\n\x01A\x12\x011"
            b"\x18\xfb\xff\xff\xff\xff\xff\xff\xff\xff\x01*\x05a.out\x1a\x06\n\x04echo")
    assert message.SerializeToString() == wire
    assert BenchmarkProto.FromString(wire) == message
    parsed = BenchmarkProto(uri="replaced")
    assert parsed.ParseFromString(b"\n\x0bhello world") == 13 and parsed == BenchmarkProto(uri="hello world")
    with pytest.raises(ValueError, match="truncated"):
        BenchmarkProto.FromString(b"\n\x0bhello")

    (tmp_path / "file.pb").write_bytes(BenchmarkProto(uri="hello world").SerializeToString())
    benchmark = Datasets(datasets={}).benchmark(f"proto://{tmp_path}/file.pb")
    assert benchmark.proto.uri == "hello world" and benchmark.uri == "benchmark://hello world"
    with pytest.raises(FileNotFoundError):
        Datasets(datasets={}).benchmark(f"proto://{tmp_path}/not_a_file")


def test_benchmark_wraps_its_message():
    """tests/datasets/benchmark_test.py::test_benchmark_attribute_outside_init, ::test_benchmark_properties,
    ::test_benchmark_immutable, ::test_eq_benchmarks, ::test_ne_strings, ::test_dataset_equality_and_sorting."""
    benchmark = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/foobar"))
    assert benchmark.uri == "benchmark://example-compiler-v0/foobar"
    assert benchmark.proto == BenchmarkProto(uri="benchmark://example-compiler-v0/foobar")
    benchmark.foobar = 123
    assert benchmark.foobar == 123
    with pytest.raises(AttributeError):
        benchmark.uri = 123
    with pytest.raises(AttributeError):
        benchmark.proto = 123
    a = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/a"))
    a2 = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/a"))
    b = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/b"))
    assert a == a2 and a != b and a < b and a <= b and b > a and b >= a
    assert a == "benchmark://example-compiler-v0/a" and a != "benchmark://example-compiler-v0/b"
    assert a < "benchmark://example-compiler-v0/b"
    assert sorted([a2, b, a]) == ["benchmark://example-compiler-v0/a"] * 2 + ["benchmark://example-compiler-v0/b"]
    assert Benchmark("cbench-v1/crc32", IR).uri == "benchmark://cbench-v1/crc32"


def test_benchmark_program_from_the_message():
    """tests/llvm/custom_benchmarks_test.py::test_invalid_benchmark_missing_file, ::
    test_benchmark_path_invalid_scheme; tests/llvm/llvm_benchmark_test.py::test_add_benchmark_invalid_scheme: a
    message with no program, or with a program URI that is not ``file:///``, cannot be loaded."""
    with pytest.raises(ValueError, match="No program set"):
        Benchmark(BenchmarkProto(uri="benchmark://new")).load(None)
    with pytest.raises(ValueError) as caught:
        Benchmark(BenchmarkProto(uri="benchmark://foo", program=File(uri="https://invalid/scheme"))).load(None)
    assert str(caught.value) == ('Invalid benchmark data URI. Only the file:/// scheme is supported: '
                                 '"https://invalid/scheme"')
    module = Benchmark(BenchmarkProto(uri="benchmark://new", program=File(contents=IR))).load(None)
    assert "@f(" in module.text() and module.instruction_count == 2


def test_validation_callbacks():
    """tests/datasets/benchmark_test.py::test_add_validation_callbacks_values, ::
    test_add_validation_callbacks_call_count, ::test_validation_callback_error, ::test_validation_callback_flaky."""
    calls = []
    flaky = False

    def a(env):
        calls.append("a")

    def b(env):
        calls.append("b")
        if flaky:
            yield ValidationError(type="Runtime Error")

    benchmark = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/foobar"))
    assert benchmark.validation_callbacks() == [] and not benchmark.is_validatable()
    benchmark.add_validation_callback(a)
    assert benchmark.validation_callbacks() == [a] and benchmark.is_validatable()
    assert benchmark.validate(env=None) == [] and calls == ["a"]
    benchmark.add_validation_callback(b)
    assert benchmark.validate(env=None) == [] and calls == ["a", "a", "b"]
    flaky = True
    assert benchmark.validate(env=None) == [ValidationError(type="Runtime Error")]
    assert list(benchmark.ivalidate(env=None)) == [ValidationError(type="Runtime Error")]


def test_benchmark_sources(tmp_path):
    """tests/datasets/benchmark_test.py::test_benchmark_sources."""
    benchmark = Benchmark(BenchmarkProto(uri="benchmark://example-compiler-v0/foo"),
                          sources=[("example.py", b"Hello, world!")])
    benchmark.add_source(BenchmarkSource(filename="foo.py", contents=b"Hi"))
    assert list(benchmark.sources) == [BenchmarkSource("example.py", b"Hello, world!"),
                                       BenchmarkSource(filename="foo.py", contents=b"Hi")]
    assert benchmark.write_sources_to_directory(tmp_path / "benchmark_sources") == 2
    assert (tmp_path / "benchmark_sources" / "example.py").read_text() == "Hello, world!"
    assert (tmp_path / "benchmark_sources" / "foo.py").read_text() == "Hi"


def test_dataset_properties(tmp_path, monkeypatch):
    """tests/datasets/dataset_test.py::test_dataset_properties, ::test_dataset_optional_properties, ::
    test_dataset_default_version, ::test_dataset_optional_properties_explicit_values, ::
    test_dataset_properties_read_only, ::test_dataset_site_data_directory, ::test_without_site_data, ::
    test_dataset_deprecation_message, ::test_dataset_equality_and_sorting."""
    monkeypatch.chdir(tmp_path)
    dataset = Dataset(name="benchmark://test-v2", description="A test dataset", license="MIT",
                      site_data_base="test")
    assert (dataset.name, dataset.scheme, dataset.version) == ("benchmark://test-v2", "benchmark", 2)
    assert (dataset.description, dataset.license) == ("A test dataset", "MIT")
    assert dataset.references == {} and not dataset.deprecated and dataset.sort_order == 0
    assert dataset.validatable == "No" and dataset.has_site_data and dataset.size == 0 == len(dataset)
    assert dataset.site_data_path == tmp_path.resolve() / "test" / "benchmark" / "test-v2"
    assert not dataset.site_data_path.is_dir()
    for name in ("name", "description", "license", "site_data_path"):
        with pytest.raises(AttributeError):
            setattr(dataset, name, "x")
    assert Dataset(name="benchmark://test", description="", license="").version == 0
    without = Dataset(name="benchmark://test-v0", description="A test dataset", license="MIT")
    with pytest.raises(ValueError, match=r"^Dataset has no site data path: benchmark://test-v0$"):
        without.site_data_path
    old = Dataset(name="benchmark://test-v0", description="", license="MIT", references={"GitHub": "url"},
                  deprecated="The cat sat on the mat", sort_order=10, validatable="Yes")
    assert old.deprecated and old.references == {"GitHub": "url"} and (old.sort_order, old.validatable) == (10, "Yes")
    with pytest.warns(DeprecationWarning, match="The cat sat on the mat"):
        old.install()
    a, a2, b = (Dataset(name=f"benchmark://{n}-v0", description="", license="") for n in "aab")
    assert a == a2 and a != b and a < b and a <= b and b > a and a == "benchmark://a-v0" and a < "benchmark://b-v0"
    assert sorted([a2, b, a]) == ["benchmark://a-v0", "benchmark://a-v0", "benchmark://b-v0"]


def test_dataset_subclass_serves_parsed_uris():
    """tests/datasets/dataset_test.py::test_dataset_size, ::test_benchmarks_lookup_by_uri, ::test_benchmarks_iter:
    a subclass gives ``benchmark_uris``, ``benchmark_from_parsed_uri`` and ``size``."""

    class Three(Dataset):
        def __init__(self):
            super().__init__(name="benchmark://test-v0", description="A test dataset", license="MIT")
            self._values = {"benchmark://test-v0/a": 1, "benchmark://test-v0/b": 2, "benchmark://test-v0/c": 3}

        def benchmark_uris(self):
            return sorted(self._values)

        def benchmark_from_parsed_uri(self, uri):
            return self._values[str(uri)]

        @property
        def size(self):
            return len(self._values)

    dataset = Three()
    assert dataset.size == 3 == len(dataset)
    assert dataset.benchmark("benchmark://test-v0/b") == 2 == dataset["benchmark://test-v0/b"]
    assert list(dataset.benchmarks()) == [1, 2, 3] == list(dataset)


@pytest.fixture(params=[False, True], ids=["listed", "memoized"])
def files(tmp_path, request):
    root = tmp_path / "files"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    (root / "e.txt").write_text("e")
    for name in ("f.txt", "g.jpg", "a/a.txt", "a/b.txt", "b/a.txt", "b/b.txt", "b/c.txt", "b/d.jpg"):
        (root / name).touch()
    return FilesDataset(name="benchmark://test-v0", description="", license="MIT", dataset_root=root,
                        site_data_base=tmp_path / "site_data", memoize_uris=request.param)


def test_files_dataset(files):
    """tests/datasets/files_dataset_test.py::test_populated_dataset, ::test_populated_dataset_benchmark_lookup,
    ::test_populated_dataset_first_file, ::test_populated_dataset_benchmark_lookup_not_found, ::
    test_populated_dataset_with_file_extension_filter, ::test_populated_dataset_random_benchmark."""
    assert files.installed
    assert list(files.benchmark_uris()) == [f"benchmark://test-v0/{p}" for p in (
        "e.txt", "f.txt", "g.jpg", "a/a.txt", "a/b.txt", "b/a.txt", "b/b.txt", "b/c.txt", "b/d.jpg")]
    assert files.size == 9
    found = files.benchmark("benchmark://test-v0/e.txt")
    assert found.uri == found.proto.uri == "benchmark://test-v0/e.txt" and found.proto.program.contents == b"e"
    assert next(files.benchmarks()).uri == "benchmark://test-v0/e.txt"
    with pytest.raises(LookupError, match=r"^Benchmark not found: benchmark://test-v0/not/a/file"):
        files.benchmark("benchmark://test-v0/not/a/file")
    with pytest.raises(LookupError, match="Benchmark not found"):
        files.benchmark("benchmark://test-v0/../../etc/passwd")
    rng = np.random.default_rng(0)
    assert len({files.random_benchmark(rng).uri for _ in range(3)}) == 3
    files.benchmark_file_suffix = ".jpg"
    assert list(files.benchmark_uris()) == ["benchmark://test-v0/g", "benchmark://test-v0/b/d"]
    assert files.size == 2


def test_files_dataset_of_programs_keeps_its_short_form(tmp_path):
    """This package's ``FilesDataset(name, folder)``: the C/C++/IR programs of the folder, suffix dropped."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.ll").write_bytes(IR)
    (tmp_path / "notes.txt").write_text("not a program\n")
    dataset = FilesDataset("mine-v0", tmp_path)
    assert isinstance(dataset, ProgramsDataset) and dataset.name == "benchmark://mine-v0"
    assert list(dataset.benchmark_uris()) == ["benchmark://mine-v0/sub/f"] and dataset.size == 1
    assert dataset.benchmark("sub/f") is dataset.benchmark("benchmark://mine-v0/sub/f")
    assert dataset.benchmark("sub/f").proto.program.contents == IR


def test_runtime_data_set_parameter(tmp_path):
    """tests/llvm/datasets/cbench_test.py::test_cbench_v1_dataset_param, ::test_cbench_v1_dataset_out_of_range:
    ``?dataset=N`` picks the N-th build-and-run configuration of a program (default 0)."""
    (tmp_path / "qsort.bc").write_bytes(IR)
    configs = [BenchmarkDynamicConfig(run_cmd=Command(argument=["./a.out", f"{i}.dat"])) for i in (1, 2)]
    datasets = Datasets([FilesDataset(tmp_path, ".bc", name="benchmark://cbench-v1", dynamic_configs={
        "qsort": configs})])
    a = datasets.benchmark("cbench-v1/qsort?dataset=0")
    b = datasets.benchmark("cbench-v1/qsort?dataset=0")
    c = datasets.benchmark("cbench-v1/qsort?dataset=1")
    assert a.proto.dynamic_config == b.proto.dynamic_config == configs[0]
    assert c.proto.dynamic_config == configs[1] and c.proto.dynamic_config is not configs[1]
    assert datasets.benchmark("cbench-v1/qsort").dynamic_config == configs[0]
    for bad in ("50", "abc"):
        with pytest.raises(ValueError, match=f"Invalid dataset: {bad}"):
            datasets.benchmark(f"cbench-v1/qsort?dataset={bad}")


class Mock:
    """A dataset as CompilerGym's tests/datasets/datasets_test.py mocks one."""

    def __init__(self, name, uris=()):
        self.name, self.deprecated, self.sort_order, self.size = name, False, 0, len(uris)
        self.uris = list(uris)

    def benchmark_uris(self):
        return iter(self.uris)

    def benchmarks(self):
        return iter(self.uris)

    def benchmark_from_parsed_uri(self, uri):
        return self.uris[self.uris.index(str(uri))]


def test_datasets_collection():
    """tests/datasets/datasets_test.py::test_enumerate_datasets_with_custom_sort_order, ::
    test_enumerate_deprecated_datasets, ::test_datasets_add_dataset, ::test_datasets_add_deprecated_dataset, ::
    test_datasets_remove, ::test_datasets_get_item_default_scheme, ::test_datasets_get_item_lookup_miss, ::
    test_benchmark_lookup_by_uri, ::test_round_robin, ::test_benchmark_uris_order."""
    foo = Mock("benchmark://foo-v0", ["benchmark://foo-v0/abc", "benchmark://foo-v0/123"])
    bar = Mock("benchmark://bar-v0", ["benchmark://bar-v0/abc", "benchmark://bar-v0/123"])
    datasets = Datasets([foo, bar])
    assert list(datasets) == [bar, foo] and datasets.size == 2 == len(datasets)
    assert list(datasets.benchmark_uris()) == ["benchmark://bar-v0/abc", "benchmark://foo-v0/abc",
                                               "benchmark://bar-v0/123", "benchmark://foo-v0/123"]
    assert datasets.benchmark("benchmark://foo-v0/abc") == "benchmark://foo-v0/abc"
    foo.sort_order = -1
    assert list(datasets) == [foo, bar]
    assert datasets["foo-v0"] is foo and "foo-v0" in datasets and "benchmark://baz-v0" not in datasets
    with pytest.raises(LookupError, match=r"^Dataset not found: benchmark://baz-v0$"):
        datasets["benchmark://baz-v0"]
    bar.deprecated = True
    assert list(datasets) == [foo] and list(datasets.datasets(with_deprecated=True)) == [foo, bar]
    old = Mock("benchmark://a")
    old.deprecated = True
    datasets["benchmark://old-v0"] = old
    assert datasets["old-v0"] is old and list(datasets) == [foo]
    del datasets["benchmark://foo-v0"]
    assert list(datasets) == [] and "foo-v0" not in datasets
    assert list(round_robin_iterables([iter([0, 1, 2, 3]), iter("ab"), iter([0.5])])) == [
        0, "a", 0.5, 1, "b", 2, 3]


def test_file_scheme(tmp_path):
    """tests/datasets/datasets_test.py::test_dataset_file_scheme; tests/datasets/benchmark_test.py::
    test_benchmark_from_file_not_found."""
    (tmp_path / "file.dat").write_text("hello, world")
    benchmark = Datasets(datasets={}).benchmark(f"file://{tmp_path}/file.dat")
    assert benchmark.proto.uri == benchmark.uri == f"file://{tmp_path}/file.dat"
    assert benchmark.proto.program.contents == b"hello, world"
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "missing.txt")):
        Benchmark.from_file("benchmark://example-compiler-v0/foo", tmp_path / "missing.txt")


def test_generator_seed_retries():
    """tests/llvm/datasets/csmith_test.py::test_csmith_from_seed_retry_count_exceeded."""
    csmith = GeneratorDataset("generator://csmith-v0", "programs generated by csmith")
    with pytest.raises(OSError, match="Csmith failed after 5 attempts with seed 1"):
        csmith.benchmark_from_seed(seed=1, max_retries=3, retry_count=5)
    assert csmith.benchmark_from_seed(7).uri == "generator://csmith-v0/7" == csmith.benchmark("7").uri
    assert csmith.size == 0 and csmith.benchmark_from_seed(7).runnable


def test_a_benchmark_commands_output_redirections_write_files_in_its_folder_only(tmp_path):
    """cBench's pre-run command ``echo 1 >_finfo_dataset`` makes a file that its program reads; CompilerGym runs
    it through a shell, the shim applies the redirection itself and refuses one that leaves the folder."""
    from behavioral_pq.env.compiler_gym.benchmarks import run_benchmark_command
    from behavioral_pq.env.compiler_gym.datasets import Command
    from behavioral_pq.errors import BenchmarkInitError

    run_benchmark_command(Command(argument=["echo", "1", ">_finfo_dataset"]), cwd=tmp_path, bitcode=tmp_path / "a.bc")
    assert (tmp_path / "_finfo_dataset").read_text() == "1\n"
    run_benchmark_command(Command(argument=["echo", "2", ">>", "_finfo_dataset"]), cwd=tmp_path,
                          bitcode=tmp_path / "a.bc")
    assert (tmp_path / "_finfo_dataset").read_text() == "1\n2\n"
    (tmp_path / "inner").mkdir()
    with pytest.raises(BenchmarkInitError, match="outside its working folder"):
        run_benchmark_command(Command(argument=["echo", "x", ">../escaped"]), cwd=tmp_path / "inner",
                              bitcode=tmp_path / "a.bc")
    assert not (tmp_path / "escaped").exists()
