# cython: language_level=3
# ReadySet: the epoll sets a run's connections sit in, drained in C once per wake-up of the event loop.
# Included by engine.pyx.

cdef enum:
    END_RATIO_WINDOW = 256  # ends kept in the events-per-token figures (then halved)

# The share of the ends of streams without per-chunk usage that may come unwatched (read on the tick):
# fewer costs a wake-up on each of more of a stream's last chunks, for the few ends that come early;
# more lowers the tick the ends bound allows (coalesce.pyx). At 256 streams, 64 tokens and 1..4 tokens
# per event (a fixed share of the tokens asked for, 2026-12): 6 % of ends unwatched cost 9.2 us of CPU
# per chunk, 14 % 8.7, 27 % 8.4 (chat's 8.4-9.1), 62 % 12.8: the tick had fallen to every arrival.
cdef double END_UNWATCHED_SHARE = 0.2


cdef class ReadySet:
    """The inner epoll set of every connection of a run, and the ends set (with coalesced reads: the
    connections whose stream may end with their next chunk, and the tick); one read of each ready one
    per wake-up, each with its own kernel receive stamp."""

    def __cinit__(self):
        self.epfd = self.ends_epfd = -1  # first: __dealloc__ runs even when this fails
        self.watch_bucket = END_RATIO_BUCKETS  # until an end is seen: every event taken as one token
        self.conns = set()
        self.ready = <epoll_event *>_counted_malloc(READY_EVENTS * sizeof(epoll_event))
        if self.ready == NULL:
            raise MemoryError()
        self.epfd = _counted_fd(epoll_create1(EPOLL_CLOEXEC))
        self.ends_epfd = _counted_fd(epoll_create1(EPOLL_CLOEXEC))
        if self.epfd < 0 or self.ends_epfd < 0:
            raise OSError("epoll_create1 failed")

    def __dealloc__(self):
        _counted_free(self.ready)
        if self.epfd >= 0:
            _close_counted_fd(self.epfd)
        if self.ends_epfd >= 0:
            _close_counted_fd(self.ends_epfd)

    cdef register(self, StreamConnection conn):
        cdef epoll_event ev
        ev.events = EPOLLIN
        ev.data.ptr = <void *>conn
        if epoll_ctl(self.epfd, EPOLL_CTL_ADD, conn.fd, &ev) != 0:
            raise OSError("epoll_ctl(ADD) failed")
        self.conns.add(conn)

    cdef unregister(self, StreamConnection conn):
        cdef epoll_event ev
        cdef int removed = epoll_ctl(self.ends_epfd if conn.in_ends_set else self.epfd, EPOLL_CTL_DEL, conn.fd, &ev)
        if FB_DEBUG:
            _debug_assert(removed == 0 and conn in self.conns, "a connection unregistered twice")
        conn.in_ends_set = False
        self.conns.discard(conn)

    cdef void move(self, StreamConnection conn, bint to_ends) noexcept:
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

    cdef void learn_end(self, int64_t events, int64_t expected) noexcept:
        """A stream without per-chunk usage ended at the ``expected`` tokens it asked for, in ``events``
        output events. Its tokens so far are unknown (an event may hold several: speculative decoding),
        so a stream's end is foreseen from its events alone: it is watched once its events reach the
        share of its tokens that all but END_UNWATCHED_SHARE of such streams ended beyond. With one
        token per event that share is 1: watched for its last event, as with per-chunk usage."""
        cdef int64_t b = events * END_RATIO_BUCKETS // expected
        cdef int64_t rank, seen = 0
        cdef int i
        if b > END_RATIO_BUCKETS:
            b = END_RATIO_BUCKETS
        self.end_ratio_counts[b] += 1
        self.end_ratio_total += 1
        if self.end_ratio_total > 2 * END_RATIO_WINDOW:  # the recent ends weigh most
            self.end_ratio_total = 0
            for i in range(END_RATIO_BUCKETS + 1):
                self.end_ratio_counts[i] >>= 1
                self.end_ratio_total += self.end_ratio_counts[i]
        rank = <int64_t>(self.end_ratio_total * END_UNWATCHED_SHARE)
        for i in range(END_RATIO_BUCKETS + 1):
            seen += self.end_ratio_counts[i]
            if seen > rank:
                self.watch_bucket = i
                return

    cdef drain(self, int epfd, Dispatcher dispatcher):
        """Read every ready connection of set ``epfd``; with a dispatcher (open loop), an arrival due
        goes out before, between two sockets (a vDSO clock read per socket) and on its timer's fd.
        The work is bounded: each connection of a batch reads at most its share of WAKE_READ_BYTES
        (4 KiB at least: a batch holds READY_EVENTS), and a further batch is taken only while that total
        is not spent. What is left stays ready for the next wake-up, after the loop's timers; epoll hands
        the connections it did not return first next time, so none is starved."""
        cdef int n, i
        cdef void *ptr
        cdef StreamConnection conn
        cdef Py_ssize_t share, spent = 0
        if dispatcher is not None and dispatcher.next_due_ns <= fb_now_ns():
            dispatcher.dispatch()
        while True:
            n = epoll_wait(epfd, self.ready, READY_EVENTS, 0)
            share = WAKE_READ_BYTES // n if n > 0 else 0
            for i in range(n):
                if i + 1 < n:
                    fb_prefetch(self.ready[i + 1].data.ptr, self.hot_bytes)
                ptr = self.ready[i].data.ptr
                if ptr == NULL:  # the coalescing tick (see Tick)
                    continue
                if dispatcher is not None and ptr == <void *>dispatcher:  # the arrival timer
                    dispatcher.timer_fired()
                    continue
                conn = <StreamConnection>ptr
                if FB_DEBUG:
                    # an fd in the sets belongs to a registered connection (one that closed
                    # earlier in this batch is still kept alive by the driver's references)
                    _debug_assert(conn.closed or conn in self.conns, "a ready fd of no registered connection")
                spent += conn._read_ready(share)
                # An arrival due while many sockets are ready goes out between two of them,
                # not after the batch.
                if dispatcher is not None and dispatcher.next_due_ns <= fb_now_ns():
                    dispatcher.dispatch()
            if n < READY_EVENTS or spent >= WAKE_READ_BYTES:
                return
