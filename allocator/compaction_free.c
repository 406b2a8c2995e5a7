// SPDX-License-Identifier: MIT
/*
 * Compaction's free scanner: the free blocks migrated frames go to, taken from the high
 * end of the zone downwards (isolate_freepages), or found through the free lists
 * (fast_isolate_freepages), and handed out one at a time by compaction_alloc; what a
 * run did not use goes back (release_freepages).  Locking as in compaction.c: the
 * zone lock in short sections.
 */
#include <stdlib.h>
#include <string.h>
#include "allocator/compaction_internal.h"

/* ---- isolated free blocks: the targets ---- */

void cc_add_free(struct compact_control *cc, uint64_t pfn, unsigned int order)
{
	struct gfa_frame *f = FR(cc, pfn);

	GFA_BUG_ON(cc->nr_free >= MAX_ISOLATED); /* cc_free_full() stops before */
	/* an aligned block of the zone, the zone lock held */
	GFA_BUG_ON(order > GFA_MAX_ORDER || (pfn & ((1UL << order) - 1)));
	GFA_BUG_ON(pfn < cc->zone_start || pfn + (1UL << order) > cc->zone_end);
	GFA_BUG_ON(!zone_lock_held(cc->zone));
	pb_mark_tails(cc->zone, pfn);
	f->order = (uint8_t)order;
	frame_set_owner(f, 0);
	fstate_set(f, GFA_FRAME_ISOLATED);
	cc->freepages[cc->nr_free++] = (struct iso_block){ pfn, order, 0 };
	cc->nr_free_frames += 1UL << order;
}

/* Isolate the free buddy block at pfn (zone lock held). */
static void isolate_free_block(struct compact_control *cc, uint64_t pfn)
{
	unsigned int order = FR(cc, pfn)->order;

	buddy_list_del(cc->zone->pool, cc->zone, pfn);
	release_take(cc->zone, pfn, 1UL << order); /* written if used (compaction_alloc) */
	cc_add_free(cc, pfn, order);
	cc->zone->c.vm.compact_isolated += 1UL << order; /* pages, as the kernel */
}

static bool cc_free_full(const struct compact_control *cc)
{
	return cc->nr_free >= MAX_ISOLATED - GFA_MAX_ORDER - 1;
}

static bool cc_enough_free(const struct compact_control *cc)
{
	uint64_t need = 0;

	for (unsigned int i = 0; i < cc->nr_migrate; i++)
		need += 1UL << cc->migrate[i].order;
	return cc->nr_free_frames >= need || cc_free_full(cc);
}

/* The end of the pageblock holding pfn, or of the zone (a partial last pageblock). */
static uint64_t pb_end(const struct compact_control *cc, uint64_t pfn)
{
	uint64_t end = pb_start(pfn) + GFA_PAGEBLOCK_FRAMES;

	return end < cc->zone_end ? end : cc->zone_end;
}

/*
 * isolate_freepages_block(), linear-only mode: probe every frame as the kernel did
 * before the series, from *start (which may lie inside the block: the pfn where the
 * previous call stopped), stepping over a block head by its order (the kernel skips
 * compound pages the same way), and stop as soon as the targets cover the isolated
 * sources (the pre-series isolate_freepages_block() broke out once cc->nr_freepages >=
 * cc->nr_migratepages).  *start is set to where the walk stopped.  Returns blocks
 * isolated.
 */
static unsigned int isolate_freepages_block_linear(struct compact_control *cc, uint64_t *start)
{
	uint64_t end = pb_end(cc, *start), pfn = *start;
	unsigned int got = 0;

	while (pfn < end && !cc_free_full(cc)) {
		struct gfa_frame *f = FR(cc, pfn);
		unsigned int o = f->order;

		cc->free_scanned++;
		if (fstate(f) == GFA_FRAME_FREE && o <= GFA_MAX_ORDER &&
		    pfn + (1UL << o) <= cc->zone_end) {
			isolate_free_block(cc, pfn);
			got++;
			pfn += 1UL << o;
			if (cc_enough_free(cc))
				break;
			continue;
		}
		pfn += fstate(f) && o <= GFA_MAX_ORDER ? 1UL << o : 1;
	}
	*start = pfn < end ? pfn : end;
	return got;
}

/*
 * isolate_freepages_block(), full mode: the pageblock's free blocks come from the
 * zone's free-head bitmap, so the walk examines only frames that head a free block and
 * isolates all of them (finish the pageblock).  This replaces the adaptive stride of
 * "mm, compaction: sample pageblocks for free pages": the kernel samples a block
 * because it cannot find the free pages in it without probing, and sampling can miss
 * them (docs/decisions.md, entries 8 and 20); the
 * bitmap misses none and probes nothing else.  compact_free_scanned counts one look
 * per pageblock (at its count of free frames: a block with none ends there) and one per
 * free-block head examined.  *start is set to where the walk stopped.  Returns blocks
 * isolated.
 */
static unsigned int isolate_freepages_block_map(struct compact_control *cc, uint64_t *start)
{
	uint64_t end = pb_end(cc, *start), pfn = *start;
	unsigned int got = 0;

	cc->free_scanned++;
	if (!pfn_pageblock(cc->zone, pfn)->nr_free)
		pfn = end;
	while (!cc_free_full(cc) && (pfn = free_head_next(cc->zone, pfn, end)) < end) {
		unsigned int o = FR(cc, pfn)->order;

		cc->free_scanned++;
		if (o > GFA_MAX_ORDER || pfn + (1UL << o) > cc->zone_end) {
			pfn++; /* never on a consistent pool (gfa_pool_check) */
			continue;
		}
		isolate_free_block(cc, pfn);
		got++;
		pfn += 1UL << o;
	}
	*start = pfn < end ? pfn : end;
	return got;
}

static unsigned int isolate_freepages_block(struct compact_control *cc, uint64_t *start)
{
	return cc->linear ? isolate_freepages_block_linear(cc, start) :
			    isolate_freepages_block_map(cc, start);
}

static bool suitable_migration_target(struct compact_control *cc, uint64_t pfn)
{
	unsigned int mt = pfn_pageblock(cc->zone, pfn)->mt;

	if (mt == GFA_MT_ISOLATE)
		return false;
	/* both modes: the skip hint (isolation_suitable(), a hint long before the series) */
	if (!cc->ignore_skip && pb_skip(cc->zone, pfn))
		return false;
	/* keep unmovable frames' pageblocks for them: targets are MOVABLE blocks */
	return mt == GFA_MT_MOVABLE;
}

/*
 * Rotate the circular order of list l so that p becomes its head (nothing moves when p
 * already is).  Both of the kernel's move_freelist_head()/_tail() are such rotations.
 */
void freelist_rotate_to(struct gfa_pool *pool, struct gfa_free_list *l, uint32_t p)
{
	uint32_t before = pfn_to_frame(pool, p)->prev;

	if (before == GFA_NIL)
		return;
	pfn_to_frame(pool, before)->next = GFA_NIL;
	pfn_to_frame(pool, p)->prev = GFA_NIL;
	pfn_to_frame(pool, l->tail)->next = l->head;
	pfn_to_frame(pool, l->head)->prev = l->tail;
	l->head = p;
	l->tail = before;
}

/*
 * move_freelist_head(): the reverse (target) search scanned p .. tail without taking
 * any: move them to the head, so the next search starts on entries it has not examined
 * (and the forward source search, which walks from the head, meets the low ones first).
 */
static void freelist_move_head(struct gfa_pool *pool, struct gfa_free_list *l, uint32_t p)
{
	freelist_rotate_to(pool, l, p);
}

unsigned int freelist_scan_limit(struct compact_control *cc)
{
	unsigned int shift = cc->fast_search_fail < 31 ? cc->fast_search_fail : 31;

	return (COMPACT_CLUSTER_MAX >> shift) + 1;
}

/*
 * fast_isolate_freepages(): take targets from the free lists instead of scanning:
 * walk orders below the request (round-robin start, as "mm, compaction: round-robin
 * the order while searching the free lists for a target") from the tail, prefer
 * blocks in the top quarter between the scanners, accept the top half (a candidate
 * there halves the remaining budget), and isolate the rest of that pageblock around
 * the find (fast_isolate_around).  The linear free scanner keeps its position on
 * success; on a failed search at scan start it jumps to the highest pageblock seen
 * between the scanners.  An order whose scan found nothing is rotated
 * (move_freelist_head), and the next search starts at the order that last found a
 * target, as next_search_order() does.  Why both: docs/decisions.md, entry 28.
 */
static void fast_isolate_freepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	struct gfa_pool *pool = z->pool;
	uint64_t distance, low_pfn, min_pfn, floor, highest_pb = 0;
	uint32_t found = GFA_NIL;
	unsigned int limit, nr_scanned = 0;
	bool scan_start;

	/* full: targets no source fits (orders) pile up until the round ends */
	if (cc->order <= 0 || cc->linear || cc->free_pfn <= cc->migrate_pfn || cc_free_full(cc))
		return;
	distance = cc->free_pfn - cc->migrate_pfn;
	low_pfn = pb_start(cc->free_pfn - distance / 4);
	min_pfn = pb_start(cc->free_pfn - distance / 2);
	/* never below the linear free scanner's floor: a target in the block the migrate
	 * scanner is still walking would be isolated again as a source, a second move */
	floor = pb_start(cc->migrate_pfn) + GFA_PAGEBLOCK_FRAMES;
	if (min_pfn < floor)
		min_pfn = floor;
	if (low_pfn < min_pfn)
		low_pfn = min_pfn;
	/* half a pageblock at scan start, else max(1, limit >> 1) per order, as the
	 * kernel's fast_isolate_freepages() */
	scan_start = cc->free_pfn >= pb_start(cc->zone_end - 1);
	if (scan_start)
		limit = GFA_PAGEBLOCK_FRAMES >> 1;
	else
		limit = freelist_scan_limit(cc) >> 1 ? freelist_scan_limit(cc) >> 1 : 1;
	for (int i = 0; i < cc->order && found == GFA_NIL; i++) {
		int order = cc->search_order - i;
		struct gfa_free_list *l;
		unsigned int order_scanned = 0;
		uint32_t p, last = GFA_NIL;

		if (order < 0)
			order += cc->order;
		if (order < 0 || order > GFA_MAX_ORDER)
			continue; /* search_order out of step with cc->order: never, but be safe */
		/* the arenas [min_pfn, free_pfn] meets, highest first: a block of a higher
		 * arena beats every block of a lower one (zone lock) */
		for (unsigned int ai = arena_index(z, cc->free_pfn) + 1;
		     ai-- > arena_index(z, min_pfn) && found == GFA_NIL && order_scanned < limit;) {
			l = &z->arenas[ai].area[order].list[GFA_MT_MOVABLE];
			last = GFA_NIL;
			for (p = l->tail; p != GFA_NIL && order_scanned < limit;
			     p = pfn_to_frame(pool, p)->prev) {
				last = p;
				nr_scanned++;
				order_scanned++;
				if (pb_start(p) > highest_pb && pb_start(p) < cc->free_pfn)
					highest_pb = pb_start(p);
				if (pb_skip(z, p) || p < min_pfn ||
				    p + (1UL << order) > cc->free_pfn + GFA_PAGEBLOCK_FRAMES)
					continue;
				if (p >= low_pfn) {
					found = p;
					break;
				}
				if (found == GFA_NIL || p > found) {
					found = p;
					limit >>= 1; /* a candidate is known: shorten the scan */
				}
			}
			if (found == GFA_NIL && last != GFA_NIL)
				freelist_move_head(pool, l, last);
		}
		if (found != GFA_NIL)
			cc->search_order = order; /* start there next time */
		/* an order that used its whole budget halves the next one's, as the kernel
		 * does, so a failing search costs about twice the budget, not once per order */
		if (order_scanned >= limit)
			limit = limit >> 1 ? limit >> 1 : 1;
	}
	/* a whole round without a find: the next one starts an order lower (round-robin) */
	if (found == GFA_NIL)
		cc->search_order = cc->search_order - 1 < 0 ? cc->order - 1 : cc->search_order - 1;
	cc->free_scanned += nr_scanned;
	if (found == GFA_NIL) {
		cc->fast_search_fail++;
		if (scan_start && highest_pb >= min_pfn)
			cc->free_pfn = highest_pb;
		return;
	}
	isolate_free_block(cc, found);
	/* fast_isolate_around(): the rest of this pageblock, unless direct async */
	if (!(cc->direct && cc->mode == GFA_COMPACT_ASYNC) && !cc_enough_free(cc)) {
		uint64_t around = pb_start(found);

		if (!isolate_freepages_block(cc, &around))
			pb_set_skip(z, found);
	}
}

/*
 * Linear-only mode after a block walk, as isolate_freepages() before the series: the
 * scanner resumes at the exact pfn where isolation stopped (cc->free_pfn =
 * isolate_start_pfn), or at the next block down once this one was walked to its end;
 * a block whose walk reached its end without isolating anything gets its skip bit
 * (update_pageblock_skip(), a hint the free scanner set and read since ~3.7).
 */
static void linear_free_block_done(struct compact_control *cc, uint64_t block, uint64_t stop,
				   unsigned int got)
{
	uint64_t end = block + GFA_PAGEBLOCK_FRAMES;

	if (stop >= end && !got && !cc->ignore_skip) {
		pb_set_skip(cc->zone, block);
		/* the cached position moves down only past a block that gave nothing */
		if (block < cc->zone->compact_cached_free_pfn)
			cc->zone->compact_cached_free_pfn = block;
	}
	if (stop < end)
		cc->free_pfn = stop;
	else
		cc->free_pfn = block >= cc->zone_start + GFA_PAGEBLOCK_FRAMES ?
				       block - GFA_PAGEBLOCK_FRAMES :
				       cc->zone_start;
}

/*
 * isolate_freepages(): the linear free scanner, high to low, one pageblock at a time.
 * Full mode restarts each call at the start of the last block it scanned and moves
 * the cached position only after a complete block scan ("mm, compaction: reduce
 * unnecessary skipping of migration target scanner"); linear-only mode
 * resumes mid-block where the last call stopped (linear_free_block_done()).
 */
void isolate_freepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	uint64_t low = pb_start(cc->migrate_pfn) + GFA_PAGEBLOCK_FRAMES;
	uint64_t block, start, stop;

	zone_lock(z);
	fast_isolate_freepages(cc);
	block = pb_start(cc->free_pfn);
	start = cc->linear ? cc->free_pfn : block;
	for (; !cc_enough_free(cc) && block >= low && block >= cc->zone_start;
	     block -= GFA_PAGEBLOCK_FRAMES, start = block) {
		unsigned int got;

		if (!suitable_migration_target(cc, block))
			continue;
		stop = start;
		got = isolate_freepages_block(cc, &stop);
		if (cc->linear) {
			linear_free_block_done(cc, block, stop, got);
		} else {
			if (!got && !cc->ignore_skip)
				pb_set_skip(z, block);
			if (block < cc->free_pfn)
				cc->free_pfn = block;
			if (block < z->compact_cached_free_pfn) /* only down, as the kernel */
				z->compact_cached_free_pfn = block;
		}
		if (block == cc->zone_start)
			break;
	}
	if (block < low)
		cc->free_pfn = block + GFA_PAGEBLOCK_FRAMES > low ? low : block;
	zone_unlock(z);
}

/* compaction_alloc(): a target block of exactly `order`, splitting a larger one. */
int64_t compaction_alloc(struct compact_control *cc, unsigned int order)
{
	for (int pass = 0; pass < 2; pass++) {
		int best = -1;

		for (unsigned int i = 0; i < cc->nr_free; i++)
			if (cc->freepages[i].order >= order &&
			    (best < 0 || cc->freepages[i].order < cc->freepages[best].order))
				best = (int)i;
		if (best >= 0) {
			struct iso_block b = cc->freepages[best];

			/* a target is ours alone, and nr_free_frames counts the targets */
			GFA_BUG_ON(fstate(FR(cc, b.pfn)) != GFA_FRAME_ISOLATED);
			GFA_BUG_ON(cc->nr_free_frames < (1UL << b.order));
			cc->freepages[best] = cc->freepages[--cc->nr_free];
			cc->nr_free_frames -= 1UL << b.order;
			/*
			 * split: keep the upper halves isolated for later targets.  Under the
			 * zone lock: walkers (release, scanners) step over blocks by order.
			 */
			zone_lock(cc->zone);
			while (b.order > order) {
				b.order--;
				cc_add_free(cc, b.pfn + (1UL << b.order), b.order);
			}
			FR(cc, b.pfn)->order = (uint8_t)order;
			release_forget(cc->zone, b.pfn, 1UL << order); /* to be written */
			zone_unlock(cc->zone);
			return (int64_t)b.pfn;
		}
		if (pass == 0)
			isolate_freepages(cc);
	}
	return -1;
}

void release_freepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;

	uint64_t highest = 0;

	zone_lock(z);
	for (unsigned int i = 0; i < cc->nr_free; i++) {
		uint64_t pfn = cc->freepages[i].pfn;

		if (pfn > highest)
			highest = pfn;
		GFA_BUG_ON(fstate(FR(cc, pfn)) != GFA_FRAME_ISOLATED); /* ISOLATED -> free */
		fstate_set(FR(cc, pfn), 0);
		/* unwritten: frames released when isolated are released still */
		release_restore(z, pfn, 1UL << cc->freepages[i].order);
		if (buddy_free_block(z, pfn, cc->freepages[i].order))
			continue; /* captured by our own request: fine */
	}
	/*
	 * Before the series the free scanner restarted above targets it gave back, "so
	 * we don't leave any returned pages behind in the next attempt" (only back, not
	 * forward).  Linear-only mode does so; full mode keeps the position "reduce
	 * unnecessary skipping of migration target scanner" gives it.
	 */
	if (cc->linear && cc->nr_free && pb_start(highest) > z->compact_cached_free_pfn)
		z->compact_cached_free_pfn = pb_start(highest);
	cc->nr_free = 0;
	cc->nr_free_frames = 0;
	zone_unlock(z);
}

/* Is a block of the order free now (zone lock held)? */
