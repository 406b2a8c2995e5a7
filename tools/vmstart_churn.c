// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's churn: each round the guests' balloons take and give back scattered
 * pages, the VMM takes unmovable frames, half the VMs stop and start again, and the
 * guests' RAM is collapsed back onto 2 MiB blocks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"

/* VMM-internal unmovable allocations (virtio rings, page tables) between starts. */
static void vmm_internal_allocs(struct run *r, unsigned int n)
{
	for (unsigned int k = 0; k < n && r->nr_unmovable < MAX_UNMOVABLE; k++) {
		int64_t pfn = gfa_alloc(r->pool, 0, 0, GFA_MT_UNMOVABLE, 1, 0);

		if (pfn >= 0)
			r->unmovable[r->nr_unmovable++] = (uint64_t)pfn;
	}
}

/*
 * The guests' balloon drivers give back (or take again) every 8th page of the top
 * quarter of RAM, as virtio-balloon reports scattered pages: this splits order-9
 * blocks, so after deflation those ranges are backed by small blocks until collapse.
 */
static int64_t balloon_all(struct run *r, bool inflate)
{
	uint64_t lo = (r->o.mem - r->o.mem / 4) & ~(2 * MiB - 1), n = 0;
	struct gfa_gpa_range *q = malloc(((r->o.mem - lo) / (8 * GFA_FRAME_SIZE) + 1) * sizeof(*q));
	int64_t frames = 0;

	if (!q)
		return -ENOMEM;
	for (uint64_t gpa = lo; gpa < r->o.mem; gpa += 8 * GFA_FRAME_SIZE)
		q[n++] = (struct gfa_gpa_range){ gpa, GFA_FRAME_SIZE };
	for (unsigned int i = 0; i < r->o.vms; i++) {
		struct gfa_guest *g = gfa_vm_guest(r->vm[i]);
		int64_t got = inflate ? gfa_balloon_inflate(g, q, (unsigned int)n) :
					gfa_balloon_deflate(g, q, (unsigned int)n);

		if (got < 0) {
			fprintf(stderr, "gfactl vmstart: VM %u: balloon %s: %s\n", i,
				inflate ? "inflate" : "deflate", strerror((int)-got));
			free(q);
			return got;
		}
		frames += got;
	}
	free(q);
	return frames;
}

int vmstart_churn(struct run *r)
{
	for (unsigned int round = 1; round <= r->o.rounds; round++) {
		unsigned int collapsed = 0;
		int64_t ballooned = balloon_all(r, true);
		double t0;

		if (ballooned < 0)
			return -1;
		t0 = now_ms();
		gfa_host_return_quiesce(r->hr, 30000);
		if (!r->o.quiet)
			printf("  round %u: balloons took %ld MiB in 4 KiB pages, host-backed now "
			       "%ld MiB (%.0f ms to quiesce)\n",
			       round, (long)(ballooned * 4096 / (int64_t)MiB),
			       (long)(vmstart_host_backed_bytes(r) / (int64_t)MiB), now_ms() - t0);
		if (balloon_all(r, false) < 0)
			return -1;
		vmstart_record_share(r);
		vmm_internal_allocs(r, 32);
		/* each VM of the half stops and starts again (a reboot): the restart takes
		 * the shell the stop gave back, and the frames the stop left dirty are
		 * being zeroed in the background meanwhile */
		for (unsigned int i = round % 2; i < r->o.vms; i += 2) {
			gfa_vm_destroy(r->vm[i]);
			r->vm[i] = NULL;
			if (vmstart_start_vm(r, i, "restart", round))
				return -1;
		}
		/* khugepaged's pass: collapse what started on small blocks */
		for (unsigned int i = 0; i < r->o.vms; i++)
			collapsed += (unsigned int)gfa_guest_collapse(gfa_vm_guest(r->vm[i]), 64);
		vmstart_record_share(r);
		if (!r->o.quiet)
			printf("  round %u: %u ranges collapsed, 2 MiB share %.1f%%\n", round,
			       collapsed, r->ts_huge[r->ts_n - 1]);
		vmstart_stat_snapshot(r, "churn");
	}
	return 0;
}
