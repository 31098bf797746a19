"""One figure of several training runs of ``examples/mappo.py`` (seeds of one setting, or several settings).

Runs with the same label (``--label``, default: the run's env and algorithm) are drawn as one curve: their mean
at each frame count, and the band from the lowest to the highest seed. A run that stopped early (fewer rows)
counts where it has data. A column that a SMAX run writes, ``won``, gets a panel of its own (the win rate).

    python examples/plot_runs.py runs/smax_s0 runs/smax_s1 runs/smax_s2 --out docs/img/smax_3m.png
    python examples/plot_runs.py runs/a* runs/b* --label MAPPO MAPPO MAPPO IPPO IPPO IPPO --out fig.png

``--reference LABEL=VALUE`` draws a horizontal line (a published final figure, a random policy), e.g.
``--reference "random policy=0.18"``; ``--reference-panel won`` puts those lines on the win-rate panel, and a
prefix puts one line on a panel (``--reference "won:JaxMARL MAPPO=1.0"``).
``--reference-curve LABEL=CSV`` draws another trainer's curve, dashed: a CSV with a ``frames`` column and the
panels' columns (``won``, ``mean_episode_reward``), and ``wall_s`` for ``--per-second``, which adds a row of
panels against training time (each run's ``timings.csv``; one line a run).
``--note TEXT`` writes a line under the panels: where a published figure comes from (exact, or read off a plot),
the budget it was reached at against the frames these runs had. An ``.svg`` figure keeps its text as text.
Prints, per label, the final value of each plotted column: mean, lowest and highest over the runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import textwrap
from collections import defaultdict
from pathlib import Path


def read_run(folder: Path) -> tuple[dict, list[dict[str, float]]]:
    """A run's ``summary.json`` (empty for a run without one yet) and ``metrics.csv`` rows (floats)."""
    metrics = folder / "metrics.csv"
    if not metrics.is_file():
        raise FileNotFoundError(f"{folder}: no metrics.csv; pass the --out folder of an examples/mappo.py run")
    summary_file = folder / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    rows = read_csv(metrics)
    timings = folder / "timings.csv"
    if timings.is_file():  # wall time, row by row (the same frames)
        for row, timing in zip(rows, read_csv(timings)):
            row["wall_s"] = timing["wall_s"]
    return summary, rows


def read_csv(path: Path) -> list[dict[str, float]]:
    """A CSV's rows as floats (an empty or ``nan`` cell: nan)."""
    with open(path, newline="") as f:
        return [{k: float(v) if v not in ("", "nan") else math.nan for k, v in row.items()}
                for row in csv.DictReader(f)]


def band(runs: list[list[dict[str, float]]], column: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """Frames, and the mean, lowest and highest of ``column`` over the runs at each frame count (nan skipped)."""
    at: dict[float, list[float]] = defaultdict(list)
    for rows in runs:
        for row in rows:
            if column in row and not math.isnan(row[column]):
                at[row["frames"]].append(row[column])
    frames = sorted(at)
    return (frames, [sum(at[f]) / len(at[f]) for f in frames], [min(at[f]) for f in frames],
            [max(at[f]) for f in frames])


def final(rows: list[dict[str, float]], column: str) -> float:
    return next((row[column] for row in reversed(rows) if not math.isnan(row.get(column, math.nan))), math.nan)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="the --out folders of examples/mappo.py runs")
    p.add_argument("--label", nargs="*", help="one label per run (default: env and algorithm from summary.json)")
    p.add_argument("--reference", nargs="*", default=[], metavar="LABEL=VALUE",
                   help="horizontal lines; a 'won:' or 'reward:' prefix picks the panel")
    p.add_argument("--reference-panel", default="reward", choices=["reward", "won"],
                   help="the panel the --reference lines go on")
    p.add_argument("--reference-curve", nargs="*", default=[], metavar="LABEL=CSV",
                   help="another trainer's curve (frames, wall_s and the panels' columns), drawn dashed")
    p.add_argument("--per-second", action="store_true", help="a second row of panels against training time")
    p.add_argument("--note", nargs="*", default=[], metavar="TEXT",
                   help="lines under the panels (a reference's source and budget)")
    p.add_argument("--title", default="")
    p.add_argument("--out", type=Path, required=True, help="the figure (.png)")
    args = p.parse_args(argv)
    if args.label is not None and len(args.label) != len(args.runs):
        p.error(f"--label takes one label per run: {len(args.runs)} runs, {len(args.label)} labels")
    for curve in args.reference_curve:
        label, _, file = curve.rpartition("=")
        if not label or not Path(file).is_file():
            p.error(f"--reference-curve takes LABEL=CSV with an existing CSV file, got {curve!r}")
    for ref in args.reference:
        _, name, value = split_reference(ref, args.reference_panel)
        try:
            float(value)
        except ValueError:
            name = ""
        if not name:
            p.error(f"--reference takes [PANEL:]LABEL=VALUE with a number, got {ref!r}")
    return args


def split_reference(ref: str, panel: str) -> tuple[str, str, str]:
    """``"won:JaxMARL MAPPO=1.0"``: the panel (``panel`` if not given), the label and the value."""
    for name in ("reward", "won"):
        if ref.startswith(name + ":"):
            panel, ref = name, ref[len(name) + 1:]
    label, _, value = ref.rpartition("=")
    return panel, label, value


def main(argv=None) -> dict[str, dict[str, tuple[float, float, float]]]:
    args = parse_args(argv)
    groups: dict[str, list[list[dict[str, float]]]] = defaultdict(list)
    for i, folder in enumerate(args.runs):
        summary, rows = read_run(folder)
        label = args.label[i] if args.label else f"{summary.get('algorithm', 'run')} {summary.get('env', folder.name)}"
        groups[label].append(rows)
    columns = {"reward": "mean_episode_reward", "won": "won"}
    has_won = any("won" in rows[0] for runs in groups.values() for rows in runs if rows)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # an .svg figure's text stays text

    references = [(ref.rpartition("=")[0], read_csv(Path(ref.rpartition("=")[2]))) for ref in args.reference_curve]
    panels = ["reward", "won"] if has_won else ["reward"]
    fig, axes = plt.subplots(2 if args.per_second else 1, len(panels), figsize=(5.5 * len(panels), 3.6 * (
        2 if args.per_second else 1)), squeeze=False)
    finals: dict[str, dict[str, tuple[float, float, float]]] = {}
    for n, (label, runs) in enumerate(groups.items()):
        finals[label] = {}
        for col, panel in enumerate(panels):
            ax = axes[0][col]
            frames, mean, low, high = band(runs, columns[panel])
            if not frames:
                continue
            seeds = f" ({len(runs)} runs)" if len(runs) > 1 else ""
            (line,) = ax.plot(frames, mean, label=label + seeds, color=f"C{n}")
            if len(runs) > 1:
                ax.fill_between(frames, low, high, color=line.get_color(), alpha=0.2, lw=0)
            if args.per_second:
                for i, rows in enumerate(runs):
                    timed = [r for r in rows if not math.isnan(r.get(columns[panel], math.nan)) and "wall_s" in r]
                    name = label + (" (one line a run)" if len(runs) > 1 else "") if not i else None
                    axes[1][col].plot([r["wall_s"] for r in timed], [r[columns[panel]] for r in timed],
                                      color=f"C{n}", lw=1, label=name)
            values = [final(rows, columns[panel]) for rows in runs]
            values = [v for v in values if not math.isnan(v)]
            if values:
                finals[label][columns[panel]] = (sum(values) / len(values), min(values), max(values))
    for n, (label, rows) in enumerate(references, start=len(groups)):
        for col, panel in enumerate(panels):
            for row_axes, x in zip(axes, ["frames", "wall_s"]):
                points = [r for r in rows if not math.isnan(r.get(columns[panel], math.nan)) and x in r]
                if points:
                    row_axes[col].plot([r[x] for r in points], [r[columns[panel]] for r in points], ls="--",
                                       marker=".", color=f"C{n}", label=label)
    for i, ref in enumerate(args.reference):
        panel, name, value = split_reference(ref, args.reference_panel)
        ax = axes[0][panels.index(panel) if panel in panels else 0]
        ax.axhline(float(value), ls="--", color="grey" if "random" in name else f"C{3 + i}", label=name)
    for row_axes, xlabel in zip(axes, ["frames (env steps)", "training time, s"]):
        for ax, panel in zip(row_axes, panels):
            ax.set_xlabel(xlabel)
            ax.set_ylabel("mean episode reward" if panel == "reward" else "win rate (episodes won)")
            if panel == "won":
                ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    if args.note:
        width = int(fig.get_figwidth() * 16)  # characters of 7.5-point text across the figure
        lines = [part for note in args.note for part in textwrap.wrap(note, width)]
        height = fig.get_figheight()
        extra = 0.16 * len(lines) + 0.15  # inches of text below the panels
        fig.set_figheight(height + extra)
        fig.subplots_adjust(bottom=(fig.subplotpars.bottom * height + extra) / (height + extra),
                            top=1 - (1 - fig.subplotpars.top) * height / (height + extra))
        for i, line in enumerate(lines):
            fig.text(0.01, (extra - 0.05 - 0.16 * (i + 0.8)) / (height + extra), line, fontsize=7.5, color="0.25")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    for label, values in finals.items():
        cells = ", ".join(f"{col} {m:.3f} [{lo:.3f}, {hi:.3f}]" for col, (m, lo, hi) in values.items())
        print(f"{label}: final {cells} (mean [lowest, highest] over runs)")
    print(f"figure: {args.out}")
    return finals


if __name__ == "__main__":
    main(sys.argv[1:])
