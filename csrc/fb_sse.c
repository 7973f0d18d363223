/* fb_sse.c: incremental Server-Sent Events scanner. See fb_sse.h for the contract.
 *
 * Follows WHATWG HTML, section 9.2.6 "Parsing an event stream" and 9.2.6's "interpreting an
 * event stream", with these deliberate narrowings:
 *  - bytes are scanned, not decoded: invalid UTF-8 is passed through instead of becoming
 *    U+FFFD, which leaves every ASCII field name, colon and line end where the spec sees them;
 *  - only "data" is kept; "event", "id" and "retry" are recognised by the spec but have no
 *    effect here, so every event is dispatched whatever its type ("message" or not).
 *
 * Per line (spec):  empty -> dispatch;  ':' first -> comment;  "name:value" -> field name and
 * value, one leading U+0020 dropped from the value;  no colon -> the whole line is the name and
 * the value is empty. "data": append the value and a LF to the data buffer. Dispatch: if the
 * data buffer is empty, do nothing; else drop its last LF and fire the event.
 *
 * Representation: buf[0..len) is the data buffer WITHOUT its final LF; have_data says whether
 * the spec's buffer is non-empty (it holds at least that LF), so "data:" alone still yields an
 * event with empty data. A second data line first appends the '\n' that the first one owed.
 *
 * In place: a data line that starts the event's data and ends within the feed is not copied; view
 * points at it in the input. The blank line that usually follows in the same feed dispatches it
 * from there (one write per event is how servers send). Anything else (a second data line, the
 * end of the feed) first copies it into buf, so buf holds the event exactly as if it had been
 * copied all along. grow() is asked when the line is taken, with the size a copy would need, so
 * the same events are refused whatever the split.
 *
 * Invariants between calls:
 *  - view is NULL;
 *  - state says where in the current line we are; name[0..min(name_len, 8)) holds the start
 *    of the field name while in S_NAME (only "data" is compared, so longer names need no
 *    storage, just their length);
 *  - after_cr is set right after a CR line end: an LF that follows, in this feed or the next,
 *    is part of the same line end (spec: "CRLF" | "LF" | "CR").
 *  - bom_checked becomes 1 once the first bytes of the stream are known to be or not be the
 *    UTF-8 BOM EF BB BF; bom_len counts the BOM bytes matched (and held back) until then. */
#include <string.h>
#include "fb_sse.h"

enum {
    S_LINE_START = 0, /* at the start of a line */
    S_NAME,           /* inside a field name, name_len bytes so far */
    S_DATA_START,     /* after "data:", a single space may follow and is dropped */
    S_DATA,           /* inside a data value: bytes go to buf */
    S_IGNORE          /* inside a comment or a value that is not kept */
};

static const char fb_sse_bom[3] = {'\xEF', '\xBB', '\xBF'};

/* First CR or LF in [p, end), or NULL. Two memchr passes at most (LF-terminated streams
 * pay for the CR search only over the line itself), no per-byte call. */
static inline const char *fb_sse_find_eol(const char *p, const char *end) {
    const char *lf = memchr(p, '\n', (size_t)(end - p));
    const char *lim = lf ? lf : end;
    const char *cr = memchr(p, '\r', (size_t)(lim - p));
    return cr ? cr : lf;
}

/* Append d[0..n) to the data buffer, asking grow() for room first when needed. */
static inline int fb_sse_append(fb_sse_t *st, const char *d, size_t n, fb_sse_grow_cb grow, void *ctx) {
    if (n == 0) return 0;
    if (n > st->cap - st->len) {
        if (n > SIZE_MAX - st->len) return -FB_ERR_SSE_TOO_BIG;
        size_t needed = st->len + n;
        /* A callback that says yes but leaves cap short is taken as a refusal. */
        if (grow == NULL || grow(ctx, st, needed) != 0 || st->cap < needed || st->buf == NULL)
            return -FB_ERR_SSE_TOO_BIG;
    }
    memcpy(st->buf + st->len, d, n);
    st->len += n;
    return 0;
}

/* Copy an in-place data line into buf (room was made when it was taken). */
static inline int fb_sse_keep_view(fb_sse_t *st, fb_sse_grow_cb grow, void *ctx) {
    if (st->view == NULL) return 0;
    const char *d = st->view;
    st->view = NULL;
    return fb_sse_append(st, d, st->view_len, grow, ctx);
}

/* A "data" field begins: the spec's buffer gets value + LF; ours owes the previous LF now. */
static inline int fb_sse_data_begin(fb_sse_t *st, fb_sse_grow_cb grow, void *ctx) {
    if (st->have_data) {
        int rc = fb_sse_keep_view(st, grow, ctx);
        return rc ? rc : fb_sse_append(st, "\n", 1, grow, ctx);
    }
    st->have_data = 1;
    return 0;
}

/* A data line d[0..n) complete in this feed, with no data before it: take it in place, after
 * asking grow() for the room a copy would need. */
static inline int fb_sse_take_view(fb_sse_t *st, const char *d, size_t n, fb_sse_grow_cb grow, void *ctx) {
    if (n > st->cap && (grow == NULL || grow(ctx, st, n) != 0 || st->cap < n || st->buf == NULL))
        return -FB_ERR_SSE_TOO_BIG;
    st->view = d;
    st->view_len = n;
    return 0;
}

static inline int fb_sse_name_is_data(const fb_sse_t *st) {
    return st->name_len == 4 && memcmp(st->name, "data", 4) == 0;
}

/* The line ends (at a CR or LF, which the caller has consumed). */
static inline int fb_sse_line_end(fb_sse_t *st, int was_cr, fb_sse_event_cb on_event,
                                  fb_sse_grow_cb grow, void *ctx) {
    int rc = 0, state = st->state;
    st->state = S_LINE_START;
    st->after_cr = was_cr;
    if (state == S_LINE_START) {
        /* Empty line: dispatch the event, if the data buffer is not empty. */
        if (st->have_data) {
            const char *d = st->view ? st->view : st->buf;
            size_t n = st->view ? st->view_len : st->len;
            if (n == 0) d = ""; /* an empty event before any buffer: never hand a callback NULL */
            st->events++;
            st->have_data = 0;
            st->view = NULL;
            st->len = 0;
            if (on_event && on_event(ctx, d, n)) return -FB_ERR_CALLBACK;
        }
    } else if (state == S_NAME) {
        /* No colon: the whole line is the field name, the value is empty. */
        if (fb_sse_name_is_data(st)) rc = fb_sse_data_begin(st, grow, ctx);
    }
    return rc;
}

static int fb_sse_scan(fb_sse_t *st, const char *p, const char *end,
                       fb_sse_event_cb on_event, fb_sse_grow_cb grow, void *ctx) {
    int rc;
    while (p < end) {
        if (st->after_cr) {
            st->after_cr = 0;
            if (*p == '\n') { /* the LF of a CRLF */
                p++;
                continue;
            }
        }
        switch (st->state) {
        case S_LINE_START: {
            char c = *p;
            if (c == '\n' || c == '\r') {
                p++;
                rc = fb_sse_line_end(st, c == '\r', on_event, grow, ctx);
                if (rc) return rc;
            } else if (c == ':') {
                p++;
                st->state = S_IGNORE; /* a comment */
            } else {
                st->name_len = 0;
                st->state = S_NAME;
            }
            break;
        }
        case S_NAME:
            /* Field names are a few bytes: a plain loop, no call per byte. */
            while (p < end) {
                char c = *p++;
                if (c == ':') {
                    if (fb_sse_name_is_data(st)) {
                        rc = fb_sse_data_begin(st, grow, ctx);
                        if (rc) return rc;
                        st->state = S_DATA_START;
                    } else {
                        st->state = S_IGNORE;
                    }
                    break;
                }
                if (c == '\n' || c == '\r') {
                    rc = fb_sse_line_end(st, c == '\r', on_event, grow, ctx);
                    if (rc) return rc;
                    break;
                }
                if (st->name_len < sizeof st->name) st->name[st->name_len] = c;
                st->name_len++;
            }
            break;
        case S_DATA_START:
            /* "If value starts with a U+0020 SPACE character, remove it from value." */
            if (*p == ' ') p++;
            st->state = S_DATA;
            break;
        default: { /* S_DATA or S_IGNORE */
            const char *eol = fb_sse_find_eol(p, end);
            const char *stop = eol ? eol : end;
            if (st->state == S_DATA) {
                if (eol && st->len == 0 && st->view == NULL)
                    rc = fb_sse_take_view(st, p, (size_t)(stop - p), grow, ctx);
                else
                    rc = fb_sse_append(st, p, (size_t)(stop - p), grow, ctx);
                if (rc) return rc;
            }
            p = stop;
            if (eol) {
                p++;
                rc = fb_sse_line_end(st, *eol == '\r', on_event, grow, ctx);
                if (rc) return rc;
            }
            break;
        }
        }
    }
    return 0;
}

void fb_sse_init(fb_sse_t *st, char *buf, size_t cap) {
    st->buf = buf;
    st->cap = cap;
    st->len = 0;
    st->view = NULL;
    st->view_len = 0;
    st->state = S_LINE_START;
    st->have_data = 0;
    st->after_cr = 0;
    st->bom_checked = 0;
    st->bom_len = 0;
    st->name_len = 0;
    memset(st->name, 0, sizeof st->name);
    st->events = 0;
}

int fb_sse_feed(fb_sse_t *st, const char *data, size_t len,
                fb_sse_event_cb on_event, fb_sse_grow_cb grow, void *ctx) {
    if (len == 0) return 0; /* data may be NULL then */
    const char *p = data, *end = data + len;
    if (!st->bom_checked) {
        /* The spec's decoder strips one leading BOM. Match it byte by byte, across feeds; on a
         * mismatch the bytes held back were ordinary data and are scanned first. */
        while (p < end && st->bom_len < 3 && *p == fb_sse_bom[st->bom_len]) {
            st->bom_len++;
            p++;
        }
        if (st->bom_len == 3) {
            st->bom_checked = 1;
        } else if (p < end) {
            st->bom_checked = 1;
            if (st->bom_len) {
                int rc = fb_sse_scan(st, fb_sse_bom, fb_sse_bom + st->bom_len, on_event, grow, ctx);
                if (rc) return rc;
            }
        } else {
            return 0; /* all of it was a BOM prefix: wait for more */
        }
    }
    int rc = fb_sse_scan(st, p, end, on_event, grow, ctx);
    /* The input is the caller's: nothing may point into it after this call. */
    int kept = fb_sse_keep_view(st, grow, ctx);
    return rc ? rc : kept;
}
