// SPDX-License-Identifier: MIT
/*
 * allocator/strerror.c - gfa_strerror: gfa's meaning of the errnos it returns.
 *
 * gfa reuses errnos whose C library text says something else (GFA_EMIGRATE is
 * -EPROTOTYPE, "Protocol wrong type for socket"), so a VMM that prints strerror() of a
 * gfa error misleads its user.  One table names each GFA_E* (gfa/allocator.h's list);
 * an errno with two meanings across calls names both.
 */
#define _GNU_SOURCE /* strerrordesc_np */
#include <limits.h>
#include <string.h>
#include <gfa/allocator.h>
#include "common/compiler.h"

static const struct {
	int err;
	const char *text;
} gfa_errors[] = {
	{ GFA_EFAULT, "NULL pool, cache, config or output pointer" },
	{ GFA_EINVAL, "invalid argument (bad config, mode or flags, nonzero reserved field, "
		      "or a cache of another pool)" },
	{ GFA_ERANGE, "pfn outside the pool, or zone index out of range" },
	{ GFA_EALIGN, "pfn not aligned to the block's order" },
	{ GFA_EORDER, "order above GFA_MAX_ORDER" },
	{ GFA_EMIGRATE, "unknown migratetype" },
	{ GFA_EDOUBLEFREE, "already so (a block already free, a range already ballooned, a "
			   "worker already running)" },
	{ GFA_EWRONGORDER, "allocated block has another order" },
	{ GFA_ENOTHEAD, "not found (no block starts at that pfn, or no such claim, owner or "
			"ballooned range)" },
	{ GFA_EOWNER, "owner cookie does not match the block's owner" },
	{ GFA_EBUSY, "block is being moved or released to the host" },
	{ GFA_ENOMEM, "no free block of that order" },
	{ GFA_ETHREAD, "a per-vCPU cache used by two threads at once, or a call from a thread "
		       "that must not make it" },
	{ GFA_ECORRUPT, "an invariant check found a violation" },
	{ GFA_EOVERLAP, "ranges of one request overlap each other" },
	{ GFA_ENONODE, "node not in the topology, or a zone without host backing" },
	{ GFA_ENOCPU, "CPU (set) with no node in the topology" },
	{ GFA_ESPAN, "CPU set spans several nodes" },
	{ GFA_EREMOTE, "frames found on another node than their zone's" },
	{ GFA_EPOLICY, "zone memory lacks its MPOL_BIND policy" },
	{ GFA_ETOOBIG, "more frames than the node has" },
	{ GFA_ENONUMA, "the host has no NUMA support" },
};

const char *gfa_strerror(int err)
{
	const char *s;

	if (err == 0)
		return "success";
	if (err > 0)
		err = -err;
	for (size_t i = 0; i < ARRAY_SIZE(gfa_errors); i++)
		if (gfa_errors[i].err == err)
			return gfa_errors[i].text;
	/* strerrordesc_np: strerror's text without its thread-unsafe buffer */
	s = err == INT_MIN ? NULL : strerrordesc_np(-err);
	return s ? s : "unknown error";
}
