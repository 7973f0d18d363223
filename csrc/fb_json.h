/* fb_json.h: a targeted scanner for one OpenAI-style streaming chunk, or one whole JSON answer.
 *
 * Not a JSON parser: it walks the object once, tracking strings (with escapes) and nesting,
 * checks that the text is one well-formed JSON value, and picks out the few facts the
 * client needs per chunk, and (fb_json_scan_chunk_text) the answer's strings as it passes
 * them, so that a caller keeps a reply's text without decoding any event. A whole answer to a
 * non-streaming request (embeddings, pooling, score, rerank) is scanned the same way, once, for its
 * usage and its count of results: the same roles, no second parser. Keys are matched
 * only outside strings, so text inside "content" can never be mistaken for a key. */
#ifndef FB_JSON_H
#define FB_JSON_H
#include <stddef.h>
#include <stdint.h>
#include "fb_errors.h"

typedef struct {
    int64_t completion_tokens; /* "completion_tokens" directly inside the top-level "usage" object; -1 if
                                  absent, null or not a non-negative integer that fits int64 */
    int64_t prompt_tokens;     /* "prompt_tokens" likewise */
    int64_t total_tokens;      /* "total_tokens" likewise (a whole embeddings, pooling, score or rerank answer's
                                  usage may carry only this one); not a usage fault when malformed */
    int64_t cached_tokens;     /* "cached_tokens" directly inside the "prompt_tokens_details" object of the
                                  top-level "usage" (vLLM with --enable-prompt-tokens-details, SGLang with
                                  --enable-cache-report); -1 if absent or not a count as above. Not a usage
                                  fault when malformed: it says nothing of the output's tokens */
    int64_t sent_ns;           /* top-level "fb_sent_ns" (synthetic server's send stamp), -1 as above */
    int has_content;           /* a non-empty string value under key "content" or "text" */
    int has_reasoning;         /* a non-empty string value under key "reasoning" or "reasoning_content" */
    int has_tool;              /* a tool call's text: a non-empty "name" or "arguments" in a "function" of a
                                  "tool_calls" element of a choice's "delta" (typed APIs: see fb_api_t) */
    int has_end;               /* typed APIs: the event's "type" ends the stream (response.completed) */
    int has_error;             /* a top-level "error" key whose value is not null */
    int has_finish;            /* a "finish_reason" key whose value is not null */
    int has_usage;             /* a top-level "usage" key whose value is an object */
    int usage_invalid;         /* its "completion_tokens" or "prompt_tokens" holds neither null nor a
                                  non-negative integer that fits int64 (a float, a string, -1, 2**64) */
    int n_choices;             /* elements in the top-level "choices" array, -1 if absent */
    int n_data;                /* elements in the top-level "data" array (embeddings, pooling, score) or
                                  "results" array (rerank), -1 if absent */
} fb_chunk_info_t;

/* Scan data[0..len). Fills *out (always initialised) and returns 0, or -FB_ERR_JSON when the
 * text is not exactly one well-formed JSON object (surrounding whitespace allowed). */
int fb_json_scan_chunk(const char *data, size_t len, fb_chunk_info_t *out);

/* Given each piece of the answer's text as the scan finds it: the raw bytes between the quotes of a
 * non-empty string under "text" directly in an element of the top-level "choices" array, or under
 * "content" directly in such an element's "delta" object (escapes as sent, already checked). Not
 * reasoning, and not a "content" or "text" found anywhere else (a logprobs entry). Return 0 to go on,
 * non-zero to stop the scan. */
typedef int (*fb_json_text_fn)(void *ctx, const char *text, size_t len);

/* fb_json_scan_chunk, calling on_answer (when not NULL) with each answer piece in the order of the
 * text. Returns what fb_json_scan_chunk does, or -FB_ERR_CALLBACK when on_answer stopped it. A scan
 * that fails may have called on_answer before finding the fault: the caller drops those pieces. */
int fb_json_scan_chunk_text(const char *data, size_t len, fb_chunk_info_t *out, fb_json_text_fn on_answer,
                            void *ctx);

/* What the events of a typed-event API mean (OpenAI's Responses, Anthropic's Messages): data, set once
 * per run, so that each API is a table and not a path of its own. Such an event names itself in a
 * top-level "type" string; one whose type is an output kind carries output when its top-level "delta" is
 * a non-empty string (Responses), or, for FB_OUT_DELTA, when its "delta" object holds a non-empty string
 * under one of delta_keys, whose kind it takes (Messages: "text", "thinking", "partial_json"). Usage is
 * the top-level "usage" object or the "usage" inside one of the top-level usage_holders ("response",
 * "message"); in it, output_key counts the output so far, the input_keys add up to the prompt, and the
 * cached prompt tokens are under cached_key or details_key's details_cached_key. A top-level "error" that
 * is not null, or a type of kind FB_OUT_ERROR, is an error event. The answer's text given to on_answer is
 * the delta string of an FB_OUT_ANSWER event. Names are raw bytes compared as sent (no escapes). */
enum { FB_OUT_NONE = 0, FB_OUT_ANSWER, FB_OUT_REASONING, FB_OUT_TOOL, FB_OUT_DELTA, FB_OUT_END, FB_OUT_ERROR,
       FB_OUT_KINDS };
#define FB_API_MAX_TYPES 24
#define FB_API_MAX_KEYS 4

typedef struct {
    const char *s; /* NULL (or n 0): unused */
    size_t n;
    int kind;      /* FB_OUT_* for types and delta_keys, 0 elsewhere */
} fb_api_name_t;

typedef struct {
    fb_api_name_t types[FB_API_MAX_TYPES];
    int n_types;
    fb_api_name_t delta_keys[FB_API_MAX_KEYS];
    int n_delta_keys;
    fb_api_name_t usage_holders[FB_API_MAX_KEYS];
    int n_usage_holders;
    fb_api_name_t output_key;
    fb_api_name_t input_keys[FB_API_MAX_KEYS];
    int n_input_keys;
    fb_api_name_t cached_key;
    fb_api_name_t details_key;
    fb_api_name_t details_cached_key;
} fb_api_t;

/* fb_json_scan_chunk_text for an event of the API `api` describes; api NULL: an OpenAI chunk, exactly as
 * fb_json_scan_chunk_text. Facts as there, with these meanings for a typed API: has_content, has_reasoning
 * and has_tool say which output the event carried; has_finish and has_end that its type ends the stream;
 * n_choices stays -1. */
int fb_json_scan_event(const char *data, size_t len, fb_chunk_info_t *out, const fb_api_t *api,
                       fb_json_text_fn on_answer, void *ctx);
#endif
