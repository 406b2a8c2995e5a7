/* SPDX-License-Identifier: MIT */
/*
 * gfa reference VMM (libgfa-refvmm): what gfa's own tests, benchmarks, examples and
 * gfactl use to run guests on gfa memory.  It is not part of libgfa: a VMM that links
 * libgfa brings its own KVM code and configuration, and none of libvirt, libxml2 or
 * GLib comes with libgfa.  Sections:
 *   KVM        a small wrapper around the KVM API for x86-64 hosts
 *   VMs        a gfa_guest plus vCPUs running gfa's test guest (or host threads)
 *   domains    a guest's memory layout imported from libvirt
 *   host memory  PMD-mapped, resident and memfd-backed bytes, as the host reports them
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
 * Errors are negative errno values (pointer-returning functions return NULL and set
 * errno).  Bad input changes nothing.  Errors a guest causes (triple fault, failed
 * VM entry, KVM internal error, access to a GPA outside every memslot, unhandled
 * port IO) end gfa_kvm_vcpu_run with a negative errno; the reason, in words, is
 * printed to stderr and kept for gfa_kvm_vcpu_error().
 *
 * Pausing and kicking use a signal: the first gfa_kvm_vcpu_create() installs a no-op
 * handler for GFA_KVM_KICK_SIGNAL (SIGRTMIN) unless the process already handles that
 * signal.  gfa_kvm_vcpu_run() keeps it blocked in the calling thread and has KVM
 * unblock it only inside KVM_RUN (KVM_SET_SIGNAL_MASK, as QEMU does), so the signal only
 * interrupts KVM_RUN, never a poll() or nanosleep() of an IO handler; a signal that
 * arrives is consumed there (sigtimedwait), and an application's own handler for it
 * is called for each one (a process-wide SIGRTMIN routed to a vCPU thread included).  kvm_run->immediate_exit
 * closes the race with a vCPU thread that is just about to enter the guest.
 */

struct gfa_kvm_vm;
struct gfa_kvm_vcpu;

#define GFA_KVM_KICK_SIGNAL	SIGRTMIN	/* from <signal.h> */

/* Memslot flags: the KVM values of KVM_MEM_LOG_DIRTY_PAGES and KVM_MEM_READONLY. */
#define GFA_KVM_MEM_LOG_DIRTY	(1u << 0)
#define GFA_KVM_MEM_READONLY	(1u << 1)

/* Guest-physical layout of the boot area written by gfa_kvm_vm_build_page_tables(). */
#define GFA_KVM_BOOT_GDT	0x0000u	/* GDT: null, 0x08 code64, 0x10 data, 0x18 TSS */
#define GFA_KVM_BOOT_TSS	0x0080u	/* 104-byte 64-bit TSS, no IO bitmap */
#define GFA_KVM_BOOT_PML4	0x1000u
#define GFA_KVM_BOOT_PDPT	0x2000u
#define GFA_KVM_BOOT_PD		0x3000u	/* one page-directory page per GiB mapped */
#define GFA_KVM_HUGE_PAGE	(2ULL << 20)
#define GFA_KVM_MAX_IDENTITY_MAP (512ULL << 30)	/* one PDPT: 512 GiB */

/*
 * 1 if /dev/kvm can be opened read-write, reports API version 12, has the
 * capabilities gfa needs (user memory, immediate_exit) and lets us create a VM.
 * Otherwise 0, with the reason in @why (if @why is not NULL and @len > 0; always
 * NUL-terminated).  Found out once per process (one throwaway VM); later calls, and
 * every VM's creation, use that answer and its /dev/kvm fd.  Thread-safe.
 */
int gfa_kvm_available(char *why, size_t len);

/*
 * Create an empty VM: no memory, no vCPUs.  Returns NULL with errno set:
 *   ENOENT/EACCES/...  /dev/kvm cannot be opened (errno of open(2))
 *   EPROTO             KVM_GET_API_VERSION is not 12
 *   ENOTSUP            a needed capability is missing
 *   ENOMEM, or the errno of KVM_CREATE_VM
 */
struct gfa_kvm_vm *gfa_kvm_vm_create(void);

/*
 * Destroy a VM.  Memslots are dropped with it; the caller's guest memory is not
 * touched (the caller unmaps it afterwards).  NULL is a no-op returning 0.
 * Errors: -EBUSY if vCPUs of this VM still exist (destroy them first); nothing is
 * freed then.  Call once, when no other thread uses the VM.
 */
int gfa_kvm_vm_destroy(struct gfa_kvm_vm *vm);

/* The KVM VM file descriptor, for ioctls this wrapper does not cover; -EINVAL if NULL. */
int gfa_kvm_vm_fd(const struct gfa_kvm_vm *vm);

/*
 * Map [@hva, @hva + @size) into the guest at [@gpa, @gpa + @size) as memslot @slot
 * (KVM_SET_USER_MEMORY_REGION).  @size 0 removes the slot.  Changing an existing
 * slot is limited by KVM to flags-only changes or moving it to another @gpa with the
 * same @hva and @size.  The memory stays the caller's: it must stay mapped while the
 * slot exists; its backing may be replaced with mmap(MAP_FIXED) at any time.  Use a
 * 2 MiB-aligned @gpa and @hva (and huge-page backed memory) so KVM can map 2 MiB
 * pages.  Thread-safe.
 * Errors:
 *   -EINVAL  NULL @vm; @gpa, @hva or @size not 4 KiB aligned; NULL @hva with a
 *            non-zero @size; @gpa + @size wraps; unknown @flags
 *   -ERANGE  @slot >= the VM's memslot limit (KVM_CAP_NR_MEMSLOTS)
 *   -EEXIST  the range overlaps another slot
 *   -ENOENT  removing a slot that is not set
 *   -ENOMEM, or the errno of KVM_SET_USER_MEMORY_REGION (e.g. -EINVAL for a resize)
 */
int gfa_kvm_set_memslot(struct gfa_kvm_vm *vm, uint32_t slot, uint64_t gpa,
			void *hva, uint64_t size, uint32_t flags);

/*
 * Host address of guest range [@gpa, @gpa + @len), which must lie inside one
 * memslot.  NULL with errno EINVAL (NULL @vm, @len 0) or EFAULT (not inside one
 * slot).  Thread-safe; the pointer is valid while that slot exists.
 */
void *gfa_kvm_gpa_to_hva(struct gfa_kvm_vm *vm, uint64_t gpa, uint64_t len);

/*
 * Read one KVM binary statistic of the VM (KVM_GET_STATS_FD), e.g. "pages_4k",
 * "pages_2m", "pages_1g", "remote_tlb_flush".  Thread-safe.
 * Errors: -EINVAL NULL argument or a statistic with several values (histogram);
 * -ENOENT unknown name; -EOPNOTSUPP the kernel has no binary stats fd; -EIO a
 * short or malformed read.
 */
int gfa_kvm_vm_stat(struct gfa_kvm_vm *vm, const char *name, uint64_t *val);

/*
 * Write the boot area at @boot_gpa (see GFA_KVM_BOOT_*): GDT, TSS and page tables
 * that identity-map guest-physical [0, @map_size) with 2 MiB pages (read, write,
 * execute, supervisor).  The whole area, gfa_kvm_boot_area_size(@map_size) bytes,
 * must lie inside one memslot.  Mapped GPAs without a memslot exit as MMIO when
 * touched.  Call again to move or resize the map; vCPUs entered before keep the
 * old CR3 until entered again.  Thread-safe against other VM calls, but do not
 * rewrite tables that running vCPUs use.
 * Errors: -EINVAL NULL @vm, @boot_gpa not 4 KiB aligned, @map_size 0, not a
 * multiple of 2 MiB or above GFA_KVM_MAX_IDENTITY_MAP; -EFAULT the area is not
 * inside one memslot.
 */
int gfa_kvm_vm_build_page_tables(struct gfa_kvm_vm *vm, uint64_t boot_gpa,
				 uint64_t map_size);

/* Bytes of the boot area for an identity map of @map_size bytes (0 if invalid). */
uint64_t gfa_kvm_boot_area_size(uint64_t map_size);

/*
 * Create vCPU @id (also its APIC ID): KVM_CREATE_VCPU, mmap of kvm_run, and
 * KVM_SET_CPUID2 with everything KVM_GET_SUPPORTED_CPUID offers (APIC ID fields
 * set to @id).  Thread-safe.  Returns NULL with errno set: EINVAL (NULL @vm),
 * ERANGE (@id above the VM's limit), EEXIST (@id exists), ENOMEM, or the errno of
 * the failing ioctl or mmap.
 */
struct gfa_kvm_vcpu *gfa_kvm_vcpu_create(struct gfa_kvm_vm *vm, unsigned int id);

/*
 * Destroy a vCPU.  KVM keeps a vCPU until its VM is destroyed, so its fd is parked
 * (as QEMU parks unplugged vCPUs) and a later create of the same id takes it again,
 * registers as the last run left them.  NULL is a no-op returning 0.  Errors: -EBUSY
 * while a thread is inside gfa_kvm_vcpu_run() for it (kick it and wait for run to
 * return first).
 */
int gfa_kvm_vcpu_destroy(struct gfa_kvm_vcpu *vcpu);

/*
 * Put the vCPU's registers (general, segment and control, FPU/SSE) back to what they
 * were when gfa_kvm_vcpu_create made it, and forget a pending kick and the last run
 * error, so a vCPU can serve another guest without handing it this one's state.
 * Errors: -EINVAL NULL; -EBUSY running or paused; or the errno of KVM_SET_REGS,
 * KVM_SET_SREGS or KVM_SET_FPU.
 */
int gfa_kvm_vcpu_reset(struct gfa_kvm_vcpu *vcpu);

/* The KVM vCPU file descriptor and the vCPU id; -EINVAL if NULL. */
int gfa_kvm_vcpu_fd(const struct gfa_kvm_vcpu *vcpu);
int gfa_kvm_vcpu_id(const struct gfa_kvm_vcpu *vcpu);

/* Where a 64-bit guest starts. */
struct gfa_kvm_entry {
	uint64_t rip;
	uint64_t rsp;		/* 0 is fine for code that uses no stack */
	uint64_t args[6];	/* rdi, rsi, rdx, rcx, r8, r9 (System V order) */
};

/*
 * Put the vCPU into 64-bit long mode at @entry: CR0.PE|PG, CR4.PAE, EFER.LME|LMA,
 * CR3 = the VM's PML4, CS = 0x08 (64-bit), data segments 0x10, TR = 0x18, no IDT
 * (an exception becomes a triple fault, which gfa_kvm_vcpu_run reports), RFLAGS =
 * 0x2 (interrupts off).  All other general registers are zeroed.  Call from the
 * vCPU's thread or while it is not running.
 * Errors: -EINVAL NULL argument; -ENOENT gfa_kvm_vm_build_page_tables() was not
 * called for this VM; -EBUSY the vCPU is running; or the errno of KVM_SET_SREGS /
 * KVM_SET_REGS.
 */
int gfa_kvm_vcpu_enter_long_mode(struct gfa_kvm_vcpu *vcpu,
				 const struct gfa_kvm_entry *entry);

/* One port-IO exit.  @data holds @size * @count bytes (@count > 1 for rep ins/outs). */
struct gfa_kvm_io {
	uint16_t port;
	uint8_t size;		/* 1, 2 or 4 */
	bool out;		/* true: guest wrote @data (OUT); false: fill @data (IN) */
	uint32_t count;
	void *data;
};

/* First element of an IO exit's data as a number (for size 1, 2 or 4). */
uint32_t gfa_kvm_io_value(const struct gfa_kvm_io *io);

/* What an IO handler returns (or a negative errno, which ends the run with it). */
#define GFA_KVM_IO_CONTINUE	0	/* re-enter the guest */
#define GFA_KVM_IO_STOP		1	/* return GFA_KVM_RUN_STOPPED; calling run again
					   resumes right after the IO instruction */

typedef int (*gfa_kvm_io_fn)(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io,
			     void *ctx);

/* Non-negative results of gfa_kvm_vcpu_run(). */
#define GFA_KVM_RUN_HLT		1	/* the guest executed HLT */
#define GFA_KVM_RUN_STOPPED	2	/* the IO handler returned GFA_KVM_IO_STOP */
#define GFA_KVM_RUN_KICKED	3	/* gfa_kvm_vcpu_kick() was called */

/*
 * Run the vCPU in the calling thread until something for the caller happens:
 * KVM_RUN in a loop; KVM_EXIT_IO goes to @io (called in this thread, with @ctx);
 * HLT returns GFA_KVM_RUN_HLT; a kick returns GFA_KVM_RUN_KICKED; while paused
 * (gfa_kvm_vcpu_pause) the thread waits here and re-enters the guest on resume.
 * Calling run again after any return continues the guest where it stopped.
 * Errors (the reason in words goes to stderr and gfa_kvm_vcpu_error()):
 *   -EINVAL   NULL @vcpu
 *   -EBUSY    another thread is running this vCPU
 *   -EIO      KVM_EXIT_SHUTDOWN (triple fault), KVM_EXIT_FAIL_ENTRY,
 *             KVM_EXIT_INTERNAL_ERROR, or any other exit this loop does not handle
 *   -EFAULT   KVM_EXIT_MMIO: the guest touched a GPA that is in no memslot
 *   -ENOSYS   KVM_EXIT_IO with @io NULL
 *   a negative value returned by @io, or the errno of KVM_RUN
 */
int gfa_kvm_vcpu_run(struct gfa_kvm_vcpu *vcpu, gfa_kvm_io_fn io, void *ctx);

/* The last run error in words ("" if none).  Read it after run returned. */
const char *gfa_kvm_vcpu_error(const struct gfa_kvm_vcpu *vcpu);

/*
 * Pause the vCPU: returns once its thread is out of the guest and waiting inside
 * gfa_kvm_vcpu_run() (or no thread runs it; a later run then waits at once).  The
 * guest does not execute until a matching gfa_kvm_vcpu_resume(); pauses nest.  Use
 * it to move frames behind a guest.  Call from any thread but the vCPU's own; an
 * IO handler must not wait for a thread that is inside pause.
 * Errors: -EINVAL NULL; -EDEADLK called from the thread running the vCPU;
 * -EOVERFLOW too many nested pauses.
 */
int gfa_kvm_vcpu_pause(struct gfa_kvm_vcpu *vcpu);

/* Undo one gfa_kvm_vcpu_pause().  Errors: -EINVAL NULL or the vCPU is not paused. */
int gfa_kvm_vcpu_resume(struct gfa_kvm_vcpu *vcpu);

/* True while paused (a pause is outstanding). */
bool gfa_kvm_vcpu_paused(struct gfa_kvm_vcpu *vcpu);

/*
 * Make gfa_kvm_vcpu_run() return GFA_KVM_RUN_KICKED soon (also from a pause), or,
 * if no thread is running it, the next run returns that at once.  Does not wait.
 * Any thread, also an IO handler.  Errors: -EINVAL NULL.
 */
int gfa_kvm_vcpu_kick(struct gfa_kvm_vcpu *vcpu);

/* Read one KVM binary statistic of the vCPU, e.g. "exits", "io_exits", "halt_exits".
   Errors as gfa_kvm_vm_stat(). */
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
#define GFA_KVM_PORT_RESULT_LO	0x10
#define GFA_KVM_PORT_RESULT_HI	0x11
#define GFA_KVM_PORT_CHECKPOINT	0x12
#define GFA_KVM_PORT_DONE	0x13

#define GFA_KVM_TEST_FILL	(1u << 0)
#define GFA_KVM_TEST_VERIFY	(1u << 1)
#define GFA_KVM_TEST_LOOP	(1u << 2)

/* The guest's machine code (position independent) and its size in bytes. */
extern const uint8_t gfa_kvm_test_guest_code[];
extern const size_t gfa_kvm_test_guest_size;

/*
 * Copy the test guest's code to @code_gpa (inside one memslot).
 * Errors: -EINVAL NULL @vm; -EFAULT the code would not lie inside one memslot.
 */
int gfa_kvm_test_guest_load(struct gfa_kvm_vm *vm, uint64_t code_gpa);

/*
 * Enter long mode at @code_gpa with the test guest's arguments (the VM's page
 * tables must map @code_gpa and [@start, @end)).
 * Errors: -EINVAL NULL @vcpu, @start or @end not 8-byte aligned, @start > @end,
 * unknown @flags; else as gfa_kvm_vcpu_enter_long_mode().
 */
int gfa_kvm_test_guest_enter(struct gfa_kvm_vcpu *vcpu, uint64_t code_gpa,
			     uint64_t start, uint64_t end, uint64_t seed,
			     uint32_t flags);

/* The checksum the test guest reports for FILL over [@start, @end) with @seed. */
uint64_t gfa_kvm_test_pattern_sum(uint64_t start, uint64_t end, uint64_t seed);

#define GFA_KVM_TEST_MAX_RESULTS 64

/*
 * Host side of the protocol.  Zero it, optionally set on_checkpoint, and pass it as
 * ctx with gfa_kvm_test_io to gfa_kvm_vcpu_run().  Results beyond
 * GFA_KVM_TEST_MAX_RESULTS are counted in nr_results but not stored.
 */
struct gfa_kvm_test_ctx {
	uint64_t results[GFA_KVM_TEST_MAX_RESULTS];
	unsigned int nr_results;	/* read it atomically from other threads */
	uint32_t lo;			/* pending low half */
	bool have_lo;
	bool done;			/* DONE received */
	uint32_t status;		/* DONE's value */
	uint32_t checkpoint;		/* last checkpoint reached, 0 = none */
	/* At a checkpoint: return GFA_KVM_IO_CONTINUE, GFA_KVM_IO_STOP or -errno.
	   NULL means stop there (run returns GFA_KVM_RUN_STOPPED). */
	int (*on_checkpoint)(struct gfa_kvm_vcpu *vcpu, uint32_t id, void *arg);
	void *arg;
	/* Called after each completed result; same return convention.  May be NULL. */
	int (*on_result)(struct gfa_kvm_vcpu *vcpu, uint64_t value, void *arg);
};

/*
 * IO handler for the test protocol (@ctx is a struct gfa_kvm_test_ctx).
 * Errors: -EPROTO a port or access size outside the protocol (a HI without a LO,
 * an IN, a non-32-bit access).
 */
int gfa_kvm_test_io(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io, void *ctx);

/* ---- VMs: a guest plus its vCPUs ---- */

struct gfa_vm;

enum gfa_vm_kvm {
	GFA_VM_KVM_AUTO = 0,    /* KVM when /dev/kvm works, else host threads */
	GFA_VM_KVM_ON,          /* KVM or fail (ENODEV) */
	GFA_VM_KVM_OFF,         /* host threads run the workload on the guest window */
};

struct gfa_vm_config {
	uint64_t mem_bytes;     /* guest RAM, a multiple of 2 MiB, at least 4 MiB */
	unsigned int vcpus;     /* 1..64 */
	unsigned int zone;
	enum gfa_vm_kvm kvm;
	bool small_only;        /* back with blocks below order 9 only.  Note: adjacent
				 * blocks at adjacent memfd offsets still merge into one host
				 * mapping, which the host may map with PMDs anyway */
	struct gfa_pcp *pcp;    /* cache of the creating thread, or NULL */
};

/*
 * The first 2 MiB of a VM's RAM is its "firmware" range: GDT, page tables and the test
 * guest's code live there; vCPU workloads use [GFA_VM_RAM_START, mem_bytes), split
 * evenly between the vCPUs.
 */
#define GFA_VM_RAM_START (2ULL << 20)

/*
 * Create a VM: (KVM mode) a VM shell -- a KVM VM with one KVM vCPU per vCPU and the
 * guest window as memslot 0, taken from the shells' pool or made now -- then a
 * gfa_guest for its RAM in that window, identity page tables with 2 MiB pages and the
 * test guest's code; or (thread mode) a gfa_guest and host threads that stand in for
 * vCPUs.  gfa_vm_destroy gives the shell back (see gfa_vm_shells_fill).  Every vCPU
 * gets a gfa cache of its own.  Compaction moves of the VM's frames pause its vCPUs.
 * Returns NULL with errno: EFAULT, EINVAL (size, vcpus or kvm mode), ENODEV (KVM required
 * but unavailable), EFBIG (KVM required, but above 508 GiB the test guest's identity map
 * does not fit below GFA_VM_RAM_START; AUTO falls back to threads), ENOMEM, or a KVM
 * error.  Thread rules: one thread drives a VM.
 */
struct gfa_vm *gfa_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
			     const struct gfa_vm_config *cfg);
void gfa_vm_destroy(struct gfa_vm *vm);
struct gfa_guest *gfa_vm_guest(struct gfa_vm *vm);
/* Whether the vCPUs are KVM vCPUs; why not (if not) in *why. */
bool gfa_vm_is_kvm(const struct gfa_vm *vm, const char **why);

/*
 * Run the test workload on every vCPU at once (each on its slice) and wait: FILL
 * writes the pattern (gpa ^ seed) and checks each vCPU's reported checksum against the
 * host's expectation; VERIFY counts words that differ.  Returns 0 when the checksums
 * match and *mismatches (if non-NULL) gets the words that differed (VERIFY), -EIO on a
 * checksum mismatch, or a KVM run error.
 */
int gfa_vm_run(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t *mismatches);
/*
 * The same on the first `bytes` of each vCPU's slice, rounded up to whole 8-byte words
 * (0 = all of it): software KVM
 * (kvm_pvm) emulates guests at about a million instructions a second, so callers keep
 * guest-side work small there.
 */
int gfa_vm_run_part(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t bytes,
		    uint64_t *mismatches);
/* 1 when /dev/kvm is a software KVM (kvm_pvm): correct but not fast. */
int gfa_kvm_is_software(void);

/* KVM's pages_4k / pages_2m for the VM (-EOPNOTSUPP in thread mode). */
int gfa_vm_kvm_pages(struct gfa_vm *vm, uint64_t *pages_4k, uint64_t *pages_2m);

/* KVM vCPU i of a KVM VM (NULL: thread mode, NULL vm or i out of range). */
struct gfa_kvm_vcpu *gfa_vm_kvm_vcpu(struct gfa_vm *vm, unsigned int i);

#define GFA_VM_MAX_VCPUS   64
#define GFA_VM_SHELLS_MAX  256

/*
 * VM shells: a KVM VM's creation made ahead of its start.  A shell is a KVM VM, its
 * vCPUs and the guest window (a 2 MiB aligned reservation) registered as memslot 0;
 * a process-wide pool keeps idle ones.  gfa_vm_create in KVM mode takes an idle shell
 * of its shape (RAM size and vCPU count) or makes one, creates the guest in its window
 * and writes the page tables and code; gfa_vm_destroy gives the shell back with its
 * vCPUs reset (gfa_kvm_vcpu_reset; the window maps no frame then).  The pool keeps up
 * to the largest n a fill asked for (2 before any), and destroys shells beyond.
 *
 * gfa_vm_shells_fill: make idle shells of this shape until there are n.  Returns how
 * many it made, or -EINVAL (size 0 or not a multiple of 2 MiB, vcpus 0 or above
 * GFA_VM_MAX_VCPUS, n above GFA_VM_SHELLS_MAX), -ENODEV (no usable KVM), or the errno
 * of the first creation that failed.  gfa_vm_shells_idle: idle shells of any shape.
 * gfa_vm_shells_drain: destroy the idle ones (and keep 2 again).  Every idle shell is a
 * live KVM VM, which makes the process's mapping changes a little slower: drain when
 * no more starts come.  Thread-safe.
 */
int gfa_vm_shells_fill(uint64_t mem_bytes, unsigned int vcpus, unsigned int n);
unsigned int gfa_vm_shells_idle(void);
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
 *  - On error the function returns a negative errno, leaves *out untouched and,
 *    when err is non-NULL and errlen > 0, writes a NUL-terminated one-line
 *    message to err naming the file, URI or domain involved.  err may be NULL.
 *  - Errors used (beyond those listed per function):
 *      -EINVAL   NULL argument, or content that is inconsistent (NUMA cells not
 *                adding up to <memory>, zero vCPUs, unknown memory unit,
 *                malformed number or cpu list, overlapping cells, ...)
 *      -EBADMSG  not well-formed XML, root element is not <domain>, no <name>, or entity
 *                declarations (domain XML has none; expanding them is unbounded)
 *      -ERANGE   a value overflows 64 bits or exceeds a limit below
 *      -ENOMEM   out of memory
 *  - Thread rules: all functions are reentrant and may be called from several
 *    threads at once; they share no state except the one-time library set-up
 *    described at gfa_domain_from_libvirt().
 */

/* Limits of struct gfa_domain_spec; larger domains are refused with -ERANGE. */
#define GFA_DOMAIN_NAME_MAX	256	/* name bytes including the NUL */
#define GFA_DOMAIN_MAX_CELLS	64	/* guest NUMA cells (ids 0..63) */
#define GFA_DOMAIN_MAX_VCPUS	1024	/* vCPUs (= x86 KVM_MAX_VCPUS default) */
#define GFA_DOMAIN_MAX_PAGES	8	/* <hugepages><page> entries */
#define GFA_DOMAIN_XML_MAX	(16u << 20)	/* XML document bytes (-EFBIG) */

/* <memoryBacking><source type=.../>: where libvirt would take guest RAM from. */
enum gfa_domain_source {
	GFA_DOMAIN_SOURCE_DEFAULT = 0,	/* no <source>: hypervisor default */
	GFA_DOMAIN_SOURCE_ANONYMOUS,
	GFA_DOMAIN_SOURCE_FILE,
	GFA_DOMAIN_SOURCE_MEMFD,
};

/* <memoryBacking><access mode=.../>. */
enum gfa_domain_access {
	GFA_DOMAIN_ACCESS_DEFAULT = 0,	/* no <access> */
	GFA_DOMAIN_ACCESS_SHARED,
	GFA_DOMAIN_ACCESS_PRIVATE,
};

/* One guest NUMA cell (<cpu><numa><cell>). */
struct gfa_domain_cell {
	uint64_t memory_bytes;
	unsigned int id;		/* always equal to its index in cells[] */
	unsigned int nr_cpus;		/* number of bits set in cpus */
	/* vCPU ids of this cell, bit i of cpus[i / 64] = vCPU i.  May be empty. */
	uint64_t cpus[GFA_DOMAIN_MAX_VCPUS / 64];
};

/* One <hugepages><page size=... nodeset=.../>. */
struct gfa_domain_page {
	uint64_t size_bytes;		/* > 0, power of two */
	/*
	 * Bit i set: this size backs guest cell i.  0: no nodeset attribute, the
	 * size backs every cell that no other page names (at most one such page).
	 */
	uint64_t nodeset;
};

struct gfa_domain_spec {
	char name[GFA_DOMAIN_NAME_MAX];
	/*
	 * Guest memory as libvirt's <memory> / virDomainGetMaxMemory(): boot RAM
	 * (the NUMA cells, if any) plus memory devices (DIMMs, virtio-mem sizes).
	 */
	uint64_t memory_bytes;
	/* <currentMemory> (balloon target); equals memory_bytes if absent. */
	uint64_t current_memory_bytes;
	/* Sum of <devices><memory><target><size>; part of memory_bytes. */
	uint64_t device_memory_bytes;
	unsigned int vcpus;		/* maximum vCPUs (<vcpu>), >= 1 */
	unsigned int current_vcpus;	/* <vcpu current=...>, 1..vcpus */
	/* Guest NUMA cells, cells[i].id == i.  0: no guest NUMA topology. */
	unsigned int nr_cells;
	struct gfa_domain_cell cells[GFA_DOMAIN_MAX_CELLS];
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

/*
 * gfa_domain_from_libvirt - import domain @name from the libvirt connection @uri.
 * @uri:   libvirt URI, e.g. "qemu:///system", "test:///default" or
 *         "test:///abs/path/node.xml"; NULL means libvirt's default URI.
 *         The connection is opened read-only and closed before returning.
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
 * Return: 0 and *out filled, or
 *   -ECONNREFUSED  the URI could not be opened (invalid URI, no such driver,
 *                  daemon not running, unreadable test driver file)
 *   -ENOENT        no domain called @name there (message says "no domain")
 *   -EIO           another libvirt call failed (message has libvirt's text)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as in the header comment.
 */
int gfa_domain_from_libvirt(const char *uri, const char *name,
			    struct gfa_domain_spec *out, char *err, size_t errlen);

/*
 * gfa_domain_from_xml_file - parse the domain XML file @path (libxml2 only,
 * no network, no entity declarations).  Any readable file works,
 * including pipes such as /dev/stdin.
 *
 * Return: 0 and *out filled, or
 *   -ENOENT        @path does not exist (message names the file)
 *   -EFBIG         the file is larger than GFA_DOMAIN_XML_MAX
 *   other -errno   from open()/read() (-EACCES, -EISDIR, ...)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as in the header comment.
 */
int gfa_domain_from_xml_file(const char *path, struct gfa_domain_spec *out,
			     char *err, size_t errlen);

/*
 * gfa_domain_from_xml_string - parse the NUL-terminated domain XML @xml.
 * Return: as gfa_domain_from_xml_file() minus the file errors; -EFBIG if
 * longer than GFA_DOMAIN_XML_MAX.
 */
int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out,
			       char *err, size_t errlen);

/*
 * gfa_domain_parse_size - libvirt's scaled integer: @value (decimal digits,
 * optional surrounding blanks) times @unit.  Units, case-insensitive:
 * "b"/"bytes"; "KB","MB","GB","TB","PB","EB" (powers of 1000); "k","KiB",
 * "M","MiB","G","GiB","T","TiB","P","PiB","E","EiB" (powers of 1024).  NULL or
 * "" means KiB (libvirt's default for memory).  No rounding is done.
 * Return: 0 and *bytes set; -EINVAL bad number or unknown unit; -ERANGE the
 * result does not fit in 64 bits.
 */
int gfa_domain_parse_size(const char *value, const char *unit, uint64_t *bytes);

/*
 * gfa_domain_cell_page_size - the hugepage size backing guest cell @cell, the
 * way libvirt picks it: the page whose nodeset names the cell, else the page
 * without nodeset, else the host's default hugepage size (reported as 0).
 * A domain without NUMA cells has one implicit cell 0.
 * Return: 0 and *bytes set; -ENODATA not hugepage-backed (*bytes untouched);
 * -ENOENT no such cell; -EINVAL NULL argument, or nr_cells/nr_pages beyond the arrays.
 */
int gfa_domain_cell_page_size(const struct gfa_domain_spec *spec,
			      unsigned int cell, uint64_t *bytes);

/*
 * gfa_domain_format - one-line human summary of @spec into @buf, e.g.
 * "numa2: memory 4 GiB, 4 vCPUs, 2 NUMA cells [0: cpus 0-1, 2 GiB; 1: cpus
 * 2-3, 2 GiB], hugepages 1 GiB (cells 0-1), source memfd, access shared".
 * Sizes are shown in the largest binary unit that divides them exactly.
 * Return: length written (without the NUL); -ENOSPC if @len was too small
 * (buf then holds a truncated NUL-terminated line); -EINVAL NULL, len 0, or
 * nr_cells/nr_pages beyond the arrays.
 */
int gfa_domain_format(const struct gfa_domain_spec *spec, char *buf, size_t len);

/* gfa_domain_cell_has_cpu - whether vCPU @cpu belongs to @cell. */
static inline bool gfa_domain_cell_has_cpu(const struct gfa_domain_cell *cell,
					   unsigned int cpu)
{
	if (cpu >= GFA_DOMAIN_MAX_VCPUS)
		return false;
	return (cell->cpus[cpu / 64] >> (cpu % 64)) & 1;
}

/* ---- host memory ---- */

/*
 * Bytes mapped with PMDs (ShmemPmdMapped + FilePmdMapped + AnonHugePages in
 * /proc/self/smaps: memfd windows and the anonymous kernel baselines alike) over the
 * mappings that overlap [addr, addr + len).  Returns bytes or a negative errno.
 */
int64_t gfa_smaps_pmd_bytes(const void *addr, size_t len);
/* Resident bytes (Rss) of the mappings overlapping [addr, addr + len). */
int64_t gfa_smaps_rss_bytes(const void *addr, size_t len);
/*
 * Host-backed bytes of @fd: st_blocks * 512 from fstat(2).  For benchmarks and
 * tests.  Returns the byte count or a negative errno (-EBADF, ...).
 * Thread rules: any thread.
 */
int64_t gfa_memfd_allocated_bytes(int fd);

#ifdef __cplusplus
}
#endif
#endif /* GFA_REFVMM_H */
