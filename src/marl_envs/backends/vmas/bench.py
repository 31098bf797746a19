"""The VMAS reference loops of ``marl_envs.bench``: raw VMAS stepping the same actions, with and without resets."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import vmas
from tensordict import TensorDictBase

from ._env import VmasEnv
from ...bench import Loop, References


class _RawVmas:
    """A raw VMAS env of the same scenario, keywords and seed stepping the same actions. With ``resets``, done
    envs are reset with ``reset_at`` one by one and the observations read again (what a user writes by hand,
    and what TorchRL's wrapper does); without, it never resets (the ceiling)."""

    def __init__(self, env: VmasEnv, plan: Sequence[TensorDictBase], resets: bool):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # VMAS's notices about the scenario's keywords are not measured
            self.raw = vmas.make_env(env.scenario_name, num_envs=env.num_envs, device=env.device, seed=0,
                                     **env.vmas_kwargs)
        self.raw.reset()
        self.actions = [env.vmas_actions(td) for td in plan]
        self.resets = resets
        self.device = env.device

    def __call__(self, steps: range) -> None:
        raw = self.raw
        for t in steps:
            _, _, dones, _ = raw.step(list(self.actions[t]))
            if self.resets:
                done_envs = dones.nonzero().flatten().tolist()
                for i in done_envs:
                    raw.reset_at(i, return_observations=False)
                if done_envs:
                    raw.get_from_scenario(get_observations=True, get_rewards=False, get_infos=True, get_dones=False)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _loops(env: VmasEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    return {
        "raw vmas, reset_at loop over done envs": _RawVmas(env, plan, resets=True),
        "raw vmas, no resets": _RawVmas(env, plan, resets=False),
    }, {}


BENCH = References(default_num_envs=4096, loops=_loops)
