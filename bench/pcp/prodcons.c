// SPDX-License-Identifier: MIT
/*
 * bench/pcp, part c: a producer thread allocates order 1-3 blocks through its cache, a
 * consumer frees them through its own; throughput and hot reuse under each free_high
 * threshold.
 */
#define _GNU_SOURCE /* sched_setaffinity: workers are pinned (bench_pin_self) */
#include "bench/pcp/pcp.h"

/*
 * Blocks in flight between A and B, as a socket buffer's worth in netperf on localhost.
 * A is faster than B, so it runs the ring full: with 256 the reuse counts measured
 * the ring (capped near blocks / 256 for every configuration), not the allocator.
 */
#define RING_SIZE      32
#define PC_MAX_PAIRS   2
#define PC_MIXED_EVERY 8 /* mixed mode: B allocates once per this many frees */

struct ring {
	_Alignas(64) _Atomic uint64_t head; /* written by the producer */
	_Alignas(64) _Atomic uint64_t tail; /* written by the consumer */
	_Alignas(64) uint64_t slot[RING_SIZE];
};

enum pc_cfg { PC_OLD, PC_NEW, PC_NOHIGH, NR_PC_CFGS };
static const char *const pc_cfg_name[NR_PC_CFGS] = { "old", "new", "nohigh" };
static const char *const pc_cfg_what[NR_PC_CFGS] = {
	"free_high at batch (6ccdcb6d3a74..6.14)",
	"free_high at batch + high_min/2 (6.15)",
	"high-order caching off (reference)",
};

/*
 * pure:  B only frees (the setup).  B's free_count then saturates at its cap
 *        and both thresholds fire on every high-order free after the first few.
 * mixed: B also allocates an order-1 block for itself (and frees it) once every
 *        PC_MIXED_EVERY frees, as a receiving CPU in iperf3 allocates too; each
 *        allocation halves free_count, so the threshold decides how often B flushes.
 */
enum pc_mode { PC_PURE, PC_MIXED, NR_PC_MODES };
static const char *const pc_mode_name[NR_PC_MODES] = { "pure", "mixed" };

struct pc_pair {
	struct ring ring;
	struct gfa_pcp *pa, *pb;
	uint64_t owner, rng, n;
	enum pc_mode mode;
	uint32_t *counts; /* allocations per pfn, written by A only */
	pthread_barrier_t *start;
	int idx, err_a, err_b;
	pthread_t ta, tb;
	uint64_t depth_sum;            /* blocks in the ring, summed over A's pushes */
	uint64_t t_start[2], t_end[2]; /* ns, A and B */
};

static void *pc_producer(void *arg)
{
	struct pc_pair *p = arg;
	uint64_t head = 0, tail = 0;

	/* A and B on different CPUs: on one CPU they take turns filling and emptying the
	 * whole ring, a one-CPU batch job, not the cross-vCPU case */
	bench_pin_self(2 * p->idx);
	pthread_barrier_wait(p->start);
	p->t_start[0] = bench_now_ns();
	for (uint64_t i = 0; i < p->n; i++) {
		unsigned int order = 1 + (unsigned int)(bench_rand(&p->rng) % 3), spins = 0;
		int64_t pfn = gfa_pcp_alloc(p->pa, order, GFA_MT_UNMOVABLE, p->owner, 0);

		if (pfn < 0) {
			p->err_a = (int)pfn;
			pfn = -1; /* tell the consumer to stop */
		} else {
			p->counts[pfn]++;
		}
		while (head - tail >= RING_SIZE) {
			tail = atomic_load_explicit(&p->ring.tail, memory_order_acquire);
			if (head - tail >= RING_SIZE)
				backoff(&spins);
		}
		p->depth_sum += head - tail;
		p->ring.slot[head % RING_SIZE] = pfn < 0 ? UINT64_MAX : (uint64_t)pfn << 4 | order;
		atomic_store_explicit(&p->ring.head, ++head, memory_order_release);
		if (pfn < 0)
			break;
	}
	p->t_end[0] = bench_now_ns();
	return NULL;
}

/* B's own work in mixed mode: an order-1 block allocated and freed on its own cache. */
static int pc_consumer_own(struct pc_pair *p)
{
	int64_t pfn = gfa_pcp_alloc(p->pb, 1, GFA_MT_UNMOVABLE, p->owner + 0x100, 0);

	if (pfn < 0)
		return (int)pfn;
	return gfa_pcp_free(p->pb, (uint64_t)pfn, 1, p->owner + 0x100);
}

static void *pc_consumer(void *arg)
{
	struct pc_pair *p = arg;
	uint64_t tail = 0, head = 0;

	bench_pin_self(2 * p->idx + 1);
	pthread_barrier_wait(p->start);
	p->t_start[1] = bench_now_ns();
	for (uint64_t i = 0; i < p->n; i++) {
		unsigned int spins = 0;
		uint64_t e;
		int err;

		while (tail == head) {
			head = atomic_load_explicit(&p->ring.head, memory_order_acquire);
			if (tail == head)
				backoff(&spins);
		}
		e = p->ring.slot[tail % RING_SIZE];
		atomic_store_explicit(&p->ring.tail, ++tail, memory_order_release);
		if (e == UINT64_MAX)
			break;
		err = gfa_pcp_free(p->pb, e >> 4, (unsigned int)(e & 15), p->owner);
		if (!err && p->mode == PC_MIXED && i % PC_MIXED_EVERY == PC_MIXED_EVERY - 1)
			err = pc_consumer_own(p);
		if (err && !p->err_b)
			p->err_b = err; /* keep draining so the producer never waits forever */
	}
	p->t_end[1] = bench_now_ns();
	return NULL;
}

struct pc_sample {
	double mops;        /* blocks moved A -> B per second, all pairs */
	uint64_t top[5];    /* allocation counts of the 5 most reused pfns */
	uint64_t distinct;  /* pfns allocated at least once */
	uint64_t free_high; /* free_high flushes */
	uint64_t bulkfree;  /* zone-lock sections of bulk frees */
	double depth;       /* mean blocks in the ring when A pushes */
};

static int cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/* Allocation counts of the 5 most reused pfns, and how many pfns were used at all. */
static void pc_top5(struct pc_pair *pairs, int npairs, struct pc_sample *out)
{
	uint64_t top[5] = { 0 };

	out->distinct = 0;
	for (uint64_t f = 0; f < POOL_FRAMES; f++) {
		uint64_t n = 0;

		for (int i = 0; i < npairs; i++)
			n += pairs[i].counts[f];
		if (!n)
			continue;
		out->distinct++;
		if (n > top[4]) {
			top[4] = n;
			qsort(top, 5, sizeof(top[0]), cmp_u64_desc);
		}
	}
	memcpy(out->top, top, sizeof(top));
}

static void pc_once(enum pc_cfg cfg, enum pc_mode mode, int npairs, uint64_t n, uint64_t seed,
		    struct pc_sample *out)
{
	struct gfa_pool *pool = make_pool(POOL_FRAMES, cfg == PC_NOHIGH, cfg == PC_OLD);
	static struct pc_pair pairs[PC_MAX_PAIRS];
	pthread_barrier_t start;
	uint64_t first = UINT64_MAX, last = 0, depth = 0;

	pthread_barrier_init(&start, NULL, (unsigned int)(2 * npairs + 1));
	for (int i = 0; i < npairs; i++) {
		struct pc_pair *p = &pairs[i];

		memset(p, 0, sizeof(*p));
		p->pa = make_pcp(pool);
		p->pb = make_pcp(pool);
		p->owner = 0xc0 + (uint64_t)i;
		p->idx = i;
		p->rng = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		p->n = n;
		p->mode = mode;
		p->start = &start;
		p->counts = calloc(POOL_FRAMES, sizeof(uint32_t));
		if (!p->counts)
			bench_die("out of memory");
		if (pthread_create(&p->ta, NULL, pc_producer, p) ||
		    pthread_create(&p->tb, NULL, pc_consumer, p))
			bench_die("pthread_create failed");
	}
	pthread_barrier_wait(&start);
	for (int i = 0; i < npairs; i++) {
		pthread_join(pairs[i].ta, NULL);
		pthread_join(pairs[i].tb, NULL);
		for (int k = 0; k < 2; k++) {
			first = pairs[i].t_start[k] < first ? pairs[i].t_start[k] : first;
			last = pairs[i].t_end[k] > last ? pairs[i].t_end[k] : last;
		}
		depth += pairs[i].depth_sum;
	}
	/* timed by the threads themselves: the main thread may leave the barrier late */
	out->mops = (double)n * npairs / ((double)(last - first) / 1e9) / 1e6;
	out->depth = (double)depth / (double)(n * (uint64_t)npairs);
	out->free_high = VM(pool, pcp_free_high);
	out->bulkfree = VM(pool, pcp_bulkfree);
	for (int i = 0; i < npairs; i++)
		if (pairs[i].err_a || pairs[i].err_b)
			bench_die("producer/consumer %s pair %d: %s", pc_cfg_name[cfg], i,
				  strerror(-(pairs[i].err_a ? pairs[i].err_a : pairs[i].err_b)));
	pc_top5(pairs, npairs, out);
	for (int i = 0; i < npairs; i++) {
		free(pairs[i].counts);
		gfa_pcp_destroy(pairs[i].pa);
		gfa_pcp_destroy(pairs[i].pb);
	}
	check_pool(pool, "after part c");
	gfa_pool_destroy(pool);
	pthread_barrier_destroy(&start);
}

/* Medians over reps, per [mode][config][pairs]. */
struct pc_results {
	struct bench_stat mops[NR_PC_MODES][NR_PC_CFGS][PC_MAX_PAIRS + 1];
	uint64_t top[NR_PC_MODES][NR_PC_CFGS][PC_MAX_PAIRS + 1][5]; /* median per rank */
	uint64_t n;
};

static double top5_mean(const uint64_t *t)
{
	return (double)(t[0] + t[1] + t[2] + t[3] + t[4]) / 5.0;
}

static uint64_t median_u64(double *d, int n)
{
	return (uint64_t)bench_stat_of(d, n).median;
}

static int bench_prodcons(const struct bench_opts *o, void *ctx)
{
	struct pc_results *res = ctx;
	static struct pc_sample s[NR_PC_MODES][NR_PC_CFGS][PC_MAX_PAIRS + 1][MAX_REPS];
	int reps = o->reps_set ? o->reps : o->quick ? 3 : 7;
	uint64_t n = o->quick ? 200000 : 800000; /* quick: a run lasts >= 20 ms */
	double d[MAX_REPS];
	struct bench_load load;

	bench_load_begin(&load);
	res->n = n;
	printf("\n## c. producer/consumer: A allocates order 1-3 (uniform) through its cache, "
	       "B frees through its own; ring of %d; %lu blocks per pair per run\n",
	       RING_SIZE, (unsigned long)n);
	printf("# pure: B only frees (the issue's setup); mixed: B also allocates+frees an "
	       "order-1 block of its own every %d frees (halves its free_count, as a "
	       "receiving CPU does)\n",
	       PC_MIXED_EVERY);
	printf("# pool 1 GiB created fresh for every run; reuse = allocations of the 5 most "
	       "reused pfns (perf kmem's table in the high-order PCP series), median per rank "
	       "over %d reps\n",
	       reps);
	if (bench_cores() < 2 * PC_MAX_PAIRS)
		printf("# only %ld cores: with 2 pairs, 4 threads share them (waits spin briefly, "
		       "then sched_yield), so 2-pair numbers show oversubscription, not scaling\n",
		       bench_cores());
	/* warm-up: one short run of each configuration */
	for (int c = 0; c < NR_PC_CFGS; c++)
		pc_once((enum pc_cfg)c, PC_PURE, 1, n / 4, 1, &s[0][c][1][0]);
	for (int rep = 0; rep < reps; rep++)
		for (int m = 0; m < NR_PC_MODES; m++)
			for (int np = 1; np <= PC_MAX_PAIRS; np++)
				for (int c = 0; c < NR_PC_CFGS; c++)
					pc_once((enum pc_cfg)c, (enum pc_mode)m, np, n,
						1000 + (uint64_t)rep, &s[m][c][np][rep]);
	bench_print_load(&load, "part c");

	printf("# depth: mean blocks in the ring when A pushes (near %d: A waits for B, and\n"
	       "# reuse counts are capped near blocks / %d)\n",
	       RING_SIZE, RING_SIZE);
	printf("%-5s %-7s %-38s %5s %9s %8s %8s %9s %9s %8s %6s  %s\n", "mode", "config", "what",
	       "pairs", "Mblocks/s", "min", "max", "free_high", "bulkfree", "distinct", "depth",
	       "top-5 reuse counts");
	for (int m = 0; m < NR_PC_MODES; m++) {
		for (int np = 1; np <= PC_MAX_PAIRS; np++) {
			for (int c = 0; c < NR_PC_CFGS; c++) {
				struct pc_sample *v = s[m][c][np];
				uint64_t *top = res->top[m][c][np], fh, bk, dist;

				for (int r = 0; r < reps; r++)
					d[r] = v[r].mops;
				res->mops[m][c][np] = bench_stat_of(d, reps);
				for (int k = 0; k < 5; k++) {
					for (int r = 0; r < reps; r++)
						d[r] = (double)v[r].top[k];
					top[k] = median_u64(d, reps);
				}
				for (int r = 0; r < reps; r++)
					d[r] = (double)v[r].distinct;
				dist = median_u64(d, reps);
				for (int r = 0; r < reps; r++)
					d[r] = (double)v[r].free_high;
				fh = median_u64(d, reps);
				for (int r = 0; r < reps; r++)
					d[r] = (double)v[r].bulkfree;
				bk = median_u64(d, reps);
				for (int r = 0; r < reps; r++)
					d[r] = v[r].depth;
				printf("%-5s %-7s %-38s %5d %9.3f %8.3f %8.3f %9lu %9lu %8lu "
				       "%6.1f  %lu %lu %lu %lu %lu\n",
				       pc_mode_name[m], pc_cfg_name[c], pc_cfg_what[c], np,
				       res->mops[m][c][np].median, res->mops[m][c][np].min,
				       res->mops[m][c][np].max, (unsigned long)fh,
				       (unsigned long)bk, (unsigned long)dist,
				       bench_stat_of(d, reps).median, (unsigned long)top[0],
				       (unsigned long)top[1], (unsigned long)top[2],
				       (unsigned long)top[3], (unsigned long)top[4]);
			}
		}
	}
	return 0;
}

static void add_top5(struct bench_result *r, const char *key, const uint64_t *t)
{
	bench_result_add(r, key, "%lu,%lu,%lu,%lu,%lu", (unsigned long)t[0], (unsigned long)t[1],
			 (unsigned long)t[2], (unsigned long)t[3], (unsigned long)t[4]);
}

/* One mode and pair count: its goals and its RESULT line. */
static void report_one(const struct pc_results *c, int m, int np)
{
	char bench[64], key[64], why[200];
	struct bench_result r;
	bool judged = bench_cores() >= 2 * np;
	double v, reuse_new, reuse_old;

	snprintf(bench, sizeof(bench), "pcp_prodcons%s%s", m ? "_mixed" : "",
		 np > 1 ? "_2pairs" : "");
	v = c->mops[m][PC_NEW][np].median / c->mops[m][PC_OLD][np].median;
	reuse_new = top5_mean(c->top[m][PC_NEW][np]) / top5_mean(c->top[m][PC_NOHIGH][np]);
	reuse_old = top5_mean(c->top[m][PC_OLD][np]) / top5_mean(c->top[m][PC_NOHIGH][np]);
	/*
	 * pure: B never allocates, so its free_count sits at the cap and both
	 * thresholds fire on every high-order free: 1.0 is expected and the goal
	 * only asks for no loss beyond noise.  mixed: the free_high commit's claim, the
	 * higher threshold restores throughput.
	 */
	snprintf(why, sizeof(why), "%s, %d pair%s: throughput new / old threshold%s%s",
		 pc_mode_name[m], np, np > 1 ? "s" : "",
		 m == PC_PURE ? " (both fire on every free here: expect ~1)" : "",
		 judged ? "" : " (not judged: 4 threads on fewer than 4 cores)");
	bench_goal(bench, "new_vs_old", v, judged ? ">=" : "info", m == PC_PURE ? 0.95 : 1.0, why);
	snprintf(why, sizeof(why),
		 "%s, %d pair%s: mean top-5 reuse new / high-order "
		 "caching off (within 10x)",
		 pc_mode_name[m], np, np > 1 ? "s" : "");
	bench_goal(bench, "reuse_new_vs_nohigh", reuse_new, ">=", 0.1, why);
	snprintf(why, sizeof(why),
		 "%s, %d pair%s: mean top-5 reuse old / high-order "
		 "caching off (within 10x)",
		 pc_mode_name[m], np, np > 1 ? "s" : "");
	bench_goal(bench, "reuse_old_vs_nohigh", reuse_old, ">=", 0.1, why);
	if (np > 1) {
		double sc = c->mops[m][PC_NEW][np].median / c->mops[m][PC_NEW][1].median;

		snprintf(key, sizeof(key), "scale_%dpairs_new", np);
		snprintf(why, sizeof(why),
			 "%s: total throughput %d pairs / 1 pair, new "
			 "threshold: no cliff%s",
			 pc_mode_name[m], np, judged ? "" : " (not judged: too few cores)");
		bench_goal(bench, key, sc, judged ? ">=" : "info", 1.0, why);
	}
	bench_result_init(&r, bench);
	bench_result_add(&r, "new_vs_old", "%.3f", v);
	add_top5(&r, "top5_new", c->top[m][PC_NEW][np]);
	add_top5(&r, "top5_old", c->top[m][PC_OLD][np]);
	add_top5(&r, "top5_nohigh", c->top[m][PC_NOHIGH][np]);
	bench_result_add(&r, "reuse_new_vs_nohigh", "%.3f", reuse_new);
	bench_result_add(&r, "reuse_old_vs_nohigh", "%.3f", reuse_old);
	bench_result_add(&r, "new_mops", "%.3f", c->mops[m][PC_NEW][np].median);
	bench_result_add(&r, "old_mops", "%.3f", c->mops[m][PC_OLD][np].median);
	bench_result_add(&r, "nohigh_mops", "%.3f", c->mops[m][PC_NOHIGH][np].median);
	bench_result_add(&r, "blocks_per_pair", "%lu", (unsigned long)c->n);
	if (np > 1)
		bench_result_add(&r, "cores", "%ld", bench_cores());
	bench_result_print(&r);
}

static void report_prodcons(void *ctx)
{
	const struct pc_results *c = ctx;

	for (int m = 0; m < NR_PC_MODES; m++)
		for (int np = 1; np <= PC_MAX_PAIRS; np++)
			report_one(c, m, np);
}

static struct pc_results results;
const struct bench_part pcp_prodcons_part = {
	"prodcons",
	bench_prodcons,
	report_prodcons,
	&results,
};
