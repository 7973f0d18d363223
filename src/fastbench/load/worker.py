"""One ``--workers`` process: its share of the schedule, run by an ordinary LoadGenerator on its own
event loop and native core, told when to start and stop by the parent (:mod:`fastbench.load.workers`).

The worker itself (:func:`run_worker`) takes plain data (a :class:`WorkerSpec`) and returns plain data
(a :class:`WorkerOutcome`); it talks to its parent only through a ``send`` callable and an inbox queue,
so that any transport can host it. The one here (:func:`main`, ``python -m fastbench.load.worker``)
is a socket inherited from the parent, carrying length-prefixed pickles, and a request table in
memory the parent shares (a memfd): what a worker finished stands even if it dies.

Messages, worker to parent: ``("alive", None)`` every ``report_interval_s`` from the spec on (a
parent that hears nothing for a while judges the worker stalled); ``("ready", {})`` after its
warm-ups; ``("progress", counts)`` every ``report_interval_s`` of the window (every CHUNK_COUNTS_INTERVAL_NS with
its running chunk histograms, ``running_chunk_counts``); ``("stopping", reason)``
when it stops of its own accord (--max-error-rate), for the parent to stop the others at once;
``("finishing", None)`` when its window has ended and it builds its result; ``("done",
WorkerOutcome)``; ``("failed", "one line")``. Parent to worker: ``("start", start_ns)``, the window's
common start on CLOCK_MONOTONIC (one clock for every process of a host); ``("stop", reason)``;
``("others", {"completed": n, "failed": n})``, the other workers' counts as last reported, which its
--max-error-rate rule adds to its own; ``("skew_offset", ns)`` before ``start`` (--ray): what the core
subtracts from its receive stamps for skew, its clock less the server's (0 on the server's host).

The shared memory, in one of two layouts. Requests dealt to the worker (open loop, or a closed loop
dealt up front; see :mod:`fastbench.load.workers`): the worker's own, a header of HEADER_BYTES (its
first int64 the rows this worker has claimed so far, written by the core on every claim) and then its
request table.
Requests claimed (``WorkerSpec.shared_claims``: a closed loop, or an open loop under a --concurrency cap):
one memory for the whole run, shared by every worker: a header of HEADER_BYTES (its first int64 the next
row to claim, taken by the cores with an atomic add, or in the open loop the next unsent arrival, taken
with a compare-and-swap when due, its second then the run's requests in flight), one int32 per row (the
worker that claimed it, its index + 1; padded to 64 bytes), then the whole run's request table, each row
written by the worker that claimed it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import mmap
import os
import pickle
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from fastbench._core import BodyParts, now_ns
from fastbench.load.drive import drive
from fastbench.load.driver import LoadGenerator, SharedClaims
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import NCOLS, RunData, new_histogram

__all__ = ("HEADER_BYTES", "WorkerOutcome", "WorkerSpec", "claim_layout", "claim_views", "histogram_counts",
           "read_frame", "run_worker", "running_chunk_counts", "shared_size", "shared_views", "write_frame")

# How often a worker tells its parent its counts (and, outside its window, that it is alive); the
# parent sends every worker the others' counts as often, for --max-error-rate.
REPORT_INTERVAL_S = 0.05
# How often a progress report also carries the worker's running chunk histograms (a parent's live view
# and exporter look four times a second): their nonzero counts, a few hundred to a few thousand.
CHUNK_COUNTS_INTERVAL_NS = 250_000_000
# The shared memory's header, before the request table: one cache line, its first int64 the count of
# rows claimed (RunState's published), or with shared claims the next row to claim (RunState.claim_rows:
# a line of its own, which every worker's atomic add takes in turn), or under a shared open-loop cap the
# next unsent arrival and, second, the run's requests in flight (RunState.share_arrivals).
HEADER_BYTES = 64
# The start instant is awaited by sleeping to this much before it, then reading the clock until it
# comes: an event loop's timers are only as fine as a millisecond.
START_SPIN_NS = 2_000_000


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """A worker's share of one run: plain, picklable data."""

    index: int
    target: Target
    api_key: str | None
    headers: dict[str, str]
    endpoint: str  # the API spoken (fastbench.load.protocols)
    rows: np.ndarray  # int64: the workload index of each of this worker's requests, in its order
    bodies: list[bytes | BodyParts]  # a trace's BodyParts pickle their shared buffer once
    warmup_bodies: list[bytes | BodyParts]
    concurrency: int  # this worker's slots
    request_rate: float | None  # this worker's share of the arrivals per second (sizes its pool)
    arrival_offsets_ns: np.ndarray | None  # its arrivals' offsets from the common start; None: closed loop
    max_seconds: float | None
    request_timeout_s: float | None
    verify_tls: bool
    coalesce_s: float | Literal["auto"]
    expected_output_tokens: list[int] | None
    save_outputs: bool
    keep_chunk_stamps: bool
    report_interval_s: float = REPORT_INTERVAL_S
    max_error_rate: float | None = None  # the rule applied here, to its own counts and the others' as last told
    server_gone_s: float = 0.0  # the server-went-away rule (load.gone), applied here to the table it sees
    kernel_timestamps: bool = True
    whole_answers: bool = False  # one whole JSON answer per request (LoadPlan.whole_answers)
    # Closed loop on one machine: ``rows``, ``bodies`` and ``expected_output_tokens`` are the whole run's,
    # and each request is claimed from the table the parent shares with every worker (RunState.claim_rows).
    shared_claims: bool = False
    # Open loop on one machine under a --concurrency cap: the run's worker count; every worker holds every
    # arrival and the cap is the run's, shared (RunState.share_arrivals; ``concurrency`` is then the whole
    # cap). 0: the arrivals are dealt, and the cap split.
    shared_arrivals: int = 0

    def load_plan(self, **callbacks: Any) -> LoadPlan:
        """The plan this share runs: every field the spec and LoadPlan both name, reporting as often as
        ``report_interval_s``, with the worker's ``callbacks`` (on_progress, start_at)."""
        given = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                 if field.name in _PLAN_FIELDS}
        return LoadPlan(**given, progress_interval_s=self.report_interval_s, **callbacks)


_PLAN_FIELDS = frozenset(field.name for field in dataclasses.fields(LoadPlan))


@dataclasses.dataclass
class WorkerOutcome:
    """What a worker measured: its RunData with the histograms as their HDR counts arrays (the
    library's histogram objects do not pickle), and its request table left out when it was written
    to memory the parent shares (``data.rows`` is then empty)."""

    index: int
    data: RunData
    pid: int
    started_late_ns: int  # how long after the common start instant the worker's window began


def histogram_counts(hist: Any) -> np.ndarray:
    """An HDR histogram's counts, copied (the layout is the one of records.new_histogram)."""
    raw = np.ctypeslib.as_array(hist.counts)
    return np.array(raw[: int(hist.counts_len)], dtype=np.int64)


def running_chunk_counts(generator: LoadGenerator, buffer: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The generator's running ITL and skew histograms so far, as (indexes, counts) of their nonzero
    counts (cumulative: the latest report is the whole), copied without a sync (Recorder.copy_counts)."""
    out = {}
    for name, key in (("itl", "itl_chunk"), ("skew", "skew")):
        generator.recorders[key].copy_counts(buffer)
        at = np.flatnonzero(buffer)
        out[name] = (at.astype(np.int32), buffer[at])
    return out


async def run_worker(spec: WorkerSpec, send: Callable[[str, Any], None], inbox: asyncio.Queue[tuple[str, Any]],
                     rows: np.ndarray | None = None, claims: np.ndarray | None = None,
                     shared_claims: tuple[np.ndarray, np.ndarray] | None = None) -> WorkerOutcome:
    """Run one worker's share: warm up, say "ready", wait for "start", run, return what it measured.

    :param send: delivers one message to the parent (``kind``, ``payload``).
    :param inbox: the parent's messages ("start", "stop", "others"), put there by the transport.
    :param rows: the request table to fill (shared with the parent); by default the worker's own,
        returned in the outcome.
    :param claims: an int64 array (shared with the parent) whose first element the core keeps at
        the count of rows claimed, so that a parent knows what a worker that died had taken.
    :param shared_claims: with ``spec.shared_claims``, the run's claims header (int64) and claimer marks
        (int32, one per row), shared by every worker (RunState.claim_rows, or share_arrivals with
        ``spec.shared_arrivals``); ``rows`` is then the whole run's table, shared too.
    """
    loop = asyncio.get_running_loop()
    started: asyncio.Future[int | None] = loop.create_future()
    baseline: dict[str, int] = {}
    lateness: list[int] = []
    generator: LoadGenerator | None = None
    stop_reason: list[str] = []

    chunk_buffer = np.zeros(int(new_histogram().counts_len), dtype=np.int64)
    chunk_sent_ns = [0]

    def report(progress: dict[str, Any]) -> None:
        assert generator is not None
        c = generator.state.counters
        counts: dict[str, Any] = {
            "completed": c["completed"] - baseline.get("completed", 0),
            "failed": c["failed"] - baseline.get("failed", 0),
            "in_flight": progress["in_flight"],
            "output_tokens": progress["output_tokens"] - baseline.get("output_tokens", 0),
            "claimed": int(generator.state.next_row),  # rows claimed so far, in this worker's order
        }
        now = now_ns()
        if now - chunk_sent_ns[0] >= CHUNK_COUNTS_INTERVAL_NS:
            chunk_sent_ns[0] = now
            counts["chunk_counts"] = running_chunk_counts(generator, chunk_buffer)
        send("progress", counts)

    async def wait_start() -> int:
        send("ready", {})
        start_ns = await started
        if start_ns is None:  # stopped before the window opened
            return now_ns()
        assert generator is not None
        baseline.update(generator.state.counters)
        ahead_s = (start_ns - now_ns() - START_SPIN_NS) / 1e9
        if ahead_s > 0:
            await asyncio.sleep(ahead_s)
        while now_ns() < start_ns:
            pass
        lateness.append(now_ns() - start_ns)
        return start_ns

    async def listen() -> None:
        while True:
            kind, payload = await inbox.get()
            if kind == "start" and not started.done():
                started.set_result(int(payload))
            elif kind == "stop":
                stop_reason.append(str(payload))
                if not started.done():
                    started.set_result(None)
                if generator is not None:
                    generator.stop(str(payload))
            elif kind == "skew_offset" and generator is not None:
                generator.state.skew_offset_ns = int(payload)
            elif kind == "others" and generator is not None:
                generator.state.others_completed = int(payload["completed"])
                generator.state.others_failed = int(payload["failed"])
                generator.state.check_error_rate()

    async def beat() -> None:
        while True:
            send("alive", None)
            await asyncio.sleep(spec.report_interval_s)

    plan = spec.load_plan(on_progress=report, start_at=wait_start)
    shared = (None if shared_claims is None
              else SharedClaims(shared_claims[0], shared_claims[1], spec.index + 1, spec.shared_arrivals))
    generator = LoadGenerator(spec.target, plan, spec.api_key, rows=rows, published=claims, shared=shared)
    core_stop = generator.state.on_stop

    def stopping(reason: str) -> None:  # the core stops of its own accord: the parent stops the others
        send("stopping", reason)
        core_stop(reason)

    generator.state.on_stop = stopping
    if stop_reason:  # a stop that came while the generator was being built
        generator.stop(stop_reason[0])
    data = await drive(generator, alongside=(listen(), beat()))
    send("finishing", None)  # what follows is not a loop that beats (outputs decoded, the pickle)
    if rows is not None:
        data.rows = np.zeros((0, NCOLS), dtype=np.int64)  # the parent reads the shared table
    data.histograms = {name: histogram_counts(h) for name, h in data.histograms.items()}
    return WorkerOutcome(index=spec.index, data=data, pid=os.getpid(),
                         started_late_ns=lateness[0] if lateness else 0)


# -- the transport: a socket inherited from the parent, length-prefixed pickles -------------------------

_LENGTH = struct.Struct("!Q")


def shared_views(shared: mmap.mmap, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The claims header (int64) and the request table in a worker's shared memory."""
    claims = np.frombuffer(shared, dtype=np.int64, count=HEADER_BYTES // 8)
    table = np.frombuffer(shared, dtype=np.int64, count=n_rows * NCOLS, offset=HEADER_BYTES).reshape(-1, NCOLS)
    return claims, table


def shared_size(n_rows: int) -> int:
    return HEADER_BYTES + n_rows * NCOLS * 8


def claim_layout(n_rows: int) -> tuple[int, int, int]:
    """The run's claimed table in shared memory: its size, and where the claimer marks and the request
    table begin (each on a cache line of its own: a request row is two lines, written by one worker)."""
    marks = HEADER_BYTES
    table = marks + -(-n_rows * 4 // 64) * 64
    return table + n_rows * NCOLS * 8, marks, table


def claim_views(shared: mmap.mmap, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The claim counter's header (int64), the claimer marks (int32) and the request table of a run's
    claimed table (claim_layout)."""
    _, marks, table = claim_layout(n_rows)
    header = np.frombuffer(shared, dtype=np.int64, count=HEADER_BYTES // 8)
    claimers = np.frombuffer(shared, dtype=np.int32, count=n_rows, offset=marks)
    rows = np.frombuffer(shared, dtype=np.int64, count=n_rows * NCOLS, offset=table).reshape(-1, NCOLS)
    return header, claimers, rows


def write_frame(kind: str, payload: Any) -> bytes:
    """One message as it travels: its length, then the pickle of ``(kind, payload)``."""
    body = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[str, Any] | None:
    """The next message, or None at the end of the stream (the other side is gone)."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        body = await reader.readexactly(_LENGTH.unpack(head)[0])
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    kind, payload = pickle.loads(body)
    return str(kind), payload


async def _serve(control: socket.socket, rows_fd: int) -> int:
    reader, writer = await asyncio.open_connection(sock=control)
    first = await read_frame(reader)
    if first is None or first[0] != "spec":
        return 2
    spec: WorkerSpec = first[1]
    n = len(spec.bodies)
    claims: np.ndarray | None = None
    rows: np.ndarray | None = None
    shared_claims: tuple[np.ndarray, np.ndarray] | None = None
    if rows_fd >= 0 and spec.shared_claims:
        header, claimers, rows = claim_views(mmap.mmap(rows_fd, claim_layout(n)[0]), n)
        shared_claims = (header, claimers)
    elif rows_fd >= 0:
        claims, rows = shared_views(mmap.mmap(rows_fd, shared_size(n)), n)
    inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def send(kind: str, payload: Any) -> None:
        writer.write(write_frame(kind, payload))

    async def pump() -> None:
        while True:
            message = await read_frame(reader)
            if message is None:  # the parent is gone: stop, nobody will read the result
                inbox.put_nowait(("stop", "the parent process went away"))
                return
            inbox.put_nowait(message)

    pumping = asyncio.get_running_loop().create_task(pump())
    try:
        outcome = await run_worker(spec, send, inbox, rows, claims, shared_claims)
    except Exception as exc:  # its own error, for the parent to fail the run with
        send("failed", f"{type(exc).__name__}: {exc}")
        await writer.drain()
        return 1
    finally:
        pumping.cancel()
    send("done", outcome)
    await writer.drain()
    writer.close()
    return 0  # the shared table goes with the process (the core still holds views of it)


def main(argv: list[str] | None = None) -> int:
    """``python -m fastbench.load.worker CONTROL_FD ROWS_FD``: the fds are inherited from the parent."""
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C at a terminal reaches the whole process group: the parent alone decides, and tells
    # every worker to stop, so that the merged partial result is written (SIGTERM stays default).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control = socket.socket(fileno=int(args[0]))
    rows_fd = int(args[1])
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(_serve(control, rows_fd))
    return uvloop.run(_serve(control, rows_fd))


if __name__ == "__main__":
    # Run as the module's real name, so that what it pickles (WorkerOutcome) names a class the
    # parent can find, not one of ``__main__``.
    from fastbench.load.worker import main as _main

    sys.exit(_main())
