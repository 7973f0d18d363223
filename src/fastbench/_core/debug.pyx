# cython: language_level=3
# The debug build's checks, in the manner of asyncpg's `if PG_DEBUG:` and uvloop's _debug_* counters.
# FB_DEBUG is 1 when the extension is built with FASTBENCH_DEBUG=1 or FASTBENCH_ASAN=1 (setup.py) and a
# C constant 0 otherwise, so every `if FB_DEBUG:` block, the checks and the counting alike, is dropped
# by the C compiler in a release build. Included by engine.pyx.


cdef struct DebugCounters:
    # Pairs that balance at rest (after a run and a garbage collection).
    int64_t connections_made      # StreamConnection objects, counted once their buffers exist
    int64_t connections_freed
    int64_t runs_made             # RunState objects, likewise
    int64_t runs_freed
    int64_t buffers_allocated     # C buffers: read buffers, epoll arrays, event stamps, SSE, outputs, HDR counts
    int64_t buffers_freed
    int64_t fds_opened            # epoll sets and timerfds the core opened itself
    int64_t fds_closed
    int64_t requests_begun        # requests handed to a connection
    int64_t requests_ended        # requests finished, each once (row written, or a warm-up done)
    # Not a pair: requests whose head and body were joined into one bytes object before sending
    # (TLS, or a send the kernel took only part of); plain TCP sends the parts as they are.
    int64_t requests_joined
    # Not a pair: times a connection's whole-answer buffer grew (whole.pyx): once per doubling, never per request
    int64_t answer_grows


cdef DebugCounters _debug


def debug_counters():
    """The debug build's counters (the fields of DebugCounters in debug.pyx) as a dict, or None in
    a release build, which counts nothing. At rest each pair balances: made == freed,
    allocated == freed, opened == closed, begun == ended."""
    if not FB_DEBUG:
        return None
    return _debug


cdef inline void _debug_assert(bint ok, const char *what) noexcept nogil:
    """Under ``if FB_DEBUG:``: stop the process at a broken invariant of the core, saying which."""
    if not ok:
        fb_debug_fail(what)


cdef inline void *_counted_malloc(size_t size) noexcept nogil:
    cdef void *p = malloc(size)
    if FB_DEBUG and p != NULL:
        _debug.buffers_allocated += 1
    return p


cdef inline void *_counted_calloc(size_t n, size_t size) noexcept nogil:
    cdef void *p = calloc(n, size)
    if FB_DEBUG and p != NULL:
        _debug.buffers_allocated += 1
    return p


cdef inline void *_counted_realloc(void *p, size_t size) noexcept nogil:
    """realloc; a buffer it makes from NULL is a new one."""
    cdef void *q = realloc(p, size)
    if FB_DEBUG and p == NULL and q != NULL:
        _debug.buffers_allocated += 1
    return q


cdef inline void _counted_free(void *p) noexcept nogil:
    if FB_DEBUG and p != NULL:
        _debug.buffers_freed += 1
    free(p)


cdef inline int _counted_fd(int fd) noexcept nogil:
    """An fd the core opens itself (epoll set, timerfd); returned as is."""
    if FB_DEBUG and fd >= 0:
        _debug.fds_opened += 1
    return fd


cdef inline void _close_counted_fd(int fd) noexcept nogil:
    if FB_DEBUG:
        _debug.fds_closed += 1
    close(fd)
