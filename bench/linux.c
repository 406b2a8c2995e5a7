// SPDX-License-Identifier: MIT
/*
 * bench/linux: Debian's Linux kernel on gfa's reference VMM against QEMU, side by side
 * on the same KVM, the same kernel (the uncompressed vmlinux, PVH entry), the same
 * initramfs (tools/linux-initramfs.sh), command line and memory.
 *
 *  boot     time from launch to the first line /init prints ("gfa-init up"), and to the
 *           checker's first report ("gfacheck: filled"), for
 *             qemu  qemu-system-x86_64 -accel kvm -cpu host (qboot firmware when
 *                   installed, as tools/kvm-in-qemu.sh uses it), process start included
 *             gfa   pool + backing + gfa_linux_vm_create + start, in this process
 *           runs alternate (qemu, gfa, qemu, gfa, ...) so load changes hit both alike.
 *  balloon  inflate / host-drop figures need a virtio-balloon device on gfa's VMM; until
 *           it is wired to this VMM the part says so and prints no balloon keys.
 *
 * Where KVM cannot boot Linux (no /dev/kvm, or the software kvm_pvm) the benchmark builds
 * the initramfs and runs itself inside a QEMU TCG guest with nested KVM
 * (tools/kvm-in-qemu.sh): both VMMs then boot L2 guests in that L1, so absolute times are
 * nested-emulation times and only the ratio means much.
 *
 * RESULT linux boot_vs_qemu=<gfa median / qemu median>  (goal <= 1.0)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"
#include "tests/qemu_util.h"

#define MiB (1ULL << 20)
#define BOOT_TIMEOUT_MS 180000
#define MAX_REPS 32

struct lb_env {
	const char *kernel, *initrd;
	uint64_t mem;
	char cmdline[1024];
};

/* ---- QEMU ---- */

/* Read lines from @fd until one holds @needle; ms since @t0 in *ms.  -ETIMEDOUT/-EIO. */
static int lb_read_until(int fd, const char *needle, uint64_t t0, double *ms)
{
	static char buf[1 << 16];
	static size_t have;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (;;) {
		char *nl;

		while ((nl = memchr(buf, '\n', have))) {
			bool hit;

			*nl = '\0';
			hit = strstr(buf, needle) != NULL;
			have -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, have);
			if (hit) {
				*ms = bench_sec_since(t0) * 1e3;
				return 0;
			}
		}
		if (have == sizeof(buf))
			have = 0;       /* a line longer than the buffer: drop it */
		if (poll(&p, 1, BOOT_TIMEOUT_MS) <= 0)
			return -ETIMEDOUT;
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);

		if (n <= 0)
			return -EIO;
		have += (size_t)n;
	}
}

static const char *lb_qboot(void)
{
	static const char *const roms[] = { "/usr/share/qemu/qboot.rom", "/usr/share/qboot/bios.bin" };

	for (size_t i = 0; i < sizeof(roms) / sizeof(roms[0]); i++)
		if (!access(roms[i], R_OK))
			return roms[i];
	return NULL;
}

static int lb_boot_qemu(const struct lb_env *e, double *init_ms, double *report_ms)
{
	char mem[32];
	const char *bios = lb_qboot();
	const char *argv[32];
	posix_spawn_file_actions_t fa;
	int argc = 0, pipefd[2], r, status;
	uint64_t t0;
	pid_t pid;

	snprintf(mem, sizeof(mem), "%llu", (unsigned long long)(e->mem / MiB));
	argv[argc++] = "qemu-system-x86_64";
	argv[argc++] = "-accel"; argv[argc++] = "kvm";
	argv[argc++] = "-cpu"; argv[argc++] = "host";
	argv[argc++] = "-m"; argv[argc++] = mem;
	argv[argc++] = "-smp"; argv[argc++] = "1";
	if (bios) {
		argv[argc++] = "-bios";
		argv[argc++] = bios;
	}
	argv[argc++] = "-nodefaults"; argv[argc++] = "-no-user-config";
	argv[argc++] = "-display"; argv[argc++] = "none";
	argv[argc++] = "-serial"; argv[argc++] = "stdio";
	argv[argc++] = "-no-reboot";
	argv[argc++] = "-kernel"; argv[argc++] = e->kernel;
	argv[argc++] = "-initrd"; argv[argc++] = e->initrd;
	argv[argc++] = "-append"; argv[argc++] = e->cmdline;
	argv[argc] = NULL;
	if (pipe2(pipefd, O_CLOEXEC))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	t0 = bench_now_ns();
	r = posix_spawnp(&pid, argv[0], &fa, NULL, (char **)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	if (r) {
		close(pipefd[0]);
		return -r;
	}
	r = lb_read_until(pipefd[0], "gfa-init up", t0, init_ms);
	if (!r)
		r = lb_read_until(pipefd[0], "gfacheck: filled", t0, report_ms);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(pipefd[0]);
	return r;
}

/* ---- gfa ---- */

static int lb_boot_gfa(const struct lb_env *e, double *init_ms, double *report_ms)
{
	/* the command line gfa builds from these is e->cmdline, which QEMU gets */
	struct gfa_linux_config cfg = {
		.kernel = e->kernel, .initrd = e->initrd, .mem_bytes = e->mem,
		.append = "gfacheck=16,1", .console_fd = -1,
	};
	struct gfa_backing_config bc = { 0 };
	struct gfa_pool_config pc;
	struct gfa_linux_vm *vm = NULL;
	struct gfa_backing *b = NULL;
	struct gfa_pool *pool;
	uint64_t t0 = bench_now_ns();
	double start_ms = 0, t_init = 0, t_rep = 0;
	int r = -ENOMEM, i;

	gfa_pool_config_init(&pc, (e->mem + 16 * MiB) >> GFA_FRAME_SHIFT);
	pool = gfa_pool_create(&pc);
	if (pool)
		b = gfa_backing_create(pool, &bc);
	if (b) {
		vm = gfa_linux_vm_create(pool, b, &cfg);
		r = vm ? 0 : -errno;
	}
	if (!r) {
		/* console times count from start: creation and kernel load come first */
		start_ms = bench_sec_since(t0) * 1e3;
		r = gfa_linux_vm_start(vm);
	}
	if (!r) {
		i = gfa_linux_vm_console_wait(vm, "gfa-init up", 0, BOOT_TIMEOUT_MS, NULL, 0, &t_init);
		if (i >= 0)
			i = gfa_linux_vm_console_wait(vm, "gfacheck: filled", (unsigned int)i,
						      BOOT_TIMEOUT_MS, NULL, 0, &t_rep);
		r = i < 0 ? i : 0;
		*init_ms = start_ms + t_init;
		*report_ms = start_ms + t_rep;
	}
	gfa_linux_vm_destroy(vm);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return r;
}

/* ---- parts ---- */

static void lb_print_stat(const char *who, const char *what, double *v, int n)
{
	struct bench_stat s = bench_stat_of(v, n);

	printf("  %-5s %-22s min %7.0f ms  median %7.0f ms  max %7.0f ms  (%d runs)\n", who, what,
	       s.min, s.median, s.max, n);
}

static int lb_part_boot(const struct lb_env *e, const struct bench_opts *o)
{
	double qi[MAX_REPS], qr[MAX_REPS], gi[MAX_REPS], gr[MAX_REPS];
	int reps = o->reps > MAX_REPS ? MAX_REPS : o->reps, r;
	double load[3] = { 0 };

	printf("boot: %llu MiB guest, 1 vCPU, kernel %s\n  initramfs %s\n  command line: %s\n",
	       (unsigned long long)(e->mem / MiB), e->kernel, e->initrd, e->cmdline);
	for (int i = 0; i < reps; i++) {
		r = lb_boot_qemu(e, &qi[i], &qr[i]);
		if (r) {
			fprintf(stderr, "bench linux: QEMU boot failed: %s\n", strerror(-r));
			return 1;
		}
		r = lb_boot_gfa(e, &gi[i], &gr[i]);
		if (r) {
			fprintf(stderr, "bench linux: gfa boot failed: %s\n", strerror(-r));
			return 1;
		}
		printf("  run %d: qemu /init %.0f ms, report %.0f ms; gfa /init %.0f ms, report %.0f ms\n",
		       i + 1, qi[i], qr[i], gi[i], gr[i]);
	}
	getloadavg(load, 3);
	lb_print_stat("qemu", "launch to /init", qi, reps);
	lb_print_stat("gfa", "launch to /init", gi, reps);
	lb_print_stat("qemu", "to checker's report", qr, reps);
	lb_print_stat("gfa", "to checker's report", gr, reps);
	printf("  load average %.2f %.2f %.2f%s\n", load[0], load[1], load[2],
	       getenv("GFA_IN_QEMU") ? "  (inside the QEMU harness: L2 guests, nested)" : "");
	double gim = bench_stat_of(gi, reps).median, qim = bench_stat_of(qi, reps).median;
	double grm = bench_stat_of(gr, reps).median, qrm = bench_stat_of(qr, reps).median;

	bench_goal("linux", "boot_vs_qemu", gim / qim, "<=", 1.0,
		   "launch to /init, gfa's VMM over QEMU's (medians)");
	bench_goal("linux", "report_vs_qemu", grm / qrm, "info", 0,
		   "launch to the checker's first report");
	printf("RESULT linux boot_vs_qemu=%.2f gfa_init_ms=%.0f qemu_init_ms=%.0f "
	       "report_vs_qemu=%.2f\n", gim / qim, gim, qim, grm / qrm);
	return 0;
}

static int lb_part_balloon(const struct lb_env *e, const struct bench_opts *o)
{
	(void)e;
	(void)o;
	printf("balloon: not measured: gfa's VMM has no virtio-balloon device wired in yet, so "
	       "inflate_vs_qemu and host_drop_pct are not printed\n");
	return 0;
}

/* ---- where to run ---- */

/* Build the initramfs on this host and run this benchmark again in the QEMU harness. */
static int lb_run_in_qemu(int argc, char **argv)
{
	char root[PATH_MAX], build[PATH_MAX], cmd[4 * PATH_MAX], line[2 * PATH_MAX], exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	double secs = 0, load[3] = { 0 };
	FILE *p;
	int rc;

	if (n <= 0 || !tu_find_harness_root(root, sizeof(root)) || !tu_build_dir(build, sizeof(build))) {
		printf("bench linux: skipped: tools/kvm-in-qemu.sh not found\n");
		return 0;
	}
	exe[n] = '\0';
	snprintf(cmd, sizeof(cmd), "'%s/tools/linux-initramfs.sh' --out '%s/linux' --checker "
		 "'%s/tests/linux/gfacheck' | tail -1", root, build, build);
	p = popen(cmd, "r");
	if (!p || !fgets(line, sizeof(line), p) || pclose(p) || strncmp(line, "kernel=", 7)) {
		printf("bench linux: skipped: tools/linux-initramfs.sh could not build the initramfs\n");
		return 0;
	}
	line[strcspn(line, "\n")] = '\0';
	*strstr(line, " initrd=") = '\0';
	setenv("GFA_LINUX_KERNEL", line + 7, 1);
	setenv("GFA_LINUX_INITRD", line + strlen(line) + 8, 1);
	n = snprintf(cmd, sizeof(cmd), "'%s'", exe);
	for (int i = 1; i < argc && n < (ssize_t)sizeof(cmd) - 1; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " '%s'", argv[i]);
	getloadavg(load, 3);
	printf("bench linux: this KVM cannot boot Linux; running inside a QEMU guest with nested "
	       "KVM (tools/kvm-in-qemu.sh); host load average %.2f %.2f %.2f\n", load[0], load[1],
	       load[2]);
	rc = tu_run_in_qemu("--mem 2048 --timeout 900", cmd, &secs);
	getloadavg(load, 3);
	printf("bench linux: QEMU harness exit %d after %.0f s; host load average %.2f %.2f %.2f\n",
	       rc, secs, load[0], load[1], load[2]);
	return rc == 77 ? 0 : rc;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct lb_env e = { 0 };
	int r = bench_parse_args(argc, argv, &o, 2, 0, 5, 0,
				 "Linux guest boot, gfa's VMM against QEMU (parts: boot, balloon)");

	if (r)
		return r > 0 ? 0 : 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!gfa_kvm_available(NULL, 0) || gfa_kvm_is_software()) {
		if (getenv("GFA_IN_QEMU")) {
			fprintf(stderr, "bench linux: inside the QEMU harness, but no KVM that boots Linux\n");
			return 1;
		}
		return lb_run_in_qemu(argc, argv);
	}
	e.kernel = getenv("GFA_LINUX_KERNEL");
	e.initrd = getenv("GFA_LINUX_INITRD");
	if (!e.kernel || !e.initrd) {
		fprintf(stderr, "bench linux: set GFA_LINUX_KERNEL and GFA_LINUX_INITRD "
			"(tools/linux-initramfs.sh prints them)\n");
		return 2;
	}
	e.mem = 256 * MiB;
	snprintf(e.cmdline, sizeof(e.cmdline), "%s pci=off gfacheck=16,1", GFA_LINUX_DEFAULT_CMDLINE);
	r = 0;
	if (bench_wants(&o, "boot"))
		r |= lb_part_boot(&e, &o);
	if (bench_wants(&o, "balloon"))
		r |= lb_part_balloon(&e, &o);
	return r;
}
