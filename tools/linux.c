// SPDX-License-Identifier: MIT
/*
 * gfactl linux: boot N Linux guests (Debian's kernel, an initramfs with gfa's memory
 * checker) on one gfa pool, optionally move all their frames while the checkers run
 * (full compaction, then collapse onto 2 MiB blocks), let the guests free memory so the
 * kernel's free page reporting fires (--report) and inflate a virtio-balloon that the
 * guest's own driver drives (--balloon), and report boot times, balloon inflate times,
 * host-backed bytes before and after, page-reporting returns, the 2 MiB share and the
 * compaction counters.
 *
 * Native kvm_pvm cannot boot an unmodified kernel ("KVM internal error, emulation
 * failure"); there the command says so and names the QEMU route.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "tools/gfactl.h"

#define LINUX_MAX_GUESTS        8
/* Inside the QEMU harness: the most guests suite linux_boot runs side by side.  With 4
 * and more the TCG L1 hung at times before any guest printed (README, Limitations). */
#define LINUX_MAX_GUESTS_NESTED 3

/* The virtio device status bits (the virtio spec, "Device Status Field"). */
#define VIRTIO_STATUS_ACKNOWLEDGE 1
#define VIRTIO_STATUS_DRIVER      2
#define VIRTIO_STATUS_DRIVER_OK   4
#define VIRTIO_STATUS_FAILED      128

struct linux_opts {
	unsigned int guests, vcpus;
	uint64_t mem, check_mib, timeout_s, balloon;
	const char *kernel, *initrd, *modules, *append;
	bool moves, console, small_only, report;
	int argc; /* the command line as given, for the QEMU hint */
	char **argv;
};

/* With a balloon, each guest's checker touches and frees a quarter of its RAM first, so
 * its free memory is host-backed (as in a guest that ran a while) or, with --report,
 * reported. */
#define LINUX_FREE_SHARE 4

struct linux_guest {
	struct gfa_linux_vm *vm;
	struct gfa_rv_pci *pci; /* with --balloon or --report */
	struct gfa_rv_balloon *bal;
	unsigned long long memtotal_kb; /* the checker's last MemTotal report */
	double init_ms, report_ms;
	unsigned int next_line;
	int cpus; /* online CPUs the guest's checker counted */
	bool ok;
};

static void linux_usage(FILE *f)
{
	fprintf(f,
		"usage: gfactl linux [options]\n"
		"Boot Linux guests on one gfa pool; each runs gfa's memory checker from its\n"
		"initramfs (tools/linux-initramfs.sh builds it).\n\n"
		"  --guests N       guests on the pool (default 1, at most %d; %d inside the\n"
		"                   QEMU harness, as tested)\n"
		"  --mem SIZE       RAM per guest (default 256M): a multiple of 2 MiB, 64 MiB to\n"
		"                   3 GiB\n"
		"  --vcpus N        vCPUs per guest (default 1, at most %d); each must come\n"
		"                   online in the guest, or the guest fails\n"
		"  --check MIB      memory each checker fills and verifies (default 32, at most\n"
		"                   half of --mem)\n"
		"  --moves          while the checkers run: full compaction, then collapse\n"
		"                   (guests start on blocks below 2 MiB, so there is work)\n"
		"  --balloon MIB    a virtio-balloon per guest; after boot, inflate it to MIB\n"
		"                   (1 to half of --mem)\n"
		"  --report         a virtio-balloon with free page reporting per guest; the\n"
		"                   checker touches and frees a quarter of RAM so it fires\n"
		"  --kernel PATH    vmlinux or bzImage (default: the newest /boot/vmlinuz-*);\n"
		"                   without --initrd, tools/linux-initramfs.sh builds one of\n"
		"                   this kernel's own modules\n"
		"  --modules DIR    that kernel's module tree (default /lib/modules/VERSION)\n"
		"  --initrd PATH    initramfs (default: tools/linux-initramfs.sh builds one)\n"
		"  --append WORDS   added to each guest's kernel command line\n"
		"  --timeout SEC    per guest phase (default 120)\n"
		"  --console        copy the guests' consoles to stderr\n"
		"Needs KVM that runs unmodified kernels; on the software kvm_pvm run it inside\n"
		"the QEMU harness: tools/kvm-in-qemu.sh --mem 2048 -- build/gfactl linux ...\n"
		"(make linux ARGS=\"...\" does that).\n",
		LINUX_MAX_GUESTS, LINUX_MAX_GUESTS_NESTED, GFA_LINUX_MAX_VCPUS);
}

static int linux_parse(int argc, char **argv, struct linux_opts *o)
{
	static const struct option longopts[] = {
		{ "guests", required_argument, NULL, 'g' },
		{ "mem", required_argument, NULL, 'm' },
		{ "check", required_argument, NULL, 'c' },
		{ "moves", no_argument, NULL, 'M' },
		{ "kernel", required_argument, NULL, 'k' },
		{ "initrd", required_argument, NULL, 'i' },
		{ "timeout", required_argument, NULL, 't' },
		{ "console", no_argument, NULL, 'C' },
		{ "vcpus", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "balloon", required_argument, NULL, 'b' },
		{ "report", no_argument, NULL, 'r' },
		{ "modules", required_argument, NULL, 'D' },
		{ "append", required_argument, NULL, 'A' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c;

	*o = (struct linux_opts){ .guests = 1,
				  .vcpus = 1,
				  .mem = 256 * MiB,
				  .check_mib = 32,
				  .timeout_s = 120 };
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'g':
			if (!parse_u64("--guests", optarg, 1, LINUX_MAX_GUESTS, &v))
				return 2;
			o->guests = (unsigned int)v;
			break;
		case 'm':
			if (!parse_mib("--mem", optarg, &o->mem))
				return 2;
			break;
		case 'c':
			if (!parse_u64("--check", optarg, 1, 2048, &o->check_mib))
				return 2;
			break;
		case 't':
			if (!parse_u64("--timeout", optarg, 1, 3600, &o->timeout_s))
				return 2;
			break;
		case 'v':
			if (!parse_u64("--vcpus", optarg, 1, GFA_LINUX_MAX_VCPUS, &v))
				return 2;
			o->vcpus = (unsigned int)v;
			break;
		case 'b':
			if (!parse_u64("--balloon", optarg, 0, GFA_LINUX_MAX_MEM / MiB, &v))
				return 2;
			if (!v) {
				fprintf(stderr,
					"gfactl linux: --balloon 0 inflates nothing: give the "
					"MiB to inflate, 1 to half of --mem\n");
				return 2;
			}
			o->balloon = v * MiB;
			break;
		case 'r':
			o->report = true;
			break;
		case 'M':
			o->moves = o->small_only = true;
			break;
		case 'k':
			o->kernel = optarg;
			break;
		case 'D':
			o->modules = optarg;
			break;
		case 'A':
			o->append = optarg;
			break;
		case 'i':
			o->initrd = optarg;
			break;
		case 'C':
			o->console = true;
			break;
		case 'h':
			linux_usage(stdout);
			return 1;
		default:
			linux_usage(stderr);
			return 2;
		}
	}
	o->argc = argc;
	o->argv = argv;
	if (getenv("GFA_IN_QEMU") && o->guests > LINUX_MAX_GUESTS_NESTED) {
		fprintf(stderr,
			"gfactl linux: --guests %u: at most %d inside the QEMU harness (what "
			"is tested; with 4 and more its guest hung at times)\n",
			o->guests, LINUX_MAX_GUESTS_NESTED);
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "gfactl linux: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (o->mem % (2 * MiB)) {
		if (o->mem % MiB)
			fprintf(stderr, "gfactl linux: --mem %llu KiB is not a multiple of 2 MiB\n",
				(unsigned long long)(o->mem >> 10));
		else
			fprintf(stderr, "gfactl linux: --mem %llu MiB is not a multiple of 2 MiB\n",
				(unsigned long long)(o->mem / MiB));
		return 2;
	}
	if (o->mem < 64 * MiB || o->mem > GFA_LINUX_MAX_MEM) {
		fprintf(stderr,
			"gfactl linux: --mem %llu MiB: a guest has 64 MiB to 3 GiB (no PCI "
			"hole below 4 GiB to step over)\n",
			(unsigned long long)(o->mem / MiB));
		return 2;
	}
	if (o->check_mib * MiB > o->mem / 2) {
		fprintf(stderr,
			"gfactl linux: --check %llu is more than half of --mem %llu MiB "
			"(at most %llu)\n",
			(unsigned long long)o->check_mib, (unsigned long long)(o->mem / MiB),
			(unsigned long long)(o->mem / 2 / MiB));
		return 2;
	}
	if (o->balloon > o->mem / 2) {
		fprintf(stderr,
			"gfactl linux: --balloon %llu is more than half of --mem %llu MiB "
			"(at most %llu)\n",
			(unsigned long long)(o->balloon / MiB), (unsigned long long)(o->mem / MiB),
			(unsigned long long)(o->mem / 2 / MiB));
		return 2;
	}
	if (o->modules && (!o->kernel || o->initrd)) {
		fprintf(stderr, "gfactl linux: --modules is for the initramfs of a --kernel given "
				"without --initrd\n");
		return 2;
	}
	return 0;
}

/* @s in single quotes for sh, or false if it holds one. */
static bool sh_quote(char *out, size_t len, const char *s)
{
	return !strchr(s, '\'') && snprintf(out, len, "'%s'", s) < (int)len;
}

/* The source tree a build directory sits in: the first parent (up to three levels: a
 * sanitizer build is build/asan) that holds tools/linux-initramfs.sh, or NULL. */
static const char *linux_tree(const char *build, char *buf, size_t len)
{
	char probe[PATH_MAX + 64];

	snprintf(buf, len, "%s", build);
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(buf, '/');

		if (!slash || slash == buf)
			return NULL;
		*slash = '\0';
		snprintf(probe, sizeof(probe), "%s/tools/linux-initramfs.sh", buf);
		if (!access(probe, X_OK))
			return buf;
	}
	return NULL;
}

/*
 * Run tools/linux-initramfs.sh next to this binary's tree for --kernel (default: the
 * newest /boot/vmlinuz-*) and --modules; fills the kernel and, without --initrd, the
 * initramfs of that kernel's own modules.
 */
static int linux_prepare(struct linux_opts *o, char *kernel, char *initrd, size_t len)
{
	char exe[PATH_MAX], cmd[6 * PATH_MAX], line[2 * PATH_MAX + 32], *dir, rootbuf[PATH_MAX];
	const char *root;
	char kq[PATH_MAX + 16] = "", mq[PATH_MAX + 16] = "";
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *p;
	int ok = 0;

	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	dir = strrchr(exe, '/');
	if (!dir)
		return -ENOENT;
	*dir = '\0'; /* the build directory (build/, build/asan/, ...) */
	root = linux_tree(exe, rootbuf, sizeof(rootbuf));
	if (!root)
		return -ENOENT;
	if ((o->kernel && !sh_quote(kq, sizeof(kq), o->kernel)) ||
	    (o->modules && !sh_quote(mq, sizeof(mq), o->modules)))
		return -EINVAL;
	if (snprintf(cmd, sizeof(cmd),
		     "'%s/tools/linux-initramfs.sh' --out '%s/linux' "
		     "--checker '%s/tests/linux/gfacheck'%s%s%s%s",
		     root, exe, exe, o->kernel ? " --kernel " : "", kq,
		     o->modules ? " --modules " : "", mq) >= (int)sizeof(cmd))
		return -ENAMETOOLONG;
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	while (fgets(line, sizeof(line), p)) {
		char *k = strstr(line, "kernel="), *i = strstr(line, " initrd=");

		if (k && i) {
			*i = '\0';
			snprintf(kernel, len, "%s", k + 7);
			snprintf(initrd, len, "%s", i + 8);
			initrd[strcspn(initrd, "\n")] = '\0';
			ok = 1;
		}
	}
	if (pclose(p) != 0 || !ok)
		return -ENOENT;
	/* a vmlinux given stays as given; a bzImage boots as its unpacked vmlinux */
	o->kernel = kernel;
	if (!o->initrd)
		o->initrd = initrd;
	return 0;
}

static bool linux_has_balloon(const struct linux_opts *o)
{
	return o->balloon || o->report;
}

/* The pool's host-backed bytes (memfd st_blocks), once @hr (if any) settled. */
static int64_t host_backed(struct gfa_pool *pool, struct gfa_backing *b, struct gfa_host_return *hr)
{
	int64_t sum = 0;

	if (hr)
		gfa_host_return_quiesce(hr, 30000);
	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		int64_t n = gfa_memfd_allocated_bytes(gfa_backing_zone_fd(b, z));

		sum += n > 0 ? n : 0;
	}
	return sum;
}

/* Wait for @needle on guest @g's console after its last match; its time in *ms. */
static bool guest_wait(struct linux_guest *g, const char *needle, int timeout_ms, char *line,
		       size_t len, double *ms)
{
	int i = gfa_linux_vm_console_wait(g->vm, needle, g->next_line, timeout_ms, line, len, ms);

	if (i < 0)
		return false;
	g->next_line = (unsigned int)i + 1;
	return true;
}

/* Wait until guest @g's checker reports a MemTotal of at most (@down) or at least @kb. */
static bool guest_wait_memtotal(struct linux_guest *g, unsigned long long kb, bool down,
				int timeout_ms, double *ms)
{
	char line[256];

	while (down ? g->memtotal_kb > kb : g->memtotal_kb < kb) {
		if (!guest_wait(g, "gfacheck: MemTotal ", timeout_ms, line, sizeof(line), ms) ||
		    sscanf(strstr(line, "MemTotal "), "MemTotal %llu", &g->memtotal_kb) != 1)
			return false;
	}
	return true;
}

/* One checker pass line after the last one seen: true if it reports 0 and 0. */
static bool guest_clean_pass(struct linux_guest *g, int timeout_ms, char *why, size_t len)
{
	char line[256];
	unsigned long long pass, bad;
	unsigned long taint;

	if (!guest_wait(g, "gfacheck: pass ", timeout_ms, line, sizeof(line), NULL)) {
		snprintf(why, len, "no checker pass reported (%s)", gfa_linux_vm_error(g->vm));
		return false;
	}
	if (sscanf(strstr(line, "gfacheck: pass "),
		   "gfacheck: pass %llu mismatches %llu tainted %lu", &pass, &bad, &taint) != 3 ||
	    bad || taint) {
		snprintf(why, len, "checker: %s", line);
		return false;
	}
	return true;
}

static int linux_moves(struct gfa_pool *pool, struct linux_guest *gs, const struct linux_opts *o)
{
	int tmo = (int)o->timeout_s * 1000, r, collapsed = 0;
	char why[320];

	static const char *const result[] = { "skipped", "continue", "complete", "partial",
					      "success" };

	r = gfa_compact_zone(pool, 0, -1, GFA_COMPACT_SYNC);
	if (r < 0 || r > GFA_COMPACT_SUCCESS)
		printf("moves: full compaction failed: %s\n", strerror(r < 0 ? -r : EINVAL));
	else
		printf("moves: full compaction of zone 0: %s\n", result[r]);
	for (unsigned int i = 0; i < o->guests; i++) {
		r = gfa_guest_collapse(gfa_linux_vm_guest(gs[i].vm), UINT_MAX);
		collapsed += r > 0 ? r : 0;
	}
	printf("moves: collapse: %d ranges onto 2 MiB blocks\n", collapsed);
	for (unsigned int i = 0; i < o->guests; i++) {
		/* a pass that began before the moves, then one wholly after them */
		for (int k = 0; k < 2 && gs[i].ok; k++)
			gs[i].ok = guest_clean_pass(&gs[i], tmo, why, sizeof(why));
		if (!gs[i].ok)
			printf("guest %u: after the moves: %s\n", i, why);
	}
	return 0;
}

/* The checkers touch and free a quarter of their RAM; what that leaves on the host. */
static void linux_free_phase(struct gfa_pool *pool, struct gfa_backing *b,
			     struct gfa_host_return *hr, struct linux_guest *gs,
			     const struct linux_opts *o)
{
	int tmo = (int)o->timeout_s * 1000;
	uint64_t freed = o->mem / LINUX_FREE_SHARE;
	int64_t with = 0, after;
	uint64_t reports = 0, punched = 0;

	for (unsigned int i = 0; i < o->guests; i++)
		gs[i].ok = gs[i].ok &&
			   guest_wait(&gs[i], "gfacheck: allocated", tmo, NULL, 0, NULL);
	with = host_backed(pool, b, hr);
	for (unsigned int i = 0; i < o->guests; i++)
		gs[i].ok = gs[i].ok && guest_wait(&gs[i], "gfacheck: freed", tmo, NULL, 0, NULL);
	/* the kernel reports free pageblocks about 2 s after they were freed */
	if (o->report)
		sleep(4);
	after = host_backed(pool, b, hr);
	for (unsigned int i = 0; i < o->guests; i++) {
		struct gfa_rv_balloon_stat st;

		if (!gfa_rv_balloon_stat(gs[i].bal, &st)) {
			reports += st.report_requests;
			punched += st.report_released_bytes;
		}
	}
	printf("report: each checker touched and freed %llu MiB: host-backed %lld MiB with it, "
	       "%lld MiB after the free%s; free page reporting: %llu reports, %llu MiB punched "
	       "(since boot)\n",
	       (unsigned long long)(freed / MiB), (long long)(with / (int64_t)MiB),
	       (long long)(after / (int64_t)MiB), o->report ? " (4 s later)" : "",
	       (unsigned long long)reports, (unsigned long long)(punched / MiB));
}

/* Inflate every guest's balloon to --balloon: time to the guest's MemTotal drop, bytes. */
static void linux_balloon_phase(struct gfa_pool *pool, struct gfa_backing *b,
				struct gfa_host_return *hr, struct linux_guest *gs,
				const struct linux_opts *o)
{
	int tmo = (int)o->timeout_s * 1000;
	unsigned long long kb0[LINUX_MAX_GUESTS];
	int64_t before = host_backed(pool, b, hr), after;
	double t0 = now_ms();

	for (unsigned int i = 0; i < o->guests; i++) {
		kb0[i] = gs[i].memtotal_kb;
		gfa_rv_balloon_set_target(gs[i].bal, o->balloon);
	}
	for (unsigned int i = 0; i < o->guests; i++) {
		double ms;

		gs[i].ok = gs[i].ok && guest_wait_memtotal(&gs[i], kb0[i] - (o->balloon >> 10),
							   true, tmo, NULL);
		ms = now_ms() - t0;
		printf("balloon: guest %u: %llu MiB inflated %s %.0f ms after the target (MemTotal "
		       "%llu -> %llu kB)\n",
		       i, (unsigned long long)(o->balloon / MiB),
		       gs[i].ok ? "by" : "FAILED: not done", ms, kb0[i], gs[i].memtotal_kb);
		if (!gs[i].ok) {
			struct gfa_rv_balloon_stat st = { 0 };

			gfa_rv_balloon_stat(gs[i].bal, &st);
			printf("balloon: guest %u: the device holds %llu of %llu pages, the driver "
			       "says %llu (status %#x)%s\n",
			       i, (unsigned long long)st.inflated_pages,
			       (unsigned long long)st.target_pages,
			       (unsigned long long)st.actual_pages, st.status,
			       gfa_linux_vm_wait(gs[i].vm, 0) != GFA_LINUX_RUNNING ?
				       "; the guest has stopped" :
				       "");
		}
	}
	after = host_backed(pool, b, hr);
	printf("balloon: host-backed %lld MiB before the targets, %lld MiB after (-%lld MiB, "
	       "%.1f%% of the %llu MiB ballooned)\n",
	       (long long)(before / (int64_t)MiB), (long long)(after / (int64_t)MiB),
	       (long long)((before - after) / (int64_t)MiB),
	       100.0 * (double)(before - after) / (double)(o->balloon * o->guests),
	       (unsigned long long)(o->balloon * o->guests / MiB));
	if (o->report)
		printf("balloon: note: with --report the guests had reported their free memory "
		       "already, so the pages the balloon took were mostly not host-backed\n");
	else if (before - after < (int64_t)(o->balloon * o->guests) / 10 * 9)
		printf("balloon: note: the guests had only %lld MiB host-backed of their %llu MiB "
		       "RAM before the targets, so many of the pages the balloon took had never "
		       "been touched: the host had nothing to give back for those\n",
		       (long long)(before / (int64_t)MiB),
		       (unsigned long long)(o->mem * o->guests / MiB));
}

static void linux_report(struct gfa_pool *pool, struct gfa_backing *b, struct gfa_host_return *hr,
			 struct linux_guest *gs, const struct linux_opts *o, int64_t backed_before)
{
	uint64_t huge = 0, ranges = 0, pages_2m = 0;
	struct gfa_thp_report thp;
	struct gfa_vmstat v;

	for (unsigned int i = 0; i < o->guests; i++) {
		struct gfa_guest_stat st;
		struct gfa_linux_stat ls;

		gfa_guest_stat(gfa_linux_vm_guest(gs[i].vm), &st);
		gfa_linux_vm_stat(gs[i].vm, &ls);
		huge += st.huge_ranges;
		ranges += st.huge_ranges + st.small_ranges;
		pages_2m += ls.pages_2m;
		printf("guest %u: %d of %u vCPUs online; boot to /init %.0f ms, to the checker's "
		       "first report %.0f ms; moves %llu, collapses %llu, KVM pages_4k %llu "
		       "pages_2m %llu, %s\n",
		       i, gs[i].cpus, o->vcpus, gs[i].init_ms, gs[i].report_ms,
		       (unsigned long long)st.moves, (unsigned long long)st.collapses,
		       (unsigned long long)ls.pages_4k, (unsigned long long)ls.pages_2m,
		       gs[i].ok ? "ok" : "FAILED");
	}
	gfa_pool_vmstat(pool, &v);
	if (!gfa_host_thp_report(&thp) && !thp.shmem_thp_possible)
		printf("note: shmem_enabled is \"%s\": the host backs guest RAM with 4 KiB pages, "
		       "so KVM maps no 2 MiB pages (set it to advise)\n",
		       thp.shmem_enabled);
	printf("host-backed bytes: %lld before the guests, %lld now\n", (long long)backed_before,
	       (long long)host_backed(pool, b, hr));
	printf("2 MiB share: %llu of %llu ranges (%.1f%%), KVM pages_2m %llu\n",
	       (unsigned long long)huge, (unsigned long long)ranges,
	       ranges ? 100.0 * (double)huge / (double)ranges : 0.0, (unsigned long long)pages_2m);
	printf("compaction: compact_stall %llu compact_success %llu compact_fail %llu "
	       "pgmigrate_success %llu thp_collapse_alloc %llu\n",
	       (unsigned long long)v.compact_stall, (unsigned long long)v.compact_success,
	       (unsigned long long)v.compact_fail, (unsigned long long)v.pgmigrate_success,
	       (unsigned long long)v.thp_collapse_alloc);
}

/*
 * Guest @g's balloon after boot: /init loaded the modules before the checker started,
 * so a driver that took the device has set DRIVER_OK by now.  If none did, say what
 * the device saw, at once (not after a balloon target's timeout).
 */
static bool guest_driver_ok(struct linux_guest *g, unsigned int i)
{
	struct gfa_rv_balloon_stat st;
	char line[256];
	const char *what;

	if (gfa_rv_balloon_stat(g->bal, &st) || (st.status & VIRTIO_STATUS_DRIVER_OK))
		return true;
	if (st.status & VIRTIO_STATUS_FAILED)
		what = "a driver gave up on it (status FAILED)";
	else if (st.status & VIRTIO_STATUS_DRIVER)
		what = "a driver began but never finished its set-up";
	else if (st.status & VIRTIO_STATUS_ACKNOWLEDGE)
		what = "the guest found it, but no driver took it";
	else
		what = "the guest never touched it";
	printf("guest %u: FAILED: the balloon device never reached DRIVER_OK (status %#x): %s, "
	       "so no balloon target or free page report can work",
	       i, st.status, what);
	/* /init says which module it could not load ("invalid module format": the
	 * initramfs was made for another kernel) */
	for (int k = 0, from = 0, n = 0; k < 4; k++, from++) {
		from = gfa_linux_vm_console_wait(g->vm, "insmod", (unsigned int)from, 0, line,
						 sizeof(line), NULL);
		if (from < 0) {
			if (!n)
				printf("; is virtio_balloon in the initramfs, built for this kernel?");
			break;
		}
		/* busybox's reason ("can't insert ...: Invalid module format"), then /init's */
		printf("%s%s", n++ ? " / " : "; the guest said: ", line);
	}
	printf("\n");
	return false;
}

/* Boot every guest, wait for /init and the first checker report. */
static bool linux_boot_all(struct gfa_pool *pool, struct gfa_backing *b, struct linux_guest *gs,
			   const struct linux_opts *o)
{
	char append[512], why[320];
	struct gfa_linux_config cfg = {
		.kernel = o->kernel,
		.initrd = o->initrd,
		.mem_bytes = o->mem,
		.vcpus = o->vcpus,
		.small_only = o->small_only,
		.console_fd = o->console ? 2 : -1,
		.append = append,
	};
	int tmo = (int)o->timeout_s * 1000;
	bool all = true;

	/* with --moves or a balloon the checkers loop until stopped, so they run while
	 * frames move and balloons fill; with a balloon they report MemTotal on each change */
	if (linux_has_balloon(o))
		snprintf(append, sizeof(append), "gfacheck=%llu,0 gfacheck_opts=-i,200,-f,%llu",
			 (unsigned long long)o->check_mib,
			 (unsigned long long)(o->mem / LINUX_FREE_SHARE / MiB));
	else
		snprintf(append, sizeof(append), "gfacheck=%llu,%d",
			 (unsigned long long)o->check_mib, o->moves ? 0 : 2);
	if (o->append && strlen(append) + strlen(o->append) + 2 < sizeof(append))
		snprintf(append + strlen(append), sizeof(append) - strlen(append), " %s",
			 o->append);
	for (unsigned int i = 0; i < o->guests; i++) {
		struct gfa_rv_balloon_config bc = {
			.backing = b,
			.slot = 1,
			.irq = GFA_LINUX_PCI_IRQ(1),
			.irq_fn = gfa_linux_vm_irq_line,
			.free_page_reporting = o->report,
		};

		if (linux_has_balloon(o)) {
			gs[i].pci = gfa_rv_pci_create();
			if (!gs[i].pci)
				return false;
		}
		cfg.pci = gs[i].pci;
		gs[i].vm = gfa_linux_vm_create(pool, b, &cfg);
		if (!gs[i].vm) {
			fprintf(stderr, "gfactl linux: guest %u: %s\n", i, strerror(errno));
			return false;
		}
		bc.guest = gfa_linux_vm_guest(gs[i].vm);
		bc.irq_ctx = gs[i].vm;
		if (gs[i].pci && !(gs[i].bal = gfa_rv_balloon_create(gs[i].pci, &bc))) {
			fprintf(stderr, "gfactl linux: guest %u: balloon: %s\n", i,
				strerror(errno));
			return false;
		}
	}
	for (unsigned int i = 0; i < o->guests; i++)
		gfa_linux_vm_start(gs[i].vm);
	for (unsigned int i = 0; i < o->guests; i++) {
		struct linux_guest *g = &gs[i];

		char line[256];

		g->ok = guest_wait(g, "gfa-init up", tmo, NULL, 0, &g->init_ms) &&
			guest_wait(g, "gfacheck: cpus", tmo, line, sizeof(line), NULL) &&
			sscanf(strstr(line, "gfacheck: cpus"), "gfacheck: cpus %d", &g->cpus) ==
				1 &&
			guest_wait(g, "gfacheck: MemTotal ", tmo, line, sizeof(line), NULL) &&
			sscanf(strstr(line, "MemTotal "), "MemTotal %llu", &g->memtotal_kb) == 1 &&
			guest_wait(g, "gfacheck: filled", tmo, NULL, 0, &g->report_ms) &&
			guest_clean_pass(g, tmo, why, sizeof(why));
		if (!g->ok)
			printf("guest %u: did not boot to a clean checker pass: %s\n", i,
			       gfa_linux_vm_error(g->vm)[0] ? gfa_linux_vm_error(g->vm) :
							      "timeout");
		if (g->ok && g->cpus != (int)o->vcpus) {
			printf("guest %u: FAILED: %d of %u vCPUs online: maxcpus= or nosmp on the "
			       "command line stop the rest, and so does acpi=off on a kernel "
			       "without CONFIG_X86_MPPARSE (Debian's cloud flavour), which then "
			       "finds no CPU but the first\n",
			       i, g->cpus, o->vcpus);
			g->ok = false;
		}
		if (g->ok && g->bal)
			g->ok = guest_driver_ok(g, i);
		all &= g->ok;
	}
	return all;
}

int cmd_linux(int argc, char **argv)
{
	char kernel[PATH_MAX], initrd[PATH_MAX], why[256];
	struct linux_guest gs[LINUX_MAX_GUESTS] = { 0 };
	struct gfa_backing_config bc = { 0 };
	struct gfa_pool_config pc;
	struct linux_opts o;
	struct gfa_host_return *hr = NULL;
	struct gfa_backing *b;
	struct gfa_pool *pool;
	int64_t before;
	bool ok;
	int r = linux_parse(argc, argv, &o);

	if (r)
		return r == 1 ? 0 : r;
	/* what boots is settled first, so a bad --kernel is refused on any host */
	if (!o.kernel || !o.initrd) {
		const char *given = o.kernel;

		r = linux_prepare(&o, kernel, initrd, sizeof(kernel));
		if (r && given)
			fprintf(stderr,
				"gfactl linux: --kernel %s without --initrd: "
				"tools/linux-initramfs.sh made no initramfs of that kernel's modules "
				"(its reason is above); pass --initrd I, or --modules DIR for a module "
				"tree outside /lib/modules\n",
				given);
		else if (r)
			fprintf(stderr,
				"gfactl linux: tools/linux-initramfs.sh made no kernel and "
				"initramfs to boot (its reason is above); pass --kernel K and --initrd "
				"I\n");
		if (r)
			return 1;
	}
	if (!gfa_kvm_available(why, sizeof(why)) || gfa_kvm_is_software()) {
		printf("gfactl linux: this KVM cannot boot Linux (%s): the native kvm_pvm stops an "
		       "unmodified kernel with \"KVM internal error, emulation failure\". Run it "
		       "in a QEMU guest with nested KVM: tools/kvm-in-qemu.sh --mem 2048 -- "
		       "build/gfactl linux",
		       gfa_kvm_is_software() ? "software kvm_pvm" : why);
		for (int i = 1; i < o.argc; i++)
			printf(" %s", o.argv[i]);
		printf(" (or make linux ARGS=\"...\")\n");
		return 77;
	}
	/* the guests, plus a quarter for compaction to move into */
	gfa_pool_config_init(&pc, (o.mem * o.guests + o.mem * o.guests / 4) >> GFA_FRAME_SHIFT);
	pool = gfa_pool_create(&pc);
	b = pool ? gfa_backing_create(pool, &bc) : NULL;
	if (!b) {
		fprintf(stderr, "gfactl linux: pool: %s\n", strerror(errno));
		gfa_pool_destroy(pool);
		return 1;
	}
	/* a balloon's frames go back to the host through the io_uring host return */
	if (o.balloon) {
		static const struct gfa_host_return_config hc = { .no_settle = true };

		hr = gfa_host_return_start(pool, b, &hc);
		if (!hr)
			fprintf(stderr, "gfactl linux: host return: %s\n", strerror(errno));
	}
	before = host_backed(pool, b, hr);
	printf("gfactl linux: %u guest(s) of %llu MiB, kernel %s, initramfs %s\n", o.guests,
	       (unsigned long long)(o.mem / MiB), o.kernel, o.initrd);
	ok = linux_boot_all(pool, b, gs, &o);
	if (ok && linux_has_balloon(&o))
		linux_free_phase(pool, b, hr, gs, &o);
	if (ok && o.balloon)
		linux_balloon_phase(pool, b, hr, gs, &o);
	if (ok && o.moves)
		linux_moves(pool, gs, &o);
	linux_report(pool, b, hr, gs, &o, before);
	for (unsigned int i = 0; i < o.guests; i++) {
		ok &= gs[i].ok;
		gfa_linux_vm_stop(gs[i].vm);
		gfa_rv_balloon_destroy(gs[i].bal);
		gfa_linux_vm_destroy(gs[i].vm);
		gfa_rv_pci_destroy(gs[i].pci);
	}
	gfa_host_return_stop(hr);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return ok ? 0 : 1;
}
