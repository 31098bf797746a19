"""MuJoCo Playground through the Brax backend's wrapper: names, model-derived splits, exactness against raw
Playground over an episode boundary, our and TorchRL's ``check_env_specs``, rendering."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import marl_envs

if importlib.util.find_spec("mujoco_playground") is None:  # not imported here: rendering is set up before MuJoCo is
    pytest.skip("needs the playground extra", allow_module_level=True)

import jax  # noqa: E402

jnp = jax.numpy

from marl_envs.backends.playground import _env as pg  # noqa: E402
from marl_envs.backends.brax import _scenes as scenes  # noqa: E402
from marl_envs.backends.jax import env_keys  # noqa: E402

B, SEED, LIMIT = 2, 1, 4


def test_names_are_the_dm_control_suite_and_its_split_robots():
    registry = pg.import_playground()
    suite = set(registry.dm_control_suite.ALL_ENVS)
    names = set(pg.env_names())
    splits = {n for n in names if "_" in n}
    assert names - splits == suite
    assert splits == {"CheetahRun_6x1", "HopperHop_4x1", "HopperStand_4x1", "HumanoidRun_9-12",
                      "HumanoidStand_9-12", "HumanoidWalk_9-12", "WalkerRun_2x3", "WalkerStand_2x3",
                      "WalkerWalk_2x3"}
    assert set(pg.unavailable()) == {*registry.locomotion.ALL_ENVS, *registry.manipulation.ALL_ENVS}
    with pytest.raises(ValueError, match=r"'Go1JoystickFlatTerrain' cannot be built here: clones the "
                                         r"mujoco_menagerie model repository"):
        marl_envs.make("playground/Go1JoystickFlatTerrain")
    with pytest.raises(ValueError, match=r"WalkerWalk_2x3"):
        marl_envs.make("playground/WalkerWalk_2x4")
    with pytest.raises(ValueError, match=r"config field of Playground's CheetahRun.*'ctrl_dt'"):
        marl_envs.make("playground/CheetahRun", config={"ctrl_dtt": 0.02})


@pytest.mark.parametrize("task, robot", [("CheetahRun", "Cheetah"), ("WalkerWalk", "Walker"),
                                         ("HopperHop", "Hopper"), ("HumanoidRun", "Humanoid")])
def test_split_agents_observe_their_own_joints_and_not_the_far_ones(task, robot):
    """Each agent reads every observation entry that depends on its own joints alone (their positions and
    velocities), none that depends on a joint outside its root, chain and neighbours, and drives its joints'
    actuators."""
    env = pg._load(task)
    model = scenes.RobotModel.from_mj_model(env.mj_model)
    depends = pg.observation_dependence(env)
    mapping = pg.split_mapping(env, pg.SPLITS[robot])
    owned = [set() for _ in mapping.agent_names]
    for k, agent in enumerate(mapping.agent_names):
        joints = {model.actuator_joint[a] for a in mapping.action_indices[agent]}
        owned[k] = joints
        own = [e for e, on in enumerate(depends) if on and on <= joints]
        assert own and set(own) <= set(mapping.observation_indices[agent]), agent
    for k, agent in enumerate(mapping.agent_names):
        others = set().union(*(owned[i] for i in range(len(owned)) if i != k))
        far = others - {j for j in others if model.touches(j) & set().union(*(model.touches(o) for o in owned[k]))}
        chain = set().union(*(model.ancestors(model.joint_body[j]) for j in owned[k]))
        far = {j for j in far if model.joint_body[j] not in chain}
        for e in mapping.observation_indices[agent]:
            assert not depends[e] & far, (agent, e, depends[e] & far)
    # every actuator belongs to one agent
    assert sorted(a for idx in mapping.action_indices.values() for a in idx) == list(range(env.action_size))


def test_cheetah_split_matches_the_brax_scenes_rule():
    """Playground's cheetah split one agent per actuated joint, in action order, as brax/halfcheetah_6x1."""
    env = pg._load("CheetahRun")
    mapping = pg.split_mapping(env, pg.SPLITS["Cheetah"])
    assert mapping.action_indices == {f"agent_{i}": (i,) for i in range(6)}


def _split(keys):
    pairs = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    return pairs[:, 0], pairs[:, 1]


@pytest.fixture(scope="module")
def walker():
    """``playground/WalkerWalk_2x3`` stepped beside raw Playground's reset / step from the same keys and actions,
    across an episode boundary (the config's ``episode_length=4``, Playground's own time limit: ``max_steps``),
    bit for bit. The raw side runs the same batch: XLA rounds a batched physics step differently at another batch
    size, the raw library's too."""
    env = marl_envs.make("playground/WalkerWalk_2x3", num_envs=B, seed=SEED, config={"episode_length": LIMIT})
    raw, rows = env.playground_env, B
    reset, step = jax.jit(jax.vmap(raw.reset)), jax.jit(jax.vmap(raw.step))
    carried, now = _split(env_keys(SEED, rows))
    state = reset(now)
    torch.manual_seed(0)
    td = env.reset()
    np.testing.assert_array_equal(td["state"].numpy(), np.asarray(state.obs)[:B])
    ends = 0
    for t in range(2 * LIMIT + 1):
        td = env.rand_action(td)
        action = np.zeros((rows, raw.action_size), np.float32)
        for agent, idx in env.action_indices.items():
            action[:B, list(idx)] = td["agents", "action"][:, env.group_map["agents"].index(agent)].numpy()
        state = step(state, jnp.asarray(action))
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        obs = np.asarray(state.obs)[:B]
        np.testing.assert_array_equal(nxt["state"].numpy(), obs)
        for j, agent in enumerate(env.group_map["agents"]):
            own = list(env.observation_indices[agent])
            np.testing.assert_array_equal(nxt["agents", "observation"][:, j].numpy()[:, :len(own)], obs[:, own])
            np.testing.assert_array_equal(nxt["agents", "reward"][:, j, 0].numpy(), np.asarray(state.reward)[:B])
        np.testing.assert_array_equal(nxt["truncated"][:, 0].numpy(), np.full(B, (t + 1) % LIMIT == 0))
        assert not nxt["terminated"].any()  # the walker never ends itself: its episodes end by the time limit
        if (t + 1) % LIMIT == 0:  # both sides start the next episode from the env's carried key
            ends += 1
            carried, now = _split(carried)
            state = reset(now)
            np.testing.assert_array_equal(root["state"].numpy(), np.asarray(state.obs)[:B])
        td = root
    return {"env": env, "ends": ends}


def test_exact_against_raw_playground_across_an_episode_end(walker):
    assert walker["ends"] == 2


def test_the_configs_episode_length_is_max_steps(walker):
    """``max_steps`` is the config's ``episode_length`` (Playground's own time limit; truncated there, checked in
    ``walker``); a shorter one is taken, a longer one refused, naming the config field."""
    env = walker["env"]
    assert env.max_steps == env.max_episode_length == env.playground_env._config.episode_length == LIMIT
    assert marl_envs.make("playground/CartpoleBalance", num_envs=1).max_steps == 1000  # DM Control's default
    with pytest.raises(ValueError, match=r"max_steps=5 is beyond the library's own time limit: its episodes end after "
                                         r"4 steps; .*\(config=\{\"episode_length\": N\}\)"):
        marl_envs.make("playground/CartpoleBalance", num_envs=1, max_steps=5, config={"episode_length": LIMIT})


def _longest_loop(jaxpr) -> int:
    """The most iterations of any ``lax.scan`` in ``jaxpr``, nested ones included."""
    longest = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            longest = max(longest, eqn.params["length"])
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    longest = max(longest, _longest_loop(inner))
    return longest


def _settles(task: str) -> bool:
    """Whether ``task``'s reset loops over more physics steps than its step (``SETTLING_RESETS`` holds the count)."""
    raw = pg._load(task, None)
    key = jax.random.PRNGKey(0)
    state = jax.eval_shape(raw.reset, key)
    reset = _longest_loop(jax.make_jaxpr(raw.reset)(key).jaxpr)
    step = _longest_loop(jax.make_jaxpr(raw.step)(state, jnp.zeros(raw.action_size)).jaxpr)
    assert pg.SETTLING_RESETS.get(task, reset) == reset, task
    return reset > step


@pytest.mark.parametrize("task", ["CheetahRun", "WalkerWalk"])
def test_a_conditional_auto_reset_only_where_the_reset_settles_the_model(task):
    """A task's reset settles the model (``SETTLING_RESETS``) when it loops over more physics steps than its step;
    only those tasks compute fresh starts behind a conditional (one wait a step on a GPU)."""
    assert _settles(task) == (task in pg.SETTLING_RESETS)


@pytest.mark.slow
def test_settling_resets_lists_every_task_whose_reset_settles():
    assert {task for task in pg._suite() if _settles(task)} == set(pg.SETTLING_RESETS)
    env = marl_envs.make("playground/CheetahRun", num_envs=1)
    assert env._model.resets_when_needed


def test_the_walker_resets_without_a_conditional(walker):
    assert not walker["env"]._model.resets_when_needed


def test_check_env_specs(walker):
    marl_envs.check_env_specs(walker["env"], seed=0)


@pytest.mark.skipif(importlib.util.find_spec("torchrl") is None, reason="needs torchrl")
def test_torchrl_check_env_specs():
    """TorchRL's check of a Playground env (the cartpole: the walker's raw reference compiles a minute longer)."""
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs

    from marl_envs.torchrl import to_torchrl

    torchrl_check_env_specs(to_torchrl(marl_envs.make("playground/CartpoleBalance", num_envs=B, seed=SEED)))


def test_renders_the_walker(walker):
    image = walker["env"].render(0)
    assert image.shape == (240, 320, 3) and image.dtype == np.uint8 and image.std() > 0
