#ifndef FB_DEBUG_H
#define FB_DEBUG_H
#ifndef FB_DEBUG
#define FB_DEBUG 0
#endif
#ifndef FB_BUILD_FLAVOUR
#define FB_BUILD_FLAVOUR "release"
#endif
#endif
