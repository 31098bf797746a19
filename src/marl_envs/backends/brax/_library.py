"""What the brax backend knows of Brax without importing it: the physics pipelines a ``backend`` names, the env's
own keywords, and the check of a build's values and keywords against them.

``marl_envs.make`` runs ``check`` before torch, JAX or Brax is imported (``marl_envs.registry.Backend.check``), so
a misspelled physics backend is refused at once; ``BraxEnv`` runs it too. ``tests/backends/test_brax.py`` checks
``PHYSICS_BACKENDS`` against the installed Brax.
"""

from __future__ import annotations

from typing import Any

from ..._core import keywords
from ..._core.messages import check_kwargs, unknown_name

__all__ = ["ENV_KEYWORDS", "PHYSICS_BACKENDS", "check", "library_keywords"]

PHYSICS_BACKENDS = ("generalized", "positional", "spring", "mjx")
"""The physics pipelines a Brax env's ``backend`` names (``brax.envs.base.PipelineEnv``'s)."""

ENV_KEYWORDS = ("num_envs", "device", "backend", "frame_skip", "max_steps", "requires_grad", "cache_clear_frequency",
                "seed", "group_map", "mapping", "device_path")
"""``BraxEnv``'s own keywords, in its signature's order (a test checks them against it): every other keyword of a
build is the Brax env's (``backend`` is both: ``BraxEnv`` passes it on)."""


def check(env_name: str, kwargs: dict[str, Any]) -> None:
    """Refuse a build ``BraxEnv(env_name, **kwargs)`` would refuse for its physics backend or a keyword, before
    anything is imported (``marl_envs.registry.Backend.check``; ``BraxEnv`` runs it too). The keywords not in
    ``ENV_KEYWORDS`` (and ``backend``) are the Brax env's: they are checked against the keywords declared for its
    robot (``marl_envs._core.keywords``).

    Raises:
        ValueError: an unknown physics backend (with close matches), or one given to an env without a pipeline.
        TypeError: a keyword neither the env nor the Brax env takes (with the close match), or a value of a type
            its keyword does not take (its default's).
    """
    backend = kwargs.get("backend")
    if backend is not None and backend not in PHYSICS_BACKENDS:
        raise unknown_name("Brax physics backend", backend, PHYSICS_BACKENDS)
    library = {key: value for key, value in kwargs.items()
               if key not in ENV_KEYWORDS or (key == "backend" and backend is not None)}
    if not library:
        return
    from ._scenes import SCENES  # numpy only

    scene = SCENES.get(env_name)
    robot = scene.robot if scene else env_name
    accepted = keywords.defaults(library_keywords(robot))  # None: not declared (an env of your own), not checked
    if backend is not None and accepted is not None and "backend" not in accepted:
        raise ValueError(f"the Brax env {robot!r} has no physics pipeline to choose (backend={backend!r}): leave "
                         "backend out")
    check_kwargs(f"the Brax env {robot!r}", accepted, library, env=ENV_KEYWORDS, kind="the Brax env's")


def library_keywords(robot: str) -> dict[str, str | None] | None:
    """The keywords Brax's env ``robot`` takes, as declared for the installed Brax (``marl_envs._core.keywords``),
    less ``sys`` (the model each env loads itself); None where they are not declared."""
    declared = keywords.declared("brax", robot)
    return None if declared is None else {k: v for k, v in declared.items() if k != "sys"}
