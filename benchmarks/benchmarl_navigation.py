"""MAPPO in BenchMARL on our ``vmas/navigation`` and on BenchMARL's own ``VmasTask.NAVIGATION``, side by side.

    python benchmarks/benchmarl_navigation.py                       # 300k frames, seed 0 (needs .venv-benchmarl)
    python benchmarks/benchmarl_navigation.py --frames 60000 --envs 600 --epochs 1 --seeds 1 2   # collection speed

The same BenchMARL ``Experiment``, algorithm (``MappoConfig.get_from_yaml()``), models (``MlpConfig``), seed and
experiment configuration (BenchMARL's ``base_experiment.yaml`` with the frames, envs per batch and devices set
here) run on both tasks; the task keywords are BenchMARL's ``vmas/navigation.yaml`` for both. The runs take
turns (ours, BenchMARL's, per seed) so that a shared machine's load weighs on both alike. BenchMARL's own task
builds TorchRL's ``VmasEnv``, whose partial reset calls VMAS's ``reset_at`` once per ended env; ours resets them
in one batched call.

Prints a table per task (final mean episode reward, collection frames/s from BenchMARL's own
``timers/collection_time``, training time) and writes ``curves.csv`` and ``benchmarl_navigation.png`` (the mean
episode reward of the collected batches against frames) to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

from benchmarl.algorithms import MappoConfig
from benchmarl.environments import VmasTask
from benchmarl.experiment import Experiment, ExperimentConfig
from benchmarl.models import MlpConfig

from marl_envs.benchmarl import task

SCALARS = ("collection_reward_episode_reward_mean", "timers_collection_time", "timers_training_time",
           "counters_total_frames")


def config(frames: int, envs: int, epochs: int | None, folder: Path) -> ExperimentConfig:
    """BenchMARL's default experiment, on the CPU, with the frames, envs (and epochs) of this comparison, CSV logs
    only."""
    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.max_n_frames = frames
    cfg.on_policy_n_envs_per_worker = envs
    if epochs is not None:
        cfg.on_policy_n_minibatch_iters = epochs
    cfg.evaluation = False
    cfg.render = False
    cfg.loggers = ["csv"]
    cfg.create_json = False
    cfg.checkpoint_interval = 0
    cfg.save_folder = str(folder)
    return cfg


def scalars(experiment: Experiment) -> dict[str, list[float]]:
    """The run's logged series that this comparison reads, from BenchMARL's CSV logs, one value per iteration
    (NaN where BenchMARL logged none: the episode reward of a batch in which no episode ended)."""
    folder = Path(experiment.folder_name) / experiment.name / "scalars"
    series = {}
    for name in SCALARS:
        with open(folder / f"{name}.csv") as f:
            logged = {int(step): float(value) for step, value in csv.reader(f)}
        series[name] = [logged.get(i, float("nan")) for i in range(experiment.n_iters_performed)]
    return series


def last(values: list[float]) -> float:
    """The last logged value of a series."""
    return next((v for v in reversed(values) if v == v), float("nan"))


def run(which: str, seed: int, frames: int, envs: int, epochs: int | None, out: Path) -> dict[str, list[float]]:
    keywords = VmasTask.NAVIGATION.get_from_yaml().config  # BenchMARL's task keywords, for both tasks
    chosen = task("vmas/navigation", **keywords) if which == "marl-envs" else VmasTask.NAVIGATION.get_from_yaml()
    folder = out / f"{which}_seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    experiment = Experiment(task=chosen, algorithm_config=MappoConfig.get_from_yaml(),
                            model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                            seed=seed, config=config(frames, envs, epochs, folder))
    experiment.run()
    series = scalars(experiment)
    series["wall"] = [time.perf_counter() - start]
    return series


def plot(results: dict[tuple[str, int], dict[str, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    colours = {"marl-envs": "tab:blue", "BenchMARL": "tab:orange"}
    for (which, seed), series in sorted(results.items()):
        label = f"{which} vmas/navigation" if seed == min(s for w, s in results if w == which) else None
        points = [(x, y) for x, y in zip(series["counters_total_frames"],
                                         series["collection_reward_episode_reward_mean"]) if y == y]
        ax.plot(*zip(*points), color=colours[which], label=label, alpha=0.9)
    ax.set_xlabel("frames")
    ax.set_ylabel("mean episode reward (collected batches)")
    ax.set_title("BenchMARL MAPPO on VMAS navigation: our env vs BenchMARL's")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300_000)
    parser.add_argument("--envs", type=int, default=60, help="envs per batch (BenchMARL's on_policy_n_envs_per_worker)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--epochs", type=int, help="on_policy_n_minibatch_iters, the same for both (default: "
                        "BenchMARL's 45; fewer to time collection alone)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the same for both)")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarl_navigation"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    results = {}
    for seed in args.seeds:
        for which in ("marl-envs", "BenchMARL"):
            results[which, seed] = run(which, seed, args.frames, args.envs, args.epochs, args.out)
    with open(args.out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "seed", "frames", "episode_reward_mean", "collection_s", "training_s"])
        for (which, seed), s in results.items():
            for row in zip(s["counters_total_frames"], s["collection_reward_episode_reward_mean"],
                           s["timers_collection_time"], s["timers_training_time"]):
                writer.writerow([which, seed, *row])
    plot(results, args.out / "benchmarl_navigation.png")
    print(f"MAPPO (BenchMARL {__import__('benchmarl').__version__}), vmas/navigation, {args.frames} frames, "
          f"{args.envs} envs per batch, {args.threads} torch thread(s)")
    print(f"{'task':<10} {'seed':>4} {'final reward':>12} {'collection frames/s':>19} {'collection s':>12} "
          f"{'training s':>10} {'wall s':>7}")
    for (which, seed), s in results.items():
        frames, collection = s["counters_total_frames"][-1], sum(s["timers_collection_time"])
        print(f"{which:<10} {seed:>4} {last(s['collection_reward_episode_reward_mean']):>12.3f} "
              f"{frames / collection:>19.0f} {collection:>12.1f} {sum(s['timers_training_time']):>10.1f} "
              f"{s['wall'][0]:>7.0f}")
    print(f"curves: {args.out / 'curves.csv'}, plot: {args.out / 'benchmarl_navigation.png'}")


if __name__ == "__main__":
    main()
