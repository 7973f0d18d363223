#!/bin/sh
# Build fuzz_http_sse with libFuzzer + ASan + UBSan and run it for N seconds (default 60).
#   fuzz/run.sh [SECONDS] [extra libFuzzer flags...]
# Without clang's libFuzzer, FB_FUZZ_CC=gcc builds the plain driver instead and just replays
# the seeds and the corpus under the sanitizers.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
SECONDS_TO_RUN=${1:-60}
[ $# -gt 0 ] && shift
OUT=${FB_FUZZ_OUT:-$HERE/build}
CORPUS=$HERE/corpus
mkdir -p "$OUT" "$CORPUS"
SRC="$HERE/fuzz_http_sse.c $ROOT/csrc/fb_http.c $ROOT/csrc/fb_sse.c $ROOT/csrc/fb_json.c"
CFLAGS="-std=c99 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -I$ROOT/csrc"
if [ "${FB_FUZZ_CC:-clang}" = gcc ]; then
    # shellcheck disable=SC2086
    gcc $CFLAGS -DFB_FUZZ_STANDALONE -fsanitize=address,undefined -fno-sanitize-recover=all $SRC -o "$OUT/fuzz_http_sse_driver"
    exec "$OUT/fuzz_http_sse_driver" "$HERE"/seeds/* $(find "$CORPUS" -type f)
fi
# shellcheck disable=SC2086
clang $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $SRC -o "$OUT/fuzz_http_sse"
exec "$OUT/fuzz_http_sse" -max_total_time="$SECONDS_TO_RUN" -max_len=16384 -print_final_stats=1 \
    -dict="$HERE/http_sse.dict" -artifact_prefix="$OUT/" "$@" "$CORPUS" "$HERE/seeds"
