/* SPDX-License-Identifier: MIT */
/*
 * common/bug.h - GFA_BUG_ON(cond): an invariant of gfa's own, stated next to the line
 * that relies on it (docs/decisions.md, entry 19).  Test and sanitizer builds define
 * GFA_DEBUG=1: a true cond prints file:line and the condition and aborts.  Release
 * builds compile it out: the condition is type-checked but never evaluated, so it may
 * name debug-only work without costing the hot paths anything.
 *
 * Never for bad input: a caller's mistake gets its errno (and an err_* count), not an
 * abort.  GFA_BUG_ON is for what no input can cause while gfa is correct.
 */
#ifndef GFA_COMMON_BUG_H
#define GFA_COMMON_BUG_H

#if defined(GFA_DEBUG) && GFA_DEBUG
#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((noreturn, cold)) void gfa_bug(const char *file, int line,
							   const char *cond)
{
	fprintf(stderr, "gfa: BUG at %s:%d: %s\n", file, line, cond);
	abort();
}
#define GFA_BUG_ON(cond)                                    \
	do {                                                \
		if (__builtin_expect(!!(cond), 0))          \
			gfa_bug(__FILE__, __LINE__, #cond); \
	} while (0)
#else
#define GFA_BUG_ON(cond) ((void)sizeof(!(cond)))
#endif

#endif /* GFA_COMMON_BUG_H */
