"""Budget-against-gain curves of several ``bench/guidance/ranker_guidance.py`` runs on the same modules, in one figure.

    python bench/guidance/ranker_curves.py RUN.json[:LABEL] ... --out FIGURE.png [--title TEXT]

Each run's methods are drawn (``LABEL`` follows the rankers' names, to tell two rankers apart, e.g. fitted on
two pools; a method other than a ranker may be in one run only); the runs must hold the same modules (checked:
the same program hashes), so their curves compare.
Gain = geomean IC_Oz / IC - 1, in percent; the budget axis is logarithmic. Also writes FIGURE.md: the same
numbers as a table, with each method's share of the largest library budget's gain.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/, for common
import common  # noqa: E402


def load(spec: str):
    path, _, label = spec.partition(":")
    data = json.loads(Path(path).read_text())
    programs = sorted(r["program"] for r in data["modules"])
    curves = {}
    for key, value in data["report"]["overall"].items():
        method, budget = key.rsplit("@", 1)
        name = f"{method} ({label})" if label and method.startswith("ranker-") else method
        curves.setdefault(name, {})[int(budget)] = value
    return programs, curves, data["report"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN.json[:LABEL]")
    parser.add_argument("--out", required=True, metavar="FIGURE.png")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    from behavioral_pq.reports.plotting import pyplot, save_figure

    programs, curves, first = None, {}, None
    for spec in args.runs:
        these, found, report = load(spec)
        if programs is not None and these != programs:
            sys.exit(f"{spec}: other modules than {args.runs[0]} ({len(these)} against {len(programs)}); "
                     "curves of different samples do not compare")
        programs, first = these, first or report
        for name, points in found.items():
            if name in curves:
                sys.exit(f"{spec}: method {name!r} is in two runs; give them labels (RUN.json:LABEL)")
            curves[name] = points

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.6, 4.4))
    for name, points in sorted(curves.items()):
        budgets = sorted(points)
        ax.plot(budgets, [100 * (points[b] - 1) for b in budgets], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("candidate compilations (budget)")
    ax.set_ylabel("gain over -Oz, % (geomean IC_Oz / IC - 1)")
    ax.set_title(args.title or f"{len(programs)} {first['kind']} {first['split']} modules")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    save_figure(fig, args.out)

    library = {name: points for name, points in curves.items() if name.endswith("library")}
    reference = None
    if library:
        name, points = next(iter(library.items()))
        reference = (name, max(points), points[max(points)])
    budgets = sorted({b for points in curves.values() for b in points})
    lines = [f"{len(programs)} {first['kind']} {first['split']} modules; geomean IC_Oz / IC", "",
             common.markdown_table(["method"] + [f"budget {b}" for b in budgets],
                                   [[name] + [f"{points[b]:.4f}" if b in points else "" for b in budgets]
                                    for name, points in sorted(curves.items())], align="l" + "r" * len(budgets))]
    if reference:
        lines += ["", f"Share of the gain of {reference[0]} at {reference[1]} ({reference[2]:.4f}):", ""]
        for name, points in sorted(curves.items()):
            shares = ", ".join(f"{b}: {100 * (points[b] - 1) / (reference[2] - 1):.0f}%" for b in sorted(points))
            lines.append(f"- {name}: {shares}")
    common.write_text(Path(args.out).with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
