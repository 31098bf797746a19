"""The JAX families' executor: a step's whole outcome computed in one compiled call, handed to torch as views.

A JAX-family env's core (``_core``) gives every output of one env as a float32 vector: the adapter's columns
(observations, rewards, masks stored as 0 / 1, then the root ``terminated`` and ``truncated``). Here that vector
becomes the env's entries, inside the compiled call, for every env at once:

- ``Emission``: one output's entries of one env (float and integer columns cast, bool columns compared to 0.5,
  the done entries of every level by the env's ``DonePlan``, the time limit read from the env's step count).
  The same function makes the data of ``jax_functions()``.
- ``Layout``: where each entry sits among the output's buffers, one ``(B, width)`` buffer per dtype; on the torch
  side every entry is a view of its buffer (no kernel), and the TensorDicts are built unchecked (``Tree``).
- ``Programs``: the compiled reset, step and step-with-auto-reset. The step count of each env lives in JAX
  beside the state; the time limit and the number of envs are a device array (the programs are compiled for the
  batch size ``num_envs`` shares, ``compiled_rows``: the rows past it are padding); the auto-reset draws a fresh
  start for every env and selects it where the step ended the episode (no conditional: a conditional's predicate is
  read on the host on a GPU). Optionally (``validate_actions="deferred"``) the step checks the actions itself.

``JaxOutputs`` is the executor ``JaxEnvBase`` sets when it is built: one compiled call and one hand-off per
dtype a step, nothing read back on the host (the deferred check's flag is read only once the device has
computed it). A core whose fresh starts are costly (Brax) on the CPU path runs ``step``, then the reset program
only at steps where an episode ended (its outputs are in host memory there: nothing waits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDictBase

from ..._core.outputs import DonePlan, Outputs, TimeLimit, Tree, merge_rows, picker, read_entry
from ..._core.leaf_specs import legal_choices
from ...specs import Binary, Categorical, MultiCategorical, OneHot
from ._core import compiled_rows, env_keys, quiet_tracing
from ._runtime import EXACT_BATCH_VAR, env_flag

if TYPE_CHECKING:
    from ._env import JaxEnvBase

__all__ = ["Emission", "JaxOutputs", "Layout", "Programs", "export_program", "read_ready"]

Key = tuple[str, ...]
Column = tuple[Key, slice, tuple[int, ...], Any]  # (key, columns of the core's vector, batched shape, torch dtype)
NO_LIMIT = np.iinfo(np.int32).max  # the time limit of an env without max_steps: never reached
# The restarts on the host (a Brax env on the CPU path, ``JaxOutputs``): a step that ended some episode counts 1,
# and _MEMORY times less each step after; the fused step runs while the count of recent ones is above _FUSED_ABOVE
# (of at most 1 / (1 - _MEMORY) = 8: about 3 steps in 4, where a reset program's call a step costs what the fused
# step's fresh starts cost)
_MEMORY, _FUSED_ABOVE = 0.875, 6.0


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


class Layout:
    """Where each entry of one output sits among the output's buffers: one ``(B, width)`` buffer per dtype,
    float32 first, entries side by side in their order.

    Args:
        entries: ``(key, batched shape, torch dtype)`` of each entry, in order (a key may repeat: two outputs
            laid side by side).
        flags: that many more bool columns after the bool entries (no entry's), each a scalar of the whole batch that
            the CPU path reads from the view it makes anyway: the last, the deferred check's "a bad action was
            recorded"; the one before it (a step that restarts ended envs on the host), "some env's episode ended".
    """

    def __init__(self, entries: Sequence[tuple[Key, tuple[int, ...], torch.dtype]], *, flags: int = 0):
        self.entries = list(entries)
        self.dtypes = list(dict.fromkeys([d for _, _, d in entries] + ([torch.bool] if flags else [])))
        self.flag = self.dtypes.index(torch.bool) if flags else None  # the flags' buffer (its last columns)
        self.widths = [0] * len(self.dtypes)
        self.slots: list[tuple[int, slice, tuple[int, ...]]] = []
        for _, shape, dtype in entries:
            index, size = self.dtypes.index(dtype), int(np.prod(shape[1:]))
            self.slots.append((index, slice(self.widths[index], self.widths[index] + size), tuple(shape)))
            self.widths[index] += size
        # how ``cut`` reads them: each buffer split at its entries' widths in one call, the split parts of all
        # buffers read in entry order in one C call, then reshaped where the entry has more than one dim past the batch
        self._sizes = [[cols.stop - cols.start for i, cols, _ in self.slots if i == index]
                       for index in range(len(self.dtypes))]
        if flags:
            self._sizes[self.flag].append(flags)
            self.widths[self.flag] += flags
        firsts = np.cumsum([0] + [len(sizes) for sizes in self._sizes]).tolist()  # each buffer's first part
        counts = [0] * len(self.dtypes)
        order = []
        for index, _, _ in self.slots:
            order.append(firsts[index] + counts[index])
            counts[index] += 1
        self._pick = picker(order)
        self._shaped = [(i, shape) for i, (_, _, shape) in enumerate(self.slots) if len(shape) != 2]

    def pack(self, values: Sequence[jax.Array], *flags: jax.Array) -> tuple[jax.Array, ...]:
        """The ``(B, width)`` buffers (one per dtype) of ``values`` (one ``(B, ...)`` array per entry, in order)
        and the layout's scalar ``flags``."""
        parts: list[list[jax.Array]] = [[] for _ in self.dtypes]
        for (index, _, _), value in zip(self.slots, values):
            parts[index].append(value.reshape(value.shape[0], -1).astype(_numpy_dtype(self.dtypes[index])))
        if self.flag is not None:
            B = values[0].shape[0]
            parts[self.flag].append(jnp.broadcast_to(jnp.stack(flags), (B, len(flags))))
        return tuple(jnp.concatenate(p, axis=1) for p in parts)

    def cut(self, buffers: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The entries of the batched ``buffers``, as views."""
        parts: list[torch.Tensor] = []
        for buffer, sizes in zip(buffers, self._sizes):
            parts += buffer.split_with_sizes(sizes, 1)
        entries = list(self._pick(parts))
        for i, shape in self._shaped:
            entries[i] = entries[i].view(shape)
        return entries


class Emission:
    """One output's entries of one env from the core's float vector, in JAX (see the module docstring).

    Args:
        columns: the output's columns of the core's vector.
        levels: the env's done levels (prefix -> shape of their done entries).
        step: a step's output (its done entries read the time limit); else a reset's.
    """

    def __init__(self, columns: Sequence[Column], levels: Mapping[Key, torch.Size], *, step: bool):
        self.keys: list[Key] = []
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: list[torch.dtype] = []
        self._sources: list[tuple[bool, Any]] = []  # (False, (cols, dtype)) | (True, (block rows, shape))
        given: dict[Key, slice] = {}
        compared: list[int] = []
        for key, cols, shape, dtype in columns:
            if dtype is torch.bool:
                rows = given[key] = slice(len(compared), len(compared) + cols.stop - cols.start)
                compared.extend(range(cols.start, cols.stop))
                self._sources.append((True, (rows, tuple(shape))))
            else:  # an integer entry (a Jumanji grid) is cast from the float32 vector: exact below 2**24
                self._sources.append((False, (cols, _numpy_dtype(dtype))))
            self.keys.append(key)
            self.shapes.append(tuple(shape))
            self.dtypes.append(dtype)
        # a step's plan always has a limit: without max_steps it is NO_LIMIT, never reached
        self.done = DonePlan(levels, given, len(compared), TimeLimit(NO_LIMIT) if step else None)
        for key, (rows, shape, _) in self.done.entries:
            if key not in given:
                self.keys.append(key)
                self.shapes.append(tuple(levels[key[:-1]]))
                self.dtypes.append(torch.bool)
                self._sources.append((True, (rows, tuple(levels[key[:-1]]))))
        self._compared = np.asarray(compared, dtype=int)

    def entry_specs(self, keep: Callable[[Key], bool] = lambda key: True) -> list[tuple[Key, tuple[int, ...], torch.dtype]]:
        """``(key, shape, dtype)`` of the entries ``keep`` selects, in order."""
        return [(k, s, d) for k, s, d in zip(self.keys, self.shapes, self.dtypes) if keep(k)]

    def __call__(self, vector: jax.Array, reached: jax.Array | None = None) -> dict[Key, jax.Array]:
        """The entries (key -> ``(B, ...)`` value) of the envs' vectors ``vector`` ``(B, K)``; ``reached``
        ``(B,)``: whether each env is at its time limit (a step's).

        The plan runs on a block held as a list of ``(B,)`` rows: slices and stacks, which XLA fuses, where
        writes into one array would be scatters (slow on a CPU)."""
        B = vector.shape[0]
        rows = _Rows([vector[:, c] > 0.5 for c in self._compared] + [None] * (self.done.width - len(self._compared)), B)
        self.done.fill(rows, None if reached is None else reached.reshape(1, B))
        entries = {}
        for key, shape, (is_bool, where) in zip(self.keys, self.shapes, self._sources):
            if is_bool:
                value = rows[where[0]].T  # (B, rows)
                size = int(np.prod(shape[1:]))
                entries[key] = (jnp.broadcast_to(value, (B, size)) if value.shape[1] != size else value).reshape(
                    (B, *shape[1:]))
            else:
                cols, dtype = where
                entries[key] = vector[:, cols].reshape((B, *shape[1:])).astype(dtype)
        return entries


class _Rows:
    """A bool block as a list of ``(B,)`` rows, read and written by row slices (``DonePlan.fill``'s block)."""

    def __init__(self, rows: list, batch: int):
        self.rows, self.batch = rows, batch

    def __getitem__(self, rows: slice) -> jax.Array:
        return jnp.stack(self.rows[rows])

    def __setitem__(self, rows: slice, value: Any) -> None:
        n = rows.stop - rows.start
        value = jnp.broadcast_to(jnp.asarray(value, bool), (n, self.batch))
        for i in range(n):
            self.rows[rows.start + i] = value[i]


class Carry:
    """What a JAX-family env carries from one compiled call to the next: the core's state buffers as they are, and
    the env keys and step counts side by side in one uint32 ``(B, 3)`` array (two words of key, then the step count's
    bits). Every array a compiled call takes or returns costs its dispatch about 0.5-1 us on a CPU, a cheap env's
    margin; the state buffers stay apart, so that XLA compiles the state's arithmetic alike in every program (the
    fused step and reset, bit for bit the step then the reset).
    """

    @staticmethod
    def join(buffers: Sequence[jax.Array], keys: jax.Array, steps: jax.Array
             ) -> tuple[tuple[jax.Array, ...], jax.Array]:
        """The carry of the state ``buffers``, ``keys`` ``(B, 2)`` uint32 and ``steps`` ``(B,)`` int32."""
        return tuple(buffers), jnp.concatenate([keys, jax.lax.bitcast_convert_type(steps, jnp.uint32)[:, None]], 1)

    @staticmethod
    def split(carry: tuple[tuple[jax.Array, ...], jax.Array]) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
        """``(state buffers, keys, steps)`` of a carry (``join``'s inverse)."""
        buffers, counters = carry
        return tuple(buffers), counters[:, :2], jax.lax.bitcast_convert_type(counters[:, 2], jnp.int32)


def _action_bounds(env: JaxEnvBase) -> tuple[np.ndarray, np.ndarray, list[tuple[Any, int]]]:
    """Per column of the core's flat action: the lowest and highest valid value (discrete actions; +-inf for
    continuous ones, checked for finiteness only) and ``(action key, index in the entry)``."""
    low, high, names = [], [], []
    for key in env._action_keys:
        spec = env.full_action_spec[key]
        width = int(np.prod(spec.shape[1:]))
        lo, hi = np.full(width, -np.inf), np.full(width, np.inf)
        if isinstance(spec, Categorical):
            lo[:], hi[:] = 0, spec.n - 1
        elif isinstance(spec, MultiCategorical):
            lo[:], hi[:] = 0, np.broadcast_to(spec.nvec.cpu().numpy(), spec.shape).reshape(spec.shape[0], -1)[0] - 1
        elif isinstance(spec, (OneHot, Binary)):
            lo[:], hi[:] = 0, 1
        low.append(lo)
        high.append(hi)
        names += [(key[0] if len(key) == 1 else key, i) for i in range(width)]
    return np.concatenate(low).astype(np.float32), np.concatenate(high).astype(np.float32), names


class _Mask(NamedTuple):
    """An action's mask among the programs' inputs: its columns of the core's flat action (one per agent), its
    choices, and where its ``(B, width * n)`` bools start in the flat ``legal`` input."""

    column: int
    width: int
    n: int
    start: int
    key: Key


def _action_masks(env: JaxEnvBase) -> list[_Mask]:
    """The masks of the env's masked actions (``action_checks``' ``legal``), in the core's action order."""
    legal = {(c.key,) if isinstance(c.key, str) else tuple(c.key): c.legal for c in env._action_checks}
    masks, column, start = [], 0, 0
    for key in env._action_keys:
        spec = env.full_action_spec[key]
        width = int(np.prod(spec.shape[1:]))
        mask = legal.get(key) if isinstance(spec, Categorical) else None  # (a one-hot action: checked immediately)
        if mask is not None:
            mask_key = (mask,) if isinstance(mask, str) else tuple(mask)
            masks.append(_Mask(column, width, spec.n, start, mask_key))
            start += width * spec.n
        column += width
    return masks


_BITS = 31  # choices per int32 word of the record's copy of a mask row


class Programs:
    """The compiled reset, step and step-with-auto-reset of a JAX-family env (see the module docstring).

    Each takes the carry (``Carry``, donated): the core's packed state buffers, and the per-env keys and each env's
    steps since its reset in one array; and the record (not donated: the host may still read an
    earlier one), ``(6 + words,)`` int32: the deferred check's first bad action (set, step, env, action column, the
    value's float32 bits), the steps taken, and the legal choices of that action's mask as bits (an env with
    action masks). A step of an env with action masks also takes ``legal``: each mask's bools, side by side (a
    choice a mask forbids is a bad action). Each returns the new carry and record, and its output buffers.
    """

    def __init__(self, env: JaxEnvBase, *, restarts: bool = False):
        self.core = core = env._core
        levels = env._done_levels
        self.reset_emission = Emission(env._reset_columns, levels, step=False)
        self.step_emission = Emission(env._step_columns, levels, step=True)
        rewards = {(k,) if isinstance(k, str) else tuple(k) for k in env.reward_keys}
        self.kept = [k for k in self.step_emission.keys if k not in rewards]  # the next root data's entries
        reset_keys = set(self.reset_emission.keys)
        self._fresh = [k in reset_keys for k in self.kept]  # kept entries a reset gives (else the step's stay)
        next_entries = self.step_emission.entry_specs()
        root_entries = self.step_emission.entry_specs(lambda k: k not in rewards)
        self.reset_layout = Layout(self.reset_emission.entry_specs())
        # ``restarts``: the executor restarts ended envs after the step (``JaxOutputs``), reading whether any ended
        # from one more flag column of the step's outputs
        self.ended = restarts
        self.step_layout = Layout(next_entries, flags=2 if self.ended else 1)
        # "next" and next root, side by side
        self.both_layout = Layout(next_entries + root_entries, flags=2 if self.ended else 1)
        self.low, self.high, self.action_names = _action_bounds(env)
        self.masks = _action_masks(env)
        self.legal_width = sum(m.width * m.n for m in self.masks)
        self.words = -(-max((m.n for m in self.masks), default=0) // _BITS)
        self.record_size = 6 + self.words
        self.carry = Carry()

    # -- pieces ---------------------------------------------------------------------------------------
    def _primitive(self, name: str) -> Callable:
        """The core's batched ``step`` or ``reset`` (its exported module when it was loaded from one)."""
        core = self.core
        name = f"batched_{name}"
        if name in core.exported:
            return core.exported[name].call
        return core.batch_step_packed if name == "batched_step" else core.batch_reset

    def _forbidden(self, action, legal):
        """``(B, action columns)`` bool: the choices the masks in ``legal`` forbid."""
        B = action.shape[0]
        parts, column = [], 0
        for m in self.masks:
            if m.column > column:
                parts.append(jnp.zeros((B, m.column - column), bool))
            choice = jnp.clip(action[:, m.column:m.column + m.width].astype(jnp.int32), 0, m.n - 1)
            rows = legal_choices(legal[:, m.start:m.start + m.width * m.n].reshape(B, m.width, m.n))
            parts.append(~jnp.take_along_axis(rows, choice[..., None], axis=2)[..., 0])
            column = m.column + m.width
        if column < action.shape[1]:
            parts.append(jnp.zeros((B, action.shape[1] - column), bool))
        return jnp.concatenate(parts, axis=1)

    def _legal_bits(self, legal, env, column):
        """The legal choices of action ``column`` of ``env`` as ``words`` int32 of bits (zeros if unmasked)."""
        bits = jnp.zeros(self.words * _BITS, jnp.int32)
        for m in self.masks:
            inside = (column >= m.column) & (column < m.column + m.width)
            offset = m.start + jnp.clip(column - m.column, 0, m.width - 1) * m.n
            row = jax.lax.dynamic_slice(legal[env], (offset,), (m.n,)).astype(jnp.int32)
            bits = jnp.where(inside, bits.at[:m.n].set(row), bits)
        return (bits.reshape(self.words, _BITS) << jnp.arange(_BITS, dtype=jnp.int32)).sum(axis=1)

    def _stepped(self, carry, record, action, bounds, check: bool, legal=None):
        """The step of every env, its entries and which rows are envs (``bounds``: the time limit, then the number of
        envs, the rows before the padding; with ``check``, the bad envs left as they were)."""
        buffers, keys, steps = self.carry.split(carry)
        new_buffers, new_keys, out = self._primitive("step")(buffers, keys, action)
        new_steps = steps + 1
        entries = self.step_emission(out, new_steps >= bounds[0])
        live = jnp.arange(action.shape[0]) < bounds[1]
        if check:
            bad_columns = ~jnp.isfinite(action) | (action < self.low) | (action > self.high)
            if self.masks:
                bad_columns = bad_columns | self._forbidden(action, legal)
            bad = bad_columns.any(axis=1) & live
            keep = lambda good, bad_value: jnp.where(  # noqa: E731
                bad.reshape(-1, *([1] * (good.ndim - 1))), bad_value, good)
            new_buffers = tuple(keep(n, o) for n, o in zip(new_buffers, buffers))
            new_keys, new_steps = keep(new_keys, keys), keep(new_steps, steps)
            # the bad envs' outputs: NaN floats, False (zero) elsewhere: nothing that reads as data
            entries = {k: keep(v, jnp.full_like(v, jnp.nan) if v.dtype == jnp.float32 else jnp.zeros_like(v))
                       for k, v in entries.items()}
            env = jnp.argmax(bad)
            column = jnp.argmax(bad_columns[env])
            found = jnp.stack([jnp.int32(1), record[5], env.astype(jnp.int32), column.astype(jnp.int32),
                               jax.lax.bitcast_convert_type(action[env, column], jnp.int32), record[5]])
            if self.masks:
                found = jnp.concatenate([found, self._legal_bits(legal, env, column)])
            record = jnp.where(bad.any() & (record[0] == 0), found, record)
        return (new_buffers, new_keys, new_steps), record.at[5].add(1), entries, live

    # -- the compiled programs ------------------------------------------------------------------------
    def reset(self, carry, record, mask):
        buffers, keys, steps = self.carry.split(carry)
        buffers, keys, out = self._primitive("reset")(buffers, keys, mask)
        values = self.reset_emission(out)
        steps = jnp.where(mask, 0, steps)
        return self.carry.join(buffers, keys, steps), record, self.reset_layout.pack([
            values[k] for k in self.reset_emission.keys])

    def step(self, carry, record, action, bounds, check: bool = False, legal=None):
        (buffers, keys, steps), record, entries, live = self._stepped(carry, record, action, bounds, check, legal)
        return self.carry.join(buffers, keys, steps), record, self.step_layout.pack(
            [entries[k] for k in self.step_emission.keys], *self._flags(entries, record, live))

    def _flags(self, entries, record, live) -> tuple[jax.Array, ...]:
        """A step's flag columns: whether some env's episode ended (a core that reads it), a bad action recorded."""
        return ((entries[("done",)].reshape(-1) & live).any(), record[0] != 0) if self.ended else (record[0] != 0,)

    def step_reset(self, carry, record, action, bounds, check: bool = False, legal=None):
        """The step, then a fresh start for every env, kept where the step ended the episode."""
        (buffers, keys, steps), record, entries, live = self._stepped(carry, record, action, bounds, check, legal)
        done = entries[("done",)].reshape(-1)
        if self.core.resets_when_needed:  # one conditional: on a GPU, one wait for its predicate a step
            def skip(buffers, keys):
                return buffers, keys, jnp.zeros(shape.shape, shape.dtype)

            shape = jax.eval_shape(self._primitive("reset"), buffers, keys, done)[2]
            buffers, keys, out = jax.lax.cond(
                (done & live).any(), lambda b, k: self._primitive("reset")(b, k, done), skip, buffers, keys)
        else:
            buffers, keys, out = self._primitive("reset")(buffers, keys, done)
        fresh = self.reset_emission(out)
        root = []
        for key, given in zip(self.kept, self._fresh):
            value = entries[key]
            if given:
                value = jnp.where(done.reshape(-1, *([1] * (value.ndim - 1))), fresh[key], value)
            root.append(value)
        steps = jnp.where(done, 0, steps)
        values = [entries[k] for k in self.step_emission.keys] + root
        return self.carry.join(buffers, keys, steps), record, self.both_layout.pack(
            values, *self._flags(entries, record, live))


def export_program(env: JaxEnvBase, name: str = "step_reset", *, platform: str = "cuda") -> Any:
    """The env's compiled ``name`` (``"reset"``, ``"step"``, ``"step_reset"``), as its executor runs it (with the
    deferred check if the env's ``validate_actions`` chooses it), traced as a ``jax.export.Exported`` for
    ``platform``: to read what a device would run (``exported.mlir_module()``). A Brax env loaded from its saved
    CPU modules is traced from the Brax env again."""
    outputs = env._outputs
    if not isinstance(outputs, JaxOutputs):
        raise TypeError(f"{type(env).__name__} has no compiled programs (a differentiable env steps through torch)")
    core = env._core
    exported, core.exported = core.exported, {}
    try:
        fn, args = outputs.signature(name, struct=lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype))
        with quiet_tracing():
            return jax.export.export(jax.jit(fn), platforms=[platform])(*args)
    finally:
        core.exported = exported


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return (tensor.detach() if tensor.requires_grad else tensor).numpy()


def read_ready(array: jax.Array) -> np.ndarray:
    """The host value of ``array``, which the caller has seen computed (``is_ready()``): a read that never waits."""
    return np.asarray(array)


class JaxOutputs(Outputs):
    """The executor of a JAX-family env (see the module docstring).

    Args:
        env: the env (its core, columns and action keys set).
        device_path: hand arrays over by DLPack both ways (a GPU; ``MARL_ENVS_DEVICE_PATH=1`` on the CPU), else
            NumPy views in and one NumPy copy out (the cheaper hand-off on the CPU).
    """

    deferred_checks = deferred_by_default = True  # on every device: one contract, and the cheaper check on a CPU too

    def __init__(self, env: JaxEnvBase, *, device_path: bool):
        super().__init__(env)
        self.device_path = device_path
        self._io = env._io  # the device path's hand-offs: DLPack both ways
        core = env._core
        self._sharding = core._sharding
        # the programs' batch (``compiled_rows``): the env's rows, then padding rows stepped with a valid action and
        # never read (so a new num_envs of the same size compiles nothing); MARL_ENVS_EXACT_BATCH=1: the env's own
        self._rows = env.num_envs if env_flag(EXACT_BATCH_VAR, "0") else compiled_rows(env.num_envs)
        self._padded = self._rows > env.num_envs
        self._put = lambda value: jax.device_put(value, self._sharding)
        self._all = self._put(np.ones(self._rows, dtype=bool))
        self._core = core
        self._carry: tuple | None = None  # the programs' carry (``Carry``: state buffers, counters), made at reset
        self._watch: jax.Array | None = None  # the device path: the latest record not read yet
        self._recorded = False  # the CPU path: a step's copied flag said a bad action was recorded
        self.programs = Programs(env, restarts=core.costly_reset and not device_path)
        self._split, self._join_carry = jax.jit(self.programs.carry.split), jax.jit(self.programs.carry.join)
        self._record = self._put(np.zeros(self.programs.record_size, dtype=np.int32))
        self._keys = self._env_keys(core.seeded)
        self.refresh()

    def refresh(self) -> None:
        env = self.env
        batches = {g: torch.Size((env.num_envs, len(m))) for g, m in env.group_map.items()}
        actions = env._action_keys
        programs = self.programs
        self._reset_tree = Tree(programs.reset_emission.keys, env.batch_size, env.device, batches)
        self._next_tree = Tree(programs.step_emission.keys, env.batch_size, env.device, batches)
        # "next" and the next root from one list: the step's buffers cut, then the actions
        self._root_tree = Tree(programs.kept + list(actions), env.batch_size, env.device, batches,
                               first=len(programs.step_emission.keys))
        # a step's next root from its own entries (the restarts on the host): the kept entries, then the actions
        self._step_root_tree = Tree(programs.kept + list(actions), env.batch_size, env.device, batches)
        step_keys = programs.step_emission.keys
        self._step_root_tree._reindex([step_keys.index(k) for k in programs.kept]
                                      + list(range(len(step_keys), len(step_keys) + len(actions))))
        limit = NO_LIMIT if env.max_steps is None else env.max_steps
        self._bounds = self._put(np.array([limit, env.num_envs], np.int32))  # the time limit, the envs
        self._check = env._deferred
        self._action_keys = list(env._action_keys)
        checked = [(c.key,) if isinstance(c.key, str) else tuple(c.key) for c in env._action_checks]
        order = [checked.index(key) for key in self._action_keys]  # the checked actions, in the core's order
        self._action_order = None if order == list(range(len(checked))) else order
        self._cut_step, self._cut_both = programs.step_layout.cut, programs.both_layout.cut
        self._flag_step, self._flag_both = programs.step_layout.flag, programs.both_layout.flag
        self._masked = bool(programs.masks) and self._check  # the masks go in only where the step checks them
        self._everything = torch.ones(programs.legal_width, dtype=torch.bool, device=env.device)
        self._after_step = env._after_step
        self._batch = B = env.num_envs
        # the padding rows' inputs: an action every check accepts (0 within each column's bounds), every choice legal,
        # never reset by a mask
        padding = self._rows - B
        pad = np.clip(np.zeros(len(programs.low), np.float32), programs.low, programs.high)[None].repeat(padding, 0)
        never = np.zeros(padding, dtype=bool)
        if self.device_path:  # as each path joins them: torch tensors on the env's device, else NumPy arrays
            pad, never = torch.from_numpy(pad).to(env.device), torch.from_numpy(never).to(env.device)
        self._pad_action, self._pad_mask = pad, never
        # A core whose reset costs a good part of a step (Brax), on the CPU path: the step, then the reset program
        # for the envs it ended, if any (the step's flag says so, read from its output in host memory: nothing
        # waits), so no fresh start is computed at the steps where no episode ended. While most recent steps end
        # one, the fused step, which computes them anyway (``_ending``: a decaying count of those steps). Both ways
        # give the same data to the last bit (check_env_specs: the fused step is exactly step then reset).
        self._restarts = programs.ended
        self._done_leaf = programs.step_emission.keys.index(("done",))
        self._ended, self._ending = False, 0.0
        self._labels = {name: f"{name}+check" if self._check else name for name in ("step", "step_reset")}
        self._fns: dict[str, Callable] = {}  # the compiled step programs of this check mode, by name

    def step_counts(self) -> torch.Tensor:
        steps = np.zeros(self._batch, np.int32) if self._carry is None else np.asarray(self.carried()[2])
        return torch.from_numpy(steps.astype(np.int64)).to(self.env.device)

    def carried(self) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
        """``(state buffers, keys, step counts)`` of the envs now (split from the carry, without the padding rows;
        for rendering and tests, not the step)."""
        if self._carry is None:
            raise RuntimeError("the env has no state yet: reset it first")
        buffers, keys, steps = self._split(self._carry)
        if self._padded:
            B = self._batch
            return tuple(b[:B] for b in buffers), keys[:B], steps[:B]
        return buffers, keys, steps

    def seed(self, seed: int) -> None:
        """Set the env keys of ``seed`` (``JaxCore.seed``: env i's keys do not depend on the batch), in the carry too
        once there is one."""
        self._core.seed(seed)
        self._keys = self._env_keys(seed)
        if self._carry is not None:
            buffers, _, steps = self._split(self._carry)
            self._carry = self._join_carry(buffers, self._keys, steps)

    def _env_keys(self, seed: int) -> jax.Array:
        """The keys of the programs' rows: the core's env keys, then the padding rows' (env i's keys do not depend
        on the batch)."""
        core = self._core
        return jax.device_put(env_keys(seed, self._rows), self._sharding) if self._padded else core._keys

    # -- the hand-off ---------------------------------------------------------------------------------
    def _action(self, actions: Sequence[torch.Tensor]):
        """The core's flat float32 action, with the padding rows' after the envs': by DLPack on the device path, else
        a NumPy view of each action (the cheaper hand-off on the CPU; cast and joined by NumPy)."""
        if self.device_path:
            parts = [a.detach().reshape(self._batch, -1) for a in actions]
            flat = (parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)).to(torch.float32)
            return self._io.to_jax(torch.cat([flat, self._pad_action]) if self._padded else flat)
        if len(actions) == 1:
            flat = _numpy(actions[0]).reshape(self._batch, -1).astype(np.float32, copy=False)
        else:
            flat = np.concatenate([_numpy(a).reshape(self._batch, -1) for a in actions], axis=1).astype(np.float32)
        return np.concatenate([flat, self._pad_action]) if self._padded else flat

    def _mask_rows(self, mask: torch.Tensor):
        """A reset mask of the envs as the programs take it: the padding rows never reset by it."""
        if self.device_path:
            return self._io.to_jax(torch.cat([mask, self._pad_mask]) if self._padded else mask)
        return np.concatenate([mask.numpy(), self._pad_mask]) if self._padded else mask.numpy()

    def _received(self, buffers: Sequence[jax.Array], flag: int | None = None, ended: bool = False
                  ) -> list[torch.Tensor]:
        """The output ``buffers`` as torch tensors, without a copy: ``Transfer.to_torch_all`` (DLPack on the device
        path, else NumPy views), written out on the CPU path, where the flag columns of buffer ``flag`` are read from
        the view made anyway: the last says whether the record holds a bad action (raised at the next call); with
        ``ended``, the one before it whether some env's episode ended (``_ended``)."""
        if self.device_path:
            tensors = self._io.to_torch_all(buffers)
            return [t[:self._batch] for t in tensors] if self._padded else tensors
        views = [np.asarray(b) for b in buffers]
        if flag is not None and views[flag][0, -1]:
            self._recorded = True
        if ended:
            self._ended = views[flag][0, -2]
        if self._padded:
            return [torch.from_numpy(v[:self._batch]) for v in views]
        return [torch.from_numpy(v) for v in views]

    def _start(self) -> tuple:
        """The carry, made from zeros (state and step counts) and the env keys before the first reset."""
        if self._carry is None:
            rows = self._rows
            steps = self._put(np.zeros(rows, np.int32))
            self._carry = self._join_carry(self._core.zero_state(rows), self._keys, steps)
        return self._carry

    def signature(self, name: str, struct: Callable | None = None) -> tuple[Callable, tuple]:
        """``(function, argument structs)`` of the program ``name`` (``struct(shape, dtype)`` makes the structs;
        default: on the env's device)."""
        core, programs = self._core, self.programs
        struct = struct or core._struct
        B = self._rows
        carry = (tuple(struct((B, w), np.dtype(d)) for w, d in zip(core.widths, core.dtypes)),
                 struct((B, 3), jnp.uint32))
        record = struct((programs.record_size,), jnp.int32)
        if name == "reset":
            return programs.reset, (carry, record, struct((B,), jnp.bool_))
        method, check = (programs.step if name == "step" else programs.step_reset), self._check
        args = (carry, record, struct((B, core.action_size), jnp.float32), struct((2,), jnp.int32))
        if programs.masks and check:  # the masks are read only by the check
            return (lambda c, r, a, lim, legal: method(c, r, a, lim, check, legal)), (
                *args, struct((B, programs.legal_width), jnp.bool_))
        return (lambda c, r, a, lim: method(c, r, a, lim, check)), args

    def _compiled(self, name: str):
        core = self._core
        label = self._labels.get(name, name)  # the reset has no check
        fn = core._compiled.get(label)
        if fn is not None:
            return fn
        fn, args = self.signature(name)
        return core.compiled(label, fn, lambda: args, (0,))

    def _poll(self) -> None:
        """Raise on a bad action the deferred check recorded, once the device has computed the record (the
        device path: the record watched; the CPU path: the latest record, which its flag said is set)."""
        if self._recorded:
            self._recorded = False
            found = read_ready(self._record)
        else:
            watch = self._watch
            if watch is None or not watch.is_ready():
                return
            self._watch = None
            found = read_ready(watch)
        if not found[0]:
            return
        cleared = np.zeros_like(found)
        cleared[5] = found[5]
        self._record = self._put(cleared)
        value = found[4:5].view(np.float32)[0]
        programs, column = self.programs, int(found[3])
        key, index = programs.action_names[column]
        spec = self.env.full_action_spec[key]
        from ..._core.validate import action_domain, forbidden_message

        if np.isfinite(value) and programs.low[column] <= value <= programs.high[column]:  # a choice its mask forbids
            mask = next(m for m in programs.masks if m.column <= column < m.column + m.width)
            words = found[6:].astype(np.int64)
            allowed = [i for i in range(mask.n) if words[i // _BITS] >> (i % _BITS) & 1]
            grouped = isinstance(key, tuple)
            raise ValueError(
                forbidden_message(key, int(found[2]), index if grouped else None,
                                  self.env.group_map.get(key[0], []) if grouped else [], int(value),
                                  mask.key[0] if len(mask.key) == 1 else mask.key, allowed)
                + f" At step {int(found[1])} (counted from the env's build), validate_actions='deferred' left that "
                f"env where it was and set its float outputs of that step to NaN; set "
                f"env.validate_actions='immediate' to raise before the step instead")
        raise ValueError(
            f"action {key!r} of env {int(found[2])} at step {int(found[1])} (counted from the env's build) was "
            f"{float(value)!r} (its entry {index} per env); expected {action_domain(spec)}. validate_actions='deferred' "
            f"left that env where it was and set its float outputs of that step to NaN; "
            f"set env.validate_actions='immediate' to raise before the step instead")

    # -- the executor ---------------------------------------------------------------------------------
    def reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        if self._recorded or self._watch is not None:
            self._poll()
        return self._reset(self._all if mask is None else self._mask_rows(mask))

    def _reset(self, mask) -> TensorDictBase:
        self._carry, self._record, buffers = self._compiled("reset")(self._start(), self._record, mask)
        return self._reset_tree(self.programs.reset_layout.cut(self._received(buffers)))

    def _legal(self, tensordict: TensorDictBase):
        """The action masks in ``tensordict``, flat and side by side (every choice legal where an env's data do
        not hold its mask)."""
        parts = []
        for m in self.programs.masks:
            mask = read_entry(tensordict, m.key)
            parts.append(self._everything[m.start:m.start + m.width * m.n].expand(self._batch, -1) if mask is None
                         else mask.reshape(self._batch, -1))
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        if self._padded:
            flat = torch.cat([flat, self._everything.expand(self._rows - self._batch, -1)])
        return self._io.to_jax(flat) if self.device_path else flat.numpy()

    def _run(self, name: str, actions: Sequence[torch.Tensor], flag: int | None,
             tensordict: TensorDictBase, ended: bool = False) -> list[torch.Tensor]:
        """Run the compiled ``step`` or ``step_reset`` on the actions (in the core's order) and the data's action
        masks; its output buffers, as torch tensors (``flag``: the buffer with the flag columns; ``ended``: read
        whether some episode ended)."""
        if self._recorded or self._watch is not None:
            self._poll()
        carry = self._carry
        if carry is None:
            raise RuntimeError("step() before reset(): reset the env first")
        fn = self._fns.get(name) or self._fns.setdefault(name, self._compiled(name))
        if self._masked:
            carry, record, buffers = fn(carry, self._record, self._action(actions), self._bounds,
                                        self._legal(tensordict))
        else:
            carry, record, buffers = fn(carry, self._record, self._action(actions), self._bounds)
        self._carry = carry
        self._record = record
        if self._check and self.device_path and self._watch is None:
            self._watch = record
            record.copy_to_host_async()  # its read, once computed (``_poll``), is then of host memory: no transfer
        if self._after_step is not None:
            self._after_step()
        return self._received(buffers, flag if self._check or ended else None, ended)

    def step(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]) -> TensorDictBase:
        if self._action_order is not None:
            actions = [actions[i] for i in self._action_order]
        return self._next_tree(self._cut_step(self._run("step", actions, self._flag_step, tensordict)))

    def step_and_reset(self, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        if self._action_order is not None:
            actions = [actions[i] for i in self._action_order]
        if self._restarts:
            self._ending *= _MEMORY
            if self._ending < _FUSED_ABOVE:
                leaves = self._cut_step(self._run("step", actions, self._flag_step, tensordict, ended=True))
                leaves += actions
                root = self._step_root_tree(leaves)
                if self._ended:
                    self._ending += 1.0
                    mask = leaves[self._done_leaf].reshape(-1)
                    root = merge_rows(root, self._reset(self._mask_rows(mask)), mask)
                return self._next_tree(leaves), root
        leaves = self._cut_both(self._run("step_reset", actions, self._flag_both, tensordict, ended=self._restarts))
        self._ending += self._ended  # stays 0 without restarts
        leaves += actions
        return self._next_tree(leaves), self._root_tree(leaves)
