// SPDX-License-Identifier: MIT
/*
 * The release engine's punches (vmm/release_internal.h): planning them over a pass's
 * sorted ranges, their attempts and retries, completing the ranges they cover, and the
 * fault injection the tests configure.
 */
#define _GNU_SOURCE
#include "vmm/release_internal.h"
#include "common/bug.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>

/* True if this operation number falls in the configured failure window. */
int fault_hit(struct fault_state *fs)
{
	uint64_t n = ++fs->seen;
	uint32_t count = fs->f.count ? fs->f.count : 1;

	if (!fs->f.nth || n < fs->f.nth || n - fs->f.nth >= count)
		return 0;
	return fs->f.err;
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

int range_cmp(const void *a, const void *b)
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
struct punch *plan_next(struct gfa_release_engine *e)
{
	uint32_t i = e->cur_i, last = i;
	uint64_t start = e->cur_pos, limit, end;
	struct punch *p;

	if (i >= e->nranges || !e->nfree)
		return NULL;
	limit = start + e->max_punch;
	end = e->ranges[i]->off + e->ranges[i]->len;
	while (end < limit && last + 1 < e->nranges && e->ranges[last + 1]->off == end) {
		last++;
		end += e->ranges[last]->len;
		STAT_ADD(e, ranges_coalesced, 1);
	}
	if (end > limit)
		end = limit;

	p = &e->slots[e->free_slots[--e->nfree]];
	*p = (struct punch){ .off = start,
			     .len = end - start,
			     .first = i,
			     .last = last,
			     .method = e->method };
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

int punch_sync(struct gfa_release_engine *e, struct punch *p)
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
	return e->ring_ok && (m == METHOD_FALLOCATE ? e->ring_fallocate : e->ring_madvise);
}

/*
 * Where fallocate is unsupported on this file, punch through the mapping
 * instead, for this punch and every later one.
 */
static void maybe_switch_method(struct gfa_release_engine *e, struct punch *p, int res)
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
void punch_result(struct gfa_release_engine *e, struct punch *p, int res, bool was_sync)
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
