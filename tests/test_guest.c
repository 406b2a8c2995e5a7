/* Guests on memfd-backed pools: huge backing, isolation, moves, collapse, host THP. */
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/host_util.h"

#define MiB (1UL << 20)

static struct tu_host host_new(uint64_t bytes, bool populate)
{
	/* the dirty marks these tests check stay: no zeroing at the stop */
	const struct gfa_backing_config bc = { .populate = populate, .no_zero_on_stop = true };

	return tu_host_new(bytes, &bc, 0);
}

Test(guest, huge_backed_and_visible_through_the_pool)
{
	struct tu_host h = host_new(64 * MiB, false);
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_guest_stat st;
	uint64_t pfn;

	cr_assert_not_null(g);
	cr_assert_eq((uintptr_t)gfa_guest_hva(g) & (2 * MiB - 1), 0);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 8);
	cr_assert_eq(st.small_ranges, 0);
	tu_fill(g, 0xabc);
	cr_assert_eq(tu_fill_bad(g, 0xabc, 0, 0), 0);
	/* the same bytes through the pool's own mapping: the window maps the memfd */
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 5 * MiB, &pfn), 0);
	cr_assert_eq(*(uint64_t *)gfa_pfn_to_addr(h.pool, pfn), 0xabc ^ (5 * MiB / 8));
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest, frames_never_carry_another_guests_data)
{
	struct tu_host h = host_new(32 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 32 * MiB };

	for (int round = 0; round < 4; round++) {
		struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
		uint64_t *p;

		cr_assert_not_null(g);
		p = gfa_guest_hva(g);
		for (uint64_t i = 0; i < cfg.mem_bytes / 8; i++)
			cr_assert_eq(p[i], 0, "round %d: stale data at %lu", round, i * 8);
		memset(p, 0x5a, cfg.mem_bytes);
		gfa_guest_destroy(g);
		cr_assert_eq(gfa_backing_nr_dirty(h.b), 32 * MiB / GFA_FRAME_SIZE);
	}
	tu_host_done(&h);
}

Test(guest, bad_config)
{
	struct tu_host h = host_new(16 * MiB, false);
	struct gfa_guest_config cfg = { .mem_bytes = 3 * MiB + 512 };

	cr_assert_null(gfa_guest_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, EINVAL, "not 4 KiB aligned");
	cfg.mem_bytes = 2 * MiB;
	cfg.zone = 4;
	cr_assert_null(gfa_guest_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, ERANGE);
	cfg.zone = 0;
	cr_assert_null(gfa_guest_create(NULL, h.b, &cfg));
	cr_assert_eq(errno, EFAULT);
	cfg.mem_bytes = 32 * MiB; /* more than the pool */
	cr_assert_null(gfa_guest_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_eq(tu_free_frames(h.pool), 16 * MiB / GFA_FRAME_SIZE,
		     "a failed create keeps nothing");
	/* the largest size, 16 TiB, on a 16 MiB pool */
	cfg.mem_bytes = (uint64_t)UINT32_MAX << GFA_FRAME_SHIFT & ~(2 * MiB - 1);
	cr_assert_null(gfa_guest_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, ENOMEM);
	tu_host_done(&h);
}

/* pfn + size would wrap past 2^64 and look in range: every backing call refuses. */
Test(guest, backing_refuses_ranges_that_wrap)
{
	struct tu_host h = host_new(16 * MiB, false);
	uint64_t wrap[] = { UINT64_MAX, 0 - (1UL << 9), 0 - (1UL << 10) };
	unsigned int order[] = { 0, 9, 10 };

	for (int i = 0; i < 3; i++) {
		cr_assert_lt(gfa_backing_prepare(h.b, wrap[i], order[i]), 0);
		gfa_backing_mark_dirty(h.b, wrap[i], order[i]);
		gfa_backing_mark_clean(h.b, wrap[i], order[i]);
		cr_assert_not(gfa_backing_block_dirty(h.b, wrap[i], order[i]));
	}
	*(volatile char *)gfa_pfn_to_addr(h.pool, 100) = 1; /* only data is marked */
	gfa_backing_mark_dirty(h.b, 100, 0);
	/* (2^64 - 64) + 128 wraps to 64: once cleared bits far outside the bitmap */
	gfa_backing_mark_clean_range(h.b, 0 - 64ULL, 128);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 1, "a refused range changes nothing");
	tu_host_done(&h);
}

/*
 * A free the allocator refuses leaves the block where it was, and its frames dirty: the
 * block could be a move's source, freed holding the data just after the refusal.
 */
Test(guest, refused_backing_free_keeps_the_block_and_never_cleans)
{
	struct tu_host h = host_new(16 * MiB, false);
	int64_t pfn = gfa_backing_alloc(h.b, NULL, 0, 2, GFA_MT_MOVABLE, 5, GFA_BACKING_ZERO);
	struct gfa_frame_info fi;

	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 0);
	/* the owner's data: a free marks only what the memfd holds */
	memset(gfa_pfn_to_addr(h.pool, (uint64_t)pfn), 0xa5, 4 * GFA_FRAME_SIZE);
	cr_assert_eq(gfa_backing_free(h.b, NULL, (uint64_t)pfn, 2, 6), GFA_EOWNER);
	cr_assert_eq(gfa_frame_lookup(h.pool, (uint64_t)pfn, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.owner, 5);
	cr_assert(gfa_backing_block_dirty(h.b, (uint64_t)pfn, 2));
	cr_assert_eq(gfa_backing_free(h.b, NULL, (uint64_t)pfn, 2, 5), 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 4);
	tu_host_done(&h);
}

/* A create that fails on an id in use must leave the guest that has it registered. */
static int refuse_move(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	(void)ctx;
	(void)owner;
	(void)s;
	(void)d;
	(void)o;
	return -EBUSY;
}

Test(guest, failed_create_keeps_the_guest_with_that_id)
{
	struct tu_host h = host_new(32 * MiB, false);
	struct gfa_guest_config cfg = { .mem_bytes = 4 * MiB, .id = 4242 };
	static const struct gfa_owner_ops ops = { .migrate = refuse_move };
	struct gfa_guest *g1 = gfa_guest_create(h.pool, h.b, &cfg);

	cr_assert_not_null(g1);
	cr_assert_null(gfa_guest_create(h.pool, h.b, &cfg), "the id is taken");
	cr_assert_eq(gfa_owner_register(h.pool, 4242, &ops, NULL), -EEXIST,
		     "the failed create unregistered the running guest");
	gfa_guest_destroy(g1);
	tu_host_done(&h);
}

/*
 * Two guests collapsing at once: each holds its own lock while its order-9 allocation
 * compacts, and that compaction moves the other guest's frames.  Waiting for the other
 * guest's lock there closed a cycle (ABBA); a busy guest now answers -EAGAIN.
 */
struct collapse_arg {
	struct gfa_guest *g;
	int ret;
};

static void *collapse_main(void *arg)
{
	struct collapse_arg *c = arg;

	c->ret = gfa_guest_collapse(c->g, 1);
	return NULL;
}

Test(guest, concurrent_collapses_of_two_guests_do_not_deadlock, .timeout = 60)
{
	const uint64_t F = 5, nr = 64 * MiB / GFA_FRAME_SIZE, half = nr / 2;
	struct tu_host h = host_new(64 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB, .small_only = true };
	struct collapse_arg cx, cy;
	pthread_t tx, ty;

	/* every frame taken one by one: no free block above order 0 anywhere */
	for (uint64_t i = 0; i < nr; i++)
		cr_assert_eq(gfa_alloc(h.pool, 0, 0, GFA_MT_MOVABLE, F, 0), (int64_t)i);
	/* low half: X on even frames, Y on odd frames, interleaved in every pageblock */
	for (uint64_t p = 0; p < half; p += 2)
		cr_assert_eq(gfa_free(h.pool, p, 0, F), 0);
	cx.g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(cx.g);
	for (uint64_t p = 1; p < half; p += 2)
		cr_assert_eq(gfa_free(h.pool, p, 0, F), 0);
	cy.g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(cy.g);
	/* high half: order-0 holes between frames nobody can move */
	for (uint64_t p = half + 1; p < nr; p += 2)
		cr_assert_eq(gfa_free(h.pool, p, 0, F), 0);
	/* a deadlock shows as the test's timeout */
	pthread_create(&tx, NULL, collapse_main, &cx);
	pthread_create(&ty, NULL, collapse_main, &cy);
	pthread_join(tx, NULL);
	pthread_join(ty, NULL);
	gfa_guest_destroy(cx.g);
	gfa_guest_destroy(cy.g);
	for (uint64_t p = half; p < nr; p += 2)
		cr_assert_eq(gfa_free(h.pool, p, 0, F), 0);
	tu_host_done(&h);
}

static int pauses;
static int count_pause(void *ctx)
{
	(void)ctx;
	pauses++;
	return 0;
}
static int count_resume(void *ctx)
{
	(void)ctx;
	return 0;
}

Test(guest, compaction_moves_guest_frames_and_collapse_restores_huge, .timeout = 120)
{
	struct tu_host h = host_new(64 * MiB, false);
	struct gfa_guest_vcpu_ops ops = { count_pause, count_resume };
	struct gfa_guest_config small = { .mem_bytes = 16 * MiB,
					  .small_only = true,
					  .vcpu_ops = &ops };
	struct gfa_guest_config filler = { .mem_bytes = 2 * MiB, .small_only = true };
	struct gfa_guest *fill_g[24], *g;
	struct gfa_guest_stat st;
	int n = 0, collapsed;

	/* fragment: many small guests, free every other one */
	for (n = 0; n < 24; n++)
		cr_assert_not_null(fill_g[n] = gfa_guest_create(h.pool, h.b, &filler));
	g = gfa_guest_create(h.pool, h.b, &small);
	cr_assert_not_null(g);
	tu_fill(g, 77);
	for (n = 0; n < 24; n += 2)
		gfa_guest_destroy(fill_g[n]);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 0);
	collapsed = gfa_guest_collapse(g, 64);
	gfa_guest_stat(g, &st);
	cr_assert_eq(collapsed, 8, "collapsed %d ranges", collapsed);
	cr_assert_eq(st.huge_ranges, 8);
	cr_assert_eq(tu_fill_bad(g, 77, 0, 0), 0, "data survived the moves");
	if (st.wp_errno) /* the pause fallback: one pause per collapsed range */
		cr_assert_eq(pauses, 8, "%d pauses for 8 collapsed ranges", pauses);
	else
		cr_assert_eq(pauses, 0, "write-protected moves paused the vCPUs %d times", pauses);
	gfa_guest_destroy(g);
	for (n = 1; n < 24; n += 2)
		gfa_guest_destroy(fill_g[n]);
	tu_host_done(&h);
}

/* Set shmem THP to advise for the test, restore after; -1 if we cannot. */
/* host settings a test changed, put back by its .fini even when an assertion fails */
static char shmem_saved[32];
static long hugetlb_saved = -1;

static void shmem_thp_fini(void)
{
	if (shmem_saved[0])
		tu_shmem_thp_restore(shmem_saved);
}

Test(guest, host_maps_order9_blocks_with_pmds, .timeout = 60, .fini = shmem_thp_fini)
{
	char *old = shmem_saved;
	struct tu_host h;
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g;
	int64_t pmd;

	int lock = tu_shmem_thp_lock();

	if (tu_shmem_thp_advise(old, sizeof(shmem_saved))) {
		old[0] = '\0';
		cr_skip_test(
			"cannot set shmem_enabled=advise (not root?): PMD backing not checked");
	}
	h = host_new(32 * MiB, true);
	g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(g);
	tu_fill(g, 3);
	pmd = gfa_smaps_pmd_bytes(gfa_guest_hva(g), cfg.mem_bytes);
	tu_shmem_thp_restore(old);
	old[0] = '\0';
	tu_shmem_thp_unlock(lock);
	cr_log_info("guest window: %ld of %lu bytes PMD-mapped", (long)pmd, cfg.mem_bytes);
	cr_assert_eq(pmd, (int64_t)cfg.mem_bytes, "every 2 MiB range should be a PMD mapping");
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

/* Reserve n more hugetlb pages (restored by the caller); -1 if we cannot. */
static long hugetlb_reserve(long n)
{
	long old = -1, now = -1;
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "r+");

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &old) != 1 || fseek(f, 0, SEEK_SET) ||
	    fprintf(f, "%ld\n", old + n) < 0) {
		fclose(f);
		return -1;
	}
	fclose(f);
	f = fopen("/proc/sys/vm/nr_hugepages", "r");
	if (f && fscanf(f, "%ld", &now) != 1)
		now = -1;
	if (f)
		fclose(f);
	return now >= old + n ? old : -1;
}

static void hugetlb_restore(long old)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");

	if (f) {
		fprintf(f, "%ld\n", old);
		fclose(f);
	}
}

static void hugetlb_fini(void)
{
	if (hugetlb_saved >= 0)
		hugetlb_restore(hugetlb_saved);
}

Test(guest, hugetlb_backed_pool, .timeout = 60, .fini = hugetlb_fini)
{
	struct gfa_pool *pool = tu_pool(8 * MiB / GFA_FRAME_SIZE);
	struct gfa_backing_config bc = { .hugetlb = true, .populate = true };
	struct gfa_guest_config cfg = { .mem_bytes = 8 * MiB };
	struct gfa_backing *b;
	struct gfa_guest *g;
	struct gfa_guest_stat st;
	long old = hugetlb_saved = hugetlb_reserve(4);

	if (old < 0) {
		gfa_pool_destroy(pool);
		cr_skip_test("cannot reserve hugetlb pages (not root, or no memory)");
	}
	b = gfa_backing_create(pool, &bc);
	cr_assert_not_null(b, "hugetlb backing: %s", strerror(errno));
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g);
	tu_fill(g, 42);
	cr_assert_eq(tu_fill_bad(g, 42, 0, 0), 0);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 4, "a hugetlb pool hands out 2 MiB blocks");
	gfa_guest_destroy(g);
	gfa_backing_destroy(b);
	ASSERT_POOL_OK(pool);
	gfa_pool_destroy(pool);
	hugetlb_restore(old);
	hugetlb_saved = -1;
}

/* A guest collapse refused at its last piece (the moved notifier says no to the range's
 * mapping) puts every piece back where it was. */
static int refusing_moves;
static int moved_refuses(void *ctx, uint64_t gpa, uint64_t len, int fd, uint64_t off)
{
	(void)ctx, (void)gpa, (void)fd, (void)off;
	refusing_moves++;
	return len == 2 * MiB ? -1 : 0;
}

Test(guest, failed_collapse_puts_every_piece_back, .timeout = 60)
{
	const uint64_t F = 5, nr = 2048; /* 8 MiB: four pageblocks */
	struct tu_host h = host_new(nr * GFA_FRAME_SIZE, false);
	struct gfa_guest_config cfg = { .mem_bytes = 2 * MiB,
					.small_only = true,
					.moved_fn = moved_refuses };
	struct gfa_guest_stat st;
	struct gfa_guest *g;
	uint64_t before[4], after;

	for (uint64_t i = 0; i < nr; i++)
		cr_assert_eq(gfa_alloc(h.pool, 0, 0, GFA_MT_MOVABLE, F, 0), (int64_t)i);
	/* four order-7 holes whose buddies are taken: the guest gets four order-7 pieces */
	for (uint64_t base = 0; base < 1024; base += 256)
		for (uint64_t q = base; q < base + 128; q++)
			cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(g);
	for (unsigned int i = 0; i < 4; i++)
		cr_assert_eq(
			gfa_guest_gpa_to_pfn(g, (uint64_t)i * 128 * GFA_FRAME_SIZE, &before[i]), 0);
	for (uint64_t q = 1024; q < 1536; q++) /* an empty pageblock for the new block */
		cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	cr_assert_eq(gfa_guest_collapse(g, 1), 0, "the range's mapping is refused");
	cr_assert_eq(refusing_moves, 1, "one notice for the whole range, not one per piece");
	for (unsigned int i = 0; i < 4; i++) {
		cr_assert_eq(gfa_guest_gpa_to_pfn(g, (uint64_t)i * 128 * GFA_FRAME_SIZE, &after),
			     0);
		cr_assert_eq(after, before[i],
			     "piece %u: pfn %lu, was %lu before the failed collapse", i,
			     (unsigned long)after, (unsigned long)before[i]);
	}
	/* moves counts compaction's moves: an undone collapse moved no block */
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.moves, 0, "%lu moves counted, %lu collapses, nothing moved",
		     (unsigned long)st.moves, (unsigned long)st.collapses);
	gfa_guest_destroy(g);
	for (uint64_t q = 1536; q < nr; q++)
		cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	for (uint64_t base = 128; base < 1024; base += 256)
		for (uint64_t q = base; q < base + 128; q++)
			cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	cr_assert_eq(tu_free_frames(h.pool), nr, "frames lost: %lu free of %lu",
		     (unsigned long)tu_free_frames(h.pool), (unsigned long)nr);
	tu_host_done(&h);
}

/* free_dirty counts free frames only: an allocated block's dirty bits are its owner's. */
Test(guest, backing_free_dirty_counts_only_free_frames)
{
	struct tu_host h = host_new(16 * MiB, false);
	struct gfa_backing_zone_stat bs;
	int64_t a = gfa_backing_alloc(h.b, NULL, 0, 4, GFA_MT_MOVABLE, 3, 0);

	cr_assert_geq(a, 0);
	memset(gfa_pfn_to_addr(h.pool, (uint64_t)a), 0xab, 16 * 4096);
	cr_assert_eq(gfa_backing_free(h.b, NULL, (uint64_t)a, 4, 3), 0);
	cr_assert_eq(gfa_backing_zone_stat(h.b, 0, &bs), 0);
	cr_assert_eq(bs.free_dirty, 16);
	a = gfa_backing_alloc(h.b, NULL, 0, 4, GFA_MT_MOVABLE, 4, 0); /* no ZERO: dirty */
	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_backing_zone_stat(h.b, 0, &bs), 0);
	cr_assert_eq(bs.free_dirty, 0, "free_dirty %lu: allocated frames counted",
		     (unsigned long)bs.free_dirty);
	cr_assert_eq(gfa_backing_free(h.b, NULL, (uint64_t)a, 4, 4), 0);
	tu_host_done(&h);
}

/* A host of two zones of z0 and z1 frames, without memory behind the backing yet. */
static struct tu_host host_two_zones(uint64_t z0, uint64_t z1)
{
	struct gfa_pool_config cfg;
	struct tu_host h;

	gfa_pool_config_init(&cfg, z0);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = z1;
	h.pool = gfa_pool_create(&cfg);
	cr_assert_not_null(h.pool);
	h.b = gfa_backing_create(h.pool, NULL);
	cr_assert_not_null(h.b);
	return h;
}

/* Pfns in the gap between two zones are no frames: refused, not zeroed through NULL. */
Test(guest, backing_refuses_pfns_between_zones)
{
	struct tu_host h = host_two_zones(1536, 512);
	uint64_t start, nr;

	cr_assert_eq(gfa_zone_span(h.pool, 1, &start, &nr), 0);
	cr_assert_eq(start, 2048, "zone 1 starts on a 4 MiB boundary: a gap before it");
	gfa_backing_mark_dirty(h.b, 1600, 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 0, "a pfn in the gap counted dirty");
	cr_assert_lt(gfa_backing_prepare(h.b, 1600, 0), 0);
	cr_assert_lt(gfa_backing_prepare(h.b, 1024, 10), 0, "a block running into the gap");
	tu_host_done(&h);
}

/* A guest's frames come from cfg->zone: a cache of another zone is refused. */
Test(guest, a_cache_of_another_zone_is_refused)
{
	struct tu_host h = host_two_zones(4096, 4096);
	struct gfa_pcp *pcp = gfa_pcp_create(h.pool, 1);
	struct gfa_guest_config gc = { .mem_bytes = 4UL << 20, .zone = 0, .pcp = pcp };

	cr_assert_not_null(pcp);
	cr_assert_null(gfa_guest_create(h.pool, h.b, &gc));
	cr_assert_eq(errno, EINVAL);
	gfa_pcp_destroy(pcp);
	tu_host_done(&h);
}

/*
 * A backing of another pool is refused: its dirty marks and zeroing go by pfn, so a
 * guest of pool A zeroed pool B's live guest and never zeroed A's own dirty frames.
 */
Test(guest, a_backing_of_another_pool_is_refused)
{
	struct tu_host a = host_new(16 * MiB, false), b = host_new(16 * MiB, false);
	struct gfa_guest_config cfg = { .mem_bytes = 8 * MiB };
	struct gfa_guest *gb = gfa_guest_create(b.pool, b.b, &cfg), *gx;
	uint64_t *w, bad = 0;

	cr_assert_not_null(gb);
	w = gfa_guest_hva(gb);
	memset(w, 0x5a, cfg.mem_bytes);
	gx = gfa_guest_create(a.pool, b.b, &cfg); /* pool A's frames, B's backing */
	if (gx) {
		memset(gfa_guest_hva(gx), 0x77, cfg.mem_bytes);
		gfa_guest_destroy(gx); /* marks B's frames dirty, those of B's guest */
		gx = gfa_guest_create(a.pool, b.b, &cfg); /* zeroes them */
		gfa_guest_destroy(gx);
		gx = (void *)1;
	}
	for (uint64_t i = 0; i < cfg.mem_bytes / 8; i += 512)
		bad += w[i] != 0x5a5a5a5a5a5a5a5aULL;
	cr_assert_eq(bad, 0, "%lu pages of pool B's guest zeroed by guests of pool A",
		     (unsigned long)bad);
	cr_assert_null(gx, "a guest of pool A was created with pool B's backing");
	cr_assert_eq(errno, EINVAL);
	gfa_guest_destroy(gb);
	tu_host_done(&a);
	tu_host_done(&b);
}

/* Another pool's backing without the zone at all: EINVAL too (it said ENODEV). */
Test(guest, backing_of_a_smaller_pool_is_einval)
{
	struct gfa_pool_config pc;
	struct gfa_pool *a, *b;
	struct gfa_backing *ba, *bb;
	struct gfa_guest_config cfg = { .mem_bytes = 2 * MiB, .zone = 1 };
	struct gfa_guest *g;

	gfa_pool_config_init(&pc, 4 * MiB >> GFA_FRAME_SHIFT);
	pc.nr_zones = 2;
	pc.zones[1] = pc.zones[0];
	a = gfa_pool_create(&pc);
	cr_assert_not_null(a);
	b = tu_pool(4 * MiB >> GFA_FRAME_SHIFT); /* one zone */
	ba = gfa_backing_create(a, NULL);
	bb = gfa_backing_create(b, NULL);
	cr_assert_not_null(ba);
	cr_assert_not_null(bb);
	g = gfa_guest_create(a, ba, &cfg); /* A's own backing works */
	cr_assert_not_null(g, "%s", strerror(errno));
	gfa_guest_destroy(g);
	errno = 0;
	g = gfa_guest_create(a, bb, &cfg); /* B's backing, zone 1 */
	cr_assert_null(g);
	cr_assert_eq(errno, EINVAL, "errno %d (%s), want EINVAL", errno, strerror(errno));
	gfa_backing_destroy(ba);
	gfa_backing_destroy(bb);
	gfa_pool_destroy(a);
	gfa_pool_destroy(b);
}

/* A cache of another pool hands out that pool's frames: refused (it was taken, and the
 * guest mapped pfns its own pool held free). */
Test(guest, a_cache_of_another_pool_is_refused)
{
	struct tu_host a = host_new(16 * MiB, false), b = host_new(16 * MiB, false);
	struct gfa_pcp *alien = gfa_pcp_create(b.pool, 0);
	struct gfa_guest_config cfg = { .mem_bytes = 4 * MiB, .pcp = alien, .small_only = true };
	struct gfa_guest *g;

	cr_assert_not_null(alien);
	errno = 0;
	g = gfa_guest_create(a.pool, a.b, &cfg);
	cr_assert_null(g, "a guest of pool A was created with pool B's cache");
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(tu_free_frames(a.pool), 16 * MiB >> GFA_FRAME_SHIFT);
	cr_assert_eq(tu_free_frames(b.pool), 16 * MiB >> GFA_FRAME_SHIFT);
	gfa_pcp_destroy(alien);
	tu_host_done(&a);
	tu_host_done(&b);
}

/*
 * An unpopulated backing: the 2 MiB blocks fault in when the guest first writes them,
 * through the window's own mapping, which must ask for huge pages (shmem_enabled=advise
 * allocates huge folios only for VM_HUGEPAGE mappings).  Before, the windows got 4 KiB
 * pages although every range was one order-9 block.
 */
Test(guest, unpopulated_backing_maps_order9_blocks_with_pmds, .timeout = 60, .fini = shmem_thp_fini)
{
	char *old = shmem_saved;
	struct tu_host h;
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g;
	struct gfa_guest_stat st;
	int64_t pmd;
	int lock = tu_shmem_thp_lock();

	if (tu_shmem_thp_advise(old, sizeof(shmem_saved))) {
		old[0] = '\0';
		tu_shmem_thp_unlock(lock);
		cr_skip_test(
			"cannot set shmem_enabled=advise (not root?): PMD backing not checked");
	}
	h = host_new(32 * MiB, false);
	g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(g);
	tu_fill(g, 5);
	pmd = gfa_smaps_pmd_bytes(gfa_guest_hva(g), cfg.mem_bytes);
	tu_shmem_thp_restore(old);
	old[0] = '\0';
	tu_shmem_thp_unlock(lock);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 8);
	cr_assert_eq(pmd, (int64_t)cfg.mem_bytes,
		     "huge_ranges says 8/8 but only %ld of %lu bytes are PMD-mapped", (long)pmd,
		     cfg.mem_bytes);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}
