"""Build environments by name: ``make("vmas/balance", num_envs=64)``; the backends and how they declare themselves.

A backend is a package under ``marl_envs.backends`` that declares itself once, in its ``__init__``: a
:class:`Backend` record named ``BACKEND`` (its libraries, its pip extra, the env the doctor checks it with, its
reference loops for the bench, the classes ``marl_envs`` exports). The registry finds the records by walking
``marl_envs.backends``, whose packages import nothing heavy: a backend's env classes live in its ``_env`` module,
imported when one of its envs is built by name, when its names are listed live, or when one of its classes is
read (``record.exports``). That module provides ``env_names()`` and the record's ``env_class``, which builds
an env by name (``record.make_env``). A name is checked in one place: the backend's env class refuses a name it
does not build, with close matches, whether it was reached through ``make`` or built directly (``make`` checks
no list of its own: a backend builds names beyond the ones it lists, such as every Gymnasium id of LBF or a
robot's splits, and has the reasons why a listed library env cannot be built here). Users add their own
factories with ``register``, and whole backends with ``register_backend``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._core import names as _names
from ._core.messages import UnknownEnvName, shell_safe, unknown_env, unknown_family, unknown_full_name

if TYPE_CHECKING:  # torch is imported by what builds envs, not by listing names (marl-envs list)
    from ._core.env import EnvBase

__all__ = [
    "Backend", "available_backends", "available_envs", "backend_installed", "backend_record", "backends",
    "backend_module", "make", "register", "register_backend", "UnknownEnvName", "unknown_env",
]


@dataclass(frozen=True)
class Backend:
    """A backend's declaration: all that the registry, ``marl-envs doctor``, ``marl-envs bench``, the CLI and the
    top-level imports know of it, read without importing its libraries.

    Attributes:
        module: the package that declares it (its ``__name__``); its env classes and ``env_names()`` live in
            ``<module>._env``.
        packages: the import names of the libraries it needs.
        extra: the pip extra installing them (``pip install 'marl-envs[<extra>]'``).
        name: the prefix of its env names (``"vmas"`` in ``"vmas/balance"``); the last part of ``module`` if not
            given.
        env_class: the class of ``<module>._env`` that builds its envs by name: ``make("vmas/balance", **kwargs)``
            is ``VmasEnv("balance", **kwargs)`` (``make_env``). It refuses a name it does not build with a
            ``ValueError`` naming close matches (``marl_envs.registry.unknown_env``): the one check of a name.
        check_env: the env ``marl-envs doctor`` builds and steps (small and quick to build) and its keywords.
        example: an env of the family built to draw where its family can, and its keywords: what the tests and
            docs that take one env per family build (``check_env`` if not given).
        bench: where its ``marl_envs.bench.References`` are (the raw reference loops ``marl-envs bench`` times it
            against): ``"<python module>:<name>"``, or a module whose ``BENCH`` they are; ``<module>.bench`` if not
            given.
        exports: its classes importable from the top level (``from marl_envs import VmasEnv``).
        host_wait: ``marl-envs doctor`` checks on a GPU that its step never waits for the device; with a reason
            instead of True, a wait is by design (reported as a note, not a failure).
        check: ``"<python module>:<function>"``, ``function(name, kwargs)`` refusing what ``env_class(name,
            **kwargs)`` would refuse for its name or values, from what the backend declares (a module importing
            neither torch nor JAX nor the library): ``make_env`` runs it before importing ``<module>._env``, so a
            misspelled name or value is refused at once rather than after seconds of imports.
        title: the family's name in prose (``"MuJoCo Playground"``); ``name`` if not given.
        docs: its page of the docs, relative to ``docs/`` (a page it may share with other families);
            ``backends/<name>.md`` if not given.
        distributions: the third-party distributions whose versions decide what its envs do (beside torch): the
            bench's records, the catalogue's entries and the doctor's versions name them.
        builds_on: the packages of ``marl_envs.backends`` whose code its envs run besides its own (``("jax",)``).
        counterpart: ``"<python module>:<function>"``, ``function(family, name)`` saying what of its envs comes
            nearest to ``<family>/<name>``, an env of a library that is no family here (``smac/3m``: SMAX's map
            ``3m``), or None; in a module importing neither torch nor JAX nor the library: ``make`` asks it when it
            refuses a name of an unknown family.
    """

    module: str
    packages: tuple[str, ...]
    extra: str
    name: str = ""
    env_class: str = ""
    check_env: tuple[str, Mapping[str, Any]] | None = None
    example: tuple[str, Mapping[str, Any]] | None = None
    bench: str = ""
    exports: tuple[str, ...] = ()
    host_wait: bool | str = False
    check: str = ""
    title: str = ""
    docs: str = ""
    distributions: tuple[str, ...] = ()
    builds_on: tuple[str, ...] = ()
    counterpart: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.module.rpartition(".")[2])
        if not self.bench:
            object.__setattr__(self, "bench", f"{self.module}.bench")
        if not self.title:
            object.__setattr__(self, "title", self.name)
        if not self.docs:
            object.__setattr__(self, "docs", f"backends/{self.name}.md")
        if self.example is None:
            object.__setattr__(self, "example", self.check_env)

    def implementation(self) -> ModuleType:
        """``<module>._env``, imported now (``backend_module`` checks first that its libraries are installed)."""
        return importlib.import_module(f"{self.module}._env")

    def make_env(self, name: str, **kwargs: Any) -> EnvBase:
        """``env_class(name, **kwargs)``: the factory behind ``marl_envs.make("<backend>/<name>", ...)``."""
        if not self.env_class:
            raise TypeError(f"the {self.name} backend's record names no env_class to build {name!r} with")
        if self.check:
            _imported(self.check)(name, kwargs)
        return getattr(self.implementation(), self.env_class)(name, **kwargs)

    def nearest(self, family: str, name: str) -> str | None:
        """What of its envs comes nearest to ``<family>/<name>`` of another library (``counterpart``), or None."""
        return _imported(self.counterpart)(family, name) if self.counterpart else None

    def references(self) -> Any:
        """Its ``marl_envs.bench.References`` (``bench``), imported now."""
        return _imported(self.bench, "BENCH")

    def live_names(self) -> list[str]:
        """Its names as its ``env_names()`` lists them (imports it), sorted, with the prefix."""
        return sorted(f"{self.name}/{name}" for name in self.implementation().env_names())

    def lazy_attributes(self, sources: Mapping[str, Iterable[str]] | None = None
                        ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
        """``(__getattr__, __dir__)`` for the declaring package (``marl_envs.backends.lazy_names``): its public names
        are read from ``<module>._env``, imported on the first one asked for (with the error naming the pip extra
        if a library is missing), ``make_env`` is the record's, and the names of ``sources`` come from the
        submodule each is listed under (``{"._shard": ("Shard",)}``: what other backends build on)."""
        from .backends import lazy_names

        return lazy_names(self.module, sources or {}, default="._env", before=lambda: backend_module(self.name),
                          values={"make_env": lambda: self.make_env})


def _imported(reference: str, default: str = "") -> Any:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute or default)


_BACKENDS: dict[str, Backend] = {}
_USER_ENVS: dict[str, Callable[..., EnvBase]] = {}
_NAME_CACHE: dict[str, list[str]] = {}


def register_backend(record: Backend, *, overwrite: bool = False) -> None:
    """Add a backend: ``make("<record.name>/<env>")`` then builds its envs, and the doctor, the bench and
    ``marl-envs list`` see it. The built-in ones are registered when ``marl_envs`` is imported, from the
    ``BACKEND`` of each package of ``marl_envs.backends``.

    Raises:
        TypeError: ``record`` is not a ``Backend``.
        ValueError: a backend of that name is registered already (pass ``overwrite=True`` to replace it).
    """
    if not isinstance(record, Backend):
        raise TypeError(f"register_backend takes a marl_envs.registry.Backend, got {record!r}")
    if record.name in _BACKENDS and not overwrite and _BACKENDS[record.name] != record:
        raise ValueError(f"a backend named {record.name!r} is registered already ({_BACKENDS[record.name].module}); "
                         "pass overwrite=True to replace it")
    _BACKENDS[record.name] = record
    _NAME_CACHE.pop(record.name, None)


def _discover() -> None:
    """Register the ``BACKEND`` of every package of ``marl_envs.backends`` (those without one, such as the
    shared JAX core ``marl_envs.backends.jax``, are helpers)."""
    from . import backends

    for info in sorted(pkgutil.iter_modules(backends.__path__), key=lambda info: info.name):
        if info.ispkg and not info.name.startswith("_"):
            record = getattr(importlib.import_module(f"{backends.__name__}.{info.name}"), "BACKEND", None)
            if isinstance(record, Backend):
                register_backend(record)


def backends() -> dict[str, Backend]:
    """Each registered backend's record, by name (the built-in ones in alphabetical order)."""
    return dict(_BACKENDS)


def available_backends() -> list[str]:
    """The registered backends, installed or not: the built-in ones in alphabetical order (``["brax", "gymnax",
    ...]``), then any added with ``register_backend``."""
    return list(_BACKENDS)


def backend_installed(backend: str) -> bool:
    """True if the libraries ``backend`` needs can be imported."""
    spec = backend_record(backend)
    return all(importlib.util.find_spec(package) is not None for package in spec.packages)


def backend_record(backend: str) -> Backend:
    """The record of a registered backend (``backend_record("vmas").extra == "vmas"``).

    Raises:
        ValueError: unknown backend.
    """
    try:
        return _BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; backends are {sorted(_BACKENDS)}") from None


def backend_module(backend: str) -> ModuleType:
    """The backend's package (``marl_envs.backends.<backend>``), its env classes imported now.

    Raises:
        ValueError: unknown backend.
        ImportError: its libraries are not installed (the message names the pip extra).
    """
    spec = _installed(backend)
    spec.implementation()
    return importlib.import_module(spec.module)


def _installed(backend: str) -> Backend:
    """The backend's record, once its libraries are found installed (nothing imported).

    Raises:
        ValueError: unknown backend.
        ImportError: its libraries are not installed (the message names the pip extra).
    """
    spec = backend_record(backend)
    missing = [p for p in spec.packages if importlib.util.find_spec(p) is None]
    if missing:
        raise ImportError(
            f"the {backend} backend needs {', '.join(missing)}, which is not installed; "
            f"install it with: pip install 'marl-envs[{spec.extra}]'"
        )
    return spec


def _backend_names(backend: str) -> list[str]:
    """``backend``'s names (``"vmas/balance"``, ...), without importing it where the snapshot or the user cache
    has them for the installed versions (``marl_envs._core.names``)."""
    if backend not in _NAME_CACHE:
        versions = _names.stamp(_installed(backend).extra)  # the ImportError that names the pip extra
        names = _names.lookup(backend, versions)
        if names is None:
            names = _live_names(backend)
            _names.remember(backend, versions, names)
        _NAME_CACHE[backend] = names
    return _NAME_CACHE[backend]


def _live_names(backend: str) -> list[str]:
    """``backend``'s names as its ``env_names()`` lists them (imports it)."""
    backend_module(backend)  # the error naming the pip extra, if a library is missing
    return _BACKENDS[backend].live_names()


def available_envs(backend: str | None = None) -> list[str]:
    """Sorted names ``make`` accepts: every installed backend's and the user-registered ones.

    No backend is imported where the names of its installed version are known (a snapshot shipped in the
    package, or a cache in ``~/.cache/marl_envs/names`` from an earlier listing): see ``marl_envs._core.names``.

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


def _unknown(name: str) -> UnknownEnvName:
    """The refusal of a name of no backend's family: among the names registered in its family (``register``); a
    name of no family (``balance``), among every name; else the families, and what they have nearest to it."""
    family, slash, rest = name.partition("/")
    registered = [user for user in _USER_ENVS if slash and user.partition("/")[0] == family]
    if slash and not registered:
        nearest = [found for record in _BACKENDS.values() if (found := record.nearest(family, rest))]
        return unknown_family(name, list(_BACKENDS), nearest)
    candidates = sorted(registered) or available_envs()
    shown = ", ".join(candidates[:12]) + (", ..." if len(candidates) > 12 else "")
    return unknown_env("env", name, candidates, f"{shown} (marl_envs.available_envs() lists them all)")


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
        ValueError: unknown name (the message lists close matches; for a family that is not one of
            ``available_backends()``, the families and what they have nearest: ``smac/3m``, SMAX's map ``3m``).
        ImportError: the backend's library is not installed (the message names the pip extra).
        TypeError: a keyword the env does not take, or a value of a type its keyword does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"env name must be a str like 'vmas/balance', got {name!r}")
    if name in _USER_ENVS:
        from ._core.validate import check_kwargs

        factory = _USER_ENVS[name]
        check_kwargs(repr(name), factory, kwargs)
        return factory(**kwargs)
    backend = name.partition("/")[0]
    if backend in _BACKENDS:
        name = shell_safe(name)
        env_name = name.partition("/")[2]
        record = _installed(backend)  # the error naming the pip extra, if a library is missing
        try:
            return record.make_env(env_name, **kwargs)  # its env class, or its declared check, refuses a name
        except UnknownEnvName as error:  # said in the backend's terms: say it again in the names make takes
            raise unknown_full_name(backend, name, error, f"marl_envs.available_envs({backend!r})") from None
    raise _unknown(name)  # neither torch nor a backend's library imported to refuse a name of no family


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
        raise TypeError(f"factory for {name!r} must be callable (a class or function returning an env), "
                        f"got {factory!r}")
    if name in _USER_ENVS and not overwrite:
        raise ValueError(f"env {name!r} is already registered; pass overwrite=True to replace it")
    _USER_ENVS[name] = factory


_discover()
