# cython: language_level=3
# Every C declaration from csrc/ lives here; the .pyx files use these names only.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from posix.time cimport timespec, CLOCK_MONOTONIC
from posix.uio cimport iovec


cdef extern from "fb_debug.h":
    const int FB_DEBUG
    const char *FB_BUILD_FLAVOUR
    void fb_debug_fail(const char *what) noexcept nogil


cdef extern from "fb_clock.h" nogil:
    int64_t fb_now_ns()
    int64_t fb_realtime_offset_ns()


cdef extern from "fb_cache.h" nogil:
    void fb_prefetch(const void *p, size_t bytes)


cdef extern from "fb_claim.h" nogil:
    int64_t fb_claim_next(int64_t *next, int64_t n)
    void fb_claim_mark(int32_t *claimers, int64_t row, int32_t claimer)
    int fb_slot_take(int64_t *in_flight, int64_t cap)
    void fb_slot_give(int64_t *in_flight)
    int64_t fb_arrival_head(int64_t *next)
    int fb_arrival_claim(int64_t *next, int64_t row)


cdef extern from "fb_errors.h":
    enum:
        FB_OK
        FB_ERR_HTTP_STATUS_LINE
        FB_ERR_HTTP_HEADER
        FB_ERR_HTTP_LINE_TOO_LONG
        FB_ERR_HTTP_CHUNK
        FB_ERR_HTTP_EOF
        FB_ERR_SSE_TOO_BIG
        FB_ERR_JSON
        FB_ERR_CALLBACK
        FB_ERR_TRACE


cdef extern from "fb_http.h" nogil:
    enum:
        FB_HTTP_S_BODY_EOF
        FB_HTTP_S_DONE
    ctypedef int (*fb_http_body_cb)(void *ctx, const char *data, size_t len) noexcept nogil
    ctypedef struct fb_http_t:
        int state
        int status
        int chunked
        int keep_alive
        int event_stream
        int content_coded
        int64_t content_length
        uint64_t body_bytes
        char line[1]                   # FB_HTTP_LINE_MAX bytes; only its address is used here
    void fb_http_init(fb_http_t *h)
    Py_ssize_t fb_http_feed(fb_http_t *h, const char *buf, size_t len, fb_http_body_cb cb, void *ctx)
    int fb_http_feed_eof(fb_http_t *h)


cdef extern from "fb_sse.h" nogil:
    ctypedef struct fb_sse_t:
        char *buf
        size_t cap
        size_t len
        uint64_t events
    ctypedef int (*fb_sse_event_cb)(void *ctx, const char *data, size_t len) noexcept nogil
    ctypedef int (*fb_sse_grow_cb)(void *ctx, fb_sse_t *st, size_t needed) noexcept nogil
    void fb_sse_init(fb_sse_t *st, char *buf, size_t cap)
    int fb_sse_feed(fb_sse_t *st, const char *data, size_t len,
                    fb_sse_event_cb on_event, fb_sse_grow_cb grow, void *ctx)


cdef extern from "fb_json.h" nogil:
    ctypedef struct fb_chunk_info_t:
        int64_t completion_tokens
        int64_t prompt_tokens
        int64_t total_tokens
        int64_t cached_tokens
        int64_t sent_ns
        int has_content
        int has_reasoning
        int has_tool
        int has_end
        int has_error
        int has_finish
        int has_usage
        int usage_invalid
        int n_choices
        int n_data
    int fb_json_scan_chunk(const char *data, size_t len, fb_chunk_info_t *out)
    ctypedef int (*fb_json_text_fn)(void *ctx, const char *text, size_t len) noexcept nogil
    int fb_json_scan_chunk_text(const char *data, size_t len, fb_chunk_info_t *out, fb_json_text_fn on_answer,
                                void *ctx)
    enum:
        FB_OUT_NONE
        FB_OUT_ANSWER
        FB_OUT_REASONING
        FB_OUT_TOOL
        FB_OUT_DELTA
        FB_OUT_END
        FB_OUT_ERROR
        FB_API_MAX_TYPES
        FB_API_MAX_KEYS
    ctypedef struct fb_api_name_t:
        const char *s
        size_t n
        int kind
    ctypedef struct fb_api_t:
        fb_api_name_t types[24]
        int n_types
        fb_api_name_t delta_keys[4]
        int n_delta_keys
        fb_api_name_t usage_holders[4]
        int n_usage_holders
        fb_api_name_t output_key
        fb_api_name_t input_keys[4]
        int n_input_keys
        fb_api_name_t cached_key
        fb_api_name_t details_key
        fb_api_name_t details_cached_key
    int fb_json_scan_event(const char *data, size_t len, fb_chunk_info_t *out, const fb_api_t *api,
                           fb_json_text_fn on_answer, void *ctx)


cdef extern from "fb_trace.h" nogil:
    enum:
        FB_TRACE_TIMESTAMP
        FB_TRACE_INPUT
        FB_TRACE_OUTPUT
        FB_TRACE_HASH_IDS
        FB_TRACE_FIELDS
    ctypedef struct fb_trace_t:
        const char *key[4]
        size_t key_len[4]
        int64_t *line
        double *stamp
        int64_t *input
        int64_t *output
        int64_t *ids_end
        size_t cap_records
        int64_t *ids
        size_t cap_ids
        size_t n_records
        size_t n_ids
    int fb_trace_scan(const char *data, size_t len, fb_trace_t *t)
    ctypedef struct fb_layout_t:
        const int64_t *ids
        const int64_t *starts
        const int64_t *n_used
        const int64_t *n_in
        size_t n
        size_t n_ids
        int64_t block
        int64_t width
        int64_t low
        size_t span
        int64_t *where
        uint8_t *carried
        int64_t *runs
        size_t cap_runs
        int64_t *first_run
        size_t n_runs
        int64_t tokens
        int64_t distinct
        int64_t shared
    int fb_trace_layout(fb_layout_t *l)
    int64_t fb_trace_insert(const int64_t *runs, const int64_t *first_run, size_t n, const int64_t *request,
                            const int64_t *token, const int64_t *lit_first, const int64_t *lit_end, size_t n_entries,
                            int64_t width, int64_t *out_runs, size_t cap_out, int64_t *out_first)


cdef extern from "fb_hdr.h" nogil:
    ctypedef struct fb_hdr_layout_t:
        int unit_magnitude
        int sub_bucket_half_count_magnitude
        int64_t sub_bucket_half_count
        int64_t sub_bucket_mask
        int64_t counts_len
        int64_t highest_value
    int64_t fb_hdr_index(const fb_hdr_layout_t *l, int64_t value)


cdef extern from "fb_gaps.h" nogil:
    enum:
        FB_GAP_BUCKETS
    int fb_gap_bucket(int64_t ns)
    int64_t fb_gap_bucket_low(int b)


cdef extern from "fb_net.h" nogil:
    int fb_net_setup(int fd)
    Py_ssize_t fb_net_recv(int fd, char *buf, size_t cap, int64_t *kernel_rt_ns)
    int fb_net_quiet(int fd)
    Py_ssize_t fb_net_sendv(int fd, const iovec *parts, int count)
    Py_ssize_t fb_net_send(int fd, const char *buf, size_t len)


cdef extern from "sys/epoll.h" nogil:
    enum:
        EPOLLIN
        EPOLL_CTL_ADD
        EPOLL_CTL_DEL
        EPOLL_CLOEXEC
    ctypedef union epoll_data_t:
        void *ptr
        int fd
    cdef struct epoll_event:
        unsigned int events
        epoll_data_t data
    int epoll_create1(int flags)
    int epoll_ctl(int epfd, int op, int fd, epoll_event *event)
    int epoll_wait(int epfd, epoll_event *events, int maxevents, int timeout)


cdef extern from "unistd.h" nogil:
    int close(int fd)
    Py_ssize_t read(int fd, void *buf, size_t count)


cdef extern from "sys/timerfd.h" nogil:
    enum:
        TFD_NONBLOCK
        TFD_CLOEXEC
        TFD_TIMER_ABSTIME
    cdef struct itimerspec:
        timespec it_interval
        timespec it_value
    int timerfd_create(int clockid, int flags)
    int timerfd_settime(int fd, int flags, const itimerspec *new_value, itimerspec *old_value)
