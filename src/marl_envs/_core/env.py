"""``EnvBase``: the one public env API every backend shares, written once over a small backend hook."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from . import rollout as _rollout
from .actions import check_actions, check_carried
from .executor import EnvFacts, Executor, TensorDictExecutor
from .leaf_specs import Categorical, NestedKey, OneHot
from .rules import TimeLimit, merge_rows, next_root
from .spec_keys import SpecsAndKeys
from .tensordicts import set_unchecked
from .validate import check_device, check_env_index

__all__ = ["EnvBase"]


class EnvBase(SpecsAndKeys):
    """Base class of every batched multi-agent environment.

    A backend (or a user's custom env) writes only the hook: ``__init__`` declaring ``group_map`` and the
    ``full_*_spec`` Composites (or per-agent specs through ``_group_agents``), ``_reset(mask)``,
    ``_step(tensordict)``, ``_set_seed(seed)``, optionally ``_render(env_index, **kwargs)`` and
    ``_step_reset(tensordict, ends)``. This class writes ``reset``, ``step``, ``step_and_maybe_reset``,
    ``rollout``, ``render``, the key properties (``SpecsAndKeys``), step counting and input validation; its
    executor (``marl_envs._core.executor``) completes the done entries (``done = terminated | truncated`` at every
    level), applies ``max_steps`` truncation, builds the next root data and merges resets. A backend with a faster
    executor of the same rules (the JAX families) sets its own when it is built (``_set_executor``).

    Data layout (``B = num_envs``): per-group entries under the group name with batch ``(B, n_agents)``
    (``td["agents", "observation"]``), shared ``done`` / ``terminated`` / ``truncated`` of shape ``(B, 1)``
    at the root, rewards under ``("next", group, "reward")``.

    Args:
        num_envs: number of environments stepped together (the batch size).
        device: device of every tensor the env reads and writes.
        max_steps: episode length after which an env reports ``truncated=True``; ``None`` for no limit. A backend
            whose library has its own time limit passes it as ``horizon``: then ``max_steps`` is that limit unless
            the user asks for a shorter one.
        horizon: the library's own time limit, ``(steps, how to change it)`` (``(25, "max_cycles=N")``), or None.

    Attributes:
        validate_actions: how the action values are checked (see the property).
        allow_done_after_reset: the backend may report ``done`` right after a reset (checked by
            ``check_env_specs``).
    """

    allow_done_after_reset: bool = False
    _episode_bound: int | None = None  # a game that ends itself within this many steps (tic-tac-toe: 9)
    _meanings: Mapping[NestedKey, str] = {}  # what an entry is, in words, where the backend knows (marl-envs info)
    _fused_reset: bool = False  # the backend implements _step_reset
    _executor: Executor

    def __init__(self, *, num_envs: int, device: torch.device | str = "cpu", max_steps: int | None = None,
                 horizon: tuple[int, str] | None = None):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        self.num_envs = num_envs
        self.batch_size = torch.Size([num_envs])
        self.device = check_device(device)
        self._executor = TensorDictExecutor(num_envs, self.device)
        self._validate: bool | str = True
        self._immediate = True  # the action values are checked before the step (see validate_actions)
        self._ready = False  # a reset has run: a step before it is refused (``_check_ready``)
        self._horizon = horizon
        self._limit: TimeLimit | None = None
        self._init_specs()
        self.max_steps = horizon[0] if max_steps is None and horizon is not None else max_steps
        self._generator = torch.Generator(device=self.device)
        self._generator.seed()
        self._refresh_keys()

    @property
    def max_steps(self) -> int | None:
        """Episode length after which an env reports ``truncated=True`` (None: no limit).

        Where the library has its own time limit (JaxMARL's ``max_steps``, gymnax's ``max_steps_in_episode``,
        Jumanji's ``time_limit``, PettingZoo's ``max_cycles``, ...), this is that limit, counted in env steps, unless
        a shorter one was set; a longer one is refused (the library would end the episode first). Reaching it is
        ``truncated`` and not ``terminated``, whatever the library's own flag says.
        """
        return self._max_steps

    @max_steps.setter
    def max_steps(self, max_steps: int | None) -> None:
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        horizon = self._horizon
        if horizon is not None and (max_steps is None or max_steps > horizon[0]):
            raise ValueError(
                f"max_steps={max_steps!r} is beyond the library's own time limit: its episodes end after {horizon[0]} "
                f"steps; pass max_steps of at most {horizon[0]}, or lengthen the library's limit ({horizon[1]}) when "
                f"building the env")
        self._max_steps = max_steps
        self._limit = None if max_steps is None else TimeLimit(max_steps)
        self._configure()  # the executor made its plans with the old limit: hand it the new one

    @property
    def max_episode_length(self) -> int | None:
        """The most steps an episode can last: ``max_steps`` where there is a time limit, else the bound of a
        game that ends itself within a known number of moves (OpenSpiel's ``max_game_length``, tic-tac-toe's 9),
        else None. What a rollout that must see every episode end needs (BenchMARL's evaluation reads it)."""
        return self._max_steps if self._max_steps is not None else self._episode_bound

    @property
    def validate_actions(self) -> bool | str:
        """How each step checks the action values for non-finite (NaN, inf) and out-of-range discrete values.

        - ``"immediate"``: before the step, raising ``ValueError`` at once and applying nothing; on a device this
          waits for the device once a step.
        - ``"deferred"`` (the JAX families): inside the compiled step, on the device, without waiting. The envs
          given a bad action are not advanced and their float outputs of that step are NaN; a sticky flag on
          the device records the first bad value, and the env's next call that finds it computed raises
          ``ValueError`` naming the step, the env index and the value (then clears it).
        - ``True`` (default): ``"deferred"`` for the JAX families (on every device: one contract, and the cheaper
          check on a CPU too), ``"immediate"`` for the others.
        - ``False``: no check, once a policy is trusted.

        In a backend that applies only the actions of the agents a group's ``"mask"`` marks (PettingZoo: the acting
        player, the living agents), only those are checked.
        """
        return self._validate

    @validate_actions.setter
    def validate_actions(self, value: bool | str) -> None:
        if not (isinstance(value, bool) or value in ("immediate", "deferred")):
            raise ValueError(f"validate_actions must be True, False, 'immediate' or 'deferred', got {value!r}")
        if value == "deferred" and not self._executor.deferred_checks:
            raise ValueError(f"{type(self).__name__} cannot check actions inside its step (validate_actions="
                             f"'deferred' is for the JAX families); use True, 'immediate' or False")
        self._validate = value
        self._refresh_checks()

    def _refresh_checks(self) -> None:
        value = self._validate
        self._immediate = value == "immediate" or (value is True and not self._executor.deferred_by_default)
        self._configure()

    def _set_executor(self, executor: Executor) -> None:
        """Make ``executor`` the env's (a backend with its own, when it is built)."""
        self._executor = executor
        self._refresh_checks()

    def _configure(self) -> None:
        """Hand the executor the env's description as it is now (its keys, specs or settings changed)."""
        self._executor.configure(self._facts())

    @property
    def _deferred(self) -> bool:
        """The executor checks the action values inside the step (``validate_actions``)."""
        value = self._validate
        return value == "deferred" or (value is True and self._executor.deferred_by_default)

    def _facts(self) -> EnvFacts:
        """The env's description, as an executor reads it."""
        return EnvFacts(
            num_envs=self.num_envs, device=self.device, keys={kind: tuple(keys) for kind, keys in self._keys.items()},
            done_levels=dict(self._done_levels), group_map={g: tuple(m) for g, m in self._group_map.items()},
            group_shapes=dict(self._group_shapes), limit=self._limit, action_checks=tuple(self._action_checks),
            deferred=self._deferred,
            fused_reset=self._fused_reset)

    # ------------------------------------------------------------------------------------------------
    # The backend hook
    # ------------------------------------------------------------------------------------------------
    def _reset(self, mask: torch.Tensor | None) -> Any:
        """Reset the envs where ``mask`` (``(num_envs,)`` bool; ``None`` = all) is True.

        Return observations (and per-group done entries, if declared) for all envs, as a TensorDict (or what the
        env's executor reads); rows where ``mask`` is False are replaced by the caller's data.
        """
        raise NotImplementedError

    def _step(self, tensordict: TensorDictBase) -> Any:
        """Step every env with the actions in ``tensordict``; return observations, rewards and ``terminated`` as a
        TensorDict (or what the env's executor reads)."""
        raise NotImplementedError

    def _set_seed(self, seed: int) -> None:
        """Seed the backend's random state."""
        raise NotImplementedError

    def _step_reset(self, tensordict: TensorDictBase, ends: torch.Tensor | None) -> tuple[Any, Any, torch.Tensor]:
        """Optional, used by ``step_and_maybe_reset`` when ``_fused_reset`` is True: ``_step``, then ``_reset`` of
        the envs whose root ``terminated`` or ``truncated`` it sets or that ``ends`` ``(num_envs,)`` marks (those
        reaching ``max_steps``; None without a limit), in one call to the simulator.

        Returns:
            ``(step output, reset output, reset mask)``: what ``_step`` and ``_reset(mask)`` would return.
        """
        raise NotImplementedError

    def _render(self, env_index: int, **kwargs: Any) -> Any:
        """An image of env ``env_index`` (already checked to be in range)."""
        raise NotImplementedError(f"{type(self).__name__} does not render")

    # ------------------------------------------------------------------------------------------------
    # Reset
    # ------------------------------------------------------------------------------------------------
    def reset(self, tensordict: TensorDictBase | None = None, *, seed: int | None = None) -> TensorDictBase:
        """Reset every env, or those a ``_reset`` entry in ``tensordict`` selects.

        A root ``"_reset"`` ``(B, 1)`` selects envs and supersedes nested ``(group, "_reset")`` entries, which
        reset each env in which any agent asks for it. Without any ``_reset`` every env is reset. For envs not
        reset, entries of ``tensordict`` come back unchanged; ``_reset`` and ``"next"`` entries are dropped.

        Args:
            tensordict: the data of the envs not reset, and the ``_reset`` entries.
            seed: ``set_seed(seed)`` first (TorchRL's and Gymnasium's ``reset(seed=...)``).

        Returns:
            A new TensorDict of batch ``(num_envs,)`` holding observations and done flags.
        """
        if tensordict is not None:
            self._check_batch(tensordict, "reset")
        mask = self._reset_mask(tensordict)
        if mask is not None:  # checked before anything is reset
            check_carried(tensordict, self._reset_leaves)
        if seed is not None:
            self.set_seed(seed)
        result = self._reset_masked(tensordict, mask)
        self._ready = True
        return result

    def _reset_masked(self, tensordict: TensorDictBase | None, mask: torch.Tensor | None) -> TensorDictBase:
        """Reset the envs ``mask`` selects (all: None) into ``tensordict``."""
        result = self._executor.reset(self, mask)
        if tensordict is None:
            return result
        return merge_rows(tensordict.exclude("next", *self.reset_keys), result, mask)

    # ------------------------------------------------------------------------------------------------
    # Step
    # ------------------------------------------------------------------------------------------------
    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Apply the actions in ``tensordict`` and write the outcome to ``tensordict["next"]``.

        Raises:
            KeyError: an action entry is missing.
            ValueError: wrong batch size; an action of the wrong shape, dtype or device; a non-finite or
                out-of-range discrete action. Nothing is applied when this is raised.
        """
        self._check_batch(tensordict, "step")
        self._check_ready("step")
        actions = check_actions(tensordict, self._action_checks, values=self._immediate)
        data = self._executor.step(self, tensordict, actions)
        set_unchecked(tensordict, "next", data, self.device)  # only now: a failed step leaves the input as it was
        return tensordict

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset the envs that are done.

        Returns:
            ``(tensordict, next_root)``: ``tensordict`` with ``"next"`` holding the terminal data, and the
            data to act on next, in which done envs already hold the first observation of a new episode.
        """
        self._check_batch(tensordict, "step")
        self._check_ready("step_and_maybe_reset")
        actions = check_actions(tensordict, self._action_checks, values=self._immediate)
        data, next_root = self._executor.step_and_reset(self, tensordict, actions)
        set_unchecked(tensordict, "next", data, self.device)
        return tensordict, next_root

    def step_mdp(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The root data of the next step after ``step(tensordict)``: ``tensordict["next"]`` without rewards,
        plus the actions taken (TorchRL's ``step_mdp`` with its defaults)."""
        return next_root(tensordict.get("next"), tensordict, self._keys["reward"], self._keys["action"])

    # ------------------------------------------------------------------------------------------------
    # Validation (construction-time facts are trusted; only the data is checked)
    # ------------------------------------------------------------------------------------------------
    def _check_ready(self, method: str) -> None:
        """The one refusal of a step (or a render) before the first ``reset()``, whatever the backend."""
        if not self._ready:
            raise RuntimeError(f"{type(self).__name__}.{method}() before reset(): call env.reset() first "
                               f"(env.rollout() resets for you)")

    def _check_batch(self, tensordict: TensorDictBase, method: str) -> None:
        # the exact type first: an ABC's isinstance costs more than the rest of the check
        if type(tensordict) is not TensorDict and not isinstance(tensordict, TensorDictBase):
            raise TypeError(f"env.{method}() takes a TensorDict, got {type(tensordict).__name__}")
        if tensordict.batch_size != self.batch_size:
            raise ValueError(
                f"env.{method}() got a TensorDict of batch size {tuple(tensordict.batch_size)}; this env has "
                f"batch size {tuple(self.batch_size)} (num_envs={self.num_envs})"
            )

    # ------------------------------------------------------------------------------------------------
    # Random actions, seeding, rollouts
    # ------------------------------------------------------------------------------------------------
    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write uniformly random actions into ``tensordict`` (a new one if None), honouring action masks.

        A ``(group, "action_mask")`` entry in ``tensordict`` restricts the group's discrete choices.
        """
        if tensordict is None:
            tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
        masks = self._action_masks
        for key in self.action_keys:
            spec = self.full_action_spec[key]
            masked = key in masks and isinstance(spec, (Categorical, OneHot))
            mask = tensordict.get(masks[key], None) if masked else None
            if mask is not None:
                action = spec.rand(generator=self._generator, mask=mask)
            else:
                action = spec.rand(generator=self._generator)
            tensordict.set(key, action)
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """``step(rand_action(tensordict))``."""
        if tensordict is None:
            tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
        return self.step(self.rand_action(tensordict))

    def set_seed(self, seed: int) -> None:
        """Make the env deterministic: same seed and same actions give identical rollouts.

        Seeds the backend and the generator behind ``rand_action``.
        """
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self._generator.manual_seed(seed)
        self._set_seed(seed)

    rollout = _rollout.rollout  # the method: env.rollout(max_steps, policy, ...)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images here (False where it raises: an env without the ``_render`` hook)."""
        return type(self)._render is not EnvBase._render

    def render(self, env_index: int = 0, *, mode: str = "rgb_array", **kwargs: Any) -> Any:
        """An image of env ``env_index``: an ``(H, W, 3)`` uint8 array for VMAS, Brax, JaxMARL (MPE, SMAX) and
        PettingZoo envs (these built with ``render_mode="rgb_array"``), never None. Its sides are even (a library's
        odd one gains a copy of its last row or column), as MP4's usual encoding needs.

        ``mode`` is TorchRL's and VMAS's keyword, taken so that their code runs unchanged: ``"rgb_array"``, the one
        mode drawn here. Other keywords are the backend's (e.g. Brax's ``height``, ``width``, ``camera``, VMAS's
        ``agent_index_focus``; ``agent_index_focus=None``, VMAS's default view, is taken by every backend).

        Raises:
            IndexError: ``env_index`` is not an int in ``[0, num_envs)``.
            ValueError: ``mode`` is not ``"rgb_array"``; a PettingZoo env built without ``render_mode="rgb_array"``.
            NotImplementedError: the env does not draw (gymnax; JaxMARL but for its MPE and SMAX envs).
        """
        if mode != "rgb_array":
            raise ValueError(f"render() draws RGB arrays only: mode must be 'rgb_array', got {mode!r} (no window "
                             f"is opened; show the frames it returns, or write them to a GIF)")
        if "agent_index_focus" in kwargs and kwargs["agent_index_focus"] is None:
            del kwargs["agent_index_focus"]  # VMAS's default view, the one every backend draws
        if self.renders:
            self._check_ready("render")
        frame = self._render(check_env_index(env_index, self.num_envs), **kwargs)
        if not isinstance(frame, np.ndarray):
            return frame
        odd = (frame.shape[0] % 2, frame.shape[1] % 2)
        if any(odd):  # H.264's colour subsampling takes even sides only (MP4 videos: TorchRL's loggers, ffmpeg)
            return np.pad(frame, ((0, odd[0]), (0, odd[1]), (0, 0)), mode="edge")
        # a library's flipped view (pyglet's rows bottom-up) as an array of its own: torch takes no negative strides
        return np.ascontiguousarray(frame)

    def close(self) -> None:
        """Release backend resources (nothing by default)."""

    def __repr__(self) -> str:
        groups = ", ".join(f"{g}: {len(m)}" for g, m in self._group_map.items())
        bound = "" if self.max_steps is not None or self._episode_bound is None else (
            f", max_episode_length={self._episode_bound}")  # a game that ends itself: its bound, not a time limit
        return (f"{type(self).__name__}(num_envs={self.num_envs}, groups={{{groups}}}, device={self.device}, "
                f"max_steps={self.max_steps}{bound})")
