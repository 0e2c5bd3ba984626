"""Wall time of the text-size search with llc beside the engine, against one candidate at a time, in one run.

    python bench/size/size_search_speed.py [FILE ...] [--budget 50] [--repeat 2]

Each module (default: the shipped examples and lowering tasks' sources) is searched with
``recommend_pipeline(..., objective="text-size")`` on an engine of 1 worker (one candidate at a time: its pipeline,
then llc on its result) and of 2 workers (one thread per worker: llc of one candidate runs beside the next
candidate's pipeline), alternating, best of ``--repeat``. Both must find the same bytes; prints the time of each
and their ratio. Prints only; writes no file.
"""

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import behavioral_pq as bpq
    from behavioral_pq import Engine
    from behavioral_pq.tasks.guidance import recommend_pipeline

    package = Path(bpq.__file__).parent / "data"
    files = args.files or sorted(str(p) for p in (package / "examples").glob("*.c")) + \
        sorted(str(p) for p in (package / "lowering" / "kernels").glob("*.c"))[:6]
    engines = {1: Engine(workers=1), 2: Engine(workers=2)}
    totals = {1: 0.0, 2: 0.0}
    for path in files:
        module = bpq.load_module(path)
        best, found = {}, {}
        for _ in range(args.repeat):
            for workers, engine in engines.items():
                start = time.perf_counter()
                found[workers] = recommend_pipeline(module, args.budget, engine=engine, objective="text-size")
                seconds = time.perf_counter() - start
                best[workers] = min(best.get(workers, seconds), seconds)
        assert found[1].text_size == found[2].text_size, (path, found[1].text_size, found[2].text_size)
        for workers in totals:
            totals[workers] += best[workers]
        print(f"{Path(path).name}: {module.instruction_count} instructions, {found[1].text_size} bytes; "
              f"1 worker {best[1]:.2f} s, 2 workers {best[2]:.2f} s ({best[1] / best[2]:.2f}x)")
    print(f"all {len(files)}: 1 worker {totals[1]:.1f} s, 2 workers {totals[2]:.1f} s ({totals[1] / totals[2]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
