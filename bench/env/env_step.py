"""Step and reset latency of ``llvm-v0``: CompilerGym 0.2.5 itself (its LLVM-10 service) against this package's
CompilerGym shim and core environment, on the same C programs, each side in its own process pinned to one core.

    python bench/env/env_step.py [--steps 200] [--rounds 2] [--cpu 1] [--cgenv ~/.cache/cgenv] [--out DIR]

Programs: the package's examples and Csmith programs picked by size (200-1k and 1k-5k IR instructions). Each is
compiled with ``-O1 -Xclang -disable-llvm-passes -g0`` by clang-19 for this package and by clang-14 for
CompilerGym (LLVM 10 cannot read LLVM 19 bitcode; ``noundef`` and ``mustprogress``, which LLVM 10's reader
refuses, are dropped from clang-14's IR). Per program, the sides run in turns, the order alternating from round
to round; every side takes the same seeded random actions. A step is ``env.step(action)`` with
``observation_space="Autophase"`` and ``reward_space="IrInstructionCount"``; a reset reloads the benchmark's
bitcode. CompilerGym runs without network (``unshare -n``), as ../shared/tools/compiler_gym_0.2.5.sh says.

Sides: ``compiler_gym`` (0.2.5), ``shim`` (behavioral_pq.env.compiler_gym), ``core`` (behavioral_pq.env, live
module in the session worker), ``core-bytes`` (the same environment sending bitcode through the worker at every
step, as before live modules). Writes ``env_step.json`` under ``--out`` (default bench/env/results) and prints a
table: median milliseconds per step and per reset, per size bucket (median over the bucket's programs of each
program's median), and the ratio CompilerGym / ours.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import behavioral_pq as bpq
from behavioral_pq.core.catalog import PASSES
from behavioral_pq.corpus.csmith import CSMITH_INCLUDE, csmith_program

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

SIDE = Path(__file__).resolve().parent / "_env_step_side.py"
SIDES = ("compiler_gym", "shim", "core", "core-bytes")
BUCKETS = (("<200", 0, 200), ("200-1k", 200, 1000), ("1k-5k", 1000, 5000))
FLAGS = ["-O1", "-Xclang", "-disable-llvm-passes", "-g0", "-emit-llvm", "-w", f"-I{CSMITH_INCLUDE}"]


def bucket_of(count: int) -> str:
    return next((name for name, low, high in BUCKETS if low <= count < high), ">=5k")


def programs(tmp: Path, per_bucket: int):
    """(name, C source) of the examples and of Csmith programs, ``per_bucket`` of each size bucket above 200."""
    chosen = [(p.stem, p) for p in sorted(common.EXAMPLES.glob("*.c"))]
    wanted = {name: per_bucket for name, low, _ in BUCKETS if low >= 200}
    rng = random.Random(0)
    for seed in range(200):
        if not any(wanted.values()):
            break
        options = ["--max-funcs", str(rng.randint(1, 6)), "--max-block-depth", str(rng.randint(2, 4)),
                   "--max-expr-complexity", str(rng.randint(2, 6))]
        source = tmp / f"csmith-{seed}.c"
        source.write_bytes(csmith_program(seed, options))
        try:
            count = bpq.load_module(source, flags=["-w", f"-I{CSMITH_INCLUDE}"]).instruction_count
        except bpq.BPQError:
            continue
        name = bucket_of(count)
        if wanted.get(name, 0) > 0:
            wanted[name] -= 1
            chosen.append((f"csmith-{seed}", source))
    return chosen


def llvm10_bitcode(source: Path, out: Path) -> Path:
    """clang-14's bitcode of ``source`` in a form LLVM 10 reads."""
    text = subprocess.run(["clang-14", *FLAGS, "-S", str(source), "-o", "-"], check=True, capture_output=True,
                          text=True).stdout
    text = re.sub(r"\b(noundef|mustprogress)\b", "", text)
    subprocess.run(["llvm-as-14", "-", "-o", str(out)], input=text, text=True, check=True)
    return out


def run_side(side: str, bitcode: Path, actions, resets: int, cpu: int, cgenv: Path) -> dict:
    request = json.dumps({"side": side, "bitcode": str(bitcode), "actions": actions, "resets": resets})
    command = common.side_command(side, SIDE, cpu, cgenv)
    done = subprocess.run(command, input=request, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "BPQ_WORKERS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{side} on {bitcode.name}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--resets", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--per-bucket", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--cgenv", type=Path, default=Path.home() / ".cache" / "cgenv")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    sides = args.sides.split(",")
    if "compiler_gym" in sides and not (args.cgenv / "bin" / "python").exists():
        print(f"no CompilerGym venv at {args.cgenv} (bash ../shared/tools/compiler_gym_0.2.5.sh makes one): "
              "measuring this package's sides only")
        sides.remove("compiler_gym")
    results = []
    with tempfile.TemporaryDirectory(prefix="bpq-env-step-") as tmp:
        tmp = Path(tmp)
        for index, (name, source) in enumerate(programs(tmp, args.per_bucket)):
            ours_bc = bpq.load_module(source, flags=["-w", f"-I{CSMITH_INCLUDE}"]).save(tmp / f"{name}.bc")
            theirs_bc = llvm10_bitcode(source, tmp / f"{name}.llvm10.bc")
            rng = random.Random(index)
            actions = [rng.randrange(len(PASSES)) for _ in range(args.steps)]
            runs = {side: [] for side in sides}
            for r in range(args.rounds):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    bitcode = theirs_bc if side == "compiler_gym" else ours_bc
                    runs[side].append(run_side(side, bitcode, actions, args.resets, args.cpu, args.cgenv))
            row = {"program": name, "instructions": runs[sides[-1]][0]["instructions"], "sides": {}}
            for side, replies in runs.items():
                steps = [s for reply in replies for s in reply["step_s"]]
                resets = [s for reply in replies for s in reply["reset_s"]]
                starts = [s for reply in replies for s in reply["start_s"]]
                row["sides"][side] = {"step_ms": 1e3 * statistics.median(steps),
                                      "reset_ms": 1e3 * statistics.median(resets),
                                      "start_ms": 1e3 * statistics.median(starts),
                                      "instructions": replies[0]["instructions"],
                                      "errors": sum(reply["errors"] for reply in replies)}
            row["bucket"] = bucket_of(row["sides"].get("core", row["sides"][sides[-1]])["instructions"])
            results.append(row)
            print(f"{name:14s} {row['bucket']:6s} " + "  ".join(
                f"{side} {v['instructions']:5d} ins step {v['step_ms']:.3f} reset {v['reset_ms']:.2f}"
                for side, v in row["sides"].items()), flush=True)
    table = summarize(results, sides)
    out = common.write_json(args.out / "env_step.json", {
        "command": " ".join(["python", "bench/env/env_step.py", *sys.argv[1:]]), "steps": args.steps,
        "rounds": args.rounds, "cpu": args.cpu, "programs": results, "summary": table})
    print(f"wrote {out}")


def summarize(results, sides):
    """Per bucket (and over 200-5k): median over programs of each side's median step / reset ms, and the ratios
    CompilerGym / side."""
    groups = {name: [r for r in results if r["bucket"] == name] for name, _, _ in BUCKETS}
    groups["200-5k"] = groups["200-1k"] + groups["1k-5k"]
    table = {}
    print("median ms (xN: CompilerGym's time / this side's); start = reset + first step")
    print(f"{'bucket':8s} {'n':>2s} " + " ".join(f"{s:>44s}" for s in sides))
    for name, rows in groups.items():
        if not rows:
            continue
        entry = {"programs": len(rows)}
        for side in sides:
            entry[side] = {key: statistics.median(r["sides"][side][key] for r in rows)
                           for key in ("step_ms", "reset_ms", "start_ms")}
        if "compiler_gym" in sides:
            for side in sides:
                if side != "compiler_gym":
                    for key in ("step", "reset", "start"):
                        entry[side][f"{key}_speedup"] = entry["compiler_gym"][f"{key}_ms"] / entry[side][f"{key}_ms"]
        table[name] = entry
        cells = []
        for side in sides:
            e = entry[side]
            cells.append(" ".join(f"{key} {e[key + '_ms']:6.3f}" + (f" x{e[key + '_speedup']:<4.1f}"
                                                                   if key + "_speedup" in e else " " * 6)
                                  for key in ("step", "reset", "start")))
        print(f"{name:8s} {len(rows):2d} " + " ".join(cells))
    return table


if __name__ == "__main__":
    main()
