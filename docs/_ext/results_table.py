"""The performance page's chart and tables, rendered from the benchmark records at every build.

``marl-envs bench NAME --record benchmarks/results.jsonl`` appends one record a run (the env and its keywords, the
sizes, the device and the hardware, the date, the versions, ours and each raw loop, the ratios). At every build
this extension writes, from those records:

- ``docs/_generated/speed.png``: ours / the library's own loop (a record's first reference) per env and size, the
  CPU and GPU bars side by side (``chart``);
- ``docs/_generated/summary.md``: one row per env, size and device, one column per kind of reference loop
  (``summary``), which ``performance.md`` includes;
- ``docs/_generated/results.md``: every raw loop's row with its label, date and timings, and each run's command,
  which ``performance_records.md`` includes.

Each figure is the latest day's median. Run as a script, it prints the summary table.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
RECORDS = DOCS.parent / "benchmarks" / "results.jsonl"
OUT = DOCS / "_generated" / "results.md"
SUMMARY = DOCS / "_generated" / "summary.md"
CHART = DOCS / "_generated" / "speed.png"
#: The summary's columns: each reference loop's kind, told by its label (the first reference of a record is the
#: library's own loop, with resets: the one the chart draws).
KINDS = {"bound": "doing less", "workers": "2 workers", "other": "other loop"}


def load(path: Path = RECORDS) -> list[dict]:
    """The records of ``path``, one JSON object a line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _keywords(record: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(record["env_kwargs"].items()))


def rows(records: list[dict]) -> list[list[str]]:
    """One row per env, keywords, size, hardware and raw loop: the latest day's runs, their median ratio and range."""
    groups: dict[tuple, list[tuple[dict, dict]]] = defaultdict(list)
    for record in records:
        for reference in record["references"]:
            key = (record["env"], _keywords(record), record["num_envs"], record["device"], record["hardware"],
                   reference["label"])
            groups[key].append((record, reference))
    table = []
    for (env, keywords, num_envs, device, hardware, label), runs in sorted(groups.items()):
        latest = max(r["date"] for r, _ in runs)
        runs = [(r, ref) for r, ref in runs if r["date"] == latest]
        ratios = sorted(ref["ratio"] for _, ref in runs)
        ours = statistics.median(r["ours"]["us_per_step"] for r, _ in runs)
        raw = statistics.median(ref["us_per_step"] for _, ref in runs)
        spread = f" ({ratios[0]:.2f}-{ratios[-1]:.2f}, {len(ratios)} runs)" if len(ratios) > 1 else ""
        note = runs[-1][0].get("note")
        table.append([
            f"`{env}`" + (f" `{keywords}`" if keywords else ""), f"{num_envs:,}", f"{device}: {hardware}",
            latest, f"{ours:,.1f}", f"{label}: {raw:,.1f}", f"**{statistics.median(ratios):.2f}**{spread}"
            + (f" ({note})" if note else ""),
        ])
    return table


def _kind(label: str) -> str:
    if label.startswith("marl_envs"):
        return "workers"
    if "no resets" in label or "lax.scan" in label or "bare env" in label:
        return "bound"
    return "other"


def latest(records: list[dict]) -> dict[tuple, list[dict]]:
    """The records of the latest day of each (env, keywords, size, device, hardware)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["env"], _keywords(record), record["num_envs"], record["device"], record["hardware"])].append(
            record)
    out = {}
    for key, runs in sorted(groups.items()):
        day = max(r["date"] for r in runs)
        out[key] = [r for r in runs if r["date"] == day]
    return out


def _ratio(runs: list[dict], index: int | None = None, kind: str | None = None) -> float | None:
    """The median ratio of ``runs`` against their reference number ``index`` or the first of kind ``kind``."""
    ratios = []
    for run in runs:
        refs = run["references"]
        if index is not None:
            ratios += [refs[index]["ratio"]] if len(refs) > index else []
        else:
            ratios += [next((r["ratio"] for r in refs[1:] if _kind(r["label"]) == kind), None)] if refs else []
    ratios = [r for r in ratios if r is not None]
    return statistics.median(ratios) if ratios else None


def summary(records: list[dict]) -> str:
    """The compact table: one row per env, size and device; ours in microseconds a step, then ours / each kind of
    loop. The hardware of each device is said once, below."""
    header = ["env", "envs", "device", "ours, us/step", "/ own loop", *[f"/ {KINDS[k]}" for k in KINDS]]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "|".join("---:" for _ in header[1:]) + "|"]
    hardware, notes = {}, []
    for (env, keywords, num_envs, device, hw), runs in latest(records).items():
        hardware[device] = hw
        note = runs[-1].get("note")
        if note and note not in notes:
            notes.append(note)
        if note:
            device = f"{device} {'†' * (notes.index(note) + 1)}"
        ours = statistics.median(r["ours"]["us_per_step"] for r in runs)
        cells = [_ratio(runs, index=0), *[_ratio(runs, kind=k) for k in KINDS]]
        lines.append("| " + " | ".join([f"`{env}`" + (f" `{keywords}`" if keywords else ""), f"{num_envs:,}",
                                         device, f"{ours:,.1f}",
                                         *[f"**{c:.2f}**" if i == 0 and c is not None else
                                           (f"{c:.2f}" if c is not None else "-") for i, c in enumerate(cells)]])
                     + " |")
    lines += ["", "Each ratio is ours / that loop's time a step; below 1, ours takes less time. The library's own "
              "loop resets as ours does; a loop doing less skips resets (or runs as one `lax.scan`); 2 workers: "
              "ours stepping the same envs in 2 worker processes; the other loop: the raw step driven from torch "
              "(the JAX families), or SMAX's loop reading its action masks every step. A `-`: no such loop was timed "
              "for that row. "
              "Devices: " + "; ".join(f"{d}: {h}" for d, h in sorted(hardware.items())) + "."]
    lines += [f"{'†' * (i + 1)} {note}." for i, note in enumerate(notes)]
    return "\n".join(lines) + "\n"


def chart(records: list[dict], out: Path = CHART) -> None:
    """Ours / the library's own loop per env and size, CPU and GPU bars side by side, on a log scale."""
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    bars = defaultdict(dict)  # (env, size) -> device -> (ratio, the runs' note)
    hardware = {}
    for (env, keywords, num_envs, device, hw), runs in latest(records).items():
        ratio = _ratio(runs, index=0)
        if ratio is not None:
            bars[(env + (f" {keywords}" if keywords else ""), num_envs)][device] = ratio, runs[-1].get("note")
            hardware[device] = hw
    rows = sorted(bars, key=lambda key: (key[0], key[1]))
    figure, axes = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.6), dpi=110)
    colours = {"cpu": "#4c72b0", "cuda": "#dd8452"}
    height = 0.4
    for i, key in enumerate(rows):
        for j, device in enumerate(("cpu", "cuda")):
            if device in bars[key]:
                y = i + (j - 0.5) * height
                value, note = bars[key][device]
                axes.barh(y, value, height=height, color=colours[device], hatch="///" if note else None,
                          edgecolor="white" if note else None,
                          label=f"{device}: {hardware[device]}" + (", with a note (see the table)" if note else ""))
                axes.text(value * 1.04, y, f"{value:.2f}" + (" †" if note else ""), va="center", fontsize=8)
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes.legend(unique.values(), unique.keys(), loc="lower right", fontsize=8)
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_yticks(range(len(rows)), [f"{env}, {size:,} envs" for env, size in rows], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("ours / the library's own loop, time a step (below 1: ours is faster)")
    days = sorted({r["date"] for runs in latest(records).values() for r in runs})
    axes.set_title(f"marl-envs against each library's own loop (marl-envs bench, {days[0]} to {days[-1]})",
                   fontsize=10)
    axes.set_xlim(right=max(v for b in bars.values() for v, _ in b.values()) * 1.6)
    figure.tight_layout()
    out.parent.mkdir(exist_ok=True)
    figure.savefig(out)
    plt.close(figure)


def render(records: list[dict]) -> str:
    """The table in Markdown, with each run's command below it."""
    header = ["env", "envs", "device", "date", "ours, us a step", "against (a raw loop, or ours with workers), us a step",
              "ours / that time"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(records)]
    commands = sorted({r["command"] for r in records})
    lines += ["", "Commands (each run appends its record with `--record benchmarks/results.jsonl`):", ""]
    lines += [f"- `{c}`" for c in commands]
    versions = sorted({f"{k} {v}" for r in records for k, v in r["versions"].items()})
    lines += ["", f"Versions in these records: {', '.join(versions)}."]
    return "\n".join(lines) + "\n"


def write(out: Path = OUT) -> None:
    out.parent.mkdir(exist_ok=True)
    records = load()
    for path, text in ((out, render(records)), (out.with_name(SUMMARY.name), summary(records))):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    chart(records, out.with_name(CHART.name))


def setup(app):
    app.connect("builder-inited", lambda app: write())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.stdout.write(summary(load()))
