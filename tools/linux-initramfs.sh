#!/usr/bin/env bash
# Build what a Linux guest on gfa boots: the kernel's uncompressed vmlinux (for the PVH
# entry: no decompression) and an initramfs with a static busybox, the kernel's own
# virtio modules (virtio_pci and virtio_balloon with their dependencies) and the
# memory checker tests/linux/gfacheck.c.  Outputs are cached under OUT by a key of their
# inputs; the last line printed is "kernel=PATH initrd=PATH".
#
# Usage: tools/linux-initramfs.sh --checker BIN [--out DIR] [--kernel K] [--modules DIR]
#            [--module NAME]...
#   --kernel K     a bzImage (default: the newest /boot/vmlinuz-*) or a vmlinux; its
#                  version comes from the image itself, so any file name will do
#   --modules DIR  the kernel's module tree (default /lib/modules/VERSION), e.g. one
#                  unpacked from a downloaded package; it needs modules.dep (depmod -b)
#   --module NAME  one more module to load, with its dependencies (repeatable), e.g.
#                  virtio_blk for gfablk= below
# A bzImage's vmlinux is unpacked by the compressor's magic (xz, zstd, gzip, lz4); if
# none works, the script says so and boots the bzImage itself.
# Exit status: 0; 77 when busybox-static, cpio, the kernel or its modules are missing.
#
# The guest's /init prints "gfa-init up SECONDS" first (the host times the boot to it),
# loads the modules, lists the PCI and virtio devices with their drivers ("gfa-init: dev
# pci/devices/0000:00:01.0 0x1af4 0x1002 driver virtio-pci"), runs "gfacheck OPTS MIB
# PASSES" with gfacheck=MIB,PASSES (default 16,1) and gfacheck_opts=OPT,ARG,.. from the
# kernel command line, prints "gfa-init: checker exit N" and resets the VM.  With
# gfablk=MIB,ROUNDS (and a /dev/vda: --module virtio_blk) it first writes MIB MiB of random
# data to the disk ROUNDS times, each read back after dropping the caches and compared by
# checksum: "gfa-init: blk start", then "gfa-init: blk rounds N mismatches M".
set -uo pipefail

out=${GFA_BUILD:-build}/linux
kernel=
moddir=
checker=
extra=()
say() { echo "linux-initramfs: $*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "error: $*"; exit 1; }

while [ $# -gt 0 ]; do
	case $1 in
	--out) out=${2:?}; shift 2 ;;
	--kernel) kernel=${2:?}; shift 2 ;;
	--modules) moddir=${2:?}; shift 2 ;;
	--checker) checker=${2:?}; shift 2 ;;
	--module) extra+=("${2:?}"); shift 2 ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//' >&2; exit 2 ;;
	*) die "unknown argument $1" ;;
	esac
done
[ -n "$checker" ] && [ -x "$checker" ] || die "--checker BIN: no executable checker"
for tool in cpio gzip modprobe; do
	command -v $tool >/dev/null || skip "$tool not found"
done
busybox=
for b in /bin/busybox /usr/bin/busybox; do
	if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || skip "no static busybox (Debian package busybox-static)"
if [ -z "$kernel" ]; then
	kernel=$(printf '%s\n' /boot/vmlinuz-* | sort -rV | head -1)
fi
[ -r "$kernel" ] || skip "no readable kernel ${kernel:-/boot/vmlinuz-*} (Debian package linux-image-amd64)"
is_elf() { [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }
# The kernel's release, as uname -r gives it: a bzImage's setup header points at its
# version string (kernel_version, offset 0x20e, relative to 0x200); a vmlinux holds
# the banner "Linux version RELEASE ...".
kernel_release() {
	local ptr
	if is_elf "$1"; then
		LC_ALL=C grep -aom1 'Linux version [^ ]*' "$1" | cut -d' ' -f3
		return
	fi
	[ "$(dd if="$1" bs=1 skip=514 count=4 2>/dev/null)" = HdrS ] || return 0
	ptr=$(od -An -tu2 -j 526 -N 2 "$1" | tr -d ' ')
	[ -n "$ptr" ] && [ "$ptr" -gt 0 ] || return 0
	dd if="$1" bs=1 skip=$((512 + ptr)) count=128 2>/dev/null | tr '\0' '\n' | head -1 |
		cut -d' ' -f1
}
kver=$(kernel_release "$kernel")
[ -n "$kver" ] || die "$kernel: neither a bzImage nor a vmlinux with a version string"
moddir=${moddir:-/lib/modules/$kver}
[ -f "$moddir/modules.dep" ] ||
	skip "no modules for $kernel (version $kver): no $moddir/modules.dep (install the kernel's package, or pass --modules DIR of a tree made with depmod -b)"
mkdir -p "$out" || die "cannot create $out"

# vmlinux: the ELF inside the bzImage, found by its compressor's magic (lz4: the
# legacy frame the kernel's own build writes).
vmlinux=$out/vmlinux-$kver-$(stat -c '%s-%Y' "$kernel")
if is_elf "$kernel"; then
	vmlinux=$kernel
elif [ ! -s "$vmlinux" ]; then
	tmp=$vmlinux.tmp.$$
	for pair in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08\x00' \
		'lz4:\x02\x21\x4c\x18'; do
		tool=${pair%%:*}
		command -v "$tool" >/dev/null || continue
		for off in $(LC_ALL=C grep -obUaP "${pair#*:}" "$kernel" 2>/dev/null | cut -d: -f1 | head -3); do
			tail -c +$((off + 1)) "$kernel" | "$tool" -dc 2>/dev/null >"$tmp"
			if [ "$(head -c 4 "$tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
				mv -f "$tmp" "$vmlinux"
				break 2
			fi
		done
	done
	rm -f "$tmp"
	# no vmlinux inside: boot the bzImage itself (64-bit entry)
	if [ ! -s "$vmlinux" ]; then
		say "note: found no vmlinux inside $kernel that xz, zstd, gzip or lz4 unpacks" \
			"(missing tool?): the bzImage boots itself, decompressing first"
		vmlinux=$kernel
	fi
fi

# modprobe -d takes the root above lib/modules/VERSION: a tree elsewhere gets a
# stand-in root of one symlink
moddirs=$out/moddirs
modroot=$moddirs/$kver-$(printf '%s' "$moddir" | sha256sum | cut -c1-8)
if [ "$moddir" = "/lib/modules/$kver" ]; then
	modroot=/
else
	mkdir -p "$modroot/lib/modules" || die "cannot create $modroot"
	ln -sfn "$(cd "$moddir" && pwd -P)" "$modroot/lib/modules/$kver"
fi
mods=$(modprobe -d "$modroot" -a -S "$kver" --show-depends virtio_pci virtio_balloon "${extra[@]}" 2>/dev/null |
	awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
[ -n "$mods" ] || skip "kernel $kver has no virtio_pci / virtio_balloon modules in $moddir"
key=$( { cat "$0" "$checker"; echo "$mods"; stat -c '%s %Y' "$busybox" $mods; } |
	sha256sum | cut -c1-12)
initrd=$out/initramfs-$kver-$key.cpio.gz
if [ ! -s "$initrd" ]; then
	stage=$(mktemp -d "$out/stage.XXXXXX") || die "mktemp failed"
	mkdir -p "$stage"/{bin,dev,proc,sys,modules}
	cp "$busybox" "$stage/bin/busybox"
	cp "$checker" "$stage/bin/gfacheck"
	i=0
	for m in $mods; do
		name=$(printf '%02d-%s.ko' $i "$(basename "${m%%.ko*}")")
		case $m in
		*.ko) cat "$m" ;;
		*.ko.xz) xz -dc "$m" ;;
		*.ko.zst) zstd -dc "$m" ;;
		*.ko.gz) gzip -dc "$m" ;;
		esac >"$stage/modules/$name" || { rm -rf "$stage"; skip "cannot read $m"; }
		echo "$name" >>"$stage/modules/order"
		i=$((i + 1))
	done
	cat >"$stage/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
read up _ </proc/uptime
echo "gfa-init up $up"
/bin/busybox --install -s /bin
export PATH=/bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do
	insmod "/modules/$m" || echo "gfa-init: insmod $m failed"
done
# what the kernel found on PCI and which drivers took it (no lspci in busybox's set here)
for d in /sys/bus/pci/devices/* /sys/bus/virtio/devices/*; do
	[ -e "$d" ] || continue
	drv=none
	[ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
	echo "gfa-init: dev ${d#/sys/bus/} $(cat "$d/vendor") $(cat "$d/device") driver $drv"
done
grep virtio /proc/interrupts | while read -r line; do echo "gfa-init: irq $line"; done
blk=$(sed -n 's/.*gfablk=\([0-9]*,[0-9]*\).*/\1/p' /proc/cmdline)
if [ -n "$blk" ] && [ -b /dev/vda ]; then
	i=0 bad=0
	echo "gfa-init: blk start"
	while [ $i -lt "${blk#*,}" ]; do
		dd if=/dev/urandom of=/blk.src bs=1M count="${blk%,*}" 2>/dev/null
		want=$(md5sum </blk.src)
		dd if=/blk.src of=/dev/vda bs=1M conv=fsync 2>/dev/null
		echo 3 >/proc/sys/vm/drop_caches
		got=$(dd if=/dev/vda bs=1M count="${blk%,*}" 2>/dev/null | md5sum)
		[ "$want" = "$got" ] || bad=$((bad + 1))
		i=$((i + 1))
	done
	rm -f /blk.src
	echo "gfa-init: blk rounds $i mismatches $bad"
fi
arg=$(sed -n 's/.*gfacheck=\([0-9]*,[0-9]*\).*/\1/p' /proc/cmdline)
arg=${arg:-16,1}
# gfacheck_opts=-i,200,-f,128: the checker's options, commas for spaces
opts=$(sed -n 's/.*gfacheck_opts=\([^ ]*\).*/\1/p' /proc/cmdline | tr , ' ')
gfacheck $opts "${arg%,*}" "${arg#*,}"
echo "gfa-init: checker exit $?"
reboot -f
INIT
	chmod 755 "$stage/init"
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp.$$" ||
		{ rm -rf "$stage" "$initrd.tmp.$$"; die "cpio failed"; }
	mv -f "$initrd.tmp.$$" "$initrd"
	rm -rf "$stage"
	# images from other inputs are stale now (an hour's grace for runs still using one)
	find "$out" -maxdepth 1 -name "initramfs-$kver-*.cpio.gz" ! -name "${initrd##*/}" \
		-mmin +60 -delete 2>/dev/null
fi
echo "kernel=$vmlinux initrd=$initrd"
