# cython: language_level=3
# Coalesced reads: Tick, the timer the sockets are read on, and automatic coalescing, which chooses it
# from the chunk gaps the run's own kernel stamps show (RunState.coalesce_auto). Looked at every
# COALESCE_DECIDE_NS from a wake-up, in C: nothing per chunk but one histogram count (events.pyx).
# Included by engine.pyx.
#
# What a tick may cost, and how each rule keeps it from costing that:
# - A chunk's stamp: segments queued in a socket before one read all get the newest one's stamp
#   (DESIGN.md), so two chunks of one stream must never wait for the same read. Reads come at least
#   every tick (plus the loop's wake-up delay), so the tick stays at COALESCE_GAP_SHARE of the short
#   gaps (the COALESCE_SHORT_QUANTILE of the last few thousand); the rest of the gap is margin for a
#   late wake-up. Gaps that shrink lower it at the next look. Reads that carry several events of one
#   stream beyond the share seen on every arrival (a server's own bursts, which no tick causes) halve
#   it at once and hold it from growing, a hold that doubles each time (as TCP backs off).
# - A stream kept open: a stream whose next chunk may be its last is watched on every arrival (the
#   ends set, watch_ends; without per-chunk usage, foreseen from its events: ReadySet.learn_end, which
#   leaves a share of such ends unwatched); one that ends unforeseen (EOS, no max_tokens) is seen
#   on the next tick, on average half a tick late, and in closed loop its slot's next request with
#   it. So the tick is also held to 2 * COALESCE_OPEN_LOSS * (mean request time) / (share of ends
#   unwatched): such late ends cost at most COALESCE_OPEN_LOSS of the streams kept open. With no end
#   seen yet, ends are taken as watched when watch_ends is on, else as all unwatched and the request
#   time as the time since the start (a lower bound).
# - A stamp at all: a read without a kernel stamp is stamped when it is read; then every arrival, to
#   the end of the run.
# - An arrival on time: in open loop the arrival timer sits in the set the loop watches either way.
#   bench/open_loop_lag.py saw the send lag's median grow by 10-45 us with a tick, so while the core
#   sends arrivals (dispatch_arrivals) reads stay on every arrival; --coalesce-ms X still coalesces
#   there when asked. (That growth was mostly a watched connection's move back to the inner set
#   before its next send, since moved after it: a fixed 8 ms then matched main's median. Lifting
#   this rule waits for a measurement of auto ticking in open loop.)
# - CPU: fewer than 4 reads per tick gain too little over a wake-up per arrival (2 to go back), and a
#   tick under COALESCE_TICK_MIN_NS would wake about as often as the arrivals.

cdef enum:
    COALESCE_DECIDE_NS = 50_000_000     # between two looks at the figures
    COALESCE_MIN_GAPS = 1000            # gaps seen before a first tick (the short quantile needs them)
    COALESCE_GAP_WINDOW = 4096          # gaps kept: the histogram is halved past twice this
    COALESCE_TICK_MIN_NS = 1_000_000    # a shorter tick: reads on every arrival instead
    COALESCE_HOLD_NS = 1_000_000_000    # the first hold after chunks shared reads (doubled up to 32x)
    COALESCE_ENDS_WINDOW = 256          # ends kept in the unwatched share and mean time (then halved)

cdef double COALESCE_GAP_SHARE = 0.4        # the tick, as a share of the short gap
cdef double COALESCE_SHORT_QUANTILE = 0.001  # the short gap: this quantile of the gaps kept
cdef double COALESCE_OPEN_LOSS = 0.0005     # the streams kept open that unwatched ends may cost

# CoalesceWhy's names, as RunState.coalescing gives them
COALESCE_WHY = ("learning", "gaps", "max", "ends", "few reads", "shared reads", "user stamps", "open loop")


cdef class Tick:
    """The tick of coalesced reads, over a run's ReadySet: a timerfd in the ends set, moved to
    ``tick_ns`` from every wake-up (see RunState.coalesce); with ``auto`` its interval is chosen
    here, and changed, and every change logged for the result (RunState.coalescing)."""

    def __cinit__(self, ReadySet sets, int64_t tick_ns, bint auto, int64_t now):
        cdef epoll_event ev
        self.fd = -1  # first: __dealloc__ runs even when this fails
        self.sets = sets
        self.decide_due_ns = INT64_MAX
        self.fd = _counted_fd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC))
        if self.fd < 0:
            raise OSError("timerfd_create failed")
        ev.events = EPOLLIN
        ev.data.ptr = NULL  # not a connection: ReadySet.drain passes over it
        if epoll_ctl(sets.ends_epfd, EPOLL_CTL_ADD, self.fd, &ev) != 0:
            raise OSError("epoll_ctl(ADD) failed")
        self.tick_ns = tick_ns
        self.auto = auto
        if auto:
            self.max_tick_ns = tick_ns
            self.hold_ns = COALESCE_HOLD_NS
            self.period_ns = now
            self.decide_due_ns = now + COALESCE_DECIDE_NS
            self.set_tick(0, WHY_LEARNING, now)
        else:
            self.arm()

    def __dealloc__(self):
        if self.fd >= 0:
            _close_counted_fd(self.fd)

    cdef void arm(self) noexcept:
        cdef itimerspec spec
        cdef int64_t due
        if self.tick_ns <= 0:
            return
        due = fb_now_ns() + self.tick_ns
        spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
        spec.it_value.tv_sec = due // 1000000000
        spec.it_value.tv_nsec = due % 1000000000
        timerfd_settime(self.fd, TFD_TIMER_ABSTIME, &spec, NULL)

    cdef void clear(self) noexcept:
        """An expiry consumed, if the wake-up was one."""
        cdef uint64_t expirations
        if self.tick_ns:
            read(self.fd, &expirations, sizeof(expirations))

    cdef void set_tick(self, int64_t tick_ns, int why, int64_t now) noexcept:
        """The tick to ``tick_ns`` (0: reads on every arrival), and the change logged."""
        cdef epoll_event ev
        cdef itimerspec spec
        cdef uint64_t expirations
        cdef Py_ssize_t k
        ev.events = EPOLLIN
        ev.data.ptr = NULL  # not a connection: ReadySet.drain passes over it
        if tick_ns > 0 and self.inner_nested:
            epoll_ctl(self.sets.ends_epfd, EPOLL_CTL_DEL, self.sets.epfd, &ev)
            self.inner_nested = False
        elif tick_ns == 0 and not self.inner_nested:
            epoll_ctl(self.sets.ends_epfd, EPOLL_CTL_ADD, self.sets.epfd, &ev)
            self.inner_nested = True
        self.tick_ns = tick_ns
        if tick_ns > 0:
            self.arm()
        else:
            spec.it_interval.tv_sec = spec.it_interval.tv_nsec = 0
            spec.it_value.tv_sec = spec.it_value.tv_nsec = 0
            timerfd_settime(self.fd, 0, &spec, NULL)  # disarmed
            read(self.fd, &expirations, sizeof(expirations))  # and an expiry not yet read, cleared
        # the first COALESCE_CHANGES - 1 changes, and the latest in the last slot
        k = self.changes if self.changes < COALESCE_CHANGES else COALESCE_CHANGES - 1
        self.change_ns[k] = now
        self.change_tick_ns[k] = tick_ns
        self.change_gap_ns[k] = self.last_short_gap_ns
        self.change_why[k] = why
        self.changes += 1

    cdef void count_end(self, double duration_ns, bint watched) noexcept:
        """A request's end, for the bound that keeps streams open (automatic coalescing only)."""
        self.ends_weight += 1.0
        self.ends_duration_ns += duration_ns
        if not watched:
            self.ends_unwatched += 1
            self.ends_unwatched_weight += 1.0

    def summary(self):
        """What automatic coalescing chose, as RunState.coalescing gives it; None without it."""
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


cdef int64_t _short_gap_ns(RunState run, int64_t *total) noexcept:
    """The short gap (at COALESCE_SHORT_QUANTILE of the gaps kept; its bucket's lower bound, never
    more than the gap), and in ``total`` the gaps kept."""
    cdef int64_t count = 0, seen = 0, rank
    cdef int b
    for b in range(FB_GAP_BUCKETS):
        count += run.gap_counts[b]
    total[0] = count
    if count == 0:
        return 0
    rank = <int64_t>(count * COALESCE_SHORT_QUANTILE)
    for b in range(FB_GAP_BUCKETS):
        seen += run.gap_counts[b]
        if seen > rank:
            return fb_gap_bucket_low(b)
    return 0


cdef inline int64_t _bucket_floor(int64_t ns) noexcept:
    """``ns`` down to a gap bucket's lower bound: ticks move in steps of 1/8 of a power of two, not
    with every small change of the figures."""
    return fb_gap_bucket_low(fb_gap_bucket(ns)) if ns > 0 else 0


cdef void _coalesce_decide(Tick ticker, RunState run, int64_t now, bint dispatching) noexcept:
    """One look at the period since the last: back off, or choose the tick the figures allow."""
    cdef int64_t reads = run.reads - ticker.period_reads
    cdef int64_t kernel = run.kernel_reads - ticker.period_kernel_reads
    cdef int64_t multi = run.multi_event_reads - ticker.period_multi
    cdef int64_t elapsed = now - ticker.period_ns
    cdef int64_t tick = ticker.tick_ns, total, short_gap, target, bound
    cdef double expected, unwatched_share, duration
    cdef int why, b
    ticker.period_ns = now
    ticker.period_reads = run.reads
    ticker.period_kernel_reads = run.kernel_reads
    ticker.period_multi = run.multi_event_reads
    ticker.decide_due_ns = now + COALESCE_DECIDE_NS
    if reads > kernel:
        ticker.decide_due_ns = INT64_MAX  # no more decisions
        ticker.auto = False
        ticker.set_tick(0, WHY_USER_STAMPS, now)
        return
    if tick == 0:
        ticker.base_reads += reads
        ticker.base_multi += multi
    else:
        ticker.ticked_reads += reads
        ticker.ticked_multi_event_reads += multi
        expected = reads * (<double>ticker.base_multi / ticker.base_reads if ticker.base_reads else 0.0)
        if multi > expected + 1.0 + 3.0 * sqrt(expected):  # beyond the server's own, by more than noise
            ticker.hold_until_ns = now + ticker.hold_ns
            if ticker.hold_ns < 32 * <int64_t>COALESCE_HOLD_NS:
                ticker.hold_ns *= 2
            tick = _bucket_floor(tick // 2)
            ticker.set_tick(tick if tick >= COALESCE_TICK_MIN_NS else 0, WHY_SHARED_READS, now)
            return
    short_gap = _short_gap_ns(run, &total)
    if total > 2 * COALESCE_GAP_WINDOW:
        for b in range(FB_GAP_BUCKETS):
            run.gap_counts[b] >>= 1
    if total < COALESCE_MIN_GAPS:
        return
    ticker.last_short_gap_ns = short_gap
    target = <int64_t>(short_gap * COALESCE_GAP_SHARE)
    why = WHY_GAPS
    if target > ticker.max_tick_ns:
        target = ticker.max_tick_ns
        why = WHY_MAX
    if ticker.ends_weight > 0:
        unwatched_share = ticker.ends_unwatched_weight / ticker.ends_weight
        duration = ticker.ends_duration_ns / ticker.ends_weight
    else:
        unwatched_share = 0.0 if ticker.sets.watching_ends else 1.0
        duration = <double>(now - ticker.change_ns[0])
    if unwatched_share > 0:
        bound = <int64_t>(2.0 * COALESCE_OPEN_LOSS * duration / unwatched_share)
        if bound < target:
            target = bound
            why = WHY_ENDS
    if ticker.ends_weight > 2 * COALESCE_ENDS_WINDOW:
        ticker.ends_weight /= 2
        ticker.ends_unwatched_weight /= 2
        ticker.ends_duration_ns /= 2
    target = _bucket_floor(target)
    if dispatching:
        target = 0
        why = WHY_OPEN_LOOP
    elif target < COALESCE_TICK_MIN_NS:
        target = 0
    elif reads * target < (2 if tick else 4) * elapsed:  # reads per tick, at this period's rate
        target = 0
        why = WHY_FEW_READS
    if target < tick or (target > tick and now >= ticker.hold_until_ns and (tick == 0 or target >= tick + tick // 4)):
        ticker.set_tick(target, why, now)
    elif why == WHY_OPEN_LOOP and ticker.change_why[min(ticker.changes, COALESCE_CHANGES) - 1] != WHY_OPEN_LOOP:
        ticker.set_tick(0, why, now)  # no change, but the result says why it stays on every arrival
