"""The Brax backend: every env and scene conforms, custom envs replay exactly, splits are validated and derived
from the robot model, gradients match an analytic reference, memory stays flat.

Brax physics compiles slowly on CPU (10-40 s per env cold, a few seconds from JAX's persistent cache), so
every physics env is built once per module (``built``), with the cheapest backend it supports, and small batches.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import marl_envs
from marl_envs import MarlGroupMapType
from marl_envs.specs import Bounded, Unbounded

# First the backend: its env_names() imports Brax as every Brax env build does (headless OpenGL for MuJoCo picked
# before MuJoCo is imported, jaxopt's import-time deprecation warning silenced) before this module does.
pytest.importorskip("marl_envs.backends.brax", exc_type=ImportError)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from marl_envs.backends.brax import exports as brax_exports  # noqa: E402
from marl_envs.backends.brax import scenes  # noqa: E402
from marl_envs.backends.brax import BraxEnv, BraxWrapper, enable_compilation_cache, env_names  # noqa: E402
from marl_envs.bench import run as benchmark  # noqa: E402

from envs import cheapest_brax_kwargs  # noqa: E402

SCENES = sorted(scenes.SCENES)
env_names()

from brax import envs as brax_envs  # noqa: E402
from brax.envs.base import Env, State  # noqa: E402
from brax.envs.wrappers import training  # noqa: E402


# ----------------------------------------------------------------------------------------------------
# Custom envs written the way Brax users write them (no physics pipeline)
# ----------------------------------------------------------------------------------------------------
W = np.array([[0.5, -0.25], [0.125, 0.75], [-1.0, 0.5]], dtype=np.float32)


class Drift(Env):
    """``obs' = 0.9 obs + W a``; reward ``-|obs'|^2 + a_0``; done once ``obs'_0 > 0.6``; random start in [-.5, .5]."""

    def reset(self, rng):
        obs = jax.random.uniform(rng, (3,), minval=-0.5, maxval=0.5)
        return State(pipeline_state=None, obs=obs, reward=jnp.zeros(()), done=jnp.zeros(()),
                     metrics={"episode_reward": jnp.zeros(())}, info={})

    def step(self, state, action):
        obs = 0.9 * state.obs + jnp.asarray(W) @ action
        reward = -jnp.sum(obs * obs) + action[0]
        done = jnp.where(obs[0] > 0.6, 1.0, 0.0)
        return state.replace(obs=obs, reward=reward, done=done)

    @property
    def observation_size(self):
        return 3

    @property
    def action_size(self):
        return 2

    @property
    def backend(self):
        return "abstract"


def drift_reference(obs: torch.Tensor, action: torch.Tensor):
    """The same dynamics in torch (batched): next obs, reward, done."""
    nxt = 0.9 * obs + action @ torch.as_tensor(W).T
    return nxt, -(nxt * nxt).sum(-1) + action[:, 0], nxt[:, 0] > 0.6


SPLIT = {"action_indices": {"left": [1], "right": [0]}, "observation_indices": {"left": [0, 2], "right": [1]}}


# ----------------------------------------------------------------------------------------------------
# Envs built once per module
# ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built():
    """Physics envs built once per module: ``built(name)`` -> a 2-env BraxEnv (max_steps=3)."""
    cache: dict[str, BraxEnv] = {}

    def get(name: str) -> BraxEnv:
        if name not in cache:
            cache[name] = marl_envs.make(f"brax/{name}", num_envs=2, max_steps=3, seed=0, **cheapest_brax_kwargs(name))
        return cache[name]

    yield get
    for env in cache.values():
        env.close()


@pytest.mark.parametrize("name", SCENES)
def test_scene_layout(built, name):
    env = built(name)
    n = len(scenes.jaxmarl_mapping(name).action_indices)
    assert env.group_map == ({"agents": [f"agent_{i}" for i in range(n)]} if name != "humanoid_9-8"
                             else {"agent_0": ["agent_0"], "agent_1": ["agent_1"]})  # 9 vs 8 action dims
    td = env.rollout(2, break_when_any_done=False)
    obs_size = env.full_observation_spec["state"].shape[-1]
    for group, members in env.group_map.items():
        assert td["next", group, "reward"].shape == (2, 2, len(members), 1)
        assert (td["next", group, "reward"] == td["next", group, "reward"][:, :, :1]).all()  # shared reward
        for k, agent in enumerate(members):
            idx = env.observation_indices[agent]
            obs = td["next", group, "observation"][:, :, k]
            assert torch.equal(obs[..., : len(idx)], td["next", "state"][..., list(idx)])
            assert (obs[..., len(idx):] == 0).all()  # zero padding to the group's widest agent
            assert all(0 <= i < obs_size for i in idx)


def test_scene_observation_layout_matches_the_simulator(built):
    """The layout table behind the model-derived mapping reads the right q / qd entries (internal check)."""
    for name in SCENES:
        env = built(name)
        td = env.reset()
        state = env._env_state(0).pipeline_state
        robot = scenes.SCENES[name].robot
        model = scenes.RobotModel.from_mj_model(env.brax_env.sys.mj_model)
        where = scenes._obs_index(model, scenes._ROBOT_OBS[robot], td["state"].shape[-1], robot)
        obs = td["state"][0].numpy()
        root = model.root_body
        for j, body in enumerate(model.joint_body):
            if body == root:
                continue
            np.testing.assert_allclose(obs[list(where["pos"][j])], state.q[list(model.joint_qpos[j])], rtol=1e-6)
            np.testing.assert_allclose(obs[list(where["vel"][j])], state.qd[list(model.joint_qvel[j])], rtol=1e-6)


# ----------------------------------------------------------------------------------------------------
# Mappings (construction only: shapes are traced, nothing is compiled)
# ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models():
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in SCENES:
            robot = brax_envs.get_environment(scenes.SCENES[name].robot)
            obs_size = jax.eval_shape(robot.reset, jax.ShapeDtypeStruct((2,), jnp.uint32)).obs.shape[0]
            out[name] = (robot, scenes.RobotModel.from_mj_model(robot.sys.mj_model), obs_size)
    return out


@pytest.mark.parametrize("name", SCENES)
def test_default_mapping_each_agent_observes_the_joints_it_drives(models, name):
    robot, model, obs_size = models[name]
    mapping = scenes.model_mapping(name, model, obs_size)
    where = scenes._obs_index(model, scenes._ROBOT_OBS[scenes.SCENES[name].robot], obs_size, robot)
    assert mapping.action_indices == scenes.jaxmarl_mapping(name).action_indices  # JaxMARL's action partition
    scenes.validate_mapping(mapping.action_indices, mapping.observation_indices, robot.action_size, obs_size)
    for agent, dims in mapping.action_indices.items():
        seen = set(mapping.observation_indices[agent])
        for dim in dims:
            joint = model.actuator_joint[dim]
            assert set(where["pos"][joint]) | set(where["vel"][joint]) <= seen, (agent, model.joint_names[joint])
        root = [j for j, b in enumerate(model.joint_body) if b == model.root_body]
        assert {i for j in root for i in where["vel"][j]} <= seen  # the root body's state


def test_jaxmarl_ant_agents_drive_one_leg_and_observe_another(models):
    """The defect the default mapping fixes: JaxMARL's agent_0 drives hip_4/ankle_4 but observes leg 1."""
    _, model, _ = models["ant_4x2"]
    table = scenes.jaxmarl_mapping("ant_4x2")
    assert [model.joint_names[model.actuator_joint[d]] for d in table.action_indices["agent_0"]] == ["hip_4", "ankle_4"]
    ankle_4_position = 12  # q[14] with q[:2] excluded
    assert ankle_4_position not in table.observation_indices["agent_0"]
    assert 6 in table.observation_indices["agent_0"]  # ankle_1 position


@pytest.mark.parametrize("name, clamped", [("ant_4x2", {}), ("hopper_3x1", {}), ("walker2d_2x3", {}),
                                           ("halfcheetah_6x1", {"agent_5": 1}),
                                           ("humanoid_9-8", {"agent_0": 93, "agent_1": 51})])
def test_jaxmarl_mapping_reproduces_the_tables_and_warns_about_clamped_indices(name, clamped):
    table = scenes.jaxmarl_mapping(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = BraxEnv(name, num_envs=1, mapping="jaxmarl")
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == len(clamped)
    obs_size = env.full_observation_spec["state"].shape[-1]
    for agent, count in clamped.items():
        assert any(m.startswith(f"brax/{name} mapping='jaxmarl': {agent} reads {count} observation indices >= "
                                f"{obs_size}") for m in messages), messages
    assert env.action_indices == table.action_indices
    for agent, idx in table.observation_indices.items():
        assert env.observation_indices[agent] == tuple(min(i, obs_size - 1) for i in idx)  # what JAX reads


def test_known_bad_tables_would_fail_validation(models):
    robot, _, obs_size = models["humanoid_9-8"]
    table = scenes.jaxmarl_mapping("humanoid_9-8")
    message = r"observation_indices\['agent_0'\] holds 245, out of range: outside the robot's observation \[0, 244\)"
    with pytest.raises(ValueError, match=message):
        scenes.validate_mapping(table.action_indices, table.observation_indices, robot.action_size, obs_size)


# ----------------------------------------------------------------------------------------------------
# Custom envs through BraxWrapper: exact dynamics, single- and multi-agent
# ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def drift_step():
    return jax.jit(jax.vmap(Drift().step))


def _raw_step(drift_step, obs: torch.Tensor, action: torch.Tensor):
    """Raw Brax: the custom env's own step from the given observations, of the same batch (XLA rounds a batched step
    differently at another batch size, the raw library's too)."""
    B = obs.shape[0]
    state = State(pipeline_state=None, obs=jnp.asarray(obs.numpy()), reward=jnp.zeros(B), done=jnp.zeros(B),
                  metrics={"episode_reward": jnp.zeros(B)}, info={})
    nxt = drift_step(state, jnp.asarray(action.numpy()))
    return (torch.from_numpy(np.array(nxt.obs)), torch.from_numpy(np.array(nxt.reward)),
            torch.from_numpy(np.array(nxt.done)) > 0)


def test_custom_env_single_agent_replays_raw_brax_exactly(drift_step):
    env = BraxWrapper(Drift(), num_envs=5, max_steps=6, seed=3)
    marl_envs.check_env_specs(env, seed=1)
    assert env.full_action_spec["action"] == Bounded(-1.0, 1.0, (5, 2))
    assert env.full_observation_spec["observation"] == Unbounded((5, 3))
    env.set_seed(3)
    data = env.rollout(12, break_when_any_done=False)
    obs, nxt, action = data["observation"], data["next"], data["action"]
    terminated_any = False
    for t in range(12):
        ref_obs, ref_reward, ref_done = _raw_step(drift_step, obs[:, t], action[:, t])
        assert torch.equal(nxt["observation"][:, t], ref_obs)
        assert torch.equal(nxt["reward"][:, t, 0], ref_reward)
        assert torch.equal(nxt["terminated"][:, t, 0], ref_done)
        terminated_any |= bool(ref_done.any())
    assert terminated_any  # the check covered terminations
    steps = torch.zeros(5, dtype=torch.long)
    for t in range(12):  # truncated exactly when an episode reaches max_steps
        steps += 1
        assert torch.equal(nxt["truncated"][:, t, 0], steps >= 6)
        steps[nxt["done"][:, t, 0]] = 0
    np.testing.assert_allclose(drift_reference(obs[:, 0], action[:, 0])[0], nxt["observation"][:, 0], rtol=1e-6)


def test_custom_env_multi_agent_split_replays_raw_brax_exactly(drift_step):
    env = BraxWrapper(Drift(), num_envs=4, max_steps=50, seed=0, **SPLIT)
    marl_envs.check_env_specs(env, seed=2)
    assert env.group_map == {"agents": ["left", "right"]}
    assert env.full_observation_spec["agents", "observation"].shape == (4, 2, 2)
    assert env.full_action_spec["agents", "action"].shape == (4, 2, 1)
    data = env.rollout(8, break_when_any_done=False)
    for t in range(8):
        step = data[:, t]
        robot_action = torch.cat([step["agents", "action"][:, 1], step["agents", "action"][:, 0]], dim=1)  # right->0
        ref_obs, ref_reward, ref_done = _raw_step(drift_step, step["state"], robot_action)
        nxt = step["next"]
        assert torch.equal(nxt["state"], ref_obs)
        assert torch.equal(nxt["agents", "observation"][:, 0], ref_obs[:, [0, 2]])
        assert torch.equal(nxt["agents", "observation"][:, 1], torch.stack([ref_obs[:, 1], torch.zeros(4)], 1))
        assert torch.equal(nxt["agents", "reward"][..., 0], ref_reward.unsqueeze(1).expand(4, 2))
        assert torch.equal(nxt["terminated"][:, 0], ref_done)


def test_split_with_one_group_per_agent_and_different_action_sizes():
    split = {"action_indices": {"a": [0, 1], "b": []}, "observation_indices": {"a": [0], "b": [1]}}
    with pytest.raises(ValueError, match="agent 'b' has no action indices"):
        BraxWrapper(Drift(), **split)
    env = BraxWrapper(Drift(), num_envs=2, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT, **SPLIT)
    assert env.group_map == {"left": ["left"], "right": ["right"]}
    assert env.full_observation_spec["right", "observation"].shape == (2, 1, 1)  # no padding in its own group
    marl_envs.check_env_specs(env)


@pytest.mark.parametrize("device_path", [False, True])
def test_auto_reset_is_chosen_when_the_env_is_built(device_path):
    """On the CPU a Brax env restarts its ended envs with the reset program after the step (``auto_reset``
    "after_step": a fresh start costs a good part of a Brax step); on the device path, inside the fused step. Either
    way exactly step then reset (check_env_specs compares them bit for bit); only the chosen program is compiled."""
    env = BraxWrapper(Drift(), num_envs=3, max_steps=1, seed=0, device_path=device_path)
    assert env._executor.auto_reset == ("fused" if device_path else "after_step")
    marl_envs.check_env_specs(env, seed=0, reset_steps=24)
    assert any(name.startswith("step_reset") for name in env.compile_seconds) == device_path, env.compile_seconds


def test_episode_wrapper_truncation_is_truncated_not_terminated():
    """An ``EpisodeWrapper``'s limit is the env's ``max_steps`` (its Brax steps over ``action_repeat * frame_skip``),
    a longer one refused; its truncation is ``truncated``, never ``terminated``."""
    env = BraxWrapper(training.EpisodeWrapper(Drift(), episode_length=2, action_repeat=1), num_envs=3)
    assert env.max_steps == 2
    data = env.rollout(4, lambda td: td.set("action", torch.zeros(3, 2)), break_when_any_done=False)
    assert data["next", "truncated"][:, :, 0].tolist() == [[False, True, False, True]] * 3
    assert not data["next", "terminated"].any()
    repeated = training.EpisodeWrapper(Drift(), episode_length=9, action_repeat=2)
    assert BraxWrapper(repeated, frame_skip=2).max_steps == 3  # 9 Brax steps, 4 an env step
    with pytest.raises(ValueError, match=r"max_steps=4 is beyond the library's own time limit: its episodes end "
                                         r"after 3 steps; .*\(EpisodeWrapper\(env, episode_length=N\)\)"):
        BraxWrapper(repeated, frame_skip=2, max_steps=4)


def test_a_scene_truncates_at_braxs_episode_length():
    """Brax's envs by name have no time limit of their own: ``max_steps`` defaults to the ``episode_length`` that
    ``brax.envs.create`` gives them (1000), and any other is taken. Random play to it (halfcheetah never falls) ends
    every env with ``truncated``, never ``terminated``."""
    env = marl_envs.make("brax/halfcheetah_6x1", num_envs=2, seed=0, **cheapest_brax_kwargs("halfcheetah_6x1"))
    assert env.max_steps == env.max_episode_length == inspect.signature(
        brax_envs.create).parameters["episode_length"].default == 1000
    td, ended = env.reset(), torch.zeros(2, 1, dtype=torch.bool)
    for _ in range(env.max_steps - 1):
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        ended |= td["next", "done"]
        td = root
    nxt = env.step(env.rand_action(td))["next"]
    assert not ended.any()
    assert env.done_keys == ["done", "terminated", "truncated"]  # a robot ends as one: the root's flags only
    assert nxt["truncated"].all() and nxt["done"].all() and not nxt["terminated"].any()
    env.max_steps = None  # no limit of Brax's own to outlast
    env.max_steps = 5000
    assert env.max_steps == 5000
    env.close()


def test_resets_draw_fresh_starts_per_env_and_keep_other_envs():
    env = BraxWrapper(Drift(), num_envs=4, seed=0)
    first = env.reset()["observation"]
    assert len({tuple(row.tolist()) for row in first}) == 4  # per-env keys
    td = env.step_mdp(env.rand_step(env.reset()))
    before = td["observation"].clone()
    td.set("_reset", torch.tensor([[True], [False], [True], [False]]))
    after = env.reset(td)["observation"]
    assert torch.equal(after[[1, 3]], before[[1, 3]])
    again = env.reset()["observation"]
    assert not torch.equal(again, first)  # a new episode starts elsewhere (Brax's AutoReset replays one start)
    env.set_seed(0)
    assert torch.equal(env.reset()["observation"], first)


def test_frame_skip_sums_rewards_and_stops_at_the_end(drift_step):
    env = BraxWrapper(Drift(), num_envs=3, frame_skip=3, seed=1)
    td = env.reset()
    action = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 1.0]])
    nxt = env.step(td.set("action", action))["next"]
    obs, total, ended = td["observation"], torch.zeros(3), torch.zeros(3, dtype=torch.bool)
    for _ in range(3):
        new_obs, reward, done = _raw_step(drift_step, obs, action)
        total = total + torch.where(ended, 0.0, reward)
        obs = torch.where(ended.unsqueeze(1), obs, new_obs)
        ended = ended | done
    assert ended[0] and not ended[1]  # env 0 ends during the skip, env 1 does not
    torch.testing.assert_close(nxt["reward"][:, 0], total, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(nxt["observation"], obs, rtol=1e-6, atol=1e-6)
    assert torch.equal(nxt["terminated"][:, 0], ended)


def test_any_brax_env_splits_by_a_mapping_dict():
    split = {"action_indices": {"a": [0]}, "observation_indices": {"a": [1, 0]}}
    env = marl_envs.make("brax/fast", num_envs=2, mapping=split, max_steps=4)
    assert env.group_map == {"agents": ["a"]} and env.action_indices == {"a": (0,)}
    marl_envs.check_env_specs(env, seed=0)
    td = env.rollout(2)
    assert torch.equal(td["next", "agents", "observation"][:, :, 0], td["next", "state"].flip(-1))


def test_dict_observations_become_a_nested_composite():
    env = BraxEnv("fast", num_envs=2, obs_mode="dict_pixels_state", max_steps=5)
    assert set(env.full_observation_spec["observation"].keys()) == {"state", "pixels/view_0", "pixels/view_1"}
    assert env.full_observation_spec["observation", "pixels/view_0"].shape == (2, 4, 4, 3)
    marl_envs.check_env_specs(env, seed=0)


# ----------------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("split, error, message", [
    ({"action_indices": {"a": [0, 1], "b": [1]}, "observation_indices": {"a": [0], "b": [0]}}, ValueError,
     r"action dim 1 is owned by both 'a' and 'b' \(the action indices overlap\); each action dim needs exactly "
     r"one owner"),
    ({"action_indices": {"a": [0, 0], "b": [1]}, "observation_indices": {"a": [0], "b": [0]}}, ValueError,
     r"action dim 0 is owned twice by 'a'"),
    ({"action_indices": {"a": [0]}, "observation_indices": {"a": [0]}}, ValueError,
     r"Missing indices: action dims \[1\] are owned by no agent"),
    ({"action_indices": {"a": [0, 2], "b": [1]}, "observation_indices": {"a": [0], "b": [0]}}, ValueError,
     r"action_indices\['a'\] holds 2, out of range: outside the robot's action dims \[0, 2\)"),
    ({"action_indices": {"a": [0], "b": [1]}, "observation_indices": {"a": [0], "b": [3]}}, ValueError,
     r"observation_indices\['b'\] holds 3, out of range: outside the robot's observation \[0, 3\)"),
    ({"action_indices": {"a": [0], "b": [1]}, "observation_indices": {"a": [0], "b": []}}, ValueError,
     r"agent 'b' has no observation indices"),
    ({"action_indices": {"a": [0], "b": [1]}, "observation_indices": {"a": [0], "c": [1]}}, ValueError,
     r"must name the same agents in the same order; only in action_indices: \['b'\], "
     r"only in observation_indices: \['c'\]"),
    ({"action_indices": {"a": [0], "b": [1]}}, ValueError, r"pass both action_indices and observation_indices"),
    ({"action_indices": {"a": [0.5], "b": [1]}, "observation_indices": {"a": [0], "b": [1]}}, TypeError,
     r"action_indices\['a'\] must be a flat sequence of ints, got \[0.5\]"),
    ({"action_indices": {"a": "01"}, "observation_indices": {"a": [0]}}, TypeError,
     r"action_indices\['a'\] must be a sequence of ints, got '01'"),
])
def test_bad_split_is_rejected_naming_the_culprit(split, error, message):
    with pytest.raises(error, match=message):
        BraxWrapper(Drift(), **split)


def test_bad_wrapper_arguments():
    with pytest.raises(TypeError, match=r"BraxWrapper wraps a brax.envs.Env \(or a MuJoCo Playground MjxEnv\), got str"):
        BraxWrapper("ant")
    with pytest.raises(ValueError, match="the env is wrapped in AutoResetWrapper; pass an unbatched env"):
        BraxWrapper(training.AutoResetWrapper(Drift()))
    with pytest.raises(ValueError, match="the env is wrapped in VmapWrapper"):
        BraxWrapper(training.VmapWrapper(Drift()))
    # a device torch cannot use is refused first, as by every backend; one torch can use but JAX cannot, by JAX's
    if torch.version.cuda is None:
        with pytest.raises(ValueError, match=r"device 'cuda' is not available: this torch .* is a CPU build"):
            BraxWrapper(Drift(), device="cuda")
    elif not jax.devices()[0].platform == "gpu":
        with pytest.raises(ValueError, match=r"device='cuda' but JAX sees 0 CUDA device\(s\); install JAX with CUDA"):
            BraxWrapper(Drift(), device="cuda")
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match="device 'mps' is not available: torch sees no MPS device"):
            BraxWrapper(Drift(), device="mps")
    else:
        with pytest.raises(ValueError, match="device='mps' is not supported by the JAX backends; use 'cpu' or 'cuda"):
            BraxWrapper(Drift(), device="mps")
    with pytest.raises(ValueError, match="frame_skip must be a positive int, got 0"):
        BraxWrapper(Drift(), frame_skip=0)
    with pytest.raises(ValueError, match="group_map needs a multi-agent split"):
        BraxWrapper(Drift(), group_map={"agents": ["a"]})
    message = r"group 'g' mixes agents with different specs: 'a' and 'b' differ at 'action': Bounded\(shape=\(2,\)"
    with pytest.raises(ValueError, match=message):
        BraxWrapper(_Wide(), action_indices={"a": [0, 1], "b": [2]}, observation_indices={"a": [0], "b": [1]},
                    group_map={"g": ["a", "b"]})
    with pytest.raises(ValueError, match="unknown Brax env 'antt'; did you mean 'ant'"):
        BraxEnv("antt")
    with pytest.raises(ValueError, match="unknown Brax env 'brax/antt'; did you mean 'brax/ant'"):
        marl_envs.make("brax/antt")
    with pytest.raises(TypeError, match=r"the Brax env 'ant' got an unexpected keyword argument 'legs'; it accepts "
                                        r"the env keywords \['num_envs', .* and the Brax env's keywords "
                                        r"\['ctrl_cost_weight', "):
        BraxEnv("ant", legs=6)
    with pytest.raises(ValueError, match="a mapping dict needs exactly the keys 'action_indices' and 'observ"):
        BraxEnv("fast", mapping={"action_indices": {"a": [0]}})
    with pytest.raises(ValueError, match="mapping='jaxmarl' needs a scene"):
        BraxEnv("fast", mapping="jaxmarl")
    with pytest.raises(ValueError, match="mapping='joints': expected None"):
        BraxEnv("hopper_3x1", mapping="joints")
    with pytest.raises(ValueError, match=r"_Grows.step returns a state unlike the one reset returns \(state.obs: "
                                         r"reset gives \(3,\), step gives \(5,\)\)"):
        BraxWrapper(_Grows())
    with pytest.raises(ValueError, match=r"_Grows.step returns a state unlike the one reset returns"):
        BraxWrapper(_Grows(), requires_grad=True)


class _Wide(Drift):
    @property
    def action_size(self):
        return 3

    def step(self, state, action):
        return super().step(state, action[:2])


class _Grows(Drift):
    def step(self, state, action):
        return state.replace(obs=jnp.concatenate([state.obs, action]))


def test_render():
    env = BraxWrapper(Drift())
    assert not env.renders
    with pytest.raises(NotImplementedError, match="Drift has no MuJoCo model to render"):
        env.render()


def test_render_physics_env_headless(built):
    env = built("hopper_3x1")
    env.reset()
    assert env.renders
    with pytest.raises(IndexError, match=r"env_index must be an int in \[0, 2\), got 5"):
        env.render(5)
    try:
        image = env.render(1, height=60, width=80)
    except RuntimeError as err:  # no EGL / OSMesa on this machine: the message says what to install
        assert "MUJOCO_GL" in str(err)
        pytest.skip(f"no headless OpenGL here: {err}")
    assert image.shape == (60, 80, 3) and image.dtype == np.uint8
    assert image.std() > 10  # a scene, not a blank frame
    # the default camera follows the robot (the model's "track"), not MuJoCo's free camera (a speck from afar)
    assert np.array_equal(env.render(1, height=60, width=80, camera="track"), image)
    assert not np.array_equal(env.render(1, height=60, width=80, camera=-1), image)
    with pytest.raises(ValueError, match=r"unknown camera 'trak'; did you mean 'track'\? the model's cameras are "
                                         r"\['track'\] \(or an index in \[-1, 1\); -1 is MuJoCo's free camera\)"):
        env.render(1, camera="trak")
    with pytest.raises(ValueError, match=r"unknown camera 3; the model's cameras are \['track'\]"):
        env.render(1, camera=3)


# ----------------------------------------------------------------------------------------------------
# Differentiable rollouts
# ----------------------------------------------------------------------------------------------------
def _policy_rollout(env, actions):
    """Differentiable rollout with the given per-step actions ``(T, B, 2)`` (robot order); sum of rewards."""
    td = env.reset()
    total = 0.0
    for t in range(actions.shape[0]):
        if env.action_indices is None:
            td.set("action", actions[t])
        else:  # left drives dim 1, right dim 0
            td.set(("agents", "action"), torch.stack([actions[t][:, 1:], actions[t][:, :1]], dim=1))
        td = env.step(td)
        reward = td["next", "reward"] if env.action_indices is None else td["next", "agents", "reward"][:, 0]
        total = total + reward.sum()
        td = env.step_mdp(td)
    last = td["observation"] if env.action_indices is None else td["state"]
    return total + (last ** 2).sum()


@pytest.mark.parametrize("split", [{}, SPLIT], ids=["single", "split"])
def test_gradients_match_an_analytic_torch_reference(split):
    T, B = 4, 3
    env = BraxWrapper(Drift(), num_envs=B, requires_grad=True, seed=5, **split)
    start = env.reset()["observation" if not split else "state"].clone()
    actions = (0.3 * torch.randn(T, B, 2, generator=torch.Generator().manual_seed(0))).requires_grad_()
    env.set_seed(5)
    _policy_rollout(env, actions).backward()

    reference = actions.detach().clone().requires_grad_()
    obs, total = start, 0.0
    for t in range(T):
        obs, reward, _ = drift_reference(obs, reference[t])
        total = total + reward.sum()
    (total + (obs ** 2).sum()).backward()
    torch.testing.assert_close(actions.grad, reference.grad, rtol=1e-4, atol=1e-4)
    assert reference.grad[0].abs().sum() > 0  # the first action matters through time


def test_gradients_stop_at_resets_and_detach_state():
    env = BraxWrapper(Drift(), num_envs=2, requires_grad=True)
    td = env.reset()
    action = torch.zeros(2, 2, requires_grad=True)
    td = env.step_mdp(env.step(td.set("action", action)))
    td.set("_reset", torch.tensor([[True], [False]]))
    td = env.reset(td)
    nxt = env.step(td.set("action", torch.zeros(2, 2)))["next"]
    nxt["observation"].sum().backward()
    assert action.grad[0].abs().sum() == 0 and action.grad[1].abs().sum() > 0  # env 0 was reset
    action.grad = None
    env.detach_state()
    fresh = torch.zeros(2, 2, requires_grad=True)
    env.step(td.set("action", fresh))["next", "observation"].sum().backward()
    assert fresh.grad.abs().sum() > 0 and action.grad is None  # the history before detach_state is cut


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
def test_differentiable_steps_keep_memory_flat():
    env = BraxWrapper(Drift(), num_envs=64, requires_grad=True)
    policy = torch.nn.Linear(3, 2)

    def chunk():  # 10 differentiable steps, backward, truncate
        td = env.reset()
        loss = 0.0
        for _ in range(10):
            td = env.step(td.set("action", torch.tanh(policy(td["observation"]))))
            loss = loss + td["next", "reward"].sum()
            td = env.step_mdp(td)
        loss.backward()
        env.detach_state()

    for _ in range(5):  # compile, allocator warm-up
        chunk()
    before = _rss_mb()
    for _ in range(50):  # 500 steps
        chunk()
    assert _rss_mb() - before < 100


# ----------------------------------------------------------------------------------------------------
# Compilation cache and benchmark
# ----------------------------------------------------------------------------------------------------
def test_compilation_cache_location_and_opt_out(monkeypatch, tmp_path):
    saved = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("MARL_ENVS_JAX_CACHE", "0")
        assert enable_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
        assert BraxEnv("fast", num_envs=2).export_file is None  # nor are envs saved
        monkeypatch.delenv("MARL_ENVS_JAX_CACHE")
        monkeypatch.setenv("MARL_ENVS_JAX_CACHE_DIR", str(tmp_path))
        assert enable_compilation_cache() == str(tmp_path) == jax.config.jax_compilation_cache_dir
        monkeypatch.setenv("MARL_ENVS_JAX_CACHE_DIR", "/elsewhere")
        assert enable_compilation_cache() == str(tmp_path)  # an existing JAX cache directory is kept
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


@pytest.fixture
def exports_dir(tmp_path, monkeypatch):
    """Saved envs go to a fresh folder (JAX's own compilation cache stays where it is)."""
    folder = tmp_path / "marl_envs-exported"
    monkeypatch.setattr(brax_exports, "directory", lambda: folder)
    return folder


def _rollout(env, steps=6, roots=False):
    """``steps`` of ``step_and_maybe_reset`` with seeded random actions (and the next roots, if ``roots``)."""
    env.set_seed(3)
    generator = torch.Generator().manual_seed(0)
    td, out, nxt = env.reset(), [], []
    for _ in range(steps):
        td.update(env.full_action_spec.rand(generator=generator))
        step, td = env.step_and_maybe_reset(td)
        out.append(step)
        nxt.append(td.clone())
    return (torch.stack(out), torch.stack(nxt)) if roots else torch.stack(out)


@pytest.mark.parametrize("name", ["walker2d_2x3", "humanoid_9-8", "fast"])
def test_cache_clear_frequency_leaves_the_data_unchanged(built, name):
    """An env clearing JAX's caches after its steps (``cache_clear_frequency``) keeps its compiled programs and
    gives the same data, truncations and resets included."""
    env = built(name)
    twin = marl_envs.make(f"brax/{name}", num_envs=2, max_steps=3, seed=0, cache_clear_frequency=10**9,
                          **cheapest_brax_kwargs(name))
    (steps, roots), (twin_steps, twin_roots) = _rollout(env, 7, roots=True), _rollout(twin, 7, roots=True)
    assert set(steps.keys(True, True)) == set(twin_steps.keys(True, True))
    assert set(roots.keys(True, True)) == set(twin_roots.keys(True, True))
    assert (steps == twin_steps).all() and (roots == twin_roots).all()
    assert steps["next", "truncated"][2].all()  # max_steps=3: the third step truncates, then a reset
    td = env.reset()
    assert (twin.reset() == td).all()
    td.update(env.full_action_spec.rand())
    one, other = env.step(td.clone()), twin.step(td.clone())  # step alone (no next root built)
    assert (one == other).all() and set(one.keys(True, True)) == set(other.keys(True, True))


def test_a_named_env_is_saved_once_and_rebuilt_from_its_export(exports_dir):
    kwargs = dict(num_envs=2, max_steps=4, backend="spring", mapping="jaxmarl")
    with pytest.warns(UserWarning, match="mapping='jaxmarl'"):
        first = BraxEnv("halfcheetah_6x1", **kwargs)
    assert first.export_file.parent == exports_dir and not first.from_export
    assert [f.name for f in exports_dir.iterdir()] == [first.export_file.name]  # no temporary file left
    with pytest.warns(UserWarning, match="mapping='jaxmarl'"):  # the mapping's warnings come back too
        second = BraxEnv("halfcheetah_6x1", **kwargs)
    assert second.from_export and second.export_file == first.export_file
    assert second.group_map == first.group_map and second.action_indices == first.action_indices
    assert second.observation_indices == first.observation_indices
    assert second.full_observation_spec == first.full_observation_spec
    assert second.full_action_spec == first.full_action_spec
    assert (_rollout(second) == _rollout(first)).all()  # bit for bit, truncations and resets included
    traced = BraxWrapper(first.brax_env, num_envs=2, max_steps=4, action_indices=first.action_indices,
                         observation_indices=first.observation_indices)  # never exported
    assert traced.export_file is None
    # another XLA program: the saved modules' batch dim is symbolic, and XLA fuses and orders some float32
    # operations of the refined program differently (halfcheetah's contacts amplify the last bits over 6 steps)
    torch.testing.assert_close(_rollout(traced), _rollout(first), rtol=1e-4, atol=1e-4)
    assert second.brax_env.action_size == 6  # built on first use
    marl_envs.check_env_specs(second, seed=0)


def test_saved_envs_are_keyed_on_their_arguments(exports_dir):
    base = BraxEnv("fast", num_envs=2)
    other = BraxEnv("fast", num_envs=3)  # another batch size: the same modules (their batch dim is symbolic)
    assert other.from_export and other.export_file == base.export_file
    assert other.rollout(2)["next", "observation"].shape[:2] == (3, 2)
    assert BraxEnv("fast", num_envs=2, frame_skip=2).export_file != base.export_file
    assert BraxEnv("fast", num_envs=2, max_steps=7, seed=5).from_export  # both only matter on the torch side
    assert BraxEnv("fast", num_envs=2, requires_grad=True).export_file is None
    assert len(list(exports_dir.iterdir())) == 2

    # envs saved by another installation are deleted on the next save once unused for a week, not before
    stale, recent = exports_dir / "0000000000000000-old.json", exports_dir / "0000000000000000-recent.json"
    for file in (stale, recent):
        file.write_text("{}")
    os.utime(stale, (0, 0))
    os.utime(base.export_file, (0, 0))  # this installation's own files are kept, however old
    BraxEnv("fast", num_envs=2, frame_skip=3)  # saved: the others are pruned
    assert not stale.exists() and recent.exists() and base.export_file.exists()


def test_a_corrupt_export_is_rebuilt_and_an_unwritable_folder_warns(exports_dir, monkeypatch):
    file = BraxEnv("fast", num_envs=2).export_file
    file.write_text("{not json")
    rebuilt = BraxEnv("fast", num_envs=2)
    assert not rebuilt.from_export and json.loads(file.read_text())["format"] >= 1
    assert BraxEnv("fast", num_envs=2).from_export

    blocker = exports_dir.parent / "a_file"
    blocker.write_text("")
    monkeypatch.setattr(brax_exports, "directory", lambda: blocker / "marl_envs-exported")
    with pytest.warns(RuntimeWarning, match=r"could not save the compiled Brax env to .*a_file/marl_envs-exported"):
        env = BraxEnv("fast", num_envs=2)
    assert env.export_file is None and env.rollout(2)["next", "reward"].shape == (2, 2, 1)


class _Registered(Drift):
    pass


def test_user_registered_or_unusual_envs_are_not_saved(exports_dir):
    brax_envs.register_environment("marl_envs_test_drift", _Registered)
    try:
        assert BraxEnv("marl_envs_test_drift", num_envs=2).export_file is None  # its code is not pinned down
    finally:
        del brax_envs._envs["marl_envs_test_drift"]
    assert BraxEnv("fast", num_envs=2, mapping={"action_indices": {"a": [0]}, "observation_indices": {"a": (0, 1)}}
                   ).export_file is not None  # tuples are plain values
    assert BraxEnv("fast", num_envs=2, mapping={"action_indices": {"a": np.array([0])},
                                                "observation_indices": {"a": [0]}}).export_file is None


def test_a_saved_env_loads_in_a_new_process_without_brax(tmp_path):
    """The point of saving: a later process neither imports Brax nor traces, and steps the same, with the same
    number of envs or another (env i's starts do not depend on the batch size)."""
    script = (  # the same actions for the first envs whatever the batch size
        "import json, sys, marl_envs, torch\n"
        "B = int(sys.argv[1])\n"
        "env = marl_envs.make('brax/fast', num_envs=B, max_steps=3)\n"
        "torch.manual_seed(0)\n"
        "td, seen = env.reset(), []\n"
        "for _ in range(5):\n"
        "    td['action'] = torch.rand(4, *env.full_action_spec['action'].shape[1:])[:B] * 2 - 1\n"
        "    out, td = env.step_and_maybe_reset(td)\n"
        "    seen.append(out['next', 'observation'].tolist())\n"
        "print(json.dumps([env.from_export, 'brax' in sys.modules, seen]))\n"
    )
    environ = {**os.environ, "MARL_ENVS_JAX_CACHE_DIR": str(tmp_path)}
    for variable in ("MARL_ENVS_JAX_CACHE", "JAX_COMPILATION_CACHE_DIR"):
        environ.pop(variable, None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", script, str(num_envs)], env=environ,
                                      capture_output=True, text=True, check=True).stdout.splitlines()[-1])
            for num_envs in (4, 4, 2)]
    assert runs[0][:2] == [False, True] and runs[1][:2] == [True, False] and runs[2][:2] == [True, False]
    assert runs[1][2] == runs[0][2]
    np.testing.assert_allclose(runs[2][2], np.asarray(runs[0][2])[:, :2], rtol=1e-6, atol=1e-6)


def test_benchmark_rows():
    rows = benchmark("brax/fast", num_envs=2, steps=3)
    assert rows[0][0] == "marl_envs BraxEnv, auto-reset" and rows[0][2] == 6
    labels = [label for label, _, _ in rows]
    assert "pure JAX: jit(vmap(step)) Python loop, Brax auto-reset" in labels
    assert "pure JAX: lax.scan rollout (the limit)" in labels
    assert all(seconds >= 0 for _, seconds, _ in rows)
    assert any(label.strip().startswith("ours: compile step") and steps == 0 for label, _, steps in rows)


def test_building_halfcheetah_is_quiet_and_writes_no_mujoco_log(tmp_path, monkeypatch, capfd):
    """MuJoCo warns about halfcheetah's model file (``settotalmass``): not on stderr, not into MUJOCO_LOG.TXT."""
    monkeypatch.chdir(tmp_path)
    BraxEnv("halfcheetah", requires_grad=True).close()  # requires_grad: built from Brax, never from an export
    assert list(tmp_path.iterdir()) == []
    assert "settotalmass" not in capfd.readouterr().err


def test_no_egl_library_leaves_mujoco_gl_unset():
    """A headless machine without libEGL (a GPU server without libegl1): MuJoCo's import breaks on
    ``MUJOCO_GL=egl`` there, so it is not set, and the env builds and steps."""
    script = (
        "import ctypes.util, os\n"
        "ctypes.util.find_library = lambda name: None\n"
        "import marl_envs\n"
        "env = marl_envs.make('brax/fast', num_envs=2, max_steps=3, requires_grad=True)  # built from Brax\n"
        "env.rollout(4, break_when_any_done=False)\n"
        "import sys\n"
        "print('mujoco' in sys.modules, os.environ.get('MUJOCO_GL'))\n"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    out = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "True None"
