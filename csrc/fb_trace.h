/* fb_trace.h: a trace file's JSONL read straight into columns, and the first occurrence of each hash id.
 *
 * Not a JSON parser: it takes only the plain lines a trace writer makes (one flat object per line, its
 * four fields numbers and a list of integers, any other field a plain value) and gives up on anything
 * else, leaving the caller to parse the file the slow way, which names a bad line exactly. Whatever it
 * takes, it reads as orjson would. */
#ifndef FB_TRACE_H
#define FB_TRACE_H
#include <stddef.h>
#include <stdint.h>
#include "fb_errors.h"

enum { FB_TRACE_TIMESTAMP, FB_TRACE_INPUT, FB_TRACE_OUTPUT, FB_TRACE_HASH_IDS, FB_TRACE_FIELDS };

typedef struct {
    const char *key[FB_TRACE_FIELDS]; /* the field names, as they appear between quotes (no escapes) */
    size_t key_len[FB_TRACE_FIELDS];
    /* caller-owned columns, cap_records rows each */
    int64_t *line;     /* each record's line number, from 1 */
    double *stamp;     /* its timestamp */
    int64_t *input;    /* its input and output lengths, each >= 1 */
    int64_t *output;
    int64_t *ids_end;  /* where its hash ids end in ids (they start where the record before's end) */
    size_t cap_records;
    int64_t *ids;      /* every record's hash ids, in order */
    size_t cap_ids;
    size_t n_records;  /* out: rows written */
    size_t n_ids;      /* out: hash ids written */
} fb_trace_t;

/* Scan data[0..len): every non-blank line one record. Returns 0 with the columns filled, or
 * -FB_ERR_TRACE on the first line it does not take (or when a column is full): then the columns hold
 * nothing the caller may use. Never reads outside data[0..len) nor writes past a capacity. */
int fb_trace_scan(const char *data, size_t len, fb_trace_t *t);

/* first[ids[i] - low] = the least i, for every i < n, where first[] (span slots) holds n in every slot
 * on entry (a slot no id falls in keeps it). -FB_ERR_TRACE, first untouched past the fault, if an id
 * falls outside [low, low + span). */
int fb_trace_first_seen(const int64_t *ids, size_t n, int64_t low, int64_t *first, size_t span);
#endif
