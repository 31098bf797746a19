"""The torch side shared by every JAX env family: one float buffer from the core to TensorDicts, and back.

``JaxEnvBase`` is the ``EnvBase`` hook of the Brax, JaxMARL and gymnax envs. A family's env builds its
``JaxCore`` adapter, declares its specs and lays out the columns of the core's float buffer (``_set_layout``);
this class does the rest once: actions in as one flat float32 array, the compiled reset and step, outputs cut
from one buffer by an ``Outputs`` plan worked out once per layout (``_jax_outputs``: float entries as views, bool
entries such as ``terminated`` or ``action_mask`` stored as 0 / 1 and compared at once, the done entries of every
level computed there, see ``_completes_done``). The per-step torch side is written for a small batch on a CPU,
where it is the cost users pay on top of JAX: NumPy views and NumPy fills rather than torch indexing, unchecked
TensorDicts, and JAX's CPU computations run on the calling thread (``inline_cpu_dispatch``, set when this module
is imported). Where JAX's CPU dispatch stays asynchronous (JAX was started first), ``_step`` returns TensorDicts
over an empty buffer that ``_wait_step`` fills once JAX is done, so that the base class's work overlaps JAX's.
``jax_functions()`` is the functional JAX face of the same env.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from .._agents import nest_keys
from .._env import EnvBase
from .._validate import unknown_name
from ..distributed import jax_device
from ._brax_compat import enable_compilation_cache, inline_cpu_dispatch
from ._brax_transfer import Transfer
from ._jax_core import JaxCore, env_keys, quiet_tracing
from ._jax_outputs import Outputs

__all__ = ["JaxEnvBase", "JaxFunctions", "check_name"]

inline_cpu_dispatch()  # on import of any JAX family, before building one of its envs can start JAX's backends

Entry = tuple[tuple[str, ...], tuple[int, ...], Any]  # (key, batched shape, torch dtype: float32 or bool)


@dataclass(frozen=True)
class JaxFunctions:
    """The pure per-env functions of a JAX-family env (``env.jax_functions()``), for ``jit`` / ``vmap`` /
    ``lax.scan``.

    Attributes:
        reset: ``reset(key) -> (state, obs)``: ``obs`` a nested dict keyed as the env's TensorDict (no batch dim).
        step: ``step(key, state, actions) -> (state, out)``: ``actions`` a nested dict keyed as the env's action
            keys (``{"agents": {"action": a}}``, or ``{"action": a}``); ``out`` holds what the torch-facing env
            writes under ``"next"``: observations, rewards, ``terminated``, ``truncated`` (the env's
            ``max_steps`` is not counted here: it lives in the torch-facing env).
        first_keys: ``first_keys(seed, num_envs)``: the ``reset`` keys of the torch-facing env's first reset
            after ``set_seed(seed)`` (``split(fold_in(PRNGKey(seed), i))[1]``); its later keys continue the same
            chain (each reset, and each step of a family with random steps, splits the carried key and uses
            the second half).
    """

    reset: Callable[[jax.Array], tuple[Any, dict]]
    step: Callable[[jax.Array, Any, dict], tuple[Any, dict]]
    first_keys: Callable[[int, int], jax.Array]


def check_name(family: str, name: str, names: list[str], unavailable: dict[str, str]) -> None:
    """Raise a ValueError for a name the family does not offer: the reason, or close matches."""
    if name in unavailable:
        raise ValueError(f"the {family} env {name!r} cannot be built here: {unavailable[name]}")
    if name not in names:
        raise unknown_name(f"{family} env", name, names)


def _first_keys(seed: int, num_envs: int) -> jax.Array:
    return jax.vmap(lambda k: jax.random.split(k, 2)[1])(env_keys(seed, num_envs))


class JaxEnvBase(EnvBase):
    """``EnvBase`` over a ``JaxCore``. Subclasses set ``self._core`` and call ``_set_layout``."""

    _core: JaxCore
    _pending: tuple | None = None  # a CPU step JAX is computing: (result, the NumPy view of its torch buffer)

    def _start(self, *, num_envs: int, device, max_steps: int | None):
        """``EnvBase.__init__``, the compilation cache, the torch/JAX hand-off; the JAX device of ``device``."""
        jdevice = jax_device(torch.device(device))  # checked before the base class allocates on that device
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        enable_compilation_cache()
        self._init_io()
        return jdevice

    def _init_io(self) -> None:
        self._io = Transfer(self.device)
        self._inline = self._io.cpu and inline_cpu_dispatch()
        self._pending = None
        self._unfilled = False  # the last step's bool block is still to fill (from _last_step)
        self._last_step: tuple | None = None  # the last step's TensorDict, leaves, plan, buffer and bool block

    def _synchronous(self) -> bool:
        """Wait for each step's result before building its TensorDicts (the overlap needs a CPU whose JAX
        computations run asynchronously; run inline, they are done when the call returns)."""
        return not self._io.cpu or self._inline

    def _after_step(self) -> None:
        """Called after each synchronous step (Brax: ``cache_clear_frequency``)."""

    def _set_layout(self, observations: Sequence[Entry], rewards: Sequence[Entry], actions: Sequence[tuple]) -> None:
        """The columns of the core's buffers: reset gives ``observations``; step gives them, then ``rewards``
        (and any other per-step entry), then ``terminated`` and ``truncated``; ``actions`` are the action keys
        whose values, flattened per env in this order and cast to float32, make the core's action."""
        B = self.num_envs
        flags = [(("terminated",), (B, 1), torch.bool), (("truncated",), (B, 1), torch.bool)]
        self._reset_layout = self._slices(observations)
        self._step_layout = self._slices([*observations, *rewards, *flags])
        self._out_width = self._step_layout[-1][1].stop
        self._action_keys = [tuple(k) for k in actions]
        self._all_true, self._all_false = np.ones(B, dtype=bool), np.zeros(B, dtype=bool)
        self._reset_outputs = self._outputs(self._reset_layout)
        self._step_outputs = self._outputs(self._step_layout, step=True)

    def _outputs(self, layout, *, step: bool = False) -> Outputs:
        """The output plan of ``layout`` (a step's with this env's done levels, ``max_steps`` and keys)."""
        batches = {g: torch.Size((self.num_envs, len(m))) for g, m in self.group_map.items()}
        if not step:
            return Outputs(layout, batch=self.batch_size, device=self.device, batches=batches, done_levels=None)
        rewards = [(k,) if isinstance(k, str) else tuple(k) for k in self.reward_keys]
        return Outputs(layout, batch=self.batch_size, device=self.device, batches=batches,
                       done_levels=self._done_levels, max_steps=self.max_steps, count=self._step_count,
                       rewards=rewards, actions=self._action_keys)

    @staticmethod
    def _slices(layout: Sequence[Entry]):
        out, start = [], 0
        for key, shape, dtype in layout:
            width = int(np.prod(shape[1:]))
            out.append((key, slice(start, start + width), shape, dtype))
            start += width
        return out

    # -- output builder (one for reset and step) ------------------------------------------------------
    def _build(self, out: torch.Tensor | np.ndarray, layout, *, step: bool = False) -> TensorDict:
        """The TensorDict of ``out``'s columns laid out by ``layout`` (``out``: a NumPy array on the CPU, see
        ``_received``; a tensor on a device, or one carrying gradients), through its ``Outputs`` plan.

        A reset's bool entries are computed now; a step's (its done entries of every level included) are left
        empty for ``_wait_step`` to fill once the step's values are in ``out`` (where JAX's CPU dispatch is
        asynchronous, JAX computes them while the base class goes on).
        """
        if not step:
            plan = self._reset_outputs
        else:
            plan = self._step_outputs
            if plan.max_steps != self.max_steps:  # env.max_steps was changed since the plan was made
                plan = self._step_outputs = self._outputs(self._step_layout, step=True)
        leaves, block = plan.leaves(out)
        result = plan.tree(leaves)
        if step:
            self._last_step = (result, leaves, plan, out, block)
            self._unfilled = True
        else:
            plan.fill(out, block)
        return result

    def _next_root(self, tensordict: TensorDictBase, out: TensorDictBase) -> TensorDictBase:
        """The step's TensorDict without rewards, plus the actions: built from the same leaves, unchecked."""
        if self._last_step is None or out is not self._last_step[0]:
            return super()._next_root(tensordict, out)
        return self._step_outputs.next_root(self._last_step[1], [tensordict.get(k) for k in self._action_keys])

    def _completes_done(self, out: TensorDictBase) -> bool:
        return self._last_step is not None and out is self._last_step[0]

    def _flat_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        parts = [tensordict.get(key).reshape(self.num_envs, -1) for key in self._action_keys]
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return flat.to(torch.float32)

    def _received(self, array: jax.Array) -> torch.Tensor | np.ndarray:
        """A JAX result for ``_build``: a NumPy copy on the CPU (waits for JAX), a zero-copy tensor on a device."""
        return np.array(array) if self._io.cpu else self._io.to_torch(array)

    def _jax_action(self, tensordict: TensorDictBase):
        """The core's flat float32 action: NumPy on the CPU (no torch op), else ``_flat_action`` handed over."""
        if not self._io.cpu:
            return self._io.to_jax(self._flat_action(tensordict))
        parts = [tensordict.get(key).detach().numpy().reshape(self.num_envs, -1) for key in self._action_keys]
        flat = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return flat.astype(np.float32, copy=False)

    # -- the hook -------------------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        jmask = self._all_true if mask is None else self._io.to_jax(mask)
        return self._build(self._received(self._core.reset(jmask)), self._reset_layout)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Dispatch the compiled step. On CPU the result is returned over an empty buffer that ``_wait_step``
        fills once JAX is done, so that the base class builds the next root data meanwhile."""
        result = self._core.step(self._jax_action(tensordict))
        if self._synchronous():
            out = self._build(self._received(result), self._step_layout, step=True)
            self._after_step()
            return out
        buffer = np.empty((self.num_envs, self._out_width), dtype=np.float32)
        out = self._build(buffer, self._step_layout, step=True)
        self._pending = (result, buffer)  # dispatched, not yet done
        return out

    @property
    def _fused_reset(self) -> bool:
        return self._core.fused_reset

    def _step_reset(self, tensordict: TensorDictBase, ends: torch.Tensor | None):
        """The compiled step and the reset of the envs it ends, as one call (``JaxCore.step_reset``)."""
        ends = self._all_false if ends is None else self._io.to_jax(ends)
        both = self._received(self._core.step_reset(self._jax_action(tensordict), ends))
        width = self._out_width
        out = self._build(both[:, :width], self._step_layout, step=True)
        self._after_step()
        mask = both[:, -1] > 0.5
        return out, both[:, width:-1], torch.from_numpy(mask) if self._io.cpu else mask  # the reset's buffer

    def _merges_resets(self) -> bool:
        """Whether ``_reset_done`` merges a reset's buffer into the step's (not where gradients flow: Brax)."""
        return True

    def _reset_done(self, next_root: TensorDictBase, mask: torch.Tensor, fresh) -> TensorDictBase:
        """Reset the envs ``mask`` marks after a step: the core's reset buffer (``fresh``, from ``_step_reset``;
        else one reset call) merged into the step's buffer and bool block at once (``Outputs.reset_root``)
        rather than entry by entry, and the step counts zeroed as ``_reset_masked`` does."""
        if not self._merges_resets() or self._last_step is None:
            if fresh is not None:
                fresh = self._build(fresh, self._reset_layout)
            return super()._reset_done(next_root, mask, fresh)
        if fresh is None:
            fresh = self._received(self._core.reset(self._io.to_jax(mask)))
        _, _, plan, buffer, block = self._last_step
        self._step_count.masked_fill_(mask, 0)
        flags = mask.numpy() if isinstance(block, np.ndarray) else mask
        return plan.reset_root(buffer, block, fresh, flags, [next_root.get(k) for k in self._action_keys])

    def _wait_step(self) -> None:
        """Copy the pending step's values in (CPU), then fill its bool and done entries."""
        if self._pending is not None:
            result, buffer = self._pending
            self._pending = None
            np.copyto(buffer, np.asarray(result))  # waits for JAX
        if self._unfilled:
            self._unfilled = False
            _, _, plan, buffer, block = self._last_step
            plan.fill(buffer, block)

    def _set_seed(self, seed: int) -> None:
        self._core.seed(seed)

    @property
    def compile_seconds(self) -> dict[str, float]:
        """Seconds spent compiling (or loading from the persistent cache) each compiled function so far."""
        return dict(self._core.compile_seconds)

    # -- the functional JAX face ----------------------------------------------------------------------
    def jax_functions(self) -> JaxFunctions:
        """This env's pure per-env ``reset(key)`` and ``step(key, state, actions)`` (see ``JaxFunctions``): the
        same compiled scene as the torch-facing env, for a JAX training loop (``jit``, ``vmap``, ``lax.scan``)."""
        reset_one, step_one = self._core.functions()
        reset_layout, step_layout = self._reset_layout, self._step_layout
        action_keys = self._action_keys

        def unflatten(out, layout):
            return nest_keys({key: (out[cols] > 0.5 if dtype is torch.bool else out[cols]).reshape(shape[1:])
                          for key, cols, shape, dtype in layout})

        def reset(key):
            with quiet_tracing():
                state, out = reset_one(key)
            return state, unflatten(out, reset_layout)

        def step(key, state, actions):
            flat = []
            for path in action_keys:
                node = actions
                for part in path:
                    node = node[part]
                flat.append(jnp.asarray(node).reshape(-1).astype(jnp.float32))
            with quiet_tracing():
                state, out, flags = step_one(key, state, jnp.concatenate(flat))
            return state, unflatten(jnp.concatenate([out, flags.astype(jnp.float32)]), step_layout)

        return JaxFunctions(reset=reset, step=step, first_keys=_first_keys)
