/* fb_gaps.h: a coarse histogram of chunk gaps, for choosing the coalescing tick (RunState's
 * automatic coalescing). Eight sub-buckets per power of two: a bucket's values lie within 12.5 %
 * of its lower bound, enough to set a tick at a share of the short gaps; it costs one clz and
 * one increment per output event. */
#ifndef FB_GAPS_H
#define FB_GAPS_H
#include <stdint.h>

#define FB_GAP_SUB_BITS 3
#define FB_GAP_BUCKETS (64 << FB_GAP_SUB_BITS)

/* The bucket of a gap of ns > 0: values below 8 ns have buckets of their own. */
static inline int fb_gap_bucket(int64_t ns) {
    uint64_t v = (uint64_t)ns;
    int e;
    if (v < (1u << FB_GAP_SUB_BITS)) return (int)v;
    e = 63 - __builtin_clzll(v);  /* floor(log2 v) >= FB_GAP_SUB_BITS */
    return ((e - FB_GAP_SUB_BITS + 1) << FB_GAP_SUB_BITS) + (int)((v >> (e - FB_GAP_SUB_BITS)) & ((1u << FB_GAP_SUB_BITS) - 1));
}

/* The least gap of bucket b (the inverse of fb_gap_bucket at a bucket's start). */
static inline int64_t fb_gap_bucket_low(int b) {
    int e;
    if (b < (1 << FB_GAP_SUB_BITS)) return b;
    e = (b >> FB_GAP_SUB_BITS) + FB_GAP_SUB_BITS - 1;
    return (int64_t)(((uint64_t)(1u << FB_GAP_SUB_BITS) + (uint64_t)(b & ((1 << FB_GAP_SUB_BITS) - 1)))
                     << (e - FB_GAP_SUB_BITS));
}
#endif
