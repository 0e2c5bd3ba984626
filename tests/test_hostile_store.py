"""Hostile folders, files and settings around the stores: the spectrum cache and the corpus store remove only what
they named, never through a link; a few bytes of a FAISS index or a Parquet shard cannot claim gigabytes; a shard of
another schema is refused naming the store and the shard; numbers from the environment are checked; large-module
sampling works on a module with no global variable and says so when it fails; a pooled build leaves no progress
file in /dev/shm; a store whose folders are links is refused."""

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import EXAMPLES

import behavioral_pq as bpq
from behavioral_pq.artifacts import encoder_identity, file_checksums, seal, sha256_file
from behavioral_pq.config import env_number
from behavioral_pq.core.engine import Engine, default_workers
from behavioral_pq.corpus import Corpus, CorpusStore, build_corpus, discover
from behavioral_pq.corpus import store as store_module
from behavioral_pq.corpus.build import local_executor
from behavioral_pq.corpus.store import MODULES_SCHEMA, SPECTRA_SCHEMA
from behavioral_pq.embedding import sampling
from behavioral_pq.embedding.cache import SpectrumCache
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.errors import ConfigError, CorpusError, ToolError

P24 = "searched-p24-l50-s0"


def bpq_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "behavioral_pq.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# -- only bpq's own names are removed, never through a link ---------------------------------------------------------

def test_cache_pruning_removes_only_entries_it_named(tmp_path):
    cache = SpectrumCache(tmp_path, max_bytes=20_000)
    rows = np.arange(11 * 56, dtype=np.int32).reshape(11, 56)
    for i in range(12):
        cache.put(f"{i:064x}", "p" * 64, rows)
    foreign = {tmp_path / "db" / "important.sqlite": b"x" * 50_000,     # a 2-character folder beside the cache
               tmp_path / "ab" / "notes.txt": b"keep",
               tmp_path / "ab" / ("0" * 64 + ".npy"): b"an entry name in the wrong subfolder"}
    for path, data in foreign.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    assert cache.size() < 12 * 3000                                     # other files are not the cache's
    assert cache.prune() > 0
    for path, data in foreign.items():
        assert path.read_bytes() == data
    left = [p for p in tmp_path.glob("??/*.npy") if p.parent.name != "ab"]
    assert 0 < len(left) < 12 and cache.size() <= 20_000


def test_clean_temporary_never_follows_a_linked_tmp_nor_removes_foreign_names(tmp_path):
    store = CorpusStore(tmp_path / "store", create=True)
    pid = dead_pid()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victims = [elsewhere / f"w-{pid}-0123456789ab.parquet", elsewhere / f"backup-{pid}-notes"]
    for victim in victims:
        victim.write_bytes(b"precious")
    (store.path / "tmp").symlink_to(elsewhere)
    assert store.clean_temporary() == 0
    assert all(v.read_bytes() == b"precious" for v in victims)

    (store.path / "tmp").unlink()
    (store.path / "tmp").mkdir()
    ours = store.path / "tmp" / f"w-{pid}-0123456789ab.parquet"
    live = store.path / "tmp" / f"w-{os.getpid()}-0123456789ab.parquet"
    foreign = store.path / "tmp" / f"backup-{pid}-notes"
    for path in (ours, live, foreign):
        path.write_bytes(b"x")
    assert store.clean_temporary() == 1
    assert not ours.exists() and live.exists() and foreign.exists()


def test_a_store_whose_folders_are_links_is_refused(tmp_path):
    items = list(discover([EXAMPLES / "sum_array.c"], origin="t"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = CorpusStore(tmp_path / "store", create=True)
    (store.path / "modules").symlink_to(elsewhere)
    with pytest.raises(CorpusError, match="modules: a symbolic link"):
        build_corpus(items, store.path, workers=1, labels=False)
    assert list(elsewhere.iterdir()) == [] and CorpusStore(store.path).manifest["shards"] == []
    (store.path / "modules").unlink()
    (store.path / "tmp").symlink_to(elsewhere)
    with pytest.raises(CorpusError, match="tmp: a symbolic link"):
        build_corpus(items, store.path, workers=1, labels=False)
    assert list(elsewhere.iterdir()) == []


# -- a few bytes cannot claim gigabytes ----------------------------------------------------------------------------

def test_a_faiss_index_claiming_more_floats_than_its_file_holds_is_refused_before_allocation(tmp_path):
    from behavioral_pq.tasks.guidance.library import LibraryProgram, ProgramLibrary, load_library

    encoder = bpq.load_encoder()
    program = LibraryProgram("f" * 64, "fake", 100, 50, {("-strip",): 1})
    folder = ProgramLibrary([program], np.ones((1, encoder.dim), np.float32), encoder_identity(encoder)).save(
        tmp_path / "library")
    assert load_library(folder, encoder=encoder).embeddings.shape == (1, encoder.dim)
    # IndexFlatL2's head (fourcc, d, ntotal, 2 unused, is_trained, metric), then 2^28 floats said, none there
    (folder / "index.faiss").write_bytes(struct.pack("<4siqqqBiQ", b"IxF2", 1 << 14, 1 << 14, 1 << 20, 1 << 20,
                                                     1, 1, 1 << 28))
    config = json.loads((folder / "library.json").read_text())
    config.pop("digest")
    config["files"] = file_checksums(folder, ["index.faiss"])
    (folder / "library.json").write_text(json.dumps(seal(config)))
    assert (folder / "index.faiss").stat().st_size == 45
    script = textwrap.dedent(f"""\
        import resource, behavioral_pq as bpq
        from behavioral_pq.tasks.guidance.library import load_library
        encoder = bpq.load_encoder()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            load_library({str(folder)!r}, encoder=encoder)
        except Exception as exc:
            print(type(exc).__name__, exc)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    message, grown_mib = out.stdout.strip().splitlines()
    assert int(grown_mib) < 100, f"{grown_mib} MiB for a 45-byte index"
    assert message.startswith("LibraryError") and "index.faiss" in message and "45 bytes" in message


def write_shard(store: CorpusStore, table: str, rows: pa.Table) -> Path:
    """A shard written as a hostile store would hold it: any schema, listed in the manifest with its true size
    and checksum."""
    relative = Path(table, f"part-hostile-{rows.num_rows}-{len(store.manifest['shards'])}.parquet")
    (store.path / table).mkdir(exist_ok=True)
    pq.write_table(rows, store.path / relative, compression="zstd")
    entry = {"table": table, "path": str(relative), "rows": rows.num_rows,
             "bytes": (store.path / relative).stat().st_size, "sha256": sha256_file(store.path / relative),
             "probe_set": None, "writer": 1, "written": 0.0}
    store._edit_manifest(lambda manifest: manifest["shards"].append(entry))
    return store.path / relative


def module_rows(bitcode: bytes, **overrides) -> dict:
    row = {"sha256": "a" * 64, "instruction_count": 1, "autophase": [0] * 56, "instcount": [0] * 70,
           "bitcode": bitcode}
    row.update(overrides)
    return row


def test_a_shard_that_decompresses_far_beyond_its_size_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "SHARD_EXPANSION_FLOOR", 1 << 20)   # so that 16 MiB of zeros shows it
    store = CorpusStore(tmp_path / "store", create=True)
    shard = write_shard(store, "modules", pa.Table.from_pylist([module_rows(bytes(16 << 20))], MODULES_SCHEMA))
    assert shard.stat().st_size < 20_000
    with pytest.raises(CorpusError, match=r"would decompress to \d+ bytes from \d+") as caught:
        list(Corpus(store.path).iter_modules())
    assert str(shard) in str(caught.value)
    assert any("would decompress" in p for p in CorpusStore(store.path).verify())
    honest = CorpusStore(tmp_path / "honest", create=True)   # what a build writes reads as before
    honest.append("modules", pa.Table.from_pylist([module_rows(os.urandom(1 << 20))], MODULES_SCHEMA))
    assert len(Corpus(honest.path)) == 1 and honest.verify() == []


def test_a_shard_of_another_schema_is_refused_naming_store_and_shard(tmp_path):
    store = CorpusStore(tmp_path / "store", create=True)
    no_bitcode = write_shard(store, "modules", pa.Table.from_pylist(
        [{k: v for k, v in module_rows(b"BC").items() if k != "bitcode"}]))
    problems = CorpusStore(store.path).verify()
    assert len(problems) == 1 and str(no_bitcode) in problems[0] and "no column 'bitcode'" in problems[0]
    with pytest.raises(CorpusError, match="no column 'bitcode'"):
        list(Corpus(store.path).iter_modules())
    out = bpq_cli("corpus", "info", store.path, "--verify")
    assert out.returncode != 0 and "Traceback" not in out.stderr and "KeyError" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and no_bitcode.name in out.stderr

    other = CorpusStore(tmp_path / "other", create=True)
    wrong = write_shard(other, "modules", pa.Table.from_pylist([module_rows(b"BC", instruction_count="many")]))
    with pytest.raises(CorpusError) as caught:
        Corpus(other.path).info()
    message = str(caught.value)
    assert str(other.path) in message and wrong.name in message and "instruction_count" in message
    assert "invalid literal" not in message
    out = bpq_cli("corpus", "info", other.path)
    assert out.returncode == 2 and "Traceback" not in out.stderr and wrong.name in out.stderr


def test_stored_values_of_the_wrong_length_are_refused_naming_the_store(tmp_path):
    probes = load_probes(P24)
    store = CorpusStore(tmp_path / "store", create=True)
    store.append("modules", pa.Table.from_pylist([module_rows(b"BC")], MODULES_SCHEMA))
    store.append("spectra", pa.Table.from_pylist([{"sha256": "a" * 64, "status": "ok", "error_kind": None,
                                                   "error": None, "autophase_after": b"\0" * 12}], SPECTRA_SCHEMA),
                 probe_set=probes.hash)
    with pytest.raises(CorpusError, match=f"^{tmp_path / 'store'}: the stored spectrum of module aaaaaaaaaaaa "
                                          f"holds 12 bytes, 24 probes take {24 * 56 * 4}"):
        Corpus(store.path).spectra(probes)


# -- numbers from the environment ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value", [("BPQ_TIMEOUT", "nan"), ("BPQ_TIMEOUT", "inf"), ("BPQ_TIMEOUT", "abc"),
                                         ("BPQ_TIMEOUT", "0"), ("BPQ_WORKERS", "-1"), ("BPQ_WORKERS", "abc"),
                                         ("BPQ_WORKERS", "1.5")])
def test_engine_settings_from_the_environment_are_checked(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"^{name}={value!r}: "):
        Engine()


def test_good_engine_settings_from_the_environment_are_used(monkeypatch):
    monkeypatch.setenv("BPQ_TIMEOUT", "2.5")
    monkeypatch.setenv("BPQ_WORKERS", "0")
    engine = Engine()
    assert engine.timeout == 2.5 and engine.workers == 0 and default_workers() == 0
    monkeypatch.setenv("BPQ_WORKERS", "")
    assert default_workers() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0", "abc"])
def test_the_cache_bound_from_the_environment_is_checked(monkeypatch, tmp_path, value):
    monkeypatch.setenv("BPQ_CACHE_MAX_MB", value)
    with pytest.raises(ConfigError, match=f"^BPQ_CACHE_MAX_MB={value!r}: "):
        SpectrumCache(tmp_path)
    monkeypatch.setenv("BPQ_CACHE_MAX_MB", "0.5")
    assert SpectrumCache(tmp_path).max_bytes == 1 << 19


def test_env_number_reads_whole_and_finite_numbers(monkeypatch):
    monkeypatch.delenv("BPQ_TEST_NUMBER", raising=False)
    assert env_number("BPQ_TEST_NUMBER", 7, kind=int) == 7
    monkeypatch.setenv("BPQ_TEST_NUMBER", " 3 ")
    assert env_number("BPQ_TEST_NUMBER", 7, kind=int) == 3
    with pytest.raises(ConfigError, match="greater than 3"):
        env_number("BPQ_TEST_NUMBER", 7.0, minimum=3, allow_minimum=False)
    with pytest.raises(ValueError, match="not a finite number"):
        monkeypatch.setenv("BPQ_TEST_NUMBER", "-inf")
        env_number("BPQ_TEST_NUMBER", 7.0)


@pytest.mark.parametrize("name, value", [("BPQ_TIMEOUT", "nan"), ("BPQ_WORKERS", "-1")])
def test_the_cli_refuses_a_bad_setting_in_one_line(name, value):
    out = bpq_cli("features", EXAMPLES / "sum_array.c", env={name: value})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and out.stdout == "" and len(lines) == 1
    assert lines[0].startswith(f"bpq: error: {name}={value!r}: ")


# -- large-module sampling -----------------------------------------------------------------------------------------

def no_globals(path: Path, functions: int = 30) -> Path:
    """External functions f_i with a static helper h_i each: no global variable, no string, no table."""
    lines = []
    for i in range(functions):
        lines.append(f"static int h{i}(int *a, int n) {{ int s = {i}; for (int k = 0; k < n; k++) "
                     f"s += a[k] * {i + 3} - (s >> {i % 5 + 1}); return s; }}")
        lines.append(f"int f{i}(int *a, int n) {{ return h{i}(a, n) + (n > {i} ? h{i}(a + 1, n - 1) : 0); }}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def globals_free(tmp_path_factory):
    module = bpq.load_module(no_globals(tmp_path_factory.mktemp("sampling") / "no_globals.c"))
    assert "\n@" not in "\n" + module.text()                       # truly no global variable
    return module


def test_a_module_without_global_variables_is_sampled(globals_free):
    sample = sampling.sample_functions(globals_free, budget=globals_free.instruction_count // 3)
    assert 0 < sample.functions < sample.total_functions == 60 and 0.2 < sample.fraction < 0.5
    batch = spectra([globals_free], P24, cache=False, sample_above=globals_free.instruction_count - 1)
    assert batch.ok.all() and 0 < batch.sampled[0] < 1


def test_a_failed_sample_is_said_in_a_warning(globals_free, monkeypatch):
    def failing(*args, **kwargs):
        raise ToolError("llvm-extract-19: program doesn't contain global named '.*'!")

    monkeypatch.setattr(sampling, "run_tool", failing)
    with pytest.warns(UserWarning, match=f"{globals_free.name}: no function sample.*contain global named"):
        batch = spectra([globals_free], P24, cache=False, sample_above=globals_free.instruction_count - 1)
    assert batch.ok.all() and batch.sampled == (None,)


def test_the_cli_shows_a_failed_sample(tmp_path):
    source = no_globals(tmp_path / "no_globals.c")
    out = bpq_cli("spectrum", source, "--probes", P24, "--sample-above", "100", env={"BPQ_LLVM_EXTRACT": "false"})
    assert out.returncode == 0 and "no function sample" in out.stderr and "measured whole" in out.stderr
    said = [line for line in out.stderr.splitlines() if "no function sample" in line]
    assert len(said) == 1 and said[0].startswith("bpq: warning: ") and "measured whole" in said[0], out.stderr
    out = bpq_cli("spectrum", source, "--probes", P24, "--sample-above", "100")
    assert out.returncode == 0 and "no function sample" not in out.stderr and "function sample holding" in out.stderr


# -- progress files of a pooled build ------------------------------------------------------------------------------

def engine_workers_below(pid: int):
    """The progress-file paths of the engine workers (``python -m behavioral_pq.core._worker PATH N``) among the
    descendants of ``pid``."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            children.setdefault(int(stat_line.rsplit(")", 1)[1].split()[1]), []).append((int(entry.name), cmdline))
    found, todo = [], [pid]
    while todo:
        for child, cmdline in children.get(todo.pop(), []):
            todo.append(child)
            if b"behavioral_pq.core._worker" in cmdline:
                found.append(Path(cmdline[cmdline.index(b"behavioral_pq.core._worker") + 1].decode()))
    return found


def test_a_pooled_build_leaves_no_progress_file(tmp_path):
    items = list(discover([EXAMPLES], origin="t"))
    own = set(engine_workers_below(os.getpid()))   # this process's engines (of other tests) are not the build's
    executor = local_executor(2)
    try:
        build_corpus(items, tmp_path / "store", executor=executor, labels=False, chunk_size=1)
        progress = [p for p in engine_workers_below(os.getpid()) if p not in own]
    finally:
        executor.shutdown(wait=True)
    assert progress and all(p.name.startswith("bpq-progress-") for p in progress)
    assert [p for p in progress if p.exists()] == []
