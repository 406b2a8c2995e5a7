/* SPDX-License-Identifier: MIT */
/*
 * Internal structures of the allocator layer.  Not installed.
 *
 * Frame descriptor layout (16 bytes, see struct gfa_frame):
 *   next, prev  u32  free/pcp list links as pool pfns (GFA_NIL = none).  An allocated
 *                    block is on no list, so the same 8 bytes hold its 64-bit owner
 *                    cookie (frame_owner()).
 *   state       u8   GFA_FRAME_* for a block head, 0 for a frame inside a block
 *   order       u8   block order (head only)
 *   mt          u8   free-list migratetype (free/pcp) or allocation migratetype
 *   flags       u8   FRAME_F_* bits, per frame (heads and tails)
 *   index       u32  the owner's index for an allocated block (page->index), keeps
 *                    the descriptor 16 bytes and aligned
 * Where they live (the frame map, frame_at()): the descriptor of a pageblock's first
 * frame in a dense array of pageblock heads, the other 511 in a sparse array that has a
 * slot for every pfn and host memory only where a pageblock was split.  A pageblock in
 * one block of order 9 or 10 (free, cached or allocated) writes only its head, so it
 * costs 16 bytes, not 8 KiB: memory that stays in 2 MiB blocks pays about 0.03 bytes a
 * frame for its descriptors.  A split pageblock is marked (PB_TAILS); its 8 KiB of tail
 * descriptors go back to the host when it is one free block again and its frames are
 * released (release_drop_tails()).  Tail frames are never written on alloc/free of a
 * block, which keeps alloc/free O(1) in the block size.
 */
#ifndef GFA_ALLOCATOR_INTERNAL_H
#define GFA_ALLOCATOR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <gfa/allocator.h>
#include "allocator/layers.h"
#include "common/bug.h"
#include "common/compiler.h"

#define GFA_NIL              UINT32_MAX
/*
 * A frame of an isolated free block (a compaction target, a capture) that was released
 * to the host when the block left the lists: its released bit comes back if the block
 * returns to the lists unwritten (release_take/release_restore).
 */
#define FRAME_F_WAS_RELEASED 0x1u
/*
 * The head of an in-flight block a scrub took (zone_scrub_take): free frames being
 * zeroed, counted free (gfa_zone.nr_scrub) while off the lists.
 */
#define FRAME_F_SCRUB        0x2u
#define MAX_ORDER_FRAMES     (1UL << GFA_MAX_ORDER)

struct gfa_frame {
	union {
		struct {
			uint32_t next;
			uint32_t prev;
		};
		uint64_t owner_word; /* both links as one word: an allocated block's owner */
	};
	uint8_t state;
	uint8_t order;
	uint8_t mt;
	uint8_t flags;
	uint32_t index;
};
_Static_assert(sizeof(struct gfa_frame) == 16, "frame descriptor must stay 16 bytes");

/*
 * The frame map: slot pfn of map holds the descriptor of pfn, except that the first
 * frame of each pageblock has its descriptor in the dense head array that ends
 * FRAME_HEAD_SLOTS slots below map (head k at map[k - FRAME_HEAD_SLOTS]).  A fixed
 * distance, so a cache keeps one pointer and the lookup one conditional move.  Pool
 * pfns stay below GFA_NIL (2^32), so 2^23 head slots hold every pool's heads.
 */
#define FRAME_HEAD_SLOTS (1L << (32 - GFA_PAGEBLOCK_ORDER))

static inline __attribute__((always_inline)) struct gfa_frame *frame_at(struct gfa_frame *map,
									uint64_t pfn)
{
	int64_t slot = (pfn & (GFA_PAGEBLOCK_FRAMES - 1)) ?
			       (int64_t)pfn :
			       (int64_t)(pfn >> GFA_PAGEBLOCK_ORDER) - FRAME_HEAD_SLOTS;

	return &map[slot];
}

/*
 * A vCPU's cache moves its own blocks between PCP and ALLOCATED without the zone lock,
 * while zone-lock holders (merging, scanners, lookups) may read any frame.  So `state`
 * is always accessed atomically (acquire/release), and the owner cookie, written by the
 * pcp path and read by lookups, with relaxed atomics.  Transitions out of ALLOCATED
 * use compare-and-swap so two racing frees of one block cannot both succeed.
 */
static inline unsigned int fstate(const struct gfa_frame *f)
{
	return __atomic_load_n(&f->state, __ATOMIC_ACQUIRE);
}
static inline void fstate_set(struct gfa_frame *f, unsigned int s)
{
	GFA_BUG_ON(s > GFA_FRAME_INFLIGHT);
	__atomic_store_n(&f->state, (uint8_t)s, __ATOMIC_RELEASE);
}
static inline bool fstate_cas(struct gfa_frame *f, unsigned int old, unsigned int new)
{
	uint8_t o = (uint8_t)old;

	return __atomic_compare_exchange_n(&f->state, &o, (uint8_t) new, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE);
}
static inline uint32_t flink_get(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void flink_set(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/*
 * Allocated blocks keep their owner cookie in the (unused) list links, read and written
 * as one word: one load and one store on the cache hot paths.
 */
static inline uint64_t frame_owner(const struct gfa_frame *f)
{
	return __atomic_load_n(&f->owner_word, __ATOMIC_RELAXED);
}
static inline void frame_set_owner(struct gfa_frame *f, uint64_t owner)
{
	__atomic_store_n(&f->owner_word, owner, __ATOMIC_RELAXED);
}

/* Pageblock flags (zone lock). */
#define PB_SKIP        0x1u /* compaction skip hint / ownership token */
/* split since its tail descriptors were last dropped: they hold memory */
#define PB_TAILS       0x2u
/* its tail descriptors are being given back with the zone lock dropped
 * (zone_drop_tails): no done may finish the block holding it meanwhile */
#define PB_TAILS_GOING 0x4u

struct gfa_pageblock {
	uint8_t mt;
	uint8_t flags;
	uint16_t nr_free;     /* frames of this pageblock on the buddy lists */
	uint16_t nr_released; /* of those, released to the host */
};

struct gfa_free_list {
	uint32_t head; /* newest (kernel: list head) */
	uint32_t tail; /* oldest */
	uint64_t nr;   /* blocks on the list */
};

struct gfa_free_area {
	struct gfa_free_list list[GFA_MT_TYPES];
	uint64_t nr_free; /* blocks of this order, all types */
};

/* Per-zone counters, protected by the zone lock. */
struct gfa_zone_counters {
	struct gfa_vmstat vm;
};

/*
 * An arena: an aligned run of the zone's pfns (a power of two of them, at least
 * ARENA_MIN_ORDER, so no buddy merge and no word of the free-head and release bitmaps
 * crosses two) with a lock, free lists and counts of its own (decisions 38).  A thread
 * on the zone path takes and frees blocks under its CPU's arena lock alone, and a cache
 * refills and drains there, so two CPUs share no line the way they shared the one
 * zone lock and its lists.  Everything else takes the zone lock: z->lock and then every
 * arena's (zone_lock()), and sees the whole zone as before.  Every field here is
 * written under this arena's lock (which the zone lock includes) and read under it or
 * the zone lock; the zone's sums (zone_nr_free() ...) want the zone lock.
 */
#define ARENA_MIN_ORDER 15 /* 128 MiB: what a word of free_pb_heads covers */
#define ARENAS_MAX      16
struct gfa_arena {
	pthread_mutex_t lock;
	uint64_t nr_free; /* frames on the buddy lists */
	struct gfa_free_area area[GFA_NR_ORDERS];
	uint64_t nr_released;        /* free frames released to the host */
	uint64_t nr_tail_pageblocks; /* pageblocks marked PB_TAILS: 8 KiB of descriptors each */
	/* pageblocks of each type, and with released frames: gfa_zone_stat sums them
	 * instead of walking the pageblocks (3 MiB of them at 1 TiB) */
	uint64_t nr_pb_mt[GFA_MT_TYPES];
	uint64_t nr_pb_sidelined;
	uint64_t release_scans; /* block_released() scans of release bits */
	/* events counted under this lock alone (the zone path's allocations and frees,
	 * fallbacks, steals, splits of metadata); gfa_zone_vmstat adds them to the zone's */
	struct gfa_vmstat vm;
} __attribute__((aligned(64)));

struct gfa_zone {
	pthread_mutex_t lock;
	struct gfa_pool *pool;
	unsigned int id;
	int node;
	uint64_t start_pfn; /* pool pfn of the first frame */
	uint64_t nr_frames;
	uint64_t nr_pageblocks;
	/* the arenas: arena i holds pfns [start_pfn + (i << arena_order), ...) */
	struct gfa_arena *arenas;
	unsigned int nr_arenas, arena_order;
	struct gfa_pageblock *pageblocks;
	/* what creation allocated for the zone's frames and pageblocks: descriptors (the
	 * alignment hole before the zone included), pageblocks, bitmaps (gfa_zone_stat) */
	uint64_t metadata_bytes;
	/*
	 * A held pool's sections whose metadata is not written yet (deferred.c): a bit per
	 * DEFERRED_SECTION_FRAMES, cleared once (zone lock, release order); NULL in a pool
	 * that is not held.  Their frames are held by held_owner.
	 */
	uint64_t *deferred;
	uint64_t nr_deferred_pageblocks;
	uint64_t held_owner;
	struct gfa_zone_counters c; /* zone lock; the arenas count their own */
	/* pcp sizing computed at creation */
	int pcp_batch, pcp_high_min, pcp_high_max;
	/* host backing */
	void *base;
	int memfd;
	/* compaction (zone lock) */
	uint64_t compact_cached_migrate_pfn[2]; /* [0] async, [1] sync */
	uint64_t compact_cached_free_pfn;
	bool compact_blockskip_flush; /* scanners met: reset skip bits next time */
	/* host release (zone lock) */
	uint64_t *released; /* bit per frame: free and released to the host */
	/*
	 * The heads of the blocks on the buddy lists (zone lock), in two bitmaps:
	 * free_pb_heads a bit per pageblock for the heads at a pageblock's first frame
	 * (every block of order 9 and up), free_heads a bit per frame for the others
	 * (whole words, 8 per pageblock, zones start MAX_ORDER-aligned; a pageblock's
	 * first bit there stays clear).  The full-mode free scanner finds a pageblock's
	 * free blocks from them instead of probing frames.  Apart, because a free of an
	 * order-9 block otherwise writes a cache line of its own in a bitmap of a bit per
	 * frame (32 MiB at 1 TiB): rand_9_zone in bench/scale.
	 */
	uint64_t *free_heads;
	uint64_t *free_pb_heads;
	uint64_t nr_inflight;
	/*
	 * Of nr_inflight, the frames scrubs hold: free frames being zeroed, counted free
	 * and claimable.  An allocation that finds no frame waits for them (scrub_done),
	 * and no scrub takes more while one waits (scrub_waiters).
	 */
	uint64_t nr_scrub;
	unsigned int scrub_waiters;
	pthread_cond_t scrub_done;
	struct gfa_release_policy rp;
	/* claims (zone lock; nr_claims also read without it to pick the pcp path) */
	struct {
		uint64_t owner, frames, gen;
	} claims[GFA_MAX_CLAIMS];
	uint64_t claim_gen; /* numbers claims, so a refund finds its own */
	unsigned int nr_claims;
	uint64_t claimed;
	/* isolation gate (pcp_holder.c): while up, cache frees compare-and-swap; raised in
	 * each cache of the zone (gfa_pcp.cas_free), isolating changes under pcp_lock */
	pthread_mutex_t isolate_lock;
	unsigned int isolate_users; /* isolate_lock; read racily as a hint (atomics) */
	_Atomic int isolating;
	/* kcompactd */
	pthread_t compactd __attribute__((aligned(64)));
	pthread_cond_t compactd_wait;
	bool compactd_running, compactd_wake;
};

/* Owner registry: open addressing, owner -> ops (read under pool->owner_lock). */
#define GFA_OWNER_SLOTS 65536
struct gfa_owner_slot {
	uint64_t owner;
	const struct gfa_owner_ops *ops; /* NULL: empty; &owner_tombstone: deleted */
	void *ctx;
	unsigned int users; /* __atomic: references taken by owner_get() */
};

/* A reference to an owner's ops: they may be called until owner_put(). */
struct owner_ref {
	struct gfa_owner_slot *slot;
	const struct gfa_owner_ops *ops;
	void *ctx;
	struct owner_ref *prev; /* this thread's references, innermost first */
};

struct gfa_pool {
	/* the frame map (frame_at()): a slot per pfn over all zones, heads below it */
	struct gfa_frame *frame_map;
	uint64_t nr_pfns; /* span of pfn space (incl. alignment holes) */
	unsigned int nr_zones;
	struct gfa_zone zones[GFA_MAX_ZONES];
	struct gfa_pool_config cfg;
	/* errors found before any zone lock is taken */
	_Atomic uint64_t err[16];
	/* registered caches */
	pthread_mutex_t pcp_lock;
	struct gfa_pcp *pcps;
	/* owners of movable blocks */
	pthread_rwlock_t owner_lock;
	struct gfa_owner_slot *owners;
	unsigned int nr_owners;
	pthread_mutex_t owner_wait_lock; /* unregister waits for owner_put() */
	pthread_cond_t owner_wait;
	struct gfa_compact_config compact;
	bool compactd_stop;            /* __atomic accessed */
	pthread_mutex_t compactd_lock; /* serializes gfa_compactd_start/stop */
	struct gfa_pool *fork_next;    /* pools whose caches fork() holds (pcp_holder.c) */
	gfa_moved_fn moved_fn;         /* __atomic: told of every block moved away */
	void *moved_ctx;
	gfa_released_fn released_fn; /* __atomic: told of every frame released */
	void *released_ctx;
};

/* Give the tail descriptors of the pageblocks in [pfn, pfn + nr) back to the host
 * (pool.c); they read as zero after.  Nobody may write them meanwhile.  0 or -errno
 * (the host kept them: the caller marks them again). */
int frame_map_drop_tails(struct gfa_pool *pool, uint64_t pfn, uint64_t nr);
/* Can this pool give tails back?  Not where a host page holds more than a pageblock's
 * tails (16 KiB and 64 KiB pages): a drop would take its neighbours' too. */
bool frame_map_drops(const struct gfa_pool *pool);
/*
 * Take the PB_TAILS marks of the pageblocks inside blocks of order 9 and up in
 * [pfn, end) (zone lock held; the caller holds those blocks so nobody splits them) as
 * up to TAIL_DROP_RUNS runs, marking those pageblocks PB_TAILS_GOING; returns
 * runs filled.  A mark that finds no room stays for another time (release_policy.c).
 * Then zone_drop_tails(), with the lock still held: it drops the lock for the madvise,
 * takes it again and clears PB_TAILS_GOING.
 */
#define TAIL_DROP_RUNS 16
struct gfa_frame_range;
unsigned int zone_take_tail_marks(struct gfa_zone *z, uint64_t pfn, uint64_t end,
				  struct gfa_frame_range *runs);
void zone_drop_tails(struct gfa_zone *z, const struct gfa_frame_range *runs, unsigned int n);

/* The descriptor of pool pfn pfn (frame_at()). */
static inline __attribute__((always_inline)) struct gfa_frame *
pfn_to_frame(const struct gfa_pool *pool, uint64_t pfn)
{
	return frame_at(pool->frame_map, pfn);
}

/* Error counter slots in pool->err (match the err_* vmstat order). */
enum gfa_err_slot {
	ERR_FAULT,
	ERR_RANGE,
	ERR_ALIGN,
	ERR_ORDER,
	ERR_MIGRATE,
	ERR_DOUBLE_FREE,
	ERR_WRONG_ORDER,
	ERR_NOT_HEAD,
	ERR_OWNER,
	ERR_BUSY,
	ERR_THREAD,
	ERR_INVAL,
	ERR_NR
};

/*
 * Is the zone's lock held (by some thread: a pthread mutex has no owner to ask)?  For
 * GFA_BUG_ON only: a function that needs the lock asserts it, and a test that calls it
 * without fails in every build with assertions.
 */
static inline bool zone_lock_held(struct gfa_zone *z)
{
	if (pthread_mutex_trylock(&z->lock))
		return true;
	pthread_mutex_unlock(&z->lock);
	return false;
}

/* The arena that holds pfn (of z). */
static inline __attribute__((always_inline)) struct gfa_arena *arena_of(const struct gfa_zone *z,
									uint64_t pfn)
{
	return &z->arenas[(pfn - z->start_pfn) >> z->arena_order];
}
/* The index of the arena that holds pfn, pfns outside z clamped to its first or last. */
static inline unsigned int arena_index(const struct gfa_zone *z, uint64_t pfn)
{
	if (pfn < z->start_pfn)
		return 0;
	if (pfn >= z->start_pfn + z->nr_frames)
		return z->nr_arenas - 1;
	return (unsigned int)((pfn - z->start_pfn) >> z->arena_order);
}
/* Is a's lock held (by its own or by the zone lock)?  For GFA_BUG_ON, as above. */
static inline bool arena_lock_held(struct gfa_arena *a)
{
	if (pthread_mutex_trylock(&a->lock))
		return true;
	pthread_mutex_unlock(&a->lock);
	return false;
}
/* The arena of the CPU this thread runs on: where its zone path and its caches go first. */
unsigned int arena_here(const struct gfa_zone *z);
/*
 * How a zone path walks the arenas for a block (zone_rmqueue(), the zone path's
 * allocation, a cache's refill): pass 0 takes each arena's blocks of the asked type,
 * from arena_here() (first) on; pass 1, unless nofallback, their fallbacks.  So no arena
 * steals a pageblock of another type while another still has a block of this one.
 */
static inline int arena_passes(bool nofallback)
{
	return nofallback ? 1 : 2;
}
static inline struct gfa_arena *arena_walk(const struct gfa_zone *z, unsigned int first,
					   unsigned int i)
{
	return &z->arenas[(first + i) % z->nr_arenas];
}
/* The zone lock: z->lock, then every arena's in order.  Excludes every zone path. */
void zone_lock(struct gfa_zone *z);
void zone_unlock(struct gfa_zone *z);
/* pthread_cond_wait on the zone lock: the arenas go while it sleeps. */
void zone_cond_wait(struct gfa_zone *z, pthread_cond_t *cond);
int zone_cond_timedwait(struct gfa_zone *z, pthread_cond_t *cond, const struct timespec *ts);
/* The zone's sums over its arenas (zone lock). */
uint64_t zone_nr_free(const struct gfa_zone *z);
uint64_t zone_nr_released(const struct gfa_zone *z);
uint64_t zone_nr_tail_pageblocks(const struct gfa_zone *z);
uint64_t zone_nr_pb_mt(const struct gfa_zone *z, unsigned int mt);
uint64_t zone_nr_pb_sidelined(const struct gfa_zone *z);
uint64_t zone_area_nr_free(const struct gfa_zone *z, unsigned int order);
uint64_t zone_list_nr(const struct gfa_zone *z, unsigned int order, unsigned int mt);

/* ---- buddy.c: everything here runs with zone->lock held ---- */
void buddy_list_add(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn, unsigned int order,
		    unsigned int mt, bool tail);
void buddy_list_del(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn);
/*
 * Free a block into the zone, merging; the block must not be on any list.  Returns
 * true when direct compaction running in this thread captured the merged block (then
 * it is on no list and its head is ISOLATED, owned by the capturing request).
 */
bool buddy_free_block(struct gfa_zone *z, uint64_t pfn, unsigned int order);
/* The same, the merged block at the tail of its list (cold: reused after the others). */
bool buddy_free_block_cold(struct gfa_zone *z, uint64_t pfn, unsigned int order);

/* Capture slot of the direct compaction running in this thread (compaction.c). */
struct capture_control {
	struct gfa_zone *zone;
	int order;
	unsigned int mt;
	int64_t pfn;     /* captured block, or -1 */
	bool nofallback; /* only from pageblocks of type mt (GFA_ALLOC_NOFALLBACK) */
};
extern __thread struct capture_control *compact_capc;
/* Take a block of exactly `order` and type mt (with fallback unless nofallback). */
int64_t buddy_rmqueue(struct gfa_zone *z, struct gfa_arena *a, unsigned int order, unsigned int mt,
		      bool nofallback);
/* The same from the whole zone (zone lock): every arena's type mt, then fallbacks. */
int64_t zone_rmqueue(struct gfa_zone *z, unsigned int order, unsigned int mt, bool nofallback);
/* Move every free block of pageblock pb to free list mt; returns free frames moved. */
uint64_t buddy_move_freepages_block(struct gfa_zone *z, uint64_t pb, unsigned int mt);
/* The word of the free-head bitmaps that holds pfn's bit, and the bit. */
static inline __attribute__((always_inline)) uint64_t *free_head_word(const struct gfa_zone *z,
								      uint64_t pfn, uint64_t *bit)
{
	uint64_t i = pfn - z->start_pfn;

	if (!(i & (GFA_PAGEBLOCK_FRAMES - 1))) {
		i >>= GFA_PAGEBLOCK_ORDER;
		*bit = 1ULL << (i % 64);
		return &z->free_pb_heads[i / 64];
	}
	*bit = 1ULL << (i % 64);
	return &z->free_heads[i / 64];
}
/* The free-head bitmaps: is pfn the head of a listed free block? */
static inline bool free_head_test(const struct gfa_zone *z, uint64_t pfn)
{
	uint64_t bit, w = *free_head_word(z, pfn, &bit);

	return w & bit;
}
/* The first free-block head in [pfn, end), or end. */
uint64_t free_head_next(const struct gfa_zone *z, uint64_t pfn, uint64_t end);

/* ---- pool.c, and the pageblock helpers every file uses ---- */
static inline struct gfa_pageblock *pfn_pageblock(struct gfa_zone *z, uint64_t pfn)
{
	return &z->pageblocks[(pfn - z->start_pfn) >> GFA_PAGEBLOCK_ORDER];
}
/*
 * A block head is about to be written at pfn: if that is a tail slot (pfn not the
 * first frame of its pageblock), the pageblock's tail descriptors hold memory from now
 * on.  Zone lock held.
 */
static inline __attribute__((always_inline)) void pb_mark_tails(struct gfa_zone *z, uint64_t pfn)
{
	struct gfa_pageblock *pb;

	if (!(pfn & (GFA_PAGEBLOCK_FRAMES - 1)))
		return;
	pb = pfn_pageblock(z, pfn);
	if (!(pb->flags & PB_TAILS)) {
		struct gfa_arena *a = arena_of(z, pfn);

		pb->flags |= PB_TAILS;
		a->nr_tail_pageblocks++;
		a->vm.metadata_split++;
	}
}
/*
 * A pageblock's migratetype changes under the zone lock, with an atomic store: cache
 * frees read it without the lock to guess a block's list before its descriptor arrives.
 */
static inline void pageblock_set_mt(struct gfa_pageblock *pb, unsigned int mt)
{
	__atomic_store_n(&pb->mt, (uint8_t)mt, __ATOMIC_RELAXED);
}
/* The arena that holds pageblock pb of z. */
static inline struct gfa_arena *pb_arena(const struct gfa_zone *z, const struct gfa_pageblock *pb)
{
	return &z->arenas[(uint64_t)(pb - z->pageblocks) >> (z->arena_order - GFA_PAGEBLOCK_ORDER)];
}
/* pageblock_set_mt(), counted in its arena's nr_pb_mt (arena lock, or z not yet shared). */
static inline void zone_pageblock_set_mt(struct gfa_zone *z, struct gfa_pageblock *pb,
					 unsigned int mt)
{
	struct gfa_arena *a = pb_arena(z, pb);

	GFA_BUG_ON(mt >= GFA_MT_TYPES || !a->nr_pb_mt[pb->mt]);
	a->nr_pb_mt[pb->mt]--;
	a->nr_pb_mt[mt]++;
	pageblock_set_mt(pb, mt);
}
struct gfa_zone *pool_pfn_zone(struct gfa_pool *pool, uint64_t pfn);

/*
 * Deferred init of a held pool's metadata (deferred.c).  A section is the pageblocks
 * whose heads share one page of the heads array, aligned in pool pfns, so blocks (at
 * most MAX_ORDER) never cross one.
 */
#define DEFERRED_SECTION_ORDER  (GFA_PAGEBLOCK_ORDER + 8)
#define DEFERRED_SECTION_FRAMES (1UL << DEFERRED_SECTION_ORDER)
_Static_assert((DEFERRED_SECTION_FRAMES >> GFA_PAGEBLOCK_ORDER) * sizeof(struct gfa_frame) == 4096,
	       "a section's heads fill one page");
static inline uint64_t deferred_section(const struct gfa_zone *z, uint64_t pfn)
{
	return (pfn >> DEFERRED_SECTION_ORDER) - (z->start_pfn >> DEFERRED_SECTION_ORDER);
}
/* Is pfn (of z) in a section whose metadata is not written yet?  Any lock or none. */
static inline bool pfn_deferred(const struct gfa_zone *z, uint64_t pfn)
{
	uint64_t s;

	if (likely(!z->deferred))
		return false;
	s = deferred_section(z, pfn);
	return (__atomic_load_n(&z->deferred[s / 64], __ATOMIC_ACQUIRE) >> (s % 64)) & 1;
}
/* The first frame of the last pageblock of pfn's section: a walk steps over it. */
static inline uint64_t deferred_section_last_pb(uint64_t pfn)
{
	return (pfn | (DEFERRED_SECTION_FRAMES - 1)) & ~(uint64_t)(GFA_PAGEBLOCK_FRAMES - 1);
}
/* Hold every frame of z for owner, each section's metadata written at its first use. */
int zone_deferred_setup(struct gfa_zone *z, uint64_t owner);
/* Write the metadata of the sections [pfn, pfn + nr) of z touches (clipped to z) that
 * are deferred: zone lock held, or (zone_deferred_init) taken if there are any. */
void zone_deferred_init_locked(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
void zone_deferred_init(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
/* zone_deferred_init() of pfn's section, the lock held (locked) or not: did it write? */
bool zone_deferred_init_frame(struct gfa_zone *z, uint64_t pfn, bool locked);
/* What the deferred sections' init will write (metadata_bytes counts it already). */
uint64_t zone_deferred_meta_bytes(const struct gfa_zone *z);
/* Hold [from, to) of z for owner in the largest aligned blocks that fit (zone lock). */
void zone_hold_range(struct gfa_zone *z, uint64_t from, uint64_t to, uint64_t owner);
/* The order of the largest aligned block at pfn that ends by end. */
static inline unsigned int fit_order(uint64_t pfn, uint64_t end)
{
	unsigned int order = GFA_MAX_ORDER;

	while (order > 0 && ((pfn & ((1UL << order) - 1)) || pfn + (1UL << order) > end))
		order--;
	return order;
}
/* Find the head of the block containing pfn (zone lock held); GFA_NIL if none. */
uint64_t frame_find_head(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn);
void pool_count_err(struct gfa_pool *pool, int err);
/* Count err (an argument error of a public call) and return it: `return pool_err(p, e);` */
static inline int pool_err(const struct gfa_pool *pool, int err)
{
	pool_count_err((struct gfa_pool *)pool, err); /* the counters are atomics */
	return err;
}

/* ---- alloc.c: zone path with the zone lock held, counters included ---- */
/*
 * Validate a free request and, when it is valid, move the head from ALLOCATED to
 * new_state atomically.  0 or the error (not counted).  The caller holds the zone
 * lock unless new_state is GFA_FRAME_PCP (a cache's free); then only the fast case is
 * decided without it, and a tail takes it (frame_find_head).
 */
int frame_begin_free(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn, unsigned int order,
		     uint64_t owner, unsigned int new_state);
/* Mark a block allocated (zone lock or owning pcp lock held). */
void frame_mark_allocated(struct gfa_frame *f, unsigned int mt, uint64_t owner);
int64_t zone_alloc_locked(struct gfa_zone *z, unsigned int order, unsigned int mt, uint64_t owner,
			  unsigned int flags);
void zone_free_locked(struct gfa_zone *z, uint64_t pfn, unsigned int order);
/* A block back to the buddy lists, not counted as a free: a cache's drain (its
 * owner's free was counted when the block entered the cache). */
void zone_return_locked(struct gfa_zone *z, uint64_t pfn, unsigned int order);
/* Count a caller's free of a block of order (pgfree_blocks and the like); zone lock held. */
void zone_count_free(struct gfa_zone *z, unsigned int order);
/* A free's pfn and order checks: 0 and *zp, or the error (not counted). */
int free_args(struct gfa_pool *pool, uint64_t pfn, unsigned int order, struct gfa_zone **zp);
/* An allocation found no frame: wait for the frames scrubs hold and try once more
 * (GFA_ENOMEM at once when none are held; no lock held). */
int64_t zone_alloc_after_scrub(struct gfa_zone *z, unsigned int order, unsigned int mt,
			       uint64_t owner, unsigned int flags);

/* ---- release_policy.c ---- */
int release_zone_init(struct gfa_zone *z);
/* A block leaves the free lists for an owner: its frames are populated from now on. */
void release_clear(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
/*
 * release_clear() for a free block leaving the lists isolated, which may come back
 * unwritten (a compaction target, a capture): its released frames get
 * FRAME_F_WAS_RELEASED.  release_restore() gives them their bits back (the block is
 * about to be freed), release_forget() drops the marks (the frames get written).
 * All with the zone lock held.
 */
void release_take(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
void release_restore(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
void release_forget(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
/* Any released frame in [pfn, pfn + nr)?  (zone lock held) */
bool release_bits_any(const struct gfa_zone *z, uint64_t pfn, uint64_t nr);
/* [pfn, pfn + nr), being freed by its owner, had its host memory punched: released
 * (counted in release_done), before it goes on the lists (zone lock held). */
void zone_mark_released(struct gfa_zone *z, uint64_t pfn, uint64_t nr);
static inline bool release_test(const struct gfa_zone *z, uint64_t pfn)
{
	uint64_t i = pfn - z->start_pfn;

	return z->released[i / 64] & (1ULL << (i % 64));
}

/* ---- claim.c ---- */
/* May owner take 2^order frames without eating others' claims?  (zone lock held) */
bool claim_allows(struct gfa_zone *z, uint64_t owner, unsigned int order);
/* Charge 2^order frames just given to owner against its claim, if it has one. */
void claim_consume(struct gfa_zone *z, uint64_t owner, unsigned int order);
/*
 * Count what this thread's allocations take from owner's claim, to undo one (a failed
 * collapse): watch, allocate, unwatch gives the charge.  Nests (saved/restored).
 */
uint64_t claim_watch(uint64_t owner, uint64_t *saved_taken);
uint64_t claim_unwatch(uint64_t saved_owner, uint64_t saved_taken);
/* Give back frames charged to owner's claim, if the claim is still there (zone lock). */
void claim_refund(struct gfa_zone *z, uint64_t owner, uint64_t frames, uint64_t gen);
/* The generation of the claim this thread's last watched charge went to. */
uint64_t claim_watched_gen(void);
/* Free frames no claim holds, those scrubs hold included (zone lock held). */
uint64_t claim_unclaimed_free(struct gfa_zone *z);
/* The same on the lists alone: what host work may take (zone lock held). */
uint64_t claim_unclaimed_listed(struct gfa_zone *z);

/* ---- compact_direct.c ---- */
/* Slow path of an allocation that failed on the free lists (no lock held). */
int64_t zone_alloc_slow(struct gfa_zone *z, unsigned int order, unsigned int mt, uint64_t owner,
			unsigned int flags);

/* ---- compaction.c ---- */
void compaction_zone_init(struct gfa_zone *z);
/* One compaction run of zone z (compaction.c); how: COMPACT_* bits. */
#define COMPACT_DIRECT      0x1u /* direct compaction for an allocation */
#define COMPACT_IGNORE_SKIP 0x2u /* last resort: whole zone, skip hints ignored */
#define COMPACT_NOFALLBACK  0x4u /* the request takes its own migratetype only */
int compact_run(struct gfa_zone *z, int order, unsigned int mt, enum gfa_compact_mode mode,
		unsigned int how, struct capture_control *capc);
/* kcompactd's pass: order -1 = proactive (score-driven), else for that order. */
void compact_zone_background(struct gfa_zone *z, int order);

/* ---- owner.c ---- */
/* Owner lookup for the scanners; NULL when not registered. */
const struct gfa_owner_ops *owner_lookup(struct gfa_pool *pool, uint64_t owner, void **ctx);
/*
 * Take a reference to a registered owner's ops (false: not registered).  Unregistering
 * the owner waits until every reference is put, so the ops and ctx stay valid between.
 * References nest and are put in the reverse order (r lives on the caller's stack).
 */
bool owner_get(struct gfa_pool *pool, uint64_t owner, struct owner_ref *r);
void owner_put(struct gfa_pool *pool, struct owner_ref *r);
/* Is r's owner still registered with the same ops?  (An op may unregister its owner.) */
bool owner_ref_live(struct gfa_pool *pool, const struct owner_ref *r);
/* ops->migrate(), and on success the pool's moved hook on the source it left. */
int owner_migrate(struct gfa_pool *pool, const struct gfa_owner_ops *ops, void *ctx, uint64_t owner,
		  uint64_t src, uint64_t dst, unsigned int order);
int owner_registry_init(struct gfa_pool *pool);
void owner_registry_destroy(struct gfa_pool *pool);

/* ---- pcp_tune.c ---- */
/* The zone's cache sizing (pcp_batch, pcp_high_min/max), at pool creation. */
void pcp_zone_init(struct gfa_pool *pool, struct gfa_zone *z);

/* ---- pcp.c ---- */
/* Take/release every cache's lock (as a remote drainer) for stop-the-world readers. */
void pcp_lock_all(struct gfa_pool *pool);
void pcp_unlock_all(struct gfa_pool *pool);
/* With pcp_lock_all held: frames the caches of zone z hold, by their counters. */
uint64_t pcp_zone_frames(struct gfa_pool *pool, struct gfa_zone *z);
/* Blocks per order on zone's caches (relaxed list lengths); pcp_lock held (and the zone
 * lock, for a snapshot refills and drains cannot cut). */
void pcp_stat_blocks_locked(struct gfa_pool *pool, unsigned int zone, uint64_t *blocks);
/*
 * Add the counters of zone's caches (all when zone < 0), with pool->pcp_lock held from
 * before the zone counters were read: a cache destroyed in between would fold its
 * counts into a zone already read and leave the list, and the sum would go down.
 */
void pcp_add_vmstat_zone(struct gfa_pool *pool, int zone, struct gfa_vmstat *vs);
/* The claims of zone z changed (pool->pcp_lock held): its caches route allocations. */
void pcp_claims_changed(struct gfa_zone *z);

/* ---- pcp_holder.c ---- */
void pcp_holder_init(void);
/* Pools whose caches fork() holds, so no cache call is half done in the child. */
void pcp_pool_register(struct gfa_pool *pool);
void pcp_pool_unregister(struct gfa_pool *pool);
/*
 * Around any isolation of allocated blocks of z (compaction, collapse): cache frees that
 * could race with it use compare-and-swap from begin to end.  Nests; may sleep.
 */
void pcp_isolate_begin(struct gfa_zone *z);
void pcp_isolate_end(struct gfa_zone *z);

#endif
