"""``fastbench plot``: the study's figures (crossover, Pareto frontier, latency and acceptance against
load, one run's percentile spectrum, one run over time) from stored runs, as PNG and SVG, each with its
numbers in a JSON file beside it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from fastbench.cli.argtypes import LaidOutHelpFormatter, Parser
from fastbench.cli.runs import STORE_ENV, add_filter_args, default_store, parse_when
from fastbench.exceptions import FastbenchError
from fastbench.study.figures_data import RunPoint, left_out, load_points, point_document, point_records
from fastbench.study.runfile import load_result
from fastbench.study.store import RESULT_FILE

__all__ = ("main",)

FIGURES = ("crossover", "pareto", "latency", "acceptance", "spectrum", "timeline", "all")
MAX_SPECTRA = 8  # spectrum and timeline draw a figure per run

EPILOG = f"""\
figures:
  crossover  per-stream decode rate (the median of each request's own rate) and aggregate output
             throughput against concurrency, one line per --variant, where each pair of lines crosses
             computed (interpolated between load points; on a log axis in log load) and marked, with the
             stretch where their 95% intervals overlap when cells were repeated
  pareto     per-stream rate against aggregate throughput, one point per variant and load, the Pareto
             frontier joined and named
  latency    TTFT, TPOT, ITL and E2E latency p50 / p90 / p99 against load, per variant
  acceptance speculative decoding's mean acceptance length (the server's counters) and the client's
             tokens per chunk against load, per variant; and the acceptance rate at each draft
             position, where the server counts them per position
  spectrum   one run's latency percentile spectrum from its HDR histograms, a panel each for TTFT,
             TPOT, ITL and E2E on HdrHistogram's log percentile axis (a figure per run named; at most
             {MAX_SPECTRA})
  timeline   one run over time: requests in flight (client; the server's running and waiting), output
             tokens/s, each request's TTFT at its send time, the server's KV-cache use, memory (the
             server's gauges as steps at their reads; a figure per run named; at most {MAX_SPECTRA});
             what the run did not keep is named
  all        crossover, pareto, latency and acceptance

Runs: the ones named (run ids or id starts in the store, run folders, result files), or else every run
of the store that matches the filters (as `fastbench runs` takes them). A series is a variant and
the values of the other keys its sweep crossed (a series per sweep where runs come from several);
its runs at one load are repeats: their mean is drawn, with its 95% t-interval; only complete runs
are averaged (a collapsed or interrupted run, or one capped before its first completion, is named
and left out: `fastbench runs --help`). Each figure is written as OUT/NAME.png and/or
.svg, with OUT/NAME.json holding its numbers; the crossings are printed. Without --store: ${STORE_ENV},
else ./fastbench-runs. Needs matplotlib: pip install 'fastbench-llm[plot]'. Exit status: 0 done, 2 bad input.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fastbench plot", description="Draw the study's figures from stored runs.", epilog=EPILOG,
               formatter_class=LaidOutHelpFormatter)
    p.add_argument("figure", choices=FIGURES, help="which figure (below)")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run ids, run folders or result files (default: the "
                   "store's runs matching the filters)")
    p.add_argument("--store", metavar="DIR", default=None, help=f"the store (default: ${STORE_ENV}, else "
                   "./fastbench-runs)")
    p.add_argument("--out", metavar="DIR", default="plots", help="where the figures go (default ./plots)")
    p.add_argument("--format", metavar="FMT", default="png,svg",
                   help="png, svg or both, comma-separated (default png,svg)")
    p.add_argument("--x", dest="axis", choices=("concurrency", "rate"), default="concurrency",
                   help="the load axis: --max-concurrency, or --request-rate (default concurrency)")
    add_filter_args(p.add_argument_group("filters (all must hold; without named runs)"))
    return p


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_intermixed_args(list(argv))  # runs may follow the options
    try:
        return _main(ns)
    except FastbenchError as exc:
        print(f"fastbench plot: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "svg")]
    if bad or not formats:
        raise FastbenchError(f"--format takes png, svg or png,svg, got {text!r}")
    return list(dict.fromkeys(formats))


def _main(ns: argparse.Namespace) -> int:
    from fastbench.study import plots  # matplotlib is imported only now

    formats = _formats(ns.format)
    filters: dict[str, Any] = {"label": ns.label, "model": ns.model, "variant": ns.variant,
                               "since": parse_when(ns.since) if ns.since else None,
                               "until": parse_when(ns.until, end_of_day=True) if ns.until else None,
                               "limit": ns.last}
    if ns.runs and any(v is not None for v in filters.values()):
        raise FastbenchError("give runs or filters, not both")
    points = load_points(ns.runs, ns.store or default_store(), filters)
    if not points:
        raise FastbenchError("no runs to plot (none named, or none match in the store)")
    out = Path(ns.out)
    drawn: list[tuple[list[Path], dict[str, Any]]] = []
    wanted = ("crossover", "pareto", "latency", "acceptance") if ns.figure == "all" else (ns.figure,)
    for figure in wanted:
        if figure == "crossover":
            drawn.append(plots.draw_crossover(points, out, formats, ns.axis))
        elif figure == "pareto":
            drawn.append(plots.draw_pareto(points, out, formats, ns.axis))
        elif figure == "latency":
            drawn.append(plots.draw_latency(points, out, formats, ns.axis))
        elif figure == "acceptance":
            drawn.append(plots.draw_acceptance(points, out, formats, ns.axis))
        else:
            if len(points) > MAX_SPECTRA:
                raise FastbenchError(f"{figure} draws a figure per run: {len(points)} runs given or matched, "
                                     f"at most {MAX_SPECTRA} (name runs, or --last N)")
            if figure == "spectrum":
                drawn += [plots.draw_spectrum(point, _histograms(point), out, formats) for point in points]
            else:
                drawn += [plots.draw_timeline(point, point_document(point), point_records(point), out, formats)
                          for point in points]
    # The figures over load average complete runs only (figures_data.group_series): the others are named.
    left = left_out(points) if ns.figure in ("crossover", "pareto", "latency", "acceptance", "all") else []
    for run in left:
        why = f" ({run['reason']})" if run.get("reason") and run["reason"] != run["status"].lower() else ""
        print(f"left out of the figures: run {run['run']} ({run['variant']}): {run['status']}{why}")
    for paths, summary in drawn:
        if left:
            summary = {**summary, "left_out": left}
        sidecar = out / f"{summary['figure']}.json"
        sidecar.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
        for line in summary.get("lines", ()):
            print(line)
        print("wrote " + ", ".join(str(p) for p in [*paths, sidecar]))
    return 0


def _histograms(point: RunPoint) -> dict[str, Any] | None:
    """The result file's histograms, for a run named by its result file (a folder has histograms.hlog)."""
    if point.folder is not None:
        return None
    path = Path(point.run_id)
    doc = load_result(path if path.is_file() else path / RESULT_FILE)
    histograms = (doc.get("fastbench") or {}).get("histograms")
    return histograms if isinstance(histograms, dict) else None
