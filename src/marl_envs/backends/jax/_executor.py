"""The JAX families' executor: the torch side of their compiled programs (``_programs``).

``JaxExecutor`` is the executor ``JaxEnvBase`` sets when it is built: each reset and step is one compiled call and
one hand-off per dtype (DLPack on the device path, NumPy views on the CPU), the entries cut from the buffers as
views and built into TensorDicts unchecked (``Tree``); nothing is read back on the host (the deferred check's flag
is read only once the device has computed it). The programs are compiled for ``compiled_rows`` envs: the rows past
``num_envs`` are padding, stepped with a valid action and never read. A core whose fresh starts are costly (Brax)
on the CPU path runs ``step``, then the reset program only at steps where an episode ended (its outputs are in
host memory there: nothing waits).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDictBase

from ..._core.executor import BackendHooks, EnvFacts, Executor
from ..._core.leaf_specs import as_tuple
from ..._core.rules import merge_rows
from ..._core.tensordicts import Tree, read_entry
from ..._core.actions import action_domain, forbidden_message
from ._core import compiled_rows, env_keys, quiet_tracing
from ._programs import BITS, NO_LIMIT, CoreDescription, Programs
from ._runtime import EXACT_BATCH_VAR, env_flag
from ._transfer import Transfer

__all__ = ["JaxExecutor", "JaxHooks", "read_computed"]

# The restarts on the host (a Brax env on the CPU path): a step that ended some episode counts 1, and _MEMORY times
# less each step after; the fused step runs while the count of recent ones is above _FUSED_ABOVE (of at most
# 1 / (1 - _MEMORY) = 8: about 3 steps in 4, where a reset program's call a step costs what the fused step's fresh
# starts cost)
_MEMORY, _FUSED_ABOVE = 0.875, 6.0


class JaxHooks(BackendHooks, Protocol):
    """The hook a JAX-family env gives its executor: ``BackendHooks`` and what runs after each step."""

    _after_step: Callable[[], None] | None  # Brax: its cache_clear_frequency


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return (tensor.detach() if tensor.requires_grad else tensor).numpy()


def read_computed(array: jax.Array) -> np.ndarray:
    """The host value of ``array``, which the caller has seen computed (``is_ready()``): a read that never waits."""
    return np.asarray(array)


class JaxExecutor(Executor):
    """The executor of a JAX-family env (see the module docstring).

    Args:
        description: the env's core and the layout of its vectors.
        facts: the env's description (``EnvBase``'s; it configures the executor again when they change).
        io: the device path's hand-offs (DLPack both ways).
        device_path: hand arrays over by DLPack both ways (a GPU; ``MARL_ENVS_DEVICE_PATH=1`` on the CPU), else
            NumPy views in and one NumPy copy out (the cheaper hand-off on the CPU).
    """

    deferred_checks = deferred_by_default = True  # on every device: one contract, and the cheaper check on a CPU too

    def __init__(self, description: CoreDescription, facts: EnvFacts, *, io: Transfer, device_path: bool):
        self.device_path = device_path
        self._io = io
        self._description = description
        self._action_specs = dict(zip(description.action_keys, description.action_specs))
        self._device = facts.device
        core = description.core
        self._sharding = core.sharding
        # the programs' batch (``compiled_rows``): the env's rows, then padding rows stepped with a valid action and
        # never read (so a new num_envs of the same size compiles nothing); MARL_ENVS_EXACT_BATCH=1: the env's own
        self._rows = facts.num_envs if env_flag(EXACT_BATCH_VAR, "0") else compiled_rows(facts.num_envs)
        self._padded = self._rows > facts.num_envs
        self._put = lambda value: jax.device_put(value, self._sharding)
        self._all = self._put(np.ones(self._rows, dtype=bool))
        self._core = core
        self._carry: tuple | None = None  # the programs' carry (``Carry``: state buffers, counters), made at reset
        self._watch: jax.Array | None = None  # the device path: the latest record not read yet
        self._recorded = False  # the CPU path: a step's copied flag said a bad action was recorded
        self.programs = Programs(description, facts, restarts=core.costly_reset and not device_path)
        self._split, self._join_carry = jax.jit(self.programs.carry.split), jax.jit(self.programs.carry.join)
        self._record = self._put(np.zeros(self.programs.record_size, dtype=np.int32))
        self._keys = self._env_keys(core.seeded)
        self.configure(facts)

    def configure(self, facts: EnvFacts) -> None:
        super().configure(facts)
        batch, device = facts.batch_size, facts.device
        batches = {g: torch.Size((facts.num_envs, len(m))) for g, m in facts.group_map.items()}
        actions = self._description.action_keys
        programs = self.programs
        self._reset_tree = Tree(programs.reset_entries.keys, batch, device, batches)
        self._next_tree = Tree(programs.step_entries.keys, batch, device, batches)
        # "next" and the next root from one list: the step's buffers cut, then the actions
        root_keys, step_keys = programs.kept + list(actions), programs.step_entries.keys
        self._root_tree = Tree(root_keys, batch, device, batches,
                               at=range(len(step_keys), len(step_keys) + len(root_keys)))
        # a step's next root from its own entries (the restarts on the host): the kept entries, then the actions
        self._step_root_tree = Tree(root_keys, batch, device, batches,
                                    at=[step_keys.index(k) for k in programs.kept]
                                    + list(range(len(step_keys), len(step_keys) + len(actions))))
        limit = NO_LIMIT if facts.limit is None else facts.limit.max_steps
        self._bounds = self._put(np.array([limit, facts.num_envs], np.int32))  # the time limit, the envs
        self._check = facts.deferred
        self._action_keys = list(actions)
        checked = [as_tuple(c.key) for c in facts.action_checks]
        order = [checked.index(key) for key in self._action_keys]  # the checked actions, in the core's order
        self._action_order = None if order == list(range(len(checked))) else order
        self._cut_step, self._cut_both = programs.step_layout.cut, programs.both_layout.cut
        self._flag_step, self._flag_both = programs.step_layout.flag, programs.both_layout.flag
        self._masked = bool(programs.masks) and self._check  # the masks go in only where the step checks them
        self._all_legal = torch.ones(programs.legal_width, dtype=torch.bool, device=device)
        self._batch = B = facts.num_envs
        # the padding rows' inputs: an action every check accepts (0 within each column's bounds), every choice legal,
        # never reset by a mask
        padding = self._rows - B
        pad = np.clip(np.zeros(len(programs.low), np.float32), programs.low, programs.high)[None].repeat(padding, 0)
        never = np.zeros(padding, dtype=bool)
        if self.device_path:  # as each path joins them: torch tensors on the env's device, else NumPy arrays
            pad, never = torch.from_numpy(pad).to(device), torch.from_numpy(never).to(device)
        self._pad_action, self._pad_mask = pad, never
        # A core whose reset costs a good part of a step (Brax), on the CPU path: the step, then the reset program
        # for the envs it ended, if any (the step's flag says so, read from its output in host memory: nothing
        # waits), so no fresh start is computed at the steps where no episode ended. While most recent steps end
        # one, the fused step, which computes them anyway (``_ending``: a decaying count of those steps). Both ways
        # give the same data to the last bit (check_env_specs: the fused step is exactly step then reset).
        self._restarts = programs.ended
        self._done_leaf = programs.step_entries.keys.index(("done",))
        self._ended, self._ending = False, 0.0
        self._labels = {name: f"{name}+check" if self._check else name for name in ("step", "step_reset")}
        self._fns: dict[str, Callable] = {}  # the compiled programs of this check mode, by name

    def step_counts(self) -> torch.Tensor:
        steps = np.zeros(self._batch, np.int32) if self._carry is None else np.asarray(self.carried()[2])
        return torch.from_numpy(steps.astype(np.int64)).to(self._device)

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
        self._description.core.seed(seed)
        self._keys = self._env_keys(seed)
        if self._carry is not None:
            buffers, _, steps = self._split(self._carry)
            self._carry = self._join_carry(buffers, self._keys, steps)

    def _env_keys(self, seed: int) -> jax.Array:
        """The keys of the programs' rows: the core's env keys, then the padding rows' (env i's keys do not depend
        on the batch)."""
        core = self._description.core
        return jax.device_put(env_keys(seed, self._rows), self._sharding) if self._padded else core.keys

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
            self._carry = self._join_carry(self._description.core.zero_state(rows), self._keys, steps)
        return self._carry

    def signature(self, name: str, struct: Callable | None = None) -> tuple[Callable, tuple]:
        """``(function, argument structs)`` of the program ``name`` (``struct(shape, dtype)`` makes the structs;
        default: on the env's device)."""
        core, programs = self._description.core, self.programs
        struct = struct or core.struct
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
        fn = self._fns.get(name)
        if fn is None:
            program, args = self.signature(name)
            label = self._labels.get(name, name)  # the reset has no check
            fn = self._fns[name] = self._description.core.compiled(label, program, lambda: args, (0,))
        return fn

    def export(self, name: str, platform: str) -> Any:
        """The program ``name`` as this executor runs it, traced as a ``jax.export.Exported`` for ``platform``
        (``JaxEnvBase.export_program``)."""
        core = self._description.core
        exported, core.exported = core.exported, {}
        try:
            fn, args = self.signature(name, struct=lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype))
            with quiet_tracing():
                return jax.export.export(jax.jit(fn), platforms=[platform])(*args)
        finally:
            core.exported = exported

    def _poll(self) -> None:
        """Raise on a bad action the deferred check recorded, once the device has computed the record (the
        device path: the record watched; the CPU path: the latest record, which its flag said is set)."""
        if self._recorded:
            self._recorded = False
            found = read_computed(self._record)
        else:
            watch = self._watch
            if watch is None or not watch.is_ready():
                return
            self._watch = None
            found = read_computed(watch)
        if not found[0]:
            return
        cleared = np.zeros_like(found)
        cleared[5] = found[5]
        self._record = self._put(cleared)
        value = found[4:5].view(np.float32)[0]
        programs, column = self.programs, int(found[3])
        key, index = programs.action_names[column]
        spec = self._action_specs[as_tuple(key)]

        if np.isfinite(value) and programs.low[column] <= value <= programs.high[column]:  # a choice its mask forbids
            mask = next(m for m in programs.masks if m.column <= column < m.column + m.width)
            words = found[6:].astype(np.int64)
            allowed = [i for i in range(mask.n) if words[i // BITS] >> (i % BITS) & 1]
            grouped = isinstance(key, tuple)
            raise ValueError(
                forbidden_message(key, int(found[2]), index if grouped else None,
                                  self.facts.group_map.get(key[0], ()) if grouped else (), int(value),
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
    def reset(self, hooks: BackendHooks, mask: torch.Tensor | None) -> TensorDictBase:
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
            parts.append(self._all_legal[m.start:m.start + m.width * m.n].expand(self._batch, -1) if mask is None
                         else mask.reshape(self._batch, -1))
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        if self._padded:
            flat = torch.cat([flat, self._all_legal.expand(self._rows - self._batch, -1)])
        return self._io.to_jax(flat) if self.device_path else flat.numpy()

    def _run(self, hooks: JaxHooks, name: str, actions: Sequence[torch.Tensor], flag: int | None,
             tensordict: TensorDictBase, ended: bool = False) -> list[torch.Tensor]:
        """Run the compiled ``step`` or ``step_reset`` on the actions (in the core's order) and the data's action
        masks; its output buffers, as torch tensors (``flag``: the buffer with the flag columns; ``ended``: read
        whether some episode ended)."""
        if self._recorded or self._watch is not None:
            self._poll()
        carry = self._carry
        if carry is None:
            raise RuntimeError("step() before reset(): reset the env first")
        fn = self._fns.get(name) or self._compiled(name)
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
        if hooks._after_step is not None:
            hooks._after_step()
        return self._received(buffers, flag if self._check or ended else None, ended)

    def step(self, hooks: JaxHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]) -> TensorDictBase:
        if self._action_order is not None:
            actions = [actions[i] for i in self._action_order]
        return self._next_tree(self._cut_step(self._run(hooks, "step", actions, self._flag_step, tensordict)))

    def step_and_reset(self, hooks: JaxHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        if self._action_order is not None:
            actions = [actions[i] for i in self._action_order]
        if self._restarts:
            self._ending *= _MEMORY
            if self._ending < _FUSED_ABOVE:
                leaves = self._cut_step(self._run(hooks, "step", actions, self._flag_step, tensordict, ended=True))
                leaves += actions
                root = self._step_root_tree(leaves)
                if self._ended:
                    self._ending += 1.0
                    mask = leaves[self._done_leaf].reshape(-1)
                    root = merge_rows(root, self._reset(self._mask_rows(mask)), mask)
                return self._next_tree(leaves), root
        leaves = self._cut_both(self._run(hooks, "step_reset", actions, self._flag_both, tensordict,
                                          ended=self._restarts))
        self._ending += self._ended  # stays 0 without restarts
        leaves += actions
        return self._next_tree(leaves), self._root_tree(leaves)
