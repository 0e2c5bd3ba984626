"""What should PQ-BERT learn from? The module tower of a behavior model trained under each pretraining objective,
against the MLP towers, on modules and pipelines it never trained on; and its pooled output judged as an embedding.

    python bench/guidance/behavior_objectives.py prepare STORE --data ROWS --out DIR
    python bench/guidance/behavior_objectives.py train DIR [--device cuda] [--seeds 0,1] [--towers LIST]
        [--epochs 30] [--steps 60] [--stop-after SECONDS] [--results FILE.npz]
    python bench/guidance/behavior_objectives.py report DIR [--results FILE.npz ...] [--out FILE.json]

``prepare`` (needs LLVM's side of the package: the store, the encoder) writes everything the towers read as arrays:
the shipped encoder's codes of each measured module's spectrum, the MLP towers' rows, the measured gains (log
IC_Oz / IC of every pool pipeline; ``bpq ranker measure``), the pipelines' tokens, the split and the shipped
PQ-BERT's weights. ``train`` reads only that folder, torch and numpy (``behavioral_pq.training.behavior_model``), so
it runs where a GPU is and no compiler is; it fits one behavior model per tower and seed (the seed also draws the
20% of pipelines held out of training, as ``bpq ranker behavior`` does) and writes each model's per-module rank
correlation on the test modules x held-out pipelines, and what its module tower makes of every module. ``report``
judges those vectors as embeddings with one simple head each (ridge and 5-NN regression of the -Oz benefit, fitted
on train + valid, scored on test), next to the raw spectrum, the count tail and the shipped embedding.

The PQ-BERT objectives (``behavior_model.PQBERT_OBJECTIVES``): ``pqbert-frozen`` masked codes only (the shipped
pretraining; only the projection and the head learn), ``pqbert`` masked codes then behavior, ``pqbert-scratch``
behavior only, ``pqbert-joint`` masked codes and behavior together.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository, where the package is not installed

TOWERS = ("pqbert-frozen", "pqbert", "pqbert-scratch", "pqbert-joint", "spectrum", "counts", "none")


def prepare(args) -> None:
    import torch

    from behavioral_pq.corpus.buckets import size_buckets
    from behavioral_pq.corpus.reader import Corpus
    from behavioral_pq.embedding.encoder import load_encoder
    from behavioral_pq.tasks.guidance.behavior import load_inputs
    from behavioral_pq.tasks.guidance.ranker import load_ranker_data
    from behavioral_pq.training.behavior_model import pipeline_tokens

    corpus = Corpus(args.store)
    encoder = load_encoder(args.checkpoint) if args.checkpoint else load_encoder()
    data = load_ranker_data(args.data)
    inputs = load_inputs(corpus, data.shas, encoder)
    data = data.subset(inputs.shas)
    index = {s: i for i, s in enumerate(inputs.shas)}
    split = {n: np.array([index[s] for s in corpus.split(n) if s in index], np.int64)
             for n in ("train", "valid", "test")}
    sizes = corpus.modules(["sha256", "instruction_count"]).to_pydict()
    count_of = dict(zip(sizes["sha256"], sizes["instruction_count"]))
    counts = np.array([max(count_of[s], 1) for s in inputs.shas], np.float64)
    benefit = (counts - np.minimum(data.oz.astype(np.float64), counts * 10)) / counts
    hidden = encoder.model.config.hidden_size
    embedding = encoder.embed_spectra(inputs.spectra, inputs.autophase, batch_size=64)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out / "inputs.npz", codes=inputs.rows("pqbert"), spectrum=inputs.rows("spectrum").astype(np.float32),
        counts=inputs.rows("counts").astype(np.float32), gains=data.gains.astype(np.float32),
        tokens=pipeline_tokens(data.pool), train=split["train"], valid=split["valid"], test=split["test"],
        buckets=np.array(size_buckets(counts.astype(np.int64).tolist())))
    np.savez_compressed(out / "judge.npz", benefit=benefit, autophase=inputs.rows("autophase"),
                        embedding=embedding, encoder_mean=embedding[:, :hidden])
    torch.save({"config": encoder.model.config.to_dict(), "state": encoder.model.state_dict()}, out / "pqbert.pt")
    (out / "prepared.json").write_text(json.dumps({
        "store": str(args.store), "data": str(args.data), "pool": len(data.pool),
        "modules": {n: int(len(r)) for n, r in split.items()}, "encoder": str(args.checkpoint or "shipped")},
        indent=1) + "\n")
    print(f"wrote {out}: {len(inputs.shas)} modules ({', '.join(f'{n} {len(r)}' for n, r in split.items())}), "
          f"{len(data.pool)} pipelines")


def train(args) -> None:
    import types

    import torch

    from behavioral_pq.embedding.model import PQBert, PQBertConfig
    from behavioral_pq.training.behavior_model import (fit_behavior, held_out_columns, module_vectors, predict,
                                                       rank_correlations)

    folder = Path(args.folder)
    z = np.load(folder / "inputs.npz")
    saved = torch.load(folder / "pqbert.pt", map_location="cpu", weights_only=True)
    model = PQBert(PQBertConfig.from_dict(saved["config"]))
    model.load_state_dict(saved["state"])
    encoder = types.SimpleNamespace(model=model)
    rows = {"spectrum": z["spectrum"], "counts": z["counts"], "none": np.zeros((len(z["gains"]), 0), np.float32)}
    gains, tokens = z["gains"].astype(np.float64), z["tokens"]
    test, buckets = z["test"], z["buckets"]
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {"device": str(args.device or "cpu"), "runs": {}}
    if args.device and str(args.device).startswith("cuda"):
        results["gpu"] = torch.cuda.get_device_name(0)
    arrays = {}
    started = time.perf_counter()
    out = Path(args.results or folder / "results.npz")
    for seed in [int(s) for s in args.seeds.split(",")]:
        train_cols, held = held_out_columns(gains.shape[1], seed)
        for tower in args.towers.split(","):
            if args.stop_after and time.perf_counter() - started > args.stop_after:
                print(f"stopping before {tower} s{seed}: {args.stop_after} s spent", flush=True)
                break
            x = rows.get(tower, z["codes"])
            fit = fit_behavior(tower, x, gains, tokens, train_rows=z["train"], train_cols=train_cols,
                               valid_rows=z["valid"], valid_cols=held, encoder=encoder, epochs=args.epochs,
                               steps_per_epoch=args.steps, seed=seed, device=args.device)
            full = predict(fit.model, x[test], tokens)                                      # (T, K)
            rho = rank_correlations(full[:, held], gains[np.ix_(test, held)])
            name = f"{tower}/s{seed}"
            arrays[f"{name}/test"] = full
            arrays[f"{name}/valid"] = predict(fit.model, x[z["valid"]], tokens)
            results["runs"][name] = {
                "tower": tower, "seed": seed, "test_rho": float(np.nanmean(rho)),
                "test_rho_by_bucket": {str(b): float(np.nanmean(rho[buckets[test] == b]))
                                       for b in dict.fromkeys(buckets[test].tolist())},
                "valid_rho": max(h["valid_rho"] for h in fit.history), "best_epoch": fit.best_epoch,
                "seconds": round(fit.seconds, 1), "history": fit.history}
            if tower != "none":
                arrays[name] = module_vectors(fit.model, x)
            run = results["runs"][name]
            print(f"{name}: valid {run['valid_rho']:.3f}, test {run['test_rho']:.3f} ({fit.seconds:.0f} s)", flush=True)
            np.savez_compressed(out, **{k.replace("/", "__"): v for k, v in arrays.items()})
            out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out} and {out.with_suffix('.json')} in {time.perf_counter() - started:.0f} s")


def report(args) -> None:
    from behavioral_pq.tasks.guidance.behavior import probe_representations

    folder = Path(args.folder)
    z, judge = np.load(folder / "inputs.npz"), np.load(folder / "judge.npz")
    runs, vectors, predicted = {}, {}, {}
    for path in args.results or [str(folder / "results.npz")]:
        path = Path(path)
        runs.update(json.loads(path.with_suffix(".json").read_text())["runs"])
        with np.load(path) as v:
            for key in v.files:
                name = key.replace("__", "/")
                if name.endswith(("/test", "/valid")):
                    predicted[name] = v[key].astype(np.float64)
                else:
                    vectors[name] = v[key]
    fit_rows = np.concatenate([z["train"], z["valid"]])
    test, buckets = z["test"], z["buckets"]
    representations = {"raw spectrum": z["spectrum"], "count tail": z["counts"],
                       "encoder mean (shipped PQ-BERT)": judge["encoder_mean"],
                       "shipped embedding (mean+changes)": judge["embedding"]}
    representations.update({f"behavior {name}": v for name, v in sorted(vectors.items())})
    probes = probe_representations(representations, judge["benefit"], fit_rows, test, buckets[test])
    towers = list(dict.fromkeys(r["tower"] for r in runs.values()))
    table = {}
    for tower in towers:
        mine = [r for r in runs.values() if r["tower"] == tower]
        table[tower] = {"seeds": [r["seed"] for r in mine], "test_rho": float(np.mean([r["test_rho"] for r in mine])),
                        "valid_rho": float(np.mean([r["valid_rho"] for r in mine])),
                        "by_bucket": {b: float(np.mean([r["test_rho_by_bucket"][b] for r in mine]))
                                      for b in mine[0]["test_rho_by_bucket"]}}
    lines = [f"{len(fit_rows)} train + valid modules, {len(test)} test; "
             f"{z['gains'].shape[1]} pipelines, 20% held out per seed", "",
             "| module tower | seeds | valid rho | test rho | " + " | ".join(
                 f"test {b} (n={(buckets[test] == b).sum()})" for b in table[towers[0]]["by_bucket"]) + " |",
             "|---|---|---:|---:|" + "---:|" * len(table[towers[0]]["by_bucket"])]
    for tower, t in table.items():
        lines.append(f"| {tower} | {','.join(map(str, t['seeds']))} | {t['valid_rho']:.3f} | {t['test_rho']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in t["by_bucket"].values()) + " |")
    lines += ["", "-Oz benefit, one simple head per representation (test MAE in points):", "",
              "| representation | dims | ridge | 5-NN |", "|---|---:|---:|---:|"]
    for name, p in probes.items():
        lines.append(f"| {name} | {p['dim']} | {p['ridge']:.2f} | {p['knn']:.2f} |")
    guidance = choose_in_pool(z, runs, predicted, args.budgets)
    lines += ["", "Guidance in the pool, test modules: geomean IC_Oz / IC of the best among each choice's picks, and "
              "the per-module difference to the global ranking (95% bootstrap):", "",
              "| choice | " + " | ".join(f"budget {b}" for b in args.budgets) + " |",
              "|---|" + "---:|" * len(args.budgets)]
    for name, by in guidance.items():
        lines.append(f"| {name} | " + " | ".join(
            f"{by[b]['ratio']:.4f}" + ("" if "diff" not in by[b] else
                                       f" ({by[b]['diff']:+.4f} [{by[b]['interval'][0]:+.4f}, "
                                       f"{by[b]['interval'][1]:+.4f}])") for b in args.budgets) + " |")
    result = {"towers": table, "probes": probes, "guidance": guidance,
              "runs": {k: {kk: vv for kk, vv in v.items() if kk != "history"} for k, v in runs.items()}}
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        Path(args.out).with_suffix(".md").write_text(text)
        plot_curves(runs, Path(args.out).with_suffix(".png"))
        print("wrote", args.out, "and .md, .png beside it")


def plot_curves(runs: dict, path: Path) -> None:
    """Valid rank correlation by epoch, one line per run (colour: tower; line style: seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    towers = list(dict.fromkeys(r["tower"] for r in runs.values()))
    colours = {t: plt.cm.tab10(i) for i, t in enumerate(towers)}
    for name, r in runs.items():
        ax.plot([h["epoch"] for h in r["history"]], [h["valid_rho"] for h in r["history"]], color=colours[r["tower"]],
                linestyle="-" if r["seed"] == 0 else "--", label=r["tower"] if r["seed"] == 0 else None)
    ax.set_xlabel("epoch (60 steps)")
    ax.set_ylabel("valid rank correlation (held-out pipelines)")
    ax.set_title("behavior models by module tower; solid seed 0, dashed seed 1", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def choose_in_pool(z, runs: dict, predicted: dict, budgets) -> dict:
    """Per budget, the best measured gain among each run's per-module picks (the coverage choice over its
    predictions, with its errors on the valid modules as scenarios) against the global ranking (a ranker without
    module input fitted on the train rows) and the pool's best per module."""
    from behavioral_pq.tasks.guidance.behavior import best_found, bootstrap_interval
    from behavioral_pq.tasks.guidance.ranker import PipelineRanker, coverage_choice

    gains = z["gains"].astype(np.float64)
    test, valid, train = z["test"], z["valid"], z["train"]
    pool = [(f"p{j}",) for j in range(gains.shape[1])]              # the choice reads columns, not steps
    glob = PipelineRanker.fit(np.zeros((len(train), 0)), gains[train], pool, "none", seed=0)
    column = {p: j for j, p in enumerate(pool)}
    found = {"global": {b: best_found(gains[test], [[column[p] for p in glob.choose(None, b)]] * len(test))
                        for b in budgets}}
    for name in runs:
        if f"{name}/test" not in predicted:
            continue
        residuals = gains[valid] - predicted[f"{name}/valid"]
        found[name] = {b: best_found(gains[test], [coverage_choice(p, residuals, b) for p in predicted[f"{name}/test"]])
                       for b in budgets}
    out = {}
    for name, by in found.items():
        out[name] = {}
        for b in budgets:
            entry = {"ratio": float(np.exp(by[b].mean()))}
            if name != "global":
                diff = by[b] - found["global"][b]
                entry.update(diff=float(diff.mean()), interval=list(bootstrap_interval(diff, seed=0)))
            out[name][b] = entry
    best = np.maximum(gains[test].max(axis=1), 0.0)
    out["pool's best"] = {b: {"ratio": float(np.exp(best.mean()))} for b in budgets}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="the towers' inputs as arrays (needs the store and the encoder)")
    p.add_argument("store")
    p.add_argument("--data", required=True, help="pool rows (bpq ranker measure) of the store's three splits")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", help="encoder (default: the shipped one)")
    t = sub.add_parser("train", help="one behavior model per tower and seed (torch only; GPU if given)")
    t.add_argument("folder")
    t.add_argument("--device", default=None)
    t.add_argument("--seeds", default="0")
    t.add_argument("--towers", default=",".join(TOWERS))
    t.add_argument("--epochs", type=int, default=30)
    t.add_argument("--steps", type=int, default=60)
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--stop-after", type=float, default=0, help="start no run after this many seconds")
    t.add_argument("--results", help="output .npz (and .json beside it; default FOLDER/results.npz)")
    r = sub.add_parser("report", help="rank correlations and the vectors judged as embeddings")
    r.add_argument("folder")
    r.add_argument("--results", nargs="*", help="train outputs (.npz with .json beside)")
    r.add_argument("--out", help="report .json (and .md beside it)")
    r.add_argument("--budgets", type=lambda text: [int(b) for b in text.split(",")], default=[5, 10, 50])
    args = ap.parse_args()
    {"prepare": prepare, "train": train, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
