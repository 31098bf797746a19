"""The torch side shared by every JAX env family: one float buffer from the core to TensorDicts, and back.

``JaxEnvBase`` is the ``EnvBase`` hook of the Brax, JaxMARL and gymnax envs. A family's env calls
``JaxEnvBase.__init__``, builds its ``JaxCore`` adapter, declares its specs and lays out the columns of the core's
float buffer (``_set_columns``), which sets the env's executor: a ``BufferOutputs`` (``_outputs``), the faster
executor of ``EnvBase``'s output rules over that one buffer. The hook itself is small: actions in as one flat
float32 array, the compiled reset and step, their buffers out (a NumPy copy on the CPU, a zero-copy tensor on a
device). Where JAX's CPU dispatch is asynchronous (a program that ran JAX before building an env, or
``MARL_ENVS_JAX_CPU_ASYNC=1``), ``_step`` returns the result JAX is still computing (``Pending``), so that the
executor builds the step's TensorDicts meanwhile. ``jax_functions()`` is the functional JAX face of the same env.
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

from ..._agents import nest_keys
from ..._env import EnvBase
from ..._validate import unknown_name
from ...distributed import jax_device
from ._core import JaxCore, env_keys, quiet_tracing
from ._outputs import BufferOutputs, Pending
from ._runtime import configure_jax
from ._transfer import Transfer

__all__ = ["JaxEnvBase", "JaxFunctions", "check_name"]

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


def _slices(entries: Sequence[Entry]) -> list[tuple]:
    """``(key, buffer columns, shape, dtype)`` of ``entries`` laid side by side."""
    out, start = [], 0
    for key, shape, dtype in entries:
        width = int(np.prod(shape[1:]))
        out.append((key, slice(start, start + width), shape, dtype))
        start += width
    return out


def _first_keys(seed: int, num_envs: int) -> jax.Array:
    return jax.vmap(lambda k: jax.random.split(k, 2)[1])(env_keys(seed, num_envs))


class JaxEnvBase(EnvBase):
    """``EnvBase`` over a ``JaxCore``. Subclasses call ``__init__``, set ``self._core`` and call ``_set_columns``.

    Args:
        num_envs, device, max_steps: as ``EnvBase``'s.
        synchronous: wait for each step's result before building its TensorDicts (always where JAX's CPU dispatch
            runs inline, or on a device); else the executor builds them while JAX computes.

    Attributes:
        jax_device: the JAX device of ``device``.
    """

    _core: JaxCore

    def __init__(self, *, num_envs: int, device: torch.device | str = "cpu", max_steps: int | None = None,
                 synchronous: bool = False):
        inline = configure_jax()  # before anything below can start JAX's backends
        self.jax_device = jax_device(torch.device(device))  # checked before the base class allocates on it
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        self._io = Transfer(self.device)
        self._synchronous = synchronous or not self._io.cpu or inline
        self._all_true, self._all_false = np.ones(num_envs, dtype=bool), np.zeros(num_envs, dtype=bool)

    _after_step: Callable[[], None] | None = None  # called after each synchronous step (Brax: cache_clear_frequency)

    def _set_columns(self, observations: Sequence[Entry], rewards: Sequence[Entry], actions: Sequence[tuple], *,
                     merges_resets: bool = True) -> None:
        """The columns of the core's buffers, and so the env's executor: reset gives ``observations``; step gives
        them, then ``rewards`` (and any other per-step entry), then ``terminated`` and ``truncated``; ``actions``
        are the action keys whose values, flattened per env in this order and cast to float32, make the core's
        action; ``merges_resets``: see ``BufferOutputs``."""
        B = self.num_envs
        flags = [(("terminated",), (B, 1), torch.bool), (("truncated",), (B, 1), torch.bool)]
        self._reset_columns = _slices(observations)
        self._step_columns = _slices([*observations, *rewards, *flags])
        self._action_keys = [tuple(k) for k in actions]
        self._outputs = BufferOutputs(self, self._reset_columns, self._step_columns, self._action_keys,
                                      merges_resets=merges_resets)

    def _flat_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        parts = [tensordict.get(key).reshape(self.num_envs, -1) for key in self._action_keys]
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return flat.to(torch.float32)

    def _received(self, array: jax.Array) -> torch.Tensor | np.ndarray:
        """A JAX result for the executor: a NumPy copy on the CPU (waits for JAX), a zero-copy tensor on a device."""
        return np.array(array) if self._io.cpu else self._io.to_torch(array)

    def _jax_action(self, tensordict: TensorDictBase):
        """The core's flat float32 action: NumPy on the CPU (no torch op), else ``_flat_action`` handed over."""
        if not self._io.cpu:
            return self._io.to_jax(self._flat_action(tensordict))
        parts = [tensordict.get(key).detach().numpy().reshape(self.num_envs, -1) for key in self._action_keys]
        flat = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        return flat.astype(np.float32, copy=False)

    # -- the hook -------------------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor | None) -> torch.Tensor | np.ndarray:
        jmask = self._all_true if mask is None else self._io.to_jax(mask)
        return self._received(self._core.reset(jmask))

    def _step(self, tensordict: TensorDictBase) -> torch.Tensor | np.ndarray | Pending:
        """Dispatch the compiled step: its buffer, or (asynchronous CPU dispatch) the result JAX is computing."""
        result = self._core.step(self._jax_action(tensordict))
        if not self._synchronous:
            return Pending(result)
        if self._after_step is not None:
            self._after_step()
        return self._received(result)

    @property
    def _fused_reset(self) -> bool:
        return self._core.fused_reset

    def _step_reset(self, tensordict: TensorDictBase, ends: torch.Tensor | None):
        """The compiled step and the reset of the envs it ends, as one call (``JaxCore.step_reset``)."""
        ends = self._all_false if ends is None else self._io.to_jax(ends)
        both = self._received(self._core.step_reset(self._jax_action(tensordict), ends))
        width = self._outputs.width
        if self._after_step is not None:
            self._after_step()
        mask = both[:, -1] > 0.5
        return both[:, :width], both[:, width:-1], torch.from_numpy(mask) if self._io.cpu else mask

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
        reset_layout, step_layout = self._reset_columns, self._step_columns
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
