"""marl_envs.torchrl: our envs inside TorchRL (specs, resets, collectors, transforms, batched envs, losses).

These run in the interop virtualenv (.venv-torchrl, torchrl 0.14.1 + tensordict 0.14.3), where `make test` sets
MARL_ENVS_REQUIRE_TORCHRL=1 so that a missing TorchRL fails instead of skipping. In the core venv they skip.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
from envs import SMALL_KWARGS, Drift, PredatorPreyCount
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule

import marl_envs
from marl_envs import specs

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")

with warnings.catch_warnings():
    # torchrl 0.14.1 deprecates its own weight-updater classes while importing torchrl.collectors
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated", category=DeprecationWarning)
    import torchrl.data as rl
    from torchrl.collectors import Collector
    from torchrl.envs import ObservationNorm, ParallelEnv, RewardSum, SerialEnv, StepCounter, TransformedEnv
    from torchrl.envs import EnvBase as TorchRLEnvBase
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs
    from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
    from torchrl.objectives import ClipPPOLoss, ValueEstimators

from marl_envs.torchrl import COLLECTOR_KWARGS, TorchRLEnv, to_torchrl, to_torchrl_spec  # noqa: E402

BACKENDS = marl_envs.available_backends()
HAS = {backend: marl_envs.backend_installed(backend) for backend in BACKENDS}


@pytest.mark.skipif(not HAS["vmas"], reason="the module docstring builds vmas/balance")
def test_docstring_examples():
    import doctest

    import marl_envs.torchrl as module

    result = doctest.testmod(module)
    assert result.attempted >= 4 and result.failed == 0


# ----------------------------------------------------------------------------------------------------
# Specs
# ----------------------------------------------------------------------------------------------------
SPECS = {
    "unbounded": specs.Unbounded((4, 3, 5)),
    "unbounded_int": specs.Unbounded((4, 2), dtype=torch.int32),
    "bounded": specs.Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]), (4, 3, 2)),
    "categorical_masked": specs.Categorical(5, (4, 3), mask=torch.tensor([True, False, True, True, False])),
    "one_hot": specs.OneHot(4, (4, 2, 4), mask=torch.tensor([True, True, False, True])),
    "binary": specs.Binary((4, 1)),
    "multi_categorical": specs.MultiCategorical([2, 3, 4], (4, 3, 3)),
}
RL_CLASS = {"unbounded": rl.Unbounded, "unbounded_int": rl.Unbounded, "bounded": rl.Bounded,
            "categorical_masked": rl.Categorical, "one_hot": rl.OneHot, "binary": rl.Binary,
            "multi_categorical": rl.MultiCategorical}


@pytest.mark.parametrize("name", SPECS)
def test_spec_conversion_keeps_shape_dtype_domain_and_mask(name):
    ours = SPECS[name]
    theirs = to_torchrl_spec(ours)
    assert isinstance(theirs, RL_CLASS[name])
    assert (theirs.shape, theirs.dtype, theirs.device) == (ours.shape, ours.dtype, ours.device)
    for _ in range(20):  # their samples lie in our domain and ours in theirs
        assert ours.is_in(theirs.rand())
        assert theirs.is_in(ours.rand())
    if name == "bounded":
        assert torch.equal(theirs.space.low, ours.low) and torch.equal(theirs.space.high, ours.high)
    if name in ("categorical_masked", "one_hot"):
        assert torch.equal(theirs.mask, ours.mask)


def test_composite_conversion_is_nested_and_batched():
    env = PredatorPreyCount(num_envs=3)
    full = to_torchrl_spec(env.full_observation_spec)
    assert isinstance(full, rl.Composite) and full.shape == (3,)
    assert full["prey"].shape == (3, 1) and full["prey", "action_mask"].shape == (3, 1, 5)
    assert set(full.keys(True, True)) == set(env.full_observation_spec.keys(True, True))


def test_unknown_spec_class_is_a_type_error():
    class Odd(specs.TensorSpec):
        pass

    with pytest.raises(TypeError, match="no torchrl.data counterpart for the spec class Odd"):
        to_torchrl_spec(Odd((2,), torch.float32))


def test_to_torchrl_rejects_what_is_not_our_env():
    with pytest.raises(TypeError, match=r"to_torchrl takes a marl_envs.EnvBase .* got str"):
        to_torchrl("vmas/balance")


# ----------------------------------------------------------------------------------------------------
# The adapter on user envs (the hook only: two groups, masks, group done keys, state, root keys)
# ----------------------------------------------------------------------------------------------------
USER_ENVS = {
    "two_groups": lambda: PredatorPreyCount(num_envs=4, max_steps=6),
    "one_group": lambda: Drift(num_envs=4, n_agents=3, max_steps=5),
    "single_agent": lambda: Drift(num_envs=4, single_agent=True, max_steps=5),
}


@pytest.mark.parametrize("make", USER_ENVS.values(), ids=USER_ENVS)
def test_same_keys_groups_batch_device_and_torchrl_checks_pass(make):
    env = make()
    adapted = to_torchrl(env)
    assert isinstance(adapted, TorchRLEnvBase) and isinstance(adapted, TorchRLEnv)
    assert adapted.batch_size == env.batch_size and adapted.device == env.device
    assert adapted.group_map == env.group_map and adapted.env is env
    for kind in ("action_keys", "reward_keys", "done_keys", "observation_keys", "reset_keys"):
        assert sorted(map(str, getattr(adapted, kind))) == sorted(map(str, getattr(env, kind))), kind
    torchrl_check_env_specs(adapted)
    data = adapted.rollout(12, break_when_any_done=False)
    assert data.batch_size == (4, 12)
    assert torch.equal(data["next", "done"], data["next", "terminated"] | data["next", "truncated"])


def test_step_hands_our_next_tensordict_through():
    env = Drift(num_envs=4, n_agents=2)
    adapted = to_torchrl(env)
    written = []
    original = env.step

    def spy(td):
        out = original(td)
        written.append(td.get("next"))
        return out

    env.step = spy
    td = adapted.rand_action(adapted.reset())
    adapted.step(td)
    assert td.get("next") is written[0]  # the very TensorDict our env built: no copy on the way


def test_set_seed_is_forwarded():
    env = PredatorPreyCount(num_envs=4)
    adapted = to_torchrl(env)
    runs = []
    for _ in range(2):
        assert isinstance(adapted.set_seed(7), int)
        runs.append(adapted.rollout(8, break_when_any_done=False))
    assert (runs[0] == runs[1]).all()
    adapted.set_seed(8)
    assert not (adapted.rollout(8, break_when_any_done=False) == runs[0]).all()


def test_rand_action_honours_the_action_mask():
    adapted = to_torchrl(PredatorPreyCount(num_envs=64))
    td = adapted.reset()
    td["prey", "action_mask"][..., 2] = False
    assert not (adapted.rand_action(td)["prey", "action"] == 2).any()


def test_root_reset_reaches_our_vectorized_reset_and_keeps_the_others():
    env = PredatorPreyCount(num_envs=4)
    adapted = to_torchrl(env)
    td = adapted.reset()
    for _ in range(2):
        td = adapted.step_and_maybe_reset(adapted.rand_action(td))[1]
    before = env.count.clone()
    td["_reset"] = torch.tensor([[True], [False], [True], [False]])
    kept = td.exclude("_reset").clone()
    out = adapted.reset(td)
    assert env.count.tolist() == [0.0, before[1].item(), 0.0, before[3].item()]
    for key in kept.keys(True, True):
        assert torch.equal(out[key][1::2], kept[key][1::2]), key
    assert "_reset" not in out.keys()


def test_group_reset_reaches_our_reset():
    env = PredatorPreyCount(num_envs=3)
    adapted = to_torchrl(env)
    td = adapted.rand_step(adapted.reset())
    td = adapted.rand_step(td.get("next").exclude(*env.reward_keys))
    td = td.get("next").exclude(*env.reward_keys)
    td["prey", "_reset"] = torch.tensor([[[False]], [[True]], [[False]]])
    adapted.reset(td)
    assert env.count.tolist() == [2.0, 0.0, 2.0]


def test_step_and_maybe_reset_restarts_only_finished_envs():
    env = PredatorPreyCount(num_envs=16, max_steps=50)
    adapted = to_torchrl(env)
    adapted.set_seed(0)
    td = adapted.reset()
    for _ in range(6):
        stepped, td = adapted.step_and_maybe_reset(adapted.rand_action(td))
        done = stepped["next", "done"].squeeze(-1)
        state = td["state"]
        assert (state[done, 0] == 0).all() and (state[~done, 0] > 0).all()  # col 0 is the step count
        assert not td["done"].any()


def test_torchrl_rollout_break_when_all_done_freezes_finished_envs():
    adapted = to_torchrl(Drift(num_envs=4, n_agents=2, max_steps=6))

    def push_env_0(td):  # env 0 leaves [-3, 3] after 3 or 4 steps; the others run to max_steps
        action = torch.zeros(4, 2, 1)
        action[0] = 1.0
        return td.set(("agents", "action"), action)

    data = adapted.rollout(20, push_env_0, break_when_all_done=True)
    assert data.batch_size == (4, 6) and data["next", "truncated"][1:, -1].all()
    end = int(data["next", "terminated"][0].squeeze(-1).nonzero()[0])
    assert end < 5
    frozen = data["next", "agents", "observation"][0, end:]
    assert (frozen == frozen[0]).all()  # env 0's last step repeated, not stepped again


# ----------------------------------------------------------------------------------------------------
# Bad input: our errors, unchanged, and the env still works
# ----------------------------------------------------------------------------------------------------
def _bad_inputs(env):
    good = env.rand_action(env.reset())
    wrong_shape = good.clone().set(("predator", "action"), torch.zeros(4, 2, 3))
    wrong_dtype = good.clone().set(("predator", "action"), torch.zeros(4, 2, 2, dtype=torch.float64))
    nan = good.clone().set(("predator", "action"), torch.full((4, 2, 2), float("nan")))
    out_of_range = good.clone().set(("prey", "action"), torch.full((4, 1), 7))
    missing = good.clone().exclude(("prey", "action"))
    wrong_batch = TensorDict({}, batch_size=(3,))
    return {"shape": wrong_shape, "dtype": wrong_dtype, "nan": nan, "range": out_of_range, "missing": missing,
            "batch": wrong_batch}


@pytest.mark.parametrize("case", ["shape", "dtype", "nan", "range", "missing", "batch"])
def test_bad_input_gives_our_error_unchanged_and_the_env_stays_usable(case):
    ours = PredatorPreyCount(num_envs=4)
    adapted = to_torchrl(PredatorPreyCount(num_envs=4))
    with pytest.raises(Exception) as expected:
        ours.step(_bad_inputs(ours)[case])
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value))):
        adapted.step(_bad_inputs(adapted.env)[case])
    td = adapted.rand_step(adapted.reset())
    assert adapted.env.full_reward_spec.is_in(td["next"])


def test_reset_seed_is_set_seed_then_reset_and_other_keywords_are_refused():
    adapted = to_torchrl(PredatorPreyCount(num_envs=4))
    runs = []
    for seeded in ("reset(seed=)", "set_seed"):
        if seeded == "set_seed":
            adapted.set_seed(3)
        first = adapted.reset(seed=3) if seeded == "reset(seed=)" else adapted.reset()
        runs.append((first.clone(), adapted.rollout(5, break_when_any_done=False, auto_reset=False, tensordict=first)))
    assert (runs[0][0] == runs[1][0]).all() and (runs[0][1] == runs[1][1]).all()
    with pytest.raises(TypeError, match=r"reset\(\) got keyword arguments \['options'\]; marl-envs envs take only "
                                        r"seed="):
        adapted.reset(options={})


def test_set_seed_none_keeps_the_random_state():
    adapted = to_torchrl(PredatorPreyCount(num_envs=4))
    adapted.set_seed(5)
    expected = adapted.rollout(6, break_when_any_done=False)
    adapted.set_seed(5)
    adapted.set_seed(None)
    assert (adapted.rollout(6, break_when_any_done=False) == expected).all()


def test_torchrl_group_map_types_are_ours():
    from torchrl.envs.utils import MarlGroupMapType as TorchRLGroupMapType

    for strategy in TorchRLGroupMapType:
        env = PredatorPreyCount(num_envs=2)
        env.group_map = strategy
        assert env.group_map == strategy.get_group_map(env.agent_names)


def test_attributes_torchrl_users_read():
    adapted = to_torchrl(PredatorPreyCount(num_envs=2))
    assert adapted.agents == adapted.agent_names == adapted.env.agent_names  # no agent objects: the names
    assert adapted.het_specs is False and adapted.het_specs_map == {"predator": False, "prey": False}
    assert adapted.has_action_mask == {"predator": False, "prey": True}
    assert adapted.validate_actions is True  # read through from the wrapped env
    with pytest.raises(AttributeError, match="'TorchRLEnv' object has no attribute 'nope', nor has the wrapped "
                                             "PredatorPreyCount"):
        adapted.nope  # noqa: B018


def test_batch_size_as_torchrl_wrappers_take_it():
    for batch_size in (None, (), (4,), torch.Size([4])):
        assert to_torchrl(Drift(num_envs=4), batch_size=batch_size).batch_size == (4,)
    with pytest.raises(TypeError, match=r"Batch size used in constructor does not match marl-envs batch size. "
                                        r"batch_size=\(3,\) but num_envs=4: pass batch_size=\(4,\) or leave it out"):
        to_torchrl(Drift(num_envs=4), batch_size=(3,))
    with pytest.raises(TypeError, match=r"Batch size used in constructor is not compatible with marl-envs. "
                                        r"batch_size=\(4, 2\), but the env's batch is \(num_envs,\) = \(4,\)"):
        to_torchrl(Drift(num_envs=4), batch_size=(4, 2))


@pytest.mark.skipif(not HAS["vmas"], reason="needs the vmas extra")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_torchrl_class_names_build_our_envs():
    import vmas

    from marl_envs.torchrl import VmasEnv, VmasWrapper

    assert "balance" in VmasEnv.available_envs and "vmas/balance" not in VmasEnv.available_envs
    env = VmasEnv(scenario="balance", num_envs=3, n_agents=2, batch_size=(3,), seed=0)
    assert isinstance(env, TorchRLEnv) and env.scenario_name == "balance" and env.categorical_actions
    assert str(env) == "VmasEnv(num_envs=3, n_agents=2, batch_size=torch.Size([3]), device=cpu) (scenario=balance)"
    with pytest.raises(TypeError, match="Batch size used in constructor does not match vmas batch size"):
        VmasEnv(scenario="balance", num_envs=3, batch_size=(4,))
    wrapped = VmasWrapper(vmas.make_env("balance", num_envs=2, n_agents=2), batch_size=(2,))
    assert wrapped.group_map == {"agents": ["agent_0", "agent_1"]}
    torchrl_check_env_specs(wrapped)


@pytest.mark.skipif(not HAS["pettingzoo"], reason="needs the pettingzoo extra")
def test_torchrl_pettingzoo_class_names_build_our_envs():
    from torchrl.envs.utils import MarlGroupMapType as TorchRLGroupMapType

    from marl_envs.torchrl import PettingZooEnv

    env = PettingZooEnv(task="tictactoe_v3", parallel=False, use_mask=True, seed=0,
                        group_map=TorchRLGroupMapType.ONE_GROUP_PER_AGENT)
    assert env.group_map == {"player_1": ["player_1"], "player_2": ["player_2"]}
    assert env.parallel is False and env.use_mask is True and env.return_state is False
    assert env.has_action_mask == {"player_1": True, "player_2": True}
    torchrl_check_env_specs(env)


@pytest.mark.parametrize("name, kwargs", [
    ("pettingzoo/sisl/multiwalker_v9", {}),  # groups with done entries of their own; walkers fall at any step
    ("vmas/balance", {"max_steps": 100}),  # the package falls (steps 38 and 38 here), else the time limit (99)
    ("pettingzoo/classic/tictactoe_v3", {}),  # turn-based: the ended games get fresh random legal moves
])
def test_rollout_break_when_all_done_with_envs_ending_at_different_steps(name, kwargs):
    """TorchRL's rollout steps the envs still running and stacks every step until all have ended (it used to leave
    per-group '_neg_step' entries in some steps' data, and to step ended PettingZoo games)."""
    if not HAS[_backend_of(name)]:
        pytest.skip(f"needs the {_backend_of(name)} extra")
    adapted = to_torchrl(marl_envs.make(name, num_envs=3, seed=0, **kwargs))
    data = adapted.rollout(400, break_when_all_done=True)
    ends = data["next", "done"].squeeze(-1).float().argmax(1)
    assert data["next", "done"][:, -1].all() and len(set(ends.tolist())) > 1  # all ended, not together
    assert not any(key[-1] == "_neg_step" for key in data.keys(True) if isinstance(key, tuple))
    observation = data["next", "agents", "observation"]
    for env, end in enumerate(ends.tolist()):
        assert (observation[env, end:] == observation[env, end]).all()  # frozen once ended


def test_the_device_is_fixed():
    adapted = to_torchrl(Drift(num_envs=2))
    assert adapted.to("cpu") is adapted
    with pytest.raises(ValueError, match="cannot move to meta; build the marl-envs env with device='meta'"):
        adapted.to("meta")


# ----------------------------------------------------------------------------------------------------
# TorchRL machinery: collector, transforms, batched envs, losses
# ----------------------------------------------------------------------------------------------------
def test_collector_auto_resets_and_batches_frames():
    adapted = to_torchrl(Drift(num_envs=4, n_agents=2, max_steps=5))
    # zero actions: no env leaves [-3, 3], so every episode ends by our max_steps
    stay = TensorDictModule(torch.zeros_like, in_keys=[("agents", "observation")], out_keys=[("agents", "action")])
    collector = Collector(adapted, stay, frames_per_batch=40, total_frames=80, **COLLECTOR_KWARGS)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2
    for data in batches:
        assert data.batch_size == (4, 10)
        truncated = data["next", "truncated"].squeeze(-1)
        assert truncated[:, [4, 9]].all() and truncated.sum() == 8  # every 5 steps, all envs
        # after an end the collector's root holds the new episode's first observation, not the terminal one
        first = data["agents", "observation"][:, 5]
        assert not torch.equal(first, data["next", "agents", "observation"][:, 4])
        assert (first.abs() <= 0.5).all()  # Drift restarts in [-0.5, 0.5)


def test_transformed_env_with_reward_sum_step_counter_and_observation_norm():
    env = PredatorPreyCount(num_envs=4, max_steps=20)
    adapted = to_torchrl(env)
    episode_keys = [(*key[:-1], "episode_reward") for key in env.reward_keys]
    transformed = TransformedEnv(adapted, RewardSum(in_keys=env.reward_keys, out_keys=episode_keys))
    transformed.append_transform(StepCounter())
    transformed.append_transform(ObservationNorm(loc=1.0, scale=2.0, in_keys=[("predator", "observation")],
                                                 out_keys=[("predator", "normed")]))
    transformed.set_seed(0)
    data = transformed.rollout(15, break_when_any_done=False)
    nxt = data["next"]
    done = nxt["done"].squeeze(-1)
    # RewardSum restarts at each end; StepCounter counts the steps of the episode
    for key, episode in zip(env.reward_keys, episode_keys):
        running = torch.zeros_like(nxt[key][:, 0])
        for t in range(15):
            running = running + nxt[key][:, t]
            assert torch.allclose(nxt[episode][:, t], running)
            running = torch.where(done[:, t].view(-1, 1, 1), 0.0, running)
    counts = nxt["step_count"].squeeze(-1)
    assert (counts[:, 0] == 1).all() and (counts[done] > 0).all()
    assert torch.allclose(nxt["predator", "normed"], nxt["predator", "observation"] * 2.0 + 1.0)


def _adapted_drift() -> TorchRLEnv:
    return to_torchrl(Drift(num_envs=3, n_agents=2, max_steps=4))


# TorchRL's ParallelEnv forks; where an earlier test of this process ran JAX, JAX warns at the fork. The workers
# here run a torch-only env, so the warning does not apply.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_serial_and_parallel_env_of_two_adapted_envs():
    make = _adapted_drift
    for batched in (SerialEnv(2, make), ParallelEnv(2, make, mp_start_method="fork")):
        try:
            assert batched.batch_size == (2, 3)
            batched.set_seed(0)
            # the random actions drawn from torch's global generator (the workers fork it): fixed, so that no agent
            # leaves [-3, 3] before the time limit (a few percent of unseeded runs did)
            torch.manual_seed(0)
            data = batched.rollout(9, break_when_any_done=False)
            assert data.batch_size == (2, 3, 9)
            assert data["next", "truncated"].squeeze(-1)[..., [3, 7]].all()
            td = batched.reset()
            td["_reset"] = torch.tensor([[[True], [False], [False]], [[False], [False], [True]]])
            kept = td["agents", "observation"].clone()
            out = batched.reset(td)
            assert torch.equal(out["agents", "observation"][0, 1:], kept[0, 1:])
            assert torch.equal(out["agents", "observation"][1, :2], kept[1, :2])
        finally:
            batched.close()


@pytest.mark.parametrize("source", ["adapted", "ours"])
def test_clip_ppo_loss_and_gae_with_keys_from_the_env(source):
    """TorchRL's loss on data of the adapted env, and on data of our env's own rollout (read as it is)."""
    env = Drift(num_envs=8, n_agents=2, max_steps=10)
    adapted = to_torchrl(env)
    group, n = "agents", 2
    obs_key, action_key, reward_key = ("agents", "observation"), adapted.action_key, adapted.reward_key
    net = torch.nn.Sequential(MultiAgentMLP(1, 2, n_agents=n, centralised=False, share_params=True, depth=1,
                                            num_cells=8), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=[obs_key], out_keys=[(group, "loc"), (group, "scale")]),
        in_keys=[(group, "loc"), (group, "scale")], out_keys=[action_key], spec=adapted.full_action_spec[action_key],
        distribution_class=TanhNormal, distribution_kwargs={"low": -1.0, "high": 1.0}, return_log_prob=True,
        log_prob_key=(group, "log_prob"),
    )
    critic = TensorDictModule(MultiAgentMLP(1, 1, n_agents=n, centralised=True, share_params=True, depth=1,
                                            num_cells=8), in_keys=[obs_key], out_keys=[(group, "state_value")])
    loss = ClipPPOLoss(actor, critic)
    loss.set_keys(action=action_key, reward=reward_key, done=(group, "done"), terminated=(group, "terminated"),
                  sample_log_prob=(group, "log_prob"), value=(group, "state_value"))
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    with torch.no_grad():
        data = (adapted if source == "adapted" else env).rollout(10, actor, break_when_any_done=False)
        shape = data[("next", *reward_key)].shape
        for name in ("done", "terminated"):  # the root flags, per agent, as the group's
            data["next", group, name] = data["next", name].unsqueeze(-1).expand(shape)
        loss.value_estimator(data, params=loss.critic_network_params, target_params=loss.target_critic_network_params)
    assert data["advantage"].shape == shape and torch.isfinite(data["advantage"]).all()
    out = loss(data.reshape(-1))
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    total.backward()
    assert torch.isfinite(total) and any(p.grad is not None and p.grad.abs().sum() > 0 for p in loss.parameters())


# ----------------------------------------------------------------------------------------------------
# Every backend: TorchRL's check_env_specs (a representative set; every registered env with --all)
# ----------------------------------------------------------------------------------------------------
REPRESENTATIVE = [
    ("vmas/navigation", {"n_agents": 3}), ("vmas/simple_adversary", {}), ("vmas/flocking", {"continuous_actions": False}),
    ("brax/ant_4x2", {"backend": "spring"}), ("brax/fast", {}),
    ("pettingzoo/mpe/simple_spread_v3", {"return_state": True}), ("pettingzoo/classic/tictactoe_v3", {}),
    ("jaxmarl/MPE_simple_spread_v3", {}), ("jaxmarl/SMAX", {"scenario": "3m"}), ("gymnax/CartPole-v1", {}),
    ("jumanji/RobotWarehouse-v0", {}),
    ("openspiel/kuhn_poker", {}), ("openspiel/goofspiel", {}), ("magent2/battle", {"map_size": 12}),
    ("mamujoco/HalfCheetah_6x1", {}), ("lbforaging/Foraging-8x8-2p-2f-coop-v3", {}), ("rware/rware-tiny-2ag-v2", {}),
]


def _backend_of(name: str) -> str:
    return name.partition("/")[0]


def _check_named(name: str, kwargs: dict) -> None:
    if not HAS[_backend_of(name)]:
        pytest.skip(f"needs the {_backend_of(name)} extra")
    if _backend_of(name) == "brax":
        kwargs = {"backend": "spring", **kwargs} if name == "brax/ant_4x2" else kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # construction-time notices of the simulators (not ours)
        env = marl_envs.make(name, num_envs=2, max_steps=4, seed=0, **kwargs)
    adapted = to_torchrl(env)
    try:
        torchrl_check_env_specs(adapted)
        data = adapted.rollout(6, break_when_any_done=False)
        assert data.batch_size == (2, 6)
    finally:
        adapted.close()


@pytest.mark.parametrize("name, kwargs", REPRESENTATIVE, ids=[n for n, _ in REPRESENTATIVE])
def test_torchrl_check_env_specs_per_backend(name, kwargs):
    _check_named(name, kwargs)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
# JaxNav's step scatters int into bool (JAX's FutureWarning): a notice from JaxMARL, not ours
@pytest.mark.filterwarnings("ignore:scatter inputs have incompatible types:FutureWarning")
@pytest.mark.parametrize("name", [n for b in BACKENDS if HAS[b] for n in marl_envs.available_envs(b)])
def test_torchrl_check_env_specs_every_registered_env(name):
    _check_named(name, dict(SMALL_KWARGS.get(name, {})))



# ----------------------------------------------------------------------------------------------------
# Side by side with TorchRL's own wrappers (differences on purpose are listed in docs/torchrl.md)
# ----------------------------------------------------------------------------------------------------
def _layout(env, lead: int) -> dict:
    data = env.rollout(3, break_when_any_done=False)
    return {key: (tuple(value.shape[lead:]), value.dtype) for key, value in data.items(True, True)}


@pytest.mark.skipif(not HAS["vmas"], reason="needs the vmas extra")
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("scenario, kwargs", [("navigation", {"n_agents": 3}), ("simple_adversary", {}),
                                              ("flocking", {"continuous_actions": False})])
def test_side_by_side_with_torchrl_vmas(scenario, kwargs):
    from torchrl.envs.libs.vmas import VmasEnv

    ours = _layout(to_torchrl(marl_envs.make(f"vmas/{scenario}", num_envs=4, max_steps=10, **kwargs)), 0)
    theirs = _layout(VmasEnv(scenario, num_envs=4, max_steps=10, **kwargs), 0)
    # the one difference: our time limit is `truncated`; TorchRL's VMAS wrapper has no truncated key
    assert {k: v for k, v in ours.items() if k not in ("truncated", ("next", "truncated"))} == theirs
    assert ours["truncated"] == ours["done"]


@pytest.mark.skipif(not HAS["pettingzoo"], reason="needs the pettingzoo extra")
@pytest.mark.parametrize("task, kwargs, group_map", [
    ("simple_adversary_v3", {}, None),
    ("simple_spread_v3", {"return_state": True}, {"agent": ["agent_0", "agent_1", "agent_2"]}),
])
def test_side_by_side_with_torchrl_pettingzoo(task, kwargs, group_map):
    import importlib

    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    module = importlib.import_module(f"mpe2.{task}")
    ours_env = marl_envs.make(f"pettingzoo/mpe/{task}", num_envs=1, group_map=group_map, **kwargs)
    ours = _layout(to_torchrl(ours_env), 2)  # ours: batch (num_envs, T); TorchRL's: (T,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchRL's "tested with pettingzoo 1.24.3" notice
        theirs = _layout(PettingZooWrapper(module.parallel_env(), **kwargs), 1)
    assert ours == theirs


@pytest.mark.skipif(not HAS["brax"], reason="needs the brax extra")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_side_by_side_with_torchrl_brax():
    from torchrl.envs.libs.brax import BraxEnv

    ours = _layout(to_torchrl(marl_envs.make("brax/fast", num_envs=4)), 0)
    theirs = _layout(BraxEnv("fast", batch_size=[4], device="cpu"), 0)
    # TorchRL carries Brax's simulator state under "state" (an input and an output); ours keeps it in JAX
    theirs = {k: v for k, v in theirs.items() if "state" not in (k if isinstance(k, tuple) else (k,))}
    assert {k: v for k, v in ours.items() if k not in ("truncated", ("next", "truncated"))} == theirs


@pytest.mark.skipif(not HAS["vmas"], reason="draws vmas/navigation")
def test_the_evaluation_rendering_of_torchrls_scripts():
    """TorchRL's multi-agent scripts keep their frames on the env (``env.frames = []``) and draw each step with
    ``env.render(mode="rgb_array", agent_index_focus=None)``, as TorchRL's VMAS wrapper takes it."""
    env = to_torchrl(marl_envs.make("vmas/navigation", num_envs=2, seed=0))
    env.frames = []

    def rendering_callback(env, td):
        env.frames.append(env.render(mode="rgb_array", agent_index_focus=None))

    env.rollout(3, callback=rendering_callback)  # (TorchRL calls it between steps: after the first two)
    assert len(env.frames) == 2 and all(frame.shape[2] == 3 and frame.dtype.name == "uint8" for frame in env.frames)


def test_a_transformed_masked_env_draws_legal_actions():
    """The mask is shared with the clone a ``TransformedEnv`` keeps of the spec: its ``rand_action`` and
    TorchRL's ``check_env_specs`` see the same mask as the env."""
    env = TransformedEnv(to_torchrl(PredatorPreyCount(num_envs=4, max_steps=20)), StepCounter())
    td = env.reset()
    for _ in range(6):
        td = env.rand_step(td)
        assert td["prey", "action_mask"].gather(-1, td["prey", "action"].unsqueeze(-1)).all()
        td = env.step_mdp(td) if hasattr(env, "step_mdp") else td["next"]
    torchrl_check_env_specs(env)
