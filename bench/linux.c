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
 *  balloon  a 512 MiB guest whose checker touched and freed 320 MiB (so its free memory
 *           is host-backed), then a balloon target of 256 MiB, each VMM with its own
 *           virtio-balloon (QEMU: -device virtio-balloon-pci, target set over QMP;
 *           gfa: refvmm/virtio_balloon.c, gfa_rv_balloon_set_target) and no free page
 *           reporting: time until the guest's MemTotal dropped by 256 MiB, and until the
 *           host-backed bytes (QEMU: its VmRSS; gfa: the zone memfds' st_blocks) made
 *           95% of their whole drop; the drop itself.
 *  report   the same guest with free page reporting on (QEMU: free-page-reporting=on):
 *           the host-backed bytes the 320 MiB freed gives back, and how fast.
 *
 * Where KVM cannot boot Linux (no /dev/kvm, or the software kvm_pvm) the benchmark builds
 * the initramfs and runs itself inside a QEMU TCG guest with nested KVM
 * (tools/kvm-in-qemu.sh): both VMMs then boot L2 guests in that L1, so absolute times are
 * nested-emulation times and only the ratio means much.
 *
 * RESULT linux boot_vs_qemu=<gfa median / qemu median>  (goal <= 1.0)
 *              inflate_vs_qemu=<gfa / qemu median time to the host-backed drop> (goal <= 0.5)
 *              host_drop_pct=<gfa's host-backed drop in % of the 256 MiB ballooned>
 *              freed_drop_pct=<gfa's host-backed drop in % of the 320 MiB freed>
 *
 * GFA_BENCH_CONSOLE=1 copies the balloon guests' consoles to stderr.
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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"
#include "bench/linux/qmp.h"
#include "refvmm/qemu_harness.h"
#include "common/compiler.h"

#define MiB             (1ULL << 20)
#define BOOT_TIMEOUT_MS 180000
#define MAX_REPS        32

struct lb_env {
	const char *kernel, *initrd;
	uint64_t mem;
	char cmdline[1024];
	struct bench_result res;
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
			have = 0; /* a line longer than the buffer: drop it */
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
	static const char *const roms[] = { "/usr/share/qemu/qboot.rom",
					    "/usr/share/qboot/bios.bin" };

	for (size_t i = 0; i < ARRAY_SIZE(roms); i++)
		if (!access(roms[i], R_OK))
			return roms[i];
	return NULL;
}

/* The QEMU options both runs share (KVM, one vCPU, mem MiB, firmware, no devices of
 * its own, the console on stdio); returns how many were written to argv. */
static int qemu_common_argv(const char **argv, const char *mem, const char *bios)
{
	int argc = 0;

	argv[argc++] = "qemu-system-x86_64";
	argv[argc++] = "-accel";
	argv[argc++] = "kvm";
	argv[argc++] = "-cpu";
	argv[argc++] = "host";
	argv[argc++] = "-m";
	argv[argc++] = mem;
	argv[argc++] = "-smp";
	argv[argc++] = "1";
	if (bios) {
		argv[argc++] = "-bios";
		argv[argc++] = bios;
	}
	argv[argc++] = "-nodefaults";
	argv[argc++] = "-no-user-config";
	argv[argc++] = "-display";
	argv[argc++] = "none";
	argv[argc++] = "-serial";
	argv[argc++] = "stdio";
	argv[argc++] = "-no-reboot";
	return argc;
}

static int lb_boot_qemu(const struct lb_env *e, double *init_ms, double *report_ms)
{
	char mem[32];
	const char *bios = lb_qboot();
	const char *argv[32];
	posix_spawn_file_actions_t fa;
	int argc, pipefd[2], r, status;
	uint64_t t0;
	pid_t pid;

	snprintf(mem, sizeof(mem), "%llu", (unsigned long long)(e->mem / MiB));
	argc = qemu_common_argv(argv, mem, bios);
	argv[argc++] = "-kernel";
	argv[argc++] = e->kernel;
	argv[argc++] = "-initrd";
	argv[argc++] = e->initrd;
	argv[argc++] = "-append";
	argv[argc++] = e->cmdline;
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
		.kernel = e->kernel,
		.initrd = e->initrd,
		.mem_bytes = e->mem,
		.append = "gfacheck=16,1",
		.console_fd = -1,
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
		i = gfa_linux_vm_console_wait(vm, "gfa-init up", 0, BOOT_TIMEOUT_MS, NULL, 0,
					      &t_init);
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

static int lb_part_boot(const struct bench_opts *o, void *ctx)
{
	struct lb_env *e = ctx;
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
	bench_result_add(&e->res, "boot_vs_qemu", "%.2f", gim / qim);
	bench_result_add(&e->res, "gfa_init_ms", "%.0f", gim);
	bench_result_add(&e->res, "qemu_init_ms", "%.0f", qim);
	bench_result_add(&e->res, "report_vs_qemu", "%.2f", grm / qrm);
	return 0;
}

/* ---- balloon and report: one guest, seen from its console and from the host ---- */

#define LB_BALLOON   (256 * MiB) /* the balloon target */
#define LB_FREED_MIB 320         /* what the checker touches and frees first */
#define LB_SETTLE_MS \
	3000 /* sampling goes on this long after the guest's
					 * MemTotal dropped (or after the free, for reports) */
#define LB_SAMPLE_US   5000
#define LB_MAX_SAMPLES (BOOT_TIMEOUT_MS * 1000 / LB_SAMPLE_US)

/* A running guest of either VMM: console lines in, host-backed bytes out, a target. */
struct lb_guest {
	bool gfa;
	uint64_t mem;
	unsigned long long memtotal_kb; /* the checker's last MemTotal report */
	/* QEMU */
	pid_t pid;
	int con_fd, qmp_fd;
	char buf[1 << 16];
	size_t have;
	char qmp_path[108];
	/* gfa */
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr;
	struct gfa_rv_pci *pci;
	struct gfa_rv_balloon *bal;
	struct gfa_linux_vm *vm;
	unsigned int next;
};

struct lb_sample {
	double ms;
	int64_t backed;
};
static struct lb_sample lb_samples[LB_MAX_SAMPLES];

/* The next console line, if one came: 1 (in @line), 0 none yet, <0 the guest is gone. */
static int lb_next_line(struct lb_guest *g, char *line, size_t len)
{
	char *nl;
	ssize_t n;

	if (g->gfa) {
		int i = gfa_linux_vm_console_wait(g->vm, "", g->next, 0, line, len, NULL);

		if (i == -ETIMEDOUT)
			return 0;
		if (i < 0)
			return i;
		g->next = (unsigned int)i + 1;
		return 1;
	}
	for (;;) {
		nl = memchr(g->buf, '\n', g->have);
		if (nl) {
			size_t l = (size_t)(nl - g->buf) < len - 1 ? (size_t)(nl - g->buf) :
								     len - 1;

			memcpy(line, g->buf, l);
			line[l] = '\0';
			g->have -= (size_t)(nl + 1 - g->buf);
			memmove(g->buf, nl + 1, g->have);
			return 1;
		}
		if (g->have == sizeof(g->buf))
			g->have = 0;
		n = read(g->con_fd, g->buf + g->have, sizeof(g->buf) - g->have);
		if (n == 0)
			return -EIO;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		g->have += (size_t)n;
	}
}

/* Read what the guest printed so far, tracking MemTotal; 1 if a line held @needle. */
static int lb_drain(struct lb_guest *g, const char *needle)
{
	char line[256];
	int r, hit = 0;

	while ((r = lb_next_line(g, line, sizeof(line))) > 0) {
		const char *m = strstr(line, "gfacheck: MemTotal ");

		if (getenv("GFA_BENCH_CONSOLE"))
			fprintf(stderr, "%s: %s\n", g->gfa ? "gfa" : "qemu", line);

		if (m)
			sscanf(m, "gfacheck: MemTotal %llu", &g->memtotal_kb);
		if (needle && strstr(line, needle))
			hit = 1;
	}
	return r < 0 ? r : hit;
}

static int lb_wait_line(struct lb_guest *g, const char *needle)
{
	uint64_t t0 = bench_now_ns();
	int r;

	while (!(r = lb_drain(g, needle))) {
		if (bench_sec_since(t0) * 1e3 > BOOT_TIMEOUT_MS)
			return -ETIMEDOUT;
		usleep(LB_SAMPLE_US);
	}
	return r < 0 ? r : 0;
}

/* The host memory behind the guest: QEMU's VmRSS, or the pool's memfd blocks. */
static int64_t lb_backed(struct lb_guest *g)
{
	char path[64], val[64];
	int64_t sum = 0;

	if (!g->gfa) {
		snprintf(path, sizeof(path), "/proc/%d/status", (int)g->pid);
		bench_proc_field(path, "VmRSS", val, sizeof(val));
		return (int64_t)strtoll(val, NULL, 10) * 1024;
	}
	for (unsigned int z = 0; z < gfa_pool_nr_zones(g->pool); z++) {
		int64_t n = gfa_memfd_allocated_bytes(gfa_backing_zone_fd(g->b, z));

		if (n < 0)
			return n;
		sum += n;
	}
	return sum;
}

/* One QMP message from the socket (a line); its parsed object or NULL. */
/* Set the balloon to @bytes: QEMU's "balloon" takes the guest size it should leave. */
static int lb_set_balloon(struct lb_guest *g, uint64_t bytes)
{
	char cmd[128];

	if (g->gfa)
		return gfa_rv_balloon_set_target(g->bal, bytes);
	snprintf(cmd, sizeof(cmd), "{\"execute\":\"balloon\",\"arguments\":{\"value\":%llu}}\n",
		 (unsigned long long)(g->mem - bytes));
	return qmp_call(g->qmp_fd, cmd);
}

static int lb_start_qemu(struct lb_guest *g, const struct lb_env *e, const char *append,
			 bool reporting)
{
	char mem[32], cmdline[1280], qmp[160];
	const char *bios = lb_qboot();
	const char *argv[40];
	posix_spawn_file_actions_t fa;
	int argc, pipefd[2], r;

	snprintf(g->qmp_path, sizeof(g->qmp_path), "/tmp/gfa-bench-qmp.%d", (int)getpid());
	unlink(g->qmp_path);
	snprintf(qmp, sizeof(qmp), "unix:%s,server=on,wait=off", g->qmp_path);
	snprintf(mem, sizeof(mem), "%llu", (unsigned long long)(e->mem / MiB));

	/* QEMU's guest gets the same command line: ACPI on, which QEMU's balloon needs (its
	 * firmware describes the PCI INTx routing in ACPI only). */
	snprintf(cmdline, sizeof(cmdline), "%s %s", GFA_LINUX_DEFAULT_CMDLINE, append);
	argc = qemu_common_argv(argv, mem, bios);
	argv[argc++] = "-qmp";
	argv[argc++] = qmp;
	argv[argc++] = "-device";
	argv[argc++] = reporting ? "virtio-balloon-pci,free-page-reporting=on" :
				   "virtio-balloon-pci";
	argv[argc++] = "-kernel";
	argv[argc++] = e->kernel;
	argv[argc++] = "-initrd";
	argv[argc++] = e->initrd;
	argv[argc++] = "-append";
	argv[argc++] = cmdline;
	argv[argc] = NULL;
	if (pipe2(pipefd, O_CLOEXEC))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	r = posix_spawnp(&g->pid, argv[0], &fa, NULL, (char **)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pipefd[1]);
	g->con_fd = pipefd[0];
	g->qmp_fd = -1;
	if (r)
		return -r;
	fcntl(g->con_fd, F_SETFL, O_NONBLOCK);
	g->qmp_fd = qmp_connect(g->qmp_path);
	return g->qmp_fd < 0 ? g->qmp_fd : 0;
}

static int lb_start_gfa(struct lb_guest *g, const struct lb_env *e, const char *append,
			bool reporting)
{
	/* the host return of a VMM that wants ballooned memory back soon: no settling */
	static const struct gfa_host_return_config hc = { .no_settle = true, .interval_ms = 20 };
	struct gfa_release_policy rp = { .low = 256, .high = 512, .min_empty_frac = 4 };
	struct gfa_linux_config cfg = {
		.kernel = e->kernel,
		.initrd = e->initrd,
		.mem_bytes = e->mem,
		.append = append,
		.console_fd = -1,
	};
	struct gfa_rv_balloon_config bc = {
		.slot = 1,
		.irq = GFA_LINUX_PCI_IRQ(1),
		.irq_fn = gfa_linux_vm_irq_line,
		.free_page_reporting = reporting,
	};
	struct gfa_backing_config bkc = { 0 };
	struct gfa_pool_config pc;

	g->gfa = true;
	gfa_pool_config_init(&pc, (e->mem + 64 * MiB) >> GFA_FRAME_SHIFT);
	g->pool = gfa_pool_create(&pc);
	if (!g->pool)
		return -errno;
	g->b = gfa_backing_create(g->pool, &bkc);
	if (!g->b)
		return -errno;
	for (unsigned int z = 0; z < gfa_pool_nr_zones(g->pool); z++)
		gfa_zone_set_release_policy(g->pool, z, &rp);
	g->hr = gfa_host_return_start(g->pool, g->b, &hc);
	g->pci = gfa_rv_pci_create();
	if (!g->hr || !g->pci)
		return -errno;
	cfg.pci = g->pci;
	g->vm = gfa_linux_vm_create(g->pool, g->b, &cfg);
	if (!g->vm)
		return -errno;
	bc.guest = gfa_linux_vm_guest(g->vm);
	bc.backing = g->b;
	bc.irq_ctx = g->vm;
	g->bal = gfa_rv_balloon_create(g->pci, &bc);
	if (!g->bal)
		return -errno;
	return gfa_linux_vm_start(g->vm);
}

static int lb_start(struct lb_guest *g, const struct lb_env *e, bool gfa, bool reporting)
{
	char append[128];

	memset(g, 0, sizeof(*g));
	g->mem = e->mem;
	g->con_fd = g->qmp_fd = -1;
	/* MemTotal every 100 ms while it changes; 320 MiB touched and freed after pass 1 */
	snprintf(append, sizeof(append), "gfacheck=16,0 gfacheck_opts=-i,100,-f,%u", LB_FREED_MIB);
	return gfa ? lb_start_gfa(g, e, append, reporting) : lb_start_qemu(g, e, append, reporting);
}

static void lb_stop(struct lb_guest *g)
{
	if (g->gfa) {
		gfa_linux_vm_stop(g->vm);
		gfa_rv_balloon_destroy(g->bal);
		gfa_linux_vm_destroy(g->vm);
		gfa_rv_pci_destroy(g->pci);
		gfa_host_return_stop(g->hr);
		gfa_backing_destroy(g->b);
		gfa_pool_destroy(g->pool);
		return;
	}
	if (g->pid > 0) {
		kill(g->pid, SIGKILL);
		waitpid(g->pid, NULL, 0);
	}
	if (g->qmp_fd >= 0)
		close(g->qmp_fd);
	if (g->con_fd >= 0)
		close(g->con_fd);
	unlink(g->qmp_path);
}

struct lb_drop {
	double mem_ms;     /* until MemTotal fell by the balloon (inflate only) */
	double host_ms;    /* until host-backed bytes made 95% of their drop */
	double drop_bytes; /* host-backed bytes before minus after */
};

/*
 * Sample host-backed bytes from now on (t0) until @settle_ms after MemTotal reached
 * @kb_goal (0: after @settle_ms at once); the drop from @before and when 95% of it came.
 */
static int lb_sample(struct lb_guest *g, uint64_t t0, int64_t before, unsigned long long kb_goal,
		     struct lb_drop *d)
{
	int n = 0, r;
	double since = kb_goal ? -1 : 0;

	d->mem_ms = 0;
	for (;;) {
		double ms = bench_sec_since(t0) * 1e3;

		r = lb_drain(g, NULL);
		if (r < 0)
			return r;
		if (since < 0 && g->memtotal_kb <= kb_goal) {
			d->mem_ms = ms;
			since = ms;
		}
		lb_samples[n].ms = ms;
		lb_samples[n].backed = lb_backed(g);
		if (++n == LB_MAX_SAMPLES)
			return -ETIMEDOUT;
		if (since >= 0 && ms - since > LB_SETTLE_MS)
			break;
		usleep(LB_SAMPLE_US);
	}
	d->drop_bytes = (double)(before - lb_samples[n - 1].backed);
	d->host_ms = 0;
	for (int i = 0; i < n; i++)
		if ((double)(before - lb_samples[i].backed) >= 0.95 * d->drop_bytes) {
			d->host_ms = lb_samples[i].ms;
			break;
		}
	return 0;
}

static int lb_inflate_once(const struct lb_env *e, bool gfa, struct lb_drop *d)
{
	struct lb_guest g;
	unsigned long long kb0;
	int64_t before;
	uint64_t t0;
	int r = lb_start(&g, e, gfa, false);

	if (!r)
		r = lb_wait_line(&g, "gfacheck: freed");
	if (!r) {
		usleep(500 * 1000);
		r = lb_drain(&g, NULL);
	}
	if (r >= 0) {
		kb0 = g.memtotal_kb;
		before = lb_backed(&g);
		t0 = bench_now_ns();
		r = lb_set_balloon(&g, LB_BALLOON);
		if (!r)
			r = lb_sample(&g, t0, before, kb0 - (LB_BALLOON >> 10), d);
	}
	lb_stop(&g);
	return r;
}

static int lb_report_once(const struct lb_env *e, bool gfa, struct lb_drop *d)
{
	struct lb_guest g;
	int64_t before = 0;
	int r = lb_start(&g, e, gfa, true);

	if (!r)
		r = lb_wait_line(&g, "gfacheck: allocated");
	if (!r) {
		before = lb_backed(&g);
		r = lb_wait_line(&g, "gfacheck: freed");
	}
	/* the kernel reports about 2 s after the free: watch well past that */
	if (!r)
		r = lb_sample(&g, bench_now_ns(), before, 0, d);
	lb_stop(&g);
	return r;
}

typedef int (*lb_once_fn)(const struct lb_env *e, bool gfa, struct lb_drop *d);

/* Alternate QEMU and gfa runs; the figures of each in @q and @g. */
static int lb_alternate(const struct lb_env *e, int reps, lb_once_fn fn, const char *what,
			struct lb_drop *q, struct lb_drop *g)
{
	for (int i = 0; i < reps; i++) {
		for (int k = 0; k < 2; k++) {
			struct lb_drop *d = k ? &g[i] : &q[i];
			int r = fn(e, k == 1, d);

			if (r) {
				fprintf(stderr, "bench linux: %s %s run failed: %s\n",
					k ? "gfa" : "qemu", what, strerror(-r));
				return r;
			}
			if (d->mem_ms > 0)
				printf("  run %d %-4s %s: MemTotal dropped at %.0f ms,", i + 1,
				       k ? "gfa" : "qemu", what, d->mem_ms);
			else
				printf("  run %d %-4s %s:", i + 1, k ? "gfa" : "qemu", what);
			printf(" host-backed -%.0f MiB, 95%% of it at %.0f ms\n",
			       d->drop_bytes / MiB, d->host_ms);
		}
	}
	return 0;
}

static void lb_column(const struct lb_drop *d, int n, size_t off, double *out)
{
	for (int i = 0; i < n; i++)
		out[i] = *(const double *)((const char *)&d[i] + off);
}

static int lb_part_balloon(const struct bench_opts *o, void *ctx)
{
	struct lb_env *e = ctx;
	struct lb_drop q[MAX_REPS], g[MAX_REPS];
	int reps = o->reps > MAX_REPS ? MAX_REPS : o->reps;
	double qm[MAX_REPS], gm[MAX_REPS], qh[MAX_REPS], gh[MAX_REPS], gd[MAX_REPS], qd[MAX_REPS];
	double load[3] = { 0 };
	struct lb_env be = *e;

	be.mem = 2 * LB_BALLOON;
	printf("balloon: %llu MiB guest, 1 vCPU, %d MiB touched and freed first, then a balloon "
	       "of %llu MiB (no free page reporting)\n",
	       (unsigned long long)(be.mem / MiB), LB_FREED_MIB,
	       (unsigned long long)(LB_BALLOON / MiB));
	if (lb_alternate(&be, reps, lb_inflate_once, "inflate", q, g))
		return 1;
	lb_column(q, reps, offsetof(struct lb_drop, mem_ms), qm);
	lb_column(g, reps, offsetof(struct lb_drop, mem_ms), gm);
	lb_column(q, reps, offsetof(struct lb_drop, host_ms), qh);
	lb_column(g, reps, offsetof(struct lb_drop, host_ms), gh);
	lb_column(q, reps, offsetof(struct lb_drop, drop_bytes), qd);
	lb_column(g, reps, offsetof(struct lb_drop, drop_bytes), gd);
	getloadavg(load, 3);
	lb_print_stat("qemu", "target to MemTotal", qm, reps);
	lb_print_stat("gfa", "target to MemTotal", gm, reps);
	lb_print_stat("qemu", "target to host drop", qh, reps);
	lb_print_stat("gfa", "target to host drop", gh, reps);
	printf("  host-backed drop: qemu median %.0f MiB, gfa median %.0f MiB (of %llu)\n",
	       bench_stat_of(qd, reps).median / MiB, bench_stat_of(gd, reps).median / MiB,
	       (unsigned long long)(LB_BALLOON / MiB));
	printf("  load average %.2f %.2f %.2f\n", load[0], load[1], load[2]);
	double ratio = bench_stat_of(gh, reps).median / bench_stat_of(qh, reps).median;
	double pct = bench_stat_of(gd, reps).median * 100.0 / (double)LB_BALLOON;

	bench_goal("linux", "inflate_vs_qemu", ratio, "<=", 0.5,
		   "balloon target to 95% of the host-backed drop, gfa over QEMU (medians)");
	bench_goal("linux", "mem_vs_qemu",
		   bench_stat_of(gm, reps).median / bench_stat_of(qm, reps).median, "info", 0,
		   "balloon target to the guest's MemTotal drop");
	bench_goal("linux", "host_drop_pct", pct, ">=", 95, "host-backed drop in % of the balloon");
	bench_result_add(&e->res, "inflate_vs_qemu", "%.2f", ratio);
	bench_result_add(&e->res, "host_drop_pct", "%.1f", pct);
	bench_result_add(&e->res, "gfa_inflate_host_ms", "%.0f", bench_stat_of(gh, reps).median);
	bench_result_add(&e->res, "qemu_inflate_host_ms", "%.0f", bench_stat_of(qh, reps).median);
	bench_result_add(&e->res, "gfa_inflate_mem_ms", "%.0f", bench_stat_of(gm, reps).median);
	bench_result_add(&e->res, "qemu_inflate_mem_ms", "%.0f", bench_stat_of(qm, reps).median);

	printf("report: the same guest with free page reporting on: host-backed bytes the %d MiB "
	       "freed gives back\n",
	       LB_FREED_MIB);
	if (lb_alternate(&be, reps, lb_report_once, "report", q, g))
		return 1;
	lb_column(q, reps, offsetof(struct lb_drop, drop_bytes), qd);
	lb_column(g, reps, offsetof(struct lb_drop, drop_bytes), gd);
	lb_column(q, reps, offsetof(struct lb_drop, host_ms), qh);
	lb_column(g, reps, offsetof(struct lb_drop, host_ms), gh);
	lb_print_stat("qemu", "free to host drop", qh, reps);
	lb_print_stat("gfa", "free to host drop", gh, reps);
	double qp = bench_stat_of(qd, reps).median * 100.0 / (double)(LB_FREED_MIB * MiB);
	double gp = bench_stat_of(gd, reps).median * 100.0 / (double)(LB_FREED_MIB * MiB);

	printf("  host-backed drop after the free: qemu median %.0f%%, gfa median %.0f%% of %d MiB\n",
	       qp, gp, LB_FREED_MIB);
	bench_goal("linux", "freed_drop_pct", gp, "info", 0,
		   "host-backed drop after the guest freed memory, in % of it (gfa)");
	bench_result_add(&e->res, "freed_drop_pct", "%.1f", gp);
	bench_result_add(&e->res, "qemu_freed_drop_pct", "%.1f", qp);
	bench_result_add(&e->res, "freed_vs_qemu", "%.2f",
			 bench_stat_of(gh, reps).median / bench_stat_of(qh, reps).median);
	return 0;
}

/* ---- where to run ---- */

/*
 * The harness timeout for the runs asked for: per repetition, the nested boot pair
 * takes about 40 s and the balloon part's inflate and report pairs about 130 s (a full
 * run of 5 took 834 s at load 2); twice that for a loaded host, plus the L1's boot.
 * GFA_BENCH_TIMEOUT (seconds) overrides it.
 */
#define LB_SEC_BOOT_REP    40
#define LB_SEC_BALLOON_REP 130
static unsigned int lb_harness_timeout(const struct bench_opts *o)
{
	const char *env = getenv("GFA_BENCH_TIMEOUT");
	int reps = o->reps > MAX_REPS ? MAX_REPS : o->reps;
	unsigned int per = 0;

	if (env && atoi(env) > 0)
		return (unsigned int)atoi(env);
	if (bench_wants(o, "boot"))
		per += LB_SEC_BOOT_REP;
	if (bench_wants(o, "balloon"))
		per += LB_SEC_BALLOON_REP;
	return 120 + 2 * per * (unsigned int)(reps > 0 ? reps : 1);
}

/* Build the initramfs on this host and run this benchmark again in the QEMU harness. */
static int lb_run_in_qemu(int argc, char **argv, const struct bench_opts *o)
{
	char root[PATH_MAX], build[PATH_MAX], cmd[4 * PATH_MAX], line[2 * PATH_MAX], exe[PATH_MAX];
	char opts[64];
	unsigned int tmo = lb_harness_timeout(o);
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	double secs = 0, load[3] = { 0 };
	FILE *p;
	int rc;

	if (n <= 0 || !tu_find_harness_root(root, sizeof(root)) ||
	    !tu_build_dir(build, sizeof(build))) {
		printf("bench linux: skipped: tools/kvm-in-qemu.sh not found\n");
		return 0;
	}
	exe[n] = '\0';
	snprintf(cmd, sizeof(cmd),
		 "'%s/tools/linux-initramfs.sh' --out '%s/linux' --checker "
		 "'%s/tests/linux/gfacheck' | tail -1",
		 root, build, build);
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
	       "KVM (tools/kvm-in-qemu.sh, timeout %u s for these runs); host load average %.2f "
	       "%.2f %.2f\n",
	       tmo, load[0], load[1], load[2]);
	snprintf(opts, sizeof(opts), "--mem 2048 --timeout %u", tmo);
	rc = tu_run_in_qemu(opts, cmd, &secs);
	getloadavg(load, 3);
	printf("bench linux: QEMU harness exit %d after %.0f s; host load average %.2f %.2f %.2f\n",
	       rc, secs, load[0], load[1], load[2]);
	return rc == 77 ? 0 : rc;
}

static struct lb_env env;
static const struct bench_part linux_parts[] = {
	{ "boot", lb_part_boot, NULL, &env },
	{ "balloon", lb_part_balloon, NULL, &env },
};

int main(int argc, char **argv)
{
	struct bench_opts o;
	int r = bench_parse_args(argc, argv, &o, 2, 0, 5, 0,
				 "Linux guest boot, gfa's VMM against QEMU (parts: boot, balloon)");

	if (r)
		return r > 0 ? 0 : 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!gfa_kvm_available(NULL, 0) || gfa_kvm_is_software()) {
		if (getenv("GFA_IN_QEMU")) {
			fprintf(stderr, "bench linux: inside the QEMU harness, but no KVM that "
					"boots Linux\n");
			return 1;
		}
		return lb_run_in_qemu(argc, argv, &o);
	}
	env.kernel = getenv("GFA_LINUX_KERNEL");
	env.initrd = getenv("GFA_LINUX_INITRD");
	if (!env.kernel || !env.initrd) {
		fprintf(stderr, "bench linux: set GFA_LINUX_KERNEL and GFA_LINUX_INITRD "
				"(tools/linux-initramfs.sh prints them)\n");
		return 2;
	}
	env.mem = 256 * MiB;
	snprintf(env.cmdline, sizeof(env.cmdline), "%s pci=off gfacheck=16,1",
		 GFA_LINUX_DEFAULT_CMDLINE);
	bench_result_init(&env.res, "linux");
	r = bench_parts_run(&o, linux_parts, ARRAY_SIZE(linux_parts));
	bench_result_print(&env.res);
	return r;
}
