"""The corpus store: Parquet shards plus a JSON manifest in one directory.

Layout::

    STORE/manifest.json              format, LLVM version, catalog version, every shard with rows, bytes, sha256
    STORE/inputs/part-*.parquet      one row per input item (compiled or failed), keyed by the input key
    STORE/modules/part-*.parquet     one row per distinct prepared module, keyed by its bitcode sha256
    STORE/labels/part-*.parquet      per-pass instruction counts, best-pass set, -Oz/-O3 counts, keyed by sha256
    STORE/spectra/<hash>/part-*.parquet   Autophase after each probe of one probe set, keyed by sha256
    STORE/splits.parquet             sha256 -> split name (written by ``bpq corpus split``)

Shards are immutable and content-addressed by their keys. A shard becomes part of the store only when the
manifest lists it; the rename and the manifest update happen together under an exclusive ``flock``, and the
manifest is replaced atomically, so a killed writer leaves at most a temporary file behind and two writers never
lose each other's shards. Readers deduplicate by key (the first shard wins), so work done twice by two concurrent
builds is stored harmlessly and read once.

The folder is not trusted: before a shard's values are decoded, its columns are checked against its table's schema
and its Parquet metadata against its size (a few KB may not claim hundreds of MiB, see ``SHARD_EXPANSION``); a
writer refuses a store whose folders are links, and removes only the temporary files it names.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import stat
import time
import uuid
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from behavioral_pq.artifacts import LISTING_LIMIT, confined, read_json_bounded, sha256_file, write_json_atomic
from behavioral_pq.core._native_loader import LLVM_MAJOR, LLVM_VERSION
from behavioral_pq.core.catalog import CATALOG_VERSION
from behavioral_pq.errors import CorpusError

logger = logging.getLogger(__name__)

FORMAT = "bpq-corpus"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

INPUTS_SCHEMA = pa.schema([
    ("key", pa.string()),              # InputItem.key
    ("origin", pa.string()),
    ("group", pa.string()),
    ("sources", pa.list_(pa.string())),
    ("language", pa.string()),
    ("flags", pa.list_(pa.string())),
    ("status", pa.string()),           # "ok" or "failed"
    ("stage", pa.string()),            # where it failed: "compile", "prepare"; null when ok
    ("error_kind", pa.string()),       # exception class name
    ("error", pa.string()),
    ("sha256", pa.string()),           # prepared bitcode; null when failed
    ("seconds", pa.float32()),
])
MODULES_SCHEMA = pa.schema([
    ("sha256", pa.string()),
    ("instruction_count", pa.int64()),
    ("autophase", pa.list_(pa.int64())),   # 56 values, AUTOPHASE_FEATURES order
    ("instcount", pa.list_(pa.int64())),   # INSTCOUNT_FEATURES order
    ("bitcode", pa.binary()),              # prepared bitcode
])
LABELS_SCHEMA = pa.schema([
    ("sha256", pa.string()),
    ("status", pa.string()),               # "ok" or "failed"
    ("error_kind", pa.string()),
    ("error", pa.string()),
    ("pass_counts", pa.list_(pa.int64())), # 124: instruction count after catalog pass i alone
    ("best_passes", pa.list_(pa.int16())), # catalog indices reaching the smallest count
    ("oz_count", pa.int64()),
    ("o3_count", pa.int64()),
    ("oz_benefit", pa.float64()),          # (IC0 - IC_Oz) / IC0
])
SPECTRA_SCHEMA = pa.schema([
    ("sha256", pa.string()),
    ("status", pa.string()),
    ("error_kind", pa.string()),
    ("error", pa.string()),
    ("autophase_after", pa.binary()),      # int32 little-endian (P, 56): Autophase after each probe
])
SPLITS_SCHEMA = pa.schema([("sha256", pa.string()), ("group", pa.string()), ("split", pa.string())])
SCHEMAS = {"inputs": INPUTS_SCHEMA, "modules": MODULES_SCHEMA, "labels": LABELS_SCHEMA, "spectra": SPECTRA_SCHEMA}
KEYS = {"inputs": "key", "modules": "sha256", "labels": "sha256", "spectra": "sha256"}

#: Folders a writer puts files in: each must be a real folder, never a link (a link would send shards elsewhere).
FOLDERS = ("tmp", *SCHEMAS, "data-units")
#: What a shard may decompress to, from its Parquet metadata, before anything is read: at most this many times its
#: size on disk, or this floor for small shards. zstd gives 2-5x on bitcode and tens on the tables of counts; a
#: 10 KB shard holding one 512 MiB value of zeros claims 50,000x.
SHARD_EXPANSION = 1000
SHARD_EXPANSION_FLOOR = 64 << 20
#: A temporary file of a writer (append, write_splits, check_writable): ``tmp/w-<pid>-<12 hex>.parquet|.probe``.
_TEMPORARY = re.compile(r"w-(?P<pid>[0-9]+)-[0-9a-f]{12}\.(?:parquet|probe)")
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _same_type(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a column read back has the type written (list field names differ between Parquet writers)."""
    if pa.types.is_list(expected):
        return pa.types.is_list(found) and _same_type(found.value_type, expected.value_type)
    return found == expected


def check_shard_file(path: Path, shard: pq.ParquetFile, schema: pa.Schema, what: str) -> None:
    """CorpusError naming ``path`` when the Parquet file ``shard`` lacks a column of ``schema`` or has it with
    another type, or when its metadata says it decompresses to more than its size allows (see
    :data:`SHARD_EXPANSION`); only the footer is read."""
    found = shard.schema_arrow
    for field in schema:
        index = found.get_field_index(field.name)
        if index < 0:
            raise CorpusError(f"{path}: {what} of another schema (no column {field.name!r}; "
                              f"expected {', '.join(schema.names)})")
        if not _same_type(found.field(index).type, field.type):
            raise CorpusError(f"{path}: {what} of another schema (column {field.name!r} is "
                              f"{found.field(index).type}, expected {field.type})")
    metadata = shard.metadata
    expanded = sum(metadata.row_group(g).column(c).total_uncompressed_size
                   for g in range(metadata.num_row_groups) for c in range(metadata.num_columns))
    size = path.stat().st_size
    limit = max(SHARD_EXPANSION_FLOOR, SHARD_EXPANSION * size)
    if expanded > limit:
        raise CorpusError(f"{path}: {what} would decompress to {expanded} bytes from {size} (more than "
                          f"{limit}); refused")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CorpusStore:
    """A corpus directory (see the module docstring for the layout).

    Args:
        path: the store directory.
        create: make an empty store if there is none (otherwise a missing store raises CorpusError).

    Raises:
        CorpusError: no store there, an unreadable manifest, or (when writing) a store made with another LLVM
            major version.
    """

    def __init__(self, path: os.PathLike, *, create: bool = False):
        self.path = Path(path)
        self._verified: set = set()  # shards whose checksum was checked by this instance (shards are immutable)
        manifest = self.path / MANIFEST
        if not manifest.exists():
            if not create:
                raise CorpusError(f"{self.path}: not a corpus store (no {MANIFEST})")
            self._create()
        self.manifest = self._read_manifest()

    def _create(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with self._locked():
                if not (self.path / MANIFEST).exists():
                    write_json_atomic(self.path / MANIFEST, {
                        "format": FORMAT, "version": FORMAT_VERSION, "llvm_version": LLVM_VERSION,
                        "llvm_major": LLVM_MAJOR, "catalog_version": CATALOG_VERSION,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shards": [],
                        "splits": None, "sources": [],
                    })
        except OSError as exc:
            raise CorpusError(f"{self.path}: cannot create a corpus store ({exc.strerror or exc})") from None

    def _read_manifest(self) -> dict:
        path = self.path / MANIFEST
        data = read_json_bounded(path, limit=LISTING_LIMIT, what="manifest", error=CorpusError)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CorpusError(f"{path}: not a behavioral_pq corpus manifest")
        if data.get("version") != FORMAT_VERSION:
            raise CorpusError(f"{path}: store format {data.get('version')}, this version reads {FORMAT_VERSION}")
        return data

    def refresh(self) -> dict:
        """Re-read the manifest (other writers may have added shards)."""
        self.manifest = self._read_manifest()
        return self.manifest

    def check_writable(self) -> None:
        """Raise CorpusError if this store was made with another LLVM major version than the native core, if one
        of its folders is a link (or not a folder), or if its directory cannot be written (read-only file system,
        permissions, a full disk): a job learns that before it computes anything."""
        major = self.manifest.get("llvm_major")
        if major != LLVM_MAJOR:
            raise CorpusError(f"{self.path}: store built with LLVM {self.manifest.get('llvm_version')}, "
                              f"this build of behavioral_pq uses LLVM {LLVM_VERSION}; use a new store")
        self.check_folders()
        probe = self.path / "tmp" / f"w-{os.getpid()}-{uuid.uuid4().hex[:12]}.probe"
        try:
            probe.parent.mkdir(exist_ok=True)
            with open(probe, "wb") as f:
                f.write(b"\0" * 4096)
                f.flush()
                os.fsync(f.fileno())
            with self._locked():
                pass
        except OSError as exc:
            raise CorpusError(f"{self.path}: the store is not writable ({exc.strerror or exc}); "
                              "it is unchanged and still readable") from None
        finally:
            with contextlib.suppress(OSError):
                probe.unlink(missing_ok=True)

    def check_folders(self) -> None:
        """CorpusError naming the folder when one of the folders writers use (``tmp``, a table's, a probe set's
        under ``spectra``, ``data-units``) is a symbolic link or not a folder: shards and temporary files would
        be written, and temporary files removed, wherever it leads."""
        def check(path: Path) -> bool:
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise CorpusError(f"{path}: unreadable store folder ({exc.strerror or exc})") from None
            if stat.S_ISLNK(mode):
                raise CorpusError(f"{path}: a symbolic link where the store needs a real folder; refused")
            if not stat.S_ISDIR(mode):
                raise CorpusError(f"{path}: not a folder, where the store needs one; refused")
            return True

        for name in FOLDERS:
            if check(self.path / name) and name == "spectra":
                with os.scandir(self.path / name) as entries:
                    for entry in entries:
                        check(Path(entry.path))

    @contextlib.contextmanager
    def _locked(self):
        with open(self.path / ".lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def clean_temporary(self) -> int:
        """Remove temporary files left in ``tmp/`` by writers that no longer run; returns how many.

        Only names a writer gives (``w-<pid>-<12 hex>.parquet`` or ``.probe``) are removed, and only when that
        process is gone; ``tmp`` is opened without following a link (a link or a file there is left alone), and
        each name is removed in it, never through a link."""
        try:
            folder = os.open(self.path / "tmp", _FOLDER_FLAGS)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                logger.warning("%s: not a folder (a link or a file); no temporary file removed", self.path / "tmp")
                return 0
            raise CorpusError(f"{self.path / 'tmp'}: unreadable ({exc.strerror or exc})") from None
        removed = 0
        try:
            for name in os.listdir(folder):
                match = _TEMPORARY.fullmatch(name)
                if match is None or _pid_alive(int(match.group("pid"))):
                    continue
                try:
                    os.unlink(name, dir_fd=folder)
                except (FileNotFoundError, IsADirectoryError, PermissionError):
                    continue
                removed += 1
        finally:
            os.close(folder)
        return removed

    # -- writing -------------------------------------------------------------------------------------------
    def append(self, table: str, rows: pa.Table, *, probe_set: Optional[str] = None) -> Optional[dict]:
        """Write ``rows`` as one new shard of ``table`` and list it in the manifest; returns the shard entry.

        The shard is written and fsynced under ``tmp/`` first; then, under the store lock, it is renamed into
        place and the manifest is replaced. An empty table writes nothing.
        """
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}")
        if (table == "spectra") != (probe_set is not None):
            raise ValueError("spectra shards need a probe_set hash, other tables none")
        if rows.num_rows == 0:
            return None
        rows = rows.cast(SCHEMAS[table])
        name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"
        relative = Path(table, probe_set, name) if probe_set else Path(table, name)
        tmp = self.path / "tmp" / f"w-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"
        self.check_folders()
        try:
            tmp.parent.mkdir(exist_ok=True)
            pq.write_table(rows, tmp, compression="zstd", row_group_size=4096)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            entry = {"table": table, "path": str(relative), "rows": rows.num_rows, "bytes": tmp.stat().st_size,
                     "sha256": sha256_file(tmp), "probe_set": probe_set, "writer": os.getpid(),
                     "written": time.time()}
            with self._locked():
                manifest = self._read_manifest()
                (self.path / relative).parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, self.path / relative)
                manifest["shards"].append(entry)
                write_json_atomic(self.path / MANIFEST, manifest)
                self.manifest = manifest
        except OSError as exc:
            with contextlib.suppress(OSError):  # on a read-only file system even this fails
                tmp.unlink(missing_ok=True)
            raise CorpusError(f"{self.path}: cannot write a {table} shard ({exc.strerror or exc}); "
                              "the store is unchanged and still readable") from None
        return entry

    def update_manifest(self, **fields) -> None:
        """Set top-level manifest fields under the store lock (e.g. ``splits``)."""
        self._edit_manifest(lambda manifest: manifest.update(fields))

    def record_source(self, description: dict) -> None:
        """Append a description of a build (sources, options, versions) to the manifest's ``sources``."""
        self._edit_manifest(lambda manifest: manifest.setdefault("sources", []).append(description))

    def _edit_manifest(self, edit) -> None:
        try:
            with self._locked():
                manifest = self._read_manifest()
                edit(manifest)
                write_json_atomic(self.path / MANIFEST, manifest)
                self.manifest = manifest
        except OSError as exc:
            raise CorpusError(f"{self.path}: cannot update the manifest ({exc.strerror or exc}); "
                              "the store is unchanged and still readable") from None

    # -- reading -------------------------------------------------------------------------------------------
    def shards(self, table: str, probe_set: Optional[str] = None) -> List[dict]:
        """Manifest entries of one table (of one probe set for ``spectra``), oldest first."""
        return [s for s in self.manifest["shards"]
                if s["table"] == table and (table != "spectra" or s.get("probe_set") == probe_set)]

    def probe_sets(self) -> List[str]:
        """Hashes of the probe sets that have spectra in the store."""
        return sorted({s["probe_set"] for s in self.manifest["shards"] if s["table"] == "spectra"})

    def _open_shard(self, entry: dict, verify: bool) -> pq.ParquetFile:
        path = confined(self.path, entry["path"], CorpusError)
        try:
            size = path.stat().st_size
        except OSError:
            raise CorpusError(f"{path}: shard listed in the manifest is missing") from None
        if size != entry["bytes"]:
            raise CorpusError(f"{path}: shard is {size} bytes, the manifest says {entry['bytes']} (truncated?)")
        if verify and entry["path"] not in self._verified:
            if sha256_file(path) != entry["sha256"]:
                raise CorpusError(f"{path}: shard checksum does not match the manifest (corrupt)")
            self._verified.add(entry["path"])
        table = entry.get("table")
        if table not in SCHEMAS:
            raise CorpusError(f"{path}: the manifest lists it in an unknown table {str(table)[:40]!r}")
        try:
            shard = pq.ParquetFile(path)
            check_shard_file(path, shard, SCHEMAS[table], f"{table} shard")
        except (pa.ArrowException, OSError) as exc:
            raise CorpusError(f"{path}: unreadable shard ({exc})") from None
        if shard.metadata.num_rows != entry.get("rows"):
            raise CorpusError(f"{path}: shard holds {shard.metadata.num_rows} rows, the manifest says "
                              f"{entry.get('rows')}")
        return shard

    def read_shard(self, entry: dict, columns: Optional[Sequence[str]] = None, *, verify: bool = True) -> pa.Table:
        """One shard (a manifest entry) as a table, without deduplication."""
        try:
            return self._open_shard(entry, verify).read(columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise CorpusError(f"{self.path / entry['path']}: unreadable shard ({exc})") from None

    def iter_batches(self, table: str, columns: Optional[Sequence[str]] = None, *, probe_set: Optional[str] = None,
                     batch_size: int = 1024, verify: bool = True, dedupe: bool = True) -> Iterator[pa.RecordBatch]:
        """Stream a table shard by shard, each key once (memory: one batch plus the set of keys seen).

        Args:
            columns: columns to read (the key column is always read when deduplicating).
            verify: check each shard's sha256 against the manifest before its first read by this instance
                (default; a flipped bit in a Parquet page could otherwise decode as a silently different value).
        """
        key = KEYS[table]
        wanted = list(columns) if columns is not None else None
        read = None if wanted is None else list(dict.fromkeys(wanted + ([key] if dedupe else [])))
        seen = set()
        for entry in self.shards(table, probe_set):
            shard = self._open_shard(entry, verify)
            try:
                for batch in shard.iter_batches(batch_size=batch_size, columns=read):
                    if dedupe:
                        keys = batch.column(key).to_pylist()
                        keep = [k not in seen for k in keys]
                        seen.update(keys)
                        if not all(keep):
                            batch = batch.filter(pa.array(keep))
                    if wanted is not None:
                        batch = batch.select(wanted)
                    if batch.num_rows:
                        yield batch
            except (pa.ArrowException, OSError) as exc:
                raise CorpusError(f"{self.path / entry['path']}: unreadable shard ({exc})") from None

    def read(self, table: str, columns: Optional[Sequence[str]] = None, *, probe_set: Optional[str] = None,
             verify: bool = True) -> pa.Table:
        """A whole table, each key once (see :meth:`iter_batches`)."""
        schema = SCHEMAS[table]
        batches = list(self.iter_batches(table, columns, probe_set=probe_set, verify=verify))
        if batches:
            return pa.Table.from_batches(batches)
        fields = [schema.field(c) for c in columns] if columns is not None else list(schema)
        return pa.schema(fields).empty_table()

    def keys(self, table: str, *, probe_set: Optional[str] = None) -> set:
        """The set of keys present in a table."""
        keys = set()
        for batch in self.iter_batches(table, [KEYS[table]], probe_set=probe_set, dedupe=False):
            keys.update(batch.column(0).to_pylist())
        return keys

    def verify(self) -> List[str]:
        """Check every shard against the manifest; returns the problems found (empty when the store is sound)."""
        problems = []
        for entry in self.manifest["shards"]:
            try:
                self._verified.discard(entry["path"])
                self._open_shard(entry, verify=True).metadata
            except CorpusError as exc:
                problems.append(str(exc))
        return problems

    def splits(self, column: str = "split") -> Dict[str, str]:
        """sha256 -> split name from the last ``bpq corpus split`` (empty if never split); ``column="group"``:
        sha256 -> the merged source group the split assigned as one (see :mod:`behavioral_pq.corpus.split`)."""
        if column not in ("split", "group"):
            raise ValueError(f"the split table has the columns split and group, not {column!r}")
        info = self.manifest.get("splits")
        if not info:
            return {}
        path = confined(self.path, info["path"], CorpusError)
        if not path.exists() or sha256_file(path) != info["sha256"]:
            raise CorpusError(f"{path}: splits file is missing or does not match the manifest")
        try:
            check_shard_file(path, pq.ParquetFile(path), SPLITS_SCHEMA, "splits file")
            table = pq.read_table(path, columns=["sha256", column])
        except (pa.ArrowException, OSError) as exc:
            raise CorpusError(f"{path}: unreadable splits file ({exc})") from None
        return dict(zip(table.column("sha256").to_pylist(), table.column(column).to_pylist()))

    def write_splits(self, rows: pa.Table, info: dict) -> None:
        """Replace the store's split assignment (rows: sha256, group, split) and record ``info``."""
        rows = rows.cast(SPLITS_SCHEMA)
        tmp = self.path / "tmp" / f"w-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"
        self.check_folders()
        try:
            tmp.parent.mkdir(exist_ok=True)
            pq.write_table(rows, tmp, compression="zstd")
            with self._locked():
                manifest = self._read_manifest()
                old = manifest.get("splits")
                old_path = confined(self.path, old["path"], CorpusError) if old else None   # before any change
                name = f"splits-{uuid.uuid4().hex[:8]}.parquet"
                os.replace(tmp, self.path / name)
                manifest["splits"] = dict(info, path=name, sha256=sha256_file(self.path / name))
                write_json_atomic(self.path / MANIFEST, manifest)
                self.manifest = manifest
                if old_path is not None and old_path.name != name:
                    old_path.unlink(missing_ok=True)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise CorpusError(f"{self.path}: cannot write the splits ({exc.strerror or exc}); "
                              "the store is unchanged and still readable") from None
