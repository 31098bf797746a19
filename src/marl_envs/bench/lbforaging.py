"""The reference loops of Level-Based Foraging and RWARE: the library's own env classes, one per batch entry,
stepped by hand with tuples of the same pre-drawn actions and reset when their step says ``done`` (what a user
writes without this library), and ours with the instances in worker processes."""

from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDictBase

from ..backends.pettingzoo._gymnasium import TupleAgentsFamily, raw_env
from . import Loop, References
from .pettingzoo import with_workers


class _ByHand:
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


def _loops(env: TupleAgentsFamily, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    return with_workers(env, plan, {f"raw {env.family} loop": _ByHand(env, plan)}), {}


#: One Python env per batch entry: a small default batch.
BENCH = References(default_num_envs=8, loops=_loops, legal_actions=False)
