"""The backends: one package each, declaring itself in its ``__init__`` (``BACKEND``, a
``marl_envs.registry.Backend``), and the helpers they share (``jax``: the core of the JAX families; ``_spaces``,
``_quiet``, ``_mujoco``, ``_named``). ``marl_envs.registry`` imports every package here to read the records: a
package imports nothing heavy until one of its names is read (``lazy_names``, ``Backend.lazy_attributes``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, sources: Mapping[str, Iterable[str]]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``sources[module]`` is read from ``module``
    (relative to ``package``), imported when the name is first asked for."""
    where = {name: module for module, names in sources.items() for name in names}
    namespace = vars(sys.modules[package])

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(where[name], package), name)
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *where})

    return getattr_, dir_
