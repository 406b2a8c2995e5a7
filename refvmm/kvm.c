// SPDX-License-Identifier: MIT
/*
 * KVM plumbing for gfa: VMs, memslots, long-mode vCPUs, the run loop with
 * pause/kick, and KVM binary statistics.  See include/gfa/refvmm.h for the contract
 * and refvmm/kvm_internal.h for the files.
 *
 * Guest RAM is never allocated here: memslots point at caller memory, so the VMM
 * can swap the frames behind a window with mmap(MAP_FIXED) and KVM picks the change
 * up through its MMU notifiers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "refvmm/kvm_internal.h"

#define KVM_PATH "/dev/kvm"

/* ---- small helpers ---------------------------------------------------------- */

static void set_why(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

bool aligned_4k(uint64_t v)
{
	return (v & (PAGE_SIZE_4K - 1)) == 0;
}

/* ioctl that retries on EINTR (KVM_CREATE_VM may be interrupted); -errno on error. */
int kvm_ioctl(int fd, unsigned long req, unsigned long arg)
{
	int r;

	do {
		r = ioctl(fd, req, arg);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

int kvm_ioctl_ptr(int fd, unsigned long req, void *arg)
{
	return kvm_ioctl(fd, req, (unsigned long)arg);
}

/*
 * Open /dev/kvm and check the API version and the capabilities gfa relies on.
 * Returns the fd, or -errno with the reason in @why.
 */
static int open_kvm(char *why, size_t len)
{
	int fd, r;

	fd = open(KVM_PATH, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		set_why(why, len, "cannot open %s: %s", KVM_PATH, strerror(errno));
		return r;
	}
	r = kvm_ioctl(fd, KVM_GET_API_VERSION, 0);
	if (r != KVM_API_VERSION) {
		set_why(why, len, "KVM_GET_API_VERSION returned %d, expected %d", r,
			KVM_API_VERSION);
		close(fd);
		return -EPROTO;
	}
	if (kvm_ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_USER_MEMORY) <= 0 ||
	    kvm_ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_IMMEDIATE_EXIT) <= 0) {
		set_why(why, len, "KVM lacks KVM_CAP_USER_MEMORY or KVM_CAP_IMMEDIATE_EXIT");
		close(fd);
		return -ENOTSUP;
	}
	return fd;
}

static int create_vm_fd(int kvm_fd, char *why, size_t len)
{
	int fd = kvm_ioctl(kvm_fd, KVM_CREATE_VM, 0);

	if (fd < 0)
		set_why(why, len, "KVM_CREATE_VM failed: %s", strerror(-fd));
	return fd;
}

struct kvm_system kvm_sys = { .once = PTHREAD_ONCE_INIT,
			      .fd = -ENODEV,
			      .lock = PTHREAD_MUTEX_INITIALIZER };

static void kvm_system_probe(void)
{
	int kvm_fd = open_kvm(kvm_sys.why, sizeof(kvm_sys.why)), vm_fd;

	if (kvm_fd < 0) {
		kvm_sys.fd = kvm_fd;
		return;
	}
	vm_fd = create_vm_fd(kvm_fd, kvm_sys.why, sizeof(kvm_sys.why));
	if (vm_fd < 0) {
		close(kvm_fd);
		kvm_sys.fd = vm_fd;
		return;
	}
	close(vm_fd);
	kvm_sys.fd = kvm_fd; /* kept open for the process's lifetime */
}

/* The process's /dev/kvm fd, or -errno with the reason in @why. */
static int kvm_system_fd(char *why, size_t len)
{
	pthread_once(&kvm_sys.once, kvm_system_probe);
	if (kvm_sys.fd < 0)
		set_why(why, len, "%s", kvm_sys.why);
	return kvm_sys.fd;
}

int gfa_kvm_available(char *why, size_t len)
{
	set_why(why, len, "%s", "");
	return kvm_system_fd(why, len) >= 0;
}

/* ---- VM ---------------------------------------------------------------------- */

/* A VM capability, falling back to the system fd on kernels without VM-level checks. */
static int vm_cap(struct gfa_kvm_vm *vm, long cap)
{
	int r = kvm_ioctl(vm->fd, KVM_CHECK_EXTENSION, cap);

	if (r < 0)
		r = kvm_ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, cap);
	return r;
}

struct gfa_kvm_vm *gfa_kvm_vm_create(void)
{
	struct gfa_kvm_vm *vm;
	int r;

	vm = calloc(1, sizeof(*vm));
	if (!vm) {
		errno = ENOMEM;
		return NULL;
	}
	vm->fd = -1;
	vm->kvm_fd = kvm_system_fd(NULL, 0);
	if (vm->kvm_fd < 0) {
		r = vm->kvm_fd;
		goto fail;
	}
	vm->fd = create_vm_fd(vm->kvm_fd, NULL, 0);
	if (vm->fd < 0) {
		r = vm->fd;
		goto fail;
	}
	r = kvm_ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (r <= 0) {
		r = r < 0 ? r : -EPROTO;
		goto fail;
	}
	vm->run_size = (size_t)r;

	r = vm_cap(vm, KVM_CAP_NR_MEMSLOTS);
	vm->nr_memslots = r > 0 ? (uint32_t)r : 32; /* KVM's old minimum */
	r = vm_cap(vm, KVM_CAP_MAX_VCPU_ID);
	if (r <= 0)
		r = vm_cap(vm, KVM_CAP_MAX_VCPUS);
	vm->max_vcpu_id = r > 0 ? (uint32_t)r : 1;

	r = -pthread_mutex_init(&vm->lock, NULL);
	if (r)
		goto fail;
	return vm;
fail:
	if (vm->fd >= 0)
		close(vm->fd);
	free(vm);
	errno = -r;
	return NULL;
}

int gfa_kvm_vm_destroy(struct gfa_kvm_vm *vm)
{
	if (!vm)
		return 0;
	pthread_mutex_lock(&vm->lock);
	if (vm->nr_vcpus) {
		pthread_mutex_unlock(&vm->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&vm->lock);
	for (unsigned int i = 0; i < vm->nr_parked; i++) {
		if (vm->parked[i].run)
			munmap(vm->parked[i].run, vm->run_size);
		close(vm->parked[i].fd);
	}
	free(vm->parked);
	/* Closing the VM fd drops every memslot; guest memory stays the caller's. */
	close(vm->fd);
	pthread_mutex_destroy(&vm->lock);
	free(vm->slots);
	free(vm);
	return 0;
}

int gfa_kvm_vm_fd(const struct gfa_kvm_vm *vm)
{
	return vm ? vm->fd : -EFAULT;
}

/* ---- memslots ------------------------------------------------------------------ */

static struct memslot *find_slot(struct gfa_kvm_vm *vm, uint32_t id)
{
	for (unsigned int i = 0; i < vm->nr_slots; i++)
		if (vm->slots[i].id == id)
			return &vm->slots[i];
	return NULL;
}

static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

static int check_memslot_args(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa, void *hva,
			      uint64_t size, uint32_t flags)
{
	const uint32_t known = GFA_KVM_MEM_LOG_DIRTY | GFA_KVM_MEM_READONLY;

	if (!vm)
		return -EFAULT;
	if (slot >= vm->nr_memslots)
		return -ERANGE;
	if (flags & ~known)
		return -EINVAL;
	if (size == 0)
		return 0; /* removal: only the slot number matters */
	if (!hva || !aligned_4k(gpa) || !aligned_4k((uintptr_t)hva) || !aligned_4k(size))
		return -EINVAL;
	if (gpa + size < gpa || (uintptr_t)hva + size < (uintptr_t)hva)
		return -EINVAL;
	return 0;
}

/*
 * Record (or update, or drop) a slot in the table once KVM agreed.  Cannot fail:
 * room for a new slot was reserved before asking KVM.
 */
static void table_update(struct gfa_kvm_vm *vm, struct memslot *old, const struct memslot *s)
{
	if (s->size == 0)
		*old = vm->slots[--vm->nr_slots];
	else if (old)
		*old = *s;
	else
		vm->slots[vm->nr_slots++] = *s;
}

/* Room for one more slot, so table_update() cannot fail after KVM accepted it. */
static int table_reserve(struct gfa_kvm_vm *vm)
{
	struct memslot *n;
	unsigned int cap;

	if (vm->nr_slots < vm->cap_slots)
		return 0;
	cap = vm->cap_slots ? 2 * vm->cap_slots : 8;
	n = realloc(vm->slots, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	vm->slots = n;
	vm->cap_slots = cap;
	return 0;
}

int gfa_kvm_set_memslot(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa, void *hva,
			uint64_t size, uint32_t flags)
{
	struct kvm_userspace_memory_region region = {
		.slot = slot,
		.flags = flags,
		.guest_phys_addr = gpa,
		.memory_size = size,
		.userspace_addr = (uintptr_t)hva,
	};
	struct memslot s = { slot, flags, gpa, size, hva };
	struct memslot *old;
	int r;

	r = check_memslot_args(vm, slot, gpa, hva, size, flags);
	if (r)
		return r;

	pthread_mutex_lock(&vm->lock);
	old = find_slot(vm, slot);
	if (size == 0 && !old) {
		r = -ENOENT;
		goto out;
	}
	if (size == 0) {
		/* KVM checks the address fields even on a delete: pass the slot's own. */
		region.guest_phys_addr = old->gpa;
		region.userspace_addr = (uintptr_t)old->hva;
		region.flags = old->flags;
	}
	for (unsigned int i = 0; size && i < vm->nr_slots; i++) {
		if (vm->slots[i].id != slot &&
		    ranges_overlap(gpa, size, vm->slots[i].gpa, vm->slots[i].size)) {
			r = -EEXIST;
			goto out;
		}
	}
	r = old ? 0 : table_reserve(vm);
	if (r)
		goto out;
	r = kvm_ioctl_ptr(vm->fd, KVM_SET_USER_MEMORY_REGION, &region);
	if (!r)
		table_update(vm, old, &s);
out:
	pthread_mutex_unlock(&vm->lock);
	return r;
}

/* Caller holds vm->lock. */
void *gpa_to_hva_locked(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len)
{
	for (unsigned int i = 0; i < vm->nr_slots; i++) {
		const struct memslot *s = &vm->slots[i];

		if (gpa >= s->gpa && len <= s->size && gpa - s->gpa <= s->size - len)
			return (char *)s->hva + (gpa - s->gpa);
	}
	return NULL;
}

void *gfa_kvm_gpa_to_hva(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len)
{
	void *hva;

	if (!vm || !len) {
		errno = vm ? EINVAL : EFAULT;
		return NULL;
	}
	pthread_mutex_lock(&vm->lock);
	hva = gpa_to_hva_locked(vm, gpa, len);
	pthread_mutex_unlock(&vm->lock);
	if (!hva)
		errno = EFAULT;
	return hva;
}
