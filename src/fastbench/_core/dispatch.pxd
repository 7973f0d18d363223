# Dispatch: the open loop's sends from inside the core, on a pool of idle connections (dispatch.pyx).
# Included by engine.pxd.


cdef enum:
    LEAD_MARGIN_NS = 10000       # added to the learnt wake-up delay
    WAKE_DELAYS = 128            # the loop's delays in getting to an arrival the lead is learnt from


cdef class Pool:
    # Idle connected connections the core sends open-loop arrivals on (filled before the window).
    cdef list idle
    cdef public int64_t low            # fewer idle than this: the dispatcher asks Python to top up
    cdef StreamConnection take(self)


cdef class Dispatcher:
    # Open loop: a due arrival goes out from inside the wake-up that finds it due, on an idle
    # connection of the pool, with no Python in between; the arrival timer and its learnt lead.
    cdef Slots slots
    cdef Pool pool
    cdef ArrivalClaims arrivals
    cdef int fd                        # the arrival timer (a timerfd in the set the loop watches)
    cdef int epfd                      # the set it is in
    cdef int64_t armed_ns              # the deadline it is armed for; 0 when not armed
    cdef int64_t next_due_ns           # when to look again; INT64_MAX: not before a slot or a connection frees
    cdef object on_wake                # called (once until wake_handled) when Python has work
    cdef object on_stale               # called with a connection whose core-sent request met a stale one
    cdef bint wake_pending             # on_wake called and not yet handled
    cdef bint in_dispatch              # dispatch is running (sends can end, and re-enter it)
    cdef bint held                     # the next arrival waited for a slot or a connection
    cdef readonly int64_t core_sends   # arrivals the core sent from the pool
    cdef readonly int64_t lead_ns      # arm the timer this much early and wait out the rest in C; it
    cdef readonly int64_t lead_min_ns  # follows the timer's wake-up delays, within these bounds
    cdef readonly int64_t lead_max_ns
    cdef int64_t wake_delays[WAKE_DELAYS]  # the loop's last delays in getting to an arrival (a ring)
    cdef readonly int64_t lead_samples # delays learnt from
    cdef readonly int64_t lead_wait_ns # time spent waiting out leads in C (what the lead costs in CPU)
    cdef dispatch(self)
    cdef _send_due(self)
    cdef timer_fired(self)
    cdef ask_python(self)
    cdef bint chain_ended(self, StreamConnection conn, int error)
    cdef void arm(self, int64_t due) noexcept
    cdef void learn_lead(self, int64_t delay) noexcept
    cdef void wait_out(self, int64_t now, int64_t due) noexcept
    cdef void watch_from(self, int epfd) noexcept
    cdef void close_timer(self) noexcept


cdef class SharedDispatcher(Dispatcher):
    cdef SharedArrivals shared
    cdef int64_t stride                # the run's workers: this one's timer wakes for arrivals
    cdef int64_t phase                 # i mod stride == phase only
    cdef void arm_own(self, Py_ssize_t first, int64_t after) except *
