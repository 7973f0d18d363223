# cython: language_level=3
# RunState: what the connections of one run share: the request table and histograms, the epoll sets
# drained once per wake-up of the event loop, the request bodies and the claims on them. Included by
# engine.pyx. One module of ~800 lines because RunState is one cdef class, whose methods Cython keeps in
# one file; what stands apart from its state lives apart (coalesce.pyx chooses the tick, events.pyx
# takes each event, hist.pyx records).


cdef class RunState:
    """Shared by all connections of one run: the request table, chunk histograms, counters."""

    def __cinit__(self, object rows, Recorder itl_chunk, Recorder itl_token, Recorder skew,
                  size_t max_event_bytes=1024 * 1024):
        # First: __dealloc__ runs even when this fails, and must not close fds it never opened.
        self.epfd = self.ends_epfd = self.tick_fd = self.arrival_fd = -1
        self.lead_ns = self.lead_min_ns = self.lead_max_ns = 40_000  # fixed until given bounds
        self.read_buffer = <char *>_counted_malloc(READ_BUFFER_BYTES)
        if self.read_buffer == NULL:
            raise MemoryError()
        if FB_DEBUG:
            _debug.runs_made += 1  # freed: __dealloc__ finds the read buffer
        self.rows = rows
        if self.rows.shape[1] * sizeof(int64_t) != sizeof(fb_row_t):  # rows are written as fb_row_t
            raise ValueError(f"a request table of {self.rows.shape[1]} columns, not {len(COLUMN_ORDER)}")
        self.itl_chunk = itl_chunk
        self.itl_token = itl_token
        self.skew = skew
        self.error_messages = {}
        self.outputs = {}
        self.keep_chunk_stamps = False
        self.chunk_stamps = {}
        self.save_outputs = False
        self.keep_answers = False
        self.answers = {}
        self.max_event_bytes = max_event_bytes
        self.kernel_timestamps = True
        self.refill = False
        self.chain_due = False
        self.stopping = False
        self.dispatching = False
        self.pool = []
        self.limit = INT64_MAX
        self.send_until_ns = INT64_MAX
        self.pool_low = 0
        self.next_due_ns = INT64_MAX
        self.decide_due_ns = INT64_MAX  # no automatic coalescing until coalesce_auto()
        self.on_wake = self.on_stale = None
        self.max_error_rate = -1.0
        self.conns = set()
        self.epfd = _counted_fd(epoll_create1(EPOLL_CLOEXEC))
        self.ends_epfd = _counted_fd(epoll_create1(EPOLL_CLOEXEC))
        if self.epfd < 0 or self.ends_epfd < 0:
            raise OSError("epoll_create1 failed")
        self.watching_ends = False
        self.has_expected = False
        self.tick_fd = -1
        self.ready = <epoll_event *>_counted_malloc(READY_EVENTS * sizeof(epoll_event))
        if self.ready == NULL:
            raise MemoryError()
        self.on_stop = None
        self.bodies = []
        self.head = b""

    def __dealloc__(self):
        if FB_DEBUG and self.read_buffer != NULL:
            _debug.runs_freed += 1
        _counted_free(self.read_buffer)
        _counted_free(self.ready)
        if self.epfd >= 0:
            _close_counted_fd(self.epfd)
        if self.ends_epfd >= 0:
            _close_counted_fd(self.ends_epfd)
        if self.tick_fd >= 0:
            _close_counted_fd(self.tick_fd)
        if self.arrival_fd >= 0:
            _close_counted_fd(self.arrival_fd)

    def fileno(self):
        """The inner epoll set: the event loop watches this one fd for all connections."""
        return self.epfd

    def drain(self):
        """Read every connection that is ready, in C, for one wake-up of the event loop.

        One Python-level call per wake-up instead of one per ready socket; each read still gets
        its own kernel receive stamp.
        """
        self._wake()
        self._drain_set(self.epfd)

    def coalesce(self, int64_t interval_ns):
        """Coalesced reads: nothing watches the connections themselves. Returns the one fd the
        event loop watches instead, calling drain_coalesced() when it is readable: the "ends set"
        of streams that may end with their next chunk (see watch_ends), which also holds a
        timerfd, the tick. Every wake-up drains every ready connection and moves the tick to
        ``interval_ns`` from then: the sockets are read at least every interval, and a wake-up
        for a stream's end serves all the others too, so it replaces a tick instead of adding
        to one (a wake-up costs ~30-35 us of CPU on the 2-vCPU VM of bench/RESULTS.md;
        bench/cpu_floor.py measures it). One fd, so a tick and an end due together are one
        wake-up, not two callbacks."""
        cdef epoll_event ev
        if interval_ns <= 0:
            raise ValueError("interval must be positive")
        if self.tick_fd < 0:
            self.tick_fd = _counted_fd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
            if self.tick_fd < 0:
                raise OSError("timerfd_create failed")
            ev.events = EPOLLIN
            ev.data.ptr = NULL  # not a connection: _drain_set passes over it
            if epoll_ctl(self.ends_epfd, EPOLL_CTL_ADD, self.tick_fd, &ev) != 0:
                raise OSError("epoll_ctl(ADD) failed")
        self.tick_ns = interval_ns
        self._arm_tick()
        return self.ends_epfd

    def coalesce_auto(self, int64_t max_tick_ns):
        """Coalesced reads with the tick chosen from the chunk gaps the run sees (coalesce.pyx):
        reads on every arrival at first (the inner set sits in the ends set, so its every ready
        socket wakes the loop), then, once enough gaps are seen, a tick at a share of the short
        ones (at most ``max_tick_ns``), changed as they change, and back to every arrival when
        chunks of one stream come to share reads or reads come without kernel stamps. Returns the
        fd the loop watches, calling drain_coalesced(); ``coalescing`` says what was chosen."""
        cdef int64_t now
        if max_tick_ns <= 0:
            raise ValueError("the longest tick must be positive")
        fd = self.coalesce(max_tick_ns)
        now = fb_now_ns()
        self.auto_coalesce = True
        self.auto_max_tick_ns = max_tick_ns
        self.hold_ns = COALESCE_HOLD_NS
        self.period_ns = now
        self.period_reads = self.reads
        self.period_kernel_reads = self.kernel_reads
        self.period_multi = self.multi_event_reads
        self.decide_due_ns = now + COALESCE_DECIDE_NS
        self._set_tick(0, WHY_LEARNING, now)
        return fd

    def drain_coalesced(self):
        """One coalesced wake-up (see coalesce): the streams about to end first, then the rest."""
        cdef uint64_t expirations
        cdef int64_t now
        if self.tick_ns:
            read(self.tick_fd, &expirations, sizeof(expirations))  # clear the tick, if it was one
        self._wake()
        self._arm_tick()  # first: a read that raises must not leave the sockets without a tick
        self._drain_set(self.ends_epfd)
        self._drain_set(self.epfd)
        if self.decide_due_ns != INT64_MAX:
            now = fb_now_ns()
            if now >= self.decide_due_ns:
                _coalesce_decide(self, now)

    cdef void _set_tick(self, int64_t tick_ns, int why, int64_t now) noexcept:
        """The tick to ``tick_ns`` (0: reads on every arrival), and the change logged."""
        cdef epoll_event ev
        cdef itimerspec spec
        cdef uint64_t expirations
        cdef Py_ssize_t k
        ev.events = EPOLLIN
        ev.data.ptr = NULL  # not a connection: _drain_set passes over it
        if tick_ns > 0 and self.inner_nested:
            epoll_ctl(self.ends_epfd, EPOLL_CTL_DEL, self.epfd, &ev)
            self.inner_nested = False
        elif tick_ns == 0 and not self.inner_nested:
            epoll_ctl(self.ends_epfd, EPOLL_CTL_ADD, self.epfd, &ev)
            self.inner_nested = True
        self.tick_ns = tick_ns
        if tick_ns > 0:
            self._arm_tick()
        else:
            spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
            spec.it_value.tv_sec = spec.it_value.tv_nsec = 0
            timerfd_settime(self.tick_fd, 0, &spec, NULL)  # disarmed
            read(self.tick_fd, &expirations, sizeof(expirations))  # and an expiry not yet read, cleared
        # the first COALESCE_CHANGES - 1 changes, and the latest in the last slot
        k = self.changes if self.changes < COALESCE_CHANGES else COALESCE_CHANGES - 1
        self.change_ns[k] = now
        self.change_tick_ns[k] = tick_ns
        self.change_gap_ns[k] = self.last_short_gap_ns
        self.change_why[k] = why
        self.changes += 1

    @property
    def coalescing(self):
        """Automatic coalescing (coalesce_auto) as it went, or None without it: ``tick_ns`` now (0:
        reads on every arrival), ``changes`` as (when, tick_ns, short gap ns then, why) tuples (the
        first ones and the last when there were more than COALESCE_CHANGES), their count, and the
        reads (and multi-event reads) made on the tick and on every arrival, and the requests whose
        end came while not watched for."""
        cdef Py_ssize_t i
        if self.changes == 0:
            return None
        return {
            "tick_ns": self.tick_ns,
            "changes": [(self.change_ns[i], self.change_tick_ns[i], self.change_gap_ns[i],
                         COALESCE_WHY[self.change_why[i]]) for i in range(min(self.changes, COALESCE_CHANGES))],
            "changes_total": self.changes,
            "short_gap_ns": self.last_short_gap_ns,
            "ticked_reads": self.ticked_reads,
            "ticked_multi_event_reads": self.ticked_multi_event_reads,
            "arrival_reads": self.base_reads,
            "arrival_multi_event_reads": self.base_multi,
            "ends_unwatched": self.ends_unwatched,
        }

    cdef void _arm_tick(self) noexcept:
        cdef itimerspec spec
        cdef int64_t due
        if self.tick_ns <= 0:
            return
        due = fb_now_ns() + self.tick_ns
        spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = due // 1000000000
        spec.it_value.tv_nsec = due % 1000000000
        timerfd_settime(self.tick_fd, TFD_TIMER_ABSTIME, &spec, NULL)

    def expect_tokens(self, object expected_tokens):
        """``expected_tokens``: per row, the output tokens the request asked for (max_tokens; an
        int64 array, 0 where unknown). Usage beyond it is not trusted (see _finish), and
        watch_ends() uses it to tell when a stream may end."""
        self.expected_tokens = expected_tokens
        self.has_expected = True

    def watch_ends(self):
        """With coalesced reads: keep apart the connections whose stream may end with its next
        chunk, in the set coalesce() returns, so that the loop wakes on their every arrival and a
        closed loop's next request goes out at once, while the rest are read on the tick.

        Needs expect_tokens(). A stream is "ending" once its usage says that at most one more
        chunk of its largest size so far is left. Streams that end early (EOS) are read on the
        timer.
        """
        if not self.has_expected:
            raise RuntimeError("watch_ends() needs expect_tokens() first")
        if self.tick_fd < 0:  # without the tick nothing reads the ends set
            raise RuntimeError("watch_ends() needs coalesce() first")
        self.watching_ends = True

    cdef void _wake(self) noexcept:
        self.wakeups += 1
        self.realtime_offset_ns = fb_realtime_offset_ns()

    cdef _drain_set(self, int epfd):
        cdef int n, i
        cdef void *ptr
        cdef uint64_t expirations
        cdef StreamConnection conn
        if self.next_due_ns <= fb_now_ns():
            self._dispatch_due()
        while True:
            n = epoll_wait(epfd, self.ready, READY_EVENTS, 0)
            for i in range(n):
                if i + 1 < n:
                    fb_prefetch(self.ready[i + 1].data.ptr, self.hot_bytes)
                ptr = self.ready[i].data.ptr
                if ptr == <void *>self:  # the arrival timer (see dispatch_arrivals)
                    read(self.arrival_fd, &expirations, sizeof(expirations))
                    self.arrival_armed_ns = 0
                    self._dispatch_due()
                elif ptr != NULL:  # NULL: the coalescing tick (see coalesce)
                    conn = <StreamConnection>ptr
                    if FB_DEBUG:
                        # an fd in the sets belongs to a registered connection (one that closed
                        # earlier in this batch is still kept alive by the driver's references)
                        _debug_assert(conn.closed or conn in self.conns, "a ready fd of no registered connection")
                    conn._read_ready()
                    # An arrival due while many sockets are ready goes out between two of them,
                    # not after the batch (a vDSO clock read per socket).
                    if self.next_due_ns <= fb_now_ns():
                        self._dispatch_due()
            if n < READY_EVENTS:
                return

    cdef void _move(self, StreamConnection conn, bint to_ends) noexcept:
        """Move a connection between the inner set (epfd) and the ends set (ends_epfd)."""
        cdef epoll_event ev
        cdef int removed, added
        ev.events = EPOLLIN
        ev.data.ptr = <void *>conn
        removed = epoll_ctl(self.epfd if to_ends else self.ends_epfd, EPOLL_CTL_DEL, conn.fd, &ev)
        added = epoll_ctl(self.ends_epfd if to_ends else self.epfd, EPOLL_CTL_ADD, conn.fd, &ev)
        if FB_DEBUG:
            _debug_assert(conn.in_ends_set != to_ends and not conn.closed, "a connection moved to the set it is in")
            _debug_assert(removed == 0 and added == 0, "epoll_ctl failed moving a connection between sets")
        conn.in_ends_set = to_ends
        if to_ends:
            self.ends_watched += 1

    cdef _register(self, StreamConnection conn):
        cdef epoll_event ev
        ev.events = EPOLLIN
        ev.data.ptr = <void *>conn
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, conn.fd, &ev) != 0:
            raise OSError("epoll_ctl(ADD) failed")
        self.conns.add(conn)

    cdef _unregister(self, StreamConnection conn):
        cdef epoll_event ev
        cdef int removed = epoll_ctl(self.ends_epfd if conn.in_ends_set else self.epfd, EPOLL_CTL_DEL, conn.fd, &ev)
        if FB_DEBUG:
            _debug_assert(removed == 0 and conn in self.conns, "a connection unregistered twice")
        conn.in_ends_set = False
        self.conns.discard(conn)

    def close_all(self, str why):
        """Close every connection of the run; a request still in flight ends as cancelled (``why``).
        For a run that unwinds without its own stop (its task was cancelled)."""
        for conn in list(self.conns):
            (<StreamConnection>conn).abort(ERR_CANCELLED, why)

    def set_requests(self, bytes head, list bodies):
        """The run's request bodies (bytes or BodyParts) and the HTTP head they are sent with, up to and
        including "Content-Length: " (a connection sends the head, the length and the body as they are)."""
        for body in bodies:
            _check_body(body)
        self.head = head
        self.bodies = bodies
        self.n_rows = len(bodies)
        self.next_row = 0

    cpdef object body(self, Py_ssize_t row):
        """The request body of ``row``."""
        return self.bodies[row]

    def check_error_rate(self):
        """From Python, after recording a failure the core did not see (a failed connect)."""
        self._check_error_rate()

    cdef _check_error_rate(self):
        # others_*: 0 in one process; a --workers worker counts the others' too, as its parent last told
        cdef int64_t failed = self.failed + self.others_failed
        cdef int64_t finished = self.completed + self.others_completed + failed
        if (self.max_error_rate >= 0 and not self.stopping and finished >= 20
                and failed > self.max_error_rate * finished):
            self.stopping = True
            if self.on_stop is not None:
                # Later, not from inside this connection's own read callback.
                self.on_stop("max error rate")

    def publish_claims(self, object claims):
        """--workers: write next_row into ``claims[0]`` (int64; memory a parent process shares) on
        every claim, so that the parent knows exactly which requests a worker had taken if it dies.
        A plain store: a process that is killed leaves every store it made in the shared pages,
        and each claim's is made before its request is sent (a call the compiler cannot move it
        past). None turns it off."""
        cdef int64_t[::1] view
        if claims is None:
            self.claims_out = NULL
            self.claims_owner = None
            return
        view = claims
        if view.shape[0] < 1:
            raise ValueError("publish_claims needs an int64 array of at least one element")
        self.claims_owner = view
        self.claims_out = &view[0]
        self.claims_out[0] = self.next_row

    cdef inline void _publish_claim(self) noexcept:
        if self.claims_out != NULL:
            self.claims_out[0] = self.next_row

    def claim_from(self, object next_row, object claimers, int claimer):
        """--workers on one machine, closed loop: claim rows from one request table that several
        processes share, as one process's slots claim them from its own. ``next_row`` (int64,
        ``[0]``) is the next row of the whole table, taken with an atomic add by every worker's
        core; ``claimers`` (int32, one per row) gets ``claimer`` (this worker's index + 1) at each
        row this worker takes, before the request is sent: a parent knows exactly which rows a
        worker that died had taken. The table (``rows``) and bodies are the whole run's. None
        turns it off. Not for the open loop (its arrivals are dealt: chain_arrivals refuses)."""
        cdef int64_t[::1] counter
        cdef int32_t[::1] marks
        if next_row is None:
            self.claim_next = NULL
            self.claimers = NULL
            self.claim_buffers = None
            return
        counter = next_row
        marks = claimers
        if counter.shape[0] < 1 or marks.shape[0] < self.n_rows:
            raise ValueError(f"claim_from needs an int64 counter and {self.n_rows} int32 claimer marks")
        if claimer < 1:
            raise ValueError("a claimer's mark is its index + 1 (0 means unclaimed)")
        if self.chain_due:
            raise ValueError("shared claims are for the closed loop: the open loop's arrivals are dealt")
        self.claim_buffers = (counter, marks)
        self.claim_next = &counter[0]
        self.claimers = &marks[0] if marks.shape[0] else NULL
        self.claimer = claimer

    cdef Py_ssize_t _claim_shared(self) noexcept:
        cdef int64_t row = fb_claim_next(self.claim_next, self.n_rows)
        if row < 0:
            self.next_row = self.n_rows
            return -1
        fb_claim_mark(self.claimers, row, self.claimer)
        self.next_row = row + 1  # here: one past the last row this worker took
        return row

    cpdef Py_ssize_t _claim_row(self):
        """Index of the next request to send, or -1 when none is left."""
        if self.claim_next != NULL:  # --workers: from the table every worker shares
            return self._claim_shared()
        if self.next_row >= self.n_rows:
            return -1
        self.next_row += 1
        self._publish_claim()
        return self.next_row - 1

    def chain_arrivals(self, object offsets_ns, int64_t base_ns=0):
        """Open loop: request ``row`` is due at ``base_ns + offsets_ns[row]`` (int64 offsets;
        CLOCK_MONOTONIC ns). A connection whose request ends then sends the next request itself
        when that one is already due (it was waiting for a slot), without a trip through Python,
        as refill does in closed loop. None turns it off. (Offsets and a base, not times: adding
        them up for 10M requests would take ~20 ms of the window.)"""
        if offsets_ns is None:
            self.chain_due = False
            self.arrival_offsets = None
            return
        if self.claim_next != NULL:
            raise ValueError("shared claims are for the closed loop: the open loop's arrivals are dealt")
        if len(offsets_ns) != self.n_rows:
            raise ValueError(f"{len(offsets_ns)} arrival times for {self.n_rows} requests")
        self.arrival_offsets = offsets_ns
        self.arrival_base_ns = base_ns
        self.chain_due = True

    cpdef Py_ssize_t _claim_due_row(self, int64_t now):
        """Index of the next request when it is due by ``now``, or -1 (the rule the pacer loop
        uses too, after waiting for a slot). --workers' shared cap: the run's oldest due arrival."""
        cdef int64_t due
        if self.shared_next != NULL:
            return self._claim_due_shared(now)
        if self.next_row >= self.n_rows:
            return -1
        due = self.arrival_base_ns + self.arrival_offsets[self.next_row]
        if due > now or due >= self.send_until_ns:
            return -1
        self.next_row += 1
        self._publish_claim()
        return self.next_row - 1

    # -- open loop: arrivals sent by the core ---------------------------------------------------

    def dispatch_arrivals(self, object offsets_ns, int64_t base_ns, int64_t limit):
        """Open loop: the core sends each arrival (row ``row`` due at ``base_ns + offsets_ns[row]``)
        itself when it is due, on an idle connection of its pool (see park), while at most ``limit``
        requests are in flight (``in_flight + reserved``). A timerfd in the set the event loop
        watches wakes the same drain as the sockets, and a drain looks at the next due time between
        two sockets, so no Python runs between "due" and "sent". With the pool empty it calls
        ``on_wake`` and leaves the arrival to Python (which connects for it); ``on_wake`` is also
        called when the pool runs below ``pool_low`` and when the last request has ended. A freed
        slot sends an arrival that waited for one (chain_arrivals, which this turns on)."""
        cdef epoll_event ev
        if limit < 1:
            raise ValueError("the concurrency limit must be at least 1")
        self.chain_arrivals(offsets_ns, base_ns)
        self.limit = limit
        if self.arrival_fd < 0:
            self.arrival_fd = _counted_fd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
            if self.arrival_fd < 0:
                raise OSError("timerfd_create failed")
            # With coalescing the loop watches the ends set, not the inner set.
            self.arrival_epfd = self.ends_epfd if self.tick_fd >= 0 else self.epfd
            ev.events = EPOLLIN
            ev.data.ptr = <void *>self  # not a connection: _drain_set knows it by this
            if epoll_ctl(self.arrival_epfd, EPOLL_CTL_ADD, self.arrival_fd, &ev) != 0:
                raise OSError("epoll_ctl(ADD) failed")
        self.arrival_armed_ns = 0
        self.dispatching = True
        self._dispatch_due()

    def end_dispatch(self):
        """Turn dispatch_arrivals off; returns the pool's connections (idle, some maybe closed)."""
        cdef epoll_event ev
        cdef list idle
        self.chain_arrivals(None)
        self.dispatching = False
        self.next_due_ns = INT64_MAX
        if self.arrival_fd >= 0:
            epoll_ctl(self.arrival_epfd, EPOLL_CTL_DEL, self.arrival_fd, &ev)
            _close_counted_fd(self.arrival_fd)
            self.arrival_fd = -1
        idle, self.pool = self.pool, []
        return idle

    def park(self, StreamConnection conn):
        """An idle connected connection into the pool; a due arrival may go out on it at once."""
        if conn.closed or conn.busy:
            return
        self.pool.append(conn)
        if self.dispatching:
            self._dispatch_due()

    def take_idle(self):
        """An idle connection out of the pool (the Python path sends on it), or None."""
        return self._pool_take()

    @property
    def pool_size(self):
        """Connections in the pool (some may have closed since; they are dropped when taken)."""
        return len(self.pool)

    def dispatch_due(self):
        """Send what is due now, and arm the timer for the next arrival (after Python claimed rows)."""
        if self.dispatching:
            self._dispatch_due()

    def wake_handled(self):
        """Python has looked: on_wake may be called again."""
        self.wake_pending = False

    def busy_connections(self):
        """The connections with a request in flight, whoever sent it."""
        return [conn for conn in self.conns if (<StreamConnection>conn).busy]

    cdef StreamConnection _pool_take(self):
        cdef StreamConnection conn
        while self.pool:
            conn = <StreamConnection>self.pool.pop()
            if not conn.closed and not conn.busy:
                return conn
        return None

    cdef void _arm_arrival(self, int64_t due) noexcept:
        cdef itimerspec spec
        if due == self.arrival_armed_ns:
            return
        self.arrival_armed_ns = due
        spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = due // 1000000000
        spec.it_value.tv_nsec = due % 1000000000
        timerfd_settime(self.arrival_fd, TFD_TIMER_ABSTIME, &spec, NULL)

    cdef void _learn_lead(self, int64_t delay) noexcept:
        """The lead follows how late the loop gets to an arrival past the time the lead set for it
        (the timer's wake-up, or a busy loop's check between sockets): ~the p99 of the last
        WAKE_DELAYS plus a margin, within [lead_min_ns, lead_max_ns]. A host whose
        wake-ups come late gets an earlier alarm; one whose come on time waits out no more than the
        least lead."""
        cdef int64_t first = 0, second = 0, d
        cdef Py_ssize_t i, n
        self.wake_delays[self.lead_samples % WAKE_DELAYS] = delay if delay > 0 else 0
        self.lead_samples += 1
        n = self.lead_samples if self.lead_samples < WAKE_DELAYS else WAKE_DELAYS
        for i in range(n):
            d = self.wake_delays[i]
            if d > first:
                second = first
                first = d
            elif d > second:
                second = d
        # ~p99: the largest of fewer than 100 samples, the second largest of more
        self.lead_ns = min(max((second if n >= 100 else first) + LEAD_MARGIN_NS, self.lead_min_ns),
                           self.lead_max_ns)

    cdef _ask_python(self):
        if not self.wake_pending and self.on_wake is not None:
            self.wake_pending = True
            self.on_wake()

    cdef void _wait_out(self, int64_t now, int64_t due) noexcept:
        """The timer was armed lead_ns early: the rest, up to ``due``, is waited out here, in C."""
        cdef int64_t waited_from = now
        if now < due:
            while now < due:
                now = fb_now_ns()
            self.lead_wait_ns += now - waited_from

    cdef _dispatch_due(self):
        """Send every arrival that is due, on connections of the pool, within the limit; then arm the
        timer for the next one. Sends can end at once (a failed send) and come back here: the outer
        call goes on with them."""
        cdef int64_t due, now
        cdef bint learnt = False  # one sample per call: a burst's later arrivals were due already
        cdef StreamConnection conn
        if self.in_dispatch or not self.dispatching:
            return
        self.in_dispatch = True
        try:
            if self.shared_next != NULL:  # --workers' shared cap (share_arrivals)
                self._dispatch_shared()
                if len(self.pool) < self.pool_low:
                    self._ask_python()
                return
            self.next_due_ns = INT64_MAX  # until a slot or a connection frees (they call this)
            while not self.stopping and self.next_row < self.n_rows:
                due = self.arrival_base_ns + self.arrival_offsets[self.next_row]
                if due >= self.send_until_ns:
                    break  # past the time cap: never sent, and no timer for it
                now = fb_now_ns()
                if due > now + self.lead_ns:
                    self.next_due_ns = due - self.lead_ns
                    self._arm_arrival(due - self.lead_ns)
                    break
                if self.in_flight + self.reserved >= self.limit:
                    self.arrival_held = True
                    break  # the next request to end sends it (chain_arrivals)
                conn = self._pool_take()
                if conn is None:
                    self.arrival_held = True
                    self._ask_python()  # it connects for this arrival
                    break
                if not self.arrival_held and not learnt:
                    # How late the loop got here past the moment the lead set (a held-back
                    # arrival's wait for a slot or a connection is not the loop's delay).
                    self._learn_lead(now - (due - self.lead_ns))
                    learnt = True
                self.arrival_held = False
                self._wait_out(now, due)
                self.next_row += 1
                self._publish_claim()
                self.core_sends += 1
                conn._start_from_core(self.next_row - 1, due)
            if len(self.pool) < self.pool_low:
                self._ask_python()
        finally:
            self.in_dispatch = False

    cdef bint _chain_ended(self, StreamConnection conn, int error):
        """A chain of requests that the core began ended (conn is no longer busy). True when its slot
        stays held (reserved) for Python's retry of its last request."""
        if (error == ERR_CONNECT and conn.reused and conn.c.req.row >= 0 and not self.stopping
                and self.on_stale is not None):
            # The kept-alive connection had been closed by the server: Python sends the request again.
            self.reserved += 1
            self.on_stale(conn)
            return True
        if not conn.closed:
            self.pool.append(conn)
        return False

    # -- open loop over --workers: one cap shared by every worker (docs/workers.md) --------------

    def share_arrivals(self, object header, object claimers, int claimer, int workers):
        """--workers on one machine, open loop under a --concurrency cap: one cap for all workers, as
        one process has. Every worker holds every arrival; ``header`` (int64, in memory every worker
        shares) holds at [0] the next unsent arrival of the run and at [1] its requests in flight. A
        slot is taken on [1] only while it is below dispatch_arrivals' limit (fb_slot_take), an
        arrival claimed on [0] only when it is due (fb_arrival_claim), and ``claimers`` (int32 per
        row) gets ``claimer`` (this worker's index + 1) at every arrival it claims, before it is sent.
        A slot that frees here sends the oldest due arrival, whoever's; this worker's timer wakes only
        for arrivals ``i mod workers == claimer - 1``. Python's own sends (pool misses, stale retries)
        hold their slot until they give it back (give_slot). Before dispatch_arrivals; None: off."""
        cdef int64_t[::1] counters
        cdef int32_t[::1] marks
        if header is None:
            self.shared_next = self.shared_in_flight = NULL
            self.claimers = NULL
            self.claim_buffers = None
            return
        counters = header
        marks = claimers
        if counters.shape[0] < 2 or marks.shape[0] < self.n_rows or self.n_rows < 1:
            raise ValueError(f"share_arrivals needs two int64 counters and {self.n_rows} int32 claimer marks")
        if not 1 <= claimer <= workers:
            raise ValueError(f"a claimer's mark is its index + 1, from 1 to {workers} (0 means unclaimed)")
        if self.claim_next != NULL:
            raise ValueError("shared arrivals are for the open loop: the closed loop claims with claim_from")
        self.claim_buffers = (counters, marks)
        self.shared_next = &counters[0]
        self.shared_in_flight = &counters[1]
        self.claimers = &marks[0]
        self.claimer = claimer
        self.stride = workers
        self.phase = claimer - 1

    @property
    def shares_arrivals(self):
        """share_arrivals is on."""
        return self.shared_next != NULL

    @property
    def arrival_head(self):
        """The next arrival not yet sent: the run's, with share_arrivals; this process's otherwise."""
        return self._head()

    cdef Py_ssize_t _head(self) noexcept:
        if self.shared_next != NULL:
            return <Py_ssize_t>fb_arrival_head(self.shared_next)
        return self.next_row

    def claim_due_with_slot(self, int64_t now):
        """share_arrivals: a slot of the run's taken and the oldest arrival due by ``now`` claimed with
        it, for Python to send (a pool miss); -1, holding nothing, when no slot is free or none is
        due. The slot is Python's until give_slot."""
        cdef Py_ssize_t row
        self._check_shared()
        if not fb_slot_take(self.shared_in_flight, self.limit):
            return -1
        row = self._claim_due_shared(now)
        if row < 0:
            self._give_slot()
        return row

    def claim_arrived(self, int64_t now):
        """share_arrivals, at a stop: the oldest arrival due by ``now`` that no worker sent, claimed (and
        marked) with no slot, for this worker to record as cancelled while waiting; -1 when none is
        left. Every stopping worker takes them so, each exactly once."""
        self._check_shared()
        return self._claim_due_shared(now)

    def _check_shared(self):
        if self.shared_next == NULL or not self.chain_due:
            raise RuntimeError("needs share_arrivals, then dispatch_arrivals")

    def give_slot(self):
        """share_arrivals: Python's send (claim_due_with_slot, or a stale retry's kept slot) ended or was
        given up; its slot goes back to the run."""
        self._check_shared()
        self._give_slot()

    cdef _give_slot(self):
        fb_slot_give(self.shared_in_flight)
        # The slot is free: an arrival due and held for one, in any worker, goes now, from here.
        self._dispatch_due()

    cdef Py_ssize_t _claim_due_shared(self, int64_t now) except -2:
        """The oldest unsent arrival of the run if it is due by ``now``, claimed and marked (the
        caller holds its slot), or -1."""
        cdef int64_t row, due
        while True:
            row = fb_arrival_head(self.shared_next)
            if row >= self.n_rows:
                return -1
            due = self.arrival_base_ns + self.arrival_offsets[row]
            if due > now or due >= self.send_until_ns:
                return -1
            if self._take_arrival(row):
                return row
            # else another worker took it first: the next one, if due

    cdef bint _take_arrival(self, int64_t row) noexcept:
        """share_arrivals: arrival ``row`` claimed if it is still the run's next unsent one, and marked
        as this worker's; False when another worker took it first."""
        if not fb_arrival_claim(self.shared_next, row):
            return False
        fb_claim_mark(self.claimers, row, self.claimer)
        self.next_row = row + 1  # here: one past the last arrival this worker claimed
        return True

    cdef void _arm_own(self, Py_ssize_t first, int64_t after) except *:
        """The timer to this worker's own next arrival (i mod stride == phase) from ``first`` that is
        due after ``after``: earlier ones are due already and wait for a slot or a connection, and
        whoever frees one sends them. None left: not armed (its Python looks every driver.SHARED_POLL_S)."""
        cdef Py_ssize_t row, lo = first, hi = self.n_rows, mid
        while lo < hi:  # the first arrival due after ``after`` (offsets only grow)
            mid = (lo + hi) // 2
            if self.arrival_base_ns + self.arrival_offsets[mid] > after:
                hi = mid
            else:
                lo = mid + 1
        row = lo + (self.phase - lo % self.stride + self.stride) % self.stride
        if row < self.n_rows and self.arrival_base_ns + self.arrival_offsets[row] < self.send_until_ns:
            self.next_due_ns = self.arrival_base_ns + self.arrival_offsets[row] - self.lead_ns
            self._arm_arrival(self.next_due_ns)

    cdef _dispatch_shared(self):
        """_dispatch_due under share_arrivals: the oldest due arrival of the run, whoever's, goes out
        on a connection of this worker's pool once a slot of the run's is taken; the timer wakes this
        worker for its own arrivals only. Called with in_dispatch set."""
        cdef int64_t due, now
        cdef Py_ssize_t row
        cdef bint learnt = False
        cdef StreamConnection conn
        self.next_due_ns = INT64_MAX
        while not self.stopping:
            row = fb_arrival_head(self.shared_next)
            if row >= self.n_rows:  # every arrival sent, by some worker
                if self.in_flight == 0:
                    self._ask_python()  # this worker's part is over
                return
            due = self.arrival_base_ns + self.arrival_offsets[row]
            if due >= self.send_until_ns:
                return  # past the time cap: never sent, and no timer for it
            now = fb_now_ns()
            if due > now + self.lead_ns:
                self._arm_own(row, now + self.lead_ns)
                return
            conn = self._pool_take()
            if conn is None:
                self.arrival_held = True
                self._ask_python()  # it connects for this arrival (claim_due_with_slot)
                break
            if not fb_slot_take(self.shared_in_flight, self.limit):
                self.pool.append(conn)
                self.arrival_held = True
                break  # every slot of the run is busy: whoever frees one sends it
            if row % self.stride == self.phase and not self.arrival_held and not learnt:
                # its own arrival, woken for by its own timer (another's may have waited for a slot)
                self._learn_lead(now - (due - self.lead_ns))
                learnt = True
            self.arrival_held = False
            self._wait_out(now, due)
            if not self._take_arrival(row):
                # another worker sent it meanwhile: the slot back, and look again
                fb_slot_give(self.shared_in_flight)
                self.pool.append(conn)
                continue
            self.core_sends += 1
            conn._start_from_core(row, due)
        # held (no slot or no connection), or stopping: the timer to this worker's own next arrival
        # not due yet, so that it never spins on arrivals already waiting
        if not self.stopping:
            now = fb_now_ns()
            self._arm_own(self._head(), now + self.lead_ns)

    @property
    def counters(self):
        """Run-wide counters, as a dict (read at the end and by the progress display)."""
        return {
            "reads": self.reads,
            "kernel_stamped_reads": self.kernel_reads,
            "multi_event_reads": self.multi_event_reads,
            "output_events": self.output_events,
            "connections_opened": self.connections_opened,
            "wakeups": self.wakeups,
            "ends_watched": self.ends_watched,
            "completed": self.completed,
            "failed": self.failed,
            "output_tokens": self.output_tokens,
        }
