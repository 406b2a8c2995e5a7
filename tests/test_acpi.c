// SPDX-License-Identifier: MIT
/*
 * The ACPI tables a Linux guest gets (refvmm/acpi.c), built into a buffer and read back
 * as a kernel would: from the RSDP through the XSDT to the FADT, FACS, DSDT and MADT,
 * each signature, length and checksum, one enabled local APIC per vCPU, the IOAPIC
 * after the CPUs' ids, the level-triggered ISA lines and a DSDT whose AML frames add up.
 * Suite "acpi" needs no KVM; that a kernel reads them is suite linux_boot's (its 2-vCPU
 * guest must see 2 CPUs, which a kernel without the MP table parser finds only here).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include "refvmm/linux.h"

static uint8_t at_buf[LINUX_ACPI_SIZE];

static uint8_t at_sum(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint8_t s = 0;

	while (len--)
		s += *b++;
	return s;
}

static uint32_t at_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t at_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* The table at guest address @gpa: inside the buffer, signature @sig, checksum 0. */
static const uint8_t *at_table(uint64_t gpa, const char *sig)
{
	const uint8_t *t;
	uint32_t len;

	cr_assert(gpa >= LINUX_ACPI_GPA && gpa + 36 <= LINUX_ACPI_GPA + LINUX_ACPI_SIZE,
		  "%s at %#llx, outside the ACPI area", sig, (unsigned long long)gpa);
	t = at_buf + (gpa - LINUX_ACPI_GPA);
	len = at_u32(t + 4);
	cr_assert_eq(memcmp(t, sig, 4), 0, "expected %s, found %.4s", sig, (const char *)t);
	cr_assert(len >= 36 && gpa + len <= LINUX_ACPI_GPA + LINUX_ACPI_SIZE, "%s length %u", sig,
		  len);
	cr_assert_eq(at_sum(t, len), 0, "%s checksum", sig);
	return t;
}

/* RSDP -> XSDT: the tables it lists, by signature. */
static void at_root(const uint8_t **fadt, const uint8_t **madt)
{
	const uint8_t *xsdt;
	uint32_t n;

	cr_assert_eq(memcmp(at_buf, "RSD PTR ", 8), 0);
	cr_assert_eq(at_sum(at_buf, 20), 0, "RSDP checksum");
	cr_assert_eq(at_buf[15], 2, "RSDP revision");
	cr_assert_eq(at_u32(at_buf + 20), 36, "RSDP length");
	cr_assert_eq(at_sum(at_buf, 36), 0, "RSDP extended checksum");
	xsdt = at_table(at_u64(at_buf + 24), "XSDT");
	n = (at_u32(xsdt + 4) - 36) / 8;
	cr_assert_eq(n, 2, "XSDT entries");
	*fadt = at_table(at_u64(xsdt + 36), "FACP");
	*madt = at_table(at_u64(xsdt + 44), "APIC");
}

/* MADT: @vcpus enabled local APICs with ids 0.., one IOAPIC, every ISO level triggered. */
static void at_check_madt(const uint8_t *m, unsigned int vcpus)
{
	uint32_t len = at_u32(m + 4), off = 44;
	unsigned int lapics = 0, ioapics = 0, isos = 0;

	cr_assert_eq(at_u32(m + 36), LINUX_LAPIC_ADDR);
	while (off < len) {
		const uint8_t *e = m + off;

		cr_assert(e[1] >= 2 && off + e[1] <= len, "MADT entry at %u overruns", off);
		if (e[0] == 0) {
			cr_assert_eq(e[1], 8);
			cr_assert_eq(e[3], lapics, "local APIC %u has id %u", lapics, e[3]);
			cr_assert_eq(at_u32(e + 4) & 1, 1, "local APIC %u not enabled", lapics);
			lapics++;
		} else if (e[0] == 1) {
			cr_assert_eq(e[1], 12);
			cr_assert_eq(e[2], vcpus, "IOAPIC id %u", e[2]);
			cr_assert_eq(at_u32(e + 4), LINUX_IOAPIC_ADDR);
			cr_assert_eq(at_u32(e + 8), 0, "IOAPIC GSI base");
			ioapics++;
		} else if (e[0] == 2) {
			cr_assert_eq(e[1], 10);
			cr_assert_eq(at_u32(e + 4), e[3], "ISA IRQ %u not on its own pin", e[3]);
			cr_assert_eq((e[8] >> 2) & 3, 3, "ISA IRQ %u override not level", e[3]);
			isos++;
		}
		off += e[1];
	}
	cr_assert_eq(off, len);
	cr_assert_eq(lapics, vcpus, "%u local APICs for %u vCPUs", lapics, vcpus);
	cr_assert_eq(ioapics, 1);
	cr_assert_eq(isos, 5, "SCI and four PCI lines");
}

/* An AML PkgLength at @p: its value, and its own size in @n. */
static uint32_t at_pkglen(const uint8_t *p, unsigned int *n)
{
	uint32_t v;

	*n = 1 + (p[0] >> 6);
	if (*n == 1)
		return p[0] & 0x3f;
	v = p[0] & 0xf;
	for (unsigned int i = 1; i < *n; i++)
		v |= (uint32_t)p[i] << (8 * i - 4);
	return v;
}

/* DSDT: Scope(\_SB) { Device(PCI0) {..} } fills the table exactly, with _HID, _CRS, _PRT. */
static void at_check_dsdt(const uint8_t *d)
{
	uint32_t len = at_u32(d + 4), off = 36, end;
	unsigned int n;

	cr_assert_eq(d[off], 0x10, "DSDT does not open with a Scope");
	end = off + 1 + at_pkglen(d + off + 1, &n);
	cr_assert_eq(end, len, "Scope(\\_SB) ends at %u of %u", end, len);
	off += 1 + n;
	cr_assert_eq(memcmp(d + off, "\\_SB_", 5), 0);
	off += 5;
	cr_assert(d[off] == 0x5b && d[off + 1] == 0x82, "no Device in \\_SB");
	off += 2;
	end = off + at_pkglen(d + off, &n);
	cr_assert_eq(end, len, "Device(PCI0) ends at %u of %u", end, len);
	cr_assert_eq(memcmp(d + off + n, "PCI0", 4), 0);
	cr_assert_not_null(memmem(d, len, "_HID\x0c\x41\xd0\x0a\x03", 9), "no _HID PNP0A03");
	cr_assert_not_null(memmem(d, len, "_CRS", 4));
	cr_assert_not_null(memmem(d, len, "_PRT", 4));
}

static void at_check(unsigned int vcpus)
{
	const uint8_t *fadt, *madt, *dsdt;
	int n;

	memset(at_buf, 0xa5, sizeof(at_buf));
	n = linux_acpi_write(at_buf, LINUX_ACPI_GPA, sizeof(at_buf), vcpus);
	cr_assert_gt(n, 0, "linux_acpi_write(%u vCPUs): %d", vcpus, n);
	cr_assert_leq((unsigned int)n, LINUX_ACPI_SIZE);
	at_root(&fadt, &madt);
	cr_assert_geq(at_u32(fadt + 4), 244, "FADT too short for its X_ fields");
	cr_assert_eq(at_u32(fadt + 40), at_u64(fadt + 140), "FADT DSDT and X_DSDT differ");
	dsdt = at_table(at_u64(fadt + 140), "DSDT");
	cr_assert_eq(at_u32(fadt + 36), 0, "FIRMWARE_CTRL set besides X_FIRMWARE_CTRL");
	cr_assert_eq(memcmp(at_buf + (at_u64(fadt + 132) - LINUX_ACPI_GPA), "FACS", 4), 0);
	cr_assert_eq(at_u64(fadt + 132) % 64, 0, "FACS not 64-byte aligned");
	cr_assert_eq(at_u32(fadt + 112) & (1u << 20), 0, "hardware-reduced: no PIC, no PIT");
	cr_assert_eq(fadt[46], LINUX_ACPI_SCI_IRQ);
	cr_assert_eq(at_u32(fadt + 56), LINUX_PM1_EVT_PORT);
	cr_assert_eq(at_u32(fadt + 64), LINUX_PM1_CNT_PORT);
	at_check_madt(madt, vcpus);
	at_check_dsdt(dsdt);
}

Test(acpi, every_table_is_found_from_the_rsdp_with_one_local_apic_per_vcpu)
{
	at_check(1);
	at_check(2);
	at_check(GFA_LINUX_MAX_VCPUS);
}

Test(acpi, a_short_area_or_bad_vcpu_count_is_refused)
{
	cr_assert_eq(linux_acpi_write(at_buf, LINUX_ACPI_GPA, 512, 2), -E2BIG);
	cr_assert_eq(linux_acpi_write(at_buf, LINUX_ACPI_GPA, sizeof(at_buf), 0), -E2BIG);
	cr_assert_eq(linux_acpi_write(at_buf, LINUX_ACPI_GPA, sizeof(at_buf),
				      GFA_LINUX_MAX_VCPUS + 1),
		     -E2BIG);
}

/* PM1: status reads clear, enable reads back, control says ACPI mode (SCI_EN). */
Test(acpi, pm1_registers_say_acpi_mode_and_keep_the_enable_bits)
{
	struct linux_acpi_pm pm = { 0 };
	uint8_t v[2] = { 0xff, 0xff };

	cr_assert(linux_acpi_pm_io(&pm, LINUX_PM1_EVT_PORT, v, 2, false));
	cr_assert(v[0] == 0 && v[1] == 0, "PM1 status %02x%02x", v[1], v[0]);
	v[0] = 0x21;
	v[1] = 0x01;
	cr_assert(linux_acpi_pm_io(&pm, LINUX_PM1_EVT_PORT + 2, v, 2, true));
	memset(v, 0, sizeof(v));
	cr_assert(linux_acpi_pm_io(&pm, LINUX_PM1_EVT_PORT + 2, v, 2, false));
	cr_assert(v[0] == 0x21 && v[1] == 0x01);
	cr_assert(linux_acpi_pm_io(&pm, LINUX_PM1_CNT_PORT, v, 1, false));
	cr_assert_eq(v[0] & 1, 1, "SCI_EN clear");
	cr_assert_not(linux_acpi_pm_io(&pm, LINUX_PM1_CNT_PORT + 2, v, 1, false));
	cr_assert_not(linux_acpi_pm_io(&pm, LINUX_PM1_CNT_PORT + 1, v, 2, false));
	cr_assert_not(linux_acpi_pm_io(&pm, LINUX_PM1_EVT_PORT - 1, v, 1, false));
}
