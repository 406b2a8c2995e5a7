/* The host-release policy of the allocator (the invariants of docs/decisions.md,
 * entry 21). */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "tests/test_util.h"
#include <gfa/vmm.h>
#include "allocator/layers.h"

#define PB GFA_PAGEBLOCK_FRAMES

static struct gfa_pool *depop_pool(uint64_t pageblocks, uint64_t low, uint64_t high)
{
	struct gfa_pool *p = tu_pool(pageblocks * PB);
	struct gfa_release_policy rp = { .low = low, .high = high, .min_empty_frac = 4 };

	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	return p;
}

static struct gfa_zone_stat zst(struct gfa_pool *p)
{
	struct gfa_zone_stat st;

	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	return st;
}

static uint64_t populated_free(struct gfa_pool *p)
{
	struct gfa_zone_stat st = zst(p);

	return st.nr_free_buddy - st.nr_released;
}

static void done_all(struct gfa_pool *p, struct gfa_frame_range *r, int n, bool ok)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_release_done(p, r[i].pfn, r[i].nr, ok), 0);
}

Test(depop, whole_pageblocks_highest_first_down_to_the_reserve)
{
	struct gfa_pool *p = depop_pool(16, 256, 512);
	struct gfa_frame_range r[64];
	int n = zone_release_take(p, 0, r, 64, UINT64_MAX);
	struct gfa_zone_stat st;

	cr_assert_eq(n, 1, "adjacent blocks coalesce into one range");
	cr_assert_eq(r[0].pfn + r[0].nr, 16 * PB, "released from the top");
	/* the reserve is one pageblock; blocks are not split, so one 4 MiB block stays */
	cr_assert_eq(r[0].nr, 14 * PB, "keeps the high reserve, rounded up to whole blocks");
	st = zst(p);
	cr_assert_eq(st.nr_inflight, 14 * PB);
	ASSERT_POOL_OK(p);
	/* frames in flight are never handed out */
	for (int i = 0; i < 2 * (int)PB; i++) {
		int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);

		cr_assert_geq(a, 0);
		cr_assert_lt((uint64_t)a, r[0].pfn);
	}
	cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), GFA_ENOMEM);
	done_all(p, r, n, true);
	st = zst(p);
	cr_assert_eq(st.nr_released, 14 * PB);
	cr_assert_eq(st.nr_sidelined, 14);
	cr_assert_eq(zone_release_take(p, 0, r, 64, UINT64_MAX), 0, "nothing populated left");
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(depop, released_frames_are_reused_last_and_come_back_populated)
{
	struct gfa_pool *p = depop_pool(8, 0, 2 * PB);
	struct gfa_frame_range r[16];
	int n = zone_release_take(p, 0, r, 16, UINT64_MAX);
	struct gfa_vmstat vs;

	cr_assert_gt(n, 0);
	done_all(p, r, n, true);
	/* two populated pageblocks are served first */
	for (int i = 0; i < 2 * (int)PB; i++) {
		int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);

		cr_assert_lt((uint64_t)a, 2 * PB, "pfn %ld came from a released pageblock early",
			     a);
	}
	/* then released ones, which are populated once handed out */
	cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), (int64_t)(2 * PB));
	cr_assert_eq(zst(p).nr_released, 6 * PB - 1);
	gfa_pool_vmstat(p, &vs);
	cr_assert_eq(vs.release_done, 6 * PB);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(depop, quarter_empty_rule_and_failure_keeps_frames_populated)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	int64_t a[PB];
	struct gfa_frame_range r[64];
	int n;

	/* fill one pageblock's worth of order-0 frames everywhere but leave 100 free */
	for (uint64_t i = 0; i < 4 * PB; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(gfa_free(p, (uint64_t)i * 2, 0, 1), 0);
	cr_assert_eq(zone_release_take(p, 0, r, 64, UINT64_MAX), 0,
		     "100 of 512 empty is under a quarter");
	for (int i = 100; i < 140; i++)
		gfa_free(p, (uint64_t)i * 2, 0, 1);
	n = zone_release_take(p, 0, r, 64, UINT64_MAX);
	cr_assert_gt(n, 0, "140 of 512 empty qualifies");
	cr_assert_eq(r[0].pfn, 278, "highest first");
	done_all(p, r, n, false);
	cr_assert_eq(zst(p).nr_released, 0, "a failed release leaves frames populated");
	cr_assert_eq(populated_free(p), 140);
	ASSERT_POOL_OK(p);
	(void)a;
	gfa_pool_destroy(p);
}

Test(depop, grow_populates_when_below_low)
{
	struct gfa_pool *p = depop_pool(8, PB, 2 * PB);
	struct gfa_frame_range r[16];
	int n = zone_release_take(p, 0, r, 16, UINT64_MAX);

	done_all(p, r, n, true);
	cr_assert_eq(zone_populate_take(p, 0, r, 16, UINT64_MAX), 0, "at high: no grow");
	for (int i = 0; i < (int)(PB + PB / 2); i++)
		gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	n = zone_populate_take(p, 0, r, 16, UINT64_MAX);
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_populate_done(p, r[i].pfn, r[i].nr), 0);
	cr_assert_geq(populated_free(p), 2 * PB - PB / 2);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(depop, bad_completions_change_nothing)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[4];
	struct gfa_release_policy bad = { .low = 5, .high = 4, .min_empty_frac = 4 };
	int n = zone_release_take(p, 0, r, 4, UINT64_MAX);

	struct gfa_vmstat vs0, vs1;

	cr_assert_eq(n, 1);
	gfa_pool_vmstat(p, &vs0);
	cr_assert_eq(zone_release_done(p, 1UL << 30, 1, true), GFA_ERANGE);
	cr_assert_eq(zone_release_done(p, r[0].pfn, r[0].nr + 1, true), GFA_ERANGE);
	/* pfn + nr wraps: once "in flight" by an empty range, and accepted */
	cr_assert_eq(zone_release_done(p, r[0].pfn + 1, UINT64_MAX, true), GFA_ERANGE);
	cr_assert_eq(zone_populate_done(p, r[0].pfn + 1, UINT64_MAX - 2), GFA_ERANGE);
	cr_assert_eq(zone_release_take(p, 7, r, 4, 100), GFA_ERANGE);
	cr_assert_eq(zone_release_done(NULL, 0, 1, true), GFA_EFAULT);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &bad), GFA_EINVAL);
	cr_assert_eq(gfa_zone_vmstat(p, 7, &vs1), GFA_ERANGE);
	gfa_pool_vmstat(p, &vs1);
	cr_assert_eq(vs1.err_range, vs0.err_range + 6, "argument errors are counted");
	cr_assert_eq(vs1.err_inval, vs0.err_inval + 1);
	done_all(p, r, n, true);
	cr_assert_eq(zone_release_done(p, r[0].pfn, r[0].nr, true), GFA_EBUSY, "twice");
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- blocks that mix released and populated frames ---- */

static void release_everything(struct gfa_pool *p)
{
	struct gfa_frame_range r[16];
	int n = zone_release_take(p, 0, r, 16, UINT64_MAX);

	cr_assert_gt(n, 0);
	done_all(p, r, n, true);
}

/* Everything released, then one frame used and freed: a free block mixing 1 populated
 * and 1023 released frames.  Returns the populated frame. */
static int64_t release_all_but_one(struct gfa_pool *p)
{
	int64_t a;

	release_everything(p);
	a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 0, 1), 0);
	return a;
}

/* Every frame allocated to owner 1, the odd ones freed and released (one range each):
 * no free block above order 0, every free frame released. */
static void odd_frames_released(struct gfa_pool *p, uint64_t frames)
{
	struct gfa_frame_range r[256];
	int n;

	for (uint64_t i = 0; i < frames; i++)
		cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT),
			     (int64_t)i);
	for (uint64_t pfn = 1; pfn < frames; pfn += 2)
		cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	while ((n = zone_release_take(p, 0, r, 256, UINT64_MAX)) > 0)
		done_all(p, r, n, true);
}

/*
 * One frame of a released block is used and freed: the merged free block holds 1
 * populated and 1023 released frames.  Only the populated frame goes to the host; a
 * failed punch leaves the released ones released, a good one counts one frame.
 */
Test(depop, mixed_block_sends_only_its_populated_frames)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[16];
	struct gfa_vmstat v0, v1;
	uint64_t before;
	int n;

	release_all_but_one(p);
	before = zst(p).nr_released;
	cr_assert_eq(before, 4 * PB - 1);
	gfa_pool_vmstat(p, &v0);
	n = zone_release_take(p, 0, r, 16, UINT64_MAX);
	cr_assert_eq(n, 1);
	cr_assert_eq(r[0].nr, 1, "one populated frame put %lu frames in flight",
		     (unsigned long)r[0].nr);
	cr_assert_eq(zone_release_done(p, r[0].pfn, r[0].nr, false), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(zst(p).nr_released, before, "a failed punch made released frames populated");
	n = zone_release_take(p, 0, r, 16, UINT64_MAX);
	cr_assert_eq(n, 1);
	done_all(p, r, n, true);
	gfa_pool_vmstat(p, &v1);
	cr_assert_eq(v1.release_done - v0.release_done, 1, "the host took %lu frames, not 1",
		     (unsigned long)(v1.release_done - v0.release_done));
	cr_assert_eq(zst(p).nr_released, 4 * PB);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Populated frames are reused before released ones, block by block (not pageblock). */
Test(depop, a_populated_frame_is_reused_before_a_released_one)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	int64_t a, b, c, d;

	release_everything(p);
	a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	b = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	c = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	cr_assert(a >= 0 && b >= 0 && c >= 0);
	/* a is populated now (it was handed out); its buddy b is still allocated */
	cr_assert_eq(gfa_free(p, (uint64_t)a, 0, 1), 0);
	d = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);
	cr_assert_eq(d, a, "got released pfn %ld while populated pfn %ld was free", (long)d,
		     (long)a);
	gfa_pool_destroy(p);
}

/* A mixed block split for the host with no room left for every piece: what stays
 * free merges again with its buddies (they were left side by side, unmerged). */
Test(depop, split_pieces_that_stay_free_merge_again)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[4];
	int64_t x;

	release_everything(p);
	x = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT);
	cr_assert_geq(x, 0);
	cr_assert_eq(gfa_block_split(p, (uint64_t)x, 2, 1, 0), 0);
	/* x+1 and x+3 go back and are released; x and x+2 stay populated */
	cr_assert_eq(gfa_free(p, (uint64_t)x + 1, 0, 1), 0);
	cr_assert_eq(gfa_free(p, (uint64_t)x + 3, 0, 1), 0);
	release_everything(p);
	cr_assert_eq(gfa_free(p, (uint64_t)x, 0, 1), 0);
	cr_assert_eq(gfa_free(p, (uint64_t)x + 2, 0, 1), 0);
	ASSERT_POOL_OK(p);
	/* one range only: x+2 fits, x does not */
	cr_assert_eq(zone_release_take(p, 0, r, 1, UINT64_MAX), 1);
	ASSERT_POOL_OK(p);
	done_all(p, r, 1, true);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Compaction's isolated targets leave the released counts (nr_free no longer has them). */
static struct gfa_pool *tgt_pool;
static int tgt_calls, tgt_bad_stat, tgt_released_in_op;

static int tgt_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct gfa_zone_stat st;
	struct gfa_frame_range r[8];

	(void)ctx;
	(void)owner;
	(void)s;
	(void)d;
	(void)o;
	if (tgt_calls++)
		return -EAGAIN;
	cr_assert_eq(gfa_zone_stat(tgt_pool, 0, &st), 0);
	tgt_bad_stat = st.nr_released > st.nr_free_buddy;
	/* the reserve (high) is the whole zone: nothing may be released */
	tgt_released_in_op = zone_release_take(tgt_pool, 0, r, 8, UINT64_MAX);
	for (int i = 0; i < tgt_released_in_op; i++)
		zone_release_done(tgt_pool, r[i].pfn, r[i].nr, false);
	return -EAGAIN;
}

Test(depop, compaction_targets_leave_the_released_counts, .timeout = 60)
{
	const struct gfa_owner_ops ops = { .migrate = tgt_migrate };
	struct gfa_release_policy rp = { .low = 0, .high = 4 * PB, .min_empty_frac = 4 };
	struct gfa_pool *p = depop_pool(4, 0, 0);

	tgt_pool = p;
	cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
	for (uint64_t i = 0; i < 4 * PB; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), 0);
	for (uint64_t pfn = 0; pfn < 4 * PB; pfn++)
		if ((pfn & (PB - 1)) >= PB / 2)
			cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	release_everything(p);
	for (uint64_t pfn = 0; pfn < 16; pfn++)
		cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	ASSERT_POOL_OK(p);
	gfa_compact_zone(p, 0, -1, GFA_COMPACT_SYNC);
	cr_assert(tgt_calls, "no migrate call");
	cr_assert_eq(tgt_released_in_op, 0, "a reserve of the whole zone released %d ranges",
		     tgt_released_in_op);
	cr_assert_not(tgt_bad_stat, "more frames released than free during compaction");
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* A fallback that moves a pageblock keeps its released blocks last on the new list. */
Test(depop, a_steal_keeps_released_blocks_last)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[8];
	int64_t a;

	for (uint64_t i = 0; i < 4 * PB; i++)
		cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT),
			     (int64_t)i);
	for (uint64_t pfn = 256; pfn < 384; pfn++)
		cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	cr_assert_eq(zone_release_take(p, 0, r, 8, UINT64_MAX), 1);
	done_all(p, r, 1, true);
	for (uint64_t pfn = 0; pfn < 128; pfn++)
		cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	ASSERT_POOL_OK(p);
	a = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, GFA_ALLOC_NOCOMPACT);
	cr_assert_geq(a, 0);
	cr_assert_lt(a, 128, "got released pfn %ld while populated [0, 128) was free", (long)a);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

#define CAP_PB GFA_PAGEBLOCK_FRAMES

struct cap_obs {
	struct gfa_pool *p;
	atomic_bool stop;
	atomic_ulong bad, looks, rel_in_window;
	unsigned long worst_rel, worst_free;
};

static void *cap_observer(void *arg)
{
	struct cap_obs *o = arg;

	while (!atomic_load(&o->stop)) {
		struct gfa_zone_stat st;

		if (gfa_zone_stat(o->p, 0, &st))
			continue;
		atomic_fetch_add(&o->looks, 1);
		if (st.nr_released > st.nr_free_buddy) {
			o->worst_rel = st.nr_released;
			o->worst_free = st.nr_free_buddy;
			atomic_fetch_add(&o->bad, 1);
		}
	}
	return NULL;
}

/*
 * (found by a review) Direct compaction captures the merged block of a migrated source and a released
 * free buddy.  The captured block is off the lists (ISOLATED) but keeps its released
 * bits until zone_alloc_slow() relocks and calls release_clear(): meanwhile the zone
 * counts more released frames than free ones (populated free = nr_free - nr_released
 * wraps), which the host-return thread reads as "far above the reserve".
 */
Test(depop, capture_keeps_no_released_bits_off_the_lists, .timeout = 120)
{
	const struct gfa_owner_ops ops = { .migrate = tu_migrate_ok };
	struct gfa_release_policy rp = { .low = 0, .high = 0, .min_empty_frac = 4 };
	struct cap_obs o = { 0 };
	unsigned long captures = 0;
	struct timespec t0, now;
	int rounds;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* 3 s: it failed within 0.4-2 s before */
	for (rounds = 0; !atomic_load(&o.bad); rounds++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > 3000)
			break;
		struct gfa_pool *p = tu_pool(4 * CAP_PB);
		struct gfa_vmstat v;
		pthread_t t;

		cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
		cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
		odd_frames_released(p, 4 * CAP_PB);
		ASSERT_POOL_OK(p);
		o.p = p;
		atomic_store(&o.stop, false);
		cr_assert_eq(pthread_create(&t, NULL, cap_observer, &o), 0);
		while (atomic_load(&o.looks) == 0)
			;
		/* no free order-1 block anywhere: direct compaction, which captures */
		(void)gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, 1, 0);
		atomic_store(&o.stop, true);
		pthread_join(t, NULL);
		gfa_pool_vmstat(p, &v);
		captures += v.compact_capture;
		ASSERT_POOL_OK(p);
		gfa_owner_register(p, 1, NULL, NULL);
		gfa_pool_destroy(p);
	}
	cr_assert_gt(captures, 0, "no capture happened: setup is wrong");
	cr_assert_eq(
		atomic_load(&o.bad), 0,
		"after %d rounds (%lu captures): zone showed %lu released frames but only %lu free",
		rounds, captures, o.worst_rel, o.worst_free);
}

static bool want_any(void *ctx, uint64_t pfn, unsigned int order)
{
	(void)ctx, (void)pfn, (void)order;
	return true;
}

/*
 * Scrubbing takes free frames off the lists for a while: never below the low reserve,
 * so an allocation that fits in the reserve does not fail meanwhile (page reporting
 * keeps the low watermark the same way).
 */
Test(depop, scrubbing_keeps_the_low_reserve_on_the_lists)
{
	struct gfa_pool *p = depop_pool(4, 300, 600);
	struct gfa_frame_range r[64];
	uint64_t taken = 0;
	int n;

	for (uint64_t i = 0; i < 4 * PB - 400; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(zst(p).nr_free_buddy, 400);
	n = zone_scrub_take(p, 0, want_any, NULL, r, 64, UINT64_MAX);
	cr_assert_geq(n, 0);
	for (int i = 0; i < n; i++)
		taken += r[i].nr;
	cr_log_info("scrub took %lu of 400 free frames", (unsigned long)taken);
	cr_assert_leq(taken, 100, "took %lu: below the reserve of 300", (unsigned long)taken);
	cr_assert_gt(taken, 0);
	for (int i = 0; i < 300; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 2, GFA_ALLOC_NOCOMPACT), 0,
			      "allocation %d failed while frames were being scrubbed", i);
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_populate_done(p, r[i].pfn, r[i].nr), 0);
	/* at the reserve: nothing more is taken */
	cr_assert_eq(zone_scrub_take(p, 0, want_any, NULL, r, 64, UINT64_MAX), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

struct scrub_hand {
	struct gfa_pool *p;
	struct gfa_frame_range *r;
	int n;
	atomic_bool back;
};

/* A scrubber that takes its time: the ranges come back 50 ms later. */
static void *scrub_back_later(void *arg)
{
	struct scrub_hand *h = arg;
	struct timespec ts = { 0, 50 * 1000000L };

	nanosleep(&ts, NULL);
	atomic_store(&h->back, true);
	for (int i = 0; i < h->n; i++)
		cr_assert_eq(zone_populate_done(h->p, h->r[i].pfn, h->r[i].nr), 0);
	return NULL;
}

/*
 * Frames being scrubbed are free frames, only in work (issue 24: a stopped guest's
 * frames are free at once, with the zeroer at work): counted in nr_free, claimable as
 * a whole, and an allocation that finds none on the lists waits for them instead of
 * failing.
 */
Test(depop, frames_being_scrubbed_are_free_and_an_allocation_waits_for_them)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[64];
	struct scrub_hand h = { p, r, 0, false };
	uint64_t taken = 0;
	pthread_t t;

	h.n = zone_scrub_take(p, 0, want_any, NULL, r, 64, UINT64_MAX);
	cr_assert_gt(h.n, 0);
	for (int i = 0; i < h.n; i++)
		taken += r[i].nr;
	cr_assert_eq(taken, 4 * PB, "the whole zone in work (no reserve)");
	cr_assert_eq(zst(p).nr_free, 4 * PB, "frames in work are free frames");
	cr_assert_eq(zst(p).nr_scrubbing, 4 * PB);
	cr_assert_eq(zst(p).nr_inflight, 0, "no host work in flight");
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_zone_claim(p, 0, 7, 4 * PB), 0, "a claim of all of them");
	cr_assert_eq(gfa_zone_unclaim(p, 0, 7), 4 * PB);
	cr_assert_eq(pthread_create(&t, NULL, scrub_back_later, &h), 0);
	for (uint64_t i = 0; i < 4 * PB; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), 0,
			      "allocation %lu failed while the frames were in work",
			      (unsigned long)i);
	cr_assert(atomic_load(&h.back), "an allocation succeeded before the frames were back");
	pthread_join(t, NULL);
	cr_assert_eq(zst(p).nr_scrubbing, 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Populating back (grow) puts in flight only released frames, and no more than its
 * budget: a free order-10 block with one populated frame and 1023 released ones gives
 * the host path a budget-sized released piece, and its populated frame stays free.
 */
Test(depop, grow_takes_released_pieces_within_its_budget)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_release_policy rp = { .low = 16, .high = 16, .min_empty_frac = 4 };
	struct gfa_frame_range r[16];
	uint64_t inflight = 0;
	int64_t a;
	int n;

	a = release_all_but_one(p);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	n = zone_populate_take(p, 0, r, 16, UINT64_MAX);
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++) {
		inflight += r[i].nr;
		cr_assert((uint64_t)a < r[i].pfn || (uint64_t)a >= r[i].pfn + r[i].nr,
			  "the populated frame %ld went in flight", (long)a);
	}
	cr_assert_leq(inflight, 15, "%lu frames in flight for a budget of 15",
		      (unsigned long)inflight);
	ASSERT_POOL_OK(p);
	cr_assert_eq(populated_free(p), 1, "the populated frame left the lists");
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_populate_done(p, r[i].pfn, r[i].nr), 0);
	cr_assert_eq(zst(p).nr_released, 4 * PB - 1 - inflight);
	cr_assert_eq(populated_free(p), 1 + inflight);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Frames a claim promises stay on the lists while the host path works: an owner
 * building a VM on its claim never finds them in flight (released or scrubbed).
 */
Test(depop, claimed_frames_never_go_in_flight)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_frame_range r[16], s[16];
	uint64_t inflight = 0;
	int n, m;

	cr_assert_eq(gfa_zone_claim(p, 0, 7, 1000), 0);
	n = zone_release_take(p, 0, r, 16, UINT64_MAX);
	m = zone_scrub_take(p, 0, want_any, NULL, s, 16, UINT64_MAX);
	cr_assert(n >= 0 && m >= 0);
	for (int i = 0; i < n; i++)
		inflight += r[i].nr;
	for (int i = 0; i < m; i++)
		inflight += s[i].nr;
	cr_assert_gt(inflight, 0, "the unclaimed frames may go");
	cr_assert_leq(inflight, 4 * PB - 1000, "%lu frames in flight, the claim keeps 1000",
		      (unsigned long)inflight);
	for (int i = 0; i < 1000; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 7, GFA_ALLOC_NOCOMPACT), 0,
			      "claimed allocation %d failed while the host path worked", i);
	done_all(p, r, n, true);
	for (int i = 0; i < m; i++)
		cr_assert_eq(zone_populate_done(p, s[i].pfn, s[i].nr), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Compaction takes free frames off the lists as targets (a whole pageblock's worth in
 * full mode) and gives back the ones it did not use: unwritten, they still count as
 * released.  Counted populated, the host return would punch them again and
 * populate-back would skip them (before: 767 of 1023 left after one move).
 */
Test(depop, unused_compaction_targets_stay_released, .timeout = 60)
{
	const struct gfa_owner_ops ops = { .migrate = tu_migrate_ok };
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_vmstat v;

	cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
	odd_frames_released(p, 4 * PB);
	cr_assert_eq(zst(p).nr_released, 2 * PB);
	/* no order-1 block anywhere: direct compaction moves a frame, captures the block */
	cr_assert_geq(gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, 1, 0), 0);
	gfa_pool_vmstat(p, &v);
	cr_assert_gt(v.pgmigrate_success, 0);
	cr_assert_eq(v.compact_capture, 1);
	/* each move wrote one released target and the captured block's released half goes
	 * to its owner; every other released frame is released still */
	cr_assert_eq(zst(p).nr_released, 2 * PB - v.pgmigrate_success - 1,
		     "%lu released after %lu moves into released frames",
		     (unsigned long)zst(p).nr_released, (unsigned long)v.pgmigrate_success);
	ASSERT_POOL_OK(p);
	gfa_owner_register(p, 1, NULL, NULL);
	gfa_pool_destroy(p);
}

/* The grow side leaves claimed frames on the lists too (populating takes released
 * frames off them for a while). */
Test(depop, populate_isolate_leaves_claimed_frames_on_the_lists)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_release_policy rp = { .low = 3 * PB, .high = 3 * PB, .min_empty_frac = 4 };
	struct gfa_frame_range r[64];
	int n;

	release_everything(p);
	cr_assert_eq(zst(p).nr_released, 4 * PB);
	cr_assert_eq(gfa_zone_claim(p, 0, 7, 1000), 0);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	n = zone_populate_take(p, 0, r, 64, UINT64_MAX);
	cr_assert_gt(n, 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 7, GFA_ALLOC_NOCOMPACT), 0,
			      "claimed allocation %d failed while the grow step worked", i);
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_populate_done(p, r[i].pfn, r[i].nr), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- the backing's marks: a released frame is clean ---- */

static struct gfa_backing *depop_backing(struct gfa_pool *p)
{
	struct gfa_backing *b = gfa_backing_create(p, NULL);

	cr_assert_not_null(b, "backing: %s", strerror(errno));
	return b;
}

/* The owner writes its block: a free marks dirty only what the memfd holds. */
static void owner_writes(struct gfa_pool *p, int64_t pfn, unsigned int order)
{
	cr_assert_geq(pfn, 0);
	memset(gfa_pfn_to_addr(p, (uint64_t)pfn), 0xa5, GFA_FRAME_SIZE << order);
}

/* Release every free frame of zone 0 (the policy keeps nothing). */
static uint64_t release_zone(struct gfa_pool *p)
{
	struct gfa_frame_range r[64];
	uint64_t frames = 0;
	int n = zone_release_take(p, 0, r, 64, UINT64_MAX);

	cr_assert_geq(n, 1);
	for (int i = 0; i < n; i++)
		frames += r[i].nr;
	done_all(p, r, n, true);
	return frames;
}

static void assert_backing_adds_up(struct gfa_backing *b, struct gfa_pool *p,
				   struct gfa_backing_zone_stat *bs)
{
	struct gfa_zone_stat st = zst(p);
	char msg[256];
	int err;

	cr_assert_eq(gfa_backing_zone_stat(b, 0, bs), 0);
	cr_assert_eq(bs->free_clean + bs->free_dirty + bs->free_released, st.nr_free,
		     "clean %lu + dirty %lu + released %lu != free %lu",
		     (unsigned long)bs->free_clean, (unsigned long)bs->free_dirty,
		     (unsigned long)bs->free_released, (unsigned long)st.nr_free);
	err = gfa_backing_check(b, msg, sizeof(msg));
	cr_assert_eq(err, 0, "gfa_backing_check: %d %s", err, msg);
}

/* Dirty frames released through the take/done calls are clean: counted once. */
Test(depop, released_dirty_frames_count_as_released_only)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_backing *b = depop_backing(p);
	struct gfa_backing_zone_stat bs;
	int64_t pfn = gfa_backing_alloc(b, NULL, 0, 9, GFA_MT_MOVABLE, 3, 0);

	owner_writes(p, pfn, 9);
	cr_assert_eq(gfa_backing_free(b, NULL, (uint64_t)pfn, 9, 3), 0);
	assert_backing_adds_up(b, p, &bs);
	cr_assert_eq(bs.free_dirty, 512);
	cr_assert_eq(release_zone(p), 4 * PB);
	assert_backing_adds_up(b, p, &bs);
	cr_assert_eq(bs.free_released, 4 * PB);
	cr_assert_eq(bs.free_dirty, 0, "released frames are clean, %lu dirty",
		     (unsigned long)bs.free_dirty);
	cr_assert_eq(gfa_backing_nr_dirty(b), 0);
	/* nothing to zero on hand-out */
	pfn = gfa_backing_alloc(b, NULL, 0, 9, GFA_MT_MOVABLE, 3, 0);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_backing_prepare(b, (uint64_t)pfn, 9), 0, "a needless zeroing");
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}

/* Marks on released free frames (a stray mark, a double free through the backing) do
 * not stick. */
Test(depop, released_frames_take_no_dirty_marks)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_backing *b = depop_backing(p);
	struct gfa_backing_zone_stat bs;
	int64_t pfn = gfa_backing_alloc(b, NULL, 0, 9, GFA_MT_MOVABLE, 3, 0);

	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_backing_free(b, NULL, (uint64_t)pfn, 9, 3), 0);
	release_zone(p);
	gfa_backing_mark_dirty(b, 0, 10);
	gfa_backing_mark_dirty(b, 3 * PB + 5, 0);
	cr_assert_eq(gfa_backing_free(b, NULL, (uint64_t)pfn, 9, 3), GFA_EDOUBLEFREE);
	assert_backing_adds_up(b, p, &bs);
	cr_assert_eq(bs.free_released, 4 * PB);
	cr_assert_eq(bs.free_dirty, 0);
	cr_assert_eq(gfa_backing_nr_dirty(b), 0);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}

/* The check sees a released frame marked dirty: here the pool's hook is taken away. */
Test(depop, backing_check_catches_a_released_dirty_frame)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_backing *b = depop_backing(p);
	int64_t pfn = gfa_backing_alloc(b, NULL, 0, 0, GFA_MT_MOVABLE, 3, 0);
	char msg[256] = "";

	owner_writes(p, pfn, 0);
	cr_assert_eq(gfa_backing_free(b, NULL, (uint64_t)pfn, 0, 3), 0);
	cr_assert_eq(pool_set_released_fn(p, NULL, NULL), 0);
	release_zone(p);
	cr_assert_eq(gfa_backing_check(b, msg, sizeof(msg)), -EUCLEAN);
	cr_assert_not_null(strstr(msg, "released frames marked dirty"), "%s", msg);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}

/* Bad input to the backing is counted as the allocator's is. */
Test(depop, backing_prepare_of_a_bad_block_is_counted)
{
	struct gfa_pool *p = depop_pool(4, 0, 0);
	struct gfa_backing *b = depop_backing(p);
	struct gfa_vmstat vs;

	cr_assert_eq(gfa_backing_prepare(b, 0, GFA_MAX_ORDER + 1), GFA_EFAULT);
	cr_assert_eq(gfa_backing_prepare(b, 4 * PB, 0), GFA_EFAULT);
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	cr_assert_eq(vs.err_fault, 2, "err_fault %lu", (unsigned long)vs.err_fault);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}
