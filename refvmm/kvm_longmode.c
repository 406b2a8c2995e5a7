// SPDX-License-Identifier: MIT
/*
 * Long mode (refvmm/kvm_internal.h): the boot area in guest memory - GDT, TSS and
 * identity-mapping page tables - and the registers that put a vCPU straight into
 * 64-bit mode at an entry point.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>

#include "refvmm/kvm_internal.h"

#define GIB (1ULL << 30)

/* x86 control-register and page-table bits used to enter long mode. */
#define X86_CR0_PE   (1ULL << 0)
#define X86_CR0_MP   (1ULL << 1)
#define X86_CR0_ET   (1ULL << 4)
#define X86_CR0_NE   (1ULL << 5)
#define X86_CR0_WP   (1ULL << 16)
#define X86_CR0_AM   (1ULL << 18)
#define X86_CR0_PG   (1ULL << 31)
#define X86_CR4_PAE  (1ULL << 5)
#define X86_EFER_LME (1ULL << 8)
#define X86_EFER_LMA (1ULL << 10)
#define PTE_PRESENT  (1ULL << 0)
#define PTE_RW       (1ULL << 1)
#define PTE_PS       (1ULL << 7) /* in a PDE: this entry maps 2 MiB */

#define GDT_CODE64  0x00af9b000000ffffULL /* P, DPL0, exec/read, L, G */
#define GDT_DATA    0x00cf93000000ffffULL /* P, DPL0, read/write, D/B, G */
#define SEL_CODE    0x08
#define SEL_DATA    0x10
#define SEL_TSS     0x18
#define GDT_ENTRIES 5    /* null, code, data, TSS (2 slots) */
#define TSS_LIMIT   0x67 /* 104 bytes */

/* ---- long mode: boot area ---------------------------------------------------- */

static uint64_t nr_page_directories(uint64_t map_size)
{
	return (map_size + GIB - 1) / GIB;
}

uint64_t gfa_kvm_boot_area_size(uint64_t map_size)
{
	if (!map_size || map_size % GFA_KVM_HUGE_PAGE || map_size > GFA_KVM_MAX_IDENTITY_MAP)
		return 0;
	return GFA_KVM_BOOT_PD + nr_page_directories(map_size) * PAGE_SIZE_4K;
}

static void write_gdt(uint64_t *gdt, uint64_t tss_base)
{
	uint64_t limit = TSS_LIMIT;

	gdt[0] = 0;
	gdt[1] = GDT_CODE64;
	gdt[2] = GDT_DATA;
	/* 64-bit TSS descriptor (16 bytes): type 0xB (busy), present. */
	gdt[3] = (limit & 0xffff) | ((tss_base & 0xffffff) << 16) | (0x8bULL << 40) |
		 (((limit >> 16) & 0xf) << 48) | (((tss_base >> 24) & 0xff) << 56);
	gdt[4] = tss_base >> 32;
}

/* Identity map [0, map_size) with 2 MiB pages: PML4[0] -> PDPT -> one PD per GiB. */
static void write_page_tables(char *area, uint64_t boot_gpa, uint64_t map_size)
{
	uint64_t *pml4 = (uint64_t *)(area + GFA_KVM_BOOT_PML4);
	uint64_t *pdpt = (uint64_t *)(area + GFA_KVM_BOOT_PDPT);
	uint64_t *pd = (uint64_t *)(area + GFA_KVM_BOOT_PD);
	uint64_t n_pd = nr_page_directories(map_size);

	pml4[0] = (boot_gpa + GFA_KVM_BOOT_PDPT) | PTE_PRESENT | PTE_RW;
	for (uint64_t i = 0; i < n_pd; i++)
		pdpt[i] = (boot_gpa + GFA_KVM_BOOT_PD + i * PAGE_SIZE_4K) | PTE_PRESENT | PTE_RW;
	/* The PD pages are contiguous, so entry j of the whole run maps j * 2 MiB. */
	for (uint64_t j = 0; j < map_size / GFA_KVM_HUGE_PAGE; j++)
		pd[j] = (j * GFA_KVM_HUGE_PAGE) | PTE_PRESENT | PTE_RW | PTE_PS;
}

int gfa_kvm_vm_build_page_tables(struct gfa_kvm_vm *vm, uint64_t boot_gpa, uint64_t map_size)
{
	uint64_t area_size = gfa_kvm_boot_area_size(map_size);
	char *area;
	uint16_t *iomap_base;

	if (!vm)
		return -EFAULT;
	if (!aligned_4k(boot_gpa) || !area_size || boot_gpa + area_size < boot_gpa)
		return -EINVAL;
	pthread_mutex_lock(&vm->lock);
	area = gpa_to_hva_locked(vm, boot_gpa, area_size);
	if (!area) {
		pthread_mutex_unlock(&vm->lock);
		return -EFAULT;
	}
	memset(area, 0, area_size);
	write_gdt((uint64_t *)(area + GFA_KVM_BOOT_GDT), boot_gpa + GFA_KVM_BOOT_TSS);
	/* TSS: I/O map base beyond the limit means "no I/O permission bitmap". */
	iomap_base = (uint16_t *)(area + GFA_KVM_BOOT_TSS + 0x66);
	*iomap_base = TSS_LIMIT + 1;
	write_page_tables(area, boot_gpa, map_size);
	vm->boot_gpa = boot_gpa;
	vm->boot_valid = true;
	pthread_mutex_unlock(&vm->lock);
	return 0;
}

/* ---- long mode: a vCPU's entry ----------------------------------------------- */

static struct kvm_segment flat_segment(uint16_t selector, uint8_t type, bool code64)
{
	struct kvm_segment s = {
		.base = 0,
		.limit = 0xffffffff,
		.selector = selector,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = code64 ? 0 : 1, /* L=1 requires D=0 */
		.s = 1,
		.l = code64,
		.g = 1,
	};
	return s;
}

static void long_mode_sregs(struct kvm_sregs *sr, uint64_t boot_gpa)
{
	struct kvm_segment data = flat_segment(SEL_DATA, 3, false); /* rw, accessed */
	struct kvm_segment tr = {
		.base = boot_gpa + GFA_KVM_BOOT_TSS,
		.limit = TSS_LIMIT,
		.selector = SEL_TSS,
		.type = 11, /* 64-bit TSS, busy */
		.present = 1,
	};
	struct kvm_segment ldt = { .type = 2, .unusable = 1 };

	sr->cs = flat_segment(SEL_CODE, 11, true); /* exec/read, accessed */
	sr->ds = sr->es = sr->fs = sr->gs = sr->ss = data;
	sr->tr = tr;
	sr->ldt = ldt;
	sr->gdt.base = boot_gpa + GFA_KVM_BOOT_GDT;
	sr->gdt.limit = GDT_ENTRIES * 8 - 1;
	sr->idt.base = 0;
	sr->idt.limit = 0;
	sr->cr0 = X86_CR0_PE | X86_CR0_MP | X86_CR0_ET | X86_CR0_NE | X86_CR0_WP | X86_CR0_AM |
		  X86_CR0_PG;
	sr->cr3 = boot_gpa + GFA_KVM_BOOT_PML4;
	sr->cr4 = X86_CR4_PAE;
	sr->efer = X86_EFER_LME | X86_EFER_LMA;
}

/* True if another thread is inside run for this vCPU. */
static bool running_elsewhere(struct gfa_kvm_vcpu *vcpu)
{
	bool busy;

	pthread_mutex_lock(&vcpu->lock);
	busy = vcpu->in_run && !pthread_equal(vcpu->thread, pthread_self());
	pthread_mutex_unlock(&vcpu->lock);
	return busy;
}

int gfa_kvm_vcpu_enter_long_mode(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_entry *entry)
{
	struct gfa_kvm_vm *vm;
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	uint64_t boot_gpa;
	bool valid;
	int r;

	if (!vcpu || !entry)
		return -EFAULT;
	vm = vcpu->vm;
	pthread_mutex_lock(&vm->lock);
	valid = vm->boot_valid;
	boot_gpa = vm->boot_gpa;
	pthread_mutex_unlock(&vm->lock);
	if (!valid)
		return -ENOENT;
	if (running_elsewhere(vcpu))
		return -EBUSY;
	/*
	 * A run that ended on an IO or MMIO exit leaves the instruction half done: the
	 * next KVM_RUN completes it and writes its registers and RIP back over ours.  Let
	 * KVM finish it now (immediate_exit: it returns at once, EINTR).
	 */
	if (vcpu->run->exit_reason == KVM_EXIT_IO || vcpu->run->exit_reason == KVM_EXIT_MMIO) {
		__atomic_store_n(&vcpu->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
		r = ioctl(vcpu->fd, KVM_RUN, 0) < 0 && errno != EINTR ? -errno : 0;
		__atomic_store_n(&vcpu->run->immediate_exit, 0, __ATOMIC_SEQ_CST);
		if (r)
			return r;
	}

	/* Start from KVM's sregs to keep fields we do not set (APIC base, ...). */
	r = kvm_ioctl_ptr(vcpu->fd, KVM_GET_SREGS, &sregs);
	if (r)
		return r;
	long_mode_sregs(&sregs, boot_gpa);
	r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_SREGS, &sregs);
	if (r)
		return r;

	memset(&regs, 0, sizeof(regs));
	regs.rflags = 0x2; /* bit 1 is reserved-one; IF=0 */
	regs.rip = entry->rip;
	regs.rsp = entry->rsp;
	regs.rdi = entry->args[0];
	regs.rsi = entry->args[1];
	regs.rdx = entry->args[2];
	regs.rcx = entry->args[3];
	regs.r8 = entry->args[4];
	regs.r9 = entry->args[5];
	return kvm_ioctl_ptr(vcpu->fd, KVM_SET_REGS, &regs);
}
