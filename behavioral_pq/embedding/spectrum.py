"""The behavioral spectrum: how a module's Autophase features react to each probe."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from behavioral_pq.core.catalog import sequence_pipeline
from behavioral_pq.core.engine import Engine, default_engine
from behavioral_pq.core.module import Module, ModuleLike, load_module
from behavioral_pq.embedding.cache import SpectrumCache, default_cache
from behavioral_pq.embedding.probes import ProbeSet, ProbeTrie, load_probes
from behavioral_pq.embedding.sampling import SAMPLE_BUDGET, sample_functions
from behavioral_pq.errors import BPQError, DeadlineError, PassCrashError, PassTimeoutError

logger = logging.getLogger(__name__)

ProbesLike = Union[ProbeSet, str, None]


def log_relative(original: np.ndarray, optimized: np.ndarray) -> np.ndarray:
    """Reaction of features to optimization: ``d[..., j] = log1p(max(0, h_opt[..., j])) - log1p(max(0, h_orig[j]))``.

    Args:
        original: Autophase of the module as given, shape (..., 56) (broadcast against ``optimized``).
        optimized: Autophase after each probe, shape (..., P, 56).
    Returns:
        float32 with the broadcast shape, computed in float64.
    """
    original = np.asarray(original, dtype=np.float64)
    optimized = np.asarray(optimized, dtype=np.float64)
    if original.shape[-1] != optimized.shape[-1]:
        raise ValueError(f"feature dimensions differ: {original.shape} vs {optimized.shape}")
    return (np.log1p(np.maximum(0.0, optimized)) - np.log1p(np.maximum(0.0, original))).astype(np.float32)


#: How a spectrum reaches the quantizer: ``log-relative`` (the method: P rows), ``absolute`` (``h_opt - h_orig``, an
#: ablation: P rows) or ``log-relative+module`` (the P log-relative rows and one more, the module's own Autophase as
#: ``log1p(h_orig)``: the absolute size and shape the log-relative rows drop, read by the encoder as one more token).
REACTIONS = ("log-relative", "absolute", "log-relative+module")


def reaction_positions(num_probes: int, reaction: str) -> int:
    """Rows (encoder positions without [CLS]) of a spectrum of ``num_probes`` probes expressed as ``reaction``."""
    if reaction not in REACTIONS:
        raise ValueError(f"reaction must be one of {REACTIONS}, got {reaction!r}")
    return num_probes + (reaction == "log-relative+module")


def module_row(original: np.ndarray) -> np.ndarray:
    """The module token's row of ``log-relative+module``: ``log1p(max(0, h_orig))``, float32, shape of ``original``."""
    return np.log1p(np.maximum(0.0, np.asarray(original, dtype=np.float64))).astype(np.float32)


def absolute_from_log_relative(original: np.ndarray, spectra: np.ndarray) -> np.ndarray:
    """Absolute reactions ``max(0, h_opt) - max(0, h_orig)`` recovered from log-relative ones (exact up to float32
    rounding, since ``log1p`` is invertible).

    Args:
        original: Autophase before, shape (..., 56) (broadcast against ``spectra``, e.g. (N, 1, 56)).
        spectra: log-relative reactions, float32 (..., P, 56).
    Returns:
        float32 with the broadcast shape.
    """
    base = np.log1p(np.maximum(0.0, np.asarray(original, dtype=np.float64)))
    optimized = np.expm1(np.asarray(spectra, dtype=np.float64) + base)
    return np.round(optimized - np.expm1(base)).astype(np.float32)


def as_reaction(original: np.ndarray, spectra: np.ndarray, reaction: str) -> np.ndarray:
    """Log-relative ``spectra``, float32 (N, P, 56), expressed as ``reaction`` (one of :data:`REACTIONS`):
    float32 (N, P, 56), or (N, P + 1, 56) for ``log-relative+module``. ``original``: (N, 1, 56)."""
    if reaction == "log-relative":
        return np.asarray(spectra, dtype=np.float32)
    if reaction == "absolute":
        return absolute_from_log_relative(original, spectra)
    if reaction == "log-relative+module":
        spectra = np.asarray(spectra, dtype=np.float32)
        module = np.broadcast_to(module_row(original), spectra.shape[:-2] + (1, spectra.shape[-1]))
        return np.concatenate([spectra, module], axis=-2)
    raise ValueError(f"reaction must be one of {REACTIONS}, got {reaction!r}")


@dataclass(frozen=True)
class Degradation:
    """A probe measured without one of its passes, because that pass crashed LLVM on the module (an LLVM bug the
    module meets): ``probe`` index, the ``removed`` flag and its ``position`` in the probe; ``removed="*"`` (position
    -1) when the whole probe was left out (a crash that did not happen again on its own)."""

    probe: int
    removed: str
    position: int


#: How many crashing passes a module may lose (over all its probes) before its spectrum counts as failed.
MAX_REMOVED_PASSES = 4


@dataclass(frozen=True)
class SpectrumBatch:
    """Result of :func:`spectra`.

    Attributes:
        spectra: float32 (N, P, 56); NaN for modules that failed.
        autophase: int64 (N, P + 1, 56); row 0 the module as given, row i + 1 after probe i; 0 if failed.
        errors: N entries: None, or the module's error (InvalidIRError, PassCrashError, PassTimeoutError).
        probe_set_hash: hash of the probe set measured with.
        degraded: N tuples of :class:`Degradation`: the probes measured without a pass that crashed LLVM on
            that module (empty for a module measured as the probe set says).
        sampled: N entries: None for a module measured whole, else the share of its instructions in the
            function sample it was measured on (large-module mode; its ``autophase`` rows are then the sample's
            divided by that share: estimates of the module's totals, from which its spectrum is computed).
    """

    spectra: np.ndarray
    autophase: np.ndarray
    errors: Tuple[Optional[BPQError], ...]
    probe_set_hash: str
    degraded: Tuple[Tuple[Degradation, ...], ...] = ()
    sampled: Tuple[Optional[float], ...] = ()

    @property
    def ok(self) -> np.ndarray:
        """bool (N,): True where the spectrum was measured."""
        return np.array([e is None for e in self.errors], dtype=bool)

    def raise_first(self) -> None:
        """Raise the first module error, if any."""
        for error in self.errors:
            if error is not None:
                raise error


def spectra(modules: Sequence[ModuleLike], probes: ProbesLike = None, *, engine: Optional[Engine] = None,
            workers: Optional[int] = None, progress: Union[bool, Callable[[int, int], None]] = False,
            cache: Union[bool, SpectrumCache] = True, sample_above: Optional[int] = None,
            deadline: Optional[float] = None) -> SpectrumBatch:
    """Spectra of many modules; a module that fails is reported in ``errors`` and the rest complete.

    Args:
        modules: Modules or anything :func:`load_module` accepts (loaded first; a load failure raises).
        probes: a ProbeSet, a path to one, or None for the package default.
        engine: the engine to run on; ``workers`` makes a temporary one with that many processes instead.
        progress: True: show a progress bar on stderr; or a callable, called with (nodes measured, nodes in
            all) as the probes' prefix trees are measured.
        cache: True: the on-disk spectrum cache (:mod:`behavioral_pq.embedding.cache`; off when
            ``BPQ_NO_CACHE`` is set), False: measure everything, or a :class:`SpectrumCache`. Only modules
            measured without error or degradation are cached.
        sample_above: large-module mode: a module of more IR instructions is measured on a deterministic
            sample of its functions (:mod:`behavioral_pq.embedding.sampling`; ``sampled`` says which) of at
            most ``min(SAMPLE_BUDGET, sample_above // 2)`` instructions. None (the default) measures every
            module whole.
        deadline: a ``time.monotonic()`` value: modules not measured by then get a
            :class:`~behavioral_pq.errors.DeadlineError` (and are not cached).

    A probe that crashes LLVM on a module does not cost the module its spectrum: the pass responsible is found
    by bisecting the probe's prefixes, the probe is measured without it, and ``degraded`` says so (at most
    :data:`MAX_REMOVED_PASSES` passes per module; beyond that, or for a timeout, the module's error stays).
    """
    probe_set = load_probes(probes)
    store = default_cache() if cache is True else (cache or None)
    own_engine = engine is None and workers is not None
    engine = engine or (Engine(workers) if own_engine else default_engine())
    try:
        loaded = [load_module(m, engine=engine) for m in modules]
        sampled: List[Optional[float]] = [None] * len(loaded)
        if sample_above is not None:
            for i, module in enumerate(loaded):
                if module.instruction_count > sample_above:
                    try:
                        sample = sample_functions(module, budget=min(SAMPLE_BUDGET, max(1, sample_above // 2)))
                    except BPQError as exc:   # llvm-extract failed: measure the module whole
                        logger.warning("%s: no function sample (%s); measuring it whole", module.name, exc)
                        continue
                    if sample.functions < sample.total_functions:
                        loaded[i], sampled[i] = sample.module, sample.fraction
        features = np.zeros((len(loaded), probe_set.num_probes + 1, 56), np.int64)
        errors: List[Optional[BPQError]] = [None] * len(loaded)
        degraded: List[Tuple[Degradation, ...]] = [()] * len(loaded)
        todo = []
        for i, module in enumerate(loaded):
            rows = store.get(module.sha256, probe_set.hash, probe_set.num_probes) if store else None
            if rows is None:
                todo.append(i)
            else:
                features[i] = rows
        bar = None
        nodes = len(todo) * (len(probe_set.trie().parents) + 1)
        tick = None
        if callable(progress):
            done = [0]

            def tick(count: int) -> None:
                done[0] += count
                progress(done[0], nodes)
        elif progress and todo:
            from tqdm.auto import tqdm

            bar = tqdm(total=nodes, unit="node", desc="spectra", leave=False)
            tick = bar.update
        try:
            if todo:
                measured, found = _measure(engine, [loaded[i] for i in todo], probe_set, progress=tick,
                                           deadline=deadline)
                for k, i in enumerate(todo):
                    features[i], errors[i] = measured[k], found[k]
                    if isinstance(found[k], PassCrashError) and found[k].pipeline_index is not None:
                        repaired = _without_crashing_passes(engine, loaded[i], probe_set, found[k])
                        if repaired is not None:
                            features[i], degraded[i], errors[i] = repaired[0], repaired[1], None
                    elif store and found[k] is None:
                        store.put(loaded[i].sha256, probe_set.hash, measured[k])
        finally:
            if bar:
                bar.close()
    finally:
        if own_engine:
            engine.close()
    for i, share in enumerate(sampled):
        if share is not None:  # module totals estimated from the sample: log1p makes reactions depend on scale
            features[i] = np.rint(features[i] / share).astype(np.int64)
    values = log_relative(features[:, :1, :], features[:, 1:, :])
    values[[e is not None for e in errors]] = np.nan
    return SpectrumBatch(values, features, tuple(errors), probe_set.hash, tuple(degraded), tuple(sampled))


def _measure(engine: Engine, modules: Sequence[Module], probe_set: ProbeSet,
             progress: Optional[Callable[[int], None]] = None, deadline: Optional[float] = None,
             ) -> Tuple[np.ndarray, List[Optional[BPQError]]]:
    """Autophase rows int64 (N, P + 1, 56) of ``modules`` (row 0 as given) and their errors, the probes run as a
    prefix tree (:meth:`ProbeSet.trie`). A module with a failed node is measured again probe by probe, so that
    its error names the probe (``PassCrashError.pipeline_index``) as the crash path expects; one cut by the
    ``deadline`` keeps its DeadlineError; but a module that ran past the engine's timeout once stops there:
    running its other probes, then each probe again, costs one timeout each (a 100,000-instruction function with
    ``BPQ_TIMEOUT=3`` ran into 28 of them, 85 s, where stopping at the first takes 7 s)."""
    trie = probe_set.trie()
    k = len(trie.parents) + 1                      # node 0 of each module: a no-op, the module as given
    edges = ["function(no-op-function)"] + [sequence_pipeline(e) for e in trie.edges]
    parents, all_edges, wanted = [], [], []
    for m in range(len(modules)):
        base = m * k
        parents += [-m - 1] + [base + 1 + p if p >= 0 else -m - 1 for p in trie.parents]
        all_edges += edges
        wanted += [True] + [False] * (k - 1)
        for node in trie.probe_nodes:
            wanted[base + 1 + node] = True
    values, _, node_errors = engine.autophase_tree([m.bitcode for m in modules], parents, all_edges, wanted=wanted,
                                                   names=[m.name for m in modules], progress=progress,
                                                   timeout_fails_root=True, deadline=deadline)
    rows = [0] + [1 + node for node in trie.probe_nodes]
    features = values.reshape(len(modules), k, -1)[:, rows, :]
    errors: List[Optional[BPQError]] = [None] * len(modules)
    for m, module in enumerate(modules):
        failed = [e for e in node_errors[m * k:(m + 1) * k] if e is not None]
        late = next((e for e in failed if isinstance(e, DeadlineError)), None)
        timeout = next((e for e in failed if isinstance(e, PassTimeoutError)), None)
        if late is not None:
            features[m], errors[m] = 0, late
        elif timeout is not None:
            node = timeout.pipeline_index - m * k - 1 if timeout.pipeline_index is not None else None
            features[m], errors[m] = 0, _timeout_error(module, trie, timeout, node, engine.timeout)
        elif failed:
            again, found = engine.autophase_after([module.bitcode], probe_set.pipelines(), names=[module.name])
            features[m], errors[m] = again[0], found[0]
    return features, errors


def _timeout_error(module: Module, trie: ProbeTrie, error: PassTimeoutError, node: Optional[int],
                   limit: float) -> PassTimeoutError:
    """The tree's timeout restated for the module, naming the first probe through the trie ``node`` that ran past
    ``limit`` seconds (``pipeline_index``; None when it was node -1, the module as given)."""
    probe = None
    for i, end in enumerate(trie.probe_nodes):
        n = end
        while n >= 0 and n != node:
            n = trie.parents[n]
        if node is not None and node >= 0 and n == node:
            probe = i
            break
    where = f"probe {probe}" if probe is not None else "measuring it"
    return PassTimeoutError(f"{module.name}: {where} ran past {limit:g} s on its {module.instruction_count} "
                            f"instructions and was killed (BPQ_TIMEOUT sets the limit per pipeline)",
                            module=module.name, pipeline=error.pipeline, pipeline_index=probe)


def _crashes(engine: Engine, module: Module, passes: Sequence[str]) -> bool:
    try:
        engine.run_pipeline(module.bitcode, sequence_pipeline(passes), name=module.name)
    except PassCrashError:
        return True
    return False


def _without_crashing_passes(engine: Engine, module: Module, probe_set: ProbeSet, error: PassCrashError
                             ) -> Optional[Tuple[np.ndarray, Tuple[Degradation, ...]]]:
    """Autophase rows (P + 1, 56) of ``module`` with each crashing pass taken out of its probe, and what was
    taken out; None when too many probes crash.

    The pass is found by bisecting the probe's prefixes. Whether LLVM crashes can depend on the worker's heap
    (pointer-keyed containers), so when the probe does not crash again on its own, the whole probe is left out
    (``removed="*"``, ``position=-1``: its row equals the module as given, a zero reaction)."""
    sequences = [list(s) for s in probe_set.sequences]
    removed: List[Degradation] = []
    while len(removed) < MAX_REMOVED_PASSES:
        probe = error.pipeline_index
        passes = sequences[probe]
        if passes and _crashes(engine, module, passes):
            low, high = 1, len(passes)          # the shortest crashing prefix has length in [low, high]
            while low < high:
                middle = (low + high) // 2
                if _crashes(engine, module, passes[:middle]):
                    high = middle
                else:
                    low = middle + 1
            removed.append(Degradation(probe, passes[low - 1], low - 1))
            sequences[probe] = passes[:low - 1] + passes[low:]
        else:
            removed.append(Degradation(probe, "*", -1))
            sequences[probe] = []
        logger.warning("%s: probe %d crashes LLVM; measured without %s", module.name, probe, removed[-1].removed)
        pipelines = [sequence_pipeline(s) if s else "function(no-op-function)" for s in sequences]
        rows, errors = engine.autophase_after([module.bitcode], pipelines, names=[module.name])
        if errors[0] is None:
            return rows[0], tuple(removed)
        if not isinstance(errors[0], PassCrashError) or errors[0].pipeline_index is None:
            return None
        error = errors[0]
    return None


def spectrum(module: ModuleLike, probes: ProbesLike = None, *, engine: Optional[Engine] = None,
             cache: Union[bool, SpectrumCache] = True, sample_above: Optional[int] = None) -> np.ndarray:
    """Spectrum of one module: float32 (P, 56), ``log_relative(autophase(module), autophase after probe i)``."""
    batch = spectra([module], probes, engine=engine, cache=cache, sample_above=sample_above)
    batch.raise_first()
    return batch.spectra[0]
