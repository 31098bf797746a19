"""The Brax model (``backends.jax.JaxModel``): a Brax env's reset and step as one env's functions, outputs named.

Per env step: the agent actions are scattered into the robot's action, the env is stepped ``frame_skip`` times with
``lax.scan`` (rewards summed, an env that ends mid-skip stays frozen), and the agent observations are gathered. Brax's
step is deterministic: it takes no key. The differentiable variant (``Differentiable``) hands the float32 buffer (the
part gradients flow through) to the caller, so a ``torch.autograd.Function`` can carry it between steps; its backward
recomputes the step under ``jax.vjp`` (nothing but the step's inputs is kept per step).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..jax import JaxModel, ModelLayout, StateMismatch, StatePacking, Transfer, quiet_tracing, strong, tree_paths

__all__ = ["BraxModel", "Differentiable", "ModelInfo", "Split", "Step", "reset_struct"]

_RESET_STRUCTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Split:
    """Static tables of a multi-agent split, in data order: the ``groups``' names in group_map order, and

    Attributes:
        action_source: ``(action_size,)``: for each robot action dim, its column in the flat agent action
            ``concat([group_action.reshape(B, -1) for each group])``.
        gathers: per group, ``(n_agents, width)`` indices into the robot observation with one zero appended
            (index ``observation_size`` reads that zero: the padding of agents with fewer entries).
    """

    groups: tuple[str, ...]
    action_source: np.ndarray
    gathers: tuple[np.ndarray, ...]


def reset_struct(env) -> Any:
    """Shapes and dtypes of ``env.reset(key)`` (traced once per env object, never run).

    Raises:
        ValueError: tracing ``reset`` failed.
    """
    if env not in _RESET_STRUCTS:
        try:
            with quiet_tracing():
                _RESET_STRUCTS[env] = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
        except Exception as err:
            raise ValueError(f"tracing {type(env).__name__}.reset(rng) failed: {err}") from err
    return _RESET_STRUCTS[env]


@contextlib.contextmanager
def _step_errors(env) -> Iterator[None]:
    """Report a failure while tracing ``env.step`` as a ValueError naming the env."""
    try:
        yield
    except StateMismatch:
        raise
    except Exception as err:
        raise ValueError(f"tracing {type(env).__name__}.step(state, action) failed: {err}") from err


@dataclass(frozen=True)
class ModelInfo:
    """What is known of a Brax env without running it: the shapes the compiled functions take and return, as plain
    data (``to_json`` / ``from_json``), saved with the exported functions.

    Attributes:
        action_size: the robot's action size.
        obs_leaves: ``(key path, shape)`` of each observation leaf (one leaf, the empty path, for a flat vector).
        has_truncation: the state's ``info`` has a ``truncation`` entry (an ``EpisodeWrapper``).
        widths, dtypes: the packed state's buffers (``StatePacking``): their widths and dtype names, float32 first.
    """

    action_size: int
    obs_leaves: tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]
    has_truncation: bool
    widths: tuple[int, ...]
    dtypes: tuple[str, ...]

    @classmethod
    def of(cls, env) -> ModelInfo:
        """Trace ``env.reset`` for shapes (see ``reset_struct``)."""
        one = reset_struct(env)
        packing = StatePacking(strong(one))
        return cls(
            action_size=int(env.action_size),
            obs_leaves=tuple((path, tuple(leaf.shape)) for path, leaf in tree_paths(one.obs)),
            has_truncation="truncation" in one.info,
            widths=tuple(packing.widths),
            dtypes=tuple(str(d) for d in packing.dtypes),
        )

    @property
    def flat_observation_size(self) -> int | None:
        """The observation's size if it is one flat vector (what a multi-agent split needs), else None."""
        if len(self.obs_leaves) == 1 and not self.obs_leaves[0][0] and len(self.obs_leaves[0][1]) == 1:
            return self.obs_leaves[0][1][0]
        return None

    def to_json(self) -> dict:
        return asdict(self)  # its tuples are written as JSON lists

    @classmethod
    def from_json(cls, data: dict) -> ModelInfo:
        return cls(**{**data, "obs_leaves": tuple((tuple(p), tuple(s)) for p, s in data["obs_leaves"]),
                      "widths": tuple(data["widths"]), "dtypes": tuple(data["dtypes"])})


class BraxModel(JaxModel):
    """The model of a Brax env, over ``num_envs`` copies (see ``backends.jax.JaxModel``). Its reset and step are
    traced from the env, or come ready as ``jax.export`` modules (``exported``; ``env`` then a zero-argument callable
    building the env if something needs it: ``env_state``). With ``export=True`` they are traced as modules
    (``self.exported``, to be saved) and compiled from those, as a later process that loads them does (so it finds
    the compiled code in JAX's persistent cache).

    Args:
        env: a ``brax.envs.Env`` (unbatched: the model vmaps it), or a callable returning one (``exported``).
        info: the env's shapes (``ModelInfo.of(env)``).
        num_envs: batch size.
        frame_skip: env steps per call, rewards summed (``lax.scan``).
        split: multi-agent tables, or None for the single-agent layout.
        device: the JAX device holding the state.
        differentiable: a ``Differentiable`` will drive this model (it compiles its own step).
        export: trace reset and step as ``jax.export`` modules (falls back to plain tracing if export fails).
        exported: ``{"batched_reset": Exported, "batched_step": Exported}`` to compile instead of tracing.
        resets_when_needed: as ``JaxModel``'s (Playground's CheetahRun).

    Raises:
        ValueError: (``bind``) tracing the env's reset or step fails, or its step changes the state's structure.
    """

    step_uses_key = False  # Brax steps are deterministic
    costly_reset = True  # a reset runs the pipeline's init

    def __init__(
        self, env, info: ModelInfo, *, num_envs: int, frame_skip: int, split: Split | None, device,
        differentiable: bool = False, export: bool = False, exported: Mapping[str, Any] | None = None,
        resets_when_needed: bool = False,
    ):
        self.info, self.frame_skip, self.split = info, frame_skip, split
        self.widths, self.dtypes, self.resets_when_needed = info.widths, info.dtypes, resets_when_needed
        self._env, self._env_factory = (None, env) if exported else (env, None)
        self._differentiable, self._export_now = differentiable, export
        self._setup(num_envs=num_envs, device=device, exported=exported)

    def bind(self, layout: ModelLayout, *, check: bool = True) -> None:
        """``JaxModel.bind``: the reset traced for its check, the step by its first trace, here (compiling reuses it;
        with ``export``, as ``jax.export`` modules) or ``Differentiable``'s. An exported model is not traced."""
        self.layout = layout
        if not self.exported:
            with _step_errors(self.env), quiet_tracing():
                jax.eval_shape(self.keyed_reset, jax.ShapeDtypeStruct((2,), jnp.uint32))
                if not self._differentiable and not (self._export_now and self._export()):
                    self._trace("batched_step", *self._signature("batched_step"))

    @property
    def env(self):
        """The Brax env (built now if this model came from exported modules)."""
        if self._env is None:
            self._env = self._env_factory()
        return self._env

    @property
    def label(self) -> str:
        return type(self.env).__name__

    @functools.cached_property
    def _reference(self) -> Any:
        return strong(reset_struct(self.env))

    # -- the per-env functions ------------------------------------------------------------------------
    def _advance(self, state: Any, action: jax.Array) -> tuple[Any, jax.Array]:
        """``frame_skip`` env steps of one env; the summed reward. An env that ends stays frozen."""
        env = self.env
        if self.frame_skip == 1:
            nxt = env.step(state, action)
            return self._cast(nxt), jnp.asarray(nxt.reward, jnp.float32)

        def body(carry, _):
            current, total, ended = carry
            nxt = self._cast(env.step(current, action))
            nxt = jax.tree.map(lambda old, new: jnp.where(ended, old, new), current, nxt)
            total = total + jnp.where(ended, 0.0, jnp.asarray(nxt.reward, jnp.float32))
            return (nxt, total, ended | (nxt.done > 0)), None

        start = (self._cast(state), jnp.zeros((), jnp.float32), jnp.zeros((), bool))
        (state, total, _), _ = jax.lax.scan(body, start, None, length=self.frame_skip)
        return state, total

    def observe_one(self, state: Any, reward: jax.Array | None = None) -> dict:
        """One env's observations (the robot's, or a split's ``state`` and group gathers) and, given, rewards."""
        if self.split is None:
            out = {("observation", *path): leaf.astype(jnp.float32) for path, leaf in tree_paths(state.obs)}
            if reward is not None:
                out["reward"] = reward.reshape(1)
            return out
        obs = state.obs.reshape(-1).astype(jnp.float32)
        padded = jnp.concatenate([obs, jnp.zeros((1,), jnp.float32)])
        out = {"state": obs}
        for g, table in zip(self.split.groups, self.split.gathers):  # flat gathers: XLA fuses them as it always has
            out[g, "observation"] = padded[table.reshape(-1)].reshape(table.shape)
            if reward is not None:
                out[g, "reward"] = jnp.broadcast_to(reward.reshape(1), (len(table),)).reshape(-1, 1)
        return out

    def reset_one(self, key: jax.Array) -> tuple[Any, dict]:
        state = self._cast(self.env.reset(key))
        return state, self.observe_one(state)

    def step_one(self, key: jax.Array, state: Any, actions: Mapping) -> tuple[Any, dict]:
        del key  # Brax steps are deterministic
        action = actions["action"] if self.split is None else jnp.concatenate(
            [actions[g, "action"].reshape(-1) for g in self.split.groups])[self.split.action_source]
        state, reward = self._advance(state, action)
        done = state.done > 0
        truncated = (state.info["truncation"] > 0) & done if self.info.has_truncation else jnp.zeros_like(done)
        return state, {**self.observe_one(state, reward), "terminated": done & ~truncated, "truncated": truncated}


class Differentiable:
    """The differentiable variant of a ``BraxModel``.

    The state's float32 buffer (``flat``, ``(B, S)``: the part gradients flow through) is handed to the caller,
    who keeps it as a torch tensor carrying the autograd history; the other buffers (``aux``: integer and
    bool leaves, other float dtypes) and the keys stay here. ``step`` returns the next flat state with the
    outputs and what ``vjp`` needs to recompute the step under ``jax.vjp``: its inputs, nothing else.
    """

    def __init__(self, model: BraxModel):
        self.model = model
        self.aux: tuple | None = None
        flat, *aux = model.state_structs()
        self._state_structs = (flat, tuple(aux), model.keys_struct())  # (flat, aux, keys): every call's first three
        self._step_structs = (*self._state_structs, model.action_struct())
        with quiet_tracing(), _step_errors(model.env):  # also checks the env's step, as BraxModel.bind does
            self.out_width = jax.eval_shape(self._forward, *self._step_structs)[3].shape[1]

    # -- compiled functions ---------------------------------------------------------------------------
    def _forward(self, flat, aux, keys, action):
        buffers, keys, out, flags = self.model.batch_step((flat, *aux), keys, action)
        return buffers[0], buffers[1:], keys, out, flags

    def _backward(self, flat, aux, keys, action, grad_flat, grad_out):
        def differentiable(f, a):
            new_flat, _, _, out, _ = self._forward(f, aux, keys, a)
            return new_flat, out

        return jax.vjp(differentiable, flat, action)[1]((grad_flat, grad_out))

    def batch_reset(self, flat, aux, keys, mask):
        buffers, keys, out = self.model.batch_reset((flat, *aux), keys, mask)
        return buffers[0], buffers[1:], keys, out

    # -- the public calls -----------------------------------------------------------------------------
    def reset(self, flat: jax.Array | np.ndarray | None, mask) -> tuple[jax.Array, jax.Array]:
        """Reset where ``mask``; ``flat=None`` starts from zeros. Returns the new flat state and the outputs."""
        model = self.model
        if flat is None or self.aux is None:
            flat, *aux = model.zero_state()
            self.aux = tuple(aux)
        fn = model.compiled("grad_reset", self.batch_reset,
                            lambda: (*self._state_structs, model.struct((model.num_envs,), jnp.bool_)))
        flat, self.aux, model.keys, out = fn(flat, self.aux, model.keys, mask)
        return flat, out

    def step(self, flat, action) -> tuple[jax.Array, jax.Array, jax.Array, tuple]:
        """One step from ``flat``: ``(next flat, float outputs, flags, saved)``.

        ``saved`` is the rest of the step's input (``aux`` and the keys, JAX arrays that nothing mutates); with
        ``flat`` and ``action`` it is all ``vjp`` needs.
        """
        model = self.model
        fn = model.compiled("grad_step", self._forward, lambda: self._step_structs)
        saved = (self.aux, model.keys)
        new_flat, self.aux, model.keys, out, flags = fn(flat, *saved, action)
        return new_flat, out, flags, saved

    def vjp(self, flat, saved: tuple, action, grad_flat, grad_out) -> tuple[jax.Array, jax.Array]:
        """Gradients w.r.t. the step's flat state and action, given those of its next flat state and outputs."""
        model = self.model
        fn = model.compiled("grad_vjp", self._backward, lambda: (
            *self._step_structs, self._state_structs[0], model.struct((model.num_envs, self.out_width), jnp.float32)))
        return fn(flat, *saved, action, grad_flat, grad_out)

    def env_state(self, flat: np.ndarray, index: int) -> Any:
        """The Brax state of env ``index`` (NumPy arrays), its float32 buffer given."""
        if self.aux is None:
            raise RuntimeError("the env has no state yet: reset it first")
        return self.model.env_state(index, (flat, *self.aux))


class Step(torch.autograd.Function):
    """One differentiable step: ``(flat state, action) -> (next flat state, float outputs, flags)``."""

    @staticmethod
    def forward(ctx, diff: Differentiable, io: Transfer, flat: torch.Tensor, action: torch.Tensor):
        new_flat, out, flags, saved = diff.step(io.to_jax(flat), io.to_jax(action))
        ctx.diff, ctx.io, ctx.saved = diff, io, saved
        ctx.save_for_backward(flat, action)  # autograd's version counters catch in-place edits before backward
        new_flat, out, flags = io.to_torch_all((new_flat, out, flags))
        ctx.mark_non_differentiable(flags)
        return new_flat, out, flags

    @staticmethod
    def backward(ctx, grad_flat, grad_out, _grad_flags):
        io, saved = ctx.io, ctx.saved
        flat, action = ctx.saved_tensors
        if grad_flat is None:
            grad_flat = torch.zeros_like(flat)
        if grad_out is None:
            grad_out = torch.zeros((flat.shape[0], ctx.diff.out_width), device=flat.device)
        g_flat, g_action = ctx.diff.vjp(io.to_jax(flat), saved, io.to_jax(action), io.to_jax(grad_flat.contiguous()),
                                        io.to_jax(grad_out.contiguous()))
        return None, None, *io.to_torch_all((g_flat, g_action))
