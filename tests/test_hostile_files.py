"""Hostile files where sources are found and outputs written: a FIFO among the sources or at an output path never
hangs, a symbolic link is never written through or taken for a generated program, a command line that loads a
plugin is refused, and two learners saving one program library keep what both learned."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, plant_plugin

from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.errors import CorpusError, LibraryError, OutputPathError

# a FIFO with no writer blocks open() for ever: every test here must end quickly, hang or not
pytestmark = pytest.mark.timeout(60)

MATMUL = "benchmark://examples-v0/matmul"


def bpq_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


# == sources: a FIFO is never opened ===============================================================================

def test_a_fifo_among_the_sources_is_a_failed_row_not_a_hang(tmp_path):
    sources = tmp_path / "src"
    sources.mkdir()
    shutil.copy(EXAMPLES / "sum_array.c", sources / "a.c")
    os.mkfifo(sources / "x.c")
    os.mkfifo(sources / "y.ll")
    run = bpq_cli("corpus", "build", sources, "--out", tmp_path / "store", "--no-labels", "--workers", "1", "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert (summary["done"], summary["new_modules"]) == (3, 1)
    assert summary["failures"] == {"compile:CompileError": 2}
    rows = {Path(r["sources"][0]).name: r for r in Corpus(tmp_path / "store").inputs().to_pylist()}
    assert rows["a.c"]["status"] == "ok"
    for name in ("x.c", "y.ll"):
        assert rows[name]["status"] == "failed"
        assert rows[name]["error"].endswith(f"{sources.resolve() / name}: is a FIFO, not a regular file; not compiled")


def test_a_fifo_named_as_the_source_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "x.c")
    run = bpq_cli("corpus", "build", tmp_path / "x.c", "--out", tmp_path / "store", "--no-labels", "--workers", "1")
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == [f"bpq: error: {tmp_path / 'x.c'}: is a FIFO, not a source file or a "
                                               "directory; not read"]


# == outputs of the CompilerGym shim: checked, written atomically =================================================

@pytest.fixture
def gym_env():
    import behavioral_pq.env.compiler_gym as compiler_gym

    with compiler_gym.make("llvm-v0", benchmark=MATMUL) as env:
        env.reset()
        yield env


@pytest.mark.parametrize("write", ["write_bitcode", "write_ir"])
def test_the_shim_refuses_to_write_into_a_fifo_a_device_or_through_a_link(gym_env, tmp_path, write):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="out.fifo: is not a regular file"):
        getattr(gym_env, write)(fifo)
    with pytest.raises(OutputPathError, match="/dev/null: is not a regular file"):
        getattr(gym_env, write)("/dev/null")
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n")
    link = tmp_path / "out.bc"
    link.symlink_to(target)
    with pytest.raises(OutputPathError, match="out.bc: is a symbolic link"):
        getattr(gym_env, write)(link)
    assert target.read_text() == "precious\n" and link.is_symlink()
    assert getattr(gym_env, write)(link, overwrite=True) == link   # asked for: the link's target is written
    assert link.is_symlink() and target.read_bytes() != b"precious\n"


def test_the_shim_writes_bitcode_and_ir_whole(gym_env, tmp_path):
    bitcode = gym_env.write_bitcode(tmp_path / "out.bc")
    assert bitcode.read_bytes() == gym_env.observation["Bitcode"].tobytes()
    ir = gym_env.write_ir(tmp_path / "out.ll")
    assert ir.read_text() == gym_env.ir
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bc", "out.ll"]    # no temporary left behind


# == command lines of the CompilerGym shim: screened as a compile database =========================================

@pytest.fixture
def plugin(tmp_path):
    """A folder with a unit and a planted plugin whose constructor writes a marker when anything loads it."""
    plant_plugin(tmp_path, tmp_path / "PLUGIN-RAN")
    return tmp_path


@pytest.mark.parametrize("flags, named", [
    (["-fplugin={dir}/evil.so"], "'-fplugin={dir}/evil.so': it loads code into clang"),
    (["-fpass-plugin={dir}/evil.so"], "'-fpass-plugin={dir}/evil.so': it loads code into clang"),
    (["-Xclang", "-load", "-Xclang", "{dir}/evil.so"], "'-Xclang -load': it passes options to clang's front end"),
])
def test_a_command_line_that_loads_a_plugin_is_refused(plugin, flags, named):
    from behavioral_pq.env.compiler_gym import make_benchmark_from_command_line

    flags = [f.format(dir=plugin) for f in flags]
    with pytest.raises(ValueError, match="refused flag " + named.format(dir=plugin).replace("(", r"\(")
                       .replace(")", r"\)")) as caught:
        make_benchmark_from_command_line(["gcc", *flags, str(plugin / "a.c"), "-o", str(plugin / "a.out")])
    assert "\n" not in str(caught.value)
    assert not (plugin / "PLUGIN-RAN").exists()


def test_a_plain_command_line_still_builds_and_a_trusted_one_takes_every_flag(plugin, monkeypatch):
    import behavioral_pq.env.compiler_gym as compiler_gym

    monkeypatch.chdir(plugin)      # reset() builds a command's output, a.out in the current folder without -o
    with compiler_gym.make("llvm-v0") as env:
        plain = env.make_benchmark_from_command_line(["gcc", "-DNDEBUG", "-O2", "-Wall", str(plugin / "a.c"), "-o",
                                                      str(plugin / "a.out"), "-lm"])
        assert plain.uri.startswith("benchmark://clang-v0/")
        env.reset(benchmark=plain)
        assert env.observation["IrInstructionCount"] > 0
        with pytest.raises(ValueError, match="'-Xclang -disable-O0-optnone'"):
            env.make_benchmark_from_command_line(["gcc", "-Xclang", "-disable-O0-optnone", str(plugin / "a.c")])
        trusted = env.make_benchmark_from_command_line(["gcc", "-Xclang", "-disable-O0-optnone",
                                                        str(plugin / "a.c")], allow_plugins=True)
        env.reset(benchmark=trusted)
        assert env.observation["IrInstructionCount"] > 0


# == Csmith generation: a planted link is never taken for Csmith's program =========================================

needs_csmith = pytest.mark.skipif(shutil.which("csmith") is None and not os.environ.get("BPQ_CSMITH"),
                                  reason="csmith is not installed")


@needs_csmith
def test_a_link_planted_as_a_csmith_program_is_replaced_not_followed(tmp_path):
    from behavioral_pq.corpus.csmith import generate_csmith

    planted = tmp_path / "planted.c"
    planted.write_text("int main(void) { return 0; }\n")
    out = tmp_path / "gen"
    out.mkdir()
    (out / "csmith-0-000000.c").symlink_to(planted)
    record = generate_csmith(1, out, seed=0)
    program = out / "csmith-0-000000.c"
    assert [p["file"] for p in record["programs"]] == ["csmith-0-000000.c"] and not record["failures"]
    assert not program.is_symlink() and program.is_file()
    assert "This is a RANDOMLY GENERATED PROGRAM" in program.read_text()
    assert planted.read_text() == "int main(void) { return 0; }\n"


@needs_csmith
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_csmith_program_name_taken_by_a_fifo_or_folder_is_refused(tmp_path, kind):
    from behavioral_pq.corpus.csmith import generate_csmith

    out = tmp_path / "gen"
    out.mkdir()
    taken = out / "csmith-0-000000.c"
    if kind == "fifo":
        os.mkfifo(taken)
    else:
        taken.mkdir()
    with pytest.raises(CorpusError, match=f"^{taken}: is not a regular file .* where a Csmith program goes; "
                                          "remove it$"):
        generate_csmith(1, out, seed=0)
    assert not (out / "csmith.json").exists()
    assert taken.is_fifo() if kind == "fifo" else taken.is_dir()


# == the program library: concurrent learners keep what both learned ===============================================

@pytest.fixture(scope="module")
def encoder():
    from behavioral_pq.embedding.encoder import load_encoder

    return load_encoder()


def _row(encoder, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=encoder.dim).astype(np.float32)


@pytest.fixture
def library_folder(tmp_path, encoder):
    """A saved library of three programs built on the shipped encoder."""
    from behavioral_pq.artifacts import encoder_identity
    from behavioral_pq.tasks.guidance import LibraryProgram, ProgramLibrary

    programs = [LibraryProgram(f"p{i}", f"p{i}.c", 100 + i, 90 + i, {("-gvn",): 95 + i}) for i in range(3)]
    rows = np.stack([_row(encoder, i) for i in range(3)])
    ProgramLibrary(programs, rows, encoder_identity(encoder)).save(tmp_path / "lib")
    return tmp_path / "lib"


def test_two_learners_saving_one_library_keep_both_programs(library_folder, encoder):
    from behavioral_pq.tasks.guidance import load_library

    first = load_library(library_folder, encoder=encoder)
    second = load_library(library_folder, encoder=encoder)      # loaded before the first saves: a stale copy
    assert first.learn("new-a", _row(encoder, 10), {("-Oz",): 40, ("-sroa",): 30}, name="a.c",
                       instruction_count=50, oz_count=40)
    assert second.learn("new-b", _row(encoder, 11), {("-Oz",): 60, ("-instcombine",): 55}, name="b.c",
                        instruction_count=70, oz_count=60)
    first.learn("p0", _row(encoder, 0), {("-dce",): 80})
    second.learn("p0", _row(encoder, 0), {("-adce",): 81})
    first.save(library_folder)
    second.save(library_folder)
    merged = load_library(library_folder, encoder=encoder)
    assert [p.program for p in merged.programs] == ["p0", "p1", "p2", "new-a", "new-b"]
    assert merged.revision == 4      # each learner's two revisions, both counted
    by_name = {p.program: p for p in merged.programs}
    assert by_name["new-a"].results == {("-sroa",): 30} and by_name["new-a"].oz_count == 40
    assert by_name["new-b"].results == {("-instcombine",): 55} and by_name["new-b"].oz_count == 60
    assert by_name["p0"].results == {("-gvn",): 95, ("-dce",): 80, ("-adce",): 81}
    np.testing.assert_array_equal(merged.embeddings[3], _row(encoder, 10))
    np.testing.assert_array_equal(merged.embeddings[4], _row(encoder, 11))
    assert merged.neighbors(_row(encoder, 11), 1)[0][0] == 4
    # the stale copy now holds the merged library too: saving it again loses nothing either
    assert len(second) == 5 and second.revision == 4
    second.save(library_folder)
    assert len(load_library(library_folder, encoder=encoder)) == 5


def test_a_library_save_waits_for_the_lock_of_another_saver(library_folder, encoder):
    from behavioral_pq.tasks.guidance import load_library

    library = load_library(library_folder, encoder=encoder)
    library.learn("new-a", _row(encoder, 10), {("-Oz",): 40, ("-sroa",): 30})
    before = (library_folder / "library.json").read_bytes()
    lock = library_folder.parent / f".{library_folder.name}.lock"
    with open(lock, "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)      # another saver between its read and its write
        saver = threading.Thread(target=library.save, args=(library_folder,))
        saver.start()
        time.sleep(1.0)
        assert saver.is_alive() and (library_folder / "library.json").read_bytes() == before
    saver.join(timeout=60)
    assert not saver.is_alive()
    assert "new-a" in {p.program for p in load_library(library_folder, encoder=encoder).programs}


def test_saving_into_a_library_replaced_by_another_encoders_is_refused(library_folder, encoder):
    from behavioral_pq.artifacts import seal
    from behavioral_pq.tasks.guidance import load_library

    library = load_library(library_folder, encoder=encoder)
    library.learn("new-a", _row(encoder, 10), {("-Oz",): 40, ("-sroa",): 30})
    config = json.loads((library_folder / "library.json").read_text())
    config["encoder"] = dict(config["encoder"], model_sha256="0" * 64)
    del config["digest"]
    (library_folder / "library.json").write_text(json.dumps(seal(config)))
    with pytest.raises(LibraryError, match="now holds a library of another encoder .model_sha256 differs."):
        library.save(library_folder)
    assert json.loads((library_folder / "library.json").read_text())["encoder"]["model_sha256"] == "0" * 64
