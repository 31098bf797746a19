"""What ``mappo.py`` and ``mappo_rnn.py`` share besides their algorithm (reading a trainer does not need it): the
presets (``presets.toml``), the command line, seeds and torchrun, episode accounting, the files a run writes,
checkpoints, the random-policy baseline, the GIF, and ``gae`` (``ippo_minimal.py`` keeps its own copy)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import pickle
import random
import re
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDictBase
from torch import distributed as dist
from torch import nn

import marl_envs
from marl_envs import distributed
from marl_envs.cli import parse_kwargs

NestedKey = str | tuple[str, ...]

# The per-env presets, in presets.toml beside the trainers: [ff."ENV"] mappo.py's, [rnn."ENV"] mappo_rnn.py's
_PRESETS = tomllib.loads(Path(__file__).with_name("presets.toml").read_text())
PRESETS: dict[str, dict] = _PRESETS["ff"]
RNN_PRESETS: dict[str, dict] = _PRESETS["rnn"]
RNN_OWN = tuple(_PRESETS["rnn_own"])  # mappo_rnn.py's DEFAULTS that an env's feed-forward preset does not override


def presets(env: str, defaults: dict, recurrent: bool = False, ippo: bool = False) -> dict:
    """``defaults`` under the env's preset (``recurrent``: the feed-forward one less ``RNN_OWN``, then its own, then
    with ``ippo`` its IPPO one)."""
    own = {**RNN_PRESETS.get(env, {}), **(_PRESETS["rnn_ippo"].get(env, {}) if ippo else {})} if recurrent else {}
    return {**defaults, **{k: v for k, v in PRESETS.get(env, {}).items() if not (recurrent and k in RNN_OWN)}, **own}


def parser(doc: str, defaults: dict) -> argparse.ArgumentParser:
    """The arguments both trainers take; a setting left out comes from the env's preset, else ``defaults``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation", help="any name marl_envs.make accepts")
    p.add_argument("--env-kwargs", nargs="*", default=None, metavar="KEY=VALUE", help="forwarded to marl_envs.make")
    p.add_argument("--num-envs", type=int, help="envs per process (per rank under torchrun)")
    p.add_argument("--frames", type=int, help="env-steps to train for, all ranks together, rounded down to whole "
                                              "batches (one at least; the start prints it)")
    p.add_argument("--steps-per-batch", type=int, help="steps per env per update (default: max_steps, or 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (the result depends on it)")
    p.add_argument("--device", default=None, help="default: cpu; under torchrun cuda:LOCAL_RANK where CUDA is")
    p.add_argument("--out", default=None, help="output folder (default runs/<env>)")
    p.add_argument("--ippo", action="store_true", help="decentralised critics (IPPO) instead of a centralised one")
    p.add_argument("--minibatch", type=int, help="(env, step) samples per gradient step, all ranks together")
    for name, kind, what in [("epochs", int, "passes over each batch"), ("lr", float, "Adam's learning rate"),
                             ("hidden", int, "hidden units"), ("gamma", float, "discount"), ("lmbda", float, "GAE "
                             "lambda"), ("clip", float, "PPO's ratio clip"), ("entropy", float, "entropy bonus"),
                             ("max_grad_norm", float, "gradient norm clip")]:
        p.add_argument(f"--{name.replace('_', '-')}", type=kind, help=f"{what} (default {defaults[name]})")
    for flag, what in [("anneal-lr", f"the learning rate decays linearly to 0 (default {defaults['anneal_lr']})"),
                       ("normalize-advantage", "standardise each minibatch's advantages (default: the env's preset, "
                                               f"else {defaults['normalize_advantage']})"),
                       ("team-return", "an episode's return is its agents' sum (EPyMARL's tasks), not their mean")]:
        p.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=None, help=what)
    p.add_argument("--gif", action=argparse.BooleanOptionalAction, default=False,
                   help="after training, OUT/policy.gif of the trained policy (rendering can outlast training)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--random-frames", type=int, metavar="N",
                   help="env-steps of uniformly random actions for the baseline beside the trained policy's in "
                        "summary.json and the figure (default: as many as training; whole batches, one at least)")
    add_checkpoint_arguments(p)
    return p


def finish_args(p: argparse.ArgumentParser, args: argparse.Namespace, preset: dict, trainer: str
                ) -> argparse.Namespace:
    """Check the arguments; fill the missing ones from ``preset``, or with ``--resume`` from ``trainer``'s run."""
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    check_random_frames(p, args)
    if resumed_args(p, args, preset):
        if args.trainer != trainer:
            p.error(f"--resume {args.out}: the run was trained by {args.trainer}; resume it with "
                    f"examples/{args.trainer}")
        return args
    args.trainer = trainer
    args.env_kwargs = parse_kwargs(args.env_kwargs) if args.env_kwargs is not None else dict(preset["env_kwargs"])
    for name, value in preset.items():
        if getattr(args, name, 0) is None:
            setattr(args, name, value)
    args.out = Path(args.out or Path("runs") / args.env.replace("/", "_"))
    return args


def check_random_frames(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a negative ``--random-frames`` (every trainer's parser takes it)."""
    if args.random_frames is not None and args.random_frames < 0:
        p.error(f"--random-frames must be 0 or more (one batch at least runs), got {args.random_frames}")


def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """``--checkpoint-every N`` and ``--resume DIR`` (both trainers' and the TorchRL variant's)."""
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="N", help="OUT/checkpoint.pt every N updates")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run whose --out was DIR from DIR/checkpoint.pt, with that run's settings")


def resumed_args(p: argparse.ArgumentParser, args: argparse.Namespace, defaults: dict | None = None) -> bool:
    """Check ``--checkpoint-every``; with ``--resume DIR``, True and ``args`` given the run's saved settings."""
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be 0 (never) or more, got {args.checkpoint_every}")
    if args.resume is None:
        return False
    own = {"resume", "quiet", "gif", "checkpoint_every"} | {name for name in ("frames", "random_frames")
                                                              if getattr(args, name, None) is not None}
    for name, value in read_checkpoint(Path(args.resume))["args"].items():
        if name not in own:
            setattr(args, name, value)
    for name, value in (defaults or {}).items():  # a setting that checkpoints of an earlier version did not hold
        if getattr(args, name, 0) is None:
            setattr(args, name, value)
    args.out = Path(args.resume)
    return True


class Run:
    """A run's set-up and bookkeeping, as a context manager: ``args.threads`` torch threads (fixed: reductions split
    over threads round differently), this rank's device and seed; under torchrun, the process group."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.info = distributed.rank_info()
        if args.minibatch % self.info.world_size:
            raise ValueError(f"--minibatch {args.minibatch} counts samples over all {self.info.world_size} ranks; "
                             f"pass a multiple of {self.info.world_size}")
        launched = args.device == "cuda" or (args.device is None and self.info.launched)  # this rank's GPU, if any
        self.device = distributed.rank_device(self.info, cuda=True if args.device else None) if launched else \
            torch.device(args.device or "cpu")
        self.seed = distributed.rank_seed(args.seed, self.info.rank, self.info.world_size)
        self.rows, self.frames, self.first, self.bar, self.joined = [], 0, 0, None, None

    def __enter__(self) -> Run:
        self.previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.args.threads)
        self.joined = distributed.init_process_group(self.device, self.info)  # None outside torchrun
        # torch's generator (the trainers' only), NumPy's and Python's (VMAS copies theirs when first imported)
        torch.manual_seed(self.seed)
        np.random.seed(self.seed % 2**32)
        random.seed(self.seed)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.joined and exc[0] is None:
            dist.barrier()
            dist.destroy_process_group()
        torch.set_num_threads(self.previous_threads)

    def make_env(self) -> marl_envs.EnvBase:
        env = marl_envs.make(self.args.env, num_envs=self.args.num_envs, device=self.device, **self.args.env_kwargs)
        env.set_seed(self.seed)
        return env

    def budget(self, steps: int) -> tuple[int, int]:
        """``(updates, minibatch per rank)``; rank 0 prints the frames the run will take."""
        batch = self.info.world_size * self.args.num_envs * steps
        updates, asked = max(1, self.args.frames // batch), self.args.random_frames
        # the random baseline's batches: by default the budget's, else --random-frames in whole batches
        self.random_batches = updates if asked is None else max(1, asked // batch)
        if self.info.is_main:
            ranks = f"{self.info.world_size} ranks x " if self.info.world_size > 1 else ""
            print(f"{self.args.env}: {updates * batch:,} frames = {updates} update{'s' * (updates != 1)} x {ranks}"
                  f"{self.args.num_envs} envs x {steps} steps (--frames {self.args.frames:,} in whole batches); then "
                  f"{self.random_batches * batch:,} frames of random actions for the baseline (--random-frames)",
                  flush=True)
        return updates, self.args.minibatch // self.info.world_size

    def same_start(self, params: list[torch.Tensor]) -> None:
        """Every rank starts from rank 0's parameters."""
        if self.info.world_size > 1:
            for p in params:
                dist.broadcast(p.data, src=0)

    def average_gradients(self, params: list[torch.Tensor]) -> None:
        """Every rank's gradients replaced by their mean over ranks, in one collective call."""
        if self.info.world_size == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= self.info.world_size
        for p, g in zip(params, flat.split([g.numel() for g in grads])):
            p.grad = g.view_as(p)

    def resume(self, env, model: nn.Module, optim: torch.optim.Optimizer, updates: int, steps: int) -> int:
        """The first update: 0, or with ``--resume`` the checkpoint's next, its state restored; starts the bar."""
        if self.args.resume:
            self.rows, self.frames, self.first, spent, self.extra = load_checkpoint(self.args, model, optim,
                                                                                    self.info.world_size)
            env.set_seed(distributed.rank_seed(self.args.seed + self.first, self.info.rank, self.info.world_size))
        else:
            spent, self.extra = 0.0, {}
        if not self.args.quiet and self.info.is_main:
            from tqdm import tqdm

            self.bar = tqdm(total=updates * self.info.world_size * self.args.num_envs * steps, unit="frame",
                            unit_scale=True, desc=self.args.env, initial=self.frames, disable=None)  # a terminal only
        self.updates, self.start = updates, time.perf_counter() - spent  # wall time counts on from a checkpoint's
        return self.first

    def log(self, iteration: int, data: TensorDictBase, stats: dict, model: nn.Module,
            optim: torch.optim.Optimizer, extra: dict | None = None) -> dict:
        """After an update: the row of ``stats``, the bar and the checkpoint (with ``extra``) when it is due."""
        self.frames += data.numel() * self.info.world_size
        wall = time.perf_counter() - self.start
        row = {"frames": self.frames, **stats, "wall_s": round(wall, 2)}
        self.rows.append(row)
        every = self.args.checkpoint_every
        if every and ((iteration + 1) % every == 0 or iteration + 1 == self.updates) and self.info.is_main:
            save_checkpoint(self.args, self.rows, self.frames, iteration + 1, wall, model, optim, extra)
        if self.bar is not None:
            self.bar.update(data.numel() * self.info.world_size)
            self.bar.set_postfix(episode_reward=f"{row['mean_episode_reward']:.3f}", fps=f"{self.frames / wall:,.0f}")
        return row

    def finish(self, env, rewards: list[NestedKey], steps: int, algorithm: str, play=None) -> dict:
        """The summary (beside the random policy's), the files and, with ``--gif``, the GIF."""
        wall = time.perf_counter() - self.start
        self.bar = self.bar.close() if self.bar is not None else None  # the random policy's steps are not training's
        random_columns = random_policy(env, rewards, self.random_batches, steps, self.info,
                                       bool(self.args.team_return), bar=not self.args.quiet and self.info.is_main)
        summary = {
            "env": self.args.env, "env_kwargs": self.args.env_kwargs, "algorithm": algorithm, "frames": self.frames,
            "wall_s": round(wall, 2), "final_mean_episode_reward": last_finite(self.rows, "mean_episode_reward"),
            "random_policy_reward": random_columns.pop("mean_episode_reward"),
            "random_policy_frames": random_columns.pop("frames"),
            **{f"final_{key}": last_finite(self.rows, key) for key in random_columns},
            **{f"random_policy_{key}": value for key, value in random_columns.items()},
            "seed": self.args.seed, "threads": self.args.threads, "world_size": self.info.world_size,
        }
        if self.info.is_main:
            write_outputs(self.args, self.rows, summary)  # before the GIF: a failed rendering keeps the curve
            if self.args.gif and play is not None:
                gif = write_gif(self.args, play, steps, self.device)
                if gif is not None:
                    summary["gif"] = str(gif)  # summary.json holds every field main() prints
                    (self.args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        env.close()
        return summary


@torch.no_grad()
def gae(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor,
        terminated: torch.Tensor, gamma: float, lmbda: float) -> torch.Tensor:
    """GAE over ``(B, T, ...)`` (0/1 float ``done``, ``terminated``): the next value bootstrapped unless terminated."""
    delta = reward + gamma * next_value * (1 - terminated) - value
    advantage = torch.zeros_like(delta)
    running = torch.zeros_like(delta[:, 0])
    for t in reversed(range(delta.shape[1])):
        running = delta[:, t] + gamma * lmbda * (1 - done[:, t]) * running
        advantage[:, t] = running
    return advantage


def as_tuple(key: NestedKey) -> tuple[str, ...]:
    """A nested key as a tuple (``"done"`` -> ``("done",)``)."""
    return (key,) if isinstance(key, str) else tuple(key)


NOT_METRICS = frozenset({"chance", "current_player"})  #: info entries that describe the game, not the play


class Episodes:
    """Per group, the episode return averaged over agents (summed with ``team``, as EPyMARL reports it); each info
    metric at the steps that end an episode (SMAX's ``won``: the win rate); for a group taking turns (a board game,
    zero-sum), each player's return and win rate. ``sums`` gives the sums that ranks add up, ``update`` the row."""

    def __init__(self, env: marl_envs.EnvBase, rewards: list[NestedKey], team: bool = False):
        self.names = list(env.group_map) or ["agent"]
        self.rewards, self.team = rewards, team
        self.infos = [[k for k in env.observation_keys if isinstance(k, tuple) and k[:2] == (name, "info")
                       and k[-1] not in NOT_METRICS] for name in self.names]
        self.acting = [(name, "mask") if name in env.group_map and len(env.group_map[name]) > 1
                       and (name, "mask") in env.observation_keys else None for name in self.names]
        self.agents = [list(env.group_map.get(name, [])) for name in self.names]
        self.players: list[list[str]] | None = None
        self.running, self.player_running = [None] * len(rewards), [None] * len(rewards)

    def sums(self, data: TensorDictBase) -> torch.Tensor:
        """``(groups, width)``: per group, the ended episodes' return sum and count, info sums, players' (padded)."""
        if self.players is None:
            self.players = [agents if key is not None and bool((data.get(key).flatten(2).sum(-1) == 1).all()) else []
                            for key, agents in zip(self.acting, self.agents)]
        out = []
        done = data.get(("next", "done")).squeeze(-1)  # the env is the unit of episodes
        width = 2 + max(len(i) + 2 * len(p) for i, p in zip(self.infos, self.players))
        for i, reward_key in enumerate(self.rewards):
            per_agent = data.get(("next", *as_tuple(reward_key))).flatten(2)
            reward = per_agent.sum(-1) if self.team else per_agent.mean(-1)  # (B, T): over agents
            self.running[i], ended = ended_sums(self.running[i], reward, done)
            row = [ended.sum(), ended.new_tensor(ended.numel())]
            row += [data.get(("next", *key)).flatten(2).float().mean(-1)[done].sum() for key in self.infos[i]]
            if self.players[i]:  # each player's summed returns and wins
                self.player_running[i], won = ended_sums(self.player_running[i], per_agent, done)
                row += [*won.sum(0), *(won > 0).float().sum(0)]
            out.append(torch.stack(row + [ended.new_zeros(())] * (width - len(row))))
        return torch.stack(out)

    def means(self, sums: torch.Tensor, info: distributed.RankInfo) -> dict[str, float]:
        """The row's columns from ``sums`` (added up over ranks first): nan where no episode finished."""
        if info.world_size > 1:
            dist.all_reduce(sums)
        rewards = (sums[:, 0] / sums[:, 1]).tolist()
        row = {"mean_episode_reward": mean_of(rewards)}
        many = len(self.names) > 1
        if many:
            row.update({f"reward_{name}": value for name, value in zip(self.names, rewards)})
        for g, (name, infos) in enumerate(zip(self.names, self.infos)):
            for j, key in enumerate(infos):
                row["/".join(key[2:]) + (f"_{name}" if many else "")] = (sums[g, 2 + j] / sums[g, 1]).item()
        for g, players in enumerate(self.players):
            base = 2 + len(self.infos[g])
            for j, p in enumerate(players):
                row[f"reward_{p}"] = (sums[g, base + j] / sums[g, 1]).item()
                row[f"won_{p}"] = (sums[g, base + len(players) + j] / sums[g, 1]).item()
        return row

    def update(self, data: TensorDictBase, info: distributed.RankInfo) -> dict[str, float]:
        """Feed a ``(B, T)`` batch; the row's columns over its finished episodes (of every rank)."""
        return self.means(self.sums(data), info)


def ended_sums(running: torch.Tensor | None, values: torch.Tensor, done: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``running`` (sums so far, or None) carried through ``(B, T, ...)`` values; it and the ended episodes' sums."""
    running = torch.zeros_like(values[:, 0]) if running is None else running
    finished = []
    for t in range(values.shape[1]):
        running = running + values[:, t]
        finished.append(running[done[:, t]])
        running = torch.where(done[:, t].view(-1, *[1] * (running.dim() - 1)), 0.0, running)
    return running, torch.cat(finished)


def mean_of(values) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def last_finite(rows: list[dict], column: str) -> float:
    """The last value of ``column`` that is not nan (an update in which no episode ended has nan)."""
    return next((row[column] for row in reversed(rows) if not math.isnan(row.get(column, math.nan))), math.nan)


def random_policy(env, rewards: list[NestedKey], batches: int, steps: int, info: distributed.RankInfo,
                  team: bool = False, bar: bool = False) -> dict[str, float | int]:
    """The training's columns over ``batches`` batches of ``steps`` random actions in every env of every rank (the
    mean reward averaged over batches), and their ``frames``."""
    env.set_seed(distributed.rank_seed(12345, info.rank, info.world_size))
    episodes = Episodes(env, rewards, team)
    td, means, totals = env.reset(), [], None
    rounds = range(batches)
    if bar:
        from tqdm import tqdm

        rounds = tqdm(rounds, desc="random policy", unit="batch", disable=None)  # a terminal only
    for _ in rounds:
        batch = []
        for _ in range(steps):
            td, td_next = env.step_and_maybe_reset(env.rand_action(td))
            batch.append(td)
            td = td_next
        sums = episodes.sums(torch.stack(batch, dim=1))
        means.append(episodes.means(sums.clone(), info)["mean_episode_reward"])
        totals = sums if totals is None else totals + sums
    columns = episodes.means(totals, info)
    columns = {k: v for k, v in columns.items() if not k.startswith("reward_") or k[7:] not in episodes.names}
    frames = batches * info.world_size * env.num_envs * steps
    return {**columns, "mean_episode_reward": mean_of(means), "frames": frames}


def write_metrics(args, rows: list[dict]) -> None:
    """One row per update: ``metrics.csv`` (frames and rewards), ``timings.csv`` (frames and wall time)."""
    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))  # wall time apart: metrics.csv is the same file
    for name, columns in [("metrics.csv", [k for k in fields if k != "wall_s"]),  # for the same seed and threads
                          ("timings.csv", ["frames", "wall_s"])]:
        with open(args.out / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


def write_outputs(args, rows: list[dict], summary: dict, title: str = "") -> None:
    """``metrics.csv``, ``timings.csv``, ``summary.json`` and ``learning_curve.png`` (win rates on a second panel)."""
    write_metrics(args, rows)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    from matplotlib.figure import Figure  # no pyplot: no backend, no global figure state

    fields = list(dict.fromkeys(k for row in rows for k in row))
    panels = [([k for k in fields if k.startswith("reward_")] or ["mean_episode_reward"], "mean episode reward",
               [summary["random_policy_reward"]])]
    wins = [k for k in fields if k == "won" or k.startswith("won_")]
    if wins:
        panels.append((wins, "win rate (episodes won)", [summary[f"random_policy_{k}"] for k in wins
                                                          if f"random_policy_{k}" in summary]))
    fig = Figure(figsize=(10.5 if wins else 6, 3.6))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for axis, (columns, ylabel, random_line) in zip(axes[0], panels):
        for col in columns:
            label = col.split("_", 1)[1] if col.startswith(("reward_", "won_")) else summary["algorithm"]
            axis.plot([r["frames"] for r in rows], [r[col] for r in rows], marker="o", ms=3, label=label)
        if random_line:
            axis.axhline(sum(random_line) / len(random_line), color="grey", ls="--", label="random policy")
        axis.set(xlabel="frames", ylabel=ylabel, **({"ylim": (-0.02, 1.02)} if columns is wins else {}))
        axis.legend()
        axis.grid(alpha=0.3)
    fig.suptitle(title or f"{summary['algorithm']} on {summary['env']} ({summary['wall_s']:.0f} s)")
    fig.tight_layout()
    fig.savefig(args.out / "learning_curve.png", dpi=110)


def write_gif(args, play, steps: int, device: torch.device) -> Path | None:
    """A GIF of env 0 under ``play(env, td) -> (td, td_next)``; None, saying why, where the env does not render."""
    import imageio.v2 as imageio

    start = time.perf_counter()
    env = marl_envs.make(args.env, num_envs=1, device=device, **args.env_kwargs)
    env.set_seed(args.seed + 1)
    images, td = [], env.reset()
    why = "the env does not draw images (env.renders is False)"
    try:
        why = None if env.renders and env.render(env_index=0) is not None else why
    except Exception as err:  # a finished run keeps its results whatever the renderer lacks here
        why = f"env.render() raised {type(err).__name__}: {err}"
    with torch.no_grad():
        for _ in range(steps if why is None else 0):
            images.append(env.render(env_index=0)[::2, ::2])  # half size keeps the GIF small
            _, td = play(env, td)
    env.close()
    if why is not None:
        print(f"no policy.gif for {args.env}: {why}", file=sys.stderr)
        return None
    path = args.out / "policy.gif"
    imageio.mimsave(path, images, duration=50, loop=0)
    print(f"policy.gif: {steps} frames rendered in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return path


def read_checkpoint(out: Path) -> dict:
    """``out/checkpoint.pt``, or a ``FileNotFoundError`` that says what to pass."""
    path = out / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"--resume {out}: no checkpoint.pt there; pass the --out folder of a run that wrote "
                                f"one (every --checkpoint-every updates, default 10)")
    try:  # tensors and plain values only: unpickling anything else could run code from the file
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        raise ValueError(f"--resume {out}: {path} holds objects other than tensors and plain values, which this "
                         f"example does not write and will not unpickle (they could run code)"
                         f"{f': {found.group(1)}' if found else ''}; resume from a checkpoint a run of this "
                         f"example wrote") from None


def save_checkpoint(args, rows: list[dict], frames: int, iterations: int, wall: float, model: nn.Module,
                    optim: torch.optim.Optimizer, extra: dict | None = None) -> None:
    """What a resumed run continues from, written then renamed (a run killed meanwhile keeps the last); the CSVs."""
    args.out.mkdir(parents=True, exist_ok=True)
    state = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "iterations": iterations, "frames": frames, "wall_s": wall, "rows": rows,
        "model": model.state_dict(), "optim": optim.state_dict(), "rng": rng_states(), "extra": extra or {},
    }
    tmp = args.out / ".checkpoint.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(args.out / "checkpoint.pt")
    write_metrics(args, rows)


def load_checkpoint(args, model: nn.Module, optim: torch.optim.Optimizer, world_size: int
                    ) -> tuple[list[dict], int, int, float, dict]:
    """Restore ``save_checkpoint``'s state into the freshly built run; ``(rows, frames, updates, wall_s, extra)``."""
    if world_size > 1:
        raise ValueError("--resume under torchrun is not supported: each rank's random state would be needed, and "
                         "a checkpoint holds one process's")
    state = read_checkpoint(args.out)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    set_rng_states(state["rng"])
    return state["rows"], state["frames"], state["iterations"], state["wall_s"], state.get("extra", {})


def rng_states() -> dict:
    """Every random generator's state as tensors and plain values (what ``torch.load(weights_only=True)`` reads)."""
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": [torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                      int(has_gauss), float(cached)], "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}


def set_rng_states(rng: dict) -> None:
    """Restore ``rng_states()``."""
    torch.set_rng_state(rng["torch"])
    keys, *rest = rng["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), *rest))
    random.setstate(tuple(rng["python"]))
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def print_summary(args, summary: dict) -> None:
    """What ``main`` prints on rank 0: the summary, then where its files are."""
    print(json.dumps(summary, indent=2))
    print(f"learning curve: {args.out / 'learning_curve.png'}")
    if "gif" in summary:
        print(f"policy GIF:     {summary['gif']}")
