/* fb_claim.h: one request table claimed by several processes (--workers on one machine).
 *
 * The parent shares one memory with every worker: a counter, the next row to claim, and per row the
 * worker that claimed it. Closed loop: a worker whose slot frees takes the next row with one atomic
 * add, as one process's slots take the next row of its table, so no worker runs out while another has
 * a queue. Open loop under a --concurrency cap: the counter is the next unsent arrival, beside the
 * run's count of requests in flight; a slot is taken with a compare-and-swap on that count only while
 * it is below the cap, an arrival with one on the counter only when it is due (docs/workers.md gives
 * the races this rules out). */
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

/* Open loop, shared cap: one slot of ``cap`` taken on the run's in-flight count, or 0 when all are
 * taken. Never incremented past the cap, even for a moment: a worker that frees a slot then always
 * sees the count below the cap, so it can send a due arrival held in any worker. Sequentially
 * consistent, as every access below: a freed slot's decrement is ordered before the freeing worker's
 * look at the due arrivals, and a held arrival's look at the count after its owner read the clock. */
static inline int fb_slot_take(int64_t *in_flight, int64_t cap) {
    int64_t held = __atomic_load_n(in_flight, __ATOMIC_SEQ_CST);
    while (held < cap) {
        if (__atomic_compare_exchange_n(in_flight, &held, held + 1, 1, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return 1;
    }
    return 0;
}

static inline void fb_slot_give(int64_t *in_flight) {
    __atomic_fetch_sub(in_flight, 1, __ATOMIC_SEQ_CST);
}

/* The next unsent arrival of the shared schedule. */
static inline int64_t fb_arrival_head(int64_t *next) {
    return __atomic_load_n(next, __ATOMIC_SEQ_CST);
}

/* Claim arrival ``row`` if it is still the next unsent one (the caller saw it due): 1 when this
 * process took it, 0 when another did first. A compare-and-swap, not an add: the counter never
 * passes an arrival that is not due yet. */
static inline int fb_arrival_claim(int64_t *next, int64_t row) {
    int64_t expected = row;
    return __atomic_compare_exchange_n(next, &expected, row + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}
#endif
