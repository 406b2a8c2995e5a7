// SPDX-License-Identifier: MIT
/*
 * A Linux VM on a gfa guest: KVM set-up a kernel needs without firmware (irqchip, PIT,
 * CPUID with the hypervisor bit, the vCPUs' entry state), the exit loop (UART console,
 * reset ports, PCI, all-ones for the rest), the console log that tests and gfactl wait
 * on, and the vCPU pause hooks that let gfa move the guest's frames while it runs.
 * See include/gfa/refvmm.h ("Linux guests").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include "refvmm/linux.h"
#include "common/ktime.h"

/* Where KVM keeps its real-mode TSS and identity-map page on Intel (QEMU's places, just
 * below the 4 GiB line and far above any guest RAM allowed here). */
#define LINUX_IDENTITY_MAP_GPA 0xfeffc000ULL
#define LINUX_TSS_GPA          0xfeffd000ULL

#define PORT_I8042_CMD 0x64
#define I8042_RESET    0xfe
#define PORT_PCI_FIRST 0xcf8
#define PORT_PCI_LAST  0xcff

#define CPUID_1_ECX_HYPERVISOR (1u << 31)
#define LINE_MAX_BYTES         240

struct console_line {
	double ms;
	char text[LINE_MAX_BYTES];
};

struct gfa_linux_vm {
	struct gfa_pool *pool;
	struct gfa_guest *guest;
	struct gfa_kvm_vm *kvm;
	struct gfa_rv_pci *pci;
	unsigned int nr_vcpus;
	struct gfa_kvm_vcpu *vcpu[GFA_LINUX_MAX_VCPUS];
	pthread_t thread[GFA_LINUX_MAX_VCPUS];
	struct lvm_vcpu_arg {
		struct gfa_linux_vm *vm;
		unsigned int idx;
	} arg[GFA_LINUX_MAX_VCPUS];
	struct linux_boot boot;
	atomic_bool ready; /* moves allowed: RAM is loaded, vCPUs exist */
	atomic_bool stopping;
	bool started, joined;
	double t0;

	pthread_mutex_t uart_lock; /* the UART's and PM1 registers, from any vCPU */
	struct linux_uart uart;
	struct linux_acpi_pm pm;
	char cur[LINE_MAX_BYTES];
	size_t cur_len;
	int console_fd;

	pthread_mutex_t lock; /* console lines, exit state */
	pthread_cond_t cond;
	struct console_line *lines; /* ring of GFA_LINUX_CONSOLE_LINES */
	uint64_t nr_lines;
	unsigned int running; /* vCPU threads still running */
	int exit;             /* enum gfa_linux_exit */
	char error[256];
	double boot_ms;

	atomic_uint_fast64_t console_bytes, io_unclaimed, mmio_exits, err_irq;
};

/* milliseconds, fractional: the console lines' times are printed to the microsecond */
static double mono_ms(void)
{
	return (double)ktime_get_ns() / 1e6;
}

/* ---- pausing vCPUs around frame moves ---- */

static int lvm_pause(void *ctx)
{
	struct gfa_linux_vm *vm = ctx;

	/* until the kernel is loaded, a move (copy, then remap) could lose what is being
	 * written through the window: refuse it */
	if (!atomic_load_explicit(&vm->ready, memory_order_acquire))
		return -EBUSY;
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		if (!gfa_kvm_vcpu_pause(vm->vcpu[i]))
			continue;
		while (i--)
			gfa_kvm_vcpu_resume(vm->vcpu[i]);
		return -EBUSY;
	}
	/* the devices' threads write guest RAM too (used rings, stats): a frame being
	 * copied must not change under the copy, from a vCPU or from a device */
	if (vm->pci)
		gfa_rv_pci_pause(vm->pci);
	return 0;
}

static int lvm_resume(void *ctx)
{
	struct gfa_linux_vm *vm = ctx;

	if (vm->pci)
		gfa_rv_pci_resume(vm->pci);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		gfa_kvm_vcpu_resume(vm->vcpu[i]);
	return 0;
}

static const struct gfa_guest_vcpu_ops lvm_vcpu_ops = { lvm_pause, lvm_resume };

/* ---- console ---- */

static void console_push_line(struct gfa_linux_vm *vm)
{
	struct console_line *l;

	pthread_mutex_lock(&vm->lock);
	l = &vm->lines[vm->nr_lines % GFA_LINUX_CONSOLE_LINES];
	l->ms = mono_ms() - vm->t0;
	memcpy(l->text, vm->cur, vm->cur_len);
	l->text[vm->cur_len] = '\0';
	if (!vm->boot_ms && !strncmp(l->text, "gfa-init", 8))
		vm->boot_ms = l->ms;
	vm->nr_lines++;
	pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
	if (vm->console_fd >= 0) {
		vm->cur[vm->cur_len] = '\n';
		/* the console copy is best effort: a full pipe must not stop the guest */
		if (write(vm->console_fd, vm->cur, vm->cur_len + 1) < 0)
			vm->console_fd = -1;
	}
	vm->cur_len = 0;
}

/* A byte the guest sent to the UART (uart_lock held). */
static void console_out(void *ctx, uint8_t byte)
{
	struct gfa_linux_vm *vm = ctx;

	atomic_fetch_add_explicit(&vm->console_bytes, 1, memory_order_relaxed);
	if (byte == '\r')
		return;
	if (byte != '\n') {
		vm->cur[vm->cur_len++] = (char)byte;
		if (vm->cur_len < LINE_MAX_BYTES - 1)
			return;
	}
	console_push_line(vm);
}

void gfa_linux_vm_irq_line(void *ctx, unsigned int irq, int level)
{
	struct gfa_linux_vm *vm = ctx;
	struct kvm_irq_level l = { .irq = irq, .level = (uint32_t) !!level };

	if (!vm || irq >= 24 || ioctl(gfa_kvm_vm_fd(vm->kvm), KVM_IRQ_LINE, &l) < 0) {
		if (vm)
			atomic_fetch_add_explicit(&vm->err_irq, 1, memory_order_relaxed);
	}
}

/* ---- exits ---- */

/* One element of a port access; GFA_KVM_IO_STOP for a reset. */
static int lvm_port(struct gfa_linux_vm *vm, uint16_t port, uint8_t *data, unsigned int size,
		    bool out)
{
	if (port >= LINUX_UART_BASE && port < LINUX_UART_BASE + 8 && size == 1) {
		pthread_mutex_lock(&vm->uart_lock);
		linux_uart_io(&vm->uart, port - LINUX_UART_BASE, out, data);
		pthread_mutex_unlock(&vm->uart_lock);
		return GFA_KVM_IO_CONTINUE;
	}
	if (port >= LINUX_PM1_EVT_PORT && port < LINUX_PM1_CNT_PORT + 2) {
		bool mine;

		pthread_mutex_lock(&vm->uart_lock);
		mine = linux_acpi_pm_io(&vm->pm, port, data, size, out);
		pthread_mutex_unlock(&vm->uart_lock);
		if (mine)
			return GFA_KVM_IO_CONTINUE;
	}
	if (port == PORT_I8042_CMD && out && size == 1 && *data == I8042_RESET)
		return GFA_KVM_IO_STOP;
	/* the reset control register shares the PCI ports' range; bytes only */
	if (port == LINUX_RESET_PORT && size == 1) {
		if (out && (*data & LINUX_RESET_CPU))
			return GFA_KVM_IO_STOP;
		if (!out)
			*data = 0;
		return GFA_KVM_IO_CONTINUE;
	}
	if (vm->pci && gfa_rv_pci_io(vm->pci, port, data, size, out) == 0)
		return GFA_KVM_IO_CONTINUE;
	atomic_fetch_add_explicit(&vm->io_unclaimed, 1, memory_order_relaxed);
	if (!out)
		memset(data, 0xff, size);
	return GFA_KVM_IO_CONTINUE;
}

static int lvm_io(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io, void *ctx)
{
	uint8_t *data = io->data;

	(void)vcpu;
	for (uint32_t i = 0; i < io->count; i++) {
		int r = lvm_port(ctx, io->port, data + (size_t)i * io->size, io->size, io->out);

		if (r)
			return r;
	}
	return GFA_KVM_IO_CONTINUE;
}

static int lvm_mmio(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_mmio *m, void *ctx)
{
	struct gfa_linux_vm *vm = ctx;

	(void)vcpu;
	atomic_fetch_add_explicit(&vm->mmio_exits, 1, memory_order_relaxed);
	if (!m->write)
		memset(m->data, 0xff, m->len > 8 ? 8 : m->len);
	return GFA_KVM_IO_CONTINUE;
}

/* ---- vCPU threads ---- */

static void lvm_set_exit(struct gfa_linux_vm *vm, int why, const char *err)
{
	pthread_mutex_lock(&vm->lock);
	if (!vm->exit) {
		vm->exit = why;
		if (err)
			snprintf(vm->error, sizeof(vm->error), "%s", err);
	}
	pthread_mutex_unlock(&vm->lock);
	atomic_store(&vm->stopping, true);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		gfa_kvm_vcpu_kick(vm->vcpu[i]);
}

/* A run error: a triple fault (or KVM's shutdown event) is the guest's way to stop. */
static int run_error_exit(const char *err)
{
	if (!strncmp(err, "guest shut down", 15) || !strncmp(err, "guest system event", 18))
		return GFA_LINUX_EXIT_SHUTDOWN;
	return GFA_LINUX_EXIT_ERROR;
}

static void *lvm_vcpu_main(void *p)
{
	struct lvm_vcpu_arg *a = p;
	struct gfa_linux_vm *vm = a->vm;
	struct gfa_kvm_vcpu *vcpu = vm->vcpu[a->idx];

	for (;;) {
		int r = gfa_kvm_vcpu_run(vcpu, lvm_io, vm);

		if (r == GFA_KVM_RUN_KICKED || r == GFA_KVM_RUN_HLT) {
			if (atomic_load(&vm->stopping))
				break;
			continue;
		}
		if (r == GFA_KVM_RUN_STOPPED) {
			lvm_set_exit(vm, GFA_LINUX_EXIT_RESET, NULL);
			break;
		}
		if (r < 0) {
			const char *err = gfa_kvm_vcpu_error(vcpu);

			lvm_set_exit(vm, run_error_exit(err), err);
			break;
		}
	}
	pthread_mutex_lock(&vm->lock);
	vm->running--;
	pthread_cond_broadcast(&vm->cond);
	pthread_mutex_unlock(&vm->lock);
	return NULL;
}

/* ---- KVM set-up ---- */

static int vm_ioctl(struct gfa_linux_vm *vm, unsigned long req, void *arg)
{
	return ioctl(gfa_kvm_vm_fd(vm->kvm), req, arg) < 0 ? -errno : 0;
}

/* irqchip, PIT and Intel's TSS / identity-map pages: before any vCPU exists. */
static int lvm_setup_kvm(struct gfa_linux_vm *vm)
{
	uint64_t ident = LINUX_IDENTITY_MAP_GPA;
	struct kvm_pit_config pit = { .flags = KVM_PIT_SPEAKER_DUMMY };
	int fd = gfa_kvm_vm_fd(vm->kvm);
	int r;

	if (ioctl(fd, KVM_SET_IDENTITY_MAP_ADDR, &ident) < 0 ||
	    ioctl(fd, KVM_SET_TSS_ADDR, (unsigned long)LINUX_TSS_GPA) < 0)
		return -errno;
	r = vm_ioctl(vm, KVM_CREATE_IRQCHIP, NULL);
	if (!r)
		r = vm_ioctl(vm, KVM_CREATE_PIT2, &pit);
	if (!r)
		r = gfa_kvm_vm_set_mmio_handler(vm->kvm, lvm_mmio, vm);
	return r;
}

/* The vCPU's CPUID (what gfa_kvm_vcpu_create set) plus the hypervisor bit: with it the
 * kernel looks for KVM's leaves and uses kvmclock instead of calibrating against the PIT. */
static int lvm_set_hypervisor_bit(struct gfa_kvm_vcpu *vcpu)
{
	unsigned int nent = 256;
	struct kvm_cpuid2 *c = calloc(1, sizeof(*c) + nent * sizeof(c->entries[0]));
	int fd = gfa_kvm_vcpu_fd(vcpu), r = 0;

	if (!c)
		return -ENOMEM;
	c->nent = nent;
	if (ioctl(fd, KVM_GET_CPUID2, c) < 0) {
		r = -errno;
		goto out;
	}
	for (uint32_t i = 0; i < c->nent; i++)
		if (c->entries[i].function == 1)
			c->entries[i].ecx |= CPUID_1_ECX_HYPERVISOR;
	if (ioctl(fd, KVM_SET_CPUID2, c) < 0)
		r = -errno;
out:
	free(c);
	return r;
}

static struct kvm_segment flat32(uint16_t sel, uint8_t type, bool s)
{
	return (struct kvm_segment){
		.base = 0,
		.limit = 0xffffffff,
		.selector = sel,
		.type = type,
		.present = 1,
		.dpl = 0,
		.db = 1,
		.s = s,
		.l = 0,
		.g = 1,
	};
}

/* The PVH entry state: 32-bit protected mode, paging off, flat segments, ebx = start info. */
static int lvm_enter_pvh(struct gfa_linux_vm *vm)
{
	int fd = gfa_kvm_vcpu_fd(vm->vcpu[0]);
	struct kvm_sregs sr;
	struct kvm_regs regs;

	if (ioctl(fd, KVM_GET_SREGS, &sr) < 0)
		return -errno;
	sr.cs = flat32(0x10, 0xb, true); /* execute/read, accessed */
	sr.ds = sr.es = sr.fs = sr.gs = sr.ss = flat32(0x18, 0x3, true);
	sr.tr = flat32(0x20, 0xb, false); /* busy 32-bit TSS */
	sr.tr.limit = 0x67;
	sr.tr.g = 0;
	sr.tr.db = 0;
	sr.cr0 = 0x11; /* PE, ET */
	sr.cr4 = 0;
	sr.efer = 0;
	if (ioctl(fd, KVM_SET_SREGS, &sr) < 0)
		return -errno;
	memset(&regs, 0, sizeof(regs));
	regs.rflags = 0x2;
	regs.rip = vm->boot.entry;
	regs.rbx = vm->boot.info_gpa;
	return ioctl(fd, KVM_SET_REGS, &regs) < 0 ? -errno : 0;
}

/* The 64-bit bzImage entry: long mode on identity-mapped RAM, rsi = boot_params. */
static int lvm_enter_64(struct gfa_linux_vm *vm, uint64_t size)
{
	struct gfa_kvm_entry e = { .rip = vm->boot.entry, .args = { 0, vm->boot.info_gpa } };
	int r = gfa_kvm_vm_build_page_tables(vm->kvm, LINUX_BOOT_AREA_GPA, size);

	return r ? r : gfa_kvm_vcpu_enter_long_mode(vm->vcpu[0], &e);
}

static char *build_cmdline(const struct gfa_linux_config *cfg)
{
	const char *base = cfg->cmdline ? cfg->cmdline : GFA_LINUX_DEFAULT_CMDLINE;
	char *s = NULL;

	/* no PCI bus: spare the kernel the probe (it still says "PCI: Fatal: No config
	 * space access function found", harmlessly) */
	if (asprintf(&s, "%s%s%s%s", base, cfg->pci ? "" : " pci=off", cfg->append ? " " : "",
		     cfg->append ? cfg->append : "") < 0)
		return NULL;
	return s;
}

static int lvm_load(struct gfa_linux_vm *vm, const struct gfa_linux_config *cfg)
{
	uint64_t size = cfg->mem_bytes;
	char *cmdline = build_cmdline(cfg);
	int r;

	if (!cmdline)
		return -ENOMEM;
	r = linux_boot_load(gfa_guest_hva(vm->guest), size, cfg->kernel, cfg->initrd, cmdline,
			    vm->nr_vcpus, &vm->boot);
	free(cmdline);
	if (r)
		return r;
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		vm->vcpu[i] = gfa_kvm_vcpu_create(vm->kvm, i);
		if (!vm->vcpu[i])
			return -errno;
		r = lvm_set_hypervisor_bit(vm->vcpu[i]);
		if (r)
			return r;
	}
	return vm->boot.pvh ? lvm_enter_pvh(vm) : lvm_enter_64(vm, size);
}

static bool lvm_config_ok(const struct gfa_linux_config *cfg)
{
	return cfg->kernel && cfg->mem_bytes >= (64ULL << 20) &&
	       cfg->mem_bytes <= GFA_LINUX_MAX_MEM && !(cfg->mem_bytes % (2ULL << 20)) &&
	       cfg->vcpus <= GFA_LINUX_MAX_VCPUS;
}

struct gfa_linux_vm *gfa_linux_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
					 const struct gfa_linux_config *cfg)
{
	struct gfa_guest_config gc = { 0 };
	struct gfa_linux_vm *vm;
	char why[160];
	int r;

	if (!pool || !b || !cfg) {
		errno = EFAULT;
		return NULL;
	}
	if (!lvm_config_ok(cfg)) {
		errno = EINVAL;
		return NULL;
	}
	if (!gfa_kvm_available(why, sizeof(why))) {
		errno = ENODEV;
		return NULL;
	}
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return NULL;
	vm->lines = calloc(GFA_LINUX_CONSOLE_LINES, sizeof(*vm->lines));
	if (!vm->lines) {
		free(vm);
		errno = ENOMEM;
		return NULL;
	}
	vm->pool = pool;
	vm->pci = cfg->pci;
	vm->nr_vcpus = cfg->vcpus ? cfg->vcpus : 1;
	vm->console_fd = cfg->console_fd;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->uart_lock, NULL);
	pthread_cond_init(&vm->cond, NULL);
	linux_uart_init(&vm->uart, LINUX_UART_IRQ, gfa_linux_vm_irq_line, console_out, vm);
	gc.mem_bytes = cfg->mem_bytes;
	gc.zone = cfg->zone;
	gc.pcp = cfg->pcp;
	gc.small_only = cfg->small_only;
	gc.flags = cfg->lazy ? GFA_GUEST_LAZY : 0;
	gc.vcpu_ops = &lvm_vcpu_ops;
	gc.vcpu_ctx = vm;
	vm->guest = gfa_guest_create(pool, b, &gc);
	if (!vm->guest) {
		r = -errno;
		goto fail;
	}
	vm->kvm = gfa_kvm_vm_create();
	if (!vm->kvm) {
		r = -errno;
		goto fail;
	}
	r = gfa_kvm_set_memslot(vm->kvm, 0, 0, gfa_guest_hva(vm->guest), cfg->mem_bytes, 0);
	if (!r)
		r = lvm_setup_kvm(vm);
	if (!r)
		r = lvm_load(vm, cfg);
	if (r)
		goto fail;
	atomic_store_explicit(&vm->ready, true, memory_order_release);
	return vm;
fail:
	vm->joined = true;
	gfa_linux_vm_destroy(vm);
	errno = -r;
	return NULL;
}

int gfa_linux_vm_start(struct gfa_linux_vm *vm)
{
	if (!vm)
		return -EFAULT;
	if (vm->started)
		return -EALREADY;
	vm->started = true;
	vm->t0 = mono_ms();
	for (unsigned int i = 0; i < vm->nr_vcpus; i++) {
		vm->arg[i] = (struct lvm_vcpu_arg){ vm, i };
		pthread_mutex_lock(&vm->lock);
		vm->running++;
		pthread_mutex_unlock(&vm->lock);
		if (pthread_create(&vm->thread[i], NULL, lvm_vcpu_main, &vm->arg[i])) {
			pthread_mutex_lock(&vm->lock);
			vm->running--;
			pthread_mutex_unlock(&vm->lock);
			lvm_set_exit(vm, GFA_LINUX_EXIT_ERROR, "cannot create a vCPU thread");
			for (unsigned int j = 0; j < i; j++)
				pthread_join(vm->thread[j], NULL);
			vm->joined = true;
			return -EAGAIN;
		}
	}
	return 0;
}

static void deadline_after(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int gfa_linux_vm_wait(struct gfa_linux_vm *vm, int timeout_ms)
{
	struct timespec dl;
	int r = 0, ex;

	if (!vm)
		return -EFAULT;
	deadline_after(&dl, timeout_ms < 0 ? 0 : timeout_ms);
	pthread_mutex_lock(&vm->lock);
	while (vm->started && vm->running && r != ETIMEDOUT)
		r = timeout_ms < 0 ? pthread_cond_wait(&vm->cond, &vm->lock) :
				     pthread_cond_timedwait(&vm->cond, &vm->lock, &dl);
	ex = vm->running ? GFA_LINUX_RUNNING : vm->exit;
	pthread_mutex_unlock(&vm->lock);
	return ex;
}

int gfa_linux_vm_stop(struct gfa_linux_vm *vm)
{
	if (!vm)
		return -EFAULT;
	if (vm->started && !vm->joined) {
		lvm_set_exit(vm, GFA_LINUX_EXIT_STOPPED, NULL);
		for (unsigned int i = 0; i < vm->nr_vcpus; i++)
			pthread_join(vm->thread[i], NULL);
		vm->joined = true;
	}
	return vm->exit ? vm->exit : GFA_LINUX_EXIT_STOPPED;
}

void gfa_linux_vm_destroy(struct gfa_linux_vm *vm)
{
	if (!vm)
		return;
	gfa_linux_vm_stop(vm);
	/* first: a compaction moving one of our blocks must not pause freed vCPUs */
	gfa_guest_forget_vcpus(vm->guest);
	for (unsigned int i = 0; i < vm->nr_vcpus; i++)
		gfa_kvm_vcpu_destroy(vm->vcpu[i]);
	gfa_kvm_vm_destroy(vm->kvm);
	gfa_guest_destroy(vm->guest);
	pthread_cond_destroy(&vm->cond);
	pthread_mutex_destroy(&vm->lock);
	pthread_mutex_destroy(&vm->uart_lock);
	free(vm->lines);
	free(vm);
}

struct gfa_guest *gfa_linux_vm_guest(struct gfa_linux_vm *vm)
{
	return vm ? vm->guest : NULL;
}

struct gfa_kvm_vm *gfa_linux_vm_kvm(struct gfa_linux_vm *vm)
{
	return vm ? vm->kvm : NULL;
}

const char *gfa_linux_vm_error(struct gfa_linux_vm *vm)
{
	return vm ? vm->error : "no vm";
}

int gfa_linux_vm_e820(struct gfa_linux_vm *vm, struct gfa_linux_e820 *e, unsigned int max)
{
	if (!vm)
		return -EFAULT;
	for (unsigned int i = 0; e && i < max && i < vm->boot.nr_e820; i++)
		e[i] = vm->boot.e820[i];
	return (int)vm->boot.nr_e820;
}

/* Line @i if the ring still has it and it holds @needle (vm->lock held). */
static bool line_matches(struct gfa_linux_vm *vm, uint64_t i, const char *needle)
{
	return strstr(vm->lines[i % GFA_LINUX_CONSOLE_LINES].text, needle) != NULL;
}

int gfa_linux_vm_console_wait(struct gfa_linux_vm *vm, const char *needle, unsigned int from,
			      int timeout_ms, char *line, size_t len, double *ms)
{
	struct timespec dl;
	uint64_t i = from;
	int r = 0;

	if (!vm || !needle)
		return -EFAULT;
	deadline_after(&dl, timeout_ms < 0 ? 0 : timeout_ms);
	pthread_mutex_lock(&vm->lock);
	for (;;) {
		if (vm->nr_lines > GFA_LINUX_CONSOLE_LINES &&
		    i < vm->nr_lines - GFA_LINUX_CONSOLE_LINES)
			i = vm->nr_lines - GFA_LINUX_CONSOLE_LINES;
		for (; i < vm->nr_lines; i++) {
			struct console_line *l = &vm->lines[i % GFA_LINUX_CONSOLE_LINES];

			if (!line_matches(vm, i, needle))
				continue;
			if (line && len)
				snprintf(line, len, "%s", l->text);
			if (ms)
				*ms = l->ms;
			pthread_mutex_unlock(&vm->lock);
			return (int)i;
		}
		if (vm->started && !vm->running)
			r = -ESHUTDOWN;
		else if (r == ETIMEDOUT)
			r = -ETIMEDOUT;
		else
			r = timeout_ms < 0 ? pthread_cond_wait(&vm->cond, &vm->lock) :
					     pthread_cond_timedwait(&vm->cond, &vm->lock, &dl);
		if (r < 0)
			break;
	}
	pthread_mutex_unlock(&vm->lock);
	return r;
}

int gfa_linux_vm_stat(struct gfa_linux_vm *vm, struct gfa_linux_stat *st)
{
	if (!vm || !st)
		return -EFAULT;
	memset(st, 0, sizeof(*st));
	st->console_bytes = atomic_load(&vm->console_bytes);
	st->io_exits_unclaimed = atomic_load(&vm->io_unclaimed);
	st->mmio_exits = atomic_load(&vm->mmio_exits);
	st->err_irq = atomic_load(&vm->err_irq);
	pthread_mutex_lock(&vm->lock);
	st->console_lines = vm->nr_lines;
	st->boot_ms = vm->boot_ms;
	pthread_mutex_unlock(&vm->lock);
	/* best effort: kernels without binary stats leave them 0 */
	gfa_kvm_vm_stat(vm->kvm, "pages_4k", &st->pages_4k);
	gfa_kvm_vm_stat(vm->kvm, "pages_2m", &st->pages_2m);
	return 0;
}
