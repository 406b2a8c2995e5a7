// SPDX-License-Identifier: MIT
/*
 * Tests for refvmm/domain.c: libvirt domain import.
 *
 * Fixtures live in tests/data/ (found from the working directory, or from
 * $GFA_SRCDIR when the suite runs elsewhere).  libvirt is used only through
 * its test driver, which needs no daemon: "test:///default" and
 * "test://<abs path>/tests/data/testnode.xml".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <gfa/refvmm.h>
#include "common/compiler.h"

#define GIB (1ull << 30)
#define MIB (1ull << 20)
#define KIB 1024ull

/* Absolute path of tests/data/<name>. */
static void domain_data(const char *name, char *buf, size_t len)
{
	const char *src = getenv("GFA_SRCDIR");
	char rel[PATH_MAX], dir[PATH_MAX];

	snprintf(rel, sizeof(rel), "%s/tests/data", src ? src : ".");
	if (!realpath(rel, dir))
		cr_assert_fail("cannot find %s (run from the repository root or set "
			       "GFA_SRCDIR)",
			       rel);
	if ((size_t)snprintf(buf, len, "%s/%s", dir, name) >= len)
		cr_assert_fail("path too long: %s/%s", dir, name);
}

static int domain_load(const char *fixture, struct gfa_domain_spec *s, char *err, size_t errlen)
{
	char path[PATH_MAX];

	domain_data(fixture, path, sizeof(path));
	return gfa_domain_from_xml_file(path, s, err, errlen);
}

static char *domain_slurp(const char *fixture)
{
	char path[PATH_MAX], *text = NULL;
	size_t len = 0;
	FILE *f;

	domain_data(fixture, path, sizeof(path));
	f = fopen(path, "r");
	cr_assert_not_null(f, "open %s", path);
	cr_assert_eq(getdelim(&text, &len, '\0', f) > 0, true, "read %s", path);
	fclose(f);
	return text;
}

/*
 * A message in the import's one form: "<origin>: <where>: <what>; accepted: <what
 * would be>", on one line.
 */
static void domain_assert_one_form(const char *err, const char *origin)
{
	const char *where = err + strlen(origin);

	cr_assert_eq(strncmp(err, origin, strlen(origin)), 0, "origin '%s' not first: %s", origin,
		     err);
	if (strncmp(origin, "domain XML file '", strlen(origin)) == 0)
		where = strstr(err, "': ") + 3;
	cr_assert(where[0] == '<' || !strncmp(where, "line ", 5) ||
			  !strncmp(where, "hugepage ", 9) ||
			  !strncmp(where, "memory device ", 14) ||
			  !strncmp(where, "root element", 12) || !strncmp(where, "document", 8),
		  "no element after the origin: %s", err);
	cr_assert_not_null(strstr(err, "; accepted: "), "no 'accepted': %s", err);
	cr_assert_null(strpbrk(err, "\n\r"), "more than one line: %s", err);
}

static bool domain_cell_cpus_are(const struct gfa_domain_cell *c, const unsigned int *cpus,
				 unsigned int n)
{
	unsigned int i, found = 0;

	for (i = 0; i < GFA_DOMAIN_MAX_VCPUS; i++) {
		if (!gfa_domain_cell_has_cpu(c, i))
			continue;
		if (found >= n || cpus[found] != i)
			return false;
		found++;
	}
	return found == n && c->nr_cpus == n;
}

/* Field-by-field equality (struct padding may differ). */
static void domain_assert_same(const struct gfa_domain_spec *a, const struct gfa_domain_spec *b)
{
	unsigned int i;

	cr_assert_str_eq(a->name, b->name);
	cr_assert_eq(a->memory_bytes, b->memory_bytes, "%s memory", a->name);
	cr_assert_eq(a->stated_memory_bytes, b->stated_memory_bytes, "%s <memory>", a->name);
	cr_assert_eq(a->current_memory_bytes, b->current_memory_bytes, "%s current memory",
		     a->name);
	cr_assert_eq(a->device_memory_bytes, b->device_memory_bytes);
	cr_assert_eq(a->vcpus, b->vcpus, "%s vcpus", a->name);
	cr_assert_eq(a->current_vcpus, b->current_vcpus, "%s current vcpus", a->name);
	cr_assert_eq(a->nr_cells, b->nr_cells);
	for (i = 0; i < a->nr_cells; i++) {
		cr_assert_eq(a->cells[i].id, b->cells[i].id);
		cr_assert_eq(a->cells[i].memory_bytes, b->cells[i].memory_bytes);
		cr_assert_eq(a->cells[i].nr_cpus, b->cells[i].nr_cpus);
		cr_assert_arr_eq(a->cells[i].cpus, b->cells[i].cpus, sizeof(a->cells[i].cpus));
	}
	cr_assert_arr_eq(a->unnamed_cpus, b->unnamed_cpus, sizeof(a->unnamed_cpus));
	cr_assert_eq(a->hugepages, b->hugepages);
	cr_assert_eq(a->nr_pages, b->nr_pages);
	for (i = 0; i < a->nr_pages; i++) {
		cr_assert_eq(a->pages[i].size_bytes, b->pages[i].size_bytes);
		cr_assert_eq(a->pages[i].nodeset, b->pages[i].nodeset);
	}
	cr_assert_eq(a->source, b->source);
	cr_assert_eq(a->access, b->access);
}

/* Valid fixtures with their domain names, shared by the libvirt tests. */
static const struct {
	const char *file, *name;
} domain_fixtures[] = {
	{ "domain-numa2-hugepages.xml", "numa2" },
	{ "domain-pages-mixed.xml", "pages-mixed" },
	{ "domain-units.xml", "units" },
	{ "domain-dimm.xml", "dimm" },
	{ "domain-vcpus-no-cell.xml", "vcpus-no-cell" },
	{ "domain-nodeset-no-numa.xml", "nodeset-no-numa" },
};

/* ------------------------------------------------------------------ units */

Test(domain_units, parse_size_units)
{
	static const struct {
		const char *value, *unit;
		uint64_t bytes;
	} ok[] = {
		{ "7", "b", 7 },
		{ "7", "bytes", 7 },
		{ "7", "B", 7 },
		{ "7", "BYTES", 7 },
		{ "3", "KB", 3000 },
		{ "3", "kb", 3000 },
		{ "3", "k", 3072 },
		{ "3", "KiB", 3072 },
		{ "3", "kib", 3072 },
		{ "3", NULL, 3072 },
		{ "3", "", 3072 },
		{ "3", "MB", 3000000 },
		{ "3", "M", 3 * MIB },
		{ "3", "MiB", 3 * MIB },
		{ "3", "GB", 3000000000ull },
		{ "3", "G", 3 * GIB },
		{ "3", "GiB", 3 * GIB },
		{ "3", "Gb", 3000000000ull },
		{ "3", "TB", 3000000000000ull },
		{ "3", "T", 3ull << 40 },
		{ "3", "TiB", 3ull << 40 },
		{ "3", "PiB", 3ull << 50 },
		{ "15", "EiB", 15ull << 60 },
		{ "2", "EB", 2000000000000000000ull },
		{ " 12\n", "KiB", 12 * KIB },
		{ "0", "GiB", 0 },
		{ "18446744073709551615", "b", UINT64_MAX },
	};
	static const struct {
		const char *value, *unit;
		int rc;
	} bad[] = {
		{ "1", "foo", -EINVAL },
		{ "1", "GiBs", -EINVAL },
		{ "1", "KiBb", -EINVAL },
		{ "1", "x", -EINVAL },
		{ "-1", "KiB", -EINVAL },
		{ "1.5", "GiB", -EINVAL },
		{ "", "KiB", -EINVAL },
		{ "  ", "KiB", -EINVAL },
		{ "12abc", "b", -EINVAL },
		{ "0x10", "b", -EINVAL },
		{ "1 2", "b", -EINVAL },
		{ "18446744073709551616", "b", -ERANGE },
		{ "18446744073709551615", "KiB", -ERANGE },
		{ "16", "EiB", -ERANGE },
	};
	unsigned int i;
	uint64_t b;

	for (i = 0; i < ARRAY_SIZE(ok); i++) {
		b = 12345;
		cr_assert_eq(gfa_domain_parse_size(ok[i].value, ok[i].unit, &b), 0, "'%s' '%s'",
			     ok[i].value, ok[i].unit ? ok[i].unit : "(null)");
		cr_assert_eq(b, ok[i].bytes, "'%s' '%s' gave %llu", ok[i].value,
			     ok[i].unit ? ok[i].unit : "(null)", (unsigned long long)b);
	}
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		b = 12345;
		cr_assert_eq(gfa_domain_parse_size(bad[i].value, bad[i].unit, &b), bad[i].rc,
			     "'%s' '%s'", bad[i].value, bad[i].unit);
		cr_assert_eq(b, 12345, "output changed on error");
	}
	cr_assert_eq(gfa_domain_parse_size(NULL, "b", &b), -EFAULT);
	cr_assert_eq(gfa_domain_parse_size("1", "b", NULL), -EFAULT);
}

/* Each unit through a whole document: sizes are rounded up to a KiB. */
Test(domain_units, memory_element_units)
{
	static const struct {
		const char *value, *unit;
		uint64_t bytes;
	} cases[] = {
		{ "1", "GiB", GIB },
		{ "1", "G", GIB },
		{ "1", "GB", 1000000000ull + 512 },
		{ "2048", "MiB", 2 * GIB },
		{ "5", "MB", 4883 * KIB },
		{ "4", "KB", 4 * KIB },
		{ "4", "k", 4 * KIB },
		{ "1024", NULL, MIB },
		{ "1", "b", KIB },
		{ "1025", "bytes", 2 * KIB },
		{ "1", "T", 1ull << 40 },
		{ "1", "TB", 976562500ull * KIB },
	};
	struct gfa_domain_spec s;
	char xml[512], err[256];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		char unit[32] = "";

		if (cases[i].unit)
			snprintf(unit, sizeof(unit), " unit='%s'", cases[i].unit);
		snprintf(xml, sizeof(xml), "<domain><name>u</name><memory%s>%s</memory></domain>",
			 unit, cases[i].value);
		cr_assert_eq(gfa_domain_from_xml_string(xml, &s, err, sizeof(err)), 0, "%s: %s",
			     xml, err);
		cr_assert_eq(s.memory_bytes, cases[i].bytes, "%s gave %llu", xml,
			     (unsigned long long)s.memory_bytes);
		cr_assert_eq(s.current_memory_bytes, cases[i].bytes);
		cr_assert_eq(s.vcpus, 1, "libvirt's default is one vCPU");
	}
}

Test(domain_units, units_fixture)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(domain_load("domain-units.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.cells[0].memory_bytes, 976563 * KIB);
	cr_assert_eq(s.cells[1].memory_bytes, 488282 * KIB);
	cr_assert_eq(s.memory_bytes, 1464845 * KIB);
	cr_assert_eq(s.current_memory_bytes, 977 * KIB);
}

Test(domain_units, bad_unit_fixture)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(domain_load("domain-bad-unit.xml", &s, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "unknown unit 'GiBs'"), "%s", err);
	cr_assert_not_null(strstr(err, "domain-bad-unit.xml"), "%s", err);
}

/* -------------------------------------------------------------------- XML */

Test(domain_xml, numa2_hugepages)
{
	static const unsigned int cell0[] = { 0, 1 }, cell1[] = { 2, 3 };
	struct gfa_domain_spec s;
	char err[256], line[512];
	uint64_t page;

	cr_assert_eq(domain_load("domain-numa2-hugepages.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(s.name, "numa2");
	cr_assert_eq(s.memory_bytes, 4 * GIB);
	cr_assert_eq(s.current_memory_bytes, 3 * GIB);
	cr_assert_eq(s.device_memory_bytes, 0);
	cr_assert_eq(s.vcpus, 4);
	cr_assert_eq(s.current_vcpus, 2);
	cr_assert_eq(s.nr_cells, 2);
	cr_assert_eq(s.cells[0].id, 0);
	cr_assert_eq(s.cells[1].id, 1);
	cr_assert_eq(s.cells[0].memory_bytes, 2 * GIB);
	cr_assert_eq(s.cells[1].memory_bytes, 2 * GIB);
	cr_assert(domain_cell_cpus_are(&s.cells[0], cell0, 2));
	cr_assert(domain_cell_cpus_are(&s.cells[1], cell1, 2));
	cr_assert(s.hugepages);
	cr_assert_eq(s.nr_pages, 1);
	cr_assert_eq(s.pages[0].size_bytes, GIB);
	cr_assert_eq(s.pages[0].nodeset, 0x3);
	cr_assert_eq(s.source, GFA_DOMAIN_SOURCE_MEMFD);
	cr_assert_eq(s.access, GFA_DOMAIN_ACCESS_SHARED);

	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), 0);
	cr_assert_eq(page, GIB);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 1, &page), 0);
	cr_assert_eq(page, GIB);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 2, &page), -ENOENT);

	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "numa2: memory 4 GiB (current 3 GiB), 4 vCPUs "
			       "(2 current), 2 NUMA cells [0: cpus 0-1, 2 GiB; 1: cpus "
			       "2-3, 2 GiB], hugepages 1 GiB (cells 0-1), source memfd, "
			       "access shared");
}

Test(domain_xml, per_nodeset_pages)
{
	static const unsigned int cell0[] = { 0, 1, 3, 5 }, cell1[] = { 2, 4 };
	struct gfa_domain_spec s;
	char err[256], line[512];
	uint64_t page;

	cr_assert_eq(domain_load("domain-pages-mixed.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.nr_cells, 3);
	cr_assert_eq(s.memory_bytes, 3 * GIB);
	cr_assert_eq(s.cells[0].memory_bytes, GIB);
	cr_assert_eq(s.cells[1].memory_bytes, 1536 * MIB);
	cr_assert_eq(s.cells[2].memory_bytes, 512 * MIB);
	cr_assert(domain_cell_cpus_are(&s.cells[0], cell0, 4));
	cr_assert(domain_cell_cpus_are(&s.cells[1], cell1, 2));
	cr_assert(domain_cell_cpus_are(&s.cells[2], NULL, 0));
	cr_assert_eq(s.nr_pages, 3);
	cr_assert_eq(s.pages[0].size_bytes, GIB);
	cr_assert_eq(s.pages[0].nodeset, 1);
	cr_assert_eq(s.pages[1].size_bytes, 2 * MIB);
	cr_assert_eq(s.pages[1].nodeset, 0);
	cr_assert_eq(s.pages[2].nodeset, 4);
	cr_assert_eq(s.source, GFA_DOMAIN_SOURCE_FILE);
	cr_assert_eq(s.access, GFA_DOMAIN_ACCESS_DEFAULT);

	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), 0);
	cr_assert_eq(page, GIB);
	page = 0;
	cr_assert_eq(gfa_domain_cell_page_size(&s, 1, &page), 0);
	cr_assert_eq(page, 2 * MIB, "cell 1 falls back to the page without nodeset");
	cr_assert_eq(gfa_domain_cell_page_size(&s, 2, &page), 0);
	cr_assert_eq(page, 2 * MIB);

	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "pages-mixed: memory 3 GiB, 6 vCPUs, 3 NUMA cells "
			       "[0: cpus 0-1,3,5, 1 GiB; 1: cpus 2,4, 1536 MiB; 2: cpus "
			       "none, 512 MiB], hugepages 1 GiB (cells 0), 2 MiB (default), "
			       "2 MiB (cells 2), source file");
}

Test(domain_xml, dimm_and_default_hugepages)
{
	struct gfa_domain_spec s;
	char err[256], line[512];
	uint64_t page = 1;

	cr_assert_eq(domain_load("domain-dimm.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.memory_bytes, 3 * GIB);
	cr_assert_eq(s.device_memory_bytes, GIB);
	cr_assert_eq(s.cells[0].memory_bytes, 2 * GIB);
	cr_assert(s.hugepages);
	cr_assert_eq(s.nr_pages, 0);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), 0);
	cr_assert_eq(page, 0, "bare <hugepages/> means the host default size");
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "dimm: memory 3 GiB incl. 1 GiB memory devices, "
			       "2 vCPUs, 1 NUMA cell [0: cpus 0-1, 2 GiB], hugepages "
			       "host default size");
}

Test(domain_xml, no_numa_no_hugepages)
{
	struct gfa_domain_spec s;
	char err[256], line[256];
	uint64_t page = 77;

	cr_assert_eq(gfa_domain_from_xml_string(
			     "<domain type='kvm'><name>plain</name>"
			     "<memory unit='KiB'>1000</memory><vcpu>3</vcpu></domain>",
			     &s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.nr_cells, 0);
	cr_assert_not(s.hugepages);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), -ENODATA);
	cr_assert_eq(page, 77);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 1, &page), -ENOENT);
	cr_assert_eq(gfa_domain_format(&s, line, sizeof(line)),
		     (int)strlen("plain: memory 1000 KiB, 3 vCPUs, no NUMA cells, "
				 "no hugepages"));
	cr_assert_str_eq(line, "plain: memory 1000 KiB, 3 vCPUs, no NUMA cells, "
			       "no hugepages");
}

Test(domain_xml, format_errors)
{
	struct gfa_domain_spec s;
	char err[256], small[16];

	cr_assert_eq(domain_load("domain-numa2-hugepages.xml", &s, err, sizeof(err)), 0);
	cr_assert_eq(gfa_domain_format(&s, small, sizeof(small)), -ENOSPC);
	cr_assert_eq(strlen(small), sizeof(small) - 1, "truncated, NUL-terminated");
	cr_assert_eq(strncmp(small, "numa2: memory 4", sizeof(small) - 1), 0);
	cr_assert_eq(gfa_domain_format(NULL, small, sizeof(small)), -EFAULT);
	cr_assert_eq(gfa_domain_format(&s, NULL, 10), -EFAULT);
	cr_assert_eq(gfa_domain_format(&s, small, 0), -EINVAL);
	cr_assert_eq(gfa_domain_format_size(1, NULL, 8), -EFAULT);
	cr_assert_eq(gfa_domain_format_size(1, small, 0), -EINVAL);
}

Test(domain_xml, bad_xml)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(domain_load("domain-bad.xml", &s, err, sizeof(err)), -EBADMSG);
	cr_assert_not_null(strstr(err, "domain-bad.xml"), "%s", err);
	cr_assert_not_null(strstr(err, "line 5: not well-formed XML, </domian> does not "
				       "close <domain>; accepted: </domain>"),
			   "%s", err);
	cr_assert_null(strstr(strstr(err, "line 5") + 1, "line"), "one line number: %s", err);
	cr_assert_eq(gfa_domain_from_xml_string("", &s, err, sizeof(err)), -EBADMSG);
	cr_assert_eq(gfa_domain_from_xml_string("<domain><name>x</name>", &s, NULL, 0), -EBADMSG);
}

Test(domain_xml, not_a_domain)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(domain_load("domain-notdomain.xml", &s, err, sizeof(err)), -EBADMSG);
	cr_assert_not_null(strstr(err, "root element <network>: not <domain>"), "%s", err);
	cr_assert_not_null(strstr(err, "domain-notdomain.xml"), "%s", err);
}

Test(domain_xml, missing_file)
{
	struct gfa_domain_spec s;
	char err[256], path[PATH_MAX];

	domain_data("no-such-domain.xml", path, sizeof(path));
	cr_assert_eq(gfa_domain_from_xml_file(path, &s, err, sizeof(err)), -ENOENT);
	cr_assert_not_null(strstr(err, path), "%s", err);
	cr_assert_not_null(strstr(err, "No such file"), "%s", err);
}

Test(domain_xml, directory_and_oversized_input)
{
	struct gfa_domain_spec s;
	char err[256], path[PATH_MAX];
	char *big;

	domain_data("", path, sizeof(path));
	cr_assert_eq(gfa_domain_from_xml_file(path, &s, err, sizeof(err)), -EISDIR, "%s", err);
	/* A non-regular file that never ends: the reader must stop at the limit. */
	cr_assert_eq(gfa_domain_from_xml_file("/dev/zero", &s, err, sizeof(err)), -EFBIG, "%s",
		     err);
	big = malloc(GFA_DOMAIN_XML_MAX + 2);
	cr_assert_not_null(big);
	memset(big, ' ', GFA_DOMAIN_XML_MAX + 1);
	big[GFA_DOMAIN_XML_MAX + 1] = '\0';
	cr_assert_eq(gfa_domain_from_xml_string(big, &s, err, sizeof(err)), -EFBIG);
	free(big);
}

/*
 * NUMA cells size the memory, whatever <memory> says: libvirt's QEMU driver defines
 * and boots such a domain with the cells' sum (plus memory devices), and the summary
 * says which figure was used and why.
 */
Test(domain_xml, numa_cells_size_the_memory)
{
	struct gfa_domain_spec s;
	char err[256], line[512];

	cr_assert_eq(domain_load("domain-inconsistent.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.memory_bytes, 4 * GIB);
	cr_assert_eq(s.stated_memory_bytes, 8 * GIB);
	cr_assert_eq(s.current_memory_bytes, 4 * GIB);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_not_null(strstr(line, "memory 4 GiB (the NUMA cells, as libvirt's QEMU "
					"driver sizes it; <memory> says 8 GiB)"),
			   "%s", line);
	/* the devices count on top of the cells; a too small <memory> is no error either */
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>1</memory><vcpu>2</vcpu>"
			"<cpu><numa><cell id='0' cpus='0-1' memory='2' unit='GiB'/></numa></cpu>"
			"<devices><memory model='dimm'><target><size unit='MiB'>512</size></target>"
			"</memory></devices></domain>",
			&s, err, sizeof(err)),
		0, "%s", err);
	cr_assert_eq(s.memory_bytes, 2 * GIB + 512 * MIB);
	cr_assert_eq(s.device_memory_bytes, 512 * MIB);
	cr_assert_eq(s.stated_memory_bytes, GIB);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_not_null(strstr(line,
				  "memory 2560 MiB (the NUMA cells plus memory devices"
				  ", as libvirt's QEMU driver sizes it; <memory> says 1 GiB) incl. "
				  "512 MiB memory devices"),
			   "%s", line);
	/* a matching <memory> is not remarked on */
	cr_assert_eq(domain_load("domain-dimm.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.stated_memory_bytes, s.memory_bytes);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_null(strstr(line, "says"), "%s", line);
}

/* Without NUMA cells <memory> stands; devices beyond it are refused in its units. */
Test(domain_xml, devices_beyond_memory_in_human_units)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>2</memory>"
			"<devices><memory model='dimm'><target><size unit='GiB'>3</size></target>"
			"</memory></devices></domain>",
			&s, err, sizeof(err)),
		-EINVAL);
	cr_assert_not_null(strstr(err, "memory devices (3 GiB) exceed <memory> (2 GiB)"), "%s",
			   err);
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='MiB'>1536</memory>"
			"<devices><memory model='dimm'><target><size unit='MiB'>1536</size></target>"
			"</memory></devices></domain>",
			&s, err, sizeof(err)),
		-EINVAL);
	cr_assert_not_null(strstr(err, "all memory is in memory devices (1536 MiB)"), "%s", err);
	cr_assert_eq(gfa_domain_from_xml_string("<domain><name>d</name><memory unit='GiB'>"
						"2</memory></domain>",
						&s, err, sizeof(err)),
		     0);
	cr_assert_eq(s.memory_bytes, 2 * GIB);
	cr_assert_eq(s.stated_memory_bytes, 2 * GIB);
}

Test(domain_xml, zero_vcpus)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(domain_load("domain-zero-vcpus.xml", &s, err, sizeof(err)), -EINVAL);
	cr_assert_not_null(strstr(err, "<vcpu>: 0 is below 1; accepted: 1-1024"), "%s", err);
}

Test(domain_xml, output_untouched_on_error)
{
	struct gfa_domain_spec s, before;
	char err[8];

	memset(&s, 0xa5, sizeof(s));
	memcpy(&before, &s, sizeof(s));
	cr_assert_eq(domain_load("domain-zero-vcpus.xml", &s, err, sizeof(err)), -EINVAL);
	cr_assert_arr_eq(&s, &before, sizeof(s));
	cr_assert_eq(strlen(err), sizeof(err) - 1, "message truncated to errlen");
	cr_assert_eq(domain_load("domain-bad.xml", &s, NULL, 0), -EBADMSG);
	cr_assert_arr_eq(&s, &before, sizeof(s));
}

Test(domain_xml, null_arguments)
{
	struct gfa_domain_spec s;

	cr_assert_eq(gfa_domain_from_xml_string(NULL, &s, NULL, 0), -EFAULT);
	cr_assert_eq(gfa_domain_from_xml_string("<domain/>", NULL, NULL, 0), -EFAULT);
	cr_assert_eq(gfa_domain_from_xml_file(NULL, &s, NULL, 0), -EFAULT);
	cr_assert_eq(gfa_domain_from_libvirt("test:///default", NULL, &s, NULL, 0), -EFAULT);
	cr_assert_eq(gfa_domain_cell_page_size(NULL, 0, &(uint64_t){ 0 }), -EFAULT);
}

/* Build a domain with @vcpu, @numa and @backing spliced in. */
static int domain_try(const char *vcpu, const char *mem, const char *numa, const char *backing,
		      struct gfa_domain_spec *s, char *err, size_t errlen)
{
	char xml[4096];

	snprintf(xml, sizeof(xml),
		 "<domain type='kvm'><name>t</name>%s%s"
		 "<memoryBacking>%s</memoryBacking><cpu><numa>%s</numa></cpu></domain>",
		 mem, vcpu, backing, numa);
	return gfa_domain_from_xml_string(xml, s, err, errlen);
}

#define CELLS2                                            \
	"<cell id='0' cpus='0-1' memory='1' unit='GiB'/>" \
	"<cell id='1' cpus='2-3' memory='1' unit='GiB'/>"
#define MEM2  "<memory unit='GiB'>2</memory>"
#define VCPU4 "<vcpu>4</vcpu>"

Test(domain_xml, invalid_content)
{
	static const struct {
		const char *vcpu, *mem, *numa, *backing;
		int rc;
		const char *msg;
	} cases[] = {
		{ "<vcpu>3</vcpu>", MEM2, CELLS2, "", -EINVAL,
		  "<cell id='1' cpus='2-3'>: names vCPU 3, but <vcpu> is 3" },
		{ VCPU4, MEM2,
		  "<cell id='0' cpus='0-2' memory='1' unit='GiB'/>"
		  "<cell id='1' cpus='2-3' memory='1' unit='GiB'/>",
		  "", -EINVAL, "shares vCPU 2 with cell 0" },
		{ VCPU4, MEM2,
		  "<cell id='0' cpus='0-1' memory='1' unit='GiB'/>"
		  "<cell id='2' cpus='2-3' memory='1' unit='GiB'/>",
		  "", -EINVAL, "<numa>: no <cell id='1'>" },
		{ VCPU4, MEM2,
		  "<cell id='1' cpus='0-1' memory='1' unit='GiB'/>"
		  "<cell id='1' cpus='2-3' memory='1' unit='GiB'/>",
		  "", -EINVAL, "appears twice" },
		{ VCPU4, MEM2, "", "", -EINVAL, "no <cell>" },
		{ VCPU4, MEM2, "<cell id='64' memory='2' unit='GiB'/>", "", -ERANGE,
		  "<cell id>: larger than 63" },
		{ VCPU4, MEM2, "<cell id='-1' memory='2' unit='GiB'/>", "", -EINVAL,
		  "<cell id>: '-1' is not a whole number" },
		{ VCPU4, MEM2, "<cell id='0' cpus='3-2' memory='2' unit='GiB'/>", "", -EINVAL,
		  "<cell id='0' cpus='3-2'>: not a list of vCPUs" },
		{ VCPU4, MEM2, "<cell id='0' cpus='' memory='2' unit='GiB'/>", "", -EINVAL,
		  "not a list of vCPUs" },
		{ VCPU4, MEM2, "<cell id='0' cpus='0,,1' memory='2' unit='GiB'/>", "", -EINVAL,
		  "not a list of vCPUs" },
		{ VCPU4, MEM2, "<cell id='0' cpus='1024' memory='2' unit='GiB'/>", "", -ERANGE,
		  "names a vCPU above 1023" },
		{ VCPU4, MEM2, "<cell id='0' cpus='0-3'/>", "", -EINVAL,
		  "<cell id='0' memory>: missing" },
		{ VCPU4, "<memory>0</memory>", "<cell id='0' memory='0'/>", "", -EINVAL,
		  "<cell id='0' memory>: zero" },
		{ VCPU4, MEM2, CELLS2,
		  "<hugepages><page size='1' unit='G' "
		  "nodeset='2'/></hugepages>",
		  -EINVAL,
		  "hugepage 1 (1 GiB, nodeset='2'): names NUMA cell 2, which does not exist; "
		  "accepted: cells 0-1" },
		{ VCPU4, MEM2, CELLS2,
		  "<hugepages><page size='1' unit='G'/><page "
		  "size='2' unit='M'/></hugepages>",
		  -EINVAL,
		  "hugepage 2 (2 MiB, no nodeset): a second page without nodeset besides "
		  "hugepage 1 (1 GiB, no nodeset)" },
		{ VCPU4, MEM2, CELLS2,
		  "<hugepages><page size='1' unit='G' "
		  "nodeset='0-1'/><page size='2' unit='M' nodeset='1'/></hugepages>",
		  -EINVAL, "hugepage 2 (2 MiB, nodeset='1'): shares cell 1 with hugepage 1" },
		{ VCPU4, MEM2, CELLS2,
		  "<hugepages><page size='0' nodeset='0'/>"
		  "</hugepages>",
		  -EINVAL, "hugepage 1 (0 bytes, nodeset='0'): size zero" },
		{ VCPU4, MEM2, CELLS2, "<hugepages><page nodeset='0'/></hugepages>", -EINVAL,
		  "hugepage 1 <page size>: missing" },
		{ VCPU4, MEM2, CELLS2,
		  "<hugepages><page size='2' unit='M' "
		  "nodeset='x'/></hugepages>",
		  -EINVAL, "not a list of cell ids" },
		{ VCPU4, MEM2, CELLS2, "<source type='shm'/>", -EINVAL,
		  "<source type='shm'>: unknown type; accepted: anonymous, file, memfd" },
		{ VCPU4, MEM2, CELLS2, "<access mode='both'/>", -EINVAL,
		  "<access mode='both'>: unknown mode; accepted: shared, private" },
		{ "<vcpu current='5'>4</vcpu>", MEM2, CELLS2, "", -EINVAL,
		  "<vcpu current='5'>: current vCPUs exceed the maximum, 4" },
		{ "<vcpu current='0'>4</vcpu>", MEM2, CELLS2, "", -EINVAL,
		  "<vcpu current>: 0 is below 1" },
		{ "<vcpu>1025</vcpu>", MEM2, CELLS2, "", -ERANGE, "<vcpu>: larger than 1024" },
		{ "<vcpu>four</vcpu>", MEM2, CELLS2, "", -EINVAL,
		  "<vcpu>: 'four' is not a whole number" },
		{ VCPU4, "<memory>99999999999999999999</memory>", CELLS2, "", -ERANGE,
		  "<memory>: larger than 8 EiB" },
		{ VCPU4, "<memory unit='EiB'>16</memory>", CELLS2, "", -ERANGE,
		  "<memory>: larger than 8 EiB" },
		{ VCPU4, "<memory unit='GiB'>2.0</memory>", CELLS2, "", -EINVAL,
		  "<memory>: '2.0' is not a whole number" },
	};
	struct gfa_domain_spec s;
	char err[256];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		err[0] = '\0';
		cr_assert_eq(domain_try(cases[i].vcpu, cases[i].mem, cases[i].numa,
					cases[i].backing, &s, err, sizeof(err)),
			     cases[i].rc, "case %u: %s", i, err);
		cr_assert_not_null(strstr(err, cases[i].msg), "case %u: '%s' lacks '%s'", i, err,
				   cases[i].msg);
		domain_assert_one_form(err, "domain XML string: ");
	}
}

/* A hugepage size no host has is imported (libvirt defines it) and refused at start. */
Test(domain_xml, odd_hugepage_size_is_refused_at_start)
{
	char dir[] = "/tmp/gfa-hugepages-XXXXXX", sub[PATH_MAX], err[512];
	static const char *const sizes[] = { "hugepages-2048kB", "hugepages-1048576kB" };
	struct gfa_domain_spec s;
	uint64_t page = 0;

	cr_assert_not_null(mkdtemp(dir));
	for (unsigned int i = 0; i < 2; i++) {
		snprintf(sub, sizeof(sub), "%s/%s", dir, sizes[i]);
		cr_assert_eq(mkdir(sub, 0755), 0);
	}
	cr_assert_eq(domain_load("domain-hugepage-5m.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), 0);
	cr_assert_eq(page, 5 * MIB);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), -EOPNOTSUPP);
	cr_assert_not_null(strstr(err, "domain-hugepage-5m.xml': hugepage 1 (5 MiB, nodeset='0'"
				       "): 5 MiB is not a page size of this host (it has "),
			   "%s", err);
	domain_assert_one_form(err, "domain XML file '");
	cr_assert(strstr(err, "2 MiB") && strstr(err, "1 GiB"), "%s", err);
	/* sizes the host has, the base page and the host's default size start */
	cr_assert_eq(domain_load("domain-numa2-hugepages.xml", &s, err, sizeof(err)), 0);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(domain_load("domain-dimm.xml", &s, err, sizeof(err)), 0);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(domain_try(VCPU4, MEM2, CELLS2,
				"<hugepages><page size='4' unit='KiB'/>"
				"</hugepages>",
				&s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), 0, "%s", err);
	/* without the 1 GiB directory the 1 GiB domain is refused, naming the default; 2 MiB
	 * is gfa's own block, with or without the host's directory for it */
	snprintf(sub, sizeof(sub), "%s/%s", dir, sizes[1]);
	rmdir(sub);
	snprintf(sub, sizeof(sub), "%s/%s", dir, sizes[0]);
	rmdir(sub);
	cr_assert_eq(domain_try(VCPU4, MEM2, CELLS2,
				"<hugepages><page size='2' unit='M'/>"
				"</hugepages>",
				&s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(mkdir(sub, 0755), 0);
	cr_assert_eq(domain_try(VCPU4, MEM2, CELLS2,
				"<hugepages><page size='1' unit='G'/>"
				"</hugepages>",
				&s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(gfa_domain_check_pages(&s, dir, err, sizeof(err)), -EOPNOTSUPP);
	cr_assert_not_null(strstr(err, "domain XML string: hugepage 1 (1 GiB, no nodeset): 1 GiB "
				       "is not a page size of this host (it has 2 MiB)"),
			   "%s", err);
	cr_assert_eq(gfa_domain_check_pages(NULL, dir, err, sizeof(err)), -EFAULT);
	snprintf(sub, sizeof(sub), "%s/%s", dir, sizes[0]);
	rmdir(sub);
	rmdir(dir);
}

Test(domain_xml, missing_elements)
{
	struct gfa_domain_spec s;
	char err[256], name[GFA_DOMAIN_NAME_MAX + 64];

	cr_assert_eq(gfa_domain_from_xml_string("<domain><memory>1</memory></domain>", &s, err,
						sizeof(err)),
		     -EBADMSG);
	cr_assert_not_null(strstr(err, "<name>: missing"), "%s", err);
	/* a missing <memory> and a zero one are told apart */
	cr_assert_eq(gfa_domain_from_xml_string("<domain><name>x</name></domain>", &s, err,
						sizeof(err)),
		     -EINVAL);
	cr_assert_str_eq(err, "domain XML string: <memory>: missing, and no NUMA cells give "
			      "the size; accepted: a <memory> above 0, or <numa> cells");
	cr_assert_eq(gfa_domain_from_xml_string("<domain><name>x</name><memory>0</memory>"
						"</domain>",
						&s, err, sizeof(err)),
		     -EINVAL);
	cr_assert_str_eq(err, "domain XML string: <memory>: zero; accepted: a size above 0");

	memset(name, 'n', sizeof(name));
	memcpy(name, "<domain><name>", 14);
	strcpy(name + 14 + GFA_DOMAIN_NAME_MAX, "</name><memory>1</memory></domain>");
	cr_assert_eq(gfa_domain_from_xml_string(name, &s, err, sizeof(err)), -ERANGE);
}

Test(domain_xml, libvirt_defaults)
{
	struct gfa_domain_spec s;
	char err[256];

	/* No <memory> with NUMA cells: libvirt takes the cells' sum. */
	cr_assert_eq(domain_try(VCPU4, "", CELLS2, "", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.memory_bytes, 2 * GIB);
	/* A balloon target above the maximum is clamped, as libvirt does. */
	cr_assert_eq(domain_try(VCPU4,
				MEM2 "<currentMemory unit='GiB'>9"
				     "</currentMemory>",
				CELLS2, "", &s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.current_memory_bytes, 2 * GIB);
	/* Blanks and exclusions in cpu lists, like virBitmapParse. */
	cr_assert_eq(domain_try(VCPU4, "<memory>2</memory>",
				"<cell id='0' cpus=' 0 - 3 , ^1 ' memory='2'/>", "", &s, err,
				sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.cells[0].cpus[0], 0xf, "vCPU 1 is in no cell: cell 0 gets it");
	cr_assert_eq(s.unnamed_cpus[0], 0x2);
	cr_assert_eq(s.cells[0].nr_cpus, 4);
}

/* ---------------------------------------------------------------- libvirt */

Test(domain_libvirt, default_test_domain)
{
	struct gfa_domain_spec s;
	virConnectPtr conn;
	virDomainPtr dom;
	virDomainInfo info;
	char err[256];

	cr_assert_eq(gfa_domain_from_libvirt("test:///default", "test", &s, err, sizeof(err)), 0,
		     "%s", err);

	/* What libvirt itself reports for the built-in domain. */
	conn = virConnectOpenReadOnly("test:///default");
	cr_assert_not_null(conn, "libvirt test driver unavailable");
	dom = virDomainLookupByName(conn, "test");
	cr_assert_not_null(dom);
	cr_assert_eq(virDomainGetInfo(dom, &info), 0);
	cr_assert_str_eq(s.name, virDomainGetName(dom));
	cr_assert_eq(s.memory_bytes, (uint64_t)virDomainGetMaxMemory(dom) * KIB);
	cr_assert_eq(s.current_memory_bytes, (uint64_t)info.memory * KIB);
	cr_assert_eq(s.vcpus, (unsigned int)virDomainGetVcpusFlags(dom, VIR_DOMAIN_VCPU_MAXIMUM));
	cr_assert_eq(s.current_vcpus, info.nrVirtCpu);
	virDomainFree(dom);
	virConnectClose(conn);

	/* Fixed facts of libvirt's built-in test domain (checked with libvirt 9). */
	cr_assert_str_eq(s.name, "test");
	cr_assert_eq(s.vcpus, 2);
	cr_assert_eq(s.memory_bytes, 8 * GIB);
	cr_assert_eq(s.current_memory_bytes, 2 * GIB);
	cr_assert_eq(s.nr_cells, 0);
	cr_assert_not(s.hugepages);
	cr_assert_eq(s.source, GFA_DOMAIN_SOURCE_DEFAULT);
}

Test(domain_libvirt, unknown_domain)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(gfa_domain_from_libvirt("test:///default", "no-such-vm", &s, err, sizeof(err)),
		     -ENOENT);
	cr_assert_not_null(strstr(err, "no domain named 'no-such-vm'"), "%s", err);
	cr_assert_not_null(strstr(err, "test:///default"), "%s", err);
}

Test(domain_libvirt, invalid_uri)
{
	struct gfa_domain_spec s;
	char err[256];

	cr_assert_eq(gfa_domain_from_libvirt("bogus:///nothing", "test", &s, err, sizeof(err)),
		     -ECONNREFUSED);
	cr_assert_not_null(strstr(err, "cannot connect to 'bogus:///nothing'"), "%s", err);
	cr_assert_eq(gfa_domain_from_libvirt("not a uri", "test", &s, err, sizeof(err)),
		     -ECONNREFUSED);
	cr_assert_eq(gfa_domain_from_libvirt("test:///no/such/node.xml", "test", &s, err,
					     sizeof(err)),
		     -ECONNREFUSED);
	cr_assert_not_null(strstr(err, "/no/such/node.xml"), "%s", err);
}

/* libvirt's errors must reach err, not stderr. */
Test(domain_libvirt, quiet_on_stderr, .init = cr_redirect_stderr)
{
	struct gfa_domain_spec s;
	char err[256];

	gfa_domain_from_libvirt("bogus:///nothing", "test", &s, err, sizeof(err));
	gfa_domain_from_libvirt("test:///default", "no-such-vm", &s, err, sizeof(err));
	gfa_domain_from_libvirt("test:///no/such/node.xml", "x", &s, err, sizeof(err));
	domain_load("domain-bad.xml", &s, err, sizeof(err));
	fflush(stderr);
	cr_assert_stderr_eq_str("");
}

/*
 * test:///default state is shared by the connections of one process while
 * one stays open, so domains defined on our connection are visible to
 * gfa_domain_from_libvirt's own read-only connection.
 */
Test(domain_libvirt, define_then_import)
{
	struct gfa_domain_spec from_virt, from_file;
	virDomainPtr doms[ARRAY_SIZE(domain_fixtures)];
	virConnectPtr conn;
	virDomainPtr bad;
	char err[256], *xml;
	unsigned int i;

	conn = virConnectOpen("test:///default");
	cr_assert_not_null(conn);
	for (i = 0; i < ARRAY_SIZE(doms); i++) {
		xml = domain_slurp(domain_fixtures[i].file);
		doms[i] = virDomainDefineXML(conn, xml);
		free(xml);
		cr_assert_not_null(doms[i], "define %s", domain_fixtures[i].file);

		cr_assert_eq(gfa_domain_from_libvirt("test:///default", domain_fixtures[i].name,
						     &from_virt, err, sizeof(err)),
			     0, "%s", err);
		cr_assert_eq(domain_load(domain_fixtures[i].file, &from_file, err, sizeof(err)), 0,
			     "%s", err);
		domain_assert_same(&from_virt, &from_file);
	}

	/*
	 * libvirt's test driver stores a <memory> the NUMA cells contradict (its QEMU
	 * driver would rewrite it): the cells size it, and the API's figure is kept.
	 */
	xml = domain_slurp("domain-inconsistent.xml");
	bad = virDomainDefineXML(conn, xml);
	free(xml);
	cr_assert_not_null(bad);
	cr_assert_eq(gfa_domain_from_libvirt("test:///default", "inconsistent", &from_virt, err,
					     sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(from_virt.memory_bytes, 4 * GIB);
	cr_assert_eq(from_virt.stated_memory_bytes, (uint64_t)virDomainGetMaxMemory(bad) * KIB);
	cr_assert_eq(from_virt.stated_memory_bytes, 8 * GIB);
	virDomainUndefine(bad);
	virDomainFree(bad);
	/* libvirt defines a domain with a hugepage size no host has; so does the import */
	xml = domain_slurp("domain-hugepage-5m.xml");
	bad = virDomainDefineXML(conn, xml);
	free(xml);
	cr_assert_not_null(bad, "libvirt refused to define a 5 MiB hugepage domain");
	cr_assert_eq(gfa_domain_from_libvirt("test:///default", "hugepage-5m", &from_virt, err,
					     sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(from_virt.pages[0].size_bytes, 5 * MIB);
	virDomainUndefine(bad);
	virDomainFree(bad);
	for (i = 0; i < ARRAY_SIZE(doms); i++) {
		virDomainUndefine(doms[i]);
		virDomainFree(doms[i]);
	}
	virConnectClose(conn);
}

/* A test driver node file gives a daemon-less multi-domain URI. */
Test(domain_libvirt, testnode_uri)
{
	struct gfa_domain_spec from_virt, from_file;
	char node[PATH_MAX], uri[PATH_MAX + 16], err[512];
	unsigned int i;

	domain_data("testnode.xml", node, sizeof(node));
	snprintf(uri, sizeof(uri), "test://%s", node);
	for (i = 0; i < ARRAY_SIZE(domain_fixtures); i++) {
		cr_assert_eq(gfa_domain_from_libvirt(uri, domain_fixtures[i].name, &from_virt, err,
						     sizeof(err)),
			     0, "%s", err);
		cr_assert_eq(domain_load(domain_fixtures[i].file, &from_file, err, sizeof(err)), 0,
			     "%s", err);
		domain_assert_same(&from_virt, &from_file);
	}
	cr_assert_eq(gfa_domain_from_libvirt(uri, "small", &from_virt, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(from_virt.memory_bytes, 512 * MIB);
	cr_assert_eq(from_virt.vcpus, 1);
	cr_assert_eq(gfa_domain_from_libvirt(uri, "test", &from_virt, err, sizeof(err)), -ENOENT,
		     "the node file replaces the built-in domain");
}

struct domain_worker {
	char uri[PATH_MAX + 16];
	char file[PATH_MAX];
	int failures;
};

static void *domain_worker_run(void *arg)
{
	struct domain_worker *w = arg;
	struct gfa_domain_spec a, b;
	char err[512];
	int i;

	for (i = 0; i < 10; i++) {
		if (gfa_domain_from_libvirt(w->uri, "numa2", &a, err, sizeof(err)) ||
		    gfa_domain_from_xml_file(w->file, &b, err, sizeof(err)) ||
		    a.memory_bytes != b.memory_bytes || a.nr_cells != b.nr_cells ||
		    a.pages[0].size_bytes != b.pages[0].size_bytes)
			w->failures++;
		if (gfa_domain_from_libvirt("test:///default", "no-such-vm", &a, err,
					    sizeof(err)) != -ENOENT)
			w->failures++;
	}
	return NULL;
}

/* The import functions share no state: run them from several threads. */
Test(domain_libvirt, concurrent_imports)
{
	struct domain_worker w[4];
	pthread_t t[4];
	char node[PATH_MAX];
	int i;

	/* GLib's slice allocator (inside libvirt) confuses TSan; plain malloc. */
	setenv("G_SLICE", "always-malloc", 0);
	domain_data("testnode.xml", node, sizeof(node));
	for (i = 0; i < 4; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		snprintf(w[i].uri, sizeof(w[i].uri), "test://%s", node);
		domain_data("domain-numa2-hugepages.xml", w[i].file, sizeof(w[i].file));
		cr_assert_eq(pthread_create(&t[i], NULL, domain_worker_run, &w[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].failures, 0, "thread %d had %d failures", i, w[i].failures);
	}
}

/* A spec built by the caller with counts beyond its arrays is refused, not read past. */
Test(domain_xml, caller_built_spec_with_counts_too_large)
{
	struct gfa_domain_spec *s = calloc(1, sizeof(*s));
	char buf[256];
	uint64_t bytes = 0;

	cr_assert_not_null(s);
	s->memory_bytes = 1 << 30;
	s->nr_cells = GFA_DOMAIN_MAX_CELLS + 1;
	cr_assert_eq(gfa_domain_format(s, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(gfa_domain_cell_page_size(s, 0, &bytes), -EINVAL);
	s->nr_cells = 0;
	s->hugepages = true;
	s->nr_pages = GFA_DOMAIN_MAX_PAGES + 1;
	cr_assert_eq(gfa_domain_format(s, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(gfa_domain_cell_page_size(s, 0, &bytes), -EINVAL);
	s->nr_pages = 0;
	cr_assert_gt(gfa_domain_format(s, buf, sizeof(buf)), 0);
	free(s);
}

static long maxrss_kib(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/*
 * ~70 KB of XML: one 64 KiB internal entity referenced 2000 times.  libxml2
 * keeps the references (no XML_PARSE_NOENT) and xmlNodeGetContent() expands
 * them all, so this costs 128+ MiB; a 16 MiB document costs terabytes.
 */
Test(domain_xml, entity_expansion_is_refused)
{
	const size_t ent = 64 * 1024, refs = 2000;
	char *xml = malloc(ent + refs * 3 + 256), *p = xml, err[256] = "";
	struct gfa_domain_spec s;
	long before, grew;
	size_t i;
	int rc;

	cr_assert_not_null(xml);
	p += sprintf(p, "<!DOCTYPE domain [<!ENTITY a \"");
	memset(p, '7', ent);
	p += ent;
	p += sprintf(p, "\">]><domain><name>q</name><memory>");
	for (i = 0; i < refs; i++, p += 3)
		memcpy(p, "&a;", 3);
	strcpy(p, "</memory></domain>");
	before = maxrss_kib();
	rc = gfa_domain_from_xml_string(xml, &s, err, sizeof(err));
	grew = maxrss_kib() - before;
	cr_assert_neq(rc, 0);
	cr_assert_lt(grew, 32 * 1024,
		     "%zu bytes of XML raised peak RSS by %ld KiB "
		     "(rc %d)",
		     strlen(xml), grew, rc);
	free(xml);
}

/* libvirt reads only the first <numa> of a <cpu> (./cpu/numa[1]/cell). */
Test(domain_libvirt, a_second_numa_block_is_read_as_libvirt_reads_it)
{
	static const char xml[] =
		"<domain type='test'><name>twonuma</name><os><type>hvm</type></os>"
		"<memory unit='GiB'>2</memory><vcpu>4</vcpu><cpu>"
		"<numa><cell id='0' cpus='0-1' memory='1' unit='GiB'/></numa>"
		"<numa><cell id='1' cpus='2-3' memory='1' unit='GiB'/></numa>"
		"</cpu></domain>";
	struct gfa_domain_spec from_file, from_virt;
	char err[256] = "", err2[256] = "";
	virConnectPtr conn;
	virDomainPtr dom;
	int rf, rv;

	conn = virConnectOpen("test:///default");
	cr_assert_not_null(conn);
	dom = virDomainDefineXML(conn, xml);
	cr_assert_not_null(dom);
	rf = gfa_domain_from_xml_string(xml, &from_file, err, sizeof(err));
	rv = gfa_domain_from_libvirt("test:///default", "twonuma", &from_virt, err2, sizeof(err2));
	virDomainUndefine(dom);
	virDomainFree(dom);
	virConnectClose(conn);
	cr_assert_eq(rf, rv, "file: %d '%s'; libvirt: %d '%s'", rf, err, rv, err2);
}

/* All of <memory> in memory devices leaves no boot RAM; libvirt refuses it. */
Test(domain_xml, memory_all_in_devices_leaves_no_boot_ram)
{
	struct gfa_domain_spec s;
	char err[256] = "";

	cr_assert_eq(
		gfa_domain_from_xml_string("<domain><name>x</name><memory>2048</memory><devices>"
					   "<memory model='dimm'><target><size>2048</size></target>"
					   "</memory></devices></domain>",
					   &s, err, sizeof(err)),
		-EINVAL, "boot RAM 0 accepted: memory %llu, devices %llu",
		(unsigned long long)s.memory_bytes, (unsigned long long)s.device_memory_bytes);
}

/* The header promises a one-line message. */
Test(domain_xml, message_is_one_line)
{
	struct gfa_domain_spec s;
	char err[256] = "";

	cr_assert_eq(gfa_domain_from_xml_string(
			     "<domain><name>x</name><memory unit='GiB'>\n  2.5\n</memory>"
			     "</domain>",
			     &s, err, sizeof(err)),
		     -EINVAL);
	cr_assert_null(strchr(err, '\n'), "message spans lines: [%s]", err);
}

Test(domain_xml, memory_device_sizes_whose_sum_overflows_are_erange)
{
	struct gfa_domain_spec s;
	char err[256] = "";

#define DIMM_7EIB "<memory model='dimm'><target><size>9007199254740991</size></target></memory>"
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>x</name><memory>2048</memory><devices>" DIMM_7EIB DIMM_7EIB
				DIMM_7EIB "</devices></domain>",
			&s, err, sizeof(err)),
		-ERANGE, "accepted: devices %llu bytes (%s)",
		(unsigned long long)s.device_memory_bytes, err);
	cr_assert_not_null(strstr(err, "memory device 3 <memory model='dimm'><target><size>: the "
				       "memory devices add up to more than 16 EiB"),
			   "%s", err);
	/* one of 8 EiB is beyond libvirt's limit by itself */
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>x</name><memory>2048</memory><devices>"
			"<memory model='dimm'><target><size unit='EiB'>8</size></target></memory>"
			"</devices></domain>",
			&s, err, sizeof(err)),
		-ERANGE);
	cr_assert_not_null(strstr(err, "memory device 1 <memory model='dimm'><target><size>: "
				       "larger than 8 EiB"),
			   "%s", err);
}

/* ------------------------------------------------- libvirt's QEMU driver */

/*
 * vCPUs 3 and 5-7 are in no cell: libvirt's QEMU driver boots them in cell 0
 * (its -numa line for node 0 lists them), so the import puts them there and says so.
 */
Test(domain_xml, vcpus_in_no_cell_go_to_cell_0)
{
	static const unsigned int cell0[] = { 0, 1, 3, 5, 6, 7 }, cell1[] = { 2, 4 };
	struct gfa_domain_spec s;
	char err[256], line[512];

	cr_assert_eq(domain_load("domain-vcpus-no-cell.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert(domain_cell_cpus_are(&s.cells[0], cell0, 6));
	cr_assert(domain_cell_cpus_are(&s.cells[1], cell1, 2));
	cr_assert_eq(s.unnamed_cpus[0], 0xe8);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "vcpus-no-cell: memory 2 GiB, 8 vCPUs, 2 NUMA cells [0: cpus "
			       "0-1,3,5-7, 1 GiB; 1: cpus 2,4, 1 GiB] (vCPUs 3,5-7 are in no cell; "
			       "node 0 gets them, as libvirt's QEMU driver does), no hugepages");
	/* cells that name every vCPU are left as they are, and nothing is said */
	cr_assert_eq(domain_load("domain-numa2-hugepages.xml", &s, err, sizeof(err)), 0);
	cr_assert_eq(s.unnamed_cpus[0], 0);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_null(strstr(line, "in no cell"), "%s", line);
	/* one vCPU reads in the singular; cells without cpus leave all to cell 0 */
	cr_assert_eq(domain_try("<vcpu>2</vcpu>", MEM2,
				"<cell id='0' memory='1' unit='GiB'/>"
				"<cell id='1' cpus='1' memory='1' unit='GiB'/>",
				"", &s, err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.cells[0].cpus[0], 0x1);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_not_null(strstr(line, "(vCPU 0 is in no cell; node 0 gets it, as libvirt's "
					"QEMU driver does)"),
			   "%s", line);
}

/*
 * Without NUMA cells libvirt drops a page's nodeset='0' (the one cell is every cell):
 * the page is the default page, and the summary says why the nodeset is gone.
 */
Test(domain_xml, nodeset_0_without_numa_cells_is_dropped)
{
	struct gfa_domain_spec s;
	char err[256], line[512];
	uint64_t page = 0;

	cr_assert_eq(domain_load("domain-nodeset-no-numa.xml", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s.nr_pages, 1);
	cr_assert_eq(s.pages[0].nodeset, 0);
	cr_assert(s.pages[0].nodeset_dropped);
	cr_assert_eq(gfa_domain_cell_page_size(&s, 0, &page), 0);
	cr_assert_eq(page, 2 * MIB);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "nodeset-no-numa: memory 2 GiB, 2 vCPUs, no NUMA cells, "
			       "hugepages 2 MiB (default; nodeset='0' dropped: no NUMA cells, as "
			       "libvirt does)");
	/* a nodeset naming more than cell 0 stays, and names a cell the domain has not */
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>2</memory><memoryBacking><hugepages>"
			"<page size='2' unit='MiB' nodeset='0-1'/></hugepages></memoryBacking></domain>",
			&s, err, sizeof(err)),
		-EINVAL);
	cr_assert_str_eq(err, "domain XML string: hugepage 1 (2 MiB, nodeset='0-1'): names NUMA "
			      "cell 0, but the domain has no NUMA cells; accepted: no nodeset, or "
			      "nodeset='0'");
}

/*
 * No NUMA cells and pages of 1 GiB without nodeset and of 2 MiB with nodeset='0': once
 * the nodeset is dropped both are default pages, which libvirt refuses.
 */
Test(domain_xml, two_default_pages_are_refused)
{
	struct gfa_domain_spec s, before;
	char err[512], path[PATH_MAX], want[PATH_MAX + 512];

	memset(&s, 0x5a, sizeof(s));
	before = s;
	domain_data("domain-two-default-pages.xml", path, sizeof(path));
	cr_assert_eq(gfa_domain_from_xml_file(path, &s, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want),
		 "domain XML file '%s': hugepage 2 (2 MiB, nodeset='0' "
		 "dropped: no NUMA cells): a second page without nodeset besides hugepage 1 "
		 "(1 GiB, no nodeset), and both would back every cell; accepted: one <page> "
		 "without nodeset at most, as libvirt requires",
		 path);
	cr_assert_str_eq(err, want);
	cr_assert_arr_eq(&s, &before, sizeof(s));
}

/* A memory device on a NUMA cell the domain has not: both libvirt drivers refuse it. */
Test(domain_xml, memory_device_on_a_missing_cell_is_refused)
{
	struct gfa_domain_spec s;
	char err[512], path[PATH_MAX], want[PATH_MAX + 512];

	domain_data("domain-dimm-no-node.xml", path, sizeof(path));
	cr_assert_eq(gfa_domain_from_xml_file(path, &s, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want),
		 "domain XML file '%s': memory device 1 <memory "
		 "model='dimm'><target><node>: names NUMA cell 1, which does not exist; "
		 "accepted: cell 0",
		 path);
	cr_assert_str_eq(err, want);
	/* without NUMA cells a device may name none */
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>3</memory><devices><memory "
			"model='dimm'><target><size unit='GiB'>1</size><node>0</node></target></memory>"
			"</devices></domain>",
			&s, err, sizeof(err)),
		-EINVAL);
	cr_assert_str_eq(err,
			 "domain XML string: memory device 1 <memory model='dimm'><target>"
			 "<node>: names NUMA cell 0, but the domain has no NUMA cells; accepted: "
			 "no <node>, or <numa> cells");
	/* what libvirt reads as no node, and as cell 1 */
	cr_assert_eq(domain_try(VCPU4, MEM2, CELLS2, "", &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>3</memory><vcpu>4</vcpu><cpu><numa>" CELLS2
			"</numa></cpu><devices><memory model='dimm'><target><size unit='GiB'>1"
			"</size><node></node></target></memory><memory model='dimm'><target><size "
			"unit='GiB'>1</size><node> +1</node></target></memory></devices></domain>",
			&s, err, sizeof(err)),
		0, "%s", err);
	cr_assert_eq(s.device_memory_bytes, 2 * GIB);
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='GiB'>3</memory><vcpu>4</vcpu><cpu><numa>" CELLS2
			"</numa></cpu><devices><memory model='dimm'><target><size unit='GiB'>1"
			"</size><node>-1</node></target></memory></devices></domain>",
			&s, err, sizeof(err)),
		-EINVAL);
	cr_assert_not_null(strstr(err, "<node>: '-1' is not a cell id"), "%s", err);
}

/* libvirt keeps sizes as signed 64-bit byte counts: 8 EiB and more it refuses. */
Test(domain_xml, sizes_beyond_libvirts_limit_are_refused)
{
	struct gfa_domain_spec s;
	char err[256], line[256];

	cr_assert_eq(gfa_domain_from_xml_string(
			     "<domain><name>d</name><memory>9007199254740991</memory></domain>", &s,
			     err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.memory_bytes, (1ull << 63) - KIB);
	cr_assert_gt(gfa_domain_format(&s, line, sizeof(line)), 0);
	cr_assert_str_eq(line, "d: memory larger than 4 PiB, 1 vCPU, no NUMA cells, "
			       "no hugepages");
	cr_assert_eq(gfa_domain_from_xml_string(
			     "<domain><name>d</name><memory>9007199254740992</memory></domain>", &s,
			     err, sizeof(err)),
		     -ERANGE);
	cr_assert_str_eq(err, "domain XML string: <memory>: larger than 8 EiB; accepted: "
			      "sizes below 8 EiB (libvirt's limit)");
	cr_assert_eq(
		gfa_domain_from_xml_string(
			"<domain><name>d</name><memory unit='b'>9223372036854775807</memory></domain>",
			&s, err, sizeof(err)),
		0, "%s", err);
	cr_assert_eq(gfa_domain_from_xml_string(
			     "<domain><name>d</name><memory unit='GiB'>1</memory><cpu><numa><cell "
			     "memory='8' unit='EiB'/></numa></cpu></domain>",
			     &s, err, sizeof(err)),
		     -ERANGE);
	cr_assert_not_null(strstr(err, "<cell id='0' memory>: larger than 8 EiB"), "%s", err);
}

Test(domain_units, sizes_read_as_people_read_them)
{
	static const struct {
		uint64_t bytes;
		const char *text;
	} cases[] = {
		{ 0, "0 bytes" },
		{ 1, "1 bytes" },
		{ 4 * GIB, "4 GiB" },
		{ 1536 * MIB, "1536 MiB" },
		{ 9999 * KIB, "9999 KiB" },
		{ 10000 * KIB, "10000 KiB (9.8 MiB)" },
		{ 1464845 * KIB, "1464845 KiB (1.4 GiB)" },
		{ 4ull << 50, "4 PiB" },
		{ (4ull << 50) + KIB, "larger than 4 PiB" },
		{ (1ull << 63) - KIB, "larger than 4 PiB" },
		{ UINT64_MAX, "larger than 4 PiB" },
	};
	char buf[64];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		cr_assert_eq(gfa_domain_format_size(cases[i].bytes, buf, sizeof(buf)),
			     (int)strlen(cases[i].text), "%llu",
			     (unsigned long long)cases[i].bytes);
		cr_assert_str_eq(buf, cases[i].text);
	}
	cr_assert_eq(gfa_domain_format_size(UINT64_MAX, buf, 8), -ENOSPC);
	cr_assert_str_eq(buf, "larger ");
}

/*
 * Every refusal reads "<origin>: <where>: <what>; accepted: <what would be>" on one
 * line, XML that is not well-formed with one line number.
 */
Test(domain_xml, refusals_have_one_form)
{
	static const char *const bad[] = {
		"<domain><name>x</name>\n<memory>1</memory>\n</domian>",
		"<domain><name>x</name>\n<memory>1",
		"<domain><name>x</name><memory>1</memory><vcpu>2</vcpu></domain><x/>",
		"<domain><name>x</name><memory unit='GiBs'>1</memory></domain>",
		"<domain><name>x</name><memory>\n  2.5\n</memory></domain>",
		"<domain><name>x</name><memory>1</memory><vcpu current='3'>2</vcpu></domain>",
		"<network/>",
		"<domain><name>x</name><memory unit='GiB'>1</memory><devices><memory><target>"
		"<size unit='GiB'>2</size></target></memory></devices></domain>",
	};
	struct gfa_domain_spec s;
	char err[512];
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		cr_assert_neq(gfa_domain_from_xml_string(bad[i], &s, err, sizeof(err)), 0, "%s",
			      bad[i]);
		domain_assert_one_form(err, "domain XML string: ");
		if (!strncmp(err, "domain XML string: line ", 24))
			cr_assert_null(strstr(err + 24, "line"), "two line numbers: %s", err);
	}
}

/*
 * What gfa refuses for libvirt's reasons libvirt's own (test) driver refuses too, and
 * what it changes as libvirt does reads the same through libvirt.
 */
/* libvirt's default handler prints the refusals that test expects. */
static void domain_virt_quiet(void *opaque, virErrorPtr error)
{
	(void)opaque;
	(void)error;
}

Test(domain_libvirt, refusals_are_libvirts)
{
	static const char *const refused[] = {
		"domain-two-default-pages.xml",
		"domain-dimm-no-node.xml",
	};
	struct gfa_domain_spec s;
	virConnectPtr conn;
	virDomainPtr dom;
	char err[512], *xml;
	unsigned int i;

	virSetErrorFunc(NULL, domain_virt_quiet);
	conn = virConnectOpen("test:///default");
	cr_assert_not_null(conn);
	for (i = 0; i < ARRAY_SIZE(refused); i++) {
		cr_assert_eq(domain_load(refused[i], &s, err, sizeof(err)), -EINVAL);
		xml = domain_slurp(refused[i]);
		dom = virDomainDefineXML(conn, xml);
		free(xml);
		cr_assert_null(dom, "libvirt defines %s, which gfa refuses (%s)", refused[i], err);
	}
	xml = domain_slurp("domain-nodeset-no-numa.xml");
	dom = virDomainDefineXML(conn, xml);
	free(xml);
	cr_assert_not_null(dom);
	cr_assert_eq(gfa_domain_from_libvirt("test:///default", "nodeset-no-numa", &s, err,
					     sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(s.pages[0].nodeset, 0, "libvirt keeps no nodeset either");
	virDomainUndefine(dom);
	virDomainFree(dom);
	virConnectClose(conn);
}
