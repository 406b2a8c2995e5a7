/* vmm-layer contracts: a backing, cache or pool of another pool is refused, not used. */
#include <criterion/criterion.h>
#include <string.h>
#include <gfa/gfa.h>

/*
 * gfa_host_return_start(poolA, backing of poolB) would release poolA's free frames by
 * punching poolB's memfds at the same offsets, destroying data poolB's owners hold: it
 * fails with EINVAL, as gfa_guest_create does for the same mistake.
 */
Test(contract_vmm, host_return_rejects_a_backing_of_another_pool, .timeout = 60)
{
	struct gfa_pool_config cfg;
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_host_return_config hc = { .force_sync = true,
					     .no_settle = true,
					     .no_scrub = true,
					     .no_pcp_drain = true };
	struct gfa_release_policy rp = { .min_empty_frac = 4 };

	gfa_pool_config_init(&cfg, 4096);
	struct gfa_pool *a = gfa_pool_create(&cfg), *b = gfa_pool_create(&cfg);
	cr_assert(a && b);
	struct gfa_backing *bb = gfa_backing_create(b, &bc);
	cr_assert_not_null(bb);
	/* pool B's owner keeps data in a block */
	int64_t pfn = gfa_backing_alloc(bb, NULL, 0, 9, GFA_MT_MOVABLE, 42, GFA_BACKING_ZERO);
	cr_assert_geq(pfn, 0);
	char *mem = gfa_pfn_to_addr(b, (uint64_t)pfn);
	memset(mem, 0xab, 512 * 4096);
	/* pool A: everything free, release everything */
	cr_assert_eq(gfa_zone_set_release_policy(a, 0, &rp), 0);
	errno = 0;
	struct gfa_host_return *hr = gfa_host_return_start(a, bb, &hc);
	int err = errno;

	if (hr) {
		gfa_host_return_kick(hr);
		gfa_host_return_quiesce(hr, 5000);
	}
	cr_expect_eq((unsigned char)mem[0], 0xab,
		     "pool B's allocated frame %ld was punched "
		     "out by pool A's host return (now %#x)",
		     (long)pfn, (unsigned char)mem[0]);
	cr_assert_null(hr, "a backing of another pool is accepted");
	cr_assert_eq(err, EINVAL);
	gfa_host_return_stop(hr);
	cr_assert_eq(gfa_free(b, (uint64_t)pfn, 9, 42), 0);
	gfa_backing_destroy(bb);
	gfa_pool_destroy(a);
	gfa_pool_destroy(b);
}

/*
 * gfa_backing_alloc(bA, cache of pool B, ..., GFA_BACKING_ZERO) would zero pool A's
 * frames at the pfn pool B handed out, even when pool A has them allocated to someone
 * else: it fails with GFA_EINVAL.
 */
Test(contract_vmm, backing_alloc_with_a_cache_of_another_pool, .timeout = 60)
{
	struct gfa_pool_config cfg;
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_vmstat v0, v1;

	gfa_pool_config_init(&cfg, 4096);
	struct gfa_pool *a = gfa_pool_create(&cfg), *b = gfa_pool_create(&cfg);
	cr_assert(a && b);
	struct gfa_backing *ba = gfa_backing_create(a, &bc);
	cr_assert_not_null(ba);
	struct gfa_pcp *cb = gfa_pcp_create(b, 0);
	cr_assert_not_null(cb);
	/* pool A: owner 1 holds pfn 0..511 with data; frames dirty (freed once before) */
	int64_t x = gfa_backing_alloc(ba, NULL, 0, 9, GFA_MT_MOVABLE, 1, 0);
	cr_assert_eq(x, 0);
	cr_assert_eq(gfa_backing_free(ba, NULL, 0, 9, 1), 0);
	x = gfa_alloc(a, 0, 9, GFA_MT_MOVABLE, 1, 0);
	cr_assert_eq(x, 0);
	char *mem = gfa_pfn_to_addr(a, 0);
	memset(mem, 0xcd, 4096);
	cr_assert_eq(gfa_pool_vmstat(a, &v0), 0);
	int64_t y = gfa_backing_alloc(ba, cb, 0, 0, GFA_MT_MOVABLE, 2, GFA_BACKING_ZERO);
	cr_assert_eq(gfa_pool_vmstat(a, &v1), 0);
	if (y >= 0)
		gfa_pcp_free(cb, (uint64_t)y, 0, 2);
	cr_assert_eq(y, GFA_EINVAL, "a cache of another pool: got %ld", (long)y);
	cr_assert_eq(v1.err_inval, v0.err_inval + 1, "the refusal is not counted");
	cr_assert_eq((unsigned char)mem[0], 0xcd, "pool A's frame of owner 1 was zeroed");
	cr_assert_eq(gfa_backing_free(ba, cb, 0, 9, 1), GFA_EINVAL);
	gfa_pcp_destroy(cb);
	cr_assert_eq(gfa_free(a, 0, 9, 1), 0);
	gfa_backing_destroy(ba);
	gfa_pool_destroy(a);
	gfa_pool_destroy(b);
}
