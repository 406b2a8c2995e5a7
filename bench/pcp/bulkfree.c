// SPDX-License-Identifier: MIT
/*
 * bench/pcp, part b: one thread frees 1 GiB of mixed orders through its cache, with and
 * without high-order caching.
 */
#define _GNU_SOURCE /* sched_setaffinity: workers are pinned (bench_pin_self) */
#include "bench/pcp/pcp.h"

#define BF_POOL_FRAMES (3UL << 17) /* 1.5 GiB so 1 GiB of mixed orders fits */
#define BF_SET_FRAMES  (1UL << 18) /* free 1 GiB worth */
#define BF_MAX_RUN     31          /* a folio batch's worth of one order */

struct bf_run {
	unsigned int order, n;
	uint32_t first; /* index into pfns */
};

struct bf_set {
	struct bf_run *runs;
	size_t nr_runs;
	size_t nr_blocks;
	uint64_t frames;
	uint64_t frames_per_order[GFA_NR_ORDERS];
};

/*
 * The orders freed: runs of 1..31 blocks of one order (a truncated file's folios come
 * in runs), orders chosen so frames split about 25% order 0, 15% each orders 1 and 2,
 * 20% order 3 and 25% order 9.
 */
static void bf_make_set(struct bf_set *s, uint64_t seed)
{
	static const unsigned int orders[] = { 0, 1, 2, 3, 9 };
	static const double share[] = { 0.25, 0.15, 0.15, 0.20, 0.25 };
	double w[5], sum = 0;
	size_t cap = 1 << 16;

	/* run weight = frame share / (block frames * mean run length: 16, or 2.5 at order 9) */
	for (int i = 0; i < 5; i++)
		sum += w[i] = share[i] / (double)(1u << orders[i]) / (orders[i] == 9 ? 2.5 : 16.0);
	memset(s, 0, sizeof(*s));
	s->runs = malloc(cap * sizeof(*s->runs));
	if (!s->runs)
		bench_die("out of memory");
	while (s->frames < BF_SET_FRAMES) {
		double x = (double)(bench_rand(&seed) >> 11) / (double)(1ull << 53) * sum;
		int k = 0;
		struct bf_run *r;

		while (k < 4 && x >= w[k])
			x -= w[k++];
		if (s->nr_runs == cap) {
			cap *= 2;
			s->runs = realloc(s->runs, cap * sizeof(*s->runs));
			if (!s->runs)
				bench_die("out of memory");
		}
		r = &s->runs[s->nr_runs++];
		r->order = orders[k];
		r->n = 1 + (unsigned int)(bench_rand(&seed) % BF_MAX_RUN);
		if (r->order == GFA_PAGEBLOCK_ORDER) /* keep 2 MiB runs short */
			r->n = 1 + r->n % 4;
		r->first = (uint32_t)s->nr_blocks;
		s->nr_blocks += r->n;
		s->frames += (uint64_t)r->n << r->order;
		s->frames_per_order[r->order] += (uint64_t)r->n << r->order;
	}
}

enum bf_mode { BF_SINGLE, BF_BATCH, NR_BF_MODES };
static const char *const bf_mode_name[NR_BF_MODES] = { "single", "batch" };

struct bf_variant {
	struct gfa_pool *pool;
	struct gfa_pcp *pcp;
	bool high; /* high-order caching on */
	enum bf_mode mode;
	double samples[MAX_REPS]; /* seconds */
	struct bench_stat st;
	uint64_t free_high, bulkfree; /* per rep, from the last rep */
};

/* Allocate the set through the zone (untimed): the cache starts empty. */
static void bf_alloc(struct bf_variant *v, const struct bf_set *s, uint64_t *pfns)
{
	for (size_t r = 0; r < s->nr_runs; r++) {
		const struct bf_run *run = &s->runs[r];

		for (unsigned int i = 0; i < run->n; i++) {
			int64_t pfn = gfa_alloc(v->pool, 0, run->order, GFA_MT_MOVABLE, 7, 0);

			if (pfn < 0)
				bench_die("bulk-free setup: gfa_alloc order %u: %s", run->order,
					  strerror((int)-pfn));
			pfns[run->first + i] = (uint64_t)pfn;
		}
	}
}

/* Timed: free every block through the cache, then drain it (same end state). */
static double bf_free(struct bf_variant *v, const struct bf_set *s, const uint64_t *pfns)
{
	uint64_t t0 = bench_now_ns();
	int err = 0;

	for (size_t r = 0; r < s->nr_runs && !err; r++) {
		const struct bf_run *run = &s->runs[r];

		if (v->mode == BF_BATCH) {
			int n = gfa_pcp_free_many(v->pcp, pfns + run->first, run->n, run->order, 7);

			err = n < 0 ? n : (unsigned int)n != run->n ? -EIO : 0;
			continue;
		}
		for (unsigned int i = 0; i < run->n && !err; i++)
			err = gfa_pcp_free(v->pcp, pfns[run->first + i], run->order, 7);
	}
	if (!err) {
		int n = gfa_pcp_drain(v->pcp);

		err = n < 0 ? n : 0;
	}
	if (err)
		bench_die("bulk free (%s, %s): %s", v->high ? "high-order on" : "high-order off",
			  bf_mode_name[v->mode], strerror(-err));
	return bench_sec_since(t0);
}

struct bf_results {
	double ratio[NR_BF_MODES]; /* t(no high-order) / t(high-order): >= 1 good */
	struct bench_stat high[NR_BF_MODES], nohigh[NR_BF_MODES];
};

static int bench_bulkfree(const struct bench_opts *o, void *ctx)
{
	struct bf_results *res = ctx;
	struct bf_variant v[4];
	struct bf_set set;
	uint64_t *pfns;
	int reps = o->reps_set ? o->reps : o->quick ? 9 : 41;
	struct bench_load load;

	bench_load_begin(&load);
	bf_make_set(&set, 0xfeedface);
	pfns = calloc(set.nr_blocks, sizeof(*pfns));
	if (!pfns)
		bench_die("out of memory");
	for (int i = 0; i < 4; i++) {
		memset(&v[i], 0, sizeof(v[i]));
		v[i].high = i < 2;
		v[i].mode = (enum bf_mode)(i & 1);
		v[i].pool = make_pool(BF_POOL_FRAMES, !v[i].high, 0);
		v[i].pcp = make_pcp(v[i].pool);
	}
	printf("\n## b. bulk free (trunc analogue): %zu blocks, %lu frames (%.2f GiB): "
	       "order0 %.0f%% order1 %.0f%% order2 %.0f%% order3 %.0f%% order9 %.0f%% of frames, "
	       "runs of 1..%d blocks of one order; %d reps\n",
	       set.nr_blocks, (unsigned long)set.frames, (double)set.frames / 262144.0,
	       100.0 * (double)set.frames_per_order[0] / (double)set.frames,
	       100.0 * (double)set.frames_per_order[1] / (double)set.frames,
	       100.0 * (double)set.frames_per_order[2] / (double)set.frames,
	       100.0 * (double)set.frames_per_order[3] / (double)set.frames,
	       100.0 * (double)set.frames_per_order[9] / (double)set.frames, BF_MAX_RUN, reps);
	printf("# allocated through the zone (untimed), freed in allocation order through one "
	       "cache, then the cache drained (timed); single = gfa_pcp_free per block, "
	       "batch = gfa_pcp_free_many per run; pool 1.5 GiB, descriptors resident after "
	       "a warm-up rep\n");
	for (int rep = -1; rep < reps; rep++) {
		for (int i = 0; i < 4; i++) {
			uint64_t fh = VM(v[i].pool, pcp_free_high);
			uint64_t bk = VM(v[i].pool, pcp_bulkfree);
			double t;

			bf_alloc(&v[i], &set, pfns);
			t = bf_free(&v[i], &set, pfns);
			if (rep < 0)
				continue; /* warm-up */
			v[i].samples[rep] = t;
			v[i].free_high = VM(v[i].pool, pcp_free_high) - fh;
			v[i].bulkfree = VM(v[i].pool, pcp_bulkfree) - bk;
		}
	}
	bench_print_load(&load, "part b");
	printf("%-13s %-7s %10s %10s %10s %12s %12s %10s\n", "high-order", "mode", "ms", "min",
	       "max", "Mframes/s", "bulk frees", "free_high");
	for (int i = 0; i < 4; i++) {
		v[i].st = bench_stat_of(v[i].samples, reps);
		printf("%-13s %-7s %10.3f %10.3f %10.3f %12.1f %12lu %10lu\n",
		       v[i].high ? "cached" : "off", bf_mode_name[v[i].mode], v[i].st.median * 1e3,
		       v[i].st.min * 1e3, v[i].st.max * 1e3,
		       (double)set.frames / v[i].st.median / 1e6, (unsigned long)v[i].bulkfree,
		       (unsigned long)v[i].free_high);
	}
	for (int m = 0; m < NR_BF_MODES; m++) {
		res->high[m] = v[m].st;
		res->nohigh[m] = v[2 + m].st;
		/* on the fastest sample of each: a sample is one ~3 ms pass, which a single
		 * preemption can double (the medians are printed beside) */
		res->ratio[m] = v[2 + m].st.min / v[m].st.min;
	}
	for (int i = 0; i < 4; i++) {
		gfa_pcp_destroy(v[i].pcp);
		check_pool(v[i].pool, "after part b");
		gfa_pool_destroy(v[i].pool);
	}
	free(pfns);
	free(set.runs);
	return 0;
}

static void report_bulkfree(void *ctx)
{
	const struct bf_results *b = ctx;
	struct bench_result r;

	bench_goal("pcp_bulkfree", "vs_nohighorder", b->ratio[BF_SINGLE], ">=", 1.0,
		   "time(high-order caching off) / time(on), fastest of the reps each, per-block "
		   "frees; >= 1: caching is no slower");
	bench_goal("pcp_bulkfree", "vs_nohighorder_batch", b->ratio[BF_BATCH], ">=", 1.0,
		   "the same with gfa_pcp_free_many per run");
	bench_result_init(&r, "pcp_bulkfree");
	bench_result_add(&r, "vs_nohighorder", "%.3f", b->ratio[BF_SINGLE]);
	bench_result_add(&r, "vs_nohighorder_batch", "%.3f", b->ratio[BF_BATCH]);
	bench_result_add(&r, "high_ms", "%.3f", b->high[BF_SINGLE].median * 1e3);
	bench_result_add(&r, "nohigh_ms", "%.3f", b->nohigh[BF_SINGLE].median * 1e3);
	bench_result_add(&r, "high_batch_ms", "%.3f", b->high[BF_BATCH].median * 1e3);
	bench_result_add(&r, "nohigh_batch_ms", "%.3f", b->nohigh[BF_BATCH].median * 1e3);
	bench_result_print(&r);
}

static struct bf_results results;
const struct bench_part pcp_bulkfree_part = {
	"bulkfree",
	bench_bulkfree,
	report_bulkfree,
	&results,
};
