"""The baselines table of ``docs/baselines.md``, computed from the runs kept in ``docs/runs``.

    python scripts/baselines.py          # rewrite the table in docs/baselines.md (between its markers)
    python scripts/baselines.py --check  # exit 1 where the page's table is not what the runs give
    python scripts/baselines.py --print  # print the table

Each row is a set of kept runs (``examples/mappo.py`` or ``examples/mappo_rnn.py`` ``--out`` folders, one per seed)
and, under it, its reference: another trainer's curve measured on the same machine (``docs/runs/reference``, the
field's own code run outside this repository) or a published figure with its source, marked exact or read off a
plot. Every figure of the table is read from those files; nothing in it is typed by hand but the published figures
and the labels.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "runs"
PAGE = ROOT / "docs" / "baselines.md"
BEGIN = "<!-- the table below is written by scripts/baselines.py (make baselines): do not edit it by hand -->"
END = "<!-- end of the generated table -->"
LAST = 10  # the last-readings mean: the last 10 updates of a run


@dataclass(frozen=True)
class Reference:
    """Another trainer's result: ``curves`` (files of ``docs/runs/reference``, one per seed; columns ``frames``,
    the metric and ``wall_s``), or a ``published`` figure with its ``source``."""

    label: str
    curves: tuple[str, ...] = ()
    per_update: bool = True  # the curve has a row per update (else its last-10 mean is not comparable)
    published: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Row:
    """One line of the table: a task, the trainer and the kept runs (one per seed), and its reference."""

    task: str
    trainer: str
    runs: tuple[str, ...]
    reference: Reference | None = None
    why_none: str = ""  # where there is no reference: why


SMAX_MAPPO = "JaxMARL's baselines/MAPPO/mappo_rnn_smax.py (c793d09), config unchanged but map and budget, measured here"
SMAX_IPPO = "JaxMARL's baselines/IPPO/ippo_rnn_smax.py (c793d09), config unchanged but map and budget, measured here"
BENCHMARL_MAPPO = ("BenchMARL 1.5.2's MAPPO, its configs unchanged but the budget and the env's keywords (ours), "
                   "measured here")

ROWS: tuple[Row, ...] = (
    Row("SMAX 3m (win rate)", "MAPPO, GRU (`mappo_rnn.py`)", ("smax3m_rnn_s0", "smax3m_rnn_s1", "smax3m_rnn_s2"),
        Reference(SMAX_MAPPO, ("jaxmarl_mappo_rnn_smax3m.csv",), per_update=False)),
    Row("SMAX 3m (win rate)", "IPPO, GRU (`mappo_rnn.py --ippo`)",
        ("smax3m_rnn_ippo_s0", "smax3m_rnn_ippo_s1", "smax3m_rnn_ippo_s2"),
        Reference(SMAX_IPPO, tuple(f"jaxmarl_ippo_rnn_smax3m_s{s}.csv" for s in range(3)))),
    Row("SMAX 3m (win rate)", "MAPPO, MLP (`mappo.py`)", ("smax3m_s0", "smax3m_s1", "smax3m_s2"),
        why_none="the recurrent rows above have JaxMARL's"),
    Row("SMAX 3m (win rate)", "IPPO, MLP (`mappo.py --ippo`)", ("smax3m_ippo_s0",),
        why_none="the recurrent rows above have JaxMARL's"),
    Row("SMAX 3s5z (win rate)", "MAPPO, GRU (`mappo_rnn.py`)",
        ("smax3s5z_rnn_s0", "smax3s5z_rnn_s1", "smax3s5z_rnn_s2"),
        Reference(SMAX_MAPPO, tuple(f"jaxmarl_mappo_rnn_smax3s5z_s{s}.csv" for s in range(3)))),
    Row("SMAX 3s5z (win rate)", "IPPO, GRU (`mappo_rnn.py --ippo`)",
        ("smax3s5z_rnn_ippo_s0", "smax3s5z_rnn_ippo_s1", "smax3s5z_rnn_ippo_s2"),
        Reference(SMAX_IPPO, ("jaxmarl_ippo_rnn_smax3s5z_s0.csv",))),
    Row("SMAX 2s3z (win rate)", "MAPPO, MLP (`mappo.py`)", ("smax2s3z_s0",),
        Reference("JaxMARL's MAPPO (GRU) at 10M steps, Mava's docs/images/smax_results/2s3z.png (b099835)",
                  published=1.0, source="read off a plot")),
    Row("MPE simple_spread (mean episode reward)", "MAPPO, GRU (`mappo_rnn.py`)",
        ("mpe_rnn_s0", "mpe_rnn_s1", "mpe_rnn_s2"),
        Reference("JaxMARL's baselines/MAPPO/mappo_rnn_mpe.py (c793d09), config unchanged but budget, measured here "
                  "(its return divided by its 3 agents into ours)", ("jaxmarl_mappo_rnn_mpe_spread.csv",),
                  per_update=False)),
    Row("MPE simple_spread (mean episode reward)", "MAPPO, MLP (`mappo.py`)", ("mpe_s0", "mpe_s1", "mpe_s2"),
        why_none="JaxMARL publishes MPE as plots without readable values; the GRU row above has its trainer's"),
    Row("LBF Foraging-8x8-2p-2f-coop (team return, at most 1)", "MAPPO, MLP (`mappo.py`)",
        ("lbf_s0", "lbf_s1", "lbf_s2"),
        why_none="EPyMARL's tables could not be read; the task's best return is 1.0"),
    Row("RWARE tiny-2ag (deliveries an episode)", "MAPPO, MLP (`mappo.py`)", ("rware_s0",),
        Reference("EPyMARL's feed-forward MAPPO at 20M steps, Mava's docs/images/rware_results/ff_mappo/main_readme/"
                  "tiny-2ag-1.png (bc9632e)", published=17.0, source="read off a plot")),
    Row("VMAS navigation (mean episode reward)", "MAPPO, MLP (`mappo.py`, `make demo`)", ("navigation_s0",),
        Reference(BENCHMARL_MAPPO, ("benchmarl_mappo_vmas_navigation_s0.csv",))),
    Row("VMAS balance (mean episode reward)", "MAPPO, MLP (`mappo.py`)", ("balance_s0",),
        Reference(BENCHMARL_MAPPO, ("benchmarl_mappo_vmas_balance_s0.csv",))),
    Row("MABrax ant_4x2, JaxMARL's (1,000-step episodes; mean episode reward)", "IPPO, MLP (`mappo.py --ippo`)",
        ("mabrax_ant_ippo_s0", "mabrax_ant_ippo_s1", "mabrax_ant_ippo_s2"),
        Reference("JaxMARL's baselines/IPPO/ippo_ff_mabrax.py (c793d09), config unchanged but budget, measured here",
                  ("jaxmarl_ippo_ff_mabrax_ant_4x2.csv",))),
    Row("Brax ant_4x2 (spring, 250-step episodes; mean episode reward)", "MAPPO, MLP (`mappo.py`)", ("ant_4x2_s0",),
        why_none="not JaxMARL's env (its backend, 1,000-step episodes): the row above has its trainer"),
    Row("Melting Pot commons_harvest__open (apples an episode)", "IPPO, convolutional (`mappo.py --ippo`)",
        ("commons_harvest_s0",), why_none="none published at this budget"),
)


def metric(summary: dict) -> str:
    """The column a run is read by: the win rate where the env reports one, else the mean episode reward."""
    return "won" if "final_won" in summary else "mean_episode_reward"


def read_rows(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows (``metrics.csv``, a reference curve)."""
    with path.open() as f:
        return list(csv.DictReader(f))


def numbers(rows: list[dict[str, str]], column: str) -> list[float]:
    """``column``'s values in the rows where it is a number (an update where no episode ended has none)."""
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
    return [v for v in values if not math.isnan(v)]


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


@dataclass
class Result:
    """What a run (or a reference curve) reached: its frames, final value, last-10 mean, wall seconds; a run's
    metric (``metric``) and its random policy's."""

    frames: float
    final: float
    last: float | None
    wall: float | None
    column: str = ""
    random: float | None = None


def run_result(name: str) -> Result:
    folder = RUNS / name
    if not (folder / "summary.json").is_file():
        raise FileNotFoundError(f"no kept run {folder}: run the command of docs/baselines.md with --out there")
    summary = json.loads((folder / "summary.json").read_text())
    column = metric(summary)
    values = numbers(read_rows(folder / "metrics.csv"), column)
    random = summary.get("random_policy_won" if column == "won" else "random_policy_reward")
    return Result(summary["frames"], summary[f"final_{column}"], mean(values[-LAST:]), summary["wall_s"], column,
                  random)


def curve_result(file: str, column: str, per_update: bool) -> Result:
    rows = read_rows(RUNS / "reference" / file)
    values = numbers(rows, column)
    return Result(float(rows[-1]["frames"]), values[-1], mean(values[-LAST:]) if per_update else None,
                  float(rows[-1]["wall_s"]))


def spread(xs: list[float], digits: int) -> str:
    """The mean, and the range over seeds where there are several."""
    text = f"{mean(xs):.{digits}f}"
    return text if len(xs) == 1 else f"{text} ({min(xs):.{digits}f} to {max(xs):.{digits}f})"


def cells(results: list[Result], digits: int) -> list[str]:
    """env steps, final, last-10 mean, wall time and env steps a second of a set of results."""
    frames = mean(r.frames for r in results)
    walls = [r.wall for r in results if r.wall is not None]
    lasts = [r.last for r in results if r.last is not None]
    wall = mean(walls) if walls else None
    return [f"{frames / 1e6:.2f}M", spread([r.final for r in results], digits),
            spread(lasts, digits) if lasts else "",
            f"{wall:,.0f} s" if wall is not None else "", f"{frames / wall:,.0f}" if wall else ""]


def table() -> str:
    """The table, in Markdown."""
    lines = ["| task | trainer | seeds | env steps | final | mean of the last 10 updates | wall time | env steps/s "
             "| random policy |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in ROWS:
        results = [run_result(name) for name in row.runs]
        column = results[0].column
        digits = 3 if column == "won" else 2
        randoms = [r.random for r in results if r.random is not None]
        lines.append("| " + " | ".join([row.task, row.trainer, str(len(results)), *cells(results, digits),
                                        f"{mean(randoms):.{digits}f}" if randoms else ""]) + " |")
        ref = row.reference
        if ref is None:
            lines.append(f"| | *reference: none ({row.why_none})* | | | | | | | |")
        elif ref.curves:
            refs = [curve_result(file, column, ref.per_update) for file in ref.curves]
            lines.append("| | *" + ref.label + "* | " + " | ".join([str(len(refs)), *cells(refs, digits)]) + " | |")
        else:
            lines.append(f"| | *{ref.label}* | | | {ref.published:.{digits}f} ({ref.source}) | | | | |")
    return "\n".join(lines) + "\n"


def render(page: str) -> str:
    """``page`` with the table between its markers replaced by the one the runs give."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{PAGE} lacks the markers {BEGIN!r} ... {END!r} around its table")
    return f"{head}{BEGIN}\n\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    page = PAGE.read_text()
    if "--print" in argv:
        print(table(), end="")
        return 0
    wanted = render(page)
    if "--check" in argv:
        if wanted != page:
            print(f"{PAGE.relative_to(ROOT)}: its table is not what docs/runs give; run make baselines",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted)
    print(f"wrote the table of {PAGE.relative_to(ROOT)} ({len(ROWS)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
