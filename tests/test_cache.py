"""The on-disk spectrum cache: keyed by content, shared across processes, bounded, and off when asked."""

import json
import os
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest
from conftest import EXAMPLES

from behavioral_pq.embedding.cache import SpectrumCache, cache_enabled, default_cache
from behavioral_pq.embedding.probes import random_probes
from behavioral_pq.embedding.spectrum import spectra
from behavioral_pq.errors import PassCrashError


class CountingEngine:
    """Counts the modules it measures (what the cache saves)."""

    def __init__(self, engine):
        self.engine = engine
        self.measured = 0

    def autophase_after(self, bitcodes, pipelines, **kw):
        self.measured += len(bitcodes)
        return self.engine.autophase_after(bitcodes, pipelines, **kw)

    def autophase_tree(self, roots, parents, edges, **kw):  # how spectra() runs probes (a prefix tree per module)
        self.measured += len(roots)
        return self.engine.autophase_tree(roots, parents, edges, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


@pytest.fixture()
def modules(examples):
    return [examples["sum_array"], examples["list_sort"]]


def test_second_call_reads_the_cache_and_equals_a_fresh_measurement(engine, modules, tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    counting = CountingEngine(engine)
    first = spectra(modules, engine=counting, cache=cache)
    second = spectra(modules, engine=counting, cache=cache)
    assert counting.measured == 2                       # the second call measured nothing
    fresh = spectra(modules, engine=engine, cache=False)
    for batch in (first, second):
        np.testing.assert_array_equal(batch.spectra, fresh.spectra)
        np.testing.assert_array_equal(batch.autophase, fresh.autophase)
    assert len(list((tmp_path / "cache").glob("??/*.npy"))) == 2


def test_the_key_covers_the_probe_set(engine, modules, tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    counting = CountingEngine(engine)
    spectra(modules[:1], engine=counting, cache=cache)
    other = random_probes(4, 3, seed=1)
    batch = spectra(modules[:1], other, engine=counting, cache=cache)
    assert counting.measured == 2 and batch.spectra.shape == (1, 4, 56)
    assert SpectrumCache.key("a" * 64, "p1") != SpectrumCache.key("a" * 64, "p2")


def test_a_corrupt_entry_is_dropped_and_measured_again(engine, modules, tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    expected = spectra(modules[:1], engine=engine, cache=cache).spectra
    (entry,) = (tmp_path / "cache").glob("??/*.npy")
    entry.write_bytes(b"\x93NUMPY garbage")
    counting = CountingEngine(engine)
    again = spectra(modules[:1], engine=counting, cache=cache)
    assert counting.measured == 1
    np.testing.assert_array_equal(again.spectra, expected)


def test_failures_are_not_cached(engine, modules, tmp_path):
    class FirstModuleCrashes(CountingEngine):
        def autophase_after(self, bitcodes, pipelines, **kw):
            features, errors = super().autophase_after(bitcodes, pipelines, **kw)
            features[0] = 0
            return features, [PassCrashError("crashed", module="m", pipeline_index=0)] + list(errors[1:])

        def autophase_tree(self, roots, parents, edges, **kw):
            features, kept, errors = super().autophase_tree(roots, parents, edges, **kw)
            root = []
            for p in parents:
                root.append(-p - 1 if p < 0 else root[p])
            crashed = PassCrashError("crashed", module="m")
            return features, kept, [crashed if r == 0 else e for r, e in zip(root, errors)]

    cache = SpectrumCache(tmp_path / "cache")
    probes = random_probes(2, 2, seed=0)
    batch = spectra(modules, probes, engine=FirstModuleCrashes(engine), cache=cache)
    assert batch.ok.tolist() == [False, True]
    assert cache.get(modules[0].sha256, probes.hash, 2) is None
    assert cache.get(modules[1].sha256, probes.hash, 2) is not None
    again = CountingEngine(engine)
    assert spectra(modules, probes, engine=again, cache=cache).ok.all() and again.measured == 1


def test_the_folder_stays_within_its_bound(tmp_path):
    cache = SpectrumCache(tmp_path / "cache", max_bytes=60_000)
    rows = np.ones((101, 56), np.int64)
    for i in range(12):
        cache.put(f"{i:064x}", "probes", rows)
        os.utime(cache._path(cache.key(f"{i:064x}", "probes")), (1000 + i, 1000 + i))
    cache.prune()
    assert cache.size() <= 60_000
    assert cache.get(f"{11:064x}", "probes", 100) is not None      # the most recent stays
    assert cache.get(f"{0:064x}", "probes", 100) is None           # the oldest went
    with pytest.raises(ValueError):
        SpectrumCache(tmp_path / "x", max_bytes=0)


def test_environment_turns_it_off(monkeypatch, tmp_path):
    monkeypatch.setenv("BPQ_NO_CACHE", "1")
    assert not cache_enabled() and default_cache() is None
    monkeypatch.setenv("BPQ_NO_CACHE", "0")
    monkeypatch.setenv("BPQ_CACHE_DIR", str(tmp_path / "here"))
    assert default_cache().directory == tmp_path / "here"


def test_processes_share_the_cache_and_the_cli_can_skip_it(tmp_path):
    env = dict(os.environ, BPQ_NO_CACHE="0", BPQ_CACHE_DIR=str(tmp_path / "cache"))
    program = EXAMPLES / "matmul.c"

    def spectrum(*extra):
        return subprocess.run([sys.executable, "-m", "behavioral_pq", "spectrum", program, "--json", *extra],
                              capture_output=True, text=True, timeout=300, env=env)

    together = [subprocess.Popen([sys.executable, "-m", "behavioral_pq", "spectrum", str(program), "--json"],
                                 stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [json.loads(p.communicate(timeout=300)[0])["spectrum"] for p in together]
    assert outputs[0] == outputs[1]
    entries = list((tmp_path / "cache").glob("??/*.npy"))
    assert len(entries) == 1
    stamp = entries[0].stat().st_mtime_ns
    assert json.loads(spectrum().stdout)["spectrum"] == outputs[0]
    os.utime(entries[0], ns=(stamp - 10**9, stamp - 10**9))
    skipped = spectrum("--no-cache")
    assert json.loads(skipped.stdout)["spectrum"] == outputs[0]
    assert entries[0].stat().st_mtime_ns == stamp - 10**9          # --no-cache neither read nor wrote it


# -- the folder is not trusted: links, FIFOs, empty and oversized entries

ROWS = np.arange(3 * 56, dtype=np.int64).reshape(3, 56)   # (P + 1, 56) rows of two probes


def entry_of(cache, sha):
    return cache._path(cache.key(sha, "probes"))


def test_an_empty_or_short_entry_is_dropped_and_measured_again(engine, modules, tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    probes = random_probes(2, 2, seed=0)
    expected = spectra(modules[:1], probes, engine=engine, cache=cache).spectra
    (entry,) = (tmp_path / "cache").glob("??/*.npy")
    whole = entry.read_bytes()
    for content in (b"", whole[:200]):
        entry.write_bytes(content)
        counting = CountingEngine(engine)
        for _ in range(2):   # measured again once, then read from the rewritten entry
            np.testing.assert_array_equal(spectra(modules[:1], probes, engine=counting, cache=cache).spectra,
                                          expected)
        assert counting.measured == 1
        assert entry.read_bytes() == whole


def test_an_entry_that_is_a_link_is_neither_read_through_nor_touched(tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    cache.put("a" * 64, "probes", ROWS)
    entry = entry_of(cache, "a" * 64)
    poison = tmp_path / "poison.npy"
    np.save(poison, np.full((3, 56), 7, np.int32))
    os.utime(poison, (1000, 1000))
    entry.unlink()
    entry.symlink_to(poison)
    assert cache.get("a" * 64, "probes", 2) is None
    assert not entry.is_symlink() and not entry.exists()            # the link went, not its target
    assert poison.stat().st_mtime == 1000 and np.load(poison)[0, 0] == 7
    cache.put("a" * 64, "probes", ROWS)
    np.testing.assert_array_equal(cache.get("a" * 64, "probes", 2), ROWS)


def test_a_subfolder_that_is_a_link_is_not_read_nor_written_through(tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    key = cache.key("b" * 64, "probes")
    outside = tmp_path / "outside"
    outside.mkdir()
    np.save(outside / f"{key}.npy", np.full((3, 56), 7, np.int32))   # a poisoned entry behind the link
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / key[:2]).symlink_to(outside)
    assert cache.get("b" * 64, "probes", 2) is None
    writers = [threading.Thread(target=cache.put, args=("b" * 64, "probes", ROWS)) for _ in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert os.listdir(outside) == [f"{key}.npy"] and np.load(outside / f"{key}.npy")[0, 0] == 7
    assert (tmp_path / "cache" / key[:2]).is_dir() and not (tmp_path / "cache" / key[:2]).is_symlink()
    assert os.listdir(tmp_path / "cache" / key[:2]) == [f"{key}.npy"]   # one entry, no temporaries left
    np.testing.assert_array_equal(cache.get("b" * 64, "probes", 2), ROWS)


def test_pruning_does_not_follow_a_linked_subfolder(tmp_path):
    cache = SpectrumCache(tmp_path / "cache", max_bytes=1 << 20)
    cache.put("c" * 64, "probes", ROWS)
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(3):
        np.save(outside / f"{i:064x}.npy", np.zeros((3, 56), np.int32))
    (tmp_path / "cache" / "zz").symlink_to(outside)
    assert cache.size() == entry_of(cache, "c" * 64).stat().st_size
    assert SpectrumCache(tmp_path / "cache", max_bytes=1).prune() == 1
    assert not entry_of(cache, "c" * 64).exists()
    assert len(os.listdir(outside)) == 3


@pytest.mark.timeout(20)
def test_an_entry_that_is_a_fifo_does_not_hang_and_is_dropped(tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    cache.put("d" * 64, "probes", ROWS)
    entry = entry_of(cache, "d" * 64)
    entry.unlink()
    os.mkfifo(entry)
    assert cache.get("d" * 64, "probes", 2) is None
    assert not entry.exists()


def test_an_oversized_entry_is_dropped_without_being_read(tmp_path):
    cache = SpectrumCache(tmp_path / "cache")
    cache.put("e" * 64, "probes", ROWS)
    entry = entry_of(cache, "e" * 64)
    with open(entry, "wb") as f:   # a valid header for 64 MiB of rows, sparse on disk
        np.lib.format.write_array_header_1_0(f, {"descr": "<i4", "fortran_order": False, "shape": (300_000, 56)})
        f.truncate(f.tell() + 300_000 * 56 * 4)
    tracemalloc.start()
    try:
        assert cache.get("e" * 64, "probes", 2) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert not entry.exists()
