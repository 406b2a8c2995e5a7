/*
 * The host-return thread when the host cannot populate: MADV_POPULATE_WRITE fails with
 * ENOMEM (a memory limit).  madvise is interposed for the whole binary; it passes
 * through unless armed.  Not under ThreadSanitizer (its runtime's own calls must not
 * meet the interposer).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#ifndef __SANITIZE_THREAD__
static atomic_int hrf_fail_populate; /* > 0: MADV_POPULATE_WRITE fails with ENOMEM */
static atomic_ulong hrf_populate_calls;

int madvise(void *addr, size_t len, int advice)
{
	static int (*real)(void *, size_t, int);

	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
	if (advice == MADV_POPULATE_WRITE) {
		atomic_fetch_add(&hrf_populate_calls, 1);
		if (atomic_load(&hrf_fail_populate)) {
			errno = ENOMEM;
			return -1;
		}
	}
	return real(addr, len, advice);
}

static uint64_t hrf_released(struct gfa_pool *p)
{
	struct gfa_zone_stat st;

	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	return st.nr_released;
}

/*
 * A grow the host refuses leaves the frames released (writing them instead would fault
 * the same way, fatally: SIGBUS on hugetlbfs, the OOM killer at a memcg limit), counts
 * them in release_populate_failed, and backs off; once the host has memory again the
 * frames are populated.
 */
Test(hostreturn_faults, a_refused_populate_leaves_frames_released, .timeout = 60)
{
	const uint64_t nr = 8 * GFA_PAGEBLOCK_FRAMES;
	struct gfa_host_return_config hc = { .force_sync = true,
					     .no_settle = true,
					     .no_scrub = true,
					     .no_pcp_drain = true,
					     .interval_ms = 5 };
	struct gfa_release_policy rp = { .low = 0, .high = 0, .min_empty_frac = 4 };
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_pool *p = tu_pool(nr);
	struct gfa_host_return_stat hs;
	struct gfa_host_return *hr;
	struct gfa_backing *b;
	struct gfa_vmstat v;

	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	b = gfa_backing_create(p, &bc);
	cr_assert_not_null(b);
	hr = gfa_host_return_start(p, b, &hc);
	cr_assert_not_null(hr);
	gfa_host_return_kick(hr);
	cr_assert_eq(gfa_host_return_quiesce(hr, 10000), 0);
	cr_assert_eq(hrf_released(p), nr, "everything released first");
	/* now the reserve wants half of it populated, and the host says no */
	atomic_store(&hrf_fail_populate, 1);
	rp.low = rp.high = nr / 2;
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	gfa_host_return_kick(hr);
	cr_assert_eq(gfa_host_return_quiesce(hr, 10000), 0);
	cr_assert_gt(atomic_load(&hrf_populate_calls), 0, "no grow was tried");
	cr_assert_eq(hrf_released(p), nr, "frames the host refused count as populated");
	cr_assert_eq(gfa_memfd_allocated_bytes(gfa_backing_zone_fd(b, 0)), 0,
		     "the refused frames were written anyway");
	gfa_pool_vmstat(p, &v);
	cr_assert_gt(v.release_populate_failed, 0);
	cr_assert_eq(gfa_host_return_stat(hr, &hs), 0);
	cr_assert_eq(hs.bytes_populated, 0);
	ASSERT_POOL_OK(p);
	/* the host has memory again: after the back-off the reserve is populated */
	atomic_store(&hrf_fail_populate, 0);
	for (int i = 0; i < 200 && hrf_released(p) > nr / 2; i++) {
		gfa_host_return_kick(hr);
		cr_assert_eq(gfa_host_return_quiesce(hr, 10000), 0);
	}
	cr_assert_leq(hrf_released(p), nr / 2, "%lu still released",
		      (unsigned long)hrf_released(p));
	gfa_host_return_stop(hr);
	ASSERT_POOL_OK(p);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}
#else
Test(hostreturn_faults, a_refused_populate_leaves_frames_released)
{
	cr_skip_test("interposes madvise: not under ThreadSanitizer");
}
#endif
