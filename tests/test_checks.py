"""check_env_specs must fail, naming the key, for each broken promise."""

import pytest
import torch
from envs import Drift, PredatorPreyCount

from marl_envs import check_env_specs


class WrongDtype(Drift):
    def _step(self, td):
        out = super()._step(td)
        out["agents", "observation"] = out["agents", "observation"].double()
        return out


class DoneAfterReset(Drift):
    def _reset(self, mask):
        out = super()._reset(mask)
        out["terminated"] = torch.ones(self.num_envs, 1, dtype=torch.bool)
        return out


class Undeclared(Drift):
    def _step(self, td):
        out = super()._step(td)
        out["agents", "secret"] = torch.zeros(self.num_envs, 2, 1)
        return out


class Unseeded(Drift):
    def _set_seed(self, seed):
        pass  # forgets to seed its generator


class OutOfSpec(PredatorPreyCount):
    def _step(self, td):
        out = super()._step(td)
        out["prey", "action_mask"] = torch.full_like(out["prey", "action_mask"], 2, dtype=torch.int64).bool()
        out["prey", "observation"] = out["prey", "observation"][:, :, :2]
        return out


@pytest.mark.parametrize(
    "env_cls, seed, match",
    [
        (WrongDtype, None, r"\('agents', 'observation'\): dtype in the step next data: expected torch.float32, observed torch.float64"),
        (DoneAfterReset, None, r"'done': flag after a full reset: expected all False"),
        (Undeclared, None, r"\('agents', 'secret'\): entry in the step next data that no spec declares"),
        (Unseeded, 3, r"value in two rollouts after set_seed\(3\) with the same actions"),
        (OutOfSpec, None, r"\('prey', 'observation'\): shape in the step next data: expected \(4, 1, 3\), observed \(4, 1, 2\)"),
    ],
)
def test_broken_env_fails_with_key(env_cls, seed, match):
    with pytest.raises(AssertionError, match=match):
        check_env_specs(env_cls(num_envs=4), seed=seed)


def test_allow_done_after_reset_opt_out():
    env = DoneAfterReset(num_envs=2)
    env.allow_done_after_reset = True
    check_env_specs(env)
