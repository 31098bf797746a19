"""TorchRL's spec-driven machinery and value-based training on masked envs (one env of each masked family).

TorchRL picks an action space by the exact class of a spec (``QValueModule``, ``QValueActor``, ``DQNLoss``...,
through ``torchrl.data.utils.ACTION_SPACE_MAP``), stacks specs of one class only (``SerialEnv``) and compares spec
classes in a batched env's schema. The adapter hands it TorchRL's own ``Categorical`` / ``OneHot``, carrying the
env's current mask: these tests go through each place TorchRL inspects a spec, then run a DQN/IQL update
(``DQNLoss``) and a QMIX update (``QMixerLoss``) from a ``Collector``, checking that no forbidden action is taken.

They run in the TorchRL virtualenvs (``make test``: TorchRL 0.14 and 0.11).
"""

from __future__ import annotations

import inspect
import io
import os
import warnings

import pytest
import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

import marl_envs
from marl_envs import specs

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                            category=DeprecationWarning)
    import torchrl.data as rl
    from torchrl.collectors import Collector
    from torchrl.envs import ActionMask, SerialEnv, StepCounter, TransformedEnv
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs
    from torchrl.modules import (
        DistributionalQValueActor,
        EGreedyModule,
        MaskedCategorical,
        ProbabilisticActor,
        QValueActor,
        QValueModule,
        RandomPolicy,
    )
    from torchrl.modules.models.multiagent import QMixer
    from torchrl.objectives import DQNLoss, SoftUpdate, ValueEstimators
    from torchrl.objectives.multiagent.qmixer import QMixerLoss

from marl_envs.torchrl import COLLECTOR_KWARGS, to_torchrl  # noqa: E402

#: One env of each family whose actions are masked, and a one-hot action space: name -> keywords.
MASKED = {
    "openspiel/tic_tac_toe": {},
    "pettingzoo/classic/tictactoe_v3": {},
    "pettingzoo/classic/tictactoe_v3 one-hot": {"categorical_actions": False},
    "jaxmarl/HeuristicEnemySMAX": {"scenario": "3m"},
    "jaxmarl/hanabi": {},
    "jumanji/Cleaner-v0": {},
}
SPACES = {rl.Categorical: "categorical", rl.OneHot: "one_hot"}


def _build(case: str, num_envs: int = 4):
    name = case.split()[0]
    if not marl_envs.backend_installed(name.partition("/")[0]):
        pytest.skip(f"{name.partition('/')[0]} is not installed")
    return to_torchrl(marl_envs.make(name, num_envs=num_envs, seed=0, **MASKED[case]))


@pytest.fixture(scope="module", params=list(MASKED))
def env(request):
    adapted = _build(request.param)
    yield adapted
    adapted.close()


def _masked_group(env) -> tuple[str, tuple, tuple]:
    """The first masked group of ``env``: (group, action key, mask key)."""
    key, mask = next(iter(env.env.action_mask_keys.items()))
    return key[0], key, mask


def _assert_legal(env, data) -> None:
    """Every action in ``data`` is one its mask allowed, for each agent whose action counts (the acting player,
    the living agents: the group's ``"mask"`` where it has one)."""
    for key, mask_key in env.env.action_mask_keys.items():
        action = data[key]
        if isinstance(env.full_action_spec[key], rl.OneHot):
            assert (action.sum(-1) == 1).all(), key
            action = action.long().argmax(-1)
        legal = specs.legal_choices(data[mask_key]).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        acting = data.get((key[0], "mask"), torch.ones_like(legal)).reshape(legal.shape)
        assert (legal | ~acting).all(), f"a forbidden action was taken at {key}"


class _Flat(torch.nn.Module):
    """Each agent's observation leaves, flattened and concatenated, through a linear layer."""

    def __init__(self, sizes: int, outputs: int, agent_dims: int):
        super().__init__()
        self.agent_dims = agent_dims
        self.linear = torch.nn.LazyLinear(outputs) if sizes is None else torch.nn.Linear(sizes, outputs)

    def forward(self, *leaves):
        flat = [leaf.float().flatten(self.agent_dims) for leaf in leaves]
        return self.linear(torch.cat(flat, -1))


def _q_network(env, group: str, key, outputs: int | None = None) -> TensorDictModule:
    """A linear Q-network of ``group``: its observation leaves in, ``(group, "action_value")`` out."""
    spec = env.full_observation_spec[group]
    observation = spec["observation"]
    leaves = [(group, "observation", *((k,) if isinstance(k, str) else k)) for k in observation.keys(True, True)] \
        if isinstance(observation, rl.Composite) else [(group, "observation")]
    agent_dims = env.batch_dims + 1
    size = sum(int(torch.Size(env.full_observation_spec[leaf].shape[agent_dims:]).numel()) for leaf in leaves)
    n = env.full_action_spec[key].space.n
    return TensorDictModule(_Flat(size, outputs or n, agent_dims), in_keys=leaves, out_keys=[(group, "action_value")])


# ---------------------------------------------------------------------------------------------------------------
# Every place TorchRL inspects a spec
# ---------------------------------------------------------------------------------------------------------------
def test_the_spec_is_torchrls_own_class_and_its_clones_and_saved_copies_too(env):
    group, key, mask = _masked_group(env)
    spec = env.full_action_spec[key]
    assert type(spec) in SPACES
    td = env.rand_step(env.reset())["next"]
    clone = env.full_action_spec.clone()[key]
    assert type(clone) is type(spec) and clone.mask is spec.mask is not None
    assert torch.equal(spec.mask, specs.legal_choices(td[mask]))
    buffer = io.BytesIO()
    torch.save(env.full_action_spec, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)[key]
    assert type(saved) is type(spec) and torch.equal(saved.mask, spec.mask)
    _assert_legal(env, td.update(env.full_action_spec.rand()))
    drawn = env.action_spec.rand()  # TorchRL's action_spec: the Composite for a nested key
    _assert_legal(env, td.update(drawn) if isinstance(drawn, type(td)) else td.set(key, drawn))


def test_torchrls_check_env_specs_and_a_transformed_env(env):
    torchrl_check_env_specs(env)
    transformed = TransformedEnv(env, StepCounter())
    group, key, _ = _masked_group(env)
    assert type(transformed.full_action_spec[key]) is type(env.full_action_spec[key])
    torchrl_check_env_specs(transformed)
    _assert_legal(env, transformed.rollout(6, break_when_any_done=False))


def test_q_value_modules_find_the_action_space_from_the_spec(env):
    """No ``action_space=``: TorchRL reads it off the spec's class, and each module picks only legal actions
    when handed the mask key."""
    group, key, mask = _masked_group(env)
    spec = env.full_action_spec[key]
    space = SPACES[type(spec)]
    td = env.reset()
    out_keys = [key, (group, "action_value"), (group, "chosen_action_value")]
    assert QValueModule(spec=spec, action_value_key=(group, "action_value"), out_keys=out_keys).action_space == space
    spec = env.full_action_spec_unbatched  # what TorchRL's scripts hand these modules (one env's, with its groups)
    module = QValueModule(spec=spec, action_value_key=(group, "action_value"), action_mask_key=mask,
                          out_keys=out_keys)
    assert module.action_space == space
    net = _q_network(env, group, key)
    for _ in range(3):
        _assert_legal(env, TensorDictSequential(net, module)(td.clone()))
    # TorchRL 0.14 writes QValueActor's action at action_key=; 0.11 at the root "action" only
    nested = "action_key" in inspect.signature(QValueActor).parameters
    actor = QValueActor(net.module, in_keys=net.in_keys, spec=spec if nested else spec[key], action_mask_key=mask,
                        action_value_key=(group, "action_value"),
                        **({"action_key": key, "chosen_action_value_key": (group, "chosen")} if nested else {}))
    assert actor.action_space == space
    for _ in range(3):
        out = actor(td.clone())
        _assert_legal(env, out if nested else out.set(key, out["action"]))
    n = env.full_action_spec[key].space.n
    distributional = DistributionalQValueActor(
        torch.nn.Sequential(_Flat(None, 5 * n, env.batch_dims + 1), torch.nn.Unflatten(-1, (5, n))),
        in_keys=net.in_keys, spec=spec[key], support=torch.linspace(-1, 1, 5), action_value_key=(group, "action_value"))
    assert distributional.action_space == space
    distributional(td.clone())


def test_action_mask_transform_and_a_masked_categorical_policy(env):
    group, key, mask = _masked_group(env)
    if len(env.action_keys) == 1:  # TorchRL's ActionMask takes one action key
        masked = TransformedEnv(env, ActionMask(action_key=key, mask_key=mask))
        _assert_legal(env, masked.rollout(6, break_when_any_done=False))
    if isinstance(env.full_action_spec[key], rl.Categorical):
        net = _q_network(env, group, key)
        net.out_keys = [(group, "logits")]
        policy = ProbabilisticActor(TensorDictModule(net.module, in_keys=net.in_keys, out_keys=[(group, "logits")]),
                                    in_keys={"logits": (group, "logits"), "mask": mask}, out_keys=[key],
                                    distribution_class=MaskedCategorical, spec=env.full_action_spec,
                                    return_log_prob=False)
        with set_exploration_type(ExplorationType.RANDOM):
            data = env.rollout(6, policy, break_when_any_done=False)
        _assert_legal(env, data)


def test_random_policy_a_collector_and_a_serial_env(env):
    _assert_legal(env, RandomPolicy(env.full_action_spec)(env.reset()))
    collector = Collector(env, None, frames_per_batch=env.batch_size[0] * 20, total_frames=env.batch_size[0] * 40,
                          **COLLECTOR_KWARGS)
    for data in collector:
        _assert_legal(env, data)
    collector.shutdown()


@pytest.mark.parametrize("case", ["openspiel/tic_tac_toe", "jaxmarl/hanabi"])
def test_a_serial_env_of_two_masked_envs_stacks_their_specs(case):
    batched = SerialEnv(2, lambda: _build(case, num_envs=2))
    key = next(iter(batched.full_action_spec.keys(True, True)))
    assert type(batched.full_action_spec[key]) is rl.Categorical

    def legal_policy(td):  # the stacked spec is the batched env's own: the mask is read from the data
        mask = td[(*key[:-1], "action_mask")]
        return td.set(key, torch.distributions.Categorical(probs=mask.float()).sample())

    data = batched.rollout(4, legal_policy, break_when_any_done=False)
    assert data.batch_size == (2, 2, 4)
    batched.close()


# ---------------------------------------------------------------------------------------------------------------
# Value-based training: IQL (DQNLoss) and QMIX (QMixerLoss) from a Collector
# ---------------------------------------------------------------------------------------------------------------
def _explorer(env, group, key, mask):
    """TorchRL's Q-learning policy as its multi-agent scripts build it, the mask handed to its modules."""
    value = QValueModule(spec=env.full_action_spec_unbatched, action_value_key=(group, "action_value"),
                         action_mask_key=mask, out_keys=[key, (group, "action_value"), (group, "chosen_action_value")])
    qnet = TensorDictSequential(_q_network(env, group, key), value)
    greedy = EGreedyModule(spec=env.full_action_spec_unbatched, action_key=key, action_mask_key=mask,
                           eps_init=0.5, eps_end=0.1, annealing_num_steps=100)
    return qnet, TensorDictSequential(qnet, greedy)


def _collect(env, policy, key, frames: int):
    group = key[0]
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames, **COLLECTOR_KWARGS)
    data = next(iter(collector))
    collector.shutdown()
    _assert_legal(env, data)
    agents = data[group].batch_size[-1]
    for flag in ("done", "terminated"):  # groups without flags of their own read the root's, per agent
        if ("next", group, flag) not in data.keys(True, True):
            data["next", group, flag] = data["next", flag].unsqueeze(-2).expand(*data.batch_size, agents, 1)
    return data.reshape(-1)


def _update(loss_module, data) -> float:
    optim = torch.optim.Adam(loss_module.parameters(), 1e-3)
    target = SoftUpdate(loss_module, eps=0.9)
    losses = loss_module(data)
    losses["loss"].backward()
    optim.step()
    target.step()
    return float(losses["loss"].detach())


def test_iql_dqn_update_from_a_collector_never_picks_a_forbidden_action(env):
    group, key, mask = _masked_group(env)
    qnet, explorer = _explorer(env, group, key, mask)
    data = _collect(env, explorer, key, env.batch_size[0] * 16)
    loss = DQNLoss(qnet, delay_value=True, action_space=env.full_action_spec_unbatched[key])
    loss.set_keys(action_value=(group, "action_value"), action=key, value=(group, "chosen_action_value"),
                  reward=(group, "reward"), done=(group, "done"), terminated=(group, "terminated"))
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    assert torch.isfinite(torch.tensor(_update(loss, data)))
    _assert_legal(env, _collect(env, explorer, key, env.batch_size[0] * 4))  # the trained policy too


def test_qmix_update_from_a_collector_never_picks_a_forbidden_action(env):
    group, key, mask = _masked_group(env)
    qnet, explorer = _explorer(env, group, key, mask)
    data = _collect(env, explorer, key, env.batch_size[0] * 16)
    state = "state" if "state" in env.observation_keys else qnet[0].in_keys[0]
    n_agents = env.full_action_spec[key].shape[-1] if isinstance(env.full_action_spec[key], rl.Categorical) \
        else env.full_action_spec[key].shape[-2]
    state_shape = env.full_observation_spec[state].shape[env.batch_dims:]
    mixer = TensorDictModule(QMixer(state_shape=state_shape, mixing_embed_dim=8, n_agents=n_agents, device="cpu"),
                             in_keys=[(group, "chosen_action_value"), state], out_keys=["chosen_action_value"])
    loss = QMixerLoss(qnet, mixer, delay_value=True, action_space=env.full_action_spec_unbatched[key])
    loss.set_keys(action_value=(group, "action_value"), local_value=(group, "chosen_action_value"),
                  global_value="chosen_action_value", action=key)
    loss.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    data["next", "reward"] = data["next", group, "reward"].mean(-2)
    state_key = (state,) if isinstance(state, str) else state
    for at in ((), ("next",)):  # QMixer's hypernetworks read a float state
        data[(*at, *state_key)] = data[(*at, *state_key)].float()
    assert torch.isfinite(torch.tensor(_update(loss, data)))
