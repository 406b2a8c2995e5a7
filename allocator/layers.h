/* SPDX-License-Identifier: MIT */
/*
 * allocator/layers.h - the allocator's calls for gfa's own upper layers (numa, vmm) and
 * its tests: where a zone's frames live in host memory, the hook a move reports to, error
 * counting on the allocator's behalf, and the take/done steps of returning memory to the
 * host and getting it back.  Not installed, and kept local to libgfa.so by libgfa.map:
 * a VMM reaches all of this through gfa/vmm.h (gfa_backing_create,
 * gfa_host_return_start).
 */
#ifndef GFA_ALLOCATOR_LAYERS_H
#define GFA_ALLOCATOR_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <gfa/allocator.h>

/* ---- room to grow (docs/decisions.md, entry 18) ---- */

/* Are a caller's reserved words all zero?  Nonzero ones are GFA_EINVAL: a caller built
 * against a newer header asked for something this library does not know. */
static inline bool reserved_zero(const uint64_t *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (r[i])
			return false;
	return true;
}
#define GFA_RESERVED_ZERO(s) \
	reserved_zero((s)->reserved, sizeof((s)->reserved) / sizeof((s)->reserved[0]))

/* ---- metadata memory and per-frame bitmaps ---- */

/*
 * Zeroed metadata of bytes (rounded up to whole pages), anonymous memory of its own,
 * backed only where written and given back whole by meta_free(), which takes the same
 * size.  Never the heap's: glibc raises its mmap threshold when a large block it
 * mapped is freed, so after one pool's destroy the next pool's calloc of its 2 MiB
 * owner table came from the heap and was cleared whole (a client's second attach in
 * one process took 1.1-1.3 ms, its third 5.8-6.2, now 0.11-0.28; decisions 37).  NULL
 * on failure.
 */
void *meta_zalloc(size_t bytes);
void meta_free(void *p, size_t bytes);

/*
 * A zeroed bitmap of a bit per frame (the zones' free heads and released frames, a
 * backing's dirty frames), meta_zalloc()'s: a pool that sets few bits (a host pool
 * client's) pays neither the memory nor a fault per page of calloc's clearing.  NULL
 * on failure.  frame_bitmap_free() takes the same count.
 */
uint64_t *frame_bitmap_alloc(uint64_t nr_frames);
void frame_bitmap_free(uint64_t *map, uint64_t nr_frames);

/* ---- pools whose frames start allocated ---- */

/*
 * gfa_pool_create(), but every frame starts allocated to owner (movable, in the largest
 * aligned blocks, MAX_ORDER first) instead of free: the pool of a host pool client, in
 * which only what the service leases is free.  Creation writes one descriptor per
 * MAX_ORDER block and takes no zone lock (no allocation counter moves).  Same returns
 * as gfa_pool_create().
 */
struct gfa_pool *pool_create_held(const struct gfa_pool_config *cfg, uint64_t owner);
/*
 * Give the allocated block of 2^order frames at pfn, owner from's, to owner to: a
 * restarted host pool service hands each client's leases back to it (vmm/hostpool_state.c).
 * Claims do not move.  Returns 0, GFA_EFAULT, GFA_ERANGE, GFA_ENOTHEAD (not the head
 * of an allocated block of that order), GFA_EOWNER (not from's).
 */
int pool_block_reown(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t from,
		     uint64_t to);
/* What is left of owner's claim on a zone: frames, 0 without one. */
uint64_t zone_claim_left(struct gfa_pool *pool, unsigned int zone, uint64_t owner);

/* ---- host backing ---- */

/*
 * Tell the pool where zone z's frames live in host memory (base maps frame
 * start_pfn of the zone) and the memfd behind them (-1 if none).  The allocator itself
 * never touches frame memory except through gfa_pfn_to_addr callers.
 * Returns 0, GFA_EFAULT, GFA_ERANGE.
 */
int zone_set_backing(struct gfa_pool *pool, unsigned int zone, void *base, int memfd);
/*
 * Be told of every block a migrate op leaves behind with the owner's data in it
 * (compaction, collapse and a collapse's moves back): fn(ctx, pfn, order) runs in the
 * moving thread right after the op returned, no pool lock held, before the block is
 * freed: the source when the op succeeded (it still holds a copy), the target when it
 * refused or failed (it may have copied before its remap failed).  A backing marks the
 * block dirty here (gfa_backing_create sets the hook).  fn NULL removes the hook.  Set
 * or remove it while no migrate op can run (no compaction, kcompactd stopped, no
 * gfa_collapse).  Returns 0, GFA_EFAULT, GFA_EBUSY (a hook is set already).
 */
typedef void (*gfa_moved_fn)(void *ctx, uint64_t pfn, unsigned int order);
int pool_set_moved_fn(struct gfa_pool *pool, gfa_moved_fn fn, void *ctx);

/*
 * Be told of every free frame that becomes released (its host memory is gone: it reads
 * zero), so a layer that keeps marks on frames drops them: fn(ctx, pfn, nr) runs with
 * the zone lock held, before the frames are on the free lists again (nobody can
 * allocate them meanwhile), for zone_release_done with released set,
 * zone_populate_failed, and compaction targets given back unwritten.  fn must not
 * call into the pool.  A backing clears the frames' dirty marks here (gfa_backing_create
 * sets the hook).  Set or remove it while no frame can be released (no host return, no
 * compaction).  Returns 0, GFA_EFAULT, GFA_EBUSY (a hook is set already).
 */
typedef void (*gfa_released_fn)(void *ctx, uint64_t pfn, uint64_t nr);
int pool_set_released_fn(struct gfa_pool *pool, gfa_released_fn fn, void *ctx);
/*
 * Call fn(ctx, pfn, nr, released) for the free frames of [pfn, pfn + nr) (one zone; on
 * the buddy lists, in vCPU caches or held by a scrub), in pfn order, as runs that are
 * all released or all populated, with the zone lock held: fn must not call into the
 * pool.  Frames in flight to the host, isolated or allocated are no free frames.  For
 * the backing's figures and check.  Returns 0, GFA_EFAULT, GFA_ERANGE (not inside one
 * zone).  Any thread (a cached block's state is read as it stands).
 */
typedef void (*gfa_free_run_fn)(void *ctx, uint64_t pfn, uint64_t nr, bool released);
int zone_free_runs(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, gfa_free_run_fn fn, void *ctx);

/* ---- freeing ---- */

/*
 * gfa_free(), but the block goes to the tail of its free list, as the kernel's
 * FPI_TO_TAIL does: for a block that is free now but worth less than the others (a
 * stopped guest's, dirty), so allocations take the clean free blocks first and this
 * one before any block holding released frames.  Same returns and thread rules as
 * gfa_free().
 */
int pool_free_cold(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner);
/*
 * pool_free_cold() of a block whose host memory the owner has just punched out (it
 * reads zero): the frames go back released, as a host return's would (counted in
 * release_done; the released hook clears their marks).  Same returns and thread rules.
 */
int pool_free_released(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner);

/* ---- errors ---- */

/*
 * For the layers above (numa, vmm): count err, one of the GFA_E* errors above, in the
 * pool's err_* counters as if the allocator had returned it, and return it.  Other
 * values and a NULL pool are returned uncounted.  Any thread.
 */
int pool_count_error(struct gfa_pool *pool, int err);

/*
 * The caller holds the allocated block at pfn (order 9 or 10, owner) whole and will
 * neither free nor split it until this returns: give the tail descriptors of its
 * pageblocks back to the host (entry 33 of docs/decisions.md), as a release in flight
 * does.  For blocks a layer keeps allocated to itself (a host pool client's returned
 * leases).  The block is ISOLATED meanwhile (a zone-path free of it gets GFA_EBUSY; a
 * cache free must not race it).  Returns 0,
 * GFA_EFAULT, GFA_ERANGE, GFA_EALIGN, GFA_EORDER (below 9), GFA_ENOTHEAD, GFA_EOWNER,
 * GFA_EWRONGORDER, GFA_EDOUBLEFREE, GFA_EBUSY (counted).  Any thread (takes the zone
 * lock).
 */
int zone_held_drop_tails(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner);

/* ---- returning memory to the host: take and done steps ---- */

struct gfa_frame_range {
	uint64_t pfn;
	uint64_t nr; /* frames */
};

/*
 * One shrink step: take up to max_frames populated free frames that the policy says
 * to release off the free lists (state INFLIGHT: never handed out), as up to
 * max_ranges coalesced ranges, highest first.  Frames claimed (gfa_zone_claim) stay on
 * the lists, so a claim's owner never finds them in flight.  Returns ranges filled (0:
 * nothing to do - the zone is at or below its high mark), GFA_EFAULT, GFA_ERANGE.  The
 * caller releases them and reports each with zone_release_done.
 */
int zone_release_take(struct gfa_pool *pool, unsigned int zone, struct gfa_frame_range *out,
		      unsigned int max_ranges, uint64_t max_frames);
/*
 * One grow step: when the zone has fewer than `low` populated free frames, take
 * released free frames (lowest first) up to `high` and max_frames, to be populated by
 * the caller and reported with zone_populate_done (or zone_populate_failed).  Only released
 * frames go: a free block that mixes them with populated ones is split, and its populated pieces
 * stay on the lists; claimed frames stay on the lists too.  Same returns as above.
 */
int zone_populate_take(struct gfa_pool *pool, unsigned int zone, struct gfa_frame_range *out,
		       unsigned int max_ranges, uint64_t max_frames);
/*
 * Put an isolated range back on the free lists: released (the host memory is gone and
 * reads as zero) or not (the frames are populated: a failed release, or a grow).
 * Returns 0, GFA_EFAULT, GFA_ERANGE, GFA_EBUSY (part of the range is not in flight:
 * nothing changes).  Any thread (release engines call it from their threads).
 */
int zone_release_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, bool released);
/*
 * Background work on free frames (scrubbing): take up to max_frames populated free
 * frames whose block want() accepts off the free lists (INFLIGHT), as ranges; the
 * caller works on them and hands each back with zone_populate_done.  They stay free
 * frames: counted in nr_free (gfa_zone_stat.nr_scrubbing) and claimable, and an
 * allocation that finds no frame waits until every range in work is back (no scrub
 * takes any while one waits).  So hand each range back soon, and never allocate from
 * the pool while holding one (the wait would be for the caller itself).  Never more
 * than leaves the claimed frames plus the zone's release policy `low` on the lists
 * (blocks that do not fit are passed over).  want() runs with the zone lock held and
 * must not call into the pool.  Returns ranges filled (0: nothing it may take), -EAGAIN
 * (an allocation waits for frames in work: nothing taken now, try again once it has
 * run), GFA_EFAULT or GFA_ERANGE.
 */
typedef bool (*gfa_block_want_fn)(void *ctx, uint64_t pfn, unsigned int order);
int zone_scrub_take(struct gfa_pool *pool, unsigned int zone, gfa_block_want_fn want, void *ctx,
		    struct gfa_frame_range *out, unsigned int max_ranges, uint64_t max_frames);
/* The same for a range taken by zone_populate_take, now populated. */
int zone_populate_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr);
/*
 * A range taken by zone_populate_take that the host could not populate (memory
 * pressure): back on the lists released, counted in release_populate_failed.  Same
 * returns as zone_release_done.
 */
int zone_populate_failed(struct gfa_pool *pool, uint64_t pfn, uint64_t nr);

#endif /* GFA_ALLOCATOR_LAYERS_H */
