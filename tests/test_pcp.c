/* Per-vCPU cache tests: the invariants of docs/decisions.md, entry 22. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "tests/test_util.h"

static struct gfa_pool *pcp_pool(uint64_t frames, unsigned int batch, unsigned int high,
				 unsigned int old_threshold)
{
	struct gfa_pool_config cfg;

	/* high_max = high: no auto-tuning, to keep the arithmetic exact */
	tu_pcp_config(&cfg, frames, batch, high, high);
	cfg.pcp_free_high_old = old_threshold;
	return tu_pool_create(&cfg);
}

static int pcp_count(struct gfa_pcp *c)
{
	struct gfa_pcp_stat st;

	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	return st.count;
}

#define VM(p, field) VMS(p, field)

/*
 * The allocating half of a random churn step (stress tests): one block of an order
 * picked by r (mostly 0, some 1-3 and 9, and 4, which goes to the zone), kept in
 * live/ord at *n.
 */
static void churn_alloc(struct gfa_pcp *c, uint64_t r, uint64_t *live, unsigned int *ord, int *n)
{
	static const unsigned int orders[] = { 0, 0, 0, 1, 2, 3, 9, 4 };
	unsigned int o = orders[(r >> 4) & 7];
	int64_t pfn = gfa_pcp_alloc(c, o, GFA_MT_MOVABLE, 0, 0);

	if (pfn >= 0) {
		live[*n] = (uint64_t)pfn;
		ord[(*n)++] = o;
	}
}

static enum gfa_frame_state state_of(struct gfa_pool *p, uint64_t pfn)
{
	struct gfa_frame_info fi;

	cr_assert_eq(gfa_frame_lookup(p, pfn, &fi), 0);
	return fi.state;
}

Test(pcp, default_sizing_like_the_kernel)
{
	struct gfa_pool *p = tu_pool(1UL << 18); /* 1 GiB zone */
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat st;

	gfa_pcp_stat(c, &st);
	cr_assert_eq(st.batch, 63);
	cr_assert_geq(st.high_min, 4 * st.batch);
	cr_assert_eq(st.free_high_threshold, (unsigned int)(st.batch + st.high_min / 2));
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, refill_takes_batch_shifted_by_order)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 4096, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat st;

	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(pcp_count(c), 62, "63 refilled, one handed out");
	cr_assert_geq(gfa_pcp_alloc(c, 2, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(pcp_count(c), 62 + 14 * 4, "max(63 >> 2, 2) = 15 blocks of order 2");
	cr_assert_geq(gfa_pcp_alloc(c, 9, GFA_MT_MOVABLE, 1, 0), 0);
	gfa_pcp_stat(c, &st);
	/* pageblock order: up to PCP_THP_REFILL, at most half of high_max (4096 frames) */
	cr_assert_eq(st.nr_blocks[9], 3, "4096 / 2 / 512 = 4 THP blocks, one handed out");
	cr_assert_eq(VM(p, pcp_refill), 3);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), (1UL << 16) - 1 - 4 - 512); /* what the caller holds */
	gfa_pool_destroy(p);
}

/* entry 22: threshold 63, order-3 frees from free_count 0: the 9th free triggers */
Test(pcp, free_high_old_threshold_ninth_free)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 10000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t b[16];

	for (int i = 0; i < 16; i++)
		cr_assert_geq(b[i] = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0), 0);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 3, 5), 0);
		cr_assert_eq(pcp_count(c), 8 * (i + 1), "free %d must not trigger", i + 1);
	}
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[8], 3, 5), 0);
	cr_assert_eq(pcp_count(c), 0, "the 9th consecutive order-3 free flushes the cache");
	cr_assert_eq(VM(p, pcp_free_high), 1);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/*
 * Once free_high has fired and flushed everything, each further high-order free into the
 * empty cache fires again and flushes just that block (the kernel's add-then-flush, done
 * without the list): the block is free in the zone, the cache stays empty, each counts
 * as a free_high flush, and high stays at high_min.
 */
Test(pcp, free_high_into_an_empty_cache_flushes_the_block)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 10000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat st;
	int64_t b[16];

	for (int i = 0; i < 16; i++)
		cr_assert_geq(b[i] = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0), 0);
	for (int i = 0; i < 9; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 3, 5), 0);
	cr_assert_eq(pcp_count(c), 0);
	cr_assert_eq(VM(p, pcp_free_high), 1);
	for (int i = 9; i < 16; i++) {
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 3, 5), 0);
		cr_assert_eq(pcp_count(c), 0, "free %d stays out of the cache", i + 1);
		cr_assert_eq(VM(p, pcp_free_high), (uint64_t)(i - 7));
		cr_assert_neq(state_of(p, (uint64_t)b[i]), GFA_FRAME_PCP);
		cr_assert_neq(state_of(p, (uint64_t)b[i]), GFA_FRAME_ALLOCATED);
	}
	cr_assert_eq(VM(p, pcp_free), 16);
	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	cr_assert_eq(st.high, st.high_min);
	/* an order-0 free in between ends the streak: the next high-order free is cached */
	cr_assert_geq(b[0] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0), 0);
	cr_assert_geq(b[1] = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[0], 0, 5), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[1], 3, 5), 0);
	cr_assert_eq(pcp_count(c), 9);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	cr_assert_eq(tu_free_frames(p), 1UL << 16);
	gfa_pool_destroy(p);
}

/* Linux 6.15 threshold batch + high_min/2 = 63 + 100 = 163: the 22nd free triggers */
Test(pcp, free_high_new_threshold)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 200, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t b[32];

	for (int i = 0; i < 32; i++)
		cr_assert_geq(b[i] = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0), 0);
	for (int i = 0; i < 21; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 3, 5), 0);
	cr_assert_eq(pcp_count(c), 168);
	cr_assert_eq(VM(p, pcp_free_high), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[21], 3, 5), 0);
	cr_assert_eq(pcp_count(c), 0);
	cr_assert_eq(VM(p, pcp_free_high), 1);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, free_high_needs_consecutive_high_order_frees)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 10000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 40; i++) {
		/* an order-0 free between high-order frees clears PREV_FREE_HIGH_ORDER */
		int64_t a = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0);
		int64_t z = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0);

		cr_assert_eq(gfa_pcp_free(c, (uint64_t)z, 0, 5), 0);
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 3, 5), 0);
	}
	cr_assert_eq(VM(p, pcp_free_high), 0);
	cr_assert_eq(pcp_count(c), 40 * 9);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, alternating_alloc_free_never_triggers)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 10000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 10000; i++) {
		int64_t a = gfa_pcp_alloc(c, 1 + i % 3, GFA_MT_MOVABLE, 9, 0);

		cr_assert_geq(a, 0);
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 1 + i % 3, 9), 0);
	}
	cr_assert_eq(VM(p, pcp_free_high), 0);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, order0_and_thp_frees_never_trigger_free_high)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 30000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 200; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0,
					  1),
			     0);
	for (int i = 0; i < 20; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 1, 0), 9,
					  1),
			     0);
	cr_assert_eq(VM(p, pcp_free_high), 0);
	cr_assert_eq(pcp_count(c), 200 + 20 * 512);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* Bulk free: the overflowing list first and alone when it holds enough, oldest first. */
Test(pcp, bulk_free_drains_requested_list_first_and_alone)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 4, 16, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t u[2], m[14];

	for (int i = 0; i < 2; i++)
		u[i] = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 1, 0);
	for (int i = 0; i < 14; i++)
		m[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)u[i], 0, 1), 0);
	for (int i = 0; i < 14; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)m[i], 0, 1), 0);
	/* count reached high (16): nr = clamp(free_count 16, batch 4, high - batch 12) */
	cr_assert_eq(pcp_count(c), 4);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(state_of(p, (uint64_t)u[i]), GFA_FRAME_PCP, "other list untouched");
	for (int i = 0; i < 12; i++)
		cr_assert_neq(state_of(p, (uint64_t)m[i]), GFA_FRAME_PCP, "oldest freed first");
	for (int i = 12; i < 14; i++)
		cr_assert_eq(state_of(p, (uint64_t)m[i]), GFA_FRAME_PCP, "newest stay cached");
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, bulk_free_moves_on_with_wraparound)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 4, 16, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t u[6], m[10];

	for (int i = 0; i < 6; i++)
		u[i] = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 1, 0);
	for (int i = 0; i < 10; i++)
		m[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	for (int i = 0; i < 6; i++)
		gfa_pcp_free(c, (uint64_t)u[i], 0, 1);
	for (int i = 0; i < 10; i++)
		gfa_pcp_free(c, (uint64_t)m[i], 0, 1);
	/* 12 to free: all 10 movable, then wrap to unmovable (pindex 0) for 2, oldest first */
	cr_assert_eq(pcp_count(c), 4);
	for (int i = 0; i < 10; i++)
		cr_assert_neq(state_of(p, (uint64_t)m[i]), GFA_FRAME_PCP);
	for (int i = 0; i < 2; i++)
		cr_assert_neq(state_of(p, (uint64_t)u[i]), GFA_FRAME_PCP);
	for (int i = 2; i < 6; i++)
		cr_assert_eq(state_of(p, (uint64_t)u[i]), GFA_FRAME_PCP);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, high_below_batch_frees_one_per_overflow)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 8, 4, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 20; i++)
		gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0, 1);
	cr_assert_eq(pcp_count(c), 3);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, drains)
{
	struct gfa_pool *p = pcp_pool(1UL << 16, 63, 10000, 1);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 100; i++)
		gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0, 1);
	cr_assert_eq(gfa_pcp_drain_partial(c), 63);
	cr_assert_eq(pcp_count(c), 37);
	cr_assert_eq(gfa_pcp_drain(c), 37);
	cr_assert_eq(pcp_count(c), 0);
	for (int i = 0; i < 20; i++)
		gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0, 1);
	cr_assert_eq(gfa_pool_drain_all(p, 1), GFA_ERANGE, "no zone 1");
	cr_assert_eq(pcp_count(c), 20, "a refused drain changes nothing");
	cr_assert_eq(gfa_pool_drain_all(p, 0), 20);
	cr_assert_eq(pcp_count(c), 0);
	/* idle drain: first call notes activity, a later one drains */
	gfa_pcp_free(c, (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0, 1);
	cr_assert_eq(gfa_pool_drain_idle(p, 0), 0);
	cr_assert_eq(gfa_pool_drain_idle(p, 0), 1);
	cr_assert_eq(tu_free_frames(p), 1UL << 16);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, cached_frames_count_as_free_and_show_in_buddyinfo)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 15, 1000, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	char buf[4096];

	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
	cr_assert_eq(tu_free_frames(p), (1UL << 14) - 1);
	gfa_pcp_free(c, (uint64_t)a, 0, 1);
	cr_assert_eq(tu_free_frames(p), 1UL << 14);
	gfa_pool_buddyinfo(p, buf, sizeof(buf));
	cr_assert_not_null(strstr(buf, "Node 0, zone Normal-pcp     15 "), "%s", buf);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, bad_inputs_change_nothing)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 15, 1000, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 1, GFA_MT_MOVABLE, 3, 0);
	int before = pcp_count(c);

	cr_assert_null(gfa_pcp_create(p, 5));
	cr_assert_eq(errno, ERANGE);
	cr_assert_eq(gfa_pcp_alloc(NULL, 0, 0, 0, 0), GFA_EFAULT);
	cr_assert_eq(gfa_pcp_alloc(c, 12, GFA_MT_MOVABLE, 0, 0), GFA_EORDER);
	cr_assert_eq(gfa_pcp_alloc(c, 0, (enum gfa_migratetype)9, 0, 0), GFA_EMIGRATE);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 3), GFA_EWRONGORDER);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 1, 4), GFA_EOWNER);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a + 1, 0, 3), GFA_ENOTHEAD);
	cr_assert_eq(gfa_pcp_free(c, 1UL << 30, 0, 3), GFA_ERANGE);
	/* pfns whose end wraps past 2^64 (pfn + size would look in range) */
	cr_assert_eq(gfa_pcp_free(c, UINT64_MAX, 0, 3), GFA_ERANGE);
	cr_assert_eq(gfa_pcp_free(c, 0 - (1UL << 1), 1, 3), GFA_ERANGE);
	cr_assert_eq(gfa_pcp_free(c, 0 - (1UL << 9), 9, 3), GFA_ERANGE);
	{
		uint64_t wrap[2] = { 0 - (1UL << 2), 0 - (1UL << 3) };

		cr_assert_eq(gfa_pcp_free_many(c, wrap, 1, 2, 3), GFA_ERANGE);
		cr_assert_eq(gfa_pcp_free_many(c, wrap + 1, 1, 3, 3), GFA_ERANGE);
	}
	cr_assert_eq(pcp_count(c), before);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 1, 3), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 1, 3), GFA_EDOUBLEFREE,
		     "double free into the cache");
	cr_assert_eq(pcp_count(c), before + 2);
	cr_assert_eq(VM(p, err_double_free), 1);
	cr_assert_eq(VM(p, err_wrong_order), 1);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(pcp, no_high_order_mode_caches_only_order0)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;
	struct gfa_pcp *c;

	gfa_pool_config_init(&cfg, 1UL << 14);
	cfg.pcp_no_high_order = true;
	p = gfa_pool_create(&cfg);
	c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 3, GFA_MT_MOVABLE, 1, 0);
	cr_assert_eq(pcp_count(c), 0);
	gfa_pcp_free(c, (uint64_t)a, 3, 1);
	cr_assert_eq(pcp_count(c), 0);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* ---- multi-threaded stress ---- */

#define XQ 4096
struct xchg {
	pthread_mutex_t lock;
	uint64_t pfn[XQ];
	unsigned int order[XQ];
	int n;
	atomic_int done; /* workers finished */
};

struct worker {
	struct gfa_pool *pool;
	struct xchg *x;
	int id, iters;
	uint64_t seed;
};

static void *stress_worker(void *arg)
{
	struct worker *w = arg;
	struct gfa_pcp *c = gfa_pcp_create(w->pool, 0);
	uint64_t mine[256];
	unsigned int mord[256];
	int n = 0;

	cr_assert_not_null(c);
	for (int i = 0; i < w->iters; i++) {
		uint64_t r = tu_rand(&w->seed);

		if (n < 256 && (r & 1)) {
			churn_alloc(c, r, mine, mord, &n);
		} else if (n) {
			/* half the frees cross threads through the exchange */
			n--;
			if (r & 2) {
				cr_assert_eq(gfa_pcp_free(c, mine[n], mord[n], 0), 0);
				continue;
			}
			pthread_mutex_lock(&w->x->lock);
			if (w->x->n < XQ) { /* hand it over */
				w->x->pfn[w->x->n] = mine[n];
				w->x->order[w->x->n++] = mord[n];
			} else { /* exchange full: keep it */
				n++;
			}
			if (w->x->n && (r & 4)) {
				uint64_t pfn = w->x->pfn[--w->x->n];
				unsigned int o = w->x->order[w->x->n];

				pthread_mutex_unlock(&w->x->lock);
				cr_assert_eq(gfa_pcp_free(c, pfn, o, 0), 0);
				continue;
			}
			pthread_mutex_unlock(&w->x->lock);
		}
	}
	while (n--)
		cr_assert_eq(gfa_pcp_free(c, mine[n], mord[n], 0), 0);
	gfa_pcp_destroy(c);
	atomic_fetch_add(&w->x->done, 1);
	return NULL;
}

static void run_stress(int nthreads, int iters)
{
	struct gfa_pool *p = tu_pool(1UL << 15);
	struct xchg x = { .n = 0 };
	pthread_t t[8];
	struct worker w[8];

	pthread_mutex_init(&x.lock, NULL);
	for (int i = 0; i < nthreads; i++) {
		w[i] = (struct worker){ p, &x, i, iters, 0x1234567ULL * (i + 1) };
		pthread_create(&t[i], NULL, stress_worker, &w[i]);
	}
	/* remote drains and checks for as long as the owners run (20 rounds were over
	 * in a few ms: a remote drain that did not wait for an owner went unnoticed) */
	for (long k = 0; k < 20 || atomic_load(&x.done) < nthreads; k++) {
		ASSERT_POOL_OK(p);
		gfa_pool_drain_all(p, -1);
		gfa_pool_drain_idle(p, 1);
		usleep(2000); /* the owners run between rounds (back to back they starved) */
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	while (x.n) {
		x.n--;
		cr_assert_eq(gfa_free(p, x.pfn[x.n], x.order[x.n], 0), 0);
	}
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), 1UL << 15);
	gfa_pool_destroy(p);
}

Test(pcp_stress, two_threads, .timeout = 300)
{
	run_stress(2, tu_sanitizer() ? 50000 : 400000);
}

/*
 * The fallback owner protocol (a full fence per call instead of membarrier on the remote
 * side): the same stress with remote drains and checks while the owners run.  The mode is
 * fixed per process, so this needs a fresh process (Criterion's fork per test).
 */
Test(pcp_stress, two_threads_fence_mode, .timeout = 300)
{
	setenv("GFA_PCP_FENCE", "1", 1);
	if (strcmp(gfa_pcp_sync_mode(), "fence"))
		cr_skip_test("the owner protocol was fixed earlier in this process (%s); the "
			     "fence mode runs only with one test per process",
			     gfa_pcp_sync_mode());
	run_stress(2, tu_sanitizer() ? 50000 : 200000);
}

Test(pcp_stress, eight_threads, .timeout = 300)
{
	run_stress(8, tu_sanitizer() ? 20000 : 200000);
}

/*
 * Misuse: one cache hammered by two threads at once.  A call that overlaps the other
 * thread's gets GFA_ETHREAD (how often depends on scheduling); nothing is corrupted.
 */
struct misuse {
	struct gfa_pcp *c;
	int ethread;
	pthread_barrier_t *go;
};
static void *misuse_worker(void *arg)
{
	struct misuse *m = arg;

	pthread_barrier_wait(m->go); /* start together: the calls overlap */
	for (int i = 0; i < 20000; i++) {
		int64_t a = gfa_pcp_alloc(m->c, 0, GFA_MT_MOVABLE, 0, 0);

		if (a == GFA_ETHREAD) {
			m->ethread++;
			continue;
		}
		cr_assert_geq(a, 0);
		while (gfa_pcp_free(m->c, (uint64_t)a, 0, 0) == GFA_ETHREAD)
			m->ethread++;
	}
	return NULL;
}

Test(pcp_stress, shared_cache_misuse_is_safe, .timeout = 300)
{
	struct gfa_pool *p = tu_pool(1UL << 14);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	pthread_barrier_t go;
	struct misuse m[2] = { { c, 0, &go }, { c, 0, &go } };
	pthread_t t[2];

	pthread_barrier_init(&go, NULL, 2);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, misuse_worker, &m[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&go);
	cr_log_info("calls refused with GFA_ETHREAD: %d", m[0].ethread + m[1].ethread);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	cr_assert_eq(tu_free_frames(p), 1UL << 14);
	gfa_pool_destroy(p);
}

/*
 * Hand-over: a cache used by one thread, then by another after the first is done with
 * it, changes owner without an error (the owner protocol's takeover), and the first
 * thread taking it back works too.
 */
struct handover {
	struct gfa_pcp *c;
	int64_t pfn;
	int err;
};
static void *handover_worker(void *arg)
{
	struct handover *h = arg;

	if (h->pfn >= 0) {
		h->err = gfa_pcp_free(h->c, (uint64_t)h->pfn, 0, 5);
		h->pfn = -1;
	} else {
		h->pfn = gfa_pcp_alloc(h->c, 0, GFA_MT_MOVABLE, 5, 0);
	}
	return NULL;
}

Test(pcp, cache_changes_hands_between_calls)
{
	struct gfa_pool *p = tu_pool(1UL << 14);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct handover h = { c, -1, 0 };
	pthread_t t;

	for (int round = 0; round < 6; round++) {
		/* alternate: a new thread, then the main thread, each allocating or freeing */
		cr_assert_eq(pthread_create(&t, NULL, handover_worker, &h), 0);
		pthread_join(t, NULL);
		cr_assert_eq(h.err, 0, "round %d: %d", round, h.err);
		handover_worker(&h);
		cr_assert_eq(h.err, 0, "round %d (main): %d", round, h.err);
	}
	cr_assert_lt(h.pfn, 0, "six rounds end with the block freed");
	cr_assert_eq(VM(p, err_thread), 0);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	cr_assert_eq(tu_free_frames(p), 1UL << 14);
	gfa_pool_destroy(p);
}

/*
 * pcp_free_strict: two threads free the same blocks at the same time through their own
 * caches; every block is freed exactly once, the other free gets GFA_EDOUBLEFREE (or
 * GFA_EBUSY), and the pool stays consistent.
 */
#define RACE_BLOCKS 4096
struct racer {
	struct gfa_pcp *c;
	const int64_t *pfns;
	pthread_barrier_t *go;
	_Atomic int *step; /* both threads meet before each block: real overlap */
	int ok, dbl;
};
static void *racer_main(void *arg)
{
	struct racer *r = arg;

	pthread_barrier_wait(r->go);
	for (int i = 0; i < RACE_BLOCKS; i++) {
		int err;

		atomic_fetch_add(r->step, 1);
		while (atomic_load(r->step) < 2 * (i + 1))
			;
		err = gfa_pcp_free(r->c, (uint64_t)r->pfns[i], 0, 9);

		if (!err)
			r->ok++;
		else if (err == GFA_EDOUBLEFREE || err == GFA_EBUSY)
			r->dbl++;
	}
	return NULL;
}

Test(pcp_stress, strict_free_decides_racing_double_frees, .timeout = 120)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;
	static int64_t pfns[RACE_BLOCKS];
	pthread_barrier_t go;
	struct racer r[2];
	pthread_t t[2];
	_Atomic int step;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		cr_skip_test("needs two CPUs for the two racing threads to overlap");
	gfa_pool_config_init(&cfg, 1UL << 14);
	cfg.pcp_free_strict = true;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < RACE_BLOCKS; i++) {
			pfns[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 9, 0);
			cr_assert_geq(pfns[i], 0);
		}
		pthread_barrier_init(&go, NULL, 2);
		atomic_store(&step, 0);
		for (int k = 0; k < 2; k++) {
			r[k] = (struct racer){ gfa_pcp_create(p, 0), pfns, &go, &step, 0, 0 };
			pthread_create(&t[k], NULL, racer_main, &r[k]);
		}
		for (int k = 0; k < 2; k++)
			pthread_join(t[k], NULL);
		pthread_barrier_destroy(&go);
		cr_assert_eq(r[0].ok + r[1].ok, RACE_BLOCKS, "each block freed exactly once");
		cr_assert_eq(r[0].dbl + r[1].dbl, RACE_BLOCKS, "the other free refused");
		ASSERT_POOL_OK(p);
		for (int k = 0; k < 2; k++)
			gfa_pcp_destroy(r[k].c);
		cr_assert_eq(tu_free_frames(p), 1UL << 14);
	}
	gfa_pool_destroy(p);
}

/*
 * fork(): the child keeps the owner protocol's mode and a working membarrier, the
 * forking thread keeps its caches, and new threads and remote holds work there.
 */
static void *fork_child_worker(void *arg)
{
	struct gfa_pool *p = arg;
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 3, 0);

	if (a < 0 || gfa_pcp_free(c, (uint64_t)a, 0, 3))
		return (void *)1;
	gfa_pcp_destroy(c);
	return NULL;
}

Test(pcp, caches_work_in_a_fork_child)
{
	struct gfa_pool *p = tu_pool(1UL << 14);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 3, 0);
	const char *mode = gfa_pcp_sync_mode();
	int status = 0;
	pid_t pid;

	cr_assert_geq(a, 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		pthread_t t;
		void *ret = (void *)1;
		int bad = 0;

		/* same mode; if membarrier, the child may use it (registered) */
		bad |= strcmp(gfa_pcp_sync_mode(), mode) != 0;
		if (!strcmp(mode, "membarrier"))
			bad |= syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) !=
			       0;
		bad |= gfa_pcp_free(c, (uint64_t)a, 0, 3) != 0;
		bad |= gfa_pool_drain_all(p, -1) < 0;
		bad |= pthread_create(&t, NULL, fork_child_worker, p) != 0;
		if (!bad)
			pthread_join(t, &ret);
		bad |= ret != NULL;
		bad |= gfa_pool_check(p, NULL, 0) != 0;
		_exit(bad ? 1 : 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 3), 0);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/*
 * The owner protocol under fire: two owners churn their caches at full speed while a
 * third thread holds them remotely as fast as it can (drains and vmstat, each with its
 * membarrier), and a fourth raises and lowers the zone's isolation gate (a compaction
 * run).  Any window where an owner and a remote holder both touch a cache shows up as a
 * wrong count, a frame on no list or two, or a failed free.
 */
struct fire {
	struct gfa_pool *p;
	atomic_bool stop;
	atomic_ulong remote_ops;
};
static void *fire_remote(void *arg)
{
	struct fire *f = arg;
	struct gfa_vmstat vs;

	while (!atomic_load(&f->stop)) {
		gfa_pool_drain_all(f->p, 0);
		gfa_pool_vmstat(f->p, &vs);
		atomic_fetch_add(&f->remote_ops, 2);
	}
	return NULL;
}

static void *fire_compact(void *arg)
{
	struct fire *f = arg;

	while (!atomic_load(&f->stop)) {
		gfa_compact_zone(f->p, 0, -1, GFA_COMPACT_SYNC_LIGHT);
		usleep(1000); /* a whole-zone pass holds the zone lock: let owners refill */
	}
	return NULL;
}

/* An owner churning its own cache: random orders, up to 256 live blocks, own frees. */
struct fire_owner {
	struct gfa_pool *p;
	double secs;
	uint64_t seed;
	int failed_frees;
	long ops;
};

static double fire_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *fire_owner_main(void *arg)
{
	struct fire_owner *o = arg;
	struct gfa_pcp *c = gfa_pcp_create(o->p, 0);
	uint64_t live[256];
	unsigned int ord[256];
	int n = 0;

	/* run for a while rather than a count: the point is overlap with the others */
	for (double end = fire_now() + o->secs; fire_now() < end; o->ops++) {
		uint64_t r = tu_rand(&o->seed);

		if (n < 256 && (r & 1)) {
			churn_alloc(c, r, live, ord, &n);
		} else if (n) {
			n--;
			o->failed_frees += gfa_pcp_free(c, live[n], ord[n], 0) != 0;
		}
	}
	while (n--)
		o->failed_frees += gfa_pcp_free(c, live[n], ord[n], 0) != 0;
	gfa_pcp_destroy(c);
	return NULL;
}

static void owners_against_remote_holders(void)
{
	struct fire f = { .p = tu_pool(1UL << 17) };
	struct fire_owner o[2];
	pthread_t t[4];
	for (int i = 0; i < 2; i++) {
		o[i] = (struct fire_owner){ f.p, 1.5, 0xfeedULL * (i + 3), 0, 0 };
		pthread_create(&t[i], NULL, fire_owner_main, &o[i]);
	}
	pthread_create(&t[2], NULL, fire_remote, &f);
	pthread_create(&t[3], NULL, fire_compact, &f);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&f.stop, true);
	pthread_join(t[2], NULL);
	pthread_join(t[3], NULL);
	cr_log_info("owner calls %ld + %ld, remote holds %lu", o[0].ops, o[1].ops,
		    atomic_load(&f.remote_ops));
	cr_assert_gt(atomic_load(&f.remote_ops), 100, "the remote side hardly ran");
	cr_assert_eq(o[0].failed_frees + o[1].failed_frees, 0);
	ASSERT_POOL_OK(f.p);
	cr_assert_eq(tu_free_frames(f.p), 1UL << 17);
	gfa_pool_destroy(f.p);
}

Test(pcp_stress, owners_against_remote_holders_and_the_gate, .timeout = 300)
{
	owners_against_remote_holders();
}

/* The same in fence mode (a fresh process per test: the mode is fixed per process). */
Test(pcp_stress, owners_against_remote_holders_and_the_gate_fence_mode, .timeout = 300)
{
	setenv("GFA_PCP_FENCE", "1", 1);
	owners_against_remote_holders();
}

/*
 * The free fast path guesses a block's list from its pageblock's type.  A block of
 * another type than its pageblock (an UNMOVABLE fallback that did not steal the block)
 * must still go back to its own list: the UNMOVABLE request gets it again at once.
 */
Test(pcp, block_of_another_type_than_its_pageblock_returns_to_its_own_list)
{
	struct gfa_pool *p = pcp_pool(4 * GFA_PAGEBLOCK_FRAMES, 15, 1000, 0);
	uint64_t n = 4 * GFA_PAGEBLOCK_FRAMES, hole = 2 * GFA_PAGEBLOCK_FRAMES + 7;
	struct gfa_frame_info fi;
	struct gfa_pcp *c;
	int64_t u;

	for (uint64_t i = 0; i < n; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), 0);
	cr_assert_eq(gfa_free(p, hole, 0, 1), 0);
	u = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, GFA_ALLOC_NOCOMPACT);
	cr_assert_eq(u, (int64_t)hole, "the fallback takes the only free frame");
	cr_assert_eq(gfa_frame_lookup(p, hole, &fi), 0);
	cr_assert_eq(fi.mt, GFA_MT_UNMOVABLE);
	cr_assert_eq(fi.block_mt, GFA_MT_MOVABLE, "the pageblock was not stolen");
	c = gfa_pcp_create(p, 0);
	cr_assert_not_null(c);
	cr_assert_eq(gfa_pcp_drain(c), 0); /* this thread owns it: the fast path runs */
	cr_assert_eq(gfa_pcp_free(c, hole, 0, 2), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_pcp_alloc(c, 0, GFA_MT_UNMOVABLE, 3, GFA_ALLOC_NOCOMPACT), (int64_t)hole);
	cr_assert_eq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 3, GFA_ALLOC_NOCOMPACT), GFA_ENOMEM);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/*
 * A pthread key destructor that runs after gfa's (a vCPU's cleanup) and keeps using a
 * cache must not keep the exited thread's record, which a new thread may reuse: both
 * would pass as the owner and use the cache at once.  Here the destructor churns on a
 * cache while a new thread (which gets the released record) churns on the same cache:
 * the two may see GFA_ETHREAD, and nothing else; the pool stays consistent.
 */
static pthread_key_t late_key;
static struct gfa_pcp *late_cache;
static atomic_int late_go, late_errors, late_ethread;

static void late_churn(void)
{
	/* long enough to overlap the second thread (sanitizers: slower calls, fewer) */
	int n = tu_sanitizer() ? 50000 : 1000000;

	for (int i = 0; i < n; i++) {
		int64_t a = gfa_pcp_alloc(late_cache, 0, GFA_MT_MOVABLE, 9, 0);
		int err;

		if (a < 0) {
			atomic_fetch_add(a == GFA_ETHREAD ? &late_ethread : &late_errors, 1);
			continue;
		}
		while ((err = gfa_pcp_free(late_cache, (uint64_t)a, 0, 9)) == GFA_ETHREAD)
			atomic_fetch_add(&late_ethread, 1);
		if (err)
			atomic_fetch_add(&late_errors, 1);
	}
}

static void late_destructor(void *arg)
{
	(void)arg;
	atomic_store(&late_go, 1);
	late_churn();
}

static void *late_first(void *arg)
{
	(void)arg;
	pthread_setspecific(late_key, (void *)1);
	if (gfa_pcp_alloc(late_cache, 0, GFA_MT_MOVABLE, 9, 0) < 0) /* leaks one frame */
		atomic_fetch_add(&late_errors, 1);
	return NULL;
}

static void *late_second(void *arg)
{
	(void)arg;
	late_churn();
	return NULL;
}

Test(pcp_stress, destructor_using_a_cache_after_the_record_is_released, .timeout = 120)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 0, 0, 0);
	pthread_t a, b;
	char msg[256];

	late_cache = gfa_pcp_create(p, 0);
	cr_assert_not_null(late_cache);
	cr_assert_geq(gfa_pcp_drain(late_cache), 0); /* gfa's key exists before ours */
	cr_assert_eq(pthread_key_create(&late_key, late_destructor), 0);
	cr_assert_eq(pthread_create(&a, NULL, late_first, NULL), 0);
	while (!atomic_load(&late_go))
		sched_yield();
	cr_assert_eq(pthread_create(&b, NULL, late_second, NULL), 0); /* reuses a's record */
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	cr_assert_eq(atomic_load(&late_errors), 0, "errors other than GFA_ETHREAD");
	cr_assert_eq(gfa_pool_check(p, msg, sizeof(msg)), 0, "%s", msg);
	cr_log_info("GFA_ETHREAD seen %d times\n", atomic_load(&late_ethread));
	gfa_pcp_destroy(late_cache);
	pthread_key_delete(late_key);
	gfa_pool_destroy(p);
}

/* pgalloc/pgfree count what callers do; a cache's refill and drain are neither. */
Test(pcp, pgalloc_and_pgfree_balance_across_a_cache)
{
	struct gfa_pool *p = pcp_pool(1UL << 14, 15, 1000, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
	int64_t b = gfa_pcp_alloc(c, 2, GFA_MT_MOVABLE, 1, 0);

	cr_assert(a >= 0 && b >= 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 1), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b, 2, 1), 0);
	cr_assert_gt(gfa_pcp_drain(c), 0);
	cr_assert_eq(tu_free_frames(p), 1UL << 14);
	cr_assert_eq(VM(p, pgalloc_blocks), 2);
	cr_assert_eq(VM(p, pgfree_blocks), 2, "pgfree_blocks %lu",
		     (unsigned long)VM(p, pgfree_blocks));
	cr_assert_eq(VM(p, pgalloc), 5);
	cr_assert_eq(VM(p, pgfree), 5, "pgfree %lu", (unsigned long)VM(p, pgfree));
	cr_assert_eq(VM(p, pcp_free), 2);
	gfa_pcp_destroy(c);
	cr_assert_eq(VM(p, pgfree_blocks), 2, "destroying the cache changes no count");
	gfa_pool_destroy(p);
}

/* high's auto-tuning saturates at high_max; tunables that would overflow are refused. */
Test(pcp, high_tunables_are_bounded)
{
	struct gfa_pool_config cfg;
	struct gfa_pcp_stat st;
	struct gfa_pool *p;
	struct gfa_pcp *c;

	gfa_pool_config_init(&cfg, 1UL << 14);
	cfg.pcp_high = GFA_PCP_HIGH_MAX + 1;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_assert_eq(errno, EINVAL);
	cfg.pcp_high = 0;
	cfg.pcp_batch = GFA_PCP_BATCH_MAX + 1;
	cr_assert_null(gfa_pool_create(&cfg));
	cfg.pcp_batch = 63;
	cfg.pcp_high = GFA_PCP_HIGH_MAX - 10;
	cfg.pcp_high_max = GFA_PCP_HIGH_MAX;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	c = gfa_pcp_create(p, 0);
	for (int i = 0; i < 4; i++) {
		cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
		cr_assert_eq(gfa_pcp_drain(c) >= 0, 1);
	}
	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	cr_assert(st.high >= st.high_min && st.high <= (int)GFA_PCP_HIGH_MAX,
		  "high %d outside [%d, %u]", st.high, st.high_min, GFA_PCP_HIGH_MAX);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* A bad entry in the middle of a batch: the caller learns how many were freed. */
Test(pcp, free_many_reports_what_it_freed_before_a_bad_entry)
{
	struct gfa_pool *p = tu_pool(1UL << 14);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_frame_info fi;
	uint64_t b[3], v[3];

	for (int i = 0; i < 3; i++)
		b[i] = (uint64_t)gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	v[0] = b[0];
	v[1] = 1UL << 30;
	v[2] = b[2];
	cr_assert_eq(gfa_pcp_free_many(c, v, 3, 0, 1), 1);
	cr_assert_eq(gfa_frame_lookup(p, b[2], &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED, "entries after the bad one stay the caller's");
	cr_assert_eq(gfa_pcp_free_many(c, v + 1, 2, 0, 1), GFA_ERANGE);
	cr_assert_eq(gfa_pcp_free_many(c, v + 2, 1, 0, 1), 1);
	cr_assert_eq(gfa_free(p, b[1], 0, 1), 0);
	cr_assert_eq(gfa_pool_drain_all(p, 5), GFA_ERANGE);
	gfa_pcp_destroy(c);
	cr_assert_eq(tu_free_frames(p), 1UL << 14);
	gfa_pool_destroy(p);
}

/*
 * A claim may count free frames parked in caches: it drains them when they make up the
 * difference - and only then: a claim even they cannot cover, or a full claim table,
 * fails with the caches as they were (both used to empty every cache of the zone).
 */
Test(pcp, a_claim_counts_frames_parked_in_caches)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_zone_stat st;
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
	uint64_t pcp_before;

	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 1), 0);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free, 4096);
	pcp_before = st.nr_pcp;
	cr_assert_gt(pcp_before, 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 42, 4097), -ENOSPC);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_pcp, pcp_before, "a hopeless claim drained the caches");
	for (uint64_t o = 0; o < GFA_MAX_CLAIMS; o++)
		cr_assert_eq(gfa_zone_claim(p, 0, 100 + o, 1), 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 42, 1), -ENOSPC);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_pcp, pcp_before, "a full table drained the caches: %lu -> %lu",
		     (unsigned long)pcp_before, (unsigned long)st.nr_pcp);
	for (uint64_t o = 0; o < GFA_MAX_CLAIMS; o++)
		cr_assert_geq(gfa_zone_unclaim(p, 0, 100 + o), 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 42, 4096), 0, "every free frame may be claimed");
	cr_assert_eq(gfa_zone_unclaim(p, 0, 42), 4096);
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- fork() while other threads use caches or the zone path ---- */

static atomic_int fork_stop;
static struct gfa_pool *fork_pool;
static struct gfa_pcp *fork_cache;

static void *fork_churn(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&fork_stop, memory_order_relaxed)) {
		int64_t a = gfa_pcp_alloc(fork_cache, 0, GFA_MT_MOVABLE, 7, 0);

		if (a >= 0)
			gfa_pcp_free(fork_cache, (uint64_t)a, 0, 7);
	}
	return NULL;
}

static void *fork_stats(void *arg)
{
	struct gfa_pcp_stat st;

	(void)arg;
	while (!atomic_load_explicit(&fork_stop, memory_order_relaxed))
		gfa_pcp_stat(fork_cache, &st);
	return NULL;
}

static void *fork_zone_churn(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&fork_stop, memory_order_relaxed)) {
		int64_t a = gfa_alloc(fork_pool, 0, 0, GFA_MT_MOVABLE, 8, 0);

		if (a >= 0)
			gfa_free(fork_pool, (uint64_t)a, 0, 8);
	}
	return NULL;
}

/* The child: the zone path and its own cache work, and the pool is consistent. */
static void fork_child(void)
{
	char msg[256] = "";
	int64_t a;

	alarm(5); /* a lock or tag held across fork hangs here */
	a = gfa_alloc(fork_pool, 0, 0, GFA_MT_MOVABLE, 9, 0);
	if (a < 0 || gfa_free(fork_pool, (uint64_t)a, 0, 9))
		_exit(2);
	a = gfa_pcp_alloc(fork_cache, 0, GFA_MT_MOVABLE, 7, 0);
	if (a < 0 || gfa_pcp_free(fork_cache, (uint64_t)a, 0, 7) || gfa_pcp_drain(fork_cache) < 0)
		_exit(3);
	if (gfa_pool_check(fork_pool, msg, sizeof(msg))) {
		fprintf(stderr, "child: %s\n", msg);
		_exit(1);
	}
	_exit(0);
}

/*
 * Fork n times while another thread runs fn: inside calls on a cache (churn), holding
 * it remotely (stats), or in the zone path.  A call caught half done gave children a
 * torn cache (82 of 200), a remote tag carried into the child hung every child on its
 * own cache, and so did a zone lock held at fork.
 */
static void fork_children(void *(*fn)(void *), int n)
{
	pthread_t t;
	int bad = 0;

	fork_pool = tu_pool(1UL << 14);
	fork_cache = gfa_pcp_create(fork_pool, 0);
	cr_assert_not_null(fork_cache);
	cr_assert_geq(gfa_pcp_drain(fork_cache), 0); /* this thread owns it first */
	atomic_store(&fork_stop, 0);
	cr_assert_eq(pthread_create(&t, NULL, fn, NULL), 0);
	usleep(10000);
	for (int i = 0; i < n; i++) {
		int status = 0;
		pid_t pid = fork();

		cr_assert_geq(pid, 0);
		if (!pid)
			fork_child();
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		bad += !WIFEXITED(status) || WEXITSTATUS(status);
	}
	atomic_store(&fork_stop, 1);
	pthread_join(t, NULL);
	cr_assert_eq(bad, 0, "%d of %d children hung or found the pool broken", bad, n);
	ASSERT_POOL_OK(fork_pool);
	gfa_pcp_destroy(fork_cache);
	gfa_pool_destroy(fork_pool);
}

Test(pcp_stress, fork_while_an_owner_is_inside_a_call, .timeout = 120)
{
	fork_children(fork_churn, tu_sanitizer() ? 20 : 200);
}

Test(pcp_stress, fork_while_a_cache_is_held_remotely, .timeout = 120)
{
	fork_children(fork_stats, 20);
}

Test(pcp_stress, fork_while_another_thread_uses_the_zone_path, .timeout = 120)
{
	fork_children(fork_zone_churn, tu_sanitizer() ? 20 : 200);
}

/* A vCPU thread that comes and goes: each life allocates and frees 64 frames. */
struct cache_churn {
	struct gfa_pool *pool;
	atomic_bool stop;
};

static void *cache_lives(void *arg)
{
	struct cache_churn *c = arg;

	while (!atomic_load(&c->stop)) {
		struct gfa_pcp *pcp = gfa_pcp_create(c->pool, 0);
		int64_t pfn[64];

		cr_assert_not_null(pcp);
		for (int i = 0; i < 64; i++)
			pfn[i] = gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, 1, 0);
		for (int i = 0; i < 64; i++)
			if (pfn[i] >= 0)
				gfa_pcp_free(pcp, (uint64_t)pfn[i], 0, 1);
		gfa_pcp_destroy(pcp);
	}
	return NULL;
}

/*
 * vmstat's event counters never go down (rates are computed from them).  The readers
 * took the zones' counters, then the live caches': a cache destroyed in between folded
 * its counts into a zone already read and left the list, and they vanished.
 */
Test(pcp, vmstat_never_goes_down_while_caches_die, .timeout = 60)
{
	struct cache_churn c = { .pool = tu_pool(8192) };
	uint64_t pool_alloc = 0, pool_free = 0, zone_alloc = 0, drops = 0, reads = 0;
	struct timespec t0, t;
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, cache_lives, &c), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct gfa_vmstat vs, zs;

		cr_assert_eq(gfa_pool_vmstat(c.pool, &vs), 0);
		cr_assert_eq(gfa_zone_vmstat(c.pool, 0, &zs), 0);
		drops += vs.pgalloc_blocks < pool_alloc || vs.pgfree_blocks < pool_free ||
			 zs.pgalloc_blocks < zone_alloc;
		pool_alloc = vs.pgalloc_blocks;
		pool_free = vs.pgfree_blocks;
		zone_alloc = zs.pgalloc_blocks;
		reads++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1000 &&
		 !drops);
	atomic_store(&c.stop, true);
	pthread_join(th, NULL);
	ASSERT_POOL_OK(c.pool);
	gfa_pool_destroy(c.pool);
	cr_assert_eq(drops, 0, "pgalloc_blocks/pgfree_blocks went down after %lu reads",
		     (unsigned long)reads);
}

/*
 * gfa_zone_stat read the buddy lists, then the caches: a refill or drain in between was
 * counted twice or not at all (8194 free frames of 8192; a bounded retry still let
 * 4097 of 4096 through).  The churn holds at most 2 frames at any time.
 */
static atomic_int zs_stop;

static void *zs_churn(void *arg)
{
	struct gfa_pool *p = arg;
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t b[2];

	while (!atomic_load(&zs_stop)) {
		b[0] = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
		b[1] = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
		gfa_pcp_free(c, (uint64_t)b[0], 0, 1);
		gfa_pcp_free(c, (uint64_t)b[1], 0, 1);
		gfa_pcp_drain(c);
	}
	gfa_pcp_destroy(c);
	return NULL;
}

Test(pcp, zone_stat_nr_free_is_a_possible_value, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8192);
	struct gfa_zone_stat st;
	pthread_t t;
	uint64_t lo = UINT64_MAX, hi = 0;

	/* half the zone held: a count taken twice stays below nr_frames (no cap hides it) */
	for (int i = 0; i < 4096; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 9, 0), 0);
	atomic_store(&zs_stop, 0);
	cr_assert_eq(pthread_create(&t, NULL, zs_churn, p), 0);
	for (int i = 0; i < 200000; i++) {
		gfa_zone_stat(p, 0, &st);
		lo = st.nr_free < lo ? st.nr_free : lo;
		hi = st.nr_free > hi ? st.nr_free : hi;
	}
	atomic_store(&zs_stop, 1);
	pthread_join(t, NULL);
	cr_assert(hi <= 4096 && lo >= 4094, "nr_free ranged %lu..%lu, 4096 frames free",
		  (unsigned long)lo, (unsigned long)hi);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

static uint64_t pcpx_vm(struct gfa_pool *p, size_t off)
{
	struct gfa_vmstat vs;

	gfa_pool_vmstat(p, &vs);
	return *(uint64_t *)((char *)&vs + off);
}
#define PCPX_VM(p, field) pcpx_vm(p, offsetof(struct gfa_vmstat, field))

/*
 * docs/decisions.md, entry 22: the free_high threshold must stay reachable,
 * T <= cap + (1 << order) - 1 with cap = batch << 5.  With the default sizing, a zone of
 * 64 MiB .. ~350 MiB gets batch 3..15 and high_min 1024, so T = batch + 512 > cap + 7:
 * consecutive order-3 frees never fire free_high.
 */
Test(pcp, free_high_threshold_reachable_with_default_sizing)
{
	struct gfa_pool *p = tu_pool(1UL << 16); /* 256 MiB zone, default config */
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat st;
	int64_t b[120];

	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	for (int i = 0; i < 120; i++)
		cr_assert_geq(b[i] = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 5, 0), 0);
	/* 120 consecutive order-3 frees: 960 frames, below high (no ordinary bulk free) */
	for (int i = 0; i < 120; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 3, 5), 0);
	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	cr_assert_gt(
		PCPX_VM(p, pcp_free_high), 0,
		"120 consecutive order-3 frees never fired free_high (count %d, free_count %d)",
		st.count, st.free_count);
	cr_assert_leq(
		st.free_high_threshold, (unsigned int)(st.batch << 5) + 7,
		"threshold %u unreachable: free_count is capped at %d + 7 (batch %d, high_min %d)",
		st.free_high_threshold, st.batch << 5, st.batch, st.high_min);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* pcp_refill counts "refill batches taken from the zone": an empty zone gives none. */
Test(pcp, failed_refill_is_not_a_refill)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	for (int i = 0; i < 4; i++)
		cr_assert_geq(gfa_alloc(p, 0, 10, GFA_MT_MOVABLE, 5, 0), 0);
	for (int i = 0; i < 10; i++)
		cr_assert_eq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT),
			     GFA_ENOMEM);
	cr_assert_eq(PCPX_VM(p, pcp_refill), 0, "pcp_refill %lu after 10 refills that took nothing",
		     (unsigned long)PCPX_VM(p, pcp_refill));
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/*
 * gfa_pool_drain_idle reads the clock before it takes pool->pcp_lock.  Two callers: the
 * one that read the clock later may get the lock first and stamp idle_since_ms with its
 * later time; the other then computes now - idle_since_ms < 0, which wraps (uint64_t)
 * to a huge idle time, and drains a cache that was active a moment ago.  No cache here
 * is ever idle for 60 s, so nothing may be drained.
 */
static atomic_int idle_stop;
static atomic_long idle_drained;
static struct gfa_pool *idle_pool;

static void *idle_drainer(void *arg)
{
	(void)arg;
	while (!atomic_load(&idle_stop)) {
		int64_t n = gfa_pool_drain_idle(idle_pool, 60000);

		if (n > 0)
			atomic_fetch_add(&idle_drained, n);
	}
	return NULL;
}

static void *idle_owner(void *arg)
{
	struct gfa_pcp *c = arg;
	struct timespec ts = { 0, 150 * 1000 };

	while (!atomic_load(&idle_stop)) {
		int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);

		if (a >= 0)
			gfa_pcp_free(c, (uint64_t)a, 0, 1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

Test(pcp, concurrent_idle_drains_never_drain_an_active_cache, .timeout = 60)
{
	pthread_t d[2], o;
	struct gfa_pcp *c;

	idle_pool = tu_pool(1UL << 14);
	c = gfa_pcp_create(idle_pool, 0);
	atomic_store(&idle_stop, 0);
	atomic_store(&idle_drained, 0);
	pthread_create(&o, NULL, idle_owner, c);
	for (int i = 0; i < 2; i++)
		pthread_create(&d[i], NULL, idle_drainer, NULL);
	for (int i = 0; i < 15 && !atomic_load(&idle_drained); i++)
		usleep(100 * 1000);
	atomic_store(&idle_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(d[i], NULL);
	pthread_join(o, NULL);
	cr_assert_eq(atomic_load(&idle_drained), 0,
		     "drain_idle(60000 ms) drained %ld frames of a cache active within the last ms",
		     atomic_load(&idle_drained));
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(idle_pool);
	gfa_pool_destroy(idle_pool);
}

/* Bad input is counted where the pool is known (as gfa_zone_stat and gfa_pool_vmstat do). */
Test(pcp, pcp_stat_null_result_is_counted)
{
	struct gfa_pool *p = tu_pool(1UL << 14);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	uint64_t before = PCPX_VM(p, err_fault);

	cr_assert_eq(gfa_pcp_stat(c, NULL), GFA_EFAULT);
	cr_assert_eq(PCPX_VM(p, err_fault), before + 1, "err_fault %lu -> %lu",
		     (unsigned long)before, (unsigned long)PCPX_VM(p, err_fault));
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * nr_pcp_free() is clamp(free_count, batch, high - batch): with high < 2 * batch the
 * upper bound wins and a batch stays on the list (gfa freed a whole batch, leaving 4).
 */
Test(pcp, bulk_free_keeps_a_batch_when_high_is_under_two_batches)
{
	struct gfa_pool *p = pcp_pool(4096, 8, 12, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t b[12];

	for (int i = 0; i < 12; i++)
		cr_assert_geq(b[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0);
	for (int i = 0; i < 12; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b[i], 0, 1), 0);
	/* the 12th free reached high: high - batch = 4 frames go, a batch stays */
	cr_assert_eq(pcp_count(c), 8, "count %d after the flush at high 12, batch 8", pcp_count(c));
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* nr_pcp_alloc(): high below batch is the kernel's "PCP disabled": refill one block. */
Test(pcp, refill_takes_one_block_when_high_is_under_batch)
{
	struct gfa_pool *p = pcp_pool(4096, 8, 4, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);

	cr_assert_geq(a, 0);
	cr_assert_eq(pcp_count(c), 0, "refilled %d frames more than asked with high 4 < batch 8",
		     pcp_count(c));
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 1), 0);
	cr_assert_eq(gfa_pcp_drain(c), 1);
	cr_assert_eq(gfa_pcp_drain(c), 0);
	cr_assert_eq(VM(p, pcp_drain), 1, "an empty cache's drain counted");
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* high == batch: clamp(free_count, batch, high - batch) is 0; one frame per overflow. */
Test(pcp, high_equal_to_batch_still_flushes)
{
	struct gfa_pool *p = pcp_pool(4096, 8, 8, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat st;

	for (int i = 0; i < 100; i++) {
		int64_t b = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);

		cr_assert_geq(b, 0);
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)b, 0, 1), 0);
	}
	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	cr_assert_leq(st.count, st.high, "cache holds %d frames, high %d batch %d", st.count,
		      st.high, st.batch);
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

static struct gfa_pcp_stat pcp_st(struct gfa_pcp *c)
{
	struct gfa_pcp_stat st;

	cr_assert_eq(gfa_pcp_stat(c, &st), 0);
	return st;
}

/*
 * Linux 6.7's auto-tuning of high between high_min and high_max: a free-heavy cache
 * raises high to hold a batch more than its recent frees (nr_pcp_high) instead of
 * flushing at high_min; every refill raises it by a batch (nr_pcp_alloc); the periodic
 * pass decays it by an eighth toward high_min and returns what is held above it
 * (decay_pcp_high).
 */
Test(pcp, high_auto_tunes_between_high_min_and_high_max)
{
	struct gfa_pool *p = tu_pcp_pool(1UL << 14, 8, 64, 512);
	struct gfa_pcp_stat st;
	struct gfa_pcp *c;
	int64_t v[100];
	int high;

	c = gfa_pcp_create(p, 0);
	cr_assert_not_null(c);
	for (int i = 0; i < 100; i++)
		cr_assert_geq(v[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)v[i], 0, 1), 0);
	st = pcp_st(c);
	cr_assert_eq(st.count, 100, "a free-heavy cache flushed at high_min (count %d)", st.count);
	cr_assert_geq(st.high, 100);
	cr_assert_leq(st.high, st.free_count + st.batch);
	/* the periodic pass: an eighth of high goes, and what is held above it */
	high = st.high;
	cr_assert_geq(gfa_pool_drain_idle(p, 60000), 0);
	st = pcp_st(c);
	cr_assert_eq(st.high, high - (high >> 3) > 64 ? high - (high >> 3) : 64);
	cr_assert_leq(st.count, st.high);
	for (int i = 0; i < 40; i++)
		cr_assert_geq(gfa_pool_drain_idle(p, 60000), 0);
	st = pcp_st(c);
	cr_assert_eq(st.high, 64, "high decays to high_min (%d)", st.high);
	cr_assert_leq(st.count, 64);
	/* a refill raises high by a batch */
	cr_assert_eq(gfa_pcp_drain(c) >= 0, 1);
	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(pcp_st(c).high, 64 + 8);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* The decay's floor (count - batch << 5) can lie above high_max after an order-9
 * refill: high stays within [high_min, high_max] whatever the cache holds. */
Test(pcp, decay_keeps_high_within_high_max)
{
	struct gfa_pool *p = tu_pcp_pool(1UL << 15, 8, 32, 64);
	struct gfa_pcp_stat st;
	struct gfa_pcp *c;

	c = gfa_pcp_create(p, 0);
	cr_assert_not_null(c);
	cr_assert_geq(gfa_pcp_alloc(c, 9, GFA_MT_MOVABLE, 1, 0), 0); /* refill: 2 blocks */
	cr_assert_geq(gfa_pool_drain_idle(p, 60000), 0);             /* one decay pass */
	st = pcp_st(c);
	cr_assert_leq(st.high, st.high_max, "high %d above high_max %d after a decay (count %d)",
		      st.high, st.high_max, st.count);
	cr_assert_leq(st.count, st.high);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* high below batch is the kernel's disabled pcp (one block per refill): frees do not
 * tune it back up to whole batches. */
Test(pcp, a_disabled_cache_stays_disabled_after_frees)
{
	struct gfa_pool *p = tu_pcp_pool(4096, 8, 4, 0);
	struct gfa_pcp_stat st;
	struct gfa_pcp *c;
	int64_t v[40];

	c = gfa_pcp_create(p, 0);
	for (int i = 0; i < 40; i++)
		cr_assert_geq(v[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0);
	for (int i = 0; i < 40; i++)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)v[i], 0, 1), 0);
	cr_assert_geq(gfa_pcp_drain(c), 0);
	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
	st = pcp_st(c);
	cr_assert_eq(st.count, 0, "refilled %d more frames with high_min %d < batch %d (high %d)",
		     st.count, st.high_min, st.batch, st.high);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}
