"""The one atomic writer and the sealing helpers every saved artifact uses."""

import json
import threading

import pytest

from behavioral_pq.artifacts import (
    atomic_path,
    check_files,
    check_seal,
    file_checksums,
    read_sealed_config,
    seal,
    write_json_atomic,
    write_text_atomic,
)
from behavioral_pq.errors import BPQError, PredictorError


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_folder_is_replaced_whole(tmp_path):
    target = tmp_path / "model"
    for version in ("1", "2"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "weights").write_text(version)
            if version == "1":
                (tmp / "only-in-v1").write_text("x")
    assert sorted(p.name for p in target.iterdir()) == ["weights"]
    assert (target / "weights").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_writing_nothing_is_an_error_and_keeps_the_old(tmp_path):
    target = tmp_path / "a.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with atomic_path(target):
            pass
    assert json.loads(target.read_text()) == {"a": 1}


def test_concurrent_writers_never_share_a_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    names, barrier = [], threading.Barrier(8)

    def write(i):
        with atomic_path(target) as tmp:
            names.append(tmp.name)
            barrier.wait(timeout=10)
            tmp.write_text(json.dumps({"writer": i}))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == 8
    assert json.loads(target.read_text())["writer"] in range(8)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


def test_seals_and_file_checksums_catch_edits(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\x00\x01")
    config = seal({"format": "demo", "format_version": 1, "value": 3,
                   "files": file_checksums(tmp_path, ["weights.bin"])})
    write_json_atomic(tmp_path / "config.json", config)
    assert read_sealed_config(tmp_path / "config.json", format="demo", version=1, error=PredictorError,
                              what="a demo") == config
    check_files(tmp_path, config, PredictorError)

    edited = dict(config, value=4)
    with pytest.raises(PredictorError, match="content digest mismatch"):
        check_seal(edited, tmp_path / "config.json", PredictorError)
    with pytest.raises(PredictorError, match="version 1, this library reads 'demo' version 2"):
        read_sealed_config(tmp_path / "config.json", format="demo", version=2, error=PredictorError, what="a demo")
    (tmp_path / "weights.bin").write_bytes(b"\x00\x02")
    with pytest.raises(BPQError, match="weights.bin: checksum mismatch"):
        check_files(tmp_path, config, PredictorError)
    with pytest.raises(PredictorError, match="outside its folder"):
        check_files(tmp_path, dict(config, files={"../x": "0"}), PredictorError)
