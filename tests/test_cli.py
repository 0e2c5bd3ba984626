"""The bpq command end to end, through a real subprocess."""

import json
import re
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


@pytest.mark.slow
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
    assert "Oz / Os / O3 / O2 / O1 / O0" in bpq("optimize", "--help").stdout


def test_demo(tmp_path):
    out = bpq("demo", "--out", tmp_path / "demo")
    assert out.returncode == 0, out.stderr
    assert "sum_array.c" in out.stdout and "-Oz    25" in out.stdout
    assert np.load(tmp_path / "demo" / "spectra.npy").shape == (4, 24, 56)
    assert len(list((tmp_path / "demo").glob("*_spectrum.png"))) == 4
    embeddings = np.load(tmp_path / "demo" / "embeddings.npy")
    assert embeddings.shape == (4, 224 + 8 * 25) and np.isfinite(embeddings).all()   # d_model, then the count tail
    assert "cosine similarity" in out.stdout


def _project(tmp_path):
    """Two programs (tool1, tool2) sharing one unit, and their compile_commands.json."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "util.c").write_text("int twice(int x) { return 2 * x; }\n")
    (project / "tool1.c").write_text("int twice(int);\nint main(int c, char **v) {\n"
                                     "  int s = 0;\n  for (int i = 0; i < c * 10; i++) s += twice(i);\n"
                                     "  return s & 1;\n}\n")
    (project / "tool2.c").write_text("int twice(int);\nint main(void) { return twice(3) - 6; }\n")
    db = project / "compile_commands.json"
    db.write_text(json.dumps([{"directory": str(project), "file": name, "arguments": ["cc", "-c", name, "-O2"]}
                              for name in ("util.c", "tool1.c", "tool2.c")]))
    return project, db


@pytest.mark.slow
def test_embed_predict_features_take_whole_programs(tmp_path):
    """embed, predict and features take one linked program (--link FILE..., or
    --compile-commands JSON --program NAME), equal to embedding the program linked by optimize --passes O0."""
    project, db = _project(tmp_path)
    linked = tmp_path / "tool1.bc"
    out = bpq("optimize", project / "tool1.c", project / "util.c", "--passes", "O0", "-o", linked)
    assert out.returncode == 0, out.stderr
    reference = json.loads(bpq("embed", linked, "--json").stdout)[0]["embedding"]

    by_link = json.loads(bpq("embed", "--link", project / "tool1.c", project / "util.c", "--json").stdout)
    assert len(by_link) == 1 and by_link[0]["embedding"] == reference
    by_db = bpq("embed", "--compile-commands", db, "--program", "tool1", "--json")
    assert by_db.returncode == 0, by_db.stderr
    rows = json.loads(by_db.stdout)
    assert len(rows) == 1 and rows[0]["embedding"] == reference and "tool1" in rows[0]["file"]
    # without --link the same files are two modules, each its own row
    assert len(json.loads(bpq("embed", project / "tool1.c", project / "util.c", "--json").stdout)) == 2

    # predict: the files may follow the options (argparse leaves them over after the target)
    single = json.loads(bpq("predict", "oz", linked, "--json").stdout)[0]["prediction"]
    linked_prediction = bpq("predict", "oz", "--link", project / "tool1.c", project / "util.c", "--json")
    assert linked_prediction.returncode == 0, linked_prediction.stderr
    assert json.loads(linked_prediction.stdout)[0]["prediction"] == single
    from_db = json.loads(bpq("predict", "oz", "--compile-commands", db, "--program", "tool1", "--json").stdout)
    assert from_db[0]["prediction"] == single

    features = json.loads(bpq("features", "--compile-commands", db, "--program", "tool2", "--json").stdout)
    expected = json.loads(bpq("features", project / "tool2.c", project / "util.c", "--json").stdout)
    assert features["features"] == expected["features"] and features["features"]["TotalInsts"] > 0


@pytest.mark.slow
def test_whole_program_arguments_are_checked(tmp_path):
    project, db = _project(tmp_path)
    both = bpq("embed", "--link", project / "tool1.c", "--compile-commands", db)
    assert both.returncode == 2 and "give one of them" in both.stderr
    none = bpq("predict", "oz")
    assert none.returncode == 2 and "give FILE" in none.stderr
    unknown = bpq("embed", "--compile-commands", db, "--program", "tool9")
    assert unknown.returncode == 2 and "tool1" in unknown.stderr and "tool2" in unknown.stderr
    bogus = bpq("predict", "oz", project / "tool1.c", "--bogus")
    assert bogus.returncode == 2 and "--bogus" in bogus.stderr


def test_a_mistyped_option_shows_the_verbs_usage():
    proc = bpq("compile", "--frobnicate")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: bpq compile ") and "bpq compile: error: unrecognized arguments: --frobnicate" \
        in proc.stderr
    proc = bpq("embed", "--frobnicate", "x.ll")
    assert proc.returncode == 2 and "usage: bpq embed " in proc.stderr and "bpq embed: error:" in proc.stderr


def test_optimize_passes_o0_joins_without_writing_the_hosts_attributes(tmp_path):
    source = tmp_path / "a.c"
    source.write_text("int twice(int x) { return 2 * x; }\nint main(void) { return twice(3) - 6; }\n")
    clang = subprocess.run(["clang-19", "-S", "-emit-llvm", "-O0", str(source), "-o", "-"], capture_output=True,
                           text=True, check=True).stdout
    proc = bpq("optimize", source, "--passes", "O0", "-o", tmp_path / "a.ll")
    assert proc.returncode == 0 and "measure mode" in proc.stdout, proc.stderr
    machine = re.compile(r'"(?:target-cpu|target-features|tune-cpu)"="[^"]*"')
    assert machine.findall((tmp_path / "a.ll").read_text()) == machine.findall(clang) != []
    proc = bpq("optimize", source, "--passes", "O0", "--target", "host", "-o", tmp_path / "host.ll")
    assert proc.returncode == 0 and "target mode" in proc.stdout, proc.stderr
