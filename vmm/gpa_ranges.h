/* SPDX-License-Identifier: MIT */
/* Guest-physical range lists from a guest's driver (balloon pages, reported free
 * ranges): the one shape check both callers make.  Not installed. */
#ifndef GFA_VMM_GPA_RANGES_H
#define GFA_VMM_GPA_RANGES_H
#include <stdbool.h>
#include <gfa/vmm.h>

/* Order of two ranges by their start (qsort). */
int gpa_range_cmp(const void *a, const void *b);
/* Does [gpa, gpa + len) (len > 0) lie inside one of the sorted, disjoint regions? */
bool gpa_range_inside(const struct gfa_gpa_range *regions, unsigned int nr_regions, uint64_t gpa,
		      uint64_t len);
/*
 * Every range 4 KiB aligned and not empty (-EINVAL), inside one of the sorted, disjoint
 * regions (-ERANGE), and no two overlapping (-ENOTUNIQ); -ENOMEM when no copy can be
 * sorted.  0 when the list is good.  Changes nothing.
 */
int gpa_ranges_check(const struct gfa_gpa_range *r, unsigned int n,
		     const struct gfa_gpa_range *regions, unsigned int nr_regions);
#endif
