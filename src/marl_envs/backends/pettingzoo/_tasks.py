"""The PettingZoo tasks installed here: MPE from ``mpe2``, the rest from PettingZoo's own registry.

Names are ``<family>/<module>`` as PettingZoo's modules spell them (``mpe/simple_spread_v3``,
``classic/tictactoe_v3``). A task is listed only if its module imports and an instance builds, so families
whose optional dependencies are missing (``pettingzoo[atari]``, ``open_spiel`` for Hanabi, ...) are left out.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..._quiet import EVERY_WARNING, Filter, ignored_warnings, quiet_import
from ..._validate import check_kwargs, did_you_mean, unknown_name

__all__ = ["SWIG_WARNINGS", "Task", "resolve_task", "tasks"]


@dataclass(frozen=True)
class Task:
    """A PettingZoo task: its name and constructors (``parallel`` is None for turn-based-only games)."""

    name: str
    aec: Callable[..., Any]
    parallel: Callable[..., Any] | None
    module: str

    def check_kwargs(self, kwargs: dict[str, Any], env: Sequence[str]) -> None:
        """Raise ``TypeError`` for a keyword the task's ``raw_env`` does not take (when its signature says), naming
        the close match among its keywords and ``env`` (the env-level keywords taken beside them), and
        ``ValueError`` for a ``render_mode`` the task does not offer."""
        raw_env = getattr(importlib.import_module(self.module), "raw_env", None)
        if raw_env is None:
            return
        check_kwargs(f"pettingzoo task {self.name!r}", raw_env, kwargs, env=env, kind="the task's")
        modes = getattr(raw_env, "metadata", {}).get("render_modes")
        mode = kwargs.get("render_mode")
        if mode is not None and modes and mode not in modes:
            raise ValueError(f"pettingzoo task {self.name!r} has no render_mode {mode!r}"
                             f"{did_you_mean(mode, modes) or ';'} its render modes are {list(modes)}")


SWIG_WARNINGS: Filter = (r"builtin type .* has no __module__ attribute", DeprecationWarning)
"""The warnings Box2D's SWIG bindings emit at import, ignored when importing PettingZoo modules: under ``-W error``
(or pytest's ``filterwarnings = error``), raised inside Box2D's extension module initialisation, they crash the
interpreter with a segmentation fault rather than an exception."""


def _entry_point(entry_point: str | Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    if callable(entry_point):
        return entry_point, entry_point.__module__
    module, _, attr = entry_point.partition(":")
    return getattr(quiet_import(module, SWIG_WARNINGS), attr), module


def _builds(creator: Callable[..., Any]) -> bool:
    """True if an instance builds (the module may import lazily what it needs, e.g. Hanabi's open_spiel)."""
    try:
        with ignored_warnings(EVERY_WARNING):  # a probe, not the user's env: third-party chatter is not theirs
            creator().close()
    except ImportError:
        return False
    return True


def _normalise(name: str) -> str:
    """``classic/tictactoe-v3`` (PettingZoo's registry id) -> ``classic/tictactoe_v3`` (its module name)."""
    return re.sub(r"-v(\d+)$", r"_v\1", name.strip())


@functools.cache
def tasks() -> dict[str, Task]:
    """Every task that builds here, by name."""
    found: dict[str, Task] = {}
    try:
        mpe = quiet_import("mpe2.all_modules", SWIG_WARNINGS)
    except ImportError:
        mpe = None
    if mpe is not None:
        for name, module in mpe.mpe_environments.items():
            found[_normalise(name)] = Task(_normalise(name), module.env, getattr(module, "parallel_env", None),
                                           module.__name__)
    pettingzoo = quiet_import("pettingzoo", SWIG_WARNINGS)
    for env_id, spec in pettingzoo.aec_registry.items():
        try:
            aec, module = _entry_point(spec.entry_point)
            parallel_spec = pettingzoo.parallel_registry.get(env_id)
            parallel = _entry_point(parallel_spec.entry_point)[0] if parallel_spec is not None else None
        except ImportError:
            continue
        if _builds(aec):
            found[_normalise(env_id)] = Task(_normalise(env_id), aec, parallel, module)
    return dict(sorted(found.items()))


def resolve_task(task: str) -> Task:
    """The task called ``task`` (``"mpe/simple_spread_v3"``, ``"simple_spread_v3"`` or ``"classic/go-v5"``)."""
    if not isinstance(task, str):
        raise TypeError(f"task must be a str like 'mpe/simple_spread_v3', got {task!r}")
    known = tasks()
    name = _normalise(task)
    if name in known:
        return known[name]
    by_module = {full.rpartition("/")[2]: full for full in known}
    if name in by_module:
        return known[by_module[name]]
    raise unknown_name("pettingzoo task", task, list(known))
