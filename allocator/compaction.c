// SPDX-License-Identifier: MIT
/*
 * Compaction: assemble free 2 MiB blocks by moving MOVABLE blocks from the low end of
 * a zone (migrate scanner, low -> high) into free frames at the high end (free scanner,
 * high -> low), as mm/compaction.c does, with the 2019 series' free-list-guided fast
 * searches, skip-bit ownership, selective skip reset and capture (docs/decisions.md,
 * entry 20, names its commits);
 * the free scanner finds free blocks through a bitmap of free-block heads where the
 * series sampled pageblocks with an adaptive stride.  Moving a block = the owner's
 * migrate op copies it and repoints its mapping; the allocator never touches frame
 * contents itself.
 *
 * Locking: scanning and isolation hold the zone lock in short sections; the owner's
 * migrate op runs with no lock held.  Isolated blocks (both sides) have their own state
 * (GFA_FRAME_ISOLATED) so no one else frees, allocates or merges them meanwhile.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "allocator/internal.h"

#define COMPACT_CLUSTER_MAX   32
#define COSTLY_ORDER          3
#define MAX_ISOLATED          (2 * COMPACT_CLUSTER_MAX + GFA_PAGEBLOCK_FRAMES)

struct iso_block {
	uint64_t pfn;
	unsigned int order;
	uint64_t owner;
};

struct compact_control {
	struct gfa_zone *zone;
	int order;                      /* -1: full compaction */
	unsigned int mt;                /* migratetype of the request */
	enum gfa_compact_mode mode;
	bool direct, linear, proactive, whole_zone, daemon, nofallback;
	bool ignore_skip;               /* last-resort priority: skip hints off, no fast find */
	uint64_t migrate_pfn, free_pfn;
	uint64_t zone_start, zone_end;
	struct iso_block migrate[MAX_ISOLATED];
	unsigned int nr_migrate;
	struct iso_block freepages[MAX_ISOLATED];   /* isolated free blocks */
	unsigned int nr_free;
	uint64_t nr_free_frames;
	unsigned int fast_search_fail;
	int search_order;
	uint64_t last_block;            /* previous migrate source block, for rescan */
	bool rescan, fast_found;
	uint64_t migrate_scanned, free_scanned;
	uint64_t migrate_blocks;        /* heads (and list entries) looked at: 4.20's count */
	struct capture_control *capc;
};

static struct gfa_frame *FR(struct compact_control *cc, uint64_t pfn)
{
	return &cc->zone->pool->frames[pfn];
}

static uint64_t pb_start(uint64_t pfn)
{
	return pfn & ~(GFA_PAGEBLOCK_FRAMES - 1);
}

static bool pb_skip(struct gfa_zone *z, uint64_t pfn)
{
	return pfn_pageblock(z, pfn)->flags & PB_SKIP;
}

static void pb_set_skip(struct gfa_zone *z, uint64_t pfn)
{
	pfn_pageblock(z, pfn)->flags |= PB_SKIP;
}

/* test_and_set_skip(): the skip bit doubles as the ownership token of a source block. */
static bool pb_test_and_set_skip(struct gfa_zone *z, uint64_t pfn)
{
	struct gfa_pageblock *pb = pfn_pageblock(z, pfn);
	bool was = pb->flags & PB_SKIP;

	pb->flags |= PB_SKIP;
	return was;
}

int gfa_compact_configure(struct gfa_pool *pool, const struct gfa_compact_config *cfg)
{
	if (!pool || !cfg)
		return pool_err(pool, GFA_EFAULT);
	if (cfg->proactiveness > 100 || !GFA_RESERVED_ZERO(cfg))
		return pool_err(pool, GFA_EINVAL);
	/* read without a common lock (each zone's compaction, kcompactd): per field */
	__atomic_store_n(&pool->compact.linear_only, cfg->linear_only, __ATOMIC_RELAXED);
	__atomic_store_n(&pool->compact.proactiveness, cfg->proactiveness, __ATOMIC_RELAXED);
	return 0;
}

void compaction_zone_init(struct gfa_zone *z)
{
	z->compact_cached_migrate_pfn[0] = z->compact_cached_migrate_pfn[1] = z->start_pfn;
	pthread_condattr_t ca;

	z->compact_cached_free_pfn = pb_start(z->start_pfn + z->nr_frames - 1);
	/* compactd_sleep() computes its deadline on CLOCK_MONOTONIC: wait on that clock
	 * (docs/decisions.md, entry 28) */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&z->compactd_wait, &ca);
	pthread_condattr_destroy(&ca);
}

/* ---- isolated free blocks: the targets ---- */

static void cc_add_free(struct compact_control *cc, uint64_t pfn, unsigned int order)
{
	struct gfa_frame *f = FR(cc, pfn);

	GFA_BUG_ON(cc->nr_free >= MAX_ISOLATED);        /* cc_free_full() stops before */
	/* an aligned block of the zone, the zone lock held */
	GFA_BUG_ON(order > GFA_MAX_ORDER || (pfn & ((1UL << order) - 1)));
	GFA_BUG_ON(pfn < cc->zone_start || pfn + (1UL << order) > cc->zone_end);
	GFA_BUG_ON(!zone_lock_held(cc->zone));
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
	release_take(cc->zone, pfn, 1UL << order);    /* written if used (compaction_alloc) */
	cc_add_free(cc, pfn, order);
	cc->zone->c.vm.compact_isolated += 1UL << order;     /* pages, as the kernel */
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
			pfn++;  /* never on a consistent pool (gfa_pool_check) */
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
static void freelist_rotate_to(struct gfa_frame *fr, struct gfa_free_list *l, uint32_t p)
{
	uint32_t before = fr[p].prev;

	if (before == GFA_NIL)
		return;
	fr[before].next = GFA_NIL;
	fr[p].prev = GFA_NIL;
	fr[l->tail].next = l->head;
	fr[l->head].prev = l->tail;
	l->head = p;
	l->tail = before;
}

/*
 * move_freelist_head(): the reverse (target) search scanned p .. tail without taking
 * any: move them to the head, so the next search starts on entries it has not examined
 * (and the forward source search, which walks from the head, meets the low ones first).
 */
static void freelist_move_head(struct gfa_frame *fr, struct gfa_free_list *l, uint32_t p)
{
	freelist_rotate_to(fr, l, p);
}

static unsigned int freelist_scan_limit(struct compact_control *cc)
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
	struct gfa_frame *frames = z->pool->frames;
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
		l = &z->area[order].list[GFA_MT_MOVABLE];
		for (p = l->tail; p != GFA_NIL && order_scanned < limit; p = frames[p].prev) {
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
				limit >>= 1;    /* a candidate is known: shorten the scan */
			}
		}
		if (found == GFA_NIL && last != GFA_NIL)
			freelist_move_head(frames, l, last);
		else if (found != GFA_NIL)
			cc->search_order = order;       /* start there next time */
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
static void linear_free_block_done(struct compact_control *cc, uint64_t block,
				   uint64_t stop, unsigned int got)
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
			       block - GFA_PAGEBLOCK_FRAMES : cc->zone_start;
}

/*
 * isolate_freepages(): the linear free scanner, high to low, one pageblock at a time.
 * Full mode restarts each call at the start of the last block it scanned and moves
 * the cached position only after a complete block scan ("mm, compaction: reduce
 * unnecessary skipping of migration target scanner"); linear-only mode
 * resumes mid-block where the last call stopped (linear_free_block_done()).
 */
static void isolate_freepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	uint64_t low = pb_start(cc->migrate_pfn) + GFA_PAGEBLOCK_FRAMES;
	uint64_t block, start, stop;

	pthread_mutex_lock(&z->lock);
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
			if (block < z->compact_cached_free_pfn)   /* only down, as the kernel */
				z->compact_cached_free_pfn = block;
		}
		if (block == cc->zone_start)
			break;
	}
	if (block < low)
		cc->free_pfn = block + GFA_PAGEBLOCK_FRAMES > low ? low : block;
	pthread_mutex_unlock(&z->lock);
}

/* compaction_alloc(): a target block of exactly `order`, splitting a larger one. */
static int64_t compaction_alloc(struct compact_control *cc, unsigned int order)
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
			pthread_mutex_lock(&cc->zone->lock);
			while (b.order > order) {
				b.order--;
				cc_add_free(cc, b.pfn + (1UL << b.order), b.order);
			}
			FR(cc, b.pfn)->order = (uint8_t)order;
			release_forget(cc->zone, b.pfn, 1UL << order);    /* to be written */
			pthread_mutex_unlock(&cc->zone->lock);
			return (int64_t)b.pfn;
		}
		if (pass == 0)
			isolate_freepages(cc);
	}
	return -1;
}

/* ---- the migrate side ---- */

/* Can this allocated block be a migration source?  (zone lock held) */
static bool block_movable(struct compact_control *cc, struct gfa_frame *f)
{
	return fstate(f) == GFA_FRAME_ALLOCATED && f->mt == GFA_MT_MOVABLE &&
	       f->order < GFA_PAGEBLOCK_ORDER &&
	       owner_lookup(cc->zone->pool, frame_owner(f), NULL);
}

/*
 * Why a frame of the migrate scanner's window cannot be isolated: never (free, or
 * isolated just now), for good (an allocation no owner can move), or for now (another
 * compaction instance or a capture holds it).
 */
enum iso_fail { ISO_OK, ISO_PERMANENT, ISO_TRANSIENT };

/*
 * skip_on_failure (the kernel's since 4.6): direct compaction for an order frees a
 * cc->order-aligned window or nothing, so one frame that cannot move makes moving the
 * rest of its window futile: put back what the window gave and go to the next one.
 * The kernel does so in ASYNC and SYNC_LIGHT only, since a page it cannot isolate now
 * may be free of its lock or writeback when SYNC waits; a frame whose owner has no
 * migrate op (or an unmovable allocation) never moves, so gfa skips on it in SYNC too
 * (docs/decisions.md, entry 28).
 */
static bool skip_on_failure(const struct compact_control *cc, enum iso_fail why)
{
	if (!cc->direct || cc->order <= 0 || why == ISO_OK)
		return false;
	return why == ISO_PERMANENT || cc->mode != GFA_COMPACT_SYNC;
}

/*
 * Put back the sources isolated since index `from` (zone lock held).  They leave
 * compact_isolated too: the kernel counts what a block scan kept isolated.
 */
static void putback_since(struct compact_control *cc, unsigned int from)
{
	while (cc->nr_migrate > from) {
		struct iso_block *b = &cc->migrate[--cc->nr_migrate];

		GFA_BUG_ON(fstate(FR(cc, b->pfn)) != GFA_FRAME_ISOLATED);
		GFA_BUG_ON(cc->zone->c.vm.compact_isolated < (1UL << b->order));
		fstate_set(FR(cc, b->pfn), GFA_FRAME_ALLOCATED);
		cc->zone->c.vm.compact_isolated -= 1UL << b->order;
	}
}

/*
 * isolate_migratepages_block(): isolate movable blocks from low_pfn to the end of its
 * pageblock, at most COMPACT_CLUSTER_MAX unless rescanning the same block ("mm,
 * compaction: avoid rescanning the same pageblock multiple times").
 * With skip_on_failure() the sources of one call all lie in one cc->order window: the
 * scan stops at a window boundary once it holds sources, as the kernel's does.
 * Returns where the scan stopped.
 */
static uint64_t isolate_migratepages_block(struct compact_control *cc, uint64_t low_pfn)
{
	struct gfa_zone *z = cc->zone;
	uint64_t end = pb_start(low_pfn) + GFA_PAGEBLOCK_FRAMES;
	uint64_t pfn = frame_find_head(z->pool, z, low_pfn);
	uint64_t window = cc->order > 0 ? 1UL << cc->order : 1, next_skip = 0;
	unsigned int win_first = cc->nr_migrate;

	if (pfn == GFA_NIL || pfn < low_pfn)   /* inside a block started earlier */
		pfn = pfn == GFA_NIL ? low_pfn : pfn + (1UL << FR(cc, pfn)->order);
	while (pfn < end && pfn < cc->zone_end) {
		struct gfa_frame *f = FR(cc, pfn);
		unsigned int order = f->order, st = fstate(f);
		enum iso_fail why = ISO_OK;

		if (pfn >= next_skip) {
			/* a new window: migrate the previous one's sources first */
			if (cc->nr_migrate > win_first && skip_on_failure(cc, ISO_PERMANENT))
				break;
			win_first = cc->nr_migrate;
			next_skip = (pfn | (window - 1)) + 1;
		}
		/* the walk goes from head to head under the zone lock */
		GFA_BUG_ON(!st || order > GFA_MAX_ORDER);
		if (!st || order > GFA_MAX_ORDER)
			order = 0;  /* a release build steps on safely */
		cc->migrate_scanned += 1UL << order;
		cc->migrate_blocks++;
		if (st == GFA_FRAME_ALLOCATED && !block_movable(cc, f))
			why = ISO_PERMANENT;
		else if (st == GFA_FRAME_ALLOCATED &&
			 fstate_cas(f, GFA_FRAME_ALLOCATED, GFA_FRAME_ISOLATED)) {
			GFA_BUG_ON(cc->nr_migrate >= MAX_ISOLATED);
			cc->migrate[cc->nr_migrate++] =
				(struct iso_block){ pfn, order, frame_owner(f) };
			z->c.vm.compact_isolated += 1UL << order;
		} else if (st == GFA_FRAME_ALLOCATED || st == GFA_FRAME_ISOLATED) {
			why = ISO_TRANSIENT;
		}
		if (skip_on_failure(cc, why)) {
			putback_since(cc, win_first);
			pfn = next_skip > pfn + (1UL << order) ? next_skip : pfn + (1UL << order);
			continue;
		}
		pfn += 1UL << order;
		if (!cc->rescan && cc->nr_migrate >= COMPACT_CLUSTER_MAX)
			break;
	}
	return pfn < end ? pfn : end;
}

/* move_freelist_tail(): the forward (source) search scanned head .. p: move them to the tail */
static void freelist_move_tail(struct gfa_frame *fr, struct gfa_free_list *l, uint32_t p)
{
	if (fr[p].next != GFA_NIL)
		freelist_rotate_to(fr, l, fr[p].next);
}

/*
 * fast_find_migrateblock(): use the free lists to find a pageblock that is already
 * partly free, so fewer moves empty it ("mm, compaction: use free lists to quickly
 * locate a migration source").  Only for requests above the costly
 * order, at a pageblock boundary, for movable requests.  Returns the block or GFA_NIL.
 */
static uint64_t fast_find_migrateblock(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	struct gfa_frame *frames = z->pool->frames;
	unsigned int limit, nr_scanned = 0;
	uint64_t distance, high_pfn, pfn = cc->migrate_pfn;

	if (cc->linear || cc->ignore_skip || cc->order <= COSTLY_ORDER ||
	    (pfn & (GFA_PAGEBLOCK_FRAMES - 1)) ||
	    (cc->direct && cc->mt != GFA_MT_MOVABLE) || cc->free_pfn <= pfn)
		return GFA_NIL;
	limit = freelist_scan_limit(cc);
	distance = (cc->free_pfn - pfn) >> 1;
	if (pfn != cc->zone_start)
		distance >>= 2;
	high_pfn = pb_start(pfn + distance);
	for (int order = cc->order - 1; order >= COSTLY_ORDER && nr_scanned < limit; order--) {
		struct gfa_free_list *l = &z->area[order].list[GFA_MT_MOVABLE];
		uint32_t p = l->head;

		while (p != GFA_NIL && nr_scanned < limit) {
			uint32_t next = frames[p].next;

			nr_scanned++;
			if (p < pfn) {
				/* behind the scanner: worth less, search less */
				limit >>= 1;
			} else if (p < high_pfn) {
				if (pb_test_and_set_skip(z, p)) {
					/* owned by another instance: rotate to the tail */
					buddy_list_del(z->pool, z, p);
					buddy_list_add(z->pool, z, p, (unsigned int)order,
						       GFA_MT_MOVABLE, true);
				} else {
					/* the scanned prefix to the tail: a fresh next search */
					cc->migrate_scanned += nr_scanned;
					cc->migrate_blocks += nr_scanned;
					cc->fast_search_fail = 0;
					freelist_move_tail(frames, l, p);
					return pb_start(p);
				}
			}
			p = next;
		}
	}
	cc->migrate_scanned += nr_scanned;
	cc->migrate_blocks += nr_scanned;
	cc->fast_search_fail++;
	return GFA_NIL;
}

/* Blocks whose pageblock cannot give up frames in this mode. */
static bool suitable_migration_source(struct compact_control *cc, uint64_t block)
{
	unsigned int mt = pfn_pageblock(cc->zone, block)->mt;
	struct gfa_frame *f = FR(cc, block);

	/* "check early for huge pages encountered by the migration scanner": a pageblock
	 * holding a huge block is no source (full mode only) */
	if (!cc->linear && fstate(f) && fstate(f) != GFA_FRAME_FREE &&
	    f->order >= GFA_PAGEBLOCK_ORDER)
		return false;
	if (mt == GFA_MT_ISOLATE)
		return false;
	if (cc->mode == GFA_COMPACT_ASYNC)
		return mt == GFA_MT_MOVABLE;
	return true;
}

/* Linear mode: a source block scanned whole that gave nothing (zone lock held). */
static void linear_migrate_block_empty(struct compact_control *cc, uint64_t block)
{
	struct gfa_zone *z = cc->zone;

	if (!cc->ignore_skip)
		pb_set_skip(z, block);
	if (block > z->compact_cached_migrate_pfn[0])
		z->compact_cached_migrate_pfn[0] = block;
	if (cc->mode != GFA_COMPACT_ASYNC && block > z->compact_cached_migrate_pfn[1])
		z->compact_cached_migrate_pfn[1] = block;
}

/*
 * isolate_migratepages(): choose the next source pageblock (free-list guided first,
 * else linear), own it through its skip bit, and isolate from it.
 */
static void isolate_migratepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	uint64_t low = cc->migrate_pfn, block, found;

	pthread_mutex_lock(&z->lock);
	found = fast_find_migrateblock(cc);
	cc->fast_found = found != GFA_NIL;
	if (cc->fast_found)
		low = found;
	for (block = pb_start(low); block + GFA_PAGEBLOCK_FRAMES <= cc->free_pfn;
	     block += GFA_PAGEBLOCK_FRAMES, low = block) {
		bool at_start = low == block;

		if (!cc->fast_found && !cc->ignore_skip) {
			/*
			 * Skip hints: full mode reads the bit at the block start only, as
			 * it owns the block from there on ("mm, compaction: keep migration
			 * source private to a single compaction instance" checks the
			 * pageblock once); linear-only mode on every visit, with no
			 * ownership, as isolation_suitable() before the series, so an
			 * instance abandons the rest of a block another instance marked.
			 */
			if ((at_start || cc->linear) && pb_skip(z, block))
				continue;
			/* ownership token: another instance isolating here keeps it */
			if (at_start && !cc->linear && pb_test_and_set_skip(z, block))
				continue;
		}
		if (!suitable_migration_source(cc, block)) {
			cc->fast_found = false;
			continue;
		}
		cc->rescan = !cc->linear && block == cc->last_block && at_start;
		cc->last_block = block;
		low = isolate_migratepages_block(cc, low);
		/*
		 * linear mode, as update_pageblock_skip() before the series: a block
		 * scanned to its end that gave nothing is skipped next time, and only
		 * such a block moves the cached position (to its start)
		 */
		if (cc->linear && !cc->nr_migrate && !(low & (GFA_PAGEBLOCK_FRAMES - 1)))
			linear_migrate_block_empty(cc, block);
		break;
	}
	if (!cc->fast_found || low > cc->migrate_pfn)
		cc->migrate_pfn = low;
	/* the cached position only moves forward, and only past whole blocks */
	if (!cc->linear && !(cc->migrate_pfn & (GFA_PAGEBLOCK_FRAMES - 1))) {
		int sync = cc->mode != GFA_COMPACT_ASYNC;

		if (cc->migrate_pfn > z->compact_cached_migrate_pfn[sync])
			z->compact_cached_migrate_pfn[sync] = cc->migrate_pfn;
		if (!sync && cc->migrate_pfn > z->compact_cached_migrate_pfn[1])
			/* "keep cached migration PFNs synced for unusable pageblocks" */
			z->compact_cached_migrate_pfn[1] = cc->migrate_pfn;
	}
	pthread_mutex_unlock(&z->lock);
}

/* Put a block that did not move back in the hands of its owner. */
static void putback_block(struct compact_control *cc, struct iso_block *b)
{
	GFA_BUG_ON(fstate(FR(cc, b->pfn)) != GFA_FRAME_ISOLATED);  /* ISOLATED -> ALLOCATED */
	fstate_set(FR(cc, b->pfn), GFA_FRAME_ALLOCATED);
}

/*
 * The owners of a batch that have batch ops: each one's reference is kept from its
 * batch_begin to its batch_end.  References form a per-thread stack: kept ones stay
 * under the one in hand (ref[nr]) and are put last, innermost first.  Past BATCH_OWNERS
 * owners a move is a batch of its own.
 */
#define BATCH_OWNERS 8
struct migrate_batch {
	struct owner_ref ref[BATCH_OWNERS + 1];
	uint64_t owner[BATCH_OWNERS + 1];
	unsigned int nr;
};

static void batch_end_one(struct gfa_pool *pool, struct owner_ref *r, uint64_t owner)
{
	if (owner_ref_live(pool, r))
		r->ops->batch_end(r->ctx, owner);
	owner_put(pool, r);
}

/* Before a move with the reference in hand: begin its owner's batch; true if begun
 * here (the reference is then kept), false if begun before or without batch ops. */
static bool batch_begin_for(struct migrate_batch *mb, uint64_t owner)
{
	struct owner_ref *r = &mb->ref[mb->nr];

	if (!r->ops->batch_begin)
		return false;
	for (unsigned int k = 0; k < mb->nr; k++)
		if (mb->owner[k] == owner && mb->ref[k].slot == r->slot)
			return false;
	r->ops->batch_begin(r->ctx, owner);
	return true;
}

/* After the move: keep the reference in hand for the batch's end, or put it. */
static void batch_keep_or_put(struct gfa_pool *pool, struct migrate_batch *mb, uint64_t owner,
			      bool begun)
{
	struct owner_ref *r = &mb->ref[mb->nr];

	GFA_BUG_ON(mb->nr > BATCH_OWNERS);
	if (!begun)
		owner_put(pool, r);
	else if (mb->nr < BATCH_OWNERS)
		mb->owner[mb->nr++] = owner;
	else
		batch_end_one(pool, r, owner);
}

static void batch_end_all(struct gfa_pool *pool, struct migrate_batch *mb)
{
	while (mb->nr) {
		mb->nr--;
		batch_end_one(pool, &mb->ref[mb->nr], mb->owner[mb->nr]);
	}
}

/* migrate_pages(): move every isolated source, freeing the source (capture may fire). */
static void migrate_pages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	struct migrate_batch mb = { .nr = 0 };
	unsigned int i;

	for (i = 0; i < cc->nr_migrate; i++) {
		struct iso_block *b = &cc->migrate[i];
		struct owner_ref *ref = &mb.ref[mb.nr];
		int64_t dst = -1;
		bool begun;
		int err;

		if (cc->capc && cc->capc->pfn >= 0)
			break;  /* captured: stop at once */
		if (owner_get(z->pool, b->owner, ref)) {
			dst = compaction_alloc(cc, b->order);
			if (dst < 0)
				owner_put(z->pool, ref);
		}
		if (dst < 0) {
			putback_block(cc, b);   /* no owner, or no target left: next round */
			continue;
		}
		/* both sides isolated, ours alone: the target of the source's order */
		GFA_BUG_ON(fstate(FR(cc, b->pfn)) != GFA_FRAME_ISOLATED);
		GFA_BUG_ON(fstate(FR(cc, (uint64_t)dst)) != GFA_FRAME_ISOLATED ||
			   FR(cc, (uint64_t)dst)->order != b->order);
		begun = batch_begin_for(&mb, b->owner);
		err = owner_migrate(z->pool, ref->ops, ref->ctx, b->owner, b->pfn, (uint64_t)dst,
				    b->order);
		batch_keep_or_put(z->pool, &mb, b->owner, begun);
		pthread_mutex_lock(&z->lock);
		if (err) {
			cc_add_free(cc, (uint64_t)dst, b->order);
			putback_block(cc, b);
			z->c.vm.pgmigrate_fail += 1UL << b->order;
		} else {
			/* the owner's index (page->index) travels with the block */
			__atomic_store_n(&FR(cc, (uint64_t)dst)->index,
					 __atomic_load_n(&FR(cc, b->pfn)->index, __ATOMIC_RELAXED),
					 __ATOMIC_RELAXED);
			frame_mark_allocated(FR(cc, (uint64_t)dst), GFA_MT_MOVABLE, b->owner);
			zone_return_locked(z, b->pfn, b->order);  /* no caller's free */
			z->c.vm.pgmigrate_success += 1UL << b->order;
		}
		pthread_mutex_unlock(&z->lock);
	}
	batch_end_all(z->pool, &mb);
	for (; i < cc->nr_migrate; i++)
		putback_block(cc, &cc->migrate[i]);
	cc->nr_migrate = 0;
}

/* release_freepages(): unused targets go back to the buddy lists. */
static void release_freepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;

	uint64_t highest = 0;

	pthread_mutex_lock(&z->lock);
	for (unsigned int i = 0; i < cc->nr_free; i++) {
		uint64_t pfn = cc->freepages[i].pfn;

		if (pfn > highest)
			highest = pfn;
		GFA_BUG_ON(fstate(FR(cc, pfn)) != GFA_FRAME_ISOLATED);     /* ISOLATED -> free */
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
	pthread_mutex_unlock(&z->lock);
}

/* Is a block of the order free now (zone lock held)? */
static bool zone_has_free_order(struct gfa_zone *z, int order, unsigned int mt,
				bool nofallback)
{
	for (int o = order; o <= GFA_MAX_ORDER; o++) {
		if (z->area[o].list[mt].nr)
			return true;
		/* fallback can steal blocks of pageblock_order/2 and up */
		if (!nofallback && o >= GFA_PAGEBLOCK_ORDER / 2 && z->area[o].nr_free)
			return true;
	}
	return false;
}

static int fragmentation_score_locked(struct gfa_zone *z)
{
	uint64_t huge = 0;

	if (!z->nr_free)
		return 0;
	for (int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
		huge += z->area[o].nr_free << o;
	return (int)(100 * (z->nr_free - huge) / z->nr_free);
}

/* __compact_finished() */
static int compact_finished(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	int ret = GFA_COMPACT_CONTINUE;

	if (cc->capc && cc->capc->pfn >= 0)
		return GFA_COMPACT_SUCCESS;
	pthread_mutex_lock(&z->lock);
	if ((cc->free_pfn >> GFA_PAGEBLOCK_ORDER) <= (cc->migrate_pfn >> GFA_PAGEBLOCK_ORDER)) {
		/* scanners met: restart from the ends, clearing skip hints next time */
		z->compact_cached_migrate_pfn[0] = z->compact_cached_migrate_pfn[1] =
			cc->zone_start;
		z->compact_cached_free_pfn = pb_start(cc->zone_end - 1);
		z->compact_blockskip_flush = true;
		ret = GFA_COMPACT_COMPLETE;
	} else if (cc->proactive) {
		int wmark_low = 100 - (int)__atomic_load_n(&z->pool->compact.proactiveness,
							   __ATOMIC_RELAXED);

		if (fragmentation_score_locked(z) <= wmark_low)
			ret = GFA_COMPACT_SUCCESS;
	} else if (cc->order < 0) {
		ret = GFA_COMPACT_CONTINUE;
	} else if (!cc->linear && (cc->migrate_pfn & (GFA_PAGEBLOCK_FRAMES - 1))) {
		/* "always finish scanning of a full pageblock" */
		ret = GFA_COMPACT_CONTINUE;
	} else if (zone_has_free_order(z, cc->order, cc->mt, cc->nofallback)) {
		ret = GFA_COMPACT_SUCCESS;
	}
	pthread_mutex_unlock(&z->lock);
	return ret;
}

/*
 * Selective skip reset ("mm, compaction: be selective about what pageblocks to clear
 * skip hints"): clear a block's bit only if it can serve as a target
 * (a MOVABLE pageblock with free frames: its count says so exactly, where the kernel
 * samples) or as a source (a movable allocated block, sampled one frame in 8 as the
 * kernel does).  Linear mode clears all, as the kernel did before.
 */
static void reset_isolation_suitable(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;

	for (uint64_t pb = 0; pb < z->nr_pageblocks; pb++) {
		struct gfa_pageblock *b = &z->pageblocks[pb];
		uint64_t start = z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER);

		if (!(b->flags & PB_SKIP))
			continue;
		if (cc->linear || (b->mt == GFA_MT_MOVABLE && b->nr_free)) {
			b->flags &= ~PB_SKIP;
			continue;
		}
		for (uint64_t pfn = start; pfn < start + GFA_PAGEBLOCK_FRAMES && pfn < cc->zone_end;
		     pfn += 8) {
			struct gfa_frame *f = FR(cc, pfn);

			if (fstate(f) == GFA_FRAME_ALLOCATED && f->mt == GFA_MT_MOVABLE) {
				b->flags &= ~PB_SKIP;
				break;
			}
		}
	}
	z->compact_blockskip_flush = false;
}

static void compact_zone_setup(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	int sync = cc->mode != GFA_COMPACT_ASYNC;

	cc->zone_start = z->start_pfn;
	cc->zone_end = z->start_pfn + z->nr_frames;
	cc->linear = __atomic_load_n(&z->pool->compact.linear_only, __ATOMIC_RELAXED);
	cc->search_order = cc->order > 0 ? cc->order - 1 : 0;
	cc->last_block = GFA_NIL;
	pthread_mutex_lock(&z->lock);
	if (z->compact_blockskip_flush)
		reset_isolation_suitable(cc);
	if (cc->whole_zone) {
		cc->migrate_pfn = cc->zone_start;
		cc->free_pfn = pb_start(cc->zone_end - 1);
	} else {
		cc->migrate_pfn = z->compact_cached_migrate_pfn[sync];
		cc->free_pfn = z->compact_cached_free_pfn;
		if (cc->free_pfn < cc->zone_start || cc->free_pfn >= cc->zone_end)
			cc->free_pfn = pb_start(cc->zone_end - 1);
		if (cc->migrate_pfn < cc->zone_start || cc->migrate_pfn >= cc->zone_end)
			cc->migrate_pfn = cc->zone_start;
	}
	pthread_mutex_unlock(&z->lock);
}

static void compact_account(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;

	pthread_mutex_lock(&z->lock);
	z->c.vm.compact_migrate_scanned += cc->migrate_scanned;
	z->c.vm.compact_migrate_blocks += cc->migrate_blocks;
	z->c.vm.compact_free_scanned += cc->free_scanned;
	if (cc->daemon) {
		z->c.vm.compact_daemon_migrate_scanned += cc->migrate_scanned;
		z->c.vm.compact_daemon_free_scanned += cc->free_scanned;
	}
	pthread_mutex_unlock(&z->lock);
}

/* compact_zone() */
static int compact_zone(struct compact_control *cc)
{
	int ret;

	/* any free frame is an order-0 block: nothing to compact for (the header's "order
	 * too small"); it would walk the zone for nothing when none is free */
	if (cc->order == 0 && !cc->proactive)
		return GFA_COMPACT_SKIPPED;
	compact_zone_setup(cc);
	if (cc->order > 0 && !cc->proactive) {
		pthread_mutex_lock(&cc->zone->lock);
		ret = zone_has_free_order(cc->zone, cc->order, cc->mt, cc->nofallback);
		pthread_mutex_unlock(&cc->zone->lock);
		if (ret && !cc->capc)
			return GFA_COMPACT_SKIPPED;
	}
	while ((ret = compact_finished(cc)) == GFA_COMPACT_CONTINUE) {
		isolate_migratepages(cc);
		if (!cc->nr_migrate)
			continue;
		migrate_pages(cc);
		if (cc->capc && cc->capc->pfn >= 0) {
			ret = GFA_COMPACT_SUCCESS;
			break;
		}
	}
	release_freepages(cc);
	compact_account(cc);
	return ret;
}

static int compact_args(struct gfa_pool *pool, unsigned int zone, int order,
			enum gfa_compact_mode mode)
{
	if (!pool)
		return GFA_EFAULT;
	if (zone >= pool->nr_zones)
		return GFA_ERANGE;
	if (order < -1 || order > GFA_MAX_ORDER)
		return GFA_EORDER;
	if ((unsigned int)mode > GFA_COMPACT_SYNC)
		return GFA_EINVAL;
	return 0;
}

int gfa_compact_zone(struct gfa_pool *pool, unsigned int zone, int order,
		     enum gfa_compact_mode mode)
{
	struct compact_control *cc;
	int err = compact_args(pool, zone, order, mode);

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	cc = calloc(1, sizeof(*cc));
	if (!cc)
		return -ENOMEM;
	cc->zone = &pool->zones[zone];
	cc->order = order;
	cc->mt = GFA_MT_MOVABLE;
	cc->mode = mode;
	/* full compaction ignores skip hints, as the kernel's compact_node() */
	cc->ignore_skip = cc->whole_zone = order < 0;
	pcp_isolate_begin(cc->zone);
	err = compact_zone(cc);
	pcp_isolate_end(cc->zone);
	free(cc);
	return err;
}

int compact_run(struct gfa_zone *z, int order, unsigned int mt, enum gfa_compact_mode mode,
		unsigned int how, struct capture_control *capc)
{
	struct compact_control *cc = calloc(1, sizeof(*cc));
	int ret;

	if (!cc)
		return -ENOMEM;
	cc->zone = z;
	cc->order = order;
	cc->mt = mt;
	cc->mode = mode;
	cc->direct = how & COMPACT_DIRECT;
	cc->nofallback = how & COMPACT_NOFALLBACK;
	cc->ignore_skip = cc->whole_zone = how & COMPACT_IGNORE_SKIP;
	cc->capc = capc;
	pcp_isolate_begin(z);
	ret = compact_zone(cc);
	pcp_isolate_end(z);
	free(cc);
	return ret;
}

void compact_zone_background(struct gfa_zone *z, int order)
{
	struct compact_control *cc = calloc(1, sizeof(*cc));

	if (!cc)
		return;
	cc->zone = z;
	cc->order = order;
	cc->mt = GFA_MT_MOVABLE;
	cc->mode = GFA_COMPACT_SYNC_LIGHT;
	/* proactive passes cover the whole zone, skip hints off (proactive_compact_node) */
	cc->proactive = cc->ignore_skip = cc->whole_zone = order < 0;
	cc->daemon = true;
	pcp_isolate_begin(z);
	compact_zone(cc);
	pcp_isolate_end(z);
	free(cc);
}

int gfa_zone_fragmentation_score(struct gfa_pool *pool, unsigned int zone)
{
	struct gfa_zone_stat st;
	uint64_t huge = 0;

	if (!pool)
		return GFA_EFAULT;
	if (gfa_zone_stat(pool, zone, &st))
		return GFA_ERANGE;      /* counted by gfa_zone_stat() */
	if (!st.nr_free)
		return 0;
	for (int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
		for (int t = 0; t < GFA_MT_TYPES; t++)
			huge += st.nr_free_blocks[o][t] << o;
	huge += st.nr_pcp_blocks[GFA_PAGEBLOCK_ORDER] << GFA_PAGEBLOCK_ORDER;
	if (huge > st.nr_free)
		huge = st.nr_free;      /* (a snapshot taken while frames kept moving) */
	return (int)(100 * (st.nr_free - huge) / st.nr_free);
}
