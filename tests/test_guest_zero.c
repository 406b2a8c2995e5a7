// SPDX-License-Identifier: MIT
/*
 * Zeroing (vmm/zero.c, and vmm/zero_worker.c's zeroer): every non-temporal path the
 * CPU offers against memset, on unaligned and odd-sized ranges; the path GFA_ZERO
 * forces; gfa_backing_prepare's runs of dirty frames; a stopped guest's frames free at
 * once (counted, claimable and allocatable, reading zero when taken) and zeroed in the
 * background; a failed create that keeps no frame; a restart that finds populated
 * clean blocks while the stopped guest's dirty ones wait for the zeroer takes those,
 * faulting and zeroing nothing.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <gfa/vmm.h>
#include "allocator/layers.h" /* zone_release_take/_done: release as the host return does */
#include "tests/test_util.h"
#include "common/compiler.h"

#define MiB (1UL << 20)

static const char *const zero_paths[] = { "avx512", "avx2", "movnti", "memset" };

/* gfa_zero over [off, off + len) of a buffer of 0xa5 is memset: zero inside, untouched
 * outside (64 guard bytes each side). */
static void check_range(char *buf, char *ref, size_t off, size_t len)
{
	size_t total = off + len + 64 + 64;

	memset(buf, 0xa5, total);
	memset(ref, 0xa5, total);
	gfa_zero(buf + 64 + off, len);
	memset(ref + 64 + off, 0, len);
	cr_assert_eq(memcmp(buf, ref, total), 0, "%s: off %zu len %zu differs from memset",
		     gfa_zero_method(), off, len);
}

Test(guest_zero, every_path_matches_memset_on_unaligned_odd_ranges)
{
	static const size_t lens[] = { 0,   1,    7,    8,    31,         32,
				       63,  64,   65,   127,  255,        256,
				       257, 4095, 4096, 4097, 65536 + 13, (1 << 20) + 4093 };
	size_t cap = (2 << 20) + 4096;
	char *buf = aligned_alloc(4096, cap), *ref = aligned_alloc(4096, cap);
	unsigned int ran = 0;

	cr_assert(buf && ref);
	for (size_t m = 0; m < ARRAY_SIZE(zero_paths); m++) {
		if (!gfa_zero_method_usable(zero_paths[m])) {
			cr_assert_eq(gfa_zero_set_method(zero_paths[m]), -ENOTSUP);
			fprintf(stderr, "guest_zero: %s: not on this CPU\n", zero_paths[m]);
			continue;
		}
		cr_assert_eq(gfa_zero_set_method(zero_paths[m]), 0);
		cr_assert_str_eq(gfa_zero_method(), zero_paths[m]);
		for (size_t off = 0; off < 70; off += (off < 8 ? 1 : 13))
			for (size_t l = 0; l < ARRAY_SIZE(lens); l++)
				check_range(buf, ref, off, lens[l]);
		ran++;
	}
	cr_assert_geq(ran, 2, "at least movnti and memset run on x86-64");
	cr_assert_eq(gfa_zero_set_method("sse9"), -EINVAL);
	cr_assert_eq(gfa_zero_set_method(NULL), GFA_EFAULT);
	cr_assert_eq(gfa_zero_set_method(""), 0);
	cr_assert_str_eq(gfa_zero_method(), gfa_zero_method_usable("avx512") ? "avx512" :
					    gfa_zero_method_usable("avx2")   ? "avx2" :
									       "movnti");
	free(buf);
	free(ref);
}

/* Each test runs in a process of its own: the environment decides the first choice. */
Test(guest_zero, gfa_zero_env_forces_a_path)
{
	setenv("GFA_ZERO", "movnti", 1);
	cr_assert_str_eq(gfa_zero_method(), "movnti");
}

Test(guest_zero, gfa_zero_env_unknown_falls_back_to_the_best)
{
	setenv("GFA_ZERO", "bogus", 1);
	cr_assert_str_neq(gfa_zero_method(), "bogus");
	cr_assert(gfa_zero_method_usable(gfa_zero_method()));
}

static struct gfa_backing *zbacking(struct gfa_pool **pool, uint64_t bytes, bool on_stop)
{
	struct gfa_backing_config bc = { .populate = true, .no_zero_on_stop = !on_stop };
	struct gfa_backing *b;

	*pool = tu_pool(bytes >> GFA_FRAME_SHIFT);
	b = gfa_backing_create(*pool, &bc);
	cr_assert_not_null(b);
	return b;
}

/* The zeroer done, the pool checked, both gone. */
static void zdone(struct gfa_pool *pool, struct gfa_backing *b)
{
	cr_assert_eq(gfa_backing_zero_quiesce(b, 30000), 0);
	ASSERT_POOL_OK(pool);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}

/* prepare zeroes exactly the dirty frames, in runs that cross bitmap words. */
Test(guest_zero, prepare_zeroes_exactly_the_dirty_runs)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 8 * MiB, false);
	int64_t pfn = gfa_alloc(pool, 0, 10, GFA_MT_MOVABLE, 3, 0);
	uint64_t dirty = 0;

	cr_assert_geq(pfn, 0);
	for (uint64_t i = 0; i < 1024; i++) {
		memset(gfa_pfn_to_addr(pool, (uint64_t)pfn + i), 0x3c, GFA_FRAME_SIZE);
		/* runs of every length around the 64-frame words: 60..69, 127..200, odd ones */
		if ((i >= 60 && i < 70) || (i >= 127 && i < 200) || (i % 7 == 3) || i == 1023) {
			gfa_backing_mark_dirty(b, (uint64_t)pfn + i, 0);
			dirty++;
		}
	}
	cr_assert_eq(gfa_backing_prepare(b, (uint64_t)pfn, 10), (int64_t)dirty);
	for (uint64_t i = 0; i < 1024; i++) {
		const unsigned char *p = gfa_pfn_to_addr(pool, (uint64_t)pfn + i);
		bool was = (i >= 60 && i < 70) || (i >= 127 && i < 200) || (i % 7 == 3) ||
			   i == 1023;

		for (size_t k = 0; k < GFA_FRAME_SIZE; k += 511)
			cr_assert_eq(p[k], was ? 0 : 0x3c, "frame %lu byte %zu", (unsigned long)i,
				     k);
	}
	cr_assert_eq(gfa_backing_nr_dirty(b), 0);
	cr_assert_eq(gfa_backing_prepare(b, (uint64_t)pfn, 10), 0);
	gfa_free(pool, (uint64_t)pfn, 10, 3);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}

/* Owner 7 holds nr order-0 frames of zone 0, each holding data. */
static void other_owner_holds(struct gfa_pool *pool, uint64_t nr)
{
	for (uint64_t i = 0; i < nr; i++) {
		int64_t pfn = gfa_alloc(pool, 0, 0, GFA_MT_UNMOVABLE, 7, GFA_ALLOC_NOCOMPACT);

		cr_assert_geq(pfn, 0, "frame %lu of owner 7", (unsigned long)i);
		memset(gfa_pfn_to_addr(pool, (uint64_t)pfn), 0x33, GFA_FRAME_SIZE);
	}
}

/*
 * Right now, every frame of zone 0 but the other owner's is free: counted in nr_free,
 * claimable as a whole, and allocatable by a third owner at once, each frame reading
 * zero.  Everything goes back afterwards.
 */
static void assert_free_at_once(struct gfa_pool *pool, struct gfa_backing *b, uint64_t others)
{
	uint64_t want = 16 * MiB / GFA_FRAME_SIZE - others, *pfns = calloc(want, 8);
	struct gfa_zone_stat zs;

	cr_assert_not_null(pfns);
	cr_assert_eq(gfa_zone_stat(pool, 0, &zs), 0);
	cr_assert_eq(zs.nr_free, want, "free %lu, want %lu (the zone less the other owner's)",
		     (unsigned long)zs.nr_free, (unsigned long)want);
	cr_assert_eq(gfa_zone_claim(pool, 0, 9, want), 0, "a claim of every free frame");
	for (uint64_t i = 0; i < want; i++) {
		int64_t pfn = gfa_backing_alloc(b, NULL, 0, 0, GFA_MT_MOVABLE, 9, GFA_BACKING_ZERO);
		const uint64_t *w;

		cr_assert_geq(pfn, 0, "frame %lu of %lu: %ld", (unsigned long)i,
			      (unsigned long)want, (long)pfn);
		w = gfa_pfn_to_addr(pool, (uint64_t)pfn);
		for (size_t k = 0; k < GFA_FRAME_SIZE / 8; k++)
			cr_assert_eq(w[k], 0, "pfn %ld word %zu: another owner's data", (long)pfn,
				     k);
		pfns[i] = (uint64_t)pfn;
	}
	cr_assert_eq(gfa_zone_unclaim(pool, 0, 9), 0, "the claim was used up");
	for (uint64_t i = 0; i < want; i++)
		cr_assert_eq(gfa_backing_free(b, NULL, pfns[i], 0, 9), 0);
	free(pfns);
}

/*
 * A stopped guest's frames are free at once, with the default zeroer running: the
 * zone shows them free, a claim of all of them succeeds and a third owner gets every
 * one, zeroed.  The stop used to queue them for the zeroer, still allocated: right
 * after it the zone showed 0 frames free, the claim failed with -ENOSPC and
 * gfa_alloc with -ENOMEM.
 */
Test(guest_zero, a_stopped_guests_frames_are_free_at_once)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 16 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 12 * MiB };

	other_owner_holds(pool, 16);
	for (int round = 0; round < 4; round++) {
		struct gfa_guest *g = gfa_guest_create(pool, b, &cfg);

		cr_assert_not_null(g, "round %d: %s", round, strerror(errno));
		memset(gfa_guest_hva(g), 0x77, 12 * MiB);
		gfa_guest_destroy(g);
		assert_free_at_once(pool, b, 16);
	}
	zdone(pool, b);
}

/*
 * A create that fails for want of frames gives back every frame it took, at once: it
 * used to leave them queued for the zeroer (1,536 of 2,048 in the reproducer).
 */
Test(guest_zero, a_failed_create_keeps_no_frame)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 16 * MiB, true);
	struct gfa_guest_config small = { .mem_bytes = 8 * MiB }, big = { .mem_bytes = 12 * MiB };
	struct gfa_guest *g = gfa_guest_create(pool, b, &small);

	cr_assert_not_null(g);
	memset(gfa_guest_hva(g), 0x66, 8 * MiB); /* what the failed one takes is dirty */
	gfa_guest_destroy(g);
	other_owner_holds(pool, 2048);
	for (int round = 0; round < 4; round++) {
		errno = 0;
		cr_assert_null(gfa_guest_create(pool, b, &big), "round %d", round);
		cr_assert_eq(errno, ENOMEM);
		assert_free_at_once(pool, b, 2048);
	}
	zdone(pool, b);
}

/* A stopped guest's frames are zeroed in the background: the next start zeroes none. */
Test(guest_zero, a_stop_zeroes_in_the_background_and_the_next_start_finds_clean_frames)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 64 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 32 * MiB };
	struct gfa_guest *g = gfa_guest_create(pool, b, &cfg);
	struct gfa_guest_stat st;
	uint64_t *w;

	cr_assert_not_null(g);
	memset(gfa_guest_hva(g), 0x77, 32 * MiB);
	gfa_guest_destroy(g); /* returns at once: the zeroing is the worker's */
	cr_assert_eq(gfa_backing_zero_quiesce(b, 30000), 0);
	cr_assert_eq(gfa_backing_nr_dirty(b), 0, "the stop left dirty frames");
	cr_assert_eq(gfa_backing_zeroed_in_background(b), 32 * MiB / GFA_FRAME_SIZE);
	cr_assert_eq(tu_free_frames(pool), 64 * MiB / GFA_FRAME_SIZE, "frames kept in work");
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.zeroed_frames, 0, "the start paid for zeroing");
	w = gfa_guest_hva(g);
	for (uint64_t i = 0; i < 32 * MiB / 8; i += 257)
		cr_assert_eq(w[i], 0, "stale data at %lu", (unsigned long)(i * 8));
	gfa_guest_destroy(g);
	zdone(pool, b);
}

/* A start that needs every frame while the worker holds a batch waits it out, never
 * fails: the pool is exactly the guest's size. */
Test(guest_zero, a_start_right_after_a_stop_gets_every_frame)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 32 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 32 * MiB };

	for (int round = 0; round < 20; round++) {
		struct gfa_guest *g = gfa_guest_create(pool, b, &cfg);
		uint64_t *w;

		cr_assert_not_null(g, "round %d: %s", round, strerror(errno));
		w = gfa_guest_hva(g);
		for (uint64_t i = 0; i < 32 * MiB / 8; i += 4093)
			cr_assert_eq(w[i], 0, "round %d: stale data at %lu", round,
				     (unsigned long)(i * 8));
		memset(w, 0x11 + round, 32 * MiB);
		gfa_guest_destroy(g);
	}
	zdone(pool, b);
}

static bool want_any(void *ctx, uint64_t pfn, unsigned int order)
{
	(void)ctx, (void)pfn, (void)order;
	return true;
}

struct waiting_alloc {
	struct gfa_backing *b;
	int64_t pfn;
};

/* An allocation that finds no free frame on the lists: it waits for the scrub's. */
static void *alloc_one(void *arg)
{
	struct waiting_alloc *wa = arg;

	wa->pfn = gfa_backing_alloc(wa->b, NULL, 0, 0, GFA_MT_MOVABLE, 5,
				    GFA_BACKING_ZERO | GFA_ALLOC_NOCOMPACT);
	return NULL;
}

/*
 * A stop while an allocation waits for frames another scrubber holds: the zeroer's
 * batch is refused (no scrub takes frames while one waits), and it zeroes the stopped
 * guest's frames once the waiter has run.  It used to take the refusal for "nothing
 * dirty left" and sleep: gfa_backing_zero_quiesce returned 0 at once with all 2,048
 * frames still dirty, and nothing zeroed them until the next stop.
 */
Test(guest_zero, a_zeroer_refused_for_a_waiting_allocation_finishes_later)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 16 * MiB, true);
	struct gfa_guest_config cfg = { .mem_bytes = 8 * MiB };
	struct gfa_release_policy rp;
	struct waiting_alloc wa = { b, -1 };
	struct gfa_frame_range r[64];
	struct gfa_zone_stat zs;
	struct gfa_guest *g;
	pthread_t t;
	int n;

	/* no reserve on the lists: the scrub below takes every free frame */
	cr_assert_eq(gfa_zone_get_release_policy(pool, 0, &rp), 0);
	rp.low = 0;
	cr_assert_eq(gfa_zone_set_release_policy(pool, 0, &rp), 0);
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g, "%s", strerror(errno));
	memset(gfa_guest_hva(g), 0x3c, 8 * MiB);
	n = zone_scrub_take(pool, 0, want_any, NULL, r, 64, UINT64_MAX);
	cr_assert_gt(n, 0);
	cr_assert_eq(gfa_zone_stat(pool, 0, &zs), 0);
	cr_assert_eq(zs.nr_free_buddy + zs.nr_pcp, 0, "a free frame left on the lists");
	cr_assert_eq(pthread_create(&t, NULL, alloc_one, &wa), 0);
	usleep(100 * 1000);   /* the allocation waits for the scrubbed frames */
	gfa_guest_destroy(g); /* 2,048 dirty frames free, the zeroer kicked */
	usleep(100 * 1000);   /* past the settle: the zeroer's batch is refused */
	for (int i = 0; i < n; i++)
		cr_assert_eq(zone_populate_done(pool, r[i].pfn, r[i].nr), 0);
	pthread_join(t, NULL);
	cr_assert_geq(wa.pfn, 0, "the waiting allocation failed: %ld", (long)wa.pfn);
	cr_assert_eq(gfa_backing_zero_quiesce(b, 30000), 0);
	cr_assert_eq(gfa_backing_nr_dirty(b), 0, "the zeroer stopped with %lu frames dirty",
		     (unsigned long)gfa_backing_nr_dirty(b));
	cr_assert_geq(gfa_backing_zeroed_in_background(b), 8 * MiB / GFA_FRAME_SIZE - 1);
	cr_assert_eq(gfa_backing_free(b, NULL, (uint64_t)wa.pfn, 0, 5), 0);
	zdone(pool, b);
}

/* Release every free frame above @keep populated ones, as the host return does. */
static void release_down_to(struct gfa_pool *pool, uint64_t keep)
{
	struct gfa_release_policy rp = { .low = keep / 2, .high = keep, .min_empty_frac = 4 };
	struct gfa_frame_range fr[64];
	int n;

	cr_assert_eq(gfa_zone_set_release_policy(pool, 0, &rp), 0);
	while ((n = zone_release_take(pool, 0, fr, 64, UINT64_MAX)) > 0)
		for (int i = 0; i < n; i++) {
			cr_assert_eq(madvise(gfa_pfn_to_addr(pool, fr[i].pfn),
					     fr[i].nr * GFA_FRAME_SIZE, MADV_REMOVE),
				     0);
			cr_assert_eq(zone_release_done(pool, fr[i].pfn, fr[i].nr, true), 0);
		}
}

static long memfd_blocks(const struct gfa_backing *b)
{
	struct stat sb;

	cr_assert_eq(fstat(gfa_backing_zone_fd(b, 0), &sb), 0);
	return (long)sb.st_blocks;
}

/*
 * A 16 MiB guest that wrote all its RAM stops and starts again at once: the restart
 * zeroed `zeroed` frames itself, reads zero, and faulted no host memory in (the memfd's
 * st_blocks does not grow).
 */
static void restart_zeroes(struct gfa_pool *pool, struct gfa_backing *b, uint64_t zeroed)
{
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g = gfa_guest_create(pool, b, &cfg);
	struct gfa_guest_stat st;
	uint64_t *w;
	long blocks;

	cr_assert_not_null(g);
	memset(gfa_guest_hva(g), 0x5a, 16 * MiB);
	blocks = memfd_blocks(b);
	gfa_guest_destroy(g); /* its 16 MiB free at once, dirty, behind the clean ones */
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g);
	cr_assert_eq(gfa_guest_stat(g, &st), 0);
	cr_assert_eq(st.zeroed_frames, zeroed, "the restart zeroed %lu frames itself, not %lu",
		     (unsigned long)st.zeroed_frames, (unsigned long)zeroed);
	w = gfa_guest_hva(g);
	for (uint64_t i = 0; i < 16 * MiB / 8; i += 509)
		cr_assert_eq(w[i], 0, "stale data at %lu", (unsigned long)(i * 8));
	cr_assert_leq(memfd_blocks(b), blocks, "the restart faulted host memory in");
	gfa_guest_destroy(g);
	zdone(pool, b);
}

/*
 * A restart right after a stop, with the stopped guest's dirty blocks free at the tail
 * of the lists for the zeroer, part of the free memory given back to the host and
 * enough populated clean 2 MiB blocks left: the start takes those, zeroes nothing in
 * its own thread and faults nothing in.
 */
Test(guest_zero, a_restart_takes_populated_clean_blocks_while_the_dirty_ones_wait)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 128 * MiB, true);
	struct gfa_zone_stat zs;

	release_down_to(pool, 48 * MiB / GFA_FRAME_SIZE);
	cr_assert_eq(gfa_zone_stat(pool, 0, &zs), 0);
	cr_assert_eq(zs.nr_released, 80 * MiB / GFA_FRAME_SIZE);
	restart_zeroes(pool, b, 0);
}

/*
 * Without clean populated blocks left, a restart takes the stopped guest's dirty ones
 * (at the tail of the lists, behind the released blocks) and zeroes them itself before
 * it takes a released block: zeroing costs less than faulting host memory in.  No
 * zeroer here, so the count is exact.
 */
Test(guest_zero, a_restart_takes_dirty_blocks_before_released_ones)
{
	struct gfa_pool *pool;
	struct gfa_backing *b = zbacking(&pool, 64 * MiB, false);

	release_down_to(pool, 16 * MiB / GFA_FRAME_SIZE);
	restart_zeroes(pool, b, 16 * MiB / GFA_FRAME_SIZE);
}
