"""Draw the training figures of the docs from the runs kept in ``docs/runs`` (each the ``--out`` folder of an
``examples/mappo.py`` or ``examples/mappo_rnn.py`` run: ``metrics.csv``, ``timings.csv``, ``summary.json``), with
the published results they are read against.

    python scripts/training_figures.py            # every figure, into docs/img
    python scripts/training_figures.py smax_2s3z  # one

Each figure names its runs, the random policy's level (read from the runs' ``summary.json``) and, where one is
citable, the published result: its value, its source, whether it is exact or read off a plot and the budget it
was reached at (``../shared/reference/published_numbers.md`` gathers them). Where none is citable the figure says
so. A figure's notes also say what the runs were: their frames against the reference's budget, the machine, the
date.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "runs"
IMG = ROOT / "docs" / "img"
MACHINE = "the 2-core CPU reference machine, 1 torch thread a run"
RECURRENT = "MAPPO, GRU (mappo_rnn.py)"


@dataclass(frozen=True)
class Figure:
    """One figure: ``runs`` (folders of ``docs/runs``) drawn per label against env steps and against training time,
    lines for the published results, notes."""

    runs: dict[str, str]  # run folder -> label (runs with one label are drawn as their mean and range)
    published: tuple[str, ...] = ()  # "[panel:]label=value" lines (plot_runs's --reference)
    # "label=file" of docs/runs/reference: another trainer's curve measured on the same machine (its figures only)
    curves: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    random_panels: tuple[str, ...] = ("reward",)  # where the random policy's level is drawn
    ceiling: str = ""  # "label=value": the best return the task allows
    date: str = "2026-11-27"
    machine: str = MACHINE


def beside_benchmarl(task: str, ours: str) -> Figure:
    """The VMAS run ``<task>_s0`` of ours (``ours``: what it was) beside BenchMARL's own MAPPO on the same task."""
    return Figure(
        runs={f"{task}_s0": "MAPPO (mappo.py), seed 0"},
        curves=(f"BenchMARL's own MAPPO, seed 0=benchmarl_mappo_vmas_{task}_s0.csv",),
        notes=(f"{ours} BenchMARL's own MAPPO: BenchMARL 1.5.2 with its configs but 120k frames and the env's "
               "keywords of ours, no evaluation, 2026-12-07, its time from its process start. Each ran beside another "
               "run, one torch thread each.",),
        date="2026-11-28 and 2026-12-07")


FIGURES: dict[str, Figure] = {
    "smax_2s3z": Figure(
        runs={"smax2s3z_s0": "MAPPO (MLP), seed 0"},
        published=("won:JaxMARL MAPPO (GRU), 1e7 steps, read off a plot=1.0",
                   "won:JaxMARL IPPO (GRU), 1e7 steps, read off a plot=0.9"),
        notes=("Published: JaxMARL's recurrent MAPPO about 1.0 and IPPO about 0.9 win rate on 2s3z, read off the plot "
               "in Mava's docs/images/smax_results/2s3z.png (instadeepai/Mava @ b099835), whose text gives 10M steps.",
               "These runs: 2.4M frames (a quarter of that budget), an MLP policy, 120 envs."),
        random_panels=("reward", "won")),
    "smax_3m": Figure(
        runs={"smax3m_s0": "MAPPO", "smax3m_s1": "MAPPO", "smax3m_s2": "MAPPO", "smax3m_ippo_s0": "IPPO"},
        notes=("No published result is drawn: JaxMARL's SMAX benchmark has no 3m map, and the MAPPO paper's SMAC 3m "
               "table (arXiv 2103.01955) could not be read; see the 2s3z figure for a published SMAX result.",
               "These runs: 1.5M frames each, an MLP policy, 120 envs."),
        random_panels=("reward", "won")),
    "mpe_spread": Figure(
        runs={"mpe_s0": "MAPPO", "mpe_s1": "MAPPO", "mpe_s2": "MAPPO"},
        notes=("No published return is drawn: JaxMARL publishes its MPE results as plots without values that could "
               "be read, and its baselines train recurrent policies for 1e7 steps.",
               "These runs: 360k frames each (under 4% of that budget), an MLP policy, 60 envs.")),
    "mappo_lbforaging_8x8": Figure(
        runs={"lbf_s0": "MAPPO", "lbf_s1": "MAPPO", "lbf_s2": "MAPPO"},
        notes=("No published return is drawn: EPyMARL's benchmark (Papoudakis et al., 2021, arXiv 2006.07869) reports "
               "MAPPO on this task in tables that could not be read; the task's maximum team return is 1.0.",
               "These runs: 1M frames each, team return, advantages standardised per minibatch, 64 envs."),
        ceiling="maximum team return=1.0"),
    "mappo_rware_tiny_2ag": Figure(
        runs={"rware_s0": "MAPPO, seed 0"},
        published=("EPyMARL MAPPO, 20M steps, read off a plot=17",),
        notes=("Published: EPyMARL's feed-forward MAPPO about 17 deliveries an episode on rware-tiny-2ag after 20M "
               "steps, read off Mava's docs/images/rware_results/ff_mappo/main_readme/tiny-2ag-1.png (@ bc9632e).",
               "These runs: 3M frames (15% of that budget), team return, 64 envs."),
    ),
    "smax_3m_recurrent": Figure(
        runs=dict.fromkeys(["smax3m_rnn_s0", "smax3m_rnn_s1", "smax3m_rnn_s2"], RECURRENT),
        curves=("JaxMARL's own MAPPO (GRU), seed 0=jaxmarl_mappo_rnn_smax3m.csv",),
        random_panels=("reward", "won"),
        notes=("JaxMARL's own MAPPO: baselines/MAPPO/mappo_rnn_smax.py at c793d09 with its SMAX config but map 3m and "
               "1.5M steps, run on this machine alone (its time from the process start, 22 s of compilation "
               "included); ours: mappo_rnn.py's preset, 3 seeds, one run at a time, time from the first step.",),
        date="2026-12-06 (JaxMARL's run 2026-11-28)", machine="the 2-core CPU reference machine, 2 torch threads"),
    "smax_3s5z_recurrent": Figure(
        runs={**dict.fromkeys(["smax3s5z_rnn_s0", "smax3s5z_rnn_s1", "smax3s5z_rnn_s2"],
                              f"{RECURRENT}, 2 threads, alone"),
              **dict.fromkeys(["smax3s5z_rnn_t1_s0", "smax3s5z_rnn_t1_s1", "smax3s5z_rnn_t1_s2"],
                              f"{RECURRENT}, 1 thread, 2-4 runs at a time")},
        curves=tuple(f"JaxMARL's own MAPPO (GRU), seed {s}, alone=jaxmarl_mappo_rnn_smax3s5z_s{s}.csv"
                     for s in range(3)),
        random_panels=("reward", "won"),
        notes=("JaxMARL's own MAPPO: baselines/MAPPO/mappo_rnn_smax.py at c793d09 with its SMAX config but map 3s5z "
               "and 1.5M steps, seeds 0 to 2, each alone on the machine (its time from the process start, compilation "
               "included); ours: mappo_rnn.py's preset, 3 seeds at 2 torch threads, each alone, and 3 at 1 thread, "
               "two to four runs at a time (their times slower than alone).",),
        date="2026-12-06", machine="the 2-core CPU reference machine"),
    "smax_3s5z_recurrent_ippo": Figure(
        runs=dict.fromkeys(["smax3s5z_rnn_ippo_s0", "smax3s5z_rnn_ippo_s1", "smax3s5z_rnn_ippo_s2"],
                           "IPPO, GRU (mappo_rnn.py --ippo), 2 threads, alone"),
        curves=("JaxMARL's own IPPO (GRU), seed 0, alone=jaxmarl_ippo_rnn_smax3s5z_s0.csv",),
        random_panels=("reward", "won"),
        notes=("JaxMARL's own IPPO: baselines/IPPO/ippo_rnn_smax.py at c793d09 with its config but map 3s5z and 1.5M "
               "steps, seed 0, alone on the machine (its time from the process start, compilation included); ours: "
               "mappo_rnn.py's preset with --ippo, 3 seeds at 2 torch threads, each alone.",),
        date="2026-12-06", machine="the 2-core CPU reference machine"),
    "smax_3m_recurrent_ippo": Figure(
        runs=dict.fromkeys(["smax3m_rnn_ippo_s0", "smax3m_rnn_ippo_s1", "smax3m_rnn_ippo_s2"],
                           "IPPO, GRU (mappo_rnn.py --ippo)"),
        curves=tuple(f"JaxMARL's own IPPO (GRU), seed {s}=jaxmarl_ippo_rnn_smax3m_s{s}.csv" for s in range(3)),
        random_panels=("reward", "won"),
        notes=("JaxMARL's own IPPO: baselines/IPPO/ippo_rnn_smax.py at c793d09 with its config but map 3m and 1.5M "
               "steps (distrax's Categorical and wandb replaced by stand-ins outside this repository), 3 seeds; "
               "ours: mappo_rnn.py's preset with --ippo, 3 seeds, one torch thread each. JaxMARL's ran two or three at "
               "a time on the 2 cores, ours two to four at a time: the times are slower than alone.",),
        date="2026-12-06 (JaxMARL's runs 2026-12-02)", machine="the 2-core CPU reference machine"),
    "mpe_spread_recurrent": Figure(
        runs=dict.fromkeys(["mpe_rnn_s0", "mpe_rnn_s1", "mpe_rnn_s2"], RECURRENT),
        curves=("JaxMARL's own MAPPO (GRU), seed 0=jaxmarl_mappo_rnn_mpe_spread.csv",),
        notes=("JaxMARL's own MAPPO: baselines/MAPPO/mappo_rnn_mpe.py at c793d09 with its config but 1M steps, run on "
               "this machine alone; its logged return (each agent's reward summed over agents, then over the episode) "
               "divided by the 3 agents into ours (each agent's episode return, averaged over agents), and averaged "
               "over blocks of 8 updates (16,384 steps: it logs the last return of each of its 16 envs, ours the "
               "mean of every episode of an update).",),
        date="2026-11-28", machine="the 2-core CPU reference machine, 2 torch threads"),
    "mabrax_ant_4x2_ippo": Figure(
        runs=dict.fromkeys(["mabrax_ant_ippo_s0", "mabrax_ant_ippo_s1", "mabrax_ant_ippo_s2"],
                           "IPPO, MLP (mappo.py --ippo)"),
        curves=("JaxMARL's own IPPO, seed 30=jaxmarl_ippo_ff_mabrax_ant_4x2.csv",),
        notes=("JaxMARL's own IPPO: baselines/IPPO/ippo_ff_mabrax.py at c793d09 with its config but 3M steps "
               "(TOTAL_TIMESTEPS=3e6; its seed 30), beside our seed 0 (its time from the process start, compilation "
               "included; its return is each env's last finished episode averaged over an update's steps); ours: "
               "mappo.py's jaxmarl/ant_4x2 preset with --ippo, 3 seeds, one torch thread each, two to four runs at a time.",),
        date="2026-12-06", machine="the 2-core CPU reference machine"),
    "meltingpot_commons_harvest": Figure(
        runs={"commons_harvest_s0": "IPPO, convolutional torso (mappo.py --ippo), seed 0"},
        notes=("No published result is drawn (none at this budget). This run: 150k frames, 7 players' 88x88 views, "
               "250-step episodes, 8 envs; the random policy's level is its return over as many frames.",),
        date="2026-12-06", machine="the 2-core CPU reference machine, 2 torch threads"),
    "mappo_navigation": beside_benchmarl(
        "navigation", "The run is make demo's (examples/mappo.py --env vmas/navigation: 3 agents, 100-step episodes, "
        "VMAS's shared reward, seed 0, 2026-11-28)."),
    "mappo_balance": beside_benchmarl(
        "balance", "examples/mappo.py --env vmas/balance (3 agents, 100-step episodes, seed 0, 2026-11-28)."),
}


def random_level(run: Path, panel: str) -> float | None:
    """The random policy's mean episode reward (``reward``) or win rate (``won``) in a run's summary."""
    summary = json.loads((run / "summary.json").read_text())
    return summary.get("random_policy_reward" if panel == "reward" else "random_policy_won")


def arguments(name: str, figure: Figure) -> list[str]:
    """``examples/plot_runs.py``'s command line for ``figure``."""
    folders = [RUNS / run for run in figure.runs]
    missing = [str(f) for f in folders if not (f / "metrics.csv").is_file()]
    if missing:
        raise FileNotFoundError(f"{name}: no run at {', '.join(missing)}; run examples/mappo.py (or mappo_rnn.py) with "
                                f"--out there (the command is in the docs beside the figure)")
    references = list(figure.published)
    for panel in figure.random_panels:
        levels = [level for f in folders if (level := random_level(f, panel)) is not None]
        if levels:
            references.append(f"{panel}:random policy={sum(levels) / len(levels):.3g}")
    if figure.ceiling:
        references.append(figure.ceiling)
    notes = [*figure.notes, f"{figure.date}, {figure.machine}; drawn by scripts/training_figures.py from docs/runs."]
    curves = [f"{label}={RUNS / 'reference' / file}" for label, _, file in (c.rpartition("=") for c in figure.curves)]
    return [*map(str, folders), "--label", *figure.runs.values(), "--reference", *references, "--note", *notes,
            *(["--reference-curve", *curves] if curves else []), "--per-second",
            "--out", str(IMG / f"{name}.png")]


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT / "examples"))
    import plot_runs

    unknown = [name for name in argv if name not in FIGURES]
    if unknown:
        print(f"unknown figure {unknown[0]!r}; figures: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    for name in argv or FIGURES:
        plot_runs.main(arguments(name, FIGURES[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
