"""The report's cells: runs grouped by grid point, each point's complete runs averaged, the others listed apart."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from fastbench.study.figures_data import NO_VARIANT, RunPoint, complete_points, mean_interval
from fastbench.study.runfile import flat_failed, flat_why
from fastbench.study.sustained import SUSTAINED_KEY

__all__ = ("COLUMNS", "INCOMPLETE_HEAD", "CellRow", "cell_rows", "counts_text", "figure_text", "incomplete_rows",
           "point_values", "status_text", "values_text")


# The cells table's figures: (flat key, column heading, digits)
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("median_decode_rate_tok_s", "Per-stream decode tok/s", 1),
    (SUSTAINED_KEY, "Steady output tok/s", 1),  # the whole window's where a run has no steady interval
    ("median_ttft_ms", "TTFT p50 ms", 1),
    ("p99_ttft_ms", "TTFT p99 ms", 1),
    ("median_tpot_ms", "TPOT p50 ms", 2),
    ("median_e2el_ms", "E2E p50 ms", 0),
    ("spec_decode_acceptance_length", "Acceptance length", 2),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate", 2),  # near 1 with random prompts: the cell measured the cache
)


@dataclasses.dataclass(frozen=True)
class CellRow:
    """One grid point: its runs' figures as mean and 95% half-width, or why it has none."""

    variant: str
    values: Mapping[str, Any]  # the point's crossed values (concurrency, max_tokens, ...)
    load: float | None
    run_ids: tuple[str, ...]
    figures: Mapping[str, tuple[float, float | None] | None]  # key -> (mean, half-width) or None
    status: str  # "done", or the journal's / the runs' word for it
    reason: str
    incomplete: tuple[str, ...] = ()  # its runs that are no complete cell: listed apart, never averaged


def _sweep_key(flat: Mapping[str, Any]) -> dict[str, Any] | None:
    text = flat.get("sweep_cell")
    if not isinstance(text, str):
        return None
    try:
        key = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, dict) else None


def _ident(variant: str, values: Mapping[str, Any]) -> str:
    """A grid point's identity, as text."""
    return orjson.dumps({"variant": variant, **values}, option=orjson.OPT_SORT_KEYS).decode()


def point_values(point: RunPoint) -> tuple[str, dict[str, Any]]:
    """The grid point a run measured: (variant, its crossed values)."""
    key = _sweep_key(point.flat)
    if key is not None:
        return str(key.get("variant") or point.variant), {k: v for k, v in key.items() if k not in ("variant",
                                                                                                     "repeat")}
    values: dict[str, Any] = {}
    if point.concurrency is not None:
        values["concurrency"] = point.concurrency
    if point.request_rate is not None:
        values["request_rate"] = point.request_rate
    return point.variant, values


def _load_of(values: Mapping[str, Any]) -> float | None:
    for key in ("concurrency", "request_rate"):
        value = values.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def cell_rows(points: Sequence[RunPoint], journal: Sequence[Mapping[str, Any]] = ()) -> list[CellRow]:
    """The table of cells: a row per grid point with runs (complete runs averaged; a point whose runs
    all ended otherwise shows why), and a row per point the journal recorded failed or skipped that has
    no complete run. Ordered by variant, then the values (load last).

    Runs of one grid point (the sweep's cell key less its repeat; without a sweep, variant and load) are
    repeats, shown as their mean and 95% t-interval. Only complete runs (runfile.is_complete) are averaged,
    in the table and the figures alike; the others (interrupted, capped before their first completion,
    stopped early) are listed apart with their status."""
    grouped: dict[str, tuple[str, dict[str, Any], list[RunPoint]]] = {}
    several = len({point.sweep for point in points}) > 1  # two sweeps' runs at one point are never repeats
    for point in points:
        variant, values = point_values(point)
        if several:
            variant = f"{point.sweep or '(no sweep)'}: {variant}"
        grouped.setdefault(_ident(variant, values), (variant, values, []))[2].append(point)
    rows: list[CellRow] = []
    for variant, values, runs in grouped.values():
        done = complete_points(runs)
        figures: dict[str, tuple[float, float | None] | None] = {}
        for key, _, _ in COLUMNS:
            numbers = [v for p in done if (v := p.value(key)) is not None]
            if not numbers:
                figures[key] = None
                continue
            mean, low, high = mean_interval(numbers)
            figures[key] = (mean, (high - mean) if len(numbers) > 1 else None)
        left = tuple(p.run_id for p in runs if not p.complete)
        why = ", ".join(sorted({flat_why(p.flat) for p in runs if not p.complete}))
        if done:
            status, reason = "done", ""
        elif any(flat_failed(p.flat) for p in runs):  # the server did not work: a failed cell
            status, reason = "failed", why
        else:
            status, reason = "incomplete", why
        rows.append(CellRow(variant, values, _load_of(values), tuple(p.run_id for p in done), figures, status,
                            reason, left))
    seen = {_ident(r.variant, r.values) for r in rows if r.status == "done"}
    latest: dict[str, tuple[str, dict[str, Any], str, str]] = {}
    for event in journal:
        if event.get("event") not in ("failed", "skipped", "incomplete") or not isinstance(event.get("cell"), str):
            continue
        cell = _sweep_key({"sweep_cell": event["cell"]})
        if cell is None:
            continue
        cell_variant = str(cell.get("variant") or NO_VARIANT)
        cell_values = {k: v for k, v in cell.items() if k not in ("variant", "repeat")}
        if _ident(cell_variant, cell_values) not in seen:  # the last event of a point not done says why
            latest[_ident(cell_variant, cell_values)] = (cell_variant, cell_values, str(event["event"]),
                                                         str(event.get("reason") or ""))
    by_ident = {_ident(r.variant, r.values): i for i, r in enumerate(rows)}
    for ident, (variant, values, status, reason) in latest.items():
        if ident in by_ident:  # runs, none complete: the journal says why
            row = rows[by_ident[ident]]
            rows[by_ident[ident]] = dataclasses.replace(row, status=status, reason=reason or row.reason)
        else:
            rows.append(CellRow(variant, values, _load_of(values), (), {k: None for k, _, _ in COLUMNS}, status,
                                reason))

    def order(row: CellRow) -> tuple[Any, ...]:
        others = tuple(str(v) for k, v in sorted(row.values.items()) if k not in ("concurrency", "request_rate"))
        return (row.variant, others, row.load if row.load is not None else math.inf)

    return sorted(rows, key=order)


def figure_text(figure: tuple[float, float | None] | None, digits: int) -> str:
    if figure is None:
        return ""
    mean, half = figure
    text = f"{mean:,.{digits}f}"
    return text + (f" ± {half:,.{digits}f}" if half is not None else "")


def values_text(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v if not isinstance(v, (list, dict)) else orjson.dumps(v).decode()}"
                     for k, v in values.items()) or "-"


def status_text(row: CellRow) -> str:
    text = row.status + (f": {row.reason}" if row.reason else "")
    if row.incomplete and row.status == "done":
        n = len(row.incomplete)
        text += f" ({n} incomplete run{'s' if n != 1 else ''} not averaged: see Incomplete runs)"
    return text


INCOMPLETE_HEAD = ("Run", "Variant", "Point", "Status", "Completed", "Why")


def incomplete_rows(points: Sequence[RunPoint]) -> list[tuple[str, ...]]:
    """A row per run that is no complete cell (collapsed, interrupted, capped before its first completion,
    stopped early: runfile.is_complete), as INCOMPLETE_HEAD: listed apart, never averaged into the cells table
    or a figure."""
    rows: list[tuple[str, ...]] = []
    for point in points:
        if point.complete:
            continue
        variant, values = point_values(point)
        completed, total = point.flat.get("completed"), point.flat.get("num_prompts")
        done = f"{completed}/{total}" if completed is not None and total is not None else str(completed or "-")
        rows.append((point.run_id, variant, values_text(values), point.status, done,
                     flat_why(point.flat)))
    return rows


def counts_text(points: Sequence[RunPoint], rows: Sequence[CellRow]) -> str:
    """The page's count of runs and grid points: the complete runs (those the table and the figures
    average) and, apart, the incomplete ones."""
    complete = sum(p.complete for p in points)
    text = f"{complete} complete run{'s' if complete != 1 else ''}, {len(rows)} grid point" + (
        "s" if len(rows) != 1 else "")
    left = len(points) - complete
    if left:
        text += f" (and {left} incomplete run{'s' if left != 1 else ''}, listed apart and not averaged)"
    return text
