"""Recurrent MAPPO (IPPO with --ippo) for any env ``marl_envs.make`` accepts: GRU actors and critics trained on
sequences, with the settings of JaxMARL's MAPPO RNN baselines (``baselines/MAPPO/mappo_rnn_smax.py``).

Read top to bottom: the settings, the networks, then ``train``: rollout, GAE, the PPO loss and the update, inline.
Per group, a GRU actor and a GRU critic, each shared by the group's agents; everything is read from the env:

- **actor**: the agent's observation entries (and, with ``--agent-ids``, its one-hot index in the group) ->
  Linear + ReLU -> GRU -> Linear + ReLU -> the action distribution (masked where the env gives an action mask);
- **critic**: MAPPO: the root ``"state"`` (else every agent's observations side by side) with the agent's one-hot
  index, so that each agent gets a value of its own; IPPO: what its actor sees. The same GRU layout (with
  ``--shared``, IPPO's critic is a second head on the actor's embedding and GRU, as JaxMARL's IPPO networks).

A recurrent state is zeroed at the step an episode starts for that agent (after a step whose ``done`` was set: the
group's own, for agents that end apart like a SMAX unit that dies, or the env's). Returns and advantages run to the
env's end for every agent, each step bootstrapped from the value its next step is given (from a zeroed state where
the agent's own episode terminated). Collection keeps, per step, the state each GRU started from and whether it was
zeroed there; an update replays each sequence of ``--bptt`` steps from its first step's state.

What differs from ``mappo.py`` besides the GRUs, and why (docs/recurrent.md): the baselines' settings (layers of
128, 4 epochs, GAE lambda 0.95, the learning rate annealed to 0, advantages standardised per minibatch, Adam's
epsilon 1e-5, actor and critic gradients clipped apart) and their value loss, clipped around the value collection
saw (0.5 x the larger squared error, weighted 0.5); ``mappo.py`` regresses its values with an unclipped smooth L1.

    python examples/mappo_rnn.py --env jaxmarl/HeuristicEnemySMAX --threads 2     # SMAX 3m, JaxMARL's settings
    python examples/mappo_rnn.py --env jaxmarl/MPE_simple_spread_v3 --threads 2
    python examples/mappo_rnn.py --env lbforaging/Foraging-8x8-2p-2f-coop-v3       # EPyMARL's MAPPO settings

Writes the files ``mappo.py`` writes (bookkeeping in ``_common.py``, which reading this file does not need).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common.py, from any working directory
import _common  # noqa: E402  (bookkeeping: presets, files, checkpoints, torchrun; and GAE)

import marl_envs  # noqa: E402
from marl_envs.specs import Bounded, Categorical, OneHot  # noqa: E402

# JaxMARL's recurrent MAPPO settings for any env; an env's preset ([rnn] in presets.toml) and the command line override
DEFAULTS = {"env_kwargs": {}, "num_envs": 32, "frames": 60_000, "steps_per_batch": None, "epochs": 4,
            "minibatch": 400, "lr": 5e-4, "entropy": 0.01, "normalize_advantage": True, "team_return": False,
            "hidden": 128, "gamma": 0.99, "lmbda": 0.95, "clip": 0.2, "max_grad_norm": 0.5, "anneal_lr": True,
            "agent_ids": False, "bptt": None, "shared": False, "shuffle": "envs"}
VALUE_COEF = 0.5  # the value loss's weight (JaxMARL's VF_COEF)
ADAM_EPS = 1e-5  # JaxMARL's (and CleanRL's) Adam epsilon
ENV_STATE = "_env_state"  # with --shuffle agents: each agent's env's root "state", beside its group's entries


def parse_args(argv=None):
    p = _common.parser(__doc__, DEFAULTS)
    p.add_argument("--bptt", type=int, metavar="STEPS",
                   help="gradients flow back through sequences of STEPS steps, each started from the state collection "
                        "gave it (default: the preset's, else the batch's steps)")
    p.add_argument("--agent-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="each agent's one-hot index in its group added to its policy's input (default: the preset)")
    p.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                   help="with --ippo: actor and critic share one embedding and GRU, each with its own head, and one "
                        "gradient clip (JaxMARL's IPPO networks; default: the preset)")
    p.add_argument("--shuffle", choices=["envs", "agents"], default=None,
                   help="a minibatch holds whole envs' sequences (each with all its agents), or agents' sequences "
                        "drawn across envs, each agent of a group from its own envs (JaxMARL's minibatches; MAPPO's "
                        "critic then reads each agent's env's state); default: the preset")
    args = p.parse_args(argv)
    return _common.finish_args(p, args, _common.presets(args.env, DEFAULTS, recurrent=True, ippo=args.ippo), "mappo_rnn.py")


# ---------------------------------------------------------------------------------------------------
# Networks
# ---------------------------------------------------------------------------------------------------
def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class GRUNet(nn.Module):
    """``input -> Linear(fc) + ReLU -> GRU(hidden) -> Linear(fc) + ReLU -> Linear(n_out)`` over rows of agents.

    ``step`` advances a batch of rows one step, ``sequence`` runs ``(T, N)`` rows from their first states; both
    zero a row's state where ``start`` is set, before the step (an episode starts there).
    """

    def __init__(self, n_in: int, n_out: int, fc: int, hidden: int, out_gain: float, trunk: GRUNet | None = None):
        super().__init__()
        self.hidden = hidden
        if trunk is not None:  # another head on ``trunk``'s embedding and GRU (their gradients flow into both)
            self.embed, self.cell = trunk.embed, trunk.cell
            self.head = self._head(fc, n_out, out_gain)
            return
        # the initialisation of the baselines' networks (Flax's GRU cell: LeCun-normal input weights, orthogonal
        # recurrent ones, zero biases)
        self.embed = _init(nn.Linear(n_in, fc), math.sqrt(2))
        self.cell = nn.GRUCell(fc, hidden)
        nn.init.normal_(self.cell.weight_ih, std=1 / math.sqrt(fc))
        for block in self.cell.weight_hh.data.chunk(3, 0):
            nn.init.orthogonal_(block)
        nn.init.zeros_(self.cell.bias_ih)
        nn.init.zeros_(self.cell.bias_hh)
        self.head = self._head(fc, n_out, out_gain)

    def _head(self, fc: int, n_out: int, out_gain: float) -> nn.Sequential:
        return nn.Sequential(_init(nn.Linear(self.hidden, fc), 2.0), nn.ReLU(), _init(nn.Linear(fc, n_out), out_gain))

    def step(self, x: torch.Tensor, h: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (N, in)``, ``h (N, H)``, ``start (N,)``: ``(output, new state)``."""
        h = self.cell(torch.relu(self.embed(x)), h.masked_fill(start.unsqueeze(-1), 0.0))
        return self.head(h), h

    def sequence(self, x: torch.Tensor, h: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (T, N, in)``, ``h (N, H)`` (the state before the first step), ``start (T, N)``: the outputs and the
        state after each step, ``(T, N, *)``."""
        embedded = torch.relu(self.embed(x))  # every step at once: only the cell runs step by step
        states = []
        for t in range(x.shape[0]):
            h = self.cell(embedded[t], h.masked_fill(start[t].unsqueeze(-1), 0.0))
            states.append(h)
        states = torch.stack(states)
        return self.head(states), states

    def after(self, x: torch.Tensor, states: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """The output for inputs ``x (..., in)`` one step past ``states (..., H)``, each zeroed first where ``start
        (..., 1)`` is set, every row at once (the values of each step's ``next`` observation)."""
        flat = self.cell(torch.relu(self.embed(x.flatten(0, -2))), states.masked_fill(start, 0.0).flatten(0, -2))
        return self.head(flat).unflatten(0, x.shape[:-1])


class Policy(nn.Module):
    """A group's GRU actor and its action distribution: categorical (masked where the env gives a mask) or, for
    ``Bounded`` actions, a tanh-squashed Gaussian on the spec's bounds (log-probabilities of the pre-squash sample)."""

    def __init__(self, n_in: int, spec, hidden: int):
        super().__init__()
        self.discrete, self.one_hot = isinstance(spec, (Categorical, OneHot)), isinstance(spec, OneHot)
        if not self.discrete and not isinstance(spec, Bounded):
            raise TypeError(f"mappo_rnn.py supports Bounded, Categorical and OneHot actions, got {type(spec).__name__}")
        self.n = spec.n if self.discrete else spec.shape[-1]
        self.net = GRUNet(n_in, self.n, hidden, hidden, out_gain=0.01)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.full((self.n,), 0.0))
            low, high = spec.low[0], spec.high[0]  # (n_agents, dim)
            self.register_buffer("centre", (high + low) / 2)
            self.register_buffer("radius", (high - low) / 2)

    def distribution(self, out: torch.Tensor, mask: torch.Tensor | None):
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
        correction = 2 * (math.log(2) - raw - nn.functional.softplus(-2 * raw)) + self.radius.log()  # tanh's Jacobian
        return (dist.log_prob(raw) - correction).sum(-1, keepdim=True)

    def score(self, dist, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probability of stored samples and the entropy (of the pre-squash distribution)."""
        entropy = dist.entropy()
        return self.log_prob(dist, raw), entropy.unsqueeze(-1) if self.discrete else entropy.sum(-1, keepdim=True)


class Group(nn.Module):
    """One group's actor and critic and where its entries live (``group=None``: a single-agent env, its keys at the
    root, given an agent dim of 1 here)."""

    def __init__(self, env: marl_envs.EnvBase, group: str | None, probe, args):
        super().__init__()
        self.prefix, self.single = (() if group is None else (group,)), group is None
        under = (lambda k: k[:1] == self.prefix) if group else (lambda k: isinstance(k, str))
        self.action = next(k for k in env.action_keys if under(k))
        self.reward = next(k for k in env.reward_keys if under(k))
        self.observations = [k for k in env.observation_keys if under(k) and "observation" in _common.as_tuple(k)]
        if not self.observations:
            raise ValueError(f"group {group!r} has no observation entry; mappo_rnn.py reads (group, 'observation')")
        self.mask = self.key("action_mask") if self.key("action_mask") in env.observation_keys else None
        self.own_done = bool(self.prefix) and self.key("done") in env.done_keys  # agents that end apart
        self.n = 1 if group is None else len(env.group_map[group])
        self.agent_ids = bool(args.agent_ids)
        lead = 1 if group is None else 2
        obs_dim = sum(probe.get(k).shape[lead:].numel() for k in self.observations)
        actor_in = obs_dim + (self.n if self.agent_ids else 0)
        self.policy = Policy(actor_in, env.full_action_spec[self.action], args.hidden)
        central = not args.ippo and not self.single
        if args.shared and central:
            raise ValueError("--shared shares the actor's GRU with a critic that reads what the actor reads: pass "
                             "--ippo too (MAPPO's critic reads the world state)")
        self.critic_input = ("state" if "state" in env.observation_keys else "joint") if central else "own"
        n_in = {"state": lambda: probe.get("state")[0].numel() + self.n, "joint": lambda: obs_dim * self.n + self.n,
                "own": lambda: actor_in}[self.critic_input]()
        if args.shuffle == "agents" and self.critic_input == "joint":
            raise ValueError("--shuffle agents puts an agent's sequences beside other envs' agents, and this MAPPO "
                             "critic reads every agent of its env (the env has no root \"state\"): pass --ippo with it")
        self.shared = bool(args.shared)
        self.critic = GRUNet(n_in, 1, args.hidden, args.hidden, out_gain=1.0,
                             trunk=self.policy.net if self.shared else None)
        self.register_buffer("ids", torch.eye(self.n), persistent=False)

    def key(self, name: str):
        return (*self.prefix, name) if self.prefix else name

    def get(self, td, name: str) -> torch.Tensor:
        """This trainer's entry ``name`` of ``td``, with its agent dim (given back to a single agent's root ones)."""
        x = td.get(self.key(name))
        return x.unsqueeze(td.ndim) if self.single else x

    def out(self, value: torch.Tensor, lead: int) -> torch.Tensor:
        """A per-agent ``(*batch, n, ...)`` tensor in the env's layout (no agent dim for a single agent)."""
        return value.select(lead, 0) if self.single else value

    def _obs(self, td, lead: int) -> torch.Tensor:
        """The observation entries side by side, ``(*batch, n, F)``, as floats (a board too)."""
        parts = [td.get(k) for k in self.observations]
        if self.single:
            parts = [p.unsqueeze(lead) for p in parts]
        return torch.cat([x.reshape(*x.shape[:lead + 1], -1) for x in parts], -1).float()

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.ids.expand(*x.shape[:-1], self.n)], -1)

    def actor_input(self, td, lead: int) -> torch.Tensor:
        x = self._obs(td, lead)
        return self._with_ids(x) if self.agent_ids else x

    def critic_in(self, td, lead: int) -> torch.Tensor:
        if self.critic_input == "own":
            return self.actor_input(td, lead)
        if self.critic_input == "state":
            # each agent's env's state, where its sequences were drawn from envs of their own (--shuffle agents)
            own = td.get((*self.prefix, ENV_STATE), None) if self.prefix else None
            if own is not None:
                return self._with_ids(own.flatten(lead + 1).float())
            shared = td.get("state").flatten(lead).float()
        else:  # every agent's observations side by side
            shared = self._obs(td, lead).flatten(lead)
        return self._with_ids(shared.unsqueeze(-2).expand(*shared.shape[:-1], self.n, shared.shape[-1]))

    def action_mask(self, td, lead: int) -> torch.Tensor | None:
        if self.mask is None:
            return None
        mask = td.get(self.mask)
        return mask.unsqueeze(lead) if self.single else mask

    def ended(self, next_td) -> torch.Tensor:
        """``(B, n)``: where this step ended each agent's episode (its group's ``done`` or the env's)."""
        flag = next_td.get("done")  # (B, 1)
        return next_td.get(self.key("done"))[..., 0] | flag if self.own_done else flag.expand(flag.shape[0], self.n)

    def own_ended(self, next_data) -> torch.Tensor:
        """``(T, B*n, 1)``: where a step terminated the agent's own episode (False without agents' own flags): a time
        limit does not, since the episode would go on from the state carried."""
        if not self.own_done:
            return torch.zeros((), dtype=torch.bool, device=next_data.get("done").device)
        return next_data.get(self.key("terminated")).transpose(0, 1).flatten(1, 2)

    def starts(self, data) -> torch.Tensor:
        """Where each step's states restarted, ``(T, B*n, 1)``."""
        return data.get(self.key("rnn_start")).transpose(0, 1).flatten(1, 2)

    def batch(self, x: torch.Tensor, B: int) -> torch.Tensor:
        """``(T, B*n, *)`` -> ``(B, T, n, *)``."""
        return x.unflatten(1, (B, self.n)).transpose(0, 1)

    def across(self, flat, rows: torch.Tensor):
        """This group's entries of ``flat`` (batch ``(S, T)``, its agents at dim 2) with agent ``a``'s sequences
        taken from the rows ``rows[a]`` (``(n, size)``): each agent's sequences from envs of its own."""
        if self.single:  # one agent: its env's sequences
            return flat[rows[0]]
        agents = torch.arange(self.n, device=rows.device)
        picked = flat.get(self.prefix[0]).apply(lambda x: x[rows.T, :, agents].transpose(1, 2),
                                                 batch_size=[rows.shape[1], flat.shape[1]])
        if self.critic_input == "state":  # MAPPO: each agent's critic reads the state of the env it was drawn from
            picked.set(ENV_STATE, flat.get("state")[rows.T].transpose(1, 2))
        return picked.empty().set(self.prefix[0], picked)

    def values(self, data, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The critic along a ``(B, T)`` batch's sequences from states ``h0 (B, n, H)``: ``(values (T, B*n, 1),
        states after each step (T, B*n, H))``."""
        x = self.critic_in(data, 2).transpose(0, 1).flatten(1, 2)  # (T, B*n, F)
        return self.critic.sequence(x, h0.flatten(0, 1), self.starts(data)[..., 0])


class Agents(nn.Module):
    """Every group's actor and critic, and the states collection carries from step to step (buffers: a checkpoint
    keeps them)."""

    def __init__(self, env: marl_envs.EnvBase, args):
        super().__init__()
        probe = env.reset()
        self.groups = nn.ModuleList(Group(env, group, probe, args) for group in list(env.group_map) or [None])
        self.restart(env.num_envs, None)

    def restart(self, num_envs: int, device) -> None:
        """Fresh states for ``num_envs`` envs that all start episodes (a run's first step; the GIF's env)."""
        for i, g in enumerate(self.groups):
            self.register_buffer(f"actor_state_{i}", torch.zeros(num_envs, g.n, g.policy.net.hidden, device=device))
            self.register_buffer(f"critic_state_{i}", torch.zeros(num_envs, g.n, g.critic.hidden, device=device))
            self.register_buffer(f"start_{i}", torch.ones(num_envs, g.n, dtype=torch.bool, device=device),
                                 persistent=False)

    @torch.no_grad()
    def step(self, env, td, deterministic: bool = False):
        """Each group's action (with the state its GRU started from), then ``env.step_and_maybe_reset``; marks where
        the step ended episodes, so those states start afresh at the next step."""
        for i, g in enumerate(self.groups):
            x = g.actor_input(td, 1)
            B = x.shape[0]
            start, h = getattr(self, f"start_{i}"), getattr(self, f"actor_state_{i}")
            out, h_new = g.policy.net.step(x.flatten(0, 1), h.flatten(0, 1), start.flatten())
            dist = g.policy.distribution(out.view(B, g.n, -1), g.action_mask(td, 1))
            action, raw, log_prob = g.policy.sample(dist, deterministic)
            td.set(g.action, g.out(action, 1))
            td.set(g.key("action_sample"), g.out(raw, 1))
            td.set(g.key("action_log_prob"), g.out(log_prob, 1))
            td.set(g.key("actor_hidden"), h.masked_fill(start.unsqueeze(-1), 0.0))
            td.set(g.key("rnn_start"), start.unsqueeze(-1))
            setattr(self, f"actor_state_{i}", h_new.view(B, g.n, -1))
        td, td_next = env.step_and_maybe_reset(td)
        for i, g in enumerate(self.groups):
            setattr(self, f"start_{i}", g.ended(td.get("next")))
        return td, td_next


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------
def _like(flag: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """An env-level ``(B, T, 1)`` flag as 0/1 floats shaped like a group's ``like``."""
    while flag.ndim < like.ndim:
        flag = flag.unsqueeze(-2)
    return flag.expand_as(like).float()


def train(args, callback=None) -> dict:
    """Train; ``callback(update, data, agents)``, if given, runs after each update on every rank."""
    with _common.Run(args) as run:  # torch threads, seeds, device, torchrun (see _common.Run)
        env = run.make_env()
        steps = args.steps_per_batch or env.max_steps or 100
        bptt = args.bptt or steps
        if steps % bptt:
            raise ValueError(f"--bptt {bptt} must divide the steps of a batch ({steps}): a batch is cut into "
                             f"sequences of --bptt steps; pass a divisor of {steps}")
        agents = Agents(env, args).to(run.device)
        params = list(agents.parameters())
        run.same_start(params)
        # each set clipped on its own, as two optimisers would (the MAPPO baselines'); one network (--shared), once
        clipped = [params] if args.shared else [[p for g in agents.groups for p in g.policy.parameters()],
                                                [p for g in agents.groups for p in g.critic.parameters()]]
        optim = torch.optim.Adam(params, lr=args.lr, eps=ADAM_EPS)
        episodes = _common.Episodes(env, [g.reward for g in agents.groups], bool(args.team_return))
        updates, minibatch = run.budget(steps)
        td = env.reset()
        for update in range(run.resume(env, agents, optim, updates, steps), updates):
            with torch.no_grad():
                # rollout: `steps` steps of every env, the GRUs' states carried on (and restarted at episode starts)
                batch = []
                for _ in range(steps):
                    td, td_next = agents.step(env, td)
                    batch.append(td)
                    td = td_next
                data = torch.stack(batch, dim=1)  # (envs, steps)
                # the critics' values along the batch, carrying their states on; then GAE to the env's end
                B = data.shape[0]
                for i, g in enumerate(agents.groups):
                    h0 = getattr(agents, f"critic_state_{i}")
                    value, states = g.values(data, h0)
                    # each step's next observation, one step past the state after it (a time limit's bootstrap),
                    # from a fresh state where the agent's own episode terminated (a SMAX unit that died): the value
                    # that step gets when it is trained on
                    next_value = g.critic.after(g.critic_in(data.get("next"), 2).transpose(0, 1).flatten(1, 2), states,
                                                g.own_ended(data.get("next")))
                    before = torch.cat([h0.flatten(0, 1).unsqueeze(0), states[:-1]])  # the state each step started from
                    data.set(g.key("critic_hidden"), g.batch(before.masked_fill(g.starts(data), 0.0), B))
                    # a copy: a view would keep (and a checkpoint would save) every step's states
                    setattr(agents, f"critic_state_{i}", states[-1].view(B, g.n, -1).clone())
                    value, next_value = g.out(g.batch(value, B), 2), g.out(g.batch(next_value, B), 2)
                    data.set(g.key("state_value"), value)
                    # a unit that dies early (SMAX's) still shares its team's reward and return: the env's flags
                    reward = data.get(("next", *_common.as_tuple(g.reward)))
                    done, terminated = (_like(data.get(("next", name)), reward) for name in ("done", "terminated"))
                    advantage = _common.gae(reward, value, next_value, done, terminated, args.gamma, args.lmbda)
                    data.set(g.key("advantage"), advantage)
                    data.set(g.key("value_target"), advantage + value)
            stats = episodes.update(data, run.info)
            if args.anneal_lr:  # linearly to 0 over the run's updates
                for group in optim.param_groups:
                    group["lr"] = args.lr * (1 - update / updates)
            # minibatches of sequences: each env's batch cut into pieces of --bptt steps, each replayed from the
            # state collection started it from
            flat = data.reshape(-1, bptt)
            size = max(1, minibatch // bptt)
            n_minibatches = max(1, flat.shape[0] // size)
            for _ in range(args.epochs):
                order = torch.randperm(flat.shape[0], device=flat.device)[: n_minibatches * size]
                across = [torch.stack([torch.randperm(flat.shape[0], device=flat.device)[: n_minibatches * size]
                                       for _ in range(g.n)]) for g in agents.groups] if args.shuffle == "agents" else []
                for k, idx in enumerate(order.split(size)):
                    mb = None if across else flat[idx]
                    loss = 0.0
                    for i, g in enumerate(agents.groups):
                        if across:  # this group's agents' sequences, each agent's from envs of its own
                            mb = g.across(flat, across[i][:, k * size:(k + 1) * size])
                        B = mb.shape[0]
                        x = g.actor_input(mb, 2).transpose(0, 1).flatten(1, 2)
                        h0 = mb.get(g.key("actor_hidden"))[:, 0].flatten(0, 1)
                        out, states = g.policy.net.sequence(x, h0, g.starts(mb)[..., 0])
                        dist = g.policy.distribution(g.batch(out, B), g.action_mask(mb, 2))
                        log_prob, entropy = g.policy.score(dist, g.get(mb, "action_sample"))
                        ratio = (log_prob - g.get(mb, "action_log_prob")).exp()
                        advantage = g.get(mb, "advantage")
                        if args.normalize_advantage:  # per minibatch and group
                            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
                        clip = ratio.clamp(1 - args.clip, 1 + args.clip)
                        policy_loss = -torch.minimum(ratio * advantage, clip * advantage).mean()
                        # the value loss of JaxMARL's MAPPO RNN: clipped around the value collection saw
                        if g.shared:  # the critic's head on the actor's states
                            value = g.critic.head(states)
                        else:
                            value, _ = g.values(mb, mb.get(g.key("critic_hidden"))[:, 0])
                        value = g.batch(value, B)
                        old, target = g.get(mb, "state_value"), g.get(mb, "value_target")
                        value_clipped = old + (value - old).clamp(-args.clip, args.clip)
                        value_loss = 0.5 * torch.maximum((value - target) ** 2, (value_clipped - target) ** 2).mean()
                        loss = loss + policy_loss + VALUE_COEF * value_loss - args.entropy * entropy.mean()
                    optim.zero_grad()
                    loss.backward()
                    run.average_gradients(params)  # under torchrun
                    for group_params in clipped:
                        nn.utils.clip_grad_norm_(group_params, args.max_grad_norm)
                    optim.step()
            run.log(update, data, stats, agents, optim)
            if callback is not None:
                callback(update, data, agents)

        agents.restart(1, run.device)  # the GIF's env: one, from a fresh episode

        def play(env, td):  # the most likely actions
            return agents.step(env, td, deterministic=True)

        return run.finish(env, [g.reward for g in agents.groups], steps, "IPPO" if args.ippo else "MAPPO", play)


def main(argv=None) -> dict:
    args = parse_args(argv)
    summary = train(args)
    if marl_envs.distributed.rank_info().is_main:
        _common.print_summary(args, summary)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
