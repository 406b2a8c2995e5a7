/* SPDX-License-Identifier: MIT */
/*
 * Split virtqueues and the legacy virtio-pci transport, for the devices in refvmm/
 * (refvmm/virtqueue.c, refvmm/virtio_pci.c, refvmm/virtio_balloon.c).  Not installed.
 */
#ifndef GFA_REFVMM_VIRTIO_H
#define GFA_REFVMM_VIRTIO_H
#include <pthread.h>
#include <gfa/refvmm.h>
#include "refvmm/pci.h"

/* Virtio's names (include/uapi/linux/virtio_*.h). */
#define VIRTIO_CONFIG_S_ACKNOWLEDGE 1
#define VIRTIO_CONFIG_S_DRIVER      2
#define VIRTIO_CONFIG_S_DRIVER_OK   4
#define VIRTIO_CONFIG_S_FEATURES_OK 8
#define VIRTIO_CONFIG_S_NEEDS_RESET 0x40
#define VIRTIO_CONFIG_S_FAILED      0x80
#define VRING_DESC_F_NEXT           1
#define VRING_DESC_F_WRITE          2
#define VRING_DESC_F_INDIRECT       4
#define VRING_AVAIL_F_NO_INTERRUPT  1
#define VIRTIO_PCI_VRING_ALIGN      4096
#define VIRTIO_PCI_QUEUE_ADDR_SHIFT 12
#define VIRTIO_PCI_ISR_QUEUE        1
#define VIRTIO_PCI_ISR_CONFIG       2
/* legacy IO BAR layout without MSI-X */
#define VIRTIO_PCI_HOST_FEATURES    0x00
#define VIRTIO_PCI_GUEST_FEATURES   0x04
#define VIRTIO_PCI_QUEUE_PFN        0x08
#define VIRTIO_PCI_QUEUE_NUM        0x0c
#define VIRTIO_PCI_QUEUE_SEL        0x0e
#define VIRTIO_PCI_QUEUE_NOTIFY     0x10
#define VIRTIO_PCI_STATUS           0x12
#define VIRTIO_PCI_ISR              0x13
#define VIRTIO_PCI_CONFIG           0x14

#define RV_VQ_MAX 8

/* Guest RAM as a device sees it: gpa 0 at hva, size bytes. */
struct rv_mem {
	uint8_t *hva;
	uint64_t size;
};

/* Is [gpa, gpa + len) inside RAM (no wrap)? */
static inline bool rv_mem_ok(const struct rv_mem *m, uint64_t gpa, uint64_t len)
{
	return gpa <= m->size && len <= m->size - gpa;
}

/* One split virtqueue in the legacy layout (desc, avail, then used on the next 4 KiB). */
struct rv_vq {
	uint16_t num;               /* entries (the device's choice, a power of two) */
	uint32_t pfn;               /* 0: not set up */
	uint64_t desc, avail, used; /* gpas */
	uint16_t last_avail, used_idx;
	bool broken; /* a ring error: nothing more until reset */
};

/* What a ring error was (the balloon counts each). */
enum rv_vq_err {
	RV_VQ_OK = 0,
	RV_VQ_ERR_RING,  /* ring not inside RAM */
	RV_VQ_ERR_AVAIL, /* avail index ahead by more than num */
	RV_VQ_ERR_DESC,  /* descriptor index or buffer outside, indirect */
	RV_VQ_ERR_LOOP,  /* chain longer than num */
};

#define RV_VQ_MAX_SEGS 128 /* the longest chain a 128-entry queue holds */

struct rv_vq_seg {
	uint64_t gpa;
	uint32_t len;
	bool write; /* device-writable (the driver's inbuf) */
};

/* One buffer (descriptor chain) taken off the avail ring. */
struct rv_vq_elem {
	uint16_t head;
	unsigned int n;
	struct rv_vq_seg seg[RV_VQ_MAX_SEGS];
	uint64_t read_len, write_len;
	bool mixed; /* readable and writable segments both */
};

/* Set the queue up at pfn (0 disables it).  RV_VQ_OK or RV_VQ_ERR_RING (left off). */
enum rv_vq_err rv_vq_set_pfn(struct rv_vq *vq, const struct rv_mem *m, uint32_t pfn);
/* Take the next buffer: 1 taken, 0 none, -(enum rv_vq_err) on a ring error (the queue
 * is then broken).  Reads guest RAM: between rv_pci_mem_begin/_end. */
int rv_vq_pop(struct rv_vq *vq, const struct rv_mem *m, struct rv_vq_elem *e);
/* Hand buffer head back with len bytes written; true if the driver wants an interrupt. */
bool rv_vq_push(struct rv_vq *vq, const struct rv_mem *m, uint16_t head, uint32_t len);
/* Copy up to len readable bytes of e into buf; returns bytes copied. */
size_t rv_vq_read(const struct rv_mem *m, const struct rv_vq_elem *e, void *buf, size_t len);

/* ---- the legacy virtio-pci transport ---- */

struct rv_virtio;

/* A device's side of the transport.  All with the transport's lock held (short work:
 * they run on vCPU threads). */
struct rv_virtio_ops {
	/* device config read/write at off (bytes of the config area) */
	void (*config)(void *ctx, unsigned int off, uint32_t *val, unsigned int size, bool write);
	/* the driver kicked queue q (valid and set up) */
	void (*notify)(void *ctx, unsigned int q);
	/* the driver reset the device: forget every buffer taken */
	void (*reset)(void *ctx);
};

struct rv_virtio_config {
	struct gfa_rv_pci *pci;
	struct rv_mem mem;
	uint16_t device_id, subsys; /* transitional PCI device id, virtio device type */
	uint32_t class_code;
	uint32_t features; /* offered */
	unsigned int nvqs;
	uint16_t queue_num;
	uint16_t config_len;
	unsigned int slot; /* 0: the first free one */
	unsigned int irq;
	gfa_rv_irq_fn irq_fn;
	void *irq_ctx;
	const struct rv_virtio_ops *ops;
	void *ctx;
};

struct rv_virtio {
	struct rv_virtio_config cfg;
	int slot;
	pthread_mutex_t lock; /* registers, queues, ISR */
	uint32_t guest_features;
	uint8_t status, isr;
	uint16_t queue_sel;
	uint64_t gen; /* bumped by every reset: work of an older one is void */
	struct rv_vq vq[RV_VQ_MAX];
	uint64_t err_ring, err_queue_index, needs_reset;
};

/* Plug into cfg->pci: 0 or -errno. */
int rv_virtio_init(struct rv_virtio *v, const struct rv_virtio_config *cfg);
void rv_virtio_exit(struct rv_virtio *v);
/* With v->lock held: add ISR bits (raising the line). */
void rv_virtio_interrupt(struct rv_virtio *v, uint8_t isr_bits);
/* With v->lock held: a ring or driver error: NEEDS_RESET and a config interrupt. */
void rv_virtio_error(struct rv_virtio *v);
#endif
