"""The reference loops of the magent2 backend: its envs are PettingZoo parallel envs, stepped by hand as
``marl_envs.bench.pettingzoo`` does."""

from .pettingzoo import BENCH

__all__ = ["BENCH"]
