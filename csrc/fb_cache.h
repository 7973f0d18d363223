/* fb_cache.h: cache hints for the per-read path. */
#ifndef FB_CACHE_H
#define FB_CACHE_H
#include <stddef.h>

/* Ask for the cache lines of p[0..bytes) ahead of use (for writing; keep in all levels). A
 * connection's state goes cold while it waits for its next chunk; loading the next ready one's
 * while this one's read is in the kernel hides most of those misses. */
static inline void fb_prefetch(const void *p, size_t bytes) {
    const char *c = (const char *)p;
    for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 1, 3);
}
#endif
