"""Spectra: the formula, shape and dtype, consistency with optimize(), determinism across runs and workers."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import behavioral_pq as bpq
from behavioral_pq.core.catalog import sequence_pipeline
from behavioral_pq.core.engine import Engine
from behavioral_pq.embedding.probes import ProbeSet, random_probes
from behavioral_pq.embedding.spectrum import log_relative, spectra
from behavioral_pq.errors import PassTimeoutError, ProbeSetError


def test_log_relative_formula_and_clamp():
    original = np.array([0, 1, 10, 5], dtype=np.int64)
    optimized = np.array([[0, 0, 10, -3], [3, 1, 0, 5]], dtype=np.int64)
    d = log_relative(original, optimized)
    assert d.dtype == np.float32 and d.shape == (2, 4)
    expected = np.array([[0.0, -np.log(2), 0.0, -np.log(6)],  # negative counts clamp to 0
                         [np.log(4), 0.0, -np.log(11), 0.0]])
    np.testing.assert_allclose(d, expected, rtol=1e-6)
    with pytest.raises(ValueError, match="feature dimensions"):
        log_relative(np.zeros(56), np.zeros((3, 55)))


def test_spectrum_shape_and_consistency_with_optimize(examples):
    module = examples["state_machine"]
    probes = bpq.load_probes()
    s = bpq.spectrum(module)
    assert s.shape == (probes.num_probes, 56) and s.dtype == np.float32
    assert np.isfinite(s).all()
    original = bpq.autophase(module)
    for i in (0, 17, probes.num_probes - 1):  # a row equals optimize-then-autophase, computed by a separate path
        after = bpq.autophase(bpq.optimize(module, list(probes.sequences[i])))
        np.testing.assert_array_equal(s[i], log_relative(original, after[None])[0])


def test_spectra_deterministic_across_runs_and_worker_counts(examples):
    modules = list(examples.values())
    probes = random_probes(24, 20, seed=3)
    results = []
    for workers, threads in [(0, 1), (1, 1), (2, 1), (2, 2), (0, 2)]:
        with Engine(workers=workers, threads=threads) as engine:
            results.append(bpq.spectra(modules, probes, engine=engine))
    for batch in results:
        assert batch.ok.all()
        np.testing.assert_array_equal(batch.autophase, results[0].autophase)
        np.testing.assert_array_equal(batch.spectra, results[0].spectra)
    again = bpq.spectra(modules, probes, workers=2)
    np.testing.assert_array_equal(again.spectra, results[0].spectra)


def test_spectra_of_a_large_module_spread_over_workers(examples, tmp_path):
    """A big module's probes are split into chunks across workers; the pieces must join up exactly."""
    source = tmp_path / "many.c"
    source.write_text("\n".join(
        f"int g{i}(int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) s += a[k] * {i + 1}; return s; }}"
        for i in range(120)) + "\n")
    module = bpq.load_module(source)
    probes = random_probes(16, 10, seed=5)
    with Engine(workers=2) as engine:
        split = bpq.spectra([module], probes, engine=engine)
        assert len(engine._plan([module.bitcode], probes.pipelines())) > 1
    with Engine(workers=0) as engine:
        whole = bpq.spectra([module], probes, engine=engine)
    np.testing.assert_array_equal(split.autophase, whole.autophase)


def test_searched_probe_set_still_ships_and_is_stable():
    probes = bpq.load_probes("searched-p100-l50-s0")
    assert probes.name == "searched-p100-l50-s0" and not probes.provisional
    assert probes.num_probes == 100 and all(len(s) == 50 for s in probes.sequences)
    # The content hash covers the sequences and the LLVM major version: pinned so an edit cannot slip through.
    assert probes.hash == "872832b632a9cf37fe4d648b4f90ef09443c589f56389c95e72eb6827356bebe"
    assert probes.search["config"]["ga"]["generations"] == 40 and len(probes.search["cluster_sizes"]) == 100
    # The set in probes/ (with its report) is the one the package ships.
    from conftest import ROOT
    assert bpq.load_probes(ROOT / "probes" / "searched-p100-l50-s0" / "searched-p100-l50-s0.json") == probes


def test_default_probe_set_is_the_first_24_searched_probes():
    probes, searched = bpq.load_probes(), bpq.load_probes("searched-p100-l50-s0")
    assert probes.name == "searched-p24-l50-s0" and probes.sequences == searched.sequences[:24]
    assert probes.hash == "e259107ef5bf6995140da0da26207defc1d4673948ddc00122b08cfd05f0d52d"
    assert probes.search["from_hash"] == searched.hash
    assert searched.pass_executions / probes.pass_executions >= 4
    from conftest import ROOT
    assert bpq.load_probes(ROOT / "probes" / "searched-p24-l50-s0" / "searched-p24-l50-s0.json") == probes


def test_probe_set_round_trip(tmp_path):
    probes = random_probes(5, 7, seed=1)
    path = probes.save(tmp_path / "p.json")
    loaded = bpq.load_probes(path)
    assert loaded == probes and loaded.hash == probes.hash
    assert loaded.pipelines() == probes.pipelines()


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d["sequences"][0].__setitem__(0, "-not-a-pass"), "unknown pass"),
    (lambda d: d.__setitem__("length", 99), "length says 99"),
    (lambda d: d["sequences"][1].__setitem__(0, "-gvn"), "hash mismatch"),
    (lambda d: d.__setitem__("llvm_major", 10) or d.pop("hash"), "made for LLVM 10"),
    (lambda d: d.__setitem__("format_version", 7), "format_version"),
    (lambda d: d.__setitem__("sequences", []), "no sequences"),
    (lambda d: d.pop("sequences"), "malformed"),
])
def test_malformed_probe_sets(tmp_path, mutate, match):
    data = random_probes(3, 4, seed=2).to_dict()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeSetError, match=match):
        bpq.load_probes(path)


def test_unreadable_probe_files(tmp_path):
    with pytest.raises(ProbeSetError, match="cannot read"):
        bpq.load_probes(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ProbeSetError, match="not valid JSON"):
        bpq.load_probes(tmp_path / "x.json")


from crashing_engine import CrashesOn  # noqa: E402


def test_a_crashing_pass_is_found_by_bisection_and_left_out(engine, examples):
    probes = bpq.load_probes()
    element = {p.flag: p.pipeline for p in bpq.PASSES}
    probe, position = 7, 20
    before, culprit = probes.sequences[probe][position - 1], probes.sequences[probe][position]
    pair = f"{element[before]},{element[culprit]}"
    hit = [i for i, s in enumerate(probes.sequences) if pair in sequence_pipeline(s)]
    module = examples["matmul"]
    batch = spectra([module], probes, engine=CrashesOn(engine, pair), cache=False)
    assert batch.ok.all()
    lost = batch.degraded[0]
    assert [d.probe for d in lost] == hit and all(d.removed == culprit for d in lost)
    assert lost[0].position == position if hit[0] == probe else True
    clean = spectra([module], probes, engine=engine, cache=False)
    untouched = [i for i in range(probes.num_probes) if i not in set(hit)]
    np.testing.assert_array_equal(batch.spectra[0][untouched], clean.spectra[0][untouched])
    assert not np.array_equal(batch.autophase[0][1 + probe], np.zeros(56))


def test_a_crashing_probe_does_not_cost_the_module_its_spectrum(tmp_path):
    """An llvm-stress module on which default probes crash LLVM 19 in fresh workers (opt-19 crashes on them too):
    whatever the workers' heaps decide, the module keeps its spectrum and embedding, flagged when degraded."""
    import subprocess

    from behavioral_pq.core.toolchain import find_tool
    from behavioral_pq.embedding.encoder import load_encoder

    path = tmp_path / "stress.ll"
    subprocess.run([find_tool("llvm-stress"), "--seed=1156370259", "--size=10", "-o", str(path)], check=True)
    module = bpq.load_module(path)
    with Engine() as fresh:
        batch = spectra([module], engine=fresh, cache=False)
    assert batch.ok.all() and np.isfinite(batch.spectra[0]).all()
    probes = bpq.load_probes()
    for lost in batch.degraded[0]:
        assert lost.removed == "*" or lost.removed in probes.sequences[lost.probe]
    embedded = load_encoder().embed_batch([module])
    assert embedded.ok.all() and np.isfinite(embedded.embeddings).all()


def test_probe_trie_shares_prefixes_and_ends_at_every_probe():
    probes = ProbeSet("t", (("-sroa", "-gvn"), ("-sroa", "-gvn", "-dce"), ("-sroa", "-dse", "-dce"), ("-adce",)))
    trie = probes.trie()
    assert trie.edges == (("-sroa",), ("-gvn",), ("-dce",), ("-dse", "-dce"), ("-adce",))
    assert trie.parents == (-1, 0, 1, 0, -1) and trie.probe_nodes == (1, 2, 3, 4)
    assert probes.pass_executions == 6 < sum(len(s) for s in probes.sequences)
    for i, seq in enumerate(probes.sequences):   # each probe is the path from the root to its node
        node, path = trie.probe_nodes[i], []
        while node >= 0:
            path[:0] = trie.edges[node]
            node = trie.parents[node]
        assert tuple(path) == seq


def test_spectra_through_the_trie_equal_each_probe_run_whole(examples, engine):
    """A set whose probes share prefixes (and where some probes are prefixes of others) measured as a tree gives
    the rows that running every probe whole from the module gives."""
    base = bpq.load_probes().sequences
    sequences = [base[0][:10] + base[k][10:30] for k in range(6)] + [base[0][:10], base[1][:30], base[2]]
    probes = ProbeSet("shared", tuple(tuple(s) for s in sequences))
    assert probes.pass_executions < sum(len(s) for s in sequences)
    modules = [examples[name] for name in sorted(examples)]
    batch = spectra(modules, probes, engine=engine, cache=False)
    whole, errors = engine.autophase_after([m.bitcode for m in modules], probes.pipelines())
    assert batch.ok.all() and errors == [None] * len(modules)
    np.testing.assert_array_equal(batch.autophase, whole)


def straight_line_ir(instructions: int) -> str:
    """IR of one straight-line function of about ``instructions`` loads, adds and stores (a generated-code shape
    whose probes take time in proportion to its size: about 0.1 ms per instruction and probe)."""
    lines = ["define i32 @huge(ptr %p, i32 %x) {", "entry:"]
    previous = "%x"
    for i in range(instructions // 4):
        lines += [f"  %g{i} = getelementptr inbounds i32, ptr %p, i64 {i % 1024}",
                  f"  %l{i} = load i32, ptr %g{i}, align 4",
                  f"  %a{i} = {('add', 'mul', 'xor', 'sub')[i % 4]} i32 %l{i}, {previous}",
                  f"  store i32 %a{i}, ptr %g{i}, align 4"]
        previous = f"%a{i}"
    return "\n".join(lines + [f"  ret i32 {previous}", "}"]) + "\n"


def test_a_module_past_the_timeout_costs_one_timeout_and_says_so(examples, tmp_path):
    """A function too big for the per-pipeline limit: the spectrum stops at its first timeout (it went on with
    every other probe, then again probe by probe, each one a timeout: 23 workers killed here, 36 s)."""
    (tmp_path / "huge.ll").write_text(straight_line_ir(30_000))
    huge = bpq.load_module(tmp_path / "huge.ll")
    with Engine(workers=1, timeout=1.0) as engine:
        batch = spectra([huge, examples["sum_array"]], engine=engine, cache=False)
        assert engine.restarts == 1                      # one worker killed, once
    error = batch.errors[0]
    assert isinstance(error, PassTimeoutError) and error.module == "huge.ll"
    assert f"huge.ll: probe {error.pipeline_index} ran past 1 s on its 30001 instructions" in str(error)
    assert np.isnan(batch.spectra[0]).all() and batch.errors[1] is None and np.isfinite(batch.spectra[1]).all()


def test_the_cli_reports_a_timeout_in_one_line(tmp_path):
    (tmp_path / "huge.ll").write_text(straight_line_ir(30_000))
    env = dict(os.environ, BPQ_TIMEOUT="1", BPQ_WORKERS="1", BPQ_NO_CACHE="1")
    done = subprocess.run([sys.executable, "-m", "behavioral_pq", "spectrum", str(tmp_path / "huge.ll")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert re.fullmatch(r"bpq: error: huge\.ll: probe \d+ ran past 1 s on its 30001 instructions and was killed "
                        r"\(BPQ_TIMEOUT sets the limit per pipeline\)\n", done.stderr)
