"""The learned pipeline ranker: its pool, gains, fit and diverse choice, storage, training rows,
recommend_pipeline(ranker=) and the ``bpq ranker`` commands."""

import json
import math

import numpy as np
import pytest
from conftest import EXAMPLES
from test_downstream import varied_programs
from test_guidance import CountingEngine
from test_target import FOUR

import behavioral_pq as bpq
from behavioral_pq.artifacts import encoder_identity, seal
from behavioral_pq.cli.main import main
from behavioral_pq.core.features import autophase
from behavioral_pq.corpus import build_corpus, compute_spectra, discover, split_corpus
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.errors import RankerError
from behavioral_pq.core.catalog import MEANING_CHANGING, meaning_preserving
from behavioral_pq.tasks.guidance import (
    GENERIC,
    OZ,
    default_library,
    describe_steps,
    greedy_search,
    random_search,
    recommend_pipeline,
)
from behavioral_pq.tasks.guidance.build import deepen_pool
from behavioral_pq.tasks.guidance.coreset import measure_pool, oz_suffixes
import behavioral_pq.tasks.guidance.ranker as ranker_module
import behavioral_pq.tasks.guidance.recommend as recommend_module
from behavioral_pq.tasks.guidance.ranker import (
    GAIN_FLOOR,
    PipelineRanker,
    LARGE_MODULE,
    default_ranker,
    default_ranker_name,
    gains_matrix,
    load_ranker,
    load_ranker_data,
    measure_pool_rows,
    ranker_pool,
    representation_rows,
)

A, B, C = ("-gvn",), ("-sroa", "-instcombine"), ("-simplifycfg",)
A_COPY = ("-gvn", "-gvn")        # measured as a copy of A: the same gain on every module
#: A pool small enough to measure in a blink, with -Oz chains (a prefix tree) and plain passes.
TINY_POOL = [A, B, C, (OZ, "-slp-vectorizer"), (OZ, "-slp-vectorizer", OZ), ("-mem2reg", "-gvn", "-dce"),
             ("-inline", "-sroa", "-early-cse"), (OZ, OZ)]


def test_pool_holds_generic_pipelines_oz_suffixes_and_library_pipelines_once_and_never_oz_alone():
    library = default_library()
    pool = ranker_pool(library)
    assert len(pool) == len(set(pool)) and (OZ,) not in pool
    assert set(GENERIC) - {(OZ,)} <= set(pool) and set(oz_suffixes()) <= set(pool)
    assert set(library.coreset) - {(OZ,)} <= set(pool)
    better = [p.best()[0] for p in library.programs if p.best()[0] != (OZ,) and p.best()[1] < p.oz_count]
    assert better and set(better) & set(pool)                          # programs' best pipelines join it
    assert pool == ranker_pool(library) != ranker_pool(library, seed=1)   # the edits are seeded
    bare = ranker_pool(None)                                          # no library: generic and -Oz suffixes only
    assert set(bare) == (set(GENERIC) | set(oz_suffixes())) - {(OZ,)}
    fewer = ranker_pool(library, library_best=3, mutations=0)
    assert len(fewer) == len(set(GENERIC) | set(library.coreset) | set(oz_suffixes()) | {(OZ,)}) - 1 + 3


def test_gains_floor_failures_and_pipelines_worse_than_oz():
    oz = np.array([100, 40])
    values = np.array([[50.0, 100.0, 200.0, np.nan],
                       [40.0, 20.0, 41.0, 0.0]])
    gains = gains_matrix(oz, values)
    assert gains.dtype == np.float32 and gains.shape == (2, 4)
    np.testing.assert_allclose(gains, [[math.log(2), 0.0, GAIN_FLOOR, GAIN_FLOOR],
                                       [0.0, math.log(2), max(math.log(40 / 41), GAIN_FLOOR), math.log(40)]],
                               rtol=1e-6)
    assert gains[0, 2] == gains[0, 3] == np.float32(GAIN_FLOOR)     # 2x worse than -Oz, and failed: the floor
    assert gains[1, 2] == np.float32(math.log(40 / 41))              # a little worse: above the floor, kept


def synthetic(n: int = 80, seed: int = 0):
    """Rows (n, 3) and gains (n, 4) of the pool [A, B, C, A_COPY]: A gains when feature 0 > -0.3, B otherwise,
    C never; A_COPY is A's column again."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, 3)).astype(np.float32)
    a = np.where(rows[:, 0] > -0.3, 0.10, GAIN_FLOOR) + rng.normal(0, 0.005, n)
    b = np.where(rows[:, 0] <= -0.3, 0.10, GAIN_FLOOR) + rng.normal(0, 0.005, n)
    c = np.zeros(n) + rng.normal(0, 0.005, n)
    return rows, np.stack([a, b, c, a], axis=1).astype(np.float32), [A, B, C, A_COPY]


def test_fit_learns_which_pipeline_wins_where_and_chooses_diverse_pipelines():
    rows, gains, pool = synthetic()
    ranker = PipelineRanker.fit(rows, gains, pool, "autophase", groups=np.arange(len(rows)) // 4, seed=0)
    assert ranker.dim == 3 and ranker.training["modules"] == 80 and ranker.training["cv_gain"] > 0.08
    positive, negative = np.array([2.0, 0.0, 0.0]), np.array([-2.0, 0.0, 0.0])
    assert ranker.choose(positive, 1) == [A] and ranker.choose(negative, 1) == [B]
    assert ranker.scores(positive)[0] > ranker.scores(positive)[1]
    assert A_COPY not in ranker.choose(positive, 2)                  # a copy of the first adds nothing
    assert ranker.choose(positive, 4, exclude=[A])[0] == A_COPY and A not in ranker.choose(positive, 4, exclude=[A])
    with pytest.raises(ValueError, match="rows of 3 values"):
        ranker.scores(np.zeros(4))

    nothing = PipelineRanker.fit(representation_rows("none", autophase=np.zeros((80, 56))), gains, pool, "none")
    assert nothing.dim == 0 and nothing.training["alpha"] == 0.0
    by_mean = [pool[i] for i in np.argsort(-nothing.scores(None))[:2]]
    assert set(by_mean) == {A, A_COPY}                               # the top 2 by mean gain: two copies
    assert set(nothing.choose(None, 2)) in ({A, B}, {A_COPY, B})       # the coverage choice: both winners
    assert nothing.choose(np.zeros(0), 2) == nothing.choose(None, 2)
    # measured already: not chosen, and what it gains is found, so the next pick complements it (B, not A's copy)
    assert nothing.choose(None, 1, measured=[A]) == [B] and nothing.choose(None, 1, exclude=[A]) == [A_COPY]
    with pytest.raises(RankerError, match="at least 2"):
        PipelineRanker.fit(rows[:1], gains[:1], pool, "autophase")
    with pytest.raises(RankerError, match="gains"):
        PipelineRanker.fit(rows, gains[:, :3], pool, "autophase")


def rewrite_config(folder, change) -> None:
    """Apply ``change`` to a saved ranker's config and seal it again (a consistent, valid-looking ranker.json)."""
    path = folder / "ranker.json"
    config = json.loads(path.read_text())
    config.pop("digest")
    change(config)
    path.write_text(json.dumps(seal(config)))


def test_a_saved_ranker_reads_back_equal_and_a_damaged_one_is_refused(tmp_path):
    import shutil

    rows, gains, pool = synthetic()
    ranker = PipelineRanker.fit(rows, gains, pool, "autophase", identity={"probe_set_hash": "x"})
    saved = ranker.save(tmp_path / "r")
    again = load_ranker(saved)
    for row in rows[:5]:
        np.testing.assert_array_equal(again.scores(row), ranker.scores(row))
        assert again.choose(row, 3) == ranker.choose(row, 3)
    assert again.pool == pool and again.representation == "autophase" and again.alpha == ranker.alpha
    assert again.identity == {"probe_set_hash": "x"} and again.training == ranker.training
    assert again.objective == "ir-count"

    def broken(name, damage):
        folder = tmp_path / name
        shutil.copytree(saved, folder)
        damage(folder)
        return folder

    def edit_json(folder):
        path = folder / "ranker.json"
        path.write_text(path.read_text().replace('"representation":"autophase"', '"representation":"spectrum"'))

    def flip_weights(folder):
        data = bytearray((folder / "ranker.safetensors").read_bytes())
        data[-3] ^= 0xFF
        (folder / "ranker.safetensors").write_bytes(bytes(data))

    def drop_a_pipeline(folder):
        rewrite_config(folder, lambda config: config.update(pool=config["pool"][:-1]))

    def unknown_objective(folder):
        rewrite_config(folder, lambda config: config.update(objective="runtime"))

    cases = {"json": (edit_json, "digest mismatch"), "weights": (flip_weights, "checksum mismatch"),
             "shape": (drop_a_pipeline, "do not fit"), "objective": (unknown_objective, "unknown objective")}
    for name, (damage, message) in cases.items():
        with pytest.raises(RankerError, match=message):
            load_ranker(broken(name, damage))
    older = broken("older", lambda folder: rewrite_config(folder, lambda config: config.pop("objective")))
    assert load_ranker(older).objective == "ir-count"                # written before text size: it counts IR
    ranker.weights[1, 2] = np.nan
    ranker.save(tmp_path / "nan")
    with pytest.raises(RankerError, match="non-finite"):
        load_ranker(tmp_path / "nan")
    with pytest.raises(RankerError, match="no such ranker folder"):
        load_ranker(tmp_path / "missing")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(RankerError, match="not a pipeline ranker"):
        ranker.save(tmp_path / "mine")                              # a folder that holds something else
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    with pytest.raises(RankerError, match="do not fit a pool"):
        PipelineRanker(pool[:-1], "none", np.zeros(0), np.zeros(0), np.zeros((0, 4)), np.zeros(4), np.zeros((2, 4)))


def test_pool_rows_are_measure_pool_counts_and_a_second_call_measures_nothing(engine, examples, tmp_path):
    modules = [examples[name] for name in ("sum_array", "matmul", "state_machine")]
    folder = tmp_path / "rows"
    written, failures = measure_pool_rows(modules[:2], folder, TINY_POOL, engine=engine, chunk=1)
    assert (written, failures) == (2, [])
    written, failures = measure_pool_rows(modules, folder, TINY_POOL, engine=engine)
    assert (written, failures) == (1, [])                            # only the new module
    data = load_ranker_data(folder)
    assert data.pool == TINY_POOL and data.shas == [m.sha256 for m in modules] and (data.seconds > 0).all()
    for module, oz, values in zip(modules, data.oz, data.values):
        want_oz, counts = measure_pool(module, TINY_POOL, engine)
        assert oz == want_oz and values.tolist() == [float(c) for c in counts]
        assert oz == bpq.optimize(module, "Oz", engine=engine).instruction_count
    counting = CountingEngine(engine)
    assert measure_pool_rows(modules, folder, TINY_POOL, engine=counting) == (0, [])
    assert counting.pipelines == 0
    with pytest.raises(RankerError, match="another pool"):
        measure_pool_rows(modules, folder, TINY_POOL[:-1], engine=engine)


#: Small loops that -Oz keeps and "-Oz -loop-rotate -Oz" shortens (27 -> 25 instructions on LLVM 19).
LOOPS_C = """
int sum4(const int *a) { int s = 0; for (int i = 0; i < 4; i++) s += a[i] * (i + 1); return s; }
int dot3(const int *a, const int *b) { int s = 0; for (int i = 0; i < 3; i++) s += a[i] * b[i]; return s; }
"""


def test_deepen_adds_the_winners_of_deep_searches_and_measures_only_the_new_columns(engine, examples, tmp_path):
    (tmp_path / "loops.c").write_text(LOOPS_C)
    loops = bpq.load_module(tmp_path / "loops.c")
    modules = [loops, examples["sum_array"], examples["matmul"]]
    pool = TINY_POOL + [(OZ, "-loop-rotate", OZ)]
    measure_pool_rows(modules, tmp_path / "rows", pool, engine=engine)
    base = load_ranker_data(tmp_path / "rows")
    assert base.gains[0, -1] > 0                                     # the pool's winner on the loops
    added, written, failures = deepen_pool(tmp_path / "rows", tmp_path / "deep", [loops], modules, budget=30,
                                           keep=3, engine=engine)
    deep = load_ranker_data(tmp_path / "deep")
    assert written == 3 and failures == [] and deep.shas == base.shas
    assert deep.pool[:len(pool)] == pool and len(deep.pool) == len(pool) + added
    assert 1 <= added <= 3 and len(set(deep.pool)) == len(deep.pool)
    assert np.array_equal(deep.values[:, :len(pool)], base.values, equal_nan=True)   # copied, not remeasured
    new = deep.pool[len(pool):]
    for module, row in zip(modules, deep.values):
        _, counts = measure_pool(module, new, engine)
        assert row[len(pool):].tolist() == [float(c) for c in counts]
    assert (deep.gains[0, len(pool):] > 0).all()                     # each added pipeline beat -Oz where found
    counting = CountingEngine(engine)
    assert deepen_pool(tmp_path / "rows", tmp_path / "deep", [loops], modules, engine=counting) == (added, 0, [])
    assert counting.pipelines == 0                                   # winners and rows are kept: nothing reruns


@pytest.fixture(scope="module")
def tiny_ranker(tmp_path_factory, examples):
    """An Autophase ranker over TINY_POOL fitted on the rows of 12 small generated programs and the examples."""
    from behavioral_pq import Engine

    root = tmp_path_factory.mktemp("ranker")
    sources = varied_programs(root / "src", 12)
    modules = [bpq.load_module(p) for p in sorted(sources.glob("*.c"))] + list(examples.values())
    with Engine(workers=2, timeout=60) as engine:
        measure_pool_rows(modules, root / "rows", TINY_POOL, engine=engine)
    data = load_ranker_data(root / "rows")
    by_sha = {m.sha256: m for m in modules}
    rows = representation_rows("autophase", autophase=np.stack([autophase(by_sha[s]) for s in data.shas]))
    ranker = PipelineRanker.fit(rows, data.gains, data.pool, "autophase")
    ranker.save(root / "ranker")
    return ranker


def rounds_of(ranker, row, found, picks: int, size: int = 2) -> list:
    """The ranker's first ``picks`` in rounds of ``size``, each told the outcomes ``found`` measured before it."""
    counts = dict(found.tried)
    chosen: list = []
    while len(chosen) < picks:
        outcomes = {s: math.log(found.oz_count / counts[s]) for s in chosen} or None
        chosen += ranker.choose(row, min(size, picks - len(chosen)), measured=[OZ, *chosen], outcomes=outcomes)
    return chosen


def test_recommend_spends_the_budget_on_the_rankers_picks_first(tiny_ranker, engine, examples, monkeypatch):
    module = examples["matmul"]
    row = representation_rows("autophase", autophase=autophase(module)[None])[0]
    picks = tiny_ranker.choose(row, 4)                              # round(6 * RANKED_SHARE)
    counting = CountingEngine(engine)
    found = recommend_pipeline(module, 6, ranker=tiny_ranker.path, engine=counting)
    assert found.compilations == 6 and counting.pipelines == 6 + 1   # -Oz is measured besides the budget
    assert found.instruction_count <= found.oz_count
    tried = [steps for steps, _ in found.tried]
    assert tried[:4] == picks and len(tried) == 6
    # in rounds of 2, the second round is chosen knowing the first's outcomes
    monkeypatch.setattr(recommend_module, "RANKED_ROUND", 2)
    found = recommend_pipeline(module, 6, ranker=tiny_ranker.path, engine=engine)
    tried = [steps for steps, _ in found.tried]
    assert tried[:2] == picks[:2] and len(tried) == 6
    counts = dict(found.tried)
    outcomes = {s: math.log(found.oz_count / counts[s]) for s in tried[:2]}
    assert tried[2:4] == tiny_ranker.choose(row, 2, measured=[OZ, *tried[:2]], outcomes=outcomes)
    assert tried[:4] == rounds_of(tiny_ranker, row, found, 4)
    assert found.instruction_count == min([found.oz_count] + [c for _, c in found.tried if c is not None])
    assert bpq.optimize(module, found.pipeline, engine=engine).instruction_count == found.instruction_count
    with pytest.raises(ValueError, match="ir-count"):
        recommend_pipeline(module, 2, ranker=tiny_ranker, engine=engine, objective="text-size")


def test_recommend_refuses_a_ranker_fitted_on_another_encoders_inputs(tiny_ranker, engine, examples):
    encoder = load_encoder()
    pool, k = tiny_ranker.pool, len(tiny_ranker.pool)

    def ranker(representation, dim, identity):
        return PipelineRanker(pool, representation, np.zeros(dim, np.float32), np.ones(dim, np.float32),
                              np.zeros((dim, k), np.float32), np.zeros(k, np.float32), np.zeros((2, k), np.float32),
                              identity=identity)

    other = dict(encoder_identity(encoder), model_sha256="0" * 64)
    with pytest.raises(RankerError, match="encoder"):
        recommend_pipeline(examples["matmul"], 4, ranker=ranker("embedding", encoder.dim, other), engine=engine)
    with pytest.raises(RankerError, match="probe set"):
        recommend_pipeline(examples["matmul"], 4, engine=engine,
                           ranker=ranker("spectrum", 56 * (encoder.probe_set.num_probes + 1),
                                         {"probe_set_hash": "f" * 64}))
    mine = ranker("embedding", encoder.dim, encoder_identity(encoder))
    assert recommend_pipeline(examples["matmul"], 4, ranker=mine, engine=engine).compilations == 4


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    """A split store of 16 generated programs in 4 projects (p0/ to p3/, a split group each) with spectra for the
    shipped encoder's probe set, and rows of TINY_POOL (tiny-data) for the modules of p0/ and an example that is
    not in the store."""
    root = tmp_path_factory.mktemp("ranker-cli")
    store = root / "store"
    sources = varied_programs(root / "src", 16)
    for i, path in enumerate(sorted(sources.glob("*.c"))):
        (sources / f"p{i % 4}").mkdir(exist_ok=True)
        path.rename(sources / f"p{i % 4}" / path.name)
    build_corpus(discover([sources], origin="t", group_regex=r"^(p\d)/"), store, workers=2, labels=False)
    split_corpus(store, fractions=[0.7, 0.3], names=["train", "test"], seed=0)
    compute_spectra(store, workers=2)
    groups = Corpus(store).split_groups()
    modules = [m for m in Corpus(store).iter_modules() if groups[m.sha256].endswith(":p0")]
    measure_pool_rows(modules + [bpq.load_module(EXAMPLES / "matmul.c")], root / "tiny-data", TINY_POOL)
    return root


def bpq_main(capsys, *args):
    """``bpq ARGS`` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_measures_fits_shows_and_optimizes_with_a_ranker(cli_store, capsys):
    store, data, out = cli_store / "store", cli_store / "data", cli_store / "ranker"
    train = Corpus(store).split("train")
    code, stdout, _ = bpq_main(capsys, "ranker", "measure", store, "--out", data, "--programs", 3, "--json")
    first = json.loads(stdout)
    assert code == 0 and first["written"] == first["rows"] == 3 and first["failures"] == []
    assert first["pool"] == len(ranker_pool(default_library()))
    code, stdout, _ = bpq_main(capsys, "ranker", "measure", store, "--out", data)       # the rest of the split
    assert code == 0 and f"{len(train) - 3} rows written ({len(train)} in all" in stdout
    assert sorted(load_ranker_data(data).shas) == train

    code, stdout, _ = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "embedding",
                               "--out", out)
    assert code == 0 and "reading the embedding" in stdout and f"fitted on {len(train)} modules" in stdout
    ranker = load_ranker(out)
    groups = Corpus(store).split_groups()
    assert ranker.representation == "embedding" and ranker.identity == encoder_identity(load_encoder())
    assert ranker.training["modules"] == len(train) and ranker.training["groups"] == len({groups[s] for s in train})
    assert 2 <= ranker.training["groups"] < len(train)               # held out by project, not module by module
    assert f"ridge alpha {ranker.alpha:g}" in stdout

    code, stdout, _ = bpq_main(capsys, "ranker", "show", out, "--top", 3)
    lines = [line for line in stdout.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert code == 0 and [line.split(maxsplit=2)[2] for line in lines] == [describe_steps(s)
                                                                           for s in ranker.choose(None, 3)]
    code, stdout, _ = bpq_main(capsys, "ranker", "show", out, "--top", 2, "--json")
    assert [tuple(t["steps"]) for t in json.loads(stdout)["top"]] == ranker.choose(None, 2)

    code, stdout, _ = bpq_main(capsys, "optimize", EXAMPLES / "matmul.c", "--auto", "--budget", 4, "--ranker", out,
                               "--target", "measure", "--json")
    record = json.loads(stdout)
    assert code == 0 and record["compilations"] == 4 and record["probe_compilations"] > 0
    assert record["neighbors"] == []                                 # the ranker chose, not the library
    assert record["instructions_after"] == record["instruction_count"] <= record["oz_count"]

    code, stdout, _ = bpq_main(capsys, "compile", EXAMPLES / "matmul.c", "--auto-passes", "--budget", 3, "--ranker",
                               out, "--target", "measure", "-o", cli_store / "matmul")
    assert code == 0 and "in 3/3 compilations" in stdout and (cli_store / "matmul").is_file()

    code, stdout, _ = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "none",
                               "--out", cli_store / "global", "--json")
    assert code == 0 and json.loads(stdout)["dim"] == 0 and load_ranker(cli_store / "global").dim == 0
    sizes = dict(zip(*Corpus(store).modules(["sha256", "instruction_count"]).to_pydict().values()))
    bound = sorted(sizes[s] for s in train)[len(train) // 2]
    code, stdout, _ = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "none",
                               "--out", cli_store / "smaller", "--max-instructions", bound, "--json")
    smaller = load_ranker(cli_store / "smaller")
    assert code == 0 and smaller.training["modules"] == sum(sizes[s] <= bound for s in train) < len(train)
    assert smaller.training["max_instructions"] == bound and smaller.pool == load_ranker(cli_store / "global").pool
    assert not np.allclose(smaller.scores(None), load_ranker(cli_store / "global").scores(None))
    code, _, err = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "none",
                            "--out", cli_store / "none-left", "--max-instructions", min(sizes.values()) - 1)
    assert code != 0 and "no rows of modules of at most" in err
    code, stdout, _ = bpq_main(capsys, "ranker", "fit", cli_store / "tiny-data", "--corpus", store,
                               "--representation", "autophase", "--out", cli_store / "one-project")
    assert code == 0 and "note: 1 of the 5 measured modules left out: not in this store" in stdout
    assert "are all in split group 't:p0': cross-validation holds out modules instead" in stdout
    assert load_ranker(cli_store / "one-project").training["groups"] == 4

    code, stdout, _ = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "spectrum",
                               "--out", cli_store / "spectrum")
    assert code == 0 and load_ranker(cli_store / "spectrum").dim == (load_encoder().probe_set.num_probes + 1) * 56


def test_cli_measure_extends_a_folder_with_its_own_pool(cli_store, capsys, tmp_path, engine):
    """A folder whose pool is not the library's (deepened, or made by hand) takes more modules measured on its
    own pool; naming a library whose pool differs is refused."""
    import shutil

    store, data = cli_store / "store", tmp_path / "data"
    shutil.copytree(cli_store / "tiny-data", data)
    before = load_ranker_data(data)
    assert before.pool == TINY_POOL and len(before.shas) == 5
    code, stdout, _ = bpq_main(capsys, "ranker", "measure", store, "--out", data, "--json")
    summary = json.loads(stdout)
    train = Corpus(store).split("train")
    after = load_ranker_data(data)
    assert code == 0 and summary["pool"] == len(TINY_POOL) and summary["failures"] == []
    assert after.pool == TINY_POOL and set(train) <= set(after.shas) and set(before.shas) <= set(after.shas)
    assert summary["written"] == len(set(train) - set(before.shas)) > 0
    module = next(Corpus(store).iter_modules(only={next(s for s in train if s not in before.shas)}))
    _, counts = measure_pool(module, TINY_POOL, engine)
    assert after.values[after.shas.index(module.sha256)].tolist() == [float(c) for c in counts]
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", data, "--library", "shipped")
    assert code != 0 and "holds rows of another pool" in err


def test_cli_deepen_searches_only_the_larger_modules_and_keeps_every_row(cli_store, capsys, tmp_path):
    """--min-instructions narrows the deep searches, not the rows the larger pool is measured on."""
    store, data = cli_store / "store", cli_store / "tiny-data"
    corpus = Corpus(store)
    sizes = dict(zip(*corpus.modules(["sha256", "instruction_count"]).to_pydict().values()))
    rows = [s for s in load_ranker_data(data).shas if s in sizes]
    threshold = sorted(sizes[s] for s in rows)[len(rows) // 2]
    code, stdout, _ = bpq_main(capsys, "ranker", "deepen", data, "--corpus", store, "--out", tmp_path / "deep",
                               "--programs", 10, "--budget", 8, "--min-instructions", threshold, "--json")
    summary = json.loads(stdout)
    searched = json.loads((tmp_path / "deep" / "deep.json").read_text())["searched"]
    assert code == 0 and summary["searched"] == len(searched) == sum(sizes[s] >= threshold for s in rows) > 0
    assert all(sizes[s] >= threshold for s in searched) and summary["rows"] == len(rows) > len(searched)
    code, stdout, _ = bpq_main(capsys, "ranker", "deepen", data, "--corpus", store, "--out", tmp_path / "band",
                               "--programs", 10, "--budget", 8, "--search-max", threshold - 1, "--json")
    searched = json.loads((tmp_path / "band" / "deep.json").read_text())["searched"]
    assert code == 0 and len(searched) == sum(sizes[s] < threshold for s in rows) > 0
    assert all(sizes[s] < threshold for s in searched) and json.loads(stdout)["rows"] == len(rows)
    code, _, err = bpq_main(capsys, "ranker", "deepen", data, "--corpus", store, "--out", tmp_path / "none",
                            "--min-instructions", max(sizes.values()) + 1)
    assert code != 0 and "no rows of modules of at least" in err


def test_cli_measure_from_old_rows_copies_them_and_measures_the_stale_cells(cli_store, capsys, tmp_path, engine):
    store = cli_store / "store"
    tiny = load_ranker_data(cli_store / "tiny-data")
    pool = TINY_POOL + [("-loweratomic", "-gvn")]
    old = legacy_rows(tmp_path / "old", pool, tiny.shas, tiny.oz,
                      np.hstack([tiny.values + 1000, np.ones((len(tiny.shas), 1))]), tiny.names)
    code, stdout, _ = bpq_main(capsys, "ranker", "fit", old, "--corpus", store, "--representation", "none",
                               "--out", tmp_path / "stale-ranker")
    assert code == 0 and "note: 1 of the 9 pipelines were measured with -lowerinvoke or -loweratomic" in stdout
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", old)
    assert code != 0 and f"--from {old} --out NEW" in err
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--from", old, "--out", tmp_path / "x",
                            "--objective", "text-size")
    assert code != 0 and "holds ir-count rows, not --objective text-size" in err
    code, stdout, _ = bpq_main(capsys, "ranker", "measure", store, "--from", old, "--out", tmp_path / "new", "--json")
    summary, new = json.loads(stdout), load_ranker_data(tmp_path / "new")
    train = Corpus(store).split("train")
    assert code == 0 and summary["pool"] == len(pool) and new.pool == pool and sorted(new.shas) == sorted(train)
    modules = {m.sha256: m for m in Corpus(store).iter_modules(only=set(train))}
    for sha, values in zip(new.shas, new.values):
        _, counts = measure_pool(modules[sha], [TINY_POOL[0], ("-gvn",)], engine)
        assert values[-1] == float(counts[1]) == float(counts[0])         # measured again, without -loweratomic
        if sha in tiny.shas:                                              # the rest copied from the old rows
            assert values[:-1].tolist() == (tiny.values[tiny.shas.index(sha)] + 1000).tolist()
        else:
            assert values[:-1].tolist() == [float(c) for c in measure_pool(modules[sha], TINY_POOL, engine)[1]]


def test_cli_refuses_missing_corrupt_and_mismatched_rankers_in_one_line(cli_store, capsys, tmp_path):
    store = cli_store / "store"
    rows, gains, pool = synthetic(8)
    foreign = PipelineRanker.fit(rows, gains, pool, "embedding",
                                 identity=dict(encoder_identity(load_encoder()), model_sha256="0" * 64))
    foreign.save(tmp_path / "foreign")
    other_probes = PipelineRanker.fit(rows, gains, pool, "spectrum", identity={"probe_set_hash": "f" * 64})
    other_probes.save(tmp_path / "probes")
    corrupt = tmp_path / "corrupt"
    other_probes.save(corrupt)
    (corrupt / "ranker.json").write_text((corrupt / "ranker.json").read_text().replace('"alpha"', '"alpha2"'))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    matmul = EXAMPLES / "matmul.c"
    cases = [(("optimize", matmul, "--auto", "--ranker", tmp_path / "missing"), "no such ranker folder"),
             (("optimize", matmul, "--auto", "--ranker", corrupt), "digest mismatch"),
             (("optimize", matmul, "--auto", "--ranker", tmp_path / "foreign"), "fitted on encoder"),
             (("optimize", matmul, "--auto", "--ranker", tmp_path / "probes"), "probe set ffffffffffff"),
             (("optimize", matmul, "--passes", "Oz", "--ranker", tmp_path / "probes"), "give --auto"),
             (("optimize", matmul, "--auto", "--ranker", tmp_path / "probes", "--library", tmp_path, "--learn"),
              "drop --library"),
             (("compile", matmul, "--auto-passes", "--ranker", tmp_path / "probes", "-o", tmp_path / "bin"),
              "or --target measure"),
             (("compile", matmul, "--ranker", tmp_path / "probes", "-o", tmp_path / "bin"), "give --auto-passes"),
             (("ranker", "show", corrupt), "digest mismatch"),
             (("ranker", "show", tmp_path / "full"), "not a pipeline ranker"),
             (("ranker", "fit", tmp_path / "missing", "--corpus", store, "--representation", "none", "--out",
               tmp_path / "r"), "no ranker training data"),
             (("ranker", "fit", cli_store / "tiny-data", "--corpus", store, "--representation", "none", "--out",
               tmp_path / "full"), "refusing to replace it"),
             (("ranker", "measure", store, "--out", tmp_path / "full"), "holds no ranker training data"),
             (("ranker", "measure", store, "--out", tmp_path / "d", "--split", "nope"), "no split named"),
             (("ranker", "measure", store, "--out", tmp_path / "d", "--programs", 0), "--programs must be")]
    for args, message in cases:
        code, _, err = bpq_main(capsys, *args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (args, err)
    with pytest.raises(SystemExit):
        main(["ranker", "fit", str(cli_store / "tiny-data"), "--corpus", str(store), "--representation", "ir2vec",
              "--out", str(tmp_path / "r")])
    assert "invalid choice: 'ir2vec'" in capsys.readouterr().err


def test_the_shipped_ranker_chooses_by_default_and_false_asks_for_the_library(engine, examples):
    shipped = default_ranker()
    assert shipped.representation == "none" and len(shipped.pool) > 500
    found = recommend_pipeline(examples["matmul"], 10, engine=engine)
    tried = [steps for steps, _ in found.tried]
    assert tried[:6] == shipped.choose(None, 6) and found.neighbors == ()   # round(10 * RANKED_SHARE) picks
    retrieval = recommend_pipeline(examples["matmul"], 10, engine=engine, ranker=False)
    assert len(retrieval.neighbors) == 8 and [s for s, _ in retrieval.tried][:6] != tried[:6]
    size_ranker = default_ranker("text-size")                        # text size: its own shipped ranker
    assert size_ranker.objective == "text-size" and size_ranker.representation == "autophase"
    module = examples["matmul"]
    size = recommend_pipeline(module, 6, engine=engine, objective="text-size")
    seeds = [("-Os",), ("-Oz-outline",)]
    picks = size_ranker.choose(representation_rows("autophase", autophase=autophase(module)[None])[0], 2,
                               measured=[(OZ,)] + seeds)
    assert size.objective == "text-size" and size.neighbors == () and size.probe_compilations == 0
    assert [s for s, _ in size.tried][:4] == seeds + [meaning_preserving(p) for p in picks]  # round(6 * 0.6) = 4
    size = recommend_pipeline(module, 2, engine=engine, objective="text-size", ranker=False)
    assert len(size.neighbors) == 8                                   # ranker=False: the text-size library


def test_large_modules_take_the_large_modules_ranker(engine, examples, monkeypatch):
    small, large = default_ranker(), default_ranker(instructions=LARGE_MODULE)
    assert default_ranker(instructions=LARGE_MODULE - 1) is small is default_ranker(instructions=0)
    assert default_ranker(instructions=10**6) is large is not small
    assert large.objective == small.objective == "ir-count" and large.representation == "none"
    assert set(small.pool) < set(large.pool)                          # the pool deepened once more
    assert large.choose(None, 6) != small.choose(None, 6)
    assert default_ranker_name("text-size", 10**6) == default_ranker_name("text-size")   # one text-size ranker
    module = examples["matmul"]
    found = recommend_pipeline(module, 10, engine=engine)
    assert [s for s, _ in found.tried][:6] == [meaning_preserving(s) for s in small.choose(None, 6)]
    # the bound is read per module: with it below this module's size, the search takes the large modules' one
    monkeypatch.setitem(ranker_module.DEFAULT_RANKERS, "ir-count",
                        ((0, default_ranker_name()), (module.instruction_count, default_ranker_name(
                            instructions=LARGE_MODULE))))
    found = recommend_pipeline(module, 10, engine=engine)
    assert [s for s, _ in found.tried][:6] == [meaning_preserving(s) for s in large.choose(None, 6)]


#: What clang++ writes for a call in a try block with a catch (an invoke and its landing pad), and an atomic add.
GUARDED = """
declare void @may_throw()
declare i32 @__gxx_personality_v0(...)
define i32 @guarded(ptr %p) personality ptr @__gxx_personality_v0 {
entry:
  invoke void @may_throw() to label %ok unwind label %caught
ok:
  %old = atomicrmw add ptr %p, i32 1 seq_cst
  ret i32 %old
caught:
  %lp = landingpad { ptr, i32 } catch ptr null
  ret i32 -1
}
"""


def test_searches_never_build_the_passes_that_change_what_a_program_does(engine):
    module = bpq.load_module(GUARDED, engine=engine)
    changed = bpq.optimize(module, "-lowerinvoke -simplifycfg -loweratomic", engine=engine)
    assert "landingpad" not in changed.text() and "atomicrmw" not in changed.text()   # the handler and atomicity gone
    assert changed.instruction_count < bpq.optimize(module, "Oz", engine=engine).instruction_count  # and fewer
    assert meaning_preserving(("-Oz", "-lowerinvoke", "-gvn", "-loweratomic")) == ("-Oz", "-gvn")
    pool = [("-lowerinvoke", "-simplifycfg"), ("-loweratomic",), (OZ, "-lowerinvoke", "-simplifycfg"),
            ("-instcombine",)]
    for objective in ("ir-count", "text-size"):
        ranker = PipelineRanker(pool, "none", np.zeros(0), np.zeros(0), np.zeros((0, 4)),
                                np.array([0.3, 0.2, 0.1, 0.0]), np.zeros((1, 4)), objective=objective)
        found = recommend_pipeline(module, 10, engine=engine, ranker=ranker, objective=objective)
        tried = [steps for steps, _ in found.tried]
        first = tried.index(("-simplifycfg",))                   # the first pick, measured without -lowerinvoke
        assert first == (0 if objective == "ir-count" else 2) and (OZ, "-simplifycfg") in tried, tried
        assert not any(flag in steps for steps in tried for flag in MEANING_CHANGING), tried
        built = bpq.optimize(module, found.pipeline, engine=engine)
        assert "landingpad" in built.text() and "atomicrmw" in built.text()
    for search in (random_search, greedy_search):
        found = search(module, 40, engine=engine)
        assert not any(flag in steps for steps, _ in found.tried for flag in MEANING_CHANGING)
    oz, counts = measure_pool(module, pool + [("-lowerinvoke",)], engine)   # rows hold what a search would run
    assert counts[:2] + counts[3:4] == measure_pool(module, [("-simplifycfg",), (), ("-instcombine",)], engine)[1]
    assert counts[1] is None and counts[4] is None and counts[2] >= oz


def legacy_rows(folder, pool, shas, oz, values, names=None):
    """A training-data folder as written before searches left MEANING_CHANGING out: no ``left_out`` in its
    pool.json, every cell as given."""
    folder.mkdir(parents=True)
    body = {"format": ranker_module.DATA_FORMAT, "format_version": ranker_module.FORMAT_VERSION,
            "objective": "ir-count", "pool": [ranker_module.encode_steps(s) for s in pool]}
    (folder / "pool.json").write_text(json.dumps(seal(body)))
    with open(folder / "rows-1-1.npz", "wb") as f:
        np.savez(f, shas=np.array(shas), names=np.array(names or [""] * len(shas), dtype=str),
                 oz=np.array(oz, np.int64), values=np.array(values, np.float64), seconds=np.ones(len(shas)))
    return folder


def test_rows_measured_with_meaning_changing_passes_are_measured_again_not_copied(engine, examples, tmp_path):
    module, other = bpq.load_module(GUARDED, engine=engine), examples["sum_array"]
    pool = [A, ("-loweratomic", "-gvn"), C, (OZ, "-lowerinvoke", "-simplifycfg")]
    oz, _ = measure_pool(module, [], engine)
    other_oz, _ = measure_pool(other, [], engine)
    old = legacy_rows(tmp_path / "old", pool, [module.sha256, other.sha256], [oz, other_oz],
                      [[101.0, 1.0, 103.0, 1.0], [201.0, 2.0, 203.0, 2.0]])   # stale cells: 1 and 2 instructions
    legacy = load_ranker_data(old)
    assert legacy.left_out == () and legacy.stale_columns() == [1, 3]
    with pytest.raises(RankerError, match="measured with -loweratomic and -lowerinvoke in 2 pipelines"):
        measure_pool_rows([module], old, pool, engine=engine)              # no more rows beside stale ones
    counting = CountingEngine(engine)
    written, failures = measure_pool_rows([module, other], tmp_path / "new", pool, engine=counting, known=legacy)
    fresh = load_ranker_data(tmp_path / "new")
    assert (written, failures) == (2, []) and fresh.left_out == ranker_module.LEFT_OUT == tuple(sorted(MEANING_CHANGING))
    assert fresh.stale_columns() == [] and fresh.shas == legacy.shas
    for row, (m, copied) in enumerate([(module, [101.0, 103.0]), (other, [201.0, 203.0])]):
        assert fresh.values[row, [0, 2]].tolist() == copied                 # the sound cells are copied
        _, counts = measure_pool(m, [("-gvn",), (OZ, "-simplifycfg")], engine)
        assert fresh.values[row, [1, 3]].tolist() == [float(c) for c in counts]     # the stale ones measured again
    assert fresh.values[0, 1] > 1.0 and counting.pipelines <= 2 * 2 + 2
    deep, _, _ = deepen_pool(old, tmp_path / "deep", [], [module], engine=engine)  # deepen measures them again too
    assert deep == 0 and load_ranker_data(tmp_path / "deep").values[0].tolist() == fresh.values[0].tolist()


def test_cli_runs_a_meaning_changing_pass_when_asked_with_a_note(tmp_path, capsys):
    source = tmp_path / "guarded.ll"
    source.write_text(GUARDED)
    for passes in ("-lowerinvoke -simplifycfg", "86,10"):                     # flags or catalog indices
        out = tmp_path / f"out-{len(passes)}.ll"
        code, _, err = bpq_main(capsys, "optimize", source, "--passes", passes, "-o", out)
        assert code == 0 and "landingpad" not in out.read_text(), err
        assert "note: -lowerinvoke changes what the program does (exceptions thrown" in err
    code, _, err = bpq_main(capsys, "optimize", source, "--passes", "-simplifycfg", "-o", tmp_path / "plain.ll")
    assert code == 0 and "note:" not in err


# ------------------------------------------------------------------------------------------- the text-size objective

#: Text-size candidates: the size levels with one pass after them (measured from their shared result), the IR
#: outliner, and plain passes (compiled with size marks).
SIZE_POOL = [("-Os",), ("-Oz-outline",), (OZ, "-gvn"), (OZ, "-mergefunc"), ("-Oz-outline", "-mergefunc"),
             ("-Os", "-instcombine"), ("-gvn",), B, (OZ, OZ)]
#: Four functions with one body (FOUR of test_target without its main): the IR outliner shares it.
TWINS_C = FOUR[FOUR.index("int g1"):FOUR.index("int main")]


def from_scratch_bytes(module, steps, engine, target):
    """.text bytes after ``steps`` run on ``module`` from scratch, compiled as a text-size search compiles it."""
    from behavioral_pq.core.catalog import steps_pipeline
    from behavioral_pq.core.toolchain import text_size
    from behavioral_pq.tasks.guidance.trials import candidate_target

    bitcode = engine.run_pipeline(module.bitcode, steps_pipeline(steps), module.name,
                                  target=candidate_target(target, steps))
    return text_size(bitcode, cpu=target.cpu or None)


@pytest.fixture(scope="module")
def size_rows(tmp_path_factory, examples):
    """Text-size rows of SIZE_POOL on the twins and three examples, and those modules."""
    from behavioral_pq import Engine

    root = tmp_path_factory.mktemp("size-rows")
    (root / "twins.c").write_text(TWINS_C)
    modules = [bpq.load_module(root / "twins.c")] + [examples[n] for n in ("sum_array", "matmul", "list_sort")]
    with Engine(workers=2, timeout=60) as engine:
        assert measure_pool_rows(modules, root / "rows", SIZE_POOL, engine=engine, objective="text-size",
                                 chunk=2) == (4, [])
    return root / "rows", modules


def test_text_size_rows_are_the_bytes_each_pipeline_gives_from_scratch(size_rows, engine):
    from behavioral_pq.core.target import Target
    from behavioral_pq.tasks.guidance.trials import measure_built_pool

    folder, modules = size_rows
    data = load_ranker_data(folder, "text-size")
    target = Target.module_cpus()
    assert data.objective == "text-size" and data.pool == SIZE_POOL
    assert data.shas == [m.sha256 for m in modules] and data.names == [m.name for m in modules]
    for module, oz, row in zip(modules, data.oz, data.values):
        assert oz == from_scratch_bytes(module, (OZ,), engine, target)
        assert row.tolist() == [from_scratch_bytes(module, s, engine, target) for s in SIZE_POOL]
    twins = data.values[0]
    assert twins[SIZE_POOL.index(("-Oz-outline",))] < data.oz[0]    # the outliner shares the four bodies
    with pytest.raises(RankerError, match="holds text-size rows, not ir-count"):
        load_ranker_data(folder)
    assert load_ranker_data(folder, None).objective == "text-size"
    with pytest.raises(RankerError, match="another pool"):
        measure_pool_rows(modules, folder, SIZE_POOL[:-1], engine=engine, objective="text-size")
    counting = CountingEngine(engine)                                # resumed: nothing measured again
    assert measure_pool_rows(modules, folder, SIZE_POOL, engine=counting, objective="text-size") == (0, [])
    assert counting.pipelines == 0
    # a pass that changes nothing after -Oz gives -Oz's bitcode: llc is not run for it again
    oz, values = measure_built_pool(modules[1], [(OZ, "-gvn"), (OZ, "-gvn", "-gvn")], engine, target)
    assert values == [oz, oz]


def test_deepen_on_text_size_rows_searches_bytes_and_measures_the_winners_bytes(size_rows, engine, tmp_path):
    from behavioral_pq.core.target import Target

    folder, modules = size_rows
    base = load_ranker_data(folder, "text-size")
    added, written, failures = deepen_pool(folder, tmp_path / "deep", modules, modules, budget=24, keep=4,
                                           engine=engine)
    deep = load_ranker_data(tmp_path / "deep", None)
    assert deep.objective == "text-size" and written == len(modules) and failures == []
    assert 1 <= added <= 16 and deep.pool[:len(SIZE_POOL)] == SIZE_POOL and deep.shas == base.shas
    assert np.array_equal(deep.values[:, :len(SIZE_POOL)], base.values, equal_nan=True)   # copied
    target = Target.module_cpus()
    new = deep.pool[len(SIZE_POOL):]
    for module, row in zip(modules, deep.values):
        assert row[len(SIZE_POOL):].tolist() == [from_scratch_bytes(module, s, engine, target) for s in new]
    assert (deep.values[0, len(SIZE_POOL):] < deep.oz[0]).all()     # each winner is smaller than -Oz's .text


def test_a_text_size_ranker_tries_the_size_seeds_then_its_picks_and_refuses_the_other_objective(
        size_rows, engine, tmp_path):
    from behavioral_pq.core.target import Target

    folder, modules = size_rows
    data = load_ranker_data(folder, "text-size")
    ranker = PipelineRanker.fit(np.zeros((len(data.shas), 0)), data.gains, data.pool, "none",
                                objective="text-size")
    ranker.save(tmp_path / "size-ranker")
    ranker = load_ranker(tmp_path / "size-ranker")
    assert ranker.objective == "text-size"
    twins = modules[0]
    found = recommend_pipeline(twins, 5, ranker=ranker, engine=engine, objective="text-size")
    tried = [steps for steps, _ in found.tried]
    seeds = [("-Os",), ("-Oz-outline",)]
    picks = ranker.choose(None, 1, measured=[(OZ,)] + seeds)                     # round(5 * 0.6) - 2 seeds
    assert tried[:3] == seeds + picks and found.compilations == 5
    target = Target.module_cpus()
    assert found.text_size == from_scratch_bytes(twins, found.steps, engine, target) < found.oz_text_size
    with pytest.raises(ValueError, match="trained for the text-size objective"):
        recommend_pipeline(twins, 4, ranker=ranker, engine=engine)
    with pytest.raises(ValueError, match="trained for the ir-count objective"):
        recommend_pipeline(twins, 4, ranker=default_ranker(), engine=engine, objective="text-size")


def test_cli_measures_the_text_size_of_whole_programs_and_fits_a_ranker_on_them(tmp_path, capsys):
    """Two programs of one project, each main linked with the units it needs and made internal as a
    --whole-program build makes it; rows of their bytes under a folder's own pool; a ranker grouped by project."""
    from behavioral_pq.corpus import from_compile_commands
    from behavioral_pq.corpus.programs import split_whole_programs
    from behavioral_pq.tasks.guidance.ranker import open_ranker_data

    project = tmp_path / "proj"
    project.mkdir()
    sources = {"app.c": "void f0(int*, int, int); void f1(int*, int, int); void f2(int*, int, int);\n"
                        "int main(int c, char **v) { int a[4] = {c, 2, 3, 4}; f0(a, c, 1); f1(a, 2, c); "
                        "f2(a, 1, 0); return a[0]; }\n",
               "tool.c": "void f3(int*, int, int);\nint main(int c, char **v) { int a[4] = {c, 1}; f3(a, c, 0); "
                         "return a[3]; }\n",
               "twins.c": "#include <stdio.h>\n" + TWINS_C}
    for name, text in sources.items():
        (project / name).write_text(text)
    (project / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(project), "file": name, "arguments": ["cc", "-c", name]} for name in sources]))
    store = tmp_path / "store"
    build_corpus(from_compile_commands(project / "compile_commands.json", project="p"), store, workers=1,
                 labels=False)
    split_corpus(store, fractions=[1.0], names=["train"], seed=0)
    data, out = tmp_path / "data", tmp_path / "ranker"
    open_ranker_data(data, SIZE_POOL, "text-size")                  # a small pool; measure keeps a folder's own
    code, text, err = bpq_main(capsys, "ranker", "measure", store, "--objective", "text-size", "--whole-programs",
                               "--out", data, "--json")
    assert code == 0, err
    summary = json.loads(text)
    assert (summary["modules"], summary["written"], summary["pool"], summary["failures"]) == (2, 2, 9, [])
    rows = load_ranker_data(data, "text-size")
    programs = {p.name: p.module for p in split_whole_programs(store, "train")}
    assert sorted(rows.names) == sorted(programs) == ["p/app", "p/tool"]
    assert sorted(rows.shas) == sorted(m.sha256 for m in programs.values())
    app = programs["p/app"].text()
    assert "define internal void @f0" in app and "define dso_local i32 @main" in app   # linked, made internal
    code, text, err = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "none",
                               "--out", out)
    assert code == 0, err
    assert "all in split group 'p'" in text and load_ranker(out).objective == "text-size"
    code, text, err = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "autophase",
                               "--out", tmp_path / "by-autophase")
    assert code == 2 and "give --whole-programs" in err                 # whole programs are not stored modules
    code, text, err = bpq_main(capsys, "ranker", "fit", data, "--corpus", store, "--representation", "autophase",
                               "--whole-programs", "--out", tmp_path / "by-autophase", "--json")
    assert code == 0, err
    fitted = load_ranker(tmp_path / "by-autophase")
    assert json.loads(text)["modules"] == 2 and fitted.representation == "autophase"
    from behavioral_pq.tasks.guidance.build import whole_program_representation
    kept, x = whole_program_representation(store, "train", "autophase", rows.shas)
    assert kept == rows.shas and np.allclose(x, representation_rows(
        "autophase", autophase=np.stack([autophase(programs[n]) for n in rows.names])))
    assert np.allclose(fitted.mean, x.mean(axis=0))                  # fitted on the relinked programs' Autophase
    # deeper searches of the whole programs (linked again), their winners measured on every row
    code, text, err = bpq_main(capsys, "ranker", "deepen", data, "--corpus", store, "--whole-programs",
                               "--out", tmp_path / "deep", "--programs", 1, "--budget", 10, "--keep", 2, "--json")
    assert code == 0, err
    summary = json.loads(text)
    deep = load_ranker_data(tmp_path / "deep", "text-size")
    assert summary["objective"] == "text-size" and summary["searched"] == 1 and summary["rows"] == 2
    assert len(deep.pool) == len(SIZE_POOL) + summary["added"] and sorted(deep.names) == ["p/app", "p/tool"]
    code, _, err = bpq_main(capsys, "ranker", "deepen", data, "--corpus", store, "--out", tmp_path / "d2")
    assert code == 2 and "no rows of modules in" in err                   # whole programs are not stored modules
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--whole-programs", "--out", data)
    assert code == 2 and "holds text-size rows, not ir-count" in err
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--whole-programs", "--kind", "small",
                            "--out", tmp_path / "other")
    assert code == 2 and "--whole-programs" in err


def from_scratch_count(module, steps, engine, target):
    """IR instructions after ``steps`` run on ``module`` from scratch, built as a search for ``target`` builds it."""
    from behavioral_pq.core.catalog import steps_pipeline
    from behavioral_pq.tasks.guidance.trials import candidate_target

    bitcode = engine.run_pipeline(module.bitcode, steps_pipeline(steps), module.name,
                                  target=candidate_target(target, steps))
    return bpq.load_module(bitcode, engine=engine).instruction_count


def test_rows_for_a_target_are_the_counts_a_search_for_it_sees_and_keep_to_it(examples, engine, tmp_path):
    from behavioral_pq.core.target import Target
    from behavioral_pq.tasks.guidance.ranker import data_target

    host = Target.host()
    modules = [examples[n] for n in ("matmul", "sum_array", "list_sort")]
    pool = TINY_POOL + [("-O3",)]
    folder = tmp_path / "host-rows"
    assert measure_pool_rows(modules, folder, pool, engine=engine, target=host, chunk=2) == (3, [])
    data = load_ranker_data(folder)
    assert data.target == data_target(folder) == host and data.objective == "ir-count"
    for module, oz, row in zip(modules, data.oz, data.values):
        assert oz == from_scratch_count(module, (OZ,), engine, host)
        assert row.tolist() == [from_scratch_count(module, s, engine, host) for s in pool]
    measure_pool_rows(modules, tmp_path / "measure-rows", pool, engine=engine)
    measured = load_ranker_data(tmp_path / "measure-rows")
    assert measured.target is None
    o3 = pool.index(("-O3",))            # matmul under -O3: 69 instructions in measure mode, 72 for the host (marked)
    assert measured.values[0, o3] == 69 and data.values[0, o3] == 72
    with pytest.raises(RankerError, match=f"holds rows built for {host.triple}, CPU "):
        measure_pool_rows(modules, folder, pool, engine=engine)
    with pytest.raises(RankerError, match="holds rows built in measure mode"):
        measure_pool_rows(modules, tmp_path / "measure-rows", pool, engine=engine, target=host)
    counting = CountingEngine(engine)                                # resumed: nothing measured again
    assert measure_pool_rows(modules, folder, pool, engine=counting, target=host) == (0, [])
    assert counting.pipelines == 0


def test_cli_measures_host_rows_over_a_rankers_pool_and_refuses_mixed_targets(cli_store, capsys, tmp_path, engine):
    from behavioral_pq.core.target import Target

    store, data = cli_store / "store", tmp_path / "host-data"
    ranker = PipelineRanker.fit(np.zeros((3, 0), np.float32), np.zeros((3, len(TINY_POOL))), TINY_POOL, "none")
    ranker.save(tmp_path / "tiny-ranker")
    code, stdout, _ = bpq_main(capsys, "ranker", "measure", store, "--out", data, "--programs", 2,
                               "--pool", tmp_path / "tiny-ranker", "--target", "host", "--json")
    summary = json.loads(stdout)
    rows = load_ranker_data(data)
    assert code == 0 and summary["written"] == 2 and summary["pool"] == len(TINY_POOL)
    assert rows.pool == TINY_POOL and rows.target == Target.host()
    module = next(Corpus(store).iter_modules(only={rows.shas[0]}))
    assert rows.values[0].tolist() == [from_scratch_count(module, s, engine, Target.host()) for s in TINY_POOL]
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", data, "--programs", 3)
    assert code != 0 and f"holds rows built for {Target.host().triple}, CPU " in err and len(err.strip().splitlines()) == 1
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", tmp_path / "x", "--from", data,
                            "--target", "measure")
    assert code != 0 and f"holds rows built for {Target.host().triple}, CPU " in err and "these are in measure mode" in err
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", tmp_path / "y", "--objective",
                            "text-size", "--target", "host")
    assert code != 0 and "--target and --cpu are for instruction-count rows" in err
    code, _, err = bpq_main(capsys, "ranker", "measure", store, "--out", tmp_path / "z", "--pool",
                            tmp_path / "tiny-ranker", "--library", "shipped")
    assert code != 0 and "--pool takes a ranker's pool" in err
