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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from ..._agents import nest_keys
from ..._env import EnvBase
from ..._outputs import done_of
from ..._validate import unknown_name
from ...distributed import jax_device
from ._core import JaxCore, env_keys, quiet_tracing
from ._outputs import BufferOutputs, BufferPlan, Pending
from ._runtime import configure_jax
from ._transfer import Transfer

__all__ = ["FunctionalState", "JaxEnvBase", "JaxFunctions", "check_name"]

Entry = tuple[tuple[str, ...], tuple[int, ...], Any]  # (key, batched shape, torch dtype: float32, bool or an int)


class FunctionalState(NamedTuple):
    """One env's state in the functional face (``env.jax_functions()``): what the torch-facing env keeps of each of
    its envs, so that both run the same episodes from the same seed.

    Attributes:
        env: the library's own state (a Brax ``State``, a JaxMARL or gymnax state dataclass).
        key: the env's key, carried on: split at every reset (and every step of a family whose step is random),
            its second half used.
        steps: steps since the last reset (int32 scalar); ``max_steps`` truncation reads it.
    """

    env: Any
    key: jax.Array
    steps: jax.Array


@dataclass(frozen=True)
class JaxFunctions:
    """The pure per-env functions of a JAX-family env (``env.jax_functions()``), for ``jit`` / ``vmap`` /
    ``lax.scan``: one env as the torch-facing env runs each of its envs, key chain and ``max_steps`` included.

    Data are nested dicts keyed as the env's TensorDicts, without the batch dim: ``obs`` as the root data of
    ``env.reset()`` (observations, action masks, the done entries), ``out`` as ``td["next"]`` after ``env.step``
    (observations, rewards, ``done`` / ``terminated`` / ``truncated`` at every level), ``actions`` as the env's
    action keys (``{"agents": {"action": a}}``, or ``{"action": a}``).

    Attributes:
        reset: ``reset(key) -> (state, obs)``: a fresh episode; ``key`` is the env's key (``first_keys``).
        step: ``step(state, actions) -> (state, out)``: one step, no reset; ``out`` counts the step against
            ``max_steps`` (the env's when ``jax_functions()`` was called): ``truncated`` from the step that
            reaches it on, as ``env.step``.
        step_autoreset: ``step_autoreset(state, actions) -> (state, out, obs)``: ``step``, then, where ``out``'s
            root ``done`` is set, ``reset`` from the state's carried key, as ``env.step_and_maybe_reset``: ``out``
            is the terminal step's data (its observation, rewards and done entries), ``state`` and ``obs`` the
            next episode's first (else ``obs`` is ``out`` without the rewards).
        first_keys: ``first_keys(seed, num_envs)``: the env keys of the torch-facing env after ``set_seed(seed)``
            (``fold_in(PRNGKey(seed), i)``): ``reset`` of key ``i`` is env ``i``'s first reset, and
            ``step_autoreset`` then runs env ``i``'s episodes with the same random draws.
    """

    reset: Callable[[jax.Array], tuple[FunctionalState, dict]]
    step: Callable[[FunctionalState, dict], tuple[FunctionalState, dict]]
    step_autoreset: Callable[[FunctionalState, dict], tuple[FunctionalState, dict, dict]]
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


def _run_plan(plan: BufferPlan, buffer: jax.Array, steps: jax.Array | None) -> dict[tuple[str, ...], jax.Array]:
    """One env's entries (key -> value) by the torch side's ``plan`` of a reset or step buffer, run in JAX:
    ``buffer`` is the env's float vector, ``steps`` its step count (for the time limit). The plan's bool block is
    one row per bool value here, filled by the plan's operations as ``DonePlan.fill`` fills a batch's."""
    done = plan.done
    block = jnp.zeros((done.width,), bool).at[:len(plan.compared_columns)].set(
        buffer[np.asarray(plan.compared_columns, dtype=int)] > 0.5)
    for op in done.ops:
        if op[0] == "done":
            block = block.at[op[3]].set(done_of(block[op[1]], block[op[2]]))
        elif op[0] == "or":  # a level's own truncation or the time limit
            block = block.at[op[3]].set(block[op[1]] | block[op[2]])
        elif op[0] == "limit":
            block = block.at[op[1]].set(done.limit.reached(steps))
        elif op[0] == "zero":
            block = block.at[op[1]].set(False)
        else:
            raise ValueError(f"unknown done-plan operation {op[0]!r}")
    entries = {}
    for key, (is_bool, where) in zip(plan.keys, plan.sources):
        if is_bool:
            rows, shape, broadcast = where
            value = block[rows].reshape(shape[1:])
            entries[key] = value if broadcast is None else jnp.broadcast_to(value, broadcast[1:])
        else:
            cols, shape, cast = where
            value = buffer[cols].reshape(shape[1:])
            entries[key] = value if cast is None else value.astype(cast[0])
    return entries


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
        """This env's pure per-env ``reset``, ``step`` and ``step_autoreset`` (see ``JaxFunctions``): the same
        compiled scene, key chain, output plan and ``max_steps`` as the torch-facing env, for a JAX training loop
        (``jit``, ``vmap``, ``lax.scan``)."""
        keyed_reset, keyed_step = self._core.functions()
        reset_plan, step_plan = self._outputs.reset_plan, self._outputs.step_plan
        kept = [step_plan.keys[i] for i in step_plan.kept]  # the next root data's keys: no rewards
        action_keys = self._action_keys

        def reset(key):
            with quiet_tracing():
                key, state, out = keyed_reset(key)
            return FunctionalState(state, key, jnp.zeros((), jnp.int32)), nest_keys(_run_plan(reset_plan, out, None))

        def stepped(state, actions):
            flat = []
            for path in action_keys:
                node = actions
                for part in path:
                    node = node[part]
                flat.append(jnp.asarray(node).reshape(-1).astype(jnp.float32))
            with quiet_tracing():
                key, env, out, flags = keyed_step(state.key, state.env, jnp.concatenate(flat))
            steps = state.steps + 1
            return FunctionalState(env, key, steps), _run_plan(
                step_plan, jnp.concatenate([out, flags.astype(jnp.float32)]), steps)

        def step(state, actions):
            state, out = stepped(state, actions)
            return state, nest_keys(out)

        def step_autoreset(state, actions):
            state, out = stepped(state, actions)
            obs = nest_keys({key: out[key] for key in kept})
            state, obs = jax.lax.cond(out[("done",)].reshape(()), lambda: reset(state.key), lambda: (state, obs))
            return state, nest_keys(out), obs

        return JaxFunctions(reset=reset, step=step, step_autoreset=step_autoreset, first_keys=env_keys)
