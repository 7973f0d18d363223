/* fb_errors.h: error codes returned (negated) by the csrc readers. 0 means success. */
#ifndef FB_ERRORS_H
#define FB_ERRORS_H
enum {
    FB_OK = 0,
    FB_ERR_HTTP_STATUS_LINE = 1,  /* not "HTTP/1.x NNN ..." */
    FB_ERR_HTTP_HEADER = 2,       /* a header line without ':' or a bad Content-Length */
    FB_ERR_HTTP_LINE_TOO_LONG = 3,/* a status, header or chunk-size line over FB_HTTP_LINE_MAX */
    FB_ERR_HTTP_CHUNK = 4,        /* a bad chunk-size line or missing CRLF after chunk data */
    FB_ERR_HTTP_EOF = 5,          /* the peer closed before the message was complete */
    FB_ERR_SSE_TOO_BIG = 6,       /* an SSE event larger than the caller allows (grow callback said no) */
    FB_ERR_JSON = 7,              /* an SSE data payload that is not one well-formed JSON object */
    FB_ERR_CALLBACK = 8,          /* a caller callback asked to stop (its own code is kept by the caller) */
    FB_ERR_TRACE = 9              /* a trace line the column scanner does not take (the caller parses it) */
};
#endif
