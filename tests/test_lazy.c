/*
 * Lazy guests (GFA_GUEST_LAZY): no frame at create, each 2 MiB range taken at its first
 * touch from the faulting thread's cache and mapped at 2 MiB; the balloon and reports
 * make ranges lazy again; moves keep every write; overcommit ends in a refusal the
 * toucher sees (or a reclaim hook that finds frames); a snapshot round trip.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <gfa/vmm.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"
#include "refvmm/guest_writers.h"

#define MiB   (1UL << 20)
#define RANGE (2 * MiB)

struct lz {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
};

static struct gfa_guest *lz_guest(struct lz *l, uint64_t bytes, bool small_only,
				  const struct gfa_guest_lazy *lazy)
{
	struct gfa_guest_config gc = { .mem_bytes = bytes,
				       .small_only = small_only,
				       .flags = GFA_GUEST_LAZY,
				       .lazy = lazy };
	struct gfa_guest *g = gfa_guest_create(l->pool, l->b, &gc);

	if (!g && (errno == EPERM || errno == EOPNOTSUPP || errno == ENOSYS))
		cr_skip_test("no userfaultfd here (%s): lazy guests cannot run", strerror(errno));
	cr_assert_not_null(g, "lazy guest: %s", strerror(errno));
	return g;
}

static void lz_setup(struct lz *l, uint64_t pool_bytes, uint64_t guest_bytes,
		     const struct gfa_guest_lazy *lazy)
{
	struct gfa_backing_config bc = { 0 };

	l->pool = tu_pool(pool_bytes / GFA_FRAME_SIZE);
	l->b = gfa_backing_create(l->pool, &bc);
	cr_assert_not_null(l->b);
	l->g = guest_bytes ? lz_guest(l, guest_bytes, false, lazy) : NULL;
}

static void lz_done(struct lz *l)
{
	gfa_guest_destroy(l->g);
	ASSERT_POOL_OK(l->pool);
	gfa_backing_destroy(l->b);
	gfa_pool_destroy(l->pool);
}

static struct gfa_guest_stat lz_stat(struct gfa_guest *g)
{
	struct gfa_guest_stat st;

	cr_assert_eq(gfa_guest_stat(g, &st), 0);
	return st;
}

/* Write a word into each 4 KiB page of [off, off + len) of the window: seed ^ gpa. */
static void lz_write(struct gfa_guest *g, uint64_t off, uint64_t len, uint64_t seed)
{
	char *w = gfa_guest_hva(g);

	for (uint64_t a = off; a < off + len; a += GFA_FRAME_SIZE)
		*(volatile uint64_t *)(w + a) = seed ^ a;
}

/* Pages of [off, off + len) that do not read seed ^ gpa (seed 0: zero). */
static uint64_t lz_bad(struct gfa_guest *g, uint64_t off, uint64_t len, uint64_t seed)
{
	const char *w = gfa_guest_hva(g);
	uint64_t bad = 0;

	for (uint64_t a = off; a < off + len; a += GFA_FRAME_SIZE)
		bad += *(volatile const uint64_t *)(w + a) != (seed ? seed ^ a : 0);
	return bad;
}

Test(lazy, create_takes_no_frame_and_a_first_touch_takes_a_2m_block, .timeout = 60)
{
	struct lz l;
	struct gfa_guest_stat st;
	uint64_t free0;

	lz_setup(&l, 64 * MiB, 0, NULL);
	free0 = tu_free_frames(l.pool);
	l.g = lz_guest(&l, 32 * MiB, false, NULL);
	st = lz_stat(l.g);
	cr_assert_eq(tu_free_frames(l.pool), free0, "a lazy create takes no frame");
	cr_assert_eq(st.populated_bytes, 0);
	cr_assert_eq(st.lazy_bytes, 32 * MiB);
	cr_assert_eq(st.huge_ranges + st.small_ranges, 0);
	/* reads are first touches too, and read zero */
	cr_assert_eq(lz_bad(l.g, 0, 4 * MiB, 0), 0);
	lz_write(l.g, 4 * MiB, 28 * MiB, 0x77);
	st = lz_stat(l.g);
	cr_assert_eq(st.lazy_faults, 16, "one fault per 2 MiB range, not %lu",
		     (unsigned long)st.lazy_faults);
	cr_assert_eq(st.lazy_huge_faults, 16);
	cr_assert_eq(st.huge_ranges, 16);
	cr_assert_eq(st.populated_bytes, 32 * MiB);
	cr_assert_eq(st.lazy_bytes, 0);
	cr_assert_eq(free0 - tu_free_frames(l.pool), 32 * MiB / GFA_FRAME_SIZE);
	cr_assert_eq(lz_bad(l.g, 4 * MiB, 28 * MiB, 0x77), 0);
	cr_assert_eq(lz_bad(l.g, 0, 4 * MiB, 0), 0);
	ASSERT_POOL_OK(l.pool);
	gfa_guest_destroy(l.g);
	l.g = NULL;
	cr_assert_eq(tu_free_frames(l.pool), free0, "destroy frees what the touches took");
	lz_done(&l);
}

static char shmem_saved[32];

static void shmem_fini(void)
{
	if (shmem_saved[0])
		tu_shmem_thp_restore(shmem_saved);
}

Test(lazy, first_touches_are_mapped_with_pmds, .timeout = 60, .fini = shmem_fini)
{
	struct lz l;
	int lock = tu_shmem_thp_lock();
	int64_t pmd;

	if (tu_shmem_thp_advise(shmem_saved, sizeof(shmem_saved))) {
		shmem_saved[0] = '\0';
		tu_shmem_thp_unlock(lock);
		cr_skip_test("cannot set shmem_enabled=advise: PMD mappings not checked");
	}
	lz_setup(&l, 64 * MiB, 16 * MiB, NULL);
	lz_write(l.g, 0, 16 * MiB, 1);
	pmd = gfa_smaps_pmd_bytes(gfa_guest_hva(l.g), 16 * MiB);
	tu_shmem_thp_restore(shmem_saved);
	shmem_saved[0] = '\0';
	tu_shmem_thp_unlock(lock);
	cr_assert_eq(pmd, (int64_t)(16 * MiB), "%ld of 16 MiB PMD-mapped", (long)pmd);
	lz_done(&l);
}

struct vcpu {
	pthread_t th;
	struct gfa_guest *g;
	struct gfa_pcp *pcp; /* NULL: an unregistered thread */
	pthread_barrier_t *bar;
	uint64_t first, n; /* its ranges */
	int tid;
	struct gfa_guest_vcpu_stat st;
	int err;
};

static void *vcpu_run(void *arg)
{
	struct vcpu *v = arg;

	v->tid = gettid();
	if (v->pcp)
		v->err = gfa_guest_vcpu_cache(v->g, v->tid, v->pcp);
	pthread_barrier_wait(v->bar);
	/* every thread faults at once, each on its own ranges, then all on one */
	lz_write(v->g, v->first * RANGE, v->n * RANGE, (uint64_t)v->tid);
	*(volatile char *)gfa_guest_hva(v->g) = 1;
	if (v->pcp && !v->err)
		v->err = gfa_guest_vcpu_stat(v->g, v->tid, &v->st);
	return NULL;
}

Test(lazy, each_vcpu_faults_from_its_own_cache, .timeout = 60)
{
	enum { NV = 4, PER = 6 };
	struct lz l;
	struct vcpu v[NV + 1];
	pthread_barrier_t bar;
	struct gfa_guest_stat st;
	uint64_t served = 0;

	lz_setup(&l, 256 * MiB, (NV + 1) * PER * RANGE + RANGE, NULL);
	pthread_barrier_init(&bar, NULL, NV + 1);
	for (unsigned int i = 0; i <= NV; i++) {
		v[i] = (struct vcpu){ .g = l.g, .bar = &bar, .first = 1 + i * PER, .n = PER };
		/* the last is a device thread: no cache, the zone path */
		v[i].pcp = i < NV ? gfa_pcp_create(l.pool, 0) : NULL;
		cr_assert(i == NV || v[i].pcp);
		cr_assert_eq(pthread_create(&v[i].th, NULL, vcpu_run, &v[i]), 0);
	}
	for (unsigned int i = 0; i <= NV; i++)
		pthread_join(v[i].th, NULL);
	for (unsigned int i = 0; i < NV; i++) {
		cr_assert_eq(v[i].err, 0);
		cr_assert_geq(v[i].st.faults, PER, "vCPU %u: %lu faults", i,
			      (unsigned long)v[i].st.faults);
		cr_assert_eq(v[i].st.cache_faults, v[i].st.faults, "all from its own cache");
		cr_assert_eq(v[i].st.huge_faults, v[i].st.faults);
		served += v[i].st.faults;
		cr_assert_eq(lz_bad(l.g, v[i].first * RANGE, PER * RANGE, (uint64_t)v[i].tid), 0);
	}
	st = lz_stat(l.g);
	cr_assert_eq(st.lazy_faults, (NV + 1) * PER + 1);
	cr_assert_eq(st.lazy_cache_faults, served,
		     "the device thread's %u faults took the zone path", PER);
	ASSERT_POOL_OK(l.pool);
	gfa_guest_destroy(l.g);
	l.g = NULL;
	for (unsigned int i = 0; i < NV; i++)
		gfa_pcp_destroy(v[i].pcp);
	pthread_barrier_destroy(&bar);
	lz_done(&l);
}

Test(lazy, the_balloon_makes_ranges_lazy_again, .timeout = 60)
{
	struct lz l;
	struct gfa_gpa_range r[] = { { 2 * RANGE, RANGE },
				     { 5 * RANGE + 8192, 4096 },
				     { 9 * RANGE, RANGE } }; /* the last never touched */
	struct gfa_guest_stat st;
	uint64_t free0;

	lz_setup(&l, 64 * MiB, 20 * MiB, NULL);
	lz_write(l.g, 0, 9 * RANGE, 5);
	free0 = tu_free_frames(l.pool);
	cr_assert_eq(gfa_balloon_inflate(l.g, r, 3), (int64_t)((RANGE + 4096) / GFA_FRAME_SIZE));
	st = lz_stat(l.g);
	cr_assert_eq(st.populated_bytes, 9 * RANGE - RANGE - 4096);
	cr_assert_eq(st.ballooned_frames, (2 * RANGE + 4096) / GFA_FRAME_SIZE);
	cr_assert_eq(tu_free_frames(l.pool) - free0, (RANGE + 4096) / GFA_FRAME_SIZE);
	/* the frames went back dirty; a touch takes a fresh zeroed block */
	cr_assert_eq(lz_bad(l.g, 2 * RANGE, RANGE, 0), 0);
	cr_assert_eq(lz_bad(l.g, 5 * RANGE + 8192, 4096, 0), 0);
	cr_assert_eq(lz_bad(l.g, 5 * RANGE, 8192, 5), 0);
	cr_assert_eq(lz_bad(l.g, 0, 2 * RANGE, 5), 0);
	cr_assert_eq(lz_bad(l.g, 3 * RANGE, 2 * RANGE, 5), 0);
	st = lz_stat(l.g);
	cr_assert_eq(st.populated_bytes, 9 * RANGE, "the touches took the ranges again");
	cr_assert_eq(gfa_balloon_deflate(l.g, r, 3),
		     (int64_t)((2 * RANGE + 4096) / GFA_FRAME_SIZE));
	cr_assert_eq(lz_stat(l.g).ballooned_frames, 0);
	lz_done(&l);
}

static int report_result = 1;

static void report_done(void *cookie, int result)
{
	(void)cookie;
	report_result = result;
}

Test(lazy, a_report_makes_ranges_lazy_again, .timeout = 60)
{
	struct lz l;
	struct gfa_gpa_range r[] = { { RANGE, 2 * RANGE } };
	struct gfa_free_report *rep;
	struct gfa_guest_report_stat rs;
	uint64_t free0;

	lz_setup(&l, 64 * MiB, 16 * MiB, NULL);
	lz_write(l.g, 0, 4 * RANGE, 9);
	rep = gfa_guest_report_create(l.b, l.g);
	cr_assert_not_null(rep);
	free0 = tu_free_frames(l.pool);
	cr_assert_eq(gfa_guest_report_free(rep, r, 1, report_done, NULL), 0);
	cr_assert_eq(gfa_guest_report_flush(rep, 5000), 0);
	cr_assert_eq(report_result, 0);
	cr_assert_eq(gfa_guest_report_stat(rep, &rs), 0);
	cr_assert_eq(rs.bytes_released, 2 * RANGE);
	cr_assert_eq(tu_free_frames(l.pool) - free0, 2 * RANGE / GFA_FRAME_SIZE,
		     "a lazy guest's reported frames go back to the pool");
	cr_assert_eq(lz_stat(l.g).populated_bytes, 2 * RANGE);
	cr_assert_eq(lz_bad(l.g, RANGE, 2 * RANGE, 0), 0);
	cr_assert_eq(lz_bad(l.g, 0, RANGE, 9), 0);
	cr_assert_eq(lz_bad(l.g, 3 * RANGE, RANGE, 9), 0);
	gfa_guest_report_destroy(rep);
	lz_done(&l);
}

/*
 * Writers (user stores and io_uring reads: kernel-mode first touches) fill a small-block
 * lazy guest while collapse and then full compaction move it: no write lost.
 */
Test(lazy, first_touches_moves_and_collapse_lose_no_write, .timeout = 120)
{
	static const enum gw_kind kinds[] = { GW_STORE, GW_URING };
	struct lz l;
	struct gw_set ws;
	struct gfa_guest_stat st;
	uint64_t lost, errors = 0;

	lz_setup(&l, 64 * MiB, 0, NULL);
	l.g = lz_guest(&l, 16 * MiB, true, NULL);
	cr_assert_eq(gw_start(&ws, gfa_guest_hva(l.g), 16 * MiB, 2, kinds), 0);
	for (int i = 0; i < 20000 && gw_writes(&ws) < 2 * ws.pages; i++)
		usleep(500);
	st = lz_stat(l.g);
	cr_assert_eq(st.populated_bytes, 16 * MiB);
	cr_assert_eq(st.lazy_huge_faults, 0, "small_only: orders 3 and below");
	cr_assert_gt(gfa_guest_collapse(l.g, 8), 0);
	gfa_compact_zone(l.pool, 0, -1, GFA_COMPACT_SYNC);
	for (int i = 0; i < 20000 && gw_writes(&ws) < 4 * ws.pages; i++)
		usleep(500);
	lost = gw_stop(&ws);
	for (unsigned int i = 0; i < ws.n; i++)
		errors += ws.w[i].errors;
	st = lz_stat(l.g);
	cr_assert_gt(st.collapses, 0);
	cr_assert_eq(lost, 0, "%lu writes lost", (unsigned long)lost);
	cr_assert_eq(errors, 0, "%lu kernel-mode writes failed", (unsigned long)errors);
	cr_assert_eq(st.pauses, 0);
	lz_done(&l);
}

static __thread sigjmp_buf bus_jmp;

static void on_sigbus(int sig)
{
	(void)sig;
	siglongjmp(bus_jmp, 1);
}

/* Touch the guest range by range until an access faults: ranges touched. */
static uint64_t touch_until_refused(struct gfa_guest *g)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;
	volatile uint64_t r = 0;

	sigaction(SIGBUS, &sa, &old);
	if (!sigsetjmp(bus_jmp, 1))
		for (; r < gfa_guest_size(g) / RANGE; r++)
			lz_write(g, r * RANGE, RANGE, 3);
	sigaction(SIGBUS, &old, NULL);
	return r;
}

Test(lazy, overcommit_without_a_hook_ends_in_sigbus_not_a_hang, .timeout = 60)
{
	struct lz l;
	struct gfa_guest_stat st;
	uint64_t touched;

	lz_setup(&l, 16 * MiB, 64 * MiB, NULL); /* 4x the pool */
	touched = touch_until_refused(l.g);
	st = lz_stat(l.g);
	cr_assert_lt(touched, 32, "the pool has 8 ranges, the guest 32");
	cr_assert_geq(touched, 7, "the pool's frames were there to be taken");
	cr_assert_eq(st.lazy_refused, 1);
	cr_assert_eq(st.populated_bytes / GFA_FRAME_SIZE,
		     16 * MiB / GFA_FRAME_SIZE - tu_free_frames(l.pool));
	cr_assert_eq(lz_bad(l.g, 0, RANGE, 3), 0);
	lz_done(&l);
}

/* The reclaim hook: inflate the donor guest's balloon by one touched range a call. */
struct donor {
	struct gfa_guest *g;
	uint64_t next, calls;
};

static int64_t reclaim_from_donor(void *ctx, struct gfa_guest *g, uint64_t frames)
{
	struct donor *d = ctx;
	struct gfa_gpa_range r = { d->next * RANGE, RANGE };
	int64_t got;

	(void)g;
	(void)frames;
	d->calls++;
	if (d->next * RANGE >= gfa_guest_size(d->g))
		return 0;
	d->next++;
	got = gfa_balloon_inflate(d->g, &r, 1);
	return got;
}

Test(lazy, overcommit_with_a_hook_takes_another_guests_balloon, .timeout = 60)
{
	struct lz l;
	struct donor d = { 0 };
	struct gfa_guest_lazy lazy = { .reclaim = reclaim_from_donor, .reclaim_ctx = &d };
	struct gfa_guest *g;
	struct gfa_guest_stat st;

	lz_setup(&l, 32 * MiB, 0, NULL);
	d.g = lz_guest(&l, 24 * MiB, false, NULL);
	lz_write(d.g, 0, 24 * MiB, 4);
	g = lz_guest(&l, 24 * MiB, false, &lazy);
	/* 8 ranges free, 12 to touch: the hook gives 4 of the donor's */
	cr_assert_eq(touch_until_refused(g), 12);
	st = lz_stat(g);
	cr_assert_eq(st.lazy_refused, 0);
	cr_assert_geq(st.lazy_reclaims, 4);
	cr_assert_geq(d.calls, 4);
	cr_assert_eq(lz_bad(g, 0, 24 * MiB, 3), 0);
	cr_assert_eq(lz_stat(d.g).populated_bytes, 24 * MiB - d.next * RANGE);
	cr_assert_eq(lz_bad(d.g, d.next * RANGE, 24 * MiB - d.next * RANGE, 4), 0);
	gfa_guest_destroy(g);
	gfa_guest_destroy(d.g);
	lz_done(&l);
}

Test(lazy, a_snapshot_round_trip_reads_back_what_was_saved, .timeout = 60)
{
	struct lz l;
	char path[] = "/var/tmp/gfa-lazy-snapshot-XXXXXX";
	int fd = mkstemp(path);
	struct gfa_guest_lazy lazy = { .flags = GFA_LAZY_FILL_FD, .fill_fd = fd, .fill_off = 4096 };
	struct gfa_gpa_range ball = { 3 * RANGE, RANGE };
	struct gfa_guest_stat st;
	int64_t written;

	cr_assert_geq(fd, 0);
	unlink(path);
	lz_setup(&l, 64 * MiB, 16 * MiB, NULL);
	lz_write(l.g, 0, 4 * RANGE, 11);           /* ranges 0-3 */
	lz_write(l.g, 6 * RANGE + 4096, 4096, 11); /* one page of range 6 */
	written = gfa_guest_save(l.g, fd, 4096);
	cr_assert_gt(written, 0);
	cr_assert_leq(written, (int64_t)(5 * RANGE), "the lazy ranges are not written");
	cr_assert_eq(lz_stat(l.g).populated_bytes, 5 * RANGE, "save populates nothing");
	gfa_guest_destroy(l.g);
	l.g = lz_guest(&l, 16 * MiB, false, &lazy);
	close(fd); /* the guest holds its own */
	st = lz_stat(l.g);
	cr_assert_eq(st.populated_bytes, 0, "restore reads nothing up front");
	cr_assert_eq(lz_bad(l.g, 0, 3 * RANGE, 11), 0);
	cr_assert_eq(lz_bad(l.g, 6 * RANGE, 4096, 0), 0);
	cr_assert_eq(lz_bad(l.g, 6 * RANGE + 4096, 4096, 11), 0);
	cr_assert_eq(lz_bad(l.g, 6 * RANGE + 8192, RANGE - 8192, 0), 0);
	cr_assert_eq(lz_bad(l.g, 7 * RANGE, RANGE, 0), 0);
	/* a page ballooned after the restore comes back zeroed, not from the snapshot */
	cr_assert_eq(lz_bad(l.g, 3 * RANGE, RANGE, 11), 0);
	cr_assert_gt(gfa_balloon_inflate(l.g, &ball, 1), 0);
	cr_assert_eq(lz_bad(l.g, 3 * RANGE, RANGE, 0), 0);
	st = lz_stat(l.g);
	cr_assert_geq(st.lazy_filled_bytes, (uint64_t)written);
	cr_assert_eq(lz_bad(l.g, 4 * RANGE, 2 * RANGE, 0), 0);
	lz_done(&l);
}

Test(lazy, bad_configs_and_calls_are_refused)
{
	struct lz l;
	struct gfa_guest_lazy lazy = { .fill_fd = -1, .flags = GFA_LAZY_FILL_FD };
	struct gfa_guest_config gc = { .mem_bytes = 4 * MiB,
				       .flags = GFA_GUEST_LAZY | GFA_GUEST_PINNED };
	struct gfa_guest_config full = { .mem_bytes = 4 * MiB };
	struct gfa_pool *other = tu_pool(1024);
	struct gfa_pcp *pcp;
	struct gfa_guest *f;
	uint64_t free0;

	lz_setup(&l, 32 * MiB, 4 * MiB, NULL);
	free0 = tu_free_frames(l.pool);
	errno = 0;
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, EINVAL, "lazy and pinned");
	gc.flags = 0;
	gc.lazy = &lazy;
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, EINVAL, "lazy settings without GFA_GUEST_LAZY");
	gc.flags = GFA_GUEST_LAZY;
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, EINVAL, "GFA_LAZY_FILL_FD without a file");
	lazy = (struct gfa_guest_lazy){ .flags = 1U << 7 };
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, EINVAL, "unknown lazy flags");
	lazy = (struct gfa_guest_lazy){ .reserved[3] = 1 };
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, EINVAL, "nonzero reserved words");
	cr_assert_eq(tu_free_frames(l.pool), free0);

	f = gfa_guest_create(l.pool, l.b, &full);
	cr_assert_not_null(f);
	pcp = gfa_pcp_create(other, 0);
	cr_assert_eq(gfa_guest_vcpu_cache(f, gettid(), NULL), GFA_EINVAL, "not a lazy guest");
	cr_assert_eq(gfa_guest_vcpu_cache(l.g, 0, NULL), GFA_EINVAL);
	cr_assert_eq(gfa_guest_vcpu_cache(l.g, gettid(), pcp), GFA_EINVAL, "another pool's");
	cr_assert_eq(gfa_guest_vcpu_cache(l.g, gettid(), NULL), -ENOENT);
	cr_assert_eq(gfa_guest_vcpu_cache(NULL, gettid(), NULL), GFA_EFAULT);
	cr_assert_eq(gfa_guest_vcpu_stat(l.g, gettid(), NULL), GFA_EFAULT);
	cr_assert_eq(gfa_guest_save(NULL, 1, 0), GFA_EFAULT);
	cr_assert_eq(gfa_guest_save(l.g, -1, 0), -EBADF);
	gfa_pcp_destroy(pcp);
	gfa_pool_destroy(other);
	gfa_guest_destroy(f);
	lz_done(&l);
}

Test(lazy, without_userfaultfd_a_lazy_guest_is_refused, .timeout = 30)
{
	struct lz l;
	struct gfa_guest_config gc = { .mem_bytes = 4 * MiB, .flags = GFA_GUEST_LAZY };

	setenv("GFA_NO_UFFD", "1", 1);
	lz_setup(&l, 16 * MiB, 0, NULL);
	errno = 0;
	cr_assert_null(gfa_guest_create(l.pool, l.b, &gc));
	cr_assert_eq(errno, ECANCELED, "%s", strerror(errno));
	lz_done(&l);
}
