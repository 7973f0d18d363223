"""One ``--ray`` worker: :func:`fastbench.load.worker.run_worker` hosted in a Ray actor.

The actor is a plain class here (``ray.remote`` is applied by the driver, fastbench.load.raypool, so
that importing this module never imports Ray). Its worker runs on a thread of its own, on uvloop, as
in a ``--workers`` process; the driver reaches it through actor method calls, which Ray runs on the
actor's other threads (the actor is created with ``max_concurrency`` above one):

* ``identity()``: the node it runs on and the fastbench it imported (the driver refuses a mismatch).
* ``clock()``: this node's CLOCK_MONOTONIC, for the driver's offset estimate (fastbench.load.clocks)
  when the actor's UDP clock responder (fastbench.load.udpclock, opened on the node's IP as Ray reports
  it; its address is in ``identity()``) cannot be reached: the same reading, through a Ray call.
* ``start(start_ns, skew_offset_ns)`` and ``stop(reason)``: the messages a ``--workers`` process gets,
  ``start_ns`` on this node's clock (the driver converted its own instant); ``skew_offset_ns`` is what
  the core subtracts from its receive stamps to set them beside the server's send stamps.
* ``poll()``: what the worker said since the last poll (ready, its latest counts, its own error), and
  the request rows it finished since: the driver keeps them, so what a worker finished stands even
  if its node dies later (the role of the shared request table of a local worker).
* ``outcome()``: once ``poll`` says done, the WorkerOutcome with its whole request table.

A test hook: with ``FASTBENCH_TEST_CLOCK_SHIFT_NS=X`` in its node's environment, the actor shows the
driver the clock of a node whose CLOCK_MONOTONIC reads X ns later than this host's: ``clock()``, the
UDP responder's replies, the start instant, the skew offset, the rows' instants and the window's
edges all cross the actor's boundary as such a node's would. tests/load/test_ray.py gives one node of a
local cluster that clock, which the driver must estimate and correct as it would another host's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fastbench._core import now_ns
from fastbench._version import __version__
from fastbench.load.clocks import shift_rows
from fastbench.load.udpclock import ClockResponder
from fastbench.load.worker import WorkerOutcome, WorkerSpec, run_worker
from fastbench.results.records import NCOLS

__all__ = ("CLOCK_SHIFT_ENV", "WorkerActor", "boot_id")

# The test hook (see the module's docstring): this node's clock shown X ns ahead of its own.
CLOCK_SHIFT_ENV = "FASTBENCH_TEST_CLOCK_SHIFT_NS"


def boot_id() -> str:
    """This kernel's boot id: two processes that read the same one share one CLOCK_MONOTONIC (unless a
    time namespace sets them apart, which the driver's offset estimate would show)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


class WorkerActor:
    """A Ray actor hosting one worker (see the module's docstring)."""

    def __init__(self, spec: WorkerSpec) -> None:
        # Ray hands large arrays over read-only, straight from its object store; the core takes
        # writable views of its arrays.
        offsets = spec.arrival_offsets_ns
        self._spec = dataclasses.replace(spec, rows=np.array(spec.rows),
                                         arrival_offsets_ns=np.array(offsets) if offsets is not None else None)
        self._shift_ns = int(os.environ.get(CLOCK_SHIFT_ENV) or 0)
        self._lock = threading.Lock()
        self._ready = False
        self._progress: dict[str, Any] | None = None
        self._chunk_counts: Any = None  # the latest report's chunk histograms, until a poll hands them over
        self._failure: str | None = None
        self._stopping: str | None = None  # why it stopped of its own accord
        self._outcome: WorkerOutcome | None = None
        self._table = np.zeros((len(spec.bodies), NCOLS), dtype=np.int64)
        self._handed = np.zeros(len(spec.bodies), dtype=bool)  # rows already given to the driver
        self._low = 0  # every row below this one was handed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[tuple[str, Any]] | None = None
        self._loop_up = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"fastbench-worker-{spec.index}", daemon=True)
        self._thread.start()
        self._responder: ClockResponder | None = None
        self._responder_failed: str | None = None  # why it could not open its UDP socket

    # -- the worker's own thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency
            asyncio.run(self._serve())
        else:
            uvloop.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()
        self._loop_up.set()
        try:
            outcome = await run_worker(self._spec, self._send, self._inbox, self._table)
        except Exception as exc:  # its own error, for the driver to fail the run with
            with self._lock:
                self._failure = f"{type(exc).__name__}: {exc}"
        else:
            outcome.data.rows = shift_rows(self._table, -self._shift_ns)
            outcome.data.start_ns += self._shift_ns
            outcome.data.end_ns += self._shift_ns
            with self._lock:
                self._outcome = outcome
        finally:
            self._finished.set()

    def _send(self, kind: str, payload: Any) -> None:
        with self._lock:
            if kind == "ready":
                self._ready = True
            elif kind == "progress":
                # one report in a few carries them, and a poll may come after a later one: kept apart
                self._chunk_counts = payload.pop("chunk_counts", None) or self._chunk_counts
                self._progress = payload
            elif kind == "stopping":  # it stopped of its own accord (--max-error-rate): the others stop too
                self._stopping = str(payload)

    def _tell(self, kind: str, payload: Any) -> None:
        self._loop_up.wait()
        assert self._loop is not None and self._inbox is not None
        with contextlib.suppress(RuntimeError):  # its loop has ended: the worker is done already
            self._loop.call_soon_threadsafe(self._inbox.put_nowait, (kind, payload))

    # -- what the driver calls -------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        import ray  # only ever called in a Ray actor

        # Ray's function has no annotations; typed here so that mypy passes with and without Ray installed.
        node_ip: Callable[[], str] = ray.util.get_node_ip_address
        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
                "pid": os.getpid(), "boot_id": boot_id(), "version": __version__,
                "clock_udp": self._clock_udp(node_ip())}

    def _clock_udp(self, node_ip: str) -> list[Any]:
        """Where its UDP clock responder listens, [ip, port], opened on the first call; or [None, why
        it could not open] (the driver then reads the clock through Ray calls)."""
        if self._responder is None and self._responder_failed is None:
            try:
                self._responder = ClockResponder(node_ip, self._shift_ns)
            except OSError as exc:
                self._responder_failed = f"the actor could not open a UDP socket on {node_ip}: {exc}"
        if self._responder is not None:
            return [self._responder.address[0], self._responder.address[1]]
        return [None, self._responder_failed]

    def clock(self) -> int:
        return now_ns() + self._shift_ns

    def start(self, start_ns: int, skew_offset_ns: int = 0) -> None:
        # One call, two messages in order: the offset is set before the window opens.
        self._tell("skew_offset", int(skew_offset_ns) - self._shift_ns)
        self._tell("start", int(start_ns) - self._shift_ns)

    def stop(self, reason: str) -> None:
        self._tell("stop", str(reason))

    def others(self, counts: dict[str, int]) -> None:
        """The other workers' counts, for its --max-error-rate (worker.run_worker)."""
        self._tell("others", dict(counts))

    def poll(self) -> dict[str, Any]:
        done = self._finished.is_set()
        with self._lock:
            failure = self._failure
            if done and failure is None and self._outcome is None:
                failure = "its thread ended without a result"
            progress = self._progress
            if progress is not None and self._chunk_counts is not None:
                progress = {**progress, "chunk_counts": self._chunk_counts}
                self._chunk_counts = None
            report: dict[str, Any] = {"ready": self._ready, "progress": progress, "failed": failure,
                                      "done": done and self._outcome is not None, "stopping": self._stopping}
        # Rows the worker finished since the last poll. The core writes a row at once, when its
        # request ends, holding the GIL: a row read here is whole or still all zeros.
        claimed = int((self._progress or {}).get("claimed", 0)) if not done else len(self._table)
        span = slice(self._low, max(self._low, claimed))
        fresh = np.flatnonzero(self._table[span].any(axis=1) & ~self._handed[span]) + self._low
        self._handed[fresh] = True
        while self._low < len(self._handed) and self._handed[self._low]:
            self._low += 1
        report["rows"] = (fresh.astype(np.int64), shift_rows(self._table[fresh], -self._shift_ns))
        return report

    def outcome(self) -> WorkerOutcome | None:
        self._finished.wait()
        return self._outcome
