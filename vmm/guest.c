// SPDX-License-Identifier: MIT
/*
 * A guest's RAM made of pool frames: a reserved host window in which each block is
 * mapped MAP_SHARED | MAP_FIXED from its zone's memfd.  Order-9 blocks land on 2 MiB
 * aligned window addresses at 2 MiB aligned file offsets, so the host can map them with
 * a PMD and KVM with a 2 MiB EPT/NPT entry.
 *
 * The guest is the owner of its frames: compaction and collapse move them
 * (vmm/guest_move.c).  g->lock (recursive, since collapse calls back into migrate)
 * serialises frees with moves.  Every mapping into the window is registered with the
 * guest's userfaultfd, so a move can write-protect what it moves.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/backing_internal.h"
#include "vmm/guest_internal.h"
#include "vmm/zero_worker.h"
#include "allocator/layers.h"

static _Atomic uint64_t next_guest_id = 1ULL << 40;

/*
 * Map nr frames from pfn (contiguous in the zone's memfd) into the window at gfn, with
 * MADV_HUGEPAGE when they are order-9 blocks.
 */
static int guest_map_frames(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, uint64_t nr, bool huge)
{
	int fd;
	uint64_t off;
	int err = gfa_pfn_to_fd(g->pool, pfn, &fd, &off);

	if (err)
		return err;
	if (mmap(g->win + (gfn << GFA_FRAME_SHIFT), nr << GFA_FRAME_SHIFT, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_FIXED, fd, (off_t)off) == MAP_FAILED)
		return -errno;
	/*
	 * A new mapping has no VM_HUGEPAGE: with shmem_enabled=advise a 2 MiB block whose
	 * memfd range is not populated yet (or was released to the host) would fault in
	 * 4 KiB pages.  Advise it; failure only costs the PMD (THP off on this host).
	 */
	if (huge && g->thp_advise)
		(void)madvise(g->win + (gfn << GFA_FRAME_SHIFT), nr << GFA_FRAME_SHIFT,
			      MADV_HUGEPAGE);
	/* a new mapping is not registered, whatever it replaced; a failure here only
	 * costs a registration at the next move of these frames (uffd_protect registers
	 * what is not).  A lazy guest leaves it to that move: its first touch is on the
	 * vCPU's path, and most blocks never move */
	if (g->wp && !g->lazy)
		(void)uffd_register(&g->uffd, guest_addr(g, gfn), nr << GFA_FRAME_SHIFT);
	return 0;
}

/* Whether MADV_HUGEPAGE can give a memfd mapping PMDs (shmem_enabled is not never or
 * deny): else the call is only cost, on a lazy guest's first touch too. */
static bool guest_thp_possible(void)
{
	struct gfa_thp_report r;

	return gfa_host_thp_report(&r) || r.shmem_thp_possible;
}

/* Map `order` frames at pfn into the window at gfn. */
int guest_map(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order)
{
	return guest_map_frames(g, gfn, pfn, 1UL << order, order >= GFA_PAGEBLOCK_ORDER);
}

int guest_range_split(struct gfa_guest *g, uint64_t gfn)
{
	struct guest_range *r = gfn_range(g, gfn);
	struct guest_range_detail *d;

	if (r->d)
		return 0;
	d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (unsigned int i = 0; i < RANGE_FRAMES; i++) {
		d->pfn[i] = r->pfn == NO_PFN ? NO_PFN : r->pfn + i;
		d->order[i] = r->pfn == NO_PFN ? 0 : NOT_HEAD;
	}
	if (r->pfn != NO_PFN)
		d->order[0] = GFA_PAGEBLOCK_ORDER;
	r->d = d;
	return 0;
}

void guest_record(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order)
{
	struct guest_range *r = gfn_range(g, gfn);
	unsigned int off = (unsigned int)(gfn % RANGE_FRAMES);

	/* a block sits aligned in guest space, as in pfn space, and inside the guest */
	GFA_BUG_ON(order > GFA_MAX_ORDER || ((gfn | pfn) & ((1UL << order) - 1)));
	GFA_BUG_ON(gfn + (1UL << order) > g->nr_frames);
	if (order >= GFA_PAGEBLOCK_ORDER) {
		free(r->d); /* one block again: the detail says nothing more */
		r->d = NULL;
		r->pfn = pfn;
		return;
	}
	for (unsigned int i = 0; i < (1U << order); i++) {
		r->d->pfn[off + i] = pfn + i;
		r->d->order[off + i] = NOT_HEAD;
	}
	r->d->order[off] = (uint8_t)order;
}

void guest_record_split(struct gfa_guest *g, uint64_t head, unsigned int order)
{
	struct guest_range *r = gfn_range(g, head);

	/* split by guest_range_split: the head of a backed block of that order */
	GFA_BUG_ON(!r->d || r->d->order[head % RANGE_FRAMES] != order ||
		   r->d->pfn[head % RANGE_FRAMES] == NO_PFN);
	for (uint64_t k = head; k < head + (1UL << order); k++)
		r->d->order[k % RANGE_FRAMES] = 0;
}

/* Every gfn of the block at gfn a hole of its own (a NOT_HEAD left behind would hide it
 * from collapse). */
static void guest_clear(struct gfa_guest *g, uint64_t gfn, unsigned int order)
{
	struct guest_range *r = gfn_range(g, gfn);
	unsigned int off = (unsigned int)(gfn % RANGE_FRAMES);

	GFA_BUG_ON(order < GFA_PAGEBLOCK_ORDER && !r->d); /* a small block has the detail */
	if (order >= GFA_PAGEBLOCK_ORDER) {
		free(r->d);
		r->d = NULL;
		r->pfn = NO_PFN;
		return;
	}
	for (unsigned int i = 0; i < (1U << order); i++) {
		r->d->pfn[off + i] = NO_PFN;
		r->d->order[off + i] = 0;
	}
}

/* Allocate from the cache or the zone (an allocation that finds no frame waits for
 * the frames a zeroer holds: they are free, only in work). */
static int64_t guest_alloc(struct gfa_guest *g, struct gfa_pcp *pcp, unsigned int order,
			   unsigned int flags)
{
	/* a pinned guest's frames can never move: unmovable pageblocks keep them out of
	 * the movable ones compaction empties */
	enum gfa_migratetype mt = g->pinned ? GFA_MT_UNMOVABLE : GFA_MT_MOVABLE;

	return pcp ? gfa_pcp_alloc(pcp, order, mt, g->id, flags) :
		     gfa_alloc(g->pool, g->zone, order, mt, g->id, flags);
}

/* Take one block for the guest: zeroed where dirty, indexed, (map) mapped. */
int guest_take(struct gfa_guest *g, struct gfa_pcp *pcp, uint64_t gfn, unsigned int order,
	       unsigned int flags, bool map)
{
	int64_t pfn, zeroed;
	int err = order < GFA_PAGEBLOCK_ORDER ? guest_range_split(g, gfn) : 0;

	if (err)
		return err;
	pfn = guest_alloc(g, pcp, order, flags);
	if (pfn < 0)
		return (int)pfn;
	zeroed = gfa_backing_prepare(g->b, (uint64_t)pfn, order);
	if (zeroed > 0)
		g->st.zeroed_frames += (uint64_t)zeroed;
	/* a lazy guest's first touch of a restored page: the snapshot's contents */
	err = g->unfilled ? guest_lazy_fill(g, gfn, (uint64_t)pfn, order) : 0;
	if (!err)
		gfa_block_set_index(g->pool, (uint64_t)pfn, g->id, (uint32_t)gfn);
	if (!err && map)
		err = guest_map(g, gfn, (uint64_t)pfn, order);
	if (err) {
		/* compaction may hold it isolated (its move is refused: we hold g->lock) */
		while (gfa_free(g->pool, (uint64_t)pfn, order, g->id) == GFA_EBUSY)
			sched_yield();
		return err;
	}
	guest_record(g, gfn, (uint64_t)pfn, order);
	g->st.blocks++;
	return 0;
}

static long max_map_count(void)
{
	long n = -1;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "r");

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * Give the ranges backed by one block each their blocks in pfn order (g->lock held,
 * nothing mapped yet, every frame zero): the lists hand blocks out in the order frees
 * and the zeroer left them (its returns put the last one first), and the window maps one
 * run per stretch contiguous in the memfd.  After a 2 GiB guest's stop and zeroing the
 * next 2 GiB guest made 512 mappings in 2.8-4.4 ms, where on a fresh pool it made one in
 * 0.9 ms.  Contents filled from a snapshot are the gfns' own: such a guest keeps its
 * order.  No memory to sort in: the order stays as it is.
 */
static void guest_sort_blocks(struct gfa_guest *g)
{
	uint64_t *pfn = g->unfilled ? NULL : malloc(g->nr_ranges * sizeof(*pfn));
	uint64_t n = 0, k = 0;

	for (uint64_t r = 0; pfn && r < g->nr_ranges; r++)
		if (guest_range_huge(g, r * RANGE_FRAMES))
			pfn[n++] = g->range[r].pfn;
	if (n > 1)
		qsort(pfn, n, sizeof(*pfn), u64_cmp);
	for (uint64_t r = 0; n > 1 && r < g->nr_ranges; r++) {
		if (!guest_range_huge(g, r * RANGE_FRAMES) || g->range[r].pfn == pfn[k++])
			continue;
		g->range[r].pfn = pfn[k - 1];
		gfa_block_set_index(g->pool, pfn[k - 1], g->id, (uint32_t)(r * RANGE_FRAMES));
	}
	free(pfn);
}

/*
 * Map the whole window, one mmap (and one madvise) per run of blocks contiguous both in
 * the window and in the memfd: a guest's blocks are all of its zone's memfd, where
 * consecutive pfns are consecutive offsets.  Huge and small blocks go in runs of their
 * own (only huge ones are advised).  At one mapping per 2 MiB a 128 GiB guest would
 * need 65 536 mappings, above the default vm.max_map_count.
 */
static int guest_map_runs(struct gfa_guest *g)
{
	uint64_t run_gfn = 0, run_pfn = 0, run_n = 0;
	bool run_huge = false;

	for (uint64_t gfn = 0; gfn <= g->nr_frames;) {
		bool last = gfn == g->nr_frames;
		unsigned int order = last ? 0 : guest_order(g, gfn);
		uint64_t pfn = last ? NO_PFN : guest_pfn(g, gfn);
		bool huge = order == GFA_PAGEBLOCK_ORDER;

		if (run_n && (pfn != run_pfn + run_n || huge != run_huge)) {
			int err = guest_map_frames(g, run_gfn, run_pfn, run_n, run_huge);

			if (err) {
				fprintf(stderr,
					"gfa: guest of %lu MiB: mapping its window failed "
					"after %lu mappings (%s): it needs one mapping per run of "
					"contiguous blocks and a process may have at most "
					"vm.max_map_count (%ld) mappings\n",
					(unsigned long)(g->size >> 20),
					(unsigned long)g->nr_mappings, strerror(-err),
					max_map_count());
				return err;
			}
			g->nr_mappings++;
			run_n = 0;
		}
		if (last)
			break;
		if (pfn == NO_PFN) { /* a hole between regions */
			gfn++;
			continue;
		}
		if (!run_n) {
			run_gfn = gfn;
			run_pfn = pfn;
			run_huge = huge;
		}
		run_n += guest_block_frames(g, gfn);
		gfn += guest_block_frames(g, gfn);
	}
	return 0;
}

/* Back one 2 MiB range: an order-9 block, else the largest smaller blocks. */
static int guest_fill_range(struct gfa_guest *g, struct gfa_pcp *pcp, uint64_t gfn, bool small_only)
{
	uint64_t end = gfn + RANGE_FRAMES;

	if (!small_only && !guest_take(g, pcp, gfn, GFA_PAGEBLOCK_ORDER, 0, false)) {
		g->st.huge_ranges++;
		return 0;
	}
	while (gfn < end) {
		int order = GFA_PAGEBLOCK_ORDER - 1, err = -ENOMEM;

		while (order >= 0 && (gfn & ((1UL << order) - 1)))
			order--;
		for (; order >= 0; order--) {
			err = guest_take(g, pcp, gfn, (unsigned int)order, GFA_ALLOC_NOCOMPACT,
					 false);
			if (!err)
				break;
		}
		if (err)
			return err;
		gfn += 1UL << order;
	}
	g->st.small_ranges++;
	return 0;
}

/* How guest_free_block() gives a block back (vmm/balloon.c's inflate punches). */
enum guest_free { GUEST_FREE_HOT, GUEST_FREE_COLD, GUEST_FREE_PUNCHED };

/*
 * Give a block back: at the head of the free lists, at the tail (cold), or at the tail
 * with its host memory punched out already (punched: clean, released).  Retries while
 * compaction is moving it, keeping g->lock: the mover's guest_migrate() only tries the
 * lock, refuses, and puts the block back.  (Dropping the lock let a move of another
 * block of a ballooned range map it into the window again, just unmapped.)
 */
static void guest_free_block(struct gfa_guest *g, uint64_t gfn, enum guest_free how)
{
	unsigned int order = guest_order(g, gfn);
	uint64_t pfn = guest_pfn(g, gfn);
	int err;

	GFA_BUG_ON(pfn == NO_PFN); /* the head of a block the guest holds */
	guest_clear(g, gfn, order);
	/* dirty before the free: the next owner must zero what this guest wrote */
	if (how != GUEST_FREE_PUNCHED)
		gfa_backing_mark_dirty(g->b, pfn, order);
	while ((err = how == GUEST_FREE_HOT  ? gfa_free(g->pool, pfn, order, g->id) :
		      how == GUEST_FREE_COLD ? pool_free_cold(g->pool, pfn, order, g->id) :
					       pool_free_released(g->pool, pfn, order, g->id)) ==
	       GFA_EBUSY)
		sched_yield();
	GFA_BUG_ON(err); /* the guest's own block: any other refusal is gfa's bug */
}

int guest_lock_any_thread(struct gfa_guest *g)
{
	/* write-protected moves (or no ops) stop no thread: waiting for one is bounded */
	if (g->wp || !g->ops.pause) {
		pthread_mutex_lock(&g->lock);
		return 0;
	}
	/* the pause fallback: a move holding the lock may be waiting for this very thread
	 * (a vCPU's IO handler) to pause */
	while (pthread_mutex_trylock(&g->lock)) {
		if (__atomic_load_n(&g->pausing, __ATOMIC_ACQUIRE))
			return -EAGAIN;
		usleep(100);
	}
	return 0;
}

void guest_release_block(struct gfa_guest *g, uint64_t gfn)
{
	guest_free_block(g, gfn, GUEST_FREE_HOT);
}

bool guest_release_to_host(struct gfa_guest *g, uint64_t gfn)
{
	/* the block is still ours and no window maps it: its punch reaches nobody else */
	bool punched = !backing_punch_block(g->b, guest_pfn(g, gfn), guest_order(g, gfn));

	guest_free_block(g, gfn, punched ? GUEST_FREE_PUNCHED : GUEST_FREE_HOT);
	return punched;
}

static int guest_reserve(struct gfa_guest *g, void *window)
{
	size_t len = g->size + RANGE_BYTES;
	char *r;

	if (window) {
		g->win = window; /* the caller's: it stays reserved after us */
		return 0;
	}
	r = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return -errno;
	g->reserve = r;
	g->reserve_len = len;
	g->win = (char *)(((uintptr_t)r + RANGE_BYTES - 1) & ~(RANGE_BYTES - 1));
	return 0;
}

/* A lazy config: not pinned (a pinned guest's frames are all there for its device), one
 * fill source at most, known flags.  Nonzero when it is wrong. */
static int guest_check_lazy(const struct gfa_guest_config *cfg)
{
	const struct gfa_guest_lazy *lz = cfg->lazy;

	if (!(cfg->flags & GFA_GUEST_LAZY))
		return lz != NULL;
	if (cfg->flags & GFA_GUEST_PINNED)
		return 1;
	if (!lz)
		return 0;
	return !GFA_RESERVED_ZERO(lz) || (lz->flags & ~GFA_LAZY_FILL_FD) ||
	       ((lz->flags & GFA_LAZY_FILL_FD) && (lz->fill || lz->fill_fd < 0));
}

static int guest_check_config(struct gfa_pool *pool, struct gfa_backing *b,
			      const struct gfa_guest_config *cfg)
{
	uint64_t start, nr, off, span, backed;
	int fd, err;

	if (!pool || !b || !cfg)
		return EFAULT;
	err = guest_check_regions(cfg, &span, &backed);
	if (err)
		return err;
	if ((span >> GFA_FRAME_SHIFT) > UINT32_MAX)
		return EINVAL;
	if (cfg->vcpu_ops && (!cfg->vcpu_ops->pause || !cfg->vcpu_ops->resume))
		return EINVAL; /* a pause without its resume would stop them for good */
	if (!GFA_RESERVED_ZERO(cfg) ||
	    (cfg->flags & ~(GFA_GUEST_PINNED | GFA_GUEST_LAZY | GFA_GUEST_WP_ONLY)))
		return EINVAL;
	if ((cfg->flags & GFA_GUEST_WP_ONLY) && cfg->vcpu_ops)
		return EINVAL; /* ops that would never be called */
	if (guest_check_lazy(cfg))
		return EINVAL;
	if ((uintptr_t)cfg->window % RANGE_BYTES)
		return EINVAL; /* order-9 blocks need 2 MiB aligned addresses */
	if (cfg->zone >= gfa_pool_nr_zones(pool))
		return ERANGE;
	/* the frames come from cfg->zone of pool: another zone's or pool's cache would
	 * hand out its own */
	if (cfg->pcp &&
	    (gfa_pcp_pool(cfg->pcp) != pool || gfa_pcp_zone(cfg->pcp) != (int)cfg->zone))
		return EINVAL;
	if (gfa_zone_span(pool, cfg->zone, &start, &nr) || gfa_pfn_to_fd(pool, start, &fd, &off))
		return ENODEV; /* the pool has no backing */
	/* b must be this pool's backing (its dirty marks and zeroing go by pfn); one
	 * without the zone at all is another pool's too */
	if (fd != gfa_backing_zone_fd(b, cfg->zone))
		return EINVAL;
	/* more than the whole zone can never be backed: fail before sizing tables for it
	 * (16 TiB of guest would mean 32 GiB of them).  A lazy guest is backed as it is
	 * touched: overcommit, up to LAZY_OVERCOMMIT_MAX times the zone */
	if ((backed >> GFA_FRAME_SHIFT) >
	    nr * (cfg->flags & GFA_GUEST_LAZY ? LAZY_OVERCOMMIT_MAX : 1))
		return ENOMEM;
	return 0;
}

/* Moves write-protect, or say once why they pause instead. */
static void guest_open_uffd(struct gfa_guest *g)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	int err = uffd_open(&g->uffd);

	g->wp = !err;
	g->st.wp_errno = -err;
	if (err && !atomic_flag_test_and_set(&said))
		fprintf(stderr,
			"gfa: moves pause the vCPUs instead of write-protecting the "
			"block they move (%s: %s); the vCPU ops' pause must then stop every "
			"thread that writes guest RAM\n",
			uffd_why(err), strerror(-err));
}

/* Frames the 2 MiB ranges some region touches take. */
static uint64_t guest_backed_frames(const struct gfa_guest *g)
{
	uint64_t n = 0;

	for (uint64_t gfn = 0; gfn < g->nr_frames; gfn += RANGE_FRAMES)
		if (!guest_range_absent(g, gfn))
			n += RANGE_FRAMES;
	return n;
}

struct gfa_guest *gfa_guest_create(struct gfa_pool *pool, struct gfa_backing *b,
				   const struct gfa_guest_config *cfg)
{
	pthread_mutexattr_t attr;
	struct gfa_guest *g;
	bool leased;
	int err = guest_check_config(pool, b, cfg);

	if (err) {
		/* counted as the allocator counts its own (EFAULT, EINVAL, ERANGE) */
		pool_count_error(pool, -err);
		errno = err;
		return NULL;
	}
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->pool = pool;
	g->b = b;
	g->zone = cfg->zone;
	g->id = cfg->id ? cfg->id : atomic_fetch_add(&next_guest_id, 1);
	g->collapse_lo = NO_PFN;
	g->small_only = cfg->small_only;
	g->pinned = cfg->flags & GFA_GUEST_PINNED;
	g->lazy = cfg->flags & GFA_GUEST_LAZY;
	g->wp_only = cfg->flags & GFA_GUEST_WP_ONLY;
	g->thp_advise = guest_thp_possible();
	g->refuse_fd = g->placeholder_fd = -1;
	g->lz.fill_fd = -1;
	g->moved_fn = cfg->moved_fn;
	g->moved_ctx = cfg->moved_ctx;
	g->uffd.fd = g->uffd.stop_fd = -1;
	if (cfg->vcpu_ops)
		g->ops = *cfg->vcpu_ops;
	g->ops_ctx = cfg->vcpu_ctx;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&g->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	pthread_mutex_init(&g->pause_lock, NULL);
	err = guest_setup_regions(g, cfg);
	g->st.mem_bytes = g->ram_bytes;
	g->range = err ? NULL : malloc(g->nr_ranges * sizeof(*g->range));
	g->pins = err ? NULL : calloc(g->nr_ranges, sizeof(*g->pins));
	if (!g->range || !g->pins)
		err = -ENOMEM;
	if (!err && !g->pinned)
		guest_open_uffd(g);
	if (!err) {
		for (uint64_t r = 0; r < g->nr_ranges; r++)
			g->range[r] = (struct guest_range){ NO_PFN, NULL };
		err = guest_reserve(g, cfg->window);
	}
	if (!err) {
		err = gfa_owner_register(pool, g->id, &guest_owner_ops, g);
		g->registered = !err; /* -EEXIST: the id is another guest's, leave it */
	}
	/* a host pool client's pool holds only its leases: ask for the frames first */
	leased = !err && !g->lazy;
	if (leased)
		err = backing_lease_want(b, g->zone, guest_backed_frames(g));
	pthread_mutex_lock(&g->lock);
	zero_worker_defer(b); /* the start has the CPUs, not the zeroer */
	if (!err && g->lazy)
		err = guest_lazy_init(g, cfg); /* no frame now: each at its first touch */
	/* every block first, then the window in runs: a move meanwhile maps its own */
	for (uint64_t gfn = 0; !err && !g->lazy && gfn < g->nr_frames; gfn += RANGE_FRAMES)
		if (!guest_range_absent(g, gfn))
			err = guest_fill_range(g, cfg->pcp, gfn, cfg->small_only);
	if (!err && !g->lazy) {
		guest_sort_blocks(g);
		err = guest_map_runs(g);
	}
	g->st.window_mappings = g->nr_mappings;
	zero_worker_defer(b); /* (and its vCPUs' first touch) */
	pthread_mutex_unlock(&g->lock);
	if (leased)
		backing_lease_done(b, g->zone,
				   guest_backed_frames(g)); /* the frames are the guest's now */
	if (err) {
		gfa_guest_destroy(g);
		errno = err == GFA_ENOMEM ? ENOMEM : -err;
		return NULL;
	}
	return g;
}

/*
 * The window maps no frame any more: anonymous PROT_NONE over it, reserved still.  0,
 * or -errno with nothing mapped there at all (no VMA left for it: vm.max_map_count).
 */
static int guest_unmap_window(struct gfa_guest *g)
{
	char *end;

	if (mmap(g->win, g->size, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) != MAP_FAILED)
		return 0;
	if (!g->reserve) {
		/* the caller's window: no frame may stay mapped; the caller keeps a hole */
		munmap(g->win, g->size);
		return -ENOMEM;
	}
	/*
	 * Give the whole reservation back at once.  Unmapping only the window left a hole
	 * another thread could map into before the reservation's munmap took that mapping
	 * away too.  No move maps into it: we hold the lock, and after the release the
	 * gfns say "none".
	 */
	if (!munmap(g->reserve, g->reserve_len))
		return -ENOMEM;
	/* its edges merged with a neighbour's and that split found no VMA either: the
	 * window, then each edge - never the whole range again, which would unmap what
	 * another thread mapped in the hole (an edge that cannot go leaks, nothing is
	 * clobbered) */
	end = (char *)g->reserve + g->reserve_len;
	munmap(g->win, g->size);
	if (g->win > (char *)g->reserve)
		munmap(g->reserve, (size_t)(g->win - (char *)g->reserve));
	if (g->win + g->size < end)
		munmap(g->win + g->size, (size_t)(end - (g->win + g->size)));
	return -ENOMEM;
}

/*
 * Give every block back at once, free and dirty, at the tail of the free lists: anyone
 * may allocate them right away (and zeroes what it takes: gfa_backing_prepare), while
 * allocations take clean blocks first.  The backing's zeroer then zeroes them in its
 * thread; the stopping caller never waits for the zeroing.  The window maps none of
 * them any more.
 */
static void guest_release_all(struct gfa_guest *g)
{
	struct zero_worker *zw = g->range ? zero_worker_get(g->b) : NULL;

	for (uint64_t r = 0; g->range && r < g->nr_ranges; r++) {
		uint64_t gfn = r * RANGE_FRAMES;

		if (guest_range_huge(g, gfn)) {
			guest_free_block(g, gfn, GUEST_FREE_COLD);
			continue;
		}
		for (uint64_t i = gfn; g->range[r].d && i < gfn + RANGE_FRAMES; i++)
			if (guest_order(g, i) != NOT_HEAD && guest_pfn(g, i) != NO_PFN)
				guest_free_block(g, i, GUEST_FREE_COLD);
		free(g->range[r].d);
		g->range[r].d = NULL;
	}
	if (zw)
		zero_worker_kick(zw);
}

void gfa_guest_destroy(struct gfa_guest *g)
{
	bool unmapped = true;

	if (!g)
		return;
	if (g->lazy)
		guest_lazy_stop(g); /* no first touch is served from now on */
	pthread_mutex_lock(&g->lock);
	/* the window maps no frame before the frames are freed (as the balloon does) */
	if (g->win && guest_unmap_window(g))
		unmapped = false; /* (the reservation is gone) */
	/* free at once, dirty: the zeroer zeroes them in the background */
	guest_release_all(g);
	pthread_mutex_unlock(&g->lock);
	backing_lease_trim(g->b); /* a host pool client gives the frames back */
	/* waits for compaction calls into guest_migrate(), which use g */
	if (g->registered)
		gfa_owner_register(g->pool, g->id, NULL, NULL);
	if (g->reserve && unmapped)
		munmap(g->reserve, g->reserve_len);
	uffd_close(&g->uffd); /* no move can begin now */
	guest_lazy_fini(g);
	pthread_mutex_destroy(&g->pause_lock);
	pthread_mutex_destroy(&g->lock);
	free(g->pins);
	free(g->range);
	guest_free_regions(g);
	free(g);
}

void gfa_guest_forget_vcpus(struct gfa_guest *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock); /* a move holds it while the vCPUs are paused */
	pthread_mutex_lock(&g->pause_lock);
	/* a compaction batch holds them paused between moves: resume them now (its end
	 * then finds no ops and no pause) */
	if (g->pause_refs && g->ops.resume)
		g->ops.resume(g->ops_ctx);
	g->pause_refs = 0;
	__atomic_store_n(&g->pausing, false, __ATOMIC_RELEASE);
	g->batch_ref = false;
	memset(&g->ops, 0, sizeof(g->ops));
	g->ops_ctx = NULL;
	pthread_mutex_unlock(&g->pause_lock);
	pthread_mutex_unlock(&g->lock);
}

void *gfa_guest_hva(const struct gfa_guest *g)
{
	return g ? g->win : NULL;
}

uint64_t gfa_guest_size(const struct gfa_guest *g)
{
	return g ? g->ram_bytes : 0;
}

uint64_t gfa_guest_id(const struct gfa_guest *g)
{
	return g ? g->id : 0;
}

int gfa_guest_gpa_to_pfn(struct gfa_guest *g, uint64_t gpa, uint64_t *pfn)
{
	int err = 0;

	if (!g)
		return GFA_EFAULT;
	if (!pfn)
		return pool_count_error(g->pool, GFA_EFAULT);
	if (guest_gpa_check(g, &gpa, 1))
		return pool_count_error(g->pool, GFA_ERANGE);
	pthread_mutex_lock(&g->lock);
	*pfn = guest_pfn(g, gpa >> GFA_FRAME_SHIFT);
	if (*pfn == NO_PFN)
		err = -ENOENT;
	pthread_mutex_unlock(&g->lock);
	return err;
}

/* The counters a scan of the ranges gives (g->lock held). */
static void guest_count_blocks(struct gfa_guest *g)
{
	uint64_t frames = 0, present = 0;

	g->st.huge_ranges = g->st.small_ranges = g->st.blocks = 0;
	for (uint64_t r = 0; r < g->nr_frames; r += RANGE_FRAMES) {
		if (guest_range_absent(g, r))
			continue;
		present += RANGE_BYTES;
		if (guest_range_huge(g, r)) {
			g->st.huge_ranges++;
			g->st.blocks++;
			frames += RANGE_FRAMES;
			continue;
		}
		/* a lazy range nothing touched yet is neither huge nor small (a full guest's
		 * range ballooned out whole counts as small, as it always has) */
		if (!gfn_range(g, r)->d && g->lazy)
			continue;
		g->st.small_ranges++;
		for (uint64_t i = r; gfn_range(g, r)->d && i < r + RANGE_FRAMES; i++) {
			bool head = guest_order(g, i) != NOT_HEAD && guest_pfn(g, i) != NO_PFN;

			g->st.blocks += head;
			frames += guest_pfn(g, i) != NO_PFN;
		}
	}
	g->st.populated_bytes = frames << GFA_FRAME_SHIFT;
	g->st.lazy_bytes = g->lazy ? present - g->st.populated_bytes : 0;
}

int gfa_guest_stat(struct gfa_guest *g, struct gfa_guest_stat *st)
{
	if (!g)
		return GFA_EFAULT;
	if (!st)
		return pool_count_error(g->pool, GFA_EFAULT);
	pthread_mutex_lock(&g->lock);
	guest_count_blocks(g);
	g->st.wp_faults = __atomic_load_n(&g->uffd.faults, __ATOMIC_RELAXED);
	pthread_mutex_lock(&g->pause_lock); /* a batch's end counts under it */
	*st = g->st;
	pthread_mutex_unlock(&g->pause_lock);
	pthread_mutex_unlock(&g->lock);
	return 0;
}
