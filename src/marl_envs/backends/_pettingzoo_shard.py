"""The PettingZoo instances of a range of batch rows, and the numpy buffers their results are written into.

A :class:`Shard` owns the instances of rows ``[lo, hi)``: it resets and steps them with PettingZoo's own API and
writes what they return into :class:`Buffers` (per group and leaf, ``(B, n, ...)`` numpy arrays). The wrapper
runs one shard over every row in its own process (``num_workers=0``), or one per worker process over shared
memory (``_pettingzoo_workers``): the same code either way, so the results are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._pettingzoo_spaces import ACTION_MASK, ActionCodec, ObsLayout

__all__ = ["Buffers", "Group", "Layout", "Shard", "dead_message", "state_of"]

Alloc = Callable[[tuple[int, ...], Any], np.ndarray]


@dataclass(frozen=True)
class Group:
    """Static facts of one group: its agents (and their positions in ``possible_agents``) and layouts."""

    name: str
    agents: tuple[str, ...]
    index: np.ndarray
    obs: ObsLayout
    mask_from_info: bool  # the action mask comes from the infos (else from the observation, if any)
    mask_shape: tuple[int, ...] | None
    info: tuple[tuple[str, tuple[int, ...]], ...]  # (key, shape) of the numeric infos
    codec: ActionCodec


@dataclass(frozen=True)
class Layout:
    """What a shard needs to know about the batch: the agents, their groups, and the wrapper's options."""

    agents: tuple[str, ...]
    groups: tuple[Group, ...]
    parallel: bool
    use_mask: bool
    state_shape: tuple[int, ...] | None  # None: no root "state"
    state_dtype: Any = None

    @property
    def slots(self) -> list[tuple[int, int]]:
        """Each agent's (group index, position in its group), in ``agents`` order."""
        where = {agent: (gi, j) for gi, g in enumerate(self.groups) for j, agent in enumerate(g.agents)}
        return [where[agent] for agent in self.agents]


class Buffers:
    """The arrays of one reset or step (``obs``, ``infos``, ``action_mask``, ``reward``, ``acting``, ``state``)
    and of the episode so far (``term``, ``trunc``, ``seen``, ``live``), all with the batch first."""

    def __init__(self, layout: Layout, num_envs: int, alloc: Alloc = np.zeros):
        B, N = num_envs, len(layout.agents)
        self.obs = [[alloc((B, len(g.agents), *leaf.shape), leaf.dtype) for leaf in g.obs.leaves]
                    for g in layout.groups]
        self.infos = [[alloc((B, len(g.agents), *shape), np.float32) for _, shape in g.info] for g in layout.groups]
        self.action_mask = [None if g.mask_shape is None else alloc((B, len(g.agents), *g.mask_shape), bool)
                            for g in layout.groups]
        self.reward = alloc((B, N), np.float32)
        self.acting = alloc((B, N), bool)
        self.state = None if layout.state_shape is None else alloc((B, *layout.state_shape), layout.state_dtype)
        self.term, self.trunc = alloc((B, N), bool), alloc((B, N), bool)  # last end flags, kept once an agent left
        self.seen = alloc((B, N), bool)  # the agent has been in this episode
        self.live = alloc((B, N), bool)  # the agent is in the instance's ``agents`` now

    def clear(self, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` of the per-call arrays back to their defaults (zeros; action masks all True)."""
        for array in [*(a for group in self.obs + self.infos for a in group), self.reward, self.acting]:
            array[lo:hi] = 0
        for mask in self.action_mask:
            if mask is not None:
                mask[lo:hi] = True
        if self.state is not None:
            self.state[lo:hi] = 0


def state_of(env: Any) -> np.ndarray:
    """``env.state()`` as an array, or a ValueError saying the env has none."""
    try:
        return np.asarray(env.state())
    except (NotImplementedError, AttributeError, TypeError) as err:
        raise ValueError(
            f"{type(env).__name__} has no global state (env.state() raised {type(err).__name__}: {err}); "
            f"build it with return_state=False"
        ) from err


class Shard:
    """The instances of rows ``[lo, lo + len(instances))``, written into ``buffers``."""

    def __init__(self, instances: Sequence[Any], lo: int, layout: Layout, buffers: Buffers):
        self.instances, self.lo, self.hi = list(instances), lo, lo + len(instances)
        self.layout, self.buffers = layout, buffers
        self.position = {agent: k for k, agent in enumerate(layout.agents)}
        self.slot = dict(zip(layout.agents, layout.slots))
        self.current = lo

    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """Reset the instances of ``rows`` (global batch indices inside this shard) with ``seeds``."""
        buffers = self.buffers
        buffers.clear(self.lo, self.hi)
        for i, seed in zip(rows, seeds):
            self.current = i
            buffers.term[i] = buffers.trunc[i] = buffers.seen[i] = False
            self._write(i, self._reset_instance(self.instances[i - self.lo], seed))

    def step(self, actions: Sequence[Sequence]) -> None:
        """Step every instance; ``actions[gi][i - lo][j]``: the action of agent ``j`` of group ``gi`` in row ``i``."""
        self.buffers.clear(self.lo, self.hi)
        for i in range(self.lo, self.hi):
            self.current = i  # the row a failure is reported for
            self._write(i, self._step_instance(self.instances[i - self.lo], [group[i - self.lo] for group in actions]))

    # -- one instance: PettingZoo's dicts ------------------------------------------------------------
    def _record(self, env: Any, obs: dict, rewards: dict, terms: dict, truncs: dict, infos: dict) -> tuple:
        acting = env.agents if self.layout.parallel else ([env.agent_selection] if env.agents else [])
        return obs, rewards, terms, truncs, infos, acting, env

    def _aec_record(self, env: Any) -> tuple:
        obs = {agent: env.observe(agent) for agent in env.agents}
        return self._record(env, obs, env.rewards, env.terminations, env.truncations, env.infos)

    def _reset_instance(self, env: Any, seed: int | None) -> tuple:
        if self.layout.parallel:
            obs, infos = env.reset(seed=seed)
            return self._record(env, obs, {}, {}, {}, infos)
        env.reset(seed=seed)
        return self._aec_record(env)

    def _step_instance(self, env: Any, actions: Sequence[Sequence]) -> tuple:
        slot = self.slot
        if self.layout.parallel:
            step = {agent: actions[gi][j] for agent in env.agents for gi, j in (slot[agent],)}
            return self._record(env, *env.step(step))
        agent = env.agent_selection
        gi, j = slot[agent]
        env.step(None if env.terminations[agent] or env.truncations[agent] else actions[gi][j])
        return self._aec_record(env)

    def _write(self, i: int, record: tuple) -> None:
        """Row ``i`` of the buffers from one instance's record."""
        layout, b = self.layout, self.buffers
        agent_obs, rewards, terms, truncs, agent_infos, live, env = record
        b.live[i] = False
        for agent in env.agents:
            b.live[i, self.position[agent]] = True
        for agent in live:
            b.acting[i, self.position[agent]] = True
        for k, agent in enumerate(layout.agents):
            value = agent_obs.get(agent)
            if value is None:  # not (or no longer) in the episode
                if not layout.use_mask:
                    raise ValueError(dead_message(i, [agent]))
                if b.seen[i, k] and not (b.term[i, k] or b.trunc[i, k]):
                    b.term[i, k] = True  # left without saying why
                continue
            gi, j = layout.slots[k]
            g = layout.groups[gi]
            for leaf, buf in zip(g.obs.leaves, b.obs[gi]):
                buf[i, j] = leaf.read(value)
            b.seen[i, k] = True
            b.term[i, k] = terms.get(agent, False)
            b.trunc[i, k] = truncs.get(agent, False)
            b.reward[i, k] = rewards.get(agent, 0.0)
            info = agent_infos.get(agent) or {}
            for (key, _), buf in zip(g.info, b.infos[gi]):
                if key in info:
                    buf[i, j] = info[key]
            if g.mask_shape is not None and b.acting[i, k]:
                mask = info.get(ACTION_MASK) if g.mask_from_info else g.obs.mask_leaf.read(value)
                if mask is not None:
                    b.action_mask[gi][i, j] = mask
        if b.state is not None:
            b.state[i] = state_of(env)

    def render(self, i: int) -> Any:
        return self.instances[i - self.lo].render()

    def close(self) -> None:
        for env in self.instances:
            env.close()


def dead_message(i: int, gone: Sequence[str]) -> str:
    return (
        f"agents {list(gone)} of env {i} are not in the episode (dead agents); build the env with "
        f"use_mask=True to step on with them masked out (done_on_any=True ends the episode instead)"
    )
