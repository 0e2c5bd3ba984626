"""What a new user runs into: programs of several files and flags, compiler errors worth reading, one error format
with meaningful exit codes, outputs checked before work, empty programs, corpus jobs from scripts, failure
listings, and small CLI conveniences."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.core.catalog import OZ_LIKE_ORDER
from behavioral_pq.core.toolchain import excerpt
from behavioral_pq.corpus import Corpus, build_corpus, discover
from behavioral_pq.errors import CompileError, InvalidIRError
from behavioral_pq.tasks.guidance import describe_steps

REPO = Path(__file__).resolve().parent.parent


def bpq_cli(*args, cwd=None, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


@pytest.fixture()
def program(tmp_path):
    """A two-file program with a header in include/ and a macro it needs."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "tok.h").write_text("int count_tokens(const char *s);\n")
    (tmp_path / "tok.c").write_text('#include "tok.h"\nint count_tokens(const char *s) { int n = 0; '
                                    "for (; *s; s++) n += (*s == SEP); return n + 1; }\n")
    (tmp_path / "tok_main.c").write_text('#include "tok.h"\nint main(void) { return count_tokens("a b c"); }\n')
    return tmp_path


# -- programs of several files --------------------------------------------------------------------------------

def test_features_of_a_program_of_two_files_with_flags(program):
    one = bpq_cli("features", program / "tok.c", program / "tok_main.c", "-I", program / "include",
                  "-D", "SEP=' '", "--json")
    assert one.returncode == 0, one.stderr
    features = json.loads(one.stdout)["features"]
    linked = bpq.load_module([program / "tok.c", program / "tok_main.c"],
                             flags=[f"-I{program / 'include'}", "-DSEP=' '"])
    assert list(features.values()) == bpq.autophase(linked).tolist()
    alone = bpq.load_module(program / "tok.c", flags=[f"-I{program / 'include'}", "-DSEP=' '"])
    assert features["TotalInsts"] == linked.instruction_count > alone.instruction_count
    missing_flag = bpq_cli("features", program / "tok.c", "-I", program / "include")
    assert missing_flag.returncode == 2 and "SEP" in missing_flag.stderr


def test_compile_commands_entry_or_whole_program(program):
    commands = [{"directory": str(program), "file": name,
                 "arguments": ["cc", "-Iinclude", "-DSEP=','", "-O2", "-c", name, "-o", name + ".o"]}
                for name in ("tok.c", "tok_main.c")]
    db = program / "compile_commands.json"
    db.write_text(json.dumps(commands))
    entry = bpq_cli("features", "--compile-commands", db, program / "tok.c", "--json")
    whole = bpq_cli("features", "--compile-commands", db, "--json")
    assert entry.returncode == 0 and whole.returncode == 0, entry.stderr + whole.stderr
    flags = [f"-I{program / 'include'}", "-DSEP=','"]
    alone = bpq.load_module(program / "tok.c", flags=flags)
    linked = bpq.load_module([program / "tok.c", program / "tok_main.c"], flags=flags)
    assert list(json.loads(entry.stdout)["features"].values()) == bpq.autophase(alone).tolist()
    assert list(json.loads(whole.stdout)["features"].values()) == bpq.autophase(linked).tolist()
    other = bpq_cli("features", "--compile-commands", db, program / "nowhere.c")
    assert other.returncode == 2 and "no entry for" in other.stderr


def test_csmith_output_compiles_with_include(tmp_path):
    generated = tmp_path / "gen"
    bpq_cli("corpus", "generate", "--csmith", "1", "--seed", "5", "--out", generated, "-q")
    source = next(generated.glob("*.c"))
    plain = bpq_cli("features", source)
    assert plain.returncode == 2 and "csmith.h" in plain.stderr
    included = bpq_cli("features", source, "-I", "/usr/include/csmith")
    assert included.returncode == 0, included.stderr


# -- errors ---------------------------------------------------------------------------------------------------

def test_a_long_compiler_error_keeps_the_first_error(tmp_path):
    body = "\n".join(f"int f{i}(void) {{ return undeclared_identifier_{i}; }}" for i in range(300))
    source = tmp_path / "many.c"
    source.write_text(body + "\n")
    with pytest.raises(CompileError) as info:
        bpq.load_module(source)
    message = str(info.value)
    assert "undeclared_identifier_0'" in message and "characters cut" in message and len(message) < 2600
    assert excerpt("x" * 10) == "x" * 10
    late = "warning: a\n" * 500 + "error: the first one\n" + "note: b\n" * 500
    assert "error: the first one" in excerpt(late)


@pytest.mark.slow
def test_one_error_format_and_exit_codes(tmp_path, program):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01 not a module")
    predicted = bpq_cli("predict", "best-pass", garbage)
    lines = predicted.stderr.strip().splitlines()
    assert predicted.returncode == 2 and len(lines) == 1 and lines[0].startswith("bpq: error: ")
    assert lines[0].startswith("bpq: error: garbage.bin: invalid LLVM IR") and "garbage.bin: garbage.bin" not in lines[0]
    missing = bpq_cli("embed", tmp_path / "missing.c")
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        f"bpq: error: {tmp_path / 'missing.c'}: no such file"]
    partial = bpq_cli("embed", EXAMPLES / "sum_array.c", tmp_path / "missing.c", "-q")
    assert partial.returncode == 1 and partial.stderr.count("bpq: error:") == 1


def test_outputs_are_checked_before_work(program):
    for args in (("optimize", program / "tok_main.c", program / "tok.c", "-DSEP=1", "-I", program / "include",
                  "--passes", "Oz", "-o", "/nonexistent_dir/x.ll"),
                 ("compile", EXAMPLES / "sum_array.c", "-o", "/nonexistent_dir/x"),
                 ("spectrum", EXAMPLES / "sum_array.c", "-o", "/nonexistent_dir/x.npy")):
        done = bpq_cli(*args)
        assert done.returncode == 2 and "cannot write there: no folder /nonexistent_dir" in done.stderr, args


def test_passes_value_may_start_with_a_dash():
    done = bpq_cli("optimize", EXAMPLES / "sum_array.c", "--passes", "-sroa", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["instructions_after"] < json.loads(done.stdout)["instructions_before"]
    lowered = bpq_cli("lower", EXAMPLES / "sum_array.c", "--passes", "-mem2reg")
    assert lowered.returncode == 0, lowered.stderr


def test_an_empty_program_is_refused(tmp_path):
    empty = tmp_path / "empty.c"
    empty.write_text("")
    with pytest.raises(InvalidIRError, match="no code"):
        bpq.load_module(empty)
    done = bpq_cli("predict", "oz", empty)
    assert done.returncode == 2 and "no code" in done.stderr and "%" not in done.stdout
    summary = build_corpus(discover([empty], origin="t"), tmp_path / "store", workers=1)
    assert summary.new_modules == 0 and summary.failures == {("prepare", "InvalidIRError"): 1}


# -- corpus -----------------------------------------------------------------------------------------------------

def test_corpus_build_of_nothing_is_an_error_and_writes_no_store(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "README").write_text("no code here\n")
    done = bpq_cli("corpus", "build", tmp_path / "src", "--out", tmp_path / "store")
    assert done.returncode == 2 and "no C/C++ source" in done.stderr
    assert not (tmp_path / "store").exists()


def test_corpus_info_lists_failures_with_their_error(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "good.c").write_text("int f(int x) { return x + 1; }\n")
    (tmp_path / "src" / "bad.c").write_text("int g(void) { return missing_name_42; }\n")
    build = bpq_cli("corpus", "build", tmp_path / "src", "--out", tmp_path / "store", "-q", "--workers", "1")
    assert build.returncode == 0 and "--failures lists them" in build.stdout
    listed = bpq_cli("corpus", "info", tmp_path / "store", "--failures", "--json")
    failures = json.loads(listed.stdout)
    assert len(failures) == 1 and failures[0]["stage"] == "compile" and "missing_name_42" in failures[0]["error"]
    assert failures[0]["sources"] == [str((tmp_path / "src" / "bad.c").resolve())]
    assert Corpus(tmp_path / "store").failures() == failures
    text = bpq_cli("corpus", "info", tmp_path / "store", "--failures")
    assert "bad.c" in text.stdout and "missing_name_42" in text.stdout
    spectra = bpq_cli("corpus", "spectra", tmp_path / "store", "-q", "--workers", "1")
    assert "1 modules measured" in spectra.stdout and "new modules" not in spectra.stdout


def test_a_script_without_a_main_guard_is_told_why(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""\
        from behavioral_pq.corpus import build_corpus, discover
        build_corpus(discover([{str(EXAMPLES / 'sum_array.c')!r}], origin="e"), {str(tmp_path / 's')!r},
                     workers=1)
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "RuntimeError: the corpus job's worker processes died while starting" in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr.splitlines()[-1]


# -- small conveniences -----------------------------------------------------------------------------------------

def test_pipelines_are_shown_compactly():
    steps = ("-Oz",) + OZ_LIKE_ORDER + ("-instcombine",)
    assert describe_steps(steps) == f"-Oz [-Oz order: {len(OZ_LIKE_ORDER)} passes] -instcombine"
    assert describe_steps(("-sroa", "-gvn")) == "-sroa -gvn"


def test_single_module_verbs_explain_themselves():
    for verb in ("features", "spectrum", "optimize"):
        text = bpq_cli(verb, "--help").stdout
        assert "--compile-commands" in text and "-I DIR" in text and "programs: one FILE" in text
    assert "Autophase features (CompilerGym's definition)" in bpq_cli("features", "--help").stdout
    assert "react to each of the probe set" in bpq_cli("spectrum", "--help").stdout
