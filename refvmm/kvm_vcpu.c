// SPDX-License-Identifier: MIT
/*
 * vCPUs (refvmm/kvm_internal.h): creating one (its CPUID, the kick signal's handler,
 * a parked fd of the same id taken again), destroying and resetting it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "refvmm/kvm_internal.h"

/* ---- vCPUs ------------------------------------------------------------------- */

void kick_handler(int sig)
{
	(void)sig; /* only here so the signal interrupts KVM_RUN instead of killing */
}

static void install_kick_handler(void)
{
	struct sigaction old, sa;

	if (sigaction(GFA_KVM_KICK_SIGNAL, NULL, &old) == 0 &&
	    ((old.sa_flags & SA_SIGINFO) ||
	     (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)))
		return; /* the application handles it: any handler interrupts KVM_RUN */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kick_handler;
	/* restart the IO handlers' own system calls; KVM_RUN still returns -EINTR (the
	 * kernel does not restart it), which is all the signal is for */
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(GFA_KVM_KICK_SIGNAL, &sa, NULL);
}

static pthread_once_t kick_once = PTHREAD_ONCE_INIT;

/* Park a vCPU's fd and kvm_run for a later create of the same id (or, if the list
 * cannot grow, let them go: the id is then used up). */
static void park_vcpu(struct gfa_kvm_vm *vm, unsigned int id, int fd, struct kvm_run *run)
{
	pthread_mutex_lock(&vm->lock);
	if (vm->nr_parked == vm->cap_parked) {
		unsigned int cap = vm->cap_parked ? 2 * vm->cap_parked : 8;
		struct parked_vcpu *p = realloc(vm->parked, cap * sizeof(*p));

		if (!p) {
			pthread_mutex_unlock(&vm->lock);
			if (run)
				munmap(run, vm->run_size);
			close(fd);
			return;
		}
		vm->parked = p;
		vm->cap_parked = cap;
	}
	vm->parked[vm->nr_parked++] = (struct parked_vcpu){ id, fd, run };
	pthread_mutex_unlock(&vm->lock);
}

/* Take id's parked vCPU: its fd (and *run), or -ENOENT. */
static int unpark_vcpu(struct gfa_kvm_vm *vm, unsigned int id, struct kvm_run **run)
{
	int fd = -ENOENT;

	pthread_mutex_lock(&vm->lock);
	for (unsigned int i = 0; i < vm->nr_parked; i++) {
		if (vm->parked[i].id != id)
			continue;
		fd = vm->parked[i].fd;
		*run = vm->parked[i].run;
		vm->parked[i] = vm->parked[--vm->nr_parked];
		break;
	}
	pthread_mutex_unlock(&vm->lock);
	return fd;
}

/*
 * KVM_GET_SUPPORTED_CPUID of the system fd, growing the buffer until it fits; once per
 * process (the table is the host's, not a VM's).  Caller holds kvm_sys.lock.
 */
static int fetch_supported_cpuid(int kvm_fd)
{
	unsigned int nent = 256; /* today's hosts report 60-100 entries: one call */

	while (!kvm_sys.cpuid) {
		struct kvm_cpuid2 *c;
		int r;

		c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));
		if (!c)
			return -ENOMEM;
		c->nent = nent;
		r = kvm_ioctl_ptr(kvm_fd, KVM_GET_SUPPORTED_CPUID, c);
		if (r == 0) {
			kvm_sys.cpuid = c;
			break;
		}
		free(c);
		if (r != -E2BIG || nent >= 4096)
			return r;
		nent *= 2;
	}
	return 0;
}

/* Supported CPUID with the APIC-ID fields set to this vCPU's id. */
static int set_cpuid(struct gfa_kvm_vcpu *vcpu)
{
	struct kvm_cpuid2 *c;
	size_t size;
	int r;

	pthread_mutex_lock(&kvm_sys.lock);
	r = fetch_supported_cpuid(vcpu->vm->kvm_fd);
	if (r) {
		pthread_mutex_unlock(&kvm_sys.lock);
		return r;
	}
	size = sizeof(*c) + kvm_sys.cpuid->nent * sizeof(c->entries[0]);
	c = malloc(size);
	if (c)
		memcpy(c, kvm_sys.cpuid, size);
	pthread_mutex_unlock(&kvm_sys.lock);
	if (!c)
		return -ENOMEM;

	for (uint32_t i = 0; i < c->nent; i++) {
		struct kvm_cpuid_entry2 *e = &c->entries[i];

		if (e->function == 1)
			e->ebx = (e->ebx & 0x00ffffffu) | ((vcpu->id & 0xffu) << 24);
		else if (e->function == 0xb || e->function == 0x1f)
			e->edx = vcpu->id; /* x2APIC id */
	}
	r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_CPUID2, c);
	free(c);
	return r;
}

struct gfa_kvm_vcpu *gfa_kvm_vcpu_create(struct gfa_kvm_vm *vm, unsigned int id)
{
	struct gfa_kvm_vcpu *vcpu;
	struct kvm_run *run;
	int r;

	if (!vm) {
		errno = EFAULT;
		return NULL;
	}
	if (id >= vm->max_vcpu_id) {
		errno = ERANGE;
		return NULL;
	}
	pthread_once(&kick_once, install_kick_handler);
	vcpu = calloc(1, sizeof(*vcpu));
	if (!vcpu) {
		errno = ENOMEM;
		return NULL;
	}
	vcpu->vm = vm;
	vcpu->id = id;
	vcpu->run_size = vm->run_size;
	run = NULL;
	vcpu->fd = unpark_vcpu(vm, id, &run);
	if (vcpu->fd < 0) {
		vcpu->fd = kvm_ioctl(vm->fd, KVM_CREATE_VCPU, id);
		if (vcpu->fd < 0) {
			r = vcpu->fd;
			goto fail_free;
		}
	}
	if (!run) {
		run = mmap(NULL, vcpu->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
		if (run == MAP_FAILED) {
			r = -errno;
			run = NULL;
			vcpu->run = NULL;
			goto fail_unmap; /* KVM keeps the vCPU: park the fd */
		}
	}
	vcpu->run = run;
	r = set_cpuid(vcpu);
	if (!r)
		r = kvm_ioctl_ptr(vcpu->fd, KVM_GET_REGS, &vcpu->init_regs);
	if (!r)
		r = kvm_ioctl_ptr(vcpu->fd, KVM_GET_SREGS, &vcpu->init_sregs);
	if (!r)
		r = kvm_ioctl_ptr(vcpu->fd, KVM_GET_FPU, &vcpu->init_fpu);
	if (r)
		goto fail_unmap;
	r = -pthread_mutex_init(&vcpu->lock, NULL);
	if (r)
		goto fail_unmap;
	r = -pthread_cond_init(&vcpu->cond, NULL);
	if (r)
		goto fail_mutex;

	pthread_mutex_lock(&vm->lock);
	vm->nr_vcpus++;
	pthread_mutex_unlock(&vm->lock);
	return vcpu;

fail_mutex:
	pthread_mutex_destroy(&vcpu->lock);
fail_unmap:
	park_vcpu(vm, id, vcpu->fd, vcpu->run); /* KVM keeps it: the id stays usable */
	goto fail_free;
fail_free:
	free(vcpu);
	errno = -r;
	return NULL;
}

int gfa_kvm_vcpu_destroy(struct gfa_kvm_vcpu *vcpu)
{
	struct gfa_kvm_vm *vm;

	if (!vcpu)
		return 0;
	pthread_mutex_lock(&vcpu->lock);
	if (vcpu->in_run) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&vcpu->lock);
	vm = vcpu->vm;
	park_vcpu(vm, vcpu->id, vcpu->fd, vcpu->run);
	pthread_cond_destroy(&vcpu->cond);
	pthread_mutex_destroy(&vcpu->lock);
	free(vcpu);
	pthread_mutex_lock(&vm->lock);
	vm->nr_vcpus--;
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

int gfa_kvm_vcpu_reset(struct gfa_kvm_vcpu *vcpu)
{
	int r;

	if (!vcpu)
		return -EFAULT;
	pthread_mutex_lock(&vcpu->lock);
	if (vcpu->in_run || vcpu->pause_count) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EBUSY;
	}
	vcpu->kick = false;
	vcpu->requests = 0;
	vcpu->err[0] = '\0';
	pthread_mutex_unlock(&vcpu->lock);
	r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_REGS, &vcpu->init_regs);
	if (!r)
		r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_SREGS, &vcpu->init_sregs);
	if (!r)
		r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_FPU, &vcpu->init_fpu);
	return r;
}

int gfa_kvm_vcpu_fd(const struct gfa_kvm_vcpu *vcpu)
{
	return vcpu ? vcpu->fd : -EFAULT;
}

int gfa_kvm_vcpu_id(const struct gfa_kvm_vcpu *vcpu)
{
	return vcpu ? (int)vcpu->id : -EFAULT;
}
