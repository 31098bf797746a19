"""The lbforaging backend's env classes and ``env_names``; see ``marl_envs.backends.lbforaging``."""

from __future__ import annotations

from typing import Any

from ..pettingzoo import TupleAgentsFamily

__all__ = ["LBForagingEnv", "env_names"]

#: The Level-Based Foraging tasks of the EPyMARL benchmark that the v3 registry has (its 15x15 five-food tasks
#: are not registered: the registry has at most 4 foods).
LISTED = ("Foraging-8x8-2p-2f-coop-v3", "Foraging-2s-8x8-2p-2f-coop-v3", "Foraging-10x10-3p-3f-v3",
          "Foraging-2s-10x10-3p-3f-v3", "Foraging-15x15-4p-3f-v3")


class LBForagingEnv(TupleAgentsFamily, family="lbforaging", package="lbforaging", prefix="Foraging",
                    step_limit=("_max_episode_steps", "max_episode_steps")):
    """A Level-Based Foraging task by its Gymnasium id, ``num_envs`` instances batched (see
    :class:`~marl_envs.backends.pettingzoo.TupleAgentsFamily`)."""

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

