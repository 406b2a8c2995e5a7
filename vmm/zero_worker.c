// SPDX-License-Identifier: MIT
/*
 * The backing's background zeroer: a thread that zeroes the dirty free frames stopped
 * guests leave (gfa_zero, vmm/zero.c, does the stores).  It attaches to the backing as
 * the backing's worker (backing_worker()): the backing knows it only by the stop
 * function it was handed, and the guests that stop and start reach it from here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <gfa/vmm.h>
#include "common/bug.h"
#include "common/ktime.h"
#include "allocator/layers.h"
#include "vmm/backing_internal.h"
#include "vmm/zero_worker.h"

/*
 * A stopped guest's blocks are free at once, dirty (at the tail of the free lists:
 * buddy_free_block_cold), and the backing's zeroer zeroes dirty free blocks in its own
 * thread, a batch at a time, as the idle scrubber does: zone_scrub_take takes a
 * batch off the lists, so no frame is handed out while it is zeroed, and the frames
 * stay counted free and claimable meanwhile (an allocation that finds none waits for
 * the batch).  Zeroed blocks go back at the head, clean, so the next start finds them
 * first.  Whoever takes a dirty block before the zeroer reaches it zeroes it itself
 * (gfa_backing_prepare).  The stopping thread never zeroes.
 *
 * The zeroer starts ZERO_SETTLE_NS after the last stop or start, as the host return
 * settles before it releases: a start right after a stop (a restart) then has the CPUs
 * and the memory bandwidth to itself.  Sharing them with the zeroer made a restart of
 * 128 MiB 1.4-1.5x a clean start on 2 CPUs; settled, it takes clean frames as fast.
 */
#define ZERO_BATCH_RANGES 8
#define ZERO_BATCH_FRAMES (4 * GFA_PAGEBLOCK_FRAMES) /* 8 MiB: a few ms */
#define ZERO_SETTLE_NS    (10 * 1000000ULL)
#define ZERO_RETRY_NS     (1000000ULL) /* after a zone said an allocation waits */

struct zero_worker {
	struct gfa_backing *b;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool kicked, stop, busy;
	unsigned int held;       /* checks under way: no batch meanwhile (zw_hold) */
	uint64_t quiet_at;       /* (CLOCK_MONOTONIC ns) no batch before it */
	_Atomic uint64_t frames; /* zeroed in the background, for tests and stats */
};

/* Wait on the worker's condition until the monotonic ns deadline at most (lock held). */
static int zw_wait_until(struct zero_worker *zw, uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / 1000000000ULL),
			       (long)(deadline % 1000000000ULL) };

	return pthread_cond_timedwait(&zw->cond, &zw->lock, &ts);
}

static bool want_dirty(void *ctx, uint64_t pfn, unsigned int order)
{
	return gfa_backing_block_dirty(ctx, pfn, order);
}

/*
 * One scrub batch from every zone; returns the ranges taken, 0 when no zone has a dirty
 * free block it may take, or -EAGAIN when none was taken but a zone refused because an
 * allocation waits for frames in work (this worker's last batch, or another
 * scrubber's).  That waiter wakes when they are back but needs the zone lock to leave,
 * and the next batch often gets the lock first: taken for "all clean", the refusal put
 * the worker to sleep with the stopped guest's dirty blocks on the lists, and
 * gfa_backing_zero_quiesce returned at once with them still dirty.
 */
static int zero_batch(struct zero_worker *zw)
{
	struct gfa_pool *pool = backing_pool(zw->b);
	struct gfa_frame_range fr[ZERO_BATCH_RANGES];
	int taken = 0;
	bool refused = false;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		int n = zone_scrub_take(pool, z, want_dirty, zw->b, fr, ZERO_BATCH_RANGES,
					ZERO_BATCH_FRAMES);

		refused |= n == -EAGAIN;
		for (int i = 0; i < n; i++) {
			int64_t done = backing_prepare_range(zw->b, fr[i].pfn, fr[i].nr);
			int err;

			/* a scrub's range of the pool, ours in flight until its done */
			GFA_BUG_ON(done < 0 || (uint64_t)done > fr[i].nr);
			if (done > 0)
				atomic_fetch_add(&zw->frames, (uint64_t)done);
			err = zone_populate_done(pool, fr[i].pfn, fr[i].nr);
			GFA_BUG_ON(err);
		}
		taken += n > 0 ? n : 0;
	}
	return taken || !refused ? taken : -EAGAIN;
}

static void *zero_main(void *arg)
{
	struct zero_worker *zw = arg;

	pthread_mutex_lock(&zw->lock);
	while (!zw->stop) {
		int taken;

		if (!zw->kicked || zw->held) {
			pthread_cond_wait(&zw->cond, &zw->lock);
			continue;
		}
		if (ktime_get_ns() < zw->quiet_at) {
			zw_wait_until(zw, zw->quiet_at); /* (a start is under way) */
			continue;
		}
		GFA_BUG_ON(zw->busy); /* one thread runs batches */
		zw->busy = true;
		pthread_mutex_unlock(&zw->lock);
		taken = zero_batch(zw);
		pthread_mutex_lock(&zw->lock);
		zw->busy = false;
		if (!taken)
			zw->kicked = false; /* all clean (or in others' hands): sleep */
		pthread_cond_broadcast(&zw->cond);
		if (taken == -EAGAIN && !zw->stop) /* still kicked: let the waiter in */
			zw_wait_until(zw, ktime_get_ns() + ZERO_RETRY_NS);
	}
	pthread_mutex_unlock(&zw->lock);
	return NULL;
}

/* The backing's worker start (backing_worker(), under the backing's lock). */
static void *zero_worker_start(struct gfa_backing *b)
{
	struct zero_worker *zw = calloc(1, sizeof(*zw));
	pthread_condattr_t attr;

	if (!zw)
		return NULL;
	zw->b = b;
	pthread_mutex_init(&zw->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* (its deadlines are) */
	pthread_cond_init(&zw->cond, &attr);
	pthread_condattr_destroy(&attr);
	if (pthread_create(&zw->thread, NULL, zero_main, zw)) {
		pthread_cond_destroy(&zw->cond);
		pthread_mutex_destroy(&zw->lock);
		free(zw);
		return NULL;
	}
	return zw;
}

/* And its stop: gfa_backing_destroy, before the mappings it zeroes go. */
static void zero_worker_stop(void *arg)
{
	struct zero_worker *zw = arg;

	pthread_mutex_lock(&zw->lock);
	zw->stop = true;
	pthread_cond_broadcast(&zw->cond);
	pthread_mutex_unlock(&zw->lock);
	pthread_join(zw->thread, NULL); /* (its batch is back on the lists: it finishes it) */
	pthread_cond_destroy(&zw->cond);
	pthread_mutex_destroy(&zw->lock);
	free(zw);
}

struct zero_worker *zero_worker_get(struct gfa_backing *b)
{
	/* no thread to be had: the frames go back dirty and the next owner zeroes them,
	 * as before there was a worker (the next stop tries again) */
	return backing_worker(b, zero_worker_start, zero_worker_stop);
}

/* Work (kick), after a settle (settle); or put what there is off a settle (!kick). */
static void zw_poke(struct zero_worker *zw, bool kick, bool settle)
{
	pthread_mutex_lock(&zw->lock);
	zw->kicked |= kick;
	if (settle)
		zw->quiet_at = ktime_get_ns() + ZERO_SETTLE_NS;
	pthread_cond_signal(&zw->cond);
	pthread_mutex_unlock(&zw->lock);
}

void zero_worker_kick(struct zero_worker *zw)
{
	zw_poke(zw, true, true);
}

void zero_worker_kick_now(struct zero_worker *zw)
{
	zw_poke(zw, true, false);
}

void zero_worker_defer(struct gfa_backing *b)
{
	struct zero_worker *zw = backing_worker_peek(b);

	if (zw)
		zw_poke(zw, false, true);
}

int gfa_backing_zero_quiesce(struct gfa_backing *b, unsigned int timeout_ms)
{
	uint64_t deadline = ktime_get_ns() + timeout_ms * 1000000ULL;
	struct zero_worker *zw;
	int err = 0;

	if (!b)
		return GFA_EFAULT;
	zw = backing_worker_peek(b);
	if (!zw)
		return 0;
	pthread_mutex_lock(&zw->lock);
	while (!err && (zw->kicked || zw->busy))
		err = zw_wait_until(zw, deadline);
	pthread_mutex_unlock(&zw->lock);
	return err ? -ETIMEDOUT : 0;
}

/*
 * Hold b's zeroer between two batches (the one in work finishes first), so a check sees
 * no frame of its in flight and no dirty mark changing.  A zeroer that starts meanwhile
 * is not held: the check's caller stops no guest while it checks (its Context).
 */
static struct zero_worker *zw_hold(struct gfa_backing *b)
{
	struct zero_worker *zw = backing_worker_peek(b);

	if (!zw)
		return NULL;
	pthread_mutex_lock(&zw->lock);
	zw->held++;
	while (zw->busy)
		pthread_cond_wait(&zw->cond, &zw->lock);
	pthread_mutex_unlock(&zw->lock);
	return zw;
}

static void zw_unhold(struct zero_worker *zw)
{
	if (!zw)
		return;
	pthread_mutex_lock(&zw->lock);
	GFA_BUG_ON(!zw->held);
	zw->held--;
	pthread_cond_broadcast(&zw->cond);
	pthread_mutex_unlock(&zw->lock);
}

int gfa_backing_check(struct gfa_backing *b, char *msg, size_t msglen)
{
	struct zero_worker *zw;
	int err;

	if (!b)
		return GFA_EFAULT;
	zw = zw_hold(b);
	err = backing_check(b, msg, msglen);
	zw_unhold(zw);
	return err;
}

uint64_t gfa_backing_zeroed_in_background(const struct gfa_backing *b)
{
	struct zero_worker *zw = b ? backing_worker_peek(b) : NULL;

	return zw ? atomic_load(&zw->frames) : 0;
}
