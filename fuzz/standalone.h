/* standalone.h: a plain main() for a libFuzzer harness built with -DFB_FUZZ_STANDALONE (no libFuzzer
 * needed, e.g. gcc -fsanitize=address,undefined): it runs each file named on the command line once.
 * Included last by each harness, after its LLVMFuzzerTestOneInput. */
#ifndef FB_FUZZ_STANDALONE_H
#define FB_FUZZ_STANDALONE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 1;
        }
        size_t cap = 1 << 16, n = 0;
        uint8_t *buf = malloc(cap);
        size_t got;
        while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
            n += got;
            if (n == cap) buf = realloc(buf, cap *= 2);
        }
        fclose(f);
        if (buf == NULL) return 1;
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    return 0;
}
#endif
