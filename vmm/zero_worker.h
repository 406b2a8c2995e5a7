/* SPDX-License-Identifier: MIT */
/* The backing's background zeroer (vmm/zero_worker.c), for the guests whose stops feed
 * it and whose starts put it off.  Not installed. */
#ifndef GFA_VMM_ZERO_WORKER_H
#define GFA_VMM_ZERO_WORKER_H
#include <gfa/vmm.h>

/* It zeroes dirty free frames, a batch at a time taken off the lists by zone_scrub_take
 * (still counted free). */
struct zero_worker;
/* b's zeroer, started by the first call; NULL: none (no_zero_on_stop, or no thread to
 * be had).  A guest stop calls it. */
struct zero_worker *zero_worker_get(struct gfa_backing *b);
/* Zero what is dirty and free in the worker's thread, once things settled (a stop). */
void zero_worker_kick(struct zero_worker *zw);
/* The same at once, no settle, and without putting off a settle under way: for the host
 * pool service, whose message thread never zeroes in idle time and whose clients'
 * churn, each give-back a kick, would put a settle off for good. */
void zero_worker_kick_now(struct zero_worker *zw);
/* A guest start begins or ends: b's zeroer (if any) puts its work off for a settle. */
void zero_worker_defer(struct gfa_backing *b);
#endif
