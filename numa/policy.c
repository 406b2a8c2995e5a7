// SPDX-License-Identifier: MIT
/*
 * Node-local placement policy: a pool attached to its topology, per-vCPU caches on the
 * vCPU's node, the THP placement order of gfa_numa_alloc, claims per node and per-node
 * statistics.
 *
 * Why compaction stays local: direct compaction runs in the allocating thread.  On a
 * remote node it would stall a vCPU on memory it will then reach across the
 * interconnect, and it competes with that node's own vCPUs for their zone lock.  Linux
 * settled on the same rule for THP (2019, "mm, thp: relax __GFP_THISNODE for
 * MADV_HUGEPAGE mappings" and its follow-ups): compact the local node; take a remote
 * huge page only if one is free already; else fall back to base pages.  Remote nodes
 * are compacted by their own background worker (gfa_compactd_*), which we wake.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "numa/internal.h"
#include "allocator/layers.h"

#define NUMA_FLAGS (GFA_NUMA_REMOTE | GFA_NUMA_SMALLER | GFA_ALLOC_NOFALLBACK | GFA_ALLOC_NOCOMPACT)

#define STAT_INC(np, i, f) atomic_fetch_add_explicit(&(np)->c[i].f, 1, memory_order_relaxed)
#define STAT_GET(np, i, f) atomic_load_explicit(&(np)->c[i].f, memory_order_relaxed)

struct gfa_numa_pool *gfa_numa_attach(struct gfa_pool *pool, const struct gfa_numa_topology *t)
{
	struct gfa_numa_pool *np;

	if (!pool || !t) {
		pool_count_error(pool, GFA_EFAULT);
		errno = EFAULT;
		return NULL;
	}
	if (gfa_pool_nr_zones(pool) != t->nr_nodes) {
		errno = EINVAL;
		return NULL;
	}
	np = calloc(1, sizeof(*np));
	if (!np)
		return NULL;
	np->pool = pool;
	np->topo = *t;
	return np;
}

void gfa_numa_detach(struct gfa_numa_pool *np)
{
	free(np);
}

struct gfa_pool *gfa_numa_pool(const struct gfa_numa_pool *np)
{
	return np ? np->pool : NULL;
}

const struct gfa_numa_topology *gfa_numa_topology(const struct gfa_numa_pool *np)
{
	return np ? &np->topo : NULL;
}

int gfa_numa_node_zone(const struct gfa_numa_pool *np, int node)
{
	return np ? gfa_numa_node_index(&np->topo, node) : GFA_EFAULT;
}

/* Node index for node (-1: the calling thread's node). */
static int resolve_node(struct gfa_numa_pool *np, int node)
{
	if (node == -1) {
		node = gfa_numa_thread_node(&np->topo, NULL);
		if (node < 0)
			return node;
	}
	return gfa_numa_node_index(&np->topo, node);
}

struct gfa_pcp *gfa_numa_pcp_create(struct gfa_numa_pool *np, int node)
{
	int zone;

	if (!np) {
		errno = EFAULT;
		return NULL;
	}
	zone = resolve_node(np, node);
	if (zone < 0) {
		errno = -zone;
		return NULL;
	}
	return gfa_pcp_create(np->pool, (unsigned int)zone);
}

/*
 * Zone index a cache serves, checked against the pool and the topology.  Lock-free
 * (gfa_pcp_stat would hold the cache remotely: a membarrier per allocation).
 */
static int pcp_zone(struct gfa_numa_pool *np, struct gfa_pcp *pcp)
{
	int zone = gfa_pcp_zone(pcp);

	if (zone < 0)
		return zone;
	if (gfa_pcp_pool(pcp) != np->pool)
		return GFA_EINVAL; /* another pool's cache: not this requester's */
	return (unsigned int)zone < np->topo.nr_nodes ? zone : GFA_EINVAL;
}

int gfa_numa_pcp_node(struct gfa_numa_pool *np, struct gfa_pcp *pcp)
{
	int zone;

	if (!np)
		return GFA_EFAULT;
	if (!pcp)
		return pool_count_error(np->pool, GFA_EFAULT);
	zone = pcp_zone(np, pcp);
	return zone < 0 ? zone : np->topo.nodes[zone].id;
}

/* ---- allocation ---- */

struct numa_req {
	struct gfa_numa_pool *np;
	struct gfa_pcp *pcp; /* over the local zone, or NULL */
	unsigned int local;  /* requester's node index = zone */
	enum gfa_migratetype mt;
	uint64_t owner;
	unsigned int aflags; /* allocator flags the caller passed */
};

static int64_t try_local(struct numa_req *r, unsigned int order, unsigned int aflags)
{
	if (r->pcp)
		return gfa_pcp_alloc(r->pcp, order, r->mt, r->owner, aflags);
	return gfa_alloc(r->np->pool, r->local, order, r->mt, r->owner, aflags);
}

/*
 * Free lists of the other nodes in zonelist order, never compacting them.  A node
 * without a huge block gets its background worker woken instead.  Returns the pfn
 * and the zone in *zone, GFA_ENOMEM, or a hard error.
 */
static int64_t try_remote(struct numa_req *r, unsigned int order, unsigned int *zone)
{
	const struct gfa_numa_topology *t = &r->np->topo;
	unsigned int aflags = r->aflags | GFA_ALLOC_NOCOMPACT;

	for (unsigned int k = 1; k < t->nr_nodes; k++) {
		unsigned int z = t->zonelist[r->local][k];
		int64_t pfn;

		if (!(aflags & GFA_ALLOC_NOCOMPACT)) /* guards the rule against edits */
			STAT_INC(r->np, r->local, compact_remote);
		pfn = gfa_alloc(r->np->pool, z, order, r->mt, r->owner, aflags);
		if (pfn != GFA_ENOMEM) {
			*zone = z;
			return pfn;
		}
		if (order >= GFA_PAGEBLOCK_ORDER)
			gfa_compactd_wake(r->np->pool, z);
	}
	return GFA_ENOMEM;
}

/* The placement order of gfa_numa_alloc; *zone and *got describe the block. */
static int64_t numa_place(struct numa_req *r, unsigned int order, unsigned int flags,
			  unsigned int *zone, unsigned int *got)
{
	int64_t pfn;

	*zone = r->local;
	*got = order;
	pfn = try_local(r, order, r->aflags);
	if (pfn != GFA_ENOMEM)
		return pfn;
	if (flags & GFA_NUMA_REMOTE) {
		pfn = try_remote(r, order, zone);
		if (pfn != GFA_ENOMEM)
			return pfn;
	}
	if (!(flags & GFA_NUMA_SMALLER))
		return GFA_ENOMEM;
	/* local pieces first: below the huge order a remote block buys no PMD */
	*zone = r->local;
	for (int o = (int)order - 1; o >= 0; o--) {
		*got = (unsigned int)o;
		pfn = try_local(r, *got, r->aflags | GFA_ALLOC_NOCOMPACT);
		if (pfn != GFA_ENOMEM)
			return pfn;
	}
	if (!(flags & GFA_NUMA_REMOTE))
		return GFA_ENOMEM;
	for (int o = (int)order - 1; o >= 0; o--) {
		*got = (unsigned int)o;
		pfn = try_remote(r, *got, zone);
		if (pfn != GFA_ENOMEM)
			return pfn;
	}
	return GFA_ENOMEM;
}

static void count_placement(struct gfa_numa_pool *np, unsigned int local, unsigned int zone,
			    unsigned int order, unsigned int got)
{
	GFA_BUG_ON(local >= np->topo.nr_nodes || zone >= np->topo.nr_nodes || got > order);
	if (zone == local) {
		STAT_INC(np, local, numa_hit);
		if (got >= GFA_PAGEBLOCK_ORDER)
			STAT_INC(np, local, thp_local);
	} else {
		STAT_INC(np, zone, numa_miss);
		STAT_INC(np, local, numa_foreign);
		if (got >= GFA_PAGEBLOCK_ORDER)
			STAT_INC(np, local, thp_remote);
	}
	if (got < order)
		STAT_INC(np, local, order_fallback);
}

/* Requester's node index from pcp and node; errors as gfa_numa_alloc. */
static int requester_zone(struct gfa_numa_pool *np, struct gfa_pcp *pcp, int node)
{
	int pz, nz;

	if (!pcp)
		return resolve_node(np, node);
	pz = pcp_zone(np, pcp);
	if (pz < 0 || node == -1)
		return pz;
	nz = gfa_numa_node_index(&np->topo, node);
	if (nz < 0)
		return nz;
	return nz == pz ? pz : GFA_EINVAL;
}

int64_t gfa_numa_alloc(struct gfa_numa_pool *np, struct gfa_pcp *pcp, int node, unsigned int order,
		       enum gfa_migratetype mt, uint64_t owner, unsigned int flags,
		       unsigned int *order_out)
{
	struct numa_req r = { .np = np, .pcp = pcp, .mt = mt, .owner = owner };
	unsigned int zone, got;
	int64_t pfn;
	int local;

	if (!np)
		return GFA_EFAULT;
	/* bad arguments are counted as the allocator counts its own */
	if (order > GFA_MAX_ORDER)
		return pool_count_error(np->pool, GFA_EORDER);
	if ((unsigned int)mt >= GFA_MT_PCPTYPES)
		return pool_count_error(np->pool, GFA_EMIGRATE);
	if (flags & ~NUMA_FLAGS)
		return pool_count_error(np->pool, GFA_EINVAL);
	local = requester_zone(np, pcp, node);
	if (local < 0)
		return pool_count_error(np->pool, local);
	r.local = (unsigned int)local;
	r.aflags = flags & (GFA_ALLOC_NOFALLBACK | GFA_ALLOC_NOCOMPACT);
	pfn = numa_place(&r, order, flags, &zone, &got);
	if (pfn < 0) {
		if (pfn == GFA_ENOMEM)
			STAT_INC(np, r.local, alloc_fail);
		return pfn;
	}
	count_placement(np, r.local, zone, order, got);
	if (order_out)
		*order_out = got;
	return pfn;
}

/* ---- claims ---- */

static int claim_check(struct gfa_numa_pool *np, unsigned int zone, uint64_t nr_frames)
{
	uint64_t start, n = 0;

	gfa_zone_span(np->pool, zone, &start, &n);
	return nr_frames > n ? GFA_ETOOBIG : 0;
}

int gfa_numa_claim(struct gfa_numa_pool *np, int node, uint64_t owner, uint64_t nr_frames)
{
	int zone = gfa_numa_node_zone(np, node), err;

	if (zone < 0)
		return zone;
	err = claim_check(np, (unsigned int)zone, nr_frames);
	return err ? err : gfa_zone_claim(np->pool, (unsigned int)zone, owner, nr_frames);
}

int gfa_numa_claim_nodes(struct gfa_numa_pool *np, uint64_t owner, const uint64_t *frames)
{
	unsigned int z;
	int err = 0;

	if (!np)
		return GFA_EFAULT;
	if (!frames)
		return pool_count_error(np->pool, GFA_EFAULT);
	for (z = 0; z < np->topo.nr_nodes; z++) {
		err = claim_check(np, z, frames[z]);
		if (err)
			return err;
	}
	for (z = 0; z < np->topo.nr_nodes && !err; z++)
		if (frames[z])
			err = gfa_zone_claim(np->pool, z, owner, frames[z]);
	if (err) {
		/* z - 1 failed; undo the claims made before it */
		for (z--; z-- > 0;)
			if (frames[z])
				gfa_zone_unclaim(np->pool, z, owner);
	}
	return err;
}

int64_t gfa_numa_unclaim(struct gfa_numa_pool *np, int node, uint64_t owner)
{
	int zone = gfa_numa_node_zone(np, node);

	if (zone < 0)
		return zone;
	return gfa_zone_unclaim(np->pool, (unsigned int)zone, owner);
}

int64_t gfa_numa_claimed(struct gfa_numa_pool *np, int node)
{
	int zone = gfa_numa_node_zone(np, node);

	if (zone < 0)
		return zone;
	return (int64_t)gfa_zone_claimed(np->pool, (unsigned int)zone);
}

/* ---- statistics ---- */

int gfa_numa_node_stat(struct gfa_numa_pool *np, int node, struct gfa_numa_node_stat *st)
{
	struct gfa_zone_stat zs;
	int zone = gfa_numa_node_zone(np, node), err;

	if (zone < 0)
		return zone;
	if (!st)
		return pool_count_error(np->pool, GFA_EFAULT);
	err = gfa_zone_stat(np->pool, (unsigned int)zone, &zs);
	if (err)
		return err;
	*st = (struct gfa_numa_node_stat){
		.node = node,
		.zone = (unsigned int)zone,
		.nr_frames = zs.nr_frames,
		.nr_free = zs.nr_free,
		.nr_claimed = gfa_zone_claimed(np->pool, (unsigned int)zone),
		.numa_hit = STAT_GET(np, zone, numa_hit),
		.numa_miss = STAT_GET(np, zone, numa_miss),
		.numa_foreign = STAT_GET(np, zone, numa_foreign),
		.thp_local = STAT_GET(np, zone, thp_local),
		.thp_remote = STAT_GET(np, zone, thp_remote),
		.order_fallback = STAT_GET(np, zone, order_fallback),
		.alloc_fail = STAT_GET(np, zone, alloc_fail),
		.compact_remote = STAT_GET(np, zone, compact_remote),
	};
	return 0;
}

int gfa_numa_stat_text(struct gfa_numa_pool *np, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	const struct gfa_numa_topology *t;

	if (!np)
		return GFA_EFAULT;
	if (!buf && len)
		return pool_count_error(np->pool, GFA_EFAULT);
	t = &np->topo;
	if (t->fake)
		sb_printf(&sb, "numa: fake topology, %u nodes carved from real node %d\n",
			  t->nr_nodes, t->nodes[0].phys_node);
	else
		sb_printf(&sb, "numa: %u nodes\n", t->nr_nodes);
	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		struct gfa_numa_node_stat st;

		if (gfa_numa_node_stat(np, t->nodes[i].id, &st))
			continue;
		sb_printf(&sb,
			  "Node %d%s: zone %u frames %lu free %lu claimed %lu "
			  "numa_hit %lu numa_miss %lu numa_foreign %lu thp_local %lu "
			  "thp_remote %lu order_fallback %lu alloc_fail %lu "
			  "compact_remote %lu\n",
			  st.node, t->fake ? " (fake)" : "", st.zone, (unsigned long)st.nr_frames,
			  (unsigned long)st.nr_free, (unsigned long)st.nr_claimed,
			  (unsigned long)st.numa_hit, (unsigned long)st.numa_miss,
			  (unsigned long)st.numa_foreign, (unsigned long)st.thp_local,
			  (unsigned long)st.thp_remote, (unsigned long)st.order_fallback,
			  (unsigned long)st.alloc_fail, (unsigned long)st.compact_remote);
	}
	return sb_finish(&sb);
}
