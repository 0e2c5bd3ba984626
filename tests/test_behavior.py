"""The behavior model (module x pipeline): pipeline tokens, the count tail, what training learns, the diverse
choice, and ``bpq ranker behavior`` end to end on a small split store."""

import json
import random

import numpy as np
import pytest
import torch
from test_downstream import varied_programs
from test_ranker import TINY_POOL, bpq_main

from behavioral_pq.core.catalog import PASSES
from behavioral_pq.corpus import build_corpus, compute_spectra, discover, split_corpus
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.encoder import COUNT_FEATURES, load_encoder
from behavioral_pq.tasks.guidance.behavior import (
    TOKEN,
    bootstrap_interval,
    count_tail,
    coverage_choice,
    fit_behavior,
    pipeline_tokens,
    predict,
    rank_correlations,
)
from behavioral_pq.tasks.guidance.ranker import PipelineRanker, measure_pool_rows, outcome_weights


def test_pipeline_tokens_keep_order_pad_with_zero_and_refuse_unknown_steps():
    tokens = pipeline_tokens([("-Oz", "-gvn"), ("-gvn", "-Oz", "-sroa"), ("-dce",)])
    assert tokens.shape == (3, 3) and tokens.dtype == np.int64
    assert tokens[0].tolist() == [TOKEN["-Oz"], TOKEN["-gvn"], 0]
    assert tokens[1].tolist() == [TOKEN["-gvn"], TOKEN["-Oz"], TOKEN["-sroa"]]
    assert tokens[2].tolist() == [TOKEN["-dce"], 0, 0]
    assert len(set(TOKEN.values())) == len(TOKEN) and min(v for k, v in TOKEN.items() if k != "<pad>") == 1
    with pytest.raises(ValueError, match="-no-such-pass"):
        pipeline_tokens([("-gvn", "-no-such-pass")])


def test_count_tail_is_what_the_shipped_embedding_appends():
    encoder = load_encoder()
    assert encoder.pooling == "mean+changes"
    rng = np.random.default_rng(0)
    spectra = rng.normal(0, 0.3, (3, encoder.probe_set.num_probes, 56)).astype(np.float32)
    autophase = rng.integers(0, 50, (3, 56))
    tail = count_tail(encoder, spectra, autophase)
    hidden = encoder.model.config.hidden_size
    assert np.allclose(tail, encoder.embed_spectra(spectra, autophase)[:, hidden:], atol=1e-6)
    assert tail.shape == (3, len(COUNT_FEATURES) * encoder.model.config.num_probes)


def _interaction_data(n=48, k=60, seed=0):
    """Gains where the module's first feature decides whether pipelines holding -gvn help or hurt: only a model
    that reads the module can rank the pipelines within a module."""
    rng = random.Random(seed)
    flags = [p.flag for p in PASSES if p.flag != "-gvn"]
    pool = [tuple(rng.choice(flags) for _ in range(rng.randint(1, 4))) + (("-gvn",) if j % 2 else ())
            for j in range(k)]
    x = np.random.default_rng(seed).normal(size=(n, 6)).astype(np.float32)
    holds = np.array([float("-gvn" in s) for s in pool])
    gains = 0.05 * np.sign(x[:, :1]) * holds[None, :] + 0.002 * np.random.default_rng(1).normal(size=(n, k))
    return pool, x, gains.astype(np.float32)


def test_a_module_tower_learns_what_no_module_input_cannot_on_unseen_pipelines():
    torch.set_num_threads(1)
    pool, x, gains = _interaction_data()
    tokens = pipeline_tokens(pool)
    split = dict(train_rows=range(32), train_cols=range(40), valid_rows=range(32, 40), valid_cols=range(40, 50))
    read = fit_behavior("spectrum", x, gains, tokens, epochs=6, steps_per_epoch=25, **split)
    blind = fit_behavior("none", np.zeros((len(x), 0), np.float32), gains, tokens, epochs=3, steps_per_epoch=10,
                         **split)
    test_rows, test_cols = np.arange(40, 48), np.arange(50, 60)
    rho_read = rank_correlations(predict(read.model, x[test_rows], tokens[test_cols]), gains[40:, 50:])
    rho_blind = rank_correlations(predict(blind.model, np.zeros((8, 0), np.float32), tokens[test_cols]),
                                  gains[40:, 50:])
    assert np.nanmean(rho_read) > 0.5, read.history
    assert abs(np.nanmean(rho_blind)) < 0.3
    assert [h["epoch"] for h in read.history] == list(range(6)) and 0 <= read.best_epoch < 6


def test_pqbert_objectives_start_from_and_change_the_weights_they_say():
    torch.set_num_threads(1)
    encoder = load_encoder()
    shipped = {k: v.clone() for k, v in encoder.model.state_dict().items()}
    c = encoder.model.config
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (12, c.num_probes, c.num_subspaces)).astype(np.uint8)
    pool, _, _ = _interaction_data(n=12, k=12)
    gains = rng.normal(0, 0.05, (12, 12)).astype(np.float32)
    split = dict(train_rows=range(8), train_cols=range(8), valid_rows=range(8, 12), valid_cols=range(8, 12))

    def tower_weights(tower, steps):
        fit = fit_behavior(tower, codes, gains, pipeline_tokens(pool), encoder=encoder, epochs=1,
                           steps_per_epoch=steps, device="cpu", **split)
        assert next(fit.model.parameters()).device.type == "cpu"
        return fit.model.module_tower.model.state_dict()

    def moved(state, names):
        return [k for k in names if not torch.equal(state[k], shipped[k])]

    def largest_change(state):
        return max(float((state[k] - shipped[k]).abs().max()) for k in layers)

    layers = [k for k in shipped if k.startswith("encoder.")]                  # the Transformer's layers
    heads = [k for k in shipped if k.startswith("heads.")]
    assert layers and heads
    assert moved(tower_weights("pqbert-frozen", 3), shipped) == []             # masked codes only: fixed
    tuned = tower_weights("pqbert", 2)
    assert largest_change(tower_weights("pqbert-scratch", 1)) > 0.05 > 0.01 > largest_change(tuned)  # a fresh start
    joint = tower_weights("pqbert-joint", 2)
    assert moved(tuned, layers) and moved(joint, layers)
    assert moved(tuned, heads) == []                                           # the masked-code heads learn only
    assert moved(joint, heads)                                                 # when their loss is in the sum
    assert all(torch.equal(v, shipped[k]) for k, v in encoder.model.state_dict().items())   # the encoder untouched


def test_coverage_choice_prefers_a_complement_to_a_copy():
    predicted = np.array([0.10, 0.10, 0.09, 0.0])
    # columns 0 and 1 win together, column 2 wins where they lose
    residuals = np.array([[0.05, 0.05, -0.09, 0.0], [-0.1, -0.1, 0.05, 0.0]] * 4)
    assert coverage_choice(predicted, residuals, 2) == [0, 2]
    assert coverage_choice(predicted, residuals, 4)[:2] == [0, 2] and sorted(coverage_choice(predicted, residuals, 4)) \
        == [0, 1, 2, 3]


def test_outcome_weights_favour_the_scenarios_that_reacted_alike():
    scenarios = np.array([[0.10, 0.00], [0.10, 0.01], [-0.20, 0.30]])
    w = outcome_weights(scenarios, np.array([0.10, 0.00]), bandwidth=0.01, floor=0.0)
    assert w.sum() == pytest.approx(1.0) and w[0] > w[1] > w[2] and w[2] < 1e-6
    w = outcome_weights(scenarios, np.array([0.10, 0.00]), bandwidth=0.01, floor=0.3)
    assert w.min() >= 0.1 - 1e-12                                   # the floor keeps every scenario possible
    assert np.allclose(outcome_weights(scenarios[:, :0], np.zeros(0)), 1 / 3)
    with pytest.raises(ValueError, match="disagree"):
        outcome_weights(scenarios, np.zeros(3))


def test_a_ranker_told_the_first_outcome_chooses_what_helped_modules_that_reacted_alike():
    # two kinds of module: on kind A pipeline 0 gains a little and pipeline 1 much; on kind B pipeline 0 loses
    # and pipeline 2 gains much. Pipeline 0 is what both kinds share best, so it comes first.
    pool = [("-sroa",), ("-gvn",), ("-licm",), ("-dce",)]
    kind_a, kind_b = [0.05, 0.20, 0.00, 0.0], [-0.02, 0.00, 0.15, 0.0]
    gains = np.array([kind_a, kind_b] * 20) + np.random.default_rng(0).normal(0, 0.002, (40, 4))
    gains[:, 0] += 0.1                                              # pipeline 0 is the global first pick
    ranker = PipelineRanker.fit(np.zeros((40, 0)), gains, pool, "none")
    first = ranker.choose(None, 1)
    assert first == [pool[0]]
    assert ranker.choose(None, 1, outcomes={pool[0]: 0.15}) == [pool[1]]       # reacted like kind A
    assert ranker.choose(None, 1, outcomes={pool[0]: 0.08}) == [pool[2]]       # reacted like kind B
    assert pool[0] not in ranker.choose(None, 3, outcomes={pool[0]: 0.15})     # measured: not chosen again


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_data():
    rng = np.random.default_rng(0)
    small, large = rng.normal(1.0, 1.0, 20), rng.normal(1.0, 1.0, 2000)
    lo, hi = bootstrap_interval(small)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_interval(large)
    assert lo2 < 1.0 < hi2 and hi2 - lo2 < (hi - lo) / 4


@pytest.fixture(scope="module")
def behavior_store(tmp_path_factory):
    """A store of 24 generated programs in 6 projects split into train, valid and test by project, with spectra
    and rows of TINY_POOL for every module."""
    root = tmp_path_factory.mktemp("behavior")
    store = root / "store"
    sources = varied_programs(root / "src", 24)
    for i, path in enumerate(sorted(sources.glob("*.c"))):
        (sources / f"p{i % 6}").mkdir(exist_ok=True)
        path.rename(sources / f"p{i % 6}" / path.name)
    build_corpus(discover([sources], origin="t", group_regex=r"^(p\d)/"), store, workers=2, labels=False)
    split_corpus(store, fractions=[0.5, 0.25, 0.25], seed=4)     # 3 train, 1 valid, 2 test projects
    compute_spectra(store, workers=2)
    measure_pool_rows(list(Corpus(store).iter_modules()), root / "data", TINY_POOL)
    return root


def test_cli_behavior_compares_towers_and_writes_report_and_curves(behavior_store, capsys):
    out = behavior_store / "report"
    code, stdout, err = bpq_main(capsys, "ranker", "behavior", behavior_store / "data", "--corpus",
                                 behavior_store / "store", "--out", out, "--towers", "pqbert,pqbert+counts,counts,none",
                                 "--epochs", "2", "--steps", "3", "--threads", "1", "--held-out", "0.25",
                                 "--searches", "3")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert set(report["towers"]) == {"pqbert", "pqbert+counts", "counts", "none"}
    assert report["pipelines"] == {"pool": len(TINY_POOL), "train": 6, "held_out": 2}
    assert sum(report["modules"].values()) == 24 and min(report["modules"].values()) >= 2
    for tower in report["towers"].values():
        assert -1.0 <= tower["test_rho"] <= 1.0 and len(tower["history"]) == 2
    for budget, entry in report["guidance"].items():
        assert {"global", "ridge-spectrum", "pqbert", "counts", "none", "pool-best"} <= set(entry)
        for name, result in entry.items():
            assert result["ratio"] <= entry["pool-best"]["ratio"] + 1e-9, (budget, name)
            assert result["ratio"] >= 1.0 - 1e-9                        # -Oz is always there: never below it
    probe = report["oz_benefit_probe"]
    assert {"autophase", "raw spectrum", "count tail", "encoder mean", "behavior pqbert", "behavior counts"} \
        <= set(probe) and "behavior none" not in probe
    assert probe["count tail"]["dim"] == 200
    assert probe["behavior pqbert"]["dim"] == probe["behavior pqbert+counts"]["dim"] == 224
    assert all(r["ridge"] >= 0 and r["knn"] >= 0 for r in probe.values())
    searches = report["searches"]
    assert searches["tower"] in report["towers"] and searches["modules"] == 3
    for budget in ("10", "50"):
        assert set(searches[budget]) == {"global + local", "behavior + local", "behavior + guided"}
        assert all(r["ratio"] >= 1.0 - 1e-9 for r in searches[budget].values())
    assert (out / "curves.png").stat().st_size > 1000
    assert "rank correlation" in (out / "report.md").read_text() and "budget 50" in stdout


def test_cli_behavior_refuses_unknown_towers_and_empty_data(behavior_store, capsys, tmp_path):
    code, _, err = bpq_main(capsys, "ranker", "behavior", behavior_store / "data", "--corpus",
                            behavior_store / "store", "--out", tmp_path / "r", "--towers", "pqbert,gnn")
    assert code != 0 and "gnn" in err
    code, _, err = bpq_main(capsys, "ranker", "behavior", tmp_path / "nothing", "--corpus",
                            behavior_store / "store", "--out", tmp_path / "r")
    assert code != 0 and "pool.json" in err
    code, _, err = bpq_main(capsys, "ranker", "behavior", behavior_store / "data", "--corpus",
                            behavior_store / "store", "--out", tmp_path / "r", "--towers", "pqbert-joint,gnn")
    assert code != 0 and "gnn" in err and "pqbert-scratch" in err        # the objectives are named as choices
    if not torch.cuda.is_available():
        code, _, err = bpq_main(capsys, "ranker", "behavior", behavior_store / "data", "--corpus",
                                behavior_store / "store", "--out", tmp_path / "r", "--device", "cuda")
        assert code != 0 and "no CUDA device" in err


class _PrefersGvn(torch.nn.Module):
    """A stand-in model that scores a pipeline by how many -gvn steps it holds (whatever the module)."""

    def forward(self, modules, tokens):
        score = (tokens == TOKEN["-gvn"]).float().sum(1)                           # (K,)
        return score[None, :].expand(modules.shape[0], -1) * 10


def test_guided_local_search_compiles_what_the_model_ranks_first_within_the_budget(engine):
    import random as stdlib_random

    import behavioral_pq as bpq
    from conftest import EXAMPLES

    from behavioral_pq.tasks.guidance.behavior import guided_local_search
    from behavioral_pq.tasks.guidance.trials import Trials

    module = bpq.load_module(EXAMPLES / "matmul.c")
    trials = Trials(module, engine, 9)
    trials.run([("-sroa",)], "start")
    guided_local_search(trials, _PrefersGvn(), np.zeros(0, np.float32), ("-sroa",), stdlib_random.Random(0),
                        ["-gvn", "-dce", "-sroa"], batch=4)
    assert trials.compilations == 9
    searched = [s for s, origin in trials.origin.items() if origin == "guided local search"]
    assert len(searched) == 8 and len(set(searched)) == 8
    # one edit of (-sroa,) can hold -gvn three ways; the model ranks those first, so they are compiled first
    assert set(searched[:3]) == {("-sroa", "-gvn"), ("-gvn",), ("-gvn", "-sroa")}
    assert not any("-gvn" in s for s in searched[3:])
