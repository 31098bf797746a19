"""The playground backend's env classes and ``env_names``; see ``marl_envs.backends.playground``."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from groupings import GroupMap, MarlGroupMapType

from .._named import NamedRepr
from .._quiet import EVERY_WARNING, EVERYTHING, filtered_output, ignored_warnings, quiet_import
from ..._core.messages import shell_safe
from ..._core.validate import checked_keywords, unknown_name
from .._mujoco import prepare_mujoco_gl
from ..brax import BraxWrapper, scenes
from ..jax import check_name, configure_jax

__all__ = ["SETTLING_RESETS", "SPLITS", "PlaygroundEnv", "env_names", "observation_dependence", "split_mapping",
           "unavailable"]

SPLITS: dict[str, str | tuple[tuple[str, ...], ...]] = {
    "Cheetah": "joints",
    "Hopper": "joints",
    "Walker": "limbs",
    "Humanoid": ((), ("right_thigh", "left_thigh")),
}
"""Robot (the DM Control task's prefix) -> the Brax scenes' split rule (``Scene.split``)."""

SETTLING_RESETS: dict[str, int] = {"CheetahRun": 200}
"""DM Control tasks whose reset lets the model settle -> its physics steps. Only these compute fresh starts behind a
conditional, at steps where some env ended: on a GPU, one wait for the device a step. Every other task's reset is
cheaper than a step: a fresh start for every env, selected, never waiting, as the other JAX families do."""

_SETTOTALMASS = re.compile(r"WARNING: compiler attribute 'settotalmass' is deprecated[^\n]*\n*")
_MENAGERIE = ("clones the mujoco_menagerie model repository with git when built (marl-envs downloads nothing at "
              "run time)")


@functools.cache
def import_playground():
    """``mujoco_playground.registry``, imported after JAX is configured, without the MuJoCo Warp banner it prints."""
    configure_jax()
    prepare_mujoco_gl()  # Playground imports MuJoCo: headless rendering is chosen before that
    return quiet_import("mujoco_playground", EVERY_WARNING, drop=EVERYTHING).registry


def _suite() -> list[str]:
    return list(import_playground().dm_control_suite.ALL_ENVS)


def unavailable() -> dict[str, str]:
    """Playground envs not offered, with the reason (the locomotion and manipulation suites)."""
    registry = import_playground()
    return {name: _MENAGERIE for name in (*registry.locomotion.ALL_ENVS, *registry.manipulation.ALL_ENVS)}


def _robot(task: str) -> str | None:
    return next((robot for robot in SPLITS if task.startswith(robot)), None)


@functools.cache
def _suffix(robot: str) -> str:
    """``6x1``, ``2x3``, ``9-12``: the agents' joint counts (``NxK`` when all agents drive K joints)."""
    model = scenes.RobotModel.from_mj_model(_load(next(t for t in _suite() if t.startswith(robot))).mj_model)
    sizes = [len(joints) for joints in scenes.partition(model, SPLITS[robot])]
    return f"{len(sizes)}x{sizes[0]}" if len(set(sizes)) == 1 else "-".join(map(str, sizes))


def env_names() -> list[str]:
    """The DM Control suite's envs, and ``<Env>_<split>`` for those of the robots ``SPLITS`` names."""
    suite = _suite()
    return sorted([*suite, *(f"{t}_{_suffix(_robot(t))}" for t in suite if _robot(t))])


def _load(task: str, config: dict[str, Any] | None = None):
    registry = import_playground()
    overrides = {"impl": "jax", **(config or {})}
    defaults = registry.get_default_config(task)
    bad = sorted(set(overrides) - set(defaults))
    if bad:
        raise unknown_name(f"config field of Playground's {task}", bad[0], sorted(defaults))
    # MuJoCo warns on stderr, at every load, of an attribute of DM Control's XML files: nothing a user can act on
    with ignored_warnings(EVERY_WARNING), filtered_output("stderr", _SETTOTALMASS):
        return registry.load(task, config_overrides=overrides)


def observation_dependence(env, *, states: int = 2, seed: int = 0, eps: float = 1e-3) -> list[set[int]]:
    """For each entry of ``env``'s observation, the joints it depends on: those a change of whose ``qpos`` or
    ``qvel`` entries (by ``eps``, both ways) changes the entry, at ``states`` random states around the model's rest
    pose. Physics by MuJoCo's C ``mj_forward``, the observation by the env's own ``_get_obs`` (jitted; an entry that
    does not depend on a joint comes out bit for bit the same)."""
    import mujoco
    from mujoco import mjx

    m = env.mj_model
    model = scenes.RobotModel.from_mj_model(m)
    # zeros in the reset's info (a key, targets): what _get_obs reads of it (running reset itself un-jitted is slow)
    info = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(env.reset, jax.random.PRNGKey(seed)).info)
    observe = jax.jit(lambda data: env._get_obs(data, info).reshape(-1))
    data = mujoco.MjData(m)

    def obs_at(point: np.ndarray) -> np.ndarray:  # point: qpos, then qvel
        data.qpos[:], data.qvel[:] = point[:m.nq], point[m.nq:]
        mujoco.mj_forward(m, data)
        return np.asarray(observe(mjx.put_data(m, data, impl="jax")))

    rng = np.random.default_rng(seed)
    depends: list[set[int]] = []
    for _ in range(states):
        point = np.concatenate([m.qpos0 + 0.3 * rng.standard_normal(m.nq), rng.standard_normal(m.nv)])
        depends = depends or [set() for _ in obs_at(point)]
        for joint in range(len(model.joint_names)):
            for i in (*model.joint_qpos[joint], *(m.nq + v for v in model.joint_qvel[joint])):
                up, down = point.copy(), point.copy()
                up[i] += eps
                down[i] -= eps
                for entry in np.flatnonzero(obs_at(up) != obs_at(down)):
                    depends[entry].add(joint)
    return depends


def split_mapping(env, split) -> scenes.AgentMapping:
    """The agents of ``split`` (the Brax scenes' rule) over ``env``'s robot, each observing the entries that depend
    only on the root's joints, its own joints and their neighbours, or on no joint (the Playground page says how)."""
    model = scenes.RobotModel.from_mj_model(env.mj_model)
    depends = observation_dependence(env)
    root = {j for j, body in enumerate(model.joint_body) if body == model.root_body}
    actuated = set(model.actuator_joint)
    action_indices, observation_indices = {}, {}
    for k, joints in enumerate(scenes.partition(model, split)):
        touched = set().union(*(model.touches(j) for j in joints))
        chain = set().union(*(model.ancestors(model.joint_body[j]) for j in joints))  # where its bodies hang from
        allowed = root | joints | {j for j in actuated if model.touches(j) & touched or model.joint_body[j] in chain}
        name = f"agent_{k}"
        action_indices[name] = tuple(a for a, j in enumerate(model.actuator_joint) if j in joints)
        observation_indices[name] = tuple(e for e, on in enumerate(depends) if on <= allowed)
    return scenes.AgentMapping(action_indices, observation_indices)


class PlaygroundEnv(NamedRepr, BraxWrapper):
    """A MuJoCo Playground DM Control env by name, single-agent or split (``<Env>_<split>``).

    Args:
        env_name: a name of ``env_names()`` (``CheetahRun``, ``WalkerWalk_2x3``, ...).
        num_envs, device, seed, group_map, device_path: as ``BraxWrapper``'s.
        max_steps: episode length reported as ``truncated``; default (None): the config's ``episode_length`` (1000
            in the DM Control suite, ``config={"episode_length": ...}`` changes it); a shorter one is taken, a
            longer one refused.
        config: fields of the env's config to override (``{"ctrl_dt": 0.02}``), checked.
        mapping: a split of an env named without one, ``{"action_indices": {agent: [...]}, "observation_indices":
            {agent: [...]}}`` (indices into the env's action and observation vectors), checked as ``brax``'s.

    Raises:
        ValueError: unknown env name (with close matches), one not offered (with the reason), an unknown config
            field, a ``group_map`` for a single robot (not split), a ``max_steps`` beyond ``episode_length``, a
            ``mapping`` of a split env or one that does not cover the actions once each.
    """

    @checked_keywords
    def __init__(self, env_name: str, *, num_envs: int = 1, device: torch.device | str = "cpu",
                 max_steps: int | None = None, seed: int = 0, group_map: GroupMap | MarlGroupMapType | None = None,
                 config: dict[str, Any] | None = None, mapping: Mapping[str, Mapping[str, Sequence[int]]] | None = None,
                 device_path: bool | None = None):
        env_name = shell_safe(env_name, "Playground env")
        check_name("Playground", env_name, env_names(), unavailable())
        task, _, split = env_name.partition("_")
        if mapping is not None:
            if split:
                raise ValueError(f"mapping= splits an env named without a split; {env_name!r} is split already: pass "
                                 f"{task!r} with your mapping, or {env_name!r} without one")
            scenes.check_mapping(env_name, None, mapping)
            mapping = scenes.AgentMapping(mapping["action_indices"], mapping["observation_indices"])
        env = _load(task, config)
        self.env_name, self.playground_env = env_name, env
        if split:
            mapping = split_mapping(env, SPLITS[_robot(task)])
        super().__init__(env, num_envs=num_envs, device=device, max_steps=max_steps,
                         seed=seed, action_indices=mapping and mapping.action_indices,
                         observation_indices=mapping and mapping.observation_indices, group_map=group_map,
                         device_path=device_path)

    def _resets_when_needed(self) -> bool:
        """A reset that settles the model (``SETTLING_RESETS``) would cost a hundred steps at every step."""
        return self.env_name.partition("_")[0] in SETTLING_RESETS

    def _library_horizon(self, env: Any, frame_skip: int) -> tuple[int, str]:
        """The config's ``episode_length`` (the env keeps the config it was loaded with)."""
        return int(env._config.episode_length), 'config={"episode_length": N}'
