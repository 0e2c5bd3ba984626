"""The local search's edit prior: read off rows, saved, loaded, checked, and used by searches for a target only."""

import json
import random

import numpy as np
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.cli.main import main
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.target import Target
from behavioral_pq.errors import RankerError
from behavioral_pq.tasks.guidance import recommend as recommend_module
from behavioral_pq.tasks.guidance.edits import EDIT_FLOOR, edit_weights, load_edit_prior, save_edit_prior
from behavioral_pq.tasks.guidance.library import OZ, mutate_steps
from behavioral_pq.tasks.guidance.ranker import RankerData, load_ranker_data, measure_pool_rows

FLAGS = [p.flag for p in PASSES]


def only(flag: str):
    """An edit prior with (almost) all weight on ``flag``."""
    return tuple(1.0 if f == flag else 1e-12 for f in FLAGS)


def test_weighted_edits_draw_the_catalog_half_by_the_prior_and_the_default_stays_uniform():
    rng = random.Random(0)
    drawn = {s[-1] for s in (mutate_steps((OZ,), rng, (), only("-gvn")) for _ in range(200))}
    assert drawn == {"-gvn"}                         # an empty vocabulary: every edit appends from the catalog
    with_vocabulary = [mutate_steps((OZ,), random.Random(i), ("-sroa",), only("-gvn"))[-1] for i in range(200)]
    assert set(with_vocabulary) == {"-gvn", "-sroa"}
    uniform = {mutate_steps((OZ,), random.Random(i))[-1] for i in range(300)}
    assert len(uniform) > 60
    a, b = random.Random(5), random.Random(5)        # no weights: the draws of before, edit for edit
    assert [mutate_steps(("-sroa", "-gvn"), a, ("-dce",)) for _ in range(50)] == \
        [mutate_steps(("-sroa", "-gvn"), b, ("-dce",), None) for _ in range(50)]


def test_the_prior_is_the_share_of_modules_each_pass_after_oz_beats_oz(tmp_path):
    pool = [(OZ, "-gvn"), (OZ, "-dce"), ("-sroa",)]
    values = np.array([[9, 10, 1], [20, 19, 1], [29, np.nan, 1], [40, 41, 1]], np.float64)
    data = RankerData(pool, "ir-count", ["a", "b", "c", "d"], np.array([10, 20, 30, 40]), values, np.zeros(4))
    weights = edit_weights(data)
    assert weights["-gvn"] == pytest.approx(EDIT_FLOOR + 2 / 4)      # beat -Oz on a and c
    assert weights["-dce"] == pytest.approx(EDIT_FLOOR + 1 / 4)      # on b; a failed cell does not beat it
    assert weights["-sroa"] == EDIT_FLOOR and len(weights) == len(PASSES)  # (-sroa,) is not -Oz then a pass
    path = save_edit_prior(tmp_path / "prior.json", weights, modules=4, target=None)
    loaded = load_edit_prior(path)
    assert loaded[FLAGS.index("-gvn")] == weights["-gvn"] and len(loaded) == len(PASSES)
    with pytest.raises(ValueError, match="floor must be positive"):
        edit_weights(data, 0.0)


def test_broken_prior_files_are_refused_in_one_line(tmp_path):
    good = {"format": "behavioral_pq.edit-prior", "format_version": 1, "weights": {f: 1.0 for f in FLAGS}}
    cases = {"missing.json": None, "other.json": {**good, "format": "something"},
             "unknown.json": {**good, "weights": {**good["weights"], "-no-such-pass": 1.0}},
             "short.json": {**good, "weights": {f: 1.0 for f in FLAGS[1:]}},
             "negative.json": {**good, "weights": {**good["weights"], "-gvn": -1.0}},
             "nan.json": {**good, "weights": {**good["weights"], "-gvn": float("nan")}},
             "text.json": {**good, "weights": {**good["weights"], "-gvn": "1"}}}
    messages = {"missing.json": "no such file", "other.json": "not an edit prior", "unknown.json": "unknown passes -no-such",
                "short.json": f"no weight for {FLAGS[0]}", "negative.json": "-gvn must be positive",
                "nan.json": "-gvn must be positive", "text.json": "-gvn must be positive"}
    for name, body in cases.items():
        if body is not None:
            (tmp_path / name).write_text(json.dumps(body))
        with pytest.raises(RankerError, match=messages[name]):
            load_edit_prior(tmp_path / name)
    assert len(load_edit_prior()) == len(PASSES)


def test_the_shipped_prior_leans_to_the_passes_that_beat_oz_for_the_host():
    weights = dict(zip(FLAGS, load_edit_prior()))
    assert min(weights.values()) >= EDIT_FLOOR
    assert weights["-gvn"] > 5 * EDIT_FLOOR and weights["-loop-unroll"] == pytest.approx(EDIT_FLOOR)


def search_passes(module, target, prior, monkeypatch, engine):
    """(the passes of the ranker's picks, those of the local search's candidates, the recommendation) of a
    search at budget 24 with ``prior`` as the shipped edit prior."""
    monkeypatch.setattr(recommend_module, "load_edit_prior", lambda path=None: prior)
    found, trials = recommend_module._search(module, 24, engine=engine, target=target)
    picks = {x for s, o in trials.origin.items() if o == "ranker" for x in s}
    edits = {x for s, o in trials.origin.items() if o == "local search" for x in s}
    return picks, edits, found


def test_a_search_for_a_target_edits_with_the_module_gains_and_the_prior_measure_mode_does_not(monkeypatch, engine):
    module = bpq.load_module(EXAMPLES / "matmul.c")
    target = Target.host()
    picks, _, _ = search_passes(module, target, None, monkeypatch, engine)    # the picks do not read the prior
    unpicked = [f for f in FLAGS if f not in picks]
    assert len(unpicked) >= 2
    chosen, edits, _ = search_passes(module, target, only(unpicked[0]), monkeypatch, engine)
    assert chosen == picks and unpicked[0] in edits
    assert edits <= picks | {unpicked[0]}             # vocabulary from the picks, the catalog half from the prior
    _, other_edits, _ = search_passes(module, target, only(unpicked[1]), monkeypatch, engine)
    assert unpicked[1] in other_edits and unpicked[0] not in other_edits
    _, _, plain = search_passes(module, None, only(unpicked[0]), monkeypatch, engine)
    _, _, other = search_passes(module, None, only(unpicked[1]), monkeypatch, engine)
    assert plain.tried == other.tried                 # measure mode never reads the prior


def test_cli_writes_the_prior_of_rows(tmp_path, capsys, engine):
    modules = [bpq.load_module(EXAMPLES / f"{n}.c") for n in ("matmul", "list_sort")]
    pool = [(OZ, "-gvn"), (OZ, "-instcombine"), ("-sroa",)]
    measure_pool_rows(modules, tmp_path / "rows", pool, engine=engine, target=Target.host())
    code = main(["ranker", "prior", str(tmp_path / "rows"), "--out", str(tmp_path / "prior.json"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    expected = edit_weights(load_ranker_data(tmp_path / "rows"))
    assert code == 0 and summary["modules"] == 2
    assert dict(zip(FLAGS, load_edit_prior(tmp_path / "prior.json"))) == pytest.approx(expected)
    assert json.loads((tmp_path / "prior.json").read_text())["target"] == Target.host().to_dict()
    code = main(["ranker", "prior", str(tmp_path / "rows"), "--out", str(tmp_path)])       # a folder
    err = capsys.readouterr().err
    assert code != 0 and str(tmp_path) in err and len(err.strip().splitlines()) == 1
    code = main(["ranker", "prior", str(tmp_path / "nothing"), "--out", str(tmp_path / "p2.json")])
    err = capsys.readouterr().err
    assert code != 0 and "pool.json missing" in err and not (tmp_path / "p2.json").exists()
