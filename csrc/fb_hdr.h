/* fb_hdr.h: HdrHistogram bucket index arithmetic, so that C can count values straight into
 * an array laid out exactly as the `hdrh` package's HdrHistogram lays out its counts (and so
 * that its encoder and merge work on what we recorded). The layout parameters are read from
 * an hdrh instance at start-up, never recomputed here.
 *
 * Layout (HdrHistogram): bucket b covers values [2^(b+u) * H, 2^(b+u+1) * H) at a resolution
 * of 2^(b+u), H = sub_bucket_half_count, u = unit_magnitude; index 0..2H-1 is bucket 0. */
#ifndef FB_HDR_H
#define FB_HDR_H
#include <stdint.h>

typedef struct {
    int unit_magnitude;                   /* log2 of the lowest distinguishable value */
    int sub_bucket_half_count_magnitude;  /* log2(sub_bucket_half_count) */
    int64_t sub_bucket_half_count;        /* half the sub-buckets per bucket */
    int64_t sub_bucket_mask;              /* (sub_bucket_count - 1) << unit_magnitude */
    int64_t counts_len;                   /* entries in counts[] */
    int64_t highest_value;                /* values above are clamped to it (and counted as clamped) */
} fb_hdr_layout_t;

static inline int64_t fb_hdr_index(const fb_hdr_layout_t *l, int64_t value) {
    uint64_t v = (uint64_t)value | (uint64_t)l->sub_bucket_mask;  /* never 0, so clz is defined */
    int pow2ceiling = 64 - __builtin_clzll(v);
    int bucket = pow2ceiling - l->unit_magnitude - (l->sub_bucket_half_count_magnitude + 1);
    int64_t sub_bucket = value >> (bucket + l->unit_magnitude);
    return ((int64_t)(bucket + 1) << l->sub_bucket_half_count_magnitude)
           + (sub_bucket - l->sub_bucket_half_count);
}
#endif
