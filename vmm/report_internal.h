/* SPDX-License-Identifier: MIT */
/* Free page reporting's link to the backing's moved hook (vmm/report.c, vmm/backing.c).
 * Not installed. */
#ifndef GFA_VMM_REPORT_INTERNAL_H
#define GFA_VMM_REPORT_INTERNAL_H
#include <gfa/vmm.h>

/*
 * A move of b's pool is about to free [pfn, pfn + 2^order): wait until no report punch
 * is in flight over it, so the punch cannot land after the frames went to a new owner.
 * One atomic load when nothing is in flight.  The moving thread, no pool lock held.
 */
void report_moved_wait(struct gfa_backing *b, uint64_t pfn, unsigned int order);
#endif
