// SPDX-License-Identifier: MIT
/*
 * A file as .clang-format writes it: tests/test_check_api.c breaks one copy of it per
 * case and expects `make format-check` to fail on each.
 */
#include <stdint.h>

#define THING_MAX   64 /* things a table holds */
#define THING_SHIFT 12

struct thing {
	uint64_t start;
	unsigned int order;
};

static int thing_find(const struct thing *t, unsigned int n, uint64_t start)
{
	for (unsigned int i = 0; i < n; i++) {
		if (t[i].start == start)
			return (int)i;
	}
	return -1;
}

int thing_count(const struct thing *t, unsigned int n, uint64_t start, unsigned int order,
		unsigned int *found)
{
	int i = thing_find(t, n, start);

	if (i < 0 || t[i].order != order)
		return 0;
	switch (order) {
	case 0:
		*found = 1;
		break;
	default:
		*found = 1U << order;
		break;
	}
	return 1;
}
