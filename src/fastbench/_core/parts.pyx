# cython: language_level=3
# Request bodies sent from parts: a trace's prompts are runs of one shared token buffer, so a body is
# its small head, its runs and its small tail, handed to sendmsg as they lie (no joined copy per body,
# and a block many requests carry is held once). Included by engine.pyx.


from array import array as _array


cdef class TokenRuns:
    """One buffer many request bodies are cut from, and its runs: ``runs`` holds each run's first byte
    and end, flat (int64). Checked once here, against a copy of ``runs`` kept here (the caller's array may
    change after), so that a send never reads outside the buffer."""

    def __cinit__(self, object buffer, object runs):
        cdef const unsigned char[::1] data = buffer
        cdef const int64_t[::1] given = runs
        cdef Py_ssize_t i, n = given.shape[0]
        if n % 2:
            raise ValueError("runs must be (start, end) pairs, flat")
        own = _array("q", PyBytes_FromStringAndSize(<const char *>&given[0] if n else NULL, n * 8))
        cdef const int64_t[::1] flat = own
        for i in range(0, n, 2):
            if not 0 <= flat[i] <= flat[i + 1] <= data.shape[0]:
                raise ValueError(f"run {i // 2} ({flat[i]}, {flat[i + 1]}) lies outside the buffer "
                                 f"of {data.shape[0]} bytes")
        self.buffer = buffer
        self.runs_array = own
        self._data = data
        self._runs = flat
        self.base = <const char *>&data[0] if data.shape[0] else NULL
        self.n_runs = n // 2

    def __reduce__(self):
        # Pickled once however many bodies share it (pickle's memo): --workers and --ray ship the buffer
        # and the runs, not a copy per body.
        return TokenRuns, (self.buffer, self.runs_array)

    def __len__(self):
        return self.n_runs


cdef class BodyParts:
    """A request body as parts: ``head``, runs ``first`` to ``end`` (exclusive) of ``source``, ``tail``.
    The core sends them as they lie; ``bytes(parts)`` is the body they make, byte for byte."""

    def __cinit__(self, bytes head not None, TokenRuns source not None, Py_ssize_t first, Py_ssize_t end,
                 bytes tail not None):
        cdef Py_ssize_t i, length = len(head) + len(tail)
        if not 0 <= first <= end <= source.n_runs:
            raise ValueError(f"runs {first}..{end} outside the {source.n_runs} runs of the buffer")
        for i in range(first, end):
            length += source._runs[2 * i + 1] - source._runs[2 * i]
        self.head = head
        self.tail = tail
        self.source = source
        self.first = first
        self.end = end
        self.length = length

    def __len__(self):
        return self.length

    def __bytes__(self):
        return self.joined()

    def __reduce__(self):
        return BodyParts, (self.head, self.source, self.first, self.end, self.tail)

    def __repr__(self):
        return f"<BodyParts of {self.length} bytes: {self.end - self.first} runs>"

    cpdef bytes joined(self):
        """The body in one bytes object (TLS, a send the socket took in part, the rare body of more
        parts than one sendmsg takes)."""
        cdef bytes out = PyBytes_FromStringAndSize(NULL, self.length)
        cdef char *at = PyBytes_AS_STRING(out)
        cdef Py_ssize_t i, start, n
        cdef TokenRuns source = self.source
        memcpy(at, <char *>self.head, len(self.head))
        at += len(self.head)
        for i in range(self.first, self.end):
            start = source._runs[2 * i]
            n = source._runs[2 * i + 1] - start
            memcpy(at, source.base + start, n)
            at += n
        memcpy(at, <char *>self.tail, len(self.tail))
        return out

    cdef int fill(self, iovec *parts, int room) noexcept:
        """Point ``parts`` at the body's pieces; returns how many, or -1 when they need more than ``room``."""
        cdef TokenRuns source = self.source
        cdef Py_ssize_t i
        cdef int count = 0
        if self.end - self.first + 2 > room:
            return -1
        parts[0].iov_base = <char *>self.head
        parts[0].iov_len = len(self.head)
        count = 1
        for i in range(self.first, self.end):
            parts[count].iov_base = <char *>(source.base + source._runs[2 * i])
            parts[count].iov_len = source._runs[2 * i + 1] - source._runs[2 * i]
            count += 1
        parts[count].iov_base = <char *>self.tail
        parts[count].iov_len = len(self.tail)
        return count + 1


cdef inline bytes _wire(bytes head, char *length_line, Py_ssize_t length_len, object body):
    """The request joined into one bytes object (where it cannot go as it lies)."""
    if FB_DEBUG:
        _debug.requests_joined += 1
    return head + length_line[:length_len] + (<bytes>body if type(body) is bytes else (<BodyParts>body).joined())


cdef inline _check_body(object body):
    if type(body) is not bytes and type(body) is not BodyParts:
        raise TypeError(f"a request body is bytes or BodyParts, not {type(body).__name__}")
