"""The reference loops of RWARE: those of Level-Based Foraging (``marl_envs.bench.lbforaging``), the same kind of
Gymnasium env."""

from .lbforaging import BENCH

__all__ = ["BENCH"]
