"""The JAX families' executor: the torch side of their compiled programs (``_programs``).

``JaxExecutor`` is the executor ``JaxEnvBase`` sets when it is built: each reset and step is one compiled call and
one hand-off per dtype (DLPack on the device path, NumPy views on the CPU), the entries cut from the buffers as
views and built into TensorDicts unchecked (``Tree``); nothing is read back on the host (the deferred check's flag
is read only once the device has computed it). How ``step_and_maybe_reset`` resets is chosen once, when the env is
built, and declared (``auto_reset``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

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
from ._model import quiet_tracing
from ._programs import NO_LIMIT, ModelDescription, Programs, Record
from ._transfer import Transfer

__all__ = ["JaxExecutor", "JaxHooks", "read_computed"]

AutoReset = Literal["fused", "after_step"]


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
        description: the env's model and the layout of its vectors.
        facts: the env's description (``EnvBase``'s; it configures the executor again when they change).
        io: the device path's hand-offs (DLPack both ways).
        device_path: hand arrays over by DLPack both ways (a GPU; ``device_path=True`` on the CPU), else NumPy
            views in and out (the cheaper hand-off on the CPU).

    Attributes:
        auto_reset: how ``step_and_maybe_reset`` resets, chosen when the env is built: ``"fused"``, one program
            that steps and draws a fresh start for every env, kept where the episode ended (never waits);
            ``"after_step"``, for a model whose fresh start costs a good part of a step (Brax) on the CPU path: the
            step, then, where its flag (read from its output, already in host memory) says some episode ended,
            the reset program for those envs. Both give the same data to the last bit (``check_env_specs``).
    """

    deferred_checks = deferred_by_default = True  # on every device: one contract, and the cheaper check on a CPU too

    def __init__(self, description: ModelDescription, facts: EnvFacts, *, io: Transfer, device_path: bool):
        self.device_path = device_path
        self._io = io
        self._description = description
        self._action_specs = dict(zip(description.action_keys, description.action_specs))
        self._model = model = description.model
        self._put = lambda value: jax.device_put(value, model.sharding)
        self._all = self._put(np.ones(facts.num_envs, dtype=bool))
        self._carry: tuple | None = None  # the programs' carry (``Carry``: state buffers, counters), made at reset
        self._watch: jax.Array | None = None  # the device path: the latest record not read yet
        self._recorded = False  # the CPU path: a step's copied flag said a bad action was recorded
        self.auto_reset: AutoReset = "after_step" if model.costly_reset and not device_path else "fused"
        self.programs = Programs(description, facts, restarts=self.auto_reset == "after_step")
        self._split, self._join_carry = jax.jit(self.programs.carry.split), jax.jit(self.programs.carry.join)
        self._record = self._put(np.zeros(self.programs.record_size, dtype=np.int32))
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
        # a step's next root from its own entries (auto_reset "after_step"): the kept entries, then the actions
        self._step_root_tree = Tree(root_keys, batch, device, batches,
                                    at=[step_keys.index(k) for k in programs.kept]
                                    + list(range(len(step_keys), len(step_keys) + len(actions))))
        self._limit = self._put(np.int32(NO_LIMIT if facts.limit is None else facts.limit.max_steps))
        self._check = facts.deferred
        checked = [as_tuple(c.key) for c in facts.action_checks]
        order = [checked.index(key) for key in actions]  # the checked actions, in the model's order
        self._action_order = None if order == list(range(len(checked))) else order
        self._masked = bool(programs.masks) and self._check  # the masks go in only where the step checks them
        self._all_legal = torch.ones(programs.legal_width, dtype=torch.bool, device=device)
        self._batch = facts.num_envs
        self._done_leaf = step_keys.index(("done",))
        self._labels = {name: f"{name}+check" if self._check else name for name in ("step", "step_reset")}
        self._fns: dict[str, Callable] = {}  # the compiled programs of this check mode, by name

    def step_counts(self) -> torch.Tensor:
        steps = np.zeros(self._batch, np.int32) if self._carry is None else np.asarray(self.carried()[2])
        return torch.from_numpy(steps.astype(np.int64)).to(self.facts.device)

    def carried(self) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
        """``(state buffers, keys, step counts)`` of the envs now (split from the carry; for rendering and tests)."""
        if self._carry is None:
            raise RuntimeError("the env has no state yet: reset it first")
        return self._split(self._carry)

    def seed(self, seed: int) -> None:
        """Set the env keys of ``seed`` (``JaxModel.seed``: env i's keys do not depend on the batch), in the carry
        too once there is one."""
        self._model.seed(seed)
        if self._carry is not None:
            buffers, _, steps = self._split(self._carry)
            self._carry = self._join_carry(buffers, self._model.keys, steps)

    # -- the hand-off ---------------------------------------------------------------------------------
    def _action(self, actions: Sequence[torch.Tensor]):
        """The model's flat float32 action: by DLPack on the device path, else a NumPy view of each action (the
        cheaper hand-off on the CPU; cast and joined by NumPy)."""
        if self.device_path:
            parts = [a.detach().reshape(self._batch, -1) for a in actions]
            return self._io.to_jax((parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)).to(torch.float32))
        if len(actions) == 1:
            return _numpy(actions[0]).reshape(self._batch, -1).astype(np.float32, copy=False)
        return np.concatenate([_numpy(a).reshape(self._batch, -1) for a in actions], axis=1).astype(np.float32)

    def _received(self, buffers: Sequence[jax.Array], flag: int | None = None) -> tuple[list[torch.Tensor], bool]:
        """The output ``buffers`` as torch tensors, without a copy (DLPack on the device path, else NumPy views),
        and whether some env's episode ended (``auto_reset`` "after_step": the flag column before the last of
        buffer ``flag``, read from the view made anyway on the CPU path). The last flag column says whether the record
        holds a bad action (raised at the next call)."""
        if self.device_path:
            return self._io.to_torch_all(buffers), False
        views = [np.asarray(b) for b in buffers]
        ended = False
        if flag is not None:
            self._recorded = self._recorded or bool(views[flag][0, -1])
            ended = self.programs.ended and bool(views[flag][0, -2])
        return [torch.from_numpy(v) for v in views], ended

    def _start(self) -> tuple:
        """The carry, made from zeros (state and step counts) and the env keys before the first reset."""
        if self._carry is None:
            steps = self._put(np.zeros(self._batch, np.int32))
            self._carry = self._join_carry(self._model.zero_state(), self._model.keys, steps)
        return self._carry

    def signature(self, name: str, struct: Callable | None = None) -> tuple[Callable, tuple]:
        """``(function, argument structs)`` of the program ``name`` (``struct(shape, dtype)`` makes the structs;
        default: on the env's device)."""
        model, programs = self._model, self.programs
        struct = struct or model.struct
        B = self._batch
        carry = (tuple(struct((B, w), np.dtype(d)) for w, d in zip(model.widths, model.dtypes)),
                 struct((B, 3), jnp.uint32))
        record = struct((programs.record_size,), jnp.int32)
        if name == "reset":
            return programs.reset, (carry, record, struct((B,), jnp.bool_))
        method, check = (programs.step if name == "step" else programs.step_reset), self._check
        args = (carry, record, struct((B, model.action_size), jnp.float32), struct((), jnp.int32))
        if programs.masks and check:  # the masks are read only by the check
            return (lambda c, r, a, lim, legal: method(c, r, a, lim, check, legal)), (
                *args, struct((B, programs.legal_width), jnp.bool_))
        return (lambda c, r, a, lim: method(c, r, a, lim, check)), args

    def _compiled(self, name: str):
        fn = self._fns.get(name)
        if fn is None:
            program, args = self.signature(name)
            label = self._labels.get(name, name)  # the reset has no check
            fn = self._fns[name] = self._model.compiled(label, program, lambda: args, (0,))
        return fn

    def export(self, name: str, platform: str) -> Any:
        """The program ``name`` as this executor runs it, traced as a ``jax.export.Exported`` for ``platform``
        (``JaxEnvBase.export_program``)."""
        model = self._model
        exported, model.exported = model.exported, {}
        try:
            fn, args = self.signature(name, struct=lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype))
            with quiet_tracing():
                return jax.export.export(jax.jit(fn), platforms=[platform])(*args)
        finally:
            model.exported = exported

    def _poll(self) -> None:
        """Raise on a bad action the deferred check recorded, once the device has computed the record (the
        device path: the record watched; the CPU path: the latest record, which its flag said is set)."""
        if self._recorded:
            self._recorded = False
            record = read_computed(self._record)
        else:
            watch = self._watch
            if watch is None or not watch.is_ready():
                return
            self._watch = None
            record = read_computed(watch)
        if not record[Record.SET]:
            return
        cleared = np.zeros_like(record)
        cleared[Record.STEPS] = record[Record.STEPS]
        self._record = self._put(cleared)
        programs = self.programs
        env, step, column = int(record[Record.ENV]), int(record[Record.STEP]), int(record[Record.COLUMN])
        value = float(record[Record.VALUE:Record.VALUE + 1].view(np.float32)[0])
        key, index = programs.action_names[column]
        after = (f"validate_actions='deferred' left that env where it was and set its float outputs of that step to "
                 f"NaN; set env.validate_actions='immediate' to raise before the step instead")
        if np.isfinite(value) and programs.low[column] <= value <= programs.high[column]:  # a choice its mask forbids
            mask = next(m for m in programs.masks if m.column <= column < m.column + m.width)
            allowed = [i for i in range(mask.n) if record[Record.LEGAL + i]]
            grouped = isinstance(key, tuple)
            raise ValueError(
                forbidden_message(key, env, index if grouped else None,
                                  self.facts.group_map.get(key[0], ()) if grouped else (), int(value),
                                  mask.key[0] if len(mask.key) == 1 else mask.key, allowed)
                + f" At step {step} (counted from the env's build), {after}")
        raise ValueError(f"action {key!r} of env {env} at step {step} (counted from the env's build) was {value!r} "
                         f"(its entry {index} per env); expected {action_domain(self._action_specs[as_tuple(key)])}. "
                         f"{after}")

    # -- the executor ---------------------------------------------------------------------------------
    def reset(self, hooks: BackendHooks, mask: torch.Tensor | None) -> TensorDictBase:
        if self._recorded or self._watch is not None:
            self._poll()
        return self._reset(self._all if mask is None else self._mask(mask))

    def _mask(self, mask: torch.Tensor):
        return self._io.to_jax(mask) if self.device_path else mask.numpy()

    def _reset(self, mask) -> TensorDictBase:
        self._carry, self._record, buffers = self._compiled("reset")(self._start(), self._record, mask)
        return self._reset_tree(self.programs.reset_layout.cut(self._received(buffers)[0]))

    def _legal(self, tensordict: TensorDictBase):
        """The action masks in ``tensordict``, flat and side by side (every choice legal where an env's data do
        not hold its mask)."""
        parts = []
        for m in self.programs.masks:
            mask = read_entry(tensordict, m.key)
            parts.append(self._all_legal[m.start:m.start + m.width * m.n].expand(self._batch, -1) if mask is None
                         else mask.reshape(self._batch, -1))
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return self._io.to_jax(flat) if self.device_path else flat.numpy()

    def _run(self, hooks: JaxHooks, name: str, actions: Sequence[torch.Tensor], tensordict: TensorDictBase
             ) -> tuple[list[torch.Tensor], bool]:
        """Run the compiled ``step`` or ``step_reset`` on the actions and the data's action masks: its entries, as
        torch views, and whether some episode ended (``_received``)."""
        if self._recorded or self._watch is not None:
            self._poll()
        if self._action_order is not None:
            actions = [actions[i] for i in self._action_order]
        fn = self._fns.get(name) or self._compiled(name)
        inputs = (self._carry, self._record, self._action(actions), self._limit)
        if self._masked:
            inputs += (self._legal(tensordict),)
        self._carry, record, buffers = fn(*inputs)
        self._record = record
        if self._check and self.device_path and self._watch is None:
            self._watch = record
            record.copy_to_host_async()  # its read, once computed (``_poll``), is then of host memory: no transfer
        if hooks._after_step is not None:
            hooks._after_step()
        layout = self.programs.step_layout if name == "step" else self.programs.both_layout
        tensors, ended = self._received(buffers, layout.flag if self._check or self.programs.ended else None)
        return layout.cut(tensors), ended

    def step(self, hooks: JaxHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]) -> TensorDictBase:
        return self._next_tree(self._run(hooks, "step", actions, tensordict)[0])

    def step_and_reset(self, hooks: JaxHooks, tensordict: TensorDictBase, actions: Sequence[torch.Tensor]
                       ) -> tuple[TensorDictBase, TensorDictBase]:
        if self.auto_reset == "after_step":
            leaves, ended = self._run(hooks, "step", actions, tensordict)
            leaves += actions
            root = self._step_root_tree(leaves)
            if ended:
                mask = leaves[self._done_leaf].reshape(-1)
                root = merge_rows(root, self._reset(self._mask(mask)), mask)
            return self._next_tree(leaves), root
        leaves = self._run(hooks, "step_reset", actions, tensordict)[0] + list(actions)
        return self._next_tree(leaves), self._root_tree(leaves)
