"""MAgent2: large teams on a grid (battle, pursuit, gathering), batched by the PettingZoo machinery.

>>> import marl_envs
>>> env = marl_envs.make("magent2/battle_v4", num_envs=2, map_size=20, seed=0)
>>> {group: len(agents) for group, agents in env.group_map.items()}
{'red': 12, 'blue': 12}

Names are MAgent2's modules (``magent2/battle_v4``; ``magent2/battle`` names the installed version). Agents die
mid-episode: the envs are built with ``use_mask=True`` (a dead agent's ``(group, "mask")`` is False, its entries
zeros, its reward zero, its ``terminated`` True and kept) and ``done_on_any=False`` (an episode ends when every
agent has, at ``max_cycles`` at the latest). The teams are groups (``red`` / ``blue``, ``predator`` / ``prey``, ...,
by ``groupings.default_group_map``), ``return_state=True`` adds the map (``env.state()``) at the root.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from typing import Any, ClassVar

from .pettingzoo import PettingZooEnv, Task
from .pettingzoo._tasks import builds

__all__ = ["MAgent2Env", "env_names", "make_env", "tasks"]


def _keywords(module: str) -> dict[str, Any]:
    """An env's keywords: its ``parallel_env``'s, and the rewards its ``**reward_args`` pass on to its module's
    ``get_config`` (``step_reward``, ``attack_penalty``, ...). ``seed`` is left out: the env's own ``seed`` seeds
    the instances."""
    parallel_env = importlib.import_module(module).parallel_env
    keywords = {}
    for factory in (parallel_env, getattr(inspect.getmodule(parallel_env), "get_config", None)):
        if factory is not None:
            for name, p in inspect.signature(factory).parameters.items():
                if name != "seed" and p.kind is not p.VAR_KEYWORD:
                    keywords.setdefault(name, p.default)
    return keywords


@functools.cache
def tasks() -> dict[str, Task]:
    """Every MAgent2 env module (``battle_v4``, ...) whose env builds here, by name."""
    import magent2.environments as package

    found = {}
    for module in pkgutil.iter_modules(package.__path__):
        if not re.fullmatch(r"\w+_v\d+", module.name):
            continue
        mod = importlib.import_module(f"{package.__name__}.{module.name}")
        if builds(mod.env):
            found[module.name] = Task(module.name, mod.env, mod.parallel_env, mod.__name__,
                                      keywords=functools.partial(_keywords, mod.__name__), family="magent2")
    return found


class MAgent2Env(PettingZooEnv):
    """A MAgent2 env by name, ``num_envs`` instances batched, dead agents masked; the arguments are
    :class:`~marl_envs.backends.pettingzoo.PettingZooEnv`'s, the task's keywords its ``raw_env``'s (``map_size``,
    ``max_cycles``, ``minimap_mode``, the rewards, ...)."""

    family: ClassVar[str] = "magent2"
    default_use_mask: ClassVar[bool | None] = True
    default_done_on_any: ClassVar[bool | None] = False
    teams_by_prefix: ClassVar[bool] = True

    @classmethod
    def known_tasks(cls) -> dict[str, Task]:
        return tasks()


def env_names() -> list[str]:
    """Every MAgent2 env that builds here."""
    return list(tasks())


def make_env(name: str, **kwargs: Any) -> MAgent2Env:
    """``MAgent2Env(name, **kwargs)``: the factory behind ``marl_envs.make("magent2/<name>", ...)``."""
    return MAgent2Env(name, **kwargs)
