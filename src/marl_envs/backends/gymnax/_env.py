"""The gymnax backend's env classes and ``env_names``; see ``marl_envs.backends.gymnax``."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .._named import NamedRepr
from .._quiet import EVERY_WARNING, ignored_warnings, quiet_import
from .._spaces import space_spec
from ..._core.validate import checked_keywords, did_you_mean
from ...specs import Unbounded
from ..jax import JaxEnvBase, JaxModel, check_name, configure_jax
from ._drawing import DRAWN, draw

__all__ = ["GymnaxEnv", "UNAVAILABLE", "env_names"]

UNAVAILABLE = {"MNISTBandit-bsuite": "downloads MNIST when built (marl-envs downloads nothing at run time)"}
"""Registered gymnax envs not offered by name, with the reason."""


@functools.cache
def import_gymnax():
    """``gymnax``, imported quietly, after JAX is configured (importing gymnax starts JAX)."""
    configure_jax()
    return quiet_import("gymnax", EVERY_WARNING)


CLASSES = {name: f"gymnax.environments.{where}" for name, where in {
    "CartPole-v1": "classic_control.cartpole:CartPole",
    "Pendulum-v1": "classic_control.pendulum:Pendulum",
    "Acrobot-v1": "classic_control.acrobot:Acrobot",
    "MountainCar-v0": "classic_control.mountain_car:MountainCar",
    "MountainCarContinuous-v0": "classic_control.continuous_mountain_car:ContinuousMountainCar",
    "Asterix-MinAtar": "minatar.asterix:MinAsterix",
    "Breakout-MinAtar": "minatar.breakout:MinBreakout",
    "Freeway-MinAtar": "minatar.freeway:MinFreeway",
    "Seaquest-MinAtar": "minatar.seaquest:MinSeaquest",
    "SpaceInvaders-MinAtar": "minatar.space_invaders:MinSpaceInvaders",
    "Catch-bsuite": "bsuite.catch:Catch",
    "DeepSea-bsuite": "bsuite.deep_sea:DeepSea",
    "MemoryChain-bsuite": "bsuite.memory_chain:MemoryChain",
    "UmbrellaChain-bsuite": "bsuite.umbrella_chain:UmbrellaChain",
    "DiscountingChain-bsuite": "bsuite.discounting_chain:DiscountingChain",
    "SimpleBandit-bsuite": "bsuite.bandit:SimpleBandit",
    "FourRooms-misc": "misc.rooms:FourRooms",
    "MetaMaze-misc": "misc.meta_maze:MetaMaze",
    "PointRobot-misc": "misc.point_robot:PointRobot",
    "BernoulliBandit-misc": "misc.bernoulli_bandit:BernoulliBandit",
    "GaussianBandit-misc": "misc.gaussian_bandit:GaussianBandit",
    "Reacher-misc": "misc.reacher:Reacher",
    "Swimmer-misc": "misc.swimmer:Swimmer",
    "Pong-misc": "misc.pong:Pong",
    "FrozenLake-misc": "misc.frozen_lake:FrozenLake",
}.items()}
"""gymnax's built-in env name -> ``"module:class"`` of the class ``gymnax.make`` builds it with (gymnax 1.0's
registry; a test checks it against the installed gymnax). Such an env is built from its module alone
(``import_alone``): ``import gymnax`` imports every env it has (Pong imports seaborn and SciPy)."""


def env_names() -> list[str]:
    """``gymnax.registered_envs`` less ``UNAVAILABLE``."""
    return sorted(n for n in import_gymnax().registered_envs if n not in UNAVAILABLE)


def _make(env_name: str) -> tuple[Any, Any]:
    """``gymnax.make(env_name)``: from the env's module alone for a name of ``CLASSES``, else (an env registered
    at run time) from gymnax's registry, the name checked first."""
    if env_name in CLASSES:
        configure_jax()
        module, _, name = CLASSES[env_name].partition(":")
        with ignored_warnings(EVERY_WARNING):
            env = getattr(quiet_import(module, EVERY_WARNING, alone=True), name)()
        return env, env.default_params
    check_name("gymnax", env_name, env_names(), UNAVAILABLE)
    with ignored_warnings(EVERY_WARNING):
        return import_gymnax().make(env_name)


class _GymnaxModel(JaxModel):
    """The gymnax model: ``reset_env(key, params)`` and ``step_env(key, state, action, params)``."""

    def __init__(self, env, params, *, name: str, num_envs: int, device):
        self.env, self.params, self.label = env, params, f"gymnax {name}"
        self._setup(num_envs=num_envs, device=device)

    def reset_one(self, key):
        obs, state = self.env.reset_env(key, self.params)
        return state, {"observation": jnp.asarray(obs, jnp.float32)}

    def step_one(self, key, state, actions):
        obs, state, reward, done, _ = self.env.step_env(key, state, actions["action"], self.params)
        terminated = jnp.asarray(done).reshape(()) > 0  # gymnax 1.0: step_env's done is the natural end only
        truncated = jnp.asarray(self.env.is_truncated(self._cast(state), self.params)).reshape(()) & ~terminated
        return state, {"observation": jnp.asarray(obs, jnp.float32), "reward": jnp.asarray(reward, jnp.float32
                       ).reshape(1), "terminated": terminated, "truncated": truncated}


class GymnaxEnv(NamedRepr, JaxEnvBase):
    """A gymnax env by name (``gymnax.make(name)``), batched by the JAX path (``backends.jax.JaxModel``).

    Args:
        env_name: a name of ``gymnax.registered_envs``.
        num_envs: batch size.
        device: ``"cpu"`` or ``"cuda[:i]"``.
        max_steps: episode length reported as ``truncated``; default (None): gymnax's own limit,
            ``max_steps_in_episode``; a shorter one is taken, a longer one refused.
        seed: seed of the per-env keys.
        env_params: fields of the env's ``EnvParams`` to override (``{"max_steps_in_episode": 200}``).
        device_path: as ``JaxEnvBase``'s (the device code path on the CPU too).

    Raises:
        ValueError: unknown env name (with close matches), unknown ``env_params`` field, or a ``max_steps``
            beyond ``max_steps_in_episode``.
    """

    @checked_keywords
    def __init__(self, env_name: str, *, num_envs: int = 1, device: torch.device | str = "cpu",
                 max_steps: int | None = None, seed: int = 0, env_params: dict[str, Any] | None = None,
                 device_path: bool | None = None):
        env, params = _make(env_name)
        if env_params:
            fields = set(getattr(params, "__dataclass_fields__", {}))
            bad = sorted(set(env_params) - fields)
            if bad:
                raise ValueError(f"gymnax {env_name} has no parameter {bad[0]!r}{did_you_mean(bad[0], fields) or ';'} "
                                 f"its parameters are {sorted(fields)}")
            params = params.replace(**env_params)
        self.env_name, self.gymnax_env, self.env_params = env_name, env, params
        limit = getattr(params, "max_steps_in_episode", None)  # an episode ends as ``time`` reaches it (bandits: 100.0)
        horizon = None if limit is None else (math.ceil(float(limit)), 'env_params={"max_steps_in_episode": N}')
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, horizon=horizon,
                         device_path=device_path)
        B, dev = self.num_envs, self.device
        obs_shape = tuple(jax.eval_shape(env.reset_env, jax.ShapeDtypeStruct((2,), jnp.uint32), params)[0].shape)
        action = space_spec(env.action_space(params), dev, where=f"gymnax {env_name}'s action")
        action = action.expand(B, *action.shape)
        self._declare_specs({}, observation=Unbounded((B, *obs_shape), device=dev), action=action,
                            reward=Unbounded((B, 1), device=dev))
        self._set_model(_GymnaxModel(env, params, name=env_name, num_envs=num_envs, device=self.jax_device))
        self.set_seed(seed)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: the envs gymnax's own visualizer draws (``DRAWN``)."""
        return self.gymnax_env.name in DRAWN

    def _render(self, env_index: int) -> np.ndarray:
        """gymnax's drawing of env ``env_index`` (``gymnax.visualize``): ``(500, 600, 3)`` uint8.

        Raises:
            NotImplementedError: an env gymnax's visualizer does not draw (its bsuite and misc envs but ``Catch``,
                ``Pong``, ``PointRobot``, ``MetaMaze`` and ``FourRooms``).
        """
        if not self.renders:
            raise NotImplementedError(f"gymnax's visualizer does not draw {self.env_name} (env.renders is False)")
        return draw(self.gymnax_env, self.env_params, self._env_state(env_index))
