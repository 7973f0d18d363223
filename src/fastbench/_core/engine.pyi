"""Stubs for fastbench's compiled client core (engine.pyx); private API, may change."""

import asyncio
import socket
import ssl
from typing import Any

BUILD_FLAVOUR: str
COLUMN_ORDER: tuple[str, ...]

def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of every stamp the core takes."""

class ArrivalTimer:
    """A CLOCK_MONOTONIC timerfd with nanosecond deadlines, for open-loop arrivals."""

    def fileno(self) -> int: ...
    def arm(self, deadline_ns: int) -> None: ...
    def clear(self) -> None: ...

class Recorder:
    """Counts values (ns) in C with the bucket layout of an hdrh HdrHistogram; sync() copies them in."""

    def __init__(self, histogram: Any) -> None: ...
    def record_value(self, value: int, count: int = 1) -> None: ...
    def sync(self) -> Any: ...
    @property
    def total_count(self) -> int: ...
    @property
    def clamped_count(self) -> int: ...
    @property
    def negative_count(self) -> int: ...

class RunState:
    """Shared by all connections of one run: the request table, chunk histograms, counters."""

    itl_chunk: Recorder
    itl_token: Recorder
    skew: Recorder
    error_messages: dict[int, str]
    outputs: dict[int, bytes]
    kernel_timestamps: bool
    save_outputs: bool
    refill: bool
    stopping: bool
    max_error_rate: float
    on_stop: Any
    next_row: int
    n_rows: int
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
                 max_event_bytes: int = ...) -> None: ...
    def set_requests(self, head: bytes, bodies: list[bytes]) -> None: ...
    def request_bytes(self, row: int) -> bytes: ...
    def request_for(self, body: bytes) -> bytes: ...
    def _claim_row(self) -> int: ...
    def check_error_rate(self) -> None: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...
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
    def start(self, request: bytes, row: int, scheduled_ns: int, connect_ns: int = 0) -> asyncio.Future[int]: ...
    def abort(self, error: int, why: str = "") -> None: ...
    def close(self) -> None: ...
