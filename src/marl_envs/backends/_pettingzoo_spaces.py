"""Gymnasium spaces of PettingZoo agents -> ``marl_envs.specs``, and the numpy plumbing of one agent's values.

An agent's observation becomes a list of :class:`Leaf` (one per array inside a possibly nested ``Dict``
space), each written into a ``(B, n, *shape)`` numpy buffer of its group; an agent's action space becomes an
:class:`ActionCodec` turning the group's action tensor into the per-instance, per-agent values PettingZoo takes.
Agents of one group share a :func:`signature` (kinds, shapes, dtypes; bounds may differ and are stacked).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces

from ..specs import Binary, Bounded, Categorical, Composite, MultiCategorical, OneHot, TensorSpec, Unbounded

__all__ = ["ActionCodec", "Leaf", "ObsLayout", "obs_layout", "signature", "stacked_spec"]

ACTION_MASK = "action_mask"
_SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary or Dict of those"


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    """Floats become float32 (the contract's dtype); integer and bool spaces keep their dtype."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return torch.float32
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def _numpy_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if np.dtype(dtype).kind == "f" else np.dtype(dtype)


def _unsupported(space: spaces.Space, where: str) -> TypeError:
    return TypeError(f"{where} has a {type(space).__name__} space ({space}); supported spaces: {_SUPPORTED}")


def signature(space: spaces.Space, where: str = "space") -> Hashable:
    """What agents sharing a group must share: space kinds, shapes, dtypes, sizes (not Box bounds)."""
    if isinstance(space, spaces.Box):
        return ("box", space.shape, np.dtype(space.dtype).str)
    if isinstance(space, spaces.Discrete):
        return ("discrete", int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return ("multidiscrete", tuple(np.asarray(space.nvec).reshape(-1).tolist()), space.nvec.shape)
    if isinstance(space, spaces.MultiBinary):
        return ("multibinary", tuple(np.atleast_1d(space.n).tolist()))
    if isinstance(space, spaces.Dict):
        return ("dict", tuple((key, signature(sub, f"{where}[{key!r}]")) for key, sub in space.spaces.items()))
    raise _unsupported(space, where)


def _leaf_spec(spaces_: Sequence[spaces.Space], lead: tuple[int, ...], device, *, action: bool,
               categorical: bool) -> TensorSpec | Composite:
    """One spec of shape ``(*lead, n_agents, ...)`` stacking the same-signature ``spaces_`` of a group."""
    first, n = spaces_[0], len(spaces_)
    batch = (*lead, n)
    if isinstance(first, spaces.Dict):
        return Composite(
            {key: _leaf_spec([s[key] for s in spaces_], lead, device, action=action, categorical=categorical)
             for key in first.spaces},
            shape=batch, device=device,
        )
    if isinstance(first, spaces.Discrete):
        if action and not categorical:
            return OneHot(int(first.n), shape=(*batch, int(first.n)), device=device)
        return Categorical(int(first.n), shape=batch, device=device)
    if isinstance(first, spaces.MultiDiscrete):
        nvec = np.asarray(first.nvec)
        if nvec.ndim != 1:
            raise TypeError(f"MultiDiscrete spaces with a {nvec.ndim}-d nvec are not supported (got {first})")
        return MultiCategorical(nvec.tolist(), shape=(*batch, nvec.size), device=device)
    if isinstance(first, spaces.MultiBinary):
        return Binary((*batch, *np.atleast_1d(first.n).tolist()), dtype=torch.int8, device=device)
    if isinstance(first, spaces.Box):
        dtype = _torch_dtype(first.dtype)
        shape = (*batch, *first.shape)
        if dtype == torch.bool:
            return Binary(shape, device=device)
        low = np.stack([np.broadcast_to(s.low, first.shape) for s in spaces_])
        high = np.stack([np.broadcast_to(s.high, first.shape) for s in spaces_])
        if dtype.is_floating_point and np.isinf(low).all() and np.isinf(high).all():
            return Unbounded(shape, dtype=dtype, device=device)
        as_tensor = lambda x: torch.as_tensor(x.astype(_numpy_dtype(first.dtype)), device=device)  # noqa: E731
        return Bounded(as_tensor(low), as_tensor(high), shape=shape, dtype=dtype, device=device)
    raise _unsupported(first, "agent")


def stacked_spec(spaces_: Sequence[spaces.Space], num_envs: int, device, *, action: bool = False,
                 categorical: bool = True) -> TensorSpec | Composite:
    """Spec of shape ``(num_envs, n_agents, ...)`` for the group whose agents have ``spaces_``."""
    return _leaf_spec(spaces_, (num_envs,), device, action=action, categorical=categorical)


@dataclass(frozen=True)
class Leaf:
    """One array inside an agent's observation: read at ``path``, stored at ``(group, *key)``."""

    path: tuple[str, ...]
    key: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int | np.ndarray | None = None  # a nonzero ``start`` of Discrete / MultiDiscrete (shifted to 0)

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
        return [Leaf(path, key, space.shape, _numpy_dtype(space.dtype))]
    raise _unsupported(space, "observation")


@dataclass(frozen=True)
class ObsLayout:
    """How one agent's observation splits into the group entries.

    ``space`` is the observation space without the action mask. A ``Dict`` holding only ``observation`` and
    ``action_mask`` (PettingZoo's classic games) is flattened to ``(group, "observation")``; other ``Dict``
    spaces stay nested under ``(group, "observation", ...)``.
    """

    space: spaces.Space
    leaves: tuple[Leaf, ...]
    mask_leaf: Leaf | None  # where the action mask is read from the observation, if it is there


def obs_layout(space: spaces.Space) -> ObsLayout:
    signature(space, "observation")  # rejects unsupported spaces with a clear message
    mask_leaf = None
    if isinstance(space, spaces.Dict) and ACTION_MASK in space.spaces:
        mask_space = space[ACTION_MASK]
        mask_leaf = Leaf((ACTION_MASK,), (ACTION_MASK,), tuple(mask_space.shape), np.dtype(bool))
        rest = {k: v for k, v in space.spaces.items() if k != ACTION_MASK}
        if list(rest) == ["observation"]:
            inner = rest["observation"]
            return ObsLayout(inner, tuple(_leaves(inner, ("observation",), ("observation",))), mask_leaf)
        space = spaces.Dict(rest)
    return ObsLayout(space, tuple(_leaves(space, (), ("observation",))), mask_leaf)


class ActionCodec:
    """Turns a group's action entry (tensor or TensorDict, batch ``(B, n)``) into ``values[i][j]``."""

    def __init__(self, space: spaces.Space, categorical: bool):
        self.space = space
        self.categorical = categorical
        if isinstance(space, spaces.Dict):
            self.children = {key: ActionCodec(sub, categorical) for key, sub in space.spaces.items()}

    def decode(self, action) -> Sequence[Sequence]:
        space = self.space
        if isinstance(space, spaces.Dict):
            parts = {key: codec.decode(action.get(key)) for key, codec in self.children.items()}
            B, n = action.batch_size[:2]
            return [[{key: part[i][j] for key, part in parts.items()} for j in range(n)] for i in range(B)]
        action = action.detach()
        if isinstance(space, spaces.Discrete):
            if not self.categorical:
                action = action.argmax(-1)
            if space.start:
                action = action + int(space.start)
            return action.tolist()  # Python ints, as a hand-written PettingZoo loop passes them
        values = action.cpu().numpy()
        if isinstance(space, spaces.MultiDiscrete):
            return (values + np.asarray(space.start)).astype(space.dtype)
        return values.astype(space.dtype, copy=True)  # Box / MultiBinary: the env owns its copy
