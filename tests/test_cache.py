"""The on-disk spectrum cache: keyed by content, shared across processes, bounded, and off when asked."""

import json
import os
import subprocess
import sys

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
