"""The jumanji backend's env classes and ``env_names``; see ``marl_envs.backends.jumanji``."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDictBase

from groupings import GroupMap, MarlGroupMapType

from .._named import NamedRepr
from .._quiet import EVERY_WARNING, quiet_import
from ..._core import keywords
from ..._core.validate import check_kwargs, checked_keywords, env_keywords
from ...specs import Binary, Bounded, Categorical, Composite, Unbounded
from ..jax import JaxEnvBase, JaxModel, check_name, configure_jax, tree_paths

__all__ = ["LIMIT_BY_TERMINATION", "PER_AGENT", "UNAVAILABLE", "JumanjiEnv", "env_names", "unavailable"]

PER_AGENT: dict[str, tuple[str, ...]] = {
    "Cleaner-v0": ("agents_locations", "action_mask"),
    "Connector-v3": ("action_mask",),
    "LevelBasedForaging-v0": ("agents_view", "action_mask"),
    "MMST-v0": ("positions", "action_mask"),
    "MultiCVRP-v0": ("vehicles", "action_mask"),
    "RobotWarehouse-v0": ("agents_view", "action_mask"),
    "SearchAndRescue-v0": ("searcher_views", "positions"),
}
"""The multi-agent envs offered, with the top-level observation fields that hold one entry per agent (their
leading dim is the agent); every other field is shared."""

_SEPARATE_ENDS = ("Connector-v3",)  # agents end on their own (discount 0 once connected or blocked)
# envs that end their time_limit with a termination (discount 0), as they end a true terminal state; the others
# (LevelBasedForaging, Connector) end it with a truncation, and a termination there is a true terminal state
LIMIT_BY_TERMINATION = ("Cleaner-v0", "MMST-v0", "RobotWarehouse-v0", "SearchAndRescue-v0")

UNAVAILABLE = {"Sokoban-v0": "downloads its level data when built (marl-envs downloads nothing at run time)"}
"""Registered Jumanji envs that cannot be built here, with the reason."""

SINGLE_AGENT = ("single-agent: this backend maps Jumanji's multi-agent envs (structured single-agent envs, several "
                "with joint masks over multi-discrete actions, are not mapped)")


@functools.cache
def import_jumanji():
    """``jumanji``, imported quietly, after JAX is configured (importing it starts JAX)."""
    configure_jax()
    return quiet_import("jumanji", EVERY_WARNING)


def unavailable() -> dict[str, str]:
    """Registered Jumanji envs not offered by name, with the reason."""
    return {name: UNAVAILABLE.get(name, SINGLE_AGENT)
            for name in import_jumanji().registered_environments() if name not in PER_AGENT}


def env_names() -> list[str]:
    """The multi-agent envs of ``PER_AGENT`` that the installed Jumanji registers."""
    return sorted(set(PER_AGENT) & set(import_jumanji().registered_environments()))


_ROUTING = "jumanji.environments.routing"
CLASSES = {
    "Cleaner-v0": f"{_ROUTING}.cleaner.env:Cleaner",
    "Connector-v3": f"{_ROUTING}.connector.env:Connector",
    "LevelBasedForaging-v0": f"{_ROUTING}.lbf.env:LevelBasedForaging",
    "MMST-v0": f"{_ROUTING}.mmst.env:MMST",
    "MultiCVRP-v0": f"{_ROUTING}.multi_cvrp.env:MultiCVRP",
    "RobotWarehouse-v0": f"{_ROUTING}.robot_warehouse.env:RobotWarehouse",
    "SearchAndRescue-v0": "jumanji.environments.swarms.search_and_rescue.env:SearchAndRescue",
}
"""Each env of ``PER_AGENT`` -> ``"module:class"`` of the class ``jumanji.make`` builds it with (Jumanji 1.1.2's
registry, which registers them without keywords; a test checks both against the installed Jumanji). The env is
built from its module alone (``import_alone``): ``import jumanji`` imports every env it has."""


def _make(env_name: str, env_kwargs: dict[str, Any]) -> Any:
    """``jumanji.make(env_name, **env_kwargs)`` for a name of ``CLASSES``, its class read from its module alone."""
    configure_jax()
    module, _, name = CLASSES[env_name].partition(":")
    return getattr(quiet_import(module, EVERY_WARNING, alone=True), name)(**env_kwargs)


class _Field:
    """One leaf of Jumanji's observation (or extras) and where it goes: ``path`` in the tree, ``key`` in the
    TensorDict (without the group for per-agent fields), ``shape`` (per agent: without the agent dim)."""

    def __init__(self, path: tuple[str, ...], key: tuple[str, ...], shape: tuple[int, ...], dtype: Any,
                 per_agent: bool):
        self.path, self.key, self.shape, self.dtype, self.per_agent = path, key, shape, np.dtype(dtype), per_agent

    def read(self, tree: Any) -> jax.Array:
        for part in self.path:
            tree = tree[part] if isinstance(tree, dict) else getattr(tree, part)
        return jnp.asarray(tree)


class _AgentViews(_Field):
    """Connector's shared grid as each agent sees it, ``(n, G, G, 2)`` (the input of Jumanji's own Connector
    network): channel 0 holds the agent's own path, position and target as 1, 2, 3; channel 1 every other agent's,
    all alike (1, 2, 3), so that one policy serves every agent."""

    def __init__(self, grid: _Field, n: int):
        super().__init__(grid.path, ("observation",), (*grid.shape, 2), np.float32, True)
        self._n = n

    def read(self, tree: Any) -> jax.Array:
        grid = super().read(tree)[..., None, :, :]  # agent i's path, position, target are 3i + 1, 3i + 2, 3i + 3
        agent = jnp.arange(self._n).reshape(-1, 1, 1)
        own = (grid > 3 * agent) & (grid <= 3 * agent + 3)
        mine = jnp.where(own, grid - 3 * agent, 0)
        theirs = jnp.where(own | (grid == 0), 0, (grid - 1) % 3 + 1)
        return jnp.stack([mine, theirs], axis=-1)


#: Envs whose agents share one observation field and get their own view of it too: the field's path.
_VIEWS = {"Connector-v3": ("grid",)}


def _field_meanings(observation: Any) -> dict[str, str]:
    """The first sentence of each field's description in the docstring of Jumanji's observation type."""
    meanings: dict[str, list[str]] = {}
    field = None
    for line in (type(observation).__doc__ or "").splitlines():
        found = re.match(r"\s*-?\s*(\w+):\s*(.+)$", line)
        if found and found.group(1) in getattr(observation, "_fields", ()):
            field = found.group(1)
            meanings[field] = [found.group(2).strip()]
        elif field is not None and line.strip():
            meanings[field].append(line.strip())
        else:
            field = None
    return {name: " ".join(words).split(". ")[0].rstrip(".") for name, words in meanings.items()}


def _time_limit(env: Any) -> int | None:
    """The env's ``time_limit`` (the episode's length in env steps: each env counts the step, then tests it), or
    None (MultiCVRP)."""
    limit = getattr(env, "time_limit", None)
    return int(limit) if isinstance(limit, (int, np.integer)) and not isinstance(limit, bool) else None


class _JumanjiModel(JaxModel):
    """The Jumanji model: ``reset(key)`` and ``step(state, action)``, each agent's entries gathered by group
    (``groups``: group name -> the indices of its agents in Jumanji's order)."""

    step_uses_key = False  # Jumanji's state carries its own key

    def __init__(self, env, *, name: str, groups: dict[str, list[int]], fields: Sequence[_Field],
                 extras: Sequence[str], action_width: int, action_dtype: Any, separate: bool, num_envs: int, device):
        self.env, self.label, self._groups = env, f"Jumanji {name}", {g: np.asarray(m) for g, m in groups.items()}
        self._agent_order = np.argsort(np.concatenate(list(self._groups.values())))  # group order -> Jumanji's
        self._fields, self._extras, self._separate = list(fields), list(extras), separate
        self._width, self._action_dtype = action_width, action_dtype
        # the time_limit Jumanji ends by a termination, read against the state's step counter
        self._terminating_limit = _time_limit(env) if name in LIMIT_BY_TERMINATION else None
        self._setup(num_envs=num_envs, device=device)
        # the state's step counter, read against time_limit (SearchAndRescue names it ``step``)
        self._counter = next((f for f in ("step_count", "step") if hasattr(self._reference, f)), None)

    def _per_group(self, key: tuple[str, ...], value: jax.Array, shape: tuple[int, ...] | None = None) -> dict:
        """``{(group, *key): its agents' rows of the per-agent ``value``}`` (a scalar is every agent's)."""
        value = jnp.broadcast_to(value, self._agent_order.shape) if value.ndim == 0 else value
        return {(g, *key): value[members] if shape is None else value[members].reshape(len(members), *shape)
                for g, members in self._groups.items()}

    def _observations(self, timestep: Any) -> dict:
        """The observation's entries: the shared fields at the root, the per-agent ones and the extras by group."""
        observation = timestep.observation
        out = {}
        for f in self._fields:
            out.update(self._per_group(f.key, f.read(observation)) if f.per_agent else {f.key: f.read(observation)})
        for e in self._extras:
            out.update(self._per_group(("info", e), jnp.asarray(timestep.extras[e]), (1,)))
        return out

    def reset_one(self, key):
        state, timestep = self.env.reset(key)
        return state, self._observations(timestep)

    def step_one(self, key, state, actions):
        action = jnp.concatenate([actions[g, "action"].reshape(len(m), self._width) for g, m in self._groups.items()])
        action = action[self._agent_order]
        action = action.reshape(-1) if self._width == 1 else action
        state, timestep = self.env.step(state, action.astype(self._action_dtype))
        discount = jnp.asarray(timestep.discount)
        last = timestep.last()
        truncated = last & jnp.any(discount > 0)  # truncation keeps a discount, termination zeroes it
        if self._terminating_limit is not None and self._counter is not None:
            truncated = truncated | (last & (jnp.asarray(getattr(state, self._counter)) >= self._terminating_limit))
        out = self._observations(timestep)
        out.update(self._per_group(("reward",), jnp.asarray(timestep.reward, jnp.float32), (1,)))
        if self._separate:
            out.update(self._per_group(("terminated",), discount == 0, (1,)))
        return state, {**out, "terminated": last & ~truncated, "truncated": truncated}


def _fields(name: str, observation: Any, n: int) -> list[_Field]:
    """The observation's leaves as ``_Field``s (and the agents' views, ``_VIEWS``): per-agent fields first (the
    action mask last of them)."""
    per_agent = PER_AGENT[name]
    fields = []
    for path, leaf in tree_paths(observation):
        if path[0] in per_agent:
            if leaf.shape[:1] != (n,):
                raise ValueError(f"Jumanji {name}'s observation field {'.'.join(path)} has shape {leaf.shape}; "
                                 f"a per-agent field leads with its {n} agents")
            key = ("action_mask",) if path == ("action_mask",) else ("observation", *path)
            fields.append(_Field(path, key, tuple(leaf.shape[1:]), leaf.dtype, True))
        else:
            fields.append(_Field(path, path, tuple(leaf.shape), leaf.dtype, False))
    if name in _VIEWS:
        fields.append(_AgentViews(next(f for f in fields if f.path == _VIEWS[name]), n))
    return sorted(fields, key=lambda f: (not f.per_agent, f.key == ("action_mask",)))


def _action_spec(name: str, spec: Any, mask: _Field | None, n: int, device) -> tuple[Any, int]:
    """One agent's action spec, and its width in the flat action: Jumanji's ``MultiDiscreteArray`` gives each
    agent a ``Categorical``; a bounded integer array (MultiCVRP) one of as many choices as its action mask has;
    a bounded float array (SearchAndRescue) a ``Bounded`` per agent."""
    kind = type(spec).__name__
    if kind == "MultiDiscreteArray":
        counts = set(np.asarray(spec.num_values).reshape(-1).tolist())
        if len(counts) != 1:
            raise TypeError(f"Jumanji {name}'s agents have different numbers of actions {sorted(counts)}")
        return Categorical(counts.pop(), device=device), 1
    if kind == "BoundedArray" and np.issubdtype(spec.dtype, np.integer) and mask is not None:
        return Categorical(mask.shape[-1], device=device), 1
    if kind == "BoundedArray" and np.issubdtype(spec.dtype, np.floating) and spec.shape[:1] == (n,):
        low = torch.tensor(np.broadcast_to(spec.minimum, spec.shape)[0], dtype=torch.float32)
        high = torch.tensor(np.broadcast_to(spec.maximum, spec.shape)[0], dtype=torch.float32)
        return Bounded(low, high, tuple(spec.shape[1:]), device=device), math.prod(spec.shape[1:])
    raise TypeError(f"Jumanji {name}'s action spec {spec!r} is not one this adapter maps (multi-discrete, bounded "
                    f"integer with an action mask, or bounded float per agent)")


def _composite(flat: dict[tuple[str, ...] | str, Any], shape: tuple[int, ...], device) -> Composite:
    """A Composite of ``shape`` holding ``flat``'s specs at their (nested) keys."""
    out = Composite(shape=shape, device=device)
    for key, spec in flat.items():
        key = (key,) if isinstance(key, str) else key
        for depth in range(1, len(key)):
            if key[:depth] not in out:
                out[key[:depth]] = Composite(shape=shape, device=device)
        out[key] = spec
    return out


class JumanjiEnv(NamedRepr, JaxEnvBase):
    """A multi-agent Jumanji env by name (``jumanji.make(name, **env_kwargs)``), batched by
    the JAX path (``backends.jax.JaxModel``).

    Args:
        env_name: a name of ``env_names()`` (``RobotWarehouse-v0``, ``LevelBasedForaging-v0``, ...).
        num_envs: batch size.
        device: ``"cpu"`` or ``"cuda[:i]"`` (JAX must see that GPU).
        max_steps: episode length reported as ``truncated``; default (None): the env's ``time_limit`` (None in
            MultiCVRP); a shorter one is taken, a longer one refused.
        seed: seed of the per-env keys (``set_seed`` changes it).
        group_map: groups of the agents (``agent_0``, ...); default: one group ``agents``.
        device_path: as ``JaxEnvBase``'s (the device code path on the CPU too).
        **env_kwargs: the env class's keywords (``time_limit=50``, ``generator=...``), checked.

    Raises:
        ValueError: unknown env name (with close matches), one not offered (with the reason), or a ``max_steps``
            beyond the env's ``time_limit``.
        TypeError: a keyword the env class does not take (with close matches), or a value of a type its keyword
            does not take (its default's).
    """

    @checked_keywords
    def __init__(self, env_name: str, *, num_envs: int = 1, device: torch.device | str = "cpu",
                 max_steps: int | None = None, seed: int = 0,
                 group_map: GroupMap | MarlGroupMapType | None = None, device_path: bool | None = None,
                 **env_kwargs: Any):
        if env_name not in CLASSES:  # not offered: the reason or close matches, from Jumanji's registry
            check_name("Jumanji", env_name, env_names(), unavailable())
        accepted = keywords.declared("jumanji", env_name) if env_kwargs else None  # None: not declared, not checked
        check_kwargs(f"Jumanji env {env_name!r}", keywords.defaults(accepted), env_kwargs,
                     env=env_keywords(JumanjiEnv), kind="the env's")
        env = _make(env_name, env_kwargs)
        self.env_name, self.jumanji_env = env_name, env
        limit = _time_limit(env)
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, device_path=device_path,
                         horizon=None if limit is None else (limit, "time_limit=N"))
        customers = getattr(env, "_num_customers", None)  # MultiCVRP: a tour ends within 2 * num_customers steps
        if limit is None and isinstance(customers, (int, np.integer)):
            self._episode_bound = 2 * int(customers)
        dev = self.device
        action_spec = env.action_spec
        n = int(action_spec.shape[0])
        state, timestep = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        fields = _fields(env_name, timestep.observation, n)
        mask = next((f for f in fields if f.key == ("action_mask",)), None)
        action, width = _action_spec(env_name, action_spec, mask, n, dev)
        stepped = jax.eval_shape(env.step, state, jax.ShapeDtypeStruct(action_spec.shape, action_spec.dtype))[1]
        extras = sorted(set(timestep.extras) & set(stepped.extras))  # an entry needs a value after reset too
        separate = env_name in _SEPARATE_ENDS
        agent = {f.key: Unbounded(f.shape, device=dev) for f in fields if f.per_agent}
        if mask is not None:
            agent[mask.key] = Binary(mask.shape, device=dev)
        agent.update({("info", e): Unbounded((1,), device=dev) for e in extras})
        agent.update(action=action, reward=Unbounded((1,), device=dev))
        if separate:
            agent["terminated"] = Binary((1,), device=dev)
        specs = {f"agent_{i}": _composite(agent, (), dev) for i in range(n)}
        groups = self._group_agents(specs, group_map)
        index = {a: i for i, a in enumerate(specs)}
        B = self.num_envs
        shared = {f.key: Unbounded((B, *f.shape), dtype=torch.from_numpy(np.zeros(0, f.dtype)).dtype, device=dev)
                  for f in fields if not f.per_agent}
        self._declare_specs(groups, **_composite(shared, (B,), dev))
        described = _field_meanings(timestep.observation)
        self._meanings = {f.key if len(f.key) > 1 else f.key[0]: f"shared by every agent: {described[f.path[0]]}"
                          for f in fields if not f.per_agent and f.path[0] in described}
        if env_name in _VIEWS:
            self._meanings.update({(g, "observation"): "each agent's view of the grid: channel 0 its own path, "
                                   "position and target (1, 2, 3), channel 1 the other agents' (1, 2, 3)"
                                   for g in groups})
        self._set_model(_JumanjiModel(env, name=env_name, fields=fields, extras=extras, action_width=width,
                                      groups={g: [index[a] for a in m] for g, m in self.group_map.items()},
                                      action_dtype=action_spec.dtype, separate=separate, num_envs=num_envs,
                                      device=self.jax_device))
        self.set_seed(seed)

    def jumanji_action(self, tensordict: TensorDictBase) -> np.ndarray:
        """The agents' actions of ``tensordict`` as Jumanji's env takes them: ``(B, n, ...)`` in Jumanji's agent
        order and action dtype (what ``marl-envs bench`` steps the raw env with)."""
        value = np.concatenate([tensordict.get((g, "action")).detach().cpu().numpy() for g in self.group_map], axis=1)
        return value[:, self._model._agent_order].astype(np.dtype(self.jumanji_env.action_spec.dtype))

    @functools.cached_property
    def _library_viewer(self) -> Any:
        """The env's own Matplotlib viewer (Jumanji keeps it as ``_viewer`` or ``_env_viewer``), or None."""
        from jumanji.viewer import MatplotlibViewer

        return next((v for v in vars(self.jumanji_env).values() if isinstance(v, MatplotlibViewer)), None)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: Jumanji envs drawn by a Matplotlib viewer (all seven)."""
        return self._library_viewer is not None

    @property
    def library_keywords(self) -> dict[str, str | None] | None:
        """The keywords the Jumanji env class takes, with their defaults' reprs (None: not a constant); None where
        they are not declared. ``marl-envs info`` lists them."""
        return keywords.declared("jumanji", self.env_name)

    def _render(self, env_index: int) -> np.ndarray:
        """An ``(H, W, 3)`` uint8 image of env ``env_index``: the env's own ``render`` (which passes the viewer what it
        draws: the state, or Connector's grid), its Matplotlib figure read into an array instead of shown.

        Raises:
            NotImplementedError: the env's viewer is not a Matplotlib viewer.
            RuntimeError: before the first reset.
        """
        viewer = self._library_viewer
        if viewer is None:
            raise NotImplementedError(f"Jumanji {self.env_name}'s viewer draws no images")
        state = jax.tree.map(jnp.asarray, self._env_state(env_index))
        frames: list[np.ndarray] = []
        shown = viewer.__dict__.get("_display")
        viewer._display = lambda figure: frames.append(viewer._display_rgb_array(figure))  # SearchAndRescue's
        try:  # render returns nothing: the frame is caught where the viewer shows it
            self.jumanji_env.render(state)
        finally:
            viewer._display = shown
        return np.ascontiguousarray(np.asarray(frames[-1])[..., :3], dtype=np.uint8)

    def close(self) -> None:
        if self._library_viewer is not None:
            self._library_viewer.close()  # its Matplotlib figure
