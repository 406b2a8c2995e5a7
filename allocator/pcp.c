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
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "allocator/pcp.h"

#define PCP_BATCH_SCALE_MAX 5

#define PCPF_FREE_HIGH_BATCH      0x2u

static inline int order_to_pindex(unsigned int mt, unsigned int order)
{
	unsigned int base = order <= PCP_COSTLY_ORDER ? order : PCP_COSTLY_ORDER + 1;

	return (int)(GFA_MT_PCPTYPES * base + mt);
}

static inline unsigned int pindex_to_order(int pindex)
{
	unsigned int order = (unsigned int)pindex / GFA_MT_PCPTYPES;

	return order > PCP_COSTLY_ORDER ? GFA_PAGEBLOCK_ORDER : order;
}

PCP_HOT bool pcp_order_cached(const struct gfa_pcp *pcp, unsigned int order)
{
	return order < PCP_ORDER_SLOTS && pcp->slots[order].base >= 0;
}

static unsigned int rounddown_pow2(unsigned int x)
{
	unsigned int r = 1;

	while (r * 2 <= x)
		r *= 2;
	return r;
}

/*
 * zone_batchsize(): a quarter of a thousandth of the zone, at most 1 MiB worth, then
 * rounded to 2^n - 1 to avoid cache aliasing between batches (63 on large zones).
 * high_min is at least 4 batches; it also holds two pageblocks so order-9 blocks can
 * be cached at all (the kernel's high is in the thousands on large machines).
 */
void pcp_zone_init(struct gfa_pool *pool, struct gfa_zone *z)
{
	const struct gfa_pool_config *cfg = &pool->cfg;
	unsigned int batch = (unsigned int)((z->nr_frames >> 10) < 256 ? z->nr_frames >> 10 : 256) / 4;
	uint64_t high;

	if (batch < 1)
		batch = 1;
	batch = rounddown_pow2(batch + batch / 2) - 1;
	if (batch < 1)
		batch = 1;
	if (cfg->pcp_batch)
		batch = cfg->pcp_batch;
	high = batch << 2;
	if (high < 2 * GFA_PAGEBLOCK_FRAMES && z->nr_frames >= 32 * GFA_PAGEBLOCK_FRAMES)
		high = 2 * GFA_PAGEBLOCK_FRAMES;
	if (cfg->pcp_high)
		high = cfg->pcp_high;
	z->pcp_batch = (int)batch;
	z->pcp_high_min = (int)high;
	z->pcp_high_max = cfg->pcp_high_max ? (int)cfg->pcp_high_max : (int)(high * 8);
	/* high below a batch is the kernel's disabled pcp: no auto-tuning lifts it */
	if (z->pcp_high_max < z->pcp_high_min || high < batch)
		z->pcp_high_max = z->pcp_high_min;
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

	GFA_BUG_ON(plist_nr(l) > l->mask);      /* room was reserved before the push */
	l->ring[top & l->mask] = pfn;
	__atomic_store_n(&l->top, top + 1, __ATOMIC_RELAXED);
}

PCP_HOT uint32_t plist_pop_top(struct pcp_list *l)
{
	uint32_t top = l->top - 1;
	uint32_t pfn = l->ring[top & l->mask];

	GFA_BUG_ON(!plist_nr(l));               /* callers pop non-empty lists only */

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

/* The list's i-th block from the oldest (checker and statistics). */
static uint32_t plist_at(const struct pcp_list *l, uint32_t i)
{
	return l->ring[(l->bottom + i) & l->mask];
}

/*
 * free_pcppages_bulk(): free `count` frames to the zone in one lock section.  The list
 * that overflowed (pindex) goes first and alone if it holds enough; then the others
 * upward with wrap-around, the [min, max] window shrinking past empty edge lists.
 * count is clamped to pcp->count, else the search below could never end.
 */
static int pcp_free_bulk(struct gfa_pcp *pcp, int count, int pindex)
{
	struct gfa_zone *z = pcp->zone;
	int min_pindex = 0, max_pindex = NR_PCP_LISTS - 1, freed = 0;

	if (count > pcp->count)
		count = pcp->count;
	if (count <= 0)
		return 0;
	pindex = pindex - 1;
	pthread_mutex_lock(&z->lock);
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

			count -= 1 << order;
			pcp->count -= 1 << order;
			freed += 1 << order;
			GFA_BUG_ON(pcp->count < 0);     /* count is the sum of the lists */
			GFA_BUG_ON(fstate(&pcp->frames[pfn]) != GFA_FRAME_PCP);
			zone_return_locked(z, pfn, order);
		} while (count > 0 && plist_nr(l));
	}
	pthread_mutex_unlock(&z->lock);
	pcp->vs.pcp_bulkfree++;
	return freed;
}

/*
 * rmqueue_bulk(): take up to n blocks of one order and type in one zone-lock section,
 * appended at the tail so the list keeps its oldest-last order.
 */
static int pcp_refill(struct gfa_pcp *pcp, int pindex, unsigned int order, unsigned int mt,
		      int n, unsigned int flags)
{
	struct gfa_zone *z = pcp->zone;
	struct pcp_list *l = &pcp->lists[pindex];
	int got = 0;

	/* the ring grows outside the zone lock; without memory, refill what fits */
	while (n > 0 && plist_reserve(l, (uint32_t)n))
		n >>= 1;
	pthread_mutex_lock(&z->lock);
	/* a claim made since the caller looked: free frames are the zone path's to give */
	if (z->nr_claims)
		n = 0;
	for (; got < n; got++) {
		int64_t pfn = buddy_rmqueue(z, order, mt, flags & GFA_ALLOC_NOFALLBACK);
		struct gfa_frame *f;

		if (pfn < 0)
			break;
		f = &pcp->pool->frames[pfn];
		GFA_BUG_ON(fstate(f) != GFA_FRAME_FREE);        /* just off a free list */
		f->mt = (uint8_t)mt;
		fstate_set(f, GFA_FRAME_PCP);
		plist_push_bottom(l, (uint32_t)pfn);
		pcp->count += 1 << order;
	}
	pthread_mutex_unlock(&z->lock);
	pcp->vs.pcp_refill += got != 0;        /* batches taken, not attempts */
	return got;
}

/*
 * nr_pcp_alloc(): refill max(batch >> order, 2) blocks.  A cache that has to refill
 * could have kept more: high grows by a batch toward high_max on every refill, as
 * Linux 6.7's auto-tuning does (gfa_pool_drain_idle decays it again).
 */
static int pcp_refill_count(struct gfa_pcp *pcp, unsigned int order)
{
	int batch = pcp->batch;

	if (pcp->high < batch)
		return 1;               /* the kernel's "PCP disabled": one block at a time */
	/* saturating: high + batch may not fit an int when high_max is near INT_MAX */
	if (pcp->high_min != pcp->high_max && pcp->high < pcp->high_max)
		pcp->high = pcp->high_max - pcp->high > batch ? pcp->high + batch : pcp->high_max;
	if (batch > 1)
		batch = (batch >> order) < 2 ? 2 : batch >> order;
	return batch;
}

/*
 * The per-order table of the hot paths.  Every kept order fits in the zone (zones hold
 * at least a pageblock), so last_off never wraps for them.
 */
static void pcp_slots_init(struct gfa_pcp *pcp, const struct gfa_zone *z)
{
	for (unsigned int o = 0; o < PCP_ORDER_SLOTS; o++) {
		struct pcp_slot *sl = &pcp->slots[o];
		bool kept = (o <= PCP_COSTLY_ORDER || o == GFA_PAGEBLOCK_ORDER) &&
			    (!o || !pcp->no_high_order) && (1UL << o) <= z->nr_frames;

		sl->base = (int16_t)(kept ? order_to_pindex(0, o) : -1);
		sl->mask = (1U << o) - 1;
		sl->last_off = kept ? z->nr_frames - (1UL << o) : 0;
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- claims: the zone path for allocations while a zone has any ---- */

/* With pool->pcp_lock held (claims change under it too). */
static void pcp_claims_changed_one(struct gfa_pcp *pcp)
{
	bool claims = __atomic_load_n(&pcp->zone->nr_claims, __ATOMIC_RELAXED);

	for (unsigned int o = 0; o < PCP_ORDER_SLOTS; o++)
		atomic_store_explicit(&pcp->slots[o].alloc_base,
				      claims ? (int16_t)-1 : pcp->slots[o].base, memory_order_relaxed);
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
	pcp->batch = z->pcp_batch;
	pcp->high_min = pcp->high = z->pcp_high_min;
	pcp->high_max = z->pcp_high_max;
	pcp->no_high_order = pool->cfg.pcp_no_high_order;
	pcp_slots_init(pcp, z);
	pcp->frames = pool->frames;
	pcp->zone_start = z->start_pfn;
	pcp->zone_frames = z->nr_frames;
	pcp->pageblocks = z->pageblocks;
	pcp->free_count_cap = pcp->batch << PCP_BATCH_SCALE_MAX;
	pcp->free_high_threshold = pool->cfg.pcp_free_high_old
		? (unsigned int)pcp->batch
		: (unsigned int)(pcp->batch + pcp->high_min / 2);
	/* the threshold must stay reachable (docs/decisions.md, entry 22) by free_count,
	 * which stops at the cap (with
	 * high_min >= 1024 for order-9 caching, zones of 64-350 MiB were past it) */
	if (pcp->free_high_threshold > (unsigned int)pcp->free_count_cap)
		pcp->free_high_threshold = (unsigned int)pcp->free_count_cap;
	pcp->idle_since_ms = now_ms();
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_claims_changed_one(pcp);
	/* the gate changes under pcp_lock: a cache born while it is up starts with it up */
	atomic_store_explicit(&pcp->cas_free, (int)pool->cfg.pcp_free_strict +
			      atomic_load_explicit(&z->isolating, memory_order_relaxed),
			      memory_order_relaxed);
	pcp->next = pool->pcps;
	pool->pcps = pcp;
	pthread_mutex_unlock(&pool->pcp_lock);
	return pcp;
}

/* Allocations served by this cache: the hot path counts each once, per order. */
static uint64_t pcp_nr_alloc(const struct gfa_pcp *pcp)
{
	uint64_t n = 0;

	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++)
		n += pcp->vs.alloc_order[o];
	return n;
}

/* Frees by this cache's owner: counted once each, per order, as allocations are. */
static uint64_t pcp_nr_free(const struct gfa_pcp *pcp)
{
	uint64_t n = 0;

	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++)
		n += pcp->vs.free_order[o];
	return n;
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

	pthread_mutex_lock(&z->lock);
	pcp_add_counters(pcp, &z->c.vm);
	pthread_mutex_unlock(&z->lock);
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
 * only blocks of type mt, pcp_check_one), so the call never waits for its line.
 */
PCP_HOT void pcp_mark_allocated(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order,
				uint64_t owner)
{
	struct gfa_frame *f = &pcp->frames[pfn];

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
	if (unlikely(!plist_nr(l)) &&
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
 * pcp_alloc_slow() with the caller's own arguments keep it free of stack frames.
 */
int64_t gfa_pcp_alloc(struct gfa_pcp *pcp, unsigned int order, enum gfa_migratetype mt,
		      uint64_t owner, unsigned int flags)
{
	struct pcp_thread *me = pcp_self;
	struct pcp_list *l;
	uint32_t top, pfn;
	int base;

	if (unlikely(!pcp || order >= PCP_ORDER_SLOTS || (unsigned int)mt >= GFA_MT_PCPTYPES))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	base = atomic_load_explicit(&pcp->slots[order].alloc_base, memory_order_relaxed);
	if (unlikely(base < 0))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	if (unlikely(!pcp_enter_fast(pcp, me)))
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	l = &pcp->lists[base + (int)mt];
	top = l->top;
	if (unlikely(top == l->bottom)) {
		pcp_exit_fast(me);
		return pcp_alloc_slow(pcp, order, mt, owner, flags);
	}
	pfn = l->ring[--top & l->mask];
	__atomic_store_n(&l->top, top, __ATOMIC_RELAXED);
	pcp->free_count >>= 1;
	pcp_mark_allocated(pcp, pfn, order, owner);
	pcp_exit_fast(me);
	return (int64_t)pfn;
}

/*
 * free_unref_page_commit() of Linux 6.15: free_count grows by the block size on every
 * free (capped at batch << 5) and halves on every allocation; free_high fires for
 * orders 1..3 when the previous free was high-order too and free_count, as it was before
 * this free, reached the threshold.  It lowers high toward high_min and flushes up to
 * the cap, starting with this list.
 */
/*
 * The bookkeeping of free_unref_page_commit() for a free of `order` after which the
 * cache holds count_after frames: the high-order streak, free_count, and, when free_high
 * fires, high lowered toward high_min.  Returns whether free_high fires.
 */
static bool pcp_free_high_update(struct gfa_pcp *pcp, unsigned int order, int count_after)
{
	int cap = pcp->batch << PCP_BATCH_SCALE_MAX;
	bool free_high = false;

	if (order && order <= PCP_COSTLY_ORDER) {
		free_high = pcp->free_count >= (int)pcp->free_high_threshold &&
			    pcp->prev_free_high &&
			    (!(pcp->flags & PCPF_FREE_HIGH_BATCH) || count_after >= pcp->batch);
		pcp->prev_free_high = true;
	} else {
		pcp->prev_free_high = false;
	}
	if (pcp->free_count < cap)
		pcp->free_count += 1 << order;
	if (free_high)
		pcp->high = pcp->high - cap > pcp->high_min ? pcp->high - cap : pcp->high_min;
	return free_high;
}

static __attribute__((noinline)) void pcp_free_commit_slow(struct gfa_pcp *pcp, int pindex, unsigned int order)
{
	int cap = pcp->batch << PCP_BATCH_SCALE_MAX, high = pcp->high, nr;
	bool free_high = pcp_free_high_update(pcp, order, pcp->count);

	if (free_high) {
		high = 0;
	} else if (pcp->count >= high && pcp->high_min != pcp->high_max) {
		/* nr_pcp_high() of Linux 6.7: high must hold a batch more than the frees
		 * lately seen (free_count), up to high_max */
		int need = pcp->free_count + pcp->batch;

		if (high < need) {
			high = need < pcp->high_max ? need : pcp->high_max;
			pcp->high = high;
		}
	}
	if (pcp->count < high)
		return;
	if (free_high) {
		nr = pcp->count < cap ? pcp->count : cap;
		pcp->vs.pcp_free_high++;
	} else if (high <= pcp->batch) {
		nr = 1;         /* (high == batch: the clamp below would free nothing) */
	} else {
		/* nr_pcp_free(): clamp(free_count, batch, high - batch), the upper bound
		 * last (keep a batch on the list even when high < 2 * batch) */
		nr = pcp->free_count;
		if (nr < pcp->batch)
			nr = pcp->batch;
		if (nr > high - pcp->batch)
			nr = high - pcp->batch;
	}
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
	if (pcp->count || !order || order > PCP_COSTLY_ORDER ||
	    pcp->free_count < (int)pcp->free_high_threshold ||
	    !pcp->prev_free_high ||
	    ((pcp->flags & PCPF_FREE_HIGH_BATCH) && (1 << order) < pcp->batch))
		return false;
	pcp_free_high_update(pcp, order, 1 << order);
	pthread_mutex_lock(&z->lock);
	zone_return_locked(z, pfn, order);
	pthread_mutex_unlock(&z->lock);
	pcp->vs.free_order[order]++;
	pcp->vs.pcp_free_high++;
	pcp->vs.pcp_bulkfree++;
	return true;
}

/*
 * The common order-0 case of pcp_free_commit() in line: order 0 never fires free_high,
 * so below high it only ends the high-order streak and grows free_count.  Everything
 * else goes to pcp_free_commit_slow(), which does all of it, nothing done twice.
 */
PCP_HOT void pcp_free_commit_order0(struct gfa_pcp *pcp)
{
	pcp->prev_free_high = false;
	if (pcp->free_count < pcp->free_count_cap)
		pcp->free_count++;
}

PCP_HOT void pcp_free_commit(struct gfa_pcp *pcp, int pindex, unsigned int order)
{
	if (likely(order == 0 && pcp->count < pcp->high))
		pcp_free_commit_order0(pcp);
	else
		pcp_free_commit_slow(pcp, pindex, order);
}

/* A claimed block (state PCP) onto the head of its list l, which has room. */
PCP_HOT void pcp_push_commit(struct gfa_pcp *pcp, struct pcp_list *l, uint64_t pfn,
			     unsigned int order, int pindex)
{
	GFA_BUG_ON(fstate(&pcp->frames[pfn]) != GFA_FRAME_PCP);   /* begun: ALLOCATED -> PCP */
	plist_push_top(l, (uint32_t)pfn);
	pcp->count += 1 << order;
	pcp->vs.free_order[order]++;
	pcp_free_commit(pcp, pindex, order);
}

/*
 * A claimed block joins the cache: straight to the zone when free_high would flush it
 * at once, or when its list cannot grow; else onto its list, then the free_high/high
 * bookkeeping.
 */
static __attribute__((noinline)) void pcp_free_claimed(struct gfa_pcp *pcp, uint64_t pfn,
						       unsigned int order)
{
	struct gfa_zone *z = pcp->zone;
	struct pcp_list *l;
	int pindex;

	if (order && pcp_free_high_direct(pcp, z, pfn, order))
		return;
	pindex = order_to_pindex(pcp->frames[pfn].mt, order);
	l = &pcp->lists[pindex];
	if (unlikely(plist_nr(l) > l->mask) && plist_grow(l)) {
		/* no memory for a longer list: this block goes to the zone, claimed already */
		pthread_mutex_lock(&z->lock);
		zone_return_locked(z, pfn, order);
		pthread_mutex_unlock(&z->lock);
		pcp->vs.free_order[order]++;
		return;
	}
	pcp_push_commit(pcp, l, pfn, order, pindex);
}

/*
 * free_args() for the cache's own zone in line; anything else (other zone, bad
 * arguments) takes the full check, which also picks the error.
 */
PCP_HOT bool pcp_free_args_fast(const struct gfa_pcp *pcp, uint64_t pfn, unsigned int order)
{
	uint64_t off = pfn - pcp->zone_start;   /* wraps for pfn below the zone: caught */

	/* no pfn + size: it wraps for pfns near 2^64 and would pass */
	return order <= GFA_MAX_ORDER && off < pcp->zone_frames &&
	       (1UL << order) <= pcp->zone_frames - off && !(pfn & ((1UL << order) - 1));
}

/* Is the block at f the head of an allocation of this order by this owner? */
PCP_HOT bool pcp_frame_freeable(const struct gfa_frame *f, unsigned int order, uint64_t owner)
{
	return fstate(f) == GFA_FRAME_ALLOCATED && f->order == order && frame_owner(f) == owner;
}

/*
 * frame_begin_free() in line for the common case: the head is ALLOCATED with this
 * order and owner.  Then, while nobody isolates blocks of this zone (the gate of
 * pcp_holder.c is down) and the pool is not strict, no other thread may change this
 * frame's state, so a plain release store moves it to PCP; otherwise the compare-and-swap
 * decides against compaction's isolation or a racing free.  Anything else re-runs the
 * full version, which classifies the error.
 */
PCP_HOT int pcp_begin_free(struct gfa_pcp *pcp, struct gfa_zone *z, uint64_t pfn,
			   unsigned int order, uint64_t owner)
{
	struct gfa_frame *f = &pcp->frames[pfn];

	if (likely(pcp_frame_freeable(f, order, owner))) {
		if (likely(!atomic_load_explicit(&pcp->cas_free, memory_order_acquire))) {
			fstate_set(f, GFA_FRAME_PCP);
			return 0;
		}
		if (fstate_cas(f, GFA_FRAME_ALLOCATED, GFA_FRAME_PCP))
			return 0;
	}
	return frame_begin_free(pcp->pool, z, pfn, order, owner, GFA_FRAME_PCP);
}

/* One free inside an entered call, every case (gfa_pcp_free_many, the slow free). */
static int pcp_free_one(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner)
{
	struct gfa_pool *pool = pcp->pool;
	struct gfa_zone *z = pcp->zone;
	int err;

	if (unlikely(!pcp_free_args_fast(pcp, pfn, order))) {
		err = free_args(pool, pfn, order, &z);
		if (err)
			goto fail;
	}
	if (unlikely(z != pcp->zone || !pcp_order_cached(pcp, order)))
		return gfa_free(pool, pfn, order, owner);
	err = pcp_begin_free(pcp, z, pfn, order, owner);
	if (unlikely(err))
		goto fail;
	pcp_free_claimed(pcp, pfn, order);
	return 0;
fail:
	pool_count_err(pool, err);
	return err;
}

/*
 * The fast path's tails for the rarer cases, which then leave the call: as tail calls
 * they keep the fast path itself free of a stack frame.
 */
static __attribute__((noinline)) int pcp_free_begun_exit(struct gfa_pcp *pcp, uint64_t pfn,
							   unsigned int order,
							   struct pcp_thread *me)
{
	pcp_free_claimed(pcp, pfn, order);
	pcp_exit_fast(me);
	return 0;
}

static __attribute__((noinline)) int pcp_free_commit_exit(struct gfa_pcp *pcp, int pindex,
							  struct pcp_thread *me)
{
	pcp_free_commit_slow(pcp, pindex, 0);
	pcp_exit_fast(me);
	return 0;
}

static __attribute__((noinline)) int pcp_free_slow(struct gfa_pcp *pcp, uint64_t pfn,
						   unsigned int order, uint64_t owner)
{
	struct gfa_zone *z;
	int err;

	/* arguments wrong in themselves fail before the call takes the cache over */
	if (pcp && !pcp_free_args_fast(pcp, pfn, order)) {
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
 * The hot path: an order-0 block of the cache's zone back onto its list below high;
 * higher cached orders after the same checks go through pcp_free_claimed().  Anything
 * unusual (gate up, a bad or foreign block, not entered) leaves the call untouched and
 * takes pcp_free_slow(), which decides and counts the error.
 */
int gfa_pcp_free(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner)
{
	struct pcp_thread *me = pcp_self;
	const struct pcp_slot *sl;
	struct gfa_frame *f;
	struct pcp_list *l;
	uint64_t off;
	unsigned int mt;
	int pindex;

	if (unlikely(!pcp || order >= PCP_ORDER_SLOTS))
		return pcp_free_slow(pcp, pfn, order, owner);
	sl = &pcp->slots[order];
	off = pfn - pcp->zone_start;
	if (unlikely(sl->base < 0 || off > sl->last_off || (pfn & sl->mask)))
		return pcp_free_slow(pcp, pfn, order, owner);
	if (unlikely(!pcp_enter_fast(pcp, me)))
		return pcp_free_slow(pcp, pfn, order, owner);
	/*
	 * The list is the block's own type (f->mt).  Guess it from the pageblock's type,
	 * as the kernel picks its pcp list, so the list's line is on its way while the
	 * descriptor's is; a wrong guess (a block of another type than its pageblock)
	 * takes the general path.
	 */
	mt = __atomic_load_n(&pcp->pageblocks[off >> GFA_PAGEBLOCK_ORDER].mt, __ATOMIC_RELAXED);
	pindex = sl->base + (int)mt;
	l = &pcp->lists[pindex];
	f = &pcp->frames[pfn];
	if (unlikely(!pcp_frame_freeable(f, order, owner) ||
		     atomic_load_explicit(&pcp->cas_free, memory_order_acquire))) {
		pcp_exit_fast(me);
		return pcp_free_slow(pcp, pfn, order, owner);
	}
	fstate_set(f, GFA_FRAME_PCP);
	if (unlikely(order || f->mt != mt || l->top - l->bottom > l->mask))
		return pcp_free_begun_exit(pcp, pfn, order, me);
	plist_push_top(l, (uint32_t)pfn);
	pcp->vs.free_order[0]++;
	if (unlikely(++pcp->count >= pcp->high))
		return pcp_free_commit_exit(pcp, pindex, me);
	pcp_free_commit_order0(pcp);
	pcp_exit_fast(me);
	return 0;
}

int gfa_pcp_free_many(struct gfa_pcp *pcp, const uint64_t *pfns, size_t n,
		      unsigned int order, uint64_t owner)
{
	int err;
	size_t i;

	if ((!pfns && n) || n > INT_MAX) {
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
	pcp->vs.pcp_drain += err != 0;         /* as drain_all: caches that gave frames */
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

/*
 * decay_pcp_high() of Linux 6.7, run by the kernel's vmstat worker every second: high
 * falls back toward high_min by an eighth a call (at most to a cap below count), and
 * what the cache holds above high goes back to the zone.  Returns frames returned.
 */
static int64_t pcp_decay_high(struct gfa_pcp *pcp)
{
	int cap = pcp->batch << PCP_BATCH_SCALE_MAX, high = pcp->high;

	if (high > pcp->high_min) {
		int keep = pcp->count - cap;

		high -= high >> 3;
		high = keep > high ? keep : high;
		high = high < pcp->high_max ? high : pcp->high_max;
		pcp->high = high > pcp->high_min ? high : pcp->high_min;
	}
	return pcp->count > pcp->high ? pcp_free_bulk(pcp, pcp->count - pcp->high, 0) : 0;
}

int64_t gfa_pool_drain_idle(struct gfa_pool *pool, unsigned int idle_ms)
{
	uint64_t now;
	int64_t n = 0;

	if (!pool)
		return GFA_EFAULT;
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_remote_lock_zone(pool, -1);
	/* read under the lock: a concurrent caller's later stamp must not lie ahead of
	 * ours (now - idle_since wrapped to a huge idle time and drained active caches) */
	now = now_ms();
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		uint64_t ops = pcp_nr_alloc(pcp) + pcp_nr_free(pcp);

		if (ops != pcp->idle_seen_ops) {
			pcp->idle_seen_ops = ops;
			pcp->idle_since_ms = now;
		} else if (pcp->count && now - pcp->idle_since_ms >= idle_ms) {
			n += pcp_free_bulk(pcp, pcp->count, 0);
			pcp->vs.pcp_drain++;
			continue;
		}
		n += pcp_decay_high(pcp);
	}
	pcp_remote_unlock_zone(pool, -1);
	pthread_mutex_unlock(&pool->pcp_lock);
	return n;
}

int gfa_pcp_stat(struct gfa_pcp *pcp, struct gfa_pcp_stat *st)
{
	if (!pcp || !st) {
		if (pcp)                /* counted where the pool is known */
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
			struct gfa_frame *f = p < pool->nr_pfns ? &pool->frames[p] : NULL;

			if (!f || fstate(f) != GFA_FRAME_PCP || f->order != order ||
			    f->mt != (unsigned int)i % GFA_MT_PCPTYPES ||
			    pool_pfn_zone(pool, p) != pcp->zone) {
				snprintf(msg, len, "pcp %p list %d: pfn %u (state %u order %u mt %u) "
					 "does not belong there", (void *)pcp, i, p,
					 f ? fstate(f) : 0u, f ? (unsigned int)f->order : 0u,
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

uint64_t pcp_zone_frames(struct gfa_pool *pool, struct gfa_zone *z)
{
	uint64_t n = 0;

	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next)
		if (pcp->zone == z)
			n += (uint64_t)pcp->count;
	return n;
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
					snprintf(msg, len, "pfn %u is on a cache list twice (pcp %p "
						 "list %d)", p, (void *)pcp, i);
					return -EUCLEAN;
				}
				seen[p / 64] |= 1ULL << (p % 64);
			}
		}
	return 0;
}

int pcp_check_locked(struct gfa_pool *pool, uint64_t *seen, char *msg, size_t len)
{
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		int err = pcp_check_one(pcp, msg, len);

		if (err)
			return err;
	}
	/* every entry is a pfn of the pool now (pcp_check_one) */
	return pcp_check_unique(pool, seen, msg, len);
}
