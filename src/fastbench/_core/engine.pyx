# cython: language_level=3
"""fastbench's compiled client core: one extension, one C translation unit."""
import os
import ssl

from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memcmp
from libc.errno cimport EAGAIN
from libc.stdint cimport int64_t, int32_t, uint64_t

BUILD_FLAVOUR = FB_BUILD_FLAVOUR.decode()


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
        self.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError("timerfd_create failed")

    def __dealloc__(self):
        if self.fd >= 0:
            close(self.fd)

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


include "hist.pyx"
include "conn.pyx"
