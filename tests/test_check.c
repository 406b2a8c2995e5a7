/*
 * gfa_pool_check() against corruptions it must report: white-box, the only tests that
 * reach into the allocator's internals (each breaks one invariant by hand).  Every
 * stress test trusts this checker, so what it misses they miss.
 */
#include "tests/test_util.h"
#include "allocator/internal.h"
#include "allocator/pcp.h"

static int check_says(struct gfa_pool *p, const char *what)
{
	char m[256] = "";
	int err = gfa_pool_check(p, m, sizeof(m));

	cr_log_info("%s: %s", what, m);
	return err;
}

Test(check, a_tail_frame_with_a_state)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t pfn = gfa_alloc(p, 0, 3, GFA_MT_UNMOVABLE, 1, 0);

	cr_assert_geq(pfn, 0);
	ASSERT_POOL_OK(p);
	pfn_to_frame(p, pfn + 1)->order = 0;
	pfn_to_frame(p, pfn + 1)->mt = GFA_MT_MOVABLE;
	fstate_set(pfn_to_frame(p, pfn + 1), GFA_FRAME_FREE);
	cr_assert_eq(check_says(p, "tail with state"), -EUCLEAN);
	gfa_pool_destroy(p);
}

Test(check, a_block_on_a_cache_list_twice)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
	int64_t b = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
	struct pcp_list *l;

	cr_assert(a >= 0 && b >= 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 1), 0);
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)b, 0, 1), 0);
	ASSERT_POOL_OK(p);
	l = &c->lists[c->slots[0].base + GFA_MT_MOVABLE]; /* order 0, MOVABLE */
	cr_assert_geq(plist_nr(l), 2);
	/* one block listed twice, another on no list: the sums still agree */
	l->ring[(l->top - 1) & l->mask] = l->ring[(l->top - 2) & l->mask];
	cr_assert_eq(check_says(p, "duplicate cache entry"), -EUCLEAN);
	l->ring[(l->top - 1) & l->mask] =
		(uint32_t)b == l->ring[(l->top - 2) & l->mask] ? (uint32_t)a : (uint32_t)b;
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

Test(check, claims_that_do_not_add_up)
{
	struct gfa_pool *p = tu_pool(4096);

	cr_assert_eq(gfa_zone_claim(p, 0, 5, 100), 0);
	ASSERT_POOL_OK(p);
	p->zones[0].claimed += 3000;
	cr_assert_eq(check_says(p, "claimed total"), -EUCLEAN);
	p->zones[0].claimed -= 3000;
	gfa_pool_destroy(p);
}

Test(check, a_free_list_link_outside_the_zone)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_free_list *l = &p->zones[0].arenas[0].area[GFA_MAX_ORDER].list[GFA_MT_MOVABLE];

	ASSERT_POOL_OK(p);
	cr_assert_neq(l->head, GFA_NIL);
	pfn_to_frame(p, l->head)->next = 0x7ffffff0u; /* the checker once read it and crashed */
	l->nr++;
	cr_assert_eq(check_says(p, "link out of range"), -EUCLEAN);
	pfn_to_frame(p, l->head)->next = GFA_NIL;
	l->nr--;
	gfa_pool_destroy(p);
}

Test(check, an_allocated_block_of_type_isolate)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t pfn = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);

	cr_assert_geq(pfn, 0);
	pfn_to_frame(p, pfn)->mt = GFA_MT_ISOLATE;
	cr_assert_eq(check_says(p, "allocated ISOLATE"), -EUCLEAN);
	pfn_to_frame(p, pfn)->mt = GFA_MT_MOVABLE;
	gfa_pool_destroy(p);
}

Test(check, pageblock_flags_and_cached_positions)
{
	struct gfa_pool *p = tu_pool(4096);
	uint64_t cached = p->zones[0].compact_cached_free_pfn;

	p->zones[0].pageblocks[1].flags = 0x80;
	cr_assert_eq(check_says(p, "pageblock flags"), -EUCLEAN);
	p->zones[0].pageblocks[1].flags = 0;
	p->zones[0].compact_cached_free_pfn = 12345678;
	cr_assert_eq(check_says(p, "cached position"), -EUCLEAN);
	p->zones[0].compact_cached_free_pfn = cached;
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* A free block of pageblocks on a list its pageblocks' type disagrees with. */
Test(check, a_free_block_spanning_a_pageblock_of_another_type)
{
	struct gfa_pool *p = tu_pool(1024); /* one free order-10 block, MOVABLE */
	struct gfa_zone *z = &p->zones[0];

	ASSERT_POOL_OK(p);
	cr_assert_eq(pfn_to_frame(p, z->start_pfn)->order, 10);
	pageblock_set_mt(&z->pageblocks[1], GFA_MT_UNMOVABLE);
	cr_assert_eq(check_says(p, "free block over a pageblock of another type"), -EUCLEAN);
	pageblock_set_mt(&z->pageblocks[1], pfn_to_frame(p, z->start_pfn)->mt);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* The full-mode free scanner trusts the free-head bitmap: every way out of step shows. */
Test(check, free_head_bits_out_of_step)
{
	struct gfa_pool *p = tu_pool(4096 + 100); /* a partial last pageblock */
	struct gfa_zone *z = &p->zones[0];
	int64_t a = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 1, 0);
	uint64_t end = z->start_pfn + z->nr_frames, fhead = end - 4; /* order-2 free head */
	uint64_t *w;

	cr_assert_geq(a, 0);
	ASSERT_POOL_OK(p);
	cr_assert(free_head_test(z, fhead) && fstate(pfn_to_frame(p, fhead)) == GFA_FRAME_FREE);
	/* an allocated block marked free */
	w = &z->free_heads[((uint64_t)a - z->start_pfn) / 64];
	*w ^= 1ULL << (((uint64_t)a - z->start_pfn) % 64);
	cr_assert_eq(check_says(p, "allocated head with a bit"), -EUCLEAN);
	*w ^= 1ULL << (((uint64_t)a - z->start_pfn) % 64);
	ASSERT_POOL_OK(p);
	/* a free block without its bit: the scanner would never find it */
	w = &z->free_heads[(fhead - z->start_pfn) / 64];
	*w ^= 1ULL << ((fhead - z->start_pfn) % 64);
	cr_assert_eq(check_says(p, "free head without a bit"), -EUCLEAN);
	/* a bit on a tail frame of that free block */
	*w ^= 3ULL << ((fhead - z->start_pfn) % 64);
	cr_assert_eq(check_says(p, "tail with a bit"), -EUCLEAN);
	*w ^= 2ULL << ((fhead - z->start_pfn) % 64);
	ASSERT_POOL_OK(p);
	/* a bit past the zone's last frame, in its last pageblock's words */
	z->free_heads[(end - z->start_pfn) / 64] |= 1ULL << ((end - z->start_pfn) % 64);
	cr_assert_eq(check_says(p, "bit beyond the zone"), -EUCLEAN);
	z->free_heads[(end - z->start_pfn) / 64] &= ~(1ULL << ((end - z->start_pfn) % 64));
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* A frame marked "released when isolated" outside an isolated block would get a released
 * bit back on its next free while it holds data. */
Test(check, a_was_released_mark_outside_an_isolated_block)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 1, 0);

	cr_assert_geq(a, 0);
	pfn_to_frame(p, a + 3)->flags |= FRAME_F_WAS_RELEASED;
	cr_assert_eq(check_says(p, "mark on an allocated block"), -EUCLEAN);
	pfn_to_frame(p, a + 3)->flags = 0;
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}
