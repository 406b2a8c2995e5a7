/*
 * The API's shared conventions (gfa/allocator.h's head): every GFA_E* has an errno of
 * its own and an err_* counter of its own, gfa_strerror names each, invalid arguments
 * are GFA_EINVAL apart from misaligned pfns (GFA_EALIGN), and the allocation flags of
 * all layers share no bit.
 */
#include <errno.h>
#include <string.h>
#include "tests/test_util.h"
#include <gfa/gfa.h>

static const int gfa_errs[] = {
	GFA_EFAULT, GFA_EINVAL, GFA_ERANGE, GFA_EALIGN, GFA_EORDER, GFA_EMIGRATE,
	GFA_EDOUBLEFREE, GFA_EWRONGORDER, GFA_ENOTHEAD, GFA_EOWNER, GFA_EBUSY, GFA_ENOMEM,
	GFA_ETHREAD,
};

Test(api, every_allocator_error_has_an_errno_of_its_own)
{
	size_t n = sizeof(gfa_errs) / sizeof(gfa_errs[0]);

	for (size_t i = 0; i < n; i++) {
		cr_assert_lt(gfa_errs[i], 0);
		for (size_t j = i + 1; j < n; j++)
			cr_assert_neq(gfa_errs[i], gfa_errs[j], "errors %zu and %zu share %d", i, j,
				      gfa_errs[i]);
	}
}

Test(api, strerror_names_gfa_meanings_and_falls_back_to_the_c_library)
{
	cr_assert_str_eq(gfa_strerror(GFA_EMIGRATE), "unknown migratetype");
	cr_assert_str_eq(gfa_strerror(-GFA_EMIGRATE), "unknown migratetype", "positive errno");
	cr_assert_str_eq(gfa_strerror(GFA_EALIGN), "pfn not aligned to the block's order");
	cr_assert(strstr(gfa_strerror(GFA_EINVAL), "invalid argument"));
	cr_assert(strstr(gfa_strerror(GFA_ESPAN), "several nodes"));
	cr_assert_str_eq(gfa_strerror(0), "success");
	cr_assert_str_eq(gfa_strerror(-ETIMEDOUT), strerror(ETIMEDOUT));
	cr_assert_str_eq(gfa_strerror(-ESHUTDOWN), strerror(ESHUTDOWN));
	cr_assert_str_eq(gfa_strerror(-100000), "unknown error");
	cr_assert_str_eq(gfa_strerror(-2147483647 - 1), "unknown error");
	for (size_t i = 0; i < sizeof(gfa_errs) / sizeof(gfa_errs[0]); i++)
		cr_assert_str_neq(gfa_strerror(gfa_errs[i]), strerror(-gfa_errs[i]),
				  "%d has no gfa meaning", gfa_errs[i]);
}

static uint64_t vm_inval(struct gfa_pool *p)
{
	struct gfa_vmstat vs;

	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	return vs.err_inval;
}

static uint64_t vm_align(struct gfa_pool *p)
{
	struct gfa_vmstat vs;

	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	return vs.err_align;
}

/* A caller tells a bad argument from a misaligned pfn, and so do the counters. */
Test(api, invalid_arguments_and_misaligned_pfns_are_told_apart)
{
	struct gfa_pool *p = tu_pool(4096), *q = tu_pool(4096);
	struct gfa_compact_config cc = { .proactiveness = 101 };
	struct gfa_release_policy rp = { .low = 2, .high = 1, .min_empty_frac = 4 };
	struct gfa_pcp *alien = gfa_pcp_create(q, 0);
	struct gfa_backing *b = gfa_backing_create(p, &(struct gfa_backing_config){ 0 });
	int64_t a = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 7, 0);
	uint64_t i0 = vm_inval(p), a0 = vm_align(p);

	cr_assert_not_null(alien);
	cr_assert_not_null(b);
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_compact_configure(p, &cc), GFA_EINVAL);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), GFA_EINVAL);
	cr_assert_eq(gfa_compact_zone(p, 0, 9, (enum gfa_compact_mode)7), GFA_EINVAL);
	cr_assert_eq(gfa_backing_alloc(b, alien, 0, 0, GFA_MT_MOVABLE, 1, 0), GFA_EINVAL,
		     "a cache of another pool");
	cr_assert_eq(gfa_backing_free(b, alien, (uint64_t)a, 2, 7), GFA_EINVAL);
	cr_assert_eq(vm_inval(p), i0 + 5);
	cr_assert_eq(vm_align(p), a0);
	cr_assert_eq(gfa_free(p, (uint64_t)a + 1, 1, 7), GFA_EALIGN);
	cr_assert_eq(vm_align(p), a0 + 1);
	cr_assert_eq(vm_inval(p), i0 + 5);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 2, 7), 0);
	ASSERT_POOL_OK(p);
	gfa_backing_destroy(b);
	gfa_pcp_destroy(alien);
	gfa_pool_destroy(q);
	gfa_pool_destroy(p);
}

Test(api, allocation_flags_share_no_bit)
{
	static const unsigned int flags[] = {
		GFA_ALLOC_NOFALLBACK, GFA_ALLOC_NOCOMPACT, GFA_BACKING_ZERO, GFA_NUMA_REMOTE,
		GFA_NUMA_SMALLER,
	};
	unsigned int seen = 0;

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		cr_assert_eq(flags[i] & (flags[i] - 1), 0, "flag %#x is one bit", flags[i]);
		cr_assert_eq(seen & flags[i], 0, "flag %#x is taken twice", flags[i]);
		seen |= flags[i];
	}
}
