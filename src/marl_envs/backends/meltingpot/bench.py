"""The Melting Pot reference loops of ``marl_envs.bench``: the raw substrates stepped by hand, TorchRL's
``MeltingpotEnv`` (one per env, where TorchRL is installed), and ours with the substrates in worker processes."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from tensordict import TensorDictBase

from ...bench import Loop, References
from ..pettingzoo.bench import with_workers
from ._env import MeltingpotEnv
from ._library import build, row_seed


class _ByHand:
    """What a user writes without this library: one substrate per env, stepped with the same pre-drawn actions as
    lists of ints, reset when its timestep is the last."""

    def __init__(self, env: MeltingpotEnv, plan: Sequence[TensorDictBase]):
        # Melting Pot's substrate.build with a seed: its builder and wrappers, stepped by substrate.step
        self.substrates = [build(env.substrate, env.roles, row_seed(0, i)) for i in range(env.num_envs)]
        for substrate in self.substrates:
            substrate.reset()
        order = [p for members in env.group_map.values() for p in members]
        where = [order.index(f"player_{k}") for k in range(len(env.roles))]
        self.drawn = [[[row[k] for k in where] for row in
                       _joined(td, env).tolist()] for td in plan]

    def __call__(self, steps: range) -> None:
        for t in steps:
            for substrate, actions in zip(self.substrates, self.drawn[t]):
                if substrate.step(actions).last():
                    substrate.reset()

    def sync(self) -> None:
        """Nothing is queued: the substrates step synchronously."""


def _joined(td: TensorDictBase, env: MeltingpotEnv):
    import torch

    return torch.cat([td.get((group, "action")) for group in env.group_map], dim=1)


class _TorchRL:
    """TorchRL's ``MeltingpotEnv``, one per env (its batch is ``()``), ``step_and_maybe_reset`` with the plan."""

    def __init__(self, env: MeltingpotEnv, plan: Sequence[TensorDictBase]):
        from torchrl.envs.libs.meltingpot import MeltingpotEnv as TorchRLMeltingpotEnv

        self.envs = [TorchRLMeltingpotEnv(env.substrate) for _ in range(env.num_envs)]
        self.tds = [e.reset() for e in self.envs]
        self.drawn = [_joined(td, env) for td in plan]

    def __call__(self, steps: range) -> None:
        for t in steps:
            for i, e in enumerate(self.envs):
                td = self.tds[i]
                td["agents", "action"] = self.drawn[t][i]
                self.tds[i] = e.step_and_maybe_reset(td)[1]

    def sync(self) -> None:
        """Nothing is queued."""


def _loops(env: MeltingpotEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    loops: dict[str, Loop] = {"raw Melting Pot substrate loop": _ByHand(env, plan)}
    if importlib.util.find_spec("torchrl") is not None:
        loops["TorchRL MeltingpotEnv"] = _TorchRL(env, plan)
    if env.num_workers == 0 and env.num_envs > 1:
        loops = with_workers(env, plan, loops)
    return loops, {}


#: Substrates are Python-driven Lua simulations, one per env: a small default batch.
BENCH = References(default_num_envs=2, loops=_loops, legal_actions=False)
