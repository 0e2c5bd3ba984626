"""Probe trees: the search (levels, shared prefixes, resume, determinism), its CLI, and the probe-set comparison."""

import json

import numpy as np
import pytest
from test_corpus import tiny_programs

from behavioral_pq.cli.main import main
from behavioral_pq.corpus import Corpus, build_corpus, discover, split_corpus
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.reports.probe_sets import compare_probe_sets, subset
from behavioral_pq.training.genetic import GAConfig
from behavioral_pq.training.probe_search import STATE_FILE
from behavioral_pq.training.probe_tree import TreeConfig, search_probe_tree

TINY = TreeConfig(branching=(2, 2), segments=(3, 2), sample=3, checkpoint=0,
                  ga=GAConfig(length=0, population=4, generations=1, seed=0), seed=5)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe-tree")
    sources = tiny_programs(root / "src", 16)
    path = root / "store"
    build_corpus(discover([sources], origin="tests"), path, workers=1)
    split_corpus(path, seed=0, fractions=(0.6, 0.2, 0.2))
    return Corpus(path)


def test_tree_shape_gives_probes_and_pass_executions():
    config = TreeConfig(branching=(2, 3), segments=(4, 2))
    assert config.num_probes == 2 + 6 and config.pass_executions == 2 * 4 + 6 * 2
    assert TreeConfig(branching=(2, 3), segments=(4, 2), inner_probes=False).num_probes == 6
    with pytest.raises(ValueError, match="one entry per level"):
        TreeConfig(branching=(2, 3), segments=(4,))


def test_tree_search_builds_shared_prefixes_and_resumes(store, tmp_path):
    shas = sorted(store.store.keys("modules"))
    probes, nodes = search_probe_tree(store, shas, tmp_path / "run", TINY, progress=False)
    assert probes.num_probes == TINY.num_probes == len(nodes) == 6
    assert [len(n.path) for n in nodes] == [1, 1, 2, 2, 2, 2]
    for node in nodes[2:]:   # a child's probe continues its parent's
        parent = nodes[node.path[0]]
        assert node.sequence[:3] == parent.sequence and len(node.sequence) == 5
    assert probes.pass_executions <= TINY.pass_executions < sum(len(s) for s in probes.sequences)
    lines = (tmp_path / "run" / STATE_FILE).read_text().splitlines()
    assert len(lines) == 1 + 6
    again, _ = search_probe_tree(store, shas, tmp_path / "run", TINY, progress=False)
    assert again.hash == probes.hash and len((tmp_path / "run" / STATE_FILE).read_text().splitlines()) == 7
    fresh, _ = search_probe_tree(store, shas, tmp_path / "fresh", TINY, progress=False)
    assert fresh.hash == probes.hash                     # seeded: the same search finds the same tree
    batch = spectra(list(store.iter_modules()), probes, cache=False)
    assert batch.ok.all() and batch.spectra.shape[1:] == (6, 56)


def test_tree_cli_and_a_mismatched_resume(store, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["probes", "tree", str(store.path), "--out", str(out), "--branching", "2", "--segments", "3",
            "--population", "4", "--generations", "1", "--sample", "2", "--modules", "12", "--leaves-only"]
    assert main(args) == 0
    written = list(out.glob("tree-b2-l3-s0.json"))
    assert written and load_probes(written[0]).num_probes == 2
    assert len(json.loads((out / "nodes.json").read_text())) == 2
    changed = [a if a != "--leaves-only" else "--generations=2" for a in args]
    assert main(changed) != 0
    assert "belongs to another search" in capsys.readouterr().err


def test_compare_judges_subsets_and_truncations_on_one_measurement(store, tmp_path):
    base = load_probes()
    candidates = [subset(base, count=20), subset(base, count=10), subset(base, count=20, length=10)]
    report = compare_probe_sets(store.path, candidates, tmp_path / "cmp", sample={"train": 9, "valid": 3,
                                "test": 4}, timing_per_bucket=1, seeds=(0,))
    rows = {c["name"]: c for c in report["candidates"]}
    full, half, short = (rows[c.name] for c in candidates)
    assert full["pass_executions"] == candidates[0].pass_executions and half["pass_ratio"] > 1.5
    assert short["pass_executions"] < full["pass_executions"] / 4
    assert 0 <= full["best_pass_top1"]["mean"] <= 1 and full["oz_mae_points"]["mean"] >= 0
    assert set(full["by_kind"]) == {"small"} and full["timing"]
    # one seed, one kind: the overall -Oz MAE (points) is the small programs' MAE
    assert full["oz_mae_points"]["mean"] == pytest.approx(full["by_kind"]["small"]["oz_mae_points"], rel=1e-6)
    # the first 10 probes of the set are the first 10 rows of the 20-probe set: identical best-probe reductions
    # can only come from one measurement of identical rows
    assert half["best_probe_reduction"] <= full["best_probe_reduction"]
    text = (tmp_path / "cmp" / "report.md").read_text()
    assert all(c.name in text for c in candidates) and "passes / spectrum" in text
    assert np.isfinite(full["knn5_top1"])


def test_tree_cli_also_writes_the_leaves_only_reading_of_an_inner_tree(store, tmp_path):
    out = tmp_path / "inner"
    assert main(["probes", "tree", str(store.path), "--out", str(out), "--branching", "2,1", "--segments", "2,2",
                 "--population", "4", "--generations", "1", "--sample", "2", "--modules", "12"]) == 0
    inner = load_probes(out / "tree-b2x1-l2-2-inner-s0.json")
    leaves = load_probes(out / "tree-b2x1-l2-2-leaves-s0.json")
    assert inner.num_probes == 4 and leaves.num_probes == 2
    assert set(leaves.sequences) < set(inner.sequences) and leaves.pass_executions == inner.pass_executions
