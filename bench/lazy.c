// SPDX-License-Identifier: MIT
/*
 * bench/lazy: lazy guests (GFA_GUEST_LAZY) against gfa's full population and against
 * the kernel's own THP fault, in one run.
 *
 *  1. start: gfa_guest_create() to return, lazy 128 MiB, 2 GiB and 16 GiB guests (the
 *     16 GiB one overcommits the pool) and full 128 MiB and 2 GiB (512 MiB quick)
 *     guests, interleaved per rep.  Every guest starts on a populated pool whose frames
 *     the zeroer has zeroed (the same head start for both).
 *  2. first touch of a 2 MiB block by a "vCPU" thread registered with its own cache
 *     (gfa_guest_vcpu_cache), one byte per 2 MiB range, each touch timed, against the
 *     same thread touching MADV_HUGEPAGE anonymous memory (the kernel allocates and
 *     zeroes a THP in the fault).  gfa's blocks are clean here (the zeroer ran between
 *     reps); the same with dirty blocks (zeroed in the fault) is printed as info.
 *     own_cache_pct: the vCPU's faults its own cache served.
 *  3. overcommit: 8 lazy guests of half the pool each (4x the pool in all) run a
 *     checker each (write a pattern over 40% of its share of the pool, read it back);
 *     none may be refused.  Full population fits 2 of them.
 *  4. restore: a guest written all over is saved (gfa_guest_save) and restored lazily
 *     from the file (GFA_LAZY_FILL_FD); restore_ms is create plus the first touch
 *     (running again), against a full guest read back with pread (the whole snapshot up
 *     front).  Then all of it is read back and compared.
 * The boot figure (boot_resident_pct) is bench/linux's: it needs a Linux guest in the
 * QEMU harness.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"

#define MiB   (1ULL << 20)
#define GiB   (1ULL << 30)
#define RANGE (2 * MiB)

static struct gfa_pool *pool;
static char shmem_saved[32];

static void shmem_restore(void)
{
	if (shmem_saved[0])
		gfa_host_shmem_thp_set(shmem_saved, NULL, 0);
}

/* gfa's blocks PMD-mapped, as the kernel baseline's THPs are: shmem_enabled=advise for
 * the run (Debian's default is never), put back at exit. */
static void shmem_advise(void)
{
	struct gfa_thp_report r;

	gfa_host_thp_report(&r);
	if (r.shmem_thp_possible)
		return;
	if (gfa_host_shmem_thp_set("advise", shmem_saved, sizeof(shmem_saved))) {
		shmem_saved[0] = '\0';
		printf("# shmem_enabled is %s and cannot be changed (not root?): gfa's blocks "
		       "stay on 4 KiB host pages\n",
		       r.shmem_enabled);
		return;
	}
	atexit(shmem_restore);
	printf("# shmem_enabled %s -> advise for this run\n", shmem_saved);
}
static struct gfa_backing *bk;
static uint64_t pool_bytes;

static void pool_setup(uint64_t bytes)
{
	struct gfa_pool_config pc;
	struct gfa_backing_config bc = { .populate = true };

	gfa_pool_config_init(&pc, bytes / GFA_FRAME_SIZE);
	pool = gfa_pool_create(&pc);
	bk = pool ? gfa_backing_create(pool, &bc) : NULL;
	if (!bk)
		bench_die("pool of %lu MiB: %s\n", (unsigned long)(bytes / MiB), strerror(errno));
	pool_bytes = bytes;
}

/* Every frame a guest left is zeroed: the next one starts clean, as the first did. */
static void settle(void)
{
	if (gfa_backing_zero_quiesce(bk, 20000))
		bench_die("the zeroer did not finish\n");
}

static struct gfa_guest *guest(uint64_t bytes, bool lazy, const struct gfa_guest_lazy *lz)
{
	struct gfa_guest_config gc = { .mem_bytes = bytes,
				       .flags = lazy ? GFA_GUEST_LAZY : 0,
				       .lazy = lz };

	return gfa_guest_create(pool, bk, &gc);
}

static double ms_since(uint64_t t0)
{
	return (double)(bench_now_ns() - t0) / 1e6;
}

/* ---- 1. start ---- */

enum { S_L128, S_L2G, S_L16G, S_F128, S_FBIG, S_N };
static const char *const s_name[S_N] = { "lazy 128M", "lazy 2G", "lazy 16G", "full 128M",
					 "full big" };

static uint64_t s_size[S_N] = { 128 * MiB, 2 * GiB, 16 * GiB, 128 * MiB, 2 * GiB };

static double start_once(int v)
{
	uint64_t bytes = s_size[v], t0 = bench_now_ns();
	struct gfa_guest *g = guest(bytes, v <= S_L16G, NULL);
	double ms = ms_since(t0);

	if (!g)
		bench_die("%s guest: %s\n", s_name[v], strerror(errno));
	gfa_guest_destroy(g);
	settle();
	return ms;
}

static int bench_start(const struct bench_opts *o, void *ctx)
{
	struct bench_result *res = ctx;
	int reps = o->quick ? 5 : 15;
	double v[S_N][64];
	struct bench_stat st[S_N];

	for (int r = 0; r < reps; r++)
		for (int i = 0; i < S_N; i++) {
			int k = r & 1 ? S_N - 1 - i : i; /* neither side always first */

			v[k][r] = start_once(k);
		}
	for (int i = 0; i < S_N; i++) {
		st[i] = bench_stat_of(v[i], reps);
		printf("start %-9s (%5lu MiB): p50 %8.3f ms  min %8.3f  max %8.3f\n", s_name[i],
		       (unsigned long)(s_size[i] / MiB), st[i].median, st[i].min, st[i].max);
	}
	bench_goal("lazy", "start_128m_ms", st[S_L128].median, "<=", 2, "lazy 128 MiB start p50");
	bench_goal("lazy", "start_2g_ms", st[S_L2G].median, "<=", 2, "lazy 2 GiB start p50");
	bench_goal("lazy", "start_16g_ms", st[S_L16G].median, "<=", 2,
		   "lazy 16 GiB start p50 (8-16x the pool: overcommit)");
	bench_goal("lazy", "start_16g_vs_128m", st[S_L16G].median / st[S_L128].median, "<=", 1.2,
		   "lazy start, 16 GiB / 128 MiB");
	bench_goal("lazy", "lazy_vs_full_big", st[S_L2G].median / st[S_FBIG].median, "info", 0,
		   "lazy 2 GiB start / full population start of the big guest");
	bench_result_add(res, "start_128m_ms", "%.3f", st[S_L128].median);
	bench_result_add(res, "start_16g_vs_128m", "%.2f", st[S_L16G].median / st[S_L128].median);
	bench_result_add(res, "full_start_big_ms", "%.2f", st[S_FBIG].median);
	return 0;
}

/* ---- 2. first touch ---- */

struct toucher {
	char *base;
	uint64_t bytes;
	struct gfa_guest *g; /* a lazy guest: register with a cache first */
	struct gfa_pcp *pcp;
	double *ns; /* per 2 MiB range */
	struct gfa_guest_vcpu_stat st;
};

static void *touch_run(void *arg)
{
	struct toucher *t = arg;

	if (t->g && gfa_guest_vcpu_cache(t->g, gettid(), t->pcp))
		bench_die("gfa_guest_vcpu_cache failed\n");
	for (uint64_t r = 0; r < t->bytes / RANGE; r++) {
		uint64_t t0 = bench_now_ns();

		*(volatile char *)(t->base + r * RANGE + 64) = 1;
		t->ns[r] = (double)(bench_now_ns() - t0);
	}
	if (t->g)
		gfa_guest_vcpu_stat(t->g, gettid(), &t->st);
	return NULL;
}

/* Touch [base, base + bytes) range by range from a new thread: median ns a range. */
static double touch(struct toucher *t)
{
	pthread_t th;
	double med;

	t->ns = calloc(t->bytes / RANGE, sizeof(*t->ns));
	if (!t->ns || pthread_create(&th, NULL, touch_run, t))
		bench_die("touch thread\n");
	pthread_join(th, NULL);
	med = bench_stat_of(t->ns, (int)(t->bytes / RANGE)).median;
	free(t->ns);
	return med;
}

static double touch_gfa(uint64_t bytes, bool dirty, struct gfa_pcp *pcp, double *own)
{
	struct gfa_guest *g = guest(bytes, true, NULL);
	struct toucher t = { .bytes = bytes, .g = g, .pcp = pcp };
	double ns;

	if (!g)
		bench_die("lazy guest: %s\n", strerror(errno));
	if (!dirty && gfa_backing_nr_dirty(bk))
		printf("# 'clean' touch: %lu MiB of the pool still dirty (the zeroer left them)\n",
		       (unsigned long)(gfa_backing_nr_dirty(bk) * GFA_FRAME_SIZE / MiB));
	t.base = gfa_guest_hva(g);
	ns = touch(&t);
	*own = t.st.faults ? 100.0 * (double)t.st.cache_faults / (double)t.st.faults : 0;
	gfa_guest_destroy(g);
	gfa_pcp_drain(pcp);
	if (!dirty)
		settle();
	return ns;
}

static double touch_kernel(uint64_t bytes, int64_t *thp)
{
	char *p = mmap(NULL, bytes + RANGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct toucher t = { .bytes = bytes };
	double ns;

	if (p == MAP_FAILED)
		bench_die("mmap: %s\n", strerror(errno));
	t.base = (char *)(((uintptr_t)p + RANGE - 1) & ~(RANGE - 1));
	madvise(t.base, bytes, MADV_HUGEPAGE);
	ns = touch(&t);
	*thp = gfa_smaps_pmd_bytes(t.base, bytes);
	munmap(p, bytes + RANGE);
	return ns;
}

static int bench_touch(const struct bench_opts *o, void *ctx)
{
	struct bench_result *res = ctx;
	uint64_t bytes = o->quick ? 128 * MiB : 512 * MiB;
	int reps = o->quick ? 3 : 9;
	double gfa[64], dirty[64], kern[64], own = 0, own_min = 100, o1;
	struct gfa_pcp *pcp = gfa_pcp_create(pool, 0);
	struct bench_stat sg, sd, sk;
	int64_t thp = 0;

	if (!pcp)
		bench_die("pcp: %s\n", strerror(errno));
	for (int r = 0; r < reps; r++) {
		gfa[r] = touch_gfa(bytes, false, pcp, &o1);
		own_min = o1 < own_min ? o1 : own_min;
		kern[r] = touch_kernel(bytes, &thp);
		dirty[r] = touch_gfa(bytes, true, pcp, &own);
		settle();
	}
	gfa_pcp_destroy(pcp);
	sg = bench_stat_of(gfa, reps);
	sd = bench_stat_of(dirty, reps);
	sk = bench_stat_of(kern, reps);
	printf("first touch of 2 MiB: gfa clean p50 %.1f us (min %.1f), gfa dirty p50 %.1f us, "
	       "kernel THP p50 %.1f us (min %.1f; %ld of %lu MiB THP-mapped)\n",
	       sg.median / 1e3, sg.min / 1e3, sd.median / 1e3, sk.median / 1e3, sk.min / 1e3,
	       (long)(thp / (int64_t)MiB), (unsigned long)(bytes / MiB));
	if (thp < (int64_t)bytes / 2)
		printf("# the kernel baseline got few THPs (transparent_hugepage/enabled?): it "
		       "then faults 4 KiB pages, and the ratio flatters it less than it seems\n");
	bench_goal("lazy", "first_touch_vs_kernel_thp", sg.median / sk.median, "<=", 0.5,
		   "first touch of a 2 MiB block, gfa (clean blocks) / kernel THP fault");
	bench_goal("lazy", "first_touch_dirty_vs_kernel_thp", sd.median / sk.median, "info", 0,
		   "the same with dirty blocks, zeroed in the fault");
	bench_goal("lazy", "own_cache_pct", own_min, ">=", 100,
		   "a registered vCPU's first touches its own cache served (lowest rep)");
	bench_result_add(res, "first_touch_vs_kernel_thp", "%.3f", sg.median / sk.median);
	bench_result_add(res, "own_cache_pct", "%.0f", own_min);
	return 0;
}

/* ---- 3. overcommit ---- */

struct checker {
	pthread_t th;
	struct gfa_guest *g;
	uint64_t touch, bad;
};

static void *check_run(void *arg)
{
	struct checker *c = arg;
	uint64_t *w = gfa_guest_hva(c->g);

	for (uint64_t i = 0; i < c->touch / 8; i += 512)
		w[i] = i ^ (uintptr_t)c;
	for (uint64_t i = 0; i < c->touch / 8; i += 512)
		c->bad += w[i] != (i ^ (uintptr_t)c);
	return NULL;
}

static int bench_overcommit(const struct bench_opts *o, void *ctx)
{
	struct bench_result *res = ctx;

	(void)o;
	enum { NG = 8 };
	struct checker c[NG];
	struct gfa_guest_stat st;
	uint64_t refused = 0, bad = 0, full_fit = 0, size = pool_bytes / 2;
	struct gfa_guest *f[NG];

	for (int i = 0; i < NG; i++) {
		c[i] = (struct checker){ .g = guest(size, true, NULL),
					 .touch = (pool_bytes / NG) * 4 / 10 & ~(RANGE - 1) };
		if (!c[i].g)
			bench_die("lazy guest %d: %s\n", i, strerror(errno));
		pthread_create(&c[i].th, NULL, check_run, &c[i]);
	}
	for (int i = 0; i < NG; i++) {
		pthread_join(c[i].th, NULL);
		gfa_guest_stat(c[i].g, &st);
		refused += st.lazy_refused;
		bad += c[i].bad;
		gfa_guest_destroy(c[i].g);
	}
	settle();
	for (int i = 0; i < NG; i++)
		full_fit += (f[i] = guest(size, false, NULL)) != NULL;
	for (int i = 0; i < NG; i++)
		gfa_guest_destroy(f[i]);
	settle();
	printf("overcommit: %d lazy guests of %lu MiB on a %lu MiB pool (%.0fx) ran their "
	       "checkers: %lu refused, %lu bad words; full population fits %lu of them\n",
	       NG, (unsigned long)(size / MiB), (unsigned long)(pool_bytes / MiB),
	       (double)(NG * size) / (double)pool_bytes, (unsigned long)refused, (unsigned long)bad,
	       (unsigned long)full_fit);
	bench_goal("lazy", "overcommit_refused", (double)(refused + bad), "<=", 0,
		   "8 lazy guests of 4x the pool in all: refused touches + bad words");
	bench_result_add(res, "overcommit_ok", "%d", !refused && !bad);
	return 0;
}

/* ---- 4. restore ---- */

static int snapshot(uint64_t bytes, int *fd)
{
	char path[] = "/var/tmp/gfa-bench-lazy-XXXXXX";
	struct gfa_guest *g = guest(bytes, true, NULL);
	uint64_t *w;

	*fd = mkstemp(path);
	if (*fd < 0 || !g)
		bench_die("snapshot: %s\n", strerror(errno));
	unlink(path);
	w = gfa_guest_hva(g);
	for (uint64_t i = 0; i < bytes / 8; i += 512)
		w[i] = i * 0x9e3779b97f4a7c15ULL;
	if (gfa_guest_save(g, *fd, 0) <= 0)
		bench_die("gfa_guest_save: %s\n", strerror(errno));
	gfa_guest_destroy(g);
	settle();
	return 0;
}

static uint64_t verify(struct gfa_guest *g, uint64_t bytes)
{
	const uint64_t *w = gfa_guest_hva(g);
	uint64_t bad = 0;

	for (uint64_t i = 0; i < bytes / 8; i += 512)
		bad += w[i] != i * 0x9e3779b97f4a7c15ULL;
	return bad;
}

static double restore_lazy(int fd, uint64_t bytes, uint64_t *bad)
{
	struct gfa_guest_lazy lz = { .flags = GFA_LAZY_FILL_FD, .fill_fd = fd };
	uint64_t t0 = bench_now_ns();
	struct gfa_guest *g = guest(bytes, true, &lz);
	double ms;

	if (!g)
		bench_die("restore: %s\n", strerror(errno));
	(void)*(volatile uint64_t *)gfa_guest_hva(g); /* running again: its first touch */
	ms = ms_since(t0);
	*bad += verify(g, bytes);
	gfa_guest_destroy(g);
	settle();
	return ms;
}

static double restore_full(int fd, uint64_t bytes, uint64_t *bad)
{
	uint64_t t0 = bench_now_ns();
	struct gfa_guest *g = guest(bytes, false, NULL);
	char *w = g ? gfa_guest_hva(g) : NULL;
	double ms;

	for (uint64_t done = 0; w && done < bytes;) {
		ssize_t n = pread(fd, w + done, bytes - done, (off_t)done);

		if (n <= 0)
			bench_die("pread: %s\n", strerror(errno));
		done += (uint64_t)n;
	}
	ms = ms_since(t0);
	if (!g)
		bench_die("full guest: %s\n", strerror(errno));
	*bad += verify(g, bytes);
	gfa_guest_destroy(g);
	settle();
	return ms;
}

static int bench_restore(const struct bench_opts *o, void *ctx)
{
	struct bench_result *res = ctx;
	uint64_t bytes = o->quick ? 512 * MiB : 2 * GiB, bad = 0;
	int reps = o->quick ? 3 : 7, fd;
	double lz[64], full[64];
	struct bench_stat sl, sf;

	snapshot(bytes, &fd);
	for (int r = 0; r < reps; r++) {
		lz[r] = restore_lazy(fd, bytes, &bad);
		full[r] = restore_full(fd, bytes, &bad);
	}
	close(fd);
	sl = bench_stat_of(lz, reps);
	sf = bench_stat_of(full, reps);
	printf("restore of %lu MiB: lazy p50 %.3f ms (min %.3f), full read p50 %.1f ms (min "
	       "%.1f); %lu words differ from the saved ones\n",
	       (unsigned long)(bytes / MiB), sl.median, sl.min, sf.median, sf.min,
	       (unsigned long)bad);
	bench_goal("lazy", "restore_ms", sl.median, "<=", 5,
		   "lazy restore from the snapshot file to running again (create + first touch)");
	bench_goal("lazy", "restore_bad_words", (double)bad, "<=", 0,
		   "words read back that differ from the saved guest");
	bench_goal("lazy", "restore_lazy_vs_full", sl.median / sf.median, "info", 0,
		   "lazy restore / full guest read from the file up front");
	bench_result_add(res, "restore_ms", "%.3f", sl.median);
	bench_result_add(res, "restore_equal", "%d", !bad);
	return 0;
}

static struct bench_result res;
static const struct bench_part lazy_parts[] = {
	{ "start", bench_start, NULL, &res },
	{ "touch", bench_touch, NULL, &res },
	{ "overcommit", bench_overcommit, NULL, &res },
	{ "restore", bench_restore, NULL, &res },
};

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_load load;
	struct gfa_guest *probe;
	int err = bench_parse_args(argc, argv, &o, 3, 0, 9, 0,
				   "lazy guests: start, first touch, overcommit, restore "
				   "(parts: start, touch, overcommit, restore)");

	if (err)
		return err > 0 ? 0 : 2;
	bench_print_machine();
	shmem_advise();
	pool_setup(o.quick ? 1 * GiB : 3 * GiB);
	if (o.quick)
		s_size[S_FBIG] = 512 * MiB; /* the full guest must fit the quick pool */
	probe = guest(RANGE, true, NULL);
	if (!probe) {
		printf("# lazy guests cannot run here (%s: userfaultfd needs root, "
		       "CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1)\n",
		       strerror(errno));
		printf("RESULT lazy skipped=1\n");
		return 0;
	}
	gfa_guest_destroy(probe);
	settle();
	bench_result_init(&res, "lazy");
	bench_load_begin(&load);
	bench_parts_run(&o, lazy_parts, ARRAY_SIZE(lazy_parts));
	bench_print_load(&load, "the benchmark");
	bench_result_add(&res, "boot_resident_pct", "n/a");
	bench_result_print(&res);
	gfa_backing_destroy(bk);
	gfa_pool_destroy(pool);
	return 0;
}
