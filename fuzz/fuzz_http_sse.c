/* fuzz_http_sse.c: libFuzzer target for csrc/fb_http -> fb_sse -> fb_json.
 *
 * Input layout:
 *   byte 0   mode (bits 0-1) and SSE buffer sizes (bits 2-7)
 *   byte 1-2 seed for the split pattern
 *   rest     the stream
 * Modes: 0 raw HTTP response(s); 1 a chunked event-stream response head, then the stream (the
 * input controls chunk framing and body); 2 a close-delimited response head, then the stream
 * (the input is the SSE body itself); 3 the stream straight into fb_sse.
 *
 * Oracle, besides the sanitizers: the stream is run twice, once in a single feed and once cut
 * into pieces chosen by the seed (down to one byte per call), and both runs must produce the
 * same events, the same JSON facts per event, the same error and the same HTTP results. After a
 * response completes, the bytes left unconsumed start the next response, as on a kept-alive
 * connection. A 2xx response that is not an event stream is an answer kept whole, as the core's
 * whole-response mode keeps it (a buffer grown by doubling, capped at the SSE cap), and scanned once when
 * it completes: its facts join the hash, so that a split that changes them shows. Build with -DFB_FUZZ_STANDALONE for a plain main() that runs files given as
 * arguments (no libFuzzer needed, e.g. gcc -fsanitize=address,undefined). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fb_http.h"
#include "fb_json.h"
#include "fb_sse.h"

typedef struct {
    fb_http_t http;
    fb_sse_t sse;
    size_t sse_max;
    uint64_t hash;      /* FNV-1a over everything observable */
    uint64_t n_events;
    int sse_rc;
    char *body;         /* a whole answer so far (not an event stream) */
    size_t body_len, body_cap;
} fz_run_t;

static inline void fz_mix(fz_run_t *r, const void *d, size_t n) {
    const unsigned char *p = d;
    for (size_t i = 0; i < n; i++) r->hash = (r->hash ^ p[i]) * 1099511628211ULL;
}

static inline void fz_mix_i64(fz_run_t *r, int64_t v) { fz_mix(r, &v, sizeof v); }

/* Field by field: the struct's padding bytes are never written. */
static void fz_mix_facts(fz_run_t *r, const fb_chunk_info_t *info) {
    const int64_t facts[] = {info->completion_tokens, info->prompt_tokens, info->total_tokens, info->cached_tokens,
                             info->sent_ns, info->has_content, info->has_reasoning, info->has_error,
                             info->has_finish, info->has_usage, info->usage_invalid, info->n_choices, info->n_data,
                             info->has_tool, info->has_end};
    fz_mix(r, facts, sizeof facts);
}

typedef struct {
    const char *data, *end;
    fz_run_t *run;
} fz_answer_t;

/* An answer piece lies inside the event, between a string's quotes. */
static int fz_on_answer(void *ctx, const char *text, size_t len) {
    fz_answer_t *a = ctx;
    if (len == 0 || text <= a->data || text + len >= a->end || text[-1] != '"' || text[len] != '"')
        __builtin_trap();
    fz_mix(a->run, text, len);
    return 0;
}

/* The typed-event APIs' tables as fastbench.load.protocols gives them (responses.EVENTS, messages.EVENTS). */
#define FZ_NAME(s, k) {s, sizeof(s) - 1, k}
static const fb_api_t fz_apis[2] = {
    {.types = {FZ_NAME("response.output_text.delta", FB_OUT_ANSWER),
               FZ_NAME("response.reasoning_text.delta", FB_OUT_REASONING),
               FZ_NAME("response.reasoning_summary_text.delta", FB_OUT_REASONING),
               FZ_NAME("response.function_call_arguments.delta", FB_OUT_TOOL),
               FZ_NAME("response.completed", FB_OUT_END), FZ_NAME("response.incomplete", FB_OUT_END),
               FZ_NAME("response.failed", FB_OUT_ERROR), FZ_NAME("error", FB_OUT_ERROR)},
     .n_types = 8,
     .usage_holders = {FZ_NAME("response", 0)},
     .n_usage_holders = 1,
     .output_key = FZ_NAME("output_tokens", 0),
     .input_keys = {FZ_NAME("input_tokens", 0)},
     .n_input_keys = 1,
     .details_key = FZ_NAME("input_tokens_details", 0),
     .details_cached_key = FZ_NAME("cached_tokens", 0)},
    {.types = {FZ_NAME("content_block_delta", FB_OUT_DELTA), FZ_NAME("message_stop", FB_OUT_END),
               FZ_NAME("error", FB_OUT_ERROR)},
     .n_types = 3,
     .delta_keys = {FZ_NAME("text", FB_OUT_ANSWER), FZ_NAME("thinking", FB_OUT_REASONING),
                    FZ_NAME("partial_json", FB_OUT_TOOL)},
     .n_delta_keys = 3,
     .usage_holders = {FZ_NAME("message", 0)},
     .n_usage_holders = 1,
     .output_key = FZ_NAME("output_tokens", 0),
     .input_keys = {FZ_NAME("input_tokens", 0), FZ_NAME("cache_read_input_tokens", 0),
                    FZ_NAME("cache_creation_input_tokens", 0)},
     .n_input_keys = 3,
     .cached_key = FZ_NAME("cache_read_input_tokens", 0)},
};

/* The event read with each typed API's tables: the same validity as the OpenAI scan, 0/1 flags, at most
 * one answer piece and only with has_content, lying between quotes inside the event. */
static void fz_scan_apis(fz_run_t *r, const char *data, size_t len, int rc_openai) {
    for (int i = 0; i < 2; i++) {
        fb_chunk_info_t info;
        memset(&info, 0, sizeof info);
        fz_answer_t answer = {data, data + len, r};
        uint64_t before = r->hash;
        int rc = fb_json_scan_event(data, len, &info, &fz_apis[i], fz_on_answer, &answer);
        if (rc != rc_openai) __builtin_trap(); /* one grammar, whatever the tables */
        if (rc == 0 && (info.has_content | info.has_reasoning | info.has_tool | info.has_end | info.has_error |
                        info.has_finish | info.has_usage | info.usage_invalid) > 1)
            __builtin_trap();
        if (rc == 0 && r->hash != before && !info.has_content) __builtin_trap(); /* an answer is content */
        if (rc == 0 && info.n_choices != -1) __builtin_trap();
        const int64_t facts[] = {info.completion_tokens, info.prompt_tokens, info.cached_tokens, info.sent_ns,
                                 info.has_content, info.has_reasoning, info.has_tool, info.has_end,
                                 info.has_error, info.has_finish, info.has_usage, info.usage_invalid};
        fz_mix(r, facts, sizeof facts);
    }
}

static int fz_on_event(void *ctx, const char *data, size_t len) {
    fz_run_t *r = ctx;
    fb_chunk_info_t info, with_answer;
    memset(&info, 0, sizeof info); /* padding alike, for the memcmp below */
    memset(&with_answer, 0, sizeof with_answer);
    int rc = fb_json_scan_chunk(data, len, &info);
    fz_answer_t answer = {data, data + len, r};
    if (fb_json_scan_chunk_text(data, len, &with_answer, fz_on_answer, &answer) != rc ||
        memcmp(&info, &with_answer, sizeof info) != 0)
        __builtin_trap(); /* the answer's scan finds the same facts */
    r->n_events++;
    fz_mix_i64(r, (int64_t)len);
    fz_mix(r, data, len);
    fz_mix_i64(r, rc);
    fz_mix_facts(r, &info);
    fz_scan_apis(r, data, len, rc);
    if (rc == 0 && (info.has_content | info.has_reasoning | info.has_error | info.has_finish | info.has_usage |
                    info.usage_invalid) > 1)
        __builtin_trap(); /* flags are 0/1 */
    return 0;
}

static int fz_grow(void *ctx, fb_sse_t *st, size_t needed) {
    fz_run_t *r = ctx;
    if (needed > r->sse_max) return 1;
    /* Exactly what is needed, so that an off-by-one write lands outside the block for ASan. */
    char *b = realloc(st->buf, needed);
    if (b == NULL) return 1;
    st->buf = b;
    st->cap = needed;
    return 0;
}

static int fz_on_body(void *ctx, const char *data, size_t len) {
    fz_run_t *r = ctx;
    if (r->http.status >= 200 && r->http.status < 300 && !r->http.event_stream) {
        size_t need = r->body_len + len;
        if (need > r->sse_max) {
            r->sse_rc = -FB_ERR_SSE_TOO_BIG; /* the whole answer's cap */
            return 1;
        }
        if (need > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 16;
            while (cap < need) cap *= 2;
            char *b = realloc(r->body, cap);
            if (b == NULL) return 1;
            r->body = b;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, data, len);
        r->body_len = need;
        return 0;
    }
    r->sse_rc = fb_sse_feed(&r->sse, data, len, fz_on_event, fz_grow, r);
    return r->sse_rc;
}

/* A whole answer that completed: scanned once, where it lies (len 0: nothing kept). */
static void fz_whole(fz_run_t *r) {
    fb_chunk_info_t info;
    memset(&info, 0, sizeof info);
    fz_mix_i64(r, (int64_t)r->body_len);
    fz_mix_i64(r, fb_json_scan_chunk(r->body, r->body_len, &info));
    fz_mix_facts(r, &info);
    r->body_len = 0;
}

static void fz_snapshot(fz_run_t *r) {
    const fb_http_t *h = &r->http;
    int64_t v[10] = {h->state, h->status, h->http_minor, h->chunked, h->keep_alive, h->event_stream,
                     h->content_coded, h->content_length, (int64_t)h->body_bytes, (int64_t)r->sse.events};
    fz_mix(r, v, sizeof v);
}

/* Feed one piece through the pipeline for `mode`; returns 0 to go on, nonzero to stop. */
static int fz_feed(fz_run_t *r, int mode, const char *p, size_t n) {
    if (mode == 3) {
        int rc = fb_sse_feed(&r->sse, p, n, fz_on_event, fz_grow, r);
        if (rc) fz_mix_i64(r, rc);
        return rc;
    }
    while (n > 0) {
        ssize_t used = fb_http_feed(&r->http, p, n, fz_on_body, r);
        if (used < 0) {
            fz_mix_i64(r, used);
            fz_mix_i64(r, r->sse_rc);
            return 1;
        }
        if ((size_t)used > n) __builtin_trap();
        if ((size_t)used < n && r->http.state != FB_HTTP_S_DONE) __builtin_trap();
        if (r->http.state == FB_HTTP_S_DONE) {
            /* Next response on the same connection; its events start a fresh stream. */
            fz_whole(r);
            fz_snapshot(r);
            fb_http_init(&r->http);
            fb_sse_init(&r->sse, r->sse.buf, r->sse.cap);
        }
        p += used;
        n -= (size_t)used;
    }
    return 0;
}

static const char fz_head_chunked[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
static const char fz_head_close[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";

/* Split pattern: piece lengths from a xorshift generator; the seed's low bits pick the scale
 * (1 byte, up to 4, up to 64, up to 1024). */
static uint64_t fz_run(const char *s, size_t n, int mode, size_t cap0, size_t cap_max, unsigned seed, int split) {
    fz_run_t r;
    memset(&r, 0, sizeof r);
    r.hash = 1469598103934665603ULL;
    r.sse_max = cap_max;
    fb_http_init(&r.http);
    fb_sse_init(&r.sse, cap0 ? malloc(cap0) : NULL, cap0);
    int stop = 0;
    if (mode == 1) stop = fz_feed(&r, mode, fz_head_chunked, sizeof fz_head_chunked - 1);
    if (mode == 2) stop = fz_feed(&r, mode, fz_head_close, sizeof fz_head_close - 1);
    uint32_t x = seed * 2654435761u + 1;
    static const uint32_t scale[4] = {1, 4, 64, 1024};
    uint32_t max_piece = scale[seed & 3];
    size_t at = 0;
    while (!stop && at < n) {
        size_t piece = n - at;
        if (split) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t want = 1 + x % max_piece;
            if (want < piece) piece = want;
        }
        stop = fz_feed(&r, mode, s + at, piece);
        at += piece;
    }
    /* After an error, how far the reader got within the failing piece (body_bytes, state)
     * depends on the split, so only the error code and the events before it are compared. */
    if (!stop) {
        if (mode != 3) fz_mix_i64(&r, fb_http_feed_eof(&r.http));
        fz_whole(&r);
        fz_snapshot(&r);
    }
    free(r.sse.buf);
    free(r.body);
    return r.hash;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int mode = data[0] & 3;
    static const size_t caps0[4] = {0, 1, 16, 4096};
    static const size_t caps_max[4] = {64, 1024, 1 << 16, 1 << 20};
    size_t cap0 = caps0[(data[0] >> 2) & 3];
    size_t cap_max = caps_max[(data[0] >> 4) & 3];
    unsigned seed = (unsigned)data[1] | ((unsigned)data[2] << 8);
    const char *s = (const char *)data + 3;
    size_t n = size - 3;
    uint64_t whole = fz_run(s, n, mode, cap0, cap_max, seed, 0);
    uint64_t split = fz_run(s, n, mode, cap0, cap_max, seed, 1);
    if (whole != split) {
        fprintf(stderr, "fuzz_http_sse: split run differs from whole run (mode %d, seed %u)\n", mode, seed);
        abort();
    }
    return 0;
}

#ifdef FB_FUZZ_STANDALONE
#include "standalone.h"
#endif
