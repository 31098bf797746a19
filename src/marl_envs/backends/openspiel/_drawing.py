"""An OpenSpiel state's text (``str(state)``: the board, the cards, the history) drawn as an ``(H, W, 3)`` uint8
image in a monospaced font, on matplotlib's Agg canvas (no window, no display needed)."""

from __future__ import annotations

import textwrap

import numpy as np

__all__ = ["text_image"]

#: The most lines and columns drawn: a longer text is cut, its last kept line or column marked with "…".
MAX_LINES, MAX_COLUMNS = 48, 100
#: Pixels around the text, and the least width and height of an image.
MARGIN, LEAST = 16, (320, 240)


def text_image(text: str) -> np.ndarray:
    """``text`` as black monospaced lines on a light background, at least 320 x 240 pixels (the indent its lines
    share left out)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lines = textwrap.dedent(text.rstrip()).splitlines() or [""]  # a board indented as a whole is drawn centred
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES - 1], "…"]
    lines = [line if len(line) <= MAX_COLUMNS else f"{line[:MAX_COLUMNS - 1]}…" for line in lines]
    figure = Figure(dpi=100, facecolor="#f4f4f4")
    canvas = FigureCanvasAgg(figure)
    drawn = figure.text(0.5, 0.5, "\n".join(lines), family="DejaVu Sans Mono", fontsize=20, ha="center",
                        va="center", multialignment="left")
    box = drawn.get_window_extent(canvas.get_renderer())  # the text's size: the figure is made to fit it
    width, height = max(LEAST[0], box.width + 2 * MARGIN), max(LEAST[1], box.height + 2 * MARGIN)
    figure.set_size_inches(round(width) / 100, round(height) / 100)
    canvas.draw()
    return np.array(canvas.buffer_rgba())[..., :3]
