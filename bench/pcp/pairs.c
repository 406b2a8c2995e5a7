// SPDX-License-Identifier: MIT
/*
 * bench/pcp, part a: order-0 allocate+free pairs on 1 and 2 threads, through the cache,
 * the zone and glibc, with a working set; and tight pairs beside them.
 */
#define _GNU_SOURCE /* sched_setaffinity: workers are pinned (bench_pin_self) */
#include "bench/pcp/pcp.h"

#define WS_LIVE    256 /* live blocks per thread */
#define WS_BURST   8   /* blocks allocated, then freed, per step */
#define WS_THREADS 2

enum ws_path { PATH_PCP, PATH_ZONE, PATH_MALLOC, NR_PATHS };
static const char *const path_name[NR_PATHS] = { "pcp", "pcp_off", "glibc" };
static const char *const path_what[NR_PATHS] = {
	"gfa_pcp_alloc/free (per-thread cache)",
	"gfa_alloc/free (zone lock every call)",
	"malloc(4096)/free",
};

struct ws_ctl {
	pthread_barrier_t go, done;
	enum ws_path path;
	bool tight; /* allocate and free the same block at once (part a, 2nd table) */
	int nactive;
	bool quit;
	atomic_bool stop;
};

struct ws_worker {
	pthread_t th;
	int id;
	struct ws_ctl *ctl;
	struct gfa_pool *pool;
	struct gfa_pcp *pcp;
	uint64_t owner, rng;
	bool filled[NR_PATHS];
	uint64_t live[NR_PATHS][WS_LIVE]; /* pfns, or pointers for glibc */
	/* results of the last run */
	uint64_t pairs;
	double secs, cpu_secs; /* wall and this thread's CPU time */
	int err;
} __attribute__((aligned(64)));

static inline __attribute__((always_inline)) int ws_alloc(struct ws_worker *w, enum ws_path path,
							  uint64_t *out)
{
	int64_t pfn;
	void *p;

	switch (path) {
	case PATH_PCP:
		pfn = gfa_pcp_alloc(w->pcp, 0, GFA_MT_MOVABLE, w->owner, 0);
		break;
	case PATH_ZONE:
		pfn = gfa_alloc(w->pool, 0, 0, GFA_MT_MOVABLE, w->owner, 0);
		break;
	default:
		p = malloc(4096);
		if (!p)
			return -ENOMEM;
		SINK(p);
		*out = (uint64_t)(uintptr_t)p;
		return 0;
	}
	if (pfn < 0)
		return (int)pfn;
	*out = (uint64_t)pfn;
	return 0;
}

static inline __attribute__((always_inline)) int ws_free(struct ws_worker *w, enum ws_path path,
							 uint64_t x)
{
	switch (path) {
	case PATH_PCP:
		return gfa_pcp_free(w->pcp, x, 0, w->owner);
	case PATH_ZONE:
		return gfa_free(w->pool, x, 0, w->owner);
	default:
		free((void *)(uintptr_t)x);
		return 0;
	}
}

static int ws_fill(struct ws_worker *w, enum ws_path path)
{
	for (int i = 0; i < WS_LIVE; i++) {
		int err = ws_alloc(w, path, &w->live[path][i]);

		if (err)
			return err;
	}
	w->filled[path] = true;
	return 0;
}

/*
 * One timed run: bursts of allocations, each followed by as many random frees.  Built
 * once per path (path is a constant in each copy), so no path pays a dispatch per call.
 */
static inline __attribute__((always_inline)) int ws_loop_path(struct ws_worker *w,
							      enum ws_path path)
{
	uint64_t t0 = bench_now_ns(), *live = w->live[path], fresh[WS_BURST], pairs = 0;
	double c0 = thread_cpu_sec();
	int err;

	while (!atomic_load_explicit(&w->ctl->stop, memory_order_relaxed)) {
		for (int k = 0; k < WS_BURST; k++) {
			err = ws_alloc(w, path, &fresh[k]);
			if (err)
				return err;
		}
		for (int k = 0; k < WS_BURST; k++) {
			unsigned int j = (unsigned int)(bench_rand(&w->rng) % WS_LIVE);

			err = ws_free(w, path, live[j]);
			if (err)
				return err;
			live[j] = fresh[k];
		}
		pairs += WS_BURST;
	}
	w->secs = bench_sec_since(t0);
	w->cpu_secs = thread_cpu_sec() - c0;
	w->pairs = pairs;
	return 0;
}

/*
 * The literal pair: allocate a block and free that same block at once, so every call
 * finds its block and list hot.  The best case of any allocator; printed next to the
 * working set, judged on nothing.
 */
static inline __attribute__((always_inline)) int ws_tight_path(struct ws_worker *w,
							       enum ws_path path)
{
	uint64_t t0 = bench_now_ns(), x = 0, pairs = 0;
	double c0 = thread_cpu_sec();
	int err;

	while (!atomic_load_explicit(&w->ctl->stop, memory_order_relaxed)) {
		for (int k = 0; k < WS_BURST; k++) {
			err = ws_alloc(w, path, &x);
			if (!err)
				err = ws_free(w, path, x);
			if (err)
				return err;
		}
		pairs += WS_BURST;
	}
	w->secs = bench_sec_since(t0);
	w->cpu_secs = thread_cpu_sec() - c0;
	w->pairs = pairs;
	return 0;
}

/* One run of either pattern; inlined per path, the pattern chosen once per run. */
static inline __attribute__((always_inline)) int ws_run_path(struct ws_worker *w, enum ws_path path)
{
	return w->ctl->tight ? ws_tight_path(w, path) : ws_loop_path(w, path);
}

static int ws_loop(struct ws_worker *w, enum ws_path path)
{
	switch (path) {
	case PATH_PCP:
		return ws_run_path(w, PATH_PCP);
	case PATH_ZONE:
		return ws_run_path(w, PATH_ZONE);
	default:
		return ws_run_path(w, PATH_MALLOC);
	}
}

static void *ws_thread(void *arg)
{
	struct ws_worker *w = arg;
	struct ws_ctl *ctl = w->ctl;

	/* worker i on CPU i: a 30 ms repetition is shorter than the balancer's reaction */
	bench_pin_self(w->id);
	for (;;) {
		pthread_barrier_wait(&ctl->go);
		if (ctl->quit)
			break;
		if (w->id < ctl->nactive && !w->err) {
			w->pairs = 0;
			if (!w->filled[ctl->path])
				w->err = ws_fill(w, ctl->path);
			if (!w->err)
				w->err = ws_loop(w, ctl->path);
		}
		pthread_barrier_wait(&ctl->done);
	}
	/* Give everything back from the thread that owns the cache and the arena. */
	for (int p = 0; p < NR_PATHS; p++) {
		for (int i = 0; w->filled[p] && i < WS_LIVE; i++) {
			int err = ws_free(w, (enum ws_path)p, w->live[p][i]);

			if (err && !w->err)
				w->err = err;
		}
	}
	return NULL;
}

/*
 * Run `path` on nactive threads for secs; returns total pairs per second of wall time,
 * and in *cpu_rate (unless NULL) per second of the threads' CPU time.
 */
static double ws_run(struct ws_ctl *ctl, struct ws_worker *w, enum ws_path path, int nactive,
		     double secs, double *cpu_rate)
{
	double rate = 0, crate = 0;

	ctl->path = path;
	ctl->nactive = nactive;
	atomic_store(&ctl->stop, false);
	pthread_barrier_wait(&ctl->go);
	sleep_sec(secs);
	atomic_store(&ctl->stop, true);
	pthread_barrier_wait(&ctl->done);
	for (int i = 0; i < nactive; i++) {
		if (w[i].err)
			bench_die("%s on thread %d: %s", path_name[path], i, strerror(-w[i].err));
		rate += (double)w[i].pairs / w[i].secs;
		crate += w[i].cpu_secs > 0 ? (double)w[i].pairs / w[i].cpu_secs : 0;
	}
	if (cpu_rate)
		*cpu_rate = crate;
	return rate;
}

struct ws_results {
	struct bench_stat st[NR_PATHS][WS_THREADS + 1];  /* [path][threads] */
	struct bench_stat tight[NR_PATHS];               /* tight pairs, 1 thread */
	struct bench_stat cpu[NR_PATHS][WS_THREADS + 1]; /* the same per CPU second */
	struct bench_stat tight_cpu[NR_PATHS];
};

static int bench_pairs(const struct bench_opts *o, void *ctx)
{
	struct ws_results *res = ctx;
	static struct ws_worker w[WS_THREADS];
	static double samples[NR_PATHS][WS_THREADS + 1][MAX_REPS];
	static double tight[NR_PATHS][MAX_REPS];
	static double cpu[NR_PATHS][WS_THREADS + 1][MAX_REPS], tight_cpu[NR_PATHS][MAX_REPS];
	struct ws_ctl ctl = { .quit = false };
	struct gfa_pool *pool = make_pool(POOL_FRAMES, false, 0);
	struct gfa_pcp_stat ps;
	struct bench_load load;

	bench_load_begin(&load);
	pthread_barrier_init(&ctl.go, NULL, WS_THREADS + 1);
	pthread_barrier_init(&ctl.done, NULL, WS_THREADS + 1);
	for (int i = 0; i < WS_THREADS; i++) {
		w[i].id = i;
		w[i].ctl = &ctl;
		w[i].pool = pool;
		w[i].pcp = make_pcp(pool);
		w[i].owner = 0xa0 + (uint64_t)i;
		w[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		if (pthread_create(&w[i].th, NULL, ws_thread, &w[i]))
			bench_die("pthread_create failed");
	}
	gfa_pcp_stat(w[0].pcp, &ps);
	printf("\n## a. order-0 allocate+free pairs/s, %d live blocks per thread, bursts of %d, "
	       "random frees\n",
	       WS_LIVE, WS_BURST);
	printf("# pool 1 GiB, one zone shared by all threads; each thread its own cache "
	       "(batch %d, high_min %d, high_max %d); worker i pinned to the i-th allowed CPU, "
	       "every path alike\n",
	       ps.batch, ps.high_min, ps.high_max);
	/* Warm-up: fills the live sets, grows the heap and the caches; not timed. */
	for (int nt = 1; nt <= WS_THREADS; nt++)
		for (int p = 0; p < NR_PATHS; p++)
			ws_run(&ctl, w, (enum ws_path)p, nt, o->rep_sec / 2, NULL);
	for (int rep = 0; rep < o->reps; rep++) {
		for (int nt = 1; nt <= WS_THREADS; nt++)
			for (int p = 0; p < NR_PATHS; p++)
				samples[p][nt][rep] = ws_run(&ctl, w, (enum ws_path)p, nt,
							     o->rep_sec, &cpu[p][nt][rep]);
		ctl.tight = true;
		for (int p = 0; p < NR_PATHS; p++)
			tight[p][rep] =
				ws_run(&ctl, w, (enum ws_path)p, 1, o->rep_sec, &tight_cpu[p][rep]);
		ctl.tight = false;
	}
	ctl.quit = true;
	pthread_barrier_wait(&ctl.go);
	for (int i = 0; i < WS_THREADS; i++) {
		pthread_join(w[i].th, NULL);
		if (w[i].err)
			bench_die("thread %d cleanup: %s", i, strerror(-w[i].err));
		gfa_pcp_destroy(w[i].pcp);
	}
	check_pool(pool, "after part a");
	gfa_pool_destroy(pool);
	pthread_barrier_destroy(&ctl.go);
	pthread_barrier_destroy(&ctl.done);

	bench_print_load(&load, "part a");
	printf("# wall rates on a shared machine include the time a thread was preempted; the "
	       "cpu column is pairs per second of the threads' own CPU time\n");
	printf("%-8s %-40s %7s %10s %10s %10s %9s %10s\n", "path", "what", "threads", "Mpairs/s",
	       "min", "max", "ns/pair", "cpu Mp/s");
	for (int nt = 1; nt <= WS_THREADS; nt++) {
		for (int p = 0; p < NR_PATHS; p++) {
			struct bench_stat *st = &res->st[p][nt];

			*st = bench_stat_of(samples[p][nt], o->reps);
			res->cpu[p][nt] = bench_stat_of(cpu[p][nt], o->reps);
			/* ns per pair per thread: the cost one vCPU sees */
			printf("%-8s %-40s %7d %10.3f %10.3f %10.3f %9.1f %10.3f\n", path_name[p],
			       path_what[p], nt, st->median / 1e6, st->min / 1e6, st->max / 1e6,
			       1e9 * nt / st->median, res->cpu[p][nt].median / 1e6);
		}
	}
	printf("\n# the literal pair, for comparison: allocate a block, free that block at once "
	       "(every call hot; 1 thread, reps interleaved with the table above)\n");
	for (int p = 0; p < NR_PATHS; p++) {
		struct bench_stat *st = &res->tight[p];

		*st = bench_stat_of(tight[p], o->reps);
		res->tight_cpu[p] = bench_stat_of(tight_cpu[p], o->reps);
		printf("%-8s %-40s %7d %10.3f %10.3f %10.3f %9.1f %10.3f\n", path_name[p],
		       path_what[p], 1, st->median / 1e6, st->min / 1e6, st->max / 1e6,
		       1e9 / st->median, res->tight_cpu[p].median / 1e6);
	}
	return 0;
}

/* The tight pairs: shown beside the goals, judged on nothing (the working set is). */
static void report_tight(const struct ws_results *a)
{
	double pcp = a->tight[PATH_PCP].median, off = a->tight[PATH_ZONE].median;
	double glibc = a->tight[PATH_MALLOC].median;
	struct bench_result r;

	bench_goal("pcp_tight", "vs_nopcp", pcp / off, "info", 0,
		   "tight pairs (same block freed at once), pcp / pcp off, 1 thread");
	bench_goal("pcp_tight", "vs_glibc", pcp / glibc, "info", 0,
		   "tight pairs, pcp / malloc(4096), 1 thread");
	bench_result_init(&r, "pcp_tight");
	bench_result_add(&r, "vs_nopcp", "%.3f", pcp / off);
	bench_result_add(&r, "vs_glibc", "%.3f", pcp / glibc);
	bench_result_add(&r, "pcp_mops", "%.3f", pcp / 1e6);
	bench_result_add(&r, "nopcp_mops", "%.3f", off / 1e6);
	bench_result_add(&r, "glibc_mops", "%.3f", glibc / 1e6);
	bench_result_add(&r, "pcp_cpu_mops", "%.3f", a->tight_cpu[PATH_PCP].median / 1e6);
	bench_result_add(&r, "pcp_ws_cpu_mops", "%.3f", a->cpu[PATH_PCP][1].median / 1e6);
	bench_result_print(&r);
}

static void report_pairs(void *ctx)
{
	const struct ws_results *a = ctx;
	double pcp1 = a->st[PATH_PCP][1].median, off1 = a->st[PATH_ZONE][1].median;
	double glibc1 = a->st[PATH_MALLOC][1].median, pcp2 = a->st[PATH_PCP][2].median;
	double off2 = a->st[PATH_ZONE][2].median, glibc2 = a->st[PATH_MALLOC][2].median;
	struct bench_result r;

	bench_goal("pcp", "vs_nopcp", pcp1 / off1, ">=", 5.0, "pcp / pcp off, 1 thread");
	bench_goal("pcp", "vs_glibc", pcp1 / glibc1, ">=", 3.0, "pcp / malloc(4096), 1 thread");
	bench_goal("pcp", "scale_2t", pcp2 / pcp1, ">=", 1.8,
		   "pcp total throughput, 2 threads / 1 thread");
	bench_goal("pcp", "vs_nopcp_2t", pcp2 / off2, "info", 0,
		   "pcp / pcp off, 2 threads (both on one zone lock)");
	bench_goal("pcp", "nopcp_scale_2t", off2 / off1, "info", 0,
		   "pcp off total throughput, 2 threads / 1 (zone lock contention)");
	bench_goal("pcp", "glibc_scale_2t", glibc2 / glibc1, "info", 0,
		   "glibc total throughput, 2 threads / 1");
	bench_result_init(&r, "pcp");
	bench_result_add(&r, "vs_nopcp", "%.3f", pcp1 / off1);
	bench_result_add(&r, "vs_glibc", "%.3f", pcp1 / glibc1);
	bench_result_add(&r, "scale_2t", "%.3f", pcp2 / pcp1);
	bench_result_add(&r, "pcp_1t_mops", "%.3f", pcp1 / 1e6);
	bench_result_add(&r, "nopcp_1t_mops", "%.3f", off1 / 1e6);
	bench_result_add(&r, "glibc_1t_mops", "%.3f", glibc1 / 1e6);
	bench_result_add(&r, "pcp_2t_mops", "%.3f", pcp2 / 1e6);
	bench_result_add(&r, "nopcp_2t_mops", "%.3f", off2 / 1e6);
	bench_result_add(&r, "glibc_2t_mops", "%.3f", glibc2 / 1e6);
	bench_result_add(&r, "pcp_1t_cpu_mops", "%.3f", a->cpu[PATH_PCP][1].median / 1e6);
	bench_result_add(&r, "nopcp_1t_cpu_mops", "%.3f", a->cpu[PATH_ZONE][1].median / 1e6);
	bench_result_add(&r, "glibc_1t_cpu_mops", "%.3f", a->cpu[PATH_MALLOC][1].median / 1e6);
	bench_result_print(&r);
	report_tight(a);
}

static struct ws_results results;
const struct bench_part pcp_pairs_part = {
	"pairs",
	bench_pairs,
	report_pairs,
	&results,
};
