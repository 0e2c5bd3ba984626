"""How long ``bpq spectrum`` of one huge straight-line function takes to give its result or its error, by size.

    python bench/spectra/huge_function.py --shape ll --instructions 10000 30000 100000 --timeout 60
    python bench/spectra/huge_function.py --shape c --instructions 21000 42000 63000 --pass load-store-vectorizer

Shapes: ``ll``, IR of loads, one arithmetic operation and a store on one pointer, per four instructions (probes
cost about 0.12 ms per instruction, linear); ``c``, C statements on locals and an array, compiled as the CLI
compiles (LoadStoreVectorizer is quadratic on its one basic block). Each size runs ``bpq spectrum`` in a new
process (one worker, no cache, ``BPQ_TIMEOUT`` as given) and prints its wall time and its outcome; with
``--pass``, it also times ``opt-19`` running that one pass on the prepared module. Prints only; writes no file.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import behavioral_pq as bpq
from behavioral_pq.core.toolchain import find_tool


def straight_line_ll(instructions: int) -> str:
    lines = ["define i32 @huge(ptr %p, i32 %x) {", "entry:"]
    previous = "%x"
    for i in range(instructions // 4):
        lines += [f"  %g{i} = getelementptr inbounds i32, ptr %p, i64 {i % 1024}",
                  f"  %l{i} = load i32, ptr %g{i}, align 4",
                  f"  %a{i} = {('add', 'mul', 'xor', 'sub')[i % 4]} i32 %l{i}, {previous}",
                  f"  store i32 %a{i}, ptr %g{i}, align 4"]
        previous = f"%a{i}"
    return "\n".join(lines + [f"  ret i32 {previous}", "}"]) + "\n"


def straight_line_c(instructions: int) -> str:
    lines = ["int huge(int *p, int x) {", "  int a = x, b = 1, c = 2;"]
    for i in range(instructions // 21):   # 21 instructions per statement line once compiled
        lines.append(f"  a = a * {i % 7 + 2} + p[{i % 512}]; b ^= a >> {i % 5}; p[{(i * 7) % 512}] = b + c; "
                     f"c += {i};")
    return "\n".join(lines + ["  return a + b + c;", "}"]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=("ll", "c"), default="ll")
    parser.add_argument("--instructions", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--timeout", type=float, default=60.0, help="BPQ_TIMEOUT, seconds per pipeline")
    parser.add_argument("--pass", dest="single_pass", help="also time opt-19 running this one pass")
    args = parser.parse_args()
    env = dict(os.environ, BPQ_TIMEOUT=f"{args.timeout:g}", BPQ_WORKERS="1", BPQ_NO_CACHE="1")
    with tempfile.TemporaryDirectory(prefix="bpq-huge-") as tmp:
        for size in args.instructions:
            source = Path(tmp) / f"huge-{size}.{args.shape}"
            source.write_text((straight_line_ll if args.shape == "ll" else straight_line_c)(size))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "behavioral_pq", "spectrum", str(source), "--json"],
                                  capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - start
            outcome = "spectrum" if done.returncode == 0 else done.stderr.strip().splitlines()[-1]
            line = f"{args.shape} {size:>9,} instructions  {seconds:7.1f} s  {outcome}"
            if args.single_pass:
                bitcode = Path(tmp) / "prepared.bc"
                bpq.load_module(source).save(bitcode)
                start = time.perf_counter()
                subprocess.run([find_tool("opt"), f"-passes=function({args.single_pass})", str(bitcode), "-o",
                                os.devnull], check=True)
                line += f"  ({args.single_pass}: {time.perf_counter() - start:.1f} s)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
