# cython: language_level=3
# Whole answers: a 2xx answer to a non-streaming request (embeddings, pooling, score, rerank) is one JSON
# object, kept in the connection's buffer as it arrives (grown to the largest answer, then reused: no
# allocation per request once it has grown) and scanned once at its end by the same scanner as a stream's
# chunks (csrc/fb_json.c), for its usage. Its end is the receive stamp of the read that held its last
# byte, as a stream's is. Included by engine.pyx; the run chooses the mode (RunState.whole_answers).


cdef int _keep_whole(fb_conn_t *c, const char *data, size_t length) noexcept nogil:
    """fb_http body callback for a whole answer: append, within the cap. An event stream where one JSON
    answer was asked is a protocol fault, named by its first bytes."""
    cdef size_t need = c.whole_len + length
    if c.http.event_stream:
        _keep_text(c, data, length)
        _fail(c, ERR_PROTOCOL, "the response is an event stream where one JSON answer was asked (is \"stream\" "
                               "sent?); its first bytes")
        return 1
    if need > c.max_whole_bytes:
        _keep_text(c, c.whole_buf, c.whole_len)
        _keep_text(c, data, length)
        _fail(c, ERR_PROTOCOL, "the answer exceeded the whole-answer cap (RunState.max_answer_bytes); its first bytes")
        return 1
    if FB_DEBUG and need > c.whole_cap:
        _debug.answer_grows += 1
    if _reserve(&c.whole_buf, &c.whole_cap, need) < 0:
        _fail(c, ERR_PROTOCOL, "out of memory for the whole answer")
        return 1
    memcpy(c.whole_buf + c.whole_len, data, length)
    c.whole_len = need
    return 0


cdef void _scan_whole(fb_conn_t *c) noexcept nogil:
    """The whole answer's facts into the request: prompt tokens from its usage (``prompt_tokens``, else
    ``total_tokens``, which is all a rerank answer's usage carries); an error object or a body that is not
    one JSON object fails it, its first bytes kept for the message."""
    cdef fb_req_t *r = &c.req
    cdef fb_chunk_info_t info
    if c.http.event_stream:
        _fail(c, ERR_PROTOCOL, "the response is an event stream where one JSON answer was asked (is \"stream\" "
                               "sent?)")
        return
    if fb_json_scan_chunk(c.whole_buf, c.whole_len, &info) != 0:
        _keep_text(c, c.whole_buf, c.whole_len)
        _fail(c, ERR_PROTOCOL, "the answer is not one JSON object; its first bytes"
              if c.whole_len else "the answer is empty: no JSON object")
        return
    if info.has_error:
        _keep_text(c, c.whole_buf, c.whole_len)
        _fail(c, ERR_SERVER_ERROR, "the server answered 2xx with an error object")
        return
    r.events = 1
    if info.usage_invalid:
        r.usage_untrusted = 1
    if info.prompt_tokens >= 0:
        r.prompt_tokens = info.prompt_tokens
    elif info.total_tokens >= 0:
        r.prompt_tokens = info.total_tokens
    r.usage_seen = r.prompt_tokens >= 0
    if info.cached_tokens >= 0:
        r.cached_tokens = info.cached_tokens
