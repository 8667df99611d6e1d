"""Reads benchmarks/scale.py's JSON and prints the cost curves as markdown; draws them.

Usage: PYTHONPATH=. .venv/bin/python benchmarks/scale_report.py \
           [--results scale.json]
           [--plot benchmarks/results/scale.png]

Prints, per component and Beam mode:
  * a table of seconds (the component's execution time from ML Metadata, "component_s")
    and peak memory (MB, the process tree's summed RSS) per corpus size;
  * the log-log slopes of time and of peak memory: between the two largest sizes (4x -> 16x
    for the default sizes) and the least-squares slope over all sizes (1 = linear growth,
    < 1 sublinear: fixed costs still weigh, > 1 superlinear);
  * the speedup of multi_processing over in_memory (in_memory seconds / multi_processing
    seconds) per component and size.
and draws time against size on log-log axes, one line per component and mode, to --plot
(matplotlib, which the venv has: setup.py installs it).

Only rows with status "ok" count; of several rows for one size, mode and component (runs
repeated into the same file), the newest is used. Corpora with --lines (smoke tests) are
reported apart from full ones.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import results  # noqa: E402
from benchmarks.scale import COMPONENTS, MODES  # noqa: E402


def latest_rows(rows: list[dict]) -> dict[tuple, dict]:
    """(lines_per_copy, size, mode, component) -> the newest ok row."""
    table: dict[tuple, dict] = {}
    for row in rows:
        if row.get("status") == "ok":
            table[(row.get("lines_per_copy"), row["size"], row["mode"], row["component"])] = row
    return table


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(y) on log(x); None for fewer than two distinct sizes."""
    points = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y and y > 0]
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    return (sum((x - mean_x) * (y - mean_y) for x, y in points)
            / sum((x - mean_x) ** 2 for x, _ in points))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report(data: dict, plot_path: str | None) -> list[str]:
    table = latest_rows(data["rows"])
    lines = []
    for session in data.get("sessions", [])[-1:]:
        machine = session.get("machine", {})
        lines.append(f"Machine (latest session): {machine.get('cpu_model')}, "
                     f"{machine.get('cores')} cores, {machine.get('memory_gb')} GiB, "
                     f"{' '.join(machine.get('cpu_features') or [])}, {machine.get('date')}, "
                     f"tfx {machine.get('tfx')}, apache-beam {machine.get('apache-beam')}")
    series: dict[tuple, list[tuple[int, dict]]] = {}
    for (lines_per_copy, size, mode, component), row in sorted(
            table.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        series.setdefault((lines_per_copy, mode, component), []).append((size, row))
    for lines_per_copy in sorted({k[0] for k in series}, key=str):
        sizes = sorted({k[1] for k in table if k[0] == lines_per_copy})
        modes = [m for m in MODES if any(k[0] == lines_per_copy and k[2] == m for k in table)]
        components = [c for c in COMPONENTS
                      if any(k[0] == lines_per_copy and k[3] == c for k in table)]
        corpus = (f"corpora of {lines_per_copy} lines of fra.txt per copy (smoke)"
                  if lines_per_copy else "corpora of K x fra.txt")
        lines += ["", f"### {corpus}", ""]
        examples = {}
        for size in sizes:
            row = next((r for k, r in table.items() if k[0] == lines_per_copy and k[1] == size
                        and r.get("examples_per_split")), None)
            if row:
                examples[size] = (row["corpus_lines"], row.get("examples"),
                                  row["examples_per_split"])
        for size, (corpus_lines, total, splits) in examples.items():
            lines.append(f"- {size}x: {corpus_lines:,} lines, {total or sum(splits.values()):,} "
                         "examples (" + ", ".join(f"{s} {n:,}" for s, n in splits.items()) + ")")
        header = ["component", "mode", *[f"{s}x s" for s in sizes],
                  *[f"{s}x peak MB" for s in sizes]]
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for component in components:
            for mode in modes:
                rows = dict(series.get((lines_per_copy, mode, component), []))
                cells = [_fmt(rows[s]["component_s"], 1) if s in rows else "–" for s in sizes]
                cells += [_fmt(rows[s]["peak_rss_mb"], 0) if s in rows else "–" for s in sizes]
                lines.append(f"| {component} | {mode} | " + " | ".join(cells) + " |")
        last_two = sizes[-2:]
        pair = f"{last_two[0]}x→{last_two[-1]}x" if len(last_two) == 2 else "two sizes"
        header = ["component", "mode", f"time slope {pair}", "time slope (LSQ, all)",
                  f"memory slope {pair}", "memory slope (LSQ, all)"]
        lines += ["", "Log-log slopes (1 = linear in the data):", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for component in components:
            for mode in modes:
                rows = dict(series.get((lines_per_copy, mode, component), []))
                cells = []
                for key in ("component_s", "peak_rss_mb"):
                    points = [(s, rows[s][key]) for s in sizes if s in rows]
                    cells += [_fmt(slope([p for p in points if p[0] in last_two])),
                              _fmt(slope(points))]
                lines.append(f"| {component} | {mode} | " + " | ".join(cells) + " |")
        if {"in_memory", "multi_processing"} <= set(modes):
            header = ["component", *[f"{s}x" for s in sizes]]
            lines += ["", "Speedup of multi_processing over in_memory (in_memory s / "
                          "multi_processing s; component time; – where either is under 1 s):", "",
                      "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            for component in components:
                cells = []
                for size in sizes:
                    slow = table.get((lines_per_copy, size, "in_memory", component))
                    fast = table.get((lines_per_copy, size, "multi_processing", component))
                    cells.append(_fmt(slow["component_s"] / fast["component_s"])
                                 if slow and fast and min(slow["component_s"],
                                                          fast["component_s"]) >= 1 else "–")
                lines.append(f"| {component} | " + " | ".join(cells) + " |")
        lines += extrapolation(table, lines_per_copy, sizes, components)
    if plot_path:
        lines += ["", plot(series, plot_path)]
    return lines


def extrapolation(table: dict[tuple, dict], lines_per_copy, sizes: list[int],
                  components: list[str], targets: tuple[int, ...] = (100, 1000),
                  vcpus: tuple[int, ...] = (8, 32, 128)) -> list[str]:
    """On paper: CPU hours of each component at `targets` x fra.txt, from the measured CPU
    seconds of one in-memory worker at the largest size plus the marginal CPU seconds per
    input line between the two largest sizes (fixed costs drop out of the marginal cost), and
    the hours on a cluster of `vcpus` (perfect spread, one of its vCPUs = one core here)."""
    if len(sizes) < 2:
        return []
    small, large = sizes[-2:]
    header = ["component", "µs CPU per line (marginal)",
              *[f"{t}x CPU h" for t in targets]]
    out = ["", f"Extrapolated on paper from the in_memory CPU seconds at {small}x and {large}x "
               "(not measured on a cluster):", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    totals = dict.fromkeys(targets, 0.0)
    for component in components:
        a = table.get((lines_per_copy, small, "in_memory", component))
        b = table.get((lines_per_copy, large, "in_memory", component))
        if not (a and b and a.get("cpu_s") and b.get("cpu_s")) or b["component_s"] < 1:
            continue  # not measured, or no work that grows with the data
        per_line = (b["cpu_s"] - a["cpu_s"]) / (b["corpus_lines"] - a["corpus_lines"])
        lines_at = {t: b["corpus_lines"] / large * t for t in targets}
        hours = {t: (b["cpu_s"] + per_line * (lines_at[t] - b["corpus_lines"])) / 3600
                 for t in targets}
        for t in targets:
            totals[t] += hours[t]
        out.append(f"| {component} | {per_line * 1e6:.0f} | "
                   + " | ".join(f"{hours[t]:.1f}" for t in targets) + " |")
    out.append("| all | | " + " | ".join(f"{totals[t]:.1f}" for t in targets) + " |")
    out += ["", "Hours on a cluster of N vCPUs (CPU hours / N; no start-up, shuffle or "
                "straggler costs):", ""]
    for t in targets:
        out.append(f"- {t}x: " + ", ".join(f"{n} vCPUs {totals[t] / n:.2f} h" for n in vcpus))
    return out


def plot(series: dict[tuple, list[tuple[int, dict]]], path: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        return "matplotlib is not installed in this Python: no plot."
    full = {k: v for k, v in series.items() if not k[0]} or series  # full corpora if any
    components = [c for c in COMPONENTS if any(k[2] == c for k in full)]
    figure, axes = plt.subplots(1, len(components), figsize=(3.2 * len(components), 3.4),
                                squeeze=False)
    for axis, component in zip(axes[0], components):
        for (lines_per_copy, mode, name), points in sorted(full.items(), key=str):
            if name != component:
                continue
            points = [(s, r["component_s"]) for s, r in points if r["component_s"] > 0]
            if not points:  # e.g. ImportSchemaGen, 0.0 s to MLMD's millisecond: no log
                continue
            axis.plot([s for s, _ in points], [t for _, t in points], marker="o",
                      linestyle="-" if mode == "in_memory" else "--",
                      label=mode + (f" ({lines_per_copy} l/copy)" if lines_per_copy else ""))
        axis.set_xscale("log")
        axis.set_yscale("log")
        sizes = sorted({s for key, points in full.items() if key[2] == component
                        for s, _ in points})
        axis.set_xticks(sizes, [f"{s}x" for s in sizes])
        axis.xaxis.set_minor_formatter(NullFormatter())
        # Ticks at 1, 2 and 5 per decade: a component whose times stay within one decade
        # (Transform's) would otherwise get no labelled tick at all.
        axis.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(NullFormatter())
        axis.set_title(component, fontsize=9)
        axis.set_xlabel("corpus size (x fra.txt)")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("component seconds (MLMD)")
    axes[0][-1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return f"Plot: {path}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default="scale.json",
                        help="scale.py's result file (a bare name: in benchmarks/results/)")
    parser.add_argument("--plot", default=os.path.join(results.RESULTS, "scale.png"),
                        help="PNG to write ('' for none)")
    args = parser.parse_args(argv)
    data = results.read(args.results)["figures"]
    print("\n".join(report(data, args.plot or None)))


if __name__ == "__main__":
    main()
