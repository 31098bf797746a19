"""The rware backend's env classes and ``env_names``; see ``marl_envs.backends.rware``."""

from __future__ import annotations

from typing import Any

from ..pettingzoo import TupleAgentsFamily

__all__ = ["RwareEnv", "env_names"]

#: The RWARE tasks of the EPyMARL benchmark.
LISTED = ("rware-tiny-2ag-v2", "rware-tiny-4ag-v2", "rware-small-4ag-v2")


class RwareEnv(TupleAgentsFamily, family="rware", package="rware", prefix="rware",
               step_limit=("max_steps", "max_steps"), task_max_steps=True):
    """An RWARE task by its Gymnasium id, ``num_envs`` instances batched (see
    :class:`~marl_envs.backends.pettingzoo.TupleAgentsFamily`)."""

    @staticmethod
    def ends(env: Any, done: bool) -> tuple[bool, bool]:
        return False, True  # no goal state: a step limit ended it


def env_names() -> list[str]:
    """The EPyMARL benchmark's RWARE tasks (every registry id builds by name)."""
    return RwareEnv.listed(LISTED)

