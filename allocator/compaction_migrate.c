// SPDX-License-Identifier: MIT
/*
 * Compaction's migrate scanner: MOVABLE source blocks taken from the low end of the
 * zone upwards (isolate_migratepages), or the block the free lists point at
 * (fast_find_migrateblock), then moved by their owners' migrate ops (migrate_pages),
 * batched per owner, with no lock held.
 */
#include <stdlib.h>
#include <string.h>
#include "allocator/compaction_internal.h"

/* ---- the migrate side ---- */

/* Can this allocated block be a migration source?  (zone lock held) */
static bool block_movable(struct compact_control *cc, struct gfa_frame *f)
{
	return fstate(f) == GFA_FRAME_ALLOCATED && f->mt == GFA_MT_MOVABLE &&
	       f->order < GFA_PAGEBLOCK_ORDER && owner_lookup(cc->zone->pool, frame_owner(f), NULL);
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

	if (pfn == GFA_NIL || pfn < low_pfn) /* inside a block started earlier */
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
			order = 0; /* a release build steps on safely */
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
static void freelist_move_tail(struct gfa_pool *pool, struct gfa_free_list *l, uint32_t p)
{
	if (pfn_to_frame(pool, p)->next != GFA_NIL)
		freelist_rotate_to(pool, l, pfn_to_frame(pool, p)->next);
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
	struct gfa_pool *pool = z->pool;
	unsigned int limit, nr_scanned = 0;
	uint64_t distance, high_pfn, pfn = cc->migrate_pfn;

	if (cc->linear || cc->ignore_skip || cc->order <= COSTLY_ORDER ||
	    (pfn & (GFA_PAGEBLOCK_FRAMES - 1)) || (cc->direct && cc->mt != GFA_MT_MOVABLE) ||
	    cc->free_pfn <= pfn)
		return GFA_NIL;
	limit = freelist_scan_limit(cc);
	distance = (cc->free_pfn - pfn) >> 1;
	if (pfn != cc->zone_start)
		distance >>= 2;
	high_pfn = pb_start(pfn + distance);
	/* the lists of the arenas [pfn, high_pfn) meets, lowest first (zone lock) */
	for (int order = cc->order - 1; order >= COSTLY_ORDER && nr_scanned < limit; order--)
		for (unsigned int ai = arena_index(z, pfn);
		     high_pfn > pfn && ai <= arena_index(z, high_pfn - 1) && nr_scanned < limit;
		     ai++) {
			struct gfa_free_list *l = &z->arenas[ai].area[order].list[GFA_MT_MOVABLE];
			uint32_t p = l->head;

			while (p != GFA_NIL && nr_scanned < limit) {
				uint32_t next = pfn_to_frame(pool, p)->next;

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
						/* the scanned prefix to the tail: a fresh search */
						cc->migrate_scanned += nr_scanned;
						cc->migrate_blocks += nr_scanned;
						cc->fast_search_fail = 0;
						freelist_move_tail(pool, l, p);
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
void isolate_migratepages(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	uint64_t low = cc->migrate_pfn, block, found;

	zone_lock(z);
	found = fast_find_migrateblock(cc);
	cc->fast_found = found != GFA_NIL;
	if (cc->fast_found)
		low = found;
	for (block = pb_start(low); block + GFA_PAGEBLOCK_FRAMES <= cc->free_pfn;
	     block += GFA_PAGEBLOCK_FRAMES, low = block) {
		bool at_start = low == block;

		/* held blocks only, and their pageblocks are not to be written (no token) */
		if (pfn_deferred(z, block)) {
			block = deferred_section_last_pb(block);
			continue;
		}
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
	zone_unlock(z);
}

/* Put a block that did not move back in the hands of its owner. */
static void putback_block(struct compact_control *cc, struct iso_block *b)
{
	GFA_BUG_ON(fstate(FR(cc, b->pfn)) != GFA_FRAME_ISOLATED); /* ISOLATED -> ALLOCATED */
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
void migrate_pages(struct compact_control *cc)
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
			break; /* captured: stop at once */
		if (owner_get(z->pool, b->owner, ref)) {
			dst = compaction_alloc(cc, b->order);
			if (dst < 0)
				owner_put(z->pool, ref);
		}
		if (dst < 0) {
			putback_block(cc, b); /* no owner, or no target left: next round */
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
		zone_lock(z);
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
			zone_return_locked(z, b->pfn, b->order); /* no caller's free */
			z->c.vm.pgmigrate_success += 1UL << b->order;
		}
		zone_unlock(z);
	}
	batch_end_all(z->pool, &mb);
	for (; i < cc->nr_migrate; i++)
		putback_block(cc, &cc->migrate[i]);
	cc->nr_migrate = 0;
}

/* release_freepages(): unused targets go back to the buddy lists. */
