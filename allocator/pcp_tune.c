// SPDX-License-Identifier: MIT
/*
 * Per-vCPU caches: sizing and auto-tuning.  How large a zone's caches start (batch,
 * high_min, high_max: zone_batchsize() and the pcp high of mm/page_alloc.c), how high
 * moves with the traffic (Linux 6.7's auto-tuning: up on refills and when frees outrun
 * it, down on free_high and on the idle decay), and how many frames a free that ends
 * over high sends back (nr_pcp_free()).  Everything here runs inside the holder's call
 * or with the cache held remotely (allocator/pcp.h).
 */
#include <time.h>
#include "allocator/pcp.h"
#include "common/ktime.h"

static unsigned int rounddown_pow2(unsigned int x)
{
	unsigned int r = 1;

	while (r * 2 <= x)
		r *= 2;
	return r;
}

/*
 * zone_batchsize(): a quarter of a thousandth of the zone, at most 1 MiB worth, then
 * rounded to 2^n - 1 to avoid cache aliasing between batches (63 on large zones).
 * high_min is at least 4 batches; it also holds two pageblocks so order-9 blocks can
 * be cached at all (the kernel's high is in the thousands on large machines).
 */
void pcp_zone_init(struct gfa_pool *pool, struct gfa_zone *z)
{
	const struct gfa_pool_config *cfg = &pool->cfg;
	unsigned int batch =
		(unsigned int)((z->nr_frames >> 10) < 256 ? z->nr_frames >> 10 : 256) / 4;
	uint64_t high;

	if (batch < 1)
		batch = 1;
	batch = rounddown_pow2(batch + batch / 2) - 1;
	if (batch < 1)
		batch = 1;
	if (cfg->pcp_batch)
		batch = cfg->pcp_batch;
	high = batch << 2;
	if (high < 2 * GFA_PAGEBLOCK_FRAMES && z->nr_frames >= 32 * GFA_PAGEBLOCK_FRAMES)
		high = 2 * GFA_PAGEBLOCK_FRAMES;
	if (cfg->pcp_high)
		high = cfg->pcp_high;
	z->pcp_batch = (int)batch;
	z->pcp_high_min = (int)high;
	z->pcp_high_max = cfg->pcp_high_max ? (int)cfg->pcp_high_max : (int)(high * 8);
	/* high below a batch is the kernel's disabled pcp: no auto-tuning lifts it */
	if (z->pcp_high_max < z->pcp_high_min || high < batch)
		z->pcp_high_max = z->pcp_high_min;
}

void pcp_tune_init(struct gfa_pcp *pcp, const struct gfa_zone *z)
{
	const struct gfa_pool_config *cfg = &pcp->pool->cfg;

	pcp->batch = z->pcp_batch;
	pcp->high_min = pcp->high = z->pcp_high_min;
	pcp->high_max = z->pcp_high_max;
	pcp->free_count_cap = pcp->batch << PCP_BATCH_SCALE_MAX;
	pcp->free_high_threshold = cfg->pcp_free_high_old ?
					   (unsigned int)pcp->batch :
					   (unsigned int)(pcp->batch + pcp->high_min / 2);
	/* reachable by free_count, which stops at the cap (with high_min >= 1024 for
	 * order-9 caching, zones of 64-350 MiB were past it) */
	if (pcp->free_high_threshold > (unsigned int)pcp->free_count_cap)
		pcp->free_high_threshold = (unsigned int)pcp->free_count_cap;
	pcp->idle_since_ms = ktime_get_ms();
}

/*
 * Pageblock-order blocks stream through a vCPU's cache (a guest's huge pages): the
 * kernel's max(batch >> order, 2) would take the zone lock for every second one, and at
 * two threads lock hand-offs are most of the time.  Refill up to PCP_THP_REFILL of them
 * per lock section, no more than half of what high may grow to.
 */
static int pcp_thp_refill_count(const struct gfa_pcp *pcp)
{
	int n = pcp->high_max >> (GFA_PAGEBLOCK_ORDER + 1);

	return n < 2 ? 2 : n > PCP_THP_REFILL ? PCP_THP_REFILL : n;
}

/*
 * nr_pcp_alloc(): refill max(batch >> order, 2) blocks.  A cache that has to refill
 * could have kept more: high grows by a batch toward high_max on every refill, as
 * Linux 6.7's auto-tuning does (gfa_pool_drain_idle decays it again).
 */
int pcp_refill_count(struct gfa_pcp *pcp, unsigned int order)
{
	int batch = pcp->batch;

	if (pcp->high < batch)
		return 1; /* the kernel's "PCP disabled": one block at a time */
	/* saturating: high + batch may not fit an int when high_max is near INT_MAX */
	if (pcp->high_min != pcp->high_max && pcp->high < pcp->high_max)
		pcp->high = pcp->high_max - pcp->high > batch ? pcp->high + batch : pcp->high_max;
	if (order == GFA_PAGEBLOCK_ORDER)
		return pcp_thp_refill_count(pcp);
	if (batch > 1)
		batch = (batch >> order) < 2 ? 2 : batch >> order;
	return batch;
}

/*
 * The bookkeeping of free_unref_page_commit() (Linux 6.15) for a free of `order` after
 * which the cache holds count_after frames: the high-order streak, free_count (grows by
 * the block size, capped at batch << 5; halves on every allocation), and, when free_high
 * fires, high lowered toward high_min.  Returns whether free_high fires.
 */
bool pcp_free_high_update(struct gfa_pcp *pcp, unsigned int order, int count_after)
{
	bool free_high = pcp_free_high_fires(pcp, order, count_after);

	pcp->prev_free_high = order && order <= PCP_COSTLY_ORDER;
	if (pcp->free_count < pcp->free_count_cap)
		pcp->free_count += 1 << order;
	if (free_high)
		pcp->high = pcp->high - pcp->free_count_cap > pcp->high_min ?
				    pcp->high - pcp->free_count_cap :
				    pcp->high_min;
	return free_high;
}

/*
 * The rest of free_unref_page_commit() after a free of `order` joined the lists: how many
 * frames go back to the zone (0: none).  free_high flushes up to the cap; over high,
 * nr_pcp_high() of Linux 6.7 first lets high grow to a batch more than the frees lately
 * seen (free_count), up to high_max, then nr_pcp_free() frees
 * clamp(free_count, batch, high - batch).
 */
int pcp_free_nr(struct gfa_pcp *pcp, unsigned int order)
{
	int cap = pcp->free_count_cap, high = pcp->high, nr;
	bool free_high = pcp_free_high_update(pcp, order, pcp->count);

	if (free_high) {
		high = 0;
	} else if (pcp->count >= high && pcp->high_min != pcp->high_max) {
		int need = pcp->free_count + pcp->batch;

		if (high < need) {
			high = need < pcp->high_max ? need : pcp->high_max;
			pcp->high = high;
		}
	}
	if (pcp->count < high)
		return 0;
	if (free_high) {
		pcp->vs.pcp_free_high++;
		return pcp->count < cap ? pcp->count : cap;
	}
	if (high <= pcp->batch)
		return 1; /* (high == batch: the clamp below would free nothing) */
	/* the upper bound last: keep a batch on the list even when high < 2 * batch */
	nr = pcp->free_count;
	if (nr < pcp->batch)
		nr = pcp->batch;
	if (nr > high - pcp->batch)
		nr = high - pcp->batch;
	return nr;
}

/*
 * decay_pcp_high() of Linux 6.7, run by the kernel's vmstat worker every second: high
 * falls back toward high_min by an eighth a call (at most to a cap below count), and
 * what the cache holds above high goes back to the zone.  Returns frames returned.
 */
static int64_t pcp_decay_high(struct gfa_pcp *pcp)
{
	int high = pcp->high;

	if (high > pcp->high_min) {
		int keep = pcp->count - pcp->free_count_cap;

		high -= high >> 3;
		high = keep > high ? keep : high;
		high = high < pcp->high_max ? high : pcp->high_max;
		pcp->high = high > pcp->high_min ? high : pcp->high_min;
	}
	return pcp->count > pcp->high ? pcp_free_bulk(pcp, pcp->count - pcp->high, 0) : 0;
}

int64_t gfa_pool_drain_idle(struct gfa_pool *pool, unsigned int idle_ms)
{
	uint64_t now;
	int64_t n = 0;

	if (!pool)
		return GFA_EFAULT;
	pthread_mutex_lock(&pool->pcp_lock);
	pcp_remote_lock_zone(pool, -1);
	/* read under the lock: a concurrent caller's later stamp must not lie ahead of
	 * ours (now - idle_since wrapped to a huge idle time and drained active caches) */
	now = ktime_get_ms();
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next) {
		uint64_t ops = pcp_nr_alloc(pcp) + pcp_nr_free(pcp);

		if (ops != pcp->idle_seen_ops) {
			pcp->idle_seen_ops = ops;
			pcp->idle_since_ms = now;
		} else if (pcp->count && now - pcp->idle_since_ms >= idle_ms) {
			n += pcp_free_bulk(pcp, pcp->count, 0);
			pcp->vs.pcp_drain++;
			continue;
		}
		n += pcp_decay_high(pcp);
	}
	pcp_remote_unlock_zone(pool, -1);
	pthread_mutex_unlock(&pool->pcp_lock);
	return n;
}
