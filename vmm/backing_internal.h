/* SPDX-License-Identifier: MIT */
/* The backing's link to its host-return thread, shared by vmm/backing.c and
 * vmm/hostreturn.c.  Not installed. */
#ifndef GFA_VMM_BACKING_INTERNAL_H
#define GFA_VMM_BACKING_INTERNAL_H
#include <stdbool.h>
#include <gfa/vmm.h>
#include "allocator/bug.h"

/* The pool b backs. */
struct gfa_pool *backing_pool(const struct gfa_backing *b);
/* Link hr to b: 0, or -EBUSY when b has a host return already. */
int backing_attach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
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
void backing_runs(struct gfa_backing *b, uint64_t pfn, uint64_t nr, backing_run_fn fn,
		  void *ctx);

/* The backing's background zeroer (vmm/zero.c): it zeroes dirty free frames, a batch
 * at a time taken off the lists by zone_scrub_take (still counted free). */
struct zero_worker;
struct zero_worker *zero_worker_start(struct gfa_backing *b);
void zero_worker_stop(struct zero_worker *zw);
/* Zero what is dirty and free in the worker's thread, once things settled (a stop). */
void zero_worker_kick(struct zero_worker *zw);
/* Put the work off for a settle again (a start is under way). */
void zero_worker_defer(struct zero_worker *zw);
int zero_worker_quiesce(struct zero_worker *zw, unsigned int timeout_ms);
uint64_t zero_worker_frames(struct zero_worker *zw);

/* The worker that zeroes what guests leave when they stop (started by the first call),
 * or NULL: none (no_zero_on_stop, or no thread to be had). */
struct zero_worker *backing_zero_worker(struct gfa_backing *b);
/* A guest start begins or ends: b's zeroer (if any) puts its work off for a settle. */
void backing_zero_defer(struct gfa_backing *b);
#endif
