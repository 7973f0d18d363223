/* fb_json.c: single-pass scanner of one OpenAI-style streaming chunk or whole answer. See fb_json.h.
 *
 * Grammar checked is RFC 8259 (JSON): one object, surrounded by optional whitespace
 * (SP, HTAB, LF, CR; section 2); strings with the escapes of section 7 (\" \\ \/ \b \f \n \r
 * \t \uXXXX) and no raw control characters below 0x20; numbers as in section 6; the literals
 * true, false, null. Not checked: that the bytes are valid UTF-8 (section 8.1) and that the
 * \u escapes pair up as surrogates; duplicate keys are allowed (section 4 leaves them open).
 *
 * Nesting is limited to FB_JSON_MAX_DEPTH containers (the top-level object is depth 1);
 * deeper text is an error, which also bounds the recursion below.
 *
 * Facts are picked up by "role": the meaning of a value, known from its key and where the
 * enclosing object sits (an element of the top-level "choices" array is a choice, its
 * "delta" a delta: their "text" and "content" are the answer). Keys are compared on their raw
 * bytes: a key spelled with an escape (e.g. "\u0063ontent") matches nothing, which no server
 * does.
 *
 * A typed-event API (fb_api_t: Responses, Messages) has roles of its own, found by its tables instead
 * of the OpenAI chunk's names; the walk, the grammar and the checks are the same. Its output is known
 * only once the whole event is read (its "type" may follow its "delta"), so its facts are settled, and
 * its answer handed over, after the scan. */
#include <string.h>
#include "fb_json.h"

#define FB_JSON_MAX_DEPTH 64

enum {
    R_PLAIN = 0,  /* nothing to pick up */
    R_USAGE,      /* top-level "usage" */
    R_CHOICES,    /* top-level "choices" */
    R_ERROR,      /* top-level "error" */
    R_SENT,       /* top-level "fb_sent_ns" */
    R_COMPLETION, /* "completion_tokens" directly inside the top-level "usage" object */
    R_PROMPT,     /* "prompt_tokens" directly inside the top-level "usage" object */
    R_TOTAL,      /* "total_tokens" directly inside the top-level "usage" object */
    R_DATA,       /* top-level "data" or "results": a whole answer's results, one per input */
    R_DETAILS,    /* "prompt_tokens_details" directly inside the top-level "usage" object */
    R_CACHED,     /* "cached_tokens" directly inside that "prompt_tokens_details" object */
    R_CONTENT,    /* "content" or "text", any depth */
    R_REASONING,  /* "reasoning" or "reasoning_content", any depth */
    R_FINISH,     /* "finish_reason", any depth */
    R_CHOICE,     /* an element of the top-level "choices" array */
    R_DELTA,      /* "delta" directly inside a choice */
    R_ANSWER,     /* the answer's text: a choice's "text", its delta's "content" (also R_CONTENT's fact) */
    R_TOOLCALLS,  /* "tool_calls" directly inside a delta */
    R_TOOLCALL,   /* an element of it */
    R_FUNCTION,   /* "function" directly inside such an element */
    R_TOOLTEXT,   /* "name" or "arguments" directly inside that function: a tool call's text */
    /* typed APIs (fb_api_t) */
    R_TYPE,       /* top-level "type": what the event is */
    R_TDELTA,     /* top-level "delta": the output's text, or an object holding it */
    R_HOLDER,     /* a top-level object holding a "usage" (api->usage_holders) */
    R_INPUT,      /* a count inside usage that adds to the prompt (api->input_keys) */
    R_INPUT_CACHED, /* one that is also the cached prompt tokens (api->cached_key among the input_keys) */
    R_DKEY        /* R_DKEY + kind: a key of the delta object holding output of that kind (api->delta_keys) */
};

typedef struct {
    const char *p, *end;
    fb_chunk_info_t *out;
    fb_json_text_fn on_answer; /* NULL: answer pieces not wanted */
    void *ctx;
    int stopped;               /* on_answer asked to stop */
    const fb_api_t *api;       /* NULL: an OpenAI chunk */
    int type_kind;             /* typed: the kind its "type" names (FB_OUT_*) */
    int delta_kinds;           /* typed: bit k set when the delta object held a non-empty string of kind k */
    const char *delta_s;       /* typed: the non-empty string of a top-level "delta", or NULL */
    size_t delta_n;
    const char *answer_s;      /* typed: the delta object's first answer string, or NULL */
    size_t answer_n;
} fb_json_t;

/* Value kinds, returned by the scanning functions (>= 0) next to -FB_ERR_JSON. */
enum { V_NULL = 0, V_OTHER, V_STRING_EMPTY, V_STRING, V_INT };

static int fb_json_value(fb_json_t *s, int depth, int role, int64_t *num);

static inline void fb_json_ws(fb_json_t *s) {
    const char *p = s->p;
    while (p < s->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    s->p = p;
}

static inline int fb_json_hex(int c) {
    return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

/* s->p is just past the opening quote. Leaves s->p past the closing quote and returns the
 * number of raw bytes between the quotes, or -1 on a malformed string. A string with escapes
 * is reported with its raw length, which is > 0 exactly when the decoded string is non-empty. */
static inline ptrdiff_t fb_json_string(fb_json_t *s, int *escaped) {
    const char *start = s->p, *p = s->p, *end = s->end;
    *escaped = 0;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            s->p = p + 1;
            return p - start;
        }
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2) return -1;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                break;
            case 'u':
                if (end - p < 6 || !fb_json_hex(p[2]) || !fb_json_hex(p[3]) || !fb_json_hex(p[4]) ||
                    !fb_json_hex(p[5]))
                    return -1;
                p += 6;
                break;
            default:
                return -1;
            }
        } else if (c < 0x20) {
            return -1; /* section 7: control characters must be escaped */
        } else {
            p++;
        }
    }
    return -1;
}

/* number = [ minus ] int [ frac ] [ exp ]   (RFC 8259 section 6). Returns V_INT with *num set
 * for a non-negative integer that fits int64 (the only numbers we pick up), V_OTHER for any
 * other valid number, -FB_ERR_JSON otherwise. */
static inline int fb_json_number(fb_json_t *s, int64_t *num) {
    const char *p = s->p, *end = s->end;
    int neg = 0, integral = 1, fits = 1;
    int64_t v = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') return -FB_ERR_JSON;
    if (*p == '0') {
        p++;
    } else {
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            int d = *p - '0';
            if (v > (INT64_MAX - d) / 10) fits = 0;
            else v = v * 10 + d;
        }
    }
    if (p < end && *p == '.') {
        integral = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -FB_ERR_JSON;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -FB_ERR_JSON;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    s->p = p;
    if (integral && fits && !neg) {
        *num = v;
        return V_INT;
    }
    return V_OTHER;
}

static inline int fb_json_literal(fb_json_t *s, const char *lit, size_t n, int kind) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) return -FB_ERR_JSON;
    s->p += n;
    return kind;
}

/* The role of the value under key k[0..n) in an object at `depth` whose own role is `role`. */
static inline int fb_json_role(const char *k, size_t n, int depth, int role) {
    if (role == R_CHOICE) {
        if (n == 4 && memcmp(k, "text", 4) == 0) return R_ANSWER;
        if (n == 5 && memcmp(k, "delta", 5) == 0) return R_DELTA;
    } else if (role == R_DELTA) {
        if (n == 7 && memcmp(k, "content", 7) == 0) return R_ANSWER;
        if (n == 10 && memcmp(k, "tool_calls", 10) == 0) return R_TOOLCALLS;
    } else if (role == R_TOOLCALL) {
        if (n == 8 && memcmp(k, "function", 8) == 0) return R_FUNCTION;
    } else if (role == R_FUNCTION) {
        if ((n == 4 && memcmp(k, "name", 4) == 0) || (n == 9 && memcmp(k, "arguments", 9) == 0))
            return R_TOOLTEXT;
    }
    if (depth == 1) {
        switch (n) {
        case 5:
            if (memcmp(k, "usage", 5) == 0) return R_USAGE;
            if (memcmp(k, "error", 5) == 0) return R_ERROR;
            break;
        case 4:
            if (memcmp(k, "data", 4) == 0) return R_DATA;
            break;
        case 7:
            if (memcmp(k, "choices", 7) == 0) return R_CHOICES;
            if (memcmp(k, "results", 7) == 0) return R_DATA;
            break;
        case 10:
            if (memcmp(k, "fb_sent_ns", 10) == 0) return R_SENT;
            break;
        default:
            break;
        }
    } else if (role == R_USAGE && depth == 2) {
        if (n == 17 && memcmp(k, "completion_tokens", 17) == 0) return R_COMPLETION;
        if (n == 13 && memcmp(k, "prompt_tokens", 13) == 0) return R_PROMPT;
        if (n == 12 && memcmp(k, "total_tokens", 12) == 0) return R_TOTAL;
        if (n == 21 && memcmp(k, "prompt_tokens_details", 21) == 0) return R_DETAILS;
    } else if (role == R_DETAILS && depth == 3) {
        if (n == 13 && memcmp(k, "cached_tokens", 13) == 0) return R_CACHED;
    }
    switch (n) {
    case 4:
        if (memcmp(k, "text", 4) == 0) return R_CONTENT;
        break;
    case 7:
        if (memcmp(k, "content", 7) == 0) return R_CONTENT;
        break;
    case 9:
        if (memcmp(k, "reasoning", 9) == 0) return R_REASONING;
        break;
    case 13:
        if (memcmp(k, "finish_reason", 13) == 0) return R_FINISH;
        break;
    case 17:
        if (memcmp(k, "reasoning_content", 17) == 0) return R_REASONING;
        break;
    default:
        break;
    }
    return R_PLAIN;
}

/* The index of k[0..n) in names[0..count), or -1. */
static inline int fb_api_find(const fb_api_name_t *names, int count, const char *k, size_t n) {
    for (int i = 0; i < count; i++)
        if (names[i].n == n && names[i].s != NULL && memcmp(names[i].s, k, n) == 0) return i;
    return -1;
}

static inline int fb_api_is(const fb_api_name_t *name, const char *k, size_t n) {
    return name->s != NULL && name->n == n && memcmp(name->s, k, n) == 0;
}

/* fb_json_role for a typed API: its names come from its tables. */
static inline int fb_json_role_api(const fb_api_t *api, const char *k, size_t n, int depth, int role) {
    int i;
    if (depth == 1) {
        switch (n) {
        case 4:
            if (memcmp(k, "type", 4) == 0) return R_TYPE;
            break;
        case 5:
            if (memcmp(k, "delta", 5) == 0) return R_TDELTA;
            if (memcmp(k, "usage", 5) == 0) return R_USAGE;
            if (memcmp(k, "error", 5) == 0) return R_ERROR;
            break;
        case 10:
            if (memcmp(k, "fb_sent_ns", 10) == 0) return R_SENT;
            break;
        default:
            break;
        }
        return fb_api_find(api->usage_holders, api->n_usage_holders, k, n) >= 0 ? R_HOLDER : R_PLAIN;
    }
    switch (role) {
    case R_HOLDER:
        return depth == 2 && n == 5 && memcmp(k, "usage", 5) == 0 ? R_USAGE : R_PLAIN;
    case R_TDELTA:
        i = fb_api_find(api->delta_keys, api->n_delta_keys, k, n);
        return i >= 0 ? R_DKEY + api->delta_keys[i].kind : R_PLAIN;
    case R_USAGE:
        if (fb_api_is(&api->output_key, k, n)) return R_COMPLETION;
        i = fb_api_find(api->input_keys, api->n_input_keys, k, n);
        if (fb_api_is(&api->cached_key, k, n)) return i >= 0 ? R_INPUT_CACHED : R_CACHED;
        if (i >= 0) return R_INPUT;
        if (fb_api_is(&api->details_key, k, n)) return R_DETAILS;
        return R_PLAIN;
    case R_DETAILS:
        return fb_api_is(&api->details_cached_key, k, n) ? R_CACHED : R_PLAIN;
    default:
        return R_PLAIN;
    }
}

/* s->p is just past '{'; the object is at `depth` (1 = top level) and has role `role`. */
static int fb_json_object(fb_json_t *s, int depth, int role) {
    fb_json_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"') return -FB_ERR_JSON;
        s->p++;
        const char *key = s->p;
        int escaped;
        ptrdiff_t kn = fb_json_string(s, &escaped);
        if (kn < 0) return -FB_ERR_JSON;
        int vrole = escaped ? R_PLAIN
                    : s->api != NULL ? fb_json_role_api(s->api, key, (size_t)kn, depth, role)
                                     : fb_json_role(key, (size_t)kn, depth, role);
        fb_json_ws(s);
        if (s->p >= s->end || *s->p != ':') return -FB_ERR_JSON;
        s->p++;
        fb_json_ws(s);
        int64_t num = -1;
        const char *value = s->p;
        int kind = fb_json_value(s, depth, vrole, &num);
        if (kind < 0) return kind;
        fb_chunk_info_t *o = s->out;
        switch (vrole) {
        case R_ANSWER:
            if (kind == V_STRING && s->on_answer != NULL &&
                s->on_answer(s->ctx, value + 1, (size_t)(s->p - value - 2)) != 0) {
                s->stopped = 1;
                return -FB_ERR_CALLBACK;
            }
            if (kind == V_STRING) o->has_content = 1; /* an answer is content too */
            break;
        case R_CONTENT:
            if (kind == V_STRING) o->has_content = 1;
            break;
        case R_REASONING:
            if (kind == V_STRING) o->has_reasoning = 1;
            break;
        case R_FINISH:
            if (kind != V_NULL) o->has_finish = 1;
            break;
        case R_ERROR:
            if (kind != V_NULL) o->has_error = 1;
            break;
        case R_COMPLETION:
            if (kind == V_INT) o->completion_tokens = num;
            else if (kind != V_NULL) o->usage_invalid = 1;
            break;
        case R_PROMPT:
            if (kind == V_INT) o->prompt_tokens = num;
            else if (kind != V_NULL) o->usage_invalid = 1;
            break;
        case R_TOTAL:
            if (kind == V_INT) o->total_tokens = num; /* as cached_tokens: says nothing of the output */
            break;
        case R_CACHED:
            if (kind == V_INT) o->cached_tokens = num;
            break;
        case R_SENT:
            if (kind == V_INT) o->sent_ns = num;
            break;
        case R_TOOLTEXT:
            if (kind == V_STRING) o->has_tool = 1;
            break;
        case R_TYPE:
            if (kind == V_STRING) {
                int i = fb_api_find(s->api->types, s->api->n_types, value + 1, (size_t)(s->p - value - 2));
                if (i >= 0) s->type_kind = s->api->types[i].kind;
            }
            break;
        case R_TDELTA:
            if (kind == V_STRING) {
                s->delta_s = value + 1;
                s->delta_n = (size_t)(s->p - value - 2);
            }
            break;
        case R_INPUT:
        case R_INPUT_CACHED:
            if (kind == V_INT && vrole == R_INPUT_CACHED) o->cached_tokens = num;
            if (kind == V_INT) {
                int64_t before = o->prompt_tokens < 0 ? 0 : o->prompt_tokens;
                if (num > INT64_MAX - before) o->usage_invalid = 1;
                else o->prompt_tokens = before + num;
            } else if (kind != V_NULL) {
                o->usage_invalid = 1;
            }
            break;
        default:
            /* R_USAGE, R_CHOICES are recorded by the container scan; R_DETAILS, R_DELTA, R_TOOLCALLS,
             * R_TOOLCALL, R_FUNCTION and R_HOLDER only name their keys */
            if (vrole >= R_DKEY && vrole < R_DKEY + FB_OUT_KINDS && kind == V_STRING) {
                s->delta_kinds |= 1 << (vrole - R_DKEY);
                if (vrole == R_DKEY + FB_OUT_ANSWER && s->answer_s == NULL) {
                    s->answer_s = value + 1;
                    s->answer_n = (size_t)(s->p - value - 2);
                }
            }
            break;
        }
        fb_json_ws(s);
        if (s->p >= s->end) return -FB_ERR_JSON;
        if (*s->p == '}') {
            s->p++;
            return 0;
        }
        if (*s->p != ',') return -FB_ERR_JSON;
        s->p++;
        fb_json_ws(s);
    }
}

/* s->p is just past '['; the array is at `depth` and has role `role`. Returns the element count or
 * -FB_ERR_JSON. */
static int fb_json_array(fb_json_t *s, int depth, int role) {
    int element = role == R_CHOICES ? R_CHOICE : role == R_TOOLCALLS ? R_TOOLCALL : R_PLAIN;
    int count = 0;
    fb_json_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        int64_t num;
        int kind = fb_json_value(s, depth, element, &num);
        if (kind < 0) return kind;
        if (count < INT32_MAX) count++;
        fb_json_ws(s);
        if (s->p >= s->end) return -FB_ERR_JSON;
        if (*s->p == ']') {
            s->p++;
            return count;
        }
        if (*s->p != ',') return -FB_ERR_JSON;
        s->p++;
        fb_json_ws(s);
    }
}

/* A value at s->p (whitespace already skipped), inside a container at `depth`. */
static int fb_json_value(fb_json_t *s, int depth, int role, int64_t *num) {
    if (s->p >= s->end) return -FB_ERR_JSON;
    int rc, escaped;
    switch (*s->p) {
    case '{':
        if (depth >= FB_JSON_MAX_DEPTH) return -FB_ERR_JSON;
        s->p++;
        rc = fb_json_object(s, depth + 1, role);
        if (rc < 0) return rc;
        if (role == R_USAGE) s->out->has_usage = 1;
        return V_OTHER;
    case '[':
        if (depth >= FB_JSON_MAX_DEPTH) return -FB_ERR_JSON;
        s->p++;
        rc = fb_json_array(s, depth + 1, role);
        if (rc < 0) return rc;
        if (role == R_CHOICES) s->out->n_choices = rc;
        if (role == R_DATA) s->out->n_data = rc;
        return V_OTHER;
    case '"': {
        s->p++;
        ptrdiff_t n = fb_json_string(s, &escaped);
        if (n < 0) return -FB_ERR_JSON;
        return n ? V_STRING : V_STRING_EMPTY;
    }
    case 't':
        return fb_json_literal(s, "true", 4, V_OTHER);
    case 'f':
        return fb_json_literal(s, "false", 5, V_OTHER);
    case 'n':
        return fb_json_literal(s, "null", 4, V_NULL);
    default:
        return fb_json_number(s, num);
    }
}

static inline void fb_json_defaults(fb_chunk_info_t *out) {
    out->completion_tokens = -1;
    out->prompt_tokens = -1;
    out->total_tokens = -1;
    out->cached_tokens = -1;
    out->sent_ns = -1;
    out->has_content = 0;
    out->has_reasoning = 0;
    out->has_tool = 0;
    out->has_end = 0;
    out->has_error = 0;
    out->has_finish = 0;
    out->has_usage = 0;
    out->usage_invalid = 0;
    out->n_choices = -1;
    out->n_data = -1;
}

/* A typed API's event, read whole: which output it carried, whether it ends the stream or is an error,
 * and its answer handed over. Returns 0, or -FB_ERR_CALLBACK when on_answer stopped. */
static int fb_json_settle(fb_json_t *s) {
    fb_chunk_info_t *o = s->out;
    const char *answer = NULL;
    size_t answer_n = 0;
    switch (s->type_kind) {
    case FB_OUT_ANSWER:
        if (s->delta_n > 0) {
            o->has_content = 1;
            answer = s->delta_s;
            answer_n = s->delta_n;
        }
        break;
    case FB_OUT_REASONING:
        if (s->delta_n > 0) o->has_reasoning = 1;
        break;
    case FB_OUT_TOOL:
        if (s->delta_n > 0) o->has_tool = 1;
        break;
    case FB_OUT_DELTA:
        if (s->delta_kinds & (1 << FB_OUT_ANSWER)) {
            o->has_content = 1;
            answer = s->answer_s;
            answer_n = s->answer_n;
        }
        if (s->delta_kinds & (1 << FB_OUT_REASONING)) o->has_reasoning = 1;
        if (s->delta_kinds & (1 << FB_OUT_TOOL)) o->has_tool = 1;
        break;
    case FB_OUT_END:
        o->has_end = 1;
        o->has_finish = 1;
        break;
    case FB_OUT_ERROR:
        o->has_error = 1;
        break;
    default:
        break;
    }
    if (answer != NULL && answer_n > 0 && s->on_answer != NULL && s->on_answer(s->ctx, answer, answer_n) != 0) {
        s->stopped = 1;
        return -FB_ERR_CALLBACK;
    }
    return 0;
}

int fb_json_scan_event(const char *data, size_t len, fb_chunk_info_t *out, const fb_api_t *api,
                       fb_json_text_fn on_answer, void *ctx) {
    fb_json_defaults(out);
    if (len == 0) return -FB_ERR_JSON; /* also keeps NULL + 0 out of the arithmetic below */
    fb_json_t s = {data, data + len, out, on_answer, ctx, 0, api, FB_OUT_NONE, 0, NULL, 0, NULL, 0};
    fb_json_ws(&s);
    if (s.p >= s.end || *s.p != '{') goto bad;
    s.p++;
    if (fb_json_object(&s, 1, R_PLAIN) < 0) goto bad;
    fb_json_ws(&s);
    if (s.p != s.end) goto bad;
    if (api != NULL && fb_json_settle(&s) != 0) goto bad;
    return 0;
bad:
    /* No half-read facts: a caller that ignores the error still sees "nothing found". */
    fb_json_defaults(out);
    return s.stopped ? -FB_ERR_CALLBACK : -FB_ERR_JSON;
}

int fb_json_scan_chunk_text(const char *data, size_t len, fb_chunk_info_t *out, fb_json_text_fn on_answer,
                            void *ctx) {
    return fb_json_scan_event(data, len, out, NULL, on_answer, ctx);
}

int fb_json_scan_chunk(const char *data, size_t len, fb_chunk_info_t *out) {
    return fb_json_scan_event(data, len, out, NULL, NULL, NULL);
}
