/*
 * Owners (allocator/owner.c): the registry of migrate ops, its errors and its size, the
 * batch calls around compaction's moves, and unregistering under a running op.
 */
#include <pthread.h>
#include <unistd.h>
#include "tests/test_util.h"
#include "refvmm/canary_owner.h"

/*
 * Unregistering an owner waits for the migrate call compaction is making: the owner
 * frees its context right after (co_destroy does), which must not run under the call.
 */
static int slow_in_op, slow_unregistered, slow_saw_unregistered;

static int slow_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	(void)ctx;
	(void)owner;
	(void)s;
	(void)d;
	(void)o;
	if (__atomic_exchange_n(&slow_in_op, 1, __ATOMIC_ACQ_REL))
		return -EAGAIN;
	for (int i = 0; i < 50 && !__atomic_load_n(&slow_unregistered, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	slow_saw_unregistered = __atomic_load_n(&slow_unregistered, __ATOMIC_ACQUIRE);
	return -EAGAIN;
}

static void *compact_all(void *arg)
{
	gfa_compact_zone(arg, 0, -1, GFA_COMPACT_SYNC);
	return NULL;
}

Test(owner, unregister_waits_for_a_running_migrate, .timeout = 60)
{
	struct gfa_pool *p = tu_pool(4 * GFA_PAGEBLOCK_FRAMES);
	const struct gfa_owner_ops ops = { .migrate = slow_migrate };
	pthread_t t;

	cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
	for (uint64_t i = 0; i < 4 * GFA_PAGEBLOCK_FRAMES; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), 0);
	for (uint64_t pfn = 0; pfn < 4 * GFA_PAGEBLOCK_FRAMES; pfn++)
		if ((pfn & (GFA_PAGEBLOCK_FRAMES - 1)) < GFA_PAGEBLOCK_FRAMES / 2)
			cr_assert_eq(gfa_free(p, pfn, 0, 1), 0);
	pthread_create(&t, NULL, compact_all, p);
	while (!__atomic_load_n(&slow_in_op, __ATOMIC_ACQUIRE))
		usleep(1000);
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), 0);
	__atomic_store_n(&slow_unregistered, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	cr_assert_eq(slow_saw_unregistered, 0, "unregister returned while the op ran");
	/* the slot is reusable: register, unregister again */
	cr_assert_eq(gfa_owner_register(p, 1, &ops, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Many register/unregister cycles: the registry never fills up with deleted owners. */
Test(owner, registry_survives_churn)
{
	struct gfa_pool *p = tu_pool(4096);

	for (uint64_t i = 0; i < 200000; i++) {
		cr_assert_eq(gfa_owner_register(p, i, &co_ops, NULL), 0, "owner %lu", i);
		cr_assert_eq(gfa_owner_register(p, i, NULL, NULL), 0);
	}
	cr_assert_eq(gfa_owner_register(p, 7, NULL, NULL), -ENOENT);
	gfa_pool_destroy(p);
}

static void batch_nop(void *ctx, uint64_t owner)
{
	(void)ctx;
	(void)owner;
}

Test(owner, register_errors_are_counted)
{
	struct gfa_pool *p = tu_pool(2048);
	const struct gfa_owner_ops no_migrate = { .collapsed = NULL };
	const struct gfa_owner_ops half_batch = { .migrate = tu_migrate_ok,
						  .batch_begin = batch_nop };
	const struct gfa_owner_ops whole_batch = { .migrate = tu_migrate_ok,
						   .batch_begin = batch_nop,
						   .batch_end = batch_nop };

	cr_assert_eq(gfa_owner_register(NULL, 1, &co_ops, NULL), GFA_EFAULT);
	EXPECT_BAD(p, gfa_owner_register(p, 1, &no_migrate, NULL), GFA_EFAULT, err_fault);
	EXPECT_BAD(p, gfa_owner_register(p, 1, &half_batch, NULL), GFA_EINVAL, err_inval);
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), GFA_ENOTFOUND, "nothing registered");
	cr_assert_eq(gfa_owner_register(p, 1, &whole_batch, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, 1, &co_ops, NULL), GFA_EEXIST);
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), GFA_ENOTFOUND, "unregistered once");
	cr_assert_eq(gfa_owner_register(p, 1, &co_ops, NULL), 0, "and registered anew");
	cr_assert_eq(gfa_owner_register(p, 1, NULL, NULL), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* The registry holds 32768 owners; one more is GFA_ENOSPC until one leaves. */
Test(owner, registry_holds_32768_owners)
{
	struct gfa_pool *p = tu_pool(2048);
	const uint64_t n = 32768;

	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(gfa_owner_register(p, i * 7919, &co_ops, NULL), 0, "owner %lu",
			     (unsigned long)i);
	cr_assert_eq(gfa_owner_register(p, UINT64_MAX, &co_ops, NULL), GFA_ENOSPC);
	cr_assert_eq(gfa_owner_register(p, 0, &co_ops, NULL), GFA_EEXIST, "found in a full table");
	cr_assert_eq(gfa_owner_register(p, 5 * 7919, NULL, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, UINT64_MAX, &co_ops, NULL), 0, "a slot came free");
	cr_assert_eq(gfa_owner_register(p, 5 * 7919, &co_ops, NULL), GFA_ENOSPC);
	for (uint64_t i = 0; i < n; i++)
		if (i != 5)
			cr_assert_eq(gfa_owner_register(p, i * 7919, NULL, NULL), 0);
	cr_assert_eq(gfa_owner_register(p, UINT64_MAX, NULL, NULL), 0);
	gfa_pool_destroy(p);
}

/* An owner that stops its users around moves: every migrate inside one begin..end pair. */
struct batcher {
	uint64_t owner;
	int depth, begins, ends, migrates, outside, wrong;
};

static void batcher_begin(void *ctx, uint64_t owner)
{
	struct batcher *b = ctx;

	b->wrong += owner != b->owner;
	b->depth++;
	b->begins++;
}

static void batcher_end(void *ctx, uint64_t owner)
{
	struct batcher *b = ctx;

	b->wrong += owner != b->owner;
	b->depth--;
	b->ends++;
}

static int batcher_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	struct batcher *b = ctx;

	(void)s;
	(void)d;
	(void)o;
	b->wrong += owner != b->owner;
	b->outside += b->depth != 1;
	b->migrates++;
	return 0;
}

Test(owner, batch_calls_bracket_every_move, .timeout = 60)
{
	const uint64_t frames = 4 * GFA_PAGEBLOCK_FRAMES;
	struct gfa_pool *p = tu_pool(frames);
	const struct gfa_owner_ops ops = { .migrate = batcher_migrate,
					   .batch_begin = batcher_begin,
					   .batch_end = batcher_end };
	struct batcher b = { .owner = 42 };

	cr_assert_eq(gfa_owner_register(p, 42, &ops, &b), 0);
	for (uint64_t i = 0; i < frames; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 42, GFA_ALLOC_NOCOMPACT), 0);
	/* half of every pageblock free: compaction has something to move */
	for (uint64_t pfn = 0; pfn < frames; pfn++)
		if ((pfn & (GFA_PAGEBLOCK_FRAMES - 1)) < GFA_PAGEBLOCK_FRAMES / 2)
			cr_assert_eq(gfa_free(p, pfn, 0, 42), 0);
	cr_assert_eq(gfa_compact_zone(p, 0, -1, GFA_COMPACT_SYNC), GFA_COMPACT_COMPLETE);
	cr_assert_gt(b.migrates, 0, "nothing moved");
	cr_assert_eq(b.outside, 0, "%d of %d moves outside a batch", b.outside, b.migrates);
	cr_assert_eq(b.begins, b.ends);
	cr_assert_eq(b.depth, 0);
	cr_assert_leq(b.begins, b.migrates, "a batch per source pageblock at most, not per move");
	cr_assert_eq(b.wrong, 0, "an op called with another owner's cookie");
	cr_assert_eq(VMS(p, pgmigrate_success), (uint64_t)b.migrates);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_owner_register(p, 42, NULL, NULL), 0);
	gfa_pool_destroy(p);
}
