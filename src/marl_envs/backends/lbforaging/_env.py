"""The lbforaging backend's env classes and factories (``env_names``, ``make_env``); see ``marl_envs.backends.lbforaging``."""

from __future__ import annotations

from typing import Any, ClassVar

from ..pettingzoo import TupleAgentsFamily

__all__ = ["LBForagingEnv", "env_names", "make_env"]

#: The Level-Based Foraging tasks of the EPyMARL benchmark that the v3 registry has (its 15x15 five-food tasks
#: are not registered: the registry has at most 4 foods).
LISTED = ("Foraging-8x8-2p-2f-coop-v3", "Foraging-2s-8x8-2p-2f-coop-v3", "Foraging-10x10-3p-3f-v3",
          "Foraging-2s-10x10-3p-3f-v3", "Foraging-15x15-4p-3f-v3")


class LBForagingEnv(TupleAgentsFamily):
    """A Level-Based Foraging task by its Gymnasium id, ``num_envs`` instances batched (see
    :class:`~marl_envs.backends.pettingzoo._gymnasium.TupleAgentsFamily`)."""

    family: ClassVar[str] = "lbforaging"
    package: ClassVar[str] = "lbforaging"
    prefix: ClassVar[str] = "Foraging"
    step_limit: ClassVar[tuple[str, str]] = ("_max_episode_steps", "max_episode_steps")

    @staticmethod
    def ends(env: Any, done: bool) -> tuple[bool, bool]:
        cleared = not env.field.any()  # no food left: the task is over; else the step limit was reached
        return cleared, not cleared

    @staticmethod
    def forget(env: Any) -> None:
        # ForagingEnv.reset places the players where no player stands yet, reading the positions they had at the
        # end of the last episode: a seeded reset would depend on that episode, not only on the seed
        for player in env.players:
            player.position = None


def env_names() -> list[str]:
    """The EPyMARL benchmark's Level-Based Foraging tasks (every registry id builds by name)."""
    return LBForagingEnv.listed(LISTED)


def make_env(name: str, **kwargs: Any) -> LBForagingEnv:
    """``LBForagingEnv(name, **kwargs)``: the factory behind ``marl_envs.make("lbforaging/<id>", ...)``."""
    return LBForagingEnv(name, **kwargs)
