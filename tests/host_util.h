/*
 * Helpers shared by the tests of the vmm layer (header-only, static): a pool with its
 * host backing and maybe a guest, the backing's host bytes, a guest's fill pattern, and
 * a done callback that records its result.
 */
#ifndef GFA_TEST_HOST_UTIL_H
#define GFA_TEST_HOST_UTIL_H
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <gfa/vmm.h>
#include "tests/test_util.h"

struct tu_host {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g; /* NULL unless guest_bytes was given */
};

/* A pool of pool_bytes with a backing of bc, and a guest of guest_bytes when not 0. */
static inline struct tu_host tu_host_new(uint64_t pool_bytes, const struct gfa_backing_config *bc,
					 uint64_t guest_bytes)
{
	struct gfa_guest_config gc = { .mem_bytes = guest_bytes };
	struct tu_host h = { tu_pool(pool_bytes >> GFA_FRAME_SHIFT), NULL, NULL };

	h.b = gfa_backing_create(h.pool, bc);
	cr_assert_not_null(h.b, "backing: %s", strerror(errno));
	if (guest_bytes) {
		h.g = gfa_guest_create(h.pool, h.b, &gc);
		cr_assert_not_null(h.g, "guest: %s", strerror(errno));
	}
	return h;
}

/* Destroys the guest (if any), checks the pool, destroys the backing and the pool. */
static inline void tu_host_done(struct tu_host *h)
{
	gfa_guest_destroy(h->g);
	ASSERT_POOL_OK(h->pool);
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

/* Host memory behind zone 0 of the backing, in bytes. */
static inline int64_t tu_backed(struct gfa_backing *b)
{
	return gfa_memfd_allocated_bytes(gfa_backing_zone_fd(b, 0));
}

/* One word per 4 KiB of the guest: seed ^ its word index. */
static inline void tu_fill(struct gfa_guest *g, uint64_t seed)
{
	uint64_t *w = gfa_guest_hva(g);

	for (uint64_t i = 0; i < gfa_guest_size(g) / 8; i += 512)
		w[i] = seed ^ i;
}

/* Words unlike tu_fill()'s outside the bytes [lo, hi) (lo == hi: all of them). */
static inline uint64_t tu_fill_bad(struct gfa_guest *g, uint64_t seed, uint64_t lo, uint64_t hi)
{
	const uint64_t *w = gfa_guest_hva(g);
	uint64_t bad = 0;

	for (uint64_t i = 0; i < gfa_guest_size(g) / 8; i += 512)
		if ((i * 8 < lo || i * 8 >= hi) && w[i] != (seed ^ i))
			bad++;
	return bad;
}

/* A done callback (a report's, a balloon's) that records its result; tu_rdone_wait() waits. */
struct tu_rdone {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int calls, result;
};
#define TU_RDONE_INIT                                                     \
	{                                                                 \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 1 \
	}

static inline void tu_rdone_fn(void *cookie, int result)
{
	struct tu_rdone *d = cookie;

	pthread_mutex_lock(&d->lock);
	d->calls++;
	d->result = result;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

/* Until the callback has been called calls times in all. */
static inline void tu_rdone_wait(struct tu_rdone *d, int calls)
{
	pthread_mutex_lock(&d->lock);
	while (d->calls < calls)
		pthread_cond_wait(&d->cond, &d->lock);
	pthread_mutex_unlock(&d->lock);
}
#endif
