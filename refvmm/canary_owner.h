/*
 * A test owner of MOVABLE blocks that keeps a canary in every frame it owns, so tests
 * can prove compaction loses or mixes up nothing.  Header-only (static), used by the
 * compaction tests and bench/thpscale (so it lives here, below both).
 *
 * Each owner has "logical pages" (like guest frame numbers): page i lives in some block;
 * frame j of page i holds the canary (owner, i, j, generation) in its first 32 bytes and
 * a fill byte elsewhere.  The migrate op copies, then repoints the page.  The owner's
 * lock serialises its frees with its migrate op, the contract gfa_owner_ops asks for.
 */
#ifndef GFA_REFVMM_CANARY_OWNER_H
#define GFA_REFVMM_CANARY_OWNER_H
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <gfa/allocator.h>
#include "allocator/layers.h"

struct canary {
	uint64_t owner, page, frame, magic;
};
#define CANARY_MAGIC 0x6766615f63616e61ULL

struct canary_owner {
	struct gfa_pool *pool;
	uint64_t id;
	pthread_mutex_t lock;
	uint64_t npages;
	uint64_t *pfn; /* page -> head pfn, UINT64_MAX if none */
	uint64_t *rev; /* head pfn -> page, UINT64_MAX if none */
	unsigned int *order;
	uint64_t moves;
	int refuse; /* migrate returns this when non-zero */
	bool touch; /* write/verify frame memory (needs backing) */
};

static inline void co_write(struct canary_owner *o, uint64_t page)
{
	for (uint64_t j = 0; j < (1UL << o->order[page]); j++) {
		struct canary *c = gfa_pfn_to_addr(o->pool, o->pfn[page] + j);

		*c = (struct canary){ o->id, page, j, CANARY_MAGIC };
	}
}

/* 0 when every frame of page holds its canary. */
static inline int co_verify_page(struct canary_owner *o, uint64_t page)
{
	for (uint64_t j = 0; j < (1UL << o->order[page]); j++) {
		struct canary *c = gfa_pfn_to_addr(o->pool, o->pfn[page] + j);

		if (c->owner != o->id || c->page != page || c->frame != j ||
		    c->magic != CANARY_MAGIC)
			return -1;
	}
	return 0;
}

static int co_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct canary_owner *o = ctx;
	int ret = 0;

	(void)owner;
	pthread_mutex_lock(&o->lock);
	if (o->refuse) {
		ret = o->refuse;
		goto out;
	}
	/* allocated but not recorded yet (co_alloc has not taken the lock): not ours to
	 * move yet, the page table would miss it - refuse, compaction tries later */
	if (o->rev[src] == UINT64_MAX) {
		ret = -EAGAIN;
		goto out;
	}
	if (o->touch)
		memcpy(gfa_pfn_to_addr(o->pool, dst), gfa_pfn_to_addr(o->pool, src),
		       GFA_FRAME_SIZE << order);
	/* repoint the page that lived at src */
	o->pfn[o->rev[src]] = dst;
	o->rev[dst] = o->rev[src];
	o->rev[src] = UINT64_MAX;
	o->moves++;
out:
	pthread_mutex_unlock(&o->lock);
	return ret;
}

static const struct gfa_owner_ops co_ops = { .migrate = co_migrate, .collapsed = NULL };

static inline struct canary_owner *co_create(struct gfa_pool *pool, uint64_t id, uint64_t npages,
					     bool touch)
{
	struct canary_owner *o = calloc(1, sizeof(*o));

	o->pool = pool;
	o->id = id;
	o->npages = npages;
	o->touch = touch;
	uint64_t start, n, span = 0;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		gfa_zone_span(pool, z, &start, &n);
		span = start + n;
	}
	o->rev = malloc(span * sizeof(*o->rev));
	memset(o->rev, 0xff, span * sizeof(*o->rev));
	o->pfn = malloc(npages * sizeof(*o->pfn));
	o->order = calloc(npages, sizeof(*o->order));
	for (uint64_t i = 0; i < npages; i++)
		o->pfn[i] = UINT64_MAX;
	pthread_mutex_init(&o->lock, NULL);
	if (gfa_owner_register(pool, id, &co_ops, o)) {
		free(o->pfn);
		free(o->rev);
		free(o->order);
		free(o);
		return NULL;
	}
	return o;
}

static inline void co_destroy(struct canary_owner *o)
{
	gfa_owner_register(o->pool, o->id, NULL, NULL);
	free(o->pfn);
	free(o->rev);
	free(o->order);
	free(o);
}

/* Allocate logical page `page` as a block of `order`; 0 or the allocator's error. */
static inline int co_alloc(struct canary_owner *o, struct gfa_pcp *pcp, unsigned int zone,
			   uint64_t page, unsigned int order)
{
	int64_t pfn = pcp ? gfa_pcp_alloc(pcp, order, GFA_MT_MOVABLE, o->id, 0) :
			    gfa_alloc(o->pool, zone, order, GFA_MT_MOVABLE, o->id, 0);

	if (pfn < 0)
		return (int)pfn;
	pthread_mutex_lock(&o->lock);
	o->pfn[page] = (uint64_t)pfn;
	o->rev[pfn] = page;
	o->order[page] = order;
	if (o->touch)
		co_write(o, page);
	pthread_mutex_unlock(&o->lock);
	return 0;
}

/* Free logical page `page`, retrying while compaction is moving it. */
static inline int co_free(struct canary_owner *o, struct gfa_pcp *pcp, uint64_t page)
{
	int err;

	for (;;) {
		pthread_mutex_lock(&o->lock);
		err = pcp ? gfa_pcp_free(pcp, o->pfn[page], o->order[page], o->id) :
			    gfa_free(o->pool, o->pfn[page], o->order[page], o->id);
		if (!err) {
			o->rev[o->pfn[page]] = UINT64_MAX;
			o->pfn[page] = UINT64_MAX;
		}
		pthread_mutex_unlock(&o->lock);
		if (err != GFA_EBUSY)
			return err;
		sched_yield();
	}
}

/* Check every live page: canary intact and the pool agrees it is ours. */
static inline int co_verify_all(struct canary_owner *o, uint64_t *bad_page)
{
	int ret = 0;

	pthread_mutex_lock(&o->lock);
	for (uint64_t p = 0; p < o->npages && !ret; p++) {
		struct gfa_frame_info fi;

		if (o->pfn[p] == UINT64_MAX)
			continue;
		if (gfa_frame_lookup(o->pool, o->pfn[p], &fi) || fi.head_pfn != o->pfn[p] ||
		    (fi.state != GFA_FRAME_ALLOCATED && fi.state != GFA_FRAME_ISOLATED) ||
		    fi.owner != o->id || fi.order != o->order[p] ||
		    (o->touch && co_verify_page(o, p))) {
			ret = -1;
			if (bad_page)
				*bad_page = p;
		}
	}
	pthread_mutex_unlock(&o->lock);
	return ret;
}

/* A pool whose zones are backed by plain anonymous memory (for canaries). */
static inline void *co_back_pool(struct gfa_pool *pool)
{
	uint64_t start, n, end = 0;
	char *mem;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		gfa_zone_span(pool, z, &start, &n);
		end = start + n;
	}
	mem = aligned_alloc(1UL << 21, end << GFA_FRAME_SHIFT);
	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		gfa_zone_span(pool, z, &start, &n);
		zone_set_backing(pool, z, mem + (start << GFA_FRAME_SHIFT), -1);
	}
	return mem;
}
#endif
