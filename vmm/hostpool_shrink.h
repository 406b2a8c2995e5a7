/* SPDX-License-Identifier: MIT */
/*
 * A host pool client's shrinker (vmm/hostpool_shrink.c): a thread that waits on the
 * service's eventfd and, when the service signals it, compacts the client's pool and
 * has the client give back the blocks that frees.  Not installed.
 */
#ifndef GFA_VMM_HOSTPOOL_SHRINK_H
#define GFA_VMM_HOSTPOOL_SHRINK_H
#include <pthread.h>
#include <stdbool.h>
#include <gfa/allocator.h>

struct hp_shrinker {
	struct gfa_pool *pool;
	void (*trim)(void *ctx); /* after a pass: give back the whole free blocks */
	void *ctx;
	int fd, stop; /* the service's eventfd and ours to stop the thread; -1 */
	bool on;      /* the thread runs */
	pthread_t thread;
	bool stale; /* fd is a service's from before a rejoin: ask for the new one */
};

/* No shrinker yet: sh ready for hp_shrinker_take(). */
void hp_shrinker_init(struct hp_shrinker *sh, struct gfa_pool *pool, void (*trim)(void *ctx),
		      void *ctx);
/*
 * The service's eventfd for us (from a lease reply; ours after).  One after a rejoin
 * takes the last one's fd number, which the thread polls.  0 or -errno; on error sh
 * asks again (hp_shrinker_wanted()).
 * Context: the client's lease lock held.
 */
int hp_shrinker_take(struct hp_shrinker *sh, int fd);
/*
 * The thread started, if there is an eventfd and it is not running: at the first trim,
 * since only frees leave room inside leases, and so not on a create's path.  What the
 * service signalled before waits in the eventfd.  0 or -errno (tried again next time).
 * Context: the client's lease lock held.
 */
int hp_shrinker_arm(struct hp_shrinker *sh);
/* Should the next lease ask for the service's eventfd? */
static inline bool hp_shrinker_wanted(const struct hp_shrinker *sh)
{
	return sh->fd < 0 || sh->stale;
}
/* The thread stopped and joined, its fds closed (detach; not from the thread). */
void hp_shrinker_stop(struct hp_shrinker *sh);
#endif
