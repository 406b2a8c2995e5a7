/* SPDX-License-Identifier: MIT */
/* The PCI bus's calls for the devices on it (refvmm/pci.c, refvmm/virtio*.c).  Not
 * installed. */
#ifndef GFA_REFVMM_PCI_H
#define GFA_REFVMM_PCI_H
#include <gfa/refvmm.h>

/* PCI configuration space offsets and bits used here (the kernel's pci_regs.h names). */
#define PCI_VENDOR_ID             0x00
#define PCI_DEVICE_ID             0x02
#define PCI_COMMAND               0x04
#define PCI_COMMAND_IO            0x1
#define PCI_COMMAND_MEMORY        0x2
#define PCI_COMMAND_MASTER        0x4
#define PCI_COMMAND_INTX_DISABLE  0x400
#define PCI_STATUS                0x06
#define PCI_STATUS_INTERRUPT      0x08
#define PCI_REVISION_ID           0x08
#define PCI_CLASS_PROG            0x09
#define PCI_CACHE_LINE_SIZE       0x0c
#define PCI_LATENCY_TIMER         0x0d
#define PCI_HEADER_TYPE           0x0e
#define PCI_BASE_ADDRESS_0        0x10
#define PCI_BASE_ADDRESS_SPACE_IO 0x1
#define PCI_SUBSYSTEM_VENDOR_ID   0x2c
#define PCI_SUBSYSTEM_ID          0x2e
#define PCI_INTERRUPT_LINE        0x3c
#define PCI_INTERRUPT_PIN         0x3d

/* What a device looks like in configuration space. */
struct rv_pci_id {
	uint16_t vendor, device, subsys_vendor, subsys;
	uint8_t revision;
	uint32_t class_code; /* base class, subclass, prog-if */
	uint16_t io_size;    /* BAR0 (IO), a power of two 4..GFA_RV_PCI_IO_STRIDE */
	unsigned int irq;    /* INTA# routed to this line */
	gfa_rv_irq_fn irq_fn;
	void *irq_ctx;
};

/* An access to the device's IO BAR at offset off (size 1, 2 or 4; a read fills *val).
 * From vCPU threads: short locks only. */
typedef void (*rv_pci_bar_fn)(void *ctx, unsigned int off, uint32_t *val, unsigned int size,
			      bool write);

/* Plug a device into slot (1..31; 0: the first free one): the slot, or -ENOSPC (no free
 * slot), -EBUSY (that slot is taken), -EFAULT, -EINVAL (io_size, slot). */
int rv_pci_add(struct gfa_rv_pci *pci, unsigned int slot, const struct rv_pci_id *id,
	       rv_pci_bar_fn bar, void *ctx);
/* Unplug; returns once no vCPU is inside the device's BAR handler. */
void rv_pci_remove(struct gfa_rv_pci *pci, int slot);
/* The device's INTx wire: the line follows it unless the driver set INTX_DISABLE. */
void rv_pci_set_intx(struct gfa_rv_pci *pci, int slot, bool level);

/* A device thread's accesses to guest RAM go between these (gfa_rv_pci_pause waits
 * for them).  Never hold a lock a vCPU's IO handler takes while in begin. */
void rv_pci_mem_begin(struct gfa_rv_pci *pci);
void rv_pci_mem_end(struct gfa_rv_pci *pci);
#endif
