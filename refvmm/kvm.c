// SPDX-License-Identifier: MIT
/*
 * KVM plumbing for gfa: VMs, memslots, long-mode vCPUs, the run loop with
 * pause/kick, and KVM binary statistics.  See include/gfa/refvmm.h for the contract.
 *
 * Guest RAM is never allocated here: memslots point at caller memory, so the VMM
 * can swap the frames behind a window with mmap(MAP_FIXED) and KVM picks the change
 * up through its MMU notifiers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gfa/refvmm.h>

#define KVM_PATH	"/dev/kvm"
#define PAGE_SIZE_4K	4096ULL
#define GIB		(1ULL << 30)

/* x86 control-register and page-table bits used to enter long mode. */
#define X86_CR0_PE	(1ULL << 0)
#define X86_CR0_MP	(1ULL << 1)
#define X86_CR0_ET	(1ULL << 4)
#define X86_CR0_NE	(1ULL << 5)
#define X86_CR0_WP	(1ULL << 16)
#define X86_CR0_AM	(1ULL << 18)
#define X86_CR0_PG	(1ULL << 31)
#define X86_CR4_PAE	(1ULL << 5)
#define X86_EFER_LME	(1ULL << 8)
#define X86_EFER_LMA	(1ULL << 10)
#define PTE_PRESENT	(1ULL << 0)
#define PTE_RW		(1ULL << 1)
#define PTE_PS		(1ULL << 7)	/* in a PDE: this entry maps 2 MiB */

#define GDT_CODE64	0x00af9b000000ffffULL	/* P, DPL0, exec/read, L, G */
#define GDT_DATA	0x00cf93000000ffffULL	/* P, DPL0, read/write, D/B, G */
#define SEL_CODE	0x08
#define SEL_DATA	0x10
#define SEL_TSS		0x18
#define GDT_ENTRIES	5			/* null, code, data, TSS (2 slots) */
#define TSS_LIMIT	0x67			/* 104 bytes */

#define REQ_PAUSE	(1u << 0)
#define REQ_KICK	(1u << 1)

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
	uint32_t nr_memslots;		/* KVM_CAP_NR_MEMSLOTS */
	uint32_t max_vcpu_id;		/* ids must be below this */
	size_t run_size;		/* KVM_GET_VCPU_MMAP_SIZE */

	pthread_mutex_t lock;		/* protects everything below */
	struct memslot *slots;
	unsigned int nr_slots;
	unsigned int cap_slots;
	unsigned int nr_vcpus;
	gfa_kvm_mmio_fn mmio_fn;	/* set before vCPUs run, read by them */
	void *mmio_ctx;
	bool boot_valid;
	uint64_t boot_gpa;
	/* vCPUs destroyed: KVM keeps a vCPU until its VM goes, so the fd is parked and
	 * taken again by a create of the same id (QEMU's kvm_park_vcpu) */
	struct parked_vcpu { unsigned int id; int fd; struct kvm_run *run; } *parked;
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

	pthread_mutex_t lock;		/* protects the fields below */
	pthread_cond_t cond;		/* parked/in_run changes, resume, kick */
	bool in_run;			/* a thread is inside gfa_kvm_vcpu_run */
	bool parked;			/* ... and waits in the pause loop */
	pthread_t thread;		/* valid while in_run */
	unsigned int pause_count;
	bool kick;

	char err[256];			/* last run error, in words */
	/* the registers at creation, for gfa_kvm_vcpu_reset */
	struct kvm_regs init_regs;
	struct kvm_sregs init_sregs;
	struct kvm_fpu init_fpu;
	sigset_t saved_mask;		/* run thread's mask before run (run thread only) */
};

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

static bool aligned_4k(uint64_t v)
{
	return (v & (PAGE_SIZE_4K - 1)) == 0;
}

/* ioctl that retries on EINTR (KVM_CREATE_VM may be interrupted); -errno on error. */
static int kvm_ioctl(int fd, unsigned long req, unsigned long arg)
{
	int r;

	do {
		r = ioctl(fd, req, arg);
	} while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : r;
}

static int kvm_ioctl_ptr(int fd, unsigned long req, void *arg)
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

/*
 * What every VM of the process shares, found out once: the /dev/kvm fd (checked, and
 * a throwaway VM created once to prove KVM_CREATE_VM works), its vCPU mmap size and
 * the supported-CPUID table.  Probing per start cost a VM creation each time, and the
 * CPUID table two ioctls per VM (the first too small).
 */
static struct kvm_system {
	pthread_once_t once;
	int fd;                         /* -errno when KVM is unusable */
	char why[160];
	pthread_mutex_t lock;           /* the CPUID table below */
	struct kvm_cpuid2 *cpuid;
} kvm_sys = { .once = PTHREAD_ONCE_INIT, .fd = -ENODEV, .lock = PTHREAD_MUTEX_INITIALIZER };

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
	kvm_sys.fd = kvm_fd;            /* kept open for the process's lifetime */
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
	vm->nr_memslots = r > 0 ? (uint32_t)r : 32;	/* KVM's old minimum */
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

static int check_memslot_args(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa,
			      void *hva, uint64_t size, uint32_t flags)
{
	const uint32_t known = GFA_KVM_MEM_LOG_DIRTY | GFA_KVM_MEM_READONLY;

	if (!vm)
		return -EFAULT;
	if (slot >= vm->nr_memslots)
		return -ERANGE;
	if (flags & ~known)
		return -EINVAL;
	if (size == 0)
		return 0;	/* removal: only the slot number matters */
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

int gfa_kvm_set_memslot(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa,
			void *hva, uint64_t size, uint32_t flags)
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
static void *gpa_to_hva_locked(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len)
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

/* ---- binary statistics ------------------------------------------------------- */

static int pread_full(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n = pread(fd, buf, len, off);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

/*
 * Look @name up in a KVM stats fd: header, then num_desc descriptors of
 * sizeof(struct kvm_stats_desc) + name_size bytes each, then the data block.
 */
static int stats_fd_lookup(int sfd, const char *name, uint64_t *val)
{
	struct kvm_stats_header hdr;
	size_t desc_size;
	char *descs;
	int r;

	r = pread_full(sfd, &hdr, sizeof(hdr), 0);
	if (r)
		return r;
	if (hdr.name_size == 0 || hdr.num_desc > 100000)
		return -EIO;
	desc_size = sizeof(struct kvm_stats_desc) + hdr.name_size;
	descs = malloc(desc_size * hdr.num_desc);
	if (!descs)
		return -ENOMEM;
	r = pread_full(sfd, descs, desc_size * hdr.num_desc, hdr.desc_offset);
	if (r)
		goto out;
	r = -ENOENT;
	for (uint32_t i = 0; i < hdr.num_desc; i++) {
		struct kvm_stats_desc *d = (void *)(descs + i * desc_size);

		if (strnlen(d->name, hdr.name_size) == hdr.name_size ||
		    strcmp(d->name, name) != 0)
			continue;
		if (d->size != 1) {
			r = -EINVAL;	/* a histogram: several values */
			break;
		}
		r = pread_full(sfd, val, sizeof(*val), (off_t)hdr.data_offset + d->offset);
		break;
	}
out:
	free(descs);
	return r;
}

static int stats_lookup(int owner_fd, int check_fd, const char *name, uint64_t *val)
{
	int sfd, r;

	if (kvm_ioctl(check_fd, KVM_CHECK_EXTENSION, KVM_CAP_BINARY_STATS_FD) <= 0)
		return -EOPNOTSUPP;
	sfd = kvm_ioctl(owner_fd, KVM_GET_STATS_FD, 0);
	if (sfd < 0)
		return sfd == -ENOTTY || sfd == -EINVAL ? -EOPNOTSUPP : sfd;
	r = stats_fd_lookup(sfd, name, val);
	close(sfd);
	return r;
}

int gfa_kvm_vm_stat(struct gfa_kvm_vm *vm, const char *name, uint64_t *val)
{
	if (!vm || !name || !val)
		return -EFAULT;
	return stats_lookup(vm->fd, vm->fd, name, val);
}

int gfa_kvm_vcpu_stat(struct gfa_kvm_vcpu *vcpu, const char *name, uint64_t *val)
{
	if (!vcpu || !name || !val)
		return -EFAULT;
	return stats_lookup(vcpu->fd, vcpu->vm->fd, name, val);
}

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

int gfa_kvm_vm_build_page_tables(struct gfa_kvm_vm *vm, uint64_t boot_gpa,
				 uint64_t map_size)
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

/* ---- vCPUs ------------------------------------------------------------------- */

static void kick_handler(int sig)
{
	(void)sig;	/* only here so the signal interrupts KVM_RUN instead of killing */
}

static void install_kick_handler(void)
{
	struct sigaction old, sa;

	if (sigaction(GFA_KVM_KICK_SIGNAL, NULL, &old) == 0 &&
	    ((old.sa_flags & SA_SIGINFO) ||
	     (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)))
		return;	/* the application handles it: any handler interrupts KVM_RUN */
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
	unsigned int nent = 256;        /* today's hosts report 60-100 entries: one call */

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
			e->edx = vcpu->id;	/* x2APIC id */
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
			goto fail_unmap;	/* KVM keeps the vCPU: park the fd */
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
	park_vcpu(vm, id, vcpu->fd, vcpu->run);    /* KVM keeps it: the id stays usable */
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

static struct kvm_segment flat_segment(uint16_t selector, uint8_t type, bool code64)
{
	struct kvm_segment s = {
		.base = 0,
		.limit = 0xffffffff,
		.selector = selector,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = code64 ? 0 : 1,	/* L=1 requires D=0 */
		.s = 1,
		.l = code64,
		.g = 1,
	};
	return s;
}

static void long_mode_sregs(struct kvm_sregs *sr, uint64_t boot_gpa)
{
	struct kvm_segment data = flat_segment(SEL_DATA, 3, false);	/* rw, accessed */
	struct kvm_segment tr = {
		.base = boot_gpa + GFA_KVM_BOOT_TSS,
		.limit = TSS_LIMIT,
		.selector = SEL_TSS,
		.type = 11,	/* 64-bit TSS, busy */
		.present = 1,
	};
	struct kvm_segment ldt = { .type = 2, .unusable = 1 };

	sr->cs = flat_segment(SEL_CODE, 11, true);	/* exec/read, accessed */
	sr->ds = sr->es = sr->fs = sr->gs = sr->ss = data;
	sr->tr = tr;
	sr->ldt = ldt;
	sr->gdt.base = boot_gpa + GFA_KVM_BOOT_GDT;
	sr->gdt.limit = GDT_ENTRIES * 8 - 1;
	sr->idt.base = 0;
	sr->idt.limit = 0;
	sr->cr0 = X86_CR0_PE | X86_CR0_MP | X86_CR0_ET | X86_CR0_NE | X86_CR0_WP |
		  X86_CR0_AM | X86_CR0_PG;
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

int gfa_kvm_vcpu_enter_long_mode(struct gfa_kvm_vcpu *vcpu,
				 const struct gfa_kvm_entry *entry)
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
	regs.rflags = 0x2;	/* bit 1 is reserved-one; IF=0 */
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

/* ---- run loop -------------------------------------------------------------------- */

static const char *const exit_names[] = {
	[KVM_EXIT_UNKNOWN] = "UNKNOWN",
	[KVM_EXIT_EXCEPTION] = "EXCEPTION",
	[KVM_EXIT_IO] = "IO",
	[KVM_EXIT_HYPERCALL] = "HYPERCALL",
	[KVM_EXIT_DEBUG] = "DEBUG",
	[KVM_EXIT_HLT] = "HLT",
	[KVM_EXIT_MMIO] = "MMIO",
	[KVM_EXIT_IRQ_WINDOW_OPEN] = "IRQ_WINDOW_OPEN",
	[KVM_EXIT_SHUTDOWN] = "SHUTDOWN",
	[KVM_EXIT_FAIL_ENTRY] = "FAIL_ENTRY",
	[KVM_EXIT_INTR] = "INTR",
	[KVM_EXIT_SET_TPR] = "SET_TPR",
	[KVM_EXIT_TPR_ACCESS] = "TPR_ACCESS",
	[KVM_EXIT_NMI] = "NMI",
	[KVM_EXIT_INTERNAL_ERROR] = "INTERNAL_ERROR",
	[KVM_EXIT_SYSTEM_EVENT] = "SYSTEM_EVENT",
	[KVM_EXIT_IOAPIC_EOI] = "IOAPIC_EOI",
	[KVM_EXIT_HYPERV] = "HYPERV",
	[KVM_EXIT_X86_RDMSR] = "X86_RDMSR",
	[KVM_EXIT_X86_WRMSR] = "X86_WRMSR",
#ifdef KVM_EXIT_DIRTY_RING_FULL
	[KVM_EXIT_DIRTY_RING_FULL] = "DIRTY_RING_FULL",
#endif
#ifdef KVM_EXIT_X86_BUS_LOCK
	[KVM_EXIT_X86_BUS_LOCK] = "X86_BUS_LOCK",
#endif
#ifdef KVM_EXIT_XEN
	[KVM_EXIT_XEN] = "XEN",
#endif
#ifdef KVM_EXIT_NOTIFY
	[KVM_EXIT_NOTIFY] = "NOTIFY",
#endif
};

static const char *exit_name(uint32_t reason)
{
	if (reason < sizeof(exit_names) / sizeof(exit_names[0]) && exit_names[reason])
		return exit_names[reason];
	return "?";
}

static const char *internal_error_name(uint32_t suberror)
{
	switch (suberror) {
	case KVM_INTERNAL_ERROR_EMULATION:
		return "instruction emulation failed";
	case KVM_INTERNAL_ERROR_SIMUL_EX:
		return "exception while delivering an exception";
	case KVM_INTERNAL_ERROR_DELIVERY_EV:
		return "exit while delivering an event";
	case KVM_INTERNAL_ERROR_UNEXPECTED_EXIT_REASON:
		return "unexpected hardware exit reason";
	default:
		return "unknown suberror";
	}
}

static uint64_t guest_rip(struct gfa_kvm_vcpu *vcpu)
{
	struct kvm_regs regs;

	if (kvm_ioctl_ptr(vcpu->fd, KVM_GET_REGS, &regs))
		return ~0ULL;
	return regs.rip;
}

/* Record a run error in words, print it, and return @err. */
__attribute__((format(printf, 3, 4)))
static int vcpu_fail(struct gfa_kvm_vcpu *vcpu, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(vcpu->err, sizeof(vcpu->err), fmt, ap);
	va_end(ap);
	fprintf(stderr, "gfa_kvm: vcpu %u: %s\n", vcpu->id, vcpu->err);
	return err;
}

static int handle_io(struct gfa_kvm_vcpu *vcpu, gfa_kvm_io_fn fn, void *ctx)
{
	struct kvm_run *run = vcpu->run;
	struct gfa_kvm_io io = {
		.port = run->io.port,
		.size = run->io.size,
		.out = run->io.direction == KVM_EXIT_IO_OUT,
		.count = run->io.count,
		.data = (char *)run + run->io.data_offset,
	};
	int r;

	if (!fn)
		return vcpu_fail(vcpu, -ENOSYS, "port IO %s port 0x%x (size %u) but no IO handler",
				 io.out ? "OUT to" : "IN from", io.port, io.size);
	r = fn(vcpu, &io, ctx);
	if (r < 0)
		return vcpu_fail(vcpu, r, "IO handler failed for %s port 0x%x (size %u): %s",
				 io.out ? "OUT to" : "IN from", io.port, io.size, strerror(-r));
	if (r == GFA_KVM_IO_STOP)
		return GFA_KVM_RUN_STOPPED;
	if (r != GFA_KVM_IO_CONTINUE)
		return vcpu_fail(vcpu, -EINVAL, "IO handler returned %d for port 0x%x", r, io.port);
	return 0;
}

static int handle_mmio(struct gfa_kvm_vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	struct gfa_kvm_mmio m = {
		.gpa = run->mmio.phys_addr, .len = run->mmio.len,
		.write = run->mmio.is_write, .data = run->mmio.data,
	};
	int r = vcpu->vm->mmio_fn(vcpu, &m, vcpu->vm->mmio_ctx);

	if (r < 0)
		return vcpu_fail(vcpu, r, "MMIO handler failed at GPA 0x%llx: %s",
				 (unsigned long long)m.gpa, strerror(-r));
	return r == GFA_KVM_IO_STOP ? GFA_KVM_RUN_STOPPED : 0;
}

int gfa_kvm_vm_set_mmio_handler(struct gfa_kvm_vm *vm, gfa_kvm_mmio_fn fn, void *ctx)
{
	if (!vm)
		return -EFAULT;
	vm->mmio_fn = fn;
	vm->mmio_ctx = ctx;
	return 0;
}

/* One KVM exit: 0 to re-enter the guest, > 0 a run result, < 0 an error. */
static int handle_exit(struct gfa_kvm_vcpu *vcpu, gfa_kvm_io_fn fn, void *ctx)
{
	struct kvm_run *run = vcpu->run;

	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		return handle_io(vcpu, fn, ctx);
	case KVM_EXIT_HLT:
		return GFA_KVM_RUN_HLT;
	case KVM_EXIT_INTR:
		return 0;	/* a signal; pending requests are handled at the loop top */
	case KVM_EXIT_MMIO:
		if (vcpu->vm->mmio_fn)
			return handle_mmio(vcpu);
		return vcpu_fail(vcpu, -EFAULT,
				 "guest %s %u bytes at GPA 0x%llx, which is in no memslot (MMIO exit) at rip 0x%llx",
				 run->mmio.is_write ? "wrote" : "read", run->mmio.len,
				 (unsigned long long)run->mmio.phys_addr,
				 (unsigned long long)guest_rip(vcpu));
	case KVM_EXIT_SHUTDOWN:
		/* No rip: KVM may already have reset the vCPU (SVM does). */
		return vcpu_fail(vcpu, -EIO,
				 "guest shut down (triple fault: an exception it could not handle)");
	case KVM_EXIT_FAIL_ENTRY:
		return vcpu_fail(vcpu, -EIO,
				 "VM entry failed: hardware entry failure reason 0x%llx on cpu %u",
				 (unsigned long long)run->fail_entry.hardware_entry_failure_reason,
				 run->fail_entry.cpu);
	case KVM_EXIT_INTERNAL_ERROR:
		return vcpu_fail(vcpu, -EIO,
				 "KVM internal error %u (%s), %u data words, first 0x%llx, at rip 0x%llx",
				 run->internal.suberror, internal_error_name(run->internal.suberror),
				 run->internal.ndata,
				 run->internal.ndata ? (unsigned long long)run->internal.data[0] : 0ULL,
				 (unsigned long long)guest_rip(vcpu));
	case KVM_EXIT_SYSTEM_EVENT:
		return vcpu_fail(vcpu, -EIO, "guest system event type %u (shutdown/reset/crash)",
				 run->system_event.type);
	default:
		return vcpu_fail(vcpu, -EIO, "unhandled exit reason %u (KVM_EXIT_%s) at rip 0x%llx",
				 run->exit_reason, exit_name(run->exit_reason),
				 (unsigned long long)guest_rip(vcpu));
	}
}

/*
 * Clear immediate_exit, then look at requests: in that order, so a kicker that sets
 * a request after our look also sets immediate_exit after our clear, and KVM_RUN
 * returns at once.  Parks while paused.  Returns true if kicked.
 */
static bool handle_requests(struct gfa_kvm_vcpu *vcpu)
{
	bool kicked;

	for (;;) {
		__atomic_store_n(&vcpu->run->immediate_exit, 0, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&vcpu->requests, __ATOMIC_SEQ_CST))
			return false;

		pthread_mutex_lock(&vcpu->lock);
		while (vcpu->pause_count && !vcpu->kick) {
			vcpu->parked = true;
			pthread_cond_broadcast(&vcpu->cond);
			pthread_cond_wait(&vcpu->cond, &vcpu->lock);
		}
		vcpu->parked = false;
		kicked = vcpu->kick;
		vcpu->kick = false;
		__atomic_store_n(&vcpu->requests, vcpu->pause_count ? REQ_PAUSE : 0,
				 __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&vcpu->lock);
		if (kicked)
			return true;
	}
}

static int run_enter(struct gfa_kvm_vcpu *vcpu)
{
	/* struct kvm_signal_mask ends in a flexible sigset: 8 bytes (the kernel's sigset) */
	uint8_t kbuf[sizeof(struct kvm_signal_mask) + 8] __attribute__((aligned(8)));
	struct kvm_signal_mask *km = (struct kvm_signal_mask *)kbuf;
	sigset_t set, in_guest;
	int r;

	pthread_mutex_lock(&vcpu->lock);
	if (vcpu->in_run) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EBUSY;
	}
	vcpu->in_run = true;
	vcpu->parked = false;
	vcpu->thread = pthread_self();
	vcpu->err[0] = '\0';
	pthread_mutex_unlock(&vcpu->lock);

	/*
	 * The kick signal must only interrupt KVM_RUN: block it in this thread (so IO
	 * handlers never see it: poll/nanosleep are not restarted even with SA_RESTART)
	 * and let KVM unblock it just while it runs the guest (KVM_SET_SIGNAL_MASK).
	 */
	sigemptyset(&set);
	sigaddset(&set, GFA_KVM_KICK_SIGNAL);
	pthread_sigmask(SIG_BLOCK, &set, &vcpu->saved_mask);
	in_guest = vcpu->saved_mask;
	sigdelset(&in_guest, GFA_KVM_KICK_SIGNAL);
	km->len = 8;
	memcpy(km->sigset, &in_guest, 8);
	r = kvm_ioctl_ptr(vcpu->fd, KVM_SET_SIGNAL_MASK, km);
	if (r) {
		pthread_sigmask(SIG_SETMASK, &vcpu->saved_mask, NULL);
		pthread_mutex_lock(&vcpu->lock);
		vcpu->in_run = false;
		pthread_cond_broadcast(&vcpu->cond);
		pthread_mutex_unlock(&vcpu->lock);
	}
	return r;
}

/*
 * A kick signal that made KVM_RUN return is left pending (blocked): consume it.  When
 * the application handles the signal itself (kvm.h allows it: it may be its own signal
 * to this thread, or a process-wide one the kernel routed here), its handler runs for
 * each one taken, as it did when the signal was delivered.
 */
static void drain_kick_signal(void)
{
	struct timespec zero = { 0, 0 };
	struct sigaction cur;
	siginfo_t si;
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, GFA_KVM_KICK_SIGNAL);
	while (sigtimedwait(&set, &si, &zero) >= 0) {
		if (sigaction(GFA_KVM_KICK_SIGNAL, NULL, &cur))
			continue;
		if (cur.sa_flags & SA_SIGINFO)
			cur.sa_sigaction(si.si_signo, &si, NULL);
		else if (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN &&
			 cur.sa_handler != kick_handler)
			cur.sa_handler(si.si_signo);
	}
}

static void run_leave(struct gfa_kvm_vcpu *vcpu)
{
	drain_kick_signal();
	pthread_sigmask(SIG_SETMASK, &vcpu->saved_mask, NULL);
	pthread_mutex_lock(&vcpu->lock);
	vcpu->in_run = false;
	vcpu->parked = false;
	pthread_cond_broadcast(&vcpu->cond);
	pthread_mutex_unlock(&vcpu->lock);
}

int gfa_kvm_vcpu_run(struct gfa_kvm_vcpu *vcpu, gfa_kvm_io_fn io, void *ctx)
{
	int r;

	if (!vcpu)
		return -EFAULT;
	r = run_enter(vcpu);
	if (r)
		return r;
	for (;;) {
		if (handle_requests(vcpu)) {
			r = GFA_KVM_RUN_KICKED;
			break;
		}
		if (ioctl(vcpu->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				drain_kick_signal();
				continue;	/* kicked or another signal */
			}
			r = vcpu_fail(vcpu, -errno, "KVM_RUN failed: %s", strerror(errno));
			break;
		}
		r = handle_exit(vcpu, io, ctx);
		if (r)
			break;
	}
	run_leave(vcpu);
	return r;
}

const char *gfa_kvm_vcpu_error(const struct gfa_kvm_vcpu *vcpu)
{
	return vcpu ? vcpu->err : "no vcpu";
}

/* ---- pause / resume / kick ----------------------------------------------------- */

/* Caller holds vcpu->lock: get the vCPU out of KVM_RUN soon. */
static void interrupt_guest_locked(struct gfa_kvm_vcpu *vcpu)
{
	__atomic_store_n(&vcpu->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
	if (vcpu->in_run && !vcpu->parked)
		pthread_kill(vcpu->thread, GFA_KVM_KICK_SIGNAL);
}

int gfa_kvm_vcpu_pause(struct gfa_kvm_vcpu *vcpu)
{
	if (!vcpu)
		return -EFAULT;
	pthread_mutex_lock(&vcpu->lock);
	if (vcpu->in_run && pthread_equal(vcpu->thread, pthread_self())) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EDEADLK;
	}
	if (vcpu->pause_count == ~0u) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EOVERFLOW;
	}
	vcpu->pause_count++;
	__atomic_or_fetch(&vcpu->requests, REQ_PAUSE, __ATOMIC_SEQ_CST);
	interrupt_guest_locked(vcpu);
	while (vcpu->in_run && !vcpu->parked)
		pthread_cond_wait(&vcpu->cond, &vcpu->lock);
	pthread_mutex_unlock(&vcpu->lock);
	return 0;
}

int gfa_kvm_vcpu_resume(struct gfa_kvm_vcpu *vcpu)
{
	if (!vcpu)
		return -EFAULT;
	pthread_mutex_lock(&vcpu->lock);
	if (!vcpu->pause_count) {
		pthread_mutex_unlock(&vcpu->lock);
		return -EINVAL;
	}
	if (--vcpu->pause_count == 0)
		__atomic_and_fetch(&vcpu->requests, ~REQ_PAUSE, __ATOMIC_SEQ_CST);
	pthread_cond_broadcast(&vcpu->cond);
	pthread_mutex_unlock(&vcpu->lock);
	return 0;
}

bool gfa_kvm_vcpu_paused(struct gfa_kvm_vcpu *vcpu)
{
	bool paused;

	if (!vcpu)
		return false;
	pthread_mutex_lock(&vcpu->lock);
	paused = vcpu->pause_count > 0;
	pthread_mutex_unlock(&vcpu->lock);
	return paused;
}

int gfa_kvm_vcpu_kick(struct gfa_kvm_vcpu *vcpu)
{
	if (!vcpu)
		return -EFAULT;
	pthread_mutex_lock(&vcpu->lock);
	vcpu->kick = true;
	__atomic_or_fetch(&vcpu->requests, REQ_KICK, __ATOMIC_SEQ_CST);
	/* The own thread (an IO handler) is out of KVM_RUN: no signal needed. */
	if (!(vcpu->in_run && pthread_equal(vcpu->thread, pthread_self())))
		interrupt_guest_locked(vcpu);
	pthread_cond_broadcast(&vcpu->cond);
	pthread_mutex_unlock(&vcpu->lock);
	return 0;
}

uint32_t gfa_kvm_io_value(const struct gfa_kvm_io *io)
{
	const uint8_t *d;

	if (!io || !io->data)
		return 0;
	d = io->data;
	switch (io->size) {
	case 1:
		return d[0];
	case 2:
		return (uint32_t)d[0] | (uint32_t)d[1] << 8;
	case 4:
		return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
		       (uint32_t)d[3] << 24;
	default:
		return 0;
	}
}
