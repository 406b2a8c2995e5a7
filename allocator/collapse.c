// SPDX-License-Identifier: MIT
/*
 * Collapse (khugepaged's job): move the small blocks behind one 2 MiB range of an
 * owner into a single order-9 block, all or nothing, through the owner's migrate op.
 */
#include <sched.h>
#include <string.h>
#include "allocator/internal.h"

#define COLLAPSE_BACK_TRIES 1000

static int collapse_args(struct gfa_pool *pool, unsigned int zone, const uint64_t *pfns,
			 const unsigned int *orders, const unsigned int *offs, unsigned int n)
{
	uint8_t used[GFA_PAGEBLOCK_FRAMES] = { 0 };

	if (!pool || !pfns || !orders || !offs)
		return GFA_EFAULT;
	if (zone >= pool->nr_zones)
		return GFA_ERANGE;
	if (!n || n > GFA_PAGEBLOCK_FRAMES)
		return GFA_EINVAL;
	for (unsigned int i = 0; i < n; i++) {
		unsigned int sz;

		if (orders[i] >= GFA_PAGEBLOCK_ORDER)
			return GFA_EORDER;
		sz = 1U << orders[i];
		/* written so that no sum can wrap: offs[i] is the caller's, any value */
		if (offs[i] & (sz - 1))
			return GFA_EALIGN;
		if (offs[i] > GFA_PAGEBLOCK_FRAMES - sz)
			return GFA_EINVAL;
		for (unsigned int k = offs[i]; k < offs[i] + sz; k++)
			if (used[k]++)
				return GFA_EINVAL;
	}
	return 0;
}

static void collapse_putback(struct gfa_pool *pool, const uint64_t *pfns, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		fstate_set(pfn_to_frame(pool, pfns[i]), GFA_FRAME_ALLOCATED);
}

/* Is pfns[i] listed before i? */
static bool collapse_listed(const uint64_t *pfns, unsigned int i)
{
	for (unsigned int k = 0; k < i; k++)
		if (pfns[k] == pfns[i])
			return true;
	return false;
}

/*
 * Pieces the owner would not take back stay moved, as compaction leaves a moved block:
 * each becomes a block of its order inside dst (the owner maps it there), the rest of
 * dst is freed, and so are the stuck pieces' sources (the owner no longer maps them);
 * the other sources are the owner's again.  Zone lock held.
 */
static void collapse_keep_stuck(struct gfa_pool *pool, struct gfa_zone *z, uint64_t owner,
				uint64_t dst, const uint64_t *pfns, const unsigned int *orders,
				const unsigned int *offs, unsigned int n, const bool *stuck)
{
	uint8_t kept[GFA_PAGEBLOCK_FRAMES] = { 0 };
	uint32_t index = __atomic_load_n(&pfn_to_frame(pool, dst)->index, __ATOMIC_RELAXED);

	for (unsigned int i = 0; i < n; i++) {
		struct gfa_frame *f = pfn_to_frame(pool, dst + offs[i]);

		if (!stuck[i]) {
			fstate_set(pfn_to_frame(pool, pfns[i]), GFA_FRAME_ALLOCATED);
			continue;
		}
		memset(kept + offs[i], 1, 1U << orders[i]);
		pb_mark_tails(z, dst + offs[i]);
		f->order = (uint8_t)orders[i];
		f->mt = GFA_MT_MOVABLE;
		__atomic_store_n(&f->index, index + offs[i], __ATOMIC_RELAXED);
		frame_set_owner(f, owner);
		fstate_set(f, GFA_FRAME_ALLOCATED);
		zone_return_locked(z, pfns[i], orders[i]); /* moved, as compaction does */
	}
	/* the counters see the target allocated and freed again: the owner holds its
	 * blocks as before (moves are no caller's allocation or free) */
	zone_count_free(z, GFA_PAGEBLOCK_ORDER);
	/* the gaps as the largest aligned blocks holding no kept frame */
	for (unsigned int off = 0; off < GFA_PAGEBLOCK_FRAMES;) {
		unsigned int o = 0;

		if (kept[off]) {
			off += 1U << pfn_to_frame(pool, dst + off)->order;
			continue;
		}
		while (o < GFA_PAGEBLOCK_ORDER && !(off & (1U << o)) &&
		       !memchr(kept + off, 1, 2U << o))
			o++;
		zone_return_locked(z, dst + off, o);
		off += 1U << o;
	}
}

/* Isolate every source block; on failure put back what was taken. */
static int collapse_isolate(struct gfa_pool *pool, struct gfa_zone *z, uint64_t owner,
			    const uint64_t *pfns, const unsigned int *orders, unsigned int n)
{
	unsigned int i, st;
	int err = 0;

	zone_lock(z);
	for (i = 0; i < n && !err; i++) {
		struct gfa_zone *bz = pool_pfn_zone(pool, pfns[i]);
		struct gfa_frame *f;

		if (bz != z || (pfns[i] & ((1UL << orders[i]) - 1))) {
			err = bz != z ? GFA_ERANGE : GFA_EALIGN;
			break;
		}
		zone_deferred_init_locked(z, pfns[i], 1);
		f = pfn_to_frame(pool, pfns[i]);
		st = fstate(f);
		if (st == GFA_FRAME_ISOLATED && collapse_listed(pfns, i))
			err = GFA_EINVAL; /* the same block twice: overlapping sources */
		else if (st != GFA_FRAME_ALLOCATED)
			err = st == GFA_FRAME_ISOLATED ? GFA_EBUSY : GFA_ENOTHEAD;
		else if (!fstate_cas(f, GFA_FRAME_ALLOCATED, GFA_FRAME_ISOLATED))
			err = GFA_EBUSY;
		/* checked once isolated: until then its cache could free it and hand it out */
		else if (f->order != orders[i] || frame_owner(f) != owner ||
			 f->mt != GFA_MT_MOVABLE) {
			err = f->order != orders[i] ? GFA_EWRONGORDER : GFA_EOWNER;
			fstate_set(f, GFA_FRAME_ALLOCATED);
		}
		if (err)
			break;
	}
	if (err)
		collapse_putback(pool, pfns, i);
	zone_unlock(z);
	return err;
}

/*
 * One move through the owner's migrate op, unless the owner unregistered meanwhile (an
 * op may unregister its own owner and free its context: its ops are never called
 * again).  Returns the op's answer, or -ENOENT with *gone set.
 */
static int collapse_migrate(struct gfa_pool *pool, const struct owner_ref *ref, uint64_t owner,
			    uint64_t from, uint64_t to, unsigned int order, bool *gone)
{
	if (*gone || !owner_ref_live(pool, ref)) {
		*gone = true;
		return -ENOENT;
	}
	return owner_migrate(pool, ref->ops, ref->ctx, owner, from, to, order);
}

/*
 * Undo one move of a failed collapse.  The owner may refuse for a moment (-EAGAIN,
 * -EBUSY: a vCPU is touching the page); it is asked again, a bounded number of times.
 */
static int collapse_move_back(struct gfa_pool *pool, const struct owner_ref *ref, uint64_t owner,
			      uint64_t from, uint64_t to, unsigned int order, bool *gone)
{
	int err = 0;

	for (int tries = 0; tries < COLLAPSE_BACK_TRIES; tries++) {
		err = collapse_migrate(pool, ref, owner, from, to, order, gone);
		if (err != -EAGAIN && err != -EBUSY)
			break;
		sched_yield();
	}
	return err;
}

/*
 * Isolate the sources, allocate the order-9 target, move every piece; all or nothing.
 * Returns the target, or an error with everything as it was (isolation errors counted).
 */
static int64_t collapse_move(struct gfa_pool *pool, struct gfa_zone *z, const struct owner_ref *ref,
			     uint64_t owner, const uint64_t *pfns, const unsigned int *orders,
			     const unsigned int *offs, unsigned int n)
{
	uint64_t taken, watched, gen;
	int64_t dst;
	unsigned int i;
	bool gone = false;
	int err = collapse_isolate(pool, z, owner, pfns, orders, n);

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	/* what the target takes from owner's claim (not migrate ops' own allocations) */
	watched = claim_watch(owner, &taken);
	dst = gfa_alloc(pool, z->id, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, owner, 0);
	gen = claim_watched_gen();
	taken = claim_unwatch(watched, taken);
	if (dst < 0) {
		zone_lock(z);
		collapse_putback(pool, pfns, n);
		z->c.vm.thp_collapse_alloc_failed++;
		zone_unlock(z);
		return dst;
	}
	/*
	 * The owner's index of the new block, as if split from it (gfa_block_split: piece
	 * k has index + k), so a move back finds its page from a frame inside dst.
	 */
	__atomic_store_n(&pfn_to_frame(pool, dst)->index,
			 __atomic_load_n(&pfn_to_frame(pool, pfns[0])->index, __ATOMIC_RELAXED) -
				 offs[0],
			 __ATOMIC_RELAXED);
	for (i = 0; i < n; i++) {
		err = collapse_migrate(pool, ref, owner, pfns[i], (uint64_t)dst + offs[i],
				       orders[i], &gone);
		if (err)
			break;
	}
	if (err) {
		/* all or nothing: move the pieces back, the sources were kept isolated; an
		 * owner gone meanwhile takes none back (they stay moved, as stuck pieces) */
		bool stuck[GFA_PAGEBLOCK_FRAMES] = { false }, any = false;
		uint64_t refused = gone ? 0 : 1UL << orders[i];

		while (i--) {
			stuck[i] = collapse_move_back(pool, ref, owner, (uint64_t)dst + offs[i],
						      pfns[i], orders[i], &gone) != 0;
			any |= stuck[i];
		}
		zone_lock(z);
		/* the huge allocation itself succeeded (thp_collapse_alloc counts those, as
		 * khugepaged does); the frames of the piece the owner refused failed */
		z->c.vm.thp_collapse_alloc++;
		z->c.vm.pgmigrate_fail += refused;
		if (any) {
			/* the owner holds as many frames as before: the target's charge back */
			collapse_keep_stuck(pool, z, owner, (uint64_t)dst, pfns, orders, offs, n,
					    stuck);
			claim_refund(z, owner, taken, gen);
		} else {
			collapse_putback(pool, pfns, n);
			if (!frame_begin_free(pool, z, (uint64_t)dst, GFA_PAGEBLOCK_ORDER, owner,
					      0)) {
				zone_free_locked(z, (uint64_t)dst, GFA_PAGEBLOCK_ORDER);
				claim_refund(z, owner, taken, gen);
			}
		}
		zone_unlock(z);
		/* an owner that left in its refusing call is told as one that left before */
		return gone || !owner_ref_live(pool, ref) ? -ENOENT : err;
	}
	zone_lock(z);
	for (i = 0; i < n; i++) {
		zone_free_locked(z, pfns[i], orders[i]);
		z->c.vm.pgmigrate_success += 1UL << orders[i]; /* pages, as the kernel */
	}
	z->c.vm.thp_collapse_alloc++;
	zone_unlock(z);
	/* (an owner that unregistered in its last move is not told) */
	if (owner_ref_live(pool, ref) && ref->ops->collapsed)
		ref->ops->collapsed(ref->ctx, owner, (uint64_t)dst);
	return dst;
}

int64_t gfa_collapse(struct gfa_pool *pool, unsigned int zone, uint64_t owner, const uint64_t *pfns,
		     const unsigned int *orders, const unsigned int *offs, unsigned int n)
{
	struct owner_ref ref;
	struct gfa_zone *z;
	int64_t dst;
	int err = collapse_args(pool, zone, pfns, orders, offs, n);

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	/* held across the whole collapse: unregistering waits for it */
	if (!owner_get(pool, owner, &ref))
		return -ENOENT;
	z = &pool->zones[zone];
	/* the sources are isolated: cache frees of this zone must compare-and-swap */
	pcp_isolate_begin(z);
	dst = collapse_move(pool, z, &ref, owner, pfns, orders, offs, n);
	pcp_isolate_end(z);
	owner_put(pool, &ref);
	return dst;
}
