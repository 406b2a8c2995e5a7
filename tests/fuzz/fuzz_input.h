/* SPDX-License-Identifier: MIT */
/*
 * What the host pool fuzz targets share: the input read a byte at a time (0 once it
 * runs out, so every input is a whole program), and the check that stops at the
 * first disagreement with the model.
 */
#ifndef GFA_TESTS_FUZZ_INPUT_H
#define GFA_TESTS_FUZZ_INPUT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct fuzz_input {
	const uint8_t *in;
	size_t left;
};

static inline uint8_t fuzz_in8(struct fuzz_input *f)
{
	if (!f->left)
		return 0;
	f->left--;
	return *f->in++;
}

#define FUZZ_CHECK(target, cond, ...)                             \
	do {                                                      \
		if (!(cond)) {                                    \
			fprintf(stderr, target ": " __VA_ARGS__); \
			fprintf(stderr, "\n");                    \
			abort();                                  \
		}                                                 \
	} while (0)
#endif
