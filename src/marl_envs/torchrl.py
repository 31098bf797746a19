"""Use any marl-envs env from TorchRL: collectors, transforms, batched envs and losses.

``to_torchrl(env)`` wraps a marl-envs env (a built-in backend's or a user's env on the ``EnvBase`` hook) in
``TorchRLEnv``, a ``torchrl.envs.EnvBase``. It has the same keys, group map, batch size ``(num_envs,)`` and
device; its specs are the env's, converted to ``torchrl.data`` classes. Steps and resets are handed to the
wrapped env as they come: the TensorDicts pass through, and TorchRL's ``_reset`` entries (root or per group)
reach the env's vectorized partial reset.

Needs the ``torchrl`` extra (``pip install 'marl-envs[torchrl]'``; TorchRL 0.14 runs on tensordict 0.14).
``import marl_envs`` never imports TorchRL; importing this module does.

>>> import marl_envs
>>> from marl_envs.torchrl import to_torchrl
>>> env = to_torchrl(marl_envs.make("vmas/balance", num_envs=4, n_agents=3))
>>> env.rollout(5, break_when_any_done=False)["next", "agents", "reward"].shape
torch.Size([4, 5, 3, 1])
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

try:
    import torchrl.data as rl_specs
    from torchrl.envs import EnvBase as _TorchRLEnvBase
except ImportError as err:  # pragma: no cover - exercised by the import test in the core venv
    raise ImportError(
        f"marl_envs.torchrl needs TorchRL, which could not be imported ({err}); "
        "install it with: pip install 'marl-envs[torchrl]'"
    ) from err

from groupings import GroupMap

from . import specs
from ._env import EnvBase

__all__ = ["TorchRLEnv", "to_torchrl", "to_torchrl_spec"]


def to_torchrl_spec(spec: specs.TensorSpec | specs.Composite) -> rl_specs.TensorSpec:
    """The ``torchrl.data`` spec equal to a ``marl_envs.specs`` one (same shape, dtype, device, bounds, mask).

    >>> from marl_envs import specs
    >>> spec = to_torchrl_spec(specs.Categorical(5, shape=(4, 3)))
    >>> type(spec).__name__, spec.shape, spec.n
    ('Categorical', torch.Size([4, 3]), 5)

    Raises:
        TypeError: ``spec`` is of a class TorchRL has no counterpart for.
    """
    shape, device = spec.shape, spec.device
    if isinstance(spec, specs.Composite):
        return rl_specs.Composite(
            {name: to_torchrl_spec(sub) for name, sub in spec.items()}, shape=shape, device=device
        )
    if isinstance(spec, specs.Bounded):
        return rl_specs.Bounded(low=spec.low, high=spec.high, shape=shape, dtype=spec.dtype, device=device)
    if isinstance(spec, specs.Unbounded):
        return rl_specs.Unbounded(shape=shape, dtype=spec.dtype, device=device)
    if isinstance(spec, specs.Categorical):
        return rl_specs.Categorical(spec.n, shape=shape, dtype=spec.dtype, device=device, mask=spec.mask)
    if isinstance(spec, specs.OneHot):
        return rl_specs.OneHot(spec.n, shape=shape, dtype=spec.dtype, device=device, mask=spec.mask)
    if isinstance(spec, specs.Binary):
        return rl_specs.Binary(shape=shape, dtype=spec.dtype, device=device)
    if isinstance(spec, specs.MultiCategorical):
        return rl_specs.MultiCategorical(spec.nvec, shape=shape, dtype=spec.dtype, device=device)
    raise TypeError(
        f"no torchrl.data counterpart for the spec class {type(spec).__name__}; to_torchrl converts Composite, "
        "Bounded, Unbounded, Categorical, OneHot, Binary and MultiCategorical"
    )


class TorchRLEnv(_TorchRLEnvBase):
    """A marl-envs env seen as a ``torchrl.envs.EnvBase``; build it with ``to_torchrl(env)``.

    TorchRL's ``step`` / ``reset`` / ``step_and_maybe_reset`` / ``rollout`` run their usual logic around the
    hooks, which call the wrapped env's public ``step`` and ``reset``: actions are checked by the wrapped env
    (its errors reach the caller unchanged), ``_reset`` entries select the envs to reset, and the data is
    never copied on the way. ``rand_action`` is the wrapped env's, so action masks in the data are honoured.

    Attributes:
        env: the wrapped marl-envs env.

    Differences from the wrapped env a TorchRL user may meet:
        - a ``"_step"`` entry (TorchRL's partial step, written by ``rollout(break_when_all_done=True)``) still
          steps every env, like TorchRL's own VMAS wrapper; TorchRL's rollout freezes the finished envs' data.
        - the device is fixed at construction: ``to(other_device)`` raises; build the env on the device.
    """

    def __init__(self, env: EnvBase):
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"to_torchrl takes a marl_envs.EnvBase (e.g. marl_envs.make('vmas/balance', num_envs=8)), "
                f"got {type(env).__name__}"
            )
        super().__init__(device=env.device, batch_size=env.batch_size,
                         allow_done_after_reset=env.allow_done_after_reset)
        self.env = env
        self.full_observation_spec = to_torchrl_spec(env.full_observation_spec)
        self.full_action_spec = to_torchrl_spec(env.full_action_spec)
        self.full_reward_spec = to_torchrl_spec(env.full_reward_spec)
        self.full_done_spec = to_torchrl_spec(env.full_done_spec)
        self.full_state_spec = to_torchrl_spec(env.full_state_spec)

    # -- what TorchRL's multi-agent wrappers expose ---------------------------------------------------
    @property
    def group_map(self) -> GroupMap:
        """Group name -> agent names, as the wrapped env's."""
        return self.env.group_map

    @property
    def agent_names(self) -> list[str]:
        return self.env.agent_names

    @property
    def n_agents(self) -> int:
        return self.env.n_agents

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    # -- TorchRL's hooks ------------------------------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.env.step(tensordict)  # writes tensordict["next"]; TorchRL's step sets it again
        return tensordict.pop("next")

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if kwargs:
            raise TypeError(
                f"reset() got keyword arguments {sorted(kwargs)}; marl-envs envs take none "
                "(seed with env.set_seed(seed), select envs with a '_reset' entry)"
            )
        return self.env.reset(tensordict)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            raise TypeError("marl-envs envs need an int seed, got None")
        self.env.set_seed(int(seed))

    def _assert_tensordict_shape(self, tensordict: TensorDictBase) -> None:
        """The wrapped env checks the batch size itself, with its own message."""

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Random actions from the wrapped env, honouring the ``action_mask`` entries of ``tensordict``."""
        return self.env.rand_action(tensordict)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.env.close()
        super().close(raise_if_closed=raise_if_closed)

    def to(self, device) -> TorchRLEnv:
        if torch.device(device) != self.device:
            raise ValueError(
                f"{self!r} lives on {self.device} and cannot move to {device}; build the marl-envs env with "
                f"device={str(device)!r} and wrap that"
            )
        return self

    def __repr__(self) -> str:
        return f"TorchRLEnv(env={self.env!r}, batch_size={tuple(self.batch_size)}, device={self.device})"


def to_torchrl(env: EnvBase) -> TorchRLEnv:
    """Wrap a marl-envs env as a ``torchrl.envs.EnvBase`` (see ``TorchRLEnv``).

    Args:
        env: any marl-envs env (``marl_envs.make(...)`` or a user env on the ``EnvBase`` hook).

    Returns:
        A ``TorchRLEnv`` with the env's keys, group map, batch size, device and converted specs.

    Raises:
        TypeError: ``env`` is not a ``marl_envs.EnvBase``.
    """
    return TorchRLEnv(env)
