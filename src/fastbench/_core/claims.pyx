# cython: language_level=3
# Claims: which request of the table goes next, behind one interface, in three kinds: the closed
# loop's next row (this table's own, or --workers' counter every worker shares), the open loop's next
# arrival once it is due, and --workers' shared cap's oldest due arrival of the run. RunState makes the
# kind a schedule needs when the schedule starts, so that what it needs exists by then. Included by
# engine.pyx.


cdef class Claims:
    """The interface: ``claim(now)`` for Python's sends, ``chain`` for a connection whose request
    ended and that sends the next itself, ``head`` the next row not yet claimed."""

    cpdef Py_ssize_t claim(self, int64_t now=0) except -2:
        """The next row to send by ``now``, claimed, or -1 when none is (left, or due)."""
        return -1

    cdef Py_ssize_t chain(self, int64_t ended_ns, int64_t *due) except -2:
        """A connection's request ended at ``ended_ns``: the row it sends next, with the time that
        row was due in ``due``, or -1."""
        return -1

    cdef Py_ssize_t head(self) noexcept:
        return self.next_row

    cdef inline void _publish(self) noexcept:
        # A plain store: a process that is killed leaves every store it made in the shared pages, and
        # each claim's is made before its request is sent (a call the compiler cannot move it past).
        if self.published != NULL:
            self.published[0] = self.next_row

    @property
    def arrival_head(self):
        """The next row not yet claimed: the run's, with a shared cap; this process's otherwise."""
        return self.head()


cdef _init_claims(Claims claims, Slots slots, Py_ssize_t n_rows, Py_ssize_t first, object published):
    """What every kind shares: the slots, the table's size, where its claims begin (a run's rows are
    claimed once, in order, whichever schedule claims them) and --workers' published count."""
    cdef int64_t[::1] view
    claims.slots = slots
    claims.n_rows = n_rows
    claims.next_row = first
    if published is not None:
        view = published
        claims.published_owner = view
        claims.published = &view[0]
        claims.published[0] = first


cdef class RowClaims(Claims):
    """Closed loop: the next row of the table; with --workers on one machine, from the counter every
    worker shares (an atomic add), each row marked with its claimer before it is sent."""

    cpdef Py_ssize_t claim(self, int64_t now=0) except -2:
        cdef int64_t row
        if self.claim_next != NULL:
            row = fb_claim_next(self.claim_next, self.n_rows)
            if row < 0:
                self.next_row = self.n_rows
                return -1
            fb_claim_mark(self.claimers, row, self.claimer)
            self.next_row = row + 1  # here: one past the last row this worker took
            return row
        if self.next_row >= self.n_rows:
            return -1
        self.next_row += 1
        self._publish()
        return self.next_row - 1

    cdef Py_ssize_t chain(self, int64_t ended_ns, int64_t *due) except -2:
        # The slot freed at this response's end; the next request is due from its end stamp (before the
        # time cap: past it, Python's loop sees the cap and stops the run, its timer or not).
        if fb_now_ns() >= self.slots.send_until_ns:
            return -1
        due[0] = ended_ns
        return self.claim(0)


cdef RowClaims _row_claims(Slots slots, Py_ssize_t n_rows, Py_ssize_t first, object published, object next_row,
                           object claimers, int claimer):
    cdef RowClaims claims = RowClaims.__new__(RowClaims)
    cdef int64_t[::1] counter
    cdef int32_t[::1] marks
    _init_claims(claims, slots, n_rows, first, published)
    if next_row is not None:
        counter = next_row
        marks = claimers
        if counter.shape[0] < 1 or marks.shape[0] < n_rows:
            raise ValueError(f"shared claims need an int64 counter and {n_rows} int32 claimer marks")
        if claimer < 1:
            raise ValueError("a claimer's mark is its index + 1 (0 means unclaimed)")
        claims.buffers = (counter, marks)
        claims.claim_next = &counter[0]
        claims.claimers = &marks[0] if marks.shape[0] else NULL
        claims.claimer = claimer
    return claims


cdef class ArrivalClaims(Claims):
    """Open loop: row ``row`` is due at ``base_ns + offsets[row]``; claimed only once it is due, and
    never from the time cap's instant on."""

    cdef inline int64_t due(self, Py_ssize_t row) noexcept:
        return self.base_ns + self.offsets[row]

    cpdef Py_ssize_t claim(self, int64_t now=0) except -2:
        cdef int64_t due
        if self.next_row >= self.n_rows:
            return -1
        due = self.base_ns + self.offsets[self.next_row]
        if due > now or due >= self.slots.send_until_ns:
            return -1
        self.next_row += 1
        self._publish()
        return self.next_row - 1

    cdef Py_ssize_t chain(self, int64_t ended_ns, int64_t *due) except -2:
        # An arrival that waited for a slot takes this one now; due at its arrival (a shared cap: the
        # run's oldest due one, whichever worker's timer it is on).
        cdef Py_ssize_t row = self.claim(fb_now_ns())
        if row >= 0:
            due[0] = self.base_ns + self.offsets[row]
        return row


cdef _init_arrivals(ArrivalClaims claims, Slots slots, Py_ssize_t n_rows, Py_ssize_t first, object published,
                    object offsets_ns, int64_t base_ns):
    _init_claims(claims, slots, n_rows, first, published)
    if len(offsets_ns) != n_rows:
        raise ValueError(f"{len(offsets_ns)} arrival times for {n_rows} requests")
    claims.offsets = offsets_ns
    claims.base_ns = base_ns


cdef class SharedArrivals(ArrivalClaims):
    """--workers on one machine, open loop under a --concurrency cap: every worker holds every arrival;
    ``[0]`` of the shared header is the run's next unsent arrival, ``[1]`` its requests in flight. A
    slot is taken only below the limit (fb_slot_take), an arrival claimed only when due
    (fb_arrival_claim) and marked with its claimer before it is sent."""

    cdef Py_ssize_t head(self) noexcept:
        return <Py_ssize_t>fb_arrival_head(self.shared_next)

    cpdef Py_ssize_t claim(self, int64_t now=0) except -2:
        """The oldest unsent arrival of the run if it is due by ``now``, claimed and marked (the caller
        holds its slot), or -1."""
        cdef int64_t row, due
        while True:
            row = fb_arrival_head(self.shared_next)
            if row >= self.n_rows:
                return -1
            due = self.base_ns + self.offsets[row]
            if due > now or due >= self.slots.send_until_ns:
                return -1
            if self.take(row):
                return row
            # else another worker took it first: the next one, if due

    cdef bint take(self, int64_t row) noexcept:
        """Arrival ``row`` claimed if it is still the run's next unsent one, and marked as this
        worker's; False when another worker took it first."""
        if not fb_arrival_claim(self.shared_next, row):
            return False
        fb_claim_mark(self.claimers, row, self.claimer)
        self.next_row = row + 1  # here: one past the last arrival this worker claimed
        return True

    cdef inline bint take_slot(self) noexcept:
        return fb_slot_take(self.shared_in_flight, self.slots.limit)

    cdef inline void give_slot(self) noexcept:
        fb_slot_give(self.shared_in_flight)


cdef SharedArrivals _shared_arrivals(Slots slots, Py_ssize_t n_rows, object offsets_ns, int64_t base_ns,
                                     object header, object claimers, int claimer, int workers):
    cdef SharedArrivals claims = SharedArrivals.__new__(SharedArrivals)
    cdef int64_t[::1] counters = header
    cdef int32_t[::1] marks = claimers
    if counters.shape[0] < 2 or marks.shape[0] < n_rows or n_rows < 1:
        raise ValueError(f"shared arrivals need two int64 counters and {n_rows} int32 claimer marks")
    if not 1 <= claimer <= workers:
        raise ValueError(f"a claimer's mark is its index + 1, from 1 to {workers} (0 means unclaimed)")
    _init_arrivals(claims, slots, n_rows, 0, None, offsets_ns, base_ns)
    claims.buffers = (counters, marks)
    claims.shared_next = &counters[0]
    claims.shared_in_flight = &counters[1]
    claims.claimers = &marks[0]
    claims.claimer = claimer
    return claims
