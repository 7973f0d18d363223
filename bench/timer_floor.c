/* timer_floor.c: how late any client on this host gets to an arrival, when it has nothing else to do.
 *
 * The open loop's targets (dispatch lag p99 <= 0.05 ms, max <= 0.5 ms) judge fastbench's sends; this is the
 * yardstick beside it. It waits for Poisson arrivals at RATE per second the way fastbench's core does
 * (a timerfd in an epoll set, armed LEAD_US before the arrival, the rest spun on CLOCK_MONOTONIC) and
 * records how late it got to each one: no sockets, no parsing, no other work. What it sees is the host's:
 * timer wake-up delay, preemption, and the stalls of a virtual machine.
 *
 *   timer_floor RATE SECONDS LEAD_US [SEED]
 *
 * Prints one JSON line: arrivals, lateness p50 / p99 / p99.5 / p99.9 / max in ms, the share later than 0.1 ms,
 * and how long the loop spun in total.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double quantile_ms(const int64_t *sorted, long n, double q) {
    long i = (long)ceil(q * (double)n) - 1;
    return sorted[i < 0 ? 0 : i] / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: timer_floor RATE SECONDS LEAD_US [SEED]\n");
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    int64_t lead_ns = (int64_t)atol(argv[3]) * 1000;
    unsigned seed = argc > 4 ? (unsigned)atoi(argv[4]) : 1;
    long capacity = (long)(rate * seconds * 2) + 16, n = 0;
    int64_t *late = malloc((size_t)capacity * sizeof(*late));
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN}, ready;
    if (rate <= 0 || seconds <= 0 || late == NULL || tfd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev)) {
        perror("timer_floor");
        return 1;
    }
    srand48(seed);
    int64_t start = now_ns() + 100000000, end = start + (int64_t)(seconds * 1e9), due = start, spun = 0;
    while (n < capacity) {
        due += (int64_t)(-log(1.0 - drand48()) / rate * 1e9);  /* exponential gaps: a Poisson process */
        if (due >= end)
            break;
        int64_t wake = due - lead_ns;
        struct itimerspec spec = {.it_value = {.tv_sec = wake / 1000000000, .tv_nsec = wake % 1000000000}};
        if (wake > now_ns()) {
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &spec, NULL);
            while (epoll_wait(ep, &ready, 1, -1) < 1) {
            }
            uint64_t expirations;
            if (read(tfd, &expirations, sizeof(expirations)) < 0) {
                /* a wake-up without an expiration: the spin below still waits for the arrival */
            }
        }
        int64_t t = now_ns(), spin_from = t;
        while (t < due)
            t = now_ns();
        spun += t - spin_from;
        late[n++] = t - due;
    }
    qsort(late, (size_t)n, sizeof(*late), by_value);
    long over = 0;
    for (long i = 0; i < n; i++)
        over += late[i] > 100000;
    printf("{\"rate\": %.1f, \"seconds\": %.1f, \"lead_us\": %lld, \"arrivals\": %ld, \"lag_p50\": %.4f, "
           "\"lag_p99\": %.4f, \"lag_p995\": %.4f, \"lag_p999\": %.4f, \"lag_max\": %.4f, \"late_share\": %.5f, \"spun_ms\": %.1f}\n",
           rate, seconds, (long long)(lead_ns / 1000), n, n ? quantile_ms(late, n, 0.5) : 0.0,
           n ? quantile_ms(late, n, 0.99) : 0.0, n ? quantile_ms(late, n, 0.995) : 0.0, n ? quantile_ms(late, n, 0.999) : 0.0,
           n ? late[n - 1] / 1e6 : 0.0, n ? (double)over / (double)n : 0.0, spun / 1e6);
    free(late);
    return 0;
}
