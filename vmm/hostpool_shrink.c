// SPDX-License-Identifier: MIT
/*
 * A host pool client's shrinker: compaction across clients.  A client's guests leave
 * free room inside the blocks it leased (a balloon at 4 KiB, free page reporting, a
 * small-only guest's frees), and no other process can use a block that is partly the
 * client's.  When another client's lease falls short, the service signals the
 * shrinkers of the clients that hold leases (an eventfd each, HP_LEASE_SHRINKER); this thread
 * then drains the vCPU caches, compacts each zone of the client's pool (its own moves,
 * under write protection: the service never moves a client's memory) so that the free
 * room gathers into whole blocks, and gives back the blocks that frees.  The short
 * client asks again meanwhile (lease_more(), up to GFA_HOSTPOOL_SHRINK_MS).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "vmm/hostpool_shrink.h"
#include "common/bug.h"

#define SHRINK_GAP_MS 50 /* at most a pass per this, however often the service asks */

void hp_shrinker_init(struct hp_shrinker *sh, struct gfa_pool *pool, void (*trim)(void *ctx),
		      void *ctx)
{
	*sh = (struct hp_shrinker){ .pool = pool, .trim = trim, .ctx = ctx, .fd = -1, .stop = -1 };
}

/* One pass: the room the guests left gathered into whole blocks, and those given back. */
static void shrink_pass(struct hp_shrinker *sh)
{
	unsigned int nz = gfa_pool_nr_zones(sh->pool);

	for (unsigned int z = 0; z < nz; z++) {
		struct gfa_zone_stat zs;

		/* less than a block free: nothing to gather, and the vCPUs keep their caches */
		if (gfa_zone_stat(sh->pool, z, &zs) || zs.nr_free < GFA_PAGEBLOCK_FRAMES)
			continue;
		(void)gfa_pool_drain_all(sh->pool, (int)z);
		(void)gfa_compact_zone(sh->pool, z, -1, GFA_COMPACT_SYNC);
	}
	sh->trim(sh->ctx);
}

static void *shrinker_main(void *arg)
{
	struct hp_shrinker *sh = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = sh->fd, .events = POLLIN },
				       { .fd = sh->stop, .events = POLLIN } };
		eventfd_t v;
		/* a rejoin puts a new service's eventfd under the same number: look again */
		int n = poll(p, 2, 1000);

		if (n < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN) || eventfd_read(sh->fd, &v))
			continue;
		shrink_pass(sh);
		/* a short client asks every few ms: what it asks meanwhile is one pass more */
		if (poll(&p[1], 1, SHRINK_GAP_MS) > 0)
			break;
	}
	return NULL;
}

int hp_shrinker_arm(struct hp_shrinker *sh)
{
	pthread_attr_t a;
	int err;

	if (sh->fd < 0 || sh->on)
		return 0;
	sh->stop = eventfd(0, EFD_CLOEXEC);
	if (sh->stop < 0)
		return -errno;
	/* compaction's depth is modest: a small stack is fewer faults to start it */
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 256u << 10);
	err = -pthread_create(&sh->thread, &a, shrinker_main, sh);
	pthread_attr_destroy(&a);
	if (err) {
		close(sh->stop);
		sh->stop = -1;
		return err;
	}
	sh->on = true;
	return 0;
}

int hp_shrinker_take(struct hp_shrinker *sh, int fd)
{
	int err = 0;

	if (sh->fd < 0) {
		sh->fd = fd;
		return 0;
	}
	/* the thread polls this number: the new service's eventfd in its place */
	if (dup3(fd, sh->fd, O_CLOEXEC) < 0)
		err = -errno;
	close(fd);
	sh->stale = err != 0;
	return err;
}

void hp_shrinker_stop(struct hp_shrinker *sh)
{
	if (sh->on) {
		(void)eventfd_write(sh->stop, 1);
		pthread_join(sh->thread, NULL);
		sh->on = false;
	}
	if (sh->stop >= 0)
		close(sh->stop);
	if (sh->fd >= 0)
		close(sh->fd);
	sh->stop = sh->fd = -1;
}
