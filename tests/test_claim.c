/*
 * Claims (allocator/claim.c): frames of a zone promised to one owner, taken from by its
 * allocations only, never overcommitted, and made up from the caches when they hold the
 * difference.
 */
#include <pthread.h>
#include "tests/test_util.h"

Test(claim, reserve_frames_for_one_owner)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a;

	cr_assert_eq(gfa_zone_claim(p, 0, 100, 3000), 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 100, 10), -EEXIST, "one claim per VM");
	cr_assert_eq(gfa_zone_claim(p, 0, 101, 2000), -ENOSPC, "would overcommit the zone");
	cr_assert_eq(gfa_zone_claim(p, 0, 101, 1000), 0);
	EXPECT_BAD(p, gfa_zone_claim(p, 3, 102, 1), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_zone_unclaim(p, 3, 100), GFA_ERANGE, err_range);
	cr_assert_eq(gfa_zone_claimed(p, 0), 4000);
	/* an outsider may use only the 96 unclaimed frames */
	cr_assert_geq(gfa_alloc(p, 0, 6, GFA_MT_MOVABLE, 7, 0), 0);
	cr_assert_eq(gfa_alloc(p, 0, 6, GFA_MT_MOVABLE, 7, 0), GFA_ENOMEM);
	/* the claimant consumes its claim */
	a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 100, 0);
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 4000 - 512);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 100), 3000 - 512, "returns what was not used");
	cr_assert_eq(gfa_zone_unclaim(p, 0, 100), -ENOENT);
	cr_assert_eq(gfa_zone_claimed(p, 0), 1000);
	cr_assert_geq(gfa_alloc(p, 0, 6, GFA_MT_MOVABLE, 7, 0), 0, "released claim frees room");
	cr_assert_eq(gfa_zone_unclaim(p, 0, 101), 1000);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(claim, route_caches_to_the_zone_path)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	cr_assert_eq(gfa_zone_claim(p, 0, 100, 4096 - 8), 0);
	for (int i = 0; i < 8; i++)
		cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 5, 0), 0);
	cr_assert_eq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 5, 0), GFA_ENOMEM,
		     "a cache must not hand out claimed frames");
	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 100, 0), 0);
	gfa_zone_unclaim(p, 0, 100);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* Beyond its claim an owner competes like everyone else: what is left of its claim plus
 * the unclaimed frames, and an outsider never the claimed ones. */
Test(claim, an_allocation_larger_than_the_remaining_claim_uses_claim_plus_unclaimed)
{
	struct gfa_pool *p = tu_pool(4096); /* 8 pageblocks */

	cr_assert_eq(gfa_zone_claim(p, 0, 100, 3800), 0);
	for (int i = 0; i < 7; i++)
		cr_assert_geq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 100, 0), 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 3800 - 7 * 512); /* 216 */
	cr_assert_eq(tu_free_frames(p), 512);                 /* 296 unclaimed */
	cr_assert_eq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 7, 0), GFA_ENOMEM,
		     "an outsider may not take claimed frames");
	cr_assert_geq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 100, 0), 0,
		      "216 claimed + 296 unclaimed frames cover 512");
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 100), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Freeing does not give a claim back: a claim is spent by allocations and dropped whole. */
Test(claim, frees_do_not_refill_a_claim)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a;

	cr_assert_eq(gfa_zone_claim(p, 0, 9, 1024), 0);
	a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 9, 0);
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 512);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 9, 9), 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 512, "a free refilled the claim");
	/* an order larger than what is left takes what is left, never below zero */
	cr_assert_geq(gfa_alloc(p, 0, 10, GFA_MT_MOVABLE, 9, 0), 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 9), 0, "nothing left unused");
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* A claim on one zone leaves the others alone. */
Test(claim, is_per_zone)
{
	struct gfa_pool *p = tu_pool_zones(2, 2048, NULL);

	cr_assert_eq(gfa_zone_claim(p, 1, 4, 2048), 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	cr_assert_eq(gfa_zone_claimed(p, 1), 2048);
	cr_assert_eq(gfa_alloc(p, 1, 0, GFA_MT_MOVABLE, 5, 0), GFA_ENOMEM, "zone 1 is promised");
	cr_assert_geq(gfa_alloc(p, 0, 10, GFA_MT_MOVABLE, 5, 0), 0, "zone 0 is not");
	cr_assert_eq(gfa_zone_claim(p, 0, 4, 1024), 0, "one claim per owner and zone");
	cr_assert_eq(gfa_zone_unclaim(p, 1, 4), 2048);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 4), 1024);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(claim, bad_arguments_are_counted)
{
	struct gfa_pool *p = tu_pool(2048);

	cr_assert_eq(gfa_zone_claim(NULL, 0, 1, 1), GFA_EFAULT);
	cr_assert_eq(gfa_zone_unclaim(NULL, 0, 1), GFA_EFAULT);
	cr_assert_eq(gfa_zone_claimed(NULL, 0), 0);
	cr_assert_eq(gfa_zone_claimed(p, 1), 0, "a zone out of range has no claims");
	EXPECT_BAD(p, gfa_zone_claim(p, 1, 1, 1), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_zone_unclaim(p, GFA_MAX_ZONES, 1), GFA_ERANGE, err_range);
	/* refusals are answers, not errors: nothing counted, nothing claimed */
	cr_assert_eq(gfa_zone_claim(p, 0, 1, 2049), GFA_ENOSPC);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 1), GFA_ENOTFOUND);
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	cr_assert_eq(VMS(p, err_fault), 0, "a NULL pool has no counters to count in");
	cr_assert_eq(VMS(p, err_inval), 0);
	cr_assert_eq(VMS(p, err_range), 2);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Frames parked in a vCPU cache are free: a claim that needs them drains the cache. */
Test(claim, drains_the_caches_when_they_make_the_difference)
{
	struct gfa_zone_stat st;
	struct gfa_pcp_stat ps;
	/* a zone this small gets caches of a batch of one: a batch that parks frames */
	struct gfa_pool *p = tu_pcp_pool(4096, 63, 1024, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);

	cr_assert_not_null(c);
	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(gfa_pcp_stat(c, &ps), 0);
	cr_assert_gt(ps.count, 0, "a refill parks frames in the cache");
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free_buddy, 4095 - (uint64_t)ps.count);
	/* more than the zone and its caches hold: refused, and the cache is left alone */
	cr_assert_eq(gfa_zone_claim(p, 0, 2, 4096), GFA_ENOSPC);
	cr_assert_eq(gfa_pcp_stat(c, &ps), 0);
	cr_assert_gt(ps.count, 0, "a claim that fails anyway drained the cache");
	/* every free frame: only with the cache's */
	cr_assert_eq(gfa_zone_claim(p, 0, 2, 4095), 0);
	cr_assert_eq(gfa_pcp_stat(c, &ps), 0);
	cr_assert_eq(ps.count, 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 4095);
	cr_assert_eq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), GFA_ENOMEM);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 2), 4095);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* A full table refuses a claim the zone has room for, and a dropped claim makes room. */
Test(claim, table_holds_gfa_max_claims)
{
	struct gfa_pool *p = tu_pool(2048);

	for (uint64_t i = 0; i < GFA_MAX_CLAIMS; i++)
		cr_assert_eq(gfa_zone_claim(p, 0, 100 + i, 8), 0, "claim %lu", (unsigned long)i);
	cr_assert_eq(gfa_zone_claim(p, 0, 99, 8), GFA_ENOSPC);
	cr_assert_eq(gfa_zone_claimed(p, 0), 8 * GFA_MAX_CLAIMS);
	/* dropping one from the middle keeps every other claim (the table is compacted) */
	cr_assert_eq(gfa_zone_unclaim(p, 0, 110), 8);
	cr_assert_eq(gfa_zone_claim(p, 0, 99, 8), 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 100 + GFA_MAX_CLAIMS - 1, 8), GFA_EEXIST,
		     "the last entry moved, and is still found");
	for (uint64_t i = 0; i < GFA_MAX_CLAIMS; i++)
		if (i != 10)
			cr_assert_eq(gfa_zone_unclaim(p, 0, 100 + i), 8, "claim %lu",
				     (unsigned long)i);
	cr_assert_eq(gfa_zone_unclaim(p, 0, 99), 8);
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Claims made at the same instant from many threads never promise more than is free. */
#define CL_THREADS 8
#define CL_ROUNDS  50

struct claimer {
	struct gfa_pool *pool;
	pthread_barrier_t *start;
	uint64_t owner;
	int won;
};

static void *claimer_main(void *arg)
{
	struct claimer *c = arg;

	for (int r = 0; r < CL_ROUNDS; r++) {
		pthread_barrier_wait(c->start);
		if (gfa_zone_claim(c->pool, 0, c->owner, 1000) == 0)
			c->won++;
		pthread_barrier_wait(c->start); /* every thread has tried */
		pthread_barrier_wait(c->start); /* the main thread has counted */
		gfa_zone_unclaim(c->pool, 0, c->owner);
	}
	return NULL;
}

Test(claim, concurrent_claims_never_overcommit, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(4096);
	struct claimer c[CL_THREADS];
	pthread_t t[CL_THREADS];
	pthread_barrier_t start;
	int won = 0;

	pthread_barrier_init(&start, NULL, CL_THREADS + 1);
	for (int i = 0; i < CL_THREADS; i++) {
		c[i] = (struct claimer){ p, &start, 1 + (uint64_t)i, 0 };
		pthread_create(&t[i], NULL, claimer_main, &c[i]);
	}
	for (int r = 0; r < CL_ROUNDS; r++) {
		pthread_barrier_wait(&start);
		pthread_barrier_wait(&start);
		/* 4096 free frames hold four claims of 1000, never five */
		cr_assert_eq(gfa_zone_claimed(p, 0), 4000, "round %d: %lu claimed", r,
			     (unsigned long)gfa_zone_claimed(p, 0));
		ASSERT_POOL_OK(p);
		pthread_barrier_wait(&start);
	}
	for (int i = 0; i < CL_THREADS; i++) {
		pthread_join(t[i], NULL);
		won += c[i].won;
	}
	pthread_barrier_destroy(&start);
	cr_assert_eq(won, 4 * CL_ROUNDS);
	cr_assert_eq(gfa_zone_claimed(p, 0), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}
