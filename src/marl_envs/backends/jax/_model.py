"""The one jit-vmapped core of every JAX env family (Brax, JaxMARL, gymnax).

A family plugs in through a small adapter: a subclass of ``JaxCore`` giving three pure per-env functions,

- ``reset_one(key) -> (state, out)``: a fresh state and its outputs (``out``: one float32 vector),
- ``step_one(key, state, action) -> (state, out, flags)``: one step from the flat float32 action vector;
  ``out`` holds every output side by side (observations, rewards, masks, per-agent ends) and ``flags`` the
  root ``(terminated, truncated)`` as two bools,
- ``observe_one(state) -> out`` (optional): ``reset_one``'s outputs for a state kept by a partial reset,

and the state's structure (``_reference``). This class owns the batched pieces once: the state of ``num_envs``
envs kept in JAX, packed into one ``(B, n)`` buffer per dtype (``StatePacking``: every buffer costs a dispatch of
its own, and a state has tens of leaves); the batched ``jit(vmap(...))`` step whose outputs and flags come back as
one float32 ``(B, K)`` array; the masked reset drawing fresh starts with per-env keys (``fold_in(PRNGKey(seed),
i)``, split at every reset and, for families whose step is random, at every step) and keeping every other env's
state bit for bit; and the same two functions traced as ``jax.export`` modules when asked (``export=True``), of a
symbolic batch size (one module for every ``num_envs``). The env's executor (``_programs.Programs``) compiles its
reset and step programs over these, with donated buffers, for the batch size ``compiled_rows`` gives.

The key chain is written once, per env (``keyed_reset``, ``keyed_step``): each env carries a key, a reset splits
it and uses the second half (keeping the first), a step of a family whose step is random does the same. The
compiled batch functions vmap these, and ``functions()`` returns them, pure, for ``jit`` / ``vmap`` /
``lax.scan`` in a JAX training loop (``JaxEnvBase.jax_functions`` adds the outputs' columns, the step count and
the auto-reset).
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._packing import StatePacking


__all__ = ["JaxCore", "StateMismatch", "compiled_rows", "env_keys", "export_platform", "quiet_tracing",
           "split_key", "straight_threefry", "strong", "tree_paths"]


@contextlib.contextmanager
def quiet_tracing() -> Iterator[None]:
    """Silence the deprecation warnings MJX raises while Brax code is traced (``Data.ncon`` and friends).

    They come from Brax's own code reading MJX fields, fire on every trace and are nothing a user can act on.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Accessing `\w+` directly from `(Data|Model)` is deprecated",
                                category=DeprecationWarning)
        yield


@contextlib.contextmanager
def straight_threefry() -> Iterator[None]:
    """Lower JAX's random bits (the Threefry hash) as straight-line code on the CPU too, while in the block.

    On the CPU, JAX lowers the hash as a loop of five rounds; XLA runs each round of a batched draw as a handful of
    kernels handed between threads, a large share of a small env's compiled step. The straight-line
    form, the one JAX lowers for GPUs, computes the same bits. Only this block's lowering is changed: JAX's CPU rule
    is back when it ends, for the user's own programs (one another thread lowers meanwhile gets the straight form,
    the same bits). A JAX that moved its lowering tables gets its default.
    """
    try:
        from jax._src.interpreters import mlir
        from jax.extend.random import threefry2x32_p

        table = mlir._platform_specific_lowerings["cpu"]
    except (ImportError, AttributeError, KeyError):
        yield
        return
    rule = table.pop(threefry2x32_p, None)  # the rule for every platform then applies: the straight-line one
    try:
        yield
    finally:
        if rule is not None:
            table[threefry2x32_p] = rule


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


def compiled_rows(num_envs: int) -> int:
    """The batch size the programs of ``num_envs`` envs are compiled for: XLA compiles each batch size apart (static
    shapes), so batch sizes share a few sizes and the rows past ``num_envs`` are stepped and never read.

    One env is compiled as it is (a single env, for evaluation or debugging, keeps the raw library's bits at one env);
    2 to 8 envs share 8 (a small batch steps in about the time of one, physics aside); past 8, four sizes in each
    doubling (8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ...): at most a quarter more rows than envs, and every power of
    two is its own size.

    >>> [compiled_rows(n) for n in (1, 2, 4, 8, 9, 100, 1000, 1024, 4097)]
    [1, 8, 8, 8, 10, 112, 1024, 1024, 5120]
    """
    if num_envs <= 8:
        return 1 if num_envs == 1 else 8
    step = 1 << ((num_envs - 1).bit_length() - 3)  # a quarter of the power of two below num_envs
    return -(-num_envs // step) * step


def env_keys(seed: int, num_envs: int) -> jax.Array:
    """The per-env keys of ``seed``: ``fold_in(PRNGKey(seed), i)``, so env i's starts do not depend on ``B``."""
    return _env_keys(jax.random.PRNGKey(seed), num_envs)


def export_platform(device) -> str:
    """The ``jax.export`` platform name of a JAX device (``cpu``, ``cuda``, ``rocm``, ``tpu``)."""
    if device.platform != "gpu":
        return device.platform
    return "rocm" if "rocm" in device.client.platform_version.lower() else "cuda"


class JaxCore:
    """Compiled reset / step of ``num_envs`` copies of one functional JAX env (the env's executor carries their
    batched state: ``_packing.Carry``).

    Subclasses (the family adapters) set ``action_size``, ``step_uses_key`` and ``_reference`` and define
    ``reset_one``, ``step_one`` (and ``observe_one``); then call ``_setup_packed`` (or set ``widths`` / ``dtypes``,
    the packed state's buffers, themselves and call ``_setup``: an env loaded from its export).
    """

    step_uses_key = True  # split a fresh key per env for every step (False: the step is deterministic)
    #: the auto-reset computes fresh starts only at steps where some env ended (one conditional over the batch),
    #: for envs whose reset costs many steps (Playground's CheetahRun settles the model): else a fresh start for every
    #: env at every step, selected where the episode ended (no conditional: nothing read on the host on a GPU)
    resets_when_needed = False
    #: a fresh start costs a good part of a step (Brax): on the CPU path, ``step_and_maybe_reset`` runs the step and,
    #: where it ended some episode, the reset program (``JaxExecutor``): no fresh starts computed at the other steps
    costly_reset = False
    label = "env"  # how errors name the env
    num_envs: int
    action_size: int
    widths: tuple[int, ...]
    dtypes: tuple[str, ...]

    def _setup(self, *, num_envs: int, device, exported: Mapping[str, Any] | None = None) -> None:
        self.num_envs, self.device = num_envs, device
        self.sharding = jax.sharding.SingleDeviceSharding(device)
        self._compiled: dict[str, Any] = {}
        self._traced: dict[str, Any] = {}
        self.exported: dict[str, Any] = dict(exported or {})
        self.compile_seconds: dict[str, float] = {}
        self.keys: jax.Array | None = None  # the env keys of the last seed (the executor carries them on)
        self.seed(0)

    def _setup_packed(self, *, num_envs: int, device) -> None:
        """``_setup``, the packed state's ``widths`` and ``dtypes`` read from ``_reference`` (an adapter whose state
        structure is known once it is built)."""
        packing = StatePacking(self._reference)
        self.widths, self.dtypes = tuple(packing.widths), tuple(str(d) for d in packing.dtypes)
        self._setup(num_envs=num_envs, device=device)

    # -- the protocol ---------------------------------------------------------------------------------
    @property
    def _reference(self) -> Any:
        """The unbatched state's structure (strong ``ShapeDtypeStruct`` leaves)."""
        raise NotImplementedError

    def reset_one(self, key: jax.Array) -> tuple[Any, jax.Array]:
        raise NotImplementedError

    def step_one(self, key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
        raise NotImplementedError

    observe_one: Callable[[Any], jax.Array] | None = None

    def keyed_reset(self, key: jax.Array) -> tuple[jax.Array, Any, jax.Array]:
        """One env's reset from its carried ``key``: ``(key carried on, state, out)``; the key is split and its
        second half used."""
        kept, now = split_key(key)
        state, out = self.reset_one(now)
        return kept, self._cast(state), out

    def keyed_step(self, key: jax.Array, state: Any, action: jax.Array) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
        """One env's step from its carried ``key``: ``(key carried on, state, out, flags)``; the key is split and
        its second half used if ``step_uses_key``, else passed on as it is."""
        now = key
        if self.step_uses_key:
            key, now = split_key(key)
        state, out, flags = self.step_one(now, state, action)
        return key, state, out, flags

    def functions(self) -> tuple[Callable, Callable]:
        """The pure per-env ``keyed_reset(key) -> (key, state, out)`` and ``keyed_step(key, state, action) -> (key,
        state, out, flags)``: one env as the compiled batch functions run it."""
        return self.keyed_reset, self.keyed_step

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
            out = jax.vmap(self.observe_one)(self.packing.unpack(buffers))
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
        """``(function, argument structs, donated arguments)`` of the compiled ``reset`` or ``step`` of ``batch``
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
                with quiet_tracing(), straight_threefry():
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
            with quiet_tracing(), straight_threefry():
                if name in self.exported:
                    traced = jax.jit(self.exported[name].call, donate_argnums=donate).trace(*args())
                else:
                    traced = self._traced.pop(name)
                self._compiled[name] = traced.lower().compile()
            self.compile_seconds[name] = self.compile_seconds.get(name, 0.0) + time.perf_counter() - start
        return self._compiled[name]

    def _compile(self, name: str):
        fn, args, donate = self._signature(name)
        return self.compiled(name, fn, lambda: args, donate)

    # -- the public calls -----------------------------------------------------------------------------
    def seed(self, seed: int) -> None:
        """Per-env keys ``fold_in(PRNGKey(seed), i)``: env i's starts do not depend on the batch size."""
        self.seeded = seed
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
