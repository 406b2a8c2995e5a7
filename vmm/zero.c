// SPDX-License-Identifier: MIT
/*
 * Zeroing guest frames at the memory's speed.  A frame zeroed for the next guest is not
 * read by the host again, so cached stores (memset) only fill the cache with lines that
 * are written back later: non-temporal stores go to memory directly, at about twice the
 * rate on hosts with AVX-512 (the kernel's clear_page_erms/clear_page_rep make the
 * same trade for its own pages).  The widest store the CPU offers is chosen at run time
 * (CPUID, as the kernel's alternatives do), never with global -m flags: each path is a
 * function compiled for its own target.  GFA_ZERO=avx512|avx2|movnti|memset forces one
 * (tests check each path against memset).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <gfa/vmm.h>
#include "allocator/ktime.h"
#include "allocator/layers.h"
#include "vmm/backing_internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef void (*zero_fn)(void *p, size_t len);

static void zero_memset(void *p, size_t len)
{
	memset(p, 0, len);
}

#if defined(__x86_64__)
/*
 * Each path: cached stores up to the first aligned address and after the last whole
 * vector, non-temporal stores between, then a store fence so the zeroes are globally
 * visible before the frame is handed out (non-temporal stores are weakly ordered).
 */
__attribute__((target("avx512f"))) static void zero_avx512(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 63) & ~(uintptr_t)63);
	const __m512i z = _mm512_setzero_si512();

	if (a >= end || (size_t)(end - a) < 64) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 256 <= end; a += 256) {
		_mm512_stream_si512((void *)a, z);
		_mm512_stream_si512((void *)(a + 64), z);
		_mm512_stream_si512((void *)(a + 128), z);
		_mm512_stream_si512((void *)(a + 192), z);
	}
	for (; a + 64 <= end; a += 64)
		_mm512_stream_si512((void *)a, z);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}

__attribute__((target("avx2"))) static void zero_avx2(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 31) & ~(uintptr_t)31);
	const __m256i z = _mm256_setzero_si256();

	if (a >= end || (size_t)(end - a) < 32) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 128 <= end; a += 128) {
		_mm256_stream_si256((__m256i *)a, z);
		_mm256_stream_si256((__m256i *)(a + 32), z);
		_mm256_stream_si256((__m256i *)(a + 64), z);
		_mm256_stream_si256((__m256i *)(a + 96), z);
	}
	for (; a + 32 <= end; a += 32)
		_mm256_stream_si256((__m256i *)a, z);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}

/* movnti is SSE2, which every x86-64 CPU has. */
static void zero_movnti(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 7) & ~(uintptr_t)7);

	if (a >= end || (size_t)(end - a) < 8) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 32 <= end; a += 32) {
		_mm_stream_si64((long long *)a, 0);
		_mm_stream_si64((long long *)(a + 8), 0);
		_mm_stream_si64((long long *)(a + 16), 0);
		_mm_stream_si64((long long *)(a + 24), 0);
	}
	for (; a + 8 <= end; a += 8)
		_mm_stream_si64((long long *)a, 0);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}
#endif

struct zero_method {
	const char *name;
	zero_fn fn;
	int (*usable)(void);
};

static int always(void)
{
	return 1;
}

#if defined(__x86_64__)
static int has_avx512(void)
{
	/* (also checks that the OS saves the ZMM state: XCR0 through xgetbv) */
	return __builtin_cpu_supports("avx512f");
}

static int has_avx2(void)
{
	return __builtin_cpu_supports("avx2");
}
#endif

/* Best first: the automatic choice is the first usable one. */
static const struct zero_method methods[] = {
#if defined(__x86_64__)
	{ "avx512", zero_avx512, has_avx512 },
	{ "avx2", zero_avx2, has_avx2 },
	{ "movnti", zero_movnti, always },
#endif
	{ "memset", zero_memset, always },
};
#define NR_METHODS (sizeof(methods) / sizeof(methods[0]))

static _Atomic(const struct zero_method *) current;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static const struct zero_method *find_method(const char *name)
{
	for (size_t i = 0; i < NR_METHODS; i++)
		if (!strcmp(methods[i].name, name))
			return &methods[i];
	return NULL;
}

static void zero_init(void)
{
	const char *env = getenv("GFA_ZERO");
	const struct zero_method *m = env && *env ? find_method(env) : NULL;

	if (!m || !m->usable()) {
		m = methods;
		while (!m->usable())
			m++;            /* memset, the last, always is */
	}
	atomic_store(&current, m);
}

static const struct zero_method *method(void)
{
	pthread_once(&zero_once, zero_init);
	return atomic_load_explicit(&current, memory_order_relaxed);
}

void gfa_zero(void *p, size_t len)
{
	if (p && len)
		method()->fn(p, len);
}

const char *gfa_zero_method(void)
{
	return method()->name;
}

int gfa_zero_set_method(const char *name)
{
	const struct zero_method *m;

	if (!name)
		return GFA_EFAULT;
	method();               /* (the first choice must not overwrite this one later) */
	if (!*name) {
		m = methods;
		while (!m->usable())
			m++;
	} else {
		m = find_method(name);
		if (!m)
			return -EINVAL;
		if (!m->usable())
			return -ENOTSUP;
	}
	atomic_store(&current, m);
	return 0;
}

int gfa_zero_method_usable(const char *name)
{
	const struct zero_method *m = name ? find_method(name) : NULL;

	return m && m->usable();
}

/* ---- zeroing in the background: what a stopped VM left dirty ---- */

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
#define ZERO_BATCH_FRAMES (4 * GFA_PAGEBLOCK_FRAMES)    /* 8 MiB: a few ms */
#define ZERO_SETTLE_NS    (10 * 1000000ULL)
#define ZERO_RETRY_NS     (1000000ULL)  /* after a zone said an allocation waits */

struct zero_worker {
	struct gfa_backing *b;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool kicked, stop, busy;
	uint64_t quiet_at;              /* (CLOCK_MONOTONIC ns) no batch before it */
	_Atomic uint64_t frames;        /* zeroed in the background, for tests and stats */
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

			if (done > 0)
				atomic_fetch_add(&zw->frames, (uint64_t)done);
			zone_populate_done(pool, fr[i].pfn, fr[i].nr);
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

		if (!zw->kicked) {
			pthread_cond_wait(&zw->cond, &zw->lock);
			continue;
		}
		if (ktime_get_ns() < zw->quiet_at) {
			zw_wait_until(zw, zw->quiet_at);        /* (a start is under way) */
			continue;
		}
		zw->busy = true;
		pthread_mutex_unlock(&zw->lock);
		taken = zero_batch(zw);
		pthread_mutex_lock(&zw->lock);
		zw->busy = false;
		if (!taken)
			zw->kicked = false;     /* all clean (or in others' hands): sleep */
		pthread_cond_broadcast(&zw->cond);
		if (taken == -EAGAIN && !zw->stop)      /* still kicked: let the waiter in */
			zw_wait_until(zw, ktime_get_ns() + ZERO_RETRY_NS);
	}
	pthread_mutex_unlock(&zw->lock);
	return NULL;
}

struct zero_worker *zero_worker_start(struct gfa_backing *b)
{
	struct zero_worker *zw = calloc(1, sizeof(*zw));
	pthread_condattr_t attr;

	if (!zw)
		return NULL;
	zw->b = b;
	pthread_mutex_init(&zw->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);      /* (its deadlines are) */
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

void zero_worker_stop(struct zero_worker *zw)
{
	if (!zw)
		return;
	pthread_mutex_lock(&zw->lock);
	zw->stop = true;
	pthread_cond_broadcast(&zw->cond);
	pthread_mutex_unlock(&zw->lock);
	pthread_join(zw->thread, NULL);  /* (its batch is back on the lists: it finishes it) */
	pthread_cond_destroy(&zw->cond);
	pthread_mutex_destroy(&zw->lock);
	free(zw);
}

/* Work, but only after a settle (kick); or put what there is off a settle (!kick). */
static void zw_poke(struct zero_worker *zw, bool kick)
{
	pthread_mutex_lock(&zw->lock);
	zw->kicked |= kick;
	zw->quiet_at = ktime_get_ns() + ZERO_SETTLE_NS;
	pthread_cond_signal(&zw->cond);
	pthread_mutex_unlock(&zw->lock);
}

void zero_worker_kick(struct zero_worker *zw)
{
	zw_poke(zw, true);
}

void zero_worker_defer(struct zero_worker *zw)
{
	zw_poke(zw, false);
}

int zero_worker_quiesce(struct zero_worker *zw, unsigned int timeout_ms)
{
	uint64_t deadline = ktime_get_ns() + timeout_ms * 1000000ULL;
	int err = 0;

	pthread_mutex_lock(&zw->lock);
	while (!err && (zw->kicked || zw->busy))
		err = zw_wait_until(zw, deadline);
	pthread_mutex_unlock(&zw->lock);
	return err ? -ETIMEDOUT : 0;
}

uint64_t zero_worker_frames(struct zero_worker *zw)
{
	return atomic_load(&zw->frames);
}
