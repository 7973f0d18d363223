"""The typed result of one run: :class:`Result` and the parts it is made of.

``figures.summarize`` builds it from what the native core measured; ``writers`` renders it and
``vllm_keys.to_vllm_keys`` flattens it. Each figure's meaning is in ``definitions.DEFINITIONS``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from fastbench.config import BenchConfig
from fastbench.exceptions import FastbenchError, ServerError
from fastbench.results.definitions import RATE_SCALE

if TYPE_CHECKING:
    from fastbench.results.cache import PrefixCacheSummary
    from fastbench.results.steady import SteadyState


@dataclasses.dataclass(frozen=True)
class Distribution:
    """Summary of one histogram, in ``unit`` ("ms" or "tok/s"); the figures are None when count is 0."""

    unit: str
    count: int
    mean: float | None
    std: float | None
    min: float | None
    median: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    max: float | None
    # percentile -> value, for the percentiles a run selected (--metric-percentiles); computed as the
    # others are (exact per-request values, or the histogram)
    selected: dict[float, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def empty(cls, unit: str) -> Distribution:
        return cls(unit, 0, None, None, None, None, None, None, None, None)

    @classmethod
    def from_values(cls, values: np.ndarray, unit: str, scale: float = 1e6,
                    selected: tuple[float, ...] = ()) -> Distribution:
        """Exact figures of per-request values (ns, or tok/s with ``scale`` 1), as vllm bench serve
        computes them: numpy's linear-interpolated percentiles, population standard deviation."""
        if values.size == 0:
            return cls.empty(unit)
        v = np.asarray(values, dtype=np.float64) / scale
        median, p90, p99, p99_9 = (float(x) for x in np.percentile(v, [50.0, 90.0, 99.0, 99.9]))
        at = {p: float(x) for p, x in zip(selected, np.percentile(v, list(selected)))} if selected else {}
        return cls(unit=unit, count=int(v.size), mean=float(v.mean()), std=float(v.std()), min=float(v.min()),
                   median=median, p90=p90, p99=p99, p99_9=p99_9, max=float(v.max()), selected=at)

    @classmethod
    def from_histogram(cls, hist: Any, unit: str, selected: tuple[float, ...] = ()) -> Distribution:
        count = int(hist.get_total_count())
        if count == 0:
            return cls.empty(unit)
        scale = 1e6 if unit == "ms" else float(RATE_SCALE)

        def at(p: float) -> float:
            return float(hist.get_value_at_percentile(p)) / scale

        mean, std = _mean_std(hist)
        return cls(
            unit=unit,
            count=count,
            mean=mean / scale,
            std=std / scale,
            min=float(hist.get_min_value()) / scale,
            median=at(50.0),
            p90=at(90.0),
            p99=at(99.0),
            p99_9=at(99.9),
            max=float(hist.get_max_value()) / scale,
            selected={p: at(p) for p in selected},
        )

    def percentiles(self) -> dict[str, float | None]:
        """Percentiles keyed as vllm names them: "p90", "p99", "p99.9"."""
        return {"p90": self.p90, "p99": self.p99, "p99.9": self.p99_9}


@dataclasses.dataclass(frozen=True)
class Counts:
    total: int  # rows of the request table: the requests the workload asked for (warm-ups excluded)
    completed: int
    failed: int  # ended with an error other than CANCELLED
    failed_by_class: dict[str, int]  # ErrorClass name -> count, failed requests only
    cancelled: int  # in flight when the run stopped early, or arrived and waiting for a slot: incomplete
    not_started: int  # never scheduled before the run ended
    warmups: int  # warm-up requests sent before the window (not in total)
    # sent again, once, on a new connection: the kept-alive one closed before any response byte
    resent: int = 0


@dataclasses.dataclass(frozen=True)
class Throughput:
    """Rates over the measured window, per second."""

    request_throughput: float
    request_goodput: float | None  # None when no goodput SLO was set
    good_requests: int | None
    input_throughput: float
    output_throughput: float
    total_token_throughput: float
    prefill_throughput: float | None  # aggregate; None when no prompt token counts are known


@dataclasses.dataclass(frozen=True)
class ErrorSummary:
    count: int
    examples: list[str]  # up to 5 distinct messages


@dataclasses.dataclass(frozen=True)
class UsageSummary:
    by_source: dict[str, int]  # UsageSource name -> completed requests whose counts came from it
    all_per_chunk: bool
    statement: str  # where token counts came from, and the fallback when not all PER_CHUNK


@dataclasses.dataclass(frozen=True)
class TimestampSummary:
    source: str  # TimestampSource name
    statement: str
    reads: int
    multi_event_reads: int
    output_events: int
    kernel_stamped_reads: int
    multi_event_read_ratio: float | None
    events_per_read: float | None
    kernel_stamped_ratio: float | None


@dataclasses.dataclass(frozen=True)
class ClientSummary:
    mean_in_flight: float
    max_concurrent_requests: int
    cpu_s: float
    cpu_per_event_us: float | None
    connections_opened: int
    late_share: float | None = None  # of started requests, those the client sent > 0.1 ms late (see DEFINITIONS)
    # --coalesce-ms auto: the reading tick chosen and when (load.driver.coalescing_summary; with --workers,
    # {"per_worker": [...]}); None with a fixed --coalesce-ms
    coalescing: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class PerRequest:
    """vllm's per-request arrays, for every started request in index order."""

    index: list[int]
    input_lens: list[int]  # prompt tokens (0 when unknown)
    output_lens: list[int]  # output tokens of completed requests, 0 otherwise (as vllm)
    ttfts: list[float]  # TTFT in seconds, 0.0 where no output arrived (as vllm)
    errors: list[str]  # "" for completed requests, else "CLASS: message"
    # with --save-detailed (BenchConfig.per_request_arrays) only, else None:
    start_times: list[float] | None = None  # send time, s from the start of the measured window
    latencies: list[float] | None = None  # E2EL in s from the origin of ttfts, 0.0 unless completed
    queue_times: list[float] | None = None  # s from the scheduled arrival to the send (waiting for a slot)
    generated_texts: list[str] | None = None  # the response text ("" where none was kept)
    itls: list[list[float]] | None = None  # s between successive output chunks, [] unless completed


@dataclasses.dataclass(frozen=True)
class Result:
    """Everything derived from one run; ``writers`` renders it, ``to_vllm_keys`` flattens it."""

    config: BenchConfig
    created_at: str  # local wall-clock time of the summary, ISO 8601 with offset
    duration_s: float
    counts: Counts
    total_input_tokens: int  # completed requests only
    total_output_tokens: int  # completed requests only
    throughput: Throughput
    distributions: dict[str, Distribution]  # metric name (see DEFINITIONS) -> summary
    histograms: dict[str, Any]  # metric name -> HdrHistogram, values in histogram_unit(name)
    mean_tokens_per_chunk: float | None
    errors: dict[str, ErrorSummary]  # ErrorClass name -> count and examples (failed and cancelled)
    usage: UsageSummary
    timestamps: TimestampSummary
    client: ClientSummary
    per_request: PerRequest
    cap_hit: bool
    stopped_reason: str
    collapsed: bool  # the run did not measure a working server (see collapse_reason)
    collapse_reason: str | None
    notes: list[str]
    workload_info: dict[str, Any]
    server_info: dict[str, Any]
    run_id: str | None = None  # the run's id in the results store (BenchConfig.store), else None
    # --workers: how many client processes, why, and each one's figures (None: one process, as asked)
    workers: dict[str, Any] | None = None
    # --multi-turn: figures per turn index and per session (results.sessions.session_figures), else None
    sessions: dict[str, Any] | None = None
    # the steady interval and the figures over it (results.steady.steady_state); None: not computed
    steady: SteadyState | None = None
    # the server's prefix cache as the run saw it, and the workload's own sharing (results.cache)
    prefix_cache: PrefixCacheSummary | None = None


def _mean_std(hist: Any) -> tuple[float, float]:
    """Mean and standard deviation of an HDR histogram, as hdrh computes them (each bucket at its
    median-equivalent value), but vectorised: hdrh's own loop takes ~0.1 s per call."""
    raw = np.ctypeslib.as_array(hist.counts)
    counts = raw[: min(len(raw), int(hist.counts_len))].astype(np.float64)
    index = np.flatnonzero(counts)
    if len(index) == 0:
        return 0.0, 0.0
    half_magnitude = int(hist.sub_bucket_half_count_magnitude)
    half = int(hist.sub_bucket_half_count)
    bucket = (index >> half_magnitude) - 1
    sub_bucket = (index & (half - 1)) + half
    first = bucket < 0
    sub_bucket[first] -= half
    bucket[first] = 0
    shift = bucket + int(hist.unit_magnitude)
    median_equivalent = ((sub_bucket << shift) + ((1 << shift) >> 1)).astype(np.float64)
    weights = counts[index]
    total = weights.sum()
    mean = float((weights * median_equivalent).sum() / total)
    std = float(np.sqrt((weights * (median_equivalent - mean) ** 2).sum() / total))
    return mean, std


# -- the errors that carry what was measured (fastbench.exceptions holds the others) ----------------


class ResultWriteError(FastbenchError, OSError):
    """The run finished but a result file could not be written (disk full, directory removed).

    ``result`` holds what was measured, so that the caller can still use or save it elsewhere.
    """

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


class ServerDiedError(ServerError):
    """The server died during the measured window. The result files are written (the run is
    marked as stopped early) and ``result`` holds what was measured."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result
