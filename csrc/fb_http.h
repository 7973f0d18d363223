/* fb_http.h: incremental HTTP/1.1 response reader (RFC 9112).
 *
 * Survives any split of the byte stream: every byte may arrive in its own call. Reads the
 * status line and headers, then delivers the body, de-chunked, to a callback in the pieces
 * in which it arrives (no copy of body bytes). Content-Length, chunked and close-delimited
 * bodies; 1xx interim responses are skipped; 204 and 304 have no body. Chunk extensions and
 * trailers are read and ignored. No allocation: the only buffer is line[] inside the struct,
 * used for the status line, header lines and chunk-size lines. */
#ifndef FB_HTTP_H
#define FB_HTTP_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "fb_errors.h"

#define FB_HTTP_LINE_MAX 8192

enum {
    FB_HTTP_S_STATUS = 0,     /* reading the status line */
    FB_HTTP_S_HEADERS,        /* reading header lines */
    FB_HTTP_S_BODY_LENGTH,    /* Content-Length body, `remaining` bytes left */
    FB_HTTP_S_CHUNK_SIZE,     /* reading a chunk-size line */
    FB_HTTP_S_CHUNK_DATA,     /* inside chunk data, `remaining` bytes left */
    FB_HTTP_S_CHUNK_DATA_END, /* expecting the CRLF after chunk data */
    FB_HTTP_S_TRAILERS,       /* reading trailer lines after the last chunk */
    FB_HTTP_S_BODY_EOF,       /* close-delimited body: everything until EOF */
    FB_HTTP_S_DONE            /* message complete */
};

/* Body callback: return 0 to go on, nonzero to stop feeding (fb_http_feed then returns
 * -FB_ERR_CALLBACK; the caller keeps its own reason). */
typedef int (*fb_http_body_cb)(void *ctx, const char *data, size_t len);

typedef struct fb_http_s {
    int state;               /* FB_HTTP_S_* */
    int status;              /* status code of the final (non-1xx) response, 0 until read */
    int http_minor;          /* 0 for HTTP/1.0, 1 for HTTP/1.1 */
    int chunked;             /* Transfer-Encoding ends in "chunked" */
    int keep_alive;          /* connection reusable after this response (HTTP/1.1 unless "Connection: close";
                                HTTP/1.0 only with "Connection: keep-alive"); 0 for close-delimited bodies */
    int event_stream;        /* Content-Type is text/event-stream */
    int content_coded;       /* Content-Encoding names a coding other than "identity" (gzip, br...):
                                the body is not the text it claims to be */
    int64_t content_length;  /* -1 when absent */
    uint64_t remaining;      /* bytes left in the current chunk or Content-Length body */
    uint64_t body_bytes;     /* body bytes delivered so far */
    unsigned flags;          /* private to fb_http.c: header facts pending the end of the header section */
    size_t line_len;         /* bytes held in line[] */
    char line[FB_HTTP_LINE_MAX]; /* the line being assembled, without its CRLF */
} fb_http_t;

/* Reset for a new response (also between responses on a kept-alive connection). */
void fb_http_init(fb_http_t *h);

/* Feed `len` bytes. Returns the number of bytes consumed (>= 0), or -FB_ERR_*. Consumes
 * everything unless the message completes inside buf (state FB_HTTP_S_DONE), in which case
 * the bytes after the message are left unconsumed. */
ssize_t fb_http_feed(fb_http_t *h, const char *buf, size_t len, fb_http_body_cb cb, void *ctx);

/* The peer closed the connection. Returns 0 if that completes the message (close-delimited
 * body, or already DONE), else -FB_ERR_HTTP_EOF. */
int fb_http_feed_eof(fb_http_t *h);
#endif
