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

from ._library import Instance

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
        self.keys = [key for key, _, _ in layout.observations]
        self.scalar = {key: not shape for key, shape, _ in layout.observations}
        self.frames: list[Any] = [None] * len(self.instances)  # each row's last world view, for render()
        self.current = lo  # the row a failure is reported for

    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """Reset ``rows`` (seeded where ``seeds`` gives one) into the reset arrays."""
        arrays = self.buffers.reset
        if rows:
            arrays.renew()
        for i, seed in zip(rows, seeds):
            self.current = i
            self._write(arrays, i, self.instances[i - self.lo].reset(seed))
            self.buffers.count[i] = 0
            arrays.term[i] = arrays.trunc[i] = False

    def step(self, decoded: Any = None) -> None:
        """Step every row with its actions in ``buffers.actions`` into the step arrays."""
        b, lo = self.buffers, self.lo
        arrays = b.step
        arrays.renew()
        actions = b.actions[lo:self.hi].tolist()
        length = self.layout.episode_length
        for i in range(lo, self.hi):
            self.current = i
            timestep = self.instances[i - lo].step(actions[i - lo])
            self._write(arrays, i, timestep)
            arrays.reward[i] = timestep.reward
            b.count[i] += 1
            last = timestep.last()
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

    def _write(self, arrays: Arrays, i: int, timestep: Any) -> None:
        players = timestep.observation
        for key in self.keys:
            buf = arrays.obs[key]
            if self.scalar[key]:
                buf[i, :, 0] = [player[key] for player in players]
            else:  # one copy into the batch (an assignment from a list would stack it first)
                np.stack([player[key] for player in players], out=buf[i])
        world = players[0][WORLD]
        arrays.world[i] = world
        self.frames[i - self.lo] = world

    def render(self, i: int) -> Any:
        return self.frames[i - self.lo]

    def close(self) -> None:
        for instance in self.instances:
            instance.close()
