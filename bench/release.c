// SPDX-License-Identifier: MIT
/*
 * bench/release: returning memory to the host (balloon + host-return thread + io_uring
 * release engine) against synchronous baselines, all in one run.
 *
 *  1. inflate: a guest of 1 GiB (256 MiB with --quick) on a pool 32 MiB larger, all of
 *     it resident and written before any timing.  Async: with the host-return thread
 *     running (defaults) and quiesced, the calling thread inflates the whole guest
 *     through gfa_balloon_inflate; timed are the calling thread (wall and CPU time) and
 *     the time from the first call until the memfd's st_blocks have dropped by the
 *     ballooned bytes (less 1% or 4 MiB: the reserve's rounding).  Three ways of
 *     calling: one call with one range; one call per 1 MiB (a virtio-balloon inflate
 *     request of 256 pages, coalesced by the VMM into one range); one call per 1 MiB
 *     request passing its 256 pages as 256 ranges of 4 KiB (the PFN array as it comes).
 *     Sync baselines, each on a fresh, identical setup, in the calling thread:
 *     fallocate(PUNCH_HOLE | KEEP_SIZE) on the zone memfd for every 4 KiB guest page
 *     (what QEMU's virtio-balloon does, page by page), and for every run of contiguous
 *     memfd offsets inside a 2 MiB guest range (per block as the balloon sees them).
 *     The baselines only punch: no allocator bookkeeping, and the guest window stays
 *     mapped (the punch zaps it anyway), so they are the cheapest possible synchronous
 *     balloon.  Offsets are computed before their timers start.  The goal ratio is
 *     async one call / sync 4 KiB loop; the others are printed as info.
 *  2. t1: the cgroup script of "percpu: partial chunk depopulation" (docs/decisions.md,
 *     entry 21, T1): 1000 parents each
 *     followed by 10 children, order-0 frames allocated in that interleaved order from
 *     one zone and written; free every child; gfa_host_return_quiesce; host-backed
 *     bytes of the memfd (st_blocks) before and after, with the host-return thread
 *     running (release on) and without it (release off).  Also: the same after the
 *     settle time and a second quiesce (the script's `sleep 10`), 1 survivor in 50 (T2's
 *     second case, same 11000 frames; the granule here is the memfd's page size, which
 *     the output names), and every parent freed too (back to the baseline?).
 *
 * Variants are interleaved per repetition (rep 1 of each, then rep 2, ...) after an
 * untimed warm-up on a small guest; medians, min and max are printed.  Every setup is
 * created fresh and torn down, so at most one guest of 1 GiB plus its pool exists at a
 * time (about 1.1 GiB of host memory).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MiB      (1ULL << 20)
#define PAGE     GFA_FRAME_SIZE
#define MAX_REPS 100
#define PATTERN  0x72656c65617365ULL /* "release" */

/* ================= 1. balloon inflation ================= */

#define P1_EXTRA_BYTES       (32 * MiB) /* pool beyond the guest: room for the reserve */
#define P1_HIGH              2048u      /* reserve kept populated: 8 MiB */
#define P1_LOW               1024u
#define P1_REQ_BYTES         MiB /* one virtio-balloon inflate request */
#define P1_REQ_PAGES         (P1_REQ_BYTES / PAGE)
/*
 * "Dropped": st_blocks fell by the ballooned bytes less 1% or 4 MiB, whichever is more:
 * the reserve the policy keeps is `high` rounded up to whole free blocks (up to an
 * order-10 block, 4 MiB), before and after, so the exact drop varies by that much.
 */
#define P1_DROP_SLACK(bytes) ((bytes) / 100 > 4 * MiB ? (bytes) / 100 : 4 * MiB)
#define P1_WARM_BYTES        (64 * MiB)
#define P1_TIMEOUT_S         60.0

enum p1_variant { V_ONE, V_REQ, V_PAGES, V_SYNC4K, V_SYNC2M, NR_V };

static const char *const v_name[NR_V] = { "async_1call", "async_1mib", "async_4kranges", "sync_4k",
					  "sync_2m" };
static const char *const v_what[NR_V] = {
	"gfa_balloon_inflate, one call, one range",
	"gfa_balloon_inflate per 1 MiB request, one range each",
	"gfa_balloon_inflate per 1 MiB request, 256 ranges of 4 KiB",
	"fallocate(PUNCH_HOLE) per 4 KiB page, caller thread",
	"fallocate(PUNCH_HOLE) per 2 MiB run, caller thread",
};

static bool v_async(enum p1_variant v)
{
	return v == V_ONE || v == V_REQ || v == V_PAGES;
}

struct p1_host {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
	struct gfa_host_return *hr;
	int fd;
	uint64_t bytes;
	double setup_s;
};

struct p1_sample {
	double caller_s;                /* wall time of the calling thread */
	double cpu_s;                   /* its CPU time */
	double drop_s;                  /* async: from the first call until st_blocks dropped */
	double quiesce_s;               /* async: from the first call until the thread was idle */
	int64_t dropped;                /* bytes st_blocks fell by, at the end */
	uint64_t calls;                 /* inflate or fallocate calls */
	struct gfa_host_return_stat hs; /* async: at the end (mode strings copied below) */
	char mode[16], mode_why[200];
};

/* The host-return statistics, with the engine's strings copied (they die with it). */
static void hr_stat_copy(struct gfa_host_return *hr, struct gfa_host_return_stat *hs, char *mode,
			 size_t mlen, char *why, size_t wlen)
{
	gfa_host_return_stat(hr, hs);
	snprintf(mode, mlen, "%s", hs->mode ? hs->mode : "?");
	snprintf(why, wlen, "%s", hs->mode_why ? hs->mode_why : "?");
	hs->mode = hs->mode_why = NULL;
}

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ns(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void check_pool(struct gfa_pool *pool, const char *when)
{
	char msg[256];

	if (gfa_pool_check(pool, msg, sizeof(msg)))
		bench_die("pool invariant broken %s: %s", when, msg);
}

static int64_t backed(int fd)
{
	int64_t v = gfa_memfd_allocated_bytes(fd);

	if (v < 0)
		bench_die("fstat on the zone memfd: %s", strerror((int)-v));
	return v;
}

/* Pool, resident backing, a guest whose every page is mapped and written. */
static void p1_setup(struct p1_host *h, uint64_t bytes)
{
	struct gfa_release_policy rp = { .low = P1_LOW, .high = P1_HIGH, .min_empty_frac = 4 };
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config gc = { .mem_bytes = bytes };
	struct gfa_pool_config pc;
	uint64_t t0 = bench_now_ns(), *w;

	memset(h, 0, sizeof(*h));
	h->bytes = bytes;
	gfa_pool_config_init(&pc, (bytes + P1_EXTRA_BYTES) >> GFA_FRAME_SHIFT);
	h->pool = gfa_pool_create(&pc);
	if (!h->pool)
		bench_die("gfa_pool_create: %s", strerror(errno));
	if (gfa_zone_set_release_policy(h->pool, 0, &rp))
		bench_die("gfa_zone_set_release_policy failed");
	h->b = gfa_backing_create(h->pool, &bc);
	if (!h->b)
		bench_die("gfa_backing_create: %s", strerror(errno));
	h->fd = gfa_backing_zone_fd(h->b, 0);
	h->g = gfa_guest_create(h->pool, h->b, &gc);
	if (!h->g)
		bench_die("gfa_guest_create: %s", strerror(errno));
	w = gfa_guest_hva(h->g);
	/* map every page in the guest window too, then write one word per page */
	madvise(w, bytes, MADV_POPULATE_WRITE);
	for (uint64_t i = 0; i < bytes / PAGE; i++)
		w[i * (PAGE / 8)] = PATTERN ^ i;
	h->setup_s = bench_sec_since(t0);
}

static void p1_teardown(struct p1_host *h)
{
	if (h->hr)
		gfa_host_return_stop(h->hr);
	check_pool(h->pool, "after part 1");
	gfa_guest_destroy(h->g);
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

/* memfd offset of every guest page (before any timer starts). */
static uint64_t *p1_offsets(struct p1_host *h)
{
	uint64_t n = h->bytes / PAGE, *off = malloc(n * sizeof(*off));

	if (!off)
		bench_die("out of memory");
	for (uint64_t i = 0; i < n; i++) {
		uint64_t pfn;
		int fd;

		if (gfa_guest_gpa_to_pfn(h->g, i * PAGE, &pfn) ||
		    gfa_pfn_to_fd(h->pool, pfn, &fd, &off[i]) || fd != h->fd)
			bench_die("gpa %#lx: no frame behind it", (unsigned long)(i * PAGE));
	}
	return off;
}

struct run {
	uint64_t off, len;
};

/* Runs of contiguous memfd offsets, never crossing a 2 MiB guest range. */
static size_t p1_runs(const uint64_t *off, uint64_t pages, struct run *runs)
{
	size_t n = 0;

	for (uint64_t i = 0; i < pages; i++) {
		bool starts = !n || i % GFA_PAGEBLOCK_FRAMES == 0 ||
			      runs[n - 1].off + runs[n - 1].len != off[i];

		if (starts)
			runs[n++] = (struct run){ off[i], PAGE };
		else
			runs[n - 1].len += PAGE;
	}
	return n;
}

static int punch(int fd, uint64_t off, uint64_t len)
{
	int r;

	do {
		r = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			      (off_t)len);
	} while (r && errno == EINTR);
	return r ? -errno : 0;
}

static void p1_sync(struct p1_host *h, enum p1_variant v, struct p1_sample *s)
{
	uint64_t pages = h->bytes / PAGE, *off = p1_offsets(h), t0;
	struct run *runs = malloc(pages * sizeof(*runs));
	size_t n = 0;
	int64_t before = backed(h->fd);
	double c0;

	if (!runs)
		bench_die("out of memory");
	if (v == V_SYNC2M)
		n = p1_runs(off, pages, runs);
	else
		for (uint64_t i = 0; i < pages; i++)
			runs[n++] = (struct run){ off[i], PAGE };
	t0 = bench_now_ns();
	c0 = thread_cpu_s();
	for (size_t i = 0; i < n; i++) {
		int err = punch(h->fd, runs[i].off, runs[i].len);

		if (err)
			bench_die("fallocate(PUNCH_HOLE): %s", strerror(-err));
	}
	s->caller_s = bench_sec_since(t0);
	s->cpu_s = thread_cpu_s() - c0;
	s->drop_s = s->quiesce_s = s->caller_s;
	s->calls = n;
	s->dropped = before - backed(h->fd);
	if (s->dropped < (int64_t)(h->bytes - P1_DROP_SLACK(h->bytes)))
		bench_die("%s: st_blocks dropped by %ld of %lu bytes", v_name[v], (long)s->dropped,
			  (unsigned long)h->bytes);
	free(runs);
	free(off);
}

/* The ranges of one 1 MiB request, as the variant passes them. */
static unsigned int p1_request(enum p1_variant v, uint64_t gpa, struct gfa_gpa_range *r)
{
	if (v == V_REQ) {
		r[0] = (struct gfa_gpa_range){ gpa, P1_REQ_BYTES };
		return 1;
	}
	for (unsigned int i = 0; i < P1_REQ_PAGES; i++)
		r[i] = (struct gfa_gpa_range){ gpa + i * PAGE, PAGE };
	return P1_REQ_PAGES;
}

/* Every sampled word of the ballooned guest reads zero. */
static void p1_check_zero(struct p1_host *h, const char *what)
{
	const volatile uint64_t *w = gfa_guest_hva(h->g);

	for (uint64_t i = 0; i < h->bytes / 8; i += 64 * PAGE / 8)
		if (w[i])
			bench_die("%s: ballooned memory at %#lx does not read zero", what,
				  (unsigned long)(i * 8));
}

static void p1_async(struct p1_host *h, enum p1_variant v, struct p1_sample *s)
{
	static struct gfa_gpa_range r[P1_REQ_PAGES];
	struct gfa_host_return_config hc = { 0 };
	struct gfa_gpa_range whole = { 0, h->bytes };
	int64_t before, target, taken = 0;
	uint64_t t0;
	double c0;
	int err;

	h->hr = gfa_host_return_start(h->pool, h->b, &hc);
	if (!h->hr)
		bench_die("gfa_host_return_start: %s", strerror(errno));
	/* the pool's own free frames beyond the reserve go first, untimed */
	if (gfa_host_return_quiesce(h->hr, 30000))
		bench_die("host return did not quiesce before the inflation");
	before = backed(h->fd);
	target = before - (int64_t)(h->bytes - P1_DROP_SLACK(h->bytes));
	s->calls = 0;

	t0 = bench_now_ns();
	c0 = thread_cpu_s();
	if (v == V_ONE) {
		taken = gfa_balloon_inflate(h->g, &whole, 1);
		s->calls = 1;
	} else {
		for (uint64_t gpa = 0; gpa < h->bytes && taken >= 0; gpa += P1_REQ_BYTES) {
			int64_t n = gfa_balloon_inflate(h->g, r, p1_request(v, gpa, r));

			taken = n < 0 ? n : taken + n;
			s->calls++;
		}
	}
	s->caller_s = bench_sec_since(t0);
	s->cpu_s = thread_cpu_s() - c0;
	if (taken != (int64_t)(h->bytes / PAGE))
		bench_die("%s: inflate returned %ld", v_name[v], (long)taken);

	while (backed(h->fd) > target) {
		if (bench_sec_since(t0) > P1_TIMEOUT_S)
			bench_die("%s: st_blocks still %ld MiB above the target after %.0f s",
				  v_name[v], (long)((backed(h->fd) - target) / (int64_t)MiB),
				  P1_TIMEOUT_S);
		sleep_ns(250000);
	}
	s->drop_s = bench_sec_since(t0);
	err = gfa_host_return_quiesce(h->hr, 30000);
	if (err)
		bench_die("%s: quiesce: %s", v_name[v], strerror(-err));
	s->quiesce_s = bench_sec_since(t0);
	s->dropped = before - backed(h->fd);
	hr_stat_copy(h->hr, &s->hs, s->mode, sizeof(s->mode), s->mode_why, sizeof(s->mode_why));
	p1_check_zero(h, v_name[v]);
}

static void p1_once(uint64_t bytes, enum p1_variant v, struct p1_sample *s, double *setup_s)
{
	struct p1_host h;

	p1_setup(&h, bytes);
	if (setup_s)
		*setup_s = h.setup_s;
	if (v_async(v))
		p1_async(&h, v, s);
	else
		p1_sync(&h, v, s);
	p1_teardown(&h);
}

struct p1_results {
	uint64_t bytes;
	int reps;
	struct bench_stat caller[NR_V], cpu[NR_V], drop[NR_V], quiesce[NR_V];
	struct p1_sample last[NR_V];
	double setup_s;
};

static void p1_stat(struct p1_sample *s, int reps, size_t field, struct bench_stat *out)
{
	double d[MAX_REPS];

	for (int r = 0; r < reps; r++)
		d[r] = *(double *)((char *)&s[r] + field);
	*out = bench_stat_of(d, reps);
}

static int bench_inflate(const struct bench_opts *o, void *ctx)
{
	struct p1_results *res = ctx;
	static struct p1_sample s[NR_V][MAX_REPS];
	uint64_t bytes = (o->quick ? 256 : 1024) * MiB;
	struct bench_load load;
	struct p1_sample warm;

	res->bytes = bytes;
	res->reps = o->reps;
	printf("\n## 1. inflate %lu MiB of a %lu MiB guest (pool +%llu MiB, reserve high=%u "
	       "low=%u frames, host-return defaults: 100 ms interval, 1000 ms settle for timer passes, 64 MiB per "
	       "pass)%s\n",
	       (unsigned long)(bytes / MiB), (unsigned long)(bytes / MiB), P1_EXTRA_BYTES / MiB,
	       P1_HIGH, P1_LOW, o->quick ? "  [--quick: 256 MiB instead of 1 GiB]" : "");
	printf("# memory: every setup is fresh; pool populated (MADV_POPULATE_WRITE) and every guest "
	       "page mapped and written before any timer starts\n");
	printf("# async: host-return thread started and quiesced first; caller = wall time of the "
	       "inflate call(s); drop = first call until st_blocks fell by the ballooned bytes "
	       "less %llu MiB (the reserve's rounding; polled every 250 us); quiesce = until "
	       "gfa_host_return_quiesce returned\n",
	       P1_DROP_SLACK(bytes) / MiB);
	printf("# sync: punches only (no allocator bookkeeping, window left mapped): the cheapest "
	       "synchronous balloon; memfd offsets computed before the timer\n");
	bench_load_begin(&load);
	for (int v = 0; v < NR_V; v++)
		p1_once(P1_WARM_BYTES, (enum p1_variant)v, &warm, NULL);
	for (int rep = 0; rep < o->reps; rep++)
		for (int k = 0; k < NR_V; k++) {
			/* rotate the order so no variant always runs right after another */
			int v = (k + rep) % NR_V;

			p1_once(bytes, (enum p1_variant)v, &s[v][rep], &res->setup_s);
		}
	bench_print_load(&load, "part 1");
	printf("# one setup (pool + populate + guest + write) took %.2f s (not timed)\n",
	       res->setup_s);
	printf("%-15s %-58s %7s %9s %8s %8s %8s %9s %10s\n", "variant", "what", "calls",
	       "caller_ms", "min", "max", "cpu_ms", "drop_ms", "quiesce_ms");
	for (int v = 0; v < NR_V; v++) {
		p1_stat(s[v], o->reps, offsetof(struct p1_sample, caller_s), &res->caller[v]);
		p1_stat(s[v], o->reps, offsetof(struct p1_sample, cpu_s), &res->cpu[v]);
		p1_stat(s[v], o->reps, offsetof(struct p1_sample, drop_s), &res->drop[v]);
		p1_stat(s[v], o->reps, offsetof(struct p1_sample, quiesce_s), &res->quiesce[v]);
		res->last[v] = s[v][o->reps - 1];
		printf("%-15s %-58s %7lu %9.2f %8.2f %8.2f %8.2f %9.2f %10.2f\n", v_name[v],
		       v_what[v], (unsigned long)res->last[v].calls, res->caller[v].median * 1e3,
		       res->caller[v].min * 1e3, res->caller[v].max * 1e3, res->cpu[v].median * 1e3,
		       res->drop[v].median * 1e3, res->quiesce[v].median * 1e3);
	}
	for (int v = 0; v < NR_V; v++) {
		const struct gfa_host_return_stat *hs = &res->last[v].hs;

		if (!v_async((enum p1_variant)v))
			continue;
		printf("# %s (last rep): st_blocks fell %ld MiB; host return: mode=%s (%s), "
		       "passes=%lu shrinks=%lu grows=%lu ranges=%lu released=%lu MiB failed=%lu\n",
		       v_name[v], (long)(res->last[v].dropped / (int64_t)MiB), res->last[v].mode,
		       res->last[v].mode_why, (unsigned long)hs->passes, (unsigned long)hs->shrinks,
		       (unsigned long)hs->grows, (unsigned long)hs->ranges,
		       (unsigned long)(hs->bytes_released / MiB), (unsigned long)hs->bytes_failed);
	}
	return 0;
}

/* ================= 2. T1: parents and children ================= */

#define T1_HIGH         256u /* reserve kept populated: 1 MiB */
#define T1_LOW          128u
#define T1_OWNER_PARENT 1
#define T1_OWNER_CHILD  2
#define T1_FRAMES       11000u
#define T1_SETTLE_MS    1000u /* the host-return defaults */
#define T1_INTERVAL_MS  100u

struct t1_sample {
	int64_t base, before, after, settled, after_all; /* st_blocks bytes */
	double quiesce_s;
	uint64_t nr_released, nr_sidelined;
	struct gfa_host_return_stat hs;
	char mode[16], mode_why[200];
};

static void t1_quiesce(struct gfa_host_return *hr, const char *when)
{
	int err = gfa_host_return_quiesce(hr, 30000);

	if (err)
		bench_die("t1: quiesce %s: %s", when, strerror(-err));
}

/*
 * `parents` groups of one parent and `children` children, allocated in that order from
 * one zone, each frame written; then every child freed.  With `release`, the
 * host-return thread runs from the start (as the percpu depopulation does).
 */
static void t1_once(unsigned int parents, unsigned int children, bool release, struct t1_sample *s)
{
	struct gfa_release_policy rp = { .low = T1_LOW, .high = T1_HIGH, .min_empty_frac = 4 };
	struct gfa_backing_config bc = { .populate = false };
	uint64_t total = (uint64_t)parents * (1 + children), *pfn;
	struct gfa_host_return_config hc = { 0 };
	struct gfa_host_return *hr = NULL;
	struct gfa_pool_config pc;
	struct gfa_zone_stat zs;
	struct gfa_pool *pool;
	struct gfa_backing *b;
	uint64_t t0;
	int fd;

	/* whole pageblocks plus one spare order-10 block */
	gfa_pool_config_init(&pc, (total + 1023) / 1024 * 1024 + 1024);
	pool = gfa_pool_create(&pc);
	pfn = malloc(total * sizeof(*pfn));
	if (!pool || !pfn)
		bench_die("t1: out of memory");
	if (gfa_zone_set_release_policy(pool, 0, &rp))
		bench_die("gfa_zone_set_release_policy failed");
	b = gfa_backing_create(pool, &bc);
	if (!b)
		bench_die("gfa_backing_create: %s", strerror(errno));
	fd = gfa_backing_zone_fd(b, 0);
	if (release) {
		hr = gfa_host_return_start(pool, b, &hc);
		if (!hr)
			bench_die("gfa_host_return_start: %s", strerror(errno));
		t1_quiesce(hr, "at start");
	}
	s->base = backed(fd);
	for (uint64_t i = 0; i < total; i++) {
		bool child = i % (1 + children) != 0;
		int64_t p = gfa_alloc(pool, 0, 0, GFA_MT_MOVABLE,
				      child ? T1_OWNER_CHILD : T1_OWNER_PARENT, 0);

		if (p < 0)
			bench_die("t1: gfa_alloc: %s", strerror((int)-p));
		pfn[i] = (uint64_t)p;
		gfa_backing_prepare(b, pfn[i], 0);
		*(volatile uint64_t *)gfa_pfn_to_addr(pool, pfn[i]) = PATTERN ^ pfn[i];
	}
	if (hr)
		t1_quiesce(hr, "after the allocations");
	s->before = backed(fd);
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < total; i++) {
		if (i % (1 + children) == 0)
			continue;
		if (gfa_free(pool, pfn[i], 0, T1_OWNER_CHILD))
			bench_die("t1: gfa_free failed");
		gfa_backing_mark_dirty(b, pfn[i], 0);
	}
	if (hr)
		t1_quiesce(hr, "after freeing the children");
	s->quiesce_s = bench_sec_since(t0);
	s->after = backed(fd);
	if (hr) {
		/* the script's `sleep 10`: past the settle time, then quiesce again */
		sleep_ns((long)(T1_SETTLE_MS + 2 * T1_INTERVAL_MS) * 1000000L);
		t1_quiesce(hr, "after the settle time");
	}
	s->settled = backed(fd);
	gfa_zone_stat(pool, 0, &zs);
	s->nr_released = zs.nr_released;
	s->nr_sidelined = zs.nr_sidelined;
	/* the parents' data survived the releases around them */
	for (uint64_t i = 0; i < total; i += 1 + children)
		if (*(volatile uint64_t *)gfa_pfn_to_addr(pool, pfn[i]) != (PATTERN ^ pfn[i]))
			bench_die("t1: a parent frame lost its contents");
	check_pool(pool, "after t1");
	for (uint64_t i = 0; i < total; i += 1 + children)
		if (gfa_free(pool, pfn[i], 0, T1_OWNER_PARENT))
			bench_die("t1: gfa_free failed");
	if (hr) {
		t1_quiesce(hr, "after freeing everything");
		hr_stat_copy(hr, &s->hs, s->mode, sizeof(s->mode), s->mode_why,
			     sizeof(s->mode_why));
	}
	s->after_all = backed(fd);
	gfa_host_return_stop(hr);
	check_pool(pool, "after t1");
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	free(pfn);
}

enum t1_variant { T_ON, T_OFF, T_50_ON, T_50_OFF, NR_T };

static const char *const t_name[NR_T] = { "1:10 on", "1:10 off", "1:50 on", "1:50 off" };

struct t1_results {
	struct t1_sample s[NR_T]; /* the median rep by drop ratio */
	double ratio[NR_T], settled_ratio[NR_T];
	double quiesce_ms[NR_T];
	int early[NR_T]; /* reps whose quiesce returned before the settled state */
	int reps;
};

static double t1_ratio(int64_t before, int64_t after)
{
	return after > 0 ? (double)before / (double)after : 0;
}

static void t1_variant(enum t1_variant t, unsigned int *parents, unsigned int *children,
		       bool *release)
{
	bool fifty = t == T_50_ON || t == T_50_OFF;

	*children = fifty ? 49 : 10;
	*parents = T1_FRAMES / (1 + *children);
	*release = t == T_ON || t == T_50_ON;
}

/* Median over reps of the quiesced ratio; the rep that has it is reported in full. */
static void t1_summarise(struct t1_sample *v, int reps, enum t1_variant t, struct t1_results *res)
{
	double d[MAX_REPS], med;
	const struct t1_sample *m = &v[0];

	for (int r = 0; r < reps; r++)
		d[r] = t1_ratio(v[r].before, v[r].after);
	med = bench_stat_of(d, reps).median;
	for (int r = 0; r < reps; r++)
		if (t1_ratio(v[r].before, v[r].after) == med)
			m = &v[r];
	res->ratio[t] = med;
	for (int r = 0; r < reps; r++)
		d[r] = t1_ratio(v[r].before, v[r].settled);
	res->settled_ratio[t] = bench_stat_of(d, reps).median;
	for (int r = 0; r < reps; r++)
		d[r] = v[r].quiesce_s * 1e3;
	res->quiesce_ms[t] = bench_stat_of(d, reps).median;
	res->early[t] = 0;
	for (int r = 0; r < reps; r++)
		res->early[t] += v[r].after > v[r].settled + (int64_t)(T1_HIGH * PAGE);
	res->s[t] = *m;
}

static int bench_t1(const struct bench_opts *o, void *ctx)
{
	struct t1_results *res = ctx;
	static struct t1_sample s[NR_T][MAX_REPS];
	int reps = o->reps;
	struct bench_load load;

	res->reps = reps;
	printf("\n## 2. t1: the percpu depopulation cgroup script: parents each followed by children "
	       "(order-0 frames, zone path, written), free every child, quiesce\n");
	printf("# pool: %u frames rounded up to 4 MiB plus 4 MiB, backing not populated (only "
	       "written frames are host-backed); release on: host-return thread from the start "
	       "(defaults: %u ms interval, %u ms settle), policy high=%u low=%u frames "
	       "(%u KiB / %u KiB), min_empty_frac=4; release off: no host-return thread; "
	       "%d rep(s), medians\n",
	       T1_FRAMES, T1_INTERVAL_MS, T1_SETTLE_MS, T1_HIGH, T1_LOW, T1_HIGH * 4, T1_LOW * 4,
	       reps);
	printf("# after = right after gfa_host_return_quiesce; settled = %u ms later and "
	       "quiesced again (the script's `sleep 10`); after_all = every parent freed too, "
	       "quiesced\n",
	       T1_SETTLE_MS + 2 * T1_INTERVAL_MS);
	bench_load_begin(&load);
	for (int rep = 0; rep < reps; rep++)
		for (int t = 0; t < NR_T; t++) {
			unsigned int parents, children;
			bool release;

			t1_variant((enum t1_variant)t, &parents, &children, &release);
			t1_once(parents, children, release, &s[t][rep]);
		}
	bench_print_load(&load, "part 2");
	printf("%-9s %7s %8s %10s %9s %7s %11s %8s %13s %10s %8s %9s %6s\n", "variant", "parents",
	       "base_KiB", "before_KiB", "after_KiB", "ratio", "settled_KiB", "ratio",
	       "after_all_KiB", "quiesce_ms", "released", "sidelined", "early");
	for (int t = 0; t < NR_T; t++) {
		unsigned int parents, children;
		const struct t1_sample *m = &res->s[t];
		bool release;

		t1_summarise(s[t], reps, (enum t1_variant)t, res);
		t1_variant((enum t1_variant)t, &parents, &children, &release);
		printf("%-9s %7u %8ld %10ld %9ld %7.2f %11ld %8.2f %13ld %10.1f %8lu %9lu %3d/%-2d\n",
		       t_name[t], parents, (long)(m->base >> 10), (long)(m->before >> 10),
		       (long)(m->after >> 10), res->ratio[t], (long)(m->settled >> 10),
		       res->settled_ratio[t], (long)(m->after_all >> 10), res->quiesce_ms[t],
		       (unsigned long)m->nr_released, (unsigned long)m->nr_sidelined, res->early[t],
		       reps);
	}
	printf("# released/sidelined: free frames given back / pageblocks holding them, when "
	       "settled; early: reps in which quiesce returned while more than `high` frames "
	       "were still to be released\n");
	printf("# 1:10 on, host return: mode=%s (%s) passes=%lu shrinks=%lu grows=%lu "
	       "released=%lu KiB populated=%lu KiB\n",
	       res->s[T_ON].mode, res->s[T_ON].mode_why, (unsigned long)res->s[T_ON].hs.passes,
	       (unsigned long)res->s[T_ON].hs.shrinks, (unsigned long)res->s[T_ON].hs.grows,
	       (unsigned long)(res->s[T_ON].hs.bytes_released >> 10),
	       (unsigned long)(res->s[T_ON].hs.bytes_populated >> 10));
	return 0;
}

/* ================= main ================= */

static void report_inflate(void *ctx)
{
	const struct p1_results *r = ctx;
	double async = r->caller[V_ONE].median, s4k = r->caller[V_SYNC4K].median;
	double s2m = r->caller[V_SYNC2M].median;
	struct bench_result res;

	bench_goal("release", "inflate_caller_ratio", async / s4k, "<=", 0.10,
		   "caller time, async one-call inflate / sync 4 KiB punch loop");
	bench_goal("release", "caller_vs_2m", async / s2m, "info", 0,
		   "caller time, async one-call inflate / sync 2 MiB punch loop");
	bench_goal("release", "inflate_1mib_caller_ratio", r->caller[V_REQ].median / s4k, "info", 0,
		   "caller time, async per 1 MiB request (one range) / sync 4 KiB loop");
	bench_goal("release", "inflate_4kranges_caller_ratio", r->caller[V_PAGES].median / s4k,
		   "info", 0,
		   "caller time, async per 1 MiB request as 256 4 KiB ranges / sync "
		   "4 KiB loop");
	bench_goal("release", "drop_vs_sync2m", r->drop[V_ONE].median / s2m, "info", 0,
		   "time until st_blocks dropped (async, one call) / sync 2 MiB punch loop");
	bench_result_init(&res, "release");
	bench_result_add(&res, "inflate_caller_ratio", "%.4f", async / s4k);
	bench_result_add(&res, "drop_ms", "%.1f", r->drop[V_ONE].median * 1e3);
	bench_result_add(&res, "mib", "%lu", (unsigned long)(r->bytes / MiB));
	bench_result_add(&res, "caller_ms", "%.2f", async * 1e3);
	bench_result_add(&res, "sync4k_ms", "%.1f", s4k * 1e3);
	bench_result_add(&res, "sync2m_ms", "%.1f", s2m * 1e3);
	bench_result_add(&res, "caller_vs_2m", "%.3f", async / s2m);
	bench_result_add(&res, "caller_1mib_ms", "%.2f", r->caller[V_REQ].median * 1e3);
	bench_result_add(&res, "caller_4kranges_ms", "%.2f", r->caller[V_PAGES].median * 1e3);
	bench_result_add(&res, "drop_1mib_ms", "%.1f", r->drop[V_REQ].median * 1e3);
	bench_result_add(&res, "drop_4kranges_ms", "%.1f", r->drop[V_PAGES].median * 1e3);
	bench_result_add(&res, "inflate_1mib_caller_ratio", "%.4f", r->caller[V_REQ].median / s4k);
	bench_result_add(&res, "inflate_4kranges_caller_ratio", "%.4f",
			 r->caller[V_PAGES].median / s4k);
	bench_result_add(&res, "drop_vs_sync2m", "%.3f", r->drop[V_ONE].median / s2m);
	bench_result_add(&res, "mode", "%s", r->last[V_ONE].mode);
	bench_result_print(&res);
}

static void report_t1(void *ctx)
{
	const struct t1_results *r = ctx;
	struct bench_result res;

	bench_goal("release_t1", "drop_ratio", r->ratio[T_ON], ">=", 5.0,
		   "host-backed bytes before / after freeing 10 of 11 frames and quiescing, "
		   "release on (seed: 3.0-3.55x)");
	bench_goal("release_t1", "off_drop_ratio", r->ratio[T_OFF], "<=", 1.01,
		   "the same with release off: no drop");
	bench_goal("release_t1", "settled_drop_ratio", r->settled_ratio[T_ON], "info", 0,
		   "release on, measured again after the settle time and a second quiesce");
	bench_goal("release_t1", "drop_ratio_1in50", r->ratio[T_50_ON], "info", 0,
		   "1 survivor in 50, release on (T2's second case; 4 KiB granules here)");
	bench_goal("release_t1", "after_all_vs_base_kib",
		   (double)(r->s[T_ON].after_all - r->s[T_ON].base) / 1024, "info", 0,
		   "KiB still host-backed after freeing everything, above the start (release on; "
		   "the reserve is high frames)");
	bench_result_init(&res, "release_t1");
	bench_result_add(&res, "drop_ratio", "%.3f", r->ratio[T_ON]);
	bench_result_add(&res, "off_drop_ratio", "%.3f", r->ratio[T_OFF]);
	bench_result_add(&res, "settled_drop_ratio", "%.3f", r->settled_ratio[T_ON]);
	bench_result_add(&res, "drop_ratio_1in50", "%.3f", r->ratio[T_50_ON]);
	bench_result_add(&res, "settled_drop_ratio_1in50", "%.3f", r->settled_ratio[T_50_ON]);
	bench_result_add(&res, "early_quiesce", "%d/%d", r->early[T_ON] + r->early[T_50_ON],
			 2 * r->reps);
	bench_result_add(&res, "before_kib", "%ld", (long)(r->s[T_ON].before >> 10));
	bench_result_add(&res, "after_kib", "%ld", (long)(r->s[T_ON].after >> 10));
	bench_result_add(&res, "off_after_kib", "%ld", (long)(r->s[T_OFF].after >> 10));
	bench_result_add(&res, "after_all_kib", "%ld", (long)(r->s[T_ON].after_all >> 10));
	bench_result_add(&res, "after_all_vs_base_kib", "%.0f",
			 (double)(r->s[T_ON].after_all - r->s[T_ON].base) / 1024);
	bench_result_add(&res, "quiesce_ms", "%.1f", r->quiesce_ms[T_ON]);
	bench_result_add(&res, "high_frames", "%u", T1_HIGH);
	bench_result_print(&res);
}

static struct p1_results inflate;
static struct t1_results t1;
static const struct bench_part release_parts[] = {
	{ "inflate", bench_inflate, report_inflate, &inflate },
	{ "t1", bench_t1, report_t1, &t1 },
};

int main(int argc, char **argv)
{
	struct gfa_thp_report thp;
	struct bench_opts o;
	uint64_t t_start = bench_now_ns();
	int ret;

	ret = bench_parse_args(
		argc, argv, &o, 1, 0, 3, 0,
		"Balloon inflation with async host return vs synchronous punch loops;\n"
		"the percpu depopulation cgroup script (T1: parents and children)\n"
		"with release on and off.\n"
		"--only inflate|t1 runs one part.");
	if (ret)
		return ret > 0 ? 0 : 2;
	if (!bench_parts_only_ok(&o, argv[0], release_parts, ARRAY_SIZE(release_parts)))
		return 2;
	if (o.reps > MAX_REPS)
		o.reps = MAX_REPS;
	printf("# bench release: balloon inflation + host return vs synchronous punching; "
	       "the percpu depopulation cgroup script (T1)\n");
	bench_print_machine();
	gfa_host_thp_report(&thp);
	printf("# host: transparent_hugepage/enabled=%s shmem_enabled=%s (%s)\n", thp.thp_enabled,
	       thp.shmem_enabled,
	       thp.shmem_thp_possible ?
		       "memfds may use 2 MiB pages: punching part of one splits it first" :
		       "memfds use 4 KiB pages: every 4 KiB punch frees memory");
	printf("# mode=%s reps=%d (medians; variants interleaved per rep, after warm-up runs)\n",
	       o.quick ? "quick" : "full", o.reps);
	bench_parts_run(&o, release_parts, ARRAY_SIZE(release_parts));
	printf("# elapsed %.1f s\n", bench_sec_since(t_start));
	return 0;
}
