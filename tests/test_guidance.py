"""Pipeline guidance: the program library, recommend_pipeline, its baselines, budgets, -Oz fallback, semantics, CLI."""

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import EXAMPLES
from test_downstream import varied_programs

import behavioral_pq as bpq
from behavioral_pq.artifacts import check_encoder, encoder_identity, seal, with_pooling_of
from behavioral_pq.corpus import build_corpus, discover, split_corpus
from behavioral_pq.corpus.reader import Corpus
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.errors import CorpusError, LibraryError
from behavioral_pq.reports.guidance import METHODS, evaluate_guidance
from behavioral_pq.tasks.guidance import (
    OZ,
    LibraryProgram,
    ProgramLibrary,
    SearchProgress,
    build_library,
    greedy_search,
    load_library,
    random_search,
    recommend_and_optimize,
    recommend_pipeline,
)
from behavioral_pq.tasks.guidance.ranker import default_ranker

TINY_GA = dict(length=8, population=6, generations=2)


class CountingEngine:
    """Wraps an engine and counts the pipelines it runs (what the budget is about)."""

    def __init__(self, engine):
        import threading

        self.engine = engine
        self.pipelines = 0
        self._lock = threading.Lock()

    def autophase_tree(self, roots, parents, edges, **kw):
        with self._lock:
            self.pipelines += len(edges)
        return self.engine.autophase_tree(roots, parents, edges, **kw)

    def run_pipeline(self, *a, **kw):
        with self._lock:
            self.pipelines += 1
        return self.engine.run_pipeline(*a, **kw)

    def run_pipelines(self, bitcodes, pipelines, **kw):
        with self._lock:
            self.pipelines += len(pipelines)
        return self.engine.run_pipelines(bitcodes, pipelines, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


@pytest.fixture(scope="module")
def lib_world(tmp_path_factory, engine):
    """A split store of 30 generated programs and the examples, and a library of its train programs built on
    the shipped encoder with a tiny genetic search."""
    root = tmp_path_factory.mktemp("guidance")
    store = root / "store"
    build_corpus(discover([varied_programs(root / "src", 30), EXAMPLES], origin="t"), store, workers=2)
    split_corpus(store, fractions=[0.6, 0.2, 0.2], seed=0)

    train = Corpus(store).split("train")
    encoder = load_encoder()
    library = build_library(store, root / "library", train, encoder=encoder, engine=engine, ga=TINY_GA)
    return {"root": root, "store": store, "library": library, "encoder": encoder, "train": train}


def test_library_holds_measured_pipelines_and_survives_a_round_trip(lib_world, engine):
    library = lib_world["library"]
    assert len(library) == len(lib_world["train"])
    program = library.programs[0]
    module = next(Corpus(lib_world["store"]).iter_modules(only={program.program}))
    assert bpq.optimize(module, "Oz", engine=engine).instruction_count == program.oz_count
    for steps, count in list(program.results.items())[:3]:          # stored counts are real measurements
        assert bpq.optimize(module, " ".join(steps), engine=engine).instruction_count == count
    loaded = load_library(lib_world["root"] / "library", encoder=lib_world["encoder"])
    assert [p.results for p in loaded.programs] == [p.results for p in library.programs]
    query = library.embeddings[3] + 0.01
    assert np.array_equal(loaded.neighbors(query, 5)[0], library.neighbors(query, 5)[0])
    nearest, distance = loaded.neighbors(library.embeddings[3], 1)
    assert distance[0] < 1e-6 and np.allclose(library.embeddings[nearest[0]], library.embeddings[3])


def test_library_refuses_missing_corrupt_and_foreign_folders(lib_world, tmp_path):
    import shutil

    with pytest.raises(LibraryError, match="no library.json"):
        load_library(tmp_path / "nothing", encoder=lib_world["encoder"])
    copy = tmp_path / "copy"
    shutil.copytree(lib_world["root"] / "library", copy)
    (copy / "index.faiss").write_bytes(b"garbage")
    with pytest.raises(LibraryError, match="index.faiss: checksum mismatch"):
        load_library(copy, encoder=lib_world["encoder"])
    shutil.copytree(lib_world["root"] / "library", tmp_path / "foreign")
    config = json.loads((tmp_path / "foreign" / "library.json").read_text())
    config["encoder"]["model_sha256"] = "0" * 64
    (tmp_path / "foreign" / "library.json").write_text(json.dumps(seal(config)))  # a genuine library of another encoder
    with pytest.raises(LibraryError, match="built on encoder"):
        load_library(tmp_path / "foreign", encoder=lib_world["encoder"])


def test_a_library_is_queried_under_the_pooling_it_was_built_with(lib_world, engine, examples):
    """The same weights under another pooling give other embeddings: the library reloads the encoder it is given
    under its own pooling (and one saved before poolings were recorded counts as "mean")."""
    built = lib_world["encoder"]
    other = load_encoder(built.path, pooling="cls" if built.pooling != "cls" else "mean")
    assert load_library(lib_world["root"] / "library", encoder=other).dim == built.dim
    module = next(iter(examples.values()))
    found = recommend_pipeline(module, 4, library=lib_world["library"], encoder=other, engine=engine)
    again = recommend_pipeline(module, 4, library=lib_world["library"], encoder=built, engine=engine)
    assert found.neighbors == again.neighbors and found.pipeline == again.pipeline
    identity = encoder_identity(built)
    with pytest.raises(LibraryError, match="pooling"):
        check_encoder("lib", identity, other, LibraryError, "rebuild it")
    old = {k: v for k, v in identity.items() if k != "pooling"}
    assert with_pooling_of(other, old).pooling == "mean"
    with pytest.raises(LibraryError, match=re.escape(f"under pooling '{built.pooling}'")):
        lib_world["library"].neighbors(np.zeros(built.dim + 2, np.float32), 3)


def test_recommendation_is_reproducible_by_an_independent_run_and_never_worse_than_oz(lib_world, engine, examples):
    for module in examples.values():
        found = recommend_pipeline(module, 6, library=lib_world["library"], engine=engine)
        assert found.instruction_count == bpq.optimize(module, found.pipeline).instruction_count
        assert found.oz_count == bpq.optimize(module, "Oz").instruction_count
        assert found.instruction_count <= found.oz_count and found.improvement >= 1.0
        assert found.method in ("library", "local search", "-Oz")
        assert len(found.neighbors) == 8 and found.probe_compilations > 0


def test_a_time_bound_search_stops_when_its_time_is_spent(lib_world, engine, examples):
    import time

    module = examples["list_sort"]
    embedding = lib_world["encoder"].embed(module)
    runs = {}
    for seconds in (0.3, 2.0):
        start = time.perf_counter()
        found = recommend_pipeline(module, 100_000, library=lib_world["library"], engine=engine,
                                   embedding=embedding, seconds=seconds)
        runs[seconds] = (time.perf_counter() - start, found.compilations)
        assert found.instruction_count <= found.oz_count
    assert runs[0.3][0] < 0.3 + 1.5 and runs[2.0][0] < 2.0 + 1.5      # one last batch of 4 may run over
    assert runs[0.3][1] < runs[2.0][1] < 100_000                     # time, not the budget, ended both
    with pytest.raises(ValueError, match="seconds must be positive"):
        recommend_pipeline(module, 1, library=lib_world["library"], engine=engine, embedding=embedding, seconds=0)


def big_program(functions: int) -> str:
    """C source of ``functions`` functions of a few shapes (loops over arrays and structs, switches, helpers)."""
    shapes = [
        "int data{i}[{n}];\nint f{i}(int n) {{ int s = {i}; for (int k = 0; k < n && k < {n}; k++) "
        "s += data{i}[k] * {m}; return s; }}\n",
        "static int h{i}(int a) {{ return a * {m} + {i}; }}\nint f{i}(int x) {{ return h{i}(x) + h{i}(x + 1); }}\n",
        "int f{i}(int *p, int n) {{ int t = 0; for (int k = 0; k < n; k++) {{ t += p[k]; p[k] = t % {n}; }}"
        " return t; }}\n",
        "int f{i}(int x) {{ switch (x % 4) {{ case 0: return {i}; case 1: return {m}; case 2: return x; }}"
        " return -1; }}\n",
        "struct s{i} {{ int a, b; double c; }};\ndouble f{i}(struct s{i} *v, int n) {{ double t = 0; for (int k = 0; "
        "k < n; k++) {{ if (v[k].a > v[k].b) t += v[k].c * {m}; else t -= v[k].a; }} return t; }}\n",
    ]
    return "".join(shapes[i % len(shapes)].format(i=i, n=8 + i % 50, m=i % 7 + 1) for i in range(functions))


def test_a_time_bound_holds_for_the_whole_search_on_a_large_module(lib_world, engine, tmp_path):
    # ~10k IR instructions: unbounded, the probes and the library's candidates take several times the bound
    source = tmp_path / "big.c"
    source.write_text(big_program(300))
    module = bpq.load_module(source)
    for call in (recommend_pipeline, recommend_and_optimize):
        seen = []
        start = time.monotonic()
        found = call(module, 1000, library=lib_world["library"], encoder=lib_world["encoder"], engine=engine,
                     seconds=2.0, progress=seen.append)
        elapsed = time.monotonic() - start
        found, result = found if call is recommend_and_optimize else (found, None)
        oz_done = next(p.seconds for p in seen if p.phase == "-Oz" and p.oz is not None)
        assert elapsed <= max(2.0, oz_done) * 1.1 + 1.0, (elapsed, oz_done, found.notes)   # -Oz always runs
        assert found.compilations < 1000 and found.notes                  # time, not the budget, ended it
        assert found.instruction_count == bpq.optimize(module, found.pipeline).instruction_count <= found.oz_count
        if result is not None:                                            # the module the search measured
            assert result.instruction_count == found.instruction_count
    with pytest.raises(ValueError, match="reserve_builds"):
        recommend_pipeline(module, 1, library=lib_world["library"], engine=engine, seconds=1, reserve_builds=-1)


def test_probes_that_overrun_their_share_of_a_time_bound_are_stopped(lib_world, engine, tmp_path, monkeypatch):
    import behavioral_pq.tasks.guidance.recommend as recommend

    source = tmp_path / "big.c"
    source.write_text(big_program(300))
    module = bpq.load_module(source)
    monkeypatch.setattr(recommend, "PROBES_PER_OZ", 0.0)        # an estimate far too low: the probes start
    # and are cut after 2% of the time left (some 30 ms): on any machine, before 24 probes of a 300-function
    # module are measured (at the default 70% a fast, quiet machine measured them all in time)
    monkeypatch.setattr(recommend, "EMBEDDING_CUT", 0.02)
    monkeypatch.setenv("BPQ_NO_CACHE", "1")
    start = time.monotonic()
    found = recommend_pipeline(module, 1000, library=lib_world["library"], encoder=lib_world["encoder"],
                               engine=engine, seconds=2.0)
    elapsed = time.monotonic() - start
    assert any(note.startswith("probes stopped") for note in found.notes), found.notes
    assert elapsed <= 2.0 * 1.1 + 1.0 and found.probe_compilations == 0 and found.neighbors == ()
    assert found.instruction_count == bpq.optimize(module, found.pipeline).instruction_count <= found.oz_count


def test_search_progress_reaches_the_callback(lib_world, engine, examples):
    seen = []
    found = recommend_pipeline(examples["matmul"], 4, library=lib_world["library"], encoder=lib_world["encoder"],
                               engine=engine, progress=seen.append)
    assert all(isinstance(p, SearchProgress) for p in seen)
    phases = [p.phase for p in seen]
    assert phases[0] == "-Oz" and "embedding" in phases and "library" in phases
    probes = [p for p in seen if p.phase == "embedding" and p.total]
    assert probes and probes[-1].done == probes[-1].total                 # every probe node measured
    counts = [p.compilations for p in seen]
    assert counts == sorted(counts) and counts[-1] == found.compilations == 4
    assert all(p.budget == 4 and p.oz == found.oz_count and p.best <= p.oz for p in seen if p.oz is not None)
    assert seen[-1].best == found.instruction_count
    seconds = [p.seconds for p in seen]
    assert seconds == sorted(seconds) and seconds[-1] <= found.seconds


@pytest.mark.parametrize("budget", [0, 1, 3, 7])
def test_every_search_respects_its_budget(lib_world, engine, examples, budget):
    module = examples["matmul"]
    embedding = lib_world["encoder"].embed(module)
    for search in (lambda m, e: recommend_pipeline(m, budget, library=lib_world["library"], engine=e,
                                                   embedding=embedding),
                   lambda m, e: random_search(m, budget, engine=e),
                   lambda m, e: greedy_search(m, budget, engine=e)):
        counting = CountingEngine(engine)
        found = search(module, counting)
        assert counting.pipelines == found.compilations + 1      # the candidates, and -Oz
        assert found.compilations == budget                      # the budget is spent, never exceeded
        assert len(found.tried) == budget


def test_oz_is_kept_when_the_library_only_knows_worse_pipelines(lib_world, engine, examples):
    module = examples["sum_array"]
    oz = bpq.optimize(module, "Oz").instruction_count
    # One program whose only stored pipeline claims a huge gain, but does little on a real module.
    fake = LibraryProgram("f" * 64, "fake", 100, 50, {("-strip",): 1})
    library = ProgramLibrary([fake], np.zeros((1, lib_world["encoder"].dim), np.float32),
                             encoder_identity(lib_world["encoder"]))
    found = recommend_pipeline(module, 1, library=library, engine=engine, embedding=np.ones(library.dim))
    assert found.tried[0][0] == ("-strip",) and found.tried[0][1] > oz
    assert found.steps == (OZ,) and found.method == "-Oz" and found.pipeline == "default<Oz>"
    assert found.instruction_count == oz


def test_the_library_learns_a_better_target_and_new_programs(lib_world, engine, examples):
    library = ProgramLibrary(list(lib_world["library"].programs[:4]), lib_world["library"].embeddings[:4].copy(),
                             lib_world["library"].encoder)
    library.programs = [LibraryProgram(p.program, p.name, p.instruction_count, p.oz_count, dict(p.results))
                        for p in library.programs]
    first = library.programs[0]
    steps, count = first.best()
    assert not library.learn(first.program, library.embeddings[0], {("-gvn",): count + 5})
    assert library.revision == 0 and first.best() == (steps, count)
    assert library.learn(first.program, library.embeddings[0], {("-gvn", "-dce"): count - 1})
    assert library.revision == 1 and first.best() == (("-gvn", "-dce"), count - 1)
    module = examples["state_machine"]
    embedding = lib_world["encoder"].embed(module)
    found = recommend_pipeline(module, 4, library=library, engine=engine, embedding=embedding, learn=True)
    assert len(library) == 5 and library.revision == 2
    new = library.programs[-1]
    assert new.program == module.sha256 and new.best()[1] == found.instruction_count
    assert library.neighbors(embedding, 1)[1][0] < 1e-6


def test_recommended_pipelines_keep_program_output(lib_world, engine, tmp_path):
    """Semantic check: each example program prints the same and exits the same after the recommended pipeline."""
    for source in sorted(EXAMPLES.glob("*.c")):
        module = bpq.load_module(source)
        found = recommend_pipeline(module, 8, library=lib_world["library"], engine=engine)
        optimized = bpq.optimize(module, found.pipeline).verify()
        optimized.save(tmp_path / f"{source.stem}.ll")
        outputs = []
        for name, inputs in (("ref", [str(source), "-O0"]), ("opt", [str(tmp_path / f"{source.stem}.ll")])):
            exe = tmp_path / f"{source.stem}-{name}"
            subprocess.run(["clang-19", *inputs, "-o", str(exe), "-lm", "-Wno-override-module"], check=True,
                           capture_output=True)
            done = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
            outputs.append((done.returncode, done.stdout))
        assert outputs[0] == outputs[1], source.name
        assert outputs[0][1].strip()                          # the example prints something to compare


def test_evaluation_report_compares_every_method_at_every_budget(lib_world, engine, tmp_path):
    report = evaluate_guidance(lib_world["store"], tmp_path, library=lib_world["library"],
                               encoder=lib_world["encoder"], engine=engine, split="test", programs=4,
                               budgets=(1, 3))
    assert report["programs"] >= 1 and report["failed"] == []
    assert report["methods"][0] == "ranker"                      # the shipped ranker: what optimize --auto uses
    for method in ("ranker",) + METHODS:
        for budget in ("1", "3"):
            assert report["geomean_oz_over_method"][method][budget] >= 1.0
        assert report["geomean_oz_over_method"][method]["3"] >= report["geomean_oz_over_method"][method]["1"] - 1e-9
    text = (tmp_path / "report.md").read_text()
    assert all(m in text for m in METHODS) and "budget 3" in text and (tmp_path / "budgets.png").stat().st_size
    rows = [json.loads(line) for line in (tmp_path / "per_program.jsonl").read_text().splitlines()]
    assert len(rows) == report["programs"] and all(r["counts"]["greedy"]["3"] <= r["oz_count"] for r in rows)
    module = next(Corpus(lib_world["store"]).iter_modules(only={rows[0]["program"]}))
    again = recommend_pipeline(module, 3, engine=engine, ranker=default_ranker())  # what the report's ranker found
    assert again.instruction_count == rows[0]["counts"]["ranker"]["3"] <= rows[0]["oz_count"]
    assert bpq.optimize(module, again.pipeline).instruction_count == again.instruction_count
    everything = report["slices"]["all"]
    assert everything["programs"] == report["programs"]
    assert everything["pqbert-library"] == report["geomean_oz_over_method"]["pqbert-library"]
    assert "By program kind and size" in text and {r["kind"] for r in rows} == {"small"}
    smallest = min(r["instruction_count"] for r in rows)
    narrowed = evaluate_guidance(lib_world["store"], tmp_path / "narrow", library=lib_world["library"],
                                 encoder=lib_world["encoder"], engine=engine, split="test", programs=4, budgets=(1,),
                                 kind="small", max_instructions=smallest, ranker=False)
    assert narrowed["programs"] >= 1 and narrowed["max_instructions"] == smallest
    assert "ranker" not in narrowed["methods"]
    assert all(json.loads(line)["instruction_count"] <= smallest
               for line in (tmp_path / "narrow" / "per_program.jsonl").read_text().splitlines())
    assert "small programs, at most" in (tmp_path / "narrow" / "report.md").read_text()
    with pytest.raises(CorpusError, match="of a real program"):
        evaluate_guidance(lib_world["store"], tmp_path / "none", library=lib_world["library"],
                          encoder=lib_world["encoder"], engine=engine, split="test", kind="real")


def test_evaluation_embeds_under_the_librarys_pooling_whatever_encoder_it_is_given(lib_world, engine, tmp_path):
    """The report embeds its modules as the library's programs were embedded: an encoder under another pooling
    (the shipped default may differ from a library's) gives the same report, not one failure per module."""
    built = lib_world["encoder"]
    other = load_encoder(built.path, pooling="cls" if built.pooling != "cls" else "mean")
    runs = {}
    for name, encoder in (("built", built), ("other", other)):
        report = evaluate_guidance(lib_world["store"], tmp_path / name, library=lib_world["library"],
                                   encoder=encoder, engine=engine, split="test", programs=3, budgets=(1, 2))
        assert report["failed"] == [] and report["programs"] >= 1
        runs[name] = [json.loads(line) for line in (tmp_path / name / "per_program.jsonl").read_text().splitlines()]
    assert [(r["program"], r["counts"]["pqbert-library"]) for r in runs["built"]] == \
        [(r["program"], r["counts"]["pqbert-library"]) for r in runs["other"]]


def bpq_cli(*args):
    return subprocess.run([sys.executable, "-m", "behavioral_pq", *map(str, args)], capture_output=True, text=True)


@pytest.mark.slow
def test_cli_optimize_auto_writes_a_verified_module_and_rejects_bad_input(lib_world, tmp_path):
    library = lib_world["root"] / "library"
    out = tmp_path / "out.ll"
    done = bpq_cli("optimize", EXAMPLES / "matmul.c", "--auto", "--budget", "3", "--library", library, "-o", out,
                   "--json", "--target", "measure")   # the recommendation's own counts (measure mode)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["instructions_after"] == record["instruction_count"] <= record["oz_count"]
    assert record["compilations"] == 3
    check = subprocess.run(["opt-19", "-passes=verify", "-disable-output", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert bpq.load_module(out).instruction_count == record["instructions_after"]
    done = bpq_cli("optimize", EXAMPLES / "matmul.c", "--auto", "--budget", "2", "--library", library)
    assert done.returncode == 0 and "-Oz gives" in done.stdout and "pipeline:" in done.stdout
    import shutil

    learning = shutil.copytree(library, tmp_path / "learning")
    fresh = tmp_path / "fresh.c"                   # a program the library does not hold
    fresh.write_text("int g[16];\nint f(int n) { int s = 0; for (int i = 0; i < n; i++) s += g[i & 15] * 3;"
                     " return s; }\n")
    done = bpq_cli("optimize", fresh, "--auto", "--budget", "2", "--library", learning, "--learn")
    assert done.returncode != 0 and "add --target measure" in done.stderr    # the library counts in measure mode
    done = bpq_cli("optimize", fresh, "--auto", "--budget", "2", "--library", learning, "--learn",
                   "--target", "measure")
    assert done.returncode == 0, done.stderr
    assert load_library(learning).revision == 1 and len(load_library(learning)) == len(lib_world["library"]) + 1
    bad = tmp_path / "bad.ll"
    bad.write_text("define i32 @f( {\n")
    for args, message in (([tmp_path / "missing.c", "--auto"], "no such file"),
                          ([bad, "--auto", "--library", library], "invalid"),
                          ([EXAMPLES / "matmul.c", "--auto", "--passes=-gvn"], "either --passes or --auto"),
                          ([EXAMPLES / "matmul.c", "--auto", "--budget", "-1"], "--budget"),
                          ([EXAMPLES / "matmul.c", "--auto", "--seconds", "0", "--library", library],
                           "seconds must be positive"),
                          ([EXAMPLES / "matmul.c", "--passes", "Oz", "--seconds", "3"], "give --auto"),
                          ([EXAMPLES / "matmul.c", "--auto", "--learn"], "--learn needs --library"),
                          ([EXAMPLES / "matmul.c", "--auto", "--library", tmp_path], "not a program library")):
        done = bpq_cli("optimize", *args)
        assert done.returncode != 0 and message in done.stderr.lower() and "Traceback" not in done.stderr, args


def bpq_on_a_terminal(*args, timeout: float = 600):
    """Run bpq with stderr on a pseudo-terminal and stdout on a pipe: (exit status, stdout, what the terminal
    showed)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))   # 200 columns (tqdm fits to it)
    proc = subprocess.Popen([sys.executable, "-m", "behavioral_pq", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    shown = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:          # the child's end closed
                break
            if not data:
                break
            shown.append(data)
        elif proc.poll() is not None:
            break
    out = proc.communicate(timeout=60)[0]
    os.close(master)
    return proc.returncode, out.decode(), b"".join(shown).decode(errors="replace")


@pytest.mark.slow
def test_progress_shows_on_a_terminal_and_never_in_json(lib_world, tmp_path):
    import re

    library = lib_world["root"] / "library"
    code, out, shown = bpq_on_a_terminal("optimize", EXAMPLES / "matmul.c", "--auto", "--budget", "3",
                                         "--library", library, "-o", tmp_path / "a.ll")
    assert code == 0, shown
    assert re.search(r"[0-3]/3 compilations, best \d+ instructions, -Oz \d+", shown), shown
    assert "embedding" in shown and "wrote" in out and "compilations," not in out
    code, out, shown = bpq_on_a_terminal("optimize", EXAMPLES / "matmul.c", "--auto", "--budget", "3",
                                         "--library", library, "--json")
    assert code == 0, shown
    assert json.loads(out)["compilations"] == 3 and "compilations" not in shown    # pure JSON, no bar
    done = bpq_cli("optimize", EXAMPLES / "matmul.c", "--auto", "--budget", "2", "--library", library)
    assert done.returncode == 0 and "compilations," not in done.stderr             # stderr not a terminal
    code, out, shown = bpq_on_a_terminal("compile", EXAMPLES / "matmul.c", "--auto-passes", "--budget", "2",
                                         "-o", tmp_path / "mm")
    assert code == 0, shown
    assert re.search(r"[0-2]/2 compilations, best \d+ bytes, -Oz \d+", shown), shown


def test_optimize_auto_searches_in_the_mode_it_writes_and_writes_what_it_prints(tmp_path):
    """The default (target mode for this host) counts every candidate as it is built for the host: the -Oz and
    the result printed are those of the module written; ``--target measure`` counts in measure mode."""
    from behavioral_pq.core.target import resolve_target

    source = EXAMPLES / "list_sort.c"           # -Oz: 52 instructions in measure mode, 53 in target mode
    module = bpq.load_module(source)
    target = resolve_target("host", None)
    oz = {"measure": bpq.optimize(module, "Oz").instruction_count,
          "target": bpq.optimize(module, "Oz", target=target).instruction_count}
    assert oz["measure"] != oz["target"]
    for mode in ("target", "measure"):
        out = tmp_path / f"{mode}.bc"
        flags = ("--target", "measure") if mode == "measure" else ()
        done = bpq_cli("optimize", source, "--auto", "--budget", "4", *flags, "-o", out)
        assert done.returncode == 0, done.stderr
        figures = re.findall(r"^  (\w+) mode[^:]*: -Oz gives (\d+); the recommended pipeline (\d+)", done.stdout,
                             re.M)
        assert len(figures) == 1 and figures[0][:2] == (mode, str(oz[mode])), done.stdout   # one figure, labelled
        assert len(re.findall(r"\b(?:target|measure) mode", done.stdout)) == 1, done.stdout   # and named once
        written = bpq.load_module(out).instruction_count
        after = int(re.search(r"-> (\d+) instructions", done.stdout).group(1))
        assert written == after == int(figures[0][2]) <= oz[mode]
        record = json.loads(bpq_cli("optimize", source, "--auto", "--budget", "4", *flags, "--json").stdout)
        assert record["mode"] == mode and record["oz_count"] == oz[mode]
        assert record["instruction_count"] == record["instructions_after"] == written


def test_an_instruction_count_search_for_a_target_counts_each_candidate_as_it_is_built_there(examples, engine):
    """matmul under -O3: fewer instructions than -Oz in measure mode, but built for a real target its loops are
    vectorized (431 here). A search counting in measure mode takes -O3; one for the target builds each candidate
    there, marked for size as -Oz marks functions, and keeps what is smallest as built."""
    from dataclasses import replace

    from behavioral_pq.core.target import resolve_target
    from behavioral_pq.tasks.guidance import Trials

    module = examples["matmul"]
    target = resolve_target("host", None)
    marked = replace(target, size="Oz")
    candidates = (("-O3",), ("-Oz", "-gvn"), ("-sroa", "-loop-vectorize"))
    measured = {steps: bpq.optimize(module, " ".join(steps)).instruction_count for steps in ((OZ,),) + candidates}
    assert measured[("-O3",)] < measured[(OZ,)]
    assert bpq.optimize(module, "O3", target=target).instruction_count > measured[(OZ,)]   # unmarked: vectorized

    in_measure_mode = Trials(module, engine, 3)
    in_measure_mode.run(candidates, "test")
    assert in_measure_mode.best() == (("-O3",), measured[("-O3",)])

    for_target = Trials(module, engine, 3, target=target)
    assert for_target.target_for(("-O3",)) == marked and for_target.target_for((OZ, "-gvn")) == target
    built = {steps: bpq.optimize(module, " ".join(steps), target=for_target.target_for(steps)).instruction_count
             for steps in ((OZ,),) + candidates}
    assert for_target.oz_count == built[(OZ,)]
    for_target.run(candidates, "test")
    assert {steps: for_target.counts[steps] for steps in built} == built                  # as each is built there
    best, count = for_target.best()
    assert count == min(built.values()) and built[best] == count
    assert bpq.load_module(for_target.result(best)).instruction_count == count            # kept as built


def test_recommend_and_optimize_for_a_target_returns_what_it_searched(examples, engine):
    from behavioral_pq.core.target import resolve_target
    from behavioral_pq.tasks.guidance import recommend_and_optimize

    module = examples["matmul"]
    target = resolve_target("host", None)
    oz = bpq.optimize(module, "Oz", target=target).instruction_count
    for seconds in (None, 60.0):     # re-run and checked, or the search's own result
        found, result = recommend_and_optimize(module, 6, engine=engine, target=target, seconds=seconds)
        assert found.oz_count == oz and result.instruction_count == found.instruction_count <= oz
        assert all(count is None or count >= found.instruction_count for _, count in found.tried)
        assert bpq.optimize(module, found.pipeline, target=target).instruction_count == found.instruction_count
    with pytest.raises(ValueError, match="measure mode"):   # an instruction-count library counts in measure mode
        recommend_and_optimize(module, 2, engine=engine, target=target, learn=True)


@pytest.mark.slow
def test_text_size_objective_compiles_every_candidate_and_never_loses_to_oz(lib_world, engine, examples, tmp_path):
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import text_size
    from behavioral_pq.tasks.guidance.trials import candidate_target

    module = examples["matmul"]
    target = Target(Target.host().triple, "", "")                # the module's own CPU, as bpq compile for size
    counting = CountingEngine(engine)
    found = recommend_pipeline(module, 5, library=lib_world["library"], engine=counting, objective="text-size",
                               embedding=lib_world["encoder"].embed(module))
    assert found.objective == "text-size" and found.compilations == 5 and len(found.tried) == 5
    assert counting.pipelines >= found.compilations + 1          # every candidate and -Oz were compiled

    def bytes_after(steps):   # each candidate compiled as clang -Oz marks functions, size levels their own way
        return text_size(bpq.optimize(module, " ".join(steps), target=candidate_target(target, steps)).bitcode)

    assert found.oz_text_size == bytes_after(["-Oz"])            # independent re-measurements
    assert found.text_size == bytes_after(found.steps) <= found.oz_text_size
    assert found.improvement == found.oz_text_size / found.text_size >= 1.0
    assert found.tried[0][0] == ("-Os",)                          # the size seed comes first
    assert found.text_size <= found.tried[0][1]
    for steps, value in found.tried:     # scored by bytes, not instructions; (-Oz, p) continued from -Oz's result
        assert value == bytes_after(steps)
    assert found.instruction_count == bpq.optimize(module, found.pipeline,
                                                   target=candidate_target(target, found.steps)).instruction_count
    with pytest.raises(ValueError, match="objective must be one of"):
        recommend_pipeline(module, 1, library=lib_world["library"], engine=engine, objective="runtime")
    with pytest.raises(ValueError, match="learn=True needs a library of the objective searched for"):
        recommend_pipeline(module, 1, library=lib_world["library"], engine=engine, objective="text-size",
                           learn=True)

    done = bpq_cli("optimize", EXAMPLES / "matmul.c", "--auto", "--objective", "text-size", "--budget", "2",
                   "--library", lib_world["root"] / "library", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["objective"] == "text-size" and record["mode"] == "target" and record["target"]["cpu"] == ""
    assert record["text_size"] <= record["oz_text_size"] == found.oz_text_size
    assert record["instructions_after"] == record["instruction_count"]
    for args, message in ((["--objective", "text-size", "--passes", "Oz"], "give --auto"),
                          (["--auto", "--objective", "text-size", "--target", "measure"], "needs target mode")):
        done = bpq_cli("optimize", EXAMPLES / "matmul.c", *args)
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, args


def test_libraries_merge_into_one_that_finds_the_same_programs(lib_world, tmp_path):
    from behavioral_pq.tasks.guidance import merge_libraries
    from behavioral_pq.tasks.guidance.trials import candidate_target

    library = lib_world["library"]
    half = len(library) // 2
    parts = [ProgramLibrary(library.programs[a:b], library.embeddings[a:b], library.encoder)
             for a, b in ((0, half), (half, len(library)))]
    merged = merge_libraries(parts + [parts[0]])            # a program given twice is kept once
    assert [p.program for p in merged.programs] == [p.program for p in library.programs]
    assert np.array_equal(merged.embeddings, library.embeddings)
    assert [p.results for p in merged.programs] == [p.results for p in library.programs]
    nearest, distance = merged.neighbors(library.embeddings[half + 1], 1)   # found across the parts
    assert distance[0] < 1e-6 and np.allclose(merged.embeddings[nearest[0]], library.embeddings[half + 1])
    foreign = ProgramLibrary(parts[1].programs, parts[1].embeddings, dict(library.encoder, model_sha256="0" * 64))
    with pytest.raises(LibraryError, match="different encoders"):
        merge_libraries([parts[0], foreign])
    done = bpq_cli("library", "merge", lib_world["root"] / "library", lib_world["root"] / "library",
                   "--out", tmp_path / "merged")
    assert done.returncode == 0, done.stderr
    assert f"{len(library)} programs from 2 libraries" in done.stdout
    assert len(load_library(tmp_path / "merged", encoder=lib_world["encoder"])) == len(library)


def test_a_text_size_library_holds_bytes_and_serves_only_the_text_size_objective(lib_world, engine, examples,
                                                                                   tmp_path):
    from behavioral_pq.core.target import Target
    from behavioral_pq.core.toolchain import text_size
    from behavioral_pq.tasks.guidance import merge_libraries
    from behavioral_pq.tasks.guidance.trials import candidate_target

    target = Target(Target.host().triple, "", "")
    programs = lib_world["train"][:3]
    library = build_library(lib_world["store"], tmp_path / "text", programs, encoder=lib_world["encoder"],
                            engine=engine, ga=TINY_GA, objective="text-size", target=target)
    library = load_library(tmp_path / "text", encoder=lib_world["encoder"])
    assert library.objective == "text-size" and lib_world["library"].objective == "ir-count"
    assert library.settings["target"] == {"triple": target.triple, "cpu": "", "features": "", "size": ""}
    modules = {m.sha256: m for m in Corpus(lib_world["store"]).iter_modules(only=set(programs))}
    for entry in library.programs:                                # bytes, re-measured independently
        module = modules[entry.program]

        def bytes_after(steps):
            return text_size(bpq.optimize(module, " ".join(steps), target=candidate_target(target, steps)).bitcode)

        assert entry.oz_count == bytes_after(["-Oz"])
        steps, value = entry.best()
        assert value == bytes_after(steps) <= entry.oz_count
        ir_entry = next(p for p in lib_world["library"].programs if p.program == entry.program)
        assert entry.instruction_count == ir_entry.instruction_count and entry.oz_count != ir_entry.oz_count

    module = examples["matmul"]
    embedding = lib_world["encoder"].embed(module)
    with pytest.raises(ValueError, match="searched for text size"):
        recommend_pipeline(module, 2, library=library, engine=engine, embedding=embedding)
    found = recommend_pipeline(module, 4, library=library, engine=engine, embedding=embedding, objective="text-size",
                               target=target, learn=True)                 # the library counts what it searched
    assert found.text_size <= found.oz_text_size and len(library) == 4
    assert library.programs[-1].oz_count == found.oz_text_size
    with pytest.raises(LibraryError, match="different objectives"):
        merge_libraries([lib_world["library"], library])
    with pytest.raises(ValueError, match="objective must be one of"):
        build_library(lib_world["store"], tmp_path / "bad", programs, encoder=lib_world["encoder"], engine=engine,
                      objective="runtime")
    done = bpq_cli("library", "build", "--corpus", lib_world["store"], "--out", tmp_path / "bad", "--objective",
                   "speed")
    assert done.returncode != 0 and "invalid choice: 'speed'" in done.stderr


def test_library_build_draws_programs_of_one_kind(lib_world, tmp_path):
    done = bpq_cli("library", "build", "--corpus", lib_world["store"], "--out", tmp_path / "lib", "--kind", "real")
    assert done.returncode != 0 and "no real programs in split 'train'" in done.stderr, done.stderr


def test_shipped_library_recommends_for_an_example():
    found = bpq.recommend_pipeline(EXAMPLES / "list_sort.c", budget=3)
    assert found.compilations == 3 and found.instruction_count <= found.oz_count
    assert len(load_library()) >= 1000


def test_greedy_coreset_covers_programs_with_few_pipelines():
    from behavioral_pq.tasks.guidance.coreset import choose_coreset

    gains = np.array([[0.3, 0.0, 0.2, 0.0],       # pipeline 0 wins program 0 ...
                      [0.0, 0.1, 0.2, 0.0],       # ... pipeline 2 is good everywhere ...
                      [0.0, 0.5, 0.2, -0.4]])     # ... pipeline 1 wins program 2; losses count as -Oz (0)
    chosen, curve = choose_coreset(gains, 4)
    assert chosen == [2, 1, 0]                    # the best mean first, then the largest rises; 3 adds nothing
    assert np.allclose(curve, [0.6 / 3, 0.9 / 3, 1.0 / 3])
    assert choose_coreset(gains, 1) == ([2], [pytest.approx(0.2)])
    assert choose_coreset(np.zeros((2, 3)), 3) == ([], [])


def test_retrieval_takes_the_coreset_share_in_turn_without_repeats():
    from behavioral_pq.tasks.guidance.recommend import retrieval_order

    near = [("-a",), ("-b",), ("-c",), ("-d",)]
    core = [("-x",), ("-b",), ("-y",)]
    assert retrieval_order(near, core, 4, 0.0) == near
    assert retrieval_order(near, core, 3, 1.0) == [("-x",), ("-b",), ("-y",)]
    assert retrieval_order(near, core, 5, 0.5) == [("-x",), ("-a",), ("-b",), ("-c",), ("-y",)]
    assert retrieval_order(near, core, 10, 0.5) == [("-x",), ("-a",), ("-b",), ("-c",), ("-y",), ("-d",)]
    assert retrieval_order([], core, 2, 0.0) == [("-x",), ("-b",)]      # the other list fills in
    assert retrieval_order([(OZ,)], [], 2, 0.5) == []                   # -Oz is the reference, never a candidate
    with pytest.raises(ValueError, match="coreset_share"):
        retrieval_order(near, core, 2, 1.5)


def test_coreset_is_measured_resumably_saved_and_tried_first(lib_world, engine, examples, tmp_path):
    import shutil

    from behavioral_pq.tasks.guidance import fit_coreset
    from behavioral_pq.tasks.guidance.coreset import coreset_pool, measure_pool, oz_suffixes

    folder = tmp_path / "library"
    shutil.copytree(lib_world["root"] / "library", folder)
    done = bpq_cli("library", "coreset", folder, "--corpus", lib_world["store"], "--size", "3")
    assert done.returncode == 0, done.stderr
    assert "coreset of" in done.stdout and "0 failed" in done.stdout
    library = load_library(folder, encoder=lib_world["encoder"])
    summary = library.settings["coreset"]
    assert 1 <= len(library.coreset) == summary["size"] <= 3 and summary["programs"] == len(library)
    assert set(library.coreset) <= set(coreset_pool(library)) and summary["gain"] > 1.0
    assert not set(oz_suffixes()) & set(coreset_pool(library)) and len(oz_suffixes()) == 2 * 124
    assert set(oz_suffixes()) <= set(coreset_pool(library, oz_suffixed=True))
    assert summary["curve"] == sorted(summary["curve"]) and summary["pool_gain"] >= summary["gain"]
    program = library.programs[0]
    module = next(Corpus(lib_world["store"]).iter_modules(only={program.program}))
    for steps in library.coreset:                 # stored counts are measurements, made on every sampled program
        assert program.results[steps] == bpq.optimize(module, " ".join(steps), engine=engine).instruction_count
    chained = [(OZ, "-slp-vectorizer", OZ), ("-gvn",), (OZ, "-slp-vectorizer"), (OZ, OZ)]
    oz, counts = measure_pool(module, chained, engine)      # a tree: each continues from its measured prefix
    assert oz == program.oz_count and counts == [bpq.optimize(module, " ".join(steps), engine=engine).instruction_count
                                                 for steps in chained]

    counting = CountingEngine(engine)             # a rerun reads the log and measures nothing
    again = load_library(folder, encoder=lib_world["encoder"])
    log = tmp_path / "library.coreset.jsonl"
    assert fit_coreset(again, lib_world["store"], log, size=3, engine=counting) == summary
    assert counting.pipelines == 0 and again.coreset == library.coreset
    with pytest.raises(LibraryError, match="another library"):
        fit_coreset(again, lib_world["store"], log, size=3, seed=1, engine=counting)
    again.settings["objective"] = "text-size"
    with pytest.raises(LibraryError, match="counts text-size"):
        fit_coreset(again, lib_world["store"], tmp_path / "bytes.jsonl", engine=counting)

    module = examples["matmul"]
    found = recommend_pipeline(module, 2, library=library, engine=engine, coreset_share=1.0)
    assert [steps for steps, _ in found.tried] == library.coreset[:2]
    report = evaluate_guidance(lib_world["store"], tmp_path / "report", library=library, encoder=lib_world["encoder"],
                               engine=engine, split="test", programs=3, budgets=(1, 2))
    assert report["methods"][-1] == "coreset" and "| coreset |" in (tmp_path / "report" / "report.md").read_text()
    rows = [json.loads(line) for line in (tmp_path / "report" / "per_program.jsonl").read_text().splitlines()]
    first = {steps: None for steps in library.coreset[:1]}
    for row in rows:                              # the coreset method at budget 1 is the first coreset pipeline
        module = next(Corpus(lib_world["store"]).iter_modules(only={row["program"]}))
        for steps in first:
            count = bpq.optimize(module, " ".join(steps), engine=engine).instruction_count
            assert row["counts"]["coreset"]["1"] == min(count, row["oz_count"])
    library.learn("new-program", library.embeddings[0], {library.coreset[0]: 5, ("-gvn",): 4}, keep=0)
    assert library.coreset[0] in library.programs[-1].results      # learning keeps coreset pipelines
