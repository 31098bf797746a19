"""The VMAS backend's masked (vectorized) partial reset: the state snapshot and merge, and the narrowed world.

VMAS resets either every env (``reset``) or one index per call (``reset_at``). ``StateSnapshot`` lets the
backend reset any mask of envs with one batched reset: snapshot every tensor reachable from the VMAS env
(world, agents, landmarks, sensors, dynamics, the scenario's own attributes), run one batched reset, then
``merge(mask)`` puts back what the envs not selected had, so they continue exactly as if nothing happened.

The rule that decides what "put back" means:

* a tensor whose first dim is ``num_envs`` is per-env state: rows selected by the mask keep the fresh values,
  the other rows get their old values back (``torch.where``), written in place so aliases stay aliases;
* anything else reachable (Python scalars, tensors without a batch dim, which object a slot points at, the
  membership of lists and dicts) is state shared by every env. A reset of a few envs must not change it (it
  would leak into the envs not reset, as raw VMAS ``reset_at`` does), so it is restored as it was;
* except that an object the reset created afresh in place of an old one of the same type (per-env Gaussians
  rebuilt from new positions) is kept, with its contents merged with the old one's by the same rules.

That reset costs a reset of every env, however few are selected. ``NarrowedWorld`` makes it cost in proportion
to the envs selected: by the same rule, it swaps the selected rows of every per-env tensor in for the tensor and
their number in for the batch size, so that VMAS's batched reset runs on a world of those envs only, then writes
the rows it leaves back into the originals. Where the state or the reset does what such a world cannot hold
(see the class), it puts everything back untouched and the backend takes the snapshot-and-merge way.
"""

from __future__ import annotations

import enum
import types
from typing import Any

import numpy as np
import torch

# Objects of these top-level packages are leaves of the state walk (their internals are not VMAS state).
_FOREIGN_PACKAGES = frozenset(
    {"torch", "numpy", "pyglet", "gym", "gymnasium", "typing", "enum", "abc", "builtins", "functools",
     "collections", "tensordict", "re", "pathlib", "logging", "threading"}
)
_SHARED_1D = frozenset({"_color", "color"})
_SCALARS = (int, float, bool, complex, str, bytes, type(None))
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
           types.LambdaType, torch.nn.Module, torch.device, torch.dtype, torch.Generator, enum.Enum)


# ----------------------------------------------------------------------------------------------------
# State snapshot and merge
# ----------------------------------------------------------------------------------------------------
_WALKABLE: dict[type, bool] = {}  # type -> whether its objects are walked (decided by the type alone)


def _walkable(obj: Any) -> bool:
    walkable = _WALKABLE.get(type(obj))
    if walkable is None:
        walkable = _WALKABLE[type(obj)] = _walkable_type_of(obj)
    return walkable


def _walkable_type_of(obj: Any) -> bool:
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        return True
    if isinstance(obj, (*_OPAQUE, torch.Tensor, np.ndarray)) or not hasattr(obj, "__dict__"):
        return False
    module = type(obj).__module__
    if module.startswith("torch.distributions"):
        return True  # e.g. sampling's per-env Gaussians: plain holders of per-env tensors
    return module.partition(".")[0] not in _FOREIGN_PACKAGES and not module.startswith("vmas.simulator.rendering")


def _members(obj: Any) -> dict | list | tuple | None:
    """The mutable mapping or sequence holding ``obj``'s members (None for sets: membership only)."""
    if isinstance(obj, (dict, list, tuple)):
        return obj
    if isinstance(obj, (set, frozenset)):
        return None
    return vars(obj)


def _walk(roots: list[Any]) -> tuple[list[tuple[Any, dict | list]], set[int]]:
    """Every dict / list / tuple / object ``__dict__`` reachable from ``roots``, each with a shallow copy of its
    members, and the ids of every object reached."""
    containers: list[tuple[Any, dict | list]] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        members = _members(obj)
        if members is None:
            stack.extend(m for m in obj if _walkable(m))
            continue
        copy = dict(members) if isinstance(members, dict) else list(members)
        containers.append((obj, copy))
        stack.extend(value for value in _values(copy) if not isinstance(value, (torch.Tensor, np.ndarray))
                     and _walkable(value))
    return containers, seen


def _values(members: dict | list) -> Any:
    return members.values() if isinstance(members, dict) else members


def _items(members: dict | list) -> Any:
    return members.items() if isinstance(members, dict) else enumerate(members)


def _is_batched(value: torch.Tensor | np.ndarray, key: Any, batch_dim: int) -> bool:
    """Per-env state: the first dim is the batch. An entity's 1-d ``color`` is an RGB triple, whatever
    ``num_envs`` is (a per-env color is ``(num_envs, 3)``)."""
    if key in _SHARED_1D and value.ndim == 1:
        return False
    return value.ndim >= 1 and value.shape[0] == batch_dim


class StateSnapshot:
    """Everything reachable from ``roots`` that a reset could change, taken before a masked reset; ``merge(mask)``
    keeps the rows ``mask`` selects and puts back everything else, by the rule of the module docstring (a slot the
    reset pointed at another existing object, a goal landmark, points back; one it pointed at a fresh object of the
    same type keeps it, its contents merged with the old one's)."""

    def __init__(self, roots: list[Any], batch_dim: int):
        self.batch_dim = batch_dim
        self.members: dict[int, dict | list] = {}  # id(container) -> its members-snapshot
        # id(tensor) -> a copy of its values / its version counter (``containers`` holds each tensor: ids stay unique)
        self.clones: dict[int, torch.Tensor | np.ndarray] = {}
        self.versions: dict[int, int] = {}
        # Live tensors already holding the merge for ``_last_mask``: id -> (tensor, version after the merge).
        self._settled: dict[int, tuple[torch.Tensor, int]] = {}
        self._last_mask: torch.Tensor | None = None
        # (container, members-snapshot) for every dict / list / tuple / object __dict__ reached; ids of all objects
        self.containers, self.seen = _walk(roots)
        for container, copy in self.containers:
            self.members[id(container)] = copy
            for value in _values(copy):
                if isinstance(value, np.ndarray) and id(value) not in self.clones:
                    self.clones[id(value)] = value.copy()
                elif isinstance(value, torch.Tensor) and id(value) not in self.clones:
                    self.clones[id(value)] = value.detach().clone()
                    self.versions[id(value)] = value._version

    def merge(self, mask: torch.Tensor) -> bool:
        """Keep the current values on the rows where ``mask`` is True; restore the snapshot everywhere else.

        Returns:
            Whether any shared state (anything but the rows of per-env tensors) had changed and was restored.
        """
        previous = self._settled if mask is self._last_mask else {}
        self._settled, self._last_mask = {}, mask  # only tensors in place after this pass stay referenced
        merge = _Merge(self, mask, previous)
        for container, old in self.containers:
            merge.members(container, old)
        return merge.restored_shared


class _Merge:
    """One ``StateSnapshot.merge`` pass."""

    def __init__(self, snapshot: StateSnapshot, mask: torch.Tensor, settled: dict[int, tuple[torch.Tensor, int]]):
        self.snapshot, self.mask, self.settled = snapshot, mask, settled
        self._mask_np: np.ndarray | None = None
        self.merged: set[int] = set()  # ids of live tensors already merged (aliases share one merge)
        self.fresh: set[int] = set()  # ids of fresh objects already merged
        self.restored_shared = False  # some shared state had changed and was put back

    def members(self, container: Any, old: dict | list) -> None:
        """Merge the live members of ``container`` with their snapshot ``old``."""
        live = _members(container)
        if isinstance(old, list) and len(live) != len(old):
            live[:] = old  # lists of entities, goals, ... are shared structure
            self.restored_shared = True
        elif isinstance(container, dict) and live.keys() != old.keys():
            live.clear()
            live.update(old)
            self.restored_shared = True
        items = old.items() if isinstance(old, dict) else enumerate(old)
        for key, before in items:
            now = live.get(key, _MISSING) if isinstance(live, dict) else live[key]
            if isinstance(before, torch.Tensor):
                value = self.tensor(before, now, key)
            elif isinstance(before, np.ndarray):
                value = self.array(before, now, key)
            elif now is before or (isinstance(before, _SCALARS) and type(now) is type(before) and now == before):
                continue
            elif self._is_fresh_twin(before, now):
                if id(now) not in self.fresh:
                    self.fresh.add(id(now))
                    self.members(now, self.snapshot.members[id(before)])
                continue
            else:
                value = before
                self.restored_shared = True
            if value is not now and not isinstance(live, tuple):  # a tuple's tensors were merged in place
                live[key] = value

    def _is_fresh_twin(self, before: Any, now: Any) -> bool:
        """``now`` was created by the reset to replace ``before`` (same type, both walkable)."""
        return (
            type(now) is type(before)
            and id(now) not in self.snapshot.seen
            and id(before) in self.snapshot.members
            and not isinstance(now, (set, frozenset))
            and _walkable(now)
        )

    def tensor(self, before: torch.Tensor, now: Any, key: Any) -> Any:
        snapshot = self.snapshot
        old = snapshot.clones[id(before)]
        # Shared state, or a per-env slot the reset filled with another shape or dtype: put back as it was.
        if not _is_batched(before, key, snapshot.batch_dim) or not isinstance(now, torch.Tensor) or (
                now.shape != before.shape or now.dtype != before.dtype):
            changed = before._version != snapshot.versions[id(before)]
            if changed:
                with torch.no_grad():
                    before.copy_(old)
                snapshot.versions[id(before)] = before._version
            self.restored_shared |= changed or now is not before
            return before
        if id(now) in self.merged:
            return now
        self.merged.add(id(now))
        if now is before and now._version == snapshot.versions[id(before)]:
            return now  # untouched since the snapshot
        settled = self.settled.get(id(now))
        if settled is not None and settled[0] is now and settled[1] == now._version:
            snapshot._settled[id(now)] = settled
            return now  # untouched since the last merge with this mask
        keep_new = self.mask.view(-1, *([1] * (now.ndim - 1)))
        value = torch.where(keep_new, now, old)
        if now.stride(0) == 0 or now.requires_grad:
            result = value  # an expanded (or autograd leaf) tensor cannot take the rows in place
        else:
            try:
                now.copy_(value)
                result = now
            except RuntimeError:  # internal overlap: replace instead
                result = value
        snapshot._settled[id(result)] = (result, result._version)
        return result

    def array(self, before: np.ndarray, now: Any, key: Any) -> Any:
        old = self.snapshot.clones[id(before)]
        if not (_is_batched(before, key, self.snapshot.batch_dim) and isinstance(now, np.ndarray)
                and now.shape == before.shape):
            self.restored_shared |= now is not before or not np.array_equal(before, old)
            before[...] = old
            return before
        if self._mask_np is None:
            self._mask_np = self.mask.cpu().numpy()
        keep_new = self._mask_np.reshape(-1, *([1] * (now.ndim - 1)))
        now[...] = np.where(keep_new, now, old)
        return now


# ----------------------------------------------------------------------------------------------------
# A world narrowed to the envs being reset
# ----------------------------------------------------------------------------------------------------
_BATCH_SIZE_SLOTS = frozenset({"_batch_dim", "num_envs"})  # VMAS's vectorized objects and its Environment


class NarrowedWorld:
    """The state reachable from ``roots`` as a world of the envs ``index`` only: one batched reset of it costs
    in proportion to those envs.

    ``narrow()`` puts a copy of the rows ``index`` in place of every per-env tensor (the rule above; tensors that
    view one memory row by row, such as VMAS's forces and actions, become the same views of one copy) and
    ``len(index)`` in place of the batch size (``_batch_dim`` of VMAS's vectorized objects, ``num_envs`` of its
    ``Environment``); the originals are not touched. After a reset of that world, ``widen()`` writes the rows it
    left into the rows ``index`` of the originals (in place, so aliases stay aliases; an expanded original is
    replaced by a full copy) and puts every slot back. ``widen()`` refuses, restoring everything instead, when
    the reset did what a narrowed world cannot hand back: a per-env slot left with another shape, a slot pointed
    at another object, views of one memory left disagreeing, shared state changed (the observations it computed
    would read it before it is put back). ``feasible`` is False, and nothing may be narrowed, where the state
    holds what a narrowed world cannot stand for: per-env numpy arrays, lists as long as the batch, per-env
    tensors in tuples or requiring grad, memory shared otherwise than row by row.
    """

    def __init__(self, roots: list[Any], batch_dim: int, index: torch.Tensor):
        self.batch_dim, self.index, self.size = batch_dim, index, int(index.numel())
        self.containers, _ = _walk(roots)
        self.narrowed: dict[int, tuple[torch.Tensor, torch.Tensor, int]] = {}  # id(original) -> it, rows, version
        self.groups: list[tuple[torch.Tensor, list[torch.Tensor]]] = []  # (rows of the memory, tensors viewing it)
        self.shared: dict[int, tuple[Any, Any, int]] = {}  # id -> (tensor or array, copy, version), restored
        self.feasible = self._plan()

    def _plan(self) -> bool:
        by_storage: dict[int, list[torch.Tensor]] = {}
        for container, copy in self.containers:
            if isinstance(copy, list) and len(copy) == self.batch_dim:
                return False  # per-env Python objects, or a list that happens to be as long as the batch
            for key, value in _items(copy):
                if isinstance(value, np.ndarray):
                    if _is_batched(value, key, self.batch_dim):
                        return False
                    self.shared.setdefault(id(value), (value, value.copy(), 0))
                elif not isinstance(value, torch.Tensor):
                    continue
                elif not _is_batched(value, key, self.batch_dim):
                    if id(value) not in self.shared:
                        self.shared[id(value)] = (value, value.detach().clone(), value._version)
                elif id(value) not in self.narrowed:
                    if isinstance(container, tuple) or value.requires_grad:
                        return False
                    self.narrowed[id(value)] = (value, value, 0)  # rows below
                    if value.stride(0) == 0 or value.numel() == 0:  # one row for all envs, or nothing
                        rows = value[:1].clone().expand(self.size, *value.shape[1:]) if value.numel() else value[:0]
                        self.narrowed[id(value)] = (value, rows, rows._version)
                    else:
                        by_storage.setdefault(value.untyped_storage().data_ptr(), []).append(value)
        for members in by_storage.values():
            if len(members) == 1:
                rows = members[0].index_select(0, self.index)
                self.narrowed[id(members[0])] = (members[0], rows, rows._version)
                continue
            memory = _row_memory(members)
            if memory is None:
                return False
            rows = memory.index_select(0, self.index)
            self.groups.append((memory, members))
            for t in members:
                view = rows.as_strided((self.size, *t.shape[1:]), (rows.stride(0), *t.stride()[1:]),
                                       t.storage_offset() - memory.storage_offset())
                self.narrowed[id(t)] = (t, view, view._version)
        return True

    def narrow(self) -> None:
        """Swap the rows ``index`` in for every per-env tensor and ``len(index)`` for the batch size."""
        for container, copy in self.containers:
            live = _members(container)
            for key, value in _items(copy):
                if isinstance(value, torch.Tensor) and id(value) in self.narrowed:
                    live[key] = self.narrowed[id(value)][1]
                elif key in _BATCH_SIZE_SLOTS and type(value) is int and value == self.batch_dim:
                    live[key] = self.size

    def widen(self) -> bool:
        """Write the rows the reset left back into the originals and put every slot back; True if it could, else
        everything is restored as it was before ``narrow()`` and False returned."""
        writes: dict[int, torch.Tensor] = {}  # id(original) -> the rows to write into it
        after: dict[int, torch.Tensor] = {}  # id(original) -> what its slot held after the reset
        replaced: dict[int, torch.Tensor] = {}  # id(expanded original) -> the full copy taking its place
        ok = self._collect(writes, after)
        with torch.no_grad():
            groups = [(m, ts) for m, ts in self.groups if any(id(t) in writes for t in ts)] if ok else []
            backups = [(memory, memory.index_select(0, self.index)) for memory, _ in groups]
            if ok:
                for key, rows in writes.items():
                    original = self.narrowed[key][0]
                    if original.stride(0) == 0:
                        replaced[key] = original.clone().index_copy_(0, self.index, rows)
                    else:
                        original.index_copy_(0, self.index, rows)
                # Tensors viewing one memory that the reset replaced apart must still agree where they overlap.
                ok = all(torch.equal(t.index_select(0, self.index), after[id(t)]) for _, ts in groups for t in ts)
            if not ok:
                for memory, rows in backups:
                    memory.index_copy_(0, self.index, rows)
                replaced.clear()
        self.restore(replaced)
        return ok

    def _collect(self, writes: dict[int, torch.Tensor], after: dict[int, torch.Tensor]) -> bool:
        """Fill ``writes`` and ``after``; False if the reset did something a narrowed world cannot hand back."""
        for container, copy in self.containers:
            live = _members(container)
            if isinstance(copy, list) and len(live) != len(copy):
                return False
            if isinstance(copy, dict) and live.keys() != copy.keys():
                return False
            for key, before in _items(copy):
                now = live[key]
                if isinstance(before, torch.Tensor) and id(before) in self.narrowed:
                    _, rows, version = self.narrowed[id(before)]
                    if not (isinstance(now, torch.Tensor) and now.shape == rows.shape and now.dtype == rows.dtype
                            and now.device == rows.device):
                        return False
                    first = after.setdefault(id(before), now)
                    if first is not now and not torch.equal(first, now):
                        return False  # aliases the reset set apart to different values
                    if now is not rows or rows._version != version:
                        writes[id(before)] = now
                elif isinstance(before, (torch.Tensor, np.ndarray)):
                    if self._changed(before) or not (now is before or self._same_values(before, now)):
                        return False
                elif key in _BATCH_SIZE_SLOTS and type(before) is int and before == self.batch_dim:
                    if now != self.size:
                        return False
                elif not (now is before or (isinstance(before, _SCALARS) and type(now) is type(before)
                                            and now == before)):
                    return False
        return True

    def _changed(self, value: torch.Tensor | np.ndarray) -> bool:
        _, copy, version = self.shared[id(value)]
        if isinstance(value, np.ndarray):
            return not np.array_equal(value, copy)
        return value._version != version

    def _same_values(self, before: torch.Tensor | np.ndarray, now: Any) -> bool:
        """A shared tensor the reset replaced by an equal one (a colour set again) is unchanged."""
        if isinstance(before, np.ndarray):
            return isinstance(now, np.ndarray) and now.dtype == before.dtype and np.array_equal(now, before)
        return (isinstance(now, torch.Tensor) and now.dtype == before.dtype and now.device == before.device
                and torch.equal(now, before))

    def restore(self, replaced: dict[int, torch.Tensor] | None = None) -> None:
        """Every slot back to what it held before ``narrow()`` (or to the full copy ``replaced`` names for it),
        shared tensors to their values."""
        replaced = replaced or {}
        for container, copy in self.containers:
            live = _members(container)
            if isinstance(copy, list) and len(live) != len(copy):
                live[:] = copy
            elif isinstance(copy, dict) and live.keys() != copy.keys():
                live.clear()
                live.update(copy)
            elif not isinstance(live, tuple):
                for key, before in _items(copy):
                    value = replaced.get(id(before), before) if isinstance(before, torch.Tensor) else before
                    if live[key] is not value:
                        live[key] = value
        with torch.no_grad():
            for value, copy, _ in self.shared.values():
                if self._changed(value):
                    value[...] = copy  # a tensor or a numpy array


def _row_memory(views: list[torch.Tensor]) -> torch.Tensor | None:
    """The rows of memory that per-env tensors sharing it all view row by row: a ``(batch, row)`` tensor whose
    row ``i`` holds every element of row ``i`` of each view. None if they do not view it that way."""
    first = views[0]
    row, start = first.stride(0), min(t.storage_offset() for t in views)
    for t in views:
        extent = sum((n - 1) * s for n, s in zip(t.shape[1:], t.stride()[1:]))
        if (t.dtype != first.dtype or t.shape[0] != first.shape[0] or t.stride(0) != row
                or any(s < 0 for s in t.stride()) or t.storage_offset() - start + extent >= row):
            return None
    batch = first.shape[0]
    if start + batch * row > first.untyped_storage().nbytes() // first.element_size():
        return None
    return first.as_strided((batch, row), (row, 1), start)


_MISSING = object()
