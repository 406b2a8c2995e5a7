// SPDX-License-Identifier: MIT
/*
 * Tests for the numa layer (numa/ sources).
 *
 * Suite "numa" runs anywhere on a fake topology (N nodes carved from one real node):
 * topology, zonelists, CPU -> node, caches per node, the THP placement policy (proved
 * with an owner whose migrate op records every move: direct compaction only ever moves
 * frames inside the requester's zone, and the remote zone's free lists stay byte for
 * byte the same), claims, statistics, binding and bad input.
 *
 * Suite "numa_real" needs two real nodes.  Where the host has one, suite "numa_qemu"
 * boots a QEMU TCG guest with two nodes (tools/kvm-in-qemu.sh --numa 2) and runs
 * numa_real there (GFA_IN_QEMU=1: inside, fewer than two nodes is a failure, not a
 * skip).  numa_real proves with move_pages(2) that the frames of zone k live on node k,
 * that a wrong placement is reported, and that local compaction with real copies keeps
 * every moved frame on the local node.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gfa/numa.h"
#include "gfa/vmm.h"
#include "tests/qemu_util.h"

extern char **environ;

#define NUMAT_PB     GFA_PAGEBLOCK_FRAMES
#define NUMAT_FRAMES (16 * NUMAT_PB) /* 32 MiB per fake node */
#define NUMAT_REAL   (32 * NUMAT_PB) /* 64 MiB per real node */
#define NUMAT_OWNER  0x5151
#define NUMAT_OTHER  0x6262

/* ---- an owner that records every move ------------------------------------ */

struct numat_owner {
	struct gfa_pool *pool;
	uint64_t id;
	pthread_mutex_t lock;
	bool copy;       /* copy frame memory (pool has backing) */
	int refuse_zone; /* refuse moves out of this zone; -1: none */
	uint64_t moves_from[GFA_MAX_ZONES];
	uint64_t moves_to[GFA_MAX_ZONES];
	uint64_t cross_zone; /* moves whose src and dst zones differ */
	uint64_t nr_pfns;
	uint64_t *page_of; /* pfn -> logical page + 1 (0: none) */
	uint64_t *pfn_of;  /* logical page -> pfn */
	uint64_t nr_pages;
};

static int numat_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct numat_owner *o = ctx;
	int sz = gfa_pfn_to_zone(o->pool, src), dz = gfa_pfn_to_zone(o->pool, dst);

	(void)owner;
	pthread_mutex_lock(&o->lock);
	if (sz == o->refuse_zone) {
		pthread_mutex_unlock(&o->lock);
		return -EBUSY;
	}
	if (o->copy)
		memcpy(gfa_pfn_to_addr(o->pool, dst), gfa_pfn_to_addr(o->pool, src),
		       GFA_FRAME_SIZE << order);
	o->moves_from[sz]++;
	o->moves_to[dz]++;
	if (sz != dz)
		o->cross_zone++;
	if (o->page_of[src]) {
		o->pfn_of[o->page_of[src] - 1] = dst;
		o->page_of[dst] = o->page_of[src];
		o->page_of[src] = 0;
	}
	pthread_mutex_unlock(&o->lock);
	return 0;
}

static const struct gfa_owner_ops numat_ops = { .migrate = numat_migrate };

static uint64_t numat_pool_pfns(struct gfa_pool *p)
{
	uint64_t start, n;
	unsigned int last = gfa_pool_nr_zones(p) - 1;

	cr_assert_eq(gfa_zone_span(p, last, &start, &n), 0);
	return start + n;
}

static struct numat_owner *numat_owner_new(struct gfa_pool *p, uint64_t id, bool reg)
{
	struct numat_owner *o = calloc(1, sizeof(*o));

	cr_assert_not_null(o);
	o->pool = p;
	o->id = id;
	o->refuse_zone = -1;
	o->nr_pfns = numat_pool_pfns(p);
	o->page_of = calloc(o->nr_pfns, sizeof(*o->page_of));
	o->pfn_of = calloc(o->nr_pfns, sizeof(*o->pfn_of));
	cr_assert(o->page_of && o->pfn_of);
	pthread_mutex_init(&o->lock, NULL);
	if (reg)
		cr_assert_eq(gfa_owner_register(p, id, &numat_ops, o), 0);
	return o;
}

static void numat_owner_free(struct numat_owner *o)
{
	free(o->page_of);
	free(o->pfn_of);
	free(o);
}

/* Frame content that names its logical page, checked after moves. */
static void numat_stamp(struct numat_owner *o, uint64_t page)
{
	uint64_t *m = gfa_pfn_to_addr(o->pool, o->pfn_of[page]);

	m[0] = o->id;
	m[1] = page;
}

static bool numat_stamp_ok(struct numat_owner *o, uint64_t page)
{
	uint64_t *m = gfa_pfn_to_addr(o->pool, o->pfn_of[page]);

	return m[0] == o->id && m[1] == page;
}

/*
 * Allocate every frame of zone as an order-0 movable page of o, then free the frames
 * whose offset in their pageblock satisfies keep_free(offset): fragmentation on demand.
 */
static void numat_fill(struct numat_owner *o, unsigned int zone, bool (*keep_free)(uint64_t))
{
	int64_t pfn;

	while ((pfn = gfa_alloc(o->pool, zone, 0, GFA_MT_MOVABLE, o->id, GFA_ALLOC_NOCOMPACT)) >=
	       0) {
		pthread_mutex_lock(&o->lock);
		o->pfn_of[o->nr_pages] = (uint64_t)pfn;
		o->page_of[pfn] = ++o->nr_pages;
		pthread_mutex_unlock(&o->lock);
		if (o->copy)
			numat_stamp(o, o->nr_pages - 1);
	}
	cr_assert_eq(pfn, GFA_ENOMEM);
	if (!keep_free)
		return;
	for (uint64_t i = 0; i < o->nr_pages; i++) {
		uint64_t p;

		pthread_mutex_lock(&o->lock);
		p = o->pfn_of[i];
		if (gfa_pfn_to_zone(o->pool, p) != (int)zone || !keep_free(p & (NUMAT_PB - 1))) {
			pthread_mutex_unlock(&o->lock);
			continue;
		}
		o->page_of[p] = 0;
		o->pfn_of[i] = UINT64_MAX;
		pthread_mutex_unlock(&o->lock);
		cr_assert_eq(gfa_free(o->pool, p, 0, o->id), 0);
	}
}

static bool numat_first_half(uint64_t off)
{
	return off < NUMAT_PB / 2;
}
static bool numat_order3_holes(uint64_t off)
{
	return (off & 15) < 8;
}
static bool numat_order4_holes(uint64_t off)
{
	return (off & 31) < 16;
}

/* ---- pools on fake topologies -------------------------------------------- */

struct numat_env {
	struct gfa_numa_topology *t;
	struct gfa_pool *pool;
	struct gfa_numa_pool *np;
	struct gfa_backing *b;
};

static struct numat_env numat_env_fake(unsigned int nodes, uint64_t frames)
{
	struct numat_env e = { 0 };
	struct gfa_pool_config cfg;

	e.t = gfa_numa_topology_fake(nodes, NULL);
	cr_assert_not_null(e.t, "fake topology: %s", strerror(errno));
	cr_assert_eq(gfa_numa_pool_config(&cfg, e.t, frames), 0);
	e.pool = gfa_pool_create(&cfg);
	cr_assert_not_null(e.pool);
	e.np = gfa_numa_attach(e.pool, e.t);
	cr_assert_not_null(e.np);
	return e;
}

static void numat_env_done(struct numat_env *e)
{
	char msg[256];

	cr_assert_eq(gfa_pool_check(e->pool, msg, sizeof(msg)), 0, "pool check: %s", msg);
	gfa_numa_detach(e->np);
	gfa_backing_destroy(e->b);
	gfa_pool_destroy(e->pool);
	gfa_numa_topology_free(e->t);
}

static void numat_zone_snapshot(struct gfa_pool *p, unsigned int zone, struct gfa_zone_stat *st)
{
	memset(st, 0, sizeof(*st));
	cr_assert_eq(gfa_zone_stat(p, zone, st), 0);
}

static void numat_stat(struct gfa_numa_pool *np, int node, struct gfa_numa_node_stat *st)
{
	cr_assert_eq(gfa_numa_node_stat(np, node, st), 0);
}

/* ---- pinned threads --------------------------------------------------------- */

/* A CPU of node id `node` this process may run on, or -1. */
static int numat_cpu_of(const struct gfa_numa_topology *t, int node)
{
	cpu_set_t allowed;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -1;
	for (unsigned int c = 0; c < t->nr_cpus && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed) && gfa_numa_cpu_node(t, c) == node)
			return (int)c;
	return -1;
}

static int numat_pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return sched_setaffinity(0, sizeof(s), &s) ? -errno : 0;
}

/* =========================================================================== */
/* suite numa: fake topologies                                                   */
/* =========================================================================== */

Test(numa, fake_topology_is_labelled_fake)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(3, NULL);
	char buf[4096];
	int n;

	cr_assert_not_null(t);
	cr_assert(t->fake);
	cr_assert_eq(t->nr_nodes, 3);
	for (unsigned int i = 0; i < 3; i++) {
		cr_assert_eq(t->nodes[i].id, (int)i);
		cr_assert_eq(t->nodes[i].phys_node, t->nodes[0].phys_node);
		cr_assert_gt(t->nodes[i].mem_bytes, 0);
		cr_assert_eq(t->zonelist[i][0], i, "a node falls back on itself first");
		for (unsigned int j = 0; j < 3; j++)
			cr_assert_eq(t->distance[i][j], i == j ? 10 : 20);
	}
	n = gfa_numa_topology_text(t, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_lt(n, (int)sizeof(buf));
	cr_assert(!strncmp(buf, "fake topology: 3 nodes", 22), "header: %s", buf);
	cr_assert_not_null(strstr(buf, "node 2 zonelist: 2 0 1"), "%s", buf);
	/* snprintf semantics: a short buffer gets a NUL-terminated prefix, same length */
	cr_assert_eq(gfa_numa_topology_text(t, buf, 10), n);
	cr_assert_eq(strlen(buf), 9);
	cr_assert_eq(gfa_numa_topology_text(t, NULL, 5), GFA_EFAULT);
	gfa_numa_topology_free(t);
}

Test(numa, zonelists_follow_distance)
{
	static const unsigned int d[16] = {
		10, 20, 30, 40, 20, 10, 40, 30, 30, 40, 10, 20, 40, 30, 20, 10,
	};
	static const int want[4][4] = { { 0, 1, 2, 3 },
					{ 1, 0, 3, 2 },
					{ 2, 3, 0, 1 },
					{ 3, 2, 1, 0 } };
	struct gfa_numa_topology *t = gfa_numa_topology_fake(4, d);
	int got[4];

	cr_assert_not_null(t);
	for (int n = 0; n < 4; n++) {
		cr_assert_eq(gfa_numa_zonelist(t, n, got, 4), 4);
		for (int k = 0; k < 4; k++)
			cr_assert_eq(got[k], want[n][k], "node %d choice %d: %d", n, k, got[k]);
	}
	cr_assert_eq(gfa_numa_zonelist(t, 4, got, 4), GFA_ENONODE);
	cr_assert_eq(gfa_numa_zonelist(t, 0, NULL, 4), GFA_EFAULT);
	gfa_numa_topology_free(t);

	/* equal distances: round-robin after the node itself, so fallbacks spread */
	t = gfa_numa_topology_fake(4, NULL);
	cr_assert_not_null(t);
	for (int n = 0; n < 4; n++) {
		cr_assert_eq(gfa_numa_zonelist(t, n, got, 4), 4);
		for (int k = 0; k < 4; k++)
			cr_assert_eq(got[k], (n + k) % 4);
	}
	gfa_numa_topology_free(t);
}

Test(numa, bad_fake_topologies_are_refused)
{
	unsigned int d[4] = { 10, 20, 20, 10 };

	errno = 0;
	cr_assert_null(gfa_numa_topology_fake(0, NULL));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(gfa_numa_topology_fake(GFA_NUMA_MAX_NODES + 1, NULL));
	cr_assert_eq(errno, EINVAL);
	d[0] = 11; /* local distance must be 10 */
	cr_assert_null(gfa_numa_topology_fake(2, d));
	d[0] = 10;
	d[1] = 10; /* remote must be farther than local */
	cr_assert_null(gfa_numa_topology_fake(2, d));
	d[1] = 255; /* 255 means unreachable in a SLIT */
	cr_assert_null(gfa_numa_topology_fake(2, d));
	cr_assert_eq(errno, EINVAL);
}

Test(numa, cpu_sets_map_to_nodes)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	unsigned long mask[GFA_NUMA_MAX_CPUS / 64] = { 0 };
	int c0 = -1, c1 = -1;

	cr_assert_not_null(t);
	cr_assert_gt(t->nr_cpus, 0);
	for (unsigned int c = 0; c < t->nr_cpus; c++) {
		if (t->cpu_node[c] == 0 && c0 < 0)
			c0 = (int)c;
		if (t->cpu_node[c] == 1 && c1 < 0)
			c1 = (int)c;
	}
	cr_assert_geq(c0, 0, "fake node 0 gets the first block of CPUs");
	cr_assert_eq(gfa_numa_cpu_node(t, (unsigned int)c0), 0);
	cr_assert_eq(gfa_numa_cpu_node(t, GFA_NUMA_MAX_CPUS + 5), GFA_ENOCPU);

	cr_assert_eq(gfa_numa_cpuset_node(t, mask, GFA_NUMA_MAX_CPUS), GFA_EINVAL, "empty set");
	mask[(GFA_NUMA_MAX_CPUS - 1) / 64] = 1UL << 63; /* a CPU no node has */
	cr_assert_eq(gfa_numa_cpuset_node(t, mask, GFA_NUMA_MAX_CPUS), GFA_ENOCPU);
	mask[c0 / 64] |= 1UL << (c0 % 64);
	cr_assert_eq(gfa_numa_cpuset_node(t, mask, GFA_NUMA_MAX_CPUS), 0,
		     "CPUs without a node are ignored next to ones with");
	if (c1 >= 0) {
		mask[c1 / 64] |= 1UL << (c1 % 64);
		cr_assert_eq(gfa_numa_cpuset_node(t, mask, GFA_NUMA_MAX_CPUS), GFA_ESPAN);
	}
	cr_assert_eq(gfa_numa_cpuset_node(t, NULL, 8), GFA_EFAULT);
	cr_assert_eq(gfa_numa_cpuset_node(NULL, mask, 8), GFA_EFAULT);
	gfa_numa_topology_free(t);
}

struct numat_thread_arg {
	const struct gfa_numa_topology *t;
	struct gfa_numa_pool *np;
	int cpu;
	int node; /* result of gfa_numa_thread_node */
	bool pinned;
	int pcp_node; /* node of a cache made with node -1 */
	int pin_err;
	int64_t pfns_ok; /* allocations that landed in the thread's zone */
};

static void *numat_thread_node_main(void *p)
{
	struct numat_thread_arg *a = p;
	struct gfa_pcp *pcp;

	a->pin_err = a->cpu >= 0 ? numat_pin(a->cpu) : 0;
	if (a->pin_err)
		return NULL;
	a->node = gfa_numa_thread_node(a->t, &a->pinned);
	a->pcp_node = INT_MIN;
	if (!a->np)
		return NULL;
	pcp = gfa_numa_pcp_create(a->np, -1);
	if (!pcp) {
		a->pcp_node = -errno;
		return NULL;
	}
	a->pcp_node = gfa_numa_pcp_node(a->np, pcp);
	for (int i = 0; i < 64; i++) {
		unsigned int got = 99;
		int64_t pfn = gfa_numa_alloc(a->np, pcp, -1, i % 2 ? 0 : 3, GFA_MT_MOVABLE,
					     NUMAT_OWNER, 0, &got);

		if (pfn >= 0 &&
		    gfa_pfn_to_zone(gfa_numa_pool(a->np), (uint64_t)pfn) ==
			    gfa_numa_node_zone(a->np, a->node) &&
		    got == (i % 2 ? 0u : 3u))
			a->pfns_ok++;
		if (pfn >= 0)
			gfa_pcp_free(pcp, (uint64_t)pfn, got, NUMAT_OWNER);
	}
	gfa_pcp_destroy(pcp);
	return NULL;
}

static void numat_run_thread(struct numat_thread_arg *a)
{
	pthread_t th;

	cr_assert_eq(pthread_create(&th, NULL, numat_thread_node_main, a), 0);
	pthread_join(th, NULL);
}

Test(numa, vcpu_caches_follow_thread_affinity)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct gfa_numa_node_stat st;
	int tested = 0;

	for (int node = 0; node < 2; node++) {
		struct numat_thread_arg a = { .t = e.t, .np = e.np };

		a.cpu = numat_cpu_of(e.t, node);
		if (a.cpu < 0)
			continue; /* fake node without CPUs here (one-CPU host) */
		numat_run_thread(&a);
		cr_assert_eq(a.pin_err, 0, "pin to CPU %d: %s", a.cpu, strerror(-a.pin_err));
		cr_assert_eq(a.node, node, "thread on CPU %d: node %d", a.cpu, a.node);
		cr_assert(a.pinned);
		cr_assert_eq(a.pcp_node, node, "cache of a thread on node %d serves %d", node,
			     a.pcp_node);
		cr_assert_eq(a.pfns_ok, 64, "allocations of node %d's vCPU stayed local", node);
		numat_stat(e.np, node, &st);
		cr_assert_eq(st.numa_hit, 64);
		cr_assert_eq(st.numa_foreign + st.numa_miss + st.compact_remote, 0);
		tested++;
	}
	cr_assert_geq(tested, 1);
	numat_env_done(&e);
}

Test(numa, unpinned_thread_uses_its_current_cpu)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	struct numat_thread_arg a = { .t = t, .cpu = -1 };
	cpu_set_t allowed;
	bool spans = false;

	cr_assert_not_null(t);
	cr_assert_eq(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
	for (unsigned int c = 0; c < t->nr_cpus && c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed) && t->cpu_node[c] == 1)
			spans = true;
	numat_run_thread(&a);
	cr_assert_geq(a.node, 0, "node of an unpinned thread: %d", a.node);
	cr_assert_eq(a.pinned, !spans, "pinned means: the affinity lies in one node");
	gfa_numa_topology_free(t);
}

Test(numa, thread_without_a_node_is_an_error)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	struct gfa_pool_config cfg;
	struct gfa_pool *pool;
	struct gfa_numa_pool *np;
	struct numat_thread_arg a = { .cpu = -1 };

	cr_assert_not_null(t);
	for (unsigned int c = 0; c < t->nr_cpus; c++)
		t->cpu_node[c] = -1; /* a topology whose nodes have no CPUs at all */
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, NUMAT_PB), 0);
	pool = gfa_pool_create(&cfg);
	np = gfa_numa_attach(pool, t);
	cr_assert_not_null(np);
	a.t = gfa_numa_topology(np);
	a.np = np;
	numat_run_thread(&a);
	cr_assert_eq(a.node, GFA_ENOCPU);
	cr_assert_eq(a.pcp_node, -ENXIO, "cache for a thread whose CPUs have no node");
	cr_assert_eq(gfa_numa_alloc(np, NULL, -1, 0, GFA_MT_MOVABLE, 1, 0, NULL), GFA_ENOCPU);
	gfa_numa_detach(np);
	gfa_pool_destroy(pool);
	gfa_numa_topology_free(t);
}

Test(numa, pool_config_one_zone_per_node)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(3, NULL);
	struct gfa_pool_config cfg, before;
	uint64_t frames[3] = { NUMAT_PB, 2 * NUMAT_PB, 3 * NUMAT_PB };
	struct gfa_pool *pool;
	uint64_t start, n;

	cr_assert_not_null(t);
	cr_assert_eq(gfa_numa_pool_config_nodes(&cfg, t, frames), 0);
	cr_assert_eq(cfg.nr_zones, 3);
	for (unsigned int i = 0; i < 3; i++) {
		cr_assert_eq(cfg.zones[i].nr_frames, frames[i]);
		cr_assert_eq(cfg.zones[i].node, t->nodes[i].id);
	}
	pool = gfa_pool_create(&cfg);
	cr_assert_not_null(pool);
	cr_assert_eq(gfa_zone_span(pool, 2, &start, &n), 0);
	cr_assert_eq(n, 3 * NUMAT_PB);

	before = cfg;
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, NUMAT_PB - 1), GFA_EINVAL);
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, (1ULL << 31) + 1), GFA_EINVAL);
	t->nodes[1].mem_bytes = 64ULL << 20; /* a small node: 16384 frames */
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, 16384), 0);
	cfg = before;
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, 16384 + NUMAT_PB), GFA_ETOOBIG,
		     "a zone larger than its node");
	cr_assert_eq(memcmp(&cfg, &before, sizeof(cfg)), 0, "config unchanged on error");
	cr_assert_eq(gfa_numa_pool_config(NULL, t, NUMAT_PB), GFA_EFAULT);
	cr_assert_eq(gfa_numa_pool_config(&cfg, NULL, NUMAT_PB), GFA_EFAULT);

	/* a pool whose zones do not match the topology */
	errno = 0;
	{
		struct gfa_numa_topology *t2 = gfa_numa_topology_fake(2, NULL);

		cr_assert_null(gfa_numa_attach(pool, t2));
		cr_assert_eq(errno, EINVAL);
		gfa_numa_topology_free(t2);
	}
	cr_assert_null(gfa_numa_attach(NULL, t));
	cr_assert_eq(errno, EFAULT);
	gfa_pool_destroy(pool);
	gfa_numa_topology_free(t);
}

Test(numa, huge_block_comes_from_the_local_node)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct gfa_numa_node_stat s0, s1;
	unsigned int got = 99;
	int64_t pfn;

	for (int node = 1; node >= 0; node--) {
		pfn = gfa_numa_alloc(e.np, NULL, node, 9, GFA_MT_MOVABLE, NUMAT_OWNER,
				     GFA_NUMA_REMOTE | GFA_NUMA_SMALLER, &got);
		cr_assert_geq(pfn, 0);
		cr_assert_eq(got, 9);
		cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), node);
		cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 9, NUMAT_OWNER), 0);
	}
	numat_stat(e.np, 0, &s0);
	numat_stat(e.np, 1, &s1);
	cr_assert_eq(s0.numa_hit, 1);
	cr_assert_eq(s0.thp_local, 1);
	cr_assert_eq(s1.numa_hit, 1);
	cr_assert_eq(s0.numa_miss + s0.numa_foreign + s1.numa_miss + s1.numa_foreign, 0);
	numat_env_done(&e);
}

/*
 * Both nodes fragmented and compactable.  A node-0 request for a huge block must
 * compact node 0 (moves recorded, all inside zone 0) and leave node 1 untouched: no
 * move touches zone 1 and its free lists are byte for byte the same.
 */
Test(numa, direct_compaction_stays_on_the_local_node, .timeout = 120)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	struct gfa_zone_stat z1_before, z1_after;
	struct gfa_numa_node_stat s0;
	struct gfa_vmstat vs;
	unsigned int got = 99;
	int64_t pfn;

	numat_fill(o, 0, numat_first_half);
	numat_fill(o, 1, numat_first_half);
	numat_zone_snapshot(e.pool, 1, &z1_before);
	cr_assert_eq(z1_before.nr_free_blocks[9][GFA_MT_MOVABLE], 0);

	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER, GFA_NUMA_REMOTE, &got);
	cr_assert_geq(pfn, 0, "local compaction should form a huge block: %ld", (long)pfn);
	cr_assert_eq(got, 9);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 0, "served by the local node");
	cr_assert_gt(o->moves_from[0], 0, "node 0 was compacted");
	cr_assert_eq(o->moves_from[1] + o->moves_to[1] + o->cross_zone, 0,
		     "direct compaction moved frames of the remote zone: from %lu to %lu",
		     (unsigned long)o->moves_from[1], (unsigned long)o->moves_to[1]);
	numat_zone_snapshot(e.pool, 1, &z1_after);
	cr_assert_eq(memcmp(&z1_before, &z1_after, sizeof(z1_before)), 0,
		     "the remote zone's free lists changed");
	cr_assert_eq(gfa_pool_vmstat(e.pool, &vs), 0);
	cr_assert_gt(vs.compact_stall, 0);
	numat_stat(e.np, 0, &s0);
	cr_assert_eq(s0.thp_local, 1);
	cr_assert_eq(s0.compact_remote, 0);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 9, NUMAT_OTHER), 0);
	numat_env_done(&e);
	numat_owner_free(o);
}

/*
 * Node 0 full; node 1 fragmented but compactable.  A remote huge block may only be
 * taken from free lists: without a free one the request fails (and zone 1 is not
 * compacted); allowed to shrink, it gets node 1's largest free block.
 */
Test(numa, remote_nodes_are_never_compacted, .timeout = 120)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	struct gfa_zone_stat z1_before, z1_after;
	struct gfa_numa_node_stat s0, s1;
	unsigned int got = 99;
	int64_t pfn;

	/* no background workers here: a woken node-1 worker would compact node 1 */
	numat_fill(o, 0, NULL);
	numat_fill(o, 1, numat_first_half);
	numat_zone_snapshot(e.pool, 1, &z1_before);

	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER, GFA_NUMA_REMOTE, &got);
	cr_assert_eq(pfn, GFA_ENOMEM);
	cr_assert_eq(o->moves_from[1] + o->moves_to[1], 0, "a node-0 request compacted node 1");
	numat_zone_snapshot(e.pool, 1, &z1_after);
	cr_assert_eq(memcmp(&z1_before, &z1_after, sizeof(z1_before)), 0);

	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER,
			     GFA_NUMA_REMOTE | GFA_NUMA_SMALLER, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(got, 8, "node 1's free lists hold order-8 blocks: got %u", got);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 1);
	cr_assert_eq(o->moves_from[1] + o->moves_to[1], 0);
	numat_stat(e.np, 0, &s0);
	numat_stat(e.np, 1, &s1);
	cr_assert_eq(s0.numa_foreign, 1);
	cr_assert_eq(s1.numa_miss, 1);
	cr_assert_eq(s0.order_fallback, 1);
	cr_assert_eq(s0.alloc_fail, 1);
	cr_assert_eq(s0.compact_remote + s1.compact_remote, 0);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 8, NUMAT_OTHER), 0);
	numat_env_done(&e);
	numat_owner_free(o);
}

Test(numa, remote_free_huge_block_only_when_allowed)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	struct gfa_numa_node_stat s0;
	unsigned int got = 99;
	int64_t pfn;

	numat_fill(o, 0, NULL);
	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER, 0, &got);
	cr_assert_eq(pfn, GFA_ENOMEM, "local only: node 0 is full");
	cr_assert_eq(got, 99, "order_out untouched on failure");
	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER, GFA_NUMA_SMALLER, &got);
	cr_assert_eq(pfn, GFA_ENOMEM, "no smaller local block either");
	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER, GFA_NUMA_REMOTE, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(got, 9);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 1);
	numat_stat(e.np, 0, &s0);
	cr_assert_eq(s0.thp_remote, 1);
	cr_assert_eq(s0.alloc_fail, 2);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 9, NUMAT_OTHER), 0);
	numat_env_done(&e);
	numat_owner_free(o);
}

/*
 * Below the huge order locality wins: node 0 has order-3 holes (its owner refuses
 * moves, so compaction cannot help), node 1 has order-4 holes.  A huge request that
 * may shrink and go remote gets a local order-3 block, not node 1's order-4 one.
 */
Test(numa, smaller_local_pieces_beat_remote_ones, .timeout = 120)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	unsigned int got = 99;
	int64_t pfn;

	numat_fill(o, 0, numat_order3_holes);
	numat_fill(o, 1, numat_order4_holes);
	o->refuse_zone = 0;
	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, NUMAT_OTHER,
			     GFA_NUMA_REMOTE | GFA_NUMA_SMALLER, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(got, 3, "got order %u", got);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 0);
	cr_assert_eq(o->moves_from[1] + o->moves_to[1], 0);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 3, NUMAT_OTHER), 0);

	/* an order-4 request: remote at the asked order comes before local smaller */
	pfn = gfa_numa_alloc(e.np, NULL, 0, 4, GFA_MT_MOVABLE, NUMAT_OTHER,
			     GFA_NUMA_REMOTE | GFA_NUMA_SMALLER, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(got, 4);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 1);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 4, NUMAT_OTHER), 0);
	numat_env_done(&e);
	numat_owner_free(o);
}

Test(numa, bad_requests_change_nothing)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct gfa_zone_stat z0, z0b;
	struct gfa_numa_node_stat s0;
	struct gfa_pcp *pcp0 = gfa_numa_pcp_create(e.np, 0);
	unsigned int got = 99;

	cr_assert_not_null(pcp0);
	numat_zone_snapshot(e.pool, 0, &z0);
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, 7, 0, GFA_MT_MOVABLE, 1, 0, &got), GFA_ENONODE);
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, -2, 0, GFA_MT_MOVABLE, 1, 0, &got), GFA_ENONODE);
	cr_assert_eq(gfa_numa_alloc(e.np, pcp0, 1, 0, GFA_MT_MOVABLE, 1, 0, &got), GFA_EINVAL,
		     "a cache of node 0 for a node-1 request");
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, 0, 0, GFA_MT_MOVABLE, 1, 0x8000, &got), GFA_EINVAL,
		     "unknown flag");
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, 0, GFA_MAX_ORDER + 1, GFA_MT_MOVABLE, 1, 0, &got),
		     GFA_EORDER);
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, 0, 0, GFA_MT_ISOLATE, 1, 0, &got), GFA_EMIGRATE);
	cr_assert_eq(gfa_numa_alloc(NULL, NULL, 0, 0, GFA_MT_MOVABLE, 1, 0, &got), GFA_EFAULT);
	/* another pool's cache (zone 0 too): it allocated from that pool, counted here */
	struct gfa_pool_config oc;
	struct gfa_pool *other;
	struct gfa_pcp *alien;
	struct gfa_zone_stat o0;

	gfa_pool_config_init(&oc, 4096);
	other = gfa_pool_create(&oc);
	alien = gfa_pcp_create(other, 0);
	cr_assert_not_null(alien);

	cr_assert_eq(gfa_numa_alloc(e.np, alien, -1, 0, GFA_MT_MOVABLE, 1, 0, &got), GFA_EINVAL,
		     "another pool's cache was taken");
	cr_assert_eq(gfa_numa_pcp_node(e.np, alien), GFA_EINVAL);
	cr_assert_eq(gfa_zone_stat(other, 0, &o0), 0);
	cr_assert_eq(o0.nr_free, 4096);
	gfa_pcp_destroy(alien);
	gfa_pool_destroy(other);
	cr_assert_eq(got, 99);
	numat_zone_snapshot(e.pool, 0, &z0b);
	cr_assert_eq(memcmp(&z0, &z0b, sizeof(z0)), 0);
	numat_stat(e.np, 0, &s0);
	cr_assert_eq(s0.numa_hit + s0.alloc_fail + s0.numa_foreign, 0);

	errno = 0;
	cr_assert_null(gfa_numa_pcp_create(e.np, 5));
	cr_assert_eq(errno, ENODEV);
	cr_assert_null(gfa_numa_pcp_create(NULL, 0));
	cr_assert_eq(errno, EFAULT);
	cr_assert_eq(gfa_numa_node_stat(e.np, 9, &s0), GFA_ENONODE);
	cr_assert_eq(gfa_numa_node_zone(e.np, 9), GFA_ENONODE);
	cr_assert_eq(gfa_numa_pcp_node(e.np, pcp0), 0);
	gfa_pcp_destroy(pcp0);
	numat_env_done(&e);
}

Test(numa, claims_per_node)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	uint64_t both[2] = { 100, 200 }, huge[2] = { 1, NUMAT_FRAMES + 1 };
	unsigned int got;
	int64_t pfn;

	cr_assert_eq(gfa_numa_claim(e.np, 0, 1, 1000), 0);
	cr_assert_eq(gfa_numa_claimed(e.np, 0), 1000);
	/* bad input: nothing changes */
	cr_assert_eq(gfa_numa_claim(e.np, 0, 1, 10), -EEXIST, "second claim of one VM");
	cr_assert_eq(gfa_numa_claim(e.np, 0, 2, NUMAT_FRAMES + 1), GFA_ETOOBIG);
	cr_assert_eq(gfa_numa_claim(e.np, 0, 2, NUMAT_FRAMES - 999), -ENOSPC,
		     "more than the node's unclaimed free frames");
	cr_assert_eq(gfa_numa_claim(e.np, 3, 2, 10), GFA_ENONODE);
	cr_assert_eq(gfa_numa_claim(NULL, 0, 2, 10), GFA_EFAULT);
	cr_assert_eq(gfa_numa_claimed(e.np, 0), 1000);
	cr_assert_eq(gfa_numa_claimed(e.np, 1), 0);
	cr_assert_eq(gfa_numa_claimed(e.np, 3), GFA_ENONODE);

	/* the owner's allocations consume its claim */
	pfn = gfa_numa_alloc(e.np, NULL, 0, 9, GFA_MT_MOVABLE, 1, 0, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_numa_claimed(e.np, 0), 1000 - 512);

	/* several nodes, all or nothing */
	cr_assert_eq(gfa_numa_claim_nodes(e.np, 2, huge), GFA_ETOOBIG);
	cr_assert_eq(gfa_numa_claim(e.np, 1, 2, 5), 0);
	cr_assert_eq(gfa_numa_claim_nodes(e.np, 2, both), -EEXIST);
	cr_assert_eq(gfa_numa_claimed(e.np, 0), 1000 - 512, "node 0's claim was rolled back");
	cr_assert_eq(gfa_numa_claimed(e.np, 1), 5);
	cr_assert_eq(gfa_numa_unclaim(e.np, 1, 2), 5);
	cr_assert_eq(gfa_numa_claim_nodes(e.np, 2, both), 0);
	cr_assert_eq(gfa_numa_claimed(e.np, 0), 1000 - 512 + 100);
	cr_assert_eq(gfa_numa_claimed(e.np, 1), 200);

	cr_assert_eq(gfa_numa_unclaim(e.np, 0, 1), 1000 - 512);
	cr_assert_eq(gfa_numa_unclaim(e.np, 0, 1), -ENOENT);
	cr_assert_eq(gfa_numa_unclaim(e.np, 4, 1), GFA_ENONODE);
	cr_assert_eq(gfa_numa_unclaim(e.np, 0, 2), 100);
	cr_assert_eq(gfa_numa_unclaim(e.np, 1, 2), 200);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 9, 1), 0);
	numat_env_done(&e);
}

/* A claim keeps other VMs off a node: they fail locally, or go remote if allowed. */
Test(numa, claims_push_other_vms_to_other_nodes)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	struct gfa_zone_stat z;
	unsigned int got;
	int64_t pfn;

	numat_zone_snapshot(e.pool, 0, &z);
	cr_assert_eq(gfa_numa_claim(e.np, 0, 1, z.nr_free), 0);
	cr_assert_eq(gfa_numa_alloc(e.np, NULL, 0, 0, GFA_MT_MOVABLE, 2, 0, &got), GFA_ENOMEM);
	pfn = gfa_numa_alloc(e.np, NULL, 0, 0, GFA_MT_MOVABLE, 2, GFA_NUMA_REMOTE, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 1);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 0, 2), 0);
	cr_assert_eq(gfa_numa_unclaim(e.np, 0, 1), (int64_t)z.nr_free);
	numat_env_done(&e);
}

Test(numa, statistics_text_says_fake)
{
	struct numat_env e = numat_env_fake(2, NUMAT_FRAMES);
	char buf[2048], *line, *save;
	int n, lines = 0;
	unsigned int got;
	int64_t pfn = gfa_numa_alloc(e.np, NULL, 1, 0, GFA_MT_MOVABLE, 1, 0, &got);

	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_numa_claim(e.np, 0, 3, 77), 0);
	n = gfa_numa_stat_text(e.np, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_lt(n, (int)sizeof(buf));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		cr_assert_not_null(strstr(line, "fake"), "line without 'fake': %s", line);
		lines++;
	}
	cr_assert_eq(lines, 3);
	n = gfa_numa_stat_text(e.np, buf, sizeof(buf));
	cr_assert_not_null(strstr(buf, "Node 0 (fake): zone 0 frames 8192 free 8192 claimed 77 "
				       "numa_hit 0"),
			   "%s", buf);
	cr_assert_not_null(strstr(buf, "Node 1 (fake): zone 1 frames 8192 free 8191 claimed 0 "
				       "numa_hit 1 "),
			   "%s", buf);
	cr_assert_not_null(strstr(buf, "compact_remote 0\n"));
	cr_assert_eq(gfa_numa_stat_text(NULL, buf, sizeof(buf)), GFA_EFAULT);
	gfa_numa_unclaim(e.np, 0, 3);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 0, 1), 0);
	numat_env_done(&e);
}

/* Binding on a fake topology binds to the real node it was carved from. */
Test(numa, bind_populate_verify_fake)
{
	struct numat_env e = numat_env_fake(2, NUMAT_PB * 4);
	struct gfa_backing_config bc = { .populate = false };
	struct gfa_numa_placement pl[2];
	char text[256];
	int err;

	cr_assert_eq(gfa_numa_bind_pool(e.np), -ENODEV, "no backing yet");
	cr_assert_eq(gfa_numa_verify_zone(e.np, 0, &pl[0]), -ENODEV);
	e.b = gfa_backing_create(e.pool, &bc);
	cr_assert_not_null(e.b);
	err = gfa_numa_bind_pool(e.np);
	if (err == -EPERM || err == -ENOSYS) {
		fprintf(stderr, "numa: mbind not allowed here (%s): binding not tested\n",
			strerror(-err));
		numat_env_done(&e);
		cr_skip_test("mbind is not allowed here (%s)", strerror(-err));
	}
	cr_assert_eq(err, 0, "bind: %s", strerror(-err));
	/* before populating: policy set, nothing present yet */
	cr_assert_eq(gfa_numa_verify_pool(e.np, pl), 0);
	cr_assert(pl[1].policy_ok);
	cr_assert_eq(pl[1].not_present, NUMAT_PB * 4);
	cr_assert_eq(gfa_numa_populate_pool(e.np), 0);
	cr_assert_eq(gfa_numa_verify_pool(e.np, pl), 0);
	for (int z = 0; z < 2; z++) {
		cr_assert_eq(pl[z].on_node, NUMAT_PB * 4, "zone %d: %lu on node", z,
			     (unsigned long)pl[z].on_node);
		cr_assert_eq(pl[z].elsewhere + pl[z].not_present, 0);
		cr_assert(pl[z].fake);
	}
	cr_assert_gt(gfa_numa_placement_text(&pl[1], text, sizeof(text)), 0);
	cr_assert_not_null(strstr(text, "zone 1 (fake node 1 on real node"), "%s", text);
	cr_assert_eq(gfa_numa_verify_zone(e.np, 2, &pl[0]), GFA_ERANGE);
	cr_assert_eq(gfa_numa_verify_zone(e.np, 0, NULL), GFA_EFAULT);
	cr_assert_eq(gfa_numa_bind_zone(e.np, 2), GFA_ERANGE);
	numat_env_done(&e);
}

/* An unbound zone is reported as such, not taken for placed. */
Test(numa, unbound_zone_is_reported)
{
	struct numat_env e = numat_env_fake(1, NUMAT_PB * 2);
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_numa_placement pl;

	struct gfa_numa_topology *real = gfa_numa_topology_discover();
	int err;

	e.b = gfa_backing_create(e.pool, &bc);
	cr_assert_not_null(e.b);
	err = gfa_numa_verify_zone(e.np, 0, &pl);
	cr_assert_not(pl.policy_ok);
	cr_assert_eq(pl.on_node + pl.elsewhere, NUMAT_PB * 2, "populated by the backing");
	if (real && real->nr_nodes > 1) {
		/* first touch may have placed frames on another real node */
		cr_assert(err == GFA_EPOLICY || err == GFA_EREMOTE, "verify: %d", err);
	} else {
		cr_assert_eq(err, GFA_EPOLICY);
		cr_assert_eq(pl.elsewhere, 0, "one real node: nothing can be elsewhere");
	}
	gfa_numa_topology_free(real);
	numat_env_done(&e);
}

/* =========================================================================== */
/* suite numa_real: two real nodes (a QEMU guest, or a NUMA host)                 */
/* =========================================================================== */

static struct gfa_numa_topology *numat_real_topology(void)
{
	struct gfa_numa_topology *t = gfa_numa_topology_discover();
	bool in_qemu = getenv("GFA_IN_QEMU") != NULL;

	if (!t) {
		cr_assert_not(in_qemu, "no NUMA in the QEMU guest: %s", strerror(errno));
		cr_skip_test("no NUMA support here (%s)", strerror(errno));
	}
	if (t->nr_nodes < 2) {
		unsigned int n = t->nr_nodes;

		gfa_numa_topology_free(t);
		cr_assert_not(in_qemu, "the QEMU guest has %u node: --numa 2 did not work", n);
		fprintf(stderr,
			"numa_real: skipped: %u node(s) here; suite numa_qemu runs it "
			"in a two-node QEMU guest\n",
			n);
		cr_skip_test("one NUMA node here: numa_qemu runs these in a two-node guest");
	}
	return t;
}

/* A bound, populated pool of nframes per node on the real topology. */
static struct numat_env numat_env_real(uint64_t nframes, bool bind)
{
	struct numat_env e = { 0 };
	struct gfa_backing_config bc = { .populate = false };
	struct gfa_pool_config cfg;
	struct timespec t0, t1;
	int err;

	e.t = numat_real_topology();
	cr_assert_eq(gfa_numa_pool_config(&cfg, e.t, nframes), 0);
	e.pool = gfa_pool_create(&cfg);
	cr_assert_not_null(e.pool);
	e.b = gfa_backing_create(e.pool, &bc);
	cr_assert_not_null(e.b, "backing: %s", strerror(errno));
	e.np = gfa_numa_attach(e.pool, e.t);
	cr_assert_not_null(e.np);
	if (!bind)
		return e;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	err = gfa_numa_bind_pool(e.np);
	cr_assert_eq(err, 0, "bind: %s", strerror(-err));
	err = gfa_numa_populate_pool(e.np);
	cr_assert_eq(err, 0, "populate: %s", strerror(-err));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "numa_real: bound and populated %u x %lu MiB in %.2f s\n", e.t->nr_nodes,
		(unsigned long)(nframes >> 8),
		(double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return e;
}

/* Independent of gfa_numa_verify: ask move_pages about every 16th frame of a zone. */
static void numat_assert_zone_on(struct numat_env *e, unsigned int zone, int node)
{
	uint64_t start, n, checked = 0;
	enum { STEP = 16 };

	cr_assert_eq(gfa_zone_span(e->pool, zone, &start, &n), 0);
	for (uint64_t i = 0; i < n; i += 64 * STEP) {
		void *pages[64];
		int status[64];
		unsigned int k;

		for (k = 0; k < 64 && i + k * STEP < n; k++)
			pages[k] = gfa_pfn_to_addr(e->pool, start + i + k * STEP);
		cr_assert_eq(move_pages(0, k, pages, NULL, status, 0), 0, "move_pages: %s",
			     strerror(errno));
		for (unsigned int j = 0; j < k; j++)
			cr_assert_eq(status[j], node, "pfn %lu of zone %u is on node %d, not %d",
				     (unsigned long)(start + i + j * STEP), zone, status[j], node);
		checked += k;
	}
	cr_assert_gt(checked, 0);
}

Test(numa_real, topology_has_two_nodes)
{
	struct gfa_numa_topology *t = numat_real_topology();
	char buf[4096];

	cr_assert_not(t->fake);
	for (unsigned int i = 0; i < 2; i++) {
		cr_assert_eq(t->nodes[i].phys_node, t->nodes[i].id);
		cr_assert_gt(t->nodes[i].mem_bytes, 64ULL << 20);
		cr_assert_geq(t->nodes[i].nr_cpus, 1, "node %u has no CPU", i);
		cr_assert_eq(t->distance[i][i], 10);
		cr_assert_eq(t->zonelist[i][0], i);
	}
	cr_assert_gt(t->distance[0][1], 10);
	cr_assert_eq(t->zonelist[0][1], 1);
	cr_assert_gt(gfa_numa_topology_text(t, buf, sizeof(buf)), 0);
	cr_assert_null(strstr(buf, "fake"));
	fprintf(stderr, "numa_real: %s", buf);
	gfa_numa_topology_free(t);
}

Test(numa_real, zone_frames_live_on_their_node, .timeout = 300)
{
	struct numat_env e = numat_env_real(NUMAT_REAL, true);
	struct gfa_numa_placement pl[GFA_NUMA_MAX_NODES];
	char text[256];
	int err = gfa_numa_verify_pool(e.np, pl);

	for (unsigned int z = 0; z < e.t->nr_nodes; z++) {
		gfa_numa_placement_text(&pl[z], text, sizeof(text));
		fprintf(stderr, "numa_real: %s", text);
	}
	cr_assert_eq(err, 0, "verify: %s", strerror(-err));
	for (unsigned int z = 0; z < e.t->nr_nodes; z++) {
		cr_assert(pl[z].policy_ok);
		cr_assert_eq(pl[z].node, e.t->nodes[z].id);
		cr_assert_eq(pl[z].on_node, NUMAT_REAL, "zone %u: %lu of %lu frames on node %d", z,
			     (unsigned long)pl[z].on_node, (unsigned long)NUMAT_REAL, pl[z].node);
		numat_assert_zone_on(&e, z, e.t->nodes[z].id);
	}
	numat_env_done(&e);
}

/* First touch from node 0 puts an unbound zone 1 on node 0: verify must say so. */
Test(numa_real, wrong_placement_is_reported_then_fixed, .timeout = 300)
{
	struct numat_env e = numat_env_real(NUMAT_PB * 8, false);
	struct gfa_numa_placement pl;
	char text[256];
	int cpu0 = numat_cpu_of(e.t, e.t->nodes[0].id), err;

	cr_assert_geq(cpu0, 0);
	cr_assert_eq(numat_pin(cpu0), 0);
	cr_assert_eq(gfa_numa_populate_zone(e.np, 1), 0);
	err = gfa_numa_verify_zone(e.np, 1, &pl);
	gfa_numa_placement_text(&pl, text, sizeof(text));
	fprintf(stderr, "numa_real: unbound, touched from node 0: %s", text);
	cr_assert_eq(err, GFA_EREMOTE, "a misplaced zone must be reported (got %d)", err);
	cr_assert_eq(pl.elsewhere, NUMAT_PB * 8);
	cr_assert_eq(pl.first_wrong_node, e.t->nodes[0].id);
	cr_assert_not_null(strstr(text, "elsewhere"));

	/* binding moves the pages already there (MPOL_MF_MOVE) */
	err = gfa_numa_bind_zone(e.np, 1);
	cr_assert_eq(err, 0, "bind after touch: %s", strerror(-err));
	err = gfa_numa_verify_zone(e.np, 1, &pl);
	gfa_numa_placement_text(&pl, text, sizeof(text));
	fprintf(stderr, "numa_real: after bind: %s", text);
	cr_assert_eq(err, 0);
	numat_assert_zone_on(&e, 1, e.t->nodes[1].id);
	numat_env_done(&e);
}

struct numat_vcpu {
	struct numat_env *e;
	struct numat_owner *o;
	int node;
	int64_t pfn;
	unsigned int got;
	int pin_err;
};

static void *numat_vcpu_main(void *p)
{
	struct numat_vcpu *v = p;
	int cpu = numat_cpu_of(v->e->t, v->node);
	struct gfa_pcp *pcp;

	v->pin_err = cpu >= 0 ? numat_pin(cpu) : -ENXIO;
	if (v->pin_err)
		return NULL;
	pcp = gfa_numa_pcp_create(v->e->np, -1);
	if (!pcp) {
		v->pfn = -errno;
		return NULL;
	}
	v->pfn = gfa_numa_alloc(v->e->np, pcp, -1, 9, GFA_MT_MOVABLE, NUMAT_OTHER, GFA_NUMA_REMOTE,
				&v->got);
	gfa_pcp_destroy(pcp);
	return NULL;
}

/*
 * A vCPU on each node asks for a huge block while both nodes are fragmented: each
 * compacts its own node only (real copies), the data survives, and every frame is
 * still on its zone's node afterwards.
 */
Test(numa_real, vcpus_compact_only_their_own_node, .timeout = 600)
{
	struct numat_env e = numat_env_real(NUMAT_REAL, true);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	struct gfa_zone_stat other_before, other_after;
	char buf[2048];

	o->copy = true;
	numat_fill(o, 0, numat_first_half);
	numat_fill(o, 1, numat_first_half);
	for (int node = 0; node < 2; node++) {
		struct numat_vcpu v = { .e = &e, .o = o, .node = e.t->nodes[node].id };
		uint64_t from_other = o->moves_from[1 - node], to_other = o->moves_to[1 - node];
		uint64_t from_own = o->moves_from[node];
		pthread_t th;

		numat_zone_snapshot(e.pool, 1 - node, &other_before);
		cr_assert_eq(pthread_create(&th, NULL, numat_vcpu_main, &v), 0);
		pthread_join(th, NULL);
		cr_assert_eq(v.pin_err, 0);
		cr_assert_geq(v.pfn, 0, "node %d vCPU: %ld", node, (long)v.pfn);
		cr_assert_eq(v.got, 9);
		cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)v.pfn), node);
		cr_assert_gt(o->moves_from[node], from_own, "node %d was compacted", node);
		cr_assert_eq(o->moves_from[1 - node], from_other,
			     "a node-%d vCPU moved frames of node %d", node, 1 - node);
		cr_assert_eq(o->moves_to[1 - node], to_other);
		numat_zone_snapshot(e.pool, 1 - node, &other_after);
		cr_assert_eq(memcmp(&other_before, &other_after, sizeof(other_before)), 0);
		fprintf(stderr,
			"numa_real: node %d vCPU: huge block at pfn %ld after %lu local "
			"moves, 0 remote\n",
			node, (long)v.pfn, (unsigned long)(o->moves_from[node] - from_own));
	}
	cr_assert_eq(o->cross_zone, 0);
	for (uint64_t i = 0; i < o->nr_pages; i++)
		if (o->pfn_of[i] != UINT64_MAX)
			cr_assert(numat_stamp_ok(o, i), "page %lu lost its data", (unsigned long)i);
	cr_assert_eq(gfa_numa_verify_pool(e.np, NULL), 0, "moved frames left their node");
	for (unsigned int z = 0; z < 2; z++)
		numat_assert_zone_on(&e, z, e.t->nodes[z].id);
	gfa_numa_stat_text(e.np, buf, sizeof(buf));
	fprintf(stderr, "%s", buf);
	cr_assert_null(strstr(buf, "fake"));
	numat_env_done(&e);
	numat_owner_free(o);
}

/* Node 0 full: a shrinkable remote request lands on node 1's memory, uncompacted. */
Test(numa_real, remote_fallback_lands_on_the_remote_node, .timeout = 300)
{
	struct numat_env e = numat_env_real(NUMAT_PB * 8, true);
	struct numat_owner *o = numat_owner_new(e.pool, NUMAT_OWNER, true);
	unsigned int got = 99;
	int64_t pfn;

	o->copy = true;
	numat_fill(o, 0, NULL);
	numat_fill(o, 1, numat_first_half);
	pfn = gfa_numa_alloc(e.np, NULL, e.t->nodes[0].id, 9, GFA_MT_MOVABLE, NUMAT_OTHER,
			     GFA_NUMA_REMOTE | GFA_NUMA_SMALLER, &got);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(got, 8);
	cr_assert_eq(gfa_pfn_to_zone(e.pool, (uint64_t)pfn), 1);
	cr_assert_eq(o->moves_from[1] + o->moves_to[1], 0, "node 1 compacted for node 0");
	numat_assert_zone_on(&e, 1, e.t->nodes[1].id);
	cr_assert_eq(gfa_free(e.pool, (uint64_t)pfn, 8, NUMAT_OTHER), 0);
	numat_env_done(&e);
	numat_owner_free(o);
}

/* =========================================================================== */
/* suite numa_qemu: numa_real in a two-node QEMU guest                           */
/* =========================================================================== */

/* Suite numa_real must have run in the guest: this many tests, none skipped. */
/* (one of them, numa_real/a_client_guest_lands_on_its_zone_node, is in test_hostpool.c) */
#define NUMAT_REAL_TESTS 7

Test(numa_qemu, numa_real_in_two_node_guest, .timeout = 3200)
{
	const char *san = getenv("GFA_SANITIZER");
	struct gfa_numa_topology *t;
	char root[PATH_MAX], exe[PATH_MAX], cmd[2 * PATH_MAX];
	double secs = 0;
	ssize_t n;
	int rc;

	if (getenv("GFA_IN_QEMU"))
		cr_skip_test("already inside the QEMU harness");
	if (san && *san) {
		fprintf(stderr, "numa_qemu: skipped under GFA_SANITIZER=%s\n", san);
		cr_skip_test("QEMU cases skip under sanitizers (GFA_SANITIZER=%s)", san);
	}
	t = gfa_numa_topology_discover();
	if (t && t->nr_nodes >= 2) {
		gfa_numa_topology_free(t);
		cr_skip_test("this host has several NUMA nodes: suite numa_real ran directly");
	}
	gfa_numa_topology_free(t);
	if (!tu_find_harness_root(root, sizeof(root)))
		tu_qemu_skip("numa_qemu", "tools/kvm-in-qemu.sh not found");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	/* the guest prints the suite's own lines (not the other suites' "disabled") */
	snprintf(cmd, sizeof(cmd),
		 "out=$('%s' --filter='numa_real/*' --verbose --color=never 2>&1); rc=$?; "
		 "printf '%%s\\n' \"$out\" | grep -v 'Test is disabled'; [ $rc = 0 ] || exit $rc; "
		 "n=$(printf '%%s\\n' \"$out\" | grep -c '^\\[PASS\\] numa_real::'); "
		 "[ \"$n\" -ge %d ] || exit 3; exit 0",
		 exe, NUMAT_REAL_TESTS);
	/* the timeout also bounds the wait for another suite's guest (one at a time) */
	rc = tu_run_in_qemu("--numa 2 --cpus 2 --mem 1024 --timeout 1500", cmd, &secs);
	fprintf(stderr,
		"numa_qemu: suite numa_real in a 2-node QEMU guest: exit %d after "
		"%.1f s\n",
		rc, secs);
	if (rc == 77)
		tu_qemu_skip("numa_qemu", "the QEMU harness cannot run here (exit 77, see its "
					  "message above)");
	cr_assert_eq(rc, 0,
		     "suite numa_real failed in the guest (exit %d; 3: fewer than %d "
		     "tests ran unskipped)",
		     rc, NUMAT_REAL_TESTS);
}

/* Bad arguments of gfa_numa_alloc are allocator errors: counted in err_* like gfa_alloc's. */
Test(numa, bad_alloc_args_are_counted)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	struct gfa_pool_config cfg;
	struct gfa_numa_node_stat ns;
	struct gfa_numa_pool *np;
	struct gfa_vmstat a, b;
	struct gfa_pool *pool;

	cr_assert_not_null(t);
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, 4 * GFA_PAGEBLOCK_FRAMES), 0);
	pool = gfa_pool_create(&cfg);
	cr_assert_not_null(pool);
	np = gfa_numa_attach(pool, t);
	cr_assert_not_null(np);
	cr_assert_eq(gfa_pool_vmstat(pool, &b), 0);
	cr_assert_eq(gfa_numa_alloc(np, NULL, 0, GFA_MAX_ORDER + 1, GFA_MT_MOVABLE, 1, 0, NULL),
		     GFA_EORDER);
	cr_assert_eq(gfa_numa_alloc(np, NULL, 0, 0, GFA_MT_ISOLATE, 1, 0, NULL), GFA_EMIGRATE);
	cr_assert_eq(gfa_numa_alloc(np, NULL, 0, 0, GFA_MT_MOVABLE, 1, 0x8000, NULL), GFA_EINVAL);
	cr_assert_eq(gfa_numa_node_stat(np, 0, NULL), GFA_EFAULT);
	cr_assert_eq(gfa_pool_vmstat(pool, &a), 0);
	cr_assert_eq(a.err_order, b.err_order + 1, "EORDER counted %lu -> %lu",
		     (unsigned long)b.err_order, (unsigned long)a.err_order);
	cr_assert_eq(a.err_migratetype, b.err_migratetype + 1, "EMIGRATE not counted");
	cr_assert_eq(a.err_inval, b.err_inval + 1, "EINVAL not counted");
	cr_assert_eq(a.err_fault, b.err_fault + 1, "EFAULT not counted");
	cr_assert_eq(gfa_numa_node_stat(np, 0, &ns), 0);
	cr_assert_eq(ns.nr_free, ns.nr_frames, "nothing allocated");
	gfa_numa_detach(np);
	gfa_pool_destroy(pool);
	gfa_numa_topology_free(t);
}
