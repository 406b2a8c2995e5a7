// SPDX-License-Identifier: MIT
/*
 * The balloon: a virtio-balloon device model hands gfa guest-physical ranges the guest
 * gave up (inflate) or wants back (deflate).  Inflation frees the frames and kicks the
 * host-return thread; the calling thread never waits for the host.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include "vmm/backing_internal.h"
#include "vmm/guest_internal.h"
#include "vmm/gpa_ranges.h"
#include "allocator/layers.h"

/*
 * Shape checks shared by inflate and deflate: a list (even an empty one), aligned,
 * inside, pairwise disjoint.  Argument errors with an allocator meaning (EFAULT, EINVAL,
 * ERANGE) are counted in the pool's err_* counters.
 */
static int check_shape(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	if (!g)
		return -EFAULT;
	if (!r)
		return pool_count_error(g->pool, GFA_EFAULT);
	return n ? pool_count_error(g->pool, guest_ranges_check(g, r, n)) : 0;
}

/* A copy of a checked list, its gpas made relative to the window's base (the gfns of
 * vmm/guest_internal.h), or NULL (-ENOMEM). */
static struct gfa_gpa_range *ranges_rebased(const struct gfa_guest *g,
					    const struct gfa_gpa_range *r, unsigned int n)
{
	struct gfa_gpa_range *m = malloc(n * sizeof(*m) + 1);

	for (unsigned int i = 0; m && i < n; i++)
		m[i] = (struct gfa_gpa_range){ r[i].gpa - g->base, r[i].len };
	return m;
}

/* Every frame of every range backed (want_backed) or ballooned out (!want_backed)? */
static int check_state(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
		       bool want_backed)
{
	for (unsigned int i = 0; i < n; i++)
		for (uint64_t gfn = r[i].gpa >> GFA_FRAME_SHIFT;
		     gfn < (r[i].gpa + r[i].len) >> GFA_FRAME_SHIFT; gfn++)
			if ((guest_pfn(g, gfn) != NO_PFN) != want_backed)
				return want_backed ? -EALREADY : -ENOENT;
	return 0;
}

/* The head gfn of the block covering gfn. */
static uint64_t block_head(struct gfa_guest *g, uint64_t gfn)
{
	while (guest_order(g, gfn) == NOT_HEAD)
		gfn--;
	return gfn;
}

/* Split the block at head so that [lo, hi) is made of whole blocks: 0 or -ENOMEM (no
 * room for the range's per-4 KiB detail; nothing changed). */
static int split_around(struct gfa_guest *g, uint64_t head, uint64_t lo, uint64_t hi)
{
	unsigned int order = guest_order(g, head);
	uint64_t end = head + guest_block_frames(g, head);
	int err;

	if (head >= lo && end <= hi)
		return 0;
	err = guest_range_split(g, head);
	if (err)
		return err;
	/* order-0 pieces: simple, and a balloon page is 4 KiB anyway */
	/* lock kept: a mover only tries it (guest_migrate), refuses and puts back */
	while ((err = gfa_block_split(g->pool, guest_pfn(g, head), order, g->id, 0)) == GFA_EBUSY)
		sched_yield();
	GFA_BUG_ON(err); /* the guest's own block: any other refusal is gfa's bug */
	guest_record_split(g, head, order);
	return 0;
}

/*
 * The guest window over [lo, hi) reads zero and maps no frame any more.  0, or -errno
 * when the mmap fails (vm.max_map_count: replacing part of a block's mapping takes two
 * more VMAs), and then the window still maps the frames.
 */
static int unmap_window(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	if (hi > lo && g->lazy)
		return guest_placeholder(g, lo, hi); /* lazy again: the next touch takes
							 * a fresh zeroed block */
	if (hi > lo &&
	    mmap(g->win + (lo << GFA_FRAME_SHIFT), (hi - lo) << GFA_FRAME_SHIFT,
		 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		 -1, 0) == MAP_FAILED)
		return -errno;
	return 0;
}

/*
 * Map the guest's blocks over [lo, hi) again (undoing unmap_window).  A block whose
 * mapping fails too (the same map limit) is ballooned after all: its window is
 * anonymous already, and a guest that owned a frame it no longer maps would write
 * past it (and a move would copy the stale frame over its writes).  Returns the frames
 * so ballooned.
 */
static uint64_t remap_window(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	uint64_t taken = 0;

	for (uint64_t gfn = lo, n; gfn < hi; gfn += n) {
		unsigned int order = guest_order(g, gfn);

		n = guest_block_frames(g, gfn); /* (before a release makes each gfn a hole) */
		if (guest_pfn(g, gfn) == NO_PFN ||
		    !guest_map(g, gfn, guest_pfn(g, gfn), (unsigned int)order))
			continue;
		fprintf(stderr, "gfa: balloon: cannot map gfn %lu back (%s): ballooned\n",
			(unsigned long)gfn, strerror(errno));
		guest_release_block(g, gfn);
		taken += n;
	}
	return taken;
}

/* Split the end blocks so [lo, hi) is whole blocks, then unmap it (frames kept). */
static int unmap_range(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	int err = split_around(g, block_head(g, lo), lo, hi);

	if (!err)
		err = split_around(g, block_head(g, hi - 1), lo, hi);
	return err ? err : unmap_window(g, lo, hi);
}

/* Free every block of [lo, hi), already unmapped, punched out of the memfd first while
 * no host return runs to do it (guest_release_to_host); returns the frames freed. */
static uint64_t release_range(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	uint64_t taken = 0;

	for (uint64_t gfn = lo; gfn < hi;) {
		uint64_t size = guest_block_frames(g, gfn);

		g->st.balloon_punched_frames += guest_release_to_host(g, gfn) ? size : 0;
		taken += size;
		gfn += size;
	}
	return taken;
}

/* Free every backed run of [lo, hi) as inflate does, lazy pages passed over (they have
 * nothing to give); a lazy guest's window over it is the placeholder again. */
static int discard_range(struct gfa_guest *g, uint64_t lo, uint64_t hi, uint64_t *taken)
{
	int err = 0;

	for (uint64_t a = lo, b; !err && a < hi; a = b) {
		bool backed = guest_pfn(g, a) != NO_PFN;

		for (b = a + 1; b < hi && (guest_pfn(g, b) != NO_PFN) == backed; b++)
			;
		if (!backed)
			continue;
		err = unmap_range(g, a, b);
		if (!err)
			*taken += release_range(g, a, b);
	}
	return err;
}

/* How long deflate waits for frames in flight to the host before GFA_ENOMEM. */
#define DEFLATE_WAIT_MS 2000

#define RANGE_LO(r) ((r)->gpa >> GFA_FRAME_SHIFT)
#define RANGE_HI(r) (((r)->gpa + (r)->len) >> GFA_FRAME_SHIFT)

/*
 * Take the frames of ranges r[0..n) from the guest.  Every window is unmapped before
 * any frame is freed (a frame freed first could be another owner's while this window
 * still maps it), so a failed unmap can still be undone: 0 or -errno with the earlier
 * ranges mapped again, except blocks that could not be (ballooned, in *taken).
 */
static int inflate_ranges(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
			  uint64_t *taken)
{
	for (unsigned int i = 0; i < n; i++) {
		int err = unmap_range(g, RANGE_LO(&r[i]), RANGE_HI(&r[i]));

		if (err) {
			while (i--)
				*taken += remap_window(g, RANGE_LO(&r[i]), RANGE_HI(&r[i]));
			return err;
		}
	}
	for (unsigned int i = 0; i < n; i++)
		*taken += release_range(g, RANGE_LO(&r[i]), RANGE_HI(&r[i]));
	return 0;
}

int64_t gfa_balloon_inflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	uint64_t taken = 0, lazy = 0;
	int err = check_shape(g, r, n);

	if (err)
		return err;
	struct gfa_gpa_range *m = ranges_rebased(g, r, n);
	unsigned int k = 0;

	if (!m)
		return -ENOMEM;
	/* virtio-balloon hands over pages: merge adjacent ones into runs (one split and one
	 * remap per run, not per page) */
	qsort(m, n, sizeof(*m), gpa_range_cmp);
	for (unsigned int i = 0; i < n; i++) {
		if (k && m[k - 1].gpa + m[k - 1].len == m[i].gpa)
			m[k - 1].len += m[i].len;
		else
			m[k++] = m[i];
	}
	err = guest_lock_any_thread(g);
	if (err) {
		free(m);
		return err;
	}
	/* a lazy guest's balloon page may never have been touched: nothing to take there */
	err = g->lazy ? 0 : check_state(g, m, k, true);
	for (unsigned int i = 0; !err && i < k; i++)
		if (guest_span_pinned(g, m[i].gpa, m[i].len))
			err = -EBUSY; /* a device may write it behind the page tables */
	if (!err && !g->lazy)
		err = inflate_ranges(g, m, k, &taken);
	/* (counted whole: deflate gives the whole range back) */
	for (unsigned int i = 0; !err && g->lazy && i < k; i++) {
		err = discard_range(g, RANGE_LO(&m[i]), RANGE_HI(&m[i]), &taken);
		lazy += err ? 0 : RANGE_HI(&m[i]) - RANGE_LO(&m[i]);
	}
	free(m);
	g->st.ballooned_frames += g->lazy ? lazy : taken;
	pthread_mutex_unlock(&g->lock);
	if (err)
		return err;
	gfa_backing_kick_host_return(g->b);
	backing_lease_trim(g->b); /* a host pool client gives whole blocks back */
	return (int64_t)taken;
}

/*
 * Back [lo, hi) with the largest aligned blocks.  On failure undo and say so; should
 * the window not unmap for the undo, the blocks taken stay the guest's (*kept frames).
 */
static int deflate_range(struct gfa_guest *g, uint64_t lo, uint64_t hi, uint64_t *kept)
{
	for (uint64_t gfn = lo; gfn < hi;) {
		unsigned int order = g->small_only ? GFA_PAGEBLOCK_ORDER - 1 : GFA_PAGEBLOCK_ORDER;
		int err;

		while (order > 0 && ((gfn & ((1UL << order) - 1)) || gfn + (1UL << order) > hi))
			order--;
		/* largest first; only the last resort (order 0) may compact */
		while ((err = guest_take(g, NULL, gfn, order, order ? GFA_ALLOC_NOCOMPACT : 0,
					 true)) &&
		       order)
			order--;
		if (err) {
			if (unmap_window(g, lo, gfn)) /* before the frees, as in inflate */
				*kept += gfn - lo;
			else
				release_range(g, lo, gfn);
			return err;
		}
		gfn += 1UL << order;
	}
	return 0;
}

/* Frames the rebased ranges cover (a host pool client leases them before a deflate). */
static uint64_t deflate_frames(const struct gfa_gpa_range *r, unsigned int n)
{
	uint64_t f = 0;

	for (unsigned int i = 0; i < n; i++)
		f += RANGE_HI(&r[i]) - RANGE_LO(&r[i]);
	return f;
}

/*
 * A lazy guest's deflate takes no frame: the ranges are lazy, or touched again since
 * (a first touch took their frames), and either way the guest may use them.  Returns
 * the frames the ranges hold.
 */
static int64_t deflate_lazy(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	uint64_t given = deflate_frames(r, n);

	g->st.ballooned_frames -= given < g->st.ballooned_frames ? given : g->st.ballooned_frames;
	return (int64_t)given;
}

/* Deflate checked, rebased ranges, all or nothing (g->lock taken here). */
static int64_t deflate_rebased(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	uint64_t given = 0, kept = 0;
	unsigned int done = 0;
	int err = guest_lock_any_thread(g);

	if (err)
		return err;
	if (g->lazy) {
		int64_t ret = deflate_lazy(g, r, n);

		pthread_mutex_unlock(&g->lock);
		return ret;
	}
	err = check_state(g, r, n, false);
	for (; done < n && !err; done++) {
		err = deflate_range(g, RANGE_LO(&r[done]), RANGE_HI(&r[done]), &kept);
		if (!err)
			given += RANGE_HI(&r[done]) - RANGE_LO(&r[done]);
	}
	if (err && done > 1) {
		/* all or nothing: balloon the ranges that were deflated again (those the
		 * window cannot be unmapped for stay the guest's) */
		uint64_t taken = 0;

		if (inflate_ranges(g, r, done - 1, &taken))
			kept += given - taken;
		given = 0;
	}
	GFA_BUG_ON(g->st.ballooned_frames < given + kept); /* never below 0 */
	g->st.ballooned_frames -= given + kept;
	pthread_mutex_unlock(&g->lock);
	return err ? err : (int64_t)given;
}

/* Frames of the guest's zone in flight to or from the host (a host return's release or
 * populate; a scrub's frames are waited for by the allocation itself). */
static uint64_t zone_in_flight(struct gfa_guest *g)
{
	struct gfa_zone_stat zs;

	if (gfa_zone_stat(g->pool, g->zone, &zs))
		return 0;
	return zs.nr_inflight - zs.nr_scrubbing;
}

int64_t gfa_balloon_deflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	struct gfa_gpa_range *m;
	int64_t ret;
	int err = check_shape(g, r, n);

	if (err)
		return err;
	m = ranges_rebased(g, r, n);
	if (!m)
		return -ENOMEM;
	err = backing_lease_want(g->b, g->zone, deflate_frames(m, n));
	if (err) {
		backing_lease_done(g->b, g->zone, deflate_frames(m, n));
		free(m);
		return err;
	}
	/* a host return holds frames off the lists while the host takes them: they come
	 * back within a pass, so wait for them rather than fail a guest that asked for
	 * memory it was promised (a ballooned page's frames may be among them) */
	for (unsigned int waited = 0;; waited++) {
		ret = deflate_rebased(g, m, n);
		if (ret != -ENOMEM || waited >= DEFLATE_WAIT_MS || !zone_in_flight(g))
			break;
		usleep(1000);
	}
	backing_lease_done(g->b, g->zone, deflate_frames(m, n));
	free(m);
	return ret;
}

int64_t guest_discard(struct gfa_guest *g, uint64_t gpa, uint64_t len)
{
	uint64_t taken = 0;
	int err = guest_gpa_check(g, &gpa, len);

	if (err)
		return err;
	pthread_mutex_lock(&g->lock);
	err = discard_range(g, gpa >> GFA_FRAME_SHIFT, (gpa + len) >> GFA_FRAME_SHIFT, &taken);
	pthread_mutex_unlock(&g->lock);
	if (taken)
		gfa_backing_kick_host_return(g->b);
	return err ? err : (int64_t)taken;
}

/* Each range on its own: res[i] its frames or its error; the frames in all. */
static int64_t balloon_each(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
			    int64_t *res, bool deflate)
{
	int64_t total = 0;

	if (!g)
		return GFA_EFAULT;
	if (!r || !res)
		return pool_count_error(g->pool, GFA_EFAULT);
	for (unsigned int i = 0; i < n; i++) {
		res[i] = deflate ? gfa_balloon_deflate(g, &r[i], 1) :
				   gfa_balloon_inflate(g, &r[i], 1);
		total += res[i] > 0 ? res[i] : 0;
	}
	return total;
}

int64_t gfa_balloon_inflate_each(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
				 int64_t *res)
{
	return balloon_each(g, r, n, res, false);
}

int64_t gfa_balloon_deflate_each(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
				 int64_t *res)
{
	return balloon_each(g, r, n, res, true);
}
