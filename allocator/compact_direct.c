// SPDX-License-Identifier: MIT
/*
 * The allocation slow path: drain the zone's caches, then direct compaction in the
 * allocating thread, on the allocating zone only (node-local), with capture, escalating
 * ASYNC -> SYNC_LIGHT -> SYNC as the kernel's compact_priority does.
 */
#include "allocator/internal.h"

/*
 * Direct compaction for one request, with capture unless linear-only.  Returns the
 * captured block (ISOLATED, to be marked allocated by the caller; its frames that were
 * released carry FRAME_F_WAS_RELEASED) or -1.
 */
static int64_t try_to_compact(struct gfa_zone *z, unsigned int order, unsigned int mt,
			      enum gfa_compact_mode mode, unsigned int flags)
{
	bool nofb = flags & GFA_ALLOC_NOFALLBACK;
	struct capture_control capc = { z, (int)order, mt, -1, nofb }, *outer = compact_capc;
	bool capture = !__atomic_load_n(&z->pool->compact.linear_only, __ATOMIC_RELAXED);
	unsigned int how = COMPACT_DIRECT | (mode == GFA_COMPACT_SYNC ? COMPACT_IGNORE_SKIP : 0) |
			   (nofb ? COMPACT_NOFALLBACK : 0);

	if (capture)
		compact_capc = &capc;
	compact_run(z, (int)order, mt, mode, how, capture ? &capc : NULL);
	/* a migrate op may allocate and compact in this thread: the outer request's again */
	compact_capc = outer;
	return capc.pfn;
}

/*
 * Direct compaction escalates as the kernel's compact_priority does: ASYNC, then
 * SYNC_LIGHT, then SYNC over the whole zone with skip hints ignored (the kernel's
 * MIN_COMPACT_PRIORITY), each bounded by one meeting of the scanners.
 */
int64_t zone_alloc_slow(struct gfa_zone *z, unsigned int order, unsigned int mt, uint64_t owner,
			unsigned int flags)
{
	static const enum gfa_compact_mode modes[] = { GFA_COMPACT_ASYNC, GFA_COMPACT_SYNC_LIGHT,
						       GFA_COMPACT_SYNC };
	bool promised;
	int64_t pfn;

	/* free lists only: never wait on other vCPUs' caches or compact (remote zones) */
	if (flags & GFA_ALLOC_NOCOMPACT) {
		pfn = GFA_ENOMEM;
		goto out;
	}
	/* frames parked on caches may complete a block once merged */
	gfa_pool_drain_all(z->pool, (int)z->id);
	zone_lock(z);
	pfn = zone_alloc_locked(z, order, mt, owner, flags);
	/* the free frames are promised to claims: moving frames cannot change that (the
	 * kernel skips compaction below the order-0 watermark, counting no stall) - unless
	 * another compaction holds free frames as targets, which it gives back */
	promised = pfn < 0 && !claim_allows(z, owner, order) &&
		   !__atomic_load_n(&z->isolate_users, __ATOMIC_RELAXED);
	zone_unlock(z);
	if (pfn >= 0 || !order || promised)
		goto out;
	/* one isolation gate for all three runs below: one grace period, not three */
	pcp_isolate_begin(z);
	for (unsigned int i = 0; i < 3; i++) {
		int64_t cap;
		bool allowed;

		zone_lock(z);
		z->c.vm.compact_stall++;
		zone_unlock(z);
		cap = try_to_compact(z, order, mt, modes[i], flags);
		zone_lock(z);
		/* the captured block is off the lists: count it as the free frames it is */
		if (cap >= 0)
			arena_of(z, (uint64_t)cap)->nr_free += 1UL << order;
		allowed = claim_allows(z, owner, order);
		if (cap >= 0)
			arena_of(z, (uint64_t)cap)->nr_free -= 1UL << order;
		if (cap >= 0 && !allowed) {
			/* captured, but the frames are promised to a VM being built: back
			 * unwritten, with the released frames it had */
			fstate_set(pfn_to_frame(z->pool, cap), 0);
			release_restore(z, (uint64_t)cap, 1UL << order);
			buddy_free_block(z, (uint64_t)cap, order);
			cap = -1;
		}
		if (cap >= 0) {
			/* (its released bits went when compaction_capture took it: the new
			 * owner writes the frames) */
			release_forget(z, (uint64_t)cap, 1UL << order);
			claim_consume(z, owner, order);
			frame_mark_allocated(pfn_to_frame(z->pool, cap), mt, owner);
			z->c.vm.compact_capture++;
			z->c.vm.compact_success++;
			z->c.vm.pgalloc_blocks++;
			z->c.vm.pgalloc += 1UL << order;
			z->c.vm.alloc_order[order]++;
			pfn = cap;
		} else {
			pfn = zone_alloc_locked(z, order, mt, owner, flags);
			if (pfn >= 0)
				z->c.vm.compact_success++;
			else
				z->c.vm.compact_fail++;
		}
		zone_unlock(z);
		if (pfn >= 0)
			goto gate;
	}
	if (order >= GFA_PAGEBLOCK_ORDER)
		gfa_compactd_wake(z->pool, z->id);
	pfn = GFA_ENOMEM;
gate:
	pcp_isolate_end(z);
out:
	if (pfn < 0)
		pfn = zone_alloc_after_scrub(z, order, mt, owner, flags);
	if (pfn < 0) {
		zone_lock(z);
		z->c.vm.pgalloc_fail++;
		zone_unlock(z);
	}
	return pfn;
}

int64_t gfa_alloc_compact(struct gfa_pool *pool, unsigned int zone, unsigned int order,
			  enum gfa_migratetype mt, uint64_t owner)
{
	if (!pool || zone >= pool->nr_zones || order > GFA_MAX_ORDER ||
	    (unsigned int)mt >= GFA_MT_PCPTYPES)
		return gfa_alloc(pool, zone, order, mt, owner, 0); /* reports the error */
	return zone_alloc_slow(&pool->zones[zone], order, mt, owner, 0);
}
