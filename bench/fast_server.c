/*
 * fast_server.c: a C twin of fastbench's synthetic server (src/fastbench/synthetic/) in its
 * plain mode (no faults, no jitter, no EOS, no reasoning tokens), fast enough to be the yardstick for
 * a client that takes >= 200,000 chunks/s. The Python server saturates one core at ~138k chunks/s.
 *
 * Wire format: byte for byte the Python server's, apart from the values of "created" and "fb_sent_ns"
 * (the ids match too: they count generation requests from the same --seed). That covers the response
 * heads, the chunked framing (one HTTP chunk per SSE event), the role chunk of chat, the usage objects
 * (stream_options.include_usage / continuous_usage_stats), "data: [DONE]", the tokens (the same word
 * table: Python's random.Random(seed) is reproduced below), the tokens per chunk (uniform in [A, B]
 * after the first chunk, drawn from a second Random(seed) in the same order as the Python server),
 * the token counts of prompts and chats, whole (non-streaming) responses and the JSON error bodies
 * (only malformed JSON is worded differently: "invalid JSON body", not orjson's message).
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /health, GET /v1/models,
 * GET /version, GET /fb/stats, POST /fb/reset, GET /fb/receipts (/metrics and /tokenize are not
 * served: 404).
 * Every request gets max_tokens tokens (finish_reason "length"): the Python server's default, as it
 * has no --eos-prob here, so ignore_eos changes nothing. /fb/stats has the Python server's keys
 * (lateness histogram included, same buckets) plus spin_us and spin_idle_s (see --spin-us).
 *
 * Schedule: chunk i of a request whose last byte was read at t is due at t + TTFT + i * ITL
 * (absolute CLOCK_MONOTONIC deadlines, so lateness never accumulates). "fb_sent_ns" is
 * CLOCK_MONOTONIC read just before the send(): time.monotonic_ns() in the Python server and the
 * client's clock, so the client maps it onto its own timeline.
 *
 * Design: one thread, epoll (level-triggered), one timerfd armed at the earliest deadline of a binary
 * heap that holds one entry per generating connection (a connection runs one request at a time, as
 * HTTP/1.1 without pipelined responses must). Each due time costs one send() per connection; chunks
 * of one stream that are already overdue share that send; nothing is ever held back to batch it.
 * When the next deadline is past or within --spin-us (50 us), the loop polls epoll instead of arming
 * the timer (see spin_ns). Per-connection buffers are kept across requests and connections (slots
 * are indexed by fd and reused), so the chunk path does not allocate. The cost per chunk is almost
 * all the kernel's loopback TCP path (send, the receiver's softirq, waking the reader).
 *
 * Build: cc -O2 -Wall -Wextra -std=gnu11 -o fast_server fast_server.c (Linux only, libc only).
 * Start: fast_server --port 0 ... prints "READY http://HOST:PORT" on stdout once listening, like
 * python -m fastbench.synthetic, so the same launcher logic starts either; SIGTERM/SIGINT stop it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define SERVER_NAME "fastbench-fast-server (C)"
#define MAX_HEAD 65536                          /* as the Python server: longer heads get 431 */
#define MAX_BODY (64ll * 1024 * 1024)           /* as the Python server: longer bodies get 413 */
#define MAX_PENDING_OUT (256u * 1024 * 1024)    /* a client this far behind is dropped (Python: no cap) */
#define TEXT_TABLE_MAX 65536                    /* distinct output words, as the Python server */
#define BATCH_CHUNKS 64     /* most overdue chunks of one stream in one send; then others get a turn */
#define TIMER_BATCH 4096    /* most due writes per timer run before new requests are read */
#define JSON_MAX_DEPTH 1024 /* orjson's nesting limit */
#define READ_ROOM 16384
#define MAX_EVENTS 512

/* ---------------------------------------------------------------------------------------------- */
/* Options (the Python server's flags of the same names and defaults)                              */

static struct {
    const char *host;
    int port;
    const char *model;
    long max_model_len;
    long default_max_tokens;
    double ttft_ms, itl_ms;
    long tpc_min, tpc_max;
    long long seed;
} cfg = {"127.0.0.1", 8000, "fastbench-synthetic", 4096, 16, 50.0, 20.0, 1, 1, 0};

static int64_t ttft_ns, itl_ns;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fast_server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* vDSO: no system call */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------- */
/* Growable byte buffers: they grow (rarely) and are never shrunk, so steady state never allocates. */

typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void buf_grow(buf *b, size_t extra) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) die("out of memory");
    b->p = p;
    b->cap = cap;
}

static inline void buf_reserve(buf *b, size_t extra) {
    if (b->cap - b->len < extra) buf_grow(b, extra);
}

static inline void buf_put(buf *b, const void *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

#define PUT_LIT(b, s) buf_put((b), (s), sizeof(s) - 1)

static inline size_t fmt_u64(char *dst, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) dst[i] = tmp[n - 1 - i];
    return n;
}

static inline void put_u64(buf *b, uint64_t v) {
    buf_reserve(b, 24);
    b->len += fmt_u64(b->p + b->len, v);
}

static inline void put_i64(buf *b, int64_t v) {
    if (v < 0) {
        PUT_LIT(b, "-");
        put_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(b, (uint64_t)v);
    }
}

static void put_fmt(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_reserve(b, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A float as JSON: the shortest text that reads back the same (as Python and orjson print them). */
static void put_double(buf *b, double x) {
    if (!isfinite(x)) {
        PUT_LIT(b, "null");
        return;
    }
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, x);
        if (strtod(s, NULL) == x) break;
    }
    buf_put(b, s, strlen(s));
    if (!strpbrk(s, ".en")) PUT_LIT(b, ".0");
}

/* A JSON string as orjson writes it: escapes '"', '\\' and control characters, nothing else. When
 * latin1 is set, bytes >= 0x80 are Latin-1 characters (Python decodes request heads that way). */
static void put_json_str(buf *b, const char *s, size_t n, bool latin1) {
    static const char hex[] = "0123456789abcdef";
    PUT_LIT(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': PUT_LIT(b, "\\\""); break;
        case '\\': PUT_LIT(b, "\\\\"); break;
        case '\b': PUT_LIT(b, "\\b"); break;
        case '\f': PUT_LIT(b, "\\f"); break;
        case '\n': PUT_LIT(b, "\\n"); break;
        case '\r': PUT_LIT(b, "\\r"); break;
        case '\t': PUT_LIT(b, "\\t"); break;
        default:
            if (ch < 0x20) {
                char e[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
                buf_put(b, e, 6);
            } else if (ch >= 0x80 && latin1) {
                char u[2] = {(char)(0xC0 | (ch >> 6)), (char)(0x80 | (ch & 0x3F))};
                buf_put(b, u, 2);
            } else {
                buf_put(b, &ch, 1);
            }
        }
    }
    PUT_LIT(b, "\"");
}

/* ---------------------------------------------------------------------------------------------- */
/* Python's random.Random: MT19937 seeded as random.seed(int) seeds it (init_by_array over the 32-bit
 * words of abs(seed)), so that the word table and the tokens-per-chunk draws are the Python server's. */

enum { MT_N = 624, MT_M = 397 };

typedef struct {
    uint32_t mt[MT_N];
    int mti;
} mt_state;

static void mt_init_genrand(mt_state *r, uint32_t s) {
    r->mt[0] = s;
    for (int i = 1; i < MT_N; i++) r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + (uint32_t)i;
    r->mti = MT_N;
}

static void mt_init_by_array(mt_state *r, const uint32_t *key, int len) {
    mt_init_genrand(r, 19650218u);
    int i = 1, j = 0;
    for (int k = MT_N > len ? MT_N : len; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
        if (j >= len) j = 0;
    }
    for (int k = MT_N - 1; k; k--) {
        r->mt[i] = (r->mt[i] ^ ((r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            r->mt[0] = r->mt[MT_N - 1];
            i = 1;
        }
    }
    r->mt[0] = 0x80000000u;
}

static void mt_seed_python(mt_state *r, long long seed) {
    uint64_t a = seed < 0 ? (uint64_t)0 - (uint64_t)seed : (uint64_t)seed;
    uint32_t key[2] = {(uint32_t)a, (uint32_t)(a >> 32)};
    mt_init_by_array(r, key, key[1] ? 2 : 1);
}

static uint32_t mt_next(mt_state *r) {
    static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
    if (r->mti >= MT_N) {
        int k;
        uint32_t y;
        for (k = 0; k < MT_N - MT_M; k++) {
            y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
            r->mt[k] = r->mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 1];
        }
        for (; k < MT_N - 1; k++) {
            y = (r->mt[k] & 0x80000000u) | (r->mt[k + 1] & 0x7fffffffu);
            r->mt[k] = r->mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1];
        }
        y = (r->mt[MT_N - 1] & 0x80000000u) | (r->mt[0] & 0x7fffffffu);
        r->mt[MT_N - 1] = r->mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1];
        r->mti = 0;
    }
    uint32_t y = r->mt[r->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static double mt_random(mt_state *r) { /* random.random(): 53 bits */
    uint32_t a = mt_next(r) >> 5, b = mt_next(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------------------------------------- */
/* Output tokens: word i of every response is words[i % n], n = min(max_model_len, 65536), drawn at
 * startup as output_words(seed, n) draws them. They are stored back to back, so tokens a..b of a
 * response are one memcpy. */

static const char *const VOCAB[32] = {
    "tok", "the", "of",   "and", "to",   "in",   "is",   "it",    "that", "was",  "for",
    "on",  "are", "with", "as",  "be",   "at",   "one",  "have",  "this", "from", "by",
    "hot", "word", "but", "what", "some", "we",  "can",  "out",   "other", "were",
};

static char *wtext;
static uint32_t *woff; /* word i is wtext[woff[i] .. woff[i + 1]) */
static long nwords;
static mt_state tpc_rng; /* the engine's Random(seed): tokens-per-chunk draws */

static void build_words(void) {
    mt_state r;
    mt_seed_python(&r, cfg.seed);
    nwords = cfg.max_model_len < TEXT_TABLE_MAX ? cfg.max_model_len : TEXT_TABLE_MAX;
    wtext = malloc((size_t)nwords * 7);
    woff = malloc(((size_t)nwords + 1) * sizeof *woff);
    if (!wtext || !woff) die("out of memory");
    uint32_t o = 0;
    for (long i = 0; i < nwords; i++) {
        uint32_t x;
        do x = mt_next(&r) >> 26; /* choice(VOCAB) = VOCAB[_randbelow(32)]: getrandbits(6) until < 32 */
        while (x >= 32);
        woff[i] = o;
        wtext[o++] = ' ';
        size_t l = strlen(VOCAB[x]);
        memcpy(wtext + o, VOCAB[x], l);
        o += (uint32_t)l;
    }
    woff[nwords] = o;
    mt_seed_python(&tpc_rng, cfg.seed);
}

static inline void put_text(buf *b, long a, long e) {
    if (e <= nwords) {
        buf_put(b, wtext + woff[a], woff[e] - woff[a]);
        return;
    }
    for (long i = a; i < e; i++) {
        long w = i % nwords;
        buf_put(b, wtext + woff[w], woff[w + 1] - woff[w]);
    }
}

/* Tokens in the next decode step: tpc_min + int(random() * (tpc_max - tpc_min + 1)), no draw when
 * the range is one value (as the Python server). */
static inline long draw_tpc(void) {
    if (cfg.tpc_min == cfg.tpc_max) return cfg.tpc_max;
    return cfg.tpc_min + (long)(mt_random(&tpc_rng) * (double)(cfg.tpc_max - cfg.tpc_min + 1));
}

/* ---------------------------------------------------------------------------------------------- */
/* Write lateness (write time - due time): the Python server's histogram, buckets and quantile rule
 * included (10 us buckets to 10 ms, 1 ms buckets to 1 s, one overflow bucket), so /fb/stats reads
 * the same on both. */

#define LAT_NB (1000 + 990 + 1)

static struct {
    uint64_t counts[LAT_NB];
    uint64_t n, early;
    int64_t sum_ns, max_ns, min_ns;
} lat;

static inline void lat_record(int64_t late) {
    if (late < 0) {
        lat.early++;
        if (late < lat.min_ns) lat.min_ns = late;
        late = 0;
    }
    lat.n++;
    lat.sum_ns += late;
    if (late > lat.max_ns) lat.max_ns = late;
    int64_t us = late / 1000;
    if (us < 10000)
        lat.counts[us / 10]++;
    else
        lat.counts[us < 1000000 ? 990 + us / 1000 : LAT_NB - 1]++;
}

static double lat_quantile_ms(double q) {
    if (lat.n == 0) return 0.0;
    double rank = q * (double)lat.n, max_ms = (double)lat.max_ns / 1e6;
    uint64_t acc = 0;
    for (int i = 0; i < LAT_NB; i++) {
        acc += lat.counts[i];
        if ((double)acc >= rank && lat.counts[i]) {
            double upper = i < 1000 ? (i + 1) * 0.01 : i < LAT_NB - 1 ? (double)(i - 990 + 1) : INFINITY;
            return upper < max_ms ? upper : max_ms;
        }
    }
    return max_ms;
}

/* ---------------------------------------------------------------------------------------------- */
/* Connections                                                                                     */

enum { G_NONE, G_STREAM, G_WHOLE };

typedef struct conn {
    int fd;           /* -1 once closed; the slot (and its buffers) is reused by the next fd */
    uint32_t tag;     /* bumped per connection: epoll events meant for an earlier one are dropped */
    uint32_t events;  /* the epoll mask registered */
    bool busy;        /* a request is being answered; later pipelined ones wait in `in` */
    bool close_after; /* Connection: close, HTTP/1.0, or an error that ends the connection */
    bool eof;         /* the client shut down its side (it may still read the response) */
    bool closing;     /* close once `out` is sent */
    bool paused;      /* reading stopped while busy with a full input buffer */
    bool in_process;
    bool sent_continue;
    buf in;
    size_t in_off; /* start of unparsed input */
    buf out;
    size_t out_off; /* start of unsent output */
    /* the request being generated */
    int gen;
    bool chat, include_usage, continuous;
    int64_t base, due;
    uint64_t seq;
    int hpos; /* index in the heap, -1 when not scheduled */
    long n_out, emitted, idx, prompt_tokens, whole_chunks;
    int64_t created;
    char rid[48];
    buf model; /* the model name as JSON */
    buf pre;   /* 'data: {"id":...,"choices":[': the start of every event of the stream */
} conn;

static conn **slots;
static int nslots;
static int ep = -1, tfd = -1, lfd = -1, sfd = -1;

static struct {
    uint64_t chunks_sent, requests_total, req_no, streams_open, streams_max, running, conns_open;
} st;
static int64_t started_wall;

static buf ev;    /* scratch: the SSE event being built */
static buf body;  /* scratch: a response body being built */
static buf mjson; /* scratch: the model name of the request being parsed, as JSON */

/* ---------------------------------------------------------------------------------------------- */
/* The timer heap: one entry per generating connection, keyed by (due, seq); seq keeps equal due
 * times first-come first-served, like the Python server's heap. */

static conn **heap;
static int hn, hcap;
static uint64_t seq_counter;
static int64_t armed;    /* the due time the timerfd is armed for; 0 = none, or it has fired */
static bool timer_fired; /* the timerfd has expired and stays readable until a settime or a read */
/* --spin-us: poll instead of arming the timer when the next write is due within this. A timer
 * interrupt costs ~25 us of CPU on a virtual machine (measured on a Firecracker VM: arming a deadline
 * < 100 us ahead costs ~27 us, polling epoll 0.26 us), so below ~50 us polling is no dearer, and the
 * write leaves within a microsecond of its due time instead of after the interrupt's latency. */
static int64_t spin_ns = 50000;
static int64_t spin_idle_ns; /* time spent polling with nothing to do: /fb/stats spin_idle_s */

static inline bool hless(const conn *a, const conn *b) {
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static inline void hset(int i, conn *c) {
    heap[i] = c;
    c->hpos = i;
}

static void sift_up(int i) {
    conn *c = heap[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!hless(c, heap[p])) break;
        hset(i, heap[p]);
        i = p;
    }
    hset(i, c);
}

static void sift_down(int i) {
    conn *c = heap[i];
    for (;;) {
        int l = 2 * i + 1, m = i;
        const conn *best = c;
        if (l < hn && hless(heap[l], best)) m = l, best = heap[l];
        if (l + 1 < hn && hless(heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        hset(i, heap[m]);
        i = m;
    }
    hset(i, c);
}

static void heap_push(conn *c) {
    if (hn == hcap) {
        hcap = hcap ? 2 * hcap : 1024;
        heap = realloc(heap, (size_t)hcap * sizeof *heap);
        if (!heap) die("out of memory");
    }
    c->seq = ++seq_counter;
    hset(hn++, c);
    sift_up(hn - 1);
}

static void heap_remove(conn *c) {
    int i = c->hpos;
    if (i < 0) return;
    c->hpos = -1;
    if (i != --hn) {
        hset(i, heap[hn]);
        sift_down(i);
        sift_up(heap[i]->hpos);
    }
}

static void heap_later(conn *c) { /* c's due time went up: move it down */
    c->seq = ++seq_counter;
    sift_down(c->hpos);
}

/* Arms the timerfd at an absolute due time. Only for due times in the future: arming one already
 * past fires an interrupt at once, and programming the timer costs a VM exit on virtual machines;
 * both cost more than the write they would announce (the loop polls instead, see main). */
static void timer_arm(int64_t want) {
    struct itimerspec its = {{0, 0}, {want / 1000000000, want % 1000000000}};
    if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0) die("timerfd_settime: %s", strerror(errno));
    armed = want;
    timer_fired = false; /* settime clears the expiry */
}

/* ---------------------------------------------------------------------------------------------- */
/* Connection I/O                                                                                  */

static void update_events(conn *c) {
    uint32_t want = (c->closing || c->eof || c->paused) ? 0 : EPOLLIN;
    if (c->out_off < c->out.len) want |= EPOLLOUT;
    if (want == c->events) return;
    struct epoll_event e = {.events = want, .data.u64 = ((uint64_t)c->tag << 32) | (uint32_t)c->fd};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) == 0) c->events = want;
}

static void end_gen(conn *c) {
    if (c->gen == G_NONE) return;
    heap_remove(c);
    st.running--;
    if (c->gen == G_STREAM) st.streams_open--;
    c->gen = G_NONE;
}

static void close_conn(conn *c) { /* also the abort path: a request in progress ends ("abort") */
    if (c->fd < 0) return;
    end_gen(c);
    close(c->fd); /* leaves the epoll set with it */
    c->fd = -1;
    c->tag++;
    st.conns_open--;
}

/* Sends what is pending in one send() when the socket takes it all (the normal case); the rest waits
 * for EPOLLOUT. Closes the connection when it is closing and drained, or when the peer is gone. */
static void flush_out(conn *c) {
    if (c->fd < 0) return;
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            size_t left = c->out.len - c->out_off;
            if (left > MAX_PENDING_OUT) {
                close_conn(c);
                return;
            }
            if (c->out_off > left) { /* keep the pending tail at the front: the buffer stays bounded */
                memmove(c->out.p, c->out.p + c->out_off, left);
                c->out.len = left;
                c->out_off = 0;
            }
            update_events(c);
            return;
        }
        close_conn(c); /* EPIPE, ECONNRESET: the client is gone */
        return;
    }
    c->out.len = c->out_off = 0;
    if (c->closing) {
        close_conn(c);
        return;
    }
    update_events(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Responses                                                                                       */

static const char *status_text(int s) {
    switch (s) {
    case 200: return "200 OK";
    case 400: return "400 Bad Request";
    case 404: return "404 Not Found";
    case 405: return "405 Method Not Allowed";
    case 413: return "413 Content Too Large";
    case 431: return "431 Request Header Fields Too Large";
    case 501: return "501 Not Implemented";
    default: return "500 Internal Server Error";
    }
}

static const char *error_type(int s) {
    switch (s) {
    case 400: case 413: case 431: return "BadRequestError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 501: return "NotImplementedError";
    default: return "InternalServerError";
    }
}

static void process(conn *c, int64_t t);

/* The current response is complete: close, or go on with the next buffered request. */
static void response_done(conn *c) {
    c->busy = false;
    c->gen = G_NONE;
    if (c->close_after || (c->eof && c->in_off == c->in.len)) {
        c->closing = true; /* flush_out closes once the response is out */
        update_events(c);
        return;
    }
    if (c->paused) {
        c->paused = false;
        update_events(c);
    }
    if (c->in_off < c->in.len && !c->in_process) process(c, now_ns());
}

static void respond(conn *c, int status, const char *b, size_t n, const char *ctype, const char *extra) {
    put_fmt(&c->out, "HTTP/1.1 %s\r\nserver: fastbench-synthetic\r\ncontent-type: %s\r\ncontent-length: %zu\r\n%s%s\r\n",
            status_text(status), ctype, n, extra, c->close_after ? "connection: close\r\n" : "");
    buf_put(&c->out, b, n);
    response_done(c);
}

static void respond_json(conn *c, int status, const buf *b) { respond(c, status, b->p, b->len, "application/json", ""); }

/* {"error":{"message":...,"type":...,"param":null,"code":N}}, as the Python server's _error_body. */
static void respond_error(conn *c, int status, const char *msg, size_t n, bool latin1, const char *extra) {
    body.len = 0;
    PUT_LIT(&body, "{\"error\":{\"message\":");
    put_json_str(&body, msg, n, latin1);
    put_fmt(&body, ",\"type\":\"%s\",\"param\":null,\"code\":%d}}", error_type(status), status);
    respond(c, status, body.p, body.len, "application/json", extra);
}

static void error_fmt(conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void error_fmt(conn *c, int status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    respond_error(c, status, msg, n < (int)sizeof msg ? (size_t)n : sizeof msg - 1, false, "");
}

static void fail(conn *c, int status, const char *msg) { /* a protocol error: answer, then close */
    c->close_after = true;
    c->busy = true;
    respond_error(c, status, msg, strlen(msg), false, "");
}

/* ---------------------------------------------------------------------------------------------- */
/* JSON: a validating reader for request bodies (as strict as orjson on what the client sends:
 * syntax, UTF-8, surrogate pairs, depth), with lookups of the few fields the server reads.        */

enum { JT_NULL, JT_FALSE, JT_TRUE, JT_NUM, JT_STR, JT_ARR, JT_OBJ };

typedef struct {
    const unsigned char *s, *e; /* the value's text */
    int t;
    bool is_int; /* an integer orjson reads as int (within [-2^63, 2^64 - 1]) */
    bool neg;
    uint64_t mag; /* |value| of an integer */
} jv;

static const unsigned char *jws(const unsigned char *p, const unsigned char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* One UTF-8 sequence: its length (0 when invalid: overlong, surrogate, > U+10FFFF, cut short). */
static int utf8_dec(const unsigned char *p, const unsigned char *e, uint32_t *cp) {
    unsigned char b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int n;
    uint32_t v, min;
    if ((b & 0xE0) == 0xC0) n = 2, v = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0) n = 3, v = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0) n = 4, v = b & 0x07, min = 0x10000;
    else return 0;
    if (e - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return 0;
    *cp = v;
    return n;
}

static int hexval(unsigned char h) {
    if (h >= '0' && h <= '9') return h - '0';
    h |= 0x20;
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    return -1;
}

static long hex4(const unsigned char *p, const unsigned char *e) {
    if (e - p < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Next code point of a string's text (p < e, between the quotes); NULL when invalid. */
static const unsigned char *js_next(const unsigned char *p, const unsigned char *e, uint32_t *cp) {
    if (*p != '\\') {
        if (*p < 0x20) return NULL;
        int n = utf8_dec(p, e, cp);
        return n ? p + n : NULL;
    }
    if (++p >= e) return NULL;
    switch (*p) {
    case '"': *cp = '"'; return p + 1;
    case '\\': *cp = '\\'; return p + 1;
    case '/': *cp = '/'; return p + 1;
    case 'b': *cp = '\b'; return p + 1;
    case 'f': *cp = '\f'; return p + 1;
    case 'n': *cp = '\n'; return p + 1;
    case 'r': *cp = '\r'; return p + 1;
    case 't': *cp = '\t'; return p + 1;
    case 'u': {
        long u = hex4(p + 1, e);
        if (u < 0) return NULL;
        p += 5;
        if (u >= 0xDC00 && u < 0xE000) return NULL; /* lone low surrogate */
        if (u >= 0xD800 && u < 0xDC00) {            /* must pair with a low one */
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
            long l = hex4(p + 2, e);
            if (l < 0xDC00 || l >= 0xE000) return NULL;
            *cp = 0x10000 + (((uint32_t)u - 0xD800) << 10) + ((uint32_t)l - 0xDC00);
            return p + 6;
        }
        *cp = (uint32_t)u;
        return p;
    }
    default: return NULL;
    }
}

/* p at '"': validates the string and returns the end of its closing quote (NULL when invalid). */
static const unsigned char *jstr(const unsigned char *p, const unsigned char *e) {
    p++;
    while (p < e && *p != '"') {
        uint32_t cp;
        if (!(p = js_next(p, e, &cp))) return NULL;
    }
    return p < e ? p + 1 : NULL;
}

static const unsigned char *jnum(const unsigned char *p, const unsigned char *e, jv *v) {
    const unsigned char *s = p;
    v->neg = p < e && *p == '-';
    if (v->neg) p++;
    if (p >= e || *p < '0' || *p > '9') return NULL;
    bool fits = true;
    uint64_t m = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < e && *p >= '0' && *p <= '9') {
            unsigned d = *p++ - '0';
            if (m > (UINT64_MAX - d) / 10) fits = false;
            else m = m * 10 + d;
        }
    }
    bool frac = false;
    if (p < e && *p == '.') {
        frac = true;
        if (++p >= e || *p < '0' || *p > '9') return NULL;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        frac = true;
        if (++p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || *p < '0' || *p > '9') return NULL;
        while (p < e && *p >= '0' && *p <= '9') p++;
    }
    if (v->neg && m > (uint64_t)1 << 63) fits = false;
    v->is_int = !frac && fits; /* orjson reads wider integers as floats */
    v->mag = m;
    if (!v->is_int) { /* orjson rejects numbers that overflow a double */
        char tmp[64];
        size_t n = (size_t)(p - s);
        if (n < sizeof tmp) {
            memcpy(tmp, s, n);
            tmp[n] = 0;
            if (isinf(strtod(tmp, NULL))) return NULL;
        }
    }
    return p;
}

/* The literal word at p (true, false, null): past it, or NULL. */
static const unsigned char *jlit(const unsigned char *p, const unsigned char *e, const char *word) {
    size_t n = strlen(word);
    return (size_t)(e - p) >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static const unsigned char *jval(const unsigned char *p, const unsigned char *e, int depth, jv *v) {
    p = jws(p, e);
    if (p >= e) return NULL;
    v->s = p;
    v->is_int = false;
    switch (*p) {
    case '{':
    case '[': {
        bool obj = *p == '{';
        unsigned char close = obj ? '}' : ']';
        if (depth >= JSON_MAX_DEPTH) return NULL;
        v->t = obj ? JT_OBJ : JT_ARR;
        p = jws(p + 1, e);
        if (p < e && *p == close) {
            p++;
            break;
        }
        for (;;) {
            jv x;
            if (obj) {
                if (p >= e || *p != '"' || !(p = jstr(p, e))) return NULL;
                p = jws(p, e);
                if (p >= e || *p++ != ':') return NULL;
            }
            if (!(p = jval(p, e, depth + 1, &x))) return NULL;
            p = jws(p, e);
            if (p < e && *p == ',') {
                p = jws(p + 1, e);
                continue;
            }
            if (p < e && *p == close) {
                p++;
                break;
            }
            return NULL;
        }
        break;
    }
    case '"':
        v->t = JT_STR;
        if (!(p = jstr(p, e))) return NULL;
        break;
    case 't':
        v->t = JT_TRUE;
        if (!(p = jlit(p, e, "true"))) return NULL;
        break;
    case 'f':
        v->t = JT_FALSE;
        if (!(p = jlit(p, e, "false"))) return NULL;
        break;
    case 'n':
        v->t = JT_NULL;
        if (!(p = jlit(p, e, "null"))) return NULL;
        break;
    default:
        v->t = JT_NUM;
        if (!(p = jnum(p, e, v))) return NULL;
    }
    v->e = p;
    return p;
}

/* Does the (validated) key string at k equal the ASCII name? Escapes are decoded. */
static bool jkey_is(const unsigned char *k, const unsigned char *e, const char *name) {
    const unsigned char *p = k + 1;
    while (p < e && *p != '"') {
        uint32_t cp;
        p = js_next(p, e, &cp);
        if (!p || *name == 0 || cp != (unsigned char)*name++) return false;
    }
    return *name == 0;
}

/* One pass over a (validated) object: out[i] gets the last member named names[i] (Python's dict keeps
 * the last duplicate); returns a bit set of the names found. */
static unsigned jget_many(const jv *obj, const char *const *names, int n, jv *out) {
    unsigned found = 0;
    const unsigned char *p = jws(obj->s + 1, obj->e), *e = obj->e;
    if (*p == '}') return 0;
    for (;;) {
        const unsigned char *k = p;
        p = jstr(p, e);
        int match = -1;
        for (int i = 0; i < n && match < 0; i++)
            if (jkey_is(k, p, names[i])) match = i;
        p = jws(p, e) + 1; /* ':' */
        jv x;
        p = jval(p, e, 0, &x);
        if (match >= 0) {
            out[match] = x;
            found |= 1u << match;
        }
        p = jws(p, e);
        if (*p++ == '}') return found;
        p = jws(p, e);
    }
}

/* The last member named `name` of a (validated) object, as Python's dict keeps the last duplicate. */
static bool jget(const jv *obj, const char *name, jv *out) {
    if (obj->t != JT_OBJ) return false;
    bool found = false;
    const unsigned char *p = jws(obj->s + 1, obj->e), *e = obj->e;
    if (*p == '}') return false;
    for (;;) {
        const unsigned char *k = p;
        p = jstr(p, e);
        bool match = jkey_is(k, p, name);
        p = jws(p, e) + 1; /* ':' */
        jv x;
        p = jval(p, e, 0, &x);
        if (match) {
            *out = x;
            found = true;
        }
        p = jws(p, e);
        if (*p++ == '}') return found;
        p = jws(p, e);
    }
}

/* Walks the items of a (validated) array: *it starts at NULL. */
static bool jnext_item(const jv *arr, const unsigned char **it, jv *out) {
    const unsigned char *p = *it ? *it : arr->s + 1;
    p = jws(p, arr->e);
    if (*p == ']') return false;
    if (*p == ',') p++;
    p = jval(p, arr->e, 0, out);
    *it = jws(p, arr->e);
    return true;
}

static bool jempty(const jv *v) { /* [] or {} */
    unsigned char ch = *jws(v->s + 1, v->e);
    return ch == ']' || ch == '}';
}

static double jdouble(const jv *v) {
    char tmp[400];
    size_t n = (size_t)(v->e - v->s);
    if (n >= sizeof tmp) n = sizeof tmp - 1;
    memcpy(tmp, v->s, n);
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

static bool jtruthy(const jv *v) { /* Python's bool() of the parsed value */
    switch (v->t) {
    case JT_TRUE: return true;
    case JT_NUM: return v->is_int ? v->mag != 0 : jdouble(v) != 0.0;
    case JT_STR: return v->e - v->s > 2;
    case JT_ARR:
    case JT_OBJ: return !jempty(v);
    default: return false;
    }
}

static bool py_isspace(uint32_t c) { /* str.isspace(), which str.split() splits on */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static long count_words(const jv *s) { /* len(text.split()): the synthetic token model */
    long n = 0;
    bool in = false;
    const unsigned char *p = s->s + 1, *e = s->e - 1;
    while (p < e) {
        uint32_t cp;
        p = js_next(p, e, &cp);
        if (py_isspace(cp)) in = false;
        else if (!in) in = true, n++;
    }
    return n;
}

/* repr() of a Python float: the shortest digits that read back, in fixed notation when the decimal
 * exponent is in [-4, 16), else as d.ddde+XX. */
static void put_py_float(buf *b, double x) {
    char s[40];
    int prec;
    for (prec = 1; prec < 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, x);
        if (strtod(s, NULL) == x) break;
    }
    snprintf(s, sizeof s, "%.*e", prec - 1, x);
    char *ep = strchr(s, 'e');
    int exp = atoi(ep + 1);
    char digits[24];
    int nd = 0;
    for (char *q = s; q < ep; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    if (x < 0) PUT_LIT(b, "-");
    if (exp < -4 || exp >= 16) {
        buf_put(b, digits, 1);
        if (nd > 1) PUT_LIT(b, "."), buf_put(b, digits + 1, (size_t)nd - 1);
        put_fmt(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT_LIT(b, "0.");
        for (int i = exp + 1; i < 0; i++) PUT_LIT(b, "0");
        buf_put(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) buf_put(b, i < nd ? &digits[i] : "0", 1);
        PUT_LIT(b, ".");
        if (nd > exp + 1) buf_put(b, digits + exp + 1, (size_t)(nd - exp - 1));
        else PUT_LIT(b, "0");
    }
}

static void put_u128(buf *b, unsigned __int128 v) {
    char tmp[48];
    int n = 0;
    do tmp[n++] = (char)('0' + (int)(v % 10)), v /= 10;
    while (v);
    while (n) buf_put(b, &tmp[--n], 1);
}

/* The parsed value as Python's f-string shows it (for error messages; lists and objects as sent). */
static void put_shown(buf *b, const jv *v) {
    if (v->t == JT_TRUE) PUT_LIT(b, "True");
    else if (v->t == JT_FALSE) PUT_LIT(b, "False");
    else if (v->t == JT_STR) buf_put(b, v->s + 1, (size_t)(v->e - v->s - 2));
    else if (v->t == JT_NUM && v->is_int) {
        if (v->neg && v->mag) PUT_LIT(b, "-");
        put_u64(b, v->mag);
    } else if (v->t == JT_NUM) put_py_float(b, jdouble(v));
    else buf_put(b, v->s, (size_t)(v->e - v->s));
}

/* The model name (a validated JSON string) re-encoded as orjson.dumps would: into mjson. */
static void model_json_from(const jv *s) {
    mjson.len = 0;
    static buf raw;
    raw.len = 0;
    const unsigned char *p = s->s + 1, *e = s->e - 1;
    while (p < e) {
        uint32_t cp;
        p = js_next(p, e, &cp);
        char u[4];
        int n;
        if (cp < 0x80) u[0] = (char)cp, n = 1;
        else if (cp < 0x800) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
        else if (cp < 0x10000)
            u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
            u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
        else
            u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
            u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
        buf_put(&raw, u, (size_t)n);
    }
    put_json_str(&mjson, raw.p, raw.len, false);
}

/* ---------------------------------------------------------------------------------------------- */
/* Token counts of the synthetic token model (fastbench.synthetic.model.count_*_tokens); -1 and *err on error */

static long count_prompt(const jv *prompt, const char **err) {
    jv p = *prompt, only;
    const unsigned char *it = NULL;
    if (p.t == JT_ARR && jnext_item(&p, &it, &only) && !jnext_item(&p, &it, &(jv){0}) &&
        (only.t == JT_STR || only.t == JT_ARR))
        p = only; /* a one-element batch: its prompt */
    if (p.t == JT_STR) return count_words(&p);
    if (p.t == JT_ARR) {
        long n = 0;
        jv x;
        it = NULL;
        while (jnext_item(&p, &it, &x)) {
            if (x.t != JT_NUM || !x.is_int) goto bad;
            n++;
        }
        return n;
    }
bad:
    *err = "prompt must be a string or a list of token ids (batched prompts are not supported)";
    return -1;
}

static long count_messages(const jv *msgs, const char **err) {
    if (!msgs || msgs->t != JT_ARR || jempty(msgs)) {
        *err = "messages must be a non-empty list";
        return -1;
    }
    long n = 0;
    jv m;
    const unsigned char *it = NULL;
    while (jnext_item(msgs, &it, &m)) {
        if (m.t != JT_OBJ) {
            *err = "each message must be an object";
            return -1;
        }
        n += 4; /* CHAT_MESSAGE_OVERHEAD */
        jv content;
        if (!jget(&m, "content", &content) || content.t == JT_NULL) continue;
        if (content.t == JT_STR) {
            n += count_words(&content);
        } else if (content.t == JT_ARR) { /* the text parts, joined by spaces */
            jv part, text;
            const unsigned char *pit = NULL;
            while (jnext_item(&content, &pit, &part)) {
                if (part.t == JT_STR) n += count_words(&part);
                else if (part.t == JT_OBJ && jget(&part, "text", &text) && text.t == JT_STR) n += count_words(&text);
            }
        } else {
            *err = "message content must be a string, a list of parts or null";
            return -1;
        }
    }
    return n;
}

/* ---------------------------------------------------------------------------------------------- */
/* Generation                                                                                      */

static void frame_ev(conn *c) { /* one HTTP chunk holding the SSE event in `ev` */
    static const char hex[] = "0123456789abcdef";
    char h[20];
    int n = 0;
    for (int sh = 60; sh >= 0; sh -= 4) /* "%x\r\n" without printf: this runs once per chunk */
        if ((ev.len >> sh) || n || sh == 0) h[n++] = hex[(ev.len >> sh) & 15];
    h[n++] = '\r';
    h[n++] = '\n';
    buf_reserve(&c->out, (size_t)n + ev.len + 2);
    memcpy(c->out.p + c->out.len, h, (size_t)n);
    memcpy(c->out.p + c->out.len + n, ev.p, ev.len);
    memcpy(c->out.p + c->out.len + n + ev.len, "\r\n", 2);
    c->out.len += (size_t)n + ev.len + 2;
    ev.len = 0;
}

static inline void put_usage(buf *b, long prompt, long completion) {
    PUT_LIT(b, ",\"usage\":{\"prompt_tokens\":");
    put_u64(b, (uint64_t)prompt);
    PUT_LIT(b, ",\"total_tokens\":");
    put_u64(b, (uint64_t)(prompt + completion));
    PUT_LIT(b, ",\"completion_tokens\":");
    put_u64(b, (uint64_t)completion);
    PUT_LIT(b, "}");
}

static inline void put_tail_and_frame(conn *c, const char *nsd, size_t nsl) {
    PUT_LIT(&ev, ",\"fb_sent_ns\":");
    buf_put(&ev, nsd, nsl);
    PUT_LIT(&ev, "}\n\n");
    frame_ev(c);
}

/* Appends the events of chunk c->idx (stamped nsd) to c->out; returns true when it was the last. */
static bool emit_chunk(conn *c, const char *nsd, size_t nsl) {
    long i = c->idx, a = c->emitted, k;
    if (i == 0) {
        k = 1; /* the prefill's token */
    } else {
        k = draw_tpc();
        /* The Python server's fast path draws, sees the step would reach the end, and hands over to
         * its general path, which draws again: the last step takes two draws. Mirrored so that the
         * same seed gives the same chunk sizes. */
        if (a + k >= c->n_out) {
            k = draw_tpc();
            if (k > c->n_out - a) k = c->n_out - a;
        }
    }
    long b = a + k;
    bool last = b == c->n_out;
    if (i == 0 && c->chat) { /* the role chunk comes first */
        buf_put(&ev, c->pre.p, c->pre.len);
        PUT_LIT(&ev, "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                     "\"finish_reason\":null}]");
        if (c->continuous) put_usage(&ev, c->prompt_tokens, 0);
        put_tail_and_frame(c, nsd, nsl);
    }
    buf_put(&ev, c->pre.p, c->pre.len);
    if (c->chat) PUT_LIT(&ev, "{\"index\":0,\"delta\":{\"content\":\"");
    else PUT_LIT(&ev, "{\"index\":0,\"text\":\"");
    put_text(&ev, a, b);
    if (c->chat) PUT_LIT(&ev, "\"}");
    else PUT_LIT(&ev, "\"");
    if (last) PUT_LIT(&ev, ",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]");
    else if (c->chat) PUT_LIT(&ev, ",\"logprobs\":null,\"finish_reason\":null}]");
    else PUT_LIT(&ev, ",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]");
    if (c->continuous) put_usage(&ev, c->prompt_tokens, b);
    put_tail_and_frame(c, nsd, nsl);
    if (last) {
        if (c->include_usage) {
            buf_put(&ev, c->pre.p, c->pre.len);
            PUT_LIT(&ev, "]");
            put_usage(&ev, c->prompt_tokens, b);
            put_tail_and_frame(c, nsd, nsl);
        }
        PUT_LIT(&c->out, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    }
    c->idx = i + 1;
    c->emitted = b;
    st.chunks_sent++;
    return last;
}

/* Timer callback of a stream: write every chunk of it that is due, in one send. */
static void step_stream(conn *c) {
    int64_t ns = now_ns(); /* the stamp of every chunk of this send, taken just before it */
    char nsd[24];
    size_t nsl = fmt_u64(nsd, (uint64_t)ns);
    bool last;
    int n = 0;
    do {
        lat_record(ns - c->due);
        last = emit_chunk(c, nsd, nsl);
        if (!last) c->due = c->base + c->idx * itl_ns;
    } while (!last && c->due <= ns && ++n < BATCH_CHUNKS);
    if (last) {
        end_gen(c);
        response_done(c); /* may answer a pipelined request: its bytes follow in the same send */
    } else {
        heap_later(c);
    }
    flush_out(c);
}

/* Timer callback of a whole (non-streaming) response: sent when its last chunk would have been. */
static void finish_whole(conn *c) {
    int64_t ns = now_ns();
    body.len = 0;
    put_fmt(&body, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":", c->rid,
            c->chat ? "chat.completion" : "text_completion", c->created);
    buf_put(&body, c->model.p, c->model.len);
    if (c->chat) PUT_LIT(&body, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"");
    else PUT_LIT(&body, ",\"choices\":[{\"index\":0,\"text\":\"");
    put_text(&body, 0, c->n_out);
    if (c->chat) PUT_LIT(&body, "\",\"tool_calls\":[]},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}]");
    else PUT_LIT(&body, "\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_logprobs\":null}]");
    put_usage(&body, c->prompt_tokens, c->n_out);
    PUT_LIT(&body, ",\"fb_sent_ns\":");
    put_i64(&body, ns);
    PUT_LIT(&body, "}");
    lat_record(ns - c->due);
    end_gen(c);
    respond_json(c, 200, &body);
    flush_out(c);
}

/* POST /v1/completions and /v1/chat/completions: the Python server's generate(), checks in its order. */
static void keep_receipt(const jv *row, int64_t t);

static void generate(conn *c, const char *bp, size_t bn, int64_t t, bool chat) {
    const unsigned char *s = (const unsigned char *)bp, *e = s + bn;
    jv req, v, so;
    const unsigned char *end = jval(s, e, 0, &req);
    if (!end || jws(end, e) != e) {
        error_fmt(c, 400, "invalid JSON body");
        return;
    }
    if (req.t != JT_OBJ) {
        error_fmt(c, 400, "body must be a JSON object");
        return;
    }
    enum { F_STREAM, F_SO, F_N, F_MT, F_MCT, F_MESSAGES, F_PROMPT, F_MODEL, NF };
    static const char *const names[NF] = {"stream", "stream_options", "n", "max_tokens", "max_completion_tokens",
                                          "messages", "prompt", "model"};
    jv f[NF];
    unsigned has = jget_many(&req, names, NF, f);
#define HAS(i) ((has >> (i)) & 1u)
#define HAS_NONNULL(i) (HAS(i) && f[i].t != JT_NULL)
    bool stream = HAS(F_STREAM) && jtruthy(&f[F_STREAM]);
    bool has_so = HAS_NONNULL(F_SO);
    so = f[F_SO];
    if (has_so && !stream) {
        error_fmt(c, 400, "Stream options can only be defined when `stream=True`.");
        return;
    }
    if (has_so && so.t != JT_OBJ) {
        error_fmt(c, 400, "stream_options must be an object");
        return;
    }
    bool include_usage = has_so && jget(&so, "include_usage", &v) && jtruthy(&v);
    bool continuous = include_usage && jget(&so, "continuous_usage_stats", &v) && jtruthy(&v);
    v = f[F_N];
    if (HAS_NONNULL(F_N) && v.t != JT_TRUE &&
        !(v.t == JT_NUM && (v.is_int ? v.mag == 1 && !v.neg : jdouble(&v) == 1.0))) {
        error_fmt(c, 400, "the synthetic server supports n=1 only");
        return;
    }
    uint64_t max_tokens = (uint64_t)cfg.default_max_tokens;
    bool has_mt = HAS_NONNULL(F_MT);
    v = f[F_MT];
    if (!has_mt && chat && HAS_NONNULL(F_MCT)) has_mt = true, v = f[F_MCT];
    if (has_mt) {
        if (v.t != JT_NUM || !v.is_int || v.neg || v.mag < 1) {
            ev.len = 0;
            PUT_LIT(&ev, "max_tokens must be at least 1, got ");
            put_shown(&ev, &v);
            PUT_LIT(&ev, ".");
            respond_error(c, 400, ev.p, ev.len, false, "");
            ev.len = 0;
            return;
        }
        max_tokens = v.mag;
    }
    const char *err = NULL;
    long prompt_tokens;
    if (chat) prompt_tokens = count_messages(HAS(F_MESSAGES) ? &f[F_MESSAGES] : NULL, &err);
    else if (!HAS(F_PROMPT)) prompt_tokens = -1, err = "prompt is required";
    else prompt_tokens = count_prompt(&f[F_PROMPT], &err);
    if (prompt_tokens < 0) {
        error_fmt(c, 400, "%s", err);
        return;
    }
    if (HAS_NONNULL(F_MODEL)) {
        if (f[F_MODEL].t != JT_STR) {
            error_fmt(c, 400, "model must be a string");
            return;
        }
        model_json_from(&f[F_MODEL]);
    } else {
        mjson.len = 0;
        put_json_str(&mjson, cfg.model, strlen(cfg.model), false);
    }
#undef HAS
#undef HAS_NONNULL
    unsigned __int128 total = (unsigned __int128)prompt_tokens + max_tokens; /* Python ints do not wrap */
    if (total > (unsigned __int128)cfg.max_model_len) {
        ev.len = 0;
        put_fmt(&ev, "This model's maximum context length is %ld tokens. However, you requested ", cfg.max_model_len);
        put_u128(&ev, total);
        put_fmt(&ev, " tokens (%ld in the messages, ", prompt_tokens);
        put_u64(&ev, max_tokens);
        PUT_LIT(&ev, " in the completion). Please reduce the length of the messages or completion.");
        respond_error(c, 400, ev.p, ev.len, false, "");
        ev.len = 0;
        return;
    }
    st.req_no++;
    if (jget(&req, "fb_row", &v)) keep_receipt(&v, t);
    c->chat = chat;
    c->include_usage = include_usage;
    c->continuous = continuous;
    c->prompt_tokens = prompt_tokens;
    c->n_out = (long)max_tokens; /* no EOS in plain mode: every request gets max_tokens tokens, "length" */
    c->emitted = c->idx = 0;
    c->base = t + ttft_ns;
    c->created = (int64_t)time(NULL);
    snprintf(c->rid, sizeof c->rid, "%s%08" PRIx32 "%024" PRIx64, chat ? "chatcmpl-" : "cmpl-",
             (uint32_t)(uint64_t)cfg.seed, st.req_no);
    c->model.len = 0;
    buf_put(&c->model, mjson.p, mjson.len);
    st.running++;
    if (stream) {
        c->pre.len = 0;
        put_fmt(&c->pre, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":", c->rid,
                chat ? "chat.completion.chunk" : "text_completion", c->created);
        buf_put(&c->pre, mjson.p, mjson.len);
        PUT_LIT(&c->pre, ",\"choices\":[");
        st.streams_open++;
        if (st.streams_open > st.streams_max) st.streams_max = st.streams_open;
        c->gen = G_STREAM;
        put_fmt(&c->out, "HTTP/1.1 200 OK\r\nserver: fastbench-synthetic\r\ncontent-type: text/event-stream; "
                "charset=utf-8\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n%s\r\n",
                c->close_after ? "connection: close\r\n" : "");
        c->due = c->base;
    } else {
        /* The sizes are drawn now, as the Python server does, so the draws stay in step with it. */
        long emitted = 0, idx = 0;
        while (emitted < c->n_out) {
            long k = idx == 0 ? 1 : draw_tpc();
            emitted += k < c->n_out - emitted ? k : c->n_out - emitted;
            idx++;
        }
        c->whole_chunks = idx;
        c->gen = G_WHOLE;
        c->due = c->base + (idx - 1) * itl_ns;
    }
    heap_push(c);
}

/* ---------------------------------------------------------------------------------------------- */
/* Other routes                                                                                    */

static void stats_json(buf *b) {
    b->len = 0;
    put_fmt(b, "{\"server\":\"%s\",\"timer\":\"timerfd\",\"lateness\":{\"count\":%" PRIu64 ",\"mean_ms\":",
            SERVER_NAME, lat.n);
    put_double(b, lat.n ? (double)lat.sum_ns / (double)lat.n / 1e6 : 0.0);
    PUT_LIT(b, ",\"p50_ms\":");
    put_double(b, lat_quantile_ms(0.5));
    PUT_LIT(b, ",\"p90_ms\":");
    put_double(b, lat_quantile_ms(0.9));
    PUT_LIT(b, ",\"p99_ms\":");
    put_double(b, lat_quantile_ms(0.99));
    PUT_LIT(b, ",\"p999_ms\":");
    put_double(b, lat_quantile_ms(0.999));
    PUT_LIT(b, ",\"max_ms\":");
    put_double(b, (double)lat.max_ns / 1e6);
    uint64_t over = 0;
    for (int i = 100; i < LAT_NB; i++) over += lat.counts[i];
    put_fmt(b, ",\"over_1ms\":%" PRIu64 ",\"early\":%" PRIu64 ",\"min_early_ms\":", over, lat.early);
    put_double(b, (double)lat.min_ns / 1e6);
    put_fmt(b,
            "},\"chunks_sent\":%" PRIu64 ",\"streams_open\":%" PRIu64 ",\"streams_max\":%" PRIu64
            ",\"requests_running\":%" PRIu64 ",\"requests_total\":%" PRIu64 ",\"generation_requests\":%" PRIu64
            ",\"faults_injected\":0,\"connections_open\":%" PRIu64
            ",\"idle_gc_collections\":0,\"gc_enabled\":false,\"fastbench_modules\":[],\"spin_us\":%" PRId64
            ",\"spin_idle_s\":",
            st.chunks_sent, st.streams_open, st.streams_max, st.running, st.requests_total, st.req_no,
            st.conns_open, spin_ns / 1000);
    /* CPU seconds spent polling with nothing due (see --spin-us) since the last reset: the process's
     * CPU time minus this is what the work took. */
    put_double(b, (double)spin_idle_ns / 1e9);
    PUT_LIT(b, "}");
}

static void h_health(conn *c) { respond(c, 200, "", 0, "text/plain; charset=utf-8", ""); }

static void h_models(conn *c) {
    body.len = 0;
    PUT_LIT(&body, "{\"object\":\"list\",\"data\":[{\"id\":");
    put_json_str(&body, cfg.model, strlen(cfg.model), false);
    put_fmt(&body, ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":\"fastbench\",\"root\":", started_wall);
    put_json_str(&body, cfg.model, strlen(cfg.model), false);
    put_fmt(&body, ",\"parent\":null,\"max_model_len\":%ld,\"permission\":[]}]}", cfg.max_model_len);
    respond_json(c, 200, &body);
}

static void h_version(conn *c) {
    body.len = 0;
    PUT_LIT(&body, "{\"version\":\"" SERVER_NAME "\"}");
    respond_json(c, 200, &body);
}

static void h_stats(conn *c) {
    stats_json(&body);
    respond_json(c, 200, &body);
}

/* GET /fb/receipts: when each request tagged "fb_row" was read (CLOCK_MONOTONIC ns), as the Python
 * server keeps them; validate takes the client's send stamp from it (the request's way in). A row
 * tagged twice is kept twice here (the Python server keeps its last read): validate's rows are unique. */
#define MAX_RECEIPTS 1000000
static int64_t *receipt_row, *receipt_ns;
static size_t receipts, receipts_cap;

static void keep_receipt(const jv *row, int64_t t) {
    if (row->t != JT_NUM || !row->is_int || row->mag > (uint64_t)INT64_MAX || receipts >= MAX_RECEIPTS) return;
    if (receipts == receipts_cap) {
        size_t cap = receipts_cap ? 2 * receipts_cap : 1024;
        int64_t *rows = realloc(receipt_row, cap * sizeof *rows);
        if (!rows) return;
        receipt_row = rows;
        int64_t *ns = realloc(receipt_ns, cap * sizeof *ns);
        if (!ns) return;
        receipt_ns = ns;
        receipts_cap = cap;
    }
    receipt_row[receipts] = row->neg ? -(int64_t)row->mag : (int64_t)row->mag;
    receipt_ns[receipts++] = t;
}

static void h_receipts(conn *c) {
    body.len = 0;
    PUT_LIT(&body, "{\"rows\":[");
    for (size_t i = 0; i < receipts; i++) put_fmt(&body, i ? ",%" PRId64 : "%" PRId64, receipt_row[i]);
    PUT_LIT(&body, "],\"read_ns\":[");
    for (size_t i = 0; i < receipts; i++) put_fmt(&body, i ? ",%" PRId64 : "%" PRId64, receipt_ns[i]);
    PUT_LIT(&body, "]}");
    respond_json(c, 200, &body);
}

static void h_reset(conn *c) {
    receipts = 0;
    memset(&lat, 0, sizeof lat);
    st.chunks_sent = 0;
    spin_idle_ns = 0;
    st.streams_max = st.streams_open;
    h_stats(c);
}

static void dispatch(conn *c, const char *method, size_t mlen, const char *target, size_t tlen, const char *bp,
                     size_t bn, int64_t t) {
    static const struct {
        const char *path, *method;
        int route;
    } routes[] = {
        {"/health", "GET", 0},   {"/v1/models", "GET", 1}, {"/version", "GET", 2},
        {"/fb/stats", "GET", 3}, {"/fb/reset", "POST", 4}, {"/v1/completions", "POST", 5},
        {"/v1/chat/completions", "POST", 6}, {"/fb/receipts", "GET", 7},
    };
    st.requests_total++;
    const char *q = memchr(target, '?', tlen);
    size_t plen = q ? (size_t)(q - target) : tlen;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strlen(routes[i].path) != plen || memcmp(routes[i].path, target, plen)) continue;
        if (strlen(routes[i].method) != mlen || memcmp(routes[i].method, method, mlen)) {
            body.len = 0; /* the message goes through `ev`: respond_error builds its body in `body` */
            ev.len = 0;
            PUT_LIT(&ev, "Method Not Allowed: ");
            buf_put(&ev, method, mlen);
            PUT_LIT(&ev, " ");
            buf_put(&ev, target, plen);
            char allow[32];
            snprintf(allow, sizeof allow, "allow: %s\r\n", routes[i].method);
            respond_error(c, 405, ev.p, ev.len, true, allow);
            ev.len = 0;
            return;
        }
        switch (routes[i].route) {
        case 0: h_health(c); return;
        case 1: h_models(c); return;
        case 2: h_version(c); return;
        case 3: h_stats(c); return;
        case 4: h_reset(c); return;
        case 7: h_receipts(c); return;
        default: generate(c, bp, bn, t, routes[i].route == 6); return;
        }
    }
    ev.len = 0;
    PUT_LIT(&ev, "Not Found: ");
    buf_put(&ev, target, plen);
    respond_error(c, 404, ev.p, ev.len, true, "");
    ev.len = 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* HTTP/1.1 requests: the Python server's parser (keep-alive, split reads, pipelining handled one
 * request at a time, Content-Length bodies only, Expect: 100-continue).                           */

static bool hspace(unsigned char ch) { /* what Python's str.strip() strips from a Latin-1 head */
    return (ch >= 0x09 && ch <= 0x0D) || (ch >= 0x1C && ch <= 0x20) || ch == 0x85 || ch == 0xA0;
}

static bool ieq(const char *a, size_t n, const char *lower) {
    if (strlen(lower) != n) return false;
    for (size_t i = 0; i < n; i++)
        if ((a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : a[i]) != lower[i]) return false;
    return true;
}

static bool icontains(const char *a, size_t n, const char *lower) {
    size_t m = strlen(lower);
    for (size_t i = 0; i + m <= n; i++)
        if (ieq(a + i, m, lower)) return true;
    return false;
}

/* int(text) for a Content-Length: sign, digits and single underscores between digits; -1 = bad. */
static long long parse_cl(const char *s, size_t n) {
    size_t i = 0;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i >= n) return -1;
    long long v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        if (s[i] == '_' && prev_digit && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9') {
            prev_digit = false;
            continue;
        }
        if (s[i] < '0' || s[i] > '9') return -1;
        if (v < LLONG_MAX / 100) v = v * 10 + (s[i] - '0');
        else v = LLONG_MAX / 10; /* too big: 413 */
        prev_digit = true;
    }
    return neg && v ? -1 : v;
}

static void process(conn *c, int64_t t) {
    c->in_process = true;
    while (!c->busy && !c->closing && c->fd >= 0 && c->in_off < c->in.len) {
        while (c->in.len - c->in_off >= 2 && c->in.p[c->in_off] == '\r' && c->in.p[c->in_off + 1] == '\n')
            c->in_off += 2;
        char *s = c->in.p + c->in_off;
        size_t avail = c->in.len - c->in_off;
        if (!avail) break;
        char *hend = memmem(s, avail, "\r\n\r\n", 4);
        if (!hend) {
            if (avail > MAX_HEAD) fail(c, 431, "request head too large");
            break;
        }
        /* request line: exactly three parts split on single spaces, an HTTP/1.x version */
        char *le = memmem(s, (size_t)(hend - s) + 2, "\r\n", 2);
        char *sp1 = memchr(s, ' ', (size_t)(le - s));
        char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(le - sp1 - 1)) : NULL;
        if (!sp2 || memchr(sp2 + 1, ' ', (size_t)(le - sp2 - 1)) || le - sp2 - 1 < 7 || memcmp(sp2 + 1, "HTTP/1.", 7)) {
            fail(c, 400, "malformed request line");
            break;
        }
        bool http10 = le - sp2 - 1 == 8 && !memcmp(sp2 + 1, "HTTP/1.0", 8);
        long long cl = 0;
        bool expect_continue = false, has_te = false, bad_cl = false;
        const char *conn_v = "";
        size_t conn_n = 0;
        bool bad_line = false;
        for (char *l = le + 2; l < hend + 2 && !bad_line;) {
            char *lend = memmem(l, (size_t)(hend + 2 - l), "\r\n", 2);
            char *colon = memchr(l, ':', (size_t)(lend - l));
            if (!colon) {
                bad_line = true;
                break;
            }
            const char *k = l, *v = colon + 1;
            size_t kn = (size_t)(colon - l), vn = (size_t)(lend - v);
            while (kn && hspace((unsigned char)*k)) k++, kn--;
            while (kn && hspace((unsigned char)k[kn - 1])) kn--;
            while (vn && hspace((unsigned char)*v)) v++, vn--;
            while (vn && hspace((unsigned char)v[vn - 1])) vn--;
            if (ieq(k, kn, "content-length")) { /* the last one counts, as in a dict */
                cl = parse_cl(v, vn);
                bad_cl = cl < 0;
            } else if (ieq(k, kn, "transfer-encoding")) {
                has_te = true;
            } else if (ieq(k, kn, "expect")) {
                expect_continue = ieq(v, vn, "100-continue");
            } else if (ieq(k, kn, "connection")) {
                conn_v = v, conn_n = vn;
            }
            l = lend + 2;
        }
        if (bad_line) {
            fail(c, 400, "malformed header line");
            break;
        }
        if (has_te) {
            fail(c, 501, "chunked request bodies are not supported; send Content-Length");
            break;
        }
        if (bad_cl) {
            fail(c, 400, "bad Content-Length");
            break;
        }
        if (cl > MAX_BODY) {
            fail(c, 413, "request body too large");
            break;
        }
        size_t head = (size_t)(hend - s) + 4, total = head + (size_t)cl;
        if (avail < total) {
            if (!c->sent_continue && expect_continue) {
                c->sent_continue = true;
                PUT_LIT(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
            }
            break;
        }
        c->in_off += total; /* the request stays in place until the buffer is compacted, after process() */
        c->sent_continue = false;
        c->close_after = icontains(conn_v, conn_n, "close") || (http10 && !icontains(conn_v, conn_n, "keep-alive"));
        c->busy = true;
        dispatch(c, s, (size_t)(sp1 - s), sp1 + 1, (size_t)(sp2 - sp1 - 1), s + head, (size_t)cl, t);
        t = now_ns();
    }
    c->in_process = false;
    if (c->in_off == c->in.len) c->in_off = c->in.len = 0;
    flush_out(c);
}

static void on_readable(conn *c) {
    if (c->in_off) { /* keep unparsed input at the front */
        memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
        c->in.len -= c->in_off;
        c->in_off = 0;
    }
    if (c->busy && c->in.len >= MAX_HEAD) { /* as the Python server: stop reading while busy and full */
        c->paused = true;
        update_events(c);
        return;
    }
    buf_reserve(&c->in, READ_ROOM);
    ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        close_conn(c);
        return;
    }
    int64_t t = now_ns(); /* the arrival time of a request completed by this read */
    if (n == 0) {
        c->eof = true;
        update_events(c); /* level-triggered: stop polling for the EOF we have seen */
    }
    c->in.len += (size_t)n;
    if (!c->busy) process(c, t);
    if (c->fd >= 0 && c->eof && !c->busy && !c->closing) { /* nothing left to answer */
        c->closing = true;
        flush_out(c);
    }
}

static void on_accept(void) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) perror("fast_server: accept4");
            return;
        }
        int one = 1; /* each chunk leaves at once: no Nagle delay behind an unacknowledged one */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fd >= nslots) {
            int n = nslots ? nslots : 1024;
            while (n <= fd) n *= 2;
            slots = realloc(slots, (size_t)n * sizeof *slots);
            if (!slots) die("out of memory");
            memset(slots + nslots, 0, (size_t)(n - nslots) * sizeof *slots);
            nslots = n;
        }
        conn *c = slots[fd];
        if (!c && !(c = slots[fd] = calloc(1, sizeof *c))) die("out of memory");
        uint32_t tag = c->tag + 1;
        buf in = c->in, out = c->out, model = c->model, pre = c->pre; /* buffers are reused */
        memset(c, 0, sizeof *c);
        c->in = in, c->out = out, c->model = model, c->pre = pre;
        c->in.len = c->out.len = 0;
        c->fd = fd;
        c->tag = tag;
        c->hpos = -1;
        c->events = EPOLLIN;
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = ((uint64_t)tag << 32) | (uint32_t)fd};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) < 0) {
            close(fd);
            c->fd = -1;
            continue;
        }
        st.conns_open++;
    }
}

/* Every write that is due, earliest first; at most TIMER_BATCH before new input gets a turn. */
static void run_timers(void) {
    int64_t now = now_ns();
    for (int budget = TIMER_BATCH; hn && budget > 0; budget--) {
        conn *c = heap[0];
        if (c->due > now) {
            now = now_ns();
            if (c->due > now) break;
        }
        if (c->gen == G_STREAM) step_stream(c);
        else finish_whole(c);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Startup                                                                                         */

static void usage(FILE *f) {
    fputs("usage: fast_server [--host HOST] [--port PORT] [--model NAME] [--ttft-ms MS] [--itl-ms MS]\n"
          "                   [--tokens-per-chunk N|A-B] [--seed N] [--max-model-len N] [--default-max-tokens N]\n"
          "                   [--spin-us N (default 50: poll, not sleep, when the next write is that close)]\n"
          "fastbench's synthetic streaming server in C (plain mode). --port 0 picks a free port; prints\n"
          "'READY http://HOST:PORT' once listening. Defaults as python -m fastbench.synthetic.\n",
          f);
}

static bool parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_ms(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0) || !isfinite(v)) return false;
    *out = v;
    return true;
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        char *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        if (eq) *eq = 0, val = eq + 1;
        else if (i + 1 < argc) val = argv[i + 1], i++;
        if (!val) {
            usage(stderr);
            die("%s needs a value", a);
        }
        long long n;
        bool ok = true;
        if (!strcmp(a, "--host")) cfg.host = val;
        else if (!strcmp(a, "--port")) ok = parse_long(val, 0, 65535, &n) && (cfg.port = (int)n, true);
        else if (!strcmp(a, "--model")) cfg.model = val;
        else if (!strcmp(a, "--ttft-ms")) ok = parse_ms(val, &cfg.ttft_ms);
        else if (!strcmp(a, "--itl-ms")) ok = parse_ms(val, &cfg.itl_ms);
        else if (!strcmp(a, "--spin-us")) ok = parse_long(val, 0, 1000000, &n) && (spin_ns = n * 1000, true);
        else if (!strcmp(a, "--seed")) ok = parse_long(val, LLONG_MIN + 1, LLONG_MAX, &n) && (cfg.seed = n, true);
        else if (!strcmp(a, "--max-model-len")) ok = parse_long(val, 1, 1L << 40, &n) && (cfg.max_model_len = (long)n, true);
        else if (!strcmp(a, "--default-max-tokens"))
            ok = parse_long(val, 1, 1L << 40, &n) && (cfg.default_max_tokens = (long)n, true);
        else if (!strcmp(a, "--tokens-per-chunk")) {
            char *dash = strchr(val, '-');
            long long lo, hi;
            if (dash) {
                *dash = 0;
                ok = parse_long(val, 1, 1L << 30, &lo) && parse_long(dash + 1, 1, 1L << 30, &hi) && lo <= hi;
                *dash = '-';
            } else {
                ok = parse_long(val, 1, 1L << 30, &lo) && (hi = lo, true);
            }
            if (ok) cfg.tpc_min = (long)lo, cfg.tpc_max = (long)hi;
        } else {
            usage(stderr);
            die("unknown option %s", a);
        }
        if (!ok) {
            usage(stderr);
            die("bad value for %s: %s", a, val);
        }
    }
}

static int listen_on(const char *host, int port, int *bound_port) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) die("cannot resolve %s: %s", host, gai_strerror(rc));
    int fd = -1, err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) die("cannot listen on %s:%d: %s", host, port, strerror(err));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    ttft_ns = (int64_t)(cfg.ttft_ms * 1e6); /* int(ms * 1e6), as the Python server */
    itl_ns = (int64_t)(cfg.itl_ms * 1e6);
    build_words();
    started_wall = (int64_t)time(NULL);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl; /* thousands of streams need thousands of descriptors */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL); /* delivered through the signalfd instead */

    int port;
    lfd = listen_on(cfg.host, cfg.port, &port);
    if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0) die("epoll_create1: %s", strerror(errno));
    if ((tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0) die("timerfd: %s", strerror(errno));
    if ((sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) die("signalfd: %s", strerror(errno));
    enum { ID_LISTEN = 1, ID_TIMER, ID_SIGNAL }; /* tags 0 never name a connection: those start at 1 */
    struct epoll_event e = {.events = EPOLLIN};
    e.data.u64 = ID_LISTEN;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &e);
    e.data.u64 = ID_TIMER;
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e);
    e.data.u64 = ID_SIGNAL;
    epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &e);

    const char *lb = strchr(cfg.host, ':') ? "[" : "", *rb = *lb ? "]" : "";
    printf("READY http://%s%s%s:%d\n", lb, cfg.host, rb, port);
    fflush(stdout);
    fprintf(stderr, "%s listening on %s%s%s:%d (model '%s', ttft %g ms, itl %g ms, tokens/chunk %ld-%ld, seed %lld)\n",
            SERVER_NAME, lb, cfg.host, rb, port, cfg.model, cfg.ttft_ms, cfg.itl_ms, cfg.tpc_min, cfg.tpc_max,
            cfg.seed);

    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        /* Sleep until the next due time, or only poll for input when it is already due (behind
         * schedule) or within --spin-us: then the timer is not touched at all. */
        int timeout = -1;
        int64_t spin_from = 0;
        bool sleep = true;
        if (hn) {
            int64_t want = heap[0]->due, now = now_ns();
            if (want - now <= spin_ns) timeout = 0, sleep = false, spin_from = want > now ? now : 0;
            else if (want != armed || timer_fired) timer_arm(want);
        }
        if (timer_fired && (!sleep || !hn)) { /* an expiry no settime clears: read it, or epoll reports
                                                  the timerfd on every call */
            uint64_t ticks;
            if (read(tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN) die("timerfd read: %s", strerror(errno));
            timer_fired = false;
        }
        int n = epoll_wait(ep, evs, MAX_EVENTS, timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait: %s", strerror(errno));
        }
        if (spin_from && n == 0) spin_idle_ns += now_ns() - spin_from; /* a poll that found nothing */
        for (int i = 0; i < n; i++)
            if (evs[i].data.u64 == ID_TIMER) timer_fired = true, armed = 0;
        run_timers(); /* due chunks first: they are never held up by parsing this wake-up's requests */
        for (int i = 0; i < n; i++) {
            uint64_t id = evs[i].data.u64;
            if (id == ID_TIMER) continue;
            if (id == ID_LISTEN) {
                on_accept();
                continue;
            }
            if (id == ID_SIGNAL) {
                close(lfd);
                return 0;
            }
            int fd = (int)(uint32_t)id;
            conn *c = fd < nslots ? slots[fd] : NULL;
            if (!c || c->fd != fd || c->tag != (uint32_t)(id >> 32)) continue; /* for a closed connection */
            uint32_t re = evs[i].events;
            if (re & (EPOLLERR | EPOLLHUP)) {
                close_conn(c);
                continue;
            }
            if (re & EPOLLOUT) flush_out(c);
            if ((re & EPOLLIN) && c->fd >= 0) on_readable(c);
        }
    }
}
