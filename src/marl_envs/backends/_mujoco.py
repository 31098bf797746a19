"""What every backend built on MuJoCo (Brax, MaMuJoCo) needs from its surroundings, applied when an env of theirs
is built, never at import.

- **Headless rendering.** MuJoCo picks its OpenGL backend when it is imported. On a Linux machine without a
  display that has EGL's library (``libEGL``), ``MUJOCO_GL=egl`` is set just before MuJoCo is first imported by
  us, unless ``MUJOCO_GL`` is set already. Where MuJoCo was imported before us with ``MUJOCO_GL`` unset (TorchRL
  0.14's ``torchrl.envs`` imports it), it chose GLFW, which needs a display: its renderer's context is switched to
  EGL's then, the one backend that draws there. Without ``libEGL`` it is left unset: MuJoCo 4.0's import breaks on
  ``egl`` then (seen on a GPU server without ``libegl1``), and only rendering needs OpenGL.
- **Model-file notices.** MuJoCo's C compiler warns about attributes of the libraries' own model files (Brax's and
  Gymnasium's halfcheetah: the deprecated ``settotalmass``): nothing a user can act on. Unhandled, MuJoCo prints
  its warnings on the process's stderr and appends them to a ``MUJOCO_LOG.TXT`` it creates in the working
  directory. ``quiet_model_build`` routes them through a handler of ours while a model is built: those notices
  are dropped, the others become Python warnings.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import os
import re
import sys
import warnings
from collections.abc import Iterator

__all__ = ["camera_of", "prepare_mujoco_gl", "quiet_model_build"]

_MODEL_FILE_NOTICES = re.compile(r"compiler attribute '\w+' is deprecated")


def prepare_mujoco_gl() -> None:
    """Set ``MUJOCO_GL=egl`` for headless rendering before MuJoCo is first imported (see the module docstring)."""
    if (not sys.platform.startswith("linux") or os.environ.get("DISPLAY") or os.environ.get("MUJOCO_GL")
            or ctypes.util.find_library("EGL") is None):
        return
    os.environ["MUJOCO_GL"] = "egl"  # read by MuJoCo's import, and by Gymnasium's renderer when it is built
    if "mujoco" in sys.modules:
        _egl_after_import()


def _egl_after_import() -> None:
    """MuJoCo's renderer context as EGL's, where MuJoCo was imported with ``MUJOCO_GL`` unset and took GLFW's."""
    try:
        from mujoco.rendering.classic import gl_context
    except ImportError:  # MuJoCo before 3.4: the renderer is told its context at import only
        return
    chosen = getattr(gl_context, "GLContext", None)
    if chosen is not None and chosen.__module__.startswith("mujoco.glfw"):
        try:
            from mujoco.egl import GLContext
        except ImportError:  # PyOpenGL was set to another platform (PYOPENGL_PLATFORM): GLFW's context stays
            return
        gl_context.GLContext = GLContext


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings while a model is built: the model-file notices dropped, the others Python warnings."""
    if not _MODEL_FILE_NOTICES.search(message):
        warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


@contextlib.contextmanager
def quiet_model_build() -> Iterator[None]:
    """MuJoCo's warnings go through our handler (no ``MUJOCO_LOG.TXT`` in the working directory) while the block
    builds models: its notices about the libraries' model files are dropped, the others become Python warnings.
    The previous handler is back afterwards."""
    prepare_mujoco_gl()
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(_mujoco_warning)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def camera_of(model, camera: str | int | None) -> str | int:
    """The camera ``render(camera=...)`` draws from: a name or an index of ``model``'s cameras, -1 for MuJoCo's free
    camera; None picks the model's ``track`` camera (it follows the robot: Brax's and Gymnasium's robots have it),
    else its first camera, else the free camera.

    Raises:
        ValueError: a name the model does not have (its cameras are listed) or an index out of range.
    """
    import mujoco

    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    if camera is None:
        return "track" if "track" in names else (0 if names else -1)
    if isinstance(camera, str) and camera in names:
        return camera
    if isinstance(camera, int) and not isinstance(camera, bool) and -1 <= camera < len(names):
        return camera
    from .._core.messages import did_you_mean

    named = [n for n in names if n]
    raise ValueError(f"unknown camera {camera!r}{did_you_mean(str(camera), named) or ';'} the model's cameras are "
                     f"{named} (or an index in [-1, {len(names)}); -1 is MuJoCo's free camera)")
