"""The brax backend's env classes and ``env_names``; see ``marl_envs.backends.brax``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import torch
from tensordict import TensorDictBase

from groupings import GroupMap, MarlGroupMapType

from .._named import NamedRepr
from ..._core.messages import shell_safe, unknown_env
from .._mujoco import camera_of
from ..._core.validate import checked_keywords
from ...specs import Bounded, Composite, Unbounded
from ..._core.executor import TensorDictExecutor
from ..._core.rules import where_rows
from ..._core.tensordicts import Tree
from ..jax import JaxEnvBase, configure_jax, enable_compilation_cache
from . import _exports as exports
from . import _scenes as scenes
from ._compat import (
    checked_env, import_brax, is_playground_env, jax_device, prepare_mujoco_gl, quiet_brax_build,
)
from ._model import BraxModel, Differentiable, ModelInfo, Split, Step
from ._library import PHYSICS_BACKENDS, check, library_keywords as declared_keywords

__all__ = ["BraxEnv", "BraxWrapper", "PHYSICS_BACKENDS", "enable_compilation_cache", "env_names"]


def env_names() -> list[str]:
    """Brax's registered envs (``brax.envs._envs``, read when asked) and the multi-agent scenes."""
    return sorted({*import_brax()._envs, *scenes.SCENES})


class BraxWrapper(JaxEnvBase):
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
        max_steps: episode length reported as ``truncated``; None for no limit, or (default) the limit of an
            ``EpisodeWrapper`` around ``env``, which a longer one may not pass.
        requires_grad: make rewards and observations differentiable w.r.t. actions, through time (a
            ``torch.autograd.Function`` over ``jax.vjp``; see ``detach_state``).
        cache_clear_frequency: call ``jax.clear_caches()`` every that many steps (off by default and never
            needed: this env's compiled functions are held directly and survive it; kept for TorchRL parity).
        seed: seed of the per-env random starts (``set_seed`` changes it).
        action_indices: agent name -> indices into the robot's action vector, for a multi-agent split.
        observation_indices: agent name -> indices into the robot's observation vector (same agents).
        group_map: groups of the split's agents (dict or ``MarlGroupMapType``); default: all in ``"agents"``
            when they drive equally many action dims, else ``groupings.default_group_map``.
        device_path: as ``JaxEnvBase``'s (the device code path on the CPU too).

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

    @checked_keywords
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
        device_path: bool | None = None,
    ):
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
        if (action_indices is None) != (observation_indices is None):
            raise ValueError("pass both action_indices and observation_indices for a multi-agent split, or neither")
        if action_indices is None and group_map is not None:
            raise ValueError("group_map needs a multi-agent split: pass action_indices and observation_indices too")
        program = env if isinstance(env, exports.Program) else exports.Program(env, ModelInfo.of(checked_env(env)))
        horizon = None if program.exported is not None else self._library_horizon(program.env, frame_skip)
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, horizon=horizon,
                         device_path=device_path)
        self.frame_skip = frame_skip
        self.requires_grad = bool(requires_grad)
        self.cache_clear_frequency = cache_clear_frequency or None
        info = program.info
        self.action_size = info.action_size
        self.action_indices = self.observation_indices = split = None
        B, dev = self.num_envs, self.device
        if action_indices is None:
            obs = Composite(shape=(B,), device=dev)
            for path, shape in info.obs_leaves:
                key = ("observation", *path)
                for depth in range(1, len(key)):  # dict observations: nested Composites of batch (B,)
                    if key[:depth] not in obs:
                        obs[key[:depth]] = Composite(shape=(B,), device=dev)
                obs[key] = Unbounded((B, *shape), device=dev)
            self._declare_specs({}, observation=obs["observation"],
                                action=Bounded(-1.0, 1.0, (B, self.action_size), device=dev),
                                reward=Unbounded((B, 1), device=dev))
        else:
            obs_size = info.flat_observation_size
            if obs_size is None:
                shapes = {"/".join(path) or "obs": shape for path, shape in info.obs_leaves}
                raise ValueError(f"a multi-agent split needs a flat observation vector; this env observes {shapes}")
            mapping = scenes.validate_mapping(action_indices, observation_indices, self.action_size, obs_size)
            self.action_indices = dict(mapping.action_indices)
            self.observation_indices = dict(mapping.observation_indices)
            groups = self._group_agents({a: Composite(action=Bounded(-1.0, 1.0, (len(dims),), device=dev),
                                                      reward=Unbounded((1,), device=dev), device=dev)
                                         for a, dims in self.action_indices.items()}, group_map)
            split = self._split_tables(obs_size)
            for spec, table in zip(groups.values(), split.gathers):
                spec["observation"] = Unbounded((*spec.shape, table.shape[1]), device=dev)
            self._declare_specs(groups, state=Unbounded((B, obs_size), device=dev))
        model = BraxModel(program.env, info, num_envs=num_envs, frame_skip=frame_skip, split=split,
                          device=self.jax_device, differentiable=self.requires_grad, export=program.export,
                          exported=program.exported, resets_when_needed=self._resets_when_needed())
        if self.cache_clear_frequency is not None:
            self._after_step = self._clear_caches
        self._flat: torch.Tensor | None = None  # the differentiable state (requires_grad=True)
        self._steps_since_clear = 0
        self._renderers: dict = {}
        # The differentiable env's hook runs through the default executor: its TensorDicts carry the gradients
        # (merged by torch.where).
        self._set_model(model, compiled=not self.requires_grad)
        if self.requires_grad:
            batches = {g: torch.Size((B, len(m))) for g, m in self.group_map.items()}
            self._tree = {name: (Tree([c[0] for c in columns], self.batch_size, dev, batches), columns)
                          for name, columns in (("reset", self._reset_columns), ("step", self._step_columns))}
            self._set_executor(TensorDictExecutor(B, dev))
        self._diff = Differentiable(self._model) if self.requires_grad else None
        self.set_seed(seed)

    def _library_horizon(self, env: Any, frame_skip: int) -> tuple[int, str] | None:
        """The time limit of an ``EpisodeWrapper`` around ``env`` in env steps (its steps are Brax steps, each env
        step ``frame_skip`` calls of its ``action_repeat``), and how to change it; None without one."""
        from brax.envs.wrappers.training import EpisodeWrapper

        layer = env
        while layer is not None and not isinstance(layer, EpisodeWrapper):
            layer = getattr(layer, "env", None)
        if layer is None:
            return None
        per_step = int(layer.action_repeat) * frame_skip
        return -(-int(layer.episode_length) // per_step), "EpisodeWrapper(env, episode_length=N)"

    def _resets_when_needed(self) -> bool:
        """``JaxModel.resets_when_needed``: False, a Brax reset costs a fraction of a step."""
        return False

    export_file = None  # BraxEnv: the file of its exported reset and step (see _exports)
    from_export = False  # BraxEnv: built from that file (no Brax import, no tracing)

    @property
    def brax_env(self):
        """The wrapped ``brax.envs.Env`` (for an env loaded from the compile cache, built on first access)."""
        return self._model.env

    # -- construction helpers -------------------------------------------------------------------------
    def _split_tables(self, obs_size: int) -> Split:
        order = [dim for members in self.group_map.values() for a in members for dim in self.action_indices[a]]
        source = np.empty(self.action_size, dtype=np.int32)
        source[order] = np.arange(len(order))  # validate_mapping: each dim once
        gathers = []
        for members in self.group_map.values():
            rows = [self.observation_indices[a] for a in members]
            table = np.full((len(rows), max(map(len, rows))), obs_size, dtype=np.int32)  # obs_size: the padding zero
            for row, indices in enumerate(rows):
                table[row, : len(indices)] = indices
            gathers.append(table)
        self._action_source = torch.as_tensor(source, dtype=torch.int64, device=self.device)
        return Split(groups=tuple(self.group_map), action_source=source, gathers=tuple(gathers))

    def robot_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The robot's ``(num_envs, action_size)`` action, in the Brax env's own order, that the agents' actions
        in ``tensordict`` make up (what a pure-Brax loop would step with)."""
        flat = self._flat_action(tensordict)
        return flat if self.action_indices is None else flat[:, self._action_source]

    # -- the hook of the differentiable env (requires_grad=True), run by the default executor ------------
    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        io = self._io
        jmask = io.to_jax(torch.ones(self.num_envs, dtype=torch.bool) if mask is None else mask)
        previous = None if self._flat is None or mask is None else io.to_jax(self._flat)
        flat, out = self._diff.reset(previous, jmask)
        flat, out = io.to_torch_all((flat, out))
        if previous is not None:  # envs not reset keep their state, and its gradient history
            flat = where_rows(mask, flat, self._flat)
        self._flat = flat
        return self._columns_data("reset", out)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._flat, out, flags = Step.apply(self._diff, self._io, self._flat, self._flat_action(tensordict))
        return self._columns_data("step", torch.cat([out, flags.to(out.dtype)], dim=1))

    def _columns_data(self, name: str, buffer: torch.Tensor) -> TensorDictBase:
        """The TensorDict of a differentiable reset's or step's float buffer: float entries as views (they carry
        the gradients), bool entries compared to 0.5."""
        tree, columns = self._tree[name]
        return tree([buffer[:, cols].reshape(shape) if dtype is not torch.bool else buffer[:, cols].detach().reshape(
            shape) > 0.5 for _, cols, shape, dtype in columns])

    def _clear_caches(self) -> None:
        """Every ``cache_clear_frequency`` steps, clear JAX's caches."""
        self._steps_since_clear += 1
        if self._steps_since_clear >= self.cache_clear_frequency:
            self._steps_since_clear = 0
            jax.clear_caches()

    # -- extras ---------------------------------------------------------------------------------------
    def detach_state(self) -> None:
        """Cut the gradient history carried by the simulator state (truncated backprop through time).

        Only meaningful with ``requires_grad=True``; every reset already cuts it for the envs it resets. The env
        keeps no reference to a step's outputs, so the graph behind them (with JAX's saved residuals of every
        step) is freed once the caller drops its own references.
        """
        if self._flat is not None:
            self._flat = self._flat.detach()

    @property
    def _mj_model(self) -> Any:
        """The MuJoCo model of a physics env, None for envs without one (custom envs, Brax's ``fast``)."""
        unwrapped = getattr(self.brax_env, "unwrapped", self.brax_env)
        if is_playground_env(unwrapped):
            return unwrapped.mj_model
        return getattr(getattr(unwrapped, "sys", None), "mj_model", None)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: physics envs (those with a MuJoCo model)."""
        return self._mj_model is not None

    def _render(self, env_index: int, *, height: int = 240, width: int = 320, camera: str | int | None = None
                ) -> np.ndarray:
        """An ``(height, width, 3)`` uint8 image of env ``env_index``, rendered headless by MuJoCo from ``camera``
        (a name or an index of the model's cameras; default: its ``track`` camera, which follows the robot, else its
        first camera, else MuJoCo's free camera).

        Raises:
            ValueError: a camera the model does not have (the message lists them).
            NotImplementedError: the env has no MuJoCo model (custom envs, Brax's ``fast``).
            RuntimeError: before the first reset, or no OpenGL context could be made (the Brax page, known limits).
        """
        prepare_mujoco_gl()
        import mujoco

        model = self._mj_model
        if model is None:
            raise NotImplementedError(
                f"{type(self.brax_env.unwrapped).__name__} has no MuJoCo model to render (an env without a physics "
                f"pipeline, or Brax's 'fast'); render() draws PipelineEnv physics envs"
            )
        state = self._env_state(env_index) if self._diff is None else self._diff.env_state(
            self._flat.detach().cpu().numpy(), env_index)
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
        physics = getattr(state, "pipeline_state", None) or state.data  # Brax's, or a Playground env's MJX data
        data.qpos[:], data.qvel[:] = (physics.q, physics.qd) if hasattr(physics, "q") else (physics.qpos, physics.qvel)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=camera_of(model, camera))
        return np.asarray(renderer.render(), dtype=np.uint8)

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()


class BraxEnv(NamedRepr, BraxWrapper):
    """A Brax env or multi-agent scene by name.

    >>> env = BraxEnv("ant_4x2", num_envs=4, backend="spring")
    >>> env.action_indices
    {'agent_0': (0, 1), 'agent_1': (2, 3), 'agent_2': (4, 5), 'agent_3': (6, 7)}

    Args:
        env_name: a Brax env (``brax.envs`` registry: ``ant``, ``fast``, ...) or a scene (``ant_4x2``,
            ``halfcheetah_6x1``, ``hopper_3x1``, ``walker2d_2x3``, ``humanoid_9-8``).
        backend: Brax physics pipeline (``generalized``, ``spring``, ``positional``, ``mjx``); None keeps the
            env's default.
        max_steps: episode length reported as ``truncated``: by default 1000, the ``episode_length`` Brax's
            ``brax.envs.create`` gives its envs (those built by name have no time limit of their own).
        mapping: for a scene: None (derived from the robot model: each agent drives one limb and observes the
            root, its joints and their neighbours), ``"jaxmarl"`` (JaxMARL's tables, warning about the indices
            past the observation that JAX clamps), or a dict ``{"action_indices": ..., "observation_indices":
            ...}`` (also accepted for any Brax env).
        **env_kwargs: forwarded to the Brax env's constructor.

    The other arguments are ``BraxWrapper``'s. The first build with given arguments saves the traced reset and
    step (``export_file``); later builds with the same arguments, in any process, load them instead of importing
    Brax and tracing (``from_export``; the Brax page of the docs, "Compile once").

    Raises:
        ValueError: unknown env name (with close matches); a bad mapping.
    """

    @checked_keywords
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
        device_path: bool | None = None,
        **env_kwargs: Any,
    ):
        env_name = shell_safe(env_name, "Brax env")
        scene = scenes.SCENES.get(env_name)
        robot = scene.robot if scene else env_name
        check(env_name, {"backend": backend, **env_kwargs})  # make ran it already, before importing this module
        if backend is not None:
            env_kwargs["backend"] = backend
        self.env_name, self._robot = env_name, robot
        scenes.check_mapping(env_name, scene, mapping)
        configure_jax()  # before anything below starts JAX
        key = None if requires_grad else exports.env_key(
            env_name, robot, jax_device(torch.device(device)), env_kwargs=env_kwargs, frame_skip=frame_skip,
            mapping=mapping, group_map=group_map)
        saved = exports.load(key) if key else None
        if saved is not None:  # built before with these arguments: no Brax import, no tracing
            meta, exported = saved
            info = ModelInfo.from_json(meta["info"])
            program = exports.Program(functools.partial(self._brax_env, robot, env_kwargs), info, exported=exported)

            def derive() -> scenes.AgentMapping:
                return scenes.AgentMapping(*({a: tuple(v) for a, v in table.items()} for table in meta["derived"]))
        else:
            names = env_names()
            if env_name not in names:
                raise unknown_env("Brax env", env_name, names)
            brax_env = self._brax_env(robot, env_kwargs)
            info = ModelInfo.of(brax_env)
            program = exports.Program(brax_env, info, export=key is not None)

            def derive() -> scenes.AgentMapping:
                model = scenes.RobotModel.from_mj_model(brax_env.sys.mj_model)
                exclude = getattr(brax_env, "_exclude_current_positions_from_observation", True)
                return scenes.model_mapping(env_name, model, info.flat_observation_size, exclude)

        indices = scenes.resolve_mapping(env_name, scene, mapping, info.action_size, info.flat_observation_size, derive)
        super().__init__(program, num_envs=num_envs, device=device, frame_skip=frame_skip, max_steps=max_steps,
                         requires_grad=requires_grad, cache_clear_frequency=cache_clear_frequency, seed=seed,
                         action_indices=indices[0], observation_indices=indices[1], group_map=group_map,
                         device_path=device_path)
        if saved is not None:
            self.export_file, self.from_export = exports.path(key), True
        elif key is not None and self._model.exported:
            derived = scene is not None and mapping is None  # resolve_mapping took derive()'s split: saved with it
            meta = {"env": env_name, "info": info.to_json(), "derived": list(indices) if derived else None}
            self.export_file = exports.save(key, meta, self._model.exported)

    @staticmethod
    def _brax_env(robot: str, env_kwargs: dict[str, Any]):
        envs = import_brax()  # its keywords were checked (check) when the env was built
        with quiet_brax_build():
            return envs.get_environment(robot, **env_kwargs)

    @property
    def library_keywords(self) -> dict[str, str | None] | None:
        """The keywords the Brax env's constructor takes, with their defaults' reprs (None: not a constant); None
        where they are not declared. ``marl-envs info`` lists them."""
        return declared_keywords(self._robot)
