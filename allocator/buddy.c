// SPDX-License-Identifier: MIT
/*
 * The buddy allocator of one zone: free lists per order and migratetype, split
 * (expand), merge, and migratetype fallback with pageblock stealing as in the kernel's
 * __rmqueue_fallback.  The lists are an arena's (decisions 38): everything here runs
 * with the lock of the arena that holds the block, or the zone lock.
 */
#include "allocator/internal.h"

static struct gfa_frame *F(struct gfa_zone *z, uint64_t pfn)
{
	return pfn_to_frame(z->pool, pfn);
}

static bool pfn_in_zone(const struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	return pfn >= z->start_pfn && pfn + (1UL << order) <= z->start_pfn + z->nr_frames;
}

/* Keep each pageblock's count of free frames (an order-10 block spans two). */
static inline __attribute__((always_inline)) void pb_account_free(struct gfa_zone *z, uint64_t pfn,
								  unsigned int order, int sign)
{
	if (order <= GFA_PAGEBLOCK_ORDER) {
		/* a pageblock's free count never goes below 0 nor above the pageblock */
		GFA_BUG_ON(sign < 0 && pfn_pageblock(z, pfn)->nr_free < (1U << order));
		pfn_pageblock(z, pfn)->nr_free += (uint16_t)(sign * (1 << order));
		GFA_BUG_ON(pfn_pageblock(z, pfn)->nr_free > GFA_PAGEBLOCK_FRAMES);
		return;
	}
	for (uint64_t p = pfn; p < pfn + (1UL << order); p += GFA_PAGEBLOCK_FRAMES) {
		GFA_BUG_ON(sign < 0 ? pfn_pageblock(z, p)->nr_free != GFA_PAGEBLOCK_FRAMES :
				      pfn_pageblock(z, p)->nr_free != 0);
		pfn_pageblock(z, p)->nr_free += (uint16_t)(sign * (int)GFA_PAGEBLOCK_FRAMES);
	}
}

static inline __attribute__((always_inline)) void free_head_mark(struct gfa_zone *z, uint64_t pfn,
								 bool set)
{
	uint64_t bit, *w;

	GFA_BUG_ON(pfn < z->start_pfn || pfn - z->start_pfn >= z->nr_frames);
	w = free_head_word(z, pfn, &bit);
	if (set)
		*w |= bit;
	else
		*w &= ~bit;
}

/* The first head in free_heads (never a pageblock's first frame) in [pfn, end). */
static uint64_t free_head_next_inside(const struct gfa_zone *z, uint64_t pfn, uint64_t end)
{
	while (pfn < end) {
		uint64_t i = pfn - z->start_pfn;
		uint64_t w = z->free_heads[i / 64] & (~0ULL << (i % 64));

		if (w) {
			pfn += (uint64_t)__builtin_ctzll(w) - i % 64;
			return pfn < end ? pfn : end;
		}
		pfn += 64 - i % 64;
	}
	return end;
}

/*
 * A pageblock without PB_TAILS has no head but at its first frame (pb_mark_tails()
 * marks it before any other frame of it heads a listed block), so its free_heads words
 * are not read.
 */
uint64_t free_head_next(const struct gfa_zone *z, uint64_t pfn, uint64_t end)
{
	while (pfn < end) {
		uint64_t pb_end = (pfn | (GFA_PAGEBLOCK_FRAMES - 1)) + 1, found;

		if (!(pfn & (GFA_PAGEBLOCK_FRAMES - 1)) && free_head_test(z, pfn))
			return pfn;
		if (pb_end > end)
			pb_end = end;
		if (z->pageblocks[(pfn - z->start_pfn) >> GFA_PAGEBLOCK_ORDER].flags & PB_TAILS) {
			found = free_head_next_inside(z, pfn, pb_end);
			if (found < pb_end)
				return found;
		}
		pfn = pb_end;
	}
	return end;
}

/*
 * A block onto / off its free list: the links, the list's and the order's counts, the
 * free-head bit.  The frame counts (the zone's nr_free and the pageblocks') are the
 * callers': a merge or a split moves frames between orders without changing them, so
 * it accounts once for the frames that really arrive or leave (free_account()).
 */
static inline __attribute__((always_inline)) void buddy_list_link(struct gfa_pool *pool,
								  struct gfa_zone *z, uint64_t pfn,
								  unsigned int order,
								  unsigned int mt, bool tail)
{
	struct gfa_arena *a = arena_of(z, pfn);
	struct gfa_free_list *l = &a->area[order].list[mt];
	struct gfa_frame *f = pfn_to_frame(pool, pfn);

	GFA_BUG_ON(order > GFA_MAX_ORDER || mt >= GFA_MT_TYPES);
	GFA_BUG_ON(pfn & ((1UL << order) - 1)); /* blocks are aligned */
	GFA_BUG_ON(!pfn_in_zone(z, pfn, order));
	GFA_BUG_ON(free_head_test(z, pfn)); /* on no list yet */
	/* the list's ends: no frame before its head, none after its tail */
	GFA_BUG_ON(l->head != GFA_NIL && pfn_to_frame(pool, l->head)->prev != GFA_NIL);
	GFA_BUG_ON(l->tail != GFA_NIL && pfn_to_frame(pool, l->tail)->next != GFA_NIL);
	GFA_BUG_ON((l->head == GFA_NIL) != !l->nr);
	pb_mark_tails(z, pfn);
	fstate_set(f, GFA_FRAME_FREE);
	f->order = (uint8_t)order;
	f->mt = (uint8_t)mt;
	if (l->head == GFA_NIL) {
		f->next = f->prev = GFA_NIL;
		l->head = l->tail = (uint32_t)pfn;
	} else if (tail) {
		f->next = GFA_NIL;
		f->prev = l->tail;
		pfn_to_frame(pool, l->tail)->next = (uint32_t)pfn;
		l->tail = (uint32_t)pfn;
	} else {
		f->prev = GFA_NIL;
		f->next = l->head;
		pfn_to_frame(pool, l->head)->prev = (uint32_t)pfn;
		l->head = (uint32_t)pfn;
	}
	l->nr++;
	a->area[order].nr_free++;
	free_head_mark(z, pfn, true);
}

/* Returns the block's order. */
static inline __attribute__((always_inline)) unsigned int
buddy_list_unlink(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn)
{
	struct gfa_frame *f = pfn_to_frame(pool, pfn);
	unsigned int order = f->order;
	struct gfa_arena *a = arena_of(z, pfn);
	struct gfa_free_list *l = &a->area[order].list[f->mt];

	/* only a listed free block leaves a list, and the counters never go below 0 */
	GFA_BUG_ON(fstate(f) != GFA_FRAME_FREE || !free_head_test(z, pfn));
	GFA_BUG_ON(!l->nr || !a->area[f->order].nr_free || a->nr_free < (1UL << f->order));
	/* on this list: its neighbours (or the list's ends) point at it */
	GFA_BUG_ON(f->prev == GFA_NIL ? l->head != pfn : pfn_to_frame(pool, f->prev)->next != pfn);
	GFA_BUG_ON(f->next == GFA_NIL ? l->tail != pfn : pfn_to_frame(pool, f->next)->prev != pfn);
	if (f->prev == GFA_NIL)
		l->head = f->next;
	else
		pfn_to_frame(pool, f->prev)->next = f->next;
	if (f->next == GFA_NIL)
		l->tail = f->prev;
	else
		pfn_to_frame(pool, f->next)->prev = f->prev;
	f->next = f->prev = GFA_NIL;
	l->nr--;
	a->area[order].nr_free--;
	free_head_mark(z, pfn, false);
	return order;
}

/* 2^order frames at pfn join (sign 1) or leave (-1) the free lists' frame counts. */
static inline __attribute__((always_inline)) void free_account(struct gfa_zone *z, uint64_t pfn,
							       unsigned int order, int sign)
{
	struct gfa_arena *a = arena_of(z, pfn);

	a->nr_free += (uint64_t)(int64_t)sign << order;
	GFA_BUG_ON(a->nr_free > z->nr_frames); /* (below 0 wraps above it too) */
	pb_account_free(z, pfn, order, sign);
}

void buddy_list_add(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn, unsigned int order,
		    unsigned int mt, bool tail)
{
	buddy_list_link(pool, z, pfn, order, mt, tail);
	free_account(z, pfn, order, 1);
}

void buddy_list_del(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn)
{
	free_account(z, pfn, buddy_list_unlink(pool, z, pfn), -1);
}

__thread struct capture_control *compact_capc;

/*
 * compaction_capture(): a direct compaction running in this thread takes the block
 * as soon as merging forms one of its order, so no other thread can steal it.  Never
 * from an ISOLATE pageblock; a non-movable sub-pageblock request never captures from a
 * MOVABLE pageblock (that would bypass fallback and pageblock stealing).
 */
static bool compaction_capture(struct capture_control *capc, struct gfa_zone *z, uint64_t pfn,
			       unsigned int order, unsigned int mt)
{
	if (!capc || capc->zone != z || capc->pfn >= 0 || (int)order != capc->order)
		return false;
	if (mt == GFA_MT_ISOLATE || (capc->nofallback && mt != capc->mt))
		return false;
	if (order < GFA_PAGEBLOCK_ORDER && mt == GFA_MT_MOVABLE && capc->mt != GFA_MT_MOVABLE)
		return false;
	capc->pfn = (int64_t)pfn;
	/* off the lists under this lock hold: no released bits (only free frames carry
	 * them; nr_free - nr_released would wrap for whoever looks before the caller);
	 * saved, for the caller may throw the block back unwritten (claims) */
	release_take(z, pfn, 1UL << order);
	F(z, pfn)->order = (uint8_t)order;
	fstate_set(F(z, pfn), GFA_FRAME_ISOLATED);
	return true;
}

/*
 * Does the block hold a released frame?  The zone's and the pageblocks' counts answer
 * without the bits (the zone's in line, in block_released): a pageblock wholly inside
 * the block has its released frames in it, so only a block smaller than a pageblock
 * whose pageblock has released frames scans.  Every level of a merge up to
 * GFA_MAX_ORDER and of a split from it asks, under the zone lock.
 */
static bool block_released_slow(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	if (order >= GFA_PAGEBLOCK_ORDER) {
		for (uint64_t p = pfn; p < pfn + (1UL << order); p += GFA_PAGEBLOCK_FRAMES)
			if (pfn_pageblock(z, p)->nr_released)
				return true;
		return false;
	}
	if (!pfn_pageblock(z, pfn)->nr_released)
		return false;
	arena_of(z, pfn)->release_scans++;
	return release_bits_any(z, pfn, 1UL << order);
}

static inline __attribute__((always_inline)) bool block_released(struct gfa_zone *z, uint64_t pfn,
								 unsigned int order)
{
	return arena_of(z, pfn)->nr_released && block_released_slow(z, pfn, order);
}

/* Give the pageblocks of a block type mt; returns how many changed type. */
static uint64_t set_pageblocks_mt(struct gfa_zone *z, uint64_t pfn, unsigned int order,
				  unsigned int mt)
{
	uint64_t n = order >= GFA_PAGEBLOCK_ORDER ? 1UL << (order - GFA_PAGEBLOCK_ORDER) : 1;
	uint64_t changed = 0;

	for (uint64_t i = 0; i < n; i++) {
		struct gfa_pageblock *pb = pfn_pageblock(z, pfn + (i << GFA_PAGEBLOCK_ORDER));

		changed += pb->mt != mt;
		zone_pageblock_set_mt(z, pb, mt);
	}
	return changed;
}

/*
 * __free_one_page: merge with the buddy while it is free and of the same order, then
 * put the result on the list of its pageblock's migratetype.  Merging never crosses
 * into or out of an ISOLATE pageblock at pageblock order and above, as in the kernel.
 */
static inline __attribute__((always_inline)) bool free_one(struct gfa_zone *z, uint64_t pfn,
							   unsigned int order, bool cold)
{
	unsigned int mt = pfn_pageblock(z, pfn)->mt;
	/* read once: a thread-local (a call per read in a shared library), asked per level */
	struct capture_control *capc = compact_capc;
	uint64_t freed_pfn = pfn;
	unsigned int freed_order = order;

	GFA_BUG_ON(!arena_lock_held(arena_of(z, pfn)));
	GFA_BUG_ON(order > GFA_MAX_ORDER || (pfn & ((1UL << order) - 1)));
	GFA_BUG_ON(free_head_test(z, pfn)); /* the block must not be on any list */

	while (order < GFA_MAX_ORDER) {
		uint64_t buddy = pfn ^ (1UL << order);
		struct gfa_frame *bf;

		if (__builtin_expect(capc != NULL, 0) &&
		    compaction_capture(capc, z, pfn, order, mt))
			goto captured;
		if (!pfn_in_zone(z, buddy, order))
			break;
		bf = F(z, buddy);
		if (fstate(bf) != GFA_FRAME_FREE || bf->order != order)
			break;
		if (order >= GFA_PAGEBLOCK_ORDER &&
		    (pfn_pageblock(z, buddy)->mt == GFA_MT_ISOLATE ||
		     pfn_pageblock(z, pfn)->mt == GFA_MT_ISOLATE))
			break;
		/* the buddy's frames stay counted: they are in the merged block */
		buddy_list_unlink(z->pool, z, buddy);
		/*
		 * Linux 6.10's __free_one_page: the buddy's pageblocks take the freed
		 * block's type, so the merged block's pageblocks agree with its list (a
		 * wholly free pageblock of another type went to this type's requests).
		 */
		if (order >= GFA_PAGEBLOCK_ORDER && pfn_pageblock(z, buddy)->mt != mt)
			set_pageblocks_mt(z, buddy, order, mt);
		fstate_set(bf, 0);
		fstate_set(F(z, pfn), 0);
		pfn &= ~(1UL << order);
		order++;
	}
	if (__builtin_expect(capc != NULL, 0) && compaction_capture(capc, z, pfn, order, mt))
		goto captured;
	/* blocks with released frames are reused last: a host fault costs more */
	buddy_list_link(z->pool, z, pfn, order, mt, cold || block_released(z, pfn, order));
	free_account(z, freed_pfn, freed_order, 1);
	return false;
captured:
	/* the merged block is on no list: the buddies merged into it leave the counts
	 * (the freed frames join first, so no count dips below what it holds) */
	free_account(z, freed_pfn, freed_order, 1);
	free_account(z, pfn, order, -1);
	return true;
}

bool buddy_free_block(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	return free_one(z, pfn, order, false);
}

/*
 * The kernel's FPI_TO_TAIL: a stopped guest's dirty blocks are taken after the clean
 * ones (a start then zeroes nothing while clean blocks last), and rmqueue_smallest()
 * takes them before a released block at the head (zeroing costs less than a host
 * fault).
 */
bool buddy_free_block_cold(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	return free_one(z, pfn, order, true);
}

/* expand(): split a block of order high down to low, giving back the upper halves. */
static void expand(struct gfa_zone *z, uint64_t pfn, unsigned int low, unsigned int high,
		   unsigned int mt)
{
	while (high > low) {
		high--;
		buddy_list_link(z->pool, z, pfn + (1UL << high), high, mt,
				block_released(z, pfn + (1UL << high), high));
	}
}

/*
 * The block to take from list (o, mt): its head, or its tail when the head holds
 * released frames and the tail does not.  Released blocks sit at the tail, so a
 * populated tail is a cold block (buddy_free_block_cold), and zeroing it costs less
 * than faulting the released one in (docs/decisions.md, entry 9).
 */
static inline uint32_t list_pick(struct gfa_zone *z, const struct gfa_arena *a, unsigned int o,
				 unsigned int mt)
{
	const struct gfa_free_list *l = &a->area[o].list[mt];

	if (l->head != l->tail && block_released(z, l->head, o) && !block_released(z, l->tail, o))
		return l->tail;
	return l->head;
}

/* The halves stay counted as free frames; only the 2^order frames taken leave. */
static int64_t rmqueue_smallest(struct gfa_zone *z, const struct gfa_arena *a, unsigned int order,
				unsigned int mt)
{
	for (unsigned int o = order; o <= GFA_MAX_ORDER; o++) {
		uint32_t pfn = list_pick(z, a, o, mt);

		if (pfn == GFA_NIL)
			continue;
		/* list (o, mt) holds only free blocks of order o and type mt */
		GFA_BUG_ON(F(z, pfn)->order != o || F(z, pfn)->mt != mt);
		buddy_list_unlink(z->pool, z, pfn);
		expand(z, pfn, order, o, mt);
		free_account(z, pfn, order, -1);
		F(z, pfn)->order = (uint8_t)order;
		return pfn;
	}
	return -1;
}

static const unsigned int fallbacks[GFA_MT_PCPTYPES][2] = {
	[GFA_MT_UNMOVABLE] = { GFA_MT_RECLAIMABLE, GFA_MT_MOVABLE },
	[GFA_MT_MOVABLE] = { GFA_MT_RECLAIMABLE, GFA_MT_UNMOVABLE },
	[GFA_MT_RECLAIMABLE] = { GFA_MT_UNMOVABLE, GFA_MT_MOVABLE },
};

/*
 * can_steal_fallback: large requests, and unmovable/reclaimable ones of any size, take
 * the whole pageblock so unmovable allocations clump together instead of polluting
 * many movable pageblocks.
 */
static bool can_steal_fallback(unsigned int order, unsigned int start_mt)
{
	return order >= GFA_PAGEBLOCK_ORDER / 2 || start_mt == GFA_MT_RECLAIMABLE ||
	       start_mt == GFA_MT_UNMOVABLE;
}

static int find_suitable_fallback(const struct gfa_arena *a, unsigned int order,
				  unsigned int start_mt, bool *can_steal)
{
	for (int i = 0; i < 2; i++) {
		unsigned int fmt = fallbacks[start_mt][i];

		if (a->area[order].list[fmt].nr == 0)
			continue;
		*can_steal = can_steal_fallback(order, start_mt);
		return (int)fmt;
	}
	return -1;
}

/* End of the pageblock at start, or of the zone where its last pageblock is partial. */
static uint64_t pb_end_in_zone(const struct gfa_zone *z, uint64_t start)
{
	uint64_t zend = z->start_pfn + z->nr_frames;

	return start + GFA_PAGEBLOCK_FRAMES < zend ? start + GFA_PAGEBLOCK_FRAMES : zend;
}

uint64_t buddy_move_freepages_block(struct gfa_zone *z, uint64_t pb, unsigned int mt)
{
	uint64_t start = z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER);
	uint64_t end = pb_end_in_zone(z, start), moved = 0;
	uint64_t pfn = frame_find_head(z->pool, z, start);

	GFA_BUG_ON(!arena_lock_held(arena_of(z, start)));
	if (pfn == GFA_NIL)
		return 0;
	if (pfn < start) /* inside a larger block that starts in the previous pageblock */
		pfn = start + GFA_PAGEBLOCK_FRAMES;
	while (pfn < end) {
		struct gfa_frame *f = F(z, pfn);

		unsigned int st = fstate(f);

		if (st == GFA_FRAME_FREE && f->mt != mt) {
			unsigned int o = f->order;

			buddy_list_del(z->pool, z, pfn);
			buddy_list_add(z->pool, z, pfn, o, mt, block_released(z, pfn, o));
		}
		if (st == GFA_FRAME_FREE)
			moved += 1UL << f->order;
		pfn += 1UL << f->order;
	}
	return moved;
}

/* Allocated MOVABLE frames in a pageblock (the kernel's movable_pages count). */
static uint64_t pageblock_movable_frames(struct gfa_zone *z, uint64_t start)
{
	uint64_t pfn = start, n = 0, end = pb_end_in_zone(z, start);

	while (pfn < end) {
		struct gfa_frame *f = F(z, pfn);

		if (fstate(f) == GFA_FRAME_ALLOCATED && f->mt == GFA_MT_MOVABLE)
			n += 1UL << f->order;
		pfn += 1UL << f->order;
	}
	return n;
}

/*
 * steal_suitable_fallback (before Linux 6.10): steal the free block's pageblock for
 * start_mt when the block is a pageblock or more, or when free plus compatible frames
 * make up half of it.  A stealing request (whole_block) moves every free block of the
 * pageblock to start_mt's lists either way, as the kernel did before 6.10 (6.10+
 * moves them only when it claims the pageblock); one that does not steal moves only
 * the free block itself.
 */
static void steal_suitable_fallback(struct gfa_zone *z, uint64_t pfn, unsigned int start_mt,
				    bool whole_block)
{
	struct gfa_frame *f = F(z, pfn);
	unsigned int order = f->order, old_mt = pfn_pageblock(z, pfn)->mt;
	uint64_t pb_start = pfn & ~(GFA_PAGEBLOCK_FRAMES - 1), free_frames, alike;

	GFA_BUG_ON(fstate(f) != GFA_FRAME_FREE); /* a list head of another type */
	if (order >= GFA_PAGEBLOCK_ORDER) {
		arena_of(z, pfn)->vm.pageblock_steal += set_pageblocks_mt(z, pfn, order, start_mt);
		buddy_list_del(z->pool, z, pfn);
		buddy_list_add(z->pool, z, pfn, order, start_mt, block_released(z, pfn, order));
		return;
	}
	/* a partial last pageblock is never stolen (prep_move_freepages_block refuses) */
	if (!whole_block || pb_start + GFA_PAGEBLOCK_FRAMES > z->start_pfn + z->nr_frames) {
		buddy_list_del(z->pool, z, pfn);
		buddy_list_add(z->pool, z, pfn, order, start_mt, block_released(z, pfn, order));
		return;
	}
	free_frames = buddy_move_freepages_block(
		z, (pb_start - z->start_pfn) >> GFA_PAGEBLOCK_ORDER, start_mt);
	if (start_mt == GFA_MT_MOVABLE)
		alike = pageblock_movable_frames(z, pb_start);
	else if (old_mt == GFA_MT_MOVABLE)
		alike = GFA_PAGEBLOCK_FRAMES - free_frames - pageblock_movable_frames(z, pb_start);
	else
		alike = 0;
	if (free_frames + alike >= GFA_PAGEBLOCK_FRAMES / 2)
		arena_of(z, pb_start)->vm.pageblock_steal +=
			set_pageblocks_mt(z, pb_start, 0, start_mt);
}

static bool rmqueue_fallback(struct gfa_zone *z, const struct gfa_arena *a, unsigned int order,
			     unsigned int start_mt)
{
	bool can_steal = false;
	int fmt = -1;
	int o;

	/* Steal the largest block first so fewer pageblocks get mixed. */
	for (o = GFA_MAX_ORDER; o >= (int)order; o--) {
		fmt = find_suitable_fallback(a, (unsigned int)o, start_mt, &can_steal);
		if (fmt < 0)
			continue;
		/* A movable request that cannot steal the block splits the smallest one. */
		if (!can_steal && start_mt == GFA_MT_MOVABLE && o > (int)order) {
			for (o = (int)order; o <= GFA_MAX_ORDER; o++) {
				fmt = find_suitable_fallback(a, (unsigned int)o, start_mt,
							     &can_steal);
				if (fmt >= 0)
					break;
			}
		}
		break;
	}
	if (fmt < 0 || o > GFA_MAX_ORDER)
		return false;
	steal_suitable_fallback(z, a->area[o].list[fmt].head, start_mt, can_steal);
	return true;
}

int64_t buddy_rmqueue(struct gfa_zone *z, struct gfa_arena *a, unsigned int order, unsigned int mt,
		      bool nofallback)
{
	int64_t pfn;

	GFA_BUG_ON(!arena_lock_held(a));
	GFA_BUG_ON(order > GFA_MAX_ORDER || mt >= GFA_MT_PCPTYPES);
	for (;;) {
		pfn = rmqueue_smallest(z, a, order, mt);
		if (pfn >= 0) {
			release_clear(z, (uint64_t)pfn, 1UL << order);
			return pfn;
		}
		if (nofallback || !rmqueue_fallback(z, a, order, mt))
			return -1;
		a->vm.pgalloc_fallback++;
	}
}

/* The whole zone's rmqueue (zone lock), walking the arenas as arena_passes() says. */
int64_t zone_rmqueue(struct gfa_zone *z, unsigned int order, unsigned int mt, bool nofallback)
{
	unsigned int first = arena_here(z);

	GFA_BUG_ON(!zone_lock_held(z));
	for (int pass = 0; pass < arena_passes(nofallback); pass++)
		for (unsigned int i = 0; i < z->nr_arenas; i++) {
			int64_t pfn =
				buddy_rmqueue(z, arena_walk(z, first, i), order, mt, pass == 0);

			if (pfn >= 0)
				return pfn;
		}
	return -1;
}
