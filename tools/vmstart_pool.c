// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's pool: sized for the run, checked against the host, then set up in
 * the order include/gfa/numa.h gives: topology, zones per node, pool, backing (not
 * populated), zones bound to their nodes, populated there, their placement verified.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "tools/vmstart.h"

/* --pool, or VMs x RAM x 1.25 in whole 2 MiB blocks, with room for what churn keeps */
static uint64_t pool_bytes(const struct vmstart_opts *o)
{
	if (o->pool)
		return o->pool;
	return ((o->vms * o->mem * 5 / 4 + 2 * MiB - 1) & ~(2 * MiB - 1)) + vmstart_churn_room(o);
}

/*
 * The kernel baselines run while the pool and its VMs are still there: VMs x RAM (and a
 * guard page each) on top of the pool, within 80% of what the host has available.
 */
static bool fits_host(struct run *r, uint64_t pool)
{
	uint64_t avail = gfa_host_mem_available();
	uint64_t need = pool + (r->o.no_baseline ? 0 : r->o.vms * (r->o.mem + KERNEL_GUARD));
	char mem[48];

	if (!avail || need <= avail / 10 * 8)
		return true;
	gfa_domain_format_size(r->o.mem, mem, sizeof(mem));
	fprintf(stderr,
		"gfactl vmstart: --vms %lu x %s %s needs %lu MiB (a %lu MiB "
		"pool%s), more than 80%% of the %lu MiB available; use fewer or smaller "
		"VMs%s\n",
		(unsigned long)r->o.vms, vmstart_mem_source(&r->o), mem,
		(unsigned long)(need / MiB), (unsigned long)(pool / MiB),
		r->o.no_baseline ? "" : ", and the kernel baselines' VMs beside it",
		(unsigned long)(avail / MiB), r->o.no_baseline ? "" : " (or --no-baseline)");
	r->too_big = true;
	return false;
}

/*
 * One zone per NUMA node, each sized for what lands on it, not 1/nodes of the pool:
 * VMs go round-robin over the zones (vmstart_start_vm) and the VMM's own unmovable
 * frames to zone 0.  Else (one node, or too many) one zone, and no topology.
 */
static void zones_config(struct run *r, uint64_t pool, struct gfa_pool_config *pc)
{
	uint64_t unmov = vmstart_churn_room(&r->o), frames[GFA_MAX_ZONES];
	uint64_t per_vm = (pool > unmov ? pool - unmov : 0) / r->o.vms;
	unsigned int n = r->topo ? r->topo->nr_nodes : 0;

	if (n > 1 && n <= GFA_MAX_ZONES) {
		for (unsigned int i = 0; i < n; i++) {
			uint64_t vms = i < r->o.vms ? (r->o.vms - i + n - 1) / n : 0;
			uint64_t bytes = per_vm * vms + (i ? 0 : unmov);

			bytes = (bytes + 2 * MiB - 1) & ~(2 * MiB - 1);
			frames[i] = bytes ? bytes >> GFA_FRAME_SHIFT : GFA_PAGEBLOCK_FRAMES;
		}
		if (!gfa_numa_pool_config_nodes(pc, r->topo, frames))
			return;
	}
	gfa_numa_topology_free(r->topo);
	r->topo = NULL;
	gfa_pool_config_init(pc, pool >> GFA_FRAME_SHIFT);
}

/* Bind each zone to its node, fault it in there, and check where it landed. */
static int zones_place(struct run *r)
{
	struct gfa_numa_placement pl[GFA_MAX_ZONES];
	char line[256];
	int err;

	if (!r->topo) {
		printf("NUMA: one node: one zone\n");
		return gfa_backing_populate(r->b);
	}
	r->np = gfa_numa_attach(r->pool, r->topo);
	err = r->np ? gfa_numa_bind_pool(r->np) : -errno;
	if (!err)
		err = gfa_numa_populate_pool(r->np);
	if (err) {
		/* the numa calls return a negative errno; attach sets errno */
		fprintf(stderr, "gfactl vmstart: binding zones to nodes: %s\n", strerror(-err));
		return -1;
	}
	err = gfa_numa_verify_pool(r->np, pl);
	for (unsigned int z = 0; z < r->nr_zones; z++) {
		gfa_numa_placement_text(&pl[z], line, sizeof(line));
		printf("NUMA: %s", line); /* the text ends its line */
	}
	if (err)
		fprintf(stderr, "gfactl vmstart: zones are not where they should be (%s)\n",
			strerror(-err));
	return err;
}

struct gfa_pool *vmstart_pool_setup(struct run *r)
{
	struct gfa_compact_config cc = { .proactiveness = (unsigned int)r->o.proactiveness };
	struct gfa_backing_config bc = { .populate = false };
	uint64_t pool = pool_bytes(&r->o), total = 0;
	struct gfa_pool_config pc;
	double t0 = now_ms();

	if (!fits_host(r, pool))
		return NULL;
	r->topo = gfa_numa_topology_discover();
	zones_config(r, pool, &pc);
	r->nr_zones = pc.nr_zones;
	for (unsigned int z = 0; z < pc.nr_zones; z++)
		total += pc.zones[z].nr_frames << GFA_FRAME_SHIFT;
	r->pool = gfa_pool_create(&pc);
	if (!r->pool) {
		fprintf(stderr, "gfactl vmstart: pool of %lu MiB: %s\n",
			(unsigned long)(pool / MiB), strerror(errno));
		return NULL;
	}
	gfa_compact_configure(r->pool, &cc);
	r->b = gfa_backing_create(r->pool, &bc);
	if (!r->b) {
		fprintf(stderr, "gfactl vmstart: backing the pool with memfds: %s\n",
			strerror(errno));
		return NULL;
	}
	if (zones_place(r))
		return NULL;
	for (unsigned int z = 0; z < r->nr_zones; z++)
		r->zone_pcp[z] = gfa_pcp_create(r->pool, z);
	r->pcp = r->zone_pcp[0];
	printf("pool: %lu MiB in %u zone(s), memfd-backed, populated in %.0f ms (resident before "
	       "any VM starts; not part of start latency)\n",
	       (unsigned long)(total / MiB), gfa_pool_nr_zones(r->pool), now_ms() - t0);
	return r->pool;
}
