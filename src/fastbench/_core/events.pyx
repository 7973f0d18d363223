# cython: language_level=3
# The per-event path: the callbacks the C HTTP and SSE readers make for each piece of a body and each
# SSE event. They stamp, count and keep in C, without the GIL's objects: per token nothing enters
# Python. Included by engine.pyx.


cdef const char *_EVENT_CAP_WHY = "more output events than the per-request cap"  # the cap: _error_message
cdef const char *_KEPT_CAP_WHY = "the response's text kept passed the per-request cap of 64 MiB"


cdef int _on_body(void *ctx, const char *data, size_t length) noexcept nogil:
    """fb_http body callback: event-stream bytes go to the SSE scanner; anything else is kept
    (its first 2 KiB) for the error message."""
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef int rc
    cdef size_t room = HEAD_BYTES - c.head_len
    if room:  # the body's first bytes, to name a response that is not what was asked
        if room > length:
            room = length
        memcpy(c.head + c.head_len, data, room)
        c.head_len += room
    if c.whole and 200 <= c.http.status < 300:
        return _keep_whole(c, data, length)
    if c.http.status < 200 or c.http.status >= 300 or not c.http.event_stream:
        _keep_text(c, data, length)
        return 0
    rc = fb_sse_feed(&c.sse, data, length, _on_event, _grow_event_buffer, ctx)
    if rc == -FB_ERR_SSE_TOO_BIG:
        _fail(c, ERR_PROTOCOL, "an SSE event exceeded the 1 MiB event size limit")
        return 1
    return 1 if rc < 0 else 0


cdef int _grow_event_buffer(void *ctx, fb_sse_t *st, size_t needed) noexcept nogil:
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef size_t cap = st.cap * 2
    cdef char *p
    if needed > c.max_event_bytes:
        return 1
    while cap < needed:
        cap *= 2
    if cap > c.max_event_bytes:
        cap = c.max_event_bytes
    p = <char *>realloc(st.buf, cap)
    if p == NULL:
        return 1
    st.buf = p
    st.cap = cap
    return 0


cdef int _on_event(void *ctx, const char *data, size_t length) noexcept nogil:
    """One SSE data event. Stamps it with its read's time, before and apart from any parsing
    of what it means; then takes the few facts the metrics need from the JSON in one pass (a typed-event
    API's with its tables, c.api)."""
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef fb_req_t *r = &c.req
    cdef fb_chunk_info_t info
    cdef int64_t tokens = -1
    cdef bint output, had_usage
    cdef size_t answer_len = c.answer_len
    cdef fb_json_text_fn keep_answer = NULL
    cdef int rc
    if c.keep_answer:
        keep_answer = _keep_answer
    r.events += 1
    if length == 6 and memcmp(data, b"[DONE]", 6) == 0:
        if c.api == NULL:  # a typed API ends with its own event ([DONE] after it is harmless)
            r.done_seen = 1
        return 0
    # The answer's text, kept as the scan finds it: its strings' raw bytes, decoded once per request
    # (load/outputs.py decode_answer), not an object per event.
    rc = fb_json_scan_event(data, length, &info, c.api, keep_answer, ctx)
    if rc != 0:
        c.answer_len = answer_len  # a bad event's pieces are no text
        if rc == -FB_ERR_CALLBACK:
            _fail(c, ERR_PROTOCOL, "out of memory for the answer's text")
            return 1
        _keep_text(c, data, length)
        _fail(c, ERR_PROTOCOL, "an SSE data event is not a JSON object")
        return 1
    if info.has_error:
        _keep_text(c, data, length)
        _fail(c, ERR_SERVER_ERROR, "the server sent an error event mid-stream")
        return 1
    if info.has_finish:
        r.finish_seen = 1
    if info.has_end:
        r.done_seen = 1  # a typed API's end event is its [DONE]
    if info.prompt_tokens >= 0:
        r.prompt_tokens = info.prompt_tokens
    if info.cached_tokens >= 0:
        r.cached_tokens = info.cached_tokens
    if info.usage_invalid:
        r.usage_untrusted = 1
    # A chunk without text still carries output when its usage grew over an earlier chunk's and
    # every output so far carried usage (vLLM's continuous usage streams a token that ends
    # mid-UTF-8 as text ""). Otherwise usage on a chunk without text is a server's end-of-stream
    # total (llama.cpp), not a token chunk, unless no output came before it: then it is an answer
    # that ended at once (EOS as its first token). A typed API says by its event's type what carries output,
    # and its usage is a total, never a token chunk.
    had_usage = r.usage_seen
    if info.completion_tokens >= 0:
        r.usage_seen = 1
        if info.completion_tokens < r.completion_tokens:
            r.usage_untrusted = 1  # went backwards
        else:
            tokens = info.completion_tokens - r.completion_tokens
        r.completion_tokens = info.completion_tokens
    output = info.has_content or info.has_reasoning or info.has_tool or (
        c.api == NULL and tokens > 0 and (r.n_ev == 0 or (had_usage and r.usage_chunks == r.n_ev)))
    if not output:
        return 0
    if r.n_ev >= c.max_events:
        # A server that streams without end (or faster than it could generate) would grow the stamps
        # without bound: the request fails at the cap, and the connection with it.
        _fail(c, ERR_PROTOCOL, _EVENT_CAP_WHY)
        return 1
    if r.n_ev == r.cap_ev and _grow_event_slots(r) != 0:
        _fail(c, ERR_PROTOCOL, "out of memory for per-chunk timestamps")
        return 1
    if FB_DEBUG:
        _debug_assert(r.n_ev < r.cap_ev, "an event stamp beyond its array")
    r.ev[r.n_ev].ts = c.read_ts
    if r.n_ev > 0 and c.read_ts > r.ev[r.n_ev - 1].ts:
        # the chunk gap, for automatic coalescing (0: the same read, counted as a multi-event read)
        c.gap_counts[fb_gap_bucket(c.read_ts - r.ev[r.n_ev - 1].ts)] += 1
    r.ev[r.n_ev].tokens = tokens if info.completion_tokens >= 0 else -1
    r.ev[r.n_ev].sent = info.sent_ns
    if r.ev[r.n_ev].tokens > r.max_chunk_tokens:
        r.max_chunk_tokens = r.ev[r.n_ev].tokens
    r.n_ev += 1
    if info.completion_tokens >= 0:
        r.usage_chunks += 1
    if c.save_outputs and _keep_output(c, data, length) != 0:
        _fail(c, ERR_PROTOCOL, "out of memory for --save-outputs")
        return 1
    if r.first_token_ns == 0:
        r.first_token_ns = c.read_ts
    if info.has_content and r.first_answer_ns == 0:
        r.first_answer_ns = c.read_ts
    c.read_output_events += 1
    if c.read_output_events == 2:
        c.multi_event_reads += 1
    c.output_events += 1
    return 0


cdef int _grow_event_slots(fb_req_t *r) noexcept nogil:
    cdef size_t cap = r.cap_ev * 2 if r.cap_ev else FIRST_EVENT_SLOTS
    cdef fb_event_t *ev = <fb_event_t *>_counted_realloc(r.ev, cap * sizeof(fb_event_t))
    if ev == NULL:
        return -1
    r.ev = ev
    r.cap_ev = cap
    return 0


cdef int _reserve(char **buf, size_t *cap, size_t need) noexcept nogil:
    """Room for ``need`` bytes in ``*buf`` (of ``*cap``), grown by doubling from 4 KiB and kept from
    request to request: no allocation per event once a connection's buffers have grown. -1: no memory."""
    cdef size_t size = cap[0] if cap[0] else 4096
    cdef char *p
    if need <= cap[0]:
        return 0
    while size < need:
        size *= 2
    p = <char *>_counted_realloc(buf[0], size)
    if p == NULL:
        return -1
    buf[0] = p
    cap[0] = size
    return 0


cdef int _keep_output(fb_conn_t *c, const char *data, size_t length) noexcept nogil:
    """Append one output event and a NUL separator (JSON text never contains a raw NUL)."""
    cdef size_t need = c.out_len + length + 1
    if need > MAX_KEPT_BYTES:
        _fail(c, ERR_PROTOCOL, _KEPT_CAP_WHY)
        return -1
    if _reserve(&c.out_buf, &c.out_cap, need) < 0:
        return -1
    memcpy(c.out_buf + c.out_len, data, length)
    c.out_buf[c.out_len + length] = 0
    c.out_len = need
    return 0


cdef int _keep_answer(void *ctx, const char *text, size_t length) noexcept nogil:
    """Append one piece of the answer's text (a JSON string's raw bytes) to the connection's buffer."""
    cdef fb_conn_t *c = <fb_conn_t *>ctx
    cdef size_t need = c.answer_len + length
    if need > MAX_KEPT_BYTES:
        _fail(c, ERR_PROTOCOL, _KEPT_CAP_WHY)
        return -1
    if _reserve(&c.answer_buf, &c.answer_cap, need) < 0:
        return -1
    memcpy(c.answer_buf + c.answer_len, text, length)
    c.answer_len = need
    return 0


cdef inline void _keep_text(fb_conn_t *c, const char *data, size_t length) noexcept nogil:
    cdef size_t room = ERRTEXT_BYTES - c.errtext_len
    if length > room:
        length = room
    memcpy(c.errtext + c.errtext_len, data, length)
    c.errtext_len += length


cdef inline void _fail(fb_conn_t *c, int error, const char *why) noexcept nogil:
    if c.req.error == ERR_OK:
        c.req.error = error
        c.req.why = why



cdef const char *_http_error_text(Py_ssize_t code) noexcept:
    if code == FB_ERR_HTTP_STATUS_LINE:
        return "malformed HTTP status line"
    if code == FB_ERR_HTTP_HEADER:
        return "malformed HTTP header"
    if code == FB_ERR_HTTP_LINE_TOO_LONG:
        return "HTTP header line too long"
    if code == FB_ERR_HTTP_CHUNK:
        return "malformed chunked encoding"
    return "malformed HTTP response"
