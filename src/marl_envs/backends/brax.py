"""Brax backend: every Brax env by name, multi-agent splits of Brax robots, differentiable rollouts.

>>> import marl_envs
>>> env = marl_envs.make("brax/ant_4x2", num_envs=8, backend="spring")  # doctest: +SKIP
>>> env.group_map  # doctest: +SKIP
{'agents': ['agent_0', 'agent_1', 'agent_2', 'agent_3']}

Single-agent envs (``brax/ant``, a ``BraxWrapper`` without indices) keep TorchRL's ``BraxWrapper`` layout:

====================== ================== ==========================================================
key                    shape              spec
====================== ================== ==========================================================
``observation``        ``(B, obs)``       ``Unbounded`` float32 (a nested Composite for dict observations)
``action``             ``(B, act)``       ``Bounded(-1, 1)`` float32 (Brax clips to each actuator's range)
``("next", "reward")`` ``(B, 1)``         ``Unbounded`` float32
====================== ================== ==========================================================

A multi-agent split (the scenes ``brax/ant_4x2``, ``brax/halfcheetah_6x1``, ``brax/hopper_3x1``,
``brax/walker2d_2x3``, ``brax/humanoid_9|8``, or ``action_indices`` / ``observation_indices``) gives, for a group
``g`` of ``n`` agents:

========================= ================== ===============================================================
key                       shape              spec
========================= ================== ===============================================================
``(g, "observation")``    ``(B, n, m)``      ``Unbounded`` float32; ``m`` = the group's largest agent, the
                                             others zero-padded at the end
``(g, "action")``         ``(B, n, d)``      ``Bounded(-1, 1)`` float32, scattered into the robot's action
``("next", g, "reward")`` ``(B, n, 1)``      ``Unbounded`` float32, the robot's reward copied per agent
``state``                 ``(B, obs)``       ``Unbounded`` float32, the robot's full observation
========================= ================== ===============================================================

``done`` / ``terminated`` / ``truncated`` ``(B, 1)`` sit at the root. The Brax env's ``done`` is ``terminated``
(a ``truncation`` info, as ``EpisodeWrapper`` writes, is ``truncated``); ``max_steps`` (counted in env steps,
each ``frame_skip`` Brax steps) is ``truncated``.

**Speed.** The Brax state stays in JAX, packed into one buffer per dtype. Each ``step`` is one compiled
``jit(vmap(...))`` call (agent scatter/gather, ``frame_skip`` via ``lax.scan``) and each reset one more, which
draws fresh random starts for exactly the envs being reset (Brax's ``AutoResetWrapper`` replays one cached
start). The state buffers are donated. On CPU actions go in as NumPy views and outputs come back as one copied
buffer (measured here: ~40 us a step, against ~50 us with DLPack out and ~160 us with DLPack in), and the output
TensorDicts are built while JAX computes the step (``_advance``); on GPU both ways are zero-copy DLPack. JAX caches are never cleared on the hot path. ``benchmark`` compares with pure JAX.

**Compile once.** JAX's persistent compilation cache is switched on when the first env is built, in
``$MARL_ENVS_JAX_CACHE_DIR`` (default ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/jax``; compilations over 0.2 s
are kept), unless JAX already has a cache directory (``JAX_COMPILATION_CACHE_DIR``) or ``MARL_ENVS_JAX_CACHE=0``
opts out. An env built by name (``BraxEnv``, ``make("brax/...")``) also saves its traced reset and step as
``jax.export`` modules in that directory's ``marl_envs-exported/`` folder; a later process building it with the
same arguments loads them and finds their compiled code in JAX's cache, so it neither imports Brax nor traces
(``benchmarks/compile_once.py`` measures it; ``_brax_exports`` says what the saved files are keyed on).

**Rendering** uses MuJoCo's renderer; on a Linux machine without a display, importing this module sets
``MUJOCO_GL=egl`` (unless MUJOCO_GL is set or MuJoCo was already imported). EGL needs the Debian packages
``libegl1 libegl-mesa0 libgl1-mesa-dri`` (software rendering, no GPU needed); ``MUJOCO_GL=osmesa`` needs
``libosmesa6``.

Brax's ``brax/envs`` is no longer maintained upstream; the construction-time ``UserWarning`` Brax emits about
it is silenced here (only that one).
"""

from __future__ import annotations

import os
import sys

if sys.platform.startswith("linux") and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read by mujoco at import

import functools
import inspect
import statistics
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from groupings import GroupMap, MarlGroupMapType, check_marl_grouping, default_group_map

from .._env import EnvBase
from ..specs import Bounded, Composite, Unbounded
from . import _brax_exports as exports
from . import _brax_scenes as scenes
from ._brax_core import BraxCore, CoreInfo, Differentiable, Split, quiet_tracing

__all__ = ["BraxEnv", "BraxWrapper", "benchmark", "env_names", "make_env"]

_UNMAINTAINED = r"Brax System, piplines and environments are not actively being maintained"
CACHE_DIR_VAR = "MARL_ENVS_JAX_CACHE_DIR"


class _ClipWithBounds:
    """``jax.numpy`` whose ``clip`` still takes ``a_min`` / ``a_max`` (JAX 0.10 removed them; Brax 0.14.2's
    ``brax/fluid.py``, used by ``swimmer``, still passes ``a_min``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(jnp, name)

    @staticmethod
    def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002 - jnp.clip's own names
        return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)


def _brax():
    """Brax's env package, imported the first time a Brax env is built or listed (not on a saved env's path),
    with the ``clip`` shim in ``brax.fluid`` (also when user code imported Brax first)."""
    if "brax.envs" not in sys.modules:
        with warnings.catch_warnings():  # brax imports jaxopt, which warns that it is unmaintained
            warnings.filterwarnings("ignore", message="JAXopt is no longer maintained", category=DeprecationWarning)
            import brax.envs
    import brax.fluid

    if not isinstance(brax.fluid.jp, _ClipWithBounds) and "a_min" not in inspect.signature(jnp.clip).parameters:
        brax.fluid.jp = _ClipWithBounds()
    return sys.modules["brax.envs"]


def env_names() -> list[str]:
    """Brax's registered envs (``brax.envs._envs``, read when asked) and the multi-agent scenes."""
    return sorted({*_brax()._envs, *scenes.SCENES})


#: ``BraxEnv`` rejects unknown names itself (``marl_envs.make`` need not list them, which imports Brax).
MAKE_ENV_CHECKS_NAMES = True


def make_env(name: str, **kwargs: Any) -> BraxEnv:
    """``BraxEnv(name, **kwargs)``: the factory behind ``marl_envs.make("brax/<name>", ...)``."""
    return BraxEnv(name, **kwargs)


def enable_compilation_cache() -> str | None:
    """Switch on JAX's persistent compilation cache (see the module docstring); return its directory.

    Does nothing (and returns JAX's own directory, or None) if JAX already has one or ``MARL_ENVS_JAX_CACHE=0``.
    """
    current = jax.config.jax_compilation_cache_dir
    if current or not exports.caching_enabled():
        return current or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.environ.get(CACHE_DIR_VAR) or os.path.join(base, "marl_envs", "jax")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path


def _jax_device(device: torch.device):
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        try:
            gpus = jax.devices("cuda")
        except RuntimeError:
            gpus = []
        index = device.index or 0
        if index < len(gpus):
            return gpus[index]
        raise ValueError(
            f"device={str(device)!r} but JAX sees {len(gpus)} CUDA device(s); install JAX with CUDA support "
            f"(pip install 'jax[cuda12]') or use device='cpu'"
        )
    raise ValueError(f"device={str(device)!r} is not supported by the Brax backend; use 'cpu' or 'cuda[:i]'")


def _check_brax_env(env) -> None:
    """``env`` is an unbatched ``brax.envs.Env`` without auto-reset, or a TypeError / ValueError says why not."""
    envs = _brax()
    from brax.envs.wrappers import training

    if not isinstance(env, envs.Env):
        raise TypeError(f"BraxWrapper wraps a brax.envs.Env, got {type(env).__name__}; or use BraxEnv(name)")
    layer = env
    while True:
        if isinstance(layer, (training.VmapWrapper, training.AutoResetWrapper)):
            raise ValueError(
                f"the env is wrapped in {type(layer).__name__}; pass an unbatched env without auto-reset "
                f"(e.g. brax.envs.get_environment(name), or envs.create(name, auto_reset=False)): BraxWrapper "
                f"batches it (num_envs) and resets done envs itself"
            )
        if not isinstance(layer, envs.Wrapper):
            return
        layer = layer.env


class _Transfer:
    """torch <-> JAX: NumPy views in and one copy out on CPU (cheapest measured); DLPack on GPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = device.type == "cpu"

    def to_jax(self, tensor: torch.Tensor):
        tensor = tensor.detach()
        if self.cpu:
            return tensor.numpy()
        return jax.dlpack.from_dlpack(tensor.contiguous())

    def to_torch(self, array) -> torch.Tensor:
        if self.cpu:
            return torch.from_numpy(np.array(array))
        return torch.from_dlpack(array)


class _Step(torch.autograd.Function):
    """One differentiable step: ``(flat state, action) -> (next flat state, float outputs, flags)``."""

    @staticmethod
    def forward(ctx, diff: Differentiable, io: _Transfer, flat: torch.Tensor, action: torch.Tensor):
        new_flat, out, flags, saved = diff.step(io.to_jax(flat), io.to_jax(action))
        ctx.diff, ctx.io, ctx.saved = diff, io, saved
        ctx.save_for_backward(flat, action)  # autograd's version counters catch in-place edits before backward
        flags = io.to_torch(flags)
        ctx.mark_non_differentiable(flags)
        return io.to_torch(new_flat), io.to_torch(out), flags

    @staticmethod
    def backward(ctx, grad_flat, grad_out, _grad_flags):
        io, saved = ctx.io, ctx.saved
        flat, action = ctx.saved_tensors
        if grad_flat is None:
            grad_flat = torch.zeros_like(flat)
        if grad_out is None:
            grad_out = torch.zeros((flat.shape[0], ctx.diff.out_width), device=flat.device)
        g_flat, g_action = ctx.diff.vjp(io.to_jax(flat), saved, io.to_jax(action), io.to_jax(grad_flat.contiguous()),
                                        io.to_jax(grad_out.contiguous()))
        return None, None, io.to_torch(g_flat), io.to_torch(g_action)


class BraxWrapper(EnvBase):
    """Any ``brax.envs.Env`` as a batched marl_envs env, single-agent or split between agents.

    ``env`` is one unbatched env (this class vmaps it), a built-in one or your own ``Env`` subclass, including
    envs without a physics pipeline (``pipeline_state=None``). It must not be wrapped in ``VmapWrapper`` or
    ``AutoResetWrapper`` (this class batches and resets itself); an ``EpisodeWrapper``'s ``truncation`` is
    reported as ``truncated``.

    Args:
        env: the Brax env.
        num_envs: batch size.
        device: ``"cpu"`` or ``"cuda[:i]"`` (JAX must see that GPU).
        frame_skip: Brax steps per env step, the action repeated and rewards summed; an env that ends during
            the skip stops there.
        max_steps: episode length reported as ``truncated``; None for no limit.
        requires_grad: make rewards and observations differentiable w.r.t. actions, through time (a
            ``torch.autograd.Function`` over ``jax.vjp``; see ``detach_state``).
        cache_clear_frequency: call ``jax.clear_caches()`` every that many steps (off by default and never
            needed: this env's compiled functions are held directly and survive it; kept for TorchRL parity).
        seed: seed of the per-env random starts (``set_seed`` changes it).
        action_indices: agent name -> indices into the robot's action vector, for a multi-agent split.
        observation_indices: agent name -> indices into the robot's observation vector (same agents).
        group_map: groups of the split's agents (dict or ``MarlGroupMapType``); default: all in ``"agents"``
            when they drive equally many action dims, else ``groupings.default_group_map``.

    Attributes:
        action_indices, observation_indices: the split in use (agent -> tuple of indices), or None.
        compile_seconds: time spent tracing and compiling (or loading from the persistent cache) so far.
        brax_env: the wrapped Brax env.
        export_file, from_export: (``BraxEnv``) the file holding the env's exported reset and step (None if not
            saved: caching off, ``requires_grad=True``, keywords that are not plain JSON values, ...), and whether
            this env was built from it.

    With ``requires_grad=True`` the simulator state carries the autograd history from one step to the next
    (a reset cuts it for the envs it resets); ``detach_state()`` cuts it for all (truncated backpropagation).

    Raises:
        TypeError: ``env`` is not a ``brax.envs.Env``; malformed indices.
        ValueError: a wrapped batch / auto-reset env; a bad split (an action dim owned twice or by nobody, an
            index out of range, an empty agent); a group mixing agents of different action sizes; a step that
            changes the state's structure.
    """

    def __init__(
        self,
        env,
        *,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        frame_skip: int = 1,
        max_steps: int | None = None,
        requires_grad: bool = False,
        cache_clear_frequency: int | None = None,
        seed: int = 0,
        action_indices: Mapping[str, Sequence[int]] | None = None,
        observation_indices: Mapping[str, Sequence[int]] | None = None,
        group_map: GroupMap | MarlGroupMapType | None = None,
    ):
        _check_brax_env(env)
        self._init(
            env, None, num_envs=num_envs, device=device, frame_skip=frame_skip, max_steps=max_steps,
            requires_grad=requires_grad, cache_clear_frequency=cache_clear_frequency, seed=seed,
            action_indices=action_indices, observation_indices=observation_indices, group_map=group_map,
        )

    export_file = None  # BraxEnv: the file of its exported reset and step (see _brax_exports)
    from_export = False  # BraxEnv: built from that file (no Brax import, no tracing)

    def _init(
        self, env, info: CoreInfo | None, *, num_envs, device, frame_skip, max_steps, requires_grad,
        cache_clear_frequency, seed, action_indices, observation_indices, group_map,
        export: bool = False, exported: Mapping[str, Any] | None = None,
    ) -> None:
        """The construction shared with ``BraxEnv``: ``env`` is the Brax env, or with ``exported`` (the compiled
        functions of a saved env, ``info`` their shapes) a callable building it on demand."""
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive int, got {frame_skip!r}")
        if cache_clear_frequency not in (None, False) and (
            isinstance(cache_clear_frequency, bool) or not isinstance(cache_clear_frequency, int)
            or cache_clear_frequency < 1
        ):
            raise ValueError(
                f"cache_clear_frequency must be None, False or a positive int, got {cache_clear_frequency!r}"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        jax_device = _jax_device(torch.device(device))  # before the base class allocates on that device
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        enable_compilation_cache()
        self.frame_skip = frame_skip
        self.requires_grad = bool(requires_grad)
        self.cache_clear_frequency = cache_clear_frequency or None
        self._io = _Transfer(self.device)
        self._jax_device = jax_device

        if (action_indices is None) != (observation_indices is None):
            raise ValueError("pass both action_indices and observation_indices for a multi-agent split, or neither")
        info = info or CoreInfo.of(env)
        self.action_size = info.action_size
        mapping = None
        if action_indices is not None:
            obs_size = info.flat_observation_size
            if obs_size is None:
                shapes = {"/".join(path) or "obs": shape for path, shape in info.obs_leaves}
                raise ValueError(f"a multi-agent split needs a flat observation vector; this env observes {shapes}")
            mapping = scenes.validate_mapping(action_indices, observation_indices, self.action_size, obs_size)
        self.action_indices = None if mapping is None else dict(mapping.action_indices)
        self.observation_indices = None if mapping is None else dict(mapping.observation_indices)

        split = None
        if mapping is not None:
            self.agent_names = mapping.agent_names
            self.group_map = self._resolve_group_map(group_map, mapping)
            split = self._split_tables(mapping, info.flat_observation_size)
        elif group_map is not None:
            raise ValueError("group_map needs a multi-agent split: pass action_indices and observation_indices too")
        self._core = BraxCore(env, info, num_envs=num_envs, frame_skip=frame_skip, split=split,
                              device=self._jax_device, differentiable=self.requires_grad, export=export,
                              exported=exported)
        self._diff = Differentiable(self._core) if self.requires_grad else None
        self._flat: torch.Tensor | None = None  # the differentiable state (requires_grad=True)
        self._steps_since_clear = 0
        self._renderers: dict = {}
        self._build_specs(mapping)
        self.set_seed(seed)

    @property
    def brax_env(self):
        """The wrapped ``brax.envs.Env`` (for an env loaded from the compile cache, built on first access)."""
        return self._core.env

    # -- construction helpers -------------------------------------------------------------------------
    def _resolve_group_map(self, group_map, mapping: scenes.AgentMapping) -> GroupMap:
        names = mapping.agent_names
        width = {a: len(mapping.action_indices[a]) for a in names}
        if group_map is None:
            return default_group_map(names, [width[a] for a in names])
        if isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(names)
        check_marl_grouping(group_map, names)
        for group, members in group_map.items():
            for other in members[1:]:
                if width[other] != width[members[0]]:
                    raise ValueError(
                        f"group {group!r} mixes agents with different specs: {members[0]!r} and {other!r} differ at "
                        f"'action' ({width[members[0]]} vs {width[other]} dims); agents of one group must share "
                        f"their specs, so put them in separate groups (group_map=None does)"
                    )
        return group_map

    def _split_tables(self, mapping: scenes.AgentMapping, obs_size: int) -> Split:
        source = np.empty(self.action_size, dtype=np.int32)
        gathers, column = [], 0
        for members in self.group_map.values():
            for agent in members:
                for dim in mapping.action_indices[agent]:
                    source[dim] = column
                    column += 1
            width = max(len(mapping.observation_indices[a]) for a in members)
            table = np.full((len(members), width), obs_size, dtype=np.int32)  # obs_size reads the padding zero
            for row, agent in enumerate(members):
                table[row, : len(mapping.observation_indices[agent])] = mapping.observation_indices[agent]
            gathers.append(table)
        return Split(action_source=source, gathers=tuple(gathers))

    def _build_specs(self, mapping: scenes.AgentMapping | None) -> None:
        B, dev = self.num_envs, self.device
        core = self._core
        obs, act, rew = (Composite(shape=(B,), device=dev) for _ in range(3))
        layout: list[tuple[tuple[str, ...], tuple[int, ...]]] = []  # float buffer entries, in order
        if mapping is None:
            for path, shape in core.info.obs_leaves:
                key = ("observation", *path)
                for depth in range(1, len(key)):  # dict observations: nested Composites of batch (B,)
                    if key[:depth] not in obs:
                        obs[key[:depth]] = Composite(shape=(B,), device=dev)
                obs[key] = Unbounded((B, *shape), device=dev)
                layout.append((key, (B, *shape)))
            act["action"] = Bounded(-1.0, 1.0, (B, self.action_size), device=dev)
            rew["reward"] = Unbounded((B, 1), device=dev)
            rewards = [(("reward",), (B, 1))]
        else:
            obs["state"] = Unbounded((B, core.observation_size), device=dev)
            layout.append((("state",), (B, core.observation_size)))
            rewards = []
            for (group, members), table in zip(self.group_map.items(), core.split.gathers):
                n, d = len(members), len(mapping.action_indices[members[0]])
                obs[group] = Composite(observation=Unbounded((B, n, table.shape[1]), device=dev), shape=(B, n),
                                       device=dev)
                act[group] = Composite(action=Bounded(-1.0, 1.0, (B, n, d), device=dev), shape=(B, n), device=dev)
                rew[group] = Composite(reward=Unbounded((B, n, 1), device=dev), shape=(B, n), device=dev)
                layout.append(((group, "observation"), (B, n, table.shape[1])))
                rewards.append(((group, "reward"), (B, n, 1)))
        self.full_observation_spec, self.full_action_spec, self.full_reward_spec = obs, act, rew
        self._reset_layout = self._slices(layout)
        self._step_layout = self._slices(layout + rewards)
        self._out_width = self._step_layout[-1][1].stop + 2  # the step's float buffer: outputs, then two flags
        self._group_batch = {g: (B, len(m)) for g, m in self.group_map.items()}
        self._all_true = np.ones(B, dtype=bool)

    @staticmethod
    def _slices(layout):
        out, start = [], 0
        for key, shape in layout:
            width = int(np.prod(shape[1:]))
            out.append((key, slice(start, start + width), shape))
            start += width
        return out

    # -- output builder (one for reset and step) ------------------------------------------------------
    def _build(self, out: torch.Tensor, layout, extra: Mapping | None = None) -> TensorDict:
        """The TensorDict of ``out``'s columns laid out by ``layout`` (see ``_slices``), plus ``extra`` entries
        (root names, or ``(group, name)`` keys)."""
        root: dict[str, Any] = {}
        entries = [(key, out[:, columns].view(shape)) for key, columns, shape in layout]
        for key, value in [*entries, *(extra or {}).items()]:
            if isinstance(key, str) or len(key) == 1:
                root[key if isinstance(key, str) else key[0]] = value
            else:
                root.setdefault(key[0], {})[key[1:] if len(key) > 2 else key[1]] = value
        for group, members in list(root.items()):
            if isinstance(members, dict):
                root[group] = TensorDict(members, batch_size=self._group_batch.get(group, self.batch_size),
                                         device=self.device)
        return TensorDict(root, batch_size=self.batch_size, device=self.device)

    def _flat_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        if self.action_indices is None:
            return tensordict.get("action")
        parts = [tensordict.get((g, "action")).reshape(self.num_envs, -1) for g in self.group_map]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)

    # -- the hook -------------------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        io = self._io
        jmask = self._all_true if mask is None else io.to_jax(mask)
        if self._diff is None:
            out = io.to_torch(self._core.reset(jmask))
        else:
            previous = None if self._flat is None or mask is None else io.to_jax(self._flat)
            flat, out = self._diff.reset(previous, jmask)
            flat, out = io.to_torch(flat), io.to_torch(out)
            if previous is not None:  # envs not reset keep their state, and its gradient history
                flat = torch.where(mask.view(-1, 1), flat, self._flat)
            self._flat = flat
        return self._build(out, self._reset_layout)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._flat_action(tensordict)
        if self._diff is None:
            out = self._io.to_torch(self._core.step(self._io.to_jax(action)))
            flags = out[:, -2:] > 0.5  # the float buffer ends with terminated, truncated
        else:
            if self._flat is None:
                raise RuntimeError("step() before reset(): reset the env first")
            self._flat, out, flags = _Step.apply(self._diff, self._io, self._flat, action)
        if self.cache_clear_frequency is not None:
            self._steps_since_clear += 1
            if self._steps_since_clear >= self.cache_clear_frequency:
                self._steps_since_clear = 0
                jax.clear_caches()
        return self._build(out, self._step_layout, {"terminated": flags[:, 0:1], "truncated": flags[:, 1:2]})

    def _advance(self, tensordict: TensorDictBase, with_root: bool) -> TensorDictBase | None:
        """``EnvBase._advance``, overlapped with JAX on CPU: the step is dispatched, the output TensorDicts (next
        data and next root) are built over empty buffers while JAX computes, then the result is copied in.

        Torch work done after a 10+ ms JAX step runs several times slower here than the same work done before
        it (caches gone cold), so moving it ahead of the wait is most of what separates this env from a pure-JAX
        loop. GPU, differentiable and cache-clearing envs take the generic path.
        """
        if not self._io.cpu or self._diff is not None or self.cache_clear_frequency is not None:
            return super()._advance(tensordict, with_root)
        pending = self._core.step(self._io.to_jax(self._flat_action(tensordict)))  # dispatched, not yet done
        out = torch.empty((self.num_envs, self._out_width), dtype=torch.float32)
        flags = torch.empty((self.num_envs, 3), dtype=torch.bool)  # terminated, truncated, done
        ends = {"terminated": flags[:, 0:1], "truncated": flags[:, 1:2], "done": flags[:, 2:3]}
        data = self._build(out, self._step_layout, ends)
        root = None
        if with_root:
            actions = {key: tensordict.get(key) for key in self.action_keys}
            root = self._build(out, self._reset_layout, {**ends, **actions})
        count = self._step_count + 1
        limit = count >= self.max_steps if self.max_steps is not None else None
        np.copyto(out.numpy(), np.asarray(pending))  # waits for JAX
        torch.gt(out[:, -2:], 0.5, out=flags[:, 0:2])  # the buffer ends with terminated, truncated
        if limit is not None:
            flags[:, 1] |= limit
        torch.bitwise_or(flags[:, 0], flags[:, 1], out=flags[:, 2])
        self._step_count = count
        tensordict.set("next", data)  # only now: a failed step leaves the input as it was
        return root

    def _set_seed(self, seed: int) -> None:
        self._core.seed(seed)

    # -- extras ---------------------------------------------------------------------------------------
    def detach_state(self) -> None:
        """Cut the gradient history carried by the simulator state (truncated backprop through time).

        Only meaningful with ``requires_grad=True``; every reset already cuts it for the envs it resets.
        """
        if self._flat is not None:
            self._flat = self._flat.detach()

    @property
    def compile_seconds(self) -> dict[str, float]:
        """Seconds spent compiling (or loading from the persistent cache) each compiled function so far."""
        return dict(self._core.compile_seconds)

    def render(
        self, env_index: int = 0, *, height: int = 240, width: int = 320, camera: str | int | None = None
    ) -> np.ndarray:
        """An ``(height, width, 3)`` uint8 image of env ``env_index``, rendered headless by MuJoCo.

        Raises:
            NotImplementedError: the env has no MuJoCo model (custom envs, Brax's ``fast``).
            IndexError: ``env_index`` out of range.
            RuntimeError: before the first reset, or no OpenGL context could be made (see the module docstring).
        """
        import mujoco

        sys_ = getattr(self.brax_env.unwrapped, "sys", None)
        model = getattr(sys_, "mj_model", None)
        if model is None:
            raise NotImplementedError(
                f"{type(self.brax_env.unwrapped).__name__} has no MuJoCo model to render (an env without a physics "
                f"pipeline, or Brax's 'fast'); render() draws PipelineEnv physics envs"
            )
        if not (isinstance(env_index, int) and 0 <= env_index < self.num_envs):
            raise IndexError(f"env_index={env_index!r} is out of range for num_envs={self.num_envs}")
        try:
            if self._diff is None:
                state = self._core.env_state(env_index)
            else:
                state = self._diff.env_state(self._flat.detach().cpu().numpy() if self._flat is not None else None,
                                             env_index)
        except RuntimeError as err:
            raise RuntimeError("render() before reset(): reset the env first") from err
        renderer = self._renderers.get((height, width))
        if renderer is None:
            try:
                renderer = mujoco.Renderer(model, height=height, width=width)
            except Exception as err:
                raise RuntimeError(
                    f"MuJoCo could not make an OpenGL context ({err}); for headless rendering set MUJOCO_GL=egl "
                    f"(Debian packages libegl1 libegl-mesa0 libgl1-mesa-dri) or MUJOCO_GL=osmesa (libosmesa6) "
                    f"before anything imports mujoco"
                ) from err
            self._renderers[(height, width)] = renderer
        data = mujoco.MjData(model)
        data.qpos[:], data.qvel[:] = state.pipeline_state.q, state.pipeline_state.qd
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=-1 if camera is None else camera)
        return np.asarray(renderer.render(), dtype=np.uint8)

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


class BraxEnv(BraxWrapper):
    """A Brax env or multi-agent scene by name.

    >>> env = BraxEnv("ant_4x2", num_envs=4, backend="spring")  # doctest: +SKIP
    >>> env.action_indices  # doctest: +SKIP
    {'agent_0': (0, 1), 'agent_1': (2, 3), 'agent_2': (4, 5), 'agent_3': (6, 7)}

    Args:
        env_name: a Brax env (``brax.envs`` registry: ``ant``, ``fast``, ...) or a scene (``ant_4x2``,
            ``halfcheetah_6x1``, ``hopper_3x1``, ``walker2d_2x3``, ``humanoid_9|8``).
        backend: Brax physics pipeline (``generalized``, ``spring``, ``positional``, ``mjx``); None keeps the
            env's default.
        max_steps: episode length (Brax's default 1000), reported as ``truncated``.
        mapping: for a scene: None (derived from the robot model: each agent drives one limb and observes the
            root, its joints and their neighbours), ``"jaxmarl"`` (JaxMARL's tables, warning about the indices
            past the observation that JAX clamps), or a dict ``{"action_indices": ..., "observation_indices":
            ...}`` (also accepted for any Brax env).
        **env_kwargs: forwarded to the Brax env's constructor.

    The other arguments are ``BraxWrapper``'s. The first build with given arguments saves the traced reset and
    step (``export_file``); later builds with the same arguments, in any process, load them instead of importing
    Brax and tracing (``from_export``; see the module docstring).

    Raises:
        ValueError: unknown env name (with close matches); a bad mapping.
    """

    def __init__(
        self,
        env_name: str,
        *,
        num_envs: int = 1,
        device: torch.device | str = "cpu",
        backend: str | None = None,
        frame_skip: int = 1,
        max_steps: int | None = 1000,
        requires_grad: bool = False,
        cache_clear_frequency: int | None = None,
        seed: int = 0,
        group_map: GroupMap | MarlGroupMapType | None = None,
        mapping: str | Mapping[str, Mapping[str, Sequence[int]]] | None = None,
        **env_kwargs: Any,
    ):
        scene = scenes.SCENES.get(env_name)
        robot = scene.robot if scene else env_name
        if backend is not None:
            env_kwargs["backend"] = backend
        self.env_name = env_name
        self._check_mapping(env_name, scene, mapping)
        common = dict(num_envs=num_envs, device=device, frame_skip=frame_skip, max_steps=max_steps,
                      requires_grad=requires_grad, cache_clear_frequency=cache_clear_frequency, seed=seed,
                      group_map=group_map)
        enable_compilation_cache()
        key = None
        if not requires_grad and isinstance(env_name, str):
            group_key = f"{type(group_map).__name__}.{group_map.name}" if isinstance(group_map, MarlGroupMapType) \
                else group_map
            key = exports.key(robot, _jax_device(torch.device(device)), name=env_name, env_kwargs=env_kwargs,
                              num_envs=num_envs, frame_skip=frame_skip, mapping=mapping, group_map=group_key)
        saved = exports.load(key) if key else None
        if saved is not None:  # built before with these arguments: no Brax import, no tracing
            meta, exported = saved
            info = CoreInfo.from_json(meta["info"])
            indices = self._mapping(env_name, scene, mapping, info, lambda: scenes.AgentMapping(
                *({agent: tuple(v) for agent, v in meta["derived"][i].items()} for i in (0, 1))))
            self._init(functools.partial(self._brax_env, robot, env_kwargs), info, exported=exported,
                       action_indices=indices[0], observation_indices=indices[1], **common)
            self.export_file, self.from_export = exports.path(key), True
            return

        names = env_names()
        if env_name not in names:
            import difflib

            close = difflib.get_close_matches(str(env_name), names, n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"unknown Brax env {env_name!r}{hint} available: {', '.join(names)}")
        brax_env = self._brax_env(robot, env_kwargs)
        info = CoreInfo.of(brax_env)
        derived: list[scenes.AgentMapping] = []

        def derive() -> scenes.AgentMapping:
            model = scenes.RobotModel.from_mj_model(brax_env.sys.mj_model)
            exclude = getattr(brax_env, "_exclude_current_positions_from_observation", True)
            derived.append(scenes.model_mapping(env_name, model, info.flat_observation_size, exclude))
            return derived[0]

        indices = self._mapping(env_name, scene, mapping, info, derive)
        self._init(brax_env, info, export=key is not None, action_indices=indices[0],
                   observation_indices=indices[1], **common)
        if key is not None and self._core.exported:
            meta = {"env": env_name, "info": info.to_json(),
                    "derived": [derived[0].action_indices, derived[0].observation_indices] if derived else None}
            self.export_file = exports.save(key, meta, self._core.exported)

    @staticmethod
    def _brax_env(robot: str, env_kwargs: dict[str, Any]):
        envs = _brax()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_UNMAINTAINED, category=UserWarning)
            try:
                return envs.get_environment(robot, **env_kwargs)
            except TypeError as err:
                raise TypeError(f"the Brax env {robot!r} rejected the keywords {sorted(env_kwargs)}: {err}") from err

    @staticmethod
    def _check_mapping(name: str, scene, mapping) -> None:
        if isinstance(mapping, Mapping):
            unknown = set(mapping) - {"action_indices", "observation_indices"}
            if unknown or len(mapping) != 2:
                raise ValueError(
                    f"a mapping dict needs exactly the keys 'action_indices' and 'observation_indices', "
                    f"got {sorted(mapping)}"
                )
        elif mapping not in (None, "jaxmarl"):
            raise ValueError(
                f"mapping={mapping!r}: expected None (the model-derived split), 'jaxmarl' or a dict with "
                f"'action_indices' and 'observation_indices'"
            )
        elif mapping == "jaxmarl" and scene is None:
            raise ValueError(f"mapping='jaxmarl' needs a scene ({', '.join(scenes.SCENES)}); {name!r} is a Brax env")

    @staticmethod
    def _mapping(name: str, scene, mapping, info: CoreInfo, derive) -> tuple:
        """The split's ``(action_indices, observation_indices)`` (``(None, None)`` for none) of a checked
        ``mapping``; ``derive()`` gives the model-derived mapping of a scene."""
        if isinstance(mapping, Mapping):
            return mapping["action_indices"], mapping["observation_indices"]
        if scene is None:
            return None, None
        if mapping == "jaxmarl":
            table = scenes.jaxmarl_mapping(name)
            clamped = scenes.validate_mapping(table.action_indices, table.observation_indices, info.action_size,
                                              info.flat_observation_size, clamp=True,
                                              label=f"brax/{name} mapping='jaxmarl'")
            return clamped.action_indices, clamped.observation_indices
        split = derive()
        return split.action_indices, split.observation_indices

    def __repr__(self) -> str:
        return super().__repr__().replace(type(self).__name__ + "(", f"{type(self).__name__}({self.env_name!r}, ", 1)


# ----------------------------------------------------------------------------------------------------
# Benchmark
# ----------------------------------------------------------------------------------------------------
#: ``marl-envs bench`` default number of envs.
BENCH_NUM_ENVS = 128


def benchmark(
    name: str, *, num_envs: int, steps: int, device: str = "cpu", rounds: int = 5, **env_kwargs: Any
) -> list[tuple[str, float, int]]:
    """Time ``steps`` steps of ``num_envs`` envs of ``brax/<name>``, in this process.

    The implementations take turns: ``rounds`` rounds of ``steps / rounds`` steps each (one round if that does
    not divide), so a change in the machine's load hits them alike, and each one's time is the median of its
    rounds times ``rounds``, so a load spike during one round does not decide a ratio. Every one gets the same
    pre-drawn uniform random actions (drawing them is not timed).

    Rows ``(label, seconds, env_steps)``:
        1. our ``BraxEnv``: ``step_and_maybe_reset``;
        2. pure JAX: a Python loop over ``jax.jit(step)`` of Brax's own ``VmapWrapper`` + ``EpisodeWrapper`` +
           ``AutoResetWrapper`` stack (``training.wrap``), the state never leaving JAX (a scene runs the whole
           robot: the split is part of what ours pays for);
        3. pure JAX: a Python loop over ``jax.jit(jax.vmap(env.step))`` of the bare env (no episode counting,
           no resets: less work than ours, the floor of a Python loop);
        4. pure JAX: row 2's steps as ``lax.scan`` calls, one per round (the limit: no Python per step);

    then timing-only rows (env_steps=0): compile (or persistent-cache load) times. ``env_kwargs`` go to
    ``BraxEnv`` (e.g. ``backend="spring"``).
    """
    rounds = rounds if steps % rounds == 0 and steps >= rounds else 1
    chunk, warmup = steps // rounds, 3
    build = time.perf_counter()
    env = BraxEnv(name, num_envs=num_envs, device=device, seed=0, **env_kwargs)
    build = time.perf_counter() - build
    generator = torch.Generator(device=env.device).manual_seed(0)
    plan = [env.full_action_spec.rand(generator=generator) for _ in range(steps + warmup)]
    flat = torch.stack([env._flat_action(p) for p in plan]).cpu().numpy()
    if env.action_indices is not None:  # the same actions in the robot's order
        flat = flat[:, :, env._core.split.action_source]
    actions = jax.device_put(flat, env._jax_device)
    chunks = actions[warmup:].reshape(rounds, chunk, *actions.shape[1:])

    first = time.perf_counter()
    td = env.reset()
    first_reset = time.perf_counter() - first
    from brax.envs.wrappers import training

    raw = training.wrap(env.brax_env, episode_length=env.max_steps or 1000)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)

    def rollout(state, actions):
        return jax.lax.scan(lambda s, a: (raw.step(s, a), None), state, actions)[0]

    compile_times = {}
    with quiet_tracing():
        wrapped_state = jax.jit(raw.reset)(keys)
        bare_state = jax.jit(jax.vmap(env.brax_env.reset))(keys)
        start = time.perf_counter()
        wrapped = jax.jit(raw.step, donate_argnums=0).trace(wrapped_state, actions[0]).lower().compile()
        compile_times["pure JAX loop: compile step"] = time.perf_counter() - start
        start = time.perf_counter()
        bare = jax.jit(jax.vmap(env.brax_env.step), donate_argnums=0).trace(bare_state, actions[0]).lower().compile()
        compile_times["pure JAX bare loop: compile step"] = time.perf_counter() - start
        start = time.perf_counter()
        scan = jax.jit(rollout).trace(wrapped_state, chunks[0]).lower().compile()
        compile_times["lax.scan: compile rollout"] = time.perf_counter() - start
        scan_state = jax.jit(raw.reset)(keys)

    class Ours:
        def __init__(self):
            self.td = td

        def __call__(self, t):
            self.td.update(plan[t])
            self.td = env.step_and_maybe_reset(self.td)[1]

        def sync(self):
            if env.device.type == "cuda":
                torch.cuda.synchronize(env.device)

    class Loop:
        def __init__(self, fn, state):
            self.fn, self.state = fn, state

        def __call__(self, t):
            self.state = self.fn(self.state, actions[t])

        def sync(self):
            jax.block_until_ready(self.state)

    loops = {
        "marl_envs BraxEnv, random actions, auto-reset": Ours(),
        "pure JAX: jit(vmap(step)) Python loop, Brax auto-reset": Loop(wrapped, wrapped_state),
        "pure JAX: jit(vmap(env.step)) Python loop, bare env, no resets": Loop(bare, bare_state),
    }
    for run in loops.values():  # warm-up
        for t in range(warmup):
            run(t)
        run.sync()
    jax.block_until_ready(scan(scan_state, chunks[0]))
    times: dict[str, list[float]] = {label: [] for label in [*loops, "pure JAX: lax.scan rollout (the limit)"]}
    for r in range(rounds):
        for label, run in loops.items():
            start = time.perf_counter()
            for t in range(warmup + r * chunk, warmup + (r + 1) * chunk):
                run(t)
            run.sync()
            times[label].append(time.perf_counter() - start)
        start = time.perf_counter()
        scan_state = jax.block_until_ready(scan(scan_state, chunks[r]))
        times["pure JAX: lax.scan rollout (the limit)"].append(time.perf_counter() - start)

    rows = [(label, statistics.median(t) * rounds, num_envs * rounds * chunk) for label, t in times.items()]
    compiled = env.compile_seconds
    rows.append(("  build BraxEnv (trace and export, or load the export)", build, 0))
    rows.append(("  ours: compile reset", compiled.get("reset", 0.0), 0))
    rows.append(("  ours: compile step", compiled.get("step", 0.0), 0))
    rows.append(("  ours: first reset, compile included", first_reset, 0))
    rows.extend((f"  {label}", seconds, 0) for label, seconds in compile_times.items())
    env.close()
    return rows
