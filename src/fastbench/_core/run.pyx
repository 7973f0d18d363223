# cython: language_level=3
# RunState: what the connections of one run share: the request table and histograms, the counters, the
# request bodies, the error-rate rule; and the parts it is composed of, each with one job: Slots,
# ReadySet (ready.pyx: the epoll sets drained per wake-up), Tick (coalesce.pyx: coalesced reads), Pool
# and Dispatcher (dispatch.pyx: the open loop's sends), Claims (claims.pyx: which request goes next).
# A part is made when what it needs exists (a Tick over the sets, a schedule's claims when the schedule
# starts, a dispatcher with its claims, timer and callbacks), so no call can come out of order: the table
# fixes the number of requests (claims made before set_requests are right), and coalescing begun after a
# dispatcher moves its timer into the set the loop then watches.
# Included by engine.pyx.


cdef class Slots:
    """The run's slots and its stop, read by every part (RunState.in_flight etc. are these)."""

    def __cinit__(self):
        self.limit = INT64_MAX
        self.send_until_ns = INT64_MAX


cdef class RunState:
    """Shared by all connections of one run: the request table, chunk histograms, counters.

    ``expected_tokens``: per row, the output tokens the request asked for (max_tokens; int64, 0 where
    unknown): usage beyond it is not trusted (see StreamConnection._finish), and coalesce(watch_ends=True)
    uses it to tell when a stream may end. ``published``: --workers: an int64 array (memory a parent
    process shares) whose ``[0]`` every claim of this process's own table sets to the count claimed, so
    that the parent knows exactly which requests a worker had taken if it dies."""

    def __cinit__(self, object rows, Recorder itl_chunk, Recorder itl_token, Recorder skew,
                  size_t max_event_bytes=1024 * 1024, object expected_tokens=None, object published=None):
        cdef int64_t[::1] view
        self.read_buffer = <char *>_counted_malloc(READ_BUFFER_BYTES)
        if self.read_buffer == NULL:
            raise MemoryError()
        if FB_DEBUG:
            _debug.runs_made += 1  # freed: __dealloc__ finds the read buffer
        self.rows = rows
        if self.rows.shape[1] * sizeof(int64_t) != sizeof(fb_row_t):  # rows are written as fb_row_t
            raise ValueError(f"a request table of {self.rows.shape[1]} columns, not {len(COLUMN_ORDER)}")
        self.n_rows = self.rows.shape[0]  # from here: a schedule's claims never wait for set_requests
        self.itl_chunk = itl_chunk
        self.itl_token = itl_token
        self.skew = skew
        self.error_messages = {}
        self.outputs = {}
        self.chunk_stamps = {}
        self.answers = {}
        self.max_event_bytes = max_event_bytes
        self.max_request_events = MAX_REQUEST_EVENTS
        self.kernel_timestamps = True
        self.max_error_rate = -1.0
        self.bodies = []
        self.head = b""
        self.row_heads = None
        if expected_tokens is not None:
            self.expected_tokens = expected_tokens
            self.has_expected = True
        if published is not None:
            view = published
            if view.shape[0] < 1:
                raise ValueError("published claims need an int64 array of at least one element")
            self.published = published
        self.slots = Slots()
        self.sets = ReadySet()
        self.pool = Pool()

    def __dealloc__(self):
        if FB_DEBUG and self.read_buffer != NULL:
            _debug.runs_freed += 1
        _counted_free(self.read_buffer)

    # -- the sets the loop drains, and their tick ---------------------------------------------

    def fileno(self):
        """The one fd the event loop watches for every connection, calling drain() when it is readable:
        the inner epoll set, or with coalesced reads the ends set (see coalesce)."""
        return self.sets.epfd if self.tick is None else self.sets.ends_epfd

    def drain(self):
        """Read every connection that is ready, in C, for one wake-up of the event loop: one
        Python-level call per wake-up instead of one per ready socket; each read still gets its own
        kernel receive stamp. Coalesced: the streams about to end first, then the rest."""
        cdef int64_t now
        cdef Tick tick = self.tick
        self.wakeups += 1
        self.realtime_offset_ns = fb_realtime_offset_ns()
        if tick is None:
            self.sets.drain(self.sets.epfd, self.dispatcher)
            return
        tick.clear()
        tick.arm()  # first: a read that raises must not leave the sockets without a tick
        self.sets.drain(self.sets.ends_epfd, self.dispatcher)
        self.sets.drain(self.sets.epfd, self.dispatcher)
        if tick.decide_due_ns != INT64_MAX:
            now = fb_now_ns()
            if now >= tick.decide_due_ns:
                _coalesce_decide(tick, self, now, self.dispatcher is not None)

    def coalesce(self, int64_t interval_ns, bint watch_ends=False):
        """Coalesced reads: nothing watches the connections themselves. Returns the one fd the event
        loop watches instead (fileno() from now on): the "ends set" of streams that may end with their
        next chunk, which also holds a timerfd, the tick. Every wake-up drains every ready connection
        and moves the tick to ``interval_ns`` from then: the sockets are read at least every interval,
        and a wake-up for a stream's end serves all the others too, so it replaces a tick instead of
        adding to one (a wake-up costs ~30-35 us of CPU on the 2-vCPU VM of bench/RESULTS.md;
        bench/cpu_floor.py measures it). One fd, so a tick and an end due together are one wake-up.

        ``watch_ends`` (needs expected_tokens): keep apart the connections whose stream may end with its
        next chunk, in that set, so that the loop wakes on their every arrival and a closed loop's next
        request goes out at once, while the rest are read on the tick. A stream is "ending" once its
        usage says that at most one more chunk of its largest size so far is left, or without per-chunk
        usage once its events reach those at which earlier streams ended (ReadySet.learn_end); streams
        that end early (EOS) are read on the tick."""
        if interval_ns <= 0:
            raise ValueError("interval must be positive")
        return self._coalesce(interval_ns, False, watch_ends)

    def coalesce_auto(self, int64_t max_tick_ns, bint watch_ends=False):
        """Coalesced reads with the tick chosen from the chunk gaps the run sees (coalesce.pyx): reads
        on every arrival at first (the inner set sits in the ends set, so its every ready socket wakes
        the loop), then, once enough gaps are seen, a tick at a share of the short ones (at most
        ``max_tick_ns``), changed as they change, and back to every arrival when chunks of one stream
        come to share reads or reads come without kernel stamps. Returns the fd the loop watches;
        ``coalescing`` says what was chosen."""
        if max_tick_ns <= 0:
            raise ValueError("the longest tick must be positive")
        return self._coalesce(max_tick_ns, True, watch_ends)

    cdef _coalesce(self, int64_t tick_ns, bint auto, bint watch_ends):
        cdef epoll_event ev
        cdef Tick tick
        if watch_ends and not self.has_expected:
            raise ValueError("watching the streams' ends needs their expected_tokens")
        if self.tick is not None and self.tick.inner_nested:  # a tick replaced: the sets as they were
            epoll_ctl(self.sets.ends_epfd, EPOLL_CTL_DEL, self.sets.epfd, &ev)
        tick = Tick(self.sets, tick_ns, auto, fb_now_ns())
        tick.period_reads = self.reads
        tick.period_kernel_reads = self.kernel_reads
        tick.period_multi = self.multi_event_reads
        self.tick = tick
        self.sets.watching_ends = watch_ends
        if self.dispatcher is not None:  # coalescing after the schedule began: its timer follows the loop's fd
            self.dispatcher.watch_from(self.sets.ends_epfd)
        return self.sets.ends_epfd

    @property
    def coalescing(self):
        """Automatic coalescing (coalesce_auto) as it went, or None without it: ``tick_ns`` now (0:
        reads on every arrival), ``changes`` as (when, tick_ns, short gap ns then, why) tuples (the
        first ones and the last when there were more than COALESCE_CHANGES), their count, and the
        reads (and multi-event reads) made on the tick and on every arrival, and the requests whose
        end came while not watched for."""
        return None if self.tick is None else self.tick.summary()

    def close_all(self, str why):
        """Close every connection of the run; a request still in flight ends as cancelled (``why``).
        For a run that unwinds without its own stop (its task was cancelled)."""
        for conn in list(self.sets.conns):
            (<StreamConnection>conn).abort(ERR_CANCELLED, why)

    def busy_connections(self):
        """The connections with a request in flight, whoever sent it."""
        return [conn for conn in self.sets.conns if (<StreamConnection>conn).busy]

    # -- requests and the error rate ----------------------------------------------------------

    def set_requests(self, bytes head, list bodies, list row_heads=None):
        """The run's request bodies (bytes or BodyParts), one per row of the table, and the HTTP head they
        are sent with, up to and including "Content-Length: " (a connection sends the head, the length and
        the body as they are). ``row_heads``: by row, the head that row is sent with instead (one header more,
        say: a session's id for a router to pin it); the warm-ups keep ``head``."""
        if len(bodies) != self.n_rows:
            raise ValueError(f"{len(bodies)} request bodies for a table of {self.n_rows} rows")
        if row_heads is not None and (len(row_heads) != self.n_rows or
                                      not all(type(h) is bytes and h.endswith(b"Content-Length: ")
                                              for h in row_heads)):
            raise ValueError("row_heads: one head per row, each bytes ending with 'Content-Length: '")
        for body in bodies:
            _check_body(body)
        self.head = head
        self.bodies = bodies
        self.row_heads = row_heads

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
        if (self.max_error_rate >= 0 and not self.slots.stopping and finished >= 20
                and failed > self.max_error_rate * finished):
            self.slots.stopping = True
            if self.on_stop is not None:
                # Later, not from inside this connection's own read callback.
                self.on_stop("max error rate")

    # -- schedules: each starts with the claims it needs ----------------------------------------

    cdef Py_ssize_t _first(self):
        # a schedule's claims go on from the last one's: each row is claimed once
        return 0 if self.claims is None else self.claims.next_row

    cdef Claims _start(self, Claims claims, bint chained):
        self.claims = claims
        self.chain = claims if chained else None
        return claims

    def claim_rows(self, object next_row=None, object claimers=None, int claimer=0, bint chained=True):
        """Closed loop: the claims of the table's rows, in order (``claim()``: the next, or -1). While
        ``chained`` a connection that stays usable sends the next request itself when its response
        ends, from inside the core. --workers on one machine: ``next_row`` (int64, ``[0]``) is the next
        row of the whole table, taken with an atomic add by every worker's core; ``claimers`` (int32,
        one per row) gets ``claimer`` (this worker's index + 1) at each row this worker takes, before
        the request is sent, so that a parent knows exactly which rows a worker that died had taken."""
        return self._start(_row_claims(self.slots, self.n_rows, self._first(), self.published, next_row, claimers,
                                       claimer), chained)

    def dispatch_arrivals(self, object offsets_ns, int64_t base_ns, int64_t limit, int64_t lead_min_ns=40_000,
                          int64_t lead_max_ns=40_000, object on_wake=None, object on_stale=None):
        """Open loop: the core sends each arrival (row ``row`` due at ``base_ns + offsets_ns[row]``;
        int64 offsets, CLOCK_MONOTONIC ns) itself when it is due, on an idle connection of the pool
        (see park), while at most ``limit`` requests are in flight; returns the Dispatcher. A freed slot
        sends an arrival that waited for one. The arrival timer is armed early by a lead it learns
        within [lead_min_ns, lead_max_ns]. ``on_wake()``: Python has work (the pool is empty or low,
        the last request ended); ``on_stale(conn)``: a core-sent request met a connection the server
        had closed, and its slot is held (``reserved``) for Python's retry."""
        cdef ArrivalClaims arrivals = ArrivalClaims.__new__(ArrivalClaims)
        cdef Dispatcher d = Dispatcher.__new__(Dispatcher)
        _init_arrivals(arrivals, self.slots, self.n_rows, self._first(), self.published, offsets_ns, base_ns)
        return self._dispatch(d, arrivals, limit, lead_min_ns, lead_max_ns, on_wake, on_stale)

    def share_arrivals(self, object offsets_ns, int64_t base_ns, int64_t limit, object header, object claimers,
                       int claimer, int workers, int64_t lead_min_ns=40_000, int64_t lead_max_ns=40_000,
                       object on_wake=None, object on_stale=None):
        """dispatch_arrivals for --workers on one machine, open loop under a --concurrency cap: one cap
        for all workers, as one process has. Every worker holds every arrival; ``header`` (int64, in
        memory every worker shares) holds at [0] the next unsent arrival of the run and at [1] its
        requests in flight; ``claimers`` (int32 per row) gets ``claimer`` (this worker's index + 1) at
        every arrival it claims, before it is sent. Returns the SharedDispatcher (docs/workers.md)."""
        cdef SharedArrivals arrivals = _shared_arrivals(self.slots, self.n_rows, offsets_ns, base_ns, header,
                                                        claimers, claimer, workers)
        cdef SharedDispatcher d = SharedDispatcher.__new__(SharedDispatcher)
        d.shared = arrivals
        d.stride = workers
        d.phase = claimer - 1
        return self._dispatch(d, arrivals, limit, lead_min_ns, lead_max_ns, on_wake, on_stale)

    cdef _dispatch(self, Dispatcher d, ArrivalClaims arrivals, int64_t limit, int64_t lead_min_ns,
                  int64_t lead_max_ns, object on_wake, object on_stale):
        _init_dispatcher(d, self.slots, self.pool, arrivals, self.fileno(), limit, lead_min_ns, lead_max_ns,
                         on_wake, on_stale)
        self._start(arrivals, True)
        self.dispatcher = d
        d.dispatch()
        return d

    def end_schedule(self):
        """The schedule's connections claim no more themselves, and the core sends no more arrivals;
        returns the pool's connections (idle, some maybe closed). The claims stay (next_row)."""
        cdef list idle
        self.chain = None
        if self.dispatcher is not None:
            self.dispatcher.close_timer()
            self.dispatcher = None
        idle, self.pool.idle = self.pool.idle, []
        return idle

    def park(self, StreamConnection conn):
        """An idle connected connection into the pool; a due arrival may go out on it at once."""
        if conn.closed or conn.busy:
            return
        self.pool.idle.append(conn)
        if self.dispatcher is not None:
            self.dispatcher.dispatch()

    # -- what Python reads --------------------------------------------------------------------

    @property
    def next_row(self):
        """One past the last row this process claimed (0 before a schedule)."""
        return 0 if self.claims is None else self.claims.next_row

    @property
    def in_flight(self):
        return self.slots.in_flight

    @property
    def reserved(self):
        return self.slots.reserved

    @reserved.setter
    def reserved(self, int64_t value):
        self.slots.reserved = value

    @property
    def stopping(self):
        return self.slots.stopping

    @stopping.setter
    def stopping(self, bint value):
        self.slots.stopping = value

    @property
    def send_until_ns(self):
        return self.slots.send_until_ns

    @send_until_ns.setter
    def send_until_ns(self, int64_t value):
        self.slots.send_until_ns = value

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
            "ends_watched": self.sets.ends_watched,
            "completed": self.completed,
            "failed": self.failed,
            "output_tokens": self.output_tokens,
        }
