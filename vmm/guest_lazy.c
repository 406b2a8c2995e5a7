// SPDX-License-Identifier: MIT
/*
 * Lazy guests: RAM taken at first touch (include/gfa/vmm.h, GFA_GUEST_LAZY).
 *
 * The window starts as an anonymous placeholder registered with the guest's userfaultfd
 * in missing mode.  A first touch waits in the kernel; the guest's service thread
 * (vmm/uffd.c) takes a block from the faulting thread's own cache, zeroes or fills it
 * through the pool's mapping, maps the memfd over the placeholder with MAP_FIXED (as a
 * move does) and wakes the range.  UFFDIO_COPY would copy every byte and UFFDIO_CONTINUE
 * on shmem installs 4 KiB entries even over a huge folio; the remap keeps the 2 MiB
 * mapping the rest of gfa is built around (docs/decisions.md, entry 27).
 *
 * Everything here runs under g->lock, the service thread's fault included: a first touch
 * is a guest_take() like create's, serialised with the balloon, moves and collapse.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/backing_internal.h"
#include "vmm/guest_internal.h"
#include "allocator/layers.h"
#include "common/compiler.h"

#define LAZY_RECLAIM_TRIES 3
/* ranges a host pool client leases at a first touch it cannot serve: one round trip
 * for the next 16 MiB of touches */
#define LAZY_LEASE_RANGES  8
#define LAZY_SMALL_ORDER   3 /* the largest cached order below 9 */

struct lazy_vcpu {
	int tid;
	struct gfa_pcp *pcp;
	struct gfa_guest_vcpu_stat st;
};

static struct lazy_vcpu *lazy_vcpu_find(struct gfa_guest *g, int tid)
{
	for (unsigned int i = 0; i < g->nr_vcpus; i++)
		if (g->vcpus[i].tid == tid)
			return &g->vcpus[i];
	return NULL;
}

static bool gfn_unfilled(const struct gfa_guest *g, uint64_t gfn)
{
	return g->unfilled && (g->unfilled[gfn / 64] >> (gfn % 64) & 1);
}

/*
 * The placeholder is a shared mapping of a sparse memfd that never gets a page, not
 * anonymous memory: a missing fault on shmem is delivered before any page table is
 * installed (an anonymous one installs a PTE table first, so each first touch's remap
 * would free it and flush the TLB of every CPU the process runs on: 100 us a touch on
 * this machine class).
 */
int guest_placeholder(struct gfa_guest *g, uint64_t lo, uint64_t hi)
{
	void *at = guest_addr(g, lo);
	size_t len = (hi - lo) << GFA_FRAME_SHIFT;

	if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
		 g->placeholder_fd, (off_t)(lo << GFA_FRAME_SHIFT)) == MAP_FAILED)
		return -errno;
	/* unregistered, the placeholder would back the guest with pages of its own that
	 * gfa never sees: the caller maps the frames back */
	return uffd_register_missing(&g->uffd, at, len);
}

/*
 * Read the fill file over [gpa, gpa + len) into dst (which reads zero), from its first
 * data on: a block the snapshot has no data for is never read nor populated.  No
 * SEEK_HOLE: on tmpfs it walks every page to the next hole, to the end of a dense file.
 * 0 or -errno.
 */
static int lazy_fill_fd(struct gfa_guest *g, uint64_t gpa, char *dst, uint64_t len)
{
	const off_t base = (off_t)(g->lz.fill_off + gpa), end = base + (off_t)len;
	off_t at = lseek(g->lz.fill_fd, base, SEEK_DATA);

	if (at < 0)
		return errno == ENXIO ? 0 : -errno; /* ENXIO: no data after base */
	while (at < end) {
		ssize_t n = pread(g->lz.fill_fd, dst + (at - base), (size_t)(end - at), at);

		if (n <= 0)
			return n ? -errno : 0; /* 0: the file ends (the rest reads zero) */
		at += n;
	}
	return 0;
}

/* The fill source's contents of one run of unfilled gfns into the frames at pfn. */
static int lazy_fill_run(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, uint64_t nr)
{
	uint64_t gpa = guest_gfn_gpa(g, gfn), len = nr << GFA_FRAME_SHIFT;
	char *dst = gfa_pfn_to_addr(g->pool, pfn);

	if (!dst)
		return -EIO;
	if (g->lz.flags & GFA_LAZY_FILL_FD)
		return lazy_fill_fd(g, gpa, dst, len);
	return g->lz.fill(g->lz.fill_ctx, gpa, dst, len) ? -EIO : 0;
}

int guest_lazy_fill(struct gfa_guest *g, uint64_t gfn, uint64_t pfn, unsigned int order)
{
	uint64_t nr = 1ULL << order;

	for (uint64_t i = 0; i < nr;) {
		uint64_t run = 0;

		while (i + run < nr && gfn_unfilled(g, gfn + i + run))
			run++;
		if (run) {
			int err = lazy_fill_run(g, gfn + i, pfn + i, run);

			if (err)
				return -EIO;
			g->st.lazy_filled_bytes += run << GFA_FRAME_SHIFT;
		}
		i += run ? run : 1;
	}
	/* filled once: a page made lazy again comes back zeroed (the vmm.h contract) */
	for (uint64_t k = gfn; g->unfilled && k < gfn + nr; k++)
		g->unfilled[k / 64] &= ~(1ULL << (k % 64));
	return 0;
}

/* Every gfn of the aligned block of `order` at head is lazy (no frame, not refused). */
static bool lazy_block_free(const struct gfa_guest *g, uint64_t head, unsigned int order)
{
	const struct guest_range *r = gfn_range(g, head);

	if (!r->d)
		return r->pfn == NO_PFN;
	for (uint64_t k = head; k < head + (1ULL << order); k++)
		if (r->d->pfn[k % RANGE_FRAMES] != NO_PFN)
			return false;
	return true;
}

/* Take a block of `order` at head for thread v (NULL: unknown): its cache, else the
 * zone.  0 or -errno; *cached says the cache served it. */
static int lazy_take(struct gfa_guest *g, struct lazy_vcpu *v, uint64_t head, unsigned int order,
		     bool *cached)
{
	/* order 9 may compact (with capture); smaller ones are the fallback, and only the
	 * last resort, order 0, may */
	unsigned int flags = order && order < GFA_PAGEBLOCK_ORDER ? GFA_ALLOC_NOCOMPACT : 0;
	int err = GFA_ETHREAD;

	*cached = false;
	if (v && v->pcp) {
		err = guest_take(g, v->pcp, head, order, flags, true);
		*cached = !err;
	}
	/* the thread inside its own cache (it cannot be: it waits for us; a
	 * registration naming the wrong thread can) */
	if (err == GFA_ETHREAD)
		err = guest_take(g, NULL, head, order, flags, true);
	return err;
}

/* Serve a first touch of gfn: the largest free aligned block around it.  0 with the
 * block mapped (*head, *order), or -errno. */
static int lazy_serve(struct gfa_guest *g, struct lazy_vcpu *v, uint64_t gfn, uint64_t *head,
		      unsigned int *order)
{
	static const unsigned int orders[] = { GFA_PAGEBLOCK_ORDER, 3, 2, 1, 0 };
	int err = GFA_ENOMEM;

	for (unsigned int i = g->small_only ? 1 : 0; i < ARRAY_SIZE(orders); i++) {
		bool cached;

		*order = orders[i];
		*head = gfn & ~((1ULL << *order) - 1);
		if (!lazy_block_free(g, *head, *order))
			continue;
		err = lazy_take(g, v, *head, *order, &cached);
		if (err)
			continue;
		g->st.lazy_faults++;
		g->st.lazy_cache_faults += cached;
		g->st.lazy_huge_faults += *order == GFA_PAGEBLOCK_ORDER;
		if (v) {
			v->st.faults++;
			v->st.cache_faults += cached;
			v->st.huge_faults += *order == GFA_PAGEBLOCK_ORDER;
		}
		return 0;
	}
	return err;
}

/*
 * lazy_serve(), on a host pool client leasing first when its pool is short: the leases
 * land in the zone, where the vCPU's cache refills from.  A lease the service cannot
 * give leaves the touch to direct compaction and the reclaim hook, as on a short pool.
 */
static int lazy_serve_leased(struct gfa_guest *g, struct lazy_vcpu *v, uint64_t gfn, uint64_t *head,
			     unsigned int *order)
{
	const uint64_t frames = LAZY_LEASE_RANGES * RANGE_FRAMES;
	int err = lazy_serve(g, v, gfn, head, order);

	if (err != GFA_ENOMEM || !backing_leases(g->b))
		return err;
	/* a short lease still leases what it could: try with that */
	(void)backing_lease_want(g->b, g->zone, frames);
	g->st.lazy_leases++;
	err = lazy_serve(g, v, gfn, head, order);
	backing_lease_done(g->b, g->zone, frames);
	return err;
}

/* No frame for the touch at gfn: map the empty memfd there, so the access faults (a
 * vCPU's KVM_RUN: EFAULT; any other thread: SIGBUS) instead of waiting for good. */
static void lazy_refuse(struct gfa_guest *g, uint64_t gfn, int err)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;

	g->st.lazy_refused++;
	if (!atomic_flag_test_and_set(&said))
		fprintf(stderr,
			"gfa: lazy guest %lu: no frame for a first touch at gpa %#lx "
			"(%s), after direct compaction and the reclaim hook: the access faults "
			"(KVM_RUN fails with EFAULT, another thread gets SIGBUS)\n",
			(unsigned long)g->id, (unsigned long)guest_gfn_gpa(g, gfn), strerror(-err));
	/* should there be no VMA for it (vm.max_map_count), the touch faults again and is
	 * refused again: a loop of refusals, counted, that the VMM sees */
	(void)mmap(guest_addr(g, gfn), GFA_FRAME_SIZE, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_FIXED, g->refuse_fd, 0);
}

/* The service thread's missing-fault handler (struct guest_uffd.missing). */
static void guest_lazy_fault(void *ctx, uintptr_t addr, uint32_t tid)
{
	struct gfa_guest *g = ctx;
	uint64_t gfn = (addr - (uintptr_t)g->win) >> GFA_FRAME_SHIFT, head = gfn;
	unsigned int order = 0;
	int err = 0;

	if (addr < (uintptr_t)g->win || gfn >= g->nr_frames) {
		uffd_wake(&g->uffd, addr & ~(GFA_FRAME_SIZE - 1), GFA_FRAME_SIZE);
		return;
	}
	pthread_mutex_lock(&g->lock);
	for (unsigned int tries = 0; guest_pfn(g, gfn) == NO_PFN; tries++) {
		int64_t got;

		err = lazy_serve_leased(g, lazy_vcpu_find(g, (int)tid), gfn, &head, &order);
		if (!err || err != GFA_ENOMEM || !g->lz.reclaim || tries == LAZY_RECLAIM_TRIES)
			break;
		/* the hook may take other guests' locks (their balloons): not with ours */
		g->st.lazy_reclaims++;
		pthread_mutex_unlock(&g->lock);
		got = g->lz.reclaim(g->lz.reclaim_ctx, g, RANGE_FRAMES);
		pthread_mutex_lock(&g->lock);
		if (got <= 0)
			break;
	}
	if (err && guest_pfn(g, gfn) == NO_PFN) {
		lazy_refuse(g, gfn, err);
		head = gfn;
		order = 0;
	}
	pthread_mutex_unlock(&g->lock);
	/* (a touch of a range served meanwhile only needs its wake) */
	uffd_wake(&g->uffd, (uintptr_t)guest_addr(g, head), GFA_FRAME_SIZE << order);
}

int guest_lazy_init(struct gfa_guest *g, const struct gfa_guest_config *cfg)
{
	static const struct gfa_guest_lazy none = { .fill_fd = -1 };
	const struct gfa_guest_lazy *lz = cfg->lazy ? cfg->lazy : &none;
	int err;

	g->lz = *lz;
	g->lz.fill_fd = -1;
	if (!g->wp)
		return -g->st.wp_errno; /* no userfaultfd: no first touch to catch */
	if (lz->flags & GFA_LAZY_FILL_FD) {
		g->lz.fill_fd = fcntl(lz->fill_fd, F_DUPFD_CLOEXEC, 0);
		if (g->lz.fill_fd < 0)
			return -errno;
	}
	if (lz->fill || (lz->flags & GFA_LAZY_FILL_FD)) {
		size_t words = (g->nr_frames + 63) / 64;

		g->unfilled = malloc(words * sizeof(*g->unfilled));
		if (!g->unfilled)
			return -ENOMEM;
		memset(g->unfilled, 0xff, words * sizeof(*g->unfilled));
	}
	g->refuse_fd = memfd_create("gfa-refused", MFD_CLOEXEC);
	if (g->refuse_fd < 0)
		return -errno;
	g->placeholder_fd = memfd_create("gfa-lazy-placeholder", MFD_CLOEXEC);
	if (g->placeholder_fd < 0 || ftruncate(g->placeholder_fd, (off_t)g->size))
		return -errno;
	g->uffd.missing = guest_lazy_fault;
	g->uffd.missing_ctx = g;
	err = guest_placeholder(g, 0, g->nr_frames);
	if (!err)
		err = guest_map_holes(g); /* no touch there is ever served */
	return err ? err : uffd_start(&g->uffd);
}

void guest_lazy_stop(struct gfa_guest *g)
{
	uffd_stop(&g->uffd);
}

void guest_lazy_fini(struct gfa_guest *g)
{
	if (g->lz.fill_fd >= 0)
		close(g->lz.fill_fd);
	if (g->refuse_fd >= 0)
		close(g->refuse_fd);
	if (g->placeholder_fd >= 0)
		close(g->placeholder_fd);
	free(g->unfilled);
	free(g->vcpus);
}

int gfa_guest_vcpu_cache(struct gfa_guest *g, int tid, struct gfa_pcp *pcp)
{
	struct lazy_vcpu *v;
	int err = 0;

	if (!g)
		return GFA_EFAULT;
	if (!g->lazy || tid <= 0 ||
	    (pcp && (gfa_pcp_pool(pcp) != g->pool || gfa_pcp_zone(pcp) != (int)g->zone)))
		return pool_count_error(g->pool, GFA_EINVAL);
	pthread_mutex_lock(&g->lock);
	v = lazy_vcpu_find(g, tid);
	if (!pcp && !v) {
		err = -ENOENT;
	} else if (!pcp) {
		*v = g->vcpus[--g->nr_vcpus];
	} else if (v) {
		v->pcp = pcp;
	} else if (g->nr_vcpus == g->cap_vcpus) {
		unsigned int cap = g->cap_vcpus ? 2 * g->cap_vcpus : 8;
		struct lazy_vcpu *a = realloc(g->vcpus, cap * sizeof(*a));

		if (!a) {
			err = -ENOMEM;
		} else {
			g->vcpus = a;
			g->cap_vcpus = cap;
		}
	}
	if (!err && pcp && !v)
		g->vcpus[g->nr_vcpus++] = (struct lazy_vcpu){ .tid = tid, .pcp = pcp };
	pthread_mutex_unlock(&g->lock);
	return err;
}

int gfa_guest_vcpu_stat(struct gfa_guest *g, int tid, struct gfa_guest_vcpu_stat *st)
{
	struct lazy_vcpu *v;

	if (!g)
		return GFA_EFAULT;
	if (!st)
		return pool_count_error(g->pool, GFA_EFAULT);
	pthread_mutex_lock(&g->lock);
	v = lazy_vcpu_find(g, tid);
	if (v)
		*st = v->st;
	pthread_mutex_unlock(&g->lock);
	return v ? 0 : -ENOENT;
}

struct save_ctx {
	struct gfa_guest *g;
	int fd;
	uint64_t off, gfn, pfn; /* the block being written: its first gfn and pfn */
	int64_t written;
};

/* backing_runs over a block: its data runs go to the file, its holes stay holes. */
static void save_run(struct gfa_backing *b, uint64_t pfn, uint64_t nr, bool data, void *arg)
{
	struct save_ctx *c = arg;
	const char *src = gfa_pfn_to_addr(c->g->pool, pfn);
	uint64_t pos = c->off + ((c->gfn + (pfn - c->pfn)) << GFA_FRAME_SHIFT);
	uint64_t len = nr << GFA_FRAME_SHIFT;

	(void)b;
	if (!data || c->written < 0)
		return;
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pwrite(c->fd, src + done, len - done, (off_t)(pos + done));

		if (n <= 0) {
			c->written = n ? -errno : -EIO;
			return;
		}
		done += (uint64_t)n;
		c->written += n;
	}
}

int64_t gfa_guest_save(struct gfa_guest *g, int fd, uint64_t off)
{
	struct save_ctx c = { g, fd, 0, 0, 0, 0 };

	if (!g)
		return GFA_EFAULT;
	c.off = off + g->base; /* the file is laid out by absolute gpa */
	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&g->lock);
	/* sized first: a hole at the end reads zero too; truncated: an old snapshot's data
	 * over a page that is a hole now must go */
	if (ftruncate(fd, (off_t)off) || ftruncate(fd, (off_t)(c.off + g->size)))
		c.written = -errno;
	for (uint64_t gfn = 0; c.written >= 0 && gfn < g->nr_frames;
	     gfn += guest_order(g, gfn) == NOT_HEAD ? 1 : guest_block_frames(g, gfn)) {
		c.pfn = guest_pfn(g, gfn);
		if (c.pfn == NO_PFN || guest_order(g, gfn) == NOT_HEAD)
			continue;
		c.gfn = gfn;
		backing_runs(g->b, c.pfn, guest_block_frames(g, gfn), save_run, &c);
	}
	pthread_mutex_unlock(&g->lock);
	return c.written;
}
