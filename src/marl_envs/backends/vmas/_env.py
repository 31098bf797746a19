"""The vmas backend's env classes and ``env_names``; see ``marl_envs.backends.vmas``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from vmas.simulator.environment import Environment
from vmas.simulator.scenario import BaseScenario

from groupings import GroupMap, MarlGroupMapType

from ..._core.env import EnvBase
from .._spaces import space_spec
from ..._core.validate import checked_keywords, env_keywords
from ...specs import Categorical, Composite, OneHot, Unbounded
from . import check_values
from ._rng import RngStreams
from ._scenarios import (check_scenario_kwargs, env_names, load_scenario, make_vmas_env, scenario_keywords,
                         scenario_label)
from ._state import NarrowedWorld, StateSnapshot

__all__ = ["VmasEnv", "VmasWrapper", "env_names"]

# From this many envs up, a partial reset resets a world narrowed to the envs being reset. Below it a full reset
# costs little, and the batch size can equal a fixed dim of the state (positions are 2-d) and be taken for it.
_NARROW_MIN_ENVS = 16


def _as_info_tensor(value: Any, batch: int, device: torch.device) -> torch.Tensor:
    """An info entry as float32 ``(B, *shape)``, a trailing 1 added to per-env scalars (TorchRL's rule)."""
    value = torch.as_tensor(value, device=device)
    if value.ndim == 0:
        value = value.expand(batch)
    if value.ndim == 1:
        value = value.unsqueeze(-1)
    return value.to(torch.float32)


def _in_agent_order(values: Sequence | Mapping, names: list[str]) -> list:
    """VMAS outputs (a list, or a dict by agent name when ``dict_spaces=True``) as a list in agent order."""
    return [values[name] for name in names] if isinstance(values, Mapping) else list(values)


def _widen(values: Any, index: torch.Tensor, batch: int) -> Any:
    """Observations of the envs ``index`` (per-agent lists or dicts of ``(len(index), ...)`` tensors) at batch size
    ``batch``, zeros in the other rows."""
    if isinstance(values, Mapping):
        return {key: _widen(value, index, batch) for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [_widen(value, index, batch) for value in values]
    return values.new_zeros((batch, *values.shape[1:])).index_copy_(0, index, values)


def _stack(values: list, dim: int = 1) -> Any:
    """Stack per-agent tensors (or dicts of them, recursively) along the agent dim."""
    if isinstance(values[0], Mapping):
        return {key: _stack([v[key] for v in values], dim) for key in values[0]}
    return torch.stack(values, dim)


class VmasWrapper(EnvBase):
    """A built ``vmas`` environment as a marl_envs env (the backend class; ``VmasEnv`` builds by name).

    Groups default to ``groupings.default_group_map`` over each agent's spec signature (``balance`` gives
    ``{"agents": [...]}``, ``simple_adversary`` ``{"adversary": [...], "agent": [...]}``). Actions are routed
    to the VMAS agents by name, whatever the group order.

    Partial resets (``_reset`` on some envs, and the auto-reset of ``step_and_maybe_reset``) are vectorized: one
    batched VMAS reset, every other env's state kept bit for bit (see ``marl_envs.backends.vmas._state``). With
    16 envs or more it resets a world narrowed to the envs being reset, costing what a reset of that many envs
    costs, and they start where a batched reset of as many envs would put them; with fewer envs, or for a
    scenario whose state or reset a narrowed world cannot hold (state shared by all envs that the reset
    changes, per-env lists), every env is reset and only the selected rows kept: they start in the rows a
    batched reset of every env draws (after a narrowed reset gives up, the next 1, 2, 4, ... up to 64 partial
    resets go straight to that path). They draw from a random stream of their own, so resetting some envs never
    changes what the others do next. State a scenario shares between its envs (``het_mass``'s masses, the colours
    MPE scenarios draw, ``road_traffic``'s history pointers) is kept as the envs not reset have it: raw
    ``reset_at`` would change it under every env. Two limits no reset can lift: a scenario drawing random numbers
    in amounts that depend on every env's state (``football``'s scripted team) gives the other envs different
    noise once one env changes; and infos are zeros after a reset. A full ``reset()`` starts from the state the
    env had when wrapped, so that its result depends on the seed only.

    Args:
        env: a ``vmas.simulator.environment.Environment`` (``vmas.make_env(..., wrapper=None)``). Wrapping it
            neither resets it nor advances its random state. An env built with ``max_steps`` hands it over:
            the wrapper reports it as ``truncated`` and VMAS stops counting it.
        group_map: a dict ``{group: [agent names]}``, a ``MarlGroupMapType``, or None for the default.
        categorical_actions: discrete actions as ``Categorical`` indices (True) or ``OneHot`` vectors.
        max_steps: episode length reported as ``truncated``; None for no limit.

    Raises:
        TypeError: ``env`` is not a VMAS ``Environment``.
        ValueError: a malformed ``group_map``, or one whose group mixes agents with different specs;
            ``max_steps`` differs from the env's own.
    """

    @checked_keywords
    def __init__(
        self,
        env: Environment,
        *,
        group_map: GroupMap | MarlGroupMapType | None = None,
        categorical_actions: bool = True,
        max_steps: int | None = None,
    ):
        if not isinstance(env, Environment):
            raise TypeError(
                f"VmasWrapper wraps a vmas.simulator.environment.Environment, got {type(env).__name__}; build one "
                f"with vmas.make_env(scenario, num_envs=..., wrapper=None), or use VmasEnv(scenario_name, ...)"
            )
        if env.max_steps is not None:
            if max_steps is not None and max_steps != env.max_steps:
                raise ValueError(
                    f"max_steps={max_steps} differs from the VMAS env's own max_steps={env.max_steps}; pass one of "
                    f"them (or the same value)"
                )
            max_steps, env.max_steps = env.max_steps, None  # reported as truncated by EnvBase, not as done
        super().__init__(num_envs=env.num_envs, device=env.device, max_steps=max_steps)
        self._env = env
        self._rng = RngStreams(env.device)
        self.categorical_actions = categorical_actions
        self.agent_names = [agent.name for agent in env.agents]
        self.scenario_name = scenario_label(env.scenario)

        agent_specs = self._agent_specs()
        # The state at construction: every full reset starts from it, so that what a reset gives depends on
        # the seed only (some scenarios keep state that VMAS's own reset leaves alone, e.g. wind_flocking).
        self._pristine = StateSnapshot([env], self.num_envs)
        self._no_env = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._reset_obs_exact = True  # a partial reset of every env may use the observations it computes
        self._narrow_skip, self._narrow_backoff = 0, 1  # partial resets that skip the narrowed try; after a give-up
        self._declare_specs(self._group_agents(agent_specs, group_map))
        names = self.agent_names
        self._groups = {group: [names.index(a) for a in members] for group, members in self.group_map.items()}
        self._info_keys = {g: self.full_observation_spec[g, "info"].keys() if (g, "info") in self.full_observation_spec
                           else [] for g in self.group_map}

    @property
    def agents(self) -> list:
        """The VMAS agent objects (``env.agents`` of the wrapped world: positions, velocities, ...), in
        ``agent_names`` order."""
        return self._env.agents

    # -- construction helpers -------------------------------------------------------------------------
    def _agent_specs(self) -> dict[str, Composite]:
        """Each agent's specs (no batch dims): action, observation, info (if any) and reward."""
        env, device = self._env, self.device
        # Info shapes are read from scenario.info() without a trace: a scratch random stream and a restore.
        snapshot = StateSnapshot([env], self.num_envs)
        with self._rng.scratch():
            infos = env.get_from_scenario(get_observations=False, get_rewards=False, get_infos=True, get_dones=False)
        snapshot.merge(torch.zeros(self.num_envs, dtype=torch.bool, device=device))  # put everything back
        names = self.agent_names
        infos = _in_agent_order(infos[0], names) if infos else [{} for _ in names]
        specs = {}
        for name, action_space, obs_space, info in zip(names, _in_agent_order(env.action_space.spaces, names),
                                                       _in_agent_order(env.observation_space.spaces, names), infos):
            spec = Composite(device=device)
            spec["action"] = space_spec(action_space, device, categorical=self.categorical_actions,
                                        where=f"VMAS agent {name!r}'s action")
            spec["observation"] = space_spec(obs_space, device, where=f"VMAS agent {name!r}'s observation")
            if info:
                spec["info"] = Composite({k: Unbounded(_as_info_tensor(v, self.num_envs, device).shape[1:],
                                                       device=device) for k, v in info.items()}, device=device)
            spec["reward"] = Unbounded((1,), device=device)
            specs[name] = spec
        return specs

    # -- the backend hook -----------------------------------------------------------------------------
    def _set_seed(self, seed: int) -> None:
        self._rng.seed(seed)

    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        # Infos describe the last step (mostly reward terms), so a reset reports them as zeros: reading them
        # here would return the previous episode's values and run info() side effects raw VMAS never runs.
        n_reset = self.num_envs if mask is None else int(mask.sum())
        if n_reset == 0:
            return self.full_observation_spec.zero()
        if n_reset < self.num_envs:
            return self._output(self._reset_some(mask))
        if mask is None:
            self._pristine.merge(self._no_env)
        with self._rng.use("main" if mask is None else "reset"):
            obs = self._env.reset(return_observations=True)
        return self._output(obs)

    def _reset_some(self, mask: torch.Tensor) -> list:
        """Reset the envs ``mask`` selects (some, not all) with one batched VMAS reset; their observations.

        From ``_NARROW_MIN_ENVS`` envs up, the reset runs on a world narrowed to those envs unless this reset
        cannot; else every env is reset and the rows reset merged.
        """
        if self.num_envs >= _NARROW_MIN_ENVS:
            if self._narrow_skip:
                self._narrow_skip -= 1
            else:
                obs = self._reset_narrowed(mask)
                if obs is not None:
                    self._narrow_backoff = 1
                    return obs
                # A failed try costs about a reset of the envs reset (~0.5 s for road_traffic at 32 envs). Some
                # scenarios always give up (their reset replaces per-env lists), some now and then (a reset that
                # changed shared state): skip the next 1, 2, 4, ..., 64 partial resets after successive give-ups.
                self._narrow_skip, self._narrow_backoff = self._narrow_backoff, min(2 * self._narrow_backoff, 64)
        env = self._env
        snapshot = StateSnapshot([env], self.num_envs)
        if self._reset_obs_exact:
            # The reset's own observations hold those of the envs reset as long as it changed no shared state
            # (an env's observation reads its own rows and shared state only): then one merge also drops the
            # side effects of computing them on the other envs. A reset that did change shared state is undone,
            # random stream included, and done again the long way (from then on, for this env).
            stream = list(self._rng.reset)
            with self._rng.use("reset"):
                obs = env.reset(return_observations=True)
                if not snapshot.merge(mask):
                    return obs
            snapshot.merge(self._no_env)
            self._rng.reset, self._reset_obs_exact = stream, False
        with self._rng.use("reset"):
            env.reset(return_observations=False)
            snapshot.merge(mask)  # shared state back before the observations are computed from it
            obs = env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False, get_dones=False)[0]
            snapshot.merge(mask)  # drop side effects of computing them on the envs not reset
        return obs

    def _reset_narrowed(self, mask: torch.Tensor) -> list | None:
        """Reset the envs ``mask`` selects as a VMAS world of those envs only (``NarrowedWorld``): the cost of a
        reset of that many envs. Their observations at full batch size (zeros elsewhere); None, everything left
        as it was, random stream included, if the scenario's state or reset does not allow it."""
        index = mask.nonzero().squeeze(1)
        world = NarrowedWorld([self._env], self.num_envs, index)
        if not world.feasible:
            return None
        stream = list(self._rng.reset)
        world.narrow()
        try:
            with self._rng.use("reset"):
                obs = self._env.reset(return_observations=True)
        except Exception:  # a scenario whose reset needs the full batch: the full reset next raises real errors
            world.restore()
            obs = None
        if obs is not None and world.widen():
            return _widen(obs, index, self.num_envs)
        self._rng.reset = stream
        return None

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = self.vmas_actions(tensordict)
        try:
            with self._rng.use("main"):
                out = self._env.step(actions)
        except AssertionError as err:
            raise ValueError(
                f"VMAS rejected the actions: {err}. Actions must lie in env.full_action_spec "
                f"(spec.project(action) clips them)"
            ) from err
        if self._env.terminated_truncated:
            obs, rewards, terminated, truncated, infos = out
        else:
            (obs, rewards, terminated, infos), truncated = out, None
        return self._output(obs, infos, rewards, terminated, truncated)

    def vmas_actions(self, tensordict: TensorDictBase) -> list[torch.Tensor]:
        """The group actions in ``tensordict`` as the per-agent list ``vmas_env.step`` takes, in VMAS agent order."""
        actions: list[Any] = [None] * len(self.agent_names)
        for group, indices in self._groups.items():
            action = tensordict.get((group, "action"))
            spec = self.full_action_spec[group, "action"]
            if isinstance(spec, OneHot):
                action = action.argmax(-1)
            if isinstance(spec, (Categorical, OneHot)):
                action = action.unsqueeze(-1)
            for j, i in enumerate(indices):
                actions[i] = action[:, j]
        return actions

    def _output(self, obs, infos=None, rewards=None, terminated=None, truncated=None) -> TensorDictBase:
        """The one output builder of reset and step: VMAS per-agent lists -> grouped TensorDict.

        Missing ``infos`` (at reset), or an info key a scenario leaves out on some step, read as zeros.
        """
        names = self.agent_names
        obs = _in_agent_order(obs, names)
        infos = _in_agent_order(infos, names) if infos is not None else [{} for _ in names]
        rewards = _in_agent_order(rewards, names) if rewards is not None else None
        B = self.num_envs
        data: dict[str, Any] = {}
        for group, indices in self._groups.items():
            entry: dict[str, Any] = {"observation": _stack([obs[i] for i in indices])}
            if self._info_keys[group]:
                info_spec = self.full_observation_spec[group, "info"]
                entry["info"] = {
                    k: torch.stack([_as_info_tensor(infos[i][k], B, self.device) for i in indices], 1)
                    if k in infos[indices[0]] else info_spec[k].zero()
                    for k in self._info_keys[group]
                }
            if rewards is not None:
                entry["reward"] = torch.stack([rewards[i].reshape(B) for i in indices], 1).unsqueeze(-1)
            data[group] = TensorDict(entry, batch_size=(B, len(indices)), device=self.device)
        if terminated is not None:
            data["terminated"] = terminated.unsqueeze(-1).bool()
        if truncated is not None:
            data["truncated"] = truncated.unsqueeze(-1).bool()
        return TensorDict(data, batch_size=self.batch_size, device=self.device)

    # -- rendering ------------------------------------------------------------------------------------
    def _render(self, env_index: int, **kwargs: Any) -> np.ndarray:
        """An RGB frame of env ``env_index``: a ``(H, W, 3)`` uint8 array, rendered headless.

        Extra keywords go to VMAS's ``render`` (e.g. ``agent_index_focus``, ``plot_position_function``).
        Headless rendering uses EGL (Debian: ``apt-get install libegl1 libgl1-mesa-dri``), or a display
        (e.g. ``xvfb-run``). A missing pyglet raises ``ImportError``.
        """
        try:
            with self._rng.scratch():  # rendering never changes the rollout
                frame = self._env.render(mode="rgb_array", env_index=env_index, **kwargs)
        except ImportError as err:
            raise ImportError(f"rendering VMAS needs pyglet: pip install 'pyglet<=1.5.27' ({err})") from err
        except Exception as err:
            if type(err).__module__.startswith("pyglet"):
                raise RuntimeError(
                    f"VMAS could not open an OpenGL context ({type(err).__name__}: {err}); headless rendering needs "
                    f"EGL (Debian: apt-get install libegl1 libgl1-mesa-dri) or a display (run under xvfb-run)"
                ) from err
            raise
        return np.ascontiguousarray(frame, dtype=np.uint8)  # VMAS flips its frames: torch takes no negative stride

    @property
    def scenario(self) -> BaseScenario:
        """The VMAS scenario object."""
        return self._env.scenario

    @property
    def vmas_env(self) -> Environment:
        """The wrapped VMAS environment (stepping it directly bypasses the wrapper's random streams)."""
        return self._env

    @property
    def library_keywords(self) -> dict[str, str | None] | None:
        """The keywords the scenario reads, with their defaults' reprs (None: not a constant); None where they are
        not declared (a scenario of your own, a VMAS version not declared). ``marl-envs info`` lists them."""
        return scenario_keywords(self.scenario)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, scenario={self.scenario_name})"


class VmasEnv(VmasWrapper):
    """A VMAS scenario built by name (or from a ``BaseScenario``) as a marl_envs env.

    >>> env = VmasEnv("balance", num_envs=8, n_agents=4, seed=0)
    >>> env.reset()["agents", "observation"].shape
    torch.Size([8, 4, 16])

    Args:
        scenario: a name from ``env_names()``, or a ``vmas.simulator.scenario.BaseScenario`` (instance or class).
        num_envs: number of environments simulated together.
        device: the torch device VMAS simulates on.
        continuous_actions: continuous (``Bounded``) actions, or discrete ones.
        categorical_actions: with discrete actions, ``Categorical`` indices (True) or ``OneHot`` vectors.
        multidiscrete_actions: with discrete actions, one choice per action dim (``MultiCategorical``).
        max_steps: episode length reported as ``truncated``; None for no limit.
        group_map: ``{group: [agent names]}``, a ``MarlGroupMapType``, or None for the default grouping.
        seed: seeds the world's construction and then the env (``set_seed``).
        **scenario_kwargs: the scenario's own keywords (e.g. ``n_agents``).

    Raises:
        ValueError: unknown scenario name; a bad ``group_map``.
        TypeError: a keyword the scenario does not use, a value of a type its keyword does not take (its
            default's), or a ``vmas.make_env`` option VmasEnv does not take.
    """

    @checked_keywords
    def __init__(
        self,
        scenario: str | BaseScenario | type[BaseScenario],
        *,
        num_envs: int,
        device: torch.device | str = "cpu",
        continuous_actions: bool = True,
        categorical_actions: bool = True,
        multidiscrete_actions: bool = False,
        max_steps: int | None = None,
        group_map: GroupMap | MarlGroupMapType | None = None,
        seed: int | None = None,
        **scenario_kwargs: Any,
    ):
        check_scenario_kwargs(scenario_kwargs)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if multidiscrete_actions and continuous_actions:
            raise ValueError("multidiscrete_actions=True needs continuous_actions=False")
        scenario = load_scenario(scenario)
        check_values(scenario_label(scenario), scenario_keywords(scenario), scenario_kwargs)  # before VMAS reads them
        if seed is not None:
            seed %= 2**32
        env = make_vmas_env(scenario, scenario_kwargs, env_level=env_keywords(VmasEnv), num_envs=num_envs,
                            device=device, seed=seed, continuous_actions=continuous_actions,
                            multidiscrete_actions=multidiscrete_actions)
        super().__init__(env, group_map=group_map, categorical_actions=categorical_actions, max_steps=max_steps)
        #: what ``vmas.make_env`` was given besides the scenario, ``num_envs``, ``device`` and ``seed``
        self.vmas_kwargs = dict(continuous_actions=continuous_actions, multidiscrete_actions=multidiscrete_actions,
                                **scenario_kwargs)
        if seed is not None:
            self.set_seed(seed)
