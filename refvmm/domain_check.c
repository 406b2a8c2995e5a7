// SPDX-License-Identifier: MIT
/*
 * The domain import's validator: a parsed spec checked the way libvirt would (cells,
 * their CPUs, page sizes and nodesets, memory sizes, vCPUs).
 */
#define _GNU_SOURCE
#include "refvmm/domain_internal.h"

/* The first vCPU of @c at or above @vcpus, or -1. */
static int cpu_beyond(const struct gfa_domain_cell *c, unsigned int vcpus)
{
	unsigned int w;

	for (w = vcpus / 64; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
		uint64_t beyond = c->cpus[w];

		if (w == vcpus / 64)
			beyond &= ~((1ull << (vcpus % 64)) - 1);
		if (beyond)
			return w * 64 + __builtin_ctzll(beyond);
	}
	return -1;
}

/* The first vCPU cells @a and @b share, or -1. */
static int cpu_shared(const struct gfa_domain_cell *a, const struct gfa_domain_cell *b)
{
	unsigned int w;

	for (w = 0; w < GFA_DOMAIN_MAX_VCPUS / 64; w++)
		if (a->cpus[w] & b->cpus[w])
			return w * 64 + __builtin_ctzll(a->cpus[w] & b->cpus[w]);
	return -1;
}

static int check_cells(const struct gfa_domain_spec *s, const struct msgs *m)
{
	char list[GFA_DOMAIN_MAX_VCPUS * 6];
	unsigned int i, j;
	int cpu;

	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		domain_format_bitmap(c->cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
		for (j = 0; j < i; j++) {
			cpu = cpu_shared(c, &s->cells[j]);
			if (cpu >= 0)
				return fail(m, -EINVAL,
					    "<cell id='%u' cpus='%s'>: shares vCPU %d "
					    "with cell %u; accepted: each vCPU in one cell",
					    i, list, cpu, j);
		}
		cpu = cpu_beyond(c, s->vcpus);
		if (cpu >= 0)
			return fail(m, -EINVAL,
				    "<cell id='%u' cpus='%s'>: names vCPU %d, but "
				    "<vcpu> is %u; accepted: vCPUs 0-%u",
				    i, list, cpu, s->vcpus, s->vcpus - 1);
	}
	return 0;
}

/*
 * libvirt's QEMU driver boots the vCPUs that no cell names in cell 0 (it fills cell 0
 * up to all vCPUs the other cells do not name): the same here, and unnamed_cpus keeps
 * which they were for the summary.
 */
static void fill_cell0(struct gfa_domain_spec *s)
{
	struct gfa_domain_cell *c0 = &s->cells[0];
	unsigned int i, w;

	if (!s->nr_cells)
		return;
	for (w = 0; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
		uint64_t all = w < s->vcpus / 64  ? ~0ull :
			       w == s->vcpus / 64 ? (1ull << (s->vcpus % 64)) - 1 :
						    0;

		for (i = 0; i < s->nr_cells; i++)
			all &= ~s->cells[i].cpus[w];
		s->unnamed_cpus[w] = all;
		c0->cpus[w] |= all;
	}
	c0->nr_cpus = domain_popcount_bits(c0->cpus, GFA_DOMAIN_MAX_VCPUS / 64);
}

/* Without NUMA cells libvirt drops a nodeset of cell 0 alone: that cell is all cells. */
static void drop_nodesets(struct gfa_domain_spec *s)
{
	unsigned int i;

	for (i = 0; !s->nr_cells && i < s->nr_pages; i++) {
		if (s->pages[i].nodeset != 1)
			continue;
		s->pages[i].nodeset = 0;
		s->pages[i].nodeset_dropped = true;
	}
}

/* "hugepage 2 (2 MiB, nodeset='1')": page @i as messages name it. */
void domain_page_where(const struct gfa_domain_spec *s, unsigned int i, char *buf, size_t len)
{
	const struct gfa_domain_page *p = &s->pages[i];
	char list[GFA_DOMAIN_MAX_CELLS * 4];

	domain_format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, list, sizeof(list));
	if (p->nodeset)
		snprintf(buf, len, "hugepage %u (%s, nodeset='%s')", i + 1, human(p->size_bytes).s,
			 list);
	else
		snprintf(buf, len, "hugepage %u (%s, %s)", i + 1, human(p->size_bytes).s,
			 p->nodeset_dropped ? "nodeset='0' dropped: no NUMA cells" : "no nodeset");
}

/* libvirt's rules for two pages: nodesets share no cell, one page has none at most. */
static int check_page_pair(const struct gfa_domain_spec *s, unsigned int i, unsigned int j,
			   const struct msgs *m)
{
	const struct gfa_domain_page *p = &s->pages[i], *q = &s->pages[j];
	char here[PAGE_WHERE_MAX], there[PAGE_WHERE_MAX];

	if (!(p->nodeset & q->nodeset) && (p->nodeset || q->nodeset))
		return 0;
	domain_page_where(s, i, here, sizeof(here));
	domain_page_where(s, j, there, sizeof(there));
	if (p->nodeset)
		return fail(m, -EINVAL,
			    "%s: shares cell %d with %s; accepted: nodesets that "
			    "share no cell",
			    here, __builtin_ctzll(p->nodeset & q->nodeset), there);
	return fail(m, -EINVAL,
		    "%s: a second page without nodeset besides %s, and both "
		    "would back every cell; accepted: one <page> without nodeset at most, as "
		    "libvirt requires",
		    here, there);
}

static int check_page_cells(const struct gfa_domain_spec *s, unsigned int i, const struct msgs *m)
{
	uint64_t cells = s->nr_cells ? ~0ull >> (64 - s->nr_cells) : 0;
	uint64_t beyond = s->pages[i].nodeset & ~cells;
	char here[PAGE_WHERE_MAX];

	if (!beyond)
		return 0;
	domain_page_where(s, i, here, sizeof(here));
	if (!s->nr_cells)
		return fail(m, -EINVAL,
			    "%s: names NUMA cell %d, but the domain has no NUMA "
			    "cells; accepted: no nodeset, or nodeset='0'",
			    here, __builtin_ctzll(beyond));
	return fail(m, -EINVAL,
		    "%s: names NUMA cell %d, which does not exist; accepted: "
		    "%s",
		    here, __builtin_ctzll(beyond), domain_cell_range(s->nr_cells).s);
}

static int check_pages(const struct gfa_domain_spec *s, const struct msgs *m)
{
	unsigned int i, j;
	char here[PAGE_WHERE_MAX];
	int rc;

	for (i = 0; i < s->nr_pages; i++) {
		/* any other size is defined, as libvirt does: gfa_domain_check_pages()
		 * is the start-time check (docs/decisions.md, entry 24) */
		if (!s->pages[i].size_bytes) {
			domain_page_where(s, i, here, sizeof(here));
			return fail(m, -EINVAL, "%s: size zero; accepted: a size above 0", here);
		}
		for (j = 0; j < i; j++) {
			rc = check_page_pair(s, i, j, m);
			if (rc)
				return rc;
		}
		rc = check_page_cells(s, i, m);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Guest memory the way libvirt's QEMU driver sizes it.  Defining or creating a domain
 * parses it with VIR_DOMAIN_DEF_PARSE_ABI_UPDATE, under which virDomainDefPostParseMemory
 * sets the total to the NUMA cells' sum plus the memory devices, whatever <memory> said;
 * QEMU then boots with -m = the total minus the devices (virDomainDefGetMemoryInitial):
 * the cells' sum.  Without cells <memory> stands and the devices must fit in it.
 */
static int size_memory(struct gfa_domain_spec *s, const struct msgs *m)
{
	uint64_t sum = s->device_memory_bytes;
	unsigned int i;

	s->stated_memory_bytes = s->memory_bytes;
	for (i = 0; i < s->nr_cells; i++) {
		if (s->cells[i].memory_bytes > UINT64_MAX - sum)
			return fail(m, -ERANGE,
				    "<numa>: the cells and memory devices add up to "
				    "more than 16 EiB; accepted: a sum below 16 EiB");
		sum += s->cells[i].memory_bytes;
	}
	if (s->nr_cells)
		s->memory_bytes = sum;
	if (!s->memory_bytes) /* the XML is checked at parse: libvirt's figure */
		return fail(m, -EINVAL, "<memory>: zero; accepted: a size above 0");
	if (s->device_memory_bytes == s->memory_bytes)
		return fail(m, -EINVAL,
			    "<devices><memory>: all memory is in memory devices "
			    "(%s), no boot RAM; accepted: devices smaller than <memory>",
			    human(s->device_memory_bytes).s);
	if (s->device_memory_bytes > s->memory_bytes)
		return fail(m, -EINVAL,
			    "<devices><memory>: memory devices (%s) exceed "
			    "<memory> (%s); accepted: devices smaller than <memory>",
			    human(s->device_memory_bytes).s, human(s->memory_bytes).s);
	/* libvirt clamps a balloon target above the total the same way. */
	if (!s->current_memory_bytes || s->current_memory_bytes > s->memory_bytes)
		s->current_memory_bytes = s->memory_bytes;
	return 0;
}

/* The vCPU counts; the XML's are checked at parse, these may be libvirt's figures. */
static int check_vcpus(struct gfa_domain_spec *s, const struct msgs *m)
{
	if (!s->vcpus)
		return fail(m, -EINVAL, "<vcpu>: 0 is below 1; accepted: 1-%d",
			    GFA_DOMAIN_MAX_VCPUS);
	if (s->vcpus > GFA_DOMAIN_MAX_VCPUS)
		return fail(m, -ERANGE, "<vcpu>: larger than %d; accepted: 1-%d",
			    GFA_DOMAIN_MAX_VCPUS, GFA_DOMAIN_MAX_VCPUS);
	if (!s->current_vcpus)
		s->current_vcpus = s->vcpus;
	if (s->current_vcpus > s->vcpus)
		return fail(m, -EINVAL,
			    "<vcpu current='%u'>: current vCPUs exceed the "
			    "maximum, %u; accepted: 1-%u",
			    s->current_vcpus, s->vcpus, s->vcpus);
	return 0;
}

int domain_check_spec(struct gfa_domain_spec *s, const struct msgs *m)
{
	int rc;

	rc = size_memory(s, m);
	if (!rc)
		rc = check_vcpus(s, m);
	if (!rc)
		rc = check_cells(s, m);
	if (rc)
		return rc;
	fill_cell0(s);
	drop_nodesets(s);
	return check_pages(s, m);
}
