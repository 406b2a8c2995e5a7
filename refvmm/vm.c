// SPDX-License-Identifier: MIT
/*
 * A VM = a gfa_guest (its RAM) + vCPUs.  With /dev/kvm the vCPUs are KVM vCPUs running
 * the test guest in 64-bit mode on identity-mapped 2 MiB pages; without it host threads
 * run the same workload on the guest window, and gfa_vm_is_kvm() says so.  The KVM side
 * (VM, vCPUs, the window with its memslot) comes from a shell (refvmm/shell.c) and goes
 * back to the shells' pool when the VM is destroyed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "refvmm/shell.h"

#define MAX_VCPUS GFA_VM_MAX_VCPUS

struct vm_vcpu {
	struct gfa_vm *vm;
	unsigned int id;
	struct gfa_kvm_vcpu *kvcpu;
	struct gfa_pcp *pcp;
	uint64_t start, end; /* GPA range of the current run */
	uint64_t slice_end;  /* end of the vCPU's whole slice */
	uint32_t flags;
	uint64_t seed, sum, mismatches;
	int err;
};

struct gfa_vm {
	struct gfa_pool *pool;
	struct gfa_guest *guest;
	struct gfa_kvm_vm *kvm;
	struct vm_shell *shell; /* the KVM VM, vCPUs and window (KVM mode) */
	const char *why_not_kvm;
	char why_buf[160];
	unsigned int nr_vcpus;
	/* set once every KVM vCPU exists: until then a move is refused (the vcpu array
	 * is still being written), after gfa_guest_forget_vcpus nothing pauses */
	atomic_bool vcpus_ready;
	uint64_t code_gpa;
	bool lazy; /* its guest is GFA_GUEST_LAZY */
	struct vm_vcpu vcpu[MAX_VCPUS];
	/* thread-mode pause: workers check `paused` between chunks */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int paused, active;
};

/* ---- pausing vCPUs around frame moves ---- */

static int vm_pause(void *ctx)
{
	struct gfa_vm *vm = ctx;

	if (!atomic_load_explicit(&vm->vcpus_ready, memory_order_acquire))
		return -EBUSY; /* still being created: its page tables are being written */
	if (vm->kvm) {
		for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
			if (!gfa_kvm_vcpu_pause(vm->vcpu[i].kvcpu))
				continue;
			/* (a vCPU's own thread, or too many pauses): refuse the move, and
			 * resume only what this call paused, so resume stays matched */
			while (i--)
				gfa_kvm_vcpu_resume(vm->vcpu[i].kvcpu);
			return -EBUSY;
		}
		return 0;
	}
	pthread_mutex_lock(&vm->lock);
	vm->paused++;
	while (vm->active)
		pthread_cond_wait(&vm->cond, &vm->lock);
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

static int vm_resume(void *ctx)
{
	struct gfa_vm *vm = ctx;

	if (vm->kvm) {
		for (unsigned int i = 0; i < vm->nr_vcpus; i++)
			gfa_kvm_vcpu_resume(vm->vcpu[i].kvcpu);
		return 0;
	}
	pthread_mutex_lock(&vm->lock);
	vm->paused--;
	pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

static const struct gfa_guest_vcpu_ops vm_vcpu_ops = { vm_pause, vm_resume };

/* ---- thread-mode workload: the test guest's algorithm on the host ---- */

static void chunk_enter(struct gfa_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	while (vm->paused)
		pthread_cond_wait(&vm->cond, &vm->lock);
	vm->active++;
	pthread_mutex_unlock(&vm->lock);
}

static void chunk_leave(struct gfa_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	if (!--vm->active)
		pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
}

static void thread_workload(struct vm_vcpu *v)
{
	char *ram = gfa_guest_hva(v->vm->guest);
	const uint64_t chunk = 64 << 10;
	uint64_t sum = 0, bad = 0;

	/* as the test guest: a FILL pass, then (FILL|VERIFY or VERIFY) a VERIFY pass */
	for (int pass = 0; pass < 2; pass++) {
		bool fill = pass == 0;

		if (!(v->flags & (fill ? GFA_KVM_TEST_FILL : GFA_KVM_TEST_VERIFY)))
			continue;
		for (uint64_t c = v->start; c < v->end; c += chunk) {
			uint64_t e = c + chunk < v->end ? c + chunk : v->end;

			chunk_enter(v->vm);
			for (uint64_t p = c; p < e; p += 8) {
				uint64_t *w = (uint64_t *)(ram + p);

				if (fill) {
					*w = p ^ v->seed;
					sum = ((sum << 1) | (sum >> 63)) + (p ^ v->seed);
				} else if (*w != (p ^ v->seed)) {
					bad++;
				}
			}
			chunk_leave(v->vm);
		}
	}
	v->sum = sum;
	v->mismatches = bad;
}

/* ---- KVM-mode workload ---- */

static void kvm_workload(struct vm_vcpu *v)
{
	struct gfa_kvm_test_ctx ctx;
	int ret;

	memset(&ctx, 0, sizeof(ctx));
	/* no checkpoint handler: VERIFY stops at checkpoint 1 and the loop below runs on */
	v->err = gfa_kvm_test_guest_enter(v->kvcpu, v->vm->code_gpa, v->start, v->end, v->seed,
					  v->flags);
	while (!v->err) {
		ret = gfa_kvm_vcpu_run(v->kvcpu, gfa_kvm_test_io, &ctx);
		if (ret < 0)
			v->err = ret;
		if (ret == GFA_KVM_RUN_HLT || ctx.done)
			break;
	}
	if (v->err)
		return;
	if (v->flags & GFA_KVM_TEST_FILL) {
		v->sum = ctx.nr_results ? ctx.results[0] : 0;
		if (v->flags & GFA_KVM_TEST_VERIFY)
			v->mismatches = ctx.nr_results > 1 ? ctx.results[1] : 0;
	} else {
		v->mismatches = ctx.nr_results ? ctx.results[0] : 0;
	}
}

static void *vcpu_main(void *arg)
{
	struct vm_vcpu *v = arg;
	int tid = gettid();
	/* a lazy guest serves this thread's first touches from its own cache */
	bool cached = v->vm->lazy && !gfa_guest_vcpu_cache(v->vm->guest, tid, v->pcp);

	if (v->vm->kvm)
		kvm_workload(v);
	else
		thread_workload(v);
	if (cached)
		gfa_guest_vcpu_cache(v->vm->guest, tid, NULL);
	return NULL;
}

int gfa_kvm_is_software(void)
{
	return !access("/sys/module/kvm_pvm", F_OK);
}

int gfa_vm_run(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t *mismatches)
{
	return gfa_vm_run_part(vm, flags, seed, 0, mismatches);
}

int gfa_vm_run_part(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t bytes,
		    uint64_t *mismatches)
{
	pthread_t t[MAX_VCPUS];
	unsigned int started = 0;
	uint64_t bad = 0;
	int err = 0;

	if (!vm)
		return -EFAULT;
	if (!flags || (flags & ~(GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY)))
		return -EINVAL;
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		struct vm_vcpu *v = &vm->vcpu[i];

		v->flags = flags;
		v->seed = seed;
		v->end = v->slice_end;
		/* lengths, not ends: start + bytes may wrap (then the whole slice); whole
		 * words, rounded up (bytes < slice, so + 7 cannot wrap) */
		if (bytes && bytes < v->slice_end - v->start)
			v->end = v->start + ((bytes + 7) & ~7ULL);
		if (v->end > v->slice_end)
			v->end = v->slice_end;
		v->sum = v->mismatches = 0;
		v->err = 0;
		if (pthread_create(&t[i], NULL, vcpu_main, v)) {
			err = -EAGAIN;
			break;
		}
		started++;
	}
	for (unsigned int i = 0; i < started; i++) {
		struct vm_vcpu *v = &vm->vcpu[i];

		pthread_join(t[i], NULL);
		if (v->err && !err)
			err = v->err;
		if ((flags & GFA_KVM_TEST_FILL) && !v->err &&
		    v->sum != gfa_kvm_test_pattern_sum(v->start, v->end, seed) && !err)
			err = -EIO;
		bad += v->mismatches;
	}
	if (mismatches)
		*mismatches = bad;
	return err;
}

/* ---- creation ---- */

/*
 * The identity map and the test guest live below GFA_VM_RAM_START, where vCPU 0's slice
 * starts: above 508 GiB they would not fit (FILL would overwrite them).
 */
static bool vm_kvm_fits(uint64_t size)
{
	uint64_t boot = gfa_kvm_boot_area_size(size);

	return boot && ((boot + 4095) & ~4095ULL) + gfa_kvm_test_guest_size <= GFA_VM_RAM_START;
}

/* KVM mode: a shell (KVM VM, vCPUs, window with its memslot) for the guest to go in. */
static int vm_take_shell(struct gfa_vm *vm, uint64_t size)
{
	char why[128];

	if (!gfa_kvm_available(why, sizeof(why))) {
		snprintf(vm->why_buf, sizeof(vm->why_buf), "no KVM: %s", why);
		vm->why_not_kvm = vm->why_buf;
		return -ENODEV;
	}
	if (!vm_kvm_fits(size)) {
		snprintf(vm->why_buf, sizeof(vm->why_buf),
			 "%llu MiB is too large for the test "
			 "guest's identity map below %llu MiB",
			 (unsigned long long)(size >> 20),
			 (unsigned long long)(GFA_VM_RAM_START >> 20));
		vm->why_not_kvm = vm->why_buf;
		return -EFBIG;
	}
	vm->shell = vm_shell_get(size, vm->nr_vcpus);
	return vm->shell ? 0 : -errno;
}

/*
 * Page tables and code are written through the guest window while the vCPU ops refuse
 * every move (vcpus_ready is not set yet), so no move (copy, then remap) runs
 * meanwhile and loses them.
 */
static int vm_setup_kvm(struct gfa_vm *vm, uint64_t size)
{
	uint64_t boot = gfa_kvm_boot_area_size(size);
	int err;

	vm->kvm = vm->shell->kvm;
	vm->code_gpa = (boot + 4095) & ~4095ULL;
	err = gfa_kvm_vm_build_page_tables(vm->kvm, 0, size);
	if (!err)
		err = gfa_kvm_test_guest_load(vm->kvm, vm->code_gpa);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		vm->vcpu[i].kvcpu = vm->shell->vcpu[i];
	return err;
}

static void vm_split_slices(struct gfa_vm *vm, uint64_t size)
{
	uint64_t span = size - GFA_VM_RAM_START;
	uint64_t per = (span / vm->nr_vcpus) & ~4095ULL;

	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		vm->vcpu[i].vm = vm;
		vm->vcpu[i].id = i;
		vm->vcpu[i].start = GFA_VM_RAM_START + per * i;
		vm->vcpu[i].end = i + 1 == vm->nr_vcpus ? size : vm->vcpu[i].start + per;
		vm->vcpu[i].slice_end = vm->vcpu[i].end;
	}
}

struct gfa_vm *gfa_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
			     const struct gfa_vm_config *cfg)
{
	struct gfa_guest_config gc;
	struct gfa_guest_lazy restore = { .flags = GFA_LAZY_FILL_FD };
	struct gfa_vm *vm;
	int err = 0;

	if (!pool || !b || !cfg) {
		errno = EFAULT;
		return NULL;
	}
	if (cfg->mem_bytes < 2 * GFA_VM_RAM_START || cfg->mem_bytes % (2ULL << 20) || !cfg->vcpus ||
	    cfg->vcpus > MAX_VCPUS || (unsigned int)cfg->kvm > GFA_VM_KVM_OFF) {
		errno = EINVAL;
		return NULL;
	}
	if (cfg->kvm == GFA_VM_KVM_ON && !vm_kvm_fits(cfg->mem_bytes)) {
		errno = EFBIG; /* before any frame is taken */
		return NULL;
	}
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->pool = pool;
	vm->nr_vcpus = cfg->vcpus;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_cond_init(&vm->cond, NULL);
	if (cfg->kvm != GFA_VM_KVM_OFF) {
		err = vm_take_shell(vm, cfg->mem_bytes);
		if ((err == -ENODEV || err == -EFBIG) && cfg->kvm == GFA_VM_KVM_AUTO)
			err = 0; /* host threads instead */
		if (err)
			goto fail;
	} else {
		vm->why_not_kvm = "KVM turned off by configuration";
	}
	memset(&gc, 0, sizeof(gc));
	restore.fill_fd = cfg->restore_fd;
	gc.mem_bytes = cfg->mem_bytes;
	gc.zone = cfg->zone;
	gc.pcp = cfg->pcp;
	gc.vcpu_ops = &vm_vcpu_ops;
	gc.vcpu_ctx = vm;
	gc.small_only = cfg->small_only;
	gc.flags = cfg->lazy || cfg->restore ? GFA_GUEST_LAZY : 0;
	gc.lazy = cfg->restore ? &restore : NULL;
	vm->lazy = gc.flags & GFA_GUEST_LAZY;
	gc.window = vm->shell ? vm->shell->win : NULL;
	vm->guest = gfa_guest_create(pool, b, &gc);
	if (!vm->guest) {
		err = -errno;
		goto fail;
	}
	vm_split_slices(vm, cfg->mem_bytes);
	if (vm->shell) {
		err = vm_setup_kvm(vm, cfg->mem_bytes);
		if (err)
			goto fail;
	}
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		/* each vCPU's cache, for the VMM's per-vCPU allocations (balloon, devices) */
		vm->vcpu[i].pcp = gfa_pcp_create(pool, cfg->zone);
		if (!vm->vcpu[i].pcp) {
			err = -errno;
			goto fail;
		}
	}
	atomic_store_explicit(&vm->vcpus_ready, true, memory_order_release);
	return vm;
fail:
	gfa_vm_destroy(vm);
	errno = -err;
	return NULL;
}

void gfa_vm_destroy(struct gfa_vm *vm)
{
	if (!vm)
		return;
	/* first: a compaction moving one of our blocks must not pause freed vCPUs */
	gfa_guest_forget_vcpus(vm->guest);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		gfa_pcp_destroy(vm->vcpu[i].pcp);
	/* the window maps no frame once the guest is gone: then the shell can serve the
	 * next VM (its vCPUs reset) */
	gfa_guest_destroy(vm->guest);
	vm_shell_put(vm->shell);
	pthread_mutex_destroy(&vm->lock);
	pthread_cond_destroy(&vm->cond);
	free(vm);
}

struct gfa_guest *gfa_vm_guest(struct gfa_vm *vm)
{
	return vm ? vm->guest : NULL;
}

bool gfa_vm_is_kvm(const struct gfa_vm *vm, const char **why)
{
	if (why)
		*why = vm && !vm->kvm ? vm->why_not_kvm : NULL;
	return vm && vm->kvm;
}

struct gfa_kvm_vcpu *gfa_vm_kvm_vcpu(struct gfa_vm *vm, unsigned int i)
{
	return vm && vm->kvm && i < vm->nr_vcpus ? vm->vcpu[i].kvcpu : NULL;
}

int gfa_vm_kvm_pages(struct gfa_vm *vm, uint64_t *pages_4k, uint64_t *pages_2m)
{
	int err;

	if (!vm || !pages_4k || !pages_2m)
		return -EFAULT;
	if (!vm->kvm)
		return -EOPNOTSUPP;
	err = gfa_kvm_vm_stat(vm->kvm, "pages_4k", pages_4k);
	return err ? err : gfa_kvm_vm_stat(vm->kvm, "pages_2m", pages_2m);
}
