"""One rule for a choice an action mask forbids, in every family with masks: refused like an out-of-range action,
naming the key, the env, the agent, the choice and the legal ones, with nothing of that step applied (checked
before the step on the CPU families and with ``validate_actions="immediate"``; inside the compiled step, raised
at the next call, with ``"deferred"``, the JAX families' default)."""

from __future__ import annotations

import pytest
import torch

import marl_envs
from envs import PredatorPreyCount

MASKED = {
    "openspiel/tic_tac_toe": "openspiel",
    "pettingzoo/classic/tictactoe_v3": "pettingzoo",
    "jaxmarl/hanabi": "jaxmarl",
    "jumanji/LevelBasedForaging-v0": "jumanji",
}
#: The one message shape, whatever the family and mode.
REFUSED = (r"action \('agents', 'action'\) of env 0, agent (\d+) \('[^']+'\) was (\d+), which its action mask "
           r"\('agents', 'action_mask'\) forbids; the legal ones: \[[\d, ]+\]")

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning"),
]


def _cases():
    for name, backend in MASKED.items():
        installed = pytest.mark.skipif(not marl_envs.backend_installed(backend), reason=f"{backend} is not installed")
        modes = ["immediate", "deferred"] if backend in ("jaxmarl", "jumanji") else ["immediate"]
        for mode in modes:
            yield pytest.param(name, mode, marks=installed, id=f"{name}-{mode}")


def _forbidden_choice(td) -> tuple[int, int] | None:
    """``(agent, choice)`` of env 0: a choice its mask forbids, for an agent whose action counts."""
    mask = td["agents", "action_mask"][0]
    acting = td.get(("agents", "mask"), None)
    for agent in range(mask.shape[0]):
        if acting is not None and not bool(acting[0, agent].all()):
            continue
        if bool(mask[agent].any()) and not bool(mask[agent].all()):
            return agent, int((~mask[agent]).nonzero()[0])
    return None


def _twins(name: str, mode: str):
    envs = [marl_envs.make(name, num_envs=2, seed=0) for _ in range(2)]
    for env in envs:
        env.validate_actions = mode
    return envs


@pytest.mark.parametrize("name, mode", list(_cases()))
def test_a_masked_out_choice_is_refused_and_nothing_applied(name, mode):
    env, twin = _twins(name, mode)
    td, twin_td = env.reset(), twin.reset()
    for _ in range(20):  # legal play, the same in both, until env 0 has a choice its mask forbids
        found = _forbidden_choice(td)
        if found is not None:
            break
        legal = env.rand_action(td).select(*env.action_keys)
        td = env.step_and_maybe_reset(td.update(legal))[1]
        twin_td = twin.step_and_maybe_reset(twin_td.update(legal))[1]
    assert found is not None, "no forbidden choice came up in 20 steps"
    agent, choice = found
    legal = env.rand_action(td.clone()).select(*env.action_keys)
    bad = legal.clone()
    bad["agents", "action"][0, agent] = choice
    with pytest.raises(ValueError, match=REFUSED) as refused:
        env.step(td.clone().update(bad))
        env.step(td.clone().update(legal))  # deferred: raised at the next call
    assert refused.value.args[0].startswith(f"action ('agents', 'action') of env 0, agent {agent} (")
    assert f" was {choice}, " in refused.value.args[0]
    # nothing of that step applied to env 0: the same legal step gives what it gives in the twin
    ours = env.step(td.clone().update(legal))["next"]
    theirs = twin.step(twin_td.clone().update(legal))["next"]
    for key in ours.keys(True, True):
        assert torch.equal(ours.get(key)[0], theirs.get(key)[0]), key
    env.close()
    twin.close()


@pytest.mark.skipif(not marl_envs.backend_installed("openspiel"), reason="openspiel is not installed")
def test_with_no_check_a_library_error_names_the_env_once():
    """``validate_actions=False`` hands the choice to the library: its refusal comes back once, naming the env."""
    from marl_envs.backends.pettingzoo import InstanceError

    env = marl_envs.make("openspiel/tic_tac_toe", num_envs=2, seed=0)
    env.validate_actions = False
    td = env.step_mdp(env.step(env.rand_action(env.reset())))
    agent, choice = _forbidden_choice(td)
    td = env.rand_action(td)
    td["agents", "action"][0, agent] = choice
    with pytest.raises(InstanceError, match=r"^the PettingZoo instance of env 0 raised in step: SpielError: .*"
                                            r"board_\[move\] == CellState::kEmpty"):
        env.step(td)


class NoMoveOnOddCounts(PredatorPreyCount):
    """The prey has no legal choice (an all-False mask row) on odd counts."""

    def _observe(self):
        data = super()._observe()
        data["prey", "action_mask"] &= (self.count % 2 == 0).view(-1, 1, 1)
        return data


def test_a_row_with_no_legal_choice_takes_any_action():
    """One rule decides what is legal (``marl_envs.specs.legal_choices``): a row that allows nothing allows every
    choice, for the check before the step and for ``rand_action`` alike."""
    env = NoMoveOnOddCounts(num_envs=2)
    td = env.step_mdp(env.rand_step(env.reset()))
    assert not td["prey", "action_mask"].any()  # count 1: no legal choice
    for choice in range(5):
        td["prey", "action"] = torch.full((2, 1), choice)
        env.step(td.clone())
        env.reset()
        td = env.step_mdp(env.rand_step(env.reset()))
    rows = torch.tensor([[True, False, False], [False, False, False]])
    assert marl_envs.specs.legal_choices(rows).tolist() == [[True, False, False], [True, True, True]]
