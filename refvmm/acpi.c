// SPDX-License-Identifier: MIT
/*
 * ACPI tables for a Linux guest, written into guest RAM as firmware would, and the PM1
 * registers they promise.  Why each table is there:
 *
 * - RSDP: where the kernel starts, at LINUX_ACPI_GPA in the 0xe0000-0xfffff area it
 *   scans; the PVH start info (rsdp_paddr) and boot_params (acpi_rsdp_addr) name it too.
 * - XSDT: the list of the FADT and the MADT (no 32-bit RSDT).
 * - MADT: the CPUs and interrupt controllers, which a kernel without CONFIG_X86_MPPARSE
 *   (Debian's cloud flavour) finds only here: one local APIC per vCPU (APIC id = vCPU
 *   id), the IOAPIC at GSI 0, LINT1 as NMI, and overrides for the ISA lines that are not
 *   edge triggered, the SCI and the PCI slots' INTA# pins: level, active low as the
 *   DSDT's _PRT makes them (KVM's IOAPIC ignores the polarity).  Other ISA IRQs are
 *   identity mapped, as KVM's default routing wires them (IRQ 0 too).
 * - FACS: what a FADT that is not hardware-reduced points at (the global lock).
 * - FADT: the DSDT and the fixed hardware.  Not hardware-reduced: then Linux drops the
 *   legacy PIC and the PIT and wants every ISA device (the UART) in the DSDT.  An SCI,
 *   PM1a event and control blocks that linux_acpi_pm_io() answers (SCI_EN set: ACPI mode
 *   from the start, no SMI command port), no PM timer or GPE block, the reset register on
 *   port 0xcf9; boot flags: no i8042, VGA, MSI or CMOS RTC.
 * - DSDT: the PCI host bridge (PNP0A03).  With ACPI on, Linux scans PCI only from the
 *   namespace's root bridges and routes INTx only by their _PRT: INTA# of slot s on GSI
 *   GFA_LINUX_PCI_IRQ(s); _CRS windows take every IO port but the configuration ports.
 *
 * The MP table stays (refvmm/linux_boot.c): with acpi=off a kernel still finds its CPUs.
 * See docs/decisions.md, entry 29.
 */
#include <errno.h>
#include <string.h>
#include "refvmm/linux.h"

#define ACPI_OEM_ID       "GFA   "
#define ACPI_OEM_TABLE_ID "REFVMM  "
#define ACPI_CREATOR_ID   "GFA "

struct acpi_rsdp {
	char signature[8]; /* "RSD PTR " */
	uint8_t checksum;  /* of the first 20 bytes */
	char oem_id[6];
	uint8_t revision; /* 2: has the XSDT */
	uint32_t rsdt_address, length;
	uint64_t xsdt_address;
	uint8_t ext_checksum, reserved[3]; /* of the whole structure */
} __attribute__((packed));

struct acpi_header {
	char signature[4];
	uint32_t length;
	uint8_t revision, checksum;
	char oem_id[6], oem_table_id[8];
	uint32_t oem_revision;
	char creator_id[4];
	uint32_t creator_revision;
} __attribute__((packed));

struct acpi_gas { /* generic address structure */
	uint8_t space_id, bit_width, bit_offset, access_width;
	uint64_t address;
} __attribute__((packed));

struct acpi_fadt { /* revision 6 */
	struct acpi_header h;
	uint32_t facs, dsdt;
	uint8_t reserved0, pm_profile;
	uint16_t sci_int;
	uint32_t smi_cmd;
	uint8_t acpi_enable, acpi_disable, s4bios_req, pstate_cnt;
	uint32_t pm1a_evt_blk, pm1b_evt_blk, pm1a_cnt_blk, pm1b_cnt_blk, pm2_cnt_blk;
	uint32_t pm_tmr_blk, gpe0_blk, gpe1_blk;
	uint8_t pm1_evt_len, pm1_cnt_len, pm2_cnt_len, pm_tmr_len, gpe0_blk_len;
	uint8_t gpe1_blk_len, gpe1_base, cst_cnt;
	uint16_t p_lvl2_lat, p_lvl3_lat, flush_size, flush_stride;
	uint8_t duty_offset, duty_width, day_alrm, mon_alrm, century;
	uint16_t iapc_boot_arch;
	uint8_t reserved1;
	uint32_t flags;
	struct acpi_gas reset_reg;
	uint8_t reset_value;
	uint16_t arm_boot_arch;
	uint8_t minor_revision;
	uint64_t x_facs, x_dsdt;
	struct acpi_gas x_blk[8]; /* X_PM1a_EVT_BLK..X_GPE1_BLK: the 32-bit ones serve */
	struct acpi_gas sleep_control_reg, sleep_status_reg;
	uint64_t hypervisor_vendor_id;
} __attribute__((packed));

#define FADT_WBINVD               (1u << 0)
#define FADT_PWR_BUTTON           (1u << 4) /* no fixed power button */
#define FADT_SLP_BUTTON           (1u << 5) /* no fixed sleep button */
#define FADT_RESET_REG_SUP        (1u << 10)
#define BOOT_VGA_NOT_PRESENT      (1u << 2) /* the i8042 bit (1) stays clear: none */
#define BOOT_MSI_NOT_SUPPORTED    (1u << 3)
#define BOOT_CMOS_RTC_NOT_PRESENT (1u << 5)
#define GAS_SYSTEM_IO             1
#define PM1_CNT_SCI_EN            1u

struct acpi_facs {
	char signature[4]; /* "FACS" */
	uint32_t length, hardware_signature, waking_vector, global_lock, flags;
	uint64_t x_waking_vector;
	uint8_t version, reserved[31]; /* (OSPM flags, then reserved) */
} __attribute__((packed));

struct acpi_madt {
	struct acpi_header h;
	uint32_t lapic_address, flags;
} __attribute__((packed));

struct madt_lapic {
	uint8_t type, length, uid, apic_id;
	uint32_t flags;
} __attribute__((packed));

struct madt_ioapic {
	uint8_t type, length, id, reserved;
	uint32_t address, gsi_base;
} __attribute__((packed));

struct madt_iso { /* interrupt source override */
	uint8_t type, length, bus, source;
	uint32_t gsi;
	uint16_t flags;
} __attribute__((packed));

struct madt_lapic_nmi {
	uint8_t type, length, uid;
	uint16_t flags;
	uint8_t lint;
} __attribute__((packed));

#define MADT_PCAT_COMPAT 1u /* there is an 8259 pair (KVM's PIC) */
enum { MADT_LAPIC = 0, MADT_IOAPIC = 1, MADT_ISO = 2, MADT_LAPIC_NMI = 4 };
#define MADT_ENABLED   1u
#define MADT_LEVEL_LOW 0xfu /* polarity active low (3), trigger level (3 << 2) */
#define MADT_ALL_CPUS  0xff

static uint8_t acpi_checksum(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint8_t sum = 0;

	while (len--)
		sum += *b++;
	return (uint8_t)-sum;
}

/* The header of a table of @len bytes at @p, its checksum last. */
static void acpi_seal(void *p, const char *sig, uint32_t len, uint8_t rev)
{
	struct acpi_header *h = p;

	*h = (struct acpi_header){ .length = len,
				   .revision = rev,
				   .oem_revision = 1,
				   .creator_revision = 1 };
	memcpy(h->signature, sig, 4);
	memcpy(h->oem_id, ACPI_OEM_ID, 6);
	memcpy(h->oem_table_id, ACPI_OEM_TABLE_ID, 8);
	memcpy(h->creator_id, ACPI_CREATOR_ID, 4);
	h->checksum = acpi_checksum(p, len);
}

static uint8_t *put(uint8_t *p, const void *src, size_t len)
{
	memcpy(p, src, len);
	return p + len;
}

static uint32_t write_madt(uint8_t *t, unsigned int vcpus)
{
	const uint8_t isos[] = { LINUX_ACPI_SCI_IRQ, GFA_LINUX_PCI_IRQ(0), GFA_LINUX_PCI_IRQ(1),
				 GFA_LINUX_PCI_IRQ(2), GFA_LINUX_PCI_IRQ(3) };
	const struct madt_ioapic io = { MADT_IOAPIC, sizeof(io),        (uint8_t)vcpus,
					0,           LINUX_IOAPIC_ADDR, 0 };
	const struct madt_lapic_nmi nmi = { MADT_LAPIC_NMI, sizeof(nmi), MADT_ALL_CPUS, 0, 1 };
	struct acpi_madt *m = (struct acpi_madt *)t;
	uint8_t *p = t + sizeof(*m);

	m->lapic_address = LINUX_LAPIC_ADDR;
	m->flags = MADT_PCAT_COMPAT;
	for (unsigned int i = 0; i < vcpus; i++) {
		struct madt_lapic l = { MADT_LAPIC, sizeof(l), (uint8_t)i, (uint8_t)i,
					MADT_ENABLED };

		p = put(p, &l, sizeof(l));
	}
	p = put(p, &io, sizeof(io));
	for (size_t i = 0; i < sizeof(isos); i++) {
		struct madt_iso o = { MADT_ISO, sizeof(o), 0, isos[i], isos[i], MADT_LEVEL_LOW };

		p = put(p, &o, sizeof(o));
	}
	p = put(p, &nmi, sizeof(nmi));
	acpi_seal(t, "APIC", (uint32_t)(p - t), 5);
	return (uint32_t)(p - t);
}

/* The FACS, 64-byte aligned: a global lock and waking vector nothing uses, no checksum. */
static uint32_t write_facs(uint8_t *t)
{
	struct acpi_facs *f = (struct acpi_facs *)t;

	memcpy(f->signature, "FACS", 4);
	f->length = sizeof(*f);
	f->version = 2;
	return sizeof(*f);
}

static uint32_t write_fadt(uint8_t *t, uint64_t facs_gpa, uint64_t dsdt_gpa)
{
	struct acpi_fadt *f = (struct acpi_fadt *)t;

	f->x_facs = facs_gpa; /* only one of the two: the kernel maps both */
	f->dsdt = (uint32_t)dsdt_gpa;
	f->x_dsdt = dsdt_gpa;
	f->sci_int = LINUX_ACPI_SCI_IRQ;
	f->pm1a_evt_blk = LINUX_PM1_EVT_PORT;
	f->pm1_evt_len = 4;
	f->pm1a_cnt_blk = LINUX_PM1_CNT_PORT;
	f->pm1_cnt_len = 2;
	f->iapc_boot_arch = BOOT_VGA_NOT_PRESENT | BOOT_MSI_NOT_SUPPORTED |
			    BOOT_CMOS_RTC_NOT_PRESENT;
	f->flags = FADT_WBINVD | FADT_PWR_BUTTON | FADT_SLP_BUTTON | FADT_RESET_REG_SUP;
	f->reset_reg = (struct acpi_gas){ GAS_SYSTEM_IO, 8, 0, 1, LINUX_RESET_PORT };
	f->reset_value = LINUX_RESET_VALUE;
	f->minor_revision = 3;
	acpi_seal(t, "FACP", sizeof(*f), 6);
	return sizeof(*f);
}

/* ---- DSDT: AML for one PCI host bridge ---- */

enum {
	AML_ZERO = 0x00,
	AML_NAME = 0x08,
	AML_BYTE = 0x0a,
	AML_DWORD = 0x0c,
	AML_SCOPE = 0x10,
	AML_BUFFER = 0x11,
	AML_PACKAGE = 0x12,
	AML_EXT = 0x5b,
	AML_ROOT = 0x5c,
	AML_DEVICE = 0x82,
};

/* Start of a PkgLength-framed object: always the 2-byte encoding, filled by aml_end(). */
static uint8_t *aml_begin(uint8_t **p)
{
	uint8_t *len = *p;

	*p += 2;
	return len;
}

static void aml_end(uint8_t *len, const uint8_t *p)
{
	size_t n = (size_t)(p - len); /* the PkgLength counts itself */

	len[0] = (uint8_t)(0x40 | (n & 0xf));
	len[1] = (uint8_t)(n >> 4);
}

static uint8_t *aml_dword(uint8_t *p, uint32_t v)
{
	*p++ = AML_DWORD;
	return put(p, &v, 4);
}

static uint8_t *aml_name(uint8_t *p, const char *seg)
{
	*p++ = AML_NAME;
	return put(p, seg, 4);
}

/* Word address space descriptor: @type 1 IO (entire range), 2 bus numbers. */
static uint8_t *res_word(uint8_t *p, uint8_t type, uint16_t min, uint16_t max)
{
	const uint16_t w[5] = { 0, min, max, 0, (uint16_t)(max - min + 1) };
	const uint8_t hdr[6] = {
		0x88, 13, 0, type, 0x0c /* fixed min, max; producer */, type == 1 ? 3 : 0
	};

	p = put(p, hdr, sizeof(hdr));
	return put(p, w, sizeof(w));
}

static uint8_t *aml_crs(uint8_t *p)
{
	/* IO port descriptor: 16-bit decode, 0xcf8-0xcff */
	static const uint8_t conf[] = { 0x47, 1, 0xf8, 0x0c, 0xf8, 0x0c, 1, 8 };
	static const uint8_t end_tag[] = { 0x79, 0 };
	uint8_t *len, *size;

	p = aml_name(p, "_CRS");
	*p++ = AML_BUFFER;
	len = aml_begin(&p);
	size = p;
	p = aml_dword(p, 0); /* the buffer size, known at the end */
	p = res_word(p, 2, 0, 0);
	p = put(p, conf, sizeof(conf));
	p = res_word(p, 1, 0, 0xcf7);
	p = res_word(p, 1, 0xd00, 0xffff);
	p = put(p, end_tag, sizeof(end_tag));
	put(size + 1, &(uint32_t){ (uint32_t)(p - size - 5) }, 4);
	aml_end(len, p);
	return p;
}

static uint8_t *aml_prt(uint8_t *p)
{
	uint8_t *len, *e;

	p = aml_name(p, "_PRT");
	*p++ = AML_PACKAGE;
	len = aml_begin(&p);
	*p++ = GFA_LINUX_PCI_SLOTS;
	for (unsigned int s = 0; s < GFA_LINUX_PCI_SLOTS; s++) {
		*p++ = AML_PACKAGE;
		e = aml_begin(&p);
		*p++ = 4;
		p = aml_dword(p, s << 16 | 0xffff); /* device s, any function */
		*p++ = AML_ZERO;                    /* INTA# */
		*p++ = AML_ZERO;                    /* no link device: a GSI */
		*p++ = AML_BYTE;
		*p++ = (uint8_t)GFA_LINUX_PCI_IRQ(s);
		aml_end(e, p);
	}
	aml_end(len, p);
	return p;
}

static uint32_t write_dsdt(uint8_t *t)
{
	uint8_t *p = t + sizeof(struct acpi_header), *scope, *dev;

	*p++ = AML_SCOPE;
	scope = aml_begin(&p);
	*p++ = AML_ROOT;
	p = put(p, "_SB_", 4);
	*p++ = AML_EXT;
	*p++ = AML_DEVICE;
	dev = aml_begin(&p);
	p = put(p, "PCI0", 4);
	p = aml_name(p, "_HID");
	p = aml_dword(p, 0x030ad041); /* EISA id PNP0A03 */
	p = aml_name(p, "_UID");
	*p++ = AML_ZERO;
	p = aml_crs(p);
	p = aml_prt(p);
	aml_end(dev, p);
	aml_end(scope, p);
	acpi_seal(t, "DSDT", (uint32_t)(p - t), 2);
	return (uint32_t)(p - t);
}

/* ---- RSDP and XSDT: the whole set ---- */
/* Bytes the tables take for @vcpus vCPUs, at most: an upper bound for the checks. */
#define ACPI_SIZE_MAX(vcpus) (0x480 + (vcpus) * sizeof(struct madt_lapic))

#define ALIGN16(n) (((n) + 15u) & ~15u)

int linux_acpi_write(void *area, uint64_t gpa, size_t len, unsigned int vcpus)
{
	uint8_t *base = area, *p = base + 64; /* the tables 16-byte aligned after it */
	struct acpi_rsdp *rsdp = area;
	uint64_t facs, dsdt, xsdt[2];

	if (!vcpus || vcpus > GFA_LINUX_MAX_VCPUS || len < ACPI_SIZE_MAX(vcpus))
		return -E2BIG;
	memset(area, 0, ACPI_SIZE_MAX(vcpus));
	facs = gpa + (uint64_t)(p - base);
	p += write_facs(p);
	dsdt = gpa + (uint64_t)(p - base);
	p += ALIGN16(write_dsdt(p));
	xsdt[0] = gpa + (uint64_t)(p - base);
	p += ALIGN16(write_fadt(p, facs, dsdt));
	xsdt[1] = gpa + (uint64_t)(p - base);
	p += ALIGN16(write_madt(p, vcpus));
	memcpy(p + sizeof(struct acpi_header), xsdt, sizeof(xsdt));
	acpi_seal(p, "XSDT", sizeof(struct acpi_header) + sizeof(xsdt), 1);

	memcpy(rsdp->signature, "RSD PTR ", 8);
	memcpy(rsdp->oem_id, ACPI_OEM_ID, 6);
	rsdp->revision = 2;
	rsdp->length = sizeof(*rsdp);
	rsdp->xsdt_address = gpa + (uint64_t)(p - base);
	rsdp->checksum = acpi_checksum(rsdp, 20);
	rsdp->ext_checksum = acpi_checksum(rsdp, sizeof(*rsdp));
	return (int)(p - base + sizeof(struct acpi_header) + sizeof(xsdt));
}

/* ---- PM1 registers ---- */

bool linux_acpi_pm_io(struct linux_acpi_pm *pm, uint16_t port, uint8_t *data, unsigned int size,
		      bool out)
{
	/* status (always clear: nothing raises the SCI), enable, control */
	uint16_t regs[3] = { 0, pm->en, (uint16_t)(pm->cnt | PM1_CNT_SCI_EN) };
	unsigned int off = port - LINUX_PM1_EVT_PORT;

	if (port < LINUX_PM1_EVT_PORT || off + size > sizeof(regs))
		return false;
	if (!out) {
		memcpy(data, (uint8_t *)regs + off, size);
		return true;
	}
	memcpy((uint8_t *)regs + off, data, size); /* a status write clears nothing set */
	pm->en = regs[1];
	pm->cnt = regs[2];
	return true;
}
