"""The report's figures: drawn as `fastbench plot` draws them, each SVG read back from disk for the page."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import orjson

from fastbench.atomicfile import write_bytes_atomic
from fastbench.exceptions import ConfigError, FastbenchError
from fastbench.study.figures_data import RunPoint, complete_points, left_out, point_document, point_records

__all__ = ("FIGURE_CAPTIONS", "Figure", "draw_figures")


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str  # crossover, pareto, ...
    caption: str
    svg: str  # the SVG document as matplotlib wrote it
    lines: tuple[str, ...]  # what it says in words (crossings, the frontier)


FIGURE_CAPTIONS = {
    "crossover": "Per-stream decode rate (median of each request's own rate) and steady-state aggregate output "
                 "throughput against load, one line per variant; where the lines cross is marked.",
    "pareto": "Per-stream rate against steady-state aggregate throughput, one point per variant and load; the "
              "Pareto frontier joined.",
    "latency": "TTFT, TPOT, ITL and E2E latency p50 / p90 / p99 against load.",
    "acceptance": "Speculative decoding: mean acceptance length (server) and tokens per chunk (client), and "
                  "per-position acceptance, against load.",
}


def draw_figures(points: Sequence[RunPoint], out_dir: Path) -> list[Figure]:
    """The study's figures, each written as OUT/NAME.svg and .png with its numbers in OUT/NAME.json (as
    `fastbench plot` writes them, with ``left_out``: the incomplete runs no point averages); a figure
    the runs cannot make (no speculative decoding, no load) is left out. Only complete runs reach the
    drawing."""
    import importlib.util

    from fastbench.study import plots  # matplotlib only now

    if importlib.util.find_spec("matplotlib") is None:  # else every figure would be left out, silently
        raise ConfigError("fastbench report draws its figures with matplotlib: pip install 'fastbench-llm[plot]'")
    drawn: list[Figure] = []
    complete, left = complete_points(points), left_out(points)
    for name, draw in (("crossover", plots.draw_crossover), ("pareto", plots.draw_pareto),
                       ("latency", plots.draw_latency), ("acceptance", plots.draw_acceptance)):
        try:
            paths, summary = draw(complete, out_dir, ("svg", "png"))
        except ConfigError:
            continue
        write_bytes_atomic(out_dir / f"{summary.get('figure', name)}.json", orjson.dumps(
            {**summary, "left_out": left}, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
        svg = next(p for p in paths if p.suffix == ".svg").read_text(encoding="utf-8")
        drawn.append(Figure(name, FIGURE_CAPTIONS[name], svg, tuple(summary.get("lines", ()))))
    return drawn + _timelines(complete, out_dir)


MAX_TIMELINES = 8  # a run over time each, for the first complete runs: a 24-cell study's page stays readable


def _timelines(points: Sequence[RunPoint], out_dir: Path) -> list[Figure]:
    """Each of the first MAX_TIMELINES complete runs over time, as `fastbench plot timeline` draws it (the
    curves the live view showed: in flight, tokens/s, latency quantiles second by second, the server's
    gauges); the runs past them are named in the last one's lines."""
    from fastbench.study import plots

    drawn: list[Figure] = []
    for point in points[:MAX_TIMELINES]:
        try:
            paths, summary = plots.draw_timeline(point, point_document(point), point_records(point), out_dir,
                                                 ("svg",))
        except FastbenchError:  # nothing kept to draw over time, or its files cannot be read: no figure
            continue
        svg = paths[0].read_text(encoding="utf-8")
        drawn.append(Figure(str(summary["figure"]), f"Run {point.run_id} over time ({point.variant}): requests in "
                            "flight, output tokens/s, latency p50 / p99 each second, the server's gauges.", svg, ()))
    if len(points) > MAX_TIMELINES and drawn:
        last = drawn[-1]
        drawn[-1] = dataclasses.replace(last, lines=(f"runs over time: the first {MAX_TIMELINES} of {len(points)} "
                                                     "drawn (fastbench plot timeline RUN draws any other)",))
    return drawn
