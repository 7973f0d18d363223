# cython: language_level=3
# A trace file read straight into numpy columns (csrc/fb_trace.c), and each hash id's first occurrence:
# the bulk of building a trace replay's 100,000 requests, which orjson's Python ints made most of the
# build (bench/bench_trace.py). Not per request: once per run. Included by engine.pyx.


def scan_trace(const unsigned char[::1] data not None, tuple keys not None, int64_t[::1] line not None,
               double[::1] stamp not None, int64_t[::1] input_lengths not None,
               int64_t[::1] output_lengths not None, int64_t[::1] ids_end not None, int64_t[::1] ids not None):
    """Read ``data`` (a trace's JSONL) into the columns given, ``keys`` the four field names as bytes
    (timestamp, input length, output length, hash ids). Returns (records, hash ids) written, or None
    where a line is not one the scanner takes (the caller then parses the file another way)."""
    cdef fb_trace_t t
    cdef Py_ssize_t k, rows = line.shape[0]
    if len(keys) != FB_TRACE_FIELDS:
        raise ValueError(f"{FB_TRACE_FIELDS} field names, not {len(keys)}")
    if not (stamp.shape[0] == input_lengths.shape[0] == output_lengths.shape[0] == ids_end.shape[0] == rows):
        raise ValueError("the record columns differ in length")
    for k in range(FB_TRACE_FIELDS):
        key = keys[k]
        if type(key) is not bytes:
            raise TypeError("the field names must be bytes")
        t.key[k] = PyBytes_AS_STRING(key)
        t.key_len[k] = PyBytes_GET_SIZE(key)
    if data.shape[0] == 0 or rows == 0:
        return None
    # an empty column's [0] is out of bounds: a zero-length buffer's address is never read (capacity 0)
    t.line, t.stamp, t.input, t.output, t.ids_end = &line[0], &stamp[0], &input_lengths[0], &output_lengths[0], &ids_end[0]
    t.cap_records = rows
    t.ids = &ids[0] if ids.shape[0] else NULL
    t.cap_ids = ids.shape[0]
    with nogil:
        rc = fb_trace_scan(<const char *>&data[0], data.shape[0], &t)
    if rc != 0:
        return None
    return t.n_records, t.n_ids


def lay_out_blocks(const int64_t[::1] ids not None, const int64_t[::1] starts not None,
                   const int64_t[::1] n_used not None, const int64_t[::1] n_in not None, int64_t block,
                   int64_t width, int64_t low, Py_ssize_t span, int64_t[::1] runs not None,
                   int64_t[::1] first_run not None):
    """The token layout of a trace's requests (trace.py's TokenBlocks): request k uses its ``n_used[k]`` hash
    ids from ``ids[starts[k]]`` (each in [low, low + span)) and has ``n_in[k]`` tokens. Writes each run's
    first byte and end into ``runs`` (flat) and each request's first run into ``first_run`` (n + 1);
    returns (runs, tokens, distinct blocks, blocks used more than once)."""
    cdef fb_layout_t l
    cdef int rc
    cdef Py_ssize_t n = n_in.shape[0]
    if not (starts.shape[0] == n_used.shape[0] == n and first_run.shape[0] == n + 1):
        raise ValueError("the request columns differ in length")
    if n == 0 or span <= 0 or block <= 0 or width <= 0:
        raise ValueError("nothing to lay out")
    l.ids = &ids[0] if ids.shape[0] else NULL
    l.n_ids = ids.shape[0]
    l.starts, l.n_used, l.n_in, l.n = &starts[0], &n_used[0], &n_in[0], n
    l.block, l.width, l.low, l.span = block, width, low, span
    l.runs = &runs[0] if runs.shape[0] >= 2 else NULL
    l.cap_runs = runs.shape[0] // 2 if l.runs else 0
    l.first_run = &first_run[0]
    l.where = <int64_t *>calloc(span, sizeof(int64_t))  # zeroed pages, never written where no id falls
    l.carried = <uint8_t *>calloc(span, 1)
    try:
        if l.where == NULL or l.carried == NULL:
            raise MemoryError()
        with nogil:
            rc = fb_trace_layout(&l)
    finally:
        free(l.where)
        free(l.carried)
    if rc != 0:
        raise ValueError("hash ids, counts or lengths outside what the layout takes")
    return l.n_runs, l.tokens, l.distinct, l.shared


def insert_literals(const int64_t[::1] runs not None, const int64_t[::1] first_run not None,
                    const int64_t[::1] request not None, const int64_t[::1] token not None,
                    const int64_t[::1] lit_first not None, const int64_t[::1] lit_end not None, int64_t width,
                    int64_t[::1] out_runs not None, int64_t[::1] out_first not None):
    """Literal runs put in prompts in place of separators (trace.py's TokenBlocks.insert), in one pass over
    the prompts' runs: writes the new runs into ``out_runs`` (flat pairs) and each prompt's first run into
    ``out_first``; returns the runs written."""
    cdef Py_ssize_t n = first_run.shape[0] - 1
    cdef Py_ssize_t m = request.shape[0]
    cdef int64_t written
    if n < 0 or out_first.shape[0] != n + 1 or runs.shape[0] % 2:
        raise ValueError("the prompts' columns differ in length")
    if not (token.shape[0] == lit_first.shape[0] == lit_end.shape[0] == m):
        raise ValueError("the entries' columns differ in length")
    if n and (first_run[0] != 0 or first_run[n] * 2 != runs.shape[0]):
        raise ValueError("the first runs do not span the runs")
    for k in range(n):
        if first_run[k + 1] < first_run[k]:
            raise ValueError("the first runs go back")
    if n == 0:
        if m:
            raise ValueError("entries for no prompt")
        out_first[0] = 0
        return 0
    with nogil:
        written = fb_trace_insert(&runs[0] if runs.shape[0] else NULL, &first_run[0], n,
                                  &request[0] if m else NULL, &token[0] if m else NULL,
                                  &lit_first[0] if m else NULL, &lit_end[0] if m else NULL, m, width,
                                  &out_runs[0] if out_runs.shape[0] else NULL, out_runs.shape[0] // 2,
                                  &out_first[0])
    if written < 0:
        raise ValueError("the entries are out of order, or outside their prompts")
    return written
