/* SPDX-License-Identifier: MIT */
/*
 * A guest window's userfaultfd (vmm/uffd.c): the one place gfa talks to the kernel's
 * userfaultfd.  It write-protects the block being moved (write-protect mode, on the
 * memfd mappings), and a lazy guest registers its placeholder in missing mode with the
 * same descriptor (vmm/guest_lazy.c).  Not installed.
 */
#ifndef GFA_VMM_UFFD_H
#define GFA_VMM_UFFD_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct guest_uffd {
	int fd;
	int stop_fd; /* eventfd that ends the service thread */
	pthread_t thread;
	bool thread_started;
	/*
	 * The range under write protection for a move: [move_lo, move_hi), 0 when none.
	 * Set before the protection and cleared after the wake, under lock, which the
	 * service thread holds while it lifts a stray protection (so it never lifts a
	 * move's).
	 */
	pthread_mutex_t lock;
	uintptr_t move_lo, move_hi;
	uint64_t faults; /* write faults the service thread read (atomic) */
	uint64_t strays; /* of them, outside any move: lifted at once */
	/*
	 * A first touch of a missing-mode range (a lazy guest's placeholder): the service
	 * thread calls missing(ctx, address, faulting thread's id), which maps something
	 * there and wakes the range (uffd_wake).  NULL: the range is only woken.
	 */
	void (*missing)(void *ctx, uintptr_t addr, uint32_t tid);
	void *missing_ctx;
};

/*
 * Open a userfaultfd that can write-protect shmem (memfd) mappings and catch kernel-mode
 * writes as well as user ones: the syscall, else /dev/userfaultfd.  0, or -errno: EPERM
 * (neither root, CAP_SYS_PTRACE, vm.unprivileged_userfaultfd=1 nor read-write access to
 * /dev/userfaultfd), ENOSYS, EOPNOTSUPP (no write protection of shmem: before 6.1), or
 * ECANCELED (GFA_NO_UFFD=1 in the environment).
 */
int uffd_open(struct guest_uffd *u);
void uffd_close(struct guest_uffd *u);
/* Register [addr, addr + len) in write-protect mode (a new mapping is not registered,
 * whatever its predecessor was): 0 or -errno. */
int uffd_register(struct guest_uffd *u, void *addr, size_t len);
/* Register the placeholder [addr, addr + len) in missing mode: its first touch goes to
 * u->missing.  0 or -errno. */
int uffd_register_missing(struct guest_uffd *u, void *addr, size_t len);
/* Start the service thread now (a lazy guest's first touch needs it from the start):
 * 0 or -errno.  Moves start it themselves. */
int uffd_start(struct guest_uffd *u);
/* Stop the service thread (before the guest it serves goes away; uffd_close does it too). */
void uffd_stop(struct guest_uffd *u);
/* Wake the threads waiting on a fault in [addr, addr + len). */
void uffd_wake(struct guest_uffd *u, uintptr_t addr, size_t len);
/* A move of [addr, addr + len) begins: the service thread leaves the writers that fault
 * there waiting (for uffd_move_end()) instead of lifting their protection. */
void uffd_move_mark(struct guest_uffd *u, void *addr, size_t len);
/*
 * Write-protect (on) or lift the protection of [addr, addr + len), waking its writers
 * when lifting.  0 or -errno; -ENOENT also when the range spans several mappings on a
 * kernel that protects within one mapping at a time (6.1 does): the caller then goes
 * mapping by mapping.  Protecting registers a mapping whose registration failed.
 */
int uffd_protect(struct guest_uffd *u, void *addr, size_t len, bool on);
/* The move ends: wake every writer that waited (they fault again and land in whatever
 * the window maps now) and drop the mark. */
void uffd_move_end(struct guest_uffd *u, void *addr, size_t len);
/* The text of uffd_open()'s errors, for the fallback's one line on stderr. */
const char *uffd_why(int err);
#endif
