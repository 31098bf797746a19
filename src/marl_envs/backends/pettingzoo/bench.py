"""The PettingZoo reference loops of ``marl_envs.bench``: a hand-written loop over as many PettingZoo instances,
and (on a machine with several cores) ours with the instances in worker processes. MAgent2 and MaMuJoCo are
PettingZoo envs themselves: their records name ``BENCH``; Level-Based Foraging and RWARE, Gymnasium envs with
tuples of agents, name ``TUPLE_AGENTS``."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from tensordict import TensorDictBase

from ._env import ACTION_MASK, PettingZooEnv
from ._gymnasium import TupleAgentsFamily, raw_env
from ...bench import Loop, OursLoop, References


def _raw(action) -> list:
    """A ``(B, n, ...)`` tensor of actions as a raw loop holds them: ``[i][j]`` an int, or a float32 array."""
    if action.is_floating_point():
        return list(action.numpy().astype(np.float32))
    return action.tolist()


class _ByHand:
    """What a user writes without this library: step each instance with the same pre-drawn actions as Python
    values (parallel tasks; turn-based ones draw legal actions on the fly, as ours does), reset finished ones."""

    def __init__(self, env: PettingZooEnv, plan: Sequence[TensorDictBase]):
        self.parallel = env.parallel
        # only the instances are used: the same task, keywords included
        self.instances = type(env)(env.task, num_envs=env.num_envs, seed=0, **env.task_kwargs).envs
        for i, instance in enumerate(self.instances):
            instance.reset(seed=i)
        keys = env.action_keys
        self.where = {agent: (k, j) for k, members in enumerate(env.group_map.values())
                      for j, agent in enumerate(members)}
        # as a raw loop holds them: discrete actions as Python ints, continuous ones as NumPy arrays (a list would
        # cost gymnasium a cast and a warning per agent step)
        self.drawn = [[_raw(td.get(key)) for key in keys] for td in plan]
        self.rng = np.random.default_rng(0)

    def __call__(self, steps: range) -> None:
        for t in steps:
            for i, instance in enumerate(self.instances):
                if self.parallel:
                    if not instance.agents:
                        instance.reset()
                    drawn, where = self.drawn[t], self.where
                    instance.step({a: drawn[where[a][0]][i][where[a][1]] for a in instance.agents})
                    continue
                if all(instance.terminations.values()) or all(instance.truncations.values()):
                    instance.reset()
                obs, _, term, trunc, info = instance.last()
                mask = obs[ACTION_MASK] if isinstance(obs, dict) and ACTION_MASK in obs else info.get(ACTION_MASK)
                instance.step(None if term or trunc else int(self.rng.choice(np.flatnonzero(mask))))

    def sync(self) -> None:
        """Nothing is queued: PettingZoo steps synchronously."""


def with_workers(env: PettingZooEnv, plan: Sequence[TensorDictBase], loops: dict[str, Loop]) -> dict[str, Loop]:
    """``loops`` and, on a machine with several cores, ours again with the instances in worker processes."""
    workers = min(os.cpu_count() or 1, env.num_envs)
    if workers > 1 and env.num_workers == 0:  # ours again, the instances in worker processes
        twin = type(env)(env.task, num_envs=env.num_envs, seed=0, num_workers=workers, **env.task_kwargs)
        loops[f"marl_envs {type(env).__name__}, num_workers={workers}"] = OursLoop(twin, plan)
    return loops


def _loops(env: PettingZooEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    return with_workers(env, plan, {"raw PettingZoo loop": _ByHand(env, plan)}), {}


#: PettingZoo instances are Python objects, one per env: a small default batch.
BENCH = References(default_num_envs=8, loops=_loops)


class _TupleByHand:
    def __init__(self, env: TupleAgentsFamily, plan: Sequence[TensorDictBase]):
        self.instances = [raw_env(env.task, **env.task_kwargs) for _ in range(env.num_envs)]
        for i, instance in enumerate(self.instances):
            instance.reset(seed=i)
        (key,) = env.action_keys
        self.drawn = [td.get(key).tolist() for td in plan]  # [i][j]: Python ints, as a raw loop holds them

    def __call__(self, steps: range) -> None:
        for t in steps:
            for instance, actions in zip(self.instances, self.drawn[t]):
                if instance.step(actions)[2]:
                    instance.reset()

    def sync(self) -> None:
        """Nothing is queued: the envs step synchronously."""


def _tuple_loops(env: TupleAgentsFamily, plan: Sequence[TensorDictBase], chunks: Sequence[range]
                 ) -> tuple[dict[str, Loop], dict[str, float]]:
    return with_workers(env, plan, {f"raw {env.family} loop": _TupleByHand(env, plan)}), {}


#: Level-Based Foraging and RWARE (``TupleAgentsFamily``): the library's own env classes, one per batch entry, stepped
#: by hand with tuples of the same pre-drawn actions and reset when their step says ``done`` (what a user writes
#: without this library), and ours with the instances in worker processes. One Python env per batch entry: a small
#: default batch.
TUPLE_AGENTS = References(default_num_envs=8, loops=_tuple_loops, legal_actions=False)
