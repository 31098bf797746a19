"""What a step and a reset produce, each rule written once (for NumPy, torch and JAX arrays).

- **Truncation** (``TimeLimit``): an env whose step count reaches ``max_steps`` is ``truncated``.
- **Done entries** (``DonePlan``): at every done level (the root, and each group with its own done entries)
  ``done = terminated | truncated``; a group without its own ``terminated`` reads the root's, a level without its
  own ``truncated`` reads the time limit (or False), and a level's own ``truncated`` is or-ed with the limit.
  The plan is a list of operations on the rows of one bool *block* (one row per bool column, env index along the
  columns), made once per output and run by ``fill``, the one interpreter of the plan for NumPy, torch and JAX
  blocks; every done entry is a view of its rows.
- **The next root** (``next_root``): a step's outputs without the rewards, plus the actions taken.
- **The reset merge** (``merge_rows``, by entry ``where_rows``): envs reset take the reset's entries, the others
  keep theirs.

The executors (``marl_envs._core.executor``, ``marl_envs.backends.jax``) apply them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from .tensordicts import read_entry, set_entry

__all__ = ["Block", "DonePlan", "RowView", "TimeLimit", "block_device", "cut_rows", "done_of", "merge_rows",
           "new_block", "next_root", "row_view", "where_rows"]

Key = tuple[str, ...]
Block = "np.ndarray | torch.Tensor"  # (rows, B) bool: NumPy on the CPU, torch on a device


def done_of(terminated: Any, truncated: Any, out: np.ndarray | None = None) -> Any:
    """The done rule, ``done = terminated | truncated``, of NumPy, torch or JAX bool arrays (NumPy: into ``out``
    if given). Also where a backend decides inside its simulator which envs a fused step resets."""
    if out is not None:
        return np.logical_or(terminated, truncated, out=out)
    return terminated | truncated


class TimeLimit:
    """``max_steps`` truncation: an env is truncated once its step count reaches ``max_steps``."""

    def __init__(self, max_steps: int):
        self.max_steps = max_steps

    def reached(self, count: np.ndarray | torch.Tensor, *, ahead: int = 0, out: np.ndarray | None = None
                ) -> np.ndarray | torch.Tensor:
        """Whether envs with step counts ``count`` are at the limit ``ahead`` steps from now (NumPy: into ``out``
        if given)."""
        if out is not None:
            return np.greater_equal(count, self.max_steps - ahead, out=out)
        return count >= self.max_steps - ahead


def block_device(device: torch.device) -> torch.device | None:
    """Where an env on ``device`` keeps its bool blocks: None (NumPy) on the CPU, where NumPy's calls on small
    arrays are the cheaper ones, else torch on ``device``."""
    return None if device.type == "cpu" else device


def new_block(rows: int, batch: int, device: torch.device | None) -> Block:
    """An empty ``(rows, batch)`` bool block: NumPy (``device`` None), or torch on ``device``. Stored row by row,
    so that each entry's rows (what the plan's operations read and write) are contiguous."""
    if device is None:
        return np.empty((rows, batch), dtype=bool)
    return torch.empty((rows, batch), dtype=torch.bool, device=device)


RowView = tuple[slice, tuple[int, ...], "tuple[int, ...] | None"]  # (rows, their view's shape, broadcast shape)


def row_view(rows: slice, shape: Sequence[int]) -> RowView:
    """How ``cut_rows`` reads the entry of ``shape`` ``(B, ...)`` held by ``rows`` of a block, worked out once: a
    single row read by a wider entry (a group reading the root's ``terminated``) is broadcast to it."""
    if rows.stop - rows.start == int(np.prod(shape[1:])):
        return rows, tuple(shape), None
    return rows, (shape[0], *([1] * (len(shape) - 1))), tuple(shape)


def cut_rows(block: Block, view: RowView) -> torch.Tensor:
    """The entry ``view`` (``row_view``) of ``block``, as a tensor view of it."""
    rows, shape, broadcast = view
    out = torch.from_numpy(block[rows].T.reshape(shape)) if isinstance(block, np.ndarray) \
        else block[rows].T.reshape(shape)
    return out if broadcast is None else out.expand(broadcast)


class DonePlan:
    """The done entries of every done level of one output (a step's, or a reset's: ``limit=None``), as operations
    on the rows of a bool block (see the module docstring).

    Args:
        levels: done level prefix (``()`` for the root, ``(group,)``) -> the shape of its done entries.
        given: the block rows of the bool entries the backend gives (``terminated`` / ``truncated`` of any
            level among them); the plan's own rows follow ``width``.
        width: the rows the backend's entries use.
        limit: the time limit of a step, or None.

    Attributes:
        entries: ``(key, row_view)`` of every done entry (``terminated``, ``truncated``, ``done`` of each level).
        width: the block's rows in all.
    """

    def __init__(self, levels: Mapping[Key, Sequence[int]], given: Mapping[Key, slice], width: int,
                 limit: TimeLimit | None):
        self.limit = limit
        self.ops: list[tuple] = []  # ("limit", rows) | ("zero", rows) | ("or" | "done", a, b, out)
        self.entries: list[tuple[Key, RowView]] = []
        shared: dict[str, slice] = {}

        def rows(n: int) -> slice:
            nonlocal width
            width += n
            return slice(width - n, width)

        def one(name: str) -> slice:  # a row computed once for every level that reads it
            if name not in shared:
                shared[name] = rows(1)
                self.ops.append((name, shared[name]))
            return shared[name]

        root_terminated = None
        for prefix, shape in levels.items():
            keys = [(*prefix, name) for name in ("terminated", "truncated", "done")]
            terminated = given.get(keys[0])
            if terminated is None:  # a group without its own ends reads the root's
                terminated = root_terminated if prefix else one("zero")
            truncated = given.get(keys[1])
            if truncated is None:
                truncated = one("zero") if limit is None else one("limit")
            elif limit is not None:
                self.ops.append(("or", truncated, one("limit"), truncated))
            done = rows(int(np.prod(shape[1:])))
            self.ops.append(("done", terminated, truncated, done))
            if not prefix:
                root_terminated = terminated
            self.entries += [(key, row_view(source, shape)) for key, source in zip(keys, (terminated, truncated, done))]
        self.width = width

    def fill(self, block: Any, reached: Any, assign: Any = None) -> Any:
        """Run the plan on ``block`` (its backend rows set) and return it; ``reached``: whether each env is at
        the time limit (a row, read only if the plan has a limit).

        The one interpreter of the plan, for NumPy, torch and JAX blocks: ``assign(block, rows, value)`` writes
        rows and returns the block (default: in place, ``block[rows] = value``; JAX: ``block.at[rows].set``).
        """
        assign = assign or _assign
        for op in self.ops:
            if op[0] in ("done", "or"):  # done = terminated | truncated; a level's own truncation or the limit
                block = assign(block, op[3], done_of(block[op[1]], block[op[2]]))
            elif op[0] == "limit":
                block = assign(block, op[1], reached)
            else:
                block = assign(block, op[1], False)
        return block


def _assign(block: Any, rows: slice, value: Any) -> Any:
    block[rows] = value
    return block


def next_root(data: TensorDictBase, tensordict: TensorDictBase, rewards: Sequence, actions: Sequence
              ) -> TensorDictBase:
    """The root data of the step after the one that read ``tensordict`` and gave ``data``: ``data`` without the
    ``rewards`` keys, plus the ``actions`` keys of ``tensordict``."""
    root = data.exclude(*rewards)
    for key in actions:
        value = read_entry(tensordict, key)
        set_entry(root, key, tensordict.get(key) if value is None else value)  # get: the KeyError of a missing one
    return root


def merge_rows(tensordict: TensorDictBase, result: TensorDictBase, mask: torch.Tensor | None) -> TensorDictBase:
    """A TensorDict of ``tensordict``'s entries, with ``result``'s where ``mask`` ``(B,)`` is set (all of them:
    None); entries only in ``result`` are added whole. ``tensordict``'s containers are not written to: an
    ``exclude`` (the next root of a step) shares the step's sub-TensorDicts, whose terminal data must stay."""
    tensordict = tensordict.clone(recurse=False)
    present = set(tensordict.keys(True, True))
    for key, value in result.items(True, True):
        if mask is not None and key in present:
            value = where_rows(mask, value, tensordict.get(key))
        tensordict.set(key, value)
    return tensordict


def where_rows(rows: Any, new: Any, old: Any) -> Any:
    """``new``'s rows where ``rows`` ``(B,)`` is set, ``old``'s elsewhere: the merge by env of two torch tensors or
    two JAX arrays of any trailing shape (a reset's data into a step's, a fresh state into a carried one). ``rows``
    may have the shape of a batch of more dims (or none), which the arrays then begin with."""
    shape = tuple(rows.shape) + (1,) * (new.ndim - rows.ndim)
    if isinstance(new, torch.Tensor):
        return torch.where(rows.reshape(shape), new, old)
    import jax.numpy as jnp  # only JAX arrays come here, so JAX is imported already

    return jnp.where(rows.reshape(shape), new, old)
