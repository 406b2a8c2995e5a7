/* The headers' contracts, called as a VMM author calls the API: every documented error for
 * its input, counted once, nothing changed; plus a randomized run against a model. */
#include <limits.h>
#include <stdio.h>
#include "tests/test_util.h"
#include "allocator/layers.h"

static uint64_t errsum(struct gfa_pool *p, const char *which)
{
	struct gfa_vmstat vs;
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
#define X(n)                    \
	if (!strcmp(which, #n)) \
		return vs.n;
	/* clang-format off */
	X(err_fault)
	X(err_range) X(err_align) X(err_order) X(err_migratetype) X(err_double_free)
		X(err_wrong_order) X(err_not_head) X(err_owner) X(err_busy) X(err_thread) X(err_inval)
	/* clang-format on */
#undef X
			return ~0ULL;
}

#define EXPECT_ERR(p, call, want, ctr)                                                         \
	do {                                                                                   \
		uint64_t _b = errsum((p), ctr), _f = tu_free_frames(p);                        \
		int64_t _r = (call);                                                           \
		cr_expect_eq(_r, (int64_t)(want), "%s: got %ld want %ld", #call, (long)_r,     \
			     (long)(want));                                                    \
		cr_expect_eq(errsum((p), ctr), _b + 1, "%s: %s not counted once (%lu -> %lu)", \
			     #call, ctr, (unsigned long)_b, (unsigned long)errsum((p), ctr));  \
		cr_expect_eq(tu_free_frames(p), _f, "%s: free frames changed", #call);         \
		ASSERT_POOL_OK(p);                                                             \
	} while (0)

Test(contract, alloc_free_edges)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 7, 0);
	cr_assert_geq(a, 0);

	EXPECT_ERR(p, gfa_alloc(p, 1, 0, GFA_MT_MOVABLE, 1, 0), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_alloc(p, UINT_MAX, 0, GFA_MT_MOVABLE, 1, 0), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_alloc(p, 0, 11, GFA_MT_MOVABLE, 1, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_alloc(p, 0, 255, GFA_MT_MOVABLE, 1, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_alloc(p, 0, 0, GFA_MT_ISOLATE, 1, 0), GFA_EMIGRATE, "err_migratetype");
	EXPECT_ERR(p, gfa_alloc(p, 0, 0, (enum gfa_migratetype) - 1, 1, 0), GFA_EMIGRATE,
		   "err_migratetype");
	EXPECT_ERR(p, gfa_alloc(p, 0, 0, (enum gfa_migratetype)99, 1, 0), GFA_EMIGRATE,
		   "err_migratetype");

	EXPECT_ERR(p, gfa_free(p, UINT64_MAX, 0, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_free(p, UINT64_MAX - 1023, 10, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_free(p, 4096, 0, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a, 11, 7), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a, 255, 7), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a + 1, 2, 7), GFA_EALIGN, "err_align");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a + 1, 0, 7), GFA_ENOTHEAD, "err_not_head");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a, 1, 7), GFA_EWRONGORDER, "err_wrong_order");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a, 2, 8), GFA_EOWNER, "err_owner");
	cr_assert_eq(gfa_free(p, (uint64_t)a, 2, 7), 0);
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a, 2, 7), GFA_EDOUBLEFREE, "err_double_free");
	EXPECT_ERR(p, gfa_free(p, (uint64_t)a + 1, 0, 7), GFA_EDOUBLEFREE, "err_double_free");
	gfa_pool_destroy(p);
}

Test(contract, lookup_index_split_edges)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_frame_info fi;
	int64_t a = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 7, 0);
	cr_assert_geq(a, 0);

	EXPECT_ERR(p, gfa_frame_lookup(p, UINT64_MAX, &fi), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_frame_lookup(p, 0, NULL), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_block_set_index(p, UINT64_MAX, 7, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_block_set_index(p, (uint64_t)a + 1, 7, 1), GFA_ENOTHEAD, "err_not_head");
	EXPECT_ERR(p, gfa_block_set_index(p, (uint64_t)a, 8, 1), GFA_EOWNER, "err_owner");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a, 3, 7, 3), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a, 3, 7, 255), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a, 11, 7, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_block_split(p, UINT64_MAX, 3, 7, 0), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a + 1, 0, 7, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a, 2, 7, 0), GFA_EWRONGORDER, "err_wrong_order");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a, 3, 8, 0), GFA_EOWNER, "err_owner");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a + 2, 1, 7, 0), GFA_ENOTHEAD, "err_not_head");
	EXPECT_ERR(p, gfa_block_split(p, (uint64_t)a + 1, 1, 7, 0), GFA_EALIGN, "err_align");
	gfa_pool_destroy(p);
}

Test(contract, zone_index_edges)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_zone_stat st;
	struct gfa_vmstat vs;
	struct gfa_release_policy rp = { .low = 10, .high = 20, .min_empty_frac = 4 };
	struct gfa_frame_range r[4];
	uint64_t a, b;

	EXPECT_ERR(p, gfa_zone_span(p, 1, &a, &b), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pfn_to_zone(p, UINT64_MAX), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_stat(p, 1, &st), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_stat(p, 0, NULL), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_zone_vmstat(p, 1, &vs), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_vmstat(p, 0, NULL), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_zone_node(p, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pool_vmstat(p, NULL), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_zone_set_release_policy(p, 1, &rp), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_set_release_policy(p, 0, NULL), GFA_EFAULT, "err_fault");
	rp.low = 30;
	EXPECT_ERR(p, gfa_zone_set_release_policy(p, 0, &rp), GFA_EINVAL, "err_inval");
	rp.low = 10;
	rp.min_empty_frac = 0;
	EXPECT_ERR(p, gfa_zone_set_release_policy(p, 0, &rp), GFA_EINVAL, "err_inval");
	EXPECT_ERR(p, gfa_zone_get_release_policy(p, 1, &rp), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_get_release_policy(p, 0, NULL), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, zone_release_take(p, 1, r, 4, 100), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_release_take(p, 0, NULL, 4, 100), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, zone_populate_take(p, 1, r, 4, 100), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_release_done(p, UINT64_MAX, 1, true), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_release_done(p, 0, 0, true), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_release_done(p, 0, UINT64_MAX, true), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_release_done(p, 0, 1, true), GFA_EBUSY, "err_busy");
	EXPECT_ERR(p, zone_populate_done(p, 100, 4), GFA_EBUSY, "err_busy");
	EXPECT_ERR(p, gfa_compact_zone(p, 1, 9, GFA_COMPACT_SYNC), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_compact_zone(p, 0, 11, GFA_COMPACT_SYNC), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_compact_zone(p, 0, -2, GFA_COMPACT_SYNC), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_compact_zone(p, 0, 9, (enum gfa_compact_mode)3), GFA_EINVAL, "err_inval");
	EXPECT_ERR(p, gfa_compact_zone(p, 0, 9, (enum gfa_compact_mode) - 1), GFA_EINVAL,
		   "err_inval");
	EXPECT_ERR(p, gfa_alloc_compact(p, 1, 9, GFA_MT_MOVABLE, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_alloc_compact(p, 0, 11, GFA_MT_MOVABLE, 1), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_alloc_compact(p, 0, 9, GFA_MT_ISOLATE, 1), GFA_EMIGRATE,
		   "err_migratetype");
	EXPECT_ERR(p, gfa_zone_fragmentation_score(p, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_claim(p, 1, 1, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_zone_unclaim(p, 1, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pool_drain_all(p, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, zone_set_backing(p, 1, NULL, -1), GFA_ERANGE, "err_range");
	struct gfa_compact_config cc = { .proactiveness = 101 };
	EXPECT_ERR(p, gfa_compact_configure(p, &cc), GFA_EINVAL, "err_inval");
	EXPECT_ERR(p, gfa_compact_configure(p, NULL), GFA_EFAULT, "err_fault");
	gfa_pool_destroy(p);
}

Test(contract, text_formatters)
{
	struct gfa_pool *p = tu_pool(4096);
	char big[16384], one[1] = { 'x' }, two[2] = { 'x', 'x' };
	int (*fns[])(struct gfa_pool *, char *,
		     size_t) = { gfa_pool_buddyinfo, gfa_pool_pagetypeinfo, gfa_pool_vmstat_text };

	for (int i = 0; i < 3; i++) {
		int need = fns[i](p, big, sizeof(big));
		cr_assert_gt(need, 0);
		cr_assert_eq((size_t)need, strlen(big), "fn %d: %d vs %zu", i, need, strlen(big));
		cr_expect_eq(fns[i](p, NULL, 0), need, "fn %d len 0", i);
		cr_expect_eq(fns[i](p, one, 1), need, "fn %d len 1", i);
		cr_expect_eq(one[0], '\0');
		cr_expect_eq(fns[i](p, two, 2), need);
		cr_expect_eq(two[1], '\0');
		cr_expect_eq(two[0], big[0]);
		char *exact = malloc(need + 1);
		cr_expect_eq(fns[i](p, exact, need + 1), need);
		cr_expect_eq(strcmp(exact, big), 0);
		cr_expect_eq(fns[i](p, exact, need), need);
		cr_expect_eq(exact[need - 1], '\0');
		free(exact);
		EXPECT_ERR(p, fns[i](p, NULL, 5), GFA_EFAULT, "err_fault");
	}
	gfa_pool_destroy(p);
}

Test(contract, pcp_edges)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat ps;
	cr_assert_not_null(c);
	errno = 0;
	cr_assert_null(gfa_pcp_create(p, 1));
	cr_expect_eq(errno, ERANGE);
	errno = 0;
	cr_assert_null(gfa_pcp_create(NULL, 0));
	cr_expect_eq(errno, EFAULT);

	int64_t a = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 7, 0);
	cr_assert_geq(a, 0);
	int64_t b = gfa_pcp_alloc(c, 9, GFA_MT_MOVABLE, 7, 0);
	cr_assert_geq(b, 0);
	for (unsigned int o = 11; o < 256; o += 7)
		EXPECT_ERR(p, gfa_pcp_alloc(c, o, GFA_MT_MOVABLE, 7, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_pcp_alloc(c, 16, GFA_MT_MOVABLE, 7, 0), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_pcp_alloc(c, 0, GFA_MT_ISOLATE, 7, 0), GFA_EMIGRATE, "err_migratetype");
	EXPECT_ERR(p, gfa_pcp_alloc(c, 0, (enum gfa_migratetype) - 5, 7, 0), GFA_EMIGRATE,
		   "err_migratetype");
	EXPECT_ERR(p, gfa_pcp_free(c, UINT64_MAX, 0, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pcp_free(c, UINT64_MAX & ~511ULL, 9, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 11, 7), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 15, 7), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 255, 7), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)b + 1, 9, 7), GFA_EALIGN, "err_align");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)b + 1, 0, 7), GFA_ENOTHEAD, "err_not_head");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)b, 8, 7), GFA_EWRONGORDER, "err_wrong_order");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)b, 9, 8), GFA_EOWNER, "err_owner");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 0, 8), GFA_EOWNER, "err_owner");
	cr_assert_eq(gfa_pcp_free(c, (uint64_t)a, 0, 7), 0);
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 0, 7), GFA_EDOUBLEFREE, "err_double_free");
	EXPECT_ERR(p, gfa_pcp_free(c, (uint64_t)a, 0, 8), GFA_EDOUBLEFREE, "err_double_free");
	uint64_t pf[2] = { (uint64_t)b, UINT64_MAX };
	EXPECT_ERR(p, gfa_pcp_free_many(c, pf + 1, 1, 9, 7), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_pcp_free_many(c, NULL, 1, 9, 7), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_pcp_free_many(c, pf, (size_t)INT_MAX + 1, 9, 7), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_pcp_free_many(c, NULL, 0, 9, 7), GFA_EFAULT, "err_fault"); /* n 0 too */
	cr_expect_eq(gfa_pcp_free_many(c, pf, 2, 9, 7), 1);
	EXPECT_ERR(p, gfa_pcp_stat(c, NULL), GFA_EFAULT, "err_fault");
	cr_expect_eq(gfa_pcp_stat(NULL, &ps), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_drain(NULL), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_drain_partial(NULL), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_alloc(NULL, 0, 0, 0, 0), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_free(NULL, 0, 0, 0), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_free_many(NULL, pf, 1, 0, 0), GFA_EFAULT);
	cr_expect_eq(gfa_pcp_zone(NULL), GFA_EFAULT);
	cr_assert_null(gfa_pcp_pool(NULL));
	gfa_pcp_destroy(NULL);
	gfa_pcp_destroy(c);
	ASSERT_POOL_OK(p);
	cr_expect_eq(tu_free_frames(p), 4096);
	gfa_pool_destroy(p);
}

Test(contract, pool_config)
{
	struct gfa_pool_config cfg;
	gfa_pool_config_init(NULL, 1);
	gfa_pool_config_init(&cfg, 4096);
	cfg.pcp_batch = GFA_PCP_BATCH_MAX + 1;
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, 4096);
	cfg.pcp_high = GFA_PCP_HIGH_MAX + 1;
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, 4096);
	cfg.pcp_high_max = GFA_PCP_HIGH_MAX + 1;
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, (1ULL << 31) + 1);
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, UINT64_MAX);
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, 511);
	errno = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_expect_eq(errno, EINVAL);
	/* extremes that are valid */
	gfa_pool_config_init(&cfg, 512);
	cfg.pcp_batch = GFA_PCP_BATCH_MAX;
	cfg.pcp_high = GFA_PCP_HIGH_MAX;
	cfg.pcp_high_max = GFA_PCP_HIGH_MAX;
	struct gfa_pool *p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	int64_t v[600];
	int n = 0;
	for (; n < 600; n++) {
		v[n] = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0);
		if (v[n] < 0)
			break;
	}
	cr_expect_eq(n, 512);
	for (int i = 0; i < n; i++)
		cr_assert_eq(gfa_pcp_free(c, v[i], 0, 1), 0);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	cr_expect_eq(tu_free_frames(p), 512);
	gfa_pool_destroy(p);
	/* batch 1, high 1 */
	gfa_pool_config_init(&cfg, 1024);
	cfg.pcp_batch = 1;
	cfg.pcp_high = 1;
	cfg.pcp_high_max = 1;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	c = gfa_pcp_create(p, 0);
	for (n = 0; n < 600; n++) {
		v[n] = gfa_pcp_alloc(c, n % 4, GFA_MT_MOVABLE, 1, 0);
		if (v[n] < 0)
			break;
	}
	for (int i = 0; i < n; i++)
		cr_assert_eq(gfa_pcp_free(c, v[i], i % 4, 1), 0);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	cr_expect_eq(tu_free_frames(p), 1024);
	gfa_pool_destroy(p);
}

Test(contract, collapse_and_claim_edges)
{
	struct gfa_pool *p = tu_pool(4096);
	uint64_t pfns[2];
	unsigned int ord[2] = { 0, 0 }, offs[2] = { 0, 1 };
	int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 7, 0);
	pfns[0] = pfns[1] = (uint64_t)a;
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, NULL, ord, offs, 1), GFA_EFAULT, "err_fault");
	EXPECT_ERR(p, gfa_collapse(p, 1, 7, pfns, ord, offs, 1), GFA_ERANGE, "err_range");
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, ord, offs, 0), GFA_EINVAL, "err_inval");
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, ord, offs, 513), GFA_EINVAL, "err_inval");
	unsigned int bo[1] = { 9 }, bof[1] = { 512 }, bo255[1] = { 255 };
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, bo, offs, 1), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, bo255, offs, 1), GFA_EORDER, "err_order");
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, ord, bof, 1), GFA_EINVAL, "err_inval");
	unsigned int bofm[1] = { UINT_MAX };
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, ord, bofm, 1), GFA_EINVAL, "err_inval");
	unsigned int o1[1] = { 1 }, of1[1] = { 1 };
	EXPECT_ERR(p, gfa_collapse(p, 0, 7, pfns, o1, of1, 1), GFA_EALIGN, "err_align");
	/* claims */
	cr_expect_eq(gfa_zone_claim(p, 0, 5, UINT64_MAX), -ENOSPC);
	cr_expect_eq(gfa_zone_claimed(p, 0), 0);
	cr_expect_eq(gfa_zone_claim(p, 0, 5, 100), 0);
	cr_expect_eq(gfa_zone_claim(p, 0, 5, 100), -EEXIST);
	cr_expect_eq(gfa_zone_claimed(p, 0), 100);
	cr_expect_eq(gfa_zone_unclaim(p, 0, 6), -ENOENT);
	cr_expect_eq(gfa_zone_unclaim(p, 0, 5), 100);
	cr_expect_eq(gfa_zone_claimed(p, 0), 0);
	cr_expect_eq(gfa_zone_claimed(p, 5), 0);
	cr_expect_eq(gfa_zone_claimed(NULL, 0), 0);
	for (int i = 0; i < GFA_MAX_CLAIMS; i++)
		cr_assert_eq(gfa_zone_claim(p, 0, 100 + i, 1), 0);
	cr_expect_eq(gfa_zone_claim(p, 0, 1000, 1), -ENOSPC);
	for (int i = 0; i < GFA_MAX_CLAIMS; i++)
		cr_assert_eq(gfa_zone_unclaim(p, 0, 100 + i), 1);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* ---- randomized contract check: model of allocated blocks vs the pool ---- */
#define RMAX 4096
struct rblk {
	uint64_t pfn;
	unsigned int order;
	uint64_t owner;
};
static struct rblk rb[RMAX];
static int rn;

static int rfind(uint64_t pfn)
{
	for (int i = 0; i < rn; i++)
		if (rb[i].pfn == pfn)
			return i;
	return -1;
}

static int r_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	(void)ctx;
	(void)owner;
	int i = rfind(src);
	cr_assert_geq(i, 0, "migrate of unknown block %lu", (unsigned long)src);
	cr_assert_eq(rb[i].order, order);
	rb[i].pfn = dst;
	return 0;
}

static const struct gfa_owner_ops r_ops = { .migrate = r_migrate };

Test(contract, random_contract, .timeout = 300)
{
	struct gfa_pool_config cfg;
	gfa_pool_config_init(&cfg, 8192 + 300);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = 4096 + 17;
	cfg.pcp_batch = 15;
	struct gfa_pool *p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	uint64_t total = 8192 + 300 + 4096 + 17;
	struct gfa_pcp *c[2] = { gfa_pcp_create(p, 0), gfa_pcp_create(p, 1) };
	for (uint64_t o = 1; o <= 3; o++)
		cr_assert_eq(gfa_owner_register(p, o, &r_ops, NULL), 0);
	uint64_t s = 12345;
	rn = 0;
	for (int it = 0; it < 200000; it++) {
		unsigned int op = tu_rand(&s) % 100;
		unsigned int zone = tu_rand(&s) % 2;
		struct gfa_pcp *pc = c[tu_rand(&s) % 2];
		uint64_t owner = 1 + tu_rand(&s) % 3;
		unsigned int order;
		unsigned int r = tu_rand(&s) % 16;
		order = r < 8   ? 0 :
			r < 11  ? (r - 7) :
			r < 14  ? 9 :
			r == 14 ? 10 :
				  4 + tu_rand(&s) % 5;
		enum gfa_migratetype mt = (enum gfa_migratetype)(tu_rand(&s) % 3);
		if (op < 30 && rn < RMAX) {
			int64_t pfn =
				op < 15 ? gfa_alloc(p, zone, order, mt, owner, tu_rand(&s) % 4) :
					  gfa_pcp_alloc(pc, order, mt, owner, tu_rand(&s) % 4);
			if (pfn >= 0) {
				cr_assert_lt(rfind(pfn), 0, "pfn %ld handed out twice", (long)pfn);
				rb[rn++] = (struct rblk){ (uint64_t)pfn, order, owner };
				/* mark MOVABLE ones only owned by registered owners */
			} else {
				cr_assert_eq(pfn, GFA_ENOMEM, "alloc err %ld", (long)pfn);
			}
		} else if (op < 60 && rn) {
			int i = (int)(tu_rand(&s) % rn);
			int err = op < 45 ? gfa_free(p, rb[i].pfn, rb[i].order, rb[i].owner) :
					    gfa_pcp_free(pc, rb[i].pfn, rb[i].order, rb[i].owner);
			cr_assert_eq(err, 0, "free %lu/%u: %d", (unsigned long)rb[i].pfn,
				     rb[i].order, err);
			rb[i] = rb[--rn];
		} else if (op < 75 && rn) {
			/* a bad free: wrong owner, wrong order, tail, double */
			int i = (int)(tu_rand(&s) % rn);
			struct rblk b = rb[i];
			int want, err, k = tu_rand(&s) % 4;
			uint64_t pfn = b.pfn, ow = b.owner;
			unsigned int ord = b.order;
			if (k == 0) {
				ow = b.owner + 10;
				want = GFA_EOWNER;
			} else if (k == 1) {
				if (!ord)
					continue;
				pfn = b.pfn + 1;
				ord = 0;
				want = GFA_ENOTHEAD;
			} else if (k == 2) {
				ord = b.order ? b.order - 1 : b.order + 1;
				want = GFA_EWRONGORDER;
				if (ord > b.order && (pfn & ((1UL << ord) - 1)))
					want = GFA_EALIGN;
				uint64_t st, nr;
				gfa_zone_span(p, (unsigned)gfa_pfn_to_zone(p, pfn), &st, &nr);
				if (pfn + (1UL << ord) > st + nr)
					want = GFA_ERANGE;
			} else {
				pfn = UINT64_MAX - (tu_rand(&s) % 3);
				want = GFA_ERANGE;
			}
			uint64_t f0 = tu_free_frames(p);
			err = (op & 1) ? gfa_free(p, pfn, ord, ow) : gfa_pcp_free(pc, pfn, ord, ow);
			cr_assert_eq(err, want,
				     "bad free k=%d pfn %lu ord %u (block %lu/%u): %d want %d", k,
				     (unsigned long)pfn, ord, (unsigned long)b.pfn, b.order, err,
				     want);
			cr_assert_eq(tu_free_frames(p), f0);
		} else if (op < 80 && rn) {
			uint64_t pf[8];
			int n = 0, idx[8];
			unsigned int ord = rb[tu_rand(&s) % rn].order;
			uint64_t ow = 0;
			for (int i = 0; i < rn && n < 8; i++)
				if (rb[i].order == ord && (!n || rb[i].owner == ow)) {
					ow = rb[i].owner;
					idx[n] = i;
					pf[n++] = rb[i].pfn;
				}
			int bad = tu_rand(&s) % 2 && n > 1;
			if (bad)
				pf[n - 1] = pf[0]; /* a double free at the end */
			int ret = gfa_pcp_free_many(pc, pf, (size_t)n, ord, ow);
			cr_assert_eq(ret, bad ? n - 1 : n, "free_many %d bad %d", ret, bad);
			int fr = bad ? n - 1 : n;
			/* remove freed from model (descending idx) */
			for (int k = fr - 1; k >= 0; k--)
				rb[idx[k]] = rb[--rn];
		} else if (op < 84) {
			gfa_compact_zone(p, zone, (int)(tu_rand(&s) % 12) - 1, tu_rand(&s) % 3);
		} else if (op < 87) {
			int64_t pfn = gfa_alloc_compact(p, zone, 9, GFA_MT_MOVABLE, owner);
			if (pfn >= 0)
				rb[rn++] = (struct rblk){ (uint64_t)pfn, 9, owner };
		} else if (op < 90) {
			gfa_pcp_drain(pc);
		} else if (op < 92) {
			gfa_pool_drain_all(p, (int)zone - (int)(tu_rand(&s) % 2));
		} else if (op < 94) {
			uint64_t cl = tu_rand(&s) % 2000;
			int e = gfa_zone_claim(p, zone, owner, cl);
			cr_assert(e == 0 || e == -EEXIST || e == -ENOSPC, "claim %d", e);
		} else if (op < 96) {
			int64_t e = gfa_zone_unclaim(p, zone, owner);
			cr_assert(e >= 0 || e == -ENOENT);
		} else if (op < 98 && rn) {
			int i = (int)(tu_rand(&s) % rn);
			if (rb[i].order && rn < RMAX - 1024) {
				unsigned int no = tu_rand(&s) % rb[i].order;
				cr_assert_eq(gfa_block_split(p, rb[i].pfn, rb[i].order, rb[i].owner,
							     no),
					     0);
				struct rblk b = rb[i];
				rb[i] = rb[--rn];
				for (uint64_t k = 0; k < (1UL << b.order) >> no; k++)
					rb[rn++] = (struct rblk){ b.pfn + (k << no), no, b.owner };
			}
		} else {
			struct gfa_frame_range fr[4];
			struct gfa_release_policy rp = { .high = tu_rand(&s) % 3000,
							 .min_empty_frac = 4 };
			gfa_zone_set_release_policy(p, zone, &rp);
			int n = zone_release_take(p, zone, fr, 4, tu_rand(&s) % 4000);
			cr_assert_geq(n, 0);
			for (int k = 0; k < n; k++)
				cr_assert_eq(zone_release_done(p, fr[k].pfn, fr[k].nr,
							       tu_rand(&s) % 2),
					     0);
			rp.low = rp.high = tu_rand(&s) % 4000;
			gfa_zone_set_release_policy(p, zone, &rp);
			n = zone_populate_take(p, zone, fr, 4, tu_rand(&s) % 4000);
			cr_assert_geq(n, 0);
			for (int k = 0; k < n; k++)
				cr_assert_eq(zone_populate_done(p, fr[k].pfn, fr[k].nr), 0);
		}
		if (it % 1000 == 0) {
			uint64_t held = 0;
			for (int i = 0; i < rn; i++)
				held += 1UL << rb[i].order;
			cr_assert_eq(tu_free_frames(p) + held, total, "it %d: free %lu held %lu",
				     it, (unsigned long)tu_free_frames(p), (unsigned long)held);
			ASSERT_POOL_OK(p);
			for (int i = 0; i < rn; i++) {
				struct gfa_frame_info fi;
				cr_assert_eq(gfa_frame_lookup(p, rb[i].pfn, &fi), 0);
				cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED,
					     "it %d pfn %lu state %d", it, (unsigned long)rb[i].pfn,
					     fi.state);
				cr_assert_eq(fi.head_pfn, rb[i].pfn);
				cr_assert_eq(fi.order, rb[i].order);
				cr_assert_eq(fi.owner, rb[i].owner);
			}
		}
	}
	{
		struct gfa_vmstat vs;
		gfa_pool_vmstat(p, &vs);
		fprintf(stderr,
			"rn %d pgalloc_blocks %lu pgfree_blocks %lu migr %lu fail %lu compact_stall %lu rel %lu "
			"errs o%lu n%lu w%lu r%lu a%lu\n",
			rn, (unsigned long)vs.pgalloc_blocks, (unsigned long)vs.pgfree_blocks,
			(unsigned long)vs.pgmigrate_success, (unsigned long)vs.pgalloc_fail,
			(unsigned long)vs.compact_stall, (unsigned long)vs.release_done,
			(unsigned long)vs.err_owner, (unsigned long)vs.err_not_head,
			(unsigned long)vs.err_wrong_order, (unsigned long)vs.err_range,
			(unsigned long)vs.err_align);
	}
	for (int z = 0; z < 2; z++)
		for (uint64_t o = 1; o <= 3; o++)
			gfa_zone_unclaim(p, z, o);
	while (rn) {
		rn--;
		cr_assert_eq(gfa_free(p, rb[rn].pfn, rb[rn].order, rb[rn].owner), 0);
	}
	gfa_pcp_destroy(c[0]);
	gfa_pcp_destroy(c[1]);
	cr_assert_eq(tu_free_frames(p), total);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(contract, compact_results_on_a_free_pool)
{
	struct gfa_pool *p = tu_pool(4096);

	/* a free pool: every order is there already ("enough free"), order 0 is too small;
	 * full compaction (order -1) walks the zone until the scanners meet */
	for (int m = GFA_COMPACT_ASYNC; m <= GFA_COMPACT_SYNC; m++) {
		for (int o = 0; o <= GFA_MAX_ORDER; o++)
			cr_expect_eq(gfa_compact_zone(p, 0, o, m), GFA_COMPACT_SKIPPED,
				     "order %d mode %d", o, m);
		cr_expect_eq(gfa_compact_zone(p, 0, -1, m), GFA_COMPACT_COMPLETE, "mode %d", m);
	}
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}
