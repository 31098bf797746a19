"""The mamujoco backend's env classes and ``env_names``; see ``marl_envs.backends.mamujoco``."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from typing import Any, ClassVar

from .._mujoco import prepare_mujoco_gl, quiet_model_build
from .._quiet import filtered_output, ignored_warnings
from ..pettingzoo import PettingZooEnv, Task, cycle_steps

__all__ = ["MaMuJoCoEnv", "PARTITIONS", "env_names"]

#: Each robot's partitions, as MaMuJoCo's ``get_parts_and_edges`` names them.
PARTITIONS: dict[str, tuple[str, ...]] = {
    "HalfCheetah": ("2x3", "6x1"), "Ant": ("2x4", "2x4d", "4x2"), "Hopper": ("3x1",), "Humanoid": ("9|8",),
    "HumanoidStandup": ("9|8",), "Reacher": ("2x1",), "Pusher": ("3p",), "Swimmer": ("2x1",), "Walker2d": ("2x3",),
}
_MODULE = "gymnasium_robotics.envs.multiagent_mujoco.mamujoco_v1"
# Gymnasium-Robotics prints a notice about its Adroit hands' reward functions when imported
_ADROIT_NOTICE = re.compile(r"^AdroitHand.* reward functions were updated.*\n?", re.M)


def _module() -> Any:
    prepare_mujoco_gl()  # before MuJoCo's first import: headless rendering
    with filtered_output("stderr", _ADROIT_NOTICE):  # printed on stderr, at its first import only
        return importlib.import_module(_MODULE)


# PettingZoo's conversion of MaMuJoCo's parallel env to its AEC API warns that the env declares no render_mode
_AEC_NOTICE = (r"The base environment `MaMuJoCo` does not have a `render_mode` defined", UserWarning)


def _build(api: str, robot: str, partition: str, **kwargs: Any) -> Any:
    with quiet_model_build(), ignored_warnings(_AEC_NOTICE):  # by keyword: MaMuJoCo's AEC ``env`` takes no others
        return getattr(_module(), api)(scenario=robot, agent_conf=partition, **kwargs)


def _keywords(robot: str) -> dict[str, Any]:
    """MaMuJoCo's keywords, the Gymnasium env's, and those its ``**kwargs`` pass on to ``MujocoEnv`` (less those the
    env sets itself)."""
    own = _module().raw_parallel_env  # first: it sets up MuJoCo's rendering before MuJoCo's import
    import gymnasium
    from gymnasium.envs.mujoco.mujoco_env import MujocoEnv

    spec = gymnasium.spec(f"{robot}-v5")
    module, _, attr = spec.entry_point.partition(":")
    keywords = {}
    for factory, fixed in ((MujocoEnv, ("model_path", "frame_skip", "observation_space")),
                           (getattr(importlib.import_module(module), attr), ()),
                           (own, ("scenario", "agent_conf", "gym_env"))):
        keywords.update((name, p.default) for name, p in inspect.signature(factory).parameters.items()
                        if name != "self" and name not in fixed and p.kind is not p.VAR_KEYWORD)
    keywords["max_episode_steps"] = spec.max_episode_steps  # gymnasium.make's, which MaMuJoCo builds the env with
    return keywords


@functools.cache
def tasks() -> dict[str, Task]:
    """Every robot and partition, by name (``HalfCheetah_6x1``)."""
    found = {}
    for robot, partitions in PARTITIONS.items():
        for partition in partitions:
            name = f"{robot}_{partition.replace('|', '-')}"
            found[name] = Task(
                name, functools.partial(_build, "env", robot, partition),
                functools.partial(_build, "parallel_env", robot, partition), _MODULE,
                keywords=functools.partial(_keywords, robot),
                render_modes=lambda: _module().raw_parallel_env.metadata["render_modes"], family="mamujoco")
    return found


class MaMuJoCoEnv(PettingZooEnv):
    """A MaMuJoCo robot and partition by name, ``num_envs`` instances batched; the arguments are
    :class:`~marl_envs.backends.pettingzoo.PettingZooEnv`'s."""

    family: ClassVar[str] = "mamujoco"

    @classmethod
    def known_tasks(cls) -> dict[str, Task]:
        return tasks()

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: MaMuJoCo's envs declare no ``render_mode`` of their own; the robot's
        Gymnasium env inside draws when built with ``render_mode="rgb_array"``."""
        return self.task_kwargs.get("render_mode") == "rgb_array"

    @staticmethod
    def _library_horizon(env: Any) -> tuple[int, str] | None:
        """Gymnasium's time limit of the robot's env (``max_episode_steps``), in steps of the robot."""
        steps = env.unwrapped.single_agent_env.spec.max_episode_steps
        return (cycle_steps(env, steps), "max_episode_steps=N") if steps else None


def env_names() -> list[str]:
    """Every robot and partition."""
    return list(tasks())

