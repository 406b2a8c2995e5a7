/* SPDX-License-Identifier: MIT */
/*
 * gfa/domain.h - import a guest's memory layout from a libvirt domain.
 *
 * gfactl and VMMs describe a guest the way libvirt does: total memory, vCPUs,
 * guest NUMA cells and hugepage backing.  This module reads that description
 * either from a libvirt connection (any URI libvirt understands, including the
 * daemon-less test driver: "test:///default" or "test:///abs/path/node.xml")
 * or from a domain XML document, and returns it as a plain struct.
 *
 * Conventions shared by every function here:
 *  - Sizes are bytes.  Like libvirt, memory sizes read from XML are rounded up
 *    to a whole KiB, so a file and the same domain defined in libvirt give the
 *    same numbers.
 *  - On error the function returns a negative errno, leaves *out untouched and,
 *    when err is non-NULL and errlen > 0, writes a NUL-terminated one-line
 *    message to err naming the file, URI or domain involved.  err may be NULL.
 *  - Errors used (beyond those listed per function):
 *      -EINVAL   NULL argument, or content that is inconsistent (NUMA cells not
 *                adding up to <memory>, zero vCPUs, unknown memory unit,
 *                malformed number or cpu list, overlapping cells, ...)
 *      -EBADMSG  not well-formed XML, root element is not <domain>, no <name>, or entity
 *                declarations (domain XML has none; expanding them is unbounded)
 *      -ERANGE   a value overflows 64 bits or exceeds a limit below
 *      -ENOMEM   out of memory
 *  - Thread rules: all functions are reentrant and may be called from several
 *    threads at once; they share no state except the one-time library set-up
 *    described at gfa_domain_from_libvirt().
 */
#ifndef GFA_DOMAIN_H
#define GFA_DOMAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of struct gfa_domain_spec; larger domains are refused with -ERANGE. */
#define GFA_DOMAIN_NAME_MAX	256	/* name bytes including the NUL */
#define GFA_DOMAIN_MAX_CELLS	64	/* guest NUMA cells (ids 0..63) */
#define GFA_DOMAIN_MAX_VCPUS	1024	/* vCPUs (= x86 KVM_MAX_VCPUS default) */
#define GFA_DOMAIN_MAX_PAGES	8	/* <hugepages><page> entries */
#define GFA_DOMAIN_XML_MAX	(16u << 20)	/* XML document bytes (-EFBIG) */

/* <memoryBacking><source type=.../>: where libvirt would take guest RAM from. */
enum gfa_domain_source {
	GFA_DOMAIN_SOURCE_DEFAULT = 0,	/* no <source>: hypervisor default */
	GFA_DOMAIN_SOURCE_ANONYMOUS,
	GFA_DOMAIN_SOURCE_FILE,
	GFA_DOMAIN_SOURCE_MEMFD,
};

/* <memoryBacking><access mode=.../>. */
enum gfa_domain_access {
	GFA_DOMAIN_ACCESS_DEFAULT = 0,	/* no <access> */
	GFA_DOMAIN_ACCESS_SHARED,
	GFA_DOMAIN_ACCESS_PRIVATE,
};

/* One guest NUMA cell (<cpu><numa><cell>). */
struct gfa_domain_cell {
	uint64_t memory_bytes;
	unsigned int id;		/* always equal to its index in cells[] */
	unsigned int nr_cpus;		/* number of bits set in cpus */
	/* vCPU ids of this cell, bit i of cpus[i / 64] = vCPU i.  May be empty. */
	uint64_t cpus[GFA_DOMAIN_MAX_VCPUS / 64];
};

/* One <hugepages><page size=... nodeset=.../>. */
struct gfa_domain_page {
	uint64_t size_bytes;		/* > 0, power of two */
	/*
	 * Bit i set: this size backs guest cell i.  0: no nodeset attribute, the
	 * size backs every cell that no other page names (at most one such page).
	 */
	uint64_t nodeset;
};

struct gfa_domain_spec {
	char name[GFA_DOMAIN_NAME_MAX];
	/*
	 * Guest memory as libvirt's <memory> / virDomainGetMaxMemory(): boot RAM
	 * (the NUMA cells, if any) plus memory devices (DIMMs, virtio-mem sizes).
	 */
	uint64_t memory_bytes;
	/* <currentMemory> (balloon target); equals memory_bytes if absent. */
	uint64_t current_memory_bytes;
	/* Sum of <devices><memory><target><size>; part of memory_bytes. */
	uint64_t device_memory_bytes;
	unsigned int vcpus;		/* maximum vCPUs (<vcpu>), >= 1 */
	unsigned int current_vcpus;	/* <vcpu current=...>, 1..vcpus */
	/* Guest NUMA cells, cells[i].id == i.  0: no guest NUMA topology. */
	unsigned int nr_cells;
	struct gfa_domain_cell cells[GFA_DOMAIN_MAX_CELLS];
	/*
	 * <memoryBacking><hugepages> present.  With hugepages and nr_pages == 0
	 * (a bare <hugepages/>) the host's default hugepage size is meant.
	 */
	bool hugepages;
	unsigned int nr_pages;
	struct gfa_domain_page pages[GFA_DOMAIN_MAX_PAGES];
	enum gfa_domain_source source;
	enum gfa_domain_access access;
};

/*
 * gfa_domain_from_libvirt - import domain @name from the libvirt connection @uri.
 * @uri:   libvirt URI, e.g. "qemu:///system", "test:///default" or
 *         "test:///abs/path/node.xml"; NULL means libvirt's default URI.
 *         The connection is opened read-only and closed before returning.
 *
 * Name, memory, current memory and vCPU counts come from the libvirt API
 * (virDomainGetMaxMemory, virDomainGetInfo, virDomainGetVcpusFlags); NUMA
 * cells, hugepages and the memory backing come from virDomainGetXMLDesc().
 * The result is validated like gfa_domain_from_xml_string().
 *
 * Note on "test:///default": its state lives as long as some connection to it
 * in this process is open, so a domain defined there on a connection the
 * caller keeps open is visible here; once all are closed it resets.
 *
 * One-time, process-wide set-up on first call: virInitialize() and a no-op
 * libvirt error handler (virSetErrorFunc) so libvirt does not print to stderr;
 * the message goes to @err instead.  A program that wants its own libvirt
 * handler should install it after the first call.  During the connect, this
 * thread's libxml2 generic error handler is silenced and then restored.
 *
 * Return: 0 and *out filled, or
 *   -ECONNREFUSED  the URI could not be opened (invalid URI, no such driver,
 *                  daemon not running, unreadable test driver file)
 *   -ENOENT        no domain called @name there (message says "no domain")
 *   -EIO           another libvirt call failed (message has libvirt's text)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as in the header comment.
 */
int gfa_domain_from_libvirt(const char *uri, const char *name,
			    struct gfa_domain_spec *out, char *err, size_t errlen);

/*
 * gfa_domain_from_xml_file - parse the domain XML file @path (libxml2 only,
 * no network, no entity declarations).  Any readable file works,
 * including pipes such as /dev/stdin.
 *
 * Return: 0 and *out filled, or
 *   -ENOENT        @path does not exist (message names the file)
 *   -EFBIG         the file is larger than GFA_DOMAIN_XML_MAX
 *   other -errno   from open()/read() (-EACCES, -EISDIR, ...)
 *   -EBADMSG, -EINVAL, -ERANGE, -ENOMEM as in the header comment.
 */
int gfa_domain_from_xml_file(const char *path, struct gfa_domain_spec *out,
			     char *err, size_t errlen);

/*
 * gfa_domain_from_xml_string - parse the NUL-terminated domain XML @xml.
 * Return: as gfa_domain_from_xml_file() minus the file errors; -EFBIG if
 * longer than GFA_DOMAIN_XML_MAX.
 */
int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out,
			       char *err, size_t errlen);

/*
 * gfa_domain_parse_size - libvirt's scaled integer: @value (decimal digits,
 * optional surrounding blanks) times @unit.  Units, case-insensitive:
 * "b"/"bytes"; "KB","MB","GB","TB","PB","EB" (powers of 1000); "k","KiB",
 * "M","MiB","G","GiB","T","TiB","P","PiB","E","EiB" (powers of 1024).  NULL or
 * "" means KiB (libvirt's default for memory).  No rounding is done.
 * Return: 0 and *bytes set; -EINVAL bad number or unknown unit; -ERANGE the
 * result does not fit in 64 bits.
 */
int gfa_domain_parse_size(const char *value, const char *unit, uint64_t *bytes);

/*
 * gfa_domain_cell_page_size - the hugepage size backing guest cell @cell, the
 * way libvirt picks it: the page whose nodeset names the cell, else the page
 * without nodeset, else the host's default hugepage size (reported as 0).
 * A domain without NUMA cells has one implicit cell 0.
 * Return: 0 and *bytes set; -ENODATA not hugepage-backed (*bytes untouched);
 * -ENOENT no such cell; -EINVAL NULL argument, or nr_cells/nr_pages beyond the arrays.
 */
int gfa_domain_cell_page_size(const struct gfa_domain_spec *spec,
			      unsigned int cell, uint64_t *bytes);

/*
 * gfa_domain_format - one-line human summary of @spec into @buf, e.g.
 * "numa2: memory 4 GiB, 4 vCPUs, 2 NUMA cells [0: cpus 0-1, 2 GiB; 1: cpus
 * 2-3, 2 GiB], hugepages 1 GiB (cells 0-1), source memfd, access shared".
 * Sizes are shown in the largest binary unit that divides them exactly.
 * Return: length written (without the NUL); -ENOSPC if @len was too small
 * (buf then holds a truncated NUL-terminated line); -EINVAL NULL, len 0, or
 * nr_cells/nr_pages beyond the arrays.
 */
int gfa_domain_format(const struct gfa_domain_spec *spec, char *buf, size_t len);

/* gfa_domain_cell_has_cpu - whether vCPU @cpu belongs to @cell. */
static inline bool gfa_domain_cell_has_cpu(const struct gfa_domain_cell *cell,
					   unsigned int cpu)
{
	if (cpu >= GFA_DOMAIN_MAX_VCPUS)
		return false;
	return (cell->cpus[cpu / 64] >> (cpu % 64)) & 1;
}

#ifdef __cplusplus
}
#endif

#endif /* GFA_DOMAIN_H */
