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
 *
 * This file runs one compaction from setup to finish; the scanners are in
 * compaction_free.c and compaction_migrate.c (compaction_internal.h).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "allocator/compaction_internal.h"

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

static bool zone_has_free_order(struct gfa_zone *z, int order, unsigned int mt, bool nofallback)
{
	for (int o = order; o <= GFA_MAX_ORDER; o++) {
		if (zone_list_nr(z, (unsigned int)o, mt))
			return true;
		/* fallback can steal blocks of pageblock_order/2 and up */
		if (!nofallback && o >= GFA_PAGEBLOCK_ORDER / 2 &&
		    zone_area_nr_free(z, (unsigned int)o))
			return true;
	}
	return false;
}

static int fragmentation_score_locked(struct gfa_zone *z)
{
	uint64_t huge = 0, free = zone_nr_free(z);

	if (!free)
		return 0;
	for (int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
		huge += zone_area_nr_free(z, (unsigned int)o) << o;
	return (int)(100 * (free - huge) / free);
}

/* __compact_finished() */
static int compact_finished(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;
	int ret = GFA_COMPACT_CONTINUE;

	if (cc->capc && cc->capc->pfn >= 0)
		return GFA_COMPACT_SUCCESS;
	zone_lock(z);
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
	zone_unlock(z);
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
	zone_lock(z);
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
	zone_unlock(z);
}

static void compact_account(struct compact_control *cc)
{
	struct gfa_zone *z = cc->zone;

	zone_lock(z);
	z->c.vm.compact_migrate_scanned += cc->migrate_scanned;
	z->c.vm.compact_migrate_blocks += cc->migrate_blocks;
	z->c.vm.compact_free_scanned += cc->free_scanned;
	if (cc->daemon) {
		z->c.vm.compact_daemon_migrate_scanned += cc->migrate_scanned;
		z->c.vm.compact_daemon_free_scanned += cc->free_scanned;
	}
	zone_unlock(z);
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
		zone_lock(cc->zone);
		ret = zone_has_free_order(cc->zone, cc->order, cc->mt, cc->nofallback);
		zone_unlock(cc->zone);
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
		return GFA_ERANGE; /* counted by gfa_zone_stat() */
	if (!st.nr_free)
		return 0;
	for (int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
		for (int t = 0; t < GFA_MT_TYPES; t++)
			huge += st.nr_free_blocks[o][t] << o;
	huge += st.nr_pcp_blocks[GFA_PAGEBLOCK_ORDER] << GFA_PAGEBLOCK_ORDER;
	if (huge > st.nr_free)
		huge = st.nr_free; /* (a snapshot taken while frames kept moving) */
	return (int)(100 * (st.nr_free - huge) / st.nr_free);
}
