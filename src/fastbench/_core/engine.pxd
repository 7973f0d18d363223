# cython: language_level=3
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t
from posix.uio cimport iovec
from .csrc cimport *


# The records contract (fastbench.results.records) as the core writes it: the request table's row and
# the codes stored in it. tests/core/test_core_contract.py checks every name and value against
# records.COLUMNS, ErrorClass and UsageSource (cpdef makes the enums visible to it).

ctypedef struct fb_row_t:
    # One row of the request table, field for column in records.COLUMNS' order: all int64, so the
    # struct is the row as it lies in the table (COLUMN_ORDER is read from it).
    int64_t index
    int64_t scheduled_ns
    int64_t sent_ns
    int64_t first_byte_ns
    int64_t first_token_ns
    int64_t first_answer_ns
    int64_t end_ns
    int64_t prompt_tokens
    int64_t output_tokens
    int64_t chunks
    int64_t events
    int64_t max_chunk_tokens
    int64_t error
    int64_t http_status
    int64_t usage_source
    int64_t connect_ns
    int64_t cached_tokens

cpdef enum ErrorClass:
    ERR_OK = 0
    ERR_CONNECT = 1
    ERR_HTTP_STATUS = 2
    ERR_TIMEOUT = 3
    ERR_PROTOCOL = 4
    ERR_SERVER_ERROR = 5
    ERR_CANCELLED = 6
    ERR_CONTEXT_LENGTH = 7
    ERR_WORKER_LOST = 8  # never written by the core: the parent's mark for a lost worker's requests

cpdef enum UsageSource:
    USAGE_NONE = 0
    USAGE_PER_CHUNK = 1
    USAGE_FINAL = 2
    USAGE_INCONSISTENT = 3


cdef enum CoalesceWhy:
    # Why automatic coalescing set the tick it set (RunState.coalescing names them: COALESCE_WHY)
    WHY_LEARNING = 0             # reads on every arrival until enough chunk gaps are seen
    WHY_GAPS = 1                 # a share of the short chunk gaps
    WHY_MAX = 2                  # the longest tick it may choose
    WHY_ENDS = 3                 # bounded so that ends that come unwatched keep the streams open
    WHY_FEW_READS = 4            # too few reads per tick to gain from one: on every arrival
    WHY_SHARED_READS = 5         # chunks of one stream shared reads beyond the server's own share: halved
    WHY_USER_STAMPS = 6          # a read without a kernel stamp: on every arrival for the rest of the run
    WHY_OPEN_LOOP = 7            # the core sends open-loop arrivals: on every arrival, so they stay on time


cdef enum:
    READ_BUFFER_BYTES = 262144   # one read's buffer, shared by the run's connections
    READY_EVENTS = 256           # ready connections taken per epoll_wait
    LEAD_MARGIN_NS = 10000       # added to the learnt wake-up delay
    WAKE_DELAYS = 128            # the loop's delays in getting to an arrival the lead is learnt from
    FIRST_EVENT_BUFFER = 4096    # a connection's SSE event buffer at first (grows to max_event_bytes)
    FIRST_EVENT_SLOTS = 512      # a request's per-event stamps at first (doubles as needed)
    ERRTEXT_BYTES = 2048         # the start of an error body or event kept for the message
    WHOLE_ANSWER_CAP = 268435456 # a whole JSON answer's cap (256 MiB: 1,000 embeddings of 4,096 floats fit)
    HEAD_BYTES = 64              # the start of every body, kept to name a response of another protocol
    COALESCE_CHANGES = 64        # automatic coalescing: the tick's changes kept for the result
    END_RATIO_BUCKETS = 256      # ends set: a stream's events per token asked for, in 1/256ths (ready.pyx)
    WAKE_READ_BYTES = 1048576    # bytes one drain of a set reads in all, shared by its ready connections (4 KiB
                                 # each at least, READY_EVENTS to a batch), so a server that writes faster than
                                 # the client parses never holds the loop
    MAX_REQUEST_EVENTS = 1048576 # output events stamped per request (24 MiB of stamps); past it: PROTOCOL
    MAX_KEPT_BYTES = 67108864    # text kept per request (--save-outputs, an answer's text); past it: PROTOCOL


cdef class Recorder:
    cdef object histogram             # the hdrh.HdrHistogram the counts are synced into
    cdef fb_hdr_layout_t layout        # its bucket layout, copied at init
    cdef int64_t *counts               # owned; counts_len entries
    cdef int64_t total                 # values recorded (with their counts)
    cdef int64_t clamped               # values above highest_value, recorded as it
    cdef int64_t negative              # negative values, recorded as 0
    cdef inline void record(self, int64_t value, int64_t count) noexcept nogil


ctypedef struct fb_event_t:
    # One output event: the three facts side by side, so recording one touches one cache line.
    int64_t ts                   # receive stamp
    int64_t sent                 # server send stamp (synthetic server), or -1
    int32_t tokens               # tokens it carried per usage, or -1 if unknown


ctypedef struct fb_req_t:
    int64_t row                  # row in the run's table; -1 for a warm-up (not recorded)
    int64_t scheduled_ns         # when the request was due
    int64_t sent_ns              # when its bytes went to the kernel
    int64_t connect_ns           # time spent connecting for it (0 on a reused connection)
    int64_t first_byte_ns        # stamp of the first read of the response
    int64_t first_token_ns       # stamp of the first output event (reasoning or answer)
    int64_t first_answer_ns      # stamp of the first answer-text event
    int64_t end_ns               # stamp of the read that ended it (or the abort time)
    int64_t prompt_tokens        # from usage; -1 until seen
    int64_t cached_tokens        # usage.prompt_tokens_details.cached_tokens, the last seen; -1 until seen
    int64_t completion_tokens    # latest cumulative usage.completion_tokens
    int64_t events               # SSE data events, all kinds
    int usage_seen               # some chunk carried usage
    int usage_untrusted          # usage went backwards or was malformed: counts are not to be trusted
    int usage_chunks             # output chunks that carried usage
    int done_seen                # "data: [DONE]" arrived
    int finish_seen              # a non-null finish_reason arrived
    int error                    # ErrorClass value
    const char *why              # static text explaining error, or NULL
    int32_t max_chunk_tokens     # most tokens one output event carried per usage so far (0: none known)
    size_t n_ev                  # output events recorded in ev
    size_t cap_ev                # its capacity (owned, reused across requests)
    fb_event_t *ev               # one entry per output event, in arrival order


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


cdef class StreamConnection
cdef class Dispatcher


# RunState is composed of parts with one job each (run.pyx, ready.pyx, coalesce.pyx, claims.pyx,
# dispatch.pyx). A part holds only the parts it needs, never the RunState: no reference cycles.

cdef class Slots:
    # The run's slots and its stop, which every part reads: the concurrency limit, the requests
    # in flight (every path) and the slots held by sends Python is preparing (a connect).
    cdef public int64_t in_flight
    cdef public int64_t reserved
    cdef public int64_t limit          # in_flight + reserved stays within it (open loop)
    cdef public int64_t send_until_ns  # the time cap's instant (INT64_MAX: none): no arrival due from it is
                                       # sent, no closed-loop slot refilled, whatever the loop's timer does
    cdef public bint stopping          # no new requests (time cap, stop, error rate)


cdef class ReadySet:
    # The epoll sets the event loop's wake-ups drain: the inner set of every connection, and the
    # ends set of those whose stream may end with their next chunk (coalescing, see watch_ends).
    cdef int epfd
    cdef int ends_epfd
    cdef bint watching_ends            # coalescing with expected lengths: the split above is on
    cdef set conns                     # the connections registered (keeps their pointers valid)
    cdef size_t hot_bytes              # a connection's bytes a read touches (prefetched, see drain)
    cdef epoll_event *ready            # epoll_wait's output array
    cdef int64_t ends_watched          # requests moved to the ends set
    # Streams without per-chunk usage: the events per token asked for (in END_RATIO_BUCKETS ths) of
    # those that ended at their length (decayed), and the share of them a stream must reach to be
    # watched (END_RATIO_BUCKETS: every event one token, the rule without them). See learn_end.
    cdef int64_t end_ratio_counts[END_RATIO_BUCKETS + 1]
    cdef int64_t end_ratio_total
    cdef int64_t watch_bucket
    cdef register(self, StreamConnection conn)
    cdef unregister(self, StreamConnection conn)
    cdef void move(self, StreamConnection conn, bint to_ends) noexcept
    cdef void learn_end(self, int64_t events, int64_t expected) noexcept
    cdef drain(self, int epfd, Dispatcher dispatcher)


cdef class Tick:
    # Coalesced reads: the timerfd that bounds a read's delay, in the ends set; and with automatic
    # coalescing the state its choices are made from (coalesce.pyx). Made over a ReadySet.
    cdef ReadySet sets
    cdef int fd                        # the timerfd (owned)
    cdef readonly int64_t tick_ns      # its interval; 0 = reads on every arrival
    cdef bint auto                     # automatic: decisions every COALESCE_DECIDE_NS
    cdef bint inner_nested             # the inner set sits in the ends set: the loop wakes on every arrival
    cdef int64_t max_tick_ns           # the longest tick it may choose
    cdef int64_t decide_due_ns         # the next decision; INT64_MAX: none
    cdef int64_t hold_until_ns         # after chunks shared reads: the tick grows no longer before this
    cdef int64_t hold_ns               # that hold's length (doubles with each such back-off)
    cdef int64_t period_ns             # the period being judged began (the last decision)
    cdef int64_t period_reads          # reads, kernel-stamped reads, multi-event reads at its start
    cdef int64_t period_kernel_reads
    cdef int64_t period_multi
    cdef int64_t base_reads            # reads on every arrival, and of them multi-event ones: the
    cdef int64_t base_multi            # server's own share of events that come together
    cdef double ends_weight            # ends of requests (decayed), those not watched for (not in the
    cdef double ends_unwatched_weight  # ends set: seen only on a tick), and their durations (ns)
    cdef double ends_duration_ns
    cdef int64_t ends_unwatched        # requests whose end came while not in the ends set (auto only)
    cdef int64_t ticked_reads          # reads and multi-event reads while the tick ran (auto only)
    cdef int64_t ticked_multi_event_reads
    cdef int64_t last_short_gap_ns     # the short gap of the last decision (0: too few gaps)
    cdef int64_t change_ns[COALESCE_CHANGES]     # the tick's changes: when,
    cdef int64_t change_tick_ns[COALESCE_CHANGES]  # to what (0: every arrival),
    cdef int64_t change_gap_ns[COALESCE_CHANGES]   # the short gap then,
    cdef int change_why[COALESCE_CHANGES]        # and why (a CoalesceWhy value); the first ones and the last kept
    cdef int64_t changes               # changes made (more than COALESCE_CHANGES: the middle ones dropped)
    cdef void arm(self) noexcept
    cdef void clear(self) noexcept
    cdef void set_tick(self, int64_t tick_ns, int why, int64_t now) noexcept
    cdef void count_end(self, double duration_ns, bint watched) noexcept


cdef class Claims:
    # Which request goes next: the interface of the three kinds (RowClaims, ArrivalClaims,
    # SharedArrivals), each made for one schedule by RunState.
    cdef Slots slots
    cdef readonly Py_ssize_t n_rows
    cdef readonly Py_ssize_t next_row  # one past the last row this process claimed
    cdef int64_t *published            # --workers: next_row is written here on every claim; NULL: off
    cdef object published_owner        # the buffer it points into (kept alive with it)
    cpdef Py_ssize_t claim(self, int64_t now=*) except -2
    cdef Py_ssize_t chain(self, int64_t ended_ns, int64_t *due) except -2
    cdef Py_ssize_t head(self) noexcept
    cdef void _publish(self) noexcept


cdef class RowClaims(Claims):
    cdef int64_t *claim_next           # --workers, closed loop on one machine: the counter every worker
                                       # claims rows from, in memory they share; NULL: this table's own
    cdef int32_t *claimers             # with it: per row, the worker that claimed it (its index + 1)
    cdef int32_t claimer               # this worker's mark there
    cdef object buffers                # the buffers those point into (kept alive with them)


cdef class ArrivalClaims(Claims):
    cdef int64_t[::1] offsets          # per row, when it is due, from base_ns
    cdef int64_t base_ns               # the window's start (CLOCK_MONOTONIC ns)
    cdef int64_t due(self, Py_ssize_t row) noexcept


cdef class SharedArrivals(ArrivalClaims):
    # --workers on one machine, open loop under a --concurrency cap: the next unsent arrival and the
    # run's requests in flight, in memory every worker shares; each arrival's sender marked.
    cdef int64_t *shared_next
    cdef int64_t *shared_in_flight
    cdef int32_t *claimers
    cdef int32_t claimer
    cdef object buffers
    cdef bint take(self, int64_t row) noexcept
    cdef bint take_slot(self) noexcept
    cdef void give_slot(self) noexcept


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


cdef class StreamApi:
    cdef fb_api_t table                # the scanner's tables
    cdef list names                    # the bytes they point into
    cdef bytes end_why_bytes
    cdef const char *end_why           # why a stream that did not end as the API ends failed
    cdef void _put(self, fb_api_name_t *slot, str name, int kind) except *



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
