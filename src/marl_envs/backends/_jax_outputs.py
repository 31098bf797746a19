"""From the JAX core's float buffer to the env's TensorDicts: the per-call work, worked out once per layout.

A JAX-family env gets every output of a reset or a step as one float32 ``(B, K)`` buffer (``_jax_core``). An
``Outputs`` plan, made once from the env's column layout, its done levels and ``max_steps``, turns such a buffer
into the TensorDict of ``reset`` or of ``"next"`` (and the next root data of ``step_and_maybe_reset``) with as
little per-call Python as it can: it runs every step, and on a CPU with a small batch it is the cost users pay
on top of JAX.

- Float entries are views of the buffer (on the CPU NumPy views: cutting them costs ~1 us an entry, torch
  indexing ~5 us).
- Every bool entry lives in one bool block: the layout's bool columns (stored as 0 / 1) compared to 0.5 in one
  call, then, for a step, the done entries of every done level computed column-wise as
  ``EnvBase._complete_done`` does: ``max_steps`` truncation, ``done = terminated | truncated``, a group without
  its own ends reading the root's (a view, not a copy).
- TensorDicts are built unchecked along a nesting worked out once (``Tree``): every leaf fits by construction.

``fill`` does the block's work; a caller may build the TensorDicts over a buffer JAX is still computing and fill
them once it is done (the CPU overlap of ``JaxEnvBase``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from .._fast import unchecked_tensordict

__all__ = ["Outputs", "Tree"]

Key = tuple[str, ...]


class Tree:
    """Builds the nested TensorDict of ``keys`` from a list of leaves in the same order.

    A top-level name with nested keys becomes a sub-TensorDict of batch ``batches[name]`` (a group's
    ``(B, n_agents)``), or ``batch`` when the name is no group; deeper levels keep their parent's batch.
    """

    def __init__(self, keys: Sequence[Key], batch: torch.Size, device: torch.device,
                 batches: Mapping[str, torch.Size] | None = None):
        self.batch, self.device = batch, device
        self.leaves: list[tuple[str, int]] = []
        nested: dict[str, list[tuple[Key, int]]] = {}
        for index, key in enumerate(keys):
            if len(key) == 1:
                self.leaves.append((key[0], index))
            else:
                nested.setdefault(key[0], []).append((key[1:], index))
        self.subtrees: list[tuple[str, Tree, list[int]]] = []
        for name, entries in nested.items():
            inner = (batches or {}).get(name, batch)
            self.subtrees.append((name, Tree([k for k, _ in entries], inner, device), [i for _, i in entries]))

    def __call__(self, leaves: Sequence[Any]) -> TensorDict:
        source = {name: leaves[i] for name, i in self.leaves}
        for name, tree, indices in self.subtrees:
            source[name] = tree([leaves[i] for i in indices])
        return unchecked_tensordict(source, self.batch, self.device)


class Outputs:
    """The plan of one layout (reset or step) of a JAX-family env.

    Args:
        layout: ``(key, columns, batched shape, torch dtype)`` of every entry of the buffer, in column order.
        batch: the env's batch ``(B,)``; device: its device.
        batches: group name -> its ``(B, n_agents)`` batch.
        done_levels: for a step, ``EnvBase._done_levels`` (level prefix -> shape of its done entries); None for
            a reset (its done entries are the base class's).
        max_steps: the truncation limit of a step (read against ``count``), or None.
        count: the env's per-env step counts, ``(B,)`` int64, updated in place.
        rewards: keys left out of the next root data; actions: keys added to it (``next_root``).
    """

    def __init__(self, layout: Sequence[tuple[Key, slice, tuple[int, ...], Any]], *, batch: torch.Size,
                 device: torch.device, batches: Mapping[str, torch.Size], done_levels: Mapping[Key, torch.Size] | None,
                 max_steps: int | None = None, count: Any = None, rewards: Sequence[Key] = (),
                 actions: Sequence[Key] = ()):
        B = batch[0]
        self.max_steps = max_steps
        self.cpu = device.type == "cpu"
        self.count = None if count is None else count.unsqueeze(0)  # (1, B) views: they count as the env counts
        self.count_numpy = None if count is None or not self.cpu else self.count.numpy()
        keys: list[Key] = []
        # per entry: (0, buffer columns, shape) | (1, block rows, shape) | (2, block row, lead shape, shape)
        self.sources: list[tuple] = []
        block: dict[Key, slice] = {}
        width = 0

        def columns(n: int) -> slice:
            nonlocal width
            width += n
            return slice(width - n, width)

        compared = []
        for key, cols, shape, dtype in layout:
            keys.append(key)
            if dtype is torch.bool:
                compared.extend(range(cols.start, cols.stop))
                block[key] = columns(cols.stop - cols.start)
                self.sources.append((1, block[key], tuple(shape)))
            else:
                self.sources.append((0, cols, tuple(shape)))
        self.compared = len(compared)
        self.compared_columns = compared  # the buffer column behind each of the block's first rows
        self._reset_bools: dict[int, tuple[int, Any]] = {}  # reset width -> (its bool rows, their columns)
        start = compared[0] if compared else 0
        self.source = (slice(start, start + len(compared)) if compared == list(range(start, start + len(compared)))
                       else compared)
        self.ops: list[tuple] = []  # ("limit", out) | ("or", a, b, out) | ("zero", out), on block columns

        def alias(key: Key, column: slice, shape: torch.Size) -> None:  # a view of a (B, 1) column
            keys.append(key)
            self.sources.append((2, column, (B, *([1] * (len(shape) - 1))), tuple(shape)))

        if done_levels is not None:
            limit = zeros = None
            if max_steps is not None:
                limit = columns(1)
                self.ops.append(("limit", limit))
            for prefix, shape in done_levels.items():
                n = int(np.prod(shape[1:]))
                term, trunc = block.get((*prefix, "terminated")), block.get((*prefix, "truncated"))
                if term is None:  # a group without its own ends: the root's
                    term = block[("terminated",)]
                    alias((*prefix, "terminated"), term, shape)
                if prefix and trunc is None:  # a group's own truncation is the max_steps limit only
                    if limit is None and zeros is None:
                        zeros = columns(1)
                        self.ops.append(("zero", zeros))
                    trunc = zeros if limit is None else limit
                    alias((*prefix, "truncated"), trunc, shape)
                elif limit is not None:  # the core's truncation, or the limit
                    self.ops.append(("or", trunc, limit, trunc))
                done = block[(*prefix, "done")] = columns(n)
                self.ops.append(("or", term, trunc, done))
                keys.append((*prefix, "done"))
                self.sources.append((1, done, tuple(shape)))
        self.width = width
        self.B = B
        self.keys = keys
        self.tree = Tree(keys, batch, device, batches)
        skip = set(rewards)
        self.kept = [i for i, key in enumerate(keys) if key not in skip]
        self.root_tree = Tree([keys[i] for i in self.kept] + list(actions), batch, device, batches)

    def leaves(self, buffer: np.ndarray | torch.Tensor) -> tuple[list[torch.Tensor], Any]:
        """The output tensors of ``buffer`` (in ``keys`` order) and the bool block behind the bool ones (empty
        until ``fill``). ``buffer``: a NumPy array on the CPU; a tensor on a device, or one carrying gradients.

        On the CPU the block is a NumPy array, also under a tensor carrying gradients (only its float entries
        need autograd views: a NumPy call costs ~1 us here, a torch one ~5 us). The block is stored column by
        column (``(width, B)``): each column the fills read or write is contiguous (a NumPy call on a strided
        column costs ~4x one on a contiguous one here)."""
        if self.cpu:
            block = np.empty((self.width, self.B), dtype=bool)
        else:
            block = torch.empty((self.width, self.B), dtype=torch.bool, device=buffer.device)
        return self._cut(buffer, block, range(len(self.sources))), block

    def _cut(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor, indices) -> list:
        """The entries ``indices`` of ``buffer`` (floats) and ``block`` (bools), as tensors."""
        from_numpy, numpy, cpu = torch.from_numpy, isinstance(buffer, np.ndarray), isinstance(block, np.ndarray)
        out = []
        for i in indices:
            kind, columns, shape, *wide = self.sources[i]
            if kind == 0:
                out.append(from_numpy(buffer[:, columns].reshape(shape)) if numpy else buffer[:, columns].view(shape))
                continue
            view = from_numpy(block[columns].T.reshape(shape)) if cpu else block[columns].T.view(shape)
            out.append(view if kind == 1 else view.expand(wide[0]))
        return out

    def fill(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor) -> None:
        """Compute the bool block of ``buffer`` (which must hold its values now)."""
        self._compare(buffer, block, self.compared, self.source)
        if isinstance(block, np.ndarray):
            for op in self.ops:
                if op[0] == "or":
                    np.logical_or(block[op[1]], block[op[2]], out=block[op[3]])
                elif op[0] == "limit":
                    np.greater_equal(self.count_numpy, self.max_steps, out=block[op[1]])
                else:
                    block[op[1]] = False
            return
        for op in self.ops:
            if op[0] == "or":
                block[op[3]] = block[op[1]] | block[op[2]]
            elif op[0] == "limit":
                block[op[1]] = self.count >= self.max_steps
            else:
                block[op[1]] = False

    @staticmethod
    def _compare(buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor, rows: int, columns) -> None:
        """The block's first ``rows`` rows: ``buffer``'s ``columns`` (stored as 0 / 1) compared to 0.5."""
        if isinstance(block, np.ndarray):
            values = buffer if isinstance(buffer, np.ndarray) else buffer.detach().numpy()
            np.greater(values[:, columns].T, 0.5, out=block[:rows])
        else:
            block[:rows] = buffer.detach()[:, columns].T > 0.5

    def next_root(self, leaves: Sequence[torch.Tensor], actions: Sequence[torch.Tensor]) -> TensorDict:
        """The next root data: these leaves without rewards, plus the actions taken."""
        return self.root_tree([*(leaves[i] for i in self.kept), *actions])

    def reset_root(self, buffer: np.ndarray | torch.Tensor, block: np.ndarray | torch.Tensor,
                   fresh: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor,
                   actions: Sequence[torch.Tensor]) -> TensorDict:
        """The next root data of a step (``buffer``, its filled ``block``) whose envs ``mask`` were then reset:
        ``next_root``'s, except that those envs hold the reset's entries (``fresh``: a reset buffer, whose columns
        are a step buffer's first ones) and False in every done entry. Two array ops, whatever the layout (the
        same outcome as ``EnvBase._reset_masked``'s ``torch.where`` per entry)."""
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
            self._compare(merged, kept, rows, columns)
        return self.root_tree([*self._cut(merged, kept, self.kept), *actions])
