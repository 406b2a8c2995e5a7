// SPDX-License-Identifier: MIT
/*
 * Host backing of a pool: one memfd per zone (so releases on different zones run in
 * parallel: shmem serialises fallocate per file), mapped once at a 2 MiB aligned
 * address with MADV_HUGEPAGE, plus the dirty-frame bitmap that keeps one guest's data
 * from reaching another.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "backing_internal.h"
#include "allocator/layers.h"

#ifndef MFD_HUGE_2MB /* linux/memfd.h's, which clashes with sys/mman.h */
#define MFD_HUGE_2MB (21U << 26)
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define HUGE_2M (2UL << 20)

struct gfa_backing {
	struct gfa_pool *pool;
	unsigned int nr_zones;
	int fd[GFA_MAX_ZONES];
	void *base[GFA_MAX_ZONES];
	size_t size[GFA_MAX_ZONES];
	uint64_t zstart[GFA_MAX_ZONES]; /* first pfn of each zone (zones may leave gaps) */
	void *reserve[GFA_MAX_ZONES];   /* what to munmap (aligned mapping inside) */
	size_t reserve_len[GFA_MAX_ZONES];
	uint64_t nr_pfns;
	_Atomic uint64_t *dirty; /* one bit per pool pfn */
	_Atomic uint64_t nr_dirty;
	struct gfa_host_return *_Atomic hr;
	backing_kick_fn hr_kick;     /* (hr_lock) what kicks hr */
	pthread_mutex_t hr_lock;     /* a kick through the backing against detach */
	bool moved_fn_set;           /* our backing_moved() is the pool's moved hook */
	bool no_zero_on_stop;        /* cfg->no_zero_on_stop: no worker */
	bool hugetlb;                /* cfg->hugetlb: 2 MiB pages */
	bool no_balloon_punch;       /* cfg->no_balloon_punch */
	pthread_mutex_t worker_lock; /* starting the worker */
	void *_Atomic worker;        /* the background zeroer, once a guest stopped */
	backing_worker_stop_fn worker_stop;
	_Atomic(backing_move_wait_fn) move_wait;   /* a reporter's */
	bool released_fn_set;                      /* and backing_released() its released hook */
	const struct backing_lease_ops *lease_ops; /* a host pool client's (or NULL) */
	void *lease_ctx;
};

static uint64_t dirty_update(struct gfa_backing *b, uint64_t pfn, uint64_t n, bool set);
static void mark_data_dirty(struct gfa_backing *b, uint64_t pfn, uint64_t nr);

/* mmap the memfd at a 2 MiB aligned address so every order-9 block can be a PMD. */
static void *map_aligned(int fd, size_t len, void **reserve, size_t *reserve_len)
{
	size_t rlen = len + HUGE_2M;
	char *r = mmap(NULL, rlen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char *a;

	if (r == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)r + HUGE_2M - 1) & ~(HUGE_2M - 1));
	if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		munmap(r, rlen);
		return NULL;
	}
	*reserve = r;
	*reserve_len = rlen;
	return a;
}

/* The pool's moved hook: a move's source (or failed target) holds the owner's data
 * where its memfd holds any.  Both are isolated, never released: no released frame to
 * leave alone. */
static void backing_moved(void *ctx, uint64_t pfn, unsigned int order)
{
	struct gfa_backing *b = ctx;
	backing_move_wait_fn wait = atomic_load(&b->move_wait);

	if (wait)
		wait(b, pfn, order); /* a report's punch lands before the free */
	mark_data_dirty(b, pfn, 1UL << order);
}

/* The pool's released hook (zone lock held): the host gives zeros back, so a released
 * frame is clean by definition. */
static void backing_released(void *ctx, uint64_t pfn, uint64_t nr)
{
	struct gfa_backing *b = ctx;

	atomic_fetch_sub(&b->nr_dirty, dirty_update(b, pfn, nr, false));
}

static int populate(void *base, size_t len)
{
	if (!madvise(base, len, MADV_POPULATE_WRITE))
		return 0;
	/* kernels before 5.14: touch every frame */
	for (size_t off = 0; off < len; off += GFA_FRAME_SIZE)
		((volatile char *)base)[off] = 0;
	return 0;
}

/* A memfd of the zone's size: a new one, or the one handed in (adopt, >= 0). */
static int backing_zone_fd(struct gfa_backing *b, unsigned int z,
			   const struct gfa_backing_config *cfg, int adopt)
{
	char name[32];
	struct stat st;

	if (adopt >= 0) {
		b->fd[z] = adopt; /* ours now, closed at destroy */
		if (fstat(adopt, &st))
			return -errno;
		return (uint64_t)st.st_size < b->size[z] ? -EINVAL : 0;
	}
	snprintf(name, sizeof(name), "gfa-zone%u", z);
	/* 2 MiB pages named: MFD_HUGETLB alone takes the host's default size, 1 GiB on a
	 * host booted with default_hugepagesz=1G */
	b->fd[z] =
		memfd_create(name, MFD_CLOEXEC | (cfg->hugetlb ? MFD_HUGETLB | MFD_HUGE_2MB : 0));
	if (b->fd[z] < 0)
		return -errno;
	if (ftruncate(b->fd[z], (off_t)b->size[z]))
		return -errno;
	return 0;
}

static int backing_zone(struct gfa_backing *b, unsigned int z, const struct gfa_backing_config *cfg,
			int adopt)
{
	uint64_t start, n;
	int err;

	gfa_zone_span(b->pool, z, &start, &n);
	b->zstart[z] = start;
	b->size[z] = n << GFA_FRAME_SHIFT;
	err = backing_zone_fd(b, z, cfg, adopt);
	if (err)
		return err;
	b->base[z] = map_aligned(b->fd[z], b->size[z], &b->reserve[z], &b->reserve_len[z]);
	if (!b->base[z])
		return -errno;
	if (!cfg->no_thp_advice && !cfg->hugetlb)
		madvise(b->base[z], b->size[z], MADV_HUGEPAGE);
	if (cfg->populate)
		populate(b->base[z], b->size[z]);
	return zone_set_backing(b->pool, z, b->base[z], b->fd[z]);
}

/* Reserved and pad words zero, a hugetlb page size gfa can map: 0 or -errno. */
static int backing_check_config(const struct gfa_backing_config *cfg)
{
	if (!GFA_RESERVED_ZERO(cfg) || cfg->pad0[0] || cfg->pad0[1] || cfg->pad0[2] || cfg->pad1)
		return -EINVAL;
	if (cfg->hugetlb_page_bytes && !cfg->hugetlb)
		return -EINVAL;
	if (cfg->hugetlb_page_bytes == 1U << 30)
		return -EOPNOTSUPP; /* 2 MiB blocks cannot be mapped from 1 GiB pages */
	if (cfg->hugetlb_page_bytes && cfg->hugetlb_page_bytes != HUGE_2M)
		return -EINVAL;
	return 0;
}

static struct gfa_backing *backing_create(struct gfa_pool *pool,
					  const struct gfa_backing_config *cfg, const int *adopt)
{
	static const struct gfa_backing_config defaults;
	struct gfa_backing *b;
	uint64_t start, n;
	int err = 0;

	if (!pool) {
		errno = EFAULT;
		return NULL;
	}
	if (!cfg)
		cfg = &defaults;
	err = backing_check_config(cfg);
	if (err) {
		errno = -err;
		return NULL;
	}
	if (gfa_pfn_to_addr(pool, 0) || gfa_zone_span(pool, 0, &start, &n)) {
		errno = EBUSY;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->pool = pool;
	b->no_zero_on_stop = cfg->no_zero_on_stop;
	b->hugetlb = cfg->hugetlb;
	b->no_balloon_punch = cfg->no_balloon_punch;
	pthread_mutex_init(&b->hr_lock, NULL);
	pthread_mutex_init(&b->worker_lock, NULL);
	b->nr_zones = gfa_pool_nr_zones(pool);
	for (unsigned int z = 0; z < b->nr_zones; z++)
		b->fd[z] = -1;
	gfa_zone_span(pool, b->nr_zones - 1, &start, &n);
	b->nr_pfns = start + n;
	b->dirty = (_Atomic uint64_t *)frame_bitmap_alloc(b->nr_pfns);
	if (!b->dirty)
		err = -ENOMEM;
	for (unsigned int z = 0; z < b->nr_zones && !err; z++)
		err = backing_zone(b, z, cfg, adopt ? adopt[z] : -1);
	/* the fds handed in are ours from here, whatever happens */
	for (unsigned int z = 0; adopt && z < b->nr_zones; z++)
		if (b->fd[z] < 0)
			b->fd[z] = adopt[z];
	if (!err)
		err = pool_set_moved_fn(pool, backing_moved, b);
	if (!err)
		b->moved_fn_set = true;
	if (!err)
		err = pool_set_released_fn(pool, backing_released, b);
	if (!err)
		b->released_fn_set = true;
	if (err) {
		gfa_backing_destroy(b);
		errno = -err;
		return NULL;
	}
	return b;
}

struct gfa_backing *gfa_backing_create(struct gfa_pool *pool, const struct gfa_backing_config *cfg)
{
	return backing_create(pool, cfg, NULL);
}

struct gfa_backing *backing_adopt(struct gfa_pool *pool, const struct gfa_backing_config *cfg,
				  const int *fds)
{
	return backing_create(pool, cfg, fds);
}

void backing_set_lease(struct gfa_backing *b, const struct backing_lease_ops *ops, void *ctx)
{
	b->lease_ctx = ctx;
	b->lease_ops = ops;
}

bool backing_leases(const struct gfa_backing *b)
{
	return b && b->lease_ops;
}

int backing_lease_want(struct gfa_backing *b, unsigned int zone, uint64_t frames)
{
	return b && b->lease_ops ? b->lease_ops->want(b->lease_ctx, zone, frames) : 0;
}

int backing_lease_block(struct gfa_backing *b, unsigned int zone)
{
	return b && b->lease_ops ? b->lease_ops->want_block(b->lease_ctx, zone) : 0;
}

void backing_lease_done(struct gfa_backing *b, unsigned int zone, uint64_t frames)
{
	if (b && b->lease_ops)
		b->lease_ops->done(b->lease_ctx, zone, frames);
}

void backing_lease_trim(struct gfa_backing *b)
{
	if (b && b->lease_ops)
		b->lease_ops->trim(b->lease_ctx);
}

void gfa_backing_destroy(struct gfa_backing *b)
{
	if (!b)
		return;
	if (atomic_load(&b->worker)) /* before the mappings it works on go */
		b->worker_stop(atomic_load(&b->worker));
	if (b->moved_fn_set)
		pool_set_moved_fn(b->pool, NULL, NULL);
	if (b->released_fn_set)
		pool_set_released_fn(b->pool, NULL, NULL);
	for (unsigned int z = 0; z < b->nr_zones; z++) {
		if (b->base[z])
			zone_set_backing(b->pool, z, NULL, -1);
		if (b->reserve[z])
			munmap(b->reserve[z], b->reserve_len[z]);
		if (b->fd[z] >= 0)
			close(b->fd[z]);
	}
	frame_bitmap_free((uint64_t *)b->dirty, b->nr_pfns);
	pthread_mutex_destroy(&b->hr_lock);
	pthread_mutex_destroy(&b->worker_lock);
	free(b);
}

int gfa_backing_zone_fd(const struct gfa_backing *b, unsigned int zone)
{
	if (!b)
		return GFA_EFAULT;
	return zone < b->nr_zones ? b->fd[zone] : GFA_ERANGE;
}

void *gfa_backing_zone_base(const struct gfa_backing *b, unsigned int zone)
{
	return b && zone < b->nr_zones ? b->base[zone] : NULL;
}

/* Set or clear bits [pfn, pfn + n); returns how many changed. */
static uint64_t dirty_update(struct gfa_backing *b, uint64_t pfn, uint64_t n, bool set)
{
	uint64_t changed = 0;

	while (n) {
		uint64_t bit = pfn & 63, take = 64 - bit < n ? 64 - bit : n;
		/* (take is at most 64: >= only tells the analyzer the shift is defined) */
		uint64_t mask = (take >= 64 ? ~0ULL : ((1ULL << take) - 1)) << bit;
		uint64_t old = set ? atomic_fetch_or(&b->dirty[pfn / 64], mask) :
				     atomic_fetch_and(&b->dirty[pfn / 64], ~mask);

		changed += (uint64_t)__builtin_popcountll(set ? ~old & mask : old & mask);
		pfn += take;
		n -= take;
	}
	return changed;
}

/* The zone frame pfn lies in, or b->nr_zones (the gaps between zones are no frames). */
static unsigned int backing_zone_of(const struct gfa_backing *b, uint64_t pfn)
{
	unsigned int z;

	for (z = 0; z < b->nr_zones; z++)
		if (pfn >= b->zstart[z] && pfn - b->zstart[z] < b->size[z] >> GFA_FRAME_SHIFT)
			break;
	return z;
}

/* Frames [pfn, pfn + nr) inside one zone; no pfn + nr, which wraps near 2^64. */
static bool backing_frames_ok(const struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	unsigned int z = backing_zone_of(b, pfn);

	return z < b->nr_zones && nr <= (b->size[z] >> GFA_FRAME_SHIFT) - (pfn - b->zstart[z]);
}

static bool backing_range_ok(const struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	return order <= GFA_MAX_ORDER && backing_frames_ok(b, pfn, 1UL << order);
}

/* Frames backing_runs() asks mincore() about at a time: a pageblock, a 512-byte vector. */
#define RUNS_CHUNK GFA_PAGEBLOCK_FRAMES

/*
 * The first frame at or after pfn (< end) that zone z's memfd holds data for, rounded
 * down to whole frames; end if none before end; -1 when the memfd cannot tell.
 */
static int64_t next_data(const struct gfa_backing *b, unsigned int z, uint64_t pfn, uint64_t end)
{
	off_t at = lseek(b->fd[z], (off_t)((pfn - b->zstart[z]) << GFA_FRAME_SHIFT), SEEK_DATA);
	uint64_t f;

	if (at < 0)
		return errno == ENXIO ? (int64_t)end : -1;
	f = b->zstart[z] + ((uint64_t)at >> GFA_FRAME_SHIFT);
	return (int64_t)(f < end ? f : end);
}

/*
 * [pfn, pfn + nr), none of it resident: each hole, or data swapped out.  One lseek per
 * swapped-out frame and one more: SEEK_DATA stops at the first data it finds.
 */
static void nonresident_runs(struct gfa_backing *b, unsigned int z, uint64_t pfn, uint64_t nr,
			     backing_run_fn fn, void *ctx)
{
	uint64_t end = pfn + nr;

	while (pfn < end) {
		int64_t d = next_data(b, z, pfn, end);

		if (d < 0)
			break;
		if ((uint64_t)d > pfn)
			fn(b, pfn, (uint64_t)d - pfn, false, ctx);
		pfn = (uint64_t)d;
		if (pfn < end)
			fn(b, pfn++, 1, true, ctx);
	}
	if (pfn < end)
		fn(b, pfn, end - pfn, true, ctx);
}

/* backing_runs() for at most RUNS_CHUNK frames. */
static void chunk_runs(struct gfa_backing *b, unsigned int z, uint64_t pfn, uint64_t nr,
		       backing_run_fn fn, void *ctx)
{
	unsigned char vec[RUNS_CHUNK];

	if (sysconf(_SC_PAGESIZE) != (long)GFA_FRAME_SIZE ||
	    mincore(gfa_pfn_to_addr(b->pool, pfn), nr << GFA_FRAME_SHIFT, vec)) {
		fn(b, pfn, nr, true, ctx);
		return;
	}
	for (uint64_t i = 0, j; i < nr; i = j) {
		for (j = i + 1; j < nr && (vec[j] & 1) == (vec[i] & 1); j++)
			;
		if (vec[i] & 1)
			fn(b, pfn + i, j - i, true, ctx);
		else
			nonresident_runs(b, z, pfn + i, j - i, fn, ctx);
	}
}

/*
 * Call fn on each run of [pfn, pfn + nr) of one zone by what its memfd holds: data, or
 * a hole, which reads zero.  Frames resident in the page cache (mincore()) are data;
 * the others are asked with SEEK_DATA, which also counts a swapped-out page as data,
 * where mincore() alone would call it a hole and hand its data to the next owner.
 * SEEK_HOLE is never asked: it walks every page after the offset until a hole, up to
 * the end of a populated memfd (milliseconds a call).  Where neither can tell (a
 * hugetlbfs memfd without SEEK_DATA, any error) the rest is data: the safe answer.  The
 * fd is shared, but only lseek's return value is used, never the file position.
 */
void backing_runs(struct gfa_backing *b, uint64_t pfn, uint64_t nr, backing_run_fn fn, void *ctx)
{
	unsigned int z = backing_zone_of(b, pfn);

	while (nr) {
		uint64_t n = nr < RUNS_CHUNK ? nr : RUNS_CHUNK;

		chunk_runs(b, z, pfn, n, fn, ctx);
		pfn += n;
		nr -= n;
	}
}

/* backing_runs: what the memfd holds is an owner's data; a hole reads zero */
static void mark_data_run(struct gfa_backing *b, uint64_t pfn, uint64_t nr, bool data, void *ctx)
{
	(void)ctx;
	if (data)
		atomic_fetch_add(&b->nr_dirty, dirty_update(b, pfn, nr, true));
}

/*
 * Mark the frames of [pfn, pfn + nr) dirty where the memfd holds data.  A hole left
 * unmarked is never zeroed: zeroing it through the pool mapping would fault it in and
 * grow host memory for frames that read zero anyway.
 */
static void mark_data_dirty(struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	backing_runs(b, pfn, nr, mark_data_run, NULL);
}

/* zone_free_runs: the marks of released frames go again */
static void unmark_released(void *ctx, uint64_t pfn, uint64_t nr, bool released)
{
	if (released)
		backing_released(ctx, pfn, nr);
}

/*
 * Mark a block's data dirty, but for its released free frames: their host memory is
 * gone (they read zero).  Marked first, then looked at under the zone lock: a release
 * finishing meanwhile clears the marks itself (backing_released), so no order leaves one
 * behind (one that punched before the lseek left a hole, which is not marked at all).
 */
static void mark_dirty_unreleased(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	mark_data_dirty(b, pfn, 1UL << order);
	zone_free_runs(b->pool, pfn, 1UL << order, unmark_released, b);
}

void gfa_backing_mark_dirty(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	if (!b || !backing_range_ok(b, pfn, order))
		return;
	mark_dirty_unreleased(b, pfn, order);
}

void gfa_backing_mark_clean(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	if (!b || !backing_range_ok(b, pfn, order))
		return;
	atomic_fetch_sub(&b->nr_dirty, dirty_update(b, pfn, 1UL << order, false));
}

/* Zero one run of dirty frames of one zone (contiguous in its mapping) and clear them. */
static uint64_t zero_run(struct gfa_backing *b, uint64_t pfn, uint64_t *nr)
{
	uint64_t n = *nr;

	if (!n)
		return 0;
	*nr = 0;
	gfa_zero(gfa_pfn_to_addr(b->pool, pfn), n << GFA_FRAME_SHIFT);
	return dirty_update(b, pfn, n, false);
}

/*
 * Zero the dirty frames of [pfn, pfn + nr), inside one zone: whole bitmap words at a
 * time, each run of consecutive dirty frames with one call (a fully dirty 2 MiB block
 * is one 2 MiB zeroing, not 512 of 4 KiB).  Returns the frames zeroed.
 */
static uint64_t zero_dirty_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	uint64_t end = pfn + nr, zeroed = 0, run = pfn, run_n = 0;

	while (pfn < end) {
		uint64_t bit = pfn & 63, n = 64 - bit < end - pfn ? 64 - bit : end - pfn;
		uint64_t w = atomic_load(&b->dirty[pfn / 64]) >> bit, ones;

		if (n < 64)
			w &= (1ULL << n) - 1;
		if (!(w & 1)) {
			/* clean frames here: the run (if any) ends */
			uint64_t skip = w ? (uint64_t)__builtin_ctzll(w) : n;

			zeroed += zero_run(b, run, &run_n);
			pfn += skip;
			continue;
		}
		ones = ~w ? (uint64_t)__builtin_ctzll(~w) : 64;
		ones = ones < n ? ones : n;
		if (!run_n)
			run = pfn;
		run_n += ones;
		pfn += ones;
	}
	return zeroed + zero_run(b, run, &run_n);
}

int64_t gfa_backing_prepare(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	uint64_t zeroed;

	if (!b)
		return GFA_EFAULT;
	if (!backing_range_ok(b, pfn, order))
		return pool_count_error(b->pool, GFA_EFAULT);
	zeroed = zero_dirty_range(b, pfn, 1UL << order);
	atomic_fetch_sub(&b->nr_dirty, zeroed);
	return (int64_t)zeroed;
}

int64_t backing_prepare_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	uint64_t zeroed;

	if (!backing_frames_ok(b, pfn, nr))
		return GFA_EFAULT;
	zeroed = zero_dirty_range(b, pfn, nr);
	atomic_fetch_sub(&b->nr_dirty, zeroed);
	return (int64_t)zeroed;
}

/* backing_runs over the target inside a hole of the source: it must read zero there */
static void zero_target_run(struct gfa_backing *b, uint64_t pfn, uint64_t nr, bool data, void *ctx)
{
	(void)ctx;
	/* a dirty frame holds an old owner's data, a clean one zero; a hole reads zero
	 * whatever its mark says, and zeroing it would only fault it in */
	atomic_fetch_sub(&b->nr_dirty,
			 data ? zero_dirty_range(b, pfn, nr) : dirty_update(b, pfn, nr, false));
}

struct block_copy {
	uint64_t src, dst;
};

/* backing_runs over the source: its data is copied, its holes read zero at the target */
static void copy_source_run(struct gfa_backing *b, uint64_t pfn, uint64_t nr, bool data, void *ctx)
{
	const struct block_copy *c = ctx;
	uint64_t to = c->dst + (pfn - c->src);

	if (data)
		memcpy(gfa_pfn_to_addr(b->pool, to), gfa_pfn_to_addr(b->pool, pfn),
		       nr << GFA_FRAME_SHIFT);
	else
		backing_runs(b, to, nr, zero_target_run, NULL);
}

int backing_copy_block(struct gfa_backing *b, uint64_t src, uint64_t dst, unsigned int order)
{
	struct block_copy c = { src, dst };

	if (!b)
		return -EFAULT;
	/* aligned blocks of one order are the same block or disjoint */
	if (!backing_range_ok(b, src, order) || !backing_range_ok(b, dst, order) ||
	    backing_zone_of(b, src) != backing_zone_of(b, dst) || src == dst ||
	    ((src | dst) & ((1UL << order) - 1)))
		return -EINVAL;
	backing_runs(b, src, 1UL << order, copy_source_run, &c);
	return 0;
}

void *backing_worker(struct gfa_backing *b, backing_worker_start_fn start,
		     backing_worker_stop_fn stop)
{
	void *w = atomic_load(&b->worker);

	if (b->no_zero_on_stop || w)
		return w;
	pthread_mutex_lock(&b->worker_lock);
	w = atomic_load(&b->worker);
	if (!w) {
		w = start(b);
		b->worker_stop = stop;
		atomic_store(&b->worker, w);
	}
	pthread_mutex_unlock(&b->worker_lock);
	return w;
}

void *backing_worker_peek(const struct gfa_backing *b)
{
	return atomic_load(&((struct gfa_backing *)b)->worker);
}

void backing_set_move_wait(struct gfa_backing *b, backing_move_wait_fn wait)
{
	backing_move_wait_fn none = NULL;

	/* one layer waits: a second would need a list the moved hook walks */
	if (!atomic_compare_exchange_strong(&b->move_wait, &none, wait))
		GFA_BUG_ON(none != wait);
}

uint64_t gfa_backing_nr_dirty(const struct gfa_backing *b)
{
	return b ? atomic_load(&((struct gfa_backing *)b)->nr_dirty) : 0;
}

void gfa_backing_mark_clean_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	if (!b || !backing_frames_ok(b, pfn, nr))
		return;
	atomic_fetch_sub(&b->nr_dirty, dirty_update(b, pfn, nr, false));
}

int backing_attach_host_return(struct gfa_backing *b, struct gfa_host_return *hr,
			       backing_kick_fn kick)
{
	int err = 0;

	pthread_mutex_lock(&b->hr_lock);
	if (atomic_load(&b->hr)) {
		err = -EBUSY;
	} else {
		b->hr_kick = kick;
		atomic_store(&b->hr, hr);
	}
	pthread_mutex_unlock(&b->hr_lock);
	return err;
}

void backing_detach_host_return(struct gfa_backing *b, struct gfa_host_return *hr)
{
	pthread_mutex_lock(&b->hr_lock);
	if (atomic_load(&b->hr) == hr)
		atomic_store(&b->hr, NULL);
	pthread_mutex_unlock(&b->hr_lock);
}

/* Under hr_lock, so the host return cannot be stopped and freed while we kick it. */
void gfa_backing_kick_host_return(struct gfa_backing *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->hr_lock);
	if (atomic_load(&b->hr))
		b->hr_kick(atomic_load(&b->hr));
	pthread_mutex_unlock(&b->hr_lock);
}

struct gfa_host_return *gfa_backing_host_return(const struct gfa_backing *b)
{
	return b ? atomic_load(&((struct gfa_backing *)b)->hr) : NULL;
}

struct gfa_pool *backing_pool(const struct gfa_backing *b)
{
	return b->pool;
}

int backing_punch_block(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	uint64_t off;
	int fd;

	if (b->no_balloon_punch || atomic_load(&b->hr))
		return -EAGAIN; /* the host return's to release, or nobody's */
	if (b->hugetlb && order < GFA_PAGEBLOCK_ORDER)
		return -EINVAL; /* hugetlbfs punches whole pages only */
	if (gfa_pfn_to_fd(b->pool, pfn, &fd, &off))
		return -EINVAL;
	if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)(GFA_FRAME_SIZE << order)))
		return -errno;
	return 0;
}

int gfa_backing_populate(struct gfa_backing *b)
{
	if (!b)
		return GFA_EFAULT;
	for (unsigned int z = 0; z < b->nr_zones; z++)
		populate(b->base[z], b->size[z]);
	return 0;
}

int64_t gfa_backing_alloc(struct gfa_backing *b, struct gfa_pcp *pcp, unsigned int zone,
			  unsigned int order, enum gfa_migratetype mt, uint64_t owner,
			  unsigned int flags)
{
	unsigned int aflags = flags & ~GFA_BACKING_ZERO;
	int64_t pfn;

	if (!b)
		return GFA_EFAULT;
	/* another pool's cache would hand out its frames, and we would zero ours */
	if (pcp && gfa_pcp_pool(pcp) != b->pool)
		return pool_count_error(b->pool, GFA_EINVAL);
	pfn = pcp ? gfa_pcp_alloc(pcp, order, mt, owner, aflags) :
		    gfa_alloc(b->pool, zone, order, mt, owner, aflags);
	if (pfn >= 0 && (flags & GFA_BACKING_ZERO))
		gfa_backing_prepare(b, (uint64_t)pfn, order);
	return pfn;
}

int gfa_backing_free(struct gfa_backing *b, struct gfa_pcp *pcp, uint64_t pfn, unsigned int order,
		     uint64_t owner)
{
	if (!b)
		return GFA_EFAULT;
	if (pcp && gfa_pcp_pool(pcp) != b->pool) /* its free would mark ours dirty */
		return pool_count_error(b->pool, GFA_EINVAL);
	/*
	 * Dirty before the free: once freed, another thread may allocate the block and
	 * prepare it, and must see it dirty (zero it) or it reads the old owner's data.
	 * Only what the memfd holds: the owner wrote nothing into a hole.
	 * A refused free keeps the marks: the block may be changing hands meanwhile (a
	 * move in flight frees its source, which holds the data), and a mark costs at
	 * most one zeroing more, where a cleared one would hand the data out.
	 */
	int ret;
	bool ok = backing_range_ok(b, pfn, order);

	if (ok)
		mark_data_dirty(b, pfn, 1UL << order);
	ret = pcp ? gfa_pcp_free(pcp, pfn, order, owner) : gfa_free(b->pool, pfn, order, owner);
	/* refused: the pfn may be a free block's (a double free), released frames and all */
	if (ret && ok)
		zone_free_runs(b->pool, pfn, 1UL << order, unmark_released, b);
	return ret;
}

/* Dirty marks in [pfn, pfn + n), a word at a time. */
static uint64_t dirty_bits(const struct gfa_backing *b, uint64_t pfn, uint64_t n)
{
	uint64_t d = 0;

	while (n) {
		uint64_t bit = pfn & 63, take = 64 - bit < n ? 64 - bit : n;
		uint64_t mask = (take == 64 ? ~0ULL : ((1ULL << take) - 1)) << bit;

		d += (uint64_t)__builtin_popcountll(
			atomic_load(&((struct gfa_backing *)b)->dirty[pfn / 64]) & mask);
		pfn += take;
		n -= take;
	}
	return d;
}

/* The free frames of a zone by what they hold, in one pass under the zone lock. */
struct free_walk {
	const struct gfa_backing *b;
	uint64_t free, released, dirty;
	uint64_t released_dirty, first_bad; /* broken: a released frame marked dirty */
};

static void free_walk_run(void *ctx, uint64_t pfn, uint64_t nr, bool released)
{
	struct free_walk *w = ctx;
	uint64_t d = dirty_bits(w->b, pfn, nr);

	w->free += nr;
	if (!released) {
		w->dirty += d;
		return;
	}
	w->released += nr;
	for (uint64_t p = pfn; d && !w->released_dirty && p < pfn + nr; p++)
		if (dirty_bits(w->b, p, 1)) {
			w->first_bad = p;
			break;
		}
	w->released_dirty += d;
}

static int free_walk_zone(struct gfa_backing *b, unsigned int zone, struct free_walk *w)
{
	uint64_t start, n;
	int err = gfa_zone_span(b->pool, zone, &start, &n);

	*w = (struct free_walk){ .b = b };
	return err ? err : zone_free_runs(b->pool, start, n, free_walk_run, w);
}

int gfa_backing_zone_stat(struct gfa_backing *b, unsigned int zone,
			  struct gfa_backing_zone_stat *st)
{
	struct free_walk w;
	int err;

	if (!b)
		return GFA_EFAULT;
	if (!st)
		return pool_count_error(b->pool, GFA_EFAULT);
	if (zone >= b->nr_zones)
		return pool_count_error(b->pool, GFA_ERANGE);
	err = free_walk_zone(b, zone, &w);
	if (err)
		return err;
	/* released frames are clean, whatever a (broken) mark says: counted once */
	memset(st, 0, sizeof(*st)); /* the reserved words too */
	st->free_released = w.released;
	st->free_dirty = w.dirty;
	st->free_clean = w.free - w.released - w.dirty;
	return 0;
}

int backing_check(struct gfa_backing *b, char *msg, size_t msglen)
{
	uint64_t bits = 0;
	char dummy[1];
	int err;

	if (!b)
		return GFA_EFAULT;
	if (!msg || !msglen) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	err = gfa_pool_check(b->pool, msg, msglen);
	if (err)
		return err;
	for (unsigned int z = 0; z < b->nr_zones; z++) {
		struct gfa_zone_stat zs;
		struct free_walk w;

		err = free_walk_zone(b, z, &w);
		if (!err)
			err = gfa_zone_stat(b->pool, z, &zs);
		if (err)
			return err;
		if (w.released_dirty) {
			snprintf(msg, msglen,
				 "zone %u: %lu released frames marked dirty (first pfn "
				 "%lu): clean + dirty + released would count them twice",
				 z, (unsigned long)w.released_dirty, (unsigned long)w.first_bad);
			return -EUCLEAN;
		}
		if (w.free != zs.nr_free || w.released != zs.nr_released) {
			snprintf(msg, msglen,
				 "zone %u: free frames %lu (released %lu) by their "
				 "states, %lu (%lu) by the zone's counters",
				 z, (unsigned long)w.free, (unsigned long)w.released,
				 (unsigned long)zs.nr_free, (unsigned long)zs.nr_released);
			return -EUCLEAN;
		}
	}
	for (uint64_t i = 0; i < (b->nr_pfns + 63) / 64; i++)
		bits += (uint64_t)__builtin_popcountll(atomic_load(&b->dirty[i]));
	if (bits != atomic_load(&b->nr_dirty)) {
		snprintf(msg, msglen, "%lu frames marked dirty, nr_dirty says %lu",
			 (unsigned long)bits, (unsigned long)atomic_load(&b->nr_dirty));
		return -EUCLEAN;
	}
	return 0;
}

bool gfa_backing_block_dirty(const struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	if (!b || !backing_range_ok(b, pfn, order))
		return false;
	for (uint64_t p = pfn; p < pfn + (1UL << order); p += 64 - (p & 63)) {
		uint64_t word = atomic_load(&((struct gfa_backing *)b)->dirty[p / 64]);
		uint64_t n = 64 - (p & 63) < pfn + (1UL << order) - p ? 64 - (p & 63) :
									pfn + (1UL << order) - p;
		uint64_t mask = (n == 64 ? ~0ULL : ((1ULL << n) - 1)) << (p & 63);

		if (word & mask)
			return true;
	}
	return false;
}
