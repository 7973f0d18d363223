# The run: what a run's connections share, composed of the parts (run.pyx). Included by engine.pxd.


cdef enum:
    READ_BUFFER_BYTES = 262144   # one read's buffer, shared by the run's connections


cdef class Slots:
    # The run's slots and its stop, which every part reads: the concurrency limit, the requests
    # in flight (every path) and the slots held by sends Python is preparing (a connect).
    cdef public int64_t in_flight
    cdef public int64_t reserved
    cdef public int64_t limit          # in_flight + reserved stays within it (open loop)
    cdef public int64_t send_until_ns  # the time cap's instant (INT64_MAX: none): no arrival due from it is
                                       # sent, no closed-loop slot refilled, whatever the loop's timer does
    cdef public bint stopping          # no new requests (time cap, stop, error rate)


cdef class RunState:
    cdef int64_t[:, ::1] rows          # the request table (fastbench.records.COLUMNS)
    cdef public Recorder itl_chunk     # gaps between output chunks
    cdef public Recorder itl_token     # gaps per token
    cdef public Recorder skew          # receive stamp minus server send stamp
    cdef public int64_t skew_offset_ns # subtracted from each receive stamp for skew: this clock less the
                                       # server's (--ray, another node's clock); 0 on the server's host
    cdef public dict error_messages    # row -> message, failed requests only
    cdef public size_t max_request_events  # output events stamped per request before it fails (MAX_REQUEST_EVENTS)
    cdef char *read_buffer             # one buffer for every read: reads are handled one at a time
    cdef size_t max_event_bytes        # largest SSE event accepted
    cdef public bint whole_answers     # answers are whole JSON bodies (embeddings, pooling, score, rerank); off
    cdef public size_t max_answer_bytes  # largest whole answer accepted; 0 (as made): WHOLE_ANSWER_CAP
    cdef public bint kernel_timestamps # ask sockets for SO_TIMESTAMPNS
    cdef public bint save_outputs      # keep response texts (off unless asked: memory stays bounded)
    cdef public dict outputs           # row -> raw output events (NUL-separated JSON), when save_outputs
    cdef public StreamApi api          # a typed-event API's tables (None: OpenAI chunks); set before connecting
    cdef public bint keep_answers      # keep each answer's text (the history of multi-turn sessions)
    cdef public dict answers           # row -> the answer's JSON strings' raw bytes joined, when keep_answers
    cdef public bint keep_chunk_stamps # keep each completed request's chunk stamps (vllm's itls)
    cdef public dict chunk_stamps      # row -> its output chunks' receive stamps (int64 ns), when asked
    cdef public int64_t reads          # reads that returned bytes
    cdef public int64_t kernel_reads   # of them, with a kernel stamp
    cdef public int64_t multi_event_reads  # reads that carried more than one output event
    cdef public int64_t output_events  # output events
    cdef public int64_t connections_opened
    cdef public int64_t wakeups        # event-loop wake-ups that drained the connections
    cdef public int64_t completed      # requests recorded as OK
    cdef public int64_t failed         # requests recorded as failed (not cancelled)
    cdef public int64_t output_tokens  # output tokens of recorded requests
    cdef bint has_expected             # expected_tokens was given
    cdef int64_t[::1] expected_tokens  # per row: the output tokens asked for (max_tokens); 0 unknown
    cdef int64_t realtime_offset_ns    # CLOCK_REALTIME - CLOCK_MONOTONIC, read once per wake-up
    cdef uint32_t gap_counts[FB_GAP_BUCKETS]  # chunk gaps seen (>0), by fb_gap_bucket; halved as it fills
    cdef public double max_error_rate  # failed / finished above this (after 20) stops the run; < 0: off
    cdef public object on_stop         # called with a reason when the core decides to stop the run
    cdef public int64_t others_completed  # --workers: the other workers' finished requests, as last told (the
    cdef public int64_t others_failed     # error-rate rule counts them with this one's own)
    cdef object published              # --workers: the int64 buffer every claim writes next_row into, or None
    cdef readonly Py_ssize_t n_rows    # requests in the run
    cdef list bodies                   # request bodies (JSON), by row: bytes or BodyParts
    cdef bytes head                    # HTTP request head up to "Content-Length: "
    cdef list row_heads                # by row, a head of its own (a session's header in it), or None: ``head``
    # The parts: the slots, the sets the loop drains and their tick, the pool, the schedule's claims
    # (chain: while its connections claim the next request themselves) and the open loop's dispatcher.
    cdef readonly Slots slots
    cdef ReadySet sets
    cdef Tick tick                     # None: reads on every arrival
    cdef readonly Pool pool
    cdef Claims claims                 # the schedule's claims (kept after it for next_row); None before one
    cdef Claims chain                  # the same while a connection that ends claims the next itself; None
    cdef Dispatcher dispatcher         # open loop, while the core sends arrivals; None
    cpdef object body(self, Py_ssize_t row)
    cdef _check_error_rate(self)
    cdef Py_ssize_t _first(self)
    cdef Claims _start(self, Claims claims, bint chained)
    cdef _coalesce(self, int64_t tick_ns, bint auto, bint watch_ends)
    cdef _dispatch(self, Dispatcher d, ArrivalClaims arrivals, int64_t limit, int64_t lead_min_ns,
                   int64_t lead_max_ns, object on_wake, object on_stale)
