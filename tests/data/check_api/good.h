/* SPDX-License-Identifier: MIT */
/* A header that keeps every convention tools/check_api.py checks. */
#define GFA_VERSION_MAJOR 0
#define GFA_VERSION_MINOR 3
#define GFA_EFAULT (-EFAULT)

struct gfa_thing;

struct gfa_thing_stat {
	unsigned long nr;
	uint64_t reserved[4];     /* zero: room to grow */
};

/**
 * gfa_thing_stat() - a thing's counters
 * @t: the thing
 * @st: gets them
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_thing_stat(struct gfa_thing *t, struct gfa_thing_stat *st);

/**
 * gfa_thing_free() - free a thing
 * @t: the thing; NULL is a no-op
 *
 * Context: any thread.
 */
void gfa_thing_free(struct gfa_thing *t);
