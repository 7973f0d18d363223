/* floor_client.c: the least a streaming client can do per chunk, as a yardstick for fastbench's CPU.
 *
 * It keeps N streams open against the synthetic server (closed loop, one request per stream at a
 * time, POST /v1/completions), reads every socket with recvmsg + SO_TIMESTAMPNS exactly as
 * fastbench's core does, counts token chunks and does nothing else: no HTTP/SSE/JSON parsing
 * beyond finding the chunks and the end of a response, no records. Its CPU per chunk is the
 * kernel's receive path plus a wake-up share: the floor any client on this machine pays.
 *
 *   floor_client PORT STREAMS SECONDS MODE [COALESCE_US] [OUTPUT_LEN]
 *   floor_client 0 0 SECONDS wake PERIOD_US
 *   MODE: epoll (epoll_wait + one recvmsg per ready socket)
 *         uring (io_uring multishot recvmsg into a provided-buffer ring; built only with liburing)
 *         wake (no streams: sleep in epoll_wait on a timerfd that fires every PERIOD_US, and
 *               report the CPU one wake-up costs by itself)
 *   COALESCE_US: sleep this long before each wait, so one wake-up finds more sockets ready
 *
 * Prints one JSON line: chunks/s, reads, wake-ups, CPU (user + system) per chunk over the window
 * (the first second is warm-up and not counted).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#ifdef FLOOR_URING
#include <liburing.h>
#endif

#define READ_BYTES 65536
#define WARMUP_S 1.0

typedef struct {
    int fd;
    char tail[5]; /* last bytes seen, to find the terminating chunk across reads */
} stream_t;

static char request[1024];
static int request_len;
static long reads, chunks, wakeups, stamped, requests;

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static int open_stream(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("connect");
        exit(2);
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    return fd;
}

static void send_request(stream_t *s) {
    ssize_t off = 0;
    while (off < request_len) { /* a request fits the empty send buffer; loop for form's sake */
        ssize_t n = send(s->fd, request + off, (size_t)(request_len - off), MSG_NOSIGNAL);
        if (n < 0 && errno != EINTR && errno != EAGAIN) {
            perror("send");
            exit(2);
        }
        if (n > 0) off += n;
    }
    requests++;
}

/* Count token chunks (events with a non-empty choices array) and send the next request when the
 * response's terminating chunk arrives. */
static void on_bytes(stream_t *s, const char *b, size_t n) {
    static const char mark[] = "\"choices\":[{";
    const char *p = b, *end = b + n;
    char joined[10];
    size_t keep = n < 5 ? n : 5;
    reads++;
    while ((p = memmem(p, (size_t)(end - p), mark, sizeof mark - 1)) != NULL) {
        chunks++;
        p += sizeof mark - 1;
    }
    memcpy(joined, s->tail, 5);
    memcpy(joined + 5, b + n - keep, keep);
    memcpy(s->tail, joined + keep, 5); /* the stream's last 5 bytes so far */
    if (memcmp(s->tail, "0\r\n\r\n", 5) == 0) {
        memset(s->tail, 0, 5);
        send_request(s);
    }
}

/* The window opens after a second of warm-up: counters and CPU are read then, and at the end. */
static double window_open_at, window_cpu0, window_t0;
static long window_reads0, window_chunks0, window_wakeups0, window_stamped0;
static int window_open;

static void maybe_open_window(void) {
    if (!window_open && mono_s() >= window_open_at) {
        window_open = 1;
        window_t0 = mono_s();
        window_cpu0 = cpu_s();
        window_reads0 = reads, window_chunks0 = chunks, window_wakeups0 = wakeups, window_stamped0 = stamped;
    }
}

static void pause_us(int us) {
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    if (us > 0) nanosleep(&t, NULL);
}

static void run_epoll(stream_t *st, int n, double until, int coalesce_us) {
    static char buf[READ_BYTES];
    struct epoll_event ready[1024];
    union { char raw[CMSG_SPACE(sizeof(struct timespec)) * 2]; struct cmsghdr align; } ctl;
    int ep = epoll_create1(0);
    for (int i = 0; i < n; i++) {
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = &st[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, st[i].fd, &e);
        send_request(&st[i]);
    }
    while (mono_s() < until) {
        maybe_open_window();
        pause_us(coalesce_us);
        int k = epoll_wait(ep, ready, 1024, 100);
        wakeups++;
        for (int j = 0; j < k; j++) {
            stream_t *s = ready[j].data.ptr;
            struct iovec iov = {buf, sizeof buf};
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.raw,
                               .msg_controllen = sizeof ctl.raw};
            ssize_t r = recvmsg(s->fd, &m, MSG_DONTWAIT);
            if (r <= 0) continue;
            if (m.msg_controllen) stamped++;
            on_bytes(s, buf, (size_t)r);
        }
    }
}

#ifdef FLOOR_URING
#define RING_BUFS 4096
#define RING_BUF_BYTES 4096
static void arm_recv(struct io_uring *ring, struct msghdr *mh, int i, int fd) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    io_uring_prep_recvmsg_multishot(sqe, fd, mh, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    sqe->user_data = (unsigned long long)i;
}

static void run_uring(stream_t *st, int n, double until, int coalesce_us) {
    struct io_uring ring;
    struct io_uring_params p = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                         IORING_SETUP_CQSIZE, .cq_entries = 8192};
    struct io_uring_buf_ring *br;
    struct msghdr mh = {.msg_controllen = CMSG_SPACE(sizeof(struct timespec))};
    char *bufs = malloc((size_t)RING_BUFS * RING_BUF_BYTES);
    if (io_uring_queue_init_params(1024, &ring, &p) < 0 || bufs == NULL ||
        posix_memalign((void **)&br, 4096, RING_BUFS * sizeof(struct io_uring_buf)) != 0) {
        fprintf(stderr, "io_uring setup failed\n");
        exit(2);
    }
    io_uring_buf_ring_init(br);
    struct io_uring_buf_reg reg = {.ring_addr = (unsigned long)br, .ring_entries = RING_BUFS, .bgid = 0};
    if (io_uring_register_buf_ring(&ring, &reg, 0) < 0) {
        fprintf(stderr, "io_uring buffer ring refused\n");
        exit(2);
    }
    for (int i = 0; i < RING_BUFS; i++)
        io_uring_buf_ring_add(br, bufs + (size_t)i * RING_BUF_BYTES, RING_BUF_BYTES, (unsigned short)i,
                              io_uring_buf_ring_mask(RING_BUFS), i);
    io_uring_buf_ring_advance(br, RING_BUFS);
    for (int i = 0; i < n; i++) arm_recv(&ring, &mh, i, st[i].fd);
    io_uring_submit(&ring);
    for (int i = 0; i < n; i++) send_request(&st[i]);
    while (mono_s() < until) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec wait = {0, 100000000};
        unsigned head, seen = 0;
        maybe_open_window();
        pause_us(coalesce_us);
        io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &wait, NULL);
        wakeups++;
        /* With DEFER_TASKRUN one wait runs at most ~20 queued receives (IO_LOCAL_TW_DEFAULT_MAX);
         * run the rest now, or the other sockets' data piles up until later waits. */
        for (unsigned before = 0; io_uring_cq_ready(&ring) > before;) {
            before = io_uring_cq_ready(&ring);
            io_uring_get_events(&ring);
        }
        io_uring_for_each_cqe(&ring, head, cqe) {
            int i = (int)cqe->user_data;
            seen++;
            if (cqe->res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
                unsigned short bid = (unsigned short)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
                char *b = bufs + (size_t)bid * RING_BUF_BYTES;
                struct io_uring_recvmsg_out *o = io_uring_recvmsg_validate(b, cqe->res, &mh);
                if (o != NULL) {
                    if (o->controllen) stamped++;
                    on_bytes(&st[i], io_uring_recvmsg_payload(o, &mh),
                             io_uring_recvmsg_payload_length(o, cqe->res, &mh));
                }
                io_uring_buf_ring_add(br, b, RING_BUF_BYTES, bid, io_uring_buf_ring_mask(RING_BUFS), 0);
                io_uring_buf_ring_advance(br, 1);
            }
            if (!(cqe->flags & IORING_CQE_F_MORE)) arm_recv(&ring, &mh, i, st[i].fd); /* ran out: re-arm */
        }
        io_uring_cq_advance(&ring, seen);
    }
}
#endif

/* The CPU cost of one wake-up by itself: a timerfd every period_us, nothing else to do. */
static int run_wake(double seconds, int period_us) {
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK), ep = epoll_create1(0);
    struct itimerspec every = {{period_us / 1000000, (long)(period_us % 1000000) * 1000},
                               {period_us / 1000000, (long)(period_us % 1000000) * 1000}};
    struct epoll_event ev = {.events = EPOLLIN}, out;
    if (tfd < 0 || ep < 0 || period_us <= 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev) != 0 ||
        timerfd_settime(tfd, 0, &every, NULL) != 0) {
        perror("wake");
        return 2;
    }
    double until = mono_s() + seconds, t0 = mono_s(), cpu0 = cpu_s();
    long n = 0;
    while (mono_s() < until) {
        if (epoll_wait(ep, &out, 1, -1) == 1) {
            uint64_t expirations;
            if (read(tfd, &expirations, sizeof expirations) == sizeof expirations) n++;
        }
    }
    double cpu = cpu_s() - cpu0;
    printf("{\"mode\": \"wake\", \"period_us\": %d, \"seconds\": %.3f, \"wakeups\": %ld, "
           "\"cpu_us_per_wakeup\": %.2f}\n", period_us, mono_s() - t0, n, n ? 1e6 * cpu / (double)n : 0.0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: floor_client PORT STREAMS SECONDS epoll|uring|wake [COALESCE_US] [OUTPUT_LEN]\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    double seconds = atof(argv[3]);
    const char *mode = argv[4];
    int coalesce_us = argc > 5 ? atoi(argv[5]) : 0, output_len = argc > 6 ? atoi(argv[6]) : 64;
    if (strcmp(mode, "wake") == 0) return run_wake(seconds, coalesce_us);
    char body[512];
    int body_len = snprintf(body, sizeof body,
                            "{\"model\":\"fastbench-synthetic\",\"prompt\":\"hi\",\"max_tokens\":%d,"
                            "\"stream\":true,\"ignore_eos\":true,\"stream_options\":{\"include_usage\":true,"
                            "\"continuous_usage_stats\":true}}", output_len);
    request_len = snprintf(request, sizeof request,
                           "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: %d\r\n\r\n%s", body_len, body);
    stream_t *st = calloc((size_t)n, sizeof *st);
    for (int i = 0; i < n; i++) st[i].fd = open_stream(port);

    int uring = strcmp(mode, "uring") == 0;
    double until;
    window_open_at = mono_s() + WARMUP_S;
    until = window_open_at + seconds;
    if (uring) {
#ifdef FLOOR_URING
        run_uring(st, n, until, coalesce_us);
#else
        fprintf(stderr, "floor_client: built without liburing; mode uring unavailable\n");
        return 3;
#endif
    } else {
        run_epoll(st, n, until, coalesce_us);
    }
    double wall = mono_s() - window_t0, cpu = cpu_s() - window_cpu0;
    long r = reads - window_reads0, c = chunks - window_chunks0, w = wakeups - window_wakeups0;
    printf("{\"mode\": \"%s\", \"streams\": %d, \"coalesce_us\": %d, \"seconds\": %.3f, \"chunks\": %ld, "
           "\"reads\": %ld, \"wakeups\": %ld, \"kernel_stamped_reads\": %ld, \"chunks_per_s\": %.1f, "
           "\"cpu_us_per_chunk\": %.3f, \"reads_per_wakeup\": %.2f, \"requests\": %ld}\n",
           mode, n, coalesce_us, wall, c, r, w, stamped - window_stamped0, c / wall, c ? 1e6 * cpu / (double)c : 0.0,
           w ? (double)r / (double)w : 0.0, requests);
    return 0;
}
