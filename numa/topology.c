// SPDX-License-Identifier: MIT
/*
 * NUMA topology: nodes with memory, their CPUs and distances from libnuma (or a fake
 * topology carved from one real node), each node's fallback order, CPU -> node, and
 * the pool configuration with one zone per node.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "numa/internal.h"

#define LOCAL_DISTANCE  10
#define REMOTE_DISTANCE 20

/*
 * Fallback order of node i: itself, then by distance; equal distances in round-robin
 * order starting after i, so that nodes at one distance do not all fall back on the
 * same node first (what the kernel's node_load achieves in build_zonelists).
 */
static void build_zonelists(struct gfa_numa_topology *t)
{
	unsigned int n = t->nr_nodes;

	for (unsigned int i = 0; i < n; i++) {
		uint8_t *zl = t->zonelist[i];

		for (unsigned int k = 0; k < n; k++)
			zl[k] = (uint8_t)((i + k) % n);
		/* insertion sort on (distance, round-robin position): n is small */
		for (unsigned int k = 1; k < n; k++) {
			uint8_t v = zl[k];
			unsigned int m = k;

			while (m > 0 && t->distance[i][zl[m - 1]] > t->distance[i][v]) {
				zl[m] = zl[m - 1];
				m--;
			}
			zl[m] = v;
		}
	}
}

int gfa_numa_node_index(const struct gfa_numa_topology *t, int node)
{
	if (!t)
		return GFA_EFAULT;
	for (unsigned int i = 0; i < t->nr_nodes; i++)
		if (t->nodes[i].id == node)
			return (int)i;
	return GFA_ENONODE;
}

/* ---- discovery ---- */

/* Nodes with memory that this process may allocate on, in id order. */
static int discover_nodes(struct gfa_numa_topology *t)
{
	int max = numa_max_node();

	for (int n = 0; n <= max; n++) {
		long long free_b = 0, size;

		if (!numa_bitmask_isbitset(numa_nodes_ptr, (unsigned int)n) ||
		    !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned int)n))
			continue;
		size = numa_node_size64(n, &free_b);
		if (size <= 0)
			continue; /* memoryless node: its CPUs go to the nearest one */
		if (t->nr_nodes == GFA_NUMA_MAX_NODES)
			return -EOVERFLOW;
		t->nodes[t->nr_nodes++] = (struct gfa_numa_node){
			.id = n,
			.phys_node = n,
			.mem_bytes = (uint64_t)size,
			.free_bytes = free_b > 0 ? (uint64_t)free_b : 0,
		};
	}
	return t->nr_nodes ? 0 : -ENOSYS;
}

static uint8_t real_distance(int a, int b)
{
	int d = numa_distance(a, b);

	if (d <= 0) /* no SLIT: the kernel's defaults */
		d = a == b ? LOCAL_DISTANCE : REMOTE_DISTANCE;
	return (uint8_t)(d > 255 ? 255 : d);
}

/* The listed node closest to real node n (n itself when it has memory). */
static int nearest_index(const struct gfa_numa_topology *t, int n)
{
	int best = -1, best_d = 256;

	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		int d = t->nodes[i].id == n ? 0 : real_distance(n, t->nodes[i].id);

		if (d < best_d) {
			best_d = d;
			best = (int)i;
		}
	}
	return best;
}

static unsigned int configured_cpus(void)
{
	long n = numa_available() >= 0 ? numa_num_configured_cpus() : sysconf(_SC_NPROCESSORS_CONF);

	if (n < 1)
		n = 1;
	return n > GFA_NUMA_MAX_CPUS ? GFA_NUMA_MAX_CPUS : (unsigned int)n;
}

static void discover_cpus(struct gfa_numa_topology *t)
{
	t->nr_cpus = configured_cpus();
	for (unsigned int c = 0; c < t->nr_cpus; c++) {
		int n = numa_node_of_cpu((int)c);
		int i = n >= 0 ? nearest_index(t, n) : -1;

		t->cpu_node[c] = (int16_t)i;
		if (i >= 0)
			t->nodes[i].nr_cpus++;
	}
}

static int discover_into(struct gfa_numa_topology *t)
{
	int err;

	memset(t, 0, sizeof(*t));
	if (numa_available() < 0)
		return -ENOSYS;
	err = discover_nodes(t);
	if (err)
		return err;
	for (unsigned int i = 0; i < t->nr_nodes; i++)
		for (unsigned int j = 0; j < t->nr_nodes; j++)
			t->distance[i][j] = real_distance(t->nodes[i].id, t->nodes[j].id);
	discover_cpus(t);
	build_zonelists(t);
	return 0;
}

struct gfa_numa_topology *gfa_numa_topology_discover(void)
{
	struct gfa_numa_topology *t = malloc(sizeof(*t));
	int err;

	if (!t)
		return NULL;
	err = discover_into(t);
	if (err) {
		free(t);
		errno = -err;
		return NULL;
	}
	return t;
}

void gfa_numa_topology_free(struct gfa_numa_topology *t)
{
	free(t);
}

/* ---- fake topology ---- */

static bool distances_valid(unsigned int n, const unsigned int *d)
{
	for (unsigned int i = 0; i < n; i++)
		for (unsigned int j = 0; j < n; j++) {
			unsigned int v = d[i * n + j];

			if (i == j ? v != LOCAL_DISTANCE : (v <= LOCAL_DISTANCE || v > 254))
				return false;
		}
	return true;
}

/* The real node to carve from: the first listed one, or "node 0" from sysconf. */
static struct gfa_numa_node carve_source(struct gfa_numa_topology *real, bool *have_real)
{
	long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
	long psize = sysconf(_SC_PAGESIZE);

	*have_real = discover_into(real) == 0;
	if (*have_real)
		return real->nodes[0];
	return (struct gfa_numa_node){
		.id = 0,
		.phys_node = 0,
		.mem_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0,
		.free_bytes = avail > 0 && psize > 0 ? (uint64_t)avail * (uint64_t)psize : 0,
	};
}

/* Split the source node's CPUs into nr contiguous blocks, one per fake node. */
static void carve_cpus(struct gfa_numa_topology *t, const struct gfa_numa_topology *real,
		       bool have_real, unsigned int nr)
{
	unsigned int m = 0, p = 0;

	t->nr_cpus = configured_cpus();
	for (unsigned int c = 0; c < t->nr_cpus; c++)
		if (!have_real || real->cpu_node[c] == 0)
			m++;
	for (unsigned int c = 0; c < t->nr_cpus; c++) {
		int i = -1;

		if (!have_real || real->cpu_node[c] == 0)
			i = (int)(p++ * nr / m);
		t->cpu_node[c] = (int16_t)i;
		if (i >= 0)
			t->nodes[i].nr_cpus++;
	}
}

struct gfa_numa_topology *gfa_numa_topology_fake(unsigned int nr_nodes,
						 const unsigned int *distance)
{
	struct gfa_numa_topology *t, *real;
	struct gfa_numa_node src;
	bool have_real;

	if (!nr_nodes || nr_nodes > GFA_NUMA_MAX_NODES ||
	    (distance && !distances_valid(nr_nodes, distance))) {
		errno = EINVAL;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	real = malloc(sizeof(*real));
	if (!t || !real) {
		free(t);
		free(real);
		errno = ENOMEM;
		return NULL;
	}
	src = carve_source(real, &have_real);
	t->fake = true;
	t->nr_nodes = nr_nodes;
	for (unsigned int i = 0; i < nr_nodes; i++) {
		t->nodes[i] = (struct gfa_numa_node){
			.id = (int)i,
			.phys_node = src.phys_node,
			.mem_bytes = src.mem_bytes / nr_nodes,
			.free_bytes = src.free_bytes / nr_nodes,
		};
		for (unsigned int j = 0; j < nr_nodes; j++)
			t->distance[i][j] = (uint8_t)(distance ? distance[i * nr_nodes + j] :
						      i == j   ? LOCAL_DISTANCE :
								 REMOTE_DISTANCE);
	}
	carve_cpus(t, real, have_real, nr_nodes);
	free(real);
	build_zonelists(t);
	return t;
}

/* ---- CPUs and threads ---- */

int gfa_numa_cpu_node(const struct gfa_numa_topology *t, unsigned int cpu)
{
	if (!t)
		return GFA_EFAULT;
	if (cpu >= t->nr_cpus || t->cpu_node[cpu] < 0)
		return GFA_ENOCPU;
	return t->nodes[t->cpu_node[cpu]].id;
}

int gfa_numa_cpuset_node(const struct gfa_numa_topology *t, const unsigned long *mask, size_t nbits)
{
	const size_t bpl = 8 * sizeof(unsigned long);
	int found = -1;
	bool any = false;

	if (!t || !mask)
		return GFA_EFAULT; /* (an empty set too: NULL is never a set) */
	for (size_t c = 0; c < nbits; c++) {
		int i;

		if (!(mask[c / bpl] & (1UL << (c % bpl))))
			continue;
		any = true;
		i = c < t->nr_cpus ? t->cpu_node[c] : -1;
		if (i < 0)
			continue;
		if (found >= 0 && found != i)
			return GFA_ESPAN;
		found = i;
	}
	if (!any)
		return GFA_EINVAL;
	return found < 0 ? GFA_ENOCPU : t->nodes[found].id;
}

int gfa_numa_thread_node(const struct gfa_numa_topology *t, bool *pinned)
{
	size_t size = CPU_ALLOC_SIZE(GFA_NUMA_MAX_CPUS);
	cpu_set_t *set;
	int node, cpu;

	if (!t)
		return GFA_EFAULT;
	set = CPU_ALLOC(GFA_NUMA_MAX_CPUS);
	if (!set)
		return -ENOMEM;
	CPU_ZERO_S(size, set);
	if (sched_getaffinity(0, size, set)) {
		node = -errno;
		CPU_FREE(set);
		return node;
	}
	node = gfa_numa_cpuset_node(t, (const unsigned long *)set, GFA_NUMA_MAX_CPUS);
	CPU_FREE(set);
	if (pinned)
		*pinned = node >= 0;
	if (node != GFA_ESPAN)
		return node;
	/* not pinned to one node: the node it runs on now, as the kernel's numa_node_id() */
	cpu = sched_getcpu();
	if (cpu < 0)
		return -errno;
	return gfa_numa_cpu_node(t, (unsigned int)cpu);
}

int gfa_numa_zonelist(const struct gfa_numa_topology *t, int node, int *nodes, unsigned int max)
{
	int i = gfa_numa_node_index(t, node);

	if (i < 0)
		return i;
	if (!nodes && max)
		return GFA_EFAULT;
	for (unsigned int k = 0; k < t->nr_nodes && k < max; k++)
		nodes[k] = t->nodes[t->zonelist[i][k]].id;
	return (int)t->nr_nodes;
}

/* ---- text ---- */

/* CPU list of node index i as ranges: "0-3,8". */
static void print_cpus(struct strbuf *sb, const struct gfa_numa_topology *t, int i)
{
	unsigned int c = 0;
	bool first = true;

	while (c < t->nr_cpus) {
		unsigned int lo;

		if (t->cpu_node[c] != i) {
			c++;
			continue;
		}
		lo = c;
		while (c + 1 < t->nr_cpus && t->cpu_node[c + 1] == i)
			c++;
		sb_printf(sb, first ? " " : ",");
		sb_printf(sb, lo == c ? "%u" : "%u-%u", lo, c);
		first = false;
		c++;
	}
}

int gfa_numa_topology_text(const struct gfa_numa_topology *t, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };

	if (!t || (!buf && len))
		return GFA_EFAULT;
	if (t->fake)
		sb_printf(&sb,
			  "fake topology: %u nodes carved from real node %d "
			  "(for tests, not a real layout)\n",
			  t->nr_nodes, t->nr_nodes ? t->nodes[0].phys_node : -1);
	else
		sb_printf(&sb, "topology: %u nodes with memory (libnuma)\n", t->nr_nodes);
	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		const struct gfa_numa_node *n = &t->nodes[i];

		sb_printf(&sb, "node %d cpus:", n->id);
		print_cpus(&sb, t, (int)i);
		sb_printf(&sb, "\nnode %d size: %lu MB\nnode %d free: %lu MB\n", n->id,
			  (unsigned long)(n->mem_bytes >> 20), n->id,
			  (unsigned long)(n->free_bytes >> 20));
		sb_printf(&sb, "node %d zonelist:", n->id);
		for (unsigned int k = 0; k < t->nr_nodes; k++)
			sb_printf(&sb, " %d", t->nodes[t->zonelist[i][k]].id);
		sb_printf(&sb, "\n");
	}
	sb_printf(&sb, "node distances:\nnode ");
	for (unsigned int j = 0; j < t->nr_nodes; j++)
		sb_printf(&sb, " %3d", t->nodes[j].id);
	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		sb_printf(&sb, "\n%3d: ", t->nodes[i].id);
		for (unsigned int j = 0; j < t->nr_nodes; j++)
			sb_printf(&sb, " %3u", t->distance[i][j]);
	}
	sb_printf(&sb, "\n");
	return sb_finish(&sb);
}

/* ---- pool configuration ---- */

int gfa_numa_pool_config_nodes(struct gfa_pool_config *cfg, const struct gfa_numa_topology *t,
			       const uint64_t *frames)
{
	struct gfa_pool_config c;

	if (!cfg || !t || !frames)
		return GFA_EFAULT;
	if (!t->nr_nodes || t->nr_nodes > GFA_MAX_ZONES)
		return GFA_EINVAL;
	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		if (frames[i] < GFA_PAGEBLOCK_FRAMES || frames[i] > (1ULL << 31))
			return GFA_EINVAL;
		if (frames[i] > t->nodes[i].mem_bytes >> GFA_FRAME_SHIFT)
			return GFA_ETOOBIG;
	}
	gfa_pool_config_init(&c, frames[0]);
	c.nr_zones = t->nr_nodes;
	for (unsigned int i = 0; i < t->nr_nodes; i++) {
		c.zones[i].nr_frames = frames[i];
		c.zones[i].node = t->nodes[i].id;
	}
	*cfg = c;
	return 0;
}

int gfa_numa_pool_config(struct gfa_pool_config *cfg, const struct gfa_numa_topology *t,
			 uint64_t frames_per_node)
{
	uint64_t frames[GFA_NUMA_MAX_NODES];

	if (!cfg || !t)
		return GFA_EFAULT;
	for (unsigned int i = 0; i < GFA_NUMA_MAX_NODES; i++)
		frames[i] = frames_per_node;
	return gfa_numa_pool_config_nodes(cfg, t, frames);
}
