"""What a run looks like while it runs: ``LiveSnapshot``, the small typed record a live view, an exporter
or another harness reads a few times a second, and ``RunningFigures``, which keeps it from the request
table and the core's running histograms without touching the hot path.

Everything here is read from what the run already keeps: the request table the core fills (one row per
request; a row whose ``end_ns`` is set is finished), the core's chunk histograms (copied, never synced,
by ``Recorder.copy_counts``), the driver's counters. Per-request latencies go into histograms of the one
HDR layout (``records.new_histogram``), by the same index arithmetic as ``csrc/fb_hdr.h``, in numpy over
the rows finished since the last look; a quantile read from them is HDR's (3 significant digits), not
the exact per-request percentile the result computes at the end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from fastbench.results.records import COL, ErrorClass, new_histogram

__all__ = ("BOUNDS_S", "Buckets", "HdrLayout", "LATENCIES", "LiveSnapshot", "Quantiles", "RunningFigures")

# The latencies a live view shows and an exporter exports, each one HDR histogram (ns).
LATENCIES = ("ttft", "tpot", "itl", "e2e")
# An exporter's histogram bounds (s), chosen once for every latency: 0.5 ms to 1,000 s, 1-2.5-5 a decade.
BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0,
            100.0, 250.0, 500.0, 1000.0)


class HdrLayout:
    """The one HDR layout as numpy: value -> counts index, each index's value range, quantiles."""

    def __init__(self) -> None:
        h = new_histogram()
        self.counts_len = int(h.counts_len)
        self.unit_magnitude = int(h.unit_magnitude)
        self.half_magnitude = int(h.sub_bucket_half_count_magnitude)
        self.half_count = int(h.sub_bucket_half_count)
        self.mask = int(h.sub_bucket_mask)
        self.highest = int(h.highest_trackable_value)
        index = np.arange(self.counts_len, dtype=np.int64)
        bucket = (index >> self.half_magnitude) - 1
        sub = (index & (self.half_count - 1)) + self.half_count
        first = bucket < 0
        sub[first] -= self.half_count
        bucket[first] = 0
        # each index's lowest value and the highest value equivalent to it (hdrh's definitions)
        self.lowest = sub << (bucket + self.unit_magnitude)
        self.highest_equivalent = self.lowest + (np.int64(1) << (bucket + self.unit_magnitude)) - 1
        self.middle = (self.lowest + self.highest_equivalent) / 2.0  # for a sum from the counts

    def index(self, values_ns: np.ndarray) -> np.ndarray:
        """Counts indexes of int64 values (clamped into 0 .. the highest trackable value), as fb_hdr_index."""
        v = np.clip(values_ns.astype(np.int64), 0, self.highest)
        pow2ceiling = np.floor(np.log2((v | self.mask).astype(np.float64))).astype(np.int64) + 1
        bucket = pow2ceiling - self.unit_magnitude - (self.half_magnitude + 1)
        sub = v >> (bucket + self.unit_magnitude)
        return ((bucket + 1) << self.half_magnitude) + (sub - self.half_count)

    def quantiles_ns(self, counts: np.ndarray, qs: tuple[float, ...]) -> list[int | None]:
        """hdrh's values at percentiles 100*q (the highest value equivalent to that bucket), one pass over
        the counts; None each when empty."""
        cumulative = np.cumsum(counts)
        total = int(cumulative[-1])
        if total == 0:
            return [None] * len(qs)
        targets = [max(1, int(q * total + 0.5)) for q in qs]  # hdrh's rounding (get_target_count_at_percentile)
        at = np.minimum(np.searchsorted(cumulative, targets), self.counts_len - 1)
        return [int(v) for v in self.highest_equivalent[at]]

    def quantile_ns(self, counts: np.ndarray, q: float) -> int | None:
        return self.quantiles_ns(counts, (q,))[0]

    def at_or_below(self, counts: np.ndarray, bounds_ns: np.ndarray) -> np.ndarray:
        """Cumulative counts at each bound: the values whose HDR bucket starts at or below it (exact to
        the HDR's resolution: a value within 0.1% of a bound may be counted on either side of it)."""
        cumulative = np.cumsum(counts)
        at = self._bound_index(bounds_ns)
        return np.where(at >= 0, cumulative[np.clip(at, 0, None)], 0)

    def _bound_index(self, bounds_ns: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.lowest, bounds_ns, side="right") - 1


@dataclasses.dataclass(frozen=True)
class Quantiles:
    """p50 and p99 of one latency so far, in ms (None: nothing recorded yet); ``count`` values."""

    p50_ms: float | None
    p99_ms: float | None
    count: int

    @classmethod
    def of(cls, layout: HdrLayout, counts: np.ndarray) -> Quantiles:
        p50, p99 = layout.quantiles_ns(counts, (0.5, 0.99))
        return cls(p50 / 1e6 if p50 is not None else None, p99 / 1e6 if p99 is not None else None,
                   int(counts.sum()))


@dataclasses.dataclass(frozen=True)
class Buckets:
    """One latency as a Prometheus histogram: how many values lie at or below each of ``bounds_s`` (from
    the HDR counts), how many in all, and their sum (s; exact for per-request figures, from each HDR
    bucket's middle for ITL)."""

    bounds_s: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    sum_s: float

    @classmethod
    def of(cls, layout: HdrLayout, counts: np.ndarray, sum_ns: float | None = None) -> Buckets:
        bounds_ns = np.array([round(b * 1e9) for b in BOUNDS_S], dtype=np.int64)
        if sum_ns is None:
            # an elementwise product, not ``counts @ middle``: a dot this long goes to OpenBLAS, whose
            # threads then spin ~0.1 s of CPU waiting for more work, beside the client's loop
            sum_ns = float(np.multiply(counts, layout.middle).sum())
        return cls(BOUNDS_S, tuple(int(c) for c in layout.at_or_below(counts, bounds_ns)), int(counts.sum()),
                   sum_ns / 1e9)


@dataclasses.dataclass(frozen=True)
class LiveSnapshot:
    """One look at a run in progress (``final``: built from the finished run's own data). Rates "now" are
    over the last look's interval (about a second), "run" over the measured window so far."""

    elapsed_s: float  # since the measured window opened
    total: int  # requests planned
    completed: int
    failed: int
    failed_by_class: dict[str, int]  # ErrorClass name (lower case) -> requests, failed or cancelled
    in_flight: int
    output_tokens: int
    requests_per_s_now: float
    requests_per_s_run: float
    tokens_per_s_now: float
    tokens_per_s_run: float
    latency: dict[str, Quantiles]  # "ttft", "tpot", "itl", "e2e" (a --workers or --ray parent: merged)
    skew: Quantiles | None  # receive stamp minus the synthetic server's send stamp; None without one
    lateness: Quantiles | None  # open loop: sent minus scheduled; None in a closed loop
    server: dict[str, float]  # the server's /metrics: running, waiting, kv_cache_usage (0-1), acceptance_length,
    #                           prefix_cache_hit_rate, where it gives them (the latter two over the window so far)
    memory: dict[str, float]  # bytes: server_rss, mem_available_drop, gpu_used (all GPUs), where sampled
    time_left_s: float | None  # against --max-seconds, else estimated from the prompts left at the run's rate
    max_seconds: float | None = None
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # label / variant / cell, where given
    final: bool = False
    # the latencies as Prometheus histograms, only when a listener asks for them (wants_histograms)
    histograms: dict[str, Buckets] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> LiveSnapshot:
        """The snapshot :meth:`to_dict` gave (sent to another process as JSON, read back)."""

        def quantiles(q: Any) -> Quantiles | None:
            return Quantiles(q["p50_ms"], q["p99_ms"], q["count"]) if isinstance(q, Mapping) else None

        fields = dict(doc)
        fields["latency"] = {name: Quantiles(q["p50_ms"], q["p99_ms"], q["count"])
                             for name, q in (doc.get("latency") or {}).items()}
        fields["skew"], fields["lateness"] = quantiles(doc.get("skew")), quantiles(doc.get("lateness"))
        fields["histograms"] = {name: Buckets(tuple(b["bounds_s"]), tuple(b["cumulative"]), b["count"], b["sum_s"])
                                for name, b in (doc.get("histograms") or {}).items()}
        return cls(**fields)


@dataclasses.dataclass
class _TableCursor:
    seen: np.ndarray  # bool per row: counted
    low: int = 0  # every row below it is finished and counted


class RunningFigures:
    """The per-request histograms of a run so far, kept from its request table (or tables: a --workers
    parent reads one per worker) incrementally: each :meth:`update` looks only at rows not yet seen
    finished, from the first unfinished one on."""

    def __init__(self, layout: HdrLayout, *, open_loop: bool) -> None:
        self.layout = layout
        self.open_loop = open_loop
        self.counts = {name: np.zeros(layout.counts_len, dtype=np.int64)
                       for name in ("ttft", "tpot", "e2e", "lateness")}
        self.sums = dict.fromkeys(self.counts, 0)  # ns, exact
        self.failed_by_class: dict[str, int] = {}
        self.completed = 0
        self._cursors: dict[int, _TableCursor] = {}

    def update(self, rows: np.ndarray, started: int, table: int = 0) -> None:
        """Count the rows finished since the last call. ``started``: how many requests have been sent
        (the rows are started about in order; a margin past it catches any that were not). ``table``:
        which of the run's tables ``rows`` is, where there are several."""
        n = len(rows)
        cursor = self._cursors.get(table)
        if cursor is None:
            cursor = self._cursors[table] = _TableCursor(np.zeros(n, dtype=bool))
        seen, low = cursor.seen, cursor.low
        hi = min(n, max(started, low) + 4096)
        if hi <= low:
            return
        window = slice(low, hi)
        ended = rows[window, COL["end_ns"]] != 0
        new = ended & ~seen[window]
        if new.any():
            picked = rows[low + np.flatnonzero(new)]
            seen[window] |= new
            self._count(picked)
        done = seen[window]
        cursor.low = hi if done.all() else low + int(np.argmin(done))

    def _count(self, picked: np.ndarray) -> None:
        errors = picked[:, COL["error"]]
        for code in np.unique(errors[errors != 0]):
            name = ErrorClass(int(code)).name.lower()
            self.failed_by_class[name] = self.failed_by_class.get(name, 0) + int((errors == code).sum())
        ok = picked[errors == 0]
        self.completed += len(ok)
        if len(ok) == 0:
            return
        # as results.figures defines them: from the arrival in open loop, from the send in closed loop
        origin = ok[:, COL["scheduled_ns"]] if self.open_loop else ok[:, COL["sent_ns"]]
        first = ok[:, COL["first_token_ns"]]
        has_first = first > 0
        self._add("ttft", (first - origin)[has_first])
        self._add("e2e", ok[:, COL["end_ns"]] - origin)
        tokens = ok[:, COL["output_tokens"]]
        many = has_first & (tokens >= 2)
        if many.any():  # TPOT = (E2E - TTFT) / (output tokens - 1)
            tpot = (ok[many, COL["end_ns"]] - first[many]) / (tokens[many] - 1)
            self._add("tpot", np.rint(tpot).astype(np.int64))  # rounded as the result's histogram is
        if self.open_loop:
            sent = ok[:, COL["sent_ns"]]
            self._add("lateness", (sent - ok[:, COL["scheduled_ns"]])[sent > 0])

    def _add(self, name: str, values_ns: np.ndarray) -> None:
        self.sums[name] += int(values_ns.sum())
        np.add.at(self.counts[name], self.layout.index(values_ns), 1)


def quantiles_of(layout: HdrLayout, counts: Mapping[str, np.ndarray]) -> dict[str, Quantiles]:
    return {name: Quantiles.of(layout, c) for name, c in counts.items()}
