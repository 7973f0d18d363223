/* fb_http.c: incremental HTTP/1.1 response reader (RFC 9112). See fb_http.h for the contract.
 *
 * Invariants kept between calls:
 *  - line[0..line_len) holds the start of an unfinished line (status, header, chunk-size or
 *    trailer line) and never its LF; a CR that would overflow line[] by exactly one byte is
 *    held in flags as F_CR_HELD instead, so that a CRLF-terminated line of exactly
 *    FB_HTTP_LINE_MAX bytes is accepted just like an LF-terminated one.
 *  - In FB_HTTP_S_CHUNK_DATA_END, line_len is 1 after the CR of the CRLF and 0 before it.
 *  - status stays 0 while an interim (1xx) response is read (flags has F_INTERIM).
 *  - Body bytes are handed to the callback straight from the caller's buffer, never copied.
 *
 * Line ends: RFC 9112 section 2.2 lets a recipient take a lone LF as a line end and ignore a CR
 * before it; that is what is done here. A bare CR inside a line is kept as a byte of the line. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include "fb_http.h"

/* flags: header facts that only take effect at the end of the header section. */
enum {
    F_CR_HELD = 1u << 0,    /* a trailing CR was dropped because line[] was full */
    F_INTERIM = 1u << 1,    /* the response being read is a 1xx */
    F_CONN_CLOSE = 1u << 2, /* "Connection: close" seen */
    F_CONN_KEEP = 1u << 3,  /* "Connection: keep-alive" seen */
    F_TE = 1u << 4,         /* a Transfer-Encoding field was seen */
    F_CL = 1u << 5          /* a Content-Length field was seen (content_length holds it) */
};

static inline int fb_lower(int c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

static inline int fb_is_ows(int c) { return c == ' ' || c == '\t'; }

/* ASCII case-insensitive equality of s[0..n) with the lower-case literal lit[0..litn). */
static inline int fb_ieq(const char *s, size_t n, const char *lit, size_t litn) {
    if (n != litn) return 0;
    for (size_t i = 0; i < n; i++)
        if (fb_lower((unsigned char)s[i]) != lit[i]) return 0;
    return 1;
}
#define FB_IEQ(s, n, lit) fb_ieq((s), (n), lit, sizeof(lit) - 1)

/* Trim OWS (SP / HTAB, RFC 9110 section 5.6.3) from both ends of s[0..*n). */
static inline const char *fb_trim(const char *s, size_t *n) {
    size_t a = 0, b = *n;
    while (a < b && fb_is_ows((unsigned char)s[a])) a++;
    while (b > a && fb_is_ows((unsigned char)s[b - 1])) b--;
    *n = b - a;
    return s + a;
}

/* Split the comma-separated list s[0..n) (RFC 9110 section 5.6.1): returns the next element,
 * trimmed (possibly empty), in *el and *el_n, and advances *pos past it and its comma. Returns 0
 * when the list is exhausted. */
static inline int fb_list_next(const char *s, size_t n, size_t *pos, const char **el, size_t *el_n) {
    if (*pos > n) return 0;
    const char *start = s + *pos;
    const char *comma = memchr(start, ',', n - *pos);
    size_t len = comma ? (size_t)(comma - start) : n - *pos;
    *pos += len + 1; /* past the comma; past n (ends the list) when there was none */
    *el_n = len;
    *el = fb_trim(start, el_n);
    return 1;
}

void fb_http_init(fb_http_t *h) {
    h->state = FB_HTTP_S_STATUS;
    h->status = 0;
    h->http_minor = 0;
    h->chunked = 0;
    h->keep_alive = 0;
    h->event_stream = 0;
    h->content_coded = 0;
    h->content_length = -1;
    h->remaining = 0;
    h->body_bytes = 0;
    h->flags = 0;
    h->line_len = 0;
}

/* status-line = HTTP-version SP status-code SP [ reason-phrase ]   (RFC 9112 section 4)
 * HTTP-version = "HTTP/" DIGIT "." DIGIT (section 2.3); only major version 1 is read. The SP
 * before an empty reason phrase is commonly left out, so "HTTP/1.1 200" is accepted too. */
static int fb_http_status_line(fb_http_t *h, const char *s, size_t n) {
    if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0) return -FB_ERR_HTTP_STATUS_LINE;
    if (s[7] < '0' || s[7] > '9' || s[8] != ' ') return -FB_ERR_HTTP_STATUS_LINE;
    int code = 0;
    for (int i = 9; i < 12; i++) {
        if (s[i] < '0' || s[i] > '9') return -FB_ERR_HTTP_STATUS_LINE;
        code = code * 10 + (s[i] - '0');
    }
    if (code < 100 || (n > 12 && s[12] != ' ')) return -FB_ERR_HTTP_STATUS_LINE;
    h->http_minor = s[7] - '0';
    if (code < 200) {
        h->flags |= F_INTERIM;
    } else {
        h->status = code;
    }
    h->state = FB_HTTP_S_HEADERS;
    return 0;
}

/* Content-Length = 1*DIGIT (RFC 9110 section 8.6). A list of identical values ("42, 42") may be
 * accepted as one value, as that section allows; differing values are an error, also across
 * repeated fields. Overflow of int64 is an error. */
static int fb_http_content_length(fb_http_t *h, const char *v, size_t n) {
    size_t pos = 0;
    const char *el;
    size_t el_n;
    while (fb_list_next(v, n, &pos, &el, &el_n)) {
        if (el_n == 0) return -FB_ERR_HTTP_HEADER;
        int64_t x = 0;
        for (size_t i = 0; i < el_n; i++) {
            unsigned d = (unsigned)(unsigned char)el[i] - '0';
            if (d > 9 || x > (INT64_MAX - (int64_t)d) / 10) return -FB_ERR_HTTP_HEADER;
            x = x * 10 + (int64_t)d;
        }
        if ((h->flags & F_CL) && h->content_length != x) return -FB_ERR_HTTP_HEADER;
        h->flags |= F_CL;
        h->content_length = x;
    }
    return 0;
}

/* field-line = field-name ":" OWS field-value OWS   (RFC 9112 section 5)
 * No whitespace is allowed between the name and the colon (section 5.1, "MUST reject"). A line
 * starting with SP/HTAB is obsolete line folding (section 5.2); it is rejected rather than
 * unfolded, since a folded framing field is a smuggling vector and no server we talk to folds. */
static int fb_http_header_line(fb_http_t *h, const char *s, size_t n) {
    const char *colon = memchr(s, ':', n);
    if (colon == NULL || colon == s) return -FB_ERR_HTTP_HEADER;
    size_t name_n = (size_t)(colon - s);
    if (fb_is_ows((unsigned char)s[0]) || fb_is_ows((unsigned char)s[name_n - 1]))
        return -FB_ERR_HTTP_HEADER;
    size_t vn = n - name_n - 1;
    const char *v = fb_trim(colon + 1, &vn);
    size_t pos = 0;
    const char *el;
    size_t el_n;

    switch (name_n) {
    case 10: /* Connection: a list of connection options (RFC 9110 section 7.6.1) */
        if (!FB_IEQ(s, name_n, "connection")) break;
        while (fb_list_next(v, vn, &pos, &el, &el_n)) {
            if (FB_IEQ(el, el_n, "close")) h->flags |= F_CONN_CLOSE;
            else if (FB_IEQ(el, el_n, "keep-alive")) h->flags |= F_CONN_KEEP;
        }
        break;
    case 12: /* Content-Type: text/event-stream [; parameters] (RFC 9110 section 8.3.1) */
        if (!FB_IEQ(s, name_n, "content-type")) break;
        {
            const char *semi = memchr(v, ';', vn);
            size_t tn = semi ? (size_t)(semi - v) : vn;
            const char *t = fb_trim(v, &tn);
            h->event_stream = FB_IEQ(t, tn, "text/event-stream");
        }
        break;
    case 14:
        if (!FB_IEQ(s, name_n, "content-length")) break;
        return fb_http_content_length(h, v, vn);
    case 16: /* Content-Encoding: codings applied to the body (RFC 9110 section 8.4) */
        if (!FB_IEQ(s, name_n, "content-encoding")) break;
        while (fb_list_next(v, vn, &pos, &el, &el_n)) {
            if (el_n && !FB_IEQ(el, el_n, "identity")) h->content_coded = 1;
        }
        break;
    case 17: /* Transfer-Encoding: the codings in order; chunked only counts when it is the last
              * (RFC 9112 section 6.3 items 3 and 4). Repeated fields form one list, so the last
              * non-empty element seen decides. */
        if (!FB_IEQ(s, name_n, "transfer-encoding")) break;
        h->flags |= F_TE;
        while (fb_list_next(v, vn, &pos, &el, &el_n)) {
            if (el_n == 0) continue;
            const char *semi = memchr(el, ';', el_n); /* transfer-parameters, ignored */
            size_t cn = semi ? (size_t)(semi - el) : el_n;
            const char *c = fb_trim(el, &cn);
            h->chunked = FB_IEQ(c, cn, "chunked");
        }
        break;
    default:
        break;
    }
    return 0;
}

/* The empty line after the header section: pick the body framing by RFC 9112 section 6.3. */
static int fb_http_headers_end(fb_http_t *h) {
    unsigned f = h->flags;
    if (f & F_INTERIM) {
        /* 1xx: no body (RFC 9112 6.3 item 1); the final response follows. */
        fb_http_init(h);
        return 0;
    }
    /* Persistence (section 9.3): "close" wins; HTTP/1.1 persists by default, HTTP/1.0 only with
     * "keep-alive". */
    h->keep_alive = !(f & F_CONN_CLOSE) && (h->http_minor >= 1 || (f & F_CONN_KEEP));
    h->flags = 0;
    if (h->status == 204 || h->status == 304) {
        /* RFC 9112 6.3 item 1: no body, whatever the framing fields say. */
        h->state = FB_HTTP_S_DONE;
    } else if (h->chunked) {
        /* RFC 9112 6.3 item 3. Transfer-Encoding together with Content-Length, or in an HTTP/1.0
         * message (section 6.1), is faulty framing: read it, but do not reuse the connection. */
        if ((f & F_CL) || h->http_minor == 0) h->keep_alive = 0;
        h->state = FB_HTTP_S_CHUNK_SIZE;
    } else if (f & F_TE) {
        /* RFC 9112 6.3 item 4: a response whose last coding is not chunked is delimited by the close. */
        h->keep_alive = 0;
        h->state = FB_HTTP_S_BODY_EOF;
    } else if (f & F_CL) {
        /* RFC 9112 6.3 item 6. */
        h->remaining = (uint64_t)h->content_length;
        h->state = h->remaining ? FB_HTTP_S_BODY_LENGTH : FB_HTTP_S_DONE;
    } else {
        /* RFC 9112 6.3 item 7: read until the server closes. */
        h->keep_alive = 0;
        h->state = FB_HTTP_S_BODY_EOF;
    }
    return 0;
}

/* chunk-size [ chunk-ext ] CRLF, chunk-size = 1*HEXDIG (RFC 9112 section 7.1),
 * chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ) (section 7.1.1).
 * Extensions are ignored; anything but BWS or ';' after the digits is an error, as is a size
 * that does not fit in 64 bits. A zero size is the last-chunk: trailers follow (section 7.1.2). */
static int fb_http_chunk_size_line(fb_http_t *h, const char *s, size_t n) {
    uint64_t size = 0;
    size_t i = 0;
    for (; i < n; i++) {
        int c = (unsigned char)s[i];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (unsigned)((c | 0x20) - 'a' + 10);
        else break;
        if (size > (UINT64_MAX >> 4)) return -FB_ERR_HTTP_CHUNK;
        size = (size << 4) | d;
    }
    if (i == 0) return -FB_ERR_HTTP_CHUNK;
    while (i < n && fb_is_ows((unsigned char)s[i])) i++;
    if (i < n && s[i] != ';') return -FB_ERR_HTTP_CHUNK;
    h->remaining = size;
    h->state = size ? FB_HTTP_S_CHUNK_DATA : FB_HTTP_S_TRAILERS;
    return 0;
}

/* One complete line s[0..n), without its line end, in a line-reading state. */
static int fb_http_line(fb_http_t *h, const char *s, size_t n) {
    switch (h->state) {
    case FB_HTTP_S_STATUS:
        return fb_http_status_line(h, s, n);
    case FB_HTTP_S_HEADERS:
        return n == 0 ? fb_http_headers_end(h) : fb_http_header_line(h, s, n);
    case FB_HTTP_S_CHUNK_SIZE:
        return fb_http_chunk_size_line(h, s, n);
    default: /* FB_HTTP_S_TRAILERS: trailer fields are read and ignored (section 7.1.2) */
        if (n == 0) h->state = FB_HTTP_S_DONE;
        return 0;
    }
}

/* Line-reading states: take bytes up to and including the next LF. A line that is complete in
 * buf and has nothing held in line[] is parsed in place, without a copy. Returns the bytes
 * consumed (> 0), or -FB_ERR_*. */
static ssize_t fb_http_take_line(fb_http_t *h, const char *p, size_t avail) {
    const char *nl = memchr(p, '\n', avail);
    if (nl == NULL) {
        /* No line end yet: hold the bytes. */
        if (h->flags & F_CR_HELD) return -FB_ERR_HTTP_LINE_TOO_LONG; /* the CR was not a line end */
        size_t total = h->line_len + avail;
        size_t keep = avail;
        if (total > FB_HTTP_LINE_MAX) {
            if (total != FB_HTTP_LINE_MAX + 1 || p[avail - 1] != '\r') return -FB_ERR_HTTP_LINE_TOO_LONG;
            h->flags |= F_CR_HELD;
            keep--;
        }
        memcpy(h->line + h->line_len, p, keep);
        h->line_len += keep;
        return (ssize_t)avail;
    }
    size_t n = (size_t)(nl - p);
    const char *s;
    size_t len;
    if (h->flags & F_CR_HELD) {
        /* line[] is full and the held CR ends it only if this LF follows it at once. */
        if (n != 0) return -FB_ERR_HTTP_LINE_TOO_LONG;
        h->flags &= ~(unsigned)F_CR_HELD;
        s = h->line;
        len = h->line_len;
    } else if (h->line_len == 0) {
        s = p;
        len = (n && p[n - 1] == '\r') ? n - 1 : n;
        if (len > FB_HTTP_LINE_MAX) return -FB_ERR_HTTP_LINE_TOO_LONG;
    } else {
        size_t add = (n && p[n - 1] == '\r') ? n - 1 : n;
        if (h->line_len + add > FB_HTTP_LINE_MAX) return -FB_ERR_HTTP_LINE_TOO_LONG;
        memcpy(h->line + h->line_len, p, add);
        len = h->line_len + add;
        if (n == 0 && h->line[len - 1] == '\r') len--; /* CR at the end of the previous feed */
        s = h->line;
    }
    h->line_len = 0;
    int rc = fb_http_line(h, s, len);
    if (rc) return rc;
    return (ssize_t)(n + 1);
}

static inline int fb_http_deliver(fb_http_t *h, const char *p, size_t n, fb_http_body_cb cb, void *ctx) {
    h->body_bytes += n;
    if (cb && cb(ctx, p, n)) return -FB_ERR_CALLBACK;
    return 0;
}

ssize_t fb_http_feed(fb_http_t *h, const char *buf, size_t len, fb_http_body_cb cb, void *ctx) {
    if (len == 0) return 0; /* buf may be NULL then */
    const char *p = buf, *end = buf + len;
    while (p < end) {
        size_t avail = (size_t)(end - p);
        switch (h->state) {
        case FB_HTTP_S_STATUS:
        case FB_HTTP_S_HEADERS:
        case FB_HTTP_S_CHUNK_SIZE:
        case FB_HTTP_S_TRAILERS: {
            ssize_t used = fb_http_take_line(h, p, avail);
            if (used < 0) return used;
            p += used;
            break;
        }
        case FB_HTTP_S_BODY_LENGTH:
        case FB_HTTP_S_CHUNK_DATA: {
            /* remaining > 0 here: both states are entered only with a nonzero count. The state
             * moves on before the callback, so the reader is consistent if it stops. */
            size_t n = h->remaining < avail ? (size_t)h->remaining : avail;
            const char *d = p;
            h->remaining -= n;
            p += n;
            if (h->remaining == 0)
                h->state = h->state == FB_HTTP_S_CHUNK_DATA ? FB_HTTP_S_CHUNK_DATA_END : FB_HTTP_S_DONE;
            int rc = fb_http_deliver(h, d, n, cb, ctx);
            if (rc) return rc;
            break;
        }
        case FB_HTTP_S_CHUNK_DATA_END:
            /* chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF (section 7.1); a lone LF is
             * taken as the line end (section 2.2). line_len counts a CR already seen. */
            if (*p == '\r' && h->line_len == 0) {
                h->line_len = 1;
            } else if (*p == '\n') {
                h->line_len = 0;
                h->state = FB_HTTP_S_CHUNK_SIZE;
            } else {
                return -FB_ERR_HTTP_CHUNK;
            }
            p++;
            break;
        case FB_HTTP_S_BODY_EOF: {
            const char *d = p;
            p = end;
            int rc = fb_http_deliver(h, d, avail, cb, ctx);
            if (rc) return rc;
            break;
        }
        default: /* FB_HTTP_S_DONE: what follows belongs to the next response */
            return p - buf;
        }
    }
    return p - buf;
}

int fb_http_feed_eof(fb_http_t *h) {
    if (h->state == FB_HTTP_S_BODY_EOF) h->state = FB_HTTP_S_DONE;
    return h->state == FB_HTTP_S_DONE ? 0 : -FB_ERR_HTTP_EOF;
}
