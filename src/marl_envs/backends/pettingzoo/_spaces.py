"""The numpy plumbing of one PettingZoo agent's values, read from its gymnasium spaces.

An agent's observation becomes a list of :class:`Leaf` (one per array inside a possibly nested ``Dict``
space), each written into a ``(B, n, *shape)`` numpy buffer of its group; an agent's action space becomes an
:class:`ActionCodec` turning the group's action tensor into the per-instance, per-agent values PettingZoo takes.
The spaces' specs come from the core's converter (``marl_envs.backends._spaces.space_spec``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from .._spaces import space_spec, value_dtype

__all__ = ["ACTION_MASK", "ActionCodec", "Leaf", "ObsSplit", "obs_split"]

ACTION_MASK = "action_mask"


@dataclass(frozen=True)
class Leaf:
    """One array inside an agent's observation: read at ``path``, stored at ``(group, *key)``."""

    path: tuple[str, ...]
    key: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int | np.ndarray | None = None  # a nonzero ``start`` of Discrete / MultiDiscrete (shifted to 0)

    @property
    def whole(self) -> bool:
        """The leaf is the agent's observation as it comes (no path into it, no shift): ``read`` is the identity."""
        return not self.path and self.offset is None

    def read(self, value):
        for part in self.path:
            value = value[part]
        return value if self.offset is None else value - self.offset


def _leaves(space: spaces.Space, path: tuple[str, ...], key: tuple[str, ...]) -> list[Leaf]:
    if isinstance(space, spaces.Dict):
        return [leaf for name, sub in space.spaces.items() for leaf in _leaves(sub, (*path, name), (*key, name))]
    if isinstance(space, spaces.Discrete):
        return [Leaf(path, key, (), np.dtype(np.int64), int(space.start) or None)]
    if isinstance(space, spaces.MultiDiscrete):
        start = np.asarray(space.start)
        return [Leaf(path, key, space.shape, np.dtype(np.int64), start if start.any() else None)]
    if isinstance(space, spaces.MultiBinary):
        return [Leaf(path, key, tuple(np.atleast_1d(space.n).tolist()), np.dtype(np.int8))]
    if isinstance(space, spaces.Box):
        return [Leaf(path, key, space.shape, value_dtype(space.dtype))]
    raise TypeError(f"an observation has a {type(space).__name__} space ({space}), not a gymnasium one")


@dataclass(frozen=True)
class ObsSplit:
    """How one agent's observation splits into the group entries.

    ``space`` is the observation space without the action mask. A ``Dict`` holding only ``observation`` and
    ``action_mask`` (PettingZoo's classic games) is flattened to ``(group, "observation")``; other ``Dict``
    spaces stay nested under ``(group, "observation", ...)``.
    """

    space: spaces.Space
    leaves: tuple[Leaf, ...]
    mask_leaf: Leaf | None  # where the action mask is read from the observation, if it is there


def obs_split(space: spaces.Space, where: str = "the observation") -> ObsSplit:
    """``space`` split into its group entries (``where``: whose observation it is, for errors)."""
    space_spec(space, where=where)  # rejects unsupported spaces with a clear message
    mask_leaf = None
    if isinstance(space, spaces.Dict) and ACTION_MASK in space.spaces:
        mask_leaf = Leaf((ACTION_MASK,), (ACTION_MASK,), tuple(space[ACTION_MASK].shape), np.dtype(bool))
        rest = {k: v for k, v in space.spaces.items() if k != ACTION_MASK}
        if list(rest) == ["observation"]:
            inner = rest["observation"]
            return ObsSplit(inner, tuple(_leaves(inner, ("observation",), ("observation",))), mask_leaf)
        space = spaces.Dict(rest)
    return ObsSplit(space, tuple(_leaves(space, (), ("observation",))), mask_leaf)


class ActionCodec:
    """Turns a group's action entry (tensor or TensorDict, batch ``(B, n)``) into ``values[i][j]``, the values
    PettingZoo takes, through one array per group (``wire``; not for ``Dict`` spaces) that can sit in a buffer."""

    def __init__(self, space: spaces.Space, categorical: bool):
        self.space = space
        self.categorical = categorical
        self.children = None
        if isinstance(space, spaces.Dict):
            self.children = {key: ActionCodec(sub, categorical) for key, sub in space.spaces.items()}
            self.wire_shape = self.wire_dtype = None  #: one agent's wire array; None: no wire (Dict)
        elif isinstance(space, spaces.Discrete):
            self.wire_shape, self.wire_dtype = (), np.dtype(np.int64)
        else:  # Box, MultiDiscrete, MultiBinary: the space's own shape and dtype
            self.wire_shape, self.wire_dtype = tuple(space.shape), np.dtype(space.dtype)

    def decode(self, action) -> Sequence[Sequence]:
        if self.children is not None:
            parts = {key: codec.decode(action.get(key)) for key, codec in self.children.items()}
            B, n = action.batch_size[:2]
            return [[{key: part[i][j] for key, part in parts.items()} for j in range(n)] for i in range(B)]
        return self.unwire(self.wire(action))

    def wire(self, action: torch.Tensor) -> np.ndarray:
        """``(B, n, *wire_shape)`` values of ``wire_dtype``: indices (shifted by ``start``) or the space's values."""
        space = self.space
        action = action.detach()
        if isinstance(space, spaces.Discrete):
            if not self.categorical:
                action = action.argmax(-1)
            if space.start:
                action = action + int(space.start)
            return action.cpu().numpy()
        values = action.cpu().numpy()
        if isinstance(space, spaces.MultiDiscrete):
            values = values + np.asarray(space.start)
        return values.astype(space.dtype)

    def unwire(self, values: np.ndarray) -> Sequence[Sequence]:
        """``values[i][j]`` from a wire array the caller owns: Python ints for ``Discrete`` (as a hand-written
        PettingZoo loop passes them), else views of ``values``."""
        return values.tolist() if isinstance(self.space, spaces.Discrete) else values
