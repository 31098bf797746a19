"""The jaxmarl backend's env classes and ``env_names``; see ``marl_envs.backends.jaxmarl``."""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from groupings import GroupMap, MarlGroupMapType

from .._mujoco import prepare_mujoco_gl
from .._named import NamedRepr
from .._quiet import EVERY_WARNING, EVERYTHING, filtered_output, quiet_import
from .._spaces import space_spec
from ..._core.messages import shell_safe
from ..._core import keywords
from ..._core.validate import checked_keywords
from ...specs import Binary, Bounded, Categorical, Composite, MultiCategorical, Unbounded
from ..jax import JaxEnvBase, JaxModel, configure_jax
from ._drawing import draw, drawing_of
from ._library import CLASSES, UNAVAILABLE, check, env_names, library_name, unavailable

__all__ = ["NO_MASK", "UNAVAILABLE", "JaxMarlEnv", "env_names", "library_name", "unavailable"]

_ALWAYS_LEGAL = "JaxMARL's get_avail_actions raises NotImplementedError and every action is legal in every state"
NO_MASK = {
    **dict.fromkeys(
        [f"MPE_simple_{n}" for n in ("v3", "adversary_v3", "crypto_v3", "push_v3", "reference_v3", "spread_v3",
                                     "tag_v3")] + ["MPE_simple_speaker_listener_v4"],
        f"{_ALWAYS_LEGAL} (a move, a stay or a message)"),
    "coin_game": f"{_ALWAYS_LEGAL} (its four moves, on a grid that wraps around)",
    "overcooked": f"{_ALWAYS_LEGAL} (a move into a counter or an interact with nothing is a no-op)",
    "overcooked_v2": f"{_ALWAYS_LEGAL} (a move into a counter or an interact with nothing is a no-op)",
    "switch_riddle": f"{_ALWAYS_LEGAL} (the action of an agent not in the room is ignored)",
}
"""The JaxMARL envs with discrete actions that carry no ``(group, "action_mask")``, with the reason; every other
discrete env carries one (``get_avail_actions``, Hanabi's ``get_legal_moves``)."""
_TIME_LIMITED = ("coin_game", "storm", "storm_2p", "storm_np")  # episodes end by their step counts only
_SEPARATE_ENDS = ("SMAX", "HeuristicEnemySMAX", "jaxnav")  # agents end on their own (units die, robots arrive)
_BATTLES = ("SMAX", "HeuristicEnemySMAX")  # a team wins when the other is wiped out: the "won" info
_MABRAX = "jaxmarl.environments.mabrax"  # its envs build Brax envs
WORLD_STATE = "world_state"  # the observation entry of JaxMARL envs that give a global state (SMAX's)


# JaxMARL prints about its optional submodules when imported and when some envs are built: nothing to act on
@functools.cache
def import_jaxmarl():
    """All of ``jaxmarl``, quietly, after JAX is configured (importing it starts JAX) and MuJoCo's headless rendering
    prepared (MABrax imports MuJoCo). An env is built from its own module alone (``library_module``)."""
    configure_jax()
    prepare_mujoco_gl()
    return quiet_import("jaxmarl", EVERY_WARNING, drop=EVERYTHING)


def library_module(module: str):
    """JaxMARL's ``module`` imported alone (not ``jaxmarl``'s ``__init__``, which imports every family), quietly,
    after JAX is configured; MuJoCo's headless rendering prepared first for MABrax's (Brax imports MuJoCo)."""
    configure_jax()
    if module.startswith(_MABRAX):
        prepare_mujoco_gl()
    return quiet_import(module, EVERY_WARNING, drop=EVERYTHING, alone=True)


def library_class(env_name: str) -> Any:
    """The class (or function) ``jaxmarl.make`` builds ``env_name`` with, from its module alone (``CLASSES``)."""
    module, _, attribute = CLASSES[library_name(env_name)].partition(":")
    try:
        return getattr(library_module(module), attribute)
    except ModuleNotFoundError as err:  # MABrax's Brax, which marl-envs[jaxmarl] does not install
        raise ImportError(f"the JaxMARL env {env_name!r} needs {err.name!r}, which is not installed ({module} "
                          f"imports it)") from err


def _instance(obj: Any, where: str) -> bool:
    """``isinstance(obj, the class "module:name")``, importing nothing: an instance's module is imported."""
    module, _, name = where.partition(":")
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and isinstance(obj, cls)


def _mask_source(env: Any, state: Any) -> tuple[str | None, Any]:
    """The method of ``env`` giving its agents' action masks from a state, and their shapes: ``get_avail_actions``,
    else (it raises ``NotImplementedError`` in Hanabi) ``get_legal_moves``; (None, None) for an env with neither."""
    for method in ("get_avail_actions", "get_legal_moves"):
        if hasattr(env, method):
            try:
                return method, jax.eval_shape(getattr(env, method), state)
            except NotImplementedError:
                continue
    return None, None


def _agent_entry(value: Any, agents: list, index: int):
    """Agent ``index``'s entry of a JaxMARL per-agent output (a dict keyed by agent, a tuple, or an array)."""
    return value[agents[index]] if isinstance(value, dict) else value[index]


def _horizon(env: Any, name: str) -> tuple[int, str] | None:
    """The env's own time limit in env steps and the keyword of ``marl_envs.make`` that changes it; None for an
    env without one (Hanabi: a game ends itself)."""
    if _instance(env, CLASSES["coin_game"]):  # its meta episode: num_outer_steps games of num_inner_steps steps
        return env.num_inner_steps * env.num_outer_steps, "num_inner_steps=N, num_outer_steps=M"
    if hasattr(env, "episode_length") and hasattr(env, "action_repeat"):  # MABrax: Brax's EpisodeWrapper
        return -(-env.episode_length // env.action_repeat), "episode_length=N"
    limit = getattr(env, "max_steps", None)
    if not isinstance(limit, (int, np.integer)) or isinstance(limit, bool):
        return None
    # MPE and SMAX (HeuristicEnemySMAX wraps one) test ``step >= max_steps`` before counting the step
    counted_before = any(_instance(getattr(env, "_env", env), CLASSES[n]) for n in ("MPE_simple_v3", "SMAX"))
    if "max_steps" in (keywords.declared("jaxmarl", name) or ()):  # None: not declared (facmac_3a: a function)
        how = 'env_kwargs={"max_steps": N}'
    elif _instance(env, CLASSES["switch_riddle"]):
        how = "num_agents=N: 4 * N - 6 steps"
    else:
        how = f"none: JaxMARL's {name} fixes it"
    return int(limit) + counted_before, how


class _JaxMarlModel(JaxModel):
    """The JaxMARL model: ``reset(key)`` and ``step_env(key, state, actions)``, each agent's entries stacked by
    group (``groups``: group name -> the indices of its agents in ``agents``)."""

    def __init__(self, env, *, name: str, agents: list, groups: dict[str, list[int]], masks: str | None,
                 separate: bool, world_state: bool, num_envs: int, device):
        self.env, self.name, self.label, self.agents, self.groups = env, name, f"JaxMARL {name}", agents, groups
        self._masks, self._separate, self._world_state = masks, separate, world_state
        # which of the agents are allies; a team's win is read off the state (``unit_alive``, the allies' units
        # first, as JaxMARL numbers them)
        self._allies = [str(a).startswith("ally") for a in agents] if name in _BATTLES else None
        limit = getattr(env, "max_steps", None)
        self._max_steps = limit if isinstance(limit, (int, np.integer)) else None
        self._setup(num_envs=num_envs, device=device)

    def _per_group(self, field: str, value: Any, cast=lambda x: x) -> dict:
        """``{(group, field): its agents' entries of the per-agent ``value`` stacked}``."""
        out = {}
        for g, members in self.groups.items():  # joined flat, then shaped: XLA fuses it as it fuses the library's step
            parts = [cast(jnp.asarray(_agent_entry(value, self.agents, i))) for i in members]
            out[g, field] = jnp.concatenate([p.reshape(-1) for p in parts]).reshape(len(parts), *parts[0].shape)
        return out

    def _observations(self, obs: Any, state: Any) -> dict:
        out = {"state": obs[WORLD_STATE].astype(jnp.float32)} if self._world_state else {}  # JaxMARL's world state
        out.update(self._per_group("observation", obs))
        if self._masks:
            out.update(self._per_group("action_mask", getattr(self.env, self._masks)(state)))
        if self._allies is not None:
            alive = getattr(state, "state", state).unit_alive  # HeuristicEnemySMAX wraps SMAX's state
            allies, enemies = alive[:self.env.num_allies].any(), alive[self.env.num_allies:].any()
            won = [(allies & ~enemies).astype(jnp.float32).reshape(1),
                   (enemies & ~allies).astype(jnp.float32).reshape(1)]
            out.update({(g, "info", "won"): jnp.stack([won[0] if self._allies[i] else won[1] for i in members])
                        for g, members in self.groups.items()})
        return out

    def reset_one(self, key):
        obs, state = self.env.reset(key)
        return state, self._observations(obs, state)

    def _time_limit_reached(self, state: Any) -> jax.Array | bool:
        """Whether the library's time limit ended an episode that ends at ``state``."""
        if self.name in _TIME_LIMITED:
            return True
        info = getattr(state, "info", None)
        if isinstance(info, dict) and "truncation" in info:  # MABrax: set by the EpisodeWrapper, not on a fall
            return jnp.asarray(info["truncation"]).reshape(()) > 0
        inner = getattr(state, "state", None)  # HeuristicEnemySMAX's state wraps SMAX's
        step = getattr(state, "step", getattr(inner, "step", None))
        if self._max_steps is not None and step is not None:
            return step >= self._max_steps
        return False

    def step_one(self, key, state, actions):
        joint = {self.agents[i]: actions[g, "action"][j] for g, members in self.groups.items()
                 for j, i in enumerate(members)}
        obs, state, reward, dones, _ = self.env.step_env(key, state, joint)
        state = self._cast(state)
        done = jnp.asarray(dones["__all__"]).reshape(())
        truncated = done & self._time_limit_reached(state)
        out = self._observations(obs, state)
        out.update(self._per_group("reward", reward, lambda r: r.astype(jnp.float32).reshape(1)))
        if self._separate:
            out.update(self._per_group("terminated", dones, lambda d: d.reshape(1) & ~truncated))
        return state, {**out, "terminated": done & ~truncated, "truncated": truncated}


class JaxMarlEnv(NamedRepr, JaxEnvBase):
    """A JaxMARL env by name (``jaxmarl.make(name, **env_kwargs)``), batched by the JAX
    path (``backends.jax.JaxModel``).

    Args:
        env_name: a name of ``env_names()`` (``jaxmarl.registered_envs`` less ``unavailable()``).
        num_envs: batch size.
        device: ``"cpu"`` or ``"cuda[:i]"`` (JAX must see that GPU).
        max_steps: episode length reported as ``truncated``; default (None): the env's own time limit (see the
            JaxMARL page of the docs; MPE: 26 steps); a shorter one is taken, a longer one refused.
        seed: seed of the per-env keys (``set_seed`` changes it).
        group_map: groups of the agents; default: ``groupings.default_group_map`` over their specs.
        env_kwargs: keywords for ``jaxmarl.make`` whose names this class takes itself (``{"max_steps": 50}``: the
            env's own time limit).
        device_path: as ``JaxEnvBase``'s (the device code path on the CPU too).
        **kwargs: forwarded to ``jaxmarl.make`` (``scenario="3m"``: a SMAX map by name, or a ``Scenario``).

    Raises:
        ValueError: unknown env name (with close matches) or one that cannot be built here (with the reason); a
            ``max_steps`` beyond the env's own time limit; a keyword given both in ``env_kwargs`` and directly.
    """

    @checked_keywords
    def __init__(self, env_name: str, *, num_envs: int = 1, device: torch.device | str = "cpu",
                 max_steps: int | None = None, seed: int = 0,
                 group_map: GroupMap | MarlGroupMapType | None = None, env_kwargs: dict[str, Any] | None = None,
                 device_path: bool | None = None, **kwargs: Any):
        env_name = shell_safe(env_name, "JaxMARL env")
        check(env_name, {"env_kwargs": env_kwargs, **kwargs})  # name, SMAX map and keywords, before JaxMARL's import
        env_kwargs = {**(env_kwargs or {}), **kwargs}  # check refused a keyword given twice
        if isinstance(env_kwargs.get("scenario"), str):  # a SMAX map by name (checked above): "3m", "2s3z", ...
            maps = library_module(CLASSES["SMAX"].partition(":")[0]).MAP_NAME_TO_SCENARIO
            env_kwargs["scenario"] = maps[env_kwargs["scenario"]]
        factory = library_class(env_name)  # what jaxmarl.make(library, ...) calls, from its module alone
        quiet = contextlib.nullcontext()
        if factory.__module__.startswith(_MABRAX):
            from ..brax import quiet_brax_build

            quiet = quiet_brax_build()
        with filtered_output("stdout", EVERYTHING), quiet:
            env = factory(**env_kwargs)
        self.env_name, self.jaxmarl_env = env_name, env
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, horizon=_horizon(env, env_name),
                         device_path=device_path)
        dev = self.device
        agents = list(env.agents)
        names_ = [str(a) for a in agents]
        one_obs = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        masks, avail = _mask_source(env, one_obs[1])
        separate = env_name in _SEPARATE_ENDS
        # a global state for a centralised critic, at the root "state", where JaxMARL's observations carry one
        world_state = isinstance(one_obs[0], dict) and WORLD_STATE in one_obs[0]
        specs = {}
        for i, agent in enumerate(agents):
            space, where = env.action_space(agent), f"JaxMARL {env_name} agent {names_[i]!r}'s action"
            action = space_spec(space, dev, where=where)
            if not isinstance(action, (Categorical, MultiCategorical, Bounded, Unbounded)):
                raise TypeError(f"{where} space is a {type(space).__name__}; Discrete, MultiDiscrete and Box are "
                                f"supported")
            obs_shape = tuple(_agent_entry(one_obs[0], agents, i).shape)
            entries = dict(observation=Unbounded(obs_shape, device=dev), action=action,
                           reward=Unbounded((1,), device=dev))
            if masks and isinstance(action, Categorical):
                entries["action_mask"] = Binary(tuple(_agent_entry(avail, agents, i).shape), device=dev)
            if separate:
                entries["terminated"] = Binary((1,), device=dev)
            if env_name in _BATTLES:
                entries["info"] = Composite(won=Unbounded((1,), device=dev), device=dev)
            specs[names_[i]] = Composite(entries, device=dev)
        masks = masks if masks and all("action_mask" in s for s in specs.values()) else None
        if not masks:
            for s in specs.values():
                if "action_mask" in s:
                    del s["action_mask"]
        if group_map is None and env_name == "SMAX":  # two opposing teams: a group each, never one shared policy
            group_map = {team: [a for a in names_ if a.startswith(team)] for team in ("ally", "enemy")}
        groups = self._group_agents(specs, group_map)
        index = {a: i for i, a in enumerate(names_)}
        root = {"state": Unbounded((num_envs, *one_obs[0][WORLD_STATE].shape), device=dev)} if world_state else {}
        self._declare_specs(groups, **root)
        self._set_model(_JaxMarlModel(env, name=env_name, agents=agents, masks=masks, separate=separate,
                                      groups={g: [index[a] for a in m] for g, m in self.group_map.items()},
                                      world_state=world_state, num_envs=num_envs, device=self.jax_device))
        self.set_seed(seed)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: the MPE and SMAX envs, drawn by JaxMARL's own visualizers."""
        return drawing_of(self.jaxmarl_env) is not None

    def _render(self, env_index: int) -> np.ndarray:
        """JaxMARL's drawing of env ``env_index`` (its MPE visualizer, SMAX's ``init_render``): ``(500, 500, 3)``
        uint8.

        Raises:
            NotImplementedError: the env has no drawing in JaxMARL (only its MPE and SMAX envs do).
        """
        if not self.renders:
            raise NotImplementedError(f"JaxMARL's visualizers draw its MPE envs (but MPE_simple_push_v3, whose "
                                      f"landmark colours they cannot read) and SMAX; {self.env_name} is not drawn "
                                      f"(env.renders is False)")
        return draw(self.jaxmarl_env, self._env_state(env_index))

    @property
    def library_keywords(self) -> dict[str, str | None] | None:
        """The keywords ``jaxmarl.make`` takes for this env, with their defaults' reprs (None: not a constant); None
        where they are not declared (MABrax, the facmac ``*a`` envs). ``marl-envs info`` lists them."""
        return keywords.declared("jaxmarl", self.env_name)
