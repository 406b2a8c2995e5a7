// SPDX-License-Identifier: MIT
/*
 * Deferred init of a held pool's metadata, as the kernel defers struct page init.
 *
 * A held pool (pool_create_held(): a host pool client's, where every frame starts held
 * by the service's placeholder owner) would write a head per MAX_ORDER block and set
 * every pageblock's type at creation: metadata in proportion to the service's pool,
 * not to what the client leases (at a 64 GiB service, 181 page faults and 2-4 ms of
 * each attach here; at 1 TiB about 3,000).  Instead each section (one page of heads,
 * 256 pageblocks) is written when a call first names one of its frames:
 * - the calls that take a pfn init its section first (gfa_frame_lookup(), a free's
 *   frame_begin_free(), gfa_block_set_index(), zone_free_runs(), collapse's sources),
 *   so they answer exactly as if creation had written it;
 * - the walks over a zone step over a deferred section as what it is, held blocks:
 *   the scanners find no source or target there, the checker counts it whole,
 *   gfa_zone_stat counts its pageblocks MOVABLE and not its metadata.
 * A deferred section's pageblocks and heads read zero.  Its bit is cleared once, under
 * the zone lock and after the writes (release order), so a reader without the lock
 * that sees the bit clear sees the heads.
 */
#include <stdlib.h>
#include "allocator/internal.h"

/* a deferred pageblock reads as UNMOVABLE: never a compaction target, as held ones */
_Static_assert(GFA_MT_UNMOVABLE == 0, "zeroed pageblocks are UNMOVABLE");

/* A pageblock's share of the metadata a section's init writes: what gfa_zone_stat
 * leaves out for a deferred one (pool.c counts it at creation). */
#define PAGEBLOCK_META \
	(sizeof(struct gfa_frame) + sizeof(struct gfa_pageblock) + 2 * (GFA_PAGEBLOCK_FRAMES / 8))

int zone_deferred_setup(struct gfa_zone *z, uint64_t owner)
{
	uint64_t n = deferred_section(z, z->start_pfn + z->nr_frames - 1) + 1;

	z->deferred = calloc((n + 63) / 64, sizeof(uint64_t));
	if (!z->deferred)
		return -ENOMEM;
	for (uint64_t s = 0; s < n; s++)
		z->deferred[s / 64] |= 1ULL << (s % 64);
	z->held_owner = owner;
	z->nr_deferred_pageblocks = z->nr_pageblocks;
	return 0;
}

uint64_t zone_deferred_meta_bytes(const struct gfa_zone *z)
{
	uint64_t n = z->nr_deferred_pageblocks * PAGEBLOCK_META;

	/* a partial last pageblock's released bits are fewer than a whole one's */
	return n < z->metadata_bytes ? n : z->metadata_bytes;
}

/* Write section s of z: its pageblocks MOVABLE, its frames held in blocks. */
static void section_init(struct gfa_zone *z, uint64_t s)
{
	uint64_t base = ((z->start_pfn >> DEFERRED_SECTION_ORDER) + s) << DEFERRED_SECTION_ORDER;
	uint64_t from = base > z->start_pfn ? base : z->start_pfn;
	uint64_t to = base + DEFERRED_SECTION_FRAMES, end = z->start_pfn + z->nr_frames;
	uint64_t nr_pb = 0;

	GFA_BUG_ON(!zone_lock_held(z));
	if (to > end)
		to = end;
	for (uint64_t pfn = from; pfn < to; pfn += GFA_PAGEBLOCK_FRAMES, nr_pb++) {
		struct gfa_pageblock *pb = pfn_pageblock(z, pfn);

		GFA_BUG_ON(pb->mt || pb->flags || pb->nr_free || pb->nr_released);
		zone_pageblock_set_mt(z, pb, GFA_MT_MOVABLE);
	}
	zone_hold_range(z, from, to, z->held_owner);
	GFA_BUG_ON(nr_pb > z->nr_deferred_pageblocks);
	z->nr_deferred_pageblocks -= nr_pb;
	__atomic_fetch_and(&z->deferred[s / 64], ~(1ULL << (s % 64)), __ATOMIC_RELEASE);
}

/* The sections of z that [pfn, pfn + nr) touches, clipped to z: [*first, *last]. */
static bool sections_of(const struct gfa_zone *z, uint64_t pfn, uint64_t nr, uint64_t *first,
			uint64_t *last)
{
	uint64_t end = z->start_pfn + z->nr_frames;

	if (!nr || pfn >= end || pfn + nr <= z->start_pfn || pfn + nr < pfn)
		return false;
	*first = deferred_section(z, pfn > z->start_pfn ? pfn : z->start_pfn);
	*last = deferred_section(z, pfn + nr < end ? pfn + nr - 1 : end - 1);
	return true;
}

static bool range_deferred(const struct gfa_zone *z, uint64_t first, uint64_t last)
{
	for (uint64_t s = first; s <= last; s++)
		if ((__atomic_load_n(&z->deferred[s / 64], __ATOMIC_ACQUIRE) >> (s % 64)) & 1)
			return true;
	return false;
}

void zone_deferred_init_locked(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	uint64_t first, last;

	if (likely(!z->deferred) || !sections_of(z, pfn, nr, &first, &last))
		return;
	for (uint64_t s = first; s <= last; s++)
		if ((z->deferred[s / 64] >> (s % 64)) & 1)
			section_init(z, s);
}

void zone_deferred_init(struct gfa_zone *z, uint64_t pfn, uint64_t nr)
{
	uint64_t first, last;

	if (likely(!z->deferred) || !sections_of(z, pfn, nr, &first, &last) ||
	    !range_deferred(z, first, last))
		return;
	zone_lock(z);
	zone_deferred_init_locked(z, pfn, nr);
	zone_unlock(z);
}

bool zone_deferred_init_frame(struct gfa_zone *z, uint64_t pfn, bool locked)
{
	if (!pfn_deferred(z, pfn))
		return false;
	if (!locked)
		zone_lock(z);
	zone_deferred_init_locked(z, pfn, 1);
	if (!locked)
		zone_unlock(z);
	return true;
}
