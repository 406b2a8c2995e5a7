/* Compaction, capture, collapse and kcompactd against canary-keeping owners. */
#include <pthread.h>
#include <unistd.h>
#include "tests/test_util.h"
#include "refvmm/canary_owner.h"

#define CP_BLOCKS 32
#define CP_FRAMES (CP_BLOCKS * GFA_PAGEBLOCK_FRAMES)

struct frag {
	struct gfa_pool *pool;
	struct canary_owner *o;
	void *mem;
};

/* Fill with order-0 movable pages, then free the first half of every pageblock. */
static struct frag fragment(bool linear, bool register_owner)
{
	struct frag f;
	struct gfa_compact_config cc = { .linear_only = linear, .proactiveness = 0 };

	f.pool = tu_pool(CP_FRAMES);
	f.mem = co_back_pool(f.pool);
	gfa_compact_configure(f.pool, &cc);
	f.o = co_create(f.pool, 7, CP_FRAMES, true);
	cr_assert_not_null(f.o);
	if (!register_owner)
		gfa_owner_register(f.pool, 7, NULL, NULL);
	for (uint64_t i = 0; i < CP_FRAMES; i++)
		cr_assert_eq(co_alloc(f.o, NULL, 0, i, 0), 0);
	for (uint64_t i = 0; i < CP_FRAMES; i++)
		if ((f.o->pfn[i] & (GFA_PAGEBLOCK_FRAMES - 1)) < GFA_PAGEBLOCK_FRAMES / 2)
			cr_assert_eq(co_free(f.o, NULL, i), 0);
	cr_assert_geq(gfa_zone_fragmentation_score(f.pool, 0), 99);
	return f;
}

static void frag_done(struct frag *f)
{
	uint64_t bad = 0;

	cr_assert_eq(co_verify_all(f->o, &bad), 0, "page %lu lost its content or mapping", bad);
	ASSERT_POOL_OK(f->pool);
	co_destroy(f->o);
	gfa_pool_destroy(f->pool);
	free(f->mem);
}

/* Allocate order-9 blocks (owner 99) until the pool says no; returns how many. */
static int take_huge(struct gfa_pool *p, int max)
{
	int n = 0;

	while (n < max && gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 99, 0) >= 0)
		n++;
	return n;
}

Test(compaction, direct_compaction_captures_huge_blocks, .timeout = 120)
{
	struct frag f = fragment(false, true);
	int got = take_huge(f.pool, CP_BLOCKS);

	/* half the pool is free: with perfect compaction CP_BLOCKS/2 blocks */
	cr_assert_geq(got, CP_BLOCKS / 2 - 1, "only %d of %d huge blocks", got, CP_BLOCKS / 2);
	cr_assert_gt(VMS(f.pool, compact_stall), 0);
	cr_assert_gt(VMS(f.pool, compact_capture), 0, "capture must hand blocks to the requester");
	cr_assert_gt(VMS(f.pool, pgmigrate_success), 0);
	cr_assert_gt(f.o->moves, 0);
	frag_done(&f);
}

Test(compaction, linear_mode_succeeds_but_scans_more, .timeout = 120)
{
	struct frag full = fragment(false, true), lin = fragment(true, true);
	int got_full = take_huge(full.pool, 8), got_lin = take_huge(lin.pool, 8);
	uint64_t ms_full = VMS(full.pool, compact_migrate_scanned);
	uint64_t ms_lin = VMS(lin.pool, compact_migrate_scanned);
	uint64_t fs_full = VMS(full.pool, compact_free_scanned);
	uint64_t fs_lin = VMS(lin.pool, compact_free_scanned);

	cr_assert_eq(got_full, 8);
	cr_assert_eq(got_lin, 8);
	cr_assert_eq(VMS(lin.pool, compact_capture), 0, "linear-only mode has no capture");
	cr_log_info("migrate scanned full %lu linear %lu; free scanned full %lu linear %lu",
		    ms_full, ms_lin, fs_full, fs_lin);
	/* on this regular pattern linear scanning is near optimal for the source side;
	 * bench/thpscale measures the real ratios on a thpscale-like pool */
	cr_assert_leq(ms_full * 10, ms_lin * 11);
	cr_assert_lt(fs_full, fs_lin);
	frag_done(&full);
	frag_done(&lin);
}

Test(compaction, full_compaction_lowers_fragmentation, .timeout = 120)
{
	struct frag f = fragment(false, true);
	int before = gfa_zone_fragmentation_score(f.pool, 0), after, ret;

	ret = gfa_compact_zone(f.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(ret, GFA_COMPACT_COMPLETE);
	after = gfa_zone_fragmentation_score(f.pool, 0);
	cr_assert_lt(after, 20, "score %d -> %d", before, after);
	frag_done(&f);
}

Test(compaction, unregistered_owner_is_never_moved, .timeout = 120)
{
	struct frag f = fragment(false, false);

	cr_assert_eq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, 0), GFA_ENOMEM);
	cr_assert_eq(f.o->moves, 0);
	cr_assert_gt(VMS(f.pool, compact_fail), 0);
	cr_assert_eq(VMS(f.pool, pgalloc_fail), 1);
	gfa_owner_register(f.pool, 7, &co_ops, f.o); /* so frag_done can unregister */
	frag_done(&f);
}

Test(compaction, refused_moves_leave_everything_in_place, .timeout = 120)
{
	struct frag f = fragment(false, true);

	f.o->refuse = -EBUSY;
	cr_assert_eq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, 0), GFA_ENOMEM);
	cr_assert_gt(VMS(f.pool, pgmigrate_fail), 0);
	cr_assert_eq(f.o->moves, 0);
	f.o->refuse = 0;
	frag_done(&f);
}

/* Full compaction (order -1) ignores the skip hints an earlier failed pass left. */
Test(compaction, full_compaction_ignores_skip_hints, .timeout = 120)
{
	struct frag f = fragment(false, true);

	f.o->refuse = -EAGAIN;
	cr_assert_eq(gfa_compact_zone(f.pool, 0, 9, GFA_COMPACT_ASYNC), GFA_COMPACT_COMPLETE);
	cr_assert_eq(f.o->moves, 0);
	f.o->refuse = 0;
	cr_assert_eq(gfa_compact_zone(f.pool, 0, -1, GFA_COMPACT_ASYNC), GFA_COMPACT_COMPLETE);
	cr_assert_geq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, GFA_ALLOC_NOCOMPACT), 0,
		      "full compaction formed no order-9 block (%lu moves)",
		      (unsigned long)f.o->moves);
	frag_done(&f);
}

#define CP_PIN_OWNER 8ULL /* no migrate op registered: its frames never move */

/*
 * Every pageblock has its odd frames pinned (an owner without a migrate op); the lower
 * half's even frames hold movable pages, the upper half's are free.  No order-9 block
 * can form, so direct compaction for one must move nothing: each move would empty a
 * frame of a block that stays pinned.  (Such futile moves shifted a VM's frames while
 * it was being built, before vm/frames_move_under_a_guest's own full compaction.)
 */
Test(compaction, pinned_blocks_are_not_emptied_in_vain, .timeout = 120)
{
	struct gfa_pool *p = tu_pool(CP_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 7, CP_FRAMES, true);
	uint64_t *all = malloc(CP_FRAMES * sizeof(*all)), n = 0, pages = 0, start, span, bad;
	int64_t pfn;

	cr_assert_not_null(o);
	cr_assert_not_null(all);
	gfa_zone_span(p, 0, &start, &span);
	while ((pfn = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, CP_PIN_OWNER, GFA_ALLOC_NOCOMPACT)) >= 0)
		all[n++] = (uint64_t)pfn;
	cr_assert_eq(n, CP_FRAMES);
	for (uint64_t i = 0; i < n; i++)
		if (!(all[i] & 1))
			cr_assert_eq(gfa_free(p, all[i], 0, CP_PIN_OWNER), 0);
	while (co_alloc(o, NULL, 0, pages, 0) == 0)
		pages++;
	cr_assert_eq(pages, CP_FRAMES / 2);
	for (uint64_t i = 0; i < pages; i++)
		if (o->pfn[i] >= start + span / 2)
			cr_assert_eq(co_free(o, NULL, i), 0);

	cr_assert_eq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 99, 0), GFA_ENOMEM);
	cr_assert_gt(VMS(p, compact_stall), 0, "direct compaction did not run");
	cr_assert_eq(o->moves, 0, "%lu pages moved out of blocks that stay pinned", o->moves);
	cr_assert_eq(VMS(p, pgmigrate_success), 0);

	cr_assert_eq(co_verify_all(o, &bad), 0, "page %lu lost its content or mapping", bad);
	ASSERT_POOL_OK(p);
	for (uint64_t i = 0; i < pages; i++)
		if (o->pfn[i] != UINT64_MAX)
			cr_assert_eq(co_free(o, NULL, i), 0);
	for (uint64_t i = 0; i < n; i++)
		if (all[i] & 1)
			cr_assert_eq(gfa_free(p, all[i], 0, CP_PIN_OWNER), 0);
	free(all);
	co_destroy(o);
	gfa_pool_destroy(p);
	free(mem);
}

/*
 * Three pageblocks: an order-9 block (no source), half a block of movable pages, and
 * a block with half free.  The migrate scanner must step from the first block to the
 * second, not past it into the free scanner's block (which then holds its targets):
 * moving the second block's 256 pages into the third's holes frees an order-9 block.
 */
Test(compaction, migrate_scanner_steps_one_block_past_an_unsuitable_one, .timeout = 120)
{
	const uint64_t pb = GFA_PAGEBLOCK_FRAMES;
	struct gfa_pool *p = tu_pool(3 * pb);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 7, 3 * pb + 1, true);
	uint64_t start, span, bad, page = 3 * pb;
	int64_t got;

	cr_assert_not_null(o);
	gfa_zone_span(p, 0, &start, &span);
	cr_assert_eq(span, 3 * pb);
	for (uint64_t i = 0; i < 3 * pb; i++)
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
	for (uint64_t i = 0; i < 3 * pb; i++) {
		uint64_t off = o->pfn[i] - start;

		if (off < pb || (off >= pb && off < pb + pb / 2) ||
		    (off >= 2 * pb && off < 2 * pb + pb / 2))
			cr_assert_eq(co_free(o, NULL, i), 0);
	}
	/* the only free order-9 block is the first pageblock */
	cr_assert_eq(co_alloc(o, NULL, 0, page, 9), 0);
	cr_assert_eq(o->pfn[page], start);

	got = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 99, 0);
	cr_assert_eq(got, (int64_t)(start + pb), "expected the second pageblock, got %ld", got);
	cr_assert_eq(o->moves, pb / 2, "%lu moves", o->moves);

	cr_assert_eq(co_verify_all(o, &bad), 0, "page %lu lost its content or mapping", bad);
	cr_assert_eq(gfa_free(p, (uint64_t)got, 9, 99), 0);
	ASSERT_POOL_OK(p);
	for (uint64_t i = 0; i <= 3 * pb; i++)
		if (o->pfn[i] != UINT64_MAX)
			cr_assert_eq(co_free(o, NULL, i), 0);
	co_destroy(o);
	gfa_pool_destroy(p);
	free(mem);
}

Test(compaction, order_minus_one_and_nocompact, .timeout = 120)
{
	struct frag f = fragment(false, true);

	cr_assert_eq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, GFA_ALLOC_NOCOMPACT), GFA_ENOMEM);
	cr_assert_eq(VMS(f.pool, compact_stall), 0);
	cr_assert_eq(gfa_compact_zone(f.pool, 0, -1, GFA_COMPACT_ASYNC), GFA_COMPACT_COMPLETE);
	cr_assert_geq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, GFA_ALLOC_NOCOMPACT), 0);
	frag_done(&f);
}

Test(compaction, bad_inputs)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_compact_config bad = { .proactiveness = 101 };
	uint64_t pfns[1] = { 0 };
	unsigned int orders[1] = { 0 }, offs[1] = { 0 }, offs_bad[2] = { 0, 0 };
	uint64_t pfns2[2] = { 0, 1 };
	unsigned int orders2[2] = { 0, 0 };

	cr_assert_eq(gfa_compact_zone(NULL, 0, 9, GFA_COMPACT_ASYNC), GFA_EFAULT);
	cr_assert_eq(gfa_compact_zone(p, 1, 9, GFA_COMPACT_ASYNC), GFA_ERANGE);
	cr_assert_eq(gfa_compact_zone(p, 0, -2, GFA_COMPACT_ASYNC), GFA_EORDER);
	cr_assert_eq(gfa_compact_zone(p, 0, 11, GFA_COMPACT_ASYNC), GFA_EORDER);
	cr_assert_eq(gfa_compact_configure(p, &bad), GFA_EINVAL);
	cr_assert_eq(gfa_owner_register(p, 1, &co_ops, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, 1, &co_ops, NULL), -EEXIST);
	cr_assert_eq(gfa_owner_register(p, 2, NULL, NULL), -ENOENT);
	cr_assert_eq(gfa_collapse(p, 0, 3, pfns, orders, offs, 1), -ENOENT);
	cr_assert_eq(gfa_collapse(p, 0, 1, NULL, orders, offs, 1), GFA_EFAULT);
	cr_assert_eq(gfa_collapse(p, 0, 1, pfns2, orders2, offs_bad, 2), GFA_EINVAL, "overlap");
	cr_assert_eq(gfa_collapse(p, 0, 1, pfns, orders, offs, 0), GFA_EINVAL);
	cr_assert_eq(gfa_collapse(p, 0, 1, pfns, orders, offs, 1), GFA_ENOTHEAD,
		     "a free block is not the owner's");
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Sources no isolated target fits (order-1 sources, only order-0 free frames): every
 * target request isolates one more small free block; the target array must stay
 * bounded (it once overflowed into the rest of compact_control).
 */
Test(compaction, isolated_targets_stay_bounded, .timeout = 120)
{
	struct gfa_pool *p = tu_pool(32 * GFA_PAGEBLOCK_FRAMES);
	const struct gfa_owner_ops ops = { .migrate = tu_migrate_ok };
	uint64_t *pinned = malloc(16 * GFA_PAGEBLOCK_FRAMES * sizeof(*pinned));
	unsigned int n = 0;
	int64_t pfn;

	cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
	/* order-1 blocks alternate: owner 1 (movable sources), owner 2 (unregistered) */
	for (uint64_t i = 0;
	     (pfn = gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, (i & 1) ? 2 : 1, GFA_ALLOC_NOCOMPACT)) >= 0;
	     i++)
		if (i & 1)
			pinned[n++] = (uint64_t)pfn;
	/* owner 2 keeps the upper frame of each block: free frames are single, unmergeable */
	for (unsigned int i = 0; i < n; i++) {
		cr_assert_eq(gfa_block_split(p, pinned[i], 1, 2, 0), 0);
		cr_assert_eq(gfa_free(p, pinned[i], 0, 2), 0);
	}
	cr_assert_geq(gfa_compact_zone(p, 0, 9, GFA_COMPACT_SYNC), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), n);
	free(pinned);
	gfa_pool_destroy(p);
}

/* ---- concurrency: compaction while vCPU threads churn through their caches ---- */

static int churn_done;

struct churn {
	struct gfa_pool *pool;
	struct canary_owner *o;
	int iters;
	uint64_t seed;
};

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	struct gfa_pcp *pcp = gfa_pcp_create(c->pool, 0);

	for (int i = 0; i < c->iters; i++) {
		uint64_t r = tu_rand(&c->seed), page = (r >> 8) % c->o->npages;
		bool live;

		pthread_mutex_lock(&c->o->lock);
		live = c->o->pfn[page] != UINT64_MAX;
		pthread_mutex_unlock(&c->o->lock);
		if (live) {
			int e = co_free(c->o, pcp, page);

			cr_assert_eq(e, 0, "free of page %lu: %d", page, e);
		} else
			co_alloc(c->o, pcp, 0, page,
				 (r & 3) == 0 ? (unsigned int)((r >> 4) % 4) : 0);
	}
	gfa_pcp_destroy(pcp);
	__atomic_fetch_add(&churn_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(compaction, concurrent_with_cache_churn, .timeout = 300)
{
	struct gfa_pool *p = tu_pool(CP_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o[2] = { co_create(p, 1, CP_FRAMES / 3, true),
				      co_create(p, 2, CP_FRAMES / 3, true) };
	struct churn c[2];
	pthread_t t[2];
	int iters = tu_sanitizer() ? 20000 : 200000;
	uint64_t bad = 0;

	for (int i = 0; i < 2; i++) {
		c[i] = (struct churn){ p, o[i], iters, 77 + i };
		pthread_create(&t[i], NULL, churn_main, &c[i]);
	}
	int rounds = 0;

	for (int k = 0; k < 30 || __atomic_load_n(&churn_done, __ATOMIC_ACQUIRE) < 2;
	     k++, rounds++) {
		int64_t h = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 99, 0);

		if (h >= 0)
			gfa_free(p, (uint64_t)h, 9, 99);
		gfa_compact_zone(p, 0, k % 3 ? 9 : -1, (enum gfa_compact_mode)(k % 3));
		ASSERT_POOL_OK(p);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_log_info("%d compaction rounds ran beside the churn; %lu + %lu moves", rounds,
		    o[0]->moves, o[1]->moves);
	/* moves usually happen here, but need not: the point is that nothing breaks */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(co_verify_all(o[i], &bad), 0, "owner %d page %lu", i, bad);
		co_destroy(o[i]);
	}
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
	free(mem);
}

Test(compaction, kcompactd_proactive, .timeout = 120)
{
	struct frag f = fragment(false, true);
	struct gfa_compact_config cfg = { .linear_only = false, .proactiveness = 80 };
	int score = 100;

	gfa_compact_configure(f.pool, &cfg);
	cr_assert_eq(gfa_compactd_start(f.pool), 0);
	cr_assert_eq(gfa_compactd_start(f.pool), -EALREADY);
	for (int i = 0; i < 100 && score > 30; i++) {
		usleep(100 * 1000);
		score = gfa_zone_fragmentation_score(f.pool, 0);
	}
	cr_assert_eq(gfa_compactd_stop(f.pool), 0);
	cr_assert_leq(score, 30, "score still %d", score);
	cr_assert_gt(VMS(f.pool, compact_daemon_wake), 0);
	cr_assert_gt(VMS(f.pool, compact_daemon_migrate_scanned), 0);
	frag_done(&f);
}

/*
 * kcompactd checks every 500 ms, and backs off after a pass that did not help: here the
 * frames are unmovable, nothing can help.  (It waited on the wrong clock and ran tens of
 * thousands of passes a second.)
 */
Test(compaction, kcompactd_sleeps_between_checks, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8192);
	struct gfa_compact_config cc = { .linear_only = false, .proactiveness = 20 };
	uint64_t wakes;

	for (uint64_t i = 0; i < 8192; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 1, 0), 0);
	for (uint64_t pfn = 0; pfn < 8192; pfn++)
		if ((pfn & (GFA_PAGEBLOCK_FRAMES - 1)) < GFA_PAGEBLOCK_FRAMES / 2)
			cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	cr_assert_gt(gfa_zone_fragmentation_score(p, 0), 90);
	cr_assert_eq(gfa_compact_configure(p, &cc), 0);
	cr_assert_eq(gfa_compactd_start(p), 0);
	usleep(1200 * 1000);
	cr_assert_eq(gfa_compactd_stop(p), 0);
	wakes = VMS(p, compact_daemon_wake);
	cr_assert(wakes >= 1 && wakes <= 2, "kcompactd ran %lu proactive passes in 1.2 s",
		  (unsigned long)wakes);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- rev13f ---- */

/* A kcompactd run woken by a failed huge allocation is a daemon run: its scans count. */
Test(compaction, woken_kcompactd_scans_are_daemon_scans, .timeout = 60)
{
	struct frag f = fragment(false, true); /* proactiveness 0: only wakes run */

	cr_assert_eq(gfa_compactd_start(f.pool), 0);
	gfa_compactd_wake(f.pool, 0);
	for (int i = 0; i < 500 && !VMS(f.pool, compact_migrate_scanned); i++)
		usleep(10 * 1000);
	cr_assert_eq(gfa_compactd_stop(f.pool), 0);
	cr_assert_eq(VMS(f.pool, compact_daemon_wake), 1);
	cr_assert_gt(VMS(f.pool, compact_migrate_scanned), 0, "the woken run did not scan");
	cr_assert_eq(VMS(f.pool, compact_daemon_migrate_scanned),
		     VMS(f.pool, compact_migrate_scanned),
		     "daemon_migrate_scanned %lu, but only kcompactd ran and scanned %lu",
		     (unsigned long)VMS(f.pool, compact_daemon_migrate_scanned),
		     (unsigned long)VMS(f.pool, compact_migrate_scanned));
	frag_done(&f);
}

/* pgfree_blocks counts blocks callers freed: compaction moving a block frees nothing of theirs. */
Test(compaction, migration_is_not_a_caller_free, .timeout = 120)
{
	struct frag f = fragment(false, true);
	int64_t h = gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, 0);
	uint64_t live = 1, held;

	cr_assert_geq(h, 0);
	cr_assert_gt(f.o->moves, 0);
	for (uint64_t i = 0; i < f.o->npages; i++)
		live += f.o->pfn[i] != UINT64_MAX;
	held = VMS(f.pool, pgalloc_blocks) - VMS(f.pool, pgfree_blocks);
	cr_assert_eq(held, live,
		     "pgalloc_blocks - pgfree_blocks = %ld but callers hold %lu blocks (%lu moves)",
		     (long)held, (unsigned long)live, (unsigned long)f.o->moves);
	cr_assert_eq(gfa_free(f.pool, (uint64_t)h, 9, 99), 0);
	frag_done(&f);
}

/* A free UNMOVABLE order-9 block must not stop direct compaction for a NOFALLBACK one. */
Test(compaction, nofallback_request_is_compacted_for, .timeout = 120)
{
	struct frag f = fragment(false, true);
	uint64_t start, span;
	int64_t u, r;

	gfa_zone_span(f.pool, 0, &start, &span);
	/* empty pageblock 5, give it to an UNMOVABLE allocation (steals it), free it */
	for (uint64_t i = 0; i < f.o->npages; i++)
		if (f.o->pfn[i] != UINT64_MAX && (f.o->pfn[i] - start) / GFA_PAGEBLOCK_FRAMES == 5)
			cr_assert_eq(co_free(f.o, NULL, i), 0);
	u = gfa_alloc(f.pool, 0, 9, GFA_MT_UNMOVABLE, 5, GFA_ALLOC_NOCOMPACT);
	cr_assert_eq(u, (int64_t)(start + 5 * GFA_PAGEBLOCK_FRAMES));
	cr_assert_eq(gfa_free(f.pool, (uint64_t)u, 9, 5), 0);

	r = gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, GFA_ALLOC_NOFALLBACK);
	cr_assert_geq(r, 0, "NOFALLBACK order-9 MOVABLE: %ld after %lu moves, %lu stalls", (long)r,
		      (unsigned long)f.o->moves, (unsigned long)VMS(f.pool, compact_stall));
	cr_assert_eq(gfa_free(f.pool, (uint64_t)r, 9, 99), 0);
	frag_done(&f);
}

/* NOFALLBACK: never from another migratetype, capture included. */
Test(compaction, capture_keeps_nofallback, .timeout = 120)
{
	struct frag f = fragment(false, true);
	struct gfa_zone_stat st;
	int64_t r = gfa_alloc(f.pool, 0, 9, GFA_MT_UNMOVABLE, 99, GFA_ALLOC_NOFALLBACK);

	cr_assert_eq(gfa_zone_stat(f.pool, 0, &st), 0);
	cr_assert_eq(r, GFA_ENOMEM,
		     "UNMOVABLE NOFALLBACK got block %ld; UNMOVABLE pageblocks: %lu,"
		     " captures %lu",
		     (long)r, (unsigned long)st.nr_pageblocks[GFA_MT_UNMOVABLE],
		     (unsigned long)VMS(f.pool, compact_capture));
	frag_done(&f);
}

/* A mode that is none of enum gfa_compact_mode is bad input: it must change nothing. */
Test(compaction, bad_mode_changes_nothing, .timeout = 120)
{
	struct frag f = fragment(false, true);
	int ret = gfa_compact_zone(f.pool, 0, 9, (enum gfa_compact_mode)42);

	cr_assert_lt(ret, 0, "mode 42 returned %d after %lu moves", ret, (unsigned long)f.o->moves);
	cr_assert_eq(f.o->moves, 0);
	frag_done(&f);
}

/* A capture that leaves exactly the unclaimed frames the request needs is allowed. */
Test(compaction, capture_within_unclaimed_frames, .timeout = 120)
{
	struct frag f = fragment(false, true);
	uint64_t nfree = tu_free_frames(f.pool);
	int64_t r;

	cr_assert_eq(gfa_zone_claim(f.pool, 0, 5, nfree - GFA_PAGEBLOCK_FRAMES), 0);
	r = gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, 0);
	cr_assert_geq(r, 0);
	cr_assert_eq(VMS(f.pool, compact_capture), 1,
		     "the block formed was captured then thrown back"
		     " (captures %lu, successes %lu)",
		     (unsigned long)VMS(f.pool, compact_capture),
		     (unsigned long)VMS(f.pool, compact_success));
	cr_assert_eq(gfa_free(f.pool, (uint64_t)r, 9, 99), 0);
	gfa_zone_unclaim(f.pool, 0, 5);
	frag_done(&f);
}

/*
 * The free scanner finds every free block of a pageblock from the free-head bitmap, in
 * async mode too (the adaptive stride sampled every 32nd frame there and missed free
 * frames between its probes), and examines nothing else: free scanned is one look at
 * the block plus one per free block, not one per frame.
 */
Test(compaction, async_free_scanner_finds_every_scattered_free_block, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(2 * GFA_PAGEBLOCK_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 7, 2 * GFA_PAGEBLOCK_FRAMES, true);
	uint64_t heads = 0, fs;
	int ret;

	cr_assert_not_null(o);
	cr_assert_eq(gfa_compact_configure(p, &(struct gfa_compact_config){ 0 }), 0);
	for (uint64_t i = 0; i < 2 * GFA_PAGEBLOCK_FRAMES; i++)
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
	/* pageblock 0 keeps its upper half (the sources); pageblock 1 frees two frames of
	 * every four: 128 order-1 free blocks, exactly the 256 targets the sources need */
	for (uint64_t i = 0; i < 2 * GFA_PAGEBLOCK_FRAMES; i++) {
		uint64_t off = o->pfn[i] & (2 * GFA_PAGEBLOCK_FRAMES - 1);

		if (off < GFA_PAGEBLOCK_FRAMES / 2 ||
		    (off >= GFA_PAGEBLOCK_FRAMES && off % 4 < 2)) {
			cr_assert_eq(co_free(o, NULL, i), 0);
			heads += off >= GFA_PAGEBLOCK_FRAMES && off % 4 == 0;
		}
	}
	cr_assert_eq(heads, 128);
	ASSERT_POOL_OK(p);
	ret = gfa_compact_zone(p, 0, GFA_PAGEBLOCK_ORDER, GFA_COMPACT_ASYNC);
	fs = VMS(p, compact_free_scanned);
	cr_log_info("async compaction: result %d, free scanned %lu", ret, fs);
	/* the scanners meet as pageblock 0 empties: COMPLETE comes first, as in the kernel */
	cr_assert(ret == GFA_COMPACT_SUCCESS || ret == GFA_COMPACT_COMPLETE, "result %d", ret);
	cr_assert_eq(VMS(p, pgmigrate_success), 256, "every source moved");
	cr_assert_eq(gfa_alloc(p, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, 99, GFA_ALLOC_NOCOMPACT),
		     0);
	/* the 128 heads, a look per pageblock, and the fast search's few list entries */
	cr_assert_geq(fs, heads);
	cr_assert_leq(fs, heads + 16, "free scanned %lu for %lu free blocks", fs, heads);
	{
		struct frag f = { p, o, mem };

		frag_done(&f);
	}
}

/*
 * Every free frame is claimed by another owner: no compaction can give this owner a
 * block (moves conserve free frames), so none runs: no stall, no moves of other
 * owners' memory, no capture handed back (before: 3 stalls and 256 moves for nothing).
 */
Test(compaction, no_compaction_when_claims_refuse_the_request, .timeout = 60)
{
	struct frag f = fragment(false, true);
	uint64_t moves = f.o->moves, stall = VMS(f.pool, compact_stall);

	cr_assert_eq(gfa_zone_claim(f.pool, 0, 55, tu_free_frames(f.pool)), 0);
	cr_assert_eq(gfa_alloc(f.pool, 0, 9, GFA_MT_MOVABLE, 99, 0), GFA_ENOMEM);
	cr_assert_eq(f.o->moves - moves, 0, "%lu blocks moved for nothing",
		     (unsigned long)(f.o->moves - moves));
	cr_assert_eq(VMS(f.pool, compact_stall) - stall, 0);
	gfa_zone_unclaim(f.pool, 0, 55);
	frag_done(&f);
}

/*
 * Counted in pages, as /proc/vmstat: one order-2 block moved is pgmigrate_success +4,
 * compact_isolated +8 (4 source, 4 target frames) — not +1 and +2 (blocks).
 */
Test(compaction, migration_counters_count_pages, .timeout = 60)
{
	const uint64_t frames = 4 * GFA_PAGEBLOCK_FRAMES;
	struct gfa_pool *p = tu_pool(frames);
	struct canary_owner *o = co_create(p, 7, frames / 4, false);
	uint64_t keep = UINT64_MAX, hole = UINT64_MAX, ok, iso;

	cr_assert_not_null(o);
	for (uint64_t i = 0; i < frames / 4; i++)
		cr_assert_eq(co_alloc(o, NULL, 0, i, 2), 0);
	for (uint64_t i = 0; i < frames / 4; i++) {
		keep = o->pfn[i] == 0 ? i : keep;
		hole = o->pfn[i] == frames - 4 ? i : hole;
	}
	cr_assert(keep != UINT64_MAX && hole != UINT64_MAX);
	/* pageblock 0 keeps one order-2 block; pageblock 3 has one order-2 hole */
	for (uint64_t i = 0; i < frames / 4; i++)
		if (i != keep && o->pfn[i] < GFA_PAGEBLOCK_FRAMES)
			cr_assert_eq(co_free(o, NULL, i), 0);
	cr_assert_eq(co_free(o, NULL, hole), 0);
	ok = VMS(p, pgmigrate_success);
	iso = VMS(p, compact_isolated);
	cr_assert_geq(gfa_compact_zone(p, 0, 9, GFA_COMPACT_SYNC), 0);
	cr_assert_eq(o->moves, 1, "layout: one block moves (moved %lu)", (unsigned long)o->moves);
	cr_assert_eq(VMS(p, pgmigrate_success) - ok, 4);
	cr_assert_eq(VMS(p, compact_isolated) - iso, 8);
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
}

/*
 * skip_on_failure puts a window's sources back when a frame in it can never move: what
 * was put back was not kept isolated and is not counted (the kernel resets nr_isolated
 * after putback_movable_pages).
 */
Test(compaction, sources_put_back_are_not_counted_isolated, .timeout = 60)
{
	const uint64_t frames = 4 * GFA_PAGEBLOCK_FRAMES;
	struct gfa_pool *p = tu_pool(frames);
	struct canary_owner *o = co_create(p, 7, frames, false);
	uint64_t iso;

	cr_assert_not_null(o);
	for (uint64_t i = 0; i < frames; i++)
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
	/* offset 1 of every pageblock: an owner without a migrate op (never moves) */
	for (uint64_t i = 0; i < frames; i++) {
		uint64_t at = o->pfn[i];

		if ((at & (GFA_PAGEBLOCK_FRAMES - 1)) != 1)
			continue;
		cr_assert_eq(co_free(o, NULL, i), 0);
		cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 0, GFA_ALLOC_NOCOMPACT),
			     (int64_t)at);
	}
	for (uint64_t i = 0; i < frames; i++)
		if (o->pfn[i] != UINT64_MAX &&
		    (o->pfn[i] & (GFA_PAGEBLOCK_FRAMES - 1)) >= GFA_PAGEBLOCK_FRAMES / 2)
			cr_assert_eq(co_free(o, NULL, i), 0);
	iso = VMS(p, compact_isolated);
	cr_assert_eq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 99, 0), GFA_ENOMEM);
	cr_assert_eq(VMS(p, pgmigrate_success), 0);
	cr_assert_eq(VMS(p, compact_isolated) - iso, 0, "%lu isolations counted, all put back",
		     (unsigned long)(VMS(p, compact_isolated) - iso));
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
}
