/* SPDX-License-Identifier: MIT */
/* Guest-physical range lists from a guest's driver (balloon pages, reported free
 * ranges): the one shape check both callers make.  Not installed. */
#ifndef GFA_VMM_GPA_RANGES_H
#define GFA_VMM_GPA_RANGES_H
#include <gfa/vmm.h>

/* Order of two ranges by their start (qsort). */
int gpa_range_cmp(const void *a, const void *b);
/*
 * Every range 4 KiB aligned and not empty (-EINVAL), inside a guest of @size bytes
 * (-ERANGE), and no two overlapping (-ENOTUNIQ); -ENOMEM when no copy can be sorted.
 * 0 when the list is good.  Changes nothing.
 */
int gpa_ranges_check(const struct gfa_gpa_range *r, unsigned int n, uint64_t size);
#endif
