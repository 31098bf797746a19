"""What a step and a reset produce, written once, and the executor ``EnvBase`` uses by default.

The rules:

- **Truncation** (``TimeLimit``): an env whose step count reaches ``max_steps`` is ``truncated``.
- **Done entries** (``DonePlan``): at every done level (the root, and each group with its own done entries)
  ``done = terminated | truncated``; a group without its own ``terminated`` reads the root's, a level without its
  own ``truncated`` reads the time limit (or False), and a level's own ``truncated`` is or-ed with the limit.
  The plan is a list of operations on the rows of one bool *block* (one row per bool column, env index along the
  columns), made once per output and run by ``fill``, the one interpreter of the plan for NumPy, torch and JAX
  blocks; every done entry is a view of its rows.
- **The next root** (``next_root``): a step's outputs without the rewards, plus the actions taken.
- **The reset merge** (``merge_rows``): envs reset take the reset's entries, the others keep theirs.

An env's *executor* (``EnvBase._outputs``) runs its backend and turns the outputs into TensorDicts by these rules.
``TensorDictOutputs`` is the default, for backends whose ``_step`` / ``_reset`` return TensorDicts (VMAS,
PettingZoo, a user's env): their ``terminated`` / ``truncated`` entries are copied into the block, the plan
fills it, the done entries are cut from it. The JAX families' executor (``marl_envs.backends.jax``), chosen when
the env is built, runs the same plans inside each compiled step.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

if TYPE_CHECKING:
    from .env import EnvBase

__all__ = [
    "DonePlan", "Outputs", "RowView", "TensorDictOutputs", "TimeLimit", "Tree", "block_device", "cut_rows",
    "done_of", "merge_rows", "new_block", "next_root", "picker", "read_entry", "row_view", "set_fitted",
    "unchecked_nested", "unchecked_tensordict",
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
# ``TensorDict.get`` unravels the key before it reads; its string- and tuple-key readers do not. Private in tensordict
# 0.11 to 0.15 (same arguments): ``get`` is used if either goes.
_get_str = getattr(TensorDict, "_get_str", None)
_get_tuple = getattr(TensorDict, "_get_tuple", None)


def unchecked_tensordict(source: Mapping[str, torch.Tensor | TensorDict], batch_size: torch.Size,
                         device: torch.device) -> TensorDict:
    """``TensorDict(source, batch_size, device)`` without its checks: for data the caller built to fit
    (every leaf on ``device``, leading dims ``batch_size``; string keys, nested TensorDicts built the same way, no
    ``dict`` values: ``nested=False`` takes them as they are)."""
    if _new_unsafe is None:
        return TensorDict(source, batch_size=batch_size, device=device)
    return _new_unsafe(source, batch_size=batch_size, device=device, nested=False)


def read_entry(tensordict: TensorDictBase, key: str | tuple[str, ...]) -> Any:
    """``tensordict.get(key, None)`` of a key in its plain form (a string, or a flat tuple of strings): on a plain
    TensorDict, its key reader without the unravelling (a fifth of the cost)."""
    if type(tensordict) is TensorDict and _get_tuple is not None and _get_str is not None:
        return _get_str(tensordict, key, None) if type(key) is str else _get_tuple(tensordict, key, None)
    return tensordict.get(key, None)


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


def picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """The reader of the items ``indices`` of a list, in that order, as one C call (an ``operator.itemgetter``)."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    # an itemgetter of one index gives the item itself: a slice gives it in a list (and none, an empty one)
    return operator.itemgetter(slice(indices[0], indices[0] + 1) if indices else slice(0, 0))


class Tree:
    """Builds the nested TensorDict of ``keys`` from a list of leaves (``keys[i]`` at ``leaves[first + i]``),
    unchecked.

    A top-level name with nested keys becomes a sub-TensorDict of batch ``batches[name]`` (a group's
    ``(B, n_agents)``), or ``batch`` when the name is no group; deeper levels keep their parent's batch.
    """

    def __init__(self, keys: Sequence[Key], batch: torch.Size, device: torch.device,
                 batches: Mapping[str, torch.Size] | None = None, first: int = 0):
        self.batch, self.device = batch, device
        self.leaves: list[tuple[str, int]] = []
        nested: dict[str, list[tuple[Key, int]]] = {}
        for index, key in enumerate(keys, first):
            if len(key) == 1:
                self.leaves.append((key[0], index))
            else:
                nested.setdefault(key[0], []).append((key[1:], index))
        self.subtrees: list[tuple[str, Tree]] = []
        for name, entries in nested.items():
            inner = Tree([k for k, _ in entries], (batches or {}).get(name, batch), device)
            inner._reindex([i for _, i in entries])
            self.subtrees.append((name, inner))
        self._readers()

    def _reindex(self, indices: Sequence[int]) -> None:
        """Read leaf ``indices[i]`` where this tree read leaf ``i`` (a subtree reads its parent's list)."""
        self.leaves = [(name, indices[i]) for name, i in self.leaves]
        for _, tree in self.subtrees:
            tree._reindex(indices)
        self._readers()

    def _readers(self) -> None:
        """This level's names, and the reader of their leaves from the list (one C call)."""
        self._names = tuple(name for name, _ in self.leaves)
        self._pick = picker([i for _, i in self.leaves])

    def __call__(self, leaves: Sequence[Any]) -> TensorDict:
        source = dict(zip(self._names, self._pick(leaves)))
        for name, tree in self.subtrees:
            source[name] = tree(leaves)
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
class Outputs:
    """The executor of an env's output rules: the one path from its backend to the env's data.

    ``EnvBase`` hands it every reset and step, once the inputs are checked: ``reset(mask)`` returns the data of
    a reset of the envs ``mask`` ``(B,)`` selects (all: None), ``step(tensordict, actions)`` the ``"next"`` data of
    a step (``actions``: the values of ``env.action_keys`` in ``tensordict``, checked), ``step_and_reset(tensordict,
    actions)`` those and the next root data, in which the envs done hold a fresh start. Each executor keeps the
    envs' step counts (the time limit reads them) where its backend runs.

    Attributes:
        deferred_checks: the executor can check action values inside the backend's step, without waiting for
            the device (``EnvBase.validate_actions = "deferred"``).
        deferred_by_default: that is the check ``validate_actions=True`` chooses.
    """

    deferred_checks = False
    deferred_by_default = False

    def __init__(self, env: EnvBase):
        self._env = weakref.ref(env)  # the env holds its executor: no cycle, so a dropped env is freed at once

    @property
    def env(self) -> EnvBase:
        return self._env()

    def refresh(self) -> None:
        """The env's keys, specs, ``max_steps`` or ``validate_actions`` changed: plans made from them are out of
        date."""

    def reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        raise NotImplementedError

    def step(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]) -> TensorDictBase:
        raise NotImplementedError

    def step_and_reset(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        raise NotImplementedError

    def step_counts(self) -> torch.Tensor:
        """Steps since each env's last reset, ``(B,)`` int64 (a copy)."""
        raise NotImplementedError


class TensorDictOutputs(Outputs):
    """The executor of backends whose ``_step`` and ``_reset`` return TensorDicts (see the module docstring).

    A plan is made for each set of done entries an output gives (a backend gives the same set every step, so
    one or two are made) and kept until the env's keys change. ``step_and_reset`` reads on the host whether any
    env is done (one wait on a device): the backend's ``_reset(mask)`` resets the envs the mask selects, and a
    backend that resets envs one by one (VMAS's exact partial reset, PettingZoo's instances) needs their indices.
    """

    def __init__(self, env: EnvBase):
        super().__init__(env)
        self.block_device = block_device(env.device)
        self._plans: dict[tuple[bool, tuple], tuple[DonePlan, list[tuple[Key, slice]]]] = {}
        self.count = torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)  # steps since each reset
        self._count_numpy = self.count.numpy() if env.device.type == "cpu" else None  # a view

    def refresh(self) -> None:
        self._plans.clear()

    def step_counts(self) -> torch.Tensor:
        return self.count.clone()

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
        reached = None
        if plan.limit is not None:
            count = self._count_numpy[None] if numpy and self._count_numpy is not None else self.count
            reached = plan.limit.reached(count)
        plan.fill(block, reached)
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

    def reset(self, mask: torch.Tensor | None, raw: TensorDictBase | None = None) -> TensorDictBase:
        """The data of a reset of the envs ``mask`` selects (``raw``: the backend's output, if it already ran)."""
        self._zero(mask)
        data = self._batched(self.env._reset(mask) if raw is None else raw)
        self._complete(data, False)
        return data

    def step(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor] = ()) -> TensorDictBase:
        data = self._batched(self.env._step(tensordict))
        self._tick()
        self._complete(data, True)
        return data

    def step_and_reset(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor] = ()
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        env, fresh = self.env, None
        if env._fused_reset:
            ends = None if env._limit is None else env._limit.reached(self.count, ahead=1)
            raw, fresh, mask = env._step_reset(tensordict, ends)
        else:
            raw = env._step(tensordict)
        data = self._batched(raw)
        root = next_root(data, tensordict, env._keys["reward"], env._keys["action"])
        self._tick()
        self._complete(data, True, root)
        if fresh is None:
            mask = root.get("done")
        if mask.numpy().any() if mask.is_cpu else bool(mask.any()):  # NumPy's any is the cheaper call on the CPU
            mask = mask.reshape(env.num_envs)
            root = merge_rows(root, self.reset(mask, fresh), mask)
        return data, root
