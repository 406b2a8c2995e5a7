/* SPDX-License-Identifier: MIT */
/*
 * gfa numa layer: where guest frames live.
 *
 *   topology   nodes with memory, their CPUs and distances (libnuma), or a fake
 *              topology of N nodes carved from one real node for tests; each node's
 *              fallback order (zonelist) by distance
 *   pool setup one zone per node (zone i stands for topology node i), the zone's host
 *              memory bound to its node with mbind(MPOL_BIND) before it is populated,
 *              placement verified with get_mempolicy + move_pages afterwards
 *   policy     per-vCPU caches on the vCPU's node; gfa_numa_alloc, the kernel's THP
 *              placement: local node with direct compaction, then (if allowed) other
 *              nodes' free lists without compaction, then smaller orders
 *   claims     XENMEM_claim_pages per node
 *   statistics per-node numastat (numa_hit / numa_miss / numa_foreign ...)
 *
 * Depends on the allocator layer only; the host backing is made by the caller (the vmm
 * layer), and this layer works on the zone mappings the pool knows (gfa_pfn_to_addr).
 * A caller sets up a pool in this order:
 *
 *   t  = gfa_numa_topology_discover();             (or gfa_numa_topology_fake)
 *   gfa_numa_pool_config(&cfg, t, frames_per_node);
 *   pool = gfa_pool_create(&cfg);
 *   backing = gfa_backing_create(pool, &(struct gfa_backing_config){ .populate = false });
 *   np = gfa_numa_attach(pool, t);
 *   gfa_numa_bind_pool(np);                        (before any frame is touched)
 *   gfa_numa_populate_pool(np);                    (or let guests fault memory in)
 *   gfa_numa_verify_pool(np, NULL);                (a wrong placement is an error)
 *
 * Background compaction is per node already: gfa_compactd_start runs one worker per
 * zone, and a zone is a node here.  gfa_numa_alloc wakes a remote node's worker when it
 * found no huge block there instead of compacting that node itself.
 *
 * Errors are negative errno values as in gfa/allocator.h, whose list holds this layer's
 * own too: GFA_ENONODE (node id not in the topology), GFA_ENOCPU (CPU or CPU set with no
 * node), GFA_ESPAN (CPU set spans nodes), GFA_EREMOTE (frames on another node than their
 * zone's), GFA_EPOLICY (zone memory lacks its MPOL_BIND policy), GFA_ETOOBIG (more
 * frames than the node has), GFA_ENONUMA (no NUMA support on the host).
 */
#ifndef GFA_NUMA_H
#define GFA_NUMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <gfa/allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GFA_NUMA_MAX_NODES GFA_MAX_ZONES
#define GFA_NUMA_MAX_CPUS  4096

/* ---- topology ---- */

struct gfa_numa_node {
	int id;               /* node number: the kernel's, or 0..n-1 when fake */
	int phys_node;        /* real node the memory comes from (== id unless fake) */
	uint64_t mem_bytes;   /* memory of the node (fake: its share of the real node) */
	uint64_t free_bytes;  /* free when discovered (fake: its share) */
	unsigned int nr_cpus; /* CPUs mapped to the node */
};

/*
 * Nodes are indexed 0..nr_nodes-1 in increasing id order; index i is zone i of a pool
 * configured by gfa_numa_pool_config.  Only nodes with memory the process may use are
 * listed; CPUs of memoryless nodes are mapped to the nearest node with memory (the
 * kernel's numa_mem_id()).  Read-only after creation: any thread may read it.
 */
struct gfa_numa_topology {
	bool fake; /* carved from one real node for tests: never a real layout */
	unsigned int nr_nodes;
	struct gfa_numa_node nodes[GFA_NUMA_MAX_NODES];
	/* SLIT distances by node index: 10 local, larger is farther */
	uint8_t distance[GFA_NUMA_MAX_NODES][GFA_NUMA_MAX_NODES];
	/* zonelist[i][k]: node index of node i's k-th choice; zonelist[i][0] == i */
	uint8_t zonelist[GFA_NUMA_MAX_NODES][GFA_NUMA_MAX_NODES];
	unsigned int nr_cpus;                /* CPU numbers below this are described */
	int16_t cpu_node[GFA_NUMA_MAX_CPUS]; /* node index of each CPU, -1 none */
};

/**
 * gfa_numa_topology_discover() - the host's nodes, from libnuma
 *
 * Memory (numa_node_size64), CPUs (numa_node_of_cpu), distances (numa_distance), and each
 * node's zonelist.
 *
 * Return: a topology (free with gfa_numa_topology_free()), or NULL with errno: GFA_ENONUMA (no
 * NUMA support on this host), GFA_EOVERFLOW (more than GFA_NUMA_MAX_NODES nodes with memory),
 * GFA_ENOMEM.
 * Context: any thread.
 */
struct gfa_numa_topology *gfa_numa_topology_discover(void);

/**
 * gfa_numa_topology_fake() - a fake topology for tests
 * @nr_nodes: nodes to carve from the first real node with memory (node 0 when libnuma is
 *            unavailable)
 * @distance: @nr_nodes * @nr_nodes SLIT values (row-major, diagonal 10, others 11..254),
 *            or NULL for 10 local / 20 remote
 *
 * Each node gets an equal share of the real node's memory and a contiguous block of its
 * CPUs (nodes may get none); CPUs of other real nodes map to no node.  Binding a fake node
 * binds to the real node it was carved from (phys_node).  Everything that prints a
 * topology says "fake".
 *
 * Return: the topology, or NULL with errno: GFA_EINVAL (@nr_nodes 0 or above
 * GFA_NUMA_MAX_NODES, a bad distance), GFA_ENOMEM.
 * Context: any thread.
 */
struct gfa_numa_topology *gfa_numa_topology_fake(unsigned int nr_nodes,
						 const unsigned int *distance);

/**
 * gfa_numa_topology_free() - free a topology
 * @t: the topology; NULL is a no-op
 *
 * Context: when no other thread reads it.
 */
void gfa_numa_topology_free(struct gfa_numa_topology *t);

/**
 * gfa_numa_node_index() - index of a node id in a topology
 *
 * Return: the index, or GFA_EFAULT, GFA_ENONODE.
 * Context: any thread.
 */
int gfa_numa_node_index(const struct gfa_numa_topology *t, int node);

/**
 * gfa_numa_cpu_node() - node id of a CPU
 *
 * Return: the node id, or GFA_EFAULT, GFA_ENOCPU.
 * Context: any thread.
 */
int gfa_numa_cpu_node(const struct gfa_numa_topology *t, unsigned int cpu);

/**
 * gfa_numa_cpuset_node() - node id of a CPU set
 * @mask: @nbits bits, bit c = CPU c, as in cpu_set_t
 * @nbits: bits in @mask
 *
 * CPUs with no node in @t are ignored.
 *
 * Return: the node when all the others belong to one node, or GFA_EFAULT, GFA_EINVAL
 * (empty set), GFA_ENOCPU (no CPU of the set has a node), GFA_ESPAN (CPUs of several
 * nodes).
 * Context: any thread.
 */
int gfa_numa_cpuset_node(const struct gfa_numa_topology *t, const unsigned long *mask,
			 size_t nbits);

/**
 * gfa_numa_thread_node() - node id of the calling thread
 * @pinned: gets whether the thread's affinity lies within one node (may be NULL)
 *
 * The node of its CPU affinity (sched_getaffinity) when that lies within one node; when
 * the affinity spans nodes (an unpinned thread), the node of the CPU it runs on now
 * (sched_getcpu).
 *
 * Return: the node, or GFA_EFAULT, GFA_ENOCPU, or the syscall's error.
 * Context: the thread itself.  Makes a system call: look the node up once per thread, not
 * per allocation.
 */
int gfa_numa_thread_node(const struct gfa_numa_topology *t, bool *pinned);

/**
 * gfa_numa_zonelist() - a node's fallback order
 * @nodes: gets at most @max node ids; may be NULL when @max is 0 (to learn the count)
 * @max: size of @nodes
 *
 * Itself first, then by distance; equal distances are taken round-robin from the node's
 * own id, so nodes at one distance spread their fallbacks as the kernel's node_load does.
 *
 * Return: the number of nodes (which may exceed @max), or GFA_EFAULT, GFA_ENONODE.
 * Context: any thread.
 */
int gfa_numa_zonelist(const struct gfa_numa_topology *t, int node, int *nodes, unsigned int max);

/**
 * gfa_numa_topology_text() - a topology as `numactl --hardware` prints it
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * A header line ("fake topology: ..." or "topology: ..."), then per node its CPUs, size,
 * free memory and zonelist, then the distance table.
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_numa_topology_text(const struct gfa_numa_topology *t, char *buf, size_t len);

/* ---- pool configuration ---- */

/**
 * gfa_numa_pool_config() - a pool config with one zone per node
 * @cfg: gets default tunables (as gfa_pool_config_init()) and zone i = t->nodes[i]
 * @frames_per_node: frames of every zone
 *
 * Return: 0, or GFA_EFAULT, GFA_EINVAL (no nodes, frames below a pageblock or above
 * 2^31), GFA_ETOOBIG (more than a node's memory); @cfg is unchanged on error.
 * Context: any thread.
 */
int gfa_numa_pool_config(struct gfa_pool_config *cfg, const struct gfa_numa_topology *t,
			 uint64_t frames_per_node);
/**
 * gfa_numa_pool_config_nodes() - gfa_numa_pool_config() with frames per node
 * @frames: frames[i] frames for node index i (t->nr_nodes entries)
 *
 * Return: as gfa_numa_pool_config().
 * Context: any thread.
 */
int gfa_numa_pool_config_nodes(struct gfa_pool_config *cfg, const struct gfa_numa_topology *t,
			       const uint64_t *frames);

/* ---- a pool placed on the topology ---- */

struct gfa_numa_pool;

/**
 * gfa_numa_attach() - place a pool on a topology
 * @pool: a pool made from gfa_numa_pool_config(@t)
 * @t: the topology (copied)
 *
 * Holds the per-node statistics.  Zone i must stand for t->nodes[i] (only the zone count
 * can be checked).
 *
 * Return: the NUMA pool, or NULL with errno: GFA_EFAULT, GFA_EINVAL (the pool's zone count
 * differs from @t's node count), GFA_ENOMEM.
 * Context: while no other thread uses the NUMA pool.
 */
struct gfa_numa_pool *gfa_numa_attach(struct gfa_pool *pool, const struct gfa_numa_topology *t);
/**
 * gfa_numa_detach() - free the NUMA pool, leaving the pool alone
 * @np: the NUMA pool; NULL is a no-op
 *
 * Context: while no other thread uses @np.
 */
void gfa_numa_detach(struct gfa_numa_pool *np);
/**
 * gfa_numa_pool() - the pool of a NUMA pool
 *
 * Return: the pool, or NULL for a NULL @np.
 * Context: any thread.
 */
struct gfa_pool *gfa_numa_pool(const struct gfa_numa_pool *np);
/**
 * gfa_numa_topology() - the NUMA pool's copy of its topology
 *
 * Return: the topology, or NULL for a NULL @np.
 * Context: any thread (read-only).
 */
const struct gfa_numa_topology *gfa_numa_topology(const struct gfa_numa_pool *np);
/**
 * gfa_numa_node_zone() - zone index of a node id
 *
 * Return: the zone index, or GFA_EFAULT, GFA_ENONODE.
 * Context: any thread.
 */
int gfa_numa_node_zone(const struct gfa_numa_pool *np, int node);

/**
 * gfa_numa_bind_pool() - bind every zone's host memory to its node
 *
 * mbind(MPOL_BIND, {phys_node}, MPOL_MF_STRICT | MPOL_MF_MOVE) over each zone's mapping.
 * On a memfd mapping this sets the file's shared policy, so every later mapping of it
 * (guest windows) follows it.  Call before the memory is populated: pages already
 * present are moved if they can be, and a page that cannot be is an error.
 *
 * Return: 0, or GFA_EFAULT, GFA_ENOBACKING (a zone without backing), or mbind's error (in
 * containers that forbid it, for a page that could not move, for a node the process may
 * not use); on error every zone, the failing one included, is back to the
 * default policy.
 * Context: not concurrent with populating or allocating from the pool.
 */
int gfa_numa_bind_pool(struct gfa_numa_pool *np);
/**
 * gfa_numa_bind_zone() - gfa_numa_bind_pool() for one zone
 *
 * Return: as gfa_numa_bind_pool(), plus GFA_ERANGE (no such zone).
 * Context: as gfa_numa_bind_pool().
 */
int gfa_numa_bind_zone(struct gfa_numa_pool *np, unsigned int zone);

/**
 * gfa_numa_populate_pool() - fault in every frame of the pool for writing
 *
 * MADV_POPULATE_WRITE, without changing the contents (a read-and-write-back loop on
 * kernels before 5.14).  Run it after binding, before guests start.
 *
 * Return: 0, GFA_EFAULT, GFA_ENOBACKING or madvise's error.
 * Context: not concurrent with binding the pool.
 */
int gfa_numa_populate_pool(struct gfa_numa_pool *np);
/**
 * gfa_numa_populate_zone() - gfa_numa_populate_pool() for one zone
 *
 * Return: as gfa_numa_populate_pool(), plus GFA_ERANGE.
 * Context: as gfa_numa_populate_pool().
 */
int gfa_numa_populate_zone(struct gfa_numa_pool *np, unsigned int zone);

/* What gfa_numa_verify_zone found. */
struct gfa_numa_placement {
	unsigned int zone;
	int zone_node;           /* the zone's node in the topology */
	bool fake;               /* fake topology: zone_node is carved from `node` */
	int node;                /* the real node the memory must be on (phys_node) */
	bool policy_ok;          /* get_mempolicy at the zone start: MPOL_BIND to node only */
	int policy_mode;         /* the mode found (MPOL_*) */
	uint64_t frames;         /* frames checked (the whole zone) */
	uint64_t on_node;        /* present on node */
	uint64_t elsewhere;      /* present on another node */
	uint64_t not_present;    /* not faulted in yet (placed on first touch) */
	int64_t first_wrong_pfn; /* first frame found elsewhere, -1 if none */
	int first_wrong_node;    /* and the node it was on */
	uint64_t reserved[4];    /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_numa_verify_zone() - check where a zone's frames are
 * @p: gets what was found (reserved words zeroed)
 *
 * The policy (get_mempolicy) and every present frame's node (move_pages(2) with no target
 * nodes, which only reports).  Costs one move_pages call per 1024 frames.
 *
 * Return: 0, or GFA_EREMOTE (a frame on another node), GFA_EPOLICY (no MPOL_BIND to the
 * node), GFA_EFAULT, GFA_ERANGE, GFA_ENOBACKING (no backing), or the syscall's error.
 * Context: any thread.
 */
int gfa_numa_verify_zone(struct gfa_numa_pool *np, unsigned int zone, struct gfa_numa_placement *p);
/**
 * gfa_numa_verify_pool() - gfa_numa_verify_zone() for every zone
 * @p: gets one entry per zone (may be NULL)
 *
 * Return: 0 or the first error.
 * Context: any thread.
 */
int gfa_numa_verify_pool(struct gfa_numa_pool *np, struct gfa_numa_placement *p);
/**
 * gfa_numa_placement_text() - one line per placement
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * "zone 1 (node 1): 16384 frames, 16384 on node, ...".
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_numa_placement_text(const struct gfa_numa_placement *p, char *buf, size_t len);

/* ---- per-vCPU caches and allocation ---- */

/**
 * gfa_numa_pcp_create() - a per-vCPU cache over a node's zone
 * @node: the node id, or -1 for the calling thread's node (gfa_numa_thread_node())
 *
 * Destroy it with gfa_pcp_destroy().
 *
 * Return: the cache, or NULL with errno: GFA_EFAULT, GFA_ENONODE (no such node), GFA_ENOCPU (the
 * thread's CPUs have no node), GFA_ENOMEM.
 * Context: as gfa_pcp_create().
 */
struct gfa_pcp *gfa_numa_pcp_create(struct gfa_numa_pool *np, int node);
/**
 * gfa_numa_pcp_node() - node id of the zone a cache serves
 *
 * Return: the node id, or GFA_EFAULT, GFA_EINVAL (another pool's cache, or a zone not in
 * @np's topology).
 * Context: any thread.
 */
int gfa_numa_pcp_node(struct gfa_numa_pool *np, struct gfa_pcp *pcp);

/* Flags GFA_NUMA_REMOTE and GFA_NUMA_SMALLER: in gfa/allocator.h's list of flags. */

/**
 * gfa_numa_alloc() - allocate for a requester on a node, as the kernel places THP
 * @pcp: the calling thread's cache over the local node's zone, or NULL
 * @node: the requester's node id; -1: @pcp's node, or the calling thread's without @pcp
 * @flags: GFA_NUMA_REMOTE, GFA_NUMA_SMALLER, GFA_ALLOC_NOFALLBACK (passed on),
 *         GFA_ALLOC_NOCOMPACT (no compaction anywhere)
 * @order_out: gets the order obtained (may be NULL)
 *
 *   1. the local node's zone, through @pcp when given, with direct compaction (unless
 *      GFA_ALLOC_NOCOMPACT): the allocating thread compacts its own node only;
 *   2. with GFA_NUMA_REMOTE, the other nodes' zones in zonelist order, free lists only; a
 *      remote node that had no huge block gets its background worker woken
 *      (gfa_compactd_wake()) instead;
 *   3. with GFA_NUMA_SMALLER, orders order-1 .. 0: the local zone first (without
 *      compaction: it ran already), then, with GFA_NUMA_REMOTE, the other zones; local
 *      pieces beat remote ones below the huge order, where size buys no PMD.
 * Counts per node: numa_hit, numa_miss, numa_foreign, ...
 *
 * Return: the first pfn, or GFA_EFAULT, GFA_EORDER, GFA_EMIGRATE, GFA_EINVAL (unknown
 * flags, @node and @pcp disagree, or @pcp is another pool's), GFA_ENONODE, GFA_ENOCPU,
 * GFA_ENOMEM (nothing found), GFA_ETHREAD.
 * Context: any thread; @pcp as gfa_pcp_alloc() (its holder only).
 */
int64_t gfa_numa_alloc(struct gfa_numa_pool *np, struct gfa_pcp *pcp, int node, unsigned int order,
		       enum gfa_migratetype mt, uint64_t owner, unsigned int flags,
		       unsigned int *order_out);

/* ---- claims (Xen's XENMEM_claim_pages, per node) ---- */

/**
 * gfa_numa_claim() - reserve free frames of a node's zone for an owner (gfa_zone_claim())
 *
 * Return: 0, or GFA_EFAULT, GFA_ENONODE, GFA_ETOOBIG (more frames than the node's zone has
 * at all), GFA_EEXIST (@owner already claims on that node), GFA_ENOSPC (more than the node's
 * unclaimed free frames now, or the claim table is full).  Nothing changes on error but a
 * drain of the zone's caches when their frames would have made up the difference.
 * Context: any thread.
 */
int gfa_numa_claim(struct gfa_numa_pool *np, int node, uint64_t owner, uint64_t nr_frames);
/**
 * gfa_numa_claim_nodes() - claims on several nodes at once, all or nothing
 * @frames: frames[i] frames on node index i (0: no claim there)
 *
 * Return: 0, or the first node's error (then no claim is kept).
 * Context: any thread.
 */
int gfa_numa_claim_nodes(struct gfa_numa_pool *np, uint64_t owner, const uint64_t *frames);
/**
 * gfa_numa_unclaim() - drop an owner's claim on a node
 *
 * Return: the frames it did not use, or GFA_EFAULT, GFA_ENONODE, GFA_ENOTFOUND (no claim).
 * Context: any thread.
 */
int64_t gfa_numa_unclaim(struct gfa_numa_pool *np, int node, uint64_t owner);
/**
 * gfa_numa_claimed() - frames claimed on a node, all owners
 *
 * Return: the frame count, or GFA_EFAULT, GFA_ENONODE.
 * Context: any thread.
 */
int64_t gfa_numa_claimed(struct gfa_numa_pool *np, int node);

/* ---- statistics ---- */

struct gfa_numa_node_stat {
	int node;
	unsigned int zone;
	uint64_t nr_frames;
	uint64_t nr_free;    /* frames free in the zone, caches included */
	uint64_t nr_claimed; /* frames promised to claims */
	/* blocks placed by gfa_numa_alloc, the kernel's numastat names: */
	uint64_t numa_hit;       /* served here for a requester on this node */
	uint64_t numa_miss;      /* served here for a requester on another node */
	uint64_t numa_foreign;   /* asked by this node, served on another */
	uint64_t thp_local;      /* order >= 9 served here, for this node */
	uint64_t thp_remote;     /* order >= 9 this node asked for, served elsewhere */
	uint64_t order_fallback; /* this node's requests served at a smaller order */
	uint64_t alloc_fail;     /* this node's requests that got nothing */
	/* remote zones this node's requests tried with compaction allowed: by design 0 */
	uint64_t compact_remote;
	uint64_t reserved[8]; /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_numa_node_stat() - snapshot of a node's statistics
 * @st: gets them (reserved words zeroed)
 *
 * Return: 0, GFA_EFAULT, GFA_ENONODE.
 * Context: any thread.
 */
int gfa_numa_node_stat(struct gfa_numa_pool *np, int node, struct gfa_numa_node_stat *st);
/**
 * gfa_numa_stat_text() - per-node summary text
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * A topology header (saying "fake" for a fake topology), then one line per node ("Node 0:
 * frames ... free ... claimed ... numa_hit ...").  The free lists per node are
 * gfa_pool_buddyinfo()'s lines (labelled with the node id).
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_numa_stat_text(struct gfa_numa_pool *np, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* GFA_NUMA_H */
