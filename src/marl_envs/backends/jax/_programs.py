"""The compiled programs of a JAX-family env: a reset or a step of every env, with its outputs, as one pure JAX
function over the float32 vectors the model lays its named outputs in (``ModelLayout``).

- ``VectorEntries``: one output's entries from the vectors (float and integer columns cast, bool columns compared to
  0.5, the done entries of every level by the env's ``DonePlan``, the time limit by ``TimeLimit``: the rules
  ``EnvBase``'s executor runs too). ``jax_functions()`` makes its data with it.
- ``Programs``: the compiled reset, step and step-with-auto-reset, each output packed by a ``Layout``. Each env's
  step count lives in JAX beside the state, the time limit is a device scalar; the auto-reset draws a fresh start for
  every env and selects it where the episode ended (no conditional: on a GPU its predicate is read on the host).
  With ``validate_actions="deferred"`` the step checks the actions itself (``Record``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..._core.executor import EnvFacts
from ..._core.leaf_specs import (
    Binary, Categorical, MultiCategorical, OneHot, TensorSpec, as_tuple, legal_choices,
)
from ..._core.rules import DonePlan, TimeLimit, where_rows
from ..._core.actions import ActionCheck
from ._packing import Carry, Layout, numpy_dtype

__all__ = ["NO_LIMIT", "ModelDescription", "Programs", "Record", "RowList", "VectorEntries"]

Key = tuple[str, ...]
Column = tuple[Key, slice, tuple[int, ...], Any]  # (key, columns of the model's vector, batched shape, torch dtype)
NO_LIMIT = np.iinfo(np.int32).max  # the time limit of an env without max_steps: never reached


@dataclass(frozen=True)
class ModelDescription:
    """What a JAX-family env hands its programs and executor besides its ``EnvFacts``: its model and the layout of
    the model's vectors (``JaxEnvBase._set_model``).

    Attributes:
        model: the env's ``JaxModel``.
        reset_columns, step_columns: ``(key, columns, batched shape, torch dtype)`` of each entry of a reset's and
            a step's vector.
        action_keys: the action keys in the order the model's flat action holds them.
        action_specs: their specs, in that order.
    """

    model: Any
    reset_columns: tuple[Column, ...]
    step_columns: tuple[Column, ...]
    action_keys: tuple[Key, ...]
    action_specs: tuple[TensorSpec, ...]


class VectorEntries:
    """One output's entries from the envs' float vectors, in JAX (see the module docstring).

    Args:
        columns: the output's columns of the model's vector.
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
                self._sources.append((False, (cols, numpy_dtype(dtype))))
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

    def entry_specs(self, keep: Callable[[Key], bool] = lambda key: True
                    ) -> list[tuple[Key, tuple[int, ...], torch.dtype]]:
        """``(key, shape, dtype)`` of the entries ``keep`` selects, in order."""
        return [(k, s, d) for k, s, d in zip(self.keys, self.shapes, self.dtypes) if keep(k)]

    def __call__(self, vector: jax.Array, reached: jax.Array | None = None) -> dict[Key, jax.Array]:
        """The entries (key -> ``(B, ...)`` value) of the envs' vectors ``vector`` ``(B, K)``; ``reached``
        ``(B,)``: whether each env is at its time limit (a step's).

        The plan runs on a block held as a list of ``(B,)`` rows: slices and stacks, which XLA fuses, where
        writes into one array would be scatters (slow on a CPU)."""
        B = vector.shape[0]
        compared = [vector[:, c] > 0.5 for c in self._compared]
        rows = RowList(compared + [None] * (self.done.width - len(compared)), B)
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


class RowList:
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


def _action_bounds(description: ModelDescription) -> tuple[np.ndarray, np.ndarray, list[tuple[Any, int]]]:
    """Per column of the model's flat action: the lowest and highest valid value (discrete actions; +-inf for
    continuous ones, checked for finiteness only) and ``(action key, index in the entry)``."""
    low, high, names = [], [], []
    for key, spec in zip(description.action_keys, description.action_specs):
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
    """An action's mask among the programs' inputs: its columns of the model's flat action (one per agent), its
    choices, and where its ``(B, width * n)`` bools start in the flat ``legal`` input."""

    column: int
    width: int
    n: int
    start: int
    key: Key


def _action_masks(description: ModelDescription, checks: Sequence[ActionCheck]) -> list[_Mask]:
    """The masks of the env's masked actions (``action_checks``' ``legal``), in the model's action order."""
    legal = {as_tuple(c.key): c.legal for c in checks}
    masks, column, start = [], 0, 0
    for key, spec in zip(description.action_keys, description.action_specs):
        width = int(np.prod(spec.shape[1:]))
        mask = legal.get(key) if isinstance(spec, Categorical) else None  # (a one-hot action: checked immediately)
        if mask is not None:
            masks.append(_Mask(column, width, spec.n, start, as_tuple(mask)))
            start += width * spec.n
        column += width
    return masks


class Record(IntEnum):
    """The fields of the deferred check's record, an int32 array the programs carry: the first bad action (``SET``:
    1 once one is recorded; the ``STEP`` it was taken at, counted from the env's build; its ``ENV``, its ``COLUMN``
    in the flat action, its ``VALUE``'s float32 bits), the ``STEPS`` taken so far, then from ``LEGAL`` on, one int32
    per choice, 1 where the action's mask allowed it (an env with action masks). One array: every array a compiled
    call takes is one more to dispatch."""

    SET = 0
    STEP = 1
    ENV = 2
    COLUMN = 3
    VALUE = 4
    STEPS = 5
    LEGAL = 6


class Programs:
    """The compiled reset, step and step-with-auto-reset of a JAX-family env (see the module docstring).

    Each takes the carry (``Carry``, donated): the model's packed state buffers, and the per-env keys and each env's
    steps since its reset in one array; and the record (``Record``; not donated: the host may still read an earlier
    one). A step of an env with action masks also takes ``legal``: each mask's bools, side by side (a choice a mask
    forbids is a bad action). Each returns the new carry and record, and its output buffers.
    """

    def __init__(self, description: ModelDescription, facts: EnvFacts, *, restarts: bool = False):
        self.model = description.model
        levels = facts.done_levels
        self.reset_entries = VectorEntries(description.reset_columns, levels, step=False)
        self.step_entries = VectorEntries(description.step_columns, levels, step=True)
        rewards = {as_tuple(k) for k in facts.keys["reward"]}
        self.kept = [k for k in self.step_entries.keys if k not in rewards]  # the next root data's entries
        reset_keys = set(self.reset_entries.keys)
        self._fresh = [k in reset_keys for k in self.kept]  # kept entries a reset gives (else the step's stay)
        next_entries = self.step_entries.entry_specs()
        root_entries = self.step_entries.entry_specs(lambda k: k not in rewards)
        self.reset_layout = Layout(self.reset_entries.entry_specs())
        # ``restarts``: the executor restarts ended envs after the step (``JaxExecutor.auto_reset``), reading
        # whether any ended from one more flag column of the step's outputs
        self.ended = restarts
        self.step_layout = Layout(next_entries, flags=2 if self.ended else 1)
        self.both_layout = Layout(next_entries + root_entries, flags=2 if self.ended else 1)  # "next", next root
        self.low, self.high, self.action_names = _action_bounds(description)
        self.masks = _action_masks(description, facts.action_checks)
        self.legal_width = sum(m.width * m.n for m in self.masks)
        self.record_size = Record.LEGAL + max((m.n for m in self.masks), default=0)
        self.carry = Carry()

    # -- the rules, in JAX (``jax_functions()`` runs them too) ----------------------------------------------------
    def stepped_entries(self, out: jax.Array, steps: jax.Array, limit: jax.Array) -> dict[Key, jax.Array]:
        """A step's entries from the envs' vectors ``out``, their step counts ``steps`` after it and the time limit."""
        return self.step_entries(out, TimeLimit(limit).reached(steps))

    def next_root(self, entries: Mapping[Key, jax.Array], fresh: Mapping[Key, jax.Array], done: jax.Array
                  ) -> list[jax.Array]:
        """The next root's entries (``kept``), from a step's ``entries`` and a reset's ``fresh`` ones, taken where
        ``done`` ``(B,)`` is set."""
        return [where_rows(done, fresh[key], entries[key]) if given else entries[key]
                for key, given in zip(self.kept, self._fresh)]

    # -- pieces ---------------------------------------------------------------------------------------
    def _primitive(self, name: str) -> Callable:
        """The model's batched ``step`` or ``reset`` (its exported module when it was loaded from one)."""
        model = self.model
        name = f"batched_{name}"
        if name in model.exported:
            return model.exported[name].call
        return model.batch_step_packed if name == "batched_step" else model.batch_reset

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

    def _legal_row(self, legal, env, column):
        """The legal choices of action ``column`` of ``env``, one int32 each (zeros if unmasked)."""
        row = jnp.zeros(self.record_size - Record.LEGAL, jnp.int32)
        for m in self.masks:
            inside = (column >= m.column) & (column < m.column + m.width)
            offset = m.start + jnp.clip(column - m.column, 0, m.width - 1) * m.n
            choices = jax.lax.dynamic_slice(legal[env], (offset,), (m.n,)).astype(jnp.int32)
            row = jnp.where(inside, row.at[:m.n].set(choices), row)
        return row

    def _stepped(self, carry, record, action, limit, check: bool, legal=None):
        """The step of every env and its entries (with ``check``, the bad envs left as they were)."""
        buffers, keys, steps = self.carry.split(carry)
        new_buffers, new_keys, out = self._primitive("step")(buffers, keys, action)
        new_steps = steps + 1
        entries = self.stepped_entries(out, new_steps, limit)
        if check:
            bad_columns = ~jnp.isfinite(action) | (action < self.low) | (action > self.high)
            if self.masks:
                bad_columns = bad_columns | self._forbidden(action, legal)
            bad = bad_columns.any(axis=1)
            keep = lambda good, bad_value: jnp.where(  # noqa: E731
                bad.reshape(-1, *([1] * (good.ndim - 1))), bad_value, good)
            new_buffers = tuple(keep(n, o) for n, o in zip(new_buffers, buffers))
            new_keys, new_steps = keep(new_keys, keys), keep(new_steps, steps)
            # the bad envs' outputs: NaN floats, False (zero) elsewhere: nothing that reads as data
            entries = {k: keep(v, jnp.full_like(v, jnp.nan) if v.dtype == jnp.float32 else jnp.zeros_like(v))
                       for k, v in entries.items()}
            env = jnp.argmax(bad)
            column = jnp.argmax(bad_columns[env])
            found = [jnp.int32(1), record[Record.STEPS], env.astype(jnp.int32), column.astype(jnp.int32),
                     jax.lax.bitcast_convert_type(action[env, column], jnp.int32), record[Record.STEPS]]
            found = jnp.stack(found)  # in ``Record``'s order
            if self.masks:
                found = jnp.concatenate([found, self._legal_row(legal, env, column)])
            record = jnp.where(bad.any() & (record[Record.SET] == 0), found, record)
        return (new_buffers, new_keys, new_steps), record.at[Record.STEPS].add(1), entries

    # -- the compiled programs ------------------------------------------------------------------------
    def reset(self, carry, record, mask):
        buffers, keys, steps = self.carry.split(carry)
        buffers, keys, out = self._primitive("reset")(buffers, keys, mask)
        values = self.reset_entries(out)
        steps = jnp.where(mask, 0, steps)
        return self.carry.join(buffers, keys, steps), record, self.reset_layout.pack([
            values[k] for k in self.reset_entries.keys])

    def step(self, carry, record, action, limit, check: bool = False, legal=None):
        (buffers, keys, steps), record, entries = self._stepped(carry, record, action, limit, check, legal)
        return self.carry.join(buffers, keys, steps), record, self.step_layout.pack(
            [entries[k] for k in self.step_entries.keys], *self._flags(entries, record))

    def _flags(self, entries, record) -> tuple[jax.Array, ...]:
        """A step's flag columns: whether some env's episode ended (a model that reads it), a bad action recorded."""
        recorded = record[Record.SET] != 0
        return (entries[("done",)].any(), recorded) if self.ended else (recorded,)

    def step_reset(self, carry, record, action, limit, check: bool = False, legal=None):
        """The step, then a fresh start for every env, kept where the step ended the episode."""
        (buffers, keys, steps), record, entries = self._stepped(carry, record, action, limit, check, legal)
        done = entries[("done",)].reshape(-1)
        if self.model.resets_when_needed:  # one conditional: on a GPU, one wait for its predicate a step
            def skip(buffers, keys):
                return buffers, keys, jnp.zeros(shape.shape, shape.dtype)

            shape = jax.eval_shape(self._primitive("reset"), buffers, keys, done)[2]
            buffers, keys, out = jax.lax.cond(
                done.any(), lambda b, k: self._primitive("reset")(b, k, done), skip, buffers, keys)
        else:
            buffers, keys, out = self._primitive("reset")(buffers, keys, done)
        root = self.next_root(entries, self.reset_entries(out), done)
        steps = jnp.where(done, 0, steps)
        values = [entries[k] for k in self.step_entries.keys] + root
        return self.carry.join(buffers, keys, steps), record, self.both_layout.pack(
            values, *self._flags(entries, record))
