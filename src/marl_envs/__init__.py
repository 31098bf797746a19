"""marl_envs: batched multi-agent RL environments on PyTorch and TensorDict.

>>> import marl_envs
>>> "vmas/balance" in marl_envs.available_envs("vmas") or not marl_envs.backend_installed("vmas")
True
"""

from groupings import GroupMap, MarlGroupMapType, check_marl_grouping, default_group_map

from . import distributed, specs
from ._env import EnvBase
from .checks import check_env_specs
from .registry import available_envs, backend_installed, make, register

__version__ = "0.1.0"

__all__ = [
    "EnvBase",
    "GroupMap",
    "MarlGroupMapType",
    "available_envs",
    "backend_installed",
    "check_env_specs",
    "check_marl_grouping",
    "default_group_map",
    "distributed",
    "make",
    "register",
    "specs",
]
