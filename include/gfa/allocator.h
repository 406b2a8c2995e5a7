/* SPDX-License-Identifier: MIT */
/*
 * gfa allocator layer: pools, zones, the buddy allocator, per-vCPU caches (pcp),
 * statistics and the invariant checker.  Pure logic: no KVM, io_uring or libnuma.
 *
 * Vocabulary is the kernel's; one word per mechanism, used in every layer:
 *
 *   frame        4 KiB of guest memory; a pfn is its index in the pool.
 *   block        2^order frames aligned to 2^order (order 0..GFA_MAX_ORDER); freeing
 *                merges it with its free buddy, the block of the same order beside it.
 *   pageblock    order 9 (2 MiB, the THP size): the unit a migratetype and compaction's
 *                skip bit are kept for.
 *   migratetype  UNMOVABLE, MOVABLE or RECLAIMABLE: what a block's data allows; free
 *                lists are kept per type, and an allocation falls back to another
 *                type's pageblocks by stealing them.
 *   pool, zone   a pool is all the frames of one allocator; a zone is a contiguous pfn
 *                range of it (a NUMA node's memory) with its own lock and free lists.
 *   zone path    an allocation or free under the zone lock (gfa_alloc, gfa_free).
 *   pcp          a per-vCPU cache (struct gfa_pcp): free blocks of orders 0-3 and 9
 *                that one thread allocates and frees without the zone lock, refilled
 *                and drained in batches.
 *   holder       the one thread a pcp belongs to at a time; another thread (a drain,
 *                the checker, compaction) takes a remote hold and waits for the holder
 *                to leave its call (allocator/pcp.h).
 *   owner        the cookie an allocated block is allocated to (a guest's id); an owner
 *                that registers migrate ops (gfa_owner_register) lets compaction move
 *                its MOVABLE blocks.
 *   claim        frames of a zone promised to an owner before it allocates them
 *                (gfa_zone_claim): other owners cannot take them, host work neither.
 *   compaction   moving MOVABLE blocks (copy, remap by the owner's op) to make free
 *                high-order blocks; isolated blocks are those a move has taken off the
 *                lists.
 *   capture      direct compaction handing the block its own moves freed straight to
 *                the allocation that asked for it, before another thread can take it.
 *   released     a free frame whose host memory is gone (punched out of the memfd);
 *                populating it gets host memory again.  Released frames are reused
 *                last.
 *   host return  the vmm layer's thread that releases free frames to the host and
 *                populates them back (gfa_host_return_start): the one word for giving
 *                memory back to the host.
 *   in flight    free frames off the lists while host work is on them: a release or a
 *                populate in progress, or a scrub (zeroing) of dirty free frames; they
 *                count as free (GFA_FRAME_INFLIGHT).
 *   dirty        a free frame that may still hold an owner's data: zeroed (scrubbed)
 *                before it goes to another owner.
 *   cold         a free to the tail of its list (a stopped guest's frames): taken last.
 *
 * Errors: every function that can fail returns a negative errno (or, for functions
 * returning a pfn, a negative errno in an int64_t); functions returning a pointer return
 * NULL with errno set.  Each error below is counted in the pool's statistics
 * (gfa_pool_vmstat: "err_*") and leaves every frame where it was.  Each GFA_E* has an
 * errno of its own, so a caller can tell them apart (docs/decisions.md, entry 17);
 * gfa_strerror() names gfa's meaning of each.
 *
 *   GFA_EFAULT      -EFAULT        NULL pointer argument (below: where NULL is allowed)
 *   GFA_EINVAL      -EINVAL        invalid argument: a bad config or mode, unknown flags,
 *                                  nonzero reserved fields, a cache of another pool
 *   GFA_ERANGE      -ERANGE        pfn outside the pool, or zone index out of range
 *   GFA_EALIGN      -EADDRNOTAVAIL pfn not aligned to the block's order
 *   GFA_EORDER      -EDOM          order above GFA_MAX_ORDER
 *   GFA_EMIGRATE    -EPROTOTYPE    unknown migratetype (or ISOLATE, which is internal)
 *   GFA_EDOUBLEFREE -EALREADY      freeing a block that is already free
 *   GFA_EWRONGORDER -EMSGSIZE      freeing an allocated block with the wrong order
 *   GFA_ENOTHEAD    -ENOENT        pfn inside a block, not the first frame of one
 *   GFA_EOWNER      -EPERM         owner cookie does not match the block's owner
 *   GFA_EBUSY       -EBUSY         block is isolated for a move or in flight to the host
 *   GFA_ENOMEM      -ENOMEM        no free block of that order (after fallbacks)
 *   GFA_ETHREAD     -EDEADLK       a pcp used by two threads at once, or a call from a
 *                                  thread that must not make it (an engine's own)
 *   GFA_ECORRUPT    -EUCLEAN       an invariant check found a violation
 *   GFA_EOVERLAP    -ENOTUNIQ      ranges of one request overlap each other
 *
 * The rest keep the C library's meaning (gfa_strerror() gives its text):
 *
 *   GFA_EEXIST      -EEXIST        already there (a claim, an owner)
 *   GFA_ENOSPC      -ENOSPC        no room (a claim above the free frames, a registry full)
 *   GFA_EAGAIN      -EAGAIN        refused for now (an owner's move op; thread resources)
 *   GFA_ETIMEDOUT   -ETIMEDOUT     a wait ran out of its timeout
 *   GFA_ECANCELED   -ECANCELED     a wait ended by a stop on another thread
 *   GFA_ESHUTDOWN   -ESHUTDOWN     the handle's destroy has started
 *   GFA_EOVERFLOW   -EOVERFLOW     a count that would overflow (pins, nodes)
 *   GFA_ENOTSUP     -EOPNOTSUPP    not supported by this CPU or OS
 *   GFA_EBADF       -EBADF         not an open file descriptor
 *
 * Three names share the errno of another, for the words of the calls that return them:
 * GFA_ENOTFOUND is GFA_ENOTHEAD ("not found": no such claim, owner, ballooned range),
 * GFA_EALREADY is GFA_EDOUBLEFREE (already so: a range ballooned, a worker running) and
 * GFA_ENOBACKING is GFA_ENONODE (a zone without host backing).  An error a system call
 * gave is passed on as its negative errno, and the call's description names the system
 * call.
 *
 * Conventions every public header follows:
 *   - A NULL pointer argument (a handle, a config, an output, an array, a callback) is
 *     GFA_EFAULT, even where the count beside it is 0; a call that returns a pointer
 *     returns NULL with errno GFA_EFAULT.  It is counted in err_fault when the
 *     call's first argument is a handle with a pool (a pool, cache, backing, guest, NUMA
 *     pool, host return or free page reporter) and not the NULL one.  The exceptions,
 *     each said in the description of the parameter or of the result, are of these
 *     kinds only:
 *       - a NULL handle passed to a destroy, free, detach, stop, kick or forget call is
 *         a no-op ("NULL is a no-op");
 *       - a call that answers a count, an address, a flag or a name and no error
 *         answers 0, NULL or false for a NULL handle ("0 for a NULL @pool");
 *       - a parameter described "may be NULL" or "or NULL ..." takes NULL as a value: a
 *         config's defaults, the zone path instead of a cache, an output not wanted,
 *         NULL ops to unregister; "may be NULL when @len is 0" asks for a size only;
 *       - void *ctx, *cookie and *arg are the caller's: passed on, never read.
 *     The fuzz target makes every public call with each other pointer argument NULL and
 *     checks the result against these words (tools/fuzz_null_calls.py reads them).
 *   - "Not found" (no such claim, owner, ballooned range) is GFA_ENOTFOUND.
 *   - "NULL with errno GFA_EXXX" means NULL with errno set to -GFA_EXXX (the positive
 *     errno), as a pointer-returning call leaves it.
 *   - Text formatters (gfa_pool_buddyinfo, gfa_numa_topology_text, ...) are
 *     snprintf-style: they write at most len bytes, NUL-terminated when len > 0, and
 *     return the length the full text needs (excluding the NUL); buf may be NULL when
 *     len is 0.
 *   - Config and statistics structs a caller allocates end in reserved fields
 *     (docs/decisions.md, entry 18): a caller zeroes the whole struct (an initializer,
 *     memset, or the *_init function) and sets what it needs; nonzero reserved fields
 *     in a config are GFA_EINVAL, and the library zeroes them in statistics.  A newer
 *     library takes its new fields out of the reserved ones, with 0 meaning what the
 *     old library did.
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
#define GFA_MAX_ORDER        10 /* largest block: 4 MiB */
#define GFA_NR_ORDERS        (GFA_MAX_ORDER + 1)
#define GFA_PAGEBLOCK_ORDER  9 /* 2 MiB: THP order, migratetype unit */
#define GFA_PAGEBLOCK_FRAMES (1UL << GFA_PAGEBLOCK_ORDER)
#define GFA_MAX_ZONES        64

#define GFA_EFAULT      (-EFAULT)
#define GFA_ERANGE      (-ERANGE)
#define GFA_EINVAL      (-EINVAL)
#define GFA_EALIGN      (-EADDRNOTAVAIL)
#define GFA_EORDER      (-EDOM)
#define GFA_EMIGRATE    (-EPROTOTYPE)
#define GFA_EDOUBLEFREE (-EALREADY)
#define GFA_EWRONGORDER (-EMSGSIZE)
#define GFA_ENOTHEAD    (-ENOENT)
#define GFA_EOWNER      (-EPERM)
#define GFA_EBUSY       (-EBUSY)
#define GFA_ENOMEM      (-ENOMEM)
#define GFA_ETHREAD     (-EDEADLK)
#define GFA_ECORRUPT    (-EUCLEAN)
#define GFA_EOVERLAP    (-ENOTUNIQ)
#define GFA_EEXIST      (-EEXIST)
#define GFA_ENOSPC      (-ENOSPC)
#define GFA_EAGAIN      (-EAGAIN)
#define GFA_ETIMEDOUT   (-ETIMEDOUT)
#define GFA_ECANCELED   (-ECANCELED)
#define GFA_ESHUTDOWN   (-ESHUTDOWN)
#define GFA_EOVERFLOW   (-EOVERFLOW)
#define GFA_ENOTSUP     (-EOPNOTSUPP)
#define GFA_EBADF       (-EBADF)
#define GFA_ENOTFOUND   GFA_ENOTHEAD    /* -ENOENT: no such claim, owner, ballooned range */
#define GFA_EALREADY    GFA_EDOUBLEFREE /* -EALREADY: a range ballooned, a worker running */
/* The numa layer's errors (gfa/numa.h), here so that every gfa errno is in one list. */
#define GFA_ENONODE     (-ENODEV)   /* node id not in the topology */
#define GFA_ENOCPU      (-ENXIO)    /* CPU (set) with no node in the topology */
#define GFA_ESPAN       (-EXDEV)    /* CPU set spans several nodes */
#define GFA_EREMOTE     (-EREMOTE)  /* frames found on another node than their zone's */
#define GFA_EPOLICY     (-ENOLINK)  /* zone memory lacks its MPOL_BIND policy */
#define GFA_ETOOBIG     (-E2BIG)    /* more frames than the node has */
#define GFA_ENONUMA     (-ENOSYS)   /* the host has no NUMA support (numa_available() < 0) */
#define GFA_ENOBACKING  GFA_ENONODE /* -ENODEV: a zone without host backing */

/**
 * gfa_strerror() - what a gfa error means
 * @err: a negative errno a gfa call returned (a positive errno, as a NULL-returning
 *       call leaves in errno, is taken as its negative)
 *
 * gfa gives some errnos a meaning of its own (the strerror() text of GFA_EMIGRATE's errno
 * is "Protocol wrong type for socket"): this names gfa's meaning.
 * Where one errno has several meanings across calls (GFA_ENOTHEAD and GFA_ENOTFOUND: no
 * such claim, owner or ballooned range), the text names each.
 *
 * Return: a static string, never NULL: gfa's meaning for every GFA_E* value, 0 is
 * "success", and any other errno gets the C library's description.
 * Context: any thread; the string is never freed.
 */
const char *gfa_strerror(int err);

/* Migratetypes, as in the kernel's enum migratetype (PCPTYPES first). */
enum gfa_migratetype {
	GFA_MT_UNMOVABLE = 0,             /* VMM-internal or pinned (device DMA) */
	GFA_MT_MOVABLE,                   /* guest RAM: can be moved by copy + remap */
	GFA_MT_RECLAIMABLE,               /* caches the VMM can drop */
	GFA_MT_PCPTYPES,                  /* number of types callers may ask for */
	GFA_MT_ISOLATE = GFA_MT_PCPTYPES, /* internal: pageblock being isolated */
	GFA_MT_TYPES
};

/* What a frame is doing right now (gfa_frame_info.state). */
enum gfa_frame_state {
	GFA_FRAME_FREE = 1,  /* in a zone's buddy free lists */
	GFA_FRAME_PCP,       /* on a per-vCPU cache list (counts as free) */
	GFA_FRAME_ALLOCATED, /* owned by an owner cookie */
	GFA_FRAME_ISOLATED,  /* taken by compaction for a move */
	GFA_FRAME_INFLIGHT,  /* free, with a release to the host in flight (or being
				 * zeroed: gfa_zone_stat.nr_scrubbing) */
};

/*
 * Allocation flags: one list for every layer's allocation calls, so that no two flags
 * share a bit.  A call takes the flags named for it; gfa_alloc and gfa_pcp_alloc ignore
 * the others (their hot path does not test for them), gfa_numa_alloc and
 * gfa_backing_alloc pass on what they do not use themselves.
 */
#define GFA_ALLOC_NOFALLBACK 0x1u  /* never steal from another migratetype */
#define GFA_ALLOC_NOCOMPACT  0x2u  /* free lists only: no cache drain, no compaction */
#define GFA_BACKING_ZERO     0x10u /* gfa_backing_alloc: zero dirty frames first */
#define GFA_NUMA_REMOTE \
	0x100u                  /* gfa_numa_alloc: may place on other nodes (never
				       * compacting them) */
#define GFA_NUMA_SMALLER 0x200u /* gfa_numa_alloc: may return a smaller order */

struct gfa_pool;
struct gfa_pcp;

struct gfa_zone_config {
	uint64_t nr_frames; /* frames in this zone (>= GFA_PAGEBLOCK_FRAMES) */
	int node;           /* NUMA node the zone stands for (label only here) */
};

#define GFA_PCP_BATCH_MAX (1u << 16) /* frames */
#define GFA_PCP_HIGH_MAX  (1u << 27) /* frames: 8 x high still fits an int */

struct gfa_pool_config {
	unsigned int nr_zones; /* 1..GFA_MAX_ZONES */
	struct gfa_zone_config zones[GFA_MAX_ZONES];
	/* pcp sizing; 0 = size from the zone as the kernel does (batch ~63) */
	unsigned int pcp_batch;    /* <= GFA_PCP_BATCH_MAX */
	unsigned int pcp_high;     /* <= GFA_PCP_HIGH_MAX */
	unsigned int pcp_high_max; /* 0: 8 x high_min (auto-tuning ceiling); <= GFA_PCP_HIGH_MAX */
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
	/*
	 * Arenas per zone (decisions 38): runs of a zone's frames with a lock and free lists
	 * of their own, so threads on different CPUs allocate and free, on the zone path and
	 * in their caches' refills and drains, without sharing one lock.  0 = one per CPU
	 * (at most 16); 1 = one lock for the whole zone.  The zone may get fewer than
	 * asked: each is a power of two of frames, at least 2^15 (128 MiB).
	 */
	unsigned int arenas;
	unsigned int reserved32; /* zero */
	uint64_t reserved[7];    /* zero: room to grow (the head of this file) */
};

/**
 * gfa_pool_config_init() - one zone of nr_frames frames, default tunables
 * @cfg: config to fill (zeroed first, reserved words included); NULL is a no-op
 * @nr_frames: frames of zone 0
 *
 * Context: any thread.
 */
void gfa_pool_config_init(struct gfa_pool_config *cfg, uint64_t nr_frames);

/**
 * gfa_pool_create() - create a pool
 * @cfg: its zones and tunables (gfa_pool_config_init, gfa_numa_pool_config)
 *
 * Every frame starts free, in MOVABLE pageblocks.  Zones are laid out one after another
 * in pfn space, each starting on a GFA_MAX_ORDER boundary.
 *
 * Return: the pool, or NULL with errno set: GFA_EFAULT (@cfg NULL), GFA_EINVAL (no zones, too
 * many, a zone smaller than a pageblock or larger than 2^31 frames, pcp tunables above
 * their maximum, nonzero reserved words), GFA_ENOMEM.
 * Context: not concurrent with any other call on the pool.
 */
struct gfa_pool *gfa_pool_create(const struct gfa_pool_config *cfg);

/**
 * gfa_pool_destroy() - stop the pool's compaction workers and free it
 * @pool: the pool; NULL is a no-op
 *
 * Caches must have been destroyed first (gfa_pcp_destroy).
 * Context: once, when no other thread uses the pool.
 */
void gfa_pool_destroy(struct gfa_pool *pool);

/**
 * gfa_pool_nr_zones() - number of zones
 *
 * Return: the zone count, 0 for a NULL @pool.
 * Context: any thread (fixed at creation).
 */
unsigned int gfa_pool_nr_zones(const struct gfa_pool *pool);
/**
 * gfa_zone_span() - where a zone lies in pfn space
 * @start_pfn: gets the zone's first pfn
 * @nr_frames: gets its frame count
 *
 * Return: 0, GFA_EFAULT (@pool, @start_pfn or @nr_frames NULL: both outputs are
 * required, as every output pointer is), GFA_ERANGE (no zone @zone).
 * Context: any thread (fixed at creation).
 */
int gfa_zone_span(const struct gfa_pool *pool, unsigned int zone, uint64_t *start_pfn,
		  uint64_t *nr_frames);
/**
 * gfa_pfn_to_zone() - the zone holding a pfn
 *
 * Return: the zone index, GFA_EFAULT or GFA_ERANGE (counted).
 * Context: any thread.
 */
int gfa_pfn_to_zone(const struct gfa_pool *pool, uint64_t pfn);

/**
 * gfa_alloc() - allocate a block from a zone, on the zone path
 * @zone: zone index
 * @order: the block is 2^@order frames, aligned to its size
 * @mt: GFA_MT_UNMOVABLE, GFA_MT_MOVABLE or GFA_MT_RECLAIMABLE
 * @owner: cookie the block is allocated to (any value, 0 included)
 * @flags: GFA_ALLOC_NOFALLBACK, GFA_ALLOC_NOCOMPACT; other bits are ignored
 *
 * Takes the zone lock once; vCPU threads use gfa_pcp_alloc() instead.  Falls back to
 * other migratetypes as the kernel's __rmqueue_fallback does, stealing pageblocks, unless
 * GFA_ALLOC_NOFALLBACK; for order > 0, direct compaction with capture
 * (gfa_alloc_compact()) unless GFA_ALLOC_NOCOMPACT.  When none of that finds a block
 * while free frames are being zeroed in the background (nr_scrubbing), it waits for
 * that batch (milliseconds) and tries once more, with either flag.
 *
 * Return: the block's first pfn, or GFA_EFAULT, GFA_ERANGE (@zone), GFA_EORDER,
 * GFA_EMIGRATE, GFA_ENOMEM.
 * Context: any thread.
 */
int64_t gfa_alloc(struct gfa_pool *pool, unsigned int zone, unsigned int order,
		  enum gfa_migratetype mt, uint64_t owner, unsigned int flags);

/**
 * gfa_free() - free a block on the zone path, merging with free buddies
 * @pfn: the block's first pfn
 * @order: its order, as allocated (or split)
 * @owner: the cookie it is allocated to
 *
 * Return: 0, or GFA_EFAULT, GFA_ERANGE, GFA_EALIGN, GFA_EORDER, GFA_EDOUBLEFREE,
 * GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER, GFA_EBUSY (being moved or released); nothing
 * changes on error.
 * Context: any thread.
 */
int gfa_free(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner);

struct gfa_frame_info {
	enum gfa_frame_state state;
	uint64_t head_pfn;             /* first pfn of the block holding pfn */
	unsigned int order;            /* order of that block */
	enum gfa_migratetype mt;       /* allocation mt (allocated) or free-list mt */
	enum gfa_migratetype block_mt; /* pageblock migratetype */
	uint64_t owner;                /* valid when ALLOCATED or ISOLATED */
	uint32_t index;                /* the owner's index for the block (gfa_block_set_index) */
	uint64_t reserved[2];          /* zero: room to grow (the head of this file) */
};

/**
 * gfa_block_set_index() - attach the owner's own index to an allocated block
 * @pfn: the block's first pfn
 * @owner: its owner
 * @index: the owner's number for it (a guest stores the guest frame number)
 *
 * The kernel's page->index: a migrate op tells from it which of its blocks moves.
 * Compaction carries it to the new location.
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE, GFA_ENOTHEAD (not an allocated block head),
 * GFA_EOWNER.
 * Context: any thread.
 */
int gfa_block_set_index(struct gfa_pool *pool, uint64_t pfn, uint64_t owner, uint32_t index);

/**
 * gfa_block_split() - split an allocated block into smaller allocated blocks
 * @pfn: the block's first pfn
 * @order: its order
 * @owner: its owner
 * @new_order: order of the pieces (below @order)
 *
 * The kernel's split_page(): every piece stays allocated to @owner with the same
 * migratetype; piece k gets index + k * 2^@new_order.  A balloon uses it to give back part
 * of a huge-backed range.
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE, GFA_EALIGN, GFA_EORDER (@new_order >= @order),
 * GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER, GFA_EBUSY (being moved).
 * Context: any thread.
 */
int gfa_block_split(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t owner,
		    unsigned int new_order);

/**
 * gfa_frame_lookup() - what the block holding a pfn is doing
 * @info: gets state, head, order, types, owner and index (reserved words zeroed)
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE; GFA_ECORRUPT only if the pool's invariants are broken
 * (a build with assertions aborts instead).
 * Context: any thread; the answer may be stale once the zone lock is dropped unless the
 * caller owns the block.
 */
int gfa_frame_lookup(struct gfa_pool *pool, uint64_t pfn, struct gfa_frame_info *info);

typedef int (*gfa_block_fn)(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
			    uint64_t owner);
/**
 * gfa_pool_for_each_allocated() - call fn for every allocated block
 * @fn: gfa_block_fn, called with (arg, head pfn, order, mt, owner); a nonzero return stops
 *      the walk and is returned
 * @arg: passed to @fn
 *
 * In pfn order, zone by zone, with that zone's lock held.
 *
 * Return: 0, GFA_EFAULT, or what @fn returned.
 * Context: any thread; @fn must not call back into the pool.
 */
int gfa_pool_for_each_allocated(struct gfa_pool *pool, gfa_block_fn fn, void *arg);

/* ---- host memory behind the frames (the vmm layer's backing sets it) ---- */

/**
 * gfa_pfn_to_addr() - host address of a frame
 *
 * Return: the address, or NULL for a NULL @pool, a @pfn outside it, or a zone without
 * backing (the vmm layer's gfa_backing_create sets it).
 * Context: any thread.
 */
void *gfa_pfn_to_addr(const struct gfa_pool *pool, uint64_t pfn);
/**
 * gfa_pfn_to_fd() - the memfd behind a frame
 * @fd: gets zone's memfd
 * @offset: gets the frame's byte offset in it
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE, or GFA_ENOBACKING (the zone has no backing).
 * Context: any thread.
 */
int gfa_pfn_to_fd(const struct gfa_pool *pool, uint64_t pfn, int *fd, uint64_t *offset);

/* ---- statistics ---- */

/*
 * vmstat-style counters; names follow /proc/vmstat where the kernel has one.  The pool
 * keeps them per zone; gfa_pool_vmstat sums them.  Any thread (values are a snapshot).
 */
/* one counter a line, each with its comment: */
/* clang-format off */
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
	X(err_thread) X(err_inval) \
	X(metadata_split)          /* pageblocks split while their tail descriptors had no \
				    * memory: 8 KiB of descriptors backed (added in 0.6) */ \
	X(metadata_dropped)        /* pageblocks whose tail descriptors went back to the \
				    * host, one free block again (added in 0.6) */
/* clang-format on */

/*
 * The counters take GFA_VMSTAT_SLOTS words, the rest reserved, so that a new counter
 * moves neither alloc_order nor the struct's size.
 */
#define GFA_VMSTAT_SLOTS     96
#define GFA_VMSTAT_ONE(name) +1
#define GFA_VMSTAT_NR_ITEMS  (0 GFA_VMSTAT_ITEMS(GFA_VMSTAT_ONE))

struct gfa_vmstat {
#define GFA_VMSTAT_FIELD(name) uint64_t name;
	GFA_VMSTAT_ITEMS(GFA_VMSTAT_FIELD)
#undef GFA_VMSTAT_FIELD
	uint64_t reserved[GFA_VMSTAT_SLOTS - GFA_VMSTAT_NR_ITEMS]; /* zero */
	uint64_t alloc_order[GFA_NR_ORDERS];                       /* blocks allocated per order */
	uint64_t free_order[GFA_NR_ORDERS];                        /* blocks freed per order */
	uint64_t reserved_end[8]; /* zero: room for per-order arrays */
};

struct gfa_zone_stat {
	uint64_t nr_frames;
	uint64_t nr_free;       /* frames: buddy lists, pcp lists and nr_scrubbing */
	uint64_t nr_free_buddy; /* frames on buddy lists */
	uint64_t nr_pcp;        /* frames on pcp lists */
	uint64_t nr_free_blocks[GFA_NR_ORDERS][GFA_MT_TYPES]; /* blocks per order and type */
	uint64_t nr_pcp_blocks[GFA_NR_ORDERS];                /* cached blocks per order */
	uint64_t nr_pageblocks[GFA_MT_TYPES];                 /* pageblocks per type */
	uint64_t nr_released;    /* free frames whose host memory was given back */
	uint64_t nr_inflight;    /* frames with a release (or populate) in flight */
	uint64_t nr_sidelined;   /* pageblocks holding released frames (reused last) */
	uint64_t nr_scrubbing;   /* free frames being zeroed in the background: off the
				     * lists for a moment, counted free and claimable (an
				     * allocation that finds no frame waits for them; added
				     * in 0.3) */
	uint64_t metadata_bytes; /* what the zone's frames cost the host: pageblock
				     * heads (those of the alignment hole before the zone
				     * included), pageblocks and bitmaps, and 8 KiB of tail
				     * descriptors per pageblock split since they were last
				     * given back (vmstat metadata_split, metadata_dropped);
				     * over nr_frames, the bytes of metadata per frame (added
				     * in 0.6) */
	uint64_t reserved[6];    /* zero: room to grow (the head of this file) */
};

/**
 * gfa_zone_stat() - snapshot of a zone's free lists and pageblocks
 * @st: gets the snapshot (reserved words zeroed)
 *
 * metadata_bytes counts what the pool has backed per frame and per pageblock of the
 * zone, not what is per pool (the owner registry) or per cache.
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE.
 * Context: any thread (takes the zone lock).
 */
int gfa_zone_stat(struct gfa_pool *pool, unsigned int zone, struct gfa_zone_stat *st);
/**
 * gfa_zone_vmstat() - one zone's vmstat counters
 * @vs: gets the counters of the zone and its caches (no pool-wide error counters)
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE.
 * Context: any thread (a snapshot).
 */
int gfa_zone_vmstat(struct gfa_pool *pool, unsigned int zone, struct gfa_vmstat *vs);
/**
 * gfa_zone_node() - the NUMA node a zone stands for (its configuration label)
 *
 * Return: the node, GFA_EFAULT or GFA_ERANGE.
 * Context: any thread.
 */
int gfa_zone_node(const struct gfa_pool *pool, unsigned int zone);
/**
 * gfa_pool_vmstat() - the pool's vmstat counters
 * @vs: gets the sum over all zones plus the pool-wide error counters
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread (a snapshot).
 */
int gfa_pool_vmstat(struct gfa_pool *pool, struct gfa_vmstat *vs);
/**
 * gfa_migratetype_name() - a migratetype's name as /proc/pagetypeinfo prints it
 *
 * Return: "Unmovable", "Movable", "Reclaimable", "Isolate", or "Unknown" for other
 * values; a static string.
 * Context: any thread.
 */
const char *gfa_migratetype_name(enum gfa_migratetype mt);

/**
 * gfa_pool_buddyinfo() - the pool's free lists as /proc/buddyinfo prints them
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * "Node 0, zone   Normal  n0 n1 ... n10", one line per zone, each followed by one for its
 * vCPU caches' blocks per order, as a zone of its own name ("Normal-pcp").  The further
 * zones of a node are "Normal1", "Normal2" .. here and in gfa_pool_pagetypeinfo(), so
 * (node, zone) stays a unique key.
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_pool_buddyinfo(struct gfa_pool *pool, char *buf, size_t len);
/**
 * gfa_pool_pagetypeinfo() - the pool as /proc/pagetypeinfo prints it
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * Free blocks per order and type, then pageblocks per type, zones named as in
 * gfa_pool_buddyinfo().
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_pool_pagetypeinfo(struct gfa_pool *pool, char *buf, size_t len);
/**
 * gfa_pool_vmstat_text() - the counters as /proc/vmstat prints them ("name value" lines)
 * @buf: output, may be NULL when @len is 0
 * @len: size of @buf
 *
 * Return: the length the whole text needs (snprintf-style), or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_pool_vmstat_text(struct gfa_pool *pool, char *buf, size_t len);

/**
 * gfa_pool_check() - check every invariant of the pool
 * @msg: gets the first violation in words (may be NULL)
 * @msglen: size of @msg
 *
 * Each frame in exactly one block, each block in one state, tail frames stateless;
 * free-list contents and links equal the counters; no two free buddies that should have
 * merged; pageblock types, flags and free/released counts; released bits only on free
 * frames; frames in flight and being scrubbed equal their counts; claims add up; cached compaction
 * positions inside the zone; pcp counters equal their lists and each cached block on exactly one
 * list.
 *
 * Return: 0, GFA_EFAULT, GFA_ENOMEM (no memory for the check's bitmap, one bit per frame),
 * or GFA_ECORRUPT (a violation, described in @msg).
 * Context: any thread: every zone lock is held in turn and each cache is held remotely
 * while its lists are read, so it may run while vCPU threads allocate.
 */
int gfa_pool_check(struct gfa_pool *pool, char *msg, size_t msglen);

/* ---- per-vCPU caches (pcp) ---- */

/**
 * gfa_pcp_create() - create a per-vCPU cache over one zone
 *
 * Lists per order (0-3 and 9) and migratetype, 15 in all, sized from the zone (or the
 * pool config).
 *
 * Return: the cache, or NULL with errno GFA_EFAULT, GFA_ERANGE or GFA_ENOMEM.
 * Context: a cache belongs to one thread at a time, the one that used it last (its
 * holder).  Its hot path does no atomic read-modify-write and no fence: the holder marks
 * itself busy with plain stores to its own per-thread line, and the rare other side
 * (drains from another thread, gfa_pool_drain_all(), gfa_pool_check(), statistics,
 * compaction raising the zone's isolation gate) pays a membarrier(2) instead
 * (docs/decisions.md, entry 2).  Another thread may take the cache over between the
 * holder's calls (a few microseconds, once); if it finds the holder inside a call on this
 * cache, two threads use it at once and it gets GFA_ETHREAD, never corruption.  Without
 * membarrier the holders fence instead.
 */
struct gfa_pcp *gfa_pcp_create(struct gfa_pool *pool, unsigned int zone);
/**
 * gfa_pcp_sync_mode() - how cache holders order themselves against remote holders
 *
 * Fixed once per process: "membarrier" (holders use plain stores; remote holders pay
 * membarrier(2)), or "fence" (holders pay a full fence per call) when the kernel lacks
 * private expedited membarrier or the environment sets GFA_PCP_FENCE=1 before the first
 * pool is created.
 *
 * Return: "membarrier" or "fence", a static string.
 * Context: any thread.
 */
const char *gfa_pcp_sync_mode(void);
/**
 * gfa_pcp_zone() - the zone a cache serves
 *
 * Return: the zone index (fixed at creation), or GFA_EFAULT.
 * Context: any thread, no lock.
 */
int gfa_pcp_zone(const struct gfa_pcp *pcp);
/**
 * gfa_pcp_pool() - the pool a cache belongs to
 *
 * Return: the pool (fixed at creation), or NULL for a NULL @pcp.
 * Context: any thread, no lock.
 */
struct gfa_pool *gfa_pcp_pool(const struct gfa_pcp *pcp);
/**
 * gfa_pcp_destroy() - drain a cache back to its zone and free it
 * @pcp: the cache; NULL is a no-op
 *
 * Context: once, from any thread, when no other thread uses the cache.
 */
void gfa_pcp_destroy(struct gfa_pcp *pcp);

/**
 * gfa_pcp_alloc() - allocate through a per-vCPU cache
 * @pcp: the calling thread's cache
 * @order: block order
 * @mt: migratetype
 * @owner: cookie the block is allocated to
 * @flags: as gfa_alloc()
 *
 * Orders 0-3 and 9 of the three pcp types come from the cache's list, refilled from the
 * zone with max(batch >> order, 2) blocks in one zone-lock section (order 9: up to 8, at
 * most half of high_max); other orders go to the zone, and so does every allocation
 * while the zone has outstanding claims (they are decided per owner under the zone lock).
 *
 * Return: the first pfn, or the errors of gfa_alloc(), GFA_ETHREAD, or GFA_ENOMEM (also:
 * no memory for the calling thread's record, on its first call).
 * Context: the cache's holder (see gfa_pcp_create()).
 */
int64_t gfa_pcp_alloc(struct gfa_pcp *pcp, unsigned int order, enum gfa_migratetype mt,
		      uint64_t owner, unsigned int flags);
/**
 * gfa_pcp_free() - free through a per-vCPU cache
 * @pcp: the calling thread's cache
 * @pfn: the block's first pfn
 * @order: its order
 * @owner: its owner
 *
 * Onto the head of the cache's list; bulk-frees to the zone when count >= high, and
 * flushes on free_high.  The block may belong to any zone of the cache's pool: frames of
 * another zone go straight to their zone.  The block's state moves to PCP with a plain
 * store while no compaction or collapse isolates blocks of its zone (compare-and-swap
 * while one does).  So, unless the pool has pcp_free_strict, two threads freeing the same
 * block at the same instant is a race in the caller, as it is for the kernel's and glibc's
 * free; a double free that is not simultaneous is always caught (GFA_EDOUBLEFREE).
 *
 * Return: 0, or the errors of gfa_free(), GFA_ETHREAD, GFA_ENOMEM (as gfa_pcp_alloc()).
 * Context: the cache's holder.
 */
int gfa_pcp_free(struct gfa_pcp *pcp, uint64_t pfn, unsigned int order, uint64_t owner);
/**
 * gfa_pcp_free_many() - free n blocks of one order as one batch
 * @pfns: the blocks' first pfns
 * @n: how many (at most INT_MAX)
 * @order: their order
 * @owner: their owner
 *
 * Like n calls of gfa_pcp_free() (a balloon inflation, a VM teardown), but free_high waits
 * until count >= batch (the kernel's PCPF_FREE_HIGH_BATCH) so a batch does not flush after
 * every block.  Stops at the first bad entry (counted).
 *
 * Return: the number freed before it (as write(2) does: the caller still owns
 * pfns[ret..n-1]), or the error when the first entry is bad; GFA_EFAULT for @pfns NULL or
 * @n > INT_MAX.
 * Context: the cache's holder.
 */
int gfa_pcp_free_many(struct gfa_pcp *pcp, const uint64_t *pfns, size_t n, unsigned int order,
		      uint64_t owner);
/**
 * gfa_pcp_drain() - return everything cached to the zone
 *
 * Return: frames returned, GFA_EFAULT, GFA_ETHREAD or GFA_ENOMEM (as gfa_pcp_alloc()).
 * Context: the cache's holder.
 */
int gfa_pcp_drain(struct gfa_pcp *pcp);
/**
 * gfa_pcp_drain_partial() - return at least min(count, batch) frames, oldest first
 *
 * The kernel's drain_zone_pages(), in whole blocks: an order-9 block counts 512.
 *
 * Return: frames returned, or the errors of gfa_pcp_drain().
 * Context: the cache's holder.
 */
int gfa_pcp_drain_partial(struct gfa_pcp *pcp);
/**
 * gfa_pool_drain_all() - drain every cache of a zone from any thread
 * @zone: zone index, or < 0 for all zones
 *
 * Waits for each cache's holder to leave its critical section: for compaction and
 * shutdown.
 *
 * Return: frames returned, or GFA_EFAULT, GFA_ERANGE (no such zone).
 * Context: any thread.
 */
int64_t gfa_pool_drain_all(struct gfa_pool *pool, int zone);
/**
 * gfa_pool_drain_idle() - drain idle caches, decay the high of the others
 * @idle_ms: a cache that has not allocated or freed for this long is drained
 *
 * The kernel's vmstat-worker drain; the others' high decays toward high_min as the
 * kernel's decay_pcp_high() does (an eighth a call; what is held above the new high goes
 * back).  Meant to run about once a second (the host-return thread does).
 *
 * Return: frames returned, or GFA_EFAULT.
 * Context: any thread.
 */
int64_t gfa_pool_drain_idle(struct gfa_pool *pool, unsigned int idle_ms);

struct gfa_pcp_stat {
	unsigned int zone;
	int count; /* frames on all lists */
	int batch, high, high_min, high_max;
	int free_count;
	unsigned int free_high_threshold;
	int nr_blocks[GFA_NR_ORDERS]; /* blocks cached per order */
	uint64_t reserved[4];         /* zero: room to grow (the head of this file) */
};
/**
 * gfa_pcp_stat() - snapshot of a cache's counters
 * @st: gets them (reserved words zeroed)
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread (holds the cache remotely).
 */
int gfa_pcp_stat(struct gfa_pcp *pcp, struct gfa_pcp_stat *st);

/* ---- claims (Xen's XENMEM_claim_pages) ---- */

#define GFA_MAX_CLAIMS 64 /* outstanding claims per zone */

/**
 * gfa_zone_claim() - reserve free frames of a zone for one owner
 * @owner: the owner (a VM being built)
 * @nr_frames: frames to reserve
 *
 * Xen's XENMEM_claim_pages: parallel VM starts cannot overcommit the zone.  While the claim
 * is outstanding, allocations by other owners fail with GFA_ENOMEM rather than eat into
 * it, and @owner's allocations consume it.
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE, GFA_EEXIST (@owner already has a claim on this zone),
 * GFA_ENOSPC (more than the zone's unclaimed free frames, counting those being zeroed
 * (nr_scrubbing) and those parked in vCPU caches, which it drains when they make up the
 * difference; or the claim table of
 * GFA_MAX_CLAIMS is full, which drains nothing).  Nothing changes on error but such a
 * drain.
 * Context: any thread.
 */
int gfa_zone_claim(struct gfa_pool *pool, unsigned int zone, uint64_t owner, uint64_t nr_frames);
/**
 * gfa_zone_unclaim() - drop an owner's claim on a zone
 *
 * Return: the frames it did not use (>= 0), or GFA_EFAULT, GFA_ERANGE, GFA_ENOTFOUND (no
 * claim).
 * Context: any thread.
 */
int64_t gfa_zone_unclaim(struct gfa_pool *pool, unsigned int zone, uint64_t owner);
/**
 * gfa_zone_claimed() - frames still claimed in a zone, all owners
 *
 * Return: the frame count; 0 for a NULL @pool or a zone out of range.
 * Context: any thread.
 */
uint64_t gfa_zone_claimed(struct gfa_pool *pool, unsigned int zone);

/* ---- returning memory to the host (policy; the vmm layer does the punching) ---- */

/*
 * Per-zone depopulation policy, after "percpu: partial chunk depopulation"
 * (docs/decisions.md, entry 21):
 * keep between low and high populated free frames (a reserve, so allocations do not wait
 * for host faults); beyond high, release fully free pageblocks first, then pageblocks
 * with at least 1/min_empty_frac of their frames empty and populated (or released
 * before and empty again), highest pfns first.  Blocks holding released frames go to
 * the tail of the free lists, so they are reused last ("sidelined"); being on the free
 * lists, a sidelined pageblock that becomes fully free is never stranded.
 */
struct gfa_release_policy {
	uint64_t low, high;          /* populated free frames to keep (low <= high) */
	unsigned int min_empty_frac; /* 4: a pageblock qualifies at 1/4 empty */
	uint64_t reserved[2];        /* zero: room to grow (the head of this file) */
};
/**
 * gfa_zone_set_release_policy() - set a zone's depopulation policy
 * @p: the policy (struct gfa_release_policy)
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE, GFA_EINVAL (low > high, min_empty_frac 0, nonzero
 * reserved words).
 * Context: any thread.
 */
int gfa_zone_set_release_policy(struct gfa_pool *pool, unsigned int zone,
				const struct gfa_release_policy *p);
/**
 * gfa_zone_get_release_policy() - a zone's depopulation policy now
 * @p: gets it
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE.
 * Context: any thread.
 */
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
	 * the compacting thread.  Return 0, or GFA_EBUSY / GFA_EAGAIN to refuse: the block then
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
	/*
	 * Optional, both or neither (added in 0.3): compaction moves its isolated blocks
	 * in batches (a source pageblock's worth) and calls batch_begin before the
	 * batch's first migrate of this owner and batch_end after the batch's last, from
	 * the compacting thread, so an owner that stops its users around a move can stop
	 * them once per batch.  Calls of two compacting threads may overlap.
	 */
	void (*batch_begin)(void *ctx, uint64_t owner);
	void (*batch_end)(void *ctx, uint64_t owner);
};

/**
 * gfa_owner_register() - register or unregister an owner's migrate ops
 * @owner: the owner cookie
 * @ops: its ops, or NULL to unregister
 * @ctx: passed to the ops
 *
 * Unregistering waits until every call into the owner's ops that compaction or a collapse
 * has started returns, so the owner may free @ctx as soon as it returns.
 *
 * Return: 0, GFA_EFAULT (also: ops without migrate), GFA_EINVAL (only one of
 * batch_begin and batch_end), GFA_EEXIST (already registered), GFA_ENOTFOUND
 * (unregistering an unknown owner), GFA_ENOSPC (registry full: 32768 owners).
 * Context: any thread.  An op may unregister its own owner (the call does not wait for
 * itself), but must not wait for another thread that is unregistering it.  Ops must not
 * block on a lock their owner holds while it allocates with compaction (use trylock,
 * answer GFA_EAGAIN).
 */
int gfa_owner_register(struct gfa_pool *pool, uint64_t owner, const struct gfa_owner_ops *ops,
		       void *ctx);

enum gfa_compact_mode {
	GFA_COMPACT_ASYNC = 0,  /* never waits; skips unsuitable pageblocks */
	GFA_COMPACT_SYNC_LIGHT, /* may wait on locks, no long waits for owners */
	GFA_COMPACT_SYNC,       /* full effort (full compaction, the daemon) */
};

enum gfa_compact_result {
	GFA_COMPACT_SKIPPED = 0, /* nothing to do (enough free, or order too small) */
	GFA_COMPACT_CONTINUE,    /* internal */
	GFA_COMPACT_COMPLETE,    /* the scanners met: the zone was fully scanned */
	GFA_COMPACT_PARTIAL_SKIPPED,
	GFA_COMPACT_SUCCESS, /* a block of the order is free (or was captured) */
};

/* Compaction tunables, per pool. */
struct gfa_compact_config {
	/* linear-only mode: no free-list-guided searches, no capture, no skip-bit
	 * ownership, stride 1 (the kernel before the 2019 series) */
	bool linear_only;
	/* vm.compaction_proactiveness: 0 (off) .. 100; the daemon's target score */
	unsigned int proactiveness;
	uint64_t reserved[4]; /* zero: room to grow (the head of this file) */
};
/**
 * gfa_compact_configure() - set the pool's compaction tunables
 * @cfg: the tunables (struct gfa_compact_config)
 *
 * Return: 0, GFA_EFAULT, GFA_EINVAL (proactiveness > 100, nonzero reserved words).
 * Context: any thread.
 */
int gfa_compact_configure(struct gfa_pool *pool, const struct gfa_compact_config *cfg);

/**
 * gfa_compact_zone() - compact a zone for a block of an order
 * @order: the order wanted; -1: the whole zone ("full compaction", which ignores the
 *         pageblock skip hints as the kernel's compact_node() does)
 * @mode: enum gfa_compact_mode
 *
 * Order 0 is GFA_COMPACT_SKIPPED.  Runs in the calling thread.
 *
 * Return: a gfa_compact_result, or GFA_EFAULT, GFA_ERANGE, GFA_EORDER, GFA_EINVAL (@mode
 * is no gfa_compact_mode), GFA_ENOMEM.
 * Context: any thread; several may compact one zone at once (pageblock skip bits give
 * each source pageblock a single owner; full compactions share blocks, each frame is
 * still isolated by one of them only).
 */
int gfa_compact_zone(struct gfa_pool *pool, unsigned int zone, int order,
		     enum gfa_compact_mode mode);

/**
 * gfa_alloc_compact() - direct compaction with capture
 * @owner: cookie the block is allocated to
 * @mt: its migratetype
 *
 * Compacts zone @zone (and only that zone) and hands the first free block of @order that
 * compaction forms to the caller, allocated to @owner as @mt, before any other thread can
 * see it.  Bounded: one meeting of the scanners per priority, ASYNC, SYNC_LIGHT, then SYNC
 * over the whole zone ignoring skip hints.  gfa_alloc() and gfa_pcp_alloc() call this
 * themselves for order > 0 unless GFA_ALLOC_NOCOMPACT.
 *
 * Return: the pfn, GFA_ENOMEM when no block could be formed, or the argument errors of
 * gfa_alloc().
 * Context: any thread.
 */
int64_t gfa_alloc_compact(struct gfa_pool *pool, unsigned int zone, unsigned int order,
			  enum gfa_migratetype mt, uint64_t owner);

/**
 * gfa_collapse() - khugepaged's collapse: move small blocks into one order-9 block
 * @owner: the owner of every block, registered with migrate ops
 * @pfns: the blocks' first pfns, all allocated MOVABLE to @owner
 * @orders: their orders (below 9)
 * @offs: where each goes in the new block, in frames
 * @n: how many (1..512)
 *
 * Each piece i goes to offset offs[i] of the new block through the owner's migrate op.
 * The new block is allocated in zone @zone (with direct compaction if needed) and owned
 * by @owner; the old blocks are freed.  All or nothing: pieces stay moved only if the
 * collapse as a whole succeeds: if the owner refuses a piece, the pieces already moved
 * go back to their old blocks through the same op (asked again while it answers
 * GFA_EAGAIN/GFA_EBUSY, a bounded number of times), the new block is freed and the claim it was
 * charged to (gfa_zone_claim()) gets its frames back.  A piece the owner will not take
 * back stays moved, as compaction leaves a block: it becomes a block of its order inside
 * the new one (where the owner maps it, freeable there), its old block and the rest of
 * the new one are freed, and the claim gets the new block's frames back.  Frames of the
 * new block no piece covers keep what they held, possibly another owner's data: an owner
 * covers the whole 2 MiB (as the guest does) or zeroes those frames itself.
 * An op that unregisters its owner (gfa_owner_register() with NULL ops) ends the
 * collapse: no op of that owner is called again, the pieces moved so far stay moved as
 * a piece the owner will not take back does, the others stay where they were, and the
 * result is GFA_ENOTFOUND (the new block's pfn, without the collapsed call, when that op
 * moved the last piece).
 *
 * Return: the new block's pfn, or GFA_EFAULT, GFA_ERANGE (zone, or a block outside it),
 * GFA_EINVAL (@n 0 or above 512, offsets that overlap or leave the block, the same pfn
 * twice), GFA_EALIGN (an offset or a pfn misaligned for its piece's order), GFA_EORDER (a
 * piece of order >= 9), GFA_ENOTHEAD, GFA_EWRONGORDER, GFA_EOWNER (a block is not the
 * owner's MOVABLE block of that order), GFA_EBUSY (being moved), GFA_ENOTFOUND (owner not
 * registered, or unregistered by one of its ops as above), GFA_ENOMEM, or the owner's
 * refusal (GFA_EBUSY/GFA_EAGAIN).
 * Context: any thread.
 */
int64_t gfa_collapse(struct gfa_pool *pool, unsigned int zone, uint64_t owner, const uint64_t *pfns,
		     const unsigned int *orders, const unsigned int *offs, unsigned int n);

/**
 * gfa_compactd_start() - start background compaction (kcompactd), one worker per zone
 *
 * Proactive when proactiveness > 0: compacts while the zone's fragmentation score is
 * above min(100 - proactiveness + 10, 100) until it is at most 100 - proactiveness,
 * checking every 500 ms, and after a proactive pass that did not lower the score only
 * every 64 intervals (the kernel's proactive_defer); also woken by failed order-9
 * allocations.
 *
 * Return: 0, GFA_EFAULT, GFA_EALREADY (running), or a pthread_create error.
 * Context: any thread; start and stop are serialised.
 */
int gfa_compactd_start(struct gfa_pool *pool);
/**
 * gfa_compactd_stop() - stop the workers and join them
 * @pool: the pool; NULL is a no-op (0)
 *
 * Return: 0.
 * Context: any thread but a worker.
 */
int gfa_compactd_stop(struct gfa_pool *pool);
/**
 * gfa_compactd_wake() - wake a zone's worker now (e.g. after a failed huge allocation)
 *
 * A NULL @pool or a zone out of range is a no-op.
 * Context: any thread.
 */
void gfa_compactd_wake(struct gfa_pool *pool, unsigned int zone);

/**
 * gfa_zone_fragmentation_score() - how fragmented a zone is for order-9 blocks
 *
 * The share of its free frames (buddy and caches) that lie in blocks smaller than a
 * pageblock.
 *
 * Return: 0..100, or GFA_EFAULT, GFA_ERANGE.
 * Context: any thread.
 */
int gfa_zone_fragmentation_score(struct gfa_pool *pool, unsigned int zone);

#ifdef __cplusplus
}
#endif
#endif /* GFA_ALLOCATOR_H */
