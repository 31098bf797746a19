"""``Composite``, the spec of a nested TensorDict, and the done entries every level of a done spec holds.

Public as ``marl_envs.specs``, with the leaves of ``leaf_specs``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import torch
from tensordict import TensorDict, TensorDictBase

from .leaf_specs import (
    Binary, NestedKey, ShapeLike, TensorSpec, as_size, as_tuple, expanded_shape, key_str, ordinal_device,
)

__all__ = ["Composite", "DONE_KEYS", "complete_done_spec"]


class Composite:
    """A nested mapping of specs. ``shape`` is the batch shape every entry starts with.

    >>> from marl_envs.specs import Unbounded
    >>> spec = Composite(agents=Composite(observation=Unbounded((2, 3, 4)), shape=(2, 3)), shape=(2,))
    >>> spec["agents", "observation"].shape
    torch.Size([2, 3, 4])
    >>> spec.zero().batch_size
    torch.Size([2])
    """

    def __init__(self, specs: Mapping[str, TensorSpec | Composite] | None = None, *, shape: ShapeLike = (),
                 device=None, **kwargs: TensorSpec | Composite):
        self.shape = as_size(shape)
        self.device = ordinal_device(device)
        self._specs: dict[str, TensorSpec | Composite] = {}
        for name, spec in {**(specs or {}), **kwargs}.items():
            self[name] = spec

    # -- mapping --------------------------------------------------------------------------------------
    def __getitem__(self, key: NestedKey) -> TensorSpec | Composite:
        node: TensorSpec | Composite = self
        for part in as_tuple(key):
            if not isinstance(node, Composite) or part not in node._specs:
                raise KeyError(f"no spec at key {key_str(key)}; keys are {self.keys(True, True)}")
            node = node._specs[part]
        return node

    def __setitem__(self, key: NestedKey, spec: TensorSpec | Composite) -> None:
        parts = as_tuple(key)
        parent = self[parts[:-1]] if len(parts) > 1 else self
        if not isinstance(parent, Composite):
            raise KeyError(f"cannot set {key_str(key)}: {parts[:-1]} is a leaf spec")
        if not isinstance(spec, (TensorSpec, Composite)):
            raise TypeError(f"spec at {key_str(key)} must be a TensorSpec or Composite, got {type(spec).__name__}")
        if spec.shape[: len(parent.shape)] != parent.shape:
            raise ValueError(
                f"spec at {key_str(key)} has shape {tuple(spec.shape)}, which does not start with the batch "
                f"shape {tuple(parent.shape)} of its parent Composite"
            )
        parent._specs[parts[-1]] = spec

    def __delitem__(self, key: NestedKey) -> None:
        parts = as_tuple(key)
        parent = self[parts[:-1]] if len(parts) > 1 else self
        del parent._specs[parts[-1]]

    def __contains__(self, key: NestedKey) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """Keys in insertion order; nested keys are tuples."""
        out: list[NestedKey] = []
        for name, spec in self._specs.items():
            if isinstance(spec, Composite):
                if not leaves_only:
                    out.append(name)
                if include_nested:
                    out.extend((name, *as_tuple(sub)) for sub in spec.keys(True, leaves_only))
            else:
                out.append(name)
        return out

    def items(self, include_nested: bool = False, leaves_only: bool = False):
        return [(key, self[key]) for key in self.keys(include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False):
        return [self[key] for key in self.keys(include_nested, leaves_only)]

    # -- values ---------------------------------------------------------------------------------------
    def _build(self, make, shape: ShapeLike = ()) -> TensorDict:
        lead = as_size(shape)
        data = {
            name: spec._build(make, lead) if isinstance(spec, Composite) else make(spec, lead)
            for name, spec in self._specs.items()
        }
        return TensorDict(data, batch_size=(*lead, *self.shape), device=self.device)

    def rand(self, shape: ShapeLike = (), *, generator: torch.Generator | None = None) -> TensorDict:
        """Random values of every leaf, as a TensorDict of batch ``(*shape, *self.shape)``."""
        return self._build(lambda spec, lead: spec.rand(lead, generator=generator), shape)

    def zero(self, shape: ShapeLike = ()) -> TensorDict:
        return self._build(lambda spec, lead: spec.zero(lead), shape)

    def is_in(self, value: TensorDictBase) -> bool:
        """True if every leaf of the spec is present in ``value`` and lies in its spec."""
        return all(key in value.keys(True, True) and spec.is_in(value[key]) for key, spec in self.items(True, True))

    def project(self, value: TensorDictBase) -> TensorDictBase:
        out = value.clone(False)
        for key, spec in self.items(True, True):
            out[key] = spec.project(value[key])
        return out

    # -- structure ------------------------------------------------------------------------------------
    def _map(self, leaf_fn, shape: torch.Size, device) -> Composite:
        out = Composite(shape=shape, device=device)
        for name, spec in self._specs.items():
            out._specs[name] = spec._map(leaf_fn, (*shape, *spec.shape[len(self.shape) :]), device) if isinstance(
                spec, Composite
            ) else leaf_fn(spec)
        return out

    def expand(self, *shape: int | Sequence[int]) -> Composite:
        new_shape = expanded_shape(shape, self.shape, "a Composite")
        prefix = new_shape[: len(new_shape) - len(self.shape)]
        return self._map(lambda s: s.expand(*prefix, *s.shape), new_shape, self.device)

    def clone(self) -> Composite:
        return self._map(lambda s: s.clone(), self.shape, self.device)

    def to(self, device) -> Composite:
        return self._map(lambda s: s.to(device), self.shape, ordinal_device(device))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self.shape == other.shape
            and self._specs.keys() == other._specs.keys()
            and all(self._specs[k] == other._specs[k] for k in self._specs)
        )

    __hash__ = None

    def __repr__(self) -> str:
        lines = [f"Composite(shape={tuple(self.shape)}, device={self.device})"]
        for key in self.keys(True):
            depth = len(as_tuple(key))
            spec = self[key]
            label = f"Composite(shape={tuple(spec.shape)})" if isinstance(spec, Composite) else repr(spec)
            lines.append(f"{'    ' * depth}{as_tuple(key)[-1]}: {label}")
        return "\n".join(lines)


DONE_KEYS = ("done", "terminated", "truncated")


def complete_done_spec(spec: Composite) -> None:
    """Give every level of a done Composite that declares any done entry all three (``Binary`` of its batch plus
    a trailing 1), the root always, in the order done, terminated, truncated, then anything else."""
    prefixes = {()} | {key[:-1] for key in spec.keys(True, True) if isinstance(key, tuple)}
    for prefix in sorted(prefixes, key=len):
        level = spec[prefix] if prefix else spec
        declared = {name: level._specs.pop(name) for name in DONE_KEYS if name in level._specs}
        others = dict(level._specs)
        level._specs.clear()
        for name in DONE_KEYS:
            level._specs[name] = declared.get(name) or Binary((*level.shape, 1), device=spec.device)
        level._specs.update(others)
