// SPDX-License-Identifier: MIT
/*
 * Claims, after Xen's XENMEM_claim_pages: admit a VM before building it by reserving
 * free frames of a zone for it.  Checked in the zone path under the zone lock; caches
 * send every allocation of a zone with outstanding claims to the zone path (claims
 * change under pool->pcp_lock as well, which tells the zone's caches).
 */
#include "allocator/internal.h"

static int claim_find(struct gfa_zone *z, uint64_t owner)
{
	GFA_BUG_ON(z->nr_claims > GFA_MAX_CLAIMS);
	for (unsigned int i = 0; i < z->nr_claims; i++)
		if (z->claims[i].owner == owner)
			return (int)i;
	return -1;
}

/* The sum of z's claims, which z->claimed keeps (zone lock held).  Only GFA_BUG_ON
 * calls it: a release build compiles those out, so it is marked unused. */
static __attribute__((unused)) uint64_t claims_sum(const struct gfa_zone *z)
{
	uint64_t sum = 0;

	for (unsigned int i = 0; i < z->nr_claims; i++)
		sum += z->claims[i].frames;
	return sum;
}

/* (frames a scrub holds are free: an allocation short of frames waits for them) */
uint64_t claim_unclaimed_free(struct gfa_zone *z)
{
	uint64_t free = zone_nr_free(z) + z->nr_scrub;

	GFA_BUG_ON(!zone_lock_held(z));

	return free > z->claimed ? free - z->claimed : 0;
}

uint64_t claim_unclaimed_listed(struct gfa_zone *z)
{
	GFA_BUG_ON(!zone_lock_held(z));
	uint64_t free = zone_nr_free(z);

	return free > z->claimed ? free - z->claimed : 0;
}

bool claim_allows(struct gfa_zone *z, uint64_t owner, unsigned int order)
{
	uint64_t need = 1UL << order;
	int i;

	GFA_BUG_ON(!zone_lock_held(z));
	if (!__atomic_load_n(&z->nr_claims, __ATOMIC_RELAXED))
		return true;
	i = claim_find(z, owner);
	if (i >= 0 && z->claims[i].frames >= need)
		return true;
	/* beyond its claim an owner competes like everyone else */
	return claim_unclaimed_free(z) >= need - (i >= 0 ? z->claims[i].frames : 0);
}

/* what claim_consume() took from claim_watched's claim in this thread (direct
 * compaction runs in it too, and migrate ops that allocate for other owners) */
static __thread uint64_t claim_taken, claim_watched = UINT64_MAX, claim_taken_gen;

uint64_t claim_watched_gen(void)
{
	return claim_taken_gen;
}

void claim_consume(struct gfa_zone *z, uint64_t owner, unsigned int order)
{
	uint64_t take = 1UL << order;
	int i;

	GFA_BUG_ON(!zone_lock_held(z));
	if (!__atomic_load_n(&z->nr_claims, __ATOMIC_RELAXED) || (i = claim_find(z, owner)) < 0)
		return;
	if (take > z->claims[i].frames)
		take = z->claims[i].frames;
	GFA_BUG_ON(z->claimed < take); /* the zone's total is the sum of its claims */
	z->claims[i].frames -= take;
	z->claimed -= take;
	GFA_BUG_ON(claims_sum(z) != z->claimed);
	if (owner == claim_watched) {
		claim_taken += take;
		claim_taken_gen = z->claims[i].gen;
	}
}

uint64_t claim_watch(uint64_t owner, uint64_t *saved_taken)
{
	uint64_t saved = claim_watched;

	*saved_taken = claim_taken;
	claim_watched = owner;
	claim_taken = 0;
	return saved;
}

uint64_t claim_unwatch(uint64_t saved_owner, uint64_t saved_taken)
{
	uint64_t taken = claim_taken;

	claim_watched = saved_owner;
	claim_taken = saved_taken;
	return taken;
}

void claim_refund(struct gfa_zone *z, uint64_t owner, uint64_t frames, uint64_t gen)
{
	int i = frames ? claim_find(z, owner) : -1;

	GFA_BUG_ON(!zone_lock_held(z));
	/* a claim dropped meanwhile, or dropped and made again, is owed nothing */
	if (i < 0 || z->claims[i].gen != gen)
		return; /* dropped meanwhile: nothing is promised any more */
	z->claims[i].frames += frames;
	z->claimed += frames;
	GFA_BUG_ON(claims_sum(z) != z->claimed);
}

/* The zone of a claim call, or the argument error (counted). */
static int claim_zone(struct gfa_pool *pool, unsigned int zone, struct gfa_zone **zp)
{
	int err = !pool ? GFA_EFAULT : zone >= pool->nr_zones ? GFA_ERANGE : 0;

	if (err) {
		pool_count_err(pool, err);
		return err;
	}
	*zp = &pool->zones[zone];
	return 0;
}

/* Frames parked on the zone's caches (pcp_lock and the zone lock held). */
static uint64_t claim_cached_frames(struct gfa_pool *pool, struct gfa_zone *z)
{
	uint64_t blocks[GFA_NR_ORDERS] = { 0 }, frames = 0;

	pcp_stat_blocks_locked(pool, z->id, blocks);
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++)
		frames += blocks[o] << o;
	return frames;
}

/*
 * Add owner's claim.  -ENOSPC sets *drain_helps when the caches hold enough frames to
 * make up the difference (a full table, or too few frames even with them, does not).
 */
static int claim_try(struct gfa_pool *pool, struct gfa_zone *z, uint64_t owner, uint64_t nr_frames,
		     bool *drain_helps)
{
	int err = 0;

	*drain_helps = false;
	pthread_mutex_lock(&pool->pcp_lock);
	zone_lock(z);
	if (claim_find(z, owner) >= 0) {
		err = -EEXIST;
	} else if (z->nr_claims == GFA_MAX_CLAIMS) {
		err = -ENOSPC;
	} else if (nr_frames > claim_unclaimed_free(z)) {
		err = -ENOSPC;
		*drain_helps = nr_frames <= claim_unclaimed_free(z) + claim_cached_frames(pool, z);
	}
	if (!err) {
		z->claims[z->nr_claims].owner = owner;
		z->claims[z->nr_claims].frames = nr_frames;
		z->claims[z->nr_claims].gen = ++z->claim_gen;
		__atomic_store_n(&z->nr_claims, z->nr_claims + 1, __ATOMIC_RELAXED);
		z->claimed += nr_frames;
	}
	GFA_BUG_ON(claims_sum(z) != z->claimed);
	zone_unlock(z);
	pcp_claims_changed(z);
	pthread_mutex_unlock(&pool->pcp_lock);
	return err;
}

int gfa_zone_claim(struct gfa_pool *pool, unsigned int zone, uint64_t owner, uint64_t nr_frames)
{
	struct gfa_zone *z;
	bool drain_helps;
	int err = claim_zone(pool, zone, &z);

	if (err)
		return err;
	err = claim_try(pool, z, owner, nr_frames, &drain_helps);
	/* free frames parked in vCPU caches count too: give them back when they make the
	 * difference, try once more (a drain for a claim that fails anyway changed things) */
	if (err == -ENOSPC && drain_helps && gfa_pool_drain_all(pool, (int)zone) > 0)
		err = claim_try(pool, z, owner, nr_frames, &drain_helps);
	return err;
}

int64_t gfa_zone_unclaim(struct gfa_pool *pool, unsigned int zone, uint64_t owner)
{
	struct gfa_zone *z;
	int64_t left = -ENOENT;
	int i, err = claim_zone(pool, zone, &z);

	if (err)
		return err;
	pthread_mutex_lock(&pool->pcp_lock);
	zone_lock(z);
	i = claim_find(z, owner);
	if (i >= 0) {
		left = (int64_t)z->claims[i].frames;
		GFA_BUG_ON(z->claimed < z->claims[i].frames);
		z->claimed -= z->claims[i].frames;
		z->claims[i] = z->claims[z->nr_claims - 1];
		__atomic_store_n(&z->nr_claims, z->nr_claims - 1, __ATOMIC_RELAXED);
	}
	GFA_BUG_ON(claims_sum(z) != z->claimed);
	zone_unlock(z);
	pcp_claims_changed(z);
	pthread_mutex_unlock(&pool->pcp_lock);
	return left;
}

uint64_t gfa_zone_claimed(struct gfa_pool *pool, unsigned int zone)
{
	uint64_t n;

	if (!pool || zone >= pool->nr_zones)
		return 0;
	zone_lock(&pool->zones[zone]);
	n = pool->zones[zone].claimed;
	zone_unlock(&pool->zones[zone]);
	return n;
}

uint64_t zone_claim_left(struct gfa_pool *pool, unsigned int zone, uint64_t owner)
{
	struct gfa_zone *z;
	uint64_t left = 0;
	int i;

	if (!pool || zone >= pool->nr_zones)
		return 0;
	z = &pool->zones[zone];
	zone_lock(z);
	i = claim_find(z, owner);
	if (i >= 0)
		left = z->claims[i].frames;
	zone_unlock(z);
	return left;
}
