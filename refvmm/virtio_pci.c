// SPDX-License-Identifier: MIT
/*
 * The legacy (transitional) virtio-pci transport: the register block at the start of an
 * IO BAR (features, queue select, size, address and notify, status, ISR) followed by the
 * device's config.  Linux's virtio_pci drives it through its legacy path: a transitional
 * device id without virtio capabilities, revision 0.  No MSI-X: every interrupt is the
 * INTx line, level-triggered, high while ISR is non-zero; reading ISR clears it and
 * lowers the line.
 */
#include <errno.h>
#include <string.h>
#include "refvmm/virtio.h"

#define VIRTIO_PCI_VENDOR 0x1af4

void rv_virtio_interrupt(struct rv_virtio *v, uint8_t isr_bits)
{
	/* a config change before the driver is ready would raise a line nobody lowers
	 * (the driver reads the config when it gets ready) */
	if (!(v->status & VIRTIO_CONFIG_S_DRIVER_OK))
		isr_bits &= (uint8_t)~VIRTIO_PCI_ISR_CONFIG;
	if (!isr_bits)
		return;
	v->isr |= isr_bits;
	rv_pci_set_intx(v->cfg.pci, v->slot, v->isr != 0);
}

void rv_virtio_error(struct rv_virtio *v)
{
	if (!(v->status & VIRTIO_CONFIG_S_NEEDS_RESET))
		v->needs_reset++;
	v->status |= VIRTIO_CONFIG_S_NEEDS_RESET;
	rv_virtio_interrupt(v, VIRTIO_PCI_ISR_CONFIG);
}

static void virtio_reset(struct rv_virtio *v)
{
	v->status = 0;
	v->guest_features = 0;
	v->queue_sel = 0;
	for (unsigned int q = 0; q < v->cfg.nvqs; q++)
		rv_vq_set_pfn(&v->vq[q], &v->cfg.mem, 0);
	v->isr = 0;
	rv_pci_set_intx(v->cfg.pci, v->slot, false);
	v->gen++;
	v->cfg.ops->reset(v->cfg.ctx);
}

static void queue_pfn_write(struct rv_virtio *v, uint32_t pfn)
{
	if (v->queue_sel >= v->cfg.nvqs) {
		v->err_queue_index++;
		rv_virtio_error(v);
	} else if (rv_vq_set_pfn(&v->vq[v->queue_sel], &v->cfg.mem, pfn)) {
		v->err_ring++;
		rv_virtio_error(v);
	}
}

static void queue_notify(struct rv_virtio *v, uint32_t q)
{
	if (q >= v->cfg.nvqs) {
		v->err_queue_index++;
		rv_virtio_error(v);
	} else if (v->vq[q].pfn) {
		v->cfg.ops->notify(v->cfg.ctx, q);
	}
}

static uint32_t reg_read(struct rv_virtio *v, unsigned int off)
{
	const struct rv_vq *vq = v->queue_sel < v->cfg.nvqs ? &v->vq[v->queue_sel] : NULL;
	uint32_t val;

	switch (off) {
	case VIRTIO_PCI_HOST_FEATURES:
		return v->cfg.features;
	case VIRTIO_PCI_GUEST_FEATURES:
		return v->guest_features;
	case VIRTIO_PCI_QUEUE_PFN:
		return vq ? vq->pfn : 0;
	case VIRTIO_PCI_QUEUE_NUM:
		return vq ? vq->num : 0; /* 0: no such queue (the driver probes) */
	case VIRTIO_PCI_QUEUE_SEL:
		return v->queue_sel;
	case VIRTIO_PCI_STATUS:
		return v->status;
	case VIRTIO_PCI_ISR:
		val = v->isr;
		v->isr = 0;
		rv_pci_set_intx(v->cfg.pci, v->slot, false);
		return val;
	default:
		return 0;
	}
}

static void reg_write(struct rv_virtio *v, unsigned int off, uint32_t val)
{
	switch (off) {
	case VIRTIO_PCI_GUEST_FEATURES:
		v->guest_features = val & v->cfg.features;
		break;
	case VIRTIO_PCI_QUEUE_PFN:
		queue_pfn_write(v, val);
		break;
	case VIRTIO_PCI_QUEUE_SEL:
		v->queue_sel = (uint16_t)val;
		break;
	case VIRTIO_PCI_QUEUE_NOTIFY:
		queue_notify(v, val & 0xffff);
		break;
	case VIRTIO_PCI_STATUS:
		if (!(val & 0xff))
			virtio_reset(v);
		else
			v->status = (uint8_t)val;
		break;
	default: /* read-only registers */
		break;
	}
}

/* The IO BAR, from vCPU threads. */
static void virtio_bar(void *ctx, unsigned int off, uint32_t *val, unsigned int size, bool write)
{
	struct rv_virtio *v = ctx;

	pthread_mutex_lock(&v->lock);
	if (off >= VIRTIO_PCI_CONFIG) {
		unsigned int c = off - VIRTIO_PCI_CONFIG;

		if (c + size <= v->cfg.config_len)
			v->cfg.ops->config(v->cfg.ctx, c, val, size, write);
		else if (!write)
			*val = 0;
	} else if (write) {
		reg_write(v, off, *val);
	} else {
		*val = reg_read(v, off);
		if (size < 4)
			*val &= (1u << (8 * size)) - 1;
	}
	pthread_mutex_unlock(&v->lock);
}

int rv_virtio_init(struct rv_virtio *v, const struct rv_virtio_config *cfg)
{
	struct rv_pci_id id = {
		.vendor = VIRTIO_PCI_VENDOR,
		.device = cfg->device_id,
		.subsys_vendor = VIRTIO_PCI_VENDOR,
		.subsys = cfg->subsys,
		.revision = 0,
		.class_code = cfg->class_code,
		.io_size = 0x20,
		.irq = cfg->irq,
		.irq_fn = cfg->irq_fn,
		.irq_ctx = cfg->irq_ctx,
	};
	pthread_mutexattr_t a;
	int slot;

	if (cfg->nvqs > RV_VQ_MAX || !cfg->queue_num || (cfg->queue_num & (cfg->queue_num - 1)))
		return -EINVAL;
	while (id.io_size < VIRTIO_PCI_CONFIG + cfg->config_len)
		id.io_size *= 2;
	memset(v, 0, sizeof(*v));
	v->cfg = *cfg;
	for (unsigned int q = 0; q < cfg->nvqs; q++)
		v->vq[q].num = cfg->queue_num;
	/* recursive: a device's reset or notify op may raise an error on this device */
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&v->lock, &a);
	pthread_mutexattr_destroy(&a);
	slot = rv_pci_add(cfg->pci, cfg->slot, &id, virtio_bar, v);
	if (slot < 0) {
		pthread_mutex_destroy(&v->lock);
		return slot;
	}
	v->slot = slot;
	return 0;
}

void rv_virtio_exit(struct rv_virtio *v)
{
	rv_pci_remove(v->cfg.pci, v->slot);
	pthread_mutex_destroy(&v->lock);
}
