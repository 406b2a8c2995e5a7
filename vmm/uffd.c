// SPDX-License-Identifier: MIT
/*
 * A guest window's userfaultfd.  A move write-protects the one block it moves
 * (UFFDIO_WRITEPROTECT, which also zaps KVM's second-level entries through the MMU
 * notifier), copies it, maps the new frames over the window and wakes the writers that
 * faulted meanwhile: every writer of the process - vCPU, device thread, a read(2) or an
 * io_uring completion landing in guest RAM - waits for at most that one move, and no
 * thread is paused (docs/decisions.md, entry 25).
 *
 * A writer that faults waits in the kernel until the range is woken, whether or not
 * anyone reads its message; the service thread reads them to count the waits and to
 * lift a protection no move holds (a stray one), so no writer can wait for good.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/userfaultfd.h>
#include "vmm/uffd.h"

#define UFFD_PAGE 4096UL

static bool uffd_disabled(void)
{
	const char *v = getenv("GFA_NO_UFFD");

	return v && *v && strcmp(v, "0");
}

/* A descriptor that may catch kernel-mode faults too (no UFFD_USER_MODE_ONLY: a
 * read(2) or KVM writing guest RAM must wait, not fail with EFAULT). */
static int uffd_new_fd(void)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	int err = errno, dev;

	if (fd >= 0)
		return fd;
	dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -err; /* the syscall's reason: the one an operator can change */
	fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		fd = -errno;
	close(dev);
	return fd;
}

int uffd_open(struct guest_uffd *u)
{
	/* the faulting thread's id tells a lazy guest whose cache serves the first touch */
	struct uffdio_api api = {
		.api = UFFD_API,
		.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_THREAD_ID |
			    UFFD_FEATURE_MISSING_SHMEM,
	};

	memset(u, 0, sizeof(*u));
	u->fd = u->stop_fd = -1;
	if (uffd_disabled())
		return -ECANCELED;
	u->fd = uffd_new_fd();
	if (u->fd < 0)
		return u->fd;
	/* an unknown feature is EINVAL: a kernel before 6.1 cannot protect shmem */
	if (ioctl(u->fd, UFFDIO_API, &api) || !(api.features & UFFD_FEATURE_WP_HUGETLBFS_SHMEM)) {
		uffd_close(u);
		return -EOPNOTSUPP;
	}
	u->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (u->stop_fd < 0) {
		int err = -errno;

		uffd_close(u);
		return err;
	}
	pthread_mutex_init(&u->lock, NULL);
	return 0;
}

void uffd_stop(struct guest_uffd *u)
{
	uint64_t one = 1;

	if (!u->thread_started)
		return;
	if (write(u->stop_fd, &one, sizeof(one)) != sizeof(one))
		abort(); /* an eventfd write of 1 cannot fail */
	pthread_join(u->thread, NULL);
	u->thread_started = false;
}

void uffd_close(struct guest_uffd *u)
{
	uffd_stop(u);
	if (u->stop_fd >= 0) {
		close(u->stop_fd);
		pthread_mutex_destroy(&u->lock);
	}
	if (u->fd >= 0)
		close(u->fd); /* wakes any writer still waiting */
	u->fd = u->stop_fd = -1;
}

static int uffd_register_mode(struct guest_uffd *u, void *addr, size_t len, uint64_t mode,
			      uint64_t need)
{
	struct uffdio_register r = {
		.range = { .start = (uintptr_t)addr, .len = len },
		.mode = mode,
	};

	if (ioctl(u->fd, UFFDIO_REGISTER, &r))
		return -errno;
	return (r.ioctls & need) == need ? 0 : -EOPNOTSUPP;
}

int uffd_register(struct guest_uffd *u, void *addr, size_t len)
{
	return uffd_register_mode(u, addr, len, UFFDIO_REGISTER_MODE_WP,
				  1ULL << _UFFDIO_WRITEPROTECT);
}

/*
 * Missing mode only on the placeholder, never on a mapping of a zone memfd: there a page
 * the memfd does not hold (released to the host, never touched) would be a missing fault
 * too, and the first-touch handler would find the range backed and wake it to fault
 * again, for good.
 */
int uffd_register_missing(struct guest_uffd *u, void *addr, size_t len)
{
	return uffd_register_mode(u, addr, len, UFFDIO_REGISTER_MODE_MISSING, 1ULL << _UFFDIO_WAKE);
}

/* Protect (or lift the protection of, waking the range's writers) [addr, addr + len).
 * EAGAIN: the address space is changing under a fork; try again shortly. */
static int uffd_wp(struct guest_uffd *u, uintptr_t addr, size_t len, bool protect)
{
	struct uffdio_writeprotect wp = {
		.range = { .start = addr, .len = len },
		.mode = protect ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};
	int tries = 0;

	while (ioctl(u->fd, UFFDIO_WRITEPROTECT, &wp)) {
		if (errno != EAGAIN || ++tries > 100)
			return -errno;
		sched_yield();
	}
	return 0;
}

void uffd_wake(struct guest_uffd *u, uintptr_t addr, size_t len)
{
	struct uffdio_range r = { .start = addr, .len = len };

	(void)ioctl(u->fd, UFFDIO_WAKE, &r);
}

/* A write fault: a move's writer waits for uffd_move_end(); any other is lifted. */
static void uffd_fault(struct guest_uffd *u, const struct uffd_msg *m)
{
	uintptr_t a = (uintptr_t)m->arg.pagefault.address & ~(UFFD_PAGE - 1);

	__atomic_add_fetch(&u->faults, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&u->lock);
	if (a < u->move_lo || a >= u->move_hi) {
		__atomic_add_fetch(&u->strays, 1, __ATOMIC_RELAXED);
		(void)uffd_wp(u, a, UFFD_PAGE, false);
		uffd_wake(u, a, UFFD_PAGE); /* also where no mapping is registered now */
	}
	pthread_mutex_unlock(&u->lock);
}

static void *uffd_service(void *arg)
{
	struct guest_uffd *u = arg;
	struct pollfd p[2] = {
		{ .fd = u->fd, .events = POLLIN },
		{ .fd = u->stop_fd, .events = POLLIN },
	};

	for (;;) {
		struct uffd_msg msg[16];
		ssize_t n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		n = read(u->fd, msg, sizeof(msg));
		for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(msg[0]); i++) {
			const struct uffd_msg *m = &msg[i];

			if (m->event != UFFD_EVENT_PAGEFAULT)
				continue;
			if (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP)
				uffd_fault(u, m);
			else if (u->missing)
				u->missing(u->missing_ctx, (uintptr_t)m->arg.pagefault.address,
					   m->arg.pagefault.feat.ptid);
			else
				uffd_wake(u, (uintptr_t)m->arg.pagefault.address & ~(UFFD_PAGE - 1),
					  UFFD_PAGE);
		}
	}
	return NULL;
}

int uffd_start(struct guest_uffd *u)
{
	int err = 0;

	pthread_mutex_lock(&u->lock);
	if (!u->thread_started) {
		err = -pthread_create(&u->thread, NULL, uffd_service, u);
		u->thread_started = !err;
	}
	pthread_mutex_unlock(&u->lock);
	return err;
}

void uffd_move_mark(struct guest_uffd *u, void *addr, size_t len)
{
	/* started by the first move, not at create (a guest that never moves pays no
	 * thread); without one the move is as safe, only its waits go uncounted */
	(void)uffd_start(u);
	pthread_mutex_lock(&u->lock);
	u->move_lo = (uintptr_t)addr;
	u->move_hi = (uintptr_t)addr + len;
	pthread_mutex_unlock(&u->lock);
}

int uffd_protect(struct guest_uffd *u, void *addr, size_t len, bool on)
{
	int err = uffd_wp(u, (uintptr_t)addr, len, on);

	/* a mapping whose registration failed, or several mappings (below) */
	if (err == -ENOENT && on && !uffd_register(u, addr, len))
		err = uffd_wp(u, (uintptr_t)addr, len, on);
	return err;
}

void uffd_move_end(struct guest_uffd *u, void *addr, size_t len)
{
	uffd_wake(u, (uintptr_t)addr, len);
	pthread_mutex_lock(&u->lock);
	u->move_lo = u->move_hi = 0;
	pthread_mutex_unlock(&u->lock);
}

const char *uffd_why(int err)
{
	switch (err) {
	case -EPERM:
		return "userfaultfd needs root, CAP_SYS_PTRACE, read-write access to "
		       "/dev/userfaultfd or vm.unprivileged_userfaultfd=1";
	case -ENOSYS:
		return "this kernel has no userfaultfd";
	case -EOPNOTSUPP:
		return "this kernel cannot write-protect shmem with userfaultfd (6.1 or later can)";
	case -ECANCELED:
		return "GFA_NO_UFFD is set";
	default:
		return "userfaultfd could not be opened";
	}
}
