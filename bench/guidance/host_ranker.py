"""Does a ranker fitted on outcomes built for the host choose better for `bpq optimize --auto` than one fitted in
measure mode?

`bpq optimize --auto` counts every candidate as it is built for the host (`Trials` in target mode), but the shipped
instruction-count ranker's pipeline order was fitted on measure-mode rows. This bench fits two rankers without
module input on the same train modules, one on rows built for the host and one on measure-mode rows (so that a
difference is the target's, not the data's), and compares them with the shipped ranker:

- in the pool: on rows built for the host of held-out modules, the best gain (log IC_Oz / IC, at least 0) among
  each ranker's first k picks, k = each budget; the pool's best per module for the headroom;
- in searches (``--searches N``): `recommend_pipeline(module, budget, target="host", ranker=R)` (the ranker's
  picks, then local search, as `bpq optimize --auto` runs) on N held-out modules, IC_Oz / IC of the module
  written, both for the host.

Every score is a geometric mean of IC_Oz / IC by split and size bucket, with a 95% bootstrap interval of the
per-module difference to the shipped ranker. Rows come from `bpq ranker measure` over the shipped ranker's pool:

    bpq ranker measure STORE --pool checkpoints/ranker-none-real-s0 --target host --out host-train ...
    bpq ranker measure STORE --pool checkpoints/ranker-none-real-s0 --out measure-train ...   # optional control
    bpq ranker measure STORE --pool checkpoints/ranker-none-real-s0 --target host --split valid --out host-eval
    bpq ranker measure STORE --pool checkpoints/ranker-none-real-s0 --target host --split test --out host-eval
    python bench/guidance/host_ranker.py STORE --train-host host-train --train-measure measure-train \\
        --eval host-eval --searches 40 --budgets 5,10,50
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402

from behavioral_pq.core.engine import Engine  # noqa: E402
from behavioral_pq.core.target import Target  # noqa: E402
from behavioral_pq.corpus.buckets import size_bucket  # noqa: E402
from behavioral_pq.corpus.reader import Corpus  # noqa: E402
from behavioral_pq.tasks.guidance import recommend_pipeline  # noqa: E402
from behavioral_pq.tasks.guidance.behavior import bootstrap_interval  # noqa: E402
from behavioral_pq.tasks.guidance.recommend import RANKED_SHARE  # noqa: E402
from behavioral_pq.tasks.guidance.ranker import (LARGE_MODULE, PipelineRanker, default_ranker,  # noqa: E402
                                                 load_ranker, load_ranker_data)

#: --all-sizes: the rankers compared choose for large modules too (default: the shipped large-module ranker does).
ALL_SIZES = False
BUCKETS = ("<200", "200-1k", "1k-5k", "5k-50k", ">50k")
#: The anchor: the shipped ranker, fitted on measure-mode rows of the 40-project store's train projects (some of
#: which, lua and jansson among them, are train projects here too: its picks are in-sample on their modules).
ANCHOR = "shipped"


def fit_none(data, corpus: Corpus) -> PipelineRanker:
    """A ranker without module input on ``data``'s rows, its penalty folds split by project."""
    groups = corpus.split_groups()
    return PipelineRanker.fit(np.zeros((len(data.shas), 0), np.float32), np.nan_to_num(data.gains, nan=-1.0),
                              data.pool, "none", groups=[groups.get(s, s) for s in data.shas])


def in_pool(rankers: dict, gains: np.ndarray, budgets) -> dict:
    """Per ranker and budget: the best gain (at least 0) of each module among the ranker's first picks, float (N,)."""
    gains = np.nan_to_num(gains, nan=-np.inf)
    out = {}
    for name, ranker in rankers.items():
        column = {s: j for j, s in enumerate(ranker.pool)}
        for budget in budgets:
            picks = [column[s] for s in ranker.choose(None, budget)]
            out.setdefault(name, {})[budget] = np.maximum(gains[:, picks].max(axis=1), 0.0)
    return out


def leave_one_project_out(data, corpus: Corpus, anchor: PipelineRanker, budgets) -> dict:
    """On the train rows themselves: for each project, a host ranker fitted on the other projects' rows against
    the anchor on that project's modules (what choosing on train projects can see): per-module best gains."""
    groups = corpus.split_groups()
    project = np.array([groups.get(s, s).split(":")[-1] for s in data.shas])
    gains = np.nan_to_num(data.gains, nan=-np.inf)
    column = {s: j for j, s in enumerate(anchor.pool)}
    out = {ANCHOR: {b: np.zeros(len(project)) for b in budgets},
           "fitted on host rows": {b: np.zeros(len(project)) for b in budgets}}
    for name in sorted(set(project)):
        held = project == name
        rest = data.subset([s for s, p in zip(data.shas, project) if p != name])
        fitted = fit_none(rest, corpus)
        for side, ranker in ((ANCHOR, anchor), ("fitted on host rows", fitted)):
            for b in budgets:
                picks = [column[s] for s in ranker.choose(None, b)]
                out[side][b][held] = np.maximum(gains[held][:, picks].max(axis=1), 0.0)
    out["pool's best"] = {b: np.maximum(gains.max(axis=1), 0.0) for b in budgets}
    return out


def compare(per_module: dict, labels: dict, budgets) -> dict:
    """Geomean ratios and differences to the anchor by label group (``labels``: name -> bool mask (N,))."""
    report = {}
    for budget in budgets:
        entry = {}
        for group, mask in labels.items():
            if not mask.any():
                continue
            here = {"modules": int(mask.sum())}
            for name, by_budget in per_module.items():
                here[name] = float(np.exp(by_budget[budget][mask].mean()))
            for name, by_budget in per_module.items():
                if name in (ANCHOR, "pool's best"):
                    continue
                diff = by_budget[budget][mask] - per_module[ANCHOR][budget][mask]
                here[f"{name} - anchor"] = {"difference": float(diff.mean()), "interval": bootstrap_interval(diff),
                                            "ahead": int((diff > 1e-12).sum()), "behind": int((diff < -1e-12).sum())}
            entry[group] = here
        report[str(budget)] = entry
    return report


def label_groups(shas, corpus: Corpus, sizes: dict) -> dict:
    splits = corpus.store.splits()
    groups = corpus.split_groups()
    split = np.array([splits.get(s, "?") for s in shas])
    bucket = np.array([size_bucket(sizes[s]) for s in shas])
    project = np.array([groups.get(s, "?").split(":")[-1] for s in shas])
    labels = {"all": np.ones(len(shas), bool)}
    labels.update({f"split {v}": split == v for v in sorted(set(split))})
    labels.update({b: bucket == b for b in BUCKETS if (bucket == b).any()})
    labels.update({f"project {p}": project == p for p in sorted(set(project))})
    return labels


def searches(sides: dict, corpus: Corpus, shas, budgets, workers: int) -> list:
    """``sides``: name -> (ranker, share of the budget on its picks); one search per side, module and budget. A
    ranker None is the shipped default for the module's size; every side leaves modules of
    :data:`LARGE_MODULE` instructions or more to the shipped large-module ranker unless ``--all-sizes``."""
    target = Target.host()
    rows = []
    with Engine(workers=workers, timeout=120) as engine:
        modules = {m.sha256: m for m in corpus.iter_modules(only=set(shas))}
        for i, sha in enumerate(shas):
            module = modules[sha]
            for budget in budgets:
                row = {"module": module.name, "sha256": sha, "budget": budget, "written": {}, "seconds": {}}
                for name, (ranker, share) in sides.items():
                    if module.instruction_count >= LARGE_MODULE and not ALL_SIZES:
                        ranker = None
                    began = time.monotonic()
                    found = recommend_pipeline(module, budget, engine=engine, target=target, ranker=ranker,
                                               ranked_share=share)
                    row["seconds"][name] = time.monotonic() - began
                    row["written"][name] = found.instruction_count
                    row["oz"] = found.oz_count
                rows.append(row)
            print(f"search {i + 1}/{len(shas)} {module.name}: " + ", ".join(
                f"{n[:10]} {rows[-1]['oz'] / max(c, 1):.4f}" for n, c in rows[-1]["written"].items()),
                file=sys.stderr)
    return rows


def search_report(rows: list, corpus: Corpus, sizes: dict, budgets, names) -> dict:
    shas = [r["sha256"] for r in rows if r["budget"] == budgets[0]]
    labels = label_groups(shas, corpus, sizes)
    per_module = {name: {b: np.array([math.log(r["oz"] / max(r["written"][name], 1))
                                      for r in rows if r["budget"] == b]) for b in budgets} for name in names}
    report = compare(per_module, labels, budgets)
    for b in budgets:
        report[str(b)]["seconds"] = {n: float(sum(r["seconds"][n] for r in rows if r["budget"] == b)) for n in names}
    return report


def markdown(report: dict) -> str:
    lines = [f"# A ranker fitted on outcomes built for the host ({report['machine']})", "",
             f"Target: {report['target']}. Train rows: {report['train']}. Held-out rows: {report['eval']}.", ""]
    for part, title in (("train_leave_one_project_out", "Train projects, each held out in turn: best IC_Oz / IC "
                         "among the first k picks, built for the host"),
                        ("in_pool", "In the pool: best IC_Oz / IC among the first k picks, built for the host"),
                        ("searches", "Searches for the host (picks, then local search): IC_Oz / IC written")):
        if part not in report:
            continue
        lines += [f"## {title}", ""]
        for budget, entry in report[part].items():
            names = [n for n in next(iter(entry.values())) if n != "modules" and not n.endswith("anchor")]
            others = [n for n in names if n not in (ANCHOR, "pool's best")]
            header = ["group", "n"] + names + [f"{n} - shipped" for n in others]
            body = []
            for group, here in entry.items():
                if group == "seconds" or group.startswith("project "):     # per project: in the JSON
                    continue
                cells = [group, here["modules"]] + [f"{here[n]:.4f}" for n in names]
                for n in others:
                    d = here[f"{n} - anchor"]
                    cells.append(f"{d['difference']:+.4f} [{d['interval'][0]:+.4f}, {d['interval'][1]:+.4f}] "
                                 f"{d['ahead']}/{d['behind']}")
                body.append(cells)
            lines += [f"### budget {budget}", "", common.markdown_table(header, body), ""]
            if "seconds" in entry:
                lines += ["seconds: " + ", ".join(f"{n} {s:.0f}" for n, s in entry["seconds"].items()), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--train-host", required=True, help="rows built for the host of the train modules")
    parser.add_argument("--train-measure", help="measure-mode rows of the same train modules (a control: a "
                                                "ranker fitted on them tells the target's part from the data's)")
    parser.add_argument("--eval", required=True, help="rows built for the host of held-out modules")
    parser.add_argument("--ranker", default=None, help="the anchor ranker folder (default: the shipped one)")
    parser.add_argument("--budgets", default="5,10,50")
    parser.add_argument("--searches", type=int, default=0, help="compiled searches on this many held-out modules")
    parser.add_argument("--search-split", default=None, help="search only modules of this split (default: any)")
    parser.add_argument("--shares", default=str(RANKED_SHARE),
                        help="shares of the budget on the anchor's picks, each a search side (the first is the anchor)")
    parser.add_argument("--search-max", type=int, default=20_000, help="largest module searched")
    parser.add_argument("--all-sizes", action="store_true",
                        help="in searches, the rankers compared choose for modules of 5,000 instructions or more too")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--save-ranker", type=Path, help="save the host-fitted ranker here")
    parser.add_argument("--out", type=Path, default=common.results_dir(__file__) / "host-ranker.json")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    global ALL_SIZES
    ALL_SIZES = args.all_sizes
    corpus = Corpus(args.store)
    sizes = common.instruction_counts(corpus)
    anchor = load_ranker(args.ranker) if args.ranker else default_ranker("ir-count", 0)
    host, held = load_ranker_data(args.train_host), load_ranker_data(args.eval)
    measure = load_ranker_data(args.train_measure) if args.train_measure else None
    for data, what in ((host, "--train-host"), (measure, "--train-measure"), (held, "--eval")):
        if data is not None and data.pool != anchor.pool:
            raise SystemExit(f"{what}: rows of another pool than the anchor ranker's ({len(anchor.pool)})")
    if host.target is None or held.target is None or (measure is not None and measure.target is not None):
        raise SystemExit("--train-host and --eval must hold rows built for a target, --train-measure measure mode")
    common_train = sorted(set(host.shas) & set(measure.shas if measure is not None else host.shas))
    host = host.subset(common_train)
    rankers = {ANCHOR: anchor, "fitted on host rows": fit_none(host, corpus)}
    if measure is not None:
        rankers["fitted on measure-mode rows"] = fit_none(measure.subset(common_train), corpus)
    if args.save_ranker:
        rankers["fitted on host rows"].save(args.save_ranker, overwrite=True)
    gains = held.gains
    per_module = in_pool(rankers, gains, budgets)
    per_module["pool's best"] = {b: np.maximum(np.nan_to_num(gains, nan=-np.inf).max(axis=1), 0.0)
                                 for b in budgets}
    splits = corpus.store.splits()
    train_labels = label_groups(host.shas, corpus, sizes)
    report = {"machine": common.machine(), "target": str(held.target),
              "train_leave_one_project_out": compare(leave_one_project_out(host, corpus, anchor, budgets),
                                                     train_labels, budgets),
              "train": f"{len(common_train)} modules of the train split, the anchor's pool of {len(anchor.pool)}",
              "eval": f"{len(held.shas)} modules ({', '.join(sorted(set(splits.get(s, '?') for s in held.shas)))})",
              "in_pool": compare(per_module, label_groups(held.shas, corpus, sizes), budgets)}
    if args.searches:
        pick = sorted(s for s in held.shas if sizes[s] <= args.search_max
                      and (args.search_split is None or splits.get(s) == args.search_split))
        chosen = common.even_by_bucket(pick, sizes, args.searches)
        shares = [float(x) for x in args.shares.split(",")]
        searched = {ANCHOR: (None if args.ranker is None else anchor, shares[0]),
                    "fitted on host rows": (rankers["fitted on host rows"], shares[0])}
        searched.update({f"shipped, {share:g} of the budget on its picks": (anchor, share) for share in shares[1:]})
        rows = searches(searched, corpus, chosen, budgets, args.workers)
        report["searches"] = search_report(rows, corpus, sizes, budgets, list(searched))
        report["search_rows"] = rows
    common.write_json(args.out, report)
    common.write_text(args.out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
