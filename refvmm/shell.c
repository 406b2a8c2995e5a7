// SPDX-License-Identifier: MIT
/*
 * VM shells: the KVM side of a VM made before it is needed.  Creating a KVM VM and its
 * vCPUs costs more than taking and mapping a guest's memory (KVM_CREATE_VM, one
 * KVM_CREATE_VCPU, kvm_run mmap and KVM_SET_CPUID2 per vCPU, the memslot), so a start
 * takes a shell from a small process-wide pool, maps the guest's blocks into the
 * shell's window and hands it out; a stop gives the shell back.  The memslot stays:
 * KVM follows MAP_FIXED changes inside a registered memslot through its MMU notifiers,
 * so the window going PROT_NONE at a stop and the next guest's blocks mapped over it
 * are what the next guest sees.  Nothing of the previous guest stays: its frames left
 * the window before they were freed (and are zeroed before reuse), and the vCPUs'
 * registers are reset when the shell comes back (gfa_kvm_vcpu_reset).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "refvmm/shell.h"

#define WINDOW_ALIGN        (2ULL << 20)
#define SHELLS_KEEP_DEFAULT 2u

static struct {
	pthread_mutex_t lock;
	struct vm_shell *idle;
	unsigned int nr_idle;
	unsigned int keep; /* idle shells kept: the largest fill asked, or 2 */
} shells = { .lock = PTHREAD_MUTEX_INITIALIZER, .keep = SHELLS_KEEP_DEFAULT };

static void shell_destroy(struct vm_shell *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; s->vcpu && i < s->nr_vcpus; i++)
		gfa_kvm_vcpu_destroy(s->vcpu[i]);
	gfa_kvm_vm_destroy(s->kvm);
	if (s->reserve)
		munmap(s->reserve, s->reserve_len);
	free(s->vcpu);
	free(s);
}

static struct vm_shell *shell_create(uint64_t mem_bytes, unsigned int vcpus)
{
	struct vm_shell *s = calloc(1, sizeof(*s));
	char *r;
	int err = 0;

	if (!s)
		return NULL;
	s->mem_bytes = mem_bytes;
	s->vcpu = calloc(vcpus, sizeof(*s->vcpu));
	s->reserve_len = mem_bytes + WINDOW_ALIGN;
	r = mmap(NULL, s->reserve_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	if (!s->vcpu || r == MAP_FAILED) {
		err = errno ? errno : ENOMEM;
		goto fail;
	}
	s->reserve = r;
	s->win = (void *)(((uintptr_t)r + WINDOW_ALIGN - 1) & ~(uintptr_t)(WINDOW_ALIGN - 1));
	s->kvm = gfa_kvm_vm_create();
	if (!s->kvm) {
		err = errno;
		goto fail;
	}
	err = -gfa_kvm_set_memslot(s->kvm, 0, 0, s->win, mem_bytes, 0);
	for (; !err && s->nr_vcpus < vcpus; s->nr_vcpus++) {
		s->vcpu[s->nr_vcpus] = gfa_kvm_vcpu_create(s->kvm, s->nr_vcpus);
		if (!s->vcpu[s->nr_vcpus])
			err = errno;
	}
	if (err)
		goto fail;
	return s;
fail:
	shell_destroy(s);
	errno = err;
	return NULL;
}

/* The first idle shell of this shape, unlinked; NULL if none.  Caller holds the lock. */
static struct vm_shell *take_idle(uint64_t mem_bytes, unsigned int vcpus)
{
	for (struct vm_shell **p = &shells.idle; *p; p = &(*p)->next) {
		struct vm_shell *s = *p;

		if (s->mem_bytes == mem_bytes && s->nr_vcpus == vcpus) {
			*p = s->next;
			s->next = NULL;
			shells.nr_idle--;
			return s;
		}
	}
	return NULL;
}

struct vm_shell *vm_shell_get(uint64_t mem_bytes, unsigned int vcpus)
{
	struct vm_shell *s;

	pthread_mutex_lock(&shells.lock);
	s = take_idle(mem_bytes, vcpus);
	pthread_mutex_unlock(&shells.lock);
	return s ? s : shell_create(mem_bytes, vcpus);
}

void vm_shell_put(struct vm_shell *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; i < s->nr_vcpus; i++)
		if (gfa_kvm_vcpu_reset(s->vcpu[i])) {
			shell_destroy(s); /* state we cannot clear goes with the shell */
			return;
		}
	pthread_mutex_lock(&shells.lock);
	if (shells.nr_idle < shells.keep) {
		s->next = shells.idle;
		shells.idle = s;
		shells.nr_idle++;
		s = NULL;
	}
	pthread_mutex_unlock(&shells.lock);
	shell_destroy(s);
}

/* Idle shells of this shape.  Caller holds the lock. */
static unsigned int count_idle(uint64_t mem_bytes, unsigned int vcpus)
{
	unsigned int n = 0;

	for (struct vm_shell *s = shells.idle; s; s = s->next)
		n += s->mem_bytes == mem_bytes && s->nr_vcpus == vcpus;
	return n;
}

int gfa_vm_shells_fill(uint64_t mem_bytes, unsigned int vcpus, unsigned int n)
{
	char why[160];
	int made = 0;

	if (!mem_bytes || mem_bytes % WINDOW_ALIGN || !vcpus || vcpus > GFA_VM_MAX_VCPUS ||
	    n > GFA_VM_SHELLS_MAX)
		return -EINVAL;
	if (!gfa_kvm_available(why, sizeof(why)))
		return -ENODEV;
	pthread_mutex_lock(&shells.lock);
	if (shells.keep < n)
		shells.keep = n;
	while (count_idle(mem_bytes, vcpus) < n) {
		struct vm_shell *s;

		pthread_mutex_unlock(&shells.lock);
		s = shell_create(mem_bytes, vcpus);
		if (!s)
			return made ? made : -errno;
		pthread_mutex_lock(&shells.lock);
		s->next = shells.idle;
		shells.idle = s;
		shells.nr_idle++;
		made++;
	}
	pthread_mutex_unlock(&shells.lock);
	return made;
}

unsigned int gfa_vm_shells_idle(void)
{
	unsigned int n;

	pthread_mutex_lock(&shells.lock);
	n = shells.nr_idle;
	pthread_mutex_unlock(&shells.lock);
	return n;
}

void gfa_vm_shells_drain(void)
{
	struct vm_shell *s;

	pthread_mutex_lock(&shells.lock);
	s = shells.idle;
	shells.idle = NULL;
	shells.nr_idle = 0;
	shells.keep = SHELLS_KEEP_DEFAULT;
	pthread_mutex_unlock(&shells.lock);
	while (s) {
		struct vm_shell *next = s->next;

		shell_destroy(s);
		s = next;
	}
}
