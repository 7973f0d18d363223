"""What the native core hands over: one row per request, a few chunk-level histograms, counters.

This module is the contract between the compiled client core (``_core``), which fills these
structures, and the Python layer (``figures``, ``writers``), which reads them: the request table's
columns, the error and source codes, and the one HDR histogram layout every histogram of a run shares
(so that they merge, across processes too). It holds no logic beyond naming things.

All times are CLOCK_MONOTONIC nanoseconds (``time.monotonic_ns()`` in Python,
``fb_now_ns()`` in C); 0 means "did not happen".
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

# HDR histogram shape shared by every histogram of a run (so they merge): 1 ns .. 1 hour, 3 digits.
HDR_LOWEST = 1
HDR_HIGHEST = 3_600_000_000_000
HDR_DIGITS = 3


def new_histogram() -> Any:
    """An empty histogram in the one layout fastbench uses: 1 ns to 1 hour, 3 significant digits."""
    return HdrHistogram(HDR_LOWEST, HDR_HIGHEST, HDR_DIGITS)


# Columns of the int64 request table, in order. The core writes row ``i`` for request ``i``.
COLUMNS: tuple[str, ...] = (
    "index",  # request index in the workload (0-based, warm-ups excluded)
    "scheduled_ns",  # when the request was due: its arrival time (open loop) or when its slot freed (closed)
    "sent_ns",  # when its bytes were handed to the kernel (after connect, if one was needed)
    "first_byte_ns",  # receive stamp of the first response byte
    "first_token_ns",  # receive stamp of the first event carrying output of any kind (reasoning or answer)
    "first_answer_ns",  # receive stamp of the first event carrying answer text (not reasoning)
    "end_ns",  # receive stamp of the read that completed the response, or when it failed/was cancelled
    "prompt_tokens",  # from the server's usage; -1 if the server never said
    "output_tokens",  # from the server's usage (last value seen); see usage_source for fallbacks
    "chunks",  # events that carried output (text or a usage increase)
    "events",  # all SSE data events, including role-only, usage-only and [DONE]
    "max_chunk_tokens",  # the most tokens one chunk carried (per-chunk usage only, else 1)
    "error",  # an ErrorClass value; 0 = ok
    "http_status",  # status code of the response, 0 if none was read
    "usage_source",  # a UsageSource value
    "connect_ns",  # time spent opening a new connection for this request (0 when one was reused)
    # usage.prompt_tokens_details.cached_tokens: prompt tokens the server's prefix cache served (vLLM with
    # --enable-prompt-tokens-details, SGLang with --enable-cache-report); -1 if the server never said
    "cached_tokens",
)
COL: dict[str, int] = {name: i for i, name in enumerate(COLUMNS)}
NCOLS = len(COLUMNS)


class ErrorClass(enum.IntEnum):
    """Why a request did not complete. Counted per run; never raised into the event loop."""

    OK = 0
    CONNECT = 1  # no connection (refused, DNS, TLS handshake), or closed or reset before any response byte
    HTTP_STATUS = 2  # a non-2xx status
    TIMEOUT = 3  # --request-timeout passed without the response completing
    PROTOCOL = 4  # malformed HTTP or SSE, non-JSON data, reset mid-stream, body that is not an event stream
    SERVER_ERROR = 5  # an error object inside the stream (vLLM sends {"error": ...} as an SSE event)
    CANCELLED = 6  # still in flight at the --max-seconds cap (counted as incomplete, not failed)
    CONTEXT_LENGTH = 7  # rejected because prompt + max tokens exceed the model's context (HTTP 400 saying so)
    WORKER_LOST = 8  # in flight in a --workers process that died (fastbench.load.workers marks them)


class UsageSource(enum.IntEnum):
    """Where a request's token counts came from."""

    NONE = 0  # no usage at all: output tokens = chunks with text (fallback, stated in the result)
    PER_CHUNK = 1  # usage on every chunk (vLLM continuous_usage_stats): per-chunk token counts are exact
    FINAL = 2  # usage only at the end: total exact, per-chunk split estimated as 1 token per chunk
    # Usage that cannot be right (malformed, went backwards, beyond max_tokens, or no tokens for
    # text): not trusted; output tokens = output chunks, as for NONE.
    INCONSISTENT = 3


class TimestampSource(enum.IntEnum):
    KERNEL = 1  # SO_TIMESTAMPNS receive stamps from recvmsg, mapped onto CLOCK_MONOTONIC
    USER = 2  # clock_gettime(CLOCK_MONOTONIC) right after the read returned


@dataclasses.dataclass
class RunData:
    """Everything one run measured, before any interpretation."""

    rows: np.ndarray  # int64, shape (n_requests, NCOLS); rows of requests never started are all zero
    error_messages: dict[int, str]  # request index -> short message, for failed requests only
    # Chunk-level HDR histograms (hdrh.histogram.HdrHistogram, values in ns), successful requests only:
    #   "itl_chunk": gap between consecutive output chunks of one request
    #   "itl_token": the same gap divided by the chunk's tokens, recorded once per token
    #   "skew": receive stamp minus the synthetic server's send stamp (only when the server stamps)
    histograms: dict[str, Any]
    start_ns: int  # start of the measured window (first scheduled request, after warm-ups)
    end_ns: int  # end of the measured window: last completion, or the time cap
    cap_hit: bool  # --max-seconds ended the run
    stopped_reason: str  # "completed", "time cap", "max error rate", "interrupted", "server exited"
    timestamp_source: TimestampSource
    reads: int  # socket reads that delivered bytes
    multi_event_reads: int  # reads that delivered more than one output event (they share one timestamp)
    output_events: int  # output events received, for the ratio above
    kernel_stamped_reads: int  # reads that carried a kernel timestamp
    connections_opened: int
    concurrency_samples: np.ndarray  # float64 (t_s, in flight) pairs sampled by the driver, shape (k, 2)
    mean_in_flight: float  # time-weighted mean of requests in flight over the measured window
    client_cpu_ns: int  # process CPU time (user + system) spent during the measured window
    warmups: int  # warm-up requests sent (not in rows)
    stale_retries: int = 0  # requests re-sent because a kept-alive connection died before any response byte
    open_loop: bool = False  # arrivals were scheduled (--request-rate): latency counts from scheduled_ns
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
