// SPDX-License-Identifier: MIT
/*
 * PCI bus 0 for the reference VMM: configuration mechanism #1 on ports 0xcf8-0xcff, a
 * host bridge at 00.0, and single-function devices with one IO BAR each, assigned here
 * as firmware would (so a guest without a BIOS finds them ready).  Configuration space
 * is an array per device with a mask of writable bits, as QEMU keeps it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "refvmm/pci.h"

#define CONF1_ADDR   0xcf8
#define CONF1_DATA   0xcfc
#define CONF1_ENABLE 0x80000000u
#define PCI_CFG_SIZE 256

struct rv_pci_fn {
	uint8_t cfg[PCI_CFG_SIZE];
	uint8_t wmask[PCI_CFG_SIZE]; /* writable bits of each byte */
	struct rv_pci_id id;
	rv_pci_bar_fn bar; /* NULL: the host bridge */
	void *ctx;
	bool level;   /* the device's INTx wire */
	bool line_up; /* what irq_fn was last told */
};

struct gfa_rv_pci {
	pthread_rwlock_t devs_lock; /* read: BAR dispatch; write: plug and unplug */
	pthread_mutex_t cfg_lock;   /* address register, config spaces, INTx */
	uint32_t cfg_addr;
	struct rv_pci_fn *fn[GFA_RV_PCI_MAX_SLOTS];
	/* the gate between device threads and a VMM that moves guest frames */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	unsigned int paused, active;
};

static void cfg_put(uint8_t *cfg, unsigned int off, uint32_t val, unsigned int size)
{
	for (unsigned int i = 0; i < size; i++)
		cfg[off + i] = (uint8_t)(val >> (8 * i));
}

static uint32_t cfg_get(const uint8_t *cfg, unsigned int off, unsigned int size)
{
	uint32_t v = 0;

	for (unsigned int i = 0; i < size; i++)
		v |= (uint32_t)cfg[off + i] << (8 * i);
	return v;
}

static uint16_t fn_io_base(const struct rv_pci_fn *f)
{
	return (uint16_t)(cfg_get(f->cfg, PCI_BASE_ADDRESS_0, 4) & ~3u);
}

/* With cfg_lock held: tell irq_fn when the line the guest sees changes. */
static void fn_update_line(struct rv_pci_fn *f)
{
	bool up = f->level && !(cfg_get(f->cfg, PCI_COMMAND, 2) & PCI_COMMAND_INTX_DISABLE);
	uint16_t status = (uint16_t)cfg_get(f->cfg, PCI_STATUS, 2);

	status = f->level ? status | PCI_STATUS_INTERRUPT : status & ~PCI_STATUS_INTERRUPT;
	cfg_put(f->cfg, PCI_STATUS, status, 2);
	if (up != f->line_up && f->id.irq_fn) {
		f->line_up = up;
		f->id.irq_fn(f->id.irq_ctx, f->id.irq, up);
	}
}

static struct rv_pci_fn *fn_new(const struct rv_pci_id *id, unsigned int slot)
{
	struct rv_pci_fn *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->id = *id;
	cfg_put(f->cfg, PCI_VENDOR_ID, id->vendor, 2);
	cfg_put(f->cfg, PCI_DEVICE_ID, id->device, 2);
	cfg_put(f->cfg, PCI_REVISION_ID, id->revision, 1);
	cfg_put(f->cfg, PCI_CLASS_PROG, id->class_code, 3);
	cfg_put(f->cfg, PCI_SUBSYSTEM_VENDOR_ID, id->subsys_vendor, 2);
	cfg_put(f->cfg, PCI_SUBSYSTEM_ID, id->subsys, 2);
	cfg_put(f->wmask, PCI_COMMAND,
		PCI_COMMAND_IO | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE,
		2);
	f->wmask[PCI_CACHE_LINE_SIZE] = 0xff;
	f->wmask[PCI_LATENCY_TIMER] = 0xff;
	if (id->io_size) {
		/* firmware's assignment, decoding enabled; the guest may size and move it
		 * (16-bit IO decode: the upper half reads zero) */
		cfg_put(f->cfg, PCI_BASE_ADDRESS_0,
			(GFA_RV_PCI_IO_BASE + slot * GFA_RV_PCI_IO_STRIDE) |
				PCI_BASE_ADDRESS_SPACE_IO,
			4);
		cfg_put(f->wmask, PCI_BASE_ADDRESS_0, 0xffffu & ~(uint32_t)(id->io_size - 1), 4);
		cfg_put(f->cfg, PCI_COMMAND, PCI_COMMAND_IO, 2);
		f->cfg[PCI_INTERRUPT_LINE] = (uint8_t)id->irq;
		f->cfg[PCI_INTERRUPT_PIN] = 1; /* INTA# */
		f->wmask[PCI_INTERRUPT_LINE] = 0xff;
	}
	return f;
}

struct gfa_rv_pci *gfa_rv_pci_create(void)
{
	/* Intel vendor and host-bridge class: what Linux's type 1 sanity check looks for */
	static const struct rv_pci_id bridge = { .vendor = 0x8086,
						 .device = 0x0d57,
						 .class_code = 0x060000 };
	struct gfa_rv_pci *pci = calloc(1, sizeof(*pci));

	if (!pci)
		return NULL;
	pci->fn[0] = fn_new(&bridge, 0);
	if (!pci->fn[0]) {
		free(pci);
		errno = ENOMEM;
		return NULL;
	}
	pthread_rwlock_init(&pci->devs_lock, NULL);
	pthread_mutex_init(&pci->cfg_lock, NULL);
	pthread_mutex_init(&pci->gate_lock, NULL);
	pthread_cond_init(&pci->gate_cond, NULL);
	return pci;
}

int gfa_rv_pci_destroy(struct gfa_rv_pci *pci)
{
	if (!pci)
		return 0;
	for (unsigned int s = 1; s < GFA_RV_PCI_MAX_SLOTS; s++)
		if (pci->fn[s])
			return -EBUSY;
	free(pci->fn[0]);
	pthread_rwlock_destroy(&pci->devs_lock);
	pthread_mutex_destroy(&pci->cfg_lock);
	pthread_mutex_destroy(&pci->gate_lock);
	pthread_cond_destroy(&pci->gate_cond);
	free(pci);
	return 0;
}

int rv_pci_add(struct gfa_rv_pci *pci, unsigned int slot, const struct rv_pci_id *id,
	       rv_pci_bar_fn bar, void *ctx)
{
	unsigned int s = slot ? slot : 1;
	int ret = 0;

	if (!pci || !id || !bar)
		return -EFAULT;
	if (id->io_size < 4 || id->io_size > GFA_RV_PCI_IO_STRIDE ||
	    (id->io_size & (id->io_size - 1)) || slot >= GFA_RV_PCI_MAX_SLOTS)
		return -EINVAL;
	pthread_rwlock_wrlock(&pci->devs_lock);
	pthread_mutex_lock(&pci->cfg_lock);
	while (!slot && s < GFA_RV_PCI_MAX_SLOTS && pci->fn[s])
		s++;
	if (s >= GFA_RV_PCI_MAX_SLOTS)
		ret = -ENOSPC;
	else if (pci->fn[s])
		ret = -EBUSY;
	else if (!(pci->fn[s] = fn_new(id, s)))
		ret = -ENOMEM;
	if (!ret) {
		pci->fn[s]->bar = bar;
		pci->fn[s]->ctx = ctx;
	}
	pthread_mutex_unlock(&pci->cfg_lock);
	pthread_rwlock_unlock(&pci->devs_lock);
	return ret ? ret : (int)s;
}

void rv_pci_remove(struct gfa_rv_pci *pci, int slot)
{
	struct rv_pci_fn *f;

	if (!pci || slot <= 0 || slot >= (int)GFA_RV_PCI_MAX_SLOTS)
		return;
	pthread_rwlock_wrlock(&pci->devs_lock); /* waits out BAR handlers */
	pthread_mutex_lock(&pci->cfg_lock);
	f = pci->fn[slot];
	pci->fn[slot] = NULL;
	if (f && f->line_up && f->id.irq_fn)
		f->id.irq_fn(f->id.irq_ctx, f->id.irq, 0);
	pthread_mutex_unlock(&pci->cfg_lock);
	pthread_rwlock_unlock(&pci->devs_lock);
	free(f);
}

void rv_pci_set_intx(struct gfa_rv_pci *pci, int slot, bool level)
{
	pthread_mutex_lock(&pci->cfg_lock);
	if (slot > 0 && slot < (int)GFA_RV_PCI_MAX_SLOTS && pci->fn[slot]) {
		pci->fn[slot]->level = level;
		fn_update_line(pci->fn[slot]);
	}
	pthread_mutex_unlock(&pci->cfg_lock);
}

/* With cfg_lock: the function the address register selects, or NULL (all ones). */
static struct rv_pci_fn *cfg_target(struct gfa_rv_pci *pci)
{
	uint32_t a = pci->cfg_addr;

	if (!(a & CONF1_ENABLE) || (a >> 16 & 0xff) || (a >> 8 & 7))
		return NULL; /* disabled, another bus, another function */
	return pci->fn[a >> 11 & 0x1f];
}

static void cfg_write(struct rv_pci_fn *f, unsigned int off, uint32_t val, unsigned int size)
{
	for (unsigned int i = 0; i < size; i++) {
		uint8_t m = f->wmask[off + i];

		f->cfg[off + i] = (uint8_t)((f->cfg[off + i] & ~m) | ((val >> (8 * i)) & m));
	}
	if (f->id.io_size) /* an IO BAR always says so */
		f->cfg[PCI_BASE_ADDRESS_0] |= PCI_BASE_ADDRESS_SPACE_IO;
	if (off < PCI_COMMAND + 2 && off + size > PCI_COMMAND)
		fn_update_line(f); /* INTX_DISABLE may have changed */
}

static int cfg_data(struct gfa_rv_pci *pci, uint16_t port, uint32_t *val, unsigned int size,
		    bool write)
{
	struct rv_pci_fn *f;
	unsigned int off;

	if ((port & 3) + size > 4)
		return -ENOENT; /* beyond the data window */
	pthread_mutex_lock(&pci->cfg_lock);
	f = cfg_target(pci);
	off = (pci->cfg_addr & 0xfc) + (port & 3);
	if (write && f)
		cfg_write(f, off, *val, size);
	else if (!write)
		*val = f ? cfg_get(f->cfg, off, size) : 0xffffffffu;
	pthread_mutex_unlock(&pci->cfg_lock);
	return 0;
}

/* A port inside an enabled IO BAR: dispatch to its device. */
static int bar_io(struct gfa_rv_pci *pci, uint16_t port, uint32_t *val, unsigned int size,
		  bool write)
{
	int ret = -ENOENT;

	pthread_rwlock_rdlock(&pci->devs_lock);
	for (unsigned int s = 1; s < GFA_RV_PCI_MAX_SLOTS && ret; s++) {
		struct rv_pci_fn *f = pci->fn[s];
		uint16_t base;
		bool on;

		if (!f)
			continue;
		pthread_mutex_lock(&pci->cfg_lock);
		base = fn_io_base(f);
		on = cfg_get(f->cfg, PCI_COMMAND, 2) & PCI_COMMAND_IO;
		pthread_mutex_unlock(&pci->cfg_lock);
		if (on && base && port >= base &&
		    (uint32_t)port + size <= (uint32_t)base + f->id.io_size) {
			f->bar(f->ctx, port - base, val, size, write);
			ret = 0;
		}
	}
	pthread_rwlock_unlock(&pci->devs_lock);
	return ret;
}

int gfa_rv_pci_io(struct gfa_rv_pci *pci, uint16_t port, void *data, unsigned int size, bool write)
{
	uint32_t val = 0;
	int ret;

	if (!pci || !data)
		return -EFAULT;
	if (size != 1 && size != 2 && size != 4)
		return -EINVAL;
	if (write)
		memcpy(&val, data, size);
	if (port >= CONF1_ADDR && port < CONF1_DATA) {
		/* dword only, as QEMU's i440FX: byte accesses here are other registers
		 * (0xcf9 reset control) the VMM may handle */
		if (port != CONF1_ADDR || size != 4)
			return -ENOENT;
		pthread_mutex_lock(&pci->cfg_lock);
		if (write)
			pci->cfg_addr = val & (CONF1_ENABLE | 0x00fffffcu);
		else
			val = pci->cfg_addr;
		pthread_mutex_unlock(&pci->cfg_lock);
		ret = 0;
	} else if (port >= CONF1_DATA && port < CONF1_DATA + 4) {
		ret = cfg_data(pci, port, &val, size, write);
	} else {
		ret = bar_io(pci, port, &val, size, write);
	}
	if (!ret && !write)
		memcpy(data, &val, size);
	return ret;
}

int gfa_rv_pci_slots(struct gfa_rv_pci *pci, struct gfa_rv_pci_slot *out, unsigned int max)
{
	int n = 0;

	if (!pci || (!out && max))
		return -EFAULT;
	pthread_mutex_lock(&pci->cfg_lock);
	for (unsigned int s = 1; s < GFA_RV_PCI_MAX_SLOTS; s++) {
		const struct rv_pci_fn *f = pci->fn[s];

		if (!f)
			continue;
		if ((unsigned int)n < max)
			out[n] = (struct gfa_rv_pci_slot){ .slot = s,
							   .pin = f->cfg[PCI_INTERRUPT_PIN],
							   .irq = f->cfg[PCI_INTERRUPT_LINE],
							   .vendor = f->id.vendor,
							   .device = f->id.device,
							   .io_base = fn_io_base(f),
							   .io_size = f->id.io_size };
		n++;
	}
	pthread_mutex_unlock(&pci->cfg_lock);
	return n;
}

int gfa_rv_pci_pause(struct gfa_rv_pci *pci)
{
	if (!pci)
		return -EFAULT;
	pthread_mutex_lock(&pci->gate_lock);
	pci->paused++;
	while (pci->active)
		pthread_cond_wait(&pci->gate_cond, &pci->gate_lock);
	pthread_mutex_unlock(&pci->gate_lock);
	return 0;
}

int gfa_rv_pci_resume(struct gfa_rv_pci *pci)
{
	int err = 0;

	if (!pci)
		return -EFAULT;
	pthread_mutex_lock(&pci->gate_lock);
	if (!pci->paused)
		err = -EINVAL;
	else if (!--pci->paused)
		pthread_cond_broadcast(&pci->gate_cond);
	pthread_mutex_unlock(&pci->gate_lock);
	return err;
}

void rv_pci_mem_begin(struct gfa_rv_pci *pci)
{
	pthread_mutex_lock(&pci->gate_lock);
	while (pci->paused)
		pthread_cond_wait(&pci->gate_cond, &pci->gate_lock);
	pci->active++;
	pthread_mutex_unlock(&pci->gate_lock);
}

void rv_pci_mem_end(struct gfa_rv_pci *pci)
{
	pthread_mutex_lock(&pci->gate_lock);
	if (!--pci->active && pci->paused)
		pthread_cond_broadcast(&pci->gate_cond);
	pthread_mutex_unlock(&pci->gate_lock);
}
