"""What the brax backend knows of Brax without importing it: the physics pipelines a ``backend`` names, and the
check of a build's values against them.

``marl_envs.make`` runs ``check`` before torch, JAX or Brax is imported (``marl_envs.registry.Backend.check``), so
a misspelled physics backend is refused at once; ``BraxEnv`` runs it too. ``tests/backends/test_brax.py`` checks
``PHYSICS_BACKENDS`` against the installed Brax.
"""

from __future__ import annotations

from typing import Any

from ..._core.messages import unknown_name

__all__ = ["PHYSICS_BACKENDS", "check"]

PHYSICS_BACKENDS = ("generalized", "positional", "spring", "mjx")
"""The physics pipelines a Brax env's ``backend`` names (``brax.envs.base.PipelineEnv``'s)."""


def check(env_name: str, kwargs: dict[str, Any]) -> None:
    """Refuse a build ``BraxEnv(env_name, **kwargs)`` would refuse for its physics backend, before anything is
    imported.

    Raises:
        ValueError: an unknown physics backend (with close matches).
    """
    backend = kwargs.get("backend")
    if backend is not None and backend not in PHYSICS_BACKENDS:
        raise unknown_name("Brax physics backend", backend, PHYSICS_BACKENDS)
