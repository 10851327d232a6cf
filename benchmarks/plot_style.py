"""How the benchmarks' plots look: each series its own colour and marker, legends beside the data.

    style = series_style(index)               # {"color": ..., "marker": ...} for plot(..., **style)
    bar.set(**bar_style(index))                # fill colour and hatch of a bar
    legend_beside(figure, axes)                # one legend right of the axes, covering no data

Colours are matplotlib's ten "tab10" colours and four more, markers a list of twelve: series i and j
differ in colour whenever |i - j| < 14, in marker whenever |i - j| < 12, and in at least one of them
up to 84 series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

COLOURS = (*(f"C{i}" for i in range(10)), "black", "navy", "darkgoldenrod", "lime")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", "*", ">", "h", "p")
LEGEND_FONT_SIZE = 10
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "++", "--")


def series_style(index: int) -> dict[str, Any]:
    """Colour and marker of the index-th series."""
    return {"color": COLOURS[index % len(COLOURS)], "marker": MARKERS[index % len(MARKERS)]}


def bar_style(index: int) -> dict[str, Any]:
    """Fill colour and hatch of the index-th bar (a bar's marker; draw bars with an edge colour so it shows)."""
    return {"facecolor": COLOURS[index % len(COLOURS)], "hatch": HATCHES[index % len(HATCHES)]}


def marks_every(points: int, index: int, marks: int = 10) -> tuple[int, int]:
    """``markevery`` for a long line: about ``marks`` markers, shifted per series so they do not sit on each other."""
    step = max(1, points // marks)
    return (index * step // 7) % step, step


def legend_beside(figure: Any, axes: Sequence[Any], handles: list[Any] | None = None,
                  labels: list[str] | None = None, title: str | None = None) -> None:
    """One legend for the whole figure, right of its axes (their series, or ``handles`` and ``labels``)."""
    if handles is None:
        handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=LEGEND_FONT_SIZE,
                  title=title, title_fontsize=LEGEND_FONT_SIZE, frameon=False)


def save(figure: Any, path: Any) -> None:
    """Lay the axes out and write the figure as a PNG, the legend beside them included."""
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
