"""The probe search end to end on a tiny store: clustering, per-cluster GA, resume, report, CLI."""

import json
import subprocess
import sys

import numpy as np
import pytest
from test_corpus import tiny_programs

import behavioral_pq as bpq
from behavioral_pq.core.catalog import BASELINES, PASSES, get_pass
from behavioral_pq.corpus import Corpus, build_corpus, discover
from behavioral_pq.embedding.probes import ProbeSet, load_probes, random_probes
from behavioral_pq.errors import BPQError
from behavioral_pq.reports.probes import probe_report, write_report
from behavioral_pq.training.genetic import TOTAL_INSTS, GAConfig
from behavioral_pq.training.probe_search import (
    STATE_FILE,
    SearchConfig,
    choose_samples,
    cluster_autophase,
    is_deterministic,
    search_probes,
)

TINY = SearchConfig(num_probes=2, sample=3, holdout=2, checkpoint=2,
                    ga=GAConfig(length=6, population=6, generations=2, seed=3), seed=1)


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe-search")
    sources = tiny_programs(root / "src", 10)
    (sources / "straight.c").write_text("int g(int a, int b) { int x = a * b; int y = x + a; return y - b; }\n")
    path = root / "store"
    build_corpus(discover([sources], origin="tests"), path, workers=1, labels=False)
    return Corpus(path)


def test_clusters_are_seeded_and_numbered_by_size():
    rng = np.random.default_rng(0)
    centers = np.array([[1] * 56, [50] * 56, [2000] * 56])
    points = np.concatenate([c + rng.integers(0, 3, size=(n, 56)) for c, n in zip(centers, (5, 9, 2))])
    labels, found = cluster_autophase(points, 3, seed=0)
    again, _ = cluster_autophase(points, 3, seed=0)
    np.testing.assert_array_equal(labels, again)
    assert np.bincount(labels).tolist() == [9, 5, 2]
    assert labels[5:14].tolist() == [0] * 9 and found.shape == (3, 56)
    with pytest.raises(ValueError, match="cannot make 4 clusters from 3"):
        cluster_autophase(points[:3], 4)


def test_samples_prefer_small_modules_and_holdout_is_disjoint():
    counts = {f"m{i}": 100 * i for i in range(10)}
    config = SearchConfig(sample=3, holdout=4, max_instructions=450)
    sample, holdout = choose_samples(list(counts), counts, config, cluster=0)
    assert len(sample) == 3 and all(counts[s] <= 450 for s in sample)
    assert len(holdout) == 4 and not set(sample) & set(holdout)
    assert (sample, holdout) == choose_samples(list(counts)[::-1], counts, config, cluster=0)
    few, _ = choose_samples(list(counts), counts, SearchConfig(sample=3, max_instructions=300), cluster=0)
    assert len(few) == 3 and set(few) < {"m0", "m1", "m2", "m3"}, "drawn among the modules within the bound"
    fill, _ = choose_samples(list(counts), counts, SearchConfig(sample=5, max_instructions=250), cluster=0)
    assert fill == ["m0", "m1", "m2", "m3"], "the smallest larger module fills in within the budget (625 - 300)"
    capped, _ = choose_samples(["m7", "m8", "m9"], counts, SearchConfig(sample=4, max_instructions=100), cluster=0)
    assert capped == ["m7"], "a cluster of large modules is judged on its smallest one"


def test_search_writes_state_resumes_and_refuses_another_config(tiny_store, tmp_path, engine, monkeypatch):
    shas = tiny_store.pretraining()
    probes, results = search_probes(tiny_store, shas, tmp_path, TINY, engine=engine, corpus_description="tiny",
                                    progress=False)
    assert probes.num_probes == 2 and probes.length == 6 and probes.corpus == "tiny" and probes.seed == 1
    assert [r.cluster for r in results] == [0, 1] and sum(r.size for r in results) == len(shas)
    assert results[0].size >= results[1].size
    for r, seq in zip(results, probes.sequences):
        assert [PASSES[i].flag for i in r.sequence] == list(seq)
        assert r.history[-1][0] >= r.history[0][0] and r.fitness == pytest.approx(r.history[-1][0])
        modules = [bpq.Module(b) for b in _bitcode(tiny_store, r.sample)]
        ic0 = np.array([m.instruction_count for m in modules])
        after = np.array([bpq.optimize(m, " ".join(seq), engine=engine).instruction_count for m in modules])
        assert r.fitness == pytest.approx(((ic0 - after) / ic0).mean())
    lines = (tmp_path / STATE_FILE).read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["config_hash"] == TINY.hash

    # Resuming does no work; a line cut short by a kill is searched again.
    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr("behavioral_pq.training.probe_search.search_cluster", no_search)
    again, _ = search_probes(tiny_store, shas, tmp_path, TINY, engine=engine, progress=False)
    assert again == probes
    monkeypatch.undo()
    (tmp_path / STATE_FILE).write_text("\n".join(lines[:2] + [lines[2][:40]]) + "\n")
    resumed, _ = search_probes(tiny_store, shas, tmp_path, TINY, engine=engine, progress=False)
    assert resumed == probes, "the search is reproducible"

    other = SearchConfig(num_probes=2, sample=2, holdout=2, ga=GAConfig(length=6, population=6, generations=2))
    with pytest.raises(BPQError, match="belongs to another search"):
        search_probes(tiny_store, shas, tmp_path, other, engine=engine, progress=False)


def _bitcode(corpus, shas):
    table = corpus.modules(["sha256", "bitcode"])
    by_sha = dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist()))
    return [by_sha[s] for s in shas]


def test_report_measures_what_it_says(tiny_store, tmp_path, engine):
    shas = tiny_store.pretraining()
    probes, results = search_probes(tiny_store, shas, tmp_path, TINY, engine=engine, progress=False)
    baseline = random_probes(3, 6, seed=9)
    report = probe_report(tiny_store, probes, results, shas, corpus_sample=6, engine=engine, baseline=baseline,
                          progress=False)
    assert report["hash"] == probes.hash and len(report["probes"]) == 2
    modules = [bpq.Module(b) for b in _bitcode(tiny_store, sorted(shas))]
    picked = [m for m in modules if m.sha256 in set(shas)]
    features, errors = engine.autophase_after([m.bitcode for m in picked],
                                              list(probes.pipelines()) + [BASELINES["Oz"]])
    # The corpus sample (6 of 11 modules) is seeded: recompute it from the same draw.
    rng = np.random.default_rng(0)
    chosen = sorted(rng.choice(len(shas), 6, replace=False))
    ordered = sorted(shas)
    index = [[m.sha256 for m in picked].index(ordered[i]) for i in chosen]
    ic0 = np.array([picked[i].instruction_count for i in index], dtype=float)
    reduction = (ic0[:, None] - features[index, 1:, TOTAL_INSTS]) / ic0[:, None]
    assert report["corpus"]["modules"] == 6
    assert report["corpus"]["oz_mean_reduction"] == pytest.approx(reduction[:, -1].mean())
    for i in range(2):
        assert report["probes"][i]["corpus_reduction"] == pytest.approx(reduction[:, i].mean())
    assert report["corpus"]["baseline"]["name"] == baseline.name
    d = report["diversity"]["searched"]
    assert d["pairs"] == 1 and d["min"] == d["median"] == pytest.approx(d["mean"]) and d["min"] > 0
    assert report["diversity"]["baseline"]["pairs"] == 3
    paths = write_report(report, probes, tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    assert probes.name in paths[1].read_text()


def test_nondeterminism_is_detected(examples, engine):
    modules = [examples["matmul"], examples["sum_array"]]
    seq = (PASSES.index(get_pass("-sroa")),)
    truth = np.array([bpq.optimize(m, "-sroa", engine=engine).instruction_count for m in modules])
    assert is_deterministic(seq, modules, engine, truth)
    assert not is_deterministic(seq, modules, engine, truth + 1)


def test_cli_probes_search_and_show(tiny_store, tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "behavioral_pq.cli.main", "probes", "search", str(tiny_store.path), "--out", str(out),
            "-P", "2", "-L", "5", "--population", "4", "--generations", "1", "--sample", "2", "--holdout", "1",
            "--report-sample", "4", "--workers", "1", "--name", "tiny-set"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "tiny-set: 2 probes of 5 passes" in done.stdout
    for name in ("tiny-set.json", "report.json", "REPORT.md", "report.png", STATE_FILE):
        assert (out / name).exists(), name
    shown = subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", "probes", "show", str(out / "tiny-set.json"),
                            "--json"], capture_output=True, text=True, timeout=60)
    assert ProbeSet.from_dict(json.loads(shown.stdout)) == load_probes(out / "tiny-set.json")
    bad = subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", "probes", "show", str(tmp_path / "none.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "cannot read probe set" in bad.stderr
