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


include "hist.pyx"
include "conn.pyx"
