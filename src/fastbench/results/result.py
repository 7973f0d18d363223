"""The typed result of one run: :class:`Result` and the parts it is made of.

``figures.summarize`` builds it from what the native core measured; ``writers`` renders it and
``vllm_keys.to_vllm_keys`` flattens it. Each figure's meaning is in ``definitions.DEFINITIONS``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastbench.config import BenchConfig
from fastbench.exceptions import FastbenchError, ServerError
from fastbench.results.distribution import Distribution as Distribution  # re-exported: its home before

if TYPE_CHECKING:
    from fastbench.results.cache import PrefixCacheSummary
    from fastbench.results.pooling import PoolingSummary
    from fastbench.results.steady import SteadyState


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
    # --dataset-name weka: figures per agent tree, agent and role (results.agentic.agentic_figures), else None
    agentic: dict[str, Any] | None = None
    # the steady interval and the figures over it (results.steady.steady_state); None: not computed
    steady: SteadyState | None = None
    # the server's prefix cache as the run saw it, and the workload's own sharing (results.cache)
    prefix_cache: PrefixCacheSummary | None = None
    # --lora-modules: each adapter's figures beside the whole (results.adapters.adapter_figures), else None
    adapters: dict[str, Any] | None = None
    # an API answered whole (embeddings, pooling, score, rerank): inputs/s, and what does not apply (results.pooling)
    pooling: PoolingSummary | None = None
    # the run second by second as its live sampler saw it (api.live): columns, see result-schema.md
    timeline: dict[str, Any] | None = None


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
