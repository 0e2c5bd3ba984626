"""The bpq command end to end, through a real subprocess."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import DATA, EXAMPLES


def bpq(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def test_passes():
    out = bpq("passes")
    assert out.returncode == 0
    assert "124 passes" in out.stdout and "-instcombine" in out.stdout
    data = json.loads(bpq("passes", "--json").stdout)
    assert len(data["passes"]) == 124 and data["passes"][1]["flag"] == "-adce"


def test_features_json_and_text():
    out = bpq("features", DATA / "autophase" / "switch_dup.ll", "--json")
    assert out.returncode == 0, out.stderr
    features = json.loads(out.stdout)["features"]
    assert features["CriticalCount"] == 3 and features["NumEdges"] == 6 and len(features) == 56
    text = bpq("features", EXAMPLES / "sum_array.c").stdout
    assert "sum_array.c: 63 instructions" in text and "TotalInsts" in text
    counts = json.loads(bpq("features", EXAMPLES / "sum_array.c", "--instcount", "--json").stdout)["features"]
    assert counts["TotalInstsCount"] == 63


def test_spectrum_outputs(tmp_path):
    npy, png = tmp_path / "s.npy", tmp_path / "s.png"
    out = bpq("spectrum", EXAMPLES / "matmul.c", "-o", npy, "--plot", png)
    assert out.returncode == 0, out.stderr
    assert "24 probes x 56 features" in out.stdout
    values = np.load(npy)
    assert values.shape == (24, 56) and values.dtype == np.float32
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    data = json.loads(bpq("spectrum", EXAMPLES / "matmul.c", "--json").stdout)
    np.testing.assert_allclose(np.array(data["spectrum"], dtype=np.float32), values, atol=1e-6)


def test_optimize_writes_a_verified_module(tmp_path):
    out_ll = tmp_path / "o.ll"
    out = bpq("optimize", EXAMPLES / "sum_array.c", "--passes", "Oz", "-o", out_ll)
    assert out.returncode == 0, out.stderr
    assert "63 -> 25 instructions" in out.stdout
    assert bpq("features", out_ll, "--json").returncode == 0  # the written module loads and verifies
    out = bpq("optimize", EXAMPLES / "sum_array.c", "--passes=-sroa -instcombine", "--json")
    assert json.loads(out.stdout)["instructions_after"] < 63
    out = bpq("optimize", EXAMPLES / "sum_array.c", "--passes", "111,1", "--json")
    assert json.loads(out.stdout)["pipeline"] == "function(sroa<preserve-cfg>),function(adce)"


def test_a_crash_during_the_work_is_exit_1_with_one_line():
    out = bpq("optimize", EXAMPLES / "sum_array.c", "--passes", "function(sroa),licm")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert len(lines) == 1 and lines[0].startswith("bpq: error:") and "LLVM crashed" in lines[0], out.stderr


@pytest.mark.parametrize("args,message", [
    (["features", "/no/such/file.ll"], "no such file"),
    (["features", DATA / "autophase"], "not a file"),
    (["optimize", EXAMPLES / "sum_array.c", "--passes=-not-a-pass"], "unknown pass"),
    (["optimize", EXAMPLES / "sum_array.c", "--passes", "function(licm-nope)"], "invalid pass pipeline"),
    (["optimize", EXAMPLES / "sum_array.c"], "give either --passes or --auto"),
    (["spectrum", EXAMPLES / "sum_array.c", "--probes", "/no/probes.json"], "cannot read probe set"),
])
def test_bad_input_gives_one_line_error(args, message):
    out = bpq(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bpq: error:") and message in lines[0], out.stderr


def test_invalid_ir_file(tmp_path):
    bad = tmp_path / "bad.ll"
    bad.write_text("define i32 @f( {\n")
    out = bpq("features", bad)
    assert out.returncode == 2 and "invalid LLVM IR" in out.stderr and "Traceback" not in out.stderr


def test_help_explains():
    out = bpq("--help")
    assert out.returncode == 0 and "spectrum" in out.stdout and "BPQ_WORKERS" in out.stdout
    assert "Oz / O3" in bpq("optimize", "--help").stdout


def test_demo(tmp_path):
    out = bpq("demo", "--out", tmp_path / "demo")
    assert out.returncode == 0, out.stderr
    assert "sum_array.c" in out.stdout and "-Oz    25" in out.stdout
    assert np.load(tmp_path / "demo" / "spectra.npy").shape == (4, 24, 56)
    assert len(list((tmp_path / "demo").glob("*_spectrum.png"))) == 4
    embeddings = np.load(tmp_path / "demo" / "embeddings.npy")
    assert embeddings.shape == (4, 224) and np.isfinite(embeddings).all()     # the shipped encoder's d_model
    assert "cosine similarity" in out.stdout
