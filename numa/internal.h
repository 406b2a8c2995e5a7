/* SPDX-License-Identifier: MIT */
/* Internal structures of the numa layer.  Not installed. */
#ifndef GFA_NUMA_INTERNAL_H
#define GFA_NUMA_INTERNAL_H

#include <stdatomic.h>
#include <gfa/numa.h>
#include "common/strbuf.h" /* the text functions' appender */
#include "common/bug.h"

/* Per-node counters of gfa_numa_alloc (relaxed atomics: statistics only). */
struct numa_node_counters {
	_Atomic uint64_t numa_hit, numa_miss, numa_foreign;
	_Atomic uint64_t thp_local, thp_remote, order_fallback, alloc_fail;
	_Atomic uint64_t compact_remote;
};

struct gfa_numa_pool {
	struct gfa_pool *pool;
	struct gfa_numa_topology topo; /* a copy: the caller's may go away */
	struct numa_node_counters c[GFA_NUMA_MAX_NODES];
};

/* Bits in the nodemask handed to mbind/get_mempolicy (the kernel's MAX_NUMNODES max). */
#define NUMA_MASK_BITS  1024
#define NUMA_MASK_LONGS (NUMA_MASK_BITS / (8 * sizeof(unsigned long)))

/* Zone z's host address and length; -ENODEV when the pool has no backing for it. */
int numa_zone_range(struct gfa_numa_pool *np, unsigned int zone, void **addr, size_t *len);

#endif
