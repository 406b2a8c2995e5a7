// SPDX-License-Identifier: MIT
/*
 * bench/vmstart: a VM's start on gfa against the kernel's memory on equal terms, per
 * guest size (128 MiB .. 4 GiB), 2 vCPUs, KVM where /dev/kvm works.
 *
 * A start is what gfactl vmstart times: create the VM (its RAM taken and mapped, with
 * KVM its VM, memslot, page tables, code and vCPUs) and the vCPU threads' first touch
 * of every 4 KiB.  Variants, interleaved in every repetition (the order rotates):
 *   gfa-clean      from a pool of clean frames, the KVM side from a shell made before
 *                  the timer (gfa_vm_shells_fill), as the pool was populated before it
 *   gfa-restart    right after the VM stopped (its blocks free at once, dirty, behind
 *                  the clean ones; the backing's zeroer zeroes them in the background
 *                  meanwhile), its shell reused; the pool has room for two guests, so
 *                  the restart finds clean frames
 *   prefaulted-kvm a THP memfd populated before the timer + the same KVM creation
 *   thp-kvm        anonymous MADV_HUGEPAGE first touch (fault and zero) + KVM creation
 *   hugetlb-kvm    a MFD_HUGETLB memfd from a 2 MiB pool reserved before the timer
 *                  (as root; nr_hugepages restored afterwards) + KVM creation
 *   prefaulted     the pre-faulted memfd without KVM: the aim for a shell start
 * Then gfa_zero against memset on 128 MiB (interleaved).  Ratios are of medians in this
 * run; per-GiB cost flatness is the largest over the smallest ms/GiB across sizes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"
#include "refvmm/shell.h"

#define MiB      (1ULL << 20)
#define VCPUS    2
#define MAX_REPS 64

enum { V_CLEAN, V_RESTART, V_PRE_KVM, V_THP_KVM, V_HUGE_KVM, V_PRE, NR_V };
static const char *const vname[NR_V] = {
	"gfa-clean", "gfa-restart", "prefaulted-kvm", "thp-kvm", "hugetlb-kvm", "prefaulted",
};

struct size_run {
	uint64_t mem;
	double ms[NR_V][MAX_REPS];
	int n[NR_V];
	struct bench_stat st[NR_V];
};

struct host {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	bool kvm;
	bool hugetlb;
};

static char shmem_saved[32];

static void shmem_restore(void)
{
	if (shmem_saved[0])
		(void)gfa_host_shmem_thp_set(shmem_saved, NULL, 0);
	shmem_saved[0] = '\0';
}

/*
 * shmem_enabled=never keeps every memfd (gfa's pool and the pre-faulted baseline alike)
 * on 4 KiB host pages: as gfactl vmstart does, lift it to advise for the run (root),
 * put back at exit.  THP=madvise already lets the anonymous baseline have its PMDs.
 */
static void shmem_advise(void)
{
	struct gfa_thp_report thp;
	int err;

	gfa_host_thp_report(&thp);
	if (thp.shmem_thp_possible || !strcmp(thp.shmem_enabled, "unknown")) {
		printf("host: THP enabled=%s shmem_enabled=%s\n", thp.thp_enabled,
		       thp.shmem_enabled);
		return;
	}
	err = gfa_host_shmem_thp_set("advise", shmem_saved, sizeof(shmem_saved));
	if (err) {
		shmem_saved[0] = '\0';
		printf("host: shmem_enabled=%s, cannot set advise (%s): memfds on 4 KiB pages\n",
		       thp.shmem_enabled, strerror(-err));
		return;
	}
	atexit(shmem_restore);
	printf("host: THP enabled=%s, shmem_enabled %s -> advise for this run (restored at exit)\n",
	       thp.thp_enabled, shmem_saved);
}

static double ms_since(uint64_t t0)
{
	return bench_sec_since(t0) * 1e3;
}

static struct gfa_vm *gfa_start(struct host *h, uint64_t mem, double *ms)
{
	struct gfa_vm_config vc = { .mem_bytes = mem,
				    .vcpus = VCPUS,
				    .kvm = h->kvm ? GFA_VM_KVM_ON : GFA_VM_KVM_OFF };
	uint64_t t0 = bench_now_ns();
	struct gfa_vm *vm = gfa_vm_create(h->pool, h->b, &vc);

	if (!vm)
		bench_die("gfa_vm_create %llu MiB: %s\n", (unsigned long long)(mem / MiB),
			  strerror(errno));
	baseline_touch((char *)gfa_guest_hva(gfa_vm_guest(vm)) + GFA_VM_RAM_START,
		       mem - GFA_VM_RAM_START, VCPUS);
	*ms = ms_since(t0);
	return vm;
}

/* One clean start and the restart right after its stop. */
static void run_gfa(struct host *h, struct size_run *s)
{
	struct gfa_vm *vm;
	double ms;

	if (gfa_backing_zero_quiesce(h->b, 60000))
		bench_die("the background zeroer did not finish\n");
	vm = gfa_start(h, s->mem, &ms);
	s->ms[V_CLEAN][s->n[V_CLEAN]++] = ms;
	gfa_vm_destroy(vm);
	vm = gfa_start(h, s->mem, &ms);
	s->ms[V_RESTART][s->n[V_RESTART]++] = ms;
	gfa_vm_destroy(vm);
}

static void run_baseline(struct host *h, struct size_run *s, int v)
{
	static const enum baseline_mem kind[NR_V] = {
		[V_PRE_KVM] = BASELINE_PREFAULTED,
		[V_THP_KVM] = BASELINE_THP,
		[V_HUGE_KVM] = BASELINE_HUGETLB,
		[V_PRE] = BASELINE_PREFAULTED,
	};
	struct baseline_vm bv;
	uint64_t t0;
	int err = baseline_prepare(&bv, kind[v], s->mem, VCPUS);

	if (!err) {
		t0 = bench_now_ns();
		err = baseline_start(&bv, v != V_PRE && h->kvm);
		if (!err)
			s->ms[v][s->n[v]++] = ms_since(t0);
	}
	baseline_destroy(&bv);
	if (err)
		bench_die("%s %llu MiB: %s\n", vname[v], (unsigned long long)(s->mem / MiB),
			  strerror(-err));
}

static void run_size(struct host *h, struct size_run *s, int reps)
{
	for (int r = -1; r < reps && r < MAX_REPS; r++) {
		for (int k = 0; k < NR_V; k++) {
			int v = (k + (r < 0 ? 0 : r)) % NR_V; /* the order rotates */

			if (v == V_RESTART || (v == V_HUGE_KVM && !h->hugetlb))
				continue; /* (the restart follows its clean start) */
			if (v == V_CLEAN)
				run_gfa(h, s);
			else
				run_baseline(h, s, v);
		}
		if (r < 0) /* the first round warms up: not counted */
			memset(s->n, 0, sizeof(s->n));
	}
	for (int v = 0; v < NR_V; v++)
		if (s->n[v])
			s->st[v] = bench_stat_of(s->ms[v], s->n[v]);
}

static void print_size(const struct size_run *s)
{
	printf("\n%llu MiB guest, %d vCPUs (min / median / max ms, reps):\n",
	       (unsigned long long)(s->mem / MiB), VCPUS);
	for (int v = 0; v < NR_V; v++)
		if (s->n[v])
			printf("  %-15s %8.2f %8.2f %8.2f  (%d)   %.2f ms/GiB at the median\n",
			       vname[v], s->st[v].min, s->st[v].median, s->st[v].max, s->n[v],
			       s->st[v].median / ((double)s->mem / (1 << 30)));
}

static void host_new(struct host *h, uint64_t pool_bytes)
{
	struct gfa_pool_config pc;
	struct gfa_backing_config bc = { .populate = true };

	gfa_pool_config_init(&pc, pool_bytes >> GFA_FRAME_SHIFT);
	h->pool = gfa_pool_create(&pc);
	if (!h->pool)
		bench_die("pool: %s\n", strerror(errno));
	h->b = gfa_backing_create(h->pool, &bc);
	if (!h->b)
		bench_die("backing: %s\n", strerror(errno));
}

static void host_done(struct host *h)
{
	gfa_vm_shells_drain();
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

static const uint64_t sizes[] = { 128 * MiB, 512 * MiB, 1024 * MiB, 4096 * MiB };

/* Every size's runs, and the zeroing rates. */
struct vmstart_bench {
	struct size_run runs[ARRAY_SIZE(sizes)];
	unsigned int nr_sizes;
	struct zero_rates zr;
};

/* One guest size on a host of its own: the variants' reps, then its table. */
static void run_one_size(const struct bench_opts *o, struct size_run *s, bool first)
{
	struct host h = { 0 };
	char why[160];
	long got;

	h.kvm = gfa_kvm_available(why, sizeof(why));
	if (!h.kvm && first)
		printf("no KVM (%s): the VMs run host threads, no baseline creates a KVM VM\n",
		       why);
	/* room for two guests, as gfactl vmstart's default pool (VMs x RAM x 1.25
	 * for 8 VMs) leaves two VMs' worth free: a restart right after a stop finds
	 * clean frames while the stopped guest's are zeroed in the background */
	host_new(&h, 2 * s->mem + 64 * MiB);
	if (h.kvm && gfa_vm_shells_fill(s->mem, VCPUS, 1) < 0)
		bench_die("VM shell: %s\n", strerror(errno));
	got = baseline_hugetlb_reserve((unsigned long)(s->mem / (2 * MiB)), why, sizeof(why));
	h.hugetlb = got >= 0;
	if (!h.hugetlb)
		printf("hugetlb-kvm %llu MiB: not run: %s\n", (unsigned long long)(s->mem / MiB),
		       why);
	run_size(&h, s, o->reps);
	baseline_hugetlb_restore();
	host_done(&h);
	print_size(s);
}

static int run_all(const struct bench_opts *o, void *ctx)
{
	struct vmstart_bench *b = ctx;
	struct bench_load load;

	b->nr_sizes = o->quick ? 2 : 4;
	bench_load_begin(&load);
	for (unsigned int i = 0; i < b->nr_sizes; i++) {
		b->runs[i].mem = sizes[i];
		run_one_size(o, &b->runs[i], !i);
	}
	bench_print_load(&load, "vmstart");
	if (baseline_zero_rates(128 * MiB, o->quick ? 5 : 11, &b->zr))
		bench_die("gfa_zero left data behind\n");
	return 0;
}

/* The largest over the smallest ms per GiB across the sizes, of clean starts or restarts. */
static double flatness(const struct vmstart_bench *b, int v)
{
	double lo = 0, hi = 0;

	for (unsigned int i = 0; i < b->nr_sizes; i++) {
		double x = b->runs[i].st[v].median / ((double)b->runs[i].mem / (1 << 30));

		lo = !i || x < lo ? x : lo;
		hi = x > hi ? x : hi;
	}
	return hi / lo;
}

static void report_goals(const struct size_run *s, const struct zero_rates *zr, double best,
			 double flat_clean, double flat_restart)
{
	double c = s->st[V_CLEAN].median, r = s->st[V_RESTART].median;

	bench_goal("vmstart", "clean_vs_prefaulted_kvm", c / s->st[V_PRE_KVM].median, "<=", 1.0,
		   "128 MiB clean start / pre-faulted memfd + the same KVM creation");
	bench_goal("vmstart", "clean_vs_prefaulted", c / s->st[V_PRE].median, "<=", 1.0,
		   "aim: / the pre-faulted memfd without KVM (shells take KVM off the path)");
	bench_goal("vmstart", "clean_vs_strongest", c / best, "info", 0,
		   "/ the fastest of the baselines with KVM");
	bench_goal("vmstart", "restart_vs_kernel_thp_kvm", r / s->st[V_THP_KVM].median, "<=", 0.5,
		   "restart / MADV_HUGEPAGE fault-and-zero + KVM creation");
	bench_goal("vmstart", "restart_vs_clean", r / c, "<=", 1.5,
		   "restart right after a stop / clean start");
	bench_goal("vmstart", "zero_vs_memset", zr->zero_gbs / zr->memset_gbs, ">=", 1.8,
		   "gfa_zero / memset rate on 128 MiB");
	bench_goal("vmstart", "per_gib_flatness_clean", flat_clean, "info", 0,
		   "largest / smallest clean-start ms per GiB over the sizes (1 = flat)");
	bench_goal("vmstart", "per_gib_flatness_restart", flat_restart, "info", 0,
		   "the same for restarts");
}

static void report(void *ctx)
{
	const struct vmstart_bench *b = ctx;
	const struct zero_rates *zr = &b->zr;
	const struct size_run *s = &b->runs[0]; /* 128 MiB: the goals' size */
	double c = s->st[V_CLEAN].median, r = s->st[V_RESTART].median;
	double best = s->st[V_PRE_KVM].median;
	double flat_clean = flatness(b, V_CLEAN), flat_restart = flatness(b, V_RESTART);
	struct bench_result res;

	printf("zeroing 128 MiB: %s p50 %.2f ms (%.1f GB/s), memset p50 %.2f ms (%.1f GB/s); "
	       "min %.2f / %.2f ms\n",
	       zr->method, zr->zero_p50_ms, zr->zero_gbs, zr->memset_p50_ms, zr->memset_gbs,
	       zr->zero_min_ms, zr->memset_min_ms);
	if (s->n[V_THP_KVM] && s->st[V_THP_KVM].median < best)
		best = s->st[V_THP_KVM].median;
	if (s->n[V_HUGE_KVM] && s->st[V_HUGE_KVM].median < best)
		best = s->st[V_HUGE_KVM].median;
	printf("\n");
	report_goals(s, zr, best, flat_clean, flat_restart);
	bench_result_init(&res, "vmstart");
	bench_result_add(&res, "vs_prefaulted_kvm", "%.3f", c / s->st[V_PRE_KVM].median);
	bench_result_add(&res, "vs_prefaulted", "%.3f", c / s->st[V_PRE].median);
	bench_result_add(&res, "vs_strongest", "%.3f", c / best);
	bench_result_add(&res, "restart_vs_kernel_thp", "%.3f", r / s->st[V_THP_KVM].median);
	bench_result_add(&res, "restart_vs_clean", "%.3f", r / c);
	bench_result_add(&res, "zero_vs_memset", "%.3f", zr->zero_gbs / zr->memset_gbs);
	bench_result_add(&res, "clean_p50_ms", "%.3f", c);
	bench_result_add(&res, "restart_p50_ms", "%.3f", r);
	bench_result_add(&res, "flat_clean", "%.2f", flat_clean);
	bench_result_add(&res, "flat_restart", "%.2f", flat_restart);
	bench_result_add(&res, "zero", "%s", zr->method);
	bench_result_add(&res, "kvm", "%d", gfa_kvm_available(NULL, 0));
	bench_result_print(&res);
}

/* One part: the sizes, each on its own host, with the variants interleaved in each. */
static struct vmstart_bench vmstart;
static const struct bench_part vmstart_parts[] = {
	{ NULL, run_all, report, &vmstart },
};

int main(int argc, char **argv)
{
	struct bench_opts o;
	int ret = bench_parse_args(argc, argv, &o, 5, 0, 9, 0,
				   "VM start on gfa vs the kernel's memory on equal terms "
				   "(see the comment at the top of bench/vmstart.c)");

	if (ret)
		return ret > 0 ? 0 : 2;
	bench_print_machine();
	shmem_advise();
	bench_parts_run(&o, vmstart_parts, ARRAY_SIZE(vmstart_parts));
	return 0;
}
