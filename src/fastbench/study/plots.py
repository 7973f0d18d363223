"""The study's figures drawn with matplotlib (the ``[plot]`` extra, imported only here and only when
drawing), on the Agg backend: no display is needed. What they show is computed in ``figures_data``;
this module only draws it, in the Okabe-Ito palette (told apart by colour-blind readers too, and each
variant has a marker of its own as well), and saves each figure as PNG and/or SVG. SVG text is kept as
text, so the crossover written in a figure's title can be searched for in the file.

Each ``draw_*`` returns what it wrote and a summary of what it showed (the figure's numbers, written
beside it as JSON by the command).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastbench.exceptions import ConfigError
from fastbench.study.figures_data import (
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
    read_histogram_log,
    spectrum,
)
from fastbench.study.store import HISTOGRAMS_FILE
from fastbench.study.sustained import SUSTAINED_KEY, axis_label, runs_fallback_line
from fastbench.study.timeline import timeline

__all__ = ("FORMATS", "OKABE_ITO", "crossing_text", "draw_acceptance", "draw_crossover", "draw_latency", "draw_pareto",
           "draw_spectrum", "draw_timeline")

# Okabe & Ito (2008), "Color Universal Design": distinguishable with any colour-vision deficiency.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")
FORMATS = ("png", "svg")

PER_STREAM_KEY = "median_decode_rate_tok_s"  # the median of the per-request decode rates
THROUGHPUT_KEY = SUSTAINED_KEY  # steady-state, else the whole window's (study.sustained)
LOAD_LABEL = {"concurrency": "Concurrency (requests in flight at most)", "rate": "Request rate (requests/s)"}
LOAD_WORD = {"concurrency": "concurrency", "rate": "request rate"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'fastbench[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "savefig.dpi": 150,
                         "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _style(index: int) -> dict[str, Any]:
    return {"color": OKABE_ITO[index % len(OKABE_ITO)], "marker": MARKERS[index % len(MARKERS)]}


def _save(plt: Any, fig: Any, out_dir: Path, name: str, formats: Sequence[str], title: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        fig.savefig(path, format=fmt, bbox_inches="tight", metadata={"Title": title})
        written.append(path)
    plt.close(fig)
    return written


def _number(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def crossing_text(c: Crossing, axis: Axis = "concurrency") -> str:
    """One line: where the two variants cross, and its interval where repeats give one."""
    text = f"{c.first} and {c.second} cross at {LOAD_WORD[axis]} {_number(c.load)}"
    if c.low is not None and c.high is not None:
        low = ("<=" if c.low_open else "") + _number(c.low)
        high = (">=" if c.high_open else "") + _number(c.high)
        text += f" (95% intervals overlap from {low} to {high})"
    leader = c.first if c.first_above_before else c.second
    return text + f"; {leader} ahead below it"


def _series_summary(series: Mapping[str, Sequence[Cell]]) -> dict[str, list[dict[str, Any]]]:
    return {variant: [{"load": c.load, "mean": c.mean, "low": c.low, "high": c.high, "runs": list(c.run_ids)}
                      for c in cells] for variant, cells in series.items()}


def _crossing_summary(c: Crossing, axis: Axis) -> dict[str, Any]:
    return {"first": c.first, "second": c.second, "load": c.load, "low": c.low, "high": c.high,
            "low_open": c.low_open, "high_open": c.high_open,
            "ahead_below": c.first if c.first_above_before else c.second, "text": crossing_text(c, axis)}


def _draw_series(ax: Any, series: Mapping[str, Sequence[Cell]], order: Sequence[str]) -> None:
    for variant, cells in series.items():
        style = _style(order.index(variant))
        xs = [c.load for c in cells]
        ys = [c.mean for c in cells]
        yerr = [[c.mean - c.low for c in cells], [c.high - c.mean for c in cells]]
        ax.errorbar(xs, ys, yerr=yerr if any(c.high > c.low for c in cells) else None, label=variant,
                    capsize=3, linewidth=1.8, markersize=6, **style)
        repeats = [(c.load, v) for c in cells if len(c.values) > 1 for v in c.values]
        if repeats:  # each repeat, faint, behind its mean
            ax.scatter([x for x, _ in repeats], [v for _, v in repeats], s=12, alpha=0.35,
                       color=style["color"], marker=style["marker"], zorder=1)


def _load_axis(ax: Any, loads: Sequence[float], axis: Axis, log_x: bool) -> None:
    ax.set_xlabel(LOAD_LABEL[axis])
    if log_x:
        ax.set_xscale("log", base=2)
        ticks = sorted(set(loads))
        ax.set_xticks(ticks)
        ax.set_xticklabels([_number(t) for t in ticks])
        ax.minorticks_off()


def draw_crossover(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                   axis: Axis = "concurrency", name: str = "crossover") -> tuple[list[Path], dict[str, Any]]:
    """Per-stream decode rate and aggregate output throughput against load, one line per variant, the
    crossings of each pair marked (a dashed line at the crossing, its interval shaded)."""
    plt = _pyplot()
    rate = group_series(points, PER_STREAM_KEY, axis)
    tput = group_series(points, THROUGHPUT_KEY, axis)
    if not rate and not tput:
        raise ConfigError(f"no run has a {LOAD_WORD[axis]} and a per-stream decode rate or throughput to plot")
    order = sorted(set(rate) | set(tput))
    loads = sorted({c.load for s in (*rate.values(), *tput.values()) for c in s})
    log_x = log_axis(loads)
    fig, (ax_rate, ax_tput) = plt.subplots(1, 2, figsize=(13, 5.2))
    found: dict[str, list[Crossing]] = {}
    for ax, series, ylabel, key in (
            (ax_rate, rate, "Per-stream decode rate, median per request (tokens/s)", "per_stream"),
            (ax_tput, tput, axis_label(points), "throughput")):
        _draw_series(ax, series, order)
        _load_axis(ax, loads, axis, log_x)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        found[key] = all_crossings(series, log_x=log_x)
        for c in found[key]:
            if c.low is not None and c.high is not None:
                ax.axvspan(c.low, c.high, color="0.5", alpha=0.15, linewidth=0)
            ax.axvline(c.load, color="0.2", linestyle="--", linewidth=1)
            ax.annotate(f"{_number(c.load)}", (c.load, 0), xytext=(3, 4), textcoords="offset points",
                        fontsize=9, color="0.2")
        ax.legend(title="variant", fontsize=9)
    ax_rate.set_title("Per-stream decode rate (what one user sees)")
    ax_tput.set_title("Aggregate output throughput (what the server delivers)")
    lines = [f"per-stream rate: {crossing_text(c, axis)}" for c in found["per_stream"]] or [
        "per-stream rate: no crossing"]
    lines += [f"throughput: {crossing_text(c, axis)}" for c in found["throughput"]] or ["throughput: no crossing"]
    title = "Crossover - " + " | ".join(lines)
    fig.suptitle("\n".join(lines), fontsize=10)
    summary = {"figure": name, "load_axis": axis, "log_load": log_x, "per_stream_key": PER_STREAM_KEY,
               "throughput_key": THROUGHPUT_KEY, "per_stream": _series_summary(rate),
               "throughput": _series_summary(tput),
               "crossings": {k: [_crossing_summary(c, axis) for c in v] for k, v in found.items()},
               "lines": [*lines, *[line for line in [runs_fallback_line(points)] if line]]}
    return _save(plt, fig, out_dir, name, formats, title), summary


def draw_pareto(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                axis: Axis = "concurrency", name: str = "pareto") -> tuple[list[Path], dict[str, Any]]:
    """Per-stream decode rate against aggregate throughput, one point per (variant, load) cell (the mean
    of its repeats), the Pareto-optimal cells joined and named."""
    plt = _pyplot()
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
    fig, ax = plt.subplots(figsize=(8.5, 6))
    short = "c" if axis == "concurrency" else "rate"
    for variant in order:
        mine = [c for c in cells if c[0] == variant]
        ax.scatter([c[2] for c in mine], [c[3] for c in mine], label=variant, s=40, zorder=3,
                   **_style(order.index(variant)))
        for _, load, x, y in (c for c in mine if c not in front):  # the frontier's are named in full below
            ax.annotate(f"{short}={_number(load)}", (x, y), xytext=(4, -10), textcoords="offset points", fontsize=8,
                        color="0.35")
    ax.plot([c[2] for c in front], [c[3] for c in front], color="0.2", linewidth=1.2, linestyle="-", zorder=2,
            label="Pareto frontier")
    for variant, load, x, y in front:
        ax.annotate(f"{variant} {short}={_number(load)}", (x, y), xytext=(6, 6), textcoords="offset points",
                    fontsize=9, fontweight="bold")
    ax.set_xlabel(axis_label(points))
    ax.set_ylabel("Per-stream decode rate, median per request (tokens/s)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9)
    names = [f"{v} {short}={_number(load)}" for v, load, _, _ in front]
    ax.set_title("Pareto frontier: " + ", ".join(names), fontsize=10)
    summary = {"figure": name, "load_axis": axis,
               "cells": [{"variant": v, "load": load, "throughput": x, "per_stream": y} for v, load, x, y in cells],
               "frontier": [{"variant": v, "load": load, "throughput": x, "per_stream": y} for v, load, x, y in front],
               "lines": [f"Pareto frontier: {', '.join(names)}",
                         *[line for line in [runs_fallback_line(points)] if line]]}
    return _save(plt, fig, out_dir, name, formats, "Pareto frontier: " + ", ".join(names)), summary


LATENCIES = (("ttft", "Time to first token"), ("tpot", "Time per output token"),
             ("itl", "Inter-chunk latency (ITL)"), ("e2el", "End-to-end latency"))
STATS = (("median", "p50", "-"), ("p90", "p90", "--"), ("p99", "p99", ":"))


def draw_latency(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                 axis: Axis = "concurrency", name: str = "latency") -> tuple[list[Path], dict[str, Any]]:
    """TTFT, TPOT, ITL and E2E latency p50 / p90 / p99 against load: a panel each, a colour per variant,
    a line style per percentile."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    summary: dict[str, Any] = {"figure": name, "load_axis": axis, "metrics": {}}
    all_loads = sorted({x for p in points if (x := p.load(axis)) is not None})
    if not all_loads:
        raise ConfigError(f"no run has a {LOAD_WORD[axis]} to plot against")
    log_x = log_axis(all_loads)
    order = sorted({p.variant for p in points})
    for ax, (metric, title) in zip(axes.flat, LATENCIES):
        summary["metrics"][metric] = {}
        for stat, label, linestyle in STATS:
            series = group_series(points, f"{stat}_{metric}_ms", axis)
            summary["metrics"][metric][label] = _series_summary(series)
            for variant, cells in series.items():
                style = _style(order.index(variant))
                ax.plot([c.load for c in cells], [c.mean for c in cells], linestyle=linestyle, linewidth=1.6,
                        markersize=5, label=f"{variant} {label}", **style)
        _load_axis(ax, all_loads, axis, log_x)
        ax.set_ylabel(f"{title} (ms)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, ncol=len(order) if len(order) > 1 else 1)
    fig.suptitle("Latency percentiles against load (p50 solid, p90 dashed, p99 dotted)", fontsize=11)
    return _save(plt, fig, out_dir, name, formats, "Latency percentiles against load"), summary


ACCEPTANCE_KEY = "spec_decode_acceptance_length"
TOKENS_PER_CHUNK_KEY = "mean_tokens_per_chunk"


POSITION_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))


def draw_acceptance(points: Sequence[RunPoint], out_dir: Path, formats: Sequence[str] = FORMATS,
                    axis: Axis = "concurrency", name: str = "acceptance") -> tuple[list[Path], dict[str, Any]]:
    """Speculative decoding against load per variant: the mean acceptance length (the server's counters)
    solid, with the client's tokens per chunk (its estimate of it, which a server merging steps under
    load inflates) dashed; and beside it, where the server counts them per position, the acceptance rate
    at each draft position (a line style per position)."""
    plt = _pyplot()
    server = group_series(points, ACCEPTANCE_KEY, axis)
    client = group_series(points, TOKENS_PER_CHUNK_KEY, axis)
    if not server and not client:
        raise ConfigError(f"no run has an acceptance length or tokens per chunk and a {LOAD_WORD[axis]}")
    with_positions, positions = per_position_points(points)
    by_position = [group_series(with_positions, position_key(i), axis) for i in range(positions)]
    order = sorted(set(server) | set(client))
    loads = sorted({c.load for s in (*server.values(), *client.values()) for c in s})
    fig, axes = plt.subplots(1, 2 if positions else 1, figsize=(15, 5.5) if positions else (8.5, 5.5),
                             squeeze=False)
    ax = axes[0][0]
    for series, linestyle, what in ((server, "-", "acceptance length (server)"),
                                    (client, "--", "tokens per chunk (client)")):
        for variant, cells in series.items():
            ax.plot([c.load for c in cells], [c.mean for c in cells], linestyle=linestyle, linewidth=1.6,
                    label=f"{variant} {what}", **_style(order.index(variant)))
    _load_axis(ax, loads, axis, log_axis(loads))
    ax.set_ylabel("Tokens per decode step (tokens)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9)
    ax.set_title("Mean acceptance length against load", fontsize=10)
    if positions:
        ax = axes[0][1]
        for i, series in enumerate(by_position):
            for variant, cells in series.items():
                style = _style(order.index(variant) if variant in order else len(order))
                yerr = [[100 * (c.mean - c.low) for c in cells], [100 * (c.high - c.mean) for c in cells]]
                ax.errorbar([c.load for c in cells], [100 * c.mean for c in cells],
                            yerr=yerr if any(c.high > c.low for c in cells) else None, capsize=3,
                            linestyle=POSITION_STYLES[i % len(POSITION_STYLES)], linewidth=1.6,
                            label=f"{variant} position {i + 1}", **style)
        _load_axis(ax, loads, axis, log_axis(loads))
        ax.set_ylabel("Accepted at the position / drafts (%)")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8)
        ax.set_title("Per-position acceptance against load (position 1 solid, 2 dashed, 3 dotted)", fontsize=10)
    fig.suptitle("Speculative decoding against load", fontsize=11)
    summary = {"figure": name, "load_axis": axis, "acceptance_length": _series_summary(server),
               "tokens_per_chunk": _series_summary(client),
               "per_position": [_series_summary(series) for series in by_position]}
    return _save(plt, fig, out_dir, name, formats, "Acceptance against load"), summary


SPECTRUM_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL (per chunk)"), ("e2el", "E2E latency"))


def draw_spectrum(point: RunPoint, doc_histograms: Mapping[str, Any] | None, out_dir: Path,
                  formats: Sequence[str] = FORMATS, name: str | None = None) -> tuple[list[Path], dict[str, Any]]:
    """One run's latency percentile spectrum from its HDR histograms (its histograms.hlog, or the result
    file's ``fastbench.histograms``), on HdrHistogram's axis: x = 1 / (1 - percentile), log scale."""
    plt = _pyplot()
    if point.folder is not None and (Path(point.folder) / HISTOGRAMS_FILE).is_file():
        histograms = read_histogram_log(Path(point.folder) / HISTOGRAMS_FILE)
    else:
        from hdrh.histogram import HdrHistogram

        histograms = {k: HdrHistogram.decode(v["data"]) for k, v in (doc_histograms or {}).items()
                      if isinstance(v, dict) and isinstance(v.get("data"), str)}
    fig, ax = plt.subplots(figsize=(9, 5.5))
    summary: dict[str, Any] = {"figure": name or f"spectrum-{point.run_id}", "run": point.run_id, "metrics": {}}
    top = 1.0
    for index, (metric, label) in enumerate(SPECTRUM_METRICS):
        hist = histograms.get(metric)
        if hist is None:
            continue
        xs, values = spectrum(hist)
        if len(xs) == 0:
            continue
        top = max(top, float(xs[-1]))
        ax.plot(xs, values, label=label, color=OKABE_ITO[index], linewidth=1.8)
        summary["metrics"][metric] = {"count": int(hist.get_total_count()),
                                      "p50_ms": hist.get_value_at_percentile(50) / 1e6,
                                      "p99_ms": hist.get_value_at_percentile(99) / 1e6,
                                      "max_ms": hist.get_max_value() / 1e6}
    if not summary["metrics"]:
        raise ConfigError(f"run {point.run_id}: no latency histograms to plot")
    ax.set_xscale("log")
    decades = max(1, math.ceil(math.log10(top)))
    ticks = [10.0 ** k for k in range(decades + 1)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([_percentile_label(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("Percentile (log scale: x = 1 / (1 - percentile))")
    ax.set_ylabel("Latency (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=9)
    title = f"Latency by percentile, run {point.run_id} ({point.variant}"
    title += f", {LOAD_WORD['concurrency']} {point.concurrency})" if point.concurrency is not None else ")"
    ax.set_title(title, fontsize=10)
    return _save(plt, fig, out_dir, summary["figure"], formats, title), summary


def _percentile_label(x: float) -> str:
    if x <= 1.0:
        return "0%"
    p = 100.0 * (1.0 - 1.0 / x)
    digits = max(0, round(math.log10(x)) - 2)
    return f"{p:.{digits}f}%"


def draw_timeline(point: RunPoint, doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]] | None,
                  out_dir: Path, formats: Sequence[str] = FORMATS,
                  name: str | None = None) -> tuple[list[Path], dict[str, Any]]:
    """One run over time (``timeline``): requests in flight (the client's, and the server's running and
    waiting where its /metrics gives them), output tokens/s, each request's TTFT at its send time, the
    server's KV-cache use and memory, panels sharing one time axis; a panel whose data the run did not
    keep is left out and named in the figure."""
    plt = _pyplot()
    line = timeline(doc, records)
    panels: list[str] = []
    if len(line.in_flight[0]) or "running" in line.server or "waiting" in line.server:
        panels.append("requests")
    if len(line.tokens_per_s[0]):
        panels.append("tokens")
    if len(line.ttft[0]) or len(line.failed_sends):
        panels.append("ttft")
    if "kv_cache_usage" in line.server:
        panels.append("kv")
    if line.memory:
        panels.append("memory")
    if not panels:
        raise ConfigError(f"run {point.run_id}: nothing kept to draw over time ({'; '.join(line.missing)})")
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.3 * len(panels) + 1.2), sharex=True, squeeze=False)
    summary: dict[str, Any] = {"figure": name or f"timeline-{point.run_id}", "run": point.run_id,
                               "window_s": line.window_s, "panels": panels, "missing": list(line.missing),
                               "lines": [f"run {point.run_id} over time: not kept: {m}" for m in line.missing]}
    for ax, panel in zip((row[0] for row in axes), panels):
        if panel == "requests":
            times, counts = line.in_flight
            if len(times):
                ax.step(np.concatenate([[0.0], times]), np.concatenate([[0.0], counts]), where="post",
                        color=OKABE_ITO[0], linewidth=1.4, label="in flight (client)")
                summary["max_in_flight"] = float(counts.max())
            for index, gauge in ((1, "running"), (3, "waiting")):
                if gauge in line.server:
                    t, v = line.server[gauge]
                    ax.plot(t, v, color=OKABE_ITO[index], marker=MARKERS[index], markersize=4, linewidth=1.2,
                            linestyle="--", label=f"{gauge} (server)")
            ax.set_ylabel("Requests")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, loc="upper right")
        elif panel == "tokens":
            centres, rates = line.tokens_per_s
            ax.bar(centres, rates, width=line.bin_s, color=OKABE_ITO[2], alpha=0.8,
                   label=f"output tokens/s ({line.bin_s * 1000:.3g} ms bins)")
            ax.set_ylabel("Output tokens/s")
            ax.legend(fontsize=8, loc="upper right")
            summary["peak_tokens_per_s"] = float(rates.max()) if len(rates) else None
        elif panel == "ttft":
            sends, ttfts = line.ttft
            ax.scatter(sends, ttfts, s=8, color=OKABE_ITO[0], alpha=0.7, label="TTFT at its send")
            if len(line.failed_sends):
                ax.scatter(line.failed_sends, np.zeros(len(line.failed_sends)), s=30, marker="x",
                           color=OKABE_ITO[3], label="failed request (sent)", zorder=3)
            ax.set_ylabel("TTFT (ms)")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, loc="upper right")
            summary["requests_with_ttft"] = int(len(sends))
            summary["failed"] = int(len(line.failed_sends))
        elif panel == "kv":
            t, v = line.server["kv_cache_usage"]
            ax.plot(t, v, color=OKABE_ITO[4], marker=MARKERS[4], markersize=4, linewidth=1.4, label="KV-cache use")
            ax.set_ylabel("KV cache used (%)")
            ax.set_ylim(0, max(100.0, float(v.max()) if len(v) else 100.0))
        else:
            for index, (label, (t, v)) in enumerate(line.memory.items()):
                ax.plot(t, v, color=OKABE_ITO[(index + 5) % len(OKABE_ITO)], linewidth=1.4, label=label,
                        linestyle=("-", "--", ":", "-.")[index % 4])
            ax.set_ylabel("Memory (GiB)")
            ax.legend(fontsize=8, loc="upper right")
    last = axes[-1][0]
    last.set_xlabel("Time from the start of the measured window (s)")
    last.set_xlim(left=0)
    title = f"Run {point.run_id} over time ({point.variant}"
    title += f", {LOAD_WORD['concurrency']} {point.concurrency})" if point.concurrency is not None else ")"
    if line.missing:
        fig.text(0.01, 0.005, "Not kept: " + "; ".join(line.missing), fontsize=7, wrap=True, va="bottom")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.06 if line.missing else 0, 1, 1))
    return _save(plt, fig, out_dir, summary["figure"], formats, title), summary
