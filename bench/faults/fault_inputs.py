"""Input fault campaign: every file-reading ``bpq`` command fed with bad inputs, through the real CLI.

    python bench/faults/fault_inputs.py --work WORK [--huge-mib 256] [--commands features,spectrum,...]

Inputs (written under WORK, in a folder whose name has spaces and shell metacharacters): an empty file, binary
garbage, a huge file of garbage, a C file named ``.ll`` and IR named ``.c``, a directory, a path that does not
exist, a file this user cannot read (as root: a directory in place of a file, since root reads everything), IR
from another LLVM version (LLVM 20 syntax, and typed pointers from LLVM <= 14), C that does not compile, and a
valid module at a path full of metacharacters. Each (command, input) runs as ``python -m behavioral_pq ...`` with
a timeout; the outcome is:

- ``ok``: exit 0 (a valid input), ``error``: exit 2 with exactly one ``bpq: error:`` line naming the input and no
  traceback; anything else (a traceback, another exit status, a signal, a hang, a message that does not name the
  input) is a **defect**.

A file named ``pwned`` appearing in WORK would show that a shell ran a user string; the campaign checks for it.
Results: WORK/fault_inputs.json and a Markdown table on stdout. Keep WORK outside the repository.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402
NASTY_DIR = "dir with spaces; $(touch pwned) `touch pwned` & | > 'q' \"dq\""

VALID_C = "int add(int a, int b) { return a + b; }\nint main(void) { return add(1, 2) - 3; }\n"
LLVM20_IR = """define i32 @f(i32 %a, i32 %b) {
  %c = icmp samesign ult i32 %a, %b
  %r = zext i1 %c to i32
  ret i32 %r
}
"""
TYPED_POINTER_IR = """define i32 @f(i32* %p) {
  %v = load i32, i32* %p
  ret i32 %v
}
"""
BROKEN_C = "int f(int x) { return x +; }\n"


def make_inputs(work: Path, huge_mib: int) -> Dict[str, Tuple[Path, bool]]:
    """name -> (path, valid): the inputs of the campaign."""
    base = work / NASTY_DIR
    base.mkdir(parents=True, exist_ok=True)
    inputs: Dict[str, Tuple[Path, bool]] = {}

    def put(name: str, filename: str, data: bytes, valid: bool = False) -> None:
        path = base / filename
        path.write_bytes(data)
        inputs[name] = (path, valid)

    put("empty", "empty.ll", b"")
    put("empty-c", "empty.c", b"")  # an empty translation unit compiles, but there is no program to work on
    put("garbage", "garbage.bc", os.urandom(4096))
    put("garbage-bitcode-magic", "magic.bc", b"BC\xc0\xde" + os.urandom(4096))
    huge = base / "huge.ll"
    if not huge.exists() or huge.stat().st_size != huge_mib << 20:
        with open(huge, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(huge_mib):
                f.write(block)
    inputs["huge-garbage"] = (huge, False)
    put("c-named-ll", "program.ll", VALID_C.encode())
    put("llvm20-ir", "llvm20.ll", LLVM20_IR.encode())
    put("typed-pointers", "typed.ll", TYPED_POINTER_IR.encode(), valid=True)  # LLVM 19 still reads i32* as ptr
    put("broken-c", "broken.c", BROKEN_C.encode())
    put("wrong-extension", "program.txt", VALID_C.encode())
    put("valid-c-nasty-name", "ok $(touch pwned); `touch pwned` 'x'.c", VALID_C.encode(), valid=True)
    inputs["directory"] = (base, False)
    inputs["missing"] = (base / "no such file.ll", False)
    unreadable = base / "unreadable.ll"
    unreadable.write_text("define void @f() {\n  ret void\n}\n")
    unreadable.chmod(0)
    inputs["unreadable"] = (unreadable, os.geteuid() == 0)  # root reads it anyway: then it is a valid input
    return inputs


COMMANDS = {
    "features": lambda p, out: ["features", str(p)],
    "spectrum": lambda p, out: ["spectrum", str(p), "-o", str(out / "s.npy")],
    "optimize": lambda p, out: ["optimize", str(p), "--passes", "Oz", "-o", str(out / "o.ll")],
    "embed": lambda p, out: ["embed", str(p), "-o", str(out / "e.npy")],
    "predict": lambda p, out: ["predict", "oz", str(p)],
    "lower": lambda p, out: ["lower", str(p), "-o", str(out / "o.s")],
    "corpus-build": lambda p, out: ["corpus", "build", str(p), "--out", str(out / "store"), "-q", "--workers", "1"],
}


def run_case(command: str, name: str, path: Path, valid: bool, work: Path, timeout: float) -> dict:
    out = work / "outputs" / f"{command}-{name}"
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "behavioral_pq", *COMMANDS[command](path, out)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=work,
                              env=common.checkout_env(BPQ_WORKERS="1"))
    except subprocess.TimeoutExpired:
        return {"command": command, "input": name, "outcome": "defect", "why": f"hang past {timeout} s"}
    seconds = round(time.perf_counter() - start, 2)
    stderr = proc.stderr.decode(errors="replace").strip()
    lines = [line for line in stderr.splitlines() if line.strip()]
    record = {"command": command, "input": name, "returncode": proc.returncode, "seconds": seconds,
              "message": lines[-1][:300] if lines else ""}
    if "Traceback" in stderr:
        return dict(record, outcome="defect", why="traceback", stderr=stderr[-2000:])
    if proc.returncode == 0 and command == "corpus-build":  # a bad input must be a failed row, a good one ok
        return dict(record, **_stored(out / "store", path, valid))
    if proc.returncode == 0:
        return dict(record, outcome="ok" if valid else "defect", why="" if valid else "accepted an invalid input")
    errors = [line for line in lines if line.startswith("bpq: error:")]
    if proc.returncode != 2 or len(errors) != 1:
        return dict(record, outcome="defect", why=f"exit {proc.returncode}, {len(errors)} error lines")
    named = path.name in errors[0] or str(path) in errors[0]
    if valid:
        return dict(record, outcome="defect", why="refused a valid input")
    return dict(record, outcome="error" if named else "defect", why="" if named else "the error does not name the input")


def _stored(store: Path, path: Path, valid: bool) -> dict:
    from behavioral_pq.corpus.store import CorpusStore

    rows = CorpusStore(store).read("inputs", ["sources", "status", "error"]).to_pylist()
    if path.is_dir():
        return {"outcome": "ok", "why": "", "rows": len(rows), "failed": sum(r["status"] == "failed" for r in rows)}
    if len(rows) != 1:
        return {"outcome": "defect", "why": f"{len(rows)} input rows for one input"}
    wanted = "ok" if valid else "failed"
    if rows[0]["status"] != wanted:
        return {"outcome": "defect", "why": f"stored as {rows[0]['status']}, expected {wanted}"}
    return {"outcome": "ok" if valid else "error", "why": "", "message": (rows[0]["error"] or "")[:300]}


def run_campaign(work: Path, huge_mib: int, commands: List[str], timeout: float) -> dict:
    inputs = make_inputs(work, huge_mib)
    (work / "pwned").unlink(missing_ok=True)
    records = []
    for command in commands:
        for name, (path, valid) in inputs.items():
            records.append(run_case(command, name, path, valid, work, timeout))
    shell = any(p.name == "pwned" for p in work.rglob("pwned"))
    return {"inputs": len(inputs), "commands": commands, "cases": len(records),
            "defects": sum(r["outcome"] == "defect" for r in records), "shell_ran_user_string": shell,
            "records": records}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path, help="scratch directory (outside the repository)")
    parser.add_argument("--huge-mib", type=int, default=256, help="size of the huge garbage file (default 256)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of the commands")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    result = run_campaign(args.work, args.huge_mib, args.commands.split(","), args.timeout)
    common.write_json(args.work / "fault_inputs.json", result)
    print(f"{result['cases']} cases, {result['defects']} defects, shell ran a user string: "
          f"{result['shell_ran_user_string']}\n")
    print("| command | input | outcome | exit | s | last line |\n|---|---|---|---|---|---|")
    for r in result["records"]:
        print(f"| {r['command']} | {r['input']} | {r['outcome']} {r.get('why', '')} | {r.get('returncode', '')} | "
              f"{r.get('seconds', '')} | {r.get('message', '').replace('|', '/')[:120]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
