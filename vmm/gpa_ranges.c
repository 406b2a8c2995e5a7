// SPDX-License-Identifier: MIT
/* vmm/gpa_ranges.c - the shape check of a guest's range lists (see gpa_ranges.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "vmm/gpa_ranges.h"

int gpa_range_cmp(const void *a, const void *b)
{
	const struct gfa_gpa_range *x = a, *y = b;

	return x->gpa < y->gpa ? -1 : x->gpa > y->gpa;
}

bool gpa_range_inside(const struct gfa_gpa_range *regions, unsigned int nr_regions, uint64_t gpa,
		      uint64_t len)
{
	unsigned int lo = 0, hi = nr_regions;

	/* the last region starting at or below gpa is the only one that can hold it */
	while (hi - lo > 1) {
		unsigned int mid = lo + (hi - lo) / 2;

		if (regions[mid].gpa <= gpa)
			lo = mid;
		else
			hi = mid;
	}
	return nr_regions && gpa >= regions[lo].gpa && gpa - regions[lo].gpa < regions[lo].len &&
	       len <= regions[lo].len - (gpa - regions[lo].gpa);
}

int gpa_ranges_check(const struct gfa_gpa_range *r, unsigned int n,
		     const struct gfa_gpa_range *regions, unsigned int nr_regions)
{
	struct gfa_gpa_range *s;
	int err = 0;

	for (unsigned int i = 0; i < n; i++) {
		if (!r[i].len || (r[i].gpa | r[i].len) & (GFA_FRAME_SIZE - 1))
			return -EINVAL;
		if (!gpa_range_inside(regions, nr_regions, r[i].gpa, r[i].len))
			return -ERANGE;
	}
	if (n < 2)
		return 0;
	s = malloc(n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	memcpy(s, r, n * sizeof(*s));
	qsort(s, n, sizeof(*s), gpa_range_cmp);
	for (unsigned int i = 1; i < n && !err; i++)
		if (s[i - 1].gpa + s[i - 1].len > s[i].gpa)
			err = -ENOTUNIQ;
	free(s);
	return err;
}
