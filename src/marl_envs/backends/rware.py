"""The multi-robot warehouse (``rware``): the EPyMARL benchmark's warehouse tasks, batched by the PettingZoo
machinery.

>>> import marl_envs
>>> env = marl_envs.make("rware/rware-tiny-2ag-v2", num_envs=2, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 2, 71])

Every id of the library's Gymnasium registry builds by name (``rware-<size>-<n>ag[-easy|-hard]-v2`` and the
image-observation variants, 228 of them); ``env_names()`` lists the tasks of the EPyMARL benchmark (Papoudakis et
al., 2021). RWARE has no goal state: an episode only stops at its step limit (``max_steps``, 500) or, where set,
after ``max_inactivity_steps`` without a delivery, so every end is *truncated* (the library's own ``truncated`` is
always False). RWARE's step limit and the env's ``max_steps`` are one keyword: ``max_steps=N`` sets both.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .pettingzoo._gymnasium import TupleAgentsFamily

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
