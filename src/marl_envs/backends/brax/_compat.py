"""What the Brax backend needs from its surroundings, applied when the first Brax env is built, never at import.

Three adjustments, each made only when needed and documented in the Brax backend's page:

- **Headless rendering.** ``MUJOCO_GL=egl`` where EGL's library is there, set just before Brax (or, for an env
  loaded from its export, the renderer) first imports MuJoCo (``marl_envs.backends._mujoco.prepare_mujoco_gl``).
- **``jnp.clip`` shim.** Brax 0.14.2's ``brax/fluid.py`` (fluid drag, used by ``swimmer``) calls
  ``jnp.clip(..., a_min=...)``, a keyword JAX 0.10 removed. When the installed JAX lacks it, ``brax.fluid``'s
  ``jp`` is replaced by a proxy of ``jax.numpy`` whose ``clip`` still accepts ``a_min`` / ``a_max`` (also when
  user code imported Brax first). Nothing else in Brax or JAX is touched.
- **Quiet import.** MuJoCo's MJX prints "Failed to import warp" lines (an optional GPU package) when Brax is
  imported; those lines are dropped, anything else printed is passed on. Building a Brax env
  (``quiet_brax_build``) drops Brax's warning that it is unmaintained and MuJoCo's notices about Brax's own
  model files (``marl_envs.backends._mujoco.quiet_model_build``).

Also here: what is read from Brax itself (the checks of a wrapped env, the keywords an env class takes). The JAX
settings every JAX family shares (the compilation cache, JAX's CPU dispatch) are ``marl_envs.backends.jax``'s.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from typing import Any

import jax.numpy as jnp

from .._mujoco import prepare_mujoco_gl, quiet_model_build
from .._quiet import Filter, ignored_warnings, quiet_import
from ...distributed import jax_device  # torch cuda:k -> the JAX GPU of CUDA id k (public, checked)

__all__ = ["checked_env", "import_brax", "jax_device", "prepare_mujoco_gl", "quiet_brax_build"]


class _ClipWithBounds:
    """``jax.numpy`` whose ``clip`` still takes ``a_min`` / ``a_max``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(jnp, name)

    @staticmethod
    def clip(x, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002 - jnp.clip's own names
        return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)


_OPTIONAL_GPU_NOTICES = re.compile(r"^Failed to import (mujoco_)?warp: .*\n?", re.M)
_JAXOPT_UNMAINTAINED: Filter = ("JAXopt is no longer maintained", DeprecationWarning)  # brax imports jaxopt
# Brax's warning, on building any of its envs, that it is not maintained (we pin the version we test)
_UNMAINTAINED: Filter = (r"Brax System, piplines and environments are not actively being maintained", UserWarning)


@contextlib.contextmanager
def quiet_brax_build():
    """Building Brax envs (ours, JaxMARL's MABrax): Brax's warning that it is unmaintained is off, and MuJoCo's
    warnings go through our handler (``marl_envs.backends._mujoco.quiet_model_build``)."""
    with quiet_model_build(), ignored_warnings(_UNMAINTAINED):
        yield


def import_brax():
    """Brax's env package, imported on first use (not on a saved env's path) with the adjustments above."""
    if "brax.envs" not in sys.modules:
        prepare_mujoco_gl()
        quiet_import("brax.envs", _JAXOPT_UNMAINTAINED, drop=_OPTIONAL_GPU_NOTICES)
    import brax.fluid

    if not isinstance(brax.fluid.jp, _ClipWithBounds) and "a_min" not in inspect.signature(jnp.clip).parameters:
        brax.fluid.jp = _ClipWithBounds()
    return sys.modules["brax.envs"]


def is_playground_env(env) -> bool:
    """Whether ``env`` is a MuJoCo Playground env (an ``MjxEnv``), told without importing Playground."""
    return any(c.__name__ == "MjxEnv" and c.__module__.startswith("mujoco_playground") for c in type(env).__mro__)


def checked_env(env):
    """``env`` if it is an unbatched ``brax.envs.Env`` without auto-reset, else a TypeError / ValueError says why."""
    envs = import_brax()
    from brax.envs.wrappers import training

    if is_playground_env(env):  # Brax's interface (reset(rng), step(state, action), State), MJX physics
        return env
    if not isinstance(env, envs.Env):
        raise TypeError(f"BraxWrapper wraps a brax.envs.Env (or a MuJoCo Playground MjxEnv), got "
                        f"{type(env).__name__}; or use BraxEnv(name)")
    layer = env
    while not isinstance(layer, (training.VmapWrapper, training.AutoResetWrapper)):
        if not isinstance(layer, envs.Wrapper):
            return env
        layer = layer.env
    raise ValueError(
        f"the env is wrapped in {type(layer).__name__}; pass an unbatched env without auto-reset "
        f"(e.g. brax.envs.get_environment(name), or envs.create(name, auto_reset=False)): BraxWrapper "
        f"batches it (num_envs) and resets done envs itself"
    )
