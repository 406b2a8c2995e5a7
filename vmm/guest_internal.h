/* SPDX-License-Identifier: MIT */
/* The guest object, shared by vmm/guest.c and vmm/balloon.c.  Not installed. */
#ifndef GFA_VMM_GUEST_INTERNAL_H
#define GFA_VMM_GUEST_INTERNAL_H
#include <pthread.h>
#include <stdlib.h>
#include <gfa/vmm.h>
#include "common/bug.h"
#include "vmm/uffd.h"

#define RANGE_FRAMES        GFA_PAGEBLOCK_FRAMES
#define RANGE_BYTES         (RANGE_FRAMES << GFA_FRAME_SHIFT)
#define NO_PFN              UINT64_MAX
#define NOT_HEAD            0xff
/* A lazy guest may be this many times its zone (overcommit; vmm.h's ENOMEM). */
#define LAZY_OVERCOMMIT_MAX 64

/* The per-4 KiB detail of a split range: ballooned in part, or backed by small blocks. */
struct guest_range_detail {
	uint64_t pfn[RANGE_FRAMES];  /* gfn -> pfn, NO_PFN when ballooned out */
	uint8_t order[RANGE_FRAMES]; /* order of the block starting there, NOT_HEAD */
};

/*
 * One 2 MiB range of guest RAM.  Most are one order-9 block and need one pfn; only a
 * split range carries per-4 KiB detail (a 128 GiB guest's bookkeeping is 1 MiB, not
 * 288 MiB of gfn arrays).
 *   d != NULL      split: d says everything (pfn unused)
 *   pfn != NO_PFN  one order-9 block at pfn
 *   else           a hole: every gfn ballooned out, each a block of order 0 of its own
 */
struct guest_range {
	uint64_t pfn;
	struct guest_range_detail *d;
};

struct gfa_guest {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	uint64_t id;
	unsigned int zone;
	/* The window spans [base, base + size) of guest physical memory, in whole 2 MiB
	 * ranges; guest RAM is the regions in it (absolute GPAs, sorted, disjoint, touching
	 * ones merged) and ram_bytes their sum.  Inside gfa a gfn counts from base: the
	 * public calls take absolute GPAs and subtract base once (guest_gpa_check). */
	uint64_t base, size, nr_frames, nr_ranges, ram_bytes;
	struct gfa_gpa_range *regions;
	unsigned int nr_regions;
	uint64_t *absent; /* bit per 2 MiB range: no region touches it (never backed) */
	char *win;
	void *reserve; /* our own reservation (NULL: the caller's window) */
	size_t reserve_len;
	pthread_mutex_t lock; /* recursive: collapse calls back into migrate */
	struct guest_range *range;
	struct gfa_guest_vcpu_ops ops;
	void *ops_ctx;
	/*
	 * The pause fallback's state, under pause_lock (a leaf lock: a compaction batch's
	 * end takes it without g->lock, which a guest thread may hold while it compacts).
	 * The vCPUs are paused while pause_refs > 0: each move or collapse outside a batch
	 * holds one, and the open compaction batches (batches) share one (batch_ref).
	 */
	pthread_mutex_t pause_lock;
	unsigned int pause_refs, batches;
	bool batch_ref;
	bool pausing; /* __atomic: the vCPUs are being paused or are paused
				 * (guest_lock_any_thread() reads it without a lock) */
	uint64_t pause_t0;
	struct gfa_guest_stat st;
	uint64_t nr_mappings;       /* mmap calls the window's creation took (one per run) */
	uint64_t collapse_lo;       /* first gfn of the range being collapsed, or NO_PFN */
	unsigned int collapse_left; /* its pieces not yet copied to the target */
	uint64_t collapse_target;   /* the target's first pfn, NO_PFN before the first */
	bool collapse_mapped;       /* the target is mapped over the range */
	bool registered;            /* our owner ops are in the pool: destroy removes them */
	bool small_only;            /* never an order-9 block (cfg->small_only; collapse aside) */
	bool pinned;                /* GFA_GUEST_PINNED: unmovable frames, never moved */
	bool wp;                    /* moves write-protect through uffd (else: pause fallback) */
	bool wp_only;               /* GFA_GUEST_WP_ONLY: no pause fallback (no move without wp) */
	bool thp_advise;            /* the host's shmem THP heeds MADV_HUGEPAGE (at create) */
	struct guest_uffd uffd;
	uint32_t *pins; /* per 2 MiB range: gfa_guest_pin() count */
	gfa_guest_moved_fn moved_fn;
	void *moved_ctx;
	/* GFA_GUEST_LAZY (vmm/guest_lazy.c), under lock */
	bool lazy;
	struct gfa_guest_lazy lz; /* the config's, fill_fd our dup */
	uint64_t *unfilled;       /* per gfn: the fill source still has its contents */
	int refuse_fd;            /* an empty memfd: a refused touch maps it and faults */
	int placeholder_fd;       /* a sparse memfd of the guest's size that never gets a
				 * page: the window's placeholder (vmm/guest_lazy.c) */
	struct lazy_vcpu *vcpus;  /* gfa_guest_vcpu_cache() */
	unsigned int nr_vcpus, cap_vcpus;
};

/* The owner ops of every guest (vmm/guest_move.c). */
extern const struct gfa_owner_ops guest_owner_ops;

/* The host address of gfn in the window. */
static inline void *guest_addr(const struct gfa_guest *g, uint64_t gfn)
{
	return g->win + (gfn << GFA_FRAME_SHIFT);
}

/* No region touches the 2 MiB range holding gfn: it is never backed. */
static inline bool guest_range_absent(const struct gfa_guest *g, uint64_t gfn)
{
	uint64_t r = gfn / RANGE_FRAMES;

	return g->absent[r / 64] & (1ULL << (r % 64));
}

/* The absolute guest physical address of gfn. */
static inline uint64_t guest_gfn_gpa(const struct gfa_guest *g, uint64_t gfn)
{
	return g->base + (gfn << GFA_FRAME_SHIFT);
}

/* The range holding gfn may not move (a pin, or a pinned guest). */
static inline bool guest_range_pinned(const struct gfa_guest *g, uint64_t gfn)
{
	return g->pinned || g->pins[gfn / RANGE_FRAMES];
}

static inline struct guest_range *gfn_range(const struct gfa_guest *g, uint64_t gfn)
{
	return &g->range[gfn / RANGE_FRAMES];
}

/* The pfn backing gfn, or NO_PFN. */
static inline uint64_t guest_pfn(const struct gfa_guest *g, uint64_t gfn)
{
	const struct guest_range *r = gfn_range(g, gfn);

	if (r->d)
		return r->d->pfn[gfn % RANGE_FRAMES];
	return r->pfn == NO_PFN ? NO_PFN : r->pfn + gfn % RANGE_FRAMES;
}

/* The order of the block starting at gfn (a hole's gfn: 0), or NOT_HEAD. */
static inline unsigned int guest_order(const struct gfa_guest *g, uint64_t gfn)
{
	const struct guest_range *r = gfn_range(g, gfn);

	if (r->d)
		return r->d->order[gfn % RANGE_FRAMES];
	if (r->pfn == NO_PFN)
		return 0;
	return gfn % RANGE_FRAMES ? NOT_HEAD : GFA_PAGEBLOCK_ORDER;
}

/* Frames of the block starting at head (callers pass a head: a gfn inside a block
 * would count one, never a shift by NOT_HEAD). */
static inline uint64_t guest_block_frames(const struct gfa_guest *g, uint64_t head)
{
	unsigned int order = guest_order(g, head);

	return order == NOT_HEAD ? 1 : 1ULL << order;
}

/* One order-9 block backs the range starting at gfn (2 MiB aligned). */
static inline bool guest_range_huge(const struct gfa_guest *g, uint64_t gfn)
{
	const struct guest_range *r = gfn_range(g, gfn);

	return !r->d && r->pfn != NO_PFN;
}

/* Regions (vmm/guest_regions.c).  The config's: EINVAL or ERANGE as a positive errno, or
 * 0 with the window's *span and the bytes of the 2 MiB ranges they touch (*backed). */
int guest_check_regions(const struct gfa_guest_config *cfg, uint64_t *span, uint64_t *backed);
/* Set base, size, nr_frames, nr_ranges, ram_bytes, regions and absent: 0 or -ENOMEM
 * (guest_free_regions() undoes it either way). */
int guest_setup_regions(struct gfa_guest *g, const struct gfa_guest_config *cfg);
void guest_free_regions(struct gfa_guest *g);
/* The window over every range no region touches is PROT_NONE (a lazy guest's: its
 * placeholder would serve a touch there): 0 or -errno of the mmap. */
int guest_map_holes(struct gfa_guest *g);
/* [*gpa, *gpa + len) (absolute, len > 0) lies inside one region: 0 with *gpa made
 * relative to base, or -ERANGE (vmm/guest.c).  Any thread: the regions never change. */
int guest_gpa_check(const struct gfa_guest *g, uint64_t *gpa, uint64_t len);
/* A public range list's shape (vmm/gpa_ranges.h) against the guest's regions; the
 * ranges stay absolute. */
int guest_ranges_check(const struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);

/* Take g->lock for a balloon, report or collapse call from any thread: 0, or -EAGAIN on
 * the pause fallback while a move holding it pauses the vCPUs (the caller may be a vCPU
 * it waits for). */
int guest_lock_any_thread(struct gfa_guest *g);

/* All with g->lock held. */
/* Any 2 MiB range [gpa, gpa + len) touches is pinned (vmm/guest_pin.c). */
bool guest_span_pinned(const struct gfa_guest *g, uint64_t gpa, uint64_t len);
/* Give gfn's range its per-4 KiB detail (0, or -ENOMEM and nothing changed). */
int guest_range_split(struct gfa_guest *g, uint64_t gfn);
int guest_map(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order);
/* Record a block at gfn; below order 9 its range has its detail (guest_range_split). */
void guest_record(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order);
/* Allocate, zero where dirty, index and (map) map one block at gfn. */
int guest_take(struct gfa_guest *g, struct gfa_pcp *pcp, uint64_t gfn, unsigned int order,
	       unsigned int flags, bool map);
/* Free the block at gfn (marked dirty, gfns cleared); waits out a move, lock kept. */
void guest_release_block(struct gfa_guest *g, uint64_t gfn);
/* The same for an unmapped block, its host memory punched out first where that is the
 * backing's to do (backing_punch_block()): true when it was. */
bool guest_release_to_host(struct gfa_guest *g, uint64_t gfn);
/* Set the orders of the block at head (order `order`) to 0: its range must be split. */
void guest_record_split(struct gfa_guest *g, uint64_t head, unsigned int order);

/* Lazy guests (vmm/guest_lazy.c). */
/* Set g up lazily (the window reserved): 0, or -errno with nothing left to undo but
 * guest_lazy_fini(). */
int guest_lazy_init(struct gfa_guest *g, const struct gfa_guest_config *cfg);
/* Stop serving first touches (the first step of a destroy: no fault is served after). */
void guest_lazy_stop(struct gfa_guest *g);
void guest_lazy_fini(struct gfa_guest *g);
/* [lo, hi) of the window is the placeholder again: its next touch is a first touch.
 * 0 or -errno (the mmap: vm.max_map_count), the window then unchanged. */
int guest_placeholder(struct gfa_guest *g, uint64_t lo, uint64_t hi);
/* Write the fill source's contents of the block at gfn into its new frames at pfn:
 * 0 or -EIO (counted by the caller). */
int guest_lazy_fill(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order);
/* Give [lo, hi)'s blocks back as a lazy guest's report does: unmapped, freed, lazy. */
int64_t guest_discard(struct gfa_guest *g, uint64_t gpa, uint64_t len);
#endif
