// SPDX-License-Identifier: MIT
/*
 * Pools and zones: creation, the pfn layout, frame lookup, the arenas and their locks,
 * and host backing.
 */
#define _GNU_SOURCE /* sched_getcpu */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <errno.h>
#include "allocator/internal.h"

/*
 * The frame map (frame_at()): one anonymous mapping of the head array and the tail
 * slots, reserved but not backed (MAP_NORESERVE): the kernel gives a page of it memory
 * when it is first written, so creation pays for the heads it writes (one per
 * MAX_ORDER block) and a tail page costs memory only once its pageblock is split.
 * The heads in huge pages where the host gives them (a walk of all of them, as
 * gfa_pool_check and the scanners do, then takes a TLB miss per 2 MiB, not per 4 KiB);
 * the tails never: a huge page there would back 256 pageblocks' tails for one split.
 */
#define FRAMES_HUGE_MIN  (4UL << 20)
#define FRAME_HEAD_BYTES ((size_t)FRAME_HEAD_SLOTS * sizeof(struct gfa_frame))

static size_t frame_map_tail_bytes(uint64_t nr_pfns)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (nr_pfns * sizeof(struct gfa_frame) + page - 1) & ~(page - 1);
}

bool frame_map_drops(const struct gfa_pool *pool)
{
	(void)pool;
	return sysconf(_SC_PAGESIZE) <= (long)(GFA_PAGEBLOCK_FRAMES * sizeof(struct gfa_frame));
}

static struct gfa_frame *frame_map_create(uint64_t nr_pfns)
{
	size_t tails = frame_map_tail_bytes(nr_pfns);
	size_t heads = ((nr_pfns >> GFA_PAGEBLOCK_ORDER) + 1) * sizeof(struct gfa_frame);
	char *m = mmap(NULL, FRAME_HEAD_BYTES + tails, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	if (heads >= FRAMES_HUGE_MIN)
		madvise(m, heads, MADV_HUGEPAGE);
	madvise(m + FRAME_HEAD_BYTES, tails, MADV_NOHUGEPAGE);
	return (struct gfa_frame *)(m + FRAME_HEAD_BYTES);
}

static void frame_map_destroy(struct gfa_frame *map, uint64_t nr_pfns)
{
	if (map)
		munmap((char *)map - FRAME_HEAD_BYTES,
		       FRAME_HEAD_BYTES + frame_map_tail_bytes(nr_pfns));
}

int frame_map_drop_tails(struct gfa_pool *pool, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON((pfn | nr) & (GFA_PAGEBLOCK_FRAMES - 1));
	GFA_BUG_ON(!frame_map_drops(pool));
	/* slot pfn is a head's (frame_at()): the run's slots are whole pages */
	if (madvise(&pool->frame_map[pfn], nr * sizeof(struct gfa_frame), MADV_DONTNEED))
		return -errno;
	return 0;
}

static size_t meta_bytes(size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (bytes + page - 1) & ~(page - 1);
}

void *meta_zalloc(size_t bytes)
{
	void *m = mmap(NULL, meta_bytes(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);

	return m == MAP_FAILED ? NULL : m;
}

void meta_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, meta_bytes(bytes));
}

/*
 * Per-frame bitmaps (layers.h).  A host pool client's attach at 2 GiB took 63 page
 * faults with calloc'd bitmaps, 30 of them clearing the free heads and released bits,
 * which a pool with every frame held never sets.
 */
static size_t frame_bitmap_bytes(uint64_t nr_frames)
{
	return (nr_frames + 63) / 64 * sizeof(uint64_t);
}

uint64_t *frame_bitmap_alloc(uint64_t nr_frames)
{
	return meta_zalloc(frame_bitmap_bytes(nr_frames));
}

void frame_bitmap_free(uint64_t *map, uint64_t nr_frames)
{
	meta_free(map, frame_bitmap_bytes(nr_frames));
}

void gfa_pool_config_init(struct gfa_pool_config *cfg, uint64_t nr_frames)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->nr_zones = 1;
	cfg->zones[0].nr_frames = nr_frames;
	cfg->zones[0].node = 0;
}

static int config_valid(const struct gfa_pool_config *cfg)
{
	if (cfg->nr_zones == 0 || cfg->nr_zones > GFA_MAX_ZONES || !GFA_RESERVED_ZERO(cfg) ||
	    cfg->reserved32)
		return 0;
	/* the cache's int arithmetic (batch << 5, high x 8, high + batch) must not wrap */
	if (cfg->pcp_batch > GFA_PCP_BATCH_MAX || cfg->pcp_high > GFA_PCP_HIGH_MAX ||
	    cfg->pcp_high_max > GFA_PCP_HIGH_MAX)
		return 0;
	for (unsigned int i = 0; i < cfg->nr_zones; i++) {
		uint64_t n = cfg->zones[i].nr_frames;

		if (n < GFA_PAGEBLOCK_FRAMES || n > (1ULL << 31))
			return 0;
	}
	return 1;
}

/* Give a zone's frames to the buddy lists in the largest aligned blocks that fit. */
static void zone_free_all(struct gfa_zone *z)
{
	uint64_t pfn = z->start_pfn, end = z->start_pfn + z->nr_frames;

	while (pfn < end) {
		unsigned int order = fit_order(pfn, end);

		buddy_list_add(z->pool, z, pfn, order, GFA_MT_MOVABLE, true);
		pfn += 1UL << order;
	}
}

void zone_hold_range(struct gfa_zone *z, uint64_t from, uint64_t to, uint64_t owner)
{
	for (uint64_t pfn = from; pfn < to;) {
		unsigned int order = fit_order(pfn, to);

		pb_mark_tails(z, pfn); /* a partial last pageblock's pieces */
		pfn_to_frame(z->pool, pfn)->order = (uint8_t)order;
		frame_mark_allocated(pfn_to_frame(z->pool, pfn), GFA_MT_MOVABLE, owner);
		pfn += 1UL << order;
	}
}

/*
 * The zone lock guards short sections (a batch of list operations), like the kernel's
 * zone->lock spinlock: spin briefly before sleeping (2 threads on the zone path went
 * from 3.7 to about 8 M alloc+free pairs/s in bench/pcp).
 */
static void zone_lock_init(pthread_mutex_t *lock)
{
	pthread_mutexattr_t attr;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

/*
 * Arenas: `want` of them (0: one per CPU), each a power of two of frames no smaller
 * than 2^ARENA_MIN_ORDER, so the zone gets at most ARENAS_MAX and the last may be short.
 */
static int zone_arenas_init(struct gfa_zone *z, unsigned int want)
{
	long cpus = sysconf(_SC_NPROCESSORS_CONF);
	uint64_t per;

	if (!want)
		want = cpus > 0 ? (unsigned int)cpus : 1;
	if (want > ARENAS_MAX)
		want = ARENAS_MAX;
	per = (z->nr_frames + want - 1) / want;
	z->arena_order = ARENA_MIN_ORDER;
	while ((1ULL << z->arena_order) < per)
		z->arena_order++;
	z->nr_arenas =
		(unsigned int)((z->nr_frames + (1ULL << z->arena_order) - 1) >> z->arena_order);
	z->arenas = meta_zalloc(z->nr_arenas * sizeof(*z->arenas));
	if (!z->arenas)
		return -ENOMEM;
	for (unsigned int i = 0; i < z->nr_arenas; i++) {
		struct gfa_arena *a = &z->arenas[i];

		zone_lock_init(&a->lock);
		for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
			for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
				a->area[o].list[t].head = a->area[o].list[t].tail = GFA_NIL;
		/* meta_zalloc's zero pageblocks are type 0 */
		a->nr_pb_mt[0] =
			((i + 1 < z->nr_arenas ? 1ULL << z->arena_order :
						 z->nr_frames - ((uint64_t)i << z->arena_order)) +
			 GFA_PAGEBLOCK_FRAMES - 1) >>
			GFA_PAGEBLOCK_ORDER;
	}
	return 0;
}

static void zone_arenas_destroy(struct gfa_zone *z)
{
	for (unsigned int i = 0; z->arenas && i < z->nr_arenas; i++)
		pthread_mutex_destroy(&z->arenas[i].lock);
	meta_free(z->arenas, z->nr_arenas * sizeof(*z->arenas));
}

void zone_lock(struct gfa_zone *z)
{
	pthread_mutex_lock(&z->lock);
	for (unsigned int i = 0; i < z->nr_arenas; i++)
		pthread_mutex_lock(&z->arenas[i].lock);
}

void zone_unlock(struct gfa_zone *z)
{
	for (unsigned int i = z->nr_arenas; i-- > 0;)
		pthread_mutex_unlock(&z->arenas[i].lock);
	pthread_mutex_unlock(&z->lock);
}

static void zone_arenas_unlock(struct gfa_zone *z)
{
	for (unsigned int i = z->nr_arenas; i-- > 0;)
		pthread_mutex_unlock(&z->arenas[i].lock);
}

static void zone_arenas_lock(struct gfa_zone *z)
{
	for (unsigned int i = 0; i < z->nr_arenas; i++)
		pthread_mutex_lock(&z->arenas[i].lock);
}

void zone_cond_wait(struct gfa_zone *z, pthread_cond_t *cond)
{
	zone_arenas_unlock(z);
	pthread_cond_wait(cond, &z->lock);
	zone_arenas_lock(z);
}

int zone_cond_timedwait(struct gfa_zone *z, pthread_cond_t *cond, const struct timespec *ts)
{
	int ret;

	zone_arenas_unlock(z);
	ret = pthread_cond_timedwait(cond, &z->lock, ts);
	zone_arenas_lock(z);
	return ret;
}

unsigned int arena_here(const struct gfa_zone *z)
{
	int cpu;

	if (z->nr_arenas == 1)
		return 0;
	cpu = sched_getcpu();
	return cpu < 0 ? 0 : (unsigned int)cpu % z->nr_arenas;
}

#define ZONE_SUM(name, expr)                                       \
	uint64_t name                                              \
	{                                                          \
		uint64_t sum = 0;                                  \
                                                                   \
		for (unsigned int i = 0; i < z->nr_arenas; i++) {  \
			const struct gfa_arena *a = &z->arenas[i]; \
                                                                   \
			sum += (expr);                             \
		}                                                  \
		return sum;                                        \
	}
ZONE_SUM(zone_nr_free(const struct gfa_zone *z), a->nr_free)
ZONE_SUM(zone_nr_released(const struct gfa_zone *z), a->nr_released)
ZONE_SUM(zone_nr_tail_pageblocks(const struct gfa_zone *z), a->nr_tail_pageblocks)
ZONE_SUM(zone_nr_pb_mt(const struct gfa_zone *z, unsigned int mt), a->nr_pb_mt[mt])
ZONE_SUM(zone_nr_pb_sidelined(const struct gfa_zone *z), a->nr_pb_sidelined)
ZONE_SUM(zone_area_nr_free(const struct gfa_zone *z, unsigned int order), a->area[order].nr_free)
ZONE_SUM(zone_list_nr(const struct gfa_zone *z, unsigned int order, unsigned int mt),
	 a->area[order].list[mt].nr)
#undef ZONE_SUM

static int zone_init(struct gfa_pool *pool, unsigned int id, uint64_t start,
		     const struct gfa_zone_config *zc, bool held, uint64_t owner)
{
	struct gfa_zone *z = &pool->zones[id];

	z->pool = pool;
	z->id = id;
	z->node = zc->node;
	z->start_pfn = start;
	z->nr_frames = zc->nr_frames;
	z->nr_pageblocks = (zc->nr_frames + GFA_PAGEBLOCK_FRAMES - 1) >> GFA_PAGEBLOCK_ORDER;
	z->memfd = -1;
	if (zone_arenas_init(z, pool->cfg.arenas))
		return -ENOMEM;
	z->pageblocks = meta_zalloc(z->nr_pageblocks * sizeof(*z->pageblocks));
	if (!z->pageblocks)
		return -ENOMEM;
	z->free_heads = frame_bitmap_alloc(z->nr_pageblocks << GFA_PAGEBLOCK_ORDER);
	z->free_pb_heads = frame_bitmap_alloc(z->nr_pageblocks);
	if (!z->free_heads || !z->free_pb_heads)
		return -ENOMEM;
	/* free_heads counted whole, though an unsplit pageblock never writes its words */
	z->metadata_bytes += z->nr_pageblocks * (sizeof(*z->pageblocks) +
						 (sizeof(uint64_t) << (GFA_PAGEBLOCK_ORDER - 6))) +
			     (z->nr_pageblocks + 63) / 64 * sizeof(uint64_t);
	/* a held zone writes its pageblocks and heads section by section (deferred.c) */
	for (uint64_t i = 0; !held && i < z->nr_pageblocks; i++)
		zone_pageblock_set_mt(z, &z->pageblocks[i], GFA_MT_MOVABLE);
	if (release_zone_init(z))
		return -ENOMEM;
	zone_lock_init(&z->lock);
	pthread_cond_init(&z->scrub_done, NULL);
	pthread_mutex_init(&z->isolate_lock, NULL);
	if (held && zone_deferred_setup(z, owner))
		return -ENOMEM;
	if (!held)
		zone_free_all(z);
	pcp_zone_init(pool, z);
	compaction_zone_init(z);
	return 0;
}

static struct gfa_pool *pool_create(const struct gfa_pool_config *cfg, bool held, uint64_t owner)
{
	struct gfa_pool *pool;
	uint64_t pfn = 0;

	if (!cfg) {
		errno = EFAULT;
		return NULL;
	}
	if (!config_valid(cfg)) {
		errno = EINVAL;
		return NULL;
	}
	pool = meta_zalloc(sizeof(*pool)); /* (a quarter MiB: its zones) */
	if (!pool)
		goto nomem;
	pool->cfg = *cfg;
	pcp_holder_init();
	pool->nr_zones = cfg->nr_zones;
	for (unsigned int i = 0; i < cfg->nr_zones; i++) {
		uint64_t from = pfn;

		pfn = (pfn + MAX_ORDER_FRAMES - 1) & ~(MAX_ORDER_FRAMES - 1);
		pool->zones[i].start_pfn = pfn;
		pfn += cfg->zones[i].nr_frames;
		/* the heads of its pageblocks and of the hole its alignment left (the tails
		 * of split pageblocks are counted as they come: nr_tail_pageblocks) */
		pool->zones[i].metadata_bytes =
			((pfn - from + GFA_PAGEBLOCK_FRAMES - 1) >> GFA_PAGEBLOCK_ORDER) *
			sizeof(struct gfa_frame);
	}
	if (!pfn || pfn >= GFA_NIL)
		goto inval;
	pool->nr_pfns = pfn;
	pool->frame_map = frame_map_create(pfn);
	if (!pool->frame_map)
		goto nomem;
	pthread_mutex_init(&pool->pcp_lock, NULL);
	pthread_mutex_init(&pool->compactd_lock, NULL);
	if (owner_registry_init(pool))
		goto nomem;
	for (unsigned int i = 0; i < cfg->nr_zones; i++)
		if (zone_init(pool, i, pool->zones[i].start_pfn, &cfg->zones[i], held, owner))
			goto nomem;
	pcp_pool_register(pool);
	return pool;
inval:
	gfa_pool_destroy(pool);
	errno = EINVAL;
	return NULL;
nomem:
	gfa_pool_destroy(pool);
	errno = ENOMEM;
	return NULL;
}

struct gfa_pool *gfa_pool_create(const struct gfa_pool_config *cfg)
{
	return pool_create(cfg, false, 0);
}

struct gfa_pool *pool_create_held(const struct gfa_pool_config *cfg, uint64_t owner)
{
	return pool_create(cfg, true, owner);
}

void gfa_pool_destroy(struct gfa_pool *pool)
{
	if (!pool)
		return;
	pcp_pool_unregister(pool);
	gfa_compactd_stop(pool);
	owner_registry_destroy(pool);
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		if (pool->zones[i].pageblocks) {
			pthread_mutex_destroy(&pool->zones[i].lock);
			pthread_cond_destroy(&pool->zones[i].scrub_done);
			pthread_mutex_destroy(&pool->zones[i].isolate_lock);
		}
		zone_arenas_destroy(&pool->zones[i]);
		meta_free(pool->zones[i].pageblocks,
			  pool->zones[i].nr_pageblocks * sizeof(*pool->zones[i].pageblocks));
		frame_bitmap_free(pool->zones[i].released, pool->zones[i].nr_frames);
		frame_bitmap_free(pool->zones[i].free_heads,
				  pool->zones[i].nr_pageblocks << GFA_PAGEBLOCK_ORDER);
		frame_bitmap_free(pool->zones[i].free_pb_heads, pool->zones[i].nr_pageblocks);
		free(pool->zones[i].deferred);
	}
	frame_map_destroy(pool->frame_map, pool->nr_pfns);
	meta_free(pool, sizeof(*pool));
}

unsigned int gfa_pool_nr_zones(const struct gfa_pool *pool)
{
	return pool ? pool->nr_zones : 0;
}

int gfa_zone_span(const struct gfa_pool *pool, unsigned int zone, uint64_t *start_pfn,
		  uint64_t *nr_frames)
{
	if (!pool || !start_pfn || !nr_frames)
		return pool_err(pool, GFA_EFAULT);
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	*start_pfn = pool->zones[zone].start_pfn;
	*nr_frames = pool->zones[zone].nr_frames;
	return 0;
}

struct gfa_zone *pool_pfn_zone(struct gfa_pool *pool, uint64_t pfn)
{
	/* Zones are few and sorted; a short scan beats a table for cache misses. */
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		struct gfa_zone *z = &pool->zones[i];

		if (pfn >= z->start_pfn && pfn < z->start_pfn + z->nr_frames)
			return z;
	}
	return NULL;
}

int gfa_pfn_to_zone(const struct gfa_pool *pool, uint64_t pfn)
{
	struct gfa_zone *z;

	if (!pool)
		return GFA_EFAULT;
	z = pool_pfn_zone((struct gfa_pool *)pool, pfn);
	return z ? (int)z->id : pool_err(pool, GFA_ERANGE);
}

/*
 * The block holding pfn starts at pfn rounded down to its order; any head at a smaller
 * alignment inside it would be a tail, and tails never carry a state.
 */
uint64_t frame_find_head(struct gfa_pool *pool, struct gfa_zone *z, uint64_t pfn)
{
	for (unsigned int o = 0; o <= GFA_MAX_ORDER; o++) {
		uint64_t head = pfn & ~((1UL << o) - 1);
		struct gfa_frame *f;

		if (head < z->start_pfn)
			break;
		f = pfn_to_frame(pool, head);
		if (fstate(f) && head + (1UL << f->order) > pfn)
			return head;
	}
	return GFA_NIL;
}

void pool_count_err(struct gfa_pool *pool, int err)
{
	int slot;

	switch (err) {
	case GFA_EFAULT:
		slot = ERR_FAULT;
		break;
	case GFA_ERANGE:
		slot = ERR_RANGE;
		break;
	case GFA_EALIGN:
		slot = ERR_ALIGN;
		break;
	case GFA_EORDER:
		slot = ERR_ORDER;
		break;
	case GFA_EMIGRATE:
		slot = ERR_MIGRATE;
		break;
	case GFA_EDOUBLEFREE:
		slot = ERR_DOUBLE_FREE;
		break;
	case GFA_EWRONGORDER:
		slot = ERR_WRONG_ORDER;
		break;
	case GFA_ENOTHEAD:
		slot = ERR_NOT_HEAD;
		break;
	case GFA_EOWNER:
		slot = ERR_OWNER;
		break;
	case GFA_EBUSY:
		slot = ERR_BUSY;
		break;
	case GFA_ETHREAD:
		slot = ERR_THREAD;
		break;
	case GFA_EINVAL:
		slot = ERR_INVAL;
		break;
	default:
		return;
	}
	if (pool)
		atomic_fetch_add_explicit(&pool->err[slot], 1, memory_order_relaxed);
}

int pool_count_error(struct gfa_pool *pool, int err)
{
	pool_count_err(pool, err);
	return err;
}

int gfa_frame_lookup(struct gfa_pool *pool, uint64_t pfn, struct gfa_frame_info *info)
{
	struct gfa_zone *z;
	uint64_t head;
	int ret = 0;

	if (!pool || !info) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	z = pool_pfn_zone(pool, pfn);
	if (!z) {
		pool_count_err(pool, GFA_ERANGE);
		return GFA_ERANGE;
	}
	memset(info, 0, sizeof(*info));
	zone_lock(z);
	zone_deferred_init_locked(z, pfn, 1);
	head = frame_find_head(pool, z, pfn);
	GFA_BUG_ON(head == GFA_NIL); /* every frame is in some block */
	if (head == GFA_NIL) {
		ret = -EUCLEAN; /* a release build answers instead */
	} else {
		struct gfa_frame *f = pfn_to_frame(pool, head);

		unsigned int st = fstate(f);

		info->state = (enum gfa_frame_state)st;
		info->head_pfn = head;
		info->order = f->order;
		info->mt = (enum gfa_migratetype)f->mt;
		info->block_mt = (enum gfa_migratetype)pfn_pageblock(z, pfn)->mt;
		info->owner = (st == GFA_FRAME_ALLOCATED || st == GFA_FRAME_ISOLATED) ?
				      frame_owner(f) :
				      0;
		info->index = __atomic_load_n(&f->index, __ATOMIC_RELAXED);
	}
	zone_unlock(z);
	return ret;
}

int gfa_pool_for_each_allocated(struct gfa_pool *pool, gfa_block_fn fn, void *arg)
{
	if (!pool || !fn) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	for (unsigned int i = 0; i < pool->nr_zones; i++) {
		struct gfa_zone *z = &pool->zones[i];
		uint64_t pfn = z->start_pfn, end = z->start_pfn + z->nr_frames;
		int ret = 0;

		zone_lock(z);
		while (pfn < end && !ret) {
			struct gfa_frame *f = pfn_to_frame(pool, pfn);
			unsigned int order;

			/* a deferred section's frames: the held blocks its init would write */
			if (pfn_deferred(z, pfn)) {
				order = fit_order(pfn, end);
				ret = fn(arg, pfn, order, GFA_MT_MOVABLE, z->held_owner);
			} else {
				order = f->order;
				if (fstate(f) == GFA_FRAME_ALLOCATED)
					ret = fn(arg, pfn, order, (enum gfa_migratetype)f->mt,
						 frame_owner(f));
			}
			pfn += 1UL << order;
		}
		zone_unlock(z);
		if (ret)
			return ret;
	}
	return 0;
}

int zone_set_backing(struct gfa_pool *pool, unsigned int zone, void *base, int memfd)
{
	if (!pool)
		return GFA_EFAULT;
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	pool->zones[zone].base = base;
	pool->zones[zone].memfd = memfd;
	return 0;
}

void *gfa_pfn_to_addr(const struct gfa_pool *pool, uint64_t pfn)
{
	struct gfa_zone *z;

	if (!pool)
		return NULL;
	z = pool_pfn_zone((struct gfa_pool *)pool, pfn);
	if (!z || !z->base)
		return NULL;
	return (char *)z->base + ((pfn - z->start_pfn) << GFA_FRAME_SHIFT);
}

int gfa_pfn_to_fd(const struct gfa_pool *pool, uint64_t pfn, int *fd, uint64_t *offset)
{
	struct gfa_zone *z;

	if (!pool || !fd || !offset)
		return pool_err(pool, GFA_EFAULT);
	z = pool_pfn_zone((struct gfa_pool *)pool, pfn);
	if (!z)
		return pool_err(pool, GFA_ERANGE);
	if (z->memfd < 0)
		return -ENODEV;
	*fd = z->memfd;
	*offset = (pfn - z->start_pfn) << GFA_FRAME_SHIFT;
	return 0;
}

int gfa_block_set_index(struct gfa_pool *pool, uint64_t pfn, uint64_t owner, uint32_t index)
{
	struct gfa_zone *z;
	struct gfa_frame *f;
	unsigned int st;
	int err = 0;

	if (!pool)
		err = GFA_EFAULT;
	else if (!(z = pool_pfn_zone(pool, pfn)))
		err = GFA_ERANGE;
	if (err)
		goto out;
	zone_deferred_init(z, pfn, 1);
	f = pfn_to_frame(pool, pfn);
	st = fstate(f);
	if (st != GFA_FRAME_ALLOCATED && st != GFA_FRAME_ISOLATED)
		err = GFA_ENOTHEAD;
	else if (frame_owner(f) != owner)
		err = GFA_EOWNER;
	else
		__atomic_store_n(&f->index, index, __ATOMIC_RELAXED);
out:
	if (err)
		pool_count_err(pool, err);
	return err;
}

int pool_block_reown(struct gfa_pool *pool, uint64_t pfn, unsigned int order, uint64_t from,
		     uint64_t to)
{
	struct gfa_zone *z = pool ? pool_pfn_zone(pool, pfn) : NULL;
	struct gfa_frame *f;
	int err = 0;

	if (!pool)
		return GFA_EFAULT;
	if (!z || order > GFA_MAX_ORDER)
		return pool_err(pool, GFA_ERANGE);
	zone_lock(z);
	zone_deferred_init_locked(z, pfn, 1);
	f = pfn_to_frame(pool, pfn);
	if (fstate(f) != GFA_FRAME_ALLOCATED || f->order != order)
		err = GFA_ENOTHEAD;
	else if (frame_owner(f) != from)
		err = GFA_EOWNER;
	else
		frame_set_owner(f, to);
	zone_unlock(z);
	return err ? pool_err(pool, err) : 0;
}
