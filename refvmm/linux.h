/* SPDX-License-Identifier: MIT */
/* Private to refvmm/linux*.c and refvmm/uart.c: booting Linux on a gfa guest. */
#ifndef GFA_REFVMM_LINUX_H
#define GFA_REFVMM_LINUX_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <gfa/refvmm.h>

/* Guest-physical places of the boot information, all below 1 MiB. */
#define LINUX_START_INFO_GPA 0x6000ULL /* PVH hvm_start_info + modules + memmap */
#define LINUX_ZERO_PAGE_GPA  0x7000ULL /* bzImage boot_params */
#define LINUX_CMDLINE_GPA    0x20000ULL
#define LINUX_CMDLINE_MAX    4096u
#define LINUX_BOOT_AREA_GPA  0x30000ULL /* bzImage: GDT and identity page tables */
#define LINUX_EBDA_GPA       0x9fc00ULL /* MP table: the last KiB of base memory */
#define LINUX_ACPI_GPA       0xe0000ULL /* RSDP, then the ACPI tables */
#define LINUX_ACPI_SIZE      0x1000u
#define LINUX_HIGH_RAM_GPA   0x100000ULL
#define LINUX_BZIMAGE_GPA    0x100000ULL /* protected-mode kernel of a bzImage */

#define LINUX_LAPIC_ADDR  0xfee00000u
#define LINUX_IOAPIC_ADDR 0xfec00000u
#define LINUX_RESET_PORT  0xcf9
#define LINUX_RESET_CPU   0x04
#define LINUX_RESET_VALUE 0x06 /* what the FADT's reset register says to write */

/* What the loader leaves for the vCPU set-up. */
struct linux_boot {
	bool pvh; /* 32-bit PVH entry (ebx = start info), else 64-bit
				 * bzImage entry (rsi = boot_params) */
	uint64_t entry;
	uint64_t info_gpa;
	uint64_t kernel_end; /* first GPA above the loaded kernel */
	uint64_t initrd_gpa, initrd_size;
	unsigned int nr_e820;
	struct gfa_linux_e820 e820[GFA_LINUX_E820_MAX];
};

/*
 * Load the kernel, initramfs and command line into guest RAM [@ram, @ram + @size) and
 * write the boot information (PVH start info or boot_params, e820), the MP table and
 * the ACPI tables for @vcpus vCPUs.  Returns 0 or a negative errno (see gfa_linux_vm_create).
 */
int linux_boot_load(void *ram, uint64_t size, const char *kernel, const char *initrd,
		    const char *cmdline, unsigned int vcpus, struct linux_boot *out);

/*
 * ACPI (refvmm/acpi.c): an SCI line nothing else uses, and the PM1 event (status,
 * enable) and control registers the FADT points at.
 */
#define LINUX_ACPI_SCI_IRQ 7
#define LINUX_PM1_EVT_PORT 0x600
#define LINUX_PM1_CNT_PORT 0x604

struct linux_acpi_pm {
	uint16_t en, cnt; /* what the guest wrote; status reads 0 */
};

/*
 * Write the RSDP at @area (guest-physical @gpa) and the XSDT, FADT, MADT (@vcpus local
 * APICs) and DSDT after it, in at most @len bytes.  Returns the bytes used, or -E2BIG
 * (@len too small, or @vcpus 0 or above GFA_LINUX_MAX_VCPUS).
 */
int linux_acpi_write(void *area, uint64_t gpa, size_t len, unsigned int vcpus);
/* A port access for the PM1 registers: false if @port is not theirs (caller locks). */
bool linux_acpi_pm_io(struct linux_acpi_pm *pm, uint16_t port, uint8_t *data, unsigned int size,
		      bool out);

/* A 16550 UART, transmit side plus the registers Linux's 8250 driver probes. */
struct linux_uart {
	uint8_t ier, lcr, mcr, scr, dll, dlm, fcr;
	bool thri_pending; /* transmitter-empty interrupt waiting for an IIR read */
	int irq_level;     /* last level set on the IRQ line */
	unsigned int irq;
	void (*irq_fn)(void *ctx, unsigned int irq, int level);
	void (*out_fn)(void *ctx, uint8_t byte);
	void *ctx;
};
#define LINUX_UART_BASE 0x3f8
#define LINUX_UART_IRQ  4

void linux_uart_init(struct linux_uart *u, unsigned int irq,
		     void (*irq_fn)(void *, unsigned int, int), void (*out_fn)(void *, uint8_t),
		     void *ctx);
/* Register access at @off (0..7) of the UART; a read fills *@val. */
void linux_uart_io(struct linux_uart *u, unsigned int off, bool write, uint8_t *val);
#endif
