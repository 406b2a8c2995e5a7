#!/usr/bin/env bash
# Fetch Debian's cloud kernel flavour (linux-image-ABI-cloud-amd64, about 27 MB: no
# CONFIG_X86_MPPARSE, so it finds its CPUs only through ACPI) for the ABI of the newest
# /boot/vmlinuz-*, unpack it under OUT and index its modules (depmod -b), for
# tools/linux-initramfs.sh --kernel --modules and `make test-linux-cloud`.  Nothing is
# installed; a second run finds the unpacked tree and downloads nothing.
#
# Usage: tools/linux-cloud-kernel.sh [--out DIR]   (default $GFA_BUILD/cloud or build/cloud)
# The last line printed is "kernel=BZIMAGE modules=DIR".
# Exit status: 0; 77 when apt-get, dpkg-deb or depmod is missing or the package cannot be
# had (no network, no such ABI in the archive).
set -uo pipefail

out=${GFA_BUILD:-build}/cloud
say() { echo "linux-cloud-kernel: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }

while [ $# -gt 0 ]; do
	case $1 in
	--out) out=${2:?}; shift 2 ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
	*) say "error: unknown argument $1"; exit 1 ;;
	esac
done
for tool in apt-get dpkg-deb depmod; do
	command -v $tool >/dev/null || skip "$tool not found"
done
generic=$(printf '%s\n' /boot/vmlinuz-*-amd64 | sort -rV | head -1)
[ -r "$generic" ] || skip "no /boot/vmlinuz-*-amd64 to take the ABI from"
abi=${generic#/boot/vmlinuz-}
abi=${abi%-amd64}
release=$abi-cloud-amd64
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
root=$out/root
kernel=$root/boot/vmlinuz-$release
moddir=$root/lib/modules/$release
if [ ! -r "$kernel" ] || [ ! -r "$moddir/modules.dep" ]; then
	rm -f "$out"/linux-image-"$release"_*.deb
	(cd "$out" && apt-get download "linux-image-$release" >&2) ||
		skip "apt-get download linux-image-$release failed"
	for deb in "$out"/linux-image-"$release"_*.deb; do break; done
	[ -r "$deb" ] || skip "no package file for linux-image-$release"
	rm -rf "$root"
	dpkg-deb -x "$deb" "$root" || exit 1
	depmod -b "$root" "$release" || exit 1
	rm -f "$deb"
	say "unpacked $release under $root"
fi
echo "kernel=$kernel modules=$moddir"
