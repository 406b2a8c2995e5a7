/* Helpers shared by the allocator tests (header-only, static). */
#ifndef GFA_TEST_UTIL_H
#define GFA_TEST_UTIL_H
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/file.h>
#include <unistd.h>
#include <string.h>
#include <gfa/allocator.h>
#include <gfa/refvmm.h>

#define ASSERT_POOL_OK(pool)                                     \
	do {                                                     \
		char _m[256];                                    \
		int _e = gfa_pool_check((pool), _m, sizeof(_m)); \
		cr_assert_eq(_e, 0, "gfa_pool_check: %s", _m);   \
	} while (0)

/* The pool of cfg, which the test cannot go on without. */
static inline struct gfa_pool *tu_pool_create(const struct gfa_pool_config *cfg)
{
	struct gfa_pool *p = gfa_pool_create(cfg);

	cr_assert_not_null(p, "gfa_pool_create: %s", strerror(errno));
	return p;
}

static inline struct gfa_pool *tu_pool(uint64_t frames)
{
	struct gfa_pool_config cfg;

	gfa_pool_config_init(&cfg, frames);
	return tu_pool_create(&cfg);
}

/* One zone whose caches start at batch and high and auto-tune up to high_max (0: 8x). */
static inline void tu_pcp_config(struct gfa_pool_config *cfg, uint64_t frames, unsigned int batch,
				 unsigned int high, unsigned int high_max)
{
	gfa_pool_config_init(cfg, frames);
	cfg->pcp_batch = batch;
	cfg->pcp_high = high;
	cfg->pcp_high_max = high_max;
}

static inline struct gfa_pool *tu_pcp_pool(uint64_t frames, unsigned int batch, unsigned int high,
					   unsigned int high_max)
{
	struct gfa_pool_config cfg;

	tu_pcp_config(&cfg, frames, batch, high, high_max);
	return tu_pool_create(&cfg);
}

/* nr zones of frames each, zone z labelled node nodes[z] (all node 0 for NULL nodes). */
static inline struct gfa_pool *tu_pool_zones(unsigned int nr, uint64_t frames, const int *nodes)
{
	struct gfa_pool_config cfg;

	gfa_pool_config_init(&cfg, frames);
	cfg.nr_zones = nr;
	for (unsigned int z = 0; z < nr; z++) {
		cfg.zones[z].nr_frames = frames;
		cfg.zones[z].node = nodes ? nodes[z] : 0;
	}
	return tu_pool_create(&cfg);
}

static inline uint64_t tu_free_frames(struct gfa_pool *p)
{
	struct gfa_zone_stat st;
	uint64_t n = 0;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(p); z++) {
		cr_assert_eq(gfa_zone_stat(p, z, &st), 0);
		n += st.nr_free;
	}
	return n;
}

/* The pool's err_fault counter: a NULL argument's count. */
static inline uint64_t tu_err_fault(struct gfa_pool *p)
{
	struct gfa_vmstat vs;

	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	return vs.err_fault;
}

/* One counter of the pool's vmstat: VMS(pool, pgalloc). */
static inline uint64_t tu_vmstat_of(struct gfa_pool *p, size_t off)
{
	struct gfa_vmstat vs;

	cr_assert_eq(gfa_pool_vmstat(p, &vs), 0);
	return *(uint64_t *)((char *)&vs + off);
}
#define VMS(p, f) tu_vmstat_of(p, offsetof(struct gfa_vmstat, f))

/*
 * A bad call fails with its own errno, is counted in its err_* counter, and changes
 * nothing: the pool's pagetypeinfo before and after is the same text.
 */
#define EXPECT_BAD(p, call, err, counter)                                                      \
	do {                                                                                   \
		char _before[8192], _after[8192];                                              \
		struct gfa_vmstat _v0, _v1;                                                    \
		gfa_pool_pagetypeinfo(p, _before, sizeof(_before));                            \
		gfa_pool_vmstat(p, &_v0);                                                      \
		cr_assert_eq((call), (err), #call " should fail with " #err);                  \
		gfa_pool_vmstat(p, &_v1);                                                      \
		gfa_pool_pagetypeinfo(p, _after, sizeof(_after));                              \
		cr_assert_str_eq(_before, _after, #call " changed the pool");                  \
		cr_assert_eq(_v1.counter, _v0.counter + 1, #call " not counted in " #counter); \
		ASSERT_POOL_OK(p);                                                             \
	} while (0)

/* xorshift64*: deterministic, seedable, fast */
static inline uint64_t tu_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

/*
 * Tests that switch /sys/kernel/mm/transparent_hugepage/shmem_enabled run in parallel
 * processes: one holds this lock from the switch until it has restored the value.
 * Released on unlock or when the process exits.
 */
static inline int tu_shmem_thp_lock(void)
{
	int fd = open("/var/tmp/gfa-tests-shmem-thp.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);

	if (fd >= 0)
		flock(fd, LOCK_EX);
	return fd;
}

static inline void tu_shmem_thp_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

/* Set shmem_enabled to advise, the old value in old: 0, or -1 (not root?). */
static inline int tu_shmem_thp_advise(char *old, size_t len)
{
	return gfa_host_shmem_thp_set("advise", old, len) ? -1 : 0;
}

static inline void tu_shmem_thp_restore(const char *old)
{
	(void)gfa_host_shmem_thp_set(old, NULL, 0);
}

/*
 * vm.max_map_count is the host's: a test that lowers it holds this lock exclusively until
 * it has put it back, and tests whose guests need thousands of mappings hold it shared
 * around their create.  Released on close or when the process exits.
 */
static inline int tu_map_count_lock(bool exclusive)
{
	int fd = open("/var/tmp/gfa-tests-max-map-count.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);

	if (fd >= 0)
		flock(fd, exclusive ? LOCK_EX : LOCK_SH);
	return fd;
}

static inline int tu_sanitizer(void)
{
	return getenv("GFA_SANITIZER") != NULL;
}
/* An owner's migrate that accepts every move (the data is the test's concern, not its). */
static inline int tu_migrate_ok(void *ctx, uint64_t owner, uint64_t src, uint64_t dst,
				unsigned int order)
{
	(void)ctx;
	(void)owner;
	(void)src;
	(void)dst;
	(void)order;
	return 0;
}

#endif
