"""marl_envs: batched multi-agent RL environments on PyTorch and TensorDict.

>>> import marl_envs
>>> marl_envs.available_backends()
['vmas', 'brax', 'pettingzoo', 'jaxmarl', 'gymnax']
"""

from groupings import GroupMap, MarlGroupMapType, check_marl_grouping, default_group_map

from . import distributed, specs
from ._env import EnvBase
from .checks import check_env_specs
from .registry import available_backends, available_envs, backend_installed, make, register

__version__ = "0.1.0"

#: Backend classes importable from the top level (``from marl_envs import VmasEnv``), each backend module
#: imported only when one of its classes is asked for (they stay out of ``__all__``: a star import loads none).
_LAZY_CLASSES = {
    "VmasEnv": "vmas", "VmasWrapper": "vmas",
    "BraxEnv": "brax", "BraxWrapper": "brax",
    "PettingZooEnv": "pettingzoo", "PettingZooWrapper": "pettingzoo",
}


def __getattr__(name: str):
    if name in _LAZY_CLASSES:
        from .registry import backend_module

        return getattr(backend_module(_LAZY_CLASSES[name]), name)
    raise AttributeError(f"module 'marl_envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_CLASSES])

__all__ = [
    "EnvBase",
    "GroupMap",
    "MarlGroupMapType",
    "available_backends",
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
