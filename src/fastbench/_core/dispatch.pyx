# cython: language_level=3
# The open loop's sender: Pool (the idle connections) and Dispatcher, which sends each arrival from
# inside the wake-up that finds it due, with the arrival timer and its learnt lead (SharedDispatcher:
# under --workers' shared cap). RunState.dispatch_arrivals and share_arrivals make one, which is how
# its claims, its timer and its callbacks exist before its first send. Included by engine.pyx.


cdef class Pool:
    """Idle connected connections the core sends arrivals on (filled before the window opens);
    ``low``: fewer than this, and the dispatcher asks Python to open more."""

    def __cinit__(self):
        self.idle = []

    def __len__(self):
        """Connections in the pool (some may have closed since; they are dropped when taken)."""
        return len(self.idle)

    def take_idle(self):
        """An idle connection out of the pool (the Python path sends on it), or None."""
        return self.take()

    cdef StreamConnection take(self):
        cdef StreamConnection conn
        while self.idle:
            conn = <StreamConnection>self.idle.pop()
            if not conn.closed and not conn.busy:
                return conn
        return None


cdef class Dispatcher:
    """Open loop: the core sends each arrival when it is due, on an idle connection of the pool, while
    at most ``limit`` requests are in flight (``in_flight + reserved``). A timerfd in the set the event
    loop watches wakes the same drain as the sockets, and a drain looks at the next due time between
    two sockets, so no Python runs between "due" and "sent". With the pool empty it calls ``on_wake``
    and leaves the arrival to Python (which connects for it); ``on_wake`` is also called when the pool
    runs below its ``low`` and when the last request has ended."""

    def __cinit__(self):
        self.fd = -1  # first: __dealloc__ runs even when the set-up fails

    def __dealloc__(self):
        self.close_timer()

    cdef void watch_from(self, int epfd) noexcept:
        """The arrival timer into set ``epfd``, the one the loop watches now (it began coalescing)."""
        cdef epoll_event ev
        if self.fd < 0 or epfd == self.epfd:
            return
        epoll_ctl(self.epfd, EPOLL_CTL_DEL, self.fd, &ev)
        ev.events = EPOLLIN
        ev.data.ptr = <void *>self
        epoll_ctl(epfd, EPOLL_CTL_ADD, self.fd, &ev)
        self.epfd = epfd

    cdef void close_timer(self) noexcept:
        cdef epoll_event ev
        if self.fd >= 0:
            epoll_ctl(self.epfd, EPOLL_CTL_DEL, self.fd, &ev)
            _close_counted_fd(self.fd)
            self.fd = -1

    def claim(self, int64_t now):
        """Python's send: the next arrival when it is due by ``now`` (a pool miss: it connects for it),
        or -1. Under a shared cap use claim_due_with_slot."""
        return self.arrivals.claim(now)

    @property
    def arrival_head(self):
        """The next arrival not yet sent: the run's, with a shared cap; this process's otherwise."""
        return self.arrivals.head()

    @property
    def next_row(self):
        return self.arrivals.next_row

    def dispatch_due(self):
        """Send what is due now, and arm the timer for the next arrival (after Python claimed rows)."""
        self.dispatch()

    def wake_handled(self):
        """Python has looked: on_wake may be called again."""
        self.wake_pending = False

    cdef timer_fired(self):
        cdef uint64_t expirations
        read(self.fd, &expirations, sizeof(expirations))
        self.armed_ns = 0
        self.dispatch()

    cdef ask_python(self):
        if not self.wake_pending and self.on_wake is not None:
            self.wake_pending = True
            self.on_wake()

    cdef dispatch(self):
        """Send every arrival that is due, on connections of the pool, within the limit; then arm the
        timer for the next one. Sends can end at once (a failed send) and come back here: the outer
        call goes on with them."""
        if self.in_dispatch or self.fd < 0:  # fd < 0: ended (RunState.end_schedule)
            return
        self.in_dispatch = True
        try:
            self._send_due()
            if len(self.pool.idle) < self.pool.low:
                self.ask_python()
        finally:
            self.in_dispatch = False

    cdef _send_due(self):
        cdef int64_t due, now
        cdef bint learnt = False  # one sample per call: a burst's later arrivals were due already
        cdef StreamConnection conn
        cdef ArrivalClaims arrivals = self.arrivals
        self.next_due_ns = INT64_MAX  # until a slot or a connection frees (they call this)
        while not self.slots.stopping and arrivals.next_row < arrivals.n_rows:
            due = arrivals.due(arrivals.next_row)
            if due >= self.slots.send_until_ns:
                break  # past the time cap: never sent, and no timer for it
            now = fb_now_ns()
            if due > now + self.lead_ns:
                self.next_due_ns = due - self.lead_ns
                self.arm(due - self.lead_ns)
                break
            if self.slots.in_flight + self.slots.reserved >= self.slots.limit:
                self.held = True
                break  # the next request to end sends it (ArrivalClaims.chain)
            conn = self.pool.take()
            if conn is None:
                self.held = True
                self.ask_python()  # it connects for this arrival
                break
            if not self.held and not learnt:
                # How late the loop got here past the moment the lead set (a held-back
                # arrival's wait for a slot or a connection is not the loop's delay).
                self.learn_lead(now - (due - self.lead_ns))
                learnt = True
            self.held = False
            self.wait_out(now, due)
            arrivals.next_row += 1
            arrivals._publish()
            self.core_sends += 1
            conn._start_from_core(arrivals.next_row - 1, due)

    cdef bint chain_ended(self, StreamConnection conn, int error):
        """A chain of requests that the core began ended (conn is no longer busy): its connection back
        to the pool; or, when the kept-alive connection had been closed by the server, its slot held
        (reserved) for Python's retry of its last request, and True."""
        if (error == ERR_CONNECT and conn.reused and conn.c.req.row >= 0 and not self.slots.stopping
                and self.on_stale is not None):
            self.slots.reserved += 1
            self.on_stale(conn)
            return True
        if not conn.closed:
            self.pool.idle.append(conn)
        return False

    cdef void arm(self, int64_t due) noexcept:
        cdef itimerspec spec
        if due == self.armed_ns:
            return
        self.armed_ns = due
        spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = due // 1000000000
        spec.it_value.tv_nsec = due % 1000000000
        timerfd_settime(self.fd, TFD_TIMER_ABSTIME, &spec, NULL)

    cdef void learn_lead(self, int64_t delay) noexcept:
        """The lead follows how late the loop gets to an arrival past the time the lead set for it
        (the timer's wake-up, or a busy loop's check between sockets): ~the p99 of the last
        WAKE_DELAYS plus a margin, within [lead_min_ns, lead_max_ns]. A host whose wake-ups come late
        gets an earlier alarm; one whose come on time waits out no more than the least lead."""
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

    cdef void wait_out(self, int64_t now, int64_t due) noexcept:
        """The timer was armed lead_ns early: the rest, up to ``due``, is waited out here, in C."""
        cdef int64_t waited_from = now
        if now < due:
            while now < due:
                now = fb_now_ns()
            self.lead_wait_ns += now - waited_from


cdef _init_dispatcher(Dispatcher d, Slots slots, Pool pool, ArrivalClaims arrivals, int epfd, int64_t limit,
                      int64_t lead_min_ns, int64_t lead_max_ns, object on_wake, object on_stale):
    """The timer joins ``epfd`` (the set the loop watches), then the first look at what is due."""
    cdef epoll_event ev
    if limit < 1:
        raise ValueError("the concurrency limit must be at least 1")
    if not 0 < lead_min_ns <= lead_max_ns:
        raise ValueError("the arrival lead's bounds must be positive, the least first")
    d.slots = slots
    d.pool = pool
    d.arrivals = arrivals
    d.on_wake = on_wake
    d.on_stale = on_stale
    d.lead_min_ns = d.lead_ns = lead_min_ns
    d.lead_max_ns = lead_max_ns
    d.next_due_ns = INT64_MAX
    slots.limit = limit
    d.fd = _counted_fd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
    if d.fd < 0:
        raise OSError("timerfd_create failed")
    d.epfd = epfd
    ev.events = EPOLLIN
    ev.data.ptr = <void *>d  # not a connection: ReadySet.drain knows it by this
    if epoll_ctl(epfd, EPOLL_CTL_ADD, d.fd, &ev) != 0:
        raise OSError("epoll_ctl(ADD) failed")


cdef class SharedDispatcher(Dispatcher):
    """The dispatcher under --workers' shared cap: the oldest due arrival of the run, whoever's, goes
    out on a connection of this worker's pool once a slot of the run's is taken; the timer wakes this
    worker for its own arrivals only (``i mod workers == claimer - 1``). A slot that frees here sends
    the oldest due arrival, whoever's. Python's own sends (pool misses, stale retries) hold their slot
    until they give it back (give_slot)."""

    def claim_due_with_slot(self, int64_t now):
        """A slot of the run's taken and the oldest arrival due by ``now`` claimed with it, for Python to
        send (a pool miss); -1, holding nothing, when no slot is free or none is due. The slot is
        Python's until give_slot."""
        cdef Py_ssize_t row
        if not self.shared.take_slot():
            return -1
        row = self.shared.claim(now)
        if row < 0:
            self.give_slot()
        return row

    def claim_arrived(self, int64_t now):
        """At a stop: the oldest arrival due by ``now`` that no worker sent, claimed (and marked) with no
        slot, for this worker to record as cancelled while waiting; -1 when none is left. Every
        stopping worker takes them so, each exactly once."""
        return self.shared.claim(now)

    def give_slot(self):
        """Python's send (claim_due_with_slot, or a stale retry's kept slot) ended or was given up; its
        slot goes back to the run, and an arrival due and held for one, in any worker, goes now."""
        self.shared.give_slot()
        self.dispatch()

    cdef bint chain_ended(self, StreamConnection conn, int error):
        if Dispatcher.chain_ended(self, conn, error):
            return True  # a stale retry keeps the run's slot
        # the run's slot is given back (a Python send gives its own back, give_slot), and this worker
        # looks for what waited for one (the caller dispatches)
        self.shared.give_slot()
        return False

    cdef void arm_own(self, Py_ssize_t first, int64_t after) except *:
        """The timer to this worker's own next arrival (i mod stride == phase) from ``first`` that is
        due after ``after``: earlier ones are due already and wait for a slot or a connection, and
        whoever frees one sends them. None left: not armed (its Python looks every schedules.SHARED_POLL_S)."""
        cdef SharedArrivals s = self.shared
        cdef Py_ssize_t row, lo = first, hi = s.n_rows, mid
        while lo < hi:  # the first arrival due after ``after`` (offsets only grow)
            mid = (lo + hi) // 2
            if s.due(mid) > after:
                hi = mid
            else:
                lo = mid + 1
        row = lo + (self.phase - lo % self.stride + self.stride) % self.stride
        if row < s.n_rows and s.due(row) < self.slots.send_until_ns:
            self.next_due_ns = s.due(row) - self.lead_ns
            self.arm(self.next_due_ns)

    cdef _send_due(self):
        cdef int64_t due, now
        cdef Py_ssize_t row
        cdef bint learnt = False
        cdef StreamConnection conn
        cdef SharedArrivals s = self.shared
        self.next_due_ns = INT64_MAX
        while not self.slots.stopping:
            row = s.head()
            if row >= s.n_rows:  # every arrival sent, by some worker
                if self.slots.in_flight == 0:
                    self.ask_python()  # this worker's part is over
                return
            due = s.due(row)
            if due >= self.slots.send_until_ns:
                return  # past the time cap: never sent, and no timer for it
            now = fb_now_ns()
            if due > now + self.lead_ns:
                self.arm_own(row, now + self.lead_ns)
                return
            conn = self.pool.take()
            if conn is None:
                self.held = True
                self.ask_python()  # it connects for this arrival (claim_due_with_slot)
                break
            if not s.take_slot():
                self.pool.idle.append(conn)
                self.held = True
                break  # every slot of the run is busy: whoever frees one sends it
            if row % self.stride == self.phase and not self.held and not learnt:
                # its own arrival, woken for by its own timer (another's may have waited for a slot)
                self.learn_lead(now - (due - self.lead_ns))
                learnt = True
            self.held = False
            self.wait_out(now, due)
            if not s.take(row):
                # another worker sent it meanwhile: the slot back, and look again
                s.give_slot()
                self.pool.idle.append(conn)
                continue
            self.core_sends += 1
            conn._start_from_core(row, due)
        # held (no slot or no connection), or stopping: the timer to this worker's own next arrival
        # not due yet, so that it never spins on arrivals already waiting
        if not self.slots.stopping:
            now = fb_now_ns()
            self.arm_own(s.head(), now + self.lead_ns)
