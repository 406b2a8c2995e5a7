/*
 * What a virtio-balloon device model of a VMM nobody here wrote needs (kvmtool's): inflate
 * that gives memory back without a host-return thread, best-effort page lists, deflate
 * that waits for frames in flight, report completions reaped on the device's own thread,
 * calls from a vCPU's thread, and guests whose moves never pause (GFA_GUEST_WP_ONLY).
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/host_util.h"

#define MiB (1ULL << 20)

static struct tu_host dhost_new(uint64_t pool_bytes, uint64_t guest_bytes, bool no_punch)
{
	const struct gfa_backing_config bc = { .populate = true, .no_balloon_punch = no_punch };

	return tu_host_new(pool_bytes, &bc, guest_bytes);
}

static void touch(struct gfa_guest *g)
{
	uint64_t *w = gfa_guest_hva(g);

	for (uint64_t i = 0; i < gfa_guest_size(g) / 8; i += 512)
		w[i] = i | 1;
}

/* ---- inflate returns memory without a host return ---- */

Test(balloon_device, inflate_without_a_host_return_punches_the_frames_itself)
{
	struct tu_host h = dhost_new(32 * MiB, 16 * MiB, false);
	struct gfa_gpa_range r[2] = { { 2 * MiB, 4 * MiB }, { 9 * MiB, 4096 } };
	struct gfa_guest_stat st;
	struct gfa_vmstat vs;
	int64_t before;

	touch(h.g);
	before = tu_backed(h.b);
	cr_assert_eq(gfa_balloon_inflate(h.g, r, 2), 1025);
	cr_assert_eq(before - tu_backed(h.b), (int64_t)(4 * MiB + 4096),
		     "the host got the ballooned memory back: %ld bytes",
		     (long)(before - tu_backed(h.b)));
	gfa_guest_stat(h.g, &st);
	cr_assert_eq(st.balloon_punched_frames, 1025);
	gfa_pool_vmstat(h.pool, &vs);
	cr_assert_eq(vs.release_done, 1025, "counted as a release");
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 0, "punched frames are clean");
	/* and they come back zeroed, with the guest's other data where it was */
	cr_assert_eq(gfa_balloon_deflate(h.g, r, 2), 1025);
	cr_assert_eq(*(uint64_t *)((char *)gfa_guest_hva(h.g) + 2 * MiB), 0);
	cr_assert_eq(*(uint64_t *)((char *)gfa_guest_hva(h.g) + 8 * MiB), (8 * MiB / 8) | 1);
	tu_host_done(&h);
}

Test(balloon_device, no_balloon_punch_leaves_it_to_a_host_return)
{
	struct tu_host h = dhost_new(32 * MiB, 16 * MiB, true);
	struct gfa_gpa_range r = { 2 * MiB, 4 * MiB };
	struct gfa_guest_stat st;
	int64_t before;

	touch(h.g);
	before = tu_backed(h.b);
	cr_assert_eq(gfa_balloon_inflate(h.g, &r, 1), 1024);
	cr_assert_eq(tu_backed(h.b), before, "kept populated");
	gfa_guest_stat(h.g, &st);
	cr_assert_eq(st.balloon_punched_frames, 0);
	cr_assert_eq(gfa_backing_nr_dirty(h.b), 1024);
	tu_host_done(&h);
}

Test(balloon_device, with_a_host_return_inflate_only_kicks_it)
{
	struct tu_host h = dhost_new(32 * MiB, 16 * MiB, false);
	struct gfa_host_return_config hc = { .no_settle = true };
	struct gfa_host_return *hr = gfa_host_return_start(h.pool, h.b, &hc);
	struct gfa_gpa_range r = { 2 * MiB, 4 * MiB };
	struct gfa_guest_stat st;

	cr_assert_not_null(hr);
	touch(h.g);
	cr_assert_eq(gfa_balloon_inflate(h.g, &r, 1), 1024);
	gfa_guest_stat(h.g, &st);
	cr_assert_eq(st.balloon_punched_frames, 0, "the host return's to release");
	cr_assert_eq(gfa_host_return_quiesce(hr, 10000), 0);
	cr_assert_eq(gfa_host_return_stop(hr), 0);
	tu_host_done(&h);
}

Test(balloon_device, hugetlb_page_sizes)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_backing_config one_g = { .hugetlb = true, .hugetlb_page_bytes = 1U << 30 };
	struct gfa_backing_config odd = { .hugetlb = true, .hugetlb_page_bytes = 4 * MiB };
	struct gfa_backing_config no_tlb = { .hugetlb_page_bytes = 2 * MiB };

	errno = 0;
	cr_assert_null(gfa_backing_create(p, &one_g));
	cr_assert_eq(-errno, GFA_ENOTSUP);
	cr_assert_null(gfa_backing_create(p, &odd));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(gfa_backing_create(p, &no_tlb));
	cr_assert_eq(errno, EINVAL);
	gfa_pool_destroy(p);
}

/* ---- best-effort lists ---- */

Test(balloon_device, each_range_succeeds_or_fails_on_its_own)
{
	struct tu_host h = dhost_new(32 * MiB, 16 * MiB, false);
	/* a good page, its duplicate, one past RAM, a misaligned one, another good one */
	struct gfa_gpa_range r[5] = {
		{ 4 * MiB, 4096 },     { 4 * MiB, 4096 }, { 16 * MiB, 4096 },
		{ 5 * MiB + 1, 4096 }, { 6 * MiB, 8192 },
	};
	int64_t res[5];
	uint64_t pfn;

	cr_assert_eq(gfa_balloon_inflate(h.g, r, 5), GFA_ERANGE, "all or nothing refuses");
	cr_assert_eq(gfa_guest_gpa_to_pfn(h.g, 4 * MiB, &pfn), 0, "and changes nothing");
	cr_assert_eq(gfa_balloon_inflate_each(h.g, r, 5, res), 3);
	cr_assert_eq(res[0], 1);
	cr_assert_eq(res[1], GFA_EALREADY);
	cr_assert_eq(res[2], GFA_ERANGE);
	cr_assert_eq(res[3], GFA_EINVAL);
	cr_assert_eq(res[4], 2);
	cr_assert_eq(gfa_guest_gpa_to_pfn(h.g, 6 * MiB + 4096, &pfn), GFA_ENOTFOUND);
	cr_assert_eq(gfa_balloon_deflate_each(h.g, r, 5, res), 3);
	cr_assert_eq(res[0], 1);
	cr_assert_eq(res[1], GFA_ENOTFOUND, "deflated already");
	cr_assert_eq(res[4], 2);
	cr_assert_eq(gfa_balloon_inflate_each(h.g, r, 5, NULL), GFA_EFAULT);
	cr_assert_eq(gfa_balloon_inflate_each(NULL, r, 5, res), GFA_EFAULT);
	cr_assert_eq(gfa_balloon_inflate_each(h.g, r, 0, res), 0);
	tu_host_done(&h);
}

/* ---- report completions on the device's thread ---- */

static _Thread_local int on_device;
static _Atomic int done_on_device, done_elsewhere;

static void count_done(void *cookie, int result)
{
	(void)cookie;
	cr_assert_eq(result, 0);
	atomic_fetch_add(on_device ? &done_on_device : &done_elsewhere, 1);
}

Test(balloon_device, report_completions_are_reaped_on_the_devices_thread, .timeout = 60)
{
	struct tu_host h = dhost_new(64 * MiB, 32 * MiB, false);
	struct gfa_free_report *rep = gfa_guest_report_create(h.b, h.g);
	struct pollfd pfd;
	int reaped = 0, efd;

	cr_assert_not_null(rep);
	touch(h.g);
	efd = gfa_guest_report_eventfd(rep);
	cr_assert_geq(efd, 0);
	cr_assert_eq(gfa_guest_report_eventfd(rep), efd, "the same one again");
	on_device = 1; /* this thread is the device */
	for (uint64_t i = 0; i < 8; i++) {
		struct gfa_gpa_range r = { i * 4 * MiB, 2 * MiB };

		cr_assert_eq(gfa_guest_report_free(rep, &r, 1, count_done, NULL), 0);
	}
	pfd = (struct pollfd){ .fd = efd, .events = POLLIN };
	while (reaped < 8) {
		cr_assert_eq(poll(&pfd, 1, 10000), 1, "the eventfd says when requests finish");
		reaped += gfa_guest_report_reap(rep);
	}
	cr_assert_eq(reaped, 8);
	cr_assert_eq(atomic_load(&done_on_device), 8);
	cr_assert_eq(atomic_load(&done_elsewhere), 0, "no done ran on gfa's threads");
	cr_assert_eq(gfa_guest_report_reap(rep), 0);
	/* a flush reaps what is queued, here */
	{
		struct gfa_gpa_range r = { 30 * MiB, 2 * MiB };

		cr_assert_eq(gfa_guest_report_free(rep, &r, 1, count_done, NULL), 0);
		cr_assert_eq(gfa_guest_report_flush(rep, 10000), 0);
		cr_assert_eq(atomic_load(&done_on_device), 9);
	}
	on_device = 0;
	gfa_guest_report_destroy(rep);
	tu_host_done(&h);
}

/* ---- any thread; never a pause ---- */

struct vcpu_gate {
	_Atomic int paused, release;
};

static int gate_pause(void *ctx)
{
	struct vcpu_gate *v = ctx;

	atomic_store(&v->paused, 1);
	while (!atomic_load(&v->release)) /* "the vCPU" is the test's main thread */
		usleep(100);
	return 0;
}

static int gate_resume(void *ctx)
{
	struct vcpu_gate *v = ctx;

	atomic_store(&v->paused, 0); /* release stays: later pauses pass at once */
	return 0;
}

static const struct gfa_guest_vcpu_ops gate_ops = { gate_pause, gate_resume };

static void *collapse_thread(void *arg)
{
	return (void *)(intptr_t)gfa_guest_collapse(arg, 64);
}

Test(balloon_device, a_vcpus_call_during_a_fallback_pause_gets_eagain, .timeout = 60)
{
	struct gfa_backing_config bc = { .populate = true };
	struct vcpu_gate v = { 0, 0 };
	struct gfa_guest_config gc = { .mem_bytes = 8 * MiB,
				       .small_only = true,
				       .vcpu_ops = &gate_ops,
				       .vcpu_ctx = &v };
	struct gfa_pool *pool = tu_pool(32 * MiB >> GFA_FRAME_SHIFT);
	struct gfa_backing *b = gfa_backing_create(pool, &bc);
	struct gfa_gpa_range r = { 0, 4096 };
	struct gfa_guest *g;
	pthread_t t;
	void *ret;

	setenv("GFA_NO_UFFD", "1", 1);
	g = gfa_guest_create(pool, b, &gc);
	unsetenv("GFA_NO_UFFD");
	cr_assert_not_null(g);
	/* a collapse pauses "the vCPUs", and this thread, a vCPU's IO handler, calls in */
	cr_assert_eq(pthread_create(&t, NULL, collapse_thread, g), 0);
	while (!atomic_load(&v.paused))
		usleep(100);
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), GFA_EAGAIN, "not a deadlock");
	cr_assert_eq(gfa_balloon_deflate(g, &r, 1), GFA_EAGAIN);
	cr_assert_eq(gfa_guest_collapse(g, 1), GFA_EAGAIN);
	atomic_store(&v.release, 1); /* "back in KVM_RUN": the pause completes */
	while (pthread_join(t, &ret))
		;
	cr_assert_gt((intptr_t)ret, 0, "the collapse went on");
	cr_assert_eq(gfa_balloon_inflate(g, &r, 1), 1, "and the call works once it ran");
	gfa_guest_destroy(g);
	ASSERT_POOL_OK(pool);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}

Test(balloon_device, a_wp_only_guest_never_pauses_and_needs_no_ops, .timeout = 60)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config gc = { .mem_bytes = 8 * MiB,
				       .small_only = true,
				       .flags = GFA_GUEST_WP_ONLY };
	struct gfa_pool *pool = tu_pool(32 * MiB >> GFA_FRAME_SHIFT);
	struct gfa_backing *b = gfa_backing_create(pool, &bc);
	struct gfa_guest_config with_ops = gc;
	struct gfa_guest_stat st;
	struct gfa_guest *g;

	with_ops.vcpu_ops = &gate_ops;
	errno = 0;
	cr_assert_null(gfa_guest_create(pool, b, &with_ops));
	cr_assert_eq(errno, EINVAL, "ops that would never be called");
	/* no userfaultfd: its blocks stay where they are */
	setenv("GFA_NO_UFFD", "1", 1);
	g = gfa_guest_create(pool, b, &gc);
	unsetenv("GFA_NO_UFFD");
	cr_assert_not_null(g);
	cr_assert_eq(gfa_guest_collapse(g, 64), 0);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.collapses, 0);
	cr_assert_eq(st.pauses, 0);
	cr_assert_gt(st.pinned_skips, 0);
	cr_assert_eq(st.wp_errno, ECANCELED);
	gfa_guest_destroy(g);
	/* with it: moves write-protect and pause nothing */
	g = gfa_guest_create(pool, b, &gc);
	cr_assert_not_null(g);
	gfa_guest_stat(g, &st);
	if (st.wp_errno) {
		gfa_guest_destroy(g);
		cr_skip_test("no userfaultfd here (%s)", strerror(st.wp_errno));
	}
	cr_assert_eq(gfa_guest_collapse(g, 64), 4);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.wp_moves, 4);
	cr_assert_eq(st.pauses, 0);
	gfa_guest_destroy(g);
	ASSERT_POOL_OK(pool);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}
