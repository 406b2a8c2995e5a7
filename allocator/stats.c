// SPDX-License-Identifier: MIT
/*
 * Statistics in the formats kernel people read every day: /proc/buddyinfo,
 * /proc/pagetypeinfo and /proc/vmstat.
 */
#include <stdio.h>
#include <string.h>
#include "allocator/internal.h"
#include "common/strbuf.h"

const char *gfa_migratetype_name(enum gfa_migratetype mt)
{
	static const char *const names[GFA_MT_TYPES] = {
		"Unmovable",
		"Movable",
		"Reclaimable",
		"Isolate",
	};
	return (unsigned int)mt < GFA_MT_TYPES ? names[mt] : "Unknown";
}

int gfa_zone_stat(struct gfa_pool *pool, unsigned int zone, struct gfa_zone_stat *st)
{
	struct gfa_zone *z;

	if (!pool || !st) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	if (zone >= pool->nr_zones) {
		pool_count_err(pool, GFA_ERANGE);
		return GFA_ERANGE;
	}
	z = &pool->zones[zone];
	memset(st, 0, sizeof(*st));
	/*
	 * Buddy lists and caches in one snapshot: frames move between them (refill,
	 * drain) only under the zone lock, and caches come and go under pcp_lock (lock
	 * order pcp_lock -> zone lock).  The owners' own allocations and frees are read
	 * as they stand: no remote hold, so no membarrier for the vCPUs.
	 */
	pthread_mutex_lock(&pool->pcp_lock);
	zone_lock(z);
	st->nr_frames = z->nr_frames;
	st->nr_free_buddy = zone_nr_free(z);
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
			st->nr_free_blocks[o][t] = zone_list_nr(z, o, t);
	for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
		st->nr_pageblocks[t] = zone_nr_pb_mt(z, t);
	st->nr_sidelined = zone_nr_pb_sidelined(z);
	/* deferred pageblocks read zero (UNMOVABLE): their init makes them MOVABLE */
	st->nr_pageblocks[GFA_MT_UNMOVABLE] -= z->nr_deferred_pageblocks;
	st->nr_pageblocks[GFA_MT_MOVABLE] += z->nr_deferred_pageblocks;
	st->nr_released = zone_nr_released(z);
	/* frames a scrub holds are free ones being zeroed, not host work in flight */
	st->nr_scrubbing = z->nr_scrub;
	st->nr_inflight = z->nr_inflight - z->nr_scrub;
	pcp_stat_blocks_locked(pool, zone, st->nr_pcp_blocks);
	st->metadata_bytes =
		z->metadata_bytes - zone_deferred_meta_bytes(z) +
		zone_nr_tail_pageblocks(z) * GFA_PAGEBLOCK_FRAMES * sizeof(struct gfa_frame);
	zone_unlock(z);
	pthread_mutex_unlock(&pool->pcp_lock);
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		st->nr_pcp += st->nr_pcp_blocks[o] << o;
	st->nr_free = st->nr_free_buddy + st->nr_pcp + st->nr_scrubbing;
	return 0;
}

/* Add z's counters, its own and its arenas', to vs (zone lock). */
static void zone_vmstat_add(const struct gfa_zone *z, struct gfa_vmstat *vs)
{
	uint64_t *dst = (uint64_t *)vs;

	for (int i = -1; i < (int)z->nr_arenas; i++) {
		const uint64_t *src = (const uint64_t *)(i < 0 ? &z->c.vm : &z->arenas[i].vm);

		for (size_t k = 0; k < sizeof(*vs) / sizeof(uint64_t); k++)
			dst[k] += src[k];
	}
}

int gfa_zone_vmstat(struct gfa_pool *pool, unsigned int zone, struct gfa_vmstat *vs)
{
	struct gfa_zone *z;

	if (!pool || !vs)
		return pool_err(pool, GFA_EFAULT);
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	z = &pool->zones[zone];
	pthread_mutex_lock(&pool->pcp_lock); /* no cache folds into z meanwhile */
	memset(vs, 0, sizeof(*vs));
	zone_lock(z);
	zone_vmstat_add(z, vs);
	zone_unlock(z);
	pcp_add_vmstat_zone(pool, (int)zone, vs);
	pthread_mutex_unlock(&pool->pcp_lock);
	return 0;
}

int gfa_zone_node(const struct gfa_pool *pool, unsigned int zone)
{
	if (!pool)
		return GFA_EFAULT;
	return zone < pool->nr_zones ? pool->zones[zone].node : pool_err(pool, GFA_ERANGE);
}

int gfa_pool_vmstat(struct gfa_pool *pool, struct gfa_vmstat *vs)
{
	uint64_t *errs;

	if (!pool || !vs) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	memset(vs, 0, sizeof(*vs));
	pthread_mutex_lock(&pool->pcp_lock); /* no cache folds into a zone meanwhile */
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		struct gfa_zone *z = &pool->zones[i];
		zone_lock(z);
		zone_vmstat_add(z, vs);
		zone_unlock(z);
	}
	pcp_add_vmstat_zone(pool, -1, vs);
	pthread_mutex_unlock(&pool->pcp_lock);
	_Static_assert(offsetof(struct gfa_vmstat, err_inval) -
				       offsetof(struct gfa_vmstat, err_fault) ==
			       ERR_INVAL * sizeof(uint64_t),
		       "err_* counters in the order of enum gfa_err_slot");
	errs = &vs->err_fault;
	for (int k = 0; k < ERR_NR; k++)
		errs[k] += atomic_load_explicit(&pool->err[k], memory_order_relaxed);
	return 0;
}

/*
 * Zone i's name in the kernel's files: "Normal", and "Normal1", "Normal2" .. for the
 * further zones of one node, so (node, zone) stays a unique key for their parsers.
 */
static const char *zone_name(const struct gfa_pool *pool, unsigned int i, char *buf, size_t len,
			     const char *suffix)
{
	unsigned int k = 0;

	for (unsigned int j = 0; j < i; j++)
		k += pool->zones[j].node == pool->zones[i].node;
	if (k)
		snprintf(buf, len, "Normal%u%s", k, suffix);
	else
		snprintf(buf, len, "Normal%s", suffix);
	return buf;
}

int gfa_pool_buddyinfo(struct gfa_pool *pool, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	struct gfa_zone_stat st;

	if (!pool || (!buf && len)) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		char name[32];

		gfa_zone_stat(pool, i, &st);
		sb_printf(&sb, "Node %d, zone %8s ", pool->zones[i].node,
			  zone_name(pool, i, name, sizeof(name), ""));
		for (unsigned int o = 0; o < GFA_NR_ORDERS; o++) {
			uint64_t n = 0;

			for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
				n += st.nr_free_blocks[o][t];
			sb_printf(&sb, "%6lu ", (unsigned long)n);
		}
		/* the caches' blocks as a zone line of their own: a parser of the kernel
		 * file reads it as another (node, zone) key, never as this zone again */
		sb_printf(&sb, "\nNode %d, zone %8s ", pool->zones[i].node,
			  zone_name(pool, i, name, sizeof(name), "-pcp"));
		for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
			sb_printf(&sb, "%6lu ", (unsigned long)st.nr_pcp_blocks[o]);
		sb_printf(&sb, "\n");
	}
	return sb_finish(&sb);
}

int gfa_pool_pagetypeinfo(struct gfa_pool *pool, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	struct gfa_zone_stat st;

	if (!pool || (!buf && len)) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	sb_printf(&sb, "Page block order: %d\nPages per block:  %lu\n\n", GFA_PAGEBLOCK_ORDER,
		  GFA_PAGEBLOCK_FRAMES);
	sb_printf(&sb, "%-43s ", "Free pages count per migrate type at order");
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		sb_printf(&sb, "%6u ", o);
	sb_printf(&sb, "\n");
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		char name[32];

		gfa_zone_stat(pool, i, &st);
		zone_name(pool, i, name, sizeof(name), "");
		for (unsigned int t = 0; t < GFA_MT_TYPES; t++) {
			sb_printf(&sb, "Node %4d, zone %8s, type %12s ", pool->zones[i].node, name,
				  gfa_migratetype_name(t));
			for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
				sb_printf(&sb, "%6lu ", (unsigned long)st.nr_free_blocks[o][t]);
			sb_printf(&sb, "\n");
		}
	}
	sb_printf(&sb, "\n%-23s", "Number of blocks type ");
	for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
		sb_printf(&sb, "%12s ", gfa_migratetype_name(t));
	sb_printf(&sb, "\n");
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		char name[32];

		gfa_zone_stat(pool, i, &st);
		sb_printf(&sb, "Node %d, zone %8s ", pool->zones[i].node,
			  zone_name(pool, i, name, sizeof(name), ""));
		for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
			sb_printf(&sb, "%12lu ", (unsigned long)st.nr_pageblocks[t]);
		sb_printf(&sb, "\n");
	}
	return sb_finish(&sb);
}

int gfa_pool_vmstat_text(struct gfa_pool *pool, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	struct gfa_vmstat vs;

	if (!pool || (!buf && len)) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	gfa_pool_vmstat(pool, &vs);
#define GFA_VMSTAT_PRINT(name) sb_printf(&sb, "%s %lu\n", #name, (unsigned long)vs.name);
	GFA_VMSTAT_ITEMS(GFA_VMSTAT_PRINT)
#undef GFA_VMSTAT_PRINT
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		sb_printf(&sb, "pgalloc_order%u %lu\n", o, (unsigned long)vs.alloc_order[o]);
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		sb_printf(&sb, "pgfree_order%u %lu\n", o, (unsigned long)vs.free_order[o]);
	return sb_finish(&sb);
}
