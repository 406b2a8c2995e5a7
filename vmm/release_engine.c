// SPDX-License-Identifier: MIT
/*
 * The io_uring release engine: punches free frame ranges out of a zone memfd,
 * asynchronously, on a thread of its own.  See include/gfa/vmm.h for the
 * contract; this comment explains the machinery.
 *
 * Queue.  Submitters append a node to a FIFO under e->lock and signal the engine;
 * every node gets a sequence number, so "everything submitted before me is done"
 * (flush) is just completed_seq >= my target.
 *
 * Passes.  The engine takes up to `batch` nodes (a FIFO prefix, hence a contiguous
 * sequence range), sorts them by offset and plans punches lazily with a cursor:
 * a punch starts where the cursor is and extends over exactly adjacent ranges up
 * to the cap.  Only the punches in flight need storage (one slot per ring entry,
 * preallocated), so the engine thread never allocates.  A range may be cut into
 * several punches; it is complete once it has been fully planned and every punch
 * touching it has finished.  The pass ends when all its ranges are complete; then
 * completed_seq advances and flushers wake.
 *
 * Attempts.  A punch's first failure is retried once (on the ring if there is one;
 * switching to MADV_REMOVE if fallocate is unsupported), a second failure on the
 * ring is redone synchronously, and a failure of a synchronous attempt after an
 * earlier failure is final.  An op the kernel has consumed is always reaped before
 * its punch is reported, so no late punch can zero frames already handed out.
 *
 * Ring failure.  Two io_uring_submit() failures in a row mean the ring is broken:
 * the engine reaps what the kernel took, drops what it did not, tears the ring
 * down, finishes the pass synchronously and stays in synchronous mode.
 */
#define _GNU_SOURCE
#include "gfa/vmm.h"
#include "allocator/layers.h"
#include "common/bug.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PUNCH_MODE	(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)
#define WHY_LEN		192

enum punch_method { METHOD_FALLOCATE, METHOD_MADVISE };

struct rel_range {
	struct rel_range *next;
	uint64_t off, len, seq;
	gfa_release_done_fn done;
	void *cookie;
	uint32_t pieces;	/* planned punches not yet finished */
	bool planned;		/* every byte is covered by a planned punch */
	int err;		/* first failure among its punches */
};

struct punch {
	uint64_t off, len;
	uint32_t first, last;	/* ranges[first..last] overlap this punch */
	uint8_t method;
	uint8_t failures;
	int inject_err;		/* injected completion error (positive errno) */
};

struct fault_state {
	struct gfa_release_fault f;
	uint64_t seen;
};

struct gfa_release_engine {
	int fd;
	char *map_base;
	uint64_t page_size;
	uint64_t max_punch;
	uint32_t ring_entries;
	uint32_t batch;
	uint64_t file_size;		/* atomic: size last seen by fstat */

	/* Queue and flush state, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t work_cond;	/* engine waits for work */
	pthread_cond_t done_cond;	/* flushers wait for completed_seq */
	struct rel_range *head, **tailp;
	uint64_t last_seq;		/* last sequence number handed out */
	uint64_t completed_seq;		/* every range with seq <= this is done */
	uint32_t plugs, flushers;
	bool stopping;
	pthread_t thread;

	/* Engine thread only. */
	struct io_uring ring;
	bool ring_ok, ring_fallocate, ring_madvise, degraded;
	enum punch_method method;
	struct fault_state f_submit, f_complete, f_sync;
	uint32_t submit_streak;
	struct rel_range **ranges;	/* this pass, sorted; batch entries */
	uint32_t nranges;
	uint32_t cur_i;			/* cursor: range holding cur_pos */
	uint64_t cur_pos;
	struct punch *slots;		/* ring_entries slots */
	uint32_t *free_slots, nfree;
	uint32_t *retry, nretry;	/* slots waiting for a ring retry */
	uint32_t *sq_fifo, sq_head, sq_count;	/* prepared, not consumed */
	uint32_t kernel_inflight;	/* consumed by the kernel, not reaped */

	int mode;			/* atomic enum gfa_release_mode_kind */
	char why_ring[WHY_LEN];		/* fixed after create */
	char why_sync[WHY_LEN];		/* written once, before mode turns SYNC */
	struct gfa_release_stats st;	/* fields accessed atomically */
};

/* The engine the current thread runs, to refuse flush/destroy from callbacks. */
static __thread struct gfa_release_engine *engine_self;

#define STAT_ADD(e, f, v) __atomic_fetch_add(&(e)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(e, f, v) __atomic_fetch_sub(&(e)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_GET(e, f)    __atomic_load_n(&(e)->st.f, __ATOMIC_RELAXED)

static const char *err_name(int err)
{
	const char *s = strerrorname_np(err);

	return s ? s : "unknown error";
}

/* True if this operation number falls in the configured failure window. */
static int fault_hit(struct fault_state *fs)
{
	uint64_t n = ++fs->seen;
	uint32_t count = fs->f.count ? fs->f.count : 1;

	if (!fs->f.nth || n < fs->f.nth || n - fs->f.nth >= count)
		return 0;
	return fs->f.err;
}

static bool fault_valid(const struct gfa_release_fault *f)
{
	return !f->nth || f->err > 0;
}

/* ---- completion bookkeeping ------------------------------------------- */

static void range_complete(struct gfa_release_engine *e, struct rel_range *r)
{
	r->done(r->cookie, r->off, r->len, r->err);
	STAT_ADD(e, ranges_done, 1);
	/* a range reported failed counts none of its bytes, punched pieces included */
	if (r->err)
		STAT_ADD(e, ranges_failed, 1);
	else
		STAT_ADD(e, bytes_released, r->len);
	/* submitted, so counted in flight */
	GFA_BUG_ON(!STAT_GET(e, inflight_ranges) || STAT_GET(e, inflight_bytes) < r->len);
	STAT_SUB(e, inflight_ranges, 1);
	STAT_SUB(e, inflight_bytes, r->len);
	free(r);
}

static void punch_finish(struct gfa_release_engine *e, struct punch *p, int res)
{
	uint32_t i;

	for (i = p->first; i <= p->last; i++) {
		struct rel_range *r = e->ranges[i];

		if (res && !r->err)
			r->err = res;
		if (--r->pieces == 0 && r->planned) {
			e->ranges[i] = NULL;
			range_complete(e, r);
		}
	}
	e->free_slots[e->nfree++] = (uint32_t)(p - e->slots);
}

/* ---- planning ---------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
	const struct rel_range *x = *(const struct rel_range *const *)a;
	const struct rel_range *y = *(const struct rel_range *const *)b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * Plan the next punch at the cursor into a free slot: extend over exactly
 * adjacent ranges (never across a gap: it may hold allocated frames), up to the
 * cap.  Returns the slot or NULL when the pass is fully planned.
 */
static struct punch *plan_next(struct gfa_release_engine *e)
{
	uint32_t i = e->cur_i, last = i;
	uint64_t start = e->cur_pos, limit, end;
	struct punch *p;

	if (i >= e->nranges || !e->nfree)
		return NULL;
	limit = start + e->max_punch;
	end = e->ranges[i]->off + e->ranges[i]->len;
	while (end < limit && last + 1 < e->nranges &&
	       e->ranges[last + 1]->off == end) {
		last++;
		end += e->ranges[last]->len;
		STAT_ADD(e, ranges_coalesced, 1);
	}
	if (end > limit)
		end = limit;

	p = &e->slots[e->free_slots[--e->nfree]];
	*p = (struct punch){ .off = start, .len = end - start, .first = i,
			     .last = last, .method = e->method };
	for (; i <= last; i++) {
		struct rel_range *r = e->ranges[i];

		r->pieces++;
		if (end >= r->off + r->len)
			r->planned = true;
	}
	if (end == e->ranges[last]->off + e->ranges[last]->len) {
		e->cur_i = last + 1;
		e->cur_pos = e->cur_i < e->nranges ? e->ranges[e->cur_i]->off : 0;
	} else {
		e->cur_i = last;
		e->cur_pos = end;
	}
	STAT_ADD(e, punches, 1);
	return p;
}

/* ---- attempts ---------------------------------------------------------- */

static int punch_sync(struct gfa_release_engine *e, struct punch *p)
{
	int err = fault_hit(&e->f_sync), r;

	STAT_ADD(e, sync_ops, 1);
	if (p->method == METHOD_MADVISE)
		STAT_ADD(e, madvise_ops, 1);
	if (err)
		return -err;
	do {
		if (p->method == METHOD_FALLOCATE)
			r = fallocate(e->fd, PUNCH_MODE, (off_t)p->off, (off_t)p->len);
		else
			r = madvise(e->map_base + p->off, p->len, MADV_REMOVE);
	} while (r && errno == EINTR);
	return r ? -errno : 0;
}

static bool ring_can(const struct gfa_release_engine *e, enum punch_method m)
{
	return e->ring_ok &&
	       (m == METHOD_FALLOCATE ? e->ring_fallocate : e->ring_madvise);
}

/*
 * Where fallocate is unsupported on this file, punch through the mapping
 * instead, for this punch and every later one.
 */
static void maybe_switch_method(struct gfa_release_engine *e, struct punch *p,
				int res)
{
	if (p->method != METHOD_FALLOCATE || !e->map_base)
		return;
	if (res != -EOPNOTSUPP && res != -ENOSYS)
		return;
	p->method = METHOD_MADVISE;
	e->method = METHOD_MADVISE;
}

/*
 * Act on the result of an attempt: finish the punch, queue its ring retry, or
 * run the synchronous retry/fallback right here.
 */
static void punch_result(struct gfa_release_engine *e, struct punch *p, int res,
			 bool was_sync)
{
	for (;;) {
		if (res >= 0) {
			punch_finish(e, p, 0);
			return;
		}
		STAT_ADD(e, ops_failed, 1);
		p->failures++;
		maybe_switch_method(e, p, res);
		if (p->failures >= 2 && was_sync) {
			punch_finish(e, p, res);
			return;
		}
		if (p->failures == 1) {
			STAT_ADD(e, retries, 1);
			if (ring_can(e, p->method)) {
				e->retry[e->nretry++] = (uint32_t)(p - e->slots);
				return;
			}
		} else {
			STAT_ADD(e, sync_fallbacks, 1);
		}
		res = punch_sync(e, p);
		was_sync = true;
	}
}

/* ---- ring mode ---------------------------------------------------------- */

static void ring_prep(struct gfa_release_engine *e, struct io_uring_sqe *sqe,
		      struct punch *p)
{
	uint32_t idx = (uint32_t)(p - e->slots);

	p->inject_err = fault_hit(&e->f_complete);
	if (p->inject_err)
		io_uring_prep_nop(sqe);	/* completes, but touches nothing */
	else if (p->method == METHOD_FALLOCATE)
		io_uring_prep_fallocate(sqe, e->fd, PUNCH_MODE, (off_t)p->off,
					(off_t)p->len);
	else
		io_uring_prep_madvise(sqe, e->map_base + p->off, (off_t)p->len,
				      MADV_REMOVE);
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
		if ((uint32_t)ret > e->sq_count)	/* a release build stays safe */
			ret = (int)e->sq_count;
		e->sq_head = (e->sq_head + (uint32_t)ret) % e->ring_entries;
		e->sq_count -= (uint32_t)ret;
		e->kernel_inflight += (uint32_t)ret;
		e->submit_streak = 0;
		return 0;
	}
	if (ret == 0)
		ret = -EAGAIN;	/* nothing taken and nothing to wait for */
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
	io_uring_for_each_cqe(&e->ring, head, cqe) {
		struct punch *p = &e->slots[io_uring_cqe_get_data64(cqe)];
		int res = cqe->res;

		n++;
		GFA_BUG_ON(!e->kernel_inflight);        /* an op the kernel took */
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
	snprintf(why, sizeof(why), "io_uring_submit failed twice (%s)",
		 err_name(-err));
	set_sync_mode(e, why);
}

static void pass_ring(struct gfa_release_engine *e)
{
	for (;;) {
		int err;

		ring_fill(e);
		if (!e->sq_count && !e->kernel_inflight)
			return;		/* fully planned, nothing pending */
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

/* ---- passes and the engine thread ---------------------------------------- */

static void pass_sync(struct gfa_release_engine *e)
{
	struct punch *p;

	while ((p = plan_next(e))) {
		if (e->degraded)
			STAT_ADD(e, sync_fallbacks, 1);
		punch_result(e, p, punch_sync(e, p), true);
	}
}

static void pass_run(struct gfa_release_engine *e, struct rel_range *list)
{
	uint32_t n = 0;

	for (; list; list = list->next)
		e->ranges[n++] = list;
	qsort(e->ranges, n, sizeof(*e->ranges), range_cmp);
	e->nranges = n;
	e->cur_i = 0;
	e->cur_pos = e->ranges[0]->off;
	STAT_ADD(e, passes, 1);

	if (e->ring_ok)
		pass_ring(e);
	pass_sync(e);
	e->nranges = 0;
}

/* Take up to batch queued ranges; returns the list and its last sequence. */
static struct rel_range *queue_take(struct gfa_release_engine *e, uint64_t *last)
{
	struct rel_range *list = e->head, *r = list;
	uint32_t n = 1;

	while (r->next && n < e->batch) {
		r = r->next;
		n++;
	}
	e->head = r->next;
	if (!e->head)
		e->tailp = &e->head;
	r->next = NULL;
	*last = r->seq;
	return list;
}

static void *engine_main(void *arg)
{
	struct gfa_release_engine *e = arg;

	engine_self = e;
	pthread_mutex_lock(&e->lock);
	for (;;) {
		struct rel_range *list;
		uint64_t last;

		while (!e->stopping &&
		       (!e->head || (e->plugs && !e->flushers)))
			pthread_cond_wait(&e->work_cond, &e->lock);
		if (!e->head)
			break;	/* stopping and drained */
		list = queue_take(e, &last);
		pthread_mutex_unlock(&e->lock);

		pass_run(e, list);

		pthread_mutex_lock(&e->lock);
		e->completed_seq = last;
		pthread_cond_broadcast(&e->done_cond);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
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
static int ring_setup(struct gfa_release_engine *e,
		      const struct gfa_release_config *cfg)
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
			snprintf(e->why_sync, WHY_LEN, "io_uring setup failed (%s)",
				 err_name(-r));
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
		 e->ring_fallocate ? "IORING_OP_FALLOCATE punch hole"
				   : "IORING_OP_MADVISE MADV_REMOVE",
		 e->ring_entries,
		 e->ring_fallocate && e->ring_madvise && e->map_base ?
			", MADV_REMOVE fallback" : "");
	e->ring_ok = true;
	return 0;
}

static int config_check(const struct gfa_release_config *c, uint64_t page)
{
	if (c->max_punch_bytes % page ||
	    c->max_punch_bytes > GFA_RELEASE_MAX_PUNCH_LIMIT)
		return -EINVAL;
	if (c->ring_entries > GFA_RELEASE_MAX_RING || c->fault_setup_err < 0 ||
	    !GFA_RESERVED_ZERO(c))
		return -EINVAL;
	if (!fault_valid(&c->fault_submit) || !fault_valid(&c->fault_complete) ||
	    !fault_valid(&c->fault_sync))
		return -EINVAL;
	return 0;
}

static void engine_free(struct gfa_release_engine *e)
{
	pthread_cond_destroy(&e->done_cond);
	pthread_cond_destroy(&e->work_cond);
	pthread_mutex_destroy(&e->lock);
	free(e->ranges);
	free(e->slots);
	free(e->free_slots);
	free(e->retry);
	free(e->sq_fifo);
	free(e);
}

static int engine_alloc_buffers(struct gfa_release_engine *e)
{
	uint32_t i;

	e->ranges = calloc(e->batch, sizeof(*e->ranges));
	e->slots = calloc(e->ring_entries, sizeof(*e->slots));
	e->free_slots = calloc(e->ring_entries, sizeof(*e->free_slots));
	e->retry = calloc(e->ring_entries, sizeof(*e->retry));
	e->sq_fifo = calloc(e->ring_entries, sizeof(*e->sq_fifo));
	if (!e->ranges || !e->slots || !e->free_slots || !e->retry || !e->sq_fifo)
		return -ENOMEM;
	for (i = 0; i < e->ring_entries; i++)
		e->free_slots[i] = e->ring_entries - 1 - i;
	e->nfree = e->ring_entries;
	return 0;
}

static int engine_init_sync(struct gfa_release_engine *e)
{
	pthread_condattr_t ca;
	int r;

	r = pthread_condattr_init(&ca);
	if (r)
		return -r;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->work_cond, NULL);
	pthread_cond_init(&e->done_cond, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

/* Start the engine thread with every signal blocked: it is a library thread. */
static int engine_start(struct gfa_release_engine *e)
{
	sigset_t all, old;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&e->thread, NULL, engine_main, e);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!r)
		pthread_setname_np(e->thread, "gfa-release");
	return -r;
}

struct gfa_release_engine *gfa_release_create(int memfd, void *map_base,
					      const struct gfa_release_config *cfg)
{
	static const struct gfa_release_config defaults;
	struct gfa_release_engine *e;
	long page = sysconf(_SC_PAGESIZE);
	struct stat sb;
	int r;

	if (!cfg)
		cfg = &defaults;
	if (memfd < 0 || fstat(memfd, &sb)) {
		errno = EBADF;
		return NULL;
	}
	if (!S_ISREG(sb.st_mode) || config_check(cfg, (uint64_t)page)) {
		errno = EINVAL;
		return NULL;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		errno = ENOMEM;
		return NULL;
	}
	e->fd = memfd;
	e->map_base = map_base;
	e->page_size = (uint64_t)page;
	e->file_size = (uint64_t)sb.st_size;
	e->max_punch = cfg->max_punch_bytes ? cfg->max_punch_bytes
					    : GFA_RELEASE_DEFAULT_MAX_PUNCH;
	e->ring_entries = cfg->ring_entries ? cfg->ring_entries
					    : GFA_RELEASE_DEFAULT_RING;
	e->batch = cfg->batch ? cfg->batch : GFA_RELEASE_DEFAULT_BATCH;
	e->f_submit.f = cfg->fault_submit;
	e->f_complete.f = cfg->fault_complete;
	e->f_sync.f = cfg->fault_sync;
	e->method = METHOD_FALLOCATE;
	e->tailp = &e->head;
	e->mode = GFA_RELEASE_MODE_SYNC;
	snprintf(e->why_ring, WHY_LEN, "io_uring not in use");

	r = engine_init_sync(e);
	if (r) {
		free(e);
		errno = -r;
		return NULL;
	}
	r = engine_alloc_buffers(e);
	if (r)
		goto fail;

	if (cfg->force_sync) {
		snprintf(e->why_sync, WHY_LEN, "synchronous mode forced by config");
	} else if (ring_setup(e, cfg) == 0) {
		e->mode = GFA_RELEASE_MODE_IO_URING;
	} else {
		fprintf(stderr, "gfa: release engine: %s; releasing synchronously\n",
			e->why_sync);
	}

	r = engine_start(e);
	if (r) {
		if (e->ring_ok)
			io_uring_queue_exit(&e->ring);
		goto fail;
	}
	return e;
fail:
	engine_free(e);
	errno = -r;
	return NULL;
}

/* ---- public calls -------------------------------------------------------- */

/*
 * Is [off, off+len) inside the file?  Re-reads the size only when it is not, so the
 * check is against the largest size seen: a file shrunk under the engine (never by gfa,
 * whose backing owns it) is not noticed, and a punch past its end changes nothing.
 */
static int range_check(struct gfa_release_engine *e, uint64_t off, uint64_t len)
{
	struct stat sb;

	if (off + len < off)
		return -ERANGE;
	if (off + len <= __atomic_load_n(&e->file_size, __ATOMIC_RELAXED))
		return 0;
	if (fstat(e->fd, &sb))
		return -errno;
	__atomic_store_n(&e->file_size, (uint64_t)sb.st_size, __ATOMIC_RELAXED);
	return off + len <= (uint64_t)sb.st_size ? 0 : -ERANGE;
}

static int submit_check(struct gfa_release_engine *e, uint64_t off, uint64_t len,
			gfa_release_done_fn done)
{
	if (!done)
		return -EFAULT;
	if (!len || off % e->page_size || len % e->page_size)
		return -EINVAL;
	return range_check(e, off, len);
}

int gfa_release_submit(struct gfa_release_engine *e, uint64_t offset,
		       uint64_t len, gfa_release_done_fn done, void *cookie)
{
	struct rel_range *r;
	int err;

	if (!e)
		return -EFAULT;
	err = submit_check(e, offset, len, done);
	if (!err) {
		r = calloc(1, sizeof(*r));
		err = r ? 0 : -ENOMEM;
	}
	if (err) {
		STAT_ADD(e, ranges_rejected, 1);
		return err;
	}
	r->off = offset;
	r->len = len;
	r->done = done;
	r->cookie = cookie;

	pthread_mutex_lock(&e->lock);
	if (e->stopping) {
		pthread_mutex_unlock(&e->lock);
		free(r);
		STAT_ADD(e, ranges_rejected, 1);
		return -ESHUTDOWN;
	}
	r->seq = ++e->last_seq;
	*e->tailp = r;
	e->tailp = &r->next;
	STAT_ADD(e, ranges_submitted, 1);
	STAT_ADD(e, bytes_submitted, len);
	STAT_ADD(e, inflight_ranges, 1);
	STAT_ADD(e, inflight_bytes, len);
	pthread_cond_signal(&e->work_cond);
	pthread_mutex_unlock(&e->lock);
	return 0;
}

int gfa_release_plug(struct gfa_release_engine *e)
{
	if (!e)
		return -EFAULT;
	pthread_mutex_lock(&e->lock);
	e->plugs++;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

int gfa_release_unplug(struct gfa_release_engine *e)
{
	int ret = 0;

	if (!e)
		return -EFAULT;
	pthread_mutex_lock(&e->lock);
	if (!e->plugs)
		ret = -EINVAL;
	else if (--e->plugs == 0)
		pthread_cond_signal(&e->work_cond);
	pthread_mutex_unlock(&e->lock);
	return ret;
}

static void deadline_after(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int gfa_release_flush(struct gfa_release_engine *e, int timeout_ms)
{
	struct timespec deadline;
	uint64_t target;
	int ret = 0;

	if (!e)
		return -EFAULT;
	if (engine_self == e)
		return -EDEADLK;
	if (timeout_ms >= 0)
		deadline_after(&deadline, timeout_ms);

	pthread_mutex_lock(&e->lock);
	target = e->last_seq;
	e->flushers++;
	pthread_cond_signal(&e->work_cond);	/* a plug must not hold us up */
	while (e->completed_seq < target && !ret) {
		if (timeout_ms < 0)
			pthread_cond_wait(&e->done_cond, &e->lock);
		else if (pthread_cond_timedwait(&e->done_cond, &e->lock,
						&deadline) == ETIMEDOUT)
			ret = e->completed_seq < target ? -ETIMEDOUT : 0;
	}
	GFA_BUG_ON(!e->flushers);
	e->flushers--;
	pthread_mutex_unlock(&e->lock);
	return ret;
}

int gfa_release_destroy(struct gfa_release_engine *e)
{
	if (!e)
		return 0;
	if (engine_self == e)
		return -EDEADLK;
	pthread_mutex_lock(&e->lock);
	e->stopping = true;
	pthread_cond_signal(&e->work_cond);
	pthread_mutex_unlock(&e->lock);
	pthread_join(e->thread, NULL);
	if (e->ring_ok)
		io_uring_queue_exit(&e->ring);
	engine_free(e);
	return 0;
}

const char *gfa_release_mode(const struct gfa_release_engine *e, const char **why)
{
	int mode;

	if (!e)
		return NULL;
	mode = __atomic_load_n(&e->mode, __ATOMIC_ACQUIRE);
	if (why)
		*why = mode == GFA_RELEASE_MODE_SYNC ? e->why_sync : e->why_ring;
	return mode == GFA_RELEASE_MODE_SYNC ? "sync" : "io_uring";
}

int gfa_release_stats(const struct gfa_release_engine *e,
		      struct gfa_release_stats *out)
{
	if (!e || !out)
		return -EFAULT;
	memset(out, 0, sizeof(*out));
	out->ranges_submitted = STAT_GET(e, ranges_submitted);
	out->ranges_rejected = STAT_GET(e, ranges_rejected);
	out->ranges_done = STAT_GET(e, ranges_done);
	out->ranges_failed = STAT_GET(e, ranges_failed);
	out->ranges_coalesced = STAT_GET(e, ranges_coalesced);
	out->bytes_submitted = STAT_GET(e, bytes_submitted);
	out->bytes_released = STAT_GET(e, bytes_released);
	out->punches = STAT_GET(e, punches);
	out->ring_ops = STAT_GET(e, ring_ops);
	out->sync_ops = STAT_GET(e, sync_ops);
	out->madvise_ops = STAT_GET(e, madvise_ops);
	out->ops_failed = STAT_GET(e, ops_failed);
	out->retries = STAT_GET(e, retries);
	out->sync_fallbacks = STAT_GET(e, sync_fallbacks);
	out->submit_errors = STAT_GET(e, submit_errors);
	out->passes = STAT_GET(e, passes);
	out->inflight_ranges = STAT_GET(e, inflight_ranges);
	out->inflight_bytes = STAT_GET(e, inflight_bytes);
	out->mode = __atomic_load_n(&e->mode, __ATOMIC_ACQUIRE);
	return 0;
}
