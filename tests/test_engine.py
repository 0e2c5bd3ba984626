"""Crash and timeout containment: a pass that aborts or hangs costs one module, never the caller."""

import os

import numpy as np
import pytest
from conftest import DATA, EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.core.engine import Engine
from behavioral_pq.embedding.probes import ProbeSet
from behavioral_pq.errors import DeadlineError, PassCrashError, PassTimeoutError, PipelineError

# LICM in a loop pass manager without MemorySSA: LLVM 19 calls report_fatal_error ("LICM requires MemorySSA")
# as soon as it meets a loop, which exits the process. Modules without loops are unaffected.
ABORTING = "function(sroa),licm"
# Forty rounds of -O3: seconds on a 10,000-instruction module, milliseconds on a tiny one.
SLOW = ",".join(["default<O3>"] * 40)
TOTAL = 51  # AUTOPHASE_FEATURES.index("TotalInsts")


def big_straight_line_module(tmp_path, functions=300):
    lines = []
    for i in range(functions):
        callee = f"f{i - 1}(x + {i}) * 3" if i else "x"
        lines.append(f"int f{i}(int x) {{ int a = x * {i + 1} + 7; int b = a ^ (x >> 3); "
                     f"int c = b - a * 5; return {callee} + c; }}")
    path = tmp_path / "big.c"
    path.write_text("\n".join(lines) + "\n")
    return bpq.load_module(path)


def test_single_call_crash_is_contained(examples):
    with Engine(workers=1) as engine:
        with pytest.raises(PassCrashError) as info:
            bpq.optimize(examples["sum_array"], ABORTING, engine=engine)
        assert "LICM requires MemorySSA" in str(info.value)
        assert info.value.module == "sum_array.c"
        # The engine replaces the dead worker and goes on.
        assert bpq.optimize(examples["sum_array"], "Oz", engine=engine).instruction_count == 25
        assert engine.restarts == 1


def test_single_call_timeout_is_contained(tmp_path):
    big = big_straight_line_module(tmp_path)
    with Engine(workers=1, timeout=1.0) as engine:
        with pytest.raises(PassTimeoutError) as info:
            bpq.optimize(big, SLOW, engine=engine)
        assert isinstance(info.value, TimeoutError)
        assert bpq.optimize(big, "-sroa", engine=engine).instruction_count < big.instruction_count


@pytest.mark.parametrize("workers,threads", [(1, 1), (2, 1), (2, 2)])
def test_batch_with_crash_and_hang_completes_the_rest(tmp_path, workers, threads):
    small = bpq.load_module(DATA / "autophase" / "alloca_decls.ll")
    looping = bpq.load_module(EXAMPLES / "sum_array.c")
    big = big_straight_line_module(tmp_path)
    calls = bpq.load_module(DATA / "autophase" / "calls_consts.ll")
    modules = [small, looping, big, calls]
    pipelines = ["function(sroa)", ABORTING, SLOW, "function(instcombine<no-verify-fixpoint>)"]
    with Engine(workers=workers, threads=threads, timeout=1.5) as engine:
        features, errors = engine.autophase_after([m.bitcode for m in modules], pipelines,
                                                  names=[m.name for m in modules])
    assert errors[0] is None and errors[3] is None
    assert isinstance(errors[1], PassCrashError) and errors[1].pipeline_index == 1
    assert "LICM requires MemorySSA" in errors[1].detail
    assert isinstance(errors[2], PassTimeoutError) and errors[2].pipeline_index == 2
    # The survivors' rows equal an unprotected in-process run.
    with Engine(workers=0) as inproc:
        reference, ref_errors = inproc.autophase_after([small.bitcode, calls.bitcode], pipelines)
    assert ref_errors == [None, None]
    np.testing.assert_array_equal(features[[0, 3]], reference)
    assert not features[[1, 2]].any()


def test_a_tree_timeout_can_fail_its_whole_root(tmp_path, examples):
    """timeout_fails_root (what a spectrum asks): the root that ran past the limit fails whole and its other
    subtrees are not run; the other roots complete. Without it the rest of the root's tree is measured."""
    big = big_straight_line_module(tmp_path)
    parents = [-1, -1, 1, -2, -1]            # root 0: nodes 0, 1 -> 2, 4; root 1: node 3
    edges = [SLOW, "function(sroa)", "function(instcombine<no-verify-fixpoint>)", "function(sroa)", "function(sroa)"]
    for fails_root in (False, True):
        with Engine(workers=1, timeout=1.0) as engine:
            features, _, errors = engine.autophase_tree([big.bitcode, examples["sum_array"].bitcode], parents,
                                                        edges, names=["big", "small"],
                                                        timeout_fails_root=fails_root)
            assert engine.restarts == 1
        assert isinstance(errors[0], PassTimeoutError) and errors[0].module == "big"
        assert errors[3] is None and features[3].any()
        if fails_root:
            assert all(errors[n] is errors[0] for n in (1, 2, 4)) and not features[[0, 1, 2, 4]].any()
        else:
            assert errors[1] is None and errors[2] is None and errors[4] is None and features[[1, 2, 4]].any(1).all()


def test_a_deadline_stops_a_call_and_the_engine_goes_on(tmp_path, examples):
    import time

    big = big_straight_line_module(tmp_path)
    small = examples["sum_array"]
    with Engine(workers=2, timeout=60) as engine:
        engine.autophase_tree([small.bitcode] * 2, [-1, -2], ["default<Oz>"] * 2)   # both workers started
        start = time.monotonic()
        features, _, errors = engine.autophase_tree([small.bitcode, big.bitcode], [-1, -2],
                                                    ["default<Oz>", SLOW], deadline=start + 1.0)
        assert time.monotonic() - start < 1.0 + 0.5                   # not the seconds SLOW takes
        assert errors[0] is None and features[0, TOTAL] == 25      # what finished in time is kept
        assert isinstance(errors[1], DeadlineError) and isinstance(errors[1], TimeoutError)
        assert not features[1].any() and engine.restarts == 1      # the worker running SLOW was replaced
        with pytest.raises(DeadlineError):
            engine.run_pipeline(big.bitcode, SLOW, deadline=time.monotonic() + 0.3)
        with pytest.raises(DeadlineError):                         # a deadline already passed: nothing runs
            engine.run_pipeline(small.bitcode, "default<Oz>", deadline=time.monotonic())
        assert bpq.optimize(small, "Oz", engine=engine).instruction_count == 25   # the engine goes on


@pytest.mark.parametrize("workers", [0, 2])
def test_run_pipelines_is_run_pipeline_per_item_and_a_failure_costs_its_item_alone(tmp_path, examples, workers):
    import time

    from behavioral_pq.core.target import resolve_target

    host = resolve_target("host", None)
    looping, matmul = examples["sum_array"], examples["matmul"]
    items = [(looping.bitcode, "default<Oz>", None), (matmul.bitcode, "default<O3>", host),
             (matmul.bitcode, "default<O3>", None), (looping.bitcode, ABORTING, None)]
    if workers == 0:
        items = items[:3]                                        # in-process, an abort would end the test run
    with Engine(workers=workers, timeout=60) as engine:
        results, errors = engine.run_pipelines([b for b, _, _ in items], [p for _, p, _ in items],
                                               names=[f"item{i}" for i in range(len(items))],
                                               targets=[t for _, _, t in items])
        for (bitcode, pipeline, target), result, error in zip(items[:3], results, errors):
            assert error is None and result == engine.run_pipeline(bitcode, pipeline, target=target)
        assert bpq.load_module(results[1]).instruction_count > bpq.load_module(results[2]).instruction_count
        if workers:
            assert results[3] is None and isinstance(errors[3], PassCrashError) and errors[3].module == "item3"
            big = big_straight_line_module(tmp_path)
            start = time.monotonic()
            results, errors = engine.run_pipelines([looping.bitcode, big.bitcode], ["default<Oz>", SLOW],
                                                   deadline=start + 1.0)
            assert time.monotonic() - start < 1.5 and isinstance(errors[1], DeadlineError) and results[1] is None
            assert errors[0] is None and bpq.load_module(results[0]).instruction_count == 25
        with pytest.raises(ValueError, match="one pipeline and one target per module"):
            engine.run_pipelines([looping.bitcode], ["default<Oz>", "default<O3>"])
        assert engine.run_pipelines([], []) == ([], [])


def test_spectra_reports_failures_and_keeps_the_rest(examples):
    probes = ProbeSet("crashy", (("-sroa",), ("-mem2reg", "-loop-rotate")))
    good = bpq.load_module(DATA / "autophase" / "switch_dup.ll")
    with Engine(workers=2) as engine:
        batch = bpq.spectra([good, examples["sum_array"]], probes, engine=engine)
    assert batch.ok.tolist() == [True, True]
    assert batch.spectra.shape == (2, 2, 56)


def test_invalid_raw_pipeline_is_a_clear_error(examples):
    with pytest.raises(PipelineError, match="unknown function pass 'not-a-pass'"):
        bpq.optimize(examples["sum_array"], "function(not-a-pass)")


def test_engine_rejects_bad_settings():
    with pytest.raises(ValueError):
        Engine(workers=-1)
    with pytest.raises(ValueError):
        Engine(workers=1, timeout=0)


def test_worker_count_from_environment(monkeypatch):
    monkeypatch.setenv("BPQ_WORKERS", "3")
    assert Engine().workers == 3
    assert os.environ["BPQ_WORKERS"] == "3"
