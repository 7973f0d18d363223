/* fb_test_shim.c: test-only flat entry points over csrc/fb_http, fb_sse and fb_json, so that
 * tests/core/test_csrc.py can drive the readers through ctypes with plain buffers and ints.
 *
 * fbt_run() feeds an input split at given offsets through one of three pipelines and writes
 * what came out to `out`:
 *   FBT_SSE       input is an event stream; out = events, each as a u32 (native) length + bytes
 *   FBT_HTTP      input is an HTTP response; out = the de-chunked body bytes
 *   FBT_HTTP_SSE  input is an HTTP response carrying an event stream; out = events as for FBT_SSE
 *   FBT_HTTP_JSON input is an HTTP response carrying one whole JSON answer: its body is kept in a buffer
 *                 grown by doubling up to sse_max (the core's whole-response mode, FBT_ERR_BODY_CAP
 *                 past it) and scanned once at the end; out = the scan's rc and facts, as fbt_json's
 * fbt_check_splits() runs fbt_run over EVERY set of 1 (or 2) split offsets and compares each
 * run's output, error code and consumed count with the given expectation; a loop in C keeps
 * the O(n^2) pair sweep fast. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fb_http.h"
#include "fb_json.h"
#include "fb_sse.h"

enum { FBT_SSE = 0, FBT_HTTP = 1, FBT_HTTP_SSE = 2, FBT_HTTP_JSON = 3 };
#define FBT_ERR_OUT_FULL (-100)
#define FBT_ERR_BODY_CAP (-104)
#define FBT_JSON_FACTS 15
static void fbt_facts(const fb_chunk_info_t *info, int64_t *facts);

typedef struct {
    int rc;               /* first error returned by a reader (or FBT_ERR_OUT_FULL), 0 if none */
    int reader_rc;        /* the reader's own return code, before the shim's reinterpretation */
    int eof_rc;           /* fb_http_feed_eof's result when asked for, else 0 */
    int http_state;
    int status;
    int http_minor;
    int chunked;
    int keep_alive;
    int event_stream;
    int content_coded;
    int64_t content_length;
    uint64_t body_bytes;
    uint64_t consumed;    /* input bytes fb_http consumed (less than the input after DONE) */
    uint64_t events;      /* fb_sse_t.events */
    uint64_t grow_calls;
    uint64_t out_len;     /* bytes written to out */
} fbt_result_t;

typedef struct {
    fb_sse_t sse;
    size_t sse_max;       /* grow() refuses beyond this */
    char *out;
    size_t out_cap, out_len;
    int out_full;
    uint64_t grow_calls;
    int mode;
    int sse_rc;           /* fb_sse_feed's error inside the body callback */
    char *body;           /* FBT_HTTP_JSON: the body so far (grown by doubling, as the core's) */
    size_t body_len, body_cap;
    int body_over;        /* the body passed sse_max */
} fbt_ctx_t;

static int fbt_keep_body(fbt_ctx_t *c, const char *data, size_t len) {
    size_t need = c->body_len + len;
    if (need > c->sse_max) {
        c->body_over = 1;
        return 1;
    }
    if (need > c->body_cap) {
        size_t cap = c->body_cap ? c->body_cap : 16;
        while (cap < need) cap *= 2;
        char *b = realloc(c->body, cap);
        if (b == NULL) return 1;
        c->body = b;
        c->body_cap = cap;
    }
    if (len) memcpy(c->body + c->body_len, data, len);
    c->body_len = need;
    return 0;
}

static int fbt_put(fbt_ctx_t *c, const void *d, size_t n) {
    if (n > c->out_cap - c->out_len) {
        c->out_full = 1;
        return 1;
    }
    if (n) memcpy(c->out + c->out_len, d, n);
    c->out_len += n;
    return 0;
}

static int fbt_on_event(void *ctx, const char *data, size_t len) {
    fbt_ctx_t *c = ctx;
    uint32_t n = (uint32_t)len;
    return fbt_put(c, &n, sizeof n) || fbt_put(c, data, len);
}

static int fbt_grow(void *ctx, fb_sse_t *st, size_t needed) {
    fbt_ctx_t *c = ctx;
    c->grow_calls++;
    if (needed > c->sse_max) return 1;
    size_t cap = st->cap * 2;
    if (cap < needed) cap = needed;
    if (cap > c->sse_max) cap = c->sse_max;
    char *b = realloc(st->buf, cap ? cap : 1);
    if (b == NULL) return 1;
    st->buf = b;
    st->cap = cap;
    return 0;
}

static int fbt_on_body(void *ctx, const char *data, size_t len) {
    fbt_ctx_t *c = ctx;
    if (c->mode == FBT_HTTP) return fbt_put(c, data, len);
    if (c->mode == FBT_HTTP_JSON) return fbt_keep_body(c, data, len);
    /* fb_http_feed turns nonzero into -FB_ERR_CALLBACK; fbt_run reports the SSE code instead. */
    c->sse_rc = fb_sse_feed(&c->sse, data, len, fbt_on_event, fbt_grow, c);
    return c->sse_rc;
}

/* cuts: ncuts ascending offsets in [0, len]. */
int fbt_run(int mode, const char *in, size_t len, const size_t *cuts, size_t ncuts, size_t sse_cap0,
            size_t sse_max, int eof, char *out, size_t out_cap, fbt_result_t *res) {
    fbt_ctx_t c;
    fb_http_t *h = malloc(sizeof *h); /* on the heap so ASan sees overruns of line[] */
    if (h == NULL) return -101;
    memset(&c, 0, sizeof c);
    memset(res, 0, sizeof *res);
    c.mode = mode;
    c.out = out;
    c.out_cap = out_cap;
    c.sse_max = sse_max;
    fb_sse_init(&c.sse, sse_cap0 ? malloc(sse_cap0) : NULL, sse_cap0);
    fb_http_init(h);
    int rc = 0;
    size_t at = 0, consumed = 0;
    int stopped = 0;
    for (size_t i = 0; i <= ncuts && !rc && !stopped; i++) {
        size_t to = i < ncuts ? cuts[i] : len;
        if (to < at || to > len) {
            rc = -102;
            break;
        }
        size_t n = to - at;
        /* Each piece in a buffer of its own, scribbled over and freed after its call, as a
         * socket read buffer is reused: a reader that kept a pointer into it shows it. */
        char *seg = malloc(n ? n : 1);
        if (seg == NULL) {
            rc = -101;
            break;
        }
        memcpy(seg, in + at, n);
        at = to;
        ssize_t used;
        if (mode == FBT_SSE) {
            rc = fb_sse_feed(&c.sse, seg, n, fbt_on_event, fbt_grow, &c);
            used = (ssize_t)n;
        } else {
            used = fb_http_feed(h, seg, n, fbt_on_body, &c);
        }
        memset(seg, 0xAA, n);
        free(seg);
        if (mode == FBT_SSE) {
            consumed += n;
            continue;
        }
        if (used < 0) {
            rc = (int)used;
            break;
        }
        consumed += (size_t)used;
        if ((size_t)used < n) stopped = 1; /* DONE inside this segment */
    }
    res->reader_rc = rc;
    if (rc == -FB_ERR_CALLBACK && c.sse_rc) rc = c.sse_rc;
    if (c.out_full) rc = FBT_ERR_OUT_FULL;
    if (c.body_over) rc = FBT_ERR_BODY_CAP;
    if (eof && !rc && mode != FBT_SSE) res->eof_rc = fb_http_feed_eof(h);
    if (mode == FBT_HTTP_JSON && !rc && (h->state == FB_HTTP_S_DONE || (eof && res->eof_rc == 0))) {
        /* The whole answer, scanned once where it lies in the buffer. */
        fb_chunk_info_t info;
        int64_t facts[1 + FBT_JSON_FACTS];
        facts[0] = fb_json_scan_chunk(c.body, c.body_len, &info);
        fbt_facts(&info, facts + 1);
        fbt_put(&c, facts, sizeof facts);
    }
    free(c.body);
    res->rc = rc;
    res->http_state = h->state;
    res->status = h->status;
    res->http_minor = h->http_minor;
    res->chunked = h->chunked;
    res->keep_alive = h->keep_alive;
    res->event_stream = h->event_stream;
    res->content_coded = h->content_coded;
    res->content_length = h->content_length;
    res->body_bytes = h->body_bytes;
    res->consumed = consumed;
    res->events = c.sse.events;
    res->grow_calls = c.grow_calls;
    res->out_len = c.out_len;
    free(c.sse.buf);
    free(h);
    return rc;
}

/* Run every split of `in` into 2 pieces (npieces_max 2) or into up to 3 pieces (3), also the
 * unsplit input, and compare with the expectation. Returns the number of mismatching runs;
 * the cuts of the first one go to bad_cuts[0..2). */
int64_t fbt_check_splits(int mode, const char *in, size_t len, int npieces_max, size_t sse_cap0,
                         size_t sse_max, int eof, const char *want, size_t want_len, int want_rc,
                         uint64_t want_consumed, size_t *bad_cuts) {
    char *out = malloc(want_len + 64);
    int64_t bad = 0;
    fbt_result_t r;
    size_t cuts[2];
    if (out == NULL) return -1;
    for (size_t i = 0; i <= len; i++) {
        size_t jmax = npieces_max >= 3 ? len : i;
        for (size_t j = i; j <= jmax; j++) {
            size_t nc = npieces_max >= 3 ? 2 : 1;
            cuts[0] = i;
            cuts[1] = j;
            int rc = fbt_run(mode, in, len, cuts, nc, sse_cap0, sse_max, eof, out, want_len + 64, &r);
            int ok = rc == want_rc && r.out_len == want_len && memcmp(out, want, want_len) == 0 &&
                     (mode == FBT_SSE || want_rc != 0 || r.consumed == want_consumed);
            if (!ok) {
                if (bad == 0) {
                    bad_cuts[0] = i;
                    bad_cuts[1] = j;
                }
                bad++;
            }
        }
    }
    free(out);
    return bad;
}

/* One byte per call. */
int fbt_run_bytewise(int mode, const char *in, size_t len, size_t sse_cap0, size_t sse_max, int eof,
                     char *out, size_t out_cap, fbt_result_t *res) {
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    if (cuts == NULL) return -101;
    for (size_t i = 0; i < len; i++) cuts[i] = i + 1;
    int rc = fbt_run(mode, in, len, cuts, len, sse_cap0, sse_max, eof, out, out_cap, res);
    free(cuts);
    return rc;
}

/* fb_json_scan_chunk with the struct flattened into an int64 array:
 * [completion_tokens, prompt_tokens, sent_ns, has_content, has_reasoning, has_error,
 *  has_finish, has_usage, n_choices, usage_invalid, cached_tokens, total_tokens, n_data, has_tool, has_end]. */
static void fbt_facts(const fb_chunk_info_t *info, int64_t *facts) {
    facts[0] = info->completion_tokens;
    facts[1] = info->prompt_tokens;
    facts[2] = info->sent_ns;
    facts[3] = info->has_content;
    facts[4] = info->has_reasoning;
    facts[5] = info->has_error;
    facts[6] = info->has_finish;
    facts[7] = info->has_usage;
    facts[8] = info->n_choices;
    facts[9] = info->usage_invalid;
    facts[10] = info->cached_tokens;
    facts[11] = info->total_tokens;
    facts[12] = info->n_data;
    facts[13] = info->has_tool;
    facts[14] = info->has_end;
}

int fbt_json(const char *data, size_t len, int64_t *facts) {
    fb_chunk_info_t info;
    int rc = fb_json_scan_chunk(data, len, &info);
    fbt_facts(&info, facts);
    return rc;
}

/* fb_json_scan_chunk_text: the answer pieces joined into out[0..cap), their count in *pieces. A piece
 * that does not fit stops the scan (the callback's non-zero return). */
typedef struct {
    char *out;
    size_t cap, len;
    int64_t pieces;
} fbt_answer_t;

static int fbt_keep_answer(void *ctx, const char *text, size_t len) {
    fbt_answer_t *a = ctx;
    if (len > a->cap - a->len) return 1;
    memcpy(a->out + a->len, text, len);
    a->len += len;
    a->pieces++;
    return 0;
}

int fbt_json_answer(const char *data, size_t len, int64_t *facts, char *out, size_t cap, size_t *out_len,
                    int64_t *pieces) {
    fbt_answer_t a = {out, cap, 0, 0};
    fb_chunk_info_t info;
    int rc = fb_json_scan_chunk_text(data, len, &info, fbt_keep_answer, &a);
    fbt_facts(&info, facts);
    *out_len = a.len;
    *pieces = a.pieces;
    return rc;
}

/* A typed-event API's tables from flat arrays: names[0..n) NUL-terminated, with their kinds, in the order
 * types, delta keys, usage holders, input keys, then output_key, cached_key, details_key and its key. */
static fb_api_name_t fbt_name(const char *s, int kind) {
    fb_api_name_t n = {s, s ? strlen(s) : 0, kind};
    if (n.n == 0) n.s = NULL;
    return n;
}

/* fb_json_scan_event with a table built from the counts and arrays given, facts as fbt_json's, the answer
 * handed over joined into out[0..cap). */
int fbt_json_api(const char *data, size_t len, int64_t *facts, const char **names, const int *kinds,
                 const int *counts, char *out, size_t cap, size_t *out_len, int64_t *pieces) {
    fb_api_t api;
    memset(&api, 0, sizeof api);
    int at = 0;
    for (int i = 0; i < counts[0] && i < FB_API_MAX_TYPES; i++, at++) api.types[i] = fbt_name(names[at], kinds[at]);
    api.n_types = counts[0];
    for (int i = 0; i < counts[1] && i < FB_API_MAX_KEYS; i++, at++) api.delta_keys[i] = fbt_name(names[at], kinds[at]);
    api.n_delta_keys = counts[1];
    for (int i = 0; i < counts[2] && i < FB_API_MAX_KEYS; i++, at++) api.usage_holders[i] = fbt_name(names[at], 0);
    api.n_usage_holders = counts[2];
    for (int i = 0; i < counts[3] && i < FB_API_MAX_KEYS; i++, at++) api.input_keys[i] = fbt_name(names[at], 0);
    api.n_input_keys = counts[3];
    api.output_key = fbt_name(names[at++], 0);
    api.cached_key = fbt_name(names[at++], 0);
    api.details_key = fbt_name(names[at++], 0);
    api.details_cached_key = fbt_name(names[at++], 0);
    fbt_answer_t a = {out, cap, 0, 0};
    fb_chunk_info_t info;
    int rc = fb_json_scan_event(data, len, &info, &api, fbt_keep_answer, &a);
    fbt_facts(&info, facts);
    *out_len = a.len;
    *pieces = a.pieces;
    return rc;
}
