"""The synthetic server's clock: when each timed write happens, and how late it was.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

* ``Scheduler``: one heap of (due ns, callback) for every timed write, driven by a Linux timerfd
  (nanosecond precision) armed at the earliest due time. uvloop's own timers have a 1 ms resolution
  and fire up to 1 ms early; the ``call_at`` fallback (non-Linux, or ``--timer call_at``) rounds up
  to the next millisecond so it is never early, only up to ~1 ms late.
* ``Lateness``: fixed-bucket histogram of (write time - due time) over every timed write.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_now = time.monotonic_ns

# --------------------------------------------------------------------------------------------------
# Scheduler


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1

Callback = Callable[[int], None]


class Scheduler:
    """Runs callbacks at absolute CLOCK_MONOTONIC times; ``fn(due_ns)`` is called at or after due_ns."""

    def __init__(self, loop: asyncio.AbstractEventLoop, mode: str) -> None:
        self.loop = loop
        self.heap: list[tuple[int, int, Callback]] = []
        self.seq = 0
        self.armed = 0  # due time the timer is armed for; 0 = not armed
        self.running = False
        self.fd = -1
        self.handle: asyncio.TimerHandle | None = None
        if mode in ("auto", "timerfd") and sys.platform.startswith("linux"):
            try:
                self._open_timerfd()
            except (OSError, AttributeError):
                if mode == "timerfd":
                    raise
        elif mode == "timerfd":
            raise OSError("timerfd needs Linux")
        self.mode = "timerfd" if self.fd >= 0 else "call_at"

    def _open_timerfd(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        create = libc.timerfd_create
        create.argtypes = [ctypes.c_int, ctypes.c_int]
        create.restype = ctypes.c_int
        settime = libc.timerfd_settime
        settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        settime.restype = ctypes.c_int
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._settime = settime
        self._spec = _Itimerspec()
        self._spec_ptr = ctypes.addressof(self._spec)
        self.fd = fd
        self.loop.add_reader(fd, self._on_timerfd)

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if self.handle is not None:
            self.handle.cancel()
        self.heap.clear()

    def push(self, due: int, fn: Callback) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (due, self.seq, fn))
        if not self.running and (self.armed == 0 or due < self.armed):
            self._arm(due)

    def _arm(self, due: int) -> None:
        self.armed = due
        if self.fd >= 0:
            v = self._spec.it_value
            v.tv_sec, v.tv_nsec = divmod(max(due, 1), 1_000_000_000)
            self._settime(self.fd, _TFD_TIMER_ABSTIME, self._spec_ptr, None)
        else:
            if self.handle is not None:
                self.handle.cancel()
            # uvloop timers count whole milliseconds from floor(now_ms): round up so never early.
            now = _now()
            delay_ms = max(0, -((now - now % 1_000_000 - due) // 1_000_000))
            self.handle = self.loop.call_later(delay_ms / 1000.0, self._run)

    def _on_timerfd(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self._run()

    def _run(self) -> None:
        self.armed = 0
        self.handle = None
        heap = self.heap
        pop = heapq.heappop
        self.running = True
        n = 0
        now = _now()
        try:
            while heap:
                due = heap[0][0]
                if due > now:
                    now = _now()
                    if due > now:
                        break
                fn = pop(heap)[2]
                try:
                    fn(due)
                except Exception:  # noqa: BLE001 (one broken request must not stop the clock for the others)
                    traceback.print_exc()
                n += 1
                if n >= 2048:  # let I/O in; the timer fires again at once
                    break
        finally:
            self.running = False
        if heap:
            self._arm(heap[0][0])


# --------------------------------------------------------------------------------------------------
# Self-measurement


class Lateness:
    """Histogram of write lateness: 10 us buckets to 10 ms, then 1 ms buckets to 1 s, then overflow."""

    NB = 1000 + 990 + 1

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.counts = [0] * self.NB
        self.n = 0
        self.sum_ns = 0
        self.max_ns = 0
        self.early = 0
        self.min_ns = 0

    def record(self, late: int) -> None:
        if late < 0:
            self.early += 1
            self.min_ns = min(self.min_ns, late)
            late = 0
        self.n += 1
        self.sum_ns += late
        self.max_ns = max(self.max_ns, late)
        us = late // 1000
        if us < 10_000:
            self.counts[us // 10] += 1
        else:
            self.counts[990 + us // 1000 if us < 1_000_000 else self.NB - 1] += 1

    def _upper_ms(self, i: int) -> float:
        if i < 1000:
            return (i + 1) * 0.01
        if i < self.NB - 1:
            return float(i - 990 + 1)
        return math.inf

    def quantile_ms(self, q: float) -> float:
        """Upper edge of the bucket holding quantile q (an over-estimate by at most one bucket)."""
        if self.n == 0:
            return 0.0
        rank = q * self.n
        acc = 0
        for i, c in enumerate(self.counts):
            acc += c
            if acc >= rank and c:
                return min(self._upper_ms(i), self.max_ns / 1e6)
        return self.max_ns / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.n,
            "mean_ms": (self.sum_ns / self.n / 1e6) if self.n else 0.0,
            "p50_ms": self.quantile_ms(0.5),
            "p90_ms": self.quantile_ms(0.9),
            "p99_ms": self.quantile_ms(0.99),
            "p999_ms": self.quantile_ms(0.999),
            "max_ms": self.max_ns / 1e6,
            "over_1ms": sum(self.counts[100:]),
            "early": self.early,
            "min_early_ms": self.min_ns / 1e6,
        }
