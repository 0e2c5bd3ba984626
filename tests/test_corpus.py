"""Corpus store: records and labels against independent computation, duplicates, failures, resume after a kill,
concurrent writers, splits by group, Dask LocalCluster equals local, compile_commands, Csmith, stored spectra."""

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import DATA, EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.core.catalog import get_pass
from behavioral_pq.core.toolchain import find_tool
from behavioral_pq.corpus import (
    Corpus,
    CorpusStore,
    build_corpus,
    compute_spectra,
    discover,
    from_compile_commands,
    label_corpus,
    split_corpus,
)
from behavioral_pq.corpus.build import JobOptions, spectra_task
from behavioral_pq.corpus.inputs import load_bitcode
from behavioral_pq.embedding.probes import random_probes
from behavioral_pq.errors import CompileError, CorpusError


def tiny_programs(directory: Path, count: int) -> Path:
    """``count`` small, distinct C programs (a loop over an array with a different shape each)."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (directory / f"p{i:03d}.c").write_text(textwrap.dedent(f"""\
            int data[{8 + i}];
            int f{i}(int n) {{
              int s = {i};
              for (int k = 0; k < n && k < {8 + i}; k++) s += data[k] * {i % 5 + 1} + (k ^ {i});
              return s;
            }}
            """))
    return directory


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The shipped examples, a byte-identical copy of one (a duplicate), C that does not compile, invalid IR,
    an .ll file, and a two-file directory for --per directory."""
    root = tmp_path_factory.mktemp("sources")
    for p in EXAMPLES.glob("*.c"):
        shutil.copy(p, root / p.name)
    (root / "copies").mkdir()
    shutil.copy(EXAMPLES / "sum_array.c", root / "copies" / "sum_array_again.c")
    (root / "broken.c").write_text("int f( { return }\n")
    (root / "garbage.ll").write_text("this is not LLVM IR\n")
    shutil.copy(DATA / "autophase" / "switch_dup.ll", root / "switch_dup.ll")
    two = root / "linked"
    two.mkdir()
    (two / "main.c").write_text("int helper(int);\nint main(void) { return helper(41); }\n")
    (two / "helper.c").write_text("int helper(int x) { int y = x; return y + 1; }\n")
    return root


@pytest.fixture(scope="module")
def store(sources, tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "s"
    items = [i for i in discover([sources], origin="tests") if "linked" not in i.sources[0]]
    summary = build_corpus(items, path, workers=1)
    return path, summary


def opt_count(module: bpq.Module, pipeline: str, tmp_path: Path) -> int:
    """Instruction count after ``opt-19 -passes=pipeline``: an independent run of the same pass."""
    src = tmp_path / "in.bc"
    src.write_bytes(module.bitcode)
    out = subprocess.run([find_tool("opt"), f"-passes={pipeline}", str(src), "-o", "-"], capture_output=True,
                         check=True).stdout
    return bpq.load_module(out).instruction_count


def test_build_records_features_and_failures(store, sources):
    path, summary = store
    assert summary.done == 8 and summary.skipped == 0
    assert summary.failures == {("compile", "CompileError"): 1, ("prepare", "InvalidIRError"): 1}
    assert summary.duplicates == 1 and summary.new_modules == 5
    corpus = Corpus(path)
    assert len(corpus) == 5
    inputs = {Path(r["sources"][0]).name: r for r in corpus.inputs().to_pylist()}
    assert inputs["broken.c"]["status"] == "failed" and "expected" in inputs["broken.c"]["error"]
    assert inputs["garbage.ll"]["stage"] == "prepare"
    records = {r["sha256"]: r for r in corpus.records(["sha256", "instruction_count", "autophase",
                                                       "bitcode"]).to_pylist()}
    expected = bpq.load_module(EXAMPLES / "sum_array.c")
    record = records[expected.sha256]
    assert sorted(Path(s).name for s in record["sources"]) == ["sum_array.c", "sum_array_again.c"]
    assert record["instruction_count"] == 63 == expected.instruction_count
    assert record["autophase"] == bpq.autophase(expected).tolist()
    assert record["bitcode"] == expected.bitcode
    assert corpus.info()["duplicates"] == 1


def test_labels_match_independent_opt_runs(store, tmp_path):
    path, _ = store
    labels = {r["sha256"]: r for r in Corpus(path).labels().to_pylist()}
    module = bpq.load_module(EXAMPLES / "matmul.c")
    row = labels[module.sha256]
    for flag in ("-sroa", "-instcombine", "-gvn", "-simplifycfg", "-loop-rotate"):
        p = get_pass(flag)
        assert row["pass_counts"][p.index] == opt_count(module, p.pipeline, tmp_path), flag
    counts = np.array(row["pass_counts"])
    assert row["best_passes"] == np.flatnonzero(counts == counts.min()).tolist()
    assert get_pass("-sroa").index in row["best_passes"]
    assert row["oz_count"] == bpq.optimize(module, "Oz").instruction_count
    assert row["o3_count"] == bpq.optimize(module, "O3").instruction_count
    assert row["oz_benefit"] == pytest.approx((module.instruction_count - row["oz_count"]) / module.instruction_count)
    sum_array = labels[bpq.load_module(EXAMPLES / "sum_array.c").sha256]
    assert sum_array["oz_count"] == 25


def test_rebuild_skips_everything_and_adds_nothing(store, sources):
    path, _ = store
    before = CorpusStore(path).manifest["shards"]
    items = [i for i in discover([sources], origin="tests") if "linked" not in i.sources[0]]
    again = build_corpus(items, path, workers=1)
    assert again.skipped == 8 and again.done == 0
    assert CorpusStore(path).manifest["shards"] == before


def test_per_directory_links_translation_units(sources, tmp_path):
    items = list(discover([sources / "linked"], per="directory", origin="linked"))
    assert len(items) == 1 and len(items[0].sources) == 2
    build_corpus(items, tmp_path / "s", workers=0 or 1, labels=False)
    module = next(Corpus(tmp_path / "s").iter_modules())
    text = module.text()
    assert "define dso_local i32 @main" in text and "define dso_local i32 @helper" in text


def test_compile_commands_keep_each_units_flags(tmp_path):
    project = tmp_path / "proj"
    (project / "include").mkdir(parents=True)
    (project / "include" / "scale.h").write_text("static inline int scale(int x) { return x * SCALE; }\n")
    (project / "a.c").write_text('#include "scale.h"\nint a(int x) { return scale(x) + 1; }\n')
    (project / "b.cpp").write_text("#ifndef NEEDED\n#error NEEDED is required\n#endif\n"
                                   "int b(int x) { return x + NEEDED; }\n")
    commands = [
        {"directory": str(project), "file": "a.c",
         "arguments": ["cc", "-DSCALE=3", "-Iinclude", "-O2", "-g", "-c", "a.c", "-o", "a.o", "-MD", "-MF", "a.d"]},
        {"directory": str(project), "file": str(project / "b.cpp"),
         "command": f"c++ -DNEEDED=7 -std=c++17 -O3 -c {project / 'b.cpp'} -o b.o"},
    ]
    db = project / "compile_commands.json"
    db.write_text(json.dumps(commands))
    items = list(from_compile_commands(db))
    assert items[0].flags == ("-DSCALE=3", "-Iinclude") and items[0].cwd == str(project)
    assert items[1].flags == ("-DNEEDED=7", "-std=c++17") and items[1].language == "c++"
    summary = build_corpus(items, tmp_path / "s", workers=1, labels=False)
    assert summary.failures == {} and summary.new_modules == 2
    texts = [m.text() for m in Corpus(tmp_path / "s").iter_modules()]
    assert any("mul nsw i32 %" in t and ", 3" in t for t in texts)
    db.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        list(from_compile_commands(db))


def test_compile_commands_of_a_make_rule_that_compiles_and_links(tmp_path):
    """Bear's record of ``cc -o tool tool.c libutil.a -lm``: the link's inputs and flags are dropped (clang would
    compile ``libutil.a`` as C otherwise), and clang's own ``-cc1`` job for the same file is skipped."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "tool.c").write_text("int helper(int);\nint main(void) { return helper(SEED); }\n")
    (project / "libutil.a").write_bytes(b"!<arch>\n")
    driver = ["/usr/bin/clang-19", "-c", "-DSEED=4", "-O1", "libutil.a", "libm.so.6", "-L", "/opt/lib", "-Llib",
              "-lm", "-Xlinker", "--as-needed", "-rdynamic", "-o", "tool", "tool.c"]
    frontend = ["/usr/lib/llvm-19/bin/clang", "-cc1", "-triple", "x86_64-pc-linux-gnu", "-emit-obj", "-D", "SEED=4",
                "-o", "/tmp/tool-1.o", "-x", "c", "tool.c"]
    db = project / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(project), "file": str(project / "tool.c"), "arguments": args}
                              for args in (driver, frontend)]))
    items = list(from_compile_commands(db, project="p"))
    assert len(items) == 1 and items[0].flags == ("-DSEED=4",)
    summary = build_corpus(items, tmp_path / "s", workers=1, labels=False)
    assert summary.failures == {} and summary.new_modules == 1
    assert "call i32 @helper(i32 noundef 4)" in next(Corpus(tmp_path / "s").iter_modules()).text()
    (project / "fast.S").write_text(".globl fast\nfast:\n  ret\n")      # a hand-written assembly unit
    db.write_text(json.dumps([{"directory": str(project), "file": "fast.S", "arguments": ["cc", "-c", "fast.S"]}]))
    with pytest.raises(CompileError, match="an assembly source has no LLVM IR"):
        load_bitcode(next(from_compile_commands(db, project="p")))


def test_a_generated_source_the_build_did_not_make_fails_alone(tmp_path):
    """A compile command whose source does not exist (generated by a build step that did not run) is that unit's
    failure; the other units are stored."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.c").write_text("int a(int x) { return x + 1; }\n")
    commands = [{"directory": str(project), "file": name, "arguments": ["cc", "-c", name]}
                for name in ("a.c", "generated/help.c")]
    (project / "compile_commands.json").write_text(json.dumps(commands))
    summary = build_corpus(from_compile_commands(project / "compile_commands.json", project="p"), tmp_path / "s",
                           workers=1, labels=False)
    assert summary.new_modules == 1 and sum(summary.failures.values()) == 1


def test_a_project_with_generated_headers_cxx_and_a_broken_unit(tmp_path):
    """A real program as its build system records it: a header generated into the build folder, per-unit defines,
    a C++ unit, a unit that does not compile. The project is one split group and counts as a real program."""
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "build" / "gen").mkdir(parents=True)
    (project / "build" / "gen" / "config.h").write_text("#define TABLE_SIZE 16\n")   # written by "configure"
    (project / "src" / "table.c").write_text('#include "config.h"\nint table[TABLE_SIZE];\n'
                                             "int lookup(int i) { return table[i % TABLE_SIZE] * FACTOR; }\n")
    (project / "src" / "main.c").write_text('#include "config.h"\nint lookup(int);\n'
                                            "int main(void) { int s = 0; for (int i = 0; i < TABLE_SIZE; i++) "
                                            "s += lookup(i); return s; }\n")
    (project / "src" / "util.cc").write_text("#include <vector>\nint total(const std::vector<int>& v) "
                                             "{ int s = 0; for (int x : v) s += x; return s; }\n")
    (project / "src" / "broken.c").write_text("int broken(void) { return undeclared_thing; }\n")
    build = project / "build"
    # the source is spelled differently in "file" (absolute) and in the command (relative, as Make writes it)
    commands = [{"directory": str(build), "file": str(project / "src" / name),
                 "arguments": [cc, "-Igen", *defines, "-O2", "-c", f"./../src/{name}", "-o", name + ".o"]}
                for name, cc, defines in (("table.c", "cc", ["-DFACTOR=3"]), ("main.c", "cc", []),
                                          ("util.cc", "c++", ["-std=c++17"]), ("broken.c", "cc", []))]
    db = build / "compile_commands.json"
    db.write_text(json.dumps(commands))
    items = list(from_compile_commands(db, project="proj"))
    assert {i.origin for i in items} == {"project:proj"} and {i.group for i in items} == {"proj"}
    with pytest.raises(ValueError, match="origin or project"):
        list(from_compile_commands(db, project="proj", origin="x"))
    with pytest.raises(ValueError, match="plain"):
        list(from_compile_commands(db, project="a/b"))
    store = tmp_path / "s"
    summary = build_corpus(items, store, workers=1, labels=False)
    assert summary.new_modules == 3 and summary.failures == {("compile", "CompileError"): 1}
    texts = [m.text() for m in Corpus(store).iter_modules()]
    assert any("[16 x i32]" in t and "mul nsw i32" in t and ", 3" in t for t in texts)   # generated header, define
    assert any("_Z5totalRKSt6vectorIiSaIiEE" in t for t in texts)                          # the C++ unit
    info = Corpus(store).info()
    assert info["by_kind"] == {"real": {"<200": 3, "200-1k": 0, "1k-5k": 0, "5k-50k": 0, ">50k": 0}}
    assert sum(info["by_size"].values()) == 3
    split_corpus(store, seed=0)
    assert len(set(Corpus(store).store.splits().values())) == 1    # one project, one side


def test_resume_after_kill_equals_uninterrupted_build(tmp_path):
    programs = tiny_programs(tmp_path / "src", 30)
    script = textwrap.dedent(f"""\
        import sys
        from behavioral_pq.corpus import build_corpus, discover
        build_corpus(discover([{str(programs)!r}], origin="t"), sys.argv[1], workers=1, chunk_size=1,
                     shard_rows=1, flush_seconds=0)
        """)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", script, str(killed)])
    deadline = time.time() + 120
    while time.time() < deadline:
        manifest = killed / "manifest.json"
        if manifest.exists() and sum(s["table"] == "inputs" for s in json.loads(manifest.read_text())["shards"]) >= 3:
            break
        time.sleep(0.05)
    children = [int(c) for c in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                 text=True).stdout.split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert children, "the build runs its tasks in pool processes"
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{c}").exists() for c in children), "pool workers exit with a killed driver"
    partial = Corpus(killed).inputs()
    assert 3 <= partial.num_rows < 30, "the kill must land mid-build"
    resumed = build_corpus(discover([programs], origin="t"), killed, workers=1)
    assert resumed.skipped == partial.num_rows and resumed.done == 30 - partial.num_rows
    clean = tmp_path / "clean"
    build_corpus(discover([programs], origin="t"), clean, workers=1)

    def content(path):
        corpus = Corpus(path)
        inputs = sorted((r["key"], r["status"], r["sha256"]) for r in corpus.inputs().to_pylist())
        labels = sorted((r["sha256"], tuple(r["pass_counts"]), r["oz_count"]) for r in corpus.labels().to_pylist())
        return inputs, labels, sorted(corpus.modules(["sha256"]).column(0).to_pylist())

    assert content(killed) == content(clean)
    assert len(content(killed)[0]) == 30 and len({k for k, _, _ in content(killed)[0]}) == 30
    assert not list((killed / "tmp").glob("*")), "temporary files of the killed writer are cleaned up"


def test_two_concurrent_builds_into_one_store(tmp_path):
    programs = tiny_programs(tmp_path / "src", 16)
    script = textwrap.dedent(f"""\
        import sys
        from behavioral_pq.corpus import build_corpus, discover
        build_corpus(discover([{str(programs)!r}], origin="t"), sys.argv[1], workers=1, chunk_size=1,
                     shard_rows=1, flush_seconds=0, labels=False)
        """)
    target = tmp_path / "shared"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(target)]) for _ in range(2)]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    store = CorpusStore(target)
    assert store.verify() == []
    writers = {s["writer"] for s in store.manifest["shards"]}
    assert len(writers) == 2, "both builds wrote shards"
    inputs = Corpus(target).inputs()
    assert inputs.num_rows == 16 and len(set(inputs.column("key").to_pylist())) == 16
    assert len(Corpus(target)) == 16


def test_split_by_group_keeps_groups_and_shared_modules_together(tmp_path):
    src = tmp_path / "src"
    tiny_programs(src / "alpha", 12)
    tiny_programs(src / "beta", 12)   # the same 12 programs: beta's modules equal alpha's
    tiny_programs(src / "gamma", 20)
    for i in range(20):  # make gamma's programs differ from alpha's and beta's
        path = src / "gamma" / f"p{i:03d}.c"
        path.write_text(path.read_text().replace("int s =", "int s = 1000 +"))
    items = list(discover([src], origin="t", group_regex=r"^([a-z]+)/"))
    assert {i.group for i in items} == {"alpha", "beta", "gamma"}
    build_corpus(items, tmp_path / "s", workers=1, labels=False)
    counts = split_corpus(tmp_path / "s", fractions=(0.5, 0.5), names=("train", "test"), seed=3)
    assert sum(counts.values()) == 32
    splits = CorpusStore(tmp_path / "s").splits()
    inputs = Corpus(tmp_path / "s").inputs().to_pylist()
    by_group = {}
    for row in inputs:
        by_group.setdefault(row["group"], set()).add(splits[row["sha256"]])
    assert all(len(v) == 1 for v in by_group.values()), by_group
    assert by_group["alpha"] == by_group["beta"], "groups sharing modules are merged"
    # Same seed, same assignment; the assignment is stored in the manifest.
    assert split_corpus(tmp_path / "s", fractions=(0.5, 0.5), names=("train", "test"), seed=3) == counts
    assert CorpusStore(tmp_path / "s").manifest["splits"]["seed"] == 3
    with pytest.raises(ValueError, match="summing to 1"):
        split_corpus(tmp_path / "s", fractions=(0.5, 0.6), names=("a", "b"))


def test_many_groups_split_near_the_fractions(tmp_path):
    src = tiny_programs(tmp_path / "src", 60)
    build_corpus(discover([src], origin="t"), tmp_path / "s", workers=1, labels=False)
    counts = split_corpus(tmp_path / "s", seed=0)
    assert sum(counts.values()) == 60 and counts["train"] > counts["valid"] and counts["test"] > 0
    assert Corpus(tmp_path / "s").split("test") and len(Corpus(tmp_path / "s").split("train")) == counts["train"]
    with pytest.raises(CorpusError, match="no split named"):
        Corpus(tmp_path / "s").split("nope")


def test_dask_local_cluster_equals_local_run(tmp_path):
    distributed = pytest.importorskip("distributed")
    programs = tiny_programs(tmp_path / "src", 10)
    build_corpus(discover([programs], origin="t"), tmp_path / "local", workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        build_corpus(discover([programs], origin="t"), tmp_path / "dask", executor=client.get_executor(pure=False),
                     chunk_size=2)
        from behavioral_pq.cli.main import main
        assert main(["corpus", "build", str(programs), "--out", str(tmp_path / "cli"), "--origin", "t",
                     "--dask", cluster.scheduler_address, "-q"]) == 0

    def content(path):
        corpus = Corpus(path)
        return (sorted((r["key"], r["sha256"]) for r in corpus.inputs().to_pylist()),
                sorted((r["sha256"], tuple(r["pass_counts"]), r["o3_count"]) for r in corpus.labels().to_pylist()))

    assert content(tmp_path / "dask") == content(tmp_path / "local") == content(tmp_path / "cli")
    assert len(content(tmp_path / "dask")[1]) == 10


def test_stored_spectra_equal_direct_spectra(store):
    path, _ = store
    probes = random_probes(4, 6, seed=1)
    summary = compute_spectra(path, probes, workers=1)
    assert summary.done == 5 and summary.failures == {}
    shas, values = Corpus(path).spectra(probes)
    assert values.shape == (5, 4, 56) and values.dtype == np.float32
    modules = list(Corpus(path).iter_modules())
    direct = bpq.spectra(modules, probes)
    order = [m.sha256 for m in modules]
    np.testing.assert_array_equal(values, direct.spectra[[order.index(s) for s in shas]])
    assert compute_spectra(path, probes, workers=1).done == 0, "nothing is computed twice"
    assert Corpus(path).info()["spectra_outcomes"][probes.hash[:12]] == {"small": {"ok": 5}}
    with pytest.raises(CorpusError, match="no spectra"):
        Corpus(path).spectra(random_probes(2, 3, seed=9))


def test_a_corpus_spectra_job_keeps_a_module_whose_probe_crashes(examples, monkeypatch):
    """The corpus job takes the spectra() path: a crashing pass is left out of its probe and the row says so."""
    from crashing_engine import CrashesOn

    from behavioral_pq.core import engine as engine_module
    from behavioral_pq.core.catalog import sequence_pipeline
    from behavioral_pq.corpus import build

    probes = bpq.load_probes()
    element = {p.flag: p.pipeline for p in bpq.PASSES}
    before, culprit = probes.sequences[3][9], probes.sequences[3][10]
    pair = f"{element[before]},{element[culprit]}"
    assert pair in sequence_pipeline(probes.sequences[3])
    with engine_module.Engine(1) as engine:
        monkeypatch.setattr(build, "_task_engine", lambda timeout: CrashesOn(engine, pair))
        module = examples["sum_array"]
        rows = spectra_task([(module.sha256, module.bitcode)], probes, JobOptions())["spectra"]
    assert rows[0]["status"] == "ok" and rows[0]["error_kind"] == "degraded"
    lost = json.loads(rows[0]["error"])
    assert any(d["probe"] == 3 and d["removed"] == culprit for d in lost)


def test_label_job_fills_in_missing_labels(sources, tmp_path):
    items = [i for i in discover([sources], origin="tests") if i.sources[0].endswith("matmul.c")]
    build_corpus(items, tmp_path / "s", workers=1, labels=False)
    assert Corpus(tmp_path / "s").labels().num_rows == 0
    summary = label_corpus(tmp_path / "s", workers=1)
    assert summary.labelled == 1
    assert Corpus(tmp_path / "s").labels().column("oz_count").to_pylist() == \
        [bpq.optimize(bpq.load_module(EXAMPLES / "matmul.c"), "Oz").instruction_count]


def test_label_command_labels_only_the_modules_under_the_size_limit(sources, tmp_path):
    from behavioral_pq.cli.main import main

    items = [i for i in discover([sources], origin="tests")
             if Path(i.sources[0]).name in ("matmul.c", "sum_array.c")]
    build_corpus(items, tmp_path / "s", workers=1, labels=False)
    sizes = {bpq.load_module(EXAMPLES / n).sha256: bpq.load_module(EXAMPLES / n).instruction_count
             for n in ("matmul.c", "sum_array.c")}
    limit = min(sizes.values())                                     # sum_array's size: matmul is larger
    assert main(["corpus", "label", str(tmp_path / "s"), "--max-instructions", str(limit), "--workers", "1",
                 "-q"]) == 0
    labelled = Corpus(tmp_path / "s").labels().column("sha256").to_pylist()
    assert labelled == [s for s, n in sizes.items() if n <= limit]
    assert main(["corpus", "label", str(tmp_path / "s"), "--workers", "1", "-q"]) == 0   # the rest, resumed
    assert sorted(Corpus(tmp_path / "s").labels().column("sha256").to_pylist()) == sorted(sizes)


def test_corrupt_or_missing_shards_are_named(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store[0], copy)
    shard = copy / CorpusStore(copy).shards("labels")[0]["path"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    problems = CorpusStore(copy).verify()
    assert len(problems) == 1 and shard.name in problems[0] and "checksum" in problems[0]
    shard.write_bytes(bytes(data[:100]))
    with pytest.raises(CorpusError, match="truncated"):
        Corpus(copy).labels()
    (copy / "manifest.json").write_text("{")
    with pytest.raises(CorpusError, match="unreadable manifest"):
        Corpus(copy)
    with pytest.raises(CorpusError, match="not a corpus store"):
        Corpus(tmp_path)


def test_unwritable_shard_leaves_the_store_readable(tmp_path, monkeypatch):
    programs = tiny_programs(tmp_path / "src", 3)
    build_corpus(discover([programs], origin="t"), tmp_path / "s", workers=1, labels=False)
    store = CorpusStore(tmp_path / "s")
    before = store.manifest

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    import pyarrow as pa
    with pytest.raises(CorpusError, match="No space left on device"):
        store.append("inputs", pa.Table.from_pylist(Corpus(tmp_path / "s").inputs().to_pylist()))
    assert CorpusStore(tmp_path / "s").manifest == before
    assert Corpus(tmp_path / "s").inputs().num_rows == 3


def test_csmith_generation_is_reproducible_and_builds(tmp_path):
    from behavioral_pq.corpus.csmith import CSMITH_INCLUDE, generate_csmith

    a = generate_csmith(2, tmp_path / "a", seed=5)
    b = generate_csmith(2, tmp_path / "b", seed=5)
    assert a["programs"] == b["programs"] and a["version"].startswith("csmith")
    for entry in a["programs"]:
        assert (tmp_path / "a" / entry["file"]).read_bytes() == (tmp_path / "b" / entry["file"]).read_bytes()
    recorded = json.loads((tmp_path / "a" / "csmith.json").read_text())
    assert [p["csmith_seed"] for p in recorded["programs"]] == [p["csmith_seed"] for p in a["programs"]]
    summary = build_corpus(discover([tmp_path / "a"], include=[CSMITH_INCLUDE], origin="csmith"), tmp_path / "s",
                           workers=1, labels=False)
    assert summary.new_modules == 2 and summary.failures == {}
    assert all(n > 50 for n in Corpus(tmp_path / "s").modules().column("instruction_count").to_pylist())


def test_two_csmith_seeds_never_name_one_program(engine):
    """Csmith reads every seed above 2^64 - 1 as 2^64 - 1: such a seed is refused, not given that program."""
    from behavioral_pq.corpus.csmith import CSMITH_MAX_SEED, csmith_program
    from behavioral_pq.env.llvm import load_benchmark

    assert b"Seed:      18446744073709551615" in csmith_program(CSMITH_MAX_SEED, ["--max-funcs", "1"])
    for seed in (CSMITH_MAX_SEED + 1, CSMITH_MAX_SEED + 2, -1, True, 1.5):
        with pytest.raises(CorpusError, match="not an integer in 0..18446744073709551615"):
            csmith_program(seed)
    with pytest.raises(CorpusError, match="csmith seed 18446744073709551617 "):
        load_benchmark("generator://csmith-v0/18446744073709551617", engine)


def test_writing_to_a_store_of_another_llvm_version_is_refused(tmp_path):
    store = CorpusStore(tmp_path / "s", create=True)
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    manifest["llvm_major"], manifest["llvm_version"] = 18, "18.1.8"
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match="LLVM 18.1.8"):
        build_corpus([], tmp_path / "s", workers=1)
    assert store.path.exists()


def bpq_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_cli_corpus_end_to_end(sources, tmp_path):
    out = tmp_path / "store"
    run = bpq_cli("corpus", "build", sources, "--out", out, "--origin", "mine", "--workers", "1", "-q", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["done"] == 10 and summary["failures"] == {"compile:CompileError": 1, "prepare:InvalidIRError": 1}
    run = bpq_cli("corpus", "split", out, "--seed", "1")
    assert run.returncode == 0 and "train:" in run.stdout
    run = bpq_cli("corpus", "info", out, "--verify")
    assert run.returncode == 0, run.stderr
    assert "inputs: 10 (8 ok, 2 failed); by origin: mine 10" in run.stdout
    assert "failed compile:CompileError: 1" in run.stdout and "all shards match" in run.stdout
    info = json.loads(bpq_cli("corpus", "info", out, "--json").stdout)
    assert info["modules"] == 7 and info["labels"]["labelled"] == 7
    # A fresh interpreter (regression: Corpus.labels used pyarrow.compute without importing it).
    fresh = subprocess.run([sys.executable, "-c", "import sys; from behavioral_pq.corpus import Corpus; "
                            "print(Corpus(sys.argv[1]).labels().num_rows)", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0 and fresh.stdout.strip() == "7", fresh.stderr
    recorded = CorpusStore(out).manifest["sources"]
    assert recorded[0]["origin"] == "mine" and recorded[0]["summary"]["done"] == 10


@pytest.mark.parametrize("args,message", [
    (("corpus", "build", "/no/such/dir", "--out", "{tmp}/s"), "no such file or directory: /no/such/dir"),
    (("corpus", "build", "--out", "{tmp}/s"), "give SOURCES"),
    (("corpus", "info", "{tmp}"), "not a corpus store"),
    (("corpus", "split", "{tmp}", "--fractions", "a,b"), "--fractions takes comma-separated numbers"),
    (("corpus", "generate", "--csmith", "-1", "--out", "{tmp}/c"), "count must be >= 0"),
    (("corpus", "build", "--compile-commands", "{tmp}/none.json", "--out", "{tmp}/s"), "no such file"),
])
def test_cli_corpus_bad_input_is_one_line(tmp_path, args, message):
    run = bpq_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert run.returncode == 2
    assert run.stderr.startswith("bpq: error: ") and message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_spectra_job_for_one_kind_of_program(tmp_path):
    from behavioral_pq.cli.main import main

    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.c").write_text("int a(int x) { return x * 3 + 1; }\n")
    (project / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(project), "file": "a.c", "arguments": ["cc", "-c", "a.c"]}]))
    small = tiny_programs(tmp_path / "small", 3)
    store = tmp_path / "s"
    build_corpus(from_compile_commands(project / "compile_commands.json", project="p"), store, workers=1, labels=False)
    build_corpus(discover([small], origin="tests"), store, workers=1, labels=False)
    probes = random_probes(3, 4, seed=2)
    probes.save(tmp_path / "probes.json")
    assert main(["corpus", "spectra", str(store), "--kind", "real", "--probes", str(tmp_path / "probes.json"),
                 "--workers", "1", "-q"]) == 0
    corpus = Corpus(store)
    measured = corpus.store.keys("spectra", probe_set=probes.hash)
    assert measured == {s for s, k in corpus.program_kinds().items() if k == "real"} and len(measured) == 1
    small_shas = {s for s, k in corpus.program_kinds().items() if k == "small"}
    sizes = dict(zip(*corpus.modules(["sha256", "instruction_count"]).to_pydict().values()))
    smallest = min(sizes[s] for s in small_shas)
    args = ["corpus", "spectra", str(store), "--kind", "small", "--max-instructions", str(smallest),
            "--sample", "1", "--probes", str(tmp_path / "probes.json"), "--workers", "1", "-q"]
    assert main(args) == 0 and main(args) == 0            # the same draw again: nothing new to measure
    new = Corpus(store).store.keys("spectra", probe_set=probes.hash) - measured
    assert len(new) == 1 and new < small_shas and sizes[next(iter(new))] == smallest


def test_whole_programs_link_each_main_with_the_units_it_needs(tmp_path):
    """Two executables of one project, found as a static linker finds archive members: each main unit with the
    units that define what it uses, transitively; an unused unit and another main stay out; a symbol two units
    define comes from the first by path; libc stays undefined. The programs land in the project's split."""
    from behavioral_pq.cli.main import main
    from behavioral_pq.corpus.programs import program_items, project_units, symbols, whole_programs

    project = tmp_path / "proj"
    project.mkdir()
    sources = {
        "app.c": "#include <stdio.h>\nint parse(const char*);\nint main(int c, char** v) "
                 "{ printf(\"%d\\n\", parse(v[0])); return 0; }\n",
        "tool.c": "int checksum(int);\nint main(void) { return checksum(7); }\n",
        "parse.c": "int scale(int);\nint parse(const char* s) { int n = 0; while (*s) n += scale(*s++); return n; }\n",
        "a_scale.c": "int scale(int x) { return 3 * x; }\nint checksum(int x) { return x ^ 0x5a; }\n",
        "b_scale.c": "int scale(int x) { return 5 * x; }\n",       # defines scale too: a_scale.c comes first
        "unused.c": "int unused(int x) { return x - 1; }\n",
    }
    for name, text in sources.items():
        (project / name).write_text(text)
    (project / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(project), "file": name, "arguments": ["cc", "-c", name]} for name in sources]))
    store = tmp_path / "s"
    build_corpus(from_compile_commands(project / "compile_commands.json", project="p"), store, workers=1,
                 labels=False)

    units, bitcode, group = project_units(store, "p")
    sizes = dict(zip(*Corpus(store).modules(["sha256", "instruction_count"]).to_pydict().values()))
    assert group == "p" and len(units) == len(sources)
    by_name = {Path(u.source).name: u for u in units}
    assert "main" in by_name["app.c"].defined and {"parse", "printf"} <= by_name["app.c"].used
    assert symbols(bitcode[by_name["unused.c"].sha256]) == (frozenset({"unused"}), frozenset())
    programs = {p.name: [Path(u.source).name for u in p.units] for p in whole_programs(units)}
    assert programs == {"app": ["app.c", "parse.c", "a_scale.c"], "tool": ["tool.c", "a_scale.c"]}

    assert main(["corpus", "link", str(store), "--project", "p", "--workers", "1", "--no-labels", "-q"]) == 0
    assert main(["corpus", "link", str(store), "--project", "p", "--workers", "1", "--no-labels", "-q"]) == 0
    corpus = Corpus(store)
    rows = [r for r in corpus.store.read("inputs", ["sha256", "sources", "status", "group"]).to_pylist()
            if len(r["sources"]) > 1]
    assert len(rows) == 2 and all(r["status"] == "ok" and r["group"] == "p" for r in rows)   # built once
    assert corpus.info()["linked_modules"] == 2
    linked = {len(r["sources"]): r["sha256"] for r in rows}
    app = next(m for m in corpus.iter_modules(only={linked[3]}))
    text = app.text()
    assert "define dso_local i32 @main" in text and "define dso_local i32 @scale" in text
    assert "mul nsw i32 3," in text and "mul nsw i32 5," not in text and "@unused" not in text
    split_corpus(store, seed=0)
    assert len(set(Corpus(store).store.splits().values())) == 1    # the programs sit with their units
    row = Corpus(store).projects()["p"]
    assert (row["inputs"], row["failed"], row["modules"], row["linked_programs"]) == (8, 0, 8, 2)
    largest = Corpus(store).info()["instruction_count"]["max"]
    assert len(row["splits"]) == 1 and row["instructions_max"] == largest > max(sizes.values())   # a linked one
    items, programs = program_items(store, "p")
    assert all(Path(s).parent == store / "programs" / "p" for item in items for s in item.sources)
    tool = next(p for p in programs if p.name == "tool")
    assert tool.instruction_count == sum(sizes[u.sha256] for u in tool.units) > 0
    _, kept = program_items(store, "p", max_instructions=tool.instruction_count)
    assert [p.name for p in kept] == ["tool"]                   # app is larger than tool
    with pytest.raises(CorpusError, match="no unit of project 'q'"):
        project_units(store, "q")


def test_a_unit_of_data_only_is_kept_for_the_programs_that_link_with_it(tmp_path):
    """A lookup table in its own file defines no function, so it is no module; the program that reads it still
    links with it (kept under STORE/data-units), and the linked program runs."""
    from behavioral_pq.corpus.programs import DATA_UNITS, NO_CODE, program_items, project_units, write_data_unit
    from behavioral_pq.core.toolchain import assemble, llc_assembly

    project = tmp_path / "proj"
    project.mkdir()
    sources = {"main.c": '#include <stdio.h>\nextern const int squares[5];\nint sum(int);\n'
                         'int main(void) { printf("%d\\n", sum(5)); return 0; }\n',
               "sum.c": "extern const int squares[5];\nint sum(int n) { int s = 0;\n"
                        "  for (int i = 0; i < n; i++) s += squares[i]; return s; }\n",
               "table.c": "const int squares[5] = {0, 1, 4, 9, 16};\n"}
    for name, text in sources.items():
        (project / name).write_text(text)
    (project / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(project), "file": name, "arguments": ["cc", "-c", name]} for name in sources]))
    store = tmp_path / "s"
    summary = build_corpus(from_compile_commands(project / "compile_commands.json", project="p"), store,
                           workers=1, labels=False)
    assert summary.new_modules == 2 and summary.failures == {("prepare", "InvalidIRError"): 1}
    row = next(r for r in Corpus(store).store.read("inputs", ["sources", "status", "error", "sha256"]).to_pylist()
               if r["sources"][0].endswith("table.c"))
    assert row["status"] == "failed" and row["error"].endswith(NO_CODE)
    assert (store / DATA_UNITS / f"{row['sha256']}.bc").is_file()

    units, bitcode, _ = project_units(store, "p")
    table = next(u for u in units if u.source.endswith("table.c"))
    assert table.defined == {"squares"} and table.instruction_count == 0
    items, programs = program_items(store, "p")
    assert [[Path(u.source).name for u in p.units] for p in programs] == [["main.c", "sum.c", "table.c"]]
    build_corpus(items, store, workers=1, labels=False)
    linked = next(m for m in Corpus(store).iter_modules() if "define dso_local i32 @sum" in m.text()
                  and "define dso_local i32 @main" in m.text())
    assert "@squares = dso_local constant [5 x i32] [i32 0, i32 1, i32 4, i32 9, i32 16]" in linked.text()
    binary = assemble(llc_assembly(linked.bitcode), tmp_path / "prog", executable=True)
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout == "30\n"

    (store / DATA_UNITS / f"{row['sha256']}.bc").write_bytes(b"not the table")   # a file that lies is not used
    assert not any(u.source.endswith("table.c") for u in project_units(store, "p")[0])
    with pytest.raises(CorpusError, match="not the sha256"):
        write_data_unit(store, "../" + "0" * 61, b"x")
