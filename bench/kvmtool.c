// SPDX-License-Identifier: MIT
/*
 * bench/kvmtool: kvmtool (lkvm) on gfa against the same kvmtool unpatched, both built by
 * `make kvmtool` (build/kvmtool/src/lkvm run --gfa, build/kvmtool/base/lkvm run), the
 * same bzImage, initramfs (tools/linux-initramfs.sh), command line and memory.  Runs
 * alternate (unpatched, gfa, unpatched, gfa, ...) so load changes hit both alike.
 *
 *  boot     time from launch to the first line /init prints ("gfa-init up"), process
 *           start and gfa's pool, backing and guest included.
 *  fpr      the same 512 MiB guest's checker touches 192 MiB more, then frees it; host
 *           memory (the lkvm process's Pss) 6 s later (the guest reports free pages 2 s
 *           after freeing them; unpatched kvmtool offers no reporting).
 *  deflate  then a balloon of 128 MiB (lkvm balloon), host memory once the guest's
 *           MemTotal shows it, a deflate of the 128 MiB, host memory once MemTotal is
 *           back: the growth the deflate caused.
 *  moves    (gfa only) a guest backed by small blocks whose frames gfa collapses and
 *           compacts (SIGUSR2 to the patched lkvm, GFA_KVMTOOL_MOVE_MS=20) while it
 *           writes and re-reads a checksummed file on a virtio-blk disk (gfablk=):
 *           mismatches, frames moved, time vCPUs were stopped for moves (paused_ns).
 *
 * The patch's size is counted from contrib/kvmtool/gfa.patch (its + and - lines).
 * Inside the QEMU harness (where KVM cannot boot Linux it runs itself there) both VMMs
 * run L2 guests in the same L1, so absolute times are nested-emulation times.
 *
 * RESULT kvmtool boot_vs_unpatched=<gfa median / unpatched median>   (goal <= 1.0)
 *                fpr_host_vs_unpatched=<gfa / unpatched median host memory after the
 *                  free>                                              (goal <= 0.6)
 *                deflate_growth_vs_unpatched=<1 + (gfa growth - unpatched growth) /
 *                  128 MiB, medians>                                  (goal <= 1.1)
 *                mismatches=<checksum mismatches under moves>         (goal 0)
 *                patch_lines=<changed lines of kvmtool>               (goal <= 300)
 *
 * GFA_BENCH_CONSOLE=1 copies each guest's console to stderr; GFA_BENCH_LKVM=PATH runs
 * another patched lkvm.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench/bench_util.h"
#include "refvmm/qemu_harness.h"
#include "refvmm/kvmtool_util.h"

#define MiB            (1ULL << 20)
#define KB_MAX_REPS    16
#define KB_MEM_MIB     512
#define KB_FREE_MIB    192
#define KB_BALLOON_MIB 128
#define KB_SHMEM_THP   "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

struct kb_env {
	const char *kernel, *initrd;
	char lkvm[PATH_MAX + 32], base[PATH_MAX + 32], patch[PATH_MAX + 64];
	char disk[PATH_MAX];
	struct bench_result res;
};

struct kb_run {
	double boot_s;
	double fpr_mib, inflated_mib, deflated_mib;
};

static void kb_console(struct kt_vm *vm)
{
	const char *c = getenv("GFA_BENCH_CONSOLE");

	if (c && *c == '1')
		fprintf(stderr, "---- %s ----\n%s\n", vm->name, kt_log(vm));
}

static int kb_fail(struct kt_vm *vm, const char *what)
{
	fprintf(stderr, "bench kvmtool: %s: no \"%s\":\n%s\n", vm->lkvm, what, kt_log(vm));
	kt_stop(vm, 30);
	return -1;
}

/* MemTotal as gfacheck -i prints it, the last value at or after *off (0 if none). */
static unsigned long long kb_memtotal(struct kt_vm *vm, size_t *off)
{
	unsigned long long kb = 0;
	const char *log = kt_log(vm), *p = log + *off;

	while ((p = strstr(p, "gfacheck: MemTotal ")))
		kb = strtoull(p += 19, NULL, 10);
	return kb;
}

/* Wait until MemTotal reads @kb. */
static int kb_wait_memtotal(struct kt_vm *vm, unsigned long long kb, double secs)
{
	char needle[64];
	size_t off = 0;

	snprintf(needle, sizeof(needle), "gfacheck: MemTotal %llu kB", kb);
	return kt_wait(vm, needle, &off, secs) < 0 ? -1 : 0;
}

/* One run of one VMM: boot, the free, the balloon.  0 or -1. */
static int kb_run(struct kb_env *e, bool gfa, struct kb_run *r)
{
	char append[128];
	unsigned long long mt;
	long long before;
	struct kt_vm vm;
	size_t off = 0;

	snprintf(append, sizeof(append), "gfacheck=16,0 gfacheck_opts=-i,200,-f,%u", KB_FREE_MIB);
	if (kt_start(&vm, gfa ? e->lkvm : e->base, "", e->kernel, e->initrd, KB_MEM_MIB,
		     gfa ? "--gfa" : "", append))
		return -1;
	r->boot_s = kt_wait(&vm, "gfa-init up", &off, 180);
	if (r->boot_s < 0)
		return kb_fail(&vm, "gfa-init up");
	if (kt_wait(&vm, "gfacheck: freed", &off, 120) < 0)
		return kb_fail(&vm, "gfacheck: freed");
	sleep(6);
	r->fpr_mib = (double)kt_pss(vm.pid) / MiB;
	mt = kb_memtotal(&vm, &(size_t){ 0 });
	if (kt_ipc(&vm, "balloon", "--inflate 128") ||
	    kb_wait_memtotal(&vm, mt - KB_BALLOON_MIB * 1024, 120))
		return kb_fail(&vm, "MemTotal after the inflate");
	sleep(2);
	before = kt_pss(vm.pid);
	r->inflated_mib = (double)before / MiB;
	if (kt_ipc(&vm, "balloon", "--deflate 128") || kb_wait_memtotal(&vm, mt, 120))
		return kb_fail(&vm, "MemTotal after the deflate");
	sleep(2);
	r->deflated_mib = (double)kt_pss(vm.pid) / MiB;
	kt_stop(&vm, 60);
	kb_console(&vm);
	if (gfa && kt_gfa_stat(&vm, "moves") < 0)
		return kb_fail(&vm, "gfa: (the patched lkvm's counters at exit)");
	unlink(vm.log);
	return 0;
}

/* The moves part, once: mismatches (-1: the run failed), moved blocks, stopped time. */
static int kb_moves(struct kb_env *e, long long *moved, long long *paused_ns)
{
	char args[PATH_MAX + 64];
	struct kt_vm vm;
	size_t off = 0;
	int bad = -1;
	FILE *f = fopen(e->disk, "w");

	if (!f || ftruncate(fileno(f), 64 * MiB)) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	snprintf(args, sizeof(args), "--gfa -d %s", e->disk);
	if (kt_start(&vm, e->lkvm, "GFA_KVMTOOL_SMALL=1 GFA_KVMTOOL_MOVE_MS=20", e->kernel,
		     e->initrd, 256, args, "gfablk=8,3 gfacheck=16,1"))
		return -1;
	if (kt_wait(&vm, "gfa-init: blk start", &off, 180) < 0)
		return kb_fail(&vm, "gfa-init: blk start");
	kill(vm.pid, SIGUSR2);
	if (kt_wait(&vm, "gfa-init: blk rounds 3 mismatches ", &off, 180) < 0)
		return kb_fail(&vm, "gfa-init: blk rounds");
	bad = atoi(kt_log(&vm) + off);
	if (kt_wait(&vm, "gfa-init: checker exit 0", &off, 120) < 0)
		bad++;
	kt_stop(&vm, 60);
	kb_console(&vm);
	*moved = kt_gfa_stat(&vm, "wp_moves");
	*paused_ns = kt_gfa_stat(&vm, "paused_ns");
	if (*moved < 0)
		return kb_fail(&vm, "gfa: (the patched lkvm's counters at exit)");
	unlink(vm.log);
	unlink(e->disk);
	return bad;
}

/* Changed lines of kvmtool: the patch's + and - lines, its file headers not counted. */
static int kb_patch_lines(const char *path)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if ((line[0] == '+' && strncmp(line, "+++ ", 4)) ||
		    (line[0] == '-' && strncmp(line, "--- ", 4)))
			n++;
	fclose(f);
	return n;
}

static void kb_print(const char *what, const char *unit, double *g, double *b, int reps)
{
	struct bench_stat gs = bench_stat_of(g, reps), bs = bench_stat_of(b, reps);

	printf("%-24s unpatched min %8.1f median %8.1f   gfa min %8.1f median %8.1f  %s\n", what,
	       bs.min, bs.median, gs.min, gs.median, unit);
}

static int kb_main(struct kb_env *e, const struct bench_opts *o)
{
	double gb[KB_MAX_REPS], bb[KB_MAX_REPS], gf[KB_MAX_REPS], bf[KB_MAX_REPS];
	double gd[KB_MAX_REPS], bd[KB_MAX_REPS];
	int reps = o->reps > KB_MAX_REPS ? KB_MAX_REPS : o->reps, lines, bad = 0, rc = 0;
	int move_runs = o->quick ? 1 : 2;
	long long moved = 0, paused = 0;
	struct bench_load load;
	double boot, fpr, defl;

	bench_load_begin(&load);
	for (int i = 0; i < reps; i++) {
		struct kb_run g, b;

		if (kb_run(e, false, &b) || kb_run(e, true, &g))
			return 1;
		bb[i] = b.boot_s * 1e3;
		gb[i] = g.boot_s * 1e3;
		bf[i] = b.fpr_mib;
		gf[i] = g.fpr_mib;
		bd[i] = b.deflated_mib - b.inflated_mib;
		gd[i] = g.deflated_mib - g.inflated_mib;
		printf("run %d: boot unpatched %.0f ms gfa %.0f ms; host after the free %.0f / %.0f "
		       "MiB; balloon %.0f -> %.0f / %.0f -> %.0f MiB\n",
		       i + 1, bb[i], gb[i], bf[i], gf[i], b.inflated_mib, b.deflated_mib,
		       g.inflated_mib, g.deflated_mib);
	}
	kb_print("boot to /init", "ms", gb, bb, reps);
	kb_print("host after the free", "MiB", gf, bf, reps);
	kb_print("deflate growth", "MiB", gd, bd, reps);
	for (int i = 0; i < move_runs; i++) {
		long long m = 0, p = 0;
		int r = kb_moves(e, &m, &p);

		if (r < 0)
			return 1;
		bad += r;
		moved += m;
		paused += p;
	}
	printf("moves under virtio-blk I/O: %d runs, %lld blocks moved under write protection, "
	       "%d mismatches, vCPUs stopped %.3f ms\n",
	       move_runs, moved, bad, (double)paused / 1e6);
	bench_print_load(&load, "the runs");
	boot = bench_stat_of(gb, reps).median / bench_stat_of(bb, reps).median;
	fpr = bench_stat_of(gf, reps).median / bench_stat_of(bf, reps).median;
	defl = 1 +
	       (bench_stat_of(gd, reps).median - bench_stat_of(bd, reps).median) / KB_BALLOON_MIB;
	lines = kb_patch_lines(e->patch);
	rc |= !bench_goal("kvmtool", "boot_vs_unpatched", boot, "<=", 1.0,
			  "launch to /init, p50, gfa / unpatched");
	rc |= !bench_goal("kvmtool", "fpr_host_vs_unpatched", fpr, "<=", 0.6,
			  "host memory after the guest freed 192 MiB, p50");
	rc |= !bench_goal("kvmtool", "deflate_growth_vs_unpatched", defl, "<=", 1.1,
			  "1 + (growth gfa - growth unpatched) / balloon, p50");
	rc |= !bench_goal("kvmtool", "mismatches", bad, "<=", 0, "checksums under moves");
	rc |= !bench_goal("kvmtool", "patch_lines", lines, "<=", 300, "changed lines of kvmtool");
	bench_result_add(&e->res, "boot_vs_unpatched", "%.2f", boot);
	bench_result_add(&e->res, "fpr_host_vs_unpatched", "%.2f", fpr);
	bench_result_add(&e->res, "deflate_growth_vs_unpatched", "%.2f", defl);
	bench_result_add(&e->res, "mismatches", "%d", bad);
	bench_result_add(&e->res, "patch_lines", "%d", lines);
	bench_result_add(&e->res, "moved_blocks", "%lld", moved);
	bench_result_add(&e->res, "paused_ms", "%.3f", (double)paused / 1e6);
	bench_result_add(&e->res, "gfa_boot_ms", "%.0f", bench_stat_of(gb, reps).median);
	bench_result_add(&e->res, "unpatched_boot_ms", "%.0f", bench_stat_of(bb, reps).median);
	bench_result_add(&e->res, "gfa_fpr_mib", "%.0f", bench_stat_of(gf, reps).median);
	bench_result_add(&e->res, "unpatched_fpr_mib", "%.0f", bench_stat_of(bf, reps).median);
	(void)rc; /* goals are reported, not the exit status */
	return 0;
}

/* Build the initramfs on this host and run this benchmark again in the QEMU harness. */
static int kb_run_in_qemu(int argc, char **argv, const struct bench_opts *o)
{
	char root[PATH_MAX], build[PATH_MAX], cmd[4 * PATH_MAX], line[2 * PATH_MAX], exe[PATH_MAX];
	char opts[64];
	unsigned int tmo = 200 + 2 * 100 * (unsigned int)o->reps;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	double secs = 0, load[3] = { 0 };
	FILE *p;
	int rc;

	if (n <= 0 || !tu_find_harness_root(root, sizeof(root)) ||
	    !tu_build_dir(build, sizeof(build))) {
		printf("bench kvmtool: skipped: tools/kvm-in-qemu.sh not found\n");
		return 0;
	}
	exe[n] = '\0';
	snprintf(cmd, sizeof(cmd),
		 "'%s/tools/linux-initramfs.sh' --out '%s/linux' --checker "
		 "'%s/tests/linux/gfacheck' --module virtio_blk | tail -1",
		 root, build, build);
	p = popen(cmd, "r");
	if (!p || !fgets(line, sizeof(line), p) || pclose(p) || !strstr(line, " initrd=")) {
		printf("bench kvmtool: skipped: tools/linux-initramfs.sh could not build the initramfs\n");
		return 0;
	}
	line[strcspn(line, "\n")] = '\0';
	setenv("GFA_KT_INITRD", strstr(line, " initrd=") + 8, 1);
	n = snprintf(cmd, sizeof(cmd), "echo advise >" KB_SHMEM_THP "; '%s'", exe);
	for (int i = 1; i < argc && n < (ssize_t)sizeof(cmd) - 1; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " '%s'", argv[i]);
	getloadavg(load, 3);
	printf("bench kvmtool: running inside a QEMU guest with nested KVM (tools/kvm-in-qemu.sh, "
	       "timeout %u s); host load average %.2f %.2f %.2f\n",
	       tmo, load[0], load[1], load[2]);
	snprintf(opts, sizeof(opts), "--mem 2048 --timeout %u", tmo);
	rc = tu_run_in_qemu(opts, cmd, &secs);
	getloadavg(load, 3);
	printf("bench kvmtool: QEMU harness exit %d after %.0f s; host load average %.2f %.2f %.2f\n",
	       rc, secs, load[0], load[1], load[2]);
	return rc == 77 ? 0 : rc;
}

int main(int argc, char **argv)
{
	char build[PATH_MAX], root[PATH_MAX];
	struct bench_opts o;
	struct kb_env e = { 0 };
	FILE *p;
	int r = bench_parse_args(argc, argv, &o, 2, 0, 5, 0,
				 "kvmtool on gfa against kvmtool unpatched (make kvmtool)");

	if (r)
		return r > 0 ? 0 : 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!tu_build_dir(build, sizeof(build)) || !tu_find_harness_root(root, sizeof(root))) {
		printf("bench kvmtool: skipped: no build folder\n");
		return 0;
	}
	snprintf(e.lkvm, sizeof(e.lkvm), "%s/kvmtool/src/lkvm", build);
	if (getenv("GFA_BENCH_LKVM")) /* another patched lkvm */
		snprintf(e.lkvm, sizeof(e.lkvm), "%.*s", PATH_MAX, getenv("GFA_BENCH_LKVM"));
	snprintf(e.base, sizeof(e.base), "%s/kvmtool/base/lkvm", build);
	snprintf(e.patch, sizeof(e.patch), "%s/contrib/kvmtool/gfa.patch", root);
	if (access(e.lkvm, X_OK) || access(e.base, X_OK)) {
		printf("bench kvmtool: skipped: %s or %s not built (make kvmtool)\n", e.lkvm,
		       e.base);
		return 0;
	}
	if (!getenv("GFA_IN_QEMU"))
		return kb_run_in_qemu(argc, argv, &o);
	if (access("/dev/kvm", R_OK | W_OK)) {
		fprintf(stderr, "bench kvmtool: inside the QEMU harness, but no /dev/kvm\n");
		return 1;
	}
	e.initrd = getenv("GFA_KT_INITRD");
	p = popen("ls /boot/vmlinuz-* | sort -rV | head -1", "r");
	if (!p || !fgets(build, sizeof(build), p) || !e.initrd) {
		fprintf(stderr, "bench kvmtool: no /boot/vmlinuz-* or GFA_KT_INITRD\n");
		return 1;
	}
	pclose(p);
	build[strcspn(build, "\n")] = '\0';
	e.kernel = build;
	snprintf(e.disk, sizeof(e.disk), KT_HOME "/bench-disk.img");
	mkdir(KT_HOME, 0755);
	bench_print_machine();
	bench_result_init(&e.res, "kvmtool");
	r = kb_main(&e, &o);
	bench_result_print(&e.res);
	return r;
}
