// SPDX-License-Identifier: MIT
/*
 * bench/moves, part 6: host memory.  A 512 MiB small_only guest on a fresh 768 MiB pool
 * touches 32 MiB, balloons out the rest, takes it back and collapses; the baseline is
 * a plain memfd mapping ballooned with madvise(MADV_REMOVE) per 4 KiB page.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "bench/moves/moves.h"

#define H_GUEST_BYTES (512 * MiB)
#define H_ZONE_BYTES  (768 * MiB)
#define H_TOUCH_BYTES (32 * MiB)
#define H_MAX_REPS    5

struct growth {
	int64_t created, touched, inflated, deflated, collapsed; /* allocated bytes */
	double inflate_ms, deflate_ms, collapse_ms;
	int ranges; /* collapsed */
};

static int64_t backed(int fd)
{
	int64_t v = gfa_memfd_allocated_bytes(fd);

	if (v < 0)
		bench_die("fstat on a memfd: %s", strerror((int)-v));
	return v;
}

static void touch(char *p, uint64_t bytes)
{
	for (uint64_t off = 0; off < bytes; off += GFA_FRAME_SIZE)
		((volatile char *)p)[off] = 1;
}

static double ms_since(uint64_t t0)
{
	return bench_sec_since(t0) * 1e3;
}

typedef int64_t (*balloon_fn)(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);

/* Inflate or deflate everything past the touched part, timed; must take every frame. */
static double h_balloon(balloon_fn fn, const char *name, struct gfa_guest *g)
{
	struct gfa_gpa_range r = { H_TOUCH_BYTES, H_GUEST_BYTES - H_TOUCH_BYTES };
	int64_t want = (int64_t)(r.len / GFA_FRAME_SIZE), n;
	uint64_t t0 = bench_now_ns();

	n = fn(g, &r, 1);
	if (n != want)
		bench_die("%s: %ld of %ld frames", name, (long)n, (long)want);
	return ms_since(t0);
}

/* The balloon round trip and the collapse on a guest the host backs only where touched. */
static void h_balloon_gfa(struct gfa_guest *g, int fd, struct growth *s)
{
	uint64_t t0;

	s->inflate_ms = h_balloon(gfa_balloon_inflate, "gfa_balloon_inflate", g);
	s->inflated = backed(fd);
	s->deflate_ms = h_balloon(gfa_balloon_deflate, "gfa_balloon_deflate", g);
	s->deflated = backed(fd);
	t0 = bench_now_ns();
	s->ranges = gfa_guest_collapse(g, H_GUEST_BYTES / RANGE_BYTES);
	s->collapse_ms = ms_since(t0);
	s->collapsed = backed(fd);
}

static void h_gfa(struct growth *s)
{
	struct gfa_guest_config gc = { .mem_bytes = H_GUEST_BYTES, .small_only = true };
	struct gfa_pool *pool = pool_create(H_ZONE_BYTES);
	struct gfa_backing *b = gfa_backing_create(pool, NULL);
	struct gfa_guest *g;
	int fd;

	if (!b)
		bench_die("gfa_backing_create: %s", strerror(errno));
	fd = gfa_backing_zone_fd(b, 0);
	g = guest_create(pool, b, &gc, false);
	s->created = backed(fd);
	touch(gfa_guest_hva(g), H_TOUCH_BYTES);
	s->touched = backed(fd);
	h_balloon_gfa(g, fd, s);
	gfa_guest_destroy(g);
	check_pool(pool, "after part 6");
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}

/* Inflate: each 4 KiB page past the touched part given back as the balloon asks for it. */
static double h_remove_pages(char *p)
{
	uint64_t t0 = bench_now_ns();

	for (uint64_t off = H_TOUCH_BYTES; off < H_GUEST_BYTES; off += GFA_FRAME_SIZE)
		if (madvise(p + off, GFA_FRAME_SIZE, MADV_REMOVE))
			bench_die("madvise(MADV_REMOVE): %s", strerror(errno));
	return ms_since(t0);
}

/* The same on a plain memfd: inflate punches each 4 KiB page, deflate does nothing
 * (a page comes back when the guest touches it). */
static void h_madvise(struct growth *s)
{
	int fd = memfd_create("moves-balloon", MFD_CLOEXEC);
	char *p;

	if (fd < 0 || ftruncate(fd, (off_t)H_GUEST_BYTES))
		bench_die("memfd: %s", strerror(errno));
	p = mmap(NULL, H_GUEST_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		bench_die("mmap: %s", strerror(errno));
	s->created = backed(fd);
	touch(p, H_TOUCH_BYTES);
	s->touched = backed(fd);
	s->inflate_ms = h_remove_pages(p);
	s->inflated = s->deflated = s->collapsed = backed(fd);
	munmap(p, H_GUEST_BYTES);
	close(fd);
}

static double growth_mib(const struct growth *s)
{
	return (double)(s->collapsed - s->touched) / (double)MiB;
}

/* The median growth, and the rep nearest to it (the median rep for an odd count). */
static const struct growth *h_median(const struct growth *v, int n, double *med)
{
	double d[H_MAX_REPS];
	int best = 0;

	for (int i = 0; i < n; i++)
		d[i] = growth_mib(&v[i]);
	*med = bench_stat_of(d, n).median;
	for (int i = 1; i < n; i++)
		if (fabs(growth_mib(&v[i]) - *med) < fabs(growth_mib(&v[best]) - *med))
			best = i;
	return &v[best];
}

/* (med by pointer: h_median sets it, and arguments are evaluated in no set order) */
static void h_print(const char *name, const struct growth *s, const double *med)
{
	printf("%-8s %8.1f %8.1f %9.1f %9.1f %10.1f %7.1f %10.1f %10.1f %11.1f %6d\n", name,
	       (double)s->created / MiB, (double)s->touched / MiB, (double)s->inflated / MiB,
	       (double)s->deflated / MiB, (double)s->collapsed / MiB, *med, s->inflate_ms,
	       s->deflate_ms, s->collapse_ms, s->ranges);
}

void bench_host(const struct bench_opts *o, double *gfa_mib, double *madv_mib)
{
	static struct growth g[H_MAX_REPS], m[H_MAX_REPS];
	int reps = o->reps < H_MAX_REPS ? o->reps : H_MAX_REPS;
	struct bench_load load;

	printf("\n## 6. host memory: a %lu MiB guest touches %lu MiB, balloons out the rest, "
	       "takes it back, collapses; MiB allocated in the memfd (st_blocks)\n",
	       (unsigned long)(H_GUEST_BYTES / MiB), (unsigned long)(H_TOUCH_BYTES / MiB));
	printf("# gfa: %lu MiB pool, backing with the defaults (not populated), small_only "
	       "guest, gfa_balloon_inflate + gfa_balloon_deflate of one range, "
	       "gfa_guest_collapse of every range, no host-return thread; madvise: plain "
	       "memfd MAP_SHARED, one madvise(MADV_REMOVE) per 4 KiB page (kvmtool's "
	       "balloon, with the advice that frees shmem), deflate = nothing; %d rep(s)\n",
	       (unsigned long)(H_ZONE_BYTES / MiB), reps);
	bench_load_begin(&load);
	for (int rep = 0; rep < reps; rep++) {
		h_gfa(&g[rep]);
		h_madvise(&m[rep]);
	}
	bench_print_load(&load, "part 6");
	printf("%-8s %8s %8s %9s %9s %10s %7s %10s %10s %11s %6s\n", "balloon", "created",
	       "touched", "inflated", "deflated", "collapsed", "growth", "inflate_ms", "deflate_ms",
	       "collapse_ms", "ranges");
	h_print("gfa", h_median(g, reps, gfa_mib), gfa_mib);
	h_print("madvise", h_median(m, reps, madv_mib), madv_mib);
	printf("# growth = collapsed - touched, the median over the reps; the other columns "
	       "are of the rep nearest to it\n");
}
