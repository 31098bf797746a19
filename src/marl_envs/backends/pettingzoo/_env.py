"""The pettingzoo backend's env classes and ``env_names``; see ``marl_envs.backends.pettingzoo``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from groupings import GroupMap, MarlGroupMapType

from ..._core.validate import checked_keywords, env_keywords
from ...registry import backends
from ._spaces import ACTION_MASK
from ._tasks import Task, resolve_task, tasks
from ._workers import DEFAULT_TIMEOUT_S, InstanceError, WorkerError
from ._wrapper import PettingZooWrapper, cycle_steps

__all__ = ["ACTION_MASK", "InstanceError", "PettingZooEnv", "PettingZooWrapper", "Task", "WorkerError", "cycle_steps",
           "env_names"]


def env_names() -> list[str]:
    """Every PettingZoo task that builds here (``"mpe/simple_spread_v3"``, ``"classic/tictactoe_v3"``, ...)."""
    return list(tasks())


class PettingZooEnv(PettingZooWrapper):
    """A PettingZoo task by name, ``num_envs`` instances of it batched.

    >>> env = PettingZooEnv("mpe/simple_spread_v3", num_envs=4, N=3, seed=0)
    >>> env.group_map
    {'agents': ['agent_0', 'agent_1', 'agent_2']}

    Args:
        task: ``"<family>/<name>"`` as ``env_names()`` lists it (``"mpe/simple_spread_v3"``,
            ``"classic/tictactoe_v3"``), or the bare module name.
        parallel: use the task's parallel API (True) or its turn-based one (False); None: the parallel API if
            the task has one (turn-based games have none).
        use_mask: as :class:`PettingZooWrapper`'s; None: True for the turn-based API (which requires it), else
            False.
        **task_kwargs: the task's own keywords (``N``, ``max_cycles``, ``continuous_actions``, ``render_mode``...).

    The other arguments are :class:`PettingZooWrapper`'s.

    Raises:
        ValueError: unknown task (with close matches); ``parallel=True`` for a turn-based game.
        TypeError: a keyword the task does not take.
    """

    family: ClassVar[str] = "pettingzoo"  #: the backend whose tasks these are (``marl_envs.make("<family>/...")``)
    #: ``use_mask`` and ``done_on_any`` where the caller leaves them None (None: :class:`PettingZooWrapper`'s rules)
    default_use_mask: ClassVar[bool | None] = None
    default_done_on_any: ClassVar[bool | None] = None
    #: the task's own step limit is its keyword ``max_steps`` (RWARE's): the env's ``max_steps`` sets it too
    task_max_steps: ClassVar[bool] = False

    @classmethod
    def known_tasks(cls) -> Mapping[str, Task]:
        """The tasks of this family that build here, by name."""
        return tasks()

    @checked_keywords
    def __init__(self, task: str, *, num_envs: int = 1, parallel: bool | None = None, return_state: bool = False,
                 group_map: GroupMap | MarlGroupMapType | None = None, use_mask: bool | None = None,
                 categorical_actions: bool = True, done_on_any: bool | None = None, max_steps: int | None = None,
                 seed: int | None = None, device: torch.device | str = "cpu", num_workers: int = 0,
                 worker_timeout: float | None = DEFAULT_TIMEOUT_S, **task_kwargs: Any):
        spec = resolve_task(task, self.known_tasks(), self.family)
        if parallel is None:
            parallel = spec.parallel is not None
        if use_mask is None:
            use_mask = not parallel if self.default_use_mask is None else self.default_use_mask
        if done_on_any is None:
            done_on_any = self.default_done_on_any
        if parallel and spec.parallel is None:
            raise ValueError(
                f"{self.family} task {spec.name!r} is turn-based and has no parallel API; build it with "
                f"parallel=False, use_mask=True (its defaults: leave both out)"
            )
        if not parallel and spec.aec is None:
            raise ValueError(f"{self.family} task {spec.name!r} has only a parallel API; build it with "
                             f"parallel=True (its default: leave it out)")
        spec.check_kwargs(task_kwargs, env_keywords(PettingZooEnv))
        if self.task_max_steps and max_steps is not None:
            task_kwargs["max_steps"] = max_steps  # one keyword, one limit: the library's and the env's
        self.task = spec.name
        self.task_spec = spec  #: the :class:`Task`: its constructors and keywords
        self.task_kwargs = dict(task_kwargs)  #: the task's own keywords
        creator = spec.parallel if parallel else spec.aec
        super().__init__(functools.partial(creator, **task_kwargs), num_envs=num_envs, return_state=return_state,
                         group_map=group_map, use_mask=use_mask, categorical_actions=categorical_actions,
                         done_on_any=done_on_any, max_steps=max_steps, seed=seed, device=device,
                         num_workers=num_workers, worker_timeout=worker_timeout)

    def _name_in_errors(self) -> str:
        return f"{self.family}/{self.task}"

    def _family_title(self) -> str:
        record = backends().get(self.family)  # a family of your own may have no record
        return record.title if record is not None else self.family

    def _built_with(self, keyword: str) -> str:
        return f"marl_envs.make({self._name_in_errors()!r}, ..., {keyword})"

    @property
    def library_keywords(self) -> dict[str, str | None] | None:
        """The task's own keywords, with their defaults' reprs (None: required); None where the task takes
        ``**kwargs``. ``marl-envs info`` lists them."""
        own = self.task_spec.own_keywords()
        return None if own is None else {k: None if v is inspect.Parameter.empty else repr(v) for k, v in own.items()}
