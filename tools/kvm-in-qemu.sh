#!/usr/bin/env bash
# Run a command inside a QEMU TCG guest that offers a real /dev/kvm.
#
# QEMU's software emulation (TCG) emulates AMD SVM, so the Debian kernel booted in it
# loads kvm + kvm-amd and programs using the KVM API run real (nested) guests there,
# on machines without /dev/kvm.  The host's root file system is shared read-only over
# virtio-9p and the command runs chrooted into it, so dynamically linked binaries
# from the host run unchanged.  See docs/decisions.md, entry 23.
#
# Usage: tools/kvm-in-qemu.sh [options] [--] command [args...]
#   --build DIR     cache the initramfs under DIR/qemu (default: $GFA_BUILD or build)
#   --dir DIR       working directory of the command (default: the current one);
#                   under /tmp, /run or /dev, which the guest replaces, it is
#                   shared on its own, as --rw does
#   --mem MIB       guest memory in MiB (default 1024)
#   --cpus N        guest vCPUs (default 1; see below)
#   --numa N        N NUMA nodes, memory split evenly, vCPUs in contiguous blocks
#   --env NAME[=VALUE]  pass a variable (value from this environment if omitted);
#                   repeatable.  GFA_* variables are passed anyway; GFA_IN_QEMU=1 is set.
#   --rw DIR        also share DIR read-write at the same path (repeatable)
#   --timeout SEC   kill the guest after SEC seconds (default 900); exit 124
#   --kernel PATH   kernel image (default: newest /boot/vmlinuz-* with its modules);
#                   unpacked once into DIR/qemu to boot through PVH when it can
#   --modules DIR   the kernel's module tree (default /lib/modules/VERSION); modules
#                   may be .ko, .ko.xz, .ko.zst or .ko.gz
#   --quiet         do not stream the guest console (it is printed on failure)
#   --keep          keep the run directory (console log, command script)
#   --no-lock       do not wait for other runs sharing the cache (default: one
#                   guest at a time, since TCG guests sharing few cores crawl)
#   -v, --verbose   print the QEMU command line and timings
#
# Exit status: the command's own exit status; 77 when QEMU, a kernel, its modules,
# a static busybox or cpio are missing (skip); 124 on timeout; 125 when the guest
# could not run the command (boot or mount failure, no exit status reported).
# Must run as root for the 9p share to expose every file (as on the build machines).
set -uo pipefail

readonly EXIT_SKIP=77 EXIT_TIMEOUT=124 EXIT_HARNESS=125
readonly WANT_MODULES=(kvm-amd virtio_pci 9pnet_virtio 9p)

build=${GFA_BUILD:-build}
dir=$PWD
mem=1024
# One CPU by default: with two emulated CPUs, nested KVM guests that come and go hang
# now and then (both CPUs stuck in finish_task_switch, seen in 3 of 4 boots that
# created VMs repeatedly; never in 240 VM lives with one CPU).  --cpus 2 when needed.
cpus=1
numa=0
timeout_s=900
kernel=
moddir=
quiet=0
keep=0
lock=1
verbose=0
envs=()
rw_dirs=()

say() { echo "kvm-in-qemu: $*" >&2; }
skip() { say "SKIP: $*"; exit $EXIT_SKIP; }
die() { say "error: $*"; exit $EXIT_HARNESS; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '/^set -uo/d' -e 's/^# \{0,1\}//' >&2; exit 2; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }

while [ $# -gt 0 ]; do
	case $1 in
	--build) build=${2:?}; shift 2 ;;
	--dir) dir=${2:?}; shift 2 ;;
	--mem) mem=${2:?}; shift 2 ;;
	--cpus) cpus=${2:?}; shift 2 ;;
	--numa) numa=${2:?}; shift 2 ;;
	--env) envs+=("${2:?}"); shift 2 ;;
	--rw) rw_dirs+=("${2:?}"); shift 2 ;;
	--timeout) timeout_s=${2:?}; shift 2 ;;
	--kernel) kernel=${2:?}; shift 2 ;;
	--modules) moddir=${2:?}; shift 2 ;;
	--quiet) quiet=1; shift ;;
	--keep) keep=1; shift ;;
	--no-lock) lock=0; shift ;;
	-v|--verbose) verbose=1; shift ;;
	-h|--help) usage ;;
	--) shift; break ;;
	-*) say "unknown option $1"; usage ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || usage
for n in "$mem" "$cpus" "$numa" "$timeout_s"; do
	is_uint "$n" || die "not a number: $n"
done
if [ "$cpus" -lt 1 ] || [ "$mem" -lt 256 ]; then
	die "need --cpus >= 1 and --mem >= 256"
fi
if [ "$numa" -gt 0 ] && [ $((mem % numa)) -ne 0 ]; then
	die "--mem $mem does not split evenly over $numa NUMA nodes"
fi
[ -d "$dir" ] || die "no such directory: $dir"
dir=$(cd "$dir" && pwd -P)

# ---- prerequisites: a missing one means "skip", with the reason -------------------
qemu=${QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || skip "$qemu not found (Debian package qemu-system-x86)"
for tool in cpio gzip timeout; do
	command -v $tool >/dev/null || skip "$tool not found"
done
busybox=
for b in /bin/busybox /usr/bin/busybox; do
	# Only a static busybox runs in an initramfs without libraries.
	if [ -x "$b" ] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi
done
[ -n "$busybox" ] || skip "no static busybox (Debian package busybox-static)"

modules_dir() { echo "/lib/modules/$1"; }
if [ -z "$kernel" ]; then
	for k in $(printf '%s\n' /boot/vmlinuz-* | sort -rV); do
		if [ -r "$k" ] && [ -f "$(modules_dir "${k#/boot/vmlinuz-}")/modules.dep" ]; then
			kernel=$k
			break
		fi
	done
	[ -n "$kernel" ] || skip "no readable /boot/vmlinuz-* with modules in /lib/modules (Debian package linux-image-amd64)"
fi
[ -r "$kernel" ] || skip "cannot read kernel $kernel"
kver=$(basename "$kernel")
kver=${kver#vmlinuz-}
moddir=${moddir:-$(modules_dir "$kver")}
[ -f "$moddir/modules.dep" ] || skip "no modules for kernel $kver in $moddir"
[ "$(id -u)" = 0 ] || say "warning: not root; the 9p share shows only what $(id -un) may read"

# ---- the initramfs: busybox, the modules in load order, /init ---------------------
cat_module() {	# decompress a module: busybox insmod reads only plain .ko
	case $1 in
	*.ko) cat "$1" ;;
	*.ko.xz) xz -dc "$1" ;;
	*.ko.zst) zstd -dc "$1" ;;
	*.ko.gz) gzip -dc "$1" ;;
	*) return 1 ;;
	esac
}

declare -A mod_deps=() mod_path=() builtin=() visited=()
load_order=()

read_module_db() {
	local line path name
	while IFS= read -r line; do
		path=${line%%:*}
		mod_deps[$path]=${line#*:}
		name=${path##*/}
		name=${name%%.ko*}
		mod_path[${name//-/_}]=$path
	done <"$moddir/modules.dep"
	if [ -f "$moddir/modules.builtin" ]; then
		while IFS= read -r line; do
			name=${line##*/}
			name=${name%%.ko*}
			builtin[${name//-/_}]=1
		done <"$moddir/modules.builtin"
	fi
}

# Depth first: a module's dependencies load before it.
visit_module() {
	local path=$1 dep
	[ -z "${visited[$path]:-}" ] || return 0
	visited[$path]=1
	for dep in ${mod_deps[$path]}; do
		visit_module "$dep"
	done
	load_order+=("$path")
}

make_init() {
	cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
say() { echo "kvm-in-qemu(guest): $*"; }
finish() {
	echo "GFA-KVM-IN-QEMU-EXIT=$1"
	sync
	poweroff -f
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
up=$(cut -d' ' -f1 /proc/uptime)
for m in $(cat /modules/order); do
	insmod "/modules/$m" || say "insmod $m failed"
done
[ -c /dev/kvm ] || say "warning: no /dev/kvm after loading modules"
run=$(sed -n 's/.*gfarun=\([^ ]*\).*/\1/p' /proc/cmdline)
nrw=$(sed -n 's/.*gfarw=\([0-9]*\).*/\1/p' /proc/cmdline)
opts=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $opts,ro hostroot /mnt || { say "cannot mount the host root"; finish 125; }
mount -t proc proc /mnt/proc
mount -t sysfs sysfs /mnt/sys
mount -t devtmpfs devtmpfs /mnt/dev
mkdir -p /mnt/dev/shm /mnt/dev/pts
mount -t tmpfs tmpfs /mnt/dev/shm
mount -t devpts devpts /mnt/dev/pts
mount -t tmpfs tmpfs /mnt/tmp
mount -t tmpfs tmpfs /mnt/run
mkdir -p "/mnt$run" 2>/dev/null
mount -t 9p -o $opts rw "/mnt$run" || { say "cannot mount the run directory"; finish 125; }
i=0
while [ "$i" -lt "${nrw:-0}" ]; do
	p=$(cat "/mnt$run/rw$i")
	mkdir -p "/mnt$p" 2>/dev/null
	mount -t 9p -o $opts "rw$i" "/mnt$p" || say "cannot mount rw share $p"
	i=$((i + 1))
done
say "booted in ${up}s, running the command"
chroot /mnt /bin/bash "$run/cmd.sh"
rc=$?
echo "$rc" >"/mnt$run/exit-code"
finish "$rc"
INIT
}

build_initramfs() {
	local out=$1 stage path name i=0
	read_module_db
	for name in "${WANT_MODULES[@]}"; do
		name=${name//-/_}
		if [ -n "${mod_path[$name]:-}" ]; then
			visit_module "${mod_path[$name]}"
		elif [ -z "${builtin[$name]:-}" ]; then
			skip "kernel $kver has no module $name"
		fi
	done
	stage=$(mktemp -d "$cache/stage.XXXXXX") || die "mktemp failed"
	mkdir -p "$stage"/{bin,dev,proc,sys,mnt,modules}
	cp "$busybox" "$stage/bin/busybox"
	ln -s busybox "$stage/bin/sh"
	for path in "${load_order[@]}"; do
		name=$(basename "$path")
		name=$(printf '%02d-%s.ko' $i "${name%%.ko*}")
		cat_module "$moddir/$path" >"$stage/modules/$name" ||
			{ rm -rf "$stage"; skip "cannot decompress $moddir/$path"; }
		echo "$name" >>"$stage/modules/order"
		i=$((i + 1))
	done
	make_init >"$stage/init"
	chmod 755 "$stage/init"
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp.$$" ||
		{ rm -rf "$stage" "$out.tmp.$$"; die "cpio failed"; }
	mv -f "$out.tmp.$$" "$out"	# atomic: parallel runs may build the same one
	rm -rf "$stage"
	# Images from older versions of this script are stale now.
	find "$cache" -maxdepth 1 -name "initramfs-$kver-*.cpio.gz" ! -name "${out##*/}" \
		-mmin +60 -delete 2>/dev/null
}

# An uncompressed vmlinux boots through its PVH entry point: that saves the ~3 s the
# bzImage spends decompressing itself under TCG.  Prints its path, or nothing if the
# kernel has no PVH entry (CONFIG_PVH) or cannot be unpacked; then the bzImage boots.
pvh_kernel() {
	local out tmp pair tool magic off
	out=$cache/vmlinux-$kver-$(stat -c '%s-%Y' "$kernel")
	if [ -s "$out" ]; then echo "$out"; return 0; fi
	grep -qs '^CONFIG_PVH=y' "/boot/config-$kver" || return 0
	tmp=$out.tmp.$$
	for pair in 'xz:\xfd7zXZ\x00' 'zstd:\x28\xb5\x2f\xfd' 'gzip:\x1f\x8b\x08\x00'; do
		tool=${pair%%:*}
		magic=${pair#*:}
		command -v "$tool" >/dev/null || continue
		for off in $(LC_ALL=C grep -obUaP "$magic" "$kernel" 2>/dev/null | cut -d: -f1 | head -3); do
			tail -c +$((off + 1)) "$kernel" | "$tool" -dc 2>/dev/null >"$tmp"
			if [ "$(head -c 4 "$tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; then
				find "$cache" -maxdepth 1 -name "vmlinux-$kver-*" ! -name "${out##*/}*" -delete
				mv -f "$tmp" "$out" && echo "$out"
				return 0
			fi
		done
	done
	rm -f "$tmp"
}

mkdir -p "$build" || die "cannot create $build"
build=$(cd "$build" && pwd -P)
cache=$build/qemu
mkdir -p "$cache" || die "cannot create $cache"
key=$( { cat "$0"; echo "$moddir"; stat -c '%s %Y' "$busybox" "$moddir/modules.dep"; } |
	sha256sum | cut -c1-12)
initrd=$cache/initramfs-$kver-$key.cpio.gz
t0=$(date +%s.%N)
# Parallel runs sharing the cache prepare it one at a time.
if command -v flock >/dev/null; then
	exec 8>"$cache/prepare.lock"
	flock 8
fi
[ -s "$initrd" ] || build_initramfs "$initrd"
boot_kernel=$(pvh_kernel)
boot_kernel=${boot_kernel:-$kernel}
exec 8>&-
t1=$(date +%s.%N)

# ---- the run directory: command script in, exit code out --------------------------
# Kernel arguments cannot hold spaces, and the guest mounts a fresh tmpfs on /tmp.
run=$(mktemp -d "$cache/run.XXXXXX" 2>/dev/null)
if [ -z "$run" ] || [[ $run == *[[:space:]]* || $run == /tmp/* ]]; then
	[ -n "$run" ] && rmdir "$run"
	run=$(mktemp -d /var/tmp/gfa-kvm-in-qemu.XXXXXX) || die "mktemp failed"
fi
# The guest mounts its own /tmp, /run, /dev and /dev/shm: a directory under one of
# them is shared on its own, at the same path (--dir, and every --rw below).
replaced() { case $1 in /tmp/*|/run/*|/dev/*) return 0 ;; esac; return 1; }
case $dir in
/tmp|/run|/dev|/dev/shm) die "--dir $dir: the guest replaces $dir with its own" ;;
esac
replaced "$dir" && rw_dirs+=("$dir")

{
	echo '#!/bin/bash'
	echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root'
	while IFS='=' read -r name _; do
		[ "$name" = GFA_IN_QEMU ] && continue
		printf 'export %s=%q\n' "$name" "${!name}"
	done < <(env | grep -E '^GFA_[A-Za-z0-9_]*=' || true)
	for e in "${envs[@]}"; do
		name=${e%%=*}
		[[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad --env $e"
		if [[ $e == *=* ]]; then
			printf 'export %s=%q\n' "$name" "${e#*=}"
		elif [ -n "${!name+x}" ]; then
			printf 'export %s=%q\n' "$name" "${!name}"
		fi
	done
	echo 'export GFA_IN_QEMU=1'
	printf 'cd %q || exit 125\n' "$dir"
	printf 'exec'
	printf ' %q' "$@"
	echo
} >"$run/cmd.sh"

numa_args=()
if [ "$numa" -gt 0 ]; then
	for ((i = 0; i < numa; i++)); do
		lo=$((i * cpus / numa))
		hi=$(((i + 1) * cpus / numa - 1))
		numa_args+=(-object "memory-backend-ram,id=mem$i,size=$((mem / numa))M")
		if [ "$hi" -ge "$lo" ]; then
			numa_args+=(-numa "node,nodeid=$i,memdev=mem$i,cpus=$lo-$hi")
		else
			numa_args+=(-numa "node,nodeid=$i,memdev=mem$i")
		fi
	done
fi
rw_args=()
resolved=()
for d in "${rw_dirs[@]}"; do
	r=$(cd "$d" 2>/dev/null && pwd -P) || die "no such directory: $d"
	[[ $r == *[[:space:]]* ]] && die "--rw $r: no spaces"
	resolved+=("$r")
done
# parents before their children: the guest mounts them in this order
mapfile -t rw_dirs < <(printf '%s\n' "${resolved[@]}" | grep . | LC_ALL=C sort -u)
for ((i = 0; i < ${#rw_dirs[@]}; i++)); do
	echo "${rw_dirs[$i]}" >"$run/rw$i"
	rw_args+=(-virtfs "local,path=${rw_dirs[$i]},mount_tag=rw$i,security_model=none,multidevs=remap")
done

# qboot starts a Linux kernel about a second sooner than SeaBIOS under TCG.
bios_args=()
for f in /usr/share/qemu/qboot.rom /usr/share/qboot/bios.bin; do
	if [ -r "$f" ]; then bios_args=(-bios "$f"); break; fi
done

# shellcheck disable=SC2054 # the commas are QEMU's
cmd=("$qemu" -accel tcg -cpu qemu64,+npt -m "$mem" -smp "$cpus" "${numa_args[@]}"
	"${bios_args[@]}" -nodefaults -no-user-config -display none -serial stdio -no-reboot
	-kernel "$boot_kernel" -initrd "$initrd"
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
	-virtfs "local,path=$run,mount_tag=rw,security_model=none,multidevs=remap"
	"${rw_args[@]}"
	-append "console=ttyS0 panic=-1 quiet loglevel=4 gfarun=$run gfarw=${#rw_dirs[@]}")
[ "$verbose" = 1 ] && say "$(printf '%q ' "${cmd[@]}")"

# ---- boot, stream the console, collect the exit code -----------------------------
# One guest at a time per cache: two TCG guests on a 2-core host slow each other
# down about four times (their vCPUs spin on each other's locks).
if [ "$lock" = 1 ] && command -v flock >/dev/null; then
	exec 9>"$cache/boot.lock"
	if ! flock -n 9; then
		say "waiting for another kvm-in-qemu run to finish"
		flock -w "$timeout_s" 9 || { say "timed out waiting for the lock"; exit $EXIT_TIMEOUT; }
	fi
fi
t1w=$(date +%s.%N)
log=$run/console.log
if [ "$quiet" = 1 ]; then
	timeout -k 10 "$timeout_s" "${cmd[@]}" </dev/null 2>&1 | sed -u 's/\r$//' >"$log"
else
	# sed -u: stream the console line by line, not in 4 KiB blocks.
	timeout -k 10 "$timeout_s" "${cmd[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$log"
fi
qrc=${PIPESTATUS[0]}
t2=$(date +%s.%N)

if [ -f "$run/exit-code" ]; then
	rc=$(cat "$run/exit-code")
elif grep -q '^GFA-KVM-IN-QEMU-EXIT=' "$log"; then
	rc=$(sed -n 's/^GFA-KVM-IN-QEMU-EXIT=\([0-9]*\).*/\1/p' "$log" | tail -1)
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	say "timed out after $timeout_s s"
	rc=$EXIT_TIMEOUT
else
	say "the guest reported no exit status (qemu exit $qrc)"
	rc=$EXIT_HARNESS
fi
is_uint "$rc" || rc=$EXIT_HARNESS
if [ "$rc" != 0 ] && [ "$quiet" = 1 ]; then
	say "console (last 40 lines):"
	tail -40 "$log" >&2
fi
timing=$(awk -v a="$t0" -v b="$t1" -v w="$t1w" -v c="$t2" \
	'BEGIN { printf "prepare %.1f s, waited %.1f s, boot+run %.1f s", b - a, w - b, c - w }')
say "exit $rc ($timing)"
if [ "$keep" = 1 ] || [ "$rc" = $EXIT_HARNESS ] || [ "$rc" = $EXIT_TIMEOUT ]; then
	say "run directory kept: $run"
else
	rm -rf "$run"
fi
exit "$rc"
