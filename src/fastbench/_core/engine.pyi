"""Stubs for fastbench's compiled client core (engine.pyx); private API, may change."""

import asyncio
import socket
import ssl
from typing import Any

BUILD_FLAVOUR: str
COLUMN_ORDER: tuple[str, ...]
COALESCE_WHY: tuple[str, ...]

def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of every stamp the core takes."""

def debug_counters() -> dict[str, int] | None:
    """The debug build's leak counters (live objects, C buffers, fds, requests begun and ended), or
    None in a release build, which counts nothing."""

class ArrivalTimer:
    """A CLOCK_MONOTONIC timerfd with nanosecond deadlines, for open-loop arrivals."""

    def fileno(self) -> int: ...
    def arm(self, deadline_ns: int) -> None: ...
    def clear(self) -> int: ...

class Recorder:
    """Counts values (ns) in C with the bucket layout of an hdrh HdrHistogram; sync() copies them in."""

    def __init__(self, histogram: Any) -> None: ...
    def record_value(self, value: int, count: int = 1) -> None: ...
    def sync(self) -> Any: ...
    def copy_counts(self, out: Any) -> int:
        """Copy the running counts into ``out`` (int64, the histogram's counts_len) without a sync; the total."""
    @property
    def total_count(self) -> int: ...
    @property
    def clamped_count(self) -> int: ...
    @property
    def negative_count(self) -> int: ...

class TokenRuns:
    """One buffer many request bodies are cut from, and its runs: (start, end) byte offsets, flat int64."""

    buffer: Any
    runs_array: Any
    n_runs: int
    def __init__(self, buffer: Any, runs: Any) -> None: ...
    def __len__(self) -> int: ...

class BodyParts:
    """A request body sent from parts: ``head``, runs ``first`` to ``end`` of ``source``, ``tail``."""

    head: bytes
    tail: bytes
    source: TokenRuns
    first: int
    end: int
    length: int
    def __init__(self, head: bytes, source: TokenRuns, first: int, end: int, tail: bytes) -> None: ...
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def joined(self) -> bytes: ...

class Slots:
    """The run's slots and its stop, read by every part of the core."""

    in_flight: int
    reserved: int
    limit: int
    send_until_ns: int
    stopping: bool

class Claims:
    """Which request goes next (closed loop, open loop, shared cap), made by RunState for a schedule."""

    n_rows: int
    next_row: int  # one past the last row this process claimed
    def claim(self, now: int = ...) -> int:
        """The next row to send by ``now``, claimed, or -1 when none is (left, or due)."""
    @property
    def arrival_head(self) -> int: ...

class RowClaims(Claims): ...
class ArrivalClaims(Claims): ...
class SharedArrivals(ArrivalClaims): ...

class Pool:
    """Idle connected connections the core sends open-loop arrivals on."""

    low: int  # fewer idle than this: the dispatcher asks Python to open more
    def __len__(self) -> int: ...
    def take_idle(self) -> StreamConnection | None: ...

class Dispatcher:
    """Open loop: the core sends each arrival when due on an idle connection of the pool."""

    core_sends: int
    lead_ns: int
    lead_min_ns: int
    lead_max_ns: int
    lead_samples: int
    lead_wait_ns: int
    def claim(self, now: int) -> int: ...
    @property
    def arrival_head(self) -> int: ...
    @property
    def next_row(self) -> int: ...
    def dispatch_due(self) -> None: ...
    def wake_handled(self) -> None: ...

class SharedDispatcher(Dispatcher):
    """The dispatcher under --workers' shared cap (RunState.share_arrivals)."""

    def claim_due_with_slot(self, now: int) -> int: ...
    def claim_arrived(self, now: int) -> int: ...
    def give_slot(self) -> None: ...
OUT_ANSWER: int
OUT_REASONING: int
OUT_TOOL: int
OUT_DELTA: int
OUT_END: int
OUT_ERROR: int

class StreamApi:
    """One typed-event API's tables for the scanner (Responses, Messages)."""

    def __init__(self, types: dict[str, int], delta_keys: dict[str, int], usage_holders: tuple[str, ...],
                 output_key: str, input_keys: tuple[str, ...], cached_key: str, details: tuple[str, str],
                 end_why: str) -> None: ...

class RunState:
    """Shared by all connections of one run: the request table, chunk histograms, counters."""

    itl_chunk: Recorder
    itl_token: Recorder
    skew: Recorder
    error_messages: dict[int, str]
    outputs: dict[int, bytes]
    kernel_timestamps: bool
    save_outputs: bool
    keep_answers: bool
    api: StreamApi | None
    answers: dict[int, bytes]
    whole_answers: bool  # answers are whole JSON bodies, scanned once at their end (embeddings, rerank...)
    max_answer_bytes: int  # a whole answer past this is a PROTOCOL error; 0: 256 MiB
    max_request_events: int  # output events stamped per request; past them a PROTOCOL error (1,048,576)
    keep_chunk_stamps: bool
    chunk_stamps: dict[int, bytes]
    slots: Slots
    pool: Pool
    stopping: bool
    reserved: int
    send_until_ns: int  # the time cap's instant: no arrival due from it is sent, no closed-loop slot refilled
    max_error_rate: float
    on_stop: Any
    n_rows: int
    others_completed: int
    others_failed: int
    skew_offset_ns: int  # subtracted from receive stamps for skew (--ray: this node's clock less the server's)
    reads: int
    kernel_reads: int
    multi_event_reads: int
    output_events: int
    connections_opened: int
    wakeups: int
    completed: int
    failed: int
    output_tokens: int
    def __init__(self, rows: Any, itl_chunk: Recorder, itl_token: Recorder, skew: Recorder,
                 max_event_bytes: int = ..., expected_tokens: Any = None, published: Any = None) -> None: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def next_row(self) -> int: ...
    def close_all(self, why: str) -> None: ...
    def set_requests(self, head: bytes, bodies: list[bytes | BodyParts],
                     row_heads: list[bytes] | None = None) -> None: ...
    def body(self, row: int) -> bytes | BodyParts: ...
    def claim_rows(self, next_row: Any = None, claimers: Any = None, claimer: int = 0,
                   chained: bool = True) -> RowClaims:
        """Closed loop: the table's rows in order; --workers: from ``next_row[0]`` (int64, an atomic
        add) shared by every worker, marking ``claimers[row] = claimer`` before each is sent."""
    def dispatch_arrivals(self, offsets_ns: Any, base_ns: int, limit: int, lead_min_ns: int = ...,
                          lead_max_ns: int = ..., on_wake: Any = None, on_stale: Any = None) -> Dispatcher:
        """Open loop: the core sends each arrival when due on an idle connection of its pool."""
    def share_arrivals(self, offsets_ns: Any, base_ns: int, limit: int, header: Any, claimers: Any, claimer: int,
                       workers: int, lead_min_ns: int = ..., lead_max_ns: int = ..., on_wake: Any = None,
                       on_stale: Any = None) -> SharedDispatcher:
        """dispatch_arrivals under --workers' shared cap: ``header[0]`` (int64, shared) is the run's next
        unsent arrival, ``header[1]`` its requests in flight; each claim marked ``claimers[row] = claimer``."""
    def end_schedule(self) -> list[StreamConnection]: ...
    def park(self, conn: StreamConnection) -> None: ...
    def busy_connections(self) -> list[StreamConnection]: ...
    def check_error_rate(self) -> None: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...
    def coalesce(self, interval_ns: int, watch_ends: bool = False) -> int: ...
    def coalesce_auto(self, max_tick_ns: int, watch_ends: bool = False) -> int: ...
    @property
    def coalescing(self) -> dict[str, Any] | None: ...
    @property
    def counters(self) -> dict[str, int]: ...

class StreamConnection:
    """One keep-alive HTTP/1.1 connection carrying one streamed request at a time."""

    busy: bool
    closed: bool
    requests_served: int
    def __init__(self, run: RunState, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 ssl_object: ssl.SSLObject | None = None, ssl_in: ssl.MemoryBIO | None = None,
                 ssl_out: ssl.MemoryBIO | None = None) -> None: ...
    @property
    def is_usable(self) -> bool: ...
    @property
    def uses_kernel_timestamps(self) -> bool: ...
    @property
    def row(self) -> int: ...
    @property
    def sent_ns(self) -> int: ...
    @property
    def last_was_reused(self) -> bool: ...
    @property
    def tokens_in_flight(self) -> int: ...
    def start(
        self, body: bytes | BodyParts, row: int, scheduled_ns: int, connect_ns: int = 0
    ) -> asyncio.Future[int]: ...
    def abort(self, error: int, why: str = "") -> None: ...
    def close(self) -> None: ...

def scan_trace(data: bytes, keys: tuple[bytes, bytes, bytes, bytes], line: Any, stamp: Any, input_lengths: Any,
               output_lengths: Any, ids_end: Any, ids: Any) -> tuple[int, int] | None:
    """A trace's JSONL read into the columns given (int64 but ``stamp``, float64), ``keys`` the field names
    (timestamp, input length, output length, hash ids): (records, hash ids) written, or None where a line
    is not one the scanner takes."""

def insert_literals(runs: Any, first_run: Any, request: Any, token: Any, lit_first: Any, lit_end: Any, width: int,
                    out_runs: Any, out_first: Any) -> int:
    """Literal runs put in prompts in place of separators (trace.py's TokenBlocks.insert), int64 arrays: the new
    runs into ``out_runs``, each prompt's first run into ``out_first``; the runs written."""

def lay_out_blocks(ids: Any, starts: Any, n_used: Any, n_in: Any, block: int, width: int, low: int, span: int,
                   runs: Any, first_run: Any) -> tuple[int, int, int, int]:
    """A trace's token layout (trace.py's TokenBlocks), int64 arrays: each run's first byte and end into
    ``runs``, each request's first run into ``first_run``; (runs, tokens, distinct blocks, blocks used
    more than once)."""
