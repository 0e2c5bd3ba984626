"""Best pass of the module as built on real programs: can any head beat the constant prior?

    python bench/encoder/best_pass_losses.py STORE [--seeds 0,1,2] [--max-epochs 60] [--out DIR]

Heads as ``bpq evaluate --score-split valid`` trains them (seven eighths of the train programs, early stopping on
the other eighth, scored on valid; test is not read), on five representations (the shipped embedding, the raw
spectrum, Autophase as log1p, and each of the first two with Autophase appended), with two losses:

- ``set``: the shipped :class:`BestPassClassifier` (log of the softmax mass on the module's set of best passes);
- ``multi-label``: one sigmoid per pass, "is this pass among the best" (binary cross-entropy), whose argmax is the
  pass most likely to be in the set when the outputs are calibrated: what Top-1 against a set rewards.

Scores: Top-1 (the predicted pass is in the set) on the valid split's real and small modules, next to the prior
(the most frequent best pass of the heads' train items). Writes ``best-pass-losses-valid.json`` in --out (default
bench/encoder/results).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def multi_label_classifier():
    import torch

    from behavioral_pq.tasks.estimators import BestPassClassifier, set_membership

    class MultiLabelBestPass(BestPassClassifier):
        """One sigmoid per pass: whether it is among the module's best."""

        def _loss(self, output, target):
            return torch.nn.functional.binary_cross_entropy_with_logits(output, target.float())

        def _output_bias(self, y):
            share = np.clip(set_membership(y, self.num_classes).mean(axis=0), 1e-4, 1 - 1e-4)
            return np.log(share / (1 - share))

    return MultiLabelBestPass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--max-epochs", type=int, default=60)
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__))
    args = parser.parse_args()

    from behavioral_pq.corpus import Corpus
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.reports.downstream import head_parts
    from behavioral_pq.tasks.datasets import embeddings, module_items
    from behavioral_pq.tasks.estimators import BestPassClassifier, TrainSettings, class_frequencies, top_k_accuracy

    encoder = load_encoder()
    seeds = [int(s) for s in args.seeds.split(",")]
    kind_of = Corpus(args.store).program_kinds()
    parts = head_parts(module_items(args.store, encoder.probe_set), kind_of, score_split="valid")
    sets = {name: part.best_pass_sets() for name, part in parts.items()}
    scored = parts["test"]                                       # the store's valid split (head_parts' naming)
    real = np.array([kind_of.get(g) == "real" for g in scored.groups])

    def features(part):
        autophase = np.log1p(part.autophase).astype(np.float32)
        pqbert, raw = embeddings(part, encoder), part.spectra.reshape(len(part), -1)
        return {"pqbert": pqbert, "raw spectrum": raw, "autophase": autophase,
                "raw spectrum + autophase": np.concatenate([raw, autophase], 1),
                "pqbert + autophase": np.concatenate([pqbert, autophase], 1)}

    X = {name: features(part) for name, part in parts.items()}

    def top1(scores, mask):
        return top_k_accuracy(scores[mask], [sets["test"][i] for i in np.flatnonzero(mask)], 1) * 100

    prior = np.tile(class_frequencies(sets["train"], 124), (len(scored), 1))
    result = {"store": str(Path(args.store).resolve()), "encoder": str(encoder.path), "seeds": seeds,
              "items": {"real": int(real.sum()), "small": int((~real).sum())},
              "prior": {"real": top1(prior, real), "small": top1(prior, ~real)}, "heads": {}}
    losses = {"set": BestPassClassifier, "multi-label": multi_label_classifier()}
    for rep in X["test"]:
        for loss, cls in losses.items():
            runs = []
            for seed in seeds:
                head = cls(TrainSettings(max_epochs=args.max_epochs, seed=seed))
                head.fit(X["train"][rep], sets["train"], X["valid"][rep], sets["valid"])
                scores = head.predict_proba(X["test"][rep])      # argmax: the same under softmax or sigmoid
                runs.append({"real": top1(scores, real), "small": top1(scores, ~real)})
            entry = {k: [r[k] for r in runs] for k in ("real", "small")}
            result["heads"][f"{rep} / {loss}"] = entry
            print(f"{rep} / {loss}: " + ", ".join(f"{k} {np.mean(v):.1f} ± {np.std(v):.1f}" for k, v in entry.items()),
                  file=sys.stderr)
    path = common.write_json(args.out / "best-pass-losses-valid.json", result)
    print(f"\n| representation / loss | real ({result['items']['real']}) | small ({result['items']['small']}) |\n"
          f"|---|---:|---:|\n| prior | {result['prior']['real']:.1f} | {result['prior']['small']:.1f} |")
    for name, entry in result["heads"].items():
        print(f"| {name} | " + " | ".join(f"{np.mean(entry[k]):.1f} ± {np.std(entry[k]):.1f}"
                                         for k in ("real", "small")) + " |")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
