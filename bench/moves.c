// SPDX-License-Identifier: MIT
/*
 * bench/moves: moving a running guest's frames (collapse, full compaction, kcompactd)
 * under write protection, against the pause fallback and against no protection at all;
 * and how much host memory a balloon round trip and a collapse cost.  All in one run.
 *
 * Parts 1-5 share one setup, made fresh for every run: a small_only guest (16 MiB, 32
 * MiB in the full run) on every other frame of the low half of a zone four times its
 * size, the rest then freed, so that full compaction moves its order-0 blocks up and
 * every 2 MiB range collapses into a free order-9 block.  Two writer threads
 * (refvmm/guest_writers.h) write every page of it over and over, checking at each visit
 * that the page still holds their last write: one with user stores, the other with
 * read(2) in even reps and io_uring reads in odd ones (the kernel writes guest RAM).
 * Three paths:
 *   wp     the default: the guest's userfaultfd write-protects what a move moves; no
 *          vCPU ops
 *   pause  GFA_NO_UFFD=1 with pause ops that park both writers, as a VMM's pause stops
 *          every thread writing guest RAM: the fair baseline
 *   none   GFA_NO_UFFD=1 without vCPU ops: gfa moves with nobody stopped, the control
 *          that shows the check does see lost writes
 *
 *  1. lost writes during collapse, full compaction and kcompactd (proactiveness 100,
 *     left to its 500 ms proactive check: a wake compacts only for an order-9 block,
 *     and the zone has free ones), on wp (must be 0) and none; collapse and compaction
 *     on pause too.
 *  2. time the writers were stopped on wp (paused_ns): must be 0.
 *  3. the cost of one 2 MiB move: every gfa_guest_collapse(g, 1) call timed (one range,
 *     one 2 MiB move), wp vs pause.  As info: the same without writers (quiet runs: what
 *     the protection costs by itself), the writers' progress while ranges collapse (on
 *     wp they keep writing; on pause they wait), and full compaction per 2 MiB moved.
 *  4. a writer's wait on wp: p99 of the writes that took >= 20 us while moves ran (for
 *     kcompactd: from its start to its stop), over the median wp collapse of one range.
 *     The same writers' slow writes while nothing moved are printed beside it: the
 *     machine's own scheduling noise.
 *  5. pause calls per collapsed range on the pause path.
 *  6. host memory: a 512 MiB small_only guest on a fresh 768 MiB pool (backing created
 *     with the defaults, not populated) touches 32 MiB, balloons out the other 480 MiB,
 *     takes it back and collapses: the growth of the zone memfd's allocated bytes from
 *     after the touch to the end.  Baseline: the balloon a simple VMM writes on a plain
 *     512 MiB memfd mapping touched the same way: one madvise(MADV_REMOVE) per 4 KiB
 *     page to inflate (MADV_DONTNEED would not free shmem), nothing to deflate.
 *
 * Runs are interleaved per rep (the order reversed every other rep, so neither path
 * always runs first) after an untimed warm-up of the wp and pause collapses.  The mover
 * (the main thread, and the threads gfa starts from it) runs on the first CPU, both
 * writers on the second (--no-pin: wherever the scheduler puts them); see pin_writers.
 * Part 6 is in bench/moves/host.c.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"
#include "refvmm/guest_writers.h"
#include "bench/moves/moves.h"
#include "common/compiler.h"

#define RANGE_FRAMES  (RANGE_BYTES / GFA_FRAME_SIZE)
#define MAX_REPS      100
#define F_DUMMY       7 /* the owner of the frames that fragment the zone */
#define NR_WRITERS    2
#define COMPACT_MIN   1000         /* moves a compaction of the setup makes at least */
#define KC_QUIET_NS   300000000ULL /* kcompactd is done: no move for this long */
#define KC_TIMEOUT_NS 10000000000ULL
#define KC_POLL_US    20000

enum path { P_WP, P_PAUSE, P_NONE, NR_PATH };
enum kind { K_COLLAPSE, K_COMPACT, K_KCOMPACTD, NR_KIND };

static const char *const path_name[NR_PATH] = { "wp", "pause", "none" };
static const char *const kind_name[NR_KIND] = { "collapse", "compact", "kcompactd" };

struct variant {
	enum path p;
	enum kind k;
	bool quiet; /* no writers: what a move costs by itself */
};

/* One rep's runs (the pause path's kcompactd would only repeat its compaction). */
static const struct variant variants[] = {
	{ P_WP, K_COLLAPSE, false },  { P_PAUSE, K_COLLAPSE, false },
	{ P_WP, K_COMPACT, false },   { P_PAUSE, K_COMPACT, false },
	{ P_WP, K_KCOMPACTD, false }, { P_NONE, K_COLLAPSE, false },
	{ P_NONE, K_COMPACT, false }, { P_NONE, K_KCOMPACTD, false },
	{ P_WP, K_COLLAPSE, true },   { P_PAUSE, K_COLLAPSE, true },
};
#define NR_VARIANTS ARRAY_SIZE(variants)

/* A growing array of samples. */
struct samples {
	double *v;
	int n, cap;
};

static void samples_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 1024;
		double *v = realloc(s->v, (size_t)cap * sizeof(*v));

		if (!v)
			bench_die("out of memory for samples");
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
}

/* The p-th percentile by nearest rank (sorts s); 0 without samples. */
static double samples_pct(struct samples *s, double p)
{
	int idx;

	if (!s->n)
		return 0;
	bench_stat_of(s->v, s->n);
	idx = (int)ceil(p / 100 * s->n) - 1;
	return s->v[idx < 0 ? 0 : idx];
}

/* What the runs of one path and kind add up to over the reps. */
struct acc {
	uint64_t runs, short_runs, lost, errors, writes, moved;
	uint64_t wp_faults, pauses, paused_ns;
	uint64_t moving_writes, moving_ns; /* the writers' progress while moves ran */
	struct samples ns;                 /* collapse: per range; compaction: per 2 MiB moved */
	struct samples slow;               /* writes >= 20 us while the moves ran */
};

static struct acc acc[NR_PATH][NR_KIND];
static struct acc acc_quiet[NR_PATH]; /* collapses without writers */
static struct samples slow_idle;      /* wp: writes >= 20 us while nothing moved */
static struct gw_set ws;              /* large (the slow samples): one for every run */
static const struct gfa_guest_vcpu_ops gw_ops = { gw_pause, gw_resume };
static uint64_t guest_bytes;
static bool pin = true;          /* mover on one CPU, the writers on another */
static bool pinned;              /* and they are */
static const char *user_no_uffd; /* GFA_NO_UFFD as the user set it, or NULL */

/* ================= setup ================= */

struct mv {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
};

/* gfa reads GFA_NO_UFFD at each guest's creation: set it for the next one, or restore
 * what the user had. */
static void no_uffd_for_next_guest(bool on)
{
	if (on)
		setenv("GFA_NO_UFFD", "1", 1);
	else if (user_no_uffd)
		setenv("GFA_NO_UFFD", user_no_uffd, 1);
	else
		unsetenv("GFA_NO_UFFD");
}

struct gfa_guest *guest_create(struct gfa_pool *pool, struct gfa_backing *b,
			       const struct gfa_guest_config *gc, bool no_uffd)
{
	struct gfa_guest *g;

	no_uffd_for_next_guest(no_uffd);
	g = gfa_guest_create(pool, b, gc);
	no_uffd_for_next_guest(false);
	if (!g)
		bench_die("gfa_guest_create: %s", strerror(errno));
	return g;
}

struct gfa_pool *pool_create(uint64_t bytes)
{
	struct gfa_pool_config pc;
	struct gfa_pool *pool;

	gfa_pool_config_init(&pc, bytes / GFA_FRAME_SIZE);
	pool = gfa_pool_create(&pc);
	if (!pool)
		bench_die("gfa_pool_create: %s", strerror(errno));
	return pool;
}

void check_pool(struct gfa_pool *pool, const char *when)
{
	char msg[256];

	if (gfa_pool_check(pool, msg, sizeof(msg)))
		bench_die("pool invariant broken %s: %s", when, msg);
}

/* Every frame allocated, then every other one of the low half freed: the holes the
 * guest gets. */
static void mv_fill_holes(struct gfa_pool *pool, uint64_t nr)
{
	for (uint64_t i = 0; i < nr; i++)
		if (gfa_alloc(pool, 0, 0, GFA_MT_MOVABLE, F_DUMMY, 0) != (int64_t)i)
			bench_die("setup: the zone is not allocated in order");
	for (uint64_t i = 0; i < nr / 2; i += 2)
		if (gfa_free(pool, i, 0, F_DUMMY))
			bench_die("setup: gfa_free failed");
}

/* The rest freed: the guest's blocks half-fill the low pageblocks, the high half is free. */
static void mv_free_rest(struct gfa_pool *pool, uint64_t nr)
{
	for (uint64_t i = 1; i < nr; i++)
		if ((i >= nr / 2 || i % 2) && gfa_free(pool, i, 0, F_DUMMY))
			bench_die("setup: gfa_free failed");
}

static void mv_setup(struct mv *m, enum path p)
{
	const uint64_t nr = 4 * guest_bytes / GFA_FRAME_SIZE;
	struct gfa_backing_config bc = { .no_zero_on_stop = true };
	struct gfa_guest_config gc = { .mem_bytes = guest_bytes, .small_only = true };

	if (p == P_PAUSE) {
		gc.vcpu_ops = &gw_ops;
		gc.vcpu_ctx = &ws;
	}
	m->pool = pool_create(4 * guest_bytes);
	m->b = gfa_backing_create(m->pool, &bc);
	if (!m->b)
		bench_die("gfa_backing_create: %s", strerror(errno));
	mv_fill_holes(m->pool, nr);
	m->g = guest_create(m->pool, m->b, &gc, p != P_WP);
	mv_free_rest(m->pool, nr);
}

static void mv_done(struct mv *m)
{
	gfa_guest_destroy(m->g);
	check_pool(m->pool, "after a run");
	gfa_backing_destroy(m->b);
	gfa_pool_destroy(m->pool);
}

static struct gfa_guest_stat mv_stat(struct mv *m)
{
	struct gfa_guest_stat st;

	if (gfa_guest_stat(m->g, &st))
		bench_die("gfa_guest_stat failed");
	return st;
}

static uint64_t mv_moved(struct mv *m)
{
	struct gfa_guest_stat st = mv_stat(m);

	return st.moves + st.collapses;
}

/* Wait until the writers made `passes` more passes over the guest (bounded: 10 s). */
static void mv_let_write(unsigned int passes)
{
	uint64_t want = gw_writes(&ws) + passes * ws.pages;

	if (!ws.n)
		return; /* a quiet run */
	for (int i = 0; i < 20000 && gw_writes(&ws) < want; i++)
		usleep(500);
}

/* ================= the moves ================= */

/* One call per range, each timed: one 2 MiB move. */
static void time_collapses(struct mv *m, struct acc *a)
{
	for (uint64_t i = 0; i < guest_bytes / RANGE_BYTES; i++) {
		uint64_t t0 = bench_now_ns();
		int n = gfa_guest_collapse(m->g, 1);
		uint64_t dt = bench_now_ns() - t0;

		if (n != 1)
			return; /* the run is counted short */
		samples_add(&a->ns, (double)dt);
	}
}

/* Full compaction, timed per 2 MiB moved (the guest's blocks are all order 0). */
static void time_compaction(struct mv *m, struct acc *a)
{
	uint64_t before = mv_moved(m), t0 = bench_now_ns(), dt, moved;

	gfa_compact_zone(m->pool, 0, -1, GFA_COMPACT_SYNC);
	dt = bench_now_ns() - t0;
	moved = mv_moved(m) - before;
	if (moved)
		samples_add(&a->ns, (double)dt * (double)RANGE_FRAMES / (double)moved);
}

/* kcompactd until it has moved and then stayed quiet a while (or the timeout). */
static void run_kcompactd(struct mv *m)
{
	struct gfa_compact_config cc = { .proactiveness = 100 };
	uint64_t start = mv_moved(m), last = start, t0 = bench_now_ns(), t_last = t0;

	if (gfa_compact_configure(m->pool, &cc) || gfa_compactd_start(m->pool))
		bench_die("kcompactd could not be started");
	while (bench_now_ns() - t0 < KC_TIMEOUT_NS) {
		uint64_t now, cur;

		usleep(KC_POLL_US);
		now = bench_now_ns();
		cur = mv_moved(m);
		if (cur != last) {
			last = cur;
			t_last = now;
		} else if (cur - start >= COMPACT_MIN && now - t_last >= KC_QUIET_NS) {
			break;
		}
	}
	if (gfa_compactd_stop(m->pool))
		bench_die("gfa_compactd_stop failed");
}

static void mv_move(struct mv *m, enum kind k, struct acc *a)
{
	if (k == K_COLLAPSE)
		time_collapses(m, a);
	else if (k == K_COMPACT)
		time_compaction(m, a);
	else
		run_kcompactd(m);
}

/* ================= one run ================= */

/* The writers as the moves began or ended. */
struct snap {
	unsigned int nslow[GW_MAX];
	uint64_t writes, t;
};

struct run {
	struct gfa_guest_stat st0, st1;
	struct snap s0, s1;
	uint64_t lost;
};

static void snap(struct snap *s)
{
	for (unsigned int i = 0; i < ws.n; i++)
		s->nslow[i] = __atomic_load_n(&ws.w[i].nslow, __ATOMIC_RELAXED);
	s->writes = 0;
	for (unsigned int i = 0; i < ws.n; i++)
		s->writes += __atomic_load_n(&ws.w[i].writes, __ATOMIC_RELAXED);
	s->t = bench_now_ns();
}

/* The writers' slow writes: those while the moves ran to the run's, the others idle. */
static void take_slow(const struct run *r, enum path p, struct acc *a)
{
	for (unsigned int i = 0; i < ws.n; i++) {
		const struct gw_writer *w = &ws.w[i];

		for (unsigned int j = 0; j < w->nslow; j++) {
			bool moving = j >= r->s0.nslow[i] && j < r->s1.nslow[i];

			if (moving)
				samples_add(&a->slow, (double)w->slow_ns[j]);
			else if (p == P_WP)
				samples_add(&slow_idle, (double)w->slow_ns[j]);
		}
	}
}

static void acc_add(struct acc *a, const struct run *r, enum kind k)
{
	uint64_t moved = r->st1.moves + r->st1.collapses - r->st0.moves - r->st0.collapses;
	uint64_t want = k == K_COLLAPSE ? guest_bytes / RANGE_BYTES : COMPACT_MIN;

	a->runs++;
	a->short_runs += moved < want;
	a->lost += r->lost;
	for (unsigned int i = 0; i < ws.n; i++)
		a->errors += ws.w[i].errors;
	a->writes += gw_writes(&ws);
	a->moved += moved;
	a->wp_faults += r->st1.wp_faults - r->st0.wp_faults;
	a->pauses += r->st1.pauses - r->st0.pauses;
	a->paused_ns += r->st1.paused_ns - r->st0.paused_ns;
	a->moving_writes += r->s1.writes - r->s0.writes;
	a->moving_ns += r->s1.t - r->s0.t;
}

/*
 * The writers on the second CPU, the mover (this thread) on the first: on two cores the
 * writers would otherwise take the mover's CPU on the wp path, where they keep running,
 * and give it back on the pause path, where they yield while parked, and the times
 * would compare CPU shares rather than moves.  As a VMM keeps its vCPUs off the
 * housekeeping CPU.
 */
static cpu_set_t allowed, writer_cpu; /* the process's CPUs; the writers' one */

static bool pin_begin(void)
{
	int n = 0;

	if (!pin || sched_getaffinity(0, sizeof(allowed), &allowed) || CPU_COUNT(&allowed) < 2)
		return false;
	CPU_ZERO(&writer_cpu);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &allowed) && n++ == 1)
			CPU_SET(cpu, &writer_cpu);
	/* threads gfa starts (the userfaultfd service, kcompactd) inherit the mover's CPU */
	return bench_pin_self(0) >= 0;
}

static void pin_end(void)
{
	if (pinned)
		sched_setaffinity(0, sizeof(allowed), &allowed);
}

/* (they start on the mover's CPU, which they inherit, and leave it here) */
static void pin_writers(void)
{
	for (unsigned int i = 0; pinned && i < ws.n; i++)
		pthread_setaffinity_np(ws.w[i].th, sizeof(writer_cpu), &writer_cpu);
}

/*
 * A fresh setup, the writers on it (none for a quiet run: gw_start still writes the
 * guest once), the moves one way; into a (NULL: warm-up).
 */
static void mv_run(const struct variant *v, enum gw_kind second, struct acc *a)
{
	const enum gw_kind kinds[NR_WRITERS] = { GW_STORE, second };
	static struct acc scratch;
	enum path p = v->p;
	enum kind k = v->k;
	struct run r;
	struct mv m;

	mv_setup(&m, p);
	r.st0 = mv_stat(&m);
	if ((p == P_WP) != !r.st0.wp_errno)
		bench_die("%s guest: wp_errno %d", path_name[p], r.st0.wp_errno);
	if (gw_start(&ws, gfa_guest_hva(m.g), gfa_guest_size(m.g), v->quiet ? 0 : NR_WRITERS,
		     kinds))
		bench_die("the writers could not be started");
	pin_writers();
	mv_let_write(1);
	snap(&r.s0);
	mv_move(&m, k, a ? a : &scratch);
	snap(&r.s1);
	mv_let_write(1);
	r.lost = gw_stop(&ws);
	r.st1 = mv_stat(&m);
	mv_done(&m);
	if (!a)
		return;
	acc_add(a, &r, k);
	take_slow(&r, p, a);
}

/* ================= parts 1-5 ================= */

/* Whether this host write-protects: a guest made the default way says. */
static int probe_wp(void)
{
	struct gfa_guest_config gc = { .mem_bytes = RANGE_BYTES };
	struct gfa_pool *pool = pool_create(4 * RANGE_BYTES);
	struct gfa_backing *b = gfa_backing_create(pool, NULL);
	struct gfa_guest *g;
	struct gfa_guest_stat st;

	if (!b)
		bench_die("gfa_backing_create: %s", strerror(errno));
	g = guest_create(pool, b, &gc, false);
	if (gfa_guest_stat(g, &st))
		bench_die("gfa_guest_stat failed");
	gfa_guest_destroy(g);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return st.wp_errno;
}

static void run_rep(int rep, bool wp)
{
	enum gw_kind second = rep % 2 ? GW_URING : GW_READ;

	for (size_t i = 0; i < NR_VARIANTS; i++) {
		const struct variant *v = &variants[rep % 2 ? NR_VARIANTS - 1 - i : i];

		if (v->p == P_WP && !wp)
			continue;
		mv_run(v, second, v->quiet ? &acc_quiet[v->p] : &acc[v->p][v->k]);
	}
}

static void bench_moves(const struct bench_opts *o, bool wp)
{
	struct bench_load load;

	printf("\n## 1-5. moves under %d writer threads (user stores + read(2) in even reps, "
	       "io_uring reads in odd ones) on a %lu MiB small_only guest, every other frame "
	       "of the low half of a %lu MiB zone\n",
	       NR_WRITERS, (unsigned long)(guest_bytes / MiB),
	       (unsigned long)(4 * guest_bytes / MiB));
	printf("# paths: wp = userfaultfd write protection, no vCPU ops; pause = GFA_NO_UFFD=1, "
	       "pause ops park both writers; none = GFA_NO_UFFD=1, no vCPU ops (nobody "
	       "stopped: the control)\n");
	printf("# %d rep(s), runs interleaved (order reversed every other rep), each on a "
	       "fresh setup, after a warm-up of the wp and pause collapses%s\n",
	       o->reps, wp ? "" : "; no wp runs: this host does not write-protect");
	pinned = pin_begin();
	printf("# %s\n", pinned ? "pinned: the mover (and the threads gfa starts) on the first "
				  "CPU, both writers on the second" :
				  "not pinned: the scheduler places the mover "
				  "and the writers");
	if (wp)
		mv_run(&variants[0], GW_READ, NULL);
	mv_run(&variants[1], GW_READ, NULL);
	bench_load_begin(&load);
	for (int rep = 0; rep < o->reps; rep++)
		run_rep(rep, wp);
	pin_end(); /* first: the load line counts the CPUs we may use */
	bench_print_load(&load, "parts 1-5");
}

static double writes_per_ms(const struct acc *a)
{
	return a->moving_ns ? (double)a->moving_writes * 1e6 / (double)a->moving_ns : 0;
}

static void print_run(int p, int k, struct acc *a)
{
	char name[32];

	snprintf(name, sizeof(name), "%s/%s", path_name[p], kind_name[k]);
	printf("%-16s %4lu %5lu %7lu %10lu %6lu %6lu %9lu %7lu %10.3f %6d %12.1f %10.1f\n", name,
	       (unsigned long)a->runs, (unsigned long)a->short_runs, (unsigned long)a->moved,
	       (unsigned long)a->writes, (unsigned long)a->lost, (unsigned long)a->errors,
	       (unsigned long)a->wp_faults, (unsigned long)a->pauses, (double)a->paused_ns / 1e6,
	       a->slow.n, samples_pct(&a->slow, 99) / 1e3, writes_per_ms(a));
}

static void print_runs(void)
{
	printf("%-16s %4s %5s %7s %10s %6s %6s %9s %7s %10s %6s %12s %10s\n", "run", "runs",
	       "short", "moved", "writes", "lost", "errors", "wp_faults", "pauses", "paused_ms",
	       "slow", "slow_p99_us", "writes/ms");
	for (int p = 0; p < NR_PATH; p++)
		for (int k = 0; k < NR_KIND; k++)
			if (acc[p][k].runs)
				print_run(p, k, &acc[p][k]);
	printf("# moved: blocks compaction moved plus ranges collapsed; short: runs that "
	       "moved less than expected (every range; %d blocks); slow: writes >= %llu us "
	       "while the moves ran; writes/ms: the writers' progress while the moves ran\n",
	       COMPACT_MIN, GW_SLOW_NS / 1000);
}

static void print_time(int p, const char *k, struct samples *ns)
{
	struct bench_stat s = bench_stat_of(ns->v, ns->n);
	char name[32];

	snprintf(name, sizeof(name), "%s/%s", path_name[p], k);
	printf("%-16s %5d %11.0f %11.0f %11.0f\n", name, s.n, s.min, s.median, s.max);
}

static void print_timing(void)
{
	printf("%-16s %5s %11s %11s %11s   (ns per 2 MiB moved)\n", "timing", "n", "min", "median",
	       "max");
	for (int p = 0; p < P_NONE; p++)
		for (int k = 0; k < K_KCOMPACTD; k++)
			if (acc[p][k].ns.n)
				print_time(p, kind_name[k], &acc[p][k].ns);
	for (int p = 0; p < P_NONE; p++)
		if (acc_quiet[p].ns.n)
			print_time(p, "quiet", &acc_quiet[p].ns);
	printf("# collapse: each gfa_guest_collapse(g, 1) call, one range; compact: a full "
	       "compaction's time x 512 / blocks moved, one sample a run; quiet: collapse "
	       "with no writer running\n");
}

/* ================= report ================= */

struct summary {
	bool wp, moves, host;
	uint64_t lost, unprotected_lost, pause_lost, paused_ns;
	double wp_ns, pause_ns, wp_min, pause_min, wp_compact, pause_compact;
	double wp_quiet, pause_quiet, progress;
	double wait_p99, idle_p99, pauses_per_range, host_mib, madvise_mib, load;
};

static double median_of(struct samples *s)
{
	return s->n ? bench_stat_of(s->v, s->n).median : 0;
}

static double min_of(struct samples *s)
{
	return s->n ? bench_stat_of(s->v, s->n).min : 0;
}

static void summarise_moves(struct summary *s)
{
	struct samples wait = { 0 };
	struct acc *pc = &acc[P_PAUSE][K_COLLAPSE];

	for (int k = 0; k < NR_KIND; k++) {
		s->lost += acc[P_WP][k].lost;
		s->paused_ns += acc[P_WP][k].paused_ns;
		s->unprotected_lost += acc[P_NONE][k].lost;
		s->pause_lost += acc[P_PAUSE][k].lost;
		for (int i = 0; i < acc[P_WP][k].slow.n; i++)
			samples_add(&wait, acc[P_WP][k].slow.v[i]);
	}
	s->wp_ns = median_of(&acc[P_WP][K_COLLAPSE].ns);
	s->wp_min = min_of(&acc[P_WP][K_COLLAPSE].ns);
	s->pause_ns = median_of(&pc->ns);
	s->pause_min = min_of(&pc->ns);
	s->wp_compact = median_of(&acc[P_WP][K_COMPACT].ns);
	s->wp_quiet = median_of(&acc_quiet[P_WP].ns);
	s->pause_quiet = median_of(&acc_quiet[P_PAUSE].ns);
	s->progress = writes_per_ms(&acc[P_WP][K_COLLAPSE]) / writes_per_ms(pc);
	s->pause_compact = median_of(&acc[P_PAUSE][K_COMPACT].ns);
	s->wait_p99 = samples_pct(&wait, 99);
	s->idle_p99 = samples_pct(&slow_idle, 99);
	s->pauses_per_range = pc->moved ? (double)pc->pauses / (double)pc->moved : 0;
	free(wait.v);
}

static void goals_wp(const struct summary *s)
{
	bench_goal("moves", "lost", (double)s->lost, "<=", 0,
		   "writes lost on the wp path (collapse, compaction, kcompactd)");
	bench_goal("moves", "vcpu_stopped_ms", (double)s->paused_ns / 1e6, "<=", 0,
		   "time the wp path held writers paused");
	bench_goal("moves", "wp_vs_pause", s->wp_ns / s->pause_ns, "<=", 1.2,
		   "median ns per 2 MiB collapsed, wp / pause ops that park the writers");
	bench_goal("moves", "wait_p99_moves", s->wait_p99 / s->wp_ns, "<=", 2,
		   "p99 of a wp writer's slow writes / median wp 2 MiB move");
	bench_goal("moves", "wp_vs_pause_quiet", s->wp_quiet / s->pause_quiet, "info", 0,
		   "the same with no writer running: what the protection itself costs");
	bench_goal("moves", "writes_wp_vs_pause", s->progress, "info", 0,
		   "the writers' writes per ms while ranges collapsed, wp / pause");
	bench_goal("moves", "wp_compact_vs_pause", s->wp_compact / s->pause_compact, "info", 0,
		   "full compaction, ns per 2 MiB moved, wp / pause");
	bench_goal("moves", "idle_p99_moves", s->idle_p99 / s->wp_ns, "info", 0,
		   "the same writers' slow writes while nothing moved (the machine's noise)");
}

static void goals_moves(const struct summary *s)
{
	if (s->wp)
		goals_wp(s);
	else
		printf("# skipped: lost, vcpu_stopped_ms, wp_vs_pause, wait_p99_moves: this host "
		       "does not write-protect (see above)\n");
	bench_goal("moves", "unprotected_lost", (double)s->unprotected_lost, ">=", 1,
		   "control: moves with nobody stopped lose writes, and the check sees them");
	bench_goal("moves", "pause_lost", (double)s->pause_lost, "<=", 0,
		   "writes lost on the pause path");
	bench_goal("moves", "pauses_per_range", s->pauses_per_range, "<=", 1,
		   "pause calls per collapsed range, pause path");
}

static void goals_host(const struct summary *s)
{
	bench_goal("moves", "host_growth_mb", s->host_mib, "<=", 16,
		   "MiB the memfd grew: touch 32 MiB, balloon out 480, back, collapse");
	bench_goal("moves", "madvise_growth_mb", s->madvise_mib, "info", 0,
		   "the same with one MADV_REMOVE per page, deflate = nothing");
}

static void result_add_u(struct bench_result *r, const char *key, bool have, uint64_t v)
{
	if (have)
		bench_result_add(r, key, "%lu", (unsigned long)v);
	else
		bench_result_add(r, key, "n/a");
}

static void result_add_f(struct bench_result *r, const char *key, bool have, const char *fmt,
			 double v)
{
	char buf[64];

	snprintf(buf, sizeof(buf), fmt, v);
	bench_result_add(r, key, "%s", have ? buf : "n/a");
}

static void report(const struct summary *s)
{
	bool wp = s->moves && s->wp, mv = s->moves;
	struct bench_result r;

	if (mv)
		goals_moves(s);
	if (s->host)
		goals_host(s);
	bench_result_init(&r, "moves");
	result_add_u(&r, "lost", wp, s->lost);
	result_add_f(&r, "vcpu_stopped_ms", wp, "%.3f", (double)s->paused_ns / 1e6);
	result_add_f(&r, "wp_vs_pause", wp, "%.3f", s->wp_ns / s->pause_ns);
	result_add_f(&r, "wait_p99_moves", wp, "%.3f", s->wait_p99 / s->wp_ns);
	result_add_f(&r, "pauses_per_range", mv, "%.3f", s->pauses_per_range);
	result_add_f(&r, "host_growth_mb", s->host, "%.1f", s->host_mib);
	result_add_f(&r, "madvise_growth_mb", s->host, "%.1f", s->madvise_mib);
	result_add_u(&r, "unprotected_lost", mv, s->unprotected_lost);
	result_add_u(&r, "pause_lost", mv, s->pause_lost);
	result_add_f(&r, "wp_ns_per_2m", wp, "%.0f", s->wp_ns);
	result_add_f(&r, "pause_ns_per_2m", mv, "%.0f", s->pause_ns);
	result_add_f(&r, "wp_min_ns_per_2m", wp, "%.0f", s->wp_min);
	result_add_f(&r, "pause_min_ns_per_2m", mv, "%.0f", s->pause_min);
	result_add_f(&r, "wp_quiet_ns_per_2m", wp, "%.0f", s->wp_quiet);
	result_add_f(&r, "pause_quiet_ns_per_2m", mv, "%.0f", s->pause_quiet);
	result_add_f(&r, "wp_compact_ns_per_2m", wp, "%.0f", s->wp_compact);
	result_add_f(&r, "pause_compact_ns_per_2m", mv, "%.0f", s->pause_compact);
	result_add_f(&r, "writes_wp_vs_pause", wp, "%.2f", s->progress);
	result_add_f(&r, "wait_p99_us", wp, "%.1f", s->wait_p99 / 1e3);
	result_add_f(&r, "idle_p99_us", wp, "%.1f", s->idle_p99 / 1e3);
	bench_result_add(&r, "load", "%.2f", s->load);
	bench_result_print(&r);
}

static const struct option own_longopts[] = {
	{ "no-pin", no_argument, NULL, 'P' },
	{ 0 },
};

static int parse_own_opt(int val, const char *arg, void *ctx)
{
	(void)arg, (void)ctx;
	if (val != 'P')
		return -EINVAL;
	pin = false;
	return 0;
}

/* 0, 1 after --help, or -EINVAL (said why). */
static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const char what[] =
		"Moves of a running guest's frames: write protection vs the pause fallback\n"
		"vs no protection (lost writes, stopped time, cost per 2 MiB, writer waits,\n"
		"pauses per range); host memory after a balloon round trip and a collapse.\n"
		"  --only moves|host  one part\n"
		"  --no-pin           let the scheduler place the mover and the writers";
	const struct bench_extra_opts extra = { own_longopts, " [--no-pin]", parse_own_opt, NULL };
	int ret = bench_parse_args_ext(argc, argv, o, 2, 0, 8, 0, what, &extra);

	if (!ret && o->only && strcmp(o->only, "moves") && strcmp(o->only, "host")) {
		fprintf(stderr, "%s: --only wants moves or host\n", argv[0]);
		ret = -EINVAL;
	}
	if (!ret && o->reps > MAX_REPS)
		o->reps = MAX_REPS;
	return ret;
}

/* The write-protected moves against the fallbacks, with their tables. */
static int run_moves(const struct bench_opts *o, void *ctx)
{
	struct summary *s = ctx;

	s->moves = true;
	bench_moves(o, s->wp);
	print_runs();
	print_timing();
	summarise_moves(s);
	return 0;
}

/* Host memory after a balloon round trip and a collapse. */
static int run_host(const struct bench_opts *o, void *ctx)
{
	struct summary *s = ctx;

	s->host = true;
	bench_host(o, &s->host_mib, &s->madvise_mib);
	return 0;
}

static struct summary summary;
static const struct bench_part moves_parts[] = {
	{ "moves", run_moves, NULL, &summary },
	{ "host", run_host, NULL, &summary },
};

int main(int argc, char **argv)
{
	struct bench_load load;
	struct bench_opts o;
	uint64_t t_start = bench_now_ns();
	int ret = parse_args(argc, argv, &o), wp_errno;

	if (ret)
		return ret > 0 ? 0 : 2;
	user_no_uffd = getenv("GFA_NO_UFFD");
	if (user_no_uffd)
		user_no_uffd = strdup(user_no_uffd); /* setenv may free the original */
	guest_bytes = (o.quick ? 16 : 32) * MiB;
	printf("# bench moves: write-protected moves vs the pause fallback vs none; host "
	       "memory after a balloon round trip and a collapse\n");
	bench_print_machine();
	printf("# mode=%s reps=%d\n", o.quick ? "quick" : "full", o.reps);
	wp_errno = probe_wp();
	summary.wp = !wp_errno;
	if (wp_errno)
		printf("# ** the write-protect path is unavailable here (wp_errno %d: %s); its "
		       "parts are skipped **\n",
		       wp_errno, strerror(wp_errno));
	bench_load_begin(&load);
	bench_parts_run(&o, moves_parts, ARRAY_SIZE(moves_parts));
	summary.load = bench_load_other(&load);
	printf("\n");
	report(&summary);
	printf("# elapsed %.1f s\n", bench_sec_since(t_start));
	return 0;
}
