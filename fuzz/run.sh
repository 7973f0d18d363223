#!/bin/sh
# Build the libFuzzer targets with ASan + UBSan and run each for N seconds (default 60):
#   fuzz_http_sse (csrc/fb_http.c -> fb_sse.c -> fb_json.c) and fuzz_trace (csrc/fb_trace.c).
#   fuzz/run.sh [SECONDS] [extra libFuzzer flags...]
# FB_FUZZ_TARGETS picks some ("http_sse trace" by default). Without clang's libFuzzer,
# FB_FUZZ_CC=gcc builds plain drivers instead and just replays the seeds and corpora under the sanitizers.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SECONDS_TO_RUN=${1:-60}
[ $# -gt 0 ] && shift
OUT=${FB_FUZZ_OUT:-$HERE/build}
CFLAGS="-std=c99 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -I$ROOT/csrc"
for target in ${FB_FUZZ_TARGETS:-http_sse trace}; do
    case $target in
        http_sse) SRC="$HERE/fuzz_http_sse.c $ROOT/csrc/fb_http.c $ROOT/csrc/fb_sse.c $ROOT/csrc/fb_json.c"
                  SEEDS=$HERE/seeds CORPUS=$HERE/corpus DICT="-dict=$HERE/http_sse.dict" ;;
        trace)    SRC="$HERE/fuzz_trace.c $ROOT/csrc/fb_trace.c"
                  SEEDS=$HERE/seeds_trace CORPUS=$HERE/corpus_trace DICT="-dict=$HERE/trace.dict" ;;
        *) echo "fuzz/run.sh: no target '$target' (http_sse, trace)" >&2; exit 2 ;;
    esac
    mkdir -p "$OUT" "$CORPUS"
    echo "== fuzz_$target"
    if [ "${FB_FUZZ_CC:-clang}" = gcc ]; then
        # shellcheck disable=SC2086
        gcc $CFLAGS -DFB_FUZZ_STANDALONE -fsanitize=address,undefined -fno-sanitize-recover=all $SRC -lm \
            -o "$OUT/fuzz_${target}_driver"
        # shellcheck disable=SC2046
        "$OUT/fuzz_${target}_driver" "$SEEDS"/* $(find "$CORPUS" -type f)
        continue
    fi
    # shellcheck disable=SC2086
    clang $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $SRC -lm -o "$OUT/fuzz_$target"
    "$OUT/fuzz_$target" -max_total_time="$SECONDS_TO_RUN" -max_len=16384 -print_final_stats=1 \
        "$DICT" -artifact_prefix="$OUT/" "$@" "$CORPUS" "$SEEDS"
done
