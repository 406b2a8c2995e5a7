/* Balloon, host return (io_uring release engines) and clean/dirty frames. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/host_util.h"
#include "refvmm/canary_owner.h"
#include "allocator/layers.h"
#include "common/compiler.h"

#define MiB (1UL << 20)

struct bhost {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr;
	const struct gfa_host_return_config *hc;
};

static struct bhost bhost_new(uint64_t bytes, const struct gfa_host_return_config *hc,
			      uint64_t reserve_frames)
{
	struct bhost h;
	struct gfa_backing_config bc = { .populate = true, .no_zero_on_stop = true };
	struct gfa_release_policy rp = { .low = reserve_frames / 2,
					 .high = reserve_frames,
					 .min_empty_frac = 4 };

	h.pool = tu_pool(bytes >> GFA_FRAME_SHIFT);
	cr_assert_eq(gfa_zone_set_release_policy(h.pool, 0, &rp), 0);
	h.b = gfa_backing_create(h.pool, &bc);
	cr_assert_not_null(h.b);
	h.hr = NULL;
	h.hc = hc;
	return h;
}

/* Start returning memory (after the guests exist: frames in flight are not free). */
static void bhost_start(struct bhost *h)
{
	h->hr = gfa_host_return_start(h->pool, h->b, h->hc);
	cr_assert_not_null(h->hr, "host return: %s", strerror(errno));
}

static void bhost_done(struct bhost *h)
{
	gfa_host_return_stop(h->hr);
	ASSERT_POOL_OK(h->pool);
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

static struct gfa_guest *bguest(struct bhost *h, uint64_t bytes)
{
	struct gfa_guest_config cfg = { .mem_bytes = bytes };
	struct gfa_guest *g = gfa_guest_create(h->pool, h->b, &cfg);

	cr_assert_not_null(g);
	return g;
}

/*
 * A NULL range list is -EFAULT, counted once, even with n 0 (issue 24): inflate used to
 * memcpy from NULL (undefined behaviour UBSan aborts on) and both answered 0.
 */
Test(balloon, a_null_range_list_is_efault_counted_once)
{
	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 16 * MiB);
	uint64_t before = tu_err_fault(h.pool);
	struct gfa_guest_stat st;

	cr_assert_eq(gfa_balloon_inflate(g, NULL, 0), -EFAULT);
	cr_assert_eq(tu_err_fault(h.pool), before + 1);
	cr_assert_eq(gfa_balloon_deflate(g, NULL, 0), -EFAULT);
	cr_assert_eq(tu_err_fault(h.pool), before + 2);
	cr_assert_eq(gfa_balloon_inflate(g, NULL, 3), -EFAULT);
	cr_assert_eq(gfa_balloon_deflate(g, NULL, 3), -EFAULT);
	cr_assert_eq(tu_err_fault(h.pool), before + 4);
	cr_assert_eq(gfa_guest_stat(g, &st), 0);
	cr_assert_eq(st.ballooned_frames, 0);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

Test(balloon, bad_ranges_reject_the_whole_request)
{
	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 16 * MiB);
	struct gfa_gpa_range ok = { 4 * MiB, MiB };
	struct gfa_gpa_range two[2] = { { 0, MiB }, { 0, 0 } };
	struct gfa_guest_stat st;

	tu_fill(g, 1);
	two[1] = (struct gfa_gpa_range){ 5 * MiB, 4096 + 1 };
	cr_assert_eq(gfa_balloon_inflate(g, two, 2), -EINVAL, "misaligned");
	two[1] = (struct gfa_gpa_range){ 5 * MiB, 0 };
	cr_assert_eq(gfa_balloon_inflate(g, two, 2), -EINVAL, "empty");
	two[1] = (struct gfa_gpa_range){ 15 * MiB, 2 * MiB };
	cr_assert_eq(gfa_balloon_inflate(g, two, 2), -ERANGE, "outside the guest");
	two[1] = (struct gfa_gpa_range){ MiB - 4096, 8192 };
	cr_assert_eq(gfa_balloon_inflate(g, two, 2), -ENOTUNIQ, "overlap");
	cr_assert_eq(gfa_balloon_inflate(NULL, &ok, 1), -EFAULT);
	cr_assert_eq(gfa_balloon_deflate(g, &ok, 1), -ENOENT, "not ballooned");
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.ballooned_frames, 0);
	cr_assert_eq(tu_fill_bad(g, 1, 0, 0), 0, "a rejected request changes nothing");
	cr_assert_eq(gfa_balloon_inflate(g, &ok, 1), (int64_t)(MiB / 4096));
	cr_assert_eq(gfa_balloon_inflate(g, &ok, 1), -EALREADY);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

Test(balloon, inflate_reads_zero_deflate_gives_fresh_zeroed_memory)
{
	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 16 * MiB);
	/* a hole that cuts two order-9 blocks in the middle */
	struct gfa_gpa_range r = { 3 * MiB, 2 * MiB };
	uint64_t free_before = tu_free_frames(h.pool);
	uint64_t *w = gfa_guest_hva(g);

	tu_fill(g, 7);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), (int64_t)(2 * MiB / 4096));
	cr_assert_eq(tu_free_frames(h.pool), free_before + 512);
	for (uint64_t off = r.gpa; off < r.gpa + r.len; off += 4096)
		cr_assert_eq(w[off / 8], 0, "ballooned memory must read zero");
	cr_assert_eq(tu_fill_bad(g, 7, r.gpa, r.gpa + r.len), 0, "the rest is untouched");
	ASSERT_POOL_OK(h.pool);
	cr_assert_eq(gfa_balloon_deflate(g, &r, 1), (int64_t)(2 * MiB / 4096));
	for (uint64_t off = r.gpa; off < r.gpa + r.len; off += 4096)
		cr_assert_eq(w[off / 8], 0, "deflated memory is zeroed, not another owner's");
	cr_assert_eq(tu_fill_bad(g, 7, r.gpa, r.gpa + r.len), 0);
	cr_assert_eq(tu_free_frames(h.pool), free_before);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

Test(balloon, inflating_1_of_2_gib_style_returns_memory_to_the_host, .timeout = 120)
{
	struct gfa_host_return_config hc = { 0 };
	struct bhost h = bhost_new(64 * MiB, &hc, 512);
	struct gfa_guest *g = bguest(&h, 48 * MiB);
	struct gfa_gpa_range r = { 8 * MiB, 32 * MiB };
	struct gfa_host_return_stat st;
	int64_t before, after;

	tu_fill(g, 9);
	bhost_start(&h);
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	before = tu_backed(h.b);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), (int64_t)(32 * MiB / 4096));
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	after = tu_backed(h.b);
	gfa_host_return_stat(h.hr, &st);
	cr_log_info("host-backed %ld -> %ld MiB, %lu MiB released by %s", (long)(before / MiB),
		    (long)(after / MiB), (unsigned long)(st.bytes_released / MiB), st.mode);
	cr_assert_leq(after, before - 30 * (int64_t)MiB, "the ballooned memory left the host");
	cr_assert_eq(tu_fill_bad(g, 9, r.gpa, r.gpa + r.len), 0);
	/* released frames are clean; the reserve (512 frames, rounded up to whole blocks
	 * of up to 1024) may stay dirty */
	cr_assert_leq(gfa_backing_nr_dirty(h.b), 2048, "%lu dirty frames",
		      gfa_backing_nr_dirty(h.b));
	gfa_guest_destroy(g);
	bhost_done(&h);
}

Test(balloon, failed_releases_lose_nothing, .timeout = 120)
{
	struct gfa_host_return_config hc = { 0 };
	struct bhost h;
	struct gfa_guest *g;
	struct gfa_gpa_range r = { 4 * MiB, 8 * MiB };
	struct gfa_zone_stat zs;
	struct gfa_vmstat vs;

	/* every ring op and every synchronous retry fails: nothing may be lost */
	hc.engine.fault_complete =
		(struct gfa_release_fault){ .nth = 1, .count = 100000, .err = EIO };
	hc.engine.fault_sync = (struct gfa_release_fault){ .nth = 1, .count = 100000, .err = EIO };
	h = bhost_new(32 * MiB, &hc, 0);
	g = bguest(&h, 16 * MiB);
	bhost_start(&h);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), (int64_t)(8 * MiB / 4096));
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	gfa_host_return_stop(h.hr); /* waits for every completion */
	h.hr = NULL;
	gfa_zone_stat(h.pool, 0, &zs);
	gfa_pool_vmstat(h.pool, &vs);
	cr_assert_eq(zs.nr_inflight, 0);
	cr_assert_eq(zs.nr_released, 0, "failed punches leave frames populated");
	cr_assert_gt(vs.release_failed, 0);
	cr_assert_eq(zs.nr_free, 16 * MiB / 4096 + 8 * MiB / 4096);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/* T4: canaries written by a running guest survive concurrent release of other memory. */
struct t4 {
	struct gfa_guest *g;
	_Atomic int stop;
	uint64_t rounds, bad;
};

static void *t4_writer(void *arg)
{
	struct t4 *t = arg;
	uint64_t *w = gfa_guest_hva(t->g);

	while (!atomic_load(&t->stop)) {
		t->rounds++;
		for (uint64_t i = 0; i < 8 * MiB / 8; i += 512)
			w[i] = t->rounds ^ i;
		for (uint64_t i = 0; i < 8 * MiB / 8; i += 512)
			t->bad += w[i] != (t->rounds ^ i);
	}
	return NULL;
}

Test(balloon, canaries_survive_concurrent_release, .timeout = 120)
{
	struct gfa_host_return_config hc = { .interval_ms = 1 };
	struct bhost h = bhost_new(64 * MiB, &hc, 0);
	struct gfa_guest *g = bguest(&h, 32 * MiB);
	struct t4 t = { .g = g };
	pthread_t th;
	int cycles = tu_sanitizer() ? 10 : 50;

	bhost_start(&h);
	pthread_create(&th, NULL, t4_writer, &t);
	for (int i = 0; i < cycles; i++) {
		struct gfa_gpa_range r = { (8 + (uint64_t)(i % 12) * 2) * MiB, 2 * MiB };

		cr_assert_gt(gfa_balloon_inflate(g, &r, 1), 0);
		if (i % 3 == 0)
			gfa_host_return_quiesce(h.hr, 10000);
		cr_assert_gt(gfa_balloon_deflate(g, &r, 1), 0);
	}
	atomic_store(&t.stop, 1);
	pthread_join(th, NULL);
	cr_log_info("%lu writer rounds beside %d inflate/deflate cycles", t.rounds, cycles);
	cr_assert_eq(t.bad, 0, "a canary changed under a running guest");
	gfa_host_return_quiesce(h.hr, 10000);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/* No stale data after 100k allocate/free cycles across owners. */
Test(balloon, cross_owner_isolation_100k_cycles, .timeout = 120)
{
	struct bhost h = bhost_new(8 * MiB, NULL, 0);
	struct gfa_pcp *pcp = gfa_pcp_create(h.pool, 0);
	uint64_t seed = 5;
	int cycles = tu_sanitizer() ? 20000 : 100000;

	for (int i = 0; i < cycles; i++) {
		uint64_t owner = 1 + (tu_rand(&seed) % 7);
		unsigned int order = (unsigned int)(tu_rand(&seed) % 3);
		int64_t pfn = gfa_pcp_alloc(pcp, order, GFA_MT_MOVABLE, owner, 0);
		uint64_t *w;

		cr_assert_geq(pfn, 0);
		gfa_backing_prepare(h.b, (uint64_t)pfn, order);
		w = gfa_pfn_to_addr(h.pool, (uint64_t)pfn);
		for (uint64_t k = 0; k < (GFA_FRAME_SIZE << order) / 8; k += 64)
			cr_assert_eq(w[k], 0, "cycle %d: owner %lu sees stale data", i, owner);
		for (uint64_t k = 0; k < (GFA_FRAME_SIZE << order) / 8; k += 64)
			w[k] = owner;
		cr_assert_eq(gfa_pcp_free(pcp, (uint64_t)pfn, order, owner), 0);
		gfa_backing_mark_dirty(h.b, (uint64_t)pfn, order);
	}
	gfa_pcp_destroy(pcp);
	bhost_done(&h);
}

Test(balloon, ring_setup_failure_falls_back_to_sync, .timeout = 60)
{
	struct gfa_host_return_config hc = { 0 };
	struct bhost h;
	struct gfa_host_return_stat st;
	struct gfa_guest *g;
	struct gfa_gpa_range r = { 2 * MiB, 8 * MiB };

	hc.engine.fault_setup_err = ENOMEM;
	h = bhost_new(32 * MiB, &hc, 0);
	g = bguest(&h, 16 * MiB);
	bhost_start(&h);
	gfa_balloon_inflate(g, &r, 1);
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	gfa_host_return_stat(h.hr, &st);
	cr_assert_str_eq(st.mode, "sync");
	cr_assert_geq(st.bytes_released, 8 * MiB);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

Test(balloon, zero_flag_and_clean_dirty_released_per_zone, .timeout = 60)
{
	struct gfa_host_return_config hc = { 0 };
	struct bhost h = bhost_new(16 * MiB, &hc, 0);
	struct gfa_backing_zone_stat bs;
	int64_t a = gfa_backing_alloc(h.b, NULL, 0, 4, GFA_MT_MOVABLE, 3, 0);
	uint64_t *w = gfa_pfn_to_addr(h.pool, (uint64_t)a);

	cr_assert_geq(a, 0);
	memset(w, 0xab, 16 * 4096);
	cr_assert_eq(gfa_backing_free(h.b, NULL, (uint64_t)a, 4, 3), 0);
	cr_assert_eq(gfa_backing_zone_stat(h.b, 0, &bs), 0);
	cr_assert_eq(bs.free_dirty, 16);
	cr_assert_eq(bs.free_clean + bs.free_dirty + bs.free_released, 16 * MiB / 4096);
	/* the same block again, asked zeroed: no trace of the old owner */
	a = gfa_backing_alloc(h.b, NULL, 0, 4, GFA_MT_MOVABLE, 4, GFA_BACKING_ZERO);
	w = gfa_pfn_to_addr(h.pool, (uint64_t)a);
	for (int i = 0; i < 16 * 4096 / 8; i++)
		cr_assert_eq(w[i], 0);
	gfa_backing_free(h.b, NULL, (uint64_t)a, 4, 4);
	bhost_start(&h);
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	gfa_backing_zone_stat(h.b, 0, &bs);
	cr_assert_gt(bs.free_released, 0, "reserve 0: free memory goes back to the host");
	cr_assert_eq(bs.free_dirty, 0, "released frames are clean");
	cr_assert_eq(gfa_backing_alloc(NULL, NULL, 0, 0, GFA_MT_MOVABLE, 1, 0), GFA_EFAULT);
	bhost_done(&h);
}

Test(balloon, idle_scrub_zeroes_dirty_frames_before_the_next_start, .timeout = 60)
{
	struct gfa_host_return_config hc = { 0 };
	/* reserve = the whole pool: nothing is released, only scrubbed */
	struct bhost h = bhost_new(32 * MiB, &hc, 32 * MiB / 4096);
	struct gfa_guest *g = bguest(&h, 16 * MiB);
	struct gfa_host_return_stat st;
	struct gfa_guest_stat gs;
	uint64_t *w;

	memset(gfa_guest_hva(g), 0x77, 16 * MiB);
	gfa_guest_destroy(g);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 16 * MiB / 4096);
	bhost_start(&h);
	cr_assert_eq(gfa_host_return_quiesce(h.hr, 10000), 0);
	gfa_host_return_stat(h.hr, &st);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 0, "idle scrub left dirty frames");
	cr_assert_eq(st.bytes_scrubbed, 16 * MiB);
	cr_assert_eq(st.bytes_released, 0);
	g = bguest(&h, 16 * MiB);
	gfa_guest_stat(g, &gs);
	cr_assert_eq(gs.zeroed_frames, 0, "the start paid for zeroing");
	w = gfa_guest_hva(g);
	for (uint64_t i = 0; i < 16 * MiB / 8; i += 509)
		cr_assert_eq(w[i], 0, "stale data at %lu", i * 8);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/*
 * Frames parked in an idle vCPU cache come back: the host-return thread drains caches
 * idle for pcp_idle_ms (the kernel's vmstat-worker drain), so they can merge and be
 * released; a cache that keeps working is left alone.
 */
Test(balloon, host_return_drains_idle_vcpu_caches, .timeout = 60)
{
	/* idle means 300 ms without a call: the busy cache works every 10 ms, a margin a
	 * loaded 2-CPU machine keeps (50 ms did not always) */
	struct gfa_host_return_config hc = { .pcp_idle_ms = 300 };
	struct bhost h = bhost_new(32 * MiB, &hc, 32 * MiB / 4096);
	struct gfa_pcp *idle = gfa_pcp_create(h.pool, 0), *busy = gfa_pcp_create(h.pool, 0);
	struct gfa_host_return_stat st = { 0 };
	struct gfa_pcp_stat ps;
	int64_t a[2];
	int busy_count = 0;

	for (int i = 0; i < 2; i++) {
		struct gfa_pcp *c = i ? busy : idle;

		a[i] = gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 11, 0);
		cr_assert_geq(a[i], 0);
		cr_assert_eq(gfa_pcp_free(c, (uint64_t)a[i], 0, 11), 0);
	}
	cr_assert_eq(gfa_pcp_stat(idle, &ps), 0);
	cr_assert_gt(ps.count, 0, "the refill left frames in the cache");
	bhost_start(&h);
	/* keep `busy` working for a while; `idle` does nothing */
	for (int round = 0; round < 300 && !st.pcp_frames_drained; round++) {
		int64_t x = gfa_pcp_alloc(busy, 0, GFA_MT_MOVABLE, 11, 0);

		cr_assert_geq(x, 0);
		cr_assert_eq(gfa_pcp_free(busy, (uint64_t)x, 0, 11), 0);
		usleep(10000);
		gfa_host_return_stat(h.hr, &st);
	}
	cr_assert_gt(st.pcp_frames_drained, 0, "no idle cache drained within three seconds");
	cr_assert_eq(gfa_pcp_stat(idle, &ps), 0);
	cr_assert_eq(ps.count, 0, "the idle cache still holds %d frames", ps.count);
	cr_assert_eq(gfa_pcp_stat(busy, &ps), 0);
	busy_count = ps.count;
	cr_assert_gt(busy_count, 0, "the working cache was drained too");
	gfa_host_return_stop(h.hr);
	h.hr = NULL;
	gfa_pcp_destroy(idle);
	gfa_pcp_destroy(busy);
	ASSERT_POOL_OK(h.pool);
	gfa_backing_destroy(h.b);
	gfa_pool_destroy(h.pool);
}

/*
 * Inflation unmaps the guest's window before it frees the frames: another owner that
 * gets a freed frame at once must never see its data through the ballooning guest.
 * Probabilistic (the two threads must overlap), so many rounds on fresh ranges: with
 * the unmap after the frees it failed 10 runs of 10.
 */
struct alias_watch {
	struct bhost *h;
	char *win;
	uint64_t pfn_gpa[512][2]; /* the range being ballooned: pfn -> gpa */
	unsigned int n;
	atomic_int stop, running;
	atomic_ulong taken;
	uint64_t aliased;
	int64_t held[4096];
	unsigned int nheld;
};

static void *alias_main(void *arg)
{
	struct alias_watch *a = arg;
	const uint64_t marker = 0x5a5a1234cafef00dULL;

	while (!atomic_load(&a->stop) && a->nheld < 4096) {
		/* NOCOMPACT: a failed try must be cheap, or the frees happen while this
		 * thread sits in direct compaction and it checks nothing in time */
		int64_t pfn = gfa_backing_alloc(a->h->b, NULL, 0, 0, GFA_MT_MOVABLE, 77,
						GFA_BACKING_ZERO | GFA_ALLOC_NOCOMPACT);

		atomic_store(&a->running, 1);
		if (pfn < 0)
			continue;
		a->held[a->nheld++] = pfn;
		*(volatile uint64_t *)gfa_pfn_to_addr(a->h->pool, (uint64_t)pfn) = marker;
		for (unsigned int i = 0; i < a->n; i++)
			if (a->pfn_gpa[i][0] == (uint64_t)pfn &&
			    *(volatile uint64_t *)(a->win + a->pfn_gpa[i][1]) == marker)
				a->aliased++;
		atomic_fetch_add(&a->taken, 1);
	}
	return NULL;
}

/* One guest: take every free frame, then balloon six ranges while a watcher allocates. */
static void alias_cycle(struct alias_watch *a, struct bhost *h, uint64_t *taken, uint64_t *aliased)
{
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB };
	struct gfa_guest *g = gfa_guest_create(h->pool, h->b, &cfg);
	int64_t filler[64];
	unsigned int nf = 0;

	cr_assert_not_null(g);
	for (int o = GFA_MAX_ORDER; o >= 0; o--) {
		int64_t p;

		while ((p = gfa_alloc(h->pool, 0, (unsigned int)o, GFA_MT_MOVABLE, 99,
				      GFA_ALLOC_NOCOMPACT)) >= 0) {
			cr_assert_lt(nf, 64);
			filler[nf++] = p;
		}
	}
	a->win = gfa_guest_hva(g);
	for (int round = 0; round < 6; round++) {
		/* [x + 4 KiB, x + 2 MiB): cuts an order-9 block, freed as 511 frames */
		struct gfa_gpa_range r = { (uint64_t)round * 2 * MiB + 4096, 2 * MiB - 4096 };
		pthread_t th;

		a->n = 0;
		for (uint64_t gpa = r.gpa; gpa < r.gpa + r.len; gpa += 4096) {
			uint64_t pfn;

			cr_assert_eq(gfa_guest_gpa_to_pfn(g, gpa, &pfn), 0);
			a->pfn_gpa[a->n][0] = pfn;
			a->pfn_gpa[a->n++][1] = gpa;
		}
		atomic_store(&a->stop, 0);
		atomic_store(&a->running, 0);
		atomic_store(&a->taken, 0);
		a->aliased = 0;
		cr_assert_eq(pthread_create(&th, NULL, alias_main, a), 0);
		while (!atomic_load(&a->running)) /* it is trying: no sleep */
			sched_yield();
		cr_assert_eq(gfa_balloon_inflate(g, &r, 1), 511);
		/* done when it holds every frame inflation freed (bounded) */
		for (int i = 0; i < 5000 && atomic_load(&a->taken) < 511; i++)
			usleep(1000);
		atomic_store(&a->stop, 1);
		pthread_join(th, NULL);
		*aliased += a->aliased;
		*taken += atomic_load(&a->taken);
	}
	for (unsigned int i = 0; i < a->nheld; i++)
		cr_assert_eq(gfa_free(h->pool, (uint64_t)a->held[i], 0, 77), 0);
	a->nheld = 0;
	for (unsigned int i = 0; i < nf; i++) {
		struct gfa_frame_info fi;

		cr_assert_eq(gfa_frame_lookup(h->pool, (uint64_t)filler[i], &fi), 0);
		cr_assert_eq(gfa_free(h->pool, (uint64_t)filler[i], fi.order, 99), 0);
	}
	gfa_guest_destroy(g);
}

Test(balloon, inflate_never_leaves_the_guest_mapping_a_freed_frame, .timeout = 120)
{
	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct alias_watch *a = calloc(1, sizeof(*a));
	uint64_t aliased = 0, taken = 0;

	a->h = &h;
	for (int cycle = 0; cycle < 10; cycle++)
		alias_cycle(a, &h, &taken, &aliased);
	cr_log_info("frames the other owner got: %lu, seen through the guest: %lu",
		    (unsigned long)taken, (unsigned long)aliased);
	cr_assert_eq(taken, 60 * 511, "the other owner did not get every freed frame");
	cr_assert_eq(aliased, 0, "%lu frames of another owner were mapped in the guest window",
		     (unsigned long)aliased);
	free(a);
	bhost_done(&h);
}

/*
 * Inflation waits for a block compaction holds isolated; meanwhile compaction must not
 * map another block of the range into the window again (it did while inflation
 * dropped the guest lock to wait), or the guest keeps a freed frame mapped.
 */
struct move_gate {
	pthread_mutex_t m;
	pthread_cond_t c;
	int inside, open;
};

static struct move_gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

static int gate_migrate(void *ctx, uint64_t owner, uint64_t s, uint64_t d, unsigned int o)
{
	(void)ctx;
	(void)owner;
	(void)s;
	(void)d;
	(void)o;
	pthread_mutex_lock(&gate.m);
	gate.inside = 1;
	pthread_cond_broadcast(&gate.c);
	while (!gate.open)
		pthread_cond_wait(&gate.c, &gate.m);
	pthread_mutex_unlock(&gate.m);
	return -EAGAIN; /* stays where it is */
}

static void *full_compact_main(void *arg)
{
	gfa_compact_zone(arg, 0, -1, GFA_COMPACT_SYNC);
	return NULL;
}

struct inflate_arg {
	struct gfa_guest *g;
	int64_t ret;
};

static void *inflate_main(void *arg)
{
	struct inflate_arg *a = arg;
	struct gfa_gpa_range r = { 0, 384 * GFA_FRAME_SIZE };

	a->ret = gfa_balloon_inflate(a->g, &r, 1);
	return NULL;
}

Test(balloon, inflate_waiting_for_a_move_leaves_no_frame_mapped, .timeout = 60)
{
	const uint64_t F = 5, Y = 9, nr = 2048;
	struct bhost h = bhost_new(nr * GFA_FRAME_SIZE, NULL, 0);
	struct gfa_guest_config cfg = { .mem_bytes = 2 * MiB, .small_only = true };
	struct gfa_owner_ops yops = { .migrate = gate_migrate };
	struct inflate_arg ia;
	struct gfa_vmstat vs;
	pthread_t tc, ti;
	uint64_t pfn, *win, hits = 0, busy0;

	cr_assert_eq(gfa_owner_register(h.pool, Y, &yops, NULL), 0);
	cr_assert_eq(gfa_alloc(h.pool, 0, 0, GFA_MT_MOVABLE, Y, 0), 0);
	for (uint64_t i = 1; i < nr; i++)
		cr_assert_eq(gfa_alloc(h.pool, 0, 0, GFA_MT_MOVABLE, F, 0), (int64_t)i);
	for (uint64_t q = 1; q <= 512; q++)
		cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	/* largest first: gfn 0 -> pfn 256 (order 8), gfn 256 -> pfn 128 (order 7), ... */
	ia.g = gfa_guest_create(h.pool, h.b, &cfg);
	cr_assert_not_null(ia.g);
	cr_assert_eq(gfa_guest_gpa_to_pfn(ia.g, 0, &pfn), 0);
	cr_assert_eq(pfn, 256);
	cr_assert_eq(gfa_guest_gpa_to_pfn(ia.g, 256 * GFA_FRAME_SIZE, &pfn), 0);
	cr_assert_eq(pfn, 128);
	for (uint64_t q = 1024; q < nr; q++) /* targets */
		cr_assert_eq(gfa_free(h.pool, q, 0, F), 0);
	/* compaction isolates Y's frame and the guest's blocks, then waits in Y's op */
	pthread_create(&tc, NULL, full_compact_main, h.pool);
	pthread_mutex_lock(&gate.m);
	while (!gate.inside)
		pthread_cond_wait(&gate.c, &gate.m);
	pthread_mutex_unlock(&gate.m);
	/* inflate gfns [0, 384): gfn 0 (pfn 256) is isolated, inflate waits for it */
	gfa_pool_vmstat(h.pool, &vs);
	busy0 = vs.err_busy;
	pthread_create(&ti, NULL, inflate_main, &ia);
	do { /* inflate is waiting: its free of the isolated block was refused */
		usleep(1000);
		gfa_pool_vmstat(h.pool, &vs);
	} while (vs.err_busy == busy0);
	pthread_mutex_lock(&gate.m);
	gate.open = 1;
	pthread_cond_broadcast(&gate.c);
	pthread_mutex_unlock(&gate.m);
	pthread_join(ti, NULL);
	pthread_join(tc, NULL);
	cr_assert_eq(ia.ret, 384);
	cr_assert_eq(gfa_guest_gpa_to_pfn(ia.g, 256 * GFA_FRAME_SIZE, &pfn), -ENOENT);
	/* the guest touches its ballooned page: it must not reach any pool frame */
	win = (uint64_t *)((char *)gfa_guest_hva(ia.g) + 256 * GFA_FRAME_SIZE);
	cr_assert_eq(*win, 0, "ballooned page reads %#lx, not zero", (unsigned long)*win);
	*win = 0x5eed5eed5eed5eedULL;
	for (uint64_t q = 0; q < nr; q++)
		hits += *(uint64_t *)gfa_pfn_to_addr(h.pool, q) == 0x5eed5eed5eed5eedULL;
	cr_assert_eq(hits, 0, "a write to a ballooned page landed in %lu pool frame(s)",
		     (unsigned long)hits);
	gfa_guest_destroy(ia.g);
	for (uint64_t q = 1; q < nr; q++) {
		struct gfa_frame_info fi;

		if (!gfa_frame_lookup(h.pool, q, &fi) && fi.state == GFA_FRAME_ALLOCATED &&
		    fi.head_pfn == q && fi.owner == F)
			cr_assert_eq(gfa_free(h.pool, q, fi.order, F), 0);
	}
	cr_assert_eq(gfa_free(h.pool, 0, 0, Y), 0);
	bhost_done(&h);
}

/*
 * A balloon kicks the backing's host return from a vCPU thread while the VMM may be
 * stopping it: the kick must never reach a freed host return.  Meaningful under
 * `make asan`: with the kick reverted to load-then-lock it reports a heap use after
 * free in 4 of 5 runs there; the normal build rarely notices.
 */
struct kick_arg {
	struct gfa_backing *b;
	atomic_bool stop;
	uint64_t kicks;
};

static void *kicker(void *p)
{
	struct kick_arg *a = p;

	while (!atomic_load(&a->stop)) {
		gfa_backing_kick_host_return(a->b);
		a->kicks++;
	}
	return NULL;
}

Test(balloon, kicks_through_the_backing_race_host_return_stop, .timeout = 60)
{
	struct gfa_host_return_config hc = { .interval_ms = 1000,
					     .no_scrub = true,
					     .no_pcp_drain = true,
					     .force_sync = true };
	struct bhost h = bhost_new(8 * MiB, &hc, 0);
	struct kick_arg a = { .b = h.b };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, kicker, &a), 0);
	for (int i = 0; i < 300; i++) {
		bhost_start(&h);
		cr_assert_eq(gfa_backing_host_return(h.b), h.hr);
		errno = 0;
		cr_assert_null(gfa_host_return_start(h.pool, h.b, &hc));
		cr_assert_eq(errno, EBUSY);
		gfa_host_return_stop(h.hr);
		cr_assert_null(gfa_backing_host_return(h.b));
	}
	atomic_store(&a.stop, true);
	pthread_join(t, NULL);
	cr_assert_gt(a.kicks, 0);
	h.hr = NULL;
	bhost_done(&h);
}

/* Two host returns on one backing would release the same frames twice. */
struct start_arg {
	struct bhost *h;
	pthread_barrier_t *bar;
	struct gfa_host_return *hr;
};

static void *starter(void *p)
{
	struct start_arg *a = p;

	pthread_barrier_wait(a->bar);
	a->hr = gfa_host_return_start(a->h->pool, a->h->b, a->h->hc);
	return NULL;
}

Test(balloon, concurrent_host_return_starts_on_one_backing_one_wins, .timeout = 60)
{
	struct gfa_host_return_config hc = { .interval_ms = 1000,
					     .no_scrub = true,
					     .no_pcp_drain = true };
	struct bhost h = bhost_new(8 * MiB, &hc, 0);
	pthread_barrier_t bar;

	pthread_barrier_init(&bar, NULL, 2);
	for (int i = 0; i < 20; i++) {
		struct start_arg a[2] = { { &h, &bar, NULL }, { &h, &bar, NULL } };
		pthread_t t[2];

		for (int k = 0; k < 2; k++)
			cr_assert_eq(pthread_create(&t[k], NULL, starter, &a[k]), 0);
		for (int k = 0; k < 2; k++)
			pthread_join(t[k], NULL);
		cr_assert((a[0].hr != NULL) != (a[1].hr != NULL),
			  "round %d: %s host returns started on one backing", i,
			  a[0].hr ? "two" : "no");
		h.hr = a[0].hr ? a[0].hr : a[1].hr;
		cr_assert_eq(gfa_backing_host_return(h.b), h.hr);
		gfa_host_return_stop(h.hr);
	}
	pthread_barrier_destroy(&bar);
	h.hr = NULL;
	bhost_done(&h);
}

/*
 * An owner that is not a guest: compaction's move leaves a copy of its data in the
 * source, which must count as dirty so the next owner gets it zeroed (the guest marked
 * its sources itself; other owners did not, and the data reached the next owner).
 */
static void no_moved(void *ctx, uint64_t pfn, unsigned int order)
{
	(void)ctx, (void)pfn, (void)order;
}

Test(balloon, blocks_moved_away_by_compaction_are_dirty_for_any_owner, .timeout = 60)
{
	struct bhost h = bhost_new(8 * MiB, NULL, 0);
	struct canary_owner *o = co_create(h.pool, 77, 2048, true);
	uint64_t moved = 0, *before;

	cr_assert_not_null(o);
	for (uint64_t p = 0; p < 2048; p++)
		cr_assert_eq(co_alloc(o, NULL, 0, p, 0), 0);
	for (uint64_t p = 0; p < 2048; p += 2) /* holes everywhere */
		cr_assert_eq(co_free(o, NULL, p), 0);
	/* clean slate: what the frees dirtied does not count, only what moves leave */
	gfa_backing_mark_clean_range(h.b, 0, 4096);
	before = malloc(2048 * sizeof(*before));
	for (uint64_t p = 0; p < 2048; p++)
		before[p] = o->pfn[p];
	cr_assert_eq(gfa_compact_zone(h.pool, 0, -1, GFA_COMPACT_SYNC), GFA_COMPACT_COMPLETE);
	for (uint64_t p = 1; p < 2048; p += 2) {
		if (o->pfn[p] == before[p])
			continue;
		moved++;
		cr_assert(gfa_backing_block_dirty(h.b, before[p], 0),
			  "page %lu moved from pfn %lu, which holds its data but reads clean",
			  (unsigned long)p, (unsigned long)before[p]);
	}
	cr_assert_gt(moved, 100, "compaction moved only %lu blocks", (unsigned long)moved);
	cr_assert_eq(co_verify_all(o, NULL), 0);
	/* one hook per pool: the backing holds it */
	cr_assert_eq(pool_set_moved_fn(h.pool, no_moved, NULL), GFA_EBUSY);
	free(before);
	for (uint64_t p = 1; p < 2048; p += 2)
		cr_assert_eq(co_free(o, NULL, p), 0);
	co_destroy(o);
	bhost_done(&h);
}

/*
 * A whole block inflated, one page of it deflated: the other 511 gfns are still holes,
 * and collapse (which looks at block heads) must not back them again.
 */
Test(balloon, collapse_after_partial_deflate_keeps_ballooned_pages_out)
{
	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 8 * MiB);
	struct gfa_gpa_range whole = { 2 * MiB, 2 * MiB }, first = { 2 * MiB, 4096 };
	struct gfa_gpa_range second = { 2 * MiB + 4096, 4096 };
	struct gfa_guest_stat st;
	uint64_t pfn;

	cr_assert_eq(gfa_balloon_inflate(g, &whole, 1), 512);
	cr_assert_eq(gfa_balloon_deflate(g, &first, 1), 1);
	gfa_guest_collapse(g, 4);
	gfa_guest_stat(g, &st);
	cr_expect_eq(st.ballooned_frames, 511);
	cr_expect_eq(gfa_guest_gpa_to_pfn(g, second.gpa, &pfn), -ENOENT,
		     "ballooned gfn is backed again (pfn %lu)", (unsigned long)pfn);
	cr_expect_eq(gfa_balloon_inflate(g, &second, 1), -EALREADY,
		     "a ballooned page can be inflated a second time");
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/* The sanitizers' allocators need the mappings the map-limit tests use up. */
static void skip_under_sanitizers_at_the_map_limit(void)
{
	if (tu_sanitizer())
		cr_skip_test("fills vm.max_map_count: not under %s", getenv("GFA_SANITIZER"));
}

/* Fill the process's map count (vm.max_map_count) with alternating one-page mappings. */
static unsigned int fill_vmas(void **pages, unsigned int max)
{
	unsigned int n = 0;

	while (n < max) {
		void *p = mmap(NULL, 4096, n & 1 ? PROT_READ : PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			break;
		pages[n++] = p;
	}
	return n;
}

/*
 * Inflating a page in the middle of a block needs two more VMAs; with none left the
 * window cannot be unmapped, and the frame must not be freed while the guest still maps
 * it (it was: the guest kept reading and writing a free frame).
 */
Test(balloon, inflate_with_no_vma_left_frees_nothing_still_mapped, .timeout = 60)
{
	skip_under_sanitizers_at_the_map_limit();

	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 8 * MiB);
	struct gfa_gpa_range mid[2] = { { 2 * MiB, 4096 }, { 4 * MiB + 64 * 1024, 4096 } };
	unsigned int max = 1u << 20, n;
	void **pages = malloc(max * sizeof(*pages));
	volatile uint64_t *w = (uint64_t *)((char *)gfa_guest_hva(g) + mid[1].gpa);
	uint64_t pfn, now;
	struct gfa_guest_stat st;
	int64_t ret;

	cr_assert_not_null(pages);
	w[0] = 0x1111;
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, mid[1].gpa, &pfn), 0);
	n = fill_vmas(pages, max);
	cr_assert(n < max, "mmap never failed");
	/* one slot: no range gets its two VMAs (the undo is failed_inflate_leaves_...) */
	munmap(pages[--n], 4096);
	ret = gfa_balloon_inflate(g, mid, 2);
	for (unsigned int i = 0; i < n; i++)
		munmap(pages[i], 4096);
	free(pages);
	cr_assert_eq(ret, -ENOMEM, "inflate returned %ld", (long)ret);
	/* nothing changed: both pages still the guest's and mapped */
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, mid[1].gpa, &now), 0);
	cr_assert_eq(now, pfn);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, mid[0].gpa, &now), 0);
	cr_assert_eq(w[0], 0x1111);
	w[0] = 0x2222;
	cr_assert_eq(*(volatile uint64_t *)gfa_pfn_to_addr(h.pool, pfn), 0x2222,
		     "the window no longer maps the guest's frame");
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.ballooned_frames, 0);
	cr_assert_eq(gfa_balloon_inflate(g, mid, 2), 2, "with room it works");
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/*
 * A move that fails after the owner copied (the guest's remap at vm.max_map_count)
 * leaves the guest's bytes in the target, which goes back to the free lists: it must
 * count as dirty (it did not: another owner got the guest's data unzeroed).
 */
Test(balloon, a_failed_move_leaves_no_guest_data_for_the_next_owner, .timeout = 60)
{
	skip_under_sanitizers_at_the_map_limit();

	struct bhost h = bhost_new(8 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 2 * MiB);
	struct gfa_gpa_range one = { 4096, 4096 };
	unsigned int max = 1u << 20, n;
	void **pages = malloc(max * sizeof(*pages));
	uint64_t leaked = 0, allocated = 0;
	int64_t p;

	cr_assert_not_null(pages);
	memset(gfa_guest_hva(g), 0xa5, 2 * MiB);
	cr_assert_eq(gfa_balloon_inflate(g, &one, 1), 1); /* order-0 pieces */
	n = fill_vmas(pages, max); /* no VMA left: every remap of a move fails */
	cr_assert(n < max, "mmap never failed");
	gfa_compact_zone(h.pool, 0, -1, GFA_COMPACT_SYNC);
	for (unsigned int i = 0; i < n; i++)
		munmap(pages[i], 4096);
	free(pages);
	/* another owner takes every free frame through the backing, zeroed where dirty */
	while ((p = gfa_backing_alloc(h.b, NULL, 0, 0, GFA_MT_MOVABLE, 77,
				      GFA_ALLOC_NOCOMPACT | GFA_BACKING_ZERO)) >= 0) {
		const uint8_t *m = gfa_pfn_to_addr(h.pool, (uint64_t)p);

		allocated++;
		leaked += m[0] == 0xa5;
	}
	cr_assert_gt(allocated, 0);
	cr_assert_eq(leaked, 0, "%lu of %lu frames handed to owner 77 hold the guest's bytes",
		     (unsigned long)leaked, (unsigned long)allocated);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/*
 * With a little room at the map limit the first range unmaps, the second cannot, and
 * the first is mapped back - or, if that fails too, ballooned after all.  Either way a
 * gfn the guest owns is mapped to its frame and one it gave up reads zero (the undo
 * used to leave an owned frame behind an anonymous window).  Tries 1..8 free slots.
 */
Test(balloon, failed_inflate_leaves_owned_gfns_mapped_and_the_rest_zero, .timeout = 60)
{
	skip_under_sanitizers_at_the_map_limit();

	struct bhost h = bhost_new(32 * MiB, NULL, 0);
	struct gfa_guest *g = bguest(&h, 8 * MiB);
	struct gfa_gpa_range mid[2] = { { 2 * MiB, 4096 }, { 4 * MiB + 64 * 1024, 4096 } };
	unsigned int max = 1u << 20, n, undone = 0;
	void **pages = malloc(max * sizeof(*pages));
	struct gfa_guest_stat st;
	int64_t ret = -ENOMEM;

	cr_assert_not_null(pages);
	for (unsigned int k = 1; k <= 8 && ret == -ENOMEM; k++) {
		n = fill_vmas(pages, max);
		cr_assert(n < max && n >= k);
		for (unsigned int j = 0; j < k; j++)
			munmap(pages[--n], 4096);
		ret = gfa_balloon_inflate(g, mid, 2);
		for (unsigned int i = 0; i < n; i++)
			munmap(pages[i], 4096);
		for (int i = 0; i < 2 && ret == -ENOMEM; i++) {
			volatile uint64_t *w = (uint64_t *)((char *)gfa_guest_hva(g) + mid[i].gpa);
			uint64_t pfn;

			if (gfa_guest_gpa_to_pfn(g, mid[i].gpa, &pfn)) {
				cr_assert_eq(w[0], 0, "%u slots: range %d given up but not zero", k,
					     i);
				undone++;
				continue;
			}
			w[0] = 0x3333 + k + i;
			cr_assert_eq(*(volatile uint64_t *)gfa_pfn_to_addr(h.pool, pfn),
				     0x3333 + k + i,
				     "%u slots free: range %d's window no longer maps its frame", k,
				     i);
		}
		if (ret == -ENOMEM && undone)
			break; /* a range was ballooned by the undo: inflate again would be EALREADY */
	}
	free(pages);
	gfa_guest_stat(g, &st);
	if (!undone) {
		cr_assert_eq(ret, 2, "inflate with room: %ld", (long)ret);
		cr_assert_eq(st.ballooned_frames, 2);
	} else {
		cr_assert_eq(st.ballooned_frames, undone);
	}
	gfa_guest_destroy(g);
	bhost_done(&h);
}

/*
 * A small_only guest "never uses order-9 blocks": deflating a whole 2 MiB range must
 * not back it with one (deflate_range takes the largest aligned block it can).
 */
Test(balloon, deflate_of_a_small_only_guest_takes_no_order9_block)
{
	struct bhost h = bhost_new(16 * MiB, NULL, 0);
	struct gfa_guest_config cfg = { .mem_bytes = 4 * MiB, .small_only = true };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_gpa_range whole = { 2 * MiB, 2 * MiB };
	struct gfa_guest_stat st;
	struct gfa_frame_info fi;
	uint64_t pfn;

	cr_assert_not_null(g);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 0);
	cr_assert_eq(gfa_balloon_inflate(g, &whole, 1), 512);
	cr_assert_eq(gfa_balloon_deflate(g, &whole, 1), 512);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, whole.gpa, &pfn), 0);
	cr_assert_eq(gfa_frame_lookup(h.pool, pfn, &fi), 0);
	gfa_guest_stat(g, &st);
	cr_expect_eq(st.huge_ranges, 0, "small_only guest got %lu huge range(s)",
		     (unsigned long)st.huge_ranges);
	cr_assert_lt(fi.order, GFA_PAGEBLOCK_ORDER,
		     "deflate backed gpa %#lx with an order-%u block", (unsigned long)whole.gpa,
		     fi.order);
	gfa_guest_destroy(g);
	bhost_done(&h);
}

struct hrq_churn {
	struct gfa_pool *pool;
	atomic_bool stop;
};

/* Keeps the host return busy: every free leaves populated memory above its reserve. */
static void *hrq_churn_main(void *arg)
{
	struct hrq_churn *c = arg;

	while (!atomic_load(&c->stop)) {
		int64_t pfn = gfa_alloc(c->pool, 0, 9, GFA_MT_MOVABLE, 3, GFA_ALLOC_NOCOMPACT);

		if (pfn >= 0)
			gfa_free(c->pool, (uint64_t)pfn, 9, 3);
		else
			sched_yield();
	}
	return NULL;
}

struct hrq_waiter {
	struct gfa_host_return *hr;
	atomic_int ret;
	atomic_bool in;
	double ms;
};

static void *hrq_quiesce_main(void *arg)
{
	struct hrq_waiter *w = arg;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	atomic_store(&w->in, true);
	atomic_store(&w->ret, gfa_host_return_quiesce(w->hr, 5000));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	w->ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	return NULL;
}

/*
 * gfa_host_return_stop while a quiesce waits on another thread (shutdown paths do
 * both): the waiter returns -ECANCELED at once and stop frees hr only after it left.
 * Before, stop freed hr under the waiter, which woke at its timeout in freed memory.
 */
Test(balloon, stop_while_another_thread_quiesces, .timeout = 120)
{
	struct gfa_host_return_config hc = { .force_sync = true,
					     .no_settle = true,
					     .no_scrub = true,
					     .no_pcp_drain = true };
	int canceled = 0;

	for (int attempt = 0; attempt < 40 && !canceled; attempt++) {
		struct bhost h = bhost_new(16 * MiB, &hc, 0);
		struct hrq_churn c = { .pool = h.pool };
		struct hrq_waiter w = { .ret = 1 };
		pthread_t ct, wt;

		bhost_start(&h);
		cr_assert_eq(pthread_create(&ct, NULL, hrq_churn_main, &c), 0);
		w.hr = h.hr;
		cr_assert_eq(pthread_create(&wt, NULL, hrq_quiesce_main, &w), 0);
		while (!atomic_load(&w.in))
			sched_yield();
		usleep(20000);
		gfa_host_return_stop(h.hr);
		h.hr = NULL;
		pthread_join(wt, NULL);
		atomic_store(&c.stop, true);
		pthread_join(ct, NULL);
		cr_assert(w.ret == 0 || w.ret == -ECANCELED, "quiesce returned %d after %.0f ms",
			  w.ret, w.ms);
		if (w.ret == -ECANCELED) {
			canceled++;
			cr_assert_lt(w.ms, 2000, "the waiter stayed %.0f ms past the stop", w.ms);
		}
		bhost_done(&h);
	}
	if (!canceled)
		cr_skip_test(
			"no quiesce was still waiting when stop came in 40 tries: busy machine");
}

/* Zeroing skips whole clean words of the dirty bitmap: dirty frames right after such a
 * skip, and in the middle of words, are zeroed all the same. */
Test(balloon, prepare_zeroes_every_dirty_frame_of_an_order9_block)
{
	static const uint64_t offs[] = { 0, 64, 65, 130, 511 };
	const unsigned int n = ARRAY_SIZE(offs);
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_pool *p = tu_pool(2048);
	struct gfa_backing *b = gfa_backing_create(p, &bc);
	int64_t a = gfa_alloc(p, 0, 9, GFA_MT_MOVABLE, 3, 0);
	uint64_t d0;

	cr_assert_not_null(b);
	cr_assert_geq(a, 0);
	for (unsigned int i = 0; i < n; i++) {
		memset(gfa_pfn_to_addr(p, (uint64_t)a + offs[i]), 0xa5, GFA_FRAME_SIZE);
		gfa_backing_mark_dirty(b, (uint64_t)a + offs[i], 0);
	}
	d0 = gfa_backing_nr_dirty(b);
	cr_assert_eq(gfa_backing_prepare(b, (uint64_t)a, 9), (int64_t)n);
	for (unsigned int i = 0; i < n; i++) {
		const unsigned char *c = gfa_pfn_to_addr(p, (uint64_t)a + offs[i]);

		for (size_t k = 0; k < GFA_FRAME_SIZE; k++)
			cr_assert_eq(c[k], 0, "frame +%lu byte %zu not zeroed",
				     (unsigned long)offs[i], k);
	}
	cr_assert_eq(gfa_backing_nr_dirty(b), d0 - n);
	cr_assert_eq(gfa_backing_prepare(b, (uint64_t)a, 9), 0, "nothing left to zero");
	cr_assert_eq(gfa_free(p, (uint64_t)a, 9, 3), 0);
	ASSERT_POOL_OK(p);
	gfa_backing_destroy(b);
	gfa_pool_destroy(p);
}
