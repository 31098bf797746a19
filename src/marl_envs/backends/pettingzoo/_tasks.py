"""The PettingZoo tasks installed here: MPE from ``mpe2``, the rest from PettingZoo's own registry.

Names are ``<family>/<module>`` as PettingZoo's modules spell them (``mpe/simple_spread_v3``,
``classic/tictactoe_v3``). A task is listed only if its module imports and an instance builds, so families
whose optional dependencies are missing (``pettingzoo[atari]``, ``open_spiel`` for Hanabi, ...) are left out.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._quiet import EVERY_WARNING, Filter, ignored_warnings, quiet_import
from ..._core.messages import unknown_env
from ..._core.validate import check_kwargs, did_you_mean

__all__ = ["EPISODE_BOUNDS", "SWIG_WARNINGS", "Task", "builds", "resolve_task", "signature_keywords", "tasks"]

#: The most moves a game of these turn-based envs lasts (by ``metadata["name"]``); one move is one step of the AEC
#: API, and the game ends for every player on the same move: env steps, as ``EnvBase._episode_bound`` counts them.
EPISODE_BOUNDS: dict[str, int] = {"tictactoe_v3": 9, "connect_four_v3": 42}


@dataclass(frozen=True)
class Task:
    """A task of the PettingZoo machinery: its name and constructors (``aec`` is None for parallel-only tasks,
    ``parallel`` for turn-based-only games).

    ``keywords`` gives the task's own keywords with their defaults (``inspect.Parameter.empty`` where required),
    None where they cannot be told (a ``**kwargs``); left out, they are read from the signature of the module's
    ``raw_env`` (PettingZoo's convention).
    """

    name: str
    aec: Callable[..., Any] | None
    parallel: Callable[..., Any] | None
    module: str
    keywords: Callable[[], Mapping[str, Any] | None] | None = None
    render_modes: Callable[[], Sequence[str]] | None = None
    family: str = "pettingzoo"  # the backend whose task it is, as errors name it

    def own_keywords(self) -> Mapping[str, Any] | None:
        """The task's keywords and their defaults, None where they cannot be told."""
        if self.keywords is not None:
            return self.keywords()
        raw_env = getattr(importlib.import_module(self.module), "raw_env", None)
        return None if raw_env is None else signature_keywords(raw_env)

    def check_kwargs(self, kwargs: dict[str, Any], env: Sequence[str]) -> None:
        """Raise ``TypeError`` for a keyword the task does not take (when that can be told), naming the close match
        among its keywords and ``env`` (the env-level keywords taken beside them), and ``ValueError`` for a
        ``render_mode`` the task does not offer."""
        check_kwargs(f"{self.family} task {self.name!r}", self.own_keywords(), kwargs, env=env, kind="the task's")
        if self.render_modes is not None:
            modes = self.render_modes()
        else:
            modes = getattr(getattr(importlib.import_module(self.module), "raw_env", None), "metadata", {}).get(
                "render_modes")
        mode = kwargs.get("render_mode")
        if mode is not None and modes and mode not in modes:
            raise ValueError(f"{self.family} task {self.name!r} has no render_mode {mode!r}"
                             f"{did_you_mean(mode, modes) or ';'} its render modes are {list(modes)}")


def signature_keywords(factory: Callable[..., Any]) -> dict[str, Any] | None:
    """The keywords ``factory`` takes and their defaults (``inspect.Parameter.empty`` where required), None when
    it takes ``**kwargs``."""
    params = {}
    for name, param in inspect.signature(factory).parameters.items():
        if param.kind is param.VAR_KEYWORD:
            return None
        if name != "self" and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            params[name] = param.default
    return params


SWIG_WARNINGS: Filter = (r"builtin type .* has no __module__ attribute", DeprecationWarning)
"""The warnings Box2D's SWIG bindings emit at import, ignored when importing PettingZoo modules: under ``-W error``
(or pytest's ``filterwarnings = error``), raised inside Box2D's extension module initialisation, they crash the
interpreter with a segmentation fault rather than an exception."""


def _entry_point(entry_point: str | Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    if callable(entry_point):
        return entry_point, entry_point.__module__
    module, _, attr = entry_point.partition(":")
    return getattr(quiet_import(module, SWIG_WARNINGS), attr), module


def builds(creator: Callable[..., Any]) -> bool:
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
def _multiwalker_time_limit() -> type:
    """A wrapper of multiwalker's AEC env reporting its time limit as a truncation: at ``max_cycles`` the library marks
    every walker terminated; through it every walker is truncated there, and terminated only where the walkers' own
    end came on that cycle (a fall, the package dropped, the terrain's end). One class, built at first use."""
    base = quiet_import("pettingzoo.utils.wrappers", SWIG_WARNINGS).BaseWrapper

    class MultiwalkerTimeLimit(base):
        def step(self, action: Any) -> None:
            self.env.step(action)
            raw = self.unwrapped
            walkers = raw.env
            if walkers.frames >= walkers.max_cycles:
                ended = walkers.get_last_dones()  # by walker index: its place in possible_agents
                for k, agent in enumerate(raw.possible_agents):
                    if agent in raw.terminations:
                        raw.terminations[agent], raw.truncations[agent] = bool(ended[k]), True

    return MultiwalkerTimeLimit


#: Tasks whose library reports its time limit as a termination: a wrapper of their AEC env that reports it as a
#: truncation (their parallel API is PettingZoo's conversion of the wrapped AEC env).
_TIME_LIMIT_FIXES: dict[str, Callable[[], type]] = {"sisl/multiwalker_v9": _multiwalker_time_limit}


def _fixed(name: str, aec: Callable[..., Any], parallel: Callable[..., Any] | None
           ) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
    """The constructors of task ``name``, with its time limit fixed where ``_TIME_LIMIT_FIXES`` has one."""
    fix = _TIME_LIMIT_FIXES.get(name)
    if fix is None:
        return aec, parallel

    def fixed_aec(**kwargs: Any) -> Any:
        return fix()(aec(**kwargs))

    def fixed_parallel(**kwargs: Any) -> Any:
        from pettingzoo.utils.conversions import aec_to_parallel_wrapper

        return aec_to_parallel_wrapper(fixed_aec(**kwargs))

    return fixed_aec, None if parallel is None else fixed_parallel


@functools.cache
def tasks() -> dict[str, Task]:
    """Every task that builds here, by name."""
    found: dict[str, Task] = {}
    try:
        mpe = quiet_import("mpe2.all_modules", SWIG_WARNINGS).mpe_environments
    except ImportError:
        mpe = {}
    for name, module in mpe.items():
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
        if builds(aec):
            name = _normalise(env_id)
            found[name] = Task(name, *_fixed(name, aec, parallel), module)
    return dict(sorted(found.items()))


def resolve_task(task: str, known: Mapping[str, Task] | None = None, family: str = "pettingzoo") -> Task:
    """The task called ``task`` among ``known`` (default: PettingZoo's, where ``"mpe/simple_spread_v3"``,
    ``"simple_spread_v3"``, ``"classic/go-v5"`` and ``"simple_spread"``, the version left out, name tasks);
    ``family`` names them in errors."""
    if not isinstance(task, str):
        raise TypeError(f"task must be a str like {next(iter(known or tasks()), 'mpe/simple_spread_v3')!r}, "
                        f"got {task!r}")
    known = tasks() if known is None else known
    for name in (task.strip(), _normalise(task)):
        if name in known:
            return known[name]
    by_module = {full.rpartition("/")[2]: full for full in known}
    by_base = {re.sub(r"_v\d+$", "", short): full for short, full in by_module.items()}  # "battle": "battle_v4"
    for short in (by_module, by_base):
        if name in short:
            return known[short[name]]
    raise unknown_env(f"{family} task", task, list(known))
