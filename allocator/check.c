// SPDX-License-Identifier: MIT
/*
 * gfa_pool_check(): the pool's invariants (gfa/allocator.h lists them at
 * gfa_pool_check), checked frame by frame.  Stops the
 * world (every cache lock, then each zone lock) so the answer is exact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "allocator/pcp.h"

#define FAIL(...)                                \
	do {                                     \
		snprintf(msg, len, __VA_ARGS__); \
		return -EUCLEAN;                 \
	} while (0)

struct zone_tally {
	uint64_t free_blocks[GFA_NR_ORDERS][GFA_MT_TYPES];
	uint64_t free_frames, released, inflight, scrub;
	uint64_t pcp_frames; /* in PCP blocks: must equal what the caches' lists hold */
};

/*
 * The frames of [from, to) whose descriptors can hold anything: a pageblock never
 * split since its tails were dropped (no PB_TAILS) has written only its head, so a walk
 * steps over its tail slots instead of reading them (a read would map them in).
 */
static uint64_t written_frame(struct gfa_zone *z, uint64_t p, uint64_t to)
{
	if ((p & (GFA_PAGEBLOCK_FRAMES - 1)) && p < to && !(pfn_pageblock(z, p)->flags & PB_TAILS))
		p = (p | (GFA_PAGEBLOCK_FRAMES - 1)) + 1;
	return p < to ? p : to;
}
#define for_each_written_frame(z, p, from, to) \
	for (uint64_t p = written_frame(z, from, to); p < (to); p = written_frame(z, p + 1, to))

/* Released bits: only on free frames; per-pageblock and zone counts must agree. */
static int check_released(struct gfa_zone *z, uint64_t pfn, unsigned int st, unsigned int order,
			  struct zone_tally *t, char *msg, size_t len)
{
	for (uint64_t p = pfn; p < pfn + (1UL << order); p++) {
		if (!release_test(z, p))
			continue;
		if (st != GFA_FRAME_FREE)
			FAIL("zone %u: pfn %lu is marked released but its block is not free "
			     "(state %u)",
			     z->id, (unsigned long)p, st);
		t->released++;
	}
	if (st == GFA_FRAME_INFLIGHT)
		t->inflight += 1UL << order;
	/* a scrub's mark: on in-flight heads only, each counted in nr_scrub */
	if ((pfn_to_frame(z->pool, pfn)->flags & FRAME_F_SCRUB) && st != GFA_FRAME_INFLIGHT)
		FAIL("zone %u: block at pfn %lu in state %u is marked as a scrub's", z->id,
		     (unsigned long)pfn, st);
	if (pfn_to_frame(z->pool, pfn)->flags & FRAME_F_SCRUB)
		t->scrub += 1UL << order;
	for_each_written_frame(z, p, pfn + 1,
			       pfn + (1UL << order)) if (pfn_to_frame(z->pool, p)->flags &
							 FRAME_F_SCRUB)
		FAIL("zone %u: pfn %lu inside the block at %lu is marked as a scrub's", z->id,
		     (unsigned long)p, (unsigned long)pfn);
	return 0;
}

static int check_pageblock_counts(struct gfa_zone *z, char *msg, size_t len)
{
	uint64_t deferred = 0;

	/* (the marks split are counted per arena: check_arena_counts) */
	for (uint64_t pb = 0; pb < z->nr_pageblocks; pb++)
		deferred += pfn_deferred(z, z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER));
	if (deferred != z->nr_deferred_pageblocks)
		FAIL("zone %u: %lu pageblocks in deferred sections but the zone counts %lu", z->id,
		     (unsigned long)deferred, (unsigned long)z->nr_deferred_pageblocks);
	for (uint64_t pb = 0; pb < z->nr_pageblocks; pb++) {
		uint64_t start = z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER), nfree = 0, nrel = 0;
		uint64_t pfn = frame_find_head(z->pool, z, start);

		for (uint64_t p = start;
		     p < start + GFA_PAGEBLOCK_FRAMES && p < z->start_pfn + z->nr_frames; p++)
			nrel += release_test(z, p);
		/* a deferred section's pageblocks: check_deferred() read them zero */
		while (!pfn_deferred(z, start) && pfn < start + GFA_PAGEBLOCK_FRAMES &&
		       pfn < z->start_pfn + z->nr_frames) {
			struct gfa_frame *f = pfn_to_frame(z->pool, pfn);
			uint64_t lo = pfn > start ? pfn : start, hi = pfn + (1UL << f->order);

			if (hi > start + GFA_PAGEBLOCK_FRAMES)
				hi = start + GFA_PAGEBLOCK_FRAMES;
			if (fstate(f) == GFA_FRAME_FREE)
				nfree += hi - lo;
			pfn += 1UL << f->order;
		}
		if (nfree != z->pageblocks[pb].nr_free || nrel != z->pageblocks[pb].nr_released)
			FAIL("zone %u: pageblock %lu counts %u free %u released, "
			     "frames say %lu and %lu",
			     z->id, (unsigned long)pb, z->pageblocks[pb].nr_free,
			     z->pageblocks[pb].nr_released, (unsigned long)nfree,
			     (unsigned long)nrel);
	}
	return 0;
}

static bool should_have_merged(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	uint64_t buddy = pfn ^ (1UL << order);
	struct gfa_frame *bf;

	if (order >= GFA_MAX_ORDER || buddy < z->start_pfn ||
	    buddy + (1UL << order) > z->start_pfn + z->nr_frames)
		return false;
	bf = pfn_to_frame(z->pool, buddy);
	if (fstate(bf) != GFA_FRAME_FREE || bf->order != order)
		return false;
	return !(order >= GFA_PAGEBLOCK_ORDER && (pfn_pageblock(z, pfn)->mt == GFA_MT_ISOLATE ||
						  pfn_pageblock(z, buddy)->mt == GFA_MT_ISOLATE));
}

/*
 * A deferred section at pfn (its first frame in z): nothing written yet, its pageblocks
 * and heads zero, no free-head bit; *next is where the section ends.
 */
static int check_deferred(struct gfa_zone *z, uint64_t pfn, uint64_t *next, char *msg, size_t len)
{
	uint64_t end = z->start_pfn + z->nr_frames;

	*next = ((pfn >> DEFERRED_SECTION_ORDER) + 1) << DEFERRED_SECTION_ORDER;
	if (*next > end)
		*next = end;
	for (uint64_t p = pfn; p < *next; p += GFA_PAGEBLOCK_FRAMES) {
		const struct gfa_pageblock *pb = pfn_pageblock(z, p);
		const struct gfa_frame *f = pfn_to_frame(z->pool, p);

		if (pb->mt || pb->flags || pb->nr_free || pb->nr_released || fstate(f) ||
		    f->order || free_head_test(z, p))
			FAIL("zone %u: pageblock at pfn %lu of a deferred section was written "
			     "(type %u flags %#x state %u order %u)",
			     z->id, (unsigned long)p, pb->mt, pb->flags, fstate(f), f->order);
	}
	return 0;
}

/* Walk the zone block by block: every frame lies in exactly one block. */
static int check_blocks(struct gfa_zone *z, struct zone_tally *t, char *msg, size_t len)
{
	uint64_t pfn = z->start_pfn, end = z->start_pfn + z->nr_frames;

	while (pfn < end) {
		struct gfa_frame *f = pfn_to_frame(z->pool, pfn);
		unsigned int st = fstate(f), order = f->order;

		/* held blocks whose metadata is not written yet (deferred.c) */
		if (pfn_deferred(z, pfn)) {
			if (check_deferred(z, pfn, &pfn, msg, len))
				return -EUCLEAN;
			continue;
		}

		if (st < GFA_FRAME_FREE || st > GFA_FRAME_INFLIGHT)
			FAIL("zone %u: pfn %lu is in no block (state %u)", z->id,
			     (unsigned long)pfn, st);
		if (order > GFA_MAX_ORDER || (pfn & ((1UL << order) - 1)) ||
		    pfn + (1UL << order) > end)
			FAIL("zone %u: block at pfn %lu has bad order %u", z->id,
			     (unsigned long)pfn, order);
		/* free blocks may sit on ISOLATE lists; a block handed out never has that type */
		if (f->mt >= (st == GFA_FRAME_FREE ? GFA_MT_TYPES : GFA_MT_PCPTYPES))
			FAIL("zone %u: block at pfn %lu (state %u) has bad migratetype %u", z->id,
			     (unsigned long)pfn, st, f->mt);
		/* the free scanner finds free blocks by their bit: exactly the free heads */
		if (free_head_test(z, pfn) != (st == GFA_FRAME_FREE))
			FAIL("zone %u: block at pfn %lu (state %u) has free-head bit %d", z->id,
			     (unsigned long)pfn, st, free_head_test(z, pfn));
		/* frame_find_head() relies on tail frames having no state (and no free bit) */
		/* a head in a tail slot marks its pageblock: its tails hold memory */
		if ((pfn & (GFA_PAGEBLOCK_FRAMES - 1)) &&
		    !(pfn_pageblock(z, pfn)->flags & PB_TAILS))
			FAIL("zone %u: block at pfn %lu (order %u) is inside a pageblock not "
			     "marked split",
			     z->id, (unsigned long)pfn, order);
		for_each_written_frame(z, p, pfn,
				       pfn + (1UL << order)) if ((pfn_to_frame(z->pool, p)->flags &
								  FRAME_F_WAS_RELEASED) &&
								 st != GFA_FRAME_ISOLATED)
			FAIL("zone %u: pfn %lu of a block in state %u is marked released "
			     "when isolated",
			     z->id, (unsigned long)p, st);
		for (uint64_t p = pfn + 1; p < pfn + (1UL << order); p++)
			if (free_head_test(z, p))
				FAIL("zone %u: pfn %lu inside the block at %lu has a free-head bit",
				     z->id, (unsigned long)p, (unsigned long)pfn);
		for_each_written_frame(z, p, pfn + 1,
				       pfn + (1UL << order)) if (fstate(pfn_to_frame(z->pool, p)))
			FAIL("zone %u: pfn %lu inside the block at %lu (order %u) "
			     "has state %u",
			     z->id, (unsigned long)p, (unsigned long)pfn, order,
			     fstate(pfn_to_frame(z->pool, p)));
		if (check_released(z, pfn, st, order, t, msg, len))
			return -EUCLEAN;
		if (st == GFA_FRAME_PCP)
			t->pcp_frames += 1UL << order;
		if (st == GFA_FRAME_FREE) {
			t->free_blocks[order][f->mt]++;
			t->free_frames += 1UL << order;
			if (should_have_merged(z, pfn, order))
				FAIL("zone %u: free buddies at pfn %lu and %lu (order %u) "
				     "not merged",
				     z->id, (unsigned long)pfn,
				     (unsigned long)(pfn ^ (1UL << order)), order);
			/* a block of pageblocks is on its pageblocks' list (merges retype) */
			for (uint64_t q = pfn;
			     order >= GFA_PAGEBLOCK_ORDER && q < pfn + (1UL << order);
			     q += GFA_PAGEBLOCK_FRAMES)
				if (pfn_pageblock(z, q)->mt != f->mt)
					FAIL("zone %u: free order-%u block at pfn %lu on the %s "
					     "list spans a %s pageblock",
					     z->id, order, (unsigned long)pfn,
					     gfa_migratetype_name(f->mt),
					     gfa_migratetype_name(pfn_pageblock(z, q)->mt));
		}
		pfn += 1UL << order;
	}
	return 0;
}

/*
 * Walk an arena's free lists: links consistent, members free and in the arena,
 * counters equal contents; adds what they hold to listed[][].
 */
static int check_arena_lists(struct gfa_zone *z, struct gfa_arena *a,
			     uint64_t listed[GFA_NR_ORDERS][GFA_MT_TYPES], char *msg, size_t len)
{
	struct gfa_pool *pool = z->pool;
	uint64_t frames = 0;
	unsigned int ai = (unsigned int)(a - z->arenas);

	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++) {
		uint64_t area_total = 0;

		for (unsigned int mt = 0; mt < GFA_MT_TYPES; mt++) {
			const struct gfa_free_list *l = &a->area[o].list[mt];
			uint32_t prev = GFA_NIL;
			uint64_t n = 0;

			for (uint32_t p = l->head; p != GFA_NIL && n <= l->nr;
			     p = pfn_to_frame(pool, p)->next) {
				const struct gfa_frame *f;

				if (p < z->start_pfn || p >= z->start_pfn + z->nr_frames)
					FAIL("zone %u: free list order %u %s links to pfn %u, "
					     "outside the zone",
					     z->id, o, gfa_migratetype_name(mt), p);
				f = pfn_to_frame(pool, p);
				if (fstate(f) != GFA_FRAME_FREE || f->order != o || f->mt != mt ||
				    f->prev != prev || pool_pfn_zone(z->pool, p) != z)
					FAIL("zone %u: free list order %u %s holds pfn %u "
					     "(state %u order %u mt %u)",
					     z->id, o, gfa_migratetype_name(mt), p, fstate(f),
					     f->order, f->mt);
				if (arena_of(z, p) != a)
					FAIL("zone %u: arena %u's free list order %u %s holds "
					     "pfn %u of arena %u",
					     z->id, ai, o, gfa_migratetype_name(mt), p,
					     (unsigned int)(arena_of(z, p) - z->arenas));
				prev = p;
				n++;
			}
			if (n != l->nr || l->tail != prev)
				FAIL("zone %u: arena %u order %u %s: list holds %lu, counter %lu",
				     z->id, ai, o, gfa_migratetype_name(mt), (unsigned long)n,
				     (unsigned long)l->nr);
			listed[o][mt] += n;
			area_total += n;
		}
		if (area_total != a->area[o].nr_free)
			FAIL("zone %u: arena %u order %u nr_free %lu but lists hold %lu", z->id, ai,
			     o, (unsigned long)a->area[o].nr_free, (unsigned long)area_total);
		frames += area_total << o;
	}
	if (frames != a->nr_free)
		FAIL("zone %u: arena %u nr_free %lu but its lists hold %lu frames", z->id, ai,
		     (unsigned long)a->nr_free, (unsigned long)frames);
	return 0;
}

/* Walk the free lists of every arena; the zone's counters equal what the frames say. */
static int check_lists(struct gfa_zone *z, const struct zone_tally *t, char *msg, size_t len)
{
	uint64_t listed[GFA_NR_ORDERS][GFA_MT_TYPES] = { { 0 } };

	for (unsigned int i = 0; i < z->nr_arenas; i++) {
		int err = check_arena_lists(z, &z->arenas[i], listed, msg, len);

		if (err)
			return err;
	}
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		for (unsigned int mt = 0; mt < GFA_MT_TYPES; mt++)
			if (listed[o][mt] != t->free_blocks[o][mt])
				FAIL("zone %u: order %u %s: lists hold %lu, blocks %lu", z->id, o,
				     gfa_migratetype_name(mt), (unsigned long)listed[o][mt],
				     (unsigned long)t->free_blocks[o][mt]);
	if (t->free_frames != zone_nr_free(z))
		FAIL("zone %u: nr_free %lu but free blocks hold %lu frames", z->id,
		     (unsigned long)zone_nr_free(z), (unsigned long)t->free_frames);
	if (t->released != zone_nr_released(z) || t->inflight != z->nr_inflight ||
	    t->scrub != z->nr_scrub)
		FAIL("zone %u: counters say %lu released, %lu in flight (%lu scrubbed); frames "
		     "say %lu, %lu and %lu",
		     z->id, (unsigned long)zone_nr_released(z), (unsigned long)z->nr_inflight,
		     (unsigned long)z->nr_scrub, (unsigned long)t->released,
		     (unsigned long)t->inflight, (unsigned long)t->scrub);
	for (uint64_t i = 0; i < z->nr_pageblocks; i++)
		if (z->pageblocks[i].mt >= GFA_MT_TYPES)
			FAIL("zone %u: pageblock %lu has migratetype %u", z->id, (unsigned long)i,
			     z->pageblocks[i].mt);
	return 0;
}

/*
 * Each arena's counts of pageblocks by type, with released frames and marked split,
 * and of released frames: its pageblocks'.
 */
static int check_arena_counts(struct gfa_zone *z, struct gfa_arena *a, char *msg, size_t len)
{
	uint64_t n[GFA_MT_TYPES] = { 0 }, sidelined = 0, tails = 0, released = 0;
	unsigned int ai = (unsigned int)(a - z->arenas);
	uint64_t first = (uint64_t)ai << (z->arena_order - GFA_PAGEBLOCK_ORDER);
	uint64_t end = first + (1ULL << (z->arena_order - GFA_PAGEBLOCK_ORDER));

	for (uint64_t i = first; i < end && i < z->nr_pageblocks; i++) {
		n[z->pageblocks[i].mt]++;
		sidelined += z->pageblocks[i].nr_released != 0;
		tails += !!(z->pageblocks[i].flags & PB_TAILS);
		released += z->pageblocks[i].nr_released;
	}
	for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
		if (n[t] != a->nr_pb_mt[t])
			FAIL("zone %u arena %u: %lu %s pageblocks but the arena counts %lu", z->id,
			     ai, (unsigned long)n[t], gfa_migratetype_name(t),
			     (unsigned long)a->nr_pb_mt[t]);
	if (sidelined != a->nr_pb_sidelined || tails != a->nr_tail_pageblocks)
		FAIL("zone %u arena %u: %lu pageblocks with released frames and %lu marked split, "
		     "but the arena counts %lu and %lu",
		     z->id, ai, (unsigned long)sidelined, (unsigned long)tails,
		     (unsigned long)a->nr_pb_sidelined, (unsigned long)a->nr_tail_pageblocks);
	if (released != a->nr_released)
		FAIL("zone %u arena %u: its pageblocks hold %lu released frames, the arena counts "
		     "%lu",
		     z->id, ai, (unsigned long)released, (unsigned long)a->nr_released);
	return 0;
}

static int check_pageblock_types(struct gfa_zone *z, char *msg, size_t len)
{
	for (unsigned int i = 0; i < z->nr_arenas; i++) {
		int err = check_arena_counts(z, &z->arenas[i], msg, len);

		if (err)
			return err;
	}
	return 0;
}

/* Claims, pageblock flags, cached compaction positions, the released bitmap's tail. */
static int check_zone_extras(struct gfa_zone *z, char *msg, size_t len)
{
	uint64_t end = z->start_pfn + z->nr_frames, sum = 0, tailbits = z->nr_frames % 64;

	if (z->nr_claims > GFA_MAX_CLAIMS)
		FAIL("zone %u: %u claims (at most %d)", z->id, z->nr_claims, GFA_MAX_CLAIMS);
	for (unsigned int i = 0; i < z->nr_claims; i++) {
		sum += z->claims[i].frames;
		for (unsigned int j = 0; j < i; j++)
			if (z->claims[j].owner == z->claims[i].owner)
				FAIL("zone %u: owner %lu has two claims", z->id,
				     (unsigned long)z->claims[i].owner);
	}
	if (sum != z->claimed)
		FAIL("zone %u: claimed %lu but the claims add up to %lu", z->id,
		     (unsigned long)z->claimed, (unsigned long)sum);
	for (uint64_t i = 0; i < z->nr_pageblocks; i++)
		if ((z->pageblocks[i].flags & ~(PB_SKIP | PB_TAILS | PB_TAILS_GOING)) ||
		    (z->pageblocks[i].flags & (PB_TAILS | PB_TAILS_GOING)) ==
			    (PB_TAILS | PB_TAILS_GOING))
			FAIL("zone %u: pageblock %lu has unknown flags %#x", z->id,
			     (unsigned long)i, z->pageblocks[i].flags);
	for (int i = 0; i < 3; i++) {
		uint64_t pos = i < 2 ? z->compact_cached_migrate_pfn[i] :
				       z->compact_cached_free_pfn;

		if (pos < z->start_pfn || pos >= end || (pos & (GFA_PAGEBLOCK_FRAMES - 1)))
			FAIL("zone %u: cached compaction position %lu is not a pageblock "
			     "of the zone",
			     z->id, (unsigned long)pos);
	}
	if (check_pageblock_types(z, msg, len))
		return -EUCLEAN;
	if (tailbits && (z->released[z->nr_frames / 64] >> tailbits))
		FAIL("zone %u: released bits set beyond the zone's last frame", z->id);
	for (uint64_t p = end; p < z->start_pfn + (z->nr_pageblocks << GFA_PAGEBLOCK_ORDER); p++)
		if (free_head_test(z, p))
			FAIL("zone %u: free-head bit set beyond the zone's last frame", z->id);
	return 0;
}

static int check_zone(struct gfa_zone *z, char *msg, size_t len)
{
	struct zone_tally t;
	int err;

	memset(&t, 0, sizeof(t));
	zone_lock(z);
	err = check_blocks(z, &t, msg, len);
	if (!err)
		err = check_lists(z, &t, msg, len);
	if (!err)
		err = check_pageblock_counts(z, msg, len);
	if (!err)
		err = check_zone_extras(z, msg, len);
	zone_unlock(z);
	/* a block on two lists, or PCP on none, shows here (caches are held) */
	if (!err && t.pcp_frames != pcp_zone_frames(z->pool, z))
		FAIL("zone %u: %lu frames in PCP blocks but the caches' lists hold %lu", z->id,
		     (unsigned long)t.pcp_frames, (unsigned long)pcp_zone_frames(z->pool, z));
	return err;
}

/* ---- the per-vCPU caches (all held remotely: pcp_lock_all) ---- */

static int pcp_check_one(struct gfa_pcp *pcp, char *msg, size_t len)
{
	struct gfa_pool *pool = pcp->pool;
	int64_t total = 0;

	for (int i = 0; i < NR_PCP_LISTS; i++) {
		const struct pcp_list *l = &pcp->lists[i];
		unsigned int order = pindex_to_order(i);
		uint32_t n = plist_nr(l);

		if (n > l->mask + 1) {
			snprintf(msg, len, "pcp %p list %d: holds %u blocks in a ring of %u",
				 (void *)pcp, i, n, l->mask + 1);
			return -EUCLEAN;
		}
		for (uint32_t k = 0; k < n; k++) {
			uint32_t p = plist_at(l, k);
			struct gfa_frame *f = p < pool->nr_pfns ? pfn_to_frame(pool, p) : NULL;

			if (!f || fstate(f) != GFA_FRAME_PCP || f->order != order ||
			    f->mt != (unsigned int)i % GFA_MT_PCPTYPES ||
			    pool_pfn_zone(pool, p) != pcp->zone) {
				snprintf(msg, len,
					 "pcp %p list %d: pfn %u "
					 "(state %u order %u mt %u) does not belong there",
					 (void *)pcp, i, p, f ? fstate(f) : 0u,
					 f ? (unsigned int)f->order : 0u,
					 f ? (unsigned int)f->mt : 0u);
				return -EUCLEAN;
			}
		}
		total += (int64_t)n << order;
	}
	if (total != pcp->count) {
		snprintf(msg, len, "pcp %p: count %d but lists hold %ld frames", (void *)pcp,
			 pcp->count, (long)total);
		return -EUCLEAN;
	}
	return 0;
}

/*
 * Each block on a cache list is on exactly one (the sums alone pass a block listed
 * twice while another is on none).  seen: one bit per pfn, all clear.
 */
static int pcp_check_unique(struct gfa_pool *pool, uint64_t *seen, char *msg, size_t len)
{
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next)
		for (int i = 0; i < NR_PCP_LISTS; i++) {
			const struct pcp_list *l = &pcp->lists[i];

			for (uint32_t k = 0; k < plist_nr(l); k++) {
				uint32_t p = plist_at(l, k);

				if (seen[p / 64] & (1ULL << (p % 64))) {
					snprintf(msg, len,
						 "pfn %u is on a cache list twice "
						 "(pcp %p list %d)",
						 p, (void *)pcp, i);
					return -EUCLEAN;
				}
				seen[p / 64] |= 1ULL << (p % 64);
			}
		}
	return 0;
}

static int pcp_check_locked(struct gfa_pool *pool, uint64_t *seen, char *msg, size_t len)
{
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		int err = pcp_check_one(pcp, msg, len);

		if (err)
			return err;
	}
	/* every entry is a pfn of the pool now (pcp_check_one) */
	return pcp_check_unique(pool, seen, msg, len);
}
int gfa_pool_check(struct gfa_pool *pool, char *msg, size_t msglen)
{
	char dummy[1];
	uint64_t *seen;
	int err = 0;

	if (!pool) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	if (!msg) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	if (msglen)
		msg[0] = '\0';
	seen = calloc((pool->nr_pfns + 63) / 64, sizeof(*seen));
	if (!seen)
		return -ENOMEM;
	pcp_lock_all(pool);
	for (unsigned int i = 0; i < pool->nr_zones && !err; i++)
		err = check_zone(&pool->zones[i], msg, msglen);
	if (!err)
		err = pcp_check_locked(pool, seen, msg, msglen);
	pcp_unlock_all(pool);
	free(seen);
	return err;
}
