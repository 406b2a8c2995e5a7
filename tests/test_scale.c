/*
 * Large pools without backing memory: the allocator layer keeps metadata only, so a
 * 1 TiB pool (2^28 frames) is created, used and checked on a machine of a few GiB,
 * and gfa_zone_stat's metadata_bytes says what its frames cost.
 */
#include "tests/test_util.h"
#include "common/ktime.h"

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

/* A 16-byte descriptor a frame, a bit or two and a pageblock's share: 16 to 17 bytes. */
Test(scale, metadata_bytes_per_frame)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;
	uint64_t frames, bytes;

	gfa_pool_config_init(&cfg, 1u << 16);
	cfg.nr_zones = 2;
	cfg.zones[1].nr_frames = (1u << 15) + GFA_PAGEBLOCK_FRAMES;
	p = gfa_pool_create(&cfg);
	cr_assert_not_null(p);
	bytes = pool_metadata_bytes(p, &frames);
	cr_assert_eq(frames, (1u << 16) + (1u << 15) + GFA_PAGEBLOCK_FRAMES);
	cr_assert(bytes >= 16 * frames && bytes <= 17 * frames + 16 * 1024,
		  "%lu bytes for %lu frames", (unsigned long)bytes, (unsigned long)frames);
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
