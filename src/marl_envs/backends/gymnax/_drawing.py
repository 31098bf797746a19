"""gymnax's own drawing of a state (``gymnax.visualize.Visualizer``'s first frame) as an ``(H, W, 3)`` uint8
image, on matplotlib's Agg canvas (no window, no display needed)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DRAWN", "draw"]

#: The envs gymnax's visualizer draws (``gymnax.visualize.Visualizer.init``), by the env's ``name``.
DRAWN = frozenset({
    "Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Catch-bsuite",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Pong-misc", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc",
})


def draw(env: Any, params: Any, state: Any) -> np.ndarray:
    """gymnax's drawing of ``state`` (one env's, NumPy leaves) of ``env`` with ``params`` (600 x 500)."""
    import matplotlib

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with matplotlib.rc_context({"backend": "agg"}):
        import matplotlib.pyplot as plt
        from gymnax.visualize import Visualizer

        visualizer = Visualizer(env, params, [state])  # its figure is pyplot's: closed below
        try:
            visualizer.init()
            canvas = FigureCanvasAgg(visualizer.fig)
            canvas.draw()
            return np.array(canvas.buffer_rgba())[..., :3]
        finally:
            plt.close(visualizer.fig)
