/*
 * Large pools without backing memory: the allocator layer keeps metadata only, so a
 * 1 TiB pool (2^28 frames) is created, used and checked on a machine of a few GiB,
 * and gfa_zone_stat's metadata_bytes says what its frames cost.
 */
#include "tests/test_util.h"
#include "common/ktime.h"
#include "allocator/internal.h" /* zone_nr_tail_pageblocks */
#include "allocator/layers.h"

#define TIB_FRAMES (1ULL << 28)

static double now_sec(void)
{
	return (double)ktime_get_ns() / 1e9;
}

static uint64_t pool_metadata_bytes(struct gfa_pool *p, uint64_t *frames)
{
	struct gfa_zone_stat st;
	uint64_t bytes = 0;

	*frames = 0;
	for (unsigned int z = 0; z < gfa_pool_nr_zones(p); z++) {
		cr_assert_eq(gfa_zone_stat(p, z, &st), 0);
		bytes += st.metadata_bytes;
		*frames += st.nr_frames;
	}
	return bytes;
}

/*
 * Metadata scales with what is split: a pool in unsplit blocks pays a head descriptor
 * per pageblock, its pageblock and two bits a frame (under 0.3 bytes a frame); each
 * pageblock split backs its 8 KiB of tail descriptors, and they stay until the
 * pageblock is one free block a release holds in flight.
 */
Test(scale, metadata_scales_with_what_is_split)
{
	const uint64_t tails = GFA_PAGEBLOCK_FRAMES * 16;
	struct gfa_pool_config cfg;
	struct gfa_pool *p;
	uint64_t frames, bytes, unsplit, nr_pb = 0;
	static int64_t pfn[1u << 16];
	struct gfa_frame_range r[8];
	struct gfa_release_policy rp = { .low = 0, .high = 0, .min_empty_frac = 1 };
	struct gfa_vmstat vs;

	gfa_pool_config_init(&cfg, 1u << 16);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = (1u << 15) + GFA_PAGEBLOCK_FRAMES;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	unsplit = pool_metadata_bytes(p, &frames);
	cr_assert_eq(frames, (1u << 16) + (1u << 15) + GFA_PAGEBLOCK_FRAMES);
	cr_assert(unsplit * 10 <= frames * 3, "%lu bytes for %lu frames", (unsigned long)unsplit,
		  (unsigned long)frames);
	/* split every pageblock of zone 0 into order-0 blocks */
	for (uint64_t i = 0; i < (1u << 16); i++) {
		pfn[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0);
		cr_assert_geq(pfn[i], 0);
	}
	ASSERT_POOL_OK(p);
	nr_pb = (1u << 16) / GFA_PAGEBLOCK_FRAMES;
	bytes = pool_metadata_bytes(p, &frames);
	cr_assert_eq(bytes, unsplit + nr_pb * tails, "%lu bytes, %lu unsplit", (unsigned long)bytes,
		     (unsigned long)unsplit);
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	cr_assert_eq(vs.metadata_split, nr_pb);
	/* merged again, the tails stay backed: only a release in flight drops them */
	for (uint64_t i = 0; i < (1u << 16); i++)
		cr_assert_eq(gfa_free(p, (uint64_t)pfn[i], 0, 5), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(pool_metadata_bytes(p, &frames), bytes);
	/* released to the host, zone 0's pageblocks drop their tails */
	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	for (int n; (n = zone_release_take(p, 0, r, 8, 1u << 16)) > 0;)
		for (int i = 0; i < n; i++)
			cr_assert_eq(zone_release_done(p, r[i].pfn, r[i].nr, true), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(pool_metadata_bytes(p, &frames), unsplit,
		     "%lu bytes after the release, %lu unsplit",
		     (unsigned long)pool_metadata_bytes(p, &frames), (unsigned long)unsplit);
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	cr_assert_eq(vs.metadata_dropped, nr_pb);
	/* and split again from zeroed tails, as the first time */
	for (uint64_t i = 0; i < (1u << 16); i++)
		cr_assert_geq(pfn[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(pool_metadata_bytes(p, &frames), bytes);
	for (uint64_t i = 0; i < (1u << 16); i++)
		cr_assert_eq(gfa_free(p, (uint64_t)pfn[i], 0, 5), 0);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * 1 TiB (a sixteenth of that under a sanitizer, whose checks make the walk of every frame
 * several times slower): created, blocks of every order taken from all over it through
 * a cache and the zone path, checked with them held, then freed to an empty pool.
 */
Test(scale, tib_pool_without_backing, .timeout = 240)
{
	uint64_t nr = tu_sanitizer() ? TIB_FRAMES / 16 : TIB_FRAMES, frames, bytes;
	enum { N = 4096 };
	static int64_t pfn[N];
	static unsigned int ord[N];
	struct gfa_pool *p;
	struct gfa_pcp *c;
	uint64_t seed = 28;
	double t0 = now_sec(), t_create, t_check;

	p = tu_pool(nr);
	t_create = now_sec() - t0;
	bytes = pool_metadata_bytes(p, &frames);
	cr_assert_eq(frames, nr);
	cr_log_info("%lu frames: created in %.3f s, metadata %.1f MiB (%.3f bytes/frame)",
		    (unsigned long)nr, t_create, (double)bytes / 1048576.0,
		    (double)bytes / (double)frames);
	c = gfa_pcp_create(p, 0);
	cr_assert_not_null(c);
	for (int i = 0; i < N; i++) {
		ord[i] = (unsigned int)(tu_rand(&seed) % (GFA_MAX_ORDER + 1));
		pfn[i] = i & 1 ? gfa_pcp_alloc(c, ord[i], GFA_MT_MOVABLE, 7, 0) :
				 gfa_alloc(p, 0, ord[i], GFA_MT_MOVABLE, 7, 0);
		cr_assert_geq(pfn[i], 0, "block %d of order %u: %ld", i, ord[i], (long)pfn[i]);
	}
	for (int i = 0; i < N; i += 2)
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)pfn[i], ord[i], 7), 0);
	t0 = now_sec();
	ASSERT_POOL_OK(p);
	t_check = now_sec() - t0;
	cr_log_info("gfa_pool_check of %lu frames: %.3f s", (unsigned long)nr, t_check);
	for (int i = 1; i < N; i += 2)
		cr_assert_eq(gfa_free(p, (uint64_t)pfn[i], ord[i], 7), 0);
	gfa_pcp_destroy(c);
	cr_assert_eq(tu_free_frames(p), nr);
	gfa_pool_destroy(p);
}

/* A layer that keeps a block allocated to itself gives its tails back, and only its own. */
Test(scale, a_held_block_gives_back_its_tails)
{
	const uint64_t tails = GFA_PAGEBLOCK_FRAMES * 16;
	struct gfa_pool *p = tu_pool(2 * GFA_PAGEBLOCK_FRAMES);
	static int64_t pfn[2 * GFA_PAGEBLOCK_FRAMES];
	uint64_t frames, unsplit = pool_metadata_bytes(p, &frames);
	struct gfa_vmstat vs;
	int64_t b;
	int err;

	for (unsigned int i = 0; i < 2 * GFA_PAGEBLOCK_FRAMES; i++)
		cr_assert_geq(pfn[i] = gfa_alloc(p, 0, 0, GFA_MT_MOVABLE, 5, 0), 0);
	for (unsigned int i = 0; i < 2 * GFA_PAGEBLOCK_FRAMES; i++)
		cr_assert_eq(gfa_free(p, (uint64_t)pfn[i], 0, 5), 0);
	cr_assert_eq(pool_metadata_bytes(p, &frames), unsplit + 2 * tails);
	b = gfa_alloc(p, 0, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, 6, 0);
	cr_assert_geq(b, 0);
	/* refused: another owner's, a wrong order, a frame inside, below order 9 */
	cr_assert_eq(zone_held_drop_tails(p, (uint64_t)b, GFA_PAGEBLOCK_ORDER, 5), GFA_EOWNER);
	err = zone_held_drop_tails(p, (uint64_t)b, GFA_MAX_ORDER, 6);
	cr_assert(err == GFA_EALIGN || err == GFA_EWRONGORDER, "%d", err);
	cr_assert_eq(zone_held_drop_tails(p, (uint64_t)b + 8, 3, 6), GFA_EORDER);
	cr_assert_eq(pool_metadata_bytes(p, &frames), unsplit + 2 * tails);
	ASSERT_POOL_OK(p);
	cr_assert_eq(zone_held_drop_tails(p, (uint64_t)b, GFA_PAGEBLOCK_ORDER, 6), 0);
	cr_assert_eq(pool_metadata_bytes(p, &frames), unsplit + tails);
	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	cr_assert_eq(vs.metadata_dropped, 1);
	ASSERT_POOL_OK(p);
	/* still the owner's, whole */
	cr_assert_eq(gfa_free(p, (uint64_t)b, GFA_PAGEBLOCK_ORDER, 6), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), 2 * GFA_PAGEBLOCK_FRAMES);
	gfa_pool_destroy(p);
}

/* A held pool whose last pageblock is partial marks it: its pieces sit in tail slots. */
Test(scale, a_held_pool_marks_its_partial_pageblock)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;
	uint64_t frames;

	gfa_pool_config_init(&cfg, MAX_ORDER_FRAMES + 384);
	p = pool_create_held(&cfg, 9);
	cr_assert_not_null(p);
	ASSERT_POOL_OK(p);
	/* nothing written before a frame is named (deferred.c) */
	cr_assert_eq(zone_nr_tail_pageblocks(&p->zones[0]), 0);
	cr_assert_eq(gfa_free(p, MAX_ORDER_FRAMES + 256, 7, 9), 0);
	/* 1024 frames in one block, then 256 + 128 in one pageblock: its tails are backed */
	cr_assert_eq(zone_nr_tail_pageblocks(&p->zones[0]), 1);
	cr_assert_geq(pool_metadata_bytes(p, &frames), GFA_PAGEBLOCK_FRAMES * 16);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* While one done gives a block's tails back unlocked, another done of it is refused. */
Test(scale, a_block_whose_tails_are_going_is_no_other_dones)
{
	struct gfa_pool *p = tu_pool(MAX_ORDER_FRAMES);
	struct gfa_release_policy rp = { .low = 0, .high = 0, .min_empty_frac = 1 };
	struct gfa_frame_range r[4];
	int n;

	cr_assert_eq(gfa_zone_set_release_policy(p, 0, &rp), 0);
	n = zone_release_take(p, 0, r, 4, MAX_ORDER_FRAMES);
	cr_assert_eq(n, 1);
	/* as zone_take_tail_marks leaves it, on the block's second pageblock only */
	pfn_pageblock(&p->zones[0], r[0].pfn + GFA_PAGEBLOCK_FRAMES)->flags |= PB_TAILS_GOING;
	cr_assert_eq(zone_release_done(p, r[0].pfn, r[0].nr, true), GFA_EBUSY);
	pfn_pageblock(&p->zones[0], r[0].pfn + GFA_PAGEBLOCK_FRAMES)->flags &=
		(uint8_t)~PB_TAILS_GOING;
	cr_assert_eq(zone_release_done(p, r[0].pfn, r[0].nr, true), 0);
	ASSERT_POOL_OK(p);
	cr_assert_eq(tu_free_frames(p), MAX_ORDER_FRAMES);
	gfa_pool_destroy(p);
}

static int count_frames(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
			uint64_t owner)
{
	(void)pfn, (void)mt, (void)owner;
	*(uint64_t *)arg += 1ULL << order;
	return 0;
}

/*
 * A held pool (a host pool client's) writes a section's metadata when a call first
 * names one of its frames, so what it costs follows what it uses, not the pool's size:
 * a 64 GiB held pool costs a few KiB until a frame is named, and one section's worth
 * (a page of heads, its pageblocks and bitmaps) for each section used after.
 */
Test(scale, a_held_pool_writes_a_section_when_a_frame_of_it_is_named)
{
	const uint64_t nr = 64ULL << (30 - GFA_FRAME_SHIFT), sec = DEFERRED_SECTION_FRAMES;
	struct gfa_pool_config cfg;
	struct gfa_zone_stat st;
	struct gfa_frame_info fi;
	struct gfa_pool *p;
	struct gfa_zone *z;
	uint64_t held = 0, before;

	gfa_pool_config_init(&cfg, nr);
	p = pool_create_held(&cfg, 9);
	cr_assert_not_null(p);
	z = &p->zones[0];
	cr_assert_eq(z->nr_deferred_pageblocks, z->nr_pageblocks);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_lt(st.metadata_bytes, 8192, "a 64 GiB held pool: %lu bytes before use",
		     (unsigned long)st.metadata_bytes);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_MOVABLE], z->nr_pageblocks);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_UNMOVABLE], 0);
	ASSERT_POOL_OK(p);
	before = st.metadata_bytes;
	/* a lookup answers as creation used to write it, and writes that section only */
	cr_assert_eq(gfa_frame_lookup(p, 3 * sec + 1500, &fi), 0);
	cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
	cr_assert_eq(fi.head_pfn, 3 * sec + 1024);
	cr_assert_eq(fi.order, GFA_MAX_ORDER);
	cr_assert_eq(fi.owner, 9);
	cr_assert_eq(fi.block_mt, GFA_MT_MOVABLE);
	cr_assert_eq(z->nr_deferred_pageblocks, z->nr_pageblocks - 256);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_gt(st.metadata_bytes, before);
	cr_assert_lt(st.metadata_bytes - before, 48 * 1024, "one section: %lu bytes",
		     (unsigned long)(st.metadata_bytes - before));
	/* a lease's way in: split the held block, free a half (section 5) */
	cr_assert_eq(gfa_block_split(p, 5 * sec, GFA_MAX_ORDER, 9, GFA_PAGEBLOCK_ORDER), 0);
	cr_assert_eq(gfa_free(p, 5 * sec + 512, GFA_PAGEBLOCK_ORDER, 9), 0);
	cr_assert_eq(z->nr_deferred_pageblocks, z->nr_pageblocks - 512);
	ASSERT_POOL_OK(p);
	/* half of 8 more held blocks free: compaction has work, and walks the zone in
	 * every mode (skip hints and ownership tokens too) without writing a section */
	for (uint64_t b = 1; b <= 8; b++) {
		cr_assert_eq(gfa_block_split(p, 5 * sec + b * 1024, GFA_MAX_ORDER, 9,
					     GFA_PAGEBLOCK_ORDER),
			     0);
		cr_assert_eq(gfa_free(p, 5 * sec + b * 1024, GFA_PAGEBLOCK_ORDER, 9), 0);
	}
	for (int mode = GFA_COMPACT_ASYNC; mode <= GFA_COMPACT_SYNC; mode++)
		gfa_compact_zone(p, 0, GFA_MAX_ORDER, (enum gfa_compact_mode)mode);
	gfa_compact_zone(p, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(z->nr_deferred_pageblocks, z->nr_pageblocks - 512);
	ASSERT_POOL_OK(p);
	/* the walk over allocated blocks sees every held frame, written or not */
	cr_assert_eq(gfa_pool_for_each_allocated(p, count_frames, &held), 0);
	cr_assert_eq(held, nr - 9 * 512);
	cr_assert_eq(z->nr_deferred_pageblocks, z->nr_pageblocks - 512);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
	/* a zone of one pageblock and a piece: what it counts stays what it holds */
	gfa_pool_config_init(&cfg, GFA_PAGEBLOCK_FRAMES + 88);
	p = pool_create_held(&cfg, 9);
	cr_assert_not_null(p);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_lt(st.metadata_bytes, 4096, "%lu bytes", (unsigned long)st.metadata_bytes);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/*
 * Deferred and written sections answer alike: the same calls, bad arguments among
 * them, on a held pool and on a copy with every section written first, return the same
 * and leave both pools checked clean with the same frames free.  Fresh pools every 100
 * calls, so many calls are the first to name their section.
 */
Test(scale, a_deferred_section_answers_as_a_written_one)
{
	const uint64_t nr = 8 * DEFERRED_SECTION_FRAMES + 3 * GFA_PAGEBLOCK_FRAMES + 40;
	struct gfa_pool_config cfg;
	uint64_t seed = 0x5eed, firsts = 0;

	gfa_pool_config_init(&cfg, nr);
	for (int round = 0; round < 30; round++) {
		struct gfa_pool *p[2];

		for (int k = 0; k < 2; k++) {
			p[k] = pool_create_held(&cfg, 9);
			cr_assert_not_null(p[k]);
		}
		zone_deferred_init(&p[1]->zones[0], 0, nr);
		cr_assert_eq(p[1]->zones[0].nr_deferred_pageblocks, 0);
		for (int i = 0; i < 100; i++) {
			uint64_t r = tu_rand(&seed), pfn = r % nr;
			unsigned int order = (unsigned int)((r >> 40) % (GFA_MAX_ORDER + 1));
			uint64_t owner = (r >> 50) & 1 ? 9 : 7, kind = (r >> 54) % 4;
			int ret[2];

			if ((r >> 52) & 3) /* aligned more often than by chance */
				pfn &= ~((1ULL << order) - 1);
			firsts += pfn_deferred(&p[0]->zones[0], pfn);
			for (int k = 0; k < 2; k++) {
				struct gfa_frame_info fi;

				if (kind == 0)
					ret[k] = gfa_free(p[k], pfn, order, owner);
				else if (kind == 1)
					ret[k] = gfa_block_split(p[k], pfn, order, owner,
								 order ? order - 1 : 0);
				else if (kind == 2)
					ret[k] = gfa_frame_lookup(p[k], pfn, &fi) ?:
							 (int)(fi.head_pfn ^ fi.order ^ fi.owner);
				else
					ret[k] = gfa_block_set_index(p[k], pfn, owner, (uint32_t)i);
			}
			cr_assert_eq(ret[0], ret[1],
				     "call %d (kind %lu pfn %lu order %u owner %lu): %d, %d", i,
				     (unsigned long)kind, (unsigned long)pfn, order,
				     (unsigned long)owner, ret[0], ret[1]);
		}
		cr_assert_eq(tu_free_frames(p[0]), tu_free_frames(p[1]));
		for (int k = 0; k < 2; k++) {
			ASSERT_POOL_OK(p[k]);
			gfa_pool_destroy(p[k]);
		}
	}
	cr_assert_gt(firsts, 100, "calls that named a deferred section first: %lu",
		     (unsigned long)firsts);
}
