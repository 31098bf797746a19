"""The performance page's results table, rendered from the benchmark records at every build.

``marl-envs bench NAME --record benchmarks/results.jsonl`` appends one record a run (the env and its keywords, the
sizes, the device and the hardware, the date, the versions, ours and each raw loop, the ratios). At every build
this extension writes ``docs/_generated/results.md`` from those records, which ``performance.md`` includes: one
row per env, size, hardware and raw loop, from the latest day it was measured on, with the median ratio of that
day's runs and their range. Run as a script, it prints the table.
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
    text = render(load())
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


def setup(app):
    app.connect("builder-inited", lambda app: write())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.stdout.write(render(load()))
