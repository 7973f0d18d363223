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

/* The token layout of a trace's requests (fastbench/load/sources/trace.py's _Blocks): tokens are laid out
 * request by request, each request's blocks first (a block where its first carrier puts it, whole), then
 * its own tokens past them; a request's prompt is its blocks in order, the last cut at its input length,
 * then its own tokens, and pieces that lie one after the other in the layout make one run. */
typedef struct {
    const int64_t *ids;    /* hash ids (or any numbering of them), each in [low, low + span) */
    const int64_t *starts; /* per request: where its ids start in ids */
    const int64_t *n_used; /* per request: how many of them its prompt uses (blocks), at most
                              ceil(n_in / block) */
    const int64_t *n_in;   /* per request: its input length in tokens, >= 1 */
    size_t n;              /* requests */
    size_t n_ids;          /* the length of ids */
    int64_t block, width;  /* tokens per block; bytes per token */
    int64_t low;
    size_t span;
    int64_t *where;   /* span slots, zero on entry: 1 + the token where each block lies, 0 for none yet */
    uint8_t *carried; /* span slots, zero on entry: a block's carriers, counted up to 2 */
    int64_t *runs;    /* out: each run's first byte and end, flat; a prompt's last run ends before the
                         separator of its last token */
    size_t cap_runs;  /* runs it holds (pairs) */
    int64_t *first_run; /* out, n + 1: request k's runs are first_run[k] to first_run[k + 1] */
    size_t n_runs;      /* out: runs written */
    int64_t tokens;     /* out: tokens laid out */
    int64_t distinct;   /* out: distinct blocks used */
    int64_t shared;     /* out: of them, blocks used more than once */
} fb_layout_t;

/* Returns 0, or -FB_ERR_TRACE (the outputs unusable) for an id outside its span, a start or count
 * outside ids, counts that do not fit the rule above, or runs past cap_runs. */
int fb_trace_layout(fb_layout_t *l);

/* Literal bytes put in prompts in place of separators (trace.py's TokenBlocks.insert): prompt k's runs are
 * runs[first_run[k]] to runs[first_run[k + 1]] (pairs of first byte and end, its bytes end to end); entry i
 * puts the run lit_first[i]..lit_end[i] in prompt request[i] in place of the byte before its token
 * token[i] (at token[i] x width - 1 in the prompt's bytes, which a run holds), the entries ordered by
 * request, then token, those at one separator in their order. Writes the prompts' new runs into out_runs
 * (cap_out pairs: n_runs + 2 x n_entries is enough) and their first runs into out_first (n + 1); returns the
 * runs written, or -FB_ERR_TRACE for entries out of order or outside their prompts, or too little room. */
int64_t fb_trace_insert(const int64_t *runs, const int64_t *first_run, size_t n, const int64_t *request,
                        const int64_t *token, const int64_t *lit_first, const int64_t *lit_end, size_t n_entries,
                        int64_t width, int64_t *out_runs, size_t cap_out, int64_t *out_first);
#endif
