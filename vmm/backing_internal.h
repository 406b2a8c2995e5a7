/* SPDX-License-Identifier: MIT */
/* The backing's link to its host-return thread, shared by vmm/backing.c and
 * vmm/hostreturn.c.  Not installed. */
#ifndef GFA_VMM_BACKING_INTERNAL_H
#define GFA_VMM_BACKING_INTERNAL_H
#include <stdbool.h>
#include <gfa/vmm.h>

/* The pool b backs. */
struct gfa_pool *backing_pool(const struct gfa_backing *b);
/* Link hr to b: 0, or -EBUSY when b has a host return already. */
int backing_attach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
/* Unlink hr if it is b's; once this returns no kick through b can reach hr. */
void backing_detach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
/* Zero the dirty frames of [pfn, pfn + nr) (inside one zone): frames zeroed, or
 * GFA_EFAULT. */
int64_t backing_prepare_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr);

/* The backing's background zeroer (vmm/zero.c). */
struct zero_worker;
struct zero_worker *zero_worker_start(struct gfa_backing *b);
void zero_worker_stop(struct zero_worker *zw);
/* Zero what is dirty and free, soon, in the worker's thread; never waits. */
void zero_worker_kick(struct zero_worker *zw);
/* hold: wait for the batch in work to be back on the lists and take no more until
 * the matching !hold (an allocation that found no frame retries meanwhile); true if
 * the worker had work (a retry may find frames). */
bool zero_worker_hold(struct zero_worker *zw, bool hold);
int zero_worker_quiesce(struct zero_worker *zw, unsigned int timeout_ms);
uint64_t zero_worker_frames(struct zero_worker *zw);

/* A guest stopped: zero what it left in the background (starts the worker once). */
void backing_zero_stopped(struct gfa_backing *b);
/* An allocation for b found no frame: hold b's worker (NULL if none), *working says
 * whether a retry may find frames; let go with zero_worker_hold(zw, false). */
struct zero_worker *backing_zero_hold(struct gfa_backing *b, bool *working);
#endif
