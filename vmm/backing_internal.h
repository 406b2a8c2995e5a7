/* SPDX-License-Identifier: MIT */
/*
 * The backing's calls for the vmm/ files above it: its host-return thread
 * (vmm/hostreturn.c), its zeroer (vmm/zero_worker.c), free page reporting
 * (vmm/report.c) and the guests.  The backing calls none of them: what it must run of
 * theirs it is handed as hooks (a kick, a worker's stop, a move's wait), as the
 * allocator is handed the backing's moved and released hooks.  Not installed.
 */
#ifndef GFA_VMM_BACKING_INTERNAL_H
#define GFA_VMM_BACKING_INTERNAL_H
#include <stdbool.h>
#include <gfa/vmm.h>
#include "common/bug.h"

/* The pool b backs. */
struct gfa_pool *backing_pool(const struct gfa_backing *b);
/*
 * Give the host memory of a block its owner is about to free back now (it reads zero
 * after): 0, -EAGAIN when that is not the backing's to do (a host return runs on it, or
 * cfg->no_balloon_punch), -EINVAL (hugetlbfs below 2 MiB), or fallocate's -errno.  The
 * owner frees it with pool_free_released() after a 0, as usual otherwise.  Any thread.
 */
int backing_punch_block(struct gfa_backing *b, uint64_t pfn, unsigned int order);
/* Link hr to b, with the kick that gfa_backing_kick_host_return(b) runs on it: 0, or
 * -EBUSY when b has a host return already. */
typedef void (*backing_kick_fn)(struct gfa_host_return *hr);
int backing_attach_host_return(struct gfa_backing *b, struct gfa_host_return *hr,
			       backing_kick_fn kick);
/* Unlink hr if it is b's; once this returns no kick through b can reach hr. */
void backing_detach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
/* Zero the dirty frames of [pfn, pfn + nr) (inside one zone): frames zeroed, or
 * GFA_EFAULT. */
int64_t backing_prepare_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr);
/*
 * A move's copy: the block of 2^order frames at dst (same zone) reads as the one at src
 * afterwards.  Only src's data is copied; where src is a hole dst's dirty frames are
 * zeroed (and marked clean) and the rest left alone, so the copy never populates a
 * frame src does not hold.  0, -EFAULT (no b) or -EINVAL (not two distinct aligned
 * blocks of one zone of b).
 */
int backing_copy_block(struct gfa_backing *b, uint64_t src, uint64_t dst, unsigned int order);
/* One run of frames of one zone, all data or all holes (see backing_runs()). */
typedef void (*backing_run_fn)(struct gfa_backing *b, uint64_t pfn, uint64_t nr, bool data,
			       void *ctx);
/* fn on each run of [pfn, pfn + nr) (one zone) by what its memfd holds: data, or a hole
 * (reads zero); where the memfd cannot tell, data. */
void backing_runs(struct gfa_backing *b, uint64_t pfn, uint64_t nr, backing_run_fn fn, void *ctx);

/*
 * The backing's worker: a thread of a layer above that works on b's frames (the zeroer,
 * vmm/zero_worker.c), started at its first need.  The first call runs start(b) under
 * b's lock and keeps what it returns with stop, which gfa_backing_destroy calls before
 * b's mappings go; later calls return that one.  NULL: b was made with no_zero_on_stop
 * (it wants no worker), or start returned NULL (the next call tries again).  Any
 * thread.
 */
typedef void *(*backing_worker_start_fn)(struct gfa_backing *b);
typedef void (*backing_worker_stop_fn)(void *worker);
void *backing_worker(struct gfa_backing *b, backing_worker_start_fn start,
		     backing_worker_stop_fn stop);
/* b's worker, or NULL: none started yet.  Any thread. */
void *backing_worker_peek(const struct gfa_backing *b);
/* gfa_backing_check() itself, the zeroer not held (vmm/zero_worker.c holds it). */
int backing_check(struct gfa_backing *b, char *msg, size_t msglen);

/*
 * A layer whose work a move could overtake (free page reporting's punches,
 * vmm/report.c): the backing's moved hook runs wait(b, pfn, order) before it marks a
 * move's source dirty, in the moving thread with no pool lock held, so the layer can
 * wait until nothing of its own is in flight over the block before the block is freed.
 * One wait per backing, kept until b is destroyed (setting it again is a no-op).  Any
 * thread, moves running: a move that does not see the wait yet ran before the layer
 * could have anything in flight.
 */
typedef void (*backing_move_wait_fn)(struct gfa_backing *b, uint64_t pfn, unsigned int order);
void backing_set_move_wait(struct gfa_backing *b, backing_move_wait_fn wait);

/*
 * A backing over memfds another process made (a host pool client, vmm/hostpool.c): as
 * gfa_backing_create(), with fds[z] (one per zone, at least the zone's size) instead of
 * new memfds.  The fds are the backing's from the call on, on failure too (closed).
 */
struct gfa_backing *backing_adopt(struct gfa_pool *pool, const struct gfa_backing_config *cfg,
				  const int *fds);
/*
 * The lease hooks of a host pool client's backing: its pool holds only the frames the
 * service leased it, so a guest asks before it takes frames and offers back what it
 * freed.  want(ctx, zone, frames): make sure the zone has that many free frames, 0 or
 * -errno (the caller then fails as on a short pool).  want_block(ctx, zone): make sure
 * the zone has a free block of a pageblock or more, a move's target (a collapse's),
 * 0 or -errno.  Every want and want_block, whatever it returned, is followed by one
 * done(ctx, zone, frames) with the same zone and frames (0 for want_block) once the
 * caller took its frames or gave up: until then the frames are promised (another
 * want leases beyond them) and no trim gives back what was leased, and a trim asked
 * meanwhile runs at the last done.  trim(ctx):
 * give back what is free beyond the client's slack.  Any thread, no pool lock held;
 * want_block and done may run with a guest's lock held (the hooks never take one).
 */
struct backing_lease_ops {
	int (*want)(void *ctx, unsigned int zone, uint64_t frames);
	int (*want_block)(void *ctx, unsigned int zone);
	void (*done)(void *ctx, unsigned int zone, uint64_t frames);
	void (*trim)(void *ctx);
};
/* Set before any guest uses b. */
void backing_set_lease(struct gfa_backing *b, const struct backing_lease_ops *ops, void *ctx);
/* b has lease hooks: its pool holds only what a host pool service leased it. */
bool backing_leases(const struct gfa_backing *b);
/* The hooks on b, or 0 / nothing when b has none. */
int backing_lease_want(struct gfa_backing *b, unsigned int zone, uint64_t frames);
int backing_lease_block(struct gfa_backing *b, unsigned int zone);
void backing_lease_done(struct gfa_backing *b, unsigned int zone, uint64_t frames);
void backing_lease_trim(struct gfa_backing *b);
#endif
