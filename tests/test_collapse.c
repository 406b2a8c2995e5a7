/*
 * Collapse (allocator/collapse.c): an owner's small blocks moved into one order-9 block,
 * all or nothing, against canary-keeping owners and owners that refuse, stall or leave.
 */
#include "tests/test_util.h"
#include "refvmm/canary_owner.h"

static uint64_t collapsed_at;
static void note_collapsed(void *ctx, uint64_t owner, uint64_t dst)
{
	(void)ctx;
	(void)owner;
	collapsed_at = dst;
}

Test(collapse, moves_a_range_into_one_block, .timeout = 120)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 5, 2048, true);
	struct gfa_owner_ops ops = co_ops;
	uint64_t pfns[512];
	unsigned int orders[512], offs[512];
	int64_t dst;

	ops.collapsed = note_collapsed;
	gfa_owner_register(p, 5, NULL, NULL);
	gfa_owner_register(p, 5, &ops, o);
	/* 512 guest pages interleaved with 512 others: scattered over two pageblocks */
	for (uint64_t i = 0; i < 1024; i++)
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
	for (unsigned int i = 0; i < 512; i++) {
		pfns[i] = o->pfn[2 * i];
		orders[i] = 0;
		offs[i] = i;
	}
	o->refuse = -EAGAIN;
	cr_assert_eq(gfa_collapse(p, 0, 5, pfns, orders, offs, 512), -EAGAIN);
	for (unsigned int i = 0; i < 512; i++)
		cr_assert_eq(o->pfn[2 * i], pfns[i], "refused collapse must leave pages in place");
	ASSERT_POOL_OK(p);
	o->refuse = 0;
	dst = gfa_collapse(p, 0, 5, pfns, orders, offs, 512);
	cr_assert_geq(dst, 0);
	cr_assert_eq(dst & 511, 0);
	cr_assert_eq(collapsed_at, (uint64_t)dst);
	for (unsigned int i = 0; i < 512; i++)
		cr_assert_eq(o->pfn[2 * i], (uint64_t)dst + i);
	/* as khugepaged counts: two huge allocations (the refused collapse had one too),
	 * none failed; the refused piece's frame failed to move, 512 moved */
	cr_assert_eq(VMS(p, thp_collapse_alloc), 2);
	cr_assert_eq(VMS(p, thp_collapse_alloc_failed), 0);
	cr_assert_eq(VMS(p, pgmigrate_fail), 1);
	cr_assert_eq(VMS(p, pgmigrate_success), 512);
	cr_assert_eq(co_verify_page(o, 0), 0);
	ASSERT_POOL_OK(p);
	free(mem);
	co_destroy(o);
	gfa_pool_destroy(p);
}

/* A failed collapse changes nothing: not the pages, not the owner's claim. */
Test(collapse, failed_collapse_leaves_the_claim_alone, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	struct canary_owner *o = co_create(p, 5, 4, false);
	uint64_t pfns[4];
	unsigned int orders[4] = { 0, 0, 0, 0 }, offs[4] = { 0, 1, 2, 3 };

	for (uint64_t i = 0; i < 4; i++) {
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
		pfns[i] = o->pfn[i];
	}
	cr_assert_eq(gfa_zone_claim(p, 0, 5, 2048), 0);
	o->refuse = -EAGAIN;
	cr_assert_eq(gfa_collapse(p, 0, 5, pfns, orders, offs, 4), -EAGAIN);
	cr_assert_eq(gfa_zone_claimed(p, 0), 2048, "claim is %lu after a failed collapse",
		     (unsigned long)gfa_zone_claimed(p, 0));
	o->refuse = 0;
	cr_assert_geq(gfa_collapse(p, 0, 5, pfns, orders, offs, 4), 0);
	cr_assert_eq(gfa_zone_claimed(p, 0), 2048 - 512, "a collapse is charged its block");
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
}

/* An owner that refuses to take pieces back for a while still gets them all back. */
struct co_moody {
	struct canary_owner *o;
	int forward_ok, back_refusals;
};

static int moody_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct co_moody *m = ctx;

	if (m->forward_ok > 0) {
		m->forward_ok--;
		return co_migrate(m->o, owner, s, d, o);
	}
	if (m->forward_ok == 0) { /* refuse the next forward move: rollback starts */
		m->forward_ok = -1;
		return -EAGAIN;
	}
	if (m->back_refusals > 0) {
		m->back_refusals--;
		return -EBUSY;
	}
	return co_migrate(m->o, owner, s, d, o);
}

Test(collapse, rollback_retries_a_busy_owner, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 6, 8, true);
	struct co_moody m = { o, 5, 20 };
	struct gfa_owner_ops ops = { .migrate = moody_migrate };
	uint64_t pfns[8], free0;
	unsigned int orders[8], offs[8];

	gfa_owner_register(p, 6, NULL, NULL);
	cr_assert_eq(gfa_owner_register(p, 6, &ops, &m), 0);
	for (unsigned int i = 0; i < 8; i++) {
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
		pfns[i] = o->pfn[i];
		orders[i] = 0;
		offs[i] = i;
	}
	free0 = tu_free_frames(p);
	cr_assert_eq(gfa_collapse(p, 0, 6, pfns, orders, offs, 8), -EAGAIN);
	for (unsigned int i = 0; i < 8; i++) {
		cr_assert_eq(o->pfn[i], pfns[i], "page %u not back in its old block", i);
		cr_assert_eq(co_verify_page(o, i), 0);
	}
	cr_assert_eq(tu_free_frames(p), free0, "the new block must be freed");
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
	free(mem);
}

/* An owner that never takes a piece back keeps the new block: its claim stays spent. */
struct co_stubborn {
	struct canary_owner *o;
	int forward_ok;
};

static int stubborn_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct co_stubborn *m = ctx;

	if (m->forward_ok > 0) {
		m->forward_ok--;
		return co_migrate(m->o, owner, s, d, o);
	}
	return -EAGAIN; /* the next forward move, and every move back */
}

/*
 * The owner takes two pieces and then refuses everything, moves back included: the two
 * pieces stay moved, each a block of its own inside the new 2 MiB block, the rest of it
 * and their old blocks are freed, the claim is as before, and the owner can free every
 * page where it now maps it (it could not: they lay inside one order-9 block).
 */
Test(collapse, stuck_collapse_leaves_blocks_the_owner_can_free, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 6, 4, true);
	struct co_stubborn m = { o, 2 };
	struct gfa_owner_ops ops = { .migrate = stubborn_migrate };
	uint64_t pfns[4], free0, claim0, bad = UINT64_MAX;
	unsigned int orders[4] = { 0, 0, 0, 0 }, offs[4] = { 0, 1, 2, 3 };

	gfa_owner_register(p, 6, NULL, NULL);
	cr_assert_eq(gfa_owner_register(p, 6, &ops, &m), 0);
	for (unsigned int i = 0; i < 4; i++) {
		cr_assert_eq(co_alloc(o, NULL, 0, i, 0), 0);
		pfns[i] = o->pfn[i];
	}
	cr_assert_eq(gfa_zone_claim(p, 0, 6, 2048), 0);
	free0 = tu_free_frames(p);
	claim0 = gfa_zone_claimed(p, 0);
	cr_assert_eq(gfa_collapse(p, 0, 6, pfns, orders, offs, 4), -EAGAIN);
	ASSERT_POOL_OK(p);
	cr_assert_eq(co_verify_all(o, &bad), 0, "page %lu is not a block of the owner's",
		     (unsigned long)bad);
	cr_assert_neq(o->pfn[0], pfns[0], "page 0 stayed moved");
	cr_assert_eq(o->pfn[2], pfns[2], "page 2 never moved");
	cr_assert_eq(tu_free_frames(p), free0, "the owner holds as many frames as before");
	cr_assert_eq(VMS(p, pgalloc_blocks) - VMS(p, pgfree_blocks), 4,
		     "pgalloc_blocks - pgfree_blocks = %ld, held 4",
		     (long)(VMS(p, pgalloc_blocks) - VMS(p, pgfree_blocks)));
	cr_assert_eq(gfa_zone_claimed(p, 0), claim0, "claim %lu (was %lu)",
		     (unsigned long)gfa_zone_claimed(p, 0), (unsigned long)claim0);
	for (unsigned int i = 0; i < 4; i++)
		cr_assert_eq(co_free(o, NULL, i), 0, "page %u", i);
	cr_assert_eq(tu_free_frames(p), 8 * GFA_PAGEBLOCK_FRAMES);
	ASSERT_POOL_OK(p);
	gfa_zone_unclaim(p, 0, 6);
	co_destroy(o);
	gfa_pool_destroy(p);
	free(mem);
}

/* An owner that unregisters itself from its first migrate call and frees its context
 * (ops included), as allocator.h allows: its ops must never run again. */
struct co_leaving {
	struct gfa_owner_ops ops;
	struct gfa_pool *pool;
	int answer; /* what the unregistering call returns */
};
static int leaving_calls, leaving_collapsed;

static int leaving_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct co_leaving *l = ctx;
	int answer = l->answer;

	(void)s, (void)d, (void)o;
	leaving_calls++;
	cr_assert_eq(gfa_owner_register(l->pool, owner, NULL, NULL), 0);
	free(l);
	return answer;
}

static void leaving_note_collapsed(void *ctx, uint64_t owner, uint64_t dst)
{
	(void)ctx, (void)owner, (void)dst;
	leaving_collapsed++;
}

/* Two order-0 pieces; the op unregisters on the first move and answers `answer`. */
static void collapse_with_leaving_owner(int answer)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	struct co_leaving *l = malloc(sizeof(*l));
	uint64_t pfns[2], free0;
	unsigned int orders[2] = { 0, 0 }, offs[2] = { 0, 1 };
	struct gfa_frame_info fi;
	int64_t dst;

	cr_assert_not_null(l);
	*l = (struct co_leaving){ { .migrate = leaving_migrate,
				    .collapsed = leaving_note_collapsed },
				  p,
				  answer };
	leaving_calls = leaving_collapsed = 0;
	cr_assert_eq(gfa_owner_register(p, 8, &l->ops, l), 0);
	for (unsigned int i = 0; i < 2; i++) {
		int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 8, 0);

		cr_assert_geq(a, 0);
		pfns[i] = (uint64_t)a;
	}
	free0 = tu_free_frames(p);
	dst = gfa_collapse(p, 0, 8, pfns, orders, offs, 2);
	cr_assert_eq(dst, -ENOENT, "collapse with an owner gone: %ld", (long)dst);
	cr_assert_eq(leaving_calls, 1, "ops called %d times, after the owner left", leaving_calls);
	cr_assert_eq(leaving_collapsed, 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), free0, "the owner holds as many frames as before");
	/* the piece never asked stays where it was, the owner's */
	cr_assert_eq(gfa_frame_lookup(p, pfns[1], &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.owner, 8);
	cr_assert_eq(fi.head_pfn, pfns[1]);
	if (!answer) {
		/* the moved one is a block of its own where the op put it; its source is free */
		cr_assert_eq(gfa_frame_lookup(p, pfns[0], &fi), 0);
		cr_assert_neq(fi.state, GFA_FRAME_ALLOCATED, "the moved piece's old block");
	} else {
		cr_assert_eq(gfa_frame_lookup(p, pfns[0], &fi), 0);
		cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED, "a refused piece stays");
		cr_assert_eq(fi.owner, 8);
	}
	cr_assert_eq(gfa_owner_register(p, 8, NULL, NULL), -ENOENT, "unregistered once");
	gfa_pool_destroy(p);
}

/* ASan: a heap use-after-free in collapse_move without the liveness check. */
Test(collapse, stops_when_an_op_unregisters_its_owner, .timeout = 60)
{
	collapse_with_leaving_owner(0);
}

Test(collapse, refused_by_an_owner_that_left_moves_nothing_back, .timeout = 60)
{
	collapse_with_leaving_owner(-EAGAIN);
}

struct reclaimer {
	struct gfa_pool *pool;
	bool done;
};

/* Refuses, after dropping the owner's claim and making a new one (a VM rebuilt). */
static int reclaim_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct reclaimer *r = ctx;

	(void)s, (void)d, (void)o;
	if (!r->done) {
		r->done = true;
		cr_assert_geq(gfa_zone_unclaim(r->pool, 0, owner), 0);
		cr_assert_eq(gfa_zone_claim(r->pool, 0, owner, 100), 0);
	}
	return -EAGAIN;
}

Test(collapse, failed_collapse_refunds_only_the_claim_it_charged, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	struct reclaimer r = { p, false };
	struct gfa_owner_ops ops = { .migrate = reclaim_migrate };
	int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 6, 0);
	uint64_t pfns[1];
	unsigned int orders[1] = { 0 }, offs[1] = { 0 };

	cr_assert_geq(a, 0);
	pfns[0] = (uint64_t)a;
	cr_assert_eq(gfa_owner_register(p, 6, &ops, &r), 0);
	cr_assert_eq(gfa_zone_claim(p, 0, 6, 2048), 0);
	cr_assert_eq(gfa_collapse(p, 0, 6, pfns, orders, offs, 1), -EAGAIN);
	cr_assert(r.done);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_zone_claimed(p, 0), 100,
		     "a claim of 100 made during the collapse is now %lu",
		     (unsigned long)gfa_zone_claimed(p, 0));
	gfa_zone_unclaim(p, 0, 6);
	gfa_owner_register(p, 6, NULL, NULL);
	gfa_pool_destroy(p);
}

/* The same block listed twice overlaps itself: bad input, not "busy" forever. */
Test(collapse, one_block_twice_is_einval)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0);
	uint64_t pfns[2], busy0 = VMS(p, err_busy);
	unsigned int orders[2] = { 0, 0 }, offs[2] = { 0, 1 };

	cr_assert_geq(a, 0);
	pfns[0] = pfns[1] = (uint64_t)a;
	cr_assert_eq(gfa_owner_register(p, 5, &co_ops, NULL), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(gfa_collapse(p, 0, 5, pfns, orders, offs, 2), GFA_EINVAL);
	cr_assert_eq(VMS(p, err_busy), busy0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 0, 5), 0);
	gfa_owner_register(p, 5, NULL, NULL);
	gfa_pool_destroy(p);
}

/* A misaligned pfn is GFA_EALIGN (counted so), as everywhere else. */
Test(collapse, of_a_misaligned_pfn_is_ealign)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t pfn = gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, 5, 0);
	uint64_t pfns[1], align0 = VMS(p, err_align), range0 = VMS(p, err_range);
	unsigned int orders[1] = { 1 }, offs[1] = { 0 };

	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_owner_register(p, 5, &co_ops, NULL), 0);
	pfns[0] = (uint64_t)pfn + 1;
	cr_assert_eq(gfa_collapse(p, 0, 5, pfns, orders, offs, 1), GFA_EALIGN);
	cr_assert_eq(VMS(p, err_align), align0 + 1);
	cr_assert_eq(gfa_pfn_to_zone(p, 1ULL << 40), GFA_ERANGE);
	cr_assert_eq(VMS(p, err_range), range0 + 1, "pfn_to_zone's error is counted");
	cr_assert_eq(gfa_owner_register(p, 5, NULL, NULL), 0);
	cr_assert_eq(gfa_free(p, (uint64_t)pfn, 1, 5), 0);
	gfa_pool_destroy(p);
}

/* Offsets are checked without sums that wrap. */
Test(collapse, rejects_an_offset_that_wraps)
{
	struct gfa_pool *p = tu_pool(4 * GFA_PAGEBLOCK_FRAMES);
	struct canary_owner *o = co_create(p, 3, 1, false);
	unsigned int order = 0, off = UINT32_MAX;
	uint64_t pfn, inval0;

	cr_assert_eq(co_alloc(o, NULL, 0, 0, 0), 0);
	pfn = o->pfn[0];
	inval0 = VMS(p, err_inval);
	cr_assert_eq(gfa_collapse(p, 0, 3, &pfn, &order, &off, 1), GFA_EINVAL);
	cr_assert_eq(VMS(p, err_inval), inval0 + 1);
	cr_assert_eq(o->pfn[0], pfn);
	cr_assert_eq(o->moves, 0);
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
}

/* Pieces of every order below 9 fill the block, each at its offset, data intact. */
Test(collapse, pieces_of_every_order_fill_one_block, .timeout = 60)
{
	static const unsigned int ord[10] = { 8, 7, 6, 5, 4, 3, 2, 1, 0, 0 };
	struct gfa_pool *p = tu_pool(8 * GFA_PAGEBLOCK_FRAMES);
	void *mem = co_back_pool(p);
	struct canary_owner *o = co_create(p, 5, 10, true);
	struct gfa_owner_ops ops = co_ops;
	uint64_t pfns[10], free0;
	unsigned int orders[10], offs[10], off = 0;
	struct gfa_frame_info fi;
	int64_t dst;

	ops.collapsed = note_collapsed;
	cr_assert_eq(gfa_owner_register(p, 5, NULL, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, 5, &ops, o), 0);
	/* the smallest first, so the pieces do not lie in order in one block already */
	for (int i = 9; i >= 0; i--)
		cr_assert_eq(co_alloc(o, NULL, 0, (uint64_t)i, ord[i]), 0);
	for (unsigned int i = 0; i < 10; i++) {
		pfns[i] = o->pfn[i];
		orders[i] = ord[i];
		offs[i] = off;
		off += 1U << ord[i];
	}
	cr_assert_eq(off, GFA_PAGEBLOCK_FRAMES);
	free0 = tu_free_frames(p);
	collapsed_at = UINT64_MAX;
	dst = gfa_collapse(p, 0, 5, pfns, orders, offs, 10);
	cr_assert_geq(dst, 0, "collapse: %ld", (long)dst);
	cr_assert_eq(collapsed_at, (uint64_t)dst, "the owner is told where");
	for (unsigned int i = 0; i < 10; i++)
		cr_assert_eq(o->pfn[i], (uint64_t)dst + offs[i], "piece %u", i);
	cr_assert_eq(gfa_frame_lookup(p, (uint64_t)dst + 300, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.head_pfn, (uint64_t)dst);
	cr_assert_eq(fi.order, GFA_PAGEBLOCK_ORDER);
	cr_assert_eq(fi.owner, 5);
	cr_assert_eq(fi.mt, GFA_MT_MOVABLE);
	cr_assert_eq(tu_free_frames(p), free0, "as many frames held as before");
	cr_assert_eq(VMS(p, pgmigrate_success), GFA_PAGEBLOCK_FRAMES);
	for (unsigned int i = 0; i < 10; i++)
		cr_assert_eq(co_verify_page(o, i), 0, "page %u lost its data", i);
	ASSERT_POOL_OK(p);
	/* the owner's pages are one block now: freed as one */
	cr_assert_eq(gfa_free(p, (uint64_t)dst, GFA_PAGEBLOCK_ORDER, 5), 0);
	cr_assert_eq(tu_free_frames(p), 8 * GFA_PAGEBLOCK_FRAMES);
	ASSERT_POOL_OK(p);
	co_destroy(o);
	gfa_pool_destroy(p);
	free(mem);
}

/* Sources that are not the owner's MOVABLE blocks of the orders given: refused, counted. */
Test(collapse, bad_sources_change_nothing)
{
	struct gfa_pool *p = tu_pool(4 * GFA_PAGEBLOCK_FRAMES);
	int64_t unmov = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 5, 0);
	int64_t big = gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, 5, 0);
	int64_t other = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 6, 0);
	unsigned int order0 = 0, off0 = 0;
	uint64_t pfn;

	cr_assert(unmov >= 0 && big >= 0 && other >= 0);
	cr_assert_eq(gfa_owner_register(p, 5, &co_ops, NULL), 0);
	pfn = (uint64_t)unmov;
	EXPECT_BAD(p, gfa_collapse(p, 0, 5, &pfn, &order0, &off0, 1), GFA_EOWNER, err_owner);
	pfn = (uint64_t)big;
	EXPECT_BAD(p, gfa_collapse(p, 0, 5, &pfn, &order0, &off0, 1), GFA_EWRONGORDER,
		   err_wrong_order);
	pfn = (uint64_t)other;
	EXPECT_BAD(p, gfa_collapse(p, 0, 5, &pfn, &order0, &off0, 1), GFA_EOWNER, err_owner);
	pfn = (uint64_t)big + 1;
	EXPECT_BAD(p, gfa_collapse(p, 0, 5, &pfn, &order0, &off0, 1), GFA_ENOTHEAD, err_not_head);
	pfn = 4 * GFA_PAGEBLOCK_FRAMES;
	EXPECT_BAD(p, gfa_collapse(p, 0, 5, &pfn, &order0, &off0, 1), GFA_ERANGE, err_range);
	cr_assert_eq(VMS(p, thp_collapse_alloc) + VMS(p, thp_collapse_alloc_failed), 0,
		     "no target was allocated for bad sources");
	cr_assert_eq(gfa_owner_register(p, 5, NULL, NULL), 0);
	gfa_pool_destroy(p);
}
