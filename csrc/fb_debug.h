/* fb_debug.h: the build flavour. FB_DEBUG (setup.py defines it for the debug and ASan builds) turns
 * on the core's invariant checks and counters (src/fastbench/_core/debug.pyx); 0 drops them. */
#ifndef FB_DEBUG_H
#define FB_DEBUG_H
#include <stdio.h>
#include <stdlib.h>
#ifndef FB_DEBUG
#define FB_DEBUG 0
#endif
#ifndef FB_BUILD_FLAVOUR
#define FB_BUILD_FLAVOUR "release"
#endif

/* A broken invariant in a debug build: say which and abort, so the run stops there (with the
 * sanitizer's or the core dump's stack) instead of writing wrong figures. */
static inline void fb_debug_fail(const char *what) {
    fprintf(stderr, "fastbench core (%s build): invariant broken: %s\n", FB_BUILD_FLAVOUR, what);
    fflush(stderr);
    abort();
}
#endif
