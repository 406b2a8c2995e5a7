// SPDX-License-Identifier: MIT
/*
 * The x86 boot protocol for Linux without firmware: load an uncompressed vmlinux at its
 * physical addresses and enter it through its PVH note (Documentation/x86/boot.rst has
 * no PVH section; the layout is Xen's hvm_start_info, version 1, which Linux's
 * arch/x86/platform/pvh reads), or a bzImage through the 64-bit boot protocol
 * (boot_params, the "zero page").  Either way the kernel gets the command line, the
 * initramfs and an e820 map made from the guest's RAM, the ACPI tables of refvmm/acpi.c
 * (the boot information names their RSDP) and an MP table (MPS 1.4) for a kernel booted
 * with acpi=off.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "refvmm/linux.h"

/* ---- file helpers ---- */

static int pread_all(int fd, void *buf, size_t len, off_t off)
{
	char *p = buf;

	while (len) {
		ssize_t n = pread(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENOEXEC; /* shorter than its headers say */
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

/* [@gpa, @gpa + @len) inside guest RAM and not below @floor. */
static bool fits(uint64_t size, uint64_t gpa, uint64_t len, uint64_t floor)
{
	return gpa >= floor && gpa <= size && len <= size - gpa;
}

/* ---- e820 ---- */

#define E820_RAM      1
#define E820_RESERVED 2

/* The guest's RAM as e820: base memory, the legacy hole (MP and ACPI tables), the rest. */
static void build_e820(uint64_t size, struct linux_boot *out)
{
	out->nr_e820 = 0;
	out->e820[out->nr_e820++] = (struct gfa_linux_e820){ 0, LINUX_EBDA_GPA, E820_RAM };
	out->e820[out->nr_e820++] = (struct gfa_linux_e820){ LINUX_EBDA_GPA,
							     LINUX_HIGH_RAM_GPA - LINUX_EBDA_GPA,
							     E820_RESERVED };
	out->e820[out->nr_e820++] =
		(struct gfa_linux_e820){ LINUX_HIGH_RAM_GPA, size - LINUX_HIGH_RAM_GPA, E820_RAM };
}

/* ---- MP table (MPS 1.4) ---- */

struct mpf_intel {         /* floating pointer structure */
	char signature[4]; /* "_MP_" */
	uint32_t physptr;
	uint8_t length, specification, checksum, feature1, feature2, feature3[3];
} __attribute__((packed));

struct mpc_table {         /* configuration table header */
	char signature[4]; /* "PCMP" */
	uint16_t length;
	uint8_t spec, checksum;
	char oem[8], productid[12];
	uint32_t oemptr;
	uint16_t oemsize, oemcount;
	uint32_t lapic;
	uint16_t ext_length;
	uint8_t ext_checksum, reserved;
} __attribute__((packed));

struct mpc_cpu {
	uint8_t type, apicid, apicver, cpuflag;
	uint32_t cpufeature, featureflag, reserved[2];
} __attribute__((packed));

struct mpc_bus {
	uint8_t type, busid;
	char bustype[6];
} __attribute__((packed));

struct mpc_ioapic {
	uint8_t type, apicid, apicver, flags;
	uint32_t apicaddr;
} __attribute__((packed));

struct mpc_intsrc { /* also the local interrupt entry's layout */
	uint8_t type, irqtype;
	uint16_t irqflag;
	uint8_t srcbus, srcbusirq, dstapic, dstirq;
} __attribute__((packed));

#define MP_PROCESSOR       0
#define MP_BUS             1
#define MP_IOAPIC          2
#define MP_INTSRC          3
#define MP_LINTSRC         4
#define MP_INT             0
#define MP_NMI             1
#define MP_EXTINT          3
#define MP_IRQ_CONFORMING  0x0
#define MP_IRQ_LEVEL_HIGH  0xd /* polarity active high (1), trigger level (3 << 2) */
#define MP_BUS_PCI         0
#define MP_BUS_ISA         1
#define MP_APIC_VERSION    0x14
#define MP_IOAPIC_VERSION  0x11
#define MP_CPU_ENABLED     1
#define MP_CPU_BSP         2
#define CPUID_FEATURE_APIC (1u << 9)
#define CPUID_FEATURE_FPU  (1u << 0)

static uint8_t mp_checksum(const void *p, size_t len)
{
	const uint8_t *b = p;
	uint8_t sum = 0;

	while (len--)
		sum += *b++;
	return (uint8_t)-sum;
}

static bool is_pci_irq(unsigned int irq)
{
	for (unsigned int s = 0; s < 4; s++)
		if (GFA_LINUX_PCI_IRQ(s) == irq)
			return true;
	return false;
}

static char *mp_intsrc(char *p, uint8_t type, uint8_t irqtype, uint16_t flag, uint8_t bus,
		       uint8_t busirq, uint8_t apic, uint8_t pin)
{
	struct mpc_intsrc e = { type, irqtype, flag, bus, busirq, apic, pin };

	memcpy(p, &e, sizeof(e));
	return p + sizeof(e);
}

/*
 * The MP table at @gpa (@area is its host address): one processor entry per vCPU (APIC
 * id = vCPU id), buses PCI 0 and ISA 1, the IOAPIC after the CPUs' ids, ISA IRQs 0-15
 * on IOAPIC pins 0-15 (KVM's default routing) except the pins PCI slots use, each PCI
 * slot's INTA# on its pin, and LINT0/LINT1 as ExtINT/NMI.
 */
static void write_mptable(char *area, uint64_t gpa, unsigned int vcpus)
{
	struct mpf_intel *mpf = (struct mpf_intel *)area;
	struct mpc_table *mpc = (struct mpc_table *)(area + sizeof(*mpf));
	const struct mpc_bus buses[2] = { { MP_BUS, MP_BUS_PCI, "PCI   " },
					  { MP_BUS, MP_BUS_ISA, "ISA   " } };
	const uint8_t ioapic_id = (uint8_t)vcpus;
	const struct mpc_ioapic io = { MP_IOAPIC, ioapic_id, MP_IOAPIC_VERSION, 1,
				       LINUX_IOAPIC_ADDR };
	char *p = (char *)(mpc + 1);
	uint16_t count = 0;

	memset(area, 0, 1024);
	for (unsigned int i = 0; i < vcpus; i++) {
		struct mpc_cpu c = {
			.type = MP_PROCESSOR,
			.apicid = (uint8_t)i,
			.apicver = MP_APIC_VERSION,
			.cpuflag = MP_CPU_ENABLED | (i == 0 ? MP_CPU_BSP : 0),
			.cpufeature = 0x600,
			.featureflag = CPUID_FEATURE_APIC | CPUID_FEATURE_FPU,
		};

		memcpy(p, &c, sizeof(c));
		p += sizeof(c);
		count++;
	}
	memcpy(p, buses, sizeof(buses));
	p += sizeof(buses);
	count += 2;
	memcpy(p, &io, sizeof(io));
	p += sizeof(io);
	count++;
	for (unsigned int irq = 0; irq < 16; irq++) {
		if (is_pci_irq(irq))
			continue;
		p = mp_intsrc(p, MP_INTSRC, MP_INT, MP_IRQ_CONFORMING, MP_BUS_ISA, (uint8_t)irq,
			      ioapic_id, (uint8_t)irq);
		count++;
	}
	for (unsigned int slot = 0; slot < GFA_LINUX_PCI_SLOTS; slot++) {
		/* source bus IRQ of a PCI device: slot number << 2 | pin (0 = INTA#) */
		p = mp_intsrc(p, MP_INTSRC, MP_INT, MP_IRQ_LEVEL_HIGH, MP_BUS_PCI,
			      (uint8_t)(slot << 2), ioapic_id, (uint8_t)GFA_LINUX_PCI_IRQ(slot));
		count++;
	}
	p = mp_intsrc(p, MP_LINTSRC, MP_EXTINT, MP_IRQ_CONFORMING, MP_BUS_ISA, 0, 0xff, 0);
	p = mp_intsrc(p, MP_LINTSRC, MP_NMI, MP_IRQ_CONFORMING, MP_BUS_ISA, 0, 0xff, 1);
	count += 2;

	memcpy(mpc->signature, "PCMP", 4);
	mpc->length = (uint16_t)(p - (char *)mpc);
	mpc->spec = 4;
	memcpy(mpc->oem, "GFA     ", 8);
	memcpy(mpc->productid, "REFVMM      ", 12);
	mpc->oemcount = count;
	mpc->lapic = LINUX_LAPIC_ADDR;
	mpc->checksum = mp_checksum(mpc, mpc->length);

	memcpy(mpf->signature, "_MP_", 4);
	mpf->physptr = (uint32_t)(gpa + sizeof(*mpf));
	mpf->length = 1; /* in 16-byte units */
	mpf->specification = 4;
	mpf->checksum = mp_checksum(mpf, sizeof(*mpf));
}

/* ---- vmlinux through the PVH entry ---- */

#define XEN_ELFNOTE_PHYS32_ENTRY 18
#define PVH_START_MAGIC          0x336ec578u

struct hvm_start_info {
	uint32_t magic, version, flags, nr_modules;
	uint64_t modlist_paddr, cmdline_paddr, rsdp_paddr, memmap_paddr;
	uint32_t memmap_entries, reserved;
};

struct hvm_modlist_entry {
	uint64_t paddr, size, cmdline_paddr, reserved;
};

struct hvm_memmap_table_entry {
	uint64_t addr, size;
	uint32_t type, reserved;
};

/* The PVH entry from a PT_NOTE segment: a "Xen" note of type PHYS32_ENTRY. */
static int find_pvh_entry(int fd, const Elf64_Phdr *ph, uint64_t *entry)
{
	char buf[8192];
	size_t len = ph->p_filesz < sizeof(buf) ? ph->p_filesz : sizeof(buf), off = 0;
	int r = pread_all(fd, buf, len, (off_t)ph->p_offset);

	if (r)
		return r;
	while (off + sizeof(Elf64_Nhdr) <= len) {
		Elf64_Nhdr n;
		size_t name_off, desc_off;

		memcpy(&n, buf + off, sizeof(n));
		name_off = off + sizeof(n);
		desc_off = name_off + ((n.n_namesz + 3) & ~3u);
		if (desc_off + n.n_descsz > len)
			break;
		if (n.n_type == XEN_ELFNOTE_PHYS32_ENTRY && n.n_namesz == 4 &&
		    !memcmp(buf + name_off, "Xen", 4) && n.n_descsz >= 4) {
			uint32_t e;

			memcpy(&e, buf + desc_off, 4);
			*entry = e;
			return 0;
		}
		off = desc_off + ((n.n_descsz + 3) & ~3u);
	}
	return -ENOENT;
}

static int load_elf(int fd, char *ram, uint64_t size, struct linux_boot *out)
{
	Elf64_Ehdr eh;
	bool have_entry = false;
	int r = pread_all(fd, &eh, sizeof(eh), 0);

	if (r)
		return r;
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || !eh.e_phnum || eh.e_phnum > 64)
		return -ENOEXEC;
	out->kernel_end = 0;
	for (unsigned int i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;

		r = pread_all(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph)));
		if (r)
			return r;
		if (ph.p_type == PT_NOTE && !have_entry) {
			have_entry = !find_pvh_entry(fd, &ph, &out->entry);
			continue;
		}
		if (ph.p_type != PT_LOAD || !ph.p_memsz)
			continue;
		if (ph.p_filesz > ph.p_memsz ||
		    !fits(size, ph.p_paddr, ph.p_memsz, LINUX_HIGH_RAM_GPA))
			return -ENOEXEC;
		r = pread_all(fd, ram + ph.p_paddr, ph.p_filesz, (off_t)ph.p_offset);
		if (r)
			return r;
		memset(ram + ph.p_paddr + ph.p_filesz, 0, ph.p_memsz - ph.p_filesz);
		if (ph.p_paddr + ph.p_memsz > out->kernel_end)
			out->kernel_end = ph.p_paddr + ph.p_memsz;
	}
	if (!have_entry || !out->kernel_end)
		return -ENOEXEC;
	out->pvh = true;
	out->info_gpa = LINUX_START_INFO_GPA;
	return 0;
}

static void write_pvh_info(char *ram, struct linux_boot *b)
{
	struct hvm_start_info *si = (struct hvm_start_info *)(ram + LINUX_START_INFO_GPA);
	struct hvm_modlist_entry *mod = (struct hvm_modlist_entry *)(si + 1);
	struct hvm_memmap_table_entry *mm = (struct hvm_memmap_table_entry *)(mod + 1);

	memset(si, 0, sizeof(*si) + sizeof(*mod) + GFA_LINUX_E820_MAX * sizeof(*mm));
	si->magic = PVH_START_MAGIC;
	si->version = 1; /* has the memory map */
	si->cmdline_paddr = LINUX_CMDLINE_GPA;
	si->rsdp_paddr = LINUX_ACPI_GPA;
	if (b->initrd_size) {
		si->nr_modules = 1;
		si->modlist_paddr = LINUX_START_INFO_GPA + sizeof(*si);
		mod->paddr = b->initrd_gpa;
		mod->size = b->initrd_size;
	}
	si->memmap_paddr = LINUX_START_INFO_GPA + sizeof(*si) + sizeof(*mod);
	si->memmap_entries = b->nr_e820;
	for (unsigned int i = 0; i < b->nr_e820; i++)
		mm[i] = (struct hvm_memmap_table_entry){ b->e820[i].addr, b->e820[i].size,
							 b->e820[i].type, 0 };
}

/* ---- bzImage through the 64-bit entry ---- */

/* boot_params offsets (Documentation/x86/zero-page.rst, boot.rst). */
#define BP_ACPI_RSDP_ADDR     0x070 /* read from boot protocol 2.14 on */
#define BP_E820_ENTRIES       0x1e8
#define BP_SETUP_SECTS        0x1f1
#define BP_VID_MODE           0x1fa
#define BP_BOOT_FLAG          0x1fe
#define BP_JUMP               0x200
#define BP_HEADER             0x202
#define BP_VERSION            0x206
#define BP_TYPE_OF_LOADER     0x210
#define BP_LOADFLAGS          0x211
#define BP_RAMDISK_IMAGE      0x218
#define BP_RAMDISK_SIZE       0x21c
#define BP_HEAP_END_PTR       0x224
#define BP_CMD_LINE_PTR       0x228
#define BP_INITRD_ADDR_MAX    0x22c
#define BP_XLOADFLAGS         0x236
#define BP_E820_TABLE         0x2d0
#define BP_SIZE               0x1000
#define LOADFLAG_CAN_USE_HEAP 0x80
#define XLF_KERNEL_64         0x1

static void put32(uint8_t *p, unsigned int off, uint32_t v)
{
	memcpy(p + off, &v, 4);
}

static int load_bzimage(int fd, char *ram, uint64_t size, off_t file_size, struct linux_boot *out)
{
	uint8_t *bp = (uint8_t *)ram + LINUX_ZERO_PAGE_GPA, hdr[BP_SIZE];
	unsigned int setup_sects, hdr_end;
	uint64_t kernel_len;
	off_t kernel_off;
	int r = pread_all(fd, hdr, sizeof(hdr), 0);

	if (r)
		return r;
	if (hdr[BP_BOOT_FLAG] != 0x55 || hdr[BP_BOOT_FLAG + 1] != 0xaa ||
	    memcmp(hdr + BP_HEADER, "HdrS", 4) ||
	    (hdr[BP_VERSION] | hdr[BP_VERSION + 1] << 8) < 0x20c ||
	    !(hdr[BP_XLOADFLAGS] & XLF_KERNEL_64))
		return -ENOEXEC;
	setup_sects = hdr[BP_SETUP_SECTS] ? hdr[BP_SETUP_SECTS] : 4;
	kernel_off = (off_t)(setup_sects + 1) * 512;
	if (kernel_off >= file_size)
		return -ENOEXEC;
	kernel_len = (uint64_t)(file_size - kernel_off);
	if (!fits(size, LINUX_BZIMAGE_GPA, kernel_len, LINUX_HIGH_RAM_GPA))
		return -ENOEXEC;
	r = pread_all(fd, ram + LINUX_BZIMAGE_GPA, kernel_len, kernel_off);
	if (r)
		return r;
	/* the setup header goes into the zero page as the file has it; the rest is ours */
	hdr_end = BP_JUMP + 2 + hdr[BP_JUMP + 1];
	memset(bp, 0, BP_SIZE);
	memcpy(bp + BP_SETUP_SECTS, hdr + BP_SETUP_SECTS, hdr_end - BP_SETUP_SECTS);
	bp[BP_VID_MODE] = bp[BP_VID_MODE + 1] = 0xff; /* "normal" */
	bp[BP_TYPE_OF_LOADER] = 0xff;                 /* undefined boot loader */
	bp[BP_LOADFLAGS] |= LOADFLAG_CAN_USE_HEAP;
	bp[BP_HEAP_END_PTR] = 0x00;
	bp[BP_HEAP_END_PTR + 1] = 0xfe;
	put32(bp, BP_CMD_LINE_PTR, (uint32_t)LINUX_CMDLINE_GPA);
	out->pvh = false;
	out->entry = LINUX_BZIMAGE_GPA + 0x200; /* startup_64 */
	out->info_gpa = LINUX_ZERO_PAGE_GPA;
	/* the kernel decompresses itself above its load address: leave it room */
	out->kernel_end = LINUX_BZIMAGE_GPA + kernel_len + (64ULL << 20);
	return 0;
}

static void write_zero_page(char *ram, const struct linux_boot *b)
{
	uint8_t *bp = (uint8_t *)ram + LINUX_ZERO_PAGE_GPA;
	const uint64_t rsdp = LINUX_ACPI_GPA;

	memcpy(bp + BP_ACPI_RSDP_ADDR, &rsdp, sizeof(rsdp));
	put32(bp, BP_RAMDISK_IMAGE, (uint32_t)b->initrd_gpa);
	put32(bp, BP_RAMDISK_SIZE, (uint32_t)b->initrd_size);
	bp[BP_E820_ENTRIES] = (uint8_t)b->nr_e820;
	for (unsigned int i = 0; i < b->nr_e820; i++) {
		uint8_t *e = bp + BP_E820_TABLE + 20 * i;

		memcpy(e, &b->e820[i].addr, 8);
		memcpy(e + 8, &b->e820[i].size, 8);
		memcpy(e + 16, &b->e820[i].type, 4);
	}
}

/* ---- initramfs and the whole load ---- */

/* The initramfs at the top of RAM (below @max_gpa), 2 MiB aligned, above the kernel. */
static int load_initrd(const char *path, char *ram, uint64_t size, uint64_t max_gpa,
		       struct linux_boot *b)
{
	struct stat st;
	uint64_t top = size < max_gpa ? size : max_gpa, gpa;
	int fd, r;

	b->initrd_gpa = b->initrd_size = 0;
	if (!path)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		r = -errno;
		close(fd);
		return r;
	}
	if ((uint64_t)st.st_size >= top ||
	    (gpa = (top - (uint64_t)st.st_size) & ~((2ULL << 20) - 1)) < b->kernel_end) {
		close(fd);
		return -E2BIG;
	}
	r = pread_all(fd, ram + gpa, (size_t)st.st_size, 0);
	close(fd);
	if (r)
		return r == -ENOEXEC ? -EIO : r;
	b->initrd_gpa = gpa;
	b->initrd_size = (uint64_t)st.st_size;
	return 0;
}

int linux_boot_load(void *ram, uint64_t size, const char *kernel, const char *initrd,
		    const char *cmdline, unsigned int vcpus, struct linux_boot *out)
{
	char *g = ram;
	unsigned char magic[4];
	size_t cl = strlen(cmdline);
	struct stat st;
	int fd, r;

	memset(out, 0, sizeof(*out));
	if (cl >= LINUX_CMDLINE_MAX)
		return -E2BIG;
	fd = open(kernel, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = fstat(fd, &st) ? -errno : pread_all(fd, magic, sizeof(magic), 0);
	if (!r)
		r = memcmp(magic, ELFMAG, SELFMAG) ? load_bzimage(fd, g, size, st.st_size, out) :
						     load_elf(fd, g, size, out);
	close(fd);
	if (r)
		return r;
	build_e820(size, out);
	/* boot_params holds a 32-bit initrd address; PVH takes 64 bits, but one limit
	 * for both keeps the two paths alike */
	r = load_initrd(initrd, g, size, 1ULL << 31, out);
	if (r)
		return r;
	memcpy(g + LINUX_CMDLINE_GPA, cmdline, cl + 1);
	if (out->pvh)
		write_pvh_info(g, out);
	else
		write_zero_page(g, out);
	write_mptable(g + LINUX_EBDA_GPA, LINUX_EBDA_GPA, vcpus);
	r = linux_acpi_write(g + LINUX_ACPI_GPA, LINUX_ACPI_GPA, LINUX_ACPI_SIZE, vcpus);
	return r < 0 ? r : 0;
}
