"""check_env_specs must fail, naming the key, for each broken promise."""

import re

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
        (Unseeded, 3, r"\('agents', 'observation'\): value of the data at step 0 in two rollouts after set_seed\(3\) with "
                      r"the same actions: the env is not deterministic: expected -?[\d.]+ at index \(0, 0, 0\), "
                      r"observed -?[\d.]+; 4 of 4 envs differ \(\[0, 1, 2, 3\]\)$"),
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


class FusedDrift(Drift):
    """Drift with its own fused step and reset, as the JAX backends have (``_fused_reset``)."""

    _fused_reset = True

    def _step_reset(self, td, ends):
        out = self._step(td)
        mask = out["terminated"].reshape(-1) if ends is None else out["terminated"].reshape(-1) | ends
        # no reset when none ends: _reset draws from the env's generator, and step_and_maybe_reset does not call it
        return out, self._reset(mask) if bool(mask.any()) else None, mask


class FusedResetDiffers(FusedDrift):
    def _step_reset(self, td, ends):
        out, fresh, mask = super()._step_reset(td, ends)
        if fresh is not None:
            fresh["agents", "observation"] = fresh["agents", "observation"] + 1  # not what _reset gives
        return out, fresh, mask


class FusedIgnoresEnds(FusedDrift):
    def _step_reset(self, td, ends):
        return super()._step_reset(td, None)  # envs reaching max_steps are not reset


class UnseededEpisodes(FusedDrift):
    def _reset(self, mask):
        if mask is None:
            return super()._reset(mask)
        self.pos = torch.where(mask.view(-1, 1, 1), torch.rand(self.pos.shape) - 0.5, self.pos)  # not its generator
        return self._observe()


class ResetsInPlace(FusedDrift):
    def _observe(self, reward=None):
        data = super()._observe(reward)
        data["agents", "observation"] = self.pos  # its state itself, not a copy: the reset below writes into it
        return data

    def _reset(self, mask):
        if mask is None:
            return super()._reset(mask)
        self.pos[mask] = torch.rand(self.pos[mask].shape, generator=self.rng) - 0.5
        return self._observe()


def test_fused_step_reset_passes():
    env = FusedDrift(num_envs=4, max_steps=2)
    check_env_specs(env, seed=0)
    assert env.rollout(5, break_when_any_done=False).batch_size == (4, 5)  # still usable


@pytest.mark.parametrize(
    "env_cls, match",
    [
        # max_steps=5 with steps=3: the comparison runs 6 steps by default, the truncation reset is at step 4
        (FusedResetDiffers, r"\('agents', 'observation'\): value of the step_and_maybe_reset next root at step 4 "
                            r"against step\(\) then reset\(\) of the done envs after set_seed\(0\): expected "
                            r"-?[\d.]+ at index \(0, 0, 0\), observed -?[\d.]+; 4 of 4 envs differ"),
        (FusedIgnoresEnds, r"\('agents', 'observation'\): value of the step_and_maybe_reset next root at step 4"),
        (ResetsInPlace, r"\('agents', 'observation'\): value of the step's next data at step 4 after reset\(step_mdp\(td\)\) of the done envs, which must leave it as it was"),
        # not a fused-path fault: two replays of step then reset differ, and the message says so
        (UnseededEpisodes, r"\('agents', 'observation'\): value of the step\(\) then reset\(\) of the done envs, next "
                           r"root at step 4 in two replays of the same actions after set_seed\(0\): the env is not "
                           r"deterministic: expected .*; 4 of 4 envs differ"),
    ],
)
def test_wrong_fused_step_reset_fails(env_cls, match):
    with pytest.raises(AssertionError, match=match):
        check_env_specs(env_cls(num_envs=4, max_steps=5), seed=0)


def test_reset_steps_must_be_positive():
    with pytest.raises(ValueError, match=r"reset_steps must be a positive int or None, got 0"):
        check_env_specs(FusedDrift(num_envs=2), seed=0, reset_steps=0)


class UnseededMasked(PredatorPreyCount):
    """Masks that follow an unseeded draw: a second rollout's masks differ, so the first one's actions may be
    forbidden there."""

    def _set_seed(self, seed):
        pass

    def _observe(self):
        data = super()._observe()
        data["prey", "action_mask"][..., :4] = (self.threshold.view(-1, 1, 1) % 2 == 0)
        return data


class NeverTerminates(Drift):
    def _step(self, td):
        return super()._step(td).exclude("terminated")  # forgets the root "terminated"


def test_a_masked_env_that_is_not_deterministic_is_told_from_an_illegal_action():
    env = UnseededMasked(num_envs=64)
    with pytest.raises(AssertionError) as failed:
        check_env_specs(env, seed=0)
    message = failed.value.args[0]
    assert "the env is not deterministic" in message and "forbids" not in message
    assert len(message.splitlines()) == 1 and len(message) < 400, message  # the first difference, not every tensor
    assert re.match(r"\('\w+', '\w+'\): value of the data at step 0 in two rollouts after set_seed\(0\) with the same "
                    r"actions: the env is not deterministic: expected [\d.]+ at index \([\d, ]+\), observed [\d.]+; "
                    r"\d+ of 64 envs differ \(\[[\d, ]+\](, \.\.\.)?\)$", message), message


def test_a_step_that_omits_the_root_terminated_is_refused():
    with pytest.raises(AssertionError, match=r"^'terminated': entry of what NeverTerminates._step returns: expected "
                                             r"present \(all False for an env that never ends on its own: the library "
                                             r"cannot tell an omission from 'never'\), observed absent; it gave the "
                                             r"done entries \[\]$"):
        check_env_specs(NeverTerminates(num_envs=4))
