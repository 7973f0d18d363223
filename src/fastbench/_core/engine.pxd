# cython: language_level=3
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t
from posix.uio cimport iovec
from .csrc cimport *


# The core's declarations, one file per part of the core, each beside the .pyx it declares; every cdef
# field is declared and commented there. In this order, each part names only the parts above it and
# the three classes declared ahead of them; it keeps the order the declarations had in one file (the
# generated C differs only in where two structs are declared). RunState is composed of parts with one
# job each (run.pyx, ready.pyx, coalesce.pyx, claims.pyx, dispatch.pyx). A part holds only the parts
# it needs, never the RunState: no reference cycles.

include "rows.pxd"       # the request table's row and codes; a request's events and state
include "hist.pxd"       # Recorder

cdef class StreamConnection
cdef class Dispatcher
cdef class Slots

include "ready.pxd"      # ReadySet
include "coalesce.pxd"   # Tick
include "claims.pxd"     # Claims, RowClaims, ArrivalClaims, SharedArrivals
include "dispatch.pxd"   # Pool, Dispatcher, SharedDispatcher
include "streamapi.pxd"  # StreamApi
include "run.pxd"        # Slots, RunState
include "parts.pxd"      # TokenRuns, BodyParts
include "conn.pxd"       # fb_conn_t, StreamConnection
