"""What every figure of the study shares: matplotlib (the ``[plot]`` extra, imported only when drawing,
on the Agg backend: no display is needed), the Okabe-Ito palette (told apart by colour-blind readers
too, and each variant has a marker of its own as well), how numbers, variants and runs are named in
titles, and saving a figure as PNG and/or SVG. SVG text is kept as text, so what a title says can be
searched for in the file.

Every figure is laid out by matplotlib's constrained layout, which keeps each panel's labels, titles
and legends clear of the next panel's; :mod:`fastbench.study.labels` then freezes that layout before
it places labels inside a panel.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastbench.exceptions import ConfigError
from fastbench.study.figures_data import NO_VARIANT, RunPoint

__all__ = ("FORMATS", "LOAD_WORD", "MARKERS", "NO_VARIANT_SHOWN", "OKABE_ITO", "Drawn", "legend_outside", "number",
           "pyplot", "run_description", "save", "series_summary", "shown", "style", "wrapped")

# Okabe & Ito (2008), "Color Universal Design": distinguishable with any colour-vision deficiency.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
FORMATS = ("png", "svg")
LOAD_WORD = {"concurrency": "concurrency", "rate": "request rate"}
NO_VARIANT_SHOWN = "runs without a variant"


@dataclasses.dataclass
class Drawn:
    """A figure drawn and not yet saved: the matplotlib figure, what it showed (written beside it as
    JSON) and its title (the files' metadata)."""

    figure: Any
    summary: dict[str, Any]
    title: str


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'fastbench-llm[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "savefig.dpi": 150,
                         "axes.grid": True, "grid.alpha": 0.3})
    return plt


def style(index: int) -> dict[str, Any]:
    return {"color": OKABE_ITO[index % len(OKABE_ITO)], "marker": MARKERS[index % len(MARKERS)]}


def save(drawn: Drawn, out_dir: Path, formats: Sequence[str]) -> tuple[list[Path], dict[str, Any]]:
    """Write the figure as OUT/NAME.FMT for each format, close it; (the paths, its summary)."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / f"{drawn.summary['figure']}.{fmt}"
        drawn.figure.savefig(path, format=fmt, bbox_inches="tight", metadata={"Title": drawn.title})
        written.append(path)
    plt.close(drawn.figure)
    return written, drawn.summary


def number(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def shown(variant: str) -> str:
    """A variant as a title or legend names it: runs without one are said to be so, not given a
    placeholder name."""
    return NO_VARIANT_SHOWN if variant == NO_VARIANT else variant


def run_description(point: RunPoint) -> str:
    """What is known of a run's cell, for a title: "spec, concurrency 16", "request rate 4/s", or ""."""
    parts = [] if point.variant == NO_VARIANT else [point.variant]
    if point.concurrency is not None:
        parts.append(f"{LOAD_WORD['concurrency']} {point.concurrency}")
    if point.request_rate is not None:
        parts.append(f"{LOAD_WORD['rate']} {number(point.request_rate)}/s")
    return ", ".join(parts)


def wrapped(lines: Sequence[str], width: int) -> str:
    """Lines of a title, each wrapped at ``width`` characters (a long one is never cut off by the
    figure's edge)."""
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) for line in lines)


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """A legend to the right of the panel, outside it: it covers no data and no label, and constrained
    layout makes room for it."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def series_summary(series: Mapping[str, Sequence[Any]]) -> dict[str, list[dict[str, Any]]]:
    return {variant: [{"load": c.load, "mean": c.mean, "low": c.low, "high": c.high, "runs": list(c.run_ids)}
                      for c in cells] for variant, cells in series.items()}
