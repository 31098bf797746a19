"""Every rule of CONTRACT sections 3, 4 and 6, on test envs written only against the backend hook."""

import pytest
import torch
from envs import Drift, PredatorPreyCount
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import marl_envs
from marl_envs.specs import Composite, Unbounded

B = 6


@pytest.fixture
def env():
    env = PredatorPreyCount(num_envs=B, max_steps=5)
    env.set_seed(0)
    return env


def test_key_properties(env):
    assert env.batch_size == torch.Size([B]) and env.num_envs == B
    assert env.group_map == {"predator": ["predator_0", "predator_1"], "prey": ["prey_0"]}
    assert env.agent_names == ["predator_0", "predator_1", "prey_0"] and env.n_agents == 3
    assert env.action_keys == [("predator", "action"), ("prey", "action")]
    assert env.reward_keys == [("predator", "reward"), ("prey", "reward")]
    assert env.done_keys == ["done", "terminated", "truncated", ("prey", "done"), ("prey", "terminated"), ("prey", "truncated")]
    assert env.reset_keys == ["_reset", ("prey", "_reset")]
    assert env.observation_keys == ["state", ("predator", "observation"), ("prey", "observation"), ("prey", "action_mask")]
    assert env.done_key == "done"
    assert env.full_action_spec["predator", "action"].shape == (B, 2, 2)
    assert env.full_done_spec["prey", "done"].shape == (B, 1, 1)
    assert env.full_done_spec["done"].shape == (B, 1)


def test_single_key_properties_and_leaf_specs():
    env = Drift(num_envs=3, n_agents=2)
    assert env.action_key == ("agents", "action") and env.reward_key == ("agents", "reward")
    assert env.action_spec == env.full_action_spec[env.action_key]
    assert env.reward_spec == env.full_reward_spec[env.reward_key]
    assert env.observation_spec == env.full_observation_spec["agents", "observation"]
    assert env.reset_keys == ["_reset"] and env.done_keys == ["done", "terminated", "truncated"]
    assert isinstance(env.done_spec, Composite)


def test_several_keys_raise_key_error(env):
    with pytest.raises(KeyError, match=r"has 2 action keys .*; use env.action_keys instead of env.action_key"):
        env.action_key
    with pytest.raises(KeyError, match="use env.reward_keys instead of env.reward_key"):
        env.reward_key
    assert isinstance(env.action_spec, Composite) and isinstance(env.reward_spec, Composite)


def test_reset_layout_and_done_false(env):
    td = env.reset()
    assert td.batch_size == (B,)
    assert td["predator"].batch_size == (B, 2) and td["prey"].batch_size == (B, 1)
    for key in env.done_keys:
        assert not td[key].any(), key
    assert ("predator", "reward") not in td.keys(True)


def test_step_writes_next_and_keeps_input(env):
    td = env.rand_action(env.reset())
    action = td["predator", "action"].clone()
    out = env.step(td)
    assert out is td and torch.equal(td["predator", "action"], action)
    assert td["next", "predator", "reward"].shape == (B, 2, 1)
    assert td["next", "prey", "reward"].shape == (B, 1, 1)
    assert td["next", "done"].shape == (B, 1) and td["next", "prey", "done"].shape == (B, 1, 1)


def test_done_is_terminated_or_truncated_at_every_level_and_max_steps_truncates():
    env = PredatorPreyCount(num_envs=B, max_steps=4)
    env.set_seed(1)
    data = env.rollout(4, break_when_any_done=False)
    nxt = data["next"]
    for prefix in [(), ("prey",)]:
        done, term, trunc = (nxt[(*prefix, k)] for k in ("done", "terminated", "truncated"))
        assert torch.equal(done, term | trunc)
    # every env that ran 4 steps without terminating is truncated, not terminated
    last = nxt[:, -1]
    untouched = ~nxt["done"][:, :-1].any(1).squeeze(-1)
    assert untouched.any()
    assert last["truncated"][untouched].all() and not last["terminated"][untouched & ~last["terminated"].squeeze(-1)].any()
    assert last["prey", "truncated"][untouched].all()
    assert not nxt["truncated"][:, :-1][untouched].any()


def test_terminated_is_the_backend_end(env):
    data = env.rollout(10, break_when_any_done=False)
    nxt = data["next"]
    count = nxt["state"][..., 0]
    threshold = nxt["state"][..., 1]
    assert torch.equal(nxt["terminated"].squeeze(-1), count >= threshold)


def test_root_reset_supersedes_nested(env):
    td = env.step_mdp(env.rand_step(env.reset()))
    before = td.clone()
    root = torch.zeros(B, 1, dtype=torch.bool)
    root[1] = True
    nested = torch.ones(B, 1, 1, dtype=torch.bool)
    td["_reset"] = root
    td["prey", "_reset"] = nested
    out = env.reset(td)
    changed = [not torch.equal(out["state"][i], before["state"][i]) for i in range(B)]
    assert changed == [False, True, False, False, False, False]
    assert "_reset" not in out.keys() and ("prey", "_reset") not in out.keys(True)


def test_nested_reset_alone_resets_env_of_requesting_agent(env):
    td = env.step_mdp(env.rand_step(env.reset()))
    before = td.clone()
    nested = torch.zeros(B, 1, 1, dtype=torch.bool)
    nested[[0, 4]] = True
    td["prey", "_reset"] = nested
    out = env.reset(td)
    assert out["state"][[0, 4], 0].eq(0).all()
    keep = [1, 2, 3, 5]
    for key in before.keys(True, True):
        assert torch.equal(out[key][keep], before[key][keep]), key


def test_reset_without_reset_key_resets_all_and_drops_next(env):
    td = env.rand_step(env.reset())
    out = env.reset(td)
    assert "next" not in out.keys()
    assert out["state"][:, 0].eq(0).all()


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.booleans(), min_size=B, max_size=B), nested=st.booleans(), steps=st.integers(1, 3))
def test_random_partial_resets_keep_other_rows(rows, nested, steps):
    env = PredatorPreyCount(num_envs=B)
    env.set_seed(3)
    td = env.reset()
    for _ in range(steps):
        td = env.step_mdp(env.rand_step(td))
    before = td.clone()
    mask = torch.tensor(rows)
    if nested:
        td["prey", "_reset"] = mask.view(B, 1, 1)
    else:
        td["_reset"] = mask.view(B, 1)
    out = env.reset(td)
    for key in before.keys(True, True):
        assert torch.equal(out[key][~mask], before[key][~mask]), key
    assert out["state"][mask, 0].eq(0).all()
    for key in env.done_keys:
        assert not out[key][mask].any()
    # step counters restart only for reset rows
    assert torch.equal(env._executor.step_counts(), torch.where(mask, 0, steps))


def test_step_and_maybe_reset_keeps_terminal_observation():
    env = PredatorPreyCount(num_envs=B)
    env.set_seed(5)
    td = env.reset()
    saw_done = False
    for _ in range(12):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        done = td["next", "done"].squeeze(-1)
        assert torch.equal(td_next["predator", "action"], td["predator", "action"])
        assert ("predator", "reward") not in td_next.keys(True)
        if done.any():
            saw_done = True
            count_terminal = td["next", "state"][done, 0]
            assert (count_terminal > 0).all()  # the terminal observation is kept in next
            assert td_next["state"][done, 0].eq(0).all()  # the new episode starts at 0
            assert not td_next["done"][done].any() and not td_next["prey", "done"][done].any()
        assert torch.equal(td_next["state"][~done], td["next", "state"][~done])
        td = td_next
    assert saw_done


def test_group_done_alone_does_not_restart_env():
    class GroupEnds(PredatorPreyCount):
        def _step(self, td):
            out = super()._step(td)
            out["terminated"] = torch.zeros_like(out["terminated"])  # the prey ends, the env goes on
            return out

    env = GroupEnds(num_envs=2)
    env.set_seed(0)
    td = env.reset()
    for _ in range(10):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        assert torch.equal(td_next["state"], td["next", "state"])
        td = td_next
    assert td["prey", "done"].all()


def test_rollout_modes():
    env = PredatorPreyCount(num_envs=4)
    env.set_seed(0)
    data = env.rollout(50)  # break_when_any_done by default
    any_done = data["next", "done"].squeeze(-1).any(0)
    assert any_done[-1] and not any_done[:-1].any()  # stopped right after the first end
    assert data.names == [None, "time"]

    env.set_seed(0)
    data = env.rollout(50, break_when_all_done=True)
    done = data["next", "done"].squeeze(-1)
    assert done[:, -1].all()  # every env finished by the last step ...
    firsts = done.int().argmax(1)
    for i, t in enumerate(firsts.tolist()):  # ... and its data is frozen from its first end on
        for later in range(t + 1, data.batch_size[1]):
            assert torch.equal(data["next", "state"][i, later], data["next", "state"][i, t])

    data = env.rollout(17, break_when_any_done=False)
    assert data.batch_size == (4, 17)
    assert data["next", "done"].sum() > 4  # episodes restarted during the rollout


def test_rollout_policy_and_callback():
    env = Drift(num_envs=3, n_agents=2)
    seen = []

    def policy(td):
        td["agents", "action"] = torch.full((3, 2, 1), 0.5)
        return td

    data = env.rollout(4, policy, callback=lambda e, td: seen.append(td["next", "agents", "observation"].clone()))
    assert len(seen) == 4
    diffs = data["next", "agents", "observation"] - data["agents", "observation"]
    assert torch.allclose(diffs, torch.full_like(diffs, 0.5))


def test_rollout_from_given_tensordict():
    env = Drift(num_envs=2)
    td = env.reset()
    data = env.rollout(3, auto_reset=False, tensordict=td, break_when_any_done=False)
    assert torch.equal(data["agents", "observation"][:, 0], td["agents", "observation"])
    with pytest.raises(ValueError, match="rollout\\(auto_reset=False\\) needs the tensordict to start from"):
        env.rollout(3, auto_reset=False)
    with pytest.raises(ValueError, match="pass auto_reset=False to start from it"):
        env.rollout(3, tensordict=td)
    with pytest.raises(ValueError, match="break_when_any_done and break_when_all_done are exclusive"):
        env.rollout(3, break_when_any_done=True, break_when_all_done=True)
    with pytest.raises(ValueError, match="max_steps must be a positive int, got 0"):
        env.rollout(0)


def test_rand_action_honours_action_mask(env):
    td = env.reset()
    td["prey", "action_mask"] = torch.zeros(B, 1, 5, dtype=torch.bool)
    td["prey", "action_mask"][..., 2] = True
    for _ in range(5):
        assert env.rand_action(td)["prey", "action"].eq(2).all()


def test_set_seed_determinism():
    def run(seed):
        env = PredatorPreyCount(num_envs=B, max_steps=7)
        env.set_seed(seed)
        return env.rollout(15, break_when_any_done=False)

    assert (run(1) == run(1)).all()
    assert not torch.equal(run(1)["next", "predator", "reward"], run(2)["next", "predator", "reward"])
    with pytest.raises(TypeError, match="seed must be an int, got 1.5"):
        PredatorPreyCount(num_envs=1).set_seed(1.5)


def test_single_agent_root_layout():
    env = Drift(num_envs=4, single_agent=True)
    assert env.group_map == {} and env.action_key == "action" and env.reward_key == "reward"
    data = env.rollout(3, break_when_any_done=False)
    assert data["next", "reward"].shape == (4, 3, 1) and data["action"].shape == (4, 3, 1)
    marl_envs.check_env_specs(env, seed=0)


@pytest.mark.parametrize("make_env", [lambda: PredatorPreyCount(num_envs=5, max_steps=3), lambda: Drift(num_envs=2)])
def test_check_env_specs_passes(make_env):
    marl_envs.check_env_specs(make_env(), seed=7)


# ---------------------------------------------------------------------------------------------------
# Bad input: the right exception, the bad and the expected value, nothing half-applied
# ---------------------------------------------------------------------------------------------------
def _assert_env_still_works(env):
    td = env.reset()
    env.rand_step(td)


def test_wrong_batch_size(env):
    td = TensorDict({}, batch_size=[B + 1])
    with pytest.raises(ValueError, match=r"env.step\(\) got a TensorDict of batch size \(7,\); this env has batch size \(6,\)"):
        env.step(td)
    with pytest.raises(ValueError, match=r"env.reset\(\) got a TensorDict of batch size \(7,\)"):
        env.reset(td)
    with pytest.raises(TypeError, match="env.step\\(\\) takes a TensorDict, got dict"):
        env.step({})


def test_missing_action(env):
    td = env.reset()
    td["predator", "action"] = torch.zeros(B, 2, 2)
    with pytest.raises(KeyError, match=r"action \('prey', 'action'\) is missing"):
        env.step(td)
    _assert_env_still_works(env)


@pytest.mark.parametrize(
    "value, match",
    [
        (torch.zeros(B, 2, 3), r"has shape \(6, 2, 3\), dtype torch.float32, device cpu; expected shape \(6, 2, 2\)"),
        (torch.zeros(B, 2, 2, dtype=torch.float64), r"dtype torch.float64.*expected shape \(6, 2, 2\), dtype torch.float32"),
        (torch.full((B, 2, 2), float("nan")), r"action \('predator', 'action'\) has 24 invalid value\(s\), e.g. \[nan, nan, nan\] .* expected finite numbers"),
        (torch.zeros(B, 2, 2).index_fill_(0, torch.tensor([1]), float("inf")),
         r"has 4 invalid value\(s\), e.g. \[inf, inf, inf\] at index \[1, 0, 0\]; expected finite numbers \(no NaN, inf or -inf\)"),
        (torch.full((B, 2, 2), -float("inf")), r"has 24 invalid value\(s\), e.g. \[-inf, -inf, -inf\]"),
    ],
)
def test_bad_continuous_action(env, value, match):
    td = env.rand_action(env.reset())
    td["predator", "action"] = value
    count = env._executor.step_counts()
    with pytest.raises(ValueError, match=match):
        env.step(td)
    assert torch.equal(env._executor.step_counts(), count) and "next" not in td.keys()
    _assert_env_still_works(env)


def test_out_of_range_discrete_action(env):
    td = env.rand_action(env.reset())
    td["prey", "action"] = torch.full((B, 1), 5)
    with pytest.raises(ValueError, match=r"action \('prey', 'action'\) has 6 invalid value\(s\), e.g. \[5, 5, 5\] at index \[0, 0\]; expected integers in \[0, 5\)"):
        env.step(td)
    env.validate_actions = False  # trusted policies can skip the check
    td["prey", "action"] = torch.full((B, 1), 1)
    env.step(td)


def test_bad_reset_key(env):
    td = env.reset()
    td["_reset"] = torch.ones(B, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"'_reset' must be a bool tensor of shape \(6, 1\) \(the done shape at its level\), got torch.bool \(6,\)"):
        env.reset(td)


@pytest.mark.parametrize("key", ["_reset", ("prey", "_reset")])
def test_reset_key_on_another_device_is_rejected_before_anything_applies(key):
    # Found by tests/test_fuzz.py: a '_reset' on the 'meta' device reached the step counters (all zeroed).
    env = PredatorPreyCount(num_envs=B, max_steps=3)
    env.set_seed(0)
    td = env.step_mdp(env.rand_step(env.step_mdp(env.rand_step(env.reset()))))
    td[key] = torch.zeros(env.full_done_spec[(*key[:-1], "done") if isinstance(key, tuple) else "done"].shape,
                          dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"must be a bool tensor of shape .*, got torch.bool \(6, 1(, 1)?\) on meta; "
                                         r"the env is on cpu"):
        env.reset(td)
    del td[key]
    assert env.rand_step(td)["next", "truncated"].all()  # the third step since reset: counters untouched


@pytest.mark.parametrize("value", [torch.zeros(B, 7), torch.zeros(B, 4, dtype=torch.float64)], ids=["shape", "dtype"])
def test_partial_reset_checks_the_entries_it_keeps_before_resetting(value):
    # Found by tests/test_fuzz.py: a kept entry of the wrong shape failed in torch.where after the reset was applied;
    # one of another dtype silently changed the output's dtype.
    env = PredatorPreyCount(num_envs=B, max_steps=2)
    env.set_seed(0)
    td = env.step_mdp(env.rand_step(env.reset()))
    td["_reset"] = torch.arange(B).eq(0).view(B, 1)
    td["state"] = value
    with pytest.raises(ValueError, match=rf"entry 'state' of the TensorDict given to reset\(\) has shape \({B}, \d\), "
                                         rf"dtype {value.dtype}, device cpu; expected shape \({B}, 4\), "
                                         r"dtype torch.float32"):
        env.reset(td)
    del td["_reset"], td["state"]
    assert env.rand_step(td)["next", "truncated"].all()  # no env was reset: all at their second step


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_envs": 0}, "num_envs must be a positive int, got 0"),
        ({"num_envs": 2, "max_steps": 0}, "max_steps must be a positive int or None, got 0"),
        ({"num_envs": 2, "group_map": {"predator": ["predator_0"], "prey": ["prey_0"]}}, "Agent predator_1 wasn't found in any group"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PredatorPreyCount(**kwargs)


def test_spec_setter_validation():
    env = Drift(num_envs=2)
    with pytest.raises(ValueError, match=r"full_action_spec has shape \(3,\); expected the batch shape \(2,\)"):
        env.full_action_spec = Composite(action=Unbounded((3, 1)), shape=(3,))
    with pytest.raises(TypeError, match="full_reward_spec must be a marl_envs.specs.Composite, got Unbounded"):
        env.full_reward_spec = Unbounded((2, 1))

