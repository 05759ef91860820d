"""Figures on matplotlib's object API: each Figure on its own Agg canvas.

No pyplot: no global backend switch (`matplotlib.use`) and no global figure registry, so
reports drawn in Ray workers, threads and tests never touch one another's state and
nothing has to be closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def subplots(
    nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None, **kwargs: Any
) -> tuple[Figure, Any]:
    """`(figure, axes)` as `pyplot.subplots` returns them (`kwargs`: sharex, squeeze, ...).
    matplotlib is imported here, on first use, not when a report module is imported."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kwargs)
