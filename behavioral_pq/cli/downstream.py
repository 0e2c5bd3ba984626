"""``bpq predict``, ``bpq train`` and ``bpq evaluate``: the downstream predictors and their evaluation."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from behavioral_pq.cli.common import (
    add_program_arguments,
    batch_exit_code,
    check_output_folder,
    error_line,
    program_flags,
    program_inputs,
)

PREDICT_EPILOG = """\
examples:
  bpq predict best-pass prog.c            # the 5 most likely best next passes, with probabilities
  bpq predict best-pass prog.ll -k 10 --json
  bpq predict oz prog.c                   # predicted share of instructions -Oz removes
  bpq predict oz --link main.c util.c     # one program: the files compiled and linked into one module
  bpq predict oz --compile-commands build/compile_commands.json --program minigzip

The shipped predictors sit on the shipped encoder; a predictor trained on another encoder needs it:
  bpq predict oz prog.c --predictor my-oz --checkpoint my-encoder
"""

TRAIN_EPILOG = """\
examples:
  bpq train oz --corpus store/ --out my-oz
  bpq train best-pass --corpus store/ --states states/ --out my-best-pass
  bpq train oz --corpus store/ --out my-oz-tuned --fine-tune     # PQ-BERT trained with the head, end to end

The corpus must be labelled (bpq corpus labels) and carry spectra for the encoder's probe set (bpq corpus
spectra); with a split (bpq corpus split) training uses train and stops early on valid. --states adds
intermediate states (bpq corpus states) to the best-pass training data.

By default the encoder is frozen: the predictor is an MLP on its embeddings. --fine-tune trains the encoder's
PQ-BERT together with the head (at --encoder-lr, a tenth of the head's rate by default) and stores the tuned weights
in the predictor folder; it costs a forward and backward pass of the encoder per item and epoch (minutes per epoch
on a few thousand items on a CPU) and is loaded like any predictor (bpq predict --predictor DIR).
"""

EVALUATE_EPILOG = """\
example (the project's report, downstream/):
  bpq evaluate --corpus store/ --states states/ --out downstream/ \\
      --ablation kmeans=runs/kmeans/encoder --ablation absolute=runs/absolute/encoder

Writes REPORT_DIR/report.md, report.json and a t-SNE PNG. Task 1b needs --states. --ir2vec, --inst2vec and
--programl add the field's baselines that read the module (ProGraML as statistics of its graphs, no GNN).
"""


def _encoder(args):
    from behavioral_pq.embedding.encoder import load_encoder

    return load_encoder(args.checkpoint) if args.checkpoint else None


def cmd_predict(args) -> int:
    from behavioral_pq.core.module import load_module
    from behavioral_pq.tasks.predictors import load_predictor, predict_best_pass, predict_oz_benefit

    kind = "best-pass" if args.target == "best-pass" else "oz-benefit"
    inputs = program_inputs(args)
    predictor = load_predictor(args.predictor, kind=kind, encoder=_encoder(args))
    flags = program_flags(args)
    results, errors = [], []
    for path, item in inputs:
        try:
            module = load_module(item, flags=flags)
            if kind == "best-pass":
                value = [p._asdict() for p in predict_best_pass(module, args.k, predictor=predictor)]
            else:
                value = predict_oz_benefit(module, predictor=predictor)
            results.append({"file": path, "prediction": value})
            errors.append(None)
        except (ValueError, OSError, RuntimeError) as exc:
            errors.append(exc)
            results.append({"file": path, "error": str(exc)})
            print(error_line(exc, path), file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            if "error" in r:
                continue
            if kind == "best-pass":
                ranked = "  ".join(f"{p['name']} {p['score']:.3f}" for p in r["prediction"])
                print(f"{r['file']}: {ranked}")
            else:
                print(f"{r['file']}: -Oz would remove about {r['prediction'] * 100:.1f}% of the instructions")
    return batch_exit_code(errors)


def cmd_train(args) -> int:
    from behavioral_pq.tasks.predictors import train_predictor

    check_output_folder(args.out)
    kind = "best-pass" if args.target == "best-pass" else "oz-benefit"
    if args.states and kind != "best-pass":
        raise ValueError("--states applies to best-pass only")
    from behavioral_pq.tasks.estimators import TrainSettings
    from behavioral_pq.tasks.finetune import FineTuneSettings

    fine_tune, settings = None, TrainSettings(seed=args.seed)
    if args.fine_tune:
        fine_tune = FineTuneSettings(encoder_learning_rate=args.encoder_lr,
                                     max_epochs=args.max_epochs or FineTuneSettings.max_epochs)
    elif args.encoder_lr != FineTuneSettings.encoder_learning_rate:
        raise ValueError("--encoder-lr applies with --fine-tune only")
    elif args.max_epochs:
        settings = TrainSettings(seed=args.seed, max_epochs=args.max_epochs)
    say = None if args.json else (lambda line: print(f"[fine-tune] {line}", file=sys.stderr, flush=True))
    summary = train_predictor(kind, args.corpus, args.out, encoder=_encoder(args), states=args.states,
                              overwrite=args.overwrite, settings=settings, fine_tune=fine_tune, progress=say)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        items = summary["training"]["items"]
        metrics = ", ".join(f"{k} {v:.3f}" for k, v in summary["metrics"].items()) or "no valid split"
        how = "fine-tuned with the encoder" if summary["training"]["fine_tuned"] else "trained"
        print(f"{kind} predictor -> {args.out}: {how} on {items['train']} items, stopped on {items['valid']} "
              f"(best epoch {summary['training']['best_epoch']}); {metrics}")
    return 0


def cmd_evaluate(args) -> int:
    from behavioral_pq.reports.downstream import EvaluationConfig, evaluate
    from behavioral_pq.tasks.estimators import TrainSettings

    check_output_folder(args.out)
    ablations = {}
    for item in args.ablation or []:
        name, _, path = item.partition("=")
        if not path:
            raise ValueError(f"--ablation takes NAME=DIR, not {item!r}")
        ablations[name] = path
    try:
        seeds = tuple(int(s) for s in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--seeds takes comma-separated integers, not {args.seeds!r}") from None
    config = EvaluationConfig(seeds=seeds, train_on=args.train_on, score_split=args.score_split,
                              linear_probe=not args.no_linear_probe, ir2vec=args.ir2vec, inst2vec=args.inst2vec,
                              programl=args.programl, train=TrainSettings(max_epochs=args.max_epochs))
    say = None if args.quiet else (lambda line: print(f"[evaluate] {line}", file=sys.stderr, flush=True))
    report = evaluate(args.corpus, args.out, states=args.states, encoder=_encoder(args), ablations=ablations,
                      config=config, progress=say)
    if args.json:
        print(json.dumps(report["targets"], indent=1))
    else:
        met = sum(c["met"] for c in report["targets"])
        print(f"report -> {Path(args.out) / 'report.md'} ({met} of {len(report['targets'])} targets met, "
              f"{report['seconds']:.0f} s)")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("predict", help="best next pass or -Oz benefit of modules (shipped predictors)",
                       epilog=PREDICT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=("best-pass", "oz"), help="what to predict")
    add_program_arguments(p, several_modules=True)
    p.add_argument("-k", type=int, default=5, help="passes to list (best-pass; default 5)")
    p.add_argument("--predictor", metavar="DIR", help="predictor folder (default: the shipped one)")
    p.add_argument("--checkpoint", metavar="DIR", help="encoder the predictor was trained on (default: shipped)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("train", help="train a best-pass or -Oz-benefit predictor on a corpus", epilog=TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", choices=("best-pass", "oz"))
    p.add_argument("--corpus", required=True, metavar="STORE", help="labelled corpus store with spectra")
    p.add_argument("--out", required=True, metavar="DIR", help="predictor folder to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out even when it holds something else than a predictor")
    p.add_argument("--states", metavar="DIR", help="state folder to add (best-pass)")
    p.add_argument("--checkpoint", metavar="DIR", help="encoder to train on (default: the shipped one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fine-tune", action="store_true",
                   help="train the encoder's PQ-BERT together with the head and save the tuned weights with it")
    p.add_argument("--encoder-lr", type=float, default=1e-4, metavar="LR",
                   help="the encoder's learning rate with --fine-tune (default 1e-4; the head's is 1e-3)")
    p.add_argument("--max-epochs", type=int, metavar="N",
                   help="epochs at most, early stopping on valid (default 200, or 30 with --fine-tune)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="every downstream task, baseline and ablation; Markdown + JSON report",
                       epilog=EVALUATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, metavar="STORE", help="split, labelled corpus store with spectra")
    p.add_argument("--out", required=True, metavar="REPORT_DIR")
    p.add_argument("--states", metavar="DIR", help="state folder for task 1b (bpq corpus states)")
    p.add_argument("--checkpoint", metavar="DIR", help="encoder to judge (default: the shipped one)")
    p.add_argument("--ablation", action="append", metavar="NAME=DIR",
                   help="another encoder judged beside it (kmeans=DIR, absolute=DIR, or any NAME, e.g. a "
                        "log-relative+module run); repeatable")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated head seeds (default 0,1,2)")
    p.add_argument("--max-epochs", type=int, default=200, metavar="N", help="MLP epochs at most (early stopping)")
    p.add_argument("--train-on", choices=("all", "small", "real"), default="all",  # reports.downstream.TRAIN_ON
                   help="programs the heads learn from (train and valid splits): all, or only small or only real "
                        "ones; test is always scored whole (default all)")
    p.add_argument("--score-split", choices=("test", "valid"), default="test",  # reports.downstream.SCORE_SPLITS
                   help="split the heads are scored on: test (the report), or valid to choose an encoder or a "
                        "setting without reading test (the heads then stop early on a hashed eighth of the train "
                        "programs; default test)")
    p.add_argument("--no-linear-probe", action="store_true",
                   help="leave out the linear probe (logistic / ridge with inner cross-validation on every "
                        "representation), which takes minutes per representation on a large store")
    p.add_argument("--ir2vec", action="store_true",
                   help="add IR2Vec program vectors as a baseline (the optional extra behavioral-pq[ir2vec]; "
                        "states are replayed to read their IR)")
    p.add_argument("--inst2vec", action="store_true",
                   help="add inst2vec as a baseline: the mean of the embeddings of a module's statements (200 dims; "
                        "its data installed by python scripts/inst2vec_data.py; states are replayed to read their "
                        "IR)")
    p.add_argument("--programl", action="store_true",
                   help="add ProGraML as a baseline: statistics of each module's ProGraML graph (counts of nodes, "
                        "edges, opcodes, degrees and operand positions, log1p; no GNN; states are replayed)")
    p.add_argument("--json", action="store_true", help="print the target checks as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_evaluate)
