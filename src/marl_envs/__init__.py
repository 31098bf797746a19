"""marl_envs: batched multi-agent RL environments on PyTorch and TensorDict.

>>> import marl_envs
>>> "vmas" in marl_envs.available_backends()  # every family, installed or not
True
>>> marl_envs.available_envs("vmas")[:2]
['vmas/asym_joint', 'vmas/balance']
"""

import importlib

from groupings import GroupMap, MarlGroupMapType, check_marl_grouping, default_group_map

from . import registry
from ._version import __version__
from .registry import available_backends, available_envs, backend_installed, make, register

#: What needs torch, imported when first asked for (``marl_envs.EnvBase``, ``from marl_envs import specs``):
#: ``import marl_envs`` alone imports neither torch nor tensordict, so that listing names (``marl-envs list``)
#: takes a fraction of a second.
_LAZY = {"EnvBase": "._core.env", "check_env_specs": ".checks", "specs": None, "distributed": None}


def _exported() -> dict[str, str]:
    """Backend classes importable from the top level (``from marl_envs import VmasEnv``): those each backend's
    record exports (``Backend.exports``), its package imported only when one of them is asked for (they stay out
    of ``__all__``: a star import loads none)."""
    return {cls: name for name, record in registry.backends().items() for cls in record.exports}


def __getattr__(name: str):
    if name in _LAZY:
        module = _LAZY[name]
        value = (importlib.import_module(f".{name}", __name__) if module is None
                 else getattr(importlib.import_module(module, __name__), name))
        globals()[name] = value
        return value
    exported = _exported()
    if name in exported:
        return getattr(registry.backend_module(exported[name]), name)
    raise AttributeError(f"module 'marl_envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_exported()})


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
