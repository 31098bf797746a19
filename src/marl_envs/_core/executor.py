"""An env's executor: the one path from its backend hook to the env's data, and the description it is handed.

``EnvBase`` hands its executor an ``EnvFacts`` (``configure``) whenever its keys, specs, ``max_steps`` or
``validate_actions`` change, and the backend hook (``BackendHooks``, the env itself) with every call; an executor
reads nothing else of the env. ``TensorDictExecutor`` is the default, for backends whose ``_step`` / ``_reset``
return TensorDicts (VMAS, PettingZoo, a user's env): their ``terminated`` / ``truncated`` entries are copied into a
bool block, the done plan (``marl_envs._core.rules``) fills it, the done entries are cut from it. The JAX families'
executor (``marl_envs.backends.jax``), chosen when the env is built, runs the same rules inside each compiled step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase

from .rules import DonePlan, TimeLimit, block_device, cut_rows, merge_rows, new_block, next_root
from .actions import ActionCheck
from .leaf_specs import NestedKey
from .tensordicts import read_entry, set_entry

__all__ = ["BackendHooks", "EnvFacts", "Executor", "TensorDictExecutor"]

Key = tuple[str, ...]


@dataclass(frozen=True)
class EnvFacts:
    """What an executor knows of its env, made by the env from its specs and settings (``EnvBase._facts``).

    Attributes:
        num_envs, device: the env's batch size and device.
        keys: kind (``"observation"``, ``"action"``, ``"reward"``, ``"done"``, ``"state"``, ``"reset"``) -> its keys,
            root first.
        done_levels: done level prefix (``()`` for the root, ``(group,)``) -> the shape of its done entries.
        group_map: group -> its agents.
        group_shapes: group -> the batch ``(B, n_agents)`` of its sub-TensorDicts.
        limit: the ``max_steps`` truncation, or None.
        action_checks: what each step checks of each action entry (``actions.action_checks``).
        deferred: the executor checks the action values inside the step (``validate_actions``).
        fused_reset: the hook implements ``_step_reset``.
    """

    num_envs: int
    device: torch.device
    keys: Mapping[str, tuple[NestedKey, ...]]
    done_levels: Mapping[Key, torch.Size]
    group_map: Mapping[str, tuple[str, ...]]
    group_shapes: Mapping[str, torch.Size]
    limit: TimeLimit | None
    action_checks: tuple[ActionCheck, ...]
    deferred: bool
    fused_reset: bool

    @property
    def batch_size(self) -> torch.Size:
        return torch.Size([self.num_envs])


class BackendHooks(Protocol):
    """The backend hook an executor calls (``EnvBase``'s, documented there)."""

    def _reset(self, mask: torch.Tensor | None) -> Any: ...

    def _step(self, tensordict: TensorDictBase) -> Any: ...

    def _step_reset(self, tensordict: TensorDictBase, ends: torch.Tensor | None) -> tuple[Any, Any, torch.Tensor]: ...


class Executor:
    """The executor of an env's output rules: the one path from its backend to the env's data.

    ``EnvBase`` hands it every reset and step, once the inputs are checked, with the backend hook: ``reset(hooks,
    mask)`` returns the data of a reset of the envs ``mask`` ``(B,)`` selects (all: None), ``step(hooks, tensordict,
    actions)`` the ``"next"`` data of a step (``actions``: the values of the action keys in ``tensordict``, checked),
    ``step_and_reset(hooks, tensordict, actions)`` those and the next root data, in which the envs done hold a fresh
    start. Each executor keeps the envs' step counts (the time limit reads them) where its backend runs.

    Attributes:
        deferred_checks: the executor can check action values inside the backend's step, without waiting for
            the device (``EnvBase.validate_actions = "deferred"``).
        deferred_by_default: that is the check ``validate_actions=True`` chooses.
    """

    deferred_checks = False
    deferred_by_default = False
    facts: EnvFacts

    def configure(self, facts: EnvFacts) -> None:
        """Take the env's description (again: plans made from an earlier one are out of date)."""
        self.facts = facts

    def reset(self, hooks: BackendHooks, mask: torch.Tensor | None) -> TensorDictBase:
        raise NotImplementedError

    def step(self, hooks: BackendHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
             ) -> TensorDictBase:
        raise NotImplementedError

    def step_and_reset(self, hooks: BackendHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        raise NotImplementedError

    def step_counts(self) -> torch.Tensor:
        """Steps since each env's last reset, ``(B,)`` int64 (a copy)."""
        raise NotImplementedError

    def given_done_keys(self) -> list[tuple[NestedKey, ...]] | None:
        """The done entries each kind of step output of the backend hook gave since the env was configured (None:
        the executor's backend is one of ours, whose outputs are made by the library). ``check_env_specs`` reads it
        to refuse a user's ``_step`` that omits ``"terminated"``."""
        return None


class TensorDictExecutor(Executor):
    """The executor of backends whose ``_step`` and ``_reset`` return TensorDicts (see the module docstring).

    A plan is made for each set of done entries an output gives (a backend gives the same set every step, so
    one or two are made) and kept until the env is configured again. ``step_and_reset`` reads on the host whether
    any env is done (one wait on a device): the backend's ``_reset(mask)`` resets the envs the mask selects, and a
    backend that resets envs one by one (VMAS's exact partial reset, PettingZoo's instances) needs their indices.
    """

    def __init__(self, num_envs: int, device: torch.device):
        self.block_device = block_device(device)
        self._plans: dict[tuple[bool, tuple], tuple[DonePlan, list[tuple[Key, slice]]]] = {}
        self.count = torch.zeros(num_envs, dtype=torch.int64, device=device)  # steps since each reset
        self._count_numpy = self.count.numpy() if device.type == "cpu" else None  # a view

    def configure(self, facts: EnvFacts) -> None:
        super().configure(facts)
        self._plans.clear()

    def step_counts(self) -> torch.Tensor:
        return self.count.clone()

    def given_done_keys(self) -> list[tuple[NestedKey, ...]]:
        return [given for step, given in self._plans if step]

    def _plan(self, data: TensorDictBase, step: bool) -> tuple[DonePlan, list[tuple[Key, slice]]]:
        facts = self.facts
        given = tuple(key for key in facts.keys["done"]
                      if (key if isinstance(key, str) else key[-1]) != "done" and data.get(key, None) is not None)
        plan = self._plans.get((step, given))
        if plan is None:
            rows, width = {}, 0
            for key in given:
                n = int(np.prod(facts.done_levels[key[:-1] if isinstance(key, tuple) else ()][1:]))
                rows[(key,) if isinstance(key, str) else key] = slice(width, width + n)
                width += n
            done = DonePlan(facts.done_levels, rows, width, facts.limit if step else None)
            plan = self._plans[(step, given)] = (done, list(zip(given, rows.values())))
        return plan

    def _complete(self, data: TensorDictBase, step: bool, next_root: TensorDictBase | None = None) -> None:
        """Set ``data``'s done entries of every level (and ``next_root``'s) by the plan of the entries it gives."""
        num_envs = self.facts.num_envs
        plan, given = self._plan(data, step)
        block = new_block(plan.width, num_envs, self.block_device)
        numpy = isinstance(block, np.ndarray)
        for key, rows in given:
            value = read_entry(data, key)
            # NumPy's reshape is the cheaper call on the CPU
            block[rows] = value.numpy().reshape(num_envs, -1).T if numpy else value.reshape(num_envs, -1).T
        reached = None
        if plan.limit is not None:
            count = self._count_numpy[None] if numpy and self._count_numpy is not None else self.count
            reached = plan.limit.reached(count)
        plan.fill(block, reached)
        for key, view in plan.entries:
            value = cut_rows(block, view)
            set_entry(data, key, value)
            if next_root is not None:
                set_entry(next_root, key, value)

    def _batched(self, data: TensorDictBase) -> TensorDictBase:
        """Give ``data``'s group entries their ``(B, n_agents)`` batch (a backend may return them with ``(B,)``)."""
        for group, shape in self.facts.group_shapes.items():
            sub = data.get(group, None)
            if sub is not None and sub.batch_size != shape:
                sub.batch_size = shape
        return data

    def _zero(self, mask: torch.Tensor | None) -> None:
        if mask is None:
            self.count.zero_()
        else:
            self.count.masked_fill_(mask, 0)

    def _tick(self) -> None:
        if self._count_numpy is None:
            self.count += 1
        else:  # a view of the counts: NumPy's add is the cheaper call on the CPU
            np.add(self._count_numpy, 1, out=self._count_numpy)

    def reset(self, hooks: BackendHooks, mask: torch.Tensor | None, raw: TensorDictBase | None = None
              ) -> TensorDictBase:
        """The data of a reset of the envs ``mask`` selects (``raw``: the backend's output, if it already ran)."""
        self._zero(mask)
        data = self._batched(hooks._reset(mask) if raw is None else raw)
        self._complete(data, False)
        return data

    def step(self, hooks: BackendHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor] = ()
             ) -> TensorDictBase:
        data = self._batched(hooks._step(tensordict))
        self._tick()
        self._complete(data, True)
        return data

    def step_and_reset(self, hooks: BackendHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor] = ()
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        facts, fresh = self.facts, None
        if facts.fused_reset:
            ends = None if facts.limit is None else facts.limit.reached(self.count, ahead=1)
            raw, fresh, mask = hooks._step_reset(tensordict, ends)
        else:
            raw = hooks._step(tensordict)
        data = self._batched(raw)
        root = next_root(data, tensordict, facts.keys["reward"], facts.keys["action"])
        self._tick()
        self._complete(data, True, root)
        if fresh is None:
            mask = root.get("done")
        if mask.numpy().any() if mask.is_cpu else bool(mask.any()):  # NumPy's any is the cheaper call on the CPU
            mask = mask.reshape(facts.num_envs)
            root = merge_rows(root, self.reset(hooks, mask, fresh), mask)
        return data, root
