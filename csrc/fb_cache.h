/* fb_cache.h: cache hints for the per-read path. */
#ifndef FB_CACHE_H
#define FB_CACHE_H
#include <stddef.h>
#include <stdint.h>

/* Ask for the cache lines of p[0..bytes) ahead of use (for writing; keep in all levels). A
 * connection's state goes cold while it waits for its next chunk; loading the next ready one's
 * while this one's read is in the kernel hides most of those misses. */
static inline void fb_prefetch(const void *p, size_t bytes) {
    uintptr_t line = (uintptr_t)p & ~(uintptr_t)63, end = (uintptr_t)p + bytes;
    for (; line < end; line += 64) __builtin_prefetch((const void *)line, 1, 3);
}
#endif
