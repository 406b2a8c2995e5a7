/* SPDX-License-Identifier: MIT */
/* VM shells, shared by refvmm/shell.c and refvmm/vm.c.  Not installed. */
#ifndef GFA_REFVMM_SHELL_H
#define GFA_REFVMM_SHELL_H
#include <gfa/refvmm.h>

/* A KVM VM without memory: vCPUs, and the guest window registered as memslot 0. */
struct vm_shell {
	struct gfa_kvm_vm *kvm;
	struct gfa_kvm_vcpu **vcpu;
	unsigned int nr_vcpus;
	uint64_t mem_bytes;
	void *reserve; /* the window's reservation (munmapped with the shell) */
	size_t reserve_len;
	void *win; /* 2 MiB aligned, mem_bytes, PROT_NONE while no guest */
	struct vm_shell *next;
};

/* An idle shell of this shape from the pool, else a new one (NULL, errno set). */
struct vm_shell *vm_shell_get(uint64_t mem_bytes, unsigned int vcpus);
/* Back to the pool with its vCPUs reset (the window must map no frame any more), or
 * destroyed when the pool is full or a reset fails. */
void vm_shell_put(struct vm_shell *s);

/*
 * Baselines for VM starts: the kernel's own memory behind the same KVM creation a gfa
 * start without a shell does (KVM VM, memslot, vCPUs, page tables and test code), for
 * gfactl vmstart and bench/vmstart.  Not part of the reference VMM's API.
 */
enum baseline_mem {
	BASELINE_PREFAULTED, /* a THP memfd populated (faulted, zeroed) before the timer */
	BASELINE_THP,        /* anonymous memory, MADV_HUGEPAGE, faulted at first touch */
	BASELINE_4K,         /* anonymous memory, MADV_NOHUGEPAGE */
	BASELINE_HUGETLB,    /* a MFD_HUGETLB memfd from the reserved 2 MiB pool */
};

struct baseline_vm {
	enum baseline_mem kind;
	uint64_t len;
	unsigned int vcpus;
	int fd; /* memfd kinds */
	char *mem;
	struct gfa_kvm_vm *kvm;
	struct gfa_kvm_vcpu *vcpu[GFA_VM_MAX_VCPUS];
};

/* Untimed: what comes before the timer (the pre-faulted memfd).  0 or -errno. */
int baseline_prepare(struct baseline_vm *bv, enum baseline_mem kind, uint64_t len,
		     unsigned int vcpus);
/* Timed: map the memory, with kvm the KVM creation, then the vCPU threads' first touch
 * of every 4 KiB above the first 2 MiB (as a gfa start's).  0 or -errno. */
int baseline_start(struct baseline_vm *bv, bool kvm);
void baseline_destroy(struct baseline_vm *bv);
/* The first touch of [p, p + len) by `threads` threads, one 4 KiB store each page. */
void baseline_touch(char *p, uint64_t len, unsigned int threads);

/* hugetlbfs' 2 MiB pool: make room for `pages` more (root), remember what to restore.
 * Returns the pages now free, or -errno (with the reason in why). */
long baseline_hugetlb_reserve(unsigned long pages, char *why, size_t len);
void baseline_hugetlb_restore(void);

/* gfa_zero against memset over `bytes` resident bytes, interleaved `reps` times. */
struct zero_rates {
	double memset_min_ms, memset_p50_ms, zero_min_ms, zero_p50_ms;
	double memset_gbs, zero_gbs; /* at the medians */
	const char *method;
};
int baseline_zero_rates(uint64_t bytes, unsigned int reps, struct zero_rates *zr);
#endif
