/* SPDX-License-Identifier: MIT */
/*
 * gfa reference VMM (libgfa-refvmm): what gfa's own tests, benchmarks, examples and
 * gfactl use to run guests on gfa memory.  It is not part of libgfa: a VMM that links
 * libgfa brings its own KVM code and configuration, and none of libvirt, libxml2 or
 * GLib comes with libgfa.
 *
 * Sections (each "---- name ----" below):
 *   KVM                     a small wrapper around the KVM API for x86-64 hosts, and
 *                           the test guest with its port-IO protocol (refvmm/kvm*.c)
 *   VMs                     a gfa_guest plus vCPUs running gfa's test guest (or host
 *                           threads), and the pool of VM shells (refvmm/vm.c, shell.c)
 *   domains                 a guest's memory layout imported from libvirt (domain.c)
 *   host memory             PMD-mapped, resident and memfd-backed bytes, as the host
 *                           reports them (hostmem.c)
 *   PCI and virtio devices  a PCI bus for port IO and a virtio-balloon on it (pci.c,
 *                           virtio_*.c)
 *   Linux guests            an unmodified Linux kernel booted on a gfa guest's RAM
 *                           (linux_boot.c, linux_vm.c)
 *
 * Errors are negative errno values, named per function under "Return:"; functions
 * returning a pointer return NULL with errno set.  The conventions at the head of
 * gfa/allocator.h hold here too: a NULL handle, config or output pointer is -EFAULT,
 * and a NULL handle passed to a destroy call is a no-op.
 */
#ifndef GFA_REFVMM_H
#define GFA_REFVMM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <gfa/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- KVM ---- */

/*
 * KVM plumbing: a small, readable wrapper around the KVM API for x86-64 hosts.
 *
 *   VM        gfa_kvm_vm_create / _destroy, memslots (the caller owns guest RAM: it
 *             passes host virtual addresses, and may later replace what backs them
 *             with mmap(MAP_FIXED) -- KVM follows through its MMU notifiers),
 *             binary statistics (KVM_GET_STATS_FD, e.g. "pages_2m").
 *   long mode gfa_kvm_vm_build_page_tables writes a GDT, a TSS and identity-mapping
 *             page tables made of 2 MiB pages into guest memory at a caller-chosen
 *             GPA; gfa_kvm_vcpu_enter_long_mode points a vCPU at them (64-bit code
 *             segment, paging on) with an entry point and arguments in registers.
 *   vCPU      gfa_kvm_vcpu_create (mmaps kvm_run, sets CPUID from
 *             KVM_GET_SUPPORTED_CPUID), gfa_kvm_vcpu_run (KVM_RUN + exit dispatch),
 *             and, from other threads, gfa_kvm_vcpu_pause/_resume/_kick.
 *   test      a tiny hand-assembled guest (refvmm/kvm_guestcode.c) that writes and
 *             verifies a pattern over a GPA range and reports through port IO, plus
 *             the host side of that protocol.
 *
 * Bad input changes nothing.  Errors a guest causes (triple fault, failed VM entry,
 * KVM internal error, access to a GPA outside every memslot, unhandled port IO) end
 * gfa_kvm_vcpu_run with a negative errno; the reason, in words, is printed to stderr
 * and kept for gfa_kvm_vcpu_error().
 *
 * Pausing and kicking use a signal: the first gfa_kvm_vcpu_create() installs a no-op
 * handler for GFA_KVM_KICK_SIGNAL (SIGRTMIN) unless the process already handles that
 * signal.  gfa_kvm_vcpu_run() keeps it blocked in the calling thread and has KVM
 * unblock it only inside KVM_RUN (KVM_SET_SIGNAL_MASK, as QEMU does), so the signal only
 * interrupts KVM_RUN, never a poll() or nanosleep() of an IO handler; a signal that
 * arrives is consumed there (sigtimedwait), and an application's own handler for it
 * is called for each one (a process-wide SIGRTMIN routed to a vCPU thread included).
 * kvm_run->immediate_exit closes the race with a vCPU thread that is just about to
 * enter the guest.
 */

struct gfa_kvm_vm;
struct gfa_kvm_vcpu;

#define GFA_KVM_KICK_SIGNAL SIGRTMIN /* from <signal.h> */

/* Memslot flags: the KVM values of KVM_MEM_LOG_DIRTY_PAGES and KVM_MEM_READONLY. */
#define GFA_KVM_MEM_LOG_DIRTY (1u << 0)
#define GFA_KVM_MEM_READONLY  (1u << 1)

/* Guest-physical layout of the boot area written by gfa_kvm_vm_build_page_tables(). */
#define GFA_KVM_BOOT_GDT         0x0000u /* GDT: null, 0x08 code64, 0x10 data, 0x18 TSS */
#define GFA_KVM_BOOT_TSS         0x0080u /* 104-byte 64-bit TSS, no IO bitmap */
#define GFA_KVM_BOOT_PML4        0x1000u
#define GFA_KVM_BOOT_PDPT        0x2000u
#define GFA_KVM_BOOT_PD          0x3000u /* one page-directory page per GiB mapped */
#define GFA_KVM_HUGE_PAGE        (2ULL << 20)
#define GFA_KVM_MAX_IDENTITY_MAP (512ULL << 30) /* one PDPT: 512 GiB */

/**
 * gfa_kvm_available() - whether KVM can run gfa's VMs here
 * @why: where the reason goes when KVM is not usable; may be NULL
 * @len: bytes at @why; 0 writes nothing
 *
 * KVM is usable when /dev/kvm can be opened read-write, reports API version 12, has
 * the capabilities gfa needs (user memory, immediate_exit) and lets us create a VM.
 * Found out once per process (one throwaway VM); later calls, and every VM's
 * creation, use that answer and its /dev/kvm fd.
 *
 * Return: 1 if usable; 0 otherwise, with the reason in @why (if @why is not NULL and
 * @len > 0; always NUL-terminated, "" when usable).
 * Context: any thread.
 */
int gfa_kvm_available(char *why, size_t len);

/**
 * gfa_kvm_vm_create() - create an empty VM: no memory, no vCPUs
 *
 * Return: the VM, or NULL with errno set:
 *   ENOENT/EACCES/...  /dev/kvm cannot be opened (errno of open(2))
 *   EPROTO             KVM_GET_API_VERSION is not 12, or KVM_GET_VCPU_MMAP_SIZE is 0
 *   ENOTSUP            a needed capability is missing
 *   ENOMEM, or the errno of KVM_CREATE_VM
 * Context: any thread.
 */
struct gfa_kvm_vm *gfa_kvm_vm_create(void);

/**
 * gfa_kvm_vm_destroy() - destroy a VM
 * @vm: the VM; NULL is a no-op returning 0
 *
 * Memslots are dropped with it; the caller's guest memory is not touched (the caller
 * unmaps it afterwards).
 *
 * Return: 0, or -EBUSY if vCPUs of this VM still exist (destroy them first); nothing
 * is freed then.
 * Context: call once, when no other thread uses the VM.
 */
int gfa_kvm_vm_destroy(struct gfa_kvm_vm *vm);

/**
 * gfa_kvm_vm_fd() - the KVM VM file descriptor, for ioctls this wrapper does not cover
 * @vm: the VM
 *
 * Return: the fd (owned by @vm: do not close it), or -EFAULT if @vm is NULL.
 * Context: any thread.
 */
int gfa_kvm_vm_fd(const struct gfa_kvm_vm *vm);

/**
 * gfa_kvm_set_memslot() - map host memory into the guest (KVM_SET_USER_MEMORY_REGION)
 * @vm:    the VM
 * @slot:  memslot number
 * @gpa:   guest-physical start
 * @hva:   host address of the memory; NULL only with @size 0
 * @size:  bytes; 0 removes the slot
 * @flags: GFA_KVM_MEM_LOG_DIRTY, GFA_KVM_MEM_READONLY
 *
 * Maps [@hva, @hva + @size) into the guest at [@gpa, @gpa + @size) as memslot @slot.
 * Changing an existing slot is limited by KVM to flags-only changes or moving it to
 * another @gpa with the same @hva and @size.  The memory stays the caller's: it must
 * stay mapped while the slot exists; its backing may be replaced with mmap(MAP_FIXED)
 * at any time.  Use a 2 MiB-aligned @gpa and @hva (and huge-page backed memory) so KVM
 * can map 2 MiB pages.
 *
 * Return: 0, or
 *   -EFAULT  NULL @vm
 *   -EINVAL  @gpa, @hva or @size not 4 KiB aligned; NULL @hva with a
 *            non-zero @size; @gpa + @size or @hva + @size wraps; unknown @flags
 *   -ERANGE  @slot >= the VM's memslot limit (KVM_CAP_NR_MEMSLOTS)
 *   -EEXIST  the range overlaps another slot
 *   -ENOENT  removing a slot that is not set
 *   -ENOMEM, or the errno of KVM_SET_USER_MEMORY_REGION (e.g. -EINVAL for a resize)
 * Context: any thread.
 */
int gfa_kvm_set_memslot(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa, void *hva,
			uint64_t size, uint32_t flags);

/**
 * gfa_kvm_gpa_to_hva() - host address of a guest-physical range
 * @vm:  the VM
 * @gpa: start of the range
 * @len: bytes in the range, which must lie inside one memslot
 *
 * Return: the host address of @gpa, or NULL with errno EFAULT (NULL @vm, or
 * [@gpa, @gpa + @len) not inside one slot) or EINVAL (@len 0).
 * Context: any thread; the pointer is valid while that slot exists.
 */
void *gfa_kvm_gpa_to_hva(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len);

/**
 * gfa_kvm_vm_stat() - read one KVM binary statistic of the VM (KVM_GET_STATS_FD)
 * @vm:   the VM
 * @name: the statistic, e.g. "pages_4k", "pages_2m", "pages_1g", "remote_tlb_flush"
 * @val:  where its value goes
 *
 * Return: 0 and *@val set, or
 *   -EFAULT      NULL argument
 *   -EINVAL      a statistic with several values (histogram)
 *   -ENOENT      unknown name
 *   -EOPNOTSUPP  the kernel has no binary stats fd
 *   -EIO         a short or malformed read
 *   -ENOMEM
 * Context: any thread.
 */
int gfa_kvm_vm_stat(struct gfa_kvm_vm *vm, const char *name, uint64_t *val);

/**
 * gfa_kvm_vm_build_page_tables() - write the boot area for 64-bit guests
 * @vm:       the VM
 * @boot_gpa: where the area goes (see GFA_KVM_BOOT_*), 4 KiB aligned
 * @map_size: bytes of guest-physical memory to identity-map, from 0
 *
 * Writes a GDT, a TSS and page tables that identity-map guest-physical [0, @map_size)
 * with 2 MiB pages (read, write, execute, supervisor).  The whole area,
 * gfa_kvm_boot_area_size(@map_size) bytes, must lie inside one memslot.  Mapped GPAs
 * without a memslot exit as MMIO when touched.  Call again to move or resize the map;
 * vCPUs entered before keep the old CR3 until entered again.
 *
 * Return: 0, or
 *   -EFAULT  NULL @vm, or the area is not inside one memslot
 *   -EINVAL  @boot_gpa not 4 KiB aligned, @map_size 0, not a multiple of 2 MiB or
 *            above GFA_KVM_MAX_IDENTITY_MAP
 * Context: any thread, against other VM calls too; but do not rewrite tables that
 * running vCPUs use.
 */
int gfa_kvm_vm_build_page_tables(struct gfa_kvm_vm *vm, uint64_t boot_gpa, uint64_t map_size);

/**
 * gfa_kvm_boot_area_size() - bytes of the boot area for an identity map
 * @map_size: bytes to identity-map, as for gfa_kvm_vm_build_page_tables()
 *
 * Return: the size of the area gfa_kvm_vm_build_page_tables() writes, or 0 if
 * @map_size is invalid there.
 * Context: any thread.
 */
uint64_t gfa_kvm_boot_area_size(uint64_t map_size);

/**
 * gfa_kvm_vcpu_create() - create a vCPU
 * @vm: the VM
 * @id: vCPU id, also its APIC ID
 *
 * KVM_CREATE_VCPU, mmap of kvm_run, and KVM_SET_CPUID2 with everything
 * KVM_GET_SUPPORTED_CPUID offers (APIC ID fields set to @id).  An id destroyed
 * before gets its parked vCPU back (see gfa_kvm_vcpu_destroy()).  The first call
 * installs the kick signal's handler (see the head of this section).
 *
 * Return: the vCPU, or NULL with errno set: EFAULT (NULL @vm), ERANGE (@id above the
 * VM's limit), EEXIST (@id exists), ENOMEM, or the errno of the failing ioctl or mmap.
 * Context: any thread.
 */
struct gfa_kvm_vcpu *gfa_kvm_vcpu_create(struct gfa_kvm_vm *vm, unsigned int id);

/**
 * gfa_kvm_vcpu_destroy() - destroy a vCPU
 * @vcpu: the vCPU; NULL is a no-op returning 0
 *
 * KVM keeps a vCPU until its VM is destroyed, so its fd is parked (as QEMU parks
 * unplugged vCPUs) and a later create of the same id takes it again, registers as
 * the last run left them.
 *
 * Return: 0, or -EBUSY while a thread is inside gfa_kvm_vcpu_run() for it (kick it and
 * wait for run to return first).
 * Context: any thread but one running the vCPU.
 */
int gfa_kvm_vcpu_destroy(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_reset() - give a vCPU the state it was created with
 * @vcpu: the vCPU
 *
 * Puts the vCPU's registers (general, segment and control, FPU/SSE) back to what they
 * were when gfa_kvm_vcpu_create made it, and forgets a pending kick and the last run
 * error, so a vCPU can serve another guest without handing
 * it this one's state.
 *
 * Return: 0, or -EFAULT NULL @vcpu; -EBUSY running or paused; or the errno of
 * KVM_SET_REGS, KVM_SET_SREGS or KVM_SET_FPU.
 * Context: any thread, while no thread runs the vCPU.
 */
int gfa_kvm_vcpu_reset(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_fd() - the KVM vCPU file descriptor
 * @vcpu: the vCPU
 *
 * Return: the fd (owned by @vcpu: do not close it), or -EFAULT if @vcpu is NULL.
 * Context: any thread.
 */
int gfa_kvm_vcpu_fd(const struct gfa_kvm_vcpu *vcpu);
/**
 * gfa_kvm_vcpu_id() - the vCPU id (and APIC ID) it was created with
 * @vcpu: the vCPU
 *
 * Return: the id, or -EFAULT if @vcpu is NULL.
 * Context: any thread.
 */
int gfa_kvm_vcpu_id(const struct gfa_kvm_vcpu *vcpu);

/* Where a 64-bit guest starts. */
struct gfa_kvm_entry {
	uint64_t rip;
	uint64_t rsp;     /* 0 is fine for code that uses no stack */
	uint64_t args[6]; /* rdi, rsi, rdx, rcx, r8, r9 (System V order) */
};

/**
 * gfa_kvm_vcpu_enter_long_mode() - point a vCPU at 64-bit code
 * @vcpu:  the vCPU
 * @entry: entry point, stack and arguments
 *
 * Puts the vCPU into 64-bit long mode at @entry: CR0.PE|PG, CR4.PAE, EFER.LME|LMA,
 * CR3 = the VM's PML4, CS = 0x08 (64-bit), data segments 0x10, TR = 0x18, no IDT
 * (an exception becomes a triple fault, which gfa_kvm_vcpu_run reports), RFLAGS =
 * 0x2 (interrupts off).  All other general registers are zeroed.
 *
 * Return: 0, or -EFAULT NULL argument; -ENOENT gfa_kvm_vm_build_page_tables() was not
 * called for this VM; -EBUSY another thread is running the vCPU; or the errno of
 * KVM_SET_SREGS / KVM_SET_REGS.
 * Context: the vCPU's thread (an IO handler, say), or any thread while it is not running.
 */
int gfa_kvm_vcpu_enter_long_mode(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_entry *entry);

/* One port-IO exit.  @data holds @size * @count bytes (@count > 1 for rep ins/outs). */
struct gfa_kvm_io {
	uint16_t port;
	uint8_t size; /* 1, 2 or 4 */
	bool out;     /* true: guest wrote @data (OUT); false: fill @data (IN) */
	uint32_t count;
	void *data;
};

/**
 * gfa_kvm_io_value() - the first element of an IO exit's data as a number
 * @io: the exit, of size 1, 2 or 4 (little-endian)
 *
 * Return: the value; 0 for a NULL @io or data, or another size.
 * Context: any thread.
 */
uint32_t gfa_kvm_io_value(const struct gfa_kvm_io *io);

/* What an IO handler returns (or a negative errno, which ends the run with it). */
#define GFA_KVM_IO_CONTINUE 0 /* re-enter the guest */
#define GFA_KVM_IO_STOP \
	1 /* return GFA_KVM_RUN_STOPPED; calling run again
					   resumes right after the IO instruction */

typedef int (*gfa_kvm_io_fn)(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io, void *ctx);

/* Non-negative results of gfa_kvm_vcpu_run(). */
#define GFA_KVM_RUN_HLT     1 /* the guest executed HLT */
#define GFA_KVM_RUN_STOPPED 2 /* the IO handler returned GFA_KVM_IO_STOP */
#define GFA_KVM_RUN_KICKED  3 /* gfa_kvm_vcpu_kick() was called */

/**
 * gfa_kvm_vcpu_run() - run the vCPU until something for the caller happens
 * @vcpu: the vCPU
 * @io:   handler for KVM_EXIT_IO, called in this thread with @ctx; may be NULL
 * @ctx:  passed to @io
 *
 * KVM_RUN in a loop; KVM_EXIT_IO goes to @io; HLT returns GFA_KVM_RUN_HLT; a kick
 * returns GFA_KVM_RUN_KICKED; while paused (gfa_kvm_vcpu_pause) the thread waits here
 * and re-enters the guest on resume.  Calling run again after any return continues
 * the guest where it stopped.
 *
 * Return: GFA_KVM_RUN_HLT, GFA_KVM_RUN_STOPPED or GFA_KVM_RUN_KICKED, or (the reason
 * in words goes to stderr and gfa_kvm_vcpu_error()):
 *   -EFAULT   NULL @vcpu
 *   -EBUSY    another thread is running this vCPU
 *   -EIO      KVM_EXIT_SHUTDOWN (triple fault), KVM_EXIT_FAIL_ENTRY,
 *             KVM_EXIT_INTERNAL_ERROR, a system event, or any other exit this loop
 *             does not handle
 *   -EFAULT   KVM_EXIT_MMIO: the guest touched a GPA that is in no memslot (unless
 *             gfa_kvm_vm_set_mmio_handler() gave a handler)
 *   -ENOSYS   KVM_EXIT_IO with @io NULL
 *   -EINVAL   @io returned a value other than GFA_KVM_IO_CONTINUE or _STOP
 *   a negative value returned by @io (or the MMIO handler), or the errno of KVM_RUN
 * Context: one thread at a time per vCPU; it keeps GFA_KVM_KICK_SIGNAL blocked.
 */
int gfa_kvm_vcpu_run(struct gfa_kvm_vcpu *vcpu, gfa_kvm_io_fn io, void *ctx);

/* One MMIO exit: the guest touched @gpa, which lies in no memslot. */
struct gfa_kvm_mmio {
	uint64_t gpa;
	uint32_t len; /* 1..8 */
	bool write;   /* true: the guest wrote @data; false: fill @data */
	uint8_t *data;
};
typedef int (*gfa_kvm_mmio_fn)(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_mmio *m, void *ctx);
/**
 * gfa_kvm_vm_set_mmio_handler() - handle MMIO exits instead of failing the run
 * @vm:  the VM
 * @fn:  the handler (the IO handler's return convention), called in the vCPU's thread
 *       with @ctx; NULL restores the default (gfa_kvm_vcpu_run() ends with -EFAULT)
 * @ctx: passed to @fn
 *
 * Return: 0, or -EFAULT NULL @vm.
 * Context: before any vCPU of @vm runs.
 */
int gfa_kvm_vm_set_mmio_handler(struct gfa_kvm_vm *vm, gfa_kvm_mmio_fn fn, void *ctx);

/**
 * gfa_kvm_vcpu_error() - the last run error in words
 * @vcpu: the vCPU
 *
 * Return: the text, "" if none (reset when a run starts), "no vcpu" for NULL @vcpu;
 * valid until the vCPU is destroyed.
 * Context: read it after run returned.
 */
const char *gfa_kvm_vcpu_error(const struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_pause() - stop the guest from executing, and wait until it does not
 * @vcpu: the vCPU
 *
 * Returns once its thread is out of the guest and waiting inside gfa_kvm_vcpu_run()
 * (or no thread runs it; a later run then waits at once).  The guest does not execute
 * until a matching gfa_kvm_vcpu_resume(); pauses nest.  Use it to move frames behind
 * a guest.
 *
 * Return: 0, or -EFAULT NULL @vcpu; -EDEADLK called from the thread running the vCPU;
 * -EOVERFLOW too many nested pauses.
 * Context: any thread but the vCPU's own; an IO handler must not wait for a thread
 * that is inside pause.
 */
int gfa_kvm_vcpu_pause(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_resume() - undo one gfa_kvm_vcpu_pause()
 * @vcpu: the vCPU
 *
 * The guest runs again when the last pause is undone.
 *
 * Return: 0, or -EFAULT NULL @vcpu; -EINVAL the vCPU is not paused.
 * Context: any thread.
 */
int gfa_kvm_vcpu_resume(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_paused() - whether a pause is outstanding
 * @vcpu: the vCPU
 *
 * Return: true while paused; false otherwise or for NULL @vcpu.
 * Context: any thread.
 */
bool gfa_kvm_vcpu_paused(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_kick() - make gfa_kvm_vcpu_run() return GFA_KVM_RUN_KICKED soon
 * @vcpu: the vCPU
 *
 * Also from a pause; if no thread is running it, the next run returns that at once.
 * Does not wait.
 *
 * Return: 0, or -EFAULT NULL @vcpu.
 * Context: any thread, also an IO handler.
 */
int gfa_kvm_vcpu_kick(struct gfa_kvm_vcpu *vcpu);

/**
 * gfa_kvm_vcpu_stat() - read one KVM binary statistic of the vCPU
 * @vcpu: the vCPU
 * @name: the statistic, e.g. "exits", "io_exits", "halt_exits"
 * @val:  where its value goes
 *
 * Return: 0 and *@val set, or the errors of gfa_kvm_vm_stat().
 * Context: any thread.
 */
int gfa_kvm_vcpu_stat(struct gfa_kvm_vcpu *vcpu, const char *name, uint64_t *val);

/*
 * ---- The test guest and its port-IO protocol -------------------------------------
 *
 * Entered with gfa_kvm_test_guest_enter(): rdi = start GPA, rsi = end GPA (both
 * 8-byte aligned, end exclusive), rdx = seed, rcx = flags.  It needs no stack and
 * touches no memory outside [start, end) except its own code.
 *
 *   if flags & FILL:   for each 8-byte word at GPA p in [start, end):
 *                          *p = p ^ seed;  sum = rol64(sum, 1) + (p ^ seed)
 *                      report sum                       (a result, see below)
 *   if flags & VERIFY: checkpoint 1
 *                      do { report the number of words with *p != p ^ seed }
 *                      while (flags & LOOP)
 *   out DONE, 0; hlt
 *
 * Ports (all 32-bit OUT from the guest):
 *   GFA_KVM_PORT_RESULT_LO  low 32 bits of the next 64-bit result
 *   GFA_KVM_PORT_RESULT_HI  high 32 bits; completes the result
 *   GFA_KVM_PORT_CHECKPOINT the guest reached checkpoint N (the value); the host
 *                           may stop it here and resume it by running it again
 *   GFA_KVM_PORT_DONE       finished, value = status (0 = ok); HLT follows
 */
#define GFA_KVM_PORT_RESULT_LO  0x10
#define GFA_KVM_PORT_RESULT_HI  0x11
#define GFA_KVM_PORT_CHECKPOINT 0x12
#define GFA_KVM_PORT_DONE       0x13

#define GFA_KVM_TEST_FILL   (1u << 0)
#define GFA_KVM_TEST_VERIFY (1u << 1)
#define GFA_KVM_TEST_LOOP   (1u << 2)

/* The guest's machine code (position independent) and its size in bytes. */
extern const uint8_t gfa_kvm_test_guest_code[];
extern const size_t gfa_kvm_test_guest_size;

/**
 * gfa_kvm_test_guest_load() - copy the test guest's code into guest memory
 * @vm:       the VM
 * @code_gpa: where the code goes; all gfa_kvm_test_guest_size bytes inside one memslot
 *
 * Return: 0, or -EFAULT NULL @vm, or the code would not lie inside one memslot.
 * Context: any thread, while no vCPU runs that code.
 */
int gfa_kvm_test_guest_load(struct gfa_kvm_vm *vm, uint64_t code_gpa);

/**
 * gfa_kvm_test_guest_enter() - enter long mode at the test guest with its arguments
 * @vcpu:     the vCPU
 * @code_gpa: where gfa_kvm_test_guest_load() put the code
 * @start:    first GPA of the range, 8-byte aligned
 * @end:      end of the range (exclusive), 8-byte aligned, >= @start
 * @seed:     the pattern's seed
 * @flags:    GFA_KVM_TEST_FILL, _VERIFY, _LOOP
 *
 * The VM's page tables must map @code_gpa and [@start, @end).
 *
 * Return: 0, or -EFAULT NULL @vcpu; -EINVAL @start or @end not 8-byte aligned,
 * @start > @end, unknown @flags; else as gfa_kvm_vcpu_enter_long_mode().
 * Context: as gfa_kvm_vcpu_enter_long_mode().
 */
int gfa_kvm_test_guest_enter(struct gfa_kvm_vcpu *vcpu, uint64_t code_gpa, uint64_t start,
			     uint64_t end, uint64_t seed, uint32_t flags);

/**
 * gfa_kvm_test_pattern_sum() - the checksum the test guest reports for FILL
 * @start: first GPA of the range
 * @end:   end of the range (exclusive)
 * @seed:  the pattern's seed
 *
 * Return: the sum over [@start, @end) with @seed; never fails.
 * Context: any thread.
 */
uint64_t gfa_kvm_test_pattern_sum(uint64_t start, uint64_t end, uint64_t seed);

#define GFA_KVM_TEST_MAX_RESULTS 64

/*
 * Host side of the protocol.  Zero it, optionally set on_checkpoint, and pass it as
 * ctx with gfa_kvm_test_io to gfa_kvm_vcpu_run().  Results beyond
 * GFA_KVM_TEST_MAX_RESULTS are counted in nr_results but not stored.
 */
struct gfa_kvm_test_ctx {
	uint64_t results[GFA_KVM_TEST_MAX_RESULTS];
	unsigned int nr_results; /* read it atomically from other threads */
	uint32_t lo;             /* pending low half */
	bool have_lo;
	bool done;           /* DONE received */
	uint32_t status;     /* DONE's value */
	uint32_t checkpoint; /* last checkpoint reached, 0 = none */
	/* At a checkpoint: return GFA_KVM_IO_CONTINUE, GFA_KVM_IO_STOP or -errno.
	   NULL means stop there (run returns GFA_KVM_RUN_STOPPED). */
	int (*on_checkpoint)(struct gfa_kvm_vcpu *vcpu, uint32_t id, void *arg);
	void *arg;
	/* Called after each completed result; same return convention.  May be NULL. */
	int (*on_result)(struct gfa_kvm_vcpu *vcpu, uint64_t value, void *arg);
};

/**
 * gfa_kvm_test_io() - IO handler (a gfa_kvm_io_fn) for the test protocol
 * @vcpu: the vCPU that exited
 * @io:   the exit
 * @ctx:  a struct gfa_kvm_test_ctx
 *
 * Return: GFA_KVM_IO_CONTINUE or GFA_KVM_IO_STOP (what the ctx's callbacks answer, or
 * STOP at a checkpoint without on_checkpoint), a callback's negative
 * errno, or -EFAULT NULL @io or @ctx; -EPROTO a port or access size outside the
 * protocol (a HI without a LO, an IN, a non-32-bit access, a rep access).
 * Context: the vCPU's thread, inside gfa_kvm_vcpu_run().
 */
int gfa_kvm_test_io(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io, void *ctx);

/* ---- VMs: a guest plus its vCPUs ---- */

struct gfa_vm;

enum gfa_vm_kvm {
	GFA_VM_KVM_AUTO = 0, /* KVM when /dev/kvm works, else host threads */
	GFA_VM_KVM_ON,       /* KVM or fail (ENODEV) */
	GFA_VM_KVM_OFF,      /* host threads run the workload on the guest window */
};

struct gfa_vm_config {
	uint64_t mem_bytes; /* guest RAM, a multiple of 2 MiB, at least 4 MiB */
	unsigned int vcpus; /* 1..64 */
	unsigned int zone;
	enum gfa_vm_kvm kvm;
	bool small_only;     /* back with blocks below order 9 only.  Note: adjacent
				 * blocks at adjacent memfd offsets still merge into one host
				 * mapping, which the host may map with PMDs anyway */
	struct gfa_pcp *pcp; /* cache of the creating thread, or NULL */
	bool lazy;           /* GFA_GUEST_LAZY: RAM taken at first touch, each vCPU's
				 * from its own cache */
	bool restore;        /* lazy, restored from restore_fd (gfa_guest_save()'s file,
				 * guest physical address 0 at offset 0) */
	int restore_fd;
};

/*
 * The first 2 MiB of a VM's RAM is its "firmware" range: GDT, page tables and the test
 * guest's code live there; vCPU workloads use [GFA_VM_RAM_START, mem_bytes), split
 * evenly between the vCPUs.
 */
#define GFA_VM_RAM_START (2ULL << 20)

/**
 * gfa_vm_create() - create a test VM on gfa memory
 * @pool: the pool the guest's RAM comes from
 * @b:    the pool's backing
 * @cfg:  size, vCPUs, zone and mode
 *
 * KVM mode: a VM shell -- a KVM VM with one KVM vCPU per vCPU and the guest window as
 * memslot 0, taken from the shells' pool or made now -- then a gfa_guest for its RAM in
 * that window, identity page tables with 2 MiB pages and the test guest's code.
 * Thread mode: a gfa_guest and host threads that stand in for vCPUs.  Every vCPU gets
 * a gfa cache of its own.  Compaction moves of the VM's frames pause its vCPUs.
 *
 * Return: the VM, or NULL with errno: EFAULT (NULL argument), EINVAL (size, vcpus or
 * kvm mode), ENODEV (KVM required but unavailable), EFBIG (KVM required, but above
 * 508 GiB the test guest's identity map does not fit below GFA_VM_RAM_START; AUTO
 * falls back to threads, as it does without KVM), ENOMEM, or the error of
 * gfa_guest_create(), gfa_pcp_create() or a KVM call.
 * Context: one thread drives a VM.
 */
struct gfa_vm *gfa_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
			     const struct gfa_vm_config *cfg);
/**
 * gfa_vm_destroy() - free a VM: its vCPUs' caches, its guest, and its shell
 * @vm: the VM; NULL is a no-op
 *
 * The vCPU ops are forgotten first, so a compaction moving one of its blocks no longer
 * pauses its vCPUs.  A KVM VM's shell goes back to the shells' pool (see
 * gfa_vm_shells_fill()) with its vCPUs reset, or is destroyed if the pool is full.
 * Context: the thread driving the VM, while no gfa_vm_run() is in progress.
 */
void gfa_vm_destroy(struct gfa_vm *vm);
/**
 * gfa_vm_guest() - the VM's gfa_guest
 * @vm: the VM
 *
 * Return: the guest (valid until gfa_vm_destroy()), or NULL for NULL @vm.
 * Context: any thread.
 */
struct gfa_guest *gfa_vm_guest(struct gfa_vm *vm);
/**
 * gfa_vm_is_kvm() - whether the vCPUs are KVM vCPUs
 * @vm:  the VM
 * @why: if not NULL, set to why not (a static or VM-owned string), or NULL if they are
 *
 * Return: true for KVM vCPUs; false for host threads or NULL @vm.
 * Context: any thread.
 */
bool gfa_vm_is_kvm(const struct gfa_vm *vm, const char **why);

/**
 * gfa_vm_run() - run the test workload on every vCPU at once and wait
 * @vm:         the VM
 * @flags:      GFA_KVM_TEST_FILL and/or GFA_KVM_TEST_VERIFY (not _LOOP)
 * @seed:       the pattern's seed
 * @mismatches: if not NULL, the words that differed (VERIFY), summed over the vCPUs
 *
 * Each vCPU works on its slice.  FILL writes the pattern (gpa ^ seed) and checks each
 * vCPU's reported checksum against the host's expectation; VERIFY counts words that
 * differ.
 *
 * Return: 0 when the checksums match; -EIO on a checksum mismatch; -EFAULT NULL @vm;
 * -EINVAL @flags 0 or with other bits; -EAGAIN a vCPU thread could not be started; or
 * a KVM run error.
 * Context: the thread driving the VM; one run at a time.
 */
int gfa_vm_run(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t *mismatches);
/**
 * gfa_vm_run_part() - gfa_vm_run() on the start of each vCPU's slice
 * @vm:         the VM
 * @flags:      as gfa_vm_run()
 * @seed:       as gfa_vm_run()
 * @bytes:      bytes at the start of each slice, rounded up to whole 8-byte words;
 *              0 (or more than the slice) means all of it
 * @mismatches: as gfa_vm_run()
 *
 * Software KVM (kvm_pvm) emulates guests at about a million instructions a second, so
 * callers keep guest-side work small there.
 *
 * Return: as gfa_vm_run().
 * Context: as gfa_vm_run().
 */
int gfa_vm_run_part(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t bytes,
		    uint64_t *mismatches);
/**
 * gfa_kvm_is_software() - whether /dev/kvm is a software KVM (kvm_pvm)
 *
 * Such a KVM is correct but not fast.
 *
 * Return: 1 when the kvm_pvm module is loaded, else 0.
 * Context: any thread.
 */
int gfa_kvm_is_software(void);

/**
 * gfa_vm_kvm_pages() - KVM's pages_4k and pages_2m statistics for the VM
 * @vm:       the VM
 * @pages_4k: where pages_4k goes
 * @pages_2m: where pages_2m goes
 *
 * Return: 0, or -EFAULT NULL argument; -EOPNOTSUPP in thread mode; or an error of
 * gfa_kvm_vm_stat().
 * Context: any thread.
 */
int gfa_vm_kvm_pages(struct gfa_vm *vm, uint64_t *pages_4k, uint64_t *pages_2m);

/**
 * gfa_vm_kvm_vcpu() - KVM vCPU @i of a KVM VM
 * @vm: the VM
 * @i:  vCPU index, below the config's vcpus
 *
 * Return: the vCPU (valid until gfa_vm_destroy()), or NULL in thread mode, for NULL
 * @vm or @i out of range.
 * Context: any thread.
 */
struct gfa_kvm_vcpu *gfa_vm_kvm_vcpu(struct gfa_vm *vm, unsigned int i);

#define GFA_VM_MAX_VCPUS  64
#define GFA_VM_SHELLS_MAX 256

/*
 * VM shells: a KVM VM's creation made ahead of its start.  A shell is a KVM VM, its
 * vCPUs and the guest window (a 2 MiB aligned reservation) registered as memslot 0;
 * a process-wide pool keeps idle ones.  gfa_vm_create in KVM mode takes an idle shell
 * of its shape (RAM size and vCPU count) or makes one, creates the guest in its window
 * and writes the page tables and code; gfa_vm_destroy gives the shell back with its
 * vCPUs reset (gfa_kvm_vcpu_reset; the window maps no frame then).  The pool keeps up
 * to the largest n a fill asked for (2 before any), and destroys shells beyond.
 * Every idle shell is a live KVM VM, which makes the process's mapping changes a
 * little slower: drain when no more starts come.
 */

/**
 * gfa_vm_shells_fill() - make idle shells of one shape until there are @n
 * @mem_bytes: the VMs' RAM size, a multiple of 2 MiB
 * @vcpus:     their vCPU count, 1..GFA_VM_MAX_VCPUS
 * @n:         idle shells of this shape wanted, at most GFA_VM_SHELLS_MAX; the pool
 *             then keeps at least @n idle shells
 *
 * Return: how many it made (0 if there were enough), or -EINVAL (@mem_bytes 0 or not a
 * multiple of 2 MiB, @vcpus 0 or above GFA_VM_MAX_VCPUS, @n above GFA_VM_SHELLS_MAX),
 * -ENODEV (no usable KVM), or the errno of the first creation that failed when it
 * made none (else the number made before it).
 * Context: any thread.
 */
int gfa_vm_shells_fill(uint64_t mem_bytes, unsigned int vcpus, unsigned int n);
/**
 * gfa_vm_shells_idle() - idle shells of any shape
 *
 * Return: their number.
 * Context: any thread.
 */
unsigned int gfa_vm_shells_idle(void);
/**
 * gfa_vm_shells_drain() - destroy the idle shells
 *
 * The pool keeps 2 again afterwards (as before any fill).  Shells of running VMs are
 * not touched.
 * Context: any thread.
 */
void gfa_vm_shells_drain(void);

/* ---- domains ---- */

/*
 * Domains: import a guest's memory layout from a libvirt domain.
 *
 * gfactl and VMMs describe a guest the way libvirt does: total memory, vCPUs,
 * guest NUMA cells and hugepage backing.  This module reads that description
 * either from a libvirt connection (any URI libvirt understands, including the
 * daemon-less test driver: "test:///default" or "test:///abs/path/node.xml")
 * or from a domain XML document, and returns it as a plain struct.
 *
 * Conventions shared by every function here:
 *  - Sizes are bytes.  Like libvirt, memory sizes read from XML are rounded up
 *    to a whole KiB, so a file and the same domain defined in libvirt give the
 *    same numbers.
 *  - On error the importers and gfa_domain_check_pages() return a negative errno,
 *    leave *out untouched and, when err is non-NULL and errlen > 0, write a
 *    NUL-terminated one-line message to err.  err may be NULL.  Every message has
 *    one form, "<origin>: <where>: <what is wrong>; accepted: <what would be>":
 *    origin is "domain XML file '<path>'", "domain XML string" or "libvirt domain
 *    '<name>' on '<uri>'" (struct gfa_domain_spec keeps it for later messages);
 *    where is the element or attribute, or "line N" for XML that is not
 *    well-formed; sizes read as gfa_domain_format_size() writes them.  Errors
 *    that concern no element (a file that cannot be read, a libvirt call that
 *    fails) are "<origin>: <what is wrong>".
 *  - What libvirt defines is imported, even where it fails only when it starts the
 *    domain (a hugepage size this host has not: gfa_domain_check_pages() is that
 *    start-time check).  What both of libvirt's drivers refuse to define is refused.
 *  - Where libvirt's QEMU driver changes a definition, the import changes it the same
 *    way and gfa_domain_format() says so: NUMA cells size the memory, vCPUs that no
 *    cell names go to cell 0, and without NUMA cells a hugepage nodeset='0' is
 *    dropped.
 *  - The content errors every importer can return:
 *      -EINVAL   content that is inconsistent (memory devices beyond <memory>, zero
 *                vCPUs, unknown memory unit, malformed number or cpu list,
 *                overlapping cells, two hugepages without nodeset, a memory device
 *                on a NUMA cell that does not exist, ...)
 *      -EBADMSG  not well-formed XML, root element is not <domain>, no <name>, or entity
 *                declarations (domain XML has none; expanding them is unbounded)
 *      -ERANGE   a value exceeds a limit below, or a size exceeds libvirt's limit
 *                (sizes below 8 EiB: libvirt's sizes are signed 64-bit byte counts)
 *      -ENOMEM   out of memory
 *  - Thread rules: all functions are reentrant and may be called from several
 *    threads at once; they share no state except the one-time library set-up
 *    described at gfa_domain_from_libvirt().
 */

/* Limits of struct gfa_domain_spec; larger domains are refused with -ERANGE. */
#define GFA_DOMAIN_NAME_MAX   256         /* name bytes including the NUL */
#define GFA_DOMAIN_MAX_CELLS  64          /* guest NUMA cells (ids 0..63) */
#define GFA_DOMAIN_MAX_VCPUS  1024        /* vCPUs (= x86 KVM_MAX_VCPUS default) */
#define GFA_DOMAIN_MAX_PAGES  8           /* <hugepages><page> entries */
#define GFA_DOMAIN_XML_MAX    (16u << 20) /* XML document bytes (-EFBIG) */
#define GFA_DOMAIN_ORIGIN_MAX 4352        /* origin bytes with the NUL; longer ones are cut */

/* <memoryBacking><source type=.../>: where libvirt would take guest RAM from. */
enum gfa_domain_source {
	GFA_DOMAIN_SOURCE_DEFAULT = 0, /* no <source>: hypervisor default */
	GFA_DOMAIN_SOURCE_ANONYMOUS,
	GFA_DOMAIN_SOURCE_FILE,
	GFA_DOMAIN_SOURCE_MEMFD,
};

/* <memoryBacking><access mode=.../>. */
enum gfa_domain_access {
	GFA_DOMAIN_ACCESS_DEFAULT = 0, /* no <access> */
	GFA_DOMAIN_ACCESS_SHARED,
	GFA_DOMAIN_ACCESS_PRIVATE,
};

/* One guest NUMA cell (<cpu><numa><cell>). */
struct gfa_domain_cell {
	uint64_t memory_bytes;
	unsigned int id;      /* always equal to its index in cells[] */
	unsigned int nr_cpus; /* number of bits set in cpus */
	/* vCPU ids of this cell, bit i of cpus[i / 64] = vCPU i.  May be empty. */
	uint64_t cpus[GFA_DOMAIN_MAX_VCPUS / 64];
};

/* One <hugepages><page size=... nodeset=.../>. */
struct gfa_domain_page {
	uint64_t size_bytes; /* > 0, whole KiB (any size libvirt defines) */
	/*
	 * Bit i set: this size backs guest cell i.  0: no nodeset attribute, the
	 * size backs every cell that no other page names (at most one such page).
	 */
	uint64_t nodeset;
	/*
	 * The page said nodeset='0' in a domain without NUMA cells: libvirt drops such
	 * a nodeset (the one implicit cell is every cell), and so does the import;
	 * nodeset is then 0.
	 */
	bool nodeset_dropped;
};

struct gfa_domain_spec {
	char name[GFA_DOMAIN_NAME_MAX];
	/*
	 * Where the domain came from, as messages name it: "domain XML file '<path>'",
	 * "domain XML string" or "libvirt domain '<name>' on '<uri>'".  A spec the
	 * caller builds may leave it empty; messages then say "domain '<name>'".
	 */
	char origin[GFA_DOMAIN_ORIGIN_MAX];
	/*
	 * Guest memory as libvirt's QEMU driver sizes it: boot RAM plus memory devices
	 * (DIMMs, virtio-mem sizes).  With NUMA cells boot RAM is their sum, whatever
	 * <memory> says (the driver rewrites <memory> when it defines or starts the
	 * domain, and boots it with -m = the cells' sum); without, boot RAM is
	 * <memory> minus the devices.
	 */
	uint64_t memory_bytes;
	/*
	 * <memory> as written (virDomainGetMaxMemory() on the libvirt path), 0 if absent:
	 * not memory_bytes when NUMA cells gave the size (gfa_domain_format() says so).
	 */
	uint64_t stated_memory_bytes;
	/* <currentMemory> (balloon target); equals memory_bytes if absent. */
	uint64_t current_memory_bytes;
	/* Sum of <devices><memory><target><size>; part of memory_bytes. */
	uint64_t device_memory_bytes;
	unsigned int vcpus;         /* maximum vCPUs (<vcpu>), >= 1 */
	unsigned int current_vcpus; /* <vcpu current=...>, 1..vcpus */
	/* Guest NUMA cells, cells[i].id == i.  0: no guest NUMA topology. */
	unsigned int nr_cells;
	struct gfa_domain_cell cells[GFA_DOMAIN_MAX_CELLS];
	/*
	 * vCPUs that no <cell cpus> named, bit i of unnamed_cpus[i / 64] = vCPU i.  libvirt's
	 * QEMU driver boots them in cell 0, so they are in cells[0].cpus too.  Empty
	 * without NUMA cells.
	 */
	uint64_t unnamed_cpus[GFA_DOMAIN_MAX_VCPUS / 64];
	/*
	 * <memoryBacking><hugepages> present.  With hugepages and nr_pages == 0
	 * (a bare <hugepages/>) the host's default hugepage size is meant.
	 */
	bool hugepages;
	unsigned int nr_pages;
	struct gfa_domain_page pages[GFA_DOMAIN_MAX_PAGES];
	enum gfa_domain_source source;
	enum gfa_domain_access access;
};

/**
 * gfa_domain_from_libvirt() - import a domain from a libvirt connection
 * @uri:    libvirt URI, e.g. "qemu:///system", "test:///default" or
 *          "test:///abs/path/node.xml"; NULL means libvirt's default URI.
 *          The connection is opened read-only and closed before returning.
 * @name:   the domain's name
 * @out:    the spec; untouched on error
 * @err:    where a one-line message goes on error; may be NULL
 * @errlen: bytes at @err
 *
 * Name, memory, current memory and vCPU counts come from the libvirt API
 * (virDomainGetMaxMemory, virDomainGetInfo, virDomainGetVcpusFlags); NUMA
 * cells, hugepages and the memory backing come from virDomainGetXMLDesc().
 * The result is validated like gfa_domain_from_xml_string().
 *
 * Note on "test:///default": its state lives as long as some connection to it
 * in this process is open, so a domain defined there on a connection the
 * caller keeps open is visible here; once all are closed it resets.
 *
 * One-time, process-wide set-up on first call: virInitialize() and a no-op
 * libvirt error handler (virSetErrorFunc) so libvirt does not print to stderr;
 * the message goes to @err instead.  A program that wants its own libvirt
 * handler should install it after the first call.  During the connect, this
 * thread's libxml2 generic error handler is silenced and then restored.
 *
 * Return: 0 and *@out filled, or
 *   -EFAULT        NULL @name or @out
 *   -ECONNREFUSED  the URI could not be opened (invalid URI, no such driver,
 *                  daemon not running, unreadable test driver file)
 *   -ENOENT        no domain called @name there (message says "no domain")
 *   -EIO           virInitialize or another libvirt call failed (message has
 *                  libvirt's text)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as at the head of this section.
 * Context: any thread (see the set-up above).
 */
int gfa_domain_from_libvirt(const char *uri, const char *name, struct gfa_domain_spec *out,
			    char *err, size_t errlen);

/**
 * gfa_domain_from_xml_file() - import a domain from a domain XML file
 * @path:   the file; any readable file works, including pipes such as /dev/stdin
 * @out:    the spec; untouched on error
 * @err:    where a one-line message goes on error; may be NULL
 * @errlen: bytes at @err
 *
 * Parsed with libxml2 only: no network, no entity declarations.
 *
 * Return: 0 and *@out filled, or
 *   -EFAULT        NULL @path or @out
 *   -ENOENT        @path does not exist (message names the file)
 *   -EFBIG         the file is larger than GFA_DOMAIN_XML_MAX
 *   other -errno   from open()/read() (-EACCES, -EISDIR, ...)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as at the head of this section.
 * Context: any thread.
 */
int gfa_domain_from_xml_file(const char *path, struct gfa_domain_spec *out, char *err,
			     size_t errlen);

/**
 * gfa_domain_from_xml_string() - import a domain from a domain XML document
 * @xml:    the NUL-terminated document
 * @out:    the spec; untouched on error
 * @err:    where a one-line message goes on error; may be NULL
 * @errlen: bytes at @err
 *
 * Return: 0 and *@out filled, or -EFAULT NULL @xml or @out; -EFBIG longer than
 * GFA_DOMAIN_XML_MAX; -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as at the head of this
 * section.
 * Context: any thread.
 */
int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out, char *err,
			       size_t errlen);

/**
 * gfa_domain_parse_size() - libvirt's scaled integer: @value times @unit
 * @value: decimal digits, optional surrounding blanks
 * @unit:  the unit, case-insensitive: "b"/"bytes"; "KB","MB","GB","TB","PB","EB"
 *         (powers of 1000); "k","KiB","M","MiB","G","GiB","T","TiB","P","PiB","E",
 *         "EiB" (powers of 1024).  NULL or "" means KiB (libvirt's default for memory).
 * @bytes: where the result goes
 *
 * No rounding is done.
 *
 * Return: 0 and *@bytes set; -EFAULT NULL @value or @bytes; -EINVAL bad number or
 * unknown unit; -ERANGE the result does not fit in 64 bits.
 * Context: any thread.
 */
int gfa_domain_parse_size(const char *value, const char *unit, uint64_t *bytes);

/**
 * gfa_domain_cell_page_size() - the hugepage size backing a guest cell
 * @spec:  the domain
 * @cell:  the cell; a domain without NUMA cells has one implicit cell 0
 * @bytes: where the size goes
 *
 * Picked the way libvirt picks it: the page whose nodeset names the cell, else the
 * page without nodeset, else the host's default hugepage size (reported as 0).
 *
 * Return: 0 and *@bytes set; -EFAULT NULL @spec or @bytes; -EINVAL nr_cells or
 * nr_pages beyond the arrays; -ENOENT no such cell; -ENODATA not hugepage-backed
 * (*@bytes untouched).
 * Context: any thread.
 */
int gfa_domain_cell_page_size(const struct gfa_domain_spec *spec, unsigned int cell,
			      uint64_t *bytes);

/**
 * gfa_domain_format() - a one-line human summary of a domain
 * @spec: the domain
 * @buf:  where the line goes
 * @len:  bytes at @buf
 *
 * For example "numa2: memory 4 GiB, 4 vCPUs, 2 NUMA cells [0: cpus 0-1, 2 GiB; 1: cpus
 * 2-3, 2 GiB], hugepages 1 GiB (cells 0-1), source memfd, access shared".  Sizes read
 * as gfa_domain_format_size() writes them.  Where the import followed libvirt's QEMU
 * driver rather than the letter of the XML, the line says so: "memory 4 GiB (the NUMA
 * cells, as libvirt's QEMU driver sizes it; <memory> says 8 GiB)", "vCPUs 3,5-7 are in
 * no cell; node 0 gets them, as libvirt's QEMU driver does", "hugepages 2 MiB (default;
 * nodeset='0' dropped: no NUMA cells, as libvirt does)".
 *
 * Return: length written (without the NUL); -ENOSPC if @len was too small (@buf then
 * holds a truncated NUL-terminated line); -EFAULT NULL @spec or @buf; -EINVAL @len 0,
 * or nr_cells/nr_pages beyond the arrays.
 * Context: any thread.
 */
int gfa_domain_format(const struct gfa_domain_spec *spec, char *buf, size_t len);

/**
 * gfa_domain_format_size() - a size for people to read
 * @bytes: the size
 * @buf:   where the text goes ("4 GiB", "5 MiB", "1464845 KiB (1.4 GiB)",
 *         "larger than 4 PiB")
 * @len:   bytes at @buf
 *
 * The size in the largest binary unit that divides it exactly; where that takes five
 * digits or more, the size rounded to a tenth of the largest unit follows in brackets.
 * A size beyond 4 PiB (the 52-bit physical address space, the most any x86-64 or
 * arm64 host can have) reads "larger than 4 PiB" instead of a number.
 *
 * Return: length written (without the NUL); -ENOSPC if @len was too small (cut,
 * NUL-terminated); -EFAULT @buf NULL; -EINVAL @len 0.
 * Context: any thread.
 */
int gfa_domain_format_size(uint64_t bytes, char *buf, size_t len);

/**
 * gfa_domain_check_pages() - libvirt's start-time check of a domain's page sizes
 * @spec:   the domain
 * @dir:    where the host lists its hugepage sizes as hugepages-<n>kB; NULL:
 *          /sys/kernel/mm/hugepages
 * @err:    where a one-line message goes on error; may be NULL
 * @errlen: bytes at @err
 *
 * The check libvirt's QEMU driver makes only when it starts a hugepage-backed domain:
 * every page size the domain names is one this host has: the base page (which libvirt
 * treats as no hugepages), 2 MiB (gfa's own order-9 block, with or without hugetlbfs),
 * or a hugepage size listed under @dir.  gfa backs guest RAM with 2 MiB blocks whatever
 * the size; a size no host page has (5 MiB) is a definition error the domain meets
 * under QEMU too, so a VMM refuses to start it.
 *
 * Return: 0; -EOPNOTSUPP a size the host has not (message names the spec's origin,
 * the page, its cells and the host's sizes); -EFAULT NULL @spec; -EINVAL counts beyond
 * the arrays.
 * Context: any thread; reads @dir.
 */
int gfa_domain_check_pages(const struct gfa_domain_spec *spec, const char *dir, char *err,
			   size_t errlen);

/**
 * gfa_domain_cell_has_cpu() - whether a vCPU belongs to a guest cell
 * @cell: the cell
 * @cpu:  the vCPU id
 *
 * Return: true if bit @cpu of the cell's cpus is set; false for @cpu at or above
 * GFA_DOMAIN_MAX_VCPUS.
 * Context: any thread.
 */
static inline bool gfa_domain_cell_has_cpu(const struct gfa_domain_cell *cell, unsigned int cpu)
{
	if (cpu >= GFA_DOMAIN_MAX_VCPUS)
		return false;
	return (cell->cpus[cpu / 64] >> (cpu % 64)) & 1;
}

/* ---- host memory ---- */

/**
 * gfa_smaps_pmd_bytes() - bytes the host maps with PMDs over a range
 * @addr: start of the range
 * @len:  bytes in the range
 *
 * Sums ShmemPmdMapped + FilePmdMapped + AnonHugePages in /proc/self/smaps (memfd
 * windows and the anonymous kernel baselines alike) over the mappings that overlap
 * [@addr, @addr + @len).  For benchmarks and tests.
 *
 * Return: the byte count, or the negative errno of opening /proc/self/smaps.
 * Context: any thread.
 */
int64_t gfa_smaps_pmd_bytes(const void *addr, size_t len);
/**
 * gfa_smaps_rss_bytes() - resident bytes over a range
 * @addr: start of the range
 * @len:  bytes in the range
 *
 * Sums Rss in /proc/self/smaps over the mappings that overlap [@addr, @addr + @len).
 * For benchmarks and tests.
 *
 * Return: the byte count, or the negative errno of opening /proc/self/smaps.
 * Context: any thread.
 */
int64_t gfa_smaps_rss_bytes(const void *addr, size_t len);
/**
 * gfa_memfd_allocated_bytes() - host-backed bytes of a file
 * @fd: the memfd (any file works)
 *
 * st_blocks * 512 from fstat(2).  For benchmarks and tests.
 *
 * Return: the byte count, or the negative errno of fstat(2) (-EBADF, ...).
 * Context: any thread.
 */
int64_t gfa_memfd_allocated_bytes(int fd);
/**
 * gfa_host_mem_available() - the host's available memory
 *
 * MemAvailable of /proc/meminfo: what the host can give new guests without swapping.
 * For benchmarks, tests and gfactl, which size their guests by it.
 *
 * Return: the byte count, 0 when /proc/meminfo cannot be read or has no MemAvailable.
 * Context: any thread.
 */
uint64_t gfa_host_mem_available(void);
/**
 * gfa_host_shmem_thp_set() - set the host's shmem THP mode
 * @mode: "advise", "never", ... (written to transparent_hugepage/shmem_enabled)
 * @old: gets the mode it had (may be NULL)
 * @len: bytes at @old
 *
 * For benchmarks and tests that need memfd blocks PMD-mapped (Debian's default is
 * never); the caller puts @old back.
 *
 * Return: 0, or the negative errno of opening or writing the file (-EACCES: not root).
 * Context: any thread; the setting is the host's: callers in parallel processes
 * serialise themselves.
 */
int gfa_host_shmem_thp_set(const char *mode, char *old, size_t len);

/* ---- PCI and virtio devices ---- */

/*
 * A PCI bus 0 for a VMM's port IO: configuration mechanism #1 (the address register at
 * 0xcf8, dword accesses only; data at 0xcfc-0xcff, any size), a host bridge at 00.0, and
 * devices with one IO BAR each that the bus assigns itself, as firmware would
 * (GFA_RV_PCI_IO_BASE + slot * GFA_RV_PCI_IO_STRIDE; a guest may move them, its BAR
 * writes are honoured).  Devices raise legacy INTx lines (PCI_INTERRUPT_PIN INTA#, the
 * line their config names in PCI_INTERRUPT_LINE) through the irq_fn they were given.
 *
 * Device threads touch guest RAM only between gfa_rv_pci_pause/_resume of the VMM: a
 * VMM whose guest's frames can move (compaction, collapse) calls gfa_rv_pci_pause in
 * its gfa_guest_vcpu_ops.pause (after pausing its vCPUs) and gfa_rv_pci_resume in
 * .resume, so a device never writes a frame being copied.
 */
struct gfa_rv_pci;

#define GFA_RV_PCI_IO_BASE   0xc000u
#define GFA_RV_PCI_IO_STRIDE 0x100u
#define GFA_RV_PCI_MAX_SLOTS 32u

/* Raise (level 1) or lower (0) legacy interrupt line irq; a KVM VMM implements it with
 * KVM_IRQ_LINE on its in-kernel irqchip.  Called from vCPU threads (an ISR read lowers
 * the line) and device threads; must not block. */
typedef void (*gfa_rv_irq_fn)(void *ctx, unsigned int irq, int level);

/**
 * gfa_rv_pci_create() - an empty bus (the host bridge only)
 *
 * Return: the bus, or NULL with errno ENOMEM.
 * Context: any thread.
 */
struct gfa_rv_pci *gfa_rv_pci_create(void);
/**
 * gfa_rv_pci_destroy() - free a bus
 * @pci: the bus; NULL is a no-op returning 0
 *
 * Return: 0, or -EBUSY a device is still plugged in (destroy the devices first);
 * nothing is freed then.
 * Context: any thread, once no vCPU makes port IO to the bus.
 */
int gfa_rv_pci_destroy(struct gfa_rv_pci *pci);
/**
 * gfa_rv_pci_io() - port IO that the VMM's exit loop does not handle itself
 * @pci:   the bus
 * @port:  the port
 * @data:  the bytes, in (write) or out (read, little-endian)
 * @size:  1, 2 or 4 bytes
 * @write: true for OUT, false for IN
 *
 * Reads of absent devices or functions fill all ones, as the hardware does.
 *
 * Return: 0 handled; -ENOENT no PCI port or BAR there, or a non-dword access to
 * 0xcf8-0xcfb (the VMM reads all ones and ignores writes, or handles 0xcf9 reset
 * itself); -EFAULT NULL @pci or @data; -EINVAL @size not 1, 2 or 4.
 * Context: vCPU threads, concurrently: takes short locks only, never waits for guest
 * memory, a device thread or a gfa call.
 */
int gfa_rv_pci_io(struct gfa_rv_pci *pci, uint16_t port, void *data, unsigned int size, bool write);
/**
 * gfa_rv_pci_pause() - stop every device thread from touching guest RAM
 * @pci: the bus
 *
 * Returns once no device thread touches guest RAM; they wait until the matching
 * gfa_rv_pci_resume().  Pauses nest.
 *
 * Return: 0, or -EFAULT NULL @pci.
 * Context: any thread, a device's own included (its gfa calls may compact and so move
 * the guest's frames): devices never make gfa calls while they touch guest RAM.
 */
int gfa_rv_pci_pause(struct gfa_rv_pci *pci);
/**
 * gfa_rv_pci_resume() - undo one gfa_rv_pci_pause()
 * @pci: the bus
 *
 * Device threads go on when the last pause is undone.
 *
 * Return: 0, or -EFAULT NULL @pci; -EINVAL resume without a pause.
 * Context: any thread.
 */
int gfa_rv_pci_resume(struct gfa_rv_pci *pci);

/* What an MP table or ACPI writer needs per device (see gfa_rv_pci_slots()). */
struct gfa_rv_pci_slot {
	unsigned int slot, pin, irq;
	uint16_t vendor, device, io_base, io_size;
};
/**
 * gfa_rv_pci_slots() - the bus's devices, as an MP table or ACPI writer needs them
 * @pci: the bus
 * @out: up to @max entries: slot (device number on bus 0), interrupt pin (1 = INTA#)
 *       and line, IDs and IO BAR; may be NULL when @max is 0
 * @max: entries at @out
 *
 * Return: the number of devices (the host bridge, which interrupts nothing, not
 * counted), even when more than @max; -EFAULT NULL @pci, or NULL @out with @max > 0.
 * Context: any thread.
 */
int gfa_rv_pci_slots(struct gfa_rv_pci *pci, struct gfa_rv_pci_slot *out, unsigned int max);

/*
 * virtio-balloon over legacy (transitional) virtio-pci: PCI 1af4:1002, subsystem 5,
 * revision 0, an IO BAR with the legacy registers, INTx (no MSI-X), split virtqueues of
 * 128 entries: inflate, deflate, stats, and with free_page_reporting the reporting
 * queue.  Features offered: VIRTIO_BALLOON_F_MUST_TELL_HOST, _STATS_VQ, and as
 * configured _DEFLATE_ON_OOM and _REPORTING.
 *
 * A queue notify (a vCPU's port write) only wakes the device's own thread, which does
 * the gfa calls: inflated pages go through gfa_balloon_inflate (their frames are freed
 * and the host-return thread, if started, punches them: nobody waits for the host),
 * deflated pages through gfa_balloon_deflate (fresh zeroed frames), reported free
 * ranges through gfa_guest_report_free (host memory punched, frames kept), and a
 * reporting buffer goes back to the guest only after its punches completed.
 *
 * Every guest-supplied value is checked against the guest's RAM (gfa_guest_size):
 * queue addresses, avail indexes, descriptor indexes, addresses, lengths, directions
 * and chain lengths (a chain longer than the queue is a loop).  A broken ring sets the
 * device status NEEDS_RESET (0x40), raises a configuration interrupt and stops that
 * queue until the driver resets the device; a malformed request (a page list of bad
 * length, a pfn beyond RAM, duplicate, not ballooned or already ballooned pages, an
 * unaligned report) is handed back unprocessed.  Both are counted (err_*); neither
 * changes any frame.  A reset of the device gives every ballooned page back: a driver
 * that starts afresh (after kexec, say) owns all of RAM.
 */
struct gfa_rv_balloon;

struct gfa_rv_balloon_config {
	struct gfa_guest *guest;     /* RAM the driver's page numbers refer to */
	struct gfa_backing *backing; /* the guest's backing (needed for reporting) */
	unsigned int slot;           /* device number on bus 0 (1..31); 0: the first
					 * free one (1, 2, .. in creation order) */
	unsigned int irq;            /* legacy IRQ line (PCI interrupt line register):
					 * the line the VMM wires the slot's INTA# to */
	gfa_rv_irq_fn irq_fn;
	void *irq_ctx;
	bool deflate_on_oom, free_page_reporting;
};

/**
 * gfa_rv_balloon_create() - plug a virtio-balloon into a bus and start its thread
 * @pci: the bus
 * @cfg: guest, backing, slot (cfg->slot, or the first free one), interrupt and features
 *
 * Return: the balloon, or NULL with errno: EFAULT (@pci, @cfg, guest or irq_fn NULL;
 * backing NULL with free_page_reporting), EINVAL (irq above 255, slot above 31, a
 * backing the guest is not made of), EBUSY (the slot is taken), ENOSPC (no free slot),
 * ENOMEM, or the error of pthread_create.
 * Context: any thread but a vCPU's.
 */
struct gfa_rv_balloon *gfa_rv_balloon_create(struct gfa_rv_pci *pci,
					     const struct gfa_rv_balloon_config *cfg);
/**
 * gfa_rv_balloon_destroy() - unplug a balloon: stop its thread, wait for reports in
 * flight, free
 * @b: the balloon; NULL is a no-op
 *
 * Context: before the guest is destroyed; any thread but a vCPU's.
 */
void gfa_rv_balloon_destroy(struct gfa_rv_balloon *b);
/**
 * gfa_rv_balloon_set_target() - the balloon size the device asks the driver for
 * @b:     the balloon
 * @bytes: the size; sets config num_pages (in 4 KiB pages) and raises a configuration
 *         interrupt
 *
 * Return: 0, or -EFAULT NULL @b; -ERANGE more than the guest's RAM.
 * Context: any thread.
 */
int gfa_rv_balloon_set_target(struct gfa_rv_balloon *b, uint64_t bytes);
/**
 * gfa_rv_balloon_request_stats() - hand the stats buffer back so the driver refills it
 * @b: the balloon
 *
 * The new values show in gfa_rv_balloon_stat() once the driver did.
 *
 * Return: 0, or -EFAULT NULL @b; -EAGAIN the driver has not given a buffer yet.
 * Context: any thread.
 */
int gfa_rv_balloon_request_stats(struct gfa_rv_balloon *b);

#define GFA_RV_BALLOON_NR_STATS 10 /* the driver's tags 0..9, swap_in .. hugetlb_fail */

struct gfa_rv_balloon_stat {
	uint64_t target_pages;   /* num_pages asked for */
	uint64_t actual_pages;   /* what the driver says it holds (config actual) */
	uint64_t inflated_pages; /* held now, as the device counted them */
	uint64_t inflate_requests, deflate_requests, deflated_pages;
	uint64_t report_requests, reported_bytes; /* reports accepted, bytes in them */
	uint64_t report_released_bytes;           /* punched out of the host */
	uint64_t reset_deflated_pages; /* given back because the driver reset the device */
	uint64_t stats_updates;        /* stats buffers read */
	uint64_t guest_stats[GFA_RV_BALLOON_NR_STATS]; /* the driver's last values (bytes
					 * for memory, counts otherwise) */
	uint64_t guest_stats_seen;                     /* bit per tag the driver has sent */
	uint32_t features;                             /* accepted by the driver */
	uint8_t status;                                /* device status register */
	uint64_t needs_reset;                          /* times NEEDS_RESET was set */
	/* errors from the guest */
	uint64_t err_ring;        /* a queue address whose ring is not inside RAM */
	uint64_t err_queue_index; /* notify or address of a queue that does not exist */
	uint64_t err_avail;       /* avail index ahead by more than the queue size */
	uint64_t err_desc;        /* descriptor index, address or length outside RAM,
					 * or an indirect one (not offered) */
	uint64_t err_loop;        /* a chain longer than the queue */
	uint64_t err_dir;         /* a buffer of the wrong direction for its queue */
	uint64_t err_page_list;   /* inflate/deflate list refused (length, pfn, state) */
	uint64_t err_report;      /* report refused (alignment, range, overlap) */
	uint64_t err_stats;       /* stats buffer of bad length */
	uint64_t err_nomem;       /* deflates given up for want of frames */
};
/**
 * gfa_rv_balloon_stat() - the balloon's counters
 * @b:  the balloon
 * @st: where they go
 *
 * Return: 0, or -EFAULT NULL @b or @st.
 * Context: any thread.
 */
int gfa_rv_balloon_stat(struct gfa_rv_balloon *b, struct gfa_rv_balloon_stat *st);
/* ---- Linux guests ---- */

/*
 * A Linux VM: an unmodified Linux kernel (the uncompressed vmlinux through its PVH entry,
 * or a bzImage through the 64-bit boot protocol), an initramfs and a command line, booted
 * on a gfa_guest's RAM, one thread per vCPU.  The VM offers what such a kernel needs
 * without firmware: KVM's in-kernel irqchip (PIC, IOAPIC, local APICs) and PIT, CPUID from
 * KVM_GET_SUPPORTED_CPUID (with the hypervisor bit, so the kernel finds kvmclock), ACPI
 * tables (MADT: one local APIC per vCPU and the IOAPIC; FADT with its PM1 registers; a
 * DSDT with the PCI host bridge and its interrupt routing) and, for a kernel booted with
 * acpi=off, an MP table describing the same, an e820 map made from the guest's RAM, a 16550
 * UART on 0x3f8 as the console, port IO that no device claims reading all ones (writes
 * ignored; PCI ports go to the optional gfa_rv_pci bus), the same for MMIO outside guest
 * RAM, and a way to stop: a reset through the i8042 (0xfe to port 0x64) or port 0xcf9, or
 * a triple fault, ends the run.  The default command line says reboot=pci (port 0xcf9):
 * the i8042 route first polls the controller's status port up to 65536 times, and with no
 * controller there every poll is an exit.
 *
 * Guest-physical layout: the whole guest window is RAM at GPA 0 (one memslot, so KVM can
 * map it with 2 MiB pages); the e820 map reports [0, 0x9fc00) and [1 MiB, size) as RAM
 * and the hole between as reserved (the MP table lives at 0x9fc00, the ACPI tables at
 * 0xe0000, their RSDP first, which the PVH start info or boot_params also names).
 * Guests are at most GFA_LINUX_MAX_MEM: there is no PCI hole below 4 GiB to step over.
 *
 * Interrupts: ISA IRQs 0-15 are edge triggered on IOAPIC pins 0-15; PCI slot s, INTA#, is
 * wired to IOAPIC pin GFA_LINUX_PCI_IRQ(s), level triggered (the line is asserted while a
 * device holds it at level 1 through gfa_linux_vm_irq_line; the ACPI tables say active
 * low, the MP table active high, and KVM's IOAPIC ignores the polarity), and so is the
 * ACPI SCI on pin 7, which nothing raises.
 *
 * Devices: create the gfa_rv_pci bus first and pass it in the config; devices that need
 * the guest (a balloon: gfa_linux_vm_guest()) or its interrupt lines (irq_fn
 * gfa_linux_vm_irq_line, irq_ctx the VM) are added between create and start.
 *
 * Compaction and collapse may move the guest's frames at any time once
 * gfa_linux_vm_create() returned: the vCPUs are paused around each move.
 */
struct gfa_linux_vm;
struct gfa_rv_pci;

#define GFA_LINUX_MAX_MEM    (3ULL << 30)
#define GFA_LINUX_MAX_VCPUS  16
#define GFA_LINUX_PCI_SLOTS  8 /* slots with an interrupt entry (_PRT, MP table) */
/* IOAPIC pin of PCI slot @s's INTA#: 5, 9, 10, 11, 5, ... */
#define GFA_LINUX_PCI_IRQ(s) ((unsigned int)((0xba95u >> (4 * ((s)&3))) & 0xf))
/* The command line used when the config gives none: quiet, and options that spare a
 * firmware-less nested guest slow probes (RTC driver, i8042 aux/mux, TSC checks, the
 * port-0x80 delay, UARTs beyond ttyS0). */
#define GFA_LINUX_DEFAULT_CMDLINE                                                          \
	"console=ttyS0 reboot=pci panic=-1 quiet mitigations=off nokaslr "                 \
	"tsc=reliable "                                                                    \
	"no_timer_check edd=off i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd "        \
	"random.trust_cpu=on cryptomgr.notests initcall_blacklist=cmos_init,add_rtc_cmos " \
	"8250.nr_uarts=1 io_delay=none"

struct gfa_linux_config {
	const char *kernel;  /* vmlinux (ELF with a PVH entry note) or bzImage */
	const char *initrd;  /* NULL: none */
	const char *cmdline; /* NULL: GFA_LINUX_DEFAULT_CMDLINE (plus pci=off when
				 * there is no @pci bus) */
	const char *append;  /* NULL, or words added after cmdline */
	uint64_t mem_bytes;  /* a multiple of 2 MiB, 64 MiB .. GFA_LINUX_MAX_MEM */
	unsigned int vcpus;  /* 0 means 1; at most GFA_LINUX_MAX_VCPUS */
	unsigned int zone;
	bool small_only;        /* as gfa_guest_config.small_only */
	struct gfa_pcp *pcp;    /* the creating thread's cache, or NULL */
	struct gfa_rv_pci *pci; /* optional: port IO nobody else claims goes there */
	int console_fd;         /* where console bytes are copied; -1: nowhere */
	bool lazy;              /* GFA_GUEST_LAZY: RAM taken at first touch */
};

/* One e820 entry as given to the guest. */
struct gfa_linux_e820 {
	uint64_t addr, size;
	uint32_t type; /* 1 RAM, 2 reserved */
};
#define GFA_LINUX_E820_MAX 8

/**
 * gfa_linux_vm_create() - a Linux VM on a gfa guest's RAM
 * @pool: the pool its RAM comes from
 * @b: the pool's backing
 * @cfg: struct gfa_linux_config
 *
 * Makes the gfa_guest for its RAM, a KVM VM with irqchip and PIT, vCPUs, and writes the
 * kernel, initramfs, command line, boot information, MP and ACPI tables into guest RAM.
 * Nothing runs until gfa_linux_vm_start().
 *
 * Return: the VM, or NULL with errno: EFAULT (NULL argument), EINVAL (size, vCPUs, no
 * kernel), ENOEXEC (the kernel is neither an ELF vmlinux with a PVH entry nor a 64-bit
 * bzImage, or does not fit), E2BIG (command line too long, initramfs does not fit),
 * ENODEV (no usable KVM), or the errno of open/read, gfa_guest_create() or a KVM ioctl.
 * Context: one thread drives a VM; any thread may move its frames.
 */
struct gfa_linux_vm *gfa_linux_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
					 const struct gfa_linux_config *cfg);
/**
 * gfa_linux_vm_start() - start the vCPU threads (once)
 * @vm: the VM
 *
 * Return: 0, -EFAULT (NULL), -EALREADY (started before), -EAGAIN (a thread could not be
 * created: the VM is stopped then).
 * Context: the thread that drives the VM.
 */
int gfa_linux_vm_start(struct gfa_linux_vm *vm);

/* Why a VM stopped. */
enum gfa_linux_exit {
	GFA_LINUX_RUNNING = 0,
	GFA_LINUX_EXIT_RESET,    /* reset through port 0x64 or 0xcf9 */
	GFA_LINUX_EXIT_SHUTDOWN, /* triple fault (or KVM's shutdown event) */
	GFA_LINUX_EXIT_STOPPED,  /* gfa_linux_vm_stop() */
	GFA_LINUX_EXIT_ERROR,    /* a KVM run error: see gfa_linux_vm_error() */
};

/**
 * gfa_linux_vm_wait() - wait for the VM to stop
 * @vm: the VM
 * @timeout_ms: how long at most (< 0: for ever)
 *
 * Return: the reason (enum gfa_linux_exit), GFA_LINUX_RUNNING on timeout, or -EFAULT.
 * Context: any thread.
 */
int gfa_linux_vm_wait(struct gfa_linux_vm *vm, int timeout_ms);
/**
 * gfa_linux_vm_stop() - kick the vCPUs out of the guest for good and join their threads
 * @vm: the VM
 *
 * Return: the reason the VM stopped (GFA_LINUX_EXIT_STOPPED if it was still running),
 * or -EFAULT.
 * Context: any thread but a vCPU's.
 */
int gfa_linux_vm_stop(struct gfa_linux_vm *vm);
/**
 * gfa_linux_vm_destroy() - stop the VM if needed, free its vCPUs, KVM VM and guest
 * @vm: the VM, or NULL (a no-op)
 *
 * Context: the thread that drives the VM, not a vCPU's.
 */
void gfa_linux_vm_destroy(struct gfa_linux_vm *vm);

/**
 * gfa_linux_vm_guest() - the VM's gfa_guest
 * @vm: the VM
 *
 * Return: the guest (valid until gfa_linux_vm_destroy()), NULL for a NULL @vm.
 * Context: any thread.
 */
struct gfa_guest *gfa_linux_vm_guest(struct gfa_linux_vm *vm);
/**
 * gfa_linux_vm_kvm() - the VM's KVM VM
 * @vm: the VM
 *
 * Return: the KVM VM (valid until gfa_linux_vm_destroy()), NULL for a NULL @vm.
 * Context: any thread.
 */
struct gfa_kvm_vm *gfa_linux_vm_kvm(struct gfa_linux_vm *vm);
/**
 * gfa_linux_vm_error() - the first KVM error text of a vCPU
 * @vm: the VM
 *
 * Return: the text, "" if none, "no vm" for a NULL @vm.
 * Context: any thread.
 */
const char *gfa_linux_vm_error(struct gfa_linux_vm *vm);

/**
 * gfa_linux_vm_irq_line() - raise (1) or lower (0) an interrupt line of the VM's irqchip
 * @ctx: the struct gfa_linux_vm (this is a gfa_rv_irq_fn)
 * @irq: the line, 0..23
 * @level: 1 or 0
 *
 * Errors are counted (err_irq in gfa_linux_vm_stat()) and otherwise ignored.
 * Context: any thread, a vCPU's IO handler too.
 */
void gfa_linux_vm_irq_line(void *ctx, unsigned int irq, int level);

/**
 * gfa_linux_vm_e820() - the e820 map given to the guest
 * @vm: the VM
 * @e: gets up to @max entries
 * @max: room in @e
 *
 * Return: the map's total count of entries, or -EFAULT (NULL @vm).
 * Context: any thread.
 */
int gfa_linux_vm_e820(struct gfa_linux_vm *vm, struct gfa_linux_e820 *e, unsigned int max);

/**
 * gfa_linux_vm_console_wait() - wait for a console line that contains a string
 * @vm: the VM
 * @needle: what the line must contain
 * @from: the first line to look at (0 = the first since boot)
 * @timeout_ms: how long at most (< 0: for ever)
 * @line: gets the line (NUL-terminated, maybe cut), if not NULL
 * @len: room in @line
 * @ms: gets its arrival time (CLOCK_MONOTONIC ms since gfa_linux_vm_start()), if not NULL
 *
 * The VM keeps the last GFA_LINUX_CONSOLE_LINES lines; older ones are dropped (and not
 * matched).
 *
 * Return: the line's index, or -EFAULT (NULL @vm or @needle), -ETIMEDOUT, -ESHUTDOWN
 * (the VM stopped first).
 * Context: any thread.
 */
#define GFA_LINUX_CONSOLE_LINES 4096
int gfa_linux_vm_console_wait(struct gfa_linux_vm *vm, const char *needle, unsigned int from,
			      int timeout_ms, char *line, size_t len, double *ms);

struct gfa_linux_stat {
	uint64_t console_bytes, console_lines;
	uint64_t io_exits_unclaimed; /* port IO nobody claimed (read all ones) */
	uint64_t mmio_exits;         /* MMIO outside guest RAM (read all ones) */
	uint64_t err_irq;            /* failed KVM_IRQ_LINE calls */
	uint64_t pages_4k, pages_2m; /* KVM's mapping of guest RAM */
	double boot_ms;              /* start to the first console line the kernel's
					 * /init printed (a line starting "gfa-init"), 0 if
					 * none yet */
};
/**
 * gfa_linux_vm_stat() - the VM's counters
 * @vm: the VM
 * @st: gets them
 *
 * Return: 0 or -EFAULT (NULL).
 * Context: any thread.
 */
int gfa_linux_vm_stat(struct gfa_linux_vm *vm, struct gfa_linux_stat *st);

#ifdef __cplusplus
}
#endif
#endif /* GFA_REFVMM_H */
