// SPDX-License-Identifier: MIT
/*
 * Returning memory to the host, off every vCPU's path: one io_uring release engine per
 * zone memfd and one thread that runs the allocator's depopulation policy.  Each pass,
 * per zone, either grows (populates released frames back up to the reserve) or shrinks
 * (punches the ranges the policy picks) - never both, as in "percpu: partial chunk
 * depopulation" (docs/decisions.md, entry 21).  Completions come
 * back on the engine threads and put the frames back, released (and clean) or still
 * populated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <gfa/vmm.h>
#include "backing_internal.h"
#include "allocator/layers.h"
#include "common/ktime.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PASS_RANGES 256

struct hr_range {
	struct gfa_host_return *hr;
	unsigned int zone;
	uint64_t pfn, nr;
};

struct gfa_host_return {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return_config cfg;
	unsigned int nr_zones;
	struct gfa_release_engine *engine[GFA_MAX_ZONES];
	/* a zone whose releases fail backs off: 1, 2, 4 .. 64 idle passes */
	_Atomic bool failed[GFA_MAX_ZONES];
	_Atomic bool released[GFA_MAX_ZONES]; /* a punch succeeded since the last pass */
	unsigned int backoff[GFA_MAX_ZONES], skip[GFA_MAX_ZONES];
	/* a zone the host cannot populate (memory limits) stops growing the same way */
	unsigned int grow_backoff[GFA_MAX_ZONES], grow_skip[GFA_MAX_ZONES];
	double above_since[GFA_MAX_ZONES]; /* ms since populated free > high; 0: not */
	bool urgent;                       /* a kick: release now, without settling */
	unsigned int quiescing;            /* quiesce waiters: every pass is urgent meanwhile */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, kicked;
	uint64_t idle_passes;             /* passes that found nothing and nothing in flight */
	_Atomic uint64_t inflight;        /* ranges submitted, not yet completed */
	struct gfa_host_return_stat st;   /* under lock, except the atomics below */
	struct gfa_host_return_stat pass; /* this pass's counts: the thread's own */
	_Atomic uint64_t bytes_released, bytes_failed;
	double next_pcp_drain; /* ms: when idle caches are looked at next */
};

/* Engine thread: a punch finished. */
static void hr_done(void *cookie, uint64_t offset, uint64_t len, int result)
{
	struct hr_range *r = cookie;
	struct gfa_host_return *hr = r->hr;
	uint64_t was;
	int err;

	(void)offset;
	/* (released frames lose their dirty marks in the pool's released hook) */
	if (!result) {
		atomic_store(&hr->released[r->zone], true);
	} else {
		atomic_store(&hr->failed[r->zone], true);
	}
	err = zone_release_done(hr->pool, r->pfn, r->nr, result == 0);
	GFA_BUG_ON(err); /* the range this thread took in flight: never refused */
	atomic_fetch_add(result ? &hr->bytes_failed : &hr->bytes_released, len);
	free(r);
	was = atomic_fetch_sub(&hr->inflight, 1);
	GFA_BUG_ON(!was); /* one a submitted range */
	if (was == 1) {
		pthread_mutex_lock(&hr->lock);
		pthread_cond_broadcast(&hr->cond);
		pthread_mutex_unlock(&hr->lock);
	}
}

static int hr_submit(struct gfa_host_return *hr, unsigned int zone,
		     const struct gfa_frame_range *fr)
{
	struct hr_range *r = malloc(sizeof(*r));
	uint64_t start, nr;
	int err;

	gfa_zone_span(hr->pool, zone, &start, &nr);
	/* zone_release_take's range: inside the zone */
	GFA_BUG_ON(fr->pfn < start || !fr->nr || fr->nr > nr - (fr->pfn - start));
	if (!r) {
		zone_release_done(hr->pool, fr->pfn, fr->nr, false);
		atomic_store(&hr->failed[zone], true); /* back off, as after a failed punch */
		return -ENOMEM;
	}
	*r = (struct hr_range){ hr, zone, fr->pfn, fr->nr };
	atomic_fetch_add(&hr->inflight, 1);
	err = gfa_release_submit(hr->engine[zone], (fr->pfn - start) << GFA_FRAME_SHIFT,
				 fr->nr << GFA_FRAME_SHIFT, hr_done, r);
	if (err) {
		/* nothing was queued: the frames go back populated, and the zone backs off
		 * as after a failed punch (a lasting error would busy-loop the thread) */
		atomic_fetch_sub(&hr->inflight, 1);
		zone_release_done(hr->pool, fr->pfn, fr->nr, false);
		atomic_store(&hr->failed[zone], true);
		free(r);
	}
	return err;
}

/* A failure: skip the next 1, 2, 4 .. 64 passes of that work. */
static void hr_back_off(struct gfa_host_return *hr, unsigned int *backoff, unsigned int *skip)
{
	*backoff = *backoff ? *backoff * 2 : 1;
	if (*backoff > 64)
		*backoff = 64;
	*skip = *backoff;
	hr->pass.backoffs++;
}

/*
 * Fault one released range back in.  Only a kernel without MADV_POPULATE_WRITE (before
 * 5.14: EINVAL) gets the frames written instead; any other failure (ENOMEM at a memory
 * limit, EFAULT on a hugetlbfs pool out of pages) would fault the same way on a write,
 * fatally (SIGBUS, the OOM killer), so the range goes back released.
 */
static bool hr_populate(void *addr, uint64_t len)
{
	if (!madvise(addr, len, MADV_POPULATE_WRITE))
		return true;
	if (errno != EINVAL)
		return false;
	for (uint64_t off = 0; off < len; off += GFA_FRAME_SIZE)
		((volatile char *)addr)[off] = 0;
	return true;
}

/* Grow: fault released frames back in ahead of allocations.  Returns ranges populated. */
static unsigned int hr_grow(struct gfa_host_return *hr, unsigned int zone,
			    struct gfa_frame_range *fr)
{
	unsigned int done = 0;
	bool failed = false;
	int n;

	if (hr->grow_skip[zone]) {
		hr->grow_skip[zone]--;
		return 0;
	}
	n = zone_populate_take(hr->pool, zone, fr, PASS_RANGES, hr->cfg.max_frames_per_pass);
	for (int i = 0; i < n; i++) {
		uint64_t len = fr[i].nr << GFA_FRAME_SHIFT;

		int err;

		if (!hr_populate(gfa_pfn_to_addr(hr->pool, fr[i].pfn), len)) {
			err = zone_populate_failed(hr->pool, fr[i].pfn, fr[i].nr);
			GFA_BUG_ON(err); /* our range in flight */
			failed = true;
			continue;
		}
		err = zone_populate_done(hr->pool, fr[i].pfn, fr[i].nr);
		GFA_BUG_ON(err);
		hr->pass.bytes_populated += len;
		done++;
	}
	if (failed) {
		hr_back_off(hr, &hr->grow_backoff[zone], &hr->grow_skip[zone]);
	} else if (done) {
		hr->grow_backoff[zone] = 0;
	}
	return done;
}

/* After failed releases, wait a growing number of passes before trying again. */
static bool hr_backing_off(struct gfa_host_return *hr, unsigned int zone)
{
	bool released = atomic_exchange(&hr->released[zone], false);

	if (!atomic_exchange(&hr->failed[zone], false)) {
		if (released)
			hr->backoff[zone] = 0; /* releases work again: start over at 1 */
	} else {
		hr_back_off(hr, &hr->backoff[zone], &hr->skip[zone]);
	}
	if (hr->skip[zone]) {
		hr->skip[zone]--;
		return true;
	}
	return false;
}

/*
 * T3: a live set that oscillates (a VM stops, another starts) must not release and
 * repopulate the same frames in one balance epoch.  Timer passes release only after
 * populated free memory has stayed above the reserve for settle_ms; kicks (balloon
 * inflation) release at once.
 */
static bool hr_settled(struct gfa_host_return *hr, unsigned int zone, bool urgent)
{
	struct gfa_zone_stat st;
	struct gfa_release_policy rp;
	double now = (double)ktime_get_ns() / 1e6;

	if (gfa_zone_stat(hr->pool, zone, &st) || gfa_zone_get_release_policy(hr->pool, zone, &rp))
		return false;
	if (st.nr_free_buddy - st.nr_released <= rp.high) {
		hr->above_since[zone] = 0;
		return false;
	}
	if (!hr->above_since[zone])
		hr->above_since[zone] = now;
	return urgent || now - hr->above_since[zone] >= hr->cfg.settle_ms;
}

static unsigned int hr_shrink(struct gfa_host_return *hr, unsigned int zone,
			      struct gfa_frame_range *fr, bool urgent)
{
	int n;

	/* the settle clock runs on every pass, backing off or not */
	bool settled = hr_settled(hr, zone, urgent);

	if (hr_backing_off(hr, zone) || !settled)
		return 0;
	n = zone_release_take(hr->pool, zone, fr, PASS_RANGES, hr->cfg.max_frames_per_pass);
	if (n <= 0) {
		hr->backoff[zone] = 0;
		return 0;
	}
	gfa_release_plug(hr->engine[zone]); /* one burst: merge what is adjacent */
	for (int i = 0; i < n; i++)
		hr_submit(hr, zone, &fr[i]);
	gfa_release_unplug(hr->engine[zone]);
	hr->pass.ranges += (uint64_t)n;
	return (unsigned int)n;
}

/* One pass over the zones; returns ranges acted on. */
static unsigned int hr_pass(struct gfa_host_return *hr, bool urgent)
{
	struct gfa_frame_range fr[PASS_RANGES];
	unsigned int work = 0;

	for (unsigned int z = 0; z < hr->nr_zones; z++) {
		unsigned int grown = hr_grow(hr, z, fr);

		if (grown) {
			hr->pass.grows++;
			work += grown;
			hr->above_since[z] = 0; /* below low: the settle clock restarts */
			continue;               /* never grow and shrink in one pass */
		}
		grown = hr_shrink(hr, z, fr, urgent);
		hr->pass.shrinks += grown != 0;
		work += grown;
	}
	hr->pass.passes++;
	return work;
}

/* ---- idle scrubbing: zero dirty free frames before anyone asks for them ---- */

static bool hr_want_dirty(void *ctx, uint64_t pfn, unsigned int order)
{
	return gfa_backing_block_dirty(ctx, pfn, order);
}

/*
 * Xen's idle scrub: when a pass found nothing to release, take dirty free blocks off
 * the lists a batch at a time, zero their dirty frames and put them back clean (at the
 * head), so the next VM start does not pay for zeroing.  Returns frames scrubbed.
 */
static uint64_t hr_scrub(struct gfa_host_return *hr)
{
	struct gfa_frame_range fr[PASS_RANGES];
	uint64_t done = 0;

	if (hr->cfg.no_scrub)
		return 0;
	for (unsigned int z = 0; z < hr->nr_zones; z++) {
		int n = zone_scrub_take(hr->pool, z, hr_want_dirty, hr->b, fr, PASS_RANGES,
					hr->cfg.scrub_frames_per_pass);

		for (int i = 0; i < n; i++) {
			/* whole runs at a time, with non-temporal stores (vmm/zero.c) */
			int64_t z0 = backing_prepare_range(hr->b, fr[i].pfn, fr[i].nr);
			int err;

			GFA_BUG_ON(z0 < 0 || (uint64_t)z0 > fr[i].nr); /* a range of the pool */
			done += z0 > 0 ? (uint64_t)z0 : 0;
			err = zone_populate_done(hr->pool, fr[i].pfn, fr[i].nr);
			GFA_BUG_ON(err);
		}
	}
	hr->pass.bytes_scrubbed += done << GFA_FRAME_SHIFT;
	return done;
}

/* Fold the pass's counts into the statistics readers see (hr->lock held). */
static void hr_merge_pass(struct gfa_host_return *hr)
{
	hr->st.passes += hr->pass.passes;
	hr->st.shrinks += hr->pass.shrinks;
	hr->st.grows += hr->pass.grows;
	hr->st.ranges += hr->pass.ranges;
	hr->st.backoffs += hr->pass.backoffs;
	hr->st.bytes_populated += hr->pass.bytes_populated;
	hr->st.bytes_scrubbed += hr->pass.bytes_scrubbed;
	hr->st.pcp_frames_drained += hr->pass.pcp_frames_drained;
	memset(&hr->pass, 0, sizeof(hr->pass));
}

/*
 * Frames parked in a cache whose vCPU stopped allocating can be neither merged nor
 * released: every pcp_idle_ms, drain the caches idle that long (one membarrier).
 */
static void hr_drain_idle_caches(struct gfa_host_return *hr)
{
	double now = (double)ktime_get_ns() / 1e6;
	int64_t n;

	if (hr->cfg.no_pcp_drain || now < hr->next_pcp_drain)
		return;
	hr->next_pcp_drain = now + hr->cfg.pcp_idle_ms;
	n = gfa_pool_drain_idle(hr->pool, hr->cfg.pcp_idle_ms);
	if (n > 0)
		hr->pass.pcp_frames_drained += (uint64_t)n;
}

static void *hr_main(void *arg)
{
	struct gfa_host_return *hr = arg;
	bool carry = false;

	pthread_mutex_lock(&hr->lock);
	while (!hr->stop) {
		unsigned int work;
		/* a kick stays urgent until a pass finds nothing more to release */
		bool urgent = hr->urgent || hr->quiescing || carry;

		hr->kicked = hr->urgent = false;
		pthread_mutex_unlock(&hr->lock);
		hr_drain_idle_caches(hr);
		work = hr_pass(hr, urgent);
		if (!work && !atomic_load(&hr->inflight))
			work = hr_scrub(hr) != 0;
		pthread_mutex_lock(&hr->lock);
		hr_merge_pass(hr);
		carry = urgent && work;
		if (!work && !atomic_load(&hr->inflight)) {
			hr->idle_passes++;
			pthread_cond_broadcast(&hr->cond);
		}
		/* one batch in flight at a time: what is in flight cannot be allocated */
		while (atomic_load(&hr->inflight) && !hr->stop)
			pthread_cond_wait(&hr->cond, &hr->lock);
		if (!hr->kicked && !hr->stop && !work) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)hr->cfg.interval_ms * 1000000L;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&hr->cond, &hr->lock, &ts);
		}
	}
	pthread_mutex_unlock(&hr->lock);
	return NULL;
}

struct gfa_host_return *gfa_host_return_start(struct gfa_pool *pool, struct gfa_backing *b,
					      const struct gfa_host_return_config *cfg)
{
	static const struct gfa_host_return_config defaults;
	struct gfa_host_return *hr;

	if (!pool || !b) {
		pool_count_error(pool, GFA_EFAULT);
		errno = EFAULT;
		return NULL;
	}
	/* the frames to release come from pool, the holes are punched in b's memfds */
	if (backing_pool(b) != pool || (cfg && !GFA_RESERVED_ZERO(cfg))) {
		errno = EINVAL;
		return NULL;
	}
	hr = calloc(1, sizeof(*hr));
	if (!hr)
		return NULL;
	hr->pool = pool;
	hr->b = b;
	hr->cfg = cfg ? *cfg : defaults;
	if (!hr->cfg.interval_ms)
		hr->cfg.interval_ms = 100;
	if (!hr->cfg.pcp_idle_ms)
		hr->cfg.pcp_idle_ms = 1000;
	if (!hr->cfg.settle_ms && !hr->cfg.no_settle)
		hr->cfg.settle_ms = 1000;
	if (!hr->cfg.scrub_frames_per_pass)
		hr->cfg.scrub_frames_per_pass = (16ULL << 20) >> GFA_FRAME_SHIFT;
	if (!hr->cfg.max_frames_per_pass)
		hr->cfg.max_frames_per_pass = (64ULL << 20) >> GFA_FRAME_SHIFT;
	hr->nr_zones = gfa_pool_nr_zones(pool);
	pthread_mutex_init(&hr->lock, NULL);
	pthread_cond_init(&hr->cond, NULL);
	/* one per backing: a second would release the same frames */
	if (backing_attach_host_return(b, hr, gfa_host_return_kick)) {
		gfa_host_return_stop(hr);
		errno = EBUSY;
		return NULL;
	}
	for (unsigned int z = 0; z < hr->nr_zones; z++) {
		struct gfa_release_config rc = hr->cfg.engine;

		rc.force_sync = rc.force_sync || hr->cfg.force_sync;
		hr->engine[z] = gfa_release_create(gfa_backing_zone_fd(b, z),
						   gfa_backing_zone_base(b, z), &rc);
		if (!hr->engine[z]) {
			int err = errno;

			gfa_host_return_stop(hr);
			errno = err;
			return NULL;
		}
	}
	if (pthread_create(&hr->thread, NULL, hr_main, hr)) {
		gfa_host_return_stop(hr);
		errno = EAGAIN;
		return NULL;
	}
	return hr;
}

void gfa_host_return_kick(struct gfa_host_return *hr)
{
	if (!hr)
		return;
	pthread_mutex_lock(&hr->lock);
	hr->kicked = hr->urgent = true;
	pthread_cond_broadcast(&hr->cond);
	pthread_mutex_unlock(&hr->lock);
}

int gfa_host_return_quiesce(struct gfa_host_return *hr, int timeout_ms)
{
	struct timespec ts;
	uint64_t seen;
	int err = 0;

	if (!hr)
		return -EFAULT;
	if (timeout_ms < 0)
		timeout_ms = 0; /* (a negative tv_nsec made timedwait fail at once) */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&hr->lock);
	seen = hr->idle_passes;
	hr->quiescing++;
	hr->kicked = true;
	pthread_cond_broadcast(&hr->cond);
	/* two idle passes after the kick: the work the first one saw has completed */
	while (hr->idle_passes < seen + 2 && !err && !hr->stop) {
		/* keep the thread passing until it finds nothing, settled or not */
		hr->kicked = hr->urgent = true;
		pthread_cond_broadcast(&hr->cond);
		/* (the pass may have landed as the wait timed out: the loop looks again) */
		if (pthread_cond_timedwait(&hr->cond, &hr->lock, &ts) == ETIMEDOUT &&
		    hr->idle_passes < seen + 2)
			err = -ETIMEDOUT;
	}
	if (hr->stop && !err)
		err = -ECANCELED; /* a stop overlapped: it waits for us to leave */
	if (!--hr->quiescing && hr->stop)
		pthread_cond_broadcast(&hr->cond);
	pthread_mutex_unlock(&hr->lock);
	return err;
}

int gfa_host_return_stop(struct gfa_host_return *hr)
{
	if (!hr)
		return 0;
	if (hr->b) /* first: no kick through the backing reaches hr after this */
		backing_detach_host_return(hr->b, hr);
	pthread_mutex_lock(&hr->lock);
	hr->stop = true;
	pthread_cond_broadcast(&hr->cond);
	pthread_mutex_unlock(&hr->lock);
	if (hr->thread)
		pthread_join(hr->thread, NULL);
	/* a quiesce still waiting on another thread leaves before hr goes */
	pthread_mutex_lock(&hr->lock);
	while (hr->quiescing) {
		pthread_cond_broadcast(&hr->cond);
		pthread_cond_wait(&hr->cond, &hr->lock);
	}
	pthread_mutex_unlock(&hr->lock);
	for (unsigned int z = 0; z < hr->nr_zones; z++)
		gfa_release_destroy(hr->engine[z]); /* finishes what is queued */
	pthread_mutex_destroy(&hr->lock);
	pthread_cond_destroy(&hr->cond);
	free(hr);
	return 0;
}

int gfa_host_return_stat(struct gfa_host_return *hr, struct gfa_host_return_stat *st)
{
	if (!hr)
		return -EFAULT;
	if (!st)
		return pool_count_error(hr->pool, GFA_EFAULT);
	pthread_mutex_lock(&hr->lock);
	*st = hr->st;
	pthread_mutex_unlock(&hr->lock);
	st->bytes_released = atomic_load(&hr->bytes_released);
	st->bytes_failed = atomic_load(&hr->bytes_failed);
	st->inflight_ranges = atomic_load(&hr->inflight);
	/* the first zone that fell back to sync, if any: one sync zone is news */
	st->mode = gfa_release_mode(hr->engine[0], &st->mode_why);
	for (unsigned int z = 1; z < hr->nr_zones && st->mode && strcmp(st->mode, "sync"); z++)
		if (hr->engine[z]) /* (all there once gfa_host_return_start returned) */
			st->mode = gfa_release_mode(hr->engine[z], &st->mode_why);
	return 0;
}
