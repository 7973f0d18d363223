/* fb_sse.h: incremental Server-Sent Events scanner (WHATWG HTML, "Parsing an event stream").
 *
 * Survives any split of the byte stream. Lines end in CRLF, LF or CR (a CRLF split across
 * two feeds is one line end). A leading UTF-8 BOM is skipped. Per line: empty -> dispatch;
 * ':' first -> comment, ignored; else field name up to ':' and value after it, one leading
 * space removed. "data" values are appended to the caller's buffer, joined by '\n'; "event",
 * "id", "retry" and unknown fields are ignored (their values are not stored). On a blank
 * line an event is dispatched if any data line was seen (an empty data value still counts),
 * calling on_event(ctx, data, len) with the data without a trailing '\n'. At EOF an
 * unterminated event is discarded, as the spec says.
 *
 * Memory: the caller owns `buf` (capacity `cap`). When a data value does not fit, the
 * scanner calls grow(ctx, st, needed_total); the callback may realloc st->buf and raise
 * st->cap to at least needed_total and return 0, or return nonzero to refuse, in which case
 * fb_sse_feed returns -FB_ERR_SSE_TOO_BIG. The scanner never allocates or frees. An event whose
 * one data line and closing blank line arrive in the same feed is dispatched from the input
 * itself, not copied; grow() is still asked for its size, so limits do not depend on splits. */
#ifndef FB_SSE_H
#define FB_SSE_H
#include <stddef.h>
#include <stdint.h>
#include "fb_errors.h"

typedef struct fb_sse_s fb_sse_t;
typedef int (*fb_sse_event_cb)(void *ctx, const char *data, size_t len);
typedef int (*fb_sse_grow_cb)(void *ctx, fb_sse_t *st, size_t needed);

struct fb_sse_s {
    char *buf;          /* caller-owned data buffer */
    size_t cap;         /* its capacity */
    size_t len;         /* bytes of data held for the event being assembled */
    const char *view;   /* or, during one fb_sse_feed call: its data where it lies in the input */
    size_t view_len;    /* (see fb_sse.c, "in place") */
    int state;          /* internal: where in a line we are */
    int have_data;      /* a data field was seen in the current event */
    int after_cr;       /* the previous byte was CR: a following LF is part of the same line end */
    int bom_checked;    /* the stream's first bytes were checked for a BOM */
    size_t bom_len;     /* BOM bytes matched so far */
    size_t name_len;    /* bytes of the field name matched so far */
    char name[8];       /* the field name, when it is short enough to be one we know */
    uint64_t events;    /* events dispatched since init */
};

/* Reset the scanner for a new stream; keeps buf and cap. */
void fb_sse_init(fb_sse_t *st, char *buf, size_t cap);

/* Feed bytes. Returns 0, -FB_ERR_SSE_TOO_BIG, or -FB_ERR_CALLBACK when on_event returned
 * nonzero (bytes after that event are not scanned). */
int fb_sse_feed(fb_sse_t *st, const char *data, size_t len,
                fb_sse_event_cb on_event, fb_sse_grow_cb grow, void *ctx);
#endif
