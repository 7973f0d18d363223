# Request bodies sent from parts of one shared buffer (parts.pyx). Included by engine.pxd.


cdef class TokenRuns:
    cdef readonly object buffer        # the bytes every run is cut from (kept alive with base)
    cdef readonly object runs_array    # int64 (start, end) per run, flat: its own copy (an array.array)
    cdef const unsigned char[::1] _data
    cdef const int64_t[::1] _runs
    cdef const char *base
    cdef readonly Py_ssize_t n_runs


cdef class BodyParts:
    cdef readonly bytes head
    cdef readonly bytes tail
    cdef readonly TokenRuns source
    cdef readonly Py_ssize_t first
    cdef readonly Py_ssize_t end
    cdef readonly Py_ssize_t length
    cpdef bytes joined(self)
    cdef int fill(self, iovec *parts, int room) noexcept
