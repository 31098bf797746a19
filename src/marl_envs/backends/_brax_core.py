"""The JAX side of the Brax backend: one compiled reset and one compiled step over a batch of Brax envs.

The Brax state never leaves JAX. It is kept packed: one ``(B, n)`` buffer per dtype (``Layout``), so a call
hands XLA a handful of buffers instead of every leaf of the Brax pytree (dispatch costs ~15 us per buffer
here, and a Brax state has 28 to 117 leaves). Per env step, one ahead-of-time compiled ``jit(vmap(...))`` call
takes the flat action of every agent and returns, besides the new state, two arrays: a float32 ``(B, K)``
buffer holding every float output (observations, the global state, rewards) side by side, and a bool
``(B, 2)`` buffer of ``terminated`` and ``truncated``. Inside that call: the agent actions are scattered into
the robot's action, the env is stepped ``frame_skip`` times with ``lax.scan`` (rewards summed, an env that ends
mid-skip stays frozen), and the agent observations are gathered. One reset call draws fresh starts with a
per-env key for the envs a mask selects and keeps every other env's state bit for bit. The state buffers are
donated, so XLA updates them in place.

The differentiable variant (``Differentiable``) hands the float32 buffer (the part gradients flow through) to
the caller, so a ``torch.autograd.Function`` can carry it between steps; its backward is a second compiled
function that recomputes the step under ``jax.vjp`` (nothing but the step's inputs is kept per step).
"""

from __future__ import annotations

import contextlib
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["BraxCore", "Differentiable", "Split", "quiet_tracing", "reset_struct", "tree_paths"]

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

    def structs(self, num_envs: int, sharding) -> tuple[jax.ShapeDtypeStruct, ...]:
        return tuple(
            jax.ShapeDtypeStruct((num_envs, w), d, sharding=sharding) for w, d in zip(self.widths, self.dtypes)
        )


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


def _where(mask: jax.Array, new: Any, old: Any) -> Any:
    """Per-env select over a batched pytree."""
    return jax.tree.map(lambda n, o: jnp.where(mask.reshape(mask.shape + (1,) * (n.ndim - 1)), n, o), new, old)


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


class BraxCore:
    """Compiled reset / step of ``num_envs`` copies of a Brax env; the batched state lives here, in JAX.

    Args:
        env: a ``brax.envs.Env`` (unbatched: this class vmaps it).
        num_envs: batch size.
        frame_skip: env steps per call, rewards summed (``lax.scan``).
        split: multi-agent tables, or None for the single-agent layout.
        device: the JAX device holding the state.
        differentiable: a ``Differentiable`` will drive this core (it compiles its own step).

    Raises:
        ValueError: tracing the env's reset or step fails, or its step changes the state's structure.
    """

    def __init__(
        self, env, *, num_envs: int, frame_skip: int, split: Split | None, device, differentiable: bool = False
    ):
        self.env, self.num_envs, self.frame_skip, self.split, self.device = env, num_envs, frame_skip, split, device
        self._sharding = jax.sharding.SingleDeviceSharding(device)
        one = reset_struct(env)
        self._reference = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), one)  # weak types dropped
        self.obs_leaves = [(path, leaf.shape) for path, leaf in tree_paths(one.obs)]
        self.has_truncation = "truncation" in one.info
        if split is not None and (len(self.obs_leaves) != 1 or self.obs_leaves[0][0] or len(one.obs.shape) != 1):
            raise ValueError(
                f"a multi-agent split needs a flat observation vector, but {type(env).__name__} observes "
                f"{ {'/'.join(p) or 'obs': s for p, s in self.obs_leaves} }"
            )
        self._compiled: dict[str, Any] = {}
        self._traced: dict[str, Any] = {}
        self.compile_seconds: dict[str, float] = {}
        self.layout = Layout(self._reference)
        if not differentiable:  # trace the step now: a broken custom env fails here, and compiling reuses it
            with _step_errors(env):
                self._trace("step", self._step, (self._state_structs(), self._keys_struct(), self._action_struct()),
                            donate=(0, 1))
        self.observation_size = int(np.prod(one.obs.shape)) if split is not None else None
        self._state: tuple[jax.Array, ...] | None = None  # the batched Brax state, packed by self.layout
        self._keys: jax.Array | None = None
        self.seed(0)

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
        truncated = (state.info["truncation"] > 0) & done if self.has_truncation else jnp.zeros_like(done)
        return jnp.stack([done & ~truncated, truncated], axis=1)

    # -- batched functions (these are compiled) -------------------------------------------------------
    def _robot_action(self, action: jax.Array) -> jax.Array:
        action = action.astype(jnp.float32)
        return action if self.split is None else action[:, self.split.action_source]

    def _step(self, buffers, keys, action):
        state, reward = jax.vmap(self._step_one)(self.layout.unpack(buffers), self._robot_action(action))
        return self.layout.pack(state), keys, self._outputs(state, reward), self._flags(state)

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
        return self.layout.structs(self.num_envs, self._sharding)

    def _trace(self, name: str, fn, args: Sequence[Any], donate: tuple[int, ...] = ()) -> None:
        start = time.perf_counter()
        with quiet_tracing():
            self._traced[name] = jax.jit(fn, donate_argnums=donate).trace(*args)
        self.compile_seconds[name] = time.perf_counter() - start

    def compiled(self, name: str, fn, args: Callable[[], Sequence[Any]], donate: tuple[int, ...] = ()):
        """AOT-compile ``fn`` for the structs ``args()`` once; ``jax.clear_caches()`` never drops it.

        ``compile_seconds[name]`` counts tracing, lowering and compiling (or loading from the persistent cache).
        """
        if name not in self._compiled:
            if name not in self._traced:
                self._trace(name, fn, args(), donate)
            start = time.perf_counter()
            with quiet_tracing():
                self._compiled[name] = self._traced.pop(name).lower().compile()
            self.compile_seconds[name] += time.perf_counter() - start
        return self._compiled[name]

    def _keys_struct(self):
        return self._struct((self.num_envs, 2), jnp.uint32)

    def _action_struct(self):
        return self._struct((self.num_envs, self.env.action_size), jnp.float32)

    # -- the public calls -----------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Per-env keys ``fold_in(PRNGKey(seed), i)``: env i's starts do not depend on the batch size."""
        root = jax.random.PRNGKey(seed)
        keys = jax.vmap(lambda i: jax.random.fold_in(root, i))(jnp.arange(self.num_envs, dtype=jnp.uint32))
        self._keys = jax.device_put(keys, self._sharding)

    def zero_state(self) -> tuple[jax.Array, ...]:
        return tuple(jax.device_put(jnp.zeros(x.shape, x.dtype), self._sharding) for x in self._state_structs())

    def reset(self, mask: np.ndarray | jax.Array) -> jax.Array:
        """Reset the envs where ``mask`` ``(B,)`` is True; return the float buffer (no rewards) of all envs."""
        if self._state is None:
            self._state = self.zero_state()
        fn = self._compiled.get("reset") or self.compiled("reset", self._reset, lambda: (
            self._state_structs(), self._keys_struct(), self._struct((self.num_envs,), jnp.bool_)), donate=(0, 1))
        self._state, self._keys, out = fn(self._state, self._keys, mask)
        return out

    def step(self, action: np.ndarray | jax.Array) -> tuple[jax.Array, jax.Array]:
        """Step every env with the flat agent action ``(B, action_size)``; the float and flag buffers."""
        if self._state is None:
            raise RuntimeError("step() before reset(): reset the env first")
        fn = self._compiled.get("step") or self.compiled("step", self._step, lambda: (
            self._state_structs(), self._keys_struct(), self._action_struct()), donate=(0, 1))
        self._state, self._keys, out, flags = fn(self._state, self._keys, action)
        return out, flags

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
        self.flat_size = core.layout.widths[0]
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
