// SPDX-License-Identifier: MIT
/*
 * Per-vCPU frame caches: the kernel's per-cpu pages (mm/page_alloc.c) for vCPU threads.
 *
 * Lists per (order, migratetype) for orders 0..3 and the pageblock order, 15 in all.
 * Free inserts at the head, bulk free takes from the tail (oldest), refill appends
 * max(batch >> order, 2) blocks in one zone-lock section.  free_high (Linux 6.15's "mm:
 * pcp: increase pcp->free_count threshold to trigger free_high") flushes high-order
 * frames when a cache keeps freeing without allocating (docs/decisions.md, entry 22).
 *
 * Exclusion: the holder protocol of allocator/pcp.h (plain stores on the owner's side,
 * membarrier on the rare remote side).  Remote drainers (compaction, shutdown, idle
 * drain, statistics, the checker) hold the cache remotely; its owner waits for them.
 * Lock order: pool->pcp_lock -> remote hold of a cache -> zone lock.
 * Sizing and auto-tuning of high: allocator/pcp_tune.c; the checks: allocator/check.c.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "allocator/pcp.h"

static inline int order_to_pindex(unsigned int mt, unsigned int order)
{
	unsigned int base = order <= PCP_COSTLY_ORDER ? order : PCP_COSTLY_ORDER + 1;

	return (int)(GFA_MT_PCPTYPES * base + mt);
}

PCP_HOT bool pcp_order_cached(const struct gfa_pcp *pcp, unsigned int order)
{
	return order < PCP_ORDER_SLOTS && pcp->slots[order].base >= 0;
}

/* ---- lists (inside the owner's call, or held remotely) ---- */

#define PLIST_FIRST_RING 64

/* Double the ring (the first one: PLIST_FIRST_RING entries), keeping the order.  0 or -ENOMEM. */
static __attribute__((noinline)) int plist_grow(struct pcp_list *l)
{
	uint32_t cap = l->ring ? (l->mask + 1) * 2 : PLIST_FIRST_RING, nr = plist_nr(l);
	uint32_t *ring = calloc(cap, sizeof(*ring));

	if (!ring || (l->ring && cap <= l->mask + 1))
		goto fail;
	/* same free-running indices in the larger ring: top and bottom stay as they are */
	for (uint32_t i = 0; l->ring && i < nr; i++)
		ring[(l->bottom + i) & (cap - 1)] = l->ring[(l->bottom + i) & l->mask];
	free(l->ring);
	l->ring = ring;
	__atomic_store_n(&l->mask, cap - 1, __ATOMIC_RELAXED);
	return 0;
fail:
	free(ring);
	return -ENOMEM;
}

/* Room for n more blocks.  0 or -ENOMEM (then the list holds what it held). */
static int plist_reserve(struct pcp_list *l, uint32_t n)
{
	while (plist_nr(l) + n > l->mask + 1)
		if (plist_grow(l))
			return -ENOMEM;
	return 0;
}

/*
 * The owner moves top and bottom with relaxed atomic stores (plain moves on x86) so
 * statistics may read list lengths without holding the cache (plist_nr_racy).
 */
PCP_HOT void plist_push_top(struct pcp_list *l, uint32_t pfn)
{
	uint32_t top = l->top;

	GFA_BUG_ON(plist_nr(l) > l->mask); /* room was reserved before the push */
	l->ring[top & l->mask] = pfn;
	__atomic_store_n(&l->top, top + 1, __ATOMIC_RELAXED);
}

PCP_HOT bool plist_empty(const struct pcp_list *l)
{
	return l->top == l->bottom;
}

PCP_HOT bool plist_full(const struct pcp_list *l)
{
	return plist_nr(l) > l->mask;
}

PCP_HOT uint32_t plist_pop_top(struct pcp_list *l)
{
	uint32_t top = l->top - 1;
	uint32_t pfn = l->ring[top & l->mask];

	GFA_BUG_ON(!plist_nr(l)); /* callers pop non-empty lists only */

	__atomic_store_n(&l->top, top, __ATOMIC_RELAXED);
	return pfn;
}

PCP_HOT uint32_t plist_pop_bottom(struct pcp_list *l)
{
	uint32_t bottom = l->bottom;
	uint32_t pfn = l->ring[bottom & l->mask];

	GFA_BUG_ON(!plist_nr(l));

	__atomic_store_n(&l->bottom, bottom + 1, __ATOMIC_RELAXED);
	return pfn;
}

PCP_HOT void plist_push_bottom(struct pcp_list *l, uint32_t pfn)
{
	uint32_t bottom = l->bottom - 1;

	GFA_BUG_ON(plist_nr(l) > l->mask);
	l->ring[bottom & l->mask] = pfn;
	__atomic_store_n(&l->bottom, bottom, __ATOMIC_RELAXED);
}

/*
 * A list's length read from another thread while its owner may be changing it: a
 * snapshot for statistics, clamped to the ring (two loads may straddle owner updates).
 */
static uint32_t plist_nr_racy(const struct pcp_list *l)
{
	uint32_t top = __atomic_load_n(&l->top, __ATOMIC_RELAXED);
	uint32_t bottom = __atomic_load_n(&l->bottom, __ATOMIC_RELAXED);
	uint32_t mask = __atomic_load_n(&l->mask, __ATOMIC_RELAXED);

	return top - bottom <= mask + 1 ? top - bottom : 0;
}

/*
 * A cache's batches with the zone take the lock of the arena they work in (decisions
 * 38), or the zone lock in a held pool, whose deferred sections are the zone lock's.
 * arena_switch() moves a batch from the arena it holds (NULL: none) to a.
 */
static struct gfa_arena *arena_switch(struct gfa_arena *held, struct gfa_arena *a)
{
	if (held == a)
		return a;
	if (held)
		pthread_mutex_unlock(&held->lock);
	if (a)
		pthread_mutex_lock(&a->lock);
	return a;
}

static struct gfa_arena *batch_begin(struct gfa_zone *z)
{
	if (z->deferred)
		zone_lock(z);
	return NULL;
}

static void batch_end(struct gfa_zone *z, struct gfa_arena *held)
{
	if (z->deferred)
		zone_unlock(z);
	else
		arena_switch(held, NULL);
}

/* The lock a batch needs for arena a: none more in a held pool (it has the zone's). */
static struct gfa_arena *batch_in(struct gfa_zone *z, struct gfa_arena *held, struct gfa_arena *a)
{
	return z->deferred ? held : arena_switch(held, a);
}

static struct gfa_arena *batch_at(struct gfa_zone *z, struct gfa_arena *held, uint64_t pfn)
{
	return batch_in(z, held, arena_of(z, pfn));
}

/* One block back to the lists of its arena. */
static void pcp_return_one(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	struct gfa_arena *held = batch_at(z, batch_begin(z), pfn);

	zone_return_locked(z, pfn, order);
	batch_end(z, held);
}

/*
 * free_pcppages_bulk(): free `count` frames to the zone in one lock section (one per
 * arena the frames go to).  The list
 * that overflowed (pindex) goes first and alone if it holds enough; then the others
 * upward with wrap-around, the [min, max] window shrinking past empty edge lists.
 * count is clamped to pcp->count, else the search below could never end.
 */
int pcp_free_bulk(struct gfa_pcp *pcp, int count, int pindex)
{
	struct gfa_zone *z = pcp->zone;
	int min_pindex = 0, max_pindex = NR_PCP_LISTS - 1, freed = 0;
	struct gfa_arena *held;

	if (count > pcp->count)
		count = pcp->count;
	if (count <= 0)
		return 0;
	pindex = pindex - 1;
	held = batch_begin(z);
	while (count > 0) {
		struct pcp_list *l;
		unsigned int order;

		for (;;) {
			if (++pindex > max_pindex)
				pindex = min_pindex;
			l = &pcp->lists[pindex];
			if (plist_nr(l))
				break;
			if (pindex == max_pindex)
				max_pindex--;
			if (pindex == min_pindex)
				min_pindex++;
		}
		order = pindex_to_order(pindex);
		do {
			uint64_t pfn = plist_pop_bottom(l);

			GFA_BUG_ON(pcp_frame(pcp, pfn)->order != order); /* its list's order */
			count -= 1 << order;
			pcp->count -= 1 << order;
			freed += 1 << order;
			GFA_BUG_ON(pcp->count < 0); /* count is the sum of the lists */
			GFA_BUG_ON(fstate(pcp_frame(pcp, pfn)) != GFA_FRAME_PCP);
			held = batch_at(z, held, pfn);
			zone_return_locked(z, pfn, order);
		} while (count > 0 && plist_nr(l));
	}
	batch_end(z, held);
	pcp->vs.pcp_bulkfree++;
	return freed;
}

/*
 * rmqueue_bulk(): take up to n blocks of one order and type in one lock section per
 * arena, appended at the tail so the list keeps its oldest-last order; the arenas
 * walked as arena_passes() says, a held pool's under the zone lock.
 */
static int pcp_refill(struct gfa_pcp *pcp, int pindex, unsigned int order, unsigned int mt, int n,
		      unsigned int flags)
{
	struct gfa_zone *z = pcp->zone;
	struct pcp_list *l = &pcp->lists[pindex];
	unsigned int first = arena_here(z);
	int got = 0;
	struct gfa_arena *held;

	GFA_BUG_ON(pindex_to_order(pindex) != order || mt >= GFA_MT_PCPTYPES);
	/* the ring grows outside the zone lock; without memory, refill what fits */
	while (n > 0 && plist_reserve(l, (uint32_t)n))
		n >>= 1;
	held = batch_begin(z);
	for (int pass = 0; pass < arena_passes(flags & GFA_ALLOC_NOFALLBACK) && got < n; pass++)
		for (unsigned int i = 0; i < z->nr_arenas && got < n; i++) {
			struct gfa_arena *a = arena_walk(z, first, i);

			held = batch_in(z, held, a);
			/* a claim made since the caller looked: free frames are the zone
			 * path's to give (claims change under every arena lock) */
			if (__atomic_load_n(&z->nr_claims, __ATOMIC_RELAXED))
				n = 0;
			for (; got < n; got++) {
				int64_t pfn = buddy_rmqueue(z, a, order, mt, pass == 0);
				struct gfa_frame *f;

				if (pfn < 0)
					break;
				f = pfn_to_frame(pcp->pool, pfn);
				GFA_BUG_ON(fstate(f) != GFA_FRAME_FREE); /* just off a list */
				f->mt = (uint8_t)mt;
				fstate_set(f, GFA_FRAME_PCP);
				plist_push_bottom(l, (uint32_t)pfn);
				pcp->count += 1 << order;
			}
		}
	batch_end(z, held);
	pcp->vs.pcp_refill += got != 0; /* batches taken, not attempts */
	return got;
}

/*
 * The per-order table of the hot paths: every valid order (up to GFA_MAX_ORDER, no larger
 * than the zone) gets its offsets, so pcp_block_in_zone() is the whole argument check of
 * a free in the cache's zone; the cached ones get their list row too.
 */
static void pcp_slots_init(struct gfa_pcp *pcp, const struct gfa_zone *z)
{
	for (unsigned int o = 0; o < PCP_ORDER_SLOTS; o++) {
		struct pcp_slot *sl = &pcp->slots[o];
		bool fits = o <= GFA_MAX_ORDER && (1UL << o) <= z->nr_frames;
		bool kept = fits && (o <= PCP_COSTLY_ORDER || o == GFA_PAGEBLOCK_ORDER) &&
			    (!o || !pcp->no_high_order);

		sl->base = (int16_t)(kept ? order_to_pindex(0, o) : -1);
		sl->mask = (1U << o) - 1;
		sl->nr_offs = fits ? z->nr_frames - (1UL << o) + 1 : 0;
	}
}

/* ---- claims: the zone path for allocations while a zone has any ---- */

/* With pool->pcp_lock held (claims change under it too). */
static void pcp_claims_changed_one(struct gfa_pcp *pcp)
{
	bool claims = __atomic_load_n(&pcp->zone->nr_claims, __ATOMIC_RELAXED);

	for (unsigned int o = 0; o < PCP_ORDER_SLOTS; o++)
		atomic_store_explicit(&pcp->alloc_base[o],
				      claims ? (int8_t)-1 : (int8_t)pcp->slots[o].base,
				      memory_order_relaxed);
}

void pcp_claims_changed(struct gfa_zone *z)
{
	for (struct gfa_pcp *pcp = z->pool->pcps; pcp; pcp = pcp->next)
		if (pcp->zone == z)
			pcp_claims_changed_one(pcp);
}

struct gfa_pcp *gfa_pcp_create(struct gfa_pool *pool, unsigned int zone)
{
	struct gfa_pcp *pcp;
	struct gfa_zone *z;

	if (!pool) {
		errno = EFAULT;
		return NULL;
	}
	if (zone >= pool->nr_zones) {
		pool_count_err(pool, GFA_ERANGE);
		errno = ERANGE;
		return NULL;
	}
	pcp = aligned_alloc(64, (sizeof(*pcp) + 63) & ~63UL);
	if (!pcp) {
		errno = ENOMEM;
		return NULL;
	}
	memset(pcp, 0, sizeof(*pcp));
	/* every list has a ring from the start: the hot paths never test for none */
	for (int i = 0; i < NR_PCP_LISTS; i++) {
		if (plist_grow(&pcp->lists[i])) {
			while (i--)
				free(pcp->lists[i].ring);
			free(pcp);
			errno = ENOMEM;
			return NULL;
		}
	}
	z = &pool->zones[zone];
	pcp->pool = pool;
	pcp->zone = z;
	pcp_tune_init(pcp, z);
	pcp->no_high_order = pool->cfg.pcp_no_high_order;
	pcp_slots_init(pcp, z);
	pcp->frame_map = pool->frame_map;
	pcp->zone_start = z->start_pfn;
	pcp->zone_frames = z->nr_frames;
	pcp->pageblocks = z->pageblocks;
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_claims_changed_one(pcp);
	/* the gate changes under pcp_lock: a cache born while it is up starts with it up */
	atomic_store_explicit(&pcp->cas_free,
			      (int)pool->cfg.pcp_free_strict +
				      atomic_load_explicit(&z->isolating, memory_order_relaxed),
			      memory_order_relaxed);
	pcp->next = pool->pcps;
	pool->pcps = pcp;
	pthread_mutex_unlock(&pool->pcp_lock);
	return pcp;
}

/*
 * Add a cache's counters to dst (held remotely or dying).  The hot paths count an
 * allocation only in alloc_order[] and a free only in free_order[]; pcp_alloc/free,
 * pgalloc/pgfree (frames) and their _blocks follow from them here instead of costing
 * three more adds per call.  Like the kernel's PGALLOC/PGFREE these count what callers
 * allocate and free; refills and drains between a cache and the zone are neither.
 */
static void pcp_add_counters(const struct gfa_pcp *pcp, struct gfa_vmstat *dst)
{
	uint64_t *d = (uint64_t *)dst;
	const uint64_t *src = (const uint64_t *)&pcp->vs;
	uint64_t n = pcp_nr_alloc(pcp), m = pcp_nr_free(pcp);

	for (size_t k = 0; k < sizeof(pcp->vs) / sizeof(uint64_t); k++)
		d[k] += src[k];
	dst->pcp_alloc += n;
	dst->pgalloc_blocks += n;
	dst->pcp_free += m;
	dst->pgfree_blocks += m;
	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++) {
		dst->pgalloc += pcp->vs.alloc_order[o] << o;
		dst->pgfree += pcp->vs.free_order[o] << o;
	}
}

static void pcp_fold_counters(struct gfa_pcp *pcp)
{
	struct gfa_zone *z = pcp->zone;

	zone_lock(z);
	pcp_add_counters(pcp, &z->c.vm);
	zone_unlock(z);
	memset(&pcp->vs, 0, sizeof(pcp->vs));
}

void gfa_pcp_destroy(struct gfa_pcp *pcp)
{
	struct gfa_pool *pool;

	if (!pcp)
		return;
	pool = pcp->pool;
	pthread_mutex_lock(&pool->pcp_lock);
	for (struct gfa_pcp **pp = &pool->pcps; *pp; pp = &(*pp)->next) {
		if (*pp == pcp) {
			*pp = pcp->next;
			break;
		}
	}
	pcp_remote_lock(pcp);
	pcp_free_bulk(pcp, pcp->count, 0);
	pcp_fold_counters(pcp);
	pcp_remote_unlock(pcp);
	pthread_mutex_unlock(&pool->pcp_lock);
	for (int i = 0; i < NR_PCP_LISTS; i++)
		free(pcp->lists[i].ring);
	free(pcp);
}

/*
 * A block popped from a list goes to its owner: frame_mark_allocated() in line, the
 * owner cookie before the release of the state, and the one counter an allocation costs.
 * Only stores to the descriptor: the block's type is already the list's (list mt holds
 * only blocks of type mt, checked by gfa_pool_check), so the call never waits for its line.
 */
PCP_HOT void pcp_mark_allocated(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order,
				uint64_t owner)
{
	struct gfa_frame *f = pcp_frame(pcp, pfn);

	/* a cached block goes PCP -> ALLOCATED, and count is the sum of the lists */
	GFA_BUG_ON(fstate(f) != GFA_FRAME_PCP || f->order != order);
	GFA_BUG_ON(pcp->count < (1 << order));
	pcp->count -= 1 << order;
	frame_set_owner(f, owner);
	fstate_set(f, GFA_FRAME_ALLOCATED);
	pcp->vs.alloc_order[order]++;
}

/*
 * Everything gfa_pcp_alloc()'s fast path does not take: no record yet, another owner,
 * a remote holder, an empty list (refill), orders or types the cache does not keep,
 * claims on the zone, bad arguments.
 */
static __attribute__((noinline)) int64_t pcp_alloc_slow(struct gfa_pcp *pcp, unsigned int order,
							enum gfa_migratetype mt, uint64_t owner,
							unsigned int flags)
{
	struct pcp_list *l;
	uint64_t pfn;
	int pindex, err;

	if (unlikely(!pcp))
		return GFA_EFAULT;
	/* claims are decided per owner under the zone lock: zone path while any exist */
	if (unlikely((unsigned int)mt >= GFA_MT_PCPTYPES || !pcp_order_cached(pcp, order) ||
		     __atomic_load_n(&pcp->zone->nr_claims, __ATOMIC_RELAXED)))
		return gfa_alloc(pcp->pool, pcp->zone->id, order, mt, owner, flags);
	err = pcp_enter(pcp);
	if (unlikely(err))
		return err;
	pcp->free_count >>= 1;
	pindex = order_to_pindex(mt, order);
	l = &pcp->lists[pindex];
	if (unlikely(plist_empty(l)) &&
	    !pcp_refill(pcp, pindex, order, mt, pcp_refill_count(pcp, order), flags)) {
		/* slow path outside our call: it drains caches, ours included, and compacts */
		pcp_exit();
		if (__atomic_load_n(&pcp->zone->nr_claims, __ATOMIC_RELAXED))
			return gfa_alloc(pcp->pool, pcp->zone->id, order, mt, owner, flags);
		return zone_alloc_slow(pcp->zone, order, mt, owner, flags);
	}
	pfn = plist_pop_top(l);
	pcp_mark_allocated(pcp, pfn, order, owner);
	pcp_exit();
	return (int64_t)pfn;
}

/*
 * The hot path: a block from a non-empty list, nothing else.  Tail calls to
 * pcp_alloc_slow() with the caller's own arguments keep the slow cases' code out of
 * it (it still saves one register; bench/pcp_insns holds it to its instruction budget).
 */
int64_t gfa_pcp_alloc(struct gfa_pcp *pcp, unsigned int order, enum gfa_migratetype mt,
		      uint64_t owner, unsigned int flags)
{
	struct pcp_thread *me = pcp_self;
	struct pcp_list *l;
	uint32_t pfn;
	int base;

	if (unlikely(!pcp || order >= PCP_ORDER_SLOTS || (unsigned int)mt >= GFA_MT_PCPTYPES))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	base = atomic_load_explicit(&pcp->alloc_base[order], memory_order_relaxed);
	if (unlikely(base < 0))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	if (unlikely(!pcp_enter_fast(pcp, me)))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	l = &pcp->lists[base + (int)mt];
	if (unlikely(plist_empty(l))) {
		pcp_exit_fast(me);
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	}
	pfn = plist_pop_top(l);
	pcp->free_count >>= 1;
	pcp_mark_allocated(pcp, pfn, order, owner);
	pcp_exit_fast(me);
	return (int64_t)pfn;
}

/* free_unref_page_commit(): send back what pcp_free_nr() says, this list first. */
static __attribute__((noinline)) void pcp_free_commit_slow(struct gfa_pcp *pcp, int pindex,
							   unsigned int order)
{
	int nr = pcp_free_nr(pcp, order);

	if (nr)
		pcp_free_bulk(pcp, nr, pindex);
}

/*
 * A high-order free into an empty cache when free_high fires: the kernel would add the
 * block and flush min(count, cap) = everything, i.e. just this block, at once.  Do the
 * same without the round trip through the list.  False (nothing done) otherwise.
 */
static bool pcp_free_high_direct(struct gfa_pcp *pcp, struct gfa_zone *z, uint64_t pfn,
				 unsigned int order)
{
	if (pcp->count || !pcp_free_high_fires(pcp, order, 1 << order))
		return false;
	pcp_free_high_update(pcp, order, 1 << order);
	pcp_return_one(z, pfn, order);
	pcp->vs.free_order[order]++;
	pcp->vs.pcp_free_high++;
	pcp->vs.pcp_bulkfree++;
	return true;
}

/*
 * A begun block (state PCP) onto the head of its list l, which has room, then the
 * free_high/high bookkeeping.  The common order-0 case below high stays in line: order 0
 * never fires free_high, so it only ends the high-order streak and grows free_count;
 * everything else goes to pcp_free_commit_slow(), which does all of it.
 */
PCP_HOT void pcp_push_commit(struct gfa_pcp *pcp, struct pcp_list *l, uint64_t pfn,
			     unsigned int order, int pindex)
{
	GFA_BUG_ON(fstate(pcp_frame(pcp, pfn)) != GFA_FRAME_PCP); /* begun: ALLOCATED -> PCP */
	plist_push_top(l, (uint32_t)pfn);
	pcp->count += 1 << order;
	pcp->vs.free_order[order]++;
	if (likely(order == 0 && pcp->count < pcp->high)) {
		pcp->prev_free_high = false;
		if (pcp->free_count < pcp->free_count_cap)
			pcp->free_count++;
	} else {
		pcp_free_commit_slow(pcp, pindex, order);
	}
}

/*
 * A begun block joins the cache: straight to the zone when free_high would flush it
 * at once, or when its list cannot grow; else onto its list.
 */
static __attribute__((noinline)) void pcp_free_begun(struct gfa_pcp *pcp, uint64_t pfn,
						     unsigned int order)
{
	struct gfa_zone *z = pcp->zone;
	struct pcp_list *l;
	int pindex;

	if (order && pcp_free_high_direct(pcp, z, pfn, order))
		return;
	pindex = order_to_pindex(pcp_frame(pcp, pfn)->mt, order);
	l = &pcp->lists[pindex];
	if (unlikely(plist_full(l)) && plist_grow(l)) {
		/* no memory for a longer list: this block goes to the zone, begun already */
		pcp_return_one(z, pfn, order);
		pcp->vs.free_order[order]++;
		return;
	}
	pcp_push_commit(pcp, l, pfn, order, pindex);
}

/*
 * free_args() for the cache's own zone, from the per-order table: a block of a valid
 * order, aligned, wholly inside the zone.  Anything else (another zone, bad arguments)
 * takes the full check, which also picks the error.  No pfn + size: it wraps for pfns
 * near 2^64 and would pass; off wraps for pfns below the zone, and fails.
 */
PCP_HOT bool pcp_block_in_zone(const struct gfa_pcp *pcp, uint64_t pfn, unsigned int order)
{
	return order < PCP_ORDER_SLOTS && pfn - pcp->zone_start < pcp->slots[order].nr_offs &&
	       !(pfn & pcp->slots[order].mask);
}

/* Is the block at f the head of an allocation of this order by this owner? */
PCP_HOT bool pcp_frame_freeable(const struct gfa_frame *f, unsigned int order, uint64_t owner)
{
	return fstate(f) == GFA_FRAME_ALLOCATED && f->order == order && frame_owner(f) == owner;
}

/*
 * The begin of a free in its common case: the head is ALLOCATED with this order and
 * owner, nobody isolates blocks of this zone (the gate of pcp_holder.c is down) and the
 * pool is not strict.  Then no other thread may change this frame's state, and a plain
 * release store moves it to PCP.  False (nothing done) otherwise.
 */
PCP_HOT bool pcp_begin_free_plain(struct gfa_pcp *pcp, struct gfa_frame *f, unsigned int order,
				  uint64_t owner)
{
	if (!pcp_frame_freeable(f, order, owner) ||
	    atomic_load_explicit(&pcp->cas_free, memory_order_acquire))
		return false;
	fstate_set(f, GFA_FRAME_PCP);
	return true;
}

/*
 * frame_begin_free() for a cache: the plain case in line; with the gate up (or a strict
 * pool) a compare-and-swap decides against compaction's isolation or a racing free;
 * anything else re-runs the full version, which classifies the error.
 */
PCP_HOT int pcp_begin_free(struct gfa_pcp *pcp, struct gfa_zone *z, uint64_t pfn,
			   unsigned int order, uint64_t owner)
{
	struct gfa_frame *f = pcp_frame(pcp, pfn);

	if (likely(pcp_begin_free_plain(pcp, f, order, owner)))
		return 0;
	if (pcp_frame_freeable(f, order, owner) &&
	    fstate_cas(f, GFA_FRAME_ALLOCATED, GFA_FRAME_PCP))
		return 0;
	return frame_begin_free(pcp->pool, z, pfn, order, owner, GFA_FRAME_PCP);
}

/* One free inside an entered call, every case (gfa_pcp_free_many, the slow free). */
static int pcp_free_one(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner)
{
	struct gfa_pool *pool = pcp->pool;
	struct gfa_zone *z = pcp->zone;
	int err;

	if (unlikely(!pcp_block_in_zone(pcp, pfn, order))) {
		err = free_args(pool, pfn, order, &z);
		if (err)
			goto fail;
	}
	if (unlikely(z != pcp->zone || !pcp_order_cached(pcp, order)))
		return gfa_free(pool, pfn, order, owner);
	err = pcp_begin_free(pcp, z, pfn, order, owner);
	if (unlikely(err))
		goto fail;
	pcp_free_begun(pcp, pfn, order);
	return 0;
fail:
	pool_count_err(pool, err);
	return err;
}

/*
 * The fast path's tail for the rarer cases, which then leaves the call: as a tail call
 * it keeps their code out of the fast path (which still saves one register: the
 * compiler pushes %rbx in gfa_pcp_free).
 */
static __attribute__((noinline)) int pcp_free_begun_exit(struct gfa_pcp *pcp, uint64_t pfn,
							 unsigned int order, struct pcp_thread *me)
{
	pcp_free_begun(pcp, pfn, order);
	pcp_exit_fast(me);
	return 0;
}

static __attribute__((noinline)) int pcp_free_slow(struct gfa_pcp *pcp, uint64_t pfn,
						   unsigned int order, uint64_t owner)
{
	struct gfa_zone *z;
	int err;

	/* arguments wrong in themselves fail before the call takes the cache over */
	if (pcp && !pcp_block_in_zone(pcp, pfn, order)) {
		err = free_args(pcp->pool, pfn, order, &z);
		if (err) {
			pool_count_err(pcp->pool, err);
			return err;
		}
	}
	err = pcp_enter(pcp);
	if (err)
		return err;
	err = pcp_free_one(pcp, pfn, order, owner);
	pcp_exit();
	return err;
}

/*
 * The hot path: an order-0 block of the cache's zone back onto its list; higher cached
 * orders after the same checks go through pcp_free_begun().  Anything unusual (gate up,
 * a bad or foreign block, not entered) leaves the call untouched and takes
 * pcp_free_slow(), which decides and counts the error.
 */
int gfa_pcp_free(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner)
{
	struct pcp_thread *me = pcp_self;
	struct gfa_frame *f;
	struct pcp_list *l;
	unsigned int mt;
	int pindex;

	if (unlikely(!pcp || !pcp_block_in_zone(pcp, pfn, order) || pcp->slots[order].base < 0))
		return pcp_free_slow(pcp, pfn, order, owner);
	if (unlikely(!pcp_enter_fast(pcp, me)))
		return pcp_free_slow(pcp, pfn, order, owner);
	/*
	 * The list is the block's own type (f->mt).  Guess it from the pageblock's type,
	 * as the kernel picks its pcp list, so the list's line is on its way while the
	 * descriptor's is; a wrong guess (a block of another type than its pageblock)
	 * takes the general path.
	 */
	mt = __atomic_load_n(&pcp->pageblocks[(pfn - pcp->zone_start) >> GFA_PAGEBLOCK_ORDER].mt,
			     __ATOMIC_RELAXED);
	pindex = pcp->slots[order].base + (int)mt;
	l = &pcp->lists[pindex];
	f = pcp_frame(pcp, pfn);
	if (unlikely(!pcp_begin_free_plain(pcp, f, order, owner))) {
		pcp_exit_fast(me);
		return pcp_free_slow(pcp, pfn, order, owner);
	}
	if (unlikely(order || f->mt != mt || plist_full(l)))
		return pcp_free_begun_exit(pcp, pfn, order, me);
	pcp_push_commit(pcp, l, pfn, 0, pindex);
	pcp_exit_fast(me);
	return 0;
}

int gfa_pcp_free_many(struct gfa_pcp *pcp, const uint64_t *pfns, size_t n, unsigned int order,
		      uint64_t owner)
{
	int err;
	size_t i;

	if (!pfns || n > INT_MAX) {
		if (pcp)
			pool_count_err(pcp->pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	err = pcp_enter(pcp);
	if (err)
		return err;
	pcp->flags |= PCPF_FREE_HIGH_BATCH;
	for (i = 0; i < n; i++) {
		err = pcp_free_one(pcp, pfns[i], order, owner);
		if (err)
			break;
	}
	pcp->flags &= ~PCPF_FREE_HIGH_BATCH;
	pcp_exit();
	/* as write(2): what was freed, if anything; the error (counted) only otherwise */
	return i ? (int)i : err;
}

int gfa_pcp_drain(struct gfa_pcp *pcp)
{
	int err;

	err = pcp_enter(pcp);
	if (err)
		return err;
	err = pcp_free_bulk(pcp, pcp->count, 0);
	pcp->vs.pcp_drain += err != 0; /* as drain_all: caches that gave frames */
	pcp_exit();
	return err;
}

int gfa_pcp_drain_partial(struct gfa_pcp *pcp)
{
	int err;

	err = pcp_enter(pcp);
	if (err)
		return err;
	err = pcp_free_bulk(pcp, pcp->count < pcp->batch ? pcp->count : pcp->batch, 0);
	pcp_exit();
	return err;
}

int64_t gfa_pool_drain_all(struct gfa_pool *pool, int zone)
{
	int64_t n = 0;

	if (!pool)
		return GFA_EFAULT;
	if (zone >= (int)pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_remote_lock_zone(pool, zone);
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		if (zone >= 0 && pcp->zone->id != (unsigned int)zone)
			continue;
		if (pcp->count) {
			n += pcp_free_bulk(pcp, pcp->count, 0);
			pcp->vs.pcp_drain++;
		}
	}
	pcp_remote_unlock_zone(pool, zone);
	pthread_mutex_unlock(&pool->pcp_lock);
	return n;
}

int gfa_pcp_stat(struct gfa_pcp *pcp, struct gfa_pcp_stat *st)
{
	if (!pcp || !st) {
		if (pcp) /* counted where the pool is known */
			pool_count_err(pcp->pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	memset(st, 0, sizeof(*st));
	pcp_remote_lock(pcp);
	st->zone = pcp->zone->id;
	st->count = pcp->count;
	st->batch = pcp->batch;
	st->high = pcp->high;
	st->high_min = pcp->high_min;
	st->high_max = pcp->high_max;
	st->free_count = pcp->free_count;
	st->free_high_threshold = pcp->free_high_threshold;
	for (int i = 0; i < NR_PCP_LISTS; i++)
		st->nr_blocks[pindex_to_order(i)] += (int)plist_nr(&pcp->lists[i]);
	pcp_remote_unlock(pcp);
	return 0;
}

/* ---- pool-wide readers ---- */

void pcp_lock_all(struct gfa_pool *pool)
{
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_remote_lock_zone(pool, -1);
}

void pcp_unlock_all(struct gfa_pool *pool)
{
	pcp_remote_unlock_zone(pool, -1);
	pthread_mutex_unlock(&pool->pcp_lock);
}

/*
 * Cached blocks per order for zone statistics, read without holding the caches: the
 * host-return policy asks every pass, and a remote hold would cost every running vCPU
 * an IPI (membarrier).  A snapshot while owners run, exact when they are quiet;
 * pool->pcp_lock keeps the caches from being destroyed meanwhile.
 */
void pcp_stat_blocks_locked(struct gfa_pool *pool, unsigned int zone, uint64_t *blocks)
{
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		if (pcp->zone->id != zone)
			continue;
		for (int i = 0; i < NR_PCP_LISTS; i++)
			blocks[pindex_to_order(i)] += plist_nr_racy(&pcp->lists[i]);
	}
}

int gfa_pcp_zone(const struct gfa_pcp *pcp)
{
	return pcp ? (int)pcp->zone->id : GFA_EFAULT;
}

struct gfa_pool *gfa_pcp_pool(const struct gfa_pcp *pcp)
{
	return pcp ? pcp->pool : NULL;
}

void pcp_add_vmstat_zone(struct gfa_pool *pool, int zone, struct gfa_vmstat *vs)
{
	pcp_remote_lock_zone(pool, zone);
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next)
		if (zone < 0 || pcp->zone->id == (unsigned int)zone)
			pcp_add_counters(pcp, vs);
	pcp_remote_unlock_zone(pool, zone);
}

uint64_t pcp_zone_frames(struct gfa_pool *pool, struct gfa_zone *z)
{
	uint64_t n = 0;

	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next)
		if (pcp->zone == z)
			n += (uint64_t)pcp->count;
	return n;
}
