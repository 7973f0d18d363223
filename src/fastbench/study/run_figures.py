"""One run's figures: its latency percentile spectrum (from its HDR histograms) and the run over time
(``timeline``), drawn with matplotlib as the study's other figures are (``drawing``).

The spectrum follows HdrHistogram's percentile plots: a panel per figure (TTFT, TPOT, ITL, E2E, whose
scales differ by orders of magnitude), x = 1 / (1 - percentile) on a log scale (0%, 90%, 99%,
99.9%, ...), shared by the panels so that a percentile lines up down the page, and latency on a log
scale in a panel whose values span a factor of 10 or more (linear from 0 otherwise).

The server's gauges and the memory samples are drawn as steps at their sample times (a value holds
until the next read, with a marker at each read): a straight line between two reads 2 s apart would
show values no read saw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastbench.exceptions import ConfigError
from fastbench.study.drawing import (
    FORMATS,
    MARKERS,
    OKABE_ITO,
    Drawn,
    legend_outside,
    number,
    pyplot,
    run_description,
    save,
)
from fastbench.study.figures_data import RunPoint, read_histogram_log, spectrum
from fastbench.study.labels import add_footnote
from fastbench.study.store import HISTOGRAMS_FILE
from fastbench.study.timeline import timeline

__all__ = ("draw_spectrum", "draw_timeline", "figure_spectrum", "figure_timeline", "percentile_label")

SPECTRUM_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL (per chunk)"), ("e2el", "E2E latency"))
LOG_SPAN = 10.0  # a panel whose largest value is this many times its smallest (or more) gets a log latency axis
MARKED_MAX = 200  # samples drawn with a marker each up to this many (more would blur into a thick line)


def _run_title(what: str, point: RunPoint) -> str:
    """"<what>: spec, concurrency 16 (run ID)", leaving out what the run does not say."""
    described = run_description(point)
    return f"{what}: {described} (run {point.run_id})" if described else f"{what}, run {point.run_id}"


def percentile_label(x: float) -> str:
    """The percentile at x = 1 / (1 - p): 1 -> "0%", 10 -> "90%", 1000 -> "99.9%"."""
    if x <= 1.0:
        return "0%"
    p = 100.0 * (1.0 - 1.0 / x)
    digits = max(0, round(math.log10(x)) - 2)
    return f"{p:.{digits}f}%"


def _histograms(point: RunPoint, doc_histograms: Mapping[str, Any] | None) -> dict[str, Any]:
    if point.folder is not None and (Path(point.folder) / HISTOGRAMS_FILE).is_file():
        return read_histogram_log(Path(point.folder) / HISTOGRAMS_FILE)
    from hdrh.histogram import HdrHistogram

    return {k: HdrHistogram.decode(v["data"]) for k, v in (doc_histograms or {}).items()
            if isinstance(v, dict) and isinstance(v.get("data"), str)}


def _latency_axis(ax: Any, values: np.ndarray) -> bool:
    """Log scale where the panel's values span a factor of ``LOG_SPAN`` or more, ticks in plain ms
    (1, 2, 5, 10, 20, 50, ... within a few decades); linear from 0 otherwise. Whether it went log."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    low, high = float(values.min()), float(values.max())
    if low <= 0 or high / low < LOG_SPAN:
        ax.set_ylim(bottom=0, top=high * 1.05 if high > 0 else 1.0)
        return False
    ax.set_yscale("log")
    decades = math.log10(high / low)
    subs = (1.0, 2.0, 3.0, 5.0) if decades < 2 else (1.0, 2.0, 5.0) if decades < 4 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: number(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    return True


def figure_spectrum(point: RunPoint, doc_histograms: Mapping[str, Any] | None, name: str | None = None) -> Drawn:
    """One run's latency percentile spectrum from its HDR histograms (its histograms.hlog, or the result
    file's ``fastbench.histograms``): a panel per figure, on HdrHistogram's axes (module docstring)."""
    plt = pyplot()
    histograms = _histograms(point, doc_histograms)
    summary: dict[str, Any] = {"figure": name or f"spectrum-{point.run_id}", "run": point.run_id, "metrics": {}}
    curves: list[tuple[str, str, int, np.ndarray, np.ndarray, Any]] = []
    for index, (metric, label) in enumerate(SPECTRUM_METRICS):
        hist = histograms.get(metric)
        if hist is None:
            continue
        xs, values = spectrum(hist)
        if len(xs):
            curves.append((metric, label, index, xs, values, hist))
    if not curves:
        raise ConfigError(f"run {point.run_id}: no latency histograms to plot")
    columns = 1 if len(curves) == 1 else 2
    rows = math.ceil(len(curves) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.4 * columns, 3.9 * rows + 0.6), sharex=True, squeeze=False,
                             layout="constrained")
    top = max(float(xs[-1]) for _, _, _, xs, _, _ in curves)
    decades = max(1, math.ceil(math.log10(top) - 1e-9))
    ticks = [10.0 ** k for k in range(decades + 1)]
    for ax, (metric, label, index, xs, values, hist) in zip(axes.flat, curves):
        count = int(hist.get_total_count())
        stats = {"count": count, "p50_ms": hist.get_value_at_percentile(50) / 1e6,
                 "p99_ms": hist.get_value_at_percentile(99) / 1e6, "max_ms": hist.get_max_value() / 1e6}
        summary["metrics"][metric] = stats
        # the curve ends where its last sample lies, at the largest value recorded (a step up to it)
        xs, values = np.append(xs, xs[-1]), np.append(values, stats["max_ms"])
        ax.plot(xs, values, color=OKABE_ITO[index], linewidth=1.8)
        ax.set_xscale("log")
        ax.set_xlim(1.0, ticks[-1])
        ax.set_xticks(ticks)
        ax.set_xticklabels([percentile_label(t) for t in ticks])
        ax.minorticks_off()
        _latency_axis(ax, values)
        ax.set_ylabel(f"{label} (ms)")
        ax.set_title(f"{label}: p50 {number(stats['p50_ms'])} ms, p99 {number(stats['p99_ms'])} ms, "
                     f"max {number(stats['max_ms'])} ms ({count:,} samples)", fontsize=10)
    for ax in axes.flat[len(curves):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("Percentile (log scale of 1 / (1 - percentile))")
    if len(curves) % columns and rows > 1:  # the panel above the empty slot carries its own axis labels
        axes[-2][-1].xaxis.set_tick_params(labelbottom=True)
        axes[-2][-1].set_xlabel("Percentile (log scale of 1 / (1 - percentile))")
    title = _run_title("Latency by percentile", point)
    fig.suptitle(title, fontsize=11)
    return Drawn(fig, summary, title)


def draw_spectrum(point: RunPoint, doc_histograms: Mapping[str, Any] | None, out_dir: Path,
                  formats: Sequence[str] = FORMATS, name: str | None = None) -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_spectrum`, saved."""
    return save(figure_spectrum(point, doc_histograms, name), out_dir, formats)


def _samples(ax: Any, t: np.ndarray, v: np.ndarray, **kwargs: Any) -> Any:
    """Sampled values as steps: each holds from its read to the next, a marker at each read."""
    if len(t) > MARKED_MAX:
        kwargs["marker"] = None
    (line,) = ax.plot(t, v, drawstyle="steps-post", markersize=4, **kwargs)
    return line


def figure_timeline(point: RunPoint, doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]] | None,
                    name: str | None = None) -> Drawn:
    """One run over time (``timeline``): requests in flight (the client's, and the server's running and
    waiting where its /metrics gives them), output tokens/s, each request's TTFT at its send time, the
    server's KV-cache use and memory, panels sharing one time axis; a panel whose data the run did not
    keep is left out and named in a note below the figure."""
    plt = pyplot()
    line = timeline(doc, records)
    panels: list[str] = []
    if len(line.in_flight[0]) or "running" in line.server or "waiting" in line.server:
        panels.append("requests")
    if len(line.tokens_per_s[0]) or "tokens_per_s" in line.sampled:
        panels.append("tokens")
    if len(line.ttft[0]) or len(line.failed_sends):
        panels.append("ttft")
    if any(name.endswith("_ms") for name in line.sampled):
        panels.append("latency")
    if "kv_cache_usage" in line.server:
        panels.append("kv")
    if line.memory:
        panels.append("memory")
    if not panels:
        raise ConfigError(f"run {point.run_id}: nothing kept to draw over time ({'; '.join(line.missing)})")
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.3 * len(panels) + 1.2), sharex=True, squeeze=False,
                             layout="constrained")
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
                    _samples(ax, t, v, color=OKABE_ITO[index], marker=MARKERS[index], linewidth=1.2,
                             linestyle="--", label=f"{gauge} (server, at each read)")
            if not len(times) and "in_flight" in line.sampled:
                t, v = line.sampled["in_flight"]
                _samples(ax, t, v, color=OKABE_ITO[0], marker=None, linewidth=1.4, label="in flight (client, each s)")
            ax.set_ylabel("Requests")
            ax.set_ylim(bottom=0)
            legend_outside(ax, fontsize=8)
        elif panel == "tokens":
            centres, rates = line.tokens_per_s
            if len(centres):
                ax.bar(centres, rates, width=line.bin_s, color=OKABE_ITO[2], alpha=0.8,
                       label=f"output tokens/s\n({line.bin_s * 1000:.3g} ms bins)")
            if "tokens_per_s" in line.sampled:
                t, v = line.sampled["tokens_per_s"]
                ax.plot(t, v, color=OKABE_ITO[5], linewidth=1.2, marker=".", label="tokens/s counted live\n(each s)")
            ax.set_ylabel("Output tokens/s")
            legend_outside(ax, fontsize=8)
            summary["peak_tokens_per_s"] = float(rates.max()) if len(rates) else None
        elif panel == "ttft":
            sends, ttfts = line.ttft
            ax.scatter(sends, ttfts, s=8, color=OKABE_ITO[0], alpha=0.7, label="TTFT at its send")
            if len(line.failed_sends):
                ax.scatter(line.failed_sends, np.zeros(len(line.failed_sends)), s=30, marker="x",
                           color=OKABE_ITO[3], label="failed request (sent)", zorder=3)
            ax.set_ylabel("TTFT (ms)")
            ax.set_ylim(bottom=0)
            legend_outside(ax, fontsize=8)
            summary["requests_with_ttft"] = int(len(sends))
            summary["failed"] = int(len(line.failed_sends))
        elif panel == "latency":
            drawn_any = _latency_panel(ax, line.sampled)
            summary["latency_series"] = drawn_any
        elif panel == "kv":
            t, v = line.server["kv_cache_usage"]
            _samples(ax, t, v, color=OKABE_ITO[4], marker=MARKERS[4], linewidth=1.4,
                     label="KV-cache use\n(at each read)")
            ax.set_ylabel("KV cache used (%)")
            ax.set_ylim(0, max(100.0, float(v.max()) if len(v) else 100.0))
            legend_outside(ax, fontsize=8)
        else:
            for index, (label, (t, v)) in enumerate(line.memory.items()):
                _samples(ax, t, v, color=OKABE_ITO[(index + 5) % len(OKABE_ITO)], marker=MARKERS[index % 4],
                         linewidth=1.4, label=label, linestyle=("-", "--", ":", "-.")[index % 4])
            ax.set_ylabel("Memory (GiB)")
            legend_outside(ax, fontsize=8)
    last = axes[-1][0]
    last.set_xlabel("Time from the start of the measured window (s)")
    last.set_xlim(left=0)
    described = run_description(point)
    title = f"Run {point.run_id} over time" + (f": {described}" if described else "")
    fig.suptitle(title, fontsize=11)
    if line.missing:
        add_footnote(fig, "Not kept: " + "; ".join(line.missing))
    return Drawn(fig, summary, title)


def _latency_panel(ax: Any, sampled: Mapping[str, Any]) -> list[str]:
    """The latencies second by second, p50 solid and p99 dashed, on a log axis (TTFT and ITL differ by
    orders of magnitude); the names drawn."""
    drawn = []
    for index, name in enumerate(("ttft", "tpot", "itl", "e2e")):
        for q, style in (("p50", "-"), ("p99", "--")):
            key = f"{name}_{q}_ms"
            if key in sampled:
                t, v = sampled[key]
                ax.plot(t, v, linestyle=style, linewidth=1.2, color=OKABE_ITO[index % len(OKABE_ITO)],
                        label=f"{name.upper()} {q}")
                drawn.append(key)
    ax.set_yscale("log")
    ax.set_ylabel("Latency (ms), each s")
    legend_outside(ax, fontsize=8)
    return drawn


def draw_timeline(point: RunPoint, doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]] | None,
                  out_dir: Path, formats: Sequence[str] = FORMATS,
                  name: str | None = None) -> tuple[list[Path], dict[str, Any]]:
    """:func:`figure_timeline`, saved."""
    return save(figure_timeline(point, doc, records, name), out_dir, formats)
