// SPDX-License-Identifier: MIT
/*
 * The numa layer's error paths that a one-node host cannot produce.  This file defines
 * mbind(2) for the whole test binary: it makes the real system call and, only while a
 * test has armed it, reports EIO for one range after the kernel applied the policy,
 * which is what MPOL_MF_STRICT does for a page it could not move.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <numaif.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "gfa/numa.h"
#include "gfa/vmm.h"

static void *numa_fault_eio_addr; /* mbind on this address: policy set, then EIO */

long mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
	   unsigned long maxnode, unsigned int flags)
{
	long rc = syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags);

	if (rc == 0 && numa_fault_eio_addr && addr == numa_fault_eio_addr && mode != MPOL_DEFAULT) {
		errno = EIO;
		return -1;
	}
	return rc;
}

/* A bind that fails on zone 1 leaves no zone bound: zone 1's policy was set too. */
Test(numa_faults, failed_bind_resets_the_failing_zone_too)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	struct gfa_backing_config bc = { .populate = false };
	struct gfa_numa_placement pl[2];
	struct gfa_pool_config cfg;
	struct gfa_backing *b;
	struct gfa_pool *pool;
	struct gfa_numa_pool *np;
	uint64_t start, n;
	int err;

	cr_assert_not_null(t);
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, 2 * GFA_PAGEBLOCK_FRAMES), 0);
	pool = gfa_pool_create(&cfg);
	cr_assert_not_null(pool);
	b = gfa_backing_create(pool, &bc);
	cr_assert_not_null(b);
	np = gfa_numa_attach(pool, t);
	cr_assert_not_null(np);
	cr_assert_eq(gfa_zone_span(pool, 1, &start, &n), 0);
	numa_fault_eio_addr = gfa_pfn_to_addr(pool, start);
	err = gfa_numa_bind_pool(np);
	numa_fault_eio_addr = NULL;
	if (err == -EPERM || err == -ENOSYS)
		cr_skip_test("mbind not allowed here");
	cr_assert_eq(err, -EIO, "bind: %d", err);
	gfa_numa_verify_pool(np, pl);
	cr_assert_eq(pl[0].policy_mode, MPOL_DEFAULT, "zone 0 was reset");
	cr_assert_eq(pl[1].policy_mode, MPOL_DEFAULT,
		     "zone 1 (whose mbind failed) keeps its policy: %d", pl[1].policy_mode);
	gfa_numa_detach(np);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	gfa_numa_topology_free(t);
}

/* verify fills every zone's entry even when it cannot check it (no backing here). */
Test(numa_faults, verify_fills_the_placement_on_error)
{
	struct gfa_numa_topology *t = gfa_numa_topology_fake(2, NULL);
	struct gfa_numa_placement pl[2];
	struct gfa_pool_config cfg;
	struct gfa_numa_pool *np;
	struct gfa_pool *pool;

	cr_assert_not_null(t);
	cr_assert_eq(gfa_numa_pool_config(&cfg, t, 2 * GFA_PAGEBLOCK_FRAMES), 0);
	pool = gfa_pool_create(&cfg);
	cr_assert_not_null(pool);
	np = gfa_numa_attach(pool, t);
	cr_assert_not_null(np);
	memset(pl, 0xa5, sizeof(pl));
	cr_assert_eq(gfa_numa_verify_pool(np, pl), -ENODEV);
	cr_assert_eq(pl[1].zone, 1, "entry of zone 1 not filled: zone %u", pl[1].zone);
	cr_assert_eq(pl[1].frames, 2 * GFA_PAGEBLOCK_FRAMES);
	cr_assert_eq(pl[1].first_wrong_pfn, -1);
	gfa_numa_detach(np);
	gfa_pool_destroy(pool);
	gfa_numa_topology_free(t);
}
