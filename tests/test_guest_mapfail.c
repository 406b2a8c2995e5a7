/*
 * guest_take's error path: the window cannot map a new block (mmap fails: the
 * vm.max_map_count limit, a small block on a hugetlb memfd) while compaction holds that
 * block isolated in its batch: guest_take's single gfa_free gets GFA_EBUSY and the block
 * is never freed.  mmap is interposed for the whole binary; it passes through unless armed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <gfa/vmm.h>
#include "tests/test_util.h"

#define MiB (1UL << 20)

/* TSan's runtime maps its shadow through mmap before dlsym can work: no interposer there */
#ifndef __SANITIZE_THREAD__
static atomic_int gmf_armed;
static atomic_bool gmf_d_in;
static struct gfa_pool *gmf_pool;
#define GMF_NR  4096UL       /* frames of the pool */
#define GMF_TOP (GMF_NR / 2) /* [GMF_TOP, GMF_NR) freed as compaction targets */
static pthread_t gmf_th;

/* another owner whose move takes a while (its vCPUs are slow to pause): 100 ms */
static int gmf_slow_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst,
			    unsigned int order)
{
	struct timespec ts = { 0, 100 * 1000 * 1000 };

	(void)ctx;
	(void)owner;
	(void)src;
	(void)dst;
	(void)order;
	atomic_store(&gmf_d_in, true);
	nanosleep(&ts, NULL);
	return -EAGAIN;
}
static const struct gfa_owner_ops gmf_slow_ops = { .migrate = gmf_slow_migrate };

static void *gmf_compact(void *arg)
{
	(void)arg;
	gfa_compact_zone(gmf_pool, 0, -1, GFA_COMPACT_SYNC);
	return NULL;
}

static void *_Atomic gmf_fail_anon_at; /* an anonymous MAP_FIXED mmap here fails once */
static void *_Atomic gmf_fail_2m_at;   /* a 2 MiB MAP_SHARED MAP_FIXED mmap here fails once */

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);

	if (!real)
		real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	if ((flags & MAP_ANONYMOUS) && (flags & MAP_FIXED) && addr &&
	    addr == atomic_load(&gmf_fail_anon_at)) {
		atomic_store(&gmf_fail_anon_at, NULL);
		errno = ENOMEM; /* as at vm.max_map_count */
		return MAP_FAILED;
	}
	if ((flags & MAP_SHARED) && (flags & MAP_FIXED) && addr && len == (2UL << 20) &&
	    addr == atomic_load(&gmf_fail_2m_at)) {
		atomic_store(&gmf_fail_2m_at, NULL);
		errno = ENOMEM; /* as at vm.max_map_count */
		return MAP_FAILED;
	}
	if ((flags & MAP_SHARED) && (flags & MAP_FIXED) && atomic_exchange(&gmf_armed, 0)) {
		struct gfa_frame_info fi = { 0 };

		/* compaction starts: its batch holds pfn 0 (slow owner) and pfn 1 (this block) */
		for (uint64_t p = GMF_TOP; p < GMF_NR; p++)
			gfa_free(gmf_pool, p, 0, 5);
		pthread_create(&gmf_th, NULL, gmf_compact, NULL);
		while (!atomic_load(&gmf_d_in) ||
		       gfa_frame_lookup(gmf_pool, (uint64_t)off >> GFA_FRAME_SHIFT, &fi) ||
		       fi.state != GFA_FRAME_ISOLATED)
			sched_yield();
		errno = ENOMEM; /* as at vm.max_map_count */
		return MAP_FAILED;
	}
	return real(addr, len, prot, flags, fd, off);
}

Test(guest_mapfail, failed_map_of_an_isolated_block_loses_no_frame, .timeout = 60)
{
	const uint64_t F = 5, D = 6, nr = GMF_NR;
	struct gfa_backing_config bc = { 0 }; /* the default zeroer: frames free at once */
	struct gfa_guest_config cfg = { .mem_bytes = 2 * MiB, .small_only = true, .id = 4321 };
	struct gfa_backing *b;
	struct gfa_frame_info fi;

	gmf_pool = tu_pool(nr);
	b = gfa_backing_create(gmf_pool, &bc);
	cr_assert_not_null(b);
	for (uint64_t i = 0; i < nr; i++)
		cr_assert_eq(gfa_alloc(gmf_pool, 0, 0, GFA_MT_MOVABLE, F, 0), (int64_t)i);
	cr_assert_eq(gfa_owner_register(gmf_pool, D, &gmf_slow_ops, NULL), 0);
	cr_assert_eq(gfa_free(gmf_pool, 0, 0, F), 0);
	cr_assert_eq(gfa_alloc(gmf_pool, 0, 0, GFA_MT_MOVABLE, D, 0), 0);
	cr_assert_eq(gfa_free(gmf_pool, 1, 0, F), 0); /* the guest's first block */
	atomic_store(&gmf_armed, 1);
	cr_assert_null(gfa_guest_create(gmf_pool, b, &cfg));
	cr_assert_eq(errno, ENOMEM);
	pthread_join(gmf_th, NULL);
	cr_assert_eq(gfa_frame_lookup(gmf_pool, 1, &fi), 0);
	cr_assert_neq(fi.state == GFA_FRAME_ALLOCATED && fi.owner == cfg.id, 1,
		      "pfn 1 is still allocated to guest %lu, which no longer exists",
		      (unsigned long)cfg.id);
	cr_assert_eq(gfa_owner_register(gmf_pool, D, NULL, NULL), 0);
	for (uint64_t p = 2; p < GMF_NR; p++) {
		cr_assert_eq(gfa_frame_lookup(gmf_pool, p, &fi), 0);
		if (fi.head_pfn == p && fi.state == GFA_FRAME_ALLOCATED)
			cr_assert_eq(gfa_free(gmf_pool, p, fi.order, fi.owner), 0);
	}
	cr_assert_eq(gfa_frame_lookup(gmf_pool, 0, &fi), 0);
	cr_assert_eq(gfa_free(gmf_pool, 0, 0, D), 0);
	cr_assert_eq(tu_free_frames(gmf_pool), GMF_NR, "frames lost: %lu free of %lu",
		     (unsigned long)tu_free_frames(gmf_pool), GMF_NR);
	gfa_backing_destroy(b);
	gfa_pool_destroy(gmf_pool);
}

/*
 * Destroy at the map limit: the PROT_NONE remap of the window fails, and so does the
 * reservation's munmap (an edge merged with a neighbour needs a split).  The fallback
 * unmapped the window, then the whole reservation again once VMAs were free: a mapping
 * another thread made in the hole meanwhile went with it.
 */
static char *_Atomic gdm_win;
static size_t gdm_size;
static atomic_int gdm_reserve_fails;
static void *_Atomic gdm_foreign;
static atomic_bool gdm_clobbered;

int munmap(void *addr, size_t len)
{
	static int (*real)(void *, size_t);
	char *w = atomic_load(&gdm_win), *a = addr, *f = atomic_load(&gdm_foreign);
	int ret;

	if (!real)
		real = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
	if (f && a <= f && f < a + len)
		atomic_store(&gdm_clobbered, true);
	if (w && a <= w && w + gdm_size <= a + len && len > gdm_size &&
	    atomic_exchange(&gdm_reserve_fails, 0)) {
		errno = ENOMEM; /* splitting the merged edge needs a VMA */
		return -1;
	}
	ret = real(addr, len);
	if (!ret && w && a == w && len == gdm_size) {
		/* another thread's mmap lands in the hole just left */
		void *p = mmap(w, 4096, PROT_READ,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

		if (p == w)
			atomic_store(&gdm_foreign, p);
		atomic_store(&gdm_win, NULL);
	}
	return ret;
}

Test(guest_mapfail, destroy_fallback_never_unmaps_what_another_thread_mapped_in_the_hole,
     .timeout = 60)
{
	struct gfa_pool *pool = tu_pool(4096);
	struct gfa_backing_config bc = { 0 }; /* the default zeroer: frames free at once */
	struct gfa_guest_config cfg = { .mem_bytes = 4 * MiB, .id = 777 };
	struct gfa_backing *b = gfa_backing_create(pool, &bc);
	struct gfa_guest *g;
	void *f;

	cr_assert_not_null(b);
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g);
	gdm_size = cfg.mem_bytes;
	atomic_store(&gdm_reserve_fails, 1);
	atomic_store(&gmf_fail_anon_at, gfa_guest_hva(g));
	atomic_store(&gdm_win, (char *)gfa_guest_hva(g));
	gfa_guest_destroy(g);
	atomic_store(&gdm_win, NULL);
	atomic_store(&gmf_fail_anon_at, NULL);
	f = atomic_load(&gdm_foreign);
	atomic_store(&gdm_foreign, NULL);
	cr_assert_not_null(f, "the fallback path was not taken");
	cr_assert_not(atomic_load(&gdm_clobbered),
		      "gfa_guest_destroy unmapped another thread's mapping at %p (in the hole "
		      "the window left)",
		      f);
	munmap(f, 4096);
	cr_assert_eq(tu_free_frames(pool), 4096);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}
/*
 * A collapse whose one-mapping remap of the range fails.  Once the pieces were mapped one
 * by one and the pool held one block while the guest kept the pieces' orders: its frees
 * then named blocks the pool did not have and the 2 MiB stayed allocated to a guest that
 * no longer existed.  Now the range is mapped at once or the collapse is refused: the
 * pieces stay, their data too, and every frame comes back at destroy.
 */
Test(guest_mapfail, collapse_whose_huge_remap_fails_loses_no_frame, .timeout = 60)
{
	const uint64_t F = 5, nr = 2048; /* 8 MiB: four pageblocks */
	struct gfa_pool *pool = tu_pool(nr);
	struct gfa_backing_config bc = { 0 }; /* the default zeroer: frames free at once */
	struct gfa_guest_config cfg = { .mem_bytes = 2 * MiB, .small_only = true, .id = 999 };
	struct gfa_backing *b = gfa_backing_create(pool, &bc);
	struct gfa_gpa_range one = { 4096, 4096 };
	struct gfa_guest *g;
	struct gfa_frame_info fi;
	uint64_t pfn, before;
	int n;

	cr_assert_not_null(b);
	for (uint64_t i = 0; i < nr; i++)
		cr_assert_eq(gfa_alloc(pool, 0, 0, GFA_MT_MOVABLE, F, 0), (int64_t)i);
	/* four order-7 holes whose buddies are taken: the guest gets four order-7 pieces */
	for (uint64_t base = 0; base < 1024; base += 256)
		for (uint64_t q = base; q < base + 128; q++)
			cr_assert_eq(gfa_free(pool, q, 0, F), 0);
	g = gfa_guest_create(pool, b, &cfg);
	cr_assert_not_null(g);
	memset(gfa_guest_hva(g), 0x5a, 2 * MiB);
	for (uint64_t q = 1024; q < 1536; q++) /* an empty pageblock for the new block */
		cr_assert_eq(gfa_free(pool, q, 0, F), 0);
	atomic_store(&gmf_fail_2m_at, gfa_guest_hva(g));
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 0, &before), 0);
	n = gfa_guest_collapse(g, 1);
	cr_assert_null(atomic_load(&gmf_fail_2m_at), "the huge remap was not attempted");
	/* the range is mapped at once or not at all: a failed mapping refuses the
	 * collapse, and every piece stays where the window maps it */
	cr_assert_eq(n, 0);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 0, &pfn), 0);
	cr_assert_eq(pfn, before, "piece 0 moved to %lu from %lu", (unsigned long)pfn,
		     (unsigned long)before);
	cr_assert_eq(gfa_frame_lookup(pool, pfn, &fi), 0);
	cr_assert_eq(fi.order, 7, "the piece is the order-7 block it was");
	for (uint64_t i = 0; i < 2 * MiB; i++)
		cr_assert_eq(((unsigned char *)gfa_guest_hva(g))[i], 0x5a, "byte %lu lost",
			     (unsigned long)i);
	/* balloon one page of it: the frame must leave the guest */
	cr_expect_eq(gfa_balloon_inflate(g, &one, 1), 1);
	cr_assert_eq(gfa_frame_lookup(pool, pfn + 1, &fi), 0);
	cr_assert_neq(fi.state == GFA_FRAME_ALLOCATED && fi.owner == cfg.id, 1,
		      "ballooned pfn %lu is still allocated to the guest (block %lu order %u)",
		      (unsigned long)(pfn + 1), (unsigned long)fi.head_pfn, fi.order);
	gfa_guest_destroy(g);
	for (uint64_t q = 1536; q < nr; q++)
		cr_assert_eq(gfa_free(pool, q, 0, F), 0);
	for (uint64_t base = 128; base < 1024; base += 256)
		for (uint64_t q = base; q < base + 128; q++)
			cr_assert_eq(gfa_free(pool, q, 0, F), 0);
	cr_assert_eq(tu_free_frames(pool), nr, "frames lost: %lu free of %lu",
		     (unsigned long)tu_free_frames(pool), (unsigned long)nr);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
}
#else
Test(guest_mapfail, failed_map_of_an_isolated_block_loses_no_frame)
{
	cr_skip_test("interposes mmap: not under ThreadSanitizer");
}

Test(guest_mapfail, destroy_fallback_never_unmaps_what_another_thread_mapped_in_the_hole)
{
	cr_skip_test("interposes munmap: not under ThreadSanitizer");
}

Test(guest_mapfail, collapse_whose_huge_remap_fails_loses_no_frame)
{
	cr_skip_test("interposes mmap: not under ThreadSanitizer");
}
#endif
