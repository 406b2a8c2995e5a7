// SPDX-License-Identifier: MIT
/*
 * The io_uring release engine: punches free frame ranges out of a zone memfd,
 * asynchronously, on a thread of its own.  See include/gfa/vmm.h for the
 * contract; this comment explains the machinery (its files: vmm/release_internal.h).
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
#include "vmm/release_internal.h"
#include "allocator/layers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

__thread struct gfa_release_engine *engine_self;

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

		while (!e->stopping && (!e->head || (e->plugs && !e->flushers)))
			pthread_cond_wait(&e->work_cond, &e->lock);
		if (!e->head)
			break; /* stopping and drained */
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

static bool fault_valid(const struct gfa_release_fault *f)
{
	return !f->nth || f->err > 0;
}

static int config_check(const struct gfa_release_config *c, uint64_t page)
{
	if (c->max_punch_bytes % page || c->max_punch_bytes > GFA_RELEASE_MAX_PUNCH_LIMIT)
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
	e->max_punch = cfg->max_punch_bytes ? cfg->max_punch_bytes : GFA_RELEASE_DEFAULT_MAX_PUNCH;
	e->ring_entries = cfg->ring_entries ? cfg->ring_entries : GFA_RELEASE_DEFAULT_RING;
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
		fprintf(stderr, "gfa: release engine: %s; releasing synchronously\n", e->why_sync);
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
