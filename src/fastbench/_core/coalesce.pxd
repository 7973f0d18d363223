# Coalesced reads: the tick that bounds a read's delay, chosen from the chunk gaps (coalesce.pyx).
# Included by engine.pxd.


cdef enum CoalesceWhy:
    # Why automatic coalescing set the tick it set (RunState.coalescing names them: COALESCE_WHY)
    WHY_LEARNING = 0             # reads on every arrival until enough chunk gaps are seen
    WHY_GAPS = 1                 # a share of the short chunk gaps
    WHY_MAX = 2                  # the longest tick it may choose
    WHY_ENDS = 3                 # bounded so that ends that come unwatched keep the streams open
    WHY_FEW_READS = 4            # too few reads per tick to gain from one: on every arrival
    WHY_SHARED_READS = 5         # chunks of one stream shared reads beyond the server's own share: halved
    WHY_USER_STAMPS = 6          # a read without a kernel stamp: on every arrival for the rest of the run
    WHY_OPEN_LOOP = 7            # the core sends open-loop arrivals: on every arrival, so they stay on time


cdef enum:
    COALESCE_CHANGES = 64        # automatic coalescing: the tick's changes kept for the result


cdef class Tick:
    # Coalesced reads: the timerfd that bounds a read's delay, in the ends set; and with automatic
    # coalescing the state its choices are made from (coalesce.pyx). Made over a ReadySet.
    cdef ReadySet sets
    cdef int fd                        # the timerfd (owned)
    cdef readonly int64_t tick_ns      # its interval; 0 = reads on every arrival
    cdef bint auto                     # automatic: decisions every COALESCE_DECIDE_NS
    cdef bint inner_nested             # the inner set sits in the ends set: the loop wakes on every arrival
    cdef int64_t max_tick_ns           # the longest tick it may choose
    cdef int64_t decide_due_ns         # the next decision; INT64_MAX: none
    cdef int64_t hold_until_ns         # after chunks shared reads: the tick grows no longer before this
    cdef int64_t hold_ns               # that hold's length (doubles with each such back-off)
    cdef int64_t period_ns             # the period being judged began (the last decision)
    cdef int64_t period_reads          # reads, kernel-stamped reads, multi-event reads at its start
    cdef int64_t period_kernel_reads
    cdef int64_t period_multi
    cdef int64_t base_reads            # reads on every arrival, and of them multi-event ones: the
    cdef int64_t base_multi            # server's own share of events that come together
    cdef double ends_weight            # ends of requests (decayed), those not watched for (not in the
    cdef double ends_unwatched_weight  # ends set: seen only on a tick), and their durations (ns)
    cdef double ends_duration_ns
    cdef int64_t ends_unwatched        # requests whose end came while not in the ends set (auto only)
    cdef int64_t ticked_reads          # reads and multi-event reads while the tick ran (auto only)
    cdef int64_t ticked_multi_event_reads
    cdef int64_t last_short_gap_ns     # the short gap of the last decision (0: too few gaps)
    cdef int64_t change_ns[COALESCE_CHANGES]     # the tick's changes: when,
    cdef int64_t change_tick_ns[COALESCE_CHANGES]  # to what (0: every arrival),
    cdef int64_t change_gap_ns[COALESCE_CHANGES]   # the short gap then,
    cdef int change_why[COALESCE_CHANGES]        # and why (a CoalesceWhy value); the first ones and the last kept
    cdef int64_t changes               # changes made (more than COALESCE_CHANGES: the middle ones dropped)
    cdef void arm(self) noexcept
    cdef void clear(self) noexcept
    cdef void set_tick(self, int64_t tick_ns, int why, int64_t now) noexcept
    cdef void count_end(self, double duration_ns, bint watched) noexcept
