/*
 * Host memory a guest never touched stays untouched: frees mark only what the memfd
 * holds, deflate and collapse fault no hole in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "tests/test_util.h"
#include "vmm/backing_internal.h"

#define MiB (1UL << 20)

struct uhost {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr;
};

/* An unpopulated backing: the memfd holds only what is written (and the balloon leaves
 * it there, for a host return to release, so the dirty marks show). */
static struct uhost uhost_new(uint64_t bytes)
{
	struct gfa_backing_config bc = { .no_zero_on_stop = true, .no_balloon_punch = true };
	struct uhost h = { .pool = tu_pool(bytes >> GFA_FRAME_SHIFT) };

	h.b = gfa_backing_create(h.pool, &bc);
	cr_assert_not_null(h.b, "backing: %s", strerror(errno));
	return h;
}

static void uhost_check(struct uhost *h)
{
	char msg[256];

	cr_assert_eq(gfa_backing_check(h->b, msg, sizeof(msg)), 0, "%s", msg);
}

static void uhost_done(struct uhost *h)
{
	gfa_host_return_stop(h->hr);
	uhost_check(h);
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

/* What the zone's memfd holds, in bytes. */
static int64_t host_bytes(struct uhost *h)
{
	struct stat st;

	cr_assert_eq(fstat(gfa_backing_zone_fd(h->b, 0), &st), 0);
	return (int64_t)st.st_blocks * 512;
}

static void write_words(uint64_t *w, uint64_t bytes, uint64_t seed)
{
	for (uint64_t i = 0; i < bytes / 8; i++)
		w[i] = seed ^ i;
}

/* Words of [lo, hi) bytes of w that differ from write_words()'s. */
static uint64_t bad_words(const uint64_t *w, uint64_t lo, uint64_t hi, uint64_t seed)
{
	uint64_t bad = 0;

	for (uint64_t i = lo / 8; i < hi / 8; i++)
		bad += w[i] != (seed ^ i);
	return bad;
}

/*
 * A 512 MiB guest in a 1 GiB zone writes 32 MiB, balloons all but its first 16 MiB,
 * takes it back and is collapsed: the host holds what was written, and no more.
 */
static void balloon_and_collapse(bool host_return)
{
	struct uhost h = uhost_new(1024 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 512 * MiB, .small_only = true };
	struct gfa_gpa_range r = { 16 * MiB, 496 * MiB };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	uint64_t *w;
	int64_t before, after;
	int collapsed;

	cr_assert_not_null(g, "guest: %s", strerror(errno));
	w = gfa_guest_hva(g);
	write_words(w, 32 * MiB, 0x5eed);
	if (host_return) {
		/* no populated reserve: the host return would fill one back in (by design),
		 * and this measures what the guest's frames cost */
		struct gfa_release_policy rp = { .min_empty_frac = 4 };

		cr_assert_eq(gfa_zone_set_release_policy(h.pool, 0, &rp), 0);
		h.hr = gfa_host_return_start(h.pool, h.b, NULL);
		cr_assert_not_null(h.hr);
		cr_assert_eq(gfa_host_return_quiesce(h.hr, 20000), 0);
	}
	before = host_bytes(&h);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), (int64_t)(r.len >> GFA_FRAME_SHIFT));
	cr_assert_eq(gfa_balloon_deflate(g, &r, 1), (int64_t)(r.len >> GFA_FRAME_SHIFT));
	if (h.hr)
		cr_assert_eq(gfa_host_return_quiesce(h.hr, 20000), 0);
	cr_log_info("after the deflate: %+.1f MB", (double)(host_bytes(&h) - before) / 1e6);
	collapsed = gfa_guest_collapse(g, UINT_MAX);
	if (h.hr)
		cr_assert_eq(gfa_host_return_quiesce(h.hr, 20000), 0);
	after = host_bytes(&h);
	if (h.hr) {
		struct gfa_host_return_stat st;

		gfa_host_return_stat(h.hr, &st);
		cr_log_info("released %lu MiB, populated %lu MiB, scrubbed %lu MiB",
			    (unsigned long)(st.bytes_released / MiB),
			    (unsigned long)(st.bytes_populated / MiB),
			    (unsigned long)(st.bytes_scrubbed / MiB));
	}
	cr_log_info("host return %s: %d ranges collapsed, memfd %ld -> %ld MiB (%+.1f MB)",
		    host_return ? "on" : "off", collapsed, (long)(before / MiB),
		    (long)(after / MiB), (double)(after - before) / 1e6);
	cr_expect_gt(collapsed, 0, "collapse had nothing to do");
	cr_expect_eq(bad_words(w, 0, 16 * MiB, 0x5eed), 0, "what was not ballooned is intact");
	cr_expect_leq(after - before, (int64_t)16000000, "the host grew by %ld bytes",
		      (long)(after - before));
	/* what the moves and the balloon left behind is what the guest wrote, at most */
	cr_expect_leq(gfa_backing_nr_dirty(h.b), 32 * MiB >> GFA_FRAME_SHIFT, "%lu frames dirty",
		      (unsigned long)gfa_backing_nr_dirty(h.b));
	gfa_guest_destroy(g);
	uhost_done(&h);
}

Test(untouched, balloon_and_collapse_leave_the_host_as_it_was, .timeout = 120)
{
	balloon_and_collapse(false);
}

Test(untouched, balloon_and_collapse_with_host_return, .timeout = 120)
{
	balloon_and_collapse(true);
}

/* A block of `order` frames for owner 1; the owner has written none of it. */
static uint64_t take_block(struct uhost *h, unsigned int order)
{
	int64_t pfn = gfa_backing_alloc(h->b, NULL, 0, order, GFA_MT_MOVABLE, 1, GFA_BACKING_ZERO);

	cr_assert_geq(pfn, 0);
	return (uint64_t)pfn;
}

/* The owner writes nr frames from pfn. */
static void owner_writes(struct uhost *h, uint64_t pfn, uint64_t nr, int byte)
{
	memset(gfa_pfn_to_addr(h->pool, pfn), byte, nr << GFA_FRAME_SHIFT);
}

Test(untouched, a_free_marks_only_the_frames_written)
{
	struct uhost h = uhost_new(16 * MiB);
	uint64_t never = take_block(&h, 4), some = take_block(&h, 4);

	owner_writes(&h, some + 1, 1, 0x11);
	owner_writes(&h, some + 9, 3, 0x22);
	cr_assert_eq(gfa_backing_free(h.b, NULL, never, 4, 1), 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 0, "a block never written is not dirty");
	cr_assert_eq(gfa_backing_free(h.b, NULL, some, 4, 1), 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 4, "the 4 frames written are dirty");
	cr_assert(gfa_backing_block_dirty(h.b, some + 1, 0));
	cr_assert(gfa_backing_block_dirty(h.b, some + 9, 1));
	cr_assert(gfa_backing_block_dirty(h.b, some + 11, 0));
	cr_assert_not(gfa_backing_block_dirty(h.b, some, 0));
	cr_assert_not(gfa_backing_block_dirty(h.b, some + 12, 2));
	uhost_check(&h);
	uhost_done(&h);
}

Test(untouched, a_ballooned_block_is_dirty_only_if_the_guest_wrote_it)
{
	struct uhost h = uhost_new(16 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 4 * MiB };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_gpa_range all = { 0, 4 * MiB };

	cr_assert_not_null(g, "guest: %s", strerror(errno));
	write_words(gfa_guest_hva(g), 2 * MiB, 3); /* the first block only */
	cr_assert_eq(gfa_balloon_inflate(g, &all, 1), (int64_t)(4 * MiB >> GFA_FRAME_SHIFT));
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 2 * MiB >> GFA_FRAME_SHIFT,
		     "%lu frames dirty: the block never written must be clean",
		     (unsigned long)gfa_backing_nr_dirty(h.b));
	uhost_check(&h);
	gfa_guest_destroy(g);
	uhost_done(&h);
}

/* Does the memfd hold any of nr frames from pfn? */
static bool holds_any(struct uhost *h, uint64_t pfn, uint64_t nr)
{
	int fd;
	uint64_t off;
	off_t data;

	cr_assert_eq(gfa_pfn_to_fd(h->pool, pfn, &fd, &off), 0);
	data = lseek(fd, (off_t)off, SEEK_DATA);
	return data >= 0 && (uint64_t)data < off + (nr << GFA_FRAME_SHIFT);
}

/*
 * Do two order-9 blocks read the same?  Read with pread(), which reads a shmem hole as
 * zero without allocating it; a read through a mapping would fault the hole in.
 */
static bool same_blocks(struct uhost *h, uint64_t a, uint64_t b)
{
	static char ba[GFA_FRAME_SIZE << 9], bb[GFA_FRAME_SIZE << 9];
	int fd;
	uint64_t oa, ob;

	cr_assert_eq(gfa_pfn_to_fd(h->pool, a, &fd, &oa), 0);
	cr_assert_eq(gfa_pfn_to_fd(h->pool, b, &fd, &ob), 0);
	cr_assert_eq(pread(fd, ba, sizeof(ba), (off_t)oa), (ssize_t)sizeof(ba));
	cr_assert_eq(pread(fd, bb, sizeof(bb), (off_t)ob), (ssize_t)sizeof(bb));
	return !memcmp(ba, bb, sizeof(ba));
}

#define HALF    (GFA_PAGEBLOCK_FRAMES / 2)
#define QUARTER (GFA_PAGEBLOCK_FRAMES / 4)

/*
 * A 2 MiB source written in its first and third quarters; one target full of another
 * owner's data (dirty), one never written.  Both read as the source afterwards, and
 * the copy populates neither more than the source's data.
 */
Test(untouched, copy_block_copies_data_and_leaves_holes_alone)
{
	struct uhost h = uhost_new(16 * MiB);
	uint64_t src = take_block(&h, 9), dirty = take_block(&h, 9), hole = take_block(&h, 9);
	uint64_t dirty_before;
	int64_t bytes;

	owner_writes(&h, src, QUARTER, 0x5a);
	owner_writes(&h, src + HALF, QUARTER, 0xa5);
	owner_writes(&h, dirty, GFA_PAGEBLOCK_FRAMES, 0xee);
	gfa_backing_mark_dirty(h.b, dirty, 9);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), GFA_PAGEBLOCK_FRAMES);

	cr_assert_eq(backing_copy_block(h.b, src, dirty, 9), 0);
	cr_assert(same_blocks(&h, src, dirty), "the dirty target reads as the source");
	/* its frames under the source's holes were zeroed, so they are clean now */
	cr_assert_eq(gfa_backing_nr_dirty(h.b), HALF);
	cr_assert_not(gfa_backing_block_dirty(h.b, dirty + QUARTER, 7));
	cr_assert_not(gfa_backing_block_dirty(h.b, dirty + HALF + QUARTER, 7));

	bytes = host_bytes(&h);
	dirty_before = gfa_backing_nr_dirty(h.b);
	cr_assert_eq(backing_copy_block(h.b, src, hole, 9), 0);
	cr_assert_not(holds_any(&h, hole + QUARTER, QUARTER), "a source hole was copied in");
	cr_assert_not(holds_any(&h, hole + HALF + QUARTER, QUARTER));
	cr_assert_eq(host_bytes(&h) - bytes, (int64_t)(HALF << GFA_FRAME_SHIFT),
		     "the copy populated more than the source's data");
	cr_assert_eq(gfa_backing_nr_dirty(h.b), dirty_before, "the copy marks nothing");
	cr_assert(same_blocks(&h, src, hole), "the unwritten target reads as the source");
	cr_assert_not(holds_any(&h, hole + QUARTER, QUARTER), "reading it populated nothing");
	uhost_check(&h);
	uhost_done(&h);
}

Test(untouched, copy_block_refuses_what_is_no_pair_of_blocks)
{
	struct uhost h = uhost_new(16 * MiB);
	uint64_t src = take_block(&h, 9), dst = take_block(&h, 9);

	cr_assert_eq(backing_copy_block(NULL, src, dst, 9), -EFAULT);
	cr_assert_eq(backing_copy_block(h.b, src, src, 9), -EINVAL, "onto itself");
	cr_assert_eq(backing_copy_block(h.b, src + 1, dst, 9), -EINVAL, "misaligned");
	cr_assert_eq(backing_copy_block(h.b, src, 16 * MiB >> GFA_FRAME_SHIFT, 9), -EINVAL,
		     "past the zone");
	cr_assert_eq(backing_copy_block(h.b, src, dst, GFA_MAX_ORDER + 1), -EINVAL);
	cr_assert_eq(backing_copy_block(h.b, 0 - 512ULL, dst, 9), -EINVAL, "wraps");
	uhost_done(&h);
}
