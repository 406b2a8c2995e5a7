// SPDX-License-Identifier: MIT
/*
 * Background compaction (kcompactd): one worker per zone.  Proactive compaction by
 * fragmentation score as vm.compaction_proactiveness does (Linux 5.9+): start above
 * wmark_high = min(100 - proactiveness + 10, 100), stop at wmark_low = 100 -
 * proactiveness; checked every 500 ms (HPAGE_FRAG_CHECK_INTERVAL_MSEC).  A proactive
 * pass that did not lower the score defers the next ones 64 intervals (the kernel's
 * proactive_defer, 1 << COMPACT_MAX_DEFER_SHIFT).  A failed order-9 allocation wakes
 * the worker early.
 */
#include <time.h>
#include "allocator/internal.h"

#define FRAG_CHECK_INTERVAL_MS 500
#define PROACTIVE_DEFER        64 /* intervals after a pass that did not help */

static bool compactd_should_stop(struct gfa_pool *pool)
{
	return __atomic_load_n(&pool->compactd_stop, __ATOMIC_ACQUIRE);
}

/* Sleep until woken or the interval passes; returns whether we were woken. */
static bool compactd_sleep(struct gfa_zone *z)
{
	struct timespec ts;
	bool woken;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += FRAG_CHECK_INTERVAL_MS * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	zone_lock(z);
	while (!z->compactd_wake && !compactd_should_stop(z->pool))
		if (zone_cond_timedwait(z, &z->compactd_wait, &ts))
			break;
	woken = z->compactd_wake;
	z->compactd_wake = false;
	zone_unlock(z);
	return woken;
}

static void *compactd_main(void *arg)
{
	struct gfa_zone *z = arg;
	struct gfa_pool *pool = z->pool;
	unsigned int defer = 0;

	while (!compactd_should_stop(pool)) {
		bool woken = compactd_sleep(z);
		unsigned int pro = __atomic_load_n(&pool->compact.proactiveness, __ATOMIC_RELAXED);
		int high = 100 - (int)pro + 10 > 100 ? 100 : 100 - (int)pro + 10;
		int order = -1, score = 0;

		if (compactd_should_stop(pool))
			break;
		if (woken) {
			order = GFA_PAGEBLOCK_ORDER;
		} else if (defer) {
			defer--;
			continue;
		} else if (!pro || (score = gfa_zone_fragmentation_score(pool, z->id)) <= high) {
			continue;
		}
		zone_lock(z);
		z->c.vm.compact_daemon_wake++;
		zone_unlock(z);
		compact_zone_background(z, order);
		if (order < 0 && gfa_zone_fragmentation_score(pool, z->id) >= score)
			defer = PROACTIVE_DEFER; /* it did not help: back off */
	}
	return NULL;
}

static void compactd_stop_locked(struct gfa_pool *pool)
{
	__atomic_store_n(&pool->compactd_stop, true, __ATOMIC_RELEASE);
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		struct gfa_zone *z = &pool->zones[i];

		if (!z->compactd_running)
			continue;
		zone_lock(z);
		pthread_cond_broadcast(&z->compactd_wait);
		zone_unlock(z);
		pthread_join(z->compactd, NULL);
		z->compactd_running = false;
	}
}

int gfa_compactd_start(struct gfa_pool *pool)
{
	int err = 0;

	if (!pool)
		return GFA_EFAULT;
	/* two starts at once would both see no worker and start one each */
	pthread_mutex_lock(&pool->compactd_lock);
	if (pool->zones[0].compactd_running)
		err = -EALREADY;
	else
		__atomic_store_n(&pool->compactd_stop, false, __ATOMIC_RELEASE);
	for (unsigned int i = 0; !err && i < pool->nr_zones; i++) {
		struct gfa_zone *z = &pool->zones[i];

		err = -pthread_create(&z->compactd, NULL, compactd_main, z);
		if (err)
			compactd_stop_locked(pool);
		else
			z->compactd_running = true;
	}
	pthread_mutex_unlock(&pool->compactd_lock);
	return err;
}

int gfa_compactd_stop(struct gfa_pool *pool)
{
	if (!pool)
		return 0; /* a stop of nothing, as every stop call */
	pthread_mutex_lock(&pool->compactd_lock);
	compactd_stop_locked(pool);
	pthread_mutex_unlock(&pool->compactd_lock);
	return 0;
}

void gfa_compactd_wake(struct gfa_pool *pool, unsigned int zone)
{
	struct gfa_zone *z;

	if (!pool || zone >= pool->nr_zones)
		return;
	z = &pool->zones[zone];
	zone_lock(z);
	z->compactd_wake = true;
	pthread_cond_signal(&z->compactd_wait);
	zone_unlock(z);
}
