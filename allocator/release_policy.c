// SPDX-License-Identifier: MIT
/*
 * Which free frames go back to the host, and when (the kernel's "percpu: partial chunk
 * depopulation" adapted to pageblocks: docs/decisions.md, entry 21).  Pure policy: the vmm layer
 * punches the ranges out of the memfds and reports back.
 *
 * State: a bit per frame says "free and released" (the host memory is gone; it reads
 * as zero when touched).  Only free frames carry the bit: taking a block off the free
 * lists clears it (release_clear), so `populated free = nr_free - nr_released`.  A block
 * isolated by compaction (a target, a capture) may come back unwritten: its released
 * frames keep a mark in their descriptors meanwhile (release_take) and get their bits
 * back (release_restore).  Frames being released or populated are INFLIGHT: off the
 * lists, never handed out.
 */
#include <errno.h>
#include <stdlib.h>
#include "allocator/internal.h"

#define RELEASE_MAX_LOCAL 512

int release_zone_init(struct gfa_zone *z)
{
	z->released = frame_bitmap_alloc(z->nr_frames);
	if (!z->released)
		return -ENOMEM;
	z->metadata_bytes += (z->nr_frames + 63) / 64 * sizeof(uint64_t);
	/* defaults: keep 1/32 of the zone (at least 4 MiB) populated, low at half */
	z->rp.high = z->nr_frames / 32 > 1024 ? z->nr_frames / 32 : 1024;
	z->rp.low = z->rp.high / 2;
	z->rp.min_empty_frac = 4;
	return 0;
}

/*
 * Set or clear the released bits of [pfn, pfn + nr), and the counts of the arenas that
 * hold them (the lock of each held, or the zone lock); returns how many changed.
 */
static uint64_t release_bits(struct gfa_zone *z, uint64_t pfn, uint64_t nr, bool set)
{
	uint64_t changed = 0;

	GFA_BUG_ON(pfn < z->start_pfn || nr > z->start_pfn + z->nr_frames - pfn);
	GFA_BUG_ON(!arena_lock_held(arena_of(z, pfn)));
	for (uint64_t p = pfn; p < pfn + nr; p++) {
		uint64_t i = p - z->start_pfn, bit = 1ULL << (i % 64);
		struct gfa_arena *a = arena_of(z, p);

		if (!!(z->released[i / 64] & bit) == set)
			continue;
		z->released[i / 64] ^= bit;
		/* the pageblock's count is its number of set bits: never below 0, and the
		 * arena's is the sum of its pageblocks' */
		GFA_BUG_ON(!set && (!pfn_pageblock(z, p)->nr_released || !a->nr_released));
		a->nr_pb_sidelined += set && !pfn_pageblock(z, p)->nr_released;
		pfn_pageblock(z, p)->nr_released += set ? 1 : (uint16_t)-1;
		a->nr_pb_sidelined -= !set && !pfn_pageblock(z, p)->nr_released;
		a->nr_released += set ? 1 : (uint64_t)-1;
		changed++;
	}
	if (set && changed) {
		/* released frames are clean: whoever marks frames hears of it (zone lock held) */
		gfa_released_fn fn = __atomic_load_n(&z->pool->released_fn, __ATOMIC_ACQUIRE);

		if (fn)
			fn(__atomic_load_n(&z->pool->released_ctx, __ATOMIC_RELAXED), pfn, nr);
	}
	return changed;
}

void zone_mark_released(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON(!zone_lock_held(z));
	release_bits(z, pfn, nr, true);
	z->c.vm.release_done += nr;
}

/* fn over the runs of [from, to) in one free block, split where the released bit changes
 * (a cached block is populated: released bits go when a block leaves the lists) */
static void free_block_runs(struct gfa_zone *z, uint64_t from, uint64_t to, bool cached,
			    gfa_free_run_fn fn, void *ctx)
{
	/* no released frame in the arena, or in the pageblock: one populated run */
	if (!arena_of(z, from)->nr_released ||
	    ((from ^ (to - 1)) < GFA_PAGEBLOCK_FRAMES && !pfn_pageblock(z, from)->nr_released))
		cached = true;
	while (from < to) {
		bool rel = !cached && release_test(z, from);
		uint64_t p = from + 1;

		while (p < to && !cached && release_test(z, p) == rel)
			p++;
		if (cached)
			p = to;
		fn(ctx, from, p - from, rel);
		from = p;
	}
}

int zone_free_runs(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, gfa_free_run_fn fn, void *ctx)
{
	struct gfa_zone *z;
	uint64_t end, p;

	if (!pool || !fn)
		return pool_err(pool, GFA_EFAULT);
	z = pool_pfn_zone(pool, pfn);
	/* nr against what is left of the zone: pfn + nr may wrap */
	if (!z || !nr || nr > z->start_pfn + z->nr_frames - pfn)
		return pool_err(pool, GFA_ERANGE);
	end = pfn + nr;
	zone_lock(z);
	zone_deferred_init_locked(z, pfn, nr);
	p = frame_find_head(pool, z, pfn);
	for (p = p == GFA_NIL ? pfn : p; p < end;) {
		struct gfa_frame *f = pfn_to_frame(pool, p);
		unsigned int st = fstate(f);
		uint64_t next = p + (1UL << f->order);

		/* a cached block and one a scrub holds are populated: their released bits
		 * went when they left the lists */
		if (st == GFA_FRAME_FREE || st == GFA_FRAME_PCP ||
		    (st == GFA_FRAME_INFLIGHT && (f->flags & FRAME_F_SCRUB)))
			free_block_runs(z, p > pfn ? p : pfn, next < end ? next : end,
					st != GFA_FRAME_FREE, fn, ctx);
		p = st ? next : p + 1;
	}
	zone_unlock(z);
	return 0;
}

static uint64_t release_count(const struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	uint64_t n = 0;

	for (uint64_t p = pfn; p < pfn + nr; p++)
		n += release_test(z, p);
	return n;
}

bool release_bits_any(const struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	for (uint64_t p = pfn; p < pfn + nr; p++)
		if (release_test(z, p))
			return true;
	return false;
}

void release_clear(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON(!arena_lock_held(arena_of(z, pfn)));
	/* (a block: in one arena) */
	if (!arena_of(z, pfn)->nr_released)
		return;
	for (uint64_t p = pfn; p < pfn + nr; p += GFA_PAGEBLOCK_FRAMES) {
		/* skip whole pageblocks without released frames */
		uint64_t end = (p | (GFA_PAGEBLOCK_FRAMES - 1)) + 1;

		if (end > pfn + nr)
			end = pfn + nr;
		if (pfn_pageblock(z, p)->nr_released)
			release_bits(z, p, end - p, false);
		p = end - GFA_PAGEBLOCK_FRAMES;
	}
}

void release_take(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON(!arena_lock_held(arena_of(z, pfn)));
	if (!arena_of(z, pfn)->nr_released)
		return;
	for (uint64_t p = pfn; p < pfn + nr; p++)
		if (release_test(z, p)) {
			pb_mark_tails(z, p);
			pfn_to_frame(z->pool, p)->flags |= FRAME_F_WAS_RELEASED;
		}
	release_clear(z, pfn, nr);
}

void release_restore(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON(!zone_lock_held(z));
	for (uint64_t p = pfn; p < pfn + nr; p++) {
		struct gfa_frame *f = pfn_to_frame(z->pool, p);

		if (f->flags & FRAME_F_WAS_RELEASED) {
			/* release_take() moved its bit to the mark: it has none now */
			GFA_BUG_ON(release_test(z, p));
			f->flags &= (uint8_t)~FRAME_F_WAS_RELEASED;
			release_bits(z, p, 1, true);
		}
	}
}

void release_forget(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	GFA_BUG_ON(!zone_lock_held(z));
	for (uint64_t p = pfn; p < pfn + nr; p++) {
		struct gfa_frame *f = pfn_to_frame(z->pool, p);

		/* only where set: a store to a tail the host never backed would back it */
		if (f->flags & FRAME_F_WAS_RELEASED)
			f->flags &= (uint8_t)~FRAME_F_WAS_RELEASED;
	}
}

int gfa_zone_set_release_policy(struct gfa_pool *pool, unsigned int zone,
				const struct gfa_release_policy *p)
{
	if (!pool || !p)
		return pool_err(pool, GFA_EFAULT);
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	if (p->low > p->high || !p->min_empty_frac || !GFA_RESERVED_ZERO(p))
		return pool_err(pool, GFA_EINVAL);
	zone_lock(&pool->zones[zone]);
	pool->zones[zone].rp = *p;
	zone_unlock(&pool->zones[zone]);
	return 0;
}

int gfa_zone_get_release_policy(struct gfa_pool *pool, unsigned int zone,
				struct gfa_release_policy *p)
{
	if (!pool || !p)
		return pool_err(pool, GFA_EFAULT);
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	zone_lock(&pool->zones[zone]);
	*p = pool->zones[zone].rp;
	zone_unlock(&pool->zones[zone]);
	return 0;
}

struct range_out {
	struct gfa_frame_range *out;
	unsigned int max, n;
};

/* Append [pfn, pfn + nr) to the output, merging with an adjacent last range. */
static bool range_add(struct range_out *ro, uint64_t pfn, uint64_t nr)
{
	struct gfa_frame_range *last = ro->n ? &ro->out[ro->n - 1] : NULL;

	GFA_BUG_ON(!nr || ro->n > ro->max);
	if (last && last->pfn == pfn + nr) {
		last->pfn = pfn;
		last->nr += nr;
		return true;
	}
	if (last && last->pfn + last->nr == pfn) {
		last->nr += nr;
		return true;
	}
	if (ro->n == ro->max)
		return false;
	ro->out[ro->n++] = (struct gfa_frame_range){ pfn, nr };
	return true;
}

/* Take a free block off the lists for the host path; returns its populated frames. */
static uint64_t isolate_for_host(struct gfa_zone *z, uint64_t pfn)
{
	struct gfa_frame *f = pfn_to_frame(z->pool, pfn);
	uint64_t nr = 1UL << f->order, had;

	GFA_BUG_ON(f->flags & FRAME_F_SCRUB); /* a scrub's block is back before it is free */
	buddy_list_del(z->pool, z, pfn);
	had = release_bits(z, pfn, nr, false);
	fstate_set(f, GFA_FRAME_INFLIGHT); /* FREE -> INFLIGHT, off the lists */
	z->nr_inflight += nr;
	GFA_BUG_ON(z->nr_inflight > z->nr_frames);
	return nr - had;
}

/*
 * A free block (off the lists) that mixes released and populated frames: split it so
 * only wholly populated pieces go to the host, highest first; wholly released pieces go
 * back on the free lists (at the tail: reused last).  Putting the whole block in flight
 * made a failed punch count its released frames populated, and a good one count frames
 * the host never got.  A piece the output has no room for stays free; pieces that stay
 * free are freed as buddies are, so they merge again with what stays beside them.
 * Returns populated frames isolated.
 */
static uint64_t isolate_populated(struct gfa_zone *z, uint64_t pfn, unsigned int order,
				  unsigned int mt, struct range_out *ro)
{
	uint64_t nr = 1UL << order, rel = release_count(z, pfn, nr);

	/* a frame is released or not: a mixed block has two halves to split into */
	GFA_BUG_ON(rel > nr || (rel && rel < nr && !order));
	if (rel && rel < nr)
		return isolate_populated(z, pfn + nr / 2, order - 1, mt, ro) +
		       isolate_populated(z, pfn, order - 1, mt, ro);
	if (rel == nr || !range_add(ro, pfn, nr)) {
		buddy_free_block(z, pfn, order);
		return 0;
	}
	buddy_list_add(z->pool, z, pfn, order, mt, false);
	return isolate_for_host(z, pfn);
}

/* Free blocks of one pageblock, in pfn order (zone lock held). */
static unsigned int pageblock_free_blocks(struct gfa_zone *z, uint64_t start, uint64_t *heads)
{
	uint64_t pfn = frame_find_head(z->pool, z, start), end = start + GFA_PAGEBLOCK_FRAMES;
	unsigned int n = 0;

	if (pfn == GFA_NIL)
		return 0;
	/* a free block larger than a pageblock that started earlier counts here too */
	if (pfn < start && fstate(pfn_to_frame(z->pool, pfn)) != GFA_FRAME_FREE)
		pfn += 1UL << pfn_to_frame(z->pool, pfn)->order;
	for (; pfn < end && pfn < z->start_pfn + z->nr_frames;
	     pfn += 1UL << pfn_to_frame(z->pool, pfn)->order)
		if (fstate(pfn_to_frame(z->pool, pfn)) == GFA_FRAME_FREE) {
			GFA_BUG_ON(n >= RELEASE_MAX_LOCAL); /* a pageblock's frames at most */
			heads[n++] = pfn;
		}
	return n;
}

static bool pageblock_eligible(struct gfa_zone *z, const struct gfa_pageblock *pb)
{
	unsigned int empty = pb->nr_free - pb->nr_released;

	GFA_BUG_ON(pb->nr_released > pb->nr_free); /* released frames are listed free */
	if (!empty)
		return false;
	/* as partial chunk depopulation: a quarter empty and populated, or released
	 * before and empty again */
	return empty >= GFA_PAGEBLOCK_FRAMES / z->rp.min_empty_frac || pb->nr_released;
}

/*
 * Release one pageblock's empty populated blocks, highest first.  Returns populated
 * frames isolated; stops when the output is full or the budget is spent.
 */
static uint64_t release_pageblock(struct gfa_zone *z, uint64_t start, uint64_t budget,
				  struct range_out *ro)
{
	uint64_t heads[RELEASE_MAX_LOCAL], got = 0;
	unsigned int n = pageblock_free_blocks(z, start, heads);

	while (n-- && got < budget) {
		struct gfa_frame *f = pfn_to_frame(z->pool, heads[n]);
		uint64_t nr = 1UL << f->order;

		if (ro->n == ro->max && !(ro->out[ro->n - 1].pfn == heads[n] + nr))
			break;
		uint64_t pop = nr - release_count(z, heads[n], nr);

		if (!pop)
			continue; /* already released: nothing to give back */
		if (pop > budget - got && nr > 1)
			continue; /* would eat into the reserve: smaller blocks may fit */
		if (pop < nr) {
			buddy_list_del(z->pool, z, heads[n]);
			got += isolate_populated(z, heads[n], f->order, f->mt, ro);
			continue;
		}
		got += isolate_for_host(z, heads[n]);
		range_add(ro, heads[n], nr);
	}
	return got;
}

/* Argument checks shared by the shrink and grow steps; locks the zone on success. */
static int host_step_begin(struct gfa_pool *pool, unsigned int zone,
			   const struct gfa_frame_range *out, unsigned int max_ranges,
			   struct gfa_zone **zp)
{
	if (!pool || (!out && max_ranges))
		return pool_err(pool, GFA_EFAULT);
	if (zone >= pool->nr_zones)
		return pool_err(pool, GFA_ERANGE);
	*zp = &pool->zones[zone];
	zone_lock(*zp);
	return 0;
}

int zone_release_take(struct gfa_pool *pool, unsigned int zone, struct gfa_frame_range *out,
		      unsigned int max_ranges, uint64_t max_frames)
{
	struct range_out ro = { out, max_ranges, 0 };
	struct gfa_zone *z;
	uint64_t populated, budget, got = 0;
	int err = host_step_begin(pool, zone, out, max_ranges, &z);

	if (err)
		return err;
	GFA_BUG_ON(zone_nr_released(z) > zone_nr_free(z));
	populated = zone_nr_free(z) - zone_nr_released(z);
	budget = populated > z->rp.high ? populated - z->rp.high : 0;
	if (budget > max_frames)
		budget = max_frames;
	/* frames in flight are off the lists: claimed frames stay where their owner gets them */
	if (budget > claim_unclaimed_listed(z))
		budget = claim_unclaimed_listed(z);
	/* fully free pageblocks first (whole 2 MiB punches), then eligible ones */
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t pb = z->nr_pageblocks; pb-- && got < budget && ro.n < ro.max;) {
			struct gfa_pageblock *b = &z->pageblocks[pb];
			bool whole = b->nr_free == GFA_PAGEBLOCK_FRAMES;

			if ((pass == 0) != whole || !pageblock_eligible(z, b))
				continue;
			got += release_pageblock(z, z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER),
						 budget - got, &ro);
		}
	}
	z->c.vm.release_isolated += got;
	zone_unlock(z);
	return (int)ro.n;
}

/*
 * The grow side's isolate_populated(): of a free block (off the lists), only wholly
 * released pieces go in flight, while the budget lasts; populated pieces, and pieces
 * the budget or the output has no room for, stay free and merge again.  Putting the
 * whole block in flight took its populated frames away from allocations for the
 * length of the populate, and a block larger than the budget went whole.  Returns
 * released frames isolated.
 */
static uint64_t isolate_released(struct gfa_zone *z, uint64_t pfn, unsigned int order,
				 unsigned int mt, struct range_out *ro, uint64_t budget)
{
	uint64_t nr = 1UL << order, rel = release_count(z, pfn, nr), got;

	GFA_BUG_ON(rel > nr || (rel && rel < nr && !order));
	if (order && rel && (rel < nr || nr > budget)) {
		got = isolate_released(z, pfn, order - 1, mt, ro, budget); /* lowest first */
		return got + isolate_released(z, pfn + nr / 2, order - 1, mt, ro, budget - got);
	}
	if (!rel || nr > budget || !range_add(ro, pfn, nr)) {
		buddy_free_block(z, pfn, order);
		return 0;
	}
	buddy_list_add(z->pool, z, pfn, order, mt, true);
	return nr - isolate_for_host(z, pfn);
}

int zone_populate_take(struct gfa_pool *pool, unsigned int zone, struct gfa_frame_range *out,
		       unsigned int max_ranges, uint64_t max_frames)
{
	struct range_out ro = { out, max_ranges, 0 };
	uint64_t heads[RELEASE_MAX_LOCAL], populated, budget, got = 0;
	struct gfa_zone *z;
	int err = host_step_begin(pool, zone, out, max_ranges, &z);

	if (err)
		return err;
	GFA_BUG_ON(zone_nr_released(z) > zone_nr_free(z) || z->rp.low > z->rp.high);
	populated = zone_nr_free(z) - zone_nr_released(z);
	budget = populated < z->rp.low ? z->rp.high - populated : 0;
	if (budget > max_frames)
		budget = max_frames;
	/* released frames in flight are off the lists too: leave the claimed ones */
	if (budget > claim_unclaimed_listed(z))
		budget = claim_unclaimed_listed(z);
	for (uint64_t pb = 0; pb < z->nr_pageblocks && got < budget && ro.n < ro.max; pb++) {
		unsigned int n;

		if (!z->pageblocks[pb].nr_released)
			continue;
		n = pageblock_free_blocks(z, z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER), heads);
		for (unsigned int i = 0; i < n && got < budget && ro.n < ro.max; i++) {
			struct gfa_frame *f = pfn_to_frame(z->pool, heads[i]);

			if (!release_bits_any(z, heads[i], 1UL << f->order))
				continue;
			buddy_list_del(z->pool, z, heads[i]);
			got += isolate_released(z, heads[i], f->order, f->mt, &ro, budget - got);
		}
	}
	z->c.vm.release_populated += got;
	zone_unlock(z);
	return (int)ro.n;
}

int zone_scrub_take(struct gfa_pool *pool, unsigned int zone, gfa_block_want_fn want, void *ctx,
		    struct gfa_frame_range *out, unsigned int max_ranges, uint64_t max_frames)
{
	struct range_out ro = { out, max_ranges, 0 };
	uint64_t heads[RELEASE_MAX_LOCAL], got = 0, room;
	struct gfa_zone *z;
	int err = host_step_begin(pool, zone, out, max_ranges, &z);

	if (err)
		return err;
	if (!want) {
		zone_unlock(z);
		return pool_err(pool, GFA_EFAULT);
	}
	/* take nothing while an allocation waits for the frames in work: they come back
	 * before any more leave.  Said apart from "nothing to take" (-EAGAIN, not an
	 * error): the waiter leaves as soon as it runs, and a scrubber that took 0 for
	 * done stopped with its dirty blocks still on the lists */
	if (z->scrub_waiters) {
		zone_unlock(z);
		return -EAGAIN;
	}
	/* keep the low reserve and the claimed frames on the lists, as page reporting
	 * keeps the low watermark */
	room = claim_unclaimed_listed(z);
	room = room > z->rp.low ? room - z->rp.low : 0;
	if (max_frames > room)
		max_frames = room;
	for (uint64_t pb = 0; pb < z->nr_pageblocks && got < max_frames && ro.n < ro.max; pb++) {
		unsigned int n;

		if (z->pageblocks[pb].nr_free == z->pageblocks[pb].nr_released)
			continue; /* nothing free and populated here */
		n = pageblock_free_blocks(z, z->start_pfn + (pb << GFA_PAGEBLOCK_ORDER), heads);
		for (unsigned int i = 0; i < n && got < max_frames && ro.n < ro.max; i++) {
			unsigned int order = pfn_to_frame(z->pool, heads[i])->order;

			if ((1UL << order) > max_frames - got ||
			    release_bits_any(z, heads[i], 1UL << order) ||
			    !want(ctx, heads[i], order))
				continue;
			got += isolate_for_host(z, heads[i]);
			/* still free frames: counted free and claimable (scrub_done) */
			pfn_to_frame(z->pool, heads[i])->flags |= FRAME_F_SCRUB;
			z->nr_scrub += 1UL << order;
			range_add(&ro, heads[i], 1UL << order);
		}
	}
	GFA_BUG_ON(z->nr_scrub > z->nr_inflight); /* a scrub's frames are in flight */
	zone_unlock(z);
	return (int)ro.n;
}

/* Are a pageblock-sized block's tails being given back by another done? */
static bool block_tails_going(struct gfa_zone *z, uint64_t pfn, unsigned int order)
{
	for (uint64_t q = pfn; order >= GFA_PAGEBLOCK_ORDER && q < pfn + (1UL << order);
	     q += GFA_PAGEBLOCK_FRAMES)
		if (pfn_pageblock(z, q)->flags & PB_TAILS_GOING)
			return true;
	return false;
}

/* Check every head in the range is INFLIGHT before touching anything. */
static bool range_inflight(struct gfa_zone *z, uint64_t pfn, uint64_t end)
{
	while (pfn < end) {
		struct gfa_frame *f = pfn_to_frame(z->pool, pfn);

		/* a block another done is finishing (its tails going) is not this one's */
		if (fstate(f) != GFA_FRAME_INFLIGHT || pfn + (1UL << f->order) > end ||
		    block_tails_going(z, pfn, f->order))
			return false;
		pfn += 1UL << f->order;
	}
	return true;
}

/* How an in-flight range comes back. */
enum host_outcome { HOST_RELEASED, HOST_RELEASE_FAILED, HOST_POPULATED, HOST_POPULATE_FAILED };

static int host_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, enum host_outcome how);

int zone_release_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, bool released)
{
	return host_done(pool, pfn, nr, released ? HOST_RELEASED : HOST_RELEASE_FAILED);
}

int zone_populate_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr)
{
	return host_done(pool, pfn, nr, HOST_POPULATED);
}

int zone_populate_failed(struct gfa_pool *pool, uint64_t pfn, uint64_t nr)
{
	return host_done(pool, pfn, nr, HOST_POPULATE_FAILED);
}

/* A block a scrub took comes back (zone lock held); returns its frames. */
static uint64_t scrub_end(struct gfa_zone *z, struct gfa_frame *f)
{
	uint64_t nr = 1UL << f->order;

	GFA_BUG_ON(z->nr_scrub < nr);
	f->flags &= (uint8_t)~FRAME_F_SCRUB;
	z->nr_scrub -= nr;
	return nr;
}

/*
 * Tail descriptors go back to the host when their pageblock is one free block again
 * and a background thread holds it in flight (a release, a populate, a scrub): the
 * block cannot be split nor its tails written until it is back on the lists, and the
 * madvise runs off every vCPU.  Under the zone lock, take the marks of the pageblocks
 * inside blocks of order 9 and up, as runs; the caller drops them unlocked
 * (frame_map_drop_tails()).  Returns runs filled.
 */
unsigned int zone_take_tail_marks(struct gfa_zone *z, uint64_t pfn, uint64_t end,
				  struct gfa_frame_range *runs)
{
	unsigned int n = 0;

	GFA_BUG_ON(!zone_lock_held(z));
	while (frame_map_drops(z->pool) && pfn < end) {
		struct gfa_frame *f = pfn_to_frame(z->pool, pfn);
		uint64_t next = pfn + (1UL << f->order);

		for (uint64_t q = pfn; f->order >= GFA_PAGEBLOCK_ORDER && q < next;
		     q += GFA_PAGEBLOCK_FRAMES) {
			struct gfa_pageblock *pb = pfn_pageblock(z, q);

			if (!(pb->flags & PB_TAILS))
				continue;
			if (n && runs[n - 1].pfn + runs[n - 1].nr == q)
				runs[n - 1].nr += GFA_PAGEBLOCK_FRAMES;
			else if (n < TAIL_DROP_RUNS)
				runs[n++] = (struct gfa_frame_range){ q, GFA_PAGEBLOCK_FRAMES };
			else
				continue; /* no room: stays marked, dropped another time */
			pb->flags = (uint8_t)((pb->flags & ~PB_TAILS) | PB_TAILS_GOING);
			GFA_BUG_ON(!arena_of(z, q)->nr_tail_pageblocks);
			arena_of(z, q)->nr_tail_pageblocks--;
		}
		pfn = next;
	}
	return n;
}

void zone_drop_tails(struct gfa_zone *z, const struct gfa_frame_range *runs, unsigned int n)
{
	int err[TAIL_DROP_RUNS];

	GFA_BUG_ON(!zone_lock_held(z) || n > TAIL_DROP_RUNS);
	/* the blocks stay the caller's, and PB_TAILS_GOING keeps other dones out */
	zone_unlock(z);
	for (unsigned int i = 0; i < n; i++)
		err[i] = frame_map_drop_tails(z->pool, runs[i].pfn, runs[i].nr);
	zone_lock(z);
	for (unsigned int i = 0; i < n; i++) {
		for (uint64_t q = runs[i].pfn; q < runs[i].pfn + runs[i].nr;
		     q += GFA_PAGEBLOCK_FRAMES) {
			struct gfa_pageblock *pb = pfn_pageblock(z, q);

			GFA_BUG_ON(!(pb->flags & PB_TAILS_GOING));
			pb->flags &= (uint8_t)~PB_TAILS_GOING;
			if (!err[i]) {
				z->c.vm.metadata_dropped++;
			} else if (!(pb->flags & PB_TAILS)) {
				pb->flags |= PB_TAILS; /* still backed: marked again */
				arena_of(z, q)->nr_tail_pageblocks++;
			}
		}
	}
}

static int host_done(struct gfa_pool *pool, uint64_t pfn, uint64_t nr, enum host_outcome how)
{
	struct gfa_zone *z;
	uint64_t end = pfn + nr, scrubbed = 0;
	struct gfa_frame_range runs[TAIL_DROP_RUNS];
	unsigned int nr_runs;
	int err = 0;

	if (!pool)
		return pool_err(pool, GFA_EFAULT);
	z = pool_pfn_zone(pool, pfn);
	/* nr against what is left of the zone: pfn + nr may wrap */
	if (!z || !nr || nr > z->start_pfn + z->nr_frames - pfn)
		return pool_err(pool, GFA_ERANGE);
	zone_lock(z);
	if (!range_inflight(z, pfn, end)) {
		err = GFA_EBUSY;
		goto out;
	}
	nr_runs = zone_take_tail_marks(z, pfn, end, runs);
	if (nr_runs)
		zone_drop_tails(z, runs, nr_runs);
	while (pfn < end) {
		struct gfa_frame *f = pfn_to_frame(pool, pfn);
		unsigned int order = f->order;

		/* range_inflight() checked every block: INFLIGHT heads, counted in flight */
		GFA_BUG_ON(fstate(f) != GFA_FRAME_INFLIGHT || z->nr_inflight < (1UL << order));
		z->nr_inflight -= 1UL << order;
		if (f->flags & FRAME_F_SCRUB)
			scrubbed += scrub_end(z, f);
		if (how == HOST_RELEASED || how == HOST_POPULATE_FAILED)
			release_bits(z, pfn, 1UL << order, true);
		if (how == HOST_RELEASED)
			z->c.vm.release_done += 1UL << order;
		else if (how == HOST_RELEASE_FAILED)
			z->c.vm.release_failed += 1UL << order;
		else if (how == HOST_POPULATE_FAILED)
			z->c.vm.release_populate_failed += 1UL << order;
		fstate_set(f, 0);
		buddy_free_block(z, pfn, order);
		pfn += 1UL << order;
	}
	GFA_BUG_ON(z->nr_scrub > z->nr_inflight);
	/* an allocation waits for these: they are on the lists again */
	if (scrubbed && z->scrub_waiters)
		pthread_cond_broadcast(&z->scrub_done);
out:
	zone_unlock(z);
	if (err)
		pool_count_err(pool, err);
	return err;
}
