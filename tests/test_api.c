/*
 * The API's shared conventions (gfa/allocator.h's head): every GFA_E* has an errno of
 * its own and an err_* counter of its own, gfa_strerror names each, invalid arguments
 * are GFA_EINVAL apart from misaligned pfns (GFA_EALIGN), and the allocation flags of
 * all layers share no bit.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include "tests/test_util.h"
#include <gfa/gfa.h>
#include "allocator/internal.h"
#include "common/compiler.h"

static const int gfa_errs[] = {
	GFA_EFAULT,   GFA_EINVAL,      GFA_ERANGE,      GFA_EALIGN,   GFA_EORDER,
	GFA_EMIGRATE, GFA_EDOUBLEFREE, GFA_EWRONGORDER, GFA_ENOTHEAD, GFA_EOWNER,
	GFA_EBUSY,    GFA_ENOMEM,      GFA_ETHREAD,
};

Test(api, every_allocator_error_has_an_errno_of_its_own)
{
	size_t n = ARRAY_SIZE(gfa_errs);

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
	for (size_t i = 0; i < ARRAY_SIZE(gfa_errs); i++)
		cr_assert_str_neq(gfa_strerror(gfa_errs[i]), strerror(-gfa_errs[i]),
				  "%d has no gfa meaning", gfa_errs[i]);
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
	uint64_t i0 = VMS(p, err_inval), a0 = VMS(p, err_align);

	cr_assert_not_null(alien);
	cr_assert_not_null(b);
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_compact_configure(p, &cc), GFA_EINVAL);
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), GFA_EINVAL);
	cr_assert_eq(gfa_compact_zone(p, 0, 9, (enum gfa_compact_mode)7), GFA_EINVAL);
	cr_assert_eq(gfa_backing_alloc(b, alien, 0, 0, GFA_MT_MOVABLE, 1, 0), GFA_EINVAL,
		     "a cache of another pool");
	cr_assert_eq(gfa_backing_free(b, alien, (uint64_t)a, 2, 7), GFA_EINVAL);
	cr_assert_eq(VMS(p, err_inval), i0 + 5);
	cr_assert_eq(VMS(p, err_align), a0);
	cr_assert_eq(gfa_free(p, (uint64_t)a + 1, 1, 7), GFA_EALIGN);
	cr_assert_eq(VMS(p, err_align), a0 + 1);
	cr_assert_eq(VMS(p, err_inval), i0 + 5);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 2, 7), 0);
	ASSERT_POOL_OK(p);
	gfa_backing_destroy(b);
	gfa_pcp_destroy(alien);
	gfa_pool_destroy(q);
	gfa_pool_destroy(p);
}

/*
 * NULL output and array pointers are GFA_EFAULT, counted once, as the convention says
 * (issue 24): gfa_zone_span answered 0 with a NULL output, and gfa_pcp_free_many 0
 * for a NULL pfns with n 0.
 */
Test(api, null_outputs_and_arrays_are_efault_counted_once)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *pcp = gfa_pcp_create(p, 0);
	uint64_t start = 7, n = 7, before = tu_err_fault(p);

	cr_assert_not_null(pcp);
	cr_assert_eq(gfa_zone_span(p, 0, NULL, &n), GFA_EFAULT);
	cr_assert_eq(tu_err_fault(p), before + 1);
	cr_assert_eq(gfa_zone_span(p, 0, &start, NULL), GFA_EFAULT);
	cr_assert_eq(tu_err_fault(p), before + 2);
	cr_assert(start == 7 && n == 7, "nothing written");
	cr_assert_eq(gfa_pcp_free_many(pcp, NULL, 0, 0, 1), GFA_EFAULT);
	cr_assert_eq(tu_err_fault(p), before + 3);
	cr_assert_eq(gfa_pcp_free_many(pcp, NULL, 1, 0, 1), GFA_EFAULT);
	cr_assert_eq(tu_err_fault(p), before + 4);
	cr_assert_eq(gfa_zone_span(p, 0, &start, &n), 0);
	cr_assert(start == 0 && n == 4096);
	gfa_pcp_destroy(pcp);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(api, allocation_flags_share_no_bit)
{
	static const unsigned int flags[] = {
		GFA_ALLOC_NOFALLBACK, GFA_ALLOC_NOCOMPACT, GFA_BACKING_ZERO,
		GFA_NUMA_REMOTE,      GFA_NUMA_SMALLER,
	};
	unsigned int seen = 0;

	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		cr_assert_eq(flags[i] & (flags[i] - 1), 0, "flag %#x is one bit", flags[i]);
		cr_assert_eq(seen & flags[i], 0, "flag %#x is taken twice", flags[i]);
		seen |= flags[i];
	}
}

/*
 * Room to grow: configs with a nonzero reserved word are refused (a caller built against
 * a newer header asked for something this library does not know), statistics come back
 * with their reserved words zero, and the vmstat counters never move alloc_order.
 */
Test(api, configs_with_nonzero_reserved_fields_are_einval)
{
	struct gfa_pool_config pc;
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_compact_config cc = { .proactiveness = 20 };
	struct gfa_release_policy rp = { .low = 1, .high = 2, .min_empty_frac = 4 };
	struct gfa_backing_config bc = { 0 };
	struct gfa_backing *b;
	uint64_t i0 = VMS(p, err_inval);

	gfa_pool_config_init(&pc, 4096);
	pc.reserved[6] = 1;
	errno = 0;
	cr_assert_null(gfa_pool_create(&pc));
	cr_assert_eq(errno, EINVAL);
	gfa_pool_config_init(&pc, 4096);
	pc.reserved32 = 1;
	errno = 0;
	cr_assert_null(gfa_pool_create(&pc));
	cr_assert_eq(errno, EINVAL);
	cc.reserved[0] = 1;
	cr_assert_eq(gfa_compact_configure(p, &cc), GFA_EINVAL);
	rp.reserved[1] = 1;
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), GFA_EINVAL);
	cr_assert_eq(VMS(p, err_inval), i0 + 2, "refusals are counted");
	bc.reserved[2] = 1;
	errno = 0;
	cr_assert_null(gfa_backing_create(p, &bc));
	cr_assert_eq(errno, EINVAL);

	b = gfa_backing_create(p, &(struct gfa_backing_config){ 0 });
	cr_assert_not_null(b);
	struct gfa_guest_config gc = { .mem_bytes = 2 << 20 };
	gc.reserved[0] = 1;
	errno = 0;
	cr_assert_null(gfa_guest_create(p, b, &gc));
	cr_assert_eq(errno, EINVAL);
	struct gfa_host_return_config hc = { .force_sync = true };
	hc.reserved[2] = 1;
	errno = 0;
	cr_assert_null(gfa_host_return_start(p, b, &hc));
	cr_assert_eq(errno, EINVAL);
	hc.reserved[2] = 0;
	hc.engine.reserved[0] = 1;
	errno = 0;
	cr_assert_null(gfa_host_return_start(p, b, &hc), "the engine's config is checked too");
	cr_assert_eq(errno, EINVAL);
	struct gfa_release_config rc = { 0 };
	rc.reserved[1] = 1;
	errno = 0;
	cr_assert_null(gfa_release_create(gfa_backing_zone_fd(b, 0), NULL, &rc));
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(tu_free_frames(p), 4096, "nothing was taken");
	ASSERT_POOL_OK(p);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}

#define POISON(s) memset(&(s), 0xa5, sizeof(s))
#define ASSERT_RESERVED_ZERO(s)                                                                \
	do {                                                                                   \
		for (size_t _i = 0; _i < sizeof((s).reserved) / sizeof((s).reserved[0]); _i++) \
			cr_assert_eq((s).reserved[_i], 0, #s ".reserved[%zu]", _i);            \
	} while (0)

Test(api, statistics_come_back_with_reserved_fields_zero)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_backing *b = gfa_backing_create(p, &(struct gfa_backing_config){ 0 });
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_vmstat vs;
	struct gfa_zone_stat zs;
	struct gfa_pcp_stat ps;
	struct gfa_frame_info fi;
	struct gfa_release_policy rp;
	struct gfa_backing_zone_stat bs;
	struct gfa_thp_report tr;

	cr_assert(b && c);
	POISON(vs);
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	ASSERT_RESERVED_ZERO(vs);
	for (size_t i = 0; i < ARRAY_SIZE(vs.reserved_end); i++)
		cr_assert_eq(vs.reserved_end[i], 0);
	POISON(vs);
	cr_assert_eq(gfa_zone_vmstat(p, 0, &vs), 0);
	ASSERT_RESERVED_ZERO(vs);
	POISON(zs);
	cr_assert_eq(gfa_zone_stat(p, 0, &zs), 0);
	ASSERT_RESERVED_ZERO(zs);
	POISON(ps);
	cr_assert_eq(gfa_pcp_stat(c, &ps), 0);
	ASSERT_RESERVED_ZERO(ps);
	POISON(fi);
	cr_assert_eq(gfa_frame_lookup(p, 5, &fi), 0);
	ASSERT_RESERVED_ZERO(fi);
	POISON(rp);
	cr_assert_eq(gfa_zone_get_release_policy(p, 0, &rp), 0);
	ASSERT_RESERVED_ZERO(rp);
	POISON(bs);
	cr_assert_eq(gfa_backing_zone_stat(b, 0, &bs), 0);
	ASSERT_RESERVED_ZERO(bs);
	POISON(tr);
	cr_assert_eq(gfa_host_thp_report(&tr), 0);
	ASSERT_RESERVED_ZERO(tr);
	gfa_pcp_destroy(c);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}

Test(api, vmstat_counters_never_move_the_per_order_arrays)
{
	cr_assert_leq(GFA_VMSTAT_NR_ITEMS, GFA_VMSTAT_SLOTS);
	cr_assert_eq(offsetof(struct gfa_vmstat, alloc_order), GFA_VMSTAT_SLOTS * sizeof(uint64_t));
	cr_assert_eq(sizeof(struct gfa_vmstat),
		     (GFA_VMSTAT_SLOTS + 2 * GFA_NR_ORDERS + 8) * sizeof(uint64_t));
}

/*
 * The test binary links the library built with GFA_BUG_ON compiled in (docs/decisions.md,
 * entry 19): a free list holding a block of another migratetype (broken by hand here, as
 * no input can) stops the allocation that meets it, instead of handing out the block.
 */
Test(api, a_broken_invariant_aborts_in_the_test_build, .signal = SIGABRT)
{
	struct gfa_pool *p = tu_pool(4096);
	uint32_t head = p->zones[0].arenas[0].area[GFA_MAX_ORDER].list[GFA_MT_MOVABLE].head;

	cr_assert_neq(head, GFA_NIL);
	pfn_to_frame(p, head)->mt = GFA_MT_UNMOVABLE;
	gfa_alloc(p, 0, GFA_MAX_ORDER, GFA_MT_MOVABLE, 1, 0);
}
