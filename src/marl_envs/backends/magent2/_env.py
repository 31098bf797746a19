"""The magent2 backend's env classes and ``env_names``; see ``marl_envs.backends.magent2``."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ..pettingzoo import BatchFacts, Buffers, StepArrays, PettingZooEnv, Shard, Task, builds, state_of

__all__ = ["MAgent2Env", "env_names", "tasks"]


def _keywords(module: str) -> dict[str, Any]:
    """An env's keywords: its ``parallel_env``'s, and the rewards its ``**reward_args`` pass on to its module's
    ``get_config`` (``step_reward``, ``attack_penalty``, ...). ``seed`` is left out: the env's own ``seed`` seeds
    the instances."""
    parallel_env = importlib.import_module(module).parallel_env
    keywords = {}
    for factory in (parallel_env, getattr(inspect.getmodule(parallel_env), "get_config", None)):
        if factory is not None:
            for name, p in inspect.signature(factory).parameters.items():
                if name != "seed" and p.kind is not p.VAR_KEYWORD:
                    keywords.setdefault(name, p.default)
    return keywords


@functools.cache
def tasks() -> dict[str, Task]:
    """Every MAgent2 env module (``battle_v4``, ...) whose env builds here, by name."""
    import magent2.environments as package

    found = {}
    for module in pkgutil.iter_modules(package.__path__):
        if not re.fullmatch(r"\w+_v\d+", module.name):
            continue
        mod = importlib.import_module(f"{package.__name__}.{module.name}")
        if builds(mod.env):
            found[module.name] = Task(module.name, mod.env, mod.parallel_env, mod.__name__,
                                      keywords=functools.partial(_keywords, mod.__name__), family="magent2")
    return found


class TeamShard(Shard):
    """The shard of MAgent2 instances: a step read from the grid's own arrays, written straight into the step arrays.

    MAgent2's ``step`` copies every team's observations out of the grid, then splits them, the rewards and the end
    flags into a dict entry per agent (hundreds). Here a step does what that ``step`` does to the instance (the
    actions of the agents alive, by team; the grid's step; the end flags, the observations and rewards of the agents
    that were in it; the dead cleared; ``agents`` and ``team_sizes`` kept), but copies each team's observations once,
    from the grid into the group's batch. The data is what the generic path writes from the dicts (a test compares
    the two with agents dying); resets go through it.
    """

    def __init__(self, instances: Sequence[Any], lo: int, facts: BatchFacts, buffers: Buffers):
        super().__init__(instances, lo, facts, buffers)
        from magent2.environments.magent_env import magent_parallel_env

        N = len(facts.agents)
        self.direct = (facts.parallel and all(isinstance(view, magent_parallel_env) for view in self.instances)
                       and all(not g.info and g.mask_shape is None and len(g.obs.leaves) == 1 and g.obs.leaves[0].whole
                               for g in facts.groups))
        self.group_of, self.slot_of = np.zeros(N, np.intp), np.zeros(N, np.intp)
        for gi, g in enumerate(facts.groups):
            self.group_of[g.index], self.slot_of[g.index] = gi, np.arange(len(g.agents))

    def step(self, decoded: Sequence[Sequence | None] | None = None) -> None:
        if not self.direct:
            super().step(decoded)
            return
        lo, hi, arrays = self.lo, self.hi, self.buffers.step
        actions = self._wired_by_agent()
        arrays.clear(lo, hi)
        for i in range(lo, hi):
            self.current = i
            self._step_row(arrays, i, self.instances[i - lo], actions[i - lo])
        self._flags(arrays)

    def _step_row(self, f: StepArrays, i: int, view: Any, actions: np.ndarray) -> None:
        b, position, grid, N = self.buffers, self.position, view.env, len(self.facts.agents)
        before = np.fromiter(map(position.__getitem__, view.agents), np.intp, len(view.agents))
        ordered = actions[before].astype(np.int32)  # MAgent2's order: the agents alive, team after team
        start = 0
        for handle, size in zip(view.handles, view.team_sizes):
            grid.set_action(handle, ordered[start:start + size])
            start += size
        view.frames += 1
        over = grid.step()
        truncated = view.frames >= view.max_cycles
        dead = np.ones(N, bool)
        if not over:
            for t, handle in enumerate(view.handles):
                ids = grid.get_agent_id(handle)
                dead[ids] = ~grid.get_alive(handle)
                view.team_sizes[t] = len(ids) - int(dead[ids].sum())
        reward = np.zeros(N, np.float32)
        for handle in view.handles:
            ids = grid.get_agent_id(handle)
            self._observe(f, i, view, handle, ids)
            reward[ids] = grid.get_reward(handle)
        grid.clear_dead()
        term, trunc, seen = b.term[i], b.trunc[i], b.seen[i]
        gone = np.ones(N, bool)
        gone[before] = False
        term[gone & seen & ~(term | trunc)] = True  # left without saying why (MAgent2 always says)
        term[before], trunc[before], seen[before] = dead[before], truncated, True
        f.reward[i, before] = reward[before]
        live = np.zeros(N, bool)
        if not truncated:
            live[before] = ~dead[before]
        b.live[i] = f.acting[i] = live
        view.agents = [view.possible_agents[k] for k in np.flatnonzero(live)]
        if f.state is not None:
            f.state[i] = state_of(view)

    def _observe(self, f: StepArrays, i: int, view: Any, handle: Any, ids: np.ndarray) -> None:
        """The observations of a team's agents ``ids`` (global), built as MAgent2 builds them, into their groups."""
        grid_view, features = view.env.get_observation(handle)
        if view.minimap_mode and not view.extra_features:
            features = features[:, -2:]
        if view.minimap_mode or view.extra_features:
            tiled = np.broadcast_to(features[:, None, None, :], (*grid_view.shape[:3], features.shape[1]))
            obs = np.concatenate([grid_view, tiled], axis=-1)
        else:
            obs = grid_view
        groups = self.group_of[ids]
        for gi in np.unique(groups).tolist():
            chosen = groups == gi
            f.obs[gi][0][i, self.slot_of[ids[chosen]]] = obs[chosen]


class MAgent2Env(PettingZooEnv):
    """A MAgent2 env by name, ``num_envs`` instances batched, dead agents masked; the arguments are
    :class:`~marl_envs.backends.pettingzoo.PettingZooEnv`'s, the task's keywords its ``raw_env``'s (``map_size``,
    ``max_cycles``, ``minimap_mode``, the rewards, ...)."""

    family: ClassVar[str] = "magent2"
    default_use_mask: ClassVar[bool | None] = True
    default_done_on_any: ClassVar[bool | None] = False
    teams_by_prefix: ClassVar[bool] = True
    shard_class = TeamShard

    @classmethod
    def known_tasks(cls) -> dict[str, Task]:
        return tasks()


def env_names() -> list[str]:
    """Every MAgent2 env that builds here."""
    return list(tasks())

