"""Multi-agent PPO (MAPPO, or IPPO with --ippo) for any env ``marl_envs.make`` accepts.

Everything env-specific is read from the env: groups, action / reward / done keys and specs. One policy per
group, parameters shared inside the group; a centralised critic fed the root ``state`` when the env has one,
else the group's concatenated observations (MAPPO), or a per-agent critic (IPPO). ``--recurrent``: GRU actors
and critics trained on whole sequences, with the settings of the field's recurrent baselines (``recurrent.py``,
docs/recurrent.md).

    python examples/mappo.py --env vmas/navigation --out runs/navigation
    python examples/mappo.py --env vmas/balance --env-kwargs n_agents=3 --frames 60000
    python examples/mappo.py --env vmas/simple_adversary --ippo
    python examples/mappo.py --env jaxmarl/HeuristicEnemySMAX --recurrent --threads 2   # GRUs, SMAX 3m
    torchrun --standalone --nproc_per_node 2 examples/mappo.py --env vmas/navigation --num-envs 30

Writes ``OUT/metrics.csv``, ``OUT/timings.csv``, ``OUT/summary.json``, ``OUT/learning_curve.png`` and, for
envs that render, ``OUT/policy.gif``. Info entries the env reports (``(group, "info", key)``) are logged at
episode ends: SMAX's ``won`` is the ``won`` column, the win rate.

Every ``--checkpoint-every`` iterations (default 10) ``OUT/checkpoint.pt`` holds what the run needs to go on;
``--resume OUT`` continues a stopped or killed run from it, with its settings, and its ``metrics.csv`` continues
where the checkpoint left it. The envs restart from fresh episodes (their state is not saved), seeded from the
seed and the iteration: a resumed run follows another trajectory than an uninterrupted one, to the same result.

Reproducible: the same seed, ``--threads`` and machine (CPU, torch and backend versions) give the same
``metrics.csv`` bit for bit; wall times go to ``timings.csv`` (see docs/mappo.md).

Under ``torchrun`` every process (rank) builds ``--num-envs`` envs of its own, seeded per rank, on
``cuda:LOCAL_RANK`` when CUDA is available (else the CPU); gradients are averaged across ranks
(DistributedDataParallel), episode statistics are summed over ranks, and rank 0 alone writes the files.
``--frames`` and ``--minibatch`` count over all ranks, so N ranks of B envs run the same updates as one
process of N x B envs (see docs/scaling.md).
"""

from __future__ import annotations

import argparse
import csv
import inspect
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
from ppo_loss import GroupKeys, NestedKey, PPOLoss, as_tuple, gae
from recurrent import GRUNet, RecurrentAgents, RecurrentGroup
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import distributed as dist
from torch import nn

import marl_envs
from marl_envs import distributed
from marl_envs.cli import parse_kwargs
from marl_envs.specs import Bounded, Categorical, OneHot

# Per-env settings a user would start from; anything else gets the generic defaults.
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
GENERIC = {"env_kwargs": {}, "num_envs": 32, "frames": 60_000, "steps_per_batch": None, "epochs": 30,
           "minibatch": 400, "lr": 3e-4, "entropy": 1e-4, "normalize_advantage": False, "team_return": False,
           "hidden": 256, "gamma": 0.99, "lmbda": 0.9, "clip": 0.2, "max_grad_norm": 1.0, "anneal_lr": False,
           "agent_ids": False, "bptt": None}

# With --recurrent, for any env: the settings of JaxMARL's recurrent MAPPO baselines (GRU and layers of 128,
# 4 epochs, GAE lambda 0.95, the learning rate annealed to 0, advantages standardised per minibatch), over the
# generic and the env's feed-forward preset; then the env's recurrent preset, below.
RECURRENT = {"hidden": 128, "epochs": 4, "lmbda": 0.95, "max_grad_norm": 0.5, "anneal_lr": True,
             "normalize_advantage": True, "lr": 5e-4, "entropy": 0.01}
RECURRENT_PRESETS: dict[str, dict] = {
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
# The settings a preset gives where the command line does not
PRESET_SETTINGS = ("num_envs", "frames", "steps_per_batch", "epochs", "minibatch", "lr", "entropy",
                   "normalize_advantage", "team_return", "hidden", "gamma", "lmbda", "clip", "max_grad_norm",
                   "anneal_lr", "agent_ids", "bptt")


# ---------------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------------
def mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


class GroupPolicy(nn.Module):
    """Shared-parameter policy for one group: observation -> action, its log-probability and entropy.

    Continuous (``Bounded``) actions use a tanh-squashed Gaussian mapped onto the spec's bounds; the
    pre-squash sample is kept so log-probabilities are exact. Discrete actions are categorical and honour an
    action mask.
    """

    def __init__(self, obs_dim: int, spec, hidden: int, net=None):
        """``net(n_out)``, if given, builds the network instead of an MLP (a recurrent one: ``recurrent.py``)."""
        super().__init__()
        self.discrete = isinstance(spec, (Categorical, OneHot))
        self.one_hot = isinstance(spec, OneHot)
        net = net or (lambda n_out: mlp(obs_dim, n_out, hidden))
        if self.discrete:
            self.net = net(spec.n)
            self.n = spec.n
        else:
            if not isinstance(spec, Bounded):
                raise TypeError(f"mappo.py supports Bounded, Categorical and OneHot actions, got {type(spec).__name__}")
            dim = spec.shape[-1]
            self.net = net(dim)
            self.log_std = nn.Parameter(torch.full((dim,), 0.0))
            low, high = spec.low[0], spec.high[0]  # (n_agents, dim): agents of a group may differ in range
            self.register_buffer("centre", (high + low) / 2)
            self.register_buffer("radius", (high - low) / 2)
        self.deterministic = False

    def _dist(self, obs: torch.Tensor, mask: torch.Tensor | None):
        return self.distribution(self.net(obs), mask)

    def distribution(self, out: torch.Tensor, mask: torch.Tensor | None):
        """The action distribution of the network's output ``out`` (logits, or the Gaussian's mean)."""
        if self.discrete:
            if mask is not None:
                out = out.masked_fill(~mask, -1e9)
            return torch.distributions.Categorical(logits=out)
        return torch.distributions.Normal(out, self.log_std.exp().expand_as(out))

    def forward(self, obs: torch.Tensor, mask: torch.Tensor | None = None):
        return self.sample(self._dist(obs, mask))

    def sample(self, dist):
        """``(action, pre-squash sample, log-probability)`` drawn from ``dist`` (its mode when deterministic)."""
        if self.discrete:
            raw = dist.probs.argmax(-1) if self.deterministic else dist.sample()
            action = nn.functional.one_hot(raw, self.n) if self.one_hot else raw
            return action, raw.unsqueeze(-1).float(), dist.log_prob(raw).unsqueeze(-1)
        raw = dist.mean if self.deterministic else dist.sample()
        return self.squash(raw), raw, self.log_prob(dist, raw)

    def squash(self, raw: torch.Tensor) -> torch.Tensor:
        return self.centre + self.radius * torch.tanh(raw)

    def log_prob(self, dist, raw: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return dist.log_prob(raw.squeeze(-1).long()).unsqueeze(-1)
        # change of variables through tanh: log|d squash / d raw| = log(radius) + log(1 - tanh^2)
        correction = 2 * (math.log(2) - raw - nn.functional.softplus(-2 * raw)) + self.radius.log()
        return (dist.log_prob(raw) - correction).sum(-1, keepdim=True)

    def evaluate(self, obs: torch.Tensor, raw: torch.Tensor, mask: torch.Tensor | None = None):
        """Log-probability of stored samples and the entropy (of the pre-squash distribution)."""
        return self.score(self._dist(obs, mask), raw)

    def score(self, dist, raw: torch.Tensor):
        """``evaluate`` on a distribution already built."""
        entropy = dist.entropy()
        return self.log_prob(dist, raw), entropy.unsqueeze(-1) if self.discrete else entropy.sum(-1, keepdim=True)


class Critic(nn.Module):
    """Values ``(..., n, 1)`` for a group of ``n`` agents.

    Centralised (MAPPO): from the root ``state`` (``per_agent_input=False``) or from every agent's
    observation concatenated. Decentralised (IPPO) or single-agent: from each agent's own observation.
    """

    def __init__(self, n_in: int, n_agents: int, hidden: int, centralised: bool, per_agent_input: bool,
                 dims: list[int]):
        super().__init__()
        self.centralised, self.per_agent_input, self.dims = centralised, per_agent_input, dims
        self.net = mlp(n_in, n_agents if centralised else 1, hidden)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        x = joined(inputs, self.dims)
        if not self.centralised:
            return self.net(x)
        if self.per_agent_input:
            x = x.flatten(-2)
        return self.net(x).unsqueeze(-1)


def joined(inputs, dims: list[int]) -> torch.Tensor:
    """The observation entries side by side, each flattened past its agent dim (``dims``: each one's feature dims,
    e.g. 3 for Connector's ``(G, G, 2)`` views)."""
    return torch.cat([x.flatten(-d) if d > 1 else x for x, d in zip(inputs, dims)], -1)


class ActorInput(nn.Module):
    """Concatenate a group's observation entries, flattened (and pass the action mask), into the policy."""

    def __init__(self, policy: GroupPolicy, has_mask: bool, dims: list[int]):
        super().__init__()
        self.policy, self.has_mask, self.dims = policy, has_mask, dims

    def _split(self, inputs):
        return (joined(inputs[:-1], self.dims), inputs[-1]) if self.has_mask else (joined(inputs, self.dims), None)

    def forward(self, *inputs):
        return self.policy(*self._split(inputs))

    def evaluate(self, *inputs, sample):
        obs, mask = self._split(inputs)
        return self.policy.evaluate(obs, sample, mask)


# ---------------------------------------------------------------------------------------------------
# Reading the env: every key comes from env.action_keys, env.reward_keys, env.done_keys, ...
# ---------------------------------------------------------------------------------------------------
def _under(key, prefix: tuple) -> bool:
    return key[: len(prefix)] == prefix if isinstance(key, tuple) else not prefix


def group_keys(env: marl_envs.EnvBase, group: str | None) -> tuple[GroupKeys, list, NestedKey | None]:
    """The loss keys, observation keys and action-mask key of ``group`` (``None``: a single-agent env)."""
    prefix = () if group is None else (group,)
    action = next(k for k in env.action_keys if _under(k, prefix))
    reward = next(k for k in env.reward_keys if _under(k, prefix))
    observations = [k for k in env.observation_keys if _under(k, prefix) and "observation" in (k if isinstance(k, tuple) else (k,))]
    if not observations:
        raise ValueError(f"group {group!r} has no observation entry; mappo.py reads (group, 'observation')")
    mask = (*prefix, "action_mask") if (*prefix, "action_mask") in env.observation_keys else None
    own_done = prefix and (*prefix, "done") in env.done_keys

    def at(name):
        return (*prefix, name) if prefix else name

    keys = GroupKeys(
        action=action, reward=reward,
        done=at("done") if own_done else "done", terminated=at("terminated") if own_done else "terminated",
        sample=at("action_sample"), log_prob=at("action_log_prob"), value=at("state_value"),
        advantage=at("advantage"), value_target=at("value_target"),
    )
    return keys, observations, mask


def build_agents(env: marl_envs.EnvBase, hidden: int, centralised: bool):
    """Per group: a policy and a critic as ``TensorDictModule``s, and the group's keys."""
    probe = env.reset()
    actors, critics, keys = [], [], []
    for group in list(env.group_map) or [None]:
        k, observations, mask = group_keys(env, group)
        lead = 1 if group is None else 2  # (B,) or (B, n_agents) before an entry's features
        dims = [probe.get(o).ndim - lead for o in observations]
        obs_dim = sum(probe.get(o).shape[lead:].numel() for o in observations)
        n = len(env.group_map[group]) if group is not None else 1
        policy = ActorInput(GroupPolicy(obs_dim, env.full_action_spec[k.action], hidden), mask is not None, dims)
        actors.append(TensorDictModule(policy, in_keys=observations + ([mask] if mask else []),
                                       out_keys=[k.action, k.sample, k.log_prob]))
        central = centralised and group is not None
        use_state = central and "state" in env.observation_keys
        n_in = probe.get("state").shape[-1] if use_state else obs_dim * (n if central else 1)
        critic = Critic(n_in, n, hidden, central, per_agent_input=not use_state, dims=[1] if use_state else dims)
        critics.append(TensorDictModule(critic, in_keys=["state"] if use_state else observations, out_keys=[k.value]))
        keys.append(k)
    return actors, critics, keys


def build_recurrent(env: marl_envs.EnvBase, args: argparse.Namespace) -> RecurrentAgents:
    """Per group, a GRU actor and a GRU critic (``recurrent.py``); the centralised critic reads the root ``state``
    where the env declares one, else every agent's observations, with each agent's one-hot index."""
    hidden, agent_ids, centralised = args.hidden, bool(args.agent_ids), not args.ippo
    probe = env.reset()
    groups = []
    for group in list(env.group_map) or [None]:
        k, observations, mask = group_keys(env, group)
        single = group is None
        lead, n = (1, 1) if single else (2, len(env.group_map[group]))
        obs_dim = sum(probe.get(o).shape[lead:].numel() for o in observations)
        actor_in = obs_dim + (n if agent_ids else 0)
        policy = GroupPolicy(actor_in, env.full_action_spec[k.action], hidden,
                             net=lambda n_out: GRUNet(actor_in, n_out, hidden, hidden, out_gain=0.01))
        central = centralised and not single
        critic_input = ("state" if "state" in env.observation_keys else "joint") if central else "own"
        n_in = (probe.get("state")[0].numel() + n if critic_input == "state"
                else obs_dim * n + n if critic_input == "joint" else actor_in)
        critic = GRUNet(n_in, 1, hidden, hidden, out_gain=1.0)
        groups.append(RecurrentGroup(policy, critic, k, observations, mask, n, single, agent_ids, critic_input))
    return RecurrentAgents(groups, env.num_envs, clip=args.clip, entropy_coef=args.entropy, value_coef=0.5,
                           normalize_advantage=bool(args.normalize_advantage))


def set_deterministic(policies: list[GroupPolicy], flag: bool) -> None:
    for policy in policies:
        policy.deterministic = flag


# ---------------------------------------------------------------------------------------------------
# Collection and episode accounting
# ---------------------------------------------------------------------------------------------------
class EpisodeTracker:
    """Per-agent return summed over an episode, averaged over agents (summed with ``team=True``: the team's return,
    as EPyMARL's papers report it) and finished episodes, per group; and each of the group's info entries
    (``(group, "info", key)``) averaged over the steps that end an episode: SMAX's ``won`` so becomes the win rate.

    ``update`` returns each group's sums and count, so that ranks can add theirs up before dividing
    (:func:`episode_means`).
    """

    def __init__(self, env: marl_envs.EnvBase, keys: list[GroupKeys], team: bool = False):
        self.names = list(env.group_map) or ["agent"]
        self.team = team
        self.keys = keys
        self.infos = [[k for k in env.observation_keys if isinstance(k, tuple) and k[:2] == (name, "info")]
                      for name in self.names]
        self.running = [None] * len(keys)

    def update(self, data: TensorDictBase) -> torch.Tensor:
        """Feed a (B, T) batch; return ``(groups, 2 + infos)``: each group's sum and count of finished-episode
        returns, then the sum of each of its infos at those episodes' last steps (zero-padded across groups)."""
        out = []
        done = data.get(("next", "done")).squeeze(-1)  # the env is the unit of episodes
        width = 2 + max(map(len, self.infos))
        for i, (name, keys) in enumerate(zip(self.names, self.keys)):
            reward = data.get(("next", *as_tuple(keys.reward)))
            reward = reward.flatten(2).sum(-1) if self.team else reward.flatten(2).mean(-1)  # (B, T): over agents
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
            out.append(torch.stack(row + [ended.new_zeros(())] * (width - len(row))))
        return torch.stack(out)


def episode_means(names: list[str], sums_counts: torch.Tensor, info: distributed.RankInfo,
                  infos: list[list[tuple]] | None = None) -> dict[str, float]:
    """Each group's mean finished-episode reward over all ranks (nan where no episode finished); with ``infos``
    (the tracker's), also each info's mean at episode ends, as ``"<group>/<key>"``."""
    if info.world_size > 1:
        dist.all_reduce(sums_counts)
    means = (sums_counts[:, 0] / sums_counts[:, 1]).tolist()  # nan where no episode finished
    out = dict(zip(names, means))
    for g, (name, keys) in enumerate(zip(names, infos or [])):
        for j, key in enumerate(keys):
            out[f"{name}/{'/'.join(key[2:])}"] = (sums_counts[g, 2 + j] / sums_counts[g, 1]).item()
    return out


def split_means(per_group: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """``episode_means``' dict as (rewards per group, infos per ``group/key``)."""
    return ({k: v for k, v in per_group.items() if "/" not in k}, {k: v for k, v in per_group.items() if "/" in k})


def info_columns(infos: dict[str, float], groups: int) -> dict[str, float]:
    """Info means as metrics columns: ``<key>`` for an env of one group, else ``<key>_<group>``."""
    columns = {}
    for name, value in infos.items():
        group, key = name.split("/", 1)
        columns[key if groups == 1 else f"{key}_{group}"] = value
    return columns


def last_finite(rows: list[dict], column: str) -> float:
    """The last value of ``column`` that is not nan (an iteration in which no episode ended has nan)."""
    return next((row[column] for row in reversed(rows) if not math.isnan(row.get(column, math.nan))), math.nan)


def mean_of(per_group: dict[str, float]) -> float:
    values = [v for v in per_group.values() if not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def collect(env, td, step, steps: int) -> tuple[TensorDictBase, TensorDictBase]:
    """``steps`` calls of ``step(env, td)`` (a policy's actions through ``step_and_maybe_reset``); returns the (B, T)
    batch and the root to continue from."""
    out = []
    for _ in range(steps):
        td, td_next = step(env, td)
        out.append(td)
        td = td_next
    return torch.stack(out, dim=1), td


def stepper(act):
    """``collect``'s ``step`` for a feed-forward ``act(td)``."""
    return lambda env, td: env.step_and_maybe_reset(act(td))


def random_policy_reward(env, keys: list[GroupKeys], frames: int, steps: int, info: distributed.RankInfo,
                         team: bool = False) -> tuple[float, dict[str, float]]:
    """The same accounting as training, over ``frames`` frames (all ranks) of uniformly random actions: the mean
    episode reward, and the info columns (``info_columns``)."""
    env.set_seed(distributed.rank_seed(12345, info.rank, info.world_size))
    tracker = EpisodeTracker(env, keys, team)
    td, rewards, totals = env.reset(), [], None
    for _ in range(max(1, frames // (info.world_size * env.num_envs * steps))):
        data, td = collect(env, td, stepper(env.rand_action), steps)
        sums = tracker.update(data)
        rewards.append(mean_of(split_means(episode_means(tracker.names, sums.clone(), info))[0]))
        totals = sums if totals is None else totals + sums
    finite = [r for r in rewards if not math.isnan(r)]
    infos = split_means(episode_means(tracker.names, totals, info, tracker.infos))[1]
    return sum(finite) / len(finite) if finite else float("nan"), info_columns(infos, len(tracker.names))


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """``--checkpoint-every N`` and ``--resume DIR`` (this example's and the TorchRL variant's)."""
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="N",
                   help="write OUT/checkpoint.pt (and metrics.csv so far) every N iterations; 0: never")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run whose --out was DIR from DIR/checkpoint.pt, with that run's settings")


def resumed_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> bool:
    """Check ``--checkpoint-every``; with ``--resume DIR``, give ``args`` the settings of the run saved in DIR (how
    this process shows its progress stays its own, and a ``--frames`` given sets a new budget) and say so."""
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be 0 (never) or more, got {args.checkpoint_every}")
    if args.resume is None:
        return False
    own = {"resume", "quiet", "no_gif", "checkpoint_every"} | ({"frames"} if args.frames is not None else set())
    for name, value in read_checkpoint(Path(args.resume))["args"].items():
        if name not in own:
            setattr(args, name, value)
    for name in PRESET_SETTINGS:  # a setting that checkpoints of an earlier version did not hold
        if getattr(args, name, 0) is None:
            setattr(args, name, GENERIC[name])
    args.out = Path(args.resume)
    return True


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation", help="any name marl_envs.make accepts")
    p.add_argument("--env-kwargs", nargs="*", default=None, metavar="KEY=VALUE", help="forwarded to marl_envs.make")
    p.add_argument("--num-envs", type=int, help="envs per process (per rank under torchrun)")
    p.add_argument("--frames", type=int,
                   help="env-steps to train for, all ranks together, in whole batches: rounded down to ranks x "
                        "num_envs x steps per batch x iterations (one batch at least)")
    p.add_argument("--steps-per-batch", type=int, help="steps per env per iteration (default: max_steps, or 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per process (fixed, not the core count: the result depends on it)")
    p.add_argument("--device", default=None,
                   help="default: cpu; under torchrun cuda:LOCAL_RANK when CUDA is available, else cpu")
    p.add_argument("--out", default=None, help="output folder (default runs/<env>)")
    p.add_argument("--ippo", action="store_true", help="decentralised critics (IPPO) instead of a centralised one")
    p.add_argument("--epochs", type=int, help="passes over each batch")
    p.add_argument("--minibatch", type=int, help="(env, step) samples per gradient step, all ranks together")
    p.add_argument("--lr", type=float)
    p.add_argument("--recurrent", action="store_true",
                   help="GRU actors and critics trained on whole sequences (recurrent.py), with the settings of "
                        "JaxMARL's recurrent baselines and the env's recurrent preset")
    p.add_argument("--bptt", type=int, metavar="STEPS",
                   help="with --recurrent: gradients flow back through sequences of STEPS steps, each started from "
                        "the state collection gave it (default: the preset's, else the batch's steps)")
    p.add_argument("--agent-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="each agent's one-hot index in its group added to its policy's input (default: the preset)")
    p.add_argument("--hidden", type=int, help="hidden units (default: 256; 128 with --recurrent)")
    p.add_argument("--gamma", type=float, help="discount (default 0.99)")
    p.add_argument("--lmbda", type=float, help="GAE lambda (default: 0.9; 0.95 with --recurrent)")
    p.add_argument("--clip", type=float, help="PPO's ratio clip (default 0.2)")
    p.add_argument("--entropy", type=float, help="entropy bonus coefficient (default: the env's preset, else 1e-4)")
    p.add_argument("--max-grad-norm", type=float, help="gradient norm clip (default: 1.0; the preset's with "
                                                       "--recurrent, for the actors and the critics apart)")
    p.add_argument("--anneal-lr", action=argparse.BooleanOptionalAction, default=None,
                   help="the learning rate decays linearly to 0 over the run (default: on with --recurrent)")
    p.add_argument("--normalize-advantage", action=argparse.BooleanOptionalAction, default=None,
                   help="standardise the advantages of each minibatch (for sparse, small rewards; default: the "
                        "env's preset, else off)")
    p.add_argument("--team-return", action=argparse.BooleanOptionalAction, default=None,
                   help="an episode's return is its agents' sum (EPyMARL's tasks), not their mean (default: the "
                        "env's preset, else off)")
    p.add_argument("--no-gif", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_checkpoint_arguments(p)
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be at least 1, got {args.threads}")
    if resumed_args(p, args):
        return args
    given = [flag for flag, value in (("--bptt", args.bptt), ("--agent-ids", args.agent_ids)) if value is not None]
    if given and not args.recurrent:
        p.error(f"{given[0]} sets up the recurrent policies; add --recurrent (the feed-forward ones take no such "
                f"setting)")
    preset = {**GENERIC, **PRESETS.get(args.env, {})}
    if args.recurrent:
        preset.update({**RECURRENT, **RECURRENT_PRESETS.get(args.env, {})})
    args.env_kwargs = parse_kwargs(args.env_kwargs) if args.env_kwargs is not None else dict(preset["env_kwargs"])
    for name in PRESET_SETTINGS:
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    args.out = Path(args.out or Path("runs") / args.env.replace("/", "_"))
    return args


def pick_device(requested: str | None, info: distributed.RankInfo) -> torch.device:
    """``--device``: cpu by default; under torchrun (or for a bare ``cuda``) this rank's GPU when CUDA is there."""
    if requested == "cuda" or (requested is None and info.launched):
        return distributed.rank_device(info, cuda=True if requested else None)
    return torch.device(requested or "cpu")


CHECKPOINT = "checkpoint.pt"


def read_checkpoint(out: Path) -> dict:
    """``out/checkpoint.pt``, or a ``FileNotFoundError`` that says what to pass."""
    path = out / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"--resume {out}: no {CHECKPOINT} there; pass the --out folder of a run that wrote "
                                f"one (every --checkpoint-every iterations, default 10)")
    try:  # tensors and plain values only: unpickling anything else could run code from the file
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        raise ValueError(f"--resume {out}: {path} holds objects other than tensors and plain values, which this "
                         f"example does not write and will not unpickle (they could run code)"
                         f"{f': {found.group(1)}' if found else ''}; resume from a checkpoint a run of this "
                         f"example wrote") from None


def save_checkpoint(args, rows: list[dict], frames: int, iterations: int, wall: float, model: nn.Module,
                    optim: torch.optim.Optimizer) -> None:
    """Everything a resumed run continues from: the settings, the iterations done and their frames, wall time and
    metrics rows, the policies' and critics' parameters, the optimiser's state and every random generator's
    state. Written to a temporary file, then renamed: a run killed while writing keeps the previous checkpoint.
    ``metrics.csv`` and ``timings.csv`` are written with it, so a killed run's curve so far is on disk."""
    args.out.mkdir(parents=True, exist_ok=True)
    state = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "iterations": iterations, "frames": frames, "wall_s": wall, "rows": rows,
        "model": model.state_dict(), "optim": optim.state_dict(),
        "rng": rng_states(),
    }
    tmp = args.out / f".{CHECKPOINT}.tmp"
    torch.save(state, tmp)
    tmp.replace(args.out / CHECKPOINT)
    write_metrics(args, rows)


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


def load_checkpoint(args, model: nn.Module, optim: torch.optim.Optimizer, world_size: int
                    ) -> tuple[list[dict], int, int, float]:
    """Restore ``save_checkpoint``'s state into the freshly built run; ``(rows, frames, iterations, wall_s)``."""
    if world_size > 1:
        raise ValueError("--resume under torchrun is not supported: each rank's random state would be needed, and "
                         "a checkpoint holds one process's")
    state = read_checkpoint(args.out)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    set_rng_states(state["rng"])
    return state["rows"], state["frames"], state["iterations"], state["wall_s"]


def seed_everything(seed: int) -> None:
    """Seed torch's, NumPy's and Python's global generators.

    The example draws from torch's only (initial weights, action samples, minibatch order). NumPy's and Python's
    are seeded for envs that draw from them (VMAS builds its worlds from copies of the global states it takes
    when first imported); unseeded, every process starts them from fresh OS entropy.
    """
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def train(args: argparse.Namespace, callback=None) -> dict:
    """Train; ``callback(iteration, data, loss_fn)``, if given, runs after each update on every rank.

    Runs on ``args.threads`` torch threads and gives the process its previous count back afterwards.
    """
    previous = torch.get_num_threads()
    # A fixed count, not torch's default of one per core: reductions split over threads round differently,
    # so the curve of a seed would change with the machine's core count (docs/mappo.md).
    torch.set_num_threads(args.threads)
    try:
        return _train(args, callback)
    finally:
        torch.set_num_threads(previous)


def _train(args: argparse.Namespace, callback=None) -> dict:
    info = distributed.rank_info()
    device = pick_device(args.device, info)
    if args.minibatch % info.world_size:
        raise ValueError(f"--minibatch {args.minibatch} counts samples over all {info.world_size} ranks; "
                         f"pass a multiple of {info.world_size}")
    joined = distributed.init_process_group(device, info)  # None outside torchrun
    seed = distributed.rank_seed(args.seed, info.rank, info.world_size)  # args.seed itself on rank 0
    seed_everything(seed)
    env = marl_envs.make(args.env, num_envs=args.num_envs, device=device, **args.env_kwargs)
    env.set_seed(seed)
    steps = args.steps_per_batch or env.max_steps or 100
    bptt = args.bptt or steps
    if args.recurrent and steps % bptt:
        raise ValueError(f"--bptt {bptt} must divide the steps of a batch ({steps}): a batch is cut into sequences "
                         f"of --bptt steps; pass a divisor of {steps}")
    if args.recurrent:
        loss_fn = build_recurrent(env, args).to(device)
        keys, policies, step = [g.keys for g in loss_fn.groups], [g.policy for g in loss_fn.groups], loss_fn.step
        # each set clipped on its own, as two optimisers would (the recurrent baselines')
        clipped = [loss_fn.actor_params(), loss_fn.critic_params()]
    else:
        actors, critics, keys = build_agents(env, args.hidden, centralised=not args.ippo)
        loss_fn = PPOLoss(actors, critics, keys, clip=args.clip, entropy_coef=args.entropy,
                          normalize_advantage=bool(args.normalize_advantage)).to(device)
        policies, clipped = [actor.module.policy for actor in actors], [list(loss_fn.parameters())]

        def act(td):
            for actor in actors:
                actor(td)
            return td

        step = stepper(act)
    objective = loss_fn
    if info.world_size > 1:  # rank 0's initial parameters are copied to every rank; backward averages gradients
        ddp = nn.parallel.DistributedDataParallel
        # the buffers (action bounds) are constants: no broadcast before each forward (older torch: broadcast_buffers)
        no_sync = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(ddp).parameters else None
        objective = ddp(loss_fn, device_ids=[device] if device.type == "cuda" else None,
                        **{no_sync or "broadcast_buffers": False})
    # Adam's epsilon of the recurrent baselines (JaxMARL's, CleanRL's): 1e-5
    optim = torch.optim.Adam(loss_fn.parameters(), lr=args.lr, **({"eps": 1e-5} if args.recurrent else {}))
    tracker = EpisodeTracker(env, keys, bool(args.team_return))
    iterations = max(1, args.frames // (info.world_size * args.num_envs * steps))
    minibatch = args.minibatch // info.world_size  # per rank
    bar = None
    if not args.quiet and info.is_main:
        from tqdm import tqdm

        bar = tqdm(total=iterations * info.world_size * args.num_envs * steps, unit="frame", unit_scale=True,
                   desc=args.env, disable=None)  # no bar written into a log file (None: only on a terminal)
    rows, frames, done_iterations, spent = [], 0, 0, 0.0
    if args.resume:
        rows, frames, done_iterations, spent = load_checkpoint(args, loss_fn, optim, info.world_size)
        env.set_seed(distributed.rank_seed(args.seed + done_iterations, info.rank, info.world_size))
        if bar is not None:
            bar.update(frames)
    start = time.perf_counter() - spent  # wall time counts on from the checkpoint's
    td = env.reset()
    for iteration in range(done_iterations, iterations):
        with torch.no_grad():
            data, td = collect(env, td, step, steps)
            if args.recurrent:
                loss_fn.values(data, gamma=args.gamma, lmbda=args.lmbda)
            else:
                for critic, k in zip(critics, keys):
                    gae(data, k, critic, gamma=args.gamma, lmbda=args.lmbda)
        frames += data.numel() * info.world_size
        per_group, infos = split_means(episode_means(tracker.names, tracker.update(data), info, tracker.infos))
        if args.anneal_lr:  # linearly to 0 over the run's iterations
            for group in optim.param_groups:
                group["lr"] = args.lr * (1 - iteration / iterations)
        # minibatches of (env, step) samples; recurrent: of sequences, each env's batch cut into pieces of --bptt
        # steps (the whole batch by default), each replayed from the state collection started it from
        flat = data.reshape(-1, bptt) if args.recurrent else data.reshape(-1)
        size = max(1, minibatch // bptt) if args.recurrent else minibatch
        n_minibatches = max(1, flat.shape[0] // size)
        for _ in range(args.epochs):
            order = torch.randperm(flat.shape[0], device=flat.device)[: n_minibatches * size]
            for idx in order.split(size):
                loss = objective(flat[idx])
                optim.zero_grad()
                loss.backward()
                for params in clipped:
                    nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optim.step()
        wall = time.perf_counter() - start
        row = {"frames": frames, "mean_episode_reward": mean_of(per_group), "wall_s": round(wall, 2)}
        if len(per_group) > 1:
            row.update({f"reward_{name}": value for name, value in per_group.items()})
        row.update(info_columns(infos, len(per_group)))
        rows.append(row)
        if callback is not None:
            callback(iteration, data, loss_fn)
        last = iteration + 1 == iterations  # a finished run keeps its end too: --resume --frames extends it
        if args.checkpoint_every and ((iteration + 1) % args.checkpoint_every == 0 or last) and info.is_main:
            save_checkpoint(args, rows, frames, iteration + 1, wall, loss_fn, optim)
        if bar is not None:
            bar.update(data.numel() * info.world_size)
            bar.set_postfix(episode_reward=f"{row['mean_episode_reward']:.3f}", fps=f"{frames / wall:,.0f}")
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - start

    random_reward, random_infos = random_policy_reward(env, keys, frames, steps, info, bool(args.team_return))
    summary = {
        "env": args.env,
        "env_kwargs": args.env_kwargs,
        "algorithm": "IPPO" if args.ippo else "MAPPO",
        "frames": frames,
        "wall_s": round(wall, 2),
        "final_mean_episode_reward": last_finite(rows, "mean_episode_reward"),
        "random_policy_reward": random_reward,
        **{f"final_{key}": last_finite(rows, key) for key in random_infos},
        **{f"random_policy_{key}": value for key, value in random_infos.items()},
        "seed": args.seed,
        "threads": args.threads,
        "world_size": info.world_size,
    }
    if info.is_main:
        args.out.mkdir(parents=True, exist_ok=True)
        write_outputs(args, rows, summary)  # before the GIF: a failed rendering keeps the curve
        gif = None if args.no_gif else write_gif(args, loss_fn if args.recurrent else step, policies, steps, device)
        if gif is not None:
            summary["gif"] = str(gif)
            write_summary(args, summary)  # summary.json holds every field main() prints
    env.close()
    if joined:
        # DDP's reducer must go while its process group lives: freed after destroy_process_group (when train
        # returns), its destructor can wait forever on the gloo group a faster rank has already left
        del objective
        dist.barrier()
        dist.destroy_process_group()
    return summary


# Columns that measure the machine, not the training: they go to timings.csv, so that metrics.csv is the same
# file for the same seed and threads.
TIMING_COLUMNS = ("wall_s",)


def write_metrics(args, rows: list[dict]) -> None:
    """One row per iteration: ``metrics.csv`` (frames and rewards), ``timings.csv`` (frames and wall time)."""
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
    """``metrics.csv``, ``timings.csv``, ``summary.json`` and ``learning_curve.png`` (one curve per group, and the
    random policy)."""
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


def write_gif(args, policy, policies: list[GroupPolicy], steps: int, device: torch.device) -> Path | None:
    """A GIF of env 0 under the trained policy, taking its most likely actions; None, saying why on stderr, where
    the env does not render here (the run's other files are written by then).
    ``policy``: ``collect``'s ``step``, or the recurrent agents (given fresh states for this env)."""
    import imageio.v2 as imageio

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
    if isinstance(policy, RecurrentAgents):
        policy.restart(1, device)
        policy = policy.step
    set_deterministic(policies, True)
    with torch.no_grad():
        for _ in range(steps):
            images.append(env.render(env_index=0)[::2, ::2])  # half size keeps the GIF small
            _, td = policy(env, td)
    set_deterministic(policies, False)
    env.close()
    path = args.out / "policy.gif"
    imageio.mimsave(path, images, duration=50, loop=0)
    return path


def main(argv=None) -> dict:
    args = parse_args(argv)
    summary = train(args)
    if not distributed.rank_info().is_main:
        return summary
    print(json.dumps(summary, indent=2))
    print(f"learning curve: {args.out / 'learning_curve.png'}")
    if "gif" in summary:
        print(f"policy GIF:     {summary['gif']}")
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
