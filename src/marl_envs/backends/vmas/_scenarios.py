"""VMAS scenarios by name: the names, loading one, its label, and the keywords it takes."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import vmas
from vmas.simulator.environment import Environment
from vmas.simulator.scenario import BaseScenario

from ..._core import keywords
from ..._core.messages import unknown_env
from ..._core.validate import check_kwargs

__all__ = ["check_scenario_kwargs", "env_names", "load_scenario", "make_vmas_env", "scenario_keywords",
           "scenario_label"]

# vmas.make_env options that are not scenario keywords; VmasEnv takes the ones it supports explicitly.
_MAKE_ENV_OPTIONS = (
    "wrapper", "wrapper_kwargs", "dict_spaces", "clamp_actions", "grad_enabled", "terminated_truncated",
)
_UNUSED_KWARGS_WARNING = "passed but not used by the scenario"


def env_names() -> list[str]:
    """Every scenario VMAS ships (``vmas.scenarios + vmas.mpe_scenarios + vmas.debug_scenarios``)."""
    return sorted({*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios})


def check_scenario_kwargs(scenario_kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError`` for a ``vmas.make_env`` option among a scenario's keywords (``VmasEnv`` takes none)."""
    reserved = [k for k in scenario_kwargs if k in _MAKE_ENV_OPTIONS]
    if reserved:
        raise TypeError(
            f"VmasEnv does not take the vmas.make_env option {reserved[0]!r}; build the env yourself with "
            f"vmas.make_env(..., {reserved[0]}=...) and wrap it: VmasWrapper(env)"
        )


def make_vmas_env(scenario: BaseScenario, scenario_kwargs: dict[str, Any], *, env_level: Sequence[str] = (),
                  **options: Any) -> Environment:
    """``vmas.make_env(scenario, **options, **scenario_kwargs)``; a keyword the scenario does not use raises
    ``TypeError`` (VMAS only warns) naming its close match among the scenario's keywords and ``env_level`` (the
    env-level keywords taken beside them); VMAS's other warnings are passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = vmas.make_env(scenario, **options, **scenario_kwargs)
    unused: list[str] = []
    for record in caught:
        message = str(record.message)
        if _UNUSED_KWARGS_WARNING in message:
            unused = [k for k in scenario_kwargs if f"{k!r}:" in message] or [message]
        else:
            warnings.warn_explicit(record.message, record.category, record.filename, record.lineno)
    if unused:
        # VMAS's scenarios read **kwargs as they please: theirs are declared; one of your own lists those it used
        declared = scenario_keywords(scenario)
        known = sorted(declared) if declared is not None else list(scenario_kwargs)
        check_kwargs(f"VMAS scenario {scenario_label(scenario)!r}", [k for k in known if k not in unused],
                     dict.fromkeys(unused), env=env_level, kind="the scenario's")
    return env


def scenario_label(scenario: BaseScenario) -> str:
    """``balance`` for VMAS's own scenarios (all classes named ``Scenario``), else the class name."""
    cls = type(scenario)
    if cls.__name__ != "Scenario":
        return cls.__name__
    code = getattr(cls.make_world, "__code__", None)
    return cls.__module__.rpartition(".")[2] or (Path(code.co_filename).stem if code else cls.__name__)


def load_scenario(scenario: str | BaseScenario | type[BaseScenario]) -> BaseScenario:
    """A fresh scenario instance (``vmas.scenarios`` is the list of names, not the package)."""
    if isinstance(scenario, str):
        names = env_names()
        name = scenario.removesuffix(".py")
        if name not in names:
            raise unknown_env("VMAS scenario", scenario, names)
        return importlib.import_module("vmas.scenarios").load(f"{name}.py").Scenario()
    if isinstance(scenario, type) and issubclass(scenario, BaseScenario):
        scenario = scenario()
    if not isinstance(scenario, BaseScenario):
        raise TypeError(
            f"scenario must be a VMAS scenario name (see env_names()) or a vmas BaseScenario, got {scenario!r}"
        )
    return scenario


def scenario_keywords(scenario: BaseScenario) -> keywords.Keywords | None:
    """The keywords a scenario of VMAS's reads from ``**kwargs``, with their defaults, as declared for the installed
    VMAS (``marl_envs._core.keywords``); None for a scenario of your own (its ``make_world`` is not VMAS's) or a
    VMAS version not declared (a warning says so, once)."""
    code = getattr(type(scenario).make_world, "__code__", None)
    path = Path(code.co_filename) if code else None
    if path is None or Path(vmas.__file__).parent not in path.parents:
        return None
    return keywords.declared("vmas", path.stem)

