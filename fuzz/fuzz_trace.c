/* fuzz_trace.c: libFuzzer target for csrc/fb_trace.c (a trace file's JSONL read into columns, and the
 * blocks' layout over them).
 *
 * Input layout:
 *   byte 0   tokens per block (bits 0-5, plus 1) and bytes per token (bit 6: 5, else 6)
 *   rest     the trace file
 * Oracle, besides the sanitizers: what the scanner takes holds together (line numbers rising from 1,
 * lengths >= 1, timestamps finite (their order is the caller's to check), the hash ids' ends rising to
 * the count written), and
 * the layout of what it took stays inside its buffers: every run inside the tokens laid out, each
 * request's runs after the one before's; and literals put in place of its separators take the place of those
 * bytes alone. Build with -DFB_FUZZ_STANDALONE for a plain main() that runs
 * files given as arguments (no libFuzzer needed, e.g. gcc -fsanitize=address,undefined). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fb_trace.h"

#define SPAN_MAX (1 << 20) /* ids spread wider than this are not laid out here (the caller renumbers) */
#define INSERT_TOKENS_MAX (1 << 16) /* prompts longer than this are not cut here */

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_trace: %s\n", what);
        abort();
    }
}

/* Literals put in place of every third separator of each prompt, two at each (fb_trace_insert): the bytes
 * come out as the prompt's, less the separators cut, plus the literals', in runs that are never empty. */
static void insert(const fb_layout_t *l, const int64_t *n_in, size_t n, int64_t width) {
    size_t cap = 0;
    for (size_t k = 0; k < n; k++) {
        if (n_in[k] > INSERT_TOKENS_MAX)
            return; /* a prompt too long to cut every third token of here (the layout took it) */
        cap += 2 * (size_t)((n_in[k] - 1) / 3);
    }
    int64_t *request = malloc((cap + 1) * sizeof(int64_t)), *token = malloc((cap + 1) * sizeof(int64_t));
    int64_t *lit_first = malloc((cap + 1) * sizeof(int64_t)), *lit_end = malloc((cap + 1) * sizeof(int64_t));
    size_t cap_out = l->n_runs + 2 * cap;
    int64_t *out = malloc((2 * cap_out + 2) * sizeof(int64_t)), *out_first = malloc((n + 1) * sizeof(int64_t));
    check(request && token && lit_first && lit_end && out && out_first, "out of memory");
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        for (int64_t at = 3; at < n_in[k]; at += 3)
            for (int two = 0; two < 2; two++) {
                request[m] = (int64_t)k;
                token[m] = at;
                lit_first[m] = -1 - two; /* no byte of the buffer: told apart from the tokens' */
                lit_end[m] = two;
                m++;
            }
    int64_t written = fb_trace_insert(l->runs, l->first_run, n, request, token, lit_first, lit_end, m, width, out,
                                      cap_out, out_first);
    check(written >= 0 && (size_t)written <= cap_out && out_first[n] == written, "inserted");
    size_t entry = 0;
    for (size_t k = 0; k < n; k++) {
        int64_t bytes = 0, literals = 0;
        for (int64_t r = out_first[k]; r < out_first[k + 1]; r++) {
            if (out[2 * r] < 0) {
                literals++;
                continue;
            }
            check(out[2 * r + 1] > out[2 * r], "an empty run");
            bytes += out[2 * r + 1] - out[2 * r];
        }
        int64_t cuts = (n_in[k] - 1) / 3;
        check(literals == 2 * cuts && bytes == n_in[k] * width - 1 - cuts, "the prompt's bytes, less the cuts");
        entry += (size_t)(2 * cuts);
    }
    check(entry == m, "every entry placed");
    free(request);
    free(token);
    free(lit_first);
    free(lit_end);
    free(out);
    free(out_first);
}

static void lay_out(const fb_trace_t *t, int64_t block, int64_t width) {
    size_t n = t->n_records;
    if (n == 0)
        return;
    int64_t low = INT64_MAX, high = INT64_MIN;
    for (size_t i = 0; i < t->n_ids; i++) {
        low = t->ids[i] < low ? t->ids[i] : low;
        high = t->ids[i] > high ? t->ids[i] : high;
    }
    size_t span = t->n_ids ? (size_t)((uint64_t)high - (uint64_t)low) + 1 : 1;
    if (t->n_ids == 0)
        low = 0;
    if (t->n_ids && (uint64_t)high - (uint64_t)low >= SPAN_MAX)
        return;
    int64_t *starts = malloc(n * sizeof(int64_t));
    int64_t *n_used = malloc(n * sizeof(int64_t));
    int64_t *first_run = malloc((n + 1) * sizeof(int64_t));
    int64_t *where = calloc(span, sizeof(int64_t));
    uint8_t *carried = calloc(span, 1);
    size_t cap_runs = n;
    for (size_t k = 0; k < n; k++) {
        starts[k] = k ? t->ids_end[k - 1] : 0;
        int64_t count = t->ids_end[k] - starts[k], fit = (t->input[k] - 1) / block + 1;
        n_used[k] = count < fit ? count : fit;
        cap_runs += (size_t)n_used[k];
    }
    int64_t *runs = malloc(2 * cap_runs * sizeof(int64_t));
    check(starts && n_used && first_run && where && carried && runs, "out of memory");
    fb_layout_t l = {.ids = t->ids, .starts = starts, .n_used = n_used, .n_in = t->input, .n = n,
                     .n_ids = t->n_ids, .block = block, .width = width, .low = low, .span = span,
                     .where = where, .carried = carried, .runs = runs, .cap_runs = cap_runs,
                     .first_run = first_run};
    if (fb_trace_layout(&l) == 0) {
        check(l.n_runs <= cap_runs && first_run[0] == 0 && first_run[n] == (int64_t)l.n_runs, "runs counted");
        check(l.shared <= l.distinct && l.distinct <= (int64_t)t->n_ids, "blocks counted");
        for (size_t k = 0; k < n; k++) {
            check(first_run[k] < first_run[k + 1], "every request has a run");
            int64_t tokens = 0;
            for (int64_t r = first_run[k]; r < first_run[k + 1]; r++) {
                int64_t start = runs[2 * r], end = runs[2 * r + 1];
                check(start >= 0 && start % width == 0 && end <= l.tokens * width, "a run outside the layout");
                check(end > start, "an empty run");
                tokens += (end - start + (r == first_run[k + 1] - 1)) / width;
            }
            check(tokens == t->input[k], "a prompt of other than its input length");
        }
        insert(&l, t->input, n, width);
    }
    free(starts);
    free(n_used);
    free(first_run);
    free(where);
    free(carried);
    free(runs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    int64_t block = (data[0] & 63) + 1, width = (data[0] & 64) ? 5 : 6;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    size_t cap_records = 1;
    for (size_t i = 0; i < len; i++)
        cap_records += text[i] == '\n' || text[i] == '\r';
    size_t cap_ids = len / 2 + 1;
    fb_trace_t t = {.key = {"timestamp", "input_length", "output_length", "hash_ids"},
                    .key_len = {9, 12, 13, 8}};
    t.line = malloc(cap_records * sizeof(int64_t));
    t.stamp = malloc(cap_records * sizeof(double));
    t.input = malloc(cap_records * sizeof(int64_t));
    t.output = malloc(cap_records * sizeof(int64_t));
    t.ids_end = malloc(cap_records * sizeof(int64_t));
    t.ids = malloc(cap_ids * sizeof(int64_t));
    t.cap_records = cap_records;
    t.cap_ids = cap_ids;
    check(t.line && t.stamp && t.input && t.output && t.ids_end && t.ids, "out of memory");
    if (fb_trace_scan(text, len, &t) == 0) {
        check(t.n_records >= 1 && t.n_records <= cap_records && t.n_ids <= cap_ids, "counts past the caps");
        for (size_t k = 0; k < t.n_records; k++) {
            check(t.line[k] >= 1 && (k == 0 || t.line[k] > t.line[k - 1]), "line numbers not rising");
            check(t.input[k] >= 1 && t.output[k] >= 1, "a length below 1");
            check(isfinite(t.stamp[k]), "a timestamp not finite");
            check(t.ids_end[k] >= (k ? t.ids_end[k - 1] : 0), "hash ids' ends falling");
        }
        check(t.ids_end[t.n_records - 1] == (int64_t)t.n_ids, "hash ids' ends short of the count");
        lay_out(&t, block, width);
    }
    free(t.line);
    free(t.stamp);
    free(t.input);
    free(t.output);
    free(t.ids_end);
    free(t.ids);
    return 0;
}

#ifdef FB_FUZZ_STANDALONE
#include "standalone.h"
#endif
