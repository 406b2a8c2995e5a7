/* Free page reporting: host memory goes back while the frames stay the guest's. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/host_util.h"

#define MiB (1UL << 20)

struct rhost {
	struct tu_host t;
	struct gfa_free_report *rep;
};

static struct rhost rhost_new(uint64_t pool_bytes, uint64_t guest_bytes)
{
	const struct gfa_backing_config bc = { .populate = true };
	struct rhost h = { tu_host_new(pool_bytes, &bc, guest_bytes), NULL };

	h.rep = gfa_guest_report_create(h.t.b, h.t.g);
	cr_assert_not_null(h.rep);
	return h;
}

static void rhost_done(struct rhost *h)
{
	gfa_guest_report_destroy(h->rep);
	tu_host_done(&h->t);
}

Test(report, reported_memory_leaves_the_host_and_stays_the_guests, .timeout = 60)
{
	struct rhost h = rhost_new(64 * MiB, 32 * MiB);
	struct tu_rdone d = TU_RDONE_INIT;
	/* one range on a whole order-9 block, one cutting two blocks */
	struct gfa_gpa_range r[2] = { { 8 * MiB, 4 * MiB }, { 17 * MiB, 2 * MiB } };
	struct gfa_guest_report_stat rs;
	struct gfa_guest_stat gs, gs0;
	struct gfa_frame_info fi;
	uint64_t *w = gfa_guest_hva(h.t.g), pfn;
	int64_t before, after;

	tu_fill(h.t.g, 3);
	gfa_guest_stat(h.t.g, &gs0);
	before = tu_backed(h.t.b);
	cr_assert_eq(gfa_guest_report_free(h.rep, r, 2, tu_rdone_fn, &d), 0);
	tu_rdone_wait(&d, 1);
	cr_assert_eq(d.result, 0);
	after = tu_backed(h.t.b);
	cr_log_info("host-backed %ld -> %ld KiB", (long)(before >> 10), (long)(after >> 10));
	cr_assert_leq(after, before - 6 * (int64_t)MiB, "the reported 6 MiB left the host");
	gfa_guest_report_stat(h.rep, &rs);
	cr_assert_eq(rs.bytes_released, 6 * MiB);
	cr_assert_eq(rs.frames_submitted, 6 * MiB / 4096);
	cr_assert_eq(rs.requests, 1);
	cr_assert_eq(rs.inflight_runs, 0);
	/* the frames are still the guest's and it reads zero there */
	for (unsigned int i = 0; i < 2; i++)
		for (uint64_t gpa = r[i].gpa; gpa < r[i].gpa + r[i].len; gpa += 4096) {
			cr_assert_eq(gfa_guest_gpa_to_pfn(h.t.g, gpa, &pfn), 0);
			cr_assert_eq(gfa_frame_lookup(h.t.pool, pfn, &fi), 0);
			cr_assert_eq(fi.state, GFA_FRAME_ALLOCATED);
			cr_assert_eq(fi.owner, gfa_guest_id(h.t.g));
			cr_assert_eq(w[gpa / 8], 0, "a reported page reads zero after the punch");
		}
	gfa_guest_stat(h.t.g, &gs);
	cr_assert_eq(gs.ballooned_frames, 0);
	cr_assert_eq(gs.blocks, gs0.blocks);
	cr_assert_eq(tu_fill_bad(h.t.g, 3, 8 * MiB, 19 * MiB), 0, "the rest is untouched");
	ASSERT_POOL_OK(h.t.pool);
	/* touched again, the guest's pages are backed again and keep what it writes */
	for (uint64_t gpa = r[0].gpa; gpa < r[0].gpa + r[0].len; gpa += 4096)
		w[gpa / 8] = gpa;
	cr_assert_geq(tu_backed(h.t.b), after + 4 * (int64_t)MiB - 4096 * 4);
	for (uint64_t gpa = r[0].gpa; gpa < r[0].gpa + r[0].len; gpa += 4096)
		cr_assert_eq(w[gpa / 8], gpa);
	rhost_done(&h);
}

Test(report, bad_requests_are_refused_and_counted, .timeout = 60)
{
	struct rhost h = rhost_new(32 * MiB, 16 * MiB);
	struct tu_rdone d = TU_RDONE_INIT;
	struct gfa_gpa_range two[2] = { { 0, MiB }, { 0, 0 } };
	struct gfa_guest_report_stat rs;
	int64_t before;

	tu_fill(h.t.g, 5);
	before = tu_backed(h.t.b);
	two[1] = (struct gfa_gpa_range){ 5 * MiB, 4096 + 1 };
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -EINVAL, "misaligned");
	two[1] = (struct gfa_gpa_range){ 5 * MiB, 0 };
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -EINVAL, "empty");
	two[1] = (struct gfa_gpa_range){ 15 * MiB, 2 * MiB };
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -ERANGE, "beyond RAM");
	two[1] = (struct gfa_gpa_range){ UINT64_MAX & ~4095UL, 8192 };
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -ERANGE, "wraps");
	two[1] = (struct gfa_gpa_range){ MiB - 4096, 8192 };
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -ENOTUNIQ, "overlap");
	two[1] = two[0];
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 2, tu_rdone_fn, &d), -ENOTUNIQ, "duplicate");
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 0, tu_rdone_fn, &d), -EINVAL, "none");
	cr_assert_eq(gfa_guest_report_free(h.rep, two, 1, NULL, &d), -EFAULT);
	cr_assert_eq(gfa_guest_report_free(NULL, two, 1, tu_rdone_fn, &d), -EFAULT);
	cr_assert_eq(gfa_guest_report_flush(h.rep, 1000), 0);
	cr_assert_eq(d.calls, 0, "a refused request has no done call");
	gfa_guest_report_stat(h.rep, &rs);
	cr_assert_eq(rs.err_invalid, 3);
	cr_assert_eq(rs.err_range, 2);
	cr_assert_eq(rs.err_overlap, 2);
	cr_assert_eq(rs.err_fault, 1);
	cr_assert_eq(rs.requests, 0);
	cr_assert_eq(tu_backed(h.t.b), before, "nothing was punched");
	cr_assert_eq(tu_fill_bad(h.t.g, 5, 0, 0), 0);
	cr_assert_null(gfa_guest_report_create(NULL, h.t.g));
	cr_assert_eq(errno, EFAULT);
	rhost_done(&h);
}

Test(report, ballooned_pages_are_passed_over, .timeout = 60)
{
	struct rhost h = rhost_new(32 * MiB, 16 * MiB);
	struct tu_rdone d = TU_RDONE_INIT;
	struct gfa_gpa_range hole = { 4 * MiB + 64 * 1024, 64 * 1024 }, r = { 4 * MiB, 2 * MiB };
	struct gfa_guest_report_stat rs;

	tu_fill(h.t.g, 6);
	cr_assert_eq(gfa_balloon_inflate(h.t.g, &hole, 1), 16);
	cr_assert_eq(gfa_guest_report_free(h.rep, &r, 1, tu_rdone_fn, &d), 0);
	tu_rdone_wait(&d, 1);
	cr_assert_eq(d.result, 0);
	gfa_guest_report_stat(h.rep, &rs);
	cr_assert_eq(rs.frames_unbacked, 16);
	cr_assert_eq(rs.frames_submitted, 512 - 16);
	cr_assert_eq(rs.bytes_released, (512 - 16) * 4096UL);
	cr_assert_eq(gfa_balloon_deflate(h.t.g, &hole, 1), 16);
	rhost_done(&h);
}

Test(report, a_guest_of_another_backing_is_refused)
{
	struct rhost h = rhost_new(32 * MiB, 16 * MiB), o = rhost_new(32 * MiB, 8 * MiB);

	cr_assert_null(gfa_guest_report_create(o.t.b, h.t.g));
	cr_assert_eq(errno, EINVAL);
	rhost_done(&o);
	rhost_done(&h);
}

/*
 * A move of a block whose punch is still queued must not free its old frames before the
 * punch: a new owner would find its data zeroed.  Request A's done callback holds the
 * engine thread, so request B's punch stays queued while a full compaction moves the
 * guest's blocks; the test then tries to take the frames a move left behind.
 */
struct rmove {
	struct rhost *h;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int held, release;
	_Atomic int compacting;
};

static void hold_engine(void *cookie, int result)
{
	struct rmove *m = cookie;

	(void)result;
	pthread_mutex_lock(&m->lock);
	m->held = 1;
	pthread_cond_broadcast(&m->cond);
	while (!m->release)
		pthread_cond_wait(&m->cond, &m->lock);
	pthread_mutex_unlock(&m->lock);
}

static void *compactor(void *arg)
{
	struct rmove *m = arg;

	gfa_compact_zone(m->h->t.pool, 0, -1, GFA_COMPACT_SYNC);
	atomic_store(&m->compacting, 0);
	return NULL;
}

/* The first gfn of [1, n) whose frame is no longer snap's, or UINT64_MAX. */
static uint64_t moved_gfn(struct rhost *h, const uint64_t *snap, uint64_t n)
{
	for (uint64_t i = 1; i < n; i++) {
		uint64_t pfn;

		if (!gfa_guest_gpa_to_pfn(h->t.g, i << GFA_FRAME_SHIFT, &pfn) && pfn != snap[i])
			return i;
	}
	return UINT64_MAX;
}

/* Allocate order-0 frames for owner 9 until src is one of them (or none is left). */
static bool take_frame(struct rhost *h, uint64_t src, int64_t *got, unsigned int max,
		       unsigned int *n)
{
	bool have = false;

	for (*n = 0; *n < max && !have; (*n)++) {
		got[*n] = gfa_alloc(h->t.pool, 0, 0, GFA_MT_UNMOVABLE, 9, GFA_ALLOC_NOCOMPACT);
		if (got[*n] < 0)
			break;
		have = (uint64_t)got[*n] == src;
	}
	return have;
}

Test(report, a_move_waits_for_the_punch_on_its_old_frames, .timeout = 120)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config gc = { .mem_bytes = 4 * MiB, .small_only = true };
	struct tu_rdone d = TU_RDONE_INIT;
	struct rhost h;
	struct rmove m = { &h, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 1 };
	struct gfa_gpa_range a = { 0, 4096 }, b = { 4096, 4 * MiB - 4096 };
	struct gfa_guest_report_stat rs;
	const uint64_t n = 4 * MiB / 4096;
	static uint64_t snap[1024], holes[2048];
	static int64_t got[8192];
	uint64_t gfn = UINT64_MAX, src;
	unsigned int ngot = 0;
	bool have;
	pthread_t t;

	h.t = tu_host_new(32 * MiB, &bc, 0);
	/* free holes low in the zone for compaction to move the guest's blocks into */
	for (unsigned int i = 0; i < 2048; i++)
		holes[i] = (uint64_t)gfa_alloc(h.t.pool, 0, 0, GFA_MT_MOVABLE, 7, 0);
	h.t.g = gfa_guest_create(h.t.pool, h.t.b, &gc);
	cr_assert_not_null(h.t.g);
	h.rep = gfa_guest_report_create(h.t.b, h.t.g);
	cr_assert_not_null(h.rep);
	for (unsigned int i = 0; i < 2048; i += 2)
		gfa_free(h.t.pool, holes[i], 0, 7);
	for (uint64_t i = 0; i < n; i++)
		cr_assert_eq(gfa_guest_gpa_to_pfn(h.t.g, i << GFA_FRAME_SHIFT, &snap[i]), 0);

	cr_assert_eq(gfa_guest_report_free(h.rep, &a, 1, hold_engine, &m), 0);
	pthread_mutex_lock(&m.lock);
	while (!m.held)
		pthread_cond_wait(&m.cond, &m.lock);
	pthread_mutex_unlock(&m.lock);
	cr_assert_eq(gfa_guest_report_free(h.rep, &b, 1, tu_rdone_fn, &d), 0); /* queued */
	pthread_create(&t, NULL, compactor, &m);
	/* (not in a tight loop: a move only tries the guest's lock, which the lookups take) */
	while (gfn == UINT64_MAX && atomic_load(&m.compacting)) {
		usleep(200);
		gfn = moved_gfn(&h, snap, n);
	}
	cr_assert_neq(gfn, UINT64_MAX, "compaction moved none of the guest's blocks");
	src = snap[gfn];
	/* give a move that does not wait every chance to free src (it need not: the
	 * assertion below holds whenever the punch waits) */
	for (int i = 0; i < 2000; i++) {
		struct gfa_frame_info fi;

		if (!gfa_frame_lookup(h.t.pool, src, &fi) && fi.state != GFA_FRAME_ALLOCATED &&
		    fi.state != GFA_FRAME_ISOLATED)
			break;
		usleep(1000);
	}
	have = take_frame(&h, src, got, 8192, &ngot);
	if (have)
		*(volatile uint64_t *)gfa_pfn_to_addr(h.t.pool, src) = 0xc0ffee;
	pthread_mutex_lock(&m.lock);
	m.release = 1;
	pthread_cond_broadcast(&m.cond);
	pthread_mutex_unlock(&m.lock);
	tu_rdone_wait(&d, 1);
	pthread_join(t, NULL);
	gfa_guest_report_stat(h.rep, &rs);
	cr_log_info("gfn %lu moved from pfn %lu; src taken by another owner before the punch: %d;"
		    " %lu moves waited",
		    (unsigned long)gfn, (unsigned long)src, have, (unsigned long)rs.moves_waited);
	if (have)
		cr_assert_eq(*(volatile uint64_t *)gfa_pfn_to_addr(h.t.pool, src), 0xc0ffee,
			     "the punch reached a frame another owner had taken");
	cr_assert_geq(rs.moves_waited, 1);
	for (unsigned int i = 0; i < ngot; i++)
		if (got[i] >= 0)
			gfa_free(h.t.pool, (uint64_t)got[i], 0, 9);
	for (unsigned int i = 1; i < 2048; i += 2)
		gfa_free(h.t.pool, holes[i], 0, 7);
	rhost_done(&h);
}

/*
 * A collapse holds the guest's lock across its moves, and so across the moved hook; a
 * report's second lookup takes that lock.  The hook must not wait for a run that is
 * registered but still waits for its second lookup, or neither thread ever goes on (lkvm
 * hung so, its balloon's report thread and its mover each waiting for the other).  Every
 * odd page of a guest of small blocks is reported, over and over, while another thread
 * collapses its ranges one at a time.
 */
struct rcollapse {
	struct gfa_guest *g;
	_Atomic int collapses, over;
};

static void *collapser(void *arg)
{
	struct rcollapse *c = arg;
	int ret;

	while ((ret = gfa_guest_collapse(c->g, 1)) != 0)
		if (ret > 0)
			atomic_fetch_add(&c->collapses, ret);
	atomic_store(&c->over, 1);
	return NULL;
}

Test(report, a_collapse_does_not_wait_for_a_report_it_holds_up, .timeout = 60)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config gc = { .mem_bytes = 64 * MiB, .small_only = true };
	struct tu_rdone d = TU_RDONE_INIT;
	const uint64_t pages = 64 * MiB / 4096;
	static struct gfa_gpa_range r[64 * MiB / 4096 / 2];
	struct gfa_guest_report_stat rs;
	struct rcollapse c = { 0 };
	struct rhost h;
	uint64_t *w, bad = 0;
	int calls = 0;
	pthread_t t;

	h.t = tu_host_new(160 * MiB, &bc, 0);
	h.t.g = gfa_guest_create(h.t.pool, h.t.b, &gc);
	cr_assert_not_null(h.t.g);
	h.rep = gfa_guest_report_create(h.t.b, h.t.g);
	cr_assert_not_null(h.rep);
	tu_fill(h.t.g, 11);
	for (uint64_t i = 0; i < pages / 2; i++)
		r[i] = (struct gfa_gpa_range){ (2 * i + 1) * 4096, 4096 };
	c.g = h.t.g;
	pthread_create(&t, NULL, collapser, &c);
	while (!atomic_load(&c.over) || !calls) {
		cr_assert_eq(gfa_guest_report_free(h.rep, r, (unsigned int)(pages / 2), tu_rdone_fn,
						   &d),
			     0);
		tu_rdone_wait(&d, ++calls);
		cr_assert_eq(d.result, 0);
	}
	pthread_join(t, NULL);
	gfa_guest_report_stat(h.rep, &rs);
	cr_log_info("%d reports, %d collapses, %lu frames raced, %lu moves waited", calls,
		    atomic_load(&c.collapses), (unsigned long)rs.frames_raced,
		    (unsigned long)rs.moves_waited);
	cr_assert_eq(atomic_load(&c.collapses), 32, "every range collapsed");
	cr_assert_eq(rs.inflight_runs, 0);
	w = gfa_guest_hva(h.t.g);
	for (uint64_t i = 0; i < pages; i += 2)
		bad += w[i * 512] != (11 ^ (i * 512));
	cr_assert_eq(bad, 0, "%lu pages not reported lost their data", (unsigned long)bad);
	rhost_done(&h);
}
