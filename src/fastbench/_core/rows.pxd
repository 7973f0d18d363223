# Rows and events: the request table's row and its codes, and a request's state as its events fill it
# (events.pyx). Included by engine.pxd.


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


cdef enum:
    FIRST_EVENT_SLOTS = 512      # a request's per-event stamps at first (doubles as needed)
    MAX_REQUEST_EVENTS = 1048576 # output events stamped per request (24 MiB of stamps); past it: PROTOCOL
    MAX_KEPT_BYTES = 67108864    # text kept per request (--save-outputs, an answer's text); past it: PROTOCOL


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
