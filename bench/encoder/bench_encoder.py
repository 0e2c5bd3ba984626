"""Benchmark of the encoder path: embed latency and its split between spectrum and encoder, embed_many
throughput with 1 and 2 workers, encoder throughput (per-module forward as embed runs it, and batched), and
pretraining throughput on this machine's CPU (and CUDA when present).

    python bench/encoder/bench_encoder.py [--modules 32] [--compare NAME=CHECKPOINT ...] [--out DIR]

``--compare`` times one module's embed (spectrum and encoder) with other encoders in the same run, as ratios
against the shipped one (a checkpoint on another probe set, another vocabulary or reaction).

Modules are small C programs the benchmark writes itself (loops over arrays of different shapes), compiled with
clang-19 as `load_module` does. Writes ``encoder.json`` in --out (default bench/encoder/results).
"""

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

os.environ.setdefault("BPQ_NO_CACHE", "1")   # measure the probes every time (spectra/bench_cache.py times the cache)

import behavioral_pq as bpq  # noqa: E402
from behavioral_pq.core.engine import Engine
from behavioral_pq.embedding.encoder import load_encoder
from behavioral_pq.embedding.model import PQBert, PQBertConfig, mask_codes, masked_lm_loss


def programs(directory: Path, count: int):
    for i in range(count):
        (directory / f"k{i:03d}.c").write_text(textwrap.dedent(f"""\
            double a[{64 + i}], b[{64 + i}];
            int pick(int x) {{ return x % {3 + i % 7} == 0 ? x / 2 : x * 3 + 1; }}
            double kernel{i}(int n, int m) {{
              double s = 0;
              for (int r = 0; r < m; r++)
                for (int k = 0; k < n && k < {64 + i}; k++) {{
                  a[k] = a[k] * {i % 5 + 1}.5 + b[(k + r) % {64 + i}];
                  if (pick(k) > {i}) s += a[k]; else s -= b[k] / (k + 1);
                }}
              return s;
            }}
            """))
        yield bpq.load_module(directory / f"k{i:03d}.c")


def embed_cost(encoder, module, engine) -> dict:
    """Seconds of one module's spectrum and of the encoder on it (medians of warm runs)."""
    bpq.spectrum(module, encoder.probe_set, engine=engine)
    spectrum_s = common.median_seconds(lambda: bpq.spectrum(module, encoder.probe_set, engine=engine), 5)
    s = bpq.spectrum(module, encoder.probe_set, engine=engine)[None]
    original = None if encoder.reaction == "log-relative" else bpq.autophase(module)[None]
    encode_s = common.median_seconds(lambda: encoder.embed_spectra(s, original), 20)
    return {"instructions": module.instruction_count, "probes": encoder.probe_set.num_probes,
            "spectrum_s": round(spectrum_s, 4), "encoder_s": round(encode_s, 4),
            "seconds": round(spectrum_s + encode_s, 4), "encoder_share": round(encode_s / (spectrum_s + encode_s), 4)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", type=int, default=32)
    parser.add_argument("--compare", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="another encoder whose embed cost is measured beside the shipped one; repeatable")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()
    torch.manual_seed(0)
    encoder = load_encoder()
    with tempfile.TemporaryDirectory() as tmp:
        modules = list(programs(Path(tmp), args.modules))
    results = {"modules": len(modules), "median_instructions": int(np.median([m.instruction_count for m in modules])),
               "threads": torch.get_num_threads(), "checkpoint": str(encoder)}

    # 1. one module: spectrum vs encoder share (one engine worker, warm), for each encoder compared
    engine = Engine(1)
    try:
        m = modules[len(modules) // 2]
        results["embed_one"] = embed_cost(encoder, m, engine)
        for item in args.compare:
            name, _, path = item.partition("=")
            other = embed_cost(load_encoder(path), m, engine)
            other["seconds_vs_shipped"] = round(other["seconds"] / results["embed_one"]["seconds"], 3)
            results[f"embed_one_{name}"] = other
    finally:
        engine.close()

    # 2. embed_many throughput, 1 vs 2 workers
    for workers in (1, 2):
        encoder.embed_many(modules[:2], workers=workers)
        seconds = common.median_seconds(lambda: encoder.embed_many(modules, workers=workers), 2)
        results[f"embed_many_{workers}_workers"] = {"seconds": round(seconds, 2),
                                                    "modules_per_s": round(len(modules) / seconds, 2)}
    results["embed_many_speedup_2_vs_1"] = round(results["embed_many_2_workers"]["modules_per_s"]
                                                 / results["embed_many_1_workers"]["modules_per_s"], 2)

    # 3. encoder throughput: per-module forward (what embed does) vs batches of 64
    shape = (256, encoder.model.config.num_probes, encoder.model.config.num_subspaces)
    codes = np.random.default_rng(0).integers(0, 256, size=shape).astype(np.uint8)
    rows = np.zeros(shape[:2] + (56,), np.float32)          # what a count pooling reads its tail from
    per_module = common.median_seconds(lambda: encoder.embed_inputs(codes, rows=rows), 3)
    with torch.inference_mode():
        x = torch.from_numpy(codes.astype(np.int64))
        batched = common.median_seconds(lambda: [encoder.model.embed(x[i:i + 64]) for i in range(0, len(x), 64)], 3)
    results["encoder"] = {"per_module_sequences_per_s": round(len(codes) / per_module, 1),
                          "batched64_sequences_per_s": round(len(codes) / batched, 1),
                          "batched_speedup": round(per_module / batched, 2)}

    # 4. pretraining throughput (small preset, batch 64, P = 100)
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        for preset in ("small", "base"):
            model = PQBert(PQBertConfig.preset(preset)).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            batch = torch.randint(0, 256, (64, 100, 8))
            inputs, labels = mask_codes(batch, 0.15, torch.Generator().manual_seed(0))
            inputs, labels = inputs.to(device), labels.to(device)

            def step():
                loss, *_ = masked_lm_loss(model, inputs, labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if device == "cuda":
                    torch.cuda.synchronize()

            step()
            seconds = common.median_seconds(step, 5)
            results[f"pretrain_{preset}_{device}"] = {
                "step_s": round(seconds, 3), "sequences_per_s": round(64 / seconds, 1),
                "subword_tokens_per_s": round(64 * 100 * 8 / seconds)}

    common.write_json(args.out / "encoder.json", results)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
