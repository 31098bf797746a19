"""The torch side shared by every JAX env family, and by a user's JAX env.

``JaxEnvBase`` is the ``EnvBase`` of the Brax, JaxMARL, gymnax, Jumanji and Playground envs. An env calls
``JaxEnvBase.__init__``, declares its specs, builds its ``JaxModel`` and hands it to ``_set_model``, which reads the
model's named outputs and actions from the specs (``ModelLayout``), checks the model's outputs against them once and
sets the env's executor (``JaxExecutor``): each reset and step is one compiled call whose buffers (one per dtype)
torch reads as views. ``jax_functions()`` is the functional JAX face of the same env.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from tensordict import TensorDictBase

from ..._core.agents import nest_keys
from ..._core.env import EnvBase
from ..._core.leaf_specs import as_tuple
from ..._core.messages import check_name  # the families' own name checks, shared with their light modules
from ...distributed import jax_device
from ...specs import Composite
from ._executor import JaxExecutor
from ._model import JaxModel, ModelLayout, env_keys, quiet_tracing
from ._packing import side_by_side
from ._programs import NO_LIMIT, ModelDescription, Programs
from ._runtime import configure_jax
from ._transfer import Transfer

__all__ = ["FunctionalState", "JaxEnvBase", "JaxFunctions", "check_name"]

Entry = tuple[tuple[str, ...], tuple[int, ...], Any]  # (key, batched shape, torch dtype: float32, bool or an int)


class FunctionalState(NamedTuple):
    """One env's state in the functional face (``env.jax_functions()``): the library's own state (``env``), the key
    carried on (split at every reset, and every step of a model whose step is random) and the ``steps`` since the
    last reset (int32 scalar, read by ``max_steps``): what the torch-facing env keeps of each of its envs."""

    env: Any
    key: jax.Array
    steps: jax.Array


@dataclass(frozen=True)
class JaxFunctions:
    """The pure per-env functions of a JAX-family env (``env.jax_functions()``), for ``jit`` / ``vmap`` /
    ``lax.scan``: one env as the torch-facing env runs each of its envs, key chain and ``max_steps`` included. Data
    are nested dicts keyed as the env's TensorDicts, without the batch dim (``obs``: the root data of a reset,
    ``out``: ``td["next"]`` of a step, ``actions``: the action keys).

    Attributes:
        reset: ``reset(key) -> (state, obs)``: a fresh episode; ``key`` is the env's key (``first_keys``).
        step: ``step(state, actions) -> (state, out)``: one step, no reset, counted against ``max_steps`` (the
            env's when ``jax_functions()`` was called), as ``env.step``.
        step_autoreset: ``step_autoreset(state, actions) -> (state, out, obs)``: ``step``, then, where ``out``'s
            root ``done`` is set, ``reset`` from the carried key, as ``env.step_and_maybe_reset`` (``state`` and
            ``obs`` the next episode's first; else ``obs`` is ``out`` without the rewards).
        first_keys: ``first_keys(seed, num_envs)``: the env keys after ``set_seed(seed)`` (``fold_in(PRNGKey(seed),
            i)``), so that key ``i`` runs env ``i``'s episodes with the same random draws.
    """

    reset: Callable[[jax.Array], tuple[FunctionalState, dict]]
    step: Callable[[FunctionalState, dict], tuple[FunctionalState, dict]]
    step_autoreset: Callable[[FunctionalState, dict], tuple[FunctionalState, dict, dict]]
    first_keys: Callable[[int, int], jax.Array]


def _slices(entries: Sequence[Entry]) -> list[tuple]:
    """``(key, buffer columns, shape, dtype)`` of ``entries`` laid side by side."""
    places, _ = side_by_side([(0, int(np.prod(shape[1:]))) for _, shape, _ in entries], 1)
    return [(key, cols, shape, dtype) for (key, shape, dtype), (_, cols) in zip(entries, places)]


def _entries(spec: Composite, group_map: dict[str, list[str]]) -> list[Entry]:
    """``(key, shape, dtype)`` of each leaf of ``spec``, in the order the programs' vector holds them: the root's
    leaves first, in the spec's order, then the groups' fields, field by field (in the order they first appear), each
    group by group (``("agents", "observation")``, then ``("agents", "action_mask")``, ...)."""
    leaves = [as_tuple(key) for key in spec.keys(True, True)]
    root = [key for key in leaves if key[0] not in group_map]
    fields = list(dict.fromkeys(key[1:] for key in leaves if key[0] in group_map))
    grouped = [(group, *field) for field in fields for group in group_map if (group, *field) in leaves]
    return [(key, tuple(spec[key].shape), spec[key].dtype) for key in [*root, *grouped]]


_JAX_DTYPES = {torch.float32: jnp.float32, torch.bool: jnp.bool_}  # else int32: JAX's integers (x64 off)


def _one(entries: dict) -> dict:
    """The entries of a batch of one env, without the batch dim."""
    return {key: value[0] for key, value in entries.items()}


class JaxEnvBase(EnvBase):
    """``EnvBase`` over a ``JaxModel``. Subclasses call ``__init__``, declare their specs and call ``_set_model``.

    Args:
        num_envs, device, max_steps: as ``EnvBase``'s.
        device_path: run the code path written for a device (DLPack hand-offs both ways) on the CPU too, for
            tests that count host reads and for debugging the GPU path without a GPU; default (None): on a GPU only.

    Attributes:
        jax_device: the JAX device of ``device``.
        device_path: the env runs the device code path (on a GPU, or ``device_path=True``).
        compiled: the env steps through its compiled programs (``JaxExecutor``); False for an env whose hook steps
            through torch (a differentiable Brax env), set when the env is built.
    """

    _model: JaxModel
    compiled = False  # set by _set_model

    def __init__(self, *, num_envs: int, device: torch.device | str = "cpu", max_steps: int | None = None,
                 horizon: tuple[int, str] | None = None, device_path: bool | None = None):
        configure_jax()  # before anything below can start JAX's backends
        self.jax_device = jax_device(torch.device(device))  # checked before the base class allocates on it
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, horizon=horizon)
        if device_path not in (None, True, False):
            raise TypeError(f"device_path must be None, True or False, got {device_path!r}")
        self.device_path = bool(device_path) or self.device.type != "cpu"
        self._io = Transfer(self.device, dlpack=self.device_path, jax_device=self.jax_device)

    _after_step: Callable[[], None] | None = None  # called after each step (Brax: cache_clear_frequency)

    def _set_model(self, model: JaxModel, *, compiled: bool = True, check: bool = True) -> None:
        """Bind ``model`` to the env's specs and set the executor.

        The model's outputs are named by the specs' keys: a reset gives the observation entries; a step gives them,
        the rewards, each group's own ``terminated`` where the group has one, and the root ``terminated`` (and
        ``truncated``). Its actions are the ``action_keys``' values, each in its spec's shape without the batch dim.
        With ``check``, the model's functions are traced once here and outputs unlike the specs refused.

        Args:
            compiled: set the ``JaxExecutor`` (else the env's hook runs through the default executor: ``_reset`` /
                ``_step``, a differentiable Brax env).

        Raises:
            ValueError: an output missing, not declared, or of another shape than its spec's (named).
        """
        B = self.num_envs
        own_ends = [(g, "terminated") for g in self.group_map if (g, "terminated") in self.done_keys]
        observations = _entries(self.full_observation_spec, self.group_map)
        rewards = _entries(self.full_reward_spec, self.group_map)
        ends = [(key, tuple(self.full_done_spec[key].shape), torch.bool) for key in own_ends]
        flags = [(("terminated",), (B, 1), torch.bool), (("truncated",), (B, 1), torch.bool)]
        self._reset_columns = _slices(observations)
        self._step_columns = _slices([*observations, *rewards, *ends, *flags])
        self._action_keys = [as_tuple(k) for k in self.action_keys]
        actions = tuple((k, tuple(self.full_action_spec[k].shape[1:]),
                         _JAX_DTYPES.get(self.full_action_spec[k].dtype, jnp.int32)) for k in self._action_keys)
        model.bind(ModelLayout(reset=tuple((k, s[1:]) for k, s, _ in observations),
                               step=tuple((k, s[1:]) for k, s, _ in [*observations, *rewards, *ends]),
                               actions=actions), check=check)
        self._model = model
        self.compiled = compiled
        if compiled:
            self._set_executor(JaxExecutor(self._model_description(), self._facts(), io=self._io,
                                           device_path=self.device_path))

    def _model_description(self) -> ModelDescription:
        """What the programs and the executor are handed besides the env's facts (``_set_model``'s columns)."""
        return ModelDescription(self._model, tuple(self._reset_columns), tuple(self._step_columns),
                                tuple(self._action_keys), tuple(self.full_action_spec[k] for k in self._action_keys))

    def _flat_action(self, tensordict: TensorDictBase) -> torch.Tensor:
        parts = [tensordict.get(key).reshape(self.num_envs, -1) for key in self._action_keys]
        flat = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return flat.to(torch.float32)

    def _set_seed(self, seed: int) -> None:
        if self.compiled:  # the executor's carry holds the keys
            self._executor.seed(seed)
        else:  # an env stepping through torch (a differentiable Brax env) keeps them in the model
            self._model.seed(seed)

    def _env_state(self, index: int) -> Any:
        """The state of env ``index`` as NumPy arrays (for rendering)."""
        return self._model.env_state(index, self._executor.carried()[0])

    def export_program(self, name: str = "step_reset", *, platform: str = "cuda") -> Any:
        """The env's compiled ``name`` (``"reset"``, ``"step"``, ``"step_reset"``), as its executor runs it (with the
        deferred check if ``validate_actions`` chooses it), traced as a ``jax.export.Exported`` for ``platform``: to
        read what a device would run (``exported.mlir_module()``). A Brax env loaded from its saved CPU modules is
        traced from the Brax env again.

        Raises:
            TypeError: the env steps through torch (a differentiable Brax env): it has no compiled programs.
        """
        if not self.compiled:
            raise TypeError(f"{type(self).__name__} has no compiled programs "
                            f"(a differentiable env steps through torch)")
        return self._executor.export(name, platform)

    @property
    def compile_seconds(self) -> dict[str, float]:
        """Seconds spent compiling (or loading from the persistent cache) each compiled function so far."""
        return dict(self._model.compile_seconds)

    # -- the functional JAX face ----------------------------------------------------------------------
    def jax_functions(self) -> JaxFunctions:
        """This env's pure per-env ``reset``, ``step`` and ``step_autoreset`` (see ``JaxFunctions``): the same
        compiled scene, key chain, output plan and ``max_steps`` as the torch-facing env, for a JAX training loop
        (``jit``, ``vmap``, ``lax.scan``)."""
        keyed_reset, keyed_step = self._model.keyed_reset, self._model.keyed_step
        programs = Programs(self._model_description(), self._facts())
        limit = NO_LIMIT if self.max_steps is None else self.max_steps
        action_keys = self._action_keys

        def fresh(key):
            with quiet_tracing():
                key, state, out = keyed_reset(key)
            return FunctionalState(state, key, jnp.zeros((), jnp.int32)), _one(programs.reset_entries(out[None]))

        def reset(key):
            state, obs = fresh(key)
            return state, nest_keys(obs)

        def stepped(state, actions):
            flat = [jnp.asarray(functools.reduce(operator.getitem, path, actions)).reshape(-1).astype(jnp.float32)
                    for path in action_keys]
            with quiet_tracing():
                key, env, out, flags = keyed_step(state.key, state.env, jnp.concatenate(flat))
            steps = state.steps + 1
            vector = jnp.concatenate([out, flags.astype(jnp.float32)])
            return FunctionalState(env, key, steps), _one(programs.stepped_entries(vector[None], steps[None], limit))

        def step(state, actions):
            state, out = stepped(state, actions)
            return state, nest_keys(out)

        def step_autoreset(state, actions):  # a fresh start drawn every step, kept where the episode ended
            state, out = stepped(state, actions)
            done = out[("done",)].reshape(())
            new, obs = fresh(state.key)
            state = jax.tree.map(lambda a, b: jnp.where(done, a, b), new, state)
            root = programs.next_root({k: v[None] for k, v in out.items()}, {k: v[None] for k, v in obs.items()},
                                      done[None])
            return state, nest_keys(out), nest_keys(dict(zip(programs.kept, (v[0] for v in root))))

        return JaxFunctions(reset=reset, step=step, step_autoreset=step_autoreset, first_keys=env_keys)
