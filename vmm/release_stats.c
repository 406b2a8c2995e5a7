// SPDX-License-Identifier: MIT
/* The release engine's mode and counters (vmm/release_internal.h). */
#include "vmm/release_internal.h"

#include <errno.h>
#include <string.h>

const char *gfa_release_mode(const struct gfa_release_engine *e, const char **why)
{
	int mode;

	if (!e)
		return NULL;
	mode = __atomic_load_n(&e->mode, __ATOMIC_ACQUIRE);
	if (why)
		*why = mode == GFA_RELEASE_MODE_SYNC ? e->why_sync : e->why_ring;
	return mode == GFA_RELEASE_MODE_SYNC ? "sync" : "io_uring";
}

int gfa_release_stats(const struct gfa_release_engine *e, struct gfa_release_stats *out)
{
	if (!e || !out)
		return -EFAULT;
	memset(out, 0, sizeof(*out));
	out->ranges_submitted = STAT_GET(e, ranges_submitted);
	out->ranges_rejected = STAT_GET(e, ranges_rejected);
	out->ranges_done = STAT_GET(e, ranges_done);
	out->ranges_failed = STAT_GET(e, ranges_failed);
	out->ranges_coalesced = STAT_GET(e, ranges_coalesced);
	out->bytes_submitted = STAT_GET(e, bytes_submitted);
	out->bytes_released = STAT_GET(e, bytes_released);
	out->punches = STAT_GET(e, punches);
	out->ring_ops = STAT_GET(e, ring_ops);
	out->sync_ops = STAT_GET(e, sync_ops);
	out->madvise_ops = STAT_GET(e, madvise_ops);
	out->ops_failed = STAT_GET(e, ops_failed);
	out->retries = STAT_GET(e, retries);
	out->sync_fallbacks = STAT_GET(e, sync_fallbacks);
	out->submit_errors = STAT_GET(e, submit_errors);
	out->passes = STAT_GET(e, passes);
	out->inflight_ranges = STAT_GET(e, inflight_ranges);
	out->inflight_bytes = STAT_GET(e, inflight_bytes);
	out->mode = __atomic_load_n(&e->mode, __ATOMIC_ACQUIRE);
	return 0;
}
