"""Multi-agent PPO (MAPPO, or IPPO with --ippo) for any env ``marl_envs.make`` accepts: the file to fork.

Read top to bottom: the settings, the networks, then ``train``: rollout, GAE, the PPO loss and the update, inline.
Everything env-specific is read from the env: groups, action / reward / done keys and specs. One policy per
group, parameters shared inside the group; a centralised critic fed the root ``state`` when the env has one,
else the group's observations side by side (MAPPO), or a per-agent critic (IPPO); an observation shaped like an
image or a grid ((H, W, C) or (C, H, W)) passes a small convolutional torso first. The recurrent version (GRU
actors and critics, the settings of JaxMARL's MAPPO RNN baselines) is its own file, ``mappo_rnn.py``.

    python examples/mappo.py --env vmas/navigation --out runs/navigation
    python examples/mappo.py --env vmas/balance --env-kwargs n_agents=3 --frames 60000
    python examples/mappo.py --env vmas/simple_adversary --ippo
    torchrun --standalone --nproc_per_node 2 examples/mappo.py --env vmas/navigation --num-envs 30

Writes ``OUT/metrics.csv`` (frames, rewards, the env's infos at episode ends: SMAX's ``won`` is the win rate; a
board game's players each get their return and win rate), ``OUT/timings.csv``, ``OUT/summary.json``,
``OUT/learning_curve.png``, with ``--gif`` ``OUT/policy.gif``, and every ``--checkpoint-every`` updates
``OUT/checkpoint.pt``, from which ``--resume OUT`` continues a stopped run. The same seed, ``--threads`` and machine
give the same ``metrics.csv`` bit for bit. Under ``torchrun`` each rank runs ``--num-envs`` envs and the gradients
are averaged (docs/scaling.md). That bookkeeping lives in ``_common.py``, which reading this file does not need.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common.py, from any working directory
import _common  # noqa: E402  (bookkeeping: presets, files, checkpoints, torchrun; and GAE)

import marl_envs  # noqa: E402
from marl_envs.specs import Bounded, Categorical, OneHot  # noqa: E402

# The settings of any env; an env's preset (examples/presets.toml) and the command line override them.
DEFAULTS = {"env_kwargs": {}, "num_envs": 32, "frames": 60_000, "steps_per_batch": None, "epochs": 30,
            "minibatch": 400, "lr": 3e-4, "entropy": 1e-4, "normalize_advantage": False, "team_return": False,
            "hidden": 256, "gamma": 0.99, "lmbda": 0.9, "clip": 0.2, "max_grad_norm": 1.0, "anneal_lr": False}


def parse_args(argv=None):
    p = _common.parser(__doc__, DEFAULTS)
    p.add_argument("--recurrent", action="store_true", help="moved: the recurrent trainer is examples/mappo_rnn.py")
    args = p.parse_args(argv)
    if args.recurrent:
        p.error("--recurrent: the recurrent trainer is its own file; run examples/mappo_rnn.py with the other "
                "arguments (python examples/mappo_rnn.py --env ...)")
    return _common.finish_args(p, args, _common.presets(args.env, DEFAULTS), "mappo.py")


# ---------------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------------
def mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, n_out))


class ConvTorso(nn.Module):
    """A group's flat observation ``(..., k * F)`` whose features from ``start`` hold an image or a grid ``shape``
    ((H, W, C) or (C, H, W): a Melting Pot view, a MAgent2 grid, a board): two convolutions pooled to at most 4x4,
    the other features beside them; ``k`` agents side by side (a centralised critic's input) each encoded. A view of
    32 pixels or more is read in 8x8 patches first (a Melting Pot sprite; Melting Pot's own agents' first layer, 8x8
    at stride 8), a grid or a board cell by cell (3x3)."""

    def __init__(self, image: tuple, features: int, agents: int = 1):
        super().__init__()
        (self.shape, self.start, self.scale), self.features, self.agents = image, features, agents
        self.channels_last = self.shape[-1] < self.shape[0]  # (40, 40, 3), (13, 13, 5); a board (3, 3, 3) is (C, H, W)
        c, h, w = (self.shape[2], *self.shape[:2]) if self.channels_last else self.shape
        if min(h, w) >= 32:  # pixels: one cell per 8x8 patch (11x11 for an 88x88 view), 30 times fewer products
            first, h, w = nn.Conv2d(c, 16, 8, stride=8), h // 8, w // 8
        else:
            first = nn.Conv2d(c, 16, 3, padding=1)
        stride = 2 if min(h, w) >= 8 else 1
        self.conv = nn.Sequential(first, nn.ReLU(), nn.Conv2d(16, 32, 3, stride, padding=1),
                                  nn.ReLU(), nn.AdaptiveAvgPool2d((min(4, h), min(4, w))), nn.Flatten())
        self.size = math.prod(self.shape)
        self.out_dim = agents * (32 * min(4, h) * min(4, w) + features - self.size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.unflatten(-1, (self.agents, self.features))
        end = self.start + self.size
        image = x[..., self.start:end].reshape(-1, *self.shape) * self.scale
        image = image.permute(0, 3, 1, 2) if self.channels_last else image
        encoded = self.conv(image).reshape(*x.shape[:-1], -1)
        return torch.cat([encoded, x[..., :self.start], x[..., end:]], -1).flatten(-2)


def network(n_in: int, n_out: int, hidden: int, image: tuple | None = None, agents: int = 1) -> nn.Module:
    """The MLP; where the group's observation holds an image or a grid, a convolutional torso before it."""
    if image is None:
        return mlp(n_in, n_out, hidden)
    torso = ConvTorso(image, n_in // agents, agents)
    return nn.Sequential(torso, mlp(torso.out_dim, n_out, hidden))


class Policy(nn.Module):
    """One group's policy, shared by its agents: observation -> action, its log-probability and entropy.

    Continuous (``Bounded``) actions use a tanh-squashed Gaussian mapped onto the spec's bounds; the pre-squash
    sample is kept so log-probabilities are exact. Discrete actions are categorical and honour an action mask.
    """

    def __init__(self, obs_dim: int, spec, hidden: int, image: tuple | None = None):
        super().__init__()
        self.discrete, self.one_hot = isinstance(spec, (Categorical, OneHot)), isinstance(spec, OneHot)
        if self.discrete:
            self.net, self.n = network(obs_dim, spec.n, hidden, image), spec.n
        else:
            if not isinstance(spec, Bounded):
                raise TypeError(f"mappo.py supports Bounded, Categorical and OneHot actions, got {type(spec).__name__}")
            dim = spec.shape[-1]
            self.net = network(obs_dim, dim, hidden, image)
            self.log_std = nn.Parameter(torch.full((dim,), 0.0))
            low, high = spec.low[0], spec.high[0]  # (n_agents, dim): agents of a group may differ in range
            self.register_buffer("centre", (high + low) / 2)
            self.register_buffer("radius", (high - low) / 2)

    def dist(self, obs: torch.Tensor, mask: torch.Tensor | None):
        out = self.net(obs)  # logits, or the Gaussian's mean
        if self.discrete:
            return torch.distributions.Categorical(logits=out if mask is None else out.masked_fill(~mask, -1e9))
        return torch.distributions.Normal(out, self.log_std.exp().expand_as(out))

    def sample(self, dist, deterministic: bool = False):
        """``(action, pre-squash sample, log-probability)`` (the most likely action if ``deterministic``)."""
        if self.discrete:
            raw = dist.probs.argmax(-1) if deterministic else dist.sample()
            action = nn.functional.one_hot(raw, self.n) if self.one_hot else raw
            return action, raw.unsqueeze(-1).float(), dist.log_prob(raw).unsqueeze(-1)
        raw = dist.mean if deterministic else dist.sample()
        return self.centre + self.radius * torch.tanh(raw), raw, self.log_prob(dist, raw)

    def log_prob(self, dist, raw: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return dist.log_prob(raw.squeeze(-1).long()).unsqueeze(-1)
        # change of variables through tanh: log|d squash / d raw| = log(radius) + log(1 - tanh^2)
        correction = 2 * (math.log(2) - raw - nn.functional.softplus(-2 * raw)) + self.radius.log()
        return (dist.log_prob(raw) - correction).sum(-1, keepdim=True)

    def score(self, dist, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probability of stored samples and the entropy (of the pre-squash distribution)."""
        entropy = dist.entropy()
        return self.log_prob(dist, raw), entropy.unsqueeze(-1) if self.discrete else entropy.sum(-1, keepdim=True)


class Group:
    """Where one group's entries live (``group=None``: a single-agent env, its keys at the root), read from the
    env's keys; the entries this trainer adds (the sample, its log-probability, values, advantages) beside them."""

    def __init__(self, env: marl_envs.EnvBase, group: str | None, probe):
        self.prefix = () if group is None else (group,)
        under = (lambda k: k[:1] == self.prefix) if group else (lambda k: isinstance(k, str))
        self.action = next(k for k in env.action_keys if under(k))
        self.reward = next(k for k in env.reward_keys if under(k))
        self.observations = [k for k in env.observation_keys if under(k) and "observation" in _common.as_tuple(k)]
        if not self.observations:
            raise ValueError(f"group {group!r} has no observation entry; mappo.py reads (group, 'observation')")
        self.mask = self.at("action_mask") if self.at("action_mask") in env.observation_keys else None
        own = bool(self.prefix) and self.at("done") in env.done_keys  # agents that end apart (a SMAX unit)
        self.done, self.terminated = (self.at("done"), self.at("terminated")) if own else ("done", "terminated")
        self.sample, self.log_prob, self.value = self.at("action_sample"), self.at("action_log_prob"), self.at("value")
        self.advantage, self.target = self.at("advantage"), self.at("value_target")
        lead = 1 if group is None else 2  # (B,) or (B, n_agents) before an entry's features
        self.dims = [probe.get(k).ndim - lead for k in self.observations]  # each entry flattened past its agent dim
        self.obs_dim = sum(probe.get(k).shape[lead:].numel() for k in self.observations)
        # the first entry shaped like an image or a grid, as (its shape, where it starts in obs(), its scale)
        starts = [sum(probe.get(k).shape[lead:].numel() for k in self.observations[:i]) for i in range(len(self.dims))]
        self.image = next(((tuple(probe.get(k).shape[lead:]), start, 1 / 255 if probe.get(k).dtype == torch.uint8
                            else 1.0) for k, d, start in zip(self.observations, self.dims, starts) if d == 3), None)
        self.n = 1 if group is None else len(env.group_map[group])

    def at(self, name: str):
        return (*self.prefix, name) if self.prefix else name

    def obs(self, td) -> torch.Tensor:
        """The group's observation entries side by side, ``(..., n, F)``, as floats (a board too)."""
        return torch.cat([(td.get(k).flatten(-d) if d > 1 else td.get(k)).float()  # each cast once (an image too)
                          for k, d in zip(self.observations, self.dims)], -1)

    def action_mask(self, td) -> torch.Tensor | None:
        return None if self.mask is None else td.get(self.mask)

    def ended(self, next_td, name: str, like: torch.Tensor) -> torch.Tensor:
        """``name`` ("done" or "terminated") as 0/1 floats shaped like ``like``: the env's flag, or-ed with the
        group's own where it has them (an agent's own flag may stay False where the env's episode ends: a SMAX unit
        alive when its side wins)."""
        flags = [next_td.get(name)] + ([next_td.get(self.at(name))] if getattr(self, name) != name else [])
        out = None
        for flag in flags:
            while flag.ndim < like.ndim:
                flag = flag.unsqueeze(-2)
            flag = flag.expand_as(like).float()
            out = flag if out is None else torch.maximum(flag, out)
        return out


class Critic(nn.Module):
    """Values ``(..., n, 1)`` for a group: MAPPO from the root ``state`` (where the env has one) or every agent's
    observation side by side, one output per agent; IPPO (or a single agent) from each agent's own observation."""

    def __init__(self, g: Group, env, probe, hidden: int, centralised: bool):
        super().__init__()
        self.centralised = centralised and bool(g.prefix)
        self.state = self.centralised and "state" in env.observation_keys
        n_in = probe.get("state").shape[-1] if self.state else g.obs_dim * (g.n if self.centralised else 1)
        image = None if self.state else g.image
        self.state_image = self.state and probe.get("state").ndim == 4  # (B, H, W, C): the world's view (Melting Pot)
        if self.state_image:
            state = probe.get("state")
            n_in, image = state[0].numel(), (tuple(state.shape[1:]), 0, 1 / 255 if state.dtype == torch.uint8 else 1.0)
        agents = g.n if self.centralised and not self.state else 1  # the observations side by side
        self.net = network(n_in, g.n if self.centralised else 1, hidden, image, agents)

    def forward(self, g: Group, td) -> torch.Tensor:
        if not self.centralised:
            return self.net(g.obs(td))
        x = td.get("state") if self.state else g.obs(td).flatten(-2)
        return self.net(x.flatten(-3).float() if self.state_image else x).unsqueeze(-1)


class Agents(nn.Module):
    """Every group's policy and critic (the policies' parameters first: the order the gradient clip sums in)."""

    def __init__(self, env: marl_envs.EnvBase, hidden: int, centralised: bool):
        super().__init__()
        probe = env.reset()
        self.groups = [Group(env, group, probe) for group in list(env.group_map) or [None]]
        policies, critics = [], []
        for g in self.groups:
            policies.append(Policy(g.obs_dim, env.full_action_spec[g.action], hidden, g.image))
            critics.append(Critic(g, env, probe, hidden, centralised))
        self.policies, self.critics = nn.ModuleList(policies), nn.ModuleList(critics)

    def loss_keys(self) -> list:
        """The entries of a batch that the loss reads."""
        keys = ["state"] if any(critic.state for critic in self.critics) else []
        for g in self.groups:
            keys += [*g.observations, g.sample, g.log_prob, g.advantage, g.target] + ([g.mask] if g.mask else [])
        return keys

    @torch.no_grad()
    def act(self, td, deterministic: bool = False):
        """Each group's action, its pre-squash sample and log-probability, into ``td``."""
        for g, policy in zip(self.groups, self.policies):
            action, raw, log_prob = policy.sample(policy.dist(g.obs(td), g.action_mask(td)), deterministic)
            td.set(g.action, action)
            td.set(g.sample, raw)
            td.set(g.log_prob, log_prob)
        return td


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
def train(args, callback=None) -> dict:
    """Train; ``callback(update, data, agents)``, if given, runs after each update on every rank."""
    with _common.Run(args) as run:  # torch threads, seeds, device, torchrun (see _common.Run)
        env = run.make_env()
        steps = args.steps_per_batch or env.max_steps or 100
        agents = Agents(env, args.hidden, centralised=not args.ippo).to(run.device)
        params = list(agents.parameters())
        run.same_start(params)
        optim = torch.optim.Adam(params, lr=args.lr)
        episodes = _common.Episodes(env, [g.reward for g in agents.groups], bool(args.team_return))
        updates, minibatch = run.budget(steps)
        td = env.reset()
        for update in range(run.resume(env, agents, optim, updates, steps), updates):
            # rollout: `steps` steps of every env; step_and_maybe_reset restarts the envs whose episode ended
            with torch.no_grad():
                batch = []
                for _ in range(steps):
                    td, td_next = env.step_and_maybe_reset(agents.act(td))
                    batch.append(td)
                    td = td_next
                data = torch.stack(batch, dim=1)  # (envs, steps)
                # GAE per group; a truncated episode (time limit) bootstraps from its last observation's value
                for g, critic in zip(agents.groups, agents.critics):
                    value, next_value = critic(g, data), critic(g, data.get("next"))
                    reward = data.get(("next", *_common.as_tuple(g.reward)))
                    done, terminated = (g.ended(data.get("next"), name, reward) for name in ("done", "terminated"))
                    advantage = _common.gae(reward, value, next_value, done, terminated, args.gamma, args.lmbda)
                    data.set(g.advantage, advantage)
                    data.set(g.target, advantage + value)
            stats = episodes.update(data, run.info)
            if args.anneal_lr:  # linearly to 0 over the run's updates
                for group in optim.param_groups:
                    group["lr"] = args.lr * (1 - update / updates)
            # epochs of minibatches of (env, step) samples, of the entries the loss reads (not the next step's images)
            flat = data.select(*agents.loss_keys()).reshape(-1)
            n_minibatches = max(1, flat.shape[0] // minibatch)
            for _ in range(args.epochs):
                order = torch.randperm(flat.shape[0], device=flat.device)[: n_minibatches * minibatch]
                for idx in order.split(minibatch):
                    mb = flat[idx]
                    loss = 0.0
                    for g, policy, critic in zip(agents.groups, agents.policies, agents.critics):
                        dist = policy.dist(g.obs(mb), g.action_mask(mb))
                        log_prob, entropy = policy.score(dist, mb.get(g.sample))
                        ratio = (log_prob - mb.get(g.log_prob)).exp()
                        advantage = mb.get(g.advantage)
                        if args.normalize_advantage:  # per minibatch and group (sparse, small rewards)
                            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                        clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
                        policy_loss = -torch.minimum(ratio * advantage, clipped * advantage).mean()
                        # smooth L1, unclipped: the regression of this trainer's kept runs (mappo_rnn.py clips
                        # its values as JaxMARL's MAPPO RNN does; docs/mappo.md)
                        value_loss = nn.functional.smooth_l1_loss(critic(g, mb), mb.get(g.target))
                        loss = loss + policy_loss + value_loss - args.entropy * entropy.mean()
                    optim.zero_grad()
                    loss.backward()
                    run.average_gradients(params)  # under torchrun
                    nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                    optim.step()
            run.log(update, data, stats, agents, optim)
            if callback is not None:
                callback(update, data, agents)

        def play(env, td):  # the GIF's policy: the most likely actions
            return env.step_and_maybe_reset(agents.act(td, deterministic=True))

        return run.finish(env, [g.reward for g in agents.groups], steps, "IPPO" if args.ippo else "MAPPO", play)


def main(argv=None) -> dict:
    args = parse_args(argv)
    summary = train(args)
    if marl_envs.distributed.rank_info().is_main:
        _common.print_summary(args, summary)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
