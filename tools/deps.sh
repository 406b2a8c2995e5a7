#!/usr/bin/env bash
# Install the Debian packages gfa needs, when they are missing.
# Usage: tools/deps.sh [build|test|all]
#   build: libraries and headers to build libgfa, gfactl and the tests
#   test:  plus what the KVM-in-QEMU and plotting paths need
set -euo pipefail
what=${1:-build}
build_pkgs=(pkg-config gcc libc6-dev make libnuma-dev liburing-dev libvirt-dev libxml2-dev libjson-c-dev libcriterion-dev clang clang-format valgrind)
test_pkgs=(qemu-system-x86 linux-image-amd64 busybox-static cpio kmod gnuplot-nox numactl python3 libclang-rt-14-dev llvm)
pkgs=("${build_pkgs[@]}")
[ "$what" = build ] || pkgs+=("${test_pkgs[@]}")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing missing Debian packages: ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
stamp=/var/lib/apt/periodic/gfa-update-stamp
if [ ! -e "$stamp" ] || [ -n "$(find "$stamp" -mmin +360 2>/dev/null)" ]; then
  $SUDO apt-get update -qq >&2 && $SUDO mkdir -p "$(dirname $stamp)" && $SUDO touch "$stamp"
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
echo "deps: done" >&2
