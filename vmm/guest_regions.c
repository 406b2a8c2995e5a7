// SPDX-License-Identifier: MIT
/*
 * A guest's RAM as guest physical regions: x86 leaves the PCI hole below 4 GiB, ARM and
 * RISC-V put RAM at 2 GiB, and a VMM's -m need not be a multiple of 2 MiB.  The window
 * spans the regions in whole 2 MiB ranges from base; inside gfa a gfn counts from base,
 * so the blocks, moves and maps need not know.  A range no region touches is never
 * backed (its range says "every gfn ballooned out", and the absent bit keeps the balloon
 * and deflate away from it); one a region touches in part is backed whole, so a
 * region's edge costs at most one 2 MiB range of frames, never a huge mapping.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "vmm/guest_internal.h"
#include "vmm/gpa_ranges.h"

#define ALIGN_DOWN_RANGE(x) ((x) & ~(RANGE_BYTES - 1))
#define ALIGN_UP_RANGE(x)   ALIGN_DOWN_RANGE((x) + RANGE_BYTES - 1)

/* The config's regions, or its one region [0, mem_bytes) in *one. */
static const struct gfa_gpa_range *config_regions(const struct gfa_guest_config *cfg,
						  struct gfa_gpa_range *one, unsigned int *n)
{
	if (cfg->nr_regions) {
		*n = cfg->nr_regions;
		return cfg->regions;
	}
	*one = (struct gfa_gpa_range){ 0, cfg->mem_bytes };
	*n = 1;
	return one;
}

int guest_check_regions(const struct gfa_guest_config *cfg, uint64_t *span, uint64_t *backed)
{
	struct gfa_gpa_range one;
	const struct gfa_gpa_range *r;
	uint64_t last_hi = 0;
	unsigned int n;

	if (!cfg->regions != !cfg->nr_regions || (cfg->nr_regions && cfg->mem_bytes) ||
	    cfg->nr_regions > GFA_GUEST_MAX_REGIONS || cfg->pad0)
		return EINVAL;
	r = config_regions(cfg, &one, &n);
	*backed = 0;
	for (unsigned int i = 0; i < n; i++) {
		uint64_t lo, hi;

		if (!r[i].len || (r[i].gpa | r[i].len) & (GFA_FRAME_SIZE - 1))
			return EINVAL;
		if (r[i].gpa > UINT64_MAX - RANGE_BYTES ||
		    r[i].len > UINT64_MAX - RANGE_BYTES - r[i].gpa)
			return ERANGE; /* its end, rounded up, would wrap */
		if (i && r[i].gpa < r[i - 1].gpa + r[i - 1].len)
			return EINVAL; /* not sorted, or overlapping */
		/* 2 MiB ranges it touches that the one before did not */
		lo = ALIGN_DOWN_RANGE(r[i].gpa);
		hi = ALIGN_UP_RANGE(r[i].gpa + r[i].len);
		if (i && lo < last_hi)
			lo = last_hi;
		*backed += hi - lo;
		last_hi = hi;
	}
	*span = last_hi - ALIGN_DOWN_RANGE(r[0].gpa);
	return 0;
}

/* Mark the 2 MiB ranges [lo, hi) (byte offsets from base) present. */
static void regions_present(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	for (uint64_t r = lo / RANGE_BYTES; r < (hi + RANGE_BYTES - 1) / RANGE_BYTES; r++)
		g->absent[r / 64] &= ~(1ULL << (r % 64));
}

int guest_setup_regions(struct gfa_guest *g, const struct gfa_guest_config *cfg)
{
	struct gfa_gpa_range one;
	unsigned int n, k = 0;
	const struct gfa_gpa_range *r = config_regions(cfg, &one, &n);
	uint64_t end = ALIGN_UP_RANGE(r[n - 1].gpa + r[n - 1].len);

	g->base = ALIGN_DOWN_RANGE(r[0].gpa);
	g->size = end - g->base;
	g->nr_frames = g->size >> GFA_FRAME_SHIFT;
	g->nr_ranges = g->nr_frames / RANGE_FRAMES;
	g->regions = malloc(n * sizeof(*g->regions));
	g->absent = malloc((g->nr_ranges + 63) / 64 * sizeof(*g->absent));
	if (!g->regions || !g->absent)
		return -ENOMEM;
	memset(g->absent, 0xff, (g->nr_ranges + 63) / 64 * sizeof(*g->absent));
	for (unsigned int i = 0; i < n; i++) {
		/* touching regions are one: a range list may then cross their seam */
		if (k && g->regions[k - 1].gpa + g->regions[k - 1].len == r[i].gpa)
			g->regions[k - 1].len += r[i].len;
		else
			g->regions[k++] = r[i];
		g->ram_bytes += r[i].len;
		regions_present(g, r[i].gpa - g->base, r[i].gpa + r[i].len - g->base);
	}
	g->nr_regions = k;
	return 0;
}

int guest_map_holes(struct gfa_guest *g)
{
	for (uint64_t gfn = 0; gfn < g->nr_frames; gfn += RANGE_FRAMES) {
		const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;

		if (guest_range_absent(g, gfn) &&
		    mmap(guest_addr(g, gfn), RANGE_BYTES, PROT_NONE, flags, -1, 0) == MAP_FAILED)
			return -errno;
	}
	return 0;
}

void guest_free_regions(struct gfa_guest *g)
{
	free(g->regions);
	free(g->absent);
}

int guest_gpa_check(const struct gfa_guest *g, uint64_t *gpa, uint64_t len)
{
	if (!gpa_range_inside(g->regions, g->nr_regions, *gpa, len))
		return -ERANGE;
	*gpa -= g->base;
	return 0;
}

int guest_ranges_check(const struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	return gpa_ranges_check(r, n, g->regions, g->nr_regions);
}

uint64_t gfa_guest_base(const struct gfa_guest *g)
{
	return g ? g->base : 0;
}
