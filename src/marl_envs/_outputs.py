"""What a step and a reset produce, written once, and the executor ``EnvBase`` uses by default.

The rules:

- **Truncation** (``TimeLimit``): an env whose step count reaches ``max_steps`` is ``truncated``.
- **Done entries** (``DonePlan``): at every done level (the root, and each group with its own done entries)
  ``done = terminated | truncated``; a group without its own ``terminated`` reads the root's, a level without its
  own ``truncated`` reads the time limit (or False), and a level's own ``truncated`` is or-ed with the limit.
  The plan is a list of operations on the rows of one bool *block* (one row per bool column, env index along the
  columns), made once per output and run by ``fill``; every done entry is a view of its rows.
- **The next root** (``next_root``): a step's outputs without the rewards, plus the actions taken.
- **The reset merge** (``merge_rows``): envs reset take the reset's entries, the others keep theirs.

An env's *executor* (``EnvBase._outputs``) turns its backend's raw outputs into TensorDicts by these rules.
``TensorDictOutputs`` is the default, for backends whose ``_step`` / ``_reset`` return TensorDicts (VMAS,
PettingZoo, a user's env): their ``terminated`` / ``truncated`` entries are copied into the block, the plan
fills it, the done entries are cut from it. The JAX families have a faster executor of the same plans over their
one float buffer (``marl_envs.backends.jax``), chosen when the env is built.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

if TYPE_CHECKING:
    from ._env import EnvBase

__all__ = [
    "DonePlan", "Outputs", "RowView", "StepData", "TensorDictOutputs", "TimeLimit", "Tree", "block_device", "cut_rows",
    "done_of", "merge_rows", "new_block", "next_root", "row_view", "set_fitted", "unchecked_nested",
    "unchecked_tensordict",
]

Key = tuple[str, ...]
Block = "np.ndarray | torch.Tensor"  # (rows, B) bool: NumPy on the CPU, torch on a device


# ------------------------------------------------------------------------------------------------------
# Unchecked TensorDicts: the outputs are built to fit, so TensorDict's per-leaf checks are skipped
# ------------------------------------------------------------------------------------------------------
# TensorDict's constructor checks every leaf's batch dims and device; its unchecked twin does not. Private in
# tensordict 0.14 and 0.15: the checked one is used if it goes away.
_new_unsafe = getattr(TensorDict, "_new_unsafe", None)
# ``TensorDict.set`` validates the value; its string-key setter can skip that. Private in tensordict 0.14 and 0.15
# (same keywords), as is the dim-names test: ``set`` is used if either goes.
_set_str = getattr(TensorDict, "_set_str", None)
_has_names = getattr(TensorDict, "_has_names", None)


def unchecked_tensordict(source: Mapping[str, torch.Tensor | TensorDict], batch_size: torch.Size,
                         device: torch.device) -> TensorDict:
    """``TensorDict(source, batch_size, device)`` without its checks: for data the caller built to fit
    (every leaf on ``device``, leading dims ``batch_size``; string keys, nested TensorDicts built the same way)."""
    if _new_unsafe is None:
        return TensorDict(source, batch_size=batch_size, device=device)
    return _new_unsafe(source, batch_size=batch_size, device=device)


def unchecked_nested(source: Mapping[str, object], batch_size: torch.Size | tuple[int, ...],
                     device: torch.device) -> TensorDict:
    """:func:`unchecked_tensordict` of a nested ``dict`` of tensors: each inner ``dict`` becomes a TensorDict of
    the same ``batch_size`` (the caller built every leaf to fit)."""
    return unchecked_tensordict({key: unchecked_nested(value, batch_size, device) if isinstance(value, dict)
                                 else value for key, value in source.items()}, torch.Size(batch_size), device)


def set_fitted(tensordict: TensorDict, key: str, value: TensorDict, device: torch.device) -> None:
    """``tensordict.set(key, value)``, unchecked where that is what ``set`` would do: a plain TensorDict on
    ``device`` without dim names, given a TensorDict ``value`` of the same batch size on ``device`` (validation
    would leave it as it is)."""
    if (_set_str is not None and _has_names is not None and type(tensordict) is TensorDict
            and type(value) is TensorDict and tensordict.device == device and value.device == device
            and value.batch_size == tensordict.batch_size and not _has_names(tensordict)):
        try:
            tensordict._set_str(key, value, inplace=False, validated=True)
            return
        except TypeError:  # another signature: the public way
            pass
    tensordict.set(key, value)


class Tree:
    """Builds the nested TensorDict of ``keys`` from a list of leaves in the same order, unchecked.

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


# ------------------------------------------------------------------------------------------------------
# The rules
# ------------------------------------------------------------------------------------------------------
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

    def fill(self, block: Block, count: np.ndarray | torch.Tensor | None) -> None:
        """Run the plan on ``block`` (its backend rows set), ``count`` the per-env step counts (for the limit;
        NumPy for a NumPy block)."""
        numpy = isinstance(block, np.ndarray)
        for op in self.ops:
            if op[0] == "done":
                if numpy:
                    done_of(block[op[1]], block[op[2]], out=block[op[3]])
                else:
                    block[op[3]] = done_of(block[op[1]], block[op[2]])
            elif op[0] == "or":  # a level's own truncation or the time limit
                if numpy:
                    np.logical_or(block[op[1]], block[op[2]], out=block[op[3]])
                else:
                    block[op[3]] = block[op[1]] | block[op[2]]
            elif op[0] == "limit":
                if numpy:
                    self.limit.reached(count, out=block[op[1]])
                else:
                    block[op[1]] = self.limit.reached(count)
            else:
                block[op[1]] = False


def next_root(data: TensorDictBase, tensordict: TensorDictBase, rewards: Sequence, actions: Sequence
              ) -> TensorDictBase:
    """The root data of the step after the one that read ``tensordict`` and gave ``data``: ``data`` without the
    ``rewards`` keys, plus the ``actions`` keys of ``tensordict``."""
    root = data.exclude(*rewards)
    for key in actions:
        root.set(key, tensordict.get(key))
    return root


def merge_rows(tensordict: TensorDictBase, result: TensorDictBase, mask: torch.Tensor | None) -> TensorDictBase:
    """A TensorDict of ``tensordict``'s entries, with ``result``'s where ``mask`` ``(B,)`` is set (all of them:
    None); entries only in ``result`` are added whole. ``tensordict``'s containers are not written to: an
    ``exclude`` (the next root of a step) shares the step's sub-TensorDicts, whose terminal data must stay."""
    tensordict = tensordict.clone(recurse=False)
    present = set(tensordict.keys(True, True))
    for key, value in result.items(True, True):
        if mask is not None and key in present:
            value = torch.where(mask.view(-1, *([1] * (value.ndim - 1))), value, tensordict.get(key))
        tensordict.set(key, value)
    return tensordict


# ------------------------------------------------------------------------------------------------------
# Executors
# ------------------------------------------------------------------------------------------------------
@dataclass
class StepData:
    """One step's outputs as an executor holds them between ``step`` and ``finish`` (an executor may add fields).

    Attributes:
        data: the TensorDict written to ``"next"`` (its done entries set by ``finish``).
        block: the bool block behind its bool entries, for an executor that keeps one from ``step`` on.
    """

    data: TensorDictBase
    block: Any = None


class Outputs:
    """The executor of an env's output rules: the one path from a backend's raw outputs to the env's data.

    ``EnvBase`` calls, per step: ``step(raw)`` on what ``_step`` returned; ``next_root(step, tensordict)`` (in
    ``step_and_maybe_reset``); ``finish(step, next_root)`` once the step is counted; then, for envs that are done,
    ``merge_reset(step, next_root, mask, raw_reset)``. ``reset(raw)`` turns a ``_reset`` output into data.
    """

    def __init__(self, env: EnvBase):
        self._env = weakref.ref(env)  # the env holds its executor: no cycle, so a dropped env is freed at once

    @property
    def env(self) -> EnvBase:
        return self._env()

    def refresh(self) -> None:
        """The env's keys, specs or ``max_steps`` changed: plans made from them are out of date."""

    def step(self, raw: Any) -> StepData:
        raise NotImplementedError

    def finish(self, step: StepData, next_root: TensorDictBase | None = None) -> None:
        raise NotImplementedError

    def next_root(self, step: StepData, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError

    def reset(self, raw: Any) -> TensorDictBase:
        raise NotImplementedError

    def merge_reset(self, step: StepData, next_root: TensorDictBase, mask: torch.Tensor, raw: Any) -> TensorDictBase:
        """``next_root`` with the envs ``mask`` selects replaced by ``raw`` (their reset's output)."""
        return merge_rows(next_root, self.reset(raw), mask)

    def _count(self, block: Block) -> np.ndarray | torch.Tensor:
        """The env's step counts in ``block``'s kind (a ``(1, B)`` NumPy view of them for a NumPy block)."""
        env = self.env
        if isinstance(block, np.ndarray) and env._count_numpy is not None:
            return env._count_numpy[None]
        return env._step_count


class TensorDictOutputs(Outputs):
    """The executor of backends whose ``_step`` and ``_reset`` return TensorDicts (see the module docstring).

    A plan is made for each set of done entries an output gives (a backend gives the same set every step, so
    one or two are made) and kept until the env's keys change.
    """

    def __init__(self, env: EnvBase):
        super().__init__(env)
        self.block_device = block_device(env.device)
        self._plans: dict[tuple[bool, tuple], tuple[DonePlan, list[tuple[Key, slice]]]] = {}

    def refresh(self) -> None:
        self._plans.clear()

    def _plan(self, data: TensorDictBase, step: bool) -> tuple[DonePlan, list[tuple[Key, slice]]]:
        env = self.env
        given = tuple(key for key in env._keys["done"]
                      if (key if isinstance(key, str) else key[-1]) != "done" and data.get(key, None) is not None)
        plan = self._plans.get((step, given))
        if plan is None:
            rows, width = {}, 0
            for key in given:
                n = int(np.prod(env._done_levels[key[:-1] if isinstance(key, tuple) else ()][1:]))
                rows[(key,) if isinstance(key, str) else key] = slice(width, width + n)
                width += n
            done = DonePlan(env._done_levels, rows, width, env._limit if step else None)
            plan = self._plans[(step, given)] = (done, list(zip(given, rows.values())))
        return plan

    def _complete(self, data: TensorDictBase, step: bool, next_root: TensorDictBase | None = None) -> None:
        """Set ``data``'s done entries of every level (and ``next_root``'s) by the plan of the entries it gives."""
        env = self.env
        plan, given = self._plan(data, step)
        block = new_block(plan.width, env.num_envs, self.block_device)
        numpy = isinstance(block, np.ndarray)
        for key, rows in given:
            value = data.get(key).reshape(env.num_envs, -1).T
            block[rows] = value.numpy() if numpy else value
        plan.fill(block, self._count(block))
        for key, view in plan.entries:
            value = cut_rows(block, view)
            data.set(key, value)
            if next_root is not None:
                next_root.set(key, value)

    def _batched(self, data: TensorDictBase) -> TensorDictBase:
        """Give ``data``'s group entries their ``(B, n_agents)`` batch (a backend may return them with ``(B,)``)."""
        for group, shape in self.env._group_shapes.items():
            sub = data.get(group, None)
            if sub is not None and sub.batch_size != shape:
                sub.batch_size = shape
        return data

    def step(self, raw: TensorDictBase) -> StepData:
        return StepData(self._batched(raw))

    def finish(self, step: StepData, next_root: TensorDictBase | None = None) -> None:
        self._complete(step.data, True, next_root)

    def next_root(self, step: StepData, tensordict: TensorDictBase) -> TensorDictBase:
        return next_root(step.data, tensordict, self.env._keys["reward"], self.env._keys["action"])

    def reset(self, raw: TensorDictBase) -> TensorDictBase:
        data = self._batched(raw)
        self._complete(data, False)
        return data
