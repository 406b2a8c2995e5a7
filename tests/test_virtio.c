/*
 * PCI bus and virtio-balloon, driven as a guest's driver would: the test finds the
 * device through configuration space, sets up split virtqueues in the guest's RAM and
 * kicks them through port IO (gfa_rv_pci_io, as a vCPU's exit handler calls it).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"

#define MiB      (1UL << 20)
#define IRQ      11
#define RING_GPA (1 * MiB) /* rings at 1 MiB + q * 64 KiB */
#define BUF_GPA  (2 * MiB) /* buffers from 2 MiB */
#define QNUM     128

/* ---- the driver side ---- */

struct tvq {
	uint16_t num, avail_idx, used_seen, next_desc;
	uint64_t desc, avail, used;
};

struct vdrv {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr;
	struct gfa_guest *g;
	uint8_t *ram;
	struct gfa_rv_pci *pci;
	struct gfa_rv_balloon *bal;
	int slot;
	uint16_t io;
	struct tvq vq[4];
	unsigned int nvq;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int level;
	unsigned int raises;
	/* the driver is the guest's "vCPU": held while it touches RAM, taken by the pause op */
	pthread_mutex_t vcpu;
};

static void drv_irq(void *ctx, unsigned int irq, int level)
{
	struct vdrv *d = ctx;

	cr_assert_eq(irq, IRQ);
	pthread_mutex_lock(&d->lock);
	d->level = level;
	d->raises += level;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static uint32_t pio_in(struct vdrv *d, uint16_t port, unsigned int size)
{
	uint32_t v = 0;

	cr_assert_eq(gfa_rv_pci_io(d->pci, port, &v, size, false), 0, "in %#x", port);
	return v;
}

static void pio_out(struct vdrv *d, uint16_t port, uint32_t v, unsigned int size)
{
	cr_assert_eq(gfa_rv_pci_io(d->pci, port, &v, size, true), 0, "out %#x", port);
}

static uint32_t cfg_in(struct vdrv *d, unsigned int slot, unsigned int off, unsigned int size)
{
	pio_out(d, 0xcf8, 0x80000000u | slot << 11 | (off & 0xfc), 4);
	return pio_in(d, (uint16_t)(0xcfc + (off & 3)), size);
}

static void cfg_out(struct vdrv *d, unsigned int slot, unsigned int off, uint32_t v,
		    unsigned int size)
{
	pio_out(d, 0xcf8, 0x80000000u | slot << 11 | (off & 0xfc), 4);
	pio_out(d, (uint16_t)(0xcfc + (off & 3)), v, size);
}

/* Find the balloon as Linux's PCI scan and virtio_pci's legacy probe would. */
static void drv_find(struct vdrv *d)
{
	d->slot = -1;
	for (unsigned int s = 0; s < 32 && d->slot < 0; s++)
		if (cfg_in(d, s, 0, 4) == (0x1002u << 16 | 0x1af4))
			d->slot = (int)s;
	cr_assert_geq(d->slot, 1, "no virtio-balloon on bus 0");
	cr_assert_eq(cfg_in(d, d->slot, 0x2e, 2), 5, "subsystem: virtio device type balloon");
	cr_assert_eq(cfg_in(d, d->slot, 0x08, 1), 0, "revision 0: the legacy ABI");
	cr_assert_eq(cfg_in(d, d->slot, 0x3d, 1), 1, "INTA#");
	cr_assert_eq(cfg_in(d, d->slot, 0x3c, 1), IRQ);
	d->io = (uint16_t)(cfg_in(d, d->slot, 0x10, 4) & ~3u);
	cr_assert_eq(cfg_in(d, d->slot, 0x10, 4) & 1, 1, "an IO BAR");
	cr_assert_neq(d->io, 0, "firmware assigned the BAR");
	cr_assert(cfg_in(d, d->slot, 0x04, 2) & 1, "IO decoding on");
}

static void drv_queue(struct vdrv *d, unsigned int q)
{
	struct tvq *v = &d->vq[q];
	uint64_t base = RING_GPA + q * 64 * 1024;

	pio_out(d, d->io + 0x0e, q, 2);
	v->num = (uint16_t)pio_in(d, d->io + 0x0c, 2);
	cr_assert_eq(v->num, QNUM);
	v->desc = base;
	v->avail = base + 16 * v->num;
	v->used = (v->avail + 2 * (3 + v->num) + 4095) & ~4095UL;
	v->avail_idx = v->used_seen = v->next_desc = 0;
	memset(d->ram + base, 0, 64 * 1024);
	pio_out(d, d->io + 0x08, (uint32_t)(base >> 12), 4);
	cr_assert_eq(pio_in(d, d->io + 0x08, 4), base >> 12);
}

/* Reset, negotiate every feature offered, set up nvq queues, DRIVER_OK. */
static uint32_t drv_init(struct vdrv *d, unsigned int nvq)
{
	uint32_t f;

	pio_out(d, d->io + 0x12, 0, 1);
	pio_out(d, d->io + 0x12, 1 | 2, 1);
	f = pio_in(d, d->io + 0x00, 4);
	pio_out(d, d->io + 0x04, f, 4);
	d->nvq = nvq;
	for (unsigned int q = 0; q < nvq; q++)
		drv_queue(d, q);
	pio_out(d, d->io + 0x0e, 9, 2);
	cr_assert_eq(pio_in(d, d->io + 0x0c, 2), 0, "a queue that does not exist has size 0");
	pio_out(d, d->io + 0x12, 1 | 2 | 4, 1);
	return f;
}

struct seg {
	uint64_t gpa;
	uint32_t len;
	bool write;
};

/* Put a chain on queue q's avail ring (descriptors from next_desc) and kick. */
static uint16_t drv_add(struct vdrv *d, unsigned int q, const struct seg *s, unsigned int n)
{
	struct tvq *v = &d->vq[q];
	uint16_t head = v->next_desc;

	pthread_mutex_lock(&d->vcpu);
	for (unsigned int i = 0; i < n; i++) {
		uint8_t *desc = d->ram + v->desc + 16 * ((head + i) % v->num);
		uint16_t flags = (uint16_t)((s[i].write ? 2 : 0) | (i + 1 < n ? 1 : 0));
		uint16_t next = (uint16_t)((head + i + 1) % v->num);

		memcpy(desc, &s[i].gpa, 8);
		memcpy(desc + 8, &s[i].len, 4);
		memcpy(desc + 12, &flags, 2);
		memcpy(desc + 14, &next, 2);
	}
	v->next_desc = (uint16_t)((head + n) % v->num);
	memcpy(d->ram + v->avail + 4 + 2 * (v->avail_idx % v->num), &head, 2);
	v->avail_idx++;
	__atomic_store_n((uint16_t *)(d->ram + v->avail + 2), v->avail_idx, __ATOMIC_RELEASE);
	pio_out(d, d->io + 0x10, q, 2);
	pthread_mutex_unlock(&d->vcpu);
	return head;
}

static uint16_t used_idx(struct vdrv *d, unsigned int q)
{
	uint16_t v;

	pthread_mutex_lock(&d->vcpu);
	v = __atomic_load_n((uint16_t *)(d->ram + d->vq[q].used + 2), __ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&d->vcpu);
	return v;
}

/* Wait (at most 20 s) for the interrupt, ack it through ISR; returns the ISR bits. */
static uint32_t drv_wait_irq(struct vdrv *d)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&d->lock);
	while (!d->level)
		cr_assert_neq(pthread_cond_timedwait(&d->cond, &d->lock, &ts), ETIMEDOUT,
			      "no interrupt");
	pthread_mutex_unlock(&d->lock);
	return pio_in(d, d->io + 0x13, 1);
}

/* Wait until queue q has handed back n more buffers. */
static void drv_wait_used(struct vdrv *d, unsigned int q, unsigned int n)
{
	uint16_t want = (uint16_t)(d->vq[q].used_seen + n);

	while (used_idx(d, q) != want) {
		uint32_t isr = drv_wait_irq(d);

		cr_assert(isr & 1 || used_idx(d, q) == want, "ISR %#x without a used buffer", isr);
	}
	d->vq[q].used_seen = want;
}

static struct gfa_rv_balloon_stat bstat(struct vdrv *d)
{
	struct gfa_rv_balloon_stat st;

	cr_assert_eq(gfa_rv_balloon_stat(d->bal, &st), 0);
	return st;
}

/* A move pauses the driver, then the device threads (as a VMM's pause op would). */
static int drv_pause(void *ctx)
{
	struct vdrv *d = ctx;

	pthread_mutex_lock(&d->vcpu);
	if (d->pci)
		gfa_rv_pci_pause(d->pci);
	return 0;
}

static int drv_resume(void *ctx)
{
	struct vdrv *d = ctx;

	if (d->pci)
		gfa_rv_pci_resume(d->pci);
	pthread_mutex_unlock(&d->vcpu);
	return 0;
}

static const struct gfa_guest_vcpu_ops drv_vcpu_ops = { drv_pause, drv_resume };

/* Frames taken low in the pool before the guest, freed (every other one) after it:
 * holes compaction moves the guest's small blocks into. */
static uint64_t holes[4096];

static void drv_new_opts(struct vdrv *d, uint64_t pool_bytes, uint64_t guest_bytes, bool reporting,
			 bool movable)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config gc = { .mem_bytes = guest_bytes,
				       .small_only = movable,
				       .vcpu_ops = &drv_vcpu_ops,
				       .vcpu_ctx = d };
	struct gfa_release_policy rp = { .low = 256, .high = 512, .min_empty_frac = 4 };
	struct gfa_rv_balloon_config cfg;

	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	pthread_mutex_init(&d->vcpu, NULL);
	d->pool = tu_pool(pool_bytes >> GFA_FRAME_SHIFT);
	cr_assert_eq(gfa_zone_set_release_policy(d->pool, 0, &rp), 0);
	d->b = gfa_backing_create(d->pool, &bc);
	cr_assert_not_null(d->b);
	for (unsigned int i = 0; movable && i < 4096; i++)
		holes[i] = (uint64_t)gfa_alloc(d->pool, 0, 0, GFA_MT_MOVABLE, 7, 0);
	d->g = gfa_guest_create(d->pool, d->b, &gc);
	cr_assert_not_null(d->g);
	for (unsigned int i = 0; movable && i < 4096; i += 2)
		gfa_free(d->pool, holes[i], 0, 7);
	d->ram = gfa_guest_hva(d->g);
	d->pci = gfa_rv_pci_create();
	cr_assert_not_null(d->pci);
	cfg = (struct gfa_rv_balloon_config){ .guest = d->g,
					      .backing = d->b,
					      .irq = IRQ,
					      .irq_fn = drv_irq,
					      .irq_ctx = d,
					      .deflate_on_oom = true,
					      .free_page_reporting = reporting };
	d->bal = gfa_rv_balloon_create(d->pci, &cfg);
	cr_assert_not_null(d->bal, "balloon: %s", strerror(errno));
	drv_find(d);
}

static void drv_new(struct vdrv *d, uint64_t pool_bytes, uint64_t guest_bytes, bool reporting)
{
	drv_new_opts(d, pool_bytes, guest_bytes, reporting, false);
}

static void drv_start_host_return(struct vdrv *d)
{
	static const struct gfa_host_return_config hc = { .no_settle = true };

	d->hr = gfa_host_return_start(d->pool, d->b, &hc);
	cr_assert_not_null(d->hr);
	cr_assert_eq(gfa_host_return_quiesce(d->hr, 20000), 0);
}

static void drv_done(struct vdrv *d)
{
	gfa_rv_balloon_destroy(d->bal);
	gfa_guest_forget_vcpus(d->g);
	cr_assert_eq(gfa_rv_pci_destroy(d->pci), 0);
	d->pci = NULL;
	gfa_host_return_stop(d->hr);
	gfa_guest_destroy(d->g);
	ASSERT_POOL_OK(d->pool);
	gfa_backing_destroy(d->b);
	gfa_pool_destroy(d->pool);
}

static int64_t backed(struct vdrv *d)
{
	return gfa_memfd_allocated_bytes(gfa_backing_zone_fd(d->b, 0));
}

/* Write a page list at BUF_GPA + slot * 4 KiB and send it on queue q; wait for it. */
static void drv_pages(struct vdrv *d, unsigned int q, const uint32_t *pfns, unsigned int n,
		      unsigned int slot)
{
	struct seg s = { BUF_GPA + slot * 4096UL, n * 4, false };

	pthread_mutex_lock(&d->vcpu);
	memcpy(d->ram + s.gpa, pfns, n * 4);
	pthread_mutex_unlock(&d->vcpu);
	drv_add(d, q, &s, 1);
	drv_wait_used(d, q, 1);
}

/* Inflate (q 0) or deflate (q 1) n pages from gpa, 256 a buffer as Linux sends them. */
static void drv_balloon(struct vdrv *d, unsigned int q, uint64_t gpa, unsigned int n)
{
	uint32_t pfns[256];

	for (unsigned int i = 0; i < n; i += 256) {
		unsigned int k = n - i < 256 ? n - i : 256;

		for (unsigned int j = 0; j < k; j++)
			pfns[j] = (uint32_t)((gpa >> 12) + i + j);
		drv_pages(d, q, pfns, k, 0);
	}
}

static void fill(struct vdrv *d, uint64_t seed)
{
	uint64_t *w = (uint64_t *)d->ram;

	for (uint64_t i = 0; i < gfa_guest_size(d->g) / 8; i += 512)
		w[i] = seed ^ i;
}

static uint64_t fill_bad(struct vdrv *d, uint64_t seed, uint64_t lo, uint64_t hi)
{
	uint64_t *w = (uint64_t *)d->ram, bad = 0;

	for (uint64_t i = 0; i < gfa_guest_size(d->g) / 8; i += 512)
		if ((i * 8 < lo || i * 8 >= hi) && (i * 8 < MiB || i * 8 >= 3 * MiB) &&
		    w[i] != (seed ^ i))
			bad++;
	return bad;
}

/* ---- the bus ---- */

Test(virtio, pci_bus_config_space_and_bars)
{
	struct vdrv d;
	struct gfa_rv_pci_slot slots[4];
	uint32_t v = 0, bar;
	uint16_t old;

	drv_new(&d, 64 * MiB, 32 * MiB, false);
	cr_assert_eq(cfg_in(&d, 0, 0, 2), 0x8086, "host bridge at 00.0");
	cr_assert_eq(cfg_in(&d, 0, 0x0a, 2), 0x0600, "class: host bridge");
	cr_assert_eq(cfg_in(&d, 20, 0, 4), 0xffffffffu, "an empty slot reads all ones");
	pio_out(&d, 0xcf8, 0x80000000u | d.slot << 11 | 1 << 8, 4);
	cr_assert_eq(pio_in(&d, 0xcfc, 4), 0xffffffffu, "function 1 does not exist");
	pio_out(&d, 0xcf8, 0x80010000u, 4);
	cr_assert_eq(pio_in(&d, 0xcfc, 4), 0xffffffffu, "bus 1 does not exist");
	pio_out(&d, 0xcf8, 0x12345678, 4);
	cr_assert_eq(pio_in(&d, 0xcf8, 4), 0x12345678 & 0x00fffffc, "the address register");
	cr_assert_eq(gfa_rv_pci_io(d.pci, 0xcfb, &v, 1, true), -ENOENT, "byte access: not ours");
	cr_assert_eq(gfa_rv_pci_io(d.pci, 0xcf9, &v, 1, false), -ENOENT);
	cr_assert_eq(gfa_rv_pci_io(d.pci, 0x3f8, &v, 1, false), -ENOENT, "no device there");
	cr_assert_eq(gfa_rv_pci_io(d.pci, 0xcfc, &v, 3, false), -EINVAL);
	cr_assert_eq(gfa_rv_pci_io(NULL, 0xcfc, &v, 4, false), -EFAULT);
	/* sizing as Linux does, then a move of the BAR */
	old = d.io;
	cfg_out(&d, d.slot, 0x10, 0xffffffffu, 4);
	bar = cfg_in(&d, d.slot, 0x10, 4);
	cr_assert_eq(bar & 1, 1);
	cr_assert_eq(~(bar & 0xfffc) & 0xffff, 0x1f, "a 32-byte IO BAR (got %#x)", bar);
	cfg_out(&d, d.slot, 0x10, 0xd000, 4);
	cr_assert_eq(cfg_in(&d, d.slot, 0x10, 4), 0xd001);
	cr_assert_eq(gfa_rv_pci_io(d.pci, old, &v, 4, false), -ENOENT, "the old place is gone");
	d.io = 0xd000;
	cr_assert_eq(pio_in(&d, d.io, 4) & 2, 2, "features read at the new place");
	cfg_out(&d, d.slot, 0x04, 0, 2);
	cr_assert_eq(gfa_rv_pci_io(d.pci, d.io, &v, 4, false), -ENOENT, "IO decoding off");
	cfg_out(&d, d.slot, 0x04, 1, 2);
	cr_assert_eq(gfa_rv_pci_slots(d.pci, slots, 4), 1);
	cr_assert_eq(slots[0].slot, 1, "the first free slot");
	cr_assert_eq(slots[0].slot, (unsigned int)d.slot);
	cr_assert_eq(slots[0].irq, IRQ);
	cr_assert_eq(slots[0].pin, 1);
	cr_assert_eq(slots[0].io_base, 0xd000);
	cr_assert_eq(gfa_rv_pci_destroy(d.pci), -EBUSY, "a device is still plugged in");
	cr_assert_eq(gfa_rv_pci_resume(d.pci), -EINVAL);
	cr_assert_eq(gfa_rv_pci_pause(d.pci), 0);
	cr_assert_eq(gfa_rv_pci_resume(d.pci), 0);
	drv_done(&d);
}

/* ---- the balloon ---- */

Test(virtio, inflate_returns_memory_and_deflate_gives_it_back_zeroed, .timeout = 120)
{
	struct vdrv d;
	const uint64_t lo = 16 * MiB, n = 16 * MiB / 4096;
	struct gfa_rv_balloon_stat st;
	struct gfa_guest_stat gs;
	uint64_t free0;
	int64_t before, after;
	uint32_t f;

	drv_new(&d, 96 * MiB, 64 * MiB, false);
	f = drv_init(&d, 3);
	cr_assert_eq(f, 1u << 0 | 1u << 1 | 1u << 2, "MUST_TELL_HOST, STATS_VQ, DEFLATE_ON_OOM");
	fill(&d, 11);
	drv_start_host_return(&d);
	free0 = tu_free_frames(d.pool);
	/* the target, with a config interrupt */
	cr_assert_eq(gfa_rv_balloon_set_target(d.bal, n * 4096), 0);
	cr_assert_eq(drv_wait_irq(&d), 2, "a config change");
	cr_assert_eq(d.level, 0, "reading ISR lowers the line");
	cr_assert_eq(pio_in(&d, d.io + 0x14, 4), n, "num_pages");
	cr_assert_eq(gfa_rv_balloon_set_target(d.bal, 65 * MiB), -ERANGE);
	before = backed(&d);
	drv_balloon(&d, 0, lo, (unsigned int)n);
	for (unsigned int i = 0; i < 4; i++) /* actual, byte by byte as legacy Linux */
		pio_out(&d, d.io + 0x18 + i, (uint32_t)(n >> (8 * i)) & 0xff, 1);
	cr_assert_eq(gfa_host_return_quiesce(d.hr, 20000), 0);
	after = backed(&d);
	st = bstat(&d);
	cr_log_info("inflate %lu pages: host-backed %ld -> %ld MiB", (unsigned long)n,
		    (long)(before / MiB), (long)(after / MiB));
	cr_assert_eq(st.inflated_pages, n);
	cr_assert_eq(st.actual_pages, n);
	cr_assert_eq(st.inflate_requests, n / 256);
	cr_assert_leq(after, before - 15 * (int64_t)MiB, "the inflated 16 MiB left the host");
	cr_assert_eq(tu_free_frames(d.pool), free0 + n);
	for (uint64_t gpa = lo; gpa < lo + n * 4096; gpa += 4096)
		cr_assert_eq(d.ram[gpa], 0, "an inflated page reads zero");
	cr_assert_eq(fill_bad(&d, 11, lo, lo + n * 4096), 0, "the rest is untouched");
	gfa_guest_stat(d.g, &gs);
	cr_assert_eq(gs.ballooned_frames, n);
	ASSERT_POOL_OK(d.pool);
	/* deflate: fresh frames, zeroed */
	drv_balloon(&d, 1, lo, (unsigned int)n);
	st = bstat(&d);
	cr_assert_eq(st.inflated_pages, 0);
	cr_assert_eq(st.deflated_pages, n);
	gfa_guest_stat(d.g, &gs);
	cr_assert_eq(gs.ballooned_frames, 0);
	for (uint64_t gpa = lo; gpa < lo + n * 4096; gpa += 8)
		cr_assert_eq(*(uint64_t *)(d.ram + gpa), 0, "deflated memory is zeroed");
	cr_assert_eq(tu_free_frames(d.pool), free0);
	cr_assert_eq(st.err_page_list + st.err_desc + st.needs_reset, 0);
	drv_done(&d);
}

Test(virtio, free_page_reporting_returns_memory_without_a_target, .timeout = 120)
{
	struct vdrv d;
	struct seg s[4];
	struct gfa_rv_balloon_stat st;
	struct gfa_guest_stat gs0, gs;
	uint64_t free0;
	int64_t before, after;
	uint32_t f;

	drv_new(&d, 96 * MiB, 64 * MiB, true);
	f = drv_init(&d, 4);
	cr_assert(f & 1u << 5, "VIRTIO_BALLOON_F_REPORTING offered");
	fill(&d, 12);
	gfa_guest_stat(d.g, &gs0);
	free0 = tu_free_frames(d.pool);
	before = backed(&d);
	/* one buffer of four 2 MiB chunks, device-writable as Linux adds them */
	for (unsigned int i = 0; i < 4; i++)
		s[i] = (struct seg){ 32 * MiB + i * 4 * MiB, 2 * MiB, true };
	drv_add(&d, 3, s, 4);
	drv_wait_used(&d, 3, 1);
	after = backed(&d);
	st = bstat(&d);
	cr_log_info("reported 8 MiB: host-backed %ld -> %ld MiB", (long)(before / MiB),
		    (long)(after / MiB));
	cr_assert_eq(st.target_pages, 0, "no balloon target");
	cr_assert_eq(st.report_requests, 1);
	cr_assert_eq(st.reported_bytes, 8 * MiB);
	cr_assert_eq(st.report_released_bytes, 8 * MiB, "the buffer came back after the punches");
	cr_assert_leq(after, before - 8 * (int64_t)MiB);
	for (unsigned int i = 0; i < 4; i++)
		for (uint64_t gpa = s[i].gpa; gpa < s[i].gpa + s[i].len; gpa += 4096)
			cr_assert_eq(d.ram[gpa], 0, "a reported page reads zero");
	cr_assert_eq(fill_bad(&d, 12, 32 * MiB, 46 * MiB), 0);
	gfa_guest_stat(d.g, &gs);
	cr_assert_eq(gs.ballooned_frames, 0, "the frames stay the guest's");
	cr_assert_eq(gs.blocks, gs0.blocks);
	cr_assert_eq(tu_free_frames(d.pool), free0);
	ASSERT_POOL_OK(d.pool);
	/* the guest reuses them: backed again */
	memset(d.ram + s[0].gpa, 0x5a, s[0].len);
	cr_assert_geq(backed(&d), after + 2 * (int64_t)MiB - 16384);
	drv_done(&d);
}

Test(virtio, stats_queue_holds_the_buffer_until_asked, .timeout = 60)
{
	struct vdrv d;
	struct gfa_rv_balloon_stat st;
	uint8_t buf[30];
	struct seg s = { BUF_GPA, sizeof(buf), false };
	const uint16_t tags[3] = { 4, 5, 6 }; /* memfree, memtot, avail */

	drv_new(&d, 64 * MiB, 32 * MiB, false);
	drv_init(&d, 3);
	cr_assert_eq(gfa_rv_balloon_request_stats(d.bal), -EAGAIN, "no buffer yet");
	for (unsigned int round = 1; round <= 2; round++) {
		for (unsigned int i = 0; i < 3; i++) {
			uint64_t val = round * 1000 + i;

			memcpy(buf + 10 * i, &tags[i], 2);
			memcpy(buf + 10 * i + 2, &val, 8);
		}
		memcpy(d.ram + BUF_GPA, buf, sizeof(buf));
		drv_add(&d, 2, &s, 1);
		for (int t = 0; t < 20000 && bstat(&d).stats_updates < round; t++)
			usleep(1000);
		st = bstat(&d);
		cr_assert_eq(st.stats_updates, round);
		cr_assert_eq(st.guest_stats[4], round * 1000);
		cr_assert_eq(st.guest_stats[6], round * 1000 + 2);
		cr_assert_eq(st.guest_stats_seen, 0x70);
		cr_assert_eq(used_idx(&d, 2), round - 1, "the buffer is held");
		cr_assert_eq(gfa_rv_balloon_request_stats(d.bal), 0);
		drv_wait_used(&d, 2, 1);
	}
	cr_assert_eq(gfa_rv_balloon_request_stats(d.bal), -EAGAIN);
	drv_done(&d);
}

/* ---- bad input from the guest ---- */

/* Nothing changed: no frame ballooned, the pool consistent, the free count as before. */
static void assert_frames_untouched(struct vdrv *d, uint64_t free0)
{
	struct gfa_guest_stat gs;

	gfa_guest_stat(d->g, &gs);
	cr_assert_eq(gs.ballooned_frames, 0);
	cr_assert_eq(tu_free_frames(d->pool), free0);
	ASSERT_POOL_OK(d->pool);
}

/* A ring error: NEEDS_RESET with a config interrupt; then the driver resets. */
static void expect_needs_reset(struct vdrv *d)
{
	for (int t = 0; t < 20000 && !(bstat(d).status & 0x40); t++)
		usleep(1000);
	cr_assert(bstat(d).status & 0x40, "NEEDS_RESET");
	cr_assert(drv_wait_irq(d) & 2, "a config interrupt");
	drv_init(d, d->nvq);
	cr_assert_eq(bstat(d).status & 0x40, 0, "reset clears it");
}

Test(virtio, ring_errors_set_needs_reset_and_are_counted, .timeout = 120)
{
	struct vdrv d;
	struct gfa_rv_balloon_stat st;
	uint64_t free0;
	uint32_t pfn = 100;

	drv_new(&d, 64 * MiB, 32 * MiB, false);
	drv_init(&d, 3);
	fill(&d, 13);
	free0 = tu_free_frames(d.pool);

	/* a descriptor pointing outside guest RAM (and one wrapping around) */
	drv_add(&d, 0, &(struct seg){ 32 * MiB - 4, 1024, false }, 1);
	expect_needs_reset(&d);
	drv_add(&d, 0, &(struct seg){ UINT64_MAX - 100, 1024, false }, 1);
	expect_needs_reset(&d);
	/* a queue index out of range: notify and address */
	pio_out(&d, d.io + 0x10, 7, 2);
	expect_needs_reset(&d);
	pio_out(&d, d.io + 0x0e, 5, 2);
	pio_out(&d, d.io + 0x08, 0x300, 4);
	expect_needs_reset(&d);
	/* a ring that does not fit in RAM */
	pio_out(&d, d.io + 0x0e, 0, 2);
	pio_out(&d, d.io + 0x08, (32 * MiB >> 12) - 1, 4);
	expect_needs_reset(&d);
	/* a descriptor loop: 0 -> 1 -> 0 */
	{
		struct tvq *v = &d.vq[0];
		uint8_t *desc = d.ram + v->desc;
		uint64_t addr = BUF_GPA;
		uint32_t len = 4;
		uint16_t fl = 1, n1 = 1, n0 = 0, head = 0;

		memcpy(d.ram + BUF_GPA, &pfn, 4);
		for (int i = 0; i < 2; i++) {
			memcpy(desc + 16 * i, &addr, 8);
			memcpy(desc + 16 * i + 8, &len, 4);
			memcpy(desc + 16 * i + 12, &fl, 2);
			memcpy(desc + 16 * i + 14, i ? &n0 : &n1, 2);
		}
		memcpy(d.ram + v->avail + 4, &head, 2);
		__atomic_store_n((uint16_t *)(d.ram + v->avail + 2), 1, __ATOMIC_RELEASE);
		pio_out(&d, d.io + 0x10, 0, 2);
		expect_needs_reset(&d);
	}
	/* a head index beyond the table, then an avail index far ahead */
	{
		struct tvq *v = &d.vq[1];
		uint16_t head = 500;

		memcpy(d.ram + v->avail + 4, &head, 2);
		__atomic_store_n((uint16_t *)(d.ram + v->avail + 2), 1, __ATOMIC_RELEASE);
		pio_out(&d, d.io + 0x10, 1, 2);
		expect_needs_reset(&d);
		__atomic_store_n((uint16_t *)(d.ram + d.vq[1].avail + 2), 1000, __ATOMIC_RELEASE);
		pio_out(&d, d.io + 0x10, 1, 2);
		expect_needs_reset(&d);
	}
	st = bstat(&d);
	cr_log_info("err_desc %lu err_queue_index %lu err_ring %lu err_loop %lu err_avail %lu",
		    (unsigned long)st.err_desc, (unsigned long)st.err_queue_index,
		    (unsigned long)st.err_ring, (unsigned long)st.err_loop,
		    (unsigned long)st.err_avail);
	cr_assert_eq(st.err_desc, 3);
	cr_assert_eq(st.err_queue_index, 2);
	cr_assert_eq(st.err_ring, 1);
	cr_assert_eq(st.err_loop, 1);
	cr_assert_eq(st.err_avail, 1);
	cr_assert_eq(st.needs_reset, 8);
	cr_assert_eq(st.inflated_pages, 0);
	assert_frames_untouched(&d, free0);
	cr_assert_eq(fill_bad(&d, 13, 0, 0), 0, "guest memory untouched");
	/* the device still works after the resets */
	drv_pages(&d, 0, &pfn, 1, 0);
	cr_assert_eq(bstat(&d).inflated_pages, 1);
	drv_done(&d);
}

Test(virtio, malformed_page_lists_are_refused_and_counted, .timeout = 120)
{
	struct vdrv d;
	struct gfa_rv_balloon_stat st;
	uint64_t free0;
	uint32_t beyond[2] = { 100, 32 * MiB >> 12 }, dup[3] = { 200, 201, 200 };
	uint32_t ok[2] = { 300, 301 }, huge = UINT32_MAX;

	drv_new(&d, 64 * MiB, 32 * MiB, true);
	drv_init(&d, 4);
	fill(&d, 14);
	free0 = tu_free_frames(d.pool);
	drv_pages(&d, 0, beyond, 2, 0); /* a pfn beyond RAM */
	drv_pages(&d, 0, &huge, 1, 0);
	drv_pages(&d, 0, dup, 3, 0);    /* a page twice */
	drv_pages(&d, 1, ok, 2, 0);     /* deflate of pages never inflated */
	memcpy(d.ram + BUF_GPA, ok, 8); /* 6 bytes: not whole pfns */
	drv_add(&d, 0, &(struct seg){ BUF_GPA, 6, false }, 1);
	drv_wait_used(&d, 0, 1);
	drv_add(&d, 0, &(struct seg){ BUF_GPA, 0, false }, 1); /* empty */
	drv_wait_used(&d, 0, 1);
	drv_add(&d, 0, &(struct seg){ BUF_GPA, 8, true }, 1); /* device-writable */
	drv_wait_used(&d, 0, 1);
	/* reports: misaligned, overlapping, beyond RAM, and device-readable */
	drv_add(&d, 3, &(struct seg){ 4 * MiB + 512, 2 * MiB, true }, 1);
	drv_wait_used(&d, 3, 1);
	drv_add(&d, 3, (struct seg[2]){ { 4 * MiB, 2 * MiB, true }, { 5 * MiB, 2 * MiB, true } },
		2);
	drv_wait_used(&d, 3, 1);
	drv_add(&d, 3, &(struct seg){ 4 * MiB, 2 * MiB, false }, 1);
	drv_wait_used(&d, 3, 1);
	st = bstat(&d);
	cr_assert_eq(st.err_page_list, 6,
		     "beyond RAM x2, duplicate, not ballooned, 6 bytes, empty");
	cr_assert_eq(st.err_dir, 2);
	cr_assert_eq(st.err_report, 2);
	cr_assert_eq(st.needs_reset, 0, "payload errors leave the rings working");
	cr_assert_eq(st.inflated_pages, 0);
	cr_assert_eq(st.report_released_bytes, 0);
	assert_frames_untouched(&d, free0);
	cr_assert_eq(fill_bad(&d, 14, 0, 0), 0);
	/* a page inflated twice: the second is refused */
	drv_pages(&d, 0, ok, 2, 0);
	drv_pages(&d, 0, ok, 1, 0);
	st = bstat(&d);
	cr_assert_eq(st.inflated_pages, 2);
	cr_assert_eq(st.err_page_list, 7);
	drv_pages(&d, 1, ok, 2, 0);
	assert_frames_untouched(&d, free0);
	drv_done(&d);
}

Test(virtio, reset_while_a_report_is_in_flight_forgets_it, .timeout = 60)
{
	struct vdrv d;

	drv_new(&d, 64 * MiB, 32 * MiB, true);
	drv_init(&d, 4);
	drv_add(&d, 3, &(struct seg){ 8 * MiB, 4 * MiB, true }, 1);
	pio_out(&d, d.io + 0x12, 0, 1); /* the driver goes away at once */
	drv_init(&d, 4);
	drv_pages(&d, 0, (uint32_t[1]){ 1000 }, 1, 0);
	cr_assert_eq(used_idx(&d, 3), 0, "nothing lands in the new ring");
	cr_assert_eq(bstat(&d).inflated_pages, 1);
	drv_done(&d);
}

Test(virtio, create_checks_its_config)
{
	struct vdrv d;
	struct gfa_rv_balloon_config c;

	drv_new(&d, 64 * MiB, 32 * MiB, false);
	c = (struct gfa_rv_balloon_config){ .guest = d.g, .irq = 300, .irq_fn = drv_irq };
	cr_assert_null(gfa_rv_balloon_create(d.pci, &c));
	cr_assert_eq(errno, EINVAL);
	c.irq = 5;
	c.free_page_reporting = true;
	cr_assert_null(gfa_rv_balloon_create(d.pci, &c));
	cr_assert_eq(errno, EFAULT, "reporting needs the backing");
	cr_assert_null(gfa_rv_balloon_create(NULL, &c));
	c.free_page_reporting = false;
	c.slot = (unsigned int)d.slot;
	cr_assert_null(gfa_rv_balloon_create(d.pci, &c));
	cr_assert_eq(errno, EBUSY, "that slot is taken");
	c.slot = 32;
	cr_assert_null(gfa_rv_balloon_create(d.pci, &c));
	cr_assert_eq(errno, EINVAL);
	c.slot = 7;
	{
		struct gfa_rv_balloon *b2 = gfa_rv_balloon_create(d.pci, &c);
		struct gfa_rv_pci_slot sl[4];

		cr_assert_not_null(b2, "a second balloon in slot 7");
		cr_assert_eq(gfa_rv_pci_slots(d.pci, sl, 4), 2);
		cr_assert_eq(sl[1].slot, 7);
		cr_assert_eq(sl[1].irq, 5);
		cr_assert_eq(sl[1].io_base, 0xc700);
		cr_assert_eq(cfg_in(&d, 7, 0, 4), 0x1002u << 16 | 0x1af4);
		gfa_rv_balloon_destroy(b2);
		cr_assert_eq(cfg_in(&d, 7, 0, 4), 0xffffffffu, "unplugged");
	}
	c.slot = 0;
	c.irq_fn = NULL;
	c.free_page_reporting = false;
	cr_assert_null(gfa_rv_balloon_create(d.pci, &c));
	cr_assert_eq(gfa_rv_balloon_set_target(NULL, 0), -EFAULT);
	cr_assert_eq(gfa_rv_balloon_stat(d.bal, NULL), -EFAULT);
	drv_done(&d);
}

/*
 * Moves under the device: full compactions move the guest's small blocks (its rings and
 * buffers among them) while the device inflates, deflates and punches reports.  The
 * pause op stops the driver and the device threads (gfa_rv_pci_pause), so no used-ring
 * write or page list read meets a block being copied: no buffer is lost (the driver
 * would wait for it forever) and the guest's data stays as it was.
 */
struct mover {
	struct vdrv *d;
	_Atomic int stop;
	unsigned int passes;
};

static void *mover_main(void *arg)
{
	struct mover *m = arg;

	while (!atomic_load(&m->stop)) {
		gfa_compact_zone(m->d->pool, 0, -1, GFA_COMPACT_SYNC);
		m->passes++;
	}
	return NULL;
}

Test(virtio, moves_under_the_device_lose_nothing, .timeout = 300)
{
	struct vdrv d;
	struct mover m = { &d, 0, 0 };
	struct gfa_rv_balloon_stat st;
	struct gfa_guest_stat gs;
	unsigned int rounds = tu_sanitizer() ? 10 : 40;
	uint64_t bad;
	pthread_t t;

	drv_new_opts(&d, 96 * MiB, 32 * MiB, true, true);
	drv_init(&d, 4);
	pthread_mutex_lock(&d.vcpu);
	fill(&d, 15);
	pthread_mutex_unlock(&d.vcpu);
	pthread_create(&t, NULL, mover_main, &m);
	for (unsigned int i = 0; i < rounds; i++) {
		drv_balloon(&d, 0, 8 * MiB, 512);
		drv_add(&d, 3, &(struct seg){ 16 * MiB + (i % 4) * 2 * MiB, 2 * MiB, true }, 1);
		drv_wait_used(&d, 3, 1);
		drv_balloon(&d, 1, 8 * MiB, 512);
	}
	atomic_store(&m.stop, 1);
	pthread_join(t, NULL);
	st = bstat(&d);
	gfa_guest_stat(d.g, &gs);
	pthread_mutex_lock(&d.vcpu);
	bad = fill_bad(&d, 15, 8 * MiB, 24 * MiB);
	pthread_mutex_unlock(&d.vcpu);
	cr_log_info("%u rounds, %u compaction passes, %lu blocks moved, %lu MiB reported", rounds,
		    m.passes, (unsigned long)gs.moves, (unsigned long)(st.reported_bytes / MiB));
	cr_assert_gt(gs.moves, 0, "compaction moved none of the guest's blocks");
	cr_assert_eq(bad, 0, "the guest's data changed under the moves");
	cr_assert_eq(st.inflated_pages, 0);
	cr_assert_eq(st.err_page_list + st.err_desc + st.err_report + st.needs_reset, 0);
	cr_assert_eq(gs.ballooned_frames, 0);
	for (unsigned int i = 1; i < 4096; i += 2)
		gfa_free(d.pool, holes[i], 0, 7);
	drv_done(&d);
}

Test(virtio, a_reset_gives_every_ballooned_page_back, .timeout = 60)
{
	struct vdrv d;
	struct gfa_guest_stat gs;
	uint64_t free0;

	drv_new(&d, 64 * MiB, 32 * MiB, false);
	drv_init(&d, 3);
	free0 = tu_free_frames(d.pool);
	drv_balloon(&d, 0, 4 * MiB, 300);
	drv_balloon(&d, 0, 12 * MiB, 20);
	gfa_guest_stat(d.g, &gs);
	cr_assert_eq(gs.ballooned_frames, 320);
	pio_out(&d, d.io + 0x12, 0, 1); /* a new kernel resets without deflating */
	for (int t = 0; t < 20000 && bstat(&d).reset_deflated_pages < 320; t++)
		usleep(1000);
	cr_assert_eq(bstat(&d).reset_deflated_pages, 320);
	cr_assert_eq(bstat(&d).inflated_pages, 0);
	gfa_guest_stat(d.g, &gs);
	cr_assert_eq(gs.ballooned_frames, 0);
	cr_assert_eq(tu_free_frames(d.pool), free0);
	for (uint64_t gpa = 4 * MiB; gpa < 4 * MiB + 300 * 4096; gpa += 8)
		cr_assert_eq(*(uint64_t *)(d.ram + gpa), 0, "given back zeroed");
	drv_done(&d);
}
