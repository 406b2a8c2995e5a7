// SPDX-License-Identifier: MIT
/*
 * The zone path of allocation and free: argument checks, the arena or zone lock,
 * counters.  An allocation or free of a zone without claims and deferred sections
 * takes only its arena's lock (decisions 38); everything else takes the zone lock.
 */
#include "allocator/internal.h"

void frame_mark_allocated(struct gfa_frame *f, unsigned int mt, uint64_t owner)
{
	GFA_BUG_ON(mt >= GFA_MT_PCPTYPES);
	GFA_BUG_ON(fstate(f) == GFA_FRAME_ALLOCATED); /* handed out twice */
	if (f->mt != mt)
		f->mt = (uint8_t)mt;
	frame_set_owner(f, owner);
	fstate_set(f, GFA_FRAME_ALLOCATED);
}

/* Checks that need no lock; returns 0 or the error (not yet counted). */
static int alloc_args(struct gfa_pool *pool, unsigned int zone, unsigned int order,
		      enum gfa_migratetype mt)
{
	if (!pool)
		return GFA_EFAULT;
	if (zone >= pool->nr_zones)
		return GFA_ERANGE;
	if (order > GFA_MAX_ORDER)
		return GFA_EORDER;
	if ((unsigned int)mt >= GFA_MT_PCPTYPES)
		return GFA_EMIGRATE;
	return 0;
}

static inline void vm_count_alloc(struct gfa_vmstat *vm, unsigned int order)
{
	vm->pgalloc_blocks++;
	vm->pgalloc += 1UL << order;
	vm->alloc_order[order]++;
}

static inline void vm_count_free(struct gfa_vmstat *vm, unsigned int order)
{
	vm->pgfree_blocks++;
	vm->pgfree += 1UL << order;
	vm->free_order[order]++;
}

/* Take one block under the zone lock and account for it. */
int64_t zone_alloc_locked(struct gfa_zone *z, unsigned int order, unsigned int mt, uint64_t owner,
			  unsigned int flags)
{
	int64_t pfn;

	GFA_BUG_ON(!zone_lock_held(z));
	if (!claim_allows(z, owner, order))
		return GFA_ENOMEM;
	pfn = zone_rmqueue(z, order, mt, flags & GFA_ALLOC_NOFALLBACK);
	if (pfn < 0)
		return GFA_ENOMEM; /* counted as pgalloc_fail once the slow path gives up */
	/* an aligned block of the zone, off every list */
	GFA_BUG_ON(((uint64_t)pfn & ((1UL << order) - 1)) || free_head_test(z, (uint64_t)pfn));
	claim_consume(z, owner, order);
	frame_mark_allocated(pfn_to_frame(z->pool, pfn), mt, owner);
	vm_count_alloc(&z->c.vm, order);
	return pfn;
}

/*
 * May the zone path skip the zone lock?  A claim needs the zone's free count and a held
 * pool's deferred sections its bitmap, both the zone lock's.  Claims change under every
 * arena lock, so one arena's holder sees nr_claims stable.
 */
static inline bool arena_path(const struct gfa_zone *z)
{
	return !z->deferred && !__atomic_load_n(&z->nr_claims, __ATOMIC_RELAXED);
}

/*
 * A block under one arena's lock at a time, walking the arenas as arena_passes() says.
 * GFA_ENOMEM when none has one, or a claim came: then the zone lock decides.
 */
static int64_t arena_alloc(struct gfa_zone *z, unsigned int order, unsigned int mt, uint64_t owner,
			   unsigned int flags)
{
	unsigned int first = arena_here(z);

	for (int pass = 0; pass < arena_passes(flags & GFA_ALLOC_NOFALLBACK); pass++)
		for (unsigned int i = 0; i < z->nr_arenas; i++) {
			struct gfa_arena *a = arena_walk(z, first, i);
			int64_t pfn = -1;

			pthread_mutex_lock(&a->lock);
			if (!__atomic_load_n(&z->nr_claims, __ATOMIC_RELAXED))
				pfn = buddy_rmqueue(z, a, order, mt, pass == 0);
			if (pfn >= 0) {
				GFA_BUG_ON(free_head_test(z, (uint64_t)pfn));
				frame_mark_allocated(pfn_to_frame(z->pool, pfn), mt, owner);
				vm_count_alloc(&a->vm, order);
			}
			pthread_mutex_unlock(&a->lock);
			if (pfn >= 0)
				return pfn;
		}
	return GFA_ENOMEM;
}

/*
 * Frames a scrub holds (zone_scrub_take) are free frames being zeroed, back on the
 * lists within one batch: wait for them rather than fail, as a refill waits out a
 * drain.  No scrub takes more while one waits, and the try after the wait runs under
 * the same lock hold, so it sees every frame they held.
 */
int64_t zone_alloc_after_scrub(struct gfa_zone *z, unsigned int order, unsigned int mt,
			       uint64_t owner, unsigned int flags)
{
	int64_t pfn = GFA_ENOMEM;

	zone_lock(z);
	if (z->nr_scrub) {
		z->scrub_waiters++;
		while (z->nr_scrub)
			zone_cond_wait(z, &z->scrub_done);
		z->scrub_waiters--;
		pfn = zone_alloc_locked(z, order, mt, owner, flags);
	}
	zone_unlock(z);
	return pfn;
}

int64_t gfa_alloc(struct gfa_pool *pool, unsigned int zone, unsigned int order,
		  enum gfa_migratetype mt, uint64_t owner, unsigned int flags)
{
	struct gfa_zone *z;
	int64_t pfn;
	int err = alloc_args(pool, zone, order, mt);

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	z = &pool->zones[zone];
	pfn = arena_path(z) ? arena_alloc(z, order, mt, owner, flags) : GFA_ENOMEM;
	if (pfn == GFA_ENOMEM) {
		zone_lock(z);
		pfn = zone_alloc_locked(z, order, mt, owner, flags);
		zone_unlock(z);
	}
	if (pfn == GFA_ENOMEM)
		pfn = zone_alloc_slow(z, order, mt, owner, flags);
	return pfn;
}

/* Checks that need no lock. */
int free_args(struct gfa_pool *pool, uint64_t pfn, unsigned int order, struct gfa_zone **zp)
{
	if (!pool)
		return GFA_EFAULT;
	if (order > GFA_MAX_ORDER)
		return GFA_EORDER;
	*zp = pool_pfn_zone(pool, pfn);
	if (!*zp || pfn + (1UL << order) > (*zp)->start_pfn + (*zp)->nr_frames)
		return GFA_ERANGE;
	if (pfn & ((1UL << order) - 1))
		return GFA_EALIGN;
	return 0;
}

/* Why a free of a block that is not ALLOCATED fails; the lock of pfn's arena held
 * (locked), or the zone lock taken, for tails. */
static int classify_bad_free(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn,
			     unsigned int state, bool locked)
{
	uint64_t head;

	switch (state) {
	case GFA_FRAME_FREE:
	case GFA_FRAME_PCP:
		return GFA_EDOUBLEFREE;
	case GFA_FRAME_ISOLATED:
	case GFA_FRAME_INFLIGHT:
		return GFA_EBUSY;
	default:
		break;
	}
	if (!locked)
		zone_lock(z);
	/* A tail: inside some block.  Inside a free block it is a double free too. */
	head = frame_find_head(pool, z, pfn);
	state = head == GFA_NIL ? 0 : fstate(pfn_to_frame(pool, head));
	if (!locked)
		zone_unlock(z);
	if (state == GFA_FRAME_FREE || state == GFA_FRAME_PCP)
		return GFA_EDOUBLEFREE;
	return GFA_ENOTHEAD;
}

int frame_begin_free(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn, unsigned int order,
		     uint64_t owner, unsigned int new_state)
{
	struct gfa_frame *f = pfn_to_frame(pool, pfn);
	bool locked = new_state != GFA_FRAME_PCP; /* only a cache's free runs unlocked */
	unsigned int state = fstate(f);

	if (state != GFA_FRAME_ALLOCATED) {
		/* a deferred section's frames are held: written, they answer as before */
		if (!state && zone_deferred_init_frame(z, pfn, locked))
			return frame_begin_free(pool, z, pfn, order, owner, new_state);
		return classify_bad_free(pool, z, pfn, state, locked);
	}
	if (f->order != order)
		return GFA_EWRONGORDER;
	if (frame_owner(f) != owner)
		return GFA_EOWNER;
	if (!fstate_cas(f, GFA_FRAME_ALLOCATED, new_state))
		return classify_bad_free(pool, z, pfn, fstate(f), locked);
	return 0;
}

/* A block back to the buddy lists (at the tail when cold). */
static void zone_return(struct gfa_zone *z, uint64_t pfn, unsigned int order, bool cold)
{
	struct gfa_frame *f = pfn_to_frame(z->pool, pfn);

	GFA_BUG_ON(!arena_lock_held(arena_of(z, pfn)));
	/* a block reaches the buddy lists from a cache, an isolation, a release in flight
	 * or a begun free (state 0), never while free or still allocated */
	GFA_BUG_ON(fstate(f) == GFA_FRAME_FREE || fstate(f) == GFA_FRAME_ALLOCATED);
	fstate_set(f, 0);
	flink_set(&f->next, GFA_NIL);
	flink_set(&f->prev, GFA_NIL);
	if (cold)
		buddy_free_block_cold(z, pfn, order);
	else
		buddy_free_block(z, pfn, order);
}

void zone_return_locked(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	zone_return(z, pfn, order, false);
}

void zone_count_free(struct gfa_zone *z, unsigned int order)
{
	GFA_BUG_ON(!zone_lock_held(z) || order > GFA_MAX_ORDER);
	vm_count_free(&z->c.vm, order);
}

void zone_free_locked(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	zone_return_locked(z, pfn, order);
	zone_count_free(z, order);
}

/* How a freed block goes back: at the head of its list, at the tail (cold), or at the
 * tail with its host memory gone (released: the caller punched it). */
enum free_how { FREE_HOT, FREE_COLD, FREE_RELEASED };

static int zone_free(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner,
		     enum free_how how)
{
	struct gfa_zone *z = NULL;
	int err = free_args(pool, pfn, order, &z);

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	if (how == FREE_HOT && arena_path(z)) {
		/* a claim made meanwhile changes nothing here: frees do not touch claims */
		struct gfa_arena *a = arena_of(z, pfn);

		pthread_mutex_lock(&a->lock);
		err = frame_begin_free(pool, z, pfn, order, owner, 0);
		if (!err) {
			zone_return(z, pfn, order, false);
			vm_count_free(&a->vm, order);
		}
		pthread_mutex_unlock(&a->lock);
	} else {
		zone_lock(z);
		err = frame_begin_free(pool, z, pfn, order, owner, 0);
		if (!err) {
			if (how == FREE_RELEASED)
				zone_mark_released(z, pfn, 1UL << order);
			zone_return(z, pfn, order, how != FREE_HOT);
			zone_count_free(z, order);
		}
		zone_unlock(z);
	}
	if (err)
		pool_count_err(pool, err);
	return err;
}

int gfa_free(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner)
{
	return zone_free(pool, pfn, order, owner, FREE_HOT);
}

int pool_free_cold(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner)
{
	return zone_free(pool, pfn, order, owner, FREE_COLD);
}

int pool_free_released(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner)
{
	return zone_free(pool, pfn, order, owner, FREE_RELEASED);
}

int zone_held_drop_tails(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner)
{
	struct gfa_frame_range runs[TAIL_DROP_RUNS];
	struct gfa_zone *z = NULL;
	unsigned int n = 0;
	int err = free_args(pool, pfn, order, &z);

	if (!err && order < GFA_PAGEBLOCK_ORDER)
		err = GFA_EORDER;
	if (err)
		goto out;
	zone_lock(z);
	/* ISOLATED while its tails go: a zone-path free or a split of it is refused */
	err = frame_begin_free(pool, z, pfn, order, owner, GFA_FRAME_ISOLATED);
	if (!err) {
		n = zone_take_tail_marks(z, pfn, pfn + (1UL << order), runs);
		if (n)
			zone_drop_tails(z, runs, n);
		GFA_BUG_ON(fstate(pfn_to_frame(pool, pfn)) != GFA_FRAME_ISOLATED);
		fstate_set(pfn_to_frame(pool, pfn), GFA_FRAME_ALLOCATED);
	}
	zone_unlock(z);
out:
	if (err)
		pool_count_err(pool, err);
	return err;
}

int gfa_block_split(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner,
		    unsigned int new_order)
{
	struct gfa_zone *z = NULL;
	struct gfa_frame *f;
	uint32_t index;
	unsigned int mt;
	int err = free_args(pool, pfn, order, &z);

	if (!err && new_order >= order)
		err = GFA_EORDER;
	if (err)
		goto out;
	zone_lock(z);
	/* hold the block as ISOLATED while the pieces are written, like a free would */
	err = frame_begin_free(pool, z, pfn, order, owner, GFA_FRAME_ISOLATED);
	if (err == GFA_EDOUBLEFREE)
		err = GFA_ENOTHEAD; /* a free block has no allocated head to split */
	if (!err) {
		f = pfn_to_frame(pool, pfn);
		mt = f->mt;
		index = __atomic_load_n(&f->index, __ATOMIC_RELAXED);
		for (uint64_t p = pfn; new_order < GFA_PAGEBLOCK_ORDER && p < pfn + (1UL << order);
		     p += GFA_PAGEBLOCK_FRAMES)
			pb_mark_tails(z, p + 1);
		for (uint64_t k = (1UL << order) >> new_order; k-- > 0;) {
			struct gfa_frame *p = pfn_to_frame(pool, pfn + (k << new_order));

			p->order = (uint8_t)new_order;
			p->mt = (uint8_t)mt;
			__atomic_store_n(&p->index, index + (uint32_t)(k << new_order),
					 __ATOMIC_RELAXED);
			frame_set_owner(p, owner);
			fstate_set(p, GFA_FRAME_ALLOCATED);
		}
		/* the caller holds the pieces instead of the block: pgalloc_blocks -
		 * pgfree_blocks stays what callers hold when they free the pieces */
		z->c.vm.pgfree_blocks++;
		z->c.vm.free_order[order]++;
		z->c.vm.pgalloc_blocks += (1UL << order) >> new_order;
		z->c.vm.alloc_order[new_order] += (1UL << order) >> new_order;
	}
	zone_unlock(z);
out:
	if (err)
		pool_count_err(pool, err);
	return err;
}
