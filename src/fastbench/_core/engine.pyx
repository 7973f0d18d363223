# cython: language_level=3
"""fastbench's compiled client core: one extension, one C translation unit."""
import os
import ssl

from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memcmp
from libc.stdio cimport snprintf
from libc.errno cimport EAGAIN
from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t, uint64_t, INT64_MAX
from libc.math cimport sqrt
from posix.uio cimport iovec
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE

BUILD_FLAVOUR = FB_BUILD_FLAVOUR.decode()
cdef fb_row_t _row_fields  # read for its field names only
# The request table's columns as the core writes them: fb_row_t's fields, in order (records.COLUMNS).
COLUMN_ORDER = tuple(_row_fields)


def now_ns():
    """CLOCK_MONOTONIC in ns, the clock of every stamp the core takes."""
    return fb_now_ns()


cdef class ArrivalTimer:
    """A CLOCK_MONOTONIC timerfd with nanosecond deadlines, for open-loop arrivals.

    uvloop's timers have millisecond resolution; a request due at t should leave at t, not up
    to a millisecond later. The event loop watches ``fileno()``; ``arm(t_ns)`` sets the
    absolute deadline and ``clear()`` consumes an expiry.
    """

    cdef int fd

    def __cinit__(self):
        self.fd = _counted_fd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
        if self.fd < 0:
            raise OSError("timerfd_create failed")

    def __dealloc__(self):
        if self.fd >= 0:
            _close_counted_fd(self.fd)

    def fileno(self):
        return self.fd

    def arm(self, int64_t deadline_ns):
        cdef itimerspec spec
        if deadline_ns <= 0:
            deadline_ns = 1  # 0 would disarm the timer; 1 ns is long past: fires at once
        spec.it_interval.tv_sec = 0
        spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = deadline_ns // 1000000000
        spec.it_value.tv_nsec = deadline_ns % 1000000000
        if timerfd_settime(self.fd, TFD_TIMER_ABSTIME, &spec, NULL) != 0:
            raise OSError("timerfd_settime failed")

    def clear(self):
        """Consume the expiries so far; returns how many there were (0 if none)."""
        cdef uint64_t expirations = 0
        if read(self.fd, &expirations, sizeof(expirations)) != sizeof(expirations):
            return 0
        return expirations


# One translation unit, in files by job (the compiler sees, and inlines across, all of them):
include "debug.pyx"   # the debug build's checks and counters (nothing in a release build)
include "hist.pyx"    # Recorder: values into an HDR histogram's layout
include "streamapi.pyx"  # StreamApi: a typed-event API's tables for the scanner
include "events.pyx"  # the per-event callbacks of the C readers
include "whole.pyx"   # whole JSON answers (embeddings, pooling, score, rerank): kept, scanned once
include "coalesce.pyx"  # Tick: coalesced reads, and the tick chosen from the chunk gaps
include "parts.pyx"   # BodyParts: a body sent from parts of one shared buffer
include "ready.pyx"   # ReadySet: the epoll sets drained per wake-up
include "claims.pyx"  # Claims: which request goes next (closed loop, open loop, shared cap)
include "dispatch.pyx"  # Pool and Dispatcher: the open loop's sends from inside the core
include "run.pyx"     # RunState: what a run's connections share, composed of the parts above
include "conn.pyx"    # StreamConnection: one connection's requests
include "tracescan.pyx"  # a trace file read into columns (a dataset's bulk read, once per run)
