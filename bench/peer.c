// SPDX-License-Identifier: MIT
/*
 * bench/peer: gfa beside LLFree, a lock-free page-frame allocator with per-core
 * reservations (its C implementation, built from the shared peers folder), in one run.
 *
 * The workloads of LLFree's kernel benchmark module, at orders 0 and 9 on 1 and 2
 * threads, each thread pinned to its own CPU:
 *   repeat  allocate a block and free it at once, in a loop (ns per pair)
 *   bulk    allocate many blocks, then free them all (ns per operation)
 *   rand    hold 90% of the pool, then free a random held block and allocate one
 *           in its place, in a loop (ns per operation); afterwards the fully free
 *           2 MiB blocks left are counted (fragmentation)
 *   xfree   the pool 90% full, blocks allocated by one thread and freed by another in
 *           batches of twice the most a cache may hold (a VM torn down or ballooned
 *           by a thread other than its vCPUs'): with 1 thread the two take turns (one
 *           allocates a batch, then the other frees it); with 2 both at once, each
 *           freeing the batches the other allocated, up to XFREE_SLACK batches
 *           behind (ns per operation)
 * for three allocators: gfa through its per-vCPU cache (gfa_pcp_alloc/free, one cache
 * per thread), gfa through its zone path (gfa_alloc/free, the zone lock every call; the
 * caches are drained before each of its repetitions, so it runs as gfa without them) and
 * LLFree (llfree_get/put, one per-core reservation slot per thread), over pools of 1, 4
 * and 16 GiB of frames.  Repetitions are interleaved (one of every allocator, then the
 * next) after a warm-up; min and median of the wall time per operation, and the
 * threads' CPU time beside it (a preempted lock holder on a shared machine shows up as
 * wall time, not CPU time).  Ratios are gfa / LLFree: below 1, gfa is faster; `ratio`
 * compares medians (the headline, and what the goals judge: a user meets the typical
 * sample, not the luckiest), `ratio_min` the fastest samples, `cpu_ratio` CPU time.
 *
 * Pools are metadata only: neither allocator touches the frames it hands out, so no
 * host memory stands behind them (as bench/pcp and bench/buddy build theirs).
 * Metadata is what each allocator keeps per frame and per 2 MiB: gfa by gfa_zone_stat's
 * metadata_bytes (what its pool has backed: heads, pageblocks, bitmaps, the tails of
 * split pageblocks), LLFree by its llfree_metadata_size.  gfa's per-pool and per-cache
 * allocations beside it (malloc's count around pool and cache creation: the owner
 * table, the caches, the pageblocks and bitmaps again) print as gfa_malloc_bytes.
 */
#define _GNU_SOURCE /* sched_setaffinity (bench_pin_self), mallinfo2 */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <gfa/allocator.h>
#include "bench/bench_util.h"
#if PEER_LLFREE
#include "bench/peer_llfree.h"
#endif

#define MAX_THREADS   2
#define MAX_REPS      1000
#define NR_SIZES      3
#define RAND_HELD_PCT 90

enum peer_wl { WL_REPEAT, WL_BULK, WL_RAND, WL_XFREE, NR_WL };
static const char *const wl_name[NR_WL] = { "repeat", "bulk", "rand", "xfree" };
static const char *const wl_unit[NR_WL] = { "ns/pair", "ns/op", "ns/op", "ns/op" };

enum peer_kind { K_CACHE, K_ZONE, K_LLFREE, NR_KINDS };
static const char *const kind_name[NR_KINDS] = { "gfa", "zone", "llfree" };

static const unsigned int orders[] = { 0, GFA_PAGEBLOCK_ORDER };
#define NR_ORDERS_RUN 2
static const uint64_t size_gib[NR_SIZES] = { 1, 4, 16 };

/* What the workers do next (one command at a time, all threads in step). */
enum peer_cmd { CMD_REPEAT, CMD_BULK, CMD_FILL, CMD_RAND, CMD_XFREE, CMD_FREE_ALL, CMD_QUIT };

struct peer_pool {
	uint64_t frames;
	struct gfa_pool *pool;
	struct gfa_pcp *pcp[MAX_THREADS];
#if PEER_LLFREE
	struct peer_llfree *ll;
#endif
	uint64_t gfa_meta, ll_meta, gfa_malloc;
	uint64_t xfree_frames; /* xfree's batch: twice the most a cache may hold */
};

struct peer_ctl {
	pthread_barrier_t go, done;
	struct peer_pool *pp;
	enum peer_cmd cmd;
	enum peer_kind kind;
	unsigned int order;
	int nactive;
	uint64_t count;        /* per thread: pairs, blocks or random steps */
	uint64_t passes;       /* bulk: allocate-all/free-all passes per repetition */
	uint64_t held;         /* per thread: blocks rand and xfree hold */
	uint64_t batch;        /* xfree: blocks per batch */
	bool turns;            /* xfree on 1 thread: the two workers take turns */
	struct peer_worker *w; /* all workers (xfree frees another's batches) */
	_Atomic bool xabort;   /* xfree: a worker failed, the others stop waiting */
};

/* xfree: how many batches a worker may allocate ahead of its partner's frees. */
#define XFREE_SLACK 4

struct peer_worker {
	pthread_t th;
	int id;
	struct peer_ctl *ctl;
	uint64_t *blocks;
	uint64_t nr_blocks, cap, rng, owner;
	uint64_t *xbuf[XFREE_SLACK]; /* xfree: this worker's batches, round r in r % SLACK */
	uint64_t xcap;
	/* xfree: rounds this worker allocated, and rounds of its partner's it freed */
	_Atomic uint64_t xalloced, xfreed;
	double wall_ns, cpu_ns; /* of the last timed command */
	double xcpu_ns;         /* xfree: CPU time of its work, hand-over waits left out */
	int err;
} __attribute__((aligned(64)));

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One allocation of the kind the command runs: a pfn, or a negative error. */
static inline __attribute__((always_inline)) int64_t peer_get(struct peer_worker *w,
							      enum peer_kind k, unsigned int order)
{
	struct peer_pool *pp = w->ctl->pp;

	switch (k) {
	case K_CACHE:
		return gfa_pcp_alloc(pp->pcp[w->id], order, GFA_MT_MOVABLE, w->owner, 0);
	case K_ZONE:
		return gfa_alloc(pp->pool, 0, order, GFA_MT_MOVABLE, w->owner, 0);
	default:
#if PEER_LLFREE
		return peer_llfree_get(pp->ll, (unsigned int)w->id, order);
#else
		return -ENOSYS;
#endif
	}
}

static inline __attribute__((always_inline)) int peer_put_owner(struct peer_worker *w,
								enum peer_kind k, uint64_t pfn,
								unsigned int order, uint64_t owner)
{
	struct peer_pool *pp = w->ctl->pp;

	switch (k) {
	case K_CACHE:
		return gfa_pcp_free(pp->pcp[w->id], pfn, order, owner);
	case K_ZONE:
		return gfa_free(pp->pool, pfn, order, owner);
	default:
#if PEER_LLFREE
		return peer_llfree_put(pp->ll, (unsigned int)w->id, pfn, order) ? -EINVAL : 0;
#else
		return -ENOSYS;
#endif
	}
}

static inline __attribute__((always_inline)) int peer_put(struct peer_worker *w, enum peer_kind k,
							  uint64_t pfn, unsigned int order)
{
	return peer_put_owner(w, k, pfn, order, w->owner);
}

static inline __attribute__((always_inline)) int run_repeat(struct peer_worker *w, enum peer_kind k,
							    unsigned int order, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		int64_t pfn = peer_get(w, k, order);
		int err = pfn < 0 ? (int)pfn : peer_put(w, k, (uint64_t)pfn, order);

		if (err)
			return err;
	}
	return 0;
}

static inline __attribute__((always_inline)) int fill(struct peer_worker *w, enum peer_kind k,
						      unsigned int order, uint64_t n)
{
	for (; w->nr_blocks < n; w->nr_blocks++) {
		int64_t pfn = peer_get(w, k, order);

		if (pfn < 0)
			return (int)pfn;
		w->blocks[w->nr_blocks] = (uint64_t)pfn;
	}
	return 0;
}

static inline __attribute__((always_inline)) int free_all(struct peer_worker *w, enum peer_kind k,
							  unsigned int order)
{
	for (; w->nr_blocks; w->nr_blocks--) {
		int err = peer_put(w, k, w->blocks[w->nr_blocks - 1], order);

		if (err)
			return err;
	}
	return 0;
}

static inline __attribute__((always_inline)) int run_rand(struct peer_worker *w, enum peer_kind k,
							  unsigned int order, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t j = bench_rand(&w->rng) % w->nr_blocks;
		int err = peer_put(w, k, w->blocks[j], order);
		int64_t pfn;

		if (err)
			return err;
		pfn = peer_get(w, k, order);
		if (pfn < 0)
			return (int)pfn;
		w->blocks[j] = (uint64_t)pfn;
	}
	return 0;
}

/*
 * Wait until *v reaches want (the partner's progress), or a worker failed.  Spin: the
 * partner is pinned to another CPU, a batch of order-9 blocks lasts microseconds (as long
 * as a futex wake-up), and a yield on a busy machine gives the CPU away for a time slice;
 * yield only when the wait already lasts that long.  False when a worker failed.
 */
static bool xfree_wait(struct peer_ctl *c, _Atomic uint64_t *v, uint64_t want)
{
	unsigned int spins = 0;

	while (atomic_load_explicit(v, memory_order_acquire) < want) {
		if (atomic_load_explicit(&c->xabort, memory_order_relaxed))
			return false;
		__builtin_ia32_pause();
		if (++spins % (1u << 16) == 0)
			sched_yield();
	}
	return true;
}

/* Allocate a batch into buf (own cache, own owner); CPU time added to w->xcpu_ns. */
static inline __attribute__((always_inline)) int xfree_alloc(struct peer_worker *w,
							     enum peer_kind k, uint64_t *buf)
{
	uint64_t c0 = thread_cpu_ns();

	for (uint64_t j = 0; j < w->ctl->batch; j++) {
		int64_t pfn = peer_get(w, k, w->ctl->order);

		if (pfn < 0)
			return (int)pfn;
		buf[j] = (uint64_t)pfn;
	}
	w->xcpu_ns += (double)(thread_cpu_ns() - c0);
	return 0;
}

/* Free the batch another worker allocated (own cache, that worker's owner). */
static inline __attribute__((always_inline)) int xfree_put(struct peer_worker *w, enum peer_kind k,
							   const struct peer_worker *from,
							   const uint64_t *buf)
{
	uint64_t c0 = thread_cpu_ns();

	for (uint64_t j = 0; j < w->ctl->batch; j++) {
		int err = peer_put_owner(w, k, buf[j], w->ctl->order, from->owner);

		if (err)
			return err;
	}
	w->xcpu_ns += (double)(thread_cpu_ns() - c0);
	return 0;
}

/*
 * count rounds.  Round r of a worker that allocates fills its buffer r % XFREE_SLACK,
 * once its partner freed what that buffer held XFREE_SLACK rounds before; a worker that
 * frees frees its partner's round r once it is allocated.  Taking turns, worker 0 only
 * allocates and worker 1 only frees, one round apart (slack 1): one runs while the other
 * waits.  At once, both do both, and a worker that loses its CPU for a moment stalls the
 * other only when it falls XFREE_SLACK rounds behind.
 */
static inline __attribute__((always_inline)) int run_xfree(struct peer_worker *w, enum peer_kind k,
							   uint64_t rounds)
{
	struct peer_ctl *c = w->ctl;
	struct peer_worker *other = &c->w[1 - w->id];
	bool allocs = !c->turns || w->id == 0, frees = !c->turns || w->id == 1;
	uint64_t slack = c->turns ? 1 : XFREE_SLACK;
	int err = 0;

	w->xcpu_ns = 0;
	for (uint64_t r = 0; r < rounds && !err; r++) {
		if (allocs) {
			if (!xfree_wait(c, &other->xfreed, r + 1 > slack ? r + 1 - slack : 0))
				return 0; /* the partner failed, and says so */
			err = xfree_alloc(w, k, w->xbuf[r % XFREE_SLACK]);
			atomic_store_explicit(&w->xalloced, r + 1, memory_order_release);
		}
		if (frees && !err) {
			if (!xfree_wait(c, &other->xalloced, r + 1))
				return 0;
			err = xfree_put(w, k, other, other->xbuf[r % XFREE_SLACK]);
			atomic_store_explicit(&w->xfreed, r + 1, memory_order_release);
		}
	}
	if (err)
		atomic_store_explicit(&c->xabort, true, memory_order_relaxed);
	return err;
}

/* One command, built per allocator kind so no kind pays a dispatch per call. */
static inline __attribute__((always_inline)) int run_cmd_kind(struct peer_worker *w,
							      enum peer_kind k)
{
	struct peer_ctl *c = w->ctl;
	int err;

	switch (c->cmd) {
	case CMD_REPEAT:
		return run_repeat(w, k, c->order, c->count);
	case CMD_BULK:
		for (uint64_t p = 0; p < c->passes; p++) {
			err = fill(w, k, c->order, c->count);
			if (!err)
				err = free_all(w, k, c->order);
			if (err)
				return err;
		}
		return 0;
	case CMD_FILL:
		return fill(w, k, c->order, c->held);
	case CMD_RAND:
		return run_rand(w, k, c->order, c->count);
	case CMD_XFREE:
		return run_xfree(w, k, c->count);
	default:
		return free_all(w, k, c->order);
	}
}

static int run_cmd(struct peer_worker *w)
{
	switch (w->ctl->kind) {
	case K_CACHE:
		return run_cmd_kind(w, K_CACHE);
	case K_ZONE:
		return run_cmd_kind(w, K_ZONE);
	default:
		return run_cmd_kind(w, K_LLFREE);
	}
}

static void *peer_thread(void *arg)
{
	struct peer_worker *w = arg;
	struct peer_ctl *c = w->ctl;

	bench_pin_self(w->id);
	for (;;) {
		uint64_t t0, c0;

		pthread_barrier_wait(&c->go);
		if (c->cmd == CMD_QUIT)
			break;
		if (w->id < c->nactive && !w->err) {
			t0 = bench_now_ns();
			c0 = thread_cpu_ns();
			w->err = run_cmd(w);
			w->cpu_ns = c->cmd == CMD_XFREE ? w->xcpu_ns :
							  (double)(thread_cpu_ns() - c0);
			w->wall_ns = (double)(bench_now_ns() - t0);
		}
		pthread_barrier_wait(&c->done);
	}
	return NULL;
}

/* Run one command on the active threads; per-thread mean wall and CPU ns per op. */
static void peer_run(struct peer_ctl *c, struct peer_worker *w, enum peer_cmd cmd, double ops,
		     double *wall, double *cpu)
{
	double sw = 0, sc = 0;

	c->cmd = cmd;
	pthread_barrier_wait(&c->go);
	pthread_barrier_wait(&c->done);
	for (int i = 0; i < c->nactive; i++) {
		if (w[i].err)
			bench_die("%s %s order %u thread %d: %s", kind_name[c->kind],
				  cmd == CMD_FILL     ? "fill" :
				  cmd == CMD_FREE_ALL ? "free" :
							"run",
				  c->order, i, strerror(-w[i].err));
		sw += w[i].wall_ns / ops;
		sc += w[i].cpu_ns / ops;
	}
	if (wall)
		*wall = sw / c->nactive;
	/* taking turns, the workers' CPU times add up: one works while the other waits */
	if (cpu)
		*cpu = c->turns ? sc : sc / c->nactive;
}

/* Fully free 2 MiB blocks of an allocator (gfa's caches drained first). */
static uint64_t free_2m_blocks(struct peer_pool *pp, enum peer_kind k)
{
	struct gfa_zone_stat st;
	uint64_t n = 0;

	if (k == K_LLFREE) {
#if PEER_LLFREE
		return peer_llfree_free_huge(pp->ll);
#else
		return 0;
#endif
	}
	if (gfa_pool_drain_all(pp->pool, -1) < 0 || gfa_zone_stat(pp->pool, 0, &st))
		bench_die("gfa_zone_stat failed");
	for (int mt = 0; mt < GFA_MT_TYPES; mt++)
		for (unsigned int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
			n += st.nr_free_blocks[o][mt] << (o - GFA_PAGEBLOCK_ORDER);
	return n;
}

/* A row's samples: [kind][rep] wall and CPU ns per operation. */
struct peer_row {
	enum peer_wl wl;
	unsigned int order;
	int threads;
	double wall[NR_KINDS][MAX_REPS], cpu[NR_KINDS][MAX_REPS];
	uint64_t frag[NR_KINDS]; /* rand: fully free 2 MiB blocks (last rep) */
	uint64_t frag_possible;
};

struct peer_counts {
	uint64_t repeat, bulk_frames, bulk_ops, rand_steps, xfree_ops;
};

/*
 * xfree: the batches in flight (one taking turns; at once, each worker's XFREE_SLACK
 * buffers) and the blocks held beside them make up 90% of the pool.  A batch is twice
 * the most a cache may hold (high_max).
 */
static void xfree_setup(struct peer_ctl *c, const struct peer_row *r, const struct peer_counts *n)
{
	uint64_t frames = c->pp->frames, bf = c->pp->xfree_frames;
	uint64_t inflight = (r->threads == 1 ? 1 : 2 * XFREE_SLACK) * bf, rounds;

	if (!bf || inflight >= frames * RAND_HELD_PCT / 100)
		bench_die("xfree: batches of %lu frames do not fit the pool", (unsigned long)bf);
	c->nactive = MAX_THREADS;
	c->turns = r->threads == 1;
	c->batch = bf >> r->order;
	c->held = ((frames * RAND_HELD_PCT / 100 - inflight) >> r->order) / MAX_THREADS;
	/* each round, 2 x batch operations per worker at once, or by the two in turn */
	rounds = (n->xfree_ops + 2 * c->batch - 1) / (2 * c->batch);
	c->count = rounds < 2 ? 2 : rounds;
	c->xabort = false;
	for (int i = 0; i < MAX_THREADS; i++) {
		c->w[i].xalloced = 0;
		c->w[i].xfreed = 0;
	}
}

/* One repetition of a row for one allocator. */
static void peer_rep(struct peer_ctl *c, struct peer_worker *w, struct peer_row *r,
		     enum peer_kind k, int rep, const struct peer_counts *n)
{
	uint64_t frames = c->pp->frames;
	double *wall = rep >= 0 ? &r->wall[k][rep] : NULL, *cpu = rep >= 0 ? &r->cpu[k][rep] : NULL;

	c->kind = k;
	c->order = r->order;
	c->nactive = r->threads;
	c->turns = false;
	/* the zone path runs as gfa without caches: none holds frames it could reuse */
	if (k == K_ZONE && gfa_pool_drain_all(c->pp->pool, -1) < 0)
		bench_die("gfa_pool_drain_all failed");
	switch (r->wl) {
	case WL_REPEAT:
		c->count = n->repeat;
		peer_run(c, w, CMD_REPEAT, (double)c->count, wall, cpu);
		break;
	case WL_BULK:
		c->count = (n->bulk_frames < frames / 2 ? n->bulk_frames : frames / 2) >> r->order;
		c->count /= (uint64_t)r->threads;
		/* a repetition of at least bulk_ops blocks per thread: one pass of a few
		 * hundred 2 MiB blocks lasts tens of microseconds, mostly cold misses */
		c->passes = (n->bulk_ops + c->count - 1) / c->count;
		peer_run(c, w, CMD_BULK, 2.0 * (double)(c->count * c->passes), wall, cpu);
		break;
	case WL_XFREE:
		xfree_setup(c, r, n);
		peer_run(c, w, CMD_FILL, 1, NULL, NULL);
		peer_run(c, w, CMD_XFREE, 2.0 * (double)(c->count * c->batch), wall, cpu);
		c->turns = false;
		peer_run(c, w, CMD_FREE_ALL, 1, NULL, NULL);
		break;
	default:
		c->held = (frames * RAND_HELD_PCT / 100 >> r->order) / (uint64_t)r->threads;
		c->count = n->rand_steps >> (r->order ? 3 : 0);
		peer_run(c, w, CMD_FILL, 1, NULL, NULL);
		peer_run(c, w, CMD_RAND, 2.0 * (double)c->count, wall, cpu);
		if (r->order == 0) {
			r->frag[k] = free_2m_blocks(c->pp, k);
			r->frag_possible = (frames - c->held * (uint64_t)r->threads) >>
					   GFA_PAGEBLOCK_ORDER;
		}
		peer_run(c, w, CMD_FREE_ALL, 1, NULL, NULL);
		break;
	}
}

static size_t mallinfo_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* What the pool's zones say their frames cost (gfa_zone_stat's metadata_bytes). */
static size_t pool_metadata(struct gfa_pool *pool)
{
	struct gfa_zone_stat zs;
	size_t bytes = 0;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		if (gfa_zone_stat(pool, z, &zs))
			bench_die("gfa_zone_stat failed");
		bytes += zs.metadata_bytes;
	}
	return bytes;
}

static void pool_open(struct peer_pool *pp, uint64_t frames)
{
	struct gfa_pool_config cfg;
	struct gfa_pcp_stat st;
	size_t m0 = mallinfo_bytes();

	memset(pp, 0, sizeof(*pp));
	pp->frames = frames;
	gfa_pool_config_init(&cfg, frames);
	pp->pool = gfa_pool_create(&cfg);
	if (!pp->pool)
		bench_die("gfa_pool_create: %s", strerror(errno));
	for (int i = 0; i < MAX_THREADS; i++) {
		pp->pcp[i] = gfa_pcp_create(pp->pool, 0);
		if (!pp->pcp[i])
			bench_die("gfa_pcp_create: %s", strerror(errno));
	}
	pp->gfa_malloc = mallinfo_bytes() - m0;
	pp->gfa_meta = pool_metadata(pp->pool);
	if (gfa_pcp_stat(pp->pcp[0], &st))
		bench_die("gfa_pcp_stat failed");
	pp->xfree_frames = 2 * (uint64_t)st.high_max;
#if PEER_LLFREE
	pp->ll = peer_llfree_create(frames, MAX_THREADS, &pp->ll_meta);
	if (!pp->ll)
		bench_die("LLFree init failed for %lu frames", (unsigned long)frames);
#endif
}

static void pool_close(struct peer_pool *pp)
{
	char msg[256];

	for (int i = 0; i < MAX_THREADS; i++)
		gfa_pcp_destroy(pp->pcp[i]);
	if (gfa_pool_check(pp->pool, msg, sizeof(msg)))
		bench_die("pool invariant broken: %s", msg);
	gfa_pool_destroy(pp->pool);
#if PEER_LLFREE
	if (peer_llfree_free_frames(pp->ll) != pp->frames)
		bench_die("LLFree lost frames: %lu of %lu free",
			  (unsigned long)peer_llfree_free_frames(pp->ll),
			  (unsigned long)pp->frames);
	peer_llfree_destroy(pp->ll);
#endif
}

/* The markdown table printed at the end (bench-all copies it into BENCHMARKS.md). */
static char md_rows[NR_SIZES * NR_WL * NR_ORDERS_RUN * MAX_THREADS][256];
static unsigned int nr_md_rows;

static void print_row(const struct peer_row *r, const struct peer_pool *pp, int reps,
		      unsigned int *met, unsigned int *goals)
{
	struct bench_stat wall[NR_KINDS], cpu[NR_KINDS];
	double wv[MAX_REPS], cv[MAX_REPS];
	struct bench_result res;
	char key[64], gkey[96];
	unsigned int gib = (unsigned int)(pp->frames >> 18);

	for (int k = 0; k < NR_KINDS; k++) {
		memcpy(wv, r->wall[k], sizeof(double) * (size_t)reps);
		memcpy(cv, r->cpu[k], sizeof(double) * (size_t)reps);
		wall[k] = bench_stat_of(wv, reps);
		cpu[k] = bench_stat_of(cv, reps);
	}
	printf("%-6s %5u %7d %5u %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f %6.2f %6.2f "
	       "%6.2f %6.2f\n",
	       wl_name[r->wl], r->order, r->threads, gib, wall[K_CACHE].median, wall[K_CACHE].min,
	       wall[K_ZONE].median, wall[K_ZONE].min, wall[K_LLFREE].median, wall[K_LLFREE].min,
	       cpu[K_CACHE].median, cpu[K_ZONE].median, cpu[K_LLFREE].median,
	       wall[K_CACHE].median / wall[K_LLFREE].median,
	       wall[K_ZONE].median / wall[K_LLFREE].median, wall[K_CACHE].min / wall[K_LLFREE].min,
	       wall[K_ZONE].min / wall[K_LLFREE].min);
	snprintf(key, sizeof(key), "%s_%u_%dt", wl_name[r->wl], r->order, r->threads);
	bench_result_init(&res, "peer_llfree");
	sb_printf(&res.sb, " %s", key);
	bench_result_add(&res, "pool_gib", "%u", gib);
	bench_result_add(&res, "gfa_ns", "%.1f", wall[K_CACHE].median);
	bench_result_add(&res, "llfree_ns", "%.1f", wall[K_LLFREE].median);
	bench_result_add(&res, "ratio", "%.3f", wall[K_CACHE].median / wall[K_LLFREE].median);
	bench_result_add(&res, "ratio_min", "%.3f", wall[K_CACHE].min / wall[K_LLFREE].min);
	bench_result_add(&res, "cpu_ratio", "%.3f", cpu[K_CACHE].median / cpu[K_LLFREE].median);
	bench_result_add(&res, "zone_ns", "%.1f", wall[K_ZONE].median);
	bench_result_add(&res, "zone_ratio", "%.3f", wall[K_ZONE].median / wall[K_LLFREE].median);
	bench_result_add(&res, "zone_ratio_min", "%.3f", wall[K_ZONE].min / wall[K_LLFREE].min);
	bench_result_add(&res, "gfa_min_ns", "%.1f", wall[K_CACHE].min);
	bench_result_add(&res, "zone_min_ns", "%.1f", wall[K_ZONE].min);
	bench_result_add(&res, "llfree_min_ns", "%.1f", wall[K_LLFREE].min);
	bench_result_add(&res, "gfa_cpu_ns", "%.1f", cpu[K_CACHE].median);
	bench_result_add(&res, "zone_cpu_ns", "%.1f", cpu[K_ZONE].median);
	bench_result_add(&res, "llfree_cpu_ns", "%.1f", cpu[K_LLFREE].median);
	bench_result_add(&res, "unit", "%s", wl_unit[r->wl]);
	if (r->wl == WL_RAND && r->order == 0) {
		bench_result_add(&res, "gfa_free_2m", "%lu", (unsigned long)r->frag[K_CACHE]);
		bench_result_add(&res, "zone_free_2m", "%lu", (unsigned long)r->frag[K_ZONE]);
		bench_result_add(&res, "llfree_free_2m", "%lu", (unsigned long)r->frag[K_LLFREE]);
		bench_result_add(&res, "possible_2m", "%lu", (unsigned long)r->frag_possible);
	}
	bench_result_print(&res);
	snprintf(md_rows[nr_md_rows++], sizeof(md_rows[0]),
		 "| %s | %u | %d | %u | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.2f (%.2f) | "
		 "%.2f (%.2f) | %.1f / %.1f / %.1f |",
		 wl_name[r->wl], r->order, r->threads, gib, wall[K_CACHE].min, wall[K_CACHE].median,
		 wall[K_ZONE].min, wall[K_ZONE].median, wall[K_LLFREE].min, wall[K_LLFREE].median,
		 wall[K_CACHE].median / wall[K_LLFREE].median,
		 wall[K_CACHE].min / wall[K_LLFREE].min,
		 wall[K_ZONE].median / wall[K_LLFREE].median, wall[K_ZONE].min / wall[K_LLFREE].min,
		 cpu[K_CACHE].median, cpu[K_ZONE].median, cpu[K_LLFREE].median);
	snprintf(gkey, sizeof(gkey), "%s_%ug_cache", key, gib);
	*met += bench_goal("peer_llfree", gkey, wall[K_CACHE].median / wall[K_LLFREE].median,
			   "<=", 1.0, "gfa cache / LLFree, median wall time of each");
	snprintf(gkey, sizeof(gkey), "%s_%ug_zone", key, gib);
	*met += bench_goal("peer_llfree", gkey, wall[K_ZONE].median / wall[K_LLFREE].median,
			   "<=", r->threads > 1 ? 1.5 : 2.0,
			   "gfa zone path / LLFree, median wall time of each");
	*goals += 2;
	if (r->wl == WL_RAND && r->order == 0) {
		snprintf(gkey, sizeof(gkey), "%s_%ug_free_2m", key, gib);
		*met += bench_goal("peer_llfree", gkey,
				   (double)r->frag[K_CACHE] /
					   (double)(r->frag[K_LLFREE] ? r->frag[K_LLFREE] : 1),
				   ">=", 1.0,
				   "fully free 2 MiB blocks after rand, gfa cache / LLFree");
		*goals += 1;
	}
}

/* The worker threads, the rows they run, and the goals their rows met. */
struct peer_bench {
	struct peer_worker w[MAX_THREADS];
	struct peer_row rows[NR_WL * NR_ORDERS_RUN * MAX_THREADS];
	unsigned int nrows, met, goals;
	struct peer_counts n;
	struct peer_ctl ctl;
};

static void workers_start(struct peer_bench *b)
{
	memset(&b->ctl, 0, sizeof(b->ctl));
	pthread_barrier_init(&b->ctl.go, NULL, MAX_THREADS + 1);
	pthread_barrier_init(&b->ctl.done, NULL, MAX_THREADS + 1);
	b->ctl.w = b->w;
	for (int i = 0; i < MAX_THREADS; i++) {
		struct peer_worker *w = &b->w[i];

		w->id = i;
		w->ctl = &b->ctl;
		w->owner = 0x100 + (uint64_t)i;
		w->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		w->cap = (size_gib[NR_SIZES - 1] << 18) * RAND_HELD_PCT / 100 + 1;
		w->blocks = malloc(w->cap * sizeof(uint64_t));
		if (!w->blocks || pthread_create(&w->th, NULL, peer_thread, w))
			bench_die("out of memory or threads");
	}
}

static void workers_stop(struct peer_bench *b)
{
	b->ctl.cmd = CMD_QUIT;
	pthread_barrier_wait(&b->ctl.go);
	for (int i = 0; i < MAX_THREADS; i++) {
		pthread_join(b->w[i].th, NULL);
		free(b->w[i].blocks);
		for (int j = 0; j < XFREE_SLACK; j++)
			free(b->w[i].xbuf[j]);
	}
}

/* The rows of the workloads --only leaves: each order, each thread count. */
static void rows_make(const struct bench_opts *o, struct peer_bench *b)
{
	for (int wl = 0; wl < NR_WL; wl++)
		for (int oi = 0; oi < NR_ORDERS_RUN && bench_wants(o, wl_name[wl]); oi++)
			for (int t = 1; t <= MAX_THREADS; t++) {
				b->rows[b->nrows].wl = (enum peer_wl)wl;
				b->rows[b->nrows].order = orders[oi];
				b->rows[b->nrows++].threads = t;
			}
}

/* One pool size: the metadata, every row's reps (kinds interleaved), their table. */
static void run_size(const struct bench_opts *o, struct peer_bench *b, uint64_t gib)
{
	struct peer_row *rows = b->rows;
	struct peer_pool pp;

	pool_open(&pp, gib << 18);
	b->ctl.pp = &pp;
	for (int i = 0; i < MAX_THREADS; i++) {
		struct peer_worker *w = &b->w[i];
		uint64_t cap = pp.xfree_frames;

		if (w->xcap >= cap)
			continue;
		for (int j = 0; j < XFREE_SLACK; j++) {
			free(w->xbuf[j]);
			w->xbuf[j] = malloc(cap * sizeof(uint64_t));
			if (!w->xbuf[j])
				bench_die("out of memory");
		}
		w->xcap = cap;
	}
	printf("\n## pool %lu GiB (%lu frames): metadata gfa %.2f MiB, LLFree %.3f MiB\n",
	       (unsigned long)gib, (unsigned long)pp.frames, (double)pp.gfa_meta / 1048576.0,
	       (double)pp.ll_meta / 1048576.0);
	printf("RESULT peer_llfree metadata_%lug gfa_bytes=%lu llfree_bytes=%lu "
	       "gfa_malloc_bytes=%lu\n",
	       (unsigned long)gib, (unsigned long)pp.gfa_meta, (unsigned long)pp.ll_meta,
	       (unsigned long)pp.gfa_malloc);
	for (int rep = -1; rep < o->reps; rep++)
		for (unsigned int r = 0; r < b->nrows; r++)
			for (int k = 0; k < NR_KINDS; k++)
				peer_rep(&b->ctl, b->w, &rows[r],
					 (enum peer_kind)((k + rep + 1) % NR_KINDS), rep, &b->n);
	printf("%-6s %5s %7s %5s %9s %9s %9s %9s %9s %9s %8s %8s %8s %6s %6s %6s %6s\n", "work",
	       "order", "threads", "GiB", "gfa", "gfa_min", "zone", "zone_min", "llfree", "ll_min",
	       "gfa_cpu", "zone_cpu", "ll_cpu", "ratio", "zratio", "rmin", "zrmin");
	for (unsigned int r = 0; r < b->nrows; r++)
		print_row(&rows[r], &pp, o->reps, &b->met, &b->goals);
	for (unsigned int r = 0; r < b->nrows; r++) {
		if (rows[r].wl != WL_RAND || rows[r].order)
			continue;
		printf("# fragmentation after rand order 0, %d thread(s) (fully free 2 MiB "
		       "blocks, caches drained): gfa %lu, zone path %lu, LLFree %lu of %lu\n",
		       rows[r].threads, (unsigned long)rows[r].frag[K_CACHE],
		       (unsigned long)rows[r].frag[K_ZONE], (unsigned long)rows[r].frag[K_LLFREE],
		       (unsigned long)rows[r].frag_possible);
	}
	pool_close(&pp);
}

static int run_all(const struct bench_opts *o, void *ctx)
{
	struct peer_bench *b = ctx;
	struct bench_load load;

	b->n.repeat = o->quick ? 1u << 15 : 1u << 17;
	b->n.bulk_frames = o->quick ? 1u << 19 : 1u << 22;
	b->n.bulk_ops = o->quick ? 1u << 14 : 1u << 16;
	b->n.rand_steps = o->quick ? 1u << 16 : 1u << 18;
	b->n.xfree_ops = o->quick ? 1u << 17 : 1u << 19;
	bench_print_machine();
	printf("# %d reps after a warm-up, interleaved; pinned threads; ns per %s (repeat: per "
	       "alloc+free pair); median and min of wall time, median of CPU time\n",
	       o->reps, "operation");
	bench_print_loadavg("start");
	bench_load_begin(&load);
	workers_start(b);
	rows_make(o, b);
	for (unsigned int s = 0; s < NR_SIZES; s++)
		run_size(o, b, size_gib[s]);
	workers_stop(b);
	bench_print_load(&load, "the run");
	bench_print_loadavg("end");
	return 0;
}

/* The markdown table of every size, and the goals the rows met. */
static void report(void *ctx)
{
	const struct peer_bench *b = ctx;
	struct bench_result sum;

	printf("| workload | order | threads | pool GiB | gfa cache ns (min / median) | gfa zone "
	       "path ns | LLFree ns | cache / LLFree, median (min) | zone / LLFree | CPU ns: cache / zone / "
	       "LLFree (median) |\n|---|---|---|---|---|---|---|---|---|---|\n");
	for (unsigned int i = 0; i < nr_md_rows; i++)
		printf("%s\n", md_rows[i]);
	printf("\n");
	bench_result_init(&sum, "peer_llfree");
	bench_result_add(&sum, "goals_met", "%u", b->met);
	bench_result_add(&sum, "goals", "%u", b->goals);
	bench_result_print(&sum);
}

/* One part: --only picks the workloads, whose rows interleave within each pool size. */
static struct peer_bench peer;
static const struct bench_part peer_parts[] = {
	{ NULL, run_all, report, &peer },
};

int main(int argc, char **argv)
{
	struct bench_opts o;
	int err = bench_parse_args(
		argc, argv, &o, 3, 0, 7, 0,
		"gfa (cache and zone path) beside LLFree: repeat, bulk, rand, xfree "
		"at orders 0 and 9 on 1 and 2 threads, pools of 1, 4 and 16 GiB.\n"
		"--only repeat|bulk|rand|xfree runs one workload.");

	if (err)
		return err > 0 ? 0 : 2;
	if (o.only && strcmp(o.only, "repeat") && strcmp(o.only, "bulk") &&
	    strcmp(o.only, "rand") && strcmp(o.only, "xfree")) {
		fprintf(stderr, "%s: --only wants repeat, bulk, rand or xfree\n", argv[0]);
		return 2;
	}
	if (!PEER_LLFREE) {
		printf("# bench/peer: SKIPPED: LLFree is not built (no llfree-c-970bb3d.tar.gz in %s;"
		       " build with PEERS=<folder> to point at it)\n",
		       PEER_DIR);
		printf("RESULT peer_llfree skipped=1\n");
		return 0;
	}
	bench_parts_run(&o, peer_parts, ARRAY_SIZE(peer_parts));
	return 0;
}
