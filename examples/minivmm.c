// SPDX-License-Identifier: MIT
/*
 * minivmm: a small KVM VMM whose guest RAM is managed by gfa.  Start here.
 *
 *   make && build/examples/minivmm [--mem MIB] [--vcpus N] [--no-fragment]
 *
 * One function per step:
 *   host_setup     a gfa pool plus memfd backing: the host memory guests come from.
 *   fragment_pool  makes the pool look like a long-running host's (no free 2 MiB
 *                  block), so the guest starts on 4 KiB blocks (not with --no-fragment).
 *   kvm_setup      the guest's RAM (gfa_guest_create) wired into KVM by hand: a VM,
 *                  one memslot over the guest window, identity page tables, the test
 *                  guest's code, the vCPUs, and pause ops for frame moves.
 *   vcpu_thread    one per vCPU, with its own gfa cache: the guest fills its slice
 *                  with a pattern, reports a checksum over port IO (vcpu_io), then
 *                  re-verifies the slice in a loop.
 *   maintain       while the guest runs: compaction and a khugepaged-style collapse
 *                  move its frames; gfa write-protects the block it moves, and the
 *                  vCPUs wait in their faults (without userfaultfd permission gfa
 *                  pauses them through the ops instead).
 *   report         mismatches (must be 0), moves, KVM pages_2m, host PMD bytes,
 *                  buddyinfo.
 *
 * Exit status: 0 ok; 1 the guest saw wrong memory or something failed; 2 bad usage;
 * 77 no usable KVM (the message says why; 77 is the usual "skipped" code).
 * 2 MiB pages need shmem THP on the host (transparent_hugepage/shmem_enabled: advise).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/refvmm.h>

#define MIB           (1ULL << 20)
#define MAX_VCPUS     16
#define SEED          0x5eed0f9fa0000001ULL
#define BALLAST_OWNER 0xba11a57ULL /* "another tenant": registers no migrate op */
#define VMM_OWNER     0x7e117ULL   /* the VMM's own pages */
/* Guest RAM that starts on 4 KiB blocks: each is a mapping of its own in the guest
 * window, and vm.max_map_count (65530) must hold them; 64 MiB is 16384. */
#define FRAGMENT_MAX  (64 * MIB)

struct vmm;

struct vcpu {
	struct vmm *vmm;
	unsigned int id;
	struct gfa_kvm_vcpu *kvcpu;
	pthread_t thread;
	bool started;
	uint64_t start, end; /* the GPA slice this vCPU fills and verifies */
	uint32_t lo;         /* port IO: low half of a 64-bit result */
	unsigned int nr_results;
	uint64_t mismatches;
	_Atomic unsigned int passes;  /* verify passes finished */
	_Atomic unsigned int stop_at; /* stop after this pass (0: run on) */
	_Atomic int err;
};

struct vmm {
	struct gfa_pool *pool;
	struct gfa_backing *backing;
	struct gfa_guest *guest;
	struct gfa_kvm_vm *kvm;
	uint64_t mem, code_gpa;
	unsigned int nr_vcpus;
	_Atomic bool vcpus_ready; /* every vCPU exists; until then moves are refused */
	_Atomic unsigned long pauses;
	struct vcpu vcpu[MAX_VCPUS];
};

/* ---- host memory ---- */

static uint64_t pool_bytes(uint64_t mem)
{
	return mem + (mem < FRAGMENT_MAX ? mem : FRAGMENT_MAX);
}

static int host_setup(struct vmm *m)
{
	struct gfa_pool_config pc;
	/* populate: fault the memfds in now, through the pool's MADV_HUGEPAGE mapping,
	 * so that where the host allows shmem THP every 2 MiB block is one huge page */
	struct gfa_backing_config bc = { .populate = true };

	/* the guest plus slack, and as much again as fragment_pool pins (half of the
	 * first 2 x FRAGMENT_MAX): the guest fits exactly in what stays free */
	gfa_pool_config_init(&pc, (pool_bytes(m->mem) + 8 * MIB) >> GFA_FRAME_SHIFT);
	m->pool = gfa_pool_create(&pc);
	m->backing = m->pool ? gfa_backing_create(m->pool, &bc) : NULL;
	return m->backing ? 0 : -errno;
}

/*
 * Pin every other frame of the pool's first 2 x FRAGMENT_MAX (all of it for guests up to
 * FRAGMENT_MAX) to an owner whose blocks cannot move: no free block above 4 KiB is left
 * there.  Returns the pinned pfns; main frees them once the guest exists.
 */
static uint64_t *fragment_pool(struct vmm *m, size_t *n)
{
	uint64_t start, frames, *pfns, span = 2 * FRAGMENT_MAX >> GFA_FRAME_SHIFT;
	size_t all = 0;
	int64_t pfn;

	gfa_zone_span(m->pool, 0, &start, &frames);
	pfns = calloc(frames, sizeof(*pfns));
	while (pfns && all < frames &&
	       (pfn = gfa_alloc(m->pool, 0, 0, GFA_MT_MOVABLE, BALLAST_OWNER,
				GFA_ALLOC_NOCOMPACT)) >= 0)
		pfns[all++] = (uint64_t)pfn;
	*n = 0;
	for (size_t i = 0; i < all; i++) {
		if ((pfns[i] & 1) && pfns[i] - start < span)
			pfns[(*n)++] = pfns[i]; /* odd frames stay pinned */
		else
			gfa_free(m->pool, pfns[i], 0, BALLAST_OWNER);
	}
	return pfns;
}

/* ---- the guest's RAM and KVM ---- */

/* gfa calls these around every move of the guest's frames. */
static int pause_vcpus(void *ctx)
{
	struct vmm *m = ctx;

	/* while kvm_setup writes page tables and code through the window, and the vcpu
	 * array, gfa must not move the frames under it: refuse */
	if (!atomic_load(&m->vcpus_ready))
		return -EBUSY;
	for (unsigned int i = 0; i < m->nr_vcpus; i++) {
		/* returns once out of the guest */
		if (!gfa_kvm_vcpu_pause(m->vcpu[i].kvcpu))
			continue;
		while (i--) /* refuse the move; resume stays matched */
			gfa_kvm_vcpu_resume(m->vcpu[i].kvcpu);
		return -EBUSY;
	}
	atomic_fetch_add(&m->pauses, 1);
	return 0;
}

static int resume_vcpus(void *ctx)
{
	struct vmm *m = ctx;

	for (unsigned int i = 0; i < m->nr_vcpus; i++)
		gfa_kvm_vcpu_resume(m->vcpu[i].kvcpu);
	return 0;
}

static const struct gfa_guest_vcpu_ops vcpu_ops = { pause_vcpus, resume_vcpus };

static int kvm_setup(struct vmm *m, uint64_t work)
{
	/* the ops come with the guest: gfa may move its frames from the moment it exists */
	struct gfa_guest_config gc = { .mem_bytes = m->mem, .vcpu_ops = &vcpu_ops, .vcpu_ctx = m };
	uint64_t per;

	m->guest = gfa_guest_create(m->pool, m->backing, &gc);
	m->kvm = m->guest ? gfa_kvm_vm_create() : NULL;
	if (!m->kvm)
		return -errno;
	/* GPA 0 is byte 0 of the window, both 2 MiB aligned, so KVM can map 2 MiB pages.
	 * gfa remaps blocks inside the window (mmap MAP_FIXED); KVM follows by itself. */
	if (gfa_kvm_set_memslot(m->kvm, 0, 0, gfa_guest_hva(m->guest), m->mem, 0) ||
	    gfa_kvm_vm_build_page_tables(m->kvm, 0, m->mem))
		return -EIO;
	m->code_gpa = (gfa_kvm_boot_area_size(m->mem) + 4095) & ~4095ULL;
	if (gfa_kvm_test_guest_load(m->kvm, m->code_gpa))
		return -EIO;
	/* the first 2 MiB hold GDT, page tables and code; the vCPUs share the rest */
	per = ((m->mem - 2 * MIB) / m->nr_vcpus) & ~4095ULL;
	for (unsigned int i = 0; i < m->nr_vcpus; i++) {
		struct vcpu *v = &m->vcpu[i];

		v->vmm = m;
		v->id = i;
		v->start = 2 * MIB + i * per;
		v->end = v->start + (work && work < per ? work : per);
		v->kvcpu = gfa_kvm_vcpu_create(m->kvm, i);
		if (!v->kvcpu)
			return -errno;
	}
	atomic_store(&m->vcpus_ready, true);
	return 0;
}

/* ---- vCPU threads and port IO ---- */

/* A 64-bit result: first the fill checksum, then a mismatch count per verify pass. */
static int vcpu_result(struct vcpu *v, uint64_t value)
{
	unsigned int pass, stop;

	if (v->nr_results++ == 0) {
		if (value == gfa_kvm_test_pattern_sum(v->start, v->end, SEED))
			return GFA_KVM_IO_CONTINUE;
		fprintf(stderr, "minivmm: vcpu %u: wrong fill checksum\n", v->id);
		return -EIO;
	}
	v->mismatches += value;
	pass = atomic_fetch_add(&v->passes, 1) + 1;
	stop = atomic_load(&v->stop_at);
	return stop && pass >= stop ? GFA_KVM_IO_STOP : GFA_KVM_IO_CONTINUE;
}

/*
 * Port IO from the guest, on the vCPU's thread.  It must not wait for the guest's
 * lock (e.g. gfa_guest_gpa_to_pfn): on the pause fallback a move holds it while waiting
 * for us to pause.
 */
static int vcpu_io(struct gfa_kvm_vcpu *kvcpu, const struct gfa_kvm_io *io, void *ctx)
{
	struct vcpu *v = ctx;
	uint32_t val = gfa_kvm_io_value(io);

	(void)kvcpu;
	if (!io->out || io->size != 4)
		return -EPROTO;
	switch (io->port) {
	case GFA_KVM_PORT_RESULT_LO:
		v->lo = val;
		return GFA_KVM_IO_CONTINUE;
	case GFA_KVM_PORT_RESULT_HI:
		return vcpu_result(v, (uint64_t)val << 32 | v->lo);
	case GFA_KVM_PORT_CHECKPOINT: /* the fill is done, the verify loop starts */
		return GFA_KVM_IO_CONTINUE;
	default:
		return -EPROTO;
	}
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *v = arg;
	struct vmm *m = v->vmm;
	/* Each vCPU thread allocates through a gfa cache of its own (demand faults,
	 * balloon deflate, per-vCPU pages), never taking the zone lock on the hot path.
	 * Here: one per-vCPU page (say, for steal time), given back at exit. */
	struct gfa_pcp *pcp = gfa_pcp_create(m->pool, 0);
	int64_t page = pcp ? gfa_pcp_alloc(pcp, 0, GFA_MT_UNMOVABLE, VMM_OWNER, 0) : -ENOMEM;

	if (page >= 0)
		memset(gfa_pfn_to_addr(m->pool, (uint64_t)page), 0, GFA_FRAME_SIZE);
	v->err = page < 0 ? (int)page :
			    gfa_kvm_test_guest_enter(v->kvcpu, m->code_gpa, v->start, v->end, SEED,
						     GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY |
							     GFA_KVM_TEST_LOOP);
	while (!v->err) {
		int r = gfa_kvm_vcpu_run(v->kvcpu, vcpu_io, v);

		if (r == GFA_KVM_RUN_STOPPED)
			break; /* vcpu_io said stop */
		if (r < 0)
			v->err = r; /* gfa_kvm printed why */
	}
	if (page >= 0)
		gfa_pcp_free(pcp, (uint64_t)page, 0, VMM_OWNER);
	gfa_pcp_destroy(pcp);
	return NULL;
}

/* ---- moving the guest's frames while it runs ---- */

static void maintain(struct vmm *m)
{
	struct gfa_guest_stat st;
	int collapsed;

	for (unsigned int i = 0; i < m->nr_vcpus; i++) /* all filled and verified once */
		while (!m->vcpu[i].err && atomic_load(&m->vcpu[i].passes) < 1)
			sched_yield();
	gfa_compact_zone(m->pool, 0, -1, GFA_COMPACT_SYNC);   /* kcompactd's job */
	collapsed = gfa_guest_collapse(m->guest, UINT32_MAX); /* khugepaged's job */
	gfa_guest_stat(m->guest, &st);
	printf("while the guest ran: full compaction, %d ranges collapsed into 2 MiB "
	       "blocks, vCPUs paused %lu times (%s)\n",
	       collapsed, atomic_load(&m->pauses),
	       st.wp_errno ? "the pause fallback" : "write-protected moves");
	/* stop each vCPU after a pass that started after the last move */
	for (unsigned int i = 0; i < m->nr_vcpus; i++)
		atomic_store(&m->vcpu[i].stop_at, atomic_load(&m->vcpu[i].passes) + 2);
}

/* ---- what happened ---- */

static int report(struct vmm *m)
{
	struct gfa_guest_stat st;
	uint64_t p4k = 0, p2m = 0, bad = 0;
	char buf[4096];
	int err = 0;

	for (unsigned int i = 0; i < m->nr_vcpus; i++) {
		struct vcpu *v = &m->vcpu[i];

		printf("vcpu %u: [%#llx, %#llx) %u verify passes, %llu mismatches%s\n", i,
		       (unsigned long long)v->start, (unsigned long long)v->end,
		       atomic_load(&v->passes), (unsigned long long)v->mismatches,
		       v->err ? " ERROR" : "");
		bad += v->mismatches;
		err = err ? err : v->err;
	}
	gfa_guest_stat(m->guest, &st);
	printf("guest: %llu of %llu ranges on 2 MiB blocks, %llu blocks, %llu moves, "
	       "%llu collapses\n",
	       (unsigned long long)st.huge_ranges,
	       (unsigned long long)(st.huge_ranges + st.small_ranges),
	       (unsigned long long)st.blocks, (unsigned long long)st.moves,
	       (unsigned long long)st.collapses);
	/* KVM maps 2 MiB pages where the host maps the window with a PMD */
	gfa_kvm_vm_stat(m->kvm, "pages_4k", &p4k);
	gfa_kvm_vm_stat(m->kvm, "pages_2m", &p2m);
	printf("kvm: pages_4k %llu pages_2m %llu; host: %lld of %llu bytes PMD-mapped\n",
	       (unsigned long long)p4k, (unsigned long long)p2m,
	       (long long)gfa_smaps_pmd_bytes(gfa_guest_hva(m->guest), m->mem),
	       (unsigned long long)m->mem);
	gfa_pool_buddyinfo(m->pool, buf, sizeof(buf));
	printf("buddyinfo:\n%s", buf);
	if (gfa_pool_check(m->pool, buf, sizeof(buf))) {
		printf("pool check: %s\n", buf);
		err = -EUCLEAN;
	}
	printf("minivmm: %s\n", !err && !bad ? "ok" : "FAILED");
	return !err && !bad ? 0 : 1;
}

static void teardown(struct vmm *m)
{
	/* no more pauses first (a move in flight finishes before this returns), then
	 * the vCPUs, the VM with its memslot, and only then the RAM */
	gfa_guest_forget_vcpus(m->guest);
	for (unsigned int i = 0; i < m->nr_vcpus; i++)
		gfa_kvm_vcpu_destroy(m->vcpu[i].kvcpu);
	gfa_kvm_vm_destroy(m->kvm);
	gfa_guest_destroy(m->guest);
	gfa_backing_destroy(m->backing);
	gfa_pool_destroy(m->pool);
}

static int usage(void)
{
	fprintf(stderr,
		"usage: minivmm [--mem MIB] [--vcpus N] [--no-fragment]\n"
		"  --mem MIB      guest RAM: even, 4..65536 (default 16), as far as host RAM\n"
		"                 holds it (the pool takes it plus up to 72 MiB)\n"
		"  --vcpus N      1..%d (default 2)\n"
		"  --no-fragment  start on a fresh pool, on 2 MiB blocks\n"
		"exit status: 0 ok, 1 failure, 2 usage, 77 no usable KVM\n",
		MAX_VCPUS);
	return 2;
}

/* The options into m and *fragment; 0, or usage()'s status. */
static int parse_args(int argc, char **argv, struct vmm *m, bool *fragment)
{
	static const struct option opts[] = {
		{ "mem", required_argument, NULL, 'm' },
		{ "vcpus", required_argument, NULL, 'c' },
		{ "no-fragment", no_argument, NULL, 'F' },
		{ 0 },
	};
	char *end;
	int opt;

	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		unsigned long v = optarg ? strtoul(optarg, &end, 10) : 0;

		/* digits only: strtoul takes "-1" (as ULONG_MAX), spaces and '+' */
		if (optarg && (*end || *optarg < '0' || *optarg > '9'))
			return usage();
		if (opt == 'm' && v >= 4 && v % 2 == 0 && v <= 65536)
			m->mem = v * MIB;
		else if (opt == 'c' && v >= 1 && v <= MAX_VCPUS)
			m->nr_vcpus = (unsigned int)v;
		else if (opt == 'F')
			*fragment = false;
		else
			return usage();
	}
	return optind != argc ? usage() : 0;
}

/* Whether this host can run m: 0, or the exit status (1: too little memory, 77: no KVM). */
static int host_check(const struct vmm *m, uint64_t *work)
{
	struct gfa_thp_report thp;
	char why[256];

	/* memfd pages are faulted in at start: a pool the host cannot hold ends in OOM */
	if (pool_bytes(m->mem) + 8 * MIB >
	    (uint64_t)sysconf(_SC_PHYS_PAGES) / 4 * 3 * (uint64_t)sysconf(_SC_PAGESIZE)) {
		fprintf(stderr,
			"minivmm: --mem %llu needs %llu MiB of host memory; this host "
			"has %llu MiB\n",
			(unsigned long long)(m->mem / MIB),
			(unsigned long long)((pool_bytes(m->mem) + 8 * MIB) / MIB),
			(unsigned long long)((uint64_t)sysconf(_SC_PHYS_PAGES) *
					     (uint64_t)sysconf(_SC_PAGESIZE) / MIB));
		return 1;
	}
	if (!gfa_kvm_available(why, sizeof(why))) {
		fprintf(stderr, "minivmm: no usable KVM: %s\n", why);
		return 77;
	}
	/* kvm_pvm emulates guest code at about a million instructions a second */
	*work = gfa_kvm_is_software() ? 64 << 10 : 0;
	gfa_host_thp_report(&thp);
	printf("minivmm: %llu MiB guest, %u vCPUs, %s KVM%s, host shmem THP: %s\n",
	       (unsigned long long)(m->mem / MIB), m->nr_vcpus, *work ? "software" : "hardware",
	       *work ? " (guest work limited to 64 KiB per vCPU)" : "", thp.shmem_enabled);
	return 0;
}

int main(int argc, char **argv)
{
	static struct vmm m = { .mem = 16 * MIB, .nr_vcpus = 2 };
	uint64_t *pinned = NULL, work = 0;
	bool fragment = true;
	size_t nr_pinned = 0;
	int err, ret;

	ret = parse_args(argc, argv, &m, &fragment);
	if (!ret)
		ret = host_check(&m, &work);
	if (ret)
		return ret;
	err = host_setup(&m);
	if (!err && fragment)
		pinned = fragment_pool(&m, &nr_pinned);
	if (!err)
		err = kvm_setup(&m, work);
	for (size_t i = 0; i < nr_pinned; i++) /* the other tenant leaves: room to compact */
		gfa_free(m.pool, pinned[i], 0, BALLAST_OWNER);
	free(pinned);
	if (err) {
		fprintf(stderr, "minivmm: setup failed: %s\n", strerror(-err));
		teardown(&m);
		return 1;
	}
	for (unsigned int i = 0; i < m.nr_vcpus; i++) {
		struct vcpu *v = &m.vcpu[i];

		v->started = !pthread_create(&v->thread, NULL, vcpu_thread, v);
		if (!v->started)
			v->err = -EAGAIN;
	}
	maintain(&m);
	for (unsigned int i = 0; i < m.nr_vcpus; i++)
		if (m.vcpu[i].started)
			pthread_join(m.vcpu[i].thread, NULL);
	ret = report(&m);
	teardown(&m);
	return ret;
}
