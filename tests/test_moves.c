/*
 * Moves that stop no one and lose nothing: threads that are not vCPUs write guest RAM
 * (user stores, read(2) and io_uring reads landing in it) while collapse, full
 * compaction and kcompactd move its frames; every page is checked word by word at each
 * visit.  Then the pause fallback (forced with GFA_NO_UFFD, and taken for real by an
 * unprivileged uid), pins and pinned guests.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <sys/wait.h>
#include <gfa/vmm.h>
#include "tests/test_util.h"
#include "refvmm/guest_writers.h"

#define MiB     (1UL << 20)
#define F_DUMMY 7 /* the owner of the frames that fragment the zone */

struct mv {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
	struct gw_set ws;
};

enum mv_kind { MV_COLLAPSE, MV_COMPACT, MV_KCOMPACTD };

/*
 * A 16 MiB small_only guest on every other frame of the low half of a 64 MiB zone, the
 * rest then freed: its 4096 order-0 blocks half-fill 16 pageblocks, so full compaction
 * moves them up and collapse finds free order-9 targets.
 */
static void mv_setup_notified(struct mv *m, const struct gfa_guest_vcpu_ops *ops,
			      gfa_guest_moved_fn fn)
{
	const uint64_t nr = 64 * MiB / GFA_FRAME_SIZE;
	struct gfa_backing_config bc = { .no_zero_on_stop = true };
	struct gfa_guest_config gc = { .mem_bytes = 16 * MiB,
				       .small_only = true,
				       .vcpu_ops = ops,
				       .vcpu_ctx = &m->ws,
				       .moved_fn = fn };
	int lock;

	m->pool = tu_pool(nr);
	m->b = gfa_backing_create(m->pool, &bc);
	cr_assert_not_null(m->b);
	for (uint64_t i = 0; i < nr; i++)
		cr_assert_eq(gfa_alloc(m->pool, 0, 0, GFA_MT_MOVABLE, F_DUMMY, 0), (int64_t)i);
	for (uint64_t i = 0; i < nr / 2; i += 2)
		cr_assert_eq(gfa_free(m->pool, i, 0, F_DUMMY), 0);
	/* 4096 scattered blocks are as many mappings: not while another test lowers the
	 * host's vm.max_map_count */
	lock = tu_map_count_lock(false);
	m->g = gfa_guest_create(m->pool, m->b, &gc);
	close(lock);
	cr_assert_not_null(m->g, "guest: %s", strerror(errno));
	for (uint64_t i = 1; i < nr / 2; i += 2)
		cr_assert_eq(gfa_free(m->pool, i, 0, F_DUMMY), 0);
	for (uint64_t i = nr / 2; i < nr; i++)
		cr_assert_eq(gfa_free(m->pool, i, 0, F_DUMMY), 0);
}

static void mv_setup(struct mv *m, const struct gfa_guest_vcpu_ops *ops)
{
	mv_setup_notified(m, ops, NULL);
}

static void mv_done(struct mv *m)
{
	gfa_guest_destroy(m->g);
	ASSERT_POOL_OK(m->pool);
	gfa_backing_destroy(m->b);
	gfa_pool_destroy(m->pool);
}

/* Wait until the writers made `passes` more passes over the guest (bounded). */
static void mv_let_write(struct mv *m, unsigned int passes)
{
	uint64_t want = gw_writes(&m->ws) + passes * m->ws.pages;

	for (int i = 0; i < 20000 && gw_writes(&m->ws) < want; i++)
		usleep(500);
}

static uint64_t mv_moved(struct mv *m)
{
	struct gfa_guest_stat st;

	cr_assert_eq(gfa_guest_stat(m->g, &st), 0);
	return st.moves + st.collapses;
}

/* Move the guest's frames one way while the writers write; how many moves it made. */
static uint64_t mv_move(struct mv *m, enum mv_kind kind)
{
	uint64_t before = mv_moved(m);

	if (kind == MV_COLLAPSE) {
		cr_assert_eq(gfa_guest_collapse(m->g, 64), 8, "every range collapses");
	} else if (kind == MV_COMPACT) {
		gfa_compact_zone(m->pool, 0, -1, GFA_COMPACT_SYNC);
	} else {
		struct gfa_compact_config cc = { .proactiveness = 100 };

		cr_assert_eq(gfa_compact_configure(m->pool, &cc), 0);
		cr_assert_eq(gfa_compactd_start(m->pool), 0);
		/* proactive: its 500 ms check finds the score above the mark (a wake would
		 * compact for an order-9 block, which the zone has free already) */
		for (int i = 0; i < 1000 && mv_moved(m) - before < 1000; i++)
			usleep(10000);
		cr_assert_eq(gfa_compactd_stop(m->pool), 0);
	}
	return mv_moved(m) - before;
}

static void mv_run(enum mv_kind kind, const enum gw_kind *writers)
{
	struct mv m;
	struct gfa_guest_stat st;
	uint64_t moved, lost, errors = 0;

	mv_setup(&m, NULL); /* no vCPU ops at all: nobody is paused */
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	if (st.wp_errno)
		cr_skip_test("no userfaultfd write protection here: %s", strerror(st.wp_errno));
	cr_assert_eq(gw_start(&m.ws, gfa_guest_hva(m.g), gfa_guest_size(m.g), 2, writers), 0);
	mv_let_write(&m, 1);
	moved = mv_move(&m, kind);
	mv_let_write(&m, 1);
	lost = gw_stop(&m.ws);
	for (unsigned int i = 0; i < m.ws.n; i++)
		errors += m.ws.w[i].errors;
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_gt(moved, kind == MV_COLLAPSE ? 7 : 100, "only %lu moves", (unsigned long)moved);
	cr_assert_eq(lost, 0, "%lu writes lost over %lu moves (%lu writes)", (unsigned long)lost,
		     (unsigned long)moved, (unsigned long)gw_writes(&m.ws));
	cr_assert_eq(errors, 0, "%lu writes failed (a kernel-mode write must wait, not fail)",
		     (unsigned long)errors);
	cr_assert_eq(st.pauses, 0);
	cr_assert_geq(st.wp_moves, moved);
	mv_done(&m);
}

static const enum gw_kind stores[] = { GW_STORE, GW_STORE };
static const enum gw_kind kernel_writes[] = { GW_READ, GW_URING };

Test(moves, collapse_loses_no_store, .timeout = 120)
{
	mv_run(MV_COLLAPSE, stores);
}
Test(moves, collapse_loses_no_read_or_io_uring_write, .timeout = 120)
{
	mv_run(MV_COLLAPSE, kernel_writes);
}
Test(moves, compaction_loses_no_store, .timeout = 120)
{
	mv_run(MV_COMPACT, stores);
}
Test(moves, compaction_loses_no_read_or_io_uring_write, .timeout = 120)
{
	mv_run(MV_COMPACT, kernel_writes);
}
Test(moves, kcompactd_loses_no_store, .timeout = 120)
{
	mv_run(MV_KCOMPACTD, stores);
}
Test(moves, kcompactd_loses_no_read_or_io_uring_write, .timeout = 120)
{
	mv_run(MV_KCOMPACTD, kernel_writes);
}

/* The pause fallback, forced: the ops stop the writers, once per collapsed range. */
static const struct gfa_guest_vcpu_ops gw_ops = { gw_pause, gw_resume };

static void mv_run_fallback(void)
{
	struct mv m;
	struct gfa_guest_stat st;
	uint64_t lost, pauses;

	mv_setup(&m, &gw_ops);
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_neq(st.wp_errno, 0, "the fallback was not taken");
	cr_assert_eq(gw_start(&m.ws, gfa_guest_hva(m.g), gfa_guest_size(m.g), 2, stores), 0);
	mv_let_write(&m, 1);
	/* compaction: one pause per batch (a source pageblock's moves), not per block */
	gfa_compact_zone(m.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_gt(st.moves, 100);
	cr_assert_leq(st.pauses * 8, st.moves, "%lu pauses for %lu moves", (unsigned long)st.pauses,
		      (unsigned long)st.moves);
	pauses = st.pauses;
	mv_let_write(&m, 1);
	cr_assert_eq(gfa_guest_collapse(m.g, 64), 8);
	mv_let_write(&m, 1);
	lost = gw_stop(&m.ws);
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_eq(lost, 0, "%lu writes lost", (unsigned long)lost);
	cr_assert_eq(st.wp_moves, 0);
	cr_assert_eq(st.pauses - pauses, 8, "%lu pauses for 8 collapsed ranges",
		     (unsigned long)(st.pauses - pauses));
	cr_assert_gt(st.paused_ns, 0);
	mv_done(&m);
}

Test(moves, forced_fallback_pauses_once_per_batch_and_per_collapsed_range, .timeout = 120)
{
	struct gfa_guest_stat st;

	setenv("GFA_NO_UFFD", "1", 1);
	mv_run_fallback();
	/* and it says why: ECANCELED names the variable */
	{
		struct mv m;

		mv_setup(&m, &gw_ops);
		cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
		cr_assert_eq(st.wp_errno, ECANCELED);
		mv_done(&m);
	}
	unsetenv("GFA_NO_UFFD");
}

/*
 * An unprivileged uid (no CAP_SYS_PTRACE, no access to /dev/userfaultfd) gets no
 * userfaultfd for kernel-mode faults: the guest works on the pause fallback and says
 * why, once, on stderr.
 */
Test(moves, an_unprivileged_guest_falls_back_and_says_why, .timeout = 120)
{
	int pipefd[2], status;
	char text[4096] = "";
	ssize_t n, got = 0;
	pid_t pid;
	FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
	int unpriv = 0;

	if (f) {
		if (fscanf(f, "%d", &unpriv) != 1)
			unpriv = 0;
		fclose(f);
	}
	if (geteuid() != 0)
		cr_skip_test("needs root to become another uid");
	if (unpriv)
		cr_skip_test("vm.unprivileged_userfaultfd=1: every uid may write-protect");
	cr_assert_eq(pipe(pipefd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct mv m;
		struct gfa_guest_stat st;

		dup2(pipefd[1], 2);
		close(pipefd[0]);
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(10);
		mv_setup(&m, &gw_ops);
		if (gfa_guest_stat(m.g, &st) || st.wp_errno != EPERM)
			_exit(11);
		if (gw_start(&m.ws, gfa_guest_hva(m.g), gfa_guest_size(m.g), 2, stores))
			_exit(12);
		mv_let_write(&m, 1);
		if (gfa_guest_collapse(m.g, 64) != 8)
			_exit(13);
		if (gw_stop(&m.ws))
			_exit(14);
		mv_done(&m);
		_exit(0);
	}
	close(pipefd[1]);
	while ((n = read(pipefd[0], text + got, sizeof(text) - 1 - (size_t)got)) > 0)
		got += n;
	close(pipefd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the unprivileged guest failed (status %d); it said: %s", status, text);
	cr_assert_not_null(strstr(text, "userfaultfd needs root"), "stderr: %s", text);
	cr_assert_not_null(strstr(text, "pause must then stop every thread"), "stderr: %s", text);
}

static void moved_done(void *cookie, int result)
{
	(void)cookie, (void)result;
}

/* A pinned range never moves, by collapse or compaction; unpinned, it does. */
Test(moves, a_pinned_range_never_moves, .timeout = 120)
{
	struct mv m;
	struct gfa_guest_stat st;
	uint64_t pin_gpa = 4 * MiB, pfn_before[512], pfn;

	mv_setup(&m, NULL);
	cr_assert_eq(gfa_guest_pin(m.g, pin_gpa + 4096, 3 * 4096), 0); /* touches one range */
	cr_assert_eq(gfa_guest_pin(m.g, pin_gpa, 2 * MiB), 0);         /* nests */
	cr_assert_eq(gfa_guest_pinned(m.g, pin_gpa + MiB, 1), 1);
	cr_assert_eq(gfa_guest_pinned(m.g, 0, 4 * MiB), 0);
	for (unsigned int i = 0; i < 512; i++)
		cr_assert_eq(gfa_guest_gpa_to_pfn(m.g, pin_gpa + i * 4096UL, &pfn_before[i]), 0);
	gfa_compact_zone(m.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_guest_collapse(m.g, 64), 7, "every range but the pinned one");
	for (unsigned int i = 0; i < 512; i++) {
		cr_assert_eq(gfa_guest_gpa_to_pfn(m.g, pin_gpa + i * 4096UL, &pfn), 0);
		cr_assert_eq(pfn, pfn_before[i], "gfn %u of the pinned range moved", i);
	}
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_gt(st.pinned_skips, 0);
	{
		struct gfa_gpa_range r = { pin_gpa, 4096 };

		cr_assert_eq(gfa_balloon_inflate(m.g, &r, 1), -EBUSY);
	}
	{
		/* nor reported free: its host memory may be a device's DMA target */
		struct gfa_free_report *rep = gfa_guest_report_create(m.b, m.g);
		struct gfa_gpa_range r = { pin_gpa + 8192, 4096 };
		struct gfa_guest_report_stat rs;

		cr_assert_not_null(rep);
		cr_assert_eq(gfa_guest_report_free(rep, &r, 1, moved_done, NULL), -EBUSY);
		cr_assert_eq(gfa_guest_report_stat(rep, &rs), 0);
		cr_assert_eq(rs.err_pinned, 1);
		cr_assert_eq(rs.requests, 0);
		gfa_guest_report_destroy(rep);
	}
	cr_assert_eq(gfa_guest_unpin(m.g, pin_gpa, 2 * MiB), 0);
	cr_assert_eq(gfa_guest_collapse(m.g, 64), 0, "still pinned once");
	cr_assert_eq(gfa_guest_unpin(m.g, pin_gpa + 4096, 4096), 0);
	cr_assert_eq(gfa_guest_pinned(m.g, pin_gpa, 2 * MiB), 0);
	cr_assert_eq(gfa_guest_collapse(m.g, 64), 1, "unpinned, it collapses");
	mv_done(&m);
}

Test(moves, pin_rejects_bad_ranges_and_changes_nothing)
{
	struct mv m;

	mv_setup(&m, NULL);
	cr_assert_eq(gfa_guest_pin(NULL, 0, 4096), GFA_EFAULT);
	cr_assert_eq(gfa_guest_pin(m.g, 0, 0), GFA_EINVAL);
	cr_assert_eq(gfa_guest_pin(m.g, 16 * MiB, 1), GFA_ERANGE);
	cr_assert_eq(gfa_guest_pin(m.g, 15 * MiB, 2 * MiB), GFA_ERANGE);
	cr_assert_eq(gfa_guest_pin(m.g, UINT64_MAX - 10, 20), GFA_ERANGE);
	cr_assert_eq(gfa_guest_unpin(m.g, 0, 4096), -ENOENT);
	cr_assert_eq(gfa_guest_pin(m.g, 0, 4096), 0);
	/* one range of two not pinned: the unpin changes neither */
	cr_assert_eq(gfa_guest_unpin(m.g, 0, 4 * MiB), -ENOENT);
	cr_assert_eq(gfa_guest_pinned(m.g, 0, 1), 1);
	cr_assert_eq(gfa_guest_unpin(m.g, 0, 4096), 0);
	cr_assert_eq(gfa_guest_pinned(m.g, 0, 16 * MiB), 0);
	cr_assert_eq(gfa_guest_pinned(NULL, 0, 1), GFA_EFAULT);
	mv_done(&m);
}

/* A guest whose RAM is all pinned (VFIO): unmovable frames that nothing moves. */
Test(moves, a_pinned_guest_is_unmovable_and_never_moves, .timeout = 60)
{
	struct gfa_pool *pool = tu_pool(16384);
	struct gfa_backing_config bc = { .no_zero_on_stop = true };
	struct gfa_backing *b = gfa_backing_create(pool, &bc);
	struct gfa_guest_config gc = { .mem_bytes = 8 * MiB,
				       .small_only = true,
				       .flags = GFA_GUEST_PINNED };
	struct gfa_guest_config bad = { .mem_bytes = 8 * MiB, .flags = 1U << 31 };
	struct gfa_gpa_range r = { 0, 4096 };
	struct gfa_frame_info fi;
	struct gfa_guest *g;
	uint64_t pfn, pfn_after;

	cr_assert_not_null(b);
	cr_assert_null(gfa_guest_create(pool, b, &bad));
	cr_assert_eq(errno, EINVAL, "unknown flags");
	g = gfa_guest_create(pool, b, &gc);
	cr_assert_not_null(g);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 0, &pfn), 0);
	cr_assert_eq(gfa_frame_lookup(pool, pfn, &fi), 0);
	cr_assert_eq(fi.mt, GFA_MT_UNMOVABLE);
	cr_assert_eq(gfa_guest_pinned(g, 0, 1), 1);
	gfa_compact_zone(pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_guest_collapse(g, 64), 0);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 0, &pfn_after), 0);
	cr_assert_eq(pfn_after, pfn);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), -EBUSY);
	gfa_guest_destroy(g);
	ASSERT_POOL_OK(pool);
	cr_assert_eq(tu_free_frames(pool), 16384);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}

/* The moved notifier hears each compaction move before the window maps it. */
static uint64_t moved_calls;
static int moved_count(void *ctx, uint64_t gpa, uint64_t len, int fd, uint64_t off)
{
	(void)ctx;
	if (fd < 0 || off % 4096 || gpa % 4096 || len != 4096)
		return -1;
	moved_calls++;
	return 0;
}

Test(moves, the_moved_notifier_hears_every_move, .timeout = 60)
{
	struct mv m;
	struct gfa_guest_stat st;

	mv_setup_notified(&m, NULL, moved_count);
	gfa_compact_zone(m.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_gt(st.moves, 100);
	cr_assert_eq(moved_calls, st.moves, "%lu notices for %lu moves", (unsigned long)moved_calls,
		     (unsigned long)st.moves);
	mv_done(&m);
}

/* A notifier that refuses keeps every block where it is. */
static int moved_refuse(void *ctx, uint64_t gpa, uint64_t len, int fd, uint64_t off)
{
	(void)ctx, (void)gpa, (void)len, (void)fd, (void)off;
	return -1;
}

Test(moves, a_refusing_moved_notifier_keeps_every_block, .timeout = 60)
{
	struct mv m;
	struct gfa_guest_stat st;
	uint64_t pfn0, pfn;

	mv_setup_notified(&m, NULL, moved_refuse);
	memset(gfa_guest_hva(m.g), 0x3c, gfa_guest_size(m.g));
	cr_assert_eq(gfa_guest_gpa_to_pfn(m.g, 0, &pfn0), 0);
	gfa_compact_zone(m.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_guest_collapse(m.g, 64), 0);
	cr_assert_eq(gfa_guest_stat(m.g, &st), 0);
	cr_assert_eq(st.moves + st.collapses, 0);
	cr_assert_eq(gfa_guest_gpa_to_pfn(m.g, 0, &pfn), 0);
	cr_assert_eq(pfn, pfn0);
	for (uint64_t i = 0; i < gfa_guest_size(m.g); i += 512)
		cr_assert_eq(((unsigned char *)gfa_guest_hva(m.g))[i], 0x3c);
	/* and no write waits for good: the protections were lifted */
	memset(gfa_guest_hva(m.g), 0x3d, gfa_guest_size(m.g));
	mv_done(&m);
}
