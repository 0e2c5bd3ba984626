"""Large-module mode: the function sample (what it keeps, determinism, validity) and its use by spectra/embed."""

import numpy as np
import pytest

import behavioral_pq as bpq
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.embedding.sampling import _functions, sample_functions
from behavioral_pq.embedding.spectrum import spectra


def program(path, functions=40):
    """External functions f_i, each with a static helper h_i it calls, a static table, and a dispatch table of
    pointers to some helpers (a global initializer that references functions)."""
    lines = ["static const int table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};"]
    for i in range(functions):
        lines.append(f"static int h{i}(int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) "
                     f"s += a[k] * table[(k + {i}) & 15] - (s >> {i % 5 + 1}); return s; }}")
        lines.append(f"int f{i}(int *a, int n) {{ int t = h{i}(a, n); if (n > {i}) t += h{i}(a + 1, n - 1); "
                     f"switch (t & 3) {{ case 0: return t; case 1: return -t; case 2: return t * {i}; }} "
                     "return 0; }")
    lines.append("int (*dispatch[4])(int *, int) = {h0, h1, h2, h3};")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return bpq.load_module(program(tmp_path_factory.mktemp("sampling") / "big.c"))


def test_function_table_counts_every_instruction(big):
    functions = _functions(big.text())
    assert len(functions) == 80
    assert sum(f[0] for f in functions.values()) == big.instruction_count
    assert functions["h0"][1] and not functions["f0"][1] and "h0" in functions["f0"][2]


def test_sample_keeps_roots_with_their_local_callees_and_declares_the_rest(big):
    sample = sample_functions(big, budget=big.instruction_count // 4)
    again = sample_functions(big, budget=big.instruction_count // 4)
    assert sample.module.sha256 == again.module.sha256          # deterministic
    assert 0.15 < sample.fraction < 0.35 and sample.total_functions == 80
    kept = _functions(sample.module.text())
    assert len(kept) == sample.functions
    for name in kept:
        if name.startswith("f"):
            assert "h" + name[1:] in kept                      # the root's static helper came with it
    text = sample.module.text()
    assert "@table" in text
    missing = next(f"f{i}" for i in range(40) if f"f{i}" not in kept)
    assert f"define dso_local i32 @{missing}(" not in text
    bpq.load_module(sample.module.bitcode)                      # a valid module


def test_small_modules_are_measured_whole_and_large_ones_flagged(big, examples):
    small = examples["matmul"]
    batch = spectra([small, big], cache=False, sample_above=big.instruction_count - 1)
    assert batch.ok.all() and batch.sampled[0] is None and 0 < batch.sampled[1] < 1
    exact = spectra([small, big], cache=False)
    assert exact.sampled == (None, None)
    np.testing.assert_array_equal(batch.spectra[0], exact.spectra[0])
    # the sample reacts like the module: its spectrum is far closer to the exact one than another program's
    error = np.abs(batch.spectra[1] - exact.spectra[1]).mean()
    assert error < 0.15 and error * 5 < np.abs(exact.spectra[0] - exact.spectra[1]).mean()
    # its Autophase rows estimate the module's totals
    total = bpq.AUTOPHASE_FEATURES.index("TotalInsts")
    assert abs(batch.autophase[1, 0, total] - big.instruction_count) < 0.02 * big.instruction_count
    embedded = load_encoder().embed_batch([big], sample_above=big.instruction_count - 1)
    assert embedded.ok.all() and embedded.sampled[0] is not None
