// SPDX-License-Identifier: MIT
/*
 * A guest's window is mapped one run of contiguous blocks at a time (vmm/guest.c):
 * one mapping on a clean pool; the mapping stays right through moves, collapse and
 * balloon holes (guest data checked after each); a guest whose blocks are all
 * scattered works up to vm.max_map_count and fails beyond it with an error naming it.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "tests/host_util.h"

#define MiB (1UL << 20)

static struct tu_host rhost_new(uint64_t bytes)
{
	const struct gfa_backing_config bc = { 0 };

	return tu_host_new(bytes, &bc, 0);
}

static void rhost_done(struct tu_host *h)
{
	cr_assert_eq(gfa_backing_zero_quiesce(h->b, 30000), 0);
	tu_host_done(h);
}

/* One word per 4 KiB: gpa ^ seed, or zero where ballooned (hole[gfn] set). */
static void fill(struct gfa_guest *g, uint64_t seed)
{
	char *w = gfa_guest_hva(g);

	for (uint64_t gpa = 0; gpa < gfa_guest_size(g); gpa += GFA_FRAME_SIZE)
		*(uint64_t *)(w + gpa + 8 * ((gpa >> 12) % 512)) = gpa ^ seed;
}

static uint64_t check(struct gfa_guest *g, uint64_t seed, const bool *hole)
{
	const char *w = gfa_guest_hva(g);
	uint64_t bad = 0;

	for (uint64_t gpa = 0; gpa < gfa_guest_size(g); gpa += GFA_FRAME_SIZE) {
		uint64_t v = *(const uint64_t *)(w + gpa + 8 * ((gpa >> 12) % 512));

		bad += v != (hole && hole[gpa >> 12] ? 0 : gpa ^ seed);
	}
	return bad;
}

Test(guest_runs, a_clean_pool_gives_a_128_mib_guest_one_mapping)
{
	struct tu_host h = rhost_new(256 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 128 * MiB };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_guest_stat st;

	cr_assert_not_null(g);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 64);
	cr_assert_eq(st.window_mappings, 1, "%lu mappings", (unsigned long)st.window_mappings);
	fill(g, 0x1234);
	cr_assert_eq(check(g, 0x1234, NULL), 0);
	gfa_guest_destroy(g);
	rhost_done(&h);
}

/*
 * The next guest after a stop: its blocks come back in whatever order the frees and the
 * zeroer left on the lists (its returns put the last first), and the guest takes them
 * in pfn order all the same, so it maps in one run too (it made 32 mappings at 128 MiB,
 * 512 at 2 GiB, one per 4 MiB).  Its data is where it was written.
 */
Test(guest_runs, a_guest_after_a_stop_and_its_zeroing_gets_one_mapping_too, .timeout = 60)
{
	struct tu_host h = rhost_new(256 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 128 * MiB };
	struct gfa_guest_stat st;

	for (int round = 0; round < 3; round++) {
		struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);

		cr_assert_not_null(g);
		gfa_guest_stat(g, &st);
		cr_assert_eq(st.huge_ranges, 64);
		cr_assert_eq(st.window_mappings, 1, "round %d: %lu mappings", round,
			     (unsigned long)st.window_mappings);
		fill(g, 0x1234 + (uint64_t)round);
		cr_assert_eq(check(g, 0x1234 + (uint64_t)round, NULL), 0);
		gfa_guest_destroy(g);
		cr_assert_eq(gfa_backing_zero_quiesce(h.b, 30000), 0);
	}
	rhost_done(&h);
}

/*
 * Balloon holes, moves (compaction) and collapse after a one-run start: the guest's data
 * is where it was after each, and ballooned pages read zero.
 */
Test(guest_runs, the_mapping_survives_balloon_holes_moves_and_collapse, .timeout = 60)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_guest_stat st;
	struct gfa_gpa_range q[64];
	static bool hole[16 * MiB / 4096];
	int r;

	cr_assert_not_null(g);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.window_mappings, 1);
	fill(g, 0xfeed);
	/* every 8th page of the range at 12 MiB ballooned: holes inside an order-9 block */
	for (unsigned int i = 0; i < 64; i++) {
		uint64_t gpa = 12 * MiB + (uint64_t)i * 8 * 4096;

		q[i] = (struct gfa_gpa_range){ gpa, 4096 };
		hole[gpa >> 12] = true;
	}
	cr_assert_eq(gfa_balloon_inflate(g, q, 64), 64);
	cr_assert_eq(check(g, 0xfeed, hole), 0, "after inflate");
	cr_assert_eq(gfa_balloon_deflate(g, q, 64), 64);
	cr_assert_eq(check(g, 0xfeed, hole), 0, "after deflate (deflated pages read zero)");
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.small_ranges, 1, "the ballooned range is small blocks now");
	cr_assert_eq(st.blocks, 7 + 512);

	/* the guest sits at the bottom of the pool: full compaction moves its small
	 * blocks to the free frames at the top */
	r = gfa_compact_zone(h.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_geq(r, 0, "compaction: %s", strerror(-r));
	gfa_guest_stat(g, &st);
	cr_assert_gt(st.moves, 0, "compaction moved nothing");
	cr_assert_eq(check(g, 0xfeed, hole), 0, "after %lu moves", (unsigned long)st.moves);

	cr_assert_eq(gfa_guest_collapse(g, 8), 1);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 8);
	cr_assert_eq(st.small_ranges, 0);
	cr_assert_eq(check(g, 0xfeed, hole), 0, "after collapse");
	gfa_guest_destroy(g);
	rhost_done(&h);
}

/* ---- vm.max_map_count ---- */

#define DEFAULT_MAX_MAP_COUNT 65530L
#define MAX_MAP_COUNT         "/proc/sys/vm/max_map_count"
static long saved_max_map_count = -1;

static long read_long(const char *path)
{
	long v = -1;
	FILE *f = fopen(path, "r");

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int ok;

	if (!f)
		return -1;
	ok = fprintf(f, "%ld\n", v) > 0;
	return fclose(f) || !ok ? -1 : 0;
}

static long self_mappings(void)
{
	char line[512];
	long n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		n++;
	if (f)
		fclose(f);
	return n;
}

/* What to put back: never a value another run of this test left lowered (two suites at
 * once on one host save each other's), so at least the kernel's default. */
static long saved_limit(void)
{
	long v = read_long(MAX_MAP_COUNT);

	return v > 0 && v < DEFAULT_MAX_MAP_COUNT ? DEFAULT_MAX_MAP_COUNT : v;
}

static int map_count_lock = -1;

static void restore_max_map_count(void)
{
	if (saved_max_map_count > 0)
		write_long(MAX_MAP_COUNT, saved_max_map_count);
	saved_max_map_count = -1;
	if (map_count_lock >= 0)
		close(map_count_lock); /* others' creates may go on */
	map_count_lock = -1;
}

/* Lower the host's limit for one create (restore_max_map_count() puts it back). */
static void lower_max_map_count(long limit)
{
	map_count_lock = tu_map_count_lock(true);
	saved_max_map_count = saved_limit();
	cr_assert_eq(write_long(MAX_MAP_COUNT, limit), 0);
}

/* stderr into a file while fn runs; its text in buf */
static void capture_stderr(char *buf, size_t len, int (*fn)(void *), void *arg, int *ret)
{
	FILE *t = tmpfile();
	int saved = dup(2);
	size_t n;

	cr_assert(t && saved >= 0);
	fflush(stderr);
	dup2(fileno(t), 2);
	*ret = fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(t);
	n = fread(buf, 1, len - 1, t);
	buf[n] = '\0';
	fclose(t);
}

struct create_args {
	struct tu_host *h;
	uint64_t mem;
	struct gfa_guest *g;
	int err;
};

static int create_guest(void *arg)
{
	struct create_args *a = arg;
	struct gfa_guest_config cfg = { .mem_bytes = a->mem };

	a->g = gfa_guest_create(a->h->pool, a->h->b, &cfg);
	a->err = a->g ? 0 : errno;
	return a->err;
}

/*
 * Every other order-9 block of the pool taken: a guest's blocks are all scattered and
 * each needs a mapping of its own.  With vm.max_map_count lowered (root; put back after),
 * a guest that fits under the limit works and one that does not fails with ENOMEM and
 * a message naming the limit, keeping no frame.
 */
Test(guest_runs, scattered_blocks_work_up_to_max_map_count_and_fail_beyond_it,
     .fini = restore_max_map_count, .timeout = 60)
{
	const uint64_t blocks = 1024; /* a 2 GiB sparse pool: 512 scattered free blocks */
	struct tu_host h;
	int64_t *taken = calloc(blocks, sizeof(*taken));
	struct create_args a;
	struct gfa_guest_stat st;
	char msg[2048];
	long limit, room;
	uint64_t free_before;
	int ret;

	if (geteuid()) {
		cr_skip_test("vm.max_map_count can only be lowered as root");
		return;
	}
	/* a sanitizer's runtime maps memory of its own at any time: under a lowered limit it
	 * dies before the limit is put back (the limit is the whole host's) */
	if (getenv("GFA_SANITIZER")) {
		cr_skip_test("vm.max_map_count is not lowered under %s", getenv("GFA_SANITIZER"));
		return;
	}
	h = rhost_new(blocks * 2 * MiB);
	for (uint64_t i = 0; i < blocks; i++)
		taken[i] = gfa_alloc(h.pool, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, 42, 0);
	for (uint64_t i = 0; i < blocks; i += 2)
		gfa_free(h.pool, (uint64_t)taken[i], GFA_PAGEBLOCK_ORDER, 42);
	free_before = tu_free_frames(h.pool);
	cr_assert_gt(saved_limit(), 0);
	/* room for 300 more mappings than this process has now: a 128-block guest (about
	 * 130 mappings with its reservation's edges) fits, a 400-block one cannot */
	limit = self_mappings() + 300;
	lower_max_map_count(limit);
	room = limit - self_mappings();
	cr_assert_gt(room, 200);

	a = (struct create_args){ .h = &h, .mem = 128 * 2 * MiB };
	capture_stderr(msg, sizeof(msg), create_guest, &a, &ret);
	restore_max_map_count(); /* lowered only around each create: it is the host's */
	cr_assert_not_null(a.g, "128 scattered blocks under the limit: %s (%s)", strerror(a.err),
			   msg);
	gfa_guest_stat(a.g, &st);
	cr_assert_eq(st.window_mappings, 128, "one mapping per scattered block");
	fill(a.g, 0x77);
	cr_assert_eq(check(a.g, 0x77, NULL), 0);
	gfa_guest_destroy(a.g);
	cr_assert_eq(gfa_backing_zero_quiesce(h.b, 30000), 0);

	lower_max_map_count(limit);
	a = (struct create_args){ .h = &h, .mem = 400 * 2 * MiB };
	capture_stderr(msg, sizeof(msg), create_guest, &a, &ret);
	restore_max_map_count();
	cr_assert_null(a.g, "400 scattered blocks with room for %ld mappings", room);
	cr_assert_eq(a.err, ENOMEM);
	cr_assert_not_null(strstr(msg, "vm.max_map_count"), "the error names the limit: '%s'", msg);
	cr_assert_eq(gfa_backing_zero_quiesce(h.b, 30000), 0);
	cr_assert_eq(tu_free_frames(h.pool), free_before, "a failed create keeps no frame");
	for (uint64_t i = 1; i < blocks; i += 2)
		gfa_free(h.pool, (uint64_t)taken[i], GFA_PAGEBLOCK_ORDER, 42);
	free(taken);
	rhost_done(&h);
}
