/* fb_clock.h: the one clock for every fastbench process (CLOCK_MONOTONIC, ns). */
#ifndef FB_CLOCK_H
#define FB_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline int64_t fb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Kernel receive timestamps (SO_TIMESTAMPNS) are CLOCK_REALTIME. This offset, read at the
 * same moment as a kernel stamp is taken off the socket, maps it onto CLOCK_MONOTONIC:
 * mono = realtime_stamp - fb_realtime_offset_ns(). The core reads it once per wake-up, before
 * that wake-up's reads: a clock step (NTP) corrupts at most the reads of one wake-up. */
static inline int64_t fb_realtime_offset_ns(void) {
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    return ((int64_t)rt.tv_sec - (int64_t)mono.tv_sec) * 1000000000LL + (rt.tv_nsec - mono.tv_nsec);
}
#endif
