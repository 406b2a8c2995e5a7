// SPDX-License-Identifier: MIT
/*
 * bench/scale: does gfa's cost stay flat with pool size?  A 1 TiB pool (2^28 frames)
 * beside a 16 GiB one, both metadata only (the allocator layer never touches the frames
 * it hands out, so no host memory stands behind them, as in bench/peer).
 *
 * For each pool: the time gfa_pool_create takes and the metadata gfa_zone_stat counts
 * (metadata_bytes); then, with 90% of the pool held (a working set of
 * SCALE_WORKING_FRAMES order-0 frames, the rest as order-9 blocks, the same working set
 * in both pools), bench/peer's workloads on one thread:
 *   repeat_0, repeat_9   allocate a block and free it at once, through a cache
 *   bulk_0               allocate SCALE_BULK order-0 blocks, then free them (cache)
 *   rand_0, rand_0_zone  free a random frame of the working set and allocate one in its
 *                        place, through a cache and through the zone path
 *   rand_9_zone          the same with the held order-9 blocks, on the zone path
 * (ns per operation; repetitions interleaved between the pools and the workloads, after
 * a warm-up; median and min), and at the end a full compaction pass after every 64th
 * held order-9 block was split and half freed (ns per pageblock of the zone and per
 * block moved) and gfa_pool_check's time.  tib_vs_16g is the largest of the
 * workloads' median ratios, 1 TiB over 16 GiB (the compaction pass per block moved
 * included: it is one sample, not a median): the goal is 1.2.  rand_9_zone's working
 * set is every held order-9 block, so it grows with the pool, as a host's churn does.
 * bytes_per_frame_split is metadata_bytes per frame of a pool whose every pageblock is
 * split into order-0 blocks.
 *
 * Beside rand_9_zone, LLFree (when the peers folder is there) over the same number of
 * frames, holding the same blocks and churned the same way, interleaved with gfa's
 * repetitions: its own 1 TiB / 16 GiB ratio says what the growing working set costs an
 * allocator that is not gfa, and gfa / LLFree at each size is the baseline's ratio.
 */
#include <gfa/allocator.h>
#include "bench/bench_util.h"
#if PEER_LLFREE
#include "bench/peer_llfree.h"
#endif

#define NR_POOLS             2
#define MAX_REPS             1000
#define HELD_PCT             90
#define SCALE_WORKING_FRAMES (1u << 18) /* 1 GiB of order-0 frames */
#define SCALE_BULK           (1u << 14)
#define SCALE_OWNER          0x5ca1e
#define SCALE_FRAG_EVERY     64 /* every 64th held order-9 block */

static const uint64_t pool_frames[NR_POOLS] = { 1ULL << 22, 1ULL << 28 };
static const char *const pool_name[NR_POOLS] = { "16 GiB", "1 TiB" };

enum scale_wl {
	WL_REPEAT_0,
	WL_REPEAT_9,
	WL_BULK_0,
	WL_RAND_0,
	WL_RAND_0_ZONE,
	WL_RAND_9_ZONE,
	NR_WL
};
static const char *const wl_name[NR_WL] = { "repeat_0", "repeat_9",    "bulk_0",
					    "rand_0",   "rand_0_zone", "rand_9_zone" };

/* LLFree over the same frames: the same order-0 and order-9 blocks held, rand_9 churn */
struct scale_peer {
#if PEER_LLFREE
	struct peer_llfree *ll;
#endif
	uint64_t *huge, nr_huge, rng, meta_bytes;
	double ns[MAX_REPS];
};

struct scale_pool {
	struct scale_peer peer;
	uint64_t frames, meta_bytes;
	double create_ms;
	struct gfa_pool *pool;
	struct gfa_pcp *pcp;
	uint64_t *small, nr_small; /* held order-0 frames (the working set) */
	uint64_t *huge, nr_huge;   /* held order-9 blocks */
	uint64_t *bulk;
	uint64_t rng, moved;
	double ns[NR_WL][MAX_REPS];
	double compact_ms, compact_pb_ns, compact_move_ns, check_ms;
};

struct scale_bench {
	struct scale_pool p[NR_POOLS];
	uint64_t repeat, rand_steps;
	int reps;
	double split_bpf;
};

/* Metadata only: nothing to copy, the block is where the pool says it is. */
static int scale_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct scale_pool *sp = ctx;

	(void)owner, (void)src, (void)dst, (void)order;
	sp->moved++;
	return 0;
}

static const struct gfa_owner_ops scale_ops = { .migrate = scale_migrate };

static uint64_t meta_bytes(struct gfa_pool *pool, uint64_t *frames)
{
	struct gfa_zone_stat st;
	uint64_t b = 0;

	*frames = 0;
	for (unsigned int z = 0; z < gfa_pool_nr_zones(pool); z++) {
		if (gfa_zone_stat(pool, z, &st))
			bench_die("gfa_zone_stat failed");
		b += st.metadata_bytes;
		*frames += st.nr_frames;
	}
	return b;
}

static void *xalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		bench_die("out of memory (%zu bytes)", n);
	return p;
}

static int64_t get(struct scale_pool *sp, bool zone, unsigned int order)
{
	int64_t pfn = zone ? gfa_alloc(sp->pool, 0, order, GFA_MT_MOVABLE, SCALE_OWNER, 0) :
			     gfa_pcp_alloc(sp->pcp, order, GFA_MT_MOVABLE, SCALE_OWNER, 0);

	if (pfn < 0)
		bench_die("pool of %lu frames: allocation of order %u: %s",
			  (unsigned long)sp->frames, order, gfa_strerror((int)pfn));
	return pfn;
}

static void put(struct scale_pool *sp, bool zone, uint64_t pfn, unsigned int order)
{
	int err = zone ? gfa_free(sp->pool, pfn, order, SCALE_OWNER) :
			 gfa_pcp_free(sp->pcp, pfn, order, SCALE_OWNER);

	if (err)
		bench_die("free of order %u at %lu: %s", order, (unsigned long)pfn,
			  gfa_strerror(err));
}

/* Create the pool (timed), its cache and owner, and hold 90% of it. */
static void scale_open(struct scale_pool *sp, uint64_t frames)
{
	struct gfa_pool_config cfg;
	uint64_t t0, n, held = frames * HELD_PCT / 100;

	sp->frames = frames;
	sp->rng = 0x9e3779b97f4a7c15ull ^ frames;
	gfa_pool_config_init(&cfg, frames);
	t0 = bench_now_ns();
	sp->pool = gfa_pool_create(&cfg);
	sp->create_ms = (double)(bench_now_ns() - t0) / 1e6;
	if (!sp->pool)
		bench_die("gfa_pool_create of %lu frames: %s", (unsigned long)frames,
			  strerror(errno));
	sp->meta_bytes = meta_bytes(sp->pool, &n);
	sp->pcp = gfa_pcp_create(sp->pool, 0);
	if (!sp->pcp || gfa_owner_register(sp->pool, SCALE_OWNER, &scale_ops, sp))
		bench_die("gfa_pcp_create or gfa_owner_register failed");
	sp->nr_huge = (held - SCALE_WORKING_FRAMES) >> GFA_PAGEBLOCK_ORDER;
	sp->huge = xalloc(sp->nr_huge * sizeof(uint64_t));
	sp->small = xalloc(SCALE_WORKING_FRAMES * sizeof(uint64_t));
	sp->bulk = xalloc(SCALE_BULK * sizeof(uint64_t));
	for (uint64_t i = 0; i < sp->nr_huge; i++)
		sp->huge[i] = (uint64_t)get(sp, true, GFA_PAGEBLOCK_ORDER);
	for (sp->nr_small = 0; sp->nr_small < SCALE_WORKING_FRAMES; sp->nr_small++)
		sp->small[sp->nr_small] = (uint64_t)get(sp, false, 0);
}

#if PEER_LLFREE
/* LLFree holds what scale_open() makes gfa hold: the order-9 blocks, then the frames. */
static void peer_open(struct scale_pool *sp)
{
	struct scale_peer *pe = &sp->peer;

	pe->ll = peer_llfree_create(sp->frames, 1, &pe->meta_bytes);
	if (!pe->ll)
		bench_die("LLFree over %lu frames: creation failed", (unsigned long)sp->frames);
	pe->rng = sp->rng;
	pe->nr_huge = sp->nr_huge;
	pe->huge = xalloc(pe->nr_huge * sizeof(uint64_t));
	for (uint64_t i = 0; i < pe->nr_huge; i++) {
		int64_t pfn = peer_llfree_get(pe->ll, 0, GFA_PAGEBLOCK_ORDER);

		if (pfn < 0)
			bench_die("LLFree: order-9 block %lu of %lu", (unsigned long)i,
				  (unsigned long)pe->nr_huge);
		pe->huge[i] = (uint64_t)pfn;
	}
	for (uint64_t i = 0; i < SCALE_WORKING_FRAMES; i++)
		if (peer_llfree_get(pe->ll, 0, 0) < 0)
			bench_die("LLFree: frame %lu of the working set", (unsigned long)i);
}

static void peer_close(struct scale_pool *sp)
{
	peer_llfree_destroy(sp->peer.ll);
	free(sp->peer.huge);
}

/* rand_9 on LLFree, as scale_run() runs rand_9_zone: ns per operation. */
static double peer_run(const struct scale_bench *b, struct scale_peer *pe)
{
	uint64_t ops = 0, t0 = bench_now_ns();

	for (uint64_t i = 0; i < b->rand_steps >> 3; i++) {
		uint64_t j = bench_rand(&pe->rng) % pe->nr_huge;
		int64_t pfn;

		if (peer_llfree_put(pe->ll, 0, pe->huge[j], GFA_PAGEBLOCK_ORDER))
			bench_die("LLFree refused the free of %lu", (unsigned long)pe->huge[j]);
		pfn = peer_llfree_get(pe->ll, 0, GFA_PAGEBLOCK_ORDER);
		if (pfn < 0)
			bench_die("LLFree: no order-9 block after a free");
		pe->huge[j] = (uint64_t)pfn;
		ops += 2;
	}
	return (double)(bench_now_ns() - t0) / (double)ops;
}
#endif

/* One repetition of a workload: ns per operation (repeat: per pair). */
static double scale_run(struct scale_bench *b, struct scale_pool *sp, enum scale_wl wl)
{
	bool zone = wl == WL_RAND_0_ZONE || wl == WL_RAND_9_ZONE;
	unsigned int order = wl == WL_REPEAT_9 || wl == WL_RAND_9_ZONE ? GFA_PAGEBLOCK_ORDER : 0;
	uint64_t *held = order ? sp->huge : sp->small, nr = order ? sp->nr_huge : sp->nr_small;
	uint64_t ops = 0, t0;

	if (zone && gfa_pool_drain_all(sp->pool, -1) < 0)
		bench_die("gfa_pool_drain_all failed");
	t0 = bench_now_ns();
	switch (wl) {
	case WL_REPEAT_0:
	case WL_REPEAT_9:
		for (ops = 0; ops < b->repeat; ops++)
			put(sp, false, (uint64_t)get(sp, false, order), order);
		break;
	case WL_BULK_0:
		for (uint64_t i = 0; i < SCALE_BULK; i++)
			sp->bulk[i] = (uint64_t)get(sp, false, 0);
		for (uint64_t i = 0; i < SCALE_BULK; i++)
			put(sp, false, sp->bulk[i], 0);
		ops = 2 * SCALE_BULK;
		break;
	default:
		for (uint64_t i = 0; i < b->rand_steps >> (order ? 3 : 0); i++) {
			uint64_t j = bench_rand(&sp->rng) % nr;

			put(sp, zone, held[j], order);
			held[j] = (uint64_t)get(sp, zone, order);
			ops += 2;
		}
		break;
	}
	return (double)(bench_now_ns() - t0) / (double)ops;
}

/*
 * Split every SCALE_FRAG_EVERY-th held order-9 block in two and free the upper half,
 * then one full compaction pass over the zone; and gfa_pool_check.  The held records
 * go stale (blocks move), so the pool is destroyed with them allocated.
 */
static void scale_compact(struct scale_pool *sp)
{
	char msg[256];
	uint64_t t0, half = 1ULL << (GFA_PAGEBLOCK_ORDER - 1), pageblocks;
	int ret;

	if (gfa_pool_drain_all(sp->pool, -1) < 0)
		bench_die("gfa_pool_drain_all failed");
	for (uint64_t i = 0; i < sp->nr_huge; i += SCALE_FRAG_EVERY) {
		if (gfa_block_split(sp->pool, sp->huge[i], GFA_PAGEBLOCK_ORDER, SCALE_OWNER,
				    GFA_PAGEBLOCK_ORDER - 1))
			bench_die("gfa_block_split failed");
		put(sp, true, sp->huge[i] + half, GFA_PAGEBLOCK_ORDER - 1);
	}
	sp->moved = 0;
	t0 = bench_now_ns();
	ret = gfa_compact_zone(sp->pool, 0, -1, GFA_COMPACT_SYNC);
	sp->compact_ms = (double)(bench_now_ns() - t0) / 1e6;
	if (ret < 0)
		bench_die("gfa_compact_zone: %s", gfa_strerror(ret));
	pageblocks = sp->frames >> GFA_PAGEBLOCK_ORDER;
	sp->compact_pb_ns = sp->compact_ms * 1e6 / (double)pageblocks;
	sp->compact_move_ns = sp->moved ? sp->compact_ms * 1e6 / (double)sp->moved : 0;
	t0 = bench_now_ns();
	if (gfa_pool_check(sp->pool, msg, sizeof(msg)))
		bench_die("pool invariant broken: %s", msg);
	sp->check_ms = (double)(bench_now_ns() - t0) / 1e6;
}

static void scale_close(struct scale_pool *sp)
{
	gfa_owner_register(sp->pool, SCALE_OWNER, NULL, NULL);
	gfa_pcp_destroy(sp->pcp);
	gfa_pool_destroy(sp->pool);
	free(sp->huge);
	free(sp->small);
	free(sp->bulk);
	sp->pool = NULL;
}

/* Metadata per frame of a 1 GiB pool split all over: every frame an order-0 block. */
static double split_bytes_per_frame(void)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *pool;
	uint64_t frames, bytes;

	gfa_pool_config_init(&cfg, 1u << 18);
	pool = gfa_pool_create(&cfg);
	if (!pool)
		bench_die("gfa_pool_create failed");
	while (gfa_alloc(pool, 0, 0, GFA_MT_MOVABLE, SCALE_OWNER, GFA_ALLOC_NOCOMPACT) >= 0)
		;
	bytes = meta_bytes(pool, &frames);
	gfa_pool_destroy(pool);
	return (double)bytes / (double)frames;
}

static int run_all(const struct bench_opts *o, void *ctx)
{
	struct scale_bench *b = ctx;
	struct bench_load load;

	b->reps = o->reps;
	b->repeat = o->quick ? 1u << 16 : 1u << 19;
	b->rand_steps = o->quick ? 1u << 16 : 1u << 19;
	bench_print_machine();
	printf("# pools of 16 GiB and 1 TiB, metadata only, 90%% held; %d reps after a warm-up, "
	       "interleaved; one thread; ns per operation (repeat: per pair)\n",
	       o->reps);
	bench_print_loadavg("start");
	bench_load_begin(&load);
	b->split_bpf = split_bytes_per_frame();
	for (int i = 0; i < NR_POOLS; i++) {
		scale_open(&b->p[i], pool_frames[i]);
		printf("## %s (%lu frames): created in %.1f ms, metadata %.1f MiB (%.3f bytes per "
		       "frame), %lu order-9 blocks and %lu frames held\n",
		       pool_name[i], (unsigned long)b->p[i].frames, b->p[i].create_ms,
		       (double)b->p[i].meta_bytes / 1048576.0,
		       (double)b->p[i].meta_bytes / (double)b->p[i].frames,
		       (unsigned long)b->p[i].nr_huge, (unsigned long)b->p[i].nr_small);
#if PEER_LLFREE
		peer_open(&b->p[i]);
		printf("## LLFree over the same frames: metadata %.1f MiB (%.3f bytes per frame), "
		       "the same blocks held\n",
		       (double)b->p[i].peer.meta_bytes / 1048576.0,
		       (double)b->p[i].peer.meta_bytes / (double)b->p[i].frames);
#endif
		fflush(stdout);
	}
	for (int rep = -1; rep < o->reps; rep++) {
		for (int wl = 0; wl < NR_WL; wl++)
			for (int i = 0; i < NR_POOLS; i++) {
				int k = (i + rep + 1) % NR_POOLS; /* which pool goes first */
				double ns = scale_run(b, &b->p[k], (enum scale_wl)wl);

				if (rep >= 0)
					b->p[k].ns[wl][rep] = ns;
			}
#if PEER_LLFREE
		for (int i = 0; i < NR_POOLS; i++) {
			int k = (i + rep + 1) % NR_POOLS;
			double ns = peer_run(b, &b->p[k].peer);

			if (rep >= 0)
				b->p[k].peer.ns[rep] = ns;
		}
#endif
	}
	for (int i = 0; i < NR_POOLS; i++) {
#if PEER_LLFREE
		peer_close(&b->p[i]);
#endif
		scale_compact(&b->p[i]);
		scale_close(&b->p[i]); /* 4 GiB of descriptors for 1 TiB: give them back now */
	}
	bench_print_load(&load, "the run");
	bench_print_loadavg("end");
	return 0;
}

/* LLFree's rand_9 at both sizes beside gfa's rand_9_zone (medians). */
static void report_peer(const struct scale_bench *b)
{
#if PEER_LLFREE
	struct bench_stat g[NR_POOLS], l[NR_POOLS];
	struct bench_result res;
	double v[MAX_REPS];

	for (int i = 0; i < NR_POOLS; i++) {
		memcpy(v, b->p[i].ns[WL_RAND_9_ZONE], sizeof(double) * (size_t)b->reps);
		g[i] = bench_stat_of(v, b->reps);
		memcpy(v, b->p[i].peer.ns, sizeof(double) * (size_t)b->reps);
		l[i] = bench_stat_of(v, b->reps);
	}
	printf("rand_9 on LLFree (the same frames held and churned; its only path):\n");
	printf("%-12s %10s %10s %10s %10s %8s\n", "pool", "gfa_ns", "gfa_min", "llfree_ns",
	       "ll_min", "gfa/ll");
	for (int i = 0; i < NR_POOLS; i++)
		printf("%-12s %10.1f %10.1f %10.1f %10.1f %8.3f\n", pool_name[i], g[i].median,
		       g[i].min, l[i].median, l[i].min, g[i].median / l[i].median);
	printf("1 TiB / 16 GiB: gfa %.3f, LLFree %.3f\n", g[1].median / g[0].median,
	       l[1].median / l[0].median);
	bench_result_init(&res, "scale");
	sb_printf(&res.sb, " rand_9_llfree");
	bench_result_add(&res, "ns_16g", "%.1f", l[0].median);
	bench_result_add(&res, "ns_1t", "%.1f", l[1].median);
	bench_result_add(&res, "min_ns_16g", "%.1f", l[0].min);
	bench_result_add(&res, "min_ns_1t", "%.1f", l[1].min);
	bench_result_add(&res, "ratio", "%.3f", l[1].median / l[0].median);
	bench_result_add(&res, "gfa_vs_llfree_16g", "%.3f", g[0].median / l[0].median);
	bench_result_add(&res, "gfa_vs_llfree_1t", "%.3f", g[1].median / l[1].median);
	bench_result_print(&res);
#else
	(void)b;
	printf("# LLFree: not built (no peers folder at " PEER_DIR "): no baseline for "
	       "rand_9\n");
#endif
}

static void report(void *ctx)
{
	struct scale_bench *b = ctx;
	struct scale_pool *s = &b->p[0], *t = &b->p[1];
	struct bench_result res;
	double worst = 0, v[MAX_REPS];
	int reps = b->reps;

	printf("%-12s %10s %10s %10s %10s %8s\n", "workload", "16g_ns", "16g_min", "1t_ns",
	       "1t_min", "ratio");
	for (int wl = 0; wl < NR_WL; wl++) {
		struct bench_stat a, c;
		double r;

		memcpy(v, s->ns[wl], sizeof(double) * (size_t)reps);
		a = bench_stat_of(v, reps);
		memcpy(v, t->ns[wl], sizeof(double) * (size_t)reps);
		c = bench_stat_of(v, reps);
		r = c.median / a.median;
		worst = r > worst ? r : worst;
		printf("%-12s %10.1f %10.1f %10.1f %10.1f %8.3f\n", wl_name[wl], a.median, a.min,
		       c.median, c.min, r);
		bench_result_init(&res, "scale");
		sb_printf(&res.sb, " %s", wl_name[wl]);
		bench_result_add(&res, "ns_16g", "%.1f", a.median);
		bench_result_add(&res, "ns_1t", "%.1f", c.median);
		bench_result_add(&res, "min_ns_16g", "%.1f", a.min);
		bench_result_add(&res, "min_ns_1t", "%.1f", c.min);
		bench_result_add(&res, "ratio", "%.3f", r);
		bench_result_print(&res);
	}
	report_peer(b);
	printf("compaction pass: 16 GiB %.1f ms (%.1f ns per pageblock, %lu moved, %.1f ns "
	       "each), 1 TiB %.1f ms (%.1f ns per pageblock, %lu moved, %.1f ns each)\n",
	       s->compact_ms, s->compact_pb_ns, (unsigned long)s->moved, s->compact_move_ns,
	       t->compact_ms, t->compact_pb_ns, (unsigned long)t->moved, t->compact_move_ns);
	printf("gfa_pool_check: 16 GiB %.1f ms, 1 TiB %.1f ms\n", s->check_ms, t->check_ms);
	if (s->compact_move_ns > 0 && t->compact_move_ns / s->compact_move_ns > worst)
		worst = t->compact_move_ns / s->compact_move_ns;
	bench_goal("scale", "tib_vs_16g", worst, "<=", 1.2,
		   "largest median ratio of a workload, 1 TiB / 16 GiB (compaction per block "
		   "moved included)");
	bench_goal("scale", "tib_create_ms", t->create_ms, "<=", 1000,
		   "gfa_pool_create of 2^28 frames, ms");
	bench_goal("scale", "bytes_per_frame", (double)t->meta_bytes / (double)t->frames, "<=", 1.0,
		   "metadata per frame, pool in unsplit 2 MiB blocks");
	bench_goal("scale", "bytes_per_frame_split", b->split_bpf, "<=", 4.0,
		   "metadata per frame, every pageblock split");
	bench_result_init(&res, "scale");
	bench_result_add(&res, "bytes_per_frame", "%.3f",
			 (double)t->meta_bytes / (double)t->frames);
	bench_result_add(&res, "bytes_per_frame_split", "%.3f", b->split_bpf);
	bench_result_add(&res, "tib_vs_16g", "%.3f", worst);
	bench_result_add(&res, "tib_create_ms", "%.1f", t->create_ms);
	bench_result_add(&res, "g16_create_ms", "%.1f", s->create_ms);
	bench_result_add(&res, "tib_meta_mib", "%.1f", (double)t->meta_bytes / 1048576.0);
	bench_result_add(&res, "g16_meta_mib", "%.1f", (double)s->meta_bytes / 1048576.0);
	bench_result_add(&res, "compact_move_ratio", "%.3f",
			 s->compact_move_ns > 0 ? t->compact_move_ns / s->compact_move_ns : 0);
	bench_result_add(&res, "tib_check_ms", "%.1f", t->check_ms);
	bench_result_print(&res);
}

static struct scale_bench scale;
static const struct bench_part scale_parts[] = {
	{ NULL, run_all, report, &scale },
};

int main(int argc, char **argv)
{
	struct bench_opts o;
	int err = bench_parse_args(argc, argv, &o, 3, 0, 7, 0,
				   "gfa at 16 GiB and 1 TiB (metadata-only pools): creation, "
				   "metadata, repeat, bulk, rand and a compaction pass.");

	if (err)
		return err > 0 ? 0 : 2;
	if (o.reps > MAX_REPS)
		o.reps = MAX_REPS;
	bench_parts_run(&o, scale_parts, ARRAY_SIZE(scale_parts));
	return 0;
}
