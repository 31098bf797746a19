"""JaxMARL's own drawings of a state as an ``(H, W, 3)`` uint8 image: the MPE visualizer's figure and SMAX's
``init_render``, drawn on matplotlib's Agg canvas (no window, no display needed). Other JaxMARL envs have no
drawing of their state that returns an image."""

from __future__ import annotations

import collections
import contextlib
import io
from typing import Any

import numpy as np

__all__ = ["draw", "drawing_of"]


def drawing_of(env: Any) -> str | None:
    """``"mpe"`` or ``"smax"``: which of JaxMARL's drawings ``env`` (a JaxMARL env instance) has; None: none."""
    module = type(env).__module__
    if module.startswith("jaxmarl.environments.mpe."):
        # the visualizer colours entity i with colour[i]; MPE_simple_push_v3 spreads its landmarks' two RGB colours
        # into six numbers (JaxMARL 0.2.0), which it cannot draw
        colours = getattr(env, "colour", ())[:getattr(env, "num_entities", 0)]
        return "mpe" if all(np.shape(colour) == (3,) for colour in colours) else None
    if module.startswith("jaxmarl.environments.smax.") and hasattr(env, "init_render"):
        return "smax"
    return None


def draw(env: Any, state: Any) -> np.ndarray:
    """JaxMARL's drawing of ``state`` (one env's, NumPy leaves) as an RGB array (500 x 500)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if drawing_of(env) == "mpe":
        import matplotlib.pyplot as plt
        from jaxmarl.environments.mpe.mpe_visualizer import MPEVisualizer

        with contextlib.redirect_stdout(io.StringIO()):  # it prints whether the agents communicate
            figure = MPEVisualizer(env, [state]).fig
        try:
            return _pixels(FigureCanvasAgg(figure))
        finally:
            plt.close(figure)  # the visualizer makes its figure with pyplot, which keeps it until closed
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5, 5))
    while not hasattr(state, "unit_alive") and hasattr(state, "state"):
        state = state.state  # the SMAX state inside a scripted-enemy env's
    # init_render takes (key, state, actions) as JaxMARL's visualizer replays them; with no action known here,
    # every unit is drawn as moving (0: no shot highlighted)
    step = int(np.asarray(getattr(state, "step", getattr(state, "time", 0))))  # its title: "Step N"
    env.init_render(figure.add_subplot(), (None, state, collections.defaultdict(int)), 0, step)
    return _pixels(FigureCanvasAgg(figure))


def _pixels(canvas: Any) -> np.ndarray:
    canvas.draw()
    return np.array(canvas.buffer_rgba())[..., :3]
