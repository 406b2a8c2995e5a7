// SPDX-License-Identifier: MIT
/*
 * Tests of the io_uring release engine (vmm/release_*.c) against real memfds:
 * host-backed bytes must drop, punched bytes must read as zero (checked with
 * pread(), which does not repopulate shmem holes), and every byte not submitted --
 * or submitted but reported failed -- must keep its data.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gfa/refvmm.h>

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define PG  (4 * KiB)

/* A memfd of @size bytes, mapped shared if @map. */
struct rel_file {
	int fd;
	uint8_t *map;
	uint64_t size;
};

/* What the done callbacks saw. */
struct rel_log {
	pthread_mutex_t lock;
	uint64_t npages;
	uint32_t *hits; /* done calls per first page of a range */
	uint64_t calls, fails, bytes_ok;
	int last_result;
};

static void rel_file_open(struct rel_file *f, uint64_t size, bool map)
{
	f->size = size;
	f->fd = memfd_create("gfa-release-test", MFD_CLOEXEC);
	cr_assert_geq(f->fd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(ftruncate(f->fd, (off_t)size), 0);
	f->map = NULL;
	if (map) {
		f->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
		cr_assert_neq(f->map, MAP_FAILED, "mmap: %s", strerror(errno));
	}
}

static void rel_file_close(struct rel_file *f)
{
	if (f->map)
		munmap(f->map, f->size);
	close(f->fd);
}

static uint8_t rel_pattern(uint64_t off)
{
	return (uint8_t)((off / PG) % 251 + 1); /* never zero */
}

/* Populate the whole file with a per-page non-zero pattern. */
static void rel_fill(struct rel_file *f)
{
	uint64_t off;

	for (off = 0; off < f->size; off += PG)
		memset(f->map + off, rel_pattern(off), PG);
}

/* Every page of [off, off+len) still holds its pattern (read via the mapping). */
static bool rel_intact(const struct rel_file *f, uint64_t off, uint64_t len)
{
	static uint8_t ref[PG];
	uint64_t end = off + len;

	for (; off < end; off += PG) {
		memset(ref, rel_pattern(off), PG);
		if (memcmp(f->map + off, ref, PG))
			return false;
	}
	return true;
}

/* Every byte of [off, off+len) reads as zero through pread (no repopulation). */
static bool rel_zero(const struct rel_file *f, uint64_t off, uint64_t len)
{
	static uint8_t buf[64 * KiB];
	uint64_t end = off + len;

	while (off < end) {
		size_t n = end - off < sizeof(buf) ? end - off : sizeof(buf);
		ssize_t r = pread(f->fd, buf, n, (off_t)off);
		size_t i;

		if (r != (ssize_t)n)
			return false;
		for (i = 0; i < n; i++)
			if (buf[i])
				return false;
		off += n;
	}
	return true;
}

static void rel_log_init(struct rel_log *l, uint64_t file_size)
{
	memset(l, 0, sizeof(*l));
	pthread_mutex_init(&l->lock, NULL);
	l->npages = file_size / PG;
	l->hits = calloc(l->npages, sizeof(*l->hits));
	cr_assert_not_null(l->hits);
}

static void rel_log_fini(struct rel_log *l)
{
	free(l->hits);
	pthread_mutex_destroy(&l->lock);
}

static void rel_done(void *cookie, uint64_t off, uint64_t len, int result)
{
	struct rel_log *l = cookie;

	pthread_mutex_lock(&l->lock);
	if (off / PG < l->npages)
		l->hits[off / PG]++;
	l->calls++;
	l->last_result = result;
	if (result)
		l->fails++;
	else
		l->bytes_ok += len;
	pthread_mutex_unlock(&l->lock);
}

static struct gfa_release_engine *rel_engine(const struct rel_file *f,
					     const struct gfa_release_config *cfg)
{
	struct gfa_release_engine *e = gfa_release_create(f->fd, f->map, cfg);

	cr_assert_not_null(e, "gfa_release_create: %s", strerror(errno));
	return e;
}

static struct gfa_release_stats rel_stats(const struct gfa_release_engine *e)
{
	struct gfa_release_stats s;

	cr_assert_eq(gfa_release_stats(e, &s), 0);
	return s;
}

static bool rel_is_ring(const struct gfa_release_engine *e)
{
	return strcmp(gfa_release_mode(e, NULL), "io_uring") == 0;
}

/* Skip ring-specific tests on hosts where an io_uring cannot be set up. */
static void rel_need_ring(void)
{
	struct rel_file f;
	struct gfa_release_engine *e;
	const char *why = NULL;
	bool ring;

	rel_file_open(&f, 1 * MiB, false);
	e = rel_engine(&f, NULL);
	ring = rel_is_ring(e);
	if (!ring)
		gfa_release_mode(e, &why);
	cr_log_info("release mode: %s", why ? why : "io_uring");
	gfa_release_destroy(e);
	rel_file_close(&f);
	if (!ring)
		cr_skip_test("io_uring unavailable on this host");
}

Test(release, punch_basic)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	int64_t before, after;

	rel_file_open(&f, 16 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	before = gfa_memfd_allocated_bytes(f.fd);
	cr_assert_geq(before, (int64_t)(16 * MiB));

	cr_assert_eq(gfa_release_submit(e, 4 * MiB, 4 * MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);

	after = gfa_memfd_allocated_bytes(f.fd);
	cr_assert_eq(before - after, (int64_t)(4 * MiB), "dropped %lld",
		     (long long)(before - after));
	cr_assert(rel_zero(&f, 4 * MiB, 4 * MiB));
	cr_assert(rel_intact(&f, 0, 4 * MiB));
	cr_assert(rel_intact(&f, 8 * MiB, 8 * MiB));
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(log.hits[4 * MiB / PG], 1);
	cr_assert_eq(log.last_result, 0);

	s = rel_stats(e);
	cr_assert_eq(s.ranges_submitted, 1);
	cr_assert_eq(s.ranges_done, 1);
	cr_assert_eq(s.punches, 1);
	cr_assert_eq(s.bytes_released, 4 * MiB);
	cr_assert_eq(s.inflight_bytes, 0);
	cr_assert_eq(s.inflight_ranges, 0);
	if (rel_is_ring(e))
		cr_assert_eq(s.ring_ops, 1);
	cr_assert_eq(gfa_release_destroy(e), 0);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* Submitted in shuffled order under a plug: sorted and merged into one punch. */
Test(release, coalesce_plugged)
{
	enum { N = 1024 };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t order[N], i;
	int64_t before;

	rel_file_open(&f, 8 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	before = gfa_memfd_allocated_bytes(f.fd);

	for (i = 0; i < N; i++)
		order[i] = i;
	srand(42);
	for (i = N - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rand() % (i + 1), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	cr_assert_eq(gfa_release_plug(e), 0);
	for (i = 0; i < N; i++)
		cr_assert_eq(gfa_release_submit(e, 2 * MiB + order[i] * PG, PG, rel_done, &log), 0);
	cr_assert_eq(gfa_release_unplug(e), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);

	s = rel_stats(e);
	cr_assert_eq(s.punches, 1, "punches %llu", (unsigned long long)s.punches);
	cr_assert_eq(s.ranges_coalesced, N - 1);
	cr_assert_eq(s.ranges_done, N);
	cr_assert_eq(log.calls, N);
	for (i = 0; i < N; i++)
		cr_assert_eq(log.hits[2 * MiB / PG + i], 1);
	cr_assert_eq(log.fails, 0);
	cr_assert_eq(before - gfa_memfd_allocated_bytes(f.fd), (int64_t)(4 * MiB));
	cr_assert(rel_zero(&f, 2 * MiB, 4 * MiB));
	cr_assert(rel_intact(&f, 0, 2 * MiB));
	cr_assert(rel_intact(&f, 6 * MiB, 2 * MiB));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* Ranges with gaps between them must never be merged across the gap. */
Test(release, gaps_not_merged)
{
	enum { N = 64 };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_file_open(&f, 1 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	gfa_release_plug(e);
	for (i = 0; i < N; i++)
		cr_assert_eq(gfa_release_submit(e, 2 * i * PG, PG, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);

	s = rel_stats(e);
	cr_assert_eq(s.punches, N);
	cr_assert_eq(s.ranges_coalesced, 0);
	for (i = 0; i < N; i++) {
		cr_assert(rel_zero(&f, 2 * i * PG, PG));
		cr_assert(rel_intact(&f, (2 * i + 1) * PG, PG), "gap page %u lost", i);
	}
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* Without a plug the engine may take ranges in several passes; the counts agree. */
Test(release, coalesce_unplugged_accounting)
{
	enum { N = 256 };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_file_open(&f, 2 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	for (i = 0; i < N; i++)
		cr_assert_eq(gfa_release_submit(e, i * PG, PG, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches + s.ranges_coalesced, N);
	cr_assert_leq(s.passes, N);
	cr_assert_eq(log.calls, N);
	cr_assert(rel_zero(&f, 0, N * PG));
	cr_assert(rel_intact(&f, N * PG, f.size - N * PG));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* A 300 MiB range under the default 128 MiB cap: 3 punches (sparse file). */
Test(release, cap_single_range)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;

	rel_file_open(&f, 320 * MiB, false);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	cr_assert_eq(gfa_release_submit(e, 0, 300 * MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches, 3);
	cr_assert_eq(s.bytes_released, 300 * MiB);
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(log.last_result, 0);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* 300 adjacent 1 MiB ranges, cap 128 MiB: 128 + 128 + 44 MiB. */
Test(release, cap_many_ranges)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_file_open(&f, 320 * MiB, false);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	gfa_release_plug(e);
	for (i = 0; i < 300; i++)
		cr_assert_eq(gfa_release_submit(e, i * MiB, MiB, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches, 3);
	cr_assert_eq(log.calls, 300);
	cr_assert_eq(log.bytes_ok, 300 * MiB);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/*
 * Cap cuts ranges in the middle: each is reported once, after all its pieces --
 * also when the first piece completes before the next is even planned (sync mode,
 * a one-entry ring).
 */
static void rel_cap_splits(const struct gfa_release_config *cfg)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_file_open(&f, 32 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, cfg);
	gfa_release_plug(e);
	for (i = 0; i < 10; i++)
		cr_assert_eq(gfa_release_submit(e, i * 3 * MiB, 3 * MiB, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches, 8); /* ceil(30 / 4) */
	cr_assert_eq(log.calls, 10);
	for (i = 0; i < 10; i++)
		cr_assert_eq(log.hits[i * 3 * MiB / PG], 1);
	cr_assert(rel_zero(&f, 0, 30 * MiB));
	cr_assert(rel_intact(&f, 30 * MiB, 2 * MiB));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

Test(release, cap_splits_ranges)
{
	struct gfa_release_config cfg = { .max_punch_bytes = 4 * MiB };

	rel_cap_splits(&cfg);
	cfg.ring_entries = 1;
	rel_cap_splits(&cfg);
	cfg.force_sync = true;
	rel_cap_splits(&cfg);
}

/* Ring setup fails (injected): synchronous mode, still releasing. */
Test(release, fault_setup)
{
	struct gfa_release_config cfg = { .fault_setup_err = ENOMEM };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	const char *why = NULL;

	rel_file_open(&f, 4 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, &cfg);
	cr_assert_str_eq(gfa_release_mode(e, &why), "sync");
	cr_assert_not_null(strstr(why, "injected"), "why: %s", why);
	cr_assert_eq(gfa_release_submit(e, MiB, MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.mode, GFA_RELEASE_MODE_SYNC);
	cr_assert_eq(s.ring_ops, 0);
	cr_assert_eq(s.sync_ops, 1);
	cr_assert_eq(log.last_result, 0);
	cr_assert(rel_zero(&f, MiB, MiB));
	cr_assert(rel_intact(&f, 0, MiB));
	cr_assert(rel_intact(&f, 2 * MiB, 2 * MiB));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* Shared body of the fault tests: release [1 MiB, 2 MiB) of a 4 MiB file. */
static struct gfa_release_stats rel_run_one(const struct gfa_release_config *cfg, bool map,
					    int expect, const char *mode)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	int64_t before, after;

	rel_file_open(&f, 4 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = gfa_release_create(f.fd, map ? f.map : NULL, cfg);
	cr_assert_not_null(e);
	before = gfa_memfd_allocated_bytes(f.fd);
	cr_assert_eq(gfa_release_submit(e, MiB, MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	after = gfa_memfd_allocated_bytes(f.fd);

	cr_assert_eq(log.calls, 1);
	cr_assert_eq(log.last_result, expect, "result %d, expected %d", log.last_result, expect);
	if (expect == 0) {
		cr_assert_eq(before - after, (int64_t)MiB);
		cr_assert(rel_zero(&f, MiB, MiB));
	} else {
		cr_assert_eq(before, after, "a failed release changed the backing");
		cr_assert(rel_intact(&f, MiB, MiB), "failed release lost data");
	}
	cr_assert(rel_intact(&f, 0, MiB));
	cr_assert(rel_intact(&f, 2 * MiB, 2 * MiB));
	cr_assert_str_eq(gfa_release_mode(e, NULL), mode);
	s = rel_stats(e);
	cr_assert_eq(s.inflight_ranges, 0);
	cr_assert_eq(s.ranges_failed, expect ? 1 : 0);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
	return s;
}

Test(release, fault_submit_once)
{
	struct gfa_release_config cfg = {
		.fault_submit = { .nth = 1, .count = 1, .err = EAGAIN },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "io_uring");
	cr_assert_eq(s.submit_errors, 1);
	cr_assert_eq(s.ring_ops, 1);
	cr_assert_eq(s.sync_ops, 0);
}

/* Submission fails twice: the ring is given up, the range is done synchronously. */
Test(release, fault_submit_twice)
{
	struct gfa_release_config cfg = {
		.fault_submit = { .nth = 1, .count = 2, .err = EBUSY },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "sync");
	cr_assert_eq(s.submit_errors, 2);
	cr_assert_eq(s.sync_fallbacks, 1);
	cr_assert_eq(s.sync_ops, 1);
	cr_assert_eq(s.mode, GFA_RELEASE_MODE_SYNC);
}

/*
 * Submission fails while earlier ops are still in the kernel: those are reaped
 * before the ring goes away, the rest is done synchronously, nothing is lost.
 */
Test(release, fault_submit_with_ops_in_flight)
{
	struct gfa_release_config cfg = {
		.ring_entries = 4,
		.fault_submit = { .nth = 2, .count = 2, .err = EAGAIN },
	};
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_need_ring();
	rel_file_open(&f, 16 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, &cfg);
	gfa_release_plug(e);
	for (i = 0; i < 8; i++) /* 8 punches: a one-page gap after each */
		cr_assert_eq(gfa_release_submit(e, i * 2 * MiB, 2 * MiB - PG, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.submit_errors, 2);
	cr_assert_eq(s.mode, GFA_RELEASE_MODE_SYNC);
	/* The first submit took 4; the other 4 were finished synchronously (prepared
	 * for the ring, never taken by it: no ring ops). */
	cr_assert_eq(s.ring_ops, 4);
	cr_assert_eq(s.sync_ops, 4);
	cr_assert_eq(s.sync_fallbacks, 4);
	cr_assert_eq(log.calls, 8);
	cr_assert_eq(log.fails, 0);
	for (i = 0; i < 8; i++) {
		cr_assert(rel_zero(&f, i * 2 * MiB, 2 * MiB - PG));
		cr_assert(rel_intact(&f, (i + 1) * 2 * MiB - PG, PG));
	}
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

Test(release, fault_complete_once)
{
	struct gfa_release_config cfg = {
		.fault_complete = { .nth = 1, .err = EIO },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "io_uring");
	cr_assert_eq(s.ops_failed, 1);
	cr_assert_eq(s.retries, 1);
	cr_assert_eq(s.ring_ops, 2);
	cr_assert_eq(s.sync_ops, 0);
}

/* First attempt and ring retry fail: the synchronous fallback releases it. */
Test(release, fault_complete_twice)
{
	struct gfa_release_config cfg = {
		.fault_complete = { .nth = 1, .count = 2, .err = EIO },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "io_uring");
	cr_assert_eq(s.ops_failed, 2);
	cr_assert_eq(s.retries, 1);
	cr_assert_eq(s.sync_fallbacks, 1);
	cr_assert_eq(s.sync_ops, 1);
}

/* Every attempt fails: reported as failed, data intact, nothing released. */
Test(release, fault_all_attempts)
{
	struct gfa_release_config cfg = {
		.fault_complete = { .nth = 1, .count = 2, .err = EIO },
		.fault_sync = { .nth = 1, .err = ENOMEM },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, -ENOMEM, "io_uring");
	cr_assert_eq(s.ops_failed, 3);
	cr_assert_eq(s.bytes_released, 0);
}

/*
 * A range over the cap is two punches; the first succeeds, every attempt at the second
 * fails: the range is reported failed and bytes_released counts none of it (the caller
 * treats all its frames as populated).
 */
Test(release, failed_range_counts_no_bytes_released)
{
	struct gfa_release_config cfg = {
		.max_punch_bytes = 4 * MiB,
		.force_sync = true,
		.fault_sync = { .nth = 2, .count = 10, .err = EIO },
	};
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;

	rel_file_open(&f, 16 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, &cfg);
	cr_assert_eq(gfa_release_submit(e, 0, 8 * MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches, 2);
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(log.last_result, -EIO);
	cr_assert_eq(s.ranges_failed, 1);
	cr_assert(rel_zero(&f, 0, 4 * MiB), "the first punch did release its part");
	cr_assert_eq(s.bytes_released, 0, "bytes_released %lu for a failed range",
		     (unsigned long)s.bytes_released);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* fallocate unsupported: the retry punches through the mapping (MADV_REMOVE). */
Test(release, fault_eopnotsupp_uses_madvise)
{
	struct gfa_release_config cfg = {
		.fault_complete = { .nth = 1, .err = EOPNOTSUPP },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "io_uring");
	cr_assert_eq(s.retries, 1);
	cr_assert_eq(s.madvise_ops, 1);
	cr_assert_eq(s.sync_ops, 0);
}

/* Same without a mapping: no madvise possible, the plain retry succeeds. */
Test(release, fault_eopnotsupp_no_map)
{
	struct gfa_release_config cfg = {
		.fault_complete = { .nth = 1, .err = EOPNOTSUPP },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, false, 0, "io_uring");
	cr_assert_eq(s.madvise_ops, 0);
	cr_assert_eq(s.retries, 1);
}

Test(release, sync_mode)
{
	struct gfa_release_config cfg = { .force_sync = true };
	struct gfa_release_stats s;
	const char *why;

	s = rel_run_one(&cfg, true, 0, "sync");
	cr_assert_eq(s.ring_ops, 0);
	cr_assert_eq(s.sync_ops, 1);
	cr_assert_eq(s.sync_fallbacks, 0);

	/* The reason is reported. */
	{
		struct rel_file f;
		struct gfa_release_engine *e;

		rel_file_open(&f, MiB, false);
		e = rel_engine(&f, &cfg);
		cr_assert_str_eq(gfa_release_mode(e, &why), "sync");
		cr_assert_not_null(strstr(why, "forced"));
		gfa_release_destroy(e);
		rel_file_close(&f);
	}
}

Test(release, sync_mode_retry)
{
	struct gfa_release_config cfg = {
		.force_sync = true,
		.fault_sync = { .nth = 1, .err = EINTR },
	};
	struct gfa_release_stats s;

	s = rel_run_one(&cfg, true, 0, "sync");
	cr_assert_eq(s.sync_ops, 2);
	cr_assert_eq(s.retries, 1);
}

Test(release, sync_mode_failure_keeps_data)
{
	struct gfa_release_config cfg = {
		.force_sync = true,
		.fault_sync = { .nth = 1, .count = 2, .err = EIO },
	};
	struct gfa_release_stats s;

	s = rel_run_one(&cfg, true, -EIO, "sync");
	cr_assert_eq(s.ops_failed, 2);
}

Test(release, sync_mode_eopnotsupp_uses_madvise)
{
	struct gfa_release_config cfg = {
		.force_sync = true,
		.fault_sync = { .nth = 1, .err = EOPNOTSUPP },
	};
	struct gfa_release_stats s;

	s = rel_run_one(&cfg, true, 0, "sync");
	cr_assert_eq(s.madvise_ops, 1);
}

/* A failure inside a merged punch is reported for every range it covers. */
Test(release, fault_merged_punch_fails_all)
{
	struct gfa_release_config cfg = {
		.force_sync = true,
		.fault_sync = { .nth = 1, .count = 2, .err = EIO },
	};
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	uint32_t i;

	rel_file_open(&f, 2 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, &cfg);
	gfa_release_plug(e);
	for (i = 0; i < 8; i++)
		cr_assert_eq(gfa_release_submit(e, i * PG, PG, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	cr_assert_eq(log.calls, 8);
	cr_assert_eq(log.fails, 8);
	cr_assert(rel_intact(&f, 0, f.size));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

Test(release, bad_inputs)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	struct gfa_release_config cfg;
	int pipefd[2];

	rel_file_open(&f, 4 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);

	cr_assert_eq(gfa_release_submit(NULL, 0, PG, rel_done, &log), -EFAULT);
	cr_assert_eq(gfa_release_submit(e, 0, PG, NULL, &log), -EFAULT);
	cr_assert_eq(gfa_release_submit(e, 0, 0, rel_done, &log), -EINVAL);
	cr_assert_eq(gfa_release_submit(e, 100, PG, rel_done, &log), -EINVAL);
	cr_assert_eq(gfa_release_submit(e, 0, PG + 1, rel_done, &log), -EINVAL);
	cr_assert_eq(gfa_release_submit(e, 4 * MiB, PG, rel_done, &log), -ERANGE);
	cr_assert_eq(gfa_release_submit(e, 4 * MiB - PG, 2 * PG, rel_done, &log), -ERANGE);
	cr_assert_eq(gfa_release_submit(e, UINT64_MAX - PG + 1, 2 * PG, rel_done, &log), -ERANGE);
	cr_assert_eq(gfa_release_unplug(e), -EINVAL);
	cr_assert_eq(gfa_release_plug(NULL), -EFAULT);
	cr_assert_eq(gfa_release_unplug(NULL), -EFAULT);
	cr_assert_eq(gfa_release_flush(NULL, 0), -EFAULT);
	cr_assert_eq(gfa_release_stats(e, NULL), -EFAULT);
	cr_assert_eq(gfa_release_stats(NULL, &s), -EFAULT);
	cr_assert_null(gfa_release_mode(NULL, NULL));
	cr_assert_eq(gfa_release_destroy(NULL), 0);
	cr_assert_eq(gfa_memfd_allocated_bytes(-1), -EBADF);

	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.ranges_rejected, 7);
	cr_assert_eq(s.ranges_submitted, 0);
	cr_assert_eq(log.calls, 0);
	cr_assert(rel_intact(&f, 0, f.size));
	gfa_release_destroy(e);

	/* Bad engines. */
	errno = 0;
	cr_assert_null(gfa_release_create(-1, NULL, NULL));
	cr_assert_eq(errno, EBADF);
	cr_assert_eq(pipe(pipefd), 0);
	cr_assert_null(gfa_release_create(pipefd[0], NULL, NULL));
	cr_assert_eq(errno, EINVAL);
	close(pipefd[0]);
	close(pipefd[1]);
	cfg = (struct gfa_release_config){ .max_punch_bytes = PG + 1 };
	cr_assert_null(gfa_release_create(f.fd, NULL, &cfg));
	cr_assert_eq(errno, EINVAL);
	cfg = (struct gfa_release_config){ .max_punch_bytes = GFA_RELEASE_MAX_PUNCH_LIMIT + PG };
	cr_assert_null(gfa_release_create(f.fd, NULL, &cfg));
	cfg = (struct gfa_release_config){ .ring_entries = GFA_RELEASE_MAX_RING + 1 };
	cr_assert_null(gfa_release_create(f.fd, NULL, &cfg));
	cfg = (struct gfa_release_config){ .fault_complete = { .nth = 1 } };
	cr_assert_null(gfa_release_create(f.fd, NULL, &cfg));
	cr_assert_eq(errno, EINVAL);

	rel_log_fini(&log);
	rel_file_close(&f);
}

/* The file grew after the engine was created: the new size is picked up. */
Test(release, file_grows)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;

	rel_file_open(&f, 1 * MiB, false);
	rel_log_init(&log, 4 * MiB);
	e = rel_engine(&f, NULL);
	cr_assert_eq(gfa_release_submit(e, MiB, MiB, rel_done, &log), -ERANGE);
	cr_assert_eq(ftruncate(f.fd, 4 * MiB), 0);
	cr_assert_eq(gfa_release_submit(e, MiB, MiB, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(log.last_result, 0);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

struct rel_thread_arg {
	struct gfa_release_engine *e;
	struct rel_log *log;
	uint32_t id, nthreads, npages;
	int errors;
};

static void *rel_submitter(void *p)
{
	struct rel_thread_arg *a = p;
	uint32_t i;

	/* Interleaved pages: neighbours come from other threads. */
	for (i = a->id; i < a->npages; i += a->nthreads)
		if (gfa_release_submit(a->e, (uint64_t)i * PG, PG, rel_done, a->log))
			a->errors++;
	return NULL;
}

Test(release, concurrent_submitters)
{
	enum { T = 4, NPAGES = 2048 };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	struct rel_thread_arg args[T];
	pthread_t th[T];
	uint32_t i;

	rel_file_open(&f, 12 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	for (i = 0; i < T; i++) {
		args[i] = (struct rel_thread_arg){ .e = e,
						   .log = &log,
						   .id = i,
						   .nthreads = T,
						   .npages = NPAGES };
		cr_assert_eq(pthread_create(&th[i], NULL, rel_submitter, &args[i]), 0);
	}
	for (i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(args[i].errors, 0);
	}
	cr_assert_eq(gfa_release_flush(e, 20000), 0);

	s = rel_stats(e);
	cr_assert_eq(s.ranges_submitted, NPAGES);
	cr_assert_eq(s.ranges_done, NPAGES);
	cr_assert_eq(s.punches + s.ranges_coalesced, NPAGES);
	cr_assert_eq(s.inflight_bytes, 0);
	cr_assert_eq(log.calls, NPAGES);
	for (i = 0; i < NPAGES; i++)
		cr_assert_eq(log.hits[i], 1, "page %u reported %u times", i, log.hits[i]);
	cr_assert(rel_zero(&f, 0, NPAGES * PG));
	cr_assert(rel_intact(&f, NPAGES * PG, f.size - NPAGES * PG));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* What a done callback may and may not do. */
struct rel_cb_state {
	struct gfa_release_engine *e;
	struct rel_log *log;
	int flush_rc, destroy_rc, submit_rc;
	int chained;
};

static void rel_done_reentrant(void *cookie, uint64_t off, uint64_t len, int result)
{
	struct rel_cb_state *c = cookie;

	c->flush_rc = gfa_release_flush(c->e, 0);
	c->destroy_rc = gfa_release_destroy(c->e);
	c->submit_rc = gfa_release_submit(c->e, off + len, len, rel_done, c->log);
	c->chained = 1;
	rel_done(c->log, off, len, result);
}

Test(release, callback_rules)
{
	struct rel_file f;
	struct rel_log log;
	struct rel_cb_state c = { 0 };
	struct gfa_release_engine *e;

	rel_file_open(&f, 1 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	c.e = e;
	c.log = &log;
	cr_assert_eq(gfa_release_submit(e, 0, PG, rel_done_reentrant, &c), 0);
	/* The first flush covers the first range; the second the chained one. */
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	cr_assert_eq(c.chained, 1);
	cr_assert_eq(c.flush_rc, -EDEADLK);
	cr_assert_eq(c.destroy_rc, -EDEADLK);
	cr_assert_eq(c.submit_rc, 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	cr_assert_eq(log.calls, 2);
	cr_assert(rel_zero(&f, 0, 2 * PG));
	cr_assert(rel_intact(&f, 2 * PG, f.size - 2 * PG));
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* Destroy drains the queue even under a plug; submits after it starts fail. */
static void rel_done_resubmit(void *cookie, uint64_t off, uint64_t len, int result)
{
	struct rel_cb_state *c = cookie;

	c->submit_rc = gfa_release_submit(c->e, off + len, len, rel_done, c->log);
	rel_done(c->log, off, len, result);
}

Test(release, destroy_drains)
{
	struct rel_file f;
	struct rel_log log;
	struct rel_cb_state c = { 0 };
	struct gfa_release_engine *e;
	uint32_t i;

	rel_file_open(&f, 2 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	c.e = e;
	c.log = &log;
	gfa_release_plug(e);
	cr_assert_eq(gfa_release_submit(e, 0, PG, rel_done_resubmit, &c), 0);
	for (i = 2; i < 64; i++)
		cr_assert_eq(gfa_release_submit(e, i * PG, PG, rel_done, &log), 0);
	cr_assert_eq(gfa_release_destroy(e), 0);
	cr_assert_eq(c.submit_rc, -ESHUTDOWN);
	cr_assert_eq(log.calls, 63);
	cr_assert(rel_zero(&f, 0, PG));
	cr_assert(rel_intact(&f, PG, PG));
	cr_assert(rel_zero(&f, 2 * PG, 62 * PG));
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* A flush must not be held up by a plug. */
Test(release, flush_overrides_plug)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;

	rel_file_open(&f, 1 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	gfa_release_plug(e);
	cr_assert_eq(gfa_release_submit(e, 0, PG, rel_done, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	cr_assert_eq(log.calls, 1);
	cr_assert_eq(gfa_release_unplug(e), 0);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

static void rel_done_slow(void *cookie, uint64_t off, uint64_t len, int result)
{
	usleep(200 * 1000);
	rel_done(cookie, off, len, result);
}

Test(release, flush_timeout)
{
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;

	rel_file_open(&f, 1 * MiB, false);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, NULL);
	cr_assert_eq(gfa_release_submit(e, 0, PG, rel_done_slow, &log), 0);
	cr_assert_eq(gfa_release_flush(e, 10), -ETIMEDOUT);
	cr_assert_eq(gfa_release_flush(e, -1), 0);
	cr_assert_eq(log.calls, 1);
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* A small ring: more punches than entries, all completed and reported. */
Test(release, small_ring_many_punches)
{
	struct gfa_release_config cfg = { .ring_entries = 2, .batch = 16 };
	struct rel_file f;
	struct rel_log log;
	struct gfa_release_engine *e;
	struct gfa_release_stats s;
	uint32_t i;

	rel_file_open(&f, 1 * MiB, true);
	rel_fill(&f);
	rel_log_init(&log, f.size);
	e = rel_engine(&f, &cfg);
	gfa_release_plug(e);
	for (i = 0; i < 100; i++)
		cr_assert_eq(gfa_release_submit(e, 2 * i * PG, PG, rel_done, &log), 0);
	gfa_release_unplug(e);
	cr_assert_eq(gfa_release_flush(e, 10000), 0);
	s = rel_stats(e);
	cr_assert_eq(s.punches, 100);
	cr_assert_geq(s.passes, 7); /* batch 16 => at least ceil(100 / 16) */
	cr_assert_eq(log.calls, 100);
	for (i = 0; i < 100; i++) {
		cr_assert(rel_zero(&f, 2 * i * PG, PG));
		cr_assert(rel_intact(&f, (2 * i + 1) * PG, PG));
	}
	gfa_release_destroy(e);
	rel_log_fini(&log);
	rel_file_close(&f);
}

/* SQEs the ring teardown drops never reached the kernel: no ring op. */
Test(release, ring_ops_count_only_what_the_kernel_took)
{
	struct gfa_release_config cfg = {
		.fault_submit = { .nth = 1, .count = 2, .err = EBUSY },
	};
	struct gfa_release_stats s;

	rel_need_ring();
	s = rel_run_one(&cfg, true, 0, "sync");
	/* one punch, done by one synchronous fallocate; the ring never took it */
	cr_assert_eq(s.sync_ops, 1);
	cr_assert_eq(s.ring_ops, 0, "ring_ops %llu: an SQE the kernel never took",
		     (unsigned long long)s.ring_ops);
}
