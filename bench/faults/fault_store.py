"""Store fault campaign: corpus builds killed with SIGKILL, concurrent builds, a full disk and a read-only store.

    python bench/faults/fault_store.py --sources DIR --work WORK [--limit 2000] [--kills 20] [--seed 0] [--workers 2]

Everything runs through the ``bpq corpus build`` command, as a user would:

1. reference: one uninterrupted build of the first --limit inputs of DIR (sorted, linked into WORK/inputs);
2. killed: the same build started again and again into a fresh store and killed with SIGKILL after a random
   0.5-8 s (alternately the whole process group, like a pre-empted job, and the driver alone, whose pool
   workers must then exit by themselves), --kills times, then run to the end. After every kill the store must
   verify (every listed shard matches its checksum) and read;
3. concurrent: two builds of the same inputs started together into one fresh store;
4. full disk: a build into a 2 MiB tmpfs; read-only: a store on a tmpfs remounted read-only (needs root for
   ``mount``; otherwise RLIMIT_FSIZE stands in for the full disk and the read-only case is not run).

Each final store must hold exactly the reference's records: one ``inputs`` row per input (none lost, none
duplicated; failures recorded with their stage and error kind), and the same modules (features, bitcode) and
labels. Results: WORK/fault_store.json and a Markdown table on stdout. Keep WORK outside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def bpq(*args: str) -> List[str]:
    return [sys.executable, "-m", "behavioral_pq", *args]


def build_command(inputs: Path, store: Path, workers: int) -> List[str]:
    return bpq("corpus", "build", str(inputs), "--out", str(store), "--origin", "fault", "--workers", str(workers),
               "--flush-seconds", "1", "--no-count", "-q", "--json")


def snapshot(store: Path) -> dict:
    """The store's content as comparable values, plus physical row counts (before deduplication)."""
    from behavioral_pq.corpus.store import CorpusStore

    corpus = CorpusStore(store)
    problems = corpus.verify()
    physical = Counter()
    for table in ("inputs", "modules", "labels"):
        for entry in corpus.shards(table):
            physical[table] += entry["rows"]
    inputs = corpus.read("inputs", ["key", "status", "stage", "error_kind", "sha256"], verify=True).to_pylist()
    modules = corpus.read("modules", ["sha256", "autophase", "instcount", "bitcode"], verify=True).to_pylist()
    labels = corpus.read("labels", ["sha256", "status", "pass_counts", "oz_count", "o3_count"], verify=True).to_pylist()
    return {"problems": problems, "physical": dict(physical),
            "inputs": {r["key"]: (r["status"], r["stage"], r["error_kind"], r["sha256"]) for r in inputs},
            "modules": {r["sha256"]: (tuple(r["autophase"]), tuple(r["instcount"]), r["bitcode"]) for r in modules},
            "labels": {r["sha256"]: (r["status"], tuple(r["pass_counts"] or ()), r["oz_count"], r["o3_count"])
                       for r in labels}}


def compare(reference: dict, other: dict, expected_inputs: int) -> dict:
    """Counts of lost, extra and differing records, and physical duplicates."""
    out = {"problems": len(other["problems"])}
    for table in ("inputs", "modules", "labels"):
        ref, got = reference[table], other[table]
        out[f"{table}_lost"] = len(ref.keys() - got.keys())
        out[f"{table}_extra"] = len(got.keys() - ref.keys())
        out[f"{table}_differ"] = sum(1 for k in ref.keys() & got.keys() if ref[k] != got[k])
        out[f"{table}_physical_duplicates"] = other["physical"].get(table, 0) - len(got)
    out["inputs_expected"] = expected_inputs
    out["inputs_stored"] = len(other["inputs"])
    out["failures_recorded"] = sum(1 for v in other["inputs"].values() if v[0] == "failed")
    out["equal"] = (not other["problems"] and len(other["inputs"]) == expected_inputs
                    and all(out[f"{t}_{w}"] == 0 for t in ("inputs", "modules", "labels")
                            for w in ("lost", "extra", "differ")))
    return out


def run(command: List[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, env=common.checkout_env(), **kw)


def killed_builds(inputs: Path, store: Path, workers: int, kills: int, rng: random.Random) -> dict:
    log = []
    done = 0
    while done < kills:
        proc = subprocess.Popen(build_command(inputs, store, workers), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=common.checkout_env(), start_new_session=True)
        delay = rng.uniform(0.5, 8.0)
        try:
            proc.wait(timeout=delay)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        if finished:  # nothing left to do before the kill came: the build is complete
            log.append({"delay": round(delay, 2), "finished": True, "returncode": proc.returncode})
            break
        whole_group = done % 2 == 0
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
        proc.stderr.close()
        if not whole_group:  # the orphaned pool workers notice their parent is gone and exit (1 s watchdog)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _group_alive(proc.pid):
                time.sleep(0.2)
            orphans = _group_alive(proc.pid)
            if orphans:
                os.killpg(proc.pid, signal.SIGKILL)
        else:
            orphans = False
        state = _readable(store)
        log.append({"delay": round(delay, 2), "target": "group" if whole_group else "driver",
                    "orphans_left": orphans, **state})
        done += 1
    final = run(build_command(inputs, store, workers))
    return {"kills": done, "log": log, "final_returncode": final.returncode,
            "final_summary": _json(final.stdout), "final_stderr": final.stderr.decode(errors="replace")[-1500:]}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _readable(store: Path) -> dict:
    """After a kill: does the store open, verify and read? How many inputs does it hold?"""
    from behavioral_pq.corpus.store import CorpusStore
    from behavioral_pq.errors import CorpusError

    if not (store / "manifest.json").exists():
        return {"readable": True, "inputs": 0, "problems": 0}
    try:
        corpus = CorpusStore(store)
        problems = corpus.verify()
        return {"readable": True, "inputs": len(corpus.keys("inputs")), "problems": len(problems)}
    except CorpusError as exc:
        return {"readable": False, "error": str(exc)}


def _json(data: bytes) -> Optional[dict]:
    try:
        return json.loads(data)
    except ValueError:
        return None


def concurrent_builds(inputs: Path, store: Path, workers: int) -> dict:
    procs = [subprocess.Popen(build_command(inputs, store, max(1, workers // 2)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=common.checkout_env()) for _ in range(2)]
    outs = [p.communicate() for p in procs]
    again = run(build_command(inputs, store, workers))
    return {"returncodes": [p.returncode for p in procs], "summaries": [_json(o[0]) for o in outs],
            "third_build": _json(again.stdout)}


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                                capture_output=True).returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True)


def full_disk(inputs: Path, work: Path, workers: int) -> dict:
    mount = work / "tiny-disk"
    mounted = _mount_tmpfs(mount, "2m")
    store = mount / "store"
    try:
        if mounted:
            proc = run(build_command(inputs, store, workers))
            how = "2 MiB tmpfs"
        else:  # no mount: a file-size limit gives the same ENOSPC-like failure (EFBIG) to the writer
            def limit():
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))
            proc = run(build_command(inputs, store, workers), preexec_fn=limit)
            how = "RLIMIT_FSIZE 256 KiB"
        stderr = proc.stderr.decode(errors="replace").strip()
        return {"how": how, "returncode": proc.returncode, "last_line": stderr.splitlines()[-1] if stderr else "",
                "traceback": "Traceback" in stderr, **_readable(store)}
    finally:
        if mounted:
            _umount(mount)


def read_only(inputs: Path, work: Path, workers: int) -> dict:
    mount = work / "ro-disk"
    if not _mount_tmpfs(mount, "64m"):
        return {"skipped": "needs root and mount"}
    store = mount / "store"
    try:
        few = work / "few-inputs"
        few.mkdir(exist_ok=True)
        for src in sorted(inputs.iterdir())[:40]:
            target = few / src.name
            if not target.exists():
                target.symlink_to(src.resolve())
        first = run(build_command(few, store, workers))
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        proc = run(build_command(inputs, store, workers))
        stderr = proc.stderr.decode(errors="replace").strip()
        return {"first_build": first.returncode, "returncode": proc.returncode,
                "last_line": stderr.splitlines()[-1] if stderr else "", "traceback": "Traceback" in stderr,
                **_readable(store)}
    finally:
        _umount(mount)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", required=True, type=Path, help="directory of C files (outside the repository)")
    parser.add_argument("--work", required=True, type=Path, help="scratch directory (outside the repository)")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    work = args.work
    inputs = work / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    sources = sorted(p for p in args.sources.iterdir() if p.suffix == ".c")[:args.limit]
    for src in sources:
        target = inputs / src.name
        if not target.exists():
            target.symlink_to(src.resolve())
    rng = random.Random(args.seed)
    results: Dict[str, object] = {"inputs": len(sources), "seed": args.seed, "workers": args.workers}

    t = time.perf_counter()
    reference_store = work / "reference"
    if not (reference_store / "manifest.json").exists():
        proc = run(build_command(inputs, reference_store, args.workers))
        if proc.returncode:
            sys.exit(proc.stderr.decode(errors="replace"))
    results["reference_seconds"] = round(time.perf_counter() - t, 1)
    reference = snapshot(reference_store)

    for name, job in (("killed", lambda s: killed_builds(inputs, s, args.workers, args.kills, rng)),
                      ("concurrent", lambda s: concurrent_builds(inputs, s, args.workers))):
        store = work / name
        shutil.rmtree(store, ignore_errors=True)
        t = time.perf_counter()
        info = job(store)
        info["seconds"] = round(time.perf_counter() - t, 1)
        info["comparison"] = compare(reference, snapshot(store), len(sources))
        results[name] = info
    results["full_disk"] = full_disk(inputs, work, args.workers)
    results["read_only"] = read_only(inputs, work, args.workers)
    common.write_json(work / "fault_store.json", results)

    print("| run | inputs stored / expected | lost | duplicated (read) | physical duplicates | differ | equal |")
    print("|---|---|---|---|---|---|---|")
    for name in ("killed", "concurrent"):
        c = results[name]["comparison"]
        print(f"| {name} | {c['inputs_stored']} / {c['inputs_expected']} | "
              f"{c['inputs_lost'] + c['modules_lost'] + c['labels_lost']} | "
              f"{c['inputs_extra'] + c['modules_extra'] + c['labels_extra']} | "
              f"{c['inputs_physical_duplicates']}/{c['modules_physical_duplicates']}/{c['labels_physical_duplicates']} | "
              f"{c['inputs_differ'] + c['modules_differ'] + c['labels_differ']} | {c['equal']} |")
    print(json.dumps({k: results[k] for k in ("full_disk", "read_only")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
