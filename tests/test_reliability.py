"""Regression tests for the defects the reliability campaign found (RELIABILITY.md), and small runs of the campaign
tools themselves so that they keep working."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import behavioral_pq as bpq
from behavioral_pq.core.engine import Engine
from behavioral_pq.core.toolchain import find_tool
from behavioral_pq.corpus import Corpus, build_corpus, discover
from behavioral_pq.corpus.store import CorpusStore
from behavioral_pq.embedding.checkpoint import load_checkpoint
from behavioral_pq.errors import CheckpointError, CorpusError, InvalidIRError, PassCrashError

REPO = Path(__file__).resolve().parent.parent
CHECKPOINTS = REPO / "checkpoints"
ABORTING = "function(sroa),licm"  # report_fatal_error in LLVM 19 on any module with a loop


def small_store(tmp_path, n=3, labels=False):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(n):
        (src / f"p{i}.c").write_text(f"int f{i}(int x) {{ int s = 0; for (int k = 0; k < x; k++) s += k * {i + 1};"
                                     " return s; }\n")
    build_corpus(discover([src], origin="t"), tmp_path / "store", workers=1, labels=labels)
    return tmp_path / "store"


# -- engine ------------------------------------------------------------------------------------------------------

def test_crash_error_carries_the_whole_pipeline(examples):
    """Defect 1: the pipeline of a PassCrashError was cut to 200 characters, so the crash could not be replayed."""
    pipeline = ",".join(["function(no-op-function)"] * 20 + [ABORTING])
    assert len(pipeline) > 400
    with Engine(workers=1) as engine:
        with pytest.raises(PassCrashError) as info:
            bpq.optimize(examples["sum_array"], pipeline, engine=engine)
    assert info.value.pipeline == pipeline


@pytest.mark.parametrize("data", [b"\x00\x8d\xff\xfe" * 64, b"BC\xc0\xde" + b"\x8d" * 64, b"\xde\xc0\x17\x0b\x01"])
def test_binary_garbage_is_invalid_ir_with_a_readable_message(data):
    """Defect 2: bytes that are neither bitcode nor UTF-8 made LLVM's diagnostic undecodable, and the user saw
    Python's "'utf-8' codec can't decode" instead of what was wrong."""
    with pytest.raises(InvalidIRError) as info:
        bpq.load_module(data, name="junk.bc")
    message = str(info.value)
    assert message.startswith("junk.bc: ") and "codec" not in message


# -- corpus store ------------------------------------------------------------------------------------------------

def _fail_with(code):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return fail


def test_read_only_store_is_refused_before_any_work(tmp_path, monkeypatch):
    """Defect 3: on a read-only store a build computed until its first flush, then died with a raw OSError from
    the clean-up of its temporary shard."""
    store = small_store(tmp_path)
    before = (store / "manifest.json").read_text()
    monkeypatch.setattr(os, "fsync", _fail_with(errno.EROFS))
    with pytest.raises(CorpusError, match="not writable.*Read-only file system"):
        build_corpus(discover([tmp_path / "src"], origin="t"), store, workers=1, labels=False)
    monkeypatch.undo()
    assert (store / "manifest.json").read_text() == before
    assert Corpus(store).inputs().num_rows == 3


def test_shard_write_failure_on_a_read_only_file_system_is_a_corpus_error(tmp_path, monkeypatch):
    store = CorpusStore(small_store(tmp_path))
    rows = store.read("inputs")
    monkeypatch.setattr(pq, "write_table", _fail_with(errno.EROFS))
    monkeypatch.setattr(Path, "unlink", _fail_with(errno.EROFS))  # the clean-up fails too
    with pytest.raises(CorpusError, match="cannot write a inputs shard.*still readable"):
        store.append("inputs", rows)


def test_full_disk_while_updating_the_manifest_leaves_no_partial_file(tmp_path, monkeypatch):
    store = CorpusStore(small_store(tmp_path))
    before = (store.path / "manifest.json").read_text()
    monkeypatch.setattr(json, "dump", _fail_with(errno.ENOSPC))
    with pytest.raises(CorpusError, match="cannot update the manifest.*No space left"):
        store.update_manifest(note="x")
    monkeypatch.undo()
    assert (store.path / "manifest.json").read_text() == before
    assert not list(store.path.glob(".manifest.json.*"))


def test_a_flipped_bit_in_a_shard_is_refused_on_read(tmp_path):
    """Defect 4: reads checked a shard's size, not its checksum, so a flipped bit could decode as a different
    value. Now every shard is verified before its first read."""
    store = small_store(tmp_path)
    entry = CorpusStore(store).shards("modules")[0]
    path = store / entry["path"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=f"{path.name}: shard checksum does not match"):
        CorpusStore(store).read("modules")
    with pytest.raises(CorpusError, match="checksum"):
        Corpus(store).modules()


def test_flush_seconds_must_be_positive(capsys):
    from behavioral_pq.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["corpus", "build", "x", "--out", "y", "--flush-seconds", "0"])
    assert info.value.code == 2
    assert "--flush-seconds: must be > 0" in capsys.readouterr().err


# -- artifacts ---------------------------------------------------------------------------------------------------

def _copy(name, tmp_path):
    import shutil

    return Path(shutil.copytree(CHECKPOINTS / name, tmp_path / name))


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def test_an_edited_number_in_a_checkpoint_config_is_refused(tmp_path):
    """Defect 5: config.json had no checksum; a changed number (here the layer-norm epsilon) loaded silently."""
    folder = _copy("pqbert-small-m14-s0", tmp_path)
    config = folder / "config.json"
    _edit_json(config, lambda d: d["model"].update(layer_norm_eps=d["model"].get("layer_norm_eps", 1e-5) * 10))
    with pytest.raises(CheckpointError, match="config.json: content digest mismatch"):
        load_checkpoint(folder)


@pytest.mark.parametrize("name,file", [("pqbert-small-m14-s0-oz", "estimator.safetensors"),
                                       ("pqbert-small-m14-s0-oz", "estimator.json"),
                                       ("pqbert-small-m14-s0-oz", "predictor.json")])
def test_corrupt_predictor_files_are_refused(tmp_path, name, file):
    """Defect 6: predictor weights and metadata had no checksums; flipped weight bits gave other predictions."""
    from behavioral_pq.errors import PredictorError
    from behavioral_pq.tasks.predictors import load_predictor

    folder = _copy(name, tmp_path)
    path = folder / file
    data = bytearray(path.read_bytes())
    data[-40] ^= 0x01 if file.endswith(".safetensors") else 0
    if not file.endswith(".safetensors"):  # JSON: change a digit inside a number
        text = data.decode()
        i = next(k for k in range(len(text) - 1, 0, -1) if text[k].isdigit() and text[k] not in "9")
        data = (text[:i] + str(int(text[i]) + 1) + text[i + 1:]).encode()
    path.write_bytes(bytes(data))
    with pytest.raises(PredictorError, match=f"{file}: (checksum|content digest) mismatch"):
        load_predictor(folder)


@pytest.mark.parametrize("file", ["index.faiss", "library.json"])
def test_corrupt_library_files_are_refused(tmp_path, file):
    """Defect 7: the program library's index had no checksum, and library.json's numbers none either."""
    from behavioral_pq.errors import LibraryError
    from behavioral_pq.tasks.guidance import load_library

    folder = _copy("pqbert-small-m14-s0-library", tmp_path)
    path = folder / file
    if file == "index.faiss":
        data = bytearray(path.read_bytes())
        data[-8] ^= 0x04
        path.write_bytes(bytes(data))
    else:
        _edit_json(path, lambda d: d["scale"].__setitem__(0, d["scale"][0] * 1.5))
    with pytest.raises(LibraryError, match=f"{file}: (checksum|content digest) mismatch"):
        load_library(folder)


def test_a_probe_set_file_with_a_non_utf8_byte_is_a_probe_set_error(tmp_path):
    """Defect 8: a flipped high bit in probes.json raised UnicodeDecodeError, naming no file."""
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.errors import ProbeSetError

    path = tmp_path / "probes.json"
    data = bytearray((CHECKPOINTS / "pqbert-small-m14-s0" / "probes.json").read_bytes())
    data[len(data) // 2] |= 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(ProbeSetError, match=r"probes.json: unreadable probe set \(not UTF-8 text"):
        load_probes(path)


# -- inputs ------------------------------------------------------------------------------------------------------

def test_input_fault_matrix_through_the_cli(tmp_path):
    """A slice of bench/faults/fault_inputs.py: bad inputs give one clean error line naming the input; no shell
    runs."""
    sys.path.insert(0, str(REPO / "bench" / "faults"))
    try:
        import fault_inputs
    finally:
        sys.path.remove(str(REPO / "bench" / "faults"))
    result = fault_inputs.run_campaign(tmp_path, huge_mib=2, commands=["features", "lower"], timeout=120)
    defects = [r for r in result["records"] if r["outcome"] == "defect"]
    assert not defects, defects
    assert not result["shell_ran_user_string"]
    outcomes = {(r["command"], r["input"]): r["outcome"] for r in result["records"]}
    assert outcomes[("features", "garbage")] == "error"
    assert outcomes[("features", "valid-c-nasty-name")] == "ok"
    assert outcomes[("lower", "empty-c")] == "error"       # an empty program is refused, not lowered


# -- the fuzz tool -----------------------------------------------------------------------------------------------

def test_fuzz_campaign_tool_runs_resumes_and_replays(tmp_path):
    script = REPO / "bench" / "faults" / "fuzz_engine.py"
    out = tmp_path / "fuzz"
    run = [sys.executable, str(script), "run", "--out", str(out), "--modules", "6", "--batch", "3", "--seed", "3"]
    subprocess.run(run, check=True, capture_output=True, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == 6 and summary["host_deaths"] == 0 and summary["untyped_errors"] == 0
    assert sum(summary["by_kind"].values()) == 6
    stamp = (out / "batches" / "batch-00000.json").stat().st_mtime_ns
    subprocess.run(run, check=True, capture_output=True, timeout=600)  # resumes: nothing to redo
    assert (out / "batches" / "batch-00000.json").stat().st_mtime_ns == stamp
    cases = sorted((out / "cases").iterdir()) if (out / "cases").exists() else []
    assert cases, "the seeded fuzz run kept no crash case, so replay went untested (pick another --seed)"
    case = cases[0]
    info = json.loads((case / "case.json").read_text())
    replay = subprocess.run([sys.executable, str(script), "replay", str(case)], capture_output=True,
                            text=True, timeout=600)
    assert f"recorded {info['error_kind']}" in replay.stdout
    if info["error_kind"] == "PassCrashError":
        assert replay.returncode == 1 and "replay: PassCrashError" in replay.stdout


# -- results that depended on memory layout ------------------------------------------------------------------

def test_a_layout_dependent_crash_is_recorded_the_same_in_every_build(tmp_path):
    """An llvm-stress module whose spectra crashed LLVM in some processes and not in others (5 of 12 runs
    succeeded): engine workers now run with a fixed address layout, so six builds record one outcome."""
    module = tmp_path / "stress.ll"
    subprocess.run([find_tool("llvm-stress"), "--seed=1156370259", "--size=10", "-o", str(module)], check=True)
    outcomes = []
    for i in range(6):
        store = tmp_path / f"store{i}"
        for verb in (["corpus", "build", str(module), "--out", str(store)], ["corpus", "spectra", str(store)]):
            subprocess.run([sys.executable, "-m", "behavioral_pq", *verb, "-q", "--workers", "1"], check=True,
                           capture_output=True, timeout=300)
        failures = json.loads(subprocess.run([sys.executable, "-m", "behavioral_pq", "corpus", "info", str(store),
                                              "--failures", "--json"], capture_output=True, text=True,
                                             timeout=300).stdout)
        outcomes.append(sorted((f["table"], f["error_kind"]) for f in failures))
    assert all(o == outcomes[0] for o in outcomes), outcomes
