// SPDX-License-Identifier: MIT
/*
 * Binding zones to nodes and checking where their frames really are.
 *
 * The pool's memory is made elsewhere (one memfd per zone, mapped MAP_SHARED by the
 * vmm layer); this file only sees the zone's host range.  mbind on a shared memfd
 * mapping sets the file's shared policy, so guest windows that map the same memfd
 * later allocate on the same node.  The binding must come before the memory is
 * populated: a page already faulted in stays where it is unless it can be moved.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <numaif.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include "numa/internal.h"
#include "allocator/layers.h"
#include "common/compiler.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define VERIFY_BATCH   1024
#define MPOL_MODE_MASK 0xff /* mode without MPOL_F_STATIC_NODES & co */

int numa_zone_range(struct gfa_numa_pool *np, unsigned int zone, void **addr, size_t *len)
{
	uint64_t start, n;
	int err;

	if (!np)
		return GFA_EFAULT;
	err = gfa_zone_span(np->pool, zone, &start, &n);
	if (err)
		return err;
	*addr = gfa_pfn_to_addr(np->pool, start);
	if (!*addr)
		return -ENODEV;
	*len = n << GFA_FRAME_SHIFT;
	return 0;
}

static int zone_phys_node(struct gfa_numa_pool *np, unsigned int zone)
{
	int node = np->topo.nodes[zone].phys_node;

	return node >= 0 && node < NUMA_MASK_BITS ? node : GFA_ENONODE;
}

static void mask_of(unsigned long *mask, int node)
{
	const unsigned int bpl = 8 * sizeof(unsigned long);

	memset(mask, 0, NUMA_MASK_LONGS * sizeof(*mask));
	mask[node / bpl] |= 1UL << (node % bpl);
}

int gfa_numa_bind_zone(struct gfa_numa_pool *np, unsigned int zone)
{
	unsigned long mask[NUMA_MASK_LONGS];
	void *addr;
	size_t len;
	int err = numa_zone_range(np, zone, &addr, &len), node;

	if (err)
		return err;
	node = zone_phys_node(np, zone);
	if (node < 0)
		return node;
	mask_of(mask, node);
	/* STRICT | MOVE: pages present already must move, or the call fails (EIO) */
	if (mbind(addr, len, MPOL_BIND, mask, NUMA_MASK_BITS + 1, MPOL_MF_STRICT | MPOL_MF_MOVE)) {
		err = -errno;
		/* EIO (a page that would not move) comes after the policy was set */
		mbind(addr, len, MPOL_DEFAULT, NULL, 0, 0);
		return err;
	}
	return 0;
}

static void unbind_zone(struct gfa_numa_pool *np, unsigned int zone)
{
	void *addr;
	size_t len;

	if (!numa_zone_range(np, zone, &addr, &len))
		mbind(addr, len, MPOL_DEFAULT, NULL, 0, 0);
}

int gfa_numa_bind_pool(struct gfa_numa_pool *np)
{
	if (!np)
		return GFA_EFAULT;
	for (unsigned int z = 0; z < np->topo.nr_nodes; z++) {
		int err = gfa_numa_bind_zone(np, z);

		if (err) {
			/* all or nothing: the zones bound so far go back to the default */
			while (z--)
				unbind_zone(np, z);
			return err;
		}
	}
	return 0;
}

int gfa_numa_populate_zone(struct gfa_numa_pool *np, unsigned int zone)
{
	void *addr;
	size_t len;
	int err = numa_zone_range(np, zone, &addr, &len);

	if (err)
		return err;
	if (!madvise(addr, len, MADV_POPULATE_WRITE))
		return 0;
	if (errno != EINVAL)
		return -errno;
	/* before Linux 5.14: write every frame back to itself (contents unchanged) */
	for (size_t off = 0; off < len; off += GFA_FRAME_SIZE) {
		volatile char *p = (volatile char *)addr + off;

		*p = *p; // cppcheck-suppress selfAssignment ; a volatile write faults it in
	}
	return 0;
}

int gfa_numa_populate_pool(struct gfa_numa_pool *np)
{
	if (!np)
		return GFA_EFAULT;
	for (unsigned int z = 0; z < np->topo.nr_nodes; z++) {
		int err = gfa_numa_populate_zone(np, z);

		if (err)
			return err;
	}
	return 0;
}

/* Is the policy at addr MPOL_BIND to exactly {node}? */
static bool policy_is_bind(void *addr, int node, int *mode)
{
	unsigned long mask[NUMA_MASK_LONGS], want[NUMA_MASK_LONGS];

	*mode = -1;
	if (get_mempolicy(mode, mask, NUMA_MASK_BITS + 1, addr, MPOL_F_ADDR))
		return false;
	mask_of(want, node);
	return (*mode & MPOL_MODE_MASK) == MPOL_BIND && !memcmp(mask, want, sizeof(mask));
}

/* Ask move_pages where frames [first, first + n) of the zone are; count them. */
static int verify_batch(void *base, uint64_t start_pfn, uint64_t first, unsigned int n,
			struct gfa_numa_placement *p)
{
	void *pages[VERIFY_BATCH];
	int status[VERIFY_BATCH];

	for (unsigned int i = 0; i < n; i++)
		pages[i] = (char *)base + ((first + i) << GFA_FRAME_SHIFT);
	/* no target nodes: move_pages only reports each page's node */
	if (move_pages(0, n, pages, NULL, status, 0))
		return -errno;
	for (unsigned int i = 0; i < n; i++) {
		if (status[i] == p->node) {
			p->on_node++;
		} else if (status[i] >= 0) {
			if (!p->elsewhere) {
				p->first_wrong_pfn = (int64_t)(start_pfn + first + i);
				p->first_wrong_node = status[i];
			}
			p->elsewhere++;
		} else {
			p->not_present++; /* -ENOENT: not faulted in; -EFAULT: no page */
		}
	}
	return 0;
}

int gfa_numa_verify_zone(struct gfa_numa_pool *np, unsigned int zone, struct gfa_numa_placement *p)
{
	uint64_t start, n;
	void *base;
	size_t len;
	int err;

	if (!np)
		return GFA_EFAULT;
	if (!p)
		return pool_count_error(np->pool, GFA_EFAULT);
	/* *p is filled before anything can fail: callers print every zone's entry */
	*p = (struct gfa_numa_placement){
		.zone = zone,
		.zone_node = -1,
		.fake = np->topo.fake,
		.node = -1,
		.policy_mode = -1,
		.first_wrong_pfn = -1,
		.first_wrong_node = -1,
	};
	if (zone < np->topo.nr_nodes)
		p->zone_node = np->topo.nodes[zone].id;
	if (!gfa_zone_span(np->pool, zone, &start, &n))
		p->frames = n;
	err = numa_zone_range(np, zone, &base, &len);
	if (err)
		return err;
	p->node = zone_phys_node(np, zone);
	if (p->node < 0)
		return p->node;
	p->policy_ok = policy_is_bind(base, p->node, &p->policy_mode);
	for (uint64_t i = 0; i < n; i += VERIFY_BATCH) {
		err = verify_batch(base, start, i,
				   (unsigned int)(n - i < VERIFY_BATCH ? n - i : VERIFY_BATCH), p);
		if (err)
			return err;
	}
	if (p->elsewhere)
		return GFA_EREMOTE;
	return p->policy_ok ? 0 : GFA_EPOLICY;
}

int gfa_numa_verify_pool(struct gfa_numa_pool *np, struct gfa_numa_placement *p)
{
	int first = 0;

	if (!np)
		return GFA_EFAULT;
	for (unsigned int z = 0; z < np->topo.nr_nodes; z++) {
		struct gfa_numa_placement one;
		int err = gfa_numa_verify_zone(np, z, p ? &p[z] : &one);

		if (err && !first)
			first = err; /* keep going: the caller gets every zone's report */
	}
	return first;
}

static const char *mode_name(int mode)
{
	static const char *const names[] = {
		"default", "preferred", "bind", "interleave", "local", "preferred_many",
	};

	if (mode < 0)
		return "unknown";
	mode &= MPOL_MODE_MASK;
	return mode < (int)ARRAY_SIZE(names) ? names[mode] : "other";
}

int gfa_numa_placement_text(const struct gfa_numa_placement *p, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };

	if (!p || (!buf && len))
		return GFA_EFAULT;
	if (p->fake)
		sb_printf(&sb, "zone %u (fake node %d on real node %d): ", p->zone, p->zone_node,
			  p->node);
	else
		sb_printf(&sb, "zone %u (node %d): ", p->zone, p->node);
	sb_printf(&sb,
		  "%lu frames, %lu on node, %lu elsewhere, "
		  "%lu not present, policy %s%s",
		  (unsigned long)p->frames, (unsigned long)p->on_node, (unsigned long)p->elsewhere,
		  (unsigned long)p->not_present, mode_name(p->policy_mode),
		  p->policy_ok ? "" : " (WRONG)");
	if (p->elsewhere)
		sb_printf(&sb, ", first misplaced pfn %ld on node %d", (long)p->first_wrong_pfn,
			  p->first_wrong_node);
	sb_printf(&sb, "\n");
	return sb_finish(&sb);
}
