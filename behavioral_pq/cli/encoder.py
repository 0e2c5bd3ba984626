"""``bpq embed`` and ``bpq pretrain`` (see behavioral_pq.embedding.encoder and behavioral_pq.training.pretraining)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from behavioral_pq.cli.common import (
    add_overwrite_argument,
    add_program_arguments,
    batch_exit_code,
    check_output,
    check_output_folder,
    error_line,
    program_flags,
    program_inputs,
    save_array,
)

EMBED_EPILOG = """\
examples:
  bpq embed prog.c                          # a short summary per module
  bpq embed a.ll b.bc c.c -o emb.npy        # float32 (N, D), row i for the i-th FILE (NaN if it failed)
  bpq embed prog.c --json                   # [{"file": ..., "embedding": [...]}]
  bpq embed --link main.c util.c            # one program: the files compiled and linked into one module
  bpq embed --compile-commands build/compile_commands.json --program minigzip   # one program of a project
  bpq embed prog.c --checkpoint runs/p1/encoder --pooling cls

A FILE that cannot be embedded is reported on stderr; the others still are (exit status 1; 2 when no FILE
could be read at all).
"""

PRETRAIN_EPILOG = """\
examples:
  bpq pretrain stores/main --out runs/p1                               # pretrain/default.toml settings
  bpq pretrain stores/main --out runs/p1 --config pretrain/default.toml --device cuda
  torchrun --nproc_per_node 2 -m behavioral_pq pretrain stores/main --out runs/p2   # data parallel (gloo on CPU)

The store needs spectra for the probe set (bpq corpus spectra STORE). The run folder gets the quantizer, the
encoded corpus (codes/*.parquet), log.csv, eval.jsonl, training-curve.png, train-state.pt (run the same command
again to resume) and, at the end, the encoder checkpoint in OUT/encoder.
"""


def cmd_embed(args) -> int:
    import numpy as np

    from behavioral_pq.embedding.encoder import load_encoder

    output = check_output(args.output, args.overwrite)
    inputs = program_inputs(args)
    names = [name for name, _ in inputs]
    encoder = load_encoder(args.checkpoint, pooling=args.pooling)
    batch = encoder.embed_batch([item for _, item in inputs], workers=args.workers,
                                progress=len(inputs) > 1 and not args.quiet, flags=program_flags(args),
                                sample_above=None if args.exact else args.sample_above)
    vectors, errors = batch.embeddings, batch.errors
    for file, error in zip(names, errors):
        if error is not None:
            print(error_line(error, file), file=sys.stderr)
    for file, lost in zip(names, batch.degraded):
        if lost:
            print(f"bpq: warning: {file}: measured without {len(lost)} pass(es) that crash LLVM on it: "
                  + ", ".join(f"probe {d.probe} {d.removed}" for d in lost), file=sys.stderr)
    for file, share in zip(names, batch.sampled):
        if share is not None and not args.quiet:
            print(f"bpq: note: {file}: large module, spectrum measured on a function sample holding {share:.0%} of "
                  "its instructions (--exact measures it whole)", file=sys.stderr)
    if output:
        save_array(output, vectors)
    if args.json:
        print(json.dumps([{"file": f, "embedding": None if e is not None else v.tolist()}
                          for f, v, e in zip(names, vectors, errors)]))
    elif not args.output:
        for file, v, e in zip(names, vectors, errors):
            if e is None:
                print(f"{file}: D={len(v)} norm={np.linalg.norm(v):.3f} [{', '.join(f'{x:.3f}' for x in v[:6])}, ...]")
    elif not args.quiet:
        print(f"{len(names) - sum(e is not None for e in errors)} of {len(names)} embedded "
              f"-> {args.output} (float32 {vectors.shape})", file=sys.stderr)
    return batch_exit_code(errors)


def cmd_pretrain(args) -> int:
    from behavioral_pq.training.pretraining import PretrainConfig, pretrain

    check_output_folder(args.out)
    config = PretrainConfig.load(args.config) if args.config else PretrainConfig()
    summary = pretrain(args.store, args.out, config, probes=args.probes, device=args.device,
                       progress=not args.quiet, max_steps=args.max_steps, modules_like=args.modules_like)
    if args.json:
        print(json.dumps(summary, indent=1))
    elif "valid" in summary and summary["valid"]:
        accuracy = summary["valid"]["accuracy"]
        print(f"{summary['steps']} steps in {summary['train_seconds']:.0f} s; validation masked-code accuracy "
              f"{summary['valid']['accuracy_mean']:.3f} (heads {' '.join(f'{a:.2f}' for a in accuracy)}); "
              f"encoder: {Path(args.out) / 'encoder'}")
    else:
        print(f"stopped at step {summary['steps']} of {summary['max_steps']}; run again to resume")
    return 0


def add_parsers(sub) -> None:
    from behavioral_pq.embedding.sampling import LARGE_MODULE_INSTRUCTIONS as SAMPLE_ABOVE

    p = sub.add_parser("embed", help="embeddings of modules (the shipped encoder by default)", epilog=EMBED_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_program_arguments(p, several_modules=True)
    p.add_argument("--checkpoint", metavar="DIR", help="encoder checkpoint folder (default: the shipped one)")
    p.add_argument("--pooling", choices=("mean", "cls", "mean+counts", "mean+changes"),
                   help="mean of the probe states, [CLS], or the mean followed by each position's reaction in 8 "
                        "Autophase counts, log-relative (mean+counts) or as relative changes (mean+changes); "
                        "default: the checkpoint's")
    p.add_argument("--workers", type=int, metavar="N", help="engine worker processes for the spectra")
    p.add_argument("--exact", action="store_true", help="measure every module whole, however large (default: "
                   "modules above --sample-above instructions are measured on a sample of their functions)")
    p.add_argument("--sample-above", type=int, default=SAMPLE_ABOVE, metavar="N",
                   help=f"large-module threshold in IR instructions ({SAMPLE_ABOVE})")
    p.add_argument("-o", "--output", metavar="OUT.npy", help="save float32 (N, D) with numpy (to exactly OUT.npy)")
    add_overwrite_argument(p)
    p.add_argument("--json", action="store_true", help="print the embeddings as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("pretrain", help="pretrain PQ-BERT on a corpus store (resumable; torchrun for DDP)",
                       epilog=PRETRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="STORE")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder (created; resumed if it exists)")
    p.add_argument("--config", metavar="TOML",
                   help="[model] and [training] settings (default: the shipped encoder's, as pretrain/default.toml)")
    p.add_argument("--probes", metavar="F", help="probe-set JSON (default: the package's)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when available")
    p.add_argument("--max-steps", type=int, metavar="N", help="stop after N steps in this call (resume later)")
    p.add_argument("--modules-like", metavar="RUN", help="use exactly the train/valid/test modules of another run "
                   "(for ablations compared with it)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_pretrain)
