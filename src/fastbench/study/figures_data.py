"""What the study's figures show, computed apart from the drawing (``plots`` draws it): runs grouped into
series (one per variant, one cell per load point, the repeats of a cell averaged with a 95% interval),
where two series cross (interpolated between cells, with the interval where repeats exist), the Pareto
set of per-stream rate against aggregate throughput, and one run's percentile spectrum.

Plain functions over plain values, so that each is tested on inputs whose answer is known.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson

from fastbench.exceptions import StoreError
from fastbench.study.compare import records_of_file
from fastbench.study.runfile import (
    Scalar,
    flat_complete,
    flat_keys,
    flat_status,
    flat_why,
    load_result,
    read_records,
)
from fastbench.study.store import RECORDS_FILE, RESULT_FILE, Store

__all__ = ("AXIS_KEYS", "Cell", "Crossing", "RunPoint", "complete_points", "crossings", "group_series", "left_out",
           "load_points", "mean_interval", "pareto_front", "per_position_points", "point_document", "point_records",
           "series_contexts", "series_namer", "spectrum")

Axis = Literal["concurrency", "rate"]
NO_VARIANT = "(no variant)"

# Student's t at 97.5% for 1..30 degrees of freedom (a 95% two-sided interval of a mean of n = df + 1
# repeats); beyond 30, 1.96 + 2.4 / df is within 0.002 of it.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


@dataclasses.dataclass(frozen=True)
class RunPoint:
    """One run as the figures read it."""

    run_id: str  # its id in the store, or the folder / file it was read from
    variant: str  # --variant, else NO_VARIANT
    concurrency: int | None  # None: unbounded
    request_rate: float | None  # None: closed loop
    flat: Mapping[str, Scalar]  # its flat keys (runfile.flat_keys)
    folder: str | None  # its run folder (histograms.hlog, requests.jsonl.gz), where it has one

    def load(self, axis: Axis) -> float | None:
        return float(self.concurrency) if axis == "concurrency" and self.concurrency is not None else (
            self.request_rate if axis == "rate" else None)

    @property
    def complete(self) -> bool:
        """A complete cell (runfile.is_complete): only these are averaged into a figure's point."""
        return flat_complete(self.flat)

    @property
    def status(self) -> str:
        """How the run ended (runfile.run_status: ok, time cap, INTERRUPTED, CAPPED-EMPTY, ...)."""
        return flat_status(self.flat)

    @property
    def sweep(self) -> str | None:
        """The sweep that ran it (metadata ``sweep``), or None."""
        name = self.flat.get("sweep")
        return name if isinstance(name, str) and name else None

    def grid_values(self) -> dict[str, Any]:
        """The grid point it measured, less variant and repeat (its sweep cell's key: every crossed
        key's value); {} for a run outside a sweep."""
        text = self.flat.get("sweep_cell")
        try:
            key = orjson.loads(text) if isinstance(text, str) else None
        except orjson.JSONDecodeError:
            key = None
        return {k: v for k, v in key.items() if k not in ("variant", "repeat")} if isinstance(key, dict) else {}

    def value(self, key: str) -> float | None:
        value = self.flat.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return float(value)


def _point(run_id: str, doc: Mapping[str, Any], folder: str | None) -> RunPoint:
    config = (doc.get("fastbench") or {}).get("config") or {}
    conc, rate = doc.get("max_concurrency"), doc.get("request_rate")
    return RunPoint(
        run_id=run_id, variant=str(config.get("variant") or NO_VARIANT),
        concurrency=conc if isinstance(conc, int) and not isinstance(conc, bool) else None,
        request_rate=float(rate) if isinstance(rate, (int, float)) and math.isfinite(rate) else None,
        flat=flat_keys(doc), folder=folder)


def load_points(refs: Sequence[str], store_root: str | None, filters: Mapping[str, Any]) -> list[RunPoint]:
    """The runs named by ``refs`` (run ids or id starts in the store, run folders, result files), or
    without refs every run of the store matching ``filters`` (Store.query's keywords)."""
    points: list[RunPoint] = []
    if not refs:
        if store_root is None:
            raise StoreError("no runs named and no store to take them from")
        with Store(store_root) as store:
            runs = store.query(**filters)
            flat = store.flat([run.run_id for run in runs])
        for run in runs:
            config, keys = flat.get(run.run_id, ({}, {}))
            points.append(RunPoint(run.run_id, run.meta.variant or NO_VARIANT, run.meta.concurrency,
                                   run.meta.request_rate, keys, run.folder))
        return points
    for ref in refs:
        path = Path(ref)
        if path.is_file():
            points.append(_point(ref, load_result(path), None))
        elif path.is_dir():
            points.append(_point(path.name, load_result(path / RESULT_FILE), str(path)))
        else:
            if store_root is None:
                raise StoreError(f"{ref}: no such file or folder, and no store to look it up in")
            with Store(store_root) as store:
                stored = store.resolve(ref)
            points.append(_point(stored.run_id, load_result(Path(stored.folder) / RESULT_FILE), stored.folder))
    return points


def point_document(point: RunPoint) -> dict[str, Any]:
    """The run's whole result document: its folder's result file, or the result file it was named by."""
    path = Path(point.folder) / RESULT_FILE if point.folder is not None else Path(point.run_id)
    return load_result(path / RESULT_FILE if path.is_dir() else path)


def point_records(point: RunPoint) -> list[dict[str, Any]] | None:
    """The run's per-request records: its folder's requests.jsonl.gz, or the --save-detailed file its
    result file names; None where none is kept."""
    if point.folder is not None:
        path = Path(point.folder) / RECORDS_FILE
        return read_records(path) if path.is_file() else None
    found = records_of_file(Path(point.run_id), point_document(point))
    return read_records(found) if found is not None else None


def complete_points(points: Iterable[RunPoint]) -> list[RunPoint]:
    """The runs that are complete cells, in their order: what a study's figures and tables average."""
    return [point for point in points if point.complete]


def left_out(points: Iterable[RunPoint]) -> list[dict[str, str]]:
    """The runs that are not complete cells, each as {run, variant, status, reason}: what a figure's
    numbers (its JSON) and the report list apart instead of averaging."""
    return [{"run": point.run_id, "variant": point.variant, "status": point.status, "reason": flat_why(point.flat)}
            for point in points if not point.complete]


PER_POSITION_KEY = "spec_decode_per_position_acceptance_rates"


def position_key(position: int) -> str:
    return f"spec_decode_acceptance_rate_position_{position}"


def per_position_points(points: Sequence[RunPoint]) -> tuple[list[RunPoint], int]:
    """The runs with per-position acceptance (vLLM's ``spec_decode_num_accepted_tokens_per_pos_total``
    over drafts, in the result file as a list), each with one flat key per position
    (:func:`position_key`) so that :func:`group_series` takes them; and the most positions any has.
    Only runs with an acceptance length have counters, so only their result files are read."""
    found: list[RunPoint] = []
    positions = 0
    for point in points:
        if point.value("spec_decode_acceptance_length") is None:
            continue
        rates = point_document(point).get(PER_POSITION_KEY)
        if not isinstance(rates, list) or not rates:
            continue
        extra = {position_key(i): float(r) for i, r in enumerate(rates)
                 if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r)}
        positions = max(positions, len(rates))
        found.append(dataclasses.replace(point, flat={**point.flat, **extra}))
    return found, positions


# -- series ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Cell:
    """One load point of one series: its runs' values, their mean and its 95% interval (the mean
    itself at both ends with one run)."""

    load: float
    values: tuple[float, ...]
    mean: float
    low: float
    high: float
    run_ids: tuple[str, ...] = ()


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """The mean of repeated runs and its 95% t-interval (mean, low, high); one value: no width."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, mean, mean
    half = t975(n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


# The grid keys a load axis stands for: a sweep crossing them draws them along x, not as series.
AXIS_KEYS: dict[str, tuple[str, ...]] = {"concurrency": ("concurrency", "max_concurrency"),
                                         "rate": ("request_rate",)}


def _shown_value(value: Any) -> str:
    return orjson.dumps(value).decode() if isinstance(value, (list, dict)) else str(value)


def series_namer(points: Iterable[RunPoint], axis: Axis = "concurrency") -> Callable[[RunPoint], str]:
    """A function naming the series a run belongs to in a figure against ``axis``: its variant, then
    the values of every other key its sweep crossed (``base max_tokens=32``: a point of a figure is one
    grid point, its repeats only), led by the sweep's name where the runs come from several sweeps
    (``shared: base``: two sweeps are two series, never one mean). Runs outside a sweep: the variant."""
    context = _context_of(points, axis)

    def name(point: RunPoint) -> str:
        sweep, others = context(point)
        parts = ([] if point.variant == NO_VARIANT and others else [point.variant]) + list(others)
        text = " ".join(parts)
        return f"{sweep}: {text}" if sweep is not None else text

    return name


def series_contexts(points: Iterable[RunPoint], axis: Axis = "concurrency") -> dict[str, tuple[Any, ...]]:
    """series name -> what it holds fixed besides its variant (its sweep, where several are drawn, and
    its other crossed values): two series compare as variants only where these are equal."""
    points = list(points)
    name, context = series_namer(points, axis), _context_of(points, axis)
    return {name(point): context(point) for point in points}


def _context_of(points: Iterable[RunPoint], axis: Axis) -> Callable[[RunPoint], tuple[str | None, tuple[str, ...]]]:
    several = len({point.sweep for point in points}) > 1
    drop = AXIS_KEYS[axis]

    def context(point: RunPoint) -> tuple[str | None, tuple[str, ...]]:
        others = tuple(f"{k}={_shown_value(v)}" for k, v in sorted(point.grid_values().items()) if k not in drop)
        return (point.sweep or "(no sweep)") if several else None, others

    return context


def group_series(points: Iterable[RunPoint], key: str, axis: Axis = "concurrency") -> dict[str, list[Cell]]:
    """series -> its cells (ascending load) of figure ``key``; a series is a variant and the values of
    the other keys its sweep crossed, per sweep (:func:`series_namer`), so a cell's runs are repeats of
    one grid point. Runs without the load or the figure, and runs that are no complete cell
    (interrupted, collapsed, capped before their first completion, stopped early:
    :func:`complete_points`), are left out. Series in name order."""
    points = list(points)
    named = series_namer(points, axis)
    grouped: dict[str, dict[float, list[tuple[float, str]]]] = {}
    for point in points:
        if not point.complete:
            continue
        load, value = point.load(axis), point.value(key)
        if load is None or value is None:
            continue
        grouped.setdefault(named(point), {}).setdefault(load, []).append((value, point.run_id))
    series: dict[str, list[Cell]] = {}
    for variant in sorted(grouped):
        cells = []
        for load in sorted(grouped[variant]):
            values = tuple(v for v, _ in grouped[variant][load])
            mean, low, high = mean_interval(values)
            cells.append(Cell(load, values, mean, low, high, tuple(r for _, r in grouped[variant][load])))
        series[variant] = cells
    return series


# -- crossings ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where series ``first`` stops being above (or below) series ``second``."""

    first: str
    second: str
    load: float  # interpolated between the two cells around it
    low: float | None  # the range of load around it where the two 95% intervals overlap; None without repeats
    high: float | None
    low_open: bool  # the overlap reaches the first (or last) shared cell: the interval may extend beyond
    high_open: bool
    first_above_before: bool  # first was the higher below the crossing


def _scaled(x: float, log_x: bool) -> float:
    return math.log(x) if log_x else x


def _unscaled(u: float, log_x: bool) -> float:
    return math.exp(u) if log_x else u


def crossings(first: Sequence[Cell], second: Sequence[Cell], *, names: tuple[str, str] = ("a", "b"),
              log_x: bool = False) -> list[Crossing]:
    """Where the two series' means cross, over the loads both have: between two neighbouring shared
    cells whose difference changes sign, interpolated linearly (in log load with ``log_x``, as drawn on
    a log axis); at a cell where the difference is exactly 0 between opposite signs, that cell.

    Where repeats give intervals, the crossing's interval is the stretch of load around it where the
    two series' 95% intervals overlap (each bound interpolated as the means are): the loads at which
    the data cannot tell which variant is ahead."""
    by_load = {c.load: c for c in second}
    shared = [(c, by_load[c.load]) for c in first if c.load in by_load]
    if log_x and any(a.load <= 0 for a, _ in shared):
        raise ValueError("a log load axis needs positive loads")
    xs = [_scaled(a.load, log_x) for a, _ in shared]
    diff = [a.mean - b.mean for a, b in shared]
    repeats = any(a.high > a.low or b.high > b.low for a, b in shared)
    # overlap holds where (a.low - b.high) <= 0 <= (a.high - b.low)
    lo_gap = [a.low - b.high for a, b in shared]
    hi_gap = [a.high - b.low for a, b in shared]
    found: list[Crossing] = []
    last_sign = 0
    last_index = -1
    for i, d in enumerate(diff):
        sign = (d > 0) - (d < 0)
        if sign == 0:
            continue
        if last_sign and sign != last_sign:
            j = last_index  # the previous nonzero cell; cells between j and i are exactly 0
            if i - j > 1:
                u = xs[j + 1] if i - j == 2 else (xs[j + 1] + xs[i - 1]) / 2
            else:
                u = xs[j] + (xs[i] - xs[j]) * diff[j] / (diff[j] - d)
            low = high = None
            low_open = high_open = False
            if repeats:
                (low_u, low_open), (high_u, high_open) = _overlap_extent(xs, lo_gap, hi_gap, u)
                low, high = _unscaled(low_u, log_x), _unscaled(high_u, log_x)
            found.append(Crossing(names[0], names[1], _unscaled(u, log_x), low, high, low_open, high_open,
                                  last_sign > 0))
        last_sign, last_index = sign, i
    return found


def _segment_overlap(lo0: float, lo1: float, hi0: float, hi1: float) -> tuple[float, float] | None:
    """The t in [0, 1] where lo(t) <= 0 <= hi(t), lo and hi linear between their ends: an interval or None."""
    t_min, t_max = 0.0, 1.0
    for start, end, sense in ((lo0, lo1, -1.0), (hi0, hi1, 1.0)):
        # need sense * (start + t (end - start)) >= 0
        a, b = sense * start, sense * (end - start)
        if b == 0:
            if a < 0:
                return None
        elif b > 0:
            t_min = max(t_min, -a / b)
        else:
            t_max = min(t_max, -a / b)
    return (t_min, t_max) if t_min <= t_max else None


def _overlap_extent(xs: Sequence[float], lo_gap: Sequence[float], hi_gap: Sequence[float],
                    u: float) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """The connected stretch of x around ``u`` where lo_gap <= 0 <= hi_gap (piecewise linear over xs):
    ((left, reaches the first x), (right, reaches the last x)). At the crossing itself the means are
    equal, so the intervals overlap there and the stretch is never empty."""
    k = max(i for i in range(len(xs) - 1) if xs[i] <= u) if len(xs) > 1 else 0
    k = min(k, len(xs) - 2)

    def seg(i: int) -> tuple[float, float] | None:
        return _segment_overlap(lo_gap[i], lo_gap[i + 1], hi_gap[i], hi_gap[i + 1])

    def at(i: int, t: float) -> float:
        return xs[i] + t * (xs[i + 1] - xs[i])

    here = seg(k) or (0.0, 1.0)  # cannot be empty (see above); guard against rounding
    left_i, left_t = k, here[0]
    while left_t == 0.0 and left_i > 0:
        before = seg(left_i - 1)
        if before is None or before[1] < 1.0:
            break
        left_i, left_t = left_i - 1, before[0]
    right_i, right_t = k, here[1]
    while right_t == 1.0 and right_i < len(xs) - 2:
        after = seg(right_i + 1)
        if after is None or after[0] > 0.0:
            break
        right_i, right_t = right_i + 1, after[1]
    left, right = at(left_i, left_t), at(right_i, right_t)
    return (left, left_i == 0 and left_t == 0.0), (right, right_i == len(xs) - 2 and right_t == 1.0)


def all_crossings(series: Mapping[str, Sequence[Cell]], *, log_x: bool = False,
                  contexts: Mapping[str, Any] | None = None) -> list[Crossing]:
    """The crossings of every pair of series, in name order; with ``contexts`` (:func:`series_contexts`),
    only of pairs that differ in their variant alone (``base max_tokens=32`` against ``spec
    max_tokens=32``, never against ``spec max_tokens=64``)."""
    names = list(series)
    return [c for i, a in enumerate(names) for b in names[i + 1:]
            if contexts is None or contexts.get(a) == contexts.get(b)
            for c in crossings(series[a], series[b], names=(a, b), log_x=log_x)]


def log_axis(loads: Iterable[float]) -> bool:
    """Whether loads are drawn (and crossings interpolated) on a log axis: all positive and spanning a
    factor of 4 or more, as a doubling sweep (1, 2, 4, 8, ...) does."""
    values = [x for x in loads]
    return bool(values) and min(values) > 0 and max(values) / min(values) >= 4


# -- Pareto ---------------------------------------------------------------------------------------

def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """The indices of the points no other point dominates, both coordinates higher-is-better (per-stream
    rate, aggregate throughput), ordered by the first coordinate descending. A point dominates another
    when it is at least as good in both and better in one; equal points are all kept."""
    front = [i for i, (x, y) in enumerate(points)
             if not any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy in points)]
    return sorted(front, key=lambda i: (-points[i][0], points[i][1]))


# -- one run's percentile spectrum ----------------------------------------------------------------

def read_histogram_log(path: str | os.PathLike[str]) -> dict[str, Any]:
    """metric -> its HdrHistogram, from a run's histograms.hlog (one tagged line each)."""
    from hdrh.histogram import HdrHistogram

    try:
        text = Path(path).read_text(encoding="ascii")
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None
    found: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith("Tag="):
            continue
        tag, _, rest = line[len("Tag="):].partition(",")
        data = rest.rsplit(",", 1)[-1]
        try:
            found[tag] = HdrHistogram.decode(data)
        except Exception as exc:  # hdrh raises plain exceptions on bad data
            raise StoreError(f"{path}: the {tag} histogram cannot be decoded ({exc})") from None
    return found


def spectrum(histogram: Any, *, scale: float = 1e-6, per_decade: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """A histogram's percentile spectrum as HdrHistogram plots it: (x = 1 / (1 - p), value x scale),
    p from 0 up to the last recorded value's percentile, ``per_decade`` points per factor of 10 of x
    (values in ns: ``scale`` 1e-6 gives ms). Empty arrays for an empty histogram."""
    count = int(histogram.get_total_count())
    if count == 0:
        return np.zeros(0), np.zeros(0)
    # The largest x that still holds a sample: the last one's own percentile, 1 - 1/count.
    top = math.log10(count)
    xs = 10 ** np.linspace(0.0, top, max(2, int(math.ceil(top * per_decade)) + 1))
    percentiles = 100.0 * (1.0 - 1.0 / xs)
    values = np.array([histogram.get_value_at_percentile(p) for p in percentiles], dtype=np.float64) * scale
    return xs, values
