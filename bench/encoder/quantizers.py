"""Vocabularies side by side: how much of the spectrum each quantizer keeps, per program kind and size bucket.

    python bench/encoder/quantizers.py --fit STORE[:SPLIT] [--fit ...] --eval STORE[:SPLIT] [--eval ...]
                                       [--probes NAME] [--max-fit-rows 200000] [--out DIR]

Fits every configuration on the reaction rows of the --fit stores (their train split unless :SPLIT is given)
and measures it on the --eval stores (their test split by default): relative reconstruction error (sum of
squared errors over the rows' own spread around the fit rows' mean; 0 is perfect, 1 predicts the mean row),
per kind (small, real) x size bucket and per sub-space group of features, and code usage (share of codes used,
perplexity) on the evaluation rows. Configurations:

- ``pq-M8`` (the paper's and today's default: 8 sub-spaces of 7 features, 256 codes each), ``pq-M14``, ``pq-M28``;
- ``opq-M8``: an OPQ rotation learned before the 8 sub-spaces (faiss ``OPQMatrix``);
- ``rq-2x8``: two-level residual: ``pq-M8``, then another ``pq-M8`` on what it left (16 codes per row).

Bytes per row: M codes of 8 bits (16 for rq-2x8). Writes ``quantizers-fit-KIND.json`` in --out (default
bench/encoder/results) and prints a markdown table.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def rows_of(spec: str, default_split: str, probes):
    """(rows float32 (N * P, 56), kind per row, bucket per row) of a STORE[:SPLIT]."""
    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import size_bucket

    store, _, split = spec.partition(":")
    corpus = Corpus(store)
    split = split or default_split
    shas = corpus.split(split) if split != "all" else None
    found, spectra = corpus.spectra(probes, shas=shas)
    sizes = common.instruction_counts(corpus)
    kinds = corpus.program_kinds()
    ok = np.isfinite(spectra).all(axis=(1, 2))
    found = [s for s, k in zip(found, ok) if k]
    spectra = spectra[ok]
    p = spectra.shape[1]
    kind = np.repeat([kinds.get(s, "small") for s in found], p)
    bucket = np.repeat([size_bucket(sizes[s]) for s in found], p)
    return spectra.reshape(-1, spectra.shape[-1]).astype(np.float32), kind, bucket, len(found)


class PQ:
    def __init__(self, m: int, opq: bool = False, levels: int = 1, seed: int = 0):
        self.m, self.opq, self.levels, self.seed = m, opq, levels, seed

    @property
    def bytes_per_row(self) -> int:
        return self.m * self.levels

    def fit(self, x):
        import faiss

        self.rotation = None
        if self.opq:
            self.rotation = faiss.OPQMatrix(x.shape[1], self.m)
            self.rotation.niter = 25
            self.rotation.train(x)
            x = self.rotation.apply_py(x)
        self.pqs = []
        residual = x.copy()
        for _ in range(self.levels):
            pq = faiss.ProductQuantizer(x.shape[1], self.m, 8)
            pq.cp.seed = self.seed
            pq.cp.niter = 25
            pq.train(residual)
            self.pqs.append(pq)
            residual = residual - pq.decode(pq.compute_codes(residual))
        return self

    def round_trip(self, x):
        """(reconstruction in the original space, codes (N, M * levels))."""
        z = self.rotation.apply_py(x) if self.rotation is not None else x
        approx = np.zeros_like(z)
        codes = []
        for pq in self.pqs:
            c = pq.compute_codes(z - approx)
            codes.append(c)
            approx = approx + pq.decode(c)
        if self.rotation is not None:
            approx = self.rotation.reverse_transform(approx)
        return approx, np.concatenate(codes, axis=1)


CONFIGS = {"pq-M8": dict(m=8), "pq-M14": dict(m=14), "pq-M28": dict(m=28), "opq-M8": dict(m=8, opq=True),
           "rq-2x8": dict(m=8, levels=2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="append", required=True, metavar="STORE[:SPLIT]")
    parser.add_argument("--eval", action="append", required=True, metavar="STORE[:SPLIT]")
    parser.add_argument("--probes", default=None, help="probe set (default: the package default)")
    parser.add_argument("--fit-kind", choices=("all", "small", "real"), default="all",
                        help="fit on the rows of this program kind only (default all)")
    parser.add_argument("--max-fit-rows", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.embedding.probes import load_probes

    probes = load_probes(args.probes)
    fit_parts = [rows_of(s, "train", probes) for s in args.fit]
    eval_parts = [rows_of(s, "test", probes) for s in args.eval]
    fit = np.concatenate([p[0] for p in fit_parts])
    if args.fit_kind != "all":
        fit = fit[np.concatenate([p[1] for p in fit_parts]) == args.fit_kind]
    rng = np.random.default_rng(args.seed)
    if len(fit) > args.max_fit_rows:
        fit = fit[rng.choice(len(fit), args.max_fit_rows, replace=False)]
    x = np.concatenate([p[0] for p in eval_parts])
    kind = np.concatenate([p[1] for p in eval_parts])
    bucket = np.concatenate([p[2] for p in eval_parts])
    mean = fit.mean(axis=0)
    slices = {"all": np.ones(len(x), bool)}
    for k in ("small", "real"):
        for b in sorted(set(bucket[kind == k]), key=lambda b: ["<200", "200-1k", "1k-5k", "5k-50k", ">50k"].index(b)):
            slices[f"{k} {b}"] = (kind == k) & (bucket == b)
    results = {}
    for name, config in CONFIGS.items():
        start = time.perf_counter()
        q = PQ(seed=args.seed, **config).fit(fit)
        approx, codes = q.round_trip(x)
        fit_approx, _ = q.round_trip(fit)
        err = np.square(x - approx, dtype=np.float64).sum(axis=1)
        spread = np.square(x - mean, dtype=np.float64).sum(axis=1)
        per_slice = {s: float(err[m].sum() / max(spread[m].sum(), 1e-12)) for s, m in slices.items() if m.any()}
        per_feature_block = [float(np.square(x[:, j:j + 7] - approx[:, j:j + 7]).sum()
                                   / max(np.square(x[:, j:j + 7] - mean[j:j + 7]).sum(), 1e-12))
                             for j in range(0, 56, 7)]
        usage = [float(len(np.unique(codes[:, j])) / 256) for j in range(codes.shape[1])]
        perplexity = []
        for j in range(codes.shape[1]):
            p = np.bincount(codes[:, j], minlength=256).astype(np.float64)
            p = p[p > 0] / p.sum()
            perplexity.append(float(np.exp(-(p * np.log(p)).sum())))
        results[name] = {"bytes_per_row": q.bytes_per_row, "fit_error": float(
            np.square(fit - fit_approx, dtype=np.float64).sum() / np.square(fit - mean, dtype=np.float64).sum()),
            "eval_error": per_slice, "eval_error_by_feature_block": per_feature_block,
            "code_usage_mean": float(np.mean(usage)), "perplexity_mean": float(np.mean(perplexity)),
            "seconds": time.perf_counter() - start}
        print(f"{name}: fit {results[name]['fit_error']:.3f} eval {per_slice['all']:.3f} "
              f"({results[name]['seconds']:.0f} s)", file=sys.stderr)
    record = {"config": {"fit": args.fit, "fit_kind": args.fit_kind, "eval": args.eval, "probes": probes.name, "fit_rows": len(fit),
                         "eval_rows": len(x), "fit_modules": sum(p[3] for p in fit_parts),
                         "eval_modules": sum(p[3] for p in eval_parts),
                         "eval_rows_by_slice": {s: int(m.sum()) for s, m in slices.items()}},
              "results": results}
    path = common.write_json(args.out / f"quantizers-fit-{args.fit_kind}.json", record)
    names = list(results)
    print("| slice (eval rows) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| bytes per row | " + " | ".join(str(results[n]["bytes_per_row"]) for n in names) + " |")
    print("| fit rows | " + " | ".join(f"{results[n]['fit_error']:.3f}" for n in names) + " |")
    for s in slices:
        if s in results[names[0]]["eval_error"]:
            print(f"| {s} ({int(slices[s].sum())}) | " + " | ".join(f"{results[n]['eval_error'][s]:.3f}"
                                                                     for n in names) + " |")
    print("| code usage (share of 256) | " + " | ".join(f"{results[n]['code_usage_mean']:.2f}" for n in names) + " |")
    print("| perplexity | " + " | ".join(f"{results[n]['perplexity_mean']:.0f}" for n in names) + " |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
