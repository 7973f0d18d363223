# cython: language_level=3
# StreamConnection and RunState: the per-read, per-event and per-request paths. Included by
# engine.pyx. Rule zero: per token nothing enters Python; per request one Future resolves.

# Column indices of the request table; must match fastbench.records.COLUMNS (a test checks).
COLUMN_ORDER = (
    "index", "scheduled_ns", "sent_ns", "first_byte_ns", "first_token_ns", "first_answer_ns",
    "end_ns", "prompt_tokens", "output_tokens", "chunks", "events", "max_chunk_tokens", "error",
    "http_status", "usage_source", "connect_ns",
)
DEF C_INDEX = 0
DEF C_SCHEDULED = 1
DEF C_SENT = 2
DEF C_FIRST_BYTE = 3
DEF C_FIRST_TOKEN = 4
DEF C_FIRST_ANSWER = 5
DEF C_END = 6
DEF C_PROMPT_TOKENS = 7
DEF C_OUTPUT_TOKENS = 8
DEF C_CHUNKS = 9
DEF C_EVENTS = 10
DEF C_MAX_CHUNK_TOKENS = 11
DEF C_ERROR = 12
DEF C_HTTP_STATUS = 13
DEF C_USAGE_SOURCE = 14
DEF C_CONNECT = 15

# ErrorClass and UsageSource values (fastbench.records).
DEF E_OK = 0
DEF E_CONNECT = 1
DEF E_HTTP_STATUS = 2
DEF E_TIMEOUT = 3
DEF E_PROTOCOL = 4
DEF E_SERVER_ERROR = 5
DEF E_CANCELLED = 6
DEF E_CONTEXT_LENGTH = 7
DEF U_NONE = 0
DEF U_PER_CHUNK = 1
DEF U_FINAL = 2
DEF U_INCONSISTENT = 3

DEF READ_BUFFER_BYTES = 262144
DEF ERRTEXT_BYTES = 2048
DEF FIRST_EVENT_BUFFER = 4096
DEF FIRST_EVENT_SLOTS = 512
DEF READY_EVENTS = 256


cdef int _on_body(void *ctx, const char *data, size_t length) noexcept nogil:
    """fb_http body callback: event-stream bytes go to the SSE scanner; anything else is kept
    (its first 2 KiB) for the error message."""
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef int rc
    if c.http.status < 200 or c.http.status >= 300 or not c.http.event_stream:
        _keep_text(c, data, length)
        return 0
    rc = fb_sse_feed(&c.sse, data, length, _on_event, _grow_event_buffer, ctx)
    if rc == -FB_ERR_SSE_TOO_BIG:
        _fail(c, E_PROTOCOL, "an SSE event exceeded the 1 MiB event size limit")
        return 1
    return 1 if rc < 0 else 0


cdef int _grow_event_buffer(void *ctx, fb_sse_t *st, size_t needed) noexcept nogil:
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef size_t cap = st.cap * 2
    cdef char *p
    if needed > c.max_event_bytes:
        return 1
    while cap < needed:
        cap *= 2
    if cap > c.max_event_bytes:
        cap = c.max_event_bytes
    p = <char *>realloc(st.buf, cap)
    if p == NULL:
        return 1
    st.buf = p
    st.cap = cap
    return 0


cdef int _on_event(void *ctx, const char *data, size_t length) noexcept nogil:
    """One SSE data event. Stamps it with its read's time, before and apart from any parsing
    of what it means; then takes the few facts the metrics need from the JSON in one pass."""
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef fb_req_t *r = &c.req
    cdef fb_chunk_info_t info
    cdef int64_t tokens = -1
    cdef bint output, had_usage
    r.events += 1
    if length == 6 and memcmp(data, b"[DONE]", 6) == 0:
        r.done_seen = 1
        return 0
    if fb_json_scan_chunk(data, length, &info) != 0:
        _keep_text(c, data, length)
        _fail(c, E_PROTOCOL, "an SSE data event is not a JSON object")
        return 1
    if info.has_error:
        _keep_text(c, data, length)
        _fail(c, E_SERVER_ERROR, "the server sent an error event mid-stream")
        return 1
    if info.has_finish:
        r.finish_seen = 1
    if info.prompt_tokens >= 0:
        r.prompt_tokens = info.prompt_tokens
    if info.usage_invalid:
        r.usage_untrusted = 1
    # A chunk without text still carries output when its usage grew over an earlier chunk's and
    # every output so far carried usage (vLLM's continuous usage streams a token that ends
    # mid-UTF-8 as text ""). Otherwise usage on a chunk without text is a server's end-of-stream
    # total (llama.cpp), not a token chunk, unless no output came before it: then it is an answer
    # that ended at once (EOS as its first token).
    had_usage = r.usage_seen
    if info.completion_tokens >= 0:
        r.usage_seen = 1
        if info.completion_tokens < r.completion_tokens:
            r.usage_untrusted = 1  # went backwards
        else:
            tokens = info.completion_tokens - r.completion_tokens
        r.completion_tokens = info.completion_tokens
    output = info.has_content or info.has_reasoning or (
        tokens > 0 and (r.n_ev == 0 or (had_usage and r.usage_chunks == r.n_ev)))
    if not output:
        return 0
    if r.n_ev == r.cap_ev and _grow_event_slots(r) != 0:
        _fail(c, E_PROTOCOL, "out of memory for per-chunk timestamps")
        return 1
    r.ev[r.n_ev].ts = c.read_ts
    r.ev[r.n_ev].tokens = tokens if info.completion_tokens >= 0 else -1
    r.ev[r.n_ev].sent = info.sent_ns
    if r.ev[r.n_ev].tokens > r.max_chunk_tokens:
        r.max_chunk_tokens = r.ev[r.n_ev].tokens
    r.n_ev += 1
    if info.completion_tokens >= 0:
        r.usage_chunks += 1
    if c.save_outputs and _keep_output(c, data, length) != 0:
        _fail(c, E_PROTOCOL, "out of memory for --save-outputs")
        return 1
    if r.first_token_ns == 0:
        r.first_token_ns = c.read_ts
    if info.has_content and r.first_answer_ns == 0:
        r.first_answer_ns = c.read_ts
    c.read_output_events += 1
    if c.read_output_events == 2:
        c.multi_event_reads += 1
    c.output_events += 1
    return 0


cdef int _grow_event_slots(fb_req_t *r) noexcept nogil:
    cdef size_t cap = r.cap_ev * 2 if r.cap_ev else FIRST_EVENT_SLOTS
    cdef fb_event_t *ev = <fb_event_t *>realloc(r.ev, cap * sizeof(fb_event_t))
    if ev == NULL:
        return -1
    r.ev = ev
    r.cap_ev = cap
    return 0


cdef int _keep_output(fb_conn_t *c, const char *data, size_t length) noexcept nogil:
    """Append one output event and a NUL separator (JSON text never contains a raw NUL)."""
    cdef size_t need = c.out_len + length + 1
    cdef size_t cap = c.out_cap if c.out_cap else 4096
    cdef char *p
    if need > c.out_cap:
        while cap < need:
            cap *= 2
        p = <char *>realloc(c.out_buf, cap)
        if p == NULL:
            return -1
        c.out_buf = p
        c.out_cap = cap
    memcpy(c.out_buf + c.out_len, data, length)
    c.out_buf[c.out_len + length] = 0
    c.out_len = need
    return 0


cdef inline void _keep_text(fb_conn_t *c, const char *data, size_t length) noexcept nogil:
    cdef size_t room = ERRTEXT_BYTES - c.errtext_len
    if length > room:
        length = room
    memcpy(c.errtext + c.errtext_len, data, length)
    c.errtext_len += length


cdef inline void _fail(fb_conn_t *c, int error, const char *why) noexcept nogil:
    if c.req.error == E_OK:
        c.req.error = error
        c.req.why = why


cdef class RunState:
    """Shared by all connections of one run: the request table, chunk histograms, counters."""

    def __cinit__(self, object rows, Recorder itl_chunk, Recorder itl_token, Recorder skew,
                  size_t max_event_bytes=1024 * 1024):
        # First: __dealloc__ runs even when this fails, and must not close fds it never opened.
        self.epfd = self.ends_epfd = self.tick_fd = -1
        self.rows = rows
        self.itl_chunk = itl_chunk
        self.itl_token = itl_token
        self.skew = skew
        self.error_messages = {}
        self.outputs = {}
        self.save_outputs = False
        self.read_buffer = <char *>malloc(READ_BUFFER_BYTES)
        if self.read_buffer == NULL:
            raise MemoryError()
        self.max_event_bytes = max_event_bytes
        self.kernel_timestamps = True
        self.refill = False
        self.chain_due = False
        self.stopping = False
        self.max_error_rate = -1.0
        self.conns = set()
        self.epfd = epoll_create1(EPOLL_CLOEXEC)
        self.ends_epfd = epoll_create1(EPOLL_CLOEXEC)
        if self.epfd < 0 or self.ends_epfd < 0:
            raise OSError("epoll_create1 failed")
        self.watching_ends = False
        self.has_expected = False
        self.tick_fd = -1
        self.ready = <epoll_event *>malloc(READY_EVENTS * sizeof(epoll_event))
        if self.ready == NULL:
            raise MemoryError()
        self.on_stop = None
        self.bodies = []
        self.head = b""

    def __dealloc__(self):
        free(self.read_buffer)
        free(self.ready)
        if self.epfd >= 0:
            close(self.epfd)
        if self.ends_epfd >= 0:
            close(self.ends_epfd)
        if self.tick_fd >= 0:
            close(self.tick_fd)

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
            self.tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
            if self.tick_fd < 0:
                raise OSError("timerfd_create failed")
            ev.events = EPOLLIN
            ev.data.ptr = NULL  # not a connection: _drain_set passes over it
            if epoll_ctl(self.ends_epfd, EPOLL_CTL_ADD, self.tick_fd, &ev) != 0:
                raise OSError("epoll_ctl(ADD) failed")
        self.tick_ns = interval_ns
        self._arm_tick()
        return self.ends_epfd

    def drain_coalesced(self):
        """One coalesced wake-up (see coalesce): the streams about to end first, then the rest."""
        cdef uint64_t expirations
        read(self.tick_fd, &expirations, sizeof(expirations))  # clear the tick, if it was one
        self._wake()
        self._arm_tick()  # first: a read that raises must not leave the sockets without a tick
        self._drain_set(self.ends_epfd)
        self._drain_set(self.epfd)

    cdef void _arm_tick(self) noexcept:
        cdef itimerspec spec
        cdef int64_t due = fb_now_ns() + self.tick_ns
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
        while True:
            n = epoll_wait(epfd, self.ready, READY_EVENTS, 0)
            for i in range(n):
                if i + 1 < n:
                    fb_prefetch(self.ready[i + 1].data.ptr, self.hot_bytes)
                if self.ready[i].data.ptr != NULL:  # NULL: the coalescing tick (see coalesce)
                    (<StreamConnection>self.ready[i].data.ptr)._read_ready()
            if n < READY_EVENTS:
                return

    cdef void _move(self, StreamConnection conn, bint to_ends) noexcept:
        """Move a connection between the inner set (epfd) and the ends set (ends_epfd)."""
        cdef epoll_event ev
        ev.events = EPOLLIN
        ev.data.ptr = <void *>conn
        epoll_ctl(self.epfd if to_ends else self.ends_epfd, EPOLL_CTL_DEL, conn.fd, &ev)
        epoll_ctl(self.ends_epfd if to_ends else self.epfd, EPOLL_CTL_ADD, conn.fd, &ev)
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
        epoll_ctl(self.ends_epfd if conn.in_ends_set else self.epfd, EPOLL_CTL_DEL, conn.fd, &ev)
        conn.in_ends_set = False
        self.conns.discard(conn)

    def close_all(self, str why):
        """Close every connection of the run; a request still in flight ends as cancelled (``why``).
        For a run that unwinds without its own stop (its task was cancelled)."""
        for conn in list(self.conns):
            (<StreamConnection>conn).abort(E_CANCELLED, why)

    def set_requests(self, bytes head, list bodies):
        """The run's request bodies and the HTTP head they are sent with (up to Content-Length)."""
        self.head = head
        self.bodies = bodies
        self.n_rows = len(bodies)
        self.next_row = 0

    cpdef bytes request_bytes(self, Py_ssize_t row):
        return self.request_for(self.bodies[row])

    cpdef bytes request_for(self, bytes body):
        return self.head + str(len(body)).encode() + b"\r\n\r\n" + body

    def check_error_rate(self):
        """From Python, after recording a failure the core did not see (a failed connect)."""
        self._check_error_rate()

    cdef _check_error_rate(self):
        cdef int64_t finished = self.completed + self.failed
        if (self.max_error_rate >= 0 and not self.stopping and finished >= 20
                and self.failed > self.max_error_rate * finished):
            self.stopping = True
            if self.on_stop is not None:
                # Later, not from inside this connection's own read callback.
                self.on_stop("max error rate")

    cpdef Py_ssize_t _claim_row(self):
        """Index of the next request to send, or -1 when none is left."""
        if self.next_row >= self.n_rows:
            return -1
        self.next_row += 1
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
        if len(offsets_ns) != self.n_rows:
            raise ValueError(f"{len(offsets_ns)} arrival times for {self.n_rows} requests")
        self.arrival_offsets = offsets_ns
        self.arrival_base_ns = base_ns
        self.chain_due = True

    cpdef Py_ssize_t _claim_due_row(self, int64_t now):
        """Index of the next request when it is due by ``now``, or -1 (the rule the pacer loop
        uses too, after waiting for a slot)."""
        if self.next_row >= self.n_rows or self.arrival_base_ns + self.arrival_offsets[self.next_row] > now:
            return -1
        self.next_row += 1
        return self.next_row - 1

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


cdef class StreamConnection:
    """One keep-alive HTTP/1.1 connection carrying one streamed request at a time.

    Reads are driven by the run's inner epoll set (``RunState.drain``) and done with ``recvmsg`` in C, so each read
    comes with the kernel's receive timestamp where the socket gives one; every event parsed
    from that read carries that stamp.
    """

    def __cinit__(self, RunState run, object loop, object sock, object ssl_object=None,
                  object ssl_in=None, object ssl_out=None):
        self.run = run
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.ssl_object = ssl_object
        self.ssl_in = ssl_in
        self.ssl_out = ssl_out
        self._py_why = None
        self.kernel_timestamps = run.kernel_timestamps and fb_net_setup(self.fd) == 1
        self.c.max_event_bytes = run.max_event_bytes
        self.c.save_outputs = run.save_outputs
        self.c.sse.buf = <char *>malloc(FIRST_EVENT_BUFFER)
        if self.c.sse.buf == NULL:
            raise MemoryError()
        self.c.sse.cap = FIRST_EVENT_BUFFER
        self.busy = False
        self.closed = False
        self.requests_served = 0
        self.in_ends_set = False
        # Where the state a read touches ends: the object's own fields, then c up to the HTTP
        # line buffer (engine.pxd orders both so).
        run.hot_bytes = <size_t>(<char *>&self.c.http.line - <char *><void *>self)
        run.connections_opened += 1
        run._register(self)

    def __dealloc__(self):
        free(self.c.sse.buf)
        free(self.c.req.ev)
        free(self.c.out_buf)

    @property
    def is_usable(self):
        return not self.closed and not self.busy

    @property
    def uses_kernel_timestamps(self):
        return self.kernel_timestamps

    def start(self, bytes request, int64_t row, int64_t scheduled_ns, int64_t connect_ns=0):
        """Send one request and return a Future that resolves to an ErrorClass value.

        In closed loop (``RunState.refill``) a connection that stays usable goes straight on to
        the run's next request from inside the core, and in open loop (``chain_arrivals``) to the
        next one when it is already due, so the Future resolves only when the chain ends: with an
        error that closed the connection, at the stop, or when no request is left (or due).
        ``row`` and ``last_was_reused`` then describe the request that ended it.
        """
        if self.busy or self.closed:
            raise RuntimeError("connection is busy or closed")
        self.busy = True
        self.fut = self.loop.create_future()
        self._begin(request, row, scheduled_ns, connect_ns)
        return self.fut

    cdef _begin(self, bytes request, int64_t row, int64_t scheduled_ns, int64_t connect_ns):
        cdef fb_req_t *r = &self.c.req
        fb_http_init(&self.c.http)
        fb_sse_init(&self.c.sse, self.c.sse.buf, self.c.sse.cap)
        self.reused = self.requests_served > 0
        r.row = row
        r.scheduled_ns = scheduled_ns
        r.connect_ns = connect_ns
        r.first_byte_ns = r.first_token_ns = r.first_answer_ns = r.end_ns = 0
        r.prompt_tokens = -1
        r.completion_tokens = 0
        r.events = r.n_ev = r.usage_chunks = 0
        r.usage_seen = r.usage_untrusted = r.done_seen = r.finish_seen = 0
        r.error = E_OK
        r.why = NULL
        self.c.errtext_len = 0
        self.c.read_output_events = 0
        self.c.read_ts = 0
        self.c.out_len = 0
        r.max_chunk_tokens = 0
        self.expected_tokens = 0
        if self.run.has_expected and 0 <= row < self.run.expected_tokens.shape[0]:
            self.expected_tokens = self.run.expected_tokens[row]
        if self.in_ends_set:
            self.run._move(self, False)
        r.sent_ns = fb_now_ns()
        self._send(request)

    @property
    def row(self):
        """Row of the request in flight, or of the last one."""
        return self.c.req.row

    @property
    def sent_ns(self):
        """When the request in flight (or the last one) was sent."""
        return self.c.req.sent_ns

    @property
    def last_was_reused(self):
        """The request in flight (or the last one) went out on a connection that had served before."""
        return self.reused

    @property
    def tokens_in_flight(self):
        """Output tokens the server's usage has counted so far for the request in flight; 0 once it
        ended (its tokens are then in the run's ``output_tokens``) or with no usage yet. For the
        progress display, read between drains: nothing on the hot path."""
        if not self.busy or self.c.req.end_ns != 0:
            return 0
        return self.c.req.completion_tokens

    cdef _send(self, bytes request):
        cdef Py_ssize_t n
        cdef const char *p
        if self.ssl_object is not None:
            self.ssl_object.write(request)
            request = self.ssl_out.read()
        p = request
        n = fb_net_send(self.fd, p, len(request))
        if n == len(request):
            return
        if n >= 0 or n == -EAGAIN:
            # The socket buffer is full: let the loop finish the write.
            self.send_task = self.loop.create_task(self._send_rest(request[max(n, 0):]))
            return
        self._fail_now(E_CONNECT, "send failed: %s" % os.strerror(-n))

    async def _send_rest(self, bytes rest):
        try:
            await self.loop.sock_sendall(self.sock, rest)
        except OSError as exc:
            self.send_task = None
            if self.busy:
                self._fail_now(E_CONNECT, "send failed: %s" % exc)
        else:
            self.send_task = None

    def abort(self, int error, str why=""):
        """End the request in flight now (timeout, time cap) and close the connection."""
        if self.busy:
            self.c.read_ts = fb_now_ns()
            _fail(&self.c, error, NULL)
            self._py_why = why
            self.close()
            self._finish()
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            self.run._unregister(self)
            if self.send_task is not None:
                # The loop still watches the fd for the rest of a request; a socket opened next may
                # get the same number, so the watch goes before the fd does.
                self.loop.remove_writer(self.fd)
                self.send_task.cancel()
                self.send_task = None
            self.sock.close()

    cdef _fail_now(self, int error, str why):
        self.c.read_ts = fb_now_ns()
        _fail(&self.c, error, NULL)
        self._py_why = why
        self.close()
        self._finish()

    cdef _read_ready(self):
        cdef int64_t kernel_rt_ns, ts
        cdef Py_ssize_t n
        cdef char *buf = self.run.read_buffer
        while not self.closed:
            n = fb_net_recv(self.fd, buf, READ_BUFFER_BYTES, &kernel_rt_ns)
            if n > 0:
                if kernel_rt_ns:
                    ts = kernel_rt_ns - self.run.realtime_offset_ns
                    self.run.kernel_reads += 1
                else:
                    ts = fb_now_ns()
                self.run.reads += 1
                self.c.read_output_events = 0  # per socket read, however many TLS records it holds
                if not self.busy:
                    # Bytes nobody asked for: the connection is out of step; drop it.
                    self.close()
                    return
                if self.ssl_object is not None:
                    self._feed_tls(buf, n, ts)
                else:
                    self._feed(buf, n, ts)
                if self.run.watching_ends:
                    self._watch_if_ending()
                if n < READ_BUFFER_BYTES and not (
                        self.busy and self.c.req.done_seen and self.c.http.state == FB_HTTP_S_BODY_EOF):
                    return
                # else: a close-delimited stream said [DONE]; look for its FIN now, not a wake-up later
            elif n == 0:
                self._on_eof()
                return
            elif n == -EAGAIN:
                return
            else:
                if self.busy:
                    self._fail_now(E_PROTOCOL if self.c.req.first_byte_ns else E_CONNECT,
                                   "connection error: %s" % os.strerror(-n))
                self.close()
                return

    cdef void _watch_if_ending(self) noexcept:
        """Coalescing: once at most one more chunk (of the largest size so far) is left of the
        stream, move the connection to the run's ends set, watched on every arrival."""
        cdef fb_req_t *r = &self.c.req
        cdef int64_t expected, left
        if self.in_ends_set or not self.busy or self.closed or not r.usage_seen:
            return
        expected = self.expected_tokens
        if expected <= 0:
            return
        left = expected - r.completion_tokens
        if left <= (r.max_chunk_tokens if r.max_chunk_tokens > 1 else 1):
            self.run._move(self, True)

    cdef _feed_tls(self, char *buf, Py_ssize_t n, int64_t ts):
        cdef bytes plain
        self.ssl_in.write(buf[:n])
        while self.busy:
            try:
                plain = self.ssl_object.read(READ_BUFFER_BYTES)
            except ssl.SSLWantReadError:
                return
            except ssl.SSLError as exc:
                self._fail_now(E_PROTOCOL, "TLS error: %s" % exc)
                return
            if not plain:
                self._on_eof()
                return
            self._feed(plain, len(plain), ts)

    cdef _feed(self, const char *buf, Py_ssize_t n, int64_t ts):
        cdef Py_ssize_t used
        cdef fb_req_t *r = &self.c.req
        self.c.read_ts = ts
        if r.first_byte_ns == 0:
            r.first_byte_ns = ts
        used = fb_http_feed(&self.c.http, buf, n, _on_body, &self.c)
        self.run.multi_event_reads += self.c.multi_event_reads
        self.run.output_events += self.c.output_events
        self.c.multi_event_reads = 0
        self.c.output_events = 0
        if used < 0:
            if used != -FB_ERR_CALLBACK:
                _fail(&self.c, E_PROTOCOL, _http_error_text(-used))
            self.close()
            self._finish()
            return
        if self.c.http.state == FB_HTTP_S_DONE:
            # Bytes after the response, or a server that will close: no reuse.
            if used < n or not self.c.http.keep_alive:
                self.close()
            self._finish()

    cdef _on_eof(self):
        if self.busy:
            if fb_http_feed_eof(&self.c.http) == 0:
                if self.c.read_ts == 0:  # else: the body ended with the last data read, not the FIN's
                    self.c.read_ts = fb_now_ns()   # (possibly coalesced) processing
                self.close()
                self._finish()
            else:
                self._fail_now(
                    E_PROTOCOL if self.c.req.first_byte_ns else E_CONNECT,
                    "the server closed the connection mid-response"
                    if self.c.req.first_byte_ns else "the server closed the connection before responding")
        self.close()

    cdef _finish(self):
        """Classify, write the request's row, record its chunk figures, resolve its Future."""
        cdef fb_req_t *r = &self.c.req
        cdef int status = self.c.http.status
        cdef int usage
        cdef int64_t row = r.row
        if r.error == E_OK:
            if status < 200 or status >= 300:
                r.error = E_HTTP_STATUS
                if status == 400 and b"context length" in self._errtext():
                    r.error = E_CONTEXT_LENGTH
            elif not self.c.http.event_stream:
                r.error = E_PROTOCOL
                r.why = "the response is not an event stream (is \"stream\" honoured?)"
            elif not r.done_seen:
                # Every OpenAI-compatible server ends a stream with [DONE]; without it the end of
                # the response may be a cut, not a finish.
                r.error = E_PROTOCOL
                r.why = "the stream ended without data: [DONE]"
                if self.c.http.content_coded:  # a coded body reads as no SSE at all ("none" is harmless)
                    r.why = "the response is compressed (Content-Encoding), which fastbench never asks for"
            elif r.n_ev == 0 and not r.usage_seen and not r.finish_seen:
                # An answer of no tokens still says why it stopped (finish_reason) or what it
                # counted (usage); a bare [DONE] says neither.
                r.error = E_PROTOCOL
                r.why = "the stream ended without output: no text, usage or finish_reason"
        r.end_ns = self.c.read_ts if self.c.read_ts else fb_now_ns()
        if r.usage_untrusted or (r.usage_seen and (
                (r.completion_tokens == 0 and r.n_ev > 0)  # text arrived, yet no token counted
                or 0 < self.expected_tokens < r.completion_tokens)):  # more than max_tokens
            usage = U_INCONSISTENT
        elif r.usage_seen and r.usage_chunks == r.n_ev:
            usage = U_PER_CHUNK
        elif r.usage_seen:
            usage = U_FINAL
        else:
            usage = U_NONE
        if row >= 0:
            self._write_row(row, status, usage)
            if r.error == E_OK:
                self._record_chunks(usage)
                self.run.completed += 1
                if self.c.save_outputs:
                    self.run.outputs[row] = self.c.out_buf[:self.c.out_len]
            elif r.error != E_CANCELLED:
                self.run.failed += 1
                self.run.error_messages[row] = self._error_message(status)
                self.run._check_error_rate()
            else:
                self.run.error_messages[row] = self._error_message(status)  # why it was cut short
        self.requests_served += 1
        if self.send_task is not None:
            # Answered before its request was all sent (an early 413, say): the rest of the body
            # would read as the next request, so the connection is not reused.
            self.close()
        if row >= 0 and not self.closed and not self.run.stopping:
            if self.run.refill:
                # Closed loop: the slot freed at this response's end; the next request goes out now,
                # without a trip through Python, and is due from this end stamp.
                nxt = self.run._claim_row()
                if nxt >= 0:
                    self._begin(self.run.request_bytes(nxt), nxt, r.end_ns, 0)
                    return
            elif self.run.chain_due:
                # Open loop: an arrival that waited for a slot takes this one now; due at its arrival.
                nxt = self.run._claim_due_row(fb_now_ns())
                if nxt >= 0:
                    self._begin(self.run.request_bytes(nxt), nxt,
                                self.run.arrival_base_ns + self.run.arrival_offsets[nxt], 0)
                    return
        self.busy = False
        fut = self.fut
        self.fut = None
        if fut is not None and not fut.done():
            fut.set_result(r.error)

    cdef bytes _errtext(self):
        return self.c.errtext[:self.c.errtext_len]

    cdef str _error_message(self, int status):
        cdef fb_req_t *r = &self.c.req
        text = self._errtext().decode("utf-8", "replace").strip()
        if len(text) > 300:
            text = text[:300] + "..."
        if self._py_why:
            why = self._py_why
            self._py_why = None
        elif r.why != NULL:
            why = (<bytes>r.why).decode()
        elif r.error in (E_HTTP_STATUS, E_CONTEXT_LENGTH):
            why = "HTTP %d" % status
        else:
            why = ""
        return "%s: %s" % (why, text) if text else why

    cdef void _write_row(self, int64_t row, int status, int usage) noexcept:
        cdef fb_req_t *r = &self.c.req
        cdef int64_t[:, ::1] rows = self.run.rows
        cdef int64_t output_tokens, max_tokens = r.max_chunk_tokens
        if usage == U_NONE or usage == U_INCONSISTENT:
            output_tokens = r.n_ev
        else:
            output_tokens = r.completion_tokens
        if usage != U_PER_CHUNK and r.n_ev:
            max_tokens = 1
        rows[row, C_INDEX] = row
        rows[row, C_SCHEDULED] = r.scheduled_ns
        rows[row, C_SENT] = r.sent_ns
        rows[row, C_FIRST_BYTE] = r.first_byte_ns
        rows[row, C_FIRST_TOKEN] = r.first_token_ns
        rows[row, C_FIRST_ANSWER] = r.first_answer_ns
        rows[row, C_END] = r.end_ns
        rows[row, C_PROMPT_TOKENS] = r.prompt_tokens
        rows[row, C_OUTPUT_TOKENS] = output_tokens
        rows[row, C_CHUNKS] = r.n_ev
        rows[row, C_EVENTS] = r.events
        rows[row, C_MAX_CHUNK_TOKENS] = max_tokens
        rows[row, C_ERROR] = r.error
        rows[row, C_HTTP_STATUS] = status
        rows[row, C_USAGE_SOURCE] = usage
        rows[row, C_CONNECT] = r.connect_ns
        self.run.output_tokens += output_tokens

    cdef void _record_chunks(self, int usage) noexcept:
        """Chunk gaps, per-token gaps and skew of a completed request into the run's histograms."""
        cdef fb_req_t *r = &self.c.req
        cdef size_t i
        cdef int64_t gap, k
        for i in range(r.n_ev):
            if r.ev[i].sent > 0:
                self.run.skew.record(r.ev[i].ts - r.ev[i].sent, 1)
            if i == 0:
                continue
            gap = r.ev[i].ts - r.ev[i - 1].ts
            self.run.itl_chunk.record(gap, 1)
            # Without per-chunk usage a chunk is taken as one token (stated in the result).
            k = r.ev[i].tokens if usage == U_PER_CHUNK and r.ev[i].tokens > 0 else 1
            self.run.itl_token.record(gap // k, k)


cdef const char *_http_error_text(Py_ssize_t code) noexcept:
    if code == FB_ERR_HTTP_STATUS_LINE:
        return "malformed HTTP status line"
    if code == FB_ERR_HTTP_HEADER:
        return "malformed HTTP header"
    if code == FB_ERR_HTTP_LINE_TOO_LONG:
        return "HTTP header line too long"
    if code == FB_ERR_HTTP_CHUNK:
        return "malformed chunked encoding"
    return "malformed HTTP response"
