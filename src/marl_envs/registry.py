"""Build environments by name: ``make("vmas/balance", num_envs=64)``.

Backend names are derived from the installed libraries (``marl_envs.backends.<backend>.env_names()``), which
are only imported when a name of theirs is asked for. Each backend module provides ``env_names()`` and
``make_env(name, **kwargs)``. A backend declared ``checks_names`` rejects unknown names in its ``make_env``
itself: ``make`` then skips listing its names (listing Brax's envs imports Brax, which a Brax env loaded from
the compile cache does not need). Users add their own factories with ``register``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import _names
from ._messages import shell_safe, unknown_name

if TYPE_CHECKING:  # torch is imported by what builds envs, not by listing names (marl-envs list)
    from ._env import EnvBase

__all__ = ["available_backends", "available_envs", "backend_installed", "backend_module", "make", "register"]


@dataclass(frozen=True)
class _Backend:
    module: str
    packages: tuple[str, ...]
    extra: str
    checks_names: bool = False  # its make_env rejects unknown names (with close matches) itself


_BACKENDS: dict[str, _Backend] = {
    "vmas": _Backend("marl_envs.backends.vmas", ("vmas",), "vmas"),
    "brax": _Backend("marl_envs.backends.brax", ("jax", "brax"), "brax", checks_names=True),
    "pettingzoo": _Backend("marl_envs.backends.pettingzoo", ("pettingzoo",), "pettingzoo"),
    "jaxmarl": _Backend("marl_envs.backends.jaxmarl", ("jax", "jaxmarl"), "jaxmarl", checks_names=True),
    "gymnax": _Backend("marl_envs.backends.gymnax", ("jax", "gymnax"), "gymnax"),
    "jumanji": _Backend("marl_envs.backends.jumanji", ("jax", "jumanji"), "jumanji", checks_names=True),
    "playground": _Backend("marl_envs.backends.playground", ("jax", "brax", "mujoco_playground"), "playground",
                           checks_names=True),
    # every registry id builds by name; the listed names are the EPyMARL benchmark's tasks
    "lbforaging": _Backend("marl_envs.backends.lbforaging", ("pettingzoo", "lbforaging"), "lbforaging",
                           checks_names=True),
    "rware": _Backend("marl_envs.backends.rware", ("pettingzoo", "rware"), "rware", checks_names=True),
    "magent2": _Backend("marl_envs.backends.magent2", ("pettingzoo", "magent2"), "magent2", checks_names=True),
    "mamujoco": _Backend("marl_envs.backends.mamujoco", ("pettingzoo", "gymnasium_robotics"), "mamujoco",
                         checks_names=True),
    "openspiel": _Backend("marl_envs.backends.openspiel", ("pettingzoo", "pyspiel"), "openspiel", checks_names=True),
}
_USER_ENVS: dict[str, Callable[..., EnvBase]] = {}
_NAME_CACHE: dict[str, list[str]] = {}


def available_backends() -> list[str]:
    """The built-in backends, installed or not (``["vmas", "brax", "pettingzoo", ...]``)."""
    return list(_BACKENDS)


def backend_installed(backend: str) -> bool:
    """True if the libraries ``backend`` needs can be imported."""
    spec = _backend(backend)
    return all(importlib.util.find_spec(package) is not None for package in spec.packages)


def _backend(backend: str) -> _Backend:
    try:
        return _BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; backends are {sorted(_BACKENDS)}") from None


def backend_module(backend: str) -> ModuleType:
    """The backend's module (``marl_envs.backends.<backend>``), imported now.

    Raises:
        ValueError: unknown backend.
        ImportError: its libraries are not installed (the message names the pip extra).
    """
    spec = _backend(backend)
    if not backend_installed(backend):
        missing = [p for p in spec.packages if importlib.util.find_spec(p) is None]
        raise ImportError(
            f"the {backend} backend needs {', '.join(missing)}, which is not installed; "
            f"install it with: pip install 'marl-envs[{spec.extra}]'"
        )
    return importlib.import_module(spec.module)


def _backend_names(backend: str) -> list[str]:
    """``backend``'s names (``"vmas/balance"``, ...), without importing it where the snapshot or the user cache
    has them for the installed versions (``marl_envs._names``)."""
    if backend not in _NAME_CACHE:
        if not backend_installed(backend):
            backend_module(backend)  # raises the ImportError that names the pip extra
        versions = _names.stamp(_BACKENDS[backend].extra)
        names = _names.lookup(backend, versions)
        if names is None:
            names = _live_names(backend)
            _names.remember(backend, versions, names)
        _NAME_CACHE[backend] = names
    return _NAME_CACHE[backend]


def _live_names(backend: str) -> list[str]:
    """``backend``'s names as its module lists them (imports it)."""
    return sorted(f"{backend}/{name}" for name in backend_module(backend).env_names())


def available_envs(backend: str | None = None) -> list[str]:
    """Sorted names ``make`` accepts: every installed backend's and the user-registered ones.

    No backend is imported where the names of its installed version are known (a snapshot shipped in the
    package, or a cache in ``~/.cache/marl_envs/names`` from an earlier listing): see ``marl_envs._names``.

    Args:
        backend: list only this backend's envs (one of ``available_backends()``), or ``"user"``
            for the registered ones.

    Raises:
        ValueError: unknown backend.
        ImportError: ``backend`` is named but not installed (the message gives the pip extra).
    """
    if backend == "user":
        return sorted(_USER_ENVS)
    if backend is not None:
        return list(_backend_names(backend))
    names = list(_USER_ENVS)
    for name in _BACKENDS:
        if backend_installed(name):
            names.extend(_backend_names(name))
    return sorted(names)


def _unknown(name: str, candidates: list[str]) -> ValueError:
    shown = ", ".join(candidates[:12]) + (", ..." if len(candidates) > 12 else "")
    return unknown_name("env", name, candidates, f"{shown} (marl_envs.available_envs() lists them all)")


def make(name: str, **kwargs: Any) -> EnvBase:
    """Build an environment by name.

    >>> env = make("vmas/balance", num_envs=4, n_agents=3)
    >>> env.group_map
    {'agents': ['agent_0', 'agent_1', 'agent_2']}

    Args:
        name: ``"<backend>/<env>"`` (see ``available_envs()``) or a name given to ``register``.
        **kwargs: forwarded to the backend's env class (``num_envs``, ``device``, ``max_steps``, scenario
            keywords ...).

    Raises:
        ValueError: unknown name (the message lists close matches).
        ImportError: the backend's library is not installed (the message names the pip extra).
        TypeError: a keyword the env does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"env name must be a str like 'vmas/balance', got {name!r}")
    if name in _USER_ENVS:
        from ._validate import check_kwargs

        factory = _USER_ENVS[name]
        check_kwargs(repr(name), factory, kwargs)
        return factory(**kwargs)
    backend, _, env_name = name.partition("/")
    if backend in _BACKENDS:
        name = shell_safe(name)
        env_name = name.partition("/")[2]
        module = backend_module(backend)
        if not _BACKENDS[backend].checks_names:
            names = _backend_names(backend)
            if name not in names:
                raise _unknown(name, names)
        return module.make_env(env_name, **kwargs)
    raise _unknown(name, available_envs())


def register(name: str, factory: Callable[..., EnvBase], *, overwrite: bool = False) -> None:
    """Make ``factory(**kwargs)`` buildable as ``make(name, **kwargs)``.

    Raises:
        ValueError: ``name`` is empty, already registered (pass ``overwrite=True``), or in a backend's namespace.
        TypeError: ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"env name must be a non-empty str, got {name!r}")
    backend = name.partition("/")[0]
    if "/" in name and backend in _BACKENDS:
        raise ValueError(f"names starting with {backend + '/'!r} belong to the {backend} backend; pick another prefix")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable (a class or function returning an env), got {factory!r}")
    if name in _USER_ENVS and not overwrite:
        raise ValueError(f"env {name!r} is already registered; pass overwrite=True to replace it")
    _USER_ENVS[name] = factory
