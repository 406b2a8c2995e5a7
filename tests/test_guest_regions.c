/* Guest RAM as guest physical regions: vmm/guest_regions.c and the calls that take GPAs. */
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/host_util.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

static struct tu_host rhost_new(uint64_t bytes)
{
	const struct gfa_backing_config bc = { .populate = true };

	return tu_host_new(bytes, &bc, 0);
}

/* The host address of an absolute gpa, as a VMM computes it. */
static uint64_t *gpa_word(struct gfa_guest *g, uint64_t gpa)
{
	return (uint64_t *)((char *)gfa_guest_hva(g) + (gpa - gfa_guest_base(g)));
}

/* x86's layout in small: RAM below a hole, RAM above it, the last region no multiple of
 * 2 MiB. */
static const struct gfa_gpa_range holed[] = {
	{ 0, 6 * MiB },
	{ 16 * MiB, 5 * MiB + 4096 },
};

static struct gfa_guest *holed_guest(struct tu_host *h, unsigned int flags)
{
	struct gfa_guest_config cfg = { .regions = holed, .nr_regions = 2, .flags = flags };
	struct gfa_guest *g = gfa_guest_create(h->pool, h->b, &cfg);

	cr_assert_not_null(g, "create: %s", strerror(errno));
	return g;
}

Test(guest_regions, a_hole_is_never_backed_and_the_regions_are)
{
	struct tu_host h = rhost_new(64 * MiB);
	uint64_t free0 = tu_free_frames(h.pool), pfn;
	struct gfa_guest *g = holed_guest(&h, 0);
	struct gfa_guest_stat st;

	cr_assert_eq(gfa_guest_base(g), 0);
	cr_assert_eq(gfa_guest_size(g), 11 * MiB + 4096);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.mem_bytes, 11 * MiB + 4096);
	/* 3 ranges below the hole, 3 above (the last one whole): 12 MiB, not the 22 MiB span */
	cr_assert_eq(free0 - tu_free_frames(h.pool), (12 * MiB) >> GFA_FRAME_SHIFT);
	cr_assert_eq(st.huge_ranges, 6);
	cr_assert_eq(st.populated_bytes, 12 * MiB);
	for (uint64_t gpa = 0; gpa < 6 * MiB; gpa += MiB)
		*gpa_word(g, gpa) = gpa ^ 0x5a;
	for (uint64_t gpa = 16 * MiB; gpa < 21 * MiB + 4096; gpa += 4096)
		*gpa_word(g, gpa) = gpa ^ 0x5a;
	for (uint64_t gpa = 16 * MiB; gpa < 21 * MiB + 4096; gpa += 4096) {
		cr_assert_eq(gfa_guest_gpa_to_pfn(g, gpa, &pfn), 0);
		cr_assert_eq(*(uint64_t *)gfa_pfn_to_addr(h.pool, pfn), gpa ^ 0x5a);
	}
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 8 * MiB, &pfn), GFA_ERANGE, "in the hole");
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 21 * MiB + 4096, &pfn), GFA_ERANGE,
		     "past the last region, inside its backed range");
	gfa_guest_destroy(g);
	cr_assert_eq(tu_free_frames(h.pool), free0);
	tu_host_done(&h);
}

Test(guest_regions, balloon_and_pins_take_absolute_gpas_and_refuse_the_hole)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_guest *g = holed_guest(&h, 0);
	struct gfa_gpa_range hole = { 8 * MiB, 4096 }, seam = { 6 * MiB - 4096, 8192 };
	struct gfa_gpa_range tail = { 21 * MiB, 8192 }, above = { 17 * MiB, 2 * MiB };
	uint64_t err0 = VMS(h.pool, err_range), free0, pfn;
	struct gfa_guest_stat st;

	*gpa_word(g, 17 * MiB) = 0x77;
	cr_assert_eq(gfa_balloon_inflate(g, &hole, 1), GFA_ERANGE);
	cr_assert_eq(gfa_balloon_inflate(g, &seam, 1), GFA_ERANGE, "across a region's end");
	cr_assert_eq(gfa_balloon_inflate(g, &tail, 1), GFA_ERANGE, "past the last region");
	cr_assert_eq(gfa_balloon_deflate(g, &hole, 1), GFA_ERANGE);
	cr_assert_eq(gfa_guest_pin(g, 8 * MiB, 4096), GFA_ERANGE);
	cr_assert_eq(VMS(h.pool, err_range) - err0, 5);
	free0 = tu_free_frames(h.pool);
	cr_assert_eq(gfa_balloon_inflate(g, &above, 1), 512);
	cr_assert_eq(tu_free_frames(h.pool) - free0, 512);
	cr_assert_eq(*gpa_word(g, 17 * MiB), 0, "ballooned: reads zero");
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 17 * MiB, &pfn), GFA_ENOTFOUND);
	cr_assert_eq(gfa_balloon_deflate(g, &above, 1), 512);
	*gpa_word(g, 17 * MiB) = 0x78;
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 17 * MiB, &pfn), 0);
	cr_assert_eq(*(uint64_t *)gfa_pfn_to_addr(h.pool, pfn), 0x78);
	cr_assert_eq(gfa_guest_pin(g, 21 * MiB, 4096), 0, "the last page of RAM");
	cr_assert_eq(gfa_guest_pinned(g, 20 * MiB, MiB + 4096), 1);
	cr_assert_eq(gfa_guest_unpin(g, 21 * MiB, 4096), 0);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.ballooned_frames, 0);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest_regions, ram_above_a_base_is_laid_out_from_it)
{
	struct tu_host h = rhost_new(64 * MiB);
	/* ARM and RISC-V put RAM at 2 GiB; this one starts 4 KiB past a 2 MiB boundary */
	struct gfa_gpa_range ram = { 2 * GiB + 4096, 8 * MiB };
	struct gfa_guest_config cfg = { .regions = &ram, .nr_regions = 1 };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_gpa_range low = { 2 * GiB, 4096 }, page = { 2 * GiB + 3 * MiB, 4096 };
	uint64_t pfn;

	cr_assert_not_null(g, "create: %s", strerror(errno));
	cr_assert_eq(gfa_guest_base(g), 2 * GiB);
	cr_assert_eq(gfa_guest_size(g), 8 * MiB);
	*gpa_word(g, 2 * GiB + 3 * MiB) = 0x99;
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 2 * GiB + 3 * MiB, &pfn), 0);
	cr_assert_eq(*(uint64_t *)gfa_pfn_to_addr(h.pool, pfn), 0x99);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 3 * MiB, &pfn), GFA_ERANGE, "below the base");
	cr_assert_eq(gfa_balloon_inflate(g, &low, 1), GFA_ERANGE, "below the region");
	cr_assert_eq(gfa_balloon_inflate(g, &page, 1), 1);
	cr_assert_eq(*gpa_word(g, 2 * GiB + 3 * MiB), 0);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest_regions, touching_regions_are_one)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_gpa_range two[] = { { 0, 3 * MiB }, { 3 * MiB, 3 * MiB } };
	struct gfa_guest_config cfg = { .regions = two, .nr_regions = 2 };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_gpa_range seam = { 3 * MiB - 4096, 8192 };

	cr_assert_not_null(g, "create: %s", strerror(errno));
	cr_assert_eq(gfa_guest_size(g), 6 * MiB);
	cr_assert_eq(gfa_balloon_inflate(g, &seam, 1), 2, "a list may cross the seam");
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest_regions, a_size_no_multiple_of_2mib)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_guest_config cfg = { .mem_bytes = 5 * MiB + 12288 };
	struct gfa_guest *g = gfa_guest_create(h.pool, h.b, &cfg);
	struct gfa_gpa_range last = { 5 * MiB + 8192, 4096 }, past = { 5 * MiB + 12288, 4096 };
	struct gfa_guest_stat st;

	cr_assert_not_null(g, "create: %s", strerror(errno));
	cr_assert_eq(gfa_guest_size(g), 5 * MiB + 12288);
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.huge_ranges, 3, "the last range backed whole, by one block");
	cr_assert_eq(gfa_balloon_inflate(g, &past, 1), GFA_ERANGE);
	cr_assert_eq(gfa_balloon_inflate(g, &last, 1), 1);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest_regions, bad_region_lists_are_refused_and_counted)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_gpa_range unsorted[] = { { 8 * MiB, MiB }, { 0, MiB } };
	struct gfa_gpa_range overlap[] = { { 0, 4 * MiB }, { 3 * MiB, MiB } };
	struct gfa_gpa_range odd[] = { { 0, MiB + 1 } }, empty[] = { { 0, 0 } };
	struct gfa_gpa_range wrap[] = { { UINT64_MAX - MiB - 4095, MiB } };
	struct gfa_gpa_range many[GFA_GUEST_MAX_REGIONS + 1];
	struct {
		struct gfa_guest_config cfg;
		int err;
	} bad[] = {
		{ { .regions = unsorted, .nr_regions = 2 }, EINVAL },
		{ { .regions = overlap, .nr_regions = 2 }, EINVAL },
		{ { .regions = odd, .nr_regions = 1 }, EINVAL },
		{ { .regions = empty, .nr_regions = 1 }, EINVAL },
		{ { .regions = odd, .nr_regions = 0 }, EINVAL },
		{ { .regions = NULL, .nr_regions = 1 }, EINVAL },
		{ { .mem_bytes = MiB, .regions = overlap, .nr_regions = 1 }, EINVAL },
		{ { .regions = many, .nr_regions = GFA_GUEST_MAX_REGIONS + 1 }, EINVAL },
		{ { .regions = wrap, .nr_regions = 1 }, ERANGE },
		{ { .mem_bytes = MiB + 100 }, EINVAL },
		{ { .mem_bytes = 1ULL << 48 }, EINVAL }, /* 2^36 frames: no gfn fits 32 bits */
	};
	uint64_t free0 = tu_free_frames(h.pool), inval0 = VMS(h.pool, err_inval);

	for (unsigned int i = 0; i < GFA_GUEST_MAX_REGIONS + 1; i++)
		many[i] = (struct gfa_gpa_range){ i * 4 * MiB, MiB };
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		cr_assert_null(gfa_guest_create(h.pool, h.b, &bad[i].cfg), "case %u", i);
		cr_assert_eq(errno, bad[i].err, "case %u: errno %d", i, errno);
	}
	cr_assert_eq(VMS(h.pool, err_inval) - inval0, 10);
	cr_assert_eq(tu_free_frames(h.pool), free0, "no frame taken");
	tu_host_done(&h);
}

/* ---- lazy guests and reporting over regions ---- */

Test(guest_regions, a_lazy_guest_serves_touches_in_its_regions_only, .timeout = 60)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_guest *g;
	struct gfa_guest_stat st;
	struct gfa_guest_config cfg = { .regions = holed,
					.nr_regions = 2,
					.flags = GFA_GUEST_LAZY };

	g = gfa_guest_create(h.pool, h.b, &cfg);
	if (!g && (errno == EPERM || errno == ENOSYS || errno == ECANCELED))
		cr_skip_test("no userfaultfd here (%s)", strerror(errno));
	cr_assert_not_null(g, "create: %s", strerror(errno));
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.populated_bytes, 0);
	cr_assert_eq(st.lazy_bytes, 12 * MiB, "the hole is not lazy: it is nothing");
	*gpa_word(g, 1 * MiB) = 1;
	*gpa_word(g, 21 * MiB) = 2;
	gfa_guest_stat(g, &st);
	cr_assert_eq(st.lazy_faults, 2);
	cr_assert_eq(st.populated_bytes, 4 * MiB);
	cr_assert_eq(st.lazy_bytes, 8 * MiB);
	cr_assert_eq(*gpa_word(g, 21 * MiB), 2);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}

Test(guest_regions, free_page_reporting_above_the_hole, .timeout = 60)
{
	struct tu_host h = rhost_new(64 * MiB);
	struct gfa_guest *g = holed_guest(&h, 0);
	struct gfa_free_report *rep = gfa_guest_report_create(h.b, g);
	struct tu_rdone d = TU_RDONE_INIT;
	struct gfa_gpa_range r = { 18 * MiB, 2 * MiB }, hole = { 10 * MiB, 2 * MiB };
	struct gfa_guest_report_stat rs;
	uint64_t pfn;

	cr_assert_not_null(rep);
	for (uint64_t gpa = 16 * MiB; gpa < 21 * MiB; gpa += 4096)
		*gpa_word(g, gpa) = gpa;
	cr_assert_eq(gfa_guest_report_free(rep, &hole, 1, tu_rdone_fn, &d), GFA_ERANGE);
	cr_assert_eq(gfa_guest_report_free(rep, &r, 1, tu_rdone_fn, &d), 0);
	cr_assert_eq(gfa_guest_report_flush(rep, 10000), 0);
	cr_assert_eq(d.calls, 1);
	cr_assert_eq(d.result, 0);
	gfa_guest_report_stat(rep, &rs);
	cr_assert_eq(rs.bytes_released, 2 * MiB);
	cr_assert_eq(rs.err_range, 1);
	cr_assert_eq(*gpa_word(g, 18 * MiB), 0, "reported: reads zero");
	cr_assert_eq(*gpa_word(g, 17 * MiB), 17 * MiB, "the rest stays");
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 18 * MiB, &pfn), 0, "still the guest's");
	gfa_guest_report_destroy(rep);
	gfa_guest_destroy(g);
	tu_host_done(&h);
}
