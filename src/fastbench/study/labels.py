"""Labels placed where they overlap nothing, and notes put below a figure.

:func:`place_labels` is a greedy placer on the rendered figure: for each label in turn (the most
important first), it tries positions around the point it names, nearest first (up and to the right,
then the other seven directions, then farther out with a thin leader line), measures the text where
the renderer would draw it, and keeps the first position that lies inside the panel and overlaps no
label already placed, no marker, no line given to avoid and no legend. A label that fits nowhere is
not drawn over another: it is returned, for the caller to say elsewhere (a note below the figure).

The figure's layout is computed once and frozen first (constrained layout would otherwise move the
panels when the figure is saved, and the checked positions with them); labels do not take part in
the layout, so placing them cannot move anything either.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ("Label", "add_footnote", "freeze_layout", "place_labels", "text_extent")

# Offsets tried, in points: directions in order of preference, each at growing distances.
DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1))
DISTANCES = (5.0, 11.0, 20.0, 32.0, 46.0)
LEADER_FROM = 20.0  # at this distance or more, a thin line joins the label to its point
PAD_PX = 2.0  # the least gap kept between a label and anything else, in pixels


@dataclasses.dataclass(frozen=True)
class Label:
    """A text naming the point (x, y), in data coordinates."""

    x: float
    y: float
    text: str
    style: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fontsize, fontweight, color
    elsewhere: tuple[tuple[float, float], ...] = ()  # other points the label may name instead, tried in turn


def freeze_layout(fig: Any) -> Any:
    """Lay the figure out now and keep that layout from here on; the renderer, for measuring text."""
    fig.draw_without_rendering()
    if fig.get_layout_engine() is not None:
        fig.set_layout_engine("none")
    return fig.canvas.get_renderer()


def text_extent(text: Any, renderer: Any) -> Any:
    """A text's own box in pixels (an annotation's ``get_window_extent`` would include its leader line)."""
    from matplotlib.text import Annotation, Text

    if isinstance(text, Annotation):
        text.update_positions(renderer)  # an annotation's text is placed from its point only when drawn
    return Text.get_window_extent(text, renderer)


def _segment_hits_box(p: np.ndarray, q: np.ndarray, box: Any) -> bool:
    """Whether the segment p-q (pixels) passes through the box (Liang-Barsky clipping)."""
    t0, t1 = 0.0, 1.0
    d = q - p
    for delta, low, high, start in ((d[0], box.x0, box.x1, p[0]), (d[1], box.y0, box.y1, p[1])):
        if delta == 0:
            if start < low or start > high:
                return False
            continue
        a, b = (low - start) / delta, (high - start) / delta
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
        if t0 > t1:
            return False
    return True


def _crosses(p: np.ndarray, q: np.ndarray, line: np.ndarray, skip_px: float) -> bool:
    """Whether the segment p-q meets the polyline farther than ``skip_px`` from p (a leader may touch
    the lines through its own point, there)."""
    d = q - p
    length = float(np.hypot(*d))
    if length <= skip_px:
        return False
    for a, b in zip(line[:-1], line[1:]):
        e = b - a
        denom = d[0] * e[1] - d[1] * e[0]
        if denom == 0:
            continue  # parallel: a leader running along a line is not drawn by this placer's offsets
        w = a - p
        t = (w[0] * e[1] - w[1] * e[0]) / denom
        u = (w[0] * d[1] - w[1] * d[0]) / denom
        if 0.0 <= u <= 1.0 and skip_px / length < t <= 1.0:
            return True
    return False


def _line_hits_box(line: np.ndarray, box: Any) -> bool:
    if len(line) == 1:
        return bool(box.x0 <= line[0][0] <= box.x1 and box.y0 <= line[0][1] <= box.y1)
    return any(_segment_hits_box(line[i], line[i + 1], box) for i in range(len(line) - 1))


def place_labels(ax: Any, labels: Sequence[Label], *, avoid_points: Iterable[tuple[float, float]] = (),
                 avoid_lines: Iterable[Sequence[tuple[float, float]]] = (), marker_pt: float = 7.0,
                 avoid_vertical: Iterable[float] = ()) -> tuple[list[Any], list[Label]]:
    """Draw each label in ``ax`` where it overlaps nothing (see the module's docstring): markers of
    ``marker_pt`` points at ``avoid_points`` and at each label's own point, the polylines
    ``avoid_lines`` and vertical lines at x = ``avoid_vertical`` (data coordinates), the panel's legend
    and the labels placed before it. (the annotations drawn, the labels that fit nowhere)."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = freeze_layout(fig)
    to_px = ax.transData.transform
    panel = ax.get_window_extent(renderer)
    half = marker_pt * fig.dpi / 72.0 / 2.0

    def marker(x: float, y: float) -> Any:
        return Bbox.from_extents(x - half, y - half, x + half, y + half)

    markers = [marker(*to_px(p)) for p in [*avoid_points, *((label.x, label.y) for label in labels)]]
    legend = ax.get_legend()
    boxes = [*markers, *([legend.get_window_extent(renderer)] if legend is not None else [])]
    lines = [to_px(np.asarray(line, dtype=np.float64)) for line in avoid_lines if len(line)]
    for x in avoid_vertical:
        at = to_px((x, 0.0))[0]
        lines.append(np.array([[at, panel.y0], [at, panel.y1]]))
    placed: list[Any] = []
    unplaced: list[Label] = []
    for label in labels:
        found = None
        for x, y in ((label.x, label.y), *label.elsewhere):
            found = _place_one(ax, dataclasses.replace(label, x=x, y=y), renderer, panel, boxes, lines, half)
            if found is not None:
                break
        if found is None:
            unplaced.append(label)
            continue
        ann, box, leader = found
        placed.append(ann)
        boxes.append(box)
        if leader is not None:
            lines.append(leader)
    return placed, unplaced


def _place_one(ax: Any, label: Label, renderer: Any, panel: Any, boxes: Sequence[Any], lines: Sequence[np.ndarray],
               half: float) -> tuple[Any, Any, np.ndarray | None] | None:
    """The label at the first offset around its point where it fits, nearest first; None if none."""
    from matplotlib.transforms import Bbox

    anchor = ax.transData.transform((label.x, label.y))
    own = Bbox.from_extents(anchor[0] - half, anchor[1] - half, anchor[0] + half, anchor[1] + half)
    others = [b for b in boxes if not _same(b, own)]
    for distance in DISTANCES:
        for dx, dy in DIRECTIONS:
            found = _try(ax, label, dx, dy, distance, renderer, anchor, panel, boxes, others, lines, half + PAD_PX)
            if found is not None:
                return found
    return None


def _same(a: Any, b: Any) -> bool:
    return bool(np.allclose(a.get_points(), b.get_points()))


def _try(ax: Any, label: Label, dx: int, dy: int, distance: float, renderer: Any, anchor: np.ndarray,
         panel: Any, boxes: Sequence[Any], others: Sequence[Any], lines: Sequence[np.ndarray],
         skip: float) -> tuple[Any, Any, np.ndarray | None] | None:
    """The label drawn at one offset if it fits there (and its box and leader line); else nothing drawn."""
    norm = math.hypot(dx, dy)
    leads = distance >= LEADER_FROM
    ann = ax.annotate(label.text, (label.x, label.y), xytext=(dx * distance / norm, dy * distance / norm),
                      textcoords="offset points", annotation_clip=False,
                      ha="left" if dx > 0 else "right" if dx < 0 else "center",
                      va="bottom" if dy > 0 else "top" if dy < 0 else "center",
                      arrowprops={"arrowstyle": "-", "color": "0.55", "linewidth": 0.6, "shrinkA": 0,
                                  "shrinkB": 3} if leads else None, **label.style)
    ann.set_in_layout(False)
    box = text_extent(ann, renderer).padded(PAD_PX)
    inside = panel.x0 <= box.x0 and box.x1 <= panel.x1 and panel.y0 <= box.y0 and box.y1 <= panel.y1
    # the leader runs from the point towards the text's centre, where it meets the text's box
    leader = np.array([anchor, [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]]) if leads else None
    if (inside and not any(box.overlaps(b) for b in boxes) and not any(_line_hits_box(ln, box) for ln in lines)
            and (leader is None or (not any(_segment_hits_box(leader[0], leader[1], b) for b in others)
                                    and not any(_crosses(leader[0], leader[1], ln, skip) for ln in lines)))):
        return ann, box, leader
    ann.remove()
    return None


def add_footnote(fig: Any, text: str, *, fontsize: float = 7.5, width: int = 160) -> Any:
    """A note under everything the figure draws (saved with ``bbox_inches="tight"``, the file grows to
    hold it): it overlaps no panel and moves none. The layout is frozen first."""
    import textwrap

    renderer = freeze_layout(fig)
    lowest = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
    y = (lowest - 6.0) / fig.bbox.height
    note = fig.text(0.01, y, textwrap.fill(text, width, break_on_hyphens=False), fontsize=fontsize,
                    ha="left", va="top", color="0.25")
    return note  # in the layout: bbox_inches="tight" keeps what is in it (the layout itself is frozen)
