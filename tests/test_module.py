"""Loading modules: formats, preparation, errors."""

import pytest
from conftest import DATA, EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.errors import CompileError, InvalidIRError


def test_c_text_and_bitcode_give_the_same_module(tmp_path, examples):
    module = examples["sum_array"]
    text, bitcode = tmp_path / "m.ll", tmp_path / "m.bc"
    module.save(text)
    module.save(bitcode)
    assert text.read_text().startswith("; ModuleID")
    assert bitcode.read_bytes()[:4] == b"BC\xc0\xde"
    assert bpq.load_module(text) == module == bpq.load_module(bitcode)
    assert bpq.load_module(bitcode.read_bytes()) == module
    assert bpq.load_module(text.read_text()) == module  # a str with newlines is IR text
    assert bpq.load_module(module) is module


def test_preparation_strips_debug_info_and_named_metadata():
    text = bpq.load_module(DATA / "autophase" / "debug_info.ll").text()
    assert "!dbg" not in text and "llvm.dbg" not in text and "llvm.ident" not in text
    assert "llvm.module.flags" not in text


def test_c_is_compiled_without_llvm_passes(examples):
    text = examples["sum_array"].text()
    assert "alloca" in text  # no mem2reg ran
    assert "define internal i32 @sum" in text and "!dbg" not in text


def test_cpp_compiles(tmp_path):
    source = tmp_path / "v.cpp"
    source.write_text("template <class T> T twice(T x) { return x + x; }\nint f(int y) { return twice(y); }\n")
    module = bpq.load_module(source)
    assert "_Z5twiceIiET_S0_" in module.text()


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no such file"):
        bpq.load_module("/nonexistent/x.ll")


@pytest.mark.parametrize("content,match", [
    ("define i32 @f( {\n", "invalid LLVM IR"),
    ("define i32 @f() {\n  ret i64 0\n}\n", "invalid LLVM IR"),
    ("define void @f() {\nentry:\n  br label %entry2\n}\n", "invalid LLVM IR"),
    ("", "empty input"),
])
def test_invalid_ir(tmp_path, content, match):
    path = tmp_path / "bad.ll"
    path.write_text(content)
    with pytest.raises(InvalidIRError, match=match):
        bpq.load_module(path)


def test_verifier_failure_is_invalid_ir():
    # Parses, but the verifier rejects it: an instruction uses a value that does not dominate it.
    ir = "define i32 @f(i1 %c) {\nentry:\n  br i1 %c, label %a, label %b\na:\n  %x = add i32 1, 2\n" \
         "  br label %b\nb:\n  ret i32 %x\n}\n"
    with pytest.raises(InvalidIRError, match="verifier"):
        bpq.load_module(ir)


def test_garbage_bitcode(tmp_path):
    path = tmp_path / "bad.bc"
    path.write_bytes(b"BC\xc0\xde" + bytes(range(256)) * 4)
    with pytest.raises(InvalidIRError, match="invalid bitcode"):
        bpq.load_module(path)


def test_c_that_does_not_compile(tmp_path):
    path = tmp_path / "broken.c"
    path.write_text("int f( { return 0; }\n")
    with pytest.raises(CompileError, match="broken.c") as info:
        bpq.load_module(path)
    assert "error" in str(info.value)


def test_module_repr_and_identity(examples):
    module = examples["matmul"]
    assert repr(module) == "Module('matmul.c', 208 instructions)"
    assert len(module.sha256) == 64
    assert module.source.endswith("matmul.c")
    assert bpq.load_module(EXAMPLES / "matmul.c").sha256 == module.sha256  # deterministic build


def test_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, behavioral_pq; print(sorted(m for m in ('torch', 'faiss', 'behavioral_pq._native', " \
           "'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
