# Connections: one keep-alive connection's C state and its requests (conn.pyx, events.pyx, whole.pyx).
# Included by engine.pxd.


cdef enum:
    FIRST_EVENT_BUFFER = 4096    # a connection's SSE event buffer at first (grows to max_event_bytes)
    ERRTEXT_BYTES = 2048         # the start of an error body or event kept for the message
    WHOLE_ANSWER_CAP = 268435456 # a whole JSON answer's cap (256 MiB: 1,000 embeddings of 4,096 floats fit)
    HEAD_BYTES = 64              # the start of every body, kept to name a response of another protocol


ctypedef struct fb_conn_t:
    # Fields read on every read come first, then the HTTP state, whose head is hot and whose
    # 8 KiB line buffer is touched only by header lines: the per-read path stays in a few
    # adjacent cache lines.
    fb_sse_t sse                 # event scanner state (its buf is owned by the connection)
    fb_req_t req                 # the request in flight
    int64_t read_ts              # stamp of the read being processed
    int read_output_events       # output events found in the read being processed
    int64_t multi_event_reads    # reads with more than one output event, since last flushed to the run
    int64_t output_events        # output events, since last flushed to the run
    uint32_t *gap_counts         # the run's histogram of chunk gaps (RunState.gap_counts), by fb_gap_bucket
    size_t max_event_bytes       # largest SSE event accepted
    size_t max_events            # output events stamped per request before it fails (RunState.max_request_events)
    int save_outputs             # keep each output event's JSON (--save-outputs)
    char *out_buf                # those events, NUL-separated (owned, reused)
    size_t out_len               # bytes used in out_buf
    size_t out_cap               # its capacity
    const fb_api_t *api          # what a typed-event API's events mean (RunState.set_api); NULL: OpenAI chunks
    const char *end_why          # why a stream that did not end as its API ends is a cut (the [DONE] rule)
    size_t head_len              # bytes of the response's body kept in head
    int keep_answer              # keep the answer's text (multi-turn sessions with the server's replies)
    char *answer_buf             # its JSON strings' raw bytes, escapes as sent, joined (owned, reused)
    size_t answer_len            # bytes used in answer_buf
    size_t answer_cap            # its capacity
    int whole                    # the run's answers are whole JSON bodies, not event streams (whole.pyx)
    char *whole_buf              # the answer so far (owned, grown to the largest, reused)
    size_t whole_len             # bytes used in whole_buf
    size_t whole_cap             # its capacity
    size_t max_whole_bytes       # largest answer accepted
    size_t errtext_len           # bytes in errtext
    fb_http_t http               # response framing state
    char errtext[ERRTEXT_BYTES]  # start of a non-stream body or of an error event, for the message
    char head[HEAD_BYTES]        # the body's first bytes, named when the response is not what was asked


cdef class StreamConnection:
    cdef RunState run
    cdef object loop
    cdef object sock                   # the socket object (kept so it is closed once)
    cdef int fd
    cdef object ssl_object             # ssl.SSLObject over memory BIOs, or None
    cdef object ssl_in                 # its incoming MemoryBIO
    cdef object ssl_out                # its outgoing MemoryBIO
    cdef bint kernel_timestamps        # the socket accepted SO_TIMESTAMPNS
    cdef object fut                    # Future of the request in flight
    cdef object send_task              # the loop's write of a request the socket buffer could not take; None
    cdef object _py_why                # message for an error raised from Python (abort, send)
    cdef public bint busy              # a request is in flight
    cdef public bint closed
    cdef public int requests_served
    cdef bint reused                   # the request in flight went out on a connection that had served before
    cdef bint in_ends_set              # registered in the run's ends_epfd, not its epfd
    cdef int64_t expected_tokens       # output tokens it asked for (max_tokens), when known; else 0
    cdef fb_conn_t c                   # all C state (last: the object's own fields stay together)
    cdef void _watch_if_ending(self) noexcept
    cdef Py_ssize_t _read_ready(self, Py_ssize_t budget) except -1
    cdef bint _out_of_step(self, Py_ssize_t used) noexcept
    cdef _begin(self, object body, int64_t row, int64_t scheduled_ns, int64_t connect_ns)
    cdef _start_from_core(self, int64_t row, int64_t scheduled_ns)
    cdef _send(self, object body, char *length_line, Py_ssize_t length_len, bytes head)
    cdef _fail_now(self, int error, str why)
    cdef _feed_tls(self, char *buf, Py_ssize_t n, int64_t ts)
    cdef _feed(self, const char *buf, Py_ssize_t n, int64_t ts)
    cdef _on_eof(self)
    cdef _finish(self)
    cdef bytes _body_head(self)
    cdef bytes _errtext(self)
    cdef bytes _chunk_stamps(self)
    cdef str _error_message(self, int status)
    cdef void _write_row(self, int64_t row, int status, int usage) noexcept
    cdef void _record_chunks(self, int usage) noexcept
