// SPDX-License-Identifier: MIT
/*
 * The release engine's queue (vmm/release_internal.h): ranges submitted to it, plugs
 * that hold them back, and flushes that wait for everything submitted before them.
 */
#define _GNU_SOURCE
#include "vmm/release_internal.h"
#include "common/bug.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

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

int gfa_release_submit(struct gfa_release_engine *e, uint64_t offset, uint64_t len,
		       gfa_release_done_fn done, void *cookie)
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
	pthread_cond_signal(&e->work_cond); /* a plug must not hold us up */
	while (e->completed_seq < target && !ret) {
		if (timeout_ms < 0)
			pthread_cond_wait(&e->done_cond, &e->lock);
		else if (pthread_cond_timedwait(&e->done_cond, &e->lock, &deadline) == ETIMEDOUT)
			ret = e->completed_seq < target ? -ETIMEDOUT : 0;
	}
	GFA_BUG_ON(!e->flushers);
	e->flushers--;
	pthread_mutex_unlock(&e->lock);
	return ret;
}
