# cython: language_level=3
# Automatic coalescing: which tick the sockets are read on, chosen from the chunk gaps the run's own
# kernel stamps show (RunState.coalesce_auto; the mechanism, _set_tick, is in run.pyx). Looked at
# every COALESCE_DECIDE_NS from a wake-up, in C: nothing per chunk but one histogram count (events.pyx).
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
#   ends set, watch_ends); one that ends unforeseen (EOS, no max_tokens, no per-chunk usage) is seen
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


cdef void _coalesce_decide(RunState run, int64_t now) noexcept:
    """One look at the period since the last: back off, or choose the tick the figures allow."""
    cdef int64_t reads = run.reads - run.period_reads
    cdef int64_t kernel = run.kernel_reads - run.period_kernel_reads
    cdef int64_t multi = run.multi_event_reads - run.period_multi
    cdef int64_t elapsed = now - run.period_ns
    cdef int64_t tick = run.tick_ns, total, short_gap, target, bound
    cdef double expected, unwatched_share, duration
    cdef int why, b
    run.period_ns = now
    run.period_reads = run.reads
    run.period_kernel_reads = run.kernel_reads
    run.period_multi = run.multi_event_reads
    run.decide_due_ns = now + COALESCE_DECIDE_NS
    if reads > kernel:
        run.decide_due_ns = INT64_MAX  # no more decisions
        run.auto_coalesce = False
        run._set_tick(0, WHY_USER_STAMPS, now)
        return
    if tick == 0:
        run.base_reads += reads
        run.base_multi += multi
    else:
        run.ticked_reads += reads
        run.ticked_multi_event_reads += multi
        expected = reads * (<double>run.base_multi / run.base_reads if run.base_reads else 0.0)
        if multi > expected + 1.0 + 3.0 * sqrt(expected):  # beyond the server's own, by more than noise
            run.hold_until_ns = now + run.hold_ns
            if run.hold_ns < 32 * <int64_t>COALESCE_HOLD_NS:
                run.hold_ns *= 2
            tick = _bucket_floor(tick // 2)
            run._set_tick(tick if tick >= COALESCE_TICK_MIN_NS else 0, WHY_SHARED_READS, now)
            return
    short_gap = _short_gap_ns(run, &total)
    if total > 2 * COALESCE_GAP_WINDOW:
        for b in range(FB_GAP_BUCKETS):
            run.gap_counts[b] >>= 1
    if total < COALESCE_MIN_GAPS:
        return
    run.last_short_gap_ns = short_gap
    target = <int64_t>(short_gap * COALESCE_GAP_SHARE)
    why = WHY_GAPS
    if target > run.auto_max_tick_ns:
        target = run.auto_max_tick_ns
        why = WHY_MAX
    if run.ends_weight > 0:
        unwatched_share = run.ends_unwatched_weight / run.ends_weight
        duration = run.ends_duration_ns / run.ends_weight
    else:
        unwatched_share = 0.0 if run.watching_ends else 1.0
        duration = <double>(now - run.change_ns[0])
    if unwatched_share > 0:
        bound = <int64_t>(2.0 * COALESCE_OPEN_LOSS * duration / unwatched_share)
        if bound < target:
            target = bound
            why = WHY_ENDS
    if run.ends_weight > 2 * COALESCE_ENDS_WINDOW:
        run.ends_weight /= 2
        run.ends_unwatched_weight /= 2
        run.ends_duration_ns /= 2
    target = _bucket_floor(target)
    if run.dispatching:
        target = 0
        why = WHY_OPEN_LOOP
    elif target < COALESCE_TICK_MIN_NS:
        target = 0
    elif reads * target < (2 if tick else 4) * elapsed:  # reads per tick, at this period's rate
        target = 0
        why = WHY_FEW_READS
    if target < tick or (target > tick and now >= run.hold_until_ns and (tick == 0 or target >= tick + tick // 4)):
        run._set_tick(target, why, now)
    elif why == WHY_OPEN_LOOP and run.change_why[min(run.changes, COALESCE_CHANGES) - 1] != WHY_OPEN_LOOP:
        run._set_tick(0, why, now)  # no change, but the result says why it stays on every arrival
