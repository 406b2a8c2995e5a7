// SPDX-License-Identifier: MIT
/*
 * bench/pcp: the per-vCPU caches against their baselines, all in one run.
 *
 *  a. order-0 allocate+free pairs per second on 1 and 2 threads through the cache
 *     (gfa_pcp_alloc/free), through the zone (gfa_alloc/free: pcp off, zone lock on every
 *     call; at 2 threads both threads contend for it) and through glibc malloc(4096)/free.
 *     Each thread keeps a working set of WS_LIVE blocks: per step it allocates a burst
 *     of WS_BURST blocks and frees as many randomly chosen live ones.
 *  b. mmtests' trunc analogue (docs/decisions.md, entry 22): one thread frees 1 GiB
 *     worth of frames of mixed orders through its cache, with and without high-order
 *     caching (pcp_no_high_order).
 *  c. producer/consumer: thread A allocates order 1-3 blocks through its cache, thread
 *     B frees them through its own (bounded ring between them); throughput and hot
 *     reuse (allocations of the most reused pfns) under the old (batch) and new
 *     (batch + high_min/2) free_high thresholds and with high-order caching off.
 *
 * Memory: pools are metadata only (no host memory behind the frames); the frame
 * descriptors and glibc's heap are resident after warm-up runs, and malloc'd memory is
 * never written by the benchmark (glibc writes its chunk headers only).
 *
 * The parts are in bench/pcp/ (pcp.h); this file has their shared helpers and main.
 */
#define _GNU_SOURCE /* sched_setaffinity: workers are pinned (bench_pin_self) */
#include "bench/pcp/pcp.h"

void check_pool(struct gfa_pool *pool, const char *when)
{
	char msg[256];

	if (gfa_pool_check(pool, msg, sizeof(msg)))
		bench_die("pool invariant broken %s: %s", when, msg);
}

struct gfa_pool *make_pool(uint64_t frames, bool no_high_order, unsigned int old_thr)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *pool;

	gfa_pool_config_init(&cfg, frames);
	cfg.pcp_no_high_order = no_high_order;
	cfg.pcp_free_high_old = old_thr;
	pool = gfa_pool_create(&cfg);
	if (!pool)
		bench_die("gfa_pool_create: %s", strerror(errno));
	return pool;
}

struct gfa_pcp *make_pcp(struct gfa_pool *pool)
{
	struct gfa_pcp *pcp = gfa_pcp_create(pool, 0);

	if (!pcp)
		bench_die("gfa_pcp_create: %s", strerror(errno));
	return pcp;
}

void sleep_sec(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Wait politely: spin a little, then give the core away (2 cores, up to 4 threads). */
void backoff(unsigned int *spins)
{
	if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	} else {
		sched_yield();
	}
}

/* This thread's CPU time: wall time less the time other jobs had the CPU. */
double thread_cpu_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t vm_get(struct gfa_pool *pool, size_t off)
{
	struct gfa_vmstat vs;

	if (gfa_pool_vmstat(pool, &vs))
		bench_die("gfa_pool_vmstat failed");
	return *(uint64_t *)((char *)&vs + off);
}

int main(int argc, char **argv)
{
	const struct bench_part pcp_parts[] = {
		pcp_pairs_part,
		pcp_bulkfree_part,
		pcp_prodcons_part,
	};
	struct bench_opts o;
	uint64_t t_start = bench_now_ns();
	int ret;

	ret = bench_parse_args(argc, argv, &o, 9, 0.03, 11, 0.25,
			       "Per-vCPU caches vs zone path and glibc; bulk free; "
			       "producer/consumer.\n"
			       "--only pairs|bulkfree|prodcons runs one part.");
	if (ret)
		return ret > 0 ? 0 : 2;
	if (!bench_parts_only_ok(&o, argv[0], pcp_parts, ARRAY_SIZE(pcp_parts)))
		return 2;
	if (o.reps > MAX_REPS)
		o.reps = MAX_REPS;
	/* Keep glibc's heap resident across runs (as gfa's metadata is). */
	if (!mallopt(M_TRIM_THRESHOLD, 1 << 30))
		printf("# note: mallopt refused (a sanitizer's malloc?): glibc baselines may "
		       "include heap trimming and first-touch faults\n");

	printf("# bench pcp: per-vCPU caches (pcp) vs the zone path and glibc, bulk free, "
	       "producer/consumer\n");
	bench_print_machine();
	printf("# mode=%s reps=%d (part a; b and c say theirs) rep_sec=%.3f (medians; "
	       "variants interleaved per rep, after "
	       "warm-up runs)\n",
	       o.quick ? "quick" : "full", o.reps, o.rep_sec);
	printf("# memory: pools are metadata only (no host memory behind frames); descriptors "
	       "and glibc's heap are resident after warm-up (M_TRIM_THRESHOLD=1G); allocated "
	       "memory is never written\n");
	bench_parts_run(&o, pcp_parts, ARRAY_SIZE(pcp_parts));
	printf("# elapsed %.1f s\n", bench_sec_since(t_start));
	return 0;
}
