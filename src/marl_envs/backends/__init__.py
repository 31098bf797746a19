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


def lazy_names(package: str, sources: Mapping[str, Iterable[str]], *, default: str | None = None,
               before: Callable[[], Any] | None = None, values: Mapping[str, Callable[[], Any]] | None = None
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``sources[module]`` is read from ``module``
    (relative to ``package``), imported when the name is first asked for, and kept in the package.

    Args:
        default: the module (relative to ``package``) any other public name is read from; its ``__all__`` is
            listed by ``__dir__``. Without it, a name not in ``sources`` is an ``AttributeError``.
        before: called before the first import of each name (a backend's check that its libraries are installed,
            whose error names the pip extra).
        values: names whose value a function gives (a backend's ``make_env``).
    """
    where = {name: module for module, names in sources.items() for name in names}
    values = dict(values or {})
    namespace = vars(sys.modules[package])

    def getattr_(name: str) -> Any:
        # private names and submodules are not served: Python's import looks for a submodule here
        if name.startswith("_") or (default is None and name not in where and name not in values):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before()
        try:
            value = (values[name]() if name in values
                     else getattr(importlib.import_module(where.get(name, default), package), name))
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        listed = getattr(importlib.import_module(default, package), "__all__", ()) if default else ()
        return sorted({*namespace, *where, *values, *listed})

    return getattr_, dir_
