/* Unit, property and bad-input tests of the zone/buddy core. */
#include <stdio.h>
#include "tests/test_util.h"
#include "allocator/internal.h" /* release_scans: the merge/split scan counter */

Test(buddy, create_and_initial_state)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_zone_stat st;
	uint64_t start, n;

	cr_assert_eq(gfa_pool_nr_zones(p), 1);
	cr_assert_eq(gfa_zone_span(p, 0, &start, &n), 0);
	cr_assert_eq(start, 0);
	cr_assert_eq(n, 4096);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free, 4096);
	cr_assert_eq(st.nr_free_blocks[GFA_MAX_ORDER][GFA_MT_MOVABLE], 4);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_MOVABLE], 8);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * A pool whose frames start allocated (a host pool client's): every frame held in the
 * largest aligned blocks, nothing free, the check clean; the held blocks split and free
 * as any allocation, and merge back into a pool like a fresh one.
 */
Test(buddy, a_held_pool_starts_allocated_and_gives_back_like_any_block)
{
	struct gfa_pool_config cfg;
	struct gfa_frame_info fi;
	struct gfa_zone_stat st;
	struct gfa_pool *p;
	uint64_t start, n, nr = 2 * 1024 + 512 + 8; /* two MAX_ORDER blocks, order 9, 3 */

	gfa_pool_config_init(&cfg, nr);
	p = pool_create_held(&cfg, 9);
	cr_assert_not_null(p);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free, 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_frame_lookup(p, 1500, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.head_pfn, 1024);
	cr_assert_eq(fi.order, GFA_MAX_ORDER);
	cr_assert_eq(fi.owner, 9);
	cr_assert_eq(gfa_frame_lookup(p, 2048 + 512 + 3, &fi), 0);
	cr_assert_eq(fi.order, 3);
	cr_assert_eq(gfa_free(p, 1024, GFA_PAGEBLOCK_ORDER, 9), GFA_EWRONGORDER);
	cr_assert_eq(gfa_block_split(p, 1024, GFA_MAX_ORDER, 9, GFA_PAGEBLOCK_ORDER), 0);
	cr_assert_eq(gfa_free(p, 1536, GFA_PAGEBLOCK_ORDER, 9), 0);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free, 512);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_free(p, 0, GFA_MAX_ORDER, 9), 0);
	cr_assert_eq(gfa_free(p, 1024, GFA_PAGEBLOCK_ORDER, 9), 0);
	cr_assert_eq(gfa_free(p, 2048, GFA_PAGEBLOCK_ORDER, 9), 0);
	cr_assert_eq(gfa_free(p, 2048 + 512, 3, 9), 0);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_free, nr);
	cr_assert_eq(st.nr_free_blocks[GFA_MAX_ORDER][GFA_MT_MOVABLE], 2, "the halves merged");
	cr_assert_eq(gfa_zone_span(p, 0, &start, &n), 0);
	cr_assert_eq(n, nr);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
	errno = 0;
	cr_assert_null(pool_create_held(NULL, 9));
	cr_assert_eq(errno, EFAULT);
}

Test(buddy, create_bad_config)
{
	struct gfa_pool_config cfg;

	errno = 0;
	cr_assert_null(gfa_pool_create(NULL));
	cr_assert_eq(errno, EFAULT);
	gfa_pool_config_init(&cfg, 100); /* smaller than a pageblock */
	cr_assert_null(gfa_pool_create(&cfg));
	cr_assert_eq(errno, EINVAL);
	gfa_pool_config_init(&cfg, 4096);
	cfg.nr_zones = 0;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_assert_eq(errno, EINVAL);
	cfg.nr_zones = GFA_MAX_ZONES + 1;
	cr_assert_null(gfa_pool_create(&cfg));
	cr_assert_eq(errno, EINVAL);
}

Test(buddy, odd_sized_zones_are_tiled)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;

	gfa_pool_config_init(&cfg, 512 * 3 + 7);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = 5000;
	cfg.zones[1].node = 1;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	cr_assert_eq(tu_free_frames(p), 512 * 3 + 7 + 5000);
	cr_assert_eq(gfa_pfn_to_zone(p, 0), 0);
	cr_assert_eq(gfa_pfn_to_zone(p, 2048), 1); /* zone 1 starts on a 4 MiB boundary */
	cr_assert_eq(gfa_pfn_to_zone(p, 2000), GFA_ERANGE);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(buddy, split_and_merge)
{
	struct gfa_pool *p = tu_pool(1024);
	struct gfa_frame_info fi;
	int64_t a = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 7, 0);
	int64_t b = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 8, 0);

	cr_assert_geq(a, 0);
	cr_assert_geq(b, 0);
	cr_assert_eq(b & 7, 0, "order-3 block aligned");
	cr_assert_eq(gfa_frame_lookup(p, (uint64_t)b + 5, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.head_pfn, (uint64_t)b);
	cr_assert_eq(fi.order, 3);
	cr_assert_eq(fi.owner, 8);
	cr_assert_eq(tu_free_frames(p), 1024 - 9);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 0, 7), 0);
	cr_assert_eq(gfa_free(p, (uint64_t)b, 3, 8), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_frame_lookup(p, 0, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_FREE);
	cr_assert_eq(fi.order, GFA_MAX_ORDER, "everything merged back to one 4 MiB block");
	gfa_pool_destroy(p);
}

Test(buddy, exhaust_and_enomem)
{
	struct gfa_pool *p = tu_pool(1024);
	int64_t pfns[2];
	struct gfa_vmstat vs;

	pfns[0] = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 1, 0);
	pfns[1] = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 1, 0);
	cr_assert_geq(pfns[0], 0);
	cr_assert_geq(pfns[1], 0);
	cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), GFA_ENOMEM);
	gfa_pool_vmstat(p, &vs);
	cr_assert_eq(vs.pgalloc_fail, 1);
	cr_assert_eq(vs.alloc_order[9], 2);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

struct tally {
	uint64_t blocks, frames;
};
static int count_block(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
		       uint64_t owner)
{
	struct tally *t = arg;

	(void)pfn;
	(void)mt;
	(void)owner;
	t->blocks++;
	t->frames += 1UL << order;
	return 0;
}

Test(buddy, iterate_allocated)
{
	struct gfa_pool *p = tu_pool(2048);
	struct tally t = { 0, 0 };

	for (unsigned int o = 0; o < 5; o++)
		cr_assert_geq(gfa_alloc(p, 0, o, GFA_MT_UNMOVABLE, o, 0), 0);
	cr_assert_eq(gfa_pool_for_each_allocated(p, count_block, &t), 0);
	cr_assert_eq(t.blocks, 5);
	cr_assert_eq(t.frames, 31);
	gfa_pool_destroy(p);
}

/* ---- bad input: its own errno, counted, nothing changed ---- */

Test(buddy, bad_inputs)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 42, 0);
	struct gfa_frame_info fi;

	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_alloc(NULL, 0, 0, GFA_MT_MOVABLE, 0, 0), GFA_EFAULT);
	cr_assert_eq(gfa_free(NULL, 0, 0, 0), GFA_EFAULT);
	EXPECT_BAD(p, gfa_alloc(p, 0, GFA_MAX_ORDER + 1, GFA_MT_MOVABLE, 0, 0), GFA_EORDER,
		   err_order);
	EXPECT_BAD(p, gfa_alloc(p, 0, 0, (enum gfa_migratetype)7, 0, 0), GFA_EMIGRATE,
		   err_migratetype);
	EXPECT_BAD(p, gfa_alloc(p, 0, 0, GFA_MT_ISOLATE, 0, 0), GFA_EMIGRATE, err_migratetype);
	EXPECT_BAD(p, gfa_alloc(p, 3, 0, GFA_MT_MOVABLE, 0, 0), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_free(p, 1UL << 40, 0, 42), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_free(p, 4095, 1, 42), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a + 1, 1, 42), GFA_EALIGN, err_align);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a, 11, 42), GFA_EORDER, err_order);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a, 1, 42), GFA_EWRONGORDER, err_wrong_order);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a, 2, 43), GFA_EOWNER, err_owner);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a + 1, 0, 42), GFA_ENOTHEAD, err_not_head);
	EXPECT_BAD(p, gfa_free(p, 2048, 0, 0), GFA_EDOUBLEFREE, err_double_free);
	EXPECT_BAD(p, gfa_frame_lookup(p, 1UL << 40, &fi), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_frame_lookup(p, 0, NULL), GFA_EFAULT, err_fault);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 2, 42), 0);
	EXPECT_BAD(p, gfa_free(p, (uint64_t)a, 2, 42), GFA_EDOUBLEFREE, err_double_free);
	gfa_pool_destroy(p);
}

/* ---- property test against a bitmap reference model ---- */

struct model {
	uint8_t *used; /* 1 per allocated frame */
	uint64_t nr, nfree;
	struct {
		uint64_t pfn, owner;
		unsigned int order;
	} * live;
	size_t nlive;
};

static bool model_has_free_run(const struct model *m, const uint64_t *starts, const uint64_t *sizes,
			       unsigned int nz, unsigned int order)
{
	uint64_t sz = 1UL << order;

	for (unsigned int z = 0; z < nz; z++)
		for (uint64_t b = starts[z]; b + sz <= starts[z] + sizes[z]; b += sz) {
			uint64_t i;

			for (i = 0; i < sz && !m->used[b + i]; i++)
				;
			if (i == sz)
				return true;
		}
	return false;
}

/*
 * Random allocations and frees on a pool of two zones against the model.  fill: free
 * only one time in four while more than a tenth of the pool is free, so it runs full.
 */
static void property_vs_model(const struct gfa_pool_config *cfg, long ops, bool fill)
{
	struct gfa_pool *p;
	struct model m = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ULL, starts[2], sizes[2];
	long enomem = 0;

	p = gfa_pool_create(cfg);
	cr_assert_not_null(p);
	for (unsigned int z = 0; z < 2; z++)
		gfa_zone_span(p, z, &starts[z], &sizes[z]);
	m.nr = starts[1] + sizes[1];
	m.used = calloc(m.nr, 1);
	m.live = calloc(m.nr, sizeof(*m.live));
	m.nfree = sizes[0] + sizes[1];
	for (long op = 0; op < ops; op++) {
		uint64_t r = tu_rand(&seed);
		bool to_free = fill && m.nfree * 10 > sizes[0] + sizes[1] ? !(r & 6) : (r & 1);

		if (m.nlive && to_free) {
			size_t i = (r >> 8) % m.nlive;

			cr_assert_eq(gfa_free(p, m.live[i].pfn, m.live[i].order, m.live[i].owner),
				     0);
			memset(m.used + m.live[i].pfn, 0, 1UL << m.live[i].order);
			m.nfree += 1UL << m.live[i].order;
			m.live[i] = m.live[--m.nlive];
		} else {
			/* geometric order distribution, mostly small blocks */
			unsigned int order =
				(unsigned int)__builtin_ctzll((r >> 16) | (1ULL << 10));
			unsigned int zone = (r >> 40) & 1, mt = (unsigned int)((r >> 42) % 3);
			int64_t pfn = gfa_alloc(p, zone, order, mt, op, 0);

			if (pfn == GFA_ENOMEM) {
				/* buddy property: a free aligned run would have merged and been found */
				if (enomem++ < 200) {
					uint64_t s[1] = { starts[zone] }, z[1] = { sizes[zone] };

					cr_assert(!model_has_free_run(&m, s, z, 1, order),
						  "ENOMEM at order %u with a free aligned run",
						  order);
				}
				continue;
			}
			cr_assert_geq(pfn, 0);
			cr_assert_eq(gfa_pfn_to_zone(p, (uint64_t)pfn), (int)zone);
			for (uint64_t i = 0; i < (1UL << order); i++)
				cr_assert_eq(m.used[pfn + i], 0, "pfn %lu handed out twice",
					     pfn + i);
			memset(m.used + pfn, 1, 1UL << order);
			m.nfree -= 1UL << order;
			m.live[m.nlive].pfn = (uint64_t)pfn;
			m.live[m.nlive].order = order;
			m.live[m.nlive].owner = (uint64_t)op;
			m.nlive++;
		}
		if (op % 100000 == 0) {
			ASSERT_POOL_OK(p);
			cr_assert_eq(tu_free_frames(p), m.nfree);
		}
		if (op % 1000 == 0 && m.nlive) {
			struct gfa_frame_info fi;
			size_t i = (r >> 20) % m.nlive;
			uint64_t off = (r >> 30) & ((1UL << m.live[i].order) - 1);

			cr_assert_eq(gfa_frame_lookup(p, m.live[i].pfn + off, &fi), 0);
			cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
			cr_assert_eq(fi.head_pfn, m.live[i].pfn);
			cr_assert_eq(fi.owner, m.live[i].owner);
		}
	}
	ASSERT_POOL_OK(p);
	while (m.nlive) {
		m.nlive--;
		cr_assert_eq(gfa_free(p, m.live[m.nlive].pfn, m.live[m.nlive].order,
				      m.live[m.nlive].owner),
			     0);
	}
	cr_assert_eq(tu_free_frames(p), sizes[0] + sizes[1]);
	ASSERT_POOL_OK(p);
	free(m.used);
	free(m.live);
	gfa_pool_destroy(p);
}

Test(buddy, property_random_ops_vs_model, .timeout = 600)
{
	struct gfa_pool_config cfg;

	gfa_pool_config_init(&cfg, 8192 + 512);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = 4096 + 7;
	property_vs_model(&cfg, 1000000, false);
}

/*
 * The same on arenas (decisions 38): zone 0 in five (the last short), filled until
 * allocations cross from this CPU's arena into the others; every ENOMEM is checked
 * against the model's free runs, which never cross an arena.
 */
Test(buddy, property_random_ops_vs_model_on_arenas, .timeout = 600)
{
	struct gfa_pool_config cfg;

	gfa_pool_config_init(&cfg, (4UL << 15) + (1UL << 14) + 512);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = 4096 + 7;
	cfg.arenas = 8;
	property_vs_model(&cfg, 1000000, true);
}

/* ---- fragmentation avoidance ---- */

struct unmov {
	uint8_t *pb;
};
static int mark_unmovable(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
			  uint64_t owner)
{
	struct unmov *u = arg;

	(void)order;
	(void)owner;
	if (mt == GFA_MT_UNMOVABLE)
		u->pb[pfn >> GFA_PAGEBLOCK_ORDER] = 1;
	return 0;
}

Test(buddy, unmovable_stays_in_few_pageblocks)
{
	const uint64_t frames = 64 * GFA_PAGEBLOCK_FRAMES;
	struct gfa_pool *p = tu_pool(frames);
	uint64_t *live = calloc(frames, sizeof(*live)), seed = 12345, nlive = 0, unmov = 0;
	uint8_t pb[64] = { 0 };
	struct unmov u = { pb };
	unsigned int used_pb = 0;

	/* movable churn at ~70% occupancy with 1 unmovable allocation in 50 */
	for (int round = 0; round < 200000; round++) {
		uint64_t r = tu_rand(&seed);

		if (nlive > frames * 7 / 10 || (nlive && (r & 3) == 0)) {
			uint64_t i = (r >> 8) % nlive;

			cr_assert_eq(gfa_free(p, live[i], 0, 1), 0);
			live[i] = live[--nlive];
		} else if ((r >> 4) % 50 == 0 && unmov < 1000) {
			cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, 0), 0);
			unmov++;
		} else {
			int64_t pfn = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0);

			cr_assert_geq(pfn, 0);
			live[nlive++] = (uint64_t)pfn;
		}
	}
	gfa_pool_for_each_allocated(p, mark_unmovable, &u);
	for (int i = 0; i < 64; i++)
		used_pb += pb[i];
	/* 1000 unmovable frames need 2 pageblocks; allow a little slack, far from 64 */
	cr_assert_leq(used_pb, 4, "unmovable frames spread over %u of 64 pageblocks", used_pb);
	cr_assert_geq(used_pb, 2);
	ASSERT_POOL_OK(p);
	free(live);
	gfa_pool_destroy(p);
}

Test(buddy, fallback_steals_pageblock)
{
	struct gfa_pool *p = tu_pool(2048);
	struct gfa_zone_stat st;
	struct gfa_vmstat vs;

	cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_RECLAIMABLE, 0, 0), 0);
	gfa_zone_stat(p, 0, &st);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_RECLAIMABLE], 2,
		     "an order-10 block was claimed whole");
	gfa_pool_vmstat(p, &vs);
	cr_assert_eq(vs.pgalloc_fallback, 1);
	cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 0, GFA_ALLOC_NOFALLBACK), GFA_ENOMEM);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(buddy, split_allocated_block)
{
	struct gfa_pool *p = tu_pool(2048);
	int64_t a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 3, 0);
	struct gfa_frame_info fi;

	cr_assert_eq(gfa_block_set_index(p, (uint64_t)a, 3, 1000), 0);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a, 9, 4, 0), GFA_EOWNER);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a, 8, 3, 0), GFA_EWRONGORDER);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a, 9, 3, 9), GFA_EORDER);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a, 9, 3, 2), 0);
	cr_assert_eq(gfa_frame_lookup(p, (uint64_t)a + 9, &fi), 0);
	cr_assert_eq(fi.head_pfn, (uint64_t)a + 8);
	cr_assert_eq(fi.order, 2);
	cr_assert_eq(fi.index, 1008);
	cr_assert_eq(fi.owner, 3);
	ASSERT_POOL_OK(p);
	for (uint64_t k = 0; k < 512; k += 4)
		cr_assert_eq(gfa_free(p, (uint64_t)a + k, 2, 3), 0);
	cr_assert_eq(tu_free_frames(p), 2048);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Splitting a tail frame (inside an allocated block) or a free block: a clean
 * GFA_ENOTHEAD, nothing changed.  The tail case once re-took the zone lock split
 * already held (a deadlock the timeout catches).
 */
Test(buddy, split_of_a_tail_or_free_block_is_enothead, .timeout = 20)
{
	struct gfa_pool *p = tu_pool(4096);
	int64_t a = gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 1, 0);
	int64_t b = gfa_alloc(p, 0, 1, GFA_MT_MOVABLE, 1, 0);
	struct gfa_vmstat vs0, vs1;

	cr_assert(a >= 0 && b >= 0);
	cr_assert_eq(gfa_free(p, (uint64_t)b, 1, 1), 0);
	gfa_pool_vmstat(p, &vs0);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a + 2, 1, 1, 0), GFA_ENOTHEAD);
	cr_assert_eq(gfa_block_split(p, (uint64_t)b, 1, 1, 0), GFA_ENOTHEAD);
	gfa_pool_vmstat(p, &vs1);
	cr_assert_eq(vs1.err_not_head, vs0.err_not_head + 2);
	cr_assert_eq(tu_free_frames(p), 4096 - 4);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 2, 1), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * A zone whose last pageblock is partial (600 frames): fallback stealing must neither
 * read past the zone (the last zone: past the descriptor array) nor claim that
 * pageblock by counting the frames it does not have.
 */
static void steal_from_partial_pageblock(unsigned int nr_zones)
{
	struct gfa_pool_config cfg;
	struct gfa_zone_stat st;
	struct gfa_pool *p;

	gfa_pool_config_init(&cfg, 600);
	if (nr_zones == 2) {
		cfg.nr_zones = 2;
		cfg.zones[1].nr_frames = 512;
	}
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	cr_assert_eq(gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 1, 0), 0);
	for (int i = 0; i < 80; i++)
		cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, 0), 512);
	cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, 0), 512);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_UNMOVABLE], 0,
		     "8 free frames of 88 claimed the partial pageblock");
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(buddy, fallback_in_a_partial_last_pageblock_of_the_last_zone)
{
	steal_from_partial_pageblock(1);
}

Test(buddy, fallback_in_a_partial_last_pageblock_before_another_zone)
{
	steal_from_partial_pageblock(2);
}

/* pageblock_steal counts pageblocks whose type changed, not every claim. */
Test(buddy, pageblock_steal_counts_only_changed_pageblocks)
{
	struct gfa_pool *p = tu_pool(512);
	struct gfa_vmstat vs0, vs1;
	struct gfa_zone_stat st;

	cr_assert_eq(gfa_alloc(p, 0, 8, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(gfa_alloc(p, 0, 7, GFA_MT_MOVABLE, 1, 0), 256);
	cr_assert_eq(gfa_alloc(p, 0, 6, GFA_MT_MOVABLE, 1, 0), 384);
	/* 64 free + 0 alike < 256: the pageblock stays MOVABLE, its free blocks move */
	cr_assert_eq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, GFA_ALLOC_NOCOMPACT), 448);
	gfa_pool_vmstat(p, &vs0);
	cr_assert_eq(vs0.pageblock_steal, 0);
	/* a MOVABLE fallback "claims" the pageblock that was MOVABLE all along */
	cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 1, GFA_ALLOC_NOCOMPACT), 449);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_MOVABLE], 1, "the pageblock was MOVABLE all along");
	gfa_pool_vmstat(p, &vs1);
	cr_assert_eq(vs1.pageblock_steal, 0, "no pageblock changed type, pageblock_steal is %lu",
		     (unsigned long)vs1.pageblock_steal);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * A MOVABLE order-9 block merging with a free UNMOVABLE order-9 buddy: the order-10
 * block went on the MOVABLE list with pageblock 1 still UNMOVABLE, so that wholly free
 * UNMOVABLE pageblock went to MOVABLE NOFALLBACK requests (Linux 6.10 retypes the
 * buddy); gfa_pool_check did not notice.
 */
Test(buddy, merge_across_pageblock_types_retypes_the_buddy)
{
	struct gfa_pool *p = tu_pool(1024);
	struct gfa_frame_info fi;
	int64_t a, u, m0, m1;

	a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 1, 0);
	u = gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 2, 0); /* claims pageblock 1 */
	cr_assert(a == 0 && u == 512);
	cr_assert_eq(gfa_free(p, (uint64_t)u, 0, 2), 0);
	cr_assert_eq(gfa_free(p, (uint64_t)a, 9, 1), 0); /* one order-10 block */
	ASSERT_POOL_OK(p);
	cr_assert_eq(gfa_frame_lookup(p, 512, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_FREE);
	cr_assert_eq(fi.order, 10);
	cr_assert_eq(fi.block_mt, fi.mt, "free order-10 block on the %s list spans a %s pageblock",
		     gfa_migratetype_name(fi.mt), gfa_migratetype_name(fi.block_mt));
	m0 = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 3, GFA_ALLOC_NOFALLBACK | GFA_ALLOC_NOCOMPACT);
	m1 = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 3, GFA_ALLOC_NOFALLBACK | GFA_ALLOC_NOCOMPACT);
	cr_assert(m0 >= 0 && m1 >= 0);
	cr_assert_eq(gfa_frame_lookup(p, (uint64_t)m1, &fi), 0);
	cr_assert_eq(fi.block_mt, GFA_MT_MOVABLE,
		     "NOFALLBACK MOVABLE request got pfn %ld of a %s pageblock", (long)m1,
		     gfa_migratetype_name(fi.block_mt));
	gfa_pool_destroy(p);
}

/*
 * pgalloc_blocks - pgfree_blocks is the number of blocks callers hold (the collapse and
 * compaction tests rely on it).  A split turns one held block into 2^(order-new_order):
 * freeing the pieces must not drive the difference below zero.
 */
Test(buddy, split_keeps_block_counters_consistent)
{
	struct gfa_pool *p = tu_pool(2048);
	int64_t a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 3, 0);
	struct gfa_vmstat vs;

	cr_assert_geq(a, 0);
	cr_assert_eq(gfa_block_split(p, (uint64_t)a, 9, 3, 0), 0);
	gfa_pool_vmstat(p, &vs);
	cr_assert_eq((int64_t)(vs.pgalloc_blocks - vs.pgfree_blocks), 512,
		     "after the split the caller holds 512 blocks, counters say %ld",
		     (long)(vs.pgalloc_blocks - vs.pgfree_blocks));
	for (uint64_t k = 0; k < 512; k++)
		cr_assert_eq(gfa_free(p, (uint64_t)a + k, 0, 3), 0);
	gfa_pool_vmstat(p, &vs);
	cr_assert_eq((int64_t)(vs.pgalloc_blocks - vs.pgfree_blocks), 0,
		     "nothing held, pgalloc_blocks - pgfree_blocks = %ld",
		     (long)(vs.pgalloc_blocks - vs.pgfree_blocks));
	cr_assert_eq(vs.alloc_order[0], vs.free_order[0], "order-0: %lu allocated, %lu freed",
		     (unsigned long)vs.alloc_order[0], (unsigned long)vs.free_order[0]);
	cr_assert_eq(vs.pgalloc, vs.pgfree, "pages: %lu allocated, %lu freed",
		     (unsigned long)vs.pgalloc, (unsigned long)vs.pgfree);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* Allocate and free every frame at order 0, then every block at order 9: splits from
 * GFA_MAX_ORDER and merges up to it, in the blocks below `end` only. */
static void churn_below(struct gfa_pool *p, uint64_t end)
{
	static int64_t pfns[8192];
	unsigned int n;
	int64_t pfn;

	for (unsigned int order = 0; order <= GFA_PAGEBLOCK_ORDER; order += GFA_PAGEBLOCK_ORDER) {
		for (n = 0; n < end >> order; n++) {
			pfn = gfa_alloc(p, 0, order, GFA_MT_MOVABLE, 5, 0);
			cr_assert(pfn >= 0 && (uint64_t)pfn < end, "pfn %ld", (long)pfn);
			pfns[n] = pfn;
		}
		for (unsigned int i = 0; i < n; i++)
			cr_assert_eq(gfa_free(p, (uint64_t)pfns[i], order, 5), 0);
	}
}

/*
 * Merges into GFA_MAX_ORDER blocks and splits from them ask whether the block holds
 * a released frame (to queue it last).  With nothing released in it, the zone's and
 * pageblocks' counts answer: no scan of 1024 release bits under the zone lock.
 */
Test(buddy, max_order_merge_and_split_scan_no_release_bits)
{
	struct gfa_pool *p = tu_pool(8192);

	churn_below(p, 8192);
	cr_assert_eq(p->zones[0].arenas[0].release_scans, 0, "%lu scans with nothing released",
		     (unsigned long)p->zones[0].arenas[0].release_scans);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

Test(buddy, released_frames_elsewhere_cost_no_scan)
{
	struct gfa_pool *p = tu_pool(8192);
	struct gfa_frame_range r[8];
	struct gfa_zone_stat st;
	int n = zone_release_take(p, 0, r, 8, 1024);

	/* the release takes the highest frames: the last GFA_MAX_ORDER block */
	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++) {
		cr_assert_geq(r[i].pfn, 8192 - MAX_ORDER_FRAMES);
		cr_assert_eq(zone_release_done(p, r[i].pfn, r[i].nr, true), 0);
	}
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_gt(st.nr_released, 0);
	/* blocks with released frames are queued last: the churn stays below them */
	churn_below(p, 8192 - MAX_ORDER_FRAMES);
	cr_assert_eq(p->zones[0].arenas[0].release_scans, 0,
		     "%lu scans of blocks without released frames",
		     (unsigned long)p->zones[0].arenas[0].release_scans);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}
