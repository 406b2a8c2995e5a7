// SPDX-License-Identifier: MIT
/*
 * Free page reporting: a guest tells the VMM which of its pages are free (virtio-balloon's
 * VIRTIO_BALLOON_F_REPORTING, after "mm: introduce Reported pages"); their host memory is
 * punched out of the zone memfd while the frames stay the guest's, so the guest reads
 * zero (or, before the punch, its old data) and the host backs a page again when the
 * guest touches it.
 *
 * Only public gfa_guest_* calls find the frames (gfa_guest_gpa_to_pfn), so this survives
 * changes to the guest's bookkeeping.  The danger is a move: compaction may copy a
 * reported block elsewhere and free its old frames while their punch is still queued,
 * and the late punch would then zero a new owner's data.  Every punch in flight is
 * registered (pfn range) before the frames are looked up a second time, and the
 * backing's moved hook waits in report_moved_wait() (the backing's move wait, set by
 * gfa_guest_report_create) for a registered range before the move's source is freed.
 * A move that slipped in between the two lookups is seen by the second one, and that
 * run is left alone.  A move waits only for a punch already queued: a run registered but
 * not yet queued is marked moved instead, and never queued.  Its second lookup takes the
 * guest's lock, which a collapse holds across its moves (and so across the moved hook):
 * waiting for such a run there would wait for ever.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/backing_internal.h"
#include "vmm/guest_internal.h"
#include "vmm/gpa_ranges.h"
#include "allocator/layers.h"

/* One punch: frames contiguous in the guest and in one zone's memfd. */
struct report_run {
	struct report_run *prev, *next; /* in flight: the registry's list */
	struct report_req *req;
	struct gfa_backing *b;
	uint64_t gfn, pfn, nr;
	unsigned int zone;
	bool registered;
	bool submitted; /* its punch is queued: a move waits for it */
	bool moved;     /* a move freed its frames before the punch was queued */
};

/* One gfa_guest_report_free call: its done callback comes after its last run. */
struct report_req {
	struct gfa_free_report *rep;
	gfa_report_done_fn done;
	void *cookie;
	unsigned int pending; /* runs not finished, + 1 while submitting */
	int result;
	struct report_req *next_done; /* queued for gfa_guest_report_reap() */
};

struct gfa_free_report {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
	struct gfa_release_engine *engine[GFA_MAX_ZONES]; /* made on first use */
	uint64_t reqs;                                    /* requests whose done has not returned */
	struct gfa_guest_report_stat st;                  /* registry lock */
	/* queued completions (gfa_guest_report_eventfd), under the registry lock: finished
	 * requests wait here for the device's thread to reap them */
	int efd; /* -1 until asked for */
	struct report_req *done_head, **done_tail;
	uint64_t nr_done;
};

/*
 * Every punch in flight of every reporter, for the moved hook.  One lock: reporting is
 * rare next to the hook's fast path, which reads nr_runs only.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct report_run *head;
	_Atomic uint64_t nr_runs;
} reg = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0 };

static bool run_overlaps(const struct report_run *r, const struct gfa_backing *b, uint64_t pfn,
			 uint64_t nr)
{
	return r->b == b && r->pfn < pfn + nr && pfn < r->pfn + r->nr;
}

/*
 * The first run over [pfn, pfn + nr) whose punch is queued; the runs over it not queued
 * yet are marked moved on the way, so they never will be.  With reg.lock held.
 */
static struct report_run *run_queued_over(const struct gfa_backing *b, uint64_t pfn, uint64_t nr)
{
	for (struct report_run *r = reg.head; r; r = r->next) {
		if (!run_overlaps(r, b, pfn, nr))
			continue;
		if (r->submitted)
			return r;
		r->moved = true;
	}
	return NULL;
}

/*
 * A move of b's pool is about to free [pfn, pfn + 2^order): wait until no report punch
 * is queued over it, so the punch cannot land after the frames went to a new owner.
 * One atomic load when nothing is in flight.  The moving thread, no pool lock held; it
 * may hold the guest's lock (a collapse), so what it waits for must not need that lock:
 * a queued punch completes in its engine's thread.
 */
static void report_moved_wait(struct gfa_backing *b, uint64_t pfn, unsigned int order)
{
	uint64_t nr = 1ULL << order;
	bool counted = false;

	if (!atomic_load(&reg.nr_runs))
		return;
	pthread_mutex_lock(&reg.lock);
	for (;;) {
		struct report_run *r = run_queued_over(b, pfn, nr);

		if (!r)
			break;
		if (!counted)
			r->req->rep->st.moves_waited++;
		counted = true;
		pthread_cond_wait(&reg.cond, &reg.lock);
	}
	pthread_mutex_unlock(&reg.lock);
}

/* With reg.lock held. */
static void run_register(struct report_run *r)
{
	GFA_BUG_ON(r->registered || (reg.head && reg.head->prev)); /* once; the head */
	r->prev = NULL;
	r->next = reg.head;
	if (reg.head)
		reg.head->prev = r;
	reg.head = r;
	r->registered = true;
	atomic_fetch_add(&reg.nr_runs, 1);
}

static void run_unregister(struct report_run *r)
{
	if (!r->registered)
		return;
	/* on the registry's list: its neighbours (or the head) point at it */
	GFA_BUG_ON(r->prev ? r->prev->next != r : reg.head != r);
	GFA_BUG_ON(r->next && r->next->prev != r);
	GFA_BUG_ON(!atomic_load(&reg.nr_runs));
	if (r->prev)
		r->prev->next = r->next;
	else
		reg.head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->registered = false;
	atomic_fetch_sub(&reg.nr_runs, 1);
	pthread_cond_broadcast(&reg.cond);
}

/* Drop one reference of req; the last one calls done, then lets flush see it gone. */
static void req_put(struct report_req *req)
{
	struct gfa_free_report *rep = req->rep;
	bool last;

	pthread_mutex_lock(&reg.lock);
	GFA_BUG_ON(!req->pending); /* one reference a run, and one while submitting */
	last = !--req->pending;
	if (last && rep->efd >= 0) {
		/* the device's thread calls done (gfa_guest_report_reap); the eventfd is
		 * written under the lock, since a flush may free rep right after it */
		static const uint64_t one = 1;

		req->next_done = NULL;
		*rep->done_tail = req;
		rep->done_tail = &req->next_done;
		rep->nr_done++;
		(void)!write(rep->efd, &one, sizeof(one));
		pthread_mutex_unlock(&reg.lock);
		return;
	}
	pthread_mutex_unlock(&reg.lock);
	if (!last)
		return;
	req->done(req->cookie, req->result);
	free(req);
	pthread_mutex_lock(&reg.lock);
	GFA_BUG_ON(!rep->reqs);
	rep->reqs--;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock); /* rep may be freed from here on */
}

/* A run is over: punched (result 0), failed, or left alone (raced). */
static void run_finish(struct report_run *r, int result, bool raced)
{
	struct report_req *req = r->req;
	struct gfa_guest_report_stat *st = &req->rep->st;
	uint64_t bytes = r->nr << GFA_FRAME_SHIFT;

	pthread_mutex_lock(&reg.lock);
	run_unregister(r);
	if (raced)
		st->frames_raced += r->nr;
	else if (result)
		st->bytes_failed += bytes;
	else
		st->bytes_released += bytes;
	if (result && !req->result)
		req->result = result;
	GFA_BUG_ON(!st->inflight_runs);
	st->inflight_runs--;
	pthread_mutex_unlock(&reg.lock);
	free(r);
	req_put(req);
}

/* The engine thread: a run's punch completed. */
static void run_done(void *cookie, uint64_t offset, uint64_t len, int result)
{
	(void)offset;
	(void)len;
	run_finish(cookie, result, false);
}

/* Aligned, inside the guest, pairwise disjoint; the error counted. */
static int report_check(struct gfa_free_report *rep, const struct gfa_gpa_range *r, unsigned int n)
{
	int err = guest_ranges_check(rep->g, r, n);

	/* a pinned page may be a device's DMA target: its host memory must stay */
	for (unsigned int i = 0; !err && i < n; i++)
		if (gfa_guest_pinned(rep->g, r[i].gpa, r[i].len) > 0)
			err = -EBUSY;
	/* the pool counts those with an allocator meaning too */
	if (err == -EINVAL || err == -ERANGE)
		pool_count_error(rep->pool, err);
	pthread_mutex_lock(&reg.lock);
	if (err == -EBUSY)
		rep->st.err_pinned++;
	else if (err == -EINVAL)
		rep->st.err_invalid++;
	else if (err == -ERANGE)
		rep->st.err_range++;
	else if (err == -ENOTUNIQ)
		rep->st.err_overlap++;
	pthread_mutex_unlock(&reg.lock);
	return err;
}

struct run_list {
	struct report_run **v;
	unsigned int n, cap;
};

static int run_push(struct gfa_free_report *rep, struct run_list *l, uint64_t gfn, uint64_t pfn)
{
	struct report_run *last = l->n ? l->v[l->n - 1] : NULL;
	int zone = gfa_pfn_to_zone(rep->pool, pfn);

	if (zone < 0)
		return zone;
	if (last && last->gfn + last->nr == gfn && last->pfn + last->nr == pfn &&
	    last->zone == (unsigned int)zone) {
		last->nr++;
		return 0;
	}
	if (l->n == l->cap) {
		unsigned int cap = l->cap ? l->cap * 2 : 16;
		struct report_run **v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	last = calloc(1, sizeof(*last));
	if (!last)
		return -ENOMEM;
	*last = (struct report_run){ .b = rep->b,
				     .gfn = gfn,
				     .pfn = pfn,
				     .nr = 1,
				     .zone = (unsigned int)zone };
	l->v[l->n++] = last;
	return 0;
}

/* Frames behind the ranges as runs; a gfn ballooned out has none (counted). */
static int runs_collect(struct gfa_free_report *rep, const struct gfa_gpa_range *r, unsigned int n,
			struct run_list *l)
{
	uint64_t unbacked = 0;
	int err = 0;

	for (unsigned int i = 0; i < n && !err; i++)
		for (uint64_t gpa = r[i].gpa; gpa < r[i].gpa + r[i].len && !err;
		     gpa += GFA_FRAME_SIZE) {
			uint64_t pfn;
			int e = gfa_guest_gpa_to_pfn(rep->g, gpa, &pfn);

			if (e == -ENOENT)
				unbacked++;
			else if (e)
				err = e;
			else
				err = run_push(rep, l, gpa >> GFA_FRAME_SHIFT, pfn);
		}
	pthread_mutex_lock(&reg.lock);
	rep->st.frames_unbacked += unbacked;
	pthread_mutex_unlock(&reg.lock);
	return err;
}

/* Does the guest still map run's frames where the first lookup found them? */
static bool run_still_there(struct gfa_free_report *rep, const struct report_run *run)
{
	for (uint64_t i = 0; i < run->nr; i++) {
		uint64_t pfn;

		if (gfa_guest_gpa_to_pfn(rep->g, (run->gfn + i) << GFA_FRAME_SHIFT, &pfn) ||
		    pfn != run->pfn + i)
			return false;
	}
	return true;
}

static struct gfa_release_engine *report_engine(struct gfa_free_report *rep, unsigned int zone)
{
	struct gfa_release_engine *e;

	pthread_mutex_lock(&reg.lock);
	e = rep->engine[zone];
	if (!e) {
		e = gfa_release_create(gfa_backing_zone_fd(rep->b, zone),
				       gfa_backing_zone_base(rep->b, zone), NULL);
		rep->engine[zone] = e;
	}
	pthread_mutex_unlock(&reg.lock);
	return e;
}

/* Queue the run's punch unless a move freed its frames meanwhile: true if it may go. */
static bool run_mark_submitted(struct report_run *run)
{
	bool go;

	pthread_mutex_lock(&reg.lock);
	go = !run->moved;
	run->submitted = go;
	pthread_mutex_unlock(&reg.lock);
	return go;
}

static void run_submit(struct gfa_free_report *rep, struct report_run *run)
{
	struct gfa_release_engine *e;
	uint64_t off = 0;
	int fd, err;

	if (!run_still_there(rep, run) || !run_mark_submitted(run)) {
		run_finish(run, 0, true);
		return;
	}
	e = report_engine(rep, run->zone);
	err = e ? gfa_pfn_to_fd(rep->pool, run->pfn, &fd, &off) : -errno;
	if (!err)
		err = gfa_release_submit(e, off, run->nr << GFA_FRAME_SHIFT, run_done, run);
	if (err)
		run_finish(run, err, false);
}

/*
 * A lazy guest's report: the ranges become lazy again (vmm/balloon.c) - their frames go
 * back to the pool, where any owner may take them, and the next touch takes a fresh
 * zeroed block.  Done at once, in the calling thread (no punch is in flight).
 */
static int report_lazy(struct gfa_free_report *rep, const struct gfa_gpa_range *r, unsigned int n,
		       gfa_report_done_fn done, void *cookie)
{
	uint64_t frames = 0, taken = 0;
	int err = 0;

	for (unsigned int i = 0; i < n && !err; i++) {
		int64_t got = guest_discard(rep->g, r[i].gpa, r[i].len);

		frames += r[i].len >> GFA_FRAME_SHIFT;
		if (got < 0)
			err = (int)got;
		else
			taken += (uint64_t)got;
	}
	pthread_mutex_lock(&reg.lock);
	rep->st.requests++;
	rep->st.ranges += n;
	rep->st.frames_submitted += taken;
	rep->st.bytes_released += taken << GFA_FRAME_SHIFT;
	rep->st.frames_unbacked += frames - taken;
	pthread_mutex_unlock(&reg.lock);
	done(cookie, err);
	return 0;
}

int gfa_guest_report_free(struct gfa_free_report *rep, const struct gfa_gpa_range *r,
			  unsigned int n, gfa_report_done_fn done, void *cookie)
{
	struct run_list l = { 0 };
	struct report_req *req;
	int err;

	if (!rep)
		return -EFAULT;
	if (!r || !done) {
		pthread_mutex_lock(&reg.lock);
		rep->st.err_fault++;
		pthread_mutex_unlock(&reg.lock);
		return pool_count_error(rep->pool, GFA_EFAULT);
	}
	if (!n) {
		pool_count_error(rep->pool, GFA_EINVAL);
		pthread_mutex_lock(&reg.lock);
		rep->st.err_invalid++;
		pthread_mutex_unlock(&reg.lock);
		return -EINVAL;
	}
	/* the pause fallback pausing the vCPUs: this may be one (gfa_balloon_inflate) */
	if (!rep->g->wp && __atomic_load_n(&rep->g->pausing, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	err = report_check(rep, r, n);
	if (err)
		return err;
	if (rep->g->lazy)
		return report_lazy(rep, r, n, done, cookie);
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	*req = (struct report_req){ rep, done, cookie, 1, 0, NULL };
	err = runs_collect(rep, r, n, &l);
	if (err) {
		for (unsigned int i = 0; i < l.n; i++)
			free(l.v[i]);
		free(l.v);
		free(req);
		return err;
	}
	/* registered before the second lookup: a move from now on waits for the punch */
	pthread_mutex_lock(&reg.lock);
	for (unsigned int i = 0; i < l.n; i++) {
		l.v[i]->req = req;
		run_register(l.v[i]);
		rep->st.frames_submitted += l.v[i]->nr;
	}
	req->pending += l.n;
	rep->st.inflight_runs += l.n;
	rep->st.requests++;
	rep->st.ranges += n;
	rep->reqs++;
	pthread_mutex_unlock(&reg.lock);
	for (unsigned int i = 0; i < l.n; i++)
		run_submit(rep, l.v[i]);
	free(l.v);
	req_put(req);
	return 0;
}

struct gfa_free_report *gfa_guest_report_create(struct gfa_backing *b, struct gfa_guest *g)
{
	struct gfa_free_report *rep;

	if (!b || !g) {
		if (b)
			pool_count_error(backing_pool(b), GFA_EFAULT);
		errno = EFAULT;
		return NULL;
	}
	/* g must be made of b's frames (its pfns are punched out of b's memfds) */
	if (g->b != b) {
		errno = EINVAL;
		return NULL;
	}
	/* every reporter's runs are in one registry: one wait serves them all */
	backing_set_move_wait(b, report_moved_wait);
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return NULL;
	rep->pool = backing_pool(b);
	rep->b = b;
	rep->g = g;
	rep->efd = -1;
	rep->done_tail = &rep->done_head;
	return rep;
}

int gfa_guest_report_flush(struct gfa_free_report *rep, int timeout_ms)
{
	struct timespec ts;
	int err = 0;

	if (!rep)
		return -EFAULT;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (timeout_ms > 0) {
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
	}
	pthread_mutex_lock(&reg.lock);
	/* queued completions count as finished: this thread reaps them below */
	while (rep->reqs > rep->nr_done && !err) {
		if (timeout_ms < 0)
			pthread_cond_wait(&reg.cond, &reg.lock);
		else if (pthread_cond_timedwait(&reg.cond, &reg.lock, &ts) == ETIMEDOUT &&
			 rep->reqs > rep->nr_done)
			err = -ETIMEDOUT;
	}
	pthread_mutex_unlock(&reg.lock);
	if (!err)
		gfa_guest_report_reap(rep);
	return err;
}

int gfa_guest_report_eventfd(struct gfa_free_report *rep)
{
	int fd;

	if (!rep)
		return -EFAULT;
	pthread_mutex_lock(&reg.lock);
	if (rep->efd < 0)
		rep->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	fd = rep->efd < 0 ? -errno : rep->efd;
	pthread_mutex_unlock(&reg.lock);
	return fd;
}

int gfa_guest_report_reap(struct gfa_free_report *rep)
{
	struct report_req *req, *next;
	uint64_t count, n = 0;

	if (!rep)
		return -EFAULT;
	pthread_mutex_lock(&reg.lock);
	if (rep->efd >= 0)
		(void)!read(rep->efd, &count, sizeof(count)); /* later ones write again */
	req = rep->done_head;
	rep->done_head = NULL;
	rep->done_tail = &rep->done_head;
	pthread_mutex_unlock(&reg.lock);
	for (; req; req = next, n++) {
		next = req->next_done;
		req->done(req->cookie, req->result);
		free(req);
	}
	pthread_mutex_lock(&reg.lock);
	GFA_BUG_ON(rep->reqs < n || rep->nr_done < n);
	rep->reqs -= n;
	rep->nr_done -= n;
	pthread_cond_broadcast(&reg.cond);
	pthread_mutex_unlock(&reg.lock);
	return (int)n;
}

int gfa_guest_report_stat(struct gfa_free_report *rep, struct gfa_guest_report_stat *st)
{
	if (!rep)
		return -EFAULT;
	if (!st)
		return pool_count_error(rep->pool, GFA_EFAULT);
	pthread_mutex_lock(&reg.lock);
	*st = rep->st;
	pthread_mutex_unlock(&reg.lock);
	return 0;
}

void gfa_guest_report_destroy(struct gfa_free_report *rep)
{
	if (!rep)
		return;
	gfa_guest_report_flush(rep, -1);
	for (unsigned int z = 0; z < GFA_MAX_ZONES; z++)
		gfa_release_destroy(rep->engine[z]);
	if (rep->efd >= 0)
		close(rep->efd);
	free(rep);
}
