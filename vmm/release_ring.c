// SPDX-License-Identifier: MIT
/*
 * The release engine's ring mode (vmm/release_internal.h): setting the io_uring up,
 * preparing and submitting punches, reaping their completions, and giving the ring up
 * for synchronous mode when submitting fails twice.
 */
#define _GNU_SOURCE
#include "vmm/release_internal.h"
#include "common/bug.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *err_name(int err)
{
	const char *s = strerrorname_np(err);

	return s ? s : "unknown error";
}

/* ---- ring mode ---------------------------------------------------------- */

static void ring_prep(struct gfa_release_engine *e, struct io_uring_sqe *sqe, struct punch *p)
{
	uint32_t idx = (uint32_t)(p - e->slots);

	p->inject_err = fault_hit(&e->f_complete);
	if (p->inject_err)
		io_uring_prep_nop(sqe); /* completes, but touches nothing */
	else if (p->method == METHOD_FALLOCATE)
		io_uring_prep_fallocate(sqe, e->fd, PUNCH_MODE, (off_t)p->off, (off_t)p->len);
	else
		io_uring_prep_madvise(sqe, e->map_base + p->off, (off_t)p->len, MADV_REMOVE);
	io_uring_sqe_set_data64(sqe, idx);
	STAT_ADD(e, ring_ops, 1);
	if (p->method == METHOD_MADVISE)
		STAT_ADD(e, madvise_ops, 1);
	e->sq_fifo[(e->sq_head + e->sq_count++) % e->ring_entries] = idx;
}

/* Prepare SQEs for retries first, then for newly planned punches. */
static void ring_fill(struct gfa_release_engine *e)
{
	while (e->sq_count + e->kernel_inflight < e->ring_entries) {
		struct io_uring_sqe *sqe;
		struct punch *p;

		if (!e->nretry && (e->cur_i >= e->nranges || !e->nfree))
			return;
		sqe = io_uring_get_sqe(&e->ring);
		if (!sqe)
			return;
		if (e->nretry)
			p = &e->slots[e->retry[--e->nretry]];
		else
			p = plan_next(e);
		ring_prep(e, sqe, p);
	}
}

static int ring_submit(struct gfa_release_engine *e)
{
	int err = fault_hit(&e->f_submit);

	/* An injected failure leaves the SQEs unflushed, like a failed enter. */
	return err ? -err : io_uring_submit(&e->ring);
}

/* Returns 0, or a negative errno once the ring must be given up. */
static int ring_submit_step(struct gfa_release_engine *e)
{
	int ret = ring_submit(e);

	if (ret > 0 || (ret == 0 && e->kernel_inflight)) {
		/* the kernel never takes more entries than were queued */
		GFA_BUG_ON((uint32_t)ret > e->sq_count);
		if ((uint32_t)ret > e->sq_count) /* a release build stays safe */
			ret = (int)e->sq_count;
		e->sq_head = (e->sq_head + (uint32_t)ret) % e->ring_entries;
		e->sq_count -= (uint32_t)ret;
		e->kernel_inflight += (uint32_t)ret;
		e->submit_streak = 0;
		return 0;
	}
	if (ret == 0)
		ret = -EAGAIN; /* nothing taken and nothing to wait for */
	STAT_ADD(e, submit_errors, 1);
	/* Retry once (after reaping, if anything is in flight), then give up. */
	return ++e->submit_streak >= 2 ? ret : 0;
}

/* Wait for at least one completion and handle every one available. */
static void ring_reap(struct gfa_release_engine *e)
{
	struct io_uring_cqe *cqe;
	unsigned int head, n = 0;
	int r;

	r = io_uring_wait_cqe(&e->ring, &cqe);
	if (r < 0) {
		/*
		 * Ops the kernel took are still pending; their frames must not be
		 * reported before they complete, so there is nothing to do but wait.
		 */
		if (r != -EINTR && r != -EAGAIN && r != -ETIME)
			usleep(1000);
		return;
	}
	io_uring_for_each_cqe(&e->ring, head, cqe)
	{
		struct punch *p = &e->slots[io_uring_cqe_get_data64(cqe)];
		int res = cqe->res;

		n++;
		GFA_BUG_ON(!e->kernel_inflight); /* an op the kernel took */
		e->kernel_inflight--;
		if (p->inject_err) {
			res = -p->inject_err;
			p->inject_err = 0;
		}
		punch_result(e, p, res, false);
	}
	io_uring_cq_advance(&e->ring, n);
}

static void set_sync_mode(struct gfa_release_engine *e, const char *why)
{
	snprintf(e->why_sync, sizeof(e->why_sync), "%s", why);
	__atomic_store_n(&e->mode, GFA_RELEASE_MODE_SYNC, __ATOMIC_RELEASE);
	fprintf(stderr, "gfa: release engine: %s; releasing synchronously\n", why);
}

/*
 * The ring failed: reap whatever the kernel took (it may still be punching),
 * then finish every other started punch synchronously and drop the ring.
 */
static void ring_degrade(struct gfa_release_engine *e, int err)
{
	char why[WHY_LEN];

	e->ring_ok = false;
	e->degraded = true;
	while (e->kernel_inflight)
		ring_reap(e);
	while (e->nretry || e->sq_count) {
		uint32_t idx;

		if (e->nretry) {
			idx = e->retry[--e->nretry];
		} else {
			idx = e->sq_fifo[e->sq_head];
			e->sq_head = (e->sq_head + 1) % e->ring_entries;
			e->sq_count--;
			/* prepared, never taken by the kernel: no ring op, and the fault it
			 * was to carry is not applied to the synchronous redo either */
			STAT_SUB(e, ring_ops, 1);
			if (e->slots[idx].method == METHOD_MADVISE)
				STAT_SUB(e, madvise_ops, 1);
			e->slots[idx].inject_err = 0;
		}
		STAT_ADD(e, sync_fallbacks, 1);
		punch_result(e, &e->slots[idx], punch_sync(e, &e->slots[idx]), true);
	}
	io_uring_queue_exit(&e->ring);
	snprintf(why, sizeof(why), "io_uring_submit failed twice (%s)", err_name(-err));
	set_sync_mode(e, why);
}

void pass_ring(struct gfa_release_engine *e)
{
	for (;;) {
		int err;

		ring_fill(e);
		if (!e->sq_count && !e->kernel_inflight)
			return; /* fully planned, nothing pending */
		if (e->sq_count) {
			err = ring_submit_step(e);
			if (err) {
				ring_degrade(e, err);
				return;
			}
		}
		if (e->kernel_inflight)
			ring_reap(e);
	}
}

/* ---- setup -------------------------------------------------------------- */

static int read_io_uring_disabled(void)
{
	FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "re");
	int v = -1;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* Set up the ring; on failure say why in e->why_sync and return -errno. */
int ring_setup(struct gfa_release_engine *e, const struct gfa_release_config *cfg)
{
	struct io_uring_probe *probe;
	int r, dis;

	if (cfg->fault_setup_err) {
		snprintf(e->why_sync, WHY_LEN, "io_uring setup failed (%s, injected)",
			 err_name(cfg->fault_setup_err));
		return -cfg->fault_setup_err;
	}
	r = io_uring_queue_init(e->ring_entries, &e->ring, 0);
	if (r < 0) {
		dis = read_io_uring_disabled();
		if (dis > 0)
			snprintf(e->why_sync, WHY_LEN,
				 "io_uring unavailable (%s, kernel.io_uring_disabled=%d)",
				 err_name(-r), dis);
		else
			snprintf(e->why_sync, WHY_LEN, "io_uring setup failed (%s)", err_name(-r));
		return r;
	}
	probe = io_uring_get_probe_ring(&e->ring);
	if (probe) {
		e->ring_fallocate = io_uring_opcode_supported(probe, IORING_OP_FALLOCATE);
		e->ring_madvise = io_uring_opcode_supported(probe, IORING_OP_MADVISE);
		io_uring_free_probe(probe);
	}
	if (!e->ring_fallocate && !(e->ring_madvise && e->map_base)) {
		io_uring_queue_exit(&e->ring);
		snprintf(e->why_sync, WHY_LEN, "io_uring lacks IORING_OP_FALLOCATE%s",
			 e->map_base ? " and IORING_OP_MADVISE" : " (and no mapping)");
		return -EOPNOTSUPP;
	}
	e->method = e->ring_fallocate ? METHOD_FALLOCATE : METHOD_MADVISE;
	snprintf(e->why_ring, WHY_LEN, "%s, %u entries%s",
		 e->ring_fallocate ? "IORING_OP_FALLOCATE punch hole" :
				     "IORING_OP_MADVISE MADV_REMOVE",
		 e->ring_entries,
		 e->ring_fallocate && e->ring_madvise && e->map_base ? ", MADV_REMOVE fallback" :
								       "");
	e->ring_ok = true;
	return 0;
}
