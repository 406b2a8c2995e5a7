// SPDX-License-Identifier: MIT
/*
 * Tests for the KVM plumbing (refvmm/kvm.c, refvmm/kvm_guestcode.c) with real guests.
 *
 * Suite "kvm" needs a working /dev/kvm.  Where there is none, suite "kvm_qemu"
 * boots a QEMU TCG guest with tools/kvm-in-qemu.sh and runs suite "kvm" inside it
 * (GFA_IN_QEMU=1 there; inside, missing KVM is a failure, not a skip).  One more
 * kvm_qemu test always boots the harness once to prove it works.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gfa/refvmm.h>
#include "tests/qemu_util.h"
#include "common/compiler.h"

extern char **environ;

#define KVMT_MIB      (1ULL << 20)
#define KVMT_HUGE     (2 * KVMT_MIB)
#define KVMT_BOOT_GPA 0x0ULL
#define KVMT_CODE_GPA 0x10000ULL
#define KVMT_DATA_GPA KVMT_HUGE /* pattern ranges start at 2 MiB */

/* ---- guest RAM: anonymous or memfd-backed, 2 MiB aligned ------------------- */

struct kvmt_ram {
	char *hva; /* the window the memslot points at */
	uint64_t size;
	char *raw; /* the whole reservation (for munmap) */
	uint64_t raw_size;
	int memfd;    /* -1 for anonymous memory */
	uint64_t off; /* memfd offset currently mapped at hva */
};

/* Reserve size + 2 MiB and return the 2 MiB-aligned start inside it. */
static char *kvmt_reserve(struct kvmt_ram *r, uint64_t size)
{
	r->raw_size = size + KVMT_HUGE;
	r->raw = mmap(NULL, r->raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		      0);
	cr_assert_neq(r->raw, MAP_FAILED, "mmap reserve: %s", strerror(errno));
	r->size = size;
	return (char *)(((uintptr_t)r->raw + KVMT_HUGE - 1) & ~(uintptr_t)(KVMT_HUGE - 1));
}

static void kvmt_ram_anon(struct kvmt_ram *r, uint64_t size)
{
	char *want = kvmt_reserve(r, size);

	r->memfd = -1;
	r->hva = mmap(want, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		      -1, 0);
	cr_assert_eq(r->hva, want, "mmap ram: %s", strerror(errno));
	madvise(r->hva, size, MADV_HUGEPAGE); /* best effort: THP may be off */
}

/* memfd of twice the size, so the frames can be "moved" to the other half. */
static void kvmt_ram_memfd(struct kvmt_ram *r, uint64_t size)
{
	char *want = kvmt_reserve(r, size);

	r->memfd = memfd_create("gfa-test-kvm", MFD_CLOEXEC);
	cr_assert_geq(r->memfd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(ftruncate(r->memfd, (off_t)(2 * size)), 0);
	r->off = 0;
	r->hva = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->memfd, 0);
	cr_assert_eq(r->hva, want, "mmap memfd: %s", strerror(errno));
}

static void kvmt_ram_free(struct kvmt_ram *r)
{
	munmap(r->raw, r->raw_size);
	if (r->memfd >= 0)
		close(r->memfd);
}

/*
 * What the VMM does when it moves a guest's frames: copy them to other frames and
 * map those into the same window with MAP_FIXED.  The old frames are then poisoned
 * so a guest still reading them would see garbage.
 */
static void kvmt_move_frames(struct kvmt_ram *r)
{
	uint64_t dst = r->off ? 0 : r->size;
	char *tmp, *win;

	tmp = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, (off_t)dst);
	cr_assert_neq(tmp, MAP_FAILED);
	memcpy(tmp, r->hva, r->size);
	munmap(tmp, r->size);
	win = mmap(r->hva, r->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->memfd,
		   (off_t)dst);
	cr_assert_eq(win, r->hva, "remap window: %s", strerror(errno));
	tmp = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, (off_t)r->off);
	cr_assert_neq(tmp, MAP_FAILED);
	memset(tmp, 0xa5, r->size);
	munmap(tmp, r->size);
	r->off = dst;
}

/* ---- environment ------------------------------------------------------------ */

static void kvmt_require_kvm(void)
{
	char why[256];

	if (gfa_kvm_available(why, sizeof(why)))
		return;
	if (getenv("GFA_IN_QEMU"))
		cr_assert_fail("inside the QEMU harness, but KVM is unusable: %s", why);
	fprintf(stderr, "kvm: skipped: %s (kvm_qemu/rerun_without_dev_kvm runs these in QEMU)\n",
		why);
	cr_skip_test("no usable KVM: %s; kvm_qemu/rerun_without_dev_kvm runs suite kvm in QEMU",
		     why);
}

/* ---- a VM with one slot of RAM at GPA 0, page tables and the test guest ----- */

struct kvmt_vm {
	struct gfa_kvm_vm *vm;
	struct kvmt_ram ram;
};

static void kvmt_vm_setup(struct kvmt_vm *t, uint64_t ram_size, bool memfd)
{
	int r;

	if (memfd)
		kvmt_ram_memfd(&t->ram, ram_size);
	else
		kvmt_ram_anon(&t->ram, ram_size);
	t->vm = gfa_kvm_vm_create();
	cr_assert_not_null(t->vm, "gfa_kvm_vm_create: %s", strerror(errno));
	r = gfa_kvm_set_memslot(t->vm, 0, 0, t->ram.hva, ram_size, 0);
	cr_assert_eq(r, 0, "set_memslot: %s", strerror(-r));
	r = gfa_kvm_vm_build_page_tables(t->vm, KVMT_BOOT_GPA, ram_size);
	cr_assert_eq(r, 0, "build_page_tables: %s", strerror(-r));
	r = gfa_kvm_test_guest_load(t->vm, KVMT_CODE_GPA);
	cr_assert_eq(r, 0, "test_guest_load: %s", strerror(-r));
}

static void kvmt_vm_teardown(struct kvmt_vm *t)
{
	cr_assert_eq(gfa_kvm_vm_destroy(t->vm), 0);
	kvmt_ram_free(&t->ram);
}

/* The checksum computed from what the guest left in memory, checking every word. */
static uint64_t kvmt_sum_from_memory(struct kvmt_vm *t, uint64_t start, uint64_t end, uint64_t seed)
{
	const uint64_t *w = (const uint64_t *)(t->ram.hva + start);
	uint64_t sum = 0, bad = 0;

	for (uint64_t p = start; p < end; p += 8, w++) {
		bad += *w != (p ^ seed);
		sum = ((sum << 1) | (sum >> 63)) + *w;
	}
	cr_assert_eq(bad, 0, "%llu words in [0x%llx, 0x%llx) differ from gpa ^ seed",
		     (unsigned long long)bad, (unsigned long long)start, (unsigned long long)end);
	return sum;
}

static struct gfa_kvm_vcpu *kvmt_vcpu(struct kvmt_vm *t, unsigned int id, uint64_t start,
				      uint64_t end, uint64_t seed, uint32_t flags)
{
	struct gfa_kvm_vcpu *vcpu = gfa_kvm_vcpu_create(t->vm, id);
	int r;

	cr_assert_not_null(vcpu, "vcpu_create(%u): %s", id, strerror(errno));
	r = gfa_kvm_test_guest_enter(vcpu, KVMT_CODE_GPA, start, end, seed, flags);
	cr_assert_eq(r, 0, "test_guest_enter: %s", strerror(-r));
	return vcpu;
}

/* ---- suite kvm -------------------------------------------------------------- */

Test(kvm, pattern_checksum)
{
	const uint64_t ram = 4 * KVMT_MIB, seed = 0x9e3779b97f4a7c15ULL;
	struct gfa_kvm_test_ctx ctx = { 0 };
	struct gfa_kvm_vcpu *vcpu;
	struct kvmt_vm t;
	uint64_t exits = 0;
	int r;

	kvmt_require_kvm();
	kvmt_vm_setup(&t, ram, false);
	vcpu = kvmt_vcpu(&t, 0, KVMT_DATA_GPA, ram, seed, GFA_KVM_TEST_FILL);

	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_HLT, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert(ctx.done);
	cr_assert_eq(ctx.status, 0);
	cr_assert_eq(ctx.nr_results, 1);
	cr_assert_eq(ctx.results[0], kvmt_sum_from_memory(&t, KVMT_DATA_GPA, ram, seed),
		     "guest checksum 0x%llx differs from memory",
		     (unsigned long long)ctx.results[0]);
	cr_assert_eq(ctx.results[0], gfa_kvm_test_pattern_sum(KVMT_DATA_GPA, ram, seed));
	/* Below the pattern: code intact, nothing written outside [start, end). */
	cr_assert_eq(memcmp(t.ram.hva + KVMT_CODE_GPA, gfa_kvm_test_guest_code,
			    gfa_kvm_test_guest_size),
		     0);

	/* RESULT_LO, RESULT_HI, DONE, HLT: at least four exits. */
	r = gfa_kvm_vcpu_stat(vcpu, "exits", &exits);
	if (r != -EOPNOTSUPP) {
		cr_assert_eq(r, 0, "vcpu_stat exits: %s", strerror(-r));
		cr_assert_geq(exits, 4);
	}
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	kvmt_vm_teardown(&t);
}

/* Stop at the checkpoint, move the frames, corrupt a few words, resume. */
Test(kvm, checkpoint_move_resume_verify)
{
	const uint64_t ram = 4 * KVMT_MIB, seed = 0x1234;
	const uint64_t bad_gpa[] = { KVMT_DATA_GPA, KVMT_DATA_GPA + 8 * 1000,
				     ram - 2 * KVMT_MIB + 4096, ram - 8 };
	const unsigned int nbad = ARRAY_SIZE(bad_gpa);
	struct gfa_kvm_test_ctx ctx = { 0 };
	struct gfa_kvm_vcpu *vcpu;
	struct kvmt_vm t;
	int r;

	kvmt_require_kvm();
	kvmt_vm_setup(&t, ram, true);
	vcpu = kvmt_vcpu(&t, 0, KVMT_DATA_GPA, ram, seed, GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY);

	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_STOPPED, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_eq(ctx.checkpoint, 1);
	cr_assert_eq(ctx.nr_results, 1);
	cr_assert_eq(ctx.results[0], kvmt_sum_from_memory(&t, KVMT_DATA_GPA, ram, seed));

	/* Page tables and code move too: the whole window is remapped. */
	kvmt_move_frames(&t.ram);
	for (unsigned int i = 0; i < nbad; i++)
		*(uint64_t *)(t.ram.hva + bad_gpa[i]) ^= 0xff00;

	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_HLT, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert(ctx.done);
	cr_assert_eq(ctx.nr_results, 2);
	cr_assert_eq(ctx.results[1], nbad, "guest saw %llu mismatches, expected %u",
		     (unsigned long long)ctx.results[1], nbad);

	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	kvmt_vm_teardown(&t);
}

/* A vCPU verifying in a loop, paused from another thread while in the guest. */
struct kvmt_loop {
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_test_ctx ctx;
	unsigned int mismatch_reports; /* verify results != 0 (atomic) */
	int rc;
};

static int kvmt_loop_result(struct gfa_kvm_vcpu *vcpu, uint64_t v, void *arg)
{
	struct kvmt_loop *l = arg;

	(void)vcpu;
	/* Result 0 is the fill checksum; later ones are mismatch counts. */
	if (__atomic_load_n(&l->ctx.nr_results, __ATOMIC_RELAXED) > 1 && v != 0)
		__atomic_add_fetch(&l->mismatch_reports, 1, __ATOMIC_RELAXED);
	return GFA_KVM_IO_CONTINUE;
}

static int kvmt_loop_checkpoint(struct gfa_kvm_vcpu *vcpu, uint32_t id, void *arg)
{
	(void)vcpu, (void)id, (void)arg;
	return GFA_KVM_IO_CONTINUE;
}

static void *kvmt_loop_thread(void *arg)
{
	struct kvmt_loop *l = arg;

	l->rc = gfa_kvm_vcpu_run(l->vcpu, gfa_kvm_test_io, &l->ctx);
	return NULL;
}

static unsigned int kvmt_results(struct kvmt_loop *l)
{
	return __atomic_load_n(&l->ctx.nr_results, __ATOMIC_ACQUIRE);
}

static void kvmt_wait_results(struct kvmt_loop *l, unsigned int n)
{
	struct timespec ts = { 0, 1000000 };

	for (int i = 0; i < 60000 && kvmt_results(l) < n; i++)
		nanosleep(&ts, NULL);
	cr_assert_geq(kvmt_results(l), n, "guest made no progress (%u results, want %u)",
		      kvmt_results(l), n);
}

Test(kvm, pause_running_vcpu_move_resume)
{
	/*
	 * A short range: each verify pass is one result, a few ms even where KVM
	 * emulates every instruction (PVM), so a guest running through a 100 ms pause
	 * would be seen.
	 */
	const uint64_t ram = 4 * KVMT_MIB, end = KVMT_DATA_GPA + 16 * 1024;
	struct timespec pause_time = { 0, 100 * 1000000 };
	struct kvmt_loop l = { 0 };
	struct kvmt_vm t;
	pthread_t th;
	unsigned int n;

	kvmt_require_kvm();
	kvmt_vm_setup(&t, ram, true);
	l.vcpu = kvmt_vcpu(&t, 0, KVMT_DATA_GPA, end, 77,
			   GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY | GFA_KVM_TEST_LOOP);
	l.ctx.on_result = kvmt_loop_result;
	l.ctx.on_checkpoint = kvmt_loop_checkpoint;
	l.ctx.arg = &l;

	/* Paused before it runs: the run call must wait without entering the guest. */
	cr_assert_eq(gfa_kvm_vcpu_pause(l.vcpu), 0);
	cr_assert_eq(pthread_create(&th, NULL, kvmt_loop_thread, &l), 0);
	nanosleep(&pause_time, NULL);
	cr_assert_eq(kvmt_results(&l), 0, "guest ran while paused");
	cr_assert_eq(gfa_kvm_vcpu_resume(l.vcpu), 0);
	kvmt_wait_results(&l, 3);

	/* Paused while looping in the guest: no progress until resumed. */
	cr_assert_eq(gfa_kvm_vcpu_pause(l.vcpu), 0);
	cr_assert(gfa_kvm_vcpu_paused(l.vcpu));
	n = kvmt_results(&l);
	kvmt_move_frames(&t.ram);
	nanosleep(&pause_time, NULL);
	cr_assert_eq(kvmt_results(&l), n, "guest reported while paused");
	cr_assert_eq(gfa_kvm_vcpu_resume(l.vcpu), 0);
	cr_assert_not(gfa_kvm_vcpu_paused(l.vcpu));
	kvmt_wait_results(&l, n + 3);

	/* Nested pauses need as many resumes. */
	cr_assert_eq(gfa_kvm_vcpu_pause(l.vcpu), 0);
	cr_assert_eq(gfa_kvm_vcpu_pause(l.vcpu), 0);
	cr_assert_eq(gfa_kvm_vcpu_resume(l.vcpu), 0);
	cr_assert(gfa_kvm_vcpu_paused(l.vcpu));
	n = kvmt_results(&l);
	nanosleep(&pause_time, NULL);
	cr_assert_eq(kvmt_results(&l), n, "guest ran with one pause still outstanding");
	cr_assert_eq(gfa_kvm_vcpu_resume(l.vcpu), 0);
	kvmt_wait_results(&l, n + 2);

	cr_assert_eq(gfa_kvm_vcpu_kick(l.vcpu), 0);
	pthread_join(th, NULL);
	cr_assert_eq(l.rc, GFA_KVM_RUN_KICKED, "run: %d (%s)", l.rc, gfa_kvm_vcpu_error(l.vcpu));
	cr_assert_eq(l.mismatch_reports, 0, "guest saw changed memory after a move");
	cr_assert_eq(gfa_kvm_vcpu_resume(l.vcpu), -EINVAL);
	cr_assert_eq(gfa_kvm_vcpu_destroy(l.vcpu), 0);
	kvmt_vm_teardown(&t);
}

/* Several VMs, several vCPUs each, each vCPU in its own thread on its own slice. */
#define KVMT_NVMS   3
#define KVMT_NVCPUS 2

struct kvmt_job {
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_test_ctx ctx;
	uint64_t start, end, seed;
	int rc;
};

static void *kvmt_job_thread(void *arg)
{
	struct kvmt_job *j = arg;

	j->rc = gfa_kvm_vcpu_run(j->vcpu, gfa_kvm_test_io, &j->ctx);
	return NULL;
}

Test(kvm, many_vms_many_vcpus_in_threads)
{
	const uint64_t slice = 512 * 1024, ram = 4 * KVMT_MIB;
	struct kvmt_job jobs[KVMT_NVMS][KVMT_NVCPUS];
	pthread_t th[KVMT_NVMS][KVMT_NVCPUS];
	struct kvmt_vm t[KVMT_NVMS];

	kvmt_require_kvm();
	memset(jobs, 0, sizeof(jobs));
	for (int v = 0; v < KVMT_NVMS; v++) {
		kvmt_vm_setup(&t[v], ram, v & 1);
		for (int c = 0; c < KVMT_NVCPUS; c++) {
			struct kvmt_job *j = &jobs[v][c];

			j->start = KVMT_DATA_GPA + c * slice;
			j->end = j->start + slice;
			j->seed = 0x5eed0000ULL + 16 * v + c;
			j->vcpu = kvmt_vcpu(&t[v], c, j->start, j->end, j->seed,
					    GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY);
			j->ctx.on_checkpoint = kvmt_loop_checkpoint; /* continue */
		}
	}
	for (int v = 0; v < KVMT_NVMS; v++)
		for (int c = 0; c < KVMT_NVCPUS; c++)
			cr_assert_eq(pthread_create(&th[v][c], NULL, kvmt_job_thread, &jobs[v][c]),
				     0);
	for (int v = 0; v < KVMT_NVMS; v++)
		for (int c = 0; c < KVMT_NVCPUS; c++)
			pthread_join(th[v][c], NULL);

	for (int v = 0; v < KVMT_NVMS; v++) {
		for (int c = 0; c < KVMT_NVCPUS; c++) {
			struct kvmt_job *j = &jobs[v][c];

			cr_assert_eq(j->rc, GFA_KVM_RUN_HLT, "vm %d vcpu %d: %d (%s)", v, c, j->rc,
				     gfa_kvm_vcpu_error(j->vcpu));
			cr_assert(j->ctx.done);
			cr_assert_eq(j->ctx.nr_results, 2);
			cr_assert_eq(j->ctx.results[0],
				     kvmt_sum_from_memory(&t[v], j->start, j->end, j->seed),
				     "vm %d vcpu %d: checksum", v, c);
			cr_assert_eq(j->ctx.results[1], 0, "vm %d vcpu %d: mismatches", v, c);
			cr_assert_eq(gfa_kvm_vcpu_destroy(j->vcpu), 0);
		}
		kvmt_vm_teardown(&t[v]);
	}
}

Test(kvm, bad_inputs)
{
	const uint64_t ram = 4 * KVMT_MIB;
	struct gfa_kvm_vcpu *vcpu, *dup;
	struct gfa_kvm_entry entry = { 0 };
	struct kvmt_ram extra;
	struct kvmt_vm t;
	uint64_t val;

	kvmt_require_kvm();
	kvmt_ram_anon(&t.ram, ram);
	t.vm = gfa_kvm_vm_create();
	cr_assert_not_null(t.vm);

	/* NULL VM everywhere. */
	cr_assert_eq(gfa_kvm_set_memslot(NULL, 0, 0, t.ram.hva, ram, 0), -EFAULT);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(NULL, 0, ram), -EFAULT);
	cr_assert_eq(gfa_kvm_vm_stat(NULL, "pages_4k", &val), -EFAULT);
	cr_assert_eq(gfa_kvm_vm_fd(NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_test_guest_load(NULL, 0), -EFAULT);
	cr_assert_eq(gfa_kvm_vm_set_mmio_handler(NULL, NULL, NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_test_io(NULL, NULL, NULL), -EFAULT);
	errno = 0;
	cr_assert_null(gfa_kvm_vcpu_create(NULL, 0));
	cr_assert_eq(errno, EFAULT);
	errno = 0;
	cr_assert_null(gfa_kvm_gpa_to_hva(NULL, 0, 8));
	cr_assert_eq(errno, EFAULT);
	cr_assert_eq(gfa_kvm_vm_destroy(NULL), 0);

	/* Memslot arguments. */
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 1u << 30, 0, t.ram.hva, ram, 0), -ERANGE);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0, t.ram.hva, ram - 100, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0x800, t.ram.hva, ram, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0, t.ram.hva + 8, ram - 4096, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0, NULL, ram, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0, t.ram.hva, ram, 1u << 7), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, ~0ULL - 4095, t.ram.hva, ram, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 3, 0, NULL, 0, 0), -ENOENT);
	cr_assert_null(gfa_kvm_gpa_to_hva(t.vm, 0, 8), "a failed set_memslot left a slot");

	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 0, 0, t.ram.hva, ram, 0), 0);
	kvmt_ram_anon(&extra, KVMT_HUGE);
	/* Overlapping another slot's GPA range. */
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 1, ram - KVMT_HUGE, extra.hva, KVMT_HUGE, 0),
		     -EEXIST);
	/* Remove, re-add elsewhere, look up. */
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 1, ram, extra.hva, KVMT_HUGE, 0), 0);
	cr_assert_eq(gfa_kvm_gpa_to_hva(t.vm, ram + 16, 8), extra.hva + 16);
	errno = 0;
	cr_assert_null(gfa_kvm_gpa_to_hva(t.vm, ram - 8, 16), "range across two slots");
	cr_assert_eq(errno, EFAULT);
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 1, 0, NULL, 0, 0), 0);
	cr_assert_null(gfa_kvm_gpa_to_hva(t.vm, ram + 16, 8));
	cr_assert_eq(gfa_kvm_set_memslot(t.vm, 1, 0, NULL, 0, 0), -ENOENT);
	kvmt_ram_free(&extra);

	/* Page tables. */
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, 0x10, ram), -EINVAL);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, 0, 0), -EINVAL);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, 0, ram + 4096), -EINVAL);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, 0, 1024ULL << 30), -EINVAL);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, ram - 4096, ram), -EFAULT);
	cr_assert_eq(gfa_kvm_boot_area_size(3 * KVMT_MIB), 0);
	cr_assert_eq(gfa_kvm_boot_area_size(ram), GFA_KVM_BOOT_PD + 4096);
	cr_assert_eq(gfa_kvm_boot_area_size(3ULL << 30), GFA_KVM_BOOT_PD + 3 * 4096);
	cr_assert_eq(gfa_kvm_test_guest_load(t.vm, ram - 16), -EFAULT);

	/* vCPUs. */
	errno = 0;
	cr_assert_null(gfa_kvm_vcpu_create(t.vm, INT_MAX));
	cr_assert_eq(errno, ERANGE);
	vcpu = gfa_kvm_vcpu_create(t.vm, 0);
	cr_assert_not_null(vcpu);
	cr_assert_eq(gfa_kvm_vcpu_id(vcpu), 0);
	cr_assert_geq(gfa_kvm_vcpu_fd(vcpu), 0);
	errno = 0;
	dup = gfa_kvm_vcpu_create(t.vm, 0);
	cr_assert_null(dup);
	cr_assert_eq(errno, EEXIST);
	cr_assert_eq(gfa_kvm_vcpu_enter_long_mode(vcpu, &entry), -ENOENT, "no page tables yet");
	cr_assert_eq(gfa_kvm_vcpu_enter_long_mode(NULL, &entry), -EFAULT);
	cr_assert_eq(gfa_kvm_vcpu_enter_long_mode(vcpu, NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, 0, 4, 64, 0, GFA_KVM_TEST_FILL), -EINVAL);
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, 0, 64, 8, 0, GFA_KVM_TEST_FILL), -EINVAL);
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, 0, 8, 64, 0, 1u << 5), -EINVAL);
	cr_assert_eq(gfa_kvm_vcpu_run(NULL, NULL, NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_vcpu_pause(NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_vcpu_resume(NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_vcpu_resume(vcpu), -EINVAL, "resume without pause");
	cr_assert_eq(gfa_kvm_vcpu_kick(NULL), -EFAULT);
	cr_assert_eq(gfa_kvm_vcpu_stat(NULL, "exits", &val), -EFAULT);
	cr_assert_eq(gfa_kvm_vm_destroy(t.vm), -EBUSY, "VM destroyed under a vCPU");

	/* Statistics names. */
	if (gfa_kvm_vm_stat(t.vm, "pages_4k", &val) != -EOPNOTSUPP) {
		cr_assert_eq(gfa_kvm_vm_stat(t.vm, "pages_4k", &val), 0);
		cr_assert_eq(gfa_kvm_vm_stat(t.vm, "no_such_statistic", &val), -ENOENT);
		cr_assert_eq(gfa_kvm_vcpu_stat(vcpu, "no_such_statistic", &val), -ENOENT);
		cr_assert_eq(gfa_kvm_vm_stat(t.vm, NULL, &val), -EFAULT);
		cr_assert_eq(gfa_kvm_vm_stat(t.vm, "pages_4k", NULL), -EFAULT);
	}

	/* A kick before run makes run return at once, without entering the guest. */
	cr_assert_eq(gfa_kvm_vcpu_kick(vcpu), 0);
	cr_assert_eq(gfa_kvm_vcpu_run(vcpu, NULL, NULL), GFA_KVM_RUN_KICKED);

	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	cr_assert_eq(gfa_kvm_vcpu_destroy(NULL), 0);
	kvmt_vm_teardown(&t);
}

/* Guest mistakes end the run with a clear error instead of hanging or aborting. */
Test(kvm, guest_errors_are_reported)
{
	const uint64_t ram = 4 * KVMT_MIB;
	const uint8_t ud2[] = { 0x0f, 0x0b };
	struct gfa_kvm_test_ctx ctx = { 0 };
	struct gfa_kvm_vcpu *vcpu;
	struct kvmt_vm t;
	int r;

	kvmt_require_kvm();
	kvmt_vm_setup(&t, ram, false);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(t.vm, KVMT_BOOT_GPA, 2 * ram), 0);

	/* Writing past the memslot (still identity-mapped): an MMIO exit. */
	vcpu = kvmt_vcpu(&t, 0, ram - 64, ram + 64, 1, GFA_KVM_TEST_FILL);
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, -EFAULT, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_not_null(strstr(gfa_kvm_vcpu_error(vcpu), "no memslot"), "%s",
			   gfa_kvm_vcpu_error(vcpu));

	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);

	/* Port IO without a handler. */
	vcpu = kvmt_vcpu(&t, 1, KVMT_DATA_GPA, KVMT_DATA_GPA + 64, 1, GFA_KVM_TEST_FILL);
	r = gfa_kvm_vcpu_run(vcpu, NULL, NULL);
	cr_assert_eq(r, -ENOSYS, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_not_null(strstr(gfa_kvm_vcpu_error(vcpu), "port 0x10"));

	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);

	/* An exception with no IDT: triple fault, KVM_EXIT_SHUTDOWN. */
	memcpy(t.ram.hva + KVMT_CODE_GPA + 0x1000, ud2, sizeof(ud2));
	vcpu = gfa_kvm_vcpu_create(t.vm, 2);
	cr_assert_not_null(vcpu);
	cr_assert_eq(gfa_kvm_vcpu_enter_long_mode(
			     vcpu, &(struct gfa_kvm_entry){ .rip = KVMT_CODE_GPA + 0x1000 }),
		     0);
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, -EIO, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_not_null(strstr(gfa_kvm_vcpu_error(vcpu), "triple fault"), "%s",
			   gfa_kvm_vcpu_error(vcpu));

	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	kvmt_vm_teardown(&t);
}

/* AnonHugePages of the smaps entry that contains @addr, in KiB (-1 if not found). */
static long kvmt_anon_huge_kb(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool inside = false;
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			inside = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

Test(kvm, stats_count_huge_mappings)
{
	const uint64_t ram = 4 * KVMT_MIB;
	struct gfa_kvm_test_ctx ctx = { 0 };
	struct gfa_kvm_vcpu *vcpu;
	uint64_t p4k = 0, p2m = 0;
	struct kvmt_vm t;
	long huge_kb;
	int r;

	kvmt_require_kvm();
	kvmt_vm_setup(&t, ram, false);
	r = gfa_kvm_vm_stat(t.vm, "pages_2m", &p2m);
	if (r == -EOPNOTSUPP || r == -ENOENT) {
		kvmt_vm_teardown(&t);
		cr_skip_test("KVM has no pages_2m statistic here (%s)", strerror(-r));
	}
	cr_assert_eq(r, 0, "vm_stat pages_2m: %s", strerror(-r));
	cr_assert_eq(p2m, 0, "fresh VM already maps %llu 2M pages", (unsigned long long)p2m);

	vcpu = kvmt_vcpu(&t, 0, KVMT_DATA_GPA, ram, 3, GFA_KVM_TEST_FILL);
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_HLT, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_eq(gfa_kvm_vm_stat(t.vm, "pages_2m", &p2m), 0);
	cr_assert_eq(gfa_kvm_vm_stat(t.vm, "pages_4k", &p4k), 0);
	huge_kb = kvmt_anon_huge_kb(t.ram.hva);
	fprintf(stderr, "kvm: stats: AnonHugePages %ld kB, pages_2m %llu, pages_4k %llu\n", huge_kb,
		(unsigned long long)p2m, (unsigned long long)p4k);
	if (access("/sys/module/kvm_pvm", F_OK) == 0) {
		/* PVM (software KVM, shadow MMU) keeps these counters at 0. */
		cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
		kvmt_vm_teardown(&t);
		cr_skip_test("KVM here is kvm_pvm, which does not account pages_4k/pages_2m");
	}
	cr_assert_gt(p2m + p4k, 0, "guest ran but KVM maps no pages");

	/* Where the host backs the window with THP, KVM must map 2 MiB pages too. */
	if (huge_kb >= 2048)
		cr_assert_geq(p2m, 1,
			      "host backs the guest with %ld kB of THP, KVM maps no 2M page",
			      huge_kb);
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	kvmt_vm_teardown(&t);
}

/* ---- suite kvm_qemu: run the KVM tests in a QEMU TCG guest ---------------- */

static void kvmt_qemu_preconditions(void)
{
	const char *san = getenv("GFA_SANITIZER");

	if (getenv("GFA_IN_QEMU"))
		cr_skip_test("already inside the QEMU harness");
	if (san && *san) {
		fprintf(stderr, "kvm_qemu: skipped under GFA_SANITIZER=%s\n", san);
		cr_skip_test("KVM-in-QEMU cases skip under sanitizers (GFA_SANITIZER=%s)", san);
	}
}

/* ---- findings of a review: vCPU ids, kicks in IO handlers, entries after MMIO ---- */

#define KVMX_RAM  (4ULL << 20)
#define KVMX_CODE 0x10000ULL
#define KVMX_DATA (2ULL << 20)

static struct gfa_kvm_vm *kvmx_vm(char **ram)
{
	struct gfa_kvm_vm *vm;

	*ram = mmap(NULL, KVMX_RAM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(*ram, MAP_FAILED);
	vm = gfa_kvm_vm_create();
	cr_assert_not_null(vm, "vm_create: %s", strerror(errno));
	cr_assert_eq(gfa_kvm_set_memslot(vm, 0, 0, *ram, KVMX_RAM, 0), 0);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(vm, 0, KVMX_RAM), 0);
	cr_assert_eq(gfa_kvm_test_guest_load(vm, KVMX_CODE), 0);
	return vm;
}

/* gfa_kvm_vcpu_destroy() "destroyed" the vCPU, but KVM keeps it until the VM dies:
 * the id could not be used again (EEXIST), although no gfa vCPU had it. */
Test(kvm, destroyed_vcpu_id_can_be_created_again)
{
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_vm *vm;
	char *ram;

	kvmt_require_kvm();
	vm = kvmx_vm(&ram);
	vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(vcpu);
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	errno = 0;
	vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(vcpu, "vcpu id 0 again after destroying it: %s", strerror(errno));
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, KVMX_CODE, KVMX_DATA, KVMX_DATA + 64, 1,
					      GFA_KVM_TEST_FILL),
		     0);
	cr_assert_eq(gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &(struct gfa_kvm_test_ctx){ 0 }),
		     GFA_KVM_RUN_HLT);
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, KVMX_RAM);
}

/* The kick signal must only interrupt KVM_RUN (kvm.h): an IO handler blocked in
 * poll(2) or read(2) must not see EINTR when another thread kicks or pauses the vCPU.
 * SA_RESTART covers read() only: poll, nanosleep, epoll_wait are never restarted. */
struct kvmx_io {
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_test_ctx ctx;
	int pipe[2];
	int in_handler; /* atomic */
	ssize_t n;
	int err;
	int rc;
};

static int kvmx_blocking_checkpoint(struct gfa_kvm_vcpu *vcpu, uint32_t id, void *arg)
{
	struct kvmx_io *s = arg;
	char c;

	(void)vcpu, (void)id;
	__atomic_store_n(&s->in_handler, 1, __ATOMIC_SEQ_CST);
	errno = 0;
	/* e.g. a device backend waiting on its socket */
	s->n = poll(&(struct pollfd){ .fd = s->pipe[0], .events = POLLIN }, 1, 5000);
	if (s->n == 1)
		s->n = read(s->pipe[0], &c, 1);
	s->err = errno;
	return GFA_KVM_IO_STOP;
}

static void *kvmx_run_thread(void *arg)
{
	struct kvmx_io *s = arg;

	s->rc = gfa_kvm_vcpu_run(s->vcpu, gfa_kvm_test_io, &s->ctx);
	return NULL;
}

Test(kvm, kick_does_not_interrupt_io_handler_syscalls)
{
	struct timespec ms100 = { 0, 100 * 1000000 };
	struct gfa_kvm_vm *vm;
	struct kvmx_io s = { 0 };
	pthread_t th;
	char *ram;

	kvmt_require_kvm();
	vm = kvmx_vm(&ram);
	cr_assert_eq(pipe(s.pipe), 0);
	s.vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(s.vcpu);
	cr_assert_eq(gfa_kvm_test_guest_enter(s.vcpu, KVMX_CODE, KVMX_DATA, KVMX_DATA + 64, 1,
					      GFA_KVM_TEST_VERIFY),
		     0);
	s.ctx.on_checkpoint = kvmx_blocking_checkpoint;
	s.ctx.arg = &s;
	cr_assert_eq(pthread_create(&th, NULL, kvmx_run_thread, &s), 0);
	for (int i = 0; i < 3000 && !__atomic_load_n(&s.in_handler, __ATOMIC_SEQ_CST); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert(__atomic_load_n(&s.in_handler, __ATOMIC_SEQ_CST),
		  "guest never reached the checkpoint");
	nanosleep(&ms100, NULL); /* the handler is blocked in poll() now */
	cr_assert_eq(gfa_kvm_vcpu_kick(s.vcpu), 0);
	nanosleep(&ms100, NULL);
	cr_assert_eq(write(s.pipe[1], "x", 1), 1);
	pthread_join(th, NULL);
	cr_assert_eq(s.n, 1, "poll()/read() in the IO handler returned %zd (%s) after a kick", s.n,
		     strerror(s.err));
	cr_assert_eq(s.rc, GFA_KVM_RUN_STOPPED);
	close(s.pipe[0]);
	close(s.pipe[1]);
	cr_assert_eq(gfa_kvm_vcpu_destroy(s.vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, KVMX_RAM);
}

/* A create whose kvm_run mmap fails closes the vCPU fd; KVM keeps the vCPU, so the id
 * is gone for good: the next create of it says EEXIST although no gfa vCPU has it. */
static unsigned long kvmx_vm_size(void)
{
	char line[256];
	unsigned long kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
			break;
	fclose(f);
	cr_assert_gt(kb, 0);
	return kb << 10;
}

Test(kvm, failed_create_does_not_use_up_the_vcpu_id)
{
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_vm *vm;
	struct rlimit old, lim;
	char *ram;
	int err;

	kvmt_require_kvm();
	if (getenv("GFA_SANITIZER"))
		cr_skip_test("RLIMIT_AS and sanitizers do not mix");
	vm = kvmx_vm(&ram);
	/* warm the allocator up so the create's calloc needs no new mapping */
	free(calloc(1, 4096));
	cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
	lim = old;
	lim.rlim_cur = kvmx_vm_size() + 4096; /* kvm_run (3+ pages) cannot be mapped */
	cr_assert_eq(setrlimit(RLIMIT_AS, &lim), 0);
	errno = 0;
	vcpu = gfa_kvm_vcpu_create(vm, 5);
	err = errno;
	cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
	cr_assert_null(vcpu, "create succeeded under the address-space limit");
	cr_assert_eq(err, ENOMEM, "first create: %s", strerror(err));

	errno = 0;
	vcpu = gfa_kvm_vcpu_create(vm, 5);
	cr_assert_not_null(vcpu, "vcpu id 5 after a failed create: %s", strerror(errno));
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, KVMX_RAM);
}

/*
 * kvm.h lets the application handle SIGRTMIN itself.  The vCPU thread keeps the signal
 * blocked outside KVM_RUN and consumes it: the application's handler must still run
 * for each one that reaches the thread.
 */
struct kvmx_loop {
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_test_ctx ctx;
	int rc;
};

static int kvmx_continue(struct gfa_kvm_vcpu *v, uint32_t id, void *a)
{
	(void)v, (void)id, (void)a;
	return GFA_KVM_IO_CONTINUE;
}

static void *kvmx_loop_thread(void *arg)
{
	struct kvmx_loop *l = arg;

	l->rc = gfa_kvm_vcpu_run(l->vcpu, gfa_kvm_test_io, &l->ctx);
	return NULL;
}

static volatile sig_atomic_t kvmx_app_hits;

static void kvmx_app_handler(int sig)
{
	(void)sig;
	kvmx_app_hits++;
}

Test(kvm, application_sigrtmin_handler_still_runs_on_a_vcpu_thread)
{
	struct sigaction sa = { .sa_handler = kvmx_app_handler }, old;
	struct kvmx_loop l = { 0 };
	struct gfa_kvm_vm *vm;
	pthread_t th;
	char *ram;

	kvmt_require_kvm();
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGRTMIN, &sa, &old), 0); /* the application's own */
	vm = kvmx_vm(&ram);
	l.vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(l.vcpu);
	cr_assert_eq(gfa_kvm_test_guest_enter(l.vcpu, KVMX_CODE, KVMX_DATA, KVMX_DATA + 4096, 3,
					      GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY |
						      GFA_KVM_TEST_LOOP),
		     0);
	l.ctx.on_checkpoint = kvmx_continue;
	cr_assert_eq(pthread_create(&th, NULL, kvmx_loop_thread, &l), 0);
	for (int i = 0; i < 10000 && __atomic_load_n(&l.ctx.nr_results, __ATOMIC_ACQUIRE) < 2; i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	for (int i = 0; i < 20; i++) {
		pthread_kill(th, SIGRTMIN); /* the application's signal, not a kick */
		nanosleep(&(struct timespec){ 0, 5 * 1000000 }, NULL);
	}
	cr_assert_eq(gfa_kvm_vcpu_kick(l.vcpu), 0);
	pthread_join(th, NULL);
	cr_assert_eq(l.rc, GFA_KVM_RUN_KICKED);
	cr_assert_gt(kvmx_app_hits, 0,
		     "20 application SIGRTMIN sent to the vCPU thread, its "
		     "handler ran %d times",
		     (int)kvmx_app_hits);
	cr_assert_eq(gfa_kvm_vcpu_destroy(l.vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, KVMX_RAM);
	sigaction(SIGRTMIN, &old, NULL);
}

/* After a run ended on an MMIO exit (-EFAULT), gfa_kvm_test_guest_enter() /
 * gfa_kvm_vcpu_enter_long_mode() must start the guest at the new entry. */
Test(kvm, enter_after_mmio_error_starts_at_new_entry)
{
	const uint64_t seed = 0x77;
	struct gfa_kvm_test_ctx ctx = { 0 };
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_vm *vm;
	char *ram;
	int r;

	kvmt_require_kvm();
	vm = kvmx_vm(&ram);
	/* map twice the slot: VERIFY reads past the end of RAM (an MMIO read exit) */
	cr_assert_eq(gfa_kvm_vm_build_page_tables(vm, 0, 2 * KVMX_RAM), 0);
	vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(vcpu);
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, KVMX_CODE, KVMX_RAM - 64, KVMX_RAM + 64, 1,
					      GFA_KVM_TEST_VERIFY),
		     0);
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_STOPPED); /* checkpoint 1 */
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, -EFAULT, "run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));

	/* start over, inside RAM */
	memset(&ctx, 0, sizeof(ctx));
	cr_assert_eq(gfa_kvm_test_guest_enter(vcpu, KVMX_CODE, KVMX_DATA, KVMX_DATA + 4096, seed,
					      GFA_KVM_TEST_FILL),
		     0);
	r = gfa_kvm_vcpu_run(vcpu, gfa_kvm_test_io, &ctx);
	cr_assert_eq(r, GFA_KVM_RUN_HLT, "second run: %d (%s)", r, gfa_kvm_vcpu_error(vcpu));
	cr_assert_eq(ctx.nr_results, 1);
	cr_assert_eq(ctx.results[0], gfa_kvm_test_pattern_sum(KVMX_DATA, KVMX_DATA + 4096, seed),
		     "the guest did not run the new entry");
	cr_assert_eq(gfa_kvm_vcpu_destroy(vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, KVMX_RAM);
}

static void kvmt_self_exe(char *exe, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", exe, len - 1);

	cr_assert_gt(n, 0);
	exe[n] = '\0';
}

/* Without /dev/kvm here: run the whole kvm suite inside QEMU, where KVM exists. */
Test(kvm_qemu, rerun_without_dev_kvm)
{
	char why[256], exe[PATH_MAX], cmd[PATH_MAX + 64];
	double secs = 0;
	int rc;

	kvmt_qemu_preconditions();
	if (gfa_kvm_available(why, sizeof(why)))
		cr_skip_test("KVM works here: suite kvm ran directly");
	kvmt_self_exe(exe, sizeof(exe));
	snprintf(cmd, sizeof(cmd), "exec '%s' --filter='kvm/*'", exe);
	rc = tu_run_in_qemu("--cpus 1 --timeout 1100", cmd, &secs);
	fprintf(stderr, "kvm_qemu: suite kvm in QEMU: exit %d after %.1f s\n", rc, secs);
	if (rc == 77)
		tu_qemu_skip("kvm_qemu",
			     "no KVM here (%s) and the QEMU harness cannot run (exit 77; "
			     "see its message above)",
			     why);
	cr_assert_eq(rc, 0, "suite kvm failed inside QEMU (exit %d)", rc);
}

/*
 * Always: one short boot with two NUMA nodes that runs one real KVM guest test
 * inside and exits 42, proving the harness, nested KVM, NUMA and exit codes work.
 */
Test(kvm_qemu, harness_runs_kvm_guest)
{
	char exe[PATH_MAX], cmd[2 * PATH_MAX];
	double secs = 0;
	int rc;

	kvmt_qemu_preconditions();
	kvmt_self_exe(exe, sizeof(exe));
	snprintf(cmd, sizeof(cmd),
		 "out=$('%s' --filter='kvm/pattern_checksum' --tap=- 2>&1); rc=$?; "
		 "echo \"$out\"; [ $rc = 0 ] || exit $rc; "
		 "echo \"$out\" | grep '^ok .*kvm::pattern_checksum' | grep -qv SKIP || exit 3; "
		 "[ \"$GFA_IN_QEMU\" = 1 ] || exit 4; "
		 "[ -d /sys/devices/system/node/node1 ] || exit 5; exit 42",
		 exe);
	rc = tu_run_in_qemu("--numa 2 --cpus 1 --mem 1024 --timeout 500", cmd, &secs);
	fprintf(stderr, "kvm_qemu: harness boot + one KVM test: exit %d after %.1f s\n", rc, secs);
	if (rc == 77)
		tu_qemu_skip("kvm_qemu", "the QEMU harness cannot run here (exit 77; see its "
					 "message above)");
	cr_assert_eq(rc, 42,
		     "expected exit 42 from the guest command, got %d "
		     "(3: test did not run, 4: GFA_IN_QEMU unset, 5: no second NUMA node)",
		     rc);
}

/*
 * A QEMU suite that skips fails under CI=true, unless the reason is one CI cannot fix
 * (tests/qemu_util.h, tu_qemu_skip).  This binary runs kvm_qemu/harness_runs_kvm_guest
 * once with a QEMU but no cpio on PATH (the harness exits 77: a skip CI can fix), then
 * with no QEMU at all (with no /dev/kvm either: a skip CI cannot fix).
 * (BXFI_MAP unset: Criterion hands it to its workers, and this run is none of them.)
 */
static int kvmt_self_run(const char *env, char *out, size_t len)
{
	char exe[PATH_MAX], cmd[2 * PATH_MAX + 256];
	const char *rc;
	size_t n;
	FILE *p;

	kvmt_self_exe(exe, sizeof(exe));
	/* the other suites' "disabled" lines left out; the exit status as the last line */
	snprintf(cmd, sizeof(cmd),
		 "{ env -u GFA_SANITIZER -u BXFI_MAP %s '%s' "
		 "--filter='kvm_qemu/harness_runs_kvm_guest' --verbose --color=never 2>&1; "
		 "echo \"self-run exit $?\"; } | grep -v 'Test is disabled'",
		 env, exe);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	pclose(p);
	rc = strstr(out, "self-run exit ");
	cr_assert_not_null(rc, "no exit status from the run: %.1500s", out);
	return atoi(rc + 14);
}

/* The last lines of @out, short enough for an assertion message. */
static const char *kvmt_tail(const char *out)
{
	size_t n = strlen(out);

	return n > 1500 ? out + n - 1500 : out;
}

Test(qemu_skip, ci_fails_a_skip_it_can_fix, .timeout = 60)
{
	static char out[16384];
	char qemu[PATH_MAX] = "", env[PATH_MAX + 128];
	FILE *p;
	int rc;

	kvmt_qemu_preconditions();
	p = popen("command -v qemu-system-x86_64", "r");
	if (p && fgets(qemu, sizeof(qemu), p))
		qemu[strcspn(qemu, "\n")] = '\0';
	if (p)
		pclose(p);
	if (qemu[0]) {
		/* QEMU there, cpio not: the harness skips, and under CI=true that fails */
		snprintf(env, sizeof(env), "QEMU='%s' PATH=/nonexistent CI=true", qemu);
		rc = kvmt_self_run(env, out, sizeof(out));
		cr_assert_neq(rc, 0, "a fixable skip under CI=true passed:\n%s", kvmt_tail(out));
		cr_assert(strstr(out, "kvm_qemu: skipped: the QEMU harness cannot run here"), "%s",
			  kvmt_tail(out));
		cr_assert(strstr(out, "did not run under CI=true"), "%s", kvmt_tail(out));
		cr_assert(strstr(out, "[FAIL] kvm_qemu::harness_runs_kvm_guest"), "%s",
			  kvmt_tail(out));
		/* the same without CI: a skip, and a passing run */
		snprintf(env, sizeof(env), "QEMU='%s' PATH=/nonexistent CI=", qemu);
		rc = kvmt_self_run(env, out, sizeof(out));
		cr_assert_eq(rc, 0, "%s", kvmt_tail(out));
		cr_assert(strstr(out, "[SKIP] kvm_qemu::harness_runs_kvm_guest"), "%s",
			  kvmt_tail(out));
	}
	if (!access("/dev/kvm", F_OK))
		return; /* "no /dev/kvm and no QEMU" cannot happen here */
	/* neither /dev/kvm nor QEMU: a skip CI cannot fix, printed on its own line */
	rc = kvmt_self_run("QEMU=/nonexistent/qemu-system-x86_64 CI=true", out, sizeof(out));
	cr_assert_eq(rc, 0, "an unfixable skip under CI=true failed:\n%s", kvmt_tail(out));
	cr_assert(strstr(out, "\nkvm_qemu: the reason CI cannot fix: no /dev/kvm and no QEMU on "
			      "this machine\n"),
		  "%s", kvmt_tail(out));
	cr_assert(strstr(out, "[SKIP] kvm_qemu::harness_runs_kvm_guest"), "%s", kvmt_tail(out));
}
