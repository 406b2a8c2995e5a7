// SPDX-License-Identifier: MIT
/* The kick signal and IO handlers; a vCPU id after a failed create. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "gfa/kvm.h"

#define R14_RAM		(4ULL << 20)
#define R14_CODE	0x10000ULL
#define R14_DATA	(2ULL << 20)

static void r14_require_kvm(void)
{
	char why[256];

	if (!gfa_kvm_available(why, sizeof(why)))
		cr_skip_test("no usable KVM: %s", why);
}

static struct gfa_kvm_vm *r14_vm(char **ram)
{
	struct gfa_kvm_vm *vm;

	*ram = mmap(NULL, R14_RAM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(*ram, MAP_FAILED);
	vm = gfa_kvm_vm_create();
	cr_assert_not_null(vm, "vm_create: %s", strerror(errno));
	cr_assert_eq(gfa_kvm_set_memslot(vm, 0, 0, *ram, R14_RAM, 0), 0);
	cr_assert_eq(gfa_kvm_vm_build_page_tables(vm, 0, R14_RAM), 0);
	cr_assert_eq(gfa_kvm_test_guest_load(vm, R14_CODE), 0);
	return vm;
}

/* kvm.h: "The signal only interrupts KVM_RUN".  SA_RESTART covers read(), but not
 * poll(), nanosleep(), epoll_wait(), ... which fail with EINTR whatever the flags. */
struct r14_io {
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_test_ctx ctx;
	int pipe[2];
	int in_handler;		/* atomic */
	int n, err, rc;
};

static int r14_polling_checkpoint(struct gfa_kvm_vcpu *vcpu, uint32_t id, void *arg)
{
	struct r14_io *s = arg;
	struct pollfd pfd = { .fd = s->pipe[0], .events = POLLIN };

	(void)vcpu, (void)id;
	__atomic_store_n(&s->in_handler, 1, __ATOMIC_SEQ_CST);
	errno = 0;
	s->n = poll(&pfd, 1, 5000);	/* e.g. a device backend waiting on its socket */
	s->err = errno;
	return GFA_KVM_IO_STOP;
}

static void *r14_run_thread(void *arg)
{
	struct r14_io *s = arg;

	s->rc = gfa_kvm_vcpu_run(s->vcpu, gfa_kvm_test_io, &s->ctx);
	return NULL;
}

Test(kvm_signals, kick_does_not_interrupt_poll_in_io_handler)
{
	struct timespec ms100 = { 0, 100 * 1000000 };
	struct gfa_kvm_vm *vm;
	struct r14_io s = { 0 };
	pthread_t th;
	char *ram;

	r14_require_kvm();
	vm = r14_vm(&ram);
	cr_assert_eq(pipe(s.pipe), 0);
	s.vcpu = gfa_kvm_vcpu_create(vm, 0);
	cr_assert_not_null(s.vcpu);
	cr_assert_eq(gfa_kvm_test_guest_enter(s.vcpu, R14_CODE, R14_DATA, R14_DATA + 64, 1,
					      GFA_KVM_TEST_VERIFY), 0);
	s.ctx.on_checkpoint = r14_polling_checkpoint;
	s.ctx.arg = &s;
	cr_assert_eq(pthread_create(&th, NULL, r14_run_thread, &s), 0);
	for (int i = 0; i < 3000 && !__atomic_load_n(&s.in_handler, __ATOMIC_SEQ_CST); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert(__atomic_load_n(&s.in_handler, __ATOMIC_SEQ_CST), "guest never reached the checkpoint");
	nanosleep(&ms100, NULL);	/* the handler is blocked in poll() now */
	cr_assert_eq(gfa_kvm_vcpu_kick(s.vcpu), 0);
	nanosleep(&ms100, NULL);
	cr_assert_eq(write(s.pipe[1], "x", 1), 1);
	pthread_join(th, NULL);
	cr_assert_eq(s.n, 1, "poll() in the IO handler returned %d (%s) after a kick",
		     s.n, strerror(s.err));
	close(s.pipe[0]);
	close(s.pipe[1]);
	cr_assert_eq(gfa_kvm_vcpu_destroy(s.vcpu), 0);
	cr_assert_eq(gfa_kvm_vm_destroy(vm), 0);
	munmap(ram, R14_RAM);
}

/* A create whose kvm_run mmap fails closes the vCPU fd; KVM keeps the vCPU, so the id
 * is gone for good: the next create of it says EEXIST although no gfa vCPU has it. */
static unsigned long r14_vm_size(void)
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

Test(kvm_signals, failed_create_does_not_use_up_the_vcpu_id)
{
	struct gfa_kvm_vcpu *vcpu;
	struct gfa_kvm_vm *vm;
	struct rlimit old, lim;
	char *ram;
	int err;

	r14_require_kvm();
	if (getenv("GFA_SANITIZER"))
		cr_skip_test("RLIMIT_AS and sanitizers do not mix");
	vm = r14_vm(&ram);
	/* warm the allocator up so the create's calloc needs no new mapping */
	free(calloc(1, 4096));
	cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
	lim = old;
	lim.rlim_cur = r14_vm_size() + 4096;	/* kvm_run (3+ pages) cannot be mapped */
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
	munmap(ram, R14_RAM);
}
