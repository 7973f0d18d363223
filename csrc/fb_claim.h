/* fb_claim.h: one request table claimed by several processes (--workers on one machine, closed loop).
 *
 * The parent shares one memory with every worker: a counter, the next row to claim, and per row the
 * worker that claimed it. A worker whose slot frees takes the next row with one atomic add, as one
 * process's slots take the next row of its table, so no worker runs out while another has a queue. */
#ifndef FB_CLAIM_H
#define FB_CLAIM_H
#include <stdint.h>

/* The next of n rows from the shared counter, or -1 when none is left. Relaxed order: an atomic
 * read-modify-write hands each value out exactly once whatever the order; what a row holds is read
 * by the parent only after the workers ended. The load first keeps an exhausted counter from
 * growing by one add per freed slot (a miss costs a shared cache line either way). */
static inline int64_t fb_claim_next(int64_t *next, int64_t n) {
    int64_t row;
    if (__atomic_load_n(next, __ATOMIC_RELAXED) >= n) return -1;
    row = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
    return row < n ? row : -1;
}

/* Record who claimed ``row`` (a worker's index + 1; 0 is unclaimed). Stored before the request is
 * sent: a process that is killed leaves every store it made in the shared pages, so the parent
 * knows exactly which rows a lost worker held. */
static inline void fb_claim_mark(int32_t *claimers, int64_t row, int32_t claimer) {
    __atomic_store_n(&claimers[row], claimer, __ATOMIC_RELAXED);
}
#endif
