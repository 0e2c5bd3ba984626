"""Frozen embeddings against an encoder fine-tuned end to end, on the -Oz benefit of a store's held-out split.

    python bench/finetune.py STORE [--checkpoint DIR] [--seeds 0,1,2] [--split test] [--max-epochs 30]
                             [--out bench/results]

Both sides see the same items (the store's labelled modules with spectra for the encoder's probe set; train to
fit, valid for early stopping, the held-out split to score) and the same head (the shipped -Oz estimator's MLP:
D -> 256 -> 128 -> 64 -> 1, MAE loss):

- ``frozen``: the head on the encoder's embeddings (``OzBenefitRegressor``, what ``bpq train oz`` ships);
- ``fine-tuned``: the head and PQ-BERT trained together from the checkpoint's weights on the modules' codes
  (the quantizer stays fixed: codes are the input), the encoder at a tenth of the head's learning rate;
- ``prior``: the train split's mean benefit.

Mean absolute error in points of ``(IC0 - IC_Oz) / IC0``, per slice (kind x size bucket), mean and standard
deviation over head seeds. Writes ``finetune-SPLIT.json`` and prints a Markdown table.
"""

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np


def fine_tune(encoder, codes, y, train, valid, *, seed, max_epochs, patience=5, batch_size=64):
    """Predictions (N,) of PQ-BERT + MLP head trained end to end on codes[train], stopped early on codes[valid]."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = copy.deepcopy(encoder.model).float()
    with torch.inference_mode():
        start = torch.cat([model.embed(torch.from_numpy(codes[i:i + 256].astype(np.int64)), encoder.pooling)
                           for i in range(0, len(codes), 256)])
    mean, scale = start[train].mean(0), start[train].std(0) + 1e-6     # the frozen head's standardization
    sizes = [encoder.dim, 256, 128, 64, 1]
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers += [torch.nn.ReLU(), torch.nn.Dropout(0.1)]
    head = torch.nn.Sequential(*layers)
    with torch.no_grad():
        head[-1].bias.fill_(float(np.median(y[train])))

    def forward(index, training):
        model.train(training)
        head.train(training)
        x = torch.from_numpy(codes[index].astype(np.int64))
        return head((model.embed(x, encoder.pooling) - mean) / scale)[:, 0]

    def predict(index):
        with torch.inference_mode():
            return np.concatenate([forward(index[i:i + 256], False).numpy() for i in range(0, len(index), 256)])

    optimizer = torch.optim.AdamW([{"params": head.parameters(), "lr": 1e-3},
                                   {"params": model.parameters(), "lr": 1e-4}], weight_decay=1e-5)
    target = torch.from_numpy(y.astype(np.float32))
    train_index, valid_index = np.flatnonzero(train), np.flatnonzero(valid)
    best, best_state, waited, epochs = np.inf, None, 0, 0
    for epoch in range(max_epochs):
        epochs = epoch + 1
        for batch in np.array_split(rng.permutation(train_index), max(1, len(train_index) // batch_size)):
            optimizer.zero_grad()
            loss = (forward(batch, True) - target[batch]).abs().mean()
            loss.backward()
            optimizer.step()
        score = float(np.mean(np.abs(predict(valid_index) - y[valid_index])))
        if score < best:
            best, waited = score, 0
            best_state = (copy.deepcopy(model.state_dict()), copy.deepcopy(head.state_dict()))
        else:
            waited += 1
            if waited >= patience:
                break
    model.load_state_dict(best_state[0])
    head.load_state_dict(best_state[1])
    return predict(np.arange(len(codes))), epochs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()

    import torch

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.corpus.buckets import slices
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.datasets import embeddings, module_items
    from behavioral_pq.tasks.estimators import OzBenefitRegressor, TrainSettings

    torch.set_num_threads(max(1, torch.get_num_threads()))
    encoder = load_encoder(args.checkpoint)
    items = module_items(args.store, encoder.probe_set, splits=["train", "valid", args.split])
    splits = np.array(items.splits)
    train, valid, test = splits == "train", splits == "valid", splits == args.split
    kinds = Corpus(args.store).program_kinds()
    y = np.asarray(items.oz_benefit(), np.float64)
    codes = encoder.codes(items.spectra)
    X = embeddings(items, encoder)
    masks = slices([kinds.get(h, "small") for h in np.array(items.ids)[test]], items.instruction_count[test])
    seeds = [int(s) for s in args.seeds.split(",")]
    scores = {"prior": [], "frozen": [], "fine-tuned": []}
    log = []
    for seed in seeds:
        start = time.perf_counter()
        frozen = OzBenefitRegressor(TrainSettings(seed=seed)).fit(X[train], y[train], X[valid], y[valid])
        predictions = {"prior": np.full(test.sum(), y[train].mean()), "frozen": frozen.predict(X[test])}
        frozen_seconds = time.perf_counter() - start
        start = time.perf_counter()
        tuned, epochs = fine_tune(encoder, codes, y, train, valid, seed=seed, max_epochs=args.max_epochs)
        predictions["fine-tuned"] = tuned[test]
        log.append({"seed": seed, "frozen_seconds": frozen_seconds, "fine_tune_seconds": time.perf_counter() - start,
                    "fine_tune_epochs": epochs})
        for name, p in predictions.items():
            error = np.abs(p - y[test]) * 100.0
            scores[name].append({s: float(error[m].mean()) for s, m in masks.items()})
        print(f"seed {seed}: " + ", ".join(f"{n} {scores[n][-1]['all']:.2f}" for n in scores), flush=True)

    table = {name: {s: (float(np.mean([r[s] for r in runs])), float(np.std([r[s] for r in runs])))
                    for s in masks} for name, runs in scores.items()}
    result = {"config": {"store": str(Path(args.store).resolve()), "checkpoint": str(encoder.path),
                         "split": args.split, "seeds": seeds, "max_epochs": args.max_epochs,
                         "items": {"train": int(train.sum()), "valid": int(valid.sum()), "test": int(test.sum())},
                         "command": " ".join(sys.argv)},
              "runs": log, "mae_points": table, "slice_items": {s: int(m.sum()) for s, m in masks.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"finetune-{args.split}.json").write_text(json.dumps(result, indent=1))
    print(f"\n-Oz benefit MAE (points), {args.split} split, mean ± std over seeds {seeds}\n")
    print("| slice | items | " + " | ".join(scores) + " |")
    print("|---|---:|" + "---:|" * len(scores))
    for s, m in masks.items():
        print(f"| {s} | {int(m.sum())} | " + " | ".join(f"{table[n][s][0]:.2f} ± {table[n][s][1]:.2f}"
                                                        for n in scores) + " |")
    print(f"wrote {out / f'finetune-{args.split}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
