# Claims: which request goes next, for each kind of schedule (claims.pyx). Included by engine.pxd.


cdef class Claims:
    # Which request goes next: the interface of the three kinds (RowClaims, ArrivalClaims,
    # SharedArrivals), each made for one schedule by RunState.
    cdef Slots slots
    cdef readonly Py_ssize_t n_rows
    cdef readonly Py_ssize_t next_row  # one past the last row this process claimed
    cdef int64_t *published            # --workers: next_row is written here on every claim; NULL: off
    cdef object published_owner        # the buffer it points into (kept alive with it)
    cpdef Py_ssize_t claim(self, int64_t now=*) except -2
    cdef Py_ssize_t chain(self, int64_t ended_ns, int64_t *due) except -2
    cdef Py_ssize_t head(self) noexcept
    cdef void _publish(self) noexcept


cdef class RowClaims(Claims):
    cdef int64_t *claim_next           # --workers, closed loop on one machine: the counter every worker
                                       # claims rows from, in memory they share; NULL: this table's own
    cdef int32_t *claimers             # with it: per row, the worker that claimed it (its index + 1)
    cdef int32_t claimer               # this worker's mark there
    cdef object buffers                # the buffers those point into (kept alive with them)


cdef class ArrivalClaims(Claims):
    cdef int64_t[::1] offsets          # per row, when it is due, from base_ns
    cdef int64_t base_ns               # the window's start (CLOCK_MONOTONIC ns)
    cdef int64_t due(self, Py_ssize_t row) noexcept


cdef class SharedArrivals(ArrivalClaims):
    # --workers on one machine, open loop under a --concurrency cap: the next unsent arrival and the
    # run's requests in flight, in memory every worker shares; each arrival's sender marked.
    cdef int64_t *shared_next
    cdef int64_t *shared_in_flight
    cdef int32_t *claimers
    cdef int32_t claimer
    cdef object buffers
    cdef bint take(self, int64_t row) noexcept
    cdef bint take_slot(self) noexcept
    cdef void give_slot(self) noexcept
