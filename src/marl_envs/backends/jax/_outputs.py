"""The JAX families' executor of the env's output rules: one float buffer to the env's TensorDicts.

A JAX-family env gets every output of a reset or a step as one float32 ``(B, K)`` buffer (``_core``). A
``BufferPlan``, made once from the env's columns, its done levels and its time limit, turns such a buffer into the
TensorDict of ``reset`` or of ``"next"`` (and the next root data of ``step_and_maybe_reset``) with as little
per-call Python as it can: it runs every step, and on a CPU with a small batch it is the cost users pay on top of
JAX.

- Float entries are views of the buffer (NumPy views on the CPU: NumPy's slicing is the cheaper call there);
  integer entries (Jumanji's grids and counts) are cast copies of their columns.
- Every bool entry lives in one bool block: the layout's bool columns (stored as 0 / 1) compared to 0.5 in one
  call, then the done entries of every level computed by the env's ``DonePlan`` (``marl_envs._outputs``, the
  same plan ``EnvBase``'s default executor runs).
- TensorDicts are built unchecked along a nesting worked out once (``Tree``): every leaf fits by construction.
- A reset after a step is merged into the step's next root data in two array operations (``reset_root``), not
  entry by entry.

``BufferOutputs`` is the executor ``JaxEnvBase`` sets when it is built. Where JAX's CPU dispatch is asynchronous,
the step's TensorDicts are built over an empty buffer while JAX computes (``Pending``), and ``finish`` copies
JAX's result in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from ..._outputs import DonePlan, Outputs, StepData, TimeLimit, Tree, block_device, cut_rows, new_block, row_view

if TYPE_CHECKING:
    from ..._env import EnvBase

__all__ = ["BufferOutputs", "BufferPlan", "BufferStep", "Pending"]

Key = tuple[str, ...]
Column = tuple[Key, slice, tuple[int, ...], Any]  # (key, buffer columns, batched shape, torch dtype)


@dataclass
class Pending:
    """A step JAX is still computing (asynchronous CPU dispatch): ``result`` is copied in by ``finish``."""

    result: Any


@dataclass
class BufferStep(StepData):
    """A step of a JAX-family env: its buffer and the leaves cut from it (``data``'s tensors, in plan order)."""

    buffer: Any = None
    leaves: list | None = None
    pending: Any = None  # JAX's result, until ``finish`` copied it into ``buffer``


class BufferPlan:
    """The plan of one buffer layout (a reset's or a step's) of a JAX-family env.

    Args:
        columns: ``(key, buffer columns, batched shape, torch dtype)`` of every entry of the buffer.
        batch: the env's batch ``(B,)``; device: its device; batches: group name -> its ``(B, n_agents)`` batch.
        levels: the env's done levels (prefix -> shape of their done entries).
        limit: the time limit of a step, or None (a reset's).
        rewards: keys left out of the next root data; actions: keys added to it.
    """

    def __init__(self, columns: Sequence[Column], *, batch: torch.Size, device: torch.device,
                 batches: Mapping[str, torch.Size], levels: Mapping[Key, torch.Size], limit: TimeLimit | None,
                 rewards: Sequence[Key] = (), actions: Sequence[Key] = ()):
        self.B, self.block_device = batch[0], block_device(device)
        keys: list[Key] = []
        # (False, (buffer columns, shape, (NumPy, torch) dtype to cast to or None)) | (True, the block's row_view)
        self.sources: list[tuple[bool, Any]] = []
        given: dict[Key, slice] = {}
        compared: list[int] = []
        for key, cols, shape, dtype in columns:
            keys.append(key)
            if dtype is torch.bool:
                rows = given[key] = slice(len(compared), len(compared) + cols.stop - cols.start)
                compared.extend(range(cols.start, cols.stop))
                self.sources.append((True, row_view(rows, shape)))
            else:  # an integer entry (a Jumanji grid) is cast from the float32 buffer: a copy, exact below 2**24
                cast = None if dtype is torch.float32 else (torch.empty(0, dtype=dtype).numpy().dtype, dtype)
                self.sources.append((False, (cols, tuple(shape), cast)))
        self.casts = [i for i, (is_bool, where) in enumerate(self.sources) if not is_bool and where[2] is not None]
        self.done = DonePlan(levels, given, len(compared), limit)
        for key, view in self.done.entries:
            if key not in given:
                keys.append(key)
                self.sources.append((True, view))
        self.compared_columns = compared  # the buffer column behind each of the block's first rows
        start = compared[0] if compared else 0
        self.source = (slice(start, start + len(compared)) if compared == list(range(start, start + len(compared)))
                       else compared)
        self._reset_bools: dict[int, tuple[int, Any]] = {}  # reset width -> (its bool rows, their columns)
        self.keys = keys
        self.tree = Tree(keys, batch, device, batches)
        skip = set(rewards)
        self.kept = [i for i, key in enumerate(keys) if key not in skip]
        self.root_tree = Tree([keys[i] for i in self.kept] + list(actions), batch, device, batches)

    def leaves(self, buffer: np.ndarray | torch.Tensor) -> tuple[list[torch.Tensor], Any]:
        """The output tensors of ``buffer`` (in ``keys`` order) and the bool block behind the bool ones (empty
        until ``fill``). ``buffer``: a NumPy array on the CPU; a tensor on a device, or one carrying gradients
        (the block stays NumPy on the CPU: only the float entries need autograd's views)."""
        block = new_block(self.done.width, self.B, self.block_device)
        return self._cut(buffer, block, range(len(self.sources))), block

    def _cut(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor, indices) -> list:
        """The entries ``indices`` of ``buffer`` (floats) and ``block`` (bools), as tensors."""
        numpy = isinstance(buffer, np.ndarray)
        out = []
        for i in indices:
            is_bool, where = self.sources[i]
            if is_bool:
                out.append(cut_rows(block, where))
            else:
                cols, shape, cast = where
                value = buffer[:, cols].reshape(shape) if numpy else buffer[:, cols].view(shape)
                if cast is not None:
                    value = value.astype(cast[0]) if numpy else value.to(cast[1])
                out.append(torch.from_numpy(value) if numpy else value)
        return out

    def recast(self, buffer: np.ndarray, leaves: Sequence[torch.Tensor]) -> None:
        """Cast the integer entries of ``leaves`` again from ``buffer`` (a buffer JAX's result was copied into after
        the leaves were cut: its float entries are views, its integer entries copies)."""
        for i in self.casts:
            cols, shape, _ = self.sources[i][1]
            np.copyto(leaves[i].numpy(), buffer[:, cols].reshape(shape), casting="unsafe")

    def fill(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor, count: Any) -> None:
        """Compute the bool block of ``buffer`` (which must hold its values now); ``count``: the env's step
        counts, for the time limit."""
        _compare(buffer, block, len(self.compared_columns), self.source)
        self.done.fill(block, count)

    def next_root(self, leaves: Sequence[torch.Tensor], actions: Sequence[torch.Tensor]) -> TensorDict:
        """The next root data: these leaves without rewards, plus the actions taken."""
        return self.root_tree([*(leaves[i] for i in self.kept), *actions])

    def reset_root(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor,
                   fresh: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor,
                   actions: Sequence[torch.Tensor]) -> TensorDict:
        """The next root data of a step (``buffer``, its filled ``block``) whose envs ``mask`` were then reset:
        ``next_root``'s, except that those envs hold the reset's entries (``fresh``: a reset buffer, whose columns
        are a step buffer's first ones) and False in every done entry. Two array operations whatever the layout,
        with the outcome of ``merge_rows`` over the reset's data."""
        width = fresh.shape[1]
        if width not in self._reset_bools:  # the block's first rows hold the reset's bool entries (action masks)
            rows = sum(1 for c in self.compared_columns if c < width)
            self._reset_bools[width] = (rows, self.compared_columns[:rows])
        rows, columns = self._reset_bools[width]
        if isinstance(buffer, np.ndarray):
            merged = buffer.copy()
            np.copyto(merged[:, :width], fresh, where=mask[:, None])
        else:
            merged = buffer.clone()
            merged[:, :width] = torch.where(mask[:, None], fresh, buffer[:, :width])
        kept = np.logical_and(block, ~mask) if isinstance(block, np.ndarray) else block & ~mask  # done: False there
        if rows:
            _compare(merged, kept, rows, columns)
        return self.root_tree([*self._cut(merged, kept, self.kept), *actions])


def _compare(buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor, rows: int, columns) -> None:
    """The block's first ``rows`` rows: ``buffer``'s ``columns`` (stored as 0 / 1) compared to 0.5."""
    if isinstance(block, np.ndarray):
        values = buffer if isinstance(buffer, np.ndarray) else buffer.detach().numpy()
        np.greater(values[:, columns].T, 0.5, out=block[:rows])
    else:
        block[:rows] = buffer.detach()[:, columns].T > 0.5


class BufferOutputs(Outputs):
    """The executor of a JAX-family env (see the module docstring).

    Args:
        env: the env.
        reset_columns / step_columns: the columns of the core's reset and step buffers.
        actions: the action keys whose values make the core's flat action (added to the next root data).
        merges_resets: merge a reset into the step's buffer (``reset_root``); False where gradients flow
            through the kept envs' entries (the differentiable Brax env), which ``merge_rows`` keeps.
    """

    def __init__(self, env: EnvBase, reset_columns: Sequence[Column], step_columns: Sequence[Column],
                 actions: Sequence[Key], *, merges_resets: bool = True):
        super().__init__(env)
        self.reset_columns, self.step_columns, self.actions = list(reset_columns), list(step_columns), list(actions)
        self.merges_resets = merges_resets
        self.width = step_columns[-1][1].stop
        self.refresh()

    def refresh(self) -> None:
        env = self.env
        batches = {g: torch.Size((env.num_envs, len(m))) for g, m in env.group_map.items()}
        common = {"batch": env.batch_size, "device": env.device, "batches": batches, "levels": env._done_levels}
        rewards = [(k,) if isinstance(k, str) else tuple(k) for k in env.reward_keys]
        self.reset_plan = BufferPlan(self.reset_columns, limit=None, **common)
        self.step_plan = BufferPlan(self.step_columns, limit=env._limit, rewards=rewards, actions=self.actions,
                                    **common)

    def step(self, raw: Any) -> BufferStep:
        pending = None
        if isinstance(raw, Pending):  # the TensorDicts are built over a buffer JAX's result is copied into later
            # zeros, not empty: the integer entries are cast from it now (and again once it holds the result)
            pending, raw = raw.result, np.zeros((self.env.num_envs, self.width), dtype=np.float32)
        leaves, block = self.step_plan.leaves(raw)
        return BufferStep(self.step_plan.tree(leaves), block, buffer=raw, leaves=leaves, pending=pending)

    def finish(self, step: BufferStep, next_root: TensorDictBase | None = None) -> None:
        if step.pending is not None:
            np.copyto(step.buffer, np.asarray(step.pending))  # waits for JAX
            self.step_plan.recast(step.buffer, step.leaves)
            step.pending = None
        self.step_plan.fill(step.buffer, step.block, self._count(step.block))

    def next_root(self, step: BufferStep, tensordict: TensorDictBase) -> TensorDictBase:
        return self.step_plan.next_root(step.leaves, [tensordict.get(k) for k in self.actions])

    def reset(self, raw: np.ndarray | torch.Tensor) -> TensorDictBase:
        leaves, block = self.reset_plan.leaves(raw)
        self.reset_plan.fill(raw, block, None)
        return self.reset_plan.tree(leaves)

    def merge_reset(self, step: BufferStep, next_root: TensorDictBase, mask: torch.Tensor,
                    raw: np.ndarray | torch.Tensor) -> TensorDictBase:
        if not self.merges_resets:
            return super().merge_reset(step, next_root, mask, raw)
        flags = mask.numpy() if isinstance(step.block, np.ndarray) else mask
        return self.step_plan.reset_root(step.buffer, step.block, raw, flags, [next_root.get(k) for k in self.actions])
