#!/usr/bin/env bash
# A local docker image (no registry) that runs a Python environment of this machine, for
# tests/server/test_realdocker.py: docker itself (Debian's docker.io, installed when missing; dockerd started
# in the background when no daemon answers), then `docker import` of a minimal root filesystem.
#
#   scripts/setup_docker_image.sh TAG VENV [DIR...]
#
# TAG   the image's name, e.g. fastbench-vllm-cpu:local
# VENV  a virtual environment; its bin/vllm (where it has one) is the image's ENTRYPOINT, with `serve`
# DIR   further directories whose extension modules must load in the image (e.g. fastbench's src/)
#
# The root filesystem holds only /bin/sh, lscpu and the shared libraries of this host that the venv's
# interpreter and every extension module under VENV, its base Python and the DIRs need (ldd's closure):
# tens of MB. VENV, its base Python and the DIRs themselves are not in it: mount them read-only at the same
# paths (the MOUNTS line says how), so the image is small and its interpreter is the one tested here.
# Idempotent: an image TAG built from the same inputs (a label holds their hash) is kept (~1 s).
# Prints IMAGE=<image id> and MOUNTS=<docker run -v flags>.
# Exit status: 0 ready; 3 this machine cannot run docker (no docker.io package, dockerd does not start), so
# the real-docker test skips; anything else is a failure.
set -euo pipefail

say() { printf 'setup_docker_image: %s\n' "$*" >&2; }
[[ $# -ge 2 ]] || { say "usage: $0 TAG VENV [DIR...]"; exit 2; }
TAG="$1"; VENV="$(cd "$2" && pwd)"; shift 2
DIRS=()
for d in "$@"; do DIRS+=("$(cd "$d" && pwd)"); done
DOCKERD_LOG="${FASTBENCH_DOCKERD_LOG:-/var/log/fastbench-dockerd.log}"

# -- docker: the client, then a daemon that answers
if ! command -v docker >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1; then
    say "installing docker.io (Debian's docker)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io) >/dev/null 2>&1 || {
      say "cannot install docker.io here (apt-get failed)"; exit 3; }
  fi
fi
if ! docker info >/dev/null 2>&1; then
  if [[ "$(id -u)" != 0 ]]; then say "no docker daemon answers and starting dockerd needs root"; exit 3; fi
  say "no docker daemon answers: starting dockerd in the background (log $DOCKERD_LOG)"
  setsid dockerd >"$DOCKERD_LOG" 2>&1 < /dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { say "dockerd did not start; its log's end:"; tail -5 "$DOCKERD_LOG" >&2; exit 3; }
fi

# -- the inputs and their hash
PYTHON="$VENV/bin/python3"
[[ -x "$PYTHON" ]] || { say "$VENV has no bin/python3"; exit 2; }
PREFIX="$("$PYTHON" -c 'import sys; print(sys.base_prefix)')"
ENTRY=()
[[ -x "$VENV/bin/vllm" ]] && ENTRY=("$VENV/bin/vllm" serve)
stamps="$(ls -d "$VENV"/.fastbench-* 2>/dev/null || true)"
inputs_hash="$(printf '%s\n' "$(readlink -f "$PYTHON")" "$PREFIX" "$VENV" "${DIRS[@]}" "${ENTRY[@]}" "$stamps" \
  "$(sha256sum "$0" | cut -c1-16)" | sha256sum | cut -c1-16)"
MOUNTS="-v $VENV:$VENV:ro -v $PREFIX:$PREFIX:ro"
for d in "${DIRS[@]}"; do MOUNTS+=" -v $d:$d:ro"; done

have="$(docker image inspect --format '{{index .Config.Labels "fastbench.inputs"}}' "$TAG" 2>/dev/null || true)"
if [[ "$have" == "$inputs_hash" ]]; then
  say "image $TAG is ready (inputs $inputs_hash)"
else
  t0=$SECONDS
  root="$(mktemp -d)"
  trap 'rm -rf "$root"' EXIT
  # every ELF the interpreter may load, and the libraries of the host they need (not those under the
  # mounted trees: they come with the mounts)
  {
    readlink -f "$PYTHON"; command -v sh; command -v lscpu
    find "$VENV" "$PREFIX" "${DIRS[@]}" -name '*.so*' -type f 2>/dev/null
  } | sort -u | while read -r elf; do ldd "$elf" 2>/dev/null || true; done \
    | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u > "$root.libs"
  mkdir -p "$root/tmp" "$root/etc" "$root/root" "$root/proc" "$root/sys" "$root/dev"
  chmod 1777 "$root/tmp"
  while read -r lib; do
    case "$lib" in "$VENV"/*|"$PREFIX"/*) continue ;; esac
    for d in "${DIRS[@]}"; do case "$lib" in "$d"/*) continue 2 ;; esac; done
    cp --parents -L "$lib" "$root/"
  done < "$root.libs"
  rm -f "$root.libs"
  mkdir -p "$root/bin" "$root/usr/bin"
  cp -L "$(command -v sh)" "$root/bin/sh"
  cp -L "$(command -v lscpu)" "$root/usr/bin/lscpu"  # vLLM's CPU backend reads the topology with it
  printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
  printf 'root:x:0:\nvideo:x:44:\n' > "$root/etc/group"
  changes=(--change "ENV PATH=$VENV/bin:/usr/bin:/bin" --change "ENV HOME=/root"
           --change "LABEL fastbench.inputs=$inputs_hash")
  if [[ ${#ENTRY[@]} -gt 0 ]]; then
    changes+=(--change "ENTRYPOINT [\"${ENTRY[0]}\", \"${ENTRY[1]}\"]")
  fi
  tar -C "$root" -c . | docker import "${changes[@]}" - "$TAG" >/dev/null
  say "built $TAG ($(du -sh "$root" | cut -f1) root filesystem) in $((SECONDS - t0)) s"
fi

echo "IMAGE=$(docker image inspect --format '{{.Id}}' "$TAG")"
echo "MOUNTS=$MOUNTS"
