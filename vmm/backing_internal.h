/* SPDX-License-Identifier: MIT */
/* The backing's link to its host-return thread, shared by vmm/backing.c and
 * vmm/hostreturn.c.  Not installed. */
#ifndef GFA_VMM_BACKING_INTERNAL_H
#define GFA_VMM_BACKING_INTERNAL_H
#include <gfa/vmm.h>
#include "allocator/bug.h"

/* The pool b backs. */
struct gfa_pool *backing_pool(const struct gfa_backing *b);
/* Link hr to b: 0, or -EBUSY when b has a host return already. */
int backing_attach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
/* Unlink hr if it is b's; once this returns no kick through b can reach hr. */
void backing_detach_host_return(struct gfa_backing *b, struct gfa_host_return *hr);
#endif
