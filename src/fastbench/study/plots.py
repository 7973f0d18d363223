"""The study's figures against load (crossover, Pareto frontier, latency, acceptance) drawn with
matplotlib (see ``drawing`` for what all figures share); one run's figures (percentile spectrum, over
time) are in ``run_figures`` and exported here too. What they show is computed in ``figures_data``;
this module only draws it.

Each ``draw_*`` returns what it wrote and a summary of what it showed (the figure's numbers, written
beside it as JSON by the command); each ``figure_*`` returns the figure drawn and not yet saved (tests
measure it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastbench.exceptions import ConfigError
from fastbench.study.drawing import (
    FORMATS,
    LOAD_WORD,
    OKABE_ITO,
    Drawn,
    legend_outside,
    number,
    pyplot,
    save,
    series_summary,
    shown,
    style,
    wrapped,
)
from fastbench.study.figures_data import (
    NO_VARIANT,
    Axis,
    Cell,
    Crossing,
    RunPoint,
    all_crossings,
    group_series,
    log_axis,
    pareto_front,
    per_position_points,
    position_key,
    series_contexts,
)
from fastbench.study.labels import Label, add_footnote, place_labels
from fastbench.study.run_figures import draw_spectrum, draw_timeline, figure_spectrum, figure_timeline
from fastbench.study.sustained import SUSTAINED_KEY, axis_label, runs_fallback_line

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

__all__ = ("FORMATS", "OKABE_ITO", "crossing_text", "draw_acceptance", "draw_crossover", "draw_latency", "draw_pareto",
           "draw_spectrum", "draw_timeline", "figure_acceptance", "figure_crossover", "figure_latency",
           "figure_pareto", "figure_spectrum", "figure_timeline")

PER_STREAM_KEY = "median_decode_rate_tok_s"  # the median of the per-request decode rates
THROUGHPUT_KEY = SUSTAINED_KEY  # steady-state, else the whole window's (study.sustained)
LOAD_LABEL = {"concurrency": "Concurrency (requests in flight at most)", "rate": "Request rate (requests/s)"}


def crossing_text(c: Crossing, axis: Axis = "concurrency") -> str:
    """One line: where the two variants cross, and its interval where repeats give one."""
    text = f"{shown(c.first)} and {shown(c.second)} cross at {LOAD_WORD[axis]} {number(c.load)}"
    if c.low is not None and c.high is not None:
        low = ("<=" if c.low_open else "") + number(c.low)
        high = (">=" if c.high_open else "") + number(c.high)
        text += f" (95% intervals overlap from {low} to {high})"
    leader = c.first if c.first_above_before else c.second
    return text + f"; {shown(leader)} ahead below it"


def _crossing_summary(c: Crossing, axis: Axis) -> dict[str, Any]:
    return {"first": c.first, "second": c.second, "load": c.load, "low": c.low, "high": c.high,
            "low_open": c.low_open, "high_open": c.high_open,
            "ahead_below": c.first if c.first_above_before else c.second, "text": crossing_text(c, axis)}


def _draw_series(ax: Any, series: dict[str, list[Cell]], order: Sequence[str]) -> list[list[tuple[float, float]]]:
    """Each variant's means joined, its 95% intervals as error bars, its repeats faint behind; the
    polylines drawn (the means' and the error bars'), for labels to keep off."""
    drawn: list[list[tuple[float, float]]] = []
    for variant, cells in series.items():
        look = style(order.index(variant))
        xs = [c.load for c in cells]
        ys = [c.mean for c in cells]
        yerr = [[c.mean - c.low for c in cells], [c.high - c.mean for c in cells]]
        ax.errorbar(xs, ys, yerr=yerr if any(c.high > c.low for c in cells) else None, label=shown(variant),
                    capsize=3, linewidth=1.8, markersize=6, **look)
        drawn.append(list(zip(xs, ys)))
        drawn += [[(c.load, c.low), (c.load, c.high)] for c in cells if c.high > c.low]
        repeats = [(c.load, v) for c in cells if len(c.values) > 1 for v in c.values]
        if repeats:  # each repeat, faint, behind its mean
            ax.scatter([x for x, _ in repeats], [v for _, v in repeats], s=12, alpha=0.35,
                       color=look["color"], marker=look["marker"], zorder=1)
    return drawn


def _load_axis(ax: Any, loads: Sequence[float], axis: Axis, log_x: bool) -> None:
    ax.set_xlabel(LOAD_LABEL[axis])
    if log_x:
        ax.set_xscale("log", base=2)
        ticks = sorted(set(loads))
        ax.set_xticks(ticks)
        ax.set_xticklabels([number(t) for t in ticks])
        ax.minorticks_off()


def figure_crossover(points: Sequence[RunPoint], axis: Axis = "concurrency", name: str = "crossover") -> Drawn:
    """Per-stream decode rate and aggregate output throughput against load, one line per variant, the
    crossings of each pair marked (a dashed line at the crossing, its interval shaded, its load
    labelled where the label overlaps nothing; every crossing is written in the title)."""
    plt = pyplot()
    rate = group_series(points, PER_STREAM_KEY, axis)
    tput = group_series(points, THROUGHPUT_KEY, axis)
    if not rate and not tput:
        raise ConfigError(f"no run has a {LOAD_WORD[axis]} and a per-stream decode rate or throughput to plot")
    order = sorted(set(rate) | set(tput))
    loads = sorted({c.load for s in (*rate.values(), *tput.values()) for c in s})
    log_x = log_axis(loads)
    contexts = series_contexts(points, axis)  # only variants at the same other values cross
    fig, (ax_rate, ax_tput) = plt.subplots(1, 2, figsize=(14, 5.4), layout="constrained")
    found: dict[str, list[Crossing]] = {}
    obstacles: dict[str, list[list[tuple[float, float]]]] = {}
    for ax, series, ylabel, key in (
            (ax_rate, rate, "Per-stream decode rate, median per request (tokens/s)", "per_stream"),
            (ax_tput, tput, axis_label(points), "throughput")):
        obstacles[key] = _draw_series(ax, series, order)
        _load_axis(ax, loads, axis, log_x)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        found[key] = all_crossings(series, log_x=log_x, contexts=contexts)
        for c in found[key]:
            if c.low is not None and c.high is not None:
                ax.axvspan(c.low, c.high, color="0.5", alpha=0.15, linewidth=0)
            ax.axvline(c.load, color="0.2", linestyle="--", linewidth=1)
    legend_outside(ax_tput, title="variant", fontsize=9)
    ax_rate.set_title("Per-stream decode rate (what one user sees)")
    ax_tput.set_title("Aggregate output throughput (what the server delivers)")
    lines = [f"per-stream rate: {crossing_text(c, axis)}" for c in found["per_stream"]] or [
        "per-stream rate: no crossing"]
    lines += [f"throughput: {crossing_text(c, axis)}" for c in found["throughput"]] or ["throughput: no crossing"]
    title = "Crossover - " + " | ".join(lines)
    fig.suptitle(wrapped(lines, 170), fontsize=10)
    for ax, key in ((ax_rate, "per_stream"), (ax_tput, "throughput")):
        # each crossing's load by its dashed line, at the foot of the panel or else at its top (every
        # crossing is in the title too)
        bottom, top = ax.get_ylim()
        at = {number(c.load): c.load for c in found[key]}  # crossings at one load are labelled once
        place_labels(ax, [Label(load, bottom, text, {"fontsize": 9, "color": "0.2", "rotation": 90}, ((load, top),))
                          for text, load in at.items()], avoid_lines=obstacles[key],
                     avoid_vertical=[c.load for c in found[key]], marker_pt=2.0)
    summary = {"figure": name, "load_axis": axis, "log_load": log_x, "per_stream_key": PER_STREAM_KEY,
               "throughput_key": THROUGHPUT_KEY, "per_stream": series_summary(rate),
               "throughput": series_summary(tput),
               "crossings": {k: [_crossing_summary(c, axis) for c in v] for k, v in found.items()},
               "lines": [*lines, *[line for line in [runs_fallback_line(points)] if line]]}
    return Drawn(fig, summary, title)


def draw_crossover(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                   axis: Axis = "concurrency", name: str = "crossover") -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_crossover`, saved."""
    return save(figure_crossover(points, axis, name), out_dir, formats)


PARETO_MARGIN = 1.12  # the axes reach this far past the largest throughput and per-stream rate


def figure_pareto(points: Sequence[RunPoint], axis: Axis = "concurrency", name: str = "pareto") -> Drawn:
    """Per-stream decode rate against aggregate throughput, one point per (variant, load) cell (the mean
    of its repeats), the Pareto-optimal cells joined and named. Labels are placed where they overlap
    nothing (the frontier's first); one that fits nowhere is named in a note below the panel."""
    plt = pyplot()
    rate = group_series(points, PER_STREAM_KEY, axis)
    tput = group_series(points, THROUGHPUT_KEY, axis)
    cells: list[tuple[str, float, float, float]] = []  # variant, load, throughput, per-stream rate
    for variant in sorted(set(rate) & set(tput)):
        by_load = {c.load: c.mean for c in tput[variant]}
        cells += [(variant, c.load, by_load[c.load], c.mean) for c in rate[variant] if c.load in by_load]
    if not cells:
        raise ConfigError("no run has both a per-stream decode rate and a throughput to plot")
    order = sorted({v for v, *_ in cells})
    front = [cells[i] for i in pareto_front([(c[3], c[2]) for c in cells])]
    fig, ax = plt.subplots(figsize=(9.5, 6.2), layout="constrained")
    short = "c" if axis == "concurrency" else "rate"

    def named(variant: str, load: float) -> str:  # runs without a variant: named by their load alone
        return f"{short}={number(load)}" if variant == NO_VARIANT else f"{variant} {short}={number(load)}"

    for variant in order:
        mine = [c for c in cells if c[0] == variant]
        ax.scatter([c[2] for c in mine], [c[3] for c in mine], label=shown(variant), s=40, zorder=3,
                   **style(order.index(variant)))
    ax.plot([c[2] for c in front], [c[3] for c in front], color="0.2", linewidth=1.2, linestyle="-", zorder=2,
            label="Pareto frontier")
    ax.set_xlabel(axis_label(points))
    ax.set_ylabel("Per-stream decode rate, median per request (tokens/s)")
    # room beyond the largest point: its marker (and its label) inside the frame, never cut by it
    ax.set_xlim(0, max(c[2] for c in cells) * PARETO_MARGIN or 1.0)
    ax.set_ylim(0, max(c[3] for c in cells) * PARETO_MARGIN or 1.0)
    legend_outside(ax, fontsize=9)
    names = [named(v, load) for v, load, _, _ in front]
    title = "Pareto frontier: " + ", ".join(names)
    ax.set_title(wrapped([title], 100), fontsize=10)
    others = [c for c in cells if c not in front]
    labelled = [(Label(x, y, named(v, load), {"fontsize": 9, "fontweight": "bold"}), (v, load, x, y))
                for v, load, x, y in front]
    labelled += [(Label(x, y, f"{short}={number(load)}", {"fontsize": 8, "color": "0.35"}), (v, load, x, y))
                 for v, load, x, y in others]
    _, unplaced = place_labels(ax, [label for label, _ in labelled], avoid_lines=[[(c[2], c[3]) for c in front]])
    if unplaced:
        cell_of = {id(label): cell for label, cell in labelled}
        add_footnote(fig, "Not labelled for want of room (throughput, per-stream rate in tokens/s): " + "; ".join(
            f"{named(v, load)} ({number(x)}, {number(y)})" for v, load, x, y in (cell_of[id(u)] for u in unplaced)))
    summary = {"figure": name, "load_axis": axis,
               "cells": [{"variant": v, "load": load, "throughput": x, "per_stream": y} for v, load, x, y in cells],
               "frontier": [{"variant": v, "load": load, "throughput": x, "per_stream": y} for v, load, x, y in front],
               "lines": [title, *[line for line in [runs_fallback_line(points)] if line]]}
    return Drawn(fig, summary, title)


def draw_pareto(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                axis: Axis = "concurrency", name: str = "pareto") -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_pareto`, saved."""
    return save(figure_pareto(points, axis, name), out_dir, formats)


LATENCIES = (("ttft", "Time to first token"), ("tpot", "Time per output token"),
             ("itl", "Inter-chunk latency (ITL)"), ("e2el", "End-to-end latency"))
STATS: tuple[tuple[str, str, LineStyleType], ...] = (("median", "p50", "-"), ("p90", "p90", "--"), ("p99", "p99", ":"))


def figure_latency(points: Sequence[RunPoint], axis: Axis = "concurrency", name: str = "latency") -> Drawn:
    """TTFT, TPOT, ITL and E2E latency p50 / p90 / p99 against load: a panel each, a colour per variant,
    a line style per percentile, one key for all four panels beside them."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    summary: dict[str, Any] = {"figure": name, "load_axis": axis, "metrics": {}}
    all_loads = sorted({x for p in points if (x := p.load(axis)) is not None})
    if not all_loads:
        raise ConfigError(f"no run has a {LOAD_WORD[axis]} to plot against")
    fig, axes = plt.subplots(2, 2, figsize=(13.5, 9), layout="constrained")
    log_x = log_axis(all_loads)
    grouped = {(metric, stat): group_series(points, f"{stat}_{metric}_ms", axis)
               for metric, _ in LATENCIES for stat, _, _ in STATS}
    order = sorted({name for series in grouped.values() for name in series})  # variant and other grid keys
    drawn: set[str] = set()
    for ax, (metric, title) in zip(axes.flat, LATENCIES):
        summary["metrics"][metric] = {}
        for stat, label, linestyle in STATS:
            series = grouped[metric, stat]
            summary["metrics"][metric][label] = series_summary(series)
            for variant, cells in series.items():
                ax.plot([c.load for c in cells], [c.mean for c in cells], linestyle=linestyle, linewidth=1.6,
                        markersize=5, **style(order.index(variant)))
                drawn.add(variant)
        _load_axis(ax, all_loads, axis, log_x)
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
    handles = [Line2D([], [], linewidth=1.6, label=shown(v), **style(order.index(v))) for v in order if v in drawn]
    handles += [Line2D([], [], color="0.3", linestyle=linestyle, linewidth=1.6, label=label)
                for _, label, linestyle in STATS]
    legend_outside(axes[0][1], handles=handles, fontsize=9)
    fig.suptitle("Latency percentiles against load (p50 solid, p90 dashed, p99 dotted)", fontsize=11)
    return Drawn(fig, summary, "Latency percentiles against load")


def draw_latency(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                 axis: Axis = "concurrency", name: str = "latency") -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_latency`, saved."""
    return save(figure_latency(points, axis, name), out_dir, formats)


ACCEPTANCE_KEY = "spec_decode_acceptance_length"
TOKENS_PER_CHUNK_KEY = "mean_tokens_per_chunk"
POSITION_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))


def figure_acceptance(points: Sequence[RunPoint], axis: Axis = "concurrency", name: str = "acceptance") -> Drawn:
    """Speculative decoding against load per variant: the mean acceptance length (the server's counters)
    solid, with the client's tokens per chunk (its estimate of it, which a server merging steps under
    load inflates) dashed; and beside it, where the server counts them per position, the acceptance rate
    at each draft position (a line style per position)."""
    plt = pyplot()
    server = group_series(points, ACCEPTANCE_KEY, axis)
    client = group_series(points, TOKENS_PER_CHUNK_KEY, axis)
    if not server and not client:
        raise ConfigError(f"no run has an acceptance length or tokens per chunk and a {LOAD_WORD[axis]}")
    with_positions, positions = per_position_points(points)
    by_position = [group_series(with_positions, position_key(i), axis) for i in range(positions)]
    order = sorted(set(server) | set(client))
    loads = sorted({c.load for s in (*server.values(), *client.values()) for c in s})
    fig, axes = plt.subplots(1, 2 if positions else 1, figsize=(15, 5.5) if positions else (8.5, 5.5),
                             squeeze=False, layout="constrained")
    ax = axes[0][0]
    for series, linestyle, what in ((server, "-", "acceptance length (server)"),
                                    (client, "--", "tokens per chunk (client)")):
        for variant, cells in series.items():
            ax.plot([c.load for c in cells], [c.mean for c in cells], linestyle=linestyle, linewidth=1.6,
                    label=f"{shown(variant)} {what}", **style(order.index(variant)))
    _load_axis(ax, loads, axis, log_axis(loads))
    ax.set_ylabel("Tokens per decode step (tokens)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9)
    ax.set_title("Mean acceptance length against load", fontsize=10)
    if positions:
        ax = axes[0][1]
        for i, series in enumerate(by_position):
            for variant, cells in series.items():
                look = style(order.index(variant) if variant in order else len(order))
                yerr = [[100 * (c.mean - c.low) for c in cells], [100 * (c.high - c.mean) for c in cells]]
                ax.errorbar([c.load for c in cells], [100 * c.mean for c in cells],
                            yerr=yerr if any(c.high > c.low for c in cells) else None, capsize=3,
                            linestyle=POSITION_STYLES[i % len(POSITION_STYLES)], linewidth=1.6,
                            label=f"{shown(variant)} position {i + 1}", **look)
        _load_axis(ax, loads, axis, log_axis(loads))
        ax.set_ylabel("Accepted at the position / drafts (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8)
        ax.set_title("Per-position acceptance against load (position 1 solid, 2 dashed, 3 dotted)", fontsize=10)
    fig.suptitle("Speculative decoding against load", fontsize=11)
    summary = {"figure": name, "load_axis": axis, "acceptance_length": series_summary(server),
               "tokens_per_chunk": series_summary(client),
               "per_position": [series_summary(series) for series in by_position]}
    return Drawn(fig, summary, "Acceptance against load")


def draw_acceptance(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                    axis: Axis = "concurrency", name: str = "acceptance") -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_acceptance`, saved."""
    return save(figure_acceptance(points, axis, name), out_dir, formats)
