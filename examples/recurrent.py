"""Recurrent MAPPO / IPPO for ``mappo.py --recurrent``: per group, a GRU actor and a GRU critic, each shared by the
group's agents, trained on whole sequences.

Everything is read from the env, as in ``mappo.py``: the groups, their keys, the done keys that end an episode and
the root ``"state"`` a centralised critic reads where the env declares one (SMAX's world state). What each agent
sees and what it learns from:

- **actor**: its observation entries (and, with ``agent_ids``, its one-hot index in the group) -> Linear + ReLU ->
  GRU -> Linear + ReLU -> the action distribution (masked where the env gives an action mask);
- **critic**: MAPPO: the root ``"state"`` (else every agent's observations side by side) with the agent's one-hot
  index, so that each agent gets a value of its own; IPPO: what its actor sees. The same GRU layout.

A recurrent state is zeroed at the step an episode starts for that agent: after a step whose ``done`` was set,
the group's own (agents that end apart: a SMAX unit that dies) or the env's. Returns and advantages run to the
env's end for every agent (``RecurrentGroup.return_keys``). Collection keeps, per step, the state
each GRU started from (``(group, "actor_hidden")``, ``(group, "critic_hidden")``) and whether it was zeroed there
(``(group, "rnn_start")``): an update replays each env's whole batch from its first step, zeroing at the same
steps (truncated backpropagation over the batch's steps).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from tensordict import TensorDictBase
from torch import nn

from ppo_loss import GroupKeys, NestedKey, advantages, as_tuple

def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class GRUNet(nn.Module):
    """``input -> Linear(fc) + ReLU -> GRU(hidden) -> Linear(hidden) + ReLU -> Linear(n_out)`` over rows of agents.

    ``step`` advances a batch of rows one step, ``sequence`` runs ``(T, N)`` rows from their first states; both
    zero a row's state where ``start`` is set, before the step (an episode starts there).
    """

    def __init__(self, n_in: int, n_out: int, fc: int, hidden: int, out_gain: float):
        super().__init__()
        self.hidden = hidden
        # the initialisation of the baselines' networks (Flax's GRU cell: LeCun-normal input weights, orthogonal
        # recurrent ones, zero biases)
        self.embed = _init(nn.Linear(n_in, fc), math.sqrt(2))
        self.cell = nn.GRUCell(fc, hidden)
        nn.init.normal_(self.cell.weight_ih, std=1 / math.sqrt(fc))
        for block in self.cell.weight_hh.data.chunk(3, 0):
            nn.init.orthogonal_(block)
        nn.init.zeros_(self.cell.bias_ih)
        nn.init.zeros_(self.cell.bias_hh)
        self.head = nn.Sequential(_init(nn.Linear(hidden, hidden), 2.0), nn.ReLU(),
                                  _init(nn.Linear(hidden, n_out), out_gain))

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

    def after(self, x: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """The output for inputs ``x (..., in)`` one step past ``states (..., H)``, every row at once (the values of
        each step's ``next`` observation)."""
        flat = self.cell(torch.relu(self.embed(x.flatten(0, -2))), states.flatten(0, -2))
        return self.head(flat).unflatten(0, x.shape[:-1])


def _flat(inputs: list[torch.Tensor], lead: int) -> torch.Tensor:
    """Entries side by side, each flattened past its first ``lead`` dims, as float32 (a grid of ints too)."""
    return torch.cat([x.reshape(*x.shape[:lead], -1) for x in inputs], -1).float()


class RecurrentGroup(nn.Module):
    """One group's recurrent actor (a ``GroupPolicy`` whose network is a ``GRUNet``) and critic, and where its
    entries live. ``single``: a single-agent env (its keys at the root, given an agent dim of 1 here)."""

    def __init__(self, policy: nn.Module, critic: GRUNet, keys: GroupKeys, observations: list[NestedKey],
                 mask: NestedKey | None, n: int, single: bool, agent_ids: bool, critic_input: str):
        super().__init__()
        self.policy, self.critic, self.keys = policy, critic, keys
        self.observations, self.mask, self.n, self.single = observations, mask, n, single
        self.agent_ids, self.critic_input = agent_ids, critic_input  # critic_input: "state", "joint" or "own"
        self.prefix = as_tuple(keys.action)[:-1]
        # GAE runs to the env's end for every agent, as the recurrent MAPPO baselines' does: a unit that dies early
        # (SMAX's) still shares its team's reward and return; its own end only restarts its recurrent state
        self.return_keys = dataclasses.replace(keys, done="done", terminated="terminated")
        self.register_buffer("ids", torch.eye(n), persistent=False)

    def key(self, name: str) -> tuple[str, ...]:
        return (*self.prefix, name)

    def _obs(self, td: TensorDictBase, lead: int) -> torch.Tensor:
        """The observation entries side by side, ``(*batch, n, F)``."""
        parts = [td.get(k) for k in self.observations]
        if self.single:
            parts = [p.unsqueeze(lead) for p in parts]
        return _flat(parts, lead + 1)

    def _with_ids(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.ids.expand(*x.shape[:-1], self.n)], -1)

    def actor_input(self, td: TensorDictBase, lead: int) -> torch.Tensor:
        x = self._obs(td, lead)
        return self._with_ids(x) if self.agent_ids else x

    def critic_in(self, td: TensorDictBase, lead: int) -> torch.Tensor:
        if self.critic_input == "own":
            return self.actor_input(td, lead)
        if self.critic_input == "state":
            shared = td.get("state").flatten(lead).float()
        else:  # every agent's observations side by side
            shared = self._obs(td, lead).flatten(lead)
        return self._with_ids(shared.unsqueeze(-2).expand(*shared.shape[:-1], self.n, shared.shape[-1]))

    def action_mask(self, td: TensorDictBase, lead: int) -> torch.Tensor | None:
        if self.mask is None:
            return None
        mask = td.get(self.mask)
        return mask.unsqueeze(lead) if self.single else mask

    def ended(self, next_td: TensorDictBase) -> torch.Tensor:
        """``(B, n)``: where this step ended the episode of each agent (its group's ``done`` or the env's)."""
        flag = next_td.get("done")  # (B, 1)
        own = as_tuple(self.keys.done)
        if len(own) > 1:
            return next_td.get(own)[..., 0] | flag
        return flag.expand(flag.shape[0], self.n)

    def out(self, value: torch.Tensor, lead: int) -> torch.Tensor:
        """A per-agent ``(*batch, n, ...)`` tensor (``lead`` batch dims) in the env's layout: without the agent dim
        for a single agent, whose keys are at the root."""
        return value.select(lead, 0) if self.single else value


class RecurrentAgents(nn.Module):
    """The recurrent actors and critics of every group, the states collection carries, and the PPO objective.

    ``forward(minibatch)`` is the loss of a ``(envs, T)`` minibatch of whole sequences (so that
    ``DistributedDataParallel`` wraps it as it wraps ``PPOLoss``); ``step(env, td)`` acts and steps the env;
    ``values(data)`` writes the advantages and value targets of a collected batch.
    """

    def __init__(self, groups: list[RecurrentGroup], num_envs: int, clip: float, entropy_coef: float,
                 value_coef: float, normalize_advantage: bool):
        super().__init__()
        self.groups = nn.ModuleList(groups)
        self.clip, self.entropy_coef, self.value_coef = clip, entropy_coef, value_coef
        self.normalize_advantage = normalize_advantage
        for i, g in enumerate(groups):  # the states collection carries from batch to batch (kept in checkpoints)
            self.register_buffer(f"actor_state_{i}", torch.zeros(num_envs, g.n, g.policy.net.hidden))
            self.register_buffer(f"critic_state_{i}", torch.zeros(num_envs, g.n, g.critic.hidden))
            # every state starts an episode: the first step of a run (or of a resumed one, from fresh episodes)
            self.register_buffer(f"start_{i}", torch.ones(num_envs, g.n, dtype=torch.bool), persistent=False)

    def actor_params(self):
        return [p for g in self.groups for p in g.policy.parameters()]

    def critic_params(self):
        return [p for g in self.groups for p in g.critic.parameters()]

    # -- collection -------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, td: TensorDictBase) -> TensorDictBase:
        """Each group's action, sample and log-probability into ``td``, with the state its GRU started from."""
        for i, g in enumerate(self.groups):
            x = g.actor_input(td, 1)
            B = x.shape[0]
            start, h = getattr(self, f"start_{i}"), getattr(self, f"actor_state_{i}")
            out, h_new = g.policy.net.step(x.flatten(0, 1), h.flatten(0, 1), start.flatten())
            action, raw, log_prob = g.policy.sample(g.policy.distribution(out.view(B, g.n, -1), g.action_mask(td, 1)))
            td.set(g.keys.action, g.out(action, 1))
            td.set(g.keys.sample, g.out(raw, 1))
            td.set(g.keys.log_prob, g.out(log_prob, 1))
            td.set(g.key("actor_hidden"), h.masked_fill(start.unsqueeze(-1), 0.0))
            td.set(g.key("rnn_start"), start.unsqueeze(-1))
            setattr(self, f"actor_state_{i}", h_new.view(B, g.n, -1))
        return td

    def observe(self, next_td: TensorDictBase) -> None:
        """Mark where the step just taken ended episodes: those states start afresh at the next step."""
        for i, g in enumerate(self.groups):
            setattr(self, f"start_{i}", g.ended(next_td))

    def step(self, env, td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """``env.step_and_maybe_reset`` of this policy's actions, noting the episodes it ended."""
        td, td_next = env.step_and_maybe_reset(self.act(td))
        self.observe(td.get("next"))
        return td, td_next

    def restart(self, num_envs: int, device) -> None:
        """Fresh states for ``num_envs`` envs that all start episodes (a separate env: the GIF's)."""
        for i, g in enumerate(self.groups):
            setattr(self, f"actor_state_{i}", torch.zeros(num_envs, g.n, g.policy.net.hidden, device=device))
            setattr(self, f"critic_state_{i}", torch.zeros(num_envs, g.n, g.critic.hidden, device=device))
            setattr(self, f"start_{i}", torch.ones(num_envs, g.n, dtype=torch.bool, device=device))

    # -- values and advantages ------------------------------------------------------------------------
    def _critic(self, g: RecurrentGroup, data: TensorDictBase, h0: torch.Tensor):
        """Values of a ``(B, T)`` batch along its sequences from states ``h0 (B, n, H)``: ``(values (T, B*n, 1),
        states after each step (T, B*n, H))``."""
        x = g.critic_in(data, 2).transpose(0, 1).flatten(1, 2)  # (T, B*n, F)
        return g.critic.sequence(x, h0.flatten(0, 1), self._starts(g, data)[..., 0])

    @staticmethod
    def _starts(g: RecurrentGroup, data: TensorDictBase) -> torch.Tensor:
        """Where each step's states restarted, ``(T, B*n, 1)``."""
        return data.get(g.key("rnn_start")).transpose(0, 1).flatten(1, 2)

    @torch.no_grad()
    def values(self, data: TensorDictBase, gamma: float, lmbda: float) -> None:
        """The critics' values along the batch (carrying their states on), then GAE (``ppo_loss.advantages``)."""
        B, T = data.shape
        for i, g in enumerate(self.groups):
            h0 = getattr(self, f"critic_state_{i}")
            value, states = self._critic(g, data, h0)
            # each step's next observation, one step past the state after it (a time limit's bootstrap)
            next_value = g.critic.after(g.critic_in(data.get("next"), 2).transpose(0, 1).flatten(1, 2), states)
            before = torch.cat([h0.flatten(0, 1).unsqueeze(0), states[:-1]])  # the state each step started from
            data.set(g.key("critic_hidden"), self._batch(before.masked_fill(self._starts(g, data), 0.0), B, g))
            # a copy: a view would keep (and a checkpoint would save) every step's states
            setattr(self, f"critic_state_{i}", states[-1].view(B, g.n, -1).clone())
            value, next_value = self._batch(value, B, g), self._batch(next_value, B, g)
            value, next_value = g.out(value, 2), g.out(next_value, 2)
            data.set(g.keys.value, value)
            advantages(data, g.return_keys, value, next_value, gamma, lmbda)

    @staticmethod
    def _batch(x: torch.Tensor, B: int, g: RecurrentGroup) -> torch.Tensor:
        """``(T, B*n, *)`` -> ``(B, T, n, *)``."""
        return x.unflatten(1, (B, g.n)).transpose(0, 1)

    # -- the objective ------------------------------------------------------------------------------
    def forward(self, batch: TensorDictBase) -> torch.Tensor:
        """Clipped PPO, clipped value regression and the entropy bonus over a ``(envs, T)`` minibatch, summed over
        groups; each sequence replayed from the states collection started it from."""
        B = batch.shape[0]
        total = 0.0
        for g in self.groups:
            x = g.actor_input(batch, 2).transpose(0, 1).flatten(1, 2)
            h0 = batch.get(g.key("actor_hidden"))[:, 0].flatten(0, 1)
            out, _ = g.policy.net.sequence(x, h0, self._starts(g, batch)[..., 0])
            out = self._batch(out, B, g)
            log_prob, entropy = g.policy.score(g.policy.distribution(out, g.action_mask(batch, 2)),
                                               _per_agent(batch.get(g.keys.sample), g))
            ratio = (log_prob - _per_agent(batch.get(g.keys.log_prob), g)).exp()
            advantage = _per_agent(batch.get(g.keys.advantage), g)
            if self.normalize_advantage:
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
            policy_loss = -torch.minimum(ratio * advantage, clipped * advantage).mean()
            value, _ = self._critic(g, batch, batch.get(g.key("critic_hidden"))[:, 0])
            value = self._batch(value, B, g)
            old, target = _per_agent(batch.get(g.keys.value), g), _per_agent(batch.get(g.keys.value_target), g)
            value_clipped = old + (value - old).clamp(-self.clip, self.clip)
            value_loss = 0.5 * torch.maximum((value - target) ** 2, (value_clipped - target) ** 2).mean()
            total = total + policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy.mean()
        return total


def _per_agent(x: torch.Tensor, g: RecurrentGroup) -> torch.Tensor:
    """A stored entry with its agent dim (given back to a single agent's root entries)."""
    return x.unsqueeze(2) if g.single else x
