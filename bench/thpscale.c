// SPDX-License-Identifier: MIT
/*
 * bench/thpscale: mmtests' thpscale, the compaction series' benchmark (docs/decisions.md,
 * entry 20), adapted to a pool.
 *
 * Layout, rebuilt from scratch with a fixed seed for every (mode, threads) run:
 *   1. owner A (movable, registered) fills FILL_PCT of the pool with order-0 frames;
 *   2. the first half of every 2 MiB pageblock A holds is freed (the punched holes);
 *   3. owner B (movable, registered: thpscale's page-cache pages) allocates order-0
 *      frames worth B_FILL_PCT of the hole frames - the allocator puts them into the
 *      holes - then drops a random B_DROP_PCT of them (--b-drop), as reclaim would,
 *      leaving its frames and the free frames between them scattered in those holes;
 *   4. UNMOVABLE_PERMILLE of the pool is allocated as UNMOVABLE order-0 frames through
 *      gfa_alloc, so gfa's fragmentation avoidance (pageblock stealing) places them.
 * The ceiling is the number of order-9 blocks perfect compaction could form: MOVABLE
 * pageblocks without unmovable frames, minus the pageblocks the movable frames in them
 * need when packed.  N threads (1, 2, 4, 8) then make `ceiling` order-9 requests in
 * all (gfa_alloc(pool, 0, 9, GFA_MT_MOVABLE, ...): direct compaction with capture on
 * failure), each timing its own requests.
 *
 * The same runs happen with full compaction and with linear_only (the kernel before
 * the 2019 series), interleaved after one untimed warm-up run: for each rep, for each
 * N, both modes (the order alternates between reps).  Reported per run: mean/p50/p99
 * request latency, % of requests that got a block, and the compact_migrate_scanned /
 * compact_free_scanned deltas of the request phase.  Per N: the median over reps of the
 * mean latency, huge % and scans summed over reps.  RESULT: huge_pct_min is the lowest
 * full-mode huge % over N (each N's reps pooled); the scan ratios are full /
 * linear-only over all runs; latency_ratio is the geometric mean over N of full /
 * linear-only (the worst N is printed as info).  Options: --only N runs one thread
 * count; --b-drop P changes step 3.
 *
 * Moving a frame is real: the pool is backed by anonymous memory (THP-advised,
 * pre-touched once before any timing and reused by every run) and the canary owner
 * copies 4 KiB per moved frame (touch=true) and writes a canary at allocation; every run
 * ends by checking the pool invariants and every canary.  --no-touch drops the copies
 * (metadata-only moves).  --mib N sets the pool size (default 1024).
 */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <gfa/allocator.h>
#include "bench/bench_util.h"
#include "refvmm/canary_owner.h"
#include "allocator/layers.h"
#include "common/compiler.h"

#define FILL_PCT           80 /* of the pool, in whole pageblocks, owner A */
#define B_FILL_PCT         30 /* of the hole frames, owner B, before reclaim */
#define B_DROP_PCT         50 /* of owner B's frames freed again (default of --b-drop) */
#define UNMOVABLE_PERMILLE 10 /* 1% of the pool */
#define OWNER_A            1
#define OWNER_B            2
#define OWNER_UNMOV        3
#define OWNER_REQ          1000                  /* + thread index */
#define SEED               0x7468707363616c65ULL /* "thpscale" */
#define MAX_THREADS        8
#define MAX_REPS           100

static const int thread_counts[] = { 1, 2, 4, 8 };
#define NR_N (int)ARRAY_SIZE(thread_counts)

/* ---- the fragmented pool ---- */

struct frag {
	struct gfa_pool *pool;
	struct canary_owner *a, *b;
	uint64_t frames;
	uint64_t nr_unmov;      /* unmovable frames allocated */
	uint64_t ceiling;       /* order-9 blocks perfect compaction could form */
	uint64_t free_huge;     /* free order >= 9 blocks, in pageblocks, at start */
	uint64_t pb_unmovable;  /* pageblocks not MOVABLE or holding unmovable frames */
	uint64_t pb_free_other; /* pageblocks of another type holding nothing */
	uint64_t pb_movable, movable_frames, free_frames;
	int score; /* fragmentation score at start */
};

struct pb_count {
	uint32_t *movable, *other; /* allocated frames per pageblock */
};

static int count_block(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
		       uint64_t owner)
{
	struct pb_count *c = arg;
	uint64_t n = 1UL << order;

	(void)owner;
	/* a block of pageblock order or more is counted pageblock by pageblock */
	for (uint64_t done = 0; done < n; done += GFA_PAGEBLOCK_FRAMES) {
		uint64_t pb = (pfn + done) >> GFA_PAGEBLOCK_ORDER;
		uint64_t k = n - done < GFA_PAGEBLOCK_FRAMES ? n - done : GFA_PAGEBLOCK_FRAMES;

		if (mt == GFA_MT_MOVABLE)
			c->movable[pb] += (uint32_t)k;
		else
			c->other[pb] += (uint32_t)k;
	}
	return 0;
}

/*
 * Perfect compaction packs the movable frames of MOVABLE pageblocks (those holding no
 * unmovable frame) densely; every other such pageblock becomes a free order-9 block.
 * A pageblock of another type that holds nothing at all counts too: a MOVABLE order-9
 * request takes it by fallback.
 */
static void compute_ceiling(struct frag *f)
{
	uint64_t nr_pb = f->frames >> GFA_PAGEBLOCK_ORDER;
	struct pb_count c = { calloc(nr_pb, 4), calloc(nr_pb, 4) };
	struct gfa_zone_stat st;

	if (!c.movable || !c.other)
		bench_die("out of memory");
	if (gfa_pool_for_each_allocated(f->pool, count_block, &c))
		bench_die("gfa_pool_for_each_allocated failed");
	f->pb_movable = f->pb_unmovable = f->pb_free_other = f->movable_frames = 0;
	for (uint64_t pb = 0; pb < nr_pb; pb++) {
		struct gfa_frame_info fi;

		if (gfa_frame_lookup(f->pool, pb << GFA_PAGEBLOCK_ORDER, &fi))
			bench_die("gfa_frame_lookup failed");
		if (fi.block_mt != GFA_MT_MOVABLE && !c.other[pb] && !c.movable[pb]) {
			f->pb_free_other++; /* wholly free, of another type */
			continue;
		}
		if (fi.block_mt != GFA_MT_MOVABLE || c.other[pb]) {
			f->pb_unmovable++;
			continue;
		}
		f->pb_movable++;
		f->movable_frames += c.movable[pb];
	}
	f->ceiling = f->pb_movable + f->pb_free_other -
		     (f->movable_frames + GFA_PAGEBLOCK_FRAMES - 1) / GFA_PAGEBLOCK_FRAMES;
	if (gfa_zone_stat(f->pool, 0, &st))
		bench_die("gfa_zone_stat failed");
	f->free_frames = st.nr_free;
	f->free_huge = 0;
	for (int o = GFA_PAGEBLOCK_ORDER; o <= GFA_MAX_ORDER; o++)
		for (int mt = 0; mt < GFA_MT_PCPTYPES; mt++)
			f->free_huge += st.nr_free_blocks[o][mt] << (o - GFA_PAGEBLOCK_ORDER);
	f->score = gfa_zone_fragmentation_score(f->pool, 0);
	free(c.movable);
	free(c.other);
}

static void build(struct frag *f, uint64_t frames, void *mem, bool touch, bool linear,
		  unsigned int b_drop)
{
	struct gfa_pool_config cfg;
	uint64_t fill, holes = 0, nb, seed = SEED;
	uint32_t *idx;

	memset(f, 0, sizeof(*f));
	f->frames = frames;
	gfa_pool_config_init(&cfg, frames);
	f->pool = gfa_pool_create(&cfg);
	if (!f->pool)
		bench_die("gfa_pool_create: %s", strerror(errno));
	if (mem && zone_set_backing(f->pool, 0, mem, -1))
		bench_die("zone_set_backing failed");
	if (gfa_compact_configure(f->pool, &(struct gfa_compact_config){ .linear_only = linear }))
		bench_die("gfa_compact_configure failed");

	/* 1. owner A fills FILL_PCT of the pool (whole pageblocks' worth) */
	fill = frames * FILL_PCT / 100 / GFA_PAGEBLOCK_FRAMES * GFA_PAGEBLOCK_FRAMES;
	f->a = co_create(f->pool, OWNER_A, fill, touch);
	if (!f->a)
		bench_die("co_create A failed");
	for (uint64_t i = 0; i < fill; i++)
		if (co_alloc(f->a, NULL, 0, i, 0))
			bench_die("filling: allocation %lu of %lu failed", i, fill);
	/* 2. punch holes: the first half of every 2 MiB block */
	for (uint64_t i = 0; i < fill; i++) {
		if ((f->a->pfn[i] & (GFA_PAGEBLOCK_FRAMES - 1)) >= GFA_PAGEBLOCK_FRAMES / 2)
			continue;
		if (co_free(f->a, NULL, i))
			bench_die("punching holes: free failed");
		holes++;
	}
	/* 3. owner B's frames go into the holes; then a random b_drop% of them is dropped */
	nb = holes * B_FILL_PCT / 100;
	f->b = co_create(f->pool, OWNER_B, nb, touch);
	if (!f->b)
		bench_die("co_create B failed");
	for (uint64_t i = 0; i < nb; i++)
		if (co_alloc(f->b, NULL, 0, i, 0))
			bench_die("owner B: allocation failed");
	idx = malloc((nb + 1) * sizeof(*idx));
	if (!idx)
		bench_die("out of memory");
	for (uint64_t i = 0; i < nb; i++)
		idx[i] = (uint32_t)i;
	bench_shuffle(idx, nb, &seed);
	for (uint64_t i = 0; i < nb * b_drop / 100; i++)
		if (co_free(f->b, NULL, idx[i]))
			bench_die("owner B: free failed");
	free(idx);
	/* 4. unmovable frames through the normal path: fallback decides where they land */
	f->nr_unmov = frames * UNMOVABLE_PERMILLE / 1000;
	for (uint64_t i = 0; i < f->nr_unmov; i++) {
		int64_t pfn = gfa_alloc(f->pool, 0, 0, GFA_MT_UNMOVABLE, OWNER_UNMOV, 0);

		if (pfn < 0)
			bench_die("unmovable allocation failed: %ld", (long)pfn);
	}
	compute_ceiling(f);
}

static void check_pool(struct frag *f, const char *when)
{
	char msg[256];
	uint64_t bad = 0;

	if (gfa_pool_check(f->pool, msg, sizeof(msg)))
		bench_die("pool invariant broken %s: %s", when, msg);
	if (co_verify_all(f->a, &bad) || co_verify_all(f->b, &bad))
		bench_die("page %lu lost its content or mapping %s", (unsigned long)bad, when);
}

static void teardown(struct frag *f)
{
	co_destroy(f->a);
	co_destroy(f->b);
	gfa_pool_destroy(f->pool);
}

/* ---- the requests ---- */

struct req_thread {
	pthread_t tid;
	struct gfa_pool *pool;
	unsigned int idx;
	uint64_t nr;   /* this thread's share of the requests */
	uint64_t *lat; /* ns per request */
	uint64_t ok;
	uint64_t t_start, t_end; /* ns: this thread's requests, first to last */
	uint64_t cpu_ns;         /* CPU time the thread used over them */
	pthread_barrier_t *start;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *req_main(void *arg)
{
	struct req_thread *t = arg;

	/* one CPU each (mod CPUs): without it short runs went one thread after another */
	bench_pin_self((int)t->idx);
	pthread_barrier_wait(t->start);
	t->cpu_ns = thread_cpu_ns();
	t->t_start = bench_now_ns();
	for (uint64_t i = 0; i < t->nr; i++) {
		uint64_t t0 = bench_now_ns();
		int64_t pfn = gfa_alloc(t->pool, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE,
					OWNER_REQ + t->idx, 0);

		t->lat[i] = bench_now_ns() - t0;
		if (pfn >= 0)
			t->ok++;
		else if (pfn != GFA_ENOMEM)
			bench_die("order-9 allocation: unexpected error %ld", (long)pfn);
	}
	t->t_end = bench_now_ns();
	t->cpu_ns = thread_cpu_ns() - t->cpu_ns;
	return NULL;
}

struct run {
	uint64_t requests, ok;
	double mean_us, p50_us, p99_us, max_us;
	double wall_s; /* first thread's start to last thread's end */
	double conc;   /* CPUs the threads used at once, on average over wall_s */
	uint64_t migrate_scanned, free_scanned;
	uint64_t migrate_blocks; /* compact_migrate_blocks: one per block visited */
	uint64_t stall, fail, capture, migrated, migrate_fail;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void run_requests(struct frag *f, int nthreads, struct run *r)
{
	struct req_thread t[MAX_THREADS];
	pthread_barrier_t start;
	struct gfa_vmstat v0, v1;
	uint64_t *all, n = 0, sum = 0, first = UINT64_MAX, last = 0, busy = 0;

	memset(r, 0, sizeof(*r));
	r->requests = f->ceiling;
	all = malloc((f->ceiling + 1) * sizeof(*all));
	if (!all)
		bench_die("out of memory");
	pthread_barrier_init(&start, NULL, (unsigned int)nthreads + 1);
	for (int i = 0; i < nthreads; i++) {
		t[i] = (struct req_thread){ .pool = f->pool,
					    .idx = (unsigned int)i,
					    .start = &start };
		t[i].nr = f->ceiling / (uint64_t)nthreads +
			  ((uint64_t)i < f->ceiling % (uint64_t)nthreads);
		t[i].lat = all + n;
		n += t[i].nr;
		if (pthread_create(&t[i].tid, NULL, req_main, &t[i]))
			bench_die("pthread_create failed");
	}
	gfa_pool_vmstat(f->pool, &v0);
	pthread_barrier_wait(&start);
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i].tid, NULL);
		r->ok += t[i].ok;
		first = t[i].t_start < first ? t[i].t_start : first;
		last = t[i].t_end > last ? t[i].t_end : last;
		busy += t[i].cpu_ns; /* CPU time: asleep or descheduled is not running */
	}
	r->wall_s = (double)(last - first) / 1e9;
	r->conc = last > first ? (double)busy / (double)(last - first) : 1;
	gfa_pool_vmstat(f->pool, &v1);
	pthread_barrier_destroy(&start);
	for (uint64_t i = 0; i < n; i++)
		sum += all[i];
	qsort(all, n, sizeof(*all), cmp_u64);
	r->mean_us = n ? (double)sum / (double)n / 1e3 : 0;
	r->p50_us = n ? (double)all[n / 2] / 1e3 : 0;
	r->p99_us = n ? (double)all[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1e3 : 0;
	r->max_us = n ? (double)all[n - 1] / 1e3 : 0;
	r->migrate_scanned = v1.compact_migrate_scanned - v0.compact_migrate_scanned;
	r->free_scanned = v1.compact_free_scanned - v0.compact_free_scanned;
	r->migrate_blocks = v1.compact_migrate_blocks - v0.compact_migrate_blocks;
	r->stall = v1.compact_stall - v0.compact_stall;
	r->fail = v1.compact_fail - v0.compact_fail;
	r->capture = v1.compact_capture - v0.compact_capture;
	r->migrated = v1.pgmigrate_success - v0.pgmigrate_success;
	r->migrate_fail = v1.pgmigrate_fail - v0.pgmigrate_fail;
	free(all);
}

/* ---- driver ---- */

/* Our own options, parsed with the common ones (bench_parse_args_ext). */
struct own_opts {
	const char *prog;
	bool no_touch;
	long mib;
	long b_drop;
};

enum { OPT_NO_TOUCH = 1, OPT_MIB, OPT_B_DROP };

static const struct option own_longopts[] = {
	{ "no-touch", no_argument, NULL, OPT_NO_TOUCH },
	{ "mib", required_argument, NULL, OPT_MIB },
	{ "b-drop", required_argument, NULL, OPT_B_DROP },
	{ 0 },
};

/* A whole decimal number in [min, max] (a multiple of `mult`), or -1. */
static long own_number(const char *arg, long min, long max, long mult)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	return errno || end == arg || *end || v < min || v > max || v % mult ? -1 : v;
}

static int parse_own_opt(int val, const char *arg, void *ctx)
{
	struct own_opts *o = ctx;

	if (val == OPT_NO_TOUCH) {
		o->no_touch = true;
	} else if (val == OPT_MIB) {
		o->mib = own_number(arg, 16, 65536, 4);
		if (o->mib < 0) {
			fprintf(stderr, "%s: --mib wants a multiple of 4 in 16..65536\n", o->prog);
			return -EINVAL;
		}
	} else if (val == OPT_B_DROP) {
		o->b_drop = own_number(arg, 0, 100, 1);
		if (o->b_drop < 0) {
			fprintf(stderr, "%s: --b-drop wants 0..100\n", o->prog);
			return -EINVAL;
		}
	}
	return 0;
}

static void *back_memory(uint64_t frames)
{
	size_t len = frames << GFA_FRAME_SHIFT;
	void *mem = aligned_alloc(1UL << 21, len);

	if (!mem)
		bench_die("cannot allocate %zu MiB of backing memory", len >> 20);
	madvise(mem, len, MADV_HUGEPAGE);
	/* first touch is slow on this host: pay it once, before any timing */
	memset(mem, 0x5a, len);
	return mem;
}

static const char *mode_name(int m)
{
	return m ? "full" : "linear";
}

struct params {
	uint64_t frames;
	void *mem;
	bool touch;
	unsigned int b_drop;
	uint64_t ceiling;
};

/* One run: a fresh fragmented pool, the requests, the checks. */
static void one_run(const struct params *p, int nthreads, bool full, struct run *r)
{
	struct frag f;

	build(&f, p->frames, p->mem, p->touch, !full, p->b_drop);
	if (f.ceiling != p->ceiling)
		bench_die("layout not reproducible: ceiling %lu vs %lu", (unsigned long)f.ceiling,
			  (unsigned long)p->ceiling);
	run_requests(&f, nthreads, r);
	check_pool(&f, "after the requests");
	teardown(&f);
}

static void print_layout(struct params *p)
{
	struct frag f;

	build(&f, p->frames, p->mem, p->touch, false, p->b_drop);
	check_pool(&f, "after building");
	p->ceiling = f.ceiling;
	if (!p->ceiling)
		bench_die("the layout leaves no order-9 block to form: pool too small");
	printf("# layout: free %lu frames (%.1f%%), fragmentation score %d, free order-9 "
	       "blocks %lu; pageblocks: %lu movable-only (%lu movable frames in them), "
	       "%lu of other types or holding unmovable frames (%lu unmovable frames), "
	       "%lu of other types holding nothing\n",
	       (unsigned long)f.free_frames, 100.0 * (double)f.free_frames / (double)p->frames,
	       f.score, (unsigned long)f.free_huge, (unsigned long)f.pb_movable,
	       (unsigned long)f.movable_frames, (unsigned long)f.pb_unmovable,
	       (unsigned long)f.nr_unmov, (unsigned long)f.pb_free_other);
	printf("# ceiling: %lu order-9 blocks with perfect compaction (%lu free now, %lu need "
	       "compaction); each run makes %lu requests in all, split over its threads\n",
	       (unsigned long)p->ceiling, (unsigned long)f.free_huge,
	       (unsigned long)(p->ceiling > f.free_huge ? p->ceiling - f.free_huge : 0),
	       (unsigned long)p->ceiling);
	if (p->ceiling < 100)
		printf("# p99_us is the slowest request of a run (max_us): fewer than 100 per run\n");
	teardown(&f);
}

static void print_runs(struct run runs[][NR_N][2], int reps, const bool *want)
{
	printf("\n%-6s %2s %4s %9s %9s %9s %10s %7s %10s %10s %6s %6s %6s %8s %6s %6s %5s\n",
	       "mode", "N", "rep", "mean_us", "p50_us", "p99_us", "max_us", "huge%", "migr_scan",
	       "free_scan", "stall", "capt", "cfail", "moved", "mfail", "wall_s", "conc");
	for (int rep = 0; rep < reps; rep++)
		for (int ni = 0; ni < NR_N; ni++)
			for (int m = 0; m < 2 && want[ni]; m++) {
				struct run *r = &runs[rep][ni][m];

				printf("%-6s %2d %4d %9.1f %9.1f %9.1f %10.1f %7.2f %10lu %10lu "
				       "%6lu %6lu %6lu %8lu %6lu %6.3f %5.2f\n",
				       mode_name(m), thread_counts[ni], rep, r->mean_us, r->p50_us,
				       r->p99_us, r->max_us,
				       100.0 * (double)r->ok / (double)r->requests,
				       (unsigned long)r->migrate_scanned,
				       (unsigned long)r->free_scanned, (unsigned long)r->stall,
				       (unsigned long)r->capture, (unsigned long)r->fail,
				       (unsigned long)r->migrated, (unsigned long)r->migrate_fail,
				       r->wall_s, r->conc);
			}
}

/* The runs, which N they cover, and what the reports sum up over them. */
struct thpscale {
	struct params p;
	struct run runs[MAX_REPS][NR_N][2];
	bool want[NR_N];
	int nr_want, reps;
	double huge_min, huge_min_lin, huge_worst_run;
	double lat_ratio_max, lat_log_sum, conc2, mr1, fr1;
	uint64_t ms[2], fs[2], mb[2];
};

/* Every rep, every N, both modes (the order alternates between reps); then the runs' table. */
static int run_all(const struct bench_opts *o, void *ctx)
{
	struct thpscale *t = ctx;
	struct bench_load load;

	bench_load_begin(&load);
	for (int rep = 0; rep < o->reps; rep++)
		for (int ni = 0; ni < NR_N; ni++)
			for (int k = 0; k < 2 && t->want[ni]; k++) {
				int m = (k + rep) & 1; /* alternate which mode goes first */

				one_run(&t->p, thread_counts[ni], m, &t->runs[rep][ni][m]);
			}
	bench_print_load(&load, "the runs");
	print_runs(t->runs, o->reps, t->want);
	t->reps = o->reps;
	return 0;
}

/* N's row of the summary, from its reps of both modes; the totals over N go into t. */
static void summarise_n(struct thpscale *t, int ni)
{
	double lat[2], huge[2], v[MAX_REPS], conc = 1e9;
	uint64_t sms[2] = { 0 }, sfs[2] = { 0 };

	for (int m = 0; m < 2; m++) {
		uint64_t ok = 0, req = 0;

		for (int rep = 0; rep < t->reps; rep++) {
			struct run *r = &t->runs[rep][ni][m];
			double pct = 100.0 * (double)r->ok / (double)r->requests;

			v[rep] = r->mean_us;
			conc = r->conc < conc ? r->conc : conc;
			ok += r->ok;
			req += r->requests;
			sms[m] += r->migrate_scanned;
			sfs[m] += r->free_scanned;
			t->mb[m] += r->migrate_blocks;
			if (m && pct < t->huge_worst_run)
				t->huge_worst_run = pct;
		}
		lat[m] = bench_stat_of(v, t->reps).median;
		huge[m] = 100.0 * (double)ok / (double)req;
		t->ms[m] += sms[m];
		t->fs[m] += sfs[m];
	}
	if (huge[1] < t->huge_min)
		t->huge_min = huge[1];
	if (huge[0] < t->huge_min_lin)
		t->huge_min_lin = huge[0];
	if (lat[1] / lat[0] > t->lat_ratio_max)
		t->lat_ratio_max = lat[1] / lat[0];
	t->lat_log_sum += log2(lat[1] / lat[0]);
	printf("%-3d %11.1f %11.1f %7.3f %9.2f %10.2f %11lu %11lu %11lu %11lu %9.2f\n",
	       thread_counts[ni], lat[0], lat[1], lat[1] / lat[0], huge[0], huge[1],
	       (unsigned long)sms[0], (unsigned long)sms[1], (unsigned long)sfs[0],
	       (unsigned long)sfs[1], conc);
	if (thread_counts[ni] == 2)
		t->conc2 = conc;
	if (thread_counts[ni] == 1 && sms[0] && sfs[0]) {
		t->mr1 = (double)sms[1] / (double)sms[0];
		t->fr1 = (double)sfs[1] / (double)sfs[0];
	}
}

static void report_table(struct thpscale *t)
{
	printf("%-3s %11s %11s %7s %9s %10s %11s %11s %11s %11s %9s\n", "N", "lat_lin_us",
	       "lat_full_us", "ratio", "huge_lin%", "huge_full%", "migr_lin", "migr_full",
	       "free_lin", "free_full", "conc_min");
	for (int ni = 0; ni < NR_N; ni++)
		if (t->want[ni])
			summarise_n(t, ni);
	printf("%-3s %11s %11s %7s %9s %10s %11lu %11lu %11lu %11lu\n\n", "all", "", "", "", "", "",
	       (unsigned long)t->ms[0], (unsigned long)t->ms[1], (unsigned long)t->fs[0],
	       (unsigned long)t->fs[1]);
}

static double ratio_or_0(uint64_t full, uint64_t linear)
{
	return linear ? (double)full / (double)linear : 0;
}

static void report_goals(const struct thpscale *t, double mr, double mbr, double fr, double lr)
{
	bench_goal("thpscale", "huge_pct_min", t->huge_min, ">=", 98,
		   "full mode: % of order-9 requests served, lowest N (reps pooled)");
	bench_goal("thpscale", "huge_pct_worst_run", t->huge_worst_run, "info", 0,
		   "full mode, the single worst run");
	bench_goal("thpscale", "huge_pct_min_linear", t->huge_min_lin, "info", 0,
		   "linear-only mode, same measure");
	bench_goal("thpscale", "migrate_scanned_ratio", mr, "<=", 0.26,
		   "full / linear-only compact_migrate_scanned, all runs");
	bench_goal("thpscale", "migrate_blocks_ratio", mbr, "info", 0,
		   "the same counting one per block visited, as 4.20 and the series' own figures "
		   "did (free and huge blocks weigh 1, not their frames): on that counting the "
		   "26% goal is not met");
	bench_goal("thpscale", "free_scanned_ratio", fr, "<=", 0.01,
		   "full / linear-only compact_free_scanned, all runs");
	/* with more threads, linear-only wastes more the more they really overlap: the
	 * pooled ratios depend on how busy the host is; N=1 does not (same every rep) */
	if (t->mr1 >= 0) {
		bench_goal("thpscale", "migrate_scanned_ratio_n1", t->mr1, "info", 0,
			   "the same at N=1 only: no overlap, the same every rep and host load");
		bench_goal("thpscale", "free_scanned_ratio_n1", t->fr1, "info", 0,
			   "the same at N=1 only");
	}
	bench_goal(
		"thpscale", "latency_ratio", lr, "<=", 1.0,
		"full / linear-only mean order-9 latency, geometric mean over N (goal: below 1)");
	bench_goal("thpscale", "latency_ratio_worst_n", t->lat_ratio_max, "info", 0,
		   "the same at the worst N");
	if (t->conc2 > 0)
		bench_goal(
			"thpscale", "concurrency_n2_min", t->conc2, "info", 0,
			"CPUs the request threads used at once in the N=2 runs (their CPU "
			"time / wall time, worst run; 1 = one after the other, as on a busy host)");
}

static void report(void *ctx)
{
	struct thpscale *t = ctx;
	struct bench_result res;
	double mr, mbr, fr, lr;

	report_table(t);
	mr = ratio_or_0(t->ms[1], t->ms[0]);
	mbr = ratio_or_0(t->mb[1], t->mb[0]);
	fr = ratio_or_0(t->fs[1], t->fs[0]);
	lr = exp2(t->lat_log_sum / t->nr_want);
	report_goals(t, mr, mbr, fr, lr);
	bench_result_init(&res, "thpscale");
	bench_result_add(&res, "huge_pct_min", "%.2f", t->huge_min);
	bench_result_add(&res, "migrate_scanned_ratio", "%.4f", mr);
	bench_result_add(&res, "free_scanned_ratio", "%.4f", fr);
	bench_result_add(&res, "migrate_blocks_ratio", "%.4f", mbr);
	bench_result_add(&res, "latency_ratio", "%.3f", lr);
	bench_result_add(&res, "latency_ratio_worst_n", "%.3f", t->lat_ratio_max);
	bench_result_add(&res, "huge_pct_worst_run", "%.2f", t->huge_worst_run);
	if (t->mr1 >= 0) {
		bench_result_add(&res, "migrate_scanned_ratio_n1", "%.4f", t->mr1);
		bench_result_add(&res, "free_scanned_ratio_n1", "%.4f", t->fr1);
	}
	if (t->conc2 > 0)
		bench_result_add(&res, "concurrency_n2_min", "%.2f", t->conc2);
	bench_result_print(&res);
}

/* --only N: the thread counts that run; false after saying so when none does. */
static bool pick_threads(const struct bench_opts *o, const char *prog, struct thpscale *t)
{
	for (int ni = 0; ni < NR_N; ni++) {
		t->want[ni] = !o->only || atoi(o->only) == thread_counts[ni];
		t->nr_want += t->want[ni];
	}
	if (!t->nr_want)
		fprintf(stderr, "%s: --only wants a thread count: 1, 2, 4 or 8\n", prog);
	return t->nr_want;
}

static void print_params(const struct params *p, int reps)
{
	printf("# thpscale: pool %lu MiB (%lu frames); A fills %d%%, then the first half of "
	       "every pageblock is freed; B takes %d%% of the holes and drops %u%% of that; "
	       "%d.%d%% unmovable; moves %s; %d rep(s); seed %#llx\n",
	       (unsigned long)(p->frames >> 8), (unsigned long)p->frames, FILL_PCT, B_FILL_PCT,
	       p->b_drop, UNMOVABLE_PERMILLE / 10, UNMOVABLE_PERMILLE % 10,
	       p->touch ? "copy 4 KiB per frame (touch=true)" : "metadata only (touch=false)", reps,
	       (unsigned long long)SEED);
	if (bench_cores() < MAX_THREADS)
		printf("# %ld cores: runs with more threads than that oversubscribe them\n",
		       bench_cores());
}

/* --only N picks thread counts, not parts: the one part always runs. */
static struct thpscale thp = {
	.huge_min = 100,
	.huge_min_lin = 100,
	.huge_worst_run = 100,
	.mr1 = -1,
	.fr1 = -1,
};
static const struct bench_part thpscale_parts[] = {
	{ NULL, run_all, report, &thp },
};

int main(int argc, char **argv)
{
	struct own_opts own = { argv[0], false, 0, B_DROP_PCT };
	const struct bench_extra_opts extra = {
		own_longopts,
		" [--no-touch] [--mib N] [--b-drop P]",
		parse_own_opt,
		&own,
	};
	struct bench_opts opts;
	struct run warm;
	int err;

	err = bench_parse_args_ext(argc, argv, &opts, 9, 0, 15, 0,
				   "thpscale: order-9 requests on a fragmented pool, full vs "
				   "linear-only compaction.\n"
				   "  --no-touch  metadata-only moves (no frame copies)\n"
				   "  --mib N     pool size in MiB (default 1024)\n"
				   "  --b-drop P  % of owner B's frames freed again (default 50)\n"
				   "  --only N    only the runs with N threads (1, 2, 4, 8)",
				   &extra);
	if (err)
		return err > 0 ? 0 : 2;
	if (opts.reps > MAX_REPS)
		opts.reps = MAX_REPS;
	if (!pick_threads(&opts, argv[0], &thp))
		return 2;
	/* --quick: fewer reps, same pool: smaller pools left each thread a few requests,
	 * and N threads ran one after the other */
	thp.p.frames = (uint64_t)(own.mib ? own.mib : 1024) << (20 - GFA_FRAME_SHIFT);
	thp.p.touch = !own.no_touch;
	thp.p.b_drop = (unsigned int)own.b_drop;
	thp.p.mem = NULL;

	bench_print_machine();
	print_params(&thp.p, opts.reps);
	if (thp.p.touch)
		thp.p.mem = back_memory(thp.p.frames);
	print_layout(&thp.p);
	one_run(&thp.p, 1, true, &warm); /* warm-up, not reported */
	bench_parts_run(&opts, thpscale_parts, ARRAY_SIZE(thpscale_parts));
	free(thp.p.mem);
	return 0;
}
