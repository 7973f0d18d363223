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


def first_seen(const int64_t[::1] ids not None, int64_t low, int64_t[::1] first not None):
    """first[id - low] = the index of id's first occurrence in ids, for every id, where ``first`` holds
    len(ids) in every slot on entry. ValueError if an id falls outside [low, low + len(first))."""
    cdef int rc
    if ids.shape[0] == 0:
        return
    if first.shape[0] == 0:
        raise ValueError("no slots for the ids")
    with nogil:
        rc = fb_trace_first_seen(&ids[0], ids.shape[0], low, &first[0], first.shape[0])
    if rc != 0:
        raise ValueError("an id falls outside the slots")
