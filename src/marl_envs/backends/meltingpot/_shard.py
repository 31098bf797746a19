"""The Melting Pot substrates of a range of batch rows, and the arrays their timesteps are written into.

A :class:`SubstrateShard` has the interface of the PettingZoo machinery's ``Shard`` (``reset``, ``step``,
``step_reset``, ``render``, ``close``, ``current``), so that the same ``WorkerPool`` runs it in worker processes over
shared memory; with ``num_workers=0`` one shard over every row runs in the env's process. Same code either way, so
the results are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._library import COLLECTIVE, Instance

__all__ = ["Arrays", "Layout", "SubstrateBuffers", "SubstrateShard"]

Alloc = Callable[[tuple[int, ...], Any], np.ndarray]
WORLD = "WORLD.RGB"


@dataclass(frozen=True)
class Layout:
    """What a shard knows of the batch: each player observation's key, shape and dtype, the world view's, the number
    of players, and the substrate's episode length (an episode that reaches it is truncated, else terminated)."""

    observations: tuple[tuple[str, tuple[int, ...], np.dtype], ...]
    world: tuple[tuple[int, ...], np.dtype]
    n_players: int
    episode_length: int


class Arrays:
    """The arrays one reset or step writes, batch first: each observation ``(B, N, *shape)``, the world view
    ``(B, H, W, 3)``, the rewards ``(B, N)`` float32 and the envs' ends ``(B,)``. ``fresh`` ones (in the env's
    process) are new at every write, handed to torch as they are; in shared memory they are reused (and copied)."""

    def __init__(self, layout: Layout, num_envs: int, alloc: Alloc, fresh: bool):
        self.layout, self.num_envs, self.fresh = layout, num_envs, fresh
        self._allocate(alloc)

    def _allocate(self, alloc: Alloc) -> None:
        B, N = self.num_envs, self.layout.n_players
        self.obs = {key: alloc((B, N, *(shape or (1,))), dtype) for key, shape, dtype in self.layout.observations}
        self.world = alloc((B, *self.layout.world[0]), self.layout.world[1])
        self.reward = alloc((B, N), np.float32)
        self.term, self.trunc = alloc((B,), bool), alloc((B,), bool)

    def renew(self) -> None:
        """New arrays (``fresh``; the rows not written are zeros)."""
        if self.fresh:
            self._allocate(np.zeros)


class SubstrateBuffers:
    """Everything the env and the shards exchange: ``actions`` ``(B, N)`` int64 and ``ends`` (rows to reset after a
    fused step whatever their flags: ``max_steps``) in; the arrays of the last ``step`` and ``reset`` and
    ``reset_rows`` (the rows the last fused step-and-reset reset) out; ``count``, each row's steps in its episode."""

    def __init__(self, layout: Layout, num_envs: int, alloc: Alloc = np.zeros, fresh: bool = False):
        self.actions = alloc((num_envs, layout.n_players), np.int64)
        self.ends = alloc((num_envs,), bool)
        self.step, self.reset = Arrays(layout, num_envs, alloc, fresh), Arrays(layout, num_envs, alloc, fresh)
        self.reset_rows = alloc((num_envs,), bool)
        self.count = alloc((num_envs,), np.int64)
        self.fresh = fresh


class SubstrateShard:
    """The substrates of rows ``[lo, lo + len(instances))``, written into ``buffers``."""

    def __init__(self, instances: Sequence[Instance], lo: int, layout: Layout, buffers: SubstrateBuffers):
        self.instances, self.lo, self.hi = list(instances), lo, lo + len(instances)
        self.layout, self.buffers = layout, buffers
        players = range(1, layout.n_players + 1)
        # each player observation's dmlab2d names ("1.RGB", "2.RGB", ...); the collective reward is the rewards' sum
        self.reads = [(key, [f"{p}.{key}" for p in players])
                      for key, _, _ in layout.observations if key != COLLECTIVE]
        self.rewards = [f"{p}.REWARD" for p in players]
        self.scratch = np.zeros(layout.n_players)  # a step's rewards, float64 as Melting Pot's
        self.frames: list[Any] = [None] * len(self.instances)  # each row's last world view, for render()
        self.current = lo  # the row a failure is reported for

    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """Reset ``rows`` (seeded where ``seeds`` gives one) into the reset arrays."""
        arrays = self.buffers.reset
        if rows:
            arrays.renew()
        for i, seed in zip(rows, seeds):
            self.current = i
            instance = self.instances[i - self.lo]
            instance.reset(seed)
            self._write(arrays, i, instance)
            self.buffers.count[i] = 0
            arrays.term[i] = arrays.trunc[i] = False

    def step(self, decoded: Any = None) -> None:
        """Step every row with its actions in ``buffers.actions`` into the step arrays."""
        b, lo = self.buffers, self.lo
        arrays = b.step
        arrays.renew()
        actions = b.actions[lo:self.hi]
        length = self.layout.episode_length
        for i in range(lo, self.hi):
            self.current = i
            instance = self.instances[i - lo]
            last = instance.step(actions[i - lo])
            self._write(arrays, i, instance)
            b.count[i] += 1
            arrays.trunc[i] = last and b.count[i] >= length
            arrays.term[i] = last and b.count[i] < length

    def step_reset(self, decoded: Any = None, seeds: Sequence[int | None] | None = None) -> None:
        """``step``, then ``reset`` the rows it ended and those ``buffers.ends`` marks (into ``reset_rows``)."""
        self.step(decoded)
        b, lo, hi = self.buffers, self.lo, self.hi
        rows = b.step.term[lo:hi] | b.step.trunc[lo:hi] | b.ends[lo:hi]
        b.reset_rows[lo:hi] = rows
        ended = np.flatnonzero(rows).tolist()
        self.reset([lo + i for i in ended], [None] * len(ended) if seeds is None else [seeds[i] for i in ended])

    def _write(self, arrays: Arrays, i: int, instance: Instance) -> None:
        """Row ``i`` of ``arrays``: the observations of ``instance`` as Melting Pot's wrappers hand them out."""
        read = instance.lab.observation
        for key, names in self.reads:
            row = arrays.obs[key][i]
            for p, name in enumerate(names):
                row[p] = read(name)  # a scalar fills its (1,) slot
        rewards = self.scratch
        for p, name in enumerate(self.rewards):
            rewards[p] = read(name)
        arrays.reward[i] = rewards
        arrays.obs[COLLECTIVE][i] = rewards.sum()  # Melting Pot's CollectiveRewardWrapper: np.sum of the float64s
        world = read(WORLD)  # a new array at each read
        arrays.world[i] = world
        self.frames[i - self.lo] = world

    def render(self, i: int) -> Any:
        return self.frames[i - self.lo]

    def close(self) -> None:
        for instance in self.instances:
            instance.close()
