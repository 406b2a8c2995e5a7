/* SPDX-License-Identifier: MIT */
/*
 * Per-vCPU caches: the structure and the holder protocol's fast half (pcp_holder.c has
 * the slow half).  Not installed.
 *
 * The holder protocol: no atomic read-modify-write on the hot path.
 * A cache is owned by one thread, named by that thread's record (struct pcp_thread) in
 * the cache's holder word.  The holder marks "inside a call" by storing the cache's
 * address in its record's `in`, a plain store on a line only it writes; then, after a
 * compiler barrier, it reads the holder word and enters only if it is exactly its record.
 * Another thread (a drainer, the checker, a thread taking the cache over, compaction
 * raising a zone's isolation gate) first sets the word's PCP_HOLDER_REMOTE tag, then
 * issues membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full memory barrier
 * on every thread of the process that is running, and only then reads the holder's `in`.
 * This is the asymmetric Dekker pattern of userspace RCU: either the holder sees the tag
 * and backs off, or the remote side sees the holder inside and waits for it to leave;
 * since every later entry backs off while the tag is set, that wait ends.  The holder
 * pays two plain stores and one load per call instead of a locked instruction; the rare
 * side pays a membarrier (about 9 us on the 2-CPU test machine).  Without membarrier
 * (old kernels, seccomp) holder words carry PCP_HOLDER_FENCE: the entry's first compare
 * fails, and the holder fences before the decisive load.
 *
 * Records are per thread, never freed (reused after a thread exits), so a remote reader
 * never touches freed memory, and only their thread writes them: a thread that has lost
 * a cache and backs off can never overwrite the new holder's state.
 */
#ifndef GFA_ALLOCATOR_PCP_H
#define GFA_ALLOCATOR_PCP_H

#include "allocator/internal.h"
#include "common/compiler.h"

#define PCP_COSTLY_ORDER     3
#define NR_PCP_THP           1
#define NR_PCP_LISTS         (GFA_MT_PCPTYPES * (PCP_COSTLY_ORDER + 1 + NR_PCP_THP))
#define PCP_BATCH_SCALE_MAX  5
#define PCP_THP_REFILL       8    /* pageblock-order blocks per refill, at most */
#define PCPF_FREE_HIGH_BATCH 0x2u /* gfa_pcp_free_many: free_high waits for a batch */

#define PCP_HOT static inline __attribute__((always_inline))

/*
 * A full fence.  TSan cannot model atomic_thread_fence; a seq_cst read-modify-write of a
 * thread-local word orders the same on x86 and is understood by it.
 */
static inline void pcp_full_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	static __thread _Atomic int dummy;

	atomic_fetch_add_explicit(&dummy, 0, memory_order_seq_cst);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* One per thread that ever used a cache; written only by that thread. */
struct pcp_thread {
	_Atomic(struct gfa_pcp *) in; /* the cache this thread is inside a call on, or NULL */
	struct pcp_thread *next;      /* registry, under pcp_threads_lock */
	bool unused;                  /* its thread exited; free for reuse */
} __attribute__((aligned(64)));

/*
 * This thread's record; until it has one, a shared record that owns no cache, so the
 * fast entry fails on its holder check and no call needs a NULL test.
 */
extern __thread struct pcp_thread *pcp_self __attribute__((tls_model("initial-exec")));
extern struct pcp_thread pcp_nobody;
/* membarrier is missing: holders pay a full fence on entry instead */
extern bool pcp_holder_fence;

/*
 * A pcp list: a deque of block pfns in a ring that grows by doubling, newest at `top`
 * (the kernel's list head), oldest at `bottom` (its tail).  Free pushes and allocation
 * pops at the top, bulk free takes from the bottom, refill appends below the bottom.
 * An array and not links through the frame descriptors: popping a block then touches
 * only that block's descriptor, not its neighbour's (one cache miss less per call).
 */
struct pcp_list {
	uint32_t *ring;
	uint32_t mask;        /* ring size - 1; the ring exists from creation on */
	uint32_t top, bottom; /* free-running; nr = top - bottom */
};

static inline uint32_t plist_nr(const struct pcp_list *l)
{
	return l->top - l->bottom;
}

/* The list's i-th block from the oldest (checker and statistics). */
static inline uint32_t plist_at(const struct pcp_list *l, uint32_t i)
{
	return l->ring[(l->bottom + i) & l->mask];
}

/* The order of the blocks on list pindex. */
static inline unsigned int pindex_to_order(int pindex)
{
	unsigned int order = (unsigned int)pindex / GFA_MT_PCPTYPES;

	return order > PCP_COSTLY_ORDER ? GFA_PAGEBLOCK_ORDER : order;
}

/* slots[] size: orders 0..15, so one unsigned compare bounds any order */
#define PCP_ORDER_SLOTS 16

/* What the hot paths need to know of one order, precomputed per cache. */
struct pcp_slot {
	uint64_t nr_offs; /* block offsets in the zone: frames - (1 << order) + 1; 0: none */
	uint32_t mask;    /* (1 << order) - 1: alignment */
	int16_t base;     /* GFA_MT_PCPTYPES * list row; -1: the cache keeps no such order */
};

struct gfa_pcp {
	/*
	 * Read by the holder on every call, written by others only on the slow side: the
	 * holder's record, tagged PCP_HOLDER_FENCE in fence mode (so the membarrier-mode
	 * entry, one compare with the caller's record, fails there and the holder fences
	 * before checking again), with
	 * PCP_HOLDER_REMOTE set while a remote holder or a taker holds the cache.
	 */
	_Atomic uintptr_t holder_word;
	/* frees take the frame state by compare-and-swap while non-zero: 1 for a pcp_free_strict
	 * pool, plus 1 while the zone's isolation gate is up (pcp_holder.c) */
	_Atomic int cas_free;
	/* what every hit reads or writes, in the holder word's line */
	int count; /* frames on all lists */
	int high;
	int free_count;
	int free_count_cap;  /* batch << PCP_BATCH_SCALE_MAX */
	bool prev_free_high; /* the previous free was of order 1..3 (free_high streak) */
	bool no_high_order;
	struct gfa_frame *frame_map; /* the pool's (frame_at()) */
	/*
	 * slots[order].base for allocations: -1 also while the zone has claims (they are
	 * decided per owner under the zone lock); set under pool->pcp_lock, read racily by
	 * the holder.  Here and not in the slot, so an allocation hit reads no slot line.
	 */
	_Atomic int8_t alloc_base[PCP_ORDER_SLOTS];
	uint64_t zone_start;
	/* the free path's: the zone's pageblocks (list guess) and the per-order table */
	struct gfa_pageblock *pageblocks;
	struct pcp_slot slots[PCP_ORDER_SLOTS];
	struct pcp_list lists[NR_PCP_LISTS];
	/* the slow side's */
	_Atomic int holder_waiting; /* the holder waits to enter: takers let it in first */
	int batch, high_min, high_max;
	unsigned int flags;
	unsigned int free_high_threshold;
	uint64_t zone_frames;
	struct gfa_pool *pool;
	struct gfa_zone *zone;
	uint64_t idle_seen_ops; /* allocations + frees when the idle drain last looked */
	uint64_t idle_since_ms;
	struct gfa_pcp *next; /* pool->pcps, under pool->pcp_lock */
	/* this cache's share of the counters, last: a hit touches one line of it.
	 * pcp_alloc, pgalloc_blocks and pgalloc follow from alloc_order[] when read
	 * (pcp_add_counters) */
	struct gfa_vmstat vs;
};

/* The descriptor of pfn, from the cache's copy of the frame map pointer. */
static inline __attribute__((always_inline)) struct gfa_frame *pcp_frame(const struct gfa_pcp *pcp,
									 uint64_t pfn)
{
	return frame_at(pcp->frame_map, pfn);
}

/* Allocations served by this cache: the hot path counts each once, per order. */
static inline uint64_t pcp_nr_alloc(const struct gfa_pcp *pcp)
{
	uint64_t n = 0;

	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++)
		n += pcp->vs.alloc_order[o];
	return n;
}

/* Frees by this cache's holder: counted once each, per order, as allocations are. */
static inline uint64_t pcp_nr_free(const struct gfa_pcp *pcp)
{
	uint64_t n = 0;

	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++)
		n += pcp->vs.free_order[o];
	return n;
}

/*
 * Does free_high fire for a free of `order` after which the cache holds count_after
 * frames?  Linux 6.15's free_unref_page_commit(): orders 1..3 only, when the previous
 * free was high-order too and free_count, as it was before this free, reached the
 * threshold; a batch of frees (PCPF_FREE_HIGH_BATCH) waits until a batch is cached.
 */
static inline __attribute__((always_inline)) bool
pcp_free_high_fires(const struct gfa_pcp *pcp, unsigned int order, int count_after)
{
	return order && order <= PCP_COSTLY_ORDER &&
	       pcp->free_count >= (int)pcp->free_high_threshold && pcp->prev_free_high &&
	       (!(pcp->flags & PCPF_FREE_HIGH_BATCH) || count_after >= pcp->batch);
}

/* ---- pcp.c ---- */
/* free_pcppages_bulk(): count frames back to the zone, list pindex first; frames freed. */
int pcp_free_bulk(struct gfa_pcp *pcp, int count, int pindex);
/* ---- pcp_tune.c: sizing and auto-tuning ---- */
/* A new cache's batch, high, high_min/max and free_high threshold from its zone's. */
void pcp_tune_init(struct gfa_pcp *pcp, const struct gfa_zone *z);
/* Blocks a refill of `order` takes; high grows toward high_max on the way. */
int pcp_refill_count(struct gfa_pcp *pcp, unsigned int order);
/* A free's free_high bookkeeping; returns whether free_high fires. */
bool pcp_free_high_update(struct gfa_pcp *pcp, unsigned int order, int count_after);
/* After a free of `order` joined the lists: frames to send back to the zone (0: none). */
int pcp_free_nr(struct gfa_pcp *pcp, unsigned int order);

#define PCP_HOLDER_REMOTE 0x1UL
#define PCP_HOLDER_FENCE  0x2UL
#define PCP_HOLDER_TAGS   (PCP_HOLDER_REMOTE | PCP_HOLDER_FENCE)

/* The holder's record, tags off (any thread; a snapshot). */
static inline struct pcp_thread *pcp_holder(const struct gfa_pcp *pcp)
{
	return (struct pcp_thread *)(atomic_load_explicit(&pcp->holder_word, memory_order_acquire) &
				     ~PCP_HOLDER_TAGS);
}

/* ---- pcp_holder.c ---- */
/* The whole entry when the fast one fails: record, takeover, waits; the error counted. */
int pcp_enter_slow(struct gfa_pcp *pcp);
/* Remote side: hold one cache (with its own membarrier) / every cache of a zone. */
void pcp_remote_lock(struct gfa_pcp *pcp);
void pcp_remote_unlock(struct gfa_pcp *pcp);
/* With pool->pcp_lock held: hold every cache of zone (all when zone < 0), one membarrier. */
void pcp_remote_lock_zone(struct gfa_pool *pool, int zone);
void pcp_remote_unlock_zone(struct gfa_pool *pool, int zone);

/*
 * The entry of the two hot calls, for a thread that has a record: mark the record
 * inside pcp, then check that the holder word is this record, untagged (no remote
 * holder, not fence mode).  The check comes after the store: a thread that is not the
 * holder may mark itself inside for a moment, which no one reads (remote sides look only
 * at the holder's record).  False after backing off (the caller then takes the slow
 * entry).
 */
PCP_HOT bool pcp_enter_fast(struct gfa_pcp *pcp, struct pcp_thread *me)
{
	uintptr_t w;

	atomic_store_explicit(&me->in, pcp, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	w = atomic_load_explicit(&pcp->holder_word, memory_order_acquire);
	/* ours, untagged: no remote holder and not fence mode */
	if (likely(w == (uintptr_t)me))
		return true;
	/* fence mode, ours, no remote holder: the full fence, then the same check again */
	if (w == ((uintptr_t)me | PCP_HOLDER_FENCE)) {
		pcp_full_fence();
		if (atomic_load_explicit(&pcp->holder_word, memory_order_acquire) == w)
			return true;
	}
	atomic_store_explicit(&me->in, NULL, memory_order_release);
	return false;
}

/* Leave a call: out of every cache, publishing everything done inside. */
PCP_HOT void pcp_exit_fast(struct pcp_thread *me)
{
	atomic_store_explicit(&me->in, NULL, memory_order_release);
}

/* Enter a call on pcp as its holder: the fast entry, else the slow one.  0 or an error. */
PCP_HOT int pcp_enter(struct gfa_pcp *pcp)
{
	struct pcp_thread *me = pcp_self;

	if (unlikely(!pcp))
		return GFA_EFAULT;
	if (likely(pcp_enter_fast(pcp, me)))
		return 0;
	return pcp_enter_slow(pcp);
}

/* Leave the call entered by pcp_enter(). */
PCP_HOT void pcp_exit(void)
{
	pcp_exit_fast(pcp_self);
}

#endif
