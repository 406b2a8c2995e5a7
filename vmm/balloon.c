// SPDX-License-Identifier: MIT
/*
 * The balloon: a virtio-balloon device model hands gfa guest-physical ranges the guest
 * gave up (inflate) or wants back (deflate).  Inflation frees the frames and kicks the
 * host-return thread; the calling thread never waits for the host.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "vmm/guest_internal.h"

static int cmp_range(const void *a, const void *b)
{
	const struct gfa_gpa_range *x = a, *y = b;

	return x->gpa < y->gpa ? -1 : x->gpa > y->gpa;
}

/* Shape checks shared by inflate and deflate: aligned, inside, pairwise disjoint. */
static int check_shape(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	struct gfa_gpa_range *s;
	int err = 0;

	if (!g || (!r && n))
		return -EFAULT;
	if (!n)
		return 0;
	for (unsigned int i = 0; i < n; i++) {
		if (!r[i].len || (r[i].gpa | r[i].len) & (GFA_FRAME_SIZE - 1))
			return -EINVAL;
		if (r[i].gpa >= g->size || r[i].len > g->size - r[i].gpa)
			return -ERANGE;
	}
	s = malloc(n * sizeof(*s) + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, r, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_range);
	for (unsigned int i = 1; i < n && !err; i++)
		if (s[i - 1].gpa + s[i - 1].len > s[i].gpa)
			err = -ENOTUNIQ;
	free(s);
	return err;
}

/* Every frame of every range backed (want_backed) or ballooned out (!want_backed)? */
static int check_state(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
		       bool want_backed)
{
	for (unsigned int i = 0; i < n; i++)
		for (uint64_t gfn = r[i].gpa >> GFA_FRAME_SHIFT;
		     gfn < (r[i].gpa + r[i].len) >> GFA_FRAME_SHIFT; gfn++)
			if ((g->pfn[gfn] != NO_PFN) != want_backed)
				return want_backed ? -EALREADY : -ENOENT;
	return 0;
}

/* The head gfn of the block covering gfn. */
static uint64_t block_head(struct gfa_guest *g, uint64_t gfn)
{
	while (g->order[gfn] == NOT_HEAD)
		gfn--;
	return gfn;
}

/* Split the block at head so that [lo, hi) is made of whole blocks. */
static void split_around(struct gfa_guest *g, uint64_t head, uint64_t lo, uint64_t hi)
{
	unsigned int order = g->order[head];
	uint64_t end = head + (1UL << order);

	if (head >= lo && end <= hi)
		return;
	/* order-0 pieces: simple, and a balloon page is 4 KiB anyway */
	/* lock kept: a mover only tries it (guest_migrate), refuses and puts back */
	while (gfa_block_split(g->pool, g->pfn[head], order, g->id, 0) == GFA_EBUSY)
		sched_yield();
	for (uint64_t k = head; k < end; k++)
		g->order[k] = 0;
}

/* The guest window over [lo, hi) reads zero and maps no frame any more. */
static void unmap_window(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	if (hi > lo)
		mmap(g->win + (lo << GFA_FRAME_SHIFT), (hi - lo) << GFA_FRAME_SHIFT,
		     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		     -1, 0);
}

static uint64_t inflate_range(struct gfa_guest *g, const struct gfa_gpa_range *r)
{
	uint64_t lo = r->gpa >> GFA_FRAME_SHIFT, hi = (r->gpa + r->len) >> GFA_FRAME_SHIFT, taken = 0;

	split_around(g, block_head(g, lo), lo, hi);
	split_around(g, block_head(g, hi - 1), lo, hi);
	/*
	 * The guest reads zero there from now on; it owns no frame behind it.  Unmapped
	 * before the frames are freed: a frame freed first could be another owner's
	 * while this guest's window still maps it.
	 */
	unmap_window(g, lo, hi);
	for (uint64_t gfn = lo; gfn < hi;) {
		uint64_t size = 1UL << g->order[gfn];

		guest_release_block(g, gfn);
		taken += size;
		gfn += size;
	}
	return taken;
}

int64_t gfa_balloon_inflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	int64_t taken = 0;
	int err = check_shape(g, r, n);

	if (err)
		return err;
	struct gfa_gpa_range *m = malloc(n * sizeof(*m) + 1);
	unsigned int k = 0;

	if (!m)
		return -ENOMEM;
	/* virtio-balloon hands over pages: merge adjacent ones into runs (one split and one
	 * remap per run, not per page) */
	memcpy(m, r, n * sizeof(*m));
	qsort(m, n, sizeof(*m), cmp_range);
	for (unsigned int i = 0; i < n; i++) {
		if (k && m[k - 1].gpa + m[k - 1].len == m[i].gpa)
			m[k - 1].len += m[i].len;
		else
			m[k++] = m[i];
	}
	pthread_mutex_lock(&g->lock);
	err = check_state(g, m, k, true);
	for (unsigned int i = 0; i < k && !err; i++)
		taken += (int64_t)inflate_range(g, &m[i]);
	free(m);
	if (!err)
		g->st.ballooned_frames += (uint64_t)taken;
	pthread_mutex_unlock(&g->lock);
	if (err)
		return err;
	gfa_backing_kick_host_return(g->b);
	return taken;
}

/* Back [lo, hi) with the largest aligned blocks; on failure undo and say so. */
static int deflate_range(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	for (uint64_t gfn = lo; gfn < hi;) {
		unsigned int order = GFA_PAGEBLOCK_ORDER;
		int err;

		while (order > 0 && ((gfn & ((1UL << order) - 1)) || gfn + (1UL << order) > hi))
			order--;
		/* largest first; only the last resort (order 0) may compact */
		while ((err = guest_take(g, NULL, gfn, order, order ? GFA_ALLOC_NOCOMPACT : 0)) && order)
			order--;
		if (err) {
			unmap_window(g, lo, gfn);       /* before the frees, as in inflate */
			for (uint64_t k = lo; k < gfn; k++)
				if (g->order[k] != NOT_HEAD && g->pfn[k] != NO_PFN)
					guest_release_block(g, k);
			return err;
		}
		gfn += 1UL << order;
	}
	return 0;
}

int64_t gfa_balloon_deflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n)
{
	int64_t given = 0;
	unsigned int done = 0;
	int err = check_shape(g, r, n);

	if (err)
		return err;
	pthread_mutex_lock(&g->lock);
	err = check_state(g, r, n, false);
	for (; done < n && !err; done++) {
		uint64_t lo = r[done].gpa >> GFA_FRAME_SHIFT, hi = lo + (r[done].len >> GFA_FRAME_SHIFT);

		err = deflate_range(g, lo, hi);
		if (!err)
			given += (int64_t)(hi - lo);
	}
	if (err) {
		/* all or nothing: balloon the ranges that were deflated again */
		for (unsigned int i = 0; i + 1 < done; i++)
			inflate_range(g, &r[i]);
		given = 0;
	}
	g->st.ballooned_frames -= (uint64_t)given;
	pthread_mutex_unlock(&g->lock);
	return err ? err : given;
}
