/* SPDX-License-Identifier: MIT */
/*
 * The KVM plumbing, private to its files (the API: include/gfa/refvmm.h):
 *
 *   kvm.c           opening /dev/kvm once per process, VMs, memslots
 *   kvm_stats.c     KVM binary statistics of a VM or a vCPU
 *   kvm_longmode.c  the boot area (GDT, TSS, identity page tables) and a vCPU's
 *                   entry into long mode
 *   kvm_vcpu.c      vCPUs: create (with the kick signal's handler), destroy, reset
 *   kvm_run.c       the run loop and its exits, pause, resume, kick
 */
#ifndef GFA_REFVMM_KVM_INTERNAL_H
#define GFA_REFVMM_KVM_INTERNAL_H
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gfa/refvmm.h>

#define PAGE_SIZE_4K 4096ULL

struct memslot {
	uint32_t id;
	uint32_t flags;
	uint64_t gpa;
	uint64_t size;
	void *hva;
};

struct gfa_kvm_vm {
	int kvm_fd;
	int fd;
	uint32_t nr_memslots; /* KVM_CAP_NR_MEMSLOTS */
	uint32_t max_vcpu_id; /* ids must be below this */
	size_t run_size;      /* KVM_GET_VCPU_MMAP_SIZE */

	pthread_mutex_t lock; /* protects everything below */
	struct memslot *slots;
	unsigned int nr_slots;
	unsigned int cap_slots;
	unsigned int nr_vcpus;
	gfa_kvm_mmio_fn mmio_fn; /* set before vCPUs run, read by them */
	void *mmio_ctx;
	bool boot_valid;
	uint64_t boot_gpa;
	/* vCPUs destroyed: KVM keeps a vCPU until its VM goes, so the fd is parked and
	 * taken again by a create of the same id (QEMU's kvm_park_vcpu) */
	struct parked_vcpu {
		unsigned int id;
		int fd;
		struct kvm_run *run;
	} * parked;
	unsigned int nr_parked, cap_parked;
};

struct gfa_kvm_vcpu {
	struct gfa_kvm_vm *vm;
	int fd;
	unsigned int id;
	struct kvm_run *run;
	size_t run_size;

	/* Lock-free hint for the run loop; written only with @lock held. */
	unsigned int requests;

	pthread_mutex_t lock; /* protects the fields below */
	pthread_cond_t cond;  /* parked/in_run changes, resume, kick */
	bool in_run;          /* a thread is inside gfa_kvm_vcpu_run */
	bool parked;          /* ... and waits in the pause loop */
	pthread_t thread;     /* valid while in_run */
	unsigned int pause_count;
	bool kick;

	char err[256]; /* last run error, in words */
	/* the registers at creation, for gfa_kvm_vcpu_reset */
	struct kvm_regs init_regs;
	struct kvm_sregs init_sregs;
	struct kvm_fpu init_fpu;
	sigset_t saved_mask; /* run thread's mask before run (run thread only) */
};

/*
 * What every VM of the process shares, found out once: the /dev/kvm fd (checked, and
 * a throwaway VM created once to prove KVM_CREATE_VM works), its vCPU mmap size and
 * the supported-CPUID table.  Probing per start cost a VM creation each time, and the
 * CPUID table two ioctls per VM (the first too small).
 */
struct kvm_system {
	pthread_once_t once;
	int fd; /* -errno when KVM is unusable */
	char why[160];
	pthread_mutex_t lock; /* the CPUID table below */
	struct kvm_cpuid2 *cpuid;
};
extern struct kvm_system kvm_sys;

/* ---- kvm.c ---- */
bool aligned_4k(uint64_t v);
int kvm_ioctl(int fd, unsigned long req, unsigned long arg);
int kvm_ioctl_ptr(int fd, unsigned long req, void *arg);
void *gpa_to_hva_locked(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len);

/* ---- kvm_vcpu.c ---- */
void kick_handler(int sig);

#endif
