"""The VMAS backend's private machinery: per-env random streams and the masked (vectorized) partial reset.

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

VMAS draws its randomness from the global torch / numpy / python generators, swapped in and out around each
public call from one class-level slot shared by every ``Environment``. ``RngStreams`` gives each wrapped env
its own streams so interleaved envs never perturb each other: the ``main`` stream drives steps and full
resets (the one ``vmas`` itself would use, so a wrapped env replays raw VMAS exactly), and a separate ``reset``
stream drives masked resets, so a partial reset never shifts the randomness later steps draw.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import random
import types
from collections.abc import Iterator
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
# Random streams
# ----------------------------------------------------------------------------------------------------
def _vmas_slot() -> list:
    from vmas.simulator.environment.environment import Environment

    return Environment.vmas_random_state


def _seeded_state(seed: int) -> list:
    """The (torch, numpy, python) generator states VMAS's own ``seed(seed)`` produces."""
    saved = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        torch.random.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        return [torch.random.get_rng_state(), np.random.get_state(), random.getstate()]
    finally:
        torch.random.set_rng_state(saved[0])
        np.random.set_state(saved[1])
        random.setstate(saved[2])


def _derived_seed(*parts: int | bytes) -> int:
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part if isinstance(part, bytes) else int(part).to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") % 2**32


class RngStreams:
    """Two private (torch, numpy, python[, cuda]) random streams of one VMAS env: ``main`` and ``reset``.

    ``use(stream)`` swaps a stream into VMAS's class-level slot (and the CUDA generator of the env's device)
    for the duration of a block and saves it back afterwards, leaving the slot as it was for anyone else.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        slot = _vmas_slot()
        # Adopt the state VMAS would use next, without drawing from it: wrapping does not advance it.
        self.main = list(slot[:3]) + ([torch.cuda.get_rng_state(self.device)] if self._cuda else [])
        self.reset = self._fresh(_derived_seed(slot[0].numpy().tobytes()))

    def _fresh(self, seed: int) -> list:
        state = _seeded_state(seed)
        if self._cuda:
            state.append(torch.Generator(device=self.device).manual_seed(seed).get_state())
        return state

    def seed(self, seed: int) -> None:
        """Seed ``main`` exactly as ``vmas.Environment.seed(seed)`` would; derive ``reset`` from it.

        numpy takes seeds in ``[0, 2**32)`` only, so other ints are reduced modulo ``2**32`` first.
        """
        seed %= 2**32
        self.main = self._fresh(seed)
        self.reset = self._fresh(_derived_seed(seed, 0x5EED))

    @contextlib.contextmanager
    def scratch(self) -> Iterator[None]:
        """Run a block on a throwaway copy of ``main``: the real streams draw nothing."""
        saved = self.main
        self.main = list(saved)
        try:
            with self.use("main"):
                yield
        finally:
            self.main = saved

    @contextlib.contextmanager
    def use(self, name: str) -> Iterator[None]:
        stream = getattr(self, name)
        slot = _vmas_slot()
        saved = list(slot)
        slot[:3] = stream[:3]
        if self._cuda:
            saved_cuda = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(stream[3], self.device)
        try:
            yield
        finally:
            stream[:3] = slot[:3]
            slot[:] = saved
            if self._cuda:
                stream[3] = torch.cuda.get_rng_state(self.device)
                torch.cuda.set_rng_state(saved_cuda, self.device)


# ----------------------------------------------------------------------------------------------------
# State snapshot and merge
# ----------------------------------------------------------------------------------------------------
def _walkable(obj: Any) -> bool:
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        return True
    if isinstance(obj, _OPAQUE) or isinstance(obj, (torch.Tensor, np.ndarray)) or not hasattr(obj, "__dict__"):
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


class StateSnapshot:
    """Everything reachable from ``roots`` that a reset could change, taken before a masked reset.

    ``merge(mask)`` then makes the live state equal to: the current values on the rows where ``mask`` is True,
    and the snapshot everywhere else (per-env rows of the other envs, and all shared state). A slot the reset
    pointed at another existing object (a goal landmark, a permutation of passages) is shared structure and
    points back; a slot it pointed at a fresh object of the same type (new per-env Gaussians built from the
    new positions) keeps the fresh object, whose contents are merged with the old one's, recursively.
    """

    def __init__(self, roots: list[Any], batch_dim: int):
        self.batch_dim = batch_dim
        # (container, members-snapshot) for every dict / list / tuple / object __dict__ reached
        self.containers: list[tuple[Any, dict | list]] = []
        self.members: dict[int, dict | list] = {}  # id(container) -> its members-snapshot
        self.clones: dict[int, torch.Tensor | np.ndarray] = {}  # id(tensor) -> copy of its values
        self.versions: dict[int, int] = {}  # id(tensor) -> its version counter
        self._keep: list[Any] = []  # keep snapshotted tensors alive so their ids stay unique
        # Live tensors already holding the merge for ``_last_mask``: id -> (tensor, version after the merge).
        self._settled: dict[int, tuple[torch.Tensor, int]] = {}
        self._last_mask: torch.Tensor | None = None
        self.seen: set[int] = set()  # ids of every object reached (alive while the snapshot holds them)
        stack = list(roots)
        while stack:
            obj = stack.pop()
            if id(obj) in self.seen:
                continue
            self.seen.add(id(obj))
            members = _members(obj)
            if members is None:
                stack.extend(m for m in obj if _walkable(m))
                continue
            copy = dict(members) if isinstance(members, dict) else list(members)
            self.containers.append((obj, copy))
            self.members[id(obj)] = copy
            for value in copy.values() if isinstance(copy, dict) else copy:
                if isinstance(value, (torch.Tensor, np.ndarray)):
                    self._record(value)
                elif _walkable(value):
                    stack.append(value)

    def _is_batched(self, value: torch.Tensor | np.ndarray, key: Any) -> bool:
        """Per-env state: the first dim is the batch. An entity's 1-d ``color`` is an RGB triple, whatever
        ``num_envs`` is (a per-env color is ``(num_envs, 3)``)."""
        if key in _SHARED_1D and value.ndim == 1:
            return False
        return value.ndim >= 1 and value.shape[0] == self.batch_dim

    def _record(self, value: torch.Tensor | np.ndarray) -> None:
        key = id(value)
        if key in self.clones:
            return
        self._keep.append(value)
        if isinstance(value, np.ndarray):
            self.clones[key] = value.copy()
        else:
            self.clones[key] = value.detach().clone()
            self.versions[key] = value._version

    def merge(self, mask: torch.Tensor) -> None:
        """Keep the current values on the rows where ``mask`` is True; restore the snapshot everywhere else."""
        previous = self._settled if mask is self._last_mask else {}
        self._settled, self._last_mask = {}, mask  # only tensors in place after this pass stay referenced
        merge = _Merge(self, mask, previous)
        for container, old in self.containers:
            merge.members(container, old)


class _Merge:
    """One ``StateSnapshot.merge`` pass."""

    def __init__(self, snapshot: StateSnapshot, mask: torch.Tensor, settled: dict[int, tuple[torch.Tensor, int]]):
        self.snapshot, self.mask, self.settled = snapshot, mask, settled
        self._mask_np: np.ndarray | None = None
        self.merged: set[int] = set()  # ids of live tensors already merged (aliases share one merge)
        self.fresh: set[int] = set()  # ids of fresh objects already merged

    def members(self, container: Any, old: dict | list) -> None:
        """Merge the live members of ``container`` with their snapshot ``old``."""
        live = _members(container)
        if isinstance(old, list) and len(live) != len(old):
            live[:] = old  # lists of entities, goals, ... are shared structure
        elif isinstance(container, dict) and live.keys() != old.keys():
            live.clear()
            live.update(old)
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
        if not snapshot._is_batched(before, key):  # shared: restore it
            if before._version != snapshot.versions[id(before)]:
                with torch.no_grad():
                    before.copy_(old)
                snapshot.versions[id(before)] = before._version
            return before
        if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype:
            if before._version != snapshot.versions[id(before)]:
                with torch.no_grad():
                    before.copy_(old)
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
        if not self.snapshot._is_batched(before, key) or not isinstance(now, np.ndarray) or now.shape != before.shape:
            before[...] = old
            return before
        if self._mask_np is None:
            self._mask_np = self.mask.cpu().numpy()
        keep_new = self._mask_np.reshape(-1, *([1] * (now.ndim - 1)))
        now[...] = np.where(keep_new, now, old)
        return now


_MISSING = object()
