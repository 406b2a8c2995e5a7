// SPDX-License-Identifier: MIT
/*
 * The vCPU run loop (refvmm/kvm_internal.h): KVM_RUN, its exits to the IO and MMIO
 * handlers, and pause, resume and kick from other threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "refvmm/kvm_internal.h"

#define REQ_PAUSE (1u << 0)
#define REQ_KICK  (1u << 1)

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
__attribute__((format(printf, 3, 4))) static int vcpu_fail(struct gfa_kvm_vcpu *vcpu, int err,
							   const char *fmt, ...)
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
		.gpa = run->mmio.phys_addr,
		.len = run->mmio.len,
		.write = run->mmio.is_write,
		.data = run->mmio.data,
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
		return 0; /* a signal; pending requests are handled at the loop top */
	case KVM_EXIT_MMIO:
		if (vcpu->vm->mmio_fn)
			return handle_mmio(vcpu);
		return vcpu_fail(
			vcpu, -EFAULT,
			"guest %s %u bytes at GPA 0x%llx, which is in no memslot (MMIO exit) at rip 0x%llx",
			run->mmio.is_write ? "wrote" : "read", run->mmio.len,
			(unsigned long long)run->mmio.phys_addr,
			(unsigned long long)guest_rip(vcpu));
	case KVM_EXIT_SHUTDOWN:
		/* No rip: KVM may already have reset the vCPU (SVM does). */
		return vcpu_fail(
			vcpu, -EIO,
			"guest shut down (triple fault: an exception it could not handle)");
	case KVM_EXIT_FAIL_ENTRY:
		return vcpu_fail(vcpu, -EIO,
				 "VM entry failed: hardware entry failure reason 0x%llx on cpu %u",
				 (unsigned long long)run->fail_entry.hardware_entry_failure_reason,
				 run->fail_entry.cpu);
	case KVM_EXIT_INTERNAL_ERROR:
		return vcpu_fail(
			vcpu, -EIO,
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
				continue; /* kicked or another signal */
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
