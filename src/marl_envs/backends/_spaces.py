"""Gym-style spaces -> specs: the one converter of every backend that describes its agents by spaces.

It reads a space by its class name (or a base class's) and its attributes, importing no space library, so
it takes gym's (VMAS), gymnasium's (PettingZoo), JaxMARL's and gymnax's spaces alike:

================= ================================== ===============================================================
space             attributes read                    spec (no batch dims)
================= ================================== ===============================================================
``Box``           ``shape``, ``low``, ``high``,      ``Unbounded`` if every bound is infinite, else ``Bounded``;
                  ``dtype``                          floats become float32, a bool box is ``Binary``
``Discrete``      ``n``                              ``Categorical`` ``()``, or ``OneHot`` ``(n,)``
                                                     (``categorical=False``)
``MultiDiscrete`` ``nvec`` (JaxMARL:                 ``MultiCategorical`` ``(len(nvec),)``
                  ``num_categories``)
``MultiBinary``   ``n``                              ``Binary`` int8
``Dict``          ``spaces``                         ``Composite`` of the converted subspaces
================= ================================== ===============================================================

>>> from types import SimpleNamespace
>>> Discrete = type("Discrete", (SimpleNamespace,), {})
>>> space_spec(Discrete(n=5), categorical=False)
OneHot(shape=(5,), n=5, dtype=torch.int64, device=cpu)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..specs import Binary, Bounded, Categorical, Composite, MultiCategorical, OneHot, TensorSpec, Unbounded

__all__ = ["space_spec", "value_dtype"]

_KINDS = ("Dict", "Discrete", "MultiDiscrete", "MultiBinary", "Box")
_SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary or Dict of those"


def value_dtype(dtype: Any) -> np.dtype:
    """The dtype a space's values take here: floats become float32 (the contract's), other dtypes are kept."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == "f" else dtype


def space_spec(space: Any, device: torch.device | str | None = None, *, categorical: bool = True,
               where: str = "the env") -> TensorSpec | Composite:
    """The spec, without batch dims, of the values of ``space``.

    Args:
        space: a Box, Discrete, MultiDiscrete, MultiBinary or Dict space (see the module's table).
        device: the spec's device.
        categorical: a ``Discrete`` space as ``Categorical`` indices (True) or ``OneHot`` vectors.
        where: whose space it is, for errors (``f"agent {name!r}'s action"``).

    Raises:
        TypeError: another kind of space, or a MultiDiscrete space whose ``nvec`` is not 1-d.
    """
    kind = next((cls.__name__ for cls in type(space).__mro__ if cls.__name__ in _KINDS), None)
    if kind == "Dict":
        return Composite({key: space_spec(sub, device, categorical=categorical, where=f"{where}[{key!r}]")
                          for key, sub in space.spaces.items()}, device=device)
    if kind == "Discrete":
        n = int(space.n)
        return Categorical(n, (), device=device) if categorical else OneHot(n, (n,), device=device)
    if kind == "MultiDiscrete":
        nvec = np.asarray(space.nvec if hasattr(space, "nvec") else space.num_categories)
        if nvec.ndim != 1:
            raise TypeError(f"{where} has a MultiDiscrete space with a {nvec.ndim}-d nvec ({space}); only 1-d "
                            f"nvecs are supported")
        return MultiCategorical(nvec.tolist(), (nvec.size,), device=device)
    if kind == "MultiBinary":
        return Binary(tuple(np.atleast_1d(space.n).tolist()), dtype=torch.int8, device=device)
    if kind == "Box":
        shape = tuple(int(d) for d in space.shape)
        dtype = value_dtype(getattr(space, "dtype", np.float32))
        if dtype == np.bool_:
            return Binary(shape, device=device)
        low, high = (np.array(np.broadcast_to(np.asarray(b), shape), dtype=dtype) for b in (space.low, space.high))
        torch_dtype = torch.from_numpy(np.zeros(0, dtype)).dtype
        if dtype.kind == "f" and np.isinf(low).all() and np.isinf(high).all():
            return Unbounded(shape, dtype=torch_dtype, device=device)
        return Bounded(torch.from_numpy(low), torch.from_numpy(high), shape, dtype=torch_dtype, device=device)
    raise TypeError(f"{where} has a {type(space).__name__} space ({space}); supported spaces: {_SUPPORTED}")
