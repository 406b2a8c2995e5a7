// SPDX-License-Identifier: MIT
/*
 * Arenas (decisions 38): a zone's runs of frames with locks and free lists of their own.
 * The zone path and the caches take one arena's lock; everything else takes the zone
 * lock over all of them.  Pools here are metadata only (the allocator layer never
 * touches the frames), so 2^17 frames cost a few MiB of descriptors.
 */
#include <pthread.h>
#include "tests/test_util.h"
#include "allocator/internal.h" /* the arenas of a zone */

#define AR_FRAMES (1UL << 17) /* four arenas of the smallest size */

static struct gfa_pool *arena_pool(uint64_t frames, unsigned int arenas)
{
	struct gfa_pool_config cfg;

	gfa_pool_config_init(&cfg, frames);
	cfg.arenas = arenas;
	return tu_pool_create(&cfg);
}

Test(arena, a_zone_gets_the_arenas_it_asks_for_within_their_size)
{
	static const struct {
		uint64_t frames;
		unsigned int ask, got;
	} cases[] = {
		{ AR_FRAMES, 4, 4 },       { AR_FRAMES, 1, 1 },
		{ AR_FRAMES, 3, 2 },       /* powers of two: 2^16 frames each */
		{ AR_FRAMES, 64, 4 },      /* none below 2^15 frames */
		{ AR_FRAMES + 512, 4, 3 }, /* 2^16 each, the last short */
		{ 1UL << 14, 8, 1 },       { 1UL << 22, 100, 16 }, /* at most ARENAS_MAX */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gfa_pool *p = arena_pool(cases[i].frames, cases[i].ask);
		struct gfa_zone *z = &p->zones[0];

		cr_assert_eq(z->nr_arenas, cases[i].got, "%lu frames, %u asked: %u arenas",
			     (unsigned long)cases[i].frames, cases[i].ask, z->nr_arenas);
		cr_assert_geq(z->arena_order, ARENA_MIN_ORDER);
		cr_assert_leq((uint64_t)(z->nr_arenas - 1) << z->arena_order, cases[i].frames - 1);
		ASSERT_POOL_OK(p);
		gfa_pool_destroy(p);
	}
}

/* One thread takes every 2 MiB block: its CPU's arena first, then the others. */
Test(arena, one_thread_takes_every_arena_and_the_zone_merges_back)
{
	struct gfa_pool *p = arena_pool(AR_FRAMES, 4);
	uint64_t n = AR_FRAMES >> GFA_PAGEBLOCK_ORDER, seen[4] = { 0 };
	int64_t *pfn = calloc(n, sizeof(*pfn));
	struct gfa_zone_stat st;

	cr_assert_eq(p->zones[0].nr_arenas, 4);
	for (uint64_t i = 0; i < n; i++) {
		pfn[i] = gfa_alloc(p, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, 7, 0);
		cr_assert_geq(pfn[i], 0, "block %lu of %lu: %ld", (unsigned long)i,
			      (unsigned long)n, (long)pfn[i]);
		seen[arena_index(&p->zones[0], (uint64_t)pfn[i])]++;
	}
	for (int a = 0; a < 4; a++)
		cr_assert_eq(seen[a], n / 4, "arena %d gave %lu blocks", a, (unsigned long)seen[a]);
	cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 7, GFA_ALLOC_NOCOMPACT), GFA_ENOMEM);
	ASSERT_POOL_OK(p);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(gfa_free(p, (uint64_t)pfn[i], GFA_PAGEBLOCK_ORDER, 7), 0);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free_blocks[GFA_MAX_ORDER][GFA_MT_MOVABLE], AR_FRAMES >> GFA_MAX_ORDER,
		     "every MAX_ORDER block merged again");
	ASSERT_POOL_OK(p);
	free(pfn);
	gfa_pool_destroy(p);
}

/* A claim sends the zone path to the zone lock, which sums every arena's free frames. */
Test(arena, a_claim_counts_the_free_frames_of_every_arena)
{
	struct gfa_pool *p = arena_pool(AR_FRAMES, 4);
	uint64_t got = 0;

	cr_assert_eq(gfa_zone_claim(p, 0, 1, AR_FRAMES - 1024), 0);
	/* another owner gets the unclaimed 1024 frames and no more */
	while (gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 2, GFA_ALLOC_NOCOMPACT) >= 0)
		got++;
	cr_assert_eq(got, 1024);
	/* the claimer gets the rest, from all four arenas */
	for (uint64_t i = 0; i < (AR_FRAMES - 1024) >> GFA_PAGEBLOCK_ORDER; i++)
		cr_assert_geq(gfa_alloc(p, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, 1,
					GFA_ALLOC_NOCOMPACT),
			      0);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 1), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- threads on the arenas' locks beside the zone lock's holders ---- */

#define AR_SLOTS 256

struct ar_thread {
	struct gfa_pool *pool;
	struct gfa_pcp *pcp; /* NULL: the zone path */
	uint64_t owner, seed;
	long ops;
	int64_t pfn[AR_SLOTS];
	unsigned int order[AR_SLOTS];
};

static const unsigned int ar_orders[] = { 0, 0, 0, 1, 2, 3, 9, 9, 10 };

static int64_t ar_get(struct ar_thread *t, unsigned int order)
{
	return t->pcp ?
		       gfa_pcp_alloc(t->pcp, order, GFA_MT_MOVABLE, t->owner, GFA_ALLOC_NOCOMPACT) :
		       gfa_alloc(t->pool, 0, order, GFA_MT_MOVABLE, t->owner, GFA_ALLOC_NOCOMPACT);
}

static int ar_put(struct ar_thread *t, uint64_t pfn, unsigned int order)
{
	return t->pcp ? gfa_pcp_free(t->pcp, pfn, order, t->owner) :
			gfa_free(t->pool, pfn, order, t->owner);
}

static void *ar_worker(void *arg)
{
	struct ar_thread *t = arg;

	for (long i = 0; i < t->ops; i++) {
		uint64_t r = tu_rand(&t->seed);
		unsigned int s = (unsigned int)(r % AR_SLOTS);

		if (t->pfn[s] >= 0) {
			cr_assert_eq(ar_put(t, (uint64_t)t->pfn[s], t->order[s]), 0);
			t->pfn[s] = -1;
		} else {
			t->order[s] =
				ar_orders[(r >> 20) % (sizeof(ar_orders) / sizeof(ar_orders[0]))];
			t->pfn[s] = ar_get(t, t->order[s]);
			cr_assert(t->pfn[s] >= 0 || t->pfn[s] == GFA_ENOMEM, "%ld",
				  (long)t->pfn[s]);
		}
	}
	for (int s = 0; s < AR_SLOTS; s++)
		if (t->pfn[s] >= 0)
			cr_assert_eq(ar_put(t, (uint64_t)t->pfn[s], t->order[s]), 0);
	return NULL;
}

/* What takes the zone lock meanwhile: the checker, claims, stats, compaction. */
static void *ar_zone_locker(void *arg)
{
	struct gfa_pool *p = arg;
	char msg[256];

	for (int i = 0; i < 200; i++) {
		struct gfa_zone_stat st;

		cr_assert_eq(gfa_zone_claim(p, 0, 99, 64), 0);
		cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
		cr_assert_geq(gfa_zone_unclaim(p, 0, 99), 0);
		cr_assert_geq(gfa_compact_zone(p, 0, GFA_PAGEBLOCK_ORDER, GFA_COMPACT_ASYNC), 0);
		cr_assert_eq(gfa_pool_check(p, msg, sizeof(msg)), 0, "%s", msg);
	}
	return NULL;
}

static void ar_run(struct gfa_pool *p, struct ar_thread *t, int n, bool locker)
{
	pthread_t tid[8], lt;

	for (int i = 0; i < n; i++)
		cr_assert_eq(pthread_create(&tid[i], NULL, ar_worker, &t[i]), 0);
	if (locker)
		cr_assert_eq(pthread_create(&lt, NULL, ar_zone_locker, p), 0);
	for (int i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	if (locker)
		pthread_join(lt, NULL);
}

static void ar_thread_init(struct ar_thread *t, struct gfa_pool *p, int i, long ops, bool cache)
{
	memset(t, 0, sizeof(*t));
	t->pool = p;
	t->owner = 100 + (uint64_t)i;
	t->seed = 0x51ed2701ULL * (uint64_t)(i + 1);
	t->ops = ops;
	t->pcp = cache ? gfa_pcp_create(p, 0) : NULL;
	cr_assert(!cache || t->pcp);
	for (int s = 0; s < AR_SLOTS; s++)
		t->pfn[s] = -1;
}

/*
 * Zone-path threads while another thread takes the zone lock over and over, checking
 * the whole zone (every arena's lists against the frames) each time; then caches and
 * the zone path together, checked once they are done.  The pool is small enough that
 * arenas run dry and allocations cross into the others.
 */
Test(arena, threads_on_arena_locks_beside_zone_lock_holders, .timeout = 300)
{
	struct gfa_pool *p = arena_pool(AR_FRAMES, 4);
	struct ar_thread t[4];
	uint64_t total = AR_FRAMES;

	for (int i = 0; i < 3; i++)
		ar_thread_init(&t[i], p, i, 300000, false);
	ar_run(p, t, 3, true);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), total);
	for (int i = 0; i < 4; i++)
		ar_thread_init(&t[i], p, i, 300000, i >= 2);
	ar_run(p, t, 4, false);
	for (int i = 2; i < 4; i++)
		gfa_pcp_destroy(t[i].pcp);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), total);
	gfa_pool_destroy(p);
}
