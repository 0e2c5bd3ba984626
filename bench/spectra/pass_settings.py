"""What the catalog's LLVM 10-faithful pass settings cost and what they change, on the same modules in one run.

    python bench/spectra/pass_settings.py STORE [--modules 60] [--kind small|real|both] [--out DIR]

For each setting (e.g. ``instcombine<max-iterations=1000;no-verify-fixpoint>`` against LLVM 19's default of one
iteration) the default probe set is run twice per module, once as shipped and once with the setting swapped
everywhere it occurs, on one engine worker; reported: the probe set's wall time both ways, the share of
spectrum rows that change and their mean absolute change, and how often the pass alone gives another
instruction count (a label) or another best-pass set. Writes ``pass_settings.json`` in --out (default
bench/spectra/results).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

SETTINGS = [
    ("instcombine iterations", "instcombine<max-iterations=1000;no-verify-fixpoint>",
     "instcombine<max-iterations=1;no-verify-fixpoint>", "-instcombine"),
    ("simplifycfg LLVM 10 options", "simplifycfg<switch-range-to-icmp;hoist-common-insts>", "simplifycfg",
     "-simplifycfg"),
    ("sroa preserve-cfg", "sroa<preserve-cfg>", "sroa<modify-cfg>", "-sroa"),
    ("ipsccp without function specialization", "ipsccp<no-func-spec>", "ipsccp", "-ipsccp"),
    ("nontrivial loop unswitching", "simple-loop-unswitch<nontrivial>", "simple-loop-unswitch", "-loop-unswitch"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--modules", type=int, default=60, help="modules per kind")
    parser.add_argument("--kind", default="both", choices=("small", "real", "both"))
    parser.add_argument("--max-instructions", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.core.catalog import PASSES, get_pass
    from behavioral_pq.core.engine import Engine
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.embedding.probes import load_probes
    from behavioral_pq.embedding.spectrum import log_relative
    from behavioral_pq.training.genetic import TOTAL_INSTS

    corpus = Corpus(args.store)
    kinds = corpus.program_kinds()
    sizes = common.instruction_counts(corpus)
    labels = corpus.labels().to_pydict()
    label_of = {s: i for i, s in enumerate(labels["sha256"])}
    rng = np.random.default_rng(args.seed)
    chosen = []
    for kind in (("small", "real") if args.kind == "both" else (args.kind,)):
        pool = sorted(s for s in label_of if kinds.get(s) == kind and sizes[s] <= args.max_instructions)
        chosen += [pool[i] for i in sorted(rng.choice(len(pool), min(args.modules, len(pool)), replace=False))]
    modules = {m.sha256: m for m in corpus.iter_modules(only=set(chosen))}
    probes = load_probes()
    pipelines = list(probes.pipelines())
    rows = []
    with Engine(1) as engine:
        for name, faithful, alternative, flag in SETTINGS:
            swapped = [p.replace(faithful, alternative) for p in pipelines]
            occurrences = sum(p.count(faithful) for p in pipelines)
            single = get_pass(flag).pipeline
            index = [p.flag for p in PASSES].index(flag)
            single_alt = single.replace(faithful, alternative)
            seconds = {"faithful": 0.0, "alternative": 0.0}
            changed_rows = total_rows = 0
            change = []
            label_changes = best_changes = 0
            for k, sha in enumerate(chosen):
                module = modules[sha]
                order = [("faithful", pipelines), ("alternative", swapped)]
                results = {}
                for key, which in (order if k % 2 == 0 else order[::-1]):
                    start = time.perf_counter()
                    features, errors = engine.autophase_after([module.bitcode], which)
                    seconds[key] += time.perf_counter() - start
                    results[key] = (features[0], errors[0])
                (a, ea), (b, eb) = results["faithful"], results["alternative"]
                if ea is None and eb is None:
                    sa, sb = log_relative(a[:1], a[1:]), log_relative(b[:1], b[1:])
                    differs = (sa != sb).any(axis=1)
                    changed_rows += int(differs.sum())
                    total_rows += len(differs)
                    change.append(float(np.abs(sa - sb).mean()))
                one, _ = engine.autophase_after([module.bitcode], [single, single_alt])
                if one[0, 1, TOTAL_INSTS] != one[0, 2, TOTAL_INSTS]:
                    label_changes += 1
                    counts = list(labels["pass_counts"][label_of[sha]])
                    before = {i for i, c in enumerate(counts) if c == min(counts)}
                    counts[index] = int(one[0, 2, TOTAL_INSTS])
                    after = {i for i, c in enumerate(counts) if c == min(counts)}
                    best_changes += int(before != after)
            row = {"setting": name, "faithful": faithful, "alternative": alternative,
                   "occurrences_in_probes": occurrences, "modules": len(chosen),
                   "probe_set_seconds": {k: round(v, 3) for k, v in seconds.items()},
                   "time_ratio": seconds["faithful"] / max(seconds["alternative"], 1e-9),
                   "spectrum_rows_changed": changed_rows / max(1, total_rows),
                   "spectrum_mean_abs_change": float(np.mean(change)) if change else 0.0,
                   "single_pass_count_changed": label_changes / len(chosen),
                   "best_pass_set_changed": best_changes / len(chosen)}
            rows.append(row)
            print(f"{name}: probes {seconds['faithful']:.1f} s faithful vs {seconds['alternative']:.1f} s "
                  f"({row['time_ratio']:.2f}x), rows changed {row['spectrum_rows_changed']:.1%}, "
                  f"label changed {row['single_pass_count_changed']:.1%}, best set {row['best_pass_set_changed']:.1%}",
                  file=sys.stderr)
    result = {"store": args.store, "modules": len(chosen), "kinds": args.kind, "probe_set": probes.name,
              "settings": rows}
    print(f"wrote {common.write_json(args.out / 'pass_settings.json', result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
