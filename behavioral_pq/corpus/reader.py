"""Reading a corpus store: records with all their sources, labels, spectra, splits and a summary."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from behavioral_pq.core.catalog import PASSES
from behavioral_pq.core.module import Module
from behavioral_pq.corpus.buckets import (BUCKET_NAMES, KINDS, PROJECT_PREFIX, bucket_counts, program_kind,
                                         size_bucket)
from behavioral_pq.corpus.store import CorpusStore
from behavioral_pq.embedding.probes import load_probes
from behavioral_pq.embedding.spectrum import REACTIONS, as_reaction, log_relative
from behavioral_pq.errors import CorpusError


class Corpus:
    """Read access to a corpus store.

    Example::

        corpus = Corpus("store/")
        len(corpus)                      # distinct modules
        corpus.records()                 # one row per module, with every source that produced it
        shas, values = corpus.spectra()  # float32 (N, P, 56) for the default probe set
    """

    def __init__(self, path: os.PathLike):
        self.store = CorpusStore(path)
        self.path = self.store.path

    def __len__(self) -> int:
        return len(self.store.keys("modules"))

    def __repr__(self) -> str:
        return f"Corpus({str(self.path)!r})"

    def inputs(self, columns: Optional[Sequence[str]] = None) -> pa.Table:
        """One row per input item (``ok`` or ``failed``, with the error)."""
        return self.store.read("inputs", columns)

    def modules(self, columns: Sequence[str] = ("sha256", "instruction_count", "autophase", "instcount")) -> pa.Table:
        """One row per distinct prepared module (add ``"bitcode"`` to ``columns`` for the bitcode)."""
        return self.store.read("modules", list(columns))

    def labels(self, *, include_failed: bool = False) -> pa.Table:
        """Label rows (sha256, pass_counts[124], best_passes, oz_count, o3_count, oz_benefit, status, error)."""
        table = self.store.read("labels")
        if not include_failed:
            table = table.filter(pc.equal(table.column("status"), "ok"))
        return table

    def records(self, columns: Sequence[str] = ("sha256", "instruction_count")) -> pa.Table:
        """One row per module with ``sources``, ``origins`` and ``groups``: every input that produced it."""
        sources: Dict[str, List[str]] = defaultdict(list)
        origins: Dict[str, set] = defaultdict(set)
        groups: Dict[str, set] = defaultdict(set)
        for batch in self.store.iter_batches("inputs", ["sha256", "sources", "origin", "group", "status"]):
            for sha, src, origin, group, status in zip(*(c.to_pylist() for c in batch.columns)):
                if status == "ok":
                    sources[sha].extend(src)
                    origins[sha].add(origin)
                    groups[sha].add(f"{origin}:{group}")
        table = self.modules(columns)
        shas = table.column("sha256").to_pylist()
        return (table.append_column("sources", pa.array([sources[s] for s in shas], pa.list_(pa.string())))
                .append_column("origins", pa.array([sorted(origins[s]) for s in shas], pa.list_(pa.string())))
                .append_column("groups", pa.array([sorted(groups[s]) for s in shas], pa.list_(pa.string()))))

    def failures(self) -> List[dict]:
        """Every failed row with its error: inputs (sources, stage), labels and spectra (module hash), as dicts
        with ``table``, ``sources``, ``sha256``, ``stage``, ``error_kind`` and ``error``."""
        def failed(table: str, columns: Sequence[str], **where) -> Iterator[dict]:
            for batch in self.store.iter_batches(table, [*columns, "error_kind", "error", "status"], **where):
                for row in batch.to_pylist():
                    if row["status"] != "ok":
                        yield {"table": table, "sources": row.get("sources") or [], "sha256": row.get("sha256"),
                               "stage": row.get("stage"), "error_kind": row["error_kind"], "error": row["error"]}

        out = list(failed("inputs", ["sources", "stage"]))
        out += failed("labels", ["sha256"])
        for probe_set in self.store.probe_sets():
            out += failed("spectra", ["sha256"], probe_set=probe_set)
        return out

    def program_kinds(self) -> Dict[str, str]:
        """Module hash -> ``"small"`` or ``"real"`` (see :mod:`behavioral_pq.corpus.buckets`)."""
        origins: Dict[str, set] = defaultdict(set)
        for batch in self.store.iter_batches("inputs", ["sha256", "origin", "status"]):
            for sha, origin, status in zip(*(c.to_pylist() for c in batch.columns)):
                if status == "ok":
                    origins[sha].add(origin)
        return {sha: program_kind(o) for sha, o in origins.items()}

    def projects(self) -> Dict[str, dict]:
        """Per real-program project (origin ``project:NAME``): inputs, failed inputs, distinct modules, modules
        linked from several units (whole programs), their splits, and the modules' instruction-count median and
        maximum."""
        splits = self.store.splits()
        sizes = dict(zip(*self.modules(["sha256", "instruction_count"]).to_pydict().values()))
        rows: Dict[str, dict] = {}
        table = self.store.read("inputs", ["origin", "status", "sha256", "sources"]).to_pydict()
        for origin, status, sha, sources in zip(table["origin"], table["status"], table["sha256"], table["sources"]):
            if not origin.startswith(PROJECT_PREFIX):
                continue
            row = rows.setdefault(origin[len(PROJECT_PREFIX):], {"inputs": 0, "failed": 0, "modules": set(),
                                                                  "linked": set()})
            row["inputs"] += 1
            if status != "ok":
                row["failed"] += 1
                continue
            row["modules"].add(sha)
            if len(sources) > 1:
                row["linked"].add(sha)
        out = {}
        for name in sorted(rows):
            row = rows[name]
            counts = np.array([sizes[s] for s in row["modules"] if s in sizes], dtype=np.int64)
            out[name] = {"inputs": row["inputs"], "failed": row["failed"], "modules": len(row["modules"]),
                         "linked_programs": len(row["linked"]),
                         "splits": sorted({splits[s] for s in row["modules"] if s in splits}),
                         "instructions_median": float(np.median(counts)) if len(counts) else 0.0,
                         "instructions_max": int(counts.max()) if len(counts) else 0}
        return out

    def narrow(self, shas: Sequence[str], *, kind: Optional[str] = None,
               max_instructions: Optional[int] = None) -> List[str]:
        """The hashes of ``shas`` (order kept) of programs of ``kind`` ("small" or "real"; None: any) and of at
        most ``max_instructions`` instructions (None: any size)."""
        if kind is not None:
            kinds = self.program_kinds()
            shas = [s for s in shas if kinds.get(s) == kind]
        if max_instructions is not None:
            sizes = dict(zip(*self.modules(["sha256", "instruction_count"]).to_pydict().values()))
            shas = [s for s in shas if sizes.get(s, 0) <= max_instructions]
        return list(shas)

    def iter_modules(self, batch_size: int = 256, only: Optional[set] = None) -> Iterator["Module"]:
        """Stream the stored modules as :class:`~behavioral_pq.Module` objects (memory: one batch)."""

        for batch in self.store.iter_batches("modules", ["sha256", "bitcode"], batch_size=batch_size):
            for sha, bitcode in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                if only is None or sha in only:
                    yield Module(bitcode, name=sha[:12])

    def iter_spectra(self, probes=None, *, shas: Optional[Iterable[str]] = None, batch_size: int = 1024,
                     reaction: str = "log-relative") -> Iterator[Tuple[List[str], np.ndarray]]:
        """Stream stored spectra for a probe set in store order: (module hashes, float32 (n, P, 56)) per batch;
        failed modules are left out. ``reaction="absolute"`` gives ``h_opt - h_orig`` instead (an ablation),
        ``"log-relative+module"`` one more row per module, its own ``log1p(h_orig)`` (n, P + 1, 56).

        Memory: one batch of spectra plus the modules' original Autophase rows (56 int32 per module), never all
        spectra at once.

        Raises:
            CorpusError: no spectra stored for that probe set (run ``bpq corpus spectra`` first).
        """

        if reaction not in REACTIONS:
            raise ValueError(f"reaction must be one of {REACTIONS}, got {reaction!r}")
        probe_set = load_probes(probes)
        if probe_set.hash not in self.store.probe_sets():
            raise CorpusError(f"{self.path}: no spectra for probe set {probe_set.hash[:12]} ({probe_set.name}); "
                              f"run: bpq corpus spectra {self.path} --probes ...")
        wanted = set(shas) if shas is not None else None
        before: Dict[str, np.ndarray] = {}
        for batch in self.store.iter_batches("modules", ["sha256", "autophase"]):
            for sha, row in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                if wanted is None or sha in wanted:
                    if row is None or len(row) != 56:
                        raise CorpusError(f"{self.path}: module {sha[:12]} has {0 if row is None else len(row)} "
                                          "Autophase values, not 56 (a corrupt modules shard)")
                    before[sha] = np.asarray(row, dtype=np.int32)
        p = probe_set.num_probes
        for batch in self.store.iter_batches("spectra", ["sha256", "status", "autophase_after"],
                                             probe_set=probe_set.hash, batch_size=batch_size):
            order, after = [], []
            for sha, status, blob in zip(*(c.to_pylist() for c in batch.columns)):
                if status == "ok" and sha in before:
                    if blob is None or len(blob) != p * 56 * 4:
                        raise CorpusError(f"{self.path}: the stored spectrum of module {sha[:12]} holds "
                                          f"{0 if blob is None else len(blob)} bytes, {p} probes take {p * 56 * 4} "
                                          f"(a corrupt spectra shard of probe set {probe_set.hash[:12]})")
                    order.append(sha)
                    after.append(np.frombuffer(blob, dtype="<i4").reshape(p, 56))
            if order:
                original = np.stack([before[s] for s in order]).astype(np.int64)[:, None, :]   # (n, 1, 56)
                after = np.stack(after)
                if reaction == "absolute":      # exact from the integer counts
                    yield order, (np.maximum(after, 0) - np.maximum(original, 0)).astype(np.float32)
                else:
                    yield order, as_reaction(original, log_relative(original, after), reaction)

    def spectra(self, probes=None, *, shas: Optional[Sequence[str]] = None) -> Tuple[List[str], np.ndarray]:
        """Stored spectra for a probe set: (module hashes, float32 (N, P, 56)), all in memory, in the order of
        ``shas`` (or sorted); failed modules are left out. See :meth:`iter_spectra` for streaming.

        Raises:
            CorpusError: no spectra stored for that probe set (run ``bpq corpus spectra`` first).
        """

        probe_set = load_probes(probes)
        found: Dict[str, np.ndarray] = {}
        for batch_shas, values in self.iter_spectra(probe_set, shas=shas):
            found.update(zip(batch_shas, values))
        order = [s for s in (list(shas) if shas is not None else sorted(found)) if s in found]
        if not order:
            return [], np.zeros((0, probe_set.num_probes, 56), np.float32)
        return order, np.stack([found[s] for s in order])

    def split(self, name: str) -> List[str]:
        """Module hashes assigned to split ``name`` by the last ``bpq corpus split``."""
        splits = self.store.splits()
        if not splits:
            raise CorpusError(f"{self.path}: not split yet (run: bpq corpus split {self.path})")
        chosen = sorted(s for s, n in splits.items() if n == name)
        if not chosen and name not in set(splits.values()):
            raise CorpusError(f"{self.path}: no split named {name!r} (have {sorted(set(splits.values()))})")
        return chosen

    def split_groups(self) -> Dict[str, str]:
        """Module hash -> its split group (``origin:group`` of its program, groups that share a module merged):
        what ``bpq corpus split`` assigns as one, so the unit of grouped cross-validation; empty if never split."""
        return self.store.splits("group")

    def pretraining(self) -> List[str]:
        """Hashes of the pretraining corpus: every module except the labelled (downstream) modules of the valid
        and test splits, so that nothing evaluated downstream is seen in pretraining or probe search.
        An unsplit store gives every module."""
        everything = sorted(self.store.keys("modules"))
        splits = self.store.splits()
        if not splits:
            return everything
        labelled = set(self.labels().column("sha256").to_pylist()) if self.store.keys("labels") else set()
        held = {s for s in labelled if splits.get(s) in ("valid", "test")}
        return [s for s in everything if s not in held]

    def info(self, *, verify: bool = False) -> dict:
        """Counts, size distribution, label distribution, failures, splits and spectra of the store."""

        manifest = self.store.refresh()
        inputs = self.store.read("inputs", ["status", "stage", "error_kind", "origin", "sha256", "sources"])
        status = inputs.column("status").to_pylist()
        linked = [sha for sha, st, sources in zip(inputs.column("sha256").to_pylist(), status,
                                                  inputs.column("sources").to_pylist()) if st == "ok" and len(sources) > 1]
        failures = Counter(f"{st}:{kind}" for s, st, kind in zip(status, inputs.column("stage").to_pylist(),
                                                                inputs.column("error_kind").to_pylist())
                           if s != "ok")
        origins = Counter(inputs.column("origin").to_pylist())
        modules = self.store.read("modules", ["sha256", "instruction_count"])
        sizes = np.array(modules.column("instruction_count").to_pylist(), dtype=np.int64)
        ok_inputs = sum(1 for s in status if s == "ok")
        info = {
            "path": str(self.path), "llvm_version": manifest["llvm_version"],
            "catalog_version": manifest["catalog_version"],
            "inputs": {"total": len(status), "ok": ok_inputs, "failed": len(status) - ok_inputs,
                       "by_origin": dict(origins.most_common())},
            "modules": len(sizes), "duplicates": ok_inputs - len(sizes),
            "linked_modules": len(set(linked)),
            "failures": dict(failures.most_common()),
            "instruction_count": _distribution(sizes),
            "by_size": bucket_counts(sizes),
            "by_kind": _by_kind(modules.column("sha256").to_pylist(), sizes, self.program_kinds()),
            "shards": len(manifest["shards"]),
            "bytes": sum(s["bytes"] for s in manifest["shards"]),
        }
        labels = self.store.read("labels", ["status", "error_kind", "best_passes", "pass_counts", "oz_benefit"])
        lstatus = labels.column("status").to_pylist()
        ok = [i for i, s in enumerate(lstatus) if s == "ok"]
        label_info = {"labelled": len(ok), "failed": len(lstatus) - len(ok),
                      "failures": dict(Counter(k for s, k in zip(lstatus, labels.column("error_kind").to_pylist())
                                               if s != "ok"))}
        if ok:
            all_best = labels.column("best_passes").to_pylist()
            best = [all_best[i] for i in ok]
            in_set = Counter(p for b in best for p in b)
            sole = Counter(b[0] for b in best if len(b) == 1)
            benefit = np.array(labels.column("oz_benefit").to_pylist(), dtype=float)[ok]
            label_info.update({
                "tie_rate": float(np.mean([len(b) > 1 for b in best])),
                "mean_best_set_size": float(np.mean([len(b) for b in best])),
                "best_pass_in_set": {PASSES[p].flag: round(n / len(ok), 4) for p, n in in_set.most_common(10)},
                "best_pass_sole": {PASSES[p].flag: round(n / len(ok), 4) for p, n in sole.most_common(5)},
                "oz_benefit": _distribution(benefit),
            })
        info["labels"] = label_info
        info["spectra"] = {h[:12]: len(self.store.keys("spectra", probe_set=h)) for h in self.store.probe_sets()}
        kinds = self.program_kinds()
        health = {}
        for h in self.store.probe_sets():  # per probe set and kind: measured, measured without a crashing pass, failed
            rows = self.store.read("spectra", ["sha256", "status", "error_kind"], probe_set=h).to_pydict()
            counts: Dict[str, Counter] = {}
            for sha, st, kind in zip(rows["sha256"], rows["status"], rows["error_kind"]):
                outcome = "failed" if st != "ok" else "degraded" if kind == "degraded" else "ok"
                counts.setdefault(kinds.get(sha, "small"), Counter())[outcome] += 1
            health[h[:12]] = {k: dict(v) for k, v in counts.items()}
        info["spectra_outcomes"] = health
        splits = manifest.get("splits")
        info["splits"] = {k: splits[k] for k in ("seed", "fractions", "counts", "groups") if k in splits} \
            if splits else None
        if verify:
            info["problems"] = self.store.verify()
        return info


def _distribution(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"count": 0}
    q = np.percentile(values, [0, 10, 50, 90, 100])
    out = {"count": int(len(values)), "mean": float(np.mean(values)), "min": q[0], "p10": q[1], "median": q[2],
           "p90": q[3], "max": q[4]}
    return {k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


def _by_kind(shas: Sequence[str], sizes: np.ndarray, kinds: Dict[str, str]) -> Dict[str, Dict[str, int]]:
    """kind -> size bucket -> modules (kinds with no module left out)."""
    table = {kind: dict.fromkeys(BUCKET_NAMES, 0) for kind in KINDS}
    for sha, size in zip(shas, sizes):
        table[kinds.get(sha, "small")][size_bucket(int(size))] += 1
    return {kind: row for kind, row in table.items() if sum(row.values())}
