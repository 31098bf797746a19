"""The JAX side of the Brax backend: one compiled reset and one compiled step over a batch of Brax envs.

The Brax state never leaves JAX. It is kept packed: one ``(B, n)`` buffer per dtype (``Layout``), so a call
hands XLA a handful of buffers instead of every leaf of the Brax pytree (dispatch costs ~15 us per buffer
here, and a Brax state has 28 to 117 leaves). Per env step, one ahead-of-time compiled ``jit(vmap(...))`` call
takes the flat action of every agent and returns, besides the new state, one float32 ``(B, K)`` buffer holding
every output side by side (observations, the global state, rewards, then ``terminated`` and ``truncated`` as
0 / 1): one array to hand over to torch, not two (each costs ~0.1 ms right after a step here). Inside that call:
the agent actions are scattered into the robot's action, the env is stepped ``frame_skip`` times with
``lax.scan`` (rewards summed, an env that ends mid-skip stays frozen), and the agent observations are gathered.
One reset call draws fresh starts with a per-env key for the envs a mask selects and keeps every other env's
state bit for bit. The state buffers are donated, so XLA updates them in place.

The differentiable variant (``Differentiable``) hands the float32 buffer (the part gradients flow through) to
the caller, so a ``torch.autograd.Function`` can carry it between steps; its backward is a second compiled
function that recomputes the step under ``jax.vjp`` (nothing but the step's inputs is kept per step).
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BraxCore", "CoreInfo", "Differentiable", "Split", "export_platform", "quiet_tracing", "reset_struct",
           "tree_paths"]

_RESET_STRUCTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def quiet_tracing() -> Iterator[None]:
    """Silence the deprecation warnings MJX raises while Brax code is traced (``Data.ncon`` and friends).

    They come from Brax's own code reading MJX fields, fire on every trace and are nothing a user can act on.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Accessing `\w+` directly from `(Data|Model)` is deprecated",
                                category=DeprecationWarning)
        yield


@dataclass(frozen=True)
class Split:
    """Static tables of a multi-agent split, in data order (groups in group_map order).

    Attributes:
        action_source: ``(action_size,)``: for each robot action dim, its column in the flat agent action
            ``concat([group_action.reshape(B, -1) for each group])``.
        gathers: per group, ``(n_agents, width)`` indices into the robot observation with one zero appended
            (index ``observation_size`` reads that zero: the padding of agents with fewer entries).
    """

    action_source: np.ndarray
    gathers: tuple[np.ndarray, ...]


def tree_paths(tree: Any) -> list[tuple[tuple[str, ...], Any]]:
    """``(key path, leaf)`` pairs of a pytree of dicts (a bare array has the empty path)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path), leaf) for path, leaf in flat]


class Layout:
    """Packs a batched state pytree into one ``(B, n)`` buffer per dtype, float32 first, and back.

    Args:
        reference: the unbatched state's structure (``ShapeDtypeStruct`` leaves).
    """

    def __init__(self, reference: Any):
        leaves, self.treedef = jax.tree.flatten(reference)
        dtypes = sorted({np.dtype(x.dtype) for x in leaves} | {np.dtype(np.float32)},
                        key=lambda d: (d != np.float32, str(d)))
        self.dtypes = tuple(dtypes)  # float32 first (possibly width 0): the differentiable buffer
        self.widths = [0] * len(dtypes)
        self.slots = []  # per leaf: (buffer, start, stop, shape)
        for leaf in leaves:
            group = dtypes.index(np.dtype(leaf.dtype))
            size = int(np.prod(leaf.shape))
            self.slots.append((group, self.widths[group], self.widths[group] + size, tuple(leaf.shape)))
            self.widths[group] += size

    def pack(self, state: Any) -> tuple[jax.Array, ...]:
        leaves = jax.tree.leaves(state)
        B = leaves[0].shape[0] if leaves else 0
        parts: list[list[jax.Array]] = [[] for _ in self.dtypes]
        for (group, _, _, _), leaf in zip(self.slots, leaves):
            parts[group].append(leaf.reshape(B, -1))
        return tuple(
            jnp.concatenate(p, axis=1) if p else jnp.zeros((B, 0), dtype) for p, dtype in zip(parts, self.dtypes)
        )

    def unpack(self, buffers: Sequence[Any], batch: tuple[int, ...] | None = None) -> Any:
        """The state from its buffers (JAX or NumPy; ``batch`` overrides the leading shape, e.g. ``()``)."""
        lead = (buffers[0].shape[0],) if batch is None else batch
        leaves = [buffers[g][..., a:b].reshape((*lead, *shape)) for g, a, b, shape in self.slots]
        return jax.tree.unflatten(self.treedef, leaves)


def reset_struct(env) -> Any:
    """Shapes and dtypes of ``env.reset(key)`` (traced once per env object, never run).

    Raises:
        ValueError: tracing ``reset`` failed.
    """
    if env not in _RESET_STRUCTS:
        try:
            with quiet_tracing():
                _RESET_STRUCTS[env] = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        except Exception as err:
            raise ValueError(f"tracing {type(env).__name__}.reset(rng) failed: {err}") from err
    return _RESET_STRUCTS[env]


@functools.partial(jax.jit, static_argnums=1)
def _env_keys(root: jax.Array, num_envs: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(root, i))(jnp.arange(num_envs, dtype=jnp.uint32))


class StateMismatch(ValueError):
    """A Brax env's ``step`` returned a state whose structure or shapes differ from ``reset``'s."""


@contextlib.contextmanager
def _step_errors(env) -> Iterator[None]:
    """Report a failure while tracing ``env.step`` as a ValueError naming the env."""
    try:
        yield
    except StateMismatch:
        raise
    except Exception as err:
        raise ValueError(f"tracing {type(env).__name__}.step(state, action) failed: {err}") from err


def _describe_mismatch(reference: Any, other: Any) -> str:
    ref = {jax.tree_util.keystr(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(reference)[0]}
    oth = {jax.tree_util.keystr(p): tuple(jnp.shape(x)) for p, x in jax.tree_util.tree_flatten_with_path(other)[0]}
    for key in ref.keys() | oth.keys():
        if ref.get(key) != oth.get(key):
            return f"state{key}: reset gives {ref.get(key, 'nothing')}, step gives {oth.get(key, 'nothing')}"
    return "the tree structures differ"


@dataclass(frozen=True)
class CoreInfo:
    """What is known of a Brax env without running it: the shapes the compiled functions take and return.

    Plain data (``to_json`` / ``from_json``), so it can be saved with the exported functions.

    Attributes:
        action_size: the robot's action size.
        obs_leaves: ``(key path, shape)`` of each observation leaf (one leaf, the empty path, for a flat vector).
        has_truncation: the state's ``info`` has a ``truncation`` entry (an ``EpisodeWrapper``).
        widths, dtypes: the packed state's buffers (``Layout``): their widths and dtype names, float32 first.
    """

    action_size: int
    obs_leaves: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    has_truncation: bool
    widths: tuple[int, ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, env) -> CoreInfo:
        """Trace ``env.reset`` for shapes (see ``reset_struct``)."""
        one = reset_struct(env)
        layout = Layout(_strong(one))
        return cls(
            action_size=int(env.action_size),
            obs_leaves=tuple((path, tuple(leaf.shape)) for path, leaf in tree_paths(one.obs)),
            has_truncation="truncation" in one.info,
            widths=tuple(layout.widths),
            dtypes=tuple(str(d) for d in layout.dtypes),
        )

    @property
    def flat_observation_size(self) -> int | None:
        """The observation's size if it is one flat vector (what a multi-agent split needs), else None."""
        if len(self.obs_leaves) == 1 and not self.obs_leaves[0][0] and len(self.obs_leaves[0][1]) == 1:
            return self.obs_leaves[0][1][0]
        return None

    def to_json(self) -> dict:
        return {"action_size": self.action_size, "obs_leaves": [[list(p), list(s)] for p, s in self.obs_leaves],
                "has_truncation": self.has_truncation, "widths": list(self.widths), "dtypes": list(self.dtypes)}

    @classmethod
    def from_json(cls, data: dict) -> CoreInfo:
        return cls(
            action_size=int(data["action_size"]),
            obs_leaves=tuple((tuple(p), tuple(int(n) for n in s)) for p, s in data["obs_leaves"]),
            has_truncation=bool(data["has_truncation"]),
            widths=tuple(int(w) for w in data["widths"]),
            dtypes=tuple(str(d) for d in data["dtypes"]),
        )


def _strong(tree: Any) -> Any:
    """``ShapeDtypeStruct`` leaves without weak types (a weakly typed float32 is a float32)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def export_platform(device) -> str:
    """The ``jax.export`` platform name of a JAX device (``cpu``, ``cuda``, ``rocm``, ``tpu``)."""
    if device.platform != "gpu":
        return device.platform
    return "rocm" if "rocm" in device.client.platform_version.lower() else "cuda"


class BraxCore:
    """Compiled reset / step of ``num_envs`` copies of a Brax env; the batched state lives here, in JAX.

    The reset and step are traced from the env (``env`` a ``brax.envs.Env``), or come ready as ``jax.export``
    modules (``exported``, with ``env`` a zero-argument callable that builds the env, called only if something
    needs the env itself: ``env_state``). With ``export=True`` they are traced as ``jax.export`` modules
    (``self.exported``, to be saved) and compiled from those, exactly as a later process that loads them does, so
    that process finds the compiled code in JAX's persistent cache.

    Args:
        env: a ``brax.envs.Env`` (unbatched: this class vmaps it), or a callable returning one (``exported``).
        info: the env's shapes (``CoreInfo.of(env)``).
        num_envs: batch size.
        frame_skip: env steps per call, rewards summed (``lax.scan``).
        split: multi-agent tables, or None for the single-agent layout.
        device: the JAX device holding the state.
        differentiable: a ``Differentiable`` will drive this core (it compiles its own step).
        export: trace reset and step as ``jax.export`` modules (falls back to plain tracing if export fails).
        exported: ``{"reset": Exported, "step": Exported}`` to compile instead of tracing.

    Raises:
        ValueError: tracing the env's reset or step fails, or its step changes the state's structure.
    """

    def __init__(
        self, env, info: CoreInfo, *, num_envs: int, frame_skip: int, split: Split | None, device,
        differentiable: bool = False, export: bool = False, exported: Mapping[str, Any] | None = None,
    ):
        self.info, self.num_envs, self.frame_skip, self.split, self.device = info, num_envs, frame_skip, split, device
        self._env, self._env_factory = (None, env) if exported else (env, None)
        self._sharding = jax.sharding.SingleDeviceSharding(device)
        self.observation_size = info.flat_observation_size if split is not None else None  # the wrapper checked it
        self._compiled: dict[str, Any] = {}
        self._traced: dict[str, Any] = {}
        self.exported: dict[str, Any] = dict(exported or {})
        self.compile_seconds: dict[str, float] = {}
        if not differentiable and not self.exported:
            # trace the step now: a broken custom env fails here, and compiling reuses the trace
            with _step_errors(self.env):
                if not (export and self._export()):
                    self._trace("step", *self._signature("step"))
        self._state: tuple[jax.Array, ...] | None = None  # the batched Brax state, packed by self.layout
        self._keys: jax.Array | None = None
        self.seed(0)

    @property
    def env(self):
        """The Brax env (built now if this core came from exported modules)."""
        if self._env is None:
            self._env = self._env_factory()
        return self._env

    @functools.cached_property
    def _reference(self) -> Any:
        return _strong(reset_struct(self.env))

    @functools.cached_property
    def layout(self) -> Layout:
        layout = Layout(self._reference)
        if tuple(layout.widths) != self.info.widths:
            raise RuntimeError(f"the Brax env's state packs into {layout.widths}, the compiled functions take "
                               f"{self.info.widths}: a stale export? (delete it, or set MARL_ENVS_JAX_CACHE=0)")
        return layout

    # -- the per-env functions ------------------------------------------------------------------------
    def _cast(self, state: Any) -> Any:
        """Keep the state's dtypes (a step returning float64 or weak types must not change the carry).

        Raises:
            StateMismatch: the state's structure or shapes differ from what ``reset`` returns.
        """
        if jax.tree.structure(state) != jax.tree.structure(self._reference) or any(
            jnp.shape(x) != ref.shape for x, ref in zip(jax.tree.leaves(state), jax.tree.leaves(self._reference))
        ):
            raise StateMismatch(
                f"{type(self.env).__name__}.step returns a state unlike the one reset returns "
                f"({_describe_mismatch(self._reference, state)}); a Brax env's step must keep the state's "
                f"structure and shapes"
            )
        return jax.tree.map(lambda x, ref: jnp.asarray(x).astype(ref.dtype), state, self._reference)

    def _step_one(self, state: Any, action: jax.Array) -> tuple[Any, jax.Array]:
        """``frame_skip`` env steps of one env; the summed reward. An env that ends stays frozen."""
        env = self.env
        if self.frame_skip == 1:
            nxt = env.step(state, action)
            return self._cast(nxt), jnp.asarray(nxt.reward, jnp.float32)

        def body(carry, _):
            current, total, ended = carry
            nxt = self._cast(env.step(current, action))
            nxt = jax.tree.map(lambda old, new: jnp.where(ended, old, new), current, nxt)
            total = total + jnp.where(ended, 0.0, jnp.asarray(nxt.reward, jnp.float32))
            return (nxt, total, ended | (nxt.done > 0)), None

        start = (self._cast(state), jnp.zeros((), jnp.float32), jnp.zeros((), bool))
        (state, total, _), _ = jax.lax.scan(body, start, None, length=self.frame_skip)
        return state, total

    def _outputs(self, state: Any, reward: jax.Array | None) -> jax.Array:
        """The float buffer: observations (state + per-group gathers for a split), then rewards."""
        B = self.num_envs
        if self.split is None:
            parts = [leaf.reshape(B, -1).astype(jnp.float32) for _, leaf in tree_paths(state.obs)]
            if reward is not None:
                parts.append(reward.reshape(B, 1))
        else:
            obs = state.obs.reshape(B, -1).astype(jnp.float32)
            padded = jnp.concatenate([obs, jnp.zeros((B, 1), jnp.float32)], axis=1)
            parts = [obs] + [padded[:, table.reshape(-1)] for table in self.split.gathers]
            if reward is not None:
                parts += [jnp.broadcast_to(reward.reshape(B, 1), (B, len(t))) for t in self.split.gathers]
        return jnp.concatenate(parts, axis=1)

    def _flags(self, state: Any) -> jax.Array:
        done = state.done > 0
        truncated = (state.info["truncation"] > 0) & done if self.info.has_truncation else jnp.zeros_like(done)
        return jnp.stack([done & ~truncated, truncated], axis=1)

    # -- batched functions (these are compiled) -------------------------------------------------------
    def _robot_action(self, action: jax.Array) -> jax.Array:
        action = action.astype(jnp.float32)
        return action if self.split is None else action[:, self.split.action_source]

    def _step(self, buffers, keys, action):
        state, reward = jax.vmap(self._step_one)(self.layout.unpack(buffers), self._robot_action(action))
        return self.layout.pack(state), keys, self._outputs(state, reward), self._flags(state)

    def _step_packed(self, buffers, keys, action):
        """``_step`` with the flags appended to the float buffer as 0 / 1: one array to hand over, not two."""
        buffers, keys, out, flags = self._step(buffers, keys, action)
        return buffers, keys, jnp.concatenate([out, flags.astype(jnp.float32)], axis=1)

    def _reset(self, buffers, keys, mask):
        pairs = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
        fresh = jax.vmap(lambda key: self._cast(self.env.reset(key)))(pairs[:, 1])
        buffers = tuple(jnp.where(mask[:, None], new, old) for new, old in zip(self.layout.pack(fresh), buffers))
        keys = jnp.where(mask[:, None], pairs[:, 0], keys)
        return buffers, keys, self._outputs(self.layout.unpack(buffers), None)

    # -- compilation ----------------------------------------------------------------------------------
    def _struct(self, shape, dtype) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=self._sharding)

    def _state_structs(self) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(self._struct((self.num_envs, w), np.dtype(d)) for w, d in zip(self.info.widths, self.info.dtypes))

    def _signature(self, name: str) -> tuple[Callable, tuple[Any, ...], tuple[int, ...]]:
        """``(function, argument structs, donated arguments)`` of the compiled ``reset`` or ``step``."""
        if name == "step":
            return self._step_packed, (self._state_structs(), self._keys_struct(), self._action_struct()), (0, 1)
        mask = self._struct((self.num_envs,), jnp.bool_)
        return self._reset, (self._state_structs(), self._keys_struct(), mask), (0, 1)

    def _trace(self, name: str, fn, args: Sequence[Any], donate: tuple[int, ...] = ()) -> None:
        start = time.perf_counter()
        with quiet_tracing():
            self._traced[name] = jax.jit(fn, donate_argnums=donate).trace(*args)
        self.compile_seconds[name] = time.perf_counter() - start

    def _export(self) -> bool:
        """Trace step and reset as ``jax.export`` modules into ``self.exported``; False if JAX cannot export them."""
        platform = export_platform(self.device)
        for name in ("step", "reset"):
            fn, args, _ = self._signature(name)
            start = time.perf_counter()
            try:
                with quiet_tracing():
                    self.exported[name] = jax.export.export(jax.jit(fn), platforms=[platform])(*args)
            except Exception:  # not exportable (an unsupported custom call, ...): trace as usual, save nothing
                self.exported.clear()
                return False
            self.compile_seconds[name] = time.perf_counter() - start
        return True

    def compiled(self, name: str, fn, args: Callable[[], Sequence[Any]], donate: tuple[int, ...] = ()):
        """AOT-compile ``fn`` (or its exported module) for the structs ``args()`` once; ``jax.clear_caches()``
        never drops it.

        ``compile_seconds[name]`` counts tracing, lowering and compiling (or loading from the persistent cache).
        """
        if name not in self._compiled:
            if name not in self.exported and name not in self._traced:
                self._trace(name, fn, args(), donate)
            start = time.perf_counter()
            with quiet_tracing():
                if name in self.exported:
                    traced = jax.jit(self.exported[name].call, donate_argnums=donate).trace(*args())
                else:
                    traced = self._traced.pop(name)
                self._compiled[name] = traced.lower().compile()
            self.compile_seconds[name] = self.compile_seconds.get(name, 0.0) + time.perf_counter() - start
        return self._compiled[name]

    def _keys_struct(self):
        return self._struct((self.num_envs, 2), jnp.uint32)

    def _action_struct(self):
        return self._struct((self.num_envs, self.info.action_size), jnp.float32)

    # -- the public calls -----------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Per-env keys ``fold_in(PRNGKey(seed), i)``: env i's starts do not depend on the batch size."""
        self._keys = jax.device_put(_env_keys(jax.random.PRNGKey(seed), self.num_envs), self._sharding)

    def _compile(self, name: str):
        fn, args, donate = self._signature(name)
        return self.compiled(name, fn, lambda: args, donate)

    def zero_state(self) -> tuple[jax.Array, ...]:
        return tuple(jax.device_put(np.zeros(x.shape, x.dtype), self._sharding) for x in self._state_structs())

    def reset(self, mask: np.ndarray | jax.Array) -> jax.Array:
        """Reset the envs where ``mask`` ``(B,)`` is True; return the float buffer (no rewards) of all envs."""
        if self._state is None:
            self._state = self.zero_state()
        fn = self._compiled.get("reset") or self._compile("reset")
        self._state, self._keys, out = fn(self._state, self._keys, mask)
        return out

    def step(self, action: np.ndarray | jax.Array) -> jax.Array:
        """Step every env with the flat agent action ``(B, action_size)``; the float buffer, with ``terminated``
        and ``truncated`` (as 0. / 1.) in its last two columns."""
        if self._state is None:
            raise RuntimeError("step() before reset(): reset the env first")
        fn = self._compiled.get("step") or self._compile("step")
        self._state, self._keys, out = fn(self._state, self._keys, action)
        return out

    def env_state(self, index: int, buffers: Sequence[Any] | None = None) -> Any:
        """The Brax state of env ``index`` as NumPy arrays (for rendering), from ``buffers`` or the current state."""
        buffers = self._state if buffers is None else buffers
        if buffers is None:
            raise RuntimeError("the env has no state yet: reset it first")
        return self.layout.unpack([np.asarray(b[index]) for b in buffers], batch=())


class Differentiable:
    """The differentiable variant of a ``BraxCore``.

    The state's float32 buffer (``flat``, ``(B, S)``: the part gradients flow through) is handed to the caller,
    who keeps it as a torch tensor carrying the autograd history; the other buffers (``aux``: integer and
    bool leaves, other float dtypes) and the keys stay here. ``step`` returns the next flat state with the
    outputs and what ``vjp`` needs to recompute the step under ``jax.vjp``: its inputs, nothing else.
    """

    def __init__(self, core: BraxCore):
        self.core = core
        self.flat_size = core.info.widths[0]
        self.aux: tuple | None = None
        structs = core._state_structs()
        self._flat_struct, self._aux_struct = structs[0], structs[1:]
        args = (self._flat_struct, self._aux_struct, core._keys_struct(), core._action_struct())
        with quiet_tracing(), _step_errors(core.env):  # also checks the env's step, as BraxCore does
            self.out_width = jax.eval_shape(self._forward, *args)[3].shape[1]

    # -- compiled functions ---------------------------------------------------------------------------
    def _forward(self, flat, aux, keys, action):
        buffers, keys, out, flags = self.core._step((flat, *aux), keys, action)
        return buffers[0], buffers[1:], keys, out, flags

    def _backward(self, flat, aux, keys, action, grad_flat, grad_out):
        def differentiable(f, a):
            new_flat, _, _, out, _ = self._forward(f, aux, keys, a)
            return new_flat, out

        return jax.vjp(differentiable, flat, action)[1]((grad_flat, grad_out))

    def _reset(self, flat, aux, keys, mask):
        buffers, keys, out = self.core._reset((flat, *aux), keys, mask)
        return buffers[0], buffers[1:], keys, out

    # -- the public calls -----------------------------------------------------------------------------
    def reset(self, flat: jax.Array | np.ndarray | None, mask) -> tuple[jax.Array, jax.Array]:
        """Reset where ``mask``; ``flat=None`` starts from zeros. Returns the new flat state and the outputs."""
        core = self.core
        if flat is None or self.aux is None:
            flat, *aux = core.zero_state()
            self.aux = tuple(aux)
        fn = core._compiled.get("grad_reset") or core.compiled("grad_reset", self._reset, lambda: (
            self._flat_struct, self._aux_struct, core._keys_struct(), core._struct((core.num_envs,), jnp.bool_)))
        flat, self.aux, core._keys, out = fn(flat, self.aux, core._keys, mask)
        return flat, out

    def step(self, flat, action) -> tuple[jax.Array, jax.Array, jax.Array, tuple]:
        """One step from ``flat``: ``(next flat, float outputs, flags, saved)``.

        ``saved`` is the rest of the step's input (``aux`` and the keys, JAX arrays that nothing mutates); with
        ``flat`` and ``action`` it is all ``vjp`` needs.
        """
        core = self.core
        fn = core._compiled.get("grad_step") or core.compiled("grad_step", self._forward, lambda: (
            self._flat_struct, self._aux_struct, core._keys_struct(), core._action_struct()))
        saved = (self.aux, core._keys)
        new_flat, self.aux, core._keys, out, flags = fn(flat, *saved, action)
        return new_flat, out, flags, saved

    def vjp(self, flat, saved: tuple, action, grad_flat, grad_out) -> tuple[jax.Array, jax.Array]:
        """Gradients w.r.t. the step's flat state and action, given those of its next flat state and outputs."""
        core = self.core
        fn = core._compiled.get("grad_vjp") or core.compiled("grad_vjp", self._backward, lambda: (
            self._flat_struct, self._aux_struct, core._keys_struct(), core._action_struct(), self._flat_struct,
            core._struct((core.num_envs, self.out_width), jnp.float32)))
        return fn(flat, *saved, action, grad_flat, grad_out)

    def env_state(self, flat: np.ndarray, index: int) -> Any:
        """The Brax state of env ``index`` (NumPy arrays), its float32 buffer given."""
        if self.aux is None:
            raise RuntimeError("the env has no state yet: reset it first")
        return self.core.env_state(index, (flat, *self.aux))
