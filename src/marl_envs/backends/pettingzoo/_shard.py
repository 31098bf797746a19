"""The PettingZoo instances of a range of batch rows, and the numpy buffers their results are written into.

A :class:`Shard` owns the instances of rows ``[lo, hi)``: it resets and steps them with PettingZoo's own API and
writes what they return into :class:`Buffers` (per group and leaf, ``(B, n, ...)`` numpy arrays). The wrapper
runs one shard over every row in its own process (``num_workers=0``), or one per worker process over shared
memory (``_workers``): the same code either way, so the results are identical.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from ..._core.rules import done_of
from ._spaces import ACTION_MASK, ActionCodec, ObsSplit

__all__ = ["BatchFacts", "Buffers", "StepArrays", "Group", "InstanceStep", "Shard", "aec_view", "batch_index",
           "dead_message", "reset_instance", "root_ends", "state_of"]

Alloc = Callable[[tuple[int, ...], Any], np.ndarray]


@dataclass(frozen=True)
class Group:
    """Static facts of one group: its agents (and their positions in ``possible_agents``), how their
    observations split and how their actions are encoded."""

    name: str
    agents: tuple[str, ...]
    index: np.ndarray
    obs: ObsSplit
    mask_from_info: bool  # the action mask comes from the infos (else from the observation, if any)
    mask_shape: tuple[int, ...] | None
    info: tuple[tuple[str, tuple[int, ...]], ...]  # (key, shape) of the numeric infos
    codec: ActionCodec
    names: frozenset[str] = field(init=False)  # the agents, as a set: is every one of them in a step's dict?

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.agents))


class InstanceStep(NamedTuple):
    """What one instance's reset or step gives, as PettingZoo's dicts by agent, and who acts after it."""

    obs: dict
    rewards: dict
    terms: dict
    truncs: dict
    infos: dict
    acting: list
    env: Any


def reset_instance(env: Any, parallel: bool, seed: int | None = None) -> InstanceStep:
    """Reset the PettingZoo instance ``env`` through its parallel API or its AEC one: what it shows then."""
    if parallel:
        obs, infos = env.reset(seed=seed)
        return InstanceStep(obs, {}, {}, {}, infos, env.agents, env)
    env.reset(seed=seed)
    return aec_view(env)


def aec_view(env: Any) -> InstanceStep:
    """What the AEC instance ``env`` shows now: every agent's observation and dicts, and the acting agent."""
    obs = {agent: env.observe(agent) for agent in env.agents}
    acting = [env.agent_selection] if env.agents else []
    return InstanceStep(obs, env.rewards, env.terminations, env.truncations, env.infos, acting, env)


@dataclass(frozen=True)
class BatchFacts:
    """What a shard needs to know about the batch: the agents, their groups, and the wrapper's options."""

    agents: tuple[str, ...]
    groups: tuple[Group, ...]
    parallel: bool
    use_mask: bool
    state_shape: tuple[int, ...] | None  # None: no root "state"
    state_dtype: Any = None
    done_on_any: bool = True  # an env is done when any agent is (else when all are): the rule of the root done

    @functools.cached_property
    def slots(self) -> list[tuple[int, int]]:
        """Each agent's (group index, position in its group), in ``agents`` order (computed once: every step reads
        it for every agent)."""
        where = {agent: (gi, j) for gi, g in enumerate(self.groups) for j, agent in enumerate(g.agents)}
        return [where[agent] for agent in self.agents]


class StepArrays:
    """The arrays one reset or one step writes (``obs``, ``infos``, ``action_mask``, ``reward``, ``acting``,
    ``state``, and the agents' ``term`` / ``trunc`` flags as they stood after it), all with the batch first.

    ``fresh`` arrays (one shard over the whole batch, in this process) are new at every ``clear``, so
    that the wrapper can hand the last ones to torch without copying them: for hundreds of agents with image
    observations (MAgent2) that copy would outweigh the step itself. Arrays in shared memory (worker processes)
    are cleared in place and copied by the wrapper.
    """

    def __init__(self, facts: BatchFacts, num_envs: int, alloc: Alloc, fresh: bool = False):
        self.facts, self.num_envs, self.fresh = facts, num_envs, fresh
        B, N = num_envs, len(facts.agents)
        self._allocate(alloc)
        self.term, self.trunc = alloc((B, N), bool), alloc((B, N), bool)

    def _allocate(self, alloc: Alloc) -> None:
        facts, B, N = self.facts, self.num_envs, len(self.facts.agents)
        self.obs = [[alloc((B, len(g.agents), *leaf.shape), leaf.dtype) for leaf in g.obs.leaves]
                    for g in facts.groups]
        self.infos = [[alloc((B, len(g.agents), *shape), np.float32) for _, shape in g.info] for g in facts.groups]
        self.action_mask = [None if g.mask_shape is None else alloc((B, len(g.agents), *g.mask_shape), bool)
                            for g in facts.groups]
        self.reward = alloc((B, N), np.float32)
        self.acting = alloc((B, N), bool)
        self.state = None if facts.state_shape is None else alloc((B, *facts.state_shape), facts.state_dtype)

    def clear(self, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` back to their defaults (zeros; action masks all True): new arrays if ``fresh``."""
        if self.fresh:  # one shard over the whole batch: lo, hi = 0, B
            self._allocate(np.zeros)
        else:
            for array in [*(a for group in self.obs + self.infos for a in group), self.reward, self.acting]:
                array[lo:hi] = 0
            if self.state is not None:
                self.state[lo:hi] = 0
        for mask in self.action_mask:
            if mask is not None:
                mask[lo:hi] = True


class Buffers:
    """Everything the wrapper and the shards exchange, with the batch first.

    In: ``actions`` (per group, the codec's wire array; None for ``Dict`` action spaces, whose decoded values
    are passed along instead) and ``ends`` (rows to reset after a fused step whatever their flags:
    ``max_steps``). Out: the arrays of the last step and of the last reset (``step``, ``reset``; a fused
    step-and-reset writes both; ``fresh``: see :class:`StepArrays`) and ``reset_rows``, the rows the last fused
    step-and-reset reset. Kept: the episodes' flags (``term``, ``trunc``: last end flags, kept once an agent left;
    ``seen``: the agent has been in this episode; ``live``: it is in the instance's ``agents`` now).
    """

    def __init__(self, facts: BatchFacts, num_envs: int, alloc: Alloc = np.zeros, fresh: bool = False):
        B, N = num_envs, len(facts.agents)
        self.actions = [None if g.codec.wire_shape is None else
                        alloc((B, len(g.agents), *g.codec.wire_shape), g.codec.wire_dtype) for g in facts.groups]
        self.ends = alloc((B,), bool)
        self.step, self.reset = StepArrays(facts, B, alloc, fresh), StepArrays(facts, B, alloc, fresh)
        self.fresh = fresh  #: the arrays' arrays are new at every step / reset: the wrapper need not copy them
        self.term, self.trunc = alloc((B, N), bool), alloc((B, N), bool)
        self.seen = alloc((B, N), bool)
        self.live = alloc((B, N), bool)
        self.reset_rows = alloc((B,), bool)


def batch_index(rows: Sequence[int]) -> slice | list[int]:
    """``rows`` (ascending) as an index of the batch: a slice where they are contiguous (a view, no gather)."""
    rows = list(rows)
    return slice(rows[0], rows[-1] + 1) if rows and rows[-1] - rows[0] + 1 == len(rows) else rows


def root_ends(term: np.ndarray, trunc: np.ndarray, done_on_any: bool) -> tuple[np.ndarray, np.ndarray]:
    """The envs' ``terminated`` and ``truncated`` (``(B,)``) from their agents' ``(B, N)`` flags, by the root done
    rule: with ``done_on_any`` an env has ended when any agent has, else when every agent has ("terminated" if
    every agent terminated, else "truncated")."""
    if done_on_any:
        return term.any(1), trunc.any(1)
    root_term = term.all(1)
    return root_term, done_of(term, trunc).all(1) & ~root_term


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

    def __init__(self, instances: Sequence[Any], lo: int, facts: BatchFacts, buffers: Buffers):
        self.instances, self.lo, self.hi = list(instances), lo, lo + len(instances)
        self.facts, self.buffers = facts, buffers
        self.position = {agent: k for k, agent in enumerate(facts.agents)}
        self.everyone = frozenset(facts.agents)
        self.slot = dict(zip(facts.agents, facts.slots))
        self.current = lo

    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """Reset the instances of ``rows`` (batch indices in this shard) with ``seeds``, into the reset arrays."""
        arrays = self._reset_arrays(rows)
        b, steps = self.buffers, []
        for i, seed in zip(rows, seeds):
            self.current = i
            b.term[i] = b.trunc[i] = b.seen[i] = False
            steps.append(reset_instance(self.instances[i - self.lo], self.facts.parallel, seed))
        self._write_rows(arrays, rows, steps)
        self._flags(arrays)

    def _reset_arrays(self, rows: Sequence[int]) -> StepArrays:
        """The reset arrays, cleared for a reset of ``rows``. A fresh arrays gets new arrays only if some row is reset:
        with none, the wrapper does not read it (and zeroing hundreds of agents' observations is not free)."""
        arrays = self.buffers.reset
        if rows or not arrays.fresh:
            arrays.clear(self.lo, self.hi)
        return arrays

    def _actions(self, decoded: Sequence[Sequence | None] | None) -> list[Sequence]:
        """Each group's actions of this shard's rows, ``[gi][i - lo][j]``, as the instances take them: from the wire
        buffers (``decoded[gi]`` for the groups without one)."""
        lo, hi = self.lo, self.hi
        return [g.codec.unwire(wire[lo:hi].copy()) if wire is not None else decoded[gi]  # the env owns a copy
                for gi, (g, wire) in enumerate(zip(self.facts.groups, self.buffers.actions))]

    def _wired_by_agent(self) -> np.ndarray:
        """This shard's rows of the wire buffers, ``(rows, agents)`` in ``facts.agents`` order: for shards whose
        agents all take discrete actions (indices)."""
        actions = np.empty((self.hi - self.lo, len(self.facts.agents)), np.int64)
        for g, wire in zip(self.facts.groups, self.buffers.actions):
            actions[:, g.index] = wire[self.lo:self.hi]
        return actions

    def step(self, decoded: Sequence[Sequence | None] | None = None) -> None:
        """Step every instance with the actions in ``buffers.actions`` (``decoded[gi][i - lo][j]`` for the groups
        without a wire array) into the step arrays."""
        lo, hi, arrays = self.lo, self.hi, self.buffers.step
        actions = self._actions(decoded)
        arrays.clear(lo, hi)
        steps = []
        for i in range(lo, hi):
            self.current = i  # the row a failure is reported for
            steps.append(self._step_instance(self.instances[i - lo], [group[i - lo] for group in actions]))
        self._write_rows(arrays, range(lo, hi), steps)
        self._flags(arrays)

    def step_reset(self, decoded: Sequence[Sequence | None] | None = None,
                   seeds: Sequence[int | None] | None = None) -> None:
        """``step``, then ``reset`` the rows it ended (by the root done rule: ``facts.done_on_any``) and those
        ``buffers.ends`` marks, writing them to ``buffers.reset_rows``; ``seeds[i - lo]``: the seed of row ``i``'s
        reset (``seeds`` None: every reset unseeded)."""
        self.step(decoded)
        b, lo, hi = self.buffers, self.lo, self.hi
        term, trunc = root_ends(b.step.term[lo:hi], b.step.trunc[lo:hi], self.facts.done_on_any)
        rows = done_of(term, trunc) | b.ends[lo:hi]
        b.reset_rows[lo:hi] = rows
        ended = np.flatnonzero(rows).tolist()
        self.reset([lo + i for i in ended], [None] * len(ended) if seeds is None else [seeds[i] for i in ended])

    def _flags(self, arrays: StepArrays) -> None:
        """The episodes' end flags of this shard's rows as they stand now, into ``arrays``."""
        b, lo, hi = self.buffers, self.lo, self.hi
        arrays.term[lo:hi], arrays.trunc[lo:hi] = b.term[lo:hi], b.trunc[lo:hi]

    # -- one instance: PettingZoo's dicts ------------------------------------------------------------
    def _step_instance(self, env: Any, actions: Sequence[Sequence]) -> InstanceStep:
        slot = self.slot
        if self.facts.parallel:
            return InstanceStep(*env.step({agent: actions[gi][j] for agent in env.agents for gi, j in (slot[agent],)}),
                                env.agents, env)
        agent = env.agent_selection
        gi, j = slot[agent]
        env.step(None if env.terminations[agent] or env.truncations[agent] else actions[gi][j])
        return aec_view(env)

    def _write_rows(self, f: StepArrays, rows: Sequence[int], steps: Sequence[InstanceStep]) -> None:
        """Rows ``rows`` of arrays ``f`` (and of the episode flags) from their instances' steps: the rows where every
        agent is in the episode and observed (the common case) together, one assignment per entry from nested lists
        of the dicts' values; the others (agents dead or gone, a parallel episode's last step) one by one."""
        facts, b, everyone = self.facts, self.buffers, self.everyone
        agents, n_agents = facts.agents, len(facts.agents)
        full, whole = [], []
        for i, step in zip(rows, steps):
            if len(step.env.agents) == n_agents and step.obs.keys() >= everyone:
                full.append(i)
                whole.append(step)
            else:
                self._write(f, i, step)
        if f.state is not None:
            for i, step in zip(rows, steps):
                f.state[i] = state_of(step.env)
        if not full:
            return
        at = batch_index(full)
        b.live[at] = b.seen[at] = True
        if facts.parallel:  # every agent acts
            f.acting[at] = True
        else:
            f.acting[full, [self.position[step.env.agent_selection] for step in whole]] = True
        b.term[at] = [list(map(step.terms.get, agents, repeat(False))) for step in whole]
        b.trunc[at] = [list(map(step.truncs.get, agents, repeat(False))) for step in whole]
        f.reward[at] = [list(map(step.rewards.get, agents, repeat(0.0))) for step in whole]
        for gi, g in enumerate(facts.groups):
            for leaf, buf in zip(g.obs.leaves, f.obs[gi]):
                if leaf.whole:
                    buf[at] = [list(map(step.obs.__getitem__, g.agents)) for step in whole]
                else:
                    buf[at] = [[leaf.read(step.obs[agent]) for agent in g.agents] for step in whole]
            if g.info or g.mask_shape is not None:
                for i, step in zip(full, whole):
                    present = list(map(step.obs.__getitem__, g.agents))
                    self._extras(f, gi, g, i, slice(None), g.agents, g.index, present, step.infos)

    def _write(self, f: StepArrays, i: int, step: InstanceStep) -> None:
        """Row ``i`` of arrays ``f`` (its state aside) and of the episode flags from one instance's step, whoever is
        in it: the dicts read with ``map``, each leaf written in one assignment per group (MAgent2: hundreds of agents
        in a group, some dead)."""
        facts, b, index_of = self.facts, self.buffers, self.position.__getitem__
        agent_obs, rewards, terms, truncs, agent_infos, acting, env = step
        live, term, trunc, seen = b.live[i], b.term[i], b.trunc[i], b.seen[i]  # row views
        live[:] = False
        live[list(map(index_of, env.agents))] = True
        f.acting[i, list(map(index_of, acting))] = True
        reward = f.reward[i]
        for gi, g in enumerate(facts.groups):
            members, ks = g.agents, g.index
            if agent_obs.keys() >= g.names:  # every member observed: the common case
                js: slice | list[int] = slice(None)
            else:
                js = self._left(g, i, agent_obs, term, trunc, seen)
                if not js:
                    continue
                members, ks = [members[j] for j in js], ks[js]
            present = list(map(agent_obs.__getitem__, members))
            for leaf, buf in zip(g.obs.leaves, f.obs[gi]):
                buf[i, js] = present if leaf.whole else [leaf.read(value) for value in present]
            seen[ks] = True
            term[ks] = list(map(terms.get, members, repeat(False)))
            trunc[ks] = list(map(truncs.get, members, repeat(False)))
            reward[ks] = list(map(rewards.get, members, repeat(0.0)))
            if g.info or g.mask_shape is not None:
                self._extras(f, gi, g, i, js, members, ks, present, agent_infos)

    def _extras(self, f: StepArrays, gi: int, g: Group, i: int, js: slice | list[int], members: Sequence[str],
                ks: np.ndarray, present: list, agent_infos: dict) -> None:
        """Row ``i``'s numeric infos and action masks of group ``g``'s agents ``members`` (at ``js`` in the group,
        ``ks`` in the batch; ``present``: their observations); the acting flags must be written already."""
        infos = [agent_infos.get(agent) or {} for agent in members]
        for (key, _), buf in zip(g.info, f.infos[gi]):
            row = buf[i, js]  # a copy where js is a list: written back below
            for j, info in enumerate(infos):
                if key in info:
                    row[j] = info[key]
            buf[i, js] = row
        if g.mask_shape is not None:
            acts = f.acting[i]
            at = range(len(members)) if isinstance(js, slice) else js
            for j, k, value, info in zip(at, ks, present, infos):
                if acts[k]:
                    mask = info.get(ACTION_MASK) if g.mask_from_info else g.obs.mask_leaf.read(value)
                    if mask is not None:
                        f.action_mask[gi][i, j] = mask

    def _left(self, g: Group, i: int, agent_obs: dict, term: np.ndarray, trunc: np.ndarray, seen: np.ndarray
              ) -> list[int]:
        """The positions in group ``g`` of the agents ``agent_obs`` has; the others are not (or no longer) in the
        episode: an error without ``use_mask``, else an agent seen in this episode that left without an end flag is
        marked terminated."""
        js = []
        for j, agent in enumerate(g.agents):
            if agent in agent_obs:
                js.append(j)
                continue
            if not self.facts.use_mask:
                raise ValueError(dead_message(i, [agent]))
            k = g.index[j]
            if seen[k] and not (term[k] or trunc[k]):
                term[k] = True  # left without saying why
        return js

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
