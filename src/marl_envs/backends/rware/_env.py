"""The rware backend's env classes and factories (``env_names``, ``make_env``); see ``marl_envs.backends.rware``."""

from __future__ import annotations

from typing import Any, ClassVar

from ..pettingzoo import TupleAgentsFamily

__all__ = ["RwareEnv", "env_names", "make_env"]

#: The RWARE tasks of the EPyMARL benchmark.
LISTED = ("rware-tiny-2ag-v2", "rware-tiny-4ag-v2", "rware-small-4ag-v2")


class RwareEnv(TupleAgentsFamily):
    """An RWARE task by its Gymnasium id, ``num_envs`` instances batched (see
    :class:`~marl_envs.backends.pettingzoo._gymnasium.TupleAgentsFamily`)."""

    family: ClassVar[str] = "rware"
    package: ClassVar[str] = "rware"
    prefix: ClassVar[str] = "rware"
    step_limit: ClassVar[tuple[str, str]] = ("max_steps", "max_steps")
    task_max_steps: ClassVar[bool] = True

    @staticmethod
    def ends(env: Any, done: bool) -> tuple[bool, bool]:
        return False, True  # no goal state: a step limit ended it


def env_names() -> list[str]:
    """The EPyMARL benchmark's RWARE tasks (every registry id builds by name)."""
    return RwareEnv.listed(LISTED)


def make_env(name: str, **kwargs: Any) -> RwareEnv:
    """``RwareEnv(name, **kwargs)``: the factory behind ``marl_envs.make("rware/<id>", ...)``."""
    return RwareEnv(name, **kwargs)
