// SPDX-License-Identifier: MIT
/*
 * Moving a guest's blocks while it runs: the owner ops compaction and collapse call.
 *
 * A move holds the block's writers off, copies it, maps the new frames over the window
 * and lets the writers go.  Holding off is a write protection of just that block through
 * the guest's userfaultfd (vmm/uffd.c), or on the pause fallback the VMM's pause op.  A
 * collapse holds off its whole 2 MiB range once, copies every piece, and maps the range
 * with one mapping when the last piece is in: the window never maps a half-collapsed
 * range, and a collapse that fails midway never touched the window at all.
 *
 * g->lock serialises moves with the guest's frees; a mover only tries it (see
 * guest_migrate()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <gfa/vmm.h>
#include "vmm/backing_internal.h"
#include "vmm/guest_internal.h"
#include "common/ktime.h"
#include "allocator/layers.h"

/* Take a reference on the pause (pause_lock held): the first one pauses. */
static int guest_pause_get(struct gfa_guest *g)
{
	if (!g->ops.pause)
		return 0; /* no ops: nobody writes while gfa calls run (the config) */
	if (!g->pause_refs) {
		g->st.pauses++;
		g->pause_t0 = ktime_get_ns();
		/* before the pause: a vCPU it waits for must not wait for g->lock */
		__atomic_store_n(&g->pausing, true, __ATOMIC_RELEASE);
		if (g->ops.pause(g->ops_ctx)) {
			__atomic_store_n(&g->pausing, false, __ATOMIC_RELEASE);
			return -EBUSY;
		}
	}
	g->pause_refs++;
	return 0;
}

/* Drop one (pause_lock held): the last one resumes. */
static void guest_pause_put(struct gfa_guest *g)
{
	if (!g->pause_refs || --g->pause_refs)
		return; /* (none: the ops were forgotten meanwhile) */
	g->ops.resume(g->ops_ctx);
	__atomic_store_n(&g->pausing, false, __ATOMIC_RELEASE);
	g->st.paused_ns += ktime_get_ns() - g->pause_t0;
}

/*
 * Protect (on) or lift [gfn, gfn + nr): at once, or block by block where the kernel
 * protects within one mapping only and the range spans several (a range of small
 * blocks; each block lies inside one mapping).  0 or -errno.
 */
static int guest_protect(struct gfa_guest *g, uint64_t gfn, uint64_t nr, bool on)
{
	int err = uffd_protect(&g->uffd, guest_addr(g, gfn), nr << GFA_FRAME_SHIFT, on);

	if (err != -ENOENT)
		return err;
	err = 0;
	for (uint64_t h = gfn; h < gfn + nr; h += guest_block_frames(g, h)) {
		int e = uffd_protect(&g->uffd, guest_addr(g, h),
				     guest_block_frames(g, h) << GFA_FRAME_SHIFT, on);

		if (e && on)
			return e;
		if (e)
			err = e; /* lifting goes on: lift all that can be */
	}
	return err;
}

/* Mark, then protect, [gfn, gfn + nr): 0, or -EAGAIN with it lifted and woken again. */
static int guest_protect_begin(struct gfa_guest *g, uint64_t gfn, uint64_t nr)
{
	void *addr = guest_addr(g, gfn);

	uffd_move_mark(&g->uffd, addr, nr << GFA_FRAME_SHIFT);
	if (!guest_protect(g, gfn, nr, true))
		return 0;
	(void)guest_protect(g, gfn, nr, false);
	uffd_move_end(&g->uffd, addr, nr << GFA_FRAME_SHIFT);
	return -EAGAIN;
}

/*
 * Hold off every writer of [gfn, gfn + nr): protect it, or (the fallback) pause the
 * vCPUs, whose op must stop every thread that writes guest RAM - unless an open
 * compaction batch holds them paused already.  0, -EAGAIN (the protection failed),
 * -EBUSY (the pause op refused).
 */
static int guest_writers_stop(struct gfa_guest *g, uint64_t gfn, uint64_t nr, bool batched,
			      bool *own)
{
	int err = 0;

	*own = false;
	if (g->wp)
		return guest_protect_begin(g, gfn, nr);
	if (g->wp_only) {
		g->st.pinned_skips++; /* no userfaultfd, and no pause allowed: stays put */
		return -EBUSY;
	}
	pthread_mutex_lock(&g->pause_lock);
	if (!batched || !g->batches)
		*own = !(err = guest_pause_get(g));
	else if (!g->batch_ref && !(err = guest_pause_get(g)))
		g->batch_ref = true; /* the batch's: its end resumes */
	pthread_mutex_unlock(&g->pause_lock);
	return err;
}

/* Let the writers of [gfn, gfn + nr) go: they land in what the window maps now
 * (remapped: the new frames; else the old ones, whose protection is lifted). */
static void guest_writers_start(struct gfa_guest *g, uint64_t gfn, uint64_t nr, bool remapped,
				bool own)
{
	if (g->wp) {
		if (!remapped)
			(void)guest_protect(g, gfn, nr, false);
		uffd_move_end(&g->uffd, guest_addr(g, gfn), nr << GFA_FRAME_SHIFT);
		return;
	}
	if (!own)
		return; /* the batch's pause, or none */
	pthread_mutex_lock(&g->pause_lock);
	guest_pause_put(g);
	pthread_mutex_unlock(&g->pause_lock);
}

/* The owner ops' batch_begin/batch_end: one pause for all of a batch's moves. */
static void guest_batch_begin(void *ctx, uint64_t owner)
{
	struct gfa_guest *g = ctx;

	(void)owner;
	pthread_mutex_lock(&g->pause_lock);
	g->batches++;
	pthread_mutex_unlock(&g->pause_lock);
}

static void guest_batch_end(void *ctx, uint64_t owner)
{
	struct gfa_guest *g = ctx;

	(void)owner;
	pthread_mutex_lock(&g->pause_lock);
	if (!--g->batches && g->batch_ref) {
		g->batch_ref = false;
		guest_pause_put(g);
	}
	pthread_mutex_unlock(&g->pause_lock);
}

/* Tell the VMM's moved notifier that [gfn, +2^order) now lives at pfn: 0, or -EBUSY
 * (it refused). */
static int guest_notify_moved(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order)
{
	uint64_t off;
	int fd;

	if (!g->moved_fn)
		return 0;
	if (gfa_pfn_to_fd(g->pool, pfn, &fd, &off))
		return -EAGAIN;
	return g->moved_fn(g->moved_ctx, guest_gfn_gpa(g, gfn), GFA_FRAME_SIZE << order, fd, off) ?
		       -EBUSY :
		       0;
}

/*
 * Copy a block's data to its new frames, through the pool's mapping (the window's
 * writers are held off; the window itself is never written by gfa): only what the
 * memfd holds, so a hole the guest never touched stays a hole.  0 or -errno.
 */
static int guest_copy(struct gfa_guest *g, uint64_t src, uint64_t dst, unsigned int order)
{
	return backing_copy_block(g->b, src, dst, order);
}

/* Compaction's move of one block: hold off, copy, remap, let go. */
static int guest_move_block(struct gfa_guest *g, uint64_t gfn, uint64_t src, uint64_t dst,
			    unsigned int order)
{
	uint64_t nr = 1UL << order;
	bool own;
	int err = guest_writers_stop(g, gfn, nr, true, &own);

	if (err)
		return err;
	err = guest_copy(g, src, dst, order) ? -EAGAIN : guest_notify_moved(g, gfn, dst, order);
	if (!err && guest_map(g, gfn, dst, order))
		err = -EAGAIN;
	if (!err) {
		guest_record(g, gfn, dst, order);
		g->st.moves++;
		g->st.wp_moves += g->wp;
	}
	guest_writers_start(g, gfn, nr, !err, own);
	return err;
}

static bool guest_in_collapse(const struct gfa_guest *g, uint64_t gfn)
{
	return g->collapse_lo != NO_PFN && gfn >= g->collapse_lo &&
	       gfn < g->collapse_lo + RANGE_FRAMES;
}

/*
 * A move of a piece of the range being collapsed (its writers held off since
 * guest_collapse_range()).  Forward, into the target: copy and index it; the last piece
 * maps the whole range, and a failure there refuses it (the collapse then moves the
 * others back).  Back, after a refusal: the window still maps the piece's old frames,
 * which still hold its data: only the index goes back.
 */
static int guest_collapse_piece(struct gfa_guest *g, uint64_t gfn, uint64_t src, uint64_t dst,
				unsigned int order)
{
	uint64_t lo = g->collapse_lo;
	int err;

	if (g->collapse_target == NO_PFN)
		g->collapse_target = dst & ~(RANGE_FRAMES - 1);
	if ((src & ~(RANGE_FRAMES - 1)) == g->collapse_target) {
		GFA_BUG_ON(g->collapse_mapped); /* nothing fails after the map */
		guest_record(g, gfn, dst, order);
		g->collapse_left++;
		return 0;
	}
	if (guest_copy(g, src, dst, order))
		return -EAGAIN; /* refused: the collapse moves the others back */
	guest_record(g, gfn, dst, order);
	if (--g->collapse_left)
		return 0;
	err = guest_notify_moved(g, lo, g->collapse_target, GFA_PAGEBLOCK_ORDER);
	if (!err && guest_map(g, lo, g->collapse_target, GFA_PAGEBLOCK_ORDER))
		err = -EAGAIN;
	if (err) {
		g->collapse_left++;
		guest_record(g, gfn, src, order);
		return err;
	}
	g->collapse_mapped = true;
	return 0;
}

/*
 * The owner ops' migrate.  trylock, as the kernel's trylock_page(): the thread
 * compacting may be another guest's, holding its own lock while its allocation
 * compacts - waiting here could close a cycle of guests.  Recursive: our own collapse
 * gets in.
 */
static int guest_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct gfa_guest *g = ctx;
	struct gfa_frame_info fi;
	uint64_t gfn;
	int err;

	if (order > GFA_PAGEBLOCK_ORDER || gfa_frame_lookup(g->pool, src, &fi) || fi.owner != owner)
		return -EAGAIN;               /* no guest block is larger than a range */
	gfn = fi.index + (src - fi.head_pfn); /* src may lie inside a block (collapse undo) */
	if (pthread_mutex_trylock(&g->lock))
		return -EAGAIN;
	if (gfn >= g->nr_frames || guest_pfn(g, gfn) != src || guest_order(g, gfn) != order)
		err = -EAGAIN; /* not indexed yet, or already gone */
	else if (guest_in_collapse(g, gfn))
		err = guest_collapse_piece(g, gfn, src, dst, order);
	else if (guest_range_pinned(g, gfn)) {
		g->st.pinned_skips++;
		err = -EBUSY;
	} else {
		err = guest_move_block(g, gfn, src, dst, order);
	}
	pthread_mutex_unlock(&g->lock);
	return err;
}

/* After a collapse: the range is one order-9 block (mapped as one by its last piece). */
static void guest_collapsed(void *ctx, uint64_t owner, uint64_t dst)
{
	struct gfa_guest *g = ctx;
	struct gfa_frame_info fi;
	uint64_t gfn;

	pthread_mutex_lock(&g->lock);
	gfn = g->collapse_lo;
	/* only our own collapse maps the range: another caller's leaves the pieces
	 * indexed one by one, each where the window maps it */
	if (gfn != NO_PFN && g->collapse_mapped && guest_pfn(g, gfn) == dst &&
	    !gfa_frame_lookup(g->pool, dst, &fi) && fi.owner == owner) {
		guest_record(g, gfn, dst, GFA_PAGEBLOCK_ORDER);
		gfa_block_set_index(g->pool, dst, g->id, (uint32_t)gfn);
	}
	pthread_mutex_unlock(&g->lock);
}

const struct gfa_owner_ops guest_owner_ops = {
	.migrate = guest_migrate,
	.collapsed = guest_collapsed,
	.batch_begin = guest_batch_begin,
	.batch_end = guest_batch_end,
};

/*
 * A collapse that failed: every piece the allocator left at the target (an owner that
 * left midway takes none back) is mapped where it is.  The copies were made with the
 * writers held off, so old and new frames hold the same data.
 */
static void guest_collapse_restore(struct gfa_guest *g, uint64_t gfn, const uint64_t *pfns,
				   const unsigned int *orders, const unsigned int *offs,
				   unsigned int n)
{
	for (unsigned int i = 0; i < n; i++) {
		uint64_t at = gfn + offs[i], pfn = guest_pfn(g, at);

		if (pfn != pfns[i] && guest_map(g, at, pfn, orders[i]))
			fprintf(stderr,
				"gfa: guest %lu: a stuck piece at gfn %lu could not be "
				"mapped where it now lives\n",
				(unsigned long)g->id, (unsigned long)at);
	}
}

/* Collapse one range backed by small blocks; 1 if it now sits in one block. */
static int guest_collapse_range(struct gfa_guest *g, uint64_t gfn)
{
	uint64_t pfns[RANGE_FRAMES];
	unsigned int orders[RANGE_FRAMES], offs[RANGE_FRAMES], n = 0;
	int64_t dst;
	bool mapped, own;
	int err;

	for (uint64_t i = gfn; i < gfn + RANGE_FRAMES; i++) {
		if (guest_order(g, i) == NOT_HEAD)
			continue;
		if (guest_pfn(g, i) == NO_PFN)
			return 0; /* ballooned holes: nothing to collapse into */
		pfns[n] = guest_pfn(g, i);
		orders[n] = guest_order(g, i);
		offs[n++] = (unsigned int)(i - gfn);
	}
	if (guest_range_pinned(g, gfn)) {
		g->st.pinned_skips++;
		return 0;
	}
	/* a host pool client's pool holds no spare block: lease the target (a failure
	 * leaves the collapse to fail as on a full pool) */
	(void)backing_lease_block(g->b, g->zone);
	err = guest_writers_stop(g, gfn, RANGE_FRAMES, false, &own);
	if (err) {
		backing_lease_done(g->b, g->zone, 0);
		return err;
	}
	g->collapse_lo = gfn;
	g->collapse_left = n;
	g->collapse_target = NO_PFN;
	g->collapse_mapped = false;
	dst = gfa_collapse(g->pool, g->zone, g->id, pfns, orders, offs, n);
	backing_lease_done(g->b, g->zone, 0); /* the target is taken (or the collapse failed) */
	mapped = g->collapse_mapped;
	GFA_BUG_ON((dst >= 0) != mapped); /* the last piece maps, then nothing fails */
	if (dst >= 0 && !mapped)
		mapped = !guest_map(g, gfn, (uint64_t)dst, GFA_PAGEBLOCK_ORDER);
	if (dst < 0)
		guest_collapse_restore(g, gfn, pfns, orders, offs, n);
	g->collapse_lo = NO_PFN;
	guest_writers_start(g, gfn, RANGE_FRAMES, mapped, own);
	if (dst < 0)
		return (int)dst;
	g->st.collapses++;
	g->st.wp_moves += g->wp;
	return 1;
}

int gfa_guest_collapse(struct gfa_guest *g, unsigned int max_ranges)
{
	int done = 0;

	if (!g)
		return GFA_EFAULT;
	if (g->pinned)
		return 0;
	if (guest_lock_any_thread(g))
		return GFA_EAGAIN;
	for (uint64_t r = 0; r < g->nr_frames && (unsigned int)done < max_ranges;
	     r += RANGE_FRAMES) {
		int ret;

		if (guest_range_huge(g, r))
			continue;
		ret = guest_collapse_range(g, r);
		if (ret == GFA_ENOMEM)
			break; /* no order-9 block to be had now */
		if (ret > 0)
			done++;
	}
	pthread_mutex_unlock(&g->lock);
	if (done)
		backing_lease_trim(g->b); /* the sources, merged whole, go back to the service */
	return done;
}
