"""``JaxModel``: one env written in JAX, the hook every JAX family implements and a user's JAX env can too.

A model gives one env's ``reset_one(key) -> (state, outputs)`` and ``step_one(key, state, actions) -> (state,
outputs)`` (and optionally ``observe_one(state) -> outputs``, for a state a partial reset kept), ``outputs`` named
by the env's keys (``docs/custom_env.md``). The env binds a ``ModelLayout`` read from its specs: the outputs are
checked against it when the env is built and laid into one float32 vector per env for the compiled programs. The
model owns the batched pieces: the state of ``num_envs`` envs packed into one ``(B, n)`` buffer per dtype
(``StatePacking``: every buffer costs a dispatch), the ``jit(vmap(...))`` step and masked reset with per-env keys
(``fold_in(PRNGKey(seed), i)``, split at every reset and, where the step is random, every step), and the same
functions as ``jax.export`` modules of a symbolic batch size when asked (Brax's saved envs).
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from dataclasses import dataclass
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..._core.leaf_specs import as_tuple
from ._packing import StatePacking


__all__ = ["JaxModel", "ModelLayout", "StateMismatch", "env_keys", "export_platform", "quiet_tracing", "split_key",
           "strong", "tree_paths"]


@contextlib.contextmanager
def quiet_tracing() -> Iterator[None]:
    """Silence the deprecation warnings MJX raises while Brax code is traced (``Data.ncon`` and friends).

    They come from Brax's own code reading MJX fields, fire on every trace and are nothing a user can act on.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Accessing `\w+` directly from `(Data|Model)` is deprecated",
                                category=DeprecationWarning)
        yield


def tree_paths(tree: Any) -> list[tuple[tuple[str, ...], Any]]:
    """``(key path, leaf)`` pairs of a pytree of dicts (a bare array has the empty path)."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path), leaf) for path, leaf in flat]


def strong(tree: Any) -> Any:
    """``ShapeDtypeStruct`` leaves without weak types (a weakly typed float32 is a float32)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


class StateMismatch(ValueError):
    """An env's ``step`` returned a state whose structure or shapes differ from ``reset``'s."""


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry(k1: jax.Array, k2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 hash (20 rounds) of the counters ``(x1, x2)`` under the key ``(k1, k2)``, written out.

    JAX's own lowering of this hash on a CPU is a five-step loop (small programs compile faster), which for a batch
    of keys costs several times the written-out rounds XLA fuses into one kernel: a key split per env and step is
    most of a cheap env's step there. The same arithmetic, so the same bits, on every platform."""
    keys = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + keys[0], x2 + keys[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = ((x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r))) ^ x1
        x1 = x1 + keys[(block + 1) % 3]
        x2 = x2 + keys[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``jax.random.split(key)`` of a raw ``(2,)`` uint32 key, bit for bit, as its two halves; the written-out hash
    where JAX splits keys so (``jax_threefry_partitionable``, JAX's default), else JAX's own split."""
    if not jax.config.jax_threefry_partitionable:
        pair = jax.random.split(key)
        return pair[0], pair[1]
    b1, b2 = _threefry(key[0], key[1], jnp.zeros(2, jnp.uint32), jnp.arange(2, dtype=jnp.uint32))
    return jnp.stack([b1[0], b2[0]]), jnp.stack([b1[1], b2[1]])


@functools.partial(jax.jit, static_argnums=1)
def _env_keys(root: jax.Array, num_envs: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(root, i))(jnp.arange(num_envs, dtype=jnp.uint32))


def env_keys(seed: int, num_envs: int) -> jax.Array:
    """The per-env keys of ``seed``: ``fold_in(PRNGKey(seed), i)``, so env i's starts do not depend on ``B``."""
    return _env_keys(jax.random.PRNGKey(seed), num_envs)


def export_platform(device) -> str:
    """The ``jax.export`` platform name of a JAX device (``cpu``, ``cuda``, ``rocm``, ``tpu``)."""
    if device.platform != "gpu":
        return device.platform
    return "rocm" if "rocm" in device.client.platform_version.lower() else "cuda"


Key = tuple[str, ...]


def _name(key: Key) -> str | Key:
    """How a model reads a key: a root key as a string (``"action"``), a nested one as a tuple."""
    return key[0] if len(key) == 1 else key


FLAGS = (("terminated",), ("truncated",))  # the root ends of a step, one bool scalar each ("truncated" optional)


@dataclass(frozen=True)
class ModelLayout:
    """The named outputs and actions of a model, read from the env's specs (``JaxEnvBase._set_model``).

    Attributes:
        reset: ``(key, per-env shape)`` of each output of a reset (the observation entries), in vector order.
        step: the same for a step: the observation entries, the rewards, each group's own ``terminated``.
        actions: ``(key, per-env shape, dtype)`` of each action, in the order of the flat action the programs take.
    """

    reset: tuple[tuple[Key, tuple[int, ...]], ...]
    step: tuple[tuple[Key, tuple[int, ...]], ...]
    actions: tuple[tuple[Key, tuple[int, ...], Any], ...]

    def named_actions(self, flat: jax.Array) -> dict:
        """One env's flat float32 action as the model reads it: each key's value in its shape and dtype."""
        out, start = {}, 0
        for key, shape, dtype in self.actions:
            size = int(np.prod(shape))
            out[_name(key)] = flat[start:start + size].reshape(shape).astype(dtype)
            start += size
        return out

    @staticmethod
    def vector(outputs: Mapping, entries: Sequence[tuple[Key, tuple[int, ...]]]) -> jax.Array:
        """The outputs of ``entries`` side by side, as float32 (bools as 0 / 1)."""
        named = {as_tuple(k): v for k, v in outputs.items()}
        parts = [jnp.asarray(named[key]).reshape(-1).astype(jnp.float32) for key, _ in entries]
        return jnp.concatenate(parts) if parts else jnp.zeros((0,), jnp.float32)

    @staticmethod
    def flags(outputs: Mapping) -> jax.Array:
        """``(terminated, truncated)`` of a step's outputs, as two bools (``truncated`` False if not given)."""
        named = {as_tuple(k): v for k, v in outputs.items()}
        return jnp.stack([jnp.asarray(named.get(key, False)).reshape(()).astype(bool) for key in FLAGS])

    def check(self, label: str, method: str, outputs: Mapping) -> None:
        """Refuse ``outputs`` (of ``method``, traced) unlike the layout: a missing, undeclared or misshapen entry.

        Raises:
            ValueError: naming the entry, its shape, the expected one and the fix.
        """
        entries = dict(self.step if method == "step_one" else self.reset)
        if method == "step_one":
            entries.update({key: () for key in FLAGS})
        named = {}
        for key, value in outputs.items():
            if not isinstance(key, (str, tuple)):
                raise ValueError(f"{label}.{method} returns an output keyed {key!r}; key each output by the env's "
                                 f"key, a string at the root (\"observation\") or a tuple (\"agents\", \"reward\")")
            named[as_tuple(key)] = value
        expected = ", ".join(repr(_name(k)) for k in entries)
        for key in entries:
            if key not in named and key != FLAGS[1]:
                raise ValueError(f"{label}.{method} returns no {_name(key)!r}; it must return every entry the env's "
                                 f"specs declare for it: {expected}")
        for key, value in named.items():
            if key not in entries:
                raise ValueError(f"{label}.{method} returns {_name(key)!r}, which the env's specs do not declare for "
                                 f"it; declare it in the specs or drop it (expected: {expected})")
            shape, want = tuple(jnp.shape(value)), entries[key]
            if key in FLAGS and int(np.prod(shape)) != 1:
                raise ValueError(f"{label}.{method}'s {_name(key)!r} has shape {shape}; expected one bool per env "
                                 f"(shape ())")
            if key not in FLAGS and shape != want:
                raise ValueError(f"{label}.{method}'s {_name(key)!r} has shape {shape} ({int(np.prod(shape))} "
                                 f"values); expected {want}, its spec's shape without the batch dim (num_envs,): "
                                 f"reshape the output, or declare that shape in the spec")


class JaxModel:
    """One env as pure JAX functions, batched and compiled for ``num_envs`` envs (the env's executor carries their
    batched state: ``_packing.Carry``).

    Subclasses define ``reset_one`` and ``step_one`` (and ``observe_one``) with named outputs (see the module
    docstring) and call ``JaxModel.__init__(num_envs=..., device=...)`` (``device``: the env's
    ``jax_device``). The state's structure is read from ``reset_one``
    (override ``_reference`` where it is known otherwise). ``JaxEnvBase._set_model`` binds the layout.

    Attributes:
        step_uses_key: split a fresh key per env for every step (False: the step is deterministic, or the state
            carries its own key).
        resets_when_needed: the auto-reset computes fresh starts only at steps where some env ended (one
            conditional over the batch: on a GPU, one wait for its predicate a step), for a reset that costs many
            steps (Playground's CheetahRun settles the model); else a fresh start for every env at every step,
            selected where the episode ended (no conditional).
        costly_reset: a fresh start costs a good part of a step (Brax): on the CPU, ``step_and_maybe_reset`` runs
            the step, then the reset program for the envs it ended (``JaxExecutor.auto_reset``).
    """

    step_uses_key = True
    resets_when_needed = False
    costly_reset = False
    label = ""  # how errors name the env (default: the class's name)
    num_envs: int
    layout: ModelLayout
    widths: tuple[int, ...]
    dtypes: tuple[str, ...]
    observe_one: Callable[[Any], Mapping] | None = None

    def __init__(self, *, num_envs: int, device) -> None:
        self._setup(num_envs=num_envs, device=device)

    def _setup(self, *, num_envs: int, device, exported: Mapping[str, Any] | None = None) -> None:
        self.num_envs, self.device = num_envs, device
        if not vars(self).get("label") and type(self).label == "":  # (Brax's is a property: it names the env)
            self.label = type(self).__name__
        self.sharding = jax.sharding.SingleDeviceSharding(device)
        self._compiled: dict[str, Any] = {}
        self._traced: dict[str, Any] = {}
        self.exported: dict[str, Any] = dict(exported or {})
        self.compile_seconds: dict[str, float] = {}
        if not hasattr(self, "widths"):  # an export brings its own (a Brax env loaded from its file)
            packing = StatePacking(self._reference)
            self.widths, self.dtypes = tuple(packing.widths), tuple(str(d) for d in packing.dtypes)
        self.seed(0)

    # -- the hook -------------------------------------------------------------------------------------
    def reset_one(self, key: jax.Array) -> tuple[Any, Mapping]:
        raise NotImplementedError

    def step_one(self, key: jax.Array, state: Any, actions: Mapping) -> tuple[Any, Mapping]:
        raise NotImplementedError

    @functools.cached_property
    def _reference(self) -> Any:
        """The unbatched state's structure (strong ``ShapeDtypeStruct`` leaves), read from ``reset_one``."""
        with quiet_tracing():
            return strong(jax.eval_shape(lambda key: self.reset_one(key)[0], jax.ShapeDtypeStruct((2,), jnp.uint32)))

    def bind(self, layout: ModelLayout, *, check: bool = True) -> None:
        """Take the env's layout; with ``check``, trace one env's reset and step now (``jax.eval_shape``), so that
        outputs unlike the layout are refused when the env is built (``ModelLayout.check``, run at every trace)."""
        self.layout = layout
        if check:
            key = jax.ShapeDtypeStruct((2,), jnp.uint32)
            with quiet_tracing():
                _, state, _ = jax.eval_shape(self.keyed_reset, key)
                if self.observe_one is not None:
                    jax.eval_shape(self._observe, state)
                jax.eval_shape(self.keyed_step, key, state, jax.ShapeDtypeStruct((self.action_size,), jnp.float32))

    @property
    def action_size(self) -> int:
        return sum(int(np.prod(shape)) for _, shape, _ in self.layout.actions)

    def keyed_reset(self, key: jax.Array) -> tuple[jax.Array, Any, jax.Array]:
        """One env's reset from its carried ``key``: ``(key carried on, state, outputs vector)``; the key is split
        and its second half used."""
        kept, now = split_key(key)
        state, out = self.reset_one(now)
        self.layout.check(self.label, "reset_one", out)
        return kept, self._cast(state), self.layout.vector(out, self.layout.reset)

    def keyed_step(self, key: jax.Array, state: Any, action: jax.Array) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """One env's step from its carried ``key`` and flat action: ``(key carried on, state, outputs vector,
        flags)``; the key is split and its second half used if ``step_uses_key``, else passed on as it is."""
        now = key
        if self.step_uses_key:
            key, now = split_key(key)
        state, out = self.step_one(now, state, self.layout.named_actions(action))
        self.layout.check(self.label, "step_one", out)
        return key, self._cast(state), self.layout.vector(out, self.layout.step), self.layout.flags(out)

    def _observe(self, state: Any) -> jax.Array:
        out = self.observe_one(state)
        self.layout.check(self.label, "observe_one", out)
        return self.layout.vector(out, self.layout.reset)

    @functools.cached_property
    def packing(self) -> StatePacking:
        """How the per-env state packs into the batched buffers the compiled functions carry."""
        packing = StatePacking(self._reference)
        if tuple(packing.widths) != tuple(self.widths):
            raise RuntimeError(f"the {self.label}'s state packs into {packing.widths}, the compiled functions take "
                               f"{self.widths}: a stale export? (delete it, or set MARL_ENVS_JAX_CACHE=0)")
        return packing

    def _cast(self, state: Any) -> Any:
        """Keep the state's dtypes (a step returning float64 or weak types must not change the carry).

        Raises:
            StateMismatch: the state's structure or shapes differ from what ``reset`` returns.
        """
        reference = self._reference
        if jax.tree.structure(state) != jax.tree.structure(reference) or any(
            jnp.shape(x) != ref.shape for x, ref in zip(jax.tree.leaves(state), jax.tree.leaves(reference))
        ):
            raise StateMismatch(
                f"{self.label}.step returns a state unlike the one reset returns "
                f"({_describe_mismatch(reference, state)}); a step must keep the state's structure and shapes"
            )
        return jax.tree.map(lambda x, ref: jnp.asarray(x).astype(ref.dtype), state, reference)

    # -- batched functions (these are compiled) -------------------------------------------------------
    def batch_step(self, buffers, keys, action):
        keys, state, out, flags = jax.vmap(self.keyed_step)(keys, self.packing.unpack(buffers), action)
        return self.packing.pack(state), keys, out, flags

    def batch_step_packed(self, buffers, keys, action):
        """``batch_step`` with the flags appended to the float buffer as 0 / 1: one array to hand over, not two."""
        buffers, keys, out, flags = self.batch_step(buffers, keys, action)
        return buffers, keys, jnp.concatenate([out, flags.astype(jnp.float32)], axis=1)

    def batch_reset(self, buffers, keys, mask):
        kept, fresh, out = jax.vmap(self.keyed_reset)(keys)
        buffers = tuple(jnp.where(mask[:, None], new, old) for new, old in zip(self.packing.pack(fresh), buffers))
        keys = jnp.where(mask[:, None], kept, keys)
        if self.observe_one is not None:
            out = jax.vmap(self._observe)(self.packing.unpack(buffers))
        else:  # the rows of envs not reset are the caller's (EnvBase keeps them)
            out = jnp.where(mask[:, None], out, 0.0)
        return buffers, keys, out

    # -- compilation ----------------------------------------------------------------------------------
    def struct(self, shape, dtype) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype, sharding=self.sharding)

    def state_structs(self, batch: Any = None) -> tuple[jax.ShapeDtypeStruct, ...]:
        """The packed state's structs, of ``batch`` envs (default: ``num_envs``; a symbolic dim for ``_export``)."""
        B = self.num_envs if batch is None else batch
        return tuple(self.struct((B, w), np.dtype(d)) for w, d in zip(self.widths, self.dtypes))

    def keys_struct(self, batch: Any = None):
        return self.struct((self.num_envs if batch is None else batch, 2), jnp.uint32)

    def action_struct(self, batch: Any = None):
        return self.struct((self.num_envs if batch is None else batch, self.action_size), jnp.float32)

    def _signature(self, name: str, batch: Any = None) -> tuple[Callable, tuple[Any, ...], tuple[int, ...]]:
        """``(function, argument structs, donated arguments)`` of the batched ``step`` or ``reset`` of ``batch``
        envs (default: ``num_envs``)."""
        state, keys = self.state_structs(batch), self.keys_struct(batch)
        if name == "batched_step":
            return self.batch_step_packed, (state, keys, self.action_struct(batch)), (0, 1)
        mask = self.struct((self.num_envs if batch is None else batch,), jnp.bool_)
        return self.batch_reset, (state, keys, mask), (0, 1)

    def _trace(self, name: str, fn, args: Sequence[Any], donate: tuple[int, ...] = ()) -> None:
        start = time.perf_counter()
        with quiet_tracing():
            self._traced[name] = jax.jit(fn, donate_argnums=donate).trace(*args)
        self.compile_seconds[name] = time.perf_counter() - start

    def _export(self) -> bool:
        """Trace step and reset as ``jax.export`` modules into ``self.exported``, for any number of envs (a symbolic
        batch dim: one module serves every ``num_envs``; XLA still compiles each batch size, as it needs static
        shapes); False if JAX cannot export them."""
        platform = export_platform(self.device)
        batch, = jax.export.symbolic_shape("b")
        for name in ("batched_step", "batched_reset"):
            fn, args, _ = self._signature(name, batch)
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

    # -- the public calls -----------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Per-env keys ``fold_in(PRNGKey(seed), i)``: env i's starts do not depend on the batch size."""
        self.keys = jax.device_put(env_keys(seed, self.num_envs), self.sharding)

    def zero_state(self, rows: int | None = None) -> tuple[jax.Array, ...]:
        """Zero state buffers of ``rows`` envs (default: ``num_envs``)."""
        return tuple(jax.device_put(np.zeros(x.shape, x.dtype), self.sharding) for x in self.state_structs(rows))

    def env_state(self, index: int, buffers: Sequence[Any]) -> Any:
        """The state of env ``index`` as NumPy arrays (for rendering), from the batched state ``buffers``."""
        return self.packing.unpack([np.asarray(b[index]) for b in buffers], batch=())


def _describe_mismatch(reference: Any, other: Any) -> str:
    ref = {jax.tree_util.keystr(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(reference)[0]}
    oth = {jax.tree_util.keystr(p): tuple(jnp.shape(x)) for p, x in jax.tree_util.tree_flatten_with_path(other)[0]}
    for key in ref.keys() | oth.keys():
        if ref.get(key) != oth.get(key):
            return f"state{key}: reset gives {ref.get(key, 'nothing')}, step gives {oth.get(key, 'nothing')}"
    return "the tree structures differ"
