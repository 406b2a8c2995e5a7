/* SPDX-License-Identifier: MIT */
/*
 * The monotonic clock, as the kernel's ktime_get_ns(): the one copy of it for the
 * reference VMM, gfactl, the benchmarks and the tests (header-only, for the reason
 * common/strbuf.h gives).
 */
#ifndef GFA_KTIME_H
#define GFA_KTIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t ktime_get_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same clock in whole milliseconds. */
static inline uint64_t ktime_get_ms(void)
{
	return ktime_get_ns() / 1000000ull;
}

#endif /* GFA_KTIME_H */
