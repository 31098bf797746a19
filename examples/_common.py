"""What ``mappo.py`` and ``mappo_rnn.py`` share that is not their algorithm: the bookkeeping of a run, and GAE.

Reading a trainer does not need this file. It holds the per-env presets, the command line both take, the run's
set-up (torch threads, seeds, the device, torchrun's process group and gradient averaging), the episode accounting
and its ``metrics.csv`` / ``timings.csv`` / ``summary.json`` / ``learning_curve.png``, checkpoints and ``--resume``,
the random-policy baseline, the optional GIF and the progress bar. ``gae`` is the one formula both trainers use,
written once here; ``ippo_minimal.py`` keeps its own copy, as the one-file example it is.
"""

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

# ---------------------------------------------------------------------------------------------------
# Per-env presets: the settings a user would start from (over each trainer's DEFAULTS)
# ---------------------------------------------------------------------------------------------------
PRESETS: dict[str, dict] = {
    "vmas/navigation": {"env_kwargs": {"n_agents": 3, "max_steps": 100}, "num_envs": 60, "frames": 120_000},
    "vmas/balance": {"env_kwargs": {"n_agents": 3, "max_steps": 100}, "num_envs": 60, "frames": 120_000},
    "vmas/simple_adversary": {"env_kwargs": {"max_steps": 25}, "num_envs": 240, "frames": 120_000},
    "brax/ant_4x2": {"env_kwargs": {"backend": "spring", "max_steps": 250}, "num_envs": 64, "frames": 400_000,
                     "steps_per_batch": 100, "epochs": 10, "minibatch": 1600, "lr": 3e-4},
    "jaxmarl/MPE_simple_spread_v3": {"env_kwargs": {}, "num_envs": 60, "frames": 360_000},
    # SMAX's 3m map, the allies against JaxMARL's heuristic enemy (jaxmarl/SMAX makes both sides agents: one group
    # would play itself, and its reward averaged over both sides does not measure skill)
    "jaxmarl/HeuristicEnemySMAX": {"env_kwargs": {"scenario": "3m"}, "num_envs": 120, "frames": 1_500_000,
                                   "epochs": 5, "minibatch": 1500, "lr": 1e-3},
    # EPyMARL's tasks report the team's return (summed over the agents), as the papers do
    "lbforaging/Foraging-8x8-2p-2f-coop-v3": {"num_envs": 64, "frames": 1_000_000, "steps_per_batch": 100,
                                              "epochs": 5, "minibatch": 1600,
                                              "lr": 5e-4, "entropy": 0.01, "normalize_advantage": True,
                                              "team_return": True},
    "rware/rware-tiny-2ag-v2": {"num_envs": 64, "frames": 3_000_000, "steps_per_batch": 100, "epochs": 5,
                                "minibatch": 1600, "lr": 5e-4, "entropy": 0.01, "normalize_advantage": True,
                                "team_return": True},
    # Jumanji's LBF (8x8, 2 agents, 2 foods: the task above in JAX) rewards each agent's share of the foods it
    # helped load; its RWARE (4 agents) gives one team reward, every agent's, so its mean is the team's return
    "jumanji/LevelBasedForaging-v0": {"num_envs": 64, "frames": 1_000_000, "epochs": 5, "minibatch": 1600,
                                      "lr": 5e-4, "entropy": 0.01, "normalize_advantage": True, "team_return": True},
    # MuJoCo Playground's cheetah, one agent per joint (MJX physics; episodes of 1000 steps)
    "playground/CheetahRun_6x1": {"num_envs": 64, "frames": 1_000_000, "steps_per_batch": 100, "epochs": 10,
                                  "minibatch": 1600, "lr": 3e-4},
    # Connector's 10 agents each read their own view of the shared grid (own path, position, target; the others')
    "jumanji/Connector-v3": {"num_envs": 64, "frames": 150_000},
    "jumanji/RobotWarehouse-v0": {"num_envs": 64, "frames": 2_000_000, "steps_per_batch": 100, "epochs": 5,
                                  "minibatch": 1600, "lr": 5e-4, "entropy": 0.01, "normalize_advantage": True},
}

# mappo_rnn.py's presets, over the env's preset above less the settings its DEFAULTS give (RNN_OWN)
RNN_PRESETS: dict[str, dict] = {
    # JaxMARL's baselines/MAPPO/config/mappo_homogenous_rnn_smax.yaml (every SMAX map: --env-kwargs scenario=NAME):
    # 128 envs x 128 steps, 4 epochs of 4 minibatches, Adam at 2e-3 annealed, clip 0.2, no entropy bonus, gradient
    # norms clipped at 0.25, the world state (the root "state") and the agent's index into the critic
    # (its sequences of 128 steps cut into 16 for backpropagation, as the MAPPO paper's code cuts its into 10)
    "jaxmarl/HeuristicEnemySMAX": {"num_envs": 128, "steps_per_batch": 128, "minibatch": 4096, "epochs": 4,
                                   "lr": 2e-3, "clip": 0.2, "entropy": 0.0, "max_grad_norm": 0.25, "bptt": 16},
    # JaxMARL's baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml (128-step sequences, 4 epochs of 4 minibatches,
    # Adam at 2e-3 annealed, entropy 0.01, gradient norms at 0.5; 1M steps, as measured beside ours), with 32 envs a
    # batch where it takes 16 (half the updates, each twice as large: a loop that steps its GRU from Python pays per
    # update) and backpropagation through 16 steps
    "jaxmarl/MPE_simple_spread_v3": {"num_envs": 32, "steps_per_batch": 128, "minibatch": 1024, "epochs": 4,
                                     "frames": 1_000_000, "lr": 2e-3, "entropy": 0.01, "max_grad_norm": 0.5,
                                     "bptt": 16},
    # EPyMARL's src/config/algs/mappo.yaml (recurrent actor and critic of 64 units, the agent's index in its input,
    # Adam at 5e-4, entropy 0.01, 4 epochs, clip 0.2) on its LBF and RWARE tasks; GAE where it takes 5-step returns
    "lbforaging/Foraging-8x8-2p-2f-coop-v3": {"hidden": 64, "agent_ids": True, "lr": 5e-4, "entropy": 0.01,
                                              "epochs": 4, "anneal_lr": False},
    "rware/rware-tiny-2ag-v2": {"hidden": 64, "agent_ids": True, "lr": 5e-4, "entropy": 0.01, "epochs": 4,
                                "anneal_lr": False},
}
# The settings of mappo_rnn.py's DEFAULTS that an env's feed-forward preset does not override
RNN_OWN = ("hidden", "epochs", "lmbda", "max_grad_norm", "anneal_lr", "normalize_advantage", "lr", "entropy")


def presets(env: str, defaults: dict, recurrent: bool = False) -> dict:
    """``defaults`` under the env's preset (``recurrent``: the feed-forward one less ``RNN_OWN``, then its own)."""
    preset = PRESETS.get(env, {})
    if not recurrent:
        return {**defaults, **preset}
    return {**defaults, **{k: v for k, v in preset.items() if k not in RNN_OWN}, **RNN_PRESETS.get(env, {})}


# ---------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------
def parser(doc: str, defaults: dict) -> argparse.ArgumentParser:
    """The arguments both trainers take; a setting left out comes from the env's preset, else ``defaults``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation", help="any name marl_envs.make accepts")
    p.add_argument("--env-kwargs", nargs="*", default=None, metavar="KEY=VALUE", help="forwarded to marl_envs.make")
    p.add_argument("--num-envs", type=int, help="envs per process (per rank under torchrun)")
    p.add_argument("--frames", type=int,
                   help="env-steps to train for, all ranks together, in whole batches: rounded down to ranks x "
                        "num_envs x steps per batch x updates (one batch at least; the start prints it)")
    p.add_argument("--steps-per-batch", type=int, help="steps per env per update (default: max_steps, or 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per process (fixed, not the core count: the result depends on it)")
    p.add_argument("--device", default=None,
                   help="default: cpu; under torchrun cuda:LOCAL_RANK when CUDA is available, else cpu")
    p.add_argument("--out", default=None, help="output folder (default runs/<env>)")
    p.add_argument("--ippo", action="store_true", help="decentralised critics (IPPO) instead of a centralised one")
    p.add_argument("--epochs", type=int, help=f"passes over each batch (default {defaults['epochs']})")
    p.add_argument("--minibatch", type=int, help="(env, step) samples per gradient step, all ranks together")
    p.add_argument("--lr", type=float, help=f"Adam's learning rate (default {defaults['lr']})")
    p.add_argument("--hidden", type=int, help=f"hidden units (default {defaults['hidden']})")
    p.add_argument("--gamma", type=float, help=f"discount (default {defaults['gamma']})")
    p.add_argument("--lmbda", type=float, help=f"GAE lambda (default {defaults['lmbda']})")
    p.add_argument("--clip", type=float, help=f"PPO's ratio clip (default {defaults['clip']})")
    p.add_argument("--entropy", type=float, help=f"entropy bonus coefficient (default {defaults['entropy']})")
    p.add_argument("--max-grad-norm", type=float, help=f"gradient norm clip (default {defaults['max_grad_norm']})")
    p.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=None,
                   help=f"the learning rate decays linearly to 0 over the run (default {defaults['anneal_lr']})")
    p.add_argument("--normalize-advantage", action=argparse.BooleanOptionalAction, default=None,
                   help="standardise the advantages of each minibatch (for sparse, small rewards; default: the "
                        f"env's preset, else {defaults['normalize_advantage']})")
    p.add_argument("--team-return", action=argparse.BooleanOptionalAction, default=None,
                   help="an episode's return is its agents' sum (EPyMARL's tasks), not their mean (default: the "
                        "env's preset, else off)")
    p.add_argument("--gif", action=argparse.BooleanOptionalAction, default=False,
                   help="after training, OUT/policy.gif of one episode under the trained policy (it renders every "
                        "step: on some envs longer than the training; off by default)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_checkpoint_arguments(p)
    return p


def finish_args(p: argparse.ArgumentParser, args: argparse.Namespace, preset: dict, trainer: str
                ) -> argparse.Namespace:
    """Check the arguments and fill what was not given from ``preset`` (or, with ``--resume``, from the run's
    checkpoint); ``args.trainer`` names the script, so that a checkpoint resumes under the trainer that wrote it."""
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
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


def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """``--checkpoint-every N`` and ``--resume DIR`` (both trainers' and the TorchRL variant's)."""
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="N",
                   help="write OUT/checkpoint.pt (and metrics.csv so far) every N updates; 0: never")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run whose --out was DIR from DIR/checkpoint.pt, with that run's settings")


def resumed_args(p: argparse.ArgumentParser, args: argparse.Namespace, defaults: dict | None = None) -> bool:
    """Check ``--checkpoint-every``; with ``--resume DIR``, give ``args`` the settings of the run saved in DIR (how
    this process shows its progress stays its own, and a ``--frames`` given sets a new budget) and say so."""
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be 0 (never) or more, got {args.checkpoint_every}")
    if args.resume is None:
        return False
    own = {"resume", "quiet", "gif", "checkpoint_every"} | ({"frames"} if args.frames is not None else set())
    for name, value in read_checkpoint(Path(args.resume))["args"].items():
        if name not in own:
            setattr(args, name, value)
    for name, value in (defaults or {}).items():  # a setting that checkpoints of an earlier version did not hold
        if getattr(args, name, 0) is None:
            setattr(args, name, value)
    args.out = Path(args.resume)
    return True


# ---------------------------------------------------------------------------------------------------
# The run: threads, seeds, device, torchrun
# ---------------------------------------------------------------------------------------------------
class Run:
    """A training run's set-up and bookkeeping; a context manager that gives the process its torch thread count
    back and leaves torchrun's process group at the end.

    On entry: ``args.threads`` torch threads (a fixed count, not one per core: reductions split over threads round
    differently, so a seed's curve would change with the machine), this rank's device and seed (``args.seed`` on
    rank 0), every global generator seeded. Under torchrun each rank builds ``--num-envs`` envs of its own,
    ``same_start`` gives every rank rank 0's parameters and ``average_gradients`` averages the gradients.
    """

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.info = distributed.rank_info()
        if args.minibatch % self.info.world_size:
            raise ValueError(f"--minibatch {args.minibatch} counts samples over all {self.info.world_size} ranks; "
                             f"pass a multiple of {self.info.world_size}")
        self.device = pick_device(args.device, self.info)
        self.seed = distributed.rank_seed(args.seed, self.info.rank, self.info.world_size)
        self.rows: list[dict] = []
        self.frames, self.first, self.bar, self.joined = 0, 0, None, None

    def __enter__(self) -> Run:
        self.previous_threads = torch.get_num_threads()
        torch.set_num_threads(self.args.threads)
        self.joined = distributed.init_process_group(self.device, self.info)  # None outside torchrun
        seed_everything(self.seed)
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
        """``(updates, minibatch per rank)``; rank 0 prints the frames the run will take (``--frames`` rounded to
        whole batches)."""
        batch = self.info.world_size * self.args.num_envs * steps
        updates = max(1, self.args.frames // batch)
        if self.info.is_main:
            ranks = f"{self.info.world_size} ranks x " if self.info.world_size > 1 else ""
            plural = "s" * (updates != 1)
            print(f"{self.args.env}: {updates * batch:,} frames = {updates} update{plural} x {ranks}"
                  f"{self.args.num_envs} envs x {steps} steps (--frames {self.args.frames:,} in whole batches)",
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
        """The first update to run: 0, or with ``--resume`` the one after the checkpoint's, whose model, optimiser,
        random generators and rows are restored (the envs restart from fresh episodes, seeded from the seed and
        the update). Starts the progress bar."""
        if self.args.resume:
            self.rows, self.frames, self.first, spent, extra = load_checkpoint(self.args, model, optim,
                                                                               self.info.world_size)
            env.set_seed(distributed.rank_seed(self.args.seed + self.first, self.info.rank, self.info.world_size))
            self.extra = extra
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
        """After an update: the row of ``stats`` (``Episodes.update``'s), the bar and, every ``--checkpoint-every``
        updates and at the end, the checkpoint (with ``extra``: tensors the run carries)."""
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
        """The summary (with the random policy's figures over as many frames), the files on rank 0 and, with
        ``--gif``, the GIF of ``play(env, td) -> (td, td_next)``, the trained policy's most likely actions."""
        wall = time.perf_counter() - self.start
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        random_columns = random_policy(env, rewards, self.frames, steps, self.info, bool(self.args.team_return))
        summary = {
            "env": self.args.env, "env_kwargs": self.args.env_kwargs, "algorithm": algorithm, "frames": self.frames,
            "wall_s": round(wall, 2), "final_mean_episode_reward": last_finite(self.rows, "mean_episode_reward"),
            "random_policy_reward": random_columns.pop("mean_episode_reward"),
            **{f"final_{key}": last_finite(self.rows, key) for key in random_columns},
            **{f"random_policy_{key}": value for key, value in random_columns.items()},
            "seed": self.args.seed, "threads": self.args.threads, "world_size": self.info.world_size,
        }
        if self.info.is_main:
            write_outputs(self.args, self.rows, summary)  # before the GIF: a failed rendering keeps the curve
            if self.args.gif and play is not None:
                gif = write_gif(self.args, play, steps, self.device)
                if gif is not None:
                    summary["gif"] = str(gif)
                    write_summary(self.args, summary)  # summary.json holds every field main() prints
        env.close()
        return summary


def pick_device(requested: str | None, info: distributed.RankInfo) -> torch.device:
    """``--device``: cpu by default; under torchrun (or for a bare ``cuda``) this rank's GPU when CUDA is there."""
    if requested == "cuda" or (requested is None and info.launched):
        return distributed.rank_device(info, cuda=True if requested else None)
    return torch.device(requested or "cpu")


def seed_everything(seed: int) -> None:
    """Seed torch's, NumPy's and Python's global generators.

    The trainers draw from torch's only (initial weights, action samples, minibatch order). NumPy's and Python's
    are seeded for envs that draw from them (VMAS builds its worlds from copies of the global states it takes
    when first imported); unseeded, every process starts them from fresh OS entropy.
    """
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


# ---------------------------------------------------------------------------------------------------
# GAE: the one formula both trainers share
# ---------------------------------------------------------------------------------------------------
@torch.no_grad()
def gae(reward: torch.Tensor, value: torch.Tensor, next_value: torch.Tensor, done: torch.Tensor,
        terminated: torch.Tensor, gamma: float, lmbda: float) -> torch.Tensor:
    """Generalised advantage estimation over ``(B, T, ...)`` tensors (``done`` and ``terminated`` as 0/1 floats
    shaped like ``reward``): the chain is cut where an episode ended, and the next value bootstrapped unless it
    terminated (a time limit keeps the value of its last observation, ``next_value``)."""
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


# ---------------------------------------------------------------------------------------------------
# Episode accounting: metrics.csv's columns
# ---------------------------------------------------------------------------------------------------
#: Info entries that describe the game's state, not how well the policy plays: not logged (OpenSpiel's chance
#: outcome, the player to act)
NOT_METRICS = frozenset({"chance", "current_player"})


class Episodes:
    """Per group, the per-agent return summed over an episode, averaged over the agents (summed with ``team``: the
    team's return, as EPyMARL's papers report it) and over finished episodes; each info entry that is a metric
    (``(group, "info", key)``, not in ``NOT_METRICS``) averaged over the steps that end an episode (SMAX's ``won``
    so becomes the win rate). A group of players taking turns (its ``"mask"`` marks one agent per env at every step
    of the first batch: a board game) also gets each player's return and win rate (the episodes it ends with a
    positive return): in a zero-sum game the group's mean is 0 by construction. ``players`` is set by the first batch.

    ``update(data)`` gives the row's columns; ``sums(data)`` the sums and counts behind them, which ranks add up.
    """

    def __init__(self, env: marl_envs.EnvBase, rewards: list[NestedKey], team: bool = False):
        self.names = list(env.group_map) or ["agent"]
        self.rewards, self.team = rewards, team
        self.infos = [[k for k in env.observation_keys if isinstance(k, tuple) and k[:2] == (name, "info")
                       and k[-1] not in NOT_METRICS] for name in self.names]
        # each group's players, found in the first batch (every step marks one acting agent: a turn-based game)
        self.acting = [(name, "mask") if name in env.group_map and len(env.group_map[name]) > 1
                       and (name, "mask") in env.observation_keys else None for name in self.names]
        self.agents = [list(env.group_map.get(name, [])) for name in self.names]
        self.players: list[list[str]] | None = None
        self.running = [None] * len(rewards)
        self.player_running = [None] * len(rewards)

    def sums(self, data: TensorDictBase) -> torch.Tensor:
        """``(groups, width)``: per group, its finished episodes' summed returns, their count, the sum of each info
        at their last steps, then each player's summed returns and wins (zero-padded across groups)."""
        if self.players is None:
            self.players = [agents if key is not None and bool((data.get(key).flatten(2).sum(-1) == 1).all()) else []
                            for key, agents in zip(self.acting, self.agents)]
        out = []
        done = data.get(("next", "done")).squeeze(-1)  # the env is the unit of episodes
        width = 2 + max(len(i) + 2 * len(p) for i, p in zip(self.infos, self.players))
        for i, reward_key in enumerate(self.rewards):
            reward = data.get(("next", *as_tuple(reward_key)))
            per_agent = reward.flatten(2)
            reward = per_agent.sum(-1) if self.team else per_agent.mean(-1)  # (B, T): over agents
            running = self.running[i] if self.running[i] is not None else torch.zeros_like(reward[:, 0])
            finished = []
            for t in range(reward.shape[1]):
                running = running + reward[:, t]
                finished.append(running[done[:, t]])
                running = torch.where(done[:, t], 0.0, running)
            self.running[i] = running
            ended = torch.cat(finished)
            row = [ended.sum(), ended.new_tensor(ended.numel())]
            row += [data.get(("next", *key)).flatten(2).float().mean(-1)[done].sum() for key in self.infos[i]]
            if self.players[i]:
                row += self._players(i, per_agent, done)
            out.append(torch.stack(row + [ended.new_zeros(())] * (width - len(row))))
        return torch.stack(out)

    def _players(self, i: int, per_agent: torch.Tensor, done: torch.Tensor) -> list[torch.Tensor]:
        """Each player's summed returns and wins over the finished episodes."""
        running = self.player_running[i] if self.player_running[i] is not None else torch.zeros_like(per_agent[:, 0])
        finished = []
        for t in range(per_agent.shape[1]):
            running = running + per_agent[:, t]
            finished.append(running[done[:, t]])
            running = torch.where(done[:, t, None], 0.0, running)
        self.player_running[i] = running
        ended = torch.cat(finished)  # (episodes, players)
        return [*ended.sum(0), *(ended > 0).float().sum(0)]

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


def mean_of(values) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def last_finite(rows: list[dict], column: str) -> float:
    """The last value of ``column`` that is not nan (an update in which no episode ended has nan)."""
    return next((row[column] for row in reversed(rows) if not math.isnan(row.get(column, math.nan))), math.nan)


def info_columns(infos: dict[str, float], groups: int) -> dict[str, float]:
    """Info means given as ``"<group>/<key>"`` as metrics columns: ``<key>`` for an env of one group, else
    ``<key>_<group>`` (the TorchRL variant's)."""
    columns = {}
    for name, value in infos.items():
        group, key = name.split("/", 1)
        columns[key if groups == 1 else f"{key}_{group}"] = value
    return columns


def random_policy(env, rewards: list[NestedKey], frames: int, steps: int, info: distributed.RankInfo,
                  team: bool = False) -> dict[str, float]:
    """The same accounting as training, over ``frames`` frames (all ranks) of uniformly random actions (masks
    honoured): the mean episode reward averaged over batches, the other columns over every episode."""
    env.set_seed(distributed.rank_seed(12345, info.rank, info.world_size))
    episodes = Episodes(env, rewards, team)
    td, means, totals = env.reset(), [], None
    for _ in range(max(1, frames // (info.world_size * env.num_envs * steps))):
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
    return {**columns, "mean_episode_reward": mean_of(means)}


# ---------------------------------------------------------------------------------------------------
# Files: metrics.csv, timings.csv, summary.json, learning_curve.png, policy.gif
# ---------------------------------------------------------------------------------------------------
# Columns that measure the machine, not the training: they go to timings.csv, so that metrics.csv is the same
# file for the same seed and threads.
TIMING_COLUMNS = ("wall_s",)


def write_metrics(args, rows: list[dict]) -> None:
    """One row per update: ``metrics.csv`` (frames and rewards), ``timings.csv`` (frames and wall time)."""
    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    for name, columns in [("metrics.csv", [k for k in fields if k not in TIMING_COLUMNS]),
                          ("timings.csv", ["frames", *(k for k in fields if k in TIMING_COLUMNS)])]:
        with open(args.out / name, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)


def write_summary(args, summary: dict) -> None:
    """``summary.json``: the summary ``main`` prints."""
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def write_outputs(args, rows: list[dict], summary: dict, title: str = "") -> None:
    """``metrics.csv``, ``timings.csv``, ``summary.json`` and ``learning_curve.png`` (one curve per group or
    player, and the random policy; win rates on a panel of their own)."""
    write_metrics(args, rows)
    fields = list(dict.fromkeys(k for row in rows for k in row))
    write_summary(args, summary)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wins = [k for k in fields if k == "won" or k.startswith("won_")]  # a win signal gets a panel of its own
    fig, axes = plt.subplots(1, 2 if wins else 1, figsize=(10.5 if wins else 6, 3.6), squeeze=False)
    ax = axes[0, 0]
    frames = [r["frames"] for r in rows]
    for col in [k for k in fields if k.startswith("reward_")] or ["mean_episode_reward"]:
        label = col.removeprefix("reward_") if col.startswith("reward_") else summary["algorithm"]
        ax.plot(frames, [r[col] for r in rows], marker="o", ms=3, label=label)
    ax.axhline(summary["random_policy_reward"], color="grey", ls="--", label="random policy")
    ax.set_ylabel("mean episode reward")
    if wins:
        for col in wins:
            axes[0, 1].plot(frames, [r[col] for r in rows], marker="o", ms=3,
                            label=col.removeprefix("won_") if col != "won" else summary["algorithm"])
        random_wins = [summary[f"random_policy_{col}"] for col in wins if f"random_policy_{col}" in summary]
        if random_wins:
            axes[0, 1].axhline(sum(random_wins) / len(random_wins), color="grey", ls="--", label="random policy")
        axes[0, 1].set_ylabel("win rate (episodes won)")
        axes[0, 1].set_ylim(-0.02, 1.02)
    for axis in axes[0]:
        axis.set_xlabel("frames")
        axis.legend()
        axis.grid(alpha=0.3)
    fig.suptitle(title or f"{summary['algorithm']} on {summary['env']} ({summary['wall_s']:.0f} s)")
    fig.tight_layout()
    fig.savefig(args.out / "learning_curve.png", dpi=110)
    plt.close(fig)


def write_gif(args, play, steps: int, device: torch.device) -> Path | None:
    """A GIF of env 0 under ``play(env, td) -> (td, td_next)``; None, saying why on stderr, where the env does not
    render here (the run's other files are written by then). Prints how long it took."""
    import imageio.v2 as imageio

    start = time.perf_counter()
    env = marl_envs.make(args.env, num_envs=1, device=device, **args.env_kwargs)
    env.set_seed(args.seed + 1)
    images, td = [], env.reset()
    why = None if env.renders else "the env does not draw images (env.renders is False)"
    if why is None:
        try:
            env.render(env_index=0)
        except Exception as err:  # a finished run keeps its results whatever the renderer lacks here
            why = f"env.render() raised {type(err).__name__}: {err}"
    if why is not None:
        print(f"no policy.gif for {args.env}: {why}", file=sys.stderr)
        env.close()
        return None
    with torch.no_grad():
        for _ in range(steps):
            images.append(env.render(env_index=0)[::2, ::2])  # half size keeps the GIF small
            _, td = play(env, td)
    env.close()
    path = args.out / "policy.gif"
    imageio.mimsave(path, images, duration=50, loop=0)
    print(f"policy.gif: {steps} frames rendered in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return path


# ---------------------------------------------------------------------------------------------------
# Checkpoints: --checkpoint-every, --resume
# ---------------------------------------------------------------------------------------------------
CHECKPOINT = "checkpoint.pt"


def read_checkpoint(out: Path) -> dict:
    """``out/checkpoint.pt``, or a ``FileNotFoundError`` that says what to pass."""
    path = out / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"--resume {out}: no {CHECKPOINT} there; pass the --out folder of a run that wrote "
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
    """Everything a resumed run continues from: the settings, the updates done and their frames, wall time and
    metrics rows, the model's parameters, the optimiser's state, every random generator's state and ``extra``
    (tensors the run carries). Written to a temporary file, then renamed: a run killed while writing keeps the
    previous checkpoint. ``metrics.csv`` and ``timings.csv`` are written with it."""
    args.out.mkdir(parents=True, exist_ok=True)
    state = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "iterations": iterations, "frames": frames, "wall_s": wall, "rows": rows,
        "model": model.state_dict(), "optim": optim.state_dict(), "rng": rng_states(), "extra": extra or {},
    }
    tmp = args.out / f".{CHECKPOINT}.tmp"
    torch.save(state, tmp)
    tmp.replace(args.out / CHECKPOINT)
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
    version, internal, gauss = random.getstate()
    return {"torch": torch.get_rng_state(),
            "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                      "cached_gaussian": float(cached)},
            "python": {"version": version, "internal": list(internal), "gauss_next": gauss},
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}


def set_rng_states(rng: dict) -> None:
    """Restore ``rng_states()``."""
    torch.set_rng_state(rng["torch"])
    state = rng["numpy"]
    np.random.set_state(("MT19937", state["keys"].numpy().astype(np.uint32), state["pos"], state["has_gauss"],
                         state["cached_gaussian"]))
    python = rng["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def print_summary(args, summary: dict) -> None:
    """What ``main`` prints on rank 0: the summary, then where its files are."""
    print(json.dumps(summary, indent=2))
    print(f"learning curve: {args.out / 'learning_curve.png'}")
    if "gif" in summary:
        print(f"policy GIF:     {summary['gif']}")
