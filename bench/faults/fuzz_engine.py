"""Fuzz campaign over the engine: generated modules through features, spectra, labels and random pipelines.

    python bench/faults/fuzz_engine.py run --out DIR [--modules 10000] [--seed 0] [--batch 100] [--timeout 20]
    python bench/faults/fuzz_engine.py report --out DIR   # summary.json + summary.md from the finished batches
    python bench/faults/fuzz_engine.py replay DIR/cases/CASE   # re-run one kept crash or timeout

Item ``i`` of seed ``S`` is drawn from ``random.Random(f"bpq-fuzz:{S}:{i}")``, so a campaign is reproducible and
any item can be regenerated alone. Three kinds:

- ``csmith``: a Csmith program with varied size and feature options, compiled like any C input;
- ``stress``: ``llvm-stress-19`` with a log-uniform ``-size`` from 5 to 800 instructions;
- ``mutant``: the project's own test IR (tests/data, the example and lowering-task C files) after 1-3 text edits
  (constants, predicates, opcodes, deleted, duplicated or truncated lines, retyped values, stray bytes) or bit
  flips and truncation of its bitcode.

Each loaded module then goes through what a user runs: ``autophase``/``instcount`` (in the calling process),
``spectra`` with the default probe set, the 126 label pipelines, two random pipelines of 1-50 catalog passes, and
one random raw pipeline string (``check_pipeline`` in the calling process, then run if LLVM accepts it).

The supervisor runs each batch in its own *host* process, the way a user's program would call the library. A
host process that dies (a signal, or an exit without its results) is a **host death**: it is recorded, and the
batch is re-run one item per process to name the item that kills the host. Finished batches are files under
``DIR/batches``, so a killed campaign resumes where it stopped. Every module that crashes LLVM or times out is kept
under ``DIR/cases/<item>-<stage>/`` (bitcode, pipeline, error, and how ``opt-19`` fares on the same input) and is
replayed with ``replay``. Keep DIR outside the repository: it holds generated programs and bitcode.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

KINDS = {"csmith": 0.20, "stress": 0.40, "mutant": 0.40}
CSMITH_SWITCHES = ("--no-pointers", "--no-arrays", "--no-structs", "--no-unions", "--no-bitfields", "--float",
                   "--no-volatiles", "--no-jumps", "--no-math64", "--no-packed-struct", "--no-consts",
                   "--no-divs", "--no-muls", "--no-longlong")
ADAPTORS = ("function", "loop", "loop-mssa", "cgscc", "module", "function<eager-inv>", "repeat<2>",
            "invalidate<all>", "require<aa>")
RAW_EXTRA = ("print", "verify", "no-op-module", "no-op-function", "default<O1>", "default<O2>", "default<Os>",
             "default<Oz>", "default<O3>", "thinlto<O2>", "lto<O1>", "inline<only-mandatory>", "loop-unroll<O3>",
             "simplifycfg<bonus-inst-threshold=100000>", "licm<allowspeculation>", "early-cse<memssa>",
             "instcombine<max-iterations=0>", "sroa<modify-cfg>", "gvn<no-pre>", "loop-unroll<full-unroll-max=0>",
             "", "(", ")", ",", "<", ">", "=", "function(", "))", "loop(function(instcombine))", "🙂", "\x00")
TIMEOUT_SIGNATURE = "timeout"


# -- items -------------------------------------------------------------------------------------------------------

def item_spec(seed: int, index: int) -> dict:
    """The parameters of item ``index``: a pure function of (seed, index)."""
    rng = random.Random(f"bpq-fuzz:{seed}:{index}")
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    spec = {"index": index, "id": f"{index:06d}", "kind": kind, "rng": rng.randrange(2 ** 63)}
    if kind == "csmith":
        options = ["--max-funcs", str(rng.randint(1, 3)), "--max-block-depth", str(rng.randint(1, 3)),
                   "--max-expr-complexity", str(rng.randint(1, 6)), "--max-block-size", str(rng.randint(1, 4)),
                   "--max-array-dim", str(rng.randint(1, 3)), "--max-struct-fields", str(rng.randint(1, 6))]
        options += rng.sample(CSMITH_SWITCHES, rng.randint(0, 4))
        spec.update(csmith_seed=rng.randrange(2 ** 31), options=options)
    elif kind == "stress":
        spec.update(stress_seed=rng.randrange(2 ** 31), size=int(math.exp(rng.uniform(math.log(5), math.log(800)))))
    else:
        spec.update(mode=rng.choices(["text", "bitcode"], weights=[0.75, 0.25])[0], edits=rng.randint(1, 3))
    return spec


def seed_ir(cache: Path) -> List[Path]:
    """The project's own test IR as ``.ll`` files (C sources compiled once into ``cache``)."""
    from behavioral_pq import load_module

    cache.mkdir(parents=True, exist_ok=True)
    out = sorted((common.REPO / "tests" / "data").rglob("*.ll"))
    sources = sorted((common.REPO / "behavioral_pq" / "data" / "examples").glob("*.c"))
    sources += sorted((common.REPO / "behavioral_pq" / "data" / "lowering").rglob("*.c"))
    for src in sources:
        target = cache / f"{src.parent.name}-{src.stem}.ll"
        if not target.exists():
            text = load_module(src).text()
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, target)
        out.append(target)
    return out


_INT = re.compile(r"(?<![\w%@.])(-?\d+)(?![\w.])")
_PREDICATES = ("eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle")
_BINOPS = ("add", "sub", "mul", "and", "or", "xor", "shl", "lshr", "ashr", "udiv", "sdiv", "urem", "srem")
_TYPES = ("i1", "i8", "i16", "i32", "i64", "i128", "float", "double", "ptr", "<4 x i32>", "void")


def mutate_text(text: str, rng: random.Random, edits: int) -> str:
    lines = text.split("\n")
    body = [i for i, line in enumerate(lines) if line.startswith("  ")] or list(range(len(lines)))
    for _ in range(edits):
        i = rng.choice(body)
        line = lines[i]
        op = rng.choices(range(9), weights=[4, 3, 3, 1, 1, 1, 1, 1, 1])[0]  # mostly edits that stay valid
        if op == 0 and _INT.search(line):  # a constant
            matches = list(_INT.finditer(line))
            m = rng.choice(matches)
            value = rng.choice(["0", "-1", "1", "2147483647", "-2147483648", "255", "64", "65", str(rng.randint(-9, 99))])
            lines[i] = line[:m.start(1)] + value + line[m.end(1):]
        elif op == 1:  # a comparison predicate
            lines[i] = re.sub(r"\b(" + "|".join(_PREDICATES) + r")\b", lambda _: rng.choice(_PREDICATES), line, 1)
        elif op == 2:  # a binary opcode
            lines[i] = re.sub(r"= (" + "|".join(_BINOPS) + r")\b", lambda _: "= " + rng.choice(_BINOPS), line, 1)
        elif op == 3:
            del lines[i]
            body = [j for j in body if j < len(lines)] or [0]
        elif op == 4:
            lines.insert(i, line)
        elif op == 5:  # a type
            lines[i] = re.sub(r"\b(i1|i8|i16|i32|i64|float|double|ptr)\b", lambda _: rng.choice(_TYPES), line, 1)
        elif op == 6:  # swap two lines of the body
            j = rng.choice(body)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 7:  # stray bytes
            pos = rng.randrange(len(line) + 1)
            lines[i] = line[:pos] + rng.choice(["%", "@", "{", "}", "(", ",", " undef", " poison", "\x7f", "ÿ"]) + line[pos:]
        else:  # truncate
            return "\n".join(lines)[:rng.randrange(len(text) + 1)]
    return "\n".join(lines)


def mutate_bitcode(data: bytes, rng: random.Random, edits: int) -> bytes:
    buf = bytearray(data)
    for _ in range(edits):
        if rng.random() < 0.2:
            del buf[rng.randrange(len(buf)):]
            if not buf:
                break
        else:
            pos = rng.randrange(4, len(buf)) if len(buf) > 4 else 0  # keep the magic most of the time
            buf[pos] ^= 1 << rng.randrange(8)
    return bytes(buf)


def generate(spec: dict, work: Path, seeds: Sequence[Path]):
    """(source bytes or path, name) for an item; raises ToolError/ToolTimeoutError when generation fails."""
    from behavioral_pq.core.toolchain import find_tool, run_tool
    from behavioral_pq.corpus.csmith import CSMITH_INCLUDE, find_csmith

    rng = random.Random(spec["rng"])
    if spec["kind"] == "csmith":
        text = run_tool([find_csmith(), "--seed", str(spec["csmith_seed"]), *spec["options"]], timeout=30).stdout
        path = work / f"{spec['id']}.c"
        path.write_bytes(text)
        return path, ["-I", CSMITH_INCLUDE, "-w"]
    if spec["kind"] == "stress":
        out = run_tool([find_tool("llvm-stress"), f"-size={spec['size']}", f"-seed={spec['stress_seed']}"],
                       timeout=30).stdout
        return out, []
    seed = seeds[rng.randrange(len(seeds))]
    text = seed.read_text()
    if spec["mode"] == "text":
        return mutate_text(text, rng, spec["edits"]).encode(), []
    from behavioral_pq import load_module

    return mutate_bitcode(load_module(text).bitcode, rng, spec["edits"]), []


def random_catalog_pipeline(rng: random.Random) -> str:
    from behavioral_pq.core.catalog import PASSES, sequence_pipeline

    return sequence_pipeline([rng.randrange(len(PASSES)) for _ in range(rng.randint(1, 50))])


def random_raw_pipeline(rng: random.Random, depth: int = 0) -> str:
    """A random new-PM pipeline string: catalog pass pipelines, adaptors, parameters and plain garbage."""
    from behavioral_pq.core.catalog import PASSES

    parts = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(PASSES).pipeline)
        elif r < 0.6:
            parts.append(rng.choice(RAW_EXTRA))
        elif r < 0.8 and depth < 3:
            parts.append(f"{rng.choice(ADAPTORS)}({random_raw_pipeline(rng, depth + 1)})")
        elif r < 0.9:
            name = rng.choice(PASSES).pipeline.split("(")[-1].split("<")[0].rstrip(")")
            parts.append(f"{name}<{rng.choice(['', 'O9', 'max-iterations=-1', 'x=1;y', 'no-', ';;', '999999999999'])}>")
        else:
            parts.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz-<>();=,0123456789 ") for _ in range(rng.randint(1, 20))))
    return ",".join(parts)


# -- the host side: one batch in one process ---------------------------------------------------------------------

def _kind(exc: BaseException) -> str:
    from behavioral_pq.errors import BPQError

    name = type(exc).__name__
    return name if isinstance(exc, BPQError) else f"untyped:{name}"


def _upstream(bitcode: bytes, pipeline: Optional[str], timeout: float) -> dict:
    """How opt-19 fares on the same module and pipeline: crash (with the pass it names), timeout or ok."""
    from behavioral_pq.core.toolchain import find_tool

    if not pipeline:
        return {"opt": "not run (no pipeline: parsing or features)"}
    with tempfile.TemporaryDirectory(prefix="bpq-fuzz-opt-") as tmp:
        src = Path(tmp, "in.bc")
        src.write_bytes(bitcode)
        try:
            proc = subprocess.run([find_tool("opt"), f"-passes={pipeline}", str(src), "-o", os.devnull],
                                  capture_output=True, timeout=timeout,
                                  env=dict(os.environ, LLVM_DISABLE_SYMBOLIZATION="1"))
        except subprocess.TimeoutExpired:
            return {"opt": "timeout"}
    err = proc.stderr.decode(errors="replace")
    passes = re.findall(r'Running pass "([^"]+)"', err)
    if proc.returncode == 0:
        return {"opt": "ok"}
    return {"opt": "crash" if proc.returncode < 0 or "Stack dump" in err else f"exit {proc.returncode}",
            "pass": passes[-1] if passes else None, "message": err.strip().splitlines()[0][:300] if err.strip() else ""}


def _keep_case(out: Path, spec: dict, stage: str, bitcode: bytes, exc, timeout: float) -> dict:
    """Save a crashing (or hanging) module with its pipeline under out/cases and return its summary."""
    case = out / "cases" / f"{spec['id']}-{stage}"
    case.mkdir(parents=True, exist_ok=True)
    (case / "module.bc").write_bytes(bitcode)
    pipeline = getattr(exc, "pipeline", None)
    (case / "pipeline.txt").write_text(pipeline or "")
    upstream = _upstream(bitcode, pipeline, timeout) if type(exc).__name__ == "PassCrashError" else {}
    info = {"item": spec, "stage": stage, "error_kind": type(exc).__name__, "error": str(exc),
            "detail": getattr(exc, "detail", "")[-2000:], "upstream": upstream,
            "replay": f"python bench/faults/fuzz_engine.py replay {case}"}
    (case / "case.json").write_text(json.dumps(info, indent=1))
    return {"case": case.name, "pass": upstream.get("pass"), "opt": upstream.get("opt")}


def run_batch(specs: Sequence[dict], out: Path, workers: int, timeout: float) -> List[dict]:
    """Run items in this process (the host). Returns one record per item."""
    import numpy as np

    from behavioral_pq import autophase, instcount, load_module
    from behavioral_pq.core.engine import Engine, check_pipeline
    from behavioral_pq.corpus.labels import LABEL_PIPELINES, TOTAL_INSTS, label_row
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.embedding.spectrum import spectra
    from behavioral_pq.errors import BPQError

    seeds = seed_ir(out / "seed-ir")
    records: Dict[int, dict] = {}
    loaded = []  # (spec, module)
    with Engine(workers=workers, timeout=timeout) as engine, tempfile.TemporaryDirectory(prefix="bpq-fuzz-") as tmp:
        for spec in specs:
            rec = records[spec["index"]] = {"index": spec["index"], "kind": spec["kind"], "stages": {}, "cases": []}
            start = time.perf_counter()
            try:
                source, flags = generate(spec, Path(tmp), seeds)
            except BPQError as exc:
                rec["stages"]["generate"] = _kind(exc)
                rec["seconds"] = time.perf_counter() - start
                continue
            rec["stages"]["generate"] = "ok"
            try:
                module = load_module(source, name=spec["id"], flags=flags, engine=engine)
                rec["stages"]["load"] = "ok"
            except Exception as exc:  # noqa: BLE001 - every kind is counted; untyped ones are defects
                rec["stages"]["load"] = _kind(exc)
                rec["error"] = str(exc)[:300]
                if type(exc).__name__ in ("PassCrashError", "PassTimeoutError"):
                    data = source.read_bytes() if isinstance(source, Path) else source
                    rec["cases"].append(_keep_case(out, spec, "load", data, exc, timeout))
                rec["seconds"] = time.perf_counter() - start
                continue
            try:
                features = autophase(module)
                counts = instcount(module)
                assert features.shape == (56,) and features.dtype == np.int64
                assert counts[0] == features[TOTAL_INSTS] == module.instruction_count
                rec["stages"]["features"] = "ok"
                rec["instructions"] = int(features[TOTAL_INSTS])
            except Exception as exc:  # noqa: BLE001
                rec["stages"]["features"] = _kind(exc)
            rec["seconds"] = time.perf_counter() - start
            loaded.append((spec, module))

        def stage(name: str, errors, modules):
            for (spec, module), error in zip(modules, errors):
                rec = records[spec["index"]]
                rec["stages"][name] = "ok" if error is None else _kind(error)
                if type(error).__name__ in ("PassCrashError", "PassTimeoutError"):
                    rec["cases"].append(_keep_case(out, spec, name, module.bitcode, error, timeout))

        def timed(name: str, call):
            start = time.perf_counter()
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - a batch call that raises loses the batch: a defect
                for spec, _ in loaded:
                    records[spec["index"]]["stages"][name] = _kind(exc)
            share = (time.perf_counter() - start) / max(1, len(loaded))
            for spec, _ in loaded:
                records[spec["index"]]["seconds"] += share

        def run_spectra():
            batch = spectra([m for _, m in loaded], engine=engine)
            assert batch.spectra.shape == (len(loaded), load_probes().num_probes, 56)
            assert all(np.isfinite(batch.spectra[i]).all() == (e is None) for i, e in enumerate(batch.errors))
            stage("spectrum", batch.errors, loaded)

        def run_labels():
            features, errors = engine.autophase_after([m.bitcode for _, m in loaded], LABEL_PIPELINES,
                                                      names=[s["id"] for s, _ in loaded])
            for (spec, module), f, e in zip(loaded, features, errors):
                row = label_row(module.sha256, f, e)
                assert (row["status"] == "ok") == (e is None)
            stage("labels", errors, loaded)

        def run_random():
            for spec, module in loaded:
                rng = random.Random(spec["rng"] + 1)
                pipelines = [random_catalog_pipeline(rng) for _ in range(2)]
                _, errors = engine.autophase_after([module.bitcode], pipelines, names=[spec["id"]])
                stage("pipelines", errors, [(spec, module)])
                raw = random_raw_pipeline(rng)
                rec = records[spec["index"]]
                rec["raw"] = raw
                try:
                    check_pipeline(raw)
                except BPQError as exc:
                    rec["stages"]["raw"] = "rejected:" + _kind(exc)
                    continue
                _, errors = engine.autophase_after([module.bitcode], [raw], names=[spec["id"]])
                stage("raw", errors, [(spec, module)])

        timed("spectrum", run_spectra)
        timed("labels", run_labels)
        timed("pipelines", run_random)
        for rec in records.values():
            rec["worker_restarts"] = 0
        if specs:
            records[specs[0]["index"]]["worker_restarts"] = engine.restarts
    return [records[s["index"]] for s in specs]


def host_main(args) -> int:
    specs = [item_spec(args.seed, i) for i in args.items]
    start = time.perf_counter()
    records = run_batch(specs, Path(args.out), args.workers, args.timeout)
    common.write_json(Path(args.result), {"items": args.items, "seconds": time.perf_counter() - start,
                                          "records": records}, indent=None)
    return 0


# -- the supervisor ----------------------------------------------------------------------------------------------

def _host(out: Path, seed: int, items: Sequence[int], result: Path, workers: int, timeout: float,
          limit: float) -> subprocess.CompletedProcess:
    command = [sys.executable, str(Path(__file__).resolve()), "_host", "--out", str(out), "--seed", str(seed),
               "--result", str(result), "--workers", str(workers), "--timeout", str(timeout),
               "--items", *map(str, items)]
    try:
        return subprocess.run(command, capture_output=True, timeout=limit, env=common.checkout_env())
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(command, -9, exc.stdout or b"", (exc.stderr or b"") + b"\nhost timed out")


def run_campaign(args) -> int:
    from tqdm import tqdm

    out = Path(args.out)
    batches = out / "batches"
    batches.mkdir(parents=True, exist_ok=True)
    config = {"modules": args.modules, "seed": args.seed, "batch": args.batch, "timeout": args.timeout,
              "workers": args.workers}
    config_path = out / "config.json"
    if config_path.exists() and json.loads(config_path.read_text()) != config:
        sys.exit(f"{out} holds a campaign with other settings ({config_path}); use another --out")
    common.write_json(config_path, config, indent=None)
    count = math.ceil(args.modules / args.batch)
    todo = [k for k in range(count) if not (batches / f"batch-{k:05d}.json").exists()]
    with tqdm(total=args.modules, initial=args.modules - sum(min(args.batch, args.modules - k * args.batch)
                                                               for k in todo), unit="module") as bar:
        for k in todo:
            items = list(range(k * args.batch, min(args.modules, (k + 1) * args.batch)))
            result = batches / f"batch-{k:05d}.json"
            proc = _host(out, args.seed, items, result, args.workers, args.timeout, args.host_limit)
            if not result.exists():  # a host death: record it, then find the item one process at a time
                death = {"batch": k, "returncode": proc.returncode, "stderr": proc.stderr.decode(errors="replace")[-3000:]}
                records = []
                for i in items:
                    single = batches / f"single-{i:06d}.json"
                    p = _host(out, args.seed, [i], single, args.workers, args.timeout, args.host_limit)
                    if single.exists():
                        records += json.loads(single.read_text())["records"]
                        single.unlink()
                    else:
                        records.append({"index": i, "kind": item_spec(args.seed, i)["kind"],
                                        "stages": {"host": f"death ({p.returncode})"}, "cases": [],
                                        "stderr": p.stderr.decode(errors="replace")[-3000:]})
                with open(out / "host-deaths.jsonl", "a") as f:
                    f.write(json.dumps(death) + "\n")
                common.write_json(result, {"items": items, "seconds": 0.0, "records": records, "host_death": death},
                                  indent=None)
            bar.update(len(items))
    write_report(out)
    return 0


def write_report(out: Path) -> dict:
    """Aggregate every finished batch into out/summary.json and out/summary.md."""
    config = json.loads((out / "config.json").read_text())
    records, deaths, host_seconds = [], 0, 0.0
    for path in sorted((out / "batches").glob("batch-*.json")):
        data = json.loads(path.read_text())
        records += data["records"]
        deaths += "host_death" in data
        host_seconds += data["seconds"]
    by_kind = Counter(r["kind"] for r in records)
    stages = defaultdict(Counter)
    for r in records:
        for name, outcome in r["stages"].items():
            stages[name][outcome] += 1
    per_kind_stage = defaultdict(Counter)
    for r in records:
        for name, outcome in r["stages"].items():
            per_kind_stage[f"{r['kind']}/{name}"][outcome] += 1
    signatures, opt = Counter(), Counter()
    for r in records:
        for case in r["cases"]:
            signatures[case.get("pass") or case["case"].split("-", 1)[1]] += 1
            opt[case.get("opt") or "n/a"] += 1
    instructions = sorted(r["instructions"] for r in records if "instructions" in r)
    untyped = sum(1 for r in records for v in r["stages"].values() if "untyped" in str(v))
    summary = {
        "config": config, "items": len(records), "by_kind": dict(by_kind),
        "host_deaths": sum(1 for r in records if str(r["stages"].get("host", "")).startswith("death")),
        "batches_with_host_death": deaths,
        "untyped_errors": untyped,
        "stages": {k: dict(v) for k, v in stages.items()},
        "per_kind_stage": {k: dict(v) for k, v in sorted(per_kind_stage.items())},
        "timeouts": sum(1 for r in records for v in r["stages"].values() if v == "PassTimeoutError"),
        "kept_cases": sum(len(r["cases"]) for r in records),
        "crash_signatures": dict(signatures.most_common()),
        "upstream_opt": dict(opt),
        "instructions": {"modules": len(instructions),
                         "median": instructions[len(instructions) // 2] if instructions else None,
                         "max": instructions[-1] if instructions else None},
        "host_seconds": round(host_seconds, 1),
        "module_seconds_sum": round(sum(r.get("seconds", 0.0) for r in records), 1),
    }
    common.write_json(out / "summary.json", summary, indent=None)
    lines = [f"# Fuzz campaign: {len(records)} items, seed {config['seed']}", "",
             f"- by kind: {dict(by_kind)}",
             f"- host deaths: {summary['host_deaths']}; untyped errors: {untyped}; timeouts: {summary['timeouts']}",
             f"- kept cases: {summary['kept_cases']}; upstream opt-19 on them: {dict(opt)}",
             f"- loaded modules: {len(instructions)}, median {summary['instructions']['median']} instructions, "
             f"max {summary['instructions']['max']}",
             f"- host wall time: {summary['host_seconds']} s", "", "| stage | outcomes |", "|---|---|"]
    lines += [f"| {k} | {dict(v.most_common())} |" for k, v in stages.items()]
    lines += ["", "| kind/stage | outcomes |", "|---|---|"]
    lines += [f"| {k} | {dict(v.most_common())} |" for k, v in sorted(per_kind_stage.items())]
    lines += ["", "| crash signature (pass opt-19 names, else stage) | cases |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in signatures.most_common()]
    common.write_text(out / "summary.md", "\n".join(lines) + "\n")
    return summary


def replay(case: Path) -> int:
    """Re-run a kept case in a protected engine and show the equivalent opt-19 command."""
    from behavioral_pq.core.engine import Engine
    from behavioral_pq.errors import BPQError

    info = json.loads((case / "case.json").read_text())
    pipeline = (case / "pipeline.txt").read_text()
    bitcode = (case / "module.bc").read_bytes()
    print(f"case {case.name}: stage {info['stage']}, recorded {info['error_kind']}: {info['error']}")
    with Engine(workers=1, timeout=info["item"].get("timeout", 60)) as engine:
        try:
            if pipeline:
                engine.run_pipeline(engine.prepare(bitcode, case.name), pipeline, case.name)
            else:
                engine.prepare(bitcode, case.name)
            print(f"replay: NOT REPRODUCED: the recorded {info['error_kind']} did not happen again "
                  "(the engine's workers run with a fixed address layout, so this points at another cause)")
            status = 2
        except BPQError as exc:
            print(f"replay: {type(exc).__name__}: {exc}")
            status = 1
    if pipeline:
        print(f"opt: opt-19 -passes='{pipeline}' {case / 'module.bc'} -o /dev/null")
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run (or resume) a campaign")
    run.add_argument("--out", required=True, help="campaign directory (outside the repository)")
    run.add_argument("--modules", type=int, default=10000)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--batch", type=int, default=100, help="items per host process")
    run.add_argument("--timeout", type=float, default=20.0, help="seconds per pipeline per module")
    run.add_argument("--workers", type=int, default=2, help="engine worker processes per host")
    run.add_argument("--host-limit", type=float, default=1800.0, help="seconds before a host process is killed")
    rep = sub.add_parser("report", help="summarize the finished batches")
    rep.add_argument("--out", required=True)
    rpl = sub.add_parser("replay", help="re-run one kept case")
    rpl.add_argument("case", type=Path)
    host = sub.add_parser("_host")
    host.add_argument("--out", required=True)
    host.add_argument("--seed", type=int, required=True)
    host.add_argument("--result", required=True)
    host.add_argument("--workers", type=int, default=2)
    host.add_argument("--timeout", type=float, default=20.0)
    host.add_argument("--items", type=int, nargs="+", required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_campaign(args)
    if args.command == "report":
        print(json.dumps(write_report(Path(args.out)), indent=1))
        return 0
    if args.command == "replay":
        return replay(args.case)
    return host_main(args)


if __name__ == "__main__":
    sys.exit(main())
