// SPDX-License-Identifier: MIT
/*
 * kvmtool on gfa: lkvm patched with contrib/kvmtool/gfa.patch (`make kvmtool`), a VMM
 * nobody here wrote, booting Debian's kernel with the initramfs of
 * tools/linux-initramfs.sh on gfa memory (lkvm run --gfa).
 *
 * Suite "kvmtool_boot" runs where KVM boots Linux: inside the QEMU harness
 * (GFA_IN_QEMU=1), where a missing prerequisite is a failure.  It reads the guest's
 * console and the "gfa:" line the patched lkvm prints at exit (its guest's, reporter's
 * and pool's counters).  Suite "kvmtool_qemu" builds the initramfs and runs
 * kvmtool_boot in one QEMU guest (tools/kvm-in-qemu.sh).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/qemu_util.h"
#include "refvmm/kvmtool_util.h"
#include <gfa/refvmm.h>
#include <gfa/vmm.h>

#define KT_MIB       (1ULL << 20)
#define KT_BOOT_S    90.0 /* launch to /init, nested */
#define KT_SHMEM_THP "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

static const char *kt_kernel, *kt_initrd;
static char kt_lkvm[PATH_MAX + 32];

/* Fail inside QEMU, skip elsewhere, when lkvm cannot boot a guest here. */
static void kt_require(void)
{
	bool in_qemu = getenv("GFA_IN_QEMU") != NULL;
	char build[PATH_MAX];

	if (!in_qemu || access("/dev/kvm", R_OK | W_OK))
		cr_skip_test("runs inside the QEMU harness (kvmtool_qemu/in_qemu)");
	cr_assert(tu_build_dir(build, sizeof(build)));
	snprintf(kt_lkvm, sizeof(kt_lkvm), "%s/kvmtool/src/lkvm", build);
	cr_assert_eq(access(kt_lkvm, X_OK), 0, "%s: not built (make kvmtool)", kt_lkvm);
	kt_kernel = getenv("GFA_KT_KERNEL");
	kt_initrd = getenv("GFA_KT_INITRD");
	cr_assert(kt_kernel && kt_initrd && !access(kt_kernel, R_OK) && !access(kt_initrd, R_OK),
		  "GFA_KT_KERNEL / GFA_KT_INITRD not readable");
}

static void kt_expect(struct kt_vm *vm, const char *needle, size_t *off, double secs)
{
	double t = kt_wait(vm, needle, off, secs);

	if (t < 0) {
		kt_stop(vm, 10);
		cr_assert_fail("no \"%s\" within %.0f s: %s", needle, secs, kt_log(vm));
	}
	fprintf(stderr, "kvmtool: %s: \"%s\" after %.1f s\n", vm->name, needle, t);
}

static void kt_boot(struct kt_vm *vm, const char *env, unsigned int mib, const char *args,
		    const char *append, size_t *off)
{
	kt_require();
	cr_assert_eq(kt_start(vm, kt_lkvm, env, kt_kernel, kt_initrd, mib, args, append), 0);
	*off = 0;
	kt_expect(vm, "gfa-init up", off, KT_BOOT_S);
}

/* Stop the VM (if it runs) and check it printed its counters and no oops. */
static void kt_done(struct kt_vm *vm)
{
	int rc = kt_stop(vm, 60);
	const char *log = kt_log(vm);

	cr_assert_neq(rc, -1, "lkvm did not exit: %s", log);
	cr_assert_geq(kt_gfa_stat(vm, "moves"), 0, "no gfa: line at exit: %s", log);
	cr_assert_null(strstr(log, "BUG:"), "%s", log);
	cr_assert_null(strstr(log, "Oops"), "%s", log);
	cr_assert_null(strstr(log, "Call Trace"), "%s", log);
	fprintf(stderr, "kvmtool: %s exited after %.1f s\n", vm->name, kt_now() - vm->t0);
}

/* Inflate by 64 MiB, deflate by 32: gfa holds 32 MiB ballooned out at the end. */
Test(kvmtool_boot, the_balloon_inflates_and_deflates_through_gfa, .timeout = 150)
{
	struct kt_vm vm;
	size_t off;

	kt_boot(&vm, "", 256, "--gfa", "gfacheck=16,0 gfacheck_opts=-i,200", &off);
	kt_expect(&vm, "gfacheck: pass 1 mismatches 0", &off, 60);
	cr_assert_eq(kt_ipc(&vm, "balloon", "--inflate 64"), 0);
	kt_expect(&vm, "gfacheck: MemTotal 145352 kB", &off, 60);
	cr_assert_eq(kt_ipc(&vm, "balloon", "--deflate 32"), 0);
	kt_expect(&vm, "gfacheck: MemTotal 178120 kB", &off, 60);
	kt_expect(&vm, "mismatches 0", &off, 30);
	kt_done(&vm);
	cr_assert_eq(kt_gfa_stat(&vm, "ballooned_frames"), 32 * KT_MIB / 4096, "%s", kt_log(&vm));
	cr_assert_eq(kt_gfa_stat(&vm, "balloon_refused"), 0);
}

/*
 * The boot and the checker, then free page reporting: the guest's checker passes, touches
 * 192 MiB more and frees it; the guest reports the free pages and gfa gives their host
 * memory back, while the checker keeps verifying its own 16 MiB.
 */
Test(kvmtool_boot, boots_and_freed_memory_is_reported_and_leaves_the_host, .timeout = 150)
{
	long long before, after;
	struct kt_vm vm;
	size_t off;

	kt_boot(&vm, "", 512, "--gfa", "gfacheck=16,5 gfacheck_opts=-i,1500,-f,192", &off);
	kt_expect(&vm, "gfacheck: pass 1 mismatches 0", &off, 60);
	kt_expect(&vm, "gfacheck: allocated 192 MiB", &off, 60);
	before = kt_pss(vm.pid);
	kt_expect(&vm, "gfacheck: freed 192 MiB", &off, 30);
	sleep(5); /* the guest reports 2 s after the frees */
	after = kt_pss(vm.pid);
	kt_expect(&vm, "gfacheck: done passes 5 mismatches 0", &off, 60);
	kt_expect(&vm, "gfa-init: checker exit 0", &off, 10);
	cr_assert_eq(kt_finish(&vm, 30), 0, "%s", kt_log(&vm));
	kt_done(&vm);
	fprintf(stderr,
		"kvmtool: host memory %lld MiB with 192 MiB touched, %lld MiB after its "
		"free, %lld MiB reported\n",
		before >> 20, after >> 20, kt_gfa_stat(&vm, "reported_bytes") >> 20);
	cr_assert_geq(kt_gfa_stat(&vm, "reported_bytes"), (long long)(160 * KT_MIB), "%s",
		      kt_log(&vm));
	cr_assert_lt(after, before - (long long)(150 * KT_MIB), "host memory %lld -> %lld", before,
		     after);
	cr_assert_eq(kt_gfa_stat(&vm, "report_refused"), 0);
	cr_assert_eq(kt_gfa_stat(&vm, "ballooned_frames"), 0);
}

/*
 * Frames move (collapse of a guest backed by small blocks, and compaction) while the
 * guest writes and re-reads a checksummed 8 MiB on a virtio-blk disk, three times: the
 * device thread's reads and writes of guest RAM land, under write protection, no pause.
 */
/*
 * lkvm's report thread and its mover once deadlocked here (2 of 4 CI runs; lkvm never
 * exited): a collapse waited in the moved hook for a report run whose second lookup
 * waited for the guest's lock the collapse held.  tests/test_report.c has the case on
 * its own; here the moves run until the teardown.
 */
Test(kvmtool_boot, frames_move_under_virtio_blk_io_with_no_mismatch, .timeout = 200)
{
	const char *disk = KT_HOME "/kt-disk.img";
	char args[PATH_MAX + 64];
	struct kt_vm vm;
	size_t off;
	FILE *f;

	mkdir(KT_HOME, 0755);
	f = fopen(disk, "w");
	cr_assert_not_null(f);
	cr_assert_eq(ftruncate(fileno(f), 64 * KT_MIB), 0);
	fclose(f);
	snprintf(args, sizeof(args), "--gfa -d %s", disk);
	kt_boot(&vm, "GFA_KVMTOOL_SMALL=1 GFA_KVMTOOL_MOVE_MS=20", 256, args,
		"gfablk=8,3 gfacheck=16,1", &off);
	kt_expect(&vm, "gfa-init: blk start", &off, 30);
	kill(vm.pid, SIGUSR2);
	kt_expect(&vm, "gfa-init: blk rounds 3 mismatches 0", &off, 120);
	kt_expect(&vm, "gfa-init: checker exit 0", &off, 60);
	kt_done(&vm);
	unlink(disk);
	fprintf(stderr,
		"kvmtool: under I/O: moves %lld collapses %lld wp_moves %lld wp_faults "
		"%lld pauses %lld\n",
		kt_gfa_stat(&vm, "moves"), kt_gfa_stat(&vm, "collapses"),
		kt_gfa_stat(&vm, "wp_moves"), kt_gfa_stat(&vm, "wp_faults"),
		kt_gfa_stat(&vm, "pauses"));
	cr_assert_gt(kt_gfa_stat(&vm, "collapses"), 0, "%s", kt_log(&vm));
	cr_assert_eq(kt_gfa_stat(&vm, "pauses"), 0);
}

/*
 * The guest's first inflate list carries a pfn far beyond its RAM (GFA_KVMTOOL_BAD_PFN
 * puts it in the device model's place of the list's first entry): that range is refused
 * and counted, the rest ballooned, and the guest's memory stays intact.
 */
Test(kvmtool_boot, a_bad_balloon_page_list_is_refused_and_counted, .timeout = 150)
{
	struct kt_vm vm;
	size_t off;

	kt_boot(&vm, "GFA_KVMTOOL_BAD_PFN=0x10000000", 256, "--gfa",
		"gfacheck=16,0 gfacheck_opts=-i,200", &off);
	kt_expect(&vm, "gfacheck: pass 1 mismatches 0", &off, 60);
	cr_assert_eq(kt_ipc(&vm, "balloon", "--inflate 16"), 0);
	kt_expect(&vm, "gfacheck: MemTotal 194504 kB", &off, 60);
	kt_expect(&vm, "mismatches 0", &off, 30);
	kt_done(&vm);
	cr_assert_geq(kt_gfa_stat(&vm, "balloon_refused"), 1, "%s", kt_log(&vm));
	cr_assert_eq(kt_gfa_stat(&vm, "ballooned_frames"), 16 * KT_MIB / 4096 - 1, "%s",
		     kt_log(&vm));
}

/*
 * 3.5 GiB: RAM below the PCI hole (3.25 GiB from 0) and above it (256 MiB from 4 GiB),
 * one gfa guest of two regions in one window spanning the hole; the checker's 256 MiB
 * reach above 4 GiB only if the kernel hands them out, so it fills most of RAM.
 */
Test(kvmtool_boot, a_guest_across_the_pci_hole_boots, .timeout = 200)
{
	struct kt_vm vm;
	size_t off;

	if (gfa_host_mem_available() < 3900ULL * KT_MIB)
		cr_skip_test("%llu MiB available: a 3.5 GiB guest needs ~3.7 GiB",
			     (unsigned long long)gfa_host_mem_available() >> 20);
	kt_boot(&vm, "", 3584, "--gfa", "gfacheck=16,1", &off);
	kt_expect(&vm, "gfacheck: ram 0x100000000-0x10fffffff", &off, 60);
	kt_expect(&vm, "gfacheck: done passes 1 mismatches 0", &off, 60);
	kt_expect(&vm, "gfa-init: checker exit 0", &off, 10);
	cr_assert_eq(kt_finish(&vm, 60), 0, "%s", kt_log(&vm));
	kt_done(&vm);
}

/*
 * Two lkvm processes on one gfad host pool (lkvm run --gfa --gfa-pool SOCKET): each
 * leases its guest's RAM from the service (in small blocks), checks its memory while
 * its mover collapses them into blocks it leases for the purpose, reports the 64 MiB it
 * freed and inflates its balloon by 32 MiB; once both exited, every lease is back and
 * the service's pool checks clean.
 */
#define KT_GFAD_SOCK KT_HOME "/gfad.sock"

static pid_t kt_gfad_start(unsigned int mib)
{
	char build[PATH_MAX], gfad[PATH_MAX + 16], mem[16];
	pid_t pid;

	cr_assert(tu_build_dir(build, sizeof(build)));
	snprintf(gfad, sizeof(gfad), "%s/gfad", build);
	cr_assert_eq(access(gfad, X_OK), 0, "%s: not built", gfad);
	snprintf(mem, sizeof(mem), "%u", mib);
	unlink(KT_GFAD_SOCK);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		execl(gfad, gfad, "--socket", KT_GFAD_SOCK, "--mem", mem, "--quiet", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		struct gfa_hostpool *hp = gfa_hostpool_attach(KT_GFAD_SOCK, NULL);

		if (hp) {
			gfa_hostpool_detach(hp);
			return pid;
		}
		usleep(20000);
	}
	kill(pid, SIGKILL);
	cr_assert_fail("gfad did not come up at " KT_GFAD_SOCK);
	return -1;
}

static void kt_gfad_stat(struct gfa_hostpool_stat *st)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(KT_GFAD_SOCK, NULL);

	cr_assert_not_null(hp, "attach: %s", strerror(errno));
	cr_assert_geq(gfa_hostpool_stat(hp, st, NULL, 0), 0);
	gfa_hostpool_detach(hp);
}

Test(kvmtool_boot, two_lkvm_processes_share_one_host_pool, .timeout = 300)
{
	const char *append = "gfacheck=16,0 gfacheck_opts=-i,300,-f,64";
	struct gfa_hostpool_stat st;
	struct kt_vm vm[2];
	size_t off[2] = { 0, 0 };
	pid_t gfad;

	kt_require();
	mkdir(KT_HOME, 0755);
	gfad = kt_gfad_start(768);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kt_start(&vm[i], kt_lkvm, "GFA_KVMTOOL_SMALL=1 GFA_KVMTOOL_MOVE_MS=20",
				      kt_kernel, kt_initrd, 256, "--gfa --gfa-pool " KT_GFAD_SOCK,
				      append),
			     0);
	for (int i = 0; i < 2; i++) {
		kt_expect(&vm[i], "gfa-init up", &off[i], 2 * KT_BOOT_S);
		kt_expect(&vm[i], "gfacheck: pass 1 mismatches 0", &off[i], 60);
		kill(vm[i].pid, SIGUSR2); /* the moves start */
	}
	kt_gfad_stat(&st);
	cr_log_info("gfad with both guests: %lu frames leased of %lu, %lu clients",
		    (unsigned long)st.leased_frames, (unsigned long)st.nr_frames,
		    (unsigned long)st.clients);
	cr_assert_geq(st.leased_frames, 2 * 256 * KT_MIB / 4096);
	cr_assert_geq(st.clients, 3); /* the two lkvm, and this test */
	for (int i = 0; i < 2; i++)
		kt_expect(&vm[i], "gfacheck: freed 64 MiB", &off[i], 60);
	sleep(5); /* the guests report 2 s after the frees */
	for (int i = 0; i < 2; i++)
		cr_assert_eq(kt_ipc(&vm[i], "balloon", "--inflate 32"), 0);
	for (int i = 0; i < 2; i++) {
		kt_expect(&vm[i], "gfacheck: MemTotal 178120 kB", &off[i], 60);
		kt_expect(&vm[i], "mismatches 0", &off[i], 30);
	}
	for (int i = 0; i < 2; i++) {
		kt_done(&vm[i]);
		cr_assert_eq(kt_gfa_stat(&vm[i], "ballooned_frames"), 32 * KT_MIB / 4096, "%s",
			     kt_log(&vm[i]));
		cr_assert_geq(kt_gfa_stat(&vm[i], "reported_bytes"), (long long)(32 * KT_MIB), "%s",
			      kt_log(&vm[i]));
		cr_assert_eq(kt_gfa_stat(&vm[i], "balloon_refused"), 0);
		cr_assert_eq(kt_gfa_stat(&vm[i], "report_refused"), 0);
		cr_assert_gt(kt_gfa_stat(&vm[i], "collapses"), 0, "%s", kt_log(&vm[i]));
		cr_assert_eq(kt_gfa_stat(&vm[i], "pauses"), 0);
		fprintf(stderr,
			"kvmtool: %s on the host pool: %lld MiB reported, %lld MiB "
			"ballooned, moves %lld collapses %lld wp_moves %lld pauses %lld\n",
			vm[i].name, kt_gfa_stat(&vm[i], "reported_bytes") >> 20,
			kt_gfa_stat(&vm[i], "ballooned_frames") >> 8, kt_gfa_stat(&vm[i], "moves"),
			kt_gfa_stat(&vm[i], "collapses"), kt_gfa_stat(&vm[i], "wp_moves"),
			kt_gfa_stat(&vm[i], "pauses"));
	}
	kt_gfad_stat(&st);
	kill(gfad, SIGTERM);
	waitpid(gfad, NULL, 0);
	cr_assert_eq(st.leased_frames, 0, "%lu frames still leased after both exited",
		     (unsigned long)st.leased_frames);
	cr_assert_eq(st.check, 0, "the service's pool check: %d", st.check);
}

/* ---- suite kvmtool_qemu: suite kvmtool_boot in one QEMU guest with nested KVM ---- */

#define KT_TESTS 6

Test(kvmtool_qemu, in_qemu, .timeout = 600)
{
	const char *san = getenv("GFA_SANITIZER");
	char root[PATH_MAX], build[PATH_MAX], exe[PATH_MAX], line[2 * PATH_MAX],
		lkvm[PATH_MAX + 32];
	char cmd[6 * PATH_MAX];
	double secs = 0;
	ssize_t n;
	FILE *p;
	int rc;

	if (getenv("GFA_IN_QEMU"))
		cr_skip_test("already inside the QEMU harness");
	if (san && *san)
		cr_skip_test("QEMU cases skip under sanitizers (GFA_SANITIZER=%s)", san);
	if (!tu_find_harness_root(root, sizeof(root)) || !tu_build_dir(build, sizeof(build)))
		tu_qemu_skip("kvmtool_qemu", "tools/kvm-in-qemu.sh not found");
	snprintf(lkvm, sizeof(lkvm), "%s/kvmtool/src/lkvm", build);
	if (access(lkvm, X_OK))
		tu_qemu_skip("kvmtool_qemu",
			     "$GFA_BUILD/kvmtool/src/lkvm not built (make "
			     "kvmtool: it needs ../shared/peers/kvmtool-b48735e.tar.gz)");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	snprintf(cmd, sizeof(cmd),
		 "'%s/tools/linux-initramfs.sh' --out '%s/linux' --checker "
		 "'%s/tests/linux/gfacheck' --module virtio_blk | tail -1",
		 root, build, build);
	p = popen(cmd, "r");
	if (!p || !fgets(line, sizeof(line), p) || pclose(p) || !strstr(line, " initrd="))
		tu_qemu_skip("kvmtool_qemu",
			     "tools/linux-initramfs.sh could not build the "
			     "initramfs (busybox-static, cpio, linux-image-amd64 missing?)");
	line[strcspn(line, "\n")] = '\0';
	/*
	 * The bzImage (kvmtool loads no vmlinux), shmem THP on (gfa's memfds get 2 MiB pages
	 * only with shmem_enabled=advise), then the suite: six runs of lkvm, 256 MiB to 3.5 GiB, two of them on one gfad.
	 */
	snprintf(
		cmd, sizeof(cmd),
		"echo advise >" KT_SHMEM_THP "; export GFA_KT_KERNEL=$(ls /boot/vmlinuz-* | "
		"sort -rV | head -1) GFA_KT_INITRD='%s'; out=$('%s' --filter='kvmtool_boot/*' --verbose "
		"--color=never 2>&1); rc=$?; printf '%%s\\n' \"$out\"; [ $rc = 0 ] || exit $rc; "
		"n=$(printf '%%s\\n' \"$out\" | grep -c '^\\[PASS\\] kvmtool_boot::'); "
		"[ \"$n\" -ge %d ] || exit 3; exit 0",
		strstr(line, " initrd=") + 8, exe, KT_TESTS);
	rc = tu_run_in_qemu("--mem 4608 --timeout 540", cmd, &secs);
	fprintf(stderr, "kvmtool_qemu: suite kvmtool_boot in a QEMU guest: exit %d after %.1f s\n",
		rc, secs);
	if (rc == 77)
		tu_qemu_skip("kvmtool_qemu", "the QEMU harness cannot run here (exit 77)");
	cr_assert_eq(rc, 0,
		     "suite kvmtool_boot failed in the guest (exit %d; 3: fewer than %d "
		     "tests ran unskipped)",
		     rc, KT_TESTS);
}
