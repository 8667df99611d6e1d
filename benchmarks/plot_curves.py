"""Draws test BLEU against training time from benchmarks/time_curve.py's result files.

Usage: PYTHONPATH=. .venv/bin/python -m benchmarks.plot_curves \\
           [--results 'benchmarks/results/time_curve_*.json'] \\
           [--out benchmarks/results/bleu_vs_time.png]

One line per file: each row's `minutes` (the reference machine's clock, as time_curve.py
counts it) against its test BLEU (greedy, all references). The recipes of the committed files
are named below; any other file is labelled by its name.
"""
from __future__ import annotations

import argparse
import glob
import os

from benchmarks import results

# The recipe of each committed curve (BENCHMARKS.md, "Quality against training time"). All three
# ran without the learning-rate cooldown, so one run gives every budget's point.
LABELS = {
    "time_curve_3x3_dropout.json": "3+3 layers, dropout 0.1, peak 1.4e-3",
    "time_curve_3x3.json": "3+3 layers, no dropout, peak 1.4e-3",
    "time_curve_2x2.json": "2+2 layers, no dropout, peak 2.8e-3",
}


def curves(paths: list[str]) -> dict[str, list[tuple[float, float]]]:
    """label -> [(minutes, test BLEU)], in the order of LABELS, then by file name."""
    order = list(LABELS)
    out = {}
    for path in sorted(paths, key=lambda p: (order.index(os.path.basename(p))
                                             if os.path.basename(p) in order else len(order),
                                             p)):
        rows = results.read(path)["figures"]["rows"]
        name = os.path.basename(path)
        out[LABELS.get(name, name)] = sorted((r["minutes"], r["test"]["bleu"]) for r in rows)
    return out


def plot(series: dict[str, list[tuple[float, float]]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 4.0))
    for label, points in series.items():
        # No labels on the points: at 60 minutes the three curves lie within 0.3 BLEU, and
        # the table beside the plot in BENCHMARKS.md gives the numbers.
        axis.plot([m for m, _ in points], [b for _, b in points], marker="o", label=label)
    ticks = sorted({m for points in series.values() for m, _ in points})
    axis.set_xticks(ticks, [f"{m:g}" for m in ticks])
    axis.set_xlabel("training minutes (the AVX2 reference step clock, Eigen kernels)")
    axis.set_ylabel("test BLEU, greedy (all references)")
    axis.set_title("BLEU against training time, one run per curve, no cooldown", fontsize=10)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results",
                        default=os.path.join(results.RESULTS, "time_curve_*.json"),
                        help="glob of time_curve.py result files")
    parser.add_argument("--out", default=os.path.join(results.RESULTS, "bleu_vs_time.png"))
    args = parser.parse_args(argv)
    paths = glob.glob(args.results)
    if not paths:
        raise SystemExit(f"no files match {args.results}")
    plot(curves(paths), args.out)
    print(f"Plot: {args.out}")


if __name__ == "__main__":
    main()
