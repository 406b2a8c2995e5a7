/* SPDX-License-Identifier: MIT */
/* The guest object, shared by vmm/guest.c and vmm/balloon.c.  Not installed. */
#ifndef GFA_VMM_GUEST_INTERNAL_H
#define GFA_VMM_GUEST_INTERNAL_H
#include <pthread.h>
#include <gfa/vmm.h>
#include "allocator/bug.h"

#define RANGE_FRAMES  GFA_PAGEBLOCK_FRAMES
#define RANGE_BYTES   (RANGE_FRAMES << GFA_FRAME_SHIFT)
#define NO_PFN        UINT64_MAX
#define NOT_HEAD      0xff

struct gfa_guest {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	uint64_t id;
	unsigned int zone;
	uint64_t size, nr_frames;
	char *win;
	void *reserve;
	size_t reserve_len;
	pthread_mutex_t lock;   /* recursive: collapse calls back into migrate */
	uint64_t *pfn;          /* gfn -> pfn, NO_PFN when ballooned out */
	uint8_t *order;         /* gfn -> order of the block starting there, NOT_HEAD */
	struct gfa_guest_vcpu_ops ops;
	void *ops_ctx;
	struct gfa_guest_stat st;
	uint64_t collapse_lo;   /* first gfn of the range being collapsed, or NO_PFN */
	bool registered;        /* our owner ops are in the pool: destroy removes them */
	bool small_only;       /* never an order-9 block (cfg->small_only; collapse aside) */
};

/* All with g->lock held. */
int guest_map(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order);
void guest_record(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order);
/* Allocate, zero where dirty, index and map one block at gfn. */
int guest_take(struct gfa_guest *g, struct gfa_pcp *pcp, uint64_t gfn, unsigned int order,
	       unsigned int flags);
/* Free the block at gfn (marked dirty, gfns cleared); waits out a move, lock kept. */
void guest_release_block(struct gfa_guest *g, uint64_t gfn);
#endif
