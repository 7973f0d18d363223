/* fb_trace.c: see fb_trace.h. Every read is checked against the end of the data (p < end) before it
 * is made; a line it does not take ends the scan with -FB_ERR_TRACE. What it takes, it takes exactly as
 * orjson reads it: integers of at most 18 digits (orjson makes larger ones floats, refused as lengths),
 * timestamps as correctly rounded doubles, and a skipped
 * value only in the plain forms orjson is sure to accept (strings of printable ASCII, no escapes;
 * numbers of moderate size; literals; nested lists and objects of those). */
#include "fb_trace.h"
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32      /* nesting of a skipped value */
#define MAX_INT_DIGITS 18 /* fits int64 whatever the digits, and orjson keeps it an int */
#define FAST_MANTISSA (1ULL << 53)
#define LAYOUT_MAX (INT64_C(1) << 40) /* tokens per block, per request and in all */

typedef struct {
    const char *p;
    const char *end;
} cur_t;

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Spaces and tabs inside a line; a CR only where it ends the line (CRLF) or the data: a lone CR is a line
 * break to Python's splitlines, which the slow path's line numbers follow. */
static void skip_space(cur_t *c) {
    while (c->p < c->end) {
        char ch = *c->p;
        if (ch == ' ' || ch == '\t' || (ch == '\r' && (c->p + 1 == c->end || c->p[1] == '\n')))
            c->p++;
        else
            return;
    }
}

static int eat(cur_t *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A string of printable ASCII without escapes, from its opening quote; its bytes in *s, *n. */
static int plain_string(cur_t *c, const char **s, size_t *n) {
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const char *start = ++c->p;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            *s = start;
            *n = (size_t)(c->p - start);
            c->p++;
            return 1;
        }
        if (ch < 0x20 || ch >= 0x80 || ch == '\\')
            return 0;
        c->p++;
    }
    return 0;
}

/* Digits from c->p, at most max of them; their count (0 if none or too many). */
static size_t digits(cur_t *c, size_t max) {
    const char *start = c->p;
    while (c->p < c->end && is_digit(*c->p)) {
        c->p++;
        if ((size_t)(c->p - start) > max)
            return 0;
    }
    return (size_t)(c->p - start);
}

/* A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. Its integer part's digits in *int_start
 * and *int_n, its fraction's in *frac_start and *frac_n, its exponent in *exp; *is_int when it has neither
 * fraction nor exponent. Refused: more than max_digits in the integer part or the fraction, an exponent
 * of more than two digits (1e400 is an error to orjson). */
typedef struct {
    int neg, is_int, exp;
    const char *int_start, *frac_start;
    size_t int_n, frac_n;
} number_t;

static int number(cur_t *c, number_t *num, size_t max_digits) {
    memset(num, 0, sizeof(*num));
    if (c->p < c->end && *c->p == '-') {
        num->neg = 1;
        c->p++;
    }
    num->int_start = c->p;
    num->int_n = digits(c, max_digits);
    if (num->int_n == 0 || (num->int_n > 1 && *num->int_start == '0'))
        return 0;
    num->is_int = 1;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        num->is_int = 0;
        num->frac_start = c->p;
        num->frac_n = digits(c, max_digits);
        if (num->frac_n == 0)
            return 0;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        num->is_int = 0;
        int negative = 0;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            negative = *c->p++ == '-';
        const char *start = c->p;
        size_t n = digits(c, 2);
        if (n == 0)
            return 0;
        for (size_t i = 0; i < n; i++)
            num->exp = num->exp * 10 + (start[i] - '0');
        if (negative)
            num->exp = -num->exp;
    }
    return 1;
}

static int64_t digits_value(const char *s, size_t n) {
    int64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* An integer of at most 18 digits (no fraction, no exponent). */
static int integer(cur_t *c, int64_t *out) {
    number_t num;
    if (!number(c, &num, MAX_INT_DIGITS) || !num.is_int)
        return 0;
    int64_t v = digits_value(num.int_start, num.int_n);
    *out = num.neg ? -v : v;
    return 1;
}

/* A number as the correctly rounded double, as orjson and Python read it. Where its digits (leading zeros
 * dropped) make an integer below 2**53 and its power of ten is at most 22 either way, one multiply or
 * divide of two exact doubles rounds once (Clinger's fast path); else strtod (correctly rounded in glibc),
 * taken only where it reads the whole number (a locale with a decimal comma stops it at the point: then
 * the number is refused). An integer -0 is 0, as in Python. */
static int timestamp(cur_t *c, double *out) {
    number_t num;
    const char *start = c->p;
    if (!number(c, &num, 40))
        return 0;
    uint64_t m = 0;
    int seen = 0, fast = 1; /* seen: a non-zero digit; from there every digit counts against the 2**53 */
    for (size_t k = 0; k < num.int_n + num.frac_n && fast; k++) {
        char d = k < num.int_n ? num.int_start[k] : num.frac_start[k - num.int_n];
        seen |= d != '0';
        if (seen) {
            m = m * 10 + (uint64_t)(d - '0');
            fast = m < FAST_MANTISSA;
        }
    }
    int e10 = num.exp - (int)num.frac_n;
    if (fast && (m == 0 || (e10 <= 22 && e10 >= -22))) {
        double v = (double)m;
        if (m != 0)
            v = e10 >= 0 ? v * POW10[e10] : v / POW10[-e10];
        *out = num.neg && !(num.is_int && m == 0) ? -v : v;
        return 1;
    }
    char text[96]; /* a sign, 40 digits, a point, 40 digits, an exponent of two digits */
    size_t n = (size_t)(c->p - start);
    if (n >= sizeof(text))
        return 0;
    memcpy(text, start, n);
    text[n] = '\0';
    char *end;
    *out = strtod(text, &end);
    return end == text + n;
}

static int skip_value(cur_t *c, int depth);

static int skip_members(cur_t *c, int depth, int object) {
    char close = object ? '}' : ']';
    if (eat(c, close))
        return 1;
    do {
        skip_space(c);
        if (object) {
            const char *s;
            size_t n;
            if (!plain_string(c, &s, &n) || !eat(c, ':'))
                return 0;
            skip_space(c);
        }
        if (!skip_value(c, depth))
            return 0;
    } while (eat(c, ','));
    return eat(c, close);
}

/* A field's value the scan does not keep, from its first byte. */
static int skip_value(cur_t *c, int depth) {
    if (c->p >= c->end)
        return 0;
    const char *s;
    size_t n;
    number_t num;
    switch (*c->p) {
    case '"':
        return plain_string(c, &s, &n);
    case '[':
    case '{':
        if (depth >= MAX_DEPTH)
            return 0;
        c->p++;
        return skip_members(c, depth + 1, c->p[-1] == '{');
    case 't':
        n = 4, s = "true";
        break;
    case 'f':
        n = 5, s = "false";
        break;
    case 'n':
        n = 4, s = "null";
        break;
    default:
        return number(c, &num, 100);
    }
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* The hash ids' list, from its '['; each appended to t->ids. */
static int hash_ids(cur_t *c, fb_trace_t *t) {
    if (c->p >= c->end || *c->p != '[')
        return 0;
    c->p++;
    if (eat(c, ']'))
        return 1;
    do {
        skip_space(c);
        if (t->n_ids == t->cap_ids || !integer(c, &t->ids[t->n_ids]))
            return 0;
        t->n_ids++;
    } while (eat(c, ','));
    return eat(c, ']');
}

static int field_of(const fb_trace_t *t, const char *s, size_t n) {
    for (int k = 0; k < FB_TRACE_FIELDS; k++)
        if (t->key_len[k] == n && memcmp(t->key[k], s, n) == 0)
            return k;
    return -1;
}

/* One record, from its '{' to its '}', into row t->n_records. */
static int record(cur_t *c, fb_trace_t *t) {
    size_t row = t->n_records;
    unsigned seen = 0;
    c->p++; /* the '{' */
    if (eat(c, '}'))
        return 0; /* no fields: the slow path names the first missing one */
    do {
        const char *s;
        size_t n;
        skip_space(c);
        if (!plain_string(c, &s, &n) || !eat(c, ':'))
            return 0;
        skip_space(c);
        int k = field_of(t, s, n);
        if (k >= 0) {
            if (seen & (1u << k))
                return 0; /* a repeated field: orjson keeps the last, and so would only the slow path */
            seen |= 1u << k;
        }
        int ok;
        switch (k) {
        case FB_TRACE_TIMESTAMP:
            ok = timestamp(c, &t->stamp[row]);
            break;
        case FB_TRACE_INPUT:
            ok = integer(c, &t->input[row]) && t->input[row] >= 1;
            break;
        case FB_TRACE_OUTPUT:
            ok = integer(c, &t->output[row]) && t->output[row] >= 1;
            break;
        case FB_TRACE_HASH_IDS:
            ok = hash_ids(c, t);
            break;
        default:
            ok = skip_value(c, 0);
        }
        if (!ok)
            return 0;
    } while (eat(c, ','));
    const unsigned needed = (1u << FB_TRACE_TIMESTAMP) | (1u << FB_TRACE_INPUT) | (1u << FB_TRACE_OUTPUT);
    return eat(c, '}') && (seen & needed) == needed;
}

int fb_trace_scan(const char *data, size_t len, fb_trace_t *t) {
    cur_t c = {data, data + len};
    int64_t line = 1;
    t->n_records = t->n_ids = 0;
    while (c.p < c.end) {
        skip_space(&c);
        if (c.p < c.end && *c.p == '{') {
            if (t->n_records == t->cap_records || !record(&c, t))
                return -FB_ERR_TRACE;
            t->line[t->n_records] = line;
            t->ids_end[t->n_records] = (int64_t)t->n_ids;
            t->n_records++;
            skip_space(&c);
        }
        if (c.p == c.end)
            break;
        if (*c.p != '\n')
            return -FB_ERR_TRACE; /* not a record, or something after one on its line */
        c.p++;
        line++;
    }
    return t->n_records ? 0 : -FB_ERR_TRACE;
}

/* Ends the open run, if any, its bytes into the next pair. */
static int close_run(fb_layout_t *l, int64_t start, int64_t end) {
    if (start < 0)
        return 1;
    if (l->n_runs == l->cap_runs)
        return 0;
    l->runs[2 * l->n_runs] = start * l->width;
    l->runs[2 * l->n_runs + 1] = end * l->width;
    l->n_runs++;
    return 1;
}

int fb_trace_layout(fb_layout_t *l) {
    int64_t pos = 0; /* the next free token */
    l->n_runs = 0;
    l->distinct = l->shared = 0;
    if (l->block < 1 || l->block > LAYOUT_MAX || l->width < 1 || l->width > 16)
        return -FB_ERR_TRACE;
    for (size_t k = 0; k < l->n; k++) {
        int64_t m = l->n_used[k], n_in = l->n_in[k], first = l->starts[k];
        /* bounded so that no sum below overflows: far past any buffer that could be allocated */
        if (m < 0 || n_in < 1 || n_in > LAYOUT_MAX || pos > LAYOUT_MAX || first < 0 || (uint64_t)first > l->n_ids
            || (uint64_t)m > l->n_ids - (uint64_t)first || m > (n_in - 1) / l->block + 1)
            return -FB_ERR_TRACE;
        l->first_run[k] = (int64_t)l->n_runs;
        int64_t run_start = -1, run_end = -1; /* the open run, in tokens */
        for (int64_t j = 0; j <= m; j++) {
            int64_t at, length;
            if (j < m) { /* block j */
                uint64_t slot = (uint64_t)l->ids[first + j] - (uint64_t)l->low;
                if (slot >= l->span)
                    return -FB_ERR_TRACE;
                if (l->where[slot] == 0) {
                    l->where[slot] = pos + 1;
                    pos += l->block;
                    l->distinct++;
                }
                if (l->carried[slot] < 2 && ++l->carried[slot] == 2)
                    l->shared++;
                at = l->where[slot] - 1;
                length = j + 1 < m ? l->block : n_in - l->block * (m - 1);
                if (length > l->block)
                    length = l->block;
            } else { /* its own tokens past the blocks */
                length = n_in - l->block * m;
                at = pos;
                if (length <= 0)
                    break;
                pos += length;
            }
            if (at == run_end) {
                run_end += length;
            } else {
                if (!close_run(l, run_start, run_end))
                    return -FB_ERR_TRACE;
                run_start = at;
                run_end = at + length;
            }
        }
        if (!close_run(l, run_start, run_end))
            return -FB_ERR_TRACE;
        l->runs[2 * l->n_runs - 1] -= 1; /* the last token's separator */
    }
    l->first_run[l->n] = (int64_t)l->n_runs;
    l->tokens = pos;
    return 0;
}

static int put_run(int64_t *out, size_t cap, size_t *n, int64_t first, int64_t end) {
    if (end <= first) /* a cut at a run's last byte leaves nothing after it */
        return 1;
    if (*n == cap)
        return 0;
    out[2 * *n] = first;
    out[2 * *n + 1] = end;
    (*n)++;
    return 1;
}

int64_t fb_trace_insert(const int64_t *runs, const int64_t *first_run, size_t n, const int64_t *request,
                        const int64_t *token, const int64_t *lit_first, const int64_t *lit_end, size_t n_entries,
                        int64_t width, int64_t *out_runs, size_t cap_out, int64_t *out_first) {
    size_t i = 0, n_out = 0;
    if (width < 1)
        return -FB_ERR_TRACE;
    for (size_t k = 0; k < n; k++) {
        out_first[k] = (int64_t)n_out;
        int64_t at = 0; /* the prompt's bytes before the run */
        for (int64_t r = first_run[k]; r < first_run[k + 1]; r++) {
            int64_t first = runs[2 * r], length = runs[2 * r + 1] - first, from = 0; /* from: the run's next byte */
            /* each entry of this prompt whose separator lies in this run */
            while (i < n_entries && (uint64_t)request[i] == k && token[i] > 0 && token[i] <= LAYOUT_MAX
                   && token[i] * width - 1 - at < length) {
                int64_t cut = token[i] * width - 1 - at;
                if (cut < 0 || cut < from - 1) /* before this run, or before the cut before it: out of order; */
                    return -FB_ERR_TRACE;       /* from - 1 is that cut: another literal at its separator */
                if (cut >= from && !put_run(out_runs, cap_out, &n_out, first + from, first + cut))
                    return -FB_ERR_TRACE;
                if (n_out == cap_out)
                    return -FB_ERR_TRACE;
                out_runs[2 * n_out] = lit_first[i];
                out_runs[2 * n_out + 1] = lit_end[i];
                n_out++;
                from = cut + 1;
                i++;
            }
            if (!put_run(out_runs, cap_out, &n_out, first + from, first + length))
                return -FB_ERR_TRACE;
            at += length;
        }
        if (i < n_entries && (uint64_t)request[i] == k)
            return -FB_ERR_TRACE; /* a separator outside its prompt */
    }
    if (i != n_entries)
        return -FB_ERR_TRACE; /* requests out of order, or past the prompts */
    out_first[n] = (int64_t)n_out;
    return (int64_t)n_out;
}
