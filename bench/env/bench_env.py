"""Step latency of the llvm-v0 environment against one ``opt-19`` process per step (CompilerGym's per-step
cost model without its service), and the cost of ``fork()``, on modules under 1,000 instructions.

    python bench/env/bench_env.py [--steps 200] [--out DIR]

Per step: one catalog pass, then the IrInstructionCount observation. Baseline: ``opt-19 -passes=P`` on the
current bitcode in a new process, the output counted in-process. Same modules, same action sequence, same run.
Results: env.{json,md} in --out (default bench/env/results).
"""

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import behavioral_pq as bpq
from behavioral_pq.core.catalog import PASSES, sequence_pipeline
from behavioral_pq.core.toolchain import find_tool
from behavioral_pq.env import make

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    rng = random.Random(0)
    opt = find_tool("opt")
    rows = []
    for source in sorted(common.EXAMPLES.glob("*.c")):
        actions = [rng.randrange(len(PASSES)) for _ in range(args.steps)]
        env = make("llvm-v0", benchmark=str(source))
        env.reset()
        ours = []
        for action in actions:
            start = time.perf_counter()
            _, _, terminated, _, _ = env.step(action)
            env.observation["IrInstructionCount"]
            ours.append(time.perf_counter() - start)
            if terminated:
                env.reset()
        forks = []
        for _ in range(50):
            start = time.perf_counter()
            env.fork()
            forks.append(time.perf_counter() - start)
        module = bpq.load_module(source)
        theirs = []
        with tempfile.TemporaryDirectory() as tmp:
            current = Path(tmp) / "cur.bc"
            current.write_bytes(module.bitcode)
            for action in actions:
                out = Path(tmp) / "next.bc"
                start = time.perf_counter()
                done = subprocess.run([opt, f"-passes={sequence_pipeline([action])}", str(current), "-o", str(out)],
                                      capture_output=True)
                if done.returncode == 0:
                    bpq.Module(out.read_bytes()).instruction_count
                    out.replace(current)
                theirs.append(time.perf_counter() - start)
        rows.append({"module": source.name, "instructions": module.instruction_count, "steps": len(actions),
                     "env_step_median_ms": 1000 * statistics.median(ours),
                     "opt_process_median_ms": 1000 * statistics.median(theirs),
                     "speedup": statistics.median(theirs) / statistics.median(ours),
                     "fork_median_us": 1e6 * statistics.median(forks)})
    common.write_json(args.out / "env.json", rows)
    table = common.markdown_table(
        ["module", "instructions", "env step + count (ms)", "opt-19 process per step (ms)", "speedup", "fork (us)"],
        [[r["module"], r["instructions"], f"{r['env_step_median_ms']:.2f}", f"{r['opt_process_median_ms']:.2f}",
          f"{r['speedup']:.1f}x", f"{r['fork_median_us']:.1f}"] for r in rows], align="lrrrrr")
    common.write_text(args.out / "env.md", table + "\n")
    print(table)


if __name__ == "__main__":
    main()
