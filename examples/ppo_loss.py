"""A small PPO loss configured with keys read from the env (``env.action_keys``, ``env.reward_keys``, ...).

Used by ``mappo.py``; kept beside it so that copying the example copies the loss too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule
from torch import nn

NestedKey = str | tuple[str, ...]


@dataclass(frozen=True)
class GroupKeys:
    """Where one group's entries live. Built from the env (see ``mappo.group_keys``), never typed by hand."""

    action: NestedKey
    reward: NestedKey
    done: NestedKey
    terminated: NestedKey
    sample: NestedKey  # what the policy sampled before squashing (exact log-probabilities)
    log_prob: NestedKey
    value: NestedKey
    advantage: NestedKey
    value_target: NestedKey


def _like(flag: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Broadcast a (..., 1) env-level flag to a (..., n_agents, 1) group entry."""
    while flag.ndim < target.ndim:
        flag = flag.unsqueeze(-2)
    return flag.expand_as(target).float()


def _ended(data: TensorDictBase, key: NestedKey, like: torch.Tensor) -> torch.Tensor:
    """``("next", *key)`` or-ed with the root flag of the same name, as float shaped like ``like``."""
    name = as_tuple(key)
    flag = _like(data.get(("next", *name)), like)
    return torch.maximum(flag, _like(data.get(("next", name[-1])), like)) if len(name) > 1 else flag


@torch.no_grad()
def gae(data: TensorDictBase, keys: GroupKeys, critic: TensorDictModule, gamma: float, lmbda: float) -> None:
    """Generalised advantage estimation over a (B, T) batch, in place.

    The chain is cut where an episode ended (``done``) and the next value is bootstrapped unless the episode
    terminated: a truncated episode (time limit) keeps the value of its last observation, which the env keeps
    in ``data["next"]``. A group with done flags of its own (agents that end separately) also ends wherever the
    env's episode ends: the root flags are or-ed in, since an agent's own flag may stay False at the env's end
    (a SMAX unit alive when its side wins; a PettingZoo agent when another one's end ends the env).
    """
    value = critic(data.clone(False)).get(keys.value)
    next_value = critic(data.get("next").clone(False)).get(keys.value)
    advantages(data, keys, value, next_value, gamma, lmbda)


@torch.no_grad()
def advantages(data: TensorDictBase, keys: GroupKeys, value: torch.Tensor, next_value: torch.Tensor, gamma: float,
               lmbda: float) -> None:
    """``gae`` from given values: ``value`` of each step's observation and ``next_value`` of its ``("next", ...)``
    one, both shaped like the group's reward (a recurrent critic computes them along the batch's sequences)."""
    reward = data.get(("next", *as_tuple(keys.reward)))
    done = _ended(data, keys.done, reward)
    terminated = _ended(data, keys.terminated, reward)
    delta = reward + gamma * next_value * (1 - terminated) - value
    advantage = torch.zeros_like(delta)
    running = torch.zeros_like(delta[:, 0])
    for t in reversed(range(delta.shape[1])):
        running = delta[:, t] + gamma * lmbda * (1 - done[:, t]) * running
        advantage[:, t] = running
    data.set(keys.advantage, advantage)
    data.set(keys.value_target, advantage + value)


def as_tuple(key: NestedKey) -> tuple[str, ...]:
    """A nested key as a tuple (``"done"`` -> ``("done",)``)."""
    return (key,) if isinstance(key, str) else tuple(key)


class PPOLoss(nn.Module):
    """Clipped PPO objective, value regression and an entropy bonus, summed over groups.

    Args:
        actors: per group, a ``TensorDictModule`` whose module has ``evaluate(*inputs, sample)`` returning the
            log-probability of ``sample`` and the entropy.
        critics: per group, a ``TensorDictModule`` writing ``keys.value``.
        keys: per group, the ``GroupKeys`` read from the env.
        normalize_advantage: standardise the advantages of each minibatch (per group): with sparse, small rewards
            (Level-Based Foraging's) the policy gradient would otherwise vanish beside the entropy bonus.
    """

    def __init__(self, actors: list[TensorDictModule], critics: list[TensorDictModule], keys: list[GroupKeys],
                 clip: float = 0.2, entropy_coef: float = 1e-4, value_coef: float = 1.0,
                 normalize_advantage: bool = False):
        super().__init__()
        self.actors, self.critics, self.keys = nn.ModuleList(actors), nn.ModuleList(critics), keys
        self.clip, self.entropy_coef, self.value_coef = clip, entropy_coef, value_coef
        self.normalize_advantage = normalize_advantage

    def forward(self, batch: TensorDictBase) -> torch.Tensor:
        total = 0.0
        for actor, critic, keys in zip(self.actors, self.critics, self.keys):
            inputs = [batch.get(k) for k in actor.in_keys]
            log_prob, entropy = actor.module.evaluate(*inputs, sample=batch.get(keys.sample))
            ratio = (log_prob - batch.get(keys.log_prob)).exp()
            advantage = batch.get(keys.advantage)
            if self.normalize_advantage:
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            clipped = ratio.clamp(1 - self.clip, 1 + self.clip)
            policy_loss = -torch.minimum(ratio * advantage, clipped * advantage).mean()
            value = critic(batch.clone(False)).get(keys.value)
            value_loss = nn.functional.smooth_l1_loss(value, batch.get(keys.value_target))
            total = total + policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy.mean()
        return total
