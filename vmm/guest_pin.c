// SPDX-License-Identifier: MIT
/*
 * Pinned guest ranges: memory whose writes bypass the page tables (VFIO DMA, io_uring
 * fixed buffers, O_DIRECT in flight), which no write protection can catch, so it must
 * not move.  A count per 2 MiB range (4 bytes per 2 MiB of guest), checked by every
 * move, collapse and balloon inflate (guest_range_pinned()).
 */
#include <errno.h>
#include <pthread.h>
#include <gfa/vmm.h>
#include "vmm/guest_internal.h"
#include "allocator/layers.h"

/* The ranges [*lo, *hi) that [gpa, gpa + len) touches: 0 or a counted error. */
static int pin_span(struct gfa_guest *g, uint64_t gpa, uint64_t len, uint64_t *lo, uint64_t *hi)
{
	*lo = *hi = 0;
	if (!g)
		return GFA_EFAULT;
	if (!len)
		return pool_count_error(g->pool, GFA_EINVAL);
	if (guest_gpa_check(g, &gpa, len))
		return pool_count_error(g->pool, GFA_ERANGE);
	*lo = gpa / RANGE_BYTES;
	*hi = (gpa + len - 1) / RANGE_BYTES + 1;
	return 0;
}

/* Add delta (+1 or -1) to every count the span touches, all or none: 0, -EOVERFLOW (a
 * count at its top), -ENOENT (one at 0). */
static int pin_add(struct gfa_guest *g, uint64_t gpa, uint64_t len, int delta)
{
	uint32_t stop = delta > 0 ? UINT32_MAX : 0;
	uint64_t lo, hi;
	int err = pin_span(g, gpa, len, &lo, &hi);

	if (err)
		return err;
	/* taken after any move in flight: a move holds the lock to its end */
	pthread_mutex_lock(&g->lock);
	for (uint64_t r = lo; r < hi && !err; r++)
		if (g->pins[r] == stop)
			err = delta > 0 ? -EOVERFLOW : -ENOENT;
	for (uint64_t r = lo; r < hi && !err; r++)
		g->pins[r] += (uint32_t)delta;
	pthread_mutex_unlock(&g->lock);
	return err;
}

int gfa_guest_pin(struct gfa_guest *g, uint64_t gpa, uint64_t len)
{
	return pin_add(g, gpa, len, 1);
}

int gfa_guest_unpin(struct gfa_guest *g, uint64_t gpa, uint64_t len)
{
	return pin_add(g, gpa, len, -1);
}

int gfa_guest_pinned(struct gfa_guest *g, uint64_t gpa, uint64_t len)
{
	uint64_t lo, hi;
	int err = pin_span(g, gpa, len, &lo, &hi), pinned;

	if (err)
		return err;
	pthread_mutex_lock(&g->lock);
	pinned = guest_span_pinned(g, gpa, len);
	pthread_mutex_unlock(&g->lock);
	return pinned;
}

bool guest_span_pinned(const struct gfa_guest *g, uint64_t gpa, uint64_t len)
{
	for (uint64_t r = gpa / RANGE_BYTES; len && r <= (gpa + len - 1) / RANGE_BYTES; r++)
		if (guest_range_pinned(g, r * RANGE_FRAMES))
			return true;
	return false;
}
