/* SPDX-License-Identifier: MIT */
/*
 * Compaction, private to its three files: the control of one run and the helpers both
 * scanners use.
 *
 *   compaction.c          a run from start to finish: setup, the loop, when it is done,
 *                         skip-bit resets, the entry points
 *   compaction_free.c     the free scanner: isolating the target free blocks, the fast
 *                         search through the free lists, compaction_alloc
 *   compaction_migrate.c  the migrate scanner: isolating MOVABLE source blocks, the fast
 *                         search for a source block, migrate_pages
 */
#ifndef GFA_ALLOCATOR_COMPACTION_INTERNAL_H
#define GFA_ALLOCATOR_COMPACTION_INTERNAL_H
#include "allocator/internal.h"

#define COMPACT_CLUSTER_MAX 32
#define COSTLY_ORDER        3
#define MAX_ISOLATED        (2 * COMPACT_CLUSTER_MAX + GFA_PAGEBLOCK_FRAMES)

struct iso_block {
	uint64_t pfn;
	unsigned int order;
	uint64_t owner;
};

struct compact_control {
	struct gfa_zone *zone;
	int order;       /* -1: full compaction */
	unsigned int mt; /* migratetype of the request */
	enum gfa_compact_mode mode;
	bool direct, linear, proactive, whole_zone, daemon, nofallback;
	bool ignore_skip; /* last-resort priority: skip hints off, no fast find */
	uint64_t migrate_pfn, free_pfn;
	uint64_t zone_start, zone_end;
	struct iso_block migrate[MAX_ISOLATED];
	unsigned int nr_migrate;
	struct iso_block freepages[MAX_ISOLATED]; /* isolated free blocks */
	unsigned int nr_free;
	uint64_t nr_free_frames;
	unsigned int fast_search_fail;
	int search_order;
	uint64_t last_block; /* previous migrate source block, for rescan */
	bool rescan, fast_found;
	uint64_t migrate_scanned, free_scanned;
	uint64_t migrate_blocks; /* heads (and list entries) looked at: 4.20's count */
	struct capture_control *capc;
};

static inline struct gfa_frame *FR(struct compact_control *cc, uint64_t pfn)
{
	return pfn_to_frame(cc->zone->pool, pfn);
}

static inline uint64_t pb_start(uint64_t pfn)
{
	return pfn & ~(GFA_PAGEBLOCK_FRAMES - 1);
}

static inline bool pb_skip(struct gfa_zone *z, uint64_t pfn)
{
	return pfn_pageblock(z, pfn)->flags & PB_SKIP;
}

static inline void pb_set_skip(struct gfa_zone *z, uint64_t pfn)
{
	pfn_pageblock(z, pfn)->flags |= PB_SKIP;
}

/* test_and_set_skip(): the skip bit doubles as the ownership token of a source block. */
static inline bool pb_test_and_set_skip(struct gfa_zone *z, uint64_t pfn)
{
	struct gfa_pageblock *pb = pfn_pageblock(z, pfn);
	bool was = pb->flags & PB_SKIP;

	pb->flags |= PB_SKIP;
	return was;
}

/* ---- the free scanner (compaction_free.c) ---- */
void isolate_freepages(struct compact_control *cc);
int64_t compaction_alloc(struct compact_control *cc, unsigned int order);
void release_freepages(struct compact_control *cc);
/* a block isolated as a target: a moved frame's old place goes back as one too */
void cc_add_free(struct compact_control *cc, uint64_t pfn, unsigned int order);
/* the fast searches' shared steps through a free list */
void freelist_rotate_to(struct gfa_pool *pool, struct gfa_free_list *l, uint32_t p);
unsigned int freelist_scan_limit(struct compact_control *cc);

/* ---- the migrate scanner (compaction_migrate.c) ---- */
void isolate_migratepages(struct compact_control *cc);
void migrate_pages(struct compact_control *cc);
#endif
