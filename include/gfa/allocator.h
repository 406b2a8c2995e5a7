/* SPDX-License-Identifier: MIT */
/*
 * gfa allocator layer: pools, zones, the buddy allocator, per-vCPU caches (pcp),
 * statistics and the invariant checker.  Pure logic: no KVM, io_uring or libnuma.
 *
 * Vocabulary is the kernel's: a frame is 4 KiB, a pfn its index in the pool, a block
 * of order k is 2^k frames aligned to 2^k, a pageblock is order 9 (2 MiB) and carries
 * a migratetype and a skip bit.  A pool holds one or more zones, each a contiguous pfn
 * range with its own lock and free lists.
 *
 * Errors: every function that can fail returns a negative errno (or, for functions
 * returning a pfn, a negative errno in an int64_t).  Each error below is counted in the
 * pool's statistics (gfa_pool_vmstat: "err_*") and leaves every frame where it was.
 *
 *   GFA_EFAULT      -EFAULT      NULL pool, cache or output pointer
 *   GFA_ERANGE      -ERANGE      pfn outside the pool, or zone index out of range
 *   GFA_EALIGN      -EINVAL      pfn not aligned to the block's order; bad config
 *   GFA_EORDER      -EDOM        order above GFA_MAX_ORDER
 *   GFA_EMIGRATE    -EPROTOTYPE  unknown migratetype (or ISOLATE, which is internal)
 *   GFA_EDOUBLEFREE -EALREADY    freeing a block that is already free
 *   GFA_EWRONGORDER -EMSGSIZE    freeing an allocated block with the wrong order
 *   GFA_ENOTHEAD    -ENOENT      pfn inside a block, not the first frame of one
 *   GFA_EOWNER      -EPERM       owner cookie does not match the block's owner
 *   GFA_EBUSY       -EBUSY       block is isolated for a move or in flight to the host
 *   GFA_ENOMEM      -ENOMEM      no free block of that order (after fallbacks)
 *   GFA_ETHREAD     -EDEADLK     a pcp used by two threads at once, or with another pool
 */
#ifndef GFA_ALLOCATOR_H
#define GFA_ALLOCATOR_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GFA_FRAME_SHIFT      12
#define GFA_FRAME_SIZE       (1UL << GFA_FRAME_SHIFT)
#define GFA_MAX_ORDER        10          /* largest block: 4 MiB */
#define GFA_NR_ORDERS        (GFA_MAX_ORDER + 1)
#define GFA_PAGEBLOCK_ORDER  9           /* 2 MiB: THP order, migratetype unit */
#define GFA_PAGEBLOCK_FRAMES (1UL << GFA_PAGEBLOCK_ORDER)
#define GFA_MAX_ZONES        64

#define GFA_EFAULT      (-EFAULT)
#define GFA_ERANGE      (-ERANGE)
#define GFA_EALIGN      (-EINVAL)
#define GFA_EORDER      (-EDOM)
#define GFA_EMIGRATE    (-EPROTOTYPE)
#define GFA_EDOUBLEFREE (-EALREADY)
#define GFA_EWRONGORDER (-EMSGSIZE)
#define GFA_ENOTHEAD    (-ENOENT)
#define GFA_EOWNER      (-EPERM)
#define GFA_EBUSY       (-EBUSY)
#define GFA_ENOMEM      (-ENOMEM)
#define GFA_ETHREAD     (-EDEADLK)

/* Migratetypes, as in the kernel's enum migratetype (PCPTYPES first). */
enum gfa_migratetype {
	GFA_MT_UNMOVABLE = 0,   /* VMM-internal or pinned (device DMA) */
	GFA_MT_MOVABLE,         /* guest RAM: can be moved by copy + remap */
	GFA_MT_RECLAIMABLE,     /* caches the VMM can drop */
	GFA_MT_PCPTYPES,        /* number of types callers may ask for */
	GFA_MT_ISOLATE = GFA_MT_PCPTYPES, /* internal: pageblock being isolated */
	GFA_MT_TYPES
};

/* What a frame is doing right now (gfa_frame_info.state). */
enum gfa_frame_state {
	GFA_FRAME_FREE = 1,     /* in a zone's buddy free lists */
	GFA_FRAME_PCP,          /* on a per-vCPU cache list (counts as free) */
	GFA_FRAME_ALLOCATED,    /* owned by an owner cookie */
	GFA_FRAME_ISOLATED,     /* taken by compaction for a move */
	GFA_FRAME_INFLIGHT,     /* free, with a release to the host in flight */
};

/* Allocation flags. */
#define GFA_ALLOC_NOFALLBACK  0x1u  /* never steal from another migratetype */
#define GFA_ALLOC_NOCOMPACT   0x2u  /* free lists only: no cache drain, no compaction */
/* 0x100 and 0x200 are taken by gfa/numa.h (GFA_NUMA_REMOTE, GFA_NUMA_SMALLER). */

struct gfa_pool;
struct gfa_pcp;

struct gfa_zone_config {
	uint64_t nr_frames;     /* frames in this zone (>= GFA_PAGEBLOCK_FRAMES) */
	int node;               /* NUMA node the zone stands for (label only here) */
};

#define GFA_PCP_BATCH_MAX (1u << 16)   /* frames */
#define GFA_PCP_HIGH_MAX  (1u << 27)   /* frames: 8 x high still fits an int */

struct gfa_pool_config {
	unsigned int nr_zones;  /* 1..GFA_MAX_ZONES */
	struct gfa_zone_config zones[GFA_MAX_ZONES];
	/* pcp sizing; 0 = size from the zone as the kernel does (batch ~63) */
	unsigned int pcp_batch;     /* <= GFA_PCP_BATCH_MAX */
	unsigned int pcp_high;      /* <= GFA_PCP_HIGH_MAX */
	unsigned int pcp_high_max;  /* 0: 8 x high_min (auto-tuning ceiling); <= GFA_PCP_HIGH_MAX */
	/* free_high threshold: 0 = batch + high_min/2 (Linux 6.15), 1 = batch (6.6..6.14) */
	unsigned int pcp_free_high_old;
	/* disable caching of orders 1..3 and 9 (baseline for benchmarks) */
	bool pcp_no_high_order;
	/*
	 * Cache frees take the block's state with compare-and-swap even while nothing isolates:
	 * two threads freeing one block at the same instant then get one GFA_EDOUBLEFREE
	 * instead of undefined behaviour, at ~1 locked instruction per free.  A debugging
	 * aid for callers that may race on one block; off by default (see gfa_pcp_free).
	 */
	bool pcp_free_strict;
};

/* Fill *cfg with one zone of nr_frames frames and default tunables. */
void gfa_pool_config_init(struct gfa_pool_config *cfg, uint64_t nr_frames);

/*
 * Create a pool; every frame starts free (MOVABLE pageblocks).  Zones are laid out one
 * after another in pfn space, each starting on a GFA_MAX_ORDER boundary.
 * Returns the pool, or NULL with errno set: EFAULT (cfg NULL), EINVAL (no zones, too many,
 * a zone smaller than a pageblock or larger than 2^31 frames, pcp tunables above their
 * maximum), ENOMEM.
 * Thread rules: create/destroy are not concurrent with any other call on the pool.
 */
struct gfa_pool *gfa_pool_create(const struct gfa_pool_config *cfg);

/* Destroy a pool.  Caches must have been destroyed first.  NULL is a no-op. */
void gfa_pool_destroy(struct gfa_pool *pool);

/* Number of zones; first pfn and frame count of zone z (0, GFA_EFAULT, GFA_ERANGE).
 * Any thread. */
unsigned int gfa_pool_nr_zones(const struct gfa_pool *pool);
int gfa_zone_span(const struct gfa_pool *pool, unsigned int zone,
		  uint64_t *start_pfn, uint64_t *nr_frames);
/* Zone index holding pfn, or GFA_ERANGE. */
int gfa_pfn_to_zone(const struct gfa_pool *pool, uint64_t pfn);

/*
 * Allocate a block of 2^order frames of migratetype mt from zone `zone`, owned by
 * `owner` (any cookie; 0 is allowed).  Goes straight to the zone (lock taken once);
 * vCPU threads use gfa_pcp_alloc instead.  Falls back to other migratetypes as the
 * kernel's __rmqueue_fallback does, stealing pageblocks, unless GFA_ALLOC_NOFALLBACK.
 * Returns the first pfn, or GFA_EFAULT, GFA_ERANGE (zone), GFA_EORDER, GFA_EMIGRATE,
 * GFA_ENOMEM.  Thread rules: any thread.
 */
int64_t gfa_alloc(struct gfa_pool *pool, unsigned int zone, unsigned int order,
		  enum gfa_migratetype mt, uint64_t owner, unsigned int flags);

/*
 * Free the block of 2^order frames at pfn, allocated to `owner`.  Merges with free
 * buddies.  Returns 0, or GFA_EFAULT, GFA_ERANGE, GFA_EALIGN, GFA_EORDER,
 * GFA_EDOUBLEFREE, GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER, GFA_EBUSY.
 * Thread rules: any thread.
 */
int gfa_free(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner);

struct gfa_frame_info {
	enum gfa_frame_state state;
	uint64_t head_pfn;      /* first pfn of the block holding pfn */
	unsigned int order;     /* order of that block */
	enum gfa_migratetype mt;       /* allocation mt (allocated) or free-list mt */
	enum gfa_migratetype block_mt; /* pageblock migratetype */
	uint64_t owner;         /* valid when ALLOCATED or ISOLATED */
	uint32_t index;         /* the owner's index for the block (gfa_block_set_index) */
};

/*
 * Attach the owner's own index to an allocated block (the kernel's page->index: a guest
 * stores the guest frame number), so a migrate op can tell which of its blocks moves.
 * Compaction carries it to the new location.  Returns 0, GFA_EFAULT, GFA_ERANGE,
 * GFA_ENOTHEAD (not an allocated block head), GFA_EOWNER.  Any thread.
 */
int gfa_block_set_index(struct gfa_pool *pool, uint64_t pfn, uint64_t owner, uint32_t index);

/*
 * Split an allocated block of `order` into blocks of new_order, all still allocated to
 * owner with the same migratetype; piece k gets index + k * 2^new_order (the kernel's
 * split_page).  A balloon uses it to give back part of a huge-backed range.
 * Returns 0, GFA_EFAULT, GFA_ERANGE, GFA_EALIGN, GFA_EORDER (new_order >= order),
 * GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER, GFA_EBUSY (being moved).  Any thread.
 */
int gfa_block_split(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner,
		    unsigned int new_order);

/*
 * Look up the block that holds pfn.  Returns 0 and fills *info, or GFA_EFAULT,
 * GFA_ERANGE (-EUCLEAN only if the pool's invariants are broken).  Thread rules: any thread; the answer may be stale once the zone lock
 * is dropped unless the caller owns the block.
 */
int gfa_frame_lookup(struct gfa_pool *pool, uint64_t pfn, struct gfa_frame_info *info);

/*
 * Call fn for every allocated block (head pfn, order, mt, owner), in pfn order, zone by
 * zone, with that zone's lock held: fn must not call back into the pool.  A non-zero
 * return from fn stops the walk and is returned.  Returns 0 or GFA_EFAULT.
 */
typedef int (*gfa_block_fn)(void *arg, uint64_t pfn, unsigned int order,
			    enum gfa_migratetype mt, uint64_t owner);
int gfa_pool_for_each_allocated(struct gfa_pool *pool, gfa_block_fn fn, void *arg);

/* ---- host memory behind the frames (the vmm layer's backing sets it) ---- */

/* Host address of pfn, or NULL when the zone has no backing or pfn is out of range. */
void *gfa_pfn_to_addr(const struct gfa_pool *pool, uint64_t pfn);
/* memfd of zone z and byte offset of pfn in it; GFA_EFAULT, GFA_ERANGE, or -ENODEV when
 * the zone has no backing. */
int gfa_pfn_to_fd(const struct gfa_pool *pool, uint64_t pfn, int *fd, uint64_t *offset);

/* ---- statistics ---- */

/*
 * vmstat-style counters; names follow /proc/vmstat where the kernel has one.  The pool
 * keeps them per zone; gfa_pool_vmstat sums them.  Any thread (values are a snapshot).
 */
#define GFA_VMSTAT_ITEMS(X) \
	X(pgalloc)              /* frames allocated (pages, as /proc/vmstat) */ \
	X(pgfree)               /* frames freed (a cache's refills and drains are neither) */ \
	X(pgalloc_blocks)       /* blocks callers allocated (zone path and caches) */ \
	X(pgfree_blocks)        /* blocks callers freed */ \
	X(pgalloc_fail)         /* allocations that found nothing */ \
	X(pgalloc_fallback)     /* allocations served from another migratetype */ \
	X(pageblock_steal)      /* pageblocks whose migratetype changed to the requester's */ \
	X(pcp_alloc)            /* blocks served from a per-vCPU cache */ \
	X(pcp_free)             /* blocks freed through a per-vCPU cache */ \
	X(pcp_refill)           /* refill batches taken from the zone */ \
	X(pcp_bulkfree)         /* bulk frees (one zone-lock section each) */ \
	X(pcp_free_high)        /* bulk frees triggered by free_high */ \
	X(pcp_drain)            /* whole-cache drains */ \
	X(compact_migrate_scanned) /* frames (and free-list entries) the migrate side read */ \
	X(compact_migrate_blocks)  /* the same counting one per block (4.20's way), gfa's own */ \
	X(compact_free_scanned)    /* frames (and free-list entries) the free side read */ \
	X(compact_isolated)        /* frames isolated as sources and targets (sources put \
				    * back at once not counted), as the kernel */ \
	X(compact_stall)           /* direct compactions started */ \
	X(compact_fail)            /* direct compactions that gave no block */ \
	X(compact_success)         /* direct compactions that gave a block */ \
	X(compact_capture)         /* blocks handed over by capture */ \
	X(compact_daemon_wake)     /* background compaction runs */ \
	X(compact_daemon_migrate_scanned) X(compact_daemon_free_scanned) \
	X(pgmigrate_success) X(pgmigrate_fail)     /* frames moved / not moved */ \
	X(release_isolated)        /* frames taken out for release to the host */ \
	X(release_done)            /* frames the host took back */ \
	X(release_failed)          /* frames that came back still populated */ \
	X(release_populated)       /* released frames taken to be populated ahead of use */ \
	X(release_populate_failed) /* of those, frames the host could not populate */ \
	X(thp_collapse_alloc) X(thp_collapse_alloc_failed) \
	X(err_fault) X(err_range) X(err_align) X(err_order) X(err_migratetype) \
	X(err_double_free) X(err_wrong_order) X(err_not_head) X(err_owner) X(err_busy) \
	X(err_thread)

struct gfa_vmstat {
#define GFA_VMSTAT_FIELD(name) uint64_t name;
	GFA_VMSTAT_ITEMS(GFA_VMSTAT_FIELD)
#undef GFA_VMSTAT_FIELD
	uint64_t alloc_order[GFA_NR_ORDERS];    /* blocks allocated per order */
	uint64_t free_order[GFA_NR_ORDERS];     /* blocks freed per order */
};

struct gfa_zone_stat {
	uint64_t nr_frames;
	uint64_t nr_free;                                    /* frames, incl. pcp */
	uint64_t nr_free_buddy;                              /* frames on buddy lists */
	uint64_t nr_pcp;                                     /* frames on pcp lists */
	uint64_t nr_free_blocks[GFA_NR_ORDERS][GFA_MT_TYPES]; /* blocks per order and type */
	uint64_t nr_pcp_blocks[GFA_NR_ORDERS];               /* cached blocks per order */
	uint64_t nr_pageblocks[GFA_MT_TYPES];                /* pageblocks per type */
	uint64_t nr_released;       /* free frames whose host memory was given back */
	uint64_t nr_inflight;       /* frames with a release (or populate) in flight */
	uint64_t nr_sidelined;      /* pageblocks holding released frames (reused last) */
};

/* Snapshot of zone z (takes its lock).  Returns 0, GFA_EFAULT, GFA_ERANGE. */
int gfa_zone_stat(struct gfa_pool *pool, unsigned int zone, struct gfa_zone_stat *st);
/* Zone z's own counters (caches of that zone included; no pool-wide error counters).
 * 0, GFA_EFAULT or GFA_ERANGE.  Any thread. */
int gfa_zone_vmstat(struct gfa_pool *pool, unsigned int zone, struct gfa_vmstat *vs);
/* The NUMA node zone z stands for (its configuration label), or GFA_EFAULT/GFA_ERANGE. */
int gfa_zone_node(const struct gfa_pool *pool, unsigned int zone);
/* Sum of all zones' counters plus pool-wide error counters.  0 or GFA_EFAULT. */
int gfa_pool_vmstat(struct gfa_pool *pool, struct gfa_vmstat *vs);
/* Name of a migratetype ("Unmovable", ...) as /proc/pagetypeinfo prints it. */
const char *gfa_migratetype_name(enum gfa_migratetype mt);

/*
 * Text in the format of /proc/buddyinfo ("Node 0, zone   Normal  n0 n1 ... n10"), one
 * line per zone, each followed by one for its vCPU caches' blocks per order, as a zone
 * of its own name ("Normal-pcp").  The further zones of a node are "Normal1", "Normal2"
 * .. here and in gfa_pool_pagetypeinfo, so (node, zone) stays a unique key.
 * Writes at most len bytes (NUL-terminated) and returns the length the full text needs
 * (as snprintf), or GFA_EFAULT.  Any thread.
 */
int gfa_pool_buddyinfo(struct gfa_pool *pool, char *buf, size_t len);
/* The same for /proc/pagetypeinfo (free blocks per order and type; pageblock counts). */
int gfa_pool_pagetypeinfo(struct gfa_pool *pool, char *buf, size_t len);
/* "name value" lines, one per vmstat counter, as /proc/vmstat. */
int gfa_pool_vmstat_text(struct gfa_pool *pool, char *buf, size_t len);

/*
 * Full invariant check, with every zone lock held in turn: each frame in exactly one
 * block, each block in one state, tail frames stateless; free-list contents and links
 * equal the counters; no two free buddies that should have merged; pageblock types,
 * flags and free/released counts; released bits only on free frames; claims add up;
 * cached compaction positions inside the zone; pcp counters equal their lists and each
 * cached block on exactly one list.  Returns 0, -ENOMEM (no memory for the check's
 * bitmap, one bit per frame), or -EUCLEAN and writes the first violation in words to msg
 * (if non-NULL).  Thread rules: any thread; each cache is held remotely while its lists
 * are read, so it may run while vCPU threads allocate.
 */
int gfa_pool_check(struct gfa_pool *pool, char *msg, size_t msglen);

/* ---- per-vCPU caches (pcp) ---- */

/*
 * Create a cache for one vCPU thread over zone `zone`.  Lists per order (0,1,2,3,9) and
 * migratetype, 15 in all, sized from the zone (or the pool config).  Returns NULL with
 * errno EFAULT, ERANGE or ENOMEM.
 * Thread rules: a cache belongs to one thread at a time, the one that used it last.  Its
 * hot path does no atomic read-modify-write and no fence: the owner marks itself busy
 * with plain stores to its own per-thread line, and the rare other side (drains from
 * another thread, gfa_pool_drain_all, gfa_pool_check, statistics, compaction raising the
 * zone's isolation gate) pays a membarrier(2) instead (allocator/pcp.h).  Another thread
 * may take the cache over between the owner's calls (a few microseconds, once); if it
 * finds the owner inside a call on this cache, two threads use it at once and it gets
 * GFA_ETHREAD, never corruption.  Without membarrier the owners fence instead.
 */
struct gfa_pcp *gfa_pcp_create(struct gfa_pool *pool, unsigned int zone);
/*
 * How cache owners order themselves against remote holders, fixed once per process:
 * "membarrier" (owners use plain stores; remote holders pay membarrier(2)), or "fence"
 * (owners pay a full fence per call) when the kernel lacks private expedited membarrier
 * or the environment sets GFA_PCP_FENCE=1 before the first pool is created.  Any thread.
 */
const char *gfa_pcp_sync_mode(void);
/* The zone a cache serves (fixed at creation; no lock), or GFA_EFAULT. */
int gfa_pcp_zone(const struct gfa_pcp *pcp);
/* The pool a cache belongs to (fixed at creation; no lock), or NULL for NULL. */
struct gfa_pool *gfa_pcp_pool(const struct gfa_pcp *pcp);
/* Drain the cache back to its zone and free it.  NULL is a no-op. */
void gfa_pcp_destroy(struct gfa_pcp *pcp);

/*
 * Allocate through the cache: orders 0-3 and 9 of the three pcp types come from the
 * cache's list, refilled from the zone with max(batch >> order, 2) blocks in one
 * zone-lock section; other orders go to the zone, and so does every allocation while
 * the zone has outstanding claims (they are decided per owner under the zone lock).
 * Same errors as gfa_alloc, plus GFA_ETHREAD and GFA_ENOMEM (no memory for
 * the calling thread's record, on its first call).
 */
int64_t gfa_pcp_alloc(struct gfa_pcp *pcp, unsigned int order, enum gfa_migratetype mt,
		      uint64_t owner, unsigned int flags);
/*
 * Free through the cache (head of the list); bulk-frees to the zone when count >= high,
 * and flushes on free_high.  The block may belong to any zone of the cache's pool: frames
 * of another zone go straight to their zone.  Same errors as gfa_free, plus GFA_ETHREAD and
 * GFA_ENOMEM (as gfa_pcp_alloc).
 * The block's state moves to PCP with a plain store while no compaction or collapse
 * isolates blocks of its zone (compare-and-swap while one does).  So, unless the pool
 * has pcp_free_strict, two threads freeing the same block at the same instant is a race
 * in the caller, as it is for the kernel's and glibc's free; a double free that is not
 * simultaneous is always caught (GFA_EDOUBLEFREE).
 */
int gfa_pcp_free(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner);
/*
 * Free n blocks of one order as one batch (a balloon inflation, a VM teardown): like n
 * calls of gfa_pcp_free, but free_high waits until count >= batch (the kernel's
 * PCPF_FREE_HIGH_BATCH) so a batch does not flush after every block.  Stops at the
 * first bad entry (counted).  Returns the number freed before it (as write(2) does: the
 * caller still owns pfns[ret..n-1]), or the error when the first entry is bad; GFA_EFAULT
 * for pfns NULL or n > INT_MAX.
 */
int gfa_pcp_free_many(struct gfa_pcp *pcp, const uint64_t *pfns, size_t n,
		      unsigned int order, uint64_t owner);
/* Return everything cached to the zone; frames returned, GFA_EFAULT, GFA_ETHREAD or
 * GFA_ENOMEM (as gfa_pcp_alloc). */
int gfa_pcp_drain(struct gfa_pcp *pcp);
/*
 * Return at least min(count, batch) frames to the zone, oldest first, in whole blocks
 * (the kernel's drain_zone_pages): an order-9 block counts 512.  Returns the frames
 * returned, or the errors of gfa_pcp_drain.
 */
int gfa_pcp_drain_partial(struct gfa_pcp *pcp);
/*
 * Drain every cache of zone `zone` (all zones when zone < 0) from any thread, waiting for
 * each cache's owner to leave its critical section: for compaction and shutdown.
 * Returns frames returned, or GFA_EFAULT, GFA_ERANGE (no such zone).
 */
int64_t gfa_pool_drain_all(struct gfa_pool *pool, int zone);
/*
 * Drain caches that have not allocated or freed for at least idle_ms milliseconds (the
 * kernel's vmstat-worker drain), and decay the high of the others toward high_min as
 * the kernel's decay_pcp_high() does (an eighth a call; what is held above the new high
 * goes back).  Meant to run about once a second.  Returns frames returned, or GFA_EFAULT.
 */
int64_t gfa_pool_drain_idle(struct gfa_pool *pool, unsigned int idle_ms);

struct gfa_pcp_stat {
	unsigned int zone;
	int count;              /* frames on all lists */
	int batch, high, high_min, high_max;
	int free_count;
	unsigned int free_high_threshold;
	int nr_blocks[GFA_NR_ORDERS];   /* blocks cached per order */
};
/* Snapshot of a cache's counters (takes the cache lock).  0 or GFA_EFAULT. */
int gfa_pcp_stat(struct gfa_pcp *pcp, struct gfa_pcp_stat *st);

/* ---- claims (Xen's XENMEM_claim_pages) ---- */

#define GFA_MAX_CLAIMS 64       /* outstanding claims per zone */

/*
 * Reserve nr_frames free frames of zone `zone` for owner (a VM being built), so parallel
 * VM starts cannot overcommit the zone: while the claim is outstanding, allocations by
 * other owners fail with GFA_ENOMEM rather than eat into it, and owner's allocations
 * consume it.  Returns 0, GFA_EFAULT, GFA_ERANGE, -EEXIST (owner already has a claim on
 * this zone), -ENOSPC (more than the zone's unclaimed free frames, counting those parked
 * in vCPU caches, which it drains when they make up the difference; or the claim table
 * is full, which drains nothing).  Nothing changes on error but such a drain.  Any thread.
 */
int gfa_zone_claim(struct gfa_pool *pool, unsigned int zone, uint64_t owner, uint64_t nr_frames);
/*
 * Drop owner's claim on the zone, returning the frames it did not use (>= 0), or
 * GFA_EFAULT, GFA_ERANGE, -ENOENT (no claim).  Any thread.
 */
int64_t gfa_zone_unclaim(struct gfa_pool *pool, unsigned int zone, uint64_t owner);
/* Frames still claimed in the zone, all owners. */
uint64_t gfa_zone_claimed(struct gfa_pool *pool, unsigned int zone);

/* ---- returning memory to the host (policy; the vmm layer does the punching) ---- */

/*
 * Per-zone depopulation policy, after "percpu: partial chunk depopulation" (seed 002):
 * keep between low and high populated free frames (a reserve, so allocations do not wait
 * for host faults); beyond high, release fully free pageblocks first, then pageblocks
 * with at least 1/min_empty_frac of their frames empty and populated (or released
 * before and empty again), highest pfns first.  Blocks holding released frames go to
 * the tail of the free lists, so they are reused last ("sidelined"); being on the free
 * lists, a sidelined pageblock that becomes fully free is never stranded.
 */
struct gfa_release_policy {
	uint64_t low, high;             /* populated free frames to keep (low <= high) */
	unsigned int min_empty_frac;    /* 4: a pageblock qualifies at 1/4 empty */
};
/* 0, GFA_EFAULT, GFA_ERANGE, GFA_EALIGN (low > high or frac 0). Any thread. */
int gfa_zone_set_release_policy(struct gfa_pool *pool, unsigned int zone,
				const struct gfa_release_policy *p);
/* The zone's policy now.  0, GFA_EFAULT, GFA_ERANGE. */
int gfa_zone_get_release_policy(struct gfa_pool *pool, unsigned int zone,
				struct gfa_release_policy *p);

/* ---- moving frames: owners and compaction ---- */

/*
 * What an owner of MOVABLE blocks lets compaction do with them.  Owners without a
 * registration keep their blocks where they are (migration fails at once, as the
 * kernel fails pages without a migration handler).
 */
struct gfa_owner_ops {
	/*
	 * Copy 2^order frames from src_pfn to dst_pfn and repoint the owner's mapping
	 * (guest memory window, page tables) at dst.  Called without any pool lock, from
	 * the compacting thread.  Return 0, or -EBUSY / -EAGAIN to refuse: the block then
	 * stays at src, untouched.  The owner must not free the block while this runs
	 * (its gfa_free gets GFA_EBUSY during a move; retry after).
	 */
	int (*migrate)(void *ctx, uint64_t owner, uint64_t src_pfn, uint64_t dst_pfn,
		       unsigned int order);
	/*
	 * Optional: after gfa_collapse moved every piece of a 2 MiB range into the
	 * order-9 block at dst_pfn, let the owner map it as one huge mapping.
	 */
	void (*collapsed)(void *ctx, uint64_t owner, uint64_t dst_pfn);
};

/*
 * Register (ops non-NULL) or unregister (ops NULL) an owner's ops and context.
 * Unregistering waits until every call into the owner's ops that compaction or a
 * collapse has started returns, so the owner may free ctx as soon as it returns; an
 * op may unregister its own owner (the call does not wait for itself), but must not
 * wait for another thread that is unregistering it.  Ops must not block on a lock
 * their owner holds while it allocates with compaction (use trylock, answer -EAGAIN).
 * Returns 0, GFA_EFAULT, -EEXIST (already registered), -ENOENT (unregistering an
 * unknown owner), -ENOSPC (registry full: 32768 owners).  Any thread.
 */
int gfa_owner_register(struct gfa_pool *pool, uint64_t owner, const struct gfa_owner_ops *ops,
		       void *ctx);

enum gfa_compact_mode {
	GFA_COMPACT_ASYNC = 0,  /* never waits; skips unsuitable pageblocks */
	GFA_COMPACT_SYNC_LIGHT, /* may wait on locks, no long waits for owners */
	GFA_COMPACT_SYNC,       /* full effort (full compaction, the daemon) */
};

enum gfa_compact_result {
	GFA_COMPACT_SKIPPED = 0,  /* nothing to do (enough free, or order too small) */
	GFA_COMPACT_CONTINUE,     /* internal */
	GFA_COMPACT_COMPLETE,     /* the scanners met: the zone was fully scanned */
	GFA_COMPACT_PARTIAL_SKIPPED,
	GFA_COMPACT_SUCCESS,      /* a block of the order is free (or was captured) */
};

/* Compaction tunables, per pool. */
struct gfa_compact_config {
	/* linear-only mode: no free-list-guided searches, no capture, no skip-bit
	 * ownership, stride 1 (the kernel before the 2019 series) */
	bool linear_only;
	/* vm.compaction_proactiveness: 0 (off) .. 100; the daemon's target score */
	unsigned int proactiveness;
};
/* Set the pool's compaction tunables.  0, GFA_EFAULT, GFA_EALIGN (proactiveness > 100). */
int gfa_compact_configure(struct gfa_pool *pool, const struct gfa_compact_config *cfg);

/*
 * Compact zone `zone` for a block of `order` (-1: the whole zone, "full compaction",
 * which ignores the pageblock skip hints as the kernel's compact_node() does).
 * Order 0 is GFA_COMPACT_SKIPPED.  Runs in the calling thread.  Returns a
 * gfa_compact_result, or GFA_EFAULT, GFA_ERANGE, GFA_EORDER, GFA_EALIGN (mode is no
 * gfa_compact_mode), -ENOMEM.  Any thread; several may compact one zone at once (pageblock
 * skip bits give each source pageblock a single owner; full compactions share blocks,
 * each frame is still isolated by one of them only).
 */
int gfa_compact_zone(struct gfa_pool *pool, unsigned int zone, int order,
		     enum gfa_compact_mode mode);

/*
 * Direct compaction with capture: compact zone `zone` (and only that zone) and hand the
 * first free block of `order` that compaction forms to the caller, allocated to owner
 * as mt, before any other thread can see it.  Bounded: one meeting of the scanners per
 * priority, ASYNC, SYNC_LIGHT, then SYNC over the whole zone ignoring skip hints.  Returns the pfn, GFA_ENOMEM when no block could be formed, or the
 * argument errors of gfa_alloc.  gfa_alloc and gfa_pcp_alloc call this themselves for
 * order > 0 unless GFA_ALLOC_NOCOMPACT.
 */
int64_t gfa_alloc_compact(struct gfa_pool *pool, unsigned int zone, unsigned int order,
			  enum gfa_migratetype mt, uint64_t owner);

/*
 * khugepaged's collapse: move the n (<= 512) blocks at pfns[i] of orders[i], all
 * allocated MOVABLE to owner, into one order-9 block of zone `zone`, piece i going to
 * offset offs[i] (in frames) of the new block, through the owner's migrate op.  The
 * new block is allocated (with direct compaction if needed) and owned by owner; the
 * old blocks are freed.  All or nothing: pieces stay moved only if
 * the collapse as a whole succeeds: if the owner refuses a piece, the pieces already
 * moved go back to their old blocks through the same op (asked again while it answers
 * -EAGAIN/-EBUSY, a bounded number of times), the new block is freed and the claim it
 * was charged to (gfa_zone_claim) gets its frames back.  A piece the owner will not
 * take back stays moved, as compaction leaves a block: it becomes a block of its order
 * inside the new one (where the owner maps it, freeable there), its old block and the
 * rest of the new one are freed, and the claim gets the new block's frames back.  The
 * same pfn listed twice is GFA_EALIGN (overlapping pieces).  Frames of the new block no
 * piece covers keep what they held, possibly another owner's data: an owner covers the
 * whole 2 MiB (as the guest does) or zeroes those frames itself.  An op that unregisters
 * its owner (gfa_owner_register with NULL ops) ends the collapse: no op of that owner is
 * called again, the pieces moved so far stay moved as a piece the owner will not take
 * back does, the others stay where they were, and the result is -ENOENT (the new block's
 * pfn, without the collapsed call, when that op moved the last piece).
 * Returns the new block's pfn, or GFA_EFAULT, GFA_ERANGE (zone, or a block outside
 * it), GFA_EALIGN (n, or offsets that overlap, are misaligned or out of the block),
 * GFA_EORDER (a piece of order >= 9), GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER (a
 * block is not the owner's MOVABLE block of that order), GFA_EBUSY (being moved),
 * -ENOENT (owner not registered, or unregistered by one of its ops as above), GFA_ENOMEM,
 * or the owner's refusal (-EBUSY/-EAGAIN).
 * Any thread.
 */
int64_t gfa_collapse(struct gfa_pool *pool, unsigned int zone, uint64_t owner,
		     const uint64_t *pfns, const unsigned int *orders, const unsigned int *offs,
		     unsigned int n);

/*
 * Background compaction (kcompactd): one worker thread per zone.  Proactive when
 * proactiveness > 0: compacts while the zone's fragmentation score is above
 * min(100 - proactiveness + 10, 100) until it is at most 100 - proactiveness, checking
 * every 500 ms, and after a proactive pass that did not lower the score only every 64
 * intervals (the kernel's proactive_defer); also woken by failed order-9 allocations.  start returns 0, GFA_EFAULT,
 * -EALREADY, or a pthread error; stop joins the workers (0 or GFA_EFAULT).
 */
int gfa_compactd_start(struct gfa_pool *pool);
int gfa_compactd_stop(struct gfa_pool *pool);
/* Wake zone z's worker now (e.g. after a failed huge allocation). */
void gfa_compactd_wake(struct gfa_pool *pool, unsigned int zone);

/*
 * Fragmentation score of a zone for order-9 blocks, 0..100: the share of its free
 * frames (buddy and caches) that lie in blocks smaller than a pageblock.  GFA_EFAULT,
 * GFA_ERANGE on bad input.
 */
int gfa_zone_fragmentation_score(struct gfa_pool *pool, unsigned int zone);

#ifdef __cplusplus
}
#endif
#endif /* GFA_ALLOCATOR_H */
